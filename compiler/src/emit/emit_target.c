/* emit_target.c: target machines, the optimization pipeline and module
 * dumps, shared by the JIT and (later) object emission. */
#include <llvm-c/Core.h>
#include <llvm-c/Disassembler.h>
#include <llvm-c/Error.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_names.h"
#include "emit/emit.h"

/* NULL if cpu is a CPU of target (or the target has no list here), else
 * the list it is not in. */
static const char *const *unknown_cpu(const char *target, const char *cpu) {
    const char *const *list = strcmp(target, "x86-64") == 0    ? cpus_x86_64
                              : strcmp(target, "aarch64") == 0 ? cpus_aarch64
                                                               : NULL;
    for (int i = 0; list && list[i]; i++)
        if (strcmp(list[i], cpu) == 0)
            return NULL;
    return list;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_native(void) {
    LLVMInitializeAllTargetInfos();
    LLVMInitializeAllTargets();
    LLVMInitializeAllTargetMCs();
    LLVMInitializeAllAsmPrinters();
    LLVMInitializeAllDisassemblers(); /* target_has_i8mm */
}

attnc_status emit_llvm_error(attnc_ctx *ctx, LLVMErrorRef err, const char *what) {
    char *msg = LLVMGetErrorMessage(err); /* consumes err */
    diag_error(ctx, ATTNC_E_LLVM, (attnc_loc){0}, "%s: %s", what, msg ? msg : "unknown error");
    LLVMDisposeErrorMessage(msg);
    return ATTNC_E_LLVM;
}

attnc_status emit_target_machine(attnc_ctx *ctx, const attnc_options *opt,
                                 LLVMTargetMachineRef *out) {
    pthread_once(&init_once, init_native);
    bool host = !opt || !opt->target;
    char *triple = host ? LLVMGetDefaultTargetTriple() : LLVMNormalizeTargetTriple(opt->target);
    char *host_cpu = NULL, *host_features = NULL, *why = NULL;
    LLVMTargetRef target;
    attnc_status st = ATTNC_OK;
    if (LLVMGetTargetFromTriple(triple, &target, &why)) {
        /* a target named by the user is input; the host's missing is ours */
        diag_error(ctx, host ? ATTNC_E_LLVM : ATTNC_E_SPEC, (attnc_loc){0},
                   "unknown target '%s': %s", host ? triple : opt->target, why);
        st = host ? ATTNC_E_LLVM : ATTNC_E_SPEC;
        goto done;
    }
    const char *const *cpus =
        opt && opt->cpu ? unknown_cpu(LLVMGetTargetName(target), opt->cpu) : NULL;
    if (cpus) {
        size_t n = 0;
        while (cpus[n])
            n++;
        const char *near = attnc_suggest(opt->cpu, cpus, n);
        diag_error(ctx, ATTNC_E_SPEC, (attnc_loc){0},
                   "unknown CPU '%s' for target %s%s%s%s (llc -mtriple=%s -mcpu=help lists them)",
                   opt->cpu, LLVMGetTargetName(target), near ? "; did you mean '" : "",
                   near ? near : "", near ? "'?" : "", triple);
        st = ATTNC_E_SPEC;
        goto done;
    }
    const char *cpu = opt && opt->cpu ? opt->cpu
                      : host          ? (host_cpu = LLVMGetHostCPUName())
                                      : "generic";
    const char *features = opt && opt->features ? opt->features
                           : !host || (opt && opt->cpu)
                               ? ""
                               : (host_features = LLVMGetHostCPUFeatures());
    *out = LLVMCreateTargetMachine(target, triple, cpu, features, LLVMCodeGenLevelAggressive,
                                   LLVMRelocPIC, LLVMCodeModelSmall);
    /* assembly with LLVM's comments (loop nests, spills and reloads):
     * what a reader of --emit asm and test_spills look for; objects are
     * the same either way */
    if (*out)
        LLVMSetTargetMachineAsmVerbosity(*out, 1);
    if (!*out) {
        diag_error(ctx, ATTNC_E_LLVM, (attnc_loc){0}, "cannot create a target machine for %s", cpu);
        st = ATTNC_E_LLVM;
    }
done:
    LLVMDisposeMessage(why);
    LLVMDisposeMessage(host_cpu);
    LLVMDisposeMessage(host_features);
    LLVMDisposeMessage(triple);
    return st;
}

/* Gives mod tm's triple and data layout. */
static void target_module(LLVMModuleRef mod, LLVMTargetMachineRef tm) {
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(mod, triple);
    LLVMDisposeMessage(triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(mod, dl);
    LLVMDisposeTargetData(dl);
}

/* Does tm turn a <lanes x float> add into code using register name reg? */
static bool uses_register(LLVMTargetMachineRef tm, int lanes, const char *reg) {
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("probe", ctx);
    target_module(mod, tm);
    LLVMTypeRef ptr = LLVMPointerTypeInContext(ctx, 0);
    LLVMTypeRef vt = LLVMVectorType(LLVMFloatTypeInContext(ctx), (unsigned)lanes);
    LLVMValueRef fn =
        LLVMAddFunction(mod, "probe", LLVMFunctionType(LLVMVoidTypeInContext(ctx), &ptr, 1, false));
    LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, fn, "entry"));
    LLVMValueRef v = LLVMBuildLoad2(b, vt, LLVMGetParam(fn, 0), "");
    LLVMBuildStore(b, LLVMBuildFAdd(b, v, v, ""), LLVMGetParam(fn, 0));
    LLVMBuildRetVoid(b);
    LLVMDisposeBuilder(b);
    LLVMMemoryBufferRef buf = NULL;
    char *why = NULL;
    bool found = false;
    if (!LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &why, &buf)) {
        const char *text = LLVMGetBufferStart(buf);
        size_t n = LLVMGetBufferSize(buf), k = strlen(reg);
        for (size_t i = 0; !found && i + k <= n; i++)
            found = memcmp(text + i, reg, k) == 0;
        LLVMDisposeMemoryBuffer(buf);
    }
    LLVMDisposeMessage(why);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    return found;
}

/* What the kernel table records as the CPU features its code may use
 * (attn_kernels.cpu_features): for each, a function whose instruction
 * selection shows whether tm has the feature (an instruction only it
 * gives, found in the function's assembly), so the answer is LLVM's own
 * for any CPU name and feature string. `want`: alternatives split by |,
 * words that must share a line joined by &. */
typedef struct feature_probe {
    uint32_t bit;
    const char *type; /* of %r, stored back to %p */
    const char *body; /* IR over %p (ptr), defining %r */
    const char *want;
} feature_probe;

static const feature_probe x86_probes[] = {
    {ATTN_CPU_SSE4_1, "<4 x float>",
     "%a = load <4 x float>, ptr %p\n%r = call <4 x float> @llvm.floor.v4f32(<4 x float> %a)",
     "roundps"},
    {ATTN_CPU_SSE4_2, "<2 x i64>",
     "%a = load <2 x i64>, ptr %p\n%c = icmp sgt <2 x i64> %a, <i64 5, i64 7>\n%r = sext <2 x i1> "
     "%c to <2 x i64>",
     "pcmpgtq"},
    {ATTN_CPU_POPCNT, "i64", "%a = load i64, ptr %p\n%r = call i64 @llvm.ctpop.i64(i64 %a)",
     "popcnt"},
    {ATTN_CPU_AVX, "<8 x float>", "%a = load <8 x float>, ptr %p\n%r = fadd <8 x float> %a, %a",
     "ymm"},
    {ATTN_CPU_AVX2, "<8 x i32>", "%a = load <8 x i32>, ptr %p\n%r = add <8 x i32> %a, %a",
     "vpaddd&ymm"},
    {ATTN_CPU_FMA, "<4 x float>",
     "%a = load <4 x float>, ptr %p\n%r = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x "
     "float> %a, <4 x float> %a)",
     "vfmadd"},
    {ATTN_CPU_F16C, "<4 x float>",
     "%a = load <4 x half>, ptr %p\n%r = fpext <4 x half> %a to <4 x float>", "vcvtph2ps"},
    {ATTN_CPU_BMI2, "i64",
     "%q = getelementptr i64, ptr %p, i64 1\n%a = load i64, ptr %q\n%b = load i64, ptr %p\n%r = "
     "shl i64 %a, %b",
     "shlx"},
    {ATTN_CPU_LZCNT, "i64", "%a = load i64, ptr %p\n%r = call i64 @llvm.ctlz.i64(i64 %a, i1 false)",
     "lzcnt"},
    {ATTN_CPU_MOVBE, "i64", "%a = load i64, ptr %p\n%r = call i64 @llvm.bswap.i64(i64 %a)",
     "movbe"},
    {ATTN_CPU_AVX512F, "<16 x float>",
     "%a = load <16 x float>, ptr %p\n%r = fadd <16 x float> %a, %a", "zmm"},
    {ATTN_CPU_AVX512BW, "<64 x i8>", "%a = load <64 x i8>, ptr %p\n%r = add <64 x i8> %a, %a",
     "vpaddb&zmm"},
    {ATTN_CPU_AVX512DQ, "<8 x i64>", "%a = load <8 x i64>, ptr %p\n%r = mul <8 x i64> %a, %a",
     "vpmullq"},
    {ATTN_CPU_AVX512VL, "<4 x i64>",
     "%a = load <4 x i64>, ptr %p\n%r = call <4 x i64> @llvm.smax.v4i64(<4 x i64> %a, <4 x i64> "
     "<i64 1, i64 2, i64 3, i64 4>)",
     "vpmaxsq&ymm"},
    {ATTN_CPU_AVX512BF16, "<16 x bfloat>",
     "%a = load <16 x float>, ptr %p\n%r = fptrunc <16 x float> %a to <16 x bfloat>",
     "vcvtneps2bf16"},
    {ATTN_CPU_AVX512FP16, "<32 x half>",
     "%a = load <32 x half>, ptr %p\n%r = fadd <32 x half> %a, %a", "vaddph"},
    {ATTN_CPU_AVX512VBMI, "<64 x i8>",
     "%a = load <64 x i8>, ptr %p\n%r = shufflevector <64 x i8> %a, <64 x i8> poison, <64 x i32> "
     "REVERSE64",
     "vpermb|vpermi2b|vpermt2b"},
    /* int8 dot products: a sum of u8 x s8 products becomes vpdpbusd */
    {ATTN_CPU_AVX512VNNI, "i32",
     "%q = getelementptr i8, ptr %p, i64 64\n%a = load <64 x i8>, ptr %p\n%b = load <64 x i8>, "
     "ptr %q\n%za = zext <64 x i8> %a to <64 x i32>\n%sb = sext <64 x i8> %b to <64 x i32>\n%m = "
     "mul <64 x i32> %za, %sb\n%r = call i32 @llvm.vector.reduce.add.v64i32(<64 x i32> %m)",
     "vpdpbusd&zmm"},
    {ATTN_CPU_AVXVNNI, "i32",
     "%q = getelementptr i8, ptr %p, i64 64\n%a = load <32 x i8>, ptr %p\n%b = load <32 x i8>, "
     "ptr %q\n%za = zext <32 x i8> %a to <32 x i32>\n%sb = sext <32 x i8> %b to <32 x i32>\n%m = "
     "mul <32 x i32> %za, %sb\n%r = call i32 @llvm.vector.reduce.add.v32i32(<32 x i32> %m)",
     "{vex}&vpdpbusd"},
};

static const feature_probe aarch64_probes[] = {
    {ATTN_CPU_ARM_FP16, "<8 x half>", "%a = load <8 x half>, ptr %p\n%r = fadd <8 x half> %a, %a",
     "fadd&.8h"},
    {ATTN_CPU_ARM_BF16, "<4 x bfloat>",
     "%a = load <4 x float>, ptr %p\n%r = fptrunc <4 x float> %a to <4 x bfloat>", "bfcvtn"},
};

/* Does the line at text[0..n) match want (see feature_probe)? */
static bool line_matches(const char *line, size_t n, const char *want) {
    char alt[64];
    for (const char *w = want; *w;) {
        size_t k = strcspn(w, "|");
        snprintf(alt, sizeof alt, "%.*s", (int)k, w);
        bool all = true;
        for (char *save = NULL, *word = strtok_r(alt, "&", &save); word && all;
             word = strtok_r(NULL, "&", &save)) {
            size_t wl = strlen(word);
            bool found = false;
            for (size_t i = 0; !found && i + wl <= n; i++)
                found = memcmp(line + i, word, wl) == 0;
            all = found;
        }
        if (all)
            return true;
        w += k + (w[k] == '|');
    }
    return false;
}

static uint32_t probed_features(LLVMTargetMachineRef tm) {
    char *triple = LLVMGetTargetMachineTriple(tm);
    const feature_probe *pr = NULL;
    int np = 0;
    if (strncmp(triple, "x86_64", 6) == 0)
        pr = x86_probes, np = (int)(sizeof x86_probes / sizeof x86_probes[0]);
    else if (strncmp(triple, "aarch64", 7) == 0)
        pr = aarch64_probes, np = (int)(sizeof aarch64_probes / sizeof aarch64_probes[0]);
    LLVMDisposeMessage(triple);
    if (!np)
        return 0;
    /* one module, a function attnc_feature_<i> per probe */
    char rev[64 * 9 + 16] = "<", *ir = malloc(65536);
    size_t at = 1;
    for (int i = 0; i < 64; i++)
        at += (size_t)snprintf(rev + at, sizeof rev - at, "i32 %d%s", 63 - i, i < 63 ? ", " : ">");
    if (!ir)
        return 0;
    size_t len = (size_t)snprintf(
        ir, 65536,
        "declare <4 x float> @llvm.floor.v4f32(<4 x float>)\n"
        "declare i64 @llvm.ctpop.i64(i64)\n"
        "declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)\n"
        "declare i64 @llvm.ctlz.i64(i64, i1)\n"
        "declare i64 @llvm.bswap.i64(i64)\n"
        "declare <4 x i64> @llvm.smax.v4i64(<4 x i64>, <4 x i64>)\n"
        "declare i32 @llvm.vector.reduce.add.v64i32(<64 x i32>)\n"
        "declare i32 @llvm.vector.reduce.add.v32i32(<32 x i32>)\n");
    /* AVX512-VNNI turned off where AVX-VNNI stays on (--features
     * -avx512vnni on Zen 5 or a Sapphire Rapids): LLVM 19 forms a zmm
     * vpdpbusd from the probe and then cannot select it, a fatal error; the
     * string already says the answer, so that probe reads its input alone */
    char *features = LLVMGetTargetMachineFeatureString(tm);
    bool no_vnni512 = strstr(features, "-avx512vnni") != NULL;
    LLVMDisposeMessage(features);
    for (int i = 0; i < np; i++) {
        char plain[64];
        const char *body = pr[i].body;
        if (no_vnni512 && pr[i].bit == ATTN_CPU_AVX512VNNI)
            snprintf(plain, sizeof plain, "%%r = load %s, ptr %%p", pr[i].type), body = plain;
        const char *mark = strstr(body, "REVERSE64");
        int head = mark ? (int)(mark - body) : (int)strlen(body);
        len += (size_t)snprintf(ir + len, 65536 - len,
                                "define void @attnc_feature_%d(ptr %%p) #0 {\n%.*s%s%s\n"
                                "store %s %%r, ptr %%p\nret void\n}\n",
                                i, head, body, mark ? rev : "", mark ? mark + 9 : "", pr[i].type);
    }
    snprintf(ir + len, 65536 - len, "attributes #0 = { \"min-legal-vector-width\"=\"512\" }\n");
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMMemoryBufferRef src = LLVMCreateMemoryBufferWithMemoryRangeCopy(ir, strlen(ir), "features");
    LLVMModuleRef mod = NULL;
    char *why = NULL;
    uint32_t bits = 0;
    free(ir);
    if (LLVMParseIRInContext(ctx, src, &mod, &why)) { /* consumes src */
        ATTNC_ASSERT(!"feature probes parse");
    } else {
        target_module(mod, tm);
        LLVMMemoryBufferRef out = NULL;
        if (!LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &why, &out)) {
            const char *text = LLVMGetBufferStart(out), *end = text + LLVMGetBufferSize(out);
            for (int i = 0; i < np; i++) {
                char label[64];
                snprintf(label, sizeof label, "\nattnc_feature_%d:", i);
                const char *f = strstr(text, label);
                for (const char *line = f ? f + 1 : end; line < end && !(bits & pr[i].bit);) {
                    const char *nl = memchr(line, '\n', (size_t)(end - line));
                    size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);
                    if (n >= 10 && memcmp(line, ".Lfunc_end", 10) == 0)
                        break;
                    if (line_matches(line, n, pr[i].want))
                        bits |= pr[i].bit;
                    line += n + 1;
                }
            }
            LLVMDisposeMemoryBuffer(out);
        }
        LLVMDisposeModule(mod);
    }
    LLVMDisposeMessage(why);
    LLVMContextDispose(ctx);
    return bits;
}

/* AMX, which no probe can test (selecting a tile instruction for a CPU
 * without it is a fatal LLVM error): the target's feature string, or
 * its CPU's name where the string does not say (--cpu NAME alone). */
static bool target_has_amx(LLVMTargetMachineRef tm) {
    char *cpu = LLVMGetTargetMachineCPU(tm), *features = LLVMGetTargetMachineFeatureString(tm);
    static const char *const amx_cpus[] = {"sapphirerapids", "emeraldrapids", "graniterapids",
                                           "graniterapids-d", "diamondrapids"};
    bool yes = strstr(features, "+amx-bf16") && strstr(features, "+amx-tile");
    for (size_t i = 0; !yes && i < sizeof amx_cpus / sizeof amx_cpus[0]; i++)
        yes = strcmp(cpu, amx_cpus[i]) == 0 && !strstr(features, "-amx-bf16") &&
              !strstr(features, "-amx-tile");
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
    return yes;
}

/* AArch64's int8 matrix multiplies (FEAT_I8MM), which no probe of the
 * IR can test either (LLVM selects usdot only from its intrinsic, fatal
 * without the feature): the target's disassembler, which decodes an
 * instruction only where its CPU and feature string have its feature,
 * is asked to read usdot v0.4s, v1.16b, v2.16b. */
static bool target_has_i8mm(LLVMTargetMachineRef tm) {
    char *triple = LLVMGetTargetMachineTriple(tm), *cpu = LLVMGetTargetMachineCPU(tm),
         *features = LLVMGetTargetMachineFeatureString(tm);
    bool yes = false;
    if (strncmp(triple, "aarch64", 7) == 0) {
        LLVMDisasmContextRef dc =
            LLVMCreateDisasmCPUFeatures(triple, cpu, features, NULL, 0, NULL, NULL);
        uint8_t usdot[4] = {0x20, 0x9c, 0x82, 0x4e}; /* little-endian */
        char text[64];
        yes = dc &&
              LLVMDisasmInstruction(dc, usdot, sizeof usdot, 0, text, sizeof text) == sizeof usdot;
        if (dc)
            LLVMDisasmDispose(dc);
    }
    LLVMDisposeMessage(triple);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
    return yes;
}

bool emit_amx_emulated(void) {
    const char *e = getenv("ATTNC_AMX_EMULATE");
    return e && strcmp(e, "1") == 0;
}

uint32_t emit_cpu_features(LLVMTargetMachineRef tm) {
    uint32_t bits = probed_features(tm);
    if ((bits & ATTN_CPU_AVX512BF16) && target_has_amx(tm))
        bits |= ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16;
    if (target_has_i8mm(tm))
        bits |= ATTN_CPU_ARM_I8MM;
    return bits;
}

/* tm's CPU into cpu[n] (nothing where cpu is NULL). */
static void target_name(LLVMTargetMachineRef tm, char *cpu, size_t n) {
    if (!cpu || !n)
        return;
    char *name = LLVMGetTargetMachineCPU(tm);
    snprintf(cpu, n, "%s", name);
    LLVMDisposeMessage(name);
}

attnc_status attnc_target_cpu(attnc_ctx *ctx, const attnc_options *opt, char *cpu, size_t n,
                              uint32_t *features) {
    attnc_ctx *work = attnc_ctx_new();
    if (!work)
        return ATTNC_E_NOMEM;
    LLVMTargetMachineRef tm = NULL;
    attnc_status st = ATTNC_E_INVALID;
    if (cpu && n && features)
        st = emit_target_machine(work, opt, &tm);
    else
        diag_error(work, st, (attnc_loc){0}, "attnc_target_cpu: no CPU buffer or features given");
    if (st == ATTNC_OK) {
        target_name(tm, cpu, n);
        *features = emit_cpu_features(tm);
        LLVMDisposeTargetMachine(tm);
    }
    return diag_call_end(ctx, work, st);
}

attnc_status attnc_spec_cpu_features(attnc_ctx *ctx, const char *spec_path,
                                     const attnc_options *opt, char *cpu, size_t n,
                                     uint32_t *features) {
    attnc_ctx *work = attnc_ctx_new();
    if (!work)
        return ATTNC_E_NOMEM;
    attnc_status st = ATTNC_E_INVALID;
    attn_config cfg;
    LLVMTargetMachineRef tm = NULL;
    if (!spec_path || !features)
        diag_error(work, st, (attnc_loc){0},
                   "attnc_spec_cpu_features: no spec path or features given");
    else
        st = attnc_spec_load_file(work, spec_path, &cfg);
    if (st == ATTNC_OK)
        st = emit_target_machine(work, opt, &tm);
    if (st == ATTNC_OK) {
        cg_target t = emit_target_shape(tm);
        target_name(tm, cpu, n);
        *features = cg_table_features(&t, &cfg);
        LLVMDisposeTargetMachine(tm);
    }
    return diag_call_end(ctx, work, st);
}

cg_target emit_target_shape(LLVMTargetMachineRef tm) {
    char *triple = LLVMGetTargetMachineTriple(tm);
    char *features = LLVMGetTargetMachineFeatureString(tm);
    bool x86 = strncmp(triple, "x86_64", 6) == 0;
    int lanes = 4, regs = x86 ? 16 : 32;
    if (x86) {
        if (strstr(features, "+avx512f") ||
            (!strstr(features, "-avx512f") && uses_register(tm, 16, "zmm"))) {
            lanes = 16;
            regs = 32;
        } else if (strstr(features, "+avx2") || uses_register(tm, 8, "ymm")) {
            lanes = 8;
        }
    }
    LLVMDisposeMessage(features);
    LLVMDisposeMessage(triple);
    cg_target t = cg_target_for(lanes, regs);
    t.cpu_features = emit_cpu_features(tm);
    t.bf16_dot = lanes == 16 && (t.cpu_features & ATTN_CPU_AVX512BF16);
    t.amx = t.bf16_dot && (t.cpu_features & ATTN_CPU_AMX_BF16);
    t.amx_emulated = !t.amx && t.bf16_dot && emit_amx_emulated();
    t.amx = t.amx || t.amx_emulated;
    t.vnni = lanes == 16 ? (t.cpu_features & ATTN_CPU_AVX512VNNI) != 0
             : lanes == 8
                 ? (t.cpu_features & ATTN_CPU_AVXVNNI) || ((t.cpu_features & ATTN_CPU_AVX512VNNI) &&
                                                           (t.cpu_features & ATTN_CPU_AVX512VL))
                 : false;
    t.usdot = !x86 && (t.cpu_features & ATTN_CPU_ARM_I8MM);
    t.bfdot = !x86 && lanes == 4 && (t.cpu_features & ATTN_CPU_ARM_BF16);
    return t;
}

/* The kernels that build their vectors themselves (register tiles of
 * the GEMM, flash, split decode) need little of O3: measured on
 * llama3_8b (Xeon, AVX-512), O3 spent 530 ms on them, this 50 ms, and
 * their speed did not change. The others are scalar loops that O3's
 * loop vectorizer turns into vector code: they keep O3 (they are small). */
static const char light_pipeline[] =
    "function(sroa,early-cse<memssa>,instcombine<no-verify-fixpoint>,simplifycfg)";

char *emit_passes(LLVMModuleRef mod, LLVMTargetMachineRef tm, bool light) {
    target_module(mod, tm);
    LLVMPassBuilderOptionsRef pbo = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(pbo, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(pbo, 1);
    /* generic unrolling tripled compile time (llama3_8b: 217 -> 69 ms
     * without it) for no measured speed: the vectorizer interleaves anyway */
    LLVMPassBuilderOptionsSetLoopUnrolling(pbo, 0);
    const char *pl = light ? light_pipeline : "default<O3>";
    LLVMErrorRef err = LLVMRunPasses(mod, pl, tm, pbo);
    LLVMDisposePassBuilderOptions(pbo);
    char *why = NULL;
    if (err) {
        char *msg = LLVMGetErrorMessage(err); /* consumes err */
        why = strdup(msg ? msg : "unknown error");
        LLVMDisposeErrorMessage(msg);
    }
    return why;
}

attnc_status emit_optimize(attnc_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm) {
    char *why = emit_passes(mod, tm, false);
    if (!why)
        return ATTNC_OK;
    diag_error(ctx, ATTNC_E_LLVM, (attnc_loc){0}, "optimizing: %s", why);
    free(why);
    return ATTNC_E_LLVM;
}

attnc_status emit_dumps(attnc_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                        const attnc_options *opt) {
    char *why = NULL;
    if (opt && opt->emit_llvm && LLVMPrintModuleToFile(mod, opt->emit_llvm, &why)) {
        diag_error(ctx, ATTNC_E_IO, (attnc_loc){opt->emit_llvm, 0, 0}, "cannot write: %s", why);
        LLVMDisposeMessage(why);
        return ATTNC_E_IO;
    }
    if (opt && opt->emit_asm) {
        LLVMModuleRef clone = LLVMCloneModule(mod); /* emitting may change the module */
        LLVMBool bad =
            LLVMTargetMachineEmitToFile(tm, clone, opt->emit_asm, LLVMAssemblyFile, &why);
        LLVMDisposeModule(clone);
        if (bad) {
            diag_error(ctx, ATTNC_E_IO, (attnc_loc){opt->emit_asm, 0, 0}, "cannot write: %s", why);
            LLVMDisposeMessage(why);
            return ATTNC_E_IO;
        }
    }
    return ATTNC_OK;
}
