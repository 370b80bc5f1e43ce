/* cg_copy.c: kernels that move values: cache_append (each new token's K
 * or V row into its cache row slot[t], converted to the cache dtype), gqa_expand
 * (each K/V head repeated for its query heads, widened to f32) and output
 * (a copy into y when the last value was not computed there). */
#include "codegen/cg_build.h"

/* Head h of batch token t into its q8_0 cache row `row`: each block of 32
 * values quantized as ggml's quantize_row_q8_0_ref does (ggml-quants.c):
 * d = max|x| / 127, q = round(x / d) (x times 1/d; 0 when d is 0), d
 * stored as f16 (round to nearest even), as the reference engine rounds
 * its K and V (runtime quant.c). */
static void append_q8(cg *c, const ir_node *n, LLVMValueRef row, LLVMValueRef h, LLVMValueRef t) {
    const ir_node *x = n->args[0];
    int64_t hd = n->ne[0].c;
    int buf = c->plan->view[n->id].buf;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    cg_loop lb = cg_for(c, cg_i64(c, 0), cg_i64(c, hd / 32), "block32");
    LLVMValueRef d0 = LLVMBuildMul(c->b, lb.i, cg_i64(c, 32), "");
    cg_acc_loop la;
    cg_acc_loop_begin(c, &la, "amax", c->f32, 1);
    LLVMValueRef src[3] = {LLVMBuildAdd(c->b, d0, la.i, ""), h, t};
    LLVMValueRef ax =
        cg_intrinsic(c, "llvm.fabs", c->f32, cg_load(c, x->dt, cg_addr(c, x, src)), NULL);
    /* NaN wins (llvm.maximum): the block then holds NaN, as its values did */
    LLVMValueRef amax = cg_intrinsic(c, "llvm.maximum", c->f32, la.acc[0], ax);
    LLVMValueRef zero = cg_f32(c, 0);
    cg_acc_loop_end(c, &la, cg_i64(c, 32), &zero, &amax);
    LLVMValueRef d = LLVMBuildFDiv(c->b, amax, cg_f32(c, 127), "d");
    LLVMValueRef id = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealONE, d, zero, ""),
                                      LLVMBuildFDiv(c->b, cg_f32(c, 1), d, ""), zero, "id");
    LLVMValueRef col0 = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, h, cg_i64(c, hd), ""), d0, "");
    LLVMValueRef first = cg_cache_elem(c, n->cache, buf, n->dt, row, col0);
    LLVMValueRef dh = LLVMBuildFPTrunc(c->b, d, c->f16, "");
    LLVMSetAlignment(LLVMBuildStore(c->b, dh, cg_cache_scale(c, n->cache, buf, first)), 1);
    cg_loop lj = cg_for(c, cg_i64(c, 0), cg_i64(c, 32), "q");
    LLVMValueRef sj[3] = {LLVMBuildAdd(c->b, d0, lj.i, ""), h, t};
    LLVMValueRef v = LLVMBuildFMul(c->b, cg_load(c, x->dt, cg_addr(c, x, sj)), id, "");
    /* in [-127, 127] already; the clamp makes a NaN (times id 0) a 0 */
    v = cg_intrinsic(c, "llvm.minnum", c->f32,
                     cg_intrinsic(c, "llvm.maxnum", c->f32, v, cg_f32(c, -127)), cg_f32(c, 127));
    LLVMValueRef q = LLVMBuildFPToSI(c->b, cg_intrinsic(c, "llvm.round", c->f32, v, NULL), i8, "");
    LLVMValueRef to =
        cg_cache_elem(c, n->cache, buf, n->dt, row, LLVMBuildAdd(c->b, col0, lj.i, ""));
    LLVMSetAlignment(LLVMBuildStore(c->b, q, to), 1);
    cg_for_end(c, &lj);
    cg_for_end(c, &lb);
}

void cg_emit_by_prefill(cg *c, const ir_node *n, const char *name) {
    const ir_node *few = n->args[0], *many = n->args[1];
    ATTNC_ASSERT(few->dt == many->dt);
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi;
    cg_share(c, c->S, &lo, &hi);
    LLVMValueRef take = cg_prefill_at_least(c, n->tokens);
    cg_loop lt = cg_for(c, lo, hi, "t");
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_dim(c, n->ne[0]), "d");
    LLVMValueRef p[2] = {ld.i, lt.i};
    /* only the operand this call computed is read */
    LLVMValueRef at = LLVMBuildSelect(c->b, take, cg_addr(c, many, p), cg_addr(c, few, p), "");
    cg_store(c, n->dt, cg_load(c, few->dt, at), cg_addr(c, n, p));
    cg_for_end(c, &ld);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}

void cg_emit_copy(cg *c, const ir_node *n, const char *name) {
    const ir_node *x = n->args[0];
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi;
    /* the outermost dim is split: S rows appended, T rows expanded, S outputs */
    cg_share(c, n->op == IR_OP_GQA_EXPAND ? c->T : c->S, &lo, &hi);
    if (n->op == IR_OP_GQA_EXPAND) /* keys no query of this call sees may be released */
        lo = cg_intrinsic(c, "llvm.smax", c->i64, lo, c->jlo);
    cg_loop lt = cg_for(c, lo, hi, "t");
    if (n->op == IR_OP_OUTPUT) {
        cg_loop ld = cg_for(c, cg_i64(c, 0), cg_dim(c, n->ne[0]), "d");
        LLVMValueRef p[2] = {ld.i, lt.i};
        cg_store(c, n->dt, cg_load(c, x->dt, cg_addr(c, x, p)), cg_addr(c, n, p));
        cg_for_end(c, &ld);
    } else {
        bool append = n->op == IR_OP_CACHE_APPEND;
        int64_t group = append ? 1 : n->ne[1].c / x->ne[1].c, hd = n->ne[0].c, heads = n->ne[1].c;
        /* an append writes batch token t to its cache row slot[t] */
        LLVMValueRef row = NULL;
        if (append) {
            LLVMValueRef sp = LLVMBuildInBoundsGEP2(c->b, c->i64, c->slot, &lt.i, 1, "");
            row = LLVMBuildLoad2(c->b, c->i64, sp, "row");
        }
        cg_loop lh = cg_for(c, cg_i64(c, 0), cg_i64(c, heads), "h");
        if (append && n->dt == ATTN_DTYPE_Q8_0) {
            append_q8(c, n, row, lh.i, lt.i);
            cg_for_end(c, &lh);
            cg_for_end(c, &lt);
            cg_kernel_end(c);
            return;
        }
        LLVMValueRef src_h = LLVMBuildSDiv(c->b, lh.i, cg_i64(c, group), "");
        cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, hd), "d");
        LLVMValueRef src[3] = {ld.i, src_h, lt.i}, dst[3] = {ld.i, lh.i, lt.i};
        LLVMValueRef to;
        if (append) {
            LLVMValueRef col =
                LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lh.i, cg_i64(c, hd), ""), ld.i, "");
            to = cg_cache_elem(c, n->cache, c->plan->view[n->id].buf, n->dt, row, col);
        } else {
            to = cg_addr(c, n, dst);
        }
        cg_store(c, n->dt, cg_load_elem(c, x, cg_addr(c, x, src)), to);
        cg_for_end(c, &ld);
        cg_for_end(c, &lh);
    }
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}
