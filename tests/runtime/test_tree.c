/* test_tree.c: draft trees for speculative decoding (attn_forward_tree,
 * attn_seq_accept). A tree's token i must give what decoding its path
 * from the root alone gives: checked against the kernels fed that path
 * (a fork) and against the reference engine over the sequence's history
 * plus the path; accepting a path and decoding on must equal the
 * reference over the history, the path and the new tokens. Over f32,
 * f16 and q8_0 caches (accept moves their rows), MLA, on 1, 2 and 3
 * threads (bitwise the same), with blocks of 4 tokens so that trees
 * cross block edges. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

#define MAX_ROWS 96

typedef struct fixture {
    char *dir;
    attnc_jit *jit;
    attn_weights *w;
    attn_block *b[3]; /* 1, 2 and 3 threads */
    int64_t D;
    double tol; /* against the reference */
} fixture;

static fixture *make_with(const char *spec_text, double tol, const attnc_options *o) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = tmpdir_new();
    const char *path = path_in(f->dir, "spec.yaml");
    write_file(path, spec_text, strlen(spec_text));
    f->jit = jit_or_fail(path, o);
    const attn_kernels *k = attnc_jit_kernels(f->jit);
    assert_int_equal(attn_weights_random(&k->config, 5, &f->w, NULL), ATTN_OK);
    for (int i = 0; i < 3; i++) {
        attn_block_options bo = attn_block_options_default();
        bo.n_threads = i + 1;
        assert_int_equal(attn_block_new(k, &bo, &f->b[i]), ATTN_OK);
        assert_int_equal(attn_block_set_weights(f->b[i], f->w), ATTN_OK);
    }
    f->D = k->config.d_model;
    f->tol = tol;
    return f;
}

static fixture *make(const char *spec_text, double tol) {
    return make_with(spec_text, tol, NULL);
}

#define F32_SPEC                                                                                   \
    "name: tree_f32\nheads: 4\nkv_groups: 2\nhead_dim: 16\nd_model: 24\n"                          \
    "rope: {base: 10000}\nqkv_bias: true\nkv_cache: {block_tokens: 4, max_tokens: 256}\n"

static int setup_f32(void **state) {
    *state = make(F32_SPEC, 1e-4);
    return 0;
}

/* no pass: the unfused kernels' mask (cg_emit_rowwise) */
static int setup_unfused(void **state) {
    const char *all[16];
    attnc_options o = options_without_passes(all);
    *state = make_with(F32_SPEC, 1e-4, &o);
    return 0;
}

/* AVX2 code (8 lanes) where the host runs it beside AVX-512 */
static int setup_avx2(void **state) {
    attnc_options o = attnc_options_default();
    o.cpu = "x86-64-v3";
    *state = make_with(F32_SPEC, 1e-4, &o);
    return 0;
}

static bool host_runs_v3_and_more(void) {
    uint32_t v3 = ATTN_CPU_AVX | ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_F16C | ATTN_CPU_BMI2;
    return (attn_cpu_features() & v3) == v3 && (attn_cpu_features() & ATTN_CPU_AVX512F);
}

static int setup_f16(void **state) {
    *state = make("name: tree_f16\nheads: 4\nkv_groups: 1\nhead_dim: 32\nd_model: 32\n"
                  "rope: {}\nqk_norm: {type: rms, scope: head}\nsoftcap: 30\n"
                  "kv_cache: {dtype: f16, block_tokens: 4, max_tokens: 256}\n",
                  2e-3);
    return 0;
}

static int setup_q8(void **state) {
    *state = make("name: tree_q8\nheads: 2\nkv_groups: 2\nhead_dim: 32\nd_model: 32\n"
                  "rope: {}\nsinks: true\n"
                  "kv_cache: {dtype: q8_0, block_tokens: 4, max_tokens: 256}\n",
                  3e-2);
    return 0;
}

static int setup_mla(void **state) {
    *state = make("name: tree_mla\nheads: 2\nd_model: 32\nrope: {}\n"
                  "mla: {q_lora_rank: 0, kv_lora_rank: 32, qk_nope_head_dim: 16, "
                  "qk_rope_head_dim: 8, v_head_dim: 16}\n"
                  "kv_cache: {block_tokens: 4, max_tokens: 256}\n",
                  1e-4);
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    for (int i = 0; i < 3; i++)
        attn_block_free(f->b[i]);
    attn_weights_free(f->w);
    attnc_jit_free(f->jit);
    tmpdir_remove(f->dir);
    free(f);
    return 0;
}

/* The reference's output for the last row of hist[0, to). */
static void reference_last(const fixture *f, const float *hist, int64_t to, float *want) {
    attn_ref *r;
    float *all = malloc((size_t)(to * f->D) * sizeof *all);
    assert_int_equal(attn_ref_new(f->w, to, &r, NULL), ATTN_OK);
    assert_int_equal(attn_ref_forward(r, to, hist, all, NULL), ATTN_OK);
    memcpy(want, all + (to - 1) * f->D, (size_t)f->D * sizeof *want);
    attn_ref_free(r);
    free(all);
}

static void assert_near(const float *got, const float *want, size_t n, double tol, const char *what,
                        int i) {
    double e = rel_err(got, want, n);
    if (!(e <= tol))
        fail_msg("%s (token %d): relative error %g", what, i, e);
}

/* Token i's path from its root: path[0..depth], returned length. */
static int path_of(const int32_t *parent, int i, int32_t *path) {
    int n = 0, p = i;
    while (p >= 0)
        n++, p = parent[p];
    for (int j = n - 1, q = i; j >= 0; j--, q = parent[q])
        path[j] = q;
    return n;
}

/* A sequence of cache c holding the first P rows of hist. */
static int32_t prefilled(fixture *f, attn_block *b, attn_cache *c, const float *hist, int32_t P) {
    int32_t s;
    float *y = malloc((size_t)((P + 1) * f->D) * sizeof *y);
    assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    if (P)
        assert_int_equal(attn_forward(b, c, 1, &s, &P, hist, y), ATTN_OK);
    free(y);
    return s;
}

/* One tree of n tokens (parents) over P cached tokens of hist, on every
 * thread count: the same bits; each token equal to its path decoded by a
 * fork and to the reference; then the deepest path accepted and two
 * tokens decoded after it, against the reference. */
static void check_tree(fixture *f, const float *hist, int32_t P, int32_t n, const int32_t *parent,
                       const float *x) {
    int64_t D = f->D;
    float *y[3], want[64], *hp = malloc((size_t)(MAX_ROWS * D) * sizeof *hp);
    float *yp = malloc((size_t)(ATTN_TREE_MAX * D) * sizeof *yp);
    attn_cache *c[3];
    int32_t s[3];
    for (int t = 0; t < 3; t++) {
        y[t] = malloc((size_t)(n * D) * sizeof *y[t]);
        assert_int_equal(attn_cache_new(f->b[t], 256, &c[t]), ATTN_OK);
        s[t] = prefilled(f, f->b[t], c[t], hist, P);
        int64_t before = attn_cache_get_stats(c[t]).blocks_used;
        assert_int_equal(attn_forward_tree(f->b[t], c[t], s[t], n, parent, x, y[t]), ATTN_OK);
        assert_int_equal(attn_seq_len(c[t], s[t]), P); /* the draft waits */
        assert_int_equal(attn_cache_get_stats(c[t]).blocks_used,
                         before + (P + n + 3) / 4 - (P + 3) / 4);
        if (t)
            assert_memory_equal(y[t], y[0], (size_t)(n * D) * sizeof(float));
    }
    /* each token: its path alone, by the kernels and by the reference */
    int32_t path[ATTN_TREE_MAX], deepest = 0, best[ATTN_TREE_MAX];
    memcpy(hp, hist, (size_t)(P * D) * sizeof(float));
    for (int32_t i = 0; i < n; i++) {
        int32_t len = path_of(parent, i, path), other;
        for (int j = 0; j < len; j++)
            memcpy(hp + (P + j) * D, x + path[j] * D, (size_t)D * sizeof(float));
        attn_cache *alone;
        assert_int_equal(attn_cache_new(f->b[1], 256, &alone), ATTN_OK);
        other = prefilled(f, f->b[1], alone, hist, P);
        assert_int_equal(attn_forward(f->b[1], alone, 1, &other, &len, hp + P * D, yp), ATTN_OK);
        assert_near(y[0] + i * D, yp + (len - 1) * D, (size_t)D, 1e-5, "tree vs path decoded", i);
        reference_last(f, hp, P + len, want);
        assert_near(y[0] + i * D, want, (size_t)D, f->tol, "tree vs reference", i);
        attn_cache_free(alone);
        if (len > deepest) {
            deepest = len;
            memcpy(best, path, (size_t)len * sizeof *best);
        }
    }
    /* keep the deepest path, decode two more: the reference over it */
    for (int j = 0; j < deepest; j++)
        memcpy(hp + (P + j) * D, x + best[j] * D, (size_t)D * sizeof(float));
    int32_t two = 2;
    const float *more = x + (n - 2) * D; /* any inputs */
    memcpy(hp + (P + deepest) * D, more, (size_t)(2 * D) * sizeof(float));
    for (int t = 0; t < 3; t++) {
        assert_int_equal(attn_seq_accept(c[t], s[t], deepest, best), ATTN_OK);
        assert_int_equal(attn_seq_len(c[t], s[t]), P + deepest);
        assert_int_equal(attn_cache_get_stats(c[t]).blocks_used, (P + deepest + 3) / 4);
        assert_int_equal(attn_forward(f->b[t], c[t], 1, &s[t], &two, more, yp), ATTN_OK);
        for (int j = 0; j < 2; j++) {
            reference_last(f, hp, P + deepest + 1 + j, want);
            assert_near(yp + j * D, want, (size_t)D, f->tol, "accepted, then decoded", j);
        }
        attn_cache_free(c[t]);
        free(y[t]);
    }
    free(hp), free(yp);
}

/* A random tree of n tokens, depth at most maxd (0-based). */
static void random_tree(uint64_t *rng, int32_t n, int maxd, int32_t *parent) {
    int depth[ATTN_TREE_MAX];
    for (int32_t i = 0; i < n; i++) {
        int32_t p;
        do
            p = (int32_t)((rnd_unit(rng) + 1) / 2 * (i + 1)) - 1;
        while (p > i - 1 || (p >= 0 && depth[p] >= maxd));
        parent[i] = p;
        depth[i] = p < 0 ? 0 : depth[p] + 1;
    }
}

static void trees_equal_their_paths_decoded_alone(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    float *hist = random_floats((size_t)(MAX_ROWS * D), 50),
          *x = random_floats((size_t)(ATTN_TREE_MAX * D), 51);
    /* a chain is plain decoding */
    int32_t chain[6] = {-1, 0, 1, 2, 3, 4};
    check_tree(f, hist, 9, 6, chain, x);
    /* 16 tokens, depth 4: two roots, every token a child of an earlier one */
    int32_t t16[16] = {-1, -1, 0, 0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    check_tree(f, hist, 13, 16, t16, x);
    /* over no cached tokens, over a block edge, and random ones */
    check_tree(f, hist, 0, 16, t16, x);
    uint64_t rng = 52;
    int32_t parent[ATTN_TREE_MAX];
    int32_t sizes[3] = {5, 24, 64}, past[3] = {8, 21, 30};
    for (int i = 0; i < 3; i++) {
        random_tree(&rng, sizes[i], i == 2 ? 6 : 3, parent);
        check_tree(f, hist, past[i], sizes[i], parent, x);
    }
    free(hist), free(x);
}

/* Every refusal names its reason and changes nothing. */
static void errors_leave_the_sequence_as_it_was(void **state) {
    fixture *f = *state;
    int64_t D = f->D;
    attn_block *b = f->b[1];
    float *x = random_floats((size_t)(70 * D), 53), *y = malloc((size_t)(70 * D) * sizeof *y);
    attn_cache *c;
    int32_t s, t, bad[3] = {-1, 1, 0}, low[2] = {-1, -2}, ok[4] = {-1, 0, 0, 2}, big[65];
    assert_int_equal(attn_cache_new(b, 24, &c), ATTN_OK); /* 6 blocks */
    s = prefilled(f, b, c, x, 5);
    attn_cache_stats st0 = attn_cache_get_stats(c);
#define REFUSED(call, status, text)                                                                \
    do {                                                                                           \
        assert_int_equal(call, status);                                                            \
        if (!strstr(attn_cache_error(c), text))                                                    \
            fail_msg("'%s' lacks '%s'", attn_cache_error(c), text);                                \
        assert_int_equal(attn_seq_len(c, s), 5);                                                   \
    } while (0)
    REFUSED(attn_forward_tree(b, c, s, 3, bad, x, y), ATTN_E_INVALID, "parent[1] is 1");
    REFUSED(attn_forward_tree(b, c, s, 2, low, x, y), ATTN_E_INVALID, "parent[1] is -2");
    REFUSED(attn_forward_tree(b, c, s, 0, ok, x, y), ATTN_E_INVALID, "needs 1 to 64 tokens");
    for (int i = 0; i < 65; i++)
        big[i] = i - 1;
    REFUSED(attn_forward_tree(b, c, s, 65, big, x, y), ATTN_E_INVALID, "needs 1 to 64 tokens");
    REFUSED(attn_forward_tree(b, c, 9, 1, ok, x, y), ATTN_E_INVALID, "unknown sequence 9");
    REFUSED(attn_forward_tree(b, c, s, 4, ok, NULL, y), ATTN_E_INVALID, "x and y");
    REFUSED(attn_forward_tree(b, c, s, 20, big, x, y), ATTN_E_CAPACITY,
            "need 5 more blocks, 4 are free");
    REFUSED(attn_seq_accept(c, s, 0, NULL), ATTN_E_INVALID, "no draft tokens");
    assert_int_equal(attn_cache_get_stats(c).blocks_used, st0.blocks_used);
    /* a draft: forwards, forks and trees of s wait for accept */
    assert_int_equal(attn_forward_tree(b, c, s, 4, ok, x, y), ATTN_OK);
    int32_t one = 1;
    REFUSED(attn_forward(b, c, 1, &s, &one, x, y), ATTN_E_INVALID, "has 4 draft tokens");
    REFUSED(attn_seq_fork(c, s, &t), ATTN_E_INVALID, "has 4 draft tokens");
    REFUSED(attn_forward_tree(b, c, s, 1, ok, x, y), ATTN_E_INVALID, "has 4 draft tokens");
    int32_t notpath[2] = {0, 3}, skip[2] = {1}, far[1] = {4};
    REFUSED(attn_seq_accept(c, s, 2, notpath), ATTN_E_INVALID, "keep[1] = 3 has parent 2, not 0");
    REFUSED(attn_seq_accept(c, s, 1, skip), ATTN_E_INVALID, "keep[0] = 1 has parent 0, not -1");
    REFUSED(attn_seq_accept(c, s, 1, far), ATTN_E_INVALID, "keep[0] is 4");
    REFUSED(attn_seq_accept(c, s, 5, ok), ATTN_E_INVALID, "keeps 0 to 4");
    /* keeping none gives the draft's blocks back; so do truncate and free */
    assert_int_equal(attn_seq_accept(c, s, 0, NULL), ATTN_OK);
    assert_int_equal(attn_cache_get_stats(c).blocks_used, st0.blocks_used);
    assert_int_equal(attn_forward_tree(b, c, s, 4, ok, x, y), ATTN_OK);
    assert_int_equal(attn_seq_truncate(c, s, 5), ATTN_OK);
    assert_int_equal(attn_cache_get_stats(c).blocks_used, st0.blocks_used);
    assert_int_equal(attn_forward(b, c, 1, &s, &one, x, y), ATTN_OK);
    assert_int_equal(attn_forward_tree(b, c, s, 4, ok, x, y), ATTN_OK);
    assert_int_equal(attn_seq_free(c, s), ATTN_OK);
    assert_int_equal(attn_cache_get_stats(c).blocks_used, 0);
#undef REFUSED
    attn_cache_free(c);
    free(x), free(y);
}

/* Blocks whose masks measure distances refuse trees, saying why. */
static void windows_chunks_and_alibi_are_refused(void **state) {
    (void)state;
    const char *specs[3][2] = {
        {"name: w\nheads: 2\nhead_dim: 8\nd_model: 16\nsliding_window: 8\n", "sliding_window"},
        {"name: ch\nheads: 2\nhead_dim: 8\nd_model: 16\nchunked_attention: 8\n",
         "chunked_attention"},
        {"name: al\nheads: 2\nhead_dim: 8\nd_model: 16\nalibi: true\n", "alibi"},
    };
    for (int i = 0; i < 3; i++) {
        fixture *f = make(specs[i][0], 1e-4);
        attn_cache *c;
        int32_t s, root = -1;
        float x[16] = {0}, y[16];
        assert_int_equal(attn_cache_new(f->b[0], 16, &c), ATTN_OK);
        assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
        assert_int_equal(attn_forward_tree(f->b[0], c, s, 1, &root, x, y), ATTN_E_INVALID);
        assert_non_null(strstr(attn_cache_error(c), specs[i][1]));
        assert_non_null(attn_tree_unsupported(&f->w->cfg));
        attn_cache_free(c);
        teardown((void **)&f);
    }
}

int main(void) {
    const struct CMUnitTest f32_tests[] = {
        cmocka_unit_test(trees_equal_their_paths_decoded_alone),
        cmocka_unit_test(errors_leave_the_sequence_as_it_was),
        cmocka_unit_test(windows_chunks_and_alibi_are_refused),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(trees_equal_their_paths_decoded_alone),
    };
    int failed = cmocka_run_group_tests_name("f32 cache", f32_tests, setup_f32, teardown);
    failed += cmocka_run_group_tests_name("unfused", tests, setup_unfused, teardown);
    if (host_runs_v3_and_more())
        failed += cmocka_run_group_tests_name("avx2 code", tests, setup_avx2, teardown);
    else
        printf("avx2 code: skipped, this CPU has no AVX-512 beside AVX2 (the f32 group ran its "
               "own code)\n");
    failed += cmocka_run_group_tests_name("f16 cache", tests, setup_f16, teardown);
    failed += cmocka_run_group_tests_name("q8_0 cache", tests, setup_q8, teardown);
    return failed + cmocka_run_group_tests_name("mla", tests, setup_mla, teardown);
}
