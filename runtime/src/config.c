/* config.c: the config's invariants every runtime entry point relies on
 * (attn_config_check), equality, the dims derived from a config, and
 * sharding a config by heads. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "rt.h"

const char *attn_layout_name(attn_layout l) {
    static const char *const names[ATTN_LAYOUT_COUNT] = {"llama",  "gptj", "neox",
                                                         "falcon", "phi3", "bloom"};
    return (unsigned)l < ATTN_LAYOUT_COUNT ? names[l] : NULL;
}

bool attn_layout_fuses_qkv(attn_layout l) {
    return l == ATTN_LAYOUT_NEOX || l == ATTN_LAYOUT_FALCON || l == ATTN_LAYOUT_PHI3 ||
           l == ATTN_LAYOUT_BLOOM;
}

static bool in_range(int64_t v, int64_t lo, int64_t hi) {
    return v >= lo && v <= hi;
}

/* ---- the field table (attn_config.def) ----------------------------------- */

#define ATTN_FIELD(k, f, key)                                                                      \
    {#f, key, ATTN_KIND_##k, offsetof(attn_config, f), sizeof(((attn_config *)0)->f), false, 0,    \
     0,  0},
#define ATTN_PLAIN(k, f, key, token, def, lo, hi)                                                  \
    {#f, key, ATTN_KIND_##k, offsetof(attn_config, f), sizeof(((attn_config *)0)->f), true, def,   \
     lo, hi},
static const attn_config_field fields[] = {
#include "attn_config.def"
};
#undef ATTN_FIELD
#undef ATTN_PLAIN

const attn_config_field *attn_config_fields(size_t *n) {
    if (n)
        *n = sizeof fields / sizeof fields[0];
    return fields;
}

/* The plain keys' ranges, the same the spec stage checks (spec_check.c). */
static attn_status check_plain(const attn_config *c, attn_msg *m) {
    const char *base = (const char *)c;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const attn_config_field *f = &fields[i];
        if (!f->plain)
            continue;
        if (f->kind == ATTN_KIND_I64) {
            int64_t v;
            memcpy(&v, base + f->offset, sizeof v);
            if (!(v >= f->lo && v <= f->hi))
                return rt_fail(m, ATTN_E_INVALID, "%s (%lld) must be in %lld..%lld", f->key,
                               (long long)v, (long long)f->lo, (long long)f->hi);
        } else if (f->kind == ATTN_KIND_F64) {
            double v;
            memcpy(&v, base + f->offset, sizeof v);
            if (!(v >= f->lo && v <= f->hi) || !isfinite(v))
                return isinf(f->hi)
                           ? rt_fail(m, ATTN_E_INVALID, "%s (%g) must be a finite number >= %g",
                                     f->key, v, f->lo)
                           : rt_fail(m, ATTN_E_INVALID, "%s (%g) must be in %g..%g", f->key, v,
                                     f->lo, f->hi);
        }
    }
    return ATTN_OK;
}

/* Multi-head latent attention's rules: its dims, what the fields it
 * defines must hold, and what it does not go with (DeepSeek's attention
 * has none of it). */
static attn_status check_mla(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    if (c->mla_kv_lora_rank == 0) {
        if (c->mla_q_lora_rank || c->mla_qk_nope_head_dim || c->mla_qk_rope_head_dim ||
            c->mla_v_head_dim || c->mla_eps != 0)
            return rt_fail(m, bad, "mla fields are set but mla_kv_lora_rank is 0 (MLA off)");
        return ATTN_OK;
    }
    int64_t r = c->mla_qk_rope_head_dim, kvl = c->mla_kv_lora_rank;
    if (!in_range(kvl, 1, ATTN_MAX_HEAD_DIM) ||
        !in_range(c->mla_q_lora_rank, 0, ATTN_MAX_D_MODEL) ||
        !in_range(c->mla_qk_nope_head_dim, 1, ATTN_MAX_HEAD_DIM) ||
        !in_range(r, 2, ATTN_MAX_HEAD_DIM) || r % 2 || !in_range(kvl + r, 1, ATTN_MAX_HEAD_DIM) ||
        !in_range(c->mla_v_head_dim, 1, ATTN_MAX_HEAD_DIM))
        return rt_fail(m, bad,
                       "mla: kv_lora_rank (%lld) + qk_rope_head_dim (%lld, even, >= 2), "
                       "qk_nope_head_dim (%lld) and v_head_dim (%lld) must be in 1..%d, "
                       "q_lora_rank (%lld) in 0..%d",
                       (long long)kvl, (long long)r, (long long)c->mla_qk_nope_head_dim,
                       (long long)c->mla_v_head_dim, ATTN_MAX_HEAD_DIM,
                       (long long)c->mla_q_lora_rank, ATTN_MAX_D_MODEL);
    if (c->heads * c->mla_v_head_dim > ATTN_MAX_QDIM)
        return rt_fail(m, bad, "mla: heads * v_head_dim (%lld) exceeds %d",
                       (long long)(c->heads * c->mla_v_head_dim), ATTN_MAX_QDIM);
    if (!(c->mla_eps >= 0) || !isfinite(c->mla_eps))
        return rt_fail(m, bad, "mla.eps (%g) must be a finite number >= 0", c->mla_eps);
    if (c->head_dim != c->mla_qk_nope_head_dim + r || c->kv_groups != c->heads ||
        c->rope_style == ATTN_ROPE_NONE || c->rotary_dim != r)
        return rt_fail(m, bad,
                       "mla: head_dim (%lld) must be qk_nope_head_dim + qk_rope_head_dim "
                       "(%lld), kv_groups (%lld) heads (%lld), and rope on with rotary_dim "
                       "(%lld) qk_rope_head_dim",
                       (long long)c->head_dim, (long long)(c->mla_qk_nope_head_dim + r),
                       (long long)c->kv_groups, (long long)c->heads, (long long)c->rotary_dim);
    const char *no = c->qkv_bias                              ? "qkv_bias"
                     : c->qk_norm != ATTN_QK_NORM_NONE        ? "qk_norm"
                     : c->sinks                               ? "sinks"
                     : c->alibi                               ? "alibi"
                     : c->temp_floor_scale > 0                ? "query_temperature"
                     : c->memory_dim > 0                      ? "cross_attention"
                     : c->weights_layout != ATTN_LAYOUT_LLAMA ? "a weights.layout but llama"
                                                              : NULL;
    if (no)
        return rt_fail(m, bad, "mla does not go with %s", no);
    /* the block formats quantize each matrix's rows along its input */
    int64_t qin = c->mla_q_lora_rank, oin = c->heads * c->mla_v_head_dim;
    if (rt_quant_block_bytes(c->dtype) &&
        (c->d_model % RT_QK || qin % RT_QK || kvl % RT_QK || oin % RT_QK))
        return rt_fail(m, bad,
                       "dtype %s needs d_model (%lld), mla q_lora_rank (%lld), kv_lora_rank "
                       "(%lld) and heads * v_head_dim (%lld) to be multiples of %d",
                       attn_dtype_name(c->dtype), (long long)c->d_model, (long long)qin,
                       (long long)kvl, (long long)oin, RT_QK);
    /* a q8_0 cache quantizes c_kv and k_pe in blocks of 32 */
    if (c->kv_dtype == ATTN_DTYPE_Q8_0 && (kvl % RT_QK || r % RT_QK))
        return rt_fail(m, bad,
                       "kv_cache.dtype q8_0 needs mla kv_lora_rank (%lld) and qk_rope_head_dim "
                       "(%lld) to be multiples of %d",
                       (long long)kvl, (long long)r, RT_QK);
    return ATTN_OK;
}

/* A C identifier of 1..ATTN_NAME_MAX - 1 bytes. */
static attn_status check_name(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    size_t len = strnlen(c->name, ATTN_NAME_MAX);
    if (len == 0 || len == ATTN_NAME_MAX)
        return rt_fail(m, bad, "name must be 1 to %d bytes", ATTN_NAME_MAX - 1);
    for (size_t i = 0; i < len; i++) {
        char ch = c->name[i];
        bool ok = ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (i > 0 && ch >= '0' && ch <= '9');
        if (!ok)
            return rt_fail(m, bad, "name '%s' is not a C identifier", c->name);
    }
    return ATTN_OK;
}

/* Groups, head_dim and their product. */
static attn_status check_heads(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    if (!in_range(c->kv_groups, 1, c->heads) || c->heads % c->kv_groups)
        return rt_fail(m, bad, "kv_groups (%lld) must divide heads (%lld)", (long long)c->kv_groups,
                       (long long)c->heads);
    if (!in_range(c->head_dim, 1, ATTN_MAX_HEAD_DIM))
        return rt_fail(m, bad, "head_dim (%lld) must be in 1..%d", (long long)c->head_dim,
                       ATTN_MAX_HEAD_DIM);
    if (c->heads * c->head_dim > ATTN_MAX_QDIM)
        return rt_fail(m, bad, "heads * head_dim (%lld) exceeds %d",
                       (long long)(c->heads * c->head_dim), ATTN_MAX_QDIM);
    return ATTN_OK;
}

/* RoPE and its scaling (linear, llama3, yarn). */
static attn_status check_rope(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    if ((unsigned)c->rope_style >= ATTN_ROPE_COUNT)
        return rt_fail(m, bad, "rope style %d is unknown", (int)c->rope_style);
    if (c->rope_style != ATTN_ROPE_NONE) {
        if (!(c->rope_base > 1.0) || !isfinite(c->rope_base))
            return rt_fail(m, bad, "rope base (%g) must be a finite number > 1", c->rope_base);
        if (!in_range(c->rotary_dim, 2, c->head_dim) || c->rotary_dim % 2)
            return rt_fail(m, bad, "rotary_dim (%lld) must be even and in 2..head_dim (%lld)",
                           (long long)c->rotary_dim, (long long)c->head_dim);
        if ((unsigned)c->rope_scaling >= ATTN_SCALING_COUNT)
            return rt_fail(m, bad, "rope scaling %d is unknown", (int)c->rope_scaling);
        if (c->rope_scaling != ATTN_SCALING_NONE &&
            (!(c->rope_factor > 0) || !isfinite(c->rope_factor)))
            return rt_fail(m, bad, "rope scaling factor (%g) must be > 0", c->rope_factor);
        if (c->rope_scaling == ATTN_SCALING_LLAMA3) {
            if (!(c->rope_low_freq_factor > 0) || !isfinite(c->rope_high_freq_factor) ||
                !(c->rope_high_freq_factor >= c->rope_low_freq_factor))
                return rt_fail(m, bad,
                               "llama3 scaling needs 0 < low_freq_factor (%g) <= "
                               "high_freq_factor (%g)",
                               c->rope_low_freq_factor, c->rope_high_freq_factor);
            if (!in_range(c->rope_original_max_position, 1, ATTN_MAX_TOKENS))
                return rt_fail(m, bad, "original_max_position (%lld) must be in 1..%lld",
                               (long long)c->rope_original_max_position,
                               (long long)ATTN_MAX_TOKENS);
        }
    }
    if (c->rope_style != ATTN_ROPE_NONE && c->rope_scaling == ATTN_SCALING_YARN) {
        if (!in_range(c->rope_original_max_position, 1, ATTN_MAX_TOKENS))
            return rt_fail(m, bad, "original_max_position (%lld) must be in 1..%lld",
                           (long long)c->rope_original_max_position, (long long)ATTN_MAX_TOKENS);
        if (!(c->rope_beta_slow > 0) || !isfinite(c->rope_beta_fast) ||
            !(c->rope_beta_fast >= c->rope_beta_slow))
            return rt_fail(m, bad, "yarn needs 0 < beta_slow (%g) <= beta_fast (%g)",
                           c->rope_beta_slow, c->rope_beta_fast);
        if (!isfinite(c->rope_mscale) || !isfinite(c->rope_mscale_all_dim) ||
            !(c->rope_attention_factor > 0) || !isfinite(c->rope_attention_factor))
            return rt_fail(m, bad,
                           "yarn mscale, mscale_all_dim and attention_factor (%g) must be "
                           "finite, the factor > 0",
                           c->rope_attention_factor);
    }
    return ATTN_OK;
}

/* QK-norm and the weights' layout. */
static attn_status check_norm_layout(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    if ((unsigned)c->qk_norm >= ATTN_QK_NORM_COUNT)
        return rt_fail(m, bad, "qk_norm %d is unknown", (int)c->qk_norm);
    if (c->qk_norm != ATTN_QK_NORM_NONE && (!(c->qk_norm_eps >= 0) || !isfinite(c->qk_norm_eps) ||
                                            c->qk_norm_offset < 0 || c->qk_norm_offset > 1))
        return rt_fail(m, bad, "qk_norm needs a finite eps >= 0 (%g) and offset 0 or 1 (%d)",
                       c->qk_norm_eps, (int)c->qk_norm_offset);
    if ((unsigned)c->weights_layout >= ATTN_LAYOUT_COUNT)
        return rt_fail(m, bad, "weights.layout %d is unknown", (int)c->weights_layout);
    if ((c->weights_layout == ATTN_LAYOUT_NEOX || c->weights_layout == ATTN_LAYOUT_BLOOM) &&
        c->kv_groups != c->heads)
        return rt_fail(m, bad,
                       "weights.layout %s stores one K/V head per query head; kv_groups "
                       "(%lld) must equal heads (%lld)",
                       attn_layout_name(c->weights_layout), (long long)c->kv_groups,
                       (long long)c->heads);
    return ATTN_OK;
}

/* What the mask and the scores need: causal windows and chunks, no ALiBi with
 * RoPE, the query temperature, the scale. */
static attn_status check_mask(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    if (c->alibi && c->rope_style != ATTN_ROPE_NONE)
        return rt_fail(m, bad, "alibi and rope do not go together");
    if (c->chunk > 0 && !c->causal)
        return rt_fail(m, bad, "chunked_attention needs causal attention");
    if (!in_range(c->temp_floor_scale, 0, ATTN_MAX_TOKENS) || !isfinite(c->temp_attn_scale))
        return rt_fail(m, bad,
                       "query_temperature needs floor_scale in 0..%lld (%lld) and a finite "
                       "attn_scale",
                       (long long)ATTN_MAX_TOKENS, (long long)c->temp_floor_scale);
    if (c->sliding_window > 0 && !c->causal)
        return rt_fail(m, bad, "sliding_window needs causal attention");
    if (!(c->scale > 0) || !isfinite(c->scale))
        return rt_fail(m, bad, "scale (%g) must be a finite number > 0", c->scale);
    return ATTN_OK;
}

/* The weights' and the cache's dtypes and what their blocks of 32 need;
 * the cache's size. */
static attn_status check_dtypes(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    if ((unsigned)c->dtype >= ATTN_DTYPE_COUNT || (unsigned)c->kv_dtype >= ATTN_DTYPE_COUNT)
        return rt_fail(m, bad, "dtype is unknown");
    if (c->compute != ATTN_DTYPE_F32 && c->compute != ATTN_DTYPE_BF16)
        return rt_fail(m, bad, "compute %s is not supported (f32 or bf16)",
                       attn_dtype_name(c->compute) ? attn_dtype_name(c->compute) : "?");
    if (c->compute == ATTN_DTYPE_BF16 &&
        (c->mla_kv_lora_rank > 0 || c->kv_dtype == ATTN_DTYPE_Q8_0))
        return rt_fail(m, bad, "compute bf16 is not available with %s yet",
                       c->mla_kv_lora_rank > 0 ? "mla" : "kv_cache.dtype q8_0");
    if (c->activations != ATTN_DTYPE_F32 && c->activations != ATTN_DTYPE_Q8_0)
        return rt_fail(m, bad, "activations %s is not supported (f32 or q8_0)",
                       attn_dtype_name(c->activations) ? attn_dtype_name(c->activations) : "?");
    if (c->activations == ATTN_DTYPE_Q8_0 &&
        (c->mla_kv_lora_rank > 0 || c->kv_dtype == ATTN_DTYPE_Q8_0))
        return rt_fail(m, bad, "activations q8_0 is not available with %s yet",
                       c->mla_kv_lora_rank > 0 ? "mla" : "kv_cache.dtype q8_0");
    if (c->activations == ATTN_DTYPE_Q8_0 && !rt_quant_block_bytes(c->dtype))
        return rt_fail(m, bad, "activations q8_0 needs int8 weights (dtype q8_0 or q4_0), not %s",
                       attn_dtype_name(c->dtype));
    if (c->kv_dtype == ATTN_DTYPE_Q4_0)
        return rt_fail(m, bad, "kv_cache.dtype q4_0 is not supported (f32, f16, bf16 or q8_0)");
    /* a q8_0 cache quantizes each head's K and V rows in blocks of 32 */
    if (c->kv_dtype == ATTN_DTYPE_Q8_0 && c->mla_kv_lora_rank == 0 && c->head_dim % RT_QK)
        return rt_fail(m, bad, "kv_cache.dtype q8_0 needs head_dim (%lld) to be a multiple of %d",
                       (long long)c->head_dim, RT_QK);
    /* the block formats quantize rows of the projections along their
     * inputs, d_model for q/k/v and heads * head_dim for o */
    if (rt_quant_block_bytes(c->dtype) && c->mla_kv_lora_rank == 0 &&
        (c->d_model % RT_QK || (c->heads * c->head_dim) % RT_QK))
        return rt_fail(m, bad,
                       "dtype %s needs d_model (%lld) and heads * head_dim (%lld) to be "
                       "multiples of %d",
                       attn_dtype_name(c->dtype), (long long)c->d_model,
                       (long long)(c->heads * c->head_dim), RT_QK);
    if (!in_range(c->kv_max_tokens, 1, ATTN_MAX_TOKENS))
        return rt_fail(m, bad, "kv_cache.max_tokens (%lld) must be in 1..%lld",
                       (long long)c->kv_max_tokens, (long long)ATTN_MAX_TOKENS);
    return ATTN_OK;
}

/* The k bias and cross-attention. */
static attn_status check_bias_cross(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    if (c->no_k_bias && !c->qkv_bias)
        return rt_fail(m, bad, "no_k_bias (k_bias: false) needs qkv_bias");
    if (c->no_k_bias && attn_layout_fuses_qkv(c->weights_layout))
        return rt_fail(m, bad,
                       "weights.layout %s fuses q, k and v with a bias each; k_bias: false "
                       "needs separate projections (llama or gptj)",
                       attn_layout_name(c->weights_layout));
    if (!in_range(c->memory_dim, 0, ATTN_MAX_D_MODEL))
        return rt_fail(m, bad, "cross_attention.memory_dim (%lld) must be in 0..%d",
                       (long long)c->memory_dim, ATTN_MAX_D_MODEL);
    if (c->memory_dim > 0) {
        const char *no = c->causal                                  ? "causal"
                         : c->rope_style != ATTN_ROPE_NONE          ? "rope"
                         : c->alibi                                 ? "alibi"
                         : c->temp_floor_scale > 0                  ? "query_temperature"
                         : attn_layout_fuses_qkv(c->weights_layout) ? "a fused weights.layout"
                                                                    : NULL;
        if (no)
            return rt_fail(m, bad, "cross-attention does not go with %s", no);
        if (rt_quant_block_bytes(c->dtype) && c->memory_dim % RT_QK)
            return rt_fail(m, bad,
                           "dtype %s needs cross_attention.memory_dim (%lld) to be a "
                           "multiple of %d",
                           attn_dtype_name(c->dtype), (long long)c->memory_dim, RT_QK);
    }
    return ATTN_OK;
}

/* The shard and the cache's block size. */
static attn_status check_shard_blocks(const attn_config *c, attn_msg *m) {
    const attn_status bad = ATTN_E_INVALID;
    if (!in_range(c->shard_count, 0, ATTN_MAX_HEADS) ||
        !in_range(c->shard_index, 0, c->shard_count > 0 ? c->shard_count - 1 : 0) ||
        (c->shard_count > 0 && c->heads * c->shard_count > ATTN_MAX_HEADS))
        return rt_fail(m, bad, "shard %lld of %lld: expected 0 <= index < count <= %d heads",
                       (long long)c->shard_index, (long long)c->shard_count, ATTN_MAX_HEADS);
    if (c->shard_count > 1 && c->qk_norm == ATTN_QK_NORM_ALL)
        return rt_fail(m, bad,
                       "qk_norm over the whole projection (scope all) needs every head: it "
                       "cannot be sharded");
    if (!in_range(c->kv_block_tokens, 1, ATTN_MAX_BLOCK_TOKENS))
        return rt_fail(m, bad, "kv_cache.block_tokens (%lld) must be in 1..%d",
                       (long long)c->kv_block_tokens, ATTN_MAX_BLOCK_TOKENS);
    return ATTN_OK;
}

attn_status attn_config_check(const attn_config *c, attn_msg *m) {
    if (!c)
        return rt_fail(m, ATTN_E_INVALID, "config is NULL");
    /* in this order: the first broken rule is the one reported */
    attn_status (*const checks[])(const attn_config *, attn_msg *) = {
        check_name, check_plain,  check_heads,      check_rope,         check_norm_layout,
        check_mask, check_dtypes, check_bias_cross, check_shard_blocks, check_mla,
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        attn_status st = checks[i](c, m);
        if (st != ATTN_OK)
            return st;
    }
    return ATTN_OK;
}

const char *attn_config_differs(const attn_config *a, const attn_config *b) {
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const attn_config_field *f = &fields[i];
        const char *x = (const char *)a + f->offset, *y = (const char *)b + f->offset;
        bool same;
        if (f->kind == ATTN_KIND_NAME) { /* as strings */
            same = strncmp(x, y, ATTN_NAME_MAX) == 0;
        } else if (f->kind == ATTN_KIND_F64) { /* as values: 0.0 == -0.0 */
            double u, v;
            memcpy(&u, x, sizeof u);
            memcpy(&v, y, sizeof v);
            same = u == v;
        } else { /* integers, bools and enums: their bytes */
            same = memcmp(x, y, f->size) == 0;
        }
        if (!same)
            return f->name;
    }
    return NULL;
}

bool rt_config_equal(const attn_config *a, const attn_config *b) {
    return attn_config_differs(a, b) == NULL;
}

int64_t attn_cache_columns(const attn_config *c, int which) {
    if (!c)
        return 0;
    if (c->mla_kv_lora_rank > 0)
        return which ? 0 : c->mla_kv_lora_rank + c->mla_qk_rope_head_dim;
    return c->kv_groups * c->head_dim;
}

int64_t attn_v_head_dim(const attn_config *c) {
    return c && c->mla_kv_lora_rank > 0 ? c->mla_v_head_dim : c ? c->head_dim : 0;
}

attn_status attn_config_shard(const attn_config *full, int64_t index, int64_t count,
                              attn_config *out, attn_msg *m) {
    if (!full || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_config_shard: NULL argument");
    attn_status st = attn_config_check(full, m);
    if (st)
        return st;
    if (full->shard_count > 1)
        return rt_fail(m, ATTN_E_INVALID, "'%s' is shard %lld of %lld already", full->name,
                       (long long)full->shard_index, (long long)full->shard_count);
    if (count < 1 || index < 0 || index >= count)
        return rt_fail(m, ATTN_E_INVALID,
                       "shard %lld/%lld: expected I/N with N >= 1 and 0 <= I < N", (long long)index,
                       (long long)count);
    if (full->kv_groups % count)
        return rt_fail(m, ATTN_E_INVALID,
                       "shard %lld/%lld: the %lld K/V groups of '%s' do not split into %lld "
                       "shards (each shard holds whole K/V groups and their query heads)",
                       (long long)index, (long long)count, (long long)full->kv_groups, full->name,
                       (long long)count);
    attn_config c = *full;
    c.shard_index = c.shard_count = 0;
    if (count > 1) {
        c.heads /= count, c.kv_groups /= count;
        c.shard_index = index, c.shard_count = count;
    }
    attn_msg why;
    if (attn_config_check(&c, &why) != ATTN_OK)
        return rt_fail(m, ATTN_E_INVALID, "shard %lld/%lld of '%s': %s", (long long)index,
                       (long long)count, full->name, why.text);
    *out = c;
    return ATTN_OK;
}

attn_config rt_config_whole(const attn_config *c) {
    attn_config w = *c;
    if (c->shard_count > 1) {
        w.heads *= c->shard_count, w.kv_groups *= c->shard_count;
        w.shard_index = w.shard_count = 0;
    }
    return w;
}
