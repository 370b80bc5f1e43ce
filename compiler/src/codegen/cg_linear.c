/* cg_linear.c: y[t, o] = (sum_i x[t, i] W[o, i] + b[o]) * (o < scale_cols ?
 * F : 1). Threads split the output columns o; each output is one dot
 * product over the constant input width, which the loop vectorizer turns
 * into target-width FMAs. (The register-blocked GEMM comes with prefill.) */
#include "codegen/cg.h"

void cg_emit_linear(cg *c, const ir_node *n, const char *name) {
    const ir_node *x = n->args[0], *w = n->args[1], *bias = n->nargs == 3 ? n->args[2] : NULL;
    int64_t n_out = n->ne[0].c, n_in = x->ne[0].c;
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi;
    cg_share(c, cg_i64(c, n_out), &lo, &hi);
    LLVMValueRef acc = cg_slot(c, c->f32, cg_f32(c, 0));
    cg_loop lo_o = cg_for(c, lo, hi, "o");
    LLVMValueRef o = lo_o.i;
    LLVMValueRef b = bias ? cg_load(c, bias->dt, cg_addr(c, bias, &o)) : cg_f32(c, 0);
    LLVMValueRef sc = cg_f32(c, 1);
    if (n->scale_cols)
        sc = LLVMBuildSelect(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, o, cg_i64(c, n->scale_cols), ""),
                             cg_f32(c, n->factor), cg_f32(c, 1), "");
    cg_loop lt = cg_for(c, cg_i64(c, 0), c->S, "t");
    LLVMBuildStore(c->b, cg_f32(c, 0), acc);
    cg_loop li = cg_for(c, cg_i64(c, 0), cg_i64(c, n_in), "i");
    LLVMValueRef xi[2] = {li.i, lt.i}, wi[2] = {li.i, o};
    LLVMValueRef prod = cg_fmul(c, cg_load(c, x->dt, cg_addr(c, x, xi)),
                                cg_load(c, w->dt, cg_addr(c, w, wi)));
    LLVMBuildStore(c->b, cg_fadd(c, LLVMBuildLoad2(c->b, c->f32, acc, ""), prod), acc);
    cg_for_end(c, &li);
    LLVMValueRef y = LLVMBuildFMul(
        c->b, LLVMBuildFAdd(c->b, LLVMBuildLoad2(c->b, c->f32, acc, ""), b, ""), sc, "");
    LLVMValueRef yi[2] = {o, lt.i};
    cg_store(c, n->dt, y, cg_addr(c, n, yi));
    cg_for_end(c, &lt);
    cg_for_end(c, &lo_o);
    cg_kernel_end(c);
}
