/* ir_build.c: lowers a validated spec into the unfused, textbook graph of
 * the design: projections, head split, RoPE on q and k, cache append, GQA
 * expansion, q.k^T, scale, softcap, mask, softmax, p.v, head merge, output
 * projection. Each node carries the location of the spec key behind it. */
#include "ir/ir.h"

static ir_node *weight(ir_graph *g, attn_weight_id w, attnc_loc loc) {
    ir_node *n = ir_new(g, IR_OP_WEIGHT, NULL, 0, loc);
    if (n)
        n->weight = w;
    return ir_insert(g, n, NULL);
}

/* x.W^T (+ b) for one projection. */
static ir_node *project(ir_graph *g, ir_node *x, attn_weight_id w, attn_weight_id b, bool bias,
                        attnc_loc loc) {
    ir_node *args[3] = {x, weight(g, w, loc), bias ? weight(g, b, loc) : NULL};
    if (!args[1] || (bias && !args[2]))
        return NULL;
    return ir_add(g, IR_OP_LINEAR, args, bias ? 3 : 2, loc);
}

static ir_node *unary(ir_graph *g, ir_op op, ir_node *a, attnc_loc loc) {
    return a ? ir_add(g, op, &a, 1, loc) : NULL;
}

/* qk_norm of q or k, with its weight w if the spec has one. */
static ir_node *norm(ir_graph *g, ir_node *x, attn_weight_id w, attnc_loc loc) {
    if (!x || !g->cfg.qk_norm_weight)
        return unary(g, IR_OP_QK_NORM, x, loc);
    ir_node *args[2] = {x, weight(g, w, loc)};
    return args[1] ? ir_add(g, IR_OP_QK_NORM, args, 2, loc) : NULL;
}

/* The attention of q [d, heads, S] over the cached keys k [d, g, T] and
 * values v [dv, g, T]: GQA expansion, q.k^T, scale, softcap, ALiBi,
 * mask, softmax (with sinks), p.v -> [dv, heads, S]. */
static ir_node *attend(ir_graph *g, ir_node *q, ir_node *k, ir_node *v) {
    const attn_config *cfg = &g->cfg;
    const attnc_loc *L = g->locs.key;
    if (k && v && k->ne[1].c != cfg->heads) {
        k = unary(g, IR_OP_GQA_EXPAND, k, L[SPEC_K_KV_GROUPS]);
        v = unary(g, IR_OP_GQA_EXPAND, v, L[SPEC_K_KV_GROUPS]);
    }
    ir_node *s = NULL;
    if (q && k) {
        ir_node *qk[2] = {q, k};
        s = ir_add(g, IR_OP_QK, qk, 2, L[SPEC_K_HEAD_DIM]);
    }
    if (s) {
        ir_node *sc = ir_new(g, IR_OP_SCALE, &s, 1, L[SPEC_K_SCALE]);
        if (sc)
            sc->scale = cfg->scale;
        s = ir_insert(g, sc, NULL);
    }
    if (cfg->score_mod[0])
        s = unary(g, IR_OP_SCORE_MOD, s, L[SPEC_K_SCORE_MOD]);
    if (s && cfg->softcap > 0) {
        ir_node *cap = ir_new(g, IR_OP_SOFTCAP, &s, 1, L[SPEC_K_SOFTCAP]);
        if (cap)
            cap->softcap = cfg->softcap;
        s = ir_insert(g, cap, NULL);
    }
    if (cfg->alibi)
        s = unary(g, IR_OP_ALIBI, s, L[SPEC_K_ALIBI]);
    if (cfg->causal)
        s = unary(g, IR_OP_MASK, s,
                  L[cfg->chunk            ? SPEC_K_CHUNKED
                    : cfg->sliding_window ? SPEC_K_SLIDING_WINDOW
                                          : SPEC_K_CAUSAL]);
    if (cfg->mask_mod[0])
        s = unary(g, IR_OP_MASK_MOD, s, L[SPEC_K_MASK_MOD]);
    if (s && cfg->sinks) {
        ir_node *sm[2] = {s, weight(g, ATTN_W_SINKS, L[SPEC_K_SINKS])};
        s = sm[1] ? ir_add(g, IR_OP_SOFTMAX, sm, 2, L[SPEC_K_SINKS]) : NULL;
    } else {
        s = unary(g, IR_OP_SOFTMAX, s, L[SPEC_K_CAUSAL]);
    }
    ir_node *pv[2] = {s, v};
    return s && v ? ir_add(g, IR_OP_PV, pv, 2, L[SPEC_K_HEAD_DIM]) : NULL;
}

/* Multi-head latent attention as modeling_deepseek_v3.py computes it: the
 * cache keeps each token's latent [c_kv; k_pe] (mla_latent); every
 * visible key's K and V are expanded per head through kv_b_proj
 * (mla_keys, mla_values); q_pe is rotated (mla_rope); attention; heads
 * merged; o_proj. The mla_absorb pass turns it into the absorbed form. */
static attnc_status mla_build(ir_graph *g, ir_graph **out) {
    const attn_config *cfg = &g->cfg;
    const attnc_loc *L = g->locs.key, at = L[SPEC_K_MLA];
    ir_node *x = ir_add(g, IR_OP_INPUT, NULL, 0, L[SPEC_K_D_MODEL]);
    ir_node *table = ir_add(g, IR_OP_ROPE_TABLE, NULL, 0, L[SPEC_K_ROPE]);
    ir_node *kvb = weight(g, ATTN_W_KV_B, at);
    ir_node *q;
    if (cfg->mla_q_lora_rank > 0) {
        q = x ? project(g, x, ATTN_W_Q_A, 0, false, at) : NULL;
        ir_node *nq[2] = {q, weight(g, ATTN_W_Q_A_NORM, at)};
        q = q && nq[1] ? ir_add(g, IR_OP_RMS_NORM, nq, 2, at) : NULL;
        q = q ? project(g, q, ATTN_W_Q_B, 0, false, at) : NULL;
    } else {
        q = x ? project(g, x, ATTN_W_Q, 0, false, L[SPEC_K_HEADS]) : NULL;
    }
    q = unary(g, IR_OP_SPLIT_HEADS, q, L[SPEC_K_HEADS]);
    ir_node *mq[2] = {q, table};
    q = q && table ? ir_add(g, IR_OP_MLA_ROPE, mq, 2, L[SPEC_K_ROPE]) : NULL;
    ir_node *lat = x ? project(g, x, ATTN_W_KV_A, 0, false, at) : NULL;
    ir_node *ml[3] = {lat, weight(g, ATTN_W_KV_A_NORM, at), table};
    lat = lat && ml[1] && table ? ir_add(g, IR_OP_MLA_LATENT, ml, 3, at) : NULL;
    ir_node *c = lat ? ir_new(g, IR_OP_CACHE_APPEND, &lat, 1, L[SPEC_K_KV_CACHE]) : NULL;
    c = ir_insert(g, c, NULL); /* cache 0: K */
    ir_node *ck[2] = {c, kvb};
    ir_node *k = c && kvb ? ir_add(g, IR_OP_MLA_KEYS, ck, 2, at) : NULL;
    ir_node *v = c && kvb ? ir_add(g, IR_OP_MLA_VALUES, ck, 2, at) : NULL;
    ir_node *o = attend(g, q, k, v);
    o = unary(g, IR_OP_MERGE_HEADS, o, L[SPEC_K_HEADS]);
    ir_node *y = o ? project(g, o, ATTN_W_O, ATTN_B_O, cfg->o_bias, L[SPEC_K_D_MODEL]) : NULL;
    y = unary(g, IR_OP_OUTPUT, y, L[SPEC_K_D_MODEL]);
    attnc_status st = diag_first_code(g->ctx);
    if (st == ATTNC_OK && !y)
        st = ATTNC_E_SHAPE;
    if (st == ATTNC_OK)
        *out = g;
    return st;
}

attnc_status ir_build(attnc_ctx *ctx, const attn_config *cfg, const spec_locs *locs,
                      ir_graph **out) {
    ir_graph *g = arena_alloc(&ctx->arena, sizeof *g);
    if (!g) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
        return ATTNC_E_NOMEM;
    }
    g->ctx = ctx;
    g->cfg = *cfg;
    g->locs = *locs;
    const attnc_loc *L = locs->key;
    if (cfg->mla_kv_lora_rank > 0)
        return mla_build(g, out);
    bool qkv_b = cfg->qkv_bias;

    ir_node *x = ir_add(g, IR_OP_INPUT, NULL, 0, L[SPEC_K_D_MODEL]);
    if (!x)
        return diag_first_code(ctx);
    /* cross-attention: K and V come from the memory, projected once per
     * sequence (its own phase) into the cache */
    ir_node *kvx = x;
    if (cfg->memory_dim > 0 && !(kvx = ir_add(g, IR_OP_MEMORY, NULL, 0, L[SPEC_K_CROSS])))
        return diag_first_code(ctx);
    ir_node *q = project(g, x, ATTN_W_Q, ATTN_B_Q, qkv_b, L[SPEC_K_HEADS]);
    ir_node *k = project(g, kvx, ATTN_W_K, ATTN_B_K, qkv_b && !cfg->no_k_bias,
                         L[cfg->no_k_bias ? SPEC_K_K_BIAS : SPEC_K_KV_GROUPS]);
    ir_node *v = project(g, kvx, ATTN_W_V, ATTN_B_V, qkv_b, L[SPEC_K_KV_GROUPS]);
    q = unary(g, IR_OP_SPLIT_HEADS, q, L[SPEC_K_HEADS]);
    k = unary(g, IR_OP_SPLIT_HEADS, k, L[SPEC_K_KV_GROUPS]);
    v = unary(g, IR_OP_SPLIT_HEADS, v, L[SPEC_K_KV_GROUPS]);
    if (cfg->qk_norm != ATTN_QK_NORM_NONE) {
        q = norm(g, q, ATTN_W_Q_NORM, L[SPEC_K_QK_NORM]);
        k = norm(g, k, ATTN_W_K_NORM, L[SPEC_K_QK_NORM]);
    }
    if (cfg->rope_style != ATTN_ROPE_NONE) {
        q = unary(g, IR_OP_ROPE, q, L[SPEC_K_ROPE]);
        k = unary(g, IR_OP_ROPE, k, L[SPEC_K_ROPE]);
    }
    if (cfg->temp_floor_scale > 0)
        q = unary(g, IR_OP_TEMPERATURE, q, L[SPEC_K_QUERY_TEMP]);
    ir_node *kc = k ? ir_new(g, IR_OP_CACHE_APPEND, &k, 1, L[SPEC_K_KV_CACHE]) : NULL;
    ir_node *vc = v ? ir_new(g, IR_OP_CACHE_APPEND, &v, 1, L[SPEC_K_KV_CACHE]) : NULL;
    if (kc && vc) {
        kc->cache = 0;
        vc->cache = 1;
    }
    k = ir_insert(g, kc, NULL);
    v = ir_insert(g, vc, NULL);
    ir_node *o = attend(g, q, k, v);
    o = unary(g, IR_OP_MERGE_HEADS, o, L[SPEC_K_HEADS]);
    ir_node *y = o ? project(g, o, ATTN_W_O, ATTN_B_O, cfg->o_bias, L[SPEC_K_D_MODEL]) : NULL;
    y = unary(g, IR_OP_OUTPUT, y, L[SPEC_K_D_MODEL]);
    attnc_status st = diag_first_code(ctx);
    if (st == ATTNC_OK && !y)
        st = ATTNC_E_SHAPE;
    if (st == ATTNC_OK)
        *out = g;
    return st;
}
