/* cg_int8.c: activations q8_0, the projections' products in int8.
 *
 * x's rows are quantized as ggml quantizes activations for its int8 dot
 * products (ggml-quants.c quantize_row_q8_0_ref): per block of 32 along k,
 * d = max|x| / 127 (f32, stored as f16), q = round(x * (1 / d)), ties
 * away from zero. A block's product with a weight block (ggml's
 * vec_dot_q8_0_q8_0, vec_dot_q4_0_q8_0) is the exact int32 sum of q_x q_w
 * times d_x d_w, summed in f32.
 *
 * vpdpbusd multiplies unsigned bytes by signed ones, four to a 32-bit
 * lane. The weights are the unsigned side: q8_0's q + 128, q4_0's nibbles
 * as stored (its weights are nibble - 8); x's q the signed side. So a
 * block's sum over the 32 k is sum (u_w q_x) - off * sum q_x, off = 128
 * or 8, the second term once per row and block.
 *
 * Layouts (words of 4 bytes):
 *  - weight panels, per k block of 32: [nr f16 d][data]: q8_0's data
 *    [8 groups of 4 k][nr][4 bytes u = q + 128]; q4_0's [4 groups of 8
 *    k][nr][4 bytes]: byte j holds k = 8g + j in its low nibble and 8g + 4
 *    + j in its high one. The same bytes a panel holds for f32
 *    activations (cg_gemm.c), in another order.
 *  - quantized x, tiles of xs rows: per k block [8 words of q (group g:
 *    k 4g..4g+3)][d as f32][-off * sum q as i32], each field xs words, the
 *    row within the tile the word's index: QX_WORDS * xs words a block. */
#include <stdio.h>
#include <string.h>

#include "codegen/cg_build.h"

/* acc + the sums of four u8 x s8 products in each 32-bit lane (u from
 * the weights, s from x): vpdpbusd where the target has it, AArch64's
 * usdot (i8mm: the same sums, wrapping as vpdpbusd's, u unsigned and s
 * signed; Arm's A64 reference, USDOT (vector)), else the same integers
 * from widened bytes. */
LLVMValueRef cg_dot_u8s8(cg *c, LLVMValueRef acc, LLVMValueRef u, LLVMValueRef s) {
    int n = (int)LLVMGetVectorSize(LLVMTypeOf(acc)), m = c->target.machine_lanes;
    bool dot = c->target.vnni || c->target.usdot;
    if (dot && n > m) { /* a widened vector: a machine vector at a time */
        ATTNC_ASSERT(n % m == 0 && n / m <= 4);
        LLVMValueRef part[4];
        int idx[16];
        for (int h = 0; h < n / m; h++) {
            for (int i = 0; i < m; i++)
                idx[i] = h * m + i;
            LLVMValueRef x[3] = {acc, u, s};
            for (int k = 0; k < 3; k++)
                x[k] = cg_shuffle(c, x[k], idx, m);
            part[h] = cg_dot_u8s8(c, x[0], x[1], x[2]);
        }
        return cg_concat(c, part, n / m);
    }
    if (c->target.usdot) {
        static const char name[] = "llvm.aarch64.neon.usdot";
        unsigned id = LLVMLookupIntrinsicID(name, sizeof name - 1);
        ATTNC_ASSERT(id != 0 && n == 4);
        LLVMTypeRef bytes = LLVMVectorType(LLVMInt8TypeInContext(c->llctx), 16);
        LLVMTypeRef tys[2] = {LLVMTypeOf(acc), bytes};
        LLVMValueRef args[3] = {acc, LLVMBuildBitCast(c->b, u, bytes, ""),
                                LLVMBuildBitCast(c->b, s, bytes, "")};
        return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, tys, 2),
                              LLVMGetIntrinsicDeclaration(c->mod, id, tys, 2), args, 3, "");
    }
    if (c->target.vnni) {
        char name[48];
        snprintf(name, sizeof name, "llvm.x86.avx512.vpdpbusd.%d", 32 * n);
        unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
        ATTNC_ASSERT(id != 0);
        LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, NULL, 0);
        LLVMValueRef args[3] = {acc, u, s};
        return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, NULL, 0), fn, args, 3, "");
    }
    /* byte j of each lane: zero-extended from u, sign-extended from s;
     * no shuffles (widening the bytes with them, seed's kernels compiled
     * 4.7 times slower and ran 2.6 times slower) */
    for (int j = 0; j < 4; j++) {
        LLVMValueRef uj = LLVMBuildAnd(
            c->b, LLVMBuildLShr(c->b, u, cg_splat(c, LLVMConstInt(c->i32, 8 * j, false)), ""),
            cg_splat(c, LLVMConstInt(c->i32, 255, false)), "");
        LLVMValueRef sj = LLVMBuildAShr(
            c->b, LLVMBuildShl(c->b, s, cg_splat(c, LLVMConstInt(c->i32, 24 - 8 * j, false)), ""),
            cg_splat(c, LLVMConstInt(c->i32, 24, false)), "");
        acc = LLVMBuildAdd(c->b, acc, LLVMBuildMul(c->b, uj, sj, ""), "");
    }
    return acc;
}

/* One block of 32 values (nv vectors v) as ggml's quantize_row_q8_0_ref:
 * q[i] the vectors of int8 values (as i32), the result d as f16, widened
 * back; d is NaN where a value is not finite, or past f16's range (max|x|
 * from 65520 * 127 on). */
static LLVMValueRef q8_block(cg *c, const LLVMValueRef *v, int nv, LLVMValueRef *q) {
    LLVMValueRef amax = NULL, z = NULL;
    for (int i = 0; i < nv; i++) {
        LLVMValueRef a = cg_intrinsic(c, "llvm.fabs", c->vf, v[i], NULL);
        amax = amax ? cg_intrinsic(c, "llvm.maxnum", c->vf, amax, a) : a;
        /* x - x: 0, or NaN where x is not finite, which d then carries */
        LLVMValueRef d = LLVMBuildFSub(c->b, v[i], v[i], "");
        z = z ? LLVMBuildFAdd(c->b, z, d, "") : d;
    }
    LLVMValueRef m = cg_intrinsic(c, "llvm.vector.reduce.fmaximum", c->vf,
                                  LLVMBuildFAdd(c->b, amax, z, ""), NULL);
    LLVMValueRef d = LLVMBuildFDiv(c->b, m, cg_f32(c, 127.0), "d");
    LLVMValueRef id =
        LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealUNE, d, cg_f32(c, 0), ""),
                        LLVMBuildFDiv(c->b, cg_f32(c, 1.0), d, ""), cg_f32(c, 0), "id");
    for (int i = 0; i < nv; i++) {
        LLVMValueRef r = cg_intrinsic(c, "llvm.round", c->vf,
                                      LLVMBuildFMul(c->b, v[i], cg_splat(c, id), ""), NULL);
        /* NaN (x not finite) becomes 0: d is NaN already */
        r = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealORD, r, r, ""), r, cg_vf32(c, 0), "");
        q[i] = LLVMBuildFPToSI(c->b, r, c->vi, "");
    }
    LLVMValueRef dh = LLVMBuildFPExt(
        c->b, LLVMBuildFPTrunc(c->b, d, LLVMHalfTypeInContext(c->llctx), ""), c->f32, "");
    return LLVMBuildFAdd(c->b, dh, LLVMBuildFSub(c->b, dh, dh, ""), "");
}

/* A block's q (nv vectors of i32) as bytes, four to an i32: w[i] the
 * L / 4 words of vector i; returns -off * sum q, what a dot product with
 * the other operand's bytes plus off takes back. */
static LLVMValueRef q8_words(cg *c, const LLVMValueRef *q, int nv, int off, LLVMValueRef *w) {
    int L = c->target.lanes;
    LLVMTypeRef vi8 = LLVMVectorType(LLVMInt8TypeInContext(c->llctx), (unsigned)L);
    LLVMTypeRef vw = LLVMVectorType(c->i32, (unsigned)(L / 4));
    LLVMValueRef sum = NULL;
    for (int i = 0; i < nv; i++) {
        w[i] = LLVMBuildBitCast(c->b, LLVMBuildTrunc(c->b, q[i], vi8, ""), vw, "");
        sum = sum ? LLVMBuildAdd(c->b, sum, q[i], "") : q[i];
    }
    return LLVMBuildMul(c->b, cg_intrinsic(c, "llvm.vector.reduce.add", c->vi, sum, NULL),
                        LLVMConstInt(c->i32, (unsigned long long)-off, true), "");
}

void cg_q8_row(cg *c, LLVMValueRef p, int64_t n, LLVMValueRef dq, LLVMValueRef words,
               LLVMValueRef corr) {
    int L = c->target.lanes, nv = 32 / L;
    ATTNC_ASSERT(n % 32 == 0 && 32 % L == 0);
    cg_loop lb = cg_for(c, cg_i64(c, 0), cg_i64(c, n / 32), "q8_block");
    LLVMValueRef b0 = LLVMBuildMul(c->b, lb.i, cg_i64(c, 32), ""), at[32], v[32] = {NULL}, q[32];
    for (int i = 0; i < nv; i++) {
        at[i] = cg_gep(c, c->f32, p, LLVMBuildAdd(c->b, b0, cg_i64(c, i * L), ""));
        v[i] = cg_vload(c, ATTN_DTYPE_F32, at[i]);
    }
    LLVMValueRef dh = q8_block(c, v, nv, q);
    for (int i = 0; i < nv; i++) {
        LLVMValueRef qf = LLVMBuildSIToFP(c->b, q[i], c->vf, "");
        cg_vstore(c, ATTN_DTYPE_F32, dq ? qf : LLVMBuildFMul(c->b, qf, cg_splat(c, dh), ""), at[i]);
    }
    if (dq)
        LLVMBuildStore(c->b, dh, cg_gep(c, c->f32, dq, lb.i));
    if (words) { /* the other operand's bytes are q + 128 */
        LLVMValueRef w[32];
        LLVMBuildStore(c->b, q8_words(c, q, nv, 128, w), cg_gep(c, c->i32, corr, lb.i));
        for (int i = 0; i < nv; i++) {
            LLVMValueRef at_w = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lb.i, cg_i64(c, 8), ""),
                                             cg_i64(c, i * L / 4), "");
            LLVMSetAlignment(LLVMBuildStore(c->b, w[i], cg_gep(c, c->i32, words, at_w)), 4);
        }
    }
    cg_for_end(c, &lb);
}

void cg_q8_round_trip(cg *c, LLVMValueRef p, int64_t n) {
    cg_q8_row(c, p, n, NULL, NULL, NULL);
}

void cg_q8_query_row(cg *c, const ir_node *q, LLVMValueRef h, LLVMValueRef t, LLVMValueRef dst,
                     int64_t hd) {
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, hd), "q8_d");
    LLVMValueRef qi[3] = {ld.i, h, t};
    LLVMBuildStore(c->b, cg_load(c, q->dt, cg_addr(c, q, qi)), cg_gep(c, c->f32, dst, ld.i));
    cg_for_end(c, &ld);
    cg_q8_round_trip(c, dst, hd);
}

/* Word f of row `in` of the quantized block bb of a tile at q (xs rows). */
static LLVMValueRef qx_word(cg *c, LLVMValueRef q, int64_t xs, LLVMValueRef bb, int f,
                            LLVMValueRef in) {
    LLVMValueRef at = LLVMBuildAdd(
        c->b,
        LLVMBuildMul(c->b,
                     LLVMBuildAdd(c->b, LLVMBuildMul(c->b, bb, cg_i64(c, CG_QX_WORDS), ""),
                                  cg_i64(c, f), ""),
                     cg_i64(c, xs), ""),
        in, "");
    return cg_gep(c, c->i32, q, at);
}

void cg_quantize_rows(cg *c, int x_buf, int64_t K, LLVMValueRef r0, LLVMValueRef r1,
                      LLVMValueRef kb, LLVMValueRef nblk, LLVMValueRef dst, int64_t xs,
                      int64_t tile_words, int off) {
    int L = c->target.lanes, nv = 32 / L;
    cg_loop lr = cg_for(c, r0, r1, "quant_row");
    LLVMValueRef rl = LLVMBuildSub(c->b, lr.i, r0, "");
    LLVMValueRef tile = LLVMBuildSDiv(c->b, rl, cg_i64(c, xs), "");
    LLVMValueRef in = LLVMBuildSRem(c->b, rl, cg_i64(c, xs), "");
    LLVMValueRef q0 = cg_gep(c, c->i32, dst, LLVMBuildMul(c->b, tile, cg_i64(c, tile_words), ""));
    cg_loop lb = cg_for(c, cg_i64(c, 0), nblk, "quant_block");
    LLVMValueRef k0 =
        LLVMBuildAdd(c->b, LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lr.i, cg_i64(c, K), ""), kb, ""),
                     LLVMBuildMul(c->b, lb.i, cg_i64(c, 32), ""), "");
    LLVMValueRef v[32] = {NULL}, q[32];
    for (int i = 0; i < nv; i++)
        v[i] = cg_vload(
            c, ATTN_DTYPE_F32,
            cg_buf_elem(c, x_buf, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, k0, cg_i64(c, i * L), "")));
    LLVMValueRef dh = q8_block(c, v, nv, q), w[32];
    LLVMValueRef corr = q8_words(c, q, nv, off, w);
    for (int i = 0; i < nv; i++)
        for (int j = 0; j < L / 4; j++)
            LLVMBuildStore(c->b,
                           LLVMBuildExtractElement(c->b, w[i], LLVMConstInt(c->i32, j, false), ""),
                           qx_word(c, q0, xs, lb.i, i * L / 4 + j, in));
    LLVMBuildStore(c->b, dh, qx_word(c, q0, xs, lb.i, 8, in));
    LLVMBuildStore(c->b, corr, qx_word(c, q0, xs, lb.i, 9, in));
    cg_for_end(c, &lb);
    cg_for_end(c, &lr);
}

void cg_int8_sums(cg *c, int64_t nr, int R, int npan, const LLVMValueRef *w0, int64_t pbb, bool q8,
                  LLVMValueRef nblk, LLVMValueRef xq, int64_t xs, const LLVMValueRef *init,
                  LLVMValueRef *next) {
    int L = c->target.lanes, na = 2 * R * npan;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    ATTNC_ASSERT(na <= 64);
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "kblock32", c->vf, na);
    LLVMValueRef blk[2], dw[2][2], s[64];
    for (int pp = 0; pp < npan; pp++) {
        blk[pp] = cg_gep(c, i8, w0[pp], LLVMBuildMul(c->b, l.i, cg_i64(c, pbb), ""));
        for (int j = 0; j < 2; j++)
            dw[pp][j] = cg_vload(c, ATTN_DTYPE_F16, cg_gep(c, i8, blk[pp], cg_i64(c, 2 * j * L)));
    }
    for (int r = 0; r < R; r++) { /* the sums start at - off * sum q */
        LLVMValueRef corr =
            cg_splat(c, LLVMBuildLoad2(c->b, c->i32, qx_word(c, xq, xs, l.i, 9, cg_i64(c, r)), ""));
        for (int pp = 0; pp < npan; pp++)
            s[pp * 2 * R + 2 * r] = s[pp * 2 * R + 2 * r + 1] = corr;
    }
    LLVMValueRef lo4 = cg_splat(c, LLVMConstInt(c->i32, 0x0f0f0f0f, false));
    for (int g = 0; g < (q8 ? 8 : 4); g++) {
        LLVMValueRef w[2][2][2]; /* [panel][vector][q4_0: low, high nibbles] */
        for (int pp = 0; pp < npan; pp++)
            for (int j = 0; j < 2; j++) {
                LLVMValueRef v = LLVMBuildLoad2(
                    c->b, c->vi, cg_gep(c, i8, blk[pp], cg_i64(c, 2 * nr + (g * nr + j * L) * 4)),
                    "");
                LLVMSetAlignment(v, 4);
                w[pp][j][0] = q8 ? v : LLVMBuildAnd(c->b, v, lo4, "");
                if (!q8)
                    w[pp][j][1] = LLVMBuildAnd(
                        c->b,
                        LLVMBuildLShr(c->b, v, cg_splat(c, LLVMConstInt(c->i32, 4, false)), ""),
                        lo4, "");
            }
        for (int h = 0; h < (q8 ? 1 : 2); h++) /* q4_0: x's groups 2g and 2g + 1 */
            for (int r = 0; r < R; r++) {
                LLVMValueRef xw = LLVMBuildLoad2(
                    c->b, c->i32, qx_word(c, xq, xs, l.i, q8 ? g : 2 * g + h, cg_i64(c, r)), "");
                LLVMValueRef xb = cg_splat(c, xw);
                for (int pp = 0; pp < npan; pp++)
                    for (int j = 0; j < 2; j++) {
                        LLVMValueRef *a = &s[pp * 2 * R + 2 * r + j];
                        *a = cg_dot_u8s8(c, *a, w[pp][j][h], xb);
                    }
            }
    }
    for (int r = 0; r < R; r++) {
        LLVMValueRef dx =
            cg_splat(c, LLVMBuildLoad2(c->b, c->f32, qx_word(c, xq, xs, l.i, 8, cg_i64(c, r)), ""));
        for (int pp = 0; pp < npan; pp++)
            for (int j = 0; j < 2; j++) {
                int a = pp * 2 * R + 2 * r + j;
                LLVMValueRef exact = LLVMBuildSIToFP(c->b, s[a], c->vf, "");
                next[a] = cg_fma(c, exact, LLVMBuildFMul(c->b, dw[pp][j], dx, ""), l.acc[a]);
            }
    }
    cg_acc_loop_end(c, &l, nblk, init, next);
}

void cg_pack_int8_block(cg *c, bool q8, int64_t nr, LLVMValueRef sb, LLVMValueRef dq,
                        LLVMValueRef ll, LLVMValueRef inside) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    for (int g = 0; g < (q8 ? 8 : 4); g++)
        for (int j = 0; j < 4; j++) {
            LLVMValueRef v;
            if (q8) { /* q + 128 as an unsigned byte: its top bit flipped */
                v = LLVMBuildLoad2(c->b, i8, cg_gep(c, i8, sb, cg_i64(c, 2 + 4 * g + j)), "");
                v = LLVMBuildXor(c->b, v, LLVMConstInt(i8, 0x80, false), "");
            } else { /* ggml: element e < 16 in the low nibble of byte e, 16 + e high */
                int e[2] = {8 * g + j, 8 * g + 4 + j};
                LLVMValueRef nib[2];
                for (int h = 0; h < 2; h++) {
                    LLVMValueRef b =
                        LLVMBuildLoad2(c->b, i8, cg_gep(c, i8, sb, cg_i64(c, 2 + e[h] % 16)), "");
                    nib[h] = e[h] < 16 ? LLVMBuildAnd(c->b, b, LLVMConstInt(i8, 15, false), "")
                                       : LLVMBuildLShr(c->b, b, LLVMConstInt(i8, 4, false), "");
                }
                v = LLVMBuildOr(c->b, nib[0],
                                LLVMBuildShl(c->b, nib[1], LLVMConstInt(i8, 4, false), ""), "");
            }
            /* past N: the weight of q = 0 (its d is 0 too) */
            v = LLVMBuildSelect(c->b, inside, v, LLVMConstInt(i8, q8 ? 0x80 : 0x88, false), "");
            LLVMValueRef at = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, ll, cg_i64(c, 4), ""),
                                           cg_i64(c, (int64_t)g * nr * 4 + j), "");
            LLVMBuildStore(c->b, v, cg_gep(c, i8, dq, at));
        }
}
