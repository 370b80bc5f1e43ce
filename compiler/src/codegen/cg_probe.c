/* cg_probe.c: the two functions `attnc roofline` times to measure this
 * machine's limits with code compiled like the kernels:
 *   void attnc_probe_fma(float *io, int64_t iters)
 *     iters rounds of acc = acc * x + y on `accs` independent vectors held
 *     in registers (x = io[0], y = io[1], loaded so nothing folds; their
 *     sum goes back to io[0..lanes));
 *   float attnc_probe_read(const float *p, int64_t n)
 *     the sum of p[0..n), n a multiple of 4 * lanes, streamed as vectors
 *     into four sums;
 *   void attnc_probe_bf16(float *io, int64_t iters) (AVX512-BF16 only)
 *     iters rounds of acc += x . y over pairs of bf16 (vdpbf16ps, 4 FLOPs
 *     a lane) on `accs` vectors, x and y pairs of io[0] as bf16;
 *   void attnc_probe_int8(float *io, int64_t iters) (VNNI only)
 *     iters rounds of vpdpbusd (four int8 multiply-adds a lane, 8
 *     operations) on `accs` vectors of i32 sums, bytes of io[0]; the sum's
 *     bits go back to io;
 *   void attnc_probe_amx(float *io, int64_t iters) (AMX only)
 *     iters rounds of tdpbf16ps into four 16 x 16 f32 tiles (16 x 32 bf16
 *     times 32 x 16: 16384 FLOPs each), from zero tiles; io[0] gets an
 *     element of the sum. */
#include <stdio.h>
#include <string.h>

#include "codegen/cg_build.h"

static LLVMValueRef splat(LLVMBuilderRef b, LLVMTypeRef vt, LLVMValueRef s, LLVMTypeRef i32) {
    LLVMValueRef v =
        LLVMBuildInsertElement(b, LLVMGetPoison(vt), s, LLVMConstInt(i32, 0, false), "");
    return LLVMBuildShuffleVector(b, v, LLVMGetPoison(vt),
                                  LLVMConstNull(LLVMVectorType(i32, LLVMGetVectorSize(vt))), "");
}

static LLVMValueRef hsum(LLVMBuilderRef b, LLVMValueRef v, LLVMTypeRef i32) {
    LLVMValueRef s = NULL;
    for (unsigned i = 0; i < LLVMGetVectorSize(LLVMTypeOf(v)); i++) {
        LLVMValueRef e = LLVMBuildExtractElement(b, v, LLVMConstInt(i32, i, false), "");
        s = s ? LLVMBuildFAdd(b, s, e, "") : e;
    }
    return s;
}

/* for (i = 0; i < n; i += step) with vector phis acc[0..k) starting at init. */
typedef struct vloop {
    LLVMBasicBlockRef pre, body, exit;
    LLVMValueRef i, acc[32];
} vloop;

static void vloop_begin(LLVMContextRef ctx, LLVMBuilderRef b, LLVMValueRef fn, vloop *l, int k,
                        LLVMTypeRef vt, LLVMTypeRef i64) {
    l->pre = LLVMGetInsertBlock(b);
    l->body = LLVMAppendBasicBlockInContext(ctx, fn, "body");
    l->exit = LLVMAppendBasicBlockInContext(ctx, fn, "exit");
    LLVMBuildBr(b, l->body);
    LLVMPositionBuilderAtEnd(b, l->body);
    l->i = LLVMBuildPhi(b, i64, "i");
    for (int j = 0; j < k; j++)
        l->acc[j] = LLVMBuildPhi(b, vt, "acc");
}

static void vloop_end(LLVMBuilderRef b, vloop *l, int k, LLVMValueRef *init, LLVMValueRef *next,
                      LLVMValueRef step, LLVMValueRef n) {
    LLVMValueRef i1 = LLVMBuildAdd(b, l->i, step, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, i1, n, ""), l->body, l->exit);
    LLVMValueRef zero = LLVMConstNull(LLVMTypeOf(step));
    LLVMAddIncoming(l->i, &zero, &l->pre, 1);
    LLVMAddIncoming(l->i, &i1, &l->body, 1);
    for (int j = 0; j < k; j++) {
        LLVMAddIncoming(l->acc[j], &init[j], &l->pre, 1);
        LLVMAddIncoming(l->acc[j], &next[j], &l->body, 1);
    }
    LLVMPositionBuilderAtEnd(b, l->exit);
}

/* The body of a peak probe fn(io, iters): iters rounds of acc =
 * op(acc, x, y) on accs vectors of type vt in registers, then their sum
 * to io and return. */
static void rounds(LLVMContextRef ctx, LLVMBuilderRef b, LLVMValueRef fn, LLVMTypeRef vt, int accs,
                   LLVMTypeRef op_ty, LLVMValueRef op, LLVMValueRef x, LLVMValueRef y) {
    LLVMTypeRef i32 = LLVMInt32TypeInContext(ctx), i64 = LLVMInt64TypeInContext(ctx);
    LLVMValueRef init[32], next[32];
    LLVMTypeRef et = LLVMGetElementType(vt);
    bool ints = LLVMGetTypeKind(et) == LLVMIntegerTypeKind; /* int8's i32 sums */
    for (int j = 0; j < accs; j++)
        init[j] = splat(b, vt,
                        ints ? LLVMConstInt(et, (unsigned long long)j, false)
                             : LLVMConstReal(et, 1.0 + j * 1e-3),
                        i32);
    vloop l;
    vloop_begin(ctx, b, fn, &l, accs, vt, i64);
    for (int j = 0; j < accs; j++) {
        LLVMValueRef a[3] = {l.acc[j], x, y};
        next[j] = LLVMBuildCall2(b, op_ty, op, a, 3, "");
    }
    vloop_end(b, &l, accs, init, next, LLVMConstInt(i64, 1, false), LLVMGetParam(fn, 1));
    LLVMValueRef sum = next[0];
    for (int j = 1; j < accs; j++)
        sum = ints ? LLVMBuildAdd(b, sum, next[j], "") : LLVMBuildFAdd(b, sum, next[j], "");
    LLVMSetAlignment(LLVMBuildStore(b, sum, LLVMGetParam(fn, 0)), 4);
    LLVMBuildRetVoid(b);
}

/* A probe fn(io, iters) named name, the builder at its entry, and the
 * intrinsic intr (not overloaded) it repeats. */
static LLVMValueRef probe_begin(LLVMContextRef ctx, LLVMModuleRef mod, LLVMBuilderRef b,
                                const char *name, const char *intr, LLVMValueRef *dp,
                                LLVMTypeRef *dp_ty) {
    unsigned id = LLVMLookupIntrinsicID(intr, strlen(intr));
    *dp = LLVMGetIntrinsicDeclaration(mod, id, NULL, 0);
    *dp_ty = LLVMIntrinsicGetType(ctx, id, NULL, 0);
    LLVMTypeRef params[2] = {LLVMPointerTypeInContext(ctx, 0), LLVMInt64TypeInContext(ctx)};
    LLVMValueRef fn =
        LLVMAddFunction(mod, name, LLVMFunctionType(LLVMVoidTypeInContext(ctx), params, 2, false));
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, fn, "entry"));
    return fn;
}

/* attnc_probe_bf16: the fma probe's loop of vdpbf16ps. */
static void bf16_probe(LLVMContextRef ctx, LLVMModuleRef mod, LLVMBuilderRef b, const cg_target *t,
                       int64_t *flops_per_iter) {
    LLVMTypeRef f32 = LLVMFloatTypeInContext(ctx), i32 = LLVMInt32TypeInContext(ctx);
    LLVMTypeRef vt = LLVMVectorType(f32, (unsigned)t->lanes);
    LLVMTypeRef vi = LLVMVectorType(i32, (unsigned)t->lanes);
    LLVMTypeRef bv = LLVMVectorType(LLVMBFloatTypeInContext(ctx), 2 * (unsigned)t->lanes);
    LLVMValueRef dp;
    LLVMTypeRef dp_ty;
    int accs = t->probe_accs;
    LLVMValueRef fn = probe_begin(ctx, mod, b, "attnc_probe_bf16",
                                  "llvm.x86.avx512bf16.dpbf16ps.512", &dp, &dp_ty);
    LLVMValueRef io = LLVMGetParam(fn, 0);
    /* the pair (x, x) of io[0]'s high half: its bits as an i32 */
    LLVMValueRef w =
        LLVMBuildAnd(b, LLVMBuildLoad2(b, i32, io, ""), LLVMConstInt(i32, 0xffff0000u, false), "");
    w = LLVMBuildOr(b, w, LLVMBuildLShr(b, w, LLVMConstInt(i32, 16, false), ""), "");
    LLVMValueRef x = LLVMBuildBitCast(b, splat(b, vi, w, i32), bv, "x");
    rounds(ctx, b, fn, vt, accs, dp_ty, dp, x, x);
    *flops_per_iter = 4LL * accs * t->lanes;
}

/* attnc_probe_int8: the fma probe's loop of vpdpbusd on i32 lanes (four
 * u8 x s8 multiply-adds each), bytes of io[0]'s bits. */
static void int8_probe(LLVMContextRef ctx, LLVMModuleRef mod, LLVMBuilderRef b, const cg_target *t,
                       int64_t *ops_per_iter) {
    LLVMTypeRef i32 = LLVMInt32TypeInContext(ctx);
    LLVMTypeRef vi = LLVMVectorType(i32, (unsigned)t->lanes);
    char name[48];
    snprintf(name, sizeof name, "llvm.x86.avx512.vpdpbusd.%d", 32 * t->lanes);
    LLVMValueRef dp;
    LLVMTypeRef dp_ty;
    int accs = t->probe_accs;
    LLVMValueRef fn = probe_begin(ctx, mod, b, "attnc_probe_int8", name, &dp, &dp_ty);
    LLVMValueRef x = splat(b, vi, LLVMBuildLoad2(b, i32, LLVMGetParam(fn, 0), ""), i32);
    rounds(ctx, b, fn, vi, accs, dp_ty, dp, x, x);
    *ops_per_iter = 8LL * accs * t->lanes;
}

/* attnc_probe_amx: four tile accumulators, A and B loaded once. */
static void amx_probe(LLVMContextRef ctx, LLVMModuleRef mod, LLVMBuilderRef b,
                      int64_t *flops_per_iter) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(ctx), i16 = LLVMInt16TypeInContext(ctx);
    LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx), ptr = LLVMPointerTypeInContext(ctx, 0);
    LLVMTypeRef f32 = LLVMFloatTypeInContext(ctx), amx = LLVMX86AMXTypeInContext(ctx);
    LLVMTypeRef params[2] = {ptr, i64};
    LLVMValueRef fn = LLVMAddFunction(
        mod, "attnc_probe_amx", LLVMFunctionType(LLVMVoidTypeInContext(ctx), params, 2, false));
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, fn, "entry"));
    LLVMTypeRef buf_ty = LLVMArrayType2(i8, 2048);
    LLVMValueRef buf = LLVMBuildAlloca(b, buf_ty, "tiles");
    LLVMSetAlignment(buf, 64);
    LLVMBuildStore(b, LLVMConstNull(buf_ty), buf);
    LLVMValueRef r16 = LLVMConstInt(i16, 16, false), b64 = LLVMConstInt(i16, 64, false);
    LLVMValueRef stride = LLVMConstInt(i64, 64, false);
    const char *names[4] = {"llvm.x86.tilezero.internal", "llvm.x86.tileloadd64.internal",
                            "llvm.x86.tdpbf16ps.internal", "llvm.x86.tilestored64.internal"};
    LLVMValueRef f[4];
    LLVMTypeRef ft[4];
    for (int i = 0; i < 4; i++) {
        unsigned id = LLVMLookupIntrinsicID(names[i], strlen(names[i]));
        f[i] = LLVMGetIntrinsicDeclaration(mod, id, NULL, 0);
        ft[i] = LLVMIntrinsicGetType(ctx, id, NULL, 0);
    }
    LLVMValueRef la[4] = {r16, b64, buf, stride};
    LLVMValueRef A = LLVMBuildCall2(b, ft[1], f[1], la, 4, "a");
    LLVMValueRef B = LLVMBuildCall2(b, ft[1], f[1], la, 4, "b");
    LLVMValueRef init[4], next[4], z[2] = {r16, b64};
    for (int j = 0; j < 4; j++)
        init[j] = LLVMBuildCall2(b, ft[0], f[0], z, 2, "");
    vloop l;
    vloop_begin(ctx, b, fn, &l, 4, amx, i64);
    for (int j = 0; j < 4; j++) {
        LLVMValueRef a[6] = {r16, b64, b64, l.acc[j], A, B};
        next[j] = LLVMBuildCall2(b, ft[2], f[2], a, 6, "");
    }
    vloop_end(b, &l, 4, init, next, LLVMConstInt(i64, 1, false), LLVMGetParam(fn, 1));
    for (int j = 0; j < 4; j++) { /* each tile to the buffer, the first element out */
        LLVMValueRef st[5] = {r16, b64, buf, stride, next[j]};
        LLVMBuildCall2(b, ft[3], f[3], st, 5, "");
        LLVMValueRef e = LLVMBuildLoad2(b, f32, buf, "");
        LLVMValueRef at = LLVMConstInt(i64, (unsigned long long)j, false);
        LLVMSetAlignment(
            LLVMBuildStore(b, e, LLVMBuildInBoundsGEP2(b, f32, LLVMGetParam(fn, 0), &at, 1, "")),
            4);
    }
    LLVMBuildRetVoid(b);
    *flops_per_iter = 4LL * 16 * 16 * 32 * 2;
}

LLVMModuleRef cg_probe_build(LLVMContextRef ctx, const cg_target *t, cg_probe_work *work) {
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("attnc.probe", ctx);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
    LLVMTypeRef f32 = LLVMFloatTypeInContext(ctx), i32 = LLVMInt32TypeInContext(ctx);
    LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx), ptr = LLVMPointerTypeInContext(ctx, 0);
    LLVMTypeRef vt = LLVMVectorType(f32, (unsigned)t->lanes);
    unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", 12);
    LLVMValueRef fma = LLVMGetIntrinsicDeclaration(mod, id, &vt, 1);
    LLVMTypeRef fma_ty = LLVMIntrinsicGetType(ctx, id, &vt, 1);

    /* fma: registers minus the two operands and some slack */
    int accs = t->probe_accs;
    LLVMTypeRef params[2] = {ptr, i64};
    LLVMValueRef fn = LLVMAddFunction(
        mod, "attnc_probe_fma", LLVMFunctionType(LLVMVoidTypeInContext(ctx), params, 2, false));
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, fn, "entry"));
    LLVMValueRef io = LLVMGetParam(fn, 0);
    LLVMValueRef one = LLVMConstInt(i64, 1, false);
    LLVMValueRef x = splat(b, vt, LLVMBuildLoad2(b, f32, io, "x"), i32);
    LLVMValueRef y = splat(
        b, vt, LLVMBuildLoad2(b, f32, LLVMBuildInBoundsGEP2(b, f32, io, &one, 1, ""), "y"), i32);
    rounds(ctx, b, fn, vt, accs, fma_ty, fma, x, y);
    work->fma = 2LL * accs * t->lanes;

    LLVMTypeRef rparams[2] = {ptr, i64};
    fn = LLVMAddFunction(mod, "attnc_probe_read", LLVMFunctionType(f32, rparams, 2, false));
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, fn, "entry"));
    LLVMValueRef p = LLVMGetParam(fn, 0), n = LLVMGetParam(fn, 1), init[4], next[4];
    for (int j = 0; j < 4; j++)
        init[j] = LLVMConstNull(vt);
    vloop l;
    vloop_begin(ctx, b, fn, &l, 4, vt, i64);
    for (int j = 0; j < 4; j++) {
        LLVMValueRef at =
            LLVMBuildAdd(b, l.i, LLVMConstInt(i64, (unsigned long long)(j * t->lanes), false), "");
        LLVMValueRef v = LLVMBuildLoad2(b, vt, LLVMBuildInBoundsGEP2(b, f32, p, &at, 1, ""), "");
        LLVMSetAlignment(v, 4);
        next[j] = LLVMBuildFAdd(b, l.acc[j], v, "");
    }
    vloop_end(b, &l, 4, init, next, LLVMConstInt(i64, (unsigned long long)(4 * t->lanes), false),
              n);
    LLVMBuildRet(b, hsum(b,
                         LLVMBuildFAdd(b, LLVMBuildFAdd(b, next[0], next[1], ""),
                                       LLVMBuildFAdd(b, next[2], next[3], ""), ""),
                         i32));
    work->bf16 = work->amx = work->int8 = 0;
    if (t->bf16_dot)
        bf16_probe(ctx, mod, b, t, &work->bf16);
    if (t->amx && !t->amx_emulated)
        amx_probe(ctx, mod, b, &work->amx);
    if (t->vnni)
        int8_probe(ctx, mod, b, t, &work->int8);
    LLVMDisposeBuilder(b);
    return mod;
}
