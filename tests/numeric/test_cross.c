/* test_cross.c: cross-attention (spec cross_attention). The reference
 * against a case computed by hand; JIT kernels against the reference over
 * a randomized sweep (memory rows 1..300, chunked decoding, f16, bf16 and
 * q8_0 caches, bf16 weights, GQA, biases with and without K's, QK-norm,
 * softcap, sinks);
 * forks sharing a memory; truncation keeping it; every error of
 * attn_seq_set_memory and of a forward without memory, with its message
 * and nothing changed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_kernels.h"
#include "attnc.h"
#include "support.h"

static attnc_jit *compile_config(const char *dir, const attn_config *c) {
    return jit_or_fail(write_spec(dir, c, "cross.yaml"), NULL);
}

/* A cross-attention config: x of width d_model, memory of width mem. */
static attn_config cross_config(int64_t heads, int64_t kv, int64_t hd, int64_t d_model,
                                int64_t mem) {
    attn_config c = config_small(heads, kv, hd, d_model);
    snprintf(c.name, sizeof c.name, "cross");
    c.causal = false;
    c.rope_style = ATTN_ROPE_NONE;
    c.memory_dim = mem;
    c.kv_max_tokens = 512;
    return c;
}

/* The reference by hand: one head of 2 dims, q = x, k = v = memory (all
 * weights identity, memory_dim 2), scale 1, memory rows (1, 0) and
 * (0, 1): for x = (a, b) the weights are softmax(a, b) and y = the same
 * pair (o_proj identity). A second token sees the same two rows. */
static void reference_by_hand(void **state) {
    (void)state;
    attn_config c = cross_config(1, 1, 2, 2, 2);
    c.scale = 1, c.scale_auto = false;
    attn_weights *w;
    assert_int_equal(attn_weights_new(&c, &w, NULL), ATTN_OK);
    float *mats[4] = {w->wq, w->wk, w->wv, w->wo};
    for (int i = 0; i < 4; i++)
        mats[i][0] = mats[i][3] = 1;
    attn_ref *r;
    assert_int_equal(attn_ref_new(w, 8, &r, NULL), ATTN_OK);
    const float x[4] = {1, 0, 0.5f, 2}, memory[4] = {1, 0, 0, 1};
    float y[4];
    attn_msg m;
    assert_int_equal(attn_ref_forward(r, 1, x, y, &m), ATTN_E_INVALID); /* no memory */
    assert_int_equal(attn_ref_set_memory(r, 2, memory, &m), ATTN_OK);
    assert_int_equal(attn_ref_forward(r, 2, x, y, &m), ATTN_OK);
    double p0 = 1 / (1 + exp(-1.0)), p1 = 1 / (1 + exp(-1.5));
    assert_float_equal(y[0], p0, 1e-6);
    assert_float_equal(y[1], 1 - p0, 1e-6);
    assert_float_equal(y[2], 1 - p1, 1e-6); /* scores 0.5, 2 */
    assert_float_equal(y[3], p1, 1e-6);
    assert_int_equal(attn_ref_len(r), 2);
    /* the memory is fixed once tokens came */
    assert_int_equal(attn_ref_set_memory(r, 2, memory, &m), ATTN_E_INVALID);
    attn_ref_free(r);
    attn_weights_free(w);
}

typedef struct runner {
    attn_block *b;
    attn_cache *c;
} runner;

static runner runner_new(const attnc_jit *jit, const attn_weights *w, int64_t capacity,
                         int threads) {
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = threads;
    runner r;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), &bo, &r.b), ATTN_OK);
    assert_int_equal(attn_block_set_weights(r.b, w), ATTN_OK);
    assert_int_equal(attn_cache_new(r.b, capacity, &r.c), ATTN_OK);
    return r;
}

static void runner_free(runner *r) {
    attn_cache_free(r->c);
    attn_block_free(r->b);
}

static void forward(runner *r, int32_t s, int64_t n, const float *x, float *y) {
    int32_t nt = (int32_t)n;
    if (attn_forward(r->b, r->c, 1, &s, &nt, x, y) != ATTN_OK)
        fail_msg("attn_forward: %s", attn_cache_error(r->c));
}

/* A random cross-attention config of the sweep, with its memory rows,
 * tokens and chunk. */
static attn_config cross_sweep_config(int i, uint64_t *s, int64_t *rows, int64_t *T,
                                      int64_t *chunk) {
    static const int64_t dims[] = {32, 40, 64, 128, 16};
    int64_t heads = 1 + (int64_t)((rnd_unit(s) + 1) * 6) % 12;
    int64_t kv = heads % 2 == 0 && i % 2 ? heads / 2 : heads;
    int64_t hd = dims[i % 5];
    int64_t d_model = 8 + (int64_t)((rnd_unit(s) + 1) * 40);
    int64_t mem = i % 3 == 0 ? d_model : 8 + (int64_t)((rnd_unit(s) + 1) * 60);
    attn_config c = cross_config(heads, kv, hd, d_model, mem);
    snprintf(c.name, sizeof c.name, "cross_%d", i);
    c.qkv_bias = i % 3 != 2;
    c.no_k_bias = i % 3 == 1; /* Whisper's */
    c.o_bias = i % 2 == 0;
    if (i % 4 == 3) { /* mllama's */
        c.qk_norm = ATTN_QK_NORM_HEAD, c.qk_norm_weight = true, c.qk_norm_eps = 1e-5;
    }
    if (i % 5 == 2)
        c.softcap = 10 + i;
    c.sinks = i % 6 == 4;
    static const attn_dtype kvs[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16,
                                     ATTN_DTYPE_Q8_0};
    c.kv_dtype = kvs[i % 4];
    if (c.kv_dtype == ATTN_DTYPE_Q8_0 && hd % 32)
        c.kv_dtype = ATTN_DTYPE_F16;
    if (c.kv_dtype == ATTN_DTYPE_Q8_0 && i % 12 != 7) /* q quantized for q.k, as ggml's */
        c.activations = ATTN_DTYPE_Q8_0;
    if (i % 24 == 23) /* and q.k exact under compute bf16 */
        c.compute = ATTN_DTYPE_BF16;
    if (i % 5 == 3) /* narrow weights, widened exactly in the kernels */
        c.dtype = ATTN_DTYPE_BF16;
    static const int64_t blocks[] = {16, 7, 32, 1};
    c.kv_block_tokens = blocks[(i / 2) % 4];
    /* memory rows 1..300: one row, whole tiles, ragged */
    static const int64_t some[] = {1, 300, 16, 33, 5, 128, 2, 257};
    *rows = i < 8 ? some[i] : 1 + (int64_t)((rnd_unit(s) + 1) * 150);
    *T = 1 + (int64_t)((rnd_unit(s) + 1) * 20);
    /* decode token by token (the split kernel), one prefill (flash), chunks */
    *chunk = i % 2 ? 1 : i % 4 == 0 ? *T : 2 + i % 9;
    if (i % 16 == 15) /* a q8_0 cache's prefill (flash) */
        *chunk = *T;
    return c;
}

static void jit_equals_reference_over_sweep(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    uint64_t s = 7;
    int n = getenv("ATTNC_SWEEP") ? atoi(getenv("ATTNC_SWEEP")) : 24;
    for (int i = 0; i < n; i++) {
        int64_t rows, T, chunk;
        attn_config c = cross_sweep_config(i, &s, &rows, &T, &chunk);
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("sweep %d: %s", i, m.text);
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, (uint64_t)i, &w, NULL), ATTN_OK);
        float *memory = random_floats((size_t)(rows * c.memory_dim), 100 + (uint64_t)i);
        float *x = random_floats((size_t)(T * c.d_model), 200 + (uint64_t)i);
        float *y = calloc((size_t)(T * c.d_model), sizeof *y);
        float *want = calloc((size_t)(T * c.d_model), sizeof *want);
        attn_ref *r;
        assert_int_equal(attn_ref_new(w, rows, &r, NULL), ATTN_OK);
        assert_int_equal(attn_ref_set_memory(r, rows, memory, NULL), ATTN_OK);
        assert_int_equal(attn_ref_forward(r, T, x, want, NULL), ATTN_OK);
        attnc_jit *jit = compile_config(dir, &c);
        runner k = runner_new(jit, w, rows, 1 + i % 2);
        int32_t sq;
        assert_int_equal(attn_seq_new(k.c, &sq), ATTN_OK);
        assert_int_equal(attn_seq_set_memory(k.c, sq, rows, memory), ATTN_OK);
        for (int64_t at = 0; at < T; at += chunk) {
            int64_t len = T - at < chunk ? T - at : chunk;
            forward(&k, sq, len, x + at * c.d_model, y + at * c.d_model);
        }
        assert_int_equal(attn_seq_len(k.c, sq), T);
        double e = rel_err(y, want, (size_t)(T * c.d_model));
        double tol = c.compute == ATTN_DTYPE_BF16 ? BF16_TOL : kv_tolerance(c.kv_dtype);
        if (getenv("ATTNC_VERBOSE"))
            print_message("sweep %d (kv %s, activations %s, compute %s, chunk %lld): %g\n", i,
                          attn_dtype_name(c.kv_dtype), attn_dtype_name(c.activations),
                          attn_dtype_name(c.compute), (long long)chunk, e);
        if (!(e <= tol))
            fail_msg("sweep %d (heads %lld/%lld hd %lld d_model %lld memory %lld x %lld rows, "
                     "%lld tokens by %lld, k bias %d, qk_norm %d, softcap %g, sinks %d, kv %s, "
                     "blocks of %lld): relative error %g",
                     i, (long long)c.heads, (long long)c.kv_groups, (long long)c.head_dim,
                     (long long)c.d_model, (long long)c.memory_dim, (long long)rows, (long long)T,
                     (long long)chunk, c.qkv_bias && !c.no_k_bias, c.qk_norm, c.softcap, c.sinks,
                     attn_dtype_name(c.kv_dtype), (long long)c.kv_block_tokens, e);
        runner_free(&k);
        attnc_jit_free(jit);
        attn_ref_free(r);
        attn_weights_free(w);
        free(memory), free(x), free(y), free(want);
    }
    tmpdir_remove(dir);
}

/* Whisper's shape, scaled down: forks share the memory's blocks (none are
 * taken by the fork or by tokens), each branch decodes on its own and
 * equals the reference run with its tokens; truncating keeps the memory;
 * replacing the memory before the first forward equals setting it once. */
static void forks_share_and_truncate_keeps_the_memory(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = cross_config(4, 4, 32, 64, 48);
    c.qkv_bias = true, c.no_k_bias = true, c.o_bias = true;
    c.kv_dtype = ATTN_DTYPE_F16;
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 3, &w, NULL), ATTN_OK);
    int64_t rows = 70, D = c.d_model;
    float *memory = random_floats((size_t)(rows * c.memory_dim), 1);
    float *other = random_floats((size_t)(rows * c.memory_dim), 2);
    float *x = random_floats((size_t)(12 * D), 3);
    float y[12 * 64], want[12 * 64];
    attnc_jit *jit = compile_config(dir, &c);
    runner k = runner_new(jit, w, 2 * rows, 2);
    int32_t a, b;
    assert_int_equal(attn_seq_new(k.c, &a), ATTN_OK);
    /* replaced before any forward: only the second counts */
    assert_int_equal(attn_seq_set_memory(k.c, a, rows, other), ATTN_OK);
    assert_int_equal(attn_seq_set_memory(k.c, a, rows, memory), ATTN_OK);
    int64_t used = attn_cache_get_stats(k.c).blocks_used;
    assert_int_equal(used, (rows + c.kv_block_tokens - 1) / c.kv_block_tokens);
    forward(&k, a, 4, x, y);
    assert_int_equal(attn_seq_fork(k.c, a, &b), ATTN_OK);
    forward(&k, a, 1, x + 4 * D, y + 4 * D); /* a: tokens 0-3, 4 */
    forward(&k, b, 3, x + 5 * D, y + 5 * D); /* b: tokens 0-3, 5-7 */
    assert_int_equal(attn_cache_get_stats(k.c).blocks_used, used);
    attn_ref *r;
    assert_int_equal(attn_ref_new(w, rows, &r, NULL), ATTN_OK);
    assert_int_equal(attn_ref_set_memory(r, rows, memory, NULL), ATTN_OK);
    /* every token sees the same memory: each output depends on its x only */
    assert_int_equal(attn_ref_forward(r, 8, x, want, NULL), ATTN_OK);
    assert_true(rel_err(y, want, (size_t)(8 * D)) <= kv_tolerance(c.kv_dtype));
    /* a's memory outlives a; truncating b to 0 keeps it */
    assert_int_equal(attn_seq_free(k.c, a), ATTN_OK);
    assert_int_equal(attn_cache_get_stats(k.c).blocks_used, used);
    assert_int_equal(attn_seq_truncate(k.c, b, 0), ATTN_OK);
    assert_int_equal(attn_seq_len(k.c, b), 0);
    forward(&k, b, 4, x + 8 * D, y + 8 * D);
    assert_int_equal(attn_ref_truncate(r, 0), ATTN_OK);
    assert_int_equal(attn_ref_forward(r, 4, x + 8 * D, want + 8 * D, NULL), ATTN_OK);
    assert_true(rel_err(y + 8 * D, want + 8 * D, (size_t)(4 * D)) <= kv_tolerance(c.kv_dtype));
    assert_int_equal(attn_seq_free(k.c, b), ATTN_OK);
    assert_int_equal(attn_cache_get_stats(k.c).blocks_used, 0);
    runner_free(&k);
    attnc_jit_free(jit);
    attn_ref_free(r);
    attn_weights_free(w);
    free(memory), free(other), free(x);
    tmpdir_remove(dir);
}

static void assert_error(attn_status got, attn_status want, const attn_cache *c, const char *has) {
    if (got != want || !strstr(attn_cache_error(c), has))
        fail_msg("status %d (want %d), message \"%s\" (want \"%s\")", got, want,
                 attn_cache_error(c), has);
}

static void errors_say_what_and_change_nothing(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attn_config c = cross_config(2, 1, 16, 32, 24);
    c.kv_block_tokens = 8;
    c.kv_max_tokens = 64;
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 1, &w, NULL), ATTN_OK);
    float *memory = random_floats(64 * 24, 1), *x = random_floats(4 * 32, 2), y[4 * 32];
    attnc_jit *jit = compile_config(dir, &c);
    runner k = runner_new(jit, w, 40, 1); /* 5 blocks */
    int32_t s, t, one = 1;
    assert_int_equal(attn_seq_new(k.c, &s), ATTN_OK);
    assert_error(attn_forward(k.b, k.c, 1, &s, &one, x, y), ATTN_E_INVALID, k.c, "has no memory");
    assert_int_equal(attn_seq_len(k.c, s), 0);
    assert_error(attn_seq_set_memory(k.c, s, 0, memory), ATTN_E_INVALID, k.c,
                 "1 to kv_cache.max_tokens (64)");
    assert_error(attn_seq_set_memory(k.c, s, 65, memory), ATTN_E_INVALID, k.c, "65 rows");
    assert_error(attn_seq_set_memory(k.c, s, 4, NULL), ATTN_E_INVALID, k.c, "memory is NULL");
    assert_error(attn_seq_set_memory(k.c, 9, 4, memory), ATTN_E_INVALID, k.c, "unknown sequence 9");
    assert_error(attn_seq_set_memory(k.c, s, 41, memory), ATTN_E_CAPACITY, k.c,
                 "6 blocks, 5 are free");
    assert_int_equal(attn_cache_get_stats(k.c).blocks_used, 0);
    assert_int_equal(attn_seq_set_memory(k.c, s, 40, memory), ATTN_OK); /* all 5 blocks */
    assert_int_equal(attn_seq_set_memory(k.c, s, 33, memory), ATTN_OK); /* its own come back */
    assert_int_equal(attn_seq_new(k.c, &t), ATTN_OK);
    assert_error(attn_seq_set_memory(k.c, t, 9, memory), ATTN_E_CAPACITY, k.c,
                 "2 blocks, 0 are free");
    assert_int_equal(attn_seq_set_memory(k.c, s, 5, memory), ATTN_OK);
    assert_int_equal(attn_forward(k.b, k.c, 1, &s, &one, x, y), ATTN_OK);
    assert_error(attn_seq_set_memory(k.c, s, 5, memory), ATTN_E_INVALID, k.c,
                 "already attends to a memory of 5 rows over 1 tokens");
    assert_int_equal(attn_seq_len(k.c, s), 1);
    /* with its tokens truncated away, the memory may be replaced */
    assert_int_equal(attn_seq_truncate(k.c, s, 0), ATTN_OK);
    assert_int_equal(attn_seq_set_memory(k.c, s, 8, memory), ATTN_OK);
    /* a batch with one sequence lacking memory runs none of it */
    int32_t both[2] = {s, t}, n2[2] = {1, 1};
    assert_error(attn_forward(k.b, k.c, 2, both, n2, x, y), ATTN_E_INVALID, k.c,
                 "sequence 1 has no memory");
    assert_int_equal(attn_seq_len(k.c, s), 0);
    /* no prefix cache: the blocks hold a memory, not a prefix of tokens */
    uint64_t key = 1;
    int64_t got;
    assert_error(attn_cache_publish(k.c, s, 0, &key), ATTN_E_INVALID, k.c, "is cross-attention");
    assert_error(attn_seq_from_prefix(k.c, 1, &key, &t, &got), ATTN_E_INVALID, k.c,
                 "is cross-attention");
    runner_free(&k);
    attnc_jit_free(jit);

    /* a self-attention block has no memory to set */
    attn_config sc = config_small(2, 1, 16, 32);
    attn_weights *sw;
    assert_int_equal(attn_weights_random(&sc, 1, &sw, NULL), ATTN_OK);
    jit = compile_config(dir, &sc);
    k = runner_new(jit, sw, 16, 1);
    assert_int_equal(attn_seq_new(k.c, &s), ATTN_OK);
    assert_error(attn_seq_set_memory(k.c, s, 4, memory), ATTN_E_INVALID, k.c,
                 "is self-attention (its spec has no cross_attention)");
    assert_int_equal(attn_seq_set_memory(NULL, s, 4, memory), ATTN_E_INVALID);
    runner_free(&k);
    attnc_jit_free(jit);
    attn_weights_free(sw);
    attn_weights_free(w);
    free(memory), free(x);
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_by_hand),
        cmocka_unit_test(jit_equals_reference_over_sweep),
        cmocka_unit_test(forks_share_and_truncate_keeps_the_memory),
        cmocka_unit_test(errors_say_what_and_change_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
