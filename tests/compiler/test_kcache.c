/* test_kcache.c: the persistent kernel cache and the parallel compile:
 * a hit gives kernels computing the same bits; every key component
 * misses; damaged entries are rebuilt with a warning; two processes
 * compiling one spec at once both succeed; an unwritable directory
 * degrades to no cache with one warning; objects do not depend on the
 * number of compile threads; info and clear. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attnc.h"
#include "support.h"

static attnc_options opts_in(const char *dir) {
    attnc_options o = attnc_options_default();
    o.cache_dir = dir;
    return o;
}

/* Compiles spec with o; *warn (may be NULL) gets the warnings (malloc'd
 * or NULL), the result the cache's verdict. */
static attnc_jit *compile(const char *spec, const attnc_options *o, attnc_cache_result *how,
                          char **warn) {
    attnc_jit *jit = NULL;
    attnc_ctx *ctx = attnc_ctx_new();
    attnc_status st = attnc_jit_compile_file(ctx, spec, o, &jit);
    char msg[4096];
    attnc_diag_text(ctx, msg, sizeof msg);
    bool said = attnc_diag_count(ctx) > 0;
    attnc_ctx_free(ctx);
    if (st != ATTNC_OK)
        fail_msg("compiling %s: %s", spec, msg);
    if (warn)
        *warn = said ? strdup(msg) : NULL;
    else if (said)
        fail_msg("unexpected warnings: %s", msg);
    if (how)
        *how = attnc_jit_timings(jit).cache;
    return jit;
}

static attnc_cache_result compile_once(const char *spec, const attnc_options *o) {
    attnc_cache_result how;
    attnc_jit_free(compile(spec, o, &how, NULL));
    return how;
}

/* The single entry file of dir (fails unless there is exactly one). */
static const char *only_entry(const char *dir) {
    static char path[1024];
    attnc_cache_stats st;
    assert_int_equal(attnc_cache_stats_get(NULL, dir, &st), ATTNC_OK);
    assert_int_equal(st.entries, 1);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "ls %s/*.attnk", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(path, sizeof path, p));
    pclose(p);
    path[strcspn(path, "\n")] = 0;
    return path;
}

/* y of T tokens through the kernels of jit on weights w (prefill, then
 * one decode step). */
static float *run(const attnc_jit *jit, const attn_weights *w, int64_t T, const float *x) {
    attn_block *b;
    attn_cache *c;
    int32_t s, n = (int32_t)(T - 1), one = 1;
    int64_t D = w->cfg.d_model;
    float *y = malloc((size_t)(T * D) * sizeof *y);
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = 1; /* OpenMP is not built for the thread checker */
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), &bo, &b), ATTN_OK);
    assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
    assert_int_equal(attn_cache_new(b, T, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    assert_int_equal(attn_forward(b, c, 1, &s, &n, x, y), ATTN_OK);
    assert_int_equal(attn_forward(b, c, 1, &s, &one, x + n * D, y + n * D), ATTN_OK);
    attn_cache_free(c);
    attn_block_free(b);
    return y;
}

static void hit_gives_the_same_bits(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attnc_options o = opts_in(dir), off = opts_in(dir);
    off.no_cache = 1;
    const char *spec = spec_path("llama3_8b");
    attn_config cfg;
    attnc_ctx *ctx = attnc_ctx_new();
    assert_int_equal(attnc_spec_load_file(ctx, spec, &cfg), ATTNC_OK);
    attnc_ctx_free(ctx);
    cfg.d_model = 512, cfg.heads = 8, cfg.kv_groups = 2; /* small weights, same kernels' shape */
    const char *small = path_in(dir, "small.yaml");
    char *yaml = attnc_spec_to_yaml(&cfg);
    write_file(small, yaml, strlen(yaml));
    free(yaml);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&cfg, 5, &w, NULL), ATTN_OK);
    int64_t T = 37;
    float *x = random_floats((size_t)(T * cfg.d_model), 6);

    attnc_cache_result how[3];
    attnc_jit *cold = compile(small, &o, &how[0], NULL);
    attnc_jit *warm = compile(small, &o, &how[1], NULL);
    attnc_jit *none = compile(small, &off, &how[2], NULL);
    assert_int_equal(how[0], ATTNC_CACHE_MISS);
    assert_int_equal(how[1], ATTNC_CACHE_HIT);
    assert_int_equal(how[2], ATTNC_CACHE_OFF);
    attnc_timings t = attnc_jit_timings(warm);
    assert_true(t.optimize_ms == 0 && t.codegen_ms == 0 && t.total_ms > 0);
    assert_memory_equal(&attnc_jit_kernels(cold)->config, &attnc_jit_kernels(warm)->config,
                        sizeof(attn_config));
    assert_int_equal(attnc_jit_kernels(cold)->n_steps, attnc_jit_kernels(warm)->n_steps);
    float *y[3] = {run(cold, w, T, x), run(warm, w, T, x), run(none, w, T, x)};
    size_t bytes = (size_t)(T * cfg.d_model) * sizeof(float);
    assert_memory_equal(y[0], y[1], bytes);
    assert_memory_equal(y[0], y[2], bytes);
    for (int i = 0; i < 3; i++)
        free(y[i]);
    attnc_jit_free(cold);
    attnc_jit_free(warm);
    attnc_jit_free(none);
    free(x);
    attn_weights_free(w);
    tmpdir_remove(dir);
}

static void every_key_component_misses(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attnc_options o = opts_in(dir);
    const char *seed = spec_path("seed");
    assert_int_equal(compile_once(seed, &o), ATTNC_CACHE_MISS);
    assert_int_equal(compile_once(seed, &o), ATTNC_CACHE_HIT);

    /* one spec field: a copy differing in rope base only; the same text
     * under another file name hits (the key is the normalized spec) */
    attn_config cfg;
    attnc_ctx *ctx = attnc_ctx_new();
    assert_int_equal(attnc_spec_load_file(ctx, seed, &cfg), ATTNC_OK);
    attnc_ctx_free(ctx);
    char *yaml = attnc_spec_to_yaml(&cfg);
    write_file(path_in(dir, "same.yaml"), yaml, strlen(yaml));
    free(yaml);
    assert_int_equal(compile_once(path_in(dir, "same.yaml"), &o), ATTNC_CACHE_HIT);
    cfg.rope_base *= 2;
    yaml = attnc_spec_to_yaml(&cfg);
    write_file(path_in(dir, "base.yaml"), yaml, strlen(yaml));
    free(yaml);
    assert_int_equal(compile_once(path_in(dir, "base.yaml"), &o), ATTNC_CACHE_MISS);

    /* a disabled pass; the same set in another order (and repeated) hits */
    const char *two[] = {"fold_scale", "decode_split"},
               *again[] = {"decode_split", "fold_scale", "decode_split"};
    attnc_options p = o;
    p.disabled_passes = two, p.n_disabled_passes = 1;
    assert_int_equal(compile_once(seed, &p), ATTNC_CACHE_MISS);
    p.n_disabled_passes = 2;
    assert_int_equal(compile_once(seed, &p), ATTNC_CACHE_MISS);
    p.disabled_passes = again, p.n_disabled_passes = 3;
    assert_int_equal(compile_once(seed, &p), ATTNC_CACHE_HIT);

    /* another CPU, other features */
    attnc_options c = o;
    c.cpu = "x86-64-v3";
    assert_int_equal(compile_once(seed, &c), ATTNC_CACHE_MISS);
    assert_int_equal(compile_once(seed, &c), ATTNC_CACHE_HIT);
    c.features = "-fma";
    assert_int_equal(compile_once(seed, &c), ATTNC_CACHE_MISS);

    /* and what an object file is made of is not the JIT's entry */
    const char *obj = path_in(dir, "seed.o");
    attnc_cache_stats before, after;
    assert_int_equal(attnc_cache_stats_get(NULL, dir, &before), ATTNC_OK);
    attnc_ctx *cx = attnc_ctx_new();
    assert_int_equal(attnc_compile_file(cx, seed, &o, ATTNC_EMIT_OBJ, obj, NULL), ATTNC_OK);
    assert_int_equal(attnc_diag_count(cx), 0);
    attnc_ctx_free(cx);
    assert_int_equal(attnc_cache_stats_get(NULL, dir, &after), ATTNC_OK);
    assert_int_equal(after.entries, before.entries + 1);
    assert_int_equal(compile_once(seed, &o), ATTNC_CACHE_HIT);
    tmpdir_remove(dir);
}

/* Damages the one entry of dir with how (0 empty, 1 truncated, 2 a
 * flipped byte in the code), compiles: a miss with a warning naming the
 * entry, then a whole entry again (a hit). */
static void damaged(const char *dir, int how) {
    attnc_options o = opts_in(dir);
    const char *seed = spec_path("seed");
    const char *entry = only_entry(dir);
    size_t n;
    char *bytes = read_file(entry, &n);
    assert_non_null(bytes);
    if (how == 2)
        bytes[n - 100] ^= 0x40;
    write_file(entry, bytes, how == 0 ? 0 : how == 1 ? n / 2 : n);
    free(bytes);
    attnc_cache_result r;
    char *warn = NULL;
    attnc_jit_free(compile(seed, &o, &r, &warn));
    assert_int_equal(r, ATTNC_CACHE_MISS);
    assert_non_null(warn);
    assert_non_null(strstr(warn, "warning: damaged kernel cache entry"));
    assert_non_null(strstr(warn, entry));
    assert_non_null(strstr(warn, how == 0 ? "empty" : how == 1 ? "truncated" : "checksum"));
    free(warn);
    assert_int_equal(compile_once(seed, &o), ATTNC_CACHE_HIT);
}

static void damaged_entries_are_rebuilt(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attnc_options o = opts_in(dir);
    assert_int_equal(compile_once(spec_path("seed"), &o), ATTNC_CACHE_MISS);
    for (int how = 0; how < 3; how++)
        damaged(dir, how);
    tmpdir_remove(dir);
}

/* Two processes compile one spec into one empty cache at once (released
 * together through a pipe); both must succeed and leave one whole entry. */
static void two_processes_compile_at_once(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    for (int round = 0; round < 3; round++) {
        attnc_cache_stats st;
        assert_int_equal(attnc_cache_clear(NULL, dir, &st), ATTNC_OK);
        int go[2];
        assert_int_equal(pipe(go), 0);
        pid_t kids[2];
        for (int k = 0; k < 2; k++) {
            kids[k] = fork();
            assert_true(kids[k] >= 0);
            if (kids[k] == 0) {
                char c;
                close(go[1]);
                if (read(go[0], &c, 1) != 1)
                    _exit(10);
                attnc_options o = opts_in(dir);
                attnc_jit *jit = NULL;
                attnc_ctx *ctx = attnc_ctx_new();
                attnc_status s = attnc_jit_compile_file(ctx, spec_path("seed"), &o, &jit);
                /* a warning here would mean a damaged entry was seen */
                int rc = s != ATTNC_OK                      ? 11
                         : attnc_diag_count(ctx)            ? 12
                         : !attnc_jit_kernels(jit)->n_steps ? 13
                                                            : 0;
                attnc_ctx_free(ctx);
                attnc_jit_free(jit);
                _exit(rc);
            }
        }
        close(go[0]);
        assert_int_equal(write(go[1], "gg", 2), 2);
        close(go[1]);
        for (int k = 0; k < 2; k++) {
            int status = 0;
            assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
            assert_true(WIFEXITED(status));
            assert_int_equal(WEXITSTATUS(status), 0);
        }
        only_entry(dir);
        assert_int_equal(dir_count(dir), 1); /* no temporary file left */
        attnc_options o = opts_in(dir);
        assert_int_equal(compile_once(spec_path("seed"), &o), ATTNC_CACHE_HIT);
    }
    tmpdir_remove(dir);
}

static void unwritable_dir_compiles_with_one_warning(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    const char *file = path_in(dir, "a-file");
    write_file(file, "x", 1);
    char bad[1024];
    snprintf(bad, sizeof bad, "%s/cache", file); /* under a file: cannot exist */
    attnc_options o = opts_in(bad);
    attnc_cache_result r;
    char *warn = NULL;
    attnc_jit *jit = compile(spec_path("seed"), &o, &r, &warn);
    assert_true(attnc_jit_kernels(jit)->n_steps > 0);
    attnc_jit_free(jit);
    assert_int_equal(r, ATTNC_CACHE_MISS);
    assert_non_null(warn);
    assert_non_null(strstr(warn, "kernel cache directory is not writable"));
    assert_non_null(strstr(warn, bad));
    free(warn);
    jit = compile(spec_path("seed"), &o, &r, NULL); /* once per process */
    attnc_jit_free(jit);
    /* objects too are written without the cache */
    attnc_ctx *ctx = attnc_ctx_new();
    assert_int_equal(
        attnc_compile_file(ctx, spec_path("seed"), &o, ATTNC_EMIT_OBJ, path_in(dir, "s.o"), NULL),
        ATTNC_OK);
    assert_int_equal(attnc_diag_count(ctx), 0);
    attnc_ctx_free(ctx);
    struct stat sb;
    assert_int_equal(stat(path_in(dir, "s.o"), &sb), 0);
    tmpdir_remove(dir);
}

/* The objects do not depend on how many threads compiled them. */
static void threads_do_not_change_the_objects(void **state) {
    (void)state;
    char *a = tmpdir_new(), *b = tmpdir_new();
    attnc_options o1 = opts_in(a), o2 = opts_in(b);
    o1.threads = 1, o2.threads = 3;
    attnc_jit *j1 = compile(spec_path("gemma2_9b"), &o1, NULL, NULL);
    attnc_jit *j2 = compile(spec_path("gemma2_9b"), &o2, NULL, NULL);
    assert_int_equal(attnc_jit_timings(j1).threads, 1);
    assert_true(attnc_jit_timings(j2).threads >= 2);
    attnc_jit_free(j1);
    attnc_jit_free(j2);
    size_t n1, n2;
    char *e1 = read_file(only_entry(a), &n1);
    char *e2 = read_file(only_entry(b), &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(e1, e2, n1);
    free(e1);
    free(e2);
    tmpdir_remove(a);
    tmpdir_remove(b);
}

static void info_and_clear(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attnc_options o = opts_in(dir);
    attnc_cache_stats st;
    assert_int_equal(attnc_cache_stats_get(NULL, path_in(dir, "missing"), &st), ATTNC_OK);
    assert_int_equal(st.entries, 0);
    /* a directory that cannot be read: an error naming it, in the context */
    write_file(path_in(dir, "a-file"), "x", 1);
    attnc_ctx *ctx = attnc_ctx_new();
    assert_int_equal(attnc_cache_stats_get(ctx, path_in(dir, "a-file"), &st), ATTNC_E_IO);
    assert_int_equal(attnc_diag_count(ctx), 1);
    const attnc_diag *dg = attnc_diag_get(ctx, 0);
    assert_int_equal(dg->code, ATTNC_E_IO);
    assert_string_equal(dg->loc.file, path_in(dir, "a-file"));
    assert_non_null(strstr(dg->msg, "cannot open the kernel cache: Not a directory"));
    attnc_ctx_free(ctx);
    unlink(path_in(dir, "a-file"));
    compile_once(spec_path("seed"), &o);
    compile_once(spec_path("phi3_mini"), &o);
    write_file(path_in(dir, "unrelated.txt"), "keep", 4);
    write_file(path_in(dir, "0123.attnk.tmp.abcdef"), "left by a killed compile", 24);
    assert_int_equal(attnc_cache_stats_get(NULL, dir, &st), ATTNC_OK);
    assert_int_equal(st.entries, 2);
    assert_true(st.bytes > 10000);
    attnc_cache_stats removed;
    assert_int_equal(attnc_cache_clear(NULL, dir, &removed), ATTNC_OK);
    assert_int_equal(removed.entries, 2);
    assert_int_equal(removed.bytes, st.bytes);
    assert_int_equal(dir_count(dir), 1); /* only unrelated.txt */
    assert_int_equal(compile_once(spec_path("seed"), &o), ATTNC_CACHE_MISS);

    /* the directory in effect */
    char buf[512];
    attnc_options d = attnc_options_default();
    setenv("ATTNC_CACHE_DIR", "/some/where", 1);
    assert_int_equal(attnc_cache_dir(&d, buf, sizeof buf), ATTNC_OK);
    assert_string_equal(buf, "/some/where");
    unsetenv("ATTNC_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    assert_int_equal(attnc_cache_dir(&d, buf, sizeof buf), ATTNC_OK);
    assert_string_equal(buf, "/xdg/attnc");
    setenv("XDG_CACHE_HOME", "relative", 1); /* ignored, as the XDG spec says */
    setenv("HOME", "/home/u", 1);
    assert_int_equal(attnc_cache_dir(&d, buf, sizeof buf), ATTNC_OK);
    assert_string_equal(buf, "/home/u/.cache/attnc");
    d.cache_dir = "/explicit";
    assert_int_equal(attnc_cache_dir(&d, buf, sizeof buf), ATTNC_OK);
    assert_string_equal(buf, "/explicit");
    d.no_cache = 1;
    assert_int_equal(attnc_cache_dir(&d, buf, sizeof buf), ATTNC_OK);
    assert_string_equal(buf, "");
    assert_int_equal(attnc_cache_dir(NULL, buf, 4), ATTNC_E_INVALID); /* does not fit */
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        /* first: forks before any OpenMP team exists in this process */
        cmocka_unit_test(two_processes_compile_at_once),
        cmocka_unit_test(hit_gives_the_same_bits),
        cmocka_unit_test(every_key_component_misses),
        cmocka_unit_test(damaged_entries_are_rebuilt),
        cmocka_unit_test(unwritable_dir_compiles_with_one_warning),
        cmocka_unit_test(threads_do_not_change_the_objects),
        cmocka_unit_test(info_and_clear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
