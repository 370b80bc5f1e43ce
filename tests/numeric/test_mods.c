/* test_mods.c: score_mod and mask_mod compiled into the kernels: JIT ==
 * reference for a set of expressions over the randomized sweep's configs
 * (prefill, chunked and one-token decode through the split path, every
 * cache dtype, causal and not, AVX2 code on AVX-512 hosts), thread counts
 * bitwise, the expression forms of the built-in window, chunks, softcap
 * and ALiBi against the built-ins, rows that see no key, every pass
 * disabled (the unfused score_mod / mask_mod ops), MLA's absorbed form,
 * expressions reading token, sequence and weight inputs, the masks the
 * causal_mask pass sees as causal, and random expressions with compute
 * bf16 on AMX tiles (emulated where the host has none). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* Each continuous in score (a floor or comparison of score would let a
 * rounding step of the kernels' sums flip a result). */
static const struct {
    const char *score, *mask;
} exprs[] = {
    {"", "q - kv < 5"},
    {"30 * tanh(score / 30)", ""},
    {"", "kv < 2 or q - kv < 6"},
    {"", "(q - kv) % 3 == 0"},
    {"score - 0.125 * abs(q - kv) * (h + 1)", ""},
    {"where(kv % 4 == 0, score + 1.5, score)", "g == 0 or kv >= q // 2"},
    {"score * exp(-0.01 * (q - kv)) + log(kv + 1) * 0.1 - sqrt(h + 1.0)", ""},
    {"", "h % 2 == 0 or q // 8 == kv // 8"},
    {"clamp(score, -2.5, 2.5) + min(kv, 3) * 0.25", "kv != 1 and not (kv > q + 3)"},
    {"score / (1 + abs(floor((q - kv) / 7.0)))", "max(q - kv, kv - q) < 40"},
};
enum { N_EXPRS = sizeof exprs / sizeof exprs[0] };

static attn_config with_exprs(attn_config c, int i) {
    snprintf(c.score_mod, sizeof c.score_mod, "%s", exprs[i].score);
    snprintf(c.mask_mod, sizeof c.mask_mod, "%s", exprs[i].mask);
    attn_msg m;
    if (attn_config_check(&c, &m) != ATTN_OK)
        fail_msg("expression %d: %s", i, m.text);
    return c;
}

/* This host runs x86-64-v3 (AVX2) code beside its own AVX-512. */
static bool host_avx512_and_v3(void) {
    uint32_t v3 = ATTN_CPU_AVX | ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_F16C | ATTN_CPU_BMI2;
    uint32_t f = attn_cpu_features();
    return (f & v3) == v3 && (f & ATTN_CPU_AVX512F);
}

/* How a sweep compares one spec with the reference. */
typedef double (*compare_fn)(const char *path, const attnc_options *o, int64_t T, int64_t chunk,
                             int threads, uint64_t seed);

/* JIT == reference over the sweep's configs from state s (n of them, or
 * $ATTNC_SWEEP), config i taking form i % n_forms of with(); every fourth
 * run one token a call (the split decode path), every third AVX2 code on
 * an AVX-512 host, 1-3 threads. */
static void sweep(uint64_t s, int n, attn_config (*with)(attn_config, int), int n_forms,
                  compare_fn compare, uint64_t seed0) {
    char *dir = tmpdir_new();
    n = getenv("ATTNC_SWEEP") ? atoi(getenv("ATTNC_SWEEP")) : n;
    bool avx2 = host_avx512_and_v3();
    for (int i = 0; i < n; i++) {
        int64_t T, chunk;
        attn_config c = sweep_config(i, &s, &T, &chunk);
        if (c.memory_dim > 0)
            continue;
        c = with(c, i % n_forms);
        const char *path = write_spec(dir, &c, "mods.yaml");
        attnc_options o = attnc_options_default();
        o.cpu = avx2 && i % 3 == 1 ? "x86-64-v3" : NULL;
        int64_t ch = i % 4 == 3 && c.causal ? 1 : chunk; /* not causal: one call */
        double e = compare(path, &o, T, ch, 1 + i % 3, seed0 + (uint64_t)i);
        if (!(e <= 2 * kv_tolerance(c.kv_dtype)))
            fail_msg("config %d (cpu %s, heads %lld/%lld hd %lld T %lld chunk %lld causal %d "
                     "window %lld kv %s, inputs '%s', score_mod '%s', mask_mod '%s'): relative "
                     "error %g",
                     i, o.cpu ? o.cpu : "host", (long long)c.heads, (long long)c.kv_groups,
                     (long long)c.head_dim, (long long)T, (long long)ch, c.causal,
                     (long long)c.sliding_window, attn_dtype_name(c.kv_dtype), c.inputs,
                     c.score_mod, c.mask_mod, e);
    }
    tmpdir_remove(dir);
}

static void jit_equals_reference_over_expressions_and_sweep(void **state) {
    (void)state;
    sweep(4242, 30, with_exprs, N_EXPRS, jit_vs_ref, 0);
}

/* y of T tokens through spec at path, chunk tokens a call, on threads. */
static float *run_spec(const char *path, const attnc_options *o, int64_t T, int64_t chunk,
                       int threads, float **want) {
    attn_config c = load_spec_file(path);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 77, &w, NULL), ATTN_OK);
    size_t n = (size_t)(T * c.d_model);
    float *x = random_floats(n, 78), *y = malloc(n * sizeof *y);
    attnc_jit *jit = jit_or_fail(path, o);
    run_jit(jit, w, T, x, y, chunk, threads);
    if (want) {
        *want = malloc(n * sizeof **want);
        run_ref(w, T, x, *want);
    }
    attnc_jit_free(jit);
    attn_weights_free(w);
    free(x);
    return y;
}

static attn_config with_inputs(attn_config c, int i);

static void threads_give_the_same_bits(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config seed = load_spec_file(spec_path("seed"));
    /* expressions; a per-tile table; doc's tile bounds; a dilated mask */
    for (int k = 0; k < 4; k++) {
        attn_config c = k ? with_inputs(seed, k == 1 ? 2 : 0) : with_exprs(seed, 5);
        if (k == 3) {
            c = seed;
            snprintf(c.mask_mod, sizeof c.mask_mod, "(q - kv) %% 3 == 1 and q - kv < 90");
        }
        const char *path = write_spec(dir, &c, "mods.yaml");
        for (int64_t chunk = 1; chunk <= 150; chunk += 149) { /* split decode, then flash */
            float *y1 = run_spec(path, NULL, 150, chunk, 1, NULL);
            for (int t = 2; t <= 3; t++) {
                float *yt = run_spec(path, NULL, 150, chunk, t, NULL);
                if (memcmp(y1, yt, 150 * (size_t)c.d_model * sizeof *y1) != 0)
                    fail_msg("%s, %d threads, chunks of %lld: not the bits of 1 thread",
                             c.inputs[0] ? c.inputs : c.score_mod, t, (long long)chunk);
                free(yt);
            }
            free(y1);
        }
    }
    tmpdir_remove(dir);
}

/* mask_mod "q - kv < W" is the window W; score_mod "c * tanh(score / c)"
 * the softcap c; "score - exp(-c * (h + 1)) * (q - kv)" ALiBi of 32 heads
 * (slopes 2^(-(h + 1) / 4); the exp is a row part computed once per row,
 * cg_expr_row_parts) (both kernels' arithmetic, their order may differ). */
static void expression_forms_of_built_ins(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config base = load_spec_file(spec_path("mistral_7b"));
    base.kv_max_tokens = 512;
    attn_config win = base, wexpr = base, cap = base, cexpr = base;
    attn_config chk = load_spec_file(spec_path("llama3_8b")); /* no window */
    chk.kv_max_tokens = 512;
    attn_config kexpr = chk;
    chk.chunk = 24;
    snprintf(kexpr.mask_mod, sizeof kexpr.mask_mod, "q // 24 == kv // 24");
    attn_config ali = load_spec_file(spec_path("bloom_7b1")); /* ALiBi, no RoPE */
    ali.kv_max_tokens = 512;
    attn_config aexpr = ali;
    win.sliding_window = 37;
    snprintf(wexpr.mask_mod, sizeof wexpr.mask_mod, "q - kv < 37");
    cap.softcap = 2;
    snprintf(cexpr.score_mod, sizeof cexpr.score_mod, "2 * tanh(score / 2)");
    assert_true(ali.alibi && ali.heads == 32);
    aexpr.alibi = false;
    snprintf(aexpr.score_mod, sizeof aexpr.score_mod,
             "score - exp(-0.17328679514 * (h + 1)) * (q - kv)");
    const attn_config *pairs[4][2] = {
        {&win, &wexpr}, {&cap, &cexpr}, {&ali, &aexpr}, {&chk, &kexpr}};
    static const char *const names[4] = {"window", "softcap", "alibi", "chunks"};
    for (int p = 0; p < 4; p++)
        for (int64_t chunk = 1; chunk <= 200; chunk += 199) {
            const char *a = write_spec(dir, pairs[p][0], "builtin.yaml");
            float *ya = run_spec(a, NULL, 200, chunk, 2, NULL);
            const char *b = write_spec(dir, pairs[p][1], "expr.yaml");
            float *yb = run_spec(b, NULL, 200, chunk, 2, NULL);
            double e = rel_err(yb, ya, 200 * (size_t)pairs[p][0]->d_model);
            if (!(e <= 1e-5))
                fail_msg("%s, chunks of %lld: relative error %g against the built-in", names[p],
                         (long long)chunk, e);
            free(ya);
            free(yb);
        }
    tmpdir_remove(dir);
}

/* A head whose mask hides every key: its attention is 0 (the block's
 * output is what the other heads give), in the kernels as in the
 * reference; unfused too. */
static void rows_that_see_no_key_are_zero(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = load_spec_file(spec_path("seed"));
    snprintf(c.mask_mod, sizeof c.mask_mod, "h != 3 and (h != 5 or kv > 1000)");
    const char *path = write_spec(dir, &c, "empty.yaml");
    const char *all[16];
    attnc_options none = options_without_passes(all);
    for (int64_t chunk = 1; chunk <= 40; chunk += 39)
        for (int k = 0; k < 2; k++) {
            float *want, *y = run_spec(path, k ? &none : NULL, 40, chunk, 2, &want);
            double e = rel_err(y, want, 40 * (size_t)c.d_model);
            for (size_t i = 0; i < 40 * (size_t)c.d_model; i++)
                if (y[i] != y[i])
                    fail_msg("chunks of %lld%s: NaN at %zu", (long long)chunk, k ? ", unfused" : "",
                             i);
            if (!(e <= 1e-4))
                fail_msg("chunks of %lld%s: relative error %g", (long long)chunk,
                         k ? ", unfused" : "", e);
            free(y);
            free(want);
        }
    tmpdir_remove(dir);
}

/* Calls whose rows the window and the mask_mod together show no key
 * (q % 8 == 5 sees only kv < 2, which the window of 4 hides from q 5
 * on): nothing is read. The split kernel once read key T there (the
 * keys' range empty, its first tile's keys clamped to it), a block no
 * table entry names (-1: the block before the pool); with
 * $ATTN_GUARD_PAGES=front the pool follows a page nothing may touch, so
 * that read faults. Decodes and chunks, blocks of 1 and 7 tokens,
 * compute f32 and bf16, 1 and 2 threads. */
static void rows_the_window_and_mask_hide_read_nothing(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    setenv("ATTN_GUARD_PAGES", "front", 1);
    for (int i = 0; i < 8; i++) {
        attn_config c = load_spec_file(spec_path("seed"));
        c.sliding_window = 4;
        c.kv_block_tokens = i % 2 ? 7 : 1;
        c.compute = i % 4 >= 2 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        snprintf(c.mask_mod, sizeof c.mask_mod, "q %% 8 != 5 or kv < 2");
        const char *path = write_spec(dir, &c, "hidden.yaml");
        int64_t chunk = i < 4 ? 1 : 3;
        double e = jit_vs_ref(path, NULL, 40, chunk, 1 + i % 2, (uint64_t)i + 11);
        double tol = c.compute == ATTN_DTYPE_BF16 ? BF16_TOL : kv_tolerance(c.kv_dtype);
        if (!(e <= tol))
            fail_msg("blocks of %lld, compute %s, chunks of %lld: relative error %g",
                     (long long)c.kv_block_tokens, attn_dtype_name(c.compute), (long long)chunk, e);
    }
    unsetenv("ATTN_GUARD_PAGES");
    tmpdir_remove(dir);
}

/* Each pass disabled (and all): the unfused rowwise ops evaluate the
 * same expressions. */
static void every_pass_disabled(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = with_exprs(load_spec_file(spec_path("seed")), 5);
    const char *path = write_spec(dir, &c, "mods.yaml");
    for (int p = 0; attnc_pass_name(p); p += sanitized_step(3)) {
        const char *off[] = {attnc_pass_name(p)};
        attnc_options o = attnc_options_default();
        o.disabled_passes = off;
        o.n_disabled_passes = 1;
        double e = jit_vs_ref(path, &o, 30, 7, 2, 5);
        if (!(e <= 1e-4))
            fail_msg("without %s: relative error %g", off[0], e);
    }
    const char *all[16];
    attnc_options o = options_without_passes(all);
    assert_true(jit_vs_ref(path, &o, 30, 7, 2, 5) <= 1e-4);
    tmpdir_remove(dir);
}

/* Multi-head latent attention: its absorbed flash node takes the
 * expressions as any other (prefill, chunks, one-token decode). */
static void mla_blocks(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = with_exprs(load_spec_file(spec_path("deepseek_v2_lite")), 5);
    const char *path = write_spec(dir, &c, "mla.yaml");
    for (int64_t chunk = 1; chunk <= 30; chunk += 29) {
        double e = jit_vs_ref(path, NULL, 30, chunk, 2, 9);
        if (!(e <= 1e-4))
            fail_msg("chunks of %lld: relative error %g", (long long)chunk, e);
    }
    tmpdir_remove(dir);
}

/* Expressions reading inputs: token (doc), sequence (prefix) and weight
 * (bias) ones; %H is the config's heads. Out-of-range reads included:
 * doc[q + 1] of the call's last token (not set yet: 0), doc[kv - 1] of
 * key 0, bias indices clamped. */
static const struct {
    const char *inputs, *score, *mask;
} input_exprs[] = {
    {"doc: token", "", "doc[q] == doc[kv]"},
    {"doc: token; prefix: sequence", "", "kv < prefix or (doc[q] == doc[kv] and kv <= q)"},
    {"bias: weight [%H, 32]", "score + bias[h, min(abs(q - kv), 31)]", ""},
    {"doc: token; bias: weight [7]", "score + bias[doc[kv] - 2]", "doc[kv] != 3 or q == kv"},
    {"doc: token; prefix: sequence", "score + 0.5 * where(doc[q + 1] == doc[kv - 1], 1, 0)",
     "kv < prefix + q % 5"},
};
enum { N_INPUT_EXPRS = sizeof input_exprs / sizeof input_exprs[0] };

/* inputs_jit_vs_ref: jit_vs_ref_inputs of documents of 3..31 tokens and
 * a prefix below T, by the seed. */
static double inputs_jit_vs_ref(const char *path, const attnc_options *o, int64_t T, int64_t chunk,
                                int threads, uint64_t seed) {
    return jit_vs_ref_inputs(path, o, T, chunk, threads, seed, 3 + (int64_t)(seed % 29),
                             (int32_t)(seed % (uint64_t)T));
}

static attn_config with_inputs(attn_config c, int i) {
    char decl[128];
    const char *h = strstr(input_exprs[i].inputs, "%H");
    if (h)
        snprintf(decl, sizeof decl, "%.*s%lld%s", (int)(h - input_exprs[i].inputs),
                 input_exprs[i].inputs, (long long)c.heads, h + 2);
    else
        snprintf(decl, sizeof decl, "%s", input_exprs[i].inputs);
    snprintf(c.inputs, sizeof c.inputs, "%s", decl);
    snprintf(c.score_mod, sizeof c.score_mod, "%s", input_exprs[i].score);
    snprintf(c.mask_mod, sizeof c.mask_mod, "%s", input_exprs[i].mask);
    attn_msg m;
    if (attn_config_check(&c, &m) != ATTN_OK)
        fail_msg("inputs %d: %s", i, m.text);
    return c;
}

/* JIT == reference for expressions reading inputs, over the sweep's
 * configs (chunked prefill and split decode, every cache dtype, AVX2 code
 * too) and thread counts. */
static void inputs_jit_equals_reference(void **state) {
    (void)state;
    sweep(777, 20, with_inputs, N_INPUT_EXPRS, inputs_jit_vs_ref, 100);
}

/* A uniform pick of 0..n-1 from the sweep's random state. */
static int pick(uint64_t *s, int n) {
    return (int)((rnd_unit(s) + 1) * 0.5 * n) % n;
}

/* A random int expression of depth d over positions, heads, the token
 * input doc (at any index), the sequence input prefix and literals, with
 * every int operation (// and % by any value: 0 gives 0). */
static void gen_int(char *b, size_t n, uint64_t *s, int d) {
    static const char *const leaf[] = {"q", "kv", "h", "g", "prefix", "doc[q]", "doc[kv]"};
    char a[400], c[400];
    int k = d > 0 ? pick(s, 11) : 7 + pick(s, 2);
    if (k < 7 && d <= 0)
        k = 7;
    if (k >= 7 && d <= 0) { /* a leaf: a name or a literal */
        if (pick(s, 3))
            snprintf(b, n, "%s", leaf[pick(s, 7)]);
        else
            snprintf(b, n, "%d", pick(s, 19) - 4);
        return;
    }
    gen_int(a, sizeof a, s, d - 1);
    gen_int(c, sizeof c, s, d - 1 - pick(s, 2));
    static const char *const fmt[] = {"(%s + %s)",        "(%s - %s)",           "(%s * %s)",
                                      "(%s // %s)",       "(%s %% %s)",          "min(%s, %s)",
                                      "max(%s, %s)",      "abs(%s - %s)",        "doc[%s + %s]",
                                      "clamp(%s, 0, %s)", "where(%s < 3, %s, 7)"};
    snprintf(b, n, fmt[k % 11], a, c);
}

/* A random mask_mod (comparisons of random ints joined by and, or, not)
 * or score_mod (score plus or times a small continuous function of a
 * random int: continuous in score, so the kernels' rounding of q.k cannot
 * flip it). */
static void gen_expr(char *b, size_t n, uint64_t *s, bool mask) {
    char x[400], y[400];
    gen_int(x, sizeof x, s, 2);
    gen_int(y, sizeof y, s, 1 + pick(s, 2));
    if (!mask) {
        static const char *const fmt[] = {"score + 0.0625 * %s + 0 * %s",
                                          "score * (1 + 0.01 * min(abs(%s), 9)) + 0 * %s",
                                          "score - tanh(0.1 * %s) * exp(-0.01 * abs(%s))"};
        snprintf(b, n, fmt[pick(s, 3)], x, y);
        return;
    }
    static const char *const cmp[] = {"<", "<=", "==", "!=", ">", ">="};
    static const char *const join[] = {"%s %s %s or kv == q", "not (%s %s %s) or kv < 2",
                                       "(%s %s %s) and kv <= q + 5"};
    snprintf(b, n, join[pick(s, 3)], x, cmp[pick(s, 6)], y);
}

/* JIT == reference for n random expressions reading doc and prefix (and
 * reading doc anywhere: past the positions set, before 0) over the
 * sweep's configs from state s (expressions from state g): prefill, chunks, split decode, 1-3
 * threads; `bf16`: with compute bf16 (against the bf16 reference). */
static void random_expressions(uint64_t s, uint64_t g, int n, bool bf16) {
    char *dir = tmpdir_new();
    n = getenv("ATTNC_SWEEP") ? atoi(getenv("ATTNC_SWEEP")) : n;
    for (int i = 0; i < n; i++) {
        int64_t T, chunk;
        attn_config c = sweep_config(i, &s, &T, &chunk);
        if (c.memory_dim > 0)
            continue;
        if (bf16)
            c.compute = ATTN_DTYPE_BF16;
        gen_expr(c.mask_mod, sizeof c.mask_mod, &g, true);
        if (i % 2)
            gen_expr(c.score_mod, sizeof c.score_mod, &g, false);
        const char *all[2] = {c.mask_mod, c.score_mod};
        bool doc = false, prefix = false;
        for (int k = 0; k < 2; k++)
            doc |= strstr(all[k], "doc[") != NULL, prefix |= strstr(all[k], "prefix") != NULL;
        snprintf(c.inputs, sizeof c.inputs, "%s%s%s", doc ? "doc: token" : "",
                 doc && prefix ? "; " : "", prefix ? "prefix: sequence" : "");
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("generated '%s' / '%s': %s", c.mask_mod, c.score_mod, m.text);
        const char *path = write_spec(dir, &c, "random.yaml");
        int64_t ch = i % 4 == 3 && c.causal ? 1 : c.causal ? chunk : T;
        double e = inputs_jit_vs_ref(path, NULL, T, ch, 1 + i % 3, (uint64_t)i + 300);
        /* compute bf16: the kernels' p rounded against their running max
         * (README: compute) */
        double tol = bf16 ? BF16_TOL : 2 * kv_tolerance(c.kv_dtype);
        if (!(e <= tol))
            fail_msg("config %d (T %lld chunk %lld causal %d kv %s compute %s) mask_mod '%s' "
                     "score_mod '%s': relative error %g",
                     i, (long long)T, (long long)ch, c.causal, attn_dtype_name(c.kv_dtype),
                     attn_dtype_name(c.compute), c.mask_mod, c.score_mod, e);
    }
    tmpdir_remove(dir);
}

/* Masks with a dilation (cg_expr_dilation: the flash kernel takes each
 * residue class of rows with the keys of its class alone): == the
 * reference over configs of the sweep (every cache dtype, blocks that the
 * period divides or not, sinks, ALiBi, a window, softcap), with a
 * distance table or a per-key score_mod beside them, in one call,
 * chunks of 37 (the flash kernel) or a token a call (the split decode,
 * the whole mask), compute f32 and bf16, 1-3 threads. */
static const struct {
    const char *score, *mask;
} dilated[] = {
    {"", "(q - kv) % 2 == 0"},
    {"", "(q - kv) % 3 == 1 and q - kv < 40"},
    {"score - 0.125 * abs(q - kv)", "q - kv < 57 and 2 == (kv - q) % 4"},
    {"", "(kv - q) % 2 == 1 and (kv < 3 or q - kv < 30)"},
    {"score + 0.01 * kv", "(q - kv) % 5 == 0 and kv % 3 != 1"},
    {"", "((q - kv) % 7 == 3 and h % 2 == 0) and kv >= 2"},
    {"", "(q - kv) % 64 == 0 or kv == 0"}, /* not a conjunct: the whole mask per tile */
    {"", "(q - kv) % 64 == 5"},
};
enum { N_DILATED = sizeof dilated / sizeof dilated[0] };

static void dilated_masks_equal_the_reference(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t s = 777;
    int n = getenv("ATTNC_SWEEP") ? atoi(getenv("ATTNC_SWEEP")) : 12;
    for (int i = 0; i < n; i++) {
        int64_t T, chunk;
        attn_config c = sweep_config(i, &s, &T, &chunk);
        if (c.memory_dim > 0)
            continue;
        T = 40 + (int64_t)((rnd_unit(&s) + 1) * 115);
        chunk = !c.causal || i % 3 == 0 ? T : i % 3 == 1 ? 37 : 1;
        if (i % 4 == 3)
            c.compute = ATTN_DTYPE_BF16;
        snprintf(c.score_mod, sizeof c.score_mod, "%s", dilated[i % N_DILATED].score);
        snprintf(c.mask_mod, sizeof c.mask_mod, "%s", dilated[i % N_DILATED].mask);
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("'%s': %s", c.mask_mod, m.text);
        const char *path = write_spec(dir, &c, "dilated.yaml");
        double e = jit_vs_ref(path, NULL, T, chunk, 1 + i % 3, (uint64_t)i + 900);
        double tol = c.compute == ATTN_DTYPE_BF16 ? BF16_TOL : 2 * kv_tolerance(c.kv_dtype);
        if (!(e <= tol))
            fail_msg("config %d (T %lld chunk %lld causal %d window %lld kv %s blocks of %lld "
                     "compute %s) mask_mod '%s' score_mod '%s': relative error %g",
                     i, (long long)T, (long long)chunk, c.causal, (long long)c.sliding_window,
                     attn_dtype_name(c.kv_dtype), (long long)c.kv_block_tokens,
                     attn_dtype_name(c.compute), c.mask_mod, c.score_mod, e);
    }
    /* narrow caches whose blocks the period divides: the keys of a class
     * widened from runs in one block by shuffles (cg_flash.c, k_lanes),
     * one class and period per case, f32 and bf16 compute, this host's
     * vectors and (every other case, on AVX-512) AVX2's; nine cases */
    static const char *const runs[] = {"(q - kv) %% 2 == %d", "(q - kv) %% 3 == %d and kv > 4",
                                       "(kv - q) %% 4 == %d"};
    static const attn_dtype kvs[3] = {ATTN_DTYPE_F16, ATTN_DTYPE_BF16, ATTN_DTYPE_Q8_0};
    bool avx2 = host_avx512_and_v3();
    for (int i = 0; i < 9; i += sanitized_step(4)) { /* sanitized: 2, 3 and 4 */
        attn_config c = load_spec_file(spec_path("seed"));
        int p = 2 + i % 3;
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%s", runs[i % 3]);
        snprintf(c.mask_mod, sizeof c.mask_mod, fmt, i % p);
        c.kv_block_tokens = p == 3 ? 48 : 16 * (1 + i % 2);
        c.kv_dtype = kvs[i % 3 == 2 ? (i / 3) % 2 : (i / 3) % 3];
        c.compute = i % 4 >= 2 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        if (c.compute == ATTN_DTYPE_BF16 && c.kv_dtype == ATTN_DTYPE_Q8_0)
            c.kv_dtype = ATTN_DTYPE_F16;
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("'%s': %s", c.mask_mod, m.text);
        const char *path = write_spec(dir, &c, "runs.yaml");
        attnc_options o = attnc_options_default();
        o.cpu = avx2 && i % 2 ? "x86-64-v3" : NULL;
        int64_t chunk = i % 3 == 1 ? 37 : 150;
        double e = jit_vs_ref(path, &o, 150, chunk, 2, (uint64_t)i + 950);
        double tol = c.compute == ATTN_DTYPE_BF16 ? BF16_TOL : 2 * kv_tolerance(c.kv_dtype);
        if (!(e <= tol))
            fail_msg("'%s' (cpu %s, kv %s blocks of %lld compute %s, chunks of %lld): relative "
                     "error %g",
                     c.mask_mod, o.cpu ? o.cpu : "host", attn_dtype_name(c.kv_dtype),
                     (long long)c.kv_block_tokens, attn_dtype_name(c.compute), (long long)chunk, e);
    }
    tmpdir_remove(dir);
}

/* score + X(q - kv, h) (cg_expr_distance_addend) over rows of many key
 * tiles: for items of one head (no GQA) the flash kernel evaluates X
 * into a table for the 256 keys of several tiles at once, which each
 * tile reads at its offset (cg_flash.c), so 700 tokens (44 tiles of 16
 * keys) cross its tables, from key 0 and, with a window or dilated
 * mask, from other first tiles; one call and calls of 300 (earlier keys
 * in the cache), 1-3 threads; == the reference. */
static void distance_tables_over_many_tiles(void **state) {
    (void)state;
    static const struct {
        const char *score, *mask;
        int64_t window;
    } cases[] = {
        {"score - 0.125 * abs(q - kv)", "", 0},
        {"score + 0.5 * tanh((q - kv) / 100)", "", 333},
        {"score - exp(-0.3 * (h + 1)) * (q - kv) / 64", "(q - kv) % 3 == 1", 0},
        {"score + min(16 + floor(log((q - kv + 1) / 16) * 4), 31) / 8", "q - kv < 500", 0},
    };
    char *dir = tmpdir_new();
    attn_config seed = load_spec_file(spec_path("seed"));
    seed.kv_max_tokens = 1024;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        attn_config c = seed; /* the last with seed's groups: a table a tile */
        if (i < 3)
            c.kv_groups = c.heads;
        snprintf(c.score_mod, sizeof c.score_mod, "%s", cases[i].score);
        snprintf(c.mask_mod, sizeof c.mask_mod, "%s", cases[i].mask);
        c.sliding_window = cases[i].window;
        const char *path = write_spec(dir, &c, "distance.yaml");
        for (int64_t chunk = 300; chunk <= 700; chunk += 400) {
            double e = jit_vs_ref(path, NULL, 700, chunk, 1 + i % 3, (uint64_t)i + 40);
            if (!(e <= 2 * kv_tolerance(c.kv_dtype)))
                fail_msg("score_mod '%s' mask_mod '%s' window %lld, chunks of %lld: relative "
                         "error %g",
                         cases[i].score, cases[i].mask, (long long)cases[i].window,
                         (long long)chunk, e);
        }
    }
    tmpdir_remove(dir);
}

static void random_expressions_equal_the_reference(void **state) {
    (void)state;
    random_expressions(9001, 31, 24, false);
}

/* The same with compute bf16 on AMX tiles (cg_flash.c's amx_key_tile):
 * the host's own where it has AMX, else the tile instructions emulated
 * ($ATTNC_AMX_EMULATE) where it has AVX512-BF16. */
static void amx_expressions_equal_the_reference(void **state) {
    (void)state;
    uint32_t f = attn_cpu_features(), amx = ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16;
    bool emulate = (f & amx) != amx;
    if (emulate && !(f & ATTN_CPU_AVX512BF16)) {
        print_message("skipped: this host has neither AMX nor AVX512-BF16 to emulate it with\n");
        skip();
    }
    if (emulate)
        setenv("ATTNC_AMX_EMULATE", "1", 1);
    random_expressions(4711, 57, 16, true);
    unsetenv("ATTNC_AMX_EMULATE");
}

/* Scores that grow along the keys (score_mod "score + kv / 2": 8 more
 * every 16 keys) pass the running max in every tile, so that each one
 * rescales the sum and the output kept so far: random weights alone keep
 * the scores within the max's slack after the first tile, where a
 * missing rescale would go unseen. f32 and bf16 compute on this host's
 * code, its AVX2 code, and the AMX code (the host's tiles, or emulated);
 * one call (the flash prefill) and a token a call (the split decode). */
static void growing_scores_rescale_the_output(void **state) {
    (void)state;
    uint32_t f = attn_cpu_features(), amx = ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16;
    bool amx_here = (f & amx) == amx, emulate = !amx_here && (f & ATTN_CPU_AVX512BF16);
    char *dir = tmpdir_new();
    for (int k = 0; k < 5; k++) {
        bool bf16 = k % 2 == 1, tiles = k == 4;
        if (k == 2 && !host_avx512_and_v3()) {
            print_message("AVX2 code: not run (this host does not run it beside AVX-512)\n");
            continue;
        }
        if (tiles && !amx_here && !emulate) {
            print_message("AMX code: not run (this host has neither AMX nor AVX512-BF16)\n");
            continue;
        }
        attn_config c = config_small(4, 2, 64, 96);
        c.kv_dtype = k == 0 ? ATTN_DTYPE_F32 : ATTN_DTYPE_F16;
        c.compute = bf16 || tiles ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        c.causal = k != 3;
        snprintf(c.score_mod, sizeof c.score_mod, "score + kv / 2");
        const char *path = write_spec(dir, &c, "grow.yaml");
        attnc_options o = attnc_options_default();
        o.cpu = k == 2 ? "x86-64-v3" : NULL;
        if (tiles && emulate)
            setenv("ATTNC_AMX_EMULATE", "1", 1);
        for (int one = 0; one < 2; one++) {
            int64_t T = 150, chunk = one && c.causal ? 1 : T;
            double e = jit_vs_ref(path, &o, T, chunk, 2, (uint64_t)(90 + k));
            double tol = c.compute == ATTN_DTYPE_BF16 ? BF16_TOL : 2 * kv_tolerance(c.kv_dtype);
            if (!(e <= tol))
                fail_msg("case %d (compute %s, cpu %s%s, chunk %lld): relative error %g", k,
                         attn_dtype_name(c.compute), o.cpu ? o.cpu : "host", tiles ? ", AMX" : "",
                         (long long)chunk, e);
        }
        unsetenv("ATTNC_AMX_EMULATE");
    }
    tmpdir_remove(dir);
}

/* causal: false with a mask_mod that hides every key after its query:
 * the causal_mask pass adds the causal mask (the flash node's flag)
 * exactly where the mask implies kv <= q, and the results are the
 * reference's, in one call and in chunks (the mask hides later keys, so
 * chunks change nothing). */
static void masks_implying_causal(void **state) {
    (void)state;
    static const struct {
        const char *mask;
        bool causal;
    } cases[] = {
        {"q - kv >= 0", true},
        {"kv <= q and kv % 3 != 1", true},
        {"q >= kv", true},
        {"kv < q + 1", true},
        {"q - kv > -1", true},
        {"kv - q <= 0", true},
        {"kv == q or q < 0 and kv == 0", false},
        {"kv % 2 == 0 and q + 1 - kv >= 1", true},
        {"kv < q", true},
        {"q - kv >= -1", false},
        {"kv <= q or kv < 4", false},
        {"kv <= q + 1", false},
        {"not (kv > q)", false},
        {"-(kv - q) >= 0", true},
    };
    char *dir = tmpdir_new();
    attn_config base = load_spec_file(spec_path("seed"));
    base.causal = false;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_config c = base;
        snprintf(c.mask_mod, sizeof c.mask_mod, "%s", cases[i].mask);
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("'%s': %s", cases[i].mask, m.text);
        const char *path = write_spec(dir, &c, "cm.yaml");
        attnc_ctx *cx = attnc_ctx_new();
        const char *text;
        assert_int_equal(attnc_ir_text(cx, path, NULL, NULL, &text), ATTNC_OK);
        const char *flash = strstr(text, "= flash ");
        assert_non_null(flash);
        const char *eol = strchr(flash, '\n'), *flag = strstr(flash, " causal ");
        bool causal = flag && flag < eol;
        if (causal != cases[i].causal)
            fail_msg("'%s': causal flag %d, expected %d", cases[i].mask, causal, cases[i].causal);
        attnc_ctx_free(cx);
        if (i % 3)
            continue;
        for (int64_t chunk = 7; chunk <= 40; chunk += 33) {
            double e = jit_vs_ref(path, NULL, 40, cases[i].causal ? chunk : 40, 2, i);
            if (!(e <= 1e-4))
                fail_msg("'%s', chunks of %lld: relative error %g", cases[i].mask, (long long)chunk,
                         e);
        }
    }
    tmpdir_remove(dir);
}

/* attn_seq_set_input's rules: a forward lacking a value fails naming
 * the sequence, input and positions and changes nothing; fork copies the
 * values, truncate drops those past the new length, free releases them;
 * unknown inputs, weight inputs, bad positions and a sequence input's
 * shape are refused. */
static void inputs_follow_their_sequences(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = load_spec_file(spec_path("seed"));
    snprintf(c.inputs, sizeof c.inputs, "doc: token; prefix: sequence; w: weight [3]");
    snprintf(c.mask_mod, sizeof c.mask_mod, "doc[q] == doc[kv] or kv < prefix");
    snprintf(c.score_mod, sizeof c.score_mod, "score + w[h]");
    c.kv_max_tokens = 64;
    const char *path = write_spec(dir, &c, "follow.yaml");
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 3, &w, NULL), ATTN_OK);
    attnc_jit *jit = jit_or_fail(path, NULL);
    attn_block *b;
    attn_cache *cache;
    int32_t s, f, doc[40], pre = 2;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), NULL, &b), ATTN_OK);
    assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
    assert_int_equal(attn_cache_new(b, 64, &cache), ATTN_OK);
    assert_int_equal(attn_seq_new(cache, &s), ATTN_OK);
    for (int i = 0; i < 40; i++)
        doc[i] = i / 7;
    float *x = random_floats(40 * (size_t)c.d_model, 4), *y = malloc(40 * (size_t)c.d_model * 4),
          *y2 = malloc(40 * (size_t)c.d_model * 4);
    int32_t n10 = 10, n5 = 5;
    /* what is missing is named, in order; nothing changes */
    assert_int_equal(attn_forward(b, cache, 1, &s, &n10, x, y), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(cache), "'doc' at positions 0..9"));
    assert_int_equal(attn_seq_set_input(cache, s, "doc", 0, 7, doc), ATTN_OK);
    assert_int_equal(attn_forward(b, cache, 1, &s, &n10, x, y), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(cache), "'doc' at positions 7..9"));
    assert_int_equal(attn_seq_set_input(cache, s, "doc", 7, 33, doc + 7), ATTN_OK);
    assert_int_equal(attn_forward(b, cache, 1, &s, &n10, x, y), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(cache), "no value of input 'prefix'"));
    assert_int_equal(attn_seq_len(cache, s), 0);
    assert_int_equal(attn_seq_set_input(cache, s, "prefix", 0, 1, &pre), ATTN_OK);
    assert_int_equal(attn_forward(b, cache, 1, &s, &n10, x, y), ATTN_OK);
    /* a fork holds the values: its next tokens run, as the original's do */
    assert_int_equal(attn_seq_fork(cache, s, &f), ATTN_OK);
    assert_int_equal(attn_forward(b, cache, 1, &f, &n5, x + 10 * c.d_model, y2), ATTN_OK);
    assert_int_equal(attn_forward(b, cache, 1, &s, &n5, x + 10 * c.d_model, y), ATTN_OK);
    assert_memory_equal(y, y2, 5 * (size_t)c.d_model * 4);
    /* truncate drops positions past the new length; free releases them */
    assert_int_equal(attn_seq_truncate(cache, s, 12), ATTN_OK);
    assert_int_equal(attn_forward(b, cache, 1, &s, &n5, x, y), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(cache), "positions 12..16"));
    assert_int_equal(attn_seq_free(cache, f), ATTN_OK);
    assert_int_equal(attn_seq_set_input(cache, f, "doc", 0, 1, doc), ATTN_E_INVALID);
    /* refused, nothing changed */
    assert_int_equal(attn_seq_set_input(cache, s, "dco", 0, 1, doc), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(cache), "its inputs: doc, prefix"));
    assert_int_equal(attn_seq_set_input(cache, s, "w", 0, 1, doc), ATTN_E_INVALID);
    assert_int_equal(attn_seq_set_input(cache, s, "doc", 60, 5, doc), ATTN_E_INVALID);
    assert_int_equal(attn_seq_set_input(cache, s, "doc", -1, 1, doc), ATTN_E_INVALID);
    assert_int_equal(attn_seq_set_input(cache, s, "prefix", 0, 2, doc), ATTN_E_INVALID);
    assert_int_equal(attn_seq_set_input(cache, s, "doc", 0, 1, NULL), ATTN_E_INVALID);
    assert_int_equal(attn_seq_set_input(cache, s, "doc", 12, 5, doc + 12), ATTN_OK);
    assert_int_equal(attn_forward(b, cache, 1, &s, &n5, x, y), ATTN_OK);
    attn_cache_free(cache);
    attn_block_free(b);
    attnc_jit_free(jit);
    attn_weights_free(w);
    free(x), free(y), free(y2);
    tmpdir_remove(dir);
}

/* test_mods [PATTERN]: the tests whose names match PATTERN (cmocka's
 * wildcards * and ?), all without it. */
int main(int argc, char **argv) {
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(jit_equals_reference_over_expressions_and_sweep),
        cmocka_unit_test(threads_give_the_same_bits),
        cmocka_unit_test(expression_forms_of_built_ins),
        cmocka_unit_test(rows_that_see_no_key_are_zero),
        cmocka_unit_test(rows_the_window_and_mask_hide_read_nothing),
        cmocka_unit_test(every_pass_disabled),
        cmocka_unit_test(mla_blocks),
        cmocka_unit_test(inputs_jit_equals_reference),
        cmocka_unit_test(masks_implying_causal),
        cmocka_unit_test(inputs_follow_their_sequences),
        cmocka_unit_test(random_expressions_equal_the_reference),
        cmocka_unit_test(dilated_masks_equal_the_reference),
        cmocka_unit_test(distance_tables_over_many_tiles),
        cmocka_unit_test(amx_expressions_equal_the_reference),
        cmocka_unit_test(growing_scores_rescale_the_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
