/* ir.c: op table, symbolic dims, node creation and the shape rules (one
 * per op, named in ir_ops.def) that the builder, the passes and the
 * verifier all use through ir_infer_shape. */
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* Each op's shape rule (ir_ops.def's last column): checks the operands
 * and sets n's dims and dtype, or says why not. */
typedef bool shape_rule(const ir_graph *g, ir_node *n, char *why, size_t why_len);
#define X(op, name, lo, hi, flags, attrs, shape) static shape_rule shape;
#include "ir/ir_ops.def"
#undef X

static const struct {
    const char *name;
    int lo, hi;
    unsigned flags, attrs;
    shape_rule *shape;
} ops[IR_OP_COUNT] = {
#define X(op, name, lo, hi, flags, attrs, shape) {name, lo, hi, flags, attrs, shape},
#include "ir/ir_ops.def"
#undef X
};

const char *ir_op_name(ir_op op) {
    return ops[op].name;
}

unsigned ir_op_flags(ir_op op) {
    return ops[op].flags;
}

unsigned ir_op_attrs(ir_op op) {
    return ops[op].attrs;
}

const char *ir_weight_name(int id) {
    const char *name = attn_weight_name(id);
    return name ? name : "?";
}

int ir_weight_id(const char *name) {
    return attn_weight_by_name(name);
}

static const char *const *enum_names(attn_field_kind k, int *n) {
    static const char *const styles[] = {"none", "half", "interleaved"};
    static const char *const scalings[] = {"none", "linear", "llama3", "yarn"};
    static const char *const norms[] = {"none", "head", "all"};
    static const char *const layouts[] = {"llama", "gptj", "neox", "falcon", "phi3", "bloom"};
    static const char *const dtypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
    _Static_assert(sizeof styles / sizeof *styles == ATTN_ROPE_COUNT, "rope styles");
    _Static_assert(sizeof scalings / sizeof *scalings == ATTN_SCALING_COUNT, "scalings");
    _Static_assert(sizeof norms / sizeof *norms == ATTN_QK_NORM_COUNT, "qk norms");
    _Static_assert(sizeof layouts / sizeof *layouts == ATTN_LAYOUT_COUNT, "layouts");
    _Static_assert(sizeof dtypes / sizeof *dtypes == ATTN_DTYPE_COUNT, "dtypes");
    switch (k) {
    case ATTN_KIND_ROPE_STYLE: *n = ATTN_ROPE_COUNT; return styles;
    case ATTN_KIND_SCALING: *n = ATTN_SCALING_COUNT; return scalings;
    case ATTN_KIND_QK_NORM: *n = ATTN_QK_NORM_COUNT; return norms;
    case ATTN_KIND_LAYOUT: *n = ATTN_LAYOUT_COUNT; return layouts;
    case ATTN_KIND_DTYPE: *n = ATTN_DTYPE_COUNT; return dtypes;
    default: *n = 0; return NULL;
    }
}

const char *ir_enum_name(attn_field_kind k, int v) {
    int n;
    const char *const *names = enum_names(k, &n);
    return v >= 0 && v < n ? names[v] : NULL;
}

int ir_enum_value(attn_field_kind k, const char *s, size_t len) {
    int n;
    const char *const *names = enum_names(k, &n);
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && strncmp(names[i], s, len) == 0)
            return i;
    return -1;
}

ir_dim ir_const(int64_t c) {
    return (ir_dim){c, 0, 0, 0};
}

ir_dim ir_sym_s(void) {
    return (ir_dim){0, 1, 0, 0};
}

ir_dim ir_sym_t(void) {
    return (ir_dim){0, 0, 1, 0};
}

bool ir_dim_eq(ir_dim a, ir_dim b) {
    return a.c == b.c && a.s == b.s && a.t == b.t && a.st == b.st;
}

bool ir_dim_is_const(ir_dim d, int64_t *v) {
    if (d.s || d.t || d.st)
        return false;
    *v = d.c;
    return true;
}

static void set_shape(ir_node *n, int ndim, ir_dim a, ir_dim b, ir_dim c) {
    n->ndim = ndim;
    n->ne[0] = a;
    n->ne[1] = b;
    n->ne[2] = c;
}

/* Shape of weight w for config c: [in, out] for matrices, [out] for biases. */
static void weight_shape(const attn_config *c, ir_node *n) {
    int64_t D = c->d_model, qd = c->heads * c->head_dim, kvd = c->kv_groups * c->head_dim;
    int64_t od = c->heads * attn_v_head_dim(c), ql = c->mla_q_lora_rank;
    int64_t kvl = c->mla_kv_lora_rank, r = c->mla_qk_rope_head_dim;
    ir_dim z = ir_const(0);
    bool mla = kvl > 0;
    switch ((attn_weight_id)n->weight) {
    case ATTN_W_Q: set_shape(n, 2, ir_const(D), ir_const(qd), z); break;
    case ATTN_W_Q_A: set_shape(n, mla ? 2 : 0, ir_const(D), ir_const(ql), z); break;
    case ATTN_W_Q_A_NORM: set_shape(n, mla ? 1 : 0, ir_const(ql), z, z); break;
    case ATTN_W_Q_B: set_shape(n, mla ? 2 : 0, ir_const(ql), ir_const(qd), z); break;
    case ATTN_W_KV_A: set_shape(n, mla ? 2 : 0, ir_const(D), ir_const(kvl + r), z); break;
    case ATTN_W_KV_A_NORM: set_shape(n, mla ? 1 : 0, ir_const(kvl), z, z); break;
    case ATTN_W_KV_B:
        set_shape(n, mla ? 2 : 0, ir_const(kvl),
                  ir_const(c->heads * (c->mla_qk_nope_head_dim + c->mla_v_head_dim)), z);
        break;
    case ATTN_W_K:
    case ATTN_W_V: /* cross-attention: K and V from the memory */
        set_shape(n, 2, ir_const(c->memory_dim > 0 ? c->memory_dim : D), ir_const(kvd), z);
        break;
    case ATTN_W_O: set_shape(n, 2, ir_const(od), ir_const(D), z); break;
    case ATTN_W_QKV: set_shape(n, 2, ir_const(D), ir_const(qd + 2 * kvd), z); break;
    case ATTN_B_Q: set_shape(n, 1, ir_const(qd), z, z); break;
    case ATTN_B_K:
    case ATTN_B_V: set_shape(n, 1, ir_const(kvd), z, z); break;
    case ATTN_B_O: set_shape(n, 1, ir_const(D), z, z); break;
    case ATTN_B_QKV: set_shape(n, 1, ir_const(qd + 2 * kvd), z, z); break;
    case ATTN_W_Q_NORM:
    case ATTN_W_K_NORM: {
        int64_t all = n->weight == ATTN_W_Q_NORM ? qd : kvd;
        set_shape(n, 1, ir_const(c->qk_norm == ATTN_QK_NORM_ALL ? all : c->head_dim), z, z);
        break;
    }
    case ATTN_W_SINKS: set_shape(n, 1, ir_const(c->heads), z, z); break;
    case ATTN_W_INPUT: /* the expressions' weights: buffers of their own (cg_plan.c) */
    case ATTN_WEIGHT_COUNT: n->ndim = 0; break;
    }
}

#define WHY(...) (snprintf(why, why_len, __VA_ARGS__), false)

/* The ops of multi-head latent attention need a spec with mla. */
static bool want_mla(const ir_graph *g, char *why, size_t why_len) {
    return g->cfg.mla_kv_lora_rank > 0 ? true : WHY("the spec has no mla");
}

static bool want_ndim(const ir_node *a, int nd, char *why, size_t why_len) {
    if (a->ndim != nd)
        return WHY("operand %%%d has %d dims, expected %d", a->id, a->ndim, nd);
    return true;
}

/* The shape rule of input (ir_ops.def). */
static bool shape_input(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s(), z = ir_const(0);
    (void)why, (void)why_len;
    set_shape(n, 2, ir_const(c->d_model), S, z);
    return true;
}

/* The shape rule of memory (ir_ops.def). */
static bool shape_memory(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s(), z = ir_const(0);
    if (c->memory_dim <= 0)
        return WHY("memory without cross_attention");
    set_shape(n, 2, ir_const(c->memory_dim), S, z);
    return true;
}

/* The shape rule of weight (ir_ops.def). */
static bool shape_weight(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    weight_shape(c, n);
    return n->ndim ? true : WHY("unknown weight %d", n->weight);
}

/* The shape rule of linear (ir_ops.def). */
static bool shape_linear(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s(), z = ir_const(0);
    ir_node *a = n->args[0], *b = n->args[1];
    int64_t v = 0;
    if (!want_ndim(a, 2, why, why_len) || !want_ndim(b, 2, why, why_len))
        return false;
    if (!ir_dim_eq(a->ne[0], b->ne[0]) || !ir_dim_eq(a->ne[1], S))
        return WHY("input %%%d is not [in, S] with the in of weight %%%d", a->id, b->id);
    for (int i = 2; i < n->nargs; i++) {
        const ir_node *o = n->args[i];
        if (o->op == IR_OP_WEIGHT ? o->ndim != 1 || !ir_dim_eq(o->ne[0], b->ne[1])
                                  : o->op != IR_OP_ROPE_TABLE)
            return WHY("operand %%%d is neither a bias matching weight %%%d nor a rope table",
                       o->id, b->id);
        if (i == 3 && o->op == n->args[2]->op)
            return WHY("operands %%%d and %%%d are of one kind", n->args[2]->id, o->id);
    }
    if (!ir_dim_is_const(b->ne[1], &v) || n->scale_cols < 0 || n->scale_cols > v)
        return WHY("scaled columns %lld exceed the %lld outputs", (long long)n->scale_cols,
                   (long long)v);
    if (n->rope_cols < 0 || n->rope_cols > v || n->rope_cols % c->head_dim ||
        (n->rope_cols > 0) != (ir_linear_rope_table(n) != NULL))
        return WHY("rotated columns %lld are not whole heads within %lld outputs, with a table",
                   (long long)n->rope_cols, (long long)v);
    for (int i = 0; i < 2; i++)
        if (n->to_cache[i] &&
            (n->cache_col[i] < 0 || n->cache_col[i] + c->kv_groups * c->head_dim > v))
            return WHY("cache columns from %lld exceed the %lld outputs",
                       (long long)n->cache_col[i], (long long)v);
    set_shape(n, 2, b->ne[1], S, z);
    return true;
}

/* The shape rule of slice (ir_ops.def). */
static bool shape_slice(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    (void)g;
    ir_node *a = n->args[0];
    int64_t v = 0;
    if (a->ndim != 3 && !want_ndim(a, 2, why, why_len))
        return false;
    if (!ir_dim_is_const(a->ne[0], &v) || n->offset < 0 || n->cols < 1 || n->offset + n->cols > v)
        return WHY("columns [%lld, %lld) outside [0, %lld)", (long long)n->offset,
                   (long long)(n->offset + n->cols), (long long)v);
    set_shape(n, a->ndim, ir_const(n->cols), a->ne[1], a->ne[2]);
    return true;
}

/* The shape rule of split_heads (ir_ops.def). */
static bool shape_split_heads(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim hd = ir_const(c->head_dim);
    ir_node *a = n->args[0];
    int64_t v = 0;
    if (!want_ndim(a, 2, why, why_len))
        return false;
    if (!ir_dim_is_const(a->ne[0], &v) || v % c->head_dim)
        return WHY("%lld columns are not a whole number of heads of %lld", (long long)v,
                   (long long)c->head_dim);
    set_shape(n, 3, hd, ir_const(v / c->head_dim), a->ne[1]);
    return true;
}

/* The shape rule of qk_norm, rope, temperature (ir_ops.def). */
static bool shape_per_head(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s();
    ir_dim hd = ir_const(c->head_dim);
    ir_node *a = n->args[0], *b = n->args[1];
    int64_t v = 0;
    if (!want_ndim(a, 3, why, why_len))
        return false;
    if (!ir_dim_eq(a->ne[0], hd) || !ir_dim_eq(a->ne[2], S))
        return WHY("operand %%%d is not [head_dim, heads, S]", a->id);
    if (n->op == IR_OP_TEMPERATURE && !ir_dim_eq(a->ne[1], ir_const(c->heads)))
        return WHY("operand %%%d is not the queries [head_dim, heads, S]", a->id);
    if (n->op == IR_OP_QK_NORM && c->qk_norm == ATTN_QK_NORM_NONE)
        return WHY("the spec has no qk_norm");
    if (n->op == IR_OP_QK_NORM && b) {
        int64_t len = c->qk_norm == ATTN_QK_NORM_HEAD ? c->head_dim
                      : ir_dim_is_const(a->ne[1], &v) ? v * c->head_dim
                                                      : -1;
        if (b->op != IR_OP_WEIGHT || b->ndim != 1 || !ir_dim_eq(b->ne[0], ir_const(len)))
            return WHY("operand %%%d is not a norm weight of %lld elements", b->id, (long long)len);
    }
    set_shape(n, 3, a->ne[0], a->ne[1], a->ne[2]);
    return true;
}

/* The shape rule of rope_table (ir_ops.def). */
static bool shape_rope_table(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s(), z = ir_const(0);
    if (c->rope_style == ATTN_ROPE_NONE)
        return WHY("the spec has no rope");
    set_shape(n, 2, ir_const(c->rotary_dim), S, z);
    return true;
}

/* The shape rule of cache_append (ir_ops.def). */
static bool shape_cache_append(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s(), T = ir_sym_t();
    ir_dim hd = ir_const(c->head_dim);
    ir_node *a = n->args[0];
    bool mla = c->mla_kv_lora_rank > 0;
    if (!want_ndim(a, 3, why, why_len))
        return false;
    /* a K/V head per group, or MLA's one latent per token in K */
    ir_dim row = mla ? ir_const(attn_cache_columns(c, 0)) : hd;
    ir_dim groups = ir_const(mla ? 1 : c->kv_groups);
    if (!ir_dim_eq(a->ne[0], row) || !ir_dim_eq(a->ne[1], groups) || !ir_dim_eq(a->ne[2], S) ||
        (mla && n->cache != 0))
        return WHY("operand %%%d is not [%s, S] of cache %s", a->id,
                   mla ? "latent, 1" : "head_dim, kv_groups", mla ? "K" : "K or V");
    set_shape(n, 3, row, a->ne[1], T);
    n->dt = c->kv_dtype;
    return true;
}

/* The shape rule of gqa_expand (ir_ops.def). */
static bool shape_gqa_expand(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim T = ir_sym_t();
    ir_node *a = n->args[0];
    int64_t v = 0, w = 0;
    if (!want_ndim(a, 3, why, why_len))
        return false;
    if (!ir_dim_is_const(a->ne[0], &w) || !ir_dim_is_const(a->ne[1], &v) || c->heads % v ||
        !ir_dim_eq(a->ne[2], T))
        return WHY("operand %%%d is not [dims, kv heads dividing heads, T]", a->id);
    set_shape(n, 3, a->ne[0], ir_const(c->heads), T); /* widened to f32 */
    return true;
}

/* The shape rule of qk, pv, flash (ir_ops.def). */
static bool shape_attention(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s(), T = ir_sym_t();
    ir_dim hd = ir_const(c->head_dim);
    ir_node *a = n->args[0], *b = n->args[1];
    bool mla = c->mla_kv_lora_rank > 0;
    int64_t v = 0, w = 0;
    const ir_node *q = n->op != IR_OP_PV ? a : NULL, *p = n->op == IR_OP_PV ? a : NULL;
    if (!want_ndim(a, 3, why, why_len) || !want_ndim(b, 3, why, why_len))
        return false;
    if (n->op == IR_OP_FLASH && n->nargs == 4 && !ir_sinks(n))
        return WHY("operand %%%d is not the sinks [heads]", n->args[3]->id);
    /* the q.k dims are q's (head_dim; MLA's latent + rope), the
     * values' their own (head_dim; MLA's latent) */
    ir_dim qkd = q ? q->ne[0] : hd,
           vd = n->op == IR_OP_QK ? hd : n->args[n->op == IR_OP_PV ? 1 : 2]->ne[0];
    for (int i = 1; i < n->nargs && i < 3; i++) {
        const ir_node *kv = n->args[i];
        bool is_v = n->op == IR_OP_PV || i == 2;
        if (!want_ndim(kv, 3, why, why_len))
            return false;
        if (!ir_dim_eq(kv->ne[0], is_v ? vd : qkd) || !ir_dim_is_const(kv->ne[0], &v) ||
            (!mla && !ir_dim_eq(kv->ne[0], hd)) || !ir_dim_eq(kv->ne[2], T) ||
            !ir_dim_is_const(kv->ne[1], &w) || c->heads % w ||
            (i == 2 && !ir_dim_eq(kv->ne[1], b->ne[1])))
            return WHY("keys/values %%%d are not [head dims, kv heads, T]", kv->id);
    }
    if (q && (!ir_dim_is_const(q->ne[0], &v) || (!mla && !ir_dim_eq(q->ne[0], hd)) ||
              !ir_dim_eq(q->ne[1], ir_const(c->heads)) || !ir_dim_eq(q->ne[2], S)))
        return WHY("queries %%%d are not [head_dim, heads, S]", q->id);
    if (p && (!ir_dim_eq(p->ne[0], T) || !ir_dim_eq(p->ne[1], S) ||
              !ir_dim_eq(p->ne[2], ir_const(c->heads))))
        return WHY("weights %%%d are not [T, S, heads]", p->id);
    if (n->op == IR_OP_QK)
        set_shape(n, 3, T, S, ir_const(c->heads));
    else
        set_shape(n, 3, vd, ir_const(c->heads), S);
    return true;
}

/* The shape rule of scale, softcap, alibi, mask, softmax (ir_ops.def). */
static bool shape_scores(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    (void)g;
    ir_dim S = ir_sym_s(), T = ir_sym_t();
    ir_node *a = n->args[0], *b = n->args[1];
    if (!want_ndim(a, 3, why, why_len))
        return false;
    if (n->nargs == 2 && !ir_sinks(n))
        return WHY("operand %%%d is not the sinks [heads]", b->id);
    if (!ir_dim_eq(a->ne[0], T) || !ir_dim_eq(a->ne[1], S))
        return WHY("operand %%%d is not [T, S, heads]", a->id);
    set_shape(n, 3, a->ne[0], a->ne[1], a->ne[2]);
    return true;
}

/* The shape rule of merge_heads (ir_ops.def). */
static bool shape_merge_heads(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    (void)g;
    ir_dim S = ir_sym_s(), z = ir_const(0);
    ir_node *a = n->args[0];
    int64_t v = 0, w = 0;
    if (!want_ndim(a, 3, why, why_len))
        return false;
    if (!ir_dim_is_const(a->ne[0], &v) || !ir_dim_is_const(a->ne[1], &w) || !ir_dim_eq(a->ne[2], S))
        return WHY("operand %%%d is not [head_dim, heads, S]", a->id);
    set_shape(n, 2, ir_const(v * w), S, z);
    return true;
}

/* The shape rule of rms_norm (ir_ops.def). */
static bool shape_rms_norm(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    ir_dim S = ir_sym_s(), z = ir_const(0);
    ir_node *a = n->args[0], *b = n->args[1];
    if (!want_mla(g, why, why_len) || !want_ndim(a, 2, why, why_len) ||
        !want_ndim(b, 1, why, why_len))
        return false;
    if (!ir_dim_eq(a->ne[0], b->ne[0]) || !ir_dim_eq(a->ne[1], S) || b->op != IR_OP_WEIGHT)
        return WHY("operand %%%d is not [m, S] with the m of norm weight %%%d", a->id, b->id);
    set_shape(n, 2, a->ne[0], S, z);
    return true;
}

/* The shape rule of mla_rope (ir_ops.def). */
static bool shape_mla_rope(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s();
    ir_dim hd = ir_const(c->head_dim);
    ir_node *a = n->args[0], *b = n->args[1];
    if (!want_mla(g, why, why_len))
        return false;
    if (!want_ndim(a, 3, why, why_len))
        return false;
    if (!ir_dim_eq(a->ne[0], hd) || !ir_dim_eq(a->ne[1], ir_const(c->heads)) ||
        !ir_dim_eq(a->ne[2], S) || b->op != IR_OP_ROPE_TABLE)
        return WHY("operands %%%d, %%%d are not [head_dim, heads, S] and a rope table", a->id,
                   b->id);
    set_shape(n, 3, a->ne[0], a->ne[1], a->ne[2]);
    return true;
}

/* The shape rule of mla_keys, mla_values (ir_ops.def). */
static bool shape_mla_expand(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim T = ir_sym_t();
    ir_dim hd = ir_const(c->head_dim);
    ir_node *a = n->args[0], *b = n->args[1];
    if (!want_mla(g, why, why_len))
        return false;
    if (!want_ndim(a, 3, why, why_len))
        return false;
    if (!ir_dim_eq(a->ne[0], ir_const(attn_cache_columns(c, 0))) ||
        !ir_dim_eq(a->ne[1], ir_const(1)) || !ir_dim_eq(a->ne[2], T))
        return WHY("operand %%%d is not the cached latents [latent, 1, T]", a->id);
    if (b->op != IR_OP_WEIGHT || b->weight != ATTN_W_KV_B)
        return WHY("operand %%%d is not weight kv_b_proj.weight", b->id);
    set_shape(n, 3, n->op == IR_OP_MLA_KEYS ? hd : ir_const(c->mla_v_head_dim), ir_const(c->heads),
              T);
    return true;
}

/* The shape rule of mla_latent, mla_query, mla_output (ir_ops.def). */
static bool shape_mla_latent_space(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s(), z = ir_const(0);
    ir_dim hd = ir_const(c->head_dim);
    ir_node *a = n->args[0], *b = n->args[1];
    if (!want_mla(g, why, why_len))
        return false;
    int64_t kvl = c->mla_kv_lora_rank, r = c->mla_qk_rope_head_dim, H = c->heads;
    const ir_node *tab = n->nargs > 2 ? n->args[2] : NULL;
    if (tab && tab->op != IR_OP_ROPE_TABLE)
        return WHY("operand %%%d is not a rope table", tab->id);
    int want_w = n->op == IR_OP_MLA_LATENT ? ATTN_W_KV_A_NORM : ATTN_W_KV_B;
    if (b->op != IR_OP_WEIGHT || b->weight != want_w)
        return WHY("operand %%%d is not weight %s", b->id, ir_weight_name(want_w));
    if (n->op == IR_OP_MLA_LATENT) {
        if (!want_ndim(a, 2, why, why_len))
            return false;
        if (!ir_dim_eq(a->ne[0], ir_const(kvl + r)) || !ir_dim_eq(a->ne[1], S))
            return WHY("operand %%%d is not [kv_lora_rank + qk_rope_head_dim, S]", a->id);
        set_shape(n, 3, a->ne[0], ir_const(1), S);
        return true;
    }
    if (!want_ndim(a, 3, why, why_len))
        return false;
    ir_dim in = n->op == IR_OP_MLA_QUERY ? hd : ir_const(kvl);
    if (!ir_dim_eq(a->ne[0], in) || !ir_dim_eq(a->ne[1], ir_const(H)) || !ir_dim_eq(a->ne[2], S))
        return WHY("operand %%%d is not [%s, heads, S]", a->id,
                   n->op == IR_OP_MLA_QUERY ? "head_dim" : "kv_lora_rank");
    if (n->op == IR_OP_MLA_QUERY)
        set_shape(n, 3, ir_const(kvl + r), ir_const(H), S);
    else
        set_shape(n, 2, ir_const(H * c->mla_v_head_dim), S, z);
    return true;
}

/* The shape rule of by_prefill (ir_ops.def). */
static bool shape_by_prefill(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    (void)g;
    ir_dim S = ir_sym_s(), z = ir_const(0);
    ir_node *a = n->args[0], *b = n->args[1];
    if (!want_ndim(a, 2, why, why_len) || !want_ndim(b, 2, why, why_len))
        return false;
    if (!ir_dim_eq(a->ne[0], b->ne[0]) || !ir_dim_eq(a->ne[1], S) || !ir_dim_eq(b->ne[1], S) ||
        a->dt != b->dt)
        return WHY("operands %%%d, %%%d are not both [m, S] of one dtype", a->id, b->id);
    set_shape(n, 2, a->ne[0], S, z);
    return true;
}

/* The shape rule of output (ir_ops.def). */
static bool shape_output(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    const attn_config *c = &g->cfg;
    ir_dim S = ir_sym_s(), z = ir_const(0);
    ir_node *a = n->args[0];
    if (!want_ndim(a, 2, why, why_len))
        return false;
    if (!ir_dim_eq(a->ne[0], ir_const(c->d_model)) || !ir_dim_eq(a->ne[1], S))
        return WHY("operand %%%d is not [d_model, S]", a->id);
    set_shape(n, 2, a->ne[0], a->ne[1], z);
    return true;
}

bool ir_infer_shape(const ir_graph *g, ir_node *n, char *why, size_t why_len) {
    if (n->nargs < ops[n->op].lo || n->nargs > ops[n->op].hi)
        return WHY("%s takes %d to %d operands, has %d", ops[n->op].name, ops[n->op].lo,
                   ops[n->op].hi, n->nargs);
    for (int i = 0; i < n->nargs; i++)
        if (!n->args[i])
            return WHY("operand %d is missing", i);
    n->dt = ATTN_DTYPE_F32;
    return ops[n->op].shape(g, n, why, why_len);
}

static bool reserve(ir_graph *g) {
    if (g->n_nodes < g->cap_nodes)
        return true;
    int cap = g->cap_nodes ? 2 * g->cap_nodes : 32;
    ir_node **nodes = arena_alloc(&g->ctx->arena, (size_t)cap * sizeof *nodes);
    if (!nodes)
        return false;
    if (g->n_nodes)
        memcpy(nodes, g->nodes, (size_t)g->n_nodes * sizeof *nodes);
    g->nodes = nodes;
    g->cap_nodes = cap;
    return true;
}

ir_node *ir_new(ir_graph *g, ir_op op, ir_node *const *args, int nargs, attnc_loc loc) {
    ATTNC_ASSERT(nargs >= 0 && nargs <= IR_MAX_ARGS);
    ir_node *n = arena_alloc(&g->ctx->arena, sizeof *n);
    if (!n) {
        diag_error(g->ctx, ATTNC_E_NOMEM, loc, "out of memory building the graph");
        return NULL;
    }
    n->id = g->next_id++;
    n->op = op;
    n->nargs = nargs;
    for (int i = 0; i < nargs; i++)
        n->args[i] = args[i];
    n->loc = loc;
    return n;
}

ir_node *ir_insert(ir_graph *g, ir_node *n, ir_node *before) {
    char why[256];
    if (!n)
        return NULL;
    if (!ir_infer_shape(g, n, why, sizeof why)) {
        diag_error(g->ctx, ATTNC_E_SHAPE, n->loc, "%s %%%d: %s", ir_op_name(n->op), n->id, why);
        return NULL;
    }
    if (!reserve(g)) {
        diag_error(g->ctx, ATTNC_E_NOMEM, n->loc, "out of memory building the graph");
        return NULL;
    }
    int at = g->n_nodes;
    if (before)
        for (at = 0; at < g->n_nodes && g->nodes[at] != before; at++)
            ;
    ATTNC_ASSERT(at <= g->n_nodes);
    memmove(g->nodes + at + 1, g->nodes + at, (size_t)(g->n_nodes - at) * sizeof *g->nodes);
    g->nodes[at] = n;
    g->n_nodes++;
    for (int i = 0; i < n->nargs; i++)
        n->args[i]->n_uses++;
    return n;
}

ir_node *ir_add(ir_graph *g, ir_op op, ir_node *const *args, int nargs, attnc_loc loc) {
    return ir_insert(g, ir_new(g, op, args, nargs, loc), NULL);
}

void ir_replace_uses(ir_graph *g, ir_node *from, ir_node *to) {
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *n = g->nodes[i];
        for (int j = 0; j < n->nargs; j++) {
            if (n->args[j] == from && !n->dead) {
                n->args[j] = to;
                from->n_uses--;
                to->n_uses++;
            }
        }
    }
}

static ir_node *linear_operand(const ir_node *n, ir_op op) {
    for (int i = 2; n->op == IR_OP_LINEAR && i < n->nargs; i++)
        if (n->args[i]->op == op)
            return n->args[i];
    return NULL;
}

ir_node *ir_linear_bias(const ir_node *n) {
    return linear_operand(n, IR_OP_WEIGHT);
}

ir_node *ir_linear_rope_table(const ir_node *n) {
    return linear_operand(n, IR_OP_ROPE_TABLE);
}

ir_node *ir_sinks(const ir_node *n) {
    int at = n->op == IR_OP_FLASH ? 3 : n->op == IR_OP_SOFTMAX ? 1 : -1;
    ir_node *w = at >= 0 && n->nargs > at ? n->args[at] : NULL;
    return w && w->op == IR_OP_WEIGHT && w->weight == ATTN_W_SINKS ? w : NULL;
}

void ir_recount_uses(ir_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i]->n_uses = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i]->dead)
            for (int j = 0; j < g->nodes[i]->nargs; j++)
                g->nodes[i]->args[j]->n_uses++;
}
