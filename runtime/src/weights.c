/* weights.c: a block's weights in f32 Hugging Face layout: allocation,
 * deterministic random fill, and safetensors load/save under the names
 * q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight (+ .bias). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

enum { W_Q, W_K, W_V, W_O, B_Q, B_K, B_V, B_O, N_Q, N_K, SINKS, W_COUNT };

static const char *const w_names[W_COUNT] = {
    "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
    "q_proj.bias",   "k_proj.bias",   "v_proj.bias",   "o_proj.bias",
    "q_norm.weight", "k_norm.weight", "sinks",
};

static float **slot(attn_weights *w, int i) {
    float **s[W_COUNT] = {&w->wq, &w->wk, &w->wv, &w->wo,     &w->bq,   &w->bk,
                          &w->bv, &w->bo, &w->q_norm, &w->k_norm, &w->sinks};
    return s[i];
}

/* Shape of tensor i for c (Linear layout [out, in]); 0 dims if absent. */
static int w_shape(const attn_config *c, int i, int64_t shape[2]) {
    int64_t q = c->heads * c->head_dim, kv = c->kv_groups * c->head_dim;
    switch (i) {
    case W_Q: shape[0] = q, shape[1] = c->d_model; return 2;
    case W_K:
    case W_V: shape[0] = kv, shape[1] = c->d_model; return 2;
    case W_O: shape[0] = c->d_model, shape[1] = q; return 2;
    case B_Q: shape[0] = q; return c->qkv_bias;
    case B_K:
    case B_V: shape[0] = kv; return c->qkv_bias;
    case B_O: shape[0] = c->d_model; return c->o_bias;
    case N_Q:
    case N_K:
        shape[0] = c->qk_norm == ATTN_QK_NORM_HEAD ? c->head_dim : i == N_Q ? q : kv;
        return c->qk_norm != ATTN_QK_NORM_NONE && c->qk_norm_weight;
    case SINKS: shape[0] = c->heads; return c->sinks;
    }
    return 0;
}

static size_t w_numel(const attn_config *c, int i) {
    int64_t sh[2] = {1, 1};
    int nd = w_shape(c, i, sh);
    return nd == 0 ? 0 : nd == 1 ? (size_t)sh[0] : (size_t)(sh[0] * sh[1]);
}

void attn_weights_free(attn_weights *w) {
    if (!w)
        return;
    for (int i = 0; i < W_COUNT; i++)
        free(*slot(w, i));
    free(w);
}

attn_status attn_weights_new(const attn_config *cfg, attn_weights **out, attn_msg *m) {
    if (!out)
        return rt_fail(m, ATTN_E_INVALID, "attn_weights_new: out is NULL");
    attn_status st = attn_config_check(cfg, m);
    if (st)
        return st;
    attn_weights *w = calloc(1, sizeof *w);
    if (!w)
        return rt_fail(m, ATTN_E_NOMEM, "out of memory allocating weights");
    w->cfg = *cfg;
    for (int i = 0; i < W_COUNT; i++) {
        size_t n = w_numel(cfg, i);
        if (n && !(*slot(w, i) = calloc(n, sizeof(float)))) {
            attn_weights_free(w);
            return rt_fail(m, ATTN_E_NOMEM, "out of memory allocating %s (%zu floats)",
                           w_names[i], n);
        }
    }
    *out = w;
    return ATTN_OK;
}

void attn_weights_round(attn_weights *w) {
    if (!w || w->cfg.dtype == ATTN_DTYPE_F32)
        return;
    for (int i = 0; i < W_COUNT; i++) {
        float *p = *slot(w, i);
        size_t n = w_numel(&w->cfg, i);
        for (size_t j = 0; j < n; j++)
            p[j] = rt_round(w->cfg.dtype, p[j]);
    }
}

/* splitmix64: a tiny, well-mixed, reproducible generator. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void attn_random_uniform(uint64_t *state, float *x, size_t n, double a) {
    for (size_t i = 0; i < n; i++) {
        double u = (double)(next_u64(state) >> 11) * 0x1p-53;
        x[i] = (float)((2 * u - 1) * a);
    }
}

attn_status attn_weights_random(const attn_config *cfg, uint64_t seed, attn_weights **out,
                                attn_msg *m) {
    attn_weights *w = NULL;
    attn_status st = attn_weights_new(cfg, &w, m);
    if (st)
        return st;
    uint64_t s = seed;
    for (int i = 0; i < W_COUNT; i++) {
        int64_t sh[2] = {1, 1};
        int nd = w_shape(cfg, i, sh);
        /* variance 1/fan_in for weights keeps activations O(1); norm
         * weights around 1 (their factor, with offset 1 too), sinks in
         * [-1, 1] */
        double a = nd == 2 ? sqrt(3.0 / (double)sh[1]) : i == SINKS ? 1.0 : i >= N_Q ? 0.5 : 0.1;
        float *p = *slot(w, i);
        size_t n = w_numel(cfg, i);
        attn_random_uniform(&s, p, n, a);
        for (size_t j = 0; (i == N_Q || i == N_K) && cfg->qk_norm_offset == 0 && j < n; j++)
            p[j] += 1.0f;
    }
    attn_weights_round(w);
    *out = w;
    return ATTN_OK;
}

attn_status attn_check_finite(const float *x, size_t n, const char *what, attn_msg *m) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return rt_fail(m, ATTN_E_FORMAT, "%s holds %s at element %zu", what,
                           isnan(x[i]) ? "NaN" : "infinity", i);
    return ATTN_OK;
}

attn_status attn_weights_check_finite(const attn_weights *w, attn_msg *m) {
    if (!w)
        return rt_fail(m, ATTN_E_INVALID, "attn_weights_check_finite: NULL weights");
    for (int i = 0; i < W_COUNT; i++) {
        char what[64];
        snprintf(what, sizeof what, "tensor '%s'", w_names[i]);
        attn_status st = attn_check_finite(*slot((attn_weights *)w, i), w_numel(&w->cfg, i), what, m);
        if (st)
            return st;
    }
    return ATTN_OK;
}

static bool full_name(char *buf, size_t n, const char *prefix, int i) {
    return (size_t)snprintf(buf, n, "%s%s", prefix ? prefix : "", w_names[i]) < n;
}

attn_status attn_weights_load(const attn_config *cfg, const char *path, const char *prefix,
                              attn_weights **out, attn_msg *m) {
    if (!path || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_weights_load: NULL argument");
    attn_weights *w = NULL;
    attn_st *f = NULL;
    attn_status st = attn_weights_new(cfg, &w, m);
    if (st || (st = attn_st_open(path, &f, m)))
        goto fail;
    for (int i = 0; i < W_COUNT; i++) {
        int64_t sh[2];
        int nd = w_shape(cfg, i, sh);
        char name[512];
        if (!nd)
            continue;
        if (!full_name(name, sizeof name, prefix, i)) {
            st = rt_fail(m, ATTN_E_INVALID, "prefix too long (%zu bytes)", strlen(prefix));
            goto fail;
        }
        if ((st = attn_st_read_f32(f, name, nd, sh, *slot(w, i), m)))
            goto fail;
    }
    attn_st_close(f);
    attn_weights_round(w); /* the dtype the kernels keep them in (no-op when stored in it) */
    *out = w;
    return ATTN_OK;
fail:
    attn_st_close(f);
    attn_weights_free(w);
    return st;
}

attn_status attn_weights_save(const attn_weights *w, const char *path, attn_dtype dtype,
                              const char *prefix, attn_msg *m) {
    if (!w || !path || (unsigned)dtype >= ATTN_DTYPE_COUNT)
        return rt_fail(m, ATTN_E_INVALID, "attn_weights_save: bad argument");
    attn_st_tensor t[W_COUNT];
    char names[W_COUNT][512];
    int n = 0;
    for (int i = 0; i < W_COUNT; i++) {
        int64_t sh[2] = {0, 0};
        int nd = w_shape(&w->cfg, i, sh);
        if (!nd)
            continue;
        if (!full_name(names[n], sizeof names[n], prefix, i))
            return rt_fail(m, ATTN_E_INVALID, "prefix too long (%zu bytes)", strlen(prefix));
        t[n] = (attn_st_tensor){.name = names[n], .dtype = dtype, .ndim = nd,
                                .shape = {sh[0], sh[1]}, .data = *slot((attn_weights *)w, i)};
        n++;
    }
    return attn_st_write(path, t, n, m);
}
