/* test_aot.c: `attnc compile`. The object needs only libc/libm (nm), is
 * byte-identical for equal inputs, links with libattn alone into a program
 * that matches the reference (aot_main.c), comes out for AArch64 with
 * --target, and bad input leaves no file behind. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "support.h"

typedef cli_fixture fixture;

static int compile(fixture *f, const char *spec, const char *o, const char *h, const char *extra1,
                   const char *extra2) {
    return run_cmd(
        (const char *[]){ATTNC_BIN, "compile", spec, "-o", o, "--header", h, extra1, extra2, NULL},
        f->out, f->err);
}

static void assert_only_libc_undefined(fixture *f, const char *obj) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "nm -u %s > %s", obj, f->out);
    assert_int_equal(system(cmd), 0);
    char *text = read_file(f->out, NULL);
    /* log: the query temperature of llama4_scout_global */
    static const char *const allowed[] = {"sincos", "sin",    "cos",    "log",
                                          "memcpy", "memset", "memmove"};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        const char *sym = strrchr(line, ' ');
        sym = sym ? sym + 1 : line;
        bool ok = false;
        for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
            ok |= strcmp(sym, allowed[i]) == 0;
        if (!ok)
            fail_msg("%s needs '%s'", obj, sym);
    }
    free(text);
}

static void emitted_objects_link_with_libattn_alone_and_match_the_reference(void **state) {
    fixture *f = *state;
    /* and every spec of current models' features, cross-attention and MLA
     * too, and expressions reading token, weight and sequence inputs */
    const char *specs[] = {"seed",
                           "gemma2_9b",
                           "mistral_7b",
                           "gptj_6b",
                           "qwen3_8b",
                           "gemma3_12b_local",
                           "gemma3_12b_global",
                           "gpt_oss_20b_sliding",
                           "gpt_oss_20b_full",
                           "olmo2_7b",
                           "llama4_scout_local",
                           "llama4_scout_global",
                           "bloom_7b1",
                           "phi3_mini",
                           "whisper_large_v3_cross",
                           "mllama_11b_cross",
                           "deepseek_v2_lite",
                           "document_mask",
                           "t5_relative_bias",
                           "prefix_lm"};
    for (int i = 0; i < (int)(sizeof specs / sizeof specs[0]); i += sanitized_step(4)) {
        char spec[512], obj[1024], hdr[1024], prog[1024], cmd[8192];
        snprintf(spec, sizeof spec, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, specs[i]);
        snprintf(obj, sizeof obj, "%s/%s.o", f->dir, specs[i]);
        snprintf(hdr, sizeof hdr, "%s/%s.h", f->dir, specs[i]);
        snprintf(prog, sizeof prog, "%s/%s_prog", f->dir, specs[i]);
        assert_int_equal(compile(f, spec, obj, hdr, NULL, NULL), 0);
        assert_only_libc_undefined(f, obj);
        /* only the runtime and system libraries: no LLVM on this link line */
        snprintf(cmd, sizeof cmd,
                 "%s %s -std=c11 -O1 -DKERNELS=%s_kernels -include %s -I%s "
                 "%s/tests/aot/aot_main.c %s %s -lcjson -fopenmp -lm -o %s",
                 AOT_CC, AOT_FLAGS, specs[i], hdr, ATTN_INCLUDE_DIR, ATTNC_SOURCE_DIR, obj,
                 ATTN_STATIC_LIB, prog);
        if (system(cmd) != 0)
            fail_msg("link failed: %s", cmd);
        assert_int_equal(run_cmd((const char *[]){prog, NULL}, f->out, f->err), 0);
        char *said = read_file(f->out, NULL);
        assert_non_null(strstr(said, "through the emitted kernels"));
        free(said);
    }
}

static void same_input_gives_byte_identical_files(void **state) {
    fixture *f = *state;
    const char *spec = ATTNC_SOURCE_DIR "/specs/qwen2_7b.yaml";
    char *files[2][2];
    for (int r = 0; r < 2; r++) {
        const char *o = path_in(f->dir, r ? "b.o" : "a.o"), *h = path_in(f->dir, r ? "b.h" : "a.h");
        assert_int_equal(compile(f, spec, o, h, "--cpu", "x86-64-v3"), 0);
        size_t n;
        files[r][0] = read_file(o, &n);
        files[r][1] = read_file(h, NULL);
        assert_true(n > 1000);
    }
    size_t na, nb;
    free(read_file(path_in(f->dir, "a.o"), &na));
    free(read_file(path_in(f->dir, "b.o"), &nb));
    assert_int_equal(na, nb);
    assert_memory_equal(files[0][0], files[1][0], na);
    assert_string_equal(files[0][1], files[1][1]);
    assert_non_null(strstr(files[0][1], "const attn_kernels *qwen2_7b_kernels(void);"));
    struct stat sb; /* readable like any file the user makes, not 0600 */
    assert_int_equal(stat(path_in(f->dir, "a.h"), &sb), 0);
    mode_t mask = umask(0);
    umask(mask);
    assert_int_equal(sb.st_mode & 0777, 0666 & ~mask);
    assert_non_null(strstr(files[0][1], "cpu=x86-64-v3"));
    assert_non_null(strstr(files[0][1], "qkv_bias: true"));
    for (int r = 0; r < 2; r++)
        free(files[r][0]), free(files[r][1]);
}

static void other_targets_and_output_kinds(void **state) {
    fixture *f = *state;
    const char *spec = ATTNC_SOURCE_DIR "/specs/seed.yaml", *o = path_in(f->dir, "arm.o");
    assert_int_equal(compile(f, spec, o, path_in(f->dir, "arm.h"), "--target", "aarch64-linux-gnu"),
                     0);
    size_t n;
    unsigned char *elf = (unsigned char *)read_file(o, &n);
    assert_true(n > 64 && memcmp(elf,
                                 "\x7f"
                                 "ELF",
                                 4) == 0);
    assert_int_equal(elf[18] | elf[19] << 8, 183); /* EM_AARCH64 */
    free(elf);
    /* every kernel of current models' features compiles for AArch64 too */
    const char *features[] = {"gpt_oss_20b_sliding", "gemma3_12b_local",    "olmo2_7b",
                              "llama4_scout_local",  "llama4_scout_global", "bloom_7b1"};
    for (int i = 0; i < 6; i++) {
        char fs[512];
        snprintf(fs, sizeof fs, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, features[i]);
        assert_int_equal(compile(f, fs, path_in(f->dir, "armf.o"), path_in(f->dir, "armf.h"),
                                 "--target", "aarch64-linux-gnu"),
                         0);
    }
    assert_int_equal(run_cmd((const char *[]){ATTNC_BIN, "compile", spec, "-o",
                                              path_in(f->dir, "k.s"), "--emit", "asm", NULL},
                             NULL, NULL),
                     0);
    char *s = read_file(path_in(f->dir, "k.s"), NULL);
    assert_non_null(strstr(s, "seed_kernels:"));
    free(s);
    assert_int_equal(
        run_cmd((const char *[]){ATTNC_BIN, "compile", spec, "-o", path_in(f->dir, "arm.s"),
                                 "--emit", "asm", "--target", "aarch64-linux-gnu", NULL},
                NULL, NULL),
        0);
    s = read_file(path_in(f->dir, "arm.s"), NULL);
    assert_non_null(strstr(s, "seed_kernels:"));
    assert_non_null(strstr(s, "fmla\tv"));
    free(s);
    assert_int_equal(run_cmd((const char *[]){ATTNC_BIN, "compile", spec, "-o",
                                              path_in(f->dir, "k.ll"), "--emit", "llvm", NULL},
                             NULL, NULL),
                     0);
    s = read_file(path_in(f->dir, "k.ll"), NULL);
    assert_non_null(strstr(s, "ptr @seed_kernels()"));
    free(s);
}

/* The runtime built for AArch64 (Debian's cross gcc) once, as a static
 * library in f's directory, which every run_on_aarch64 of f links: built
 * for each of six runs it took 28 of test_aot's 117 s (2-core Zen 5). */
static const char *aarch64_runtime(fixture *f) {
    static char lib[1024];
    char want[1024], cmd[8192];
    snprintf(want, sizeof want, "%s/arm/libattn.a", f->dir);
    if (strcmp(lib, want) == 0)
        return lib;
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/arm && cd %s/arm && aarch64-linux-gnu-gcc -std=c11 -O2 -fopenmp "
             "-D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -DATTN_BUILD -I%s -I%s/runtime/src "
             "-I/usr/include/cjson -c %s/runtime/src/*.c && aarch64-linux-gnu-ar rcs libattn.a *.o",
             f->dir, f->dir, ATTN_INCLUDE_DIR, ATTNC_SOURCE_DIR, ATTNC_SOURCE_DIR);
    if (system(cmd) != 0)
        fail_msg("cross build of the runtime failed: %s", cmd);
    snprintf(lib, sizeof lib, "%s", want);
    return lib;
}

/* Links the AArch64 object of spec (block name; for the CPU named by
 * the option pair cpu[0..1], e.g. --cpu neoverse-v1, or the generic one)
 * with an AArch64 build of the runtime (Debian's cross gcc, arm64
 * libcjson from multiarch) and runs it under qemu-user (its default CPU,
 * max, has every feature the objects ask for). One thread: under
 * qemu-user 7.2 even a bare two-thread OpenMP barrier never returns, so
 * the emulated run is kept single-threaded. Its code holds `want` (an
 * instruction); with `out`, the run writes its outputs' bytes there;
 * decode calls of `step` tokens. */
static void run_on_aarch64(fixture *f, const char *spec, const char *name, const char *const *cpu,
                           const char *want, const char *out, int step) {
    char o[1024], h[1024], asm_path[1024];
    snprintf(o, sizeof o, "%s/%s.o", f->dir, name);
    snprintf(h, sizeof h, "%s/%s.h", f->dir, name);
    snprintf(asm_path, sizeof asm_path, "%s/%s_arm.s", f->dir, name);
    const char *opt[2] = {cpu ? cpu[0] : NULL, cpu ? cpu[1] : NULL};
    assert_int_equal(
        run_cmd((const char *[]){ATTNC_BIN, "compile", spec, "-o", o, "--header", h, "--target",
                                 "aarch64-linux-gnu", opt[0], opt[1], NULL},
                f->out, f->err),
        0);
    /* its code, disassembled (other_targets_and_output_kinds has
     * --emit asm for AArch64: a second compile here cost 1.5 s a run) */
    char cmd[8192], prog[1024];
    snprintf(cmd, sizeof cmd, "aarch64-linux-gnu-objdump -d %s > %s", o, asm_path);
    if (system(cmd) != 0)
        fail_msg("disassembly failed: %s", cmd);
    char *s = read_file(asm_path, NULL);
    if (!strstr(s, want))
        fail_msg("%s: no '%s' in its AArch64 code", name, want);
    free(s);
    snprintf(prog, sizeof prog, "%s/%s_arm", f->dir, name);
    snprintf(cmd, sizeof cmd,
             "aarch64-linux-gnu-gcc -std=c11 -O2 -fopenmp -I%s %s/tests/aot/aot_main.c "
             "-include %s -DKERNELS=%s_kernels %s %s -L/usr/lib/aarch64-linux-gnu -lcjson -lm "
             "-o %s",
             ATTN_INCLUDE_DIR, ATTNC_SOURCE_DIR, h, name, o, aarch64_runtime(f), prog);
    if (system(cmd) != 0)
        fail_msg("cross link failed: %s", cmd);
    char step_env[64];
    snprintf(step_env, sizeof step_env, "AOT_DECODE_TOKENS=%d", step);
    assert_int_equal(
        run_cmd((const char *[]){"/usr/bin/env", "qemu-aarch64", "-L", "/usr/aarch64-linux-gnu",
                                 "-E", "ATTN_THREADS=1", "-E", "OMP_NUM_THREADS=1", "-E", step_env,
                                 prog, out, NULL},
                f->out, f->err),
        0);
    char *said = read_file(f->out, NULL);
    print_message("AArch64 under qemu: %s", said);
    char line[256];
    snprintf(line, sizeof line, "%s: 23 tokens through the emitted kernels", name);
    assert_non_null(strstr(said, line));
    free(said);
}

/* seed's shape with the spec lines `extra` (block name), run on AArch64
 * for the generic CPU (NEON, no `insn`) and for neoverse-v1 (`insn`,
 * its i8mm or bf16), decode calls of `step` tokens: the outputs byte for
 * byte the same (tol 0), or within tol of the first's largest. */
static void generic_and_v1(fixture *f, const char *name, const char *extra, const char *insn,
                           double tol, int step) {
    char text[512], file[64], insn_v[64], *out[2];
    snprintf(text, sizeof text,
             "name: %s\nheads: 12\nkv_groups: 4\nhead_dim: 64\ncausal: true\n"
             "rope: {base: 10000}\n%s",
             name, extra);
    char *spec = strdup(path_in(f->dir, "v1_spec.yaml"));
    write_file(spec, text, strlen(text));
    const char *v1[2] = {"--cpu", "neoverse-v1"};
    size_t n[2];
    for (int i = 0; i < 2; i++) {
        snprintf(insn_v, sizeof insn_v, "%s\tv", insn);
        snprintf(file, sizeof file, "%s_%d.bin", name, i);
        char *bin = strdup(path_in(f->dir, file));
        run_on_aarch64(f, spec, name, i ? v1 : NULL, i ? insn_v : "fmla\tv", bin, step);
        if (!i) { /* the generic CPU's code has none of it */
            snprintf(file, sizeof file, "%s_arm.s", name);
            char *s = read_file(path_in(f->dir, file), NULL);
            assert_null(strstr(s, insn));
            free(s);
        }
        out[i] = read_file(bin, &n[i]);
        free(bin);
    }
    free(spec);
    assert_true(n[0] == n[1] && n[0] > 0);
    if (tol == 0 && memcmp(out[0], out[1], n[0]) != 0)
        fail_msg("%s: %s's outputs differ from NEON's", name, insn);
    const float *z0 = (const float *)out[0], *z1 = (const float *)out[1];
    double num = 0, den = 0;
    for (size_t i = 0; i < n[0] / sizeof *z0; i++) {
        num = fmax(num, fabs((double)z0[i] - z1[i]));
        den = fmax(den, fabs((double)z0[i]));
    }
    print_message("%s: %s against NEON, relative %.3g\n", name, insn, num / den);
    if (!(num / den <= tol))
        fail_msg("%s: %s's outputs %.3g from NEON's (%g)", name, insn, num / den, tol);
    free(out[0]), free(out[1]);
}

/* gemma2_9b's layer, seed with q4_0 weights and a q8_0 cache (the block formats'
 * kernels in NEON), and seed with activations q8_0 (q8_0 and q4_0 weights)
 * and with compute bf16, each for the generic CPU and for one with i8mm
 * and bf16. */
static void aarch64_object_runs_under_emulation(void **state) {
    fixture *f = *state;
    if (system("command -v aarch64-linux-gnu-gcc > /dev/null && command -v "
               "aarch64-linux-gnu-objdump > /dev/null && command -v qemu-aarch64 > /dev/null && "
               "test -e /usr/lib/aarch64-linux-gnu/libcjson.so") != 0) {
        print_message("aarch64-linux-gnu-gcc, its objdump, qemu-user or libcjson-dev:arm64 is "
                      "missing (scripts/setup installs them): skipping the AArch64 run\n");
        skip();
    }
    /* sanitizers: the last alone (the emulated runtime is not instrumented) */
    if (sanitized_step(2) == 1) {
        /* gemma2_9b's layer (d_model 3584, head_dim 256, softcap) with 2
         * of its heads: all 16 took 16 s under qemu, mostly the
         * reference's products in emulated doubles */
        const char *g2 = path_in(f->dir, "gemma2_heads.yaml");
        const char g2text[] = "name: gemma2_heads\nheads: 2\nkv_groups: 1\nhead_dim: 256\n"
                              "d_model: 3584\ncausal: true\nrope: {base: 10000}\nsoftcap: 50\n"
                              "scale: 0.0625\n";
        write_file(g2, g2text, sizeof g2text - 1);
        run_on_aarch64(f, g2, "gemma2_heads", NULL, "fmla\tv", NULL, 1); /* NEON */
        const char *q4 = path_in(f->dir, "seed_q4.yaml");
        const char text[] = "name: seed_q4\nheads: 12\nkv_groups: 4\nhead_dim: 64\ncausal: "
                            "true\nrope: {base: 10000}\ndtype: q4_0\nkv_cache: {dtype: q8_0}\n";
        write_file(q4, text, sizeof text - 1);
        run_on_aarch64(f, q4, "seed_q4", NULL, "fmla\tv", NULL, 1);
    }
    /* activations q8_0: the int8 products without VNNI, in NEON; on a
     * CPU with i8mm the projections by smmla (q8_0's q and q4_0's nibbles
     * as signed bytes, 2 x 8 of them an operand) and decode's q.k over a
     * q8_0 cache by usdot, the same integers: the same bytes out (decode
     * calls of 3 and 2 rows: a GEMV row without its partner) */
    generic_and_v1(f, "seed_a8", "dtype: q8_0\nactivations: q8_0\nkv_cache: {dtype: f16}\n",
                   "smmla", 0, 1);
    generic_and_v1(f, "seed_a4", "dtype: q4_0\nactivations: q8_0\nkv_cache: {dtype: q8_0}\n",
                   "usdot", 0, 3);
    /* compute bf16: the projections by f32 FMAs on rounded operands, on
     * a CPU with bf16 by bfmmla (2 x 2 sums of 4 k, Arm's rounding of
     * each pair's sum): the same within f32 summation (3.7e-5 here). d_model 769: the
     * last quad of k of x and of W_Q/K/V padded with zeros; 15 prompt
     * rows: micro-kernels of 12, 2 and 1 (a row without its partner);
     * decode calls of 7 and 1 rows: GEMVs of 4 row pairs, the last
     * without a partner, and of one row on two panels at a time */
    generic_and_v1(f, "seed_b16", "compute: bf16\nd_model: 769\n", "bfmmla", 1e-4, 7);
}

static void bad_input_exits_2_and_writes_nothing(void **state) {
    fixture *f = *state;
    const char *spec = ATTNC_SOURCE_DIR "/specs/seed.yaml";
    int before = dir_count(f->dir);
    assert_int_equal(compile(f, spec, path_in(f->dir, "x.o"), path_in(f->dir, "x.h"), "--target",
                             "nonsense-unknown-none"),
                     2);
    char *err = read_file(f->err, NULL);
    assert_non_null(strstr(err, "unknown target 'nonsense-unknown-none'"));
    free(err);
    assert_int_equal(
        compile(f, spec, path_in(f->dir, "x.o"), path_in(f->dir, "x.h"), "--cpu", "pentium-9000"),
        2);
    err = read_file(f->err, NULL);
    assert_non_null(strstr(err, "unknown CPU 'pentium-9000' for target x86-64"));
    free(err);
    assert_int_equal(compile(f, spec, path_in(f->dir, "x.o"), path_in(f->dir, "x.h"), "--target",
                             "armv7-linux-gnueabihf"),
                     2);
    err = read_file(f->err, NULL);
    assert_non_null(strstr(err, "is not 64-bit little-endian"));
    free(err);
    assert_int_equal(compile(f, ATTNC_SOURCE_DIR "/tests/specs/bad/unknown_key.yaml",
                             path_in(f->dir, "x.o"), path_in(f->dir, "x.h"), NULL, NULL),
                     2);
    assert_int_equal(
        compile(f, spec, path_in(f->dir, "no/such/x.o"), path_in(f->dir, "x.h"), NULL, NULL), 2);
    assert_int_equal(
        compile(f, spec, path_in(f->dir, "x.o"), path_in(f->dir, "no/such/x.h"), NULL, NULL), 2);
    assert_int_equal(run_cmd((const char *[]){ATTNC_BIN, "compile", spec, "-o",
                                              path_in(f->dir, "x.o"), "--emit", "exe", NULL},
                             NULL, NULL),
                     1);
    assert_int_equal(dir_count(f->dir), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            emitted_objects_link_with_libattn_alone_and_match_the_reference, cli_fixture_setup,
            cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(same_input_gives_byte_identical_files, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(other_targets_and_output_kinds, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(aarch64_object_runs_under_emulation, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(bad_input_exits_2_and_writes_nothing, cli_fixture_setup,
                                        cli_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
