/* mla_absorb: multi-head latent attention in its absorbed form, beside
 * the expanded one. The expanded form expands every visible key's K and
 * V per head through kv_b_proj in each call (heads x (n + dv) x
 * kv_lora_rank per key); the absorbed form takes each query head into
 * latent space once (q_nope . W_kb[h]), takes its scores against the
 * cached latent [c_kv; k_pe] itself, shared by all heads (one K/V group),
 * whose first kv_lora_rank dims are the values, and takes the weighted
 * latent sum out through W_vb[h]. The same scores and outputs (q_nope .
 * (W_kb[h] c) = (q_nope . W_kb[h]) . c): DeepSeek's inference decodes so.
 *
 * Per query and key the absorbed attention costs 2 H (2L + r) flops, the
 * expanded 2 H (n + r + dv); the expanded form pays 2 H (n + dv) L per
 * key of the call for its expansion, the absorbed 2 H (n + dv) L per
 * query for its products with kv_b_proj. So a long prefill into an empty
 * sequence (keys = queries) is cheaper expanded, and every other call
 * (decode, a prefill after cached tokens, whose expansion covers all the
 * keys and their per-sequence scratch grows with them) absorbed. The
 * pass keeps the expanded form for the prefills of at least N tokens into
 * an empty sequence (attnc_mla_prefill_tokens) and adds the absorbed one
 * for all other calls; by_prefill joins them before o_proj.
 *
 * matches   %q = mla_rope %h, %t   %k = mla_keys %c, %w   %v = mla_values %c, %w
 *           the attention from %q, %k, %v to %o (pv or flash)  %m = merge_heads %o
 * produces  the same, each node when_prefill>=N, and beside them
 *           %q' = mla_query %h, %w, %t   %v' = slice %c offset=0 cols=L
 *           the attention from %q', %c, %v' to %o'   %a = mla_output %o', %w
 *           each unless_prefill>=N;  %j = by_prefill %a, %m tokens=N
 *           (uses of %m now use %j)
 * requires  %q, %k, %v and the attention used by the attention only. */
#include <math.h>
#include <stdlib.h>

#include "attnc.h"
#include "pass/pass.h"

/* e, the expansion's cost per flop against the absorbed form's products
 * with kv_b_proj (mla_query, mla_output), measured: both forms of the
 * deepseek_v2_lite block (prefill into an empty cache, AMD EPYC Zen 4, 2
 * threads, medians) are equal between 8 and 16 tokens (8: 2.20 ms
 * absorbed against 2.33 expanded; 16: 3.51 against 3.18; 64: 12.5
 * against 10.4; deepseek_v3 64: 152.6 against 129.5), so 2L(n + dv)(e -
 * 1) / (2L - n - dv) = 341 (e - 1) is about 16: e = 1.05. (With the
 * expansion as dot products of one row and one key, e was 4: equal at
 * 1024 tokens.) */
static const double mla_expand_cost = 1.05;

int64_t attnc_mla_prefill_tokens(const attn_config *c) {
    if (c->mla_kv_lora_rank <= 0)
        return 0;
    double L = (double)c->mla_kv_lora_rank,
           nv = (double)(c->mla_qk_nope_head_dim + c->mla_v_head_dim);
    /* the queries' and keys' linear costs against the attention's, at
     * P = 0 (S^2 / 2 pairs): S (2L - n - dv) / 2 = L (n + dv) (e - 1) */
    double gain = 2 * L - nv;
    if (gain <= 0) /* expanded attention costs no less: the expansion's cost decides alone */
        return 1;
    double n = ceil(2 * L * nv * (mla_expand_cost - 1) / gain);
    return n < 1 ? 1 : n > (double)INT32_MAX ? INT32_MAX : (int64_t)n;
}

static ir_node *find(ir_graph *g, ir_op op) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == op)
            return g->nodes[i];
    return NULL;
}

/* The nodes between the expanded form's q, k, v and m (the attention,
 * whose values reach m), in graph order, marked in `in`; false unless
 * they, q, k and v are used only among them (and by m). */
static bool attention_between(ir_graph *g, ir_node *const src[3], const ir_node *m, bool *in,
                              ir_node **out, int *n_out) {
    bool *from = in, *to = calloc((size_t)g->next_id + 1, sizeof *to);
    if (!to)
        return false;
    for (int k = 0; k < 3; k++)
        from[src[k]->id] = true;
    int at_m = -1;
    for (int i = 0; i < g->n_nodes; i++) { /* what depends on q, k or v */
        ir_node *u = g->nodes[i];
        for (int j = 0; !u->dead && j < u->nargs; j++)
            from[u->id] |= from[u->args[j]->id];
        if (u == m)
            at_m = i;
    }
    to[m->id] = true;
    for (int i = at_m; i >= 0; i--) { /* what m depends on */
        ir_node *u = g->nodes[i];
        for (int j = 0; !u->dead && to[u->id] && j < u->nargs; j++)
            to[u->args[j]->id] = true;
    }
    *n_out = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *u = g->nodes[i];
        bool src_node = u == src[0] || u == src[1] || u == src[2];
        from[u->id] = !u->dead && from[u->id] && to[u->id] && u != m;
        if (from[u->id] && !src_node)
            out[(*n_out)++] = u;
    }
    free(to);
    bool ok = *n_out > 0 && *n_out < 16;
    for (int i = 0; ok && i < g->n_nodes; i++) { /* nothing else reads them */
        const ir_node *u = g->nodes[i];
        for (int j = 0; !u->dead && j < u->nargs; j++)
            ok &= !from[u->args[j]->id] || from[u->id] || u == m;
    }
    return ok;
}

attnc_status pass_mla_absorb(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    ir_node *qr = find(g, IR_OP_MLA_ROPE), *kn = find(g, IR_OP_MLA_KEYS);
    ir_node *vn = find(g, IR_OP_MLA_VALUES), *m = NULL;
    if (!qr || !kn || !vn || kn->args[0] != vn->args[0] || kn->args[1] != vn->args[1] || qr->gate ||
        kn->gate || vn->gate)
        return ATTNC_OK;
    for (int i = 0; i < g->n_nodes && !m; i++) /* the heads merged after the attention */
        if (!g->nodes[i]->dead && g->nodes[i]->op == IR_OP_MERGE_HEADS)
            m = g->nodes[i];
    if (!m)
        return ATTNC_OK;
    ir_node *src[3] = {qr, kn, vn}, *att[16];
    int n_att;
    bool *in = calloc((size_t)g->next_id + 1, sizeof *in);
    if (!in) {
        diag_error(ctx, ATTNC_E_NOMEM, m->loc, "out of memory");
        return ATTNC_E_NOMEM;
    }
    bool ok = attention_between(g, src, m, in, att, &n_att);
    free(in);
    if (!ok || att[n_att - 1] != m->args[0])
        return ATTNC_OK;
    int64_t N = attnc_mla_prefill_tokens(&g->cfg);
    ir_node *c = kn->args[0], *w = kn->args[1];
    ir_node *qa[3] = {qr->args[0], w, qr->args[1]};
    ir_node *q = ir_new(g, IR_OP_MLA_QUERY, qa, 3, qr->loc);
    ir_node *v = ir_new(g, IR_OP_SLICE, &c, 1, vn->loc);
    if (!q || !v)
        return diag_first_code(ctx);
    q->gate = v->gate = -N;
    v->offset = 0, v->cols = ir_cfg_mla_kv_lora_rank(g);
    if (!ir_insert(g, q, m) || !ir_insert(g, v, m))
        return diag_first_code(ctx);
    /* the attention again, over q', the latent and v' */
    ir_node *from[19] = {qr, kn, vn}, *to[19] = {q, c, v};
    int n_map = 3;
    for (int i = 0; i < n_att; i++) {
        ir_node *a = att[i], *args[IR_MAX_ARGS];
        for (int j = 0; j < a->nargs; j++) {
            args[j] = a->args[j];
            for (int k = 0; k < n_map; k++)
                if (a->args[j] == from[k])
                    args[j] = to[k];
        }
        ir_node *b = ir_new(g, a->op, args, a->nargs, a->loc);
        if (!b)
            return diag_first_code(ctx);
        ir_node keep = *b;
        *b = *a; /* its attributes */
        b->id = keep.id, b->n_uses = 0, b->gate = -N;
        for (int j = 0; j < a->nargs; j++)
            b->args[j] = keep.args[j];
        if (!ir_insert(g, b, m)) /* its shape: the latent's values are narrower */
            return diag_first_code(ctx);
        from[n_map] = a, to[n_map++] = b;
    }
    ir_node *oa[2] = {to[n_map - 1], w};
    ir_node *mo = ir_new(g, IR_OP_MLA_OUTPUT, oa, 2, m->loc);
    if (!mo)
        return diag_first_code(ctx);
    mo->gate = -N;
    if (!ir_insert(g, mo, m))
        return diag_first_code(ctx);
    for (int k = 0; k < 3; k++)
        src[k]->gate = N;
    for (int i = 0; i < n_att; i++)
        att[i]->gate = N;
    m->gate = N;
    /* the join, after m: every use of m reads it instead */
    int at = 0;
    while (g->nodes[at] != m)
        at++;
    ir_node *ja[2] = {mo, m};
    ir_node *j = ir_new(g, IR_OP_BY_PREFILL, ja, 2, m->loc);
    if (!j)
        return diag_first_code(ctx);
    j->tokens = N;
    ir_replace_uses(g, m, j);
    if (!ir_insert(g, j, at + 1 < g->n_nodes ? g->nodes[at + 1] : NULL))
        return diag_first_code(ctx);
    *changed = true;
    return ATTNC_OK;
}
