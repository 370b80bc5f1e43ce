/* spec_print.c: a config as normalized YAML, every default spelled out,
 * numbers in the shortest form that reads back to the same double. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
#include "spec/spec.h"

typedef struct out {
    char *buf; /* owned, malloc'd */
    size_t len, cap;
    bool failed;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(out *o, const char *fmt, ...) {
    if (o->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = 2 * o->cap + (size_t)n;
        char *b = realloc(o->buf, cap);
        if (!b) {
            o->failed = true;
            return;
        }
        o->buf = b;
        o->cap = cap;
    }
}

static const char *yn(bool b) {
    return b ? "true" : "false";
}

/* Plain key k of c (attn_config.def) as "key: value", once: done[k]
 * records it. */
static void plain(out *o, const attn_config *c, spec_key k, bool *done) {
    const attn_config_field *f = spec_plain_field(k);
    const char *p = (const char *)c + f->offset;
    char a[40];
    done[k] = true;
    if (f->kind == ATTN_KIND_I64)
        put(o, "%s: %lld\n", f->key, (long long)*(const int64_t *)p);
    else if (f->kind == ATTN_KIND_F64)
        put(o, "%s: %s\n", f->key, base_num(*(const double *)p, a, sizeof a));
    else
        put(o, "%s: %s\n", f->key, yn(*(const bool *)p));
}

char *attnc_spec_to_yaml(const attn_config *c) {
    if (!c)
        return NULL;
    static const char *const styles[] = {"none", "half", "interleaved"};
    static const char *const scalings[] = {"none", "linear", "llama3", "yarn"};
    out o = {malloc(1024), 0, 1024, false};
    if (!o.buf)
        return NULL;
    char a[40], b[40], d[40];
    bool done[SPEC_K_COUNT] = {false};
    put(&o, "name: %s\n", c->name);
    plain(&o, c, SPEC_K_HEADS, done);
    bool mla = c->mla_kv_lora_rank > 0; /* it defines kv_groups, head_dim, rotary_dim */
    if (mla)
        put(&o,
            "mla:\n  q_lora_rank: %lld\n  kv_lora_rank: %lld\n  qk_nope_head_dim: %lld\n"
            "  qk_rope_head_dim: %lld\n  v_head_dim: %lld\n  eps: %s\n",
            (long long)c->mla_q_lora_rank, (long long)c->mla_kv_lora_rank,
            (long long)c->mla_qk_nope_head_dim, (long long)c->mla_qk_rope_head_dim,
            (long long)c->mla_v_head_dim, base_num(c->mla_eps, a, sizeof a));
    else
        put(&o, "kv_groups: %lld\nhead_dim: %lld\n", (long long)c->kv_groups,
            (long long)c->head_dim);
    plain(&o, c, SPEC_K_D_MODEL, done);
    plain(&o, c, SPEC_K_CAUSAL, done);
    if (c->rope_style == ATTN_ROPE_NONE || (unsigned)c->rope_style >= ATTN_ROPE_COUNT) {
        put(&o, "rope: none\n");
    } else {
        put(&o, "rope:\n  base: %s\n  style: %s\n", base_num(c->rope_base, a, sizeof a),
            styles[c->rope_style]);
        if (!mla)
            put(&o, "  rotary_dim: %lld\n", (long long)c->rotary_dim);
        switch (c->rope_scaling) {
        case ATTN_SCALING_NONE:
        case ATTN_SCALING_COUNT: put(&o, "  scaling: none\n"); break;
        case ATTN_SCALING_LINEAR:
            put(&o, "  scaling:\n    type: %s\n    factor: %s\n", scalings[c->rope_scaling],
                base_num(c->rope_factor, a, sizeof a));
            break;
        case ATTN_SCALING_LLAMA3:
            put(&o,
                "  scaling:\n    type: %s\n    factor: %s\n    low_freq_factor: %s\n"
                "    high_freq_factor: %s\n    original_max_position: %lld\n",
                scalings[c->rope_scaling], base_num(c->rope_factor, a, sizeof a),
                base_num(c->rope_low_freq_factor, b, sizeof b),
                base_num(c->rope_high_freq_factor, d, sizeof d),
                (long long)c->rope_original_max_position);
            break;
        case ATTN_SCALING_YARN:
            put(&o, "  scaling:\n    type: yarn\n    factor: %s\n    original_max_position: %lld\n",
                base_num(c->rope_factor, a, sizeof a), (long long)c->rope_original_max_position);
            put(&o, "    beta_fast: %s\n    beta_slow: %s\n",
                base_num(c->rope_beta_fast, a, sizeof a), base_num(c->rope_beta_slow, b, sizeof b));
            put(&o, "    mscale: %s\n    mscale_all_dim: %s\n",
                base_num(c->rope_mscale, a, sizeof a),
                base_num(c->rope_mscale_all_dim, b, sizeof b));
            put(&o, "    truncate: %s\n    attention_factor: %s\n", yn(c->rope_truncate),
                base_num(c->rope_attention_factor, a, sizeof a));
            break;
        }
    }
    plain(&o, c, SPEC_K_SLIDING_WINDOW, done);
    plain(&o, c, SPEC_K_SOFTCAP, done);
    if (c->qk_norm == ATTN_QK_NORM_NONE || (unsigned)c->qk_norm >= ATTN_QK_NORM_COUNT)
        put(&o, "qk_norm: none\n");
    else
        put(&o, "qk_norm:\n  type: rms\n  scope: %s\n  eps: %s\n  weight: %s\n  offset: %d\n",
            c->qk_norm == ATTN_QK_NORM_HEAD ? "head" : "all", base_num(c->qk_norm_eps, a, sizeof a),
            yn(c->qk_norm_weight), (int)c->qk_norm_offset);
    plain(&o, c, SPEC_K_SINKS, done);
    plain(&o, c, SPEC_K_ALIBI, done);
    plain(&o, c, SPEC_K_CHUNKED, done);
    if (c->temp_floor_scale > 0)
        put(&o, "query_temperature:\n  floor_scale: %lld\n  attn_scale: %s\n",
            (long long)c->temp_floor_scale, base_num(c->temp_attn_scale, a, sizeof a));
    else
        put(&o, "query_temperature: none\n");
    plain(&o, c, SPEC_K_QKV_BIAS, done);
    put(&o, "k_bias: %s\n", yn(c->qkv_bias && !c->no_k_bias));
    plain(&o, c, SPEC_K_O_BIAS, done);
    if (c->memory_dim > 0)
        put(&o, "cross_attention:\n  memory_dim: %lld\n", (long long)c->memory_dim);
    else
        put(&o, "cross_attention: none\n");
    if (c->scale_auto && mla)
        put(&o, "scale: auto  # 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) * mscale^2 = %s\n",
            base_num(c->scale, a, sizeof a));
    else if (c->scale_auto)
        put(&o, "scale: auto  # 1/sqrt(head_dim) = %s\n", base_num(c->scale, a, sizeof a));
    else
        put(&o, "scale: %s\n", base_num(c->scale, a, sizeof a));
    put(&o, "dtype: %s\n", attn_dtype_name(c->dtype));
    put(&o, "compute: %s\n", attn_dtype_name(c->compute));
    put(&o, "activations: %s\n", attn_dtype_name(c->activations));
    put(&o, "weights:\n  layout: %s\n",
        attn_layout_name(c->weights_layout) ? attn_layout_name(c->weights_layout) : "?");
    put(&o, "kv_cache:\n  dtype: %s\n  block_tokens: %lld\n  max_tokens: %lld\n",
        attn_dtype_name(c->kv_dtype), (long long)c->kv_block_tokens, (long long)c->kv_max_tokens);
    /* expressions in canonical text, only when set (no quote or backslash
     * is in one: YAML reads it back as printed) */
    attn_inputs in;
    if (c->inputs[0] && attn_inputs_parse(c->inputs, &in, NULL) == ATTN_OK) {
        put(&o, "inputs:\n");
        for (int i = 0; i < in.n; i++) {
            const attn_expr_input *x = &in.in[i];
            static const char *const per[] = {"token", "sequence", "weight"};
            put(&o, "  %s: {per: %s", in.name[i], per[x->per]);
            if (x->per == ATTN_INPUT_WEIGHT) {
                put(&o, ", shape: [%lld", (long long)x->dims[0]);
                if (x->rank > 1)
                    put(&o, ", %lld", (long long)x->dims[1]);
                put(&o, "]");
            }
            put(&o, "}\n");
        }
    }
    if (c->score_mod[0])
        put(&o, "score_mod: \"%s\"\n", c->score_mod);
    if (c->mask_mod[0])
        put(&o, "mask_mod: \"%s\"\n", c->mask_mod);
    for (int k = SPEC_K_FIRST_PLAIN; k < SPEC_K_COUNT; k++) /* keys with no place above */
        if (!done[k])
            plain(&o, c, (spec_key)k, done);
    if (o.failed) {
        free(o.buf);
        return NULL;
    }
    return o.buf;
}
