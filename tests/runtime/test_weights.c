/* test_weights.c: weights under Hugging Face names: random fill, save and
 * load with a prefix in every dtype, rounding to the spec's dtype, and
 * clear errors for missing or mis-shaped tensors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_kernels.h"
#include "rt.h"
#include "support.h"

static int setup(void **state) {
    *state = tmpdir_new();
    return 0;
}

static int teardown(void **state) {
    tmpdir_remove(*state);
    return 0;
}

static size_t qd(const attn_config *c) {
    return (size_t)(c->heads * c->head_dim);
}

static size_t kvd(const attn_config *c) {
    return (size_t)(c->kv_groups * c->head_dim);
}

static void weights_random_is_deterministic_and_scaled(void **state) {
    (void)state;
    attn_config c = config_small(4, 2, 8, 24);
    c.qkv_bias = c.o_bias = true;
    attn_weights *a, *b, *d;
    assert_int_equal(attn_weights_random(&c, 5, &a, NULL), ATTN_OK);
    assert_int_equal(attn_weights_random(&c, 5, &b, NULL), ATTN_OK);
    assert_int_equal(attn_weights_random(&c, 6, &d, NULL), ATTN_OK);
    size_t n = qd(&c) * (size_t)c.d_model;
    assert_memory_equal(a->wq, b->wq, n * sizeof(float));
    assert_memory_equal(a->bo, b->bo, (size_t)c.d_model * sizeof(float));
    assert_memory_not_equal(a->wq, d->wq, n * sizeof(float));
    double lim = sqrt(3.0 / (double)c.d_model), var = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(fabsf(a->wq[i]) <= lim);
        var += (double)a->wq[i] * a->wq[i];
    }
    var /= (double)n;
    assert_true(var > 0.5 / (double)c.d_model && var < 1.5 / (double)c.d_model);
    for (int64_t i = 0; i < c.d_model; i++)
        assert_true(fabsf(a->bo[i]) <= 0.1f);
    attn_weights_free(a);
    attn_weights_free(b);
    attn_weights_free(d);
}

static void weights_biases_exist_only_when_asked(void **state) {
    (void)state;
    attn_config c = config_small(2, 1, 4, 8);
    attn_weights *w;
    assert_int_equal(attn_weights_new(&c, &w, NULL), ATTN_OK);
    assert_null(w->bq);
    assert_null(w->bo);
    attn_weights_free(w);
    c.qkv_bias = true;
    assert_int_equal(attn_weights_new(&c, &w, NULL), ATTN_OK);
    assert_non_null(w->bq);
    assert_non_null(w->bk);
    assert_non_null(w->bv);
    assert_null(w->bo);
    attn_weights_free(w);
}

static void weights_save_load_round_trip_every_dtype_with_prefix(void **state) {
    const char *dir = *state;
    attn_config c = config_small(6, 3, 8, 20);
    c.qkv_bias = c.o_bias = true;
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 9, &w, NULL), ATTN_OK);
    const char *prefix = "model.layers.0.self_attn.";
    for (int t = 0; t <= ATTN_DTYPE_BF16; t++) { /* the block formats: test_quant.c */
        const char *path = path_in(dir, "w.safetensors");
        attn_msg m;
        assert_int_equal(attn_weights_save(w, path, (attn_dtype)t, prefix, &m), ATTN_OK);
        attn_st *f;
        assert_int_equal(attn_st_open(path, &f, &m), ATTN_OK);
        assert_non_null(attn_st_find(f, "model.layers.0.self_attn.q_proj.weight"));
        assert_non_null(attn_st_find(f, "model.layers.0.self_attn.o_proj.bias"));
        const attn_st_info *k = attn_st_find(f, "model.layers.0.self_attn.k_proj.weight");
        assert_int_equal(k->shape[0], 24);
        assert_int_equal(k->shape[1], 20);
        assert_int_equal(attn_st_find(f, "model.layers.0.self_attn.o_proj.weight")->shape[1], 48);
        attn_st_close(f);
        attn_weights *back;
        assert_int_equal(attn_weights_load(&c, path, prefix, &back, &m), ATTN_OK);
        for (size_t i = 0; i < kvd(&c) * (size_t)c.d_model; i++)
            assert_true(back->wv[i] == rt_round((attn_dtype)t, w->wv[i]));
        for (size_t i = 0; i < kvd(&c); i++)
            assert_true(back->bk[i] == rt_round((attn_dtype)t, w->bk[i]));
        attn_weights_free(back);
        /* without the prefix, the names are not there */
        assert_int_equal(attn_weights_load(&c, path, NULL, &back, &m), ATTN_E_FORMAT);
        assert_non_null(strstr(m.text, "missing tensor 'q_proj.weight'"));
    }
    attn_weights_free(w);
}

/* Loading rounds to the spec's dtype (the kernels keep weights in it, so
 * the reference must see the same numbers): f32 values read under a bf16
 * spec come back rounded, under an f32 spec as stored. */
static void weights_load_rounds_to_the_spec_dtype(void **state) {
    const char *dir = *state;
    attn_config c = config_small(2, 2, 4, 8);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 1, &w, NULL), ATTN_OK);
    const char *path = path_in(dir, "w.safetensors");
    assert_int_equal(attn_weights_save(w, path, ATTN_DTYPE_F32, NULL, NULL), ATTN_OK);
    attn_weights *b;
    assert_int_equal(attn_weights_load(&c, path, NULL, &b, NULL), ATTN_OK);
    assert_memory_equal(b->wq, w->wq, 8 * 8 * sizeof(float));
    attn_weights_free(b);
    c.dtype = ATTN_DTYPE_BF16;
    assert_int_equal(attn_weights_load(&c, path, NULL, &b, NULL), ATTN_OK);
    assert_memory_not_equal(b->wq, w->wq, 8 * 8 * sizeof(float));
    w->cfg.dtype = ATTN_DTYPE_BF16;
    attn_weights_round(w);
    assert_memory_equal(b->wq, w->wq, 8 * 8 * sizeof(float));
    attn_weights_free(w);
    attn_weights_free(b);
}

static void weights_random_are_representable_in_the_spec_dtype(void **state) {
    (void)state;
    for (int t = 0; t <= ATTN_DTYPE_BF16; t++) { /* the block formats: test_quant.c */
        attn_config c = config_small(2, 2, 4, 8);
        c.dtype = (attn_dtype)t;
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, 1, &w, NULL), ATTN_OK);
        for (int i = 0; i < 64; i++)
            assert_true(w->wo[i] == rt_round((attn_dtype)t, w->wo[i]));
        attn_weights_free(w);
    }
}

static void weights_load_names_missing_and_misshaped_tensors(void **state) {
    const char *dir = *state;
    attn_config small = config_small(2, 2, 4, 8), big = config_small(2, 2, 4, 12);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&small, 1, &w, NULL), ATTN_OK);
    const char *path = path_in(dir, "w.safetensors");
    assert_int_equal(attn_weights_save(w, path, ATTN_DTYPE_F16, "p.", NULL), ATTN_OK);
    attn_weights *out = (attn_weights *)0x1;
    attn_msg m;
    assert_int_equal(attn_weights_load(&big, path, "p.", &out, &m), ATTN_E_FORMAT);
    assert_true(out == (attn_weights *)0x1);
    assert_non_null(strstr(m.text, "tensor 'p.q_proj.weight' has shape [8, 8], expected [8, 12]"));
    small.qkv_bias = true;
    assert_int_equal(attn_weights_load(&small, path, "p.", &out, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(m.text, "missing tensor 'p.q_proj.bias'"));
    assert_int_equal(attn_weights_load(&small, path_in(dir, "none"), "p.", &out, &m), ATTN_E_IO);
    attn_weights_free(w);
}

/* QK-norm weights and sinks load under their Hugging Face names, with the
 * shape the scope asks for: a per-head norm's [head_dim] file does not
 * load into a whole-row spec, and the message gives both shapes. */
static void weights_load_qk_norm_and_sinks_by_shape(void **state) {
    const char *dir = *state;
    attn_config c = config_small(2, 1, 4, 8);
    c.qk_norm = ATTN_QK_NORM_HEAD, c.qk_norm_weight = true, c.qk_norm_eps = 1e-6, c.sinks = true;
    attn_weights *w, *b;
    assert_int_equal(attn_weights_random(&c, 3, &w, NULL), ATTN_OK);
    assert_non_null(w->q_norm);
    assert_non_null(w->k_norm);
    assert_non_null(w->sinks);
    const char *path = path_in(dir, "norm.safetensors");
    assert_int_equal(attn_weights_save(w, path, ATTN_DTYPE_F32, "l.", NULL), ATTN_OK);
    assert_int_equal(attn_weights_load(&c, path, "l.", &b, NULL), ATTN_OK);
    assert_memory_equal(b->q_norm, w->q_norm, 4 * sizeof(float));
    assert_memory_equal(b->k_norm, w->k_norm, 4 * sizeof(float));
    assert_memory_equal(b->sinks, w->sinks, 2 * sizeof(float));
    attn_weights_free(b);
    attn_msg m;
    c.qk_norm = ATTN_QK_NORM_ALL;
    assert_int_equal(attn_weights_load(&c, path, "l.", &b, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(m.text, "tensor 'l.q_norm.weight' has shape [4], expected [8]"));
    /* a config of other sizes names the first projection that differs */
    c.qk_norm_weight = false;
    c.heads = 4, c.kv_groups = 1;
    assert_int_equal(attn_weights_load(&c, path, "l.", &b, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(m.text, "tensor 'l.q_proj.weight' has shape [8, 8], expected [16, 8]"));
    c = w->cfg;
    c.qk_norm = ATTN_QK_NORM_NONE, c.sinks = false;
    assert_int_equal(attn_weights_save(w, path, ATTN_DTYPE_F32, "l.", NULL), ATTN_OK);
    c.sinks = true;
    attn_weights_free(w);
    assert_int_equal(attn_weights_random(&c, 3, &w, NULL), ATTN_OK);
    w->cfg.sinks = false;
    free(w->sinks);
    w->sinks = NULL;
    assert_int_equal(attn_weights_save(w, path, ATTN_DTYPE_F32, "l.", NULL), ATTN_OK);
    assert_int_equal(attn_weights_load(&c, path, "l.", &b, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(m.text, "missing tensor 'l.sinks'"));
    attn_weights_free(w);
}

/* The first differing field of two configs, by the field table. */
static void config_differs_names_the_first_field(void **state) {
    (void)state;
    attn_config a = {.name = "x", .heads = 4, .kv_groups = 2, .head_dim = 8, .softcap = 0.0};
    attn_config b = a;
    assert_null(attn_config_differs(&a, &b));
    memset(b.name + 2, 'z', 5); /* bytes past the name's end do not count */
    b.softcap = -0.0;           /* numbers compare as values */
    assert_null(attn_config_differs(&a, &b));
    b.sliding_window = 7;
    b.mla_eps = 1e-6;
    assert_string_equal(attn_config_differs(&a, &b), "sliding_window");
    b.sliding_window = 0;
    assert_string_equal(attn_config_differs(&a, &b), "mla_eps");
}

/* One name table for the kernel table's weight ids, read both ways; the
 * expressions' weight inputs have the names their spec gives them. */
static void weight_names_cover_every_id_both_ways(void **state) {
    (void)state;
    for (int id = 0; id < ATTN_W_INPUT; id++) {
        const char *name = attn_weight_name(id);
        assert_non_null(name);
        assert_int_equal(attn_weight_by_name(name), id);
    }
    assert_string_equal(attn_weight_name(ATTN_W_QKV), "qkv_proj.weight");
    assert_string_equal(attn_weight_name(ATTN_W_KV_B), "kv_b_proj.weight");
    assert_null(attn_weight_name(ATTN_W_INPUT));
    assert_null(attn_weight_name(ATTN_WEIGHT_COUNT));
    assert_null(attn_weight_name(-1));
    assert_int_equal(attn_weight_by_name("q_proj.wieght"), -1);
    assert_int_equal(attn_weight_by_name(NULL), -1);
}

static void weights_reject_invalid_config(void **state) {
    (void)state;
    attn_config c = config_small(6, 4, 8, 16);
    attn_weights *w = NULL;
    attn_msg m;
    assert_int_equal(attn_weights_new(&c, &w, &m), ATTN_E_INVALID);
    assert_null(w);
    assert_non_null(strstr(m.text, "heads (6) must be a multiple of kv_groups (4)"));
}

static void config_check_enforces_every_invariant(void **state) {
    (void)state;
    attn_msg m;
    attn_config ok = config_small(8, 2, 16, 64);
    assert_int_equal(attn_config_check(&ok, &m), ATTN_OK);
    attn_config c;
#define EXPECT_BAD(stmt, want)                                                                     \
    do {                                                                                           \
        c = ok;                                                                                    \
        stmt;                                                                                      \
        assert_int_equal(attn_config_check(&c, &m), ATTN_E_INVALID);                               \
        if (!strstr(m.text, want))                                                                 \
            fail_msg("'%s' lacks '%s'", m.text, want);                                             \
    } while (0)
    EXPECT_BAD(strcpy(c.name, "a-b"), "not a C identifier");
    EXPECT_BAD(c.name[0] = 0, "name must be");
    EXPECT_BAD(c.heads = 0, "heads (0)");
    EXPECT_BAD(c.kv_groups = 3, "heads (8) must be a multiple of kv_groups (3)");
    EXPECT_BAD(c.head_dim = 2000, "head_dim (2000)");
    EXPECT_BAD(c.d_model = 0, "d_model (0)");
    EXPECT_BAD((c.rope_style = ATTN_ROPE_HALF, c.rope_base = 1e4, c.rotary_dim = 7),
               "rotary_dim (7)");
    EXPECT_BAD((c.rope_style = ATTN_ROPE_HALF, c.rope_base = 0.5, c.rotary_dim = 8), "rope base");
    EXPECT_BAD((c.rope_style = ATTN_ROPE_HALF, c.rope_base = 1e4, c.rotary_dim = 8,
                c.rope_scaling = ATTN_SCALING_LLAMA3, c.rope_factor = 8, c.rope_low_freq_factor = 4,
                c.rope_high_freq_factor = 1, c.rope_original_max_position = 8192),
               "low_freq_factor");
    EXPECT_BAD((c.causal = false, c.sliding_window = 4),
               "sliding_window (4) requires causal: true");
    EXPECT_BAD(c.softcap = -1, "softcap");
    EXPECT_BAD(c.scale = 0, "scale");
    EXPECT_BAD(c.kv_max_tokens = 0, "max_tokens");
    EXPECT_BAD(c.kv_block_tokens = 0, "block_tokens");
    EXPECT_BAD(c.dtype = (attn_dtype)7, "dtype");
#undef EXPECT_BAD
    assert_int_equal(attn_config_check(NULL, &m), ATTN_E_INVALID);
}

typedef struct seen {
    int n;
    const char *key[8];
    char text[8][ATTN_MSG_MAX];
} seen;

static void note_problem(const char *key, const char *text, void *user) {
    seen *s = user;
    if (s->n < 8) {
        s->key[s->n] = key;
        snprintf(s->text[s->n], sizeof s->text[0], "%s", text);
    }
    s->n++;
}

/* attn_config_problems: each group's first broken rule with its spec key,
 * the first one attn_config_check's message; broken dims end the walk. */
static void config_problems_name_their_keys(void **state) {
    (void)state;
    attn_config c = config_small(4, 2, 16, 48);
    seen s = {0};
    assert_int_equal(attn_config_problems(&c, note_problem, &s), 0);
    assert_int_equal(s.n, 0);
    c.causal = false, c.sliding_window = 8; /* the mask's group */
    c.dtype = ATTN_DTYPE_Q8_0;              /* d_model 48: the weights' blocks */
    c.kv_dtype = ATTN_DTYPE_Q8_0;           /* head_dim 16: the cache's blocks */
    assert_int_equal(attn_config_problems(&c, note_problem, &s), 3);
    assert_int_equal(s.n, 3);
    const char *keys[] = {"sliding_window", "dtype", "kv_cache.dtype"};
    const char *says[] = {"sliding_window (8) requires causal: true", "d_model (48)",
                          "head_dim (16) must be a multiple of 32"};
    for (int i = 0; i < 3; i++) {
        assert_non_null(s.key[i]);
        assert_string_equal(s.key[i], keys[i]);
        if (!strstr(s.text[i], says[i]))
            fail_msg("problem %d: '%s' lacks '%s'", i, s.text[i], says[i]);
    }
    attn_msg m;
    assert_int_equal(attn_config_check(&c, &m), ATTN_E_INVALID);
    assert_string_equal(m.text, s.text[0]);
    assert_int_equal(attn_config_problems(&c, NULL, NULL), 3); /* no callback: the count */
    /* broken heads end the walk: the later rules would read them */
    c.kv_groups = 3;
    s.n = 0;
    assert_int_equal(attn_config_problems(&c, note_problem, &s), 1);
    assert_string_equal(s.key[0], "kv_groups");
    s.n = 0;
    assert_int_equal(attn_config_problems(NULL, note_problem, &s), 1);
    assert_null(s.key[0]);
    /* what a feature does not go with: every key set on, from one group */
    c = config_small(4, 2, 16, 64);
    c.memory_dim = 32, c.sliding_window = 8; /* causal is on */
    c.rope_style = ATTN_ROPE_HALF, c.rope_base = 10000, c.rotary_dim = 16;
    s.n = 0;
    assert_int_equal(attn_config_problems(&c, note_problem, &s), 3);
    const char *with[] = {"causal", "sliding_window", "rope"};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(s.key[i], with[i]);
        if (!strstr(s.text[i], "does not go with cross_attention"))
            fail_msg("conflict %d: '%s'", i, s.text[i]);
    }
    assert_int_equal(attn_config_check(&c, &m), ATTN_E_INVALID); /* the first of them */
    assert_string_equal(m.text, s.text[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(weights_random_is_deterministic_and_scaled),
        cmocka_unit_test(weights_biases_exist_only_when_asked),
        cmocka_unit_test_setup_teardown(weights_save_load_round_trip_every_dtype_with_prefix, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(weights_load_rounds_to_the_spec_dtype, setup, teardown),
        cmocka_unit_test(weights_random_are_representable_in_the_spec_dtype),
        cmocka_unit_test_setup_teardown(weights_load_names_missing_and_misshaped_tensors, setup,
                                        teardown),
        cmocka_unit_test(weights_reject_invalid_config),
        cmocka_unit_test(weight_names_cover_every_id_both_ways),
        cmocka_unit_test(config_differs_names_the_first_field),
        cmocka_unit_test_setup_teardown(weights_load_qk_norm_and_sinks_by_shape, setup, teardown),
        cmocka_unit_test(config_check_enforces_every_invariant),
        cmocka_unit_test(config_problems_name_their_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
