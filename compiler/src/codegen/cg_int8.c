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

/* AArch64's int8 intrinsic `name` (usdot, smmla: <4 x i32> sums of
 * <16 x i8> operands) of acc and the bytes of a and b. */
static LLVMValueRef neon_bytes(cg *c, const char *name, LLVMValueRef acc, LLVMValueRef a,
                               LLVMValueRef b) {
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    ATTNC_ASSERT(id != 0 && c->target.lanes == 4);
    LLVMTypeRef bytes = LLVMVectorType(LLVMInt8TypeInContext(c->llctx), 16);
    LLVMTypeRef tys[2] = {LLVMTypeOf(acc), bytes};
    LLVMValueRef args[3] = {acc, LLVMBuildBitCast(c->b, a, bytes, ""),
                            LLVMBuildBitCast(c->b, b, bytes, "")};
    return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, tys, 2),
                          LLVMGetIntrinsicDeclaration(c->mod, id, tys, 2), args, 3, "");
}

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
        ATTNC_ASSERT(n == 4);
        return neon_bytes(c, "llvm.aarch64.neon.usdot", acc, u, s);
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

bool cg_int8_mmla(const cg *c) {
    return c->target.usdot;
}

/* Word f of row `in` of the quantized block bb of a tile at q (xs rows):
 * field f's xs words, or (smmla) the fields in pairs, each row's two
 * words side by side (a row's 8 k of q, its d and corr). */
static LLVMValueRef qx_word(cg *c, LLVMValueRef q, int64_t xs, LLVMValueRef bb, int f,
                            LLVMValueRef in) {
    bool pairs = cg_int8_mmla(c);
    LLVMValueRef at = LLVMBuildAdd(
        c->b,
        LLVMBuildMul(c->b,
                     LLVMBuildAdd(c->b, LLVMBuildMul(c->b, bb, cg_i64(c, CG_QX_WORDS), ""),
                                  cg_i64(c, pairs ? f & ~1 : f), ""),
                     cg_i64(c, xs), ""),
        pairs ? LLVMBuildAdd(c->b, LLVMBuildMul(c->b, in, cg_i64(c, 2), ""), cg_i64(c, f & 1), "")
              : in,
        "");
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

/* The weights' vector of bytes at byte off of the panel block blk: q8_0's
 * as they are (w[0]), q4_0's low nibbles (w[0]) and high ones (w[1]). */
static void weight_bytes(cg *c, LLVMValueRef blk, int64_t off, bool q8, LLVMValueRef w[2]) {
    LLVMValueRef v = LLVMBuildLoad2(
        c->b, c->vi, cg_gep(c, LLVMInt8TypeInContext(c->llctx), blk, cg_i64(c, off)), "");
    LLVMSetAlignment(v, 4);
    if (q8) {
        w[0] = v;
        return;
    }
    LLVMValueRef lo4 = cg_splat(c, LLVMConstInt(c->i32, 0x0f0f0f0f, false));
    w[0] = LLVMBuildAnd(c->b, v, lo4, "");
    w[1] = LLVMBuildAnd(
        c->b, LLVMBuildLShr(c->b, v, cg_splat(c, LLVMConstInt(c->i32, 4, false)), ""), lo4, "");
}

/* smmla: acc + the 2 x 2 int32 sums of x's rows (2 x 8 signed bytes) by
 * w's columns (8 x 2 signed bytes): lanes [r c, r c+1, r+1 c, r+1 c+1]
 * (Arm's A64 reference, SMMLA). */
static LLVMValueRef smmla(cg *c, LLVMValueRef acc, LLVMValueRef x, LLVMValueRef w) {
    return neon_bytes(c, "llvm.aarch64.neon.smmla", acc, x, w);
}

/* The words f, f + 1 of rows 2i and 2i + 1 (i of the R rows) of block bb:
 * [2i: f, f + 1][2i + 1: f, f + 1]; a missing partner's words 0. */
static LLVMValueRef qx_pair(cg *c, LLVMValueRef xq, int64_t xs, LLVMValueRef bb, int f, int i,
                            int R) {
    bool two = 2 * i + 1 < R;
    LLVMTypeRef ty = LLVMVectorType(c->i32, two ? 4 : 2);
    LLVMValueRef v = LLVMBuildLoad2(c->b, ty, qx_word(c, xq, xs, bb, f, cg_i64(c, 2 * i)), "");
    LLVMSetAlignment(v, 4);
    static const int lo[4] = {0, 1, 2, 3};
    return two ? v : cg_shuffle2(c, v, LLVMConstNull(ty), lo, 4);
}

/* cg_int8_sums by smmla: the sums as row pairs' 2 x 2 blocks
 * (cg_mmla_blocks), q8_0's weights as their signed q (no offset to take
 * back), q4_0's nibbles (0..15, signed bytes alike) less 8 sum q as
 * before. The same int32 sums, scaled and summed in f32 as the other
 * targets do, lane by lane: the same bits. */
static void mmla_int8_sums(cg *c, int64_t nr, int R, int npan, const LLVMValueRef *w0, int64_t pbb,
                           bool q8, LLVMValueRef nblk, LLVMValueRef xq, int64_t xs,
                           const LLVMValueRef *init, LLVMValueRef *next) {
    int L = c->target.lanes, P = (R + 1) / 2, na = 4 * P * npan;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    ATTNC_ASSERT(nr == 8 && L == 4 && na <= 64);
    LLVMValueRef start[64], s[64], f[64], dx[14];
    for (int pp = 0; pp < npan; pp++)
        cg_mmla_blocks(c, R, init + pp * 2 * R, start + pp * 4 * P, false);
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "kblock32", c->vf, na);
    LLVMValueRef blk[2], dw[2][2];
    for (int pp = 0; pp < npan; pp++) {
        blk[pp] = cg_gep(c, i8, w0[pp], LLVMBuildMul(c->b, l.i, cg_i64(c, pbb), ""));
        for (int j = 0; j < 2; j++)
            dw[pp][j] = cg_vload(c, ATTN_DTYPE_F16, cg_gep(c, i8, blk[pp], cg_i64(c, 2 * j * L)));
    }
    static const int rows_d[4] = {0, 0, 2, 2}, rows_corr[4] = {1, 1, 3, 3};
    for (int i = 0; i < P; i++) { /* [d, corr] of rows 2i, 2i + 1 */
        LLVMValueRef dc = qx_pair(c, xq, xs, l.i, 8, i, R);
        dx[i] = LLVMBuildBitCast(c->b, cg_shuffle2(c, dc, NULL, rows_d, 4), c->vf, "");
        LLVMValueRef corr = q8 ? LLVMConstNull(c->vi) : cg_shuffle2(c, dc, NULL, rows_corr, 4);
        for (int pp = 0; pp < npan; pp++)
            for (int q = 0; q < 4; q++)
                s[pp * 4 * P + 4 * i + q] = corr;
    }
    for (int g = 0; g < (q8 ? 4 : 2); g++) { /* groups of 8 k (q4_0: of 16) */
        LLVMValueRef w[2][4][2];             /* [panel][column pair][q4_0: low, high nibbles] */
        for (int pp = 0; pp < npan; pp++)
            for (int q = 0; q < 4; q++)
                weight_bytes(c, blk[pp], 2 * nr + g * nr * 8 + 16 * q, q8, w[pp][q]);
        for (int h = 0; h < (q8 ? 1 : 2); h++) /* x's 8 k: group g, or 2g + h */
            for (int i = 0; i < P; i++) {
                LLVMValueRef xw = qx_pair(c, xq, xs, l.i, 2 * (q8 ? g : 2 * g + h), i, R);
                for (int pp = 0; pp < npan; pp++)
                    for (int q = 0; q < 4; q++) {
                        LLVMValueRef *a = &s[pp * 4 * P + 4 * i + q];
                        *a = smmla(c, *a, xw, w[pp][q][h]);
                    }
            }
    }
    for (int pp = 0; pp < npan; pp++)
        for (int q = 0; q < 4; q++) { /* columns 2q, 2q + 1: lanes of vector q / 2 */
            int h = 2 * (q % 2), cols[4] = {h, h + 1, h, h + 1};
            LLVMValueRef dwq = cg_shuffle2(c, dw[pp][q / 2], NULL, cols, 4);
            for (int i = 0; i < P; i++) {
                int a = pp * 4 * P + 4 * i + q;
                LLVMValueRef exact = LLVMBuildSIToFP(c->b, s[a], c->vf, "");
                f[a] = cg_fma(c, exact, LLVMBuildFMul(c->b, dwq, dx[i], ""), l.acc[a]);
            }
        }
    cg_acc_loop_end(c, &l, nblk, start, f);
    for (int pp = 0; pp < npan; pp++)
        cg_mmla_blocks(c, R, f + pp * 4 * P, next + pp * 2 * R, true);
}

void cg_int8_sums(cg *c, int64_t nr, int R, int npan, const LLVMValueRef *w0, int64_t pbb, bool q8,
                  LLVMValueRef nblk, LLVMValueRef xq, int64_t xs, const LLVMValueRef *init,
                  LLVMValueRef *next) {
    if (cg_int8_mmla(c)) {
        mmla_int8_sums(c, nr, R, npan, w0, pbb, q8, nblk, xq, xs, init, next);
        return;
    }
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
    for (int g = 0; g < (q8 ? 8 : 4); g++) {
        LLVMValueRef w[2][2][2]; /* [panel][vector][q4_0: low, high nibbles] */
        for (int pp = 0; pp < npan; pp++)
            for (int j = 0; j < 2; j++)
                weight_bytes(c, blk[pp], 2 * nr + (g * nr + j * L) * 4, q8, w[pp][j]);
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

/* ggml's q4_0 element e of the block at sb: e < 16 the low nibble of
 * byte e, else the high nibble of byte e - 16 (0..15). */
static LLVMValueRef q4_nibble(cg *c, LLVMValueRef sb, int e) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    LLVMValueRef b = LLVMBuildLoad2(c->b, i8, cg_gep(c, i8, sb, cg_i64(c, 2 + e % 16)), "");
    return e < 16 ? LLVMBuildAnd(c->b, b, LLVMConstInt(i8, 15, false), "")
                  : LLVMBuildLShr(c->b, b, LLVMConstInt(i8, 4, false), "");
}

void cg_pack_int8_block(cg *c, bool q8, int64_t nr, LLVMValueRef sb, LLVMValueRef dq,
                        LLVMValueRef ll, LLVMValueRef inside) {
    /* a column's n bytes a group, [group][nr][n]: n = 4 for vpdpbusd and
     * usdot, 8 for smmla (whose q8_0 bytes are q as they are) */
    bool mm = cg_int8_mmla(c);
    int n = mm ? 8 : 4;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    for (int g = 0; g < (q8 ? 32 : 16) / n; g++)
        for (int j = 0; j < n; j++) {
            LLVMValueRef v;
            if (q8) {
                v = LLVMBuildLoad2(c->b, i8, cg_gep(c, i8, sb, cg_i64(c, 2 + n * g + j)), "");
                if (!mm) /* q + 128 as an unsigned byte: its top bit flipped */
                    v = LLVMBuildXor(c->b, v, LLVMConstInt(i8, 0x80, false), "");
            } else { /* k = 2ng + j in the low nibble, 2ng + n + j in the high one */
                LLVMValueRef lo = q4_nibble(c, sb, 2 * n * g + j),
                             hi = q4_nibble(c, sb, 2 * n * g + n + j);
                v = LLVMBuildOr(c->b, lo, LLVMBuildShl(c->b, hi, LLVMConstInt(i8, 4, false), ""),
                                "");
            }
            /* past N: the weight of q = 0 (its d is 0 too) */
            v = LLVMBuildSelect(c->b, inside, v,
                                LLVMConstInt(i8, q8 ? (mm ? 0 : 0x80) : 0x88, false), "");
            LLVMValueRef at = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, ll, cg_i64(c, n), ""),
                                           cg_i64(c, (int64_t)g * nr * n + j), "");
            LLVMBuildStore(c->b, v, cg_gep(c, i8, dq, at));
        }
}
