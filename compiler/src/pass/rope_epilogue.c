/* rope_epilogue: RoPE moves into the epilogue of the linear that produces
 * q and k, and the K/V cache appends into the same epilogue, which stores
 * those rows straight into the cache (converted to its dtype): no separate
 * pass over q, k or v in memory.
 *
 * matches   %r = rope %h, %h = split_heads (slice)? %l, %l = linear, each
 *           view used once; %a = cache_append %h' traced the same way
 * produces  %t = rope_table; %l = linear ..., %t rope_cols=C (cache_k=..)
 *           uses of %r now use %h; %a stays as the cache's value, marked
 *           stored_by_epilogue (no kernel of its own)
 * requires  head_dim and rotary_dim multiples of 32, so every vector of the
 *           epilogue lies within one head's rotated or passed-through part;
 *           the rotated columns of a linear grow from column 0 (q, then k);
 *           an append's rows pass through no rope left outside the linear.
 *
 * With qk_norm a qk_norm node stands between split_heads and rope: the
 * norm needs a whole head (or row) of final values, which one GEMM
 * panel of two vectors of columns never holds, so the epilogue cannot
 * rotate after it. Those ropes do not match (view_source finds no
 * linear), stay kernels of their own, and so does k's append; v's append
 * is still fused. YaRN needs nothing here: its attention factor is in
 * the rope table's cos and sin. A q8_0 cache keeps its appends (below). */
#include "pass/pass.h"

/* The linear n's value comes from through split_heads/slice views used
 * once each, with the first column in *col0; else NULL. */
static ir_node *view_source(ir_node *n, int64_t *col0) {
    *col0 = 0;
    for (n = n->op == IR_OP_SPLIT_HEADS && n->n_uses == 1 ? n->args[0] : NULL; n; n = n->args[0]) {
        if (n->op == IR_OP_LINEAR)
            return n;
        if (n->op != IR_OP_SLICE || n->n_uses != 1)
            return NULL;
        *col0 += n->offset;
    }
    return NULL;
}

attnc_status pass_rope_epilogue(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    if (ir_cfg_head_dim(g) % 32)
        return ATTNC_OK;
    bool rope_ok = ir_cfg_rope_style(g) != ATTN_ROPE_NONE && ir_cfg_rotary_dim(g) % 32 == 0;
    ir_node *table = NULL;
    for (int i = 0; rope_ok && i < g->n_nodes; i++) {
        ir_node *r = g->nodes[i], *h = r->args[0];
        int64_t col0;
        ir_node *lin = !r->dead && r->op == IR_OP_ROPE ? view_source(h, &col0) : NULL;
        if (!lin || col0 != lin->rope_cols ||
            (!ir_linear_rope_table(lin) && lin->nargs == IR_MAX_ARGS))
            continue;
        if (!table) { /* placed first: computed before anything reads it */
            table = ir_new(g, IR_OP_ROPE_TABLE, NULL, 0, r->loc);
            if (!ir_insert(g, table, g->nodes[0]))
                return diag_first_code(ctx);
        }
        if (!ir_linear_rope_table(lin))
            lin->args[lin->nargs++] = table;
        lin->rope_cols = col0 + h->ne[1].c * ir_cfg_head_dim(g);
        ir_replace_uses(g, r, h);
        r->dead = true;
        h->n_uses--; /* the rope's own use is gone */
        *changed = true;
    }
    /* an append whose k still passes a rope node is not traced through it;
     * a q8_0 cache quantizes 32 columns at once, which a GEMM panel of
     * two vectors (a head's two halves, with `half` RoPE) does not hold:
     * its appends stay kernels of their own */
    for (int i = 0; attn_dtype_block(ir_cfg_kv_dtype(g)) == 1 && i < g->n_nodes; i++) {
        ir_node *a = g->nodes[i];
        int64_t col0;
        ir_node *lin =
            !a->dead && a->op == IR_OP_CACHE_APPEND ? view_source(a->args[0], &col0) : NULL;
        if (!lin || lin->to_cache[a->cache])
            continue;
        lin->to_cache[a->cache] = true;
        lin->cache_col[a->cache] = col0;
        a->fused = true;
        *changed = true;
    }
    return ATTNC_OK;
}
