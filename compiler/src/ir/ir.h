/* ir.h: the graph IR. Nodes are tensor operations with static shapes in
 * which the new-token count S and the cached-plus-new count T are the only
 * symbols. A graph keeps its nodes in topological order. Built by
 * ir_build.c from a spec, rewritten by passes, read by codegen. */
#ifndef ATTNC_IR_H
#define ATTNC_IR_H

#include "attn_kernels.h"
#include "base/base.h"
#include "spec/spec.h"

enum { IR_VIEW = 1, IR_EFFECT = 2, IR_INPLACE = 4 };

/* The most chunks a split flash (split_tokens) cuts its keys into:
 * cg_split.c cuts by it, decode_split bounds the partials' size by it. */
enum { IR_SPLIT_CHUNKS = 16 };

/* The attributes of an op (ir_ops.def's last column), by the ir_node
 * fields they name: WEIGHT weight; CACHE cache; SLICE offset, cols; SCALE
 * scale; SCALE_COLS scale_cols; EPILOGUE rope_cols, to_cache, cache_col;
 * FUSED fused; SOFTCAP softcap; MASKS causal, alibi, score_mod, mask_mod;
 * SPLIT split_tokens;
 * TOKENS tokens. Every op that computes may also have a gate. */
enum {
    IR_A_WEIGHT = 1 << 0,
    IR_A_CACHE = 1 << 1,
    IR_A_SLICE = 1 << 2,
    IR_A_SCALE = 1 << 3,
    IR_A_SCALE_COLS = 1 << 4,
    IR_A_EPILOGUE = 1 << 5,
    IR_A_FUSED = 1 << 6,
    IR_A_SOFTCAP = 1 << 7,
    IR_A_MASKS = 1 << 8,
    IR_A_SPLIT = 1 << 9,
    IR_A_TOKENS = 1 << 10,
};

typedef enum ir_op {
#define X(op, name, lo, hi, flags, attrs, shape) IR_OP_##op,
#include "ir/ir_ops.def"
#undef X
    IR_OP_COUNT
} ir_op;

#define IR_MAX_DIMS 3
#define IR_MAX_ARGS 4

/* A size or stride: c + s*S + t*T + st*S*T elements. */
typedef struct ir_dim {
    int64_t c, s, t, st;
} ir_dim;

typedef struct ir_node ir_node;
struct ir_node {
    int id;
    ir_op op;
    attn_dtype dt;
    int ndim;
    ir_dim ne[IR_MAX_DIMS]; /* ne[0] innermost */
    ir_node *args[IR_MAX_ARGS];
    int nargs;
    int n_uses;
    attnc_loc loc; /* the spec key it comes from */
    bool dead;     /* removed by a pass; skipped by everything */
    /* attributes: which ones an op has is said in ir_ops.def (IR_A_*);
     * the others stay 0, and ir_verify checks both */
    int weight;     /* WEIGHT: attn_weight_id */
    int cache;      /* CACHE_APPEND: 0 = K, 1 = V */
    int64_t offset; /* SLICE: first column */
    int64_t cols;   /* SLICE: number of columns */
    double scale;   /* SCALE: c; LINEAR: of cols [0, scale_cols); FLASH: of the scores (1 when
                       folded into q) */
    int64_t scale_cols;
    int64_t rope_cols;    /* LINEAR: cols [0, rope_cols) are whole heads rotated in the epilogue */
    bool to_cache[2];     /* LINEAR: the epilogue stores K (0) / V (1) rows into the cache, */
    int64_t cache_col[2]; /*   from these columns on (kv_groups * head_dim of them) */
    bool fused;           /* CACHE_APPEND: stored by its linear's epilogue; no kernel */
    double softcap;       /* SOFTCAP: c; FLASH: c, 0 = none */
    bool causal;          /* FLASH: mask keys after each query (and outside the window or
                             chunk) */
    bool alibi;           /* FLASH: add ALiBi's -slope_h * (p - j) to the scores */
    bool score_mod;       /* FLASH: the config's score_mod replaces each score (before softcap) */
    bool mask_mod;        /* FLASH: keys where the config's mask_mod is false are hidden */
    int64_t split_tokens; /* FLASH: calls with at most this many new tokens split the keys
                             into chunks computed apart and merged (decode_split); 0 = never */
    int64_t tokens;       /* BY_PREFILL: prefills of at least this many tokens take operand 1 */
    /* any op that computes, and views of such values: > 0, the node runs
     * only in the calls that prefill a sequence holding no tokens with at
     * least `gate` new ones (those by_prefill tokens=gate takes operand 1
     * in); < 0, only in all other calls (of by_prefill tokens=-gate); 0,
     * always. Its value is read only by nodes of its gate, or by the
     * by_prefill that takes it (ir_verify). */
    int64_t gate;
};

typedef struct ir_graph {
    attnc_ctx *ctx;
    attn_config cfg;
    spec_locs locs;
    ir_node **nodes; /* arena; n_nodes in topological order, dead ones included */
    int n_nodes, cap_nodes;
    int next_id;
} ir_graph;

/* The config the graph was built for (the header `attnc ir` prints and
 * ir_parse reads back), field by field: ir_cfg_heads(g),
 * ir_cfg_kv_block_tokens(g), ... one per row of attn_config.def. The
 * passes and codegen read it through these names only, so what a kernel
 * depends on is a list to grep, and a field no kernel reads has no
 * caller there. */
#define IR_CFG_GET(type, f)                                                                        \
    static inline type ir_cfg_##f(const ir_graph *g) {                                             \
        return g->cfg.f;                                                                           \
    }
#define IR_CFG_NAME(f) IR_CFG_GET(const char *, f)
#define IR_CFG_EXPR(f) IR_CFG_GET(const char *, f)
#define IR_CFG_I64(f) IR_CFG_GET(int64_t, f)
#define IR_CFG_I32(f) IR_CFG_GET(int32_t, f)
#define IR_CFG_F64(f) IR_CFG_GET(double, f)
#define IR_CFG_BOOL(f) IR_CFG_GET(bool, f)
#define IR_CFG_ROPE_STYLE(f) IR_CFG_GET(attn_rope_style, f)
#define IR_CFG_SCALING(f) IR_CFG_GET(attn_rope_scaling, f)
#define IR_CFG_QK_NORM(f) IR_CFG_GET(attn_qk_norm, f)
#define IR_CFG_LAYOUT(f) IR_CFG_GET(attn_layout, f)
#define IR_CFG_DTYPE(f) IR_CFG_GET(attn_dtype, f)
#define ATTN_FIELD(kind, f, key) IR_CFG_##kind(f)
#define ATTN_PLAIN(kind, f, key, token, def, lo, hi) IR_CFG_##kind(f)
#include "attn_config.def"
#undef ATTN_FIELD
#undef ATTN_PLAIN

/* What the runtime derives from the config, as its reference engine does
 * (attn.h): MLA on, the cache's columns per token (which 0: K, 1: V), the
 * RoPE frequencies and cos/sin factor, the ALiBi slopes. */
static inline bool ir_cfg_mla(const ir_graph *g) {
    return g->cfg.mla_kv_lora_rank > 0;
}
static inline bool ir_cfg_bf16(const ir_graph *g) {
    return g->cfg.compute == ATTN_DTYPE_BF16;
}
/* activations q8_0 over a q8_0 cache: each head's q quantized to ggml's
 * Q8_0 blocks before q.k (README "activations"; the runtime's
 * rt_q8_query, which the compiler cannot include). */
static inline bool ir_cfg_q8_query(const ir_graph *g) {
    return g->cfg.activations == ATTN_DTYPE_Q8_0 && g->cfg.kv_dtype == ATTN_DTYPE_Q8_0 &&
           !ir_cfg_mla(g);
}
/* q reaches q.k unscaled (rounded or quantized as it is): the scale
 * multiplies the f32 sum instead. */
static inline bool ir_cfg_q_unscaled(const ir_graph *g) {
    return ir_cfg_bf16(g) || ir_cfg_q8_query(g);
}
/* Kernels honour attn_kernel_args.tree (attn_forward_tree). */
static inline bool ir_cfg_tree(const ir_graph *g) {
    return attn_tree_unsupported(&g->cfg) == NULL;
}
static inline int64_t ir_cfg_cache_columns(const ir_graph *g, int which) {
    return attn_cache_columns(&g->cfg, which);
}
static inline void ir_cfg_rope_inv_freq(const ir_graph *g, double *inv_freq) {
    attn_rope_inv_freq(&g->cfg, inv_freq);
}
static inline double ir_cfg_rope_cos_factor(const ir_graph *g) {
    return attn_rope_cos_factor(&g->cfg);
}
static inline void ir_cfg_alibi_slopes(const ir_graph *g, double *slope) {
    attn_alibi_slopes(&g->cfg, slope);
}

ATTNC_HIDDEN const char *ir_op_name(ir_op op);
/* The IR_A_* attributes op has. */
ATTNC_HIDDEN unsigned ir_op_attrs(ir_op op);
ATTNC_HIDDEN unsigned ir_op_flags(ir_op op);

ATTNC_HIDDEN ir_dim ir_const(int64_t c);
ATTNC_HIDDEN ir_dim ir_sym_s(void); /* S */
ATTNC_HIDDEN ir_dim ir_sym_t(void); /* T */
ATTNC_HIDDEN bool ir_dim_eq(ir_dim a, ir_dim b);
/* d holds no symbol: *v = its value. */
ATTNC_HIDDEN bool ir_dim_is_const(ir_dim d, int64_t *v);

/* Lowers a validated spec into the unfused, textbook graph. */
ATTNC_HIDDEN attnc_status ir_build(attnc_ctx *ctx, const attn_config *cfg, const spec_locs *locs,
                                   ir_graph **out);

/* A node computing op over args, not yet in the graph: set its
 * attributes, then ir_insert it. NULL (with a diagnostic) when out of
 * memory. */
ATTNC_HIDDEN ir_node *ir_new(ir_graph *g, ir_op op, ir_node *const *args, int nargs, attnc_loc loc);
/* Checks n's shape (ir_infer_shape) and places it before `before` (NULL =
 * at the end); returns n, or NULL with an ATTNC_E_SHAPE diagnostic. */
ATTNC_HIDDEN ir_node *ir_insert(ir_graph *g, ir_node *n, ir_node *before);
/* ir_insert(ir_new(...), NULL), for ops without attributes. */
ATTNC_HIDDEN ir_node *ir_add(ir_graph *g, ir_op op, ir_node *const *args, int nargs, attnc_loc loc);
/* Recomputes n's shape and dtype from its args and attributes; false if
 * they do not fit together (the message goes into why). */
ATTNC_HIDDEN bool ir_infer_shape(const ir_graph *g, ir_node *n, char *why, size_t why_len);
/* Points every use of `from` at `to` (same shape expected). */
ATTNC_HIDDEN void ir_replace_uses(ir_graph *g, ir_node *from, ir_node *to);
ATTNC_HIDDEN void ir_recount_uses(ir_graph *g);
/* LINEAR's optional operands: its bias (a WEIGHT) and rope table, or NULL. */
ATTNC_HIDDEN ir_node *ir_linear_bias(const ir_node *n);
ATTNC_HIDDEN ir_node *ir_linear_rope_table(const ir_node *n);
/* FLASH's or SOFTMAX's sinks operand (a WEIGHT), or NULL. */
ATTNC_HIDDEN ir_node *ir_sinks(const ir_node *n);

/* Text of the graph, stable enough for golden files; arena-owned. */
ATTNC_HIDDEN char *ir_print(ir_graph *g);
/* The name the printer gives weight id (attn_weight_id), "?" if none;
 * the id of such a name, -1 if none. */
ATTNC_HIDDEN const char *ir_weight_name(int id);
ATTNC_HIDDEN int ir_weight_id(const char *name);
/* The attributes ir_print gives node n (" scale=0.125 causal"), arena-owned. */
ATTNC_HIDDEN const char *ir_node_attrs(ir_graph *g, const ir_node *n);
/* A config field of an enum kind as the IR's config lines name its
 * values ("interleaved", "llama3", "bf16"); NULL for none. The value of
 * such a name (its n bytes), -1 for none. */
ATTNC_HIDDEN const char *ir_enum_name(attn_field_kind k, int v);
ATTNC_HIDDEN int ir_enum_value(attn_field_kind k, const char *s, size_t n);
/* The graph ir_print printed, read back from text (named path in
 * diagnostics, path:line:col): ids, order, attributes and locations as
 * printed; every node's shape is inferred again and must be the printed
 * one. Verified. The config comes from the text's config lines (then
 * every attribute must be the one the printer gives the node with that
 * config: nothing written is ignored), or, for a text without them, from
 * cfg and locs (the spec's; may be NULL with config lines; given both,
 * they must agree). */
ATTNC_HIDDEN attnc_status ir_parse(attnc_ctx *ctx, const attn_config *cfg, const spec_locs *locs,
                                   const char *path, const char *text, ir_graph **out);

/* Checks shapes, dtypes, order and use counts; each problem becomes a
 * diagnostic (ATTNC_E_SHAPE) naming the node. */
ATTNC_HIDDEN attnc_status ir_verify(ir_graph *g);

#endif
