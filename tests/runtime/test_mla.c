/* test_mla.c: multi-head latent attention (spec key mla): the shipped
 * specs and what their keys derive, the config's rules, weights under
 * their Hugging Face names, and the reference engine against a second
 * implementation in this file that computes the absorbed form (queries
 * taken into latent space, scores against the cached latent, no
 * expanded K or V), over a randomized sweep; decode token by token ==
 * one-shot prefill; shards sum to the whole block. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_kernels.h"
#include "attnc.h"
#include "reference.h"
#include "support.h"

static attn_config load_spec(const char *path) {
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c;
    attnc_status st = attnc_spec_load_file(ctx, path, &c);
    print_diags(ctx);
    attnc_ctx_free(ctx);
    assert_int_equal(st, ATTNC_OK);
    return c;
}

static void shipped_specs_derive_the_block(void **state) {
    (void)state;
    attn_config c = load_spec(spec_path("deepseek_v3"));
    assert_int_equal(c.heads, 128);
    assert_int_equal(c.kv_groups, 128);
    assert_int_equal(c.head_dim, 192);
    assert_int_equal(c.rotary_dim, 64);
    assert_int_equal(c.d_model, 7168);
    assert_int_equal(c.mla_q_lora_rank, 1536);
    assert_int_equal(c.mla_kv_lora_rank, 512);
    assert_int_equal(c.mla_qk_nope_head_dim, 128);
    assert_int_equal(c.mla_qk_rope_head_dim, 64);
    assert_int_equal(c.mla_v_head_dim, 128);
    assert_int_equal(attn_v_head_dim(&c), 128);
    assert_true(c.mla_eps == 1e-6 && c.scale_auto);
    assert_int_equal(c.rope_style, ATTN_ROPE_INTERLEAVED);
    /* DeepseekV3Attention: 192^-0.5 * (0.1 * 1.0 * ln 40 + 1)^2 */
    double m = 0.1 * log(40.0) + 1;
    assert_true(fabs(c.scale - m * m / sqrt(192.0)) < 1e-15);
    assert_true(fabs(attn_rope_cos_factor(&c) - 1.0) < 1e-15);

    c = load_spec(spec_path("deepseek_v2_lite"));
    assert_int_equal(c.heads, 16);
    assert_int_equal(c.mla_q_lora_rank, 0);
    m = 0.1 * 0.707 * log(40.0) + 1;
    assert_true(fabs(c.scale - m * m / sqrt(192.0)) < 1e-15);

    c = load_spec(spec_path("kimi_k2"));
    assert_int_equal(c.heads, 64);
    assert_true(c.rope_base == 50000 && c.rope_factor == 32);
    assert_true(c.rope_beta_fast == 1 && c.rope_beta_slow == 1); /* equal: a ramp one dim wide */

    const char *names[] = {"deepseek_v2_lite", "deepseek_v3", "kimi_k2"};
    for (int i = 0; i < 3; i++) { /* printed back, the same config */
        attn_config a = load_spec(spec_path(names[i]));
        char *y = attnc_spec_to_yaml(&a);
        assert_non_null(strstr(y, "mla:\n  q_lora_rank: "));
        assert_null(strstr(y, "head_dim: 192"));
        attnc_ctx *ctx = attnc_ctx_new();
        attn_config b;
        assert_int_equal(attnc_spec_load_string(ctx, names[i], y, strlen(y), &b), ATTNC_OK);
        attnc_ctx_free(ctx);
        assert_memory_equal(&a, &b, sizeof a);
        free(y);
    }
}

/* A small MLA config, valid. */
static attn_config mla_config(int64_t heads, int64_t d_model, int64_t q_lora, int64_t kv_lora,
                              int64_t nope, int64_t rope, int64_t vd) {
    attn_config c = config_small(heads, heads, nope + rope, d_model);
    c.mla_q_lora_rank = q_lora, c.mla_kv_lora_rank = kv_lora;
    c.mla_qk_nope_head_dim = nope, c.mla_qk_rope_head_dim = rope, c.mla_v_head_dim = vd;
    c.mla_eps = 1e-6;
    c.rope_style = ATTN_ROPE_INTERLEAVED, c.rope_base = 10000, c.rotary_dim = rope;
    c.kv_max_tokens = 256;
    return c;
}

static void expect_invalid(const attn_config *c, const char *want) {
    attn_msg m;
    assert_int_equal(attn_config_check(c, &m), ATTN_E_INVALID);
    if (!strstr(m.text, want))
        fail_msg("'%s' lacks '%s'", m.text, want);
}

static void config_rules(void **state) {
    (void)state;
    attn_config ok = mla_config(4, 64, 32, 32, 16, 8, 12), c;
    attn_msg m;
    assert_int_equal(attn_config_check(&ok, &m), ATTN_OK);
    c = ok, c.head_dim = 16;
    expect_invalid(&c, "head_dim (16) must be qk_nope_head_dim + qk_rope_head_dim (24)");
    c = ok, c.kv_groups = 2;
    expect_invalid(&c, "kv_groups (2) heads (4)");
    c = ok, c.rotary_dim = 4;
    expect_invalid(&c, "rope.rotary_dim (4) must be mla.qk_rope_head_dim (8)");
    c = ok, c.mla_qk_rope_head_dim = 7, c.rotary_dim = 7, c.head_dim = 23;
    expect_invalid(&c, "even");
    c = ok, c.mla_kv_lora_rank = 0;
    expect_invalid(&c, "mla fields are set but mla_kv_lora_rank is 0");
    c = ok, c.sinks = true;
    expect_invalid(&c, "sinks does not go with mla");
    c = ok, c.weights_layout = ATTN_LAYOUT_PHI3;
    expect_invalid(&c, "weights.layout does not go with mla");
    c = ok, c.kv_dtype = ATTN_DTYPE_Q8_0, c.mla_qk_rope_head_dim = 8;
    expect_invalid(&c,
                   "mla.kv_lora_rank (32) and mla.qk_rope_head_dim (8) must be multiples of 32");
    c = ok, c.dtype = ATTN_DTYPE_Q8_0; /* heads * v_head_dim = 48 */
    expect_invalid(&c, "heads * mla.v_head_dim (48) must be multiples of 32");
    c = ok, c.activations = ATTN_DTYPE_Q8_0; /* float weights: nothing to meet */
    expect_invalid(&c, "activations: q8_0 with mla quantizes the projections' inputs only");
    c = ok, c.compute = ATTN_DTYPE_BF16; /* with every form and dtype (compute_bf16) */
    assert_int_equal(attn_config_check(&c, &m), ATTN_OK);
    c = ok, c.mla_eps = -1;
    expect_invalid(&c, "mla.eps (-1)");
    /* an MLA block shards by heads: the latent is every shard's */
    attn_config sh;
    assert_int_equal(attn_config_shard(&ok, 1, 2, &sh, &m), ATTN_OK);
    assert_int_equal(sh.heads, 2);
    assert_int_equal(sh.kv_groups, 2);
    assert_int_equal(attn_v_head_dim(&sh), 12);
}

/* ---- the absorbed form, written out ---------------------------------------- */

static double dot_fd(const float *w, const double *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)w[i] * x[i];
    return s;
}

static void rms(const float *g, int64_t n, double eps, double *x) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] / sqrt(ss / (double)n + eps) * (double)g[i];
}

/* y [S, D] of a causal prefill of x [S, D] from position 0, computed with
 * kv_b_proj absorbed: q_lat[h] = W_kb[h]^T q_nope[h], s = q_lat . c_kv +
 * q_pe . k_pe, o[h] = W_vb[h] . sum p c_kv. The latent is rounded to the
 * cache dtype as the reference caches it. */
static void absorbed(const attn_weights *w, int64_t S, const float *x, float *y) {
    const attn_config *c = &w->cfg;
    int64_t H = c->heads, D = c->d_model, kvl = c->mla_kv_lora_rank, r = c->mla_qk_rope_head_dim;
    int64_t nope = c->mla_qk_nope_head_dim, hd = c->head_dim, vd = c->mla_v_head_dim;
    int64_t ql = c->mla_q_lora_rank, L = kvl + r;
    double *inv = malloc((size_t)r * sizeof *inv), *xd = malloc((size_t)D * sizeof *xd);
    double *lat = malloc((size_t)(S * L) * sizeof *lat), *q = malloc((size_t)hd * sizeof *q);
    double *qa = malloc((size_t)(ql + 1) * sizeof *qa), *ql_ = malloc((size_t)L * sizeof *ql_);
    double *s = malloc((size_t)S * sizeof *s), *ol = malloc((size_t)kvl * sizeof *ol);
    double *o = malloc((size_t)(H * vd) * sizeof *o),
           *qall = malloc((size_t)(H * hd) * sizeof *qall);
    float *row = malloc((size_t)L * sizeof *row);
    attn_rope_inv_freq(c, inv);
    for (int64_t t = 0; t < S; t++) { /* the latent cache */
        for (int64_t i = 0; i < D; i++)
            xd[i] = x[t * D + i];
        double *l = lat + t * L;
        for (int64_t i = 0; i < L; i++)
            l[i] = dot_fd(w->wkv_a + i * D, xd, D);
        rms(w->kv_a_norm, kvl, c->mla_eps, l);
        ref_rope_apply(c, inv, t, l + kvl);
        for (int64_t i = 0; i < L; i++)
            row[i] = (float)l[i];
        rt_round_row(c->kv_dtype, row, L);
        for (int64_t i = 0; i < L; i++)
            l[i] = row[i];
    }
    for (int64_t t = 0; t < S; t++) {
        for (int64_t i = 0; i < D; i++)
            xd[i] = x[t * D + i];
        if (ql) {
            for (int64_t i = 0; i < ql; i++)
                qa[i] = dot_fd(w->wq_a + i * D, xd, D);
            rms(w->q_a_norm, ql, c->mla_eps, qa);
        }
        for (int64_t i = 0; i < H * hd; i++)
            qall[i] = ql ? dot_fd(w->wq_b + i * ql, qa, ql) : dot_fd(w->wq + i * D, xd, D);
        for (int64_t h = 0; h < H; h++) {
            memcpy(q, qall + h * hd, (size_t)hd * sizeof *q);
            ref_rope_apply(c, inv, t, q + nope);
            const float *wb = w->wkv_b + h * (nope + vd) * kvl;
            for (int64_t i = 0; i < kvl; i++) { /* q_lat = W_kb[h]^T q_nope */
                ql_[i] = 0;
                for (int64_t n = 0; n < nope; n++)
                    ql_[i] += q[n] * (double)wb[n * kvl + i];
            }
            for (int64_t i = 0; i < r; i++)
                ql_[kvl + i] = q[nope + i];
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= t; j++) {
                s[j] = 0;
                for (int64_t i = 0; i < L; i++)
                    s[j] += ql_[i] * lat[j * L + i];
                s[j] *= c->scale;
                if (c->softcap > 0)
                    s[j] = c->softcap * tanh(s[j] / c->softcap);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int64_t i = 0; i < kvl; i++)
                ol[i] = 0;
            for (int64_t j = 0; j <= t; j++) {
                double p = exp(s[j] - mx);
                sum += p;
                for (int64_t i = 0; i < kvl; i++)
                    ol[i] += p * lat[j * L + i];
            }
            for (int64_t v = 0; v < vd; v++) /* W_vb[h] . o_lat */
                o[h * vd + v] = dot_fd(wb + (nope + v) * kvl, ol, kvl) / sum;
        }
        for (int64_t i = 0; i < D; i++)
            y[t * D + i] = (float)(dot_fd(w->wo + i * H * vd, o, H * vd) + (w->bo ? w->bo[i] : 0));
    }
    free(inv), free(xd), free(lat), free(q), free(qa), free(ql_), free(s), free(ol), free(o);
    free(qall), free(row);
}

static float *ref_run(const attn_weights *w, int64_t S, const float *x, int64_t chunk) {
    attn_ref *r;
    attn_msg m;
    assert_int_equal(attn_ref_new(w, S, &r, &m), ATTN_OK);
    int64_t D = w->cfg.d_model;
    float *y = malloc((size_t)(S * D) * sizeof *y);
    for (int64_t t = 0; t < S; t += chunk) {
        int64_t n = S - t < chunk ? S - t : chunk;
        assert_int_equal(attn_ref_forward(r, n, x + t * D, y + t * D, &m), ATTN_OK);
    }
    attn_ref_free(r);
    return y;
}

/* A random small MLA config of sweep case i. */
static attn_config mla_sweep_config(int i, uint64_t *rs) {
    int64_t heads = 1 + (int64_t)((rnd_unit(rs) + 1) * 2.5);    /* 1..5 */
    int64_t rope = 2 * (1 + (int64_t)((rnd_unit(rs) + 1) * 4)); /* 2..18 */
    int64_t nope = 1 + (int64_t)((rnd_unit(rs) + 1) * 12);      /* 1..25 */
    int64_t kvl = 1 + (int64_t)((rnd_unit(rs) + 1) * 20);       /* 1..41 */
    int64_t vd = 1 + (int64_t)((rnd_unit(rs) + 1) * 10);        /* 1..21 */
    int64_t ql = i % 2 ? 8 + (int64_t)((rnd_unit(rs) + 1) * 10) : 0;
    int64_t D = 8 + (int64_t)((rnd_unit(rs) + 1) * 30);
    attn_config c = mla_config(heads, D, ql, kvl, nope, rope, vd);
    c.rope_style = i % 3 == 0 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
    c.o_bias = i % 4 == 1;
    c.softcap = i % 5 == 2 ? 3.0 : 0;
    c.mla_eps = i % 2 ? 1e-6 : 1e-5;
    c.kv_dtype = i % 6 == 3 ? ATTN_DTYPE_BF16 : i % 6 == 4 ? ATTN_DTYPE_F16 : ATTN_DTYPE_F32;
    if (i % 7 == 5) { /* DeepSeek's YaRN, mscale_all_dim into the softmax scale */
        c.rope_scaling = ATTN_SCALING_YARN, c.rope_factor = 40, c.rope_original_max_position = 8;
        c.rope_beta_fast = 32, c.rope_beta_slow = 1, c.rope_mscale = 0.707;
        c.rope_mscale_all_dim = 0.707, c.rope_truncate = true;
        c.rope_attention_factor = attn_yarn_default_attention_factor(&c);
    }
    c.scale = 1.0 / sqrt((double)c.head_dim) * attn_mla_softmax_mscale(&c);
    if (i % 8 == 6) { /* q8_0: the latent's blocks of 32 */
        c = mla_config(heads, 64, 32, 64, nope, 32, vd);
        c.kv_dtype = ATTN_DTYPE_Q8_0;
    }
    if (i % 9 == 7)
        c.dtype = ATTN_DTYPE_BF16;
    attn_msg m;
    if (attn_config_check(&c, &m) != ATTN_OK)
        fail_msg("sweep case %d: %s", i, m.text);
    return c;
}

static void reference_equals_absorbed_form_and_decode_equals_prefill(void **state) {
    (void)state;
    uint64_t rs = 26;
    const char *n = getenv("ATTNC_SWEEP");
    int cases = n ? atoi(n) : 40;
    for (int i = 0; i < cases; i++) {
        attn_config c = mla_sweep_config(i, &rs);
        attn_weights *w;
        attn_msg m;
        assert_int_equal(attn_weights_random(&c, 100 + (uint64_t)i, &w, &m), ATTN_OK);
        int64_t S = 3 + i % 17, D = c.d_model;
        float *x = random_floats((size_t)(S * D), 200 + (uint64_t)i);
        float *want = malloc((size_t)(S * D) * sizeof *want);
        absorbed(w, S, x, want);
        float *once = ref_run(w, S, x, S), *steps = ref_run(w, S, x, 1),
              *chunks = ref_run(w, S, x, 4);
        double e = rel_err(once, want, (size_t)(S * D));
        if (!(e < 1e-5))
            fail_msg("case %d (heads %lld, kv_lora %lld, nope %lld, rope %lld, v %lld, q_lora "
                     "%lld, kv %s): reference vs absorbed form %g",
                     i, (long long)c.heads, (long long)c.mla_kv_lora_rank,
                     (long long)c.mla_qk_nope_head_dim, (long long)c.mla_qk_rope_head_dim,
                     (long long)c.mla_v_head_dim, (long long)c.mla_q_lora_rank,
                     attn_dtype_name(c.kv_dtype), e);
        /* the same keys expanded the same way in every call */
        assert_memory_equal(once, steps, (size_t)(S * D) * sizeof *once);
        assert_memory_equal(once, chunks, (size_t)(S * D) * sizeof *once);
        free(x), free(want), free(once), free(steps), free(chunks);
        attn_weights_free(w);
    }
}

static void weights_under_their_names(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    for (int q = 0; q < 2; q++) {
        attn_config c = mla_config(4, 64, q ? 32 : 0, 32, 16, 8, 12);
        c.dtype = ATTN_DTYPE_BF16;
        attn_weights *w, *back;
        attn_msg m;
        assert_int_equal(attn_weights_random(&c, 7, &w, &m), ATTN_OK);
        assert_true(q ? w->wq == NULL && w->wq_a && w->q_a_norm && w->wq_b
                      : w->wq != NULL && !w->wq_a);
        assert_true(w->wk == NULL && w->wv == NULL && w->wkv_a && w->kv_a_norm && w->wkv_b);
        const char *path = path_in(dir, "mla.safetensors");
        assert_int_equal(
            attn_weights_save(w, path, ATTN_DTYPE_BF16, "model.layers.3.self_attn.", &m), ATTN_OK);
        attn_st *f;
        assert_int_equal(attn_st_open(path, &f, &m), ATTN_OK);
        const attn_st_info *t = attn_st_find(f, "model.layers.3.self_attn.kv_b_proj.weight");
        assert_non_null(t);
        assert_true(t->ndim == 2 && t->shape[0] == 4 * (16 + 12) && t->shape[1] == 32);
        t = attn_st_find(f, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight");
        assert_true(t && t->shape[0] == 32 + 8 && t->shape[1] == 64);
        t = attn_st_find(f, "model.layers.3.self_attn.o_proj.weight");
        assert_true(t && t->shape[0] == 64 && t->shape[1] == 4 * 12);
        assert_true((attn_st_find(f, "model.layers.3.self_attn.q_a_layernorm.weight") != NULL) ==
                    (q == 1));
        attn_st_close(f);
        assert_int_equal(attn_weights_load(&c, path, "model.layers.3.self_attn.", &back, &m),
                         ATTN_OK);
        assert_memory_equal(back->wkv_b, w->wkv_b, 4 * 28 * 32 * sizeof(float));
        assert_memory_equal(back->kv_a_norm, w->kv_a_norm, 32 * sizeof(float));
        assert_memory_equal(back->wo, w->wo, 64 * 48 * sizeof(float));
        if (q)
            assert_memory_equal(back->wq_b, w->wq_b, 96 * 32 * sizeof(float));
        attn_weights_free(back);
        /* the other q path's config: the tensor it needs is missing */
        attn_config other = mla_config(4, 64, q ? 0 : 32, 32, 16, 8, 12);
        assert_int_equal(attn_weights_check(&other, path, "model.layers.3.self_attn.", &m),
                         ATTN_E_FORMAT);
        if (!strstr(m.text, q ? "missing tensor 'model.layers.3.self_attn.q_proj.weight'"
                              : "missing tensor 'model.layers.3.self_attn.q_a_proj.weight'"))
            fail_msg("%s", m.text);
        attn_weights_free(w);
    }
    tmpdir_remove(dir);
}

static void shards_sum_to_the_whole_block(void **state) {
    (void)state;
    attn_config c = mla_config(4, 32, 16, 20, 6, 4, 5);
    c.o_bias = true;
    attn_weights *w, *part;
    attn_msg m;
    assert_int_equal(attn_weights_random(&c, 3, &w, &m), ATTN_OK);
    int64_t S = 9, D = c.d_model;
    float *x = random_floats((size_t)(S * D), 4), *want = ref_run(w, S, x, S);
    for (int n = 2; n <= 4; n *= 2) {
        float *sum = calloc((size_t)(S * D), sizeof *sum);
        for (int i = 0; i < n; i++) {
            assert_int_equal(attn_weights_shard(w, i, n, &part, &m), ATTN_OK);
            float *y = ref_run(part, S, x, 3);
            for (int64_t k = 0; k < S * D; k++)
                sum[k] += y[k];
            free(y);
            attn_weights_free(part);
        }
        assert_true(rel_err(sum, want, (size_t)(S * D)) < 1e-5);
        free(sum);
    }
    free(x), free(want);
    attn_weights_free(w);
}

/* ---- the JIT kernels ---------------------------------------------------- */

/* Compiled with pass `off` disabled (NULL: none): flash_attention gives
 * the unfused attention, mla_absorb the expanded form. */
static attnc_jit *compile_config(const char *dir, const attn_config *c, const char *off) {
    attnc_options o = attnc_options_default();
    if (off)
        o.disabled_passes = &off, o.n_disabled_passes = 1;
    return jit_or_fail(write_spec(dir, c, "mla.yaml"), &o);
}

/* y of x [S, D] through the kernels: a call of `first` tokens, then
 * calls of `chunk`; the weights w's, or (file not NULL) loaded from file
 * (w gives the config). */
static float *jit_run_file(const attnc_jit *jit, const attn_weights *w, const char *file, int64_t S,
                           const float *x, int64_t first, int64_t chunk, int threads) {
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = threads;
    attn_block *b;
    attn_cache *cache;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), &bo, &b), ATTN_OK);
    if ((file ? attn_block_load(b, file, "", 0) : attn_block_set_weights(b, w)) != ATTN_OK)
        fail_msg("weights: %s", attn_block_error(b));
    assert_int_equal(attn_cache_new(b, S, &cache), ATTN_OK);
    int32_t seq;
    assert_int_equal(attn_seq_new(cache, &seq), ATTN_OK);
    int64_t D = w->cfg.d_model;
    float *y = malloc((size_t)(S * D) * sizeof *y);
    for (int64_t t = 0, k; t < S; t += k) {
        k = t ? chunk : first;
        int32_t n = (int32_t)(S - t < k ? S - t : k);
        if (attn_forward(b, cache, 1, &seq, &n, x + t * D, y + t * D) != ATTN_OK)
            fail_msg("attn_forward: %s", attn_cache_error(cache));
    }
    attn_cache_free(cache);
    attn_block_free(b);
    return y;
}

static float *jit_run_from(const attnc_jit *jit, const attn_weights *w, int64_t S, const float *x,
                           int64_t first, int64_t chunk, int threads) {
    return jit_run_file(jit, w, NULL, S, x, first, chunk, threads);
}

/* y of x [S, D] through the kernels, in calls of `chunk` tokens. */
static float *jit_run(const attnc_jit *jit, const attn_weights *w, int64_t S, const float *x,
                      int64_t chunk, int threads) {
    return jit_run_from(jit, w, S, x, chunk, chunk, threads);
}

static void jit_equals_reference(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t rs = 27;
    const char *n = getenv("ATTNC_SWEEP");
    int cases = n ? atoi(n) : 24;
    for (int i = 0; i < cases; i++) {
        attn_config c = mla_sweep_config(i, &rs);
        snprintf(c.name, sizeof c.name, "mla_%d", i);
        if (i % 5 == 1)
            c.kv_dtype = ATTN_DTYPE_F16;
        if (i % 10 == 3)
            c.dtype = ATTN_DTYPE_F16;
        attn_msg m;
        assert_int_equal(attn_config_check(&c, &m), ATTN_OK);
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 300 + (uint64_t)i, &w, &m), ATTN_OK);
        int64_t S = 2 + i % 37, D = c.d_model, chunk = 1 + i % 7;
        float *x = random_floats((size_t)(S * D), 400 + (uint64_t)i);
        float *want = ref_run(w, S, x, S);
        /* the absorbed form, flash or unfused; every third case expanded */
        const char *off = i % 3 == 1 ? "mla_absorb" : i % 6 == 5 ? "flash_attention" : NULL;
        attnc_jit *jit = compile_config(dir, &c, off);
        float *once = jit_run(jit, w, S, x, S, 2), *steps = jit_run(jit, w, S, x, chunk, 1);
        double e1 = rel_err(once, want, (size_t)(S * D));
        double e2 = rel_err(steps, want, (size_t)(S * D));
        /* a q8_0 latent element on a rounding boundary may land one step
         * (1/127 of its block's max) from the reference's, and every head
         * reads it: up to 1e-2 (4.6e-3 seen in 120 cases) */
        double tol = c.kv_dtype == ATTN_DTYPE_Q8_0 ? 1e-2 : kv_tolerance(c.kv_dtype);
        if (!(e1 < tol) || !(e2 < tol))
            fail_msg("case %d (heads %lld, kv_lora %lld, nope %lld, rope %lld, v %lld, q_lora "
                     "%lld, cache %s, weights %s, without %s): one shot %g, chunks of %lld %g",
                     i, (long long)c.heads, (long long)c.mla_kv_lora_rank,
                     (long long)c.mla_qk_nope_head_dim, (long long)c.mla_qk_rope_head_dim,
                     (long long)c.mla_v_head_dim, (long long)c.mla_q_lora_rank,
                     attn_dtype_name(c.kv_dtype), attn_dtype_name(c.dtype), off ? off : "nothing",
                     e1, (long long)chunk, e2);
        attnc_jit_free(jit);
        free(x), free(want), free(once), free(steps);
        attn_weights_free(w);
    }
    tmpdir_remove(dir);
}

/* More heads than a flash item's rows (48 with AVX-512, 24 with AVX2):
 * odd numbers of items per token, which calls of few tokens split into
 * smaller ones (cg_flash.c): both paths == the reference. */
static void many_heads(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = mla_config(100, 64, 0, 40, 8, 8, 6);
    snprintf(c.name, sizeof c.name, "mla_heads");
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 9, &w, NULL), ATTN_OK);
    int64_t S = 21, D = c.d_model;
    float *x = random_floats((size_t)(S * D), 10), *want = ref_run(w, S, x, S);
    attnc_jit *jit = compile_config(dir, &c, NULL);
    const int64_t chunks[] = {1, 5, 21}; /* few tokens a call, and many */
    for (int i = 0; i < 3; i++) {
        int64_t chunk = chunks[i];
        float *got = jit_run(jit, w, S, x, chunk, 2);
        double e = rel_err(got, want, (size_t)(S * D));
        if (!(e < 1e-4))
            fail_msg("chunks of %lld: %g", (long long)chunk, e);
        free(got);
    }
    attnc_jit_free(jit);
    free(x), free(want);
    attn_weights_free(w);
    tmpdir_remove(dir);
}

/* Decode over a long cache: calls of few tokens split the keys into
 * chunks (one per 512 keys, at most 16) computed apart by the flash
 * kernel's items and merged (decode_split, cg_split.c). After a prefill
 * of 1500 tokens, calls of 1 and 3 tokens == the reference, the same
 * bits on 1 and 2 threads (the chunks depend on the keys alone); with
 * a cache of f16, a softcap, a sliding window (the first chunk starts
 * past key 0), fewer heads than a row vector and more than an item. */
static void long_decode_splits_keys(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    const struct {
        int64_t heads, window;
        attn_dtype kv;
        double softcap;
    } cases[] = {
        {5, 0, ATTN_DTYPE_F32, 0},
        {70, 0, ATTN_DTYPE_F16, 0},
        {12, 900, ATTN_DTYPE_F32, 4.0},
        {3, 0, ATTN_DTYPE_BF16, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_config c = mla_config(cases[i].heads, 48, 0, 40, 8, 8, 6);
        snprintf(c.name, sizeof c.name, "mla_long_%zu", i);
        c.kv_max_tokens = 2048;
        c.kv_dtype = cases[i].kv;
        c.sliding_window = cases[i].window;
        c.softcap = cases[i].softcap;
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("case %zu: %s", i, m.text);
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 70 + i, &w, NULL), ATTN_OK);
        int64_t S = 1509, D = c.d_model;
        float *x = random_floats((size_t)(S * D), 80 + i), *want = ref_run(w, S, x, S);
        attnc_jit *jit = compile_config(dir, &c, NULL);
        for (int64_t chunk = 1; chunk <= 3; chunk += 2) {
            float *one = jit_run_from(jit, w, S, x, 1500, chunk, 1);
            float *two = jit_run_from(jit, w, S, x, 1500, chunk, 2);
            size_t tail = (size_t)(9 * D); /* the decoded tokens */
            assert_memory_equal(one + 1500 * D, two + 1500 * D, tail * sizeof *one);
            double e = rel_err(one + 1500 * D, want + 1500 * D, tail);
            if (!(e < kv_tolerance(c.kv_dtype)))
                fail_msg("case %zu, calls of %lld: %g", i, (long long)chunk, e);
            free(one), free(two);
        }
        attnc_jit_free(jit);
        free(x), free(want);
        attn_weights_free(w);
    }
    tmpdir_remove(dir);
}

/* Prefills of at least attnc_mla_prefill_tokens into an empty sequence
 * run the expanded form, every other call the absorbed one (mla_absorb,
 * by_prefill): the shipped specs' threshold, then one config through
 * calls on both sides of it: a prefill of N (expanded) and of N - 1
 * (absorbed), a prefill of N + 3 after one cached token (absorbed), each
 * followed by decode steps, and a batch of a decode and a prefill into an
 * empty sequence (one form each), all == the reference. */
static void prefill_forms(void **state) {
    (void)state;
    const char *shipped[] = {"deepseek_v2_lite", "deepseek_v3", "kimi_k2"};
    for (int i = 0; i < 3; i++) {
        attn_config c = load_spec(spec_path(shipped[i]));
        /* 2L (n + dv) (1.05 - 1) / (2L - n - dv), L 512, n = dv = 128 */
        assert_int_equal(attnc_mla_prefill_tokens(&c), 18);
    }
    attn_config none = config_small(4, 4, 16, 64);
    assert_int_equal(attnc_mla_prefill_tokens(&none), 0);

    char *dir = tmpdir_new();
    attn_config c = mla_config(6, 48, 0, 64, 24, 8, 24); /* N = 4 */
    snprintf(c.name, sizeof c.name, "mla_forms");
    int64_t N = attnc_mla_prefill_tokens(&c), D = c.d_model;
    assert_int_equal(N, 4);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 5, &w, NULL), ATTN_OK);
    int64_t S = N + 6;
    float *x = random_floats((size_t)(S * D), 6), *want = ref_run(w, S, x, S);
    attnc_jit *jit = compile_config(dir, &c, NULL);
    const int64_t first[] = {N, N - 1, 1};
    const int64_t then[] = {1, 1, N + 3};
    for (int i = 0; i < 3; i++) {
        float *got = jit_run_from(jit, w, S, x, first[i], then[i], 2);
        double e = rel_err(got, want, (size_t)(S * D));
        if (!(e < 1e-4))
            fail_msg("a call of %lld, then calls of %lld: %g", (long long)first[i],
                     (long long)then[i], e);
        free(got);
    }
    /* one batch: sequence 0 decodes a token after N + 6 cached, sequence
     * 1 prefills N + 6 into nothing (expanded) while 0 runs absorbed */
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = 2;
    attn_block *b;
    attn_cache *cache;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), &bo, &b), ATTN_OK);
    assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
    assert_int_equal(attn_cache_new(b, 4 * S, &cache), ATTN_OK);
    int32_t seq[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(attn_seq_new(cache, &seq[i]), ATTN_OK);
    float *y = malloc((size_t)((2 * S) * D) * sizeof *y);
    int32_t n0 = (int32_t)(S - 1);
    assert_int_equal(attn_forward(b, cache, 1, &seq[0], &n0, x, y), ATTN_OK);
    /* x for the batch: sequence 0's last token, then all of sequence 1's */
    float *xb = malloc((size_t)((S + 1) * D) * sizeof *xb);
    memcpy(xb, x + (S - 1) * D, (size_t)D * sizeof *xb);
    memcpy(xb + D, x, (size_t)(S * D) * sizeof *xb);
    int32_t nb[2] = {1, (int32_t)S};
    assert_int_equal(attn_forward(b, cache, 2, seq, nb, xb, y), ATTN_OK);
    double e0 = rel_err(y, want + (S - 1) * D, (size_t)D);
    double e1 = rel_err(y + D, want, (size_t)(S * D));
    if (!(e0 < 1e-4) || !(e1 < 1e-4))
        fail_msg("batch of a decode and a prefill: %g, %g", e0, e1);
    free(xb), free(y);
    attn_cache_free(cache);
    attn_block_free(b);

    attnc_jit_free(jit);
    free(x), free(want);
    attn_weights_free(w);
    tmpdir_remove(dir);
}

/* The latent cache forks (copy on write of a shared partial block) and
 * truncates as every cache does: two sequences continuing one prefix,
 * and one rolled back and continued, each == the reference. */
static void forks_and_truncation(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = mla_config(4, 64, 0, 32, 16, 32, 12);
    snprintf(c.name, sizeof c.name, "mla_fork");
    c.kv_dtype = ATTN_DTYPE_Q8_0; /* its scales follow the block's values */
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 15, &w, NULL), ATTN_OK);
    int64_t P = 10, N = 4, D = c.d_model; /* a prefix inside the first block of 16 */
    float *x = random_floats((size_t)((P + 2 * N) * D), 16);
    attnc_jit *jit = compile_config(dir, &c, NULL);
    attn_block *b;
    attn_cache *cache;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), NULL, &b), ATTN_OK);
    assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
    assert_int_equal(attn_cache_new(b, 64, &cache), ATTN_OK);
    int32_t s0, s1, np = (int32_t)P, n1 = 1;
    float *y = malloc((size_t)((P + N) * D) * sizeof *y);
    assert_int_equal(attn_seq_new(cache, &s0), ATTN_OK);
    assert_int_equal(attn_forward(b, cache, 1, &s0, &np, x, y), ATTN_OK);
    assert_int_equal(attn_seq_fork(cache, s0, &s1), ATTN_OK);
    /* s0 continues with tokens P.., s1 with the next N after them */
    float *want0 = ref_run(w, P + N, x, P + N);
    float *x1 = malloc((size_t)((P + N) * D) * sizeof *x1);
    memcpy(x1, x, (size_t)(P * D) * sizeof *x1);
    memcpy(x1 + P * D, x + (P + N) * D, (size_t)(N * D) * sizeof *x1);
    float *want1 = ref_run(w, P + N, x1, P + N);
    for (int64_t t = P; t < P + N; t++) {
        float y0[64], y1[64];
        assert_int_equal(attn_forward(b, cache, 1, &s0, &n1, x + t * D, y0), ATTN_OK);
        assert_int_equal(attn_forward(b, cache, 1, &s1, &n1, x1 + t * D, y1), ATTN_OK);
        assert_true(rel_err(y0, want0 + t * D, (size_t)D) < 1e-2);
        assert_true(rel_err(y1, want1 + t * D, (size_t)D) < 1e-2);
    }
    /* s1 rolled back to the prefix, then s0's tokens: s0's outputs */
    assert_int_equal(attn_seq_truncate(cache, s1, P), ATTN_OK);
    for (int64_t t = P; t < P + N; t++) {
        float y1[64];
        assert_int_equal(attn_forward(b, cache, 1, &s1, &n1, x + t * D, y1), ATTN_OK);
        assert_true(rel_err(y1, want0 + t * D, (size_t)D) < 1e-2);
    }
    attn_cache_free(cache);
    attn_block_free(b);
    attnc_jit_free(jit);
    free(x), free(x1), free(y), free(want0), free(want1);
    attn_weights_free(w);
    tmpdir_remove(dir);
}

/* JIT shards (attnc compile --shard) from the whole block's weights sum
 * to the whole block's output. */
static void jit_shards_sum_to_the_whole_block(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = mla_config(4, 64, 32, 32, 16, 8, 12);
    snprintf(c.name, sizeof c.name, "mla_tp");
    c.o_bias = true;
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 13, &w, NULL), ATTN_OK);
    int64_t S = 10, D = c.d_model;
    float *x = random_floats((size_t)(S * D), 14), *want = ref_run(w, S, x, S);
    float *sum = calloc((size_t)(S * D), sizeof *sum);
    const char *spec = write_spec(dir, &c, "tp.yaml");
    for (int i = 0; i < 2; i++) {
        attnc_options o = attnc_options_default();
        o.shard_index = i, o.shard_count = 2;
        attnc_jit *jit = jit_or_fail(spec, &o);
        float *y = jit_run(jit, w, S, x, 3, 2); /* the whole block's weights */
        for (int64_t k = 0; k < S * D; k++)
            sum[k] += y[k];
        free(y);
        attnc_jit_free(jit);
    }
    double e = rel_err(sum, want, (size_t)(S * D));
    if (!(e < 1e-4))
        fail_msg("shards vs whole: %g", e);
    free(x), free(want), free(sum);
    attn_weights_free(w);
    tmpdir_remove(dir);
}

/* The absorbed form (mla_absorb) gives what the expanded form gives, the
 * modeling file's way: prefill and decode, every cache dtype. */
static void absorbed_equals_expanded(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    const attn_dtype kvs[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16, ATTN_DTYPE_Q8_0};
    for (int i = 0; i < 4; i++) {
        attn_config c = mla_config(6, 96, i % 2 ? 32 : 0, 64, 24, 32, 20);
        snprintf(c.name, sizeof c.name, "mla_forms_%d", i);
        c.kv_dtype = kvs[i];
        c.sliding_window = i == 2 ? 9 : 0; /* keys before the window released */
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 11 + (uint64_t)i, &w, NULL), ATTN_OK);
        int64_t S = 23, D = c.d_model;
        float *x = random_floats((size_t)(S * D), 12 + (uint64_t)i);
        attnc_jit *ab = compile_config(dir, &c, NULL), *ex = compile_config(dir, &c, "mla_absorb");
        const attn_kernels *ka = attnc_jit_kernels(ab), *ke = attnc_jit_kernels(ex);
        bool has_query = false, has_keys = false;
        for (uint32_t k = 0; k < ka->n_steps; k++)
            has_query |= strstr(ka->steps[k].name, "_mla_query") != NULL;
        for (uint32_t k = 0; k < ke->n_steps; k++)
            has_keys |= strstr(ke->steps[k].name, "_mla_keys") != NULL;
        assert_true(has_query && has_keys);
        for (int64_t chunk = 1; chunk <= S; chunk += 22) { /* decode, then one shot */
            float *ya = jit_run(ab, w, S, x, chunk, 2), *ye = jit_run(ex, w, S, x, chunk, 2);
            double e = rel_err(ya, ye, (size_t)(S * D));
            if (!(e < 1e-5))
                fail_msg("cache %s, chunks of %lld: absorbed vs expanded %g",
                         attn_dtype_name(c.kv_dtype), (long long)chunk, e);
            free(ya), free(ye);
        }
        attnc_jit_free(ab), attnc_jit_free(ex);
        free(x);
        attn_weights_free(w);
    }
    tmpdir_remove(dir);
}

/* deepseek_v2_lite as shipped (16 heads of 128 + 64, latent 512): JIT ==
 * reference, a prefill of 16 tokens, then 3 more. */
static void shipped_spec_runs(void **state) {
    (void)state;
    attnc_jit *jit = jit_or_fail(spec_path("deepseek_v2_lite"), NULL);
    attn_config c = load_spec(spec_path("deepseek_v2_lite"));
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 5, &w, NULL), ATTN_OK);
    int64_t S = 19, D = c.d_model;
    float *x = random_floats((size_t)(S * D), 6), *want = ref_run(w, S, x, S);
    float *got = jit_run(jit, w, S, x, 16, 0);
    double e = rel_err(got, want, (size_t)(S * D));
    if (!(e < 1e-4))
        fail_msg("deepseek_v2_lite: %g", e);
    free(x), free(want), free(got);
    attn_weights_free(w);
    attnc_jit_free(jit);
}

/* Random weights (seed base + i) of sweep case i's config, which must pass
 * the config check. */
static attn_weights *case_weights(const attn_config *c, int i, uint64_t base) {
    attn_msg m;
    if (attn_config_check(c, &m) != ATTN_OK)
        fail_msg("case %d: %s", i, m.text);
    attn_weights *w;
    assert_int_equal(attn_weights_random(c, base + (uint64_t)i, &w, &m), ATTN_OK);
    return w;
}

/* Q8_0 and Q4_0 weights: the linears run the block formats' kernels
 * (activations f32, or q8_0 for their inputs), kv_b_proj stays f32
 * holding its rows' block values. JIT == reference over both forms and
 * three cache dtypes, one shot and in chunks; and a block loaded from a
 * bf16 file (kv_b_proj rounded through blocks at load) gives, bit for
 * bit, what the same file through attn_weights_load gives. */
static void quantized_weights(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t rs = 29;
    double worst[2] = {0, 0}; /* activations f32, q8_0 */
    for (int i = 0; i < 12; i++) {
        int64_t heads = i % 2 ? 4 : 2, vd = (i % 2 ? 8 : 16) * (1 + i % 3 / 2);
        int64_t nope = 1 + (int64_t)((rnd_unit(&rs) + 1) * 12);
        int64_t rope = 2 * (1 + (int64_t)((rnd_unit(&rs) + 1) * 4));
        attn_dtype kv = i % 3 == 0 ? ATTN_DTYPE_F16 : i % 3 == 1 ? ATTN_DTYPE_Q8_0 : ATTN_DTYPE_F32;
        if (kv == ATTN_DTYPE_Q8_0)
            rope = 32; /* the latent's blocks of 32 */
        attn_config c = mla_config(heads, i % 5 < 3 ? 64 : 96, i % 4 < 2 ? 32 : 0,
                                   i % 6 < 3 ? 32 : 64, nope, rope, vd);
        snprintf(c.name, sizeof c.name, "mla_quant_%d", i);
        c.dtype = i % 2 ? ATTN_DTYPE_Q4_0 : ATTN_DTYPE_Q8_0;
        c.activations = i % 4 >= 2 ? ATTN_DTYPE_Q8_0 : ATTN_DTYPE_F32;
        c.kv_dtype = kv;
        c.softcap = i % 5 == 4 ? 3.0 : 0;
        attn_weights *w = case_weights(&c, i, 500);
        int64_t S = 5 + i % 13, D = c.d_model, chunk = 1 + i % 4;
        float *x = random_floats((size_t)(S * D), 600 + (uint64_t)i);
        float *want = ref_run(w, S, x, S);
        attnc_jit *jit = compile_config(dir, &c, i % 3 == 2 ? "mla_absorb" : NULL);
        float *once = jit_run(jit, w, S, x, S, 2), *steps = jit_run(jit, w, S, x, chunk, 1);
        double e =
            fmax(rel_err(once, want, (size_t)(S * D)), rel_err(steps, want, (size_t)(S * D)));
        bool act = c.activations == ATTN_DTYPE_Q8_0;
        worst[act] = fmax(worst[act], e);
        /* the same weights on both sides; a q8_0 latent or a quantized
         * input element on a rounding boundary may land one step away
         * (jit_equals_reference, test_activations) */
        double tol = fmax(kv == ATTN_DTYPE_Q8_0 ? 1e-2 : kv_tolerance(kv), act ? 2e-3 : 0);
        if (!(e < tol))
            fail_msg("case %d (heads %lld, kv_lora %lld, q_lora %lld, weights %s, activations "
                     "%s, cache %s, %s): %g",
                     i, (long long)c.heads, (long long)c.mla_kv_lora_rank,
                     (long long)c.mla_q_lora_rank, attn_dtype_name(c.dtype),
                     attn_dtype_name(c.activations), attn_dtype_name(kv),
                     i % 3 == 2 ? "expanded" : "absorbed", e);
        if (i < 4) { /* through a file: kv_b_proj's rows as attn_weights_round makes them */
            const char *path = path_in(dir, "mla.safetensors");
            attn_weights *back;
            attn_msg m;
            assert_int_equal(attn_weights_save(w, path, ATTN_DTYPE_BF16, "", &m), ATTN_OK);
            assert_int_equal(attn_weights_load(&c, path, "", &back, &m), ATTN_OK);
            float *from_w = jit_run(jit, back, S, x, S, 2);
            float *from_file = jit_run_file(jit, back, path, S, x, S, S, 2);
            assert_memory_equal(from_w, from_file, (size_t)(S * D) * sizeof *from_w);
            free(from_w), free(from_file);
            attn_weights_free(back);
        }
        attnc_jit_free(jit);
        free(x), free(want), free(once), free(steps);
        attn_weights_free(w);
    }
    print_message("worst relative error: %.2g (activations f32), %.2g (q8_0)\n", worst[0],
                  worst[1]);
    tmpdir_remove(dir);
}

/* compute bf16: every product's operands rounded to bf16. The reference
 * expands the keys and values as the modeling file does (rounding the
 * latent and kv_b_proj, then k_nope and v as q.k's and p.v's operands);
 * the absorbed kernels round q's latent and the latent output instead,
 * and both forms meet the reference within BF16_TOL, as every compute
 * bf16 kernel does (its p rounded against the running max). One token
 * (p = 1) leaves the value side alone, where both forms round exactly as
 * the reference: there within 1e-5, so a rounding missing from the
 * latent, kv_b_proj or the latent output shows (2e-3). Random shapes
 * over the forms, f32/f16/bf16/q8_0 caches, f32/bf16/q8_0 weights,
 * latents and rope dims in vectors of 16 (AVX512-BF16 takes q.k and p.v
 * by vdpbf16ps: V's pairs of keys made from K's vectors, or key by key
 * in blocks of 8 tokens) or not; one shot on 2 threads, then chunks on 1
 * and 3 (bitwise equal); the rounding shows: each result is at least
 * 1e-3 from the f32 one. */
static void compute_bf16(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t rs = 31;
    const attn_dtype kvs[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16, ATTN_DTYPE_Q8_0};
    const attn_dtype ws[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_Q8_0};
    const char *forms[] = {NULL, "mla_absorb", "flash_attention"};
    double worst[2] = {0, 0}; /* expanded, absorbed */
    for (int i = 0; i < 12; i++) {
        int64_t heads = 2 + i % 3, vd = 8 * (1 + i % 2) * (heads == 3 ? 4 : 1);
        int64_t nope = 1 + (int64_t)((rnd_unit(&rs) + 1) * 12);
        int64_t rope = 2 * (1 + (int64_t)((rnd_unit(&rs) + 1) * 4));
        attn_dtype kv = kvs[i % 4], wt = ws[i % 3];
        if (kv == ATTN_DTYPE_Q8_0)
            rope = 32; /* the latent's blocks of 32 */
        else if (i % 5 < 3 ||
                 i % 3 == 0) /* latent, rope in vectors: vdpbf16ps pairs (AVX512-BF16) */
            rope = 16;
        attn_config c = mla_config(heads, i % 5 < 3 ? 64 : 96, i % 4 < 2 ? 32 : 0,
                                   i % 6 < 3 ? 32 : 64, nope, rope, vd);
        snprintf(c.name, sizeof c.name, "mla_bf16_%d", i);
        c.kv_dtype = kv;
        c.kv_block_tokens = i % 7 == 6 ? 8 : 16; /* 8: a tile's keys one by one */
        c.dtype = wt;
        c.softcap = i % 5 == 4 ? 3.0 : 0;
        attn_weights *w = case_weights(&c, i, 700);
        int64_t S = 5 + i % 13, D = c.d_model, chunk = 1 + i % 4;
        float *x = random_floats((size_t)(S * D), 800 + (uint64_t)i);
        float *f32 = ref_run(w, S, x, S);
        w->cfg.compute = ATTN_DTYPE_BF16;
        c.compute = ATTN_DTYPE_BF16;
        float *want = ref_run(w, S, x, S);
        const char *off = forms[i % 3];
        attnc_jit *jit = compile_config(dir, &c, off);
        float *once = jit_run(jit, w, S, x, S, 2), *steps = jit_run(jit, w, S, x, chunk, 1);
        float *steps3 = jit_run(jit, w, S, x, chunk, 3);
        assert_memory_equal(steps, steps3, (size_t)(S * D) * sizeof *steps);
        size_t n = (size_t)(S * D);
        double e = fmax(rel_err(once, want, n), rel_err(steps, want, n));
        double from_f32 = fmin(rel_err(once, f32, n), rel_err(steps, f32, n));
        bool expanded = off && !strcmp(off, "mla_absorb");
        worst[!expanded] = fmax(worst[!expanded], e);
        if (!(e < BF16_TOL) || !(from_f32 > 1e-3))
            fail_msg("case %d (heads %lld, kv_lora %lld, q_lora %lld, weights %s, cache %s, "
                     "without %s): %g from the bf16 reference, %g from the f32 one",
                     i, (long long)c.heads, (long long)c.mla_kv_lora_rank,
                     (long long)c.mla_q_lora_rank, attn_dtype_name(c.dtype), attn_dtype_name(kv),
                     off ? off : "nothing", e, from_f32);
        /* one token: p = 1, so q.k's roundings drop out and both forms
         * round the value side where the reference does (absorbed: the
         * latent output is the rounded latent, W_vb times it rounded as
         * the output projection's input; expanded: v = W_vb . c_kv
         * rounded as p.v's operand, then the same) */
        float *one = jit_run(jit, w, 1, x, 1, 2), *one_ref = ref_run(w, 1, x, 1);
        double e1 = rel_err(one, one_ref, (size_t)D);
        if (!(e1 < 1e-5))
            fail_msg("case %d, one token: %g from the bf16 reference", i, e1);
        free(one), free(one_ref);
        attnc_jit_free(jit);
        free(x), free(f32), free(want), free(once), free(steps), free(steps3);
        attn_weights_free(w);
    }
    print_message("worst relative error: %.2g (expanded), %.2g (absorbed)\n", worst[0], worst[1]);
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shipped_specs_derive_the_block),
        cmocka_unit_test(config_rules),
        cmocka_unit_test(reference_equals_absorbed_form_and_decode_equals_prefill),
        cmocka_unit_test(weights_under_their_names),
        cmocka_unit_test(shards_sum_to_the_whole_block),
        cmocka_unit_test(jit_equals_reference),
        cmocka_unit_test(absorbed_equals_expanded),
        cmocka_unit_test(jit_shards_sum_to_the_whole_block),
        cmocka_unit_test(forks_and_truncation),
        cmocka_unit_test(many_heads),
        cmocka_unit_test(long_decode_splits_keys),
        cmocka_unit_test(prefill_forms),
        cmocka_unit_test(shipped_spec_runs),
        cmocka_unit_test(quantized_weights),
        cmocka_unit_test(compute_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
