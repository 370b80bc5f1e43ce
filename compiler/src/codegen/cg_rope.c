/* cg_rope.c: rotary embedding of [head_dim, heads, S] at positions pos[t].
 * inv_freq is a constant table computed at compile time by the runtime's
 * own definition; cos and sin are taken once per (token, pair) in double
 * into a table shared by all heads, whose pairs are then rotated in one
 * vectorizable loop. Dims past rotary_dim are copied. */
#include <stdlib.h>

#include "codegen/cg.h"

void cg_emit_rope(cg *c, const ir_node *n, const char *name) {
    const attn_config *cfg = &c->g->cfg;
    const ir_node *x = n->args[0];
    int64_t half = cfg->rotary_dim / 2, heads = n->ne[1].c;
    double *freq = malloc((size_t)half * sizeof *freq);
    LLVMValueRef *consts = malloc((size_t)half * sizeof *consts);
    ATTNC_ASSERT(freq && consts);
    attn_rope_inv_freq(cfg, freq);
    for (int64_t i = 0; i < half; i++)
        consts[i] = LLVMConstReal(c->f64, freq[i]);
    LLVMTypeRef arr_ty = LLVMArrayType2(c->f64, (uint64_t)half);
    LLVMValueRef table = LLVMAddGlobal(c->mod, arr_ty, "");
    LLVMSetInitializer(table, LLVMConstArray2(c->f64, consts, (uint64_t)half));
    LLVMSetGlobalConstant(table, true);
    LLVMSetLinkage(table, LLVMPrivateLinkage);
    free(freq);
    free(consts);

    cg_kernel_begin(c, name);
    /* per-token tables of cos and sin, so the inner loop runs over the
     * pairs of one head and vectorizes */
    LLVMTypeRef tab_ty = LLVMArrayType2(c->f32, (uint64_t)half);
    LLVMValueRef cos_tab = cg_slot(c, tab_ty, LLVMConstNull(tab_ty));
    LLVMValueRef sin_tab = cg_slot(c, tab_ty, LLVMConstNull(tab_ty));
    LLVMValueRef lo, hi;
    cg_share(c, c->S, &lo, &hi);
    cg_loop lt = cg_for(c, lo, hi, "t");
    LLVMValueRef pp = LLVMBuildInBoundsGEP2(c->b, c->i64, c->pos, &lt.i, 1, "");
    LLVMValueRef pos = LLVMBuildSIToFP(c->b, LLVMBuildLoad2(c->b, c->i64, pp, ""), c->f64, "pos");
    cg_loop li = cg_for(c, cg_i64(c, 0), cg_i64(c, half), "i");
    LLVMValueRef gi[2] = {cg_i64(c, 0), li.i};
    LLVMValueRef f = LLVMBuildLoad2(c->b, c->f64, LLVMBuildInBoundsGEP2(c->b, arr_ty, table, gi, 2, ""), "");
    LLVMValueRef th = LLVMBuildFMul(c->b, pos, f, "theta");
    LLVMBuildStore(c->b, LLVMBuildFPTrunc(c->b, cg_intrinsic(c, "llvm.cos", c->f64, th, NULL), c->f32, ""),
                   LLVMBuildInBoundsGEP2(c->b, tab_ty, cos_tab, gi, 2, ""));
    LLVMBuildStore(c->b, LLVMBuildFPTrunc(c->b, cg_intrinsic(c, "llvm.sin", c->f64, th, NULL), c->f32, ""),
                   LLVMBuildInBoundsGEP2(c->b, tab_ty, sin_tab, gi, 2, ""));
    cg_for_end(c, &li);
    bool is_half = cfg->rope_style == ATTN_ROPE_HALF;
    cg_loop lh = cg_for(c, cg_i64(c, 0), cg_i64(c, heads), "h");
    cg_loop lp = cg_for(c, cg_i64(c, 0), cg_i64(c, half), "pair");
    LLVMValueRef ti[2] = {cg_i64(c, 0), lp.i};
    LLVMValueRef cs = LLVMBuildLoad2(c->b, c->f32, LLVMBuildInBoundsGEP2(c->b, tab_ty, cos_tab, ti, 2, ""), "");
    LLVMValueRef sn = LLVMBuildLoad2(c->b, c->f32, LLVMBuildInBoundsGEP2(c->b, tab_ty, sin_tab, ti, 2, ""), "");
    LLVMValueRef ia = is_half ? lp.i : LLVMBuildMul(c->b, lp.i, cg_i64(c, 2), "");
    LLVMValueRef ib = LLVMBuildAdd(c->b, ia, cg_i64(c, is_half ? half : 1), "");
    LLVMValueRef pa[3] = {ia, lh.i, lt.i}, pb[3] = {ib, lh.i, lt.i};
    LLVMValueRef a = cg_load(c, x->dt, cg_addr(c, x, pa)), b = cg_load(c, x->dt, cg_addr(c, x, pb));
    LLVMValueRef ra = LLVMBuildFSub(c->b, LLVMBuildFMul(c->b, a, cs, ""), LLVMBuildFMul(c->b, b, sn, ""), "");
    LLVMValueRef rb = LLVMBuildFAdd(c->b, LLVMBuildFMul(c->b, a, sn, ""), LLVMBuildFMul(c->b, b, cs, ""), "");
    cg_store(c, n->dt, ra, cg_addr(c, n, pa));
    cg_store(c, n->dt, rb, cg_addr(c, n, pb));
    cg_for_end(c, &lp);
    if (cfg->rotary_dim < cfg->head_dim) {
        cg_loop ld = cg_for(c, cg_i64(c, cfg->rotary_dim), cg_i64(c, cfg->head_dim), "d");
        LLVMValueRef p[3] = {ld.i, lh.i, lt.i};
        cg_store(c, n->dt, cg_load(c, x->dt, cg_addr(c, x, p)), cg_addr(c, n, p));
        cg_for_end(c, &ld);
    }
    cg_for_end(c, &lh);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}
