/* test_shard.c: head-sharded blocks (tensor parallelism). The rules of
 * attn_config_shard with their messages; over a randomized sweep of
 * configs (GQA, MHA, MQA split 1 way, ALiBi, sinks, q/k/v/o biases,
 * Whisper's k without bias, per-head QK-norm, softcap, windows, fused
 * layouts, cross-attention, bf16 weights), the reference engine's shards
 * sum to the whole block in prefill and in decode steps; JIT shards
 * (compiled with attnc_options.shard_*) loaded from the whole block's
 * attn_weights and from its checkpoint sum to the whole JIT block;
 * attn_weights_load of a shard (from a checkpoint in each layout of the
 * sweep, fused ones included) equals attn_weights_shard of the whole;
 * q8_0 and q4_0 weights cut at whole blocks;
 * block options naming another shard are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_kernels.h"
#include "attnc.h"
#include "support.h"

static void config_rules(void **state) {
    (void)state;
    attn_config c = config_small(8, 4, 16, 32), s;
    attn_msg m;
    assert_int_equal(attn_config_shard(&c, 1, 2, &s, &m), ATTN_OK);
    assert_int_equal(s.heads, 4);
    assert_int_equal(s.kv_groups, 2);
    assert_int_equal(s.shard_index, 1);
    assert_int_equal(s.shard_count, 2);
    assert_int_equal(attn_config_check(&s, &m), ATTN_OK);
    attn_config again;
    assert_int_equal(attn_config_shard(&s, 0, 2, &again, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "is shard 1 of 2 already"));
    assert_int_equal(attn_config_shard(&c, 0, 1, &s, &m), ATTN_OK); /* 1 way: the whole */
    assert_int_equal(s.heads, 8);
    assert_int_equal(s.shard_count, 0);
    assert_int_equal(attn_config_shard(&c, 0, 3, &s, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "the 4 K/V groups of 't' do not split into 3 shards"));
    assert_int_equal(attn_config_shard(&c, 2, 2, &s, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "shard 2/2: expected I/N with N >= 1 and 0 <= I < N"));
    assert_int_equal(attn_config_shard(&c, -1, 2, &s, &m), ATTN_E_INVALID);
    assert_int_equal(attn_config_shard(&c, 0, 0, &s, &m), ATTN_E_INVALID);
    assert_int_equal(attn_config_shard(NULL, 0, 1, &s, &m), ATTN_E_INVALID);
    attn_config mqa = config_small(8, 1, 16, 32);
    assert_int_equal(attn_config_shard(&mqa, 0, 2, &s, &m), ATTN_E_INVALID);
    /* a norm over the whole projection needs every head */
    attn_config olmo = c;
    olmo.qk_norm = ATTN_QK_NORM_ALL, olmo.qk_norm_weight = true, olmo.qk_norm_eps = 1e-6;
    assert_int_equal(attn_config_shard(&olmo, 0, 2, &s, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "cannot be sharded"));
    /* a block format needs whole blocks of 32 in each shard's o_proj rows */
    attn_config q8 = config_small(4, 4, 16, 32);
    q8.dtype = ATTN_DTYPE_Q8_0;
    assert_int_equal(attn_config_shard(&q8, 0, 2, &s, &m), ATTN_OK); /* 2 x 16 = 32 */
    assert_int_equal(attn_config_shard(&q8, 0, 4, &s, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "shard 0/4 of 't': dtype q8_0 quantizes blocks of 32"));
    /* a config with bad shard fields */
    s = c;
    s.shard_count = 2, s.shard_index = 2;
    assert_int_equal(attn_config_check(&s, &m), ATTN_E_INVALID);
}

/* Config i of the sweep, whole; *n its shard count. */
static attn_config shard_sweep_config(int i, uint64_t *rs, int64_t *n) {
    static const int64_t dims[] = {16, 32, 8, 64};
    int64_t groups = 1 + (int64_t)((rnd_unit(rs) + 1) * 2) % 4; /* 1..4 */
    *n = i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : 4;
    groups *= *n;
    int64_t per = i % 4 == 0 ? 1 : 1 + (int64_t)((rnd_unit(rs) + 1) * 2) % 3;
    if (i % 16 == 6) /* NeoX's layout: a K/V head per query head */
        per = 1;
    int64_t hd = dims[i % 4], d_model = 16 + 8 * (int64_t)((rnd_unit(rs) + 1) * 4);
    attn_config c = config_small(groups * per, groups, hd, d_model);
    snprintf(c.name, sizeof c.name, "shard_%d", i);
    c.kv_max_tokens = 256;
    if (i % 5 == 1) {
        c.alibi = true;
    } else {
        c.rope_style = i % 2 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
        c.rope_base = 10000, c.rotary_dim = hd;
    }
    c.sinks = i % 4 == 2;
    c.qkv_bias = i % 3 != 0;
    c.no_k_bias = c.qkv_bias && i % 7 == 3;
    c.o_bias = i % 2 == 0;
    if (i % 6 == 5)
        c.qk_norm = ATTN_QK_NORM_HEAD, c.qk_norm_weight = true, c.qk_norm_eps = 1e-6;
    if (i % 5 == 3)
        c.softcap = 20;
    if (i % 7 == 4)
        c.sliding_window = 9;
    if (i % 8 == 6 && !c.no_k_bias) /* fused q/k/v rows */
        c.weights_layout = i % 16 == 6    ? ATTN_LAYOUT_NEOX
                           : i % 16 == 14 ? ATTN_LAYOUT_FALCON
                                          : ATTN_LAYOUT_PHI3;
    if (i % 9 == 7) { /* cross-attention: k and v from the memory */
        c.causal = false, c.rope_style = ATTN_ROPE_NONE, c.rotary_dim = 0, c.alibi = false;
        c.sliding_window = 0, c.weights_layout = ATTN_LAYOUT_LLAMA;
        c.memory_dim = d_model + 8;
    }
    if (i % 5 == 4)
        c.dtype = ATTN_DTYPE_BF16;
    if (i % 4 == 1 && c.memory_dim == 0) { /* expressions read the head among all */
        snprintf(c.score_mod, sizeof c.score_mod, "score - 0.05 * (h + 1) * (q - kv)");
        snprintf(c.mask_mod, sizeof c.mask_mod, "h %% 3 == 0 or g == 1 or q - kv < 4");
    }
    attn_msg m;
    if (attn_config_check(&c, &m) != ATTN_OK)
        fail_msg("sweep config %d: %s", i, m.text);
    return c;
}

enum { SWEEP = 36, PREFILL = 11, STEPS = 3, MEM_ROWS = 6 };

/* Each shard's reference forward of prefill then decode steps; y[step]
 * the sum over shards. */
static void ref_run(const attn_weights *w, const float *x, const float *mem, float *y) {
    const attn_config *c = &w->cfg;
    attn_ref *r;
    attn_msg m;
    if (attn_ref_new(w, 64, &r, &m) != ATTN_OK)
        fail_msg("attn_ref_new: %s", m.text);
    if (c->memory_dim > 0 && attn_ref_set_memory(r, MEM_ROWS, mem, &m) != ATTN_OK)
        fail_msg("set_memory: %s", m.text);
    int64_t D = c->d_model;
    if (attn_ref_forward(r, PREFILL, x, y, &m) != ATTN_OK)
        fail_msg("attn_ref_forward: %s", m.text);
    for (int s = 0; s < STEPS; s++)
        if (attn_ref_forward(r, 1, x + (PREFILL + s) * D, y + (PREFILL + s) * D, &m) != ATTN_OK)
            fail_msg("attn_ref_forward: %s", m.text);
    attn_ref_free(r);
}

/* attn_weights_load of shard sc from the whole block's checkpoint ckpt
 * (in its layout: fused ones split first) equals ws, attn_weights_shard's. */
static void assert_loaded_equals(const attn_config *sc, const char *ckpt, const attn_weights *ws) {
    attn_weights *lw;
    attn_msg m;
    if (attn_weights_load(sc, ckpt, NULL, &lw, &m) != ATTN_OK)
        fail_msg("attn_weights_load of a shard: %s", m.text);
    int64_t q = sc->heads * sc->head_dim, kv = sc->kv_groups * sc->head_dim, D = sc->d_model;
    int64_t in = sc->memory_dim > 0 ? sc->memory_dim : D;
    const struct {
        const float *a, *b;
        int64_t n;
    } t[] = {{lw->wq, ws->wq, q * D},
             {lw->wk, ws->wk, kv * in},
             {lw->wv, ws->wv, kv * in},
             {lw->wo, ws->wo, D * q},
             {lw->bq, ws->bq, sc->qkv_bias ? q : 0},
             {lw->bk, ws->bk, sc->qkv_bias && !sc->no_k_bias ? kv : 0},
             {lw->bv, ws->bv, sc->qkv_bias ? kv : 0},
             {lw->bo, ws->bo, sc->o_bias ? D : 0},
             {lw->q_norm, ws->q_norm, sc->qk_norm_weight ? sc->head_dim : 0},
             {lw->k_norm, ws->k_norm, sc->qk_norm_weight ? sc->head_dim : 0},
             {lw->sinks, ws->sinks, sc->sinks ? sc->heads : 0}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].n)
            assert_memory_equal(t[i].a, t[i].b, (size_t)t[i].n * sizeof(float));
    attn_weights_free(lw);
}

static void reference_shards_sum_to_whole(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    const char *ckpt = path_in(dir, "w.safetensors");
    uint64_t rs = 12345;
    for (int i = 0; i < SWEEP; i++) {
        int64_t n;
        attn_config c = shard_sweep_config(i, &rs, &n);
        attn_weights *w, *ws;
        assert_int_equal(attn_weights_random(&c, 100 + (uint64_t)i, &w, NULL), ATTN_OK);
        int64_t D = c.d_model, T = PREFILL + STEPS;
        float *x = random_floats((size_t)(T * D), 7 + (uint64_t)i);
        float *mem = random_floats((size_t)(MEM_ROWS * (c.memory_dim ? c.memory_dim : 1)), 9);
        float *whole = calloc((size_t)(T * D), sizeof(float));
        float *sum = calloc((size_t)(T * D), sizeof(float));
        float *part = calloc((size_t)(T * D), sizeof(float));
        ref_run(w, x, mem, whole);
        assert_int_equal(attn_weights_save(w, ckpt, ATTN_DTYPE_F32, NULL, NULL), ATTN_OK);
        for (int64_t k = 0; k < n; k++) {
            attn_msg m;
            if (attn_weights_shard(w, k, n, &ws, &m) != ATTN_OK)
                fail_msg("config %d shard %lld/%lld: %s", i, (long long)k, (long long)n, m.text);
            assert_int_equal(ws->cfg.heads * n, c.heads);
            assert_loaded_equals(&ws->cfg, ckpt, ws);
            ref_run(ws, x, mem, part);
            for (int64_t e = 0; e < T * D; e++)
                sum[e] += part[e];
            attn_weights_free(ws);
        }
        double err = rel_err(sum, whole, (size_t)(T * D));
        if (!(err < 1e-5))
            fail_msg("config %d (%lld heads, %lld groups, %lld shards): shards' sum off by %g", i,
                     (long long)c.heads, (long long)c.kv_groups, (long long)n, err);
        free(x), free(mem), free(whole), free(sum), free(part);
        attn_weights_free(w);
    }
    tmpdir_remove(dir);
}

typedef struct jit_block {
    attnc_jit *jit;
    attn_block *b;
    attn_cache *c;
    int32_t seq;
} jit_block;

/* Shard k of n (0 of 0: the whole block) of the spec at path, its
 * weights from w (the whole block's) or, with ckpt, from that file. */
static jit_block jit_open(const char *path, int64_t k, int64_t n, const attn_weights *w,
                          const char *ckpt) {
    jit_block j = {0};
    attnc_options o = attnc_options_default();
    o.shard_index = k, o.shard_count = n;
    j.jit = jit_or_fail(path, &o);
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = 2;
    bo.shard_index = k, bo.shard_count = n;
    assert_int_equal(attn_block_new(attnc_jit_kernels(j.jit), &bo, &j.b), ATTN_OK);
    attn_status st = ckpt ? attn_block_load(j.b, ckpt, NULL, 0) : attn_block_set_weights(j.b, w);
    if (st != ATTN_OK)
        fail_msg("loading shard %lld/%lld: %s", (long long)k, (long long)n, attn_block_error(j.b));
    assert_int_equal(attn_cache_new(j.b, 64, &j.c), ATTN_OK);
    assert_int_equal(attn_seq_new(j.c, &j.seq), ATTN_OK);
    return j;
}

static void jit_forward(jit_block *j, int64_t n, const float *x, float *y) {
    int32_t nt = (int32_t)n;
    if (attn_forward(j->b, j->c, 1, &j->seq, &nt, x, y) != ATTN_OK)
        fail_msg("attn_forward: %s", attn_cache_error(j->c));
}

static void jit_close(jit_block *j) {
    attn_cache_free(j->c);
    attn_block_free(j->b);
    attnc_jit_free(j->jit);
}

/* Prefill then decode steps through shards 0..n-1 of the spec at path
 * (n 0: the whole block), y the sum. */
static void jit_run(const char *path, int64_t n, const attn_weights *w, const char *ckpt,
                    const float *x, float *y) {
    int64_t D = w->cfg.d_model, T = PREFILL + STEPS;
    float *part = calloc((size_t)(T * D), sizeof(float));
    memset(y, 0, (size_t)(T * D) * sizeof(float));
    for (int64_t k = 0; k < (n ? n : 1); k++) {
        jit_block j = jit_open(path, k, n, w, ckpt);
        jit_forward(&j, PREFILL, x, part);
        for (int s = 0; s < STEPS; s++)
            jit_forward(&j, 1, x + (PREFILL + s) * D, part + (PREFILL + s) * D);
        for (int64_t e = 0; e < T * D; e++)
            y[e] += part[e];
        jit_close(&j);
    }
    free(part);
}

static void jit_shards_sum_to_whole(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t rs = 777;
    int done = 0;
    for (int i = 0; i < SWEEP && done < 8; i++) {
        int64_t n;
        attn_config c = shard_sweep_config(i, &rs, &n);
        if (n == 1 || c.memory_dim > 0)
            continue; /* sharded self-attention (cross: the reference sweep) */
        done++;
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 200 + (uint64_t)i, &w, NULL), ATTN_OK);
        const char *path = write_spec(dir, &c, "whole.yaml");
        int64_t D = c.d_model, T = PREFILL + STEPS;
        float *x = random_floats((size_t)(T * D), 11 + (uint64_t)i);
        float *whole = malloc((size_t)(T * D) * sizeof(float));
        float *sum = malloc((size_t)(T * D) * sizeof(float));
        jit_run(path, 0, w, NULL, x, whole);
        jit_run(path, n, w, NULL, x, sum);
        double err = rel_err(sum, whole, (size_t)(T * D));
        if (!(err < 1e-4))
            fail_msg("config %d, %lld shards: JIT shards' sum off by %g", i, (long long)n, err);
        /* from the whole block's checkpoint: the same bits */
        const char *ckpt = path_in(dir, "w.safetensors");
        assert_int_equal(attn_weights_save(w, ckpt, ATTN_DTYPE_F32, NULL, NULL), ATTN_OK);
        float *loaded = malloc((size_t)(T * D) * sizeof(float));
        jit_run(path, n, w, ckpt, x, loaded);
        assert_memory_equal(loaded, sum, (size_t)(T * D) * sizeof(float));
        /* attn_weights_load of a shard: attn_weights_shard's slices */
        attn_config sc;
        attn_weights *lw, *sw;
        assert_int_equal(attn_config_shard(&c, n - 1, n, &sc, NULL), ATTN_OK);
        attn_msg m;
        if (attn_weights_load(&sc, ckpt, NULL, &lw, &m) != ATTN_OK)
            fail_msg("attn_weights_load shard: %s", m.text);
        assert_int_equal(attn_weights_shard(w, n - 1, n, &sw, NULL), ATTN_OK);
        assert_memory_equal(lw->wq, sw->wq, (size_t)(sc.heads * sc.head_dim * D) * sizeof(float));
        assert_memory_equal(lw->wo, sw->wo, (size_t)(sc.heads * sc.head_dim * D) * sizeof(float));
        if (c.o_bias)
            for (int64_t e = 0; e < D; e++)
                assert_true(sw->bo[e] == 0); /* the o bias: shard 0's only */
        attn_weights_free(lw);
        attn_weights_free(sw);
        free(x), free(whole), free(sum), free(loaded);
        attn_weights_free(w);
    }
    assert_true(done >= 6);
    tmpdir_remove(dir);
}

/* ggml's block formats: o_proj's columns cut at whole blocks of 32, from
 * attn_weights and from a checkpoint stored in the format. */
static void block_formats_shard(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    const attn_dtype dts[] = {ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q4_0};
    for (int i = 0; i < 2; i++) {
        attn_config c = config_small(8, 4, 32, 64); /* a shard of 2: 4 x 32 columns */
        c.dtype = dts[i], c.o_bias = true, c.qkv_bias = true;
        c.rope_style = ATTN_ROPE_HALF, c.rope_base = 10000, c.rotary_dim = 32;
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 300 + (uint64_t)i, &w, NULL), ATTN_OK);
        const char *path = write_spec(dir, &c, "q.yaml");
        const char *ckpt = path_in(dir, "q.safetensors");
        assert_int_equal(attn_weights_save(w, ckpt, c.dtype, NULL, NULL), ATTN_OK);
        int64_t D = c.d_model, T = PREFILL + STEPS;
        float *x = random_floats((size_t)(T * D), 5);
        float *whole = malloc((size_t)(T * D) * sizeof(float));
        float *sum = malloc((size_t)(T * D) * sizeof(float));
        float *loaded = malloc((size_t)(T * D) * sizeof(float));
        jit_run(path, 0, w, NULL, x, whole);
        jit_run(path, 2, w, NULL, x, sum);
        jit_run(path, 2, w, ckpt, x, loaded);
        double err = rel_err(sum, whole, (size_t)(T * D));
        if (!(err < 1e-4))
            fail_msg("%s: shards' sum off by %g", attn_dtype_name(c.dtype), err);
        assert_memory_equal(loaded, sum, (size_t)(T * D) * sizeof(float));
        free(x), free(whole), free(sum), free(loaded);
        attn_weights_free(w);
    }
    tmpdir_remove(dir);
}

static void block_options_name_the_shard(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = config_small(4, 2, 16, 32);
    const char *path = write_spec(dir, &c, "b.yaml");
    attnc_options o = attnc_options_default();
    o.shard_index = 1, o.shard_count = 2;
    attnc_jit *jit = jit_or_fail(path, &o);
    const attn_kernels *k = attnc_jit_kernels(jit);
    assert_int_equal(k->config.heads, 2);
    assert_int_equal(k->config.shard_index, 1);
    attn_block_options bo = attn_block_options_default();
    attn_block *b = NULL;
    bo.shard_index = 0, bo.shard_count = 2; /* another shard */
    assert_int_equal(attn_block_new(k, &bo, &b), ATTN_E_INVALID);
    assert_null(b);
    bo.shard_index = 0, bo.shard_count = 1; /* the whole block */
    assert_int_equal(attn_block_new(k, &bo, &b), ATTN_E_INVALID);
    bo.shard_index = 1, bo.shard_count = 2;
    assert_int_equal(attn_block_new(k, &bo, &b), ATTN_OK);
    attn_block_free(b);
    bo = attn_block_options_default(); /* 0 of 0: the table's own */
    assert_int_equal(attn_block_new(k, &bo, &b), ATTN_OK);
    /* weights of another config */
    attn_config other = config_small(4, 4, 16, 32);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&other, 1, &w, NULL), ATTN_OK);
    assert_int_equal(attn_block_set_weights(b, w), ATTN_E_INVALID);
    assert_non_null(strstr(attn_block_error(b), "another configuration"));
    attn_weights_free(w);
    attn_block_free(b);
    attnc_jit_free(jit);
    /* a spec that does not split so: a clear compile error */
    o.shard_index = 0, o.shard_count = 4;
    attnc_ctx *ctx = attnc_ctx_new();
    assert_int_equal(attnc_jit_compile_file(ctx, path, &o, &jit), ATTNC_E_SPEC);
    char text[1024];
    attnc_diag_text(ctx, text, sizeof text);
    assert_non_null(strstr(text, "--shard 0/4: shard 0/4: the 2 K/V groups of 't' do not split"));
    attnc_ctx_free(ctx);
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_rules),
        cmocka_unit_test(reference_shards_sum_to_whole),
        cmocka_unit_test(jit_shards_sum_to_whole),
        cmocka_unit_test(block_formats_shard),
        cmocka_unit_test(block_options_name_the_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
