/* config.c: the config's invariants every runtime entry point relies on
 * (attn_config_check), equality, the dims derived from a config, and
 * sharding a config by heads. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
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

/* ---- the rules -------------------------------------------------------------- */

/* Where the rules report: the message of the last one broken in m, and the
 * spec key of the field it is about in key (NULL where no one key is).
 * With fn, every broken rule is also passed to it as it is found, and
 * rules that can name several keys at once (conflicts) name them all. */
typedef struct rules {
    attn_msg *m;
    const char *key;
    attn_config_problem_fn fn;
    void *user;
    int n;
} rules;

static attn_status broken(rules *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static attn_status broken(rules *r, const char *key, const char *fmt, ...) {
    r->key = key;
    va_list ap;
    va_start(ap, fmt);
    rt_vfail(r->m, ATTN_E_INVALID, fmt, ap);
    va_end(ap);
    r->n++;
    if (r->fn && r->m)
        r->fn(key, r->m->text, r->user);
    return ATTN_E_INVALID;
}

/* What a feature does not go with: each key set on is a broken rule of its
 * own (only the first when no one listens for all). */
typedef struct conflict {
    const char *key;
    bool on;
    const char *why;
} conflict;

static attn_status conflicts(rules *r, const char *feature, const conflict *no, size_t n) {
    attn_status st = ATTN_OK;
    for (size_t i = 0; i < n && (st == ATTN_OK || r->fn); i++)
        if (no[i].on)
            st = broken(r, no[i].key, "%s does not go with %s: %s", no[i].key, feature, no[i].why);
    return st;
}

/* The plain keys' ranges, the same the spec stage checks (spec_check.c). */
static attn_status check_plain(const attn_config *c, rules *r) {
    const char *base = (const char *)c;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const attn_config_field *f = &fields[i];
        if (!f->plain)
            continue;
        if (f->kind == ATTN_KIND_I64) {
            int64_t v;
            memcpy(&v, base + f->offset, sizeof v);
            if (!(v >= f->lo && v <= f->hi))
                return broken(r, f->key, "%s (%lld) must be in %lld..%lld", f->key, (long long)v,
                              (long long)f->lo, (long long)f->hi);
        } else if (f->kind == ATTN_KIND_F64) {
            double v;
            memcpy(&v, base + f->offset, sizeof v);
            if (!(v >= f->lo && v <= f->hi) || !isfinite(v))
                return isinf(f->hi) ? broken(r, f->key, "%s (%g) must be a finite number >= %g",
                                             f->key, v, f->lo)
                                    : broken(r, f->key, "%s (%g) must be in %g..%g", f->key, v,
                                             f->lo, f->hi);
        }
    }
    return ATTN_OK;
}

/* Multi-head latent attention's rules: its dims, what the fields it
 * defines must hold, and what it does not go with (DeepSeek's attention
 * has none of it). */
static attn_status check_mla(const attn_config *c, rules *r) {
    if (c->mla_kv_lora_rank == 0) {
        if (c->mla_q_lora_rank || c->mla_qk_nope_head_dim || c->mla_qk_rope_head_dim ||
            c->mla_v_head_dim || c->mla_eps != 0)
            return broken(r, "mla", "mla fields are set but mla_kv_lora_rank is 0 (MLA off)");
        return ATTN_OK;
    }
    int64_t rd = c->mla_qk_rope_head_dim, kvl = c->mla_kv_lora_rank;
    if (!in_range(kvl, 1, ATTN_MAX_HEAD_DIM) ||
        !in_range(c->mla_q_lora_rank, 0, ATTN_MAX_D_MODEL) ||
        !in_range(c->mla_qk_nope_head_dim, 1, ATTN_MAX_HEAD_DIM) ||
        !in_range(rd, 1, ATTN_MAX_HEAD_DIM) || !in_range(c->mla_v_head_dim, 1, ATTN_MAX_HEAD_DIM))
        return broken(r, "mla",
                      "mla: kv_lora_rank (%lld), qk_nope_head_dim (%lld), qk_rope_head_dim "
                      "(%lld) and v_head_dim (%lld) must be in 1..%d, q_lora_rank (%lld) in "
                      "0..%d",
                      (long long)kvl, (long long)c->mla_qk_nope_head_dim, (long long)rd,
                      (long long)c->mla_v_head_dim, ATTN_MAX_HEAD_DIM,
                      (long long)c->mla_q_lora_rank, ATTN_MAX_D_MODEL);
    if (rd % 2)
        return broken(r, "mla.qk_rope_head_dim", "mla.qk_rope_head_dim (%lld) must be even",
                      (long long)rd);
    if (kvl + rd > ATTN_MAX_HEAD_DIM)
        return broken(r, "mla",
                      "mla: kv_lora_rank + qk_rope_head_dim (%lld values cached per token) "
                      "exceeds the limit %d",
                      (long long)(kvl + rd), ATTN_MAX_HEAD_DIM);
    if (c->heads * c->mla_v_head_dim > ATTN_MAX_QDIM)
        return broken(r, "mla", "mla: heads * v_head_dim (%lld) exceeds %d",
                      (long long)(c->heads * c->mla_v_head_dim), ATTN_MAX_QDIM);
    if (!(c->mla_eps >= 0) || !isfinite(c->mla_eps))
        return broken(r, "mla", "mla.eps (%g) must be a finite number >= 0", c->mla_eps);
    if (c->head_dim != c->mla_qk_nope_head_dim + rd || c->kv_groups != c->heads)
        return broken(r, "mla",
                      "mla: head_dim (%lld) must be qk_nope_head_dim + qk_rope_head_dim "
                      "(%lld) and kv_groups (%lld) heads (%lld)",
                      (long long)c->head_dim, (long long)(c->mla_qk_nope_head_dim + rd),
                      (long long)c->kv_groups, (long long)c->heads);
    if (c->rope_style == ATTN_ROPE_NONE)
        return broken(r, "rope",
                      "mla needs rope (half or interleaved): it rotates qk_rope_head_dim dims of "
                      "each head");
    if (c->rotary_dim != rd)
        return broken(r, "rope.rotary_dim",
                      "mla: rope.rotary_dim (%lld) must be mla.qk_rope_head_dim (%lld)",
                      (long long)c->rotary_dim, (long long)rd);
    const conflict no[] = {
        {"qkv_bias", c->qkv_bias, "DeepSeek's q and kv projections have no bias"},
        {"k_bias", c->no_k_bias, "DeepSeek's q and kv projections have no bias"},
        {"qk_norm", c->qk_norm != ATTN_QK_NORM_NONE, "its norms are mla's own"},
        {"sinks", c->sinks, "it is not defined for mla"},
        {"alibi", c->alibi, "mla rotates qk_rope_head_dim dims of each head"},
        {"query_temperature", c->temp_floor_scale > 0, "it is not defined for mla"},
        {"cross_attention", c->memory_dim > 0, "mla's latent is projected from x"},
        {"weights.layout", c->weights_layout != ATTN_LAYOUT_LLAMA,
         "mla's tensors have their own names (layout llama)"},
    };
    return conflicts(r, "mla", no, sizeof no / sizeof no[0]);
}

/* A C identifier of 1..ATTN_NAME_MAX - 1 bytes. */
static attn_status check_name(const attn_config *c, rules *r) {
    size_t len = strnlen(c->name, ATTN_NAME_MAX);
    if (len == 0 || len == ATTN_NAME_MAX)
        return broken(r, "name", "name must be 1 to %d bytes", ATTN_NAME_MAX - 1);
    for (size_t i = 0; i < len; i++) {
        char ch = c->name[i];
        bool ok = ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (i > 0 && ch >= '0' && ch <= '9');
        if (!ok)
            return broken(r, "name", "name '%s' is not a C identifier", c->name);
    }
    return ATTN_OK;
}

/* inputs, score_mod and mask_mod: NUL-terminated texts; the inputs parse
 * (attn_inputs_parse), each expression parses as its kind over them
 * (attn_expr.h), and every input is read by one of them. */
static attn_status check_exprs(const attn_config *c, rules *r) {
    const struct {
        const char *key, *text;
    } x[3] = {{"inputs", c->inputs}, {"score_mod", c->score_mod}, {"mask_mod", c->mask_mod}};
    for (int i = 0; i < 3; i++)
        if (strnlen(x[i].text, ATTN_EXPR_TEXT_MAX) == ATTN_EXPR_TEXT_MAX)
            return broken(r, x[i].key, "%s must be at most %d bytes", x[i].key,
                          ATTN_EXPR_TEXT_MAX - 1);
    attn_inputs in;
    attn_msg m;
    if (attn_inputs_parse(c->inputs, &in, &m) != ATTN_OK)
        return broken(r, "inputs", "%s ('%s')", m.text, c->inputs);
    for (int i = 0; i < in.n && c->memory_dim > 0; i++)
        if (in.in[i].per == ATTN_INPUT_TOKEN)
            return broken(r, "inputs",
                          "inputs: '%s' is per token, but a cross-attention block's keys are "
                          "memory rows, not the sequence's positions",
                          in.name[i]);
    uint32_t used = 0;
    for (int i = 1; i < 3; i++) {
        if (!x[i].text[0])
            continue;
        attn_expr *e = malloc(sizeof *e);
        if (!e)
            return broken(r, x[i].key, "%s: out of memory", x[i].key);
        int32_t at;
        attn_status st = attn_expr_parse(
            x[i].text, i == 2 ? ATTN_EXPR_MASK_MOD : ATTN_EXPR_SCORE_MOD, in.in, in.n, e, &m, &at);
        used |= e->inputs_used;
        free(e);
        if (st != ATTN_OK)
            return broken(r, x[i].key, "%s: %s (at byte %d of '%s')", x[i].key, m.text, (int)at,
                          x[i].text);
    }
    for (int i = 0; i < in.n; i++)
        if (!(used >> i & 1))
            return broken(r, "inputs",
                          "inputs: '%s' is read by neither score_mod nor mask_mod; remove it",
                          in.name[i]);
    return ATTN_OK;
}

/* Groups, head_dim and their product. */
static attn_status check_heads(const attn_config *c, rules *r) {
    if (!in_range(c->kv_groups, 1, c->heads) || c->heads % c->kv_groups)
        return broken(r, "kv_groups", "heads (%lld) must be a multiple of kv_groups (%lld)",
                      (long long)c->heads, (long long)c->kv_groups);
    if (c->mla_kv_lora_rank > 0 && c->head_dim > ATTN_MAX_HEAD_DIM) /* mla defines it */
        return broken(r, "mla",
                      "mla: qk_nope_head_dim + qk_rope_head_dim (%lld) exceeds the limit %d",
                      (long long)c->head_dim, ATTN_MAX_HEAD_DIM);
    if (!in_range(c->head_dim, 1, ATTN_MAX_HEAD_DIM))
        return broken(r, "head_dim", "head_dim (%lld) must be in 1..%d", (long long)c->head_dim,
                      ATTN_MAX_HEAD_DIM);
    if (c->heads * c->head_dim > ATTN_MAX_QDIM) /* mla defines head_dim: name its dims */
        return broken(r, c->mla_kv_lora_rank > 0 ? "heads" : "head_dim",
                      "heads * %s (%lld) exceeds the limit %d",
                      c->mla_kv_lora_rank > 0 ? "(mla.qk_nope_head_dim + mla.qk_rope_head_dim)"
                                              : "head_dim",
                      (long long)(c->heads * c->head_dim), ATTN_MAX_QDIM);
    return ATTN_OK;
}

/* RoPE and its scaling (linear, llama3, yarn). */
static attn_status check_rope(const attn_config *c, rules *r) {
    if ((unsigned)c->rope_style >= ATTN_ROPE_COUNT)
        return broken(r, "rope", "rope style %d is unknown", (int)c->rope_style);
    if (c->rope_style != ATTN_ROPE_NONE) {
        if (!(c->rope_base > 1.0) || !isfinite(c->rope_base))
            return broken(r, "rope.base", "rope base (%g) must be a finite number > 1",
                          c->rope_base);
        if (c->mla_kv_lora_rank == 0 && /* mla's own: check_mla */
            (!in_range(c->rotary_dim, 2, c->head_dim) || c->rotary_dim % 2))
            return broken(r, "rope.rotary_dim",
                          "rope.rotary_dim (%lld) must be even and in 2..head_dim (%lld)",
                          (long long)c->rotary_dim, (long long)c->head_dim);
        if ((unsigned)c->rope_scaling >= ATTN_SCALING_COUNT)
            return broken(r, "rope.scaling", "rope scaling %d is unknown", (int)c->rope_scaling);
        if (c->rope_scaling != ATTN_SCALING_NONE &&
            (!(c->rope_factor > 0) || !isfinite(c->rope_factor)))
            return broken(r, "rope.scaling", "rope scaling factor (%g) must be > 0",
                          c->rope_factor);
        if (c->rope_scaling == ATTN_SCALING_LLAMA3) {
            if (!(c->rope_low_freq_factor > 0) || !isfinite(c->rope_high_freq_factor) ||
                !(c->rope_high_freq_factor >= c->rope_low_freq_factor))
                return broken(r, "rope.scaling",
                              "llama3 scaling needs 0 < low_freq_factor (%g) <= "
                              "high_freq_factor (%g)",
                              c->rope_low_freq_factor, c->rope_high_freq_factor);
            if (!in_range(c->rope_original_max_position, 1, ATTN_MAX_TOKENS))
                return broken(r, "rope.scaling", "original_max_position (%lld) must be in 1..%lld",
                              (long long)c->rope_original_max_position, (long long)ATTN_MAX_TOKENS);
        }
    }
    if (c->rope_style != ATTN_ROPE_NONE && c->rope_scaling == ATTN_SCALING_YARN) {
        if (!in_range(c->rope_original_max_position, 1, ATTN_MAX_TOKENS))
            return broken(r, "rope.scaling", "original_max_position (%lld) must be in 1..%lld",
                          (long long)c->rope_original_max_position, (long long)ATTN_MAX_TOKENS);
        if (!(c->rope_beta_slow > 0) || !isfinite(c->rope_beta_fast) ||
            !(c->rope_beta_fast >= c->rope_beta_slow))
            return broken(r, "rope.scaling", "yarn needs 0 < beta_slow (%g) <= beta_fast (%g)",
                          c->rope_beta_slow, c->rope_beta_fast);
        if (!isfinite(c->rope_mscale) || !isfinite(c->rope_mscale_all_dim) ||
            !(c->rope_attention_factor > 0) || !isfinite(c->rope_attention_factor))
            return broken(r, "rope.scaling",
                          "yarn mscale, mscale_all_dim and attention_factor (%g) must be "
                          "finite, the factor > 0",
                          c->rope_attention_factor);
    }
    return ATTN_OK;
}

/* QK-norm and the weights' layout. */
static attn_status check_norm_layout(const attn_config *c, rules *r) {
    if ((unsigned)c->qk_norm >= ATTN_QK_NORM_COUNT)
        return broken(r, "qk_norm", "qk_norm %d is unknown", (int)c->qk_norm);
    if (c->qk_norm != ATTN_QK_NORM_NONE && (!(c->qk_norm_eps >= 0) || !isfinite(c->qk_norm_eps) ||
                                            c->qk_norm_offset < 0 || c->qk_norm_offset > 1))
        return broken(r, "qk_norm", "qk_norm needs a finite eps >= 0 (%g) and offset 0 or 1 (%d)",
                      c->qk_norm_eps, (int)c->qk_norm_offset);
    if ((unsigned)c->weights_layout >= ATTN_LAYOUT_COUNT)
        return broken(r, "weights.layout", "weights.layout %d is unknown", (int)c->weights_layout);
    if ((c->weights_layout == ATTN_LAYOUT_NEOX || c->weights_layout == ATTN_LAYOUT_BLOOM) &&
        c->kv_groups != c->heads)
        return broken(r, "weights.layout",
                      "weights.layout: %s stores one K/V head per query head, but kv_groups "
                      "(%lld) is not heads (%lld); grouped checkpoints use layout falcon, phi3 "
                      "or llama",
                      attn_layout_name(c->weights_layout), (long long)c->kv_groups,
                      (long long)c->heads);
    return ATTN_OK;
}

/* What the mask and the scores need: causal windows and chunks, no ALiBi with
 * RoPE, the query temperature, the scale. */
static attn_status check_mask(const attn_config *c, rules *r) {
    if (c->alibi && c->rope_style != ATTN_ROPE_NONE)
        return broken(r, "alibi",
                      "alibi: true does not go with rope: no model uses both; set rope: none");
    if (c->chunk > 0 && !c->causal && c->memory_dim == 0) /* else: check_cross_with */
        return broken(r, "chunked_attention", "chunked_attention (%lld) requires causal: true",
                      (long long)c->chunk);
    if (!in_range(c->temp_floor_scale, 0, ATTN_MAX_TOKENS) || !isfinite(c->temp_attn_scale))
        return broken(r, "query_temperature",
                      "query_temperature needs floor_scale in 0..%lld (%lld) and a finite "
                      "attn_scale",
                      (long long)ATTN_MAX_TOKENS, (long long)c->temp_floor_scale);
    if (c->sliding_window > 0 && !c->causal && c->memory_dim == 0) /* else: check_cross_with */
        return broken(r, "sliding_window", "sliding_window (%lld) requires causal: true",
                      (long long)c->sliding_window);
    if (!(c->scale > 0) || !isfinite(c->scale))
        return broken(r, "scale", "scale (%g) must be a finite number > 0", c->scale);
    return ATTN_OK;
}

/* The dtypes of the weights, the cache, compute and activations, which go
 * together, and the cache's size (blocks of 32: check_weight_blocks,
 * check_cache_blocks). */
static attn_status check_dtypes(const attn_config *c, rules *r) {
    if ((unsigned)c->dtype >= ATTN_DTYPE_COUNT || (unsigned)c->kv_dtype >= ATTN_DTYPE_COUNT)
        return broken(r, "dtype", "dtype is unknown");
    if (c->compute != ATTN_DTYPE_F32 && c->compute != ATTN_DTYPE_BF16)
        return broken(r, "compute", "compute %s is not supported (f32 or bf16)",
                      attn_dtype_name(c->compute) ? attn_dtype_name(c->compute) : "?");
    if (c->activations != ATTN_DTYPE_F32 && c->activations != ATTN_DTYPE_Q8_0)
        return broken(r, "activations", "activations %s is not supported (f32 or q8_0)",
                      attn_dtype_name(c->activations) ? attn_dtype_name(c->activations) : "?");
    bool q8q = rt_q8_query(c); /* (never with mla) */
    if (c->activations == ATTN_DTYPE_Q8_0 && !rt_quant_block_bytes(c->dtype) &&
        c->mla_kv_lora_rank > 0)
        return broken(r, "activations",
                      "activations: q8_0 with mla quantizes the projections' inputs only (the "
                      "latent's products stay f32): it needs dtype q8_0 or q4_0, but dtype is "
                      "%s; use activations: f32",
                      attn_dtype_name(c->dtype));
    if (c->activations == ATTN_DTYPE_Q8_0 && !rt_quant_block_bytes(c->dtype) && !q8q)
        return broken(r, "activations",
                      "activations: q8_0 needs an int8 operand, dtype q8_0 or q4_0 or "
                      "kv_cache.dtype q8_0, but dtype is %s and kv_cache.dtype %s; use "
                      "activations: f32",
                      attn_dtype_name(c->dtype), attn_dtype_name(c->kv_dtype));
    if (c->kv_dtype == ATTN_DTYPE_Q4_0)
        return broken(r, "kv_cache.dtype",
                      "kv_cache.dtype q4_0 is not supported (f32, f16, bf16 or q8_0)");
    if (!in_range(c->kv_max_tokens, 1, ATTN_MAX_TOKENS))
        return broken(r, "kv_cache.max_tokens", "kv_cache.max_tokens (%lld) must be in 1..%lld",
                      (long long)c->kv_max_tokens, (long long)ATTN_MAX_TOKENS);
    return ATTN_OK;
}

/* The k bias and cross-attention. */
static attn_status check_bias_cross(const attn_config *c, rules *r) {
    if (c->no_k_bias && !c->qkv_bias)
        return broken(r, "k_bias", "no_k_bias (k_bias: false) needs qkv_bias");
    if (c->no_k_bias && attn_layout_fuses_qkv(c->weights_layout))
        return broken(r, "k_bias",
                      "k_bias: false needs separate q, k and v projections, but weights.layout "
                      "%s fuses them; use llama or gptj",
                      attn_layout_name(c->weights_layout));
    if (!in_range(c->memory_dim, 0, ATTN_MAX_D_MODEL))
        return broken(r, "cross_attention.memory_dim",
                      "cross_attention.memory_dim (%lld) must be in 0..%d",
                      (long long)c->memory_dim, ATTN_MAX_D_MODEL);
    if (c->memory_dim == 0)
        return ATTN_OK;
    if (attn_layout_fuses_qkv(c->weights_layout))
        return broken(r, "weights.layout",
                      "weights.layout: %s fuses q, k and v, but cross_attention projects q from "
                      "x and K/V from the memory; use llama or gptj",
                      attn_layout_name(c->weights_layout));
    return ATTN_OK;
}

/* What cross-attention leaves out: queries see every memory row, which
 * have no positions. */
static attn_status check_cross_with(const attn_config *c, rules *r) {
    const char *every = "every query sees every memory row",
               *none = "memory rows have no positions";
    const conflict no[] = {
        {"causal", c->causal, every},
        {"sliding_window", c->sliding_window > 0, every},
        {"chunked_attention", c->chunk > 0, every},
        {"rope", c->rope_style != ATTN_ROPE_NONE, none},
        {"alibi", c->alibi, none},
        {"query_temperature", c->temp_floor_scale > 0, "it is not defined for cross-attention"},
    };
    return c->memory_dim > 0 ? conflicts(r, "cross_attention", no, sizeof no / sizeof no[0])
                             : ATTN_OK;
}

/* The shard and the cache's block size. */
static attn_status check_shard_blocks(const attn_config *c, rules *r) {
    if (!in_range(c->shard_count, 0, ATTN_MAX_HEADS) ||
        !in_range(c->shard_index, 0, c->shard_count > 0 ? c->shard_count - 1 : 0) ||
        (c->shard_count > 0 && c->heads * c->shard_count > ATTN_MAX_HEADS))
        return broken(r, NULL, "shard %lld of %lld: expected 0 <= index < count <= %d heads",
                      (long long)c->shard_index, (long long)c->shard_count, ATTN_MAX_HEADS);
    if (c->shard_count > 1 && c->qk_norm == ATTN_QK_NORM_ALL)
        return broken(r, "qk_norm",
                      "qk_norm over the whole projection (scope all) needs every head: it "
                      "cannot be sharded");
    if (!in_range(c->kv_block_tokens, 1, ATTN_MAX_BLOCK_TOKENS))
        return broken(r, "kv_cache.block_tokens", "kv_cache.block_tokens (%lld) must be in 1..%d",
                      (long long)c->kv_block_tokens, ATTN_MAX_BLOCK_TOKENS);
    return ATTN_OK;
}

/* ggml's blocks of 32 run along each projection's input: d_model for
 * q/k/v (mla: q_a, kv_a; q_b over q_lora_rank), the heads' values for o,
 * memory_dim for cross-attention's k/v. */
static attn_status check_weight_blocks(const attn_config *c, rules *r) {
    if (!rt_quant_block_bytes(c->dtype))
        return ATTN_OK;
    const char *name = attn_dtype_name(c->dtype);
    int64_t oin = c->heads * attn_v_head_dim(c);
    if (c->mla_kv_lora_rank > 0 && (c->d_model % RT_QK || c->mla_q_lora_rank % RT_QK ||
                                    c->mla_kv_lora_rank % RT_QK || oin % RT_QK))
        return broken(r, "dtype",
                      "dtype %s quantizes blocks of %d inputs: d_model (%lld), mla.q_lora_rank "
                      "(%lld), mla.kv_lora_rank (%lld) and heads * mla.v_head_dim (%lld) must "
                      "be multiples of %d",
                      name, RT_QK, (long long)c->d_model, (long long)c->mla_q_lora_rank,
                      (long long)c->mla_kv_lora_rank, (long long)oin, RT_QK);
    if (c->mla_kv_lora_rank == 0 && (c->d_model % RT_QK || oin % RT_QK))
        return broken(r, "dtype",
                      "dtype %s quantizes blocks of %d inputs: d_model (%lld) and heads * "
                      "head_dim (%lld) must be multiples of %d",
                      name, RT_QK, (long long)c->d_model, (long long)oin, RT_QK);
    if (c->memory_dim % RT_QK)
        return broken(r, "cross_attention.memory_dim",
                      "dtype %s quantizes blocks of %d inputs: cross_attention.memory_dim "
                      "(%lld) must be a multiple of %d",
                      name, RT_QK, (long long)c->memory_dim, RT_QK);
    return ATTN_OK;
}

/* A q8_0 cache quantizes each head's K and V rows (mla: the cached latent
 * c_kv and k_pe) in blocks of 32. */
static attn_status check_cache_blocks(const attn_config *c, rules *r) {
    if (c->kv_dtype != ATTN_DTYPE_Q8_0)
        return ATTN_OK;
    int64_t kvl = c->mla_kv_lora_rank, rd = c->mla_qk_rope_head_dim;
    if (kvl > 0 && (kvl % RT_QK || rd % RT_QK))
        return broken(r, "kv_cache.dtype",
                      "kv_cache.dtype q8_0 quantizes the cached latent in blocks of %d: "
                      "mla.kv_lora_rank (%lld) and mla.qk_rope_head_dim (%lld) must be "
                      "multiples of %d",
                      RT_QK, (long long)kvl, (long long)rd, RT_QK);
    if (kvl == 0 && c->head_dim % RT_QK)
        return broken(r, "kv_cache.dtype",
                      "kv_cache.dtype q8_0 quantizes each head's K and V in blocks of %d: "
                      "head_dim (%lld) must be a multiple of %d",
                      RT_QK, (long long)c->head_dim, RT_QK);
    return ATTN_OK;
}

/* The rules in groups, in the order they are checked: a group's later
 * rules rely on its earlier ones; the first three groups, and known
 * enumerations, on which every later group relies, stop a walk. */
static attn_status (*const groups[])(const attn_config *, rules *) = {
    check_name, check_plain,         check_heads,        check_rope,       check_norm_layout,
    check_mask, check_dtypes,        check_bias_cross,   check_cross_with, check_shard_blocks,
    check_mla,  check_weight_blocks, check_cache_blocks, check_exprs,
};
enum { GROUPS_FIRST = 3, N_GROUPS = sizeof groups / sizeof groups[0] };

static bool enums_known(const attn_config *c) {
    return (unsigned)c->rope_style < ATTN_ROPE_COUNT &&
           (unsigned)c->rope_scaling < ATTN_SCALING_COUNT &&
           (unsigned)c->qk_norm < ATTN_QK_NORM_COUNT &&
           (unsigned)c->weights_layout < ATTN_LAYOUT_COUNT &&
           (unsigned)c->dtype < ATTN_DTYPE_COUNT && (unsigned)c->kv_dtype < ATTN_DTYPE_COUNT &&
           (unsigned)c->compute < ATTN_DTYPE_COUNT && (unsigned)c->activations < ATTN_DTYPE_COUNT;
}

attn_status attn_config_check(const attn_config *c, attn_msg *m) {
    if (!c)
        return rt_fail(m, ATTN_E_INVALID, "config is NULL");
    rules r = {m, NULL, NULL, NULL, 0};
    for (size_t i = 0; i < N_GROUPS; i++) /* the first broken rule is the one reported */
        if (groups[i](c, &r) != ATTN_OK)
            return ATTN_E_INVALID;
    return ATTN_OK;
}

int attn_config_problems(const attn_config *c, attn_config_problem_fn fn, void *user) {
    if (!c) {
        if (fn)
            fn(NULL, "config is NULL", user);
        return 1;
    }
    attn_msg m;
    rules r = {&m, NULL, fn, user, 0};
    for (size_t i = 0; i < N_GROUPS; i++)
        if (groups[i](c, &r) != ATTN_OK && (i < GROUPS_FIRST || !enums_known(c)))
            break;
    return r.n;
}

/* The texts of expression field `field` (inputs, score_mod or mask_mod)
 * of a and b mean the same: "q-kv<4" is "((q - kv) < 4)". */
static bool same_expr(const attn_config *a, const attn_config *b, size_t field) {
    const attn_config *cfg[2] = {a, b};
    char canon[2][ATTN_EXPR_TEXT_MAX];
    bool inputs = strcmp(fields[field].name, "inputs") == 0,
         mask = strcmp(fields[field].name, "mask_mod") == 0;
    attn_expr *e = malloc(sizeof *e);
    bool ok = e != NULL;
    for (int k = 0; k < 2 && ok; k++) { /* a field may hold no NUL: an invalid config */
        attn_inputs in;
        ok = strnlen(cfg[k]->inputs, ATTN_EXPR_TEXT_MAX) < ATTN_EXPR_TEXT_MAX &&
             strnlen((const char *)cfg[k] + fields[field].offset, ATTN_EXPR_TEXT_MAX) <
                 ATTN_EXPR_TEXT_MAX &&
             attn_config_parse_expr(cfg[k], mask, e, &in, NULL) == ATTN_OK;
        if (ok && inputs)
            attn_inputs_print(&in, canon[k], sizeof canon[k]);
        else if (ok)
            attn_expr_print(e, in.in, canon[k], sizeof canon[k]);
    }
    free(e);
    return ok && strcmp(canon[0], canon[1]) == 0;
}

const char *attn_config_differs(const attn_config *a, const attn_config *b) {
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const attn_config_field *f = &fields[i];
        const char *x = (const char *)a + f->offset, *y = (const char *)b + f->offset;
        bool same;
        if (f->kind == ATTN_KIND_NAME) { /* as strings */
            same = strncmp(x, y, f->size) == 0;
        } else if (f->kind == ATTN_KIND_EXPR) { /* as expressions: their canonical texts */
            same = strncmp(x, y, f->size) == 0 || same_expr(a, b, i);
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

bool rt_q8_query(const attn_config *c) {
    return c->activations == ATTN_DTYPE_Q8_0 && c->kv_dtype == ATTN_DTYPE_Q8_0 &&
           c->mla_kv_lora_rank == 0;
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

const char *attn_tree_unsupported(const attn_config *c) {
    if (!c)
        return "no config";
    if (c->memory_dim > 0)
        return "cross-attention has no keys of its own tokens";
    if (!c->causal)
        return "a draft tree needs causal: true";
    /* these measure distances in positions, and a draft token's position
     * (its depth) is not its place in the cache */
    if (c->sliding_window > 0)
        return "sliding_window is not supported with a draft tree";
    if (c->chunk > 0)
        return "chunked_attention is not supported with a draft tree";
    if (c->alibi)
        return "alibi is not supported with a draft tree";
    if (c->score_mod[0] || c->mask_mod[0])
        return "score_mod and mask_mod are not supported with a draft tree";
    return NULL;
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
