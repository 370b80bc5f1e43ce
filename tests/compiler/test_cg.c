/* test_cg.c: codegen helpers checked one by one in generated code: the exp,
 * tanh and log polynomials against libm over their whole range (this measures
 * the max error the docs state), and f16/bf16 stores and loads against the
 * runtime's conversions, ties and NaN included; the interval bounds of
 * mask expressions against every point of random boxes. Probe kernels are built
 * with the same helpers the kernel families use, optimized and JIT-run. */
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_build.h"
#include "emit/emit.h"
#include "rt.h"
#include "support.h"

enum {
    PROBE_EXP,
    PROBE_EXP_NONPOS,
    PROBE_TANH,
    PROBE_LOG,
    PROBE_F16,
    PROBE_BF16,
    PROBE_BF16_WORDS,
    PROBE_COUNT
};
static const char *const probe_names[PROBE_COUNT] = {
    "probe_exp", "probe_exp_nonpos", "probe_tanh",      "probe_log",
    "probe_f16", "probe_bf16",       "probe_bf16_words"};

typedef struct probes {
    LLVMOrcLLJITRef jit;
    attn_kernel_fn fn[PROBE_COUNT];
} probes;

/* cg_bf16_words of in's 32 floats from i * 32, for i < n_tokens / 32,
 * into buf[2] (vectors of 16 lanes; vcvtne2ps2bf16 where the host has
 * AVX512-BF16, the integer steps elsewhere). */
static void build_words_probe(cg *c) {
    cg_target keep = c->target;
    uint32_t f = attn_cpu_features();
    c->target.lanes = 16;
    c->target.bf16_dot = (f & ATTN_CPU_AVX512F) && (f & ATTN_CPU_AVX512BF16);
    c->vf = LLVMVectorType(c->f32, 16);
    c->vi = LLVMVectorType(c->i32, 16);
    cg_kernel_begin(c, probe_names[PROBE_BF16_WORDS]);
    cg_loop l = cg_for(c, cg_i64(c, 0), LLVMBuildSDiv(c->b, c->S, cg_i64(c, 32), ""), "i");
    LLVMValueRef at = LLVMBuildMul(c->b, l.i, cg_i64(c, 32), "");
    LLVMValueRef lo = cg_vload(c, ATTN_DTYPE_F32, cg_buf_elem(c, 0, ATTN_DTYPE_F32, at));
    LLVMValueRef hi =
        cg_vload(c, ATTN_DTYPE_F32,
                 cg_buf_elem(c, 0, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, at, cg_i64(c, 16), "")));
    LLVMValueRef st =
        LLVMBuildStore(c->b, cg_bf16_words(c, lo, hi), cg_buf_elem(c, 2, ATTN_DTYPE_BF16, at));
    LLVMSetAlignment(st, 2);
    cg_for_end(c, &l);
    cg_kernel_end(c);
    c->target = keep;
}

/* out[i] = f(in[i]) for i < n_tokens: buf[0] in, buf[1] out, buf[2] a
 * 16-bit scratch for the dtype round trips. */
static void build_probe(cg *c, int which) {
    if (which == PROBE_BF16_WORDS) {
        build_words_probe(c);
        return;
    }
    cg_kernel_begin(c, probe_names[which]);
    LLVMValueRef lo, hi;
    cg_share(c, c->S, &lo, &hi);
    cg_loop l = cg_for(c, lo, hi, "i");
    LLVMValueRef x = cg_load(c, ATTN_DTYPE_F32, cg_buf_elem(c, 0, ATTN_DTYPE_F32, l.i)), y;
    if (which == PROBE_EXP) {
        y = cg_exp(c, x);
    } else if (which == PROBE_EXP_NONPOS) {
        y = cg_exp_nonpos(c, x);
    } else if (which == PROBE_TANH) {
        y = cg_tanh(c, x);
    } else if (which == PROBE_LOG) {
        y = cg_log(c, x);
    } else {
        attn_dtype dt = which == PROBE_F16 ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16;
        LLVMValueRef p = cg_buf_elem(c, 2, dt, l.i);
        cg_store(c, dt, x, p);
        y = cg_load(c, dt, p);
    }
    cg_store(c, ATTN_DTYPE_F32, y, cg_buf_elem(c, 1, ATTN_DTYPE_F32, l.i));
    cg_for_end(c, &l);
    cg_kernel_end(c);
}

/* c's types, in a new context of tsc, for graph g. */
static void cg_init(cg *c, ir_graph *g, LLVMOrcThreadSafeContextRef tsc, const char *name) {
    *c = (cg){.g = g, .llctx = LLVMOrcThreadSafeContextGetContext(tsc), .n_buffers = 3};
    c->mod = LLVMModuleCreateWithNameInContext(name, c->llctx);
    c->b = LLVMCreateBuilderInContext(c->llctx);
    c->i16 = LLVMInt16TypeInContext(c->llctx);
    c->i32 = LLVMInt32TypeInContext(c->llctx);
    c->i64 = LLVMInt64TypeInContext(c->llctx);
    c->f16 = LLVMHalfTypeInContext(c->llctx);
    c->f32 = LLVMFloatTypeInContext(c->llctx);
    c->f64 = LLVMDoubleTypeInContext(c->llctx);
    c->ptr = LLVMPointerTypeInContext(c->llctx, 0);
    LLVMTypeRef params[3] = {c->ptr, c->i32, c->i32};
    c->kernel_ty = LLVMFunctionType(LLVMVoidTypeInContext(c->llctx), params, 3, false);
}

/* c's module optimized for the host and JIT-compiled (the builder and tsc
 * are disposed of); *addr[i] = the address of names[i]. */
static LLVMOrcLLJITRef jit_of(attnc_ctx *ctx, cg *c, LLVMOrcThreadSafeContextRef tsc,
                              const char *const *names, int n, LLVMOrcJITTargetAddress *addr) {
    LLVMDisposeBuilder(c->b);
    LLVMTargetMachineRef tm, jit_tm;
    assert_int_equal(emit_target_machine(ctx, NULL, &tm), ATTNC_OK);
    assert_int_equal(emit_optimize(ctx, c->mod, tm), ATTNC_OK);
    LLVMDisposeTargetMachine(tm);
    assert_int_equal(emit_target_machine(ctx, NULL, &jit_tm), ATTNC_OK);
    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
        jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jit_tm));
    LLVMOrcLLJITRef jit;
    assert_null(LLVMOrcCreateLLJIT(&jit, jb));
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(c->mod, tsc);
    LLVMOrcDisposeThreadSafeContext(tsc);
    assert_null(LLVMOrcLLJITAddLLVMIRModule(jit, LLVMOrcLLJITGetMainJITDylib(jit), tsm));
    for (int i = 0; i < n; i++)
        assert_null(LLVMOrcLLJITLookup(jit, &addr[i], names[i]));
    return jit;
}

static int setup(void **state) {
    probes *pr = calloc(1, sizeof *pr);
    attnc_ctx *ctx = attnc_ctx_new();
    ir_graph g = {.ctx = ctx};
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    cg c;
    cg_init(&c, &g, tsc, "probes");
    for (int i = 0; i < PROBE_COUNT; i++)
        build_probe(&c, i);
    LLVMOrcJITTargetAddress a[PROBE_COUNT];
    pr->jit = jit_of(ctx, &c, tsc, probe_names, PROBE_COUNT, a);
    for (int i = 0; i < PROBE_COUNT; i++)
        pr->fn[i] = (attn_kernel_fn)(uintptr_t)a[i];
    attnc_ctx_free(ctx);
    *state = pr;
    return 0;
}

static int teardown(void **state) {
    probes *pr = *state;
    LLVMConsumeError(LLVMOrcDisposeLLJIT(pr->jit));
    free(pr);
    return 0;
}

static void run_probe(const probes *pr, int which, const float *in, float *out, int64_t n) {
    uint16_t *tmp = calloc((size_t)n, sizeof *tmp);
    attn_kernel_args a = {.abi_version = ATTN_KERNELS_ABI, .n_tokens = n};
    a.buf[0] = (void *)in;
    a.buf[1] = out;
    a.buf[2] = tmp;
    pr->fn[which](&a, 0, 1);
    free(tmp);
}

static float *grid(float lo, float hi, int64_t n) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)i / (float)(n - 1);
    return x;
}

/* The largest relative error of an exp probe against libm over 2000001
 * points of [lo, hi]. */
static double exp_error(const probes *pr, int which, float lo, float hi) {
    const int64_t n = 2000001;
    float *x = grid(lo, hi, n), *y = malloc((size_t)n * sizeof *y);
    run_probe(pr, which, x, y, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = exp((double)x[i]);
        worst = fmax(worst, fabs((double)y[i] - want) / want);
    }
    print_message("%s: max relative error %.3g over [%g, %g]\n", probe_names[which], worst, lo, hi);
    free(x);
    free(y);
    return worst;
}

static void exp_polynomial_is_within_2e7_relative(void **state) {
    assert_true(exp_error(*state, PROBE_EXP, -87.0f, 88.5f) < 2e-7);
    float edge[6] = {-INFINITY, -1000.0f, -87.5f, 0.0f, 88.7f, NAN}, out[6];
    run_probe(*state, PROBE_EXP, edge, out, 6);
    assert_true(isnan(out[5])); /* NaN propagates as in the reference */
    float t_nan;
    run_probe(*state, PROBE_TANH, edge + 5, &t_nan, 1);
    assert_true(isnan(t_nan));
    assert_true(out[0] == 0 && out[1] == 0 && out[2] == 0); /* masked scores weigh nothing */
    assert_true(out[3] == 1.0f);
    print_message("exp(88.7f) = %a, libm %a\n", (double)out[4], exp((double)edge[4]));
    assert_true(isfinite(out[4]) && fabs(out[4] / exp((double)edge[4]) - 1) < 1e-6);
}

/* The softmax's exp (x <= 0, fewer operations): as accurate, the same
 * edges (a masked score weighs exactly 0, NaN propagates, 0 gives 1). */
static void exp_nonpos_is_within_2e7_relative(void **state) {
    assert_true(exp_error(*state, PROBE_EXP_NONPOS, -87.0f, 0.0f) < 2e-7);
    float edge[7] = {-INFINITY, -1000.0f, -87.5f, -87.33f, -0.0f, 0.0f, NAN}, out[7];
    run_probe(*state, PROBE_EXP_NONPOS, edge, out, 7);
    assert_true(out[0] == 0 && out[1] == 0 && out[2] == 0);
    assert_true(out[3] > 0 &&
                fabs(out[3] / exp((double)edge[3]) - 1) < 1e-6); /* near the smallest normal */
    assert_true(out[4] == 1.0f && out[5] == 1.0f);
    assert_true(isnan(out[6]));
}

static void tanh_is_within_2e7_absolute(void **state) {
    const int64_t n = 400001;
    float *x = grid(-20.0f, 20.0f, n), *y = malloc((size_t)n * sizeof *y);
    run_probe(*state, PROBE_TANH, x, y, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)y[i] - tanh((double)x[i])));
    print_message("tanh: max absolute error %.3g over [-20, 20]\n", worst);
    assert_true(worst < 2e-7);
    free(x);
    free(y);
}

/* score_mod's log: within 3e-7 of libm's, relative (absolute where |ln x|
 * < 1), from subnormals to the largest float; its edges as logf's. */
static void log_is_within_3e7(void **state) {
    const int64_t n = 1000001;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++) /* log-spaced over [1e-44, 3e38] */
        x[i] = (float)exp(-101.3 + (101.3 + 88.7) * (double)i / (double)(n - 1));
    run_probe(*state, PROBE_LOG, x, y, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = log((double)x[i]);
        worst = fmax(worst, fabs((double)y[i] - want) / fmax(1.0, fabs(want)));
    }
    print_message("log: max error %.3g over [1e-44, 3e38]\n", worst);
    assert_true(worst < 3e-7);
    float edge[6] = {0.0f, -0.0f, -1.0f, INFINITY, NAN, 1.0f}, out[6];
    run_probe(*state, PROBE_LOG, edge, out, 6);
    assert_true(out[0] == -INFINITY && out[1] == -INFINITY);
    assert_true(isnan(out[2]) && isnan(out[4]));
    assert_true(out[3] == INFINITY && out[5] == 0.0f);
    free(x);
    free(y);
}

static void stores_round_like_the_runtime(void **state) {
    const int64_t n = 1 << 20;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    uint64_t s = 5;
    for (int64_t i = 0; i < n; i++) {
        float f = (float)(rnd_unit(&s) * 70000.0);
        uint32_t u;
        memcpy(&u, &f, 4);
        if (i % 4 == 1) /* exact bf16 ties, both parities */
            u = (u & 0xffff0000u) | 0x8000u;
        if (i % 4 == 2) /* exact f16 ties */
            u = (u & 0xffffe000u) | 0x1000u;
        memcpy(&x[i], &u, 4);
    }
    x[0] = NAN;
    uint32_t low_nan = 0x7f800001u; /* payload below bf16's bits: must not become inf */
    memcpy(&x[5], &low_nan, 4);
    x[3] = INFINITY;
    x[7] = -0.0f;
    x[11] = 1e-6f; /* f16 subnormal */
    for (int which = PROBE_F16; which <= PROBE_BF16; which++) {
        run_probe(*state, which, x, y, n);
        attn_dtype dt = which == PROBE_F16 ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16;
        for (int64_t i = 0; i < n; i++) {
            float want = rt_round(dt, x[i]);
            if (isnan(want) ? !isnan(y[i]) : memcmp(&want, &y[i], 4) != 0)
                fail_msg("%s: %a stored as %a, runtime gives %a",
                         dt == ATTN_DTYPE_F16 ? "f16" : "bf16", (double)x[i], (double)y[i],
                         (double)want);
        }
    }
    free(x);
    free(y);
}

/* cg_bf16_words (the flash kernels' bf16 tiles) == the runtime's
 * rounding, bit for bit: vectors of normal values (vcvtne2ps2bf16 on an
 * AVX512-BF16 host), ties, NaN, infinities, and vectors holding a
 * subnormal (which that instruction would flush: the integer steps). */
static void bf16_words_round_like_the_runtime(void **state) {
    enum { N = 32 * 512 };
    float *x = malloc(N * sizeof *x);
    uint16_t *w = calloc(N, sizeof *w);
    uint64_t s = 11;
    for (int64_t i = 0; i < N; i++) {
        float f = (float)(rnd_unit(&s) * 3.0);
        uint32_t u;
        memcpy(&u, &f, 4);
        if (i % 5 == 1) /* exact ties, both parities */
            u = (u & 0xffff0000u) | 0x8000u;
        if (i / 32 % 4 == 3 && i % 32 == 7) /* a subnormal in every fourth vector pair */
            u = 0x00012345u | (uint32_t)(i % 2) << 31;
        memcpy(&x[i], &u, 4);
    }
    x[0] = NAN, x[33] = INFINITY, x[66] = -INFINITY, x[99] = -0.0f, x[130] = 3.3e38f;
    uint32_t low_nan = 0x7f800001u, sub_tie = 0x00018000u;
    memcpy(&x[3], &low_nan, 4);
    memcpy(&x[96 + 5], &sub_tie, 4);
    attn_kernel_args a = {.abi_version = ATTN_KERNELS_ABI, .n_tokens = N};
    a.buf[0] = x, a.buf[2] = w;
    ((probes *)*state)->fn[PROBE_BF16_WORDS](&a, 0, 1);
    for (int64_t i = 0; i < N; i++) {
        float want = rt_round(ATTN_DTYPE_BF16, x[i]), got;
        uint32_t u = (uint32_t)w[i] << 16;
        memcpy(&got, &u, 4);
        if (isnan(want) ? !isnan(got) : memcmp(&want, &got, 4) != 0)
            fail_msg("element %lld: %a rounded to %a, runtime gives %a", (long long)i, (double)x[i],
                     (double)got, (double)want);
    }
    free(x);
    free(w);
}

/* The masks bounded; exact: affine in q, kv and h, so that the bounds
 * are exactly what the box holds (the others' only have to hold it). */
static const struct {
    const char *src;
    bool exact;
} bound_cases[] = {
    {"q - kv < 4", true},
    {"kv < 4 or q - kv < 1024", false}, /* both read kv: an or is not exact */
    {"not (kv > q)", true},
    {"q // 64 == kv // 64", true},
    {"abs(q - kv) <= 16", true},
    {"where(h < 4, q - kv < 8, kv < 2)", true},
    {"min(q, 100) - kv >= 0", true},
    {"q * 2 - kv * 3 > 5", false},
    {"clamp(q - kv, 0, 10) == 10", true},
    {"h % 2 == 0 and q >= kv", false},
    {"g == 1 or kv == 0", true},
    {"q != kv", true},
    {"(q - kv) % 8 == 0", false},
    {"(kv - q) // -3 > 2", false},
    {"q * 30000000 > kv", false}, /* wraps: the whole int32 range */
    {"q - kv < 4.5", false},      /* floats: either */
    {"floor(q / 2) > kv", false},
    {"true", true},
    {"false", true},
};

/* A random integer in [0, n). */
static int64_t below(uint64_t *s, int64_t n) {
    int64_t v = (int64_t)((rnd_unit(s) + 1) / 2 * (double)n);
    return v < n ? v : n - 1;
}

/* cg_expr_bounds against every point of random boxes (attn_expr_eval):
 * where a point is true (false), the bounds say it may be; for the exact
 * masks, they say so only then. */
static void mask_bounds_hold_the_box(void **state) {
    (void)state;
    enum { N = sizeof bound_cases / sizeof bound_cases[0] };
    attnc_ctx *ctx = attnc_ctx_new();
    ir_graph g = {.ctx = ctx};
    g.cfg.heads = 8;
    g.cfg.kv_groups = 2;
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    cg c;
    cg_init(&c, &g, tsc, "bounds");
    static attn_expr e[N];
    char names[N][16];
    const char *name_of[N];
    for (int i = 0; i < N; i++) {
        attn_msg m;
        if (attn_expr_parse(bound_cases[i].src, ATTN_EXPR_MASK_MOD, NULL, 0, &e[i], &m, NULL) !=
            ATTN_OK)
            fail_msg("%s: %s", bound_cases[i].src, m.text);
        /* void bounds_i(const int64_t box[6], uint8_t out[2]) */
        snprintf(names[i], sizeof names[i], "bounds_%d", i);
        name_of[i] = names[i];
        LLVMTypeRef params[2] = {c.ptr, c.ptr};
        c.fn = LLVMAddFunction(c.mod, names[i],
                               LLVMFunctionType(LLVMVoidTypeInContext(c.llctx), params, 2, false));
        LLVMPositionBuilderAtEnd(c.b, LLVMAppendBasicBlockInContext(c.llctx, c.fn, "entry"));
        LLVMValueRef v[6];
        for (int k = 0; k < 6; k++)
            v[k] = LLVMBuildLoad2(c.b, c.i64,
                                  cg_gep(&c, c.i64, LLVMGetParam(c.fn, 0), cg_i64(&c, k)), "");
        cg_expr_box box = {v[0], v[1], v[2], v[3], v[4], v[5]};
        LLVMValueRef yes, no;
        cg_expr_bounds(&c, &e[i], &box, &yes, &no);
        LLVMTypeRef i8 = LLVMInt8TypeInContext(c.llctx);
        LLVMBuildStore(c.b, LLVMBuildZExt(c.b, yes, i8, ""), LLVMGetParam(c.fn, 1));
        LLVMBuildStore(c.b, LLVMBuildZExt(c.b, no, i8, ""),
                       cg_gep(&c, i8, LLVMGetParam(c.fn, 1), cg_i64(&c, 1)));
        LLVMBuildRetVoid(c.b);
    }
    LLVMOrcJITTargetAddress addr[N];
    LLVMOrcLLJITRef jit = jit_of(ctx, &c, tsc, name_of, N, addr);
    uint64_t s = 17;
    int exact_hits = 0;
    for (int i = 0; i < N; i++) {
        void (*fn)(const int64_t *, uint8_t *) =
            (void (*)(const int64_t *, uint8_t *))(uintptr_t)addr[i];
        for (int t = 0; t < 300; t++) {
            int64_t b[6];
            b[0] = below(&s, 300), b[1] = b[0] + below(&s, 40);
            b[2] = below(&s, 300), b[3] = b[2] + below(&s, 40);
            b[4] = below(&s, 8), b[5] = b[4] + below(&s, 8 - b[4]);
            bool any_true = false, any_false = false;
            for (int64_t q = b[0]; q <= b[1]; q++)
                for (int64_t kv = b[2]; kv <= b[3]; kv++)
                    for (int64_t h = b[4]; h <= b[5]; h++) {
                        attn_expr_env env = {.q = (int32_t)q,
                                             .kv = (int32_t)kv,
                                             .h = (int32_t)h,
                                             .g = (int32_t)(h / 4)};
                        if (attn_expr_eval(&e[i], NULL, &env) != 0)
                            any_true = true;
                        else
                            any_false = true;
                    }
            uint8_t out[2];
            fn(b, out);
            if ((any_true && !out[0]) || (any_false && !out[1]) ||
                (bound_cases[i].exact && (out[0] != any_true || out[1] != any_false)))
                fail_msg("%s over q [%lld, %lld] kv [%lld, %lld] h [%lld, %lld]: the box "
                         "holds true %d false %d, the bounds say %d %d",
                         bound_cases[i].src, (long long)b[0], (long long)b[1], (long long)b[2],
                         (long long)b[3], (long long)b[4], (long long)b[5], any_true, any_false,
                         out[0], out[1]);
            exact_hits += out[0] != out[1];
        }
    }
    print_message("%d of %d boxes proven all true or all false\n", exact_hits, N * 300);
    LLVMConsumeError(LLVMOrcDisposeLLJIT(jit));
    attnc_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exp_polynomial_is_within_2e7_relative),
        cmocka_unit_test(exp_nonpos_is_within_2e7_relative),
        cmocka_unit_test(tanh_is_within_2e7_absolute),
        cmocka_unit_test(log_is_within_3e7),
        cmocka_unit_test(stores_round_like_the_runtime),
        cmocka_unit_test(bf16_words_round_like_the_runtime),
        cmocka_unit_test(mask_bounds_hold_the_box),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
