/* ir_print.c: the graph as text, one node a line:
 *   %7 = rope %5 : f32[128, 32, S]  ; 9:1
 * Stable enough for golden files: ids, op names, attributes, shapes and
 * the line:col of the spec key each node comes from. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

typedef struct text {
    char *buf;
    size_t len, cap;
    arena *a;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(text *t, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || !t->buf)
        return;
    size_t k = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
    if (t->len + k + 1 > t->cap) {
        size_t cap = 2 * (t->cap + k + 1);
        char *b = arena_alloc(t->a, cap);
        if (!b) {
            t->buf = NULL;
            return;
        }
        memcpy(b, t->buf, t->len);
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, tmp, k);
    t->len += k;
    t->buf[t->len] = 0;
}

static void put_dim(text *t, ir_dim d) {
    static const char *const sym[] = {"", "S", "T", "S*T"};
    int64_t co[4] = {d.c, d.s, d.t, d.st};
    bool any = false;
    for (int i = 0; i < 4; i++) {
        if (!co[i])
            continue;
        if (any)
            put(t, co[i] < 0 ? "-" : "+");
        else if (co[i] < 0)
            put(t, "-");
        int64_t m = co[i] < 0 ? -co[i] : co[i];
        if (i == 0 || m != 1)
            put(t, "%lld%s", (long long)m, i ? "*" : "");
        put(t, "%s", sym[i]);
        any = true;
    }
    if (!any)
        put(t, "0");
}

/* The mask's extent beyond causal: window and chunk. */
static void put_mask(text *t, const attn_config *c) {
    if (c->sliding_window)
        put(t, " window=%lld", (long long)c->sliding_window);
    if (c->chunk)
        put(t, " chunk=%lld", (long long)c->chunk);
}

static void put_attrs(text *t, const ir_graph *g, const ir_node *n) {
    const attn_config *c = &g->cfg;
    static const char *const styles[] = {"none", "half", "interleaved"};
    static const char *const scalings[] = {"none", "linear", "llama3", "yarn"};
    switch (n->op) {
    case IR_OP_WEIGHT: put(t, " %s", ir_weight_name(n->weight)); break;
    case IR_OP_LINEAR:
        if (n->scale_cols)
            put(t, " scale=%.9g cols=%lld", n->scale, (long long)n->scale_cols);
        if (n->rope_cols)
            put(t, " rope_cols=%lld", (long long)n->rope_cols);
        for (int i = 0; i < 2; i++)
            if (n->to_cache[i])
                put(t, " cache_%s=%lld", i ? "v" : "k", (long long)n->cache_col[i]);
        break;
    case IR_OP_SLICE:
        put(t, " offset=%lld cols=%lld", (long long)n->offset, (long long)n->cols);
        break;
    case IR_OP_ROPE:
        put(t, " base=%.9g style=%s rotary_dim=%lld scaling=%s", c->rope_base,
            styles[c->rope_style], (long long)c->rotary_dim, scalings[c->rope_scaling]);
        break;
    case IR_OP_CACHE_APPEND:
        put(t, " %s%s", n->cache ? "v" : "k", n->fused ? " stored_by_epilogue" : "");
        break;
    case IR_OP_ROPE_TABLE:
        put(t, " base=%.9g rotary_dim=%lld scaling=%s", c->rope_base, (long long)c->rotary_dim,
            scalings[c->rope_scaling]);
        break;
    case IR_OP_FLASH:
        put(t, " scale=%.9g", n->scale);
        if (n->softcap > 0)
            put(t, " softcap=%.9g", n->softcap);
        if (n->causal)
            put(t, " causal");
        if (n->causal)
            put_mask(t, c);
        if (n->alibi)
            put(t, " alibi");
        if (n->score_mod)
            put(t, " score_mod");
        if (n->mask_mod)
            put(t, " mask_mod");
        if (n->args[1]->ne[1].c != c->heads)
            put(t, " group=%lld", (long long)(c->heads / n->args[1]->ne[1].c));
        if (n->split_tokens)
            put(t, " split_kv<=%lld", (long long)n->split_tokens);
        break;
    case IR_OP_SCALE: put(t, " %.9g", n->scale); break;
    case IR_OP_SOFTCAP: put(t, " %.9g", n->softcap); break;
    case IR_OP_MASK:
        put(t, " causal");
        put_mask(t, c);
        break;
    case IR_OP_QK_NORM:
        put(t, " rms scope=%s eps=%.9g%s", c->qk_norm == ATTN_QK_NORM_ALL ? "all" : "head",
            c->qk_norm_eps, c->qk_norm_offset ? " offset=1" : "");
        break;
    case IR_OP_TEMPERATURE:
        put(t, " floor_scale=%lld attn_scale=%.9g", (long long)c->temp_floor_scale,
            c->temp_attn_scale);
        break;
    case IR_OP_QK:
    case IR_OP_PV:
        if (n->args[1] && n->args[1]->ndim == 3 && n->args[1]->ne[1].c != c->heads)
            put(t, " group=%lld", (long long)(c->heads / n->args[1]->ne[1].c));
        if (n->split_tokens)
            put(t, " split_kv<=%lld", (long long)n->split_tokens);
        break;
    case IR_OP_INPUT:
    case IR_OP_MEMORY:
    case IR_OP_SPLIT_HEADS:
    case IR_OP_GQA_EXPAND:
    case IR_OP_SOFTMAX:
    case IR_OP_ALIBI:
    case IR_OP_SCORE_MOD: /* the expressions are the config lines' */
    case IR_OP_MASK_MOD:
    case IR_OP_MERGE_HEADS:
    case IR_OP_RMS_NORM:
    case IR_OP_MLA_LATENT:
    case IR_OP_MLA_ROPE:
    case IR_OP_MLA_KEYS:
    case IR_OP_MLA_VALUES:
    case IR_OP_MLA_QUERY:
    case IR_OP_MLA_OUTPUT:
    case IR_OP_OUTPUT:
    case IR_OP_COUNT: break;
    case IR_OP_BY_PREFILL: put(t, " tokens=%lld", (long long)n->tokens); break;
    }
    if (n->gate)
        put(t, " %s_prefill>=%lld", n->gate > 0 ? "when" : "unless", (long long)llabs(n->gate));
}

/* Every field of the config (attn_config.def) as name=value, on
 * "config" lines of at most 100 columns: what the graph was built for,
 * so that the text alone can be read back (attnc opt). */
static void put_config(text *t, const attn_config *c) {
    size_t n, col = 0;
    const attn_config_field *f = attn_config_fields(&n);
    for (size_t i = 0; i < n; i++) {
        const char *p = (const char *)c + f[i].offset;
        char v[ATTN_EXPR_TEXT_MAX + 2], item[ATTN_EXPR_TEXT_MAX + 96];
        int32_t e;
        if (f[i].kind == ATTN_KIND_EXPR && !p[0])
            continue; /* no expression: the field is not printed (ir_parse: "") */
        switch (f[i].kind) {
        case ATTN_KIND_EXPR: snprintf(v, sizeof v, "\"%s\"", p); break;
        case ATTN_KIND_NAME: snprintf(v, sizeof v, "%s", p); break;
        case ATTN_KIND_I64: snprintf(v, sizeof v, "%lld", (long long)*(const int64_t *)p); break;
        case ATTN_KIND_I32: snprintf(v, sizeof v, "%d", (int)*(const int32_t *)p); break;
        case ATTN_KIND_F64: base_num(*(const double *)p, v, sizeof v); break;
        case ATTN_KIND_BOOL:
            snprintf(v, sizeof v, "%s", *(const bool *)p ? "true" : "false");
            break;
        default:
            memcpy(&e, p, sizeof e); /* the enums are ints */
            snprintf(v, sizeof v, "%s",
                     ir_enum_name(f[i].kind, e) ? ir_enum_name(f[i].kind, e) : "?");
        }
        int len = snprintf(item, sizeof item, "%s=%s", f[i].name, v);
        if (col && col + 1 + (size_t)len > 100) {
            put(t, "\n");
            col = 0;
        }
        if (!col) {
            put(t, "config");
            col = 6;
        }
        put(t, " %s", item);
        col += 1 + (size_t)len;
    }
    put(t, "\n");
}

const char *ir_node_attrs(ir_graph *g, const ir_node *n) {
    text t = {arena_alloc(&g->ctx->arena, 256), 0, 256, &g->ctx->arena};
    if (t.buf)
        t.buf[0] = 0;
    put_attrs(&t, g, n);
    return t.buf;
}

char *ir_print(ir_graph *g) {
    text t = {arena_alloc(&g->ctx->arena, 4096), 0, 4096, &g->ctx->arena};
    if (t.buf)
        t.buf[0] = 0;
    put_config(&t, &g->cfg);
    if (g->cfg.memory_dim > 0)
        put(&t, "graph %s  ; S = new tokens (memory rows from memory), T = memory rows\n",
            g->cfg.name);
    else
        put(&t, "graph %s  ; S = new tokens, T = cached + new tokens\n", g->cfg.name);
    for (int i = 0; i < g->n_nodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->dead)
            continue;
        put(&t, "  %%%d = %s", n->id, ir_op_name(n->op));
        for (int j = 0; j < n->nargs; j++)
            put(&t, "%s%%%d", j ? ", " : " ", n->args[j]->id);
        put_attrs(&t, g, n);
        put(&t, " : %s[", attn_dtype_name(n->dt));
        for (int d = 0; d < n->ndim; d++) {
            if (d)
                put(&t, ", ");
            put_dim(&t, n->ne[d]);
        }
        put(&t, "]");
        if (n->loc.line)
            put(&t, "  ; %u:%u", n->loc.line, n->loc.col);
        put(&t, "\n");
    }
    return t.buf;
}
