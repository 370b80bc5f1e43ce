/* test_cli.c: the attnc command end to end: exit codes (0 ok, 1 usage,
 * 2 bad input), diagnostics on stderr, chunked runs equal one-shot runs,
 * and no output file (nor temporary) left behind by any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#define SPEC(name) ATTNC_SOURCE_DIR "/specs/" name ".yaml"

typedef cli_fixture fixture;

/* Runs attnc with up to 15 arguments; returns the exit code. */
#define ATTNC(f, ...) attnc_run((f), (const char *[]){ATTNC_BIN, __VA_ARGS__, NULL})
static int attnc_run(fixture *f, const char **argv) {
    return run_cmd(argv, f->out, f->err);
}

static char *captured(const char *path) {
    char *s = read_file(path, NULL);
    assert_non_null(s);
    return s;
}

static void assert_stderr_has(fixture *f, const char *want) {
    char *s = captured(f->err);
    if (!strstr(s, want))
        fail_msg("stderr lacks '%s':\n%s", want, s);
    free(s);
}

static float *read_y(const char *path, int64_t rows, int64_t cols) {
    attn_st *st;
    attn_msg m;
    assert_int_equal(attn_st_open(path, &st, &m), ATTN_OK);
    float *y;
    int64_t n;
    assert_int_equal(attn_st_read_rows_f32(st, "y", cols, &y, &n, &m), ATTN_OK);
    assert_int_equal(n, rows);
    assert_string_equal(attn_st_find(st, "y")->dtype, "F32");
    attn_st_close(st);
    return y;
}

static void cli_usage_errors_exit_1(void **state) {
    fixture *f = *state;
    assert_int_equal(attnc_run(f, (const char *[]){ATTNC_BIN, NULL}), 1);
    assert_int_equal(ATTNC(f, "frobnicate"), 1);
    assert_stderr_has(f, "unknown command 'frobnicate'");
    assert_int_equal(ATTNC(f, "check"), 1);
    assert_int_equal(ATTNC(f, "check", SPEC("seed"), "--bogus"), 1);
    assert_stderr_has(f, "unknown option '--bogus'");
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", "w"), 1);
    assert_stderr_has(f, "--weights, --input and -o are required");
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--tokens", "0", "-o", "x"), 1);
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--tokens", "3x", "-o", "x"), 1);
    assert_int_equal(ATTNC(f, "gen-weights", SPEC("seed"), "--dtype", "f64", "-o", "x"), 1);
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights"), 1);
    assert_stderr_has(f, "needs a value");
    /* typos get the nearest command or option */
    assert_int_equal(ATTNC(f, "chek", SPEC("seed")), 1);
    assert_stderr_has(f, "unknown command 'chek'; did you mean 'check'?");
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weigths", "w"), 1);
    assert_stderr_has(f, "unknown option '--weigths'; did you mean '--weights'?");
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--kv-dtpye=f16"), 1);
    assert_stderr_has(f, "unknown option '--kv-dtpye'; did you mean '--kv-dtype'?");
    assert_int_equal(ATTNC(f, "help", "runn"), 1);
    assert_stderr_has(f, "unknown command 'runn'; did you mean 'run'?");
    /* a CPU name is input (exit 2), and a typo of one gets the nearest */
    assert_int_equal(
        ATTNC(f, "compile", SPEC("seed"), "--cpu", "skylakx", "-o", path_in(f->dir, "x.o")), 2);
    assert_stderr_has(f, "unknown CPU 'skylakx' for target x86-64; did you mean 'skylake'?");
    assert_int_equal(dir_count(f->dir), 0);
}

/* attnc help COMMAND is COMMAND --help; the overview lists help and --version */
static void cli_help_command(void **state) {
    fixture *f = *state;
    assert_int_equal(ATTNC(f, "help", "run"), 0);
    char *s = captured(f->out);
    assert_non_null(strstr(s, "usage: attnc run SPEC --weights W"));
    free(s);
    assert_int_equal(ATTNC(f, "help"), 0);
    s = captured(f->out);
    assert_non_null(strstr(s, "help [COMMAND]"));
    assert_non_null(strstr(s, "--version"));
    free(s);
    assert_int_equal(ATTNC(f, "--version"), 0);
    s = captured(f->out);
    assert_true(strncmp(s, "attnc ", 6) == 0);
    free(s);
}

static void cli_every_command_has_help(void **state) {
    fixture *f = *state;
    const char *cmds[] = {"check",       "ir",        "opt",   "compile",  "run",  "import",
                          "gen-weights", "gen-input", "bench", "roofline", "cache"};
    for (int i = 0; i < 11; i++) {
        assert_int_equal(ATTNC(f, cmds[i], "--help"), 0);
        char *s = captured(f->out);
        assert_non_null(strstr(s, "usage: attnc"));
        free(s);
    }
    assert_int_equal(ATTNC(f, "--help"), 0);
    assert_int_equal(ATTNC(f, "--version"), 0);
}

/* The kernel cache from the command line: run -v says miss then hit,
 * --no-cache neither reads nor writes, cache info counts and clear
 * empties (the directory named by --dir or $ATTNC_CACHE_DIR). */
static void cli_kernel_cache(void **state) {
    fixture *f = *state;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/kc", f->dir);
    setenv("ATTNC_CACHE_DIR", dir, 1);
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    const char *y = path_in(f->dir, "y.safetensors");
    assert_int_equal(ATTNC(f, "gen-weights", SPEC("seed"), "-o", w), 0);
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--tokens", "5", "-o", x), 0);
    assert_int_equal(
        ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", y, "-v", "--no-cache"),
        0);
    assert_stderr_has(f, "cache off");
    assert_int_equal(ATTNC(f, "cache", "info"), 0);
    char *s = captured(f->out);
    assert_non_null(strstr(s, "entries: 0"));
    assert_non_null(strstr(s, dir));
    free(s);
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", y, "-v"), 0);
    assert_stderr_has(f, "cache miss");
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", y, "-v"), 0);
    assert_stderr_has(f, "cache hit");
    /* a hit lowers and compiles nothing: -v names no stage it skipped */
    s = captured(f->err);
    if (strstr(s, "threads") || strstr(s, "codegen"))
        fail_msg("run -v on a hit names stages it skipped:\n%s", s);
    free(s);
    assert_int_equal(ATTNC(f, "compile", SPEC("seed"), "-o", path_in(f->dir, "s.o")), 0);
    assert_int_equal(ATTNC(f, "cache", "info", "--dir", dir), 0);
    s = captured(f->out);
    assert_non_null(strstr(s, "entries: 2")); /* the JIT's and the object's */
    free(s);
    /* a damaged entry: a warning on stderr, the run succeeds */
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "for e in %s/*.attnk; do : > \"$e\"; done", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", y), 0);
    assert_stderr_has(f, "warning: damaged kernel cache entry (empty, 0 bytes)");
    assert_int_equal(ATTNC(f, "cache", "clear"), 0);
    s = captured(f->out);
    assert_non_null(strstr(s, "removed 2 entries"));
    free(s);
    assert_int_equal(ATTNC(f, "cache", "info"), 0);
    s = captured(f->out);
    assert_non_null(strstr(s, "entries: 0"));
    free(s);
    assert_int_equal(ATTNC(f, "cache", "bogus"), 1);
    assert_stderr_has(f, "expected info or clear");
    assert_int_equal(ATTNC(f, "cache", "infos"), 1);
    assert_stderr_has(f, "unknown action 'infos'; did you mean 'info'?");
    assert_int_equal(ATTNC(f, "cache", "info", "--dir", w), 2); /* a file, not a directory */
    unsetenv("ATTNC_CACHE_DIR");
}

static void cli_check_prints_normalized_spec(void **state) {
    fixture *f = *state;
    assert_int_equal(ATTNC(f, "check", SPEC("llama3_8b")), 0);
    char *s = captured(f->out);
    assert_non_null(strstr(s, "name: llama3_8b\n"));
    assert_non_null(strstr(s, "    type: llama3\n"));
    assert_non_null(strstr(s, "  base: 500000\n"));
    assert_non_null(strstr(s, "sliding_window: 0\n"));
    /* the output is itself a valid spec that checks to the same text */
    const char *again = path_in(f->dir, "again.yaml");
    write_file(again, s, strlen(s));
    assert_int_equal(ATTNC(f, "check", again), 0);
    char *s2 = captured(f->out);
    assert_string_equal(s, s2);
    free(s);
    free(s2);
}

static void cli_check_bad_spec_exits_2_with_location(void **state) {
    fixture *f = *state;
    const char *bad = ATTNC_SOURCE_DIR "/tests/specs/bad/heads_not_multiple.yaml";
    assert_int_equal(ATTNC(f, "check", bad), 2);
    assert_stderr_has(f, "heads_not_multiple.yaml:3:12: error: heads (12) must be a multiple of "
                         "kv_groups (5)");
    assert_int_equal(ATTNC(f, "check", path_in(f->dir, "missing.yaml")), 2);
    assert_stderr_has(f, "missing.yaml: error: cannot open spec");
}

static void cli_run_chunked_equals_one_shot(void **state) {
    fixture *f = *state;
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    assert_int_equal(ATTNC(f, "gen-weights", SPEC("seed"), "-o", w, "--seed", "3"), 0);
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--tokens", "23", "-o", x), 0);
    const char *y1 = path_in(f->dir, "y1.safetensors");
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", y1), 0);
    char *s = captured(f->out);
    assert_non_null(strstr(s, "seed: 23 tokens"));
    free(s);
    float *one = read_y(y1, 23, 768);
    const char *chunks[] = {"1", "3", "7"};
    for (int i = 0; i < 3; i++) {
        const char *yc = path_in(f->dir, "yc.safetensors");
        assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", yc,
                               "--chunk", chunks[i], "--engine", "reference"),
                         0);
        float *c = read_y(yc, 23, 768);
        assert_true(rel_err(c, one, 23 * 768) <= 1e-5);
        free(c);
    }
    free(one);
    assert_int_equal(dir_count(f->dir), 4); /* w, x, y1, yc: no temporaries */
}

static void cli_prefix_and_dtypes_round_trip(void **state) {
    fixture *f = *state;
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    const char *y = path_in(f->dir, "y.safetensors");
    assert_int_equal(ATTNC(f, "gen-weights", SPEC("qwen2_7b"), "-o", w, "--dtype", "bf16",
                           "--prefix", "model.layers.0.self_attn."),
                     0);
    assert_int_equal(
        ATTNC(f, "gen-input", SPEC("qwen2_7b"), "--tokens", "2", "-o", x, "--dtype", "f16"), 0);
    assert_int_equal(ATTNC(f, "run", SPEC("qwen2_7b"), "--weights", w, "--input", x, "-o", y), 2);
    assert_stderr_has(f, "missing tensor 'q_proj.weight'");
    assert_int_equal(ATTNC(f, "run", SPEC("qwen2_7b"), "--weights", w, "--input", x, "-o", y,
                           "--prefix", "model.layers.0.self_attn."),
                     0);
    float *out = read_y(y, 2, 3584);
    double sq = 0;
    for (int i = 0; i < 2 * 3584; i++)
        sq += (double)out[i] * out[i];
    assert_true(sq > 0 && isfinite(sq));
    free(out);
}

/* gen-weights --dtype q8_0/q4_0 writes ggml's blocks; run reads them into
 * a spec of that dtype (and quantizes f32 weights into it at load): the
 * jit and reference engines agree, chunked or not. Activations take no
 * block format. */
static void cli_quantized_weights(void **state) {
    fixture *f = *state;
    const char *x = path_in(f->dir, "x.safetensors"), *wf = path_in(f->dir, "wf.safetensors");
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--tokens", "19", "-o", x), 0);
    assert_int_equal(ATTNC(f, "gen-weights", SPEC("seed"), "-o", wf), 0);
    const char *dts[] = {"q8_0", "q4_0"};
    for (int i = 0; i < 2; i++) {
        char spec[1024], text[256];
        snprintf(spec, sizeof spec, "%s/seed_%s.yaml", f->dir, dts[i]);
        int n = snprintf(text, sizeof text,
                         "name: seed_%s\nheads: 12\nkv_groups: 4\nhead_dim: 64\ncausal: true\n"
                         "rope: {base: 10000}\ndtype: %s\n",
                         dts[i], dts[i]);
        write_file(spec, text, (size_t)n);
        const char *w = path_in(f->dir, "w.safetensors");
        assert_int_equal(ATTNC(f, "gen-weights", spec, "-o", w, "--dtype", dts[i]), 0);
        attn_st *st;
        attn_msg m;
        assert_int_equal(attn_st_open(w, &st, &m), ATTN_OK);
        const attn_st_info *q = attn_st_find(st, "q_proj.weight");
        assert_string_equal(q->dtype, "U8");
        assert_int_equal(q->shape[1], 768 / 32 * (i ? 18 : 34));
        attn_st_close(st);
        const char *yj = path_in(f->dir, "yj.safetensors"), *yr = path_in(f->dir, "yr.safetensors");
        assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "-o", yj), 0);
        assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "-o", yr, "--engine",
                               "reference", "--chunk", "5"),
                         0);
        float *a = read_y(yj, 19, 768), *b = read_y(yr, 19, 768);
        assert_true(rel_err(a, b, 19 * 768) <= 1e-4);
        free(b);
        /* the f32 file of the same seed, quantized at load: the same blocks */
        assert_int_equal(ATTNC(f, "run", spec, "--weights", wf, "--input", x, "-o", yr), 0);
        b = read_y(yr, 19, 768);
        assert_memory_equal(a, b, 19 * 768 * sizeof(float));
        free(a);
        free(b);
        assert_int_equal(ATTNC(f, "gen-input", spec, "--tokens", "2", "-o", x, "--dtype", dts[i]),
                         1);
        assert_stderr_has(f, "--dtype expects f32, f16, bf16, found '");
    }
    /* a q8_0 cache exists, a q4_0 one does not */
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--kv-dtype", "q4_0"), 2);
    assert_stderr_has(f, "kv_cache.dtype q4_0 is not supported (f32, f16, bf16 or q8_0)");
}

static void cli_bad_inputs_exit_2_and_write_nothing(void **state) {
    fixture *f = *state;
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    const char *y = path_in(f->dir, "y.safetensors");
    assert_int_equal(ATTNC(f, "gen-weights", SPEC("seed"), "-o", w), 0);
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--tokens", "4", "-o", x), 0);
    /* weights of another spec: shape mismatch naming both shapes */
    assert_int_equal(ATTNC(f, "run", SPEC("mistral_7b"), "--weights", w, "--input", x, "-o", y), 2);
    assert_stderr_has(f, "tensor 'q_proj.weight' has shape [768, 768], expected [4096, 4096]");
    /* weights in another layout: the name this layout looks for */
    assert_int_equal(ATTNC(f, "run", SPEC("falcon_7b"), "--weights", w, "--input", x, "-o", y), 2);
    assert_stderr_has(f, "w.safetensors: missing tensor 'query_key_value.weight' (weights.layout "
                         "falcon)");
    /* input file without 'x' (the weights file) */
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", w, "-o", y), 2);
    assert_stderr_has(f, "missing tensor 'x'");
    /* input of the wrong width */
    const char *x2 = path_in(f->dir, "x2.safetensors");
    assert_int_equal(ATTNC(f, "gen-input", SPEC("falcon_7b"), "--tokens", "2", "-o", x2), 0);
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x2, "-o", y), 2);
    assert_stderr_has(f, "tensor 'x' has shape [2, 4544], expected [rows >= 1, 768]");
    /* a truncated weights file */
    size_t n;
    char *b = read_file(w, &n);
    const char *wt = path_in(f->dir, "wt.safetensors");
    write_file(wt, b, n / 2);
    free(b);
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", wt, "--input", x, "-o", y), 2);
    assert_stderr_has(f, "out of range");
    /* a bad spec */
    const char *bad = ATTNC_SOURCE_DIR "/tests/specs/bad/unknown_key.yaml";
    assert_int_equal(ATTNC(f, "run", bad, "--weights", w, "--input", x, "-o", y), 2);
    assert_stderr_has(f, "did you mean 'kv_groups'?");
    /* an unwritable output path */
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o",
                           path_in(f->dir, "no/dir/y.safetensors")),
                     2);
    assert_int_equal(
        ATTNC(f, "gen-weights", SPEC("seed"), "-o", path_in(f->dir, "no/dir/w.safetensors")), 2);
    assert_int_equal(dir_count(f->dir), 4); /* w, x, x2, wt: no y, no temporaries */
}

static void cli_failure_keeps_an_existing_output(void **state) {
    fixture *f = *state;
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    const char *y = path_in(f->dir, "y.safetensors");
    write_file(y, "precious", 8);
    assert_int_equal(ATTNC(f, "gen-weights", SPEC("seed"), "-o", w), 0);
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", w, "-o", y), 2);
    size_t n;
    char *b = read_file(y, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(b, "precious", 8);
    free(b);
    (void)x;
}

static void cli_chunk_needs_causal_and_tokens_fit_the_cache(void **state) {
    fixture *f = *state;
    const char *spec = path_in(f->dir, "enc.yaml");
    const char *text = "name: enc\nheads: 2\nhead_dim: 8\ncausal: false\n"
                       "kv_cache: {max_tokens: 16}\n";
    write_file(spec, text, strlen(text));
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    const char *y = path_in(f->dir, "y.safetensors");
    assert_int_equal(ATTNC(f, "gen-weights", spec, "-o", w), 0);
    assert_int_equal(ATTNC(f, "gen-input", spec, "--tokens", "5", "-o", x), 0);
    assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "-o", y, "--chunk", "2"),
                     1);
    assert_stderr_has(f, "--chunk needs a causal spec");
    assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "-o", y), 0);
    assert_int_equal(ATTNC(f, "gen-input", spec, "--tokens", "17", "-o", x), 0);
    assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "-o", y), 2);
    assert_stderr_has(f, "'x' has 17 tokens; kv_cache.max_tokens");
    assert_int_equal(
        ATTNC(f, "run", spec, "--weights", w, "--input", x, "-o", y, "--engine", "magic"), 1);
}

/* Cross-attention end to end (Whisper's spec): gen-weights leaves out
 * k_proj.bias, gen-input writes x and the memory, run with --memory gives
 * the reference's y, token by token too; and the errors of --memory. */
static void cli_cross_attention_run(void **state) {
    fixture *f = *state;
    const char *spec = SPEC("whisper_large_v3_cross");
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    const char *y = path_in(f->dir, "y.safetensors"), *yc = path_in(f->dir, "yc.safetensors");
    assert_int_equal(ATTNC(f, "gen-weights", spec, "-o", w), 0);
    attn_st *st;
    attn_msg m;
    assert_int_equal(attn_st_open(w, &st, &m), ATTN_OK);
    assert_null(attn_st_find(st, "k_proj.bias"));
    assert_non_null(attn_st_find(st, "v_proj.bias"));
    assert_non_null(attn_st_find(st, "out_proj.bias"));
    attn_st_close(st);
    assert_int_equal(ATTNC(f, "gen-input", spec, "--tokens", "5", "--memory-rows", "40", "-o", x),
                     0);
    assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "--memory", x, "-o", y),
                     0);
    float *one = read_y(y, 5, 1280);
    const char *how[][2] = {{"--chunk", "1"}, {"--engine", "reference"}};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "--memory", x, "-o",
                               yc, how[i][0], how[i][1]),
                         0);
        float *other = read_y(yc, 5, 1280);
        assert_true(rel_err(other, one, 5 * 1280) <= 1e-4);
        free(other);
    }
    free(one);
    assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "-o", yc), 1);
    assert_stderr_has(f, "has cross_attention: give its memory with --memory");
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--memory-rows", "3", "-o", yc), 1);
    assert_stderr_has(f, "--memory-rows is for cross-attention");
    /* a memory of the wrong width, a missing one, one with too many rows */
    const char *bad = path_in(f->dir, "bad.safetensors");
    assert_int_equal(
        ATTNC(f, "gen-input", SPEC("whisper_large_v3_cross"), "--memory-rows", "1501", "-o", bad),
        0);
    assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "--memory", bad, "-o", yc),
                     2);
    assert_stderr_has(f, "'memory' has 1501 rows; kv_cache.max_tokens");
    assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "--memory", w, "-o", yc),
                     2);
    assert_stderr_has(f, "memory");
    /* --check-finite covers the memory too */
    static float nan_rows[2 * 1280];
    nan_rows[1300] = NAN;
    attn_st_tensor t = {"memory", ATTN_DTYPE_F32, 2, {2, 1280}, nan_rows};
    assert_int_equal(attn_st_write(bad, &t, 1, &m), ATTN_OK);
    assert_int_equal(ATTNC(f, "run", spec, "--weights", w, "--input", x, "--memory", bad, "-o", yc,
                           "--check-finite"),
                     2);
    assert_stderr_has(f, "tensor 'memory' holds NaN at element 1300");
    assert_int_equal(dir_count(f->dir), 5); /* w, x, y, yc, bad: no temporaries */
}

/* attnc opt: ir's text read back and run through a pass prints what ir
 * prints after that pass; usage and input errors exit 1 and 2. */
static void cli_opt_runs_a_pass(void **state) {
    fixture *f = *state;
    const char *g = path_in(f->dir, "g.ir"), *want = path_in(f->dir, "want.ir");
    assert_int_equal(ATTNC(f, "ir", SPEC("llama3_8b"), "--after", "fold_scale"), 0);
    char *before = captured(f->out);
    write_file(g, before, strlen(before));
    free(before);
    assert_int_equal(ATTNC(f, "ir", SPEC("llama3_8b"), "--after", "rope_epilogue"), 0);
    char *after = captured(f->out);
    write_file(want, after, strlen(after));
    assert_int_equal(ATTNC(f, "opt", g, "--spec", SPEC("llama3_8b"), "--pass", "rope_epilogue"), 0);
    char *got = captured(f->out);
    assert_string_equal(got, after);
    free(got);
    /* the text's config lines serve without --spec */
    assert_int_equal(ATTNC(f, "opt", g, "--pass", "rope_epilogue"), 0);
    got = captured(f->out);
    assert_string_equal(got, after);
    free(got);
    free(after);
    assert_int_equal(ATTNC(f, "opt"), 1);
    assert_stderr_has(f, "expected one FILE.ir");
    assert_int_equal(ATTNC(f, "opt", g, "--spec", SPEC("llama3_8b"), "--pass", "rope_epilog"), 1);
    assert_stderr_has(f, "unknown pass 'rope_epilog'");
    assert_int_equal(ATTNC(f, "opt", g, "--spec", SPEC("seed")), 2);
    assert_stderr_has(f, "the config lines and the spec differ in name");
}

/* --shard: run's partial outputs of shards sum to the whole block's y
 * (jit and reference engines, 2 and 4 shards of seed's 4 K/V groups),
 * compile's header names the shard, bad shards exit 1 or 2. */
static void cli_shards_sum_to_whole(void **state) {
    fixture *f = *state;
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    const char *y = path_in(f->dir, "y.safetensors"), *ys = path_in(f->dir, "ys.safetensors");
    assert_int_equal(ATTNC(f, "gen-weights", SPEC("seed"), "-o", w, "--seed", "5"), 0);
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--tokens", "9", "-o", x), 0);
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", y), 0);
    float *whole = read_y(y, 9, 768);
    const char *two[] = {"0/2", "1/2"}, *four[] = {"0/4", "1/4", "2/4", "3/4"};
    for (int ways = 0; ways < 2; ways++) {
        float *sum = calloc(9 * 768, sizeof(float));
        for (int k = 0; k < (ways ? 4 : 2); k++) {
            assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", ys,
                                   "--shard", ways ? four[k] : two[k], "--engine",
                                   ways ? "reference" : "jit"),
                             0);
            float *part = read_y(ys, 9, 768);
            for (int e = 0; e < 9 * 768; e++)
                sum[e] += part[e];
            free(part);
        }
        double err = rel_err(sum, whole, 9 * 768);
        if (!(err <= 1e-5))
            fail_msg("%d shards: sum off by %g", ways ? 4 : 2, err);
        free(sum);
    }
    free(whole);
    const char *o = path_in(f->dir, "k.o"), *h = path_in(f->dir, "k.h");
    assert_int_equal(ATTNC(f, "compile", SPEC("seed"), "--shard", "1/2", "-o", o, "--header", h),
                     0);
    assert_file_has(h, "shard 1 of 2 of the spec's heads");
    assert_int_equal(
        ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", ys, "--shard", "1/3"), 2);
    assert_stderr_has(f, "--shard 1/3: shard 1/3: the 4 K/V groups of 'seed' do not split into 3");
    assert_int_equal(ATTNC(f, "compile", SPEC("seed"), "--shard", "0/8", "-o", o), 2);
    assert_stderr_has(f, "do not split into 8 shards");
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--shard", "0/3"), 2);
    assert_int_equal(
        ATTNC(f, "run", SPEC("seed"), "--weights", w, "--input", x, "-o", ys, "--shard", "2/2"), 1);
    assert_stderr_has(f, "--shard expects I/N with 1 <= N <= 1024 and 0 <= I < N, found '2/2'");
    const char *bad[] = {"1", "a/2", "1/", "/2", "1/2x", "-1/2"};
    for (int i = 0; i < 6; i++)
        assert_int_equal(ATTNC(f, "compile", SPEC("seed"), "--shard", bad[i], "-o", o), 1);
    assert_int_equal(dir_count(f->dir), 6); /* w, x, y, ys, k.o, k.h */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(cli_usage_errors_exit_1, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_every_command_has_help, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_check_prints_normalized_spec, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_kernel_cache, cli_fixture_setup, cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_check_bad_spec_exits_2_with_location, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_run_chunked_equals_one_shot, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_cross_attention_run, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_shards_sum_to_whole, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_opt_runs_a_pass, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_prefix_and_dtypes_round_trip, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_help_command, cli_fixture_setup, cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_quantized_weights, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_bad_inputs_exit_2_and_write_nothing, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_failure_keeps_an_existing_output, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(cli_chunk_needs_causal_and_tokens_fit_the_cache,
                                        cli_fixture_setup, cli_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
