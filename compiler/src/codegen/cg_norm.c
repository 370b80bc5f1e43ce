/* cg_norm.c: the per-token kernels between the projections and attention
 * that no epilogue takes: QK-norm (RMS over each head, or over the whole
 * row of a token, times an optional weight or 1 + weight) and the query
 * temperature of Llama 4's layers without RoPE. Threads split the tokens;
 * the sums of squares are reductions the vectorizer may reassociate, so
 * results depend on the vector width, never on the thread count. */
#include "codegen/cg_build.h"

LLVMValueRef cg_rms_factor(cg *c, LLVMValueRef sumsq, int64_t len, double eps) {
    /* in double, as the reference's rsqrt is exact */
    LLVMValueRef mean = LLVMBuildFDiv(c->b, LLVMBuildFPExt(c->b, sumsq, c->f64, ""),
                                      LLVMConstReal(c->f64, (double)len), "");
    LLVMValueRef rs = cg_intrinsic(c, "llvm.sqrt", c->f64,
                                   LLVMBuildFAdd(c->b, mean, LLVMConstReal(c->f64, eps), ""), NULL);
    return LLVMBuildFPTrunc(c->b, LLVMBuildFDiv(c->b, LLVMConstReal(c->f64, 1), rs, ""), c->f32,
                            "rms");
}

void cg_emit_qk_norm(cg *c, const ir_node *n, const char *name) {
    const ir_node *x = n->args[0], *w = n->nargs > 1 ? n->args[1] : NULL;
    int64_t hd = ir_cfg_head_dim(c->g), heads = n->ne[1].c;
    bool all = ir_cfg_qk_norm(c->g) == ATTN_QK_NORM_ALL;
    /* one normalization covers `len` elements: a head, or a token's row */
    int64_t units = all ? 1 : heads, per = all ? heads : 1, len = per * hd;
    cg_kernel_begin(c, name);
    LLVMValueRef acc = cg_slot(c, c->f32, cg_f32(c, 0));
    LLVMValueRef lo, hi;
    cg_share(c, c->S, &lo, &hi);
    cg_loop lt = cg_for(c, lo, hi, "t");
    cg_loop lu = cg_for(c, cg_i64(c, 0), cg_i64(c, units), "unit");
    LLVMBuildStore(c->b, cg_f32(c, 0), acc);
    cg_loop li = cg_for(c, cg_i64(c, 0), cg_i64(c, len), "i");
    /* element i of the unit: dim i % hd of head unit * per + i / hd */
    LLVMValueRef head = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lu.i, cg_i64(c, per), ""),
                                     LLVMBuildSDiv(c->b, li.i, cg_i64(c, hd), ""), "");
    LLVMValueRef xi[3] = {LLVMBuildSRem(c->b, li.i, cg_i64(c, hd), ""), head, lt.i};
    LLVMValueRef e = cg_load(c, x->dt, cg_addr(c, x, xi));
    LLVMBuildStore(c->b, cg_fadd(c, LLVMBuildLoad2(c->b, c->f32, acc, ""), cg_fmul(c, e, e)), acc);
    cg_for_end(c, &li);
    LLVMValueRef r =
        cg_rms_factor(c, LLVMBuildLoad2(c->b, c->f32, acc, ""), len, ir_cfg_qk_norm_eps(c->g));
    cg_loop lj = cg_for(c, cg_i64(c, 0), cg_i64(c, len), "i");
    LLVMValueRef hj = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lu.i, cg_i64(c, per), ""),
                                   LLVMBuildSDiv(c->b, lj.i, cg_i64(c, hd), ""), "");
    LLVMValueRef xj[3] = {LLVMBuildSRem(c->b, lj.i, cg_i64(c, hd), ""), hj, lt.i};
    LLVMValueRef y = LLVMBuildFMul(c->b, cg_load(c, x->dt, cg_addr(c, x, xj)), r, "");
    if (w) { /* the weight's index runs over one normalization's elements */
        LLVMValueRef wi[1] = {lj.i};
        LLVMValueRef g = cg_load(c, w->dt, cg_addr(c, w, wi));
        if (ir_cfg_qk_norm_offset(c->g))
            g = LLVMBuildFAdd(c->b, g, cg_f32(c, (double)ir_cfg_qk_norm_offset(c->g)), "");
        y = LLVMBuildFMul(c->b, y, g, "");
    }
    cg_store(c, n->dt, y, cg_addr(c, n, xj));
    cg_for_end(c, &lj);
    cg_for_end(c, &lu);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}

void cg_emit_temperature(cg *c, const ir_node *n, const char *name) {
    const ir_node *x = n->args[0];
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi;
    cg_share(c, c->S, &lo, &hi);
    cg_loop lt = cg_for(c, lo, hi, "t");
    /* attn_query_temperature: log(floor((pos + 1) / floor_scale) + 1)
     * * attn_scale + 1, in double; the floor is an integer division */
    LLVMValueRef pos = LLVMBuildLoad2(
        c->b, c->i64, LLVMBuildInBoundsGEP2(c->b, c->i64, c->pos, &lt.i, 1, ""), "pos");
    LLVMValueRef fl = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, pos, cg_i64(c, 1), ""),
                                    cg_i64(c, ir_cfg_temp_floor_scale(c->g)), "");
    LLVMValueRef lg = cg_intrinsic(
        c, "llvm.log", c->f64,
        LLVMBuildFAdd(c->b, LLVMBuildSIToFP(c->b, fl, c->f64, ""), LLVMConstReal(c->f64, 1), ""),
        NULL);
    LLVMValueRef temp = LLVMBuildFAdd(
        c->b, LLVMBuildFMul(c->b, lg, LLVMConstReal(c->f64, ir_cfg_temp_attn_scale(c->g)), ""),
        LLVMConstReal(c->f64, 1), "");
    temp = LLVMBuildFPTrunc(c->b, temp, c->f32, "temp");
    cg_loop lh = cg_for(c, cg_i64(c, 0), cg_i64(c, n->ne[1].c), "h");
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, ir_cfg_head_dim(c->g)), "d");
    LLVMValueRef i[3] = {ld.i, lh.i, lt.i};
    cg_store(c, n->dt, LLVMBuildFMul(c->b, cg_load(c, x->dt, cg_addr(c, x, i)), temp, ""),
             cg_addr(c, n, i));
    cg_for_end(c, &ld);
    cg_for_end(c, &lh);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}
