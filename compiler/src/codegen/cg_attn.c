/* cg_attn.c: the unfused attention kernels. qk and pv work on rows (h, s)
 * split among threads; K/V head h / group is read when drop_gqa_expand
 * left the cache un-expanded. The row-wise score ops (scale, softcap,
 * alibi, mask, softmax) each make one pass over their rows. */
#include <math.h>

#include "codegen/cg_build.h"

/* Splits rows H*S among threads; *h and *s are the current row's. */
static cg_loop rows_begin(cg *c, int64_t heads, LLVMValueRef *h, LLVMValueRef *s) {
    LLVMValueRef lo, hi;
    cg_share(c, LLVMBuildMul(c->b, c->S, cg_i64(c, heads), ""), &lo, &hi);
    cg_loop l = cg_for(c, lo, hi, "row");
    *h = LLVMBuildSDiv(c->b, l.i, c->S, "h");
    *s = LLVMBuildSRem(c->b, l.i, c->S, "s");
    return l;
}

static LLVMValueRef kv_head(cg *c, const ir_node *n, const ir_node *kv, LLVMValueRef h) {
    int64_t group = ir_cfg_heads(c->g) / kv->ne[1].c;
    (void)n;
    return group == 1 ? h : LLVMBuildSDiv(c->b, h, cg_i64(c, group), "kvh");
}

void cg_emit_qk(cg *c, const ir_node *n, const char *name) {
    const ir_node *q = n->args[0], *k = n->args[1];
    int64_t hd = q->ne[0].c;
    cg_kernel_begin(c, name);
    LLVMValueRef acc = cg_slot(c, c->f32, cg_f32(c, 0)), h, s;
    /* activations q8_0 over a q8_0 cache: the row's q quantized to Q8_0
     * blocks and back, as the flash and split kernels take it (exact
     * products with the cache's d * q from there on) */
    LLVMValueRef qrow =
        ir_cfg_q8_query(c->g) ? cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)hd), NULL) : NULL;
    cg_loop lr = rows_begin(c, n->ne[2].c, &h, &s);
    LLVMValueRef kh = kv_head(c, n, k, h);
    if (qrow)
        cg_q8_query_row(c, q, h, s, qrow, hd);
    /* only keys some query of this call can see: jlo.. */
    cg_loop lj = cg_for(c, c->jlo, c->T, "j");
    LLVMBuildStore(c->b, cg_f32(c, 0), acc);
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, hd), "d");
    LLVMValueRef qi[3] = {ld.i, h, s}, ki[3] = {ld.i, kh, lj.i};
    LLVMValueRef qd = qrow ? LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, qrow, ld.i), "")
                           : cg_load(c, q->dt, cg_addr(c, q, qi));
    LLVMValueRef prod =
        cg_fmul(c, cg_qk_operand(c, qd), cg_qk_operand(c, cg_load_elem(c, k, cg_addr(c, k, ki))));
    LLVMBuildStore(c->b, cg_fadd(c, LLVMBuildLoad2(c->b, c->f32, acc, ""), prod), acc);
    cg_for_end(c, &ld);
    LLVMValueRef oi[3] = {lj.i, s, h};
    cg_store(c, n->dt, LLVMBuildLoad2(c->b, c->f32, acc, ""), cg_addr(c, n, oi));
    cg_for_end(c, &lj);
    cg_for_end(c, &lr);
    cg_kernel_end(c);
}

void cg_emit_pv(cg *c, const ir_node *n, const char *name) {
    const ir_node *p = n->args[0], *v = n->args[1];
    int64_t hd = n->ne[0].c;
    cg_kernel_begin(c, name);
    LLVMValueRef h, s;
    cg_loop lr = rows_begin(c, n->ne[1].c, &h, &s);
    LLVMValueRef vh = kv_head(c, n, v, h);
    cg_loop lz = cg_for(c, cg_i64(c, 0), cg_i64(c, hd), "d");
    LLVMValueRef zi[3] = {lz.i, h, s};
    cg_store(c, n->dt, cg_f32(c, 0), cg_addr(c, n, zi));
    cg_for_end(c, &lz);
    cg_loop lj = cg_for(c, c->jlo, c->T, "j");
    LLVMValueRef pi[3] = {lj.i, s, h};
    LLVMValueRef pj = cg_operand(c, cg_load(c, p->dt, cg_addr(c, p, pi)));
    /* keys of weight 0 (masked, or underflowed) are skipped as in the
     * reference: 0 * v would still carry a NaN or infinity of v along */
    LLVMBasicBlockRef use = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "use");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "next");
    LLVMBuildCondBr(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, pj, cg_f32(c, 0), ""), next, use);
    LLVMPositionBuilderAtEnd(c->b, use);
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, hd), "d");
    LLVMValueRef oi[3] = {ld.i, h, s}, vi[3] = {ld.i, vh, lj.i};
    LLVMValueRef out = cg_addr(c, n, oi);
    LLVMValueRef sum = LLVMBuildFAdd(
        c->b, cg_load(c, n->dt, out),
        LLVMBuildFMul(c->b, pj, cg_operand(c, cg_load_elem(c, v, cg_addr(c, v, vi))), ""), "");
    cg_store(c, n->dt, sum, out);
    cg_for_end(c, &ld);
    LLVMBuildBr(c->b, next);
    LLVMPositionBuilderAtEnd(c->b, next);
    cg_for_end(c, &lj);
    cg_for_end(c, &lr);
    cg_kernel_end(c);
}

void cg_emit_rowwise(cg *c, const ir_node *n, const char *name) {
    const ir_node *x = n->args[0];
    cg_kernel_begin(c, name);
    LLVMValueRef mx = cg_slot(c, c->f32, cg_f32(c, 0));
    LLVMValueRef sum = cg_slot(c, c->f32, cg_f32(c, 0)), h, s;
    cg_loop lr = rows_begin(c, n->ne[2].c, &h, &s);
    LLVMValueRef pos = LLVMBuildAdd(c->b, c->P, s, "pos");
    /* a sink (gpt-oss) joins the max and the sum, and attends to nothing */
    const ir_node *sinks = ir_sinks(n);
    LLVMValueRef sink = NULL;
    if (sinks) {
        LLVMValueRef si[1] = {h};
        sink = cg_load(c, sinks->dt, cg_addr(c, sinks, si));
    }
    LLVMValueRef slope = n->op == IR_OP_ALIBI ? cg_alibi_slope(c, h) : NULL;
    LLVMValueRef first = n->op == IR_OP_MASK ? cg_first_key_at(c, pos) : NULL;
    LLVMValueRef bits = n->op == IR_OP_MASK ? cg_tree_bits(c, s) : NULL;
    if (n->op == IR_OP_SOFTMAX) {
        LLVMBuildStore(c->b, sink ? sink : cg_f32(c, -INFINITY), mx);
        LLVMBuildStore(c->b, cg_f32(c, 0), sum);
        cg_loop lj = cg_for(c, c->jlo, c->T, "j");
        LLVMValueRef xi[3] = {lj.i, s, h};
        LLVMValueRef m =
            cg_intrinsic(c, "llvm.maxnum", c->f32, LLVMBuildLoad2(c->b, c->f32, mx, ""),
                         cg_load(c, x->dt, cg_addr(c, x, xi)));
        LLVMBuildStore(c->b, m, mx);
        cg_for_end(c, &lj);
    }
    LLVMValueRef m = LLVMBuildLoad2(c->b, c->f32, mx, "max");
    bool empty = n->op == IR_OP_SOFTMAX && ir_cfg_mask_mod(c->g)[0];
    if (empty) /* mask_mod may hide every key of a row: 0 stands in for its max */
        m = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, m, cg_f32(c, -INFINITY), ""),
                            cg_f32(c, 0), m, "");
    if (sink)
        LLVMBuildStore(c->b, cg_exp(c, LLVMBuildFSub(c->b, sink, m, "")), sum);
    cg_loop lj = cg_for(c, c->jlo, c->T, "j");
    LLVMValueRef xi[3] = {lj.i, s, h};
    LLVMValueRef v = cg_load(c, x->dt, cg_addr(c, x, xi));
    if (n->op == IR_OP_SCALE) {
        v = LLVMBuildFMul(c->b, v, cg_f32(c, n->scale), "");
    } else if (n->op == IR_OP_SOFTCAP) {
        LLVMValueRef t = cg_tanh(c, LLVMBuildFMul(c->b, v, cg_f32(c, 1.0 / n->softcap), ""));
        v = LLVMBuildFMul(c->b, t, cg_f32(c, n->softcap), "");
    } else if (n->op == IR_OP_ALIBI) {
        LLVMValueRef d = LLVMBuildSIToFP(c->b, LLVMBuildSub(c->b, lj.i, pos, ""), c->f32, "");
        v = LLVMBuildFAdd(c->b, v, LLVMBuildFMul(c->b, slope, d, ""), "");
    } else if (n->op == IR_OP_SCORE_MOD || n->op == IR_OP_MASK_MOD) {
        /* the expressions on scalars: i32 positions and head */
        LLVMValueRef hg = LLVMBuildAdd(c->b, h, cg_i64(c, cg_expr_head0(c)), "");
        cg_expr_at at = {v, LLVMBuildTrunc(c->b, pos, c->i32, ""),
                         LLVMBuildTrunc(c->b, lj.i, c->i32, ""),
                         LLVMBuildTrunc(c->b, hg, c->i32, ""), NULL};
        bool mask = n->op == IR_OP_MASK_MOD;
        LLVMValueRef e = cg_expr(c, cg_expr_of(c, mask), &at);
        v = mask ? LLVMBuildSelect(c->b, e, v, cg_f32(c, -INFINITY), "") : e;
    } else if (n->op == IR_OP_MASK) {
        LLVMValueRef hidden = LLVMBuildICmp(c->b, LLVMIntSGT, lj.i, pos, "");
        if (first) /* window, chunk */
            hidden =
                LLVMBuildOr(c->b, hidden, LLVMBuildICmp(c->b, LLVMIntSLT, lj.i, first, ""), "");
        if (bits) /* a draft tree */
            hidden = LLVMBuildOr(c->b, hidden, cg_tree_hidden(c, lj.i, bits), "");
        v = LLVMBuildSelect(c->b, hidden, cg_f32(c, -INFINITY), v, "");
    } else {
        ATTNC_ASSERT(n->op == IR_OP_SOFTMAX);
        v = cg_exp(c, LLVMBuildFSub(c->b, v, m, ""));
        LLVMBuildStore(c->b, cg_fadd(c, LLVMBuildLoad2(c->b, c->f32, sum, ""), v), sum);
    }
    cg_store(c, n->dt, v, cg_addr(c, n, xi));
    cg_for_end(c, &lj);
    if (n->op == IR_OP_SOFTMAX) {
        LLVMValueRef total = LLVMBuildLoad2(c->b, c->f32, sum, "sum");
        if (empty) /* no key seen: weights 0 (0 / inf), as the reference */
            total = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, total, cg_f32(c, 0), ""),
                                    cg_f32(c, INFINITY), total, "");
        cg_loop lk = cg_for(c, c->jlo, c->T, "j");
        LLVMValueRef ki[3] = {lk.i, s, h};
        LLVMValueRef p = cg_addr(c, n, ki);
        cg_store(c, n->dt, LLVMBuildFDiv(c->b, cg_load(c, n->dt, p), total, ""), p);
        cg_for_end(c, &lk);
    }
    cg_for_end(c, &lr);
    cg_kernel_end(c);
}
