/* cg_rope.c: rotary embedding of [head_dim, heads, S] at positions pos[t],
 * and the rope_table (cos and sin per token and pair) that linears with a
 * RoPE epilogue read.
 * inv_freq is a constant table computed at compile time by the runtime's
 * own definition; cos and sin are taken once per (token, pair) in double
 * into a table shared by all heads, whose pairs are then rotated in one
 * vectorizable loop. Dims past rotary_dim are copied. */
#include <stdlib.h>

#include "codegen/cg_build.h"

/* inv_freq as a constant [rotary_dim / 2] f64 array, computed by the
 * runtime's own definition. */
static LLVMValueRef inv_freq_table(cg *c, LLVMTypeRef *arr_ty) {
    int64_t half = ir_cfg_rotary_dim(c->g) / 2;
    double *freq = malloc((size_t)half * sizeof *freq);
    ATTNC_ASSERT(freq);
    ir_cfg_rope_inv_freq(c->g, freq);
    *arr_ty = LLVMArrayType2(c->f64, (uint64_t)half);
    LLVMValueRef table = cg_const_table(c, c->f64, freq, half, "");
    free(freq);
    return table;
}

/* cos and sin of pos * inv_freq[i] (in double), times YaRN's attention
 * factor (1 otherwise), rounded to f32. */
static void angle(cg *c, LLVMValueRef table, LLVMTypeRef arr_ty, LLVMValueRef pos, LLVMValueRef i,
                  LLVMValueRef *cs, LLVMValueRef *sn) {
    LLVMValueRef gi[2] = {cg_i64(c, 0), i};
    LLVMValueRef f =
        LLVMBuildLoad2(c->b, c->f64, LLVMBuildInBoundsGEP2(c->b, arr_ty, table, gi, 2, ""), "");
    LLVMValueRef th = LLVMBuildFMul(c->b, pos, f, "theta");
    LLVMValueRef cv = cg_intrinsic(c, "llvm.cos", c->f64, th, NULL);
    LLVMValueRef sv = cg_intrinsic(c, "llvm.sin", c->f64, th, NULL);
    double af = ir_cfg_rope_cos_factor(c->g);
    if (af != 1.0) {
        cv = LLVMBuildFMul(c->b, cv, LLVMConstReal(c->f64, af), "");
        sv = LLVMBuildFMul(c->b, sv, LLVMConstReal(c->f64, af), "");
    }
    *cs = LLVMBuildFPTrunc(c->b, cv, c->f32, "");
    *sn = LLVMBuildFPTrunc(c->b, sv, c->f32, "");
}

static LLVMValueRef position(cg *c, LLVMValueRef t) {
    LLVMValueRef pp = LLVMBuildInBoundsGEP2(c->b, c->i64, c->pos, &t, 1, "");
    return LLVMBuildSIToFP(c->b, LLVMBuildLoad2(c->b, c->i64, pp, ""), c->f64, "pos");
}

void cg_emit_rope_table(cg *c, const ir_node *n, const char *name) {
    int64_t half = ir_cfg_rotary_dim(c->g) / 2;
    LLVMTypeRef arr_ty;
    LLVMValueRef table = inv_freq_table(c, &arr_ty);
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi;
    cg_share(c, c->S, &lo, &hi);
    cg_loop lt = cg_for(c, lo, hi, "t");
    LLVMValueRef pos = position(c, lt.i);
    cg_loop li = cg_for(c, cg_i64(c, 0), cg_i64(c, half), "i");
    LLVMValueRef cs, sn;
    angle(c, table, arr_ty, pos, li.i, &cs, &sn);
    LLVMValueRef ci[2] = {li.i, lt.i},
                 si[2] = {LLVMBuildAdd(c->b, li.i, cg_i64(c, half), ""), lt.i};
    cg_store(c, ATTN_DTYPE_F32, cs, cg_addr(c, n, ci));
    cg_store(c, ATTN_DTYPE_F32, sn, cg_addr(c, n, si));
    cg_for_end(c, &li);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}

void cg_rope_pair(cg *c, LLVMValueRef i, int64_t half, LLVMValueRef *ia, LLVMValueRef *ib) {
    bool is_half = ir_cfg_rope_style(c->g) == ATTN_ROPE_HALF;
    *ia = is_half ? i : LLVMBuildMul(c->b, i, cg_i64(c, 2), "");
    *ib = LLVMBuildAdd(c->b, *ia, cg_i64(c, is_half ? half : 1), "");
}

void cg_rope_turn(cg *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef cs, LLVMValueRef sn,
                  LLVMValueRef *ra, LLVMValueRef *rb) {
    *ra = LLVMBuildFSub(c->b, LLVMBuildFMul(c->b, a, cs, ""), LLVMBuildFMul(c->b, b, sn, ""), "");
    *rb = LLVMBuildFAdd(c->b, LLVMBuildFMul(c->b, a, sn, ""), LLVMBuildFMul(c->b, b, cs, ""), "");
}

void cg_emit_rope(cg *c, const ir_node *n, const char *name) {
    const ir_node *x = n->args[0];
    int64_t half = ir_cfg_rotary_dim(c->g) / 2, heads = n->ne[1].c;
    LLVMTypeRef arr_ty;
    LLVMValueRef table = inv_freq_table(c, &arr_ty);

    cg_kernel_begin(c, name);
    /* per-token tables of cos and sin, so the inner loop runs over the
     * pairs of one head and vectorizes */
    LLVMTypeRef tab_ty = LLVMArrayType2(c->f32, (uint64_t)half);
    LLVMValueRef cos_tab = cg_slot(c, tab_ty, LLVMConstNull(tab_ty));
    LLVMValueRef sin_tab = cg_slot(c, tab_ty, LLVMConstNull(tab_ty));
    LLVMValueRef lo, hi;
    cg_share(c, c->S, &lo, &hi);
    cg_loop lt = cg_for(c, lo, hi, "t");
    LLVMValueRef pos = position(c, lt.i);
    cg_loop li = cg_for(c, cg_i64(c, 0), cg_i64(c, half), "i");
    LLVMValueRef gi[2] = {cg_i64(c, 0), li.i}, ci, si;
    angle(c, table, arr_ty, pos, li.i, &ci, &si);
    LLVMBuildStore(c->b, ci, LLVMBuildInBoundsGEP2(c->b, tab_ty, cos_tab, gi, 2, ""));
    LLVMBuildStore(c->b, si, LLVMBuildInBoundsGEP2(c->b, tab_ty, sin_tab, gi, 2, ""));
    cg_for_end(c, &li);
    cg_loop lh = cg_for(c, cg_i64(c, 0), cg_i64(c, heads), "h");
    cg_loop lp = cg_for(c, cg_i64(c, 0), cg_i64(c, half), "pair");
    LLVMValueRef ti[2] = {cg_i64(c, 0), lp.i};
    LLVMValueRef cs =
        LLVMBuildLoad2(c->b, c->f32, LLVMBuildInBoundsGEP2(c->b, tab_ty, cos_tab, ti, 2, ""), "");
    LLVMValueRef sn =
        LLVMBuildLoad2(c->b, c->f32, LLVMBuildInBoundsGEP2(c->b, tab_ty, sin_tab, ti, 2, ""), "");
    LLVMValueRef ia, ib, ra, rb;
    cg_rope_pair(c, lp.i, half, &ia, &ib);
    LLVMValueRef pa[3] = {ia, lh.i, lt.i}, pb[3] = {ib, lh.i, lt.i};
    LLVMValueRef a = cg_load(c, x->dt, cg_addr(c, x, pa)), b = cg_load(c, x->dt, cg_addr(c, x, pb));
    cg_rope_turn(c, a, b, cs, sn, &ra, &rb);
    cg_store(c, n->dt, ra, cg_addr(c, n, pa));
    cg_store(c, n->dt, rb, cg_addr(c, n, pb));
    cg_for_end(c, &lp);
    if (ir_cfg_rotary_dim(c->g) < ir_cfg_head_dim(c->g)) {
        cg_loop ld =
            cg_for(c, cg_i64(c, ir_cfg_rotary_dim(c->g)), cg_i64(c, ir_cfg_head_dim(c->g)), "d");
        LLVMValueRef p[3] = {ld.i, lh.i, lt.i};
        cg_store(c, n->dt, cg_load(c, x->dt, cg_addr(c, x, p)), cg_addr(c, n, p));
        cg_for_end(c, &ld);
    }
    cg_for_end(c, &lh);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}
