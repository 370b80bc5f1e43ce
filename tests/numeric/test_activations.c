/* test_activations.c: activations: q8_0. The kernels against the
 * reference engine with the same activations over the randomized sweep
 * (q8_0 and q4_0 weights), on every code path this host runs: its own
 * (vpdpbusd on an AVX-512 VNNI host), AVX2 code without VNNI (the same
 * integers from widened bytes) and AVX2 code with AVX-VNNI; the q8_0
 * result against the f32 activations' (near, not equal); thread counts
 * bitwise identical; one-token decode steps (the GEMV) against the
 * one-shot prefill (the GEMM); the table records VNNI only where its code
 * uses it.
 *
 * Tolerance against the reference: every block sum is exact and the
 * kernels sum the blocks in f32, but the output projection's input is
 * computed in f32 by the kernels and in double by the reference, and an
 * element on a rounding boundary of its block's q falls one step the
 * other way: one term of the projection moves by d = max|x| / 127. With
 * the sweep's small inputs (32 to 64 wide) that is up to a few 1e-3 of
 * the largest output (measured: at most 3.8e-4 over 30 configs); ACT_TOL. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

enum { SWEEP = 30 };
#define ACT_TOL 2e-3

static bool host_has(uint32_t features) {
    return (attn_cpu_features() & features) == features;
}

/* Sweep config i with int8 weights (q8_0 and q4_0 in turn) and
 * activations q8_0 (a q8_0 cache stays, its q.k quantizing q, but for
 * cross-attention and compute bf16, which do not take it yet: f16). */
static attn_config q8_config(int i, uint64_t *s, int64_t *T, int64_t *chunk) {
    attn_config c = sweep_config(i, s, T, chunk);
    c.dtype = i % 2 ? ATTN_DTYPE_Q4_0 : ATTN_DTYPE_Q8_0;
    c.d_model = (c.d_model + 31) / 32 * 32;
    if ((c.heads * c.head_dim) % 32) /* head_dim 40 or 80: 4 x 40 = 5 x 32 */
        c.heads *= 4, c.kv_groups *= 4;
    if (c.kv_dtype == ATTN_DTYPE_Q8_0 && (c.memory_dim > 0 || c.compute == ATTN_DTYPE_BF16))
        c.kv_dtype = ATTN_DTYPE_F16;
    c.activations = ATTN_DTYPE_Q8_0;
    return c;
}

/* The code paths: the host's, and on an x86 host with AVX2 its AVX2 code
 * without VNNI and (AVX-VNNI hosts) with it. */
typedef struct path {
    const char *name, *cpu, *features;
} path;

static int host_paths(path *p) {
    uint32_t v3 = ATTN_CPU_AVX | ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_F16C | ATTN_CPU_BMI2;
    int n = 0;
    p[n++] = (path){"host", NULL, NULL};
    if (!host_has(v3)) {
        print_message("note: this host has no AVX2: only its own code path runs\n");
        return n;
    }
    if (host_has(ATTN_CPU_AVX512F))
        p[n++] = (path){"x86-64-v3", "x86-64-v3", NULL};
    if (host_has(ATTN_CPU_AVXVNNI))
        p[n++] = (path){"x86-64-v3+avxvnni", "x86-64-v3", "+avxvnni"};
    else
        print_message("note: this host has no AVX-VNNI: AVX2 code with vpdpbusd is not run\n");
    if (!host_has(ATTN_CPU_AVX512VNNI) && !host_has(ATTN_CPU_AVXVNNI))
        print_message("note: this host has no VNNI: only the products without it run\n");
    return n;
}

static void q8_kernels_equal_q8_reference(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t s = 99;
    int n = getenv("ATTNC_SWEEP") ? atoi(getenv("ATTNC_SWEEP")) : SWEEP;
    path paths[3];
    int np = host_paths(paths);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        int64_t T, chunk;
        attn_config c = q8_config(i, &s, &T, &chunk);
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("sweep %d: %s", i, m.text);
        const path *p = &paths[i % np];
        attnc_options o = attnc_options_default();
        o.cpu = p->cpu;
        o.features = p->features;
        double e = jit_vs_ref(write_spec(dir, &c, "q8.yaml"), &o, T, chunk, 1 + i % 3, (uint64_t)i);
        if (!(e <= ACT_TOL))
            fail_msg("sweep %d (%s, heads %lld/%lld hd %lld d_model %lld T %lld chunk %lld "
                     "weights %s cache %s): relative error %g against the reference",
                     i, p->name, (long long)c.heads, (long long)c.kv_groups, (long long)c.head_dim,
                     (long long)c.d_model, (long long)T, (long long)chunk, attn_dtype_name(c.dtype),
                     attn_dtype_name(c.kv_dtype), e);
        worst = e > worst ? e : worst;
        if (getenv("ATTNC_VERBOSE"))
            print_message("sweep %d: %s %s/%s T %lld: %.3g\n", i, p->name, attn_dtype_name(c.dtype),
                          attn_dtype_name(c.kv_dtype), (long long)T, e);
    }
    print_message("%d configs: largest relative error %.3g\n", n, worst);
    tmpdir_remove(dir);
}

/* y of c's block for T tokens of x (seed 4) from the reference, and from
 * the kernels compiled for cpu when jit. */
static void both(const attn_config *c, const char *dir, int64_t T, float *ref, float *jit,
                 const path *p) {
    attn_weights *w;
    assert_int_equal(attn_weights_random(c, 3, &w, NULL), ATTN_OK);
    float *x = random_floats((size_t)(T * c->d_model), 4);
    run_ref(w, T, x, ref);
    if (jit) {
        attnc_options o = attnc_options_default();
        o.cpu = p->cpu;
        o.features = p->features;
        attnc_jit *j = jit_or_fail(write_spec(dir, c, "both.yaml"), &o);
        run_jit(j, w, T, x, jit, T, 2);
        attnc_jit_free(j);
    }
    free(x);
    attn_weights_free(w);
}

/* The q8_0 result is the f32 activations' to within the quantization of
 * x (steps of max|x| / 127 in each block), not equal to it; the kernels
 * on every path are nearer the q8_0 reference than the f32 one. */
static void q8_is_near_f32_and_not_equal(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    path paths[3];
    int np = host_paths(paths);
    static const char *const specs[2] = {"seed", "gemma2_9b"};
    static const attn_dtype wts[2] = {ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q4_0};
    for (int k = 0; k < 2 * np; k += sanitized_step(2)) { /* sanitizers: seed alone */
        attn_config c = load_spec_file(spec_path(specs[k % 2]));
        c.dtype = wts[(k / 2) % 2];
        int64_t T = 40;
        size_t n = (size_t)(T * c.d_model);
        float *f32 = malloc(n * sizeof *f32), *qref = malloc(n * sizeof *f32),
              *qjit = malloc(n * sizeof *f32);
        both(&c, dir, T, f32, NULL, NULL);
        c.activations = ATTN_DTYPE_Q8_0;
        both(&c, dir, T, qref, qjit, &paths[k / 2 % np]);
        double er = rel_err(qref, f32, n), ej = rel_err(qjit, f32, n), eq = rel_err(qjit, qref, n);
        print_message("%s %s (%s), 40 tokens: q8_0 reference vs f32 %.3g, kernels vs f32 %.3g, "
                      "kernels vs q8_0 reference %.3g\n",
                      specs[k % 2], attn_dtype_name(c.dtype), paths[k / 2 % np].name, er, ej, eq);
        if (!(er > 1e-3 && er < 5e-2) || !(ej > 1e-3 && ej < 5e-2) || !(eq <= ACT_TOL) ||
            !(eq < 0.5 * ej))
            fail_msg("%s (%s): q8_0 vs f32: reference %g, kernels %g; kernels vs q8_0 "
                     "reference %g",
                     specs[k % 2], paths[k / 2 % np].name, er, ej, eq);
        free(f32);
        free(qref);
        free(qjit);
    }
    tmpdir_remove(dir);
}

/* Bitwise equal for 1, 2 and 3 threads, prefill (GEMM) and decode steps
 * (GEMV); and the steps against the one-shot prefill. */
static void q8_threads_and_decode_steps(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    static const char *const specs[2] = {"seed", "gpt_oss_20b_sliding"};
    for (int k = 0; k < 2; k += sanitized_step(2)) { /* sanitizers: seed alone */
        attn_config c = load_spec_file(spec_path(specs[k]));
        c.dtype = k ? ATTN_DTYPE_Q4_0 : ATTN_DTYPE_Q8_0;
        c.kv_dtype = k ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F16;
        c.activations = ATTN_DTYPE_Q8_0;
        c.kv_max_tokens = 256;
        attnc_jit *jit = jit_or_fail(write_spec(dir, &c, "threads.yaml"), NULL);
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 5, &w, NULL), ATTN_OK);
        int64_t T = 90;
        size_t n = (size_t)(T * c.d_model);
        float *x = random_floats(n, 6), *y[3], *steps[3];
        for (int t = 0; t < 3; t++) {
            y[t] = malloc(n * sizeof(float));
            steps[t] = malloc(n * sizeof(float));
            run_jit(jit, w, T, x, y[t], T, t + 1);
            run_jit(jit, w, T, x, steps[t], 1, t + 1);
        }
        for (int t = 1; t < 3; t++)
            if (memcmp(y[0], y[t], n * sizeof(float)) ||
                memcmp(steps[0], steps[t], n * sizeof(float)))
                fail_msg("%s: results differ between 1 and %d threads", specs[k], t + 1);
        double e = rel_err(steps[0], y[0], n);
        if (!(e <= ACT_TOL))
            fail_msg("%s: decode steps vs one-shot prefill: relative error %g", specs[k], e);
        for (int t = 0; t < 3; t++) {
            free(y[t]);
            free(steps[t]);
        }
        free(x);
        attn_weights_free(w);
        attnc_jit_free(jit);
    }
    tmpdir_remove(dir);
}

/* The table needs VNNI where its code runs vpdpbusd, only there and only
 * the form it runs: an AVX-512 VNNI CPU's zmm (znver4, and znver5 which
 * has both), AVX2 code with AVX-VNNI; nothing for f32 activations or AVX2
 * code without VNNI. */
static void tables_record_vnni_where_used(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    static const struct {
        const char *cpu, *features;
        attn_dtype act;
        uint32_t want;
    } cases[] = {
        {"znver4", NULL, ATTN_DTYPE_Q8_0, ATTN_CPU_AVX512VNNI},
        {"znver5", NULL, ATTN_DTYPE_Q8_0, ATTN_CPU_AVX512VNNI}, /* has AVX-VNNI, uses zmm */
        {"znver5", "-avx512f", ATTN_DTYPE_Q8_0, ATTN_CPU_AVXVNNI},
        {"znver4", NULL, ATTN_DTYPE_F32, 0},
        {"x86-64-v3", NULL, ATTN_DTYPE_Q8_0, 0},
        {"x86-64-v3", "+avxvnni", ATTN_DTYPE_Q8_0, ATTN_CPU_AVXVNNI},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_config c = load_spec_file(spec_path("seed"));
        c.dtype = ATTN_DTYPE_Q4_0;
        c.activations = cases[i].act;
        attnc_options o = attnc_options_default();
        o.cpu = cases[i].cpu;
        o.features = cases[i].features;
        attnc_jit *jit = jit_or_fail(write_spec(dir, &c, "vnni.yaml"), &o); /* not run */
        uint32_t vnni =
            attnc_jit_kernels(jit)->cpu_features & (ATTN_CPU_AVX512VNNI | ATTN_CPU_AVXVNNI);
        if (vnni != cases[i].want)
            fail_msg("%s%s, activations %s: the table needs VNNI bits %#x, expected %#x",
                     cases[i].cpu, cases[i].features ? cases[i].features : "",
                     attn_dtype_name(cases[i].act), vnni, cases[i].want);
        attnc_jit_free(jit);
    }
    tmpdir_remove(dir);
}

/* One token through a block whose q and k weights are zero and whose v
 * and o weights are the identity (exact in Q8_0 blocks: d 1, q 1): the
 * token sees itself alone, so y = o = v, each the dequantized Q8_0 blocks
 * of its input (quantizing them again gives the same blocks). Three
 * blocks worked by hand as ggml's quantize_row_q8_0_ref makes them:
 *  - all zero: d 0, q 0;
 *  - one large value: x = (100, 0.39, 0.4, -0.4, 0..): d = 100/127 =
 *    0.787401, as f16 0x3a4d = 1613 * 2^-11 = 0.78759765625; 1/d = 1.27:
 *    q = (127, 0 (0.4953), 1 (0.508), -1, 0..);
 *  - ties: x = (127, 2.5, -2.5, 0.5, 1.5, 0..): d = 1, q = (127, 3, -3,
 *    1, 2): away from zero (to even would give 2, -2, 0, 2).
 * The reference and the kernels on every path give exactly d * q; and
 * NaN everywhere when a block's d overflows f16. */
static void identity_block_gives_ggml_blocks_worked_by_hand(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = config_small(1, 1, 96, 96);
    c.dtype = ATTN_DTYPE_Q8_0, c.activations = ATTN_DTYPE_Q8_0, c.kv_max_tokens = 16;
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 1, &w, NULL), ATTN_OK);
    for (int i = 0; i < 96 * 96; i++) {
        w->wq[i] = w->wk[i] = 0;
        w->wv[i] = w->wo[i] = i % 97 == 0 ? 1.0f : 0.0f;
    }
    float x[96] = {0}, want[96] = {0}, y[96];
    const float big[4] = {100, 0.39f, 0.4f, -0.4f}, ties[5] = {127, 2.5f, -2.5f, 0.5f, 1.5f};
    const double dh = 1613 * 0x1p-11;
    const int qbig[4] = {127, 0, 1, -1}, qties[5] = {127, 3, -3, 1, 2};
    for (int i = 0; i < 4; i++)
        x[32 + i] = big[i], want[32 + i] = (float)(dh * qbig[i]);
    for (int i = 0; i < 5; i++)
        x[64 + i] = ties[i], want[64 + i] = (float)qties[i];
    run_ref(w, 1, x, y);
    for (int i = 0; i < 96; i++)
        if (y[i] != want[i])
            fail_msg("reference: y[%d] = %.9g, want %.9g", i, y[i], want[i]);
    /* v = 1000 x (d 8, q 125: exact) from x0 = 1e4: the output
     * projection's block of 1e7 has a d past f16 (1e7 / 127 > 65504), and
     * the row is NaN (not y0 = inf, the rest 0 * inf) */
    attn_weights *w2;
    assert_int_equal(attn_weights_random(&c, 1, &w2, NULL), ATTN_OK);
    memcpy(w2->wq, w->wq, sizeof(float) * 96 * 96);
    memcpy(w2->wk, w->wk, sizeof(float) * 96 * 96);
    memcpy(w2->wo, w->wo, sizeof(float) * 96 * 96);
    for (int i = 0; i < 96 * 96; i++)
        w2->wv[i] = 1000 * w->wv[i];
    float xo[96] = {1e4f}, yo[96];
    run_ref(w2, 1, xo, yo);
    for (int i = 0; i < 96; i++)
        if (!isnan(yo[i]))
            fail_msg("reference, d past f16: y[%d] = %g, want NaN", i, yo[i]);
    path paths[3];
    int np = host_paths(paths);
    for (int k = 0; k < np; k++) {
        attnc_options o = attnc_options_default();
        o.cpu = paths[k].cpu;
        o.features = paths[k].features;
        attnc_jit *jit = jit_or_fail(write_spec(dir, &c, "identity.yaml"), &o);
        run_jit(jit, w, 1, x, y, 1, 2);
        run_jit(jit, w2, 1, xo, yo, 1, 2);
        for (int i = 0; i < 96; i++)
            if (y[i] != want[i] || !isnan(yo[i]))
                fail_msg("%s: y[%d] = %.9g, want %.9g; overflowing: %g", paths[k].name, i, y[i],
                         want[i], yo[i]);
        attnc_jit_free(jit);
    }
    attn_weights_free(w);
    attn_weights_free(w2);
    tmpdir_remove(dir);
}

/* activations q8_0 over a q8_0 cache: each head's q quantized to Q8_0
 * blocks for q.k (the reference: ggml's int32 block sums times both
 * scales). With f32 weights nothing else is quantized: the kernels equal
 * the q8_0 reference but for the f32 arithmetic before q is quantized,
 * which moves an element on a rounding boundary of its block one step
 * (measured: one such element, 4.3e-4 of the largest output, on every
 * path; with activations f32 the same runs agree to 5.5e-7), and stand
 * apart from the f32 activations' reference by q's quantization (3.5e-3);
 * with q8_0 weights within ACT_TOL. Compute bf16 keeps q.k exact (q and
 * k not rounded) and rounds p and v: within BF16_TOL of its reference,
 * and apart from the same kernels' compute f32 by p's and v's rounding.
 * One call (the flash prefill; every fifth case the unfused kernels,
 * flash_attention disabled), chunks of 5 and a token a call (the split
 * decode), 1-3 threads, every path this host runs. */
#define Q8Q_TOL 1e-3
static void q8_query_over_a_q8_0_cache(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    path paths[3];
    int np = host_paths(paths);
    for (int i = 0; i < 3 * np * 2; i++) {
        const path *p = &paths[(i / 6) % np];
        attn_config c = config_small(4, 2, 64, 96);
        c.rope_style = ATTN_ROPE_HALF;
        c.rope_base = 10000;
        c.rotary_dim = 64;
        c.kv_dtype = ATTN_DTYPE_Q8_0;
        c.activations = ATTN_DTYPE_Q8_0;
        c.dtype = i % 2 ? ATTN_DTYPE_Q8_0 : ATTN_DTYPE_F32;
        c.compute = (i / 2) % 2 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        bool bf16 = c.compute == ATTN_DTYPE_BF16;
        if (bf16) /* larger scores: q or k rounded to bf16 would move them past BF16_TOL */
            c.scale = 2.0, c.scale_auto = false;
        int64_t T = 70, chunk = (int64_t[3]){T, 5, 1}[(i / 4) % 3];
        attnc_options o = attnc_options_default();
        o.cpu = p->cpu;
        o.features = p->features;
        const char *unfused = "flash_attention";
        if (i % 5 == 4)
            o.disabled_passes = &unfused, o.n_disabled_passes = 1;
        const char *spec = write_spec(dir, &c, "q8q.yaml");
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 5, &w, NULL), ATTN_OK);
        size_t n = (size_t)(T * c.d_model);
        float *x = random_floats(n, 6), *y = malloc(n * sizeof *y), *want = malloc(n * sizeof *y);
        attnc_jit *jit = jit_or_fail(spec, &o);
        run_jit(jit, w, T, x, y, chunk, 1 + i % 3);
        run_ref(w, T, x, want);
        double e = rel_err(y, want, n);
        double tol = bf16 ? BF16_TOL : c.dtype == ATTN_DTYPE_F32 ? Q8Q_TOL : ACT_TOL;
        if (!(e <= tol))
            fail_msg("case %d (%s, weights %s, compute %s, chunk %lld%s): relative error %g "
                     "against the reference",
                     i, p->name, attn_dtype_name(c.dtype), attn_dtype_name(c.compute),
                     (long long)chunk, i % 5 == 4 ? ", unfused" : "", e);
        if (bf16) { /* compute f32's reference: apart by p's and v's rounding */
            w->cfg.compute = ATTN_DTYPE_F32;
            run_ref(w, T, x, want);
            double apart = rel_err(y, want, n);
            if (!(apart > 1e-3))
                fail_msg("case %d (%s, chunk %lld): %g from compute f32: p and v not rounded?", i,
                         p->name, (long long)chunk, apart);
            if (getenv("ATTNC_VERBOSE"))
                print_message("case %d (bf16): %g, %g from compute f32\n", i, e, apart);
        } else if (c.dtype == ATTN_DTYPE_F32) { /* the f32 activations' reference: apart */
            w->cfg.activations = ATTN_DTYPE_F32;
            run_ref(w, T, x, want);
            double apart = rel_err(y, want, n);
            if (!(apart >= 2 * Q8Q_TOL))
                fail_msg("case %d (%s, chunk %lld): %g from f32 activations: q not quantized?", i,
                         p->name, (long long)chunk, apart);
            if (getenv("ATTNC_VERBOSE"))
                print_message("case %d: %g, %g apart\n", i, e, apart);
        }
        attnc_jit_free(jit);
        attn_weights_free(w);
        free(x), free(y), free(want);
    }
    tmpdir_remove(dir);
}

/* Over a q8_0 cache the split decode takes q.k by vpdpbusd on a VNNI
 * host and by f32 products of the same integers without VNNI: every
 * block's sum is exact either way and scaled alike, so the host's code
 * and the same code without avx512vnni give the same bits (group sizes
 * 1, 2 and 4, head_dim 32 to 256: one block to a loop of them; cache
 * blocks of 16 tokens (a tile's 4 columns one line), 32 (four loads)
 * and 8 (no whole tiles: gathered, f32 products on both); decode steps
 * of 1 and 3 tokens). */
static void q8_query_dot_products_equal_f32_sums(void **state) {
    (void)state;
    if (!host_has(ATTN_CPU_AVX512VNNI)) {
        print_message("note: this host has no AVX512-VNNI: skipped (the split decode's "
                      "vpdpbusd q.k is not run)\n");
        skip();
    }
    static const int64_t shapes[][4] = {
        {4, 2, 64, 96}, {8, 2, 128, 64}, {3, 3, 32, 64}, {4, 1, 256, 32}};
    char *dir = tmpdir_new();
    for (int i = 0; i < 8; i++) {
        const int64_t *sh = shapes[i % 4];
        attn_config c = config_small(sh[0], sh[1], sh[2], sh[3]);
        c.kv_block_tokens = (int64_t[3]){16, 32, 8}[i % 3];
        c.rope_style = ATTN_ROPE_HALF;
        c.rope_base = 10000;
        c.rotary_dim = sh[2];
        c.kv_dtype = ATTN_DTYPE_Q8_0;
        c.activations = ATTN_DTYPE_Q8_0;
        int64_t T = 40, chunk = i < 4 ? 1 : 3;
        const char *spec = write_spec(dir, &c, "dots.yaml");
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 7, &w, NULL), ATTN_OK);
        size_t n = (size_t)(T * c.d_model);
        float *x = random_floats(n, 8), *y[2];
        for (int k = 0; k < 2; k++) {
            attnc_options o = attnc_options_default();
            o.features = k ? "-avx512vnni" : NULL;
            attnc_jit *jit = jit_or_fail(spec, &o);
            uint32_t vnni = attnc_jit_kernels(jit)->cpu_features & ATTN_CPU_AVX512VNNI;
            if ((vnni != 0) != (k == 0))
                fail_msg("case %d: the %s code's table has VNNI bits %#x", i,
                         k ? "-avx512vnni" : "host", vnni);
            y[k] = malloc(n * sizeof(float));
            run_jit(jit, w, T, x, y[k], chunk, 2);
            attnc_jit_free(jit);
        }
        for (size_t e = 0; e < n; e++)
            if (memcmp(&y[0][e], &y[1][e], sizeof(float)))
                fail_msg("case %d (heads %lld/%lld, head_dim %lld, blocks of %lld, chunk %lld): "
                         "y[%zu] = %.9g with vpdpbusd, %.9g without",
                         i, (long long)sh[0], (long long)sh[1], (long long)sh[2],
                         (long long)c.kv_block_tokens, (long long)chunk, e, y[0][e], y[1][e]);
        attn_weights_free(w);
        free(x), free(y[0]), free(y[1]);
    }
    tmpdir_remove(dir);
}

/* attn_config_check: q8_0 needs an int8 operand (weights or a q8_0
 * cache; with MLA int8 weights, its latent's products staying f32);
 * activations of another dtype are refused. */
static void config_check_refuses_what_q8_0_does_not_take(void **state) {
    (void)state;
    static const struct {
        attn_dtype dt, kv, act, compute;
        const char *spec, *says;
    } cases[] = {
        {ATTN_DTYPE_BF16, ATTN_DTYPE_F16, ATTN_DTYPE_Q8_0, ATTN_DTYPE_F32, "seed",
         "needs an int8 operand"},
        {ATTN_DTYPE_Q4_0, ATTN_DTYPE_F16, ATTN_DTYPE_BF16, ATTN_DTYPE_F32, "seed", "not supported"},
        {ATTN_DTYPE_F16, ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q8_0, ATTN_DTYPE_F32, "deepseek_v3",
         "with mla quantizes the projections' inputs only"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_config c = load_spec_file(spec_path(cases[i].spec));
        c.dtype = cases[i].dt, c.kv_dtype = cases[i].kv, c.activations = cases[i].act;
        c.compute = cases[i].compute;
        attn_msg m = {0};
        if (attn_config_check(&c, &m) != ATTN_E_INVALID || !strstr(m.text, cases[i].says))
            fail_msg("case %zu: expected a refusal saying '%s', got '%s'", i, cases[i].says,
                     m.text);
    }
    /* int8 weights; a q8_0 cache with float weights, or with int8 ones,
     * with compute bf16 too, for cross-attention too; MLA's int8 weights */
    static const struct {
        attn_dtype dt, kv, compute;
        const char *spec;
    } ok[] = {{ATTN_DTYPE_Q4_0, ATTN_DTYPE_F16, ATTN_DTYPE_F32, "seed"},
              {ATTN_DTYPE_F32, ATTN_DTYPE_Q8_0, ATTN_DTYPE_F32, "seed"},
              {ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q8_0, ATTN_DTYPE_F32, "seed"},
              {ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q8_0, ATTN_DTYPE_BF16, "seed"},
              {ATTN_DTYPE_Q4_0, ATTN_DTYPE_Q8_0, ATTN_DTYPE_F32, "deepseek_v3"},
              {ATTN_DTYPE_F32, ATTN_DTYPE_Q8_0, ATTN_DTYPE_BF16, "whisper_large_v3_cross"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        attn_config c = load_spec_file(spec_path(ok[i].spec));
        c.dtype = ok[i].dt, c.kv_dtype = ok[i].kv, c.compute = ok[i].compute;
        c.activations = ATTN_DTYPE_Q8_0;
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("ok case %zu refused: %s", i, m.text);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_check_refuses_what_q8_0_does_not_take),
        cmocka_unit_test(identity_block_gives_ggml_blocks_worked_by_hand),
        cmocka_unit_test(q8_is_near_f32_and_not_equal),
        cmocka_unit_test(q8_kernels_equal_q8_reference),
        cmocka_unit_test(q8_threads_and_decode_steps),
        cmocka_unit_test(q8_query_over_a_q8_0_cache),
        cmocka_unit_test(q8_query_dot_products_equal_f32_sums),
        cmocka_unit_test(tables_record_vnni_where_used),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
