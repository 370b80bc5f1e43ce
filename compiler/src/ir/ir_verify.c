/* ir_verify.c: the graph's invariants, checked after every pass: operands
 * live and earlier in the order, shapes and dtypes as ir_infer_shape
 * computes them, use counts that match, one input and one output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static void broken(ir_graph *g, const ir_node *n, const char *what, const char *why) {
    diag_error(g->ctx, ATTNC_E_SHAPE, n->loc, "IR verifier: %s %%%d: %s%s%s", ir_op_name(n->op),
               n->id, what, why ? ": " : "", why ? why : "");
}

/* Why n's attributes break ir_ops.def (an attribute its op does not have
 * set, or one it has out of range) into why; false if they do not. */
static bool bad_attribute(const ir_node *n, char *why, size_t size) {
    unsigned a = ir_op_attrs(n->op);
    struct {
        unsigned attr;
        bool set;
        const char *name;
    } has[] = {
        {IR_A_WEIGHT, n->weight != 0, "weight"},
        {IR_A_CACHE, n->cache != 0, "cache"},
        {IR_A_SLICE, n->offset != 0 || n->cols != 0, "offset/cols"},
        {IR_A_SCALE, n->scale != 0, "scale"},
        {IR_A_SCALE_COLS, n->scale_cols != 0, "scale_cols"},
        {IR_A_EPILOGUE,
         n->rope_cols != 0 || n->to_cache[0] || n->to_cache[1] || n->cache_col[0] != 0 ||
             n->cache_col[1] != 0,
         "epilogue"},
        {IR_A_FUSED, n->fused, "fused"},
        {IR_A_SOFTCAP, n->softcap != 0, "softcap"},
        {IR_A_MASKS, n->causal || n->alibi || n->score_mod || n->mask_mod,
         "causal/alibi/score_mod/mask_mod"},
        {IR_A_SPLIT, n->split_tokens != 0, "split_tokens"},
        {IR_A_TOKENS, n->tokens != 0, "tokens"},
    };
    for (size_t i = 0; i < sizeof has / sizeof has[0]; i++)
        if (has[i].set && !(a & has[i].attr)) {
            snprintf(why, size, "%s is set, an attribute %s does not have (ir_ops.def)",
                     has[i].name, ir_op_name(n->op));
            return true;
        }
    /* what runs once for every call, or is the call's own, has no gate */
    ir_op always[] = {IR_OP_INPUT,        IR_OP_MEMORY, IR_OP_WEIGHT,    IR_OP_ROPE_TABLE,
                      IR_OP_CACHE_APPEND, IR_OP_OUTPUT, IR_OP_BY_PREFILL};
    for (size_t i = 0; n->gate && i < sizeof always / sizeof always[0]; i++)
        if (n->op == always[i]) {
            snprintf(why, size, "%s has no gate", ir_op_name(n->op));
            return true;
        }
    bool ok = true;
    switch (n->op) {
    case IR_OP_BY_PREFILL: ok = n->tokens >= 1; break;
    case IR_OP_WEIGHT: ok = n->weight >= 0 && n->weight < ATTN_WEIGHT_COUNT; break;
    case IR_OP_CACHE_APPEND: ok = n->cache == 0 || n->cache == 1; break;
    case IR_OP_SLICE: ok = n->offset >= 0 && n->cols >= 1; break;
    case IR_OP_SCALE: ok = n->scale > 0 && isfinite(n->scale); break;
    case IR_OP_SOFTCAP: ok = n->softcap > 0 && isfinite(n->softcap); break;
    case IR_OP_LINEAR:
        ok = n->scale_cols >= 0 && n->rope_cols >= 0 &&
             (n->scale_cols == 0 || (n->scale > 0 && isfinite(n->scale)));
        break;
    case IR_OP_FLASH:
        ok = n->scale > 0 && isfinite(n->scale) && n->softcap >= 0 && isfinite(n->softcap) &&
             n->split_tokens >= 0;
        break;
    default: break;
    }
    if (!ok)
        snprintf(why, size, "an attribute is out of range");
    return !ok;
}

/* Why n reads a gated value in calls that do not compute it: a gated
 * operand is read only by nodes of its gate, or by a by_prefill as the
 * operand it takes in that operand's calls. */
static bool bad_gates(const ir_node *n, char *why, size_t size) {
    for (int j = 0; j < n->nargs; j++) {
        int64_t g = n->args[j]->gate;
        bool ok = !g || g == n->gate;
        if (n->op == IR_OP_BY_PREFILL)
            ok = !g || g == (j ? n->tokens : -n->tokens);
        if (!ok) {
            snprintf(why, size, "operand %%%d runs only in %s prefills of %lld tokens or more",
                     n->args[j]->id, g > 0 ? "the" : "calls other than", (long long)llabs(g));
            return true;
        }
    }
    return false;
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
        char why[256];
        if (bad_gates(n, why, sizeof why)) {
            broken(g, n, "reads a value its calls may not have", why);
            continue;
        }
        if (bad_attribute(n, why, sizeof why)) {
            broken(g, n, "bad attributes", why);
            continue;
        }
        ir_node copy = *n;
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
