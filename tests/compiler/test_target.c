/* test_target.c: kernel tables carry the CPU features their code was
 * compiled for, as LLVM selects instructions for the target CPU, and the
 * runtime refuses a table this CPU cannot run, naming what is missing;
 * attnc compile says which CPU it targets when none is given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

#define SEED ATTNC_SOURCE_DIR "/specs/seed.yaml"

static const uint32_t V2 = ATTN_CPU_SSE4_1 | ATTN_CPU_SSE4_2 | ATTN_CPU_POPCNT;
static const uint32_t V3_ONLY = ATTN_CPU_AVX | ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_F16C |
                                ATTN_CPU_BMI2 | ATTN_CPU_LZCNT | ATTN_CPU_MOVBE;
static const uint32_t V4_ONLY =
    ATTN_CPU_AVX512F | ATTN_CPU_AVX512BW | ATTN_CPU_AVX512DQ | ATTN_CPU_AVX512VL;

static uint32_t features_of(const char *target, const char *cpu) {
    attnc_options o = attnc_options_default();
    o.target = target;
    o.cpu = cpu;
    char name[128], err[1024];
    uint32_t f = 0xdeadbeef;
    attnc_ctx *ctx = attnc_ctx_new();
    attnc_status st = attnc_target_cpu(ctx, &o, name, sizeof name, &f);
    attnc_diag_text(ctx, err, sizeof err);
    attnc_ctx_free(ctx);
    if (st != ATTNC_OK)
        fail_msg("attnc_target_cpu %s: %s", cpu ? cpu : "(host)", err);
    assert_string_equal(name, cpu ? cpu : name);
    return f;
}

/* The x86-64 levels are defined by their features (x86-64 psABI), and
 * named CPUs have what their vendors list: LLVM's answer must agree. */
static void named_cpus_need_their_documented_features(void **state) {
    (void)state;
    const char *x86 = "x86_64-linux-gnu", *arm = "aarch64-linux-gnu";
    assert_int_equal(features_of(x86, "x86-64"), 0);
    assert_int_equal(features_of(x86, "x86-64-v2"), V2);
    assert_int_equal(features_of(x86, "x86-64-v3"), V2 | V3_ONLY);
    assert_int_equal(features_of(x86, "x86-64-v4"), V2 | V3_ONLY | V4_ONLY);
    assert_int_equal(features_of(x86, "znver3"), V2 | V3_ONLY);
    assert_int_equal(features_of(x86, "znver4"), V2 | V3_ONLY | V4_ONLY | ATTN_CPU_AVX512BF16 |
                                                     ATTN_CPU_AVX512VBMI | ATTN_CPU_AVX512VNNI);
    assert_int_equal(features_of(x86, "alderlake"), V2 | V3_ONLY | ATTN_CPU_AVXVNNI);
    assert_int_equal(features_of(x86, "sapphirerapids"),
                     V2 | V3_ONLY | V4_ONLY | ATTN_CPU_AVX512BF16 | ATTN_CPU_AVX512FP16 |
                         ATTN_CPU_AVX512VBMI | ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16 |
                         ATTN_CPU_AVX512VNNI | ATTN_CPU_AVXVNNI);
    assert_int_equal(features_of(arm, "generic"), 0);
    assert_int_equal(features_of(arm, "cortex-a72"), 0);
    assert_int_equal(features_of(arm, "neoverse-v1"),
                     ATTN_CPU_ARM_FP16 | ATTN_CPU_ARM_BF16 | ATTN_CPU_ARM_I8MM);
    assert_int_equal(features_of(arm, "neoverse-n1"), ATTN_CPU_ARM_FP16);
    /* a feature string on top of a CPU counts too */
    attnc_options o = attnc_options_default();
    o.target = x86;
    o.cpu = "x86-64-v3";
    o.features = "-avx2,-fma";
    char name[64];
    uint32_t f;
    assert_int_equal(attnc_target_cpu(NULL, &o, name, sizeof name, &f), ATTNC_OK);
    assert_int_equal(f & (ATTN_CPU_AVX2 | ATTN_CPU_FMA), 0);
    assert_true(f & ATTN_CPU_AVX);
    /* AVX512-VNNI off, AVX-VNNI on: LLVM cannot select the probe's
     * vpdpbusd (it aborted the process before the probe read it alone) */
    o.cpu = "sapphirerapids";
    o.features = "-avx512vnni";
    assert_int_equal(attnc_target_cpu(NULL, &o, name, sizeof name, &f), ATTNC_OK);
    assert_int_equal(f, features_of(x86, "sapphirerapids") & ~ATTN_CPU_AVX512VNNI);
    o.target = arm;
    o.cpu = "neoverse-v1";
    o.features = "-i8mm";
    assert_int_equal(attnc_target_cpu(NULL, &o, name, sizeof name, &f), ATTNC_OK);
    assert_int_equal(f, ATTN_CPU_ARM_FP16 | ATTN_CPU_ARM_BF16);
    o.target = x86;
    o.features = NULL;
    o.cpu = "no-such-cpu";
    attnc_ctx *ctx = attnc_ctx_new();
    assert_int_equal(attnc_target_cpu(ctx, &o, name, sizeof name, &f), ATTNC_E_SPEC);
    char err[1024];
    attnc_diag_text(ctx, err, sizeof err);
    assert_non_null(strstr(err, "unknown CPU 'no-such-cpu'"));
    attnc_ctx_free(ctx);
}

static attnc_jit *jit_for(const char *cpu) {
    attnc_options o = attnc_options_default();
    o.cpu = cpu;
    return jit_or_fail(SEED, &o);
}

/* The table records what the target needs: the host's code needs no more
 * than this CPU has, a named CPU's what attnc_target_cpu says (but AMX and
 * VNNI, which only compute bf16 and activations q8_0 use: test_compute,
 * test_activations). */
static void tables_record_their_features(void **state) {
    (void)state;
    attnc_jit *host = jit_for(NULL);
    uint32_t need = attnc_jit_kernels(host)->cpu_features, have = attn_cpu_features();
    assert_int_equal(need & ~have, 0);
    uint32_t only_some =
        ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16 | ATTN_CPU_AVX512VNNI | ATTN_CPU_AVXVNNI;
    assert_int_equal(need, features_of(NULL, NULL) & ~only_some);
#if defined(__x86_64__)
    assert_true(have & ATTN_CPU_SSE4_2); /* every machine this is tested on */
    assert_true(need & ATTN_CPU_SSE4_2);
    if (have & ATTN_CPU_AVX2) {
        attnc_jit *v3 = jit_for("x86-64-v3");
        assert_int_equal(attnc_jit_kernels(v3)->cpu_features, V2 | V3_ONLY);
        attnc_jit_free(v3);
    }
#endif
    attnc_jit_free(host);
}

/* attnc_spec_cpu_features says what the table of a spec's kernels
 * records, and attnc_target_cpu's CPU name, for compute f32 and bf16
 * and activations q8_0, this host's CPU and named ones (their AMX,
 * AVX512-VNNI, AVX-VNNI, I8MM in or out as the spec uses them); a
 * missing spec is an error. */
static void spec_features_are_the_tables(void **state) {
    (void)state;
    char *dir = tmpdir_new();
#if defined(__x86_64__)
    const char *cpus[] = {NULL, "sapphirerapids", "znver4", "alderlake", "x86-64-v3"};
#else
    const char *cpus[] = {NULL, "neoverse-v1", "neoverse-n1"};
#endif
    for (int k = 0; k < 3; k++) {
        attn_config c = load_spec_file(SEED);
        if (k == 1)
            c.compute = ATTN_DTYPE_BF16;
        if (k == 2)
            c.dtype = ATTN_DTYPE_Q8_0, c.activations = ATTN_DTYPE_Q8_0;
        const char *path = write_spec(dir, &c, "features.yaml");
        for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++) {
            attnc_options o = attnc_options_default();
            o.cpu = cpus[i];
            uint32_t f = 0, all;
            char name[128] = "", want[128];
            assert_int_equal(attnc_spec_cpu_features(NULL, path, &o, name, sizeof name, &f),
                             ATTNC_OK);
            assert_int_equal(attnc_target_cpu(NULL, &o, want, sizeof want, &all), ATTNC_OK);
            assert_string_equal(name, want);
            attnc_jit *j = jit_or_fail(path, &o);
            uint32_t table = attnc_jit_kernels(j)->cpu_features;
            if (f != table)
                fail_msg("case %d, cpu %s: %#x, the table %#x", k, cpus[i] ? cpus[i] : "(host)",
                         (unsigned)f, (unsigned)table);
            attnc_jit_free(j);
        }
    }
    uint32_t f;
    attnc_options o = attnc_options_default();
    assert_int_equal(attnc_spec_cpu_features(NULL, "/nonexistent/spec.yaml", &o, NULL, 0, &f),
                     ATTNC_E_IO);
    assert_int_equal(attnc_spec_cpu_features(NULL, SEED, &o, NULL, 0, NULL), ATTNC_E_INVALID);
    tmpdir_remove(dir);
}

/* A table asking for a feature this CPU lacks (one of the other
 * architecture's, which no CPU here has) is refused with its name. */
static void a_table_this_cpu_cannot_run_is_refused(void **state) {
    (void)state;
    attnc_jit *j = jit_for(NULL);
    attn_kernels k = *attnc_jit_kernels(j);
    attn_block *b = NULL;
    attn_msg m = {{0}};
    assert_int_equal(attn_kernels_check(&k, &m), ATTN_OK);
    assert_int_equal(attn_block_new(&k, NULL, &b), ATTN_OK);
    attn_block_free(b);
    b = NULL;
#if defined(__x86_64__)
    k.cpu_features |= ATTN_CPU_ARM_FP16 | ATTN_CPU_ARM_BF16;
    const char *want = "lacks: fp16, bf16 (compile them on this machine, or for a CPU every "
                       "target has: attnc compile --cpu x86-64-v3)";
#else
    k.cpu_features |= ATTN_CPU_AVX2;
    const char *want = "lacks: avx2";
#endif
    assert_int_equal(attn_block_new(&k, NULL, &b), ATTN_E_CPU);
    assert_null(b);
    assert_int_equal(attn_kernels_check(&k, &m), ATTN_E_CPU);
    assert_non_null(strstr(m.text, "the kernels of 'seed' were compiled for CPU features"));
    assert_non_null(strstr(m.text, want));
    assert_string_equal(attn_status_str(ATTN_E_CPU),
                        "the kernels need CPU features this machine lacks");
    /* other broken tables get their reason too */
    attn_kernels old = *attnc_jit_kernels(j);
    old.abi_version = ATTN_KERNELS_ABI - 1;
    assert_int_equal(attn_block_new(&old, NULL, &b), ATTN_E_INVALID);
    assert_int_equal(attn_kernels_check(&old, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "ABI version"));
    old = *attnc_jit_kernels(j);
    old.n_buffers = 1;
    assert_int_equal(attn_kernels_check(&old, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "malformed"));
    assert_int_equal(attn_kernels_check(NULL, &m), ATTN_E_INVALID);
    attnc_jit_free(j);
}

static void feature_names(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(attn_cpu_feature_names(0, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    int n =
        attn_cpu_feature_names(ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_AVX512FP16, buf, sizeof buf);
    assert_string_equal(buf, "avx2, fma, avx512fp16");
    assert_int_equal(n, (int)strlen(buf));
    /* a bit with no name (from a newer compiler) is still shown */
    attn_cpu_feature_names(1u << 30, buf, sizeof buf);
    assert_string_equal(buf, "bit 30");
    /* truncated like snprintf, the full length returned */
    char small[8];
    n = attn_cpu_feature_names(V2 | V3_ONLY, small, sizeof small);
    assert_int_equal(strlen(small), 7);
    assert_int_equal(n, attn_cpu_feature_names(V2 | V3_ONLY, NULL, 0));
    assert_true(n > 60);
}

/* attnc compile names the CPU it compiles for when none is given. */
static void compile_names_its_cpu(void **state) {
    cli_fixture *f = *state;
    char obj[1024], out[1024];
    snprintf(obj, sizeof obj, "%s", path_in(f->dir, "s.o"));
    snprintf(out, sizeof out, "%s", f->out);
    const char *host[] = {ATTNC_BIN, "compile", SEED, "-o", obj, NULL};
    assert_int_equal(run_cmd(host, out, NULL), 0);
    assert_file_has(out, "for this machine's CPU, ");
    assert_file_has(out, "the code needs ");
    char *line = file_text(out);
    /* seed's compute f32 and activations f32 use no AMX or VNNI */
    if (strstr(line, "vnni") || strstr(line, "amx"))
        fail_msg("the line names what the kernels do not use: %s", line);
    free(line);
    const char *v3[] = {ATTNC_BIN, "compile", SEED, "-o", obj, "--cpu", "x86-64-v3", NULL};
    assert_int_equal(run_cmd(v3, out, NULL), 0);
    char *text = file_text(out);
    assert_null(strstr(text, "this machine's CPU"));
    free(text);
}

/* The light pipeline's instcombine may need more than one iteration
 * (the AVX2 split decode of 6 K/V groups of 4 did): it must go on, not
 * verify a fixpoint and abort the process (LLVM 19's default for a
 * standalone instcombine). */
static void every_cpu_compiles_six_groups(void **state) {
    (void)state;
    static const char spec[] = "name: six\nheads: 24\nkv_groups: 6\nhead_dim: 128\n"
                               "d_model: 32\ncausal: true\nrope: {base: 500000}\n";
    char *dir = tmpdir_new();
    char path[1024];
    snprintf(path, sizeof path, "%s", path_in(dir, "six.yaml"));
    write_file(path, spec, strlen(spec));
    const char *cpus[] = {"znver3", "x86-64-v3", "znver4", "x86-64"};
    for (int i = 0; i < 4; i++) {
        attnc_options o = attnc_options_default();
        o.cpu = cpus[i];
        o.no_cache = 1;
        char err[1024];
        attnc_ctx *ctx = attnc_ctx_new();
        attnc_status st =
            attnc_compile_file(ctx, path, &o, ATTNC_EMIT_OBJ, path_in(dir, "six.o"), NULL);
        attnc_diag_text(ctx, err, sizeof err);
        attnc_ctx_free(ctx);
        if (st != ATTNC_OK)
            fail_msg("--cpu %s: %s", cpus[i], err);
    }
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_cpu_compiles_six_groups),
        cmocka_unit_test(named_cpus_need_their_documented_features),
        cmocka_unit_test(tables_record_their_features),
        cmocka_unit_test(a_table_this_cpu_cannot_run_is_refused),
        cmocka_unit_test(spec_features_are_the_tables),
        cmocka_unit_test(feature_names),
        cmocka_unit_test_setup_teardown(compile_names_its_cpu, cli_fixture_setup,
                                        cli_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
