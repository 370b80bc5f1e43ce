/* dce: removes nodes whose values reach no effect (the output and the
 * cache appends), such as the separate q/k/v weights left by fuse_qkv.
 *
 * matches   any node not reachable backwards from an IR_EFFECT node
 * produces  the same graph without it. */
#include <stdlib.h>

#include "pass/pass.h"

attnc_status pass_dce(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    bool *live = calloc((size_t)g->next_id + 1, sizeof *live);
    if (!live) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory in dce");
        return ATTNC_E_NOMEM;
    }
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        ir_node *n = g->nodes[i];
        if (n->dead)
            continue;
        if (ir_op_flags(n->op) & IR_EFFECT)
            live[n->id] = true;
        if (live[n->id])
            for (int j = 0; j < n->nargs; j++)
                live[n->args[j]->id] = true;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *n = g->nodes[i];
        if (!n->dead && !live[n->id]) {
            n->dead = true;
            *changed = true;
        }
    }
    free(live);
    return ATTNC_OK;
}
