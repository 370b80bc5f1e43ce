/* flash_attention: scores, scale, softcap, ALiBi, mask, softmax (with
 * sinks) and p.v become one tiled online-softmax node, so no [T, S,
 * heads] value exists.
 *
 * matches   %s = qk %q, %k  (%s = scale %s c)  (%s = score_mod %s)
 *           (%s = softcap %s c)  (%s = alibi %s)  (%s = mask %s)
 *           (%s = mask_mod %s)  %p = softmax %s (, %sinks)
 *           %o = pv %p, %v
 *           with every value between qk and pv used once
 * produces  %o' = flash %q, %k, %v (, %sinks) scale=c softcap=c causal alibi
 *           score_mod mask_mod
 *           (uses of %o now use %o'; the chain is removed). */
#include "pass/pass.h"

attnc_status pass_flash_attention(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *pv = g->nodes[i];
        if (pv->dead || pv->op != IR_OP_PV)
            continue;
        ir_node *chain[8], *s = pv->args[0], *sinks = ir_sinks(s);
        int n = 0;
        double scale = 1, cap = 0;
        bool causal = false, alibi = false, score_mod = false, mask_mod = false;
        if (s->op != IR_OP_SOFTMAX || s->n_uses != 1)
            continue;
        chain[n++] = s;
        s = s->args[0];
        if (s->op == IR_OP_MASK_MOD && s->n_uses == 1) {
            mask_mod = true;
            chain[n++] = s;
            s = s->args[0];
        }
        if (s->op == IR_OP_MASK && s->n_uses == 1) {
            causal = true;
            chain[n++] = s;
            s = s->args[0];
        }
        if (s->op == IR_OP_ALIBI && s->n_uses == 1) {
            alibi = true;
            chain[n++] = s;
            s = s->args[0];
        }
        if (s->op == IR_OP_SOFTCAP && s->n_uses == 1) {
            cap = s->softcap;
            chain[n++] = s;
            s = s->args[0];
        }
        if (s->op == IR_OP_SCORE_MOD && s->n_uses == 1) {
            score_mod = true;
            chain[n++] = s;
            s = s->args[0];
        }
        if (s->op == IR_OP_SCALE && s->n_uses == 1) {
            scale = s->scale;
            chain[n++] = s;
            s = s->args[0];
        }
        if (s->op != IR_OP_QK || s->n_uses != 1)
            continue;
        chain[n++] = s;
        bool one_gate = true; /* the chain runs in the same calls (mla_absorb) */
        for (int j = 0; j < n; j++)
            one_gate &= chain[j]->gate == pv->gate;
        if (!one_gate)
            continue;
        ir_node *args[4] = {s->args[0], s->args[1], pv->args[1], sinks};
        ir_node *f = ir_new(g, IR_OP_FLASH, args, sinks ? 4 : 3, pv->loc);
        if (!f)
            return diag_first_code(ctx);
        f->scale = scale;
        f->softcap = cap;
        f->causal = causal;
        f->alibi = alibi;
        f->score_mod = score_mod;
        f->mask_mod = mask_mod;
        f->gate = pv->gate;
        if (!ir_insert(g, f, pv))
            return diag_first_code(ctx);
        ir_replace_uses(g, pv, f);
        pv->dead = true;
        for (int j = 0; j < n; j++)
            chain[j]->dead = true;
        *changed = true;
    }
    return ATTNC_OK;
}
