/* test_cache.c: the paged KV cache and batched attn_forward. Every output is
 * checked against the reference engine run over the sequence's whole
 * history; block accounting is checked against what the operations imply.
 * Blocks hold 4 tokens here, so block edges are crossed all the time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

#define MAX_HIST 512

typedef struct fixture {
    char *dir;
    attnc_jit *jit;
    attn_weights *w;
    attn_block *b;
    int64_t D;
} fixture;

/* A fixture of spec_text compiled for o (NULL: this host). */
static fixture *make_for(const char *spec_text, const attnc_options *o) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = tmpdir_new();
    const char *path = path_in(f->dir, "spec.yaml");
    write_file(path, spec_text, strlen(spec_text));
    f->jit = jit_or_fail(path, o);
    const attn_kernels *k = attnc_jit_kernels(f->jit);
    assert_int_equal(attn_weights_random(&k->config, 3, &f->w, NULL), ATTN_OK);
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = 2;
    assert_int_equal(attn_block_new(k, &bo, &f->b), ATTN_OK);
    assert_int_equal(attn_block_set_weights(f->b, f->w), ATTN_OK);
    f->D = k->config.d_model;
    return f;
}

static fixture *make(const char *spec_text) {
    return make_for(spec_text, NULL);
}

static int setup(void **state) {
    *state =
        make("name: paged\nheads: 4\nkv_groups: 2\nhead_dim: 16\nd_model: 24\n"
             "rope: {base: 10000}\nqkv_bias: true\nkv_cache: {block_tokens: 4, max_tokens: 512}\n");
    return 0;
}

static int setup_window(void **state) {
    *state = make("name: windowed\nheads: 2\nhead_dim: 8\nd_model: 16\nrope: {}\n"
                  "sliding_window: 10\nkv_cache: {block_tokens: 4, max_tokens: 200000}\n");
    return 0;
}

static int setup_window_4096(void **state) {
    *state = make("name: mistral_like\nheads: 2\nhead_dim: 8\nd_model: 16\nrope: {}\n"
                  "sliding_window: 4096\nkv_cache: {block_tokens: 16, max_tokens: 200000}\n");
    return 0;
}

static int setup_chunked(void **state) {
    *state = make(
        "name: chunked\nheads: 2\nhead_dim: 8\nd_model: 16\nrope: {}\n"
        "chunked_attention: 12\nsinks: true\nkv_cache: {block_tokens: 4, max_tokens: 200000}\n");
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    attn_block_free(f->b);
    attn_weights_free(f->w);
    attnc_jit_free(f->jit);
    tmpdir_remove(f->dir);
    free(f);
    return 0;
}

/* The reference's outputs for rows [from, to) of a history x[0..to). */
static void reference_rows(const fixture *f, const float *hist, int64_t to, int64_t from,
                           float *want) {
    attn_ref *r;
    float *all = malloc((size_t)(to * f->D) * sizeof *all);
    assert_int_equal(attn_ref_new(f->w, to, &r, NULL), ATTN_OK);
    assert_int_equal(attn_ref_forward(r, to, hist, all, NULL), ATTN_OK);
    memcpy(want, all + from * f->D, (size_t)((to - from) * f->D) * sizeof *want);
    attn_ref_free(r);
    free(all);
}

static void assert_close(const float *got, const float *want, size_t n, const char *what) {
    double e = rel_err(got, want, n);
    if (!(e <= 1e-4))
        fail_msg("%s: relative error %g", what, e);
}

/* One sequence's forward of n tokens; returns the status. */
static attn_status fwd(fixture *f, attn_cache *c, int32_t s, int32_t n, const float *x, float *y) {
    return attn_forward(f->b, c, 1, &s, &n, x, y);
}

static void fork_then_diverge_equals_two_independent_runs(void **state) {
    fixture *f = *state;
    int64_t D = f->D, P = 10, K = 7;
    float *prompt = random_floats((size_t)(P * D), 1), *xa = random_floats((size_t)(K * D), 2),
          *xb = random_floats((size_t)(K * D), 3);
    float *y = malloc((size_t)(P * D) * sizeof *y), *ya = malloc((size_t)(K * D) * sizeof *ya),
          *yb = malloc((size_t)(K * D) * sizeof *yb);
    attn_cache *c;
    int32_t a, b;
    assert_int_equal(attn_cache_new(f->b, 256, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &a), ATTN_OK);
    assert_int_equal(fwd(f, c, a, (int32_t)P, prompt, y), ATTN_OK);
    int64_t used = attn_cache_get_stats(c).blocks_used; /* 10 tokens: 3 blocks */
    assert_int_equal(used, 3);
    assert_int_equal(attn_seq_fork(c, a, &b), ATTN_OK);
    assert_int_equal(attn_seq_len(c, b), P);
    assert_int_equal(attn_cache_get_stats(c).blocks_used, used); /* shared, not copied */
    /* diverge token by token, alternating */
    for (int64_t t = 0; t < K; t++) {
        assert_int_equal(fwd(f, c, a, 1, xa + t * D, ya + t * D), ATTN_OK);
        assert_int_equal(fwd(f, c, b, 1, xb + t * D, yb + t * D), ATTN_OK);
    }
    /* a: 17 tokens = 5 blocks, b: 5 blocks, sharing the 2 full prompt blocks */
    assert_int_equal(attn_cache_get_stats(c).blocks_used, 8);
    float hist[MAX_HIST * 24], *want = malloc((size_t)(K * D) * sizeof *want);
    const float *xs[2] = {xa, xb}, *ys[2] = {ya, yb};
    for (int i = 0; i < 2; i++) {
        memcpy(hist, prompt, (size_t)(P * D) * sizeof(float));
        memcpy(hist + P * D, xs[i], (size_t)(K * D) * sizeof(float));
        reference_rows(f, hist, P + K, P, want);
        assert_close(ys[i], want, (size_t)(K * D), i ? "fork" : "original");
    }
    assert_int_equal(attn_seq_free(c, a), ATTN_OK);
    assert_int_equal(attn_seq_free(c, b), ATTN_OK);
    assert_int_equal(attn_cache_get_stats(c).blocks_used, 0);
    attn_cache_free(c);
    free(prompt), free(xa), free(xb), free(y), free(ya), free(yb), free(want);
}

static void truncate_then_reappend_equals_fresh_run(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    float *x = random_floats((size_t)(20 * D), 4), *junk = random_floats((size_t)(6 * D), 5);
    float y[20 * 24], fresh[20 * 24], tmp[6 * 24];
    attn_cache *c;
    int32_t s, t;
    assert_int_equal(attn_cache_new(f->b, 64, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &t), ATTN_OK);
    assert_int_equal(fwd(f, c, t, 20, x, fresh), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    assert_int_equal(fwd(f, c, s, 13, x, y), ATTN_OK);
    assert_int_equal(fwd(f, c, s, 6, junk, tmp), ATTN_OK); /* rejected draft tokens */
    assert_int_equal(attn_seq_truncate(c, s, 13), ATTN_OK);
    assert_int_equal(attn_seq_truncate(c, s, 14), ATTN_E_INVALID);
    assert_int_equal(fwd(f, c, s, 7, x + 13 * D, y + 13 * D), ATTN_OK);
    assert_close(y, fresh, (size_t)(20 * D), "truncated and re-appended");
    attn_cache_free(c);
    free(x), free(junk);
}

static void capacity_exhaustion_leaves_every_sequence_intact(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    float *x = random_floats((size_t)(40 * D), 6), y[40 * 24], want[40 * 24];
    attn_cache *c;
    int32_t s[3];
    assert_int_equal(attn_cache_new(f->b, 24, &c), ATTN_OK); /* 6 blocks of 4 */
    for (int i = 0; i < 3; i++)
        assert_int_equal(attn_seq_new(c, &s[i]), ATTN_OK);
    assert_int_equal(fwd(f, c, s[0], 8, x, y), ATTN_OK); /* 2 blocks */
    assert_int_equal(fwd(f, c, s[1], 9, x, y), ATTN_OK); /* 3 blocks */
    int32_t ids[2] = {s[0], s[2]}, ns[2] = {1, 4};       /* needs 2, 1 free */
    assert_int_equal(attn_forward(f->b, c, 2, ids, ns, x, y), ATTN_E_CAPACITY);
    assert_non_null(strstr(attn_cache_error(c), "needs 2 more blocks, 1 are free"));
    assert_int_equal(attn_seq_len(c, s[0]), 8);
    assert_int_equal(attn_seq_len(c, s[2]), 0);
    assert_int_equal(attn_cache_get_stats(c).blocks_free, 1);
    /* after freeing, the same batch runs, and s[0] continues correctly */
    assert_int_equal(attn_seq_free(c, s[1]), ATTN_OK);
    assert_int_equal(attn_forward(f->b, c, 2, ids, ns, x + 8 * D, y), ATTN_OK);
    reference_rows(f, x, 9, 8, want);
    assert_close(y, want, (size_t)D, "after capacity was freed");
    attn_cache_free(c);
    free(x);
}

static void batched_forward_equals_one_forward_per_sequence(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    enum { N = 4 };
    int32_t pre[N] = {0, 5, 3, 12}, now[N] = {9, 1, 0, 6}; /* prefill, decode, idle, chunk */
    float *hist[N], *y_batch, *y_one;
    int32_t total = 0;
    for (int i = 0; i < N; i++) {
        hist[i] = random_floats((size_t)((pre[i] + now[i]) * D), 10 + (uint64_t)i);
        total += now[i];
    }
    y_batch = malloc((size_t)(total * D) * sizeof(float));
    y_one = malloc((size_t)(total * D) * sizeof(float));
    float *xb = malloc((size_t)(total * D) * sizeof(float)), scratch[12 * 24];
    attn_cache *cb, *co;
    int32_t sb[N], so[N];
    assert_int_equal(attn_cache_new(f->b, 256, &cb), ATTN_OK);
    assert_int_equal(attn_cache_new(f->b, 256, &co), ATTN_OK);
    int64_t row = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(attn_seq_new(cb, &sb[i]), ATTN_OK);
        assert_int_equal(attn_seq_new(co, &so[i]), ATTN_OK);
        if (pre[i]) {
            assert_int_equal(fwd(f, cb, sb[i], pre[i], hist[i], scratch), ATTN_OK);
            assert_int_equal(fwd(f, co, so[i], pre[i], hist[i], scratch), ATTN_OK);
        }
        memcpy(xb + row * D, hist[i] + pre[i] * D, (size_t)(now[i] * D) * sizeof(float));
        row += now[i];
    }
    assert_int_equal(attn_forward(f->b, cb, N, sb, now, xb, y_batch), ATTN_OK);
    row = 0;
    for (int i = 0; i < N; i++) {
        if (now[i])
            assert_int_equal(fwd(f, co, so[i], now[i], xb + row * D, y_one + row * D), ATTN_OK);
        float want[9 * 24];
        if (now[i]) {
            reference_rows(f, hist[i], pre[i] + now[i], pre[i], want);
            assert_close(y_batch + row * D, want, (size_t)(now[i] * D), "batched vs reference");
        }
        assert_int_equal(attn_seq_len(cb, sb[i]), pre[i] + now[i]);
        row += now[i];
    }
    assert_memory_equal(y_batch, y_one, (size_t)(total * D) * sizeof(float));
    for (int i = 0; i < N; i++)
        free(hist[i]);
    free(y_batch), free(y_one), free(xb);
    attn_cache_free(cb);
    attn_cache_free(co);
}

/* One call of many sequences, scheduled: the cheap ones run whole on one
 * thread each, side by side (their own scratch), a costly one on every
 * thread first; bitwise the outputs of one call per sequence, on 3
 * threads and on 1. */
static void scheduled_batch_is_bitwise_one_call_per_sequence(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    enum { N = 13 };
    int32_t pre[N], now[N], total = 0;
    for (int i = 0; i < N; i++) /* 12 decodes of 1..78 cached tokens, one prefill of 60 */
        pre[i] = i < N - 1 ? 7 * i + 1 : 0, now[i] = i < N - 1 ? 1 : 60, total += now[i];
    float *x = random_floats((size_t)(80 * N * D), 21);
    float *y_one = malloc((size_t)(total * D) * sizeof(float));
    float *y_batch = malloc((size_t)(total * D) * sizeof(float)),
          *xb = malloc((size_t)(total * D) * sizeof(float));
    float *junk = malloc((size_t)(80 * D) * sizeof(float));
    for (int threads = 3; threads >= 1; threads -= 2) {
        attn_block_options bo = attn_block_options_default();
        bo.n_threads = threads;
        attn_block *b;
        assert_int_equal(attn_block_new(attnc_jit_kernels(f->jit), &bo, &b), ATTN_OK);
        assert_int_equal(attn_block_set_weights(b, f->w), ATTN_OK);
        attn_cache *cb, *co;
        assert_int_equal(attn_cache_new(b, 2048, &cb), ATTN_OK);
        assert_int_equal(attn_cache_new(b, 2048, &co), ATTN_OK);
        int32_t sb[N], so[N];
        int64_t row = 0;
        for (int i = 0; i < N; i++) {
            const float *h = x + (int64_t)i * 80 * D;
            assert_int_equal(attn_seq_new(cb, &sb[i]), ATTN_OK);
            assert_int_equal(attn_seq_new(co, &so[i]), ATTN_OK);
            if (pre[i]) {
                assert_int_equal(attn_forward(b, cb, 1, &sb[i], &pre[i], h, junk), ATTN_OK);
                assert_int_equal(attn_forward(b, co, 1, &so[i], &pre[i], h, junk), ATTN_OK);
            }
            memcpy(xb + row * D, h + pre[i] * D, (size_t)(now[i] * D) * sizeof(float));
            assert_int_equal(attn_forward(b, co, 1, &so[i], &now[i], xb + row * D, y_one + row * D),
                             ATTN_OK);
            row += now[i];
        }
        assert_int_equal(attn_forward(b, cb, N, sb, now, xb, y_batch), ATTN_OK);
        assert_memory_equal(y_batch, y_one, (size_t)(total * D) * sizeof(float));
        /* profiled, the same schedule and bits, and every step timed */
        for (int i = 0; i < N; i++)
            assert_int_equal(attn_seq_truncate(cb, sb[i], pre[i]), ATTN_OK);
        assert_int_equal(attn_cache_profile(cb, true), ATTN_OK);
        assert_int_equal(attn_forward(b, cb, N, sb, now, xb, y_batch), ATTN_OK);
        assert_memory_equal(y_batch, y_one, (size_t)(total * D) * sizeof(float));
        uint32_t n_steps;
        const double *sec = attn_cache_step_seconds(cb, &n_steps);
        double sum = 0;
        for (uint32_t i = 0; i < n_steps; i++)
            sum += sec[i] >= 0 ? sec[i] : -1e9;
        assert_true(n_steps > 0 && sum > 0);
        attn_cache_free(cb);
        attn_cache_free(co);
        attn_block_free(b);
    }
    free(x), free(y_one), free(y_batch), free(xb), free(junk);
}

/* The model: each live sequence's history of inputs. */
typedef struct model_seq {
    bool live;
    int32_t id;
    int64_t len;
    float hist[MAX_HIST * 24];
} model_seq;

/* Keys of the first n blocks (4 tokens each) of a history, chained: key i
 * hashes key i-1 and block i's inputs (FNV-1a), as a caller hashes token
 * ids, so equal prefixes give equal keys. */
static void content_keys(const float *hist, int64_t n, int64_t D, uint64_t *keys) {
    uint64_t h = UINT64_C(14695981039346656037);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *b = (const unsigned char *)(hist + i * 4 * D);
        for (size_t j = 0; j < (size_t)(4 * D) * sizeof(float); j++)
            h = (h ^ b[j]) * UINT64_C(1099511628211);
        keys[i] = h;
    }
}

static void random_operations_match_a_model_and_the_reference(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    enum { SLOTS = 6 };
    model_seq *m = calloc(SLOTS, sizeof *m);
    attn_cache *c;
    assert_int_equal(attn_cache_new(f->b, 160, &c), ATTN_OK); /* 40 blocks: runs out sometimes */
    uint64_t rng = 77;
    int forwards = 0, capacity_hits = 0, matches = 0;
    float x[16 * 24], y[16 * 24], want[16 * 24];
    for (int step = 0; step < 400; step++) {
        int i = (int)((rnd_unit(&rng) + 1) / 2 * SLOTS) % SLOTS;
        int op = (int)((rnd_unit(&rng) + 1) / 2 * 10);
        model_seq *s = &m[i];
        if (!s->live) {
            if (op >= 8) { /* the published prefix of some history (maybe gone) */
                const model_seq *src = &m[(i + 1) % SLOTS];
                for (int j = 0; j < SLOTS; j++) /* the longest other history */
                    src = j != i && m[j].len > src->len ? &m[j] : src;
                uint64_t keys[MAX_HIST / 4];
                int64_t n;
                content_keys(src->hist, src->len / 4, D, keys);
                assert_int_equal(attn_seq_from_prefix(c, src->len / 4, keys, &s->id, &n), ATTN_OK);
                assert_true(n % 4 == 0 && n <= src->len);
                memmove(s->hist, src->hist, (size_t)(n * D) * sizeof(float));
                s->len = n;
                matches += n > 0;
            } else if (op < 6) {
                assert_int_equal(attn_seq_new(c, &s->id), ATTN_OK);
                s->len = 0;
            } else { /* fork another live one, if any */
                int src = -1;
                for (int j = 0; j < SLOTS; j++)
                    if (m[j].live)
                        src = j;
                if (src < 0)
                    continue;
                assert_int_equal(attn_seq_fork(c, m[src].id, &s->id), ATTN_OK);
                s->len = m[src].len;
                memcpy(s->hist, m[src].hist, (size_t)(s->len * D) * sizeof(float));
            }
            s->live = true;
        } else if (op < 6) { /* append k tokens */
            int32_t k = 1 + (int32_t)((rnd_unit(&rng) + 1) / 2 * 12) % 12;
            if (s->len + k > MAX_HIST)
                continue;
            attn_random_uniform(&rng, x, (size_t)(k * D), 1.5);
            attn_status st = fwd(f, c, s->id, k, x, y);
            if (st == ATTN_E_CAPACITY) {
                capacity_hits++;
                assert_int_equal(attn_seq_len(c, s->id), s->len);
                continue;
            }
            assert_int_equal(st, ATTN_OK);
            memcpy(s->hist + s->len * D, x, (size_t)(k * D) * sizeof(float));
            s->len += k;
            reference_rows(f, s->hist, s->len, s->len - k, want);
            assert_close(y, want, (size_t)(k * D), "random append");
            forwards++;
        } else if (op == 6) { /* publish every full block */
            uint64_t keys[MAX_HIST / 4];
            content_keys(s->hist, s->len / 4, D, keys);
            assert_int_equal(attn_cache_publish(c, s->id, s->len / 4, keys), ATTN_OK);
        } else if (op == 7) { /* truncate */
            int64_t n = (int64_t)((rnd_unit(&rng) + 1) / 2 * (double)(s->len + 1)) % (s->len + 1);
            assert_int_equal(attn_seq_truncate(c, s->id, n), ATTN_OK);
            s->len = n;
        } else {
            assert_int_equal(attn_seq_free(c, s->id), ATTN_OK);
            assert_int_equal(attn_seq_len(c, s->id), -1);
            s->live = false;
        }
        /* accounting: lengths agree, used blocks never exceed what the
         * sequences could need without sharing */
        int64_t bound = 0;
        for (int j = 0; j < SLOTS; j++) {
            if (!m[j].live)
                continue;
            assert_int_equal(attn_seq_len(c, m[j].id), m[j].len);
            bound += (m[j].len + 3) / 4;
        }
        attn_cache_stats st = attn_cache_get_stats(c);
        assert_true(st.blocks_used <= bound);
        assert_int_equal(st.blocks_used + st.blocks_free, 40);
    }
    attn_cache_stats end = attn_cache_get_stats(c);
    print_message("%d forwards, %d capacity refusals, %d prefix matches, %lld blocks evicted\n",
                  forwards, capacity_hits, matches, (long long)end.evicted_blocks);
    assert_true(forwards > 100 && matches > 5 && end.evicted_blocks > 0);
    for (int j = 0; j < SLOTS; j++)
        if (m[j].live)
            assert_int_equal(attn_seq_free(c, m[j].id), ATTN_OK);
    assert_int_equal(attn_cache_get_stats(c).blocks_used, 0);
    attn_cache_free(c);
    free(m);
}

static void errors_are_statuses(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    float *x = random_floats((size_t)(8 * D), 8), y[8 * 24];
    attn_cache *c;
    int32_t s, dup[2], ns[2] = {1, 1}, one = 1, neg = -1;
    assert_int_equal(attn_cache_new(f->b, 0, &c), ATTN_E_INVALID);
    assert_int_equal(attn_cache_new(NULL, 16, &c), ATTN_E_INVALID);
    assert_int_equal(attn_cache_new(f->b, 16, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    assert_int_equal(fwd(f, c, 99, 1, x, y), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(c), "sequence 99 is unknown"));
    dup[0] = dup[1] = s;
    assert_int_equal(attn_forward(f->b, c, 2, dup, ns, x, y), ATTN_E_INVALID);
    assert_int_equal(attn_forward(f->b, c, 1, &s, &neg, x, y), ATTN_E_INVALID);
    assert_int_equal(attn_forward(f->b, c, 0, &s, &one, x, y), ATTN_E_INVALID);
    assert_int_equal(attn_forward(f->b, c, 1, &s, &one, NULL, y), ATTN_E_INVALID);
    assert_int_equal(attn_forward(NULL, c, 1, &s, &one, x, y), ATTN_E_INVALID);
    assert_int_equal(attn_seq_len(c, s), 0);
    assert_int_equal(attn_seq_free(c, s), ATTN_OK);
    assert_int_equal(attn_seq_free(c, s), ATTN_E_INVALID); /* freed twice */
    assert_int_equal(fwd(f, c, s, 1, x, y), ATTN_E_INVALID);
    assert_int_equal(attn_seq_fork(c, s, &s), ATTN_E_INVALID);
    assert_int_equal(attn_seq_truncate(c, s, 0), ATTN_E_INVALID);
    assert_int_equal(attn_seq_len(c, -1), -1);
    /* a cache of another block */
    attn_block *other;
    assert_int_equal(attn_block_new(attnc_jit_kernels(f->jit), NULL, &other), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    assert_int_equal(attn_forward(other, c, 1, &s, &one, x, y), ATTN_E_INVALID);
    attn_block_free(other);
    attn_cache_free(c);
    free(x);
}

static void positions_beyond_max_tokens_are_refused(void **state) {
    fixture *f = *state;
    attn_cache *c;
    int32_t s, n = 500, more = 13;
    float *x = random_floats((size_t)(513 * f->D), 9),
          *y = malloc((size_t)(513 * f->D) * sizeof *y);
    assert_int_equal(attn_cache_new(f->b, 1024, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    assert_int_equal(attn_forward(f->b, c, 1, &s, &n, x, y), ATTN_OK);
    assert_int_equal(attn_forward(f->b, c, 1, &s, &more, x, y), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(c), "kv_cache.max_tokens is 512"));
    assert_int_equal(attn_seq_len(c, s), 500);
    attn_cache_free(c);
    free(x), free(y);
}

/* Feeds total tokens to s in chunks; the most blocks in use after a call. */
static int64_t stream(fixture *f, attn_cache *c, int32_t s, int64_t total, int32_t chunk,
                      const float *x, float *y) {
    int64_t most = 0;
    for (int64_t at = 0; at < total; at += chunk) {
        if (attn_forward(f->b, c, 1, &s, &chunk, x, y) != ATTN_OK)
            fail_msg("at %lld: %s", (long long)at, attn_cache_error(c));
        int64_t used = attn_cache_get_stats(c).blocks_used;
        most = used > most ? used : most;
    }
    return most;
}

static void sliding_window_stream_keeps_memory_bounded(void **state) {
    fixture *f = *state;
    int64_t D = f->D, chunk = 50;
    attn_cache *c;
    int32_t s, n = (int32_t)chunk;
    assert_int_equal(attn_cache_new(f->b, 80, &c), ATTN_OK); /* 20 blocks for a 100k stream */
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    float *x = random_floats((size_t)(chunk * D), 12), *y = malloc((size_t)(chunk * D) * sizeof *y);
    int64_t most = stream(f, c, s, 100000, n, x, y);
    print_message("100000 tokens, window 10, chunks of 50: at most %lld blocks of 4 held\n",
                  (long long)most);
    assert_int_equal(attn_seq_len(c, s), 100000);
    assert_true(most <= (10 + chunk) / 4 + 2);
    /* rolling back past released keys is refused; within the window is fine */
    assert_int_equal(attn_seq_truncate(c, s, 99990), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(c), "sliding window released"));
    assert_int_equal(attn_seq_truncate(c, s, 99999), ATTN_OK);
    attn_cache_free(c);
    free(x), free(y);
}

static void window_4096_stream_of_100k_tokens_keeps_memory_bounded(void **state) {
    fixture *f = *state;
    int64_t D = f->D, chunk = 1000;
    attn_cache *c;
    int32_t s, n = (int32_t)chunk;
    /* room for the window plus one chunk, and a block of slack at each end */
    assert_int_equal(attn_cache_new(f->b, 4096 + 1000 + 32, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    float *x = random_floats((size_t)(chunk * D), 14), *y = malloc((size_t)(chunk * D) * sizeof *y);
    int64_t most = stream(f, c, s, 100000, n, x, y);
    print_message("100000 tokens, window 4096: at most %lld blocks of 16 held (%lld tokens)\n",
                  (long long)most, (long long)(most * 16));
    assert_int_equal(attn_seq_len(c, s), 100000);
    assert_true(most <= 4096 / 16 + 2);
    attn_cache_free(c);
    free(x), free(y);
}

static void sliding_window_outputs_match_the_reference(void **state) {
    fixture *f = *state;
    int64_t D = f->D, T = 157;
    float *x = random_floats((size_t)(T * D), 13), *y = malloc((size_t)(T * D) * sizeof *y),
          *want = malloc((size_t)(T * D) * sizeof *want);
    attn_cache *c;
    int32_t s;
    assert_int_equal(attn_cache_new(f->b, 64, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    for (int64_t at = 0; at < T;) { /* uneven chunks, so window and block edges differ */
        int32_t n = (int32_t)(1 + at % 7);
        if (at + n > T)
            n = (int32_t)(T - at);
        assert_int_equal(attn_forward(f->b, c, 1, &s, &n, x + at * D, y + at * D), ATTN_OK);
        at += n;
    }
    reference_rows(f, x, T, 0, want);
    assert_close(y, want, (size_t)(T * D), "windowed stream");
    assert_true(attn_cache_get_stats(c).blocks_used <= 5);
    attn_cache_free(c);
    free(x), free(y), free(want);
}

/* Chunks of 12 over blocks of 4: after each call only the blocks of the
 * current chunk (and the partial one past it) are held, whatever the
 * stream's length; truncating into a released chunk is refused. */
static void chunked_stream_releases_past_chunks(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    attn_cache *c;
    int32_t s, n = 5;
    assert_int_equal(attn_cache_new(f->b, 40, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    float *x = random_floats((size_t)(n * D), 14), *y = malloc((size_t)(n * D) * sizeof *y);
    int64_t most = stream(f, c, s, 5000, n, x, y);
    print_message("5000 tokens, chunks of 12, calls of 5: at most %lld blocks of 4 held\n",
                  (long long)most);
    assert_int_equal(attn_seq_len(c, s), 5000);
    assert_true(most <= (12 + 5) / 4 + 2);
    /* 5000 = 416 * 12 + 8: keys from 4992 on are held; 4990's chunk starts at 4980 */
    assert_int_equal(attn_seq_truncate(c, s, 4990), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(c), "attention chunk released"));
    assert_int_equal(attn_seq_truncate(c, s, 4995), ATTN_OK);
    attn_cache_free(c);
    free(x), free(y);
}

/* Sequences sharing blocks (forks at a block edge and inside a block),
 * decoding in one call beside unshared ones and a prefill: the bits of
 * the same calls on unshared copies of the same tokens. */
static void shared_prefix_batch_equals_unshared(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    enum { N = 6 };
    float *hist = random_floats((size_t)(40 * D), 30),
          *mine = random_floats((size_t)(N * 8 * D), 31);
    float *xb = malloc((size_t)(N * 8 * D) * sizeof *xb),
          *ys = malloc((size_t)(N * 8 * D) * sizeof *ys),
          *yu = malloc((size_t)(N * 8 * D) * sizeof *yu), junk[40 * 24];
    /* sequence i: the first share[i] tokens of hist (shared: forks of one
     * sequence holding them), then own[i] of its own, then now[i] new */
    int32_t share[N] = {16, 16, 18, 18, 0, 0}, own[N] = {0, 3, 0, 5, 7, 0},
            now[N] = {1, 1, 1, 2, 1, 8};
    attn_cache *cs, *cu;
    assert_int_equal(attn_cache_new(f->b, 512, &cs), ATTN_OK);
    assert_int_equal(attn_cache_new(f->b, 512, &cu), ATTN_OK);
    int32_t base[2], ss[N], su[N], len[2] = {16, 18};
    for (int k = 0; k < 2; k++) { /* 16: 4 whole blocks; 18: inside the fifth */
        assert_int_equal(attn_seq_new(cs, &base[k]), ATTN_OK);
        assert_int_equal(fwd(f, cs, base[k], len[k], hist, junk), ATTN_OK);
    }
    int64_t row = 0;
    for (int i = 0; i < N; i++) {
        const float *m = mine + (int64_t)i * 8 * D;
        if (share[i])
            assert_int_equal(attn_seq_fork(cs, base[share[i] == 18], &ss[i]), ATTN_OK);
        else
            assert_int_equal(attn_seq_new(cs, &ss[i]), ATTN_OK);
        assert_int_equal(attn_seq_new(cu, &su[i]), ATTN_OK);
        if (share[i])
            assert_int_equal(fwd(f, cu, su[i], share[i], hist, junk), ATTN_OK);
        if (own[i]) {
            assert_int_equal(fwd(f, cs, ss[i], own[i], m, junk), ATTN_OK);
            assert_int_equal(fwd(f, cu, su[i], own[i], m, junk), ATTN_OK);
        }
        memcpy(xb + row * D, m + own[i] * D, (size_t)(now[i] * D) * sizeof(float));
        row += now[i];
    }
    assert_int_equal(attn_forward(f->b, cs, N, ss, now, xb, ys), ATTN_OK);
    assert_int_equal(attn_forward(f->b, cu, N, su, now, xb, yu), ATTN_OK);
    assert_memory_equal(ys, yu, (size_t)(row * D) * sizeof(float));
    /* and the shared blocks are still shared: 4 + 5 blocks once */
    assert_true(attn_cache_get_stats(cs).blocks_used < attn_cache_get_stats(cu).blocks_used);
    attn_cache_free(cs);
    attn_cache_free(cu);
    free(hist), free(mine), free(xb), free(ys), free(yu);
}

/* ---- shared-prefix calls ------------------------------------------------------ */

/* One call over sequences sharing a prefix with a few of their own
 * tokens each, where the kernels attend to the prefix once for several
 * of them (prefix calls, attn_kernels.h): forks of one sequence holding
 * 100 tokens (whole blocks) and of one holding 102 (inside a block),
 * more of them than one prefix call takes, decodes and a chunk of 3,
 * beside a sequence of its own and a prefill in the same call. Each
 * output == the same sequence fed alone into a cache sharing nothing,
 * within tol (the prefix's keys are summed apart, then merged), and not
 * bitwise (else no prefix call ran); with ATTN_CASCADE=0 bitwise; on 1,
 * 2 and 3 threads the same bits; and the same bits when the batch lists
 * the forks of one sequence apart, between the others (attn_forward runs
 * them side by side). */
static void check_cascade(const char *spec, const attnc_options *o, double tol) {
    fixture *f = make_for(spec, o);
    int64_t D = f->D;
    enum { N = 16 };
    /* sinks that weigh as much as the keys: one counted twice (or not at
     * all) shows whatever the arithmetic's tolerance */
    for (int64_t h = 0; f->w->sinks && h < f->w->cfg.heads; h++)
        f->w->sinks[h] = 4.0f + 0.5f * (float)h;
    float *hist = random_floats((size_t)(102 * D), 40),
          *mine = random_floats((size_t)(N * 24 * D), 41);
    /* sequence i: share[i] tokens of hist (forks), own[i] of its own, then now[i] */
    int32_t share[N], own[N], now[N];
    for (int i = 0; i < N; i++) {
        share[i] = i < 11 ? 100 : i < 14 ? 102 : 0;
        own[i] = i % 4;
        now[i] = i == 5 ? 3 : i == 15 ? 20 : 1;
    }
    own[15] = 0; /* a prefill */
    int64_t total = 0;
    for (int i = 0; i < N; i++)
        total += now[i];
    float *xb = malloc((size_t)(total * D) * sizeof *xb), *junk = malloc(120 * D * sizeof *junk);
    size_t bytes = (size_t)(total * D) * sizeof(float);
    float *yu = malloc(bytes), *y3 = malloc(bytes), *y = malloc(bytes), *yo = malloc(bytes);
    float *xp = malloc(bytes), *yp = malloc(bytes);
    /* pass 4's batch order: the two prefixes' forks apart */
    static const int apart[N] = {0, 11, 14, 1, 12, 15, 2, 13, 3, 4, 5, 6, 7, 8, 9, 10};
    for (int pass = 0; pass < 5; pass++) { /* unshared, then 3, 2, 1 threads, 3 apart */
        int threads = pass == 4 ? 3 : pass ? 4 - pass : 2;
        attn_block_options bo = attn_block_options_default();
        bo.n_threads = threads;
        attn_block *b;
        assert_int_equal(attn_block_new(attnc_jit_kernels(f->jit), &bo, &b), ATTN_OK);
        assert_int_equal(attn_block_set_weights(b, f->w), ATTN_OK);
        for (int off = pass ? 0 : 1; off < 2; off++) { /* off: ATTN_CASCADE=0 */
            if (off)
                setenv("ATTN_CASCADE", "0", 1);
            attn_cache *c;
            assert_int_equal(attn_cache_new(b, 4096, &c), ATTN_OK);
            unsetenv("ATTN_CASCADE");
            int32_t base[2], sq[N];
            for (int k = 0; pass && k < 2; k++) {
                int32_t len = 100 + 2 * k;
                assert_int_equal(attn_seq_new(c, &base[k]), ATTN_OK);
                assert_int_equal(attn_forward(b, c, 1, &base[k], &len, hist, junk), ATTN_OK);
            }
            int64_t row = 0;
            for (int i = 0; i < N; i++) {
                const float *m = mine + (int64_t)i * 24 * D;
                if (pass && share[i]) {
                    assert_int_equal(attn_seq_fork(c, base[share[i] == 102], &sq[i]), ATTN_OK);
                } else {
                    assert_int_equal(attn_seq_new(c, &sq[i]), ATTN_OK);
                    if (share[i])
                        assert_int_equal(attn_forward(b, c, 1, &sq[i], &share[i], hist, junk),
                                         ATTN_OK);
                }
                if (own[i])
                    assert_int_equal(attn_forward(b, c, 1, &sq[i], &own[i], m, junk), ATTN_OK);
                memcpy(xb + row * D, m + own[i] * D, (size_t)(now[i] * D) * sizeof(float));
                row += now[i];
            }
            float *out = pass == 0 ? yu : off ? yo : pass == 1 ? y3 : y;
            if (pass == 4) { /* the batch in the order `apart`, out in the usual one */
                int32_t sp[N], np[N];
                int64_t at[N + 1];
                at[0] = 0;
                for (int i = 0; i < N; i++)
                    at[i + 1] = at[i] + now[i];
                for (int i = 0, r = 0; i < N; r += np[i++]) {
                    sp[i] = sq[apart[i]], np[i] = now[apart[i]];
                    memcpy(xp + r * D, xb + at[apart[i]] * D, (size_t)(np[i] * D) * sizeof(float));
                }
                assert_int_equal(attn_forward(b, c, N, sp, np, xp, yp), ATTN_OK);
                for (int i = 0, r = 0; i < N; r += np[i++])
                    memcpy(out + at[apart[i]] * D, yp + r * D, (size_t)(np[i] * D) * sizeof(float));
            } else {
                assert_int_equal(attn_forward(b, c, N, sq, now, xb, out), ATTN_OK);
            }
            if (off && pass) /* no prefix calls: the unshared bits */
                assert_memory_equal(out, yu, bytes);
            attn_cache_free(c);
        }
        if (pass == 1) {
            double e = rel_err(y3, yu, (size_t)(total * D));
            if (!(e <= tol))
                fail_msg("%.*s (cpu %s): shared vs unshared: relative error %g",
                         (int)strcspn(spec, "\n"), spec, o ? o->cpu : "host", e);
            /* the first 8 decodes' rows (a prefix call's) differ somewhere */
            assert_true(memcmp(y3, yu, (size_t)(8 * D) * sizeof(float)) != 0);
            /* the prefill's rows take no prefix call: the unshared bits */
            assert_memory_equal(y3 + (total - 20) * D, yu + (total - 20) * D,
                                (size_t)(20 * D) * sizeof(float));
        } else if (pass > 1) { /* the bits of 3 threads */
            assert_memory_equal(y, y3, bytes);
        }
        attn_block_free(b);
    }
    free(hist), free(mine), free(xb), free(junk), free(yu), free(y3), free(y), free(yo);
    free(xp), free(yp);
    void *state = f;
    teardown(&state);
}

static void shared_prefix_calls_equal_unshared(void **state) {
    (void)state;
    static const struct {
        const char *spec;
        double tol;
        bool avx2; /* also compiled for x86-64-v3 (on x86-64) */
    } cases[] = {
        /* f32, GQA 2, tiles gathered from blocks of 4 */
        {"name: cascade\nheads: 4\nkv_groups: 2\nhead_dim: 16\nd_model: 24\n"
         "rope: {base: 10000}\nqkv_bias: true\nkv_cache: {block_tokens: 4, max_tokens: 512}\n",
         1e-6, false},
        /* f16 cache, group 4, sinks and softcap, whole tiles of blocks of
         * 16; its 13 forks' rows one prefix call on the flash path, whose
         * sums of softcapped scores differ from the split path's by up to
         * 1.04e-6 */
        {"name: cascade_f16\nheads: 8\nkv_groups: 2\nhead_dim: 16\nd_model: 32\n"
         "rope: {base: 10000}\nsinks: true\nsoftcap: 30\n"
         "kv_cache: {dtype: f16, block_tokens: 16, max_tokens: 512}\n",
         2e-6, true},
        /* q8_0 cache, compute bf16 (the flash path), bidirectional */
        {"name: cascade_q8\nheads: 4\nkv_groups: 1\nhead_dim: 32\nd_model: 32\n"
         "rope: {base: 10000}\ncausal: false\ncompute: bf16\n"
         "kv_cache: {dtype: q8_0, block_tokens: 8, max_tokens: 512}\n",
         BF16_TOL, true},
        /* bf16 cache, compute bf16 (a prefix call of all 13 tokens: the
         * flash path), MHA, sinks */
        {"name: cascade_bf16\nheads: 2\nhead_dim: 64\nd_model: 32\nrope: {base: 10000}\n"
         "compute: bf16\nsinks: true\n"
         "kv_cache: {dtype: bf16, block_tokens: 16, max_tokens: 512}\n",
         BF16_TOL, true},
    };
    attnc_options avx2 = attnc_options_default();
    avx2.cpu = "x86-64-v3";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_cascade(cases[i].spec, NULL, cases[i].tol);
#if defined(__x86_64__)
        if (cases[i].avx2 && (attn_cpu_features() & ATTN_CPU_AVX2))
            check_cascade(cases[i].spec, &avx2, cases[i].tol);
#endif
    }
}

/* ---- prefix cache ---------------------------------------------------------- */

/* Feeds s the tokens hist[from, to) and checks them against the reference
 * over hist[0, to). */
static void continue_and_check(fixture *f, attn_cache *c, int32_t s, const float *hist,
                               int64_t from, int64_t to, const char *what) {
    int64_t D = f->D;
    float *y = malloc((size_t)((to - from) * D) * sizeof *y),
          *want = malloc((size_t)((to - from) * D) * sizeof *want);
    assert_int_equal(attn_seq_len(c, s), from);
    assert_int_equal(fwd(f, c, s, (int32_t)(to - from), hist + from * D, y), ATTN_OK);
    reference_rows(f, hist, to, from, want);
    assert_close(y, want, (size_t)((to - from) * D), what);
    free(y), free(want);
}

static void prefix_cache_publishes_and_matches(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    float *hist = random_floats((size_t)(30 * D), 40), *other = random_floats((size_t)(30 * D), 41);
    float y[16 * 24];
    uint64_t keys[7], odd[3];
    content_keys(hist, 7, D, keys);
    content_keys(other, 3, D, odd);
    attn_cache *c;
    int32_t a, b, e, g;
    int64_t n;
    assert_int_equal(attn_cache_new(f->b, 256, &c), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &a), ATTN_OK);
    assert_int_equal(fwd(f, c, a, 14, hist, y), ATTN_OK); /* 3 full blocks and 2 tokens */
    /* refused, and nothing published: a chain longer than the full blocks */
    assert_int_equal(attn_cache_publish(c, a, 4, keys), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(c), "4 keys is longer than sequence"));
    assert_int_equal(attn_cache_publish(c, 77, 1, keys), ATTN_E_INVALID);
    assert_int_equal(attn_cache_publish(c, a, 1, NULL), ATTN_E_INVALID);
    assert_int_equal(attn_cache_publish(c, a, -1, keys), ATTN_E_INVALID);
    assert_int_equal(attn_cache_get_stats(c).published_blocks, 0);
    assert_int_equal(attn_cache_publish(c, a, 0, NULL), ATTN_OK);
    assert_int_equal(attn_cache_publish(c, a, 3, keys), ATTN_OK);
    assert_int_equal(attn_cache_publish(c, a, 2, keys), ATTN_OK); /* again: no-op */
    attn_cache_stats st = attn_cache_get_stats(c);
    assert_int_equal(st.published_blocks, 3);
    assert_int_equal(st.blocks_used, 4);
    /* a block under a second key is refused */
    assert_int_equal(attn_cache_publish(c, a, 1, odd), ATTN_E_INVALID);
    assert_non_null(strstr(attn_cache_error(c), "published already"));
    /* the publisher, alone holding them, rewrites its published block 2
     * after a truncate: it gets a copy, the published one keeps its content */
    assert_int_equal(attn_seq_truncate(c, a, 10), ATTN_OK);
    assert_int_equal(fwd(f, c, a, 6, other, y), ATTN_OK);

    /* the whole chain, and past it: 3 blocks shared, then the rest fed */
    assert_int_equal(attn_seq_from_prefix(c, 7, keys, &b, &n), ATTN_OK);
    assert_int_equal(n, 12);
    assert_int_equal(attn_cache_get_stats(c).blocks_used, 5); /* a's 4, the published 2 */
    continue_and_check(f, c, b, hist, 12, 26, "matched prefix, continued");
    /* a partial match: block 1's key then a stranger */
    uint64_t part[3] = {keys[0], keys[1], odd[2]};
    assert_int_equal(attn_seq_from_prefix(c, 3, part, &e, &n), ATTN_OK);
    assert_int_equal(n, 8);
    continue_and_check(f, c, e, hist, 8, 11, "partial match, continued");
    /* a key at another depth, or none, matches nothing: an empty sequence */
    assert_int_equal(attn_seq_from_prefix(c, 2, keys + 1, &g, &n), ATTN_OK);
    assert_int_equal(n, 0);
    continue_and_check(f, c, g, hist, 0, 5, "no match");
    assert_int_equal(attn_seq_from_prefix(c, 0, NULL, &g, &n), ATTN_OK);
    assert_int_equal(n, 0);
    assert_int_equal(attn_seq_from_prefix(c, 1, NULL, &g, &n), ATTN_E_INVALID);
    assert_int_equal(attn_seq_from_prefix(c, 1, keys, NULL, &n), ATTN_E_INVALID);

    /* the publisher freed: its published blocks stay, idle or held */
    assert_int_equal(attn_seq_free(c, a), ATTN_OK);
    assert_int_equal(attn_seq_from_prefix(c, 7, keys, &a, &n), ATTN_OK);
    assert_int_equal(n, 12);
    continue_and_check(f, c, a, hist, 12, 20, "matched after the publisher rewrote and left");
    /* a fork of a matched sequence */
    int32_t k;
    assert_int_equal(attn_seq_fork(c, a, &k), ATTN_OK);
    continue_and_check(f, c, k, hist, 20, 30, "fork of a matched sequence");
    assert_int_equal(attn_cache_get_stats(c).published_blocks, 3);
    attn_cache_free(c);
    free(hist), free(other);
}

/* Under pressure idle published blocks go least recently used first, a
 * chain's tail before its head; held ones never. */
static void prefix_cache_evicts_least_recently_used(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    float *ha = random_floats((size_t)(16 * D), 42), *hb = random_floats((size_t)(16 * D), 43),
          *hc = random_floats((size_t)(24 * D), 44), y[24 * 24];
    uint64_t ka[2], kb[2];
    content_keys(ha, 2, D, ka);
    content_keys(hb, 2, D, kb);
    attn_cache *c;
    int32_t a, b, s, t;
    int64_t n;
    assert_int_equal(attn_cache_new(f->b, 32, &c), ATTN_OK); /* 8 blocks */
    assert_int_equal(attn_seq_new(c, &a), ATTN_OK);
    assert_int_equal(attn_seq_new(c, &b), ATTN_OK);
    assert_int_equal(fwd(f, c, a, 8, ha, y), ATTN_OK);
    assert_int_equal(fwd(f, c, b, 8, hb, y), ATTN_OK);
    assert_int_equal(attn_cache_publish(c, a, 2, ka), ATTN_OK);
    assert_int_equal(attn_cache_publish(c, b, 2, kb), ATTN_OK);
    assert_int_equal(attn_seq_free(c, a), ATTN_OK); /* idle: a1, a0 */
    assert_int_equal(attn_seq_free(c, b), ATTN_OK); /* then b1, b0 */
    attn_cache_stats st = attn_cache_get_stats(c);
    assert_int_equal(st.blocks_free, 8);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(st.published_blocks, 4);
    /* b's chain used again: it becomes the most recent */
    assert_int_equal(attn_seq_from_prefix(c, 2, kb, &s, &n), ATTN_OK);
    assert_int_equal(n, 8);
    assert_int_equal(attn_seq_free(c, s), ATTN_OK); /* idle: a1, a0, b1, b0 */
    /* 5 blocks: the 4 free ones and a1 */
    assert_int_equal(attn_seq_new(c, &t), ATTN_OK);
    assert_int_equal(fwd(f, c, t, 20, hc, y), ATTN_OK);
    st = attn_cache_get_stats(c);
    assert_int_equal(st.evicted_blocks, 1);
    assert_int_equal(st.published_blocks, 3);
    assert_int_equal(attn_seq_from_prefix(c, 2, ka, &s, &n), ATTN_OK);
    assert_int_equal(n, 4); /* a0 left */
    /* s holds a0; its new block is b1, the least recent idle one */
    continue_and_check(f, c, s, ha, 4, 6, "head of an evicted chain");
    assert_int_equal(attn_cache_get_stats(c).evicted_blocks, 2);
    assert_int_equal(fwd(f, c, t, 4, hc + 20 * D, y), ATTN_OK); /* b0 */
    st = attn_cache_get_stats(c);
    assert_int_equal(st.evicted_blocks, 3);
    assert_int_equal(st.published_blocks, 1);
    assert_int_equal(attn_seq_from_prefix(c, 2, kb, &a, &n), ATTN_OK);
    assert_int_equal(n, 0);
    /* all 8 held, a0 among them: never taken */
    assert_int_equal(fwd(f, c, t, 1, hc, y), ATTN_E_CAPACITY);
    assert_int_equal(attn_seq_free(c, s), ATTN_OK);
    assert_int_equal(attn_seq_from_prefix(c, 2, ka, &b, &n), ATTN_OK);
    assert_int_equal(n, 4);
    attn_cache_free(c);
    free(ha), free(hb), free(hc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fork_then_diverge_equals_two_independent_runs),
        cmocka_unit_test(truncate_then_reappend_equals_fresh_run),
        cmocka_unit_test(capacity_exhaustion_leaves_every_sequence_intact),
        cmocka_unit_test(batched_forward_equals_one_forward_per_sequence),
        cmocka_unit_test(scheduled_batch_is_bitwise_one_call_per_sequence),
        cmocka_unit_test(random_operations_match_a_model_and_the_reference),
        cmocka_unit_test(errors_are_statuses),
        cmocka_unit_test(positions_beyond_max_tokens_are_refused),
        cmocka_unit_test(shared_prefix_batch_equals_unshared),
        cmocka_unit_test(shared_prefix_calls_equal_unshared),
        cmocka_unit_test(prefix_cache_publishes_and_matches),
        cmocka_unit_test(prefix_cache_evicts_least_recently_used),
    };
    const struct CMUnitTest window_tests[] = {
        cmocka_unit_test(sliding_window_stream_keeps_memory_bounded),
        cmocka_unit_test(sliding_window_outputs_match_the_reference),
    };
    const struct CMUnitTest long_window_tests[] = {
        cmocka_unit_test(window_4096_stream_of_100k_tokens_keeps_memory_bounded),
    };
    const struct CMUnitTest chunk_tests[] = {
        cmocka_unit_test(chunked_stream_releases_past_chunks),
    };
    int failed = cmocka_run_group_tests_name("paged", tests, setup, teardown);
    failed += cmocka_run_group_tests_name("chunked", chunk_tests, setup_chunked, teardown);
    failed += cmocka_run_group_tests_name("windowed", window_tests, setup_window, teardown);
    return failed + cmocka_run_group_tests_name("window 4096", long_window_tests, setup_window_4096,
                                                teardown);
}
