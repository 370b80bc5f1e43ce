/* emit_target.c: target machines, the optimization pipeline and module
 * dumps, shared by the JIT and (later) object emission. */
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_names.h"
#include "emit/emit.h"

/* NULL if cpu is a CPU of target (or the target has no list here), else
 * the list it is not in. */
static const char *const *unknown_cpu(const char *target, const char *cpu) {
    const char *const *list = strcmp(target, "x86-64") == 0   ? cpus_x86_64
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
    if (opt && opt->cpu && unknown_cpu(LLVMGetTargetName(target), opt->cpu)) {
        diag_error(ctx, ATTNC_E_SPEC, (attnc_loc){0},
                   "unknown CPU '%s' for target %s (llc -mtriple=%s -mcpu=help lists them)",
                   opt->cpu, LLVMGetTargetName(target), triple);
        st = ATTNC_E_SPEC;
        goto done;
    }
    const char *cpu = opt && opt->cpu ? opt->cpu
                      : host          ? (host_cpu = LLVMGetHostCPUName())
                                      : "generic";
    const char *features = opt && opt->features ? opt->features
                           : !host || (opt && opt->cpu) ? ""
                                                        : (host_features = LLVMGetHostCPUFeatures());
    *out = LLVMCreateTargetMachine(target, triple, cpu, features, LLVMCodeGenLevelAggressive,
                                   LLVMRelocPIC, LLVMCodeModelSmall);
    if (!*out) {
        diag_error(ctx, ATTNC_E_LLVM, (attnc_loc){0}, "cannot create a target machine for %s",
                   cpu);
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
    LLVMValueRef fn = LLVMAddFunction(mod, "probe", LLVMFunctionType(LLVMVoidTypeInContext(ctx), &ptr, 1, false));
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

cg_target emit_target_shape(LLVMTargetMachineRef tm) {
    char *triple = LLVMGetTargetMachineTriple(tm);
    char *features = LLVMGetTargetMachineFeatureString(tm);
    bool x86 = strncmp(triple, "x86_64", 6) == 0;
    int lanes = 4, regs = x86 ? 16 : 32;
    if (x86) {
        if (strstr(features, "+avx512f") || (!strstr(features, "-avx512f") && uses_register(tm, 16, "zmm"))) {
            lanes = 16;
            regs = 32;
        } else if (strstr(features, "+avx2") || uses_register(tm, 8, "ymm")) {
            lanes = 8;
        }
    }
    LLVMDisposeMessage(features);
    LLVMDisposeMessage(triple);
    return cg_target_for(lanes, regs);
}

/* The kernels that build their vectors themselves (register tiles of
 * the GEMM, flash, split decode) need little of O3: measured on
 * llama3_8b (Xeon, AVX-512), O3 spent 530 ms on them, this 50 ms, and
 * their speed did not change. The others are scalar loops that O3's
 * loop vectorizer turns into vector code: they keep O3 (they are small). */
static const char light_pipeline[] = "function(sroa,early-cse<memssa>,instcombine,simplifycfg)";

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
        LLVMBool bad = LLVMTargetMachineEmitToFile(tm, clone, opt->emit_asm, LLVMAssemblyFile, &why);
        LLVMDisposeModule(clone);
        if (bad) {
            diag_error(ctx, ATTNC_E_IO, (attnc_loc){opt->emit_asm, 0, 0}, "cannot write: %s", why);
            LLVMDisposeMessage(why);
            return ATTNC_E_IO;
        }
    }
    return ATTNC_OK;
}
