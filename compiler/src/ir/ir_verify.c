/* ir_verify.c: the graph's invariants, checked after every pass: operands
 * live and earlier in the order, shapes and dtypes as ir_infer_shape
 * computes them, use counts that match, one input and one output. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static void broken(ir_graph *g, const ir_node *n, const char *what, const char *why) {
    diag_error(g->ctx, ATTNC_E_SHAPE, n->loc, "IR verifier: %s %%%d: %s%s%s", ir_op_name(n->op),
               n->id, what, why ? ": " : "", why ? why : "");
}

attnc_status ir_verify(ir_graph *g) {
    size_t before = g->ctx->n_errors;
    int *uses = calloc((size_t)g->next_id + 1, sizeof *uses);
    int *seen = calloc((size_t)g->next_id + 1, sizeof *seen); /* 1 + position */
    if (!uses || !seen) {
        free(uses);
        free(seen);
        diag_error(g->ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory verifying the graph");
        return ATTNC_E_NOMEM;
    }
    int inputs = 0, outputs = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *n = g->nodes[i];
        if (n->id < 0 || n->id >= g->next_id || seen[n->id]) {
            broken(g, n, "id out of range or repeated", NULL);
            continue;
        }
        seen[n->id] = i + 1;
        if (n->dead)
            continue;
        inputs += n->op == IR_OP_INPUT;
        outputs += n->op == IR_OP_OUTPUT;
        bool args_ok = true;
        for (int j = 0; j < n->nargs; j++) {
            const ir_node *a = n->args[j];
            if (!a || a->dead || a->id < 0 || a->id >= g->next_id || !seen[a->id] ||
                g->nodes[seen[a->id] - 1] != a) {
                broken(g, n, "operand is dangling, dead or not defined before its use", NULL);
                args_ok = false;
            } else {
                uses[a->id]++;
            }
        }
        if (!args_ok)
            continue;
        ir_node copy = *n;
        char why[256];
        if (!ir_infer_shape(g, &copy, why, sizeof why)) {
            broken(g, n, "bad operands", why);
            continue;
        }
        bool same = copy.ndim == n->ndim && copy.dt == n->dt;
        for (int d = 0; same && d < n->ndim; d++)
            same = ir_dim_eq(copy.ne[d], n->ne[d]);
        if (!same)
            broken(g, n, "shape or dtype differs from what its operands give", NULL);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const ir_node *n = g->nodes[i];
        if (!n->dead && n->id >= 0 && n->id < g->next_id && uses[n->id] != n->n_uses)
            broken(g, n, "use count is stale", NULL);
    }
    if (inputs != 1 || outputs != 1)
        diag_error(g->ctx, ATTNC_E_SHAPE, (attnc_loc){0},
                   "IR verifier: %d inputs and %d outputs; expected one of each", inputs, outputs);
    free(uses);
    free(seen);
    return g->ctx->n_errors > before ? ATTNC_E_SHAPE : ATTNC_OK;
}
