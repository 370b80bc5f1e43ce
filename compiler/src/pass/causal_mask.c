/* causal_mask: a mask_mod that hides every key after its query (a
 * conjunct such as q - kv >= 0, kv <= q, q >= kv) adds the causal mask
 * under causal: false, so the kernels take the causal key ranges and
 * evaluate the expression only on the tiles it cuts. The mask_mod stays:
 * it still holds (and may hide more); with causal: false a query sees its
 * own call's keys, which the mask already restricts to kv <= q.
 *
 * matches   %s' = mask_mod %s   with no mask above it, causal: false, and
 *           the config's mask_mod implies kv <= q
 * produces  %m = mask %s;  %s' = mask_mod %m */
#include "attn_expr.h"
#include "pass/pass.h"

/* An int node as a q + b kv + c, where it is one (literals, q, kv, + -,
 * unary -, |c| kept small). */
typedef struct linear {
    bool ok;
    int64_t q, kv, c;
} linear;

static linear linear_of(const attn_expr *e, int k) {
    const attn_expr_node *x = &e->node[k];
    linear r = {false, 0, 0, 0};
    if (x->type != ATTN_EXPR_INT)
        return r;
    switch (x->op) {
    case ATTN_EXPR_LIT: return (linear){true, 0, 0, x->i};
    case ATTN_EXPR_Q: return (linear){true, 1, 0, 0};
    case ATTN_EXPR_KV: return (linear){true, 0, 1, 0};
    case ATTN_EXPR_NEG: {
        linear a = linear_of(e, x->a);
        return (linear){a.ok, -a.q, -a.kv, -a.c};
    }
    case ATTN_EXPR_ADD:
    case ATTN_EXPR_SUB: {
        linear a = linear_of(e, x->a), b = linear_of(e, x->b);
        int64_t s = x->op == ATTN_EXPR_ADD ? 1 : -1;
        r = (linear){a.ok && b.ok, a.q + s * b.q, a.kv + s * b.kv, a.c + s * b.c};
        /* far from wrapping around: positions are below 2^31 */
        r.ok &=
            r.q >= -1 && r.q <= 1 && r.kv >= -1 && r.kv <= 1 && r.c > -(1 << 20) && r.c < (1 << 20);
        return r;
    }
    default: return r;
    }
}

/* Whether boolean node k is false wherever kv > q (so it implies kv <= q). */
static bool implies_causal(const attn_expr *e, int k) {
    const attn_expr_node *x = &e->node[k];
    if (x->op == ATTN_EXPR_AND)
        return implies_causal(e, x->a) || implies_causal(e, x->b);
    if (x->op < ATTN_EXPR_LT || x->op > ATTN_EXPR_EQ || e->node[x->a].type != ATTN_EXPR_INT)
        return false;
    linear a = linear_of(e, x->a), b = linear_of(e, x->b);
    if (!a.ok || !b.ok)
        return false;
    /* the comparison as d op 0, d = a - b = s (q - kv) + c */
    int64_t dq = a.q - b.q, dkv = a.kv - b.kv, c = a.c - b.c;
    attn_expr_op op = x->op;
    if (dq == 1 && dkv == -1) { /* kv > q: d <= c - 1, any value below */
        return (op == ATTN_EXPR_GE && c <= 0) || (op == ATTN_EXPR_GT && c <= 1) ||
               (op == ATTN_EXPR_EQ && c <= 0);
    }
    if (dq == -1 && dkv == 1) { /* kv > q: d >= c + 1, any value above */
        return (op == ATTN_EXPR_LE && c >= 0) || (op == ATTN_EXPR_LT && c >= -1) ||
               (op == ATTN_EXPR_EQ && c >= 0);
    }
    return false;
}

attnc_status pass_causal_mask(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    if (g->cfg.causal || !g->cfg.mask_mod[0])
        return ATTNC_OK;
    attn_expr *e = arena_alloc(&g->ctx->arena, sizeof *e);
    attn_inputs in;
    if (!e || attn_config_parse_expr(&g->cfg, true, e, &in, NULL) != ATTN_OK || !e->n_nodes ||
        !implies_causal(e, e->n_nodes - 1))
        return ATTNC_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *mm = g->nodes[i];
        if (mm->dead || mm->op != IR_OP_MASK_MOD || mm->args[0]->op == IR_OP_MASK)
            continue;
        ir_node *m = ir_new(g, IR_OP_MASK, mm->args, 1, mm->loc);
        if (!m || !ir_insert(g, m, mm))
            return diag_first_code(ctx);
        m->gate = mm->gate;
        mm->args[0] = m;
        *changed = true;
    }
    return ATTNC_OK;
}
