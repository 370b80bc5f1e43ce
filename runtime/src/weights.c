/* weights.c: a block's weights in f32 Hugging Face layout: allocation,
 * deterministic random fill, save under the names q_proj.weight,
 * k_proj.weight, v_proj.weight, o_proj.weight (+ .bias), and loading from
 * checkpoints in every layout (the names and fused row orders of each
 * family) and from GGUF files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
#include "attn_kernels.h"
#include "rt.h"

/* The logical tensors are the kernel table's weight ids (attn_kernels.h),
 * named by attn_weight_name; attn_weights keeps q, k and v apart, so the
 * fused ATTN_W_QKV and ATTN_B_QKV hold nothing here (no shape, no slot). */

/* The names of the kernel table's weights in a checkpoint of layout llama
 * (Hugging Face's q_proj, ...; DeepseekV3Attention's for MLA), the names
 * attnc ir prints. */
static const char *const weight_names[ATTN_WEIGHT_COUNT] = {
    [ATTN_W_Q] = "q_proj.weight",
    [ATTN_W_K] = "k_proj.weight",
    [ATTN_W_V] = "v_proj.weight",
    [ATTN_W_O] = "o_proj.weight",
    [ATTN_B_Q] = "q_proj.bias",
    [ATTN_B_K] = "k_proj.bias",
    [ATTN_B_V] = "v_proj.bias",
    [ATTN_B_O] = "o_proj.bias",
    [ATTN_W_QKV] = "qkv_proj.weight",
    [ATTN_B_QKV] = "qkv_proj.bias",
    [ATTN_W_Q_NORM] = "q_norm.weight",
    [ATTN_W_K_NORM] = "k_norm.weight",
    [ATTN_W_SINKS] = "sinks",
    /* modeling_deepseek_v3.py, DeepseekV3Attention */
    [ATTN_W_Q_A] = "q_a_proj.weight",
    [ATTN_W_Q_A_NORM] = "q_a_layernorm.weight",
    [ATTN_W_Q_B] = "q_b_proj.weight",
    [ATTN_W_KV_A] = "kv_a_proj_with_mqa.weight",
    [ATTN_W_KV_A_NORM] = "kv_a_layernorm.weight",
    [ATTN_W_KV_B] = "kv_b_proj.weight",
};

const char *attn_weight_name(int id) {
    return id >= 0 && id < ATTN_WEIGHT_COUNT ? weight_names[id] : NULL;
}

int attn_weight_by_name(const char *name) {
    for (int i = 0; name && i < ATTN_W_INPUT; i++) /* an input's name is its spec's */
        if (strcmp(name, weight_names[i]) == 0)
            return i;
    return -1;
}

static float **slot(attn_weights *w, int i) {
    static float *none; /* the fused ids: always NULL */
    float **s[ATTN_WEIGHT_COUNT] = {
        [ATTN_W_Q] = &w->wq,
        [ATTN_W_K] = &w->wk,
        [ATTN_W_V] = &w->wv,
        [ATTN_W_O] = &w->wo,
        [ATTN_B_Q] = &w->bq,
        [ATTN_B_K] = &w->bk,
        [ATTN_B_V] = &w->bv,
        [ATTN_B_O] = &w->bo,
        [ATTN_W_QKV] = &none,
        [ATTN_B_QKV] = &none,
        [ATTN_W_Q_NORM] = &w->q_norm,
        [ATTN_W_K_NORM] = &w->k_norm,
        [ATTN_W_SINKS] = &w->sinks,
        [ATTN_W_Q_A] = &w->wq_a,
        [ATTN_W_Q_A_NORM] = &w->q_a_norm,
        [ATTN_W_Q_B] = &w->wq_b,
        [ATTN_W_KV_A] = &w->wkv_a,
        [ATTN_W_KV_A_NORM] = &w->kv_a_norm,
        [ATTN_W_KV_B] = &w->wkv_b,
    };
    return i >= ATTN_W_INPUT ? &w->input[i - ATTN_W_INPUT] : s[i];
}

/* The MLA tensors' shapes; 0 dims if absent. */
static int mla_shape(const attn_config *c, int i, int64_t shape[2]) {
    int64_t ql = c->mla_q_lora_rank, kvl = c->mla_kv_lora_rank, D = c->d_model;
    switch (i) {
    case ATTN_W_Q: shape[0] = c->heads * c->head_dim, shape[1] = D; return ql ? 0 : 2;
    case ATTN_W_O: shape[0] = D, shape[1] = c->heads * c->mla_v_head_dim; return 2;
    case ATTN_B_O: shape[0] = D; return c->o_bias;
    case ATTN_W_Q_A: shape[0] = ql, shape[1] = D; return ql ? 2 : 0;
    case ATTN_W_Q_A_NORM: shape[0] = ql; return ql ? 1 : 0;
    case ATTN_W_Q_B: shape[0] = c->heads * c->head_dim, shape[1] = ql; return ql ? 2 : 0;
    case ATTN_W_KV_A: shape[0] = kvl + c->mla_qk_rope_head_dim, shape[1] = D; return 2;
    case ATTN_W_KV_A_NORM: shape[0] = kvl; return 1;
    case ATTN_W_KV_B:
        shape[0] = c->heads * (c->mla_qk_nope_head_dim + c->mla_v_head_dim), shape[1] = kvl;
        return 2;
    }
    return 0;
}

static bool is_matrix(int i) {
    return i == ATTN_W_Q || i == ATTN_W_K || i == ATTN_W_V || i == ATTN_W_O || i == ATTN_W_Q_A ||
           i == ATTN_W_Q_B || i == ATTN_W_KV_A || i == ATTN_W_KV_B;
}

static const char *source_name(const attn_config *c, bool gguf, int i, bool fused_gguf, int *which);

/* Tensor i's name in messages: the kernel table's, an input's own. */
static const char *label(const attn_config *c, int i) {
    int which;
    return i >= ATTN_W_INPUT ? source_name(c, false, i, false, &which) : attn_weight_name(i);
}

/* Weight input i - ATTN_W_INPUT of c: its shape and rank, 0 if it is not
 * one (or a token or sequence input); its name into name when not NULL. */
static int input_shape(const attn_config *c, int i, int64_t shape[2], char *name) {
    attn_inputs in;
    int k = i - ATTN_W_INPUT;
    if (!c->inputs[0] || strnlen(c->inputs, ATTN_EXPR_TEXT_MAX) == ATTN_EXPR_TEXT_MAX ||
        attn_inputs_parse(c->inputs, &in, NULL) != ATTN_OK || k >= in.n ||
        in.in[k].per != ATTN_INPUT_WEIGHT)
        return 0;
    shape[0] = in.in[k].dims[0];
    shape[1] = in.in[k].dims[1];
    if (name)
        memcpy(name, in.name[k], ATTN_NAME_MAX);
    return in.in[k].rank;
}

/* Shape of tensor i for c (Linear layout [out, in]); 0 dims if absent. */
static int w_shape(const attn_config *c, int i, int64_t shape[2]) {
    int64_t q = c->heads * c->head_dim, kv = c->kv_groups * c->head_dim;
    if (i >= ATTN_W_INPUT)
        return input_shape(c, i, shape, NULL);
    if (c->mla_kv_lora_rank > 0)
        return mla_shape(c, i, shape);
    switch (i) {
    case ATTN_W_Q: shape[0] = q, shape[1] = c->d_model; return 2;
    case ATTN_W_K: /* cross-attention: K and V from the memory */
    case ATTN_W_V:
        shape[0] = kv, shape[1] = c->memory_dim > 0 ? c->memory_dim : c->d_model;
        return 2;
    case ATTN_W_O: shape[0] = c->d_model, shape[1] = q; return 2;
    case ATTN_B_Q: shape[0] = q; return c->qkv_bias;
    case ATTN_B_K: shape[0] = kv; return c->qkv_bias && !c->no_k_bias;
    case ATTN_B_V: shape[0] = kv; return c->qkv_bias;
    case ATTN_B_O: shape[0] = c->d_model; return c->o_bias;
    case ATTN_W_Q_NORM:
    case ATTN_W_K_NORM:
        shape[0] = c->qk_norm == ATTN_QK_NORM_HEAD ? c->head_dim : i == ATTN_W_Q_NORM ? q : kv;
        return c->qk_norm != ATTN_QK_NORM_NONE && c->qk_norm_weight;
    case ATTN_W_SINKS: shape[0] = c->heads; return c->sinks;
    }
    return 0;
}

/* The longest row of the projection matrices. */
static int64_t w_cols_max(const attn_config *c) {
    int64_t most = 1;
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++) {
        int64_t sh[2] = {0, 0};
        if (is_matrix(i) && w_shape(c, i, sh) == 2 && sh[1] > most)
            most = sh[1];
    }
    return most;
}

static size_t w_numel(const attn_config *c, int i) {
    int64_t sh[2] = {1, 1};
    int nd = w_shape(c, i, sh);
    return nd == 0 ? 0 : nd == 1 ? (size_t)sh[0] : (size_t)(sh[0] * sh[1]);
}

/* Tensor i of shard S (of the whole block F) from F's tensor src, both
 * in dtype dt: q, k, v and their biases and sinks by rows of the shard's
 * heads; o_proj by its columns; the o bias in shard 0 (zero elsewhere);
 * norm weights per head as they are (attn_config_check refuses a norm
 * over the whole projection). MLA: q_b_proj and kv_b_proj by rows of the
 * shard's heads, the latents' projections and norms whole. A block
 * format's rows are cut only at multiples of 32 (attn_config_check:
 * heads * head_dim, heads * v_head_dim). */
static void slice_part(const attn_config *F, const attn_config *S, int i, attn_dtype dt,
                       const unsigned char *src, unsigned char *dst) {
    int64_t fs[2] = {1, 1}, ss[2] = {1, 1};
    int nd = w_shape(F, i, fs);
    w_shape(S, i, ss);
    int64_t cols = nd == 2 ? fs[1] : 1, rows = ss[0], I = S->shard_index;
    size_t row = attn_dtype_bytes(dt, cols);
    if (i >= ATTN_W_INPUT) { /* an expression's weight: whole (h is global in a shard) */
        memcpy(dst, src, (size_t)rows * row);
        return;
    }
    switch (i) {
    case ATTN_W_O: /* [d_model, heads * head_dim]: the shard's columns */
        for (int64_t r = 0; r < fs[0]; r++)
            memcpy(dst + (size_t)r * attn_dtype_bytes(dt, ss[1]),
                   src + (size_t)r * row + attn_dtype_bytes(dt, I * ss[1]),
                   attn_dtype_bytes(dt, ss[1]));
        return;
    case ATTN_B_O:
        if (I == 0)
            memcpy(dst, src, (size_t)rows * row);
        else
            memset(dst, 0, (size_t)rows * row);
        return;
    case ATTN_W_Q_A: /* MLA: what every head reads, whole in every shard */
    case ATTN_W_Q_A_NORM:
    case ATTN_W_KV_A:
    case ATTN_W_KV_A_NORM: memcpy(dst, src, (size_t)rows * row); return;
    case ATTN_W_Q_NORM:
    case ATTN_W_K_NORM:
        if (F->qk_norm == ATTN_QK_NORM_HEAD) {
            memcpy(dst, src, (size_t)rows * row);
            return;
        }
        break;
    default: break;
    }
    memcpy(dst, src + (size_t)(I * rows) * row, (size_t)rows * row); /* rows I*rows.. */
}

static attn_status gather_one(rt_src *s, const attn_config *c, const char *prefix, int i,
                              bool check_finite, attn_dtype to, unsigned char *dst, attn_msg *m);

/* Fills dst with tensor i of c (a shard: gathered whole from s, then
 * sliced) in dtype `to`; dst NULL only checks. */
static attn_status gather_part(rt_src *s, const attn_config *c, const char *prefix, int i,
                               bool check_finite, attn_dtype to, unsigned char *dst, attn_msg *m) {
    if (c->shard_count <= 1)
        return gather_one(s, c, prefix, i, check_finite, to, dst, m);
    attn_config whole = rt_config_whole(c);
    if (!dst)
        return gather_one(s, &whole, prefix, i, check_finite, to, NULL, m);
    unsigned char *all = malloc(attn_dtype_bytes(to, (int64_t)w_numel(&whole, i)));
    if (!all)
        return rt_fail(m, ATTN_E_NOMEM, "out of memory loading '%s'", label(c, i));
    attn_status st = gather_one(s, &whole, prefix, i, check_finite, to, all, m);
    if (!st)
        slice_part(&whole, c, i, to, all, dst);
    free(all);
    return st;
}

attn_status attn_weights_shard(const attn_weights *full, int64_t index, int64_t count,
                               attn_weights **out, attn_msg *m) {
    if (!full || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_weights_shard: NULL argument");
    attn_config sc;
    attn_weights *w = NULL;
    attn_status st = attn_config_shard(&full->cfg, index, count, &sc, m);
    if (st || (st = attn_weights_new(&sc, &w, m)))
        return st;
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++) {
        if (!w_numel(&sc, i))
            continue;
        const unsigned char *src = (const unsigned char *)*slot((attn_weights *)full, i);
        if (sc.shard_count > 1)
            slice_part(&full->cfg, &sc, i, ATTN_DTYPE_F32, src, (unsigned char *)*slot(w, i));
        else
            memcpy(*slot(w, i), src, w_numel(&sc, i) * sizeof(float));
    }
    *out = w;
    return ATTN_OK;
}

void attn_weights_free(attn_weights *w) {
    if (!w)
        return;
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++)
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
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++) {
        size_t n = w_numel(cfg, i);
        float **p = slot(w, i);
        if (n && (*p = rt_alloc_heap(n * sizeof(float)))) /* huge pages: fewer faults */
            memset(*p, 0, n * sizeof(float));
        else if (n) {
            attn_weights_free(w);
            return rt_fail(m, ATTN_E_NOMEM, "out of memory allocating %s (%zu floats)",
                           label(cfg, i), n);
        }
    }
    *out = w;
    return ATTN_OK;
}

/* Matrix i of c (f32 at p) to values of c's block dtype, row by row
 * through its blocks (non-finite rows stay); blk holds a row's blocks. */
static void round_matrix(const attn_config *c, int i, float *p, unsigned char *blk) {
    int64_t sh[2];
    if (!is_matrix(i) || w_shape(c, i, sh) != 2)
        return;
    for (int64_t r = 0; r < sh[0]; r++) {
        float *row = p + r * sh[1];
        if (rt_quant_row_exact(c->dtype, row, blk, sh[1]) < 0)
            rt_dequant_row(c->dtype, blk, row, sh[1]);
    }
}

void attn_weights_round(attn_weights *w) {
    if (!w || w->cfg.dtype == ATTN_DTYPE_F32)
        return;
    attn_dtype dt = w->cfg.dtype;
    if (rt_quant_block_bytes(dt)) { /* the matrices' rows through their blocks */
        unsigned char *blk = malloc(attn_dtype_bytes(dt, w_cols_max(&w->cfg)));
        for (int i = 0; blk && i < ATTN_WEIGHT_COUNT; i++)
            round_matrix(&w->cfg, i, *slot(w, i), blk);
        free(blk);
        return;
    }
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++) {
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
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++) {
        int64_t sh[2] = {1, 1};
        int nd = w_shape(cfg, i, sh);
        /* variance 1/fan_in for weights keeps activations O(1); norm
         * weights around 1 (their factor, with offset 1 too), sinks in
         * [-1, 1] */
        bool norm = i == ATTN_W_Q_NORM || i == ATTN_W_K_NORM || i == ATTN_W_Q_A_NORM ||
                    i == ATTN_W_KV_A_NORM;
        double a = nd == 2 ? sqrt(3.0 / (double)sh[1]) : i == ATTN_W_SINKS ? 1.0 : norm ? 0.5 : 0.1;
        float *p = *slot(w, i);
        size_t n = w_numel(cfg, i);
        attn_random_uniform(&s, p, n, a);
        for (size_t j = 0; norm && cfg->qk_norm_offset == 0 && j < n; j++)
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
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++) {
        char what[64];
        snprintf(what, sizeof what, "tensor '%s'", label(&w->cfg, i));
        attn_status st =
            attn_check_finite(*slot((attn_weights *)w, i), w_numel(&w->cfg, i), what, m);
        if (st)
            return st;
    }
    return ATTN_OK;
}

/* ---- checkpoints: each layout's names and row orders ---------------------- */

/* The row of the fused q/k/v tensor that holds row r of q (which 0), k (1)
 * or v (2), in the order of each family's Hugging Face modeling file:
 * - phi3 (modeling_phi3.py Phi3Attention.forward, and llama.cpp's GGUF
 *   attn_qkv for every family): [q; k; v];
 * - falcon (modeling_falcon.py FalconAttention._split_heads): one block per
 *   K/V group, its heads/kv_groups query heads, then its k head, then its
 *   v head; with one group (multi_query) that is [q; k; v] again, with a
 *   group per head it is the per-head [q; k; v] of the old architecture;
 * - neox (modeling_gpt_neox.py: view(..., heads, 3 * head_size) then
 *   chunk(3)) and bloom (modeling_bloom.py BloomAttention._reshape: view
 *   (..., heads, 3, head_dim)): per head [q; k; v], the falcon order with
 *   one group per head (both need kv_groups == heads). */
static int64_t qkv_row(const attn_config *c, bool gguf, int which, int64_t r) {
    int64_t hd = c->head_dim, qd = c->heads * hd, kvd = c->kv_groups * hd;
    if (gguf || c->weights_layout == ATTN_LAYOUT_PHI3)
        return which == 0 ? r : which == 1 ? qd + r : qd + kvd + r;
    int64_t per = c->heads / c->kv_groups, blk = (per + 2) * hd, i = r % hd;
    if (which == 0)
        return (r / hd / per) * blk + (r / hd % per) * hd + i;
    return (r / hd) * blk + (per + which - 1) * hd + i;
}

/* The tensor holding logical tensor i in a checkpoint: its name after the
 * prefix, and whether it is the fused q/k/v tensor (which: 0 q, 1 k, 2 v). */
static const char *source_name(const attn_config *c, bool gguf, int i, bool fused_gguf,
                               int *which) {
    /* llama.cpp's names (llama-arch.cpp LLM_TENSOR_ATTN_*; MLA: deepseek2's,
     * kv_b unsplit, as its converter wrote DeepSeek-V2 files) */
    static const char *const ggml[ATTN_WEIGHT_COUNT] = {
        [ATTN_W_Q] = "attn_q.weight",
        [ATTN_W_K] = "attn_k.weight",
        [ATTN_W_V] = "attn_v.weight",
        [ATTN_W_O] = "attn_output.weight",
        [ATTN_B_Q] = "attn_q.bias",
        [ATTN_B_K] = "attn_k.bias",
        [ATTN_B_V] = "attn_v.bias",
        [ATTN_B_O] = "attn_output.bias",
        [ATTN_W_QKV] = "attn_qkv.weight",
        [ATTN_B_QKV] = "attn_qkv.bias",
        [ATTN_W_Q_NORM] = "attn_q_norm.weight",
        [ATTN_W_K_NORM] = "attn_k_norm.weight",
        [ATTN_W_SINKS] = "attn_sinks.weight",
        [ATTN_W_Q_A] = "attn_q_a.weight",
        [ATTN_W_Q_A_NORM] = "attn_q_a_norm.weight",
        [ATTN_W_Q_B] = "attn_q_b.weight",
        [ATTN_W_KV_A] = "attn_kv_a_mqa.weight",
        [ATTN_W_KV_A_NORM] = "attn_kv_a_norm.weight",
        [ATTN_W_KV_B] = "attn_kv_b.weight",
    };
    if (i >= ATTN_W_INPUT) { /* the input's own name, in every layout and in GGUF */
        static _Thread_local char name[ATTN_NAME_MAX];
        int64_t sh[2];
        *which = -1;
        return input_shape(c, i, sh, name) ? name : "input";
    }
    bool qkv = i == ATTN_W_Q || i == ATTN_W_K || i == ATTN_W_V || i == ATTN_B_Q || i == ATTN_B_K ||
               i == ATTN_B_V;
    bool bias = i >= ATTN_B_Q && i <= ATTN_B_O;
    *which = qkv ? (i - (bias ? ATTN_B_Q : ATTN_W_Q)) : -1;
    if (gguf) {
        if (qkv && fused_gguf)
            return bias ? "attn_qkv.bias" : "attn_qkv.weight";
        *which = -1;
        return ggml[i];
    }
    switch (c->weights_layout) {
    case ATTN_LAYOUT_GPTJ:
        *which = -1;
        return i == ATTN_W_O   ? "out_proj.weight"
               : i == ATTN_B_O ? "out_proj.bias"
                               : attn_weight_name(i);
    case ATTN_LAYOUT_NEOX:
    case ATTN_LAYOUT_FALCON:
    case ATTN_LAYOUT_BLOOM:
        if (qkv)
            return bias ? "query_key_value.bias" : "query_key_value.weight";
        return i == ATTN_W_O ? "dense.weight" : i == ATTN_B_O ? "dense.bias" : attn_weight_name(i);
    case ATTN_LAYOUT_PHI3:
        if (qkv)
            return bias ? "qkv_proj.bias" : "qkv_proj.weight";
        return attn_weight_name(i);
    default: *which = -1; return attn_weight_name(i);
    }
}

/* n f32 values as dtype to into dst (rounded to nearest even, or
 * quantized by rows of n). -1, or the index of a value the block formats
 * cannot take (rt_quant_row). */
static int64_t from_f32(const float *src, attn_dtype to, void *dst, int64_t n) {
    if (rt_quant_block_bytes(to))
        return rt_quant_row_exact(to, src, dst, n);
    uint16_t *h = dst;
    if (to == ATTN_DTYPE_F32)
        memcpy(dst, src, (size_t)n * sizeof *src);
    else if (to == ATTN_DTYPE_F16)
        for (int64_t j = 0; j < n; j++)
            h[j] = rt_f32_to_f16(src[j]);
    else
        for (int64_t j = 0; j < n; j++)
            h[j] = rt_f32_to_bf16(src[j]);
    return -1;
}

static attn_status missing(rt_src *s, const attn_config *c, const char *prefix, const char *name,
                           const char *local, attn_msg *m) {
    char other[400];
    const char *p = prefix ? prefix : "";
    if (rt_src_suggest(s, p, local, other, sizeof other))
        return rt_fail(m, ATTN_E_FORMAT, "%s: missing tensor '%s'; did you mean --prefix %s?",
                       rt_src_path(s), name, other[0] ? other : "''");
    if (rt_src_is_gguf(s))
        return rt_fail(m, ATTN_E_FORMAT, "%s: missing tensor '%s' (llama.cpp's name)",
                       rt_src_path(s), name);
    return rt_fail(m, ATTN_E_FORMAT, "%s: missing tensor '%s' (weights.layout %s)", rt_src_path(s),
                   name, attn_layout_name(c->weights_layout));
}

/* Logical tensor i of c from s into dst, as dtype to. */
static attn_status gather_one(rt_src *s, const attn_config *c, const char *prefix, int i,
                              bool check_finite, attn_dtype to, unsigned char *dst, attn_msg *m) {
    bool gguf = rt_src_is_gguf(s);
    int which;
    const char *p = prefix ? prefix : "";
    const char *local = source_name(c, gguf, i, false, &which);
    char name[600];
    if ((size_t)snprintf(name, sizeof name, "%s%s", p, local) >= sizeof name)
        return rt_fail(m, ATTN_E_INVALID, "prefix too long (%zu bytes)", strlen(p));
    rt_tensor t;
    attn_status st = rt_src_find(s, name, &t, m);
    bool qkv_part = i == ATTN_W_Q || i == ATTN_W_K || i == ATTN_W_V || i == ATTN_B_Q ||
                    i == ATTN_B_K || i == ATTN_B_V;
    if (st == ATTN_E_FORMAT && gguf && qkv_part) { /* q, k and v fused in one tensor */
        const char *fused = source_name(c, gguf, i, true, &which);
        char fname[600];
        snprintf(fname, sizeof fname, "%s%s", p, fused);
        if (rt_src_find(s, fname, &t, m) == ATTN_OK) {
            local = fused;
            snprintf(name, sizeof name, "%s", fname);
            st = ATTN_OK;
        }
    }
    if (st == ATTN_E_FORMAT)
        return missing(s, c, prefix, name, local, m);
    if (st)
        return st;
    int64_t want[2] = {1, 1};
    int nd = w_shape(c, i, want);
    if (which >= 0) /* the fused tensor: q, k and v rows */
        want[0] = (c->heads + 2 * c->kv_groups) * c->head_dim;
    bool same = t.ndim == nd;
    for (int d = 0; same && d < nd; d++)
        same = t.shape[d] == want[d];
    if (!same) {
        char w[96], g[160];
        rt_shape_str(w, sizeof w, nd, want);
        rt_shape_str(g, sizeof g, t.ndim, t.shape);
        return rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s' has shape %s, expected %s%s", t.file,
                       name, g, w, gguf ? " (outermost first: GGUF's ne reversed)" : "");
    }
    if (t.dtype == ATTN_DTYPE_COUNT)
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: tensor '%s' is stored as %s; supported are F32, "
                       "F16, BF16, Q8_0 and Q4_0",
                       t.file, name, t.type);
    attn_dtype from = t.dtype;
    if (nd == 1 && attn_dtype_block(from) > 1) /* ggml quantizes matrices only */
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: tensor '%s' is stored as %s; vectors (biases, "
                       "norms, sinks) must be F32, F16 or BF16",
                       t.file, name, t.type);
    if (!dst) /* checking only */
        return ATTN_OK;
    bool quantized = nd == 2 && attn_dtype_block(c->dtype) > 1; /* NaN has no block */
    check_finite |= quantized;
    int64_t cols = nd == 2 ? want[1] : 1, rows = (int64_t)w_numel(c, i) / cols;
    size_t src_row = attn_dtype_bytes(from, cols), dst_row = attn_dtype_bytes(to, cols);
    bool as_is = from == to && !check_finite; /* rows copied as they are */
    float *tmp = as_is ? NULL : malloc((size_t)cols * sizeof *tmp);
    if (!as_is && !tmp)
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory reading '%s'", t.file, name);
    attn_status st2 = ATTN_OK;
    for (int64_t r = 0; r < rows && !st2; r++) {
        int64_t sr = which >= 0 ? qkv_row(c, gguf, which, r) : r;
        const unsigned char *row = t.data + (size_t)sr * src_row;
        unsigned char *out = dst + (size_t)r * dst_row;
        if (as_is) { /* stored as the kernels keep it */
            memcpy(out, row, dst_row);
            continue;
        }
        rt_to_f32(from, row, tmp, cols);
        int64_t bad = -1;
        for (int64_t j = 0; check_finite && bad < 0 && j < cols; j++)
            if (!isfinite(tmp[j]))
                bad = j;
        if (bad < 0 && from == to)
            memcpy(out, row, dst_row);
        else if (bad < 0)
            bad = from_f32(tmp, to, out, cols);
        if (bad >= 0)
            st2 = rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s' holds %s at element %lld%s", t.file,
                          name, rt_unstorable(tmp[bad]), (long long)(sr * cols + bad),
                          quantized ? ": it cannot be quantized" : "");
    }
    free(tmp);
    rt_src_release(&t);
    return st2;
}

/* The logical tensors weight id (attn_weight_id) is made of, in order. */
static int parts_of(int id, int parts[3]) {
    switch (id) {
    case ATTN_W_QKV: parts[0] = ATTN_W_Q, parts[1] = ATTN_W_K, parts[2] = ATTN_W_V; return 3;
    case ATTN_B_QKV: parts[0] = ATTN_B_Q, parts[1] = ATTN_B_K, parts[2] = ATTN_B_V; return 3;
    case ATTN_W_Q_NORM: parts[0] = ATTN_W_Q_NORM; return 1;
    case ATTN_W_K_NORM: parts[0] = ATTN_W_K_NORM; return 1;
    case ATTN_W_SINKS: parts[0] = ATTN_W_SINKS; return 1;
    case ATTN_W_Q_A: parts[0] = ATTN_W_Q_A; return 1;
    case ATTN_W_Q_A_NORM: parts[0] = ATTN_W_Q_A_NORM; return 1;
    case ATTN_W_Q_B: parts[0] = ATTN_W_Q_B; return 1;
    case ATTN_W_KV_A: parts[0] = ATTN_W_KV_A; return 1;
    case ATTN_W_KV_A_NORM: parts[0] = ATTN_W_KV_A_NORM; return 1;
    case ATTN_W_KV_B: parts[0] = ATTN_W_KV_B; return 1;
    default: parts[0] = id; return (id >= 0 && id <= ATTN_B_O) || id >= ATTN_W_INPUT;
    }
}

attn_dtype rt_weight_dtype(const attn_config *c, int id) {
    /* the linears' matrices; kv_b_proj stays f32 for the MLA kernels */
    bool matrix = id == ATTN_W_Q || id == ATTN_W_K || id == ATTN_W_V || id == ATTN_W_O ||
                  id == ATTN_W_QKV || id == ATTN_W_Q_A || id == ATTN_W_Q_B || id == ATTN_W_KV_A;
    return matrix ? c->dtype : ATTN_DTYPE_F32;
}

size_t rt_weight_numel(const attn_config *c, int id) {
    int parts[3];
    size_t n = 0;
    for (int k = 0, np = parts_of(id, parts); k < np; k++)
        n += w_numel(c, parts[k]);
    return n;
}

attn_status rt_weight_gather(rt_src *s, const attn_config *c, const char *prefix, int id,
                             bool check_finite, void *dst, attn_msg *m) {
    int parts[3], np = parts_of(id, parts);
    attn_dtype to = rt_weight_dtype(c, id);
    unsigned char *at = dst;
    for (int k = 0; k < np; k++) {
        attn_status st = gather_part(s, c, prefix, parts[k], check_finite, to, at, m);
        if (st)
            return st;
        size_t n = w_numel(c, parts[k]);
        /* the f32 ones too hold values of the weights' dtype (as
         * attn_weights_round makes them): mla's kv_b_proj through blocks */
        if (to == ATTN_DTYPE_F32 && rt_quant_block_bytes(c->dtype) && is_matrix(parts[k])) {
            unsigned char *blk = malloc(attn_dtype_bytes(c->dtype, w_cols_max(c)));
            if (!blk)
                return rt_fail(m, ATTN_E_NOMEM, "out of memory rounding '%s'", label(c, parts[k]));
            round_matrix(c, parts[k], (float *)at, blk);
            free(blk);
        }
        for (size_t j = 0; to == ATTN_DTYPE_F32 && j < n; j++)
            ((float *)at)[j] = rt_round(c->dtype, ((float *)at)[j]);
        at += attn_dtype_bytes(to, (int64_t)n);
    }
    return ATTN_OK;
}

/* Tensor i of w, row by row from f32 into dtype `to` at dst. */
static attn_status convert_part(const attn_weights *w, int i, attn_dtype to, unsigned char *dst,
                                attn_msg *m) {
    int64_t sh[2] = {1, 1};
    int nd = w_shape(&w->cfg, i, sh);
    int64_t cols = nd == 2 ? sh[1] : sh[0], rows = nd == 2 ? sh[0] : 1;
    const float *src = *slot((attn_weights *)w, i);
    for (int64_t r = 0; r < rows; r++, dst += attn_dtype_bytes(to, cols)) {
        int64_t bad = from_f32(src + r * cols, to, dst, cols);
        if (bad >= 0)
            return rt_fail(m, ATTN_E_FORMAT,
                           "weights: tensor '%s' holds %s at element %lld: it cannot be quantized",
                           label(&w->cfg, i), rt_unstorable(src[r * cols + bad]),
                           (long long)(r * cols + bad));
    }
    return ATTN_OK;
}

/* Tensor i of w in dtype `to` at dst for config c: w's own, or (c a
 * shard of w's whole block) converted whole, then sliced. */
static attn_status from_part(const attn_weights *w, const attn_config *c, int i, attn_dtype to,
                             unsigned char *dst, attn_msg *m) {
    if (c->shard_count <= 1 || w->cfg.shard_count > 1)
        return convert_part(w, i, to, dst, m);
    size_t bytes = attn_dtype_bytes(to, (int64_t)w_numel(&w->cfg, i));
    unsigned char *all = malloc(bytes ? bytes : 1);
    if (!all)
        return rt_fail(m, ATTN_E_NOMEM, "out of memory staging '%s'", label(c, i));
    attn_status st = convert_part(w, i, to, all, m);
    if (!st)
        slice_part(&w->cfg, c, i, to, all, dst);
    free(all);
    return st;
}

attn_status rt_weight_from(const attn_weights *w, const attn_config *c, int id, void *dst,
                           attn_msg *m) {
    int parts[3], np = parts_of(id, parts);
    attn_dtype to = rt_weight_dtype(&w->cfg, id);
    unsigned char *at = dst;
    for (int k = 0; k < np; k++) {
        attn_status st = from_part(w, c, parts[k], to, at, m);
        if (st)
            return st;
        at += attn_dtype_bytes(to, (int64_t)w_numel(c, parts[k]));
    }
    return ATTN_OK;
}

attn_status attn_weights_load(const attn_config *cfg, const char *path, const char *prefix,
                              attn_weights **out, attn_msg *m) {
    if (!path || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_weights_load: NULL argument");
    attn_weights *w = NULL;
    rt_src *s = NULL;
    attn_status st = attn_weights_new(cfg, &w, m);
    if (st || (st = rt_src_open(path, &s, m)))
        goto fail;
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++) {
        if (w_numel(cfg, i) && (st = gather_part(s, cfg, prefix, i, false, ATTN_DTYPE_F32,
                                                 (unsigned char *)*slot(w, i), m)))
            goto fail;
    }
    rt_src_close(s);
    attn_weights_round(w); /* the dtype the kernels keep them in (no-op when stored in it) */
    *out = w;
    return ATTN_OK;
fail:
    rt_src_close(s);
    attn_weights_free(w);
    return st;
}

attn_status attn_weights_check(const attn_config *cfg, const char *path, const char *prefix,
                               attn_msg *m) {
    if (!cfg || !path)
        return rt_fail(m, ATTN_E_INVALID, "attn_weights_check: NULL argument");
    rt_src *s = NULL;
    attn_status st = attn_config_check(cfg, m);
    if (st || (st = rt_src_open(path, &s, m)))
        return st;
    for (int i = 0; i < ATTN_WEIGHT_COUNT && !st; i++)
        if (w_numel(cfg, i))
            st = gather_part(s, cfg, prefix, i, false, ATTN_DTYPE_F32, NULL, m);
    rt_src_close(s);
    return st;
}

attn_status attn_layer_prefix(const attn_config *c, const char *path, int64_t layer, char *buf,
                              size_t size, attn_msg *m) {
    if (!c || !path || !buf || layer < 0)
        return rt_fail(m, ATTN_E_INVALID, "attn_layer_prefix: bad argument");
    /* the module paths of each family's Hugging Face model class; GGUF:
     * llama.cpp's blk.N. */
    static const char *const fmt[ATTN_LAYOUT_COUNT] = {
        [ATTN_LAYOUT_LLAMA] = "model.layers.%lld.self_attn.",
        [ATTN_LAYOUT_GPTJ] = "transformer.h.%lld.attn.",
        [ATTN_LAYOUT_NEOX] = "gpt_neox.layers.%lld.attention.",
        [ATTN_LAYOUT_FALCON] = "transformer.h.%lld.self_attention.",
        [ATTN_LAYOUT_PHI3] = "model.layers.%lld.self_attn.",
        [ATTN_LAYOUT_BLOOM] = "transformer.h.%lld.self_attention.",
    };
    if ((unsigned)c->weights_layout >= ATTN_LAYOUT_COUNT)
        return rt_fail(m, ATTN_E_INVALID, "attn_layer_prefix: unknown layout");
    const char *f = rt_path_is_gguf(path) ? "blk.%lld." : fmt[c->weights_layout];
    if ((size_t)snprintf(buf, size, f, (long long)layer) >= size)
        return rt_fail(m, ATTN_E_INVALID, "attn_layer_prefix: buffer too small");
    return ATTN_OK;
}

attn_status attn_weights_save(const attn_weights *w, const char *path, attn_dtype dtype,
                              const char *prefix, attn_msg *m) {
    if (!w || !path || (unsigned)dtype >= ATTN_DTYPE_COUNT)
        return rt_fail(m, ATTN_E_INVALID, "attn_weights_save: bad argument");
    const attn_config *c = &w->cfg;
    attn_st_tensor t[ATTN_WEIGHT_COUNT];
    char names[ATTN_WEIGHT_COUNT][512];
    float *fused[2] = {NULL, NULL}; /* q/k/v weights and biases of a fused layout */
    int n = 0;
    attn_status st = ATTN_OK;
    for (int i = 0; i < ATTN_WEIGHT_COUNT && !st; i++) {
        int64_t sh[2] = {0, 0};
        int nd = w_shape(c, i, sh), which;
        const char *local = source_name(c, false, i, false, &which);
        if (!nd || which > 0) /* a fused tensor is written with its q part */
            continue;
        const float *data = *slot((attn_weights *)w, i);
        if (which == 0) { /* q, k and v rows where the family's file keeps them */
            bool bias = i == ATTN_B_Q;
            int64_t cols = bias ? 1 : c->d_model;
            int64_t rows[3] = {c->heads * c->head_dim, c->kv_groups * c->head_dim,
                               c->kv_groups * c->head_dim};
            float *f = malloc((size_t)((rows[0] + 2 * rows[1]) * cols) * sizeof *f);
            if (!(fused[bias] = f)) {
                st = rt_fail(m, ATTN_E_NOMEM, "out of memory writing %s", local);
                break;
            }
            for (int part = 0; part < 3; part++) {
                const float *src = *slot((attn_weights *)w, (bias ? ATTN_B_Q : ATTN_W_Q) + part);
                for (int64_t r = 0; r < rows[part]; r++)
                    memcpy(f + qkv_row(c, false, part, r) * cols, src + r * cols,
                           (size_t)cols * sizeof *f);
            }
            sh[0] = rows[0] + 2 * rows[1];
            data = f;
        }
        if ((size_t)snprintf(names[n], sizeof names[n], "%s%s", prefix ? prefix : "", local) >=
            sizeof names[n]) {
            st = rt_fail(m, ATTN_E_INVALID, "prefix too long (%zu bytes)", strlen(prefix));
            break;
        }
        /* vectors stay f32 beside quantized matrices (as ggml's converters write them) */
        attn_dtype dt = nd == 1 && attn_dtype_block(dtype) > 1 ? ATTN_DTYPE_F32 : dtype;
        t[n] = (attn_st_tensor){
            .name = names[n], .dtype = dt, .ndim = nd, .shape = {sh[0], sh[1]}, .data = data};
        n++;
    }
    if (!st)
        st = attn_st_write(path, t, n, m);
    free(fused[0]);
    free(fused[1]);
    return st;
}
