/* cg_mask.c: the score rules the flash kernel (cg_flash.c) and its split
 * decode path (cg_split.c) share, on vectors: which keys a row's causal
 * mask, window, chunk, mask_mod or draft tree hides, whether a key tile
 * is cut by them, score_mod, ALiBi's bias and the softcap. Here so that
 * neither kernel file calls into the other for them. */
#include <string.h>

#include "codegen/cg_build.h"

int64_t cg_expr_head0(cg *c) {
    return ir_cfg_shard_count(c->g) > 1 ? ir_cfg_heads(c->g) * ir_cfg_shard_index(c->g) : 0;
}

LLVMValueRef cg_score_mod(cg *c, const ir_node *n, LLVMValueRef s, LLVMValueRef keys,
                          LLVMValueRef pos, LLVMValueRef heads, const LLVMValueRef *pre) {
    if (!n->score_mod)
        return s;
    cg_expr_at at = {s, pos, keys, heads, pre};
    return cg_expr(c, cg_expr_of(c, false), &at);
}

LLVMValueRef cg_keys_hidden(cg *c, const ir_node *n, LLVMValueRef keys, LLVMValueRef pos,
                            LLVMValueRef heads, LLVMValueRef bits, LLVMValueRef beyond) {
    LLVMValueRef hidden = beyond;
    if (n->mask_mod) {
        cg_expr_at at = {NULL, pos, keys, heads, NULL};
        hidden = LLVMBuildOr(c->b, hidden,
                             LLVMBuildNot(c->b, cg_expr(c, cg_expr_of(c, true), &at), ""), "");
    }
    if (bits)
        hidden = LLVMBuildOr(c->b, hidden, cg_tree_hidden(c, keys, bits), "");
    if (n->causal) {
        hidden = LLVMBuildOr(c->b, hidden, LLVMBuildICmp(c->b, LLVMIntSGT, keys, pos, ""), "");
        LLVMValueRef first = cg_first_key_at(c, pos); /* window, chunk */
        if (first)
            hidden =
                LLVMBuildOr(c->b, hidden, LLVMBuildICmp(c->b, LLVMIntSLT, keys, first, ""), "");
    }
    return hidden;
}

LLVMValueRef cg_inv_sum(cg *c, const ir_node *n, LLVMValueRef l) {
    LLVMValueRef inv = LLVMBuildFDiv(c->b, cg_f32(c, 1), l, "");
    if (!n->mask_mod)
        return inv;
    return LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOGT, l, cg_f32(c, 0), ""), inv,
                           cg_f32(c, 0), "");
}

/* What n's mask_mod may be for rows at positions [pmin, pmax] of any
 * head and keys [j0, jlast]: true somewhere (*yes), false somewhere (*no). */
static void mask_mod_bounds(cg *c, LLVMValueRef j0, LLVMValueRef jlast, LLVMValueRef pmin,
                            LLVMValueRef pmax, LLVMValueRef *yes, LLVMValueRef *no) {
    /* a tile's cut and liveness ask in turn, in one block: bounded once
     * (a token input's scans are loops) */
    LLVMValueRef key[4] = {j0, jlast, pmin, pmax};
    if (c->bounds_at == LLVMGetInsertBlock(c->b) && !memcmp(key, c->bounds_key, sizeof key)) {
        *yes = c->bounds_yes, *no = c->bounds_no;
        return;
    }
    int64_t h0 = cg_expr_head0(c);
    cg_expr_box box = {pmin,  pmax,          j0,
                       jlast, cg_i64(c, h0), cg_i64(c, h0 + ir_cfg_heads(c->g) - 1)};
    cg_expr_bounds(c, cg_expr_of(c, true), &box, yes, no);
    memcpy(c->bounds_key, key, sizeof key);
    c->bounds_at = LLVMGetInsertBlock(c->b);
    c->bounds_yes = *yes, c->bounds_no = *no;
}

LLVMValueRef cg_tile_live(cg *c, const ir_node *n, LLVMValueRef j0, LLVMValueRef jlast,
                          LLVMValueRef pmin, LLVMValueRef pmax) {
    if (!n->mask_mod)
        return NULL;
    LLVMValueRef yes, no;
    mask_mod_bounds(c, j0, jlast, pmin, pmax, &yes, &no);
    return yes;
}

LLVMBasicBlockRef cg_live_begin(cg *c, LLVMValueRef live) {
    if (!live)
        return NULL;
    LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "live_tile");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "tile_done");
    LLVMBuildCondBr(c->b, live, run, done);
    LLVMPositionBuilderAtEnd(c->b, run);
    return done;
}

void cg_live_end(cg *c, LLVMBasicBlockRef done) {
    if (!done)
        return;
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, done);
}

LLVMValueRef cg_tile_cut(cg *c, const ir_node *n, LLVMValueRef j0, LLVMValueRef jlast,
                         LLVMValueRef jend, LLVMValueRef pmin, LLVMValueRef pmax) {
    LLVMValueRef cut = LLVMBuildICmp(c->b, LLVMIntSGE, jlast, jend, "");
    if (n->mask_mod) { /* a tile the mask may hide a key of */
        LLVMValueRef yes, no;
        mask_mod_bounds(c, j0, jlast, pmin, pmax, &yes, &no);
        cut = LLVMBuildOr(c->b, cut, no, "");
    }
    if (ir_cfg_tree(c->g)) { /* a tree call: a tile with keys of the call */
        LLVMValueRef tree = LLVMBuildICmp(c->b, LLVMIntNE, c->tree, LLVMConstNull(c->ptr), "");
        cut = LLVMBuildOr(
            c->b, cut,
            LLVMBuildAnd(c->b, tree, LLVMBuildICmp(c->b, LLVMIntSGE, jlast, c->P, ""), ""), "");
    }
    if (n->causal) {
        cut = LLVMBuildOr(c->b, cut, LLVMBuildICmp(c->b, LLVMIntSGT, jlast, pmin, ""), "");
        /* the first key never decreases with the position: the last row's
         * is the largest */
        LLVMValueRef first = cg_first_key_at(c, pmax);
        if (first)
            cut = LLVMBuildOr(c->b, cut, LLVMBuildICmp(c->b, LLVMIntSLT, j0, first, ""), "");
    }
    return cut;
}

LLVMValueRef cg_alibi_add(cg *c, LLVMValueRef s, LLVMValueRef slope, LLVMValueRef keys,
                          LLVMValueRef pos) {
    /* j - p exactly as an integer, then one rounding: slope * (j - p) */
    LLVMValueRef d = LLVMBuildSIToFP(c->b, LLVMBuildSub(c->b, keys, pos, ""), c->vf, "");
    return cg_fma(c, slope, d, s);
}

LLVMValueRef cg_softcap(cg *c, const ir_node *n, LLVMValueRef s) {
    if (n->softcap <= 0)
        return s;
    return LLVMBuildFMul(c->b, cg_tanh(c, LLVMBuildFMul(c->b, s, cg_vf32(c, 1.0 / n->softcap), "")),
                         cg_vf32(c, n->softcap), "");
}
