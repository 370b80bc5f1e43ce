/* test_jit.c: JIT-compiled kernels against the reference engine: every
 * shipped spec, a randomized sweep of configurations and chunkings, each
 * pass disabled in turn, other CPUs, thread counts, and compiles from two
 * threads at once. Tolerance 1e-4 relative with an f32 cache; an f16 or
 * bf16 cache may round a K/V element one unit apart from the reference
 * (f32 vs double on a rounding boundary), so those get 2e-3 and 1.6e-2. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_kernels.h"
#include "attnc.h"
#include "support.h"

static attnc_jit *compile(const char *path, const attnc_options *o) {
    return jit_or_fail(path, o);
}

/* Small configs that combine the features of current models: which 0:
 * YaRN (truncate false), per-head QK-norm times 1 + weight, sinks,
 * chunks of 24, biases; 1: ALiBi, QK-norm over the whole row, sinks,
 * query temperature, a window of 40, an f16 cache; 2: interleaved llama3
 * RoPE, weightless per-head QK-norm, chunks of 20, a bf16 cache and bf16
 * weights. */
static attn_config feature_config(int which) {
    attn_config c;
    if (which == 0) {
        c = config_small(8, 2, 64, 96);
        c.rope_style = ATTN_ROPE_HALF, c.rope_base = 10000, c.rotary_dim = 64;
        c.rope_scaling = ATTN_SCALING_YARN, c.rope_factor = 8, c.rope_original_max_position = 64;
        c.rope_beta_fast = 32, c.rope_beta_slow = 1, c.rope_mscale = 1, c.rope_truncate = false;
        c.rope_attention_factor = attn_yarn_default_attention_factor(&c);
        c.qk_norm = ATTN_QK_NORM_HEAD, c.qk_norm_weight = true, c.qk_norm_offset = 1;
        c.sinks = true, c.chunk = 24, c.qkv_bias = true, c.o_bias = true;
    } else if (which == 1) {
        c = config_small(12, 12, 32, 64);
        c.alibi = true, c.qk_norm = ATTN_QK_NORM_ALL, c.qk_norm_weight = true;
        c.sinks = true, c.temp_floor_scale = 16, c.temp_attn_scale = 0.1, c.sliding_window = 40;
        c.kv_dtype = ATTN_DTYPE_F16;
    } else {
        c = config_small(6, 3, 128, 64);
        c.rope_style = ATTN_ROPE_INTERLEAVED, c.rope_base = 500000, c.rotary_dim = 128;
        c.rope_scaling = ATTN_SCALING_LLAMA3, c.rope_factor = 16, c.rope_low_freq_factor = 1;
        c.rope_high_freq_factor = 1, c.rope_original_max_position = 64;
        c.qk_norm = ATTN_QK_NORM_HEAD, c.qk_norm_weight = false;
        c.chunk = 20, c.kv_dtype = ATTN_DTYPE_BF16, c.dtype = ATTN_DTYPE_BF16;
    }
    c.qk_norm_eps = 1e-6;
    c.kv_max_tokens = 512;
    snprintf(c.name, sizeof c.name, "features_%d", which);
    return c;
}

static void jit_equals_reference_for_every_shipped_spec(void **state) {
    (void)state;
    /* under the sanitizers, where the other tests reuse the kernels the
     * plain build compiled (tests/CMakeLists.txt), these are compiled
     * afresh: the code generator runs under the sanitizers */
    attnc_options o = attnc_options_default();
    o.no_cache = sanitized_step(2) > 1;
    for (size_t i = 0; i < n_shipped_specs; i += (size_t)sanitized_step(4)) {
        attn_config c = load_spec_file(spec_path(shipped_specs[i]));
        if (c.memory_dim > 0)
            continue; /* cross-attention needs a memory: test_cross, test_aot */
        /* not causal (prefix_lm): a query sees its own call's keys, and the
         * reference takes the 13 tokens in one */
        double e = jit_vs_ref(spec_path(shipped_specs[i]), &o, 13, c.causal ? 5 : 13, 0, i);
        if (!(e <= 1e-4))
            fail_msg("%s: relative error %g", shipped_specs[i], e);
    }
}

static void jit_equals_reference_with_each_pass_disabled(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    const char *specs[7] = {"seed", "qwen2_7b", "gemma2_9b", "falcon_7b"};
    char paths[3][512];
    for (int f = 0; f < 3; f++) {
        attn_config c = feature_config(f);
        snprintf(paths[f], sizeof paths[f], "%s",
                 write_spec(dir, &c,
                            f == 0   ? "f0.yaml"
                            : f == 1 ? "f1.yaml"
                                     : "f2.yaml"));
        specs[4 + f] = paths[f];
    }
    for (int s = 0; s < 7; s++) {
        if (s > 0 && s < 4 && sanitized_step(4) > 1)
            continue; /* sanitizers: seed and the feature configs (99 s of 330) */
        const char *path = s < 4 ? spec_path(specs[s]) : specs[s];
        double tol = s < 4 ? 1e-4 : kv_tolerance(feature_config(s - 4).kv_dtype);
        /* a pass that leaves this spec's graph as it was (its printed IR,
         * config included, is what the kernels are generated from) gives
         * the kernels of the whole pipeline, which the other tests run
         * (every shipped spec; the feature configs in the thread and decode
         * tests): 25 of the 70 compiles (54 -> 28 s on a 2-core Zen 5) */
        attnc_ctx *ctx = attnc_ctx_new();
        const char *whole = NULL;
        attnc_options base = attnc_options_default();
        assert_int_equal(attnc_ir_text(ctx, path, &base, NULL, &whole), ATTNC_OK);
        int ran = 0;
        for (int p = 0; attnc_pass_name(p); p++) {
            const char *off[] = {attnc_pass_name(p)}, *text = NULL;
            attnc_options o = attnc_options_default();
            o.disabled_passes = off;
            o.n_disabled_passes = 1;
            assert_int_equal(attnc_ir_text(ctx, path, &o, NULL, &text), ATTNC_OK);
            if (strcmp(text, whole) == 0)
                continue;
            ran++;
            double e = jit_vs_ref(path, &o, s < 4 ? 9 : 60, s < 4 ? 4 : 7, 0, 3);
            if (!(e <= tol))
                fail_msg("%s without %s: relative error %g", specs[s], off[0], e);
        }
        print_message("%s: %d passes change its graph; the graph without each ran\n", specs[s],
                      ran);
        assert_true(ran > 0);
        attnc_ctx_free(ctx);
        const char *all[16];
        attnc_options o = options_without_passes(all);
        assert_true(jit_vs_ref(path, &o, s < 4 ? 9 : 60, s < 4 ? 4 : 7, 0, 3) <= tol);
    }
    tmpdir_remove(dir);
}

/* This host runs x86-64-v3 (AVX2) code. */
static bool host_runs_v3(void) {
    uint32_t v3 = ATTN_CPU_AVX | ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_F16C | ATTN_CPU_BMI2;
    return (attn_cpu_features() & v3) == v3;
}

/* On an AVX-512 host, half the configs (long runs among them) run as
 * AVX2 code instead, whose own shapes (the split decode's tiles of two
 * vectors, 16 registers) see the same dtypes, cache blocks and features. */
static void jit_equals_reference_over_random_sweep(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t s = 99;
    int n_configs = getenv("ATTNC_SWEEP") ? atoi(getenv("ATTNC_SWEEP")) : 60;
    bool avx2 = host_runs_v3() && (attn_cpu_features() & ATTN_CPU_AVX512F);
    for (int i = 0; i < n_configs; i++) {
        int64_t T, chunk;
        attn_config c = sweep_config(i, &s, &T, &chunk);
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("sweep %d: %s", i, m.text);
        const char *path = write_spec(dir, &c, "sweep.yaml");
        attnc_options o = attnc_options_default();
        o.cpu = avx2 && (i + i / 8) % 2 ? "x86-64-v3" : NULL; /* and long runs: 8, 24.. */
        double e = jit_vs_ref(path, &o, T, chunk, 1 + i % 3, (uint64_t)i);
        if (!(e <= kv_tolerance(c.kv_dtype)))
            fail_msg("sweep %d (cpu %s, heads %lld/%lld hd %lld T %lld chunk %lld rope %d/%d "
                     "window %lld attention chunk %lld qk_norm %d sinks %d alibi %d "
                     "temperature %lld "
                     "softcap %g causal %d kv %s blocks of %lld weights %s): relative error %g",
                     i, o.cpu ? o.cpu : "host", (long long)c.heads, (long long)c.kv_groups,
                     (long long)c.head_dim, (long long)T, (long long)chunk, c.rope_style,
                     c.rope_scaling, (long long)c.sliding_window, (long long)c.chunk, c.qk_norm,
                     c.sinks, c.alibi, (long long)c.temp_floor_scale, c.softcap, c.causal,
                     attn_dtype_name(c.kv_dtype), (long long)c.kv_block_tokens,
                     attn_dtype_name(c.dtype), e);
    }
    tmpdir_remove(dir);
}

/* Bitwise equal for 1, 2 and 3 threads: over chunks (gemma2_9b), over
 * several GEMM row blocks and flash items in one call (seed, 300 tokens),
 * with query-head groups wider than a flash item (falcon_7b), and calls of
 * 7 tokens (the GEMV and split-KV paths) against up to 230 keys (several
 * key chunks, dealt to threads differently for each count). */
static void jit_results_do_not_depend_on_thread_count(void **state) {
    (void)state;
    const struct {
        const char *spec;
        int64_t T, chunk;
    } cases[] = {{"gemma2_9b", 11, 4},       {"seed", 300, 300},          {"falcon_7b", 40, 40},
                 {"seed", 230, 7},           {"features_0", 230, 7},      {"features_1", 100, 100},
                 {"seed q4_0/q8_0", 230, 7}, {"seed q8_0/q8_0", 100, 100}};
    char *dir = tmpdir_new();
    for (int i = 0; i < 8; i++) {
        char spec[512];
        if (i >= 6) { /* quantized weights and cache: GEMV, GEMM, split, flash */
            attn_config qc = load_spec_file(spec_path("seed"));
            qc.dtype = i == 6 ? ATTN_DTYPE_Q4_0 : ATTN_DTYPE_Q8_0;
            qc.kv_dtype = ATTN_DTYPE_Q8_0;
            snprintf(spec, sizeof spec, "%s", write_spec(dir, &qc, "threads.yaml"));
        } else if (i >= 4) {
            attn_config fc = feature_config(i - 4);
            snprintf(spec, sizeof spec, "%s", write_spec(dir, &fc, "threads.yaml"));
        } else {
            snprintf(spec, sizeof spec, "%s", spec_path(cases[i].spec));
        }
        attn_config c = load_spec_file(spec);
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 5, &w, NULL), ATTN_OK);
        int64_t T = cases[i].T;
        size_t n = (size_t)(T * c.d_model);
        float *x = random_floats(n, 6), *y[3];
        attnc_jit *jit = compile(spec, NULL);
        for (int t = 0; t < 3; t++) {
            y[t] = malloc(n * sizeof(float));
            run_jit(jit, w, T, x, y[t], cases[i].chunk, t + 1);
        }
        if (memcmp(y[0], y[1], n * sizeof(float)) || memcmp(y[0], y[2], n * sizeof(float)))
            fail_msg("%s: results differ between 1, 2 and 3 threads", cases[i].spec);
        for (int t = 0; t < 3; t++)
            free(y[t]);
        free(x);
        attnc_jit_free(jit);
        attn_weights_free(w);
    }
    tmpdir_remove(dir);
    /* and the long one-shot prefill agrees with the reference */
    double e = jit_vs_ref(spec_path("seed"), NULL, 300, 300, 2, 9);
    if (!(e <= 1e-4))
        fail_msg("seed, 300 tokens: relative error %g", e);
}

/* Prefill then one-token decode steps (GEMV, split-KV attention) give the
 * one-shot prefill's result (GEMM, flash attention): the projections are
 * the same FMA chains bit for bit, attention differs only in summation
 * order. Over specs, cache and weight dtypes, thread counts and decode
 * lengths; and decode with decode_split off equals it as well. */
static void decode_steps_equal_one_shot_prefill(void **state) {
    (void)state;
    const struct {
        const char *spec;
        attn_dtype dt, kv;
        int64_t pre, steps;
    } cases[] = {
        {"seed", ATTN_DTYPE_F32, ATTN_DTYPE_F32, 150, 6},
        {"seed", ATTN_DTYPE_BF16, ATTN_DTYPE_F16, 70, 5},
        {"mistral_7b", ATTN_DTYPE_F16, ATTN_DTYPE_BF16, 20, 4},
        {"gemma2_9b", ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 9, 3},
        {"qwen2_7b", ATTN_DTYPE_F32, ATTN_DTYPE_F16, 33, 3},
        {"falcon_7b", ATTN_DTYPE_F32, ATTN_DTYPE_F32, 17, 3},
        {"qwen3_8b", ATTN_DTYPE_BF16, ATTN_DTYPE_F16, 20, 3},
        {"gpt_oss_20b_sliding", ATTN_DTYPE_F32, ATTN_DTYPE_F32, 126, 4}, /* past the window */
        {"bloom_7b1", ATTN_DTYPE_F32, ATTN_DTYPE_F16, 12, 3},
        {"llama4_scout_global", ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 9, 3},
        {"gemma3_12b_local", ATTN_DTYPE_F32, ATTN_DTYPE_F32, 10, 2},
        {"gemma3_12b_global", ATTN_DTYPE_BF16, ATTN_DTYPE_F16, 10, 2},
        {"gpt_oss_20b_full", ATTN_DTYPE_F32, ATTN_DTYPE_F16, 20, 3},
        {"olmo2_7b", ATTN_DTYPE_F32, ATTN_DTYPE_F32, 10, 2},
        {"llama4_scout_local", ATTN_DTYPE_F16, ATTN_DTYPE_F32, 10, 2},
        {"seed", ATTN_DTYPE_Q8_0, ATTN_DTYPE_F16, 40, 5},
        {"llama3_8b", ATTN_DTYPE_Q4_0, ATTN_DTYPE_BF16, 12, 3},
        {"qwen2_7b", ATTN_DTYPE_Q8_0, ATTN_DTYPE_F32, 10, 3}, /* with q/k/v biases */
        {"seed", ATTN_DTYPE_F32, ATTN_DTYPE_Q8_0, 150, 6},
        {"gemma2_9b", ATTN_DTYPE_Q4_0, ATTN_DTYPE_Q8_0, 9, 3},
        {"gpt_oss_20b_sliding", ATTN_DTYPE_BF16, ATTN_DTYPE_Q8_0, 126, 4},
        /* across chunk boundaries (24, 20) and the window (40) */
        {"features_0", ATTN_DTYPE_F32, ATTN_DTYPE_F32, 30, 40},
        {"features_0", ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q8_0, 30, 40},
        {"features_1", ATTN_DTYPE_F16, ATTN_DTYPE_F16, 35, 20},
        {"features_2", ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 15, 30},
    };
    char *dir = tmpdir_new();
    /* under sanitizers every fourth case (q4_0 weights, q8_0, f16 and bf16
     * caches, a window, features_2 still): the instrumented reference took
     * 138 s of this test */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += (size_t)sanitized_step(4)) {
        bool feat = strncmp(cases[i].spec, "features_", 9) == 0;
        attn_config c = feat ? feature_config(cases[i].spec[9] - '0')
                             : load_spec_file(spec_path(cases[i].spec));
        c.dtype = cases[i].dt;
        c.kv_dtype = cases[i].kv;
        const char *path = write_spec(dir, &c, "decode.yaml");
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 40 + i, &w, NULL), ATTN_OK);
        int64_t T = cases[i].pre + cases[i].steps, D = c.d_model;
        size_t n = (size_t)(T * D);
        float *x = random_floats(n, 50 + i), *one = malloc(n * sizeof(float));
        float *dec = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
        attnc_jit *jit = compile(path, NULL);
        run_jit(jit, w, T, x, one, T, 2);
        run_ref(w, T, x, want);
        for (int variant = 0; variant < 2; variant++) {
            attnc_options o = attnc_options_default();
            const char *off[] = {"decode_split"};
            o.disabled_passes = off;
            o.n_disabled_passes = variant;
            attnc_jit *dj = variant ? compile(path, &o) : jit;
            attn_block *b;
            attn_cache *ca;
            int32_t sq, np = (int32_t)cases[i].pre, one_tok = 1;
            attn_block_options bo = attn_block_options_default();
            bo.n_threads = 1 + (int)(i % 3);
            assert_int_equal(attn_block_new(attnc_jit_kernels(dj), &bo, &b), ATTN_OK);
            assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
            assert_int_equal(attn_cache_new(b, T, &ca), ATTN_OK);
            assert_int_equal(attn_seq_new(ca, &sq), ATTN_OK);
            assert_int_equal(attn_forward(b, ca, 1, &sq, &np, x, dec), ATTN_OK);
            for (int64_t t = cases[i].pre; t < T; t++)
                assert_int_equal(attn_forward(b, ca, 1, &sq, &one_tok, x + t * D, dec + t * D),
                                 ATTN_OK);
            double e = rel_err(dec, one, n), r = rel_err(dec, want, n);
            if (!(e <= 1e-5) || !(r <= kv_tolerance(c.kv_dtype)))
                fail_msg("%s (weights %s, cache %s, decode_split %s): decode vs one-shot %g, vs "
                         "reference %g",
                         cases[i].spec, attn_dtype_name(c.dtype), attn_dtype_name(c.kv_dtype),
                         variant ? "off" : "on", e, r);
            attn_cache_free(ca);
            attn_block_free(b);
            if (variant)
                attnc_jit_free(dj);
        }
        attnc_jit_free(jit);
        attn_weights_free(w);
        free(x);
        free(one);
        free(dec);
        free(want);
    }
    tmpdir_remove(dir);
}

/* The split kernel's softmax reference moves only when a score passes it
 * (then the row's sum and output are rescaled). Inputs that grow along the
 * sequence (x_t times 1 + t/8) give keys whose scores keep passing it, so
 * calls of 7 tokens against up to 230 keys rescale again and again; the
 * results still match the reference, with f32 and f16 caches. */
static void split_decode_follows_growing_scores(void **state) {
    (void)state;
    const attn_dtype kvs[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16};
    char *dir = tmpdir_new();
    for (int i = 0; i < 2; i++) {
        attn_config c = load_spec_file(spec_path("seed"));
        c.kv_dtype = kvs[i];
        const char *path = write_spec(dir, &c, "grow.yaml");
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 70 + (uint64_t)i, &w, NULL), ATTN_OK);
        int64_t T = 230, D = c.d_model;
        size_t n = (size_t)(T * D);
        float *x = random_floats(n, 80 + (uint64_t)i), *y = malloc(n * sizeof(float)),
              *want = malloc(n * sizeof(float));
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < D; d++)
                x[t * D + d] *= 1.0f + (float)t / 8;
        attnc_jit *jit = compile(path, NULL);
        run_jit(jit, w, T, x, y, 7, 2);
        run_ref(w, T, x, want);
        double e = rel_err(y, want, n);
        if (!(e <= kv_tolerance(c.kv_dtype)))
            fail_msg("cache %s: relative error %g", attn_dtype_name(c.kv_dtype), e);
        attnc_jit_free(jit);
        attn_weights_free(w);
        free(x);
        free(y);
        free(want);
    }
    tmpdir_remove(dir);
}

/* bf16 weights are widened to f32 exactly in registers, in the GEMV
 * (calls of at most 8 tokens) as in the GEMM: a block with bf16 weights
 * gives the same bits as one with f32 weights of the same values (biases
 * too), for the host's CPU and an AVX2 one. */
/* bf16, q8_0 and q4_0 weights give what f32 weights of the same values
 * give, bit for bit: they are widened exactly (d * q is exact in f32) and
 * summed in the same order. The wide config has K = 1088 > the GEMM's k
 * block of 1024 (partial sums between k blocks) and a panel past N. */
static void narrow_weights_are_exact(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config wide = config_small(12, 4, 96, 1088);
    snprintf(wide.name, sizeof wide.name, "wide");
    const attn_config bases[2] = {load_spec_file(spec_path("seed")), wide};
    const attn_dtype dts[] = {ATTN_DTYPE_BF16, ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q4_0};
    for (int bi = 0; bi < 2; bi++)
        for (int di = 0; di < 3; di++) {
            attn_config cb = bases[bi];
            cb.dtype = dts[di];
            cb.qkv_bias = cb.o_bias = true;
            attn_config cf = cb;
            cf.dtype = ATTN_DTYPE_F32;
            attn_weights *wb, *wf;
            assert_int_equal(attn_weights_random(&cb, 21 + (uint64_t)di, &wb, NULL), ATTN_OK);
            assert_int_equal(attn_weights_new(&cf, &wf, NULL), ATTN_OK);
            size_t D = (size_t)cb.d_model, q = (size_t)(cb.heads * cb.head_dim),
                   kv = (size_t)(cb.kv_groups * cb.head_dim);
            float *from[8] = {wb->wq, wb->wk, wb->wv, wb->wo, wb->bq, wb->bk, wb->bv, wb->bo};
            float *to[8] = {wf->wq, wf->wk, wf->wv, wf->wo, wf->bq, wf->bk, wf->bv, wf->bo};
            size_t len[8] = {q * D, kv * D, kv * D, D * q, q, kv, kv, D};
            for (int i = 0; i < 8; i++)
                memcpy(to[i], from[i], len[i] * sizeof(float));
            int64_t T = 40;
            size_t n = (size_t)T * D;
            float *x = random_floats(n, 22), *yb = malloc(n * sizeof(float)),
                  *yf = malloc(n * sizeof(float));
            const char *cpus[] = {NULL, "x86-64-v3"};
            const int64_t chunks[] = {3, 8, 40}; /* the GEMV, its largest call, the GEMM */
            for (int i = 0; i < 2; i++) {
                attnc_options o = attnc_options_default();
                o.cpu = cpus[i];
                attnc_jit *jb = compile(write_spec(dir, &cb, "narrow.yaml"), &o);
                attnc_jit *jf = compile(write_spec(dir, &cf, "f32.yaml"), &o);
                for (int k = 0; k < 3; k++) {
                    run_jit(jb, wb, T, x, yb, chunks[k], 2);
                    run_jit(jf, wf, T, x, yf, chunks[k], 2);
                    if (memcmp(yb, yf, n * sizeof(float)) != 0)
                        fail_msg("%s, --cpu %s, calls of %lld tokens: %s weights differ from f32 "
                                 "ones of the same values (relative %g)",
                                 cb.name, cpus[i] ? cpus[i] : "host", (long long)chunks[k],
                                 attn_dtype_name(cb.dtype), rel_err(yb, yf, n));
                }
                attnc_jit_free(jb);
                attnc_jit_free(jf);
            }
            attn_weights_free(wb);
            attn_weights_free(wf);
            free(x);
            free(yb);
            free(yf);
        }
    tmpdir_remove(dir);
}

/* The GEMM's row blocks: mc rows each, the last taking up to the
 * target's gemm_rest_tiles tiles more (cg_gemm.c cg_emit_linear). Every
 * call size from 40 to 75 tokens spans both sides of the host's and
 * AVX2's bounds (AVX-512 f32: blocks of 56 rows + up to 14; AVX2: 48 +
 * 18; q8_0 activations: 54 + 6, 48 + 6), in
 * f32, compute bf16 and q8_0 weights with q8_0 activations, against the
 * reference. */
static void gemm_takes_every_row_count(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    const char *cpus[2] = {NULL, host_runs_v3() ? "x86-64-v3" : NULL};
    for (int mode = 0; mode < 3; mode++)
        for (int ci = 0; ci < 2; ci++) {
            if (ci && !cpus[ci])
                continue;
            attn_config c = config_small(4, 2, 32, 64);
            c.kv_max_tokens = 128;
            if (mode == 1)
                c.compute = ATTN_DTYPE_BF16;
            if (mode == 2)
                c.dtype = ATTN_DTYPE_Q8_0, c.activations = ATTN_DTYPE_Q8_0;
            double tol = mode == 0 ? 1e-4 : mode == 1 ? BF16_TOL : 2e-3;
            attnc_options o = attnc_options_default();
            o.cpu = cpus[ci];
            attnc_jit *jit = compile(write_spec(dir, &c, "rows.yaml"), &o);
            attn_weights *w;
            assert_int_equal(attn_weights_random(&c, 11, &w, NULL), ATTN_OK);
            size_t n = (size_t)(75 * c.d_model);
            float *x = random_floats(n, 12), *y = malloc(n * sizeof *y),
                  *want = malloc(n * sizeof *y);
            for (int64_t T = 40; T <= 75; T += sanitized_step(5)) {
                run_jit(jit, w, T, x, y, T, 2);
                run_ref(w, T, x, want);
                double e = rel_err(y, want, (size_t)(T * c.d_model));
                if (!(e <= tol))
                    fail_msg("cpu %s, %s weights, compute %s, activations %s, %lld rows: "
                             "relative error %g",
                             cpus[ci] ? cpus[ci] : "host", attn_dtype_name(c.dtype),
                             attn_dtype_name(c.compute), attn_dtype_name(c.activations),
                             (long long)T, e);
            }
            free(x);
            free(y);
            free(want);
            attn_weights_free(w);
            attnc_jit_free(jit);
        }
    tmpdir_remove(dir);
}

static void q8_0_fork_on(const char *cpu);

/* A q8_0 cache forks as the others do: a sequence of 21 tokens (a
 * partial block of 16) forked, then each side decodes tokens of its own;
 * copy on write must carry the block's scales with its values, so each
 * side still matches the reference of its own whole sequence. */
static void q8_0_cache_forks_copy_scales(void **state) {
    (void)state;
    for (int cpu = 0; cpu < 2; cpu++) /* this host's ISA, and AVX2 */
        q8_0_fork_on(cpu ? "x86-64-v3" : NULL);
}

static void q8_0_fork_on(const char *cpu) {
    char *dir = tmpdir_new();
    attn_config c = load_spec_file(spec_path("seed"));
    c.kv_dtype = ATTN_DTYPE_Q8_0;
    c.kv_block_tokens = 16;
    attnc_options o = attnc_options_default();
    o.cpu = cpu;
    attnc_jit *jit = compile(write_spec(dir, &c, "fork.yaml"), &o);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 3, &w, NULL), ATTN_OK);
    int64_t D = c.d_model, pre = 21, steps = 4, T = pre + steps;
    float *xa = random_floats((size_t)(T * D), 31), *xb = malloc((size_t)(T * D) * sizeof(float));
    float *rb = random_floats((size_t)(steps * D), 32);
    memcpy(xb, xa, (size_t)(pre * D) * sizeof(float));
    memcpy(xb + pre * D, rb, (size_t)(steps * D) * sizeof(float));
    float *ya = malloc((size_t)(T * D) * sizeof(float)),
          *yb = malloc((size_t)(T * D) * sizeof(float));
    float *wa = malloc((size_t)(T * D) * sizeof(float)),
          *wb = malloc((size_t)(T * D) * sizeof(float));
    attn_block *b;
    attn_cache *ca;
    int32_t sa, sb, np = (int32_t)pre, one = 1;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), NULL, &b), ATTN_OK);
    assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
    assert_int_equal(attn_cache_new(b, 2 * T, &ca), ATTN_OK);
    assert_int_equal(attn_seq_new(ca, &sa), ATTN_OK);
    assert_int_equal(attn_forward(b, ca, 1, &sa, &np, xa, ya), ATTN_OK);
    assert_int_equal(attn_seq_fork(ca, sa, &sb), ATTN_OK);
    for (int64_t t = pre; t < T; t++) {
        float *x2 = malloc((size_t)(2 * D) * sizeof(float)),
              *y2 = malloc((size_t)(2 * D) * sizeof(float));
        memcpy(x2, xa + t * D, (size_t)D * sizeof(float));
        memcpy(x2 + D, xb + t * D, (size_t)D * sizeof(float));
        assert_int_equal(attn_forward(b, ca, 2, (int32_t[]){sa, sb}, (int32_t[]){one, one}, x2, y2),
                         ATTN_OK);
        memcpy(ya + t * D, y2, (size_t)D * sizeof(float));
        memcpy(yb + t * D, y2 + D, (size_t)D * sizeof(float));
        free(x2);
        free(y2);
    }
    run_ref(w, T, xa, wa);
    run_ref(w, T, xb, wb);
    double ea = rel_err(ya + pre * D, wa + pre * D, (size_t)(steps * D));
    double eb = rel_err(yb + pre * D, wb + pre * D, (size_t)(steps * D));
    if (!(ea <= kv_tolerance(c.kv_dtype)) || !(eb <= kv_tolerance(c.kv_dtype)))
        fail_msg("forked q8_0 cache, --cpu %s: relative error %g (source) and %g (fork)",
                 cpu ? cpu : "host", ea, eb);
    attn_cache_free(ca);
    attn_block_free(b);
    attnc_jit_free(jit);
    attn_weights_free(w);
    free(xa), free(xb), free(rb), free(ya), free(yb), free(wa), free(wb);
    tmpdir_remove(dir);
}

static void jit_works_for_other_cpus(void **state) {
    (void)state;
    const char *cpus[] = {"x86-64-v3", "x86-64", "generic"};
    /* sanitizers: seed, whose instrumented reference is 30 times cheaper */
    const char *spec = spec_path(sanitized_step(2) > 1 ? "seed" : "mistral_7b");
    for (int i = 0; i < 3; i++) {
        attnc_options o = attnc_options_default();
        o.cpu = cpus[i];
        double e = jit_vs_ref(spec, &o, 7, 3, 0, 1);
        if (!(e <= 1e-4))
            fail_msg("--cpu %s: relative error %g", cpus[i], e);
    }
    /* the AVX2 code's flash prefill (more than 8 new tokens; its own tile
     * shapes, 16 registers) over groups of 1 to 71 heads, windows,
     * softcap, QK-norm, head_dim 64 to 256, in one shot and in chunks */
    if (!host_runs_v3())
        return;
    /* its GEMM's and GEMV's k loops take 4 steps a trip, then the steps
     * left one at a time: d_model 37 is 9 trips and 1 step; 515 a k block
     * of 128 trips, then one of no trip and 3 steps */
    char *dir = tmpdir_new();
    const int64_t odd[] = {37, 515};
    for (int i = 0; i < 2; i++)
        for (int64_t chunk = 20; chunk >= 3; chunk -= 17) { /* the GEMM, the GEMV */
            attn_config c = config_small(3, 1, 16, odd[i]);
            attnc_options o = attnc_options_default();
            o.cpu = "x86-64-v3";
            double e = jit_vs_ref(write_spec(dir, &c, "odd.yaml"), &o, 20, chunk, 2, 9);
            if (!(e <= 1e-5))
                fail_msg("--cpu x86-64-v3, d_model %lld, chunks of %lld: relative error %g",
                         (long long)odd[i], (long long)chunk, e);
        }
    tmpdir_remove(dir);
    const char *specs[] = {"seed", "mistral_7b", "gemma2_9b", "qwen3_8b", "phi3_mini", "falcon_7b"};
    for (int i = 0; i < 6; i += sanitized_step(3))
        for (int64_t chunk = 45; chunk >= 20; chunk -= 25) {
            attnc_options o = attnc_options_default();
            o.cpu = "x86-64-v3";
            double e = jit_vs_ref(spec_path(specs[i]), &o, 45, chunk, 2, 3 + (uint64_t)i);
            if (!(e <= 1e-4))
                fail_msg("--cpu x86-64-v3, %s, chunks of %lld: relative error %g", specs[i],
                         (long long)chunk, e);
        }
}

typedef struct compile_job {
    const char *spec;
    double err;
} compile_job;

static void *compile_and_check(void *p) {
    compile_job *j = p;
    j->err = jit_vs_ref(j->spec, NULL, 6, 6, 1, 2);
    return NULL;
}

static void jit_compiles_from_two_threads_at_once(void **state) {
    (void)state;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s", spec_path("seed"));
    snprintf(b, sizeof b, "%s", spec_path("gptj_6b"));
    for (int round = 0; round < 3; round++) {
        compile_job ja = {a, 1}, jb = {b, 1};
        pthread_t ta, tb;
        assert_int_equal(pthread_create(&ta, NULL, compile_and_check, &ja), 0);
        assert_int_equal(pthread_create(&tb, NULL, compile_and_check, &jb), 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        assert_true(ja.err <= 1e-4);
        assert_true(jb.err <= 1e-4);
    }
}

static void jit_reports_spec_errors_and_writes_dumps(void **state) {
    (void)state;
    attnc_jit *jit = (attnc_jit *)0x1;
    attnc_ctx *ctx = attnc_ctx_new();
    assert_int_equal(attnc_jit_compile_file(
                         ctx, ATTNC_SOURCE_DIR "/tests/specs/bad/unknown_key.yaml", NULL, &jit),
                     ATTNC_E_SPEC);
    assert_true(jit == (attnc_jit *)0x1);
    char text[2048];
    attnc_diag_text(ctx, text, sizeof text);
    assert_non_null(strstr(text, "unknown_key.yaml:3:1: error: unknown key 'kv_group'"));
    attnc_ctx_free(ctx);

    char *dir = tmpdir_new();
    attnc_options o = attnc_options_default();
    o.emit_llvm = path_in(dir, "k.ll");
    o.emit_asm = path_in(dir, "k.s");
    o.no_cache = 1; /* compiled here, timed stage by stage */
    jit = compile(spec_path("seed"), &o);
    const attn_kernels *k = attnc_jit_kernels(jit);
    assert_int_equal(k->abi_version, ATTN_KERNELS_ABI);
    assert_string_equal(k->config.name, "seed");
    assert_true(k->n_steps > 4);
    assert_non_null(strstr(k->steps[0].name, "attnk_seed_"));
    attnc_timings t = attnc_jit_timings(jit);
    assert_true(t.optimize_ms > 0 && t.codegen_ms > 0 && t.jit_ms > 0 && t.threads >= 1);
    assert_true(t.objects_ms > 0 && t.total_ms >= t.objects_ms && t.cache == ATTNC_CACHE_OFF);
    char *ll = read_file(o.emit_llvm, NULL), *s = read_file(o.emit_asm, NULL);
    assert_non_null(ll);
    assert_non_null(s);
    assert_non_null(strstr(ll, "define void @attnk_seed_"));
    assert_null(strstr(ll, "@expf")); /* exp is a polynomial, not a libm call */
    assert_non_null(strstr(s, "attnk_seed_"));
    /* vectorized for the target: the fused kernel families (vectors built
     * explicitly) use zmm on AVX-512; the others, left to the loop
     * vectorizer with the fusions turned off, use zmm or ymm (LLVM tunes
     * Intel's AVX-512 cores for 256-bit vectors: prefer-256-bit) */
    char *cpuinfo = read_file("/proc/cpuinfo", NULL);
    bool avx512 = cpuinfo && strstr(cpuinfo, " avx512f");
    /* a linear calls its micro-kernels (compiled as functions of their own) */
    const char *fused[] = {"_linear_micro1:", "_linear_gemv1:", "_flash:", "_flash_split:", NULL};
    const char *unfused[] = {"_rope:", "_qk:", "_softmax:", "_pv:", "_mask:", NULL};
    const char *off[] = {"flash_attention", "rope_epilogue"};
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            free(s);
            attnc_jit_free(jit);
            o.disabled_passes = off;
            o.n_disabled_passes = 2;
            jit = compile(spec_path("seed"), &o);
            s = read_file(o.emit_asm, NULL);
        }
        for (const char *const *fam = round ? unfused : fused; avx512 && *fam; fam++) {
            const char *at = strstr(s, *fam);
            assert_non_null(at);
            const char *end = strstr(at + 1, "\n.Lfunc_end");
            const char *z = strstr(at, "zmm"), *y = round ? strstr(at, "ymm") : NULL;
            bool zmm = z && (!end || z < end), ymm = y && (!end || y < end);
            if (!zmm && !ymm)
                fail_msg("kernel %s has no %s instruction", *fam, round ? "zmm or ymm" : "zmm");
        }
    }
    o.disabled_passes = NULL;
    o.n_disabled_passes = 0;
    free(cpuinfo);
    free(ll);
    free(s);
    attnc_jit_free(jit);
    o.cpu = "x86-64-v3"; /* AVX2: ymm, never zmm */
    jit = compile(spec_path("seed"), &o);
    s = read_file(o.emit_asm, NULL);
    assert_non_null(strstr(s, "ymm"));
    assert_null(strstr(s, "zmm"));
    free(s);
    attnc_jit_free(jit);
    tmpdir_remove(dir);
}

static void block_rejects_bad_tables_and_arguments(void **state) {
    (void)state;
    attnc_jit *jit = compile(spec_path("seed"), NULL);
    attn_kernels k = *attnc_jit_kernels(jit);
    attn_block *b = NULL;
    k.abi_version = 99;
    assert_int_equal(attn_block_new(&k, NULL, &b), ATTN_E_INVALID);
    k = *attnc_jit_kernels(jit);
    k.config.heads = 7; /* not a multiple of kv_groups 4 */
    assert_int_equal(attn_block_new(&k, NULL, &b), ATTN_E_INVALID);
    assert_null(b);
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), NULL, &b), ATTN_OK);
    attn_cache *c;
    int32_t s;
    assert_int_equal(attn_cache_new(b, 4, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    float x[5 * 768] = {0}, y[5 * 768];
    int32_t n1 = 1, n2 = 2, n3 = 3, neg = -1;
    assert_int_equal(attn_forward(b, c, 1, &s, &n1, x, y), ATTN_E_INVALID); /* no weights yet */
    assert_non_null(strstr(attn_cache_error(c), "no weights"));
    attn_config other = load_spec_file(spec_path("llama2_7b"));
    attn_weights *w;
    assert_int_equal(attn_weights_new(&other, &w, NULL), ATTN_OK);
    assert_int_equal(attn_block_set_weights(b, w), ATTN_E_INVALID);
    attn_weights_free(w);
    attn_config seed = load_spec_file(spec_path("seed"));
    assert_int_equal(attn_weights_random(&seed, 1, &w, NULL), ATTN_OK);
    assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
    assert_int_equal(attn_forward(b, c, 1, &s, &n3, x, y), ATTN_OK);
    /* 16-token blocks: a second 16-token block is not there */
    attn_cache_stats stats = attn_cache_get_stats(c);
    assert_int_equal(stats.blocks_total, 1);
    assert_int_equal(attn_forward(b, c, 1, &s, &n2, x, y), ATTN_OK);
    assert_int_equal(attn_seq_truncate(c, s, 1), ATTN_OK);
    assert_int_equal(attn_forward(b, c, 1, &s, &n3, x, y), ATTN_OK);
    assert_int_equal(attn_forward(b, c, 1, &s, &neg, x, y), ATTN_E_INVALID);
    attn_weights_free(w);
    attn_cache_free(c);
    attn_block_free(b);
    attnc_jit_free(jit);
}

/* test_jit [PATTERN]: the tests whose names match PATTERN (cmocka's
 * wildcards * and ?), all without it. */
int main(int argc, char **argv) {
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(jit_equals_reference_for_every_shipped_spec),
        cmocka_unit_test(jit_equals_reference_with_each_pass_disabled),
        cmocka_unit_test(jit_equals_reference_over_random_sweep),
        cmocka_unit_test(jit_results_do_not_depend_on_thread_count),
        cmocka_unit_test(decode_steps_equal_one_shot_prefill),
        cmocka_unit_test(split_decode_follows_growing_scores),
        cmocka_unit_test(narrow_weights_are_exact),
        cmocka_unit_test(gemm_takes_every_row_count),
        cmocka_unit_test(q8_0_cache_forks_copy_scales),
        cmocka_unit_test(jit_works_for_other_cpus),
        cmocka_unit_test(jit_compiles_from_two_threads_at_once),
        cmocka_unit_test(jit_reports_spec_errors_and_writes_dumps),
        cmocka_unit_test(block_rejects_bad_tables_and_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
