/* drop_gqa_expand: K/V head repetition becomes an index mapping. qk and pv
 * read K/V head h / (heads / kv_groups) straight from the cache; nothing
 * is copied.
 *
 * matches   %e = gqa_expand %c   %s = qk %q, %e   %o = pv %p, %e (or flash %q, %e, %e)
 * produces  %s = qk %q, %c group=G   %o = pv %p, %c group=G
 * requires  every use of %e is a qk, pv or flash key/value operand. */
#include "pass/pass.h"

attnc_status pass_drop_gqa_expand(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    (void)ctx;
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *e = g->nodes[i];
        if (e->dead || e->op != IR_OP_GQA_EXPAND)
            continue;
        bool only_kv_uses = true;
        for (int j = 0; j < g->n_nodes; j++) {
            const ir_node *u = g->nodes[j];
            for (int k = 0; !u->dead && k < u->nargs; k++)
                if (u->args[k] == e && !((u->op == IR_OP_QK || u->op == IR_OP_PV) && k == 1) &&
                    !(u->op == IR_OP_FLASH && k >= 1))
                    only_kv_uses = false;
        }
        if (!only_kv_uses)
            continue;
        ir_replace_uses(g, e, e->args[0]);
        e->dead = true;
        *changed = true;
    }
    return ATTNC_OK;
}
