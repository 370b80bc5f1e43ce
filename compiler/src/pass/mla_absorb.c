/* mla_absorb: multi-head latent attention in its absorbed form. Instead
 * of expanding every visible key's K and V per head through kv_b_proj in
 * each call (heads x (n + dv) x kv_lora_rank per key), each query head is
 * taken into latent space once (q_nope . W_kb[h]); its scores are then
 * taken against the cached latent [c_kv; k_pe] itself, shared by all
 * heads (one K/V group), whose first kv_lora_rank dims are the values;
 * the weighted latent sum leaves through W_vb[h]. The same scores and
 * outputs (q_nope . (W_kb[h] c) = (q_nope . W_kb[h]) . c): DeepSeek's
 * inference does the same for decoding.
 *
 * matches   %q = mla_rope %h, %t   %k = mla_keys %c, %w   %v = mla_values %c, %w
 *           %o = pv ..%v (or flash %q, %k, %v)   %m = merge_heads %o
 * produces  %q' = mla_query %h, %w, %t   (uses of %k now use %c)
 *           %v' = slice %c offset=0 cols=kv_lora_rank   %m' = mla_output %o, %w
 * requires  %k and %v used by attention only. */
#include "pass/pass.h"

static ir_node *find(ir_graph *g, ir_op op) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == op)
            return g->nodes[i];
    return NULL;
}

/* n's only user, when it is of op; else NULL. */
static ir_node *only_user(ir_graph *g, const ir_node *n, ir_op op) {
    ir_node *user = NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *u = g->nodes[i];
        for (int j = 0; !u->dead && j < u->nargs; j++)
            if (u->args[j] == n) {
                if (user && user != u)
                    return NULL;
                user = u;
            }
    }
    return user && user->op == op ? user : NULL;
}

attnc_status pass_mla_absorb(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    ir_node *qr = find(g, IR_OP_MLA_ROPE), *kn = find(g, IR_OP_MLA_KEYS);
    ir_node *vn = find(g, IR_OP_MLA_VALUES);
    if (!qr || !kn || !vn || kn->args[0] != vn->args[0] || kn->args[1] != vn->args[1])
        return ATTNC_OK;
    ir_node *o = only_user(g, vn, IR_OP_PV);
    if (!o)
        o = only_user(g, vn, IR_OP_FLASH);
    ir_node *m = o ? only_user(g, o, IR_OP_MERGE_HEADS) : NULL;
    if (!m)
        return ATTNC_OK;
    for (int i = 0; i < g->n_nodes; i++) { /* K and V feed attention only */
        const ir_node *u = g->nodes[i];
        for (int j = 0; !u->dead && j < u->nargs; j++)
            if ((u->args[j] == kn && u->op != IR_OP_QK && u->op != IR_OP_FLASH) ||
                (u->args[j] == vn && u != o))
                return ATTNC_OK;
    }
    ir_node *c = kn->args[0], *w = kn->args[1];
    ir_node *qa[3] = {qr->args[0], w, qr->args[1]};
    ir_node *q = ir_insert(g, ir_new(g, IR_OP_MLA_QUERY, qa, 3, qr->loc), qr);
    ir_node *v = ir_new(g, IR_OP_SLICE, &c, 1, vn->loc);
    if (v)
        v->offset = 0, v->cols = g->cfg.mla_kv_lora_rank;
    if (!q || !(v = ir_insert(g, v, vn)))
        return diag_first_code(ctx);
    ir_replace_uses(g, qr, q);
    ir_replace_uses(g, kn, c);
    ir_replace_uses(g, vn, v);
    qr->dead = kn->dead = vn->dead = true;
    /* the attention's values, and so its output, are the latent's now */
    char why[256];
    if (!ir_infer_shape(g, o, why, sizeof why)) {
        diag_error(ctx, ATTNC_E_SHAPE, o->loc, "mla_absorb: %s", why);
        return ATTNC_E_SHAPE;
    }
    ir_node *oa[2] = {o, w};
    ir_node *mo = ir_insert(g, ir_new(g, IR_OP_MLA_OUTPUT, oa, 2, m->loc), m);
    if (!mo)
        return diag_first_code(ctx);
    ir_replace_uses(g, m, mo);
    m->dead = true;
    *changed = true;
    return ATTNC_OK;
}
