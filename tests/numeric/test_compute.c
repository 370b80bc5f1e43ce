/* test_compute.c: compute: bf16. The kernels against the reference engine
 * with the same compute over the randomized sweep, on every code path
 * this host runs (its own ISA, and AVX2 code on an AVX-512 host); the
 * bf16 result against the f32 reference (near, but not equal: the
 * rounding happens); thread counts bitwise identical; one-token decode
 * steps against the one-shot prefill.
 *
 * Tolerance against the bf16 reference: the reference rounds operands
 * computed in double, the kernels the same operands computed in f32, so
 * an operand on a rounding boundary may fall one bf16 step (2^-8
 * relative) the other way, and the kernels' p is rounded against the
 * running maximum, the reference's against the final one (one rounding
 * per p). Each such step moves one term of a long sum: the outputs
 * stay within BF16_TOL of the largest. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

enum { SWEEP = 30 };

static bool host_has(uint32_t features) {
    return (attn_cpu_features() & features) == features;
}

/* Whether this host runs the AMX code emulated ($ATTNC_AMX_EMULATE):
 * AVX512-BF16 and no AMX of its own. */
static bool amx_emulated_here(void) {
    return !host_has(ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16) &&
           host_has(ATTN_CPU_AVX512F | ATTN_CPU_AVX512BF16);
}

/* Sweep config i with compute bf16. */
static attn_config bf16_config(int i, uint64_t *s, int64_t *T, int64_t *chunk) {
    attn_config c = sweep_config(i, s, T, chunk);
    c.compute = ATTN_DTYPE_BF16;
    return c;
}

static void bf16_kernels_equal_bf16_reference(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t s = 99;
    int n = getenv("ATTNC_SWEEP") ? atoi(getenv("ATTNC_SWEEP")) : SWEEP;
    uint32_t v3 = ATTN_CPU_AVX | ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_F16C | ATTN_CPU_BMI2;
    bool avx2 = host_has(v3) && host_has(ATTN_CPU_AVX512F);
    if (!avx2)
        print_message("note: this host has no AVX-512: only its own code path runs\n");
    double worst = 0;
    for (int i = 0; i < n; i++) {
        int64_t T, chunk;
        attn_config c = bf16_config(i, &s, &T, &chunk);
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("sweep %d: %s", i, m.text);
        attnc_options o = attnc_options_default();
        o.cpu = avx2 && i % 2 ? "x86-64-v3" : NULL;
        double e =
            jit_vs_ref(write_spec(dir, &c, "bf16.yaml"), &o, T, chunk, 1 + i % 3, (uint64_t)i);
        if (!(e <= BF16_TOL))
            fail_msg("sweep %d (cpu %s, heads %lld/%lld hd %lld T %lld chunk %lld weights %s "
                     "cache %s): relative error %g against the bf16 reference",
                     i, o.cpu ? o.cpu : "host", (long long)c.heads, (long long)c.kv_groups,
                     (long long)c.head_dim, (long long)T, (long long)chunk,
                     attn_dtype_name(c.dtype), attn_dtype_name(c.kv_dtype), e);
        worst = e > worst ? e : worst;
        if (getenv("ATTNC_VERBOSE"))
            print_message("sweep %d: %s %s/%s T %lld: %.3g\n", i, o.cpu ? o.cpu : "host",
                          attn_dtype_name(c.dtype), attn_dtype_name(c.kv_dtype), (long long)T, e);
    }
    print_message("%d configs: largest relative error %.3g\n", n, worst);
    tmpdir_remove(dir);
}

/* A q8_0 cache with compute bf16: d * q rounded as an operand. With
 * AVX512-BF16 the kernels pair the dequantized K and V for vdpbf16ps
 * (flash tiles, the split decode's q.k and full tiles' p.v), and for AMX
 * tiles (emulated here where the host has AVX512-BF16 and no AMX); blocks of
 * whole key tiles (16, 32, 48 tokens) or not (1, 7, 20: key by key,
 * gathers), one-token steps (split) and longer calls (flash), head_dim
 * 32 to 256, 1 to 3 threads, against the bf16 reference. */
static void bf16_over_a_q8_0_cache_equals_bf16_reference(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    if (!host_has(ATTN_CPU_AVX512BF16))
        print_message("note: this host has no AVX512-BF16: the pairs are not used here\n");
    static const int in32[5] = {0, 2, 4, 5, 6}; /* sweep_config's head_dim 32, 64, 96, 128, 256 */
    static const int64_t blocks[6] = {16, 7, 32, 1, 48, 20};
    uint64_t s = 7;
    double worst = 0;
    int n = 0;
    for (int k = 0; k < 12; k += sanitized_step(3), n++) {
        int64_t T, chunk;
        attn_config c = bf16_config(7 * k + in32[k % 5], &s, &T, &chunk);
        c.kv_dtype = ATTN_DTYPE_Q8_0;
        c.kv_block_tokens = blocks[k / 2 % 6];
        if (k % 2 && c.causal) /* (without causal a call sees its own keys: fed whole) */
            chunk = 1;
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("config %d: %s", k, m.text);
        double e = jit_vs_ref(write_spec(dir, &c, "q8cache.yaml"), NULL, T, chunk, 1 + k % 3,
                              (uint64_t)(100 + k));
        if (getenv("ATTNC_VERBOSE"))
            print_message("config %d: hd %lld block %lld T %lld chunk %lld: %.3g\n", k,
                          (long long)c.head_dim, (long long)c.kv_block_tokens, (long long)T,
                          (long long)chunk, e);
        if (!(e <= BF16_TOL))
            fail_msg("config %d (heads %lld/%lld hd %lld block %lld T %lld chunk %lld): relative "
                     "error %g against the bf16 reference",
                     k, (long long)c.heads, (long long)c.kv_groups, (long long)c.head_dim,
                     (long long)c.kv_block_tokens, (long long)T, (long long)chunk, e);
        worst = e > worst ? e : worst;
        if (k % 2 || !amx_emulated_here())
            continue;
        /* the AMX flash items (emulated): the whole run in one call */
        setenv("ATTNC_AMX_EMULATE", "1", 1);
        e = jit_vs_ref(write_spec(dir, &c, "q8cache.yaml"), NULL, T, T, 2, (uint64_t)(100 + k));
        unsetenv("ATTNC_AMX_EMULATE");
        if (!(e <= BF16_TOL))
            fail_msg("config %d, AMX emulated (hd %lld block %lld T %lld): relative error %g", k,
                     (long long)c.head_dim, (long long)c.kv_block_tokens, (long long)T, e);
        worst = e > worst ? e : worst;
    }
    print_message("%d configs: largest relative error %.3g\n", n, worst);
    tmpdir_remove(dir);
}

/* y of config c from the reference (compute as c says) and, with cpu
 * (NULL: the host's code), the kernels. */
static void both(const attn_config *c, const char *dir, int64_t T, float *ref, float *jit,
                 const char *cpu) {
    attn_weights *w;
    assert_int_equal(attn_weights_random(c, 3, &w, NULL), ATTN_OK);
    size_t n = (size_t)(T * c->d_model);
    float *x = random_floats(n, 4);
    run_ref(w, T, x, ref);
    if (jit) {
        attnc_options o = attnc_options_default();
        o.cpu = cpu;
        attnc_jit *j = jit_or_fail(write_spec(dir, c, "both.yaml"), &o);
        run_jit(j, w, T, x, jit, T, 2);
        attnc_jit_free(j);
    }
    free(x);
    attn_weights_free(w);
}

/* The bf16 result is the f32 one to within bf16's steps, and not equal
 * to it; on every code path the host runs (bf16 dot products, and the
 * roundings in f32 registers of AVX2 code) the kernels are nearer the
 * bf16 reference than the f32 one: an operand left unrounded in the
 * kernels moves them towards the f32 result (measured: nearer by 1.9x;
 * with no rounding in the AVX2 code, 0.6x). */
static void bf16_is_near_f32_and_not_equal(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint32_t v3 = ATTN_CPU_AVX | ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_F16C | ATTN_CPU_BMI2;
    const char *cpus[2] = {NULL, host_has(v3) && host_has(ATTN_CPU_AVX512F) ? "x86-64-v3" : NULL};
    static const char *const specs[2] = {"seed", "gemma2_9b"};
    for (int k = 0; k < 4; k++) {
        if (k % 2 && !cpus[1])
            continue;
        attn_config c = load_spec_file(spec_path(specs[k / 2]));
        int64_t T = 40;
        size_t n = (size_t)(T * c.d_model);
        float *f32 = malloc(n * sizeof *f32), *bref = malloc(n * sizeof *f32),
              *bjit = malloc(n * sizeof *f32);
        both(&c, dir, T, f32, NULL, NULL);
        c.compute = ATTN_DTYPE_BF16;
        both(&c, dir, T, bref, bjit, cpus[k % 2]);
        double er = rel_err(bref, f32, n), ej = rel_err(bjit, f32, n), eb = rel_err(bjit, bref, n);
        print_message("%s (%s), 40 tokens: bf16 reference vs f32 %.3g, kernels vs f32 %.3g, "
                      "kernels vs bf16 reference %.3g\n",
                      specs[k / 2], cpus[k % 2] ? cpus[k % 2] : "host", er, ej, eb);
        /* a few bf16 steps (2^-8) of the products' operands */
        if (!(er > 1e-3 && er < 5e-2) || !(ej > 1e-3 && ej < 5e-2) || !(eb <= BF16_TOL) ||
            !(eb < 0.75 * ej))
            fail_msg("%s (%s): bf16 vs f32: reference %g, kernels %g; kernels vs bf16 "
                     "reference %g",
                     specs[k / 2], cpus[k % 2] ? cpus[k % 2] : "host", er, ej, eb);
        free(f32);
        free(bref);
        free(bjit);
    }
    tmpdir_remove(dir);
}

/* Whether jit's outputs for T rows of x (fed chunk rows a call) are the
 * same bits with 1, 2 and 3 threads. */
static bool same_for_1_2_3_threads(const attnc_jit *jit, const attn_weights *w, int64_t T,
                                   const float *x, size_t n, int64_t chunk) {
    float *y[3];
    for (int t = 0; t < 3; t++) {
        y[t] = malloc(n * sizeof(float));
        run_jit(jit, w, T, x, y[t], chunk, t + 1);
    }
    bool same = !memcmp(y[0], y[1], n * sizeof(float)) && !memcmp(y[0], y[2], n * sizeof(float));
    for (int t = 0; t < 3; t++)
        free(y[t]);
    return same;
}

/* Bitwise equal for 1, 2 and 3 threads: prefill (GEMM, flash) and decode
 * steps (GEMV, split). */
static void bf16_results_do_not_depend_on_thread_count(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    static const int64_t chunks[2] = {300, 7};
    for (int k = 0; k < 2; k++) {
        attn_config c = load_spec_file(spec_path("seed"));
        c.compute = ATTN_DTYPE_BF16;
        c.kv_dtype = k ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F16;
        attnc_jit *jit = jit_or_fail(write_spec(dir, &c, "threads.yaml"), NULL);
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 5, &w, NULL), ATTN_OK);
        int64_t T = k ? 60 : 300;
        size_t n = (size_t)(T * c.d_model);
        float *x = random_floats(n, 6);
        if (!same_for_1_2_3_threads(jit, w, T, x, n, chunks[k]))
            fail_msg("chunks of %lld: results differ between 1, 2 and 3 threads",
                     (long long)chunks[k]);
        free(x);
        attn_weights_free(w);
        attnc_jit_free(jit);
    }
    tmpdir_remove(dir);
}

/* Prefill then one-token steps (GEMV, split decode) against the one-shot
 * prefill (GEMM, flash): both within the tolerance of the reference. */
static void bf16_decode_steps_equal_one_shot_prefill(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    static const char *const specs[] = {"seed", "gpt_oss_20b_sliding", "gemma2_9b"};
    for (int i = 0; i < 3; i++) {
        attn_config c = load_spec_file(spec_path(specs[i]));
        c.compute = ATTN_DTYPE_BF16;
        c.kv_dtype = i == 1 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        c.kv_max_tokens = 256;
        attnc_jit *jit = jit_or_fail(write_spec(dir, &c, "decode.yaml"), NULL);
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 7, &w, NULL), ATTN_OK);
        int64_t T = 90;
        size_t n = (size_t)(T * c.d_model);
        float *x = random_floats(n, 8), *one = malloc(n * sizeof *one),
              *steps = malloc(n * sizeof *one);
        run_jit(jit, w, T, x, one, T, 2);
        run_jit(jit, w, T, x, steps, 1, 2);
        double e = rel_err(steps, one, n);
        if (!(e <= BF16_TOL))
            fail_msg("%s: decode steps vs one-shot prefill: relative error %g", specs[i], e);
        free(x);
        free(one);
        free(steps);
        attn_weights_free(w);
        attnc_jit_free(jit);
    }
    tmpdir_remove(dir);
}

/* The AMX GEMM over enough rows that its threads split them (a grid of
 * row shares x panel shares, cg_gemm.c amx_grid): d_model 4096 takes row
 * blocks of 64, and 777 rows make 13 of them (the last cut short), 2
 * shares at 2 threads and 3 at 3; d_model 4160, two k blocks (4096 and
 * 64: sums through y). Bitwise equal for 1, 2 and 3 threads, and within
 * the tolerance of the reference. */
static void amx_rows_split_between_threads(const char *dir, const attnc_options *o) {
    static const int64_t d_models[2] = {4096, 4160};
    for (int i = 0; i < 2; i++) {
        attn_config c = config_small(4, 2, 64, d_models[i]);
        c.compute = ATTN_DTYPE_BF16;
        c.kv_max_tokens = 1024;
        const char *spec = write_spec(dir, &c, "amx_grid.yaml");
        int64_t T = i ? 300 : 777;
        double e = jit_vs_ref(spec, o, T, T, 3, (uint64_t)(20 + i));
        if (!(e <= BF16_TOL))
            fail_msg("AMX, d_model %lld, %lld rows, 3 threads: relative error %g",
                     (long long)c.d_model, (long long)T, e);
        attnc_jit *jit = jit_or_fail(spec, o);
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 9, &w, NULL), ATTN_OK);
        size_t n = (size_t)(T * c.d_model);
        float *x = random_floats(n, 10);
        if (!same_for_1_2_3_threads(jit, w, T, x, n, T))
            fail_msg("AMX, d_model %lld, %lld rows: results differ between 1, 2 and 3 threads",
                     (long long)c.d_model, (long long)T);
        free(x);
        attn_weights_free(w);
        attnc_jit_free(jit);
    }
}

/* The AMX path: compute bf16's GEMM compiled for an AMX CPU runs tiles
 * (the table records amx-tile and amx-bf16); f32 compute there needs no
 * AMX. Run where the host has AMX (the sweep and the tests above then
 * take it, as the host's code), refused with the features named where
 * it has not. d_model 200 and 7..75 rows: k past the last whole tile of
 * 32, row tiles of 32 cut short; more rows and k blocks:
 * amx_rows_split_between_threads. */
static void amx_kernels_run_or_are_refused(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    bool amx = host_has(ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16);
    if (!amx)
        print_message("note: this host has no AMX: AMX kernels are compiled and refused, not "
                      "run\n");
    static const int64_t d_models[3] = {200, 4096, 96};
    for (int i = 0; i < 3; i++) {
        attn_config c = config_small(4, 2, 64, d_models[i]);
        c.compute = i == 2 ? ATTN_DTYPE_F32 : ATTN_DTYPE_BF16;
        c.kv_max_tokens = 512;
        attnc_options o = attnc_options_default();
        o.cpu = "sapphirerapids";
        attnc_jit *jit = jit_or_fail(write_spec(dir, &c, "amx.yaml"), &o);
        uint32_t need = attnc_jit_kernels(jit)->cpu_features;
        bool uses = (need & ATTN_CPU_AMX_TILE) && (need & ATTN_CPU_AMX_BF16);
        if (uses != (c.compute == ATTN_DTYPE_BF16))
            fail_msg("d_model %lld, compute %s: the table %s AMX", (long long)c.d_model,
                     attn_dtype_name(c.compute), uses ? "needs" : "does not need");
        if (!amx && uses) {
            attn_block *b = NULL;
            attn_block_options bo = attn_block_options_default();
            assert_int_equal(attn_block_new(attnc_jit_kernels(jit), &bo, &b), ATTN_E_CPU);
        }
        attnc_jit_free(jit);
        if (!amx || i == 2)
            continue;
        static const int64_t rows[3] = {75, 33, 7};
        for (int k = 0; k < 3; k++) {
            double e = jit_vs_ref(write_spec(dir, &c, "amx.yaml"), &o, rows[k], rows[k], 2,
                                  (uint64_t)(10 + k));
            if (!(e <= BF16_TOL))
                fail_msg("AMX, d_model %lld, %lld rows: relative error %g", (long long)c.d_model,
                         (long long)rows[k], e);
        }
    }
    if (amx) {
        attnc_options grid_o = attnc_options_default();
        amx_rows_split_between_threads(dir, &grid_o);
    }
    tmpdir_remove(dir);
}

/* The AMX kernels' code with its tile instructions emulated
 * ($ATTNC_AMX_EMULATE, cg_amx.c): their packing, tile strides and
 * epilogues on a host with AVX512-BF16 and no AMX, against the
 * reference; the shapes of the test above, and sweep configurations. */
static void amx_code_emulated_equals_reference(void **state) {
    (void)state;
    if (host_has(ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16)) {
        print_message("skipped: this host has AMX: the test above runs the tiles themselves\n");
        skip();
    }
    if (!host_has(ATTN_CPU_AVX512F | ATTN_CPU_AVX512BF16)) {
        print_message("skipped: this host has no AVX512-BF16, which the emulation uses\n");
        skip();
    }
    char *dir = tmpdir_new();
    setenv("ATTNC_AMX_EMULATE", "1", 1);
    static const int64_t d_models[2] = {200, 4096}, rows[3] = {75, 33, 7};
    for (int i = 0; i < 2; i++) {
        attn_config c = config_small(4, 2, 64, d_models[i]);
        c.compute = ATTN_DTYPE_BF16;
        c.kv_max_tokens = 512;
        attnc_options o = attnc_options_default();
        for (int k = 0; k < 3; k++) {
            double e = jit_vs_ref(write_spec(dir, &c, "amx.yaml"), &o, rows[k], rows[k], 2,
                                  (uint64_t)(10 + k));
            if (!(e <= BF16_TOL))
                fail_msg("AMX emulated, d_model %lld, %lld rows: relative error %g",
                         (long long)c.d_model, (long long)rows[k], e);
        }
    }
    attnc_options grid_o = attnc_options_default();
    amx_rows_split_between_threads(dir, &grid_o);
    uint64_t s = 7;
    int n = getenv("ATTNC_SWEEP") ? atoi(getenv("ATTNC_SWEEP")) / 2 : 8;
    for (int i = 0; i < n; i++) {
        int64_t T, chunk;
        attn_config c = bf16_config(i, &s, &T, &chunk);
        attnc_options o = attnc_options_default();
        double e =
            jit_vs_ref(write_spec(dir, &c, "amx.yaml"), &o, T, chunk, 1 + i % 3, (uint64_t)i);
        if (!(e <= BF16_TOL))
            fail_msg("AMX emulated, sweep %d (T %lld chunk %lld weights %s): relative error %g", i,
                     (long long)T, (long long)chunk, attn_dtype_name(c.dtype), e);
    }
    unsetenv("ATTNC_AMX_EMULATE");
    tmpdir_remove(dir);
}

/* A token whose x is not finite makes its K and V not finite; the rows
 * before it (causal: they do not see it) stay finite and equal the
 * reference's, also those in the same work item, whose tile holds the
 * token as a masked key (p = 0 times V must add nothing): f32 and bf16
 * compute on this host's code, and the AMX code (its own tiles or
 * emulated). */
static void rows_that_do_not_see_a_bad_token_stay_finite(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = config_small(8, 2, 64, 96);
    c.kv_max_tokens = 256;
    const int64_t T = 100, bad = 70;
    size_t n = (size_t)(T * c.d_model), good = (size_t)(bad * c.d_model);
    float *x = random_floats(n, 5), *y = malloc(n * sizeof *y), *want = malloc(n * sizeof *want);
    x[bad * c.d_model + 3] = INFINITY;
    bool emulate = amx_emulated_here();
    for (int k = 0; k < 3; k++) {
        c.compute = k ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        if (k == 2 && !emulate) {
            print_message("note: no AMX emulation here (AMX itself, or no AVX512-BF16): the "
                          "bf16 run above took this host's own code\n");
            continue;
        }
        if (k == 2)
            setenv("ATTNC_AMX_EMULATE", "1", 1);
        const char *path = write_spec(dir, &c, "bad.yaml");
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 9, &w, NULL), ATTN_OK);
        attnc_options o = attnc_options_default();
        attnc_jit *jit = jit_or_fail(path, &o);
        run_jit(jit, w, T, x, y, T, 2);
        run_ref(w, T, x, want);
        for (size_t i = 0; i < good; i++)
            if (!isfinite(y[i]))
                fail_msg("compute %s%s: y[%zu] (token %zu) is %g, before the bad token",
                         attn_dtype_name(c.compute), k == 2 ? " (AMX emulated)" : "", i,
                         i / (size_t)c.d_model, (double)y[i]);
        double e = rel_err(y, want, good);
        if (!(e <= (k ? BF16_TOL : 1e-4)))
            fail_msg("compute %s: relative error %g before the bad token",
                     attn_dtype_name(c.compute), e);
        attnc_jit_free(jit);
        attn_weights_free(w);
        unsetenv("ATTNC_AMX_EMULATE");
    }
    free(x), free(y), free(want);
    tmpdir_remove(dir);
}

/* A token whose V is not finite (its K is: x large where only W_v's
 * weights are large), later outside the sliding window: the rows that
 * do not see it (before it, and from bad + W on) stay finite and equal
 * the reference's, though it is a key of their tiles: in one call
 * (flash), a token a call and two a call (the split decode, whose p.v
 * skips a key of weight 0 for every row of a block and masks the rows
 * of weight 0 of one that other rows see: the bad token is odd, so the
 * calls (bad - 1, bad) and (bad + W - 1, bad + W) show it to one of
 * their tokens), with no K/V heads shared and 6 heads sharing one (a
 * block of 4 rows then holds heads of both tokens of a call), f32 and
 * bf16 compute. */
static void a_bad_token_past_the_window_changes_nothing(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    const int64_t T = 48, bad = 21, W = 8, chunks[3] = {T, 1, 2};
    for (int k = 0; k < 4; k++) {
        attn_config c = k % 2 ? config_small(12, 2, 64, 96) : config_small(8, 8, 64, 96);
        c.kv_max_tokens = 256;
        c.sliding_window = W;
        c.compute = k < 2 ? ATTN_DTYPE_F32 : ATTN_DTYPE_BF16;
        const int64_t D = c.d_model;
        float *x = random_floats((size_t)(T * D), 31), *y = malloc((size_t)(T * D) * sizeof *y),
              *want = malloc((size_t)(T * D) * sizeof *want);
        x[bad * D + 3] = 1e10f;
        const char *path = write_spec(dir, &c, "window_bad.yaml");
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 32, &w, NULL), ATTN_OK);
        for (int64_t r = 0; r < c.kv_groups * c.head_dim; r++)
            w->wk[r * D + 3] = 0, w->wv[r * D + 3] = 1e30f;
        attnc_options o = attnc_options_default();
        attnc_jit *jit = jit_or_fail(path, &o);
        run_ref(w, T, x, want);
        for (int i = 0; i < 3; i++) {
            run_jit(jit, w, T, x, y, chunks[i], 2);
            /* rows before the bad token, and from bad + W on */
            for (int part = 0; part < 2; part++) {
                int64_t t0 = part ? bad + W : 0, t1 = part ? T : bad;
                for (int64_t e = t0 * D; e < t1 * D; e++)
                    if (!isfinite(y[e]))
                        fail_msg("kv_groups %lld, compute %s, %lld tokens a call: y of token "
                                 "%lld is %g",
                                 (long long)c.kv_groups, attn_dtype_name(c.compute),
                                 (long long)chunks[i], (long long)(e / D), (double)y[e]);
                double err = rel_err(y + t0 * D, want + t0 * D, (size_t)((t1 - t0) * D));
                if (!(err <= (k < 2 ? 1e-4 : BF16_TOL)))
                    fail_msg("kv_groups %lld, compute %s, %lld tokens a call: relative error %g "
                             "in tokens %lld..%lld",
                             (long long)c.kv_groups, attn_dtype_name(c.compute),
                             (long long)chunks[i], err, (long long)t0, (long long)t1 - 1);
            }
        }
        attnc_jit_free(jit);
        attn_weights_free(w);
        free(x), free(y), free(want);
    }
    tmpdir_remove(dir);
}

/* A tile's keys past the sequence's end read the slots of its last block
 * (a vector of keys stays whole): slots a truncated sequence left holding
 * values that are not finite must change nothing. 60 tokens whose last
 * ten have an infinite input, truncated to 40, then 12 tokens in one
 * call (the flash prefill, not the split decode), against the reference
 * fed the 52 finite tokens: f32 and bf16
 * compute, f32, f16 and bf16 caches, this host's code and the AMX code
 * (emulated where the host has AVX512-BF16 and no AMX). */
static void slots_past_the_end_change_nothing(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    bool emulate = amx_emulated_here();
    static const attn_dtype caches[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    for (int k = 0; k < 9; k++) {
        attn_config c = config_small(8, 2, 64, 96);
        c.kv_max_tokens = 128;
        c.kv_dtype = caches[k % 3];
        c.compute = k < 3 ? ATTN_DTYPE_F32 : ATTN_DTYPE_BF16;
        if (k >= 6 && !emulate)
            continue;
        if (k >= 6)
            setenv("ATTNC_AMX_EMULATE", "1", 1);
        const char *path = write_spec(dir, &c, "past.yaml");
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 21, &w, NULL), ATTN_OK);
        const int64_t D = c.d_model, T = 52;
        float *bad = random_floats((size_t)(60 * D), 22), *x = random_floats((size_t)(T * D), 22);
        for (int64_t t = 50; t < 60; t++)
            bad[t * D + 1] = INFINITY;
        float *y = malloc((size_t)(60 * D) * sizeof *y),
              *want = malloc((size_t)(T * D) * sizeof *want);
        attnc_options o = attnc_options_default();
        attnc_jit *jit = jit_or_fail(path, &o);
        attn_block_options bo = attn_block_options_default();
        bo.n_threads = 2;
        attn_block *b = NULL;
        attn_cache *cache = NULL;
        int32_t s = 0, n60 = 60, n12 = 12;
        assert_int_equal(attn_block_new(attnc_jit_kernels(jit), &bo, &b), ATTN_OK);
        assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
        assert_int_equal(attn_cache_new(b, 64, &cache), ATTN_OK);
        assert_int_equal(attn_seq_new(cache, &s), ATTN_OK);
        assert_int_equal(attn_forward(b, cache, 1, &s, &n60, bad, y), ATTN_OK);
        assert_int_equal(attn_seq_truncate(cache, s, 40), ATTN_OK);
        assert_int_equal(attn_forward(b, cache, 1, &s, &n12, x + 40 * D, y), ATTN_OK);
        run_ref(w, T, x, want);
        double e = rel_err(y, want + 40 * D, (size_t)(12 * D));
        if (!(e <= (c.compute == ATTN_DTYPE_BF16 ? BF16_TOL : kv_tolerance(c.kv_dtype))))
            fail_msg("compute %s, %s cache%s: relative error %g after the truncated slots",
                     attn_dtype_name(c.compute), attn_dtype_name(c.kv_dtype),
                     k >= 6 ? " (AMX emulated)" : "", e);
        attn_cache_free(cache);
        attn_block_free(b);
        attnc_jit_free(jit);
        attn_weights_free(w);
        free(bad), free(x), free(y), free(want);
        unsetenv("ATTNC_AMX_EMULATE");
    }
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bf16_is_near_f32_and_not_equal),
        cmocka_unit_test(bf16_kernels_equal_bf16_reference),
        cmocka_unit_test(bf16_over_a_q8_0_cache_equals_bf16_reference),
        cmocka_unit_test(bf16_results_do_not_depend_on_thread_count),
        cmocka_unit_test(bf16_decode_steps_equal_one_shot_prefill),
        cmocka_unit_test(amx_kernels_run_or_are_refused),
        cmocka_unit_test(amx_code_emulated_equals_reference),
        cmocka_unit_test(rows_that_do_not_see_a_bad_token_stay_finite),
        cmocka_unit_test(a_bad_token_past_the_window_changes_nothing),
        cmocka_unit_test(slots_past_the_end_change_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
