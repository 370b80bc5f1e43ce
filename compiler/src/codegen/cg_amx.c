/* cg_amx.c: AMX tiles of bf16 products, 16 rows of 64 bytes each: the
 * llvm.x86.*.internal intrinsics (LLVM's tile configuration passes place
 * ldtilecfg), or, where target.amx_emulated ($ATTNC_AMX_EMULATE on a CPU
 * with AVX512-BF16 and no AMX: docs/cli.md), the same operations on
 * copies of the tiles in stack slots, the products through vdpbf16ps:
 * the kernels' tile paths (packing, tile strides, epilogues) then run and
 * are tested on any AVX512-BF16 machine. */
#include "cg_build.h"

#include <string.h>

enum { TILE_ROWS = 16, TILE_BYTES = 64, TILE_WORDS = TILE_ROWS * TILE_BYTES / 4 };

/* One AMX intrinsic (llvm.x86.*.internal: shapes in bytes, i16). */
static LLVMValueRef amx_call(cg *c, const char *name, LLVMValueRef *args, unsigned n) {
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    ATTNC_ASSERT(id != 0);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, NULL, 0);
    return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, NULL, 0), fn, args, n, "");
}

static LLVMValueRef i16c(cg *c, int v) {
    return LLVMConstInt(LLVMInt16TypeInContext(c->llctx), (unsigned long long)v, false);
}

/* An emulated tile: 16 rows of 16 i32 words on the stack. */
static LLVMValueRef emu_tile(cg *c) {
    LLVMValueRef s = cg_slot(c, LLVMArrayType2(c->i32, TILE_WORDS), NULL);
    LLVMSetAlignment(s, 64);
    return s;
}

/* Row r (i64) of an emulated tile, as <16 x i32> or <16 x f32> (ty). */
static LLVMValueRef emu_row_ptr(cg *c, LLVMValueRef t, LLVMValueRef r) {
    return cg_gep(c, c->i32, t, LLVMBuildMul(c->b, r, cg_i64(c, TILE_BYTES / 4), ""));
}

static LLVMTypeRef row_type(LLVMTypeRef elem) {
    return LLVMVectorType(elem, TILE_BYTES / 4);
}

/* The emulated copy and product are functions of the module, built once
 * there and called (not inlined): written out at every tile operation
 * (and with cg_tile_zero's store split into 256 stores) they made the
 * seed shape's emulated flash kernel 178 KB and 2.15 s to compile; so,
 * 71 KB and 0.49 s, which the tests compiling it pay. The function `name`
 * with n (at most 4) parameters of the types ty, its body built by
 * body(c, params) on a builder of its own; c is as it was after. */
static LLVMValueRef emu_fn(cg *c, const char *name, LLVMTypeRef *ty, int n,
                           void (*body)(cg *, LLVMValueRef *)) {
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (fn)
        return fn;
    fn = LLVMAddFunction(c->mod, name,
                         LLVMFunctionType(LLVMVoidTypeInContext(c->llctx), ty, (unsigned)n, false));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    unsigned kind = LLVMGetEnumAttributeKindForName("noinline", 8);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(c->llctx, kind, 0));
    cg saved = *c;
    c->b = LLVMCreateBuilderInContext(c->llctx);
    c->fn = fn;
    LLVMPositionBuilderAtEnd(c->b, LLVMAppendBasicBlockInContext(c->llctx, fn, "entry"));
    LLVMValueRef params[4];
    ATTNC_ASSERT(n <= 4);
    for (int i = 0; i < n; i++)
        params[i] = LLVMGetParam(fn, (unsigned)i);
    body(c, params);
    LLVMBuildRetVoid(c->b);
    LLVMDisposeBuilder(c->b);
    *c = saved;
    return fn;
}

static void emu_call(cg *c, LLVMValueRef fn, LLVMValueRef *args, int n) {
    LLVMBuildCall2(c->b, LLVMGlobalGetValueType(fn), fn, args, (unsigned)n, "");
}

/* copy(p, stride, q, qstride): 16 rows of 64 bytes from p (rows stride
 * bytes apart) to q (rows qstride bytes apart). */
static void copy_body(cg *c, LLVMValueRef *a) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx), rt = row_type(c->i32);
    cg_loop l = cg_for(c, cg_i64(c, 0), cg_i64(c, TILE_ROWS), "tile_row");
    LLVMValueRef v =
        LLVMBuildLoad2(c->b, rt, cg_gep(c, i8, a[0], LLVMBuildMul(c->b, l.i, a[1], "")), "");
    LLVMSetAlignment(v, 4);
    LLVMValueRef s =
        LLVMBuildStore(c->b, v, cg_gep(c, i8, a[2], LLVMBuildMul(c->b, l.i, a[3], "")));
    LLVMSetAlignment(s, 4);
    cg_for_end(c, &l);
}

static void copy_rows(cg *c, LLVMValueRef p, LLVMValueRef stride, LLVMValueRef q,
                      LLVMValueRef qstride) {
    LLVMTypeRef ty[4] = {c->ptr, c->i64, c->ptr, c->i64};
    LLVMValueRef args[4] = {p, stride, q, qstride};
    emu_call(c, emu_fn(c, "attnc_emu_tile_copy", ty, 4, copy_body), args, 4);
}

/* dp(acc, a, b): row m of acc += the pairs a[m][j] times row j of b,
 * j < 16 (tdpbf16ps) */
static void dp_body(cg *c, LLVMValueRef *t) {
    LLVMTypeRef ft = row_type(c->f32), it = row_type(c->i32);
    cg_loop l = cg_for(c, cg_i64(c, 0), cg_i64(c, TILE_ROWS), "tile_dp");
    LLVMValueRef cp = emu_row_ptr(c, t[0], l.i), ap = emu_row_ptr(c, t[1], l.i);
    LLVMValueRef sum = LLVMBuildLoad2(c->b, ft, cp, "");
    for (int j = 0; j < TILE_BYTES / 4; j++) {
        LLVMValueRef x = LLVMBuildLoad2(c->b, c->i32, cg_gep(c, c->i32, ap, cg_i64(c, j)), "");
        LLVMValueRef w = LLVMBuildLoad2(c->b, it, emu_row_ptr(c, t[2], cg_i64(c, j)), "");
        sum = cg_dot_pairs(c, sum, cg_splat(c, x), w);
    }
    LLVMBuildStore(c->b, sum, cp);
    cg_for_end(c, &l);
}

LLVMTypeRef cg_tile_type(cg *c) {
    return c->target.amx_emulated ? c->ptr : LLVMX86AMXTypeInContext(c->llctx);
}

LLVMValueRef cg_tile_zero(cg *c) {
    if (!c->target.amx_emulated) {
        LLVMValueRef z[2] = {i16c(c, TILE_ROWS), i16c(c, TILE_BYTES)};
        return amx_call(c, "llvm.x86.tilezero.internal", z, 2);
    }
    /* a memset: a store of the zero array became 256 stores of an i32 */
    LLVMValueRef t = emu_tile(c);
    LLVMBuildMemSet(c->b, t, LLVMConstInt(LLVMInt8TypeInContext(c->llctx), 0, false),
                    cg_i64(c, TILE_WORDS * 4), 64);
    return t;
}

LLVMValueRef cg_tile_load(cg *c, LLVMValueRef p, LLVMValueRef stride) {
    if (!c->target.amx_emulated) {
        LLVMValueRef a[4] = {i16c(c, TILE_ROWS), i16c(c, TILE_BYTES), p, stride};
        return amx_call(c, "llvm.x86.tileloadd64.internal", a, 4);
    }
    LLVMValueRef t = emu_tile(c);
    copy_rows(c, p, stride, t, cg_i64(c, TILE_BYTES));
    return t;
}

void cg_tile_store(cg *c, LLVMValueRef p, LLVMValueRef stride, LLVMValueRef t) {
    if (!c->target.amx_emulated) {
        LLVMValueRef a[5] = {i16c(c, TILE_ROWS), i16c(c, TILE_BYTES), p, stride, t};
        amx_call(c, "llvm.x86.tilestored64.internal", a, 5);
        return;
    }
    copy_rows(c, t, cg_i64(c, TILE_BYTES), p, stride);
}

LLVMValueRef cg_tile_dp_bf16(cg *c, LLVMValueRef acc, LLVMValueRef a, LLVMValueRef b) {
    if (!c->target.amx_emulated) {
        LLVMValueRef d[6] = {
            i16c(c, TILE_ROWS), i16c(c, TILE_BYTES), i16c(c, TILE_BYTES), acc, a, b};
        return amx_call(c, "llvm.x86.tdpbf16ps.internal", d, 6);
    }
    ATTNC_ASSERT(c->target.bf16_dot && c->target.lanes == TILE_BYTES / 4);
    LLVMTypeRef ty[3] = {c->ptr, c->ptr, c->ptr};
    LLVMValueRef args[3] = {acc, a, b};
    emu_call(c, emu_fn(c, "attnc_emu_tile_dp_bf16", ty, 3, dp_body), args, 3);
    return acc;
}
