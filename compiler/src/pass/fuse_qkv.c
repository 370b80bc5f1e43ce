/* fuse_qkv: the q, k and v projections of one input become one linear over
 * weights packed [q; k; v] at load time, and three column slices.
 *
 * matches   %q = linear %x, %wq(, %bq)   %k = linear %x, %wk(, %bk)
 *           %v = linear %x, %wv(, %bv)
 * produces  %w = weight qkv_proj.weight  (%b = weight qkv_proj.bias)
 *           %f = linear %x, %w(, %b)      : [qd + 2*kvd, S]
 *           %q' = slice %f offset=0 cols=qd
 *           %k' = slice %f offset=qd cols=kvd
 *           %v' = slice %f offset=qd+kvd cols=kvd
 * requires  all three present, unscaled k and v, biases on all or none. */
#include "pass/pass.h"

static ir_node *find_linear(ir_graph *g, int weight) {
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *n = g->nodes[i];
        if (!n->dead && n->op == IR_OP_LINEAR && n->args[1]->op == IR_OP_WEIGHT &&
            n->args[1]->weight == weight)
            return n;
    }
    return NULL;
}

static ir_node *slice(ir_graph *g, ir_node *f, int64_t off, int64_t cols, ir_node *before) {
    ir_node *s = ir_new(g, IR_OP_SLICE, &f, 1, f->loc);
    if (s) {
        s->offset = off;
        s->cols = cols;
    }
    return ir_insert(g, s, before);
}

attnc_status pass_fuse_qkv(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    ir_node *lin[3] = {find_linear(g, ATTN_W_Q), find_linear(g, ATTN_W_K),
                       find_linear(g, ATTN_W_V)};
    if (!lin[0] || !lin[1] || !lin[2])
        return ATTNC_OK;
    ir_node *x = lin[0]->args[0];
    bool bias = ir_linear_bias(lin[0]) != NULL;
    for (int i = 1; i < 3; i++)
        if (lin[i]->args[0] != x || (ir_linear_bias(lin[i]) != NULL) != bias || lin[i]->scale_cols)
            return ATTNC_OK;
    /* the fused node goes where the first of the three was */
    ir_node *first = lin[0];
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i] == lin[0] || g->nodes[i] == lin[1] || g->nodes[i] == lin[2]) {
            first = g->nodes[i];
            break;
        }
    ir_node *w = ir_new(g, IR_OP_WEIGHT, NULL, 0, lin[0]->args[1]->loc);
    ir_node *b = bias ? ir_new(g, IR_OP_WEIGHT, NULL, 0, ir_linear_bias(lin[0])->loc) : NULL;
    if (!w || (bias && !b))
        return diag_first_code(ctx);
    w->weight = ATTN_W_QKV;
    if (b)
        b->weight = ATTN_B_QKV;
    if (!ir_insert(g, w, first) || (b && !ir_insert(g, b, first)))
        return diag_first_code(ctx);
    ir_node *args[3] = {x, w, b};
    ir_node *f = ir_new(g, IR_OP_LINEAR, args, bias ? 3 : 2, lin[0]->loc);
    if (!f)
        return diag_first_code(ctx);
    f->scale_cols = lin[0]->scale_cols; /* q comes first, so its scaled columns stay put */
    f->scale = lin[0]->scale;
    if (!ir_insert(g, f, first))
        return diag_first_code(ctx);
    int64_t qd = lin[0]->ne[0].c, kvd = lin[1]->ne[0].c;
    const int64_t off[3] = {0, qd, qd + kvd}, cols[3] = {qd, kvd, kvd};
    for (int i = 0; i < 3; i++) {
        ir_node *s = slice(g, f, off[i], cols[i], first);
        if (!s)
            return diag_first_code(ctx);
        ir_replace_uses(g, lin[i], s);
        lin[i]->dead = true;
    }
    *changed = true;
    return ATTNC_OK;
}
