/* cg_copy.c: kernels that move values: cache_append (each new token's K
 * or V row into its cache row slot[t], converted to the cache dtype), gqa_expand
 * (each K/V head repeated for its query heads, widened to f32) and output
 * (a copy into y when the last value was not computed there). */
#include "codegen/cg.h"

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
        LLVMValueRef src_h = LLVMBuildSDiv(c->b, lh.i, cg_i64(c, group), "");
        cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, hd), "d");
        LLVMValueRef src[3] = {ld.i, src_h, lt.i}, dst[3] = {ld.i, lh.i, lt.i};
        LLVMValueRef to;
        if (append) {
            LLVMValueRef col = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lh.i, cg_i64(c, hd), ""), ld.i, "");
            to = cg_cache_elem(c, n->cache, c->plan->view[n->id].buf, n->dt, row, col);
        } else {
            to = cg_addr(c, n, dst);
        }
        cg_store(c, n->dt, cg_load(c, x->dt, cg_addr(c, x, src)), to);
        cg_for_end(c, &ld);
        cg_for_end(c, &lh);
    }
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}
