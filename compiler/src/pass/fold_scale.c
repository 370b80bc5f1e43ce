/* fold_scale: the score scale moves from the S x T score matrix into the
 * epilogue of the linear that produces q (RoPE is a rotation, so it
 * commutes with scaling; with fused q/k/v only q's columns are scaled).
 *
 * matches   %s = qk %q, %k   %c = scale %s F   where %q comes from
 *           %l = linear ... through slice/split_heads/rope, used once each
 * produces  %l = linear ... scale=F cols=<q columns>   %s = qk %q, %k
 *           (uses of %c now use %s)
 * requires  the q columns start at column 0 of %l. */
#include "pass/pass.h"

attnc_status pass_fold_scale(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    (void)ctx;
    if (ir_cfg_q_unscaled(g)) /* q is rounded or quantized unscaled: the scale stays on q.k */
        return ATTNC_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *sc = g->nodes[i];
        if (sc->dead || sc->op != IR_OP_SCALE || sc->args[0]->op != IR_OP_QK ||
            sc->args[0]->n_uses != 1)
            continue;
        ir_node *qk = sc->args[0];
        int64_t col0, cols;
        ir_node *lin = pass_source_linear(qk->args[0], &col0, &cols);
        if (!lin || col0 != 0 || (lin->scale_cols && lin->scale_cols != cols))
            continue;
        lin->scale = lin->scale_cols ? lin->scale * sc->scale : sc->scale;
        lin->scale_cols = cols;
        ir_replace_uses(g, sc, qk);
        sc->dead = true;
        *changed = true;
    }
    return ATTNC_OK;
}
