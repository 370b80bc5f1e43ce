/* emit_jit.c: ORC LLJIT. The fused graph's units are compiled to objects
 * on all threads at once (emit_units.c), or found in the kernel cache
 * (kcache.c), linked into a fresh LLJIT, and the kernel table their
 * `<name>_kernels` returns is copied. Creating JITs, adding objects and
 * looking up symbols are serialized by one mutex; calling the compiled
 * kernels is not. */
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "emit/emit.h"

/* The one piece of shared state: LLVM's ORC setup is not safe to run
 * concurrently from several threads. */
static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;

struct attnc_jit {
    LLVMOrcLLJITRef lljit; /* owned; disposing it frees the code */
    attn_kernels table;    /* a copy of the objects' table; points into them */
    attnc_timings timings;
};

void attnc_jit_free(attnc_jit *jit) {
    if (!jit)
        return;
    if (jit->lljit) {
        pthread_mutex_lock(&jit_lock);
        LLVMErrorRef err = LLVMOrcDisposeLLJIT(jit->lljit);
        pthread_mutex_unlock(&jit_lock);
        if (err)
            LLVMConsumeError(err);
    }
    free(jit);
}

const attn_kernels *attnc_jit_kernels(const attnc_jit *jit) {
    return jit ? &jit->table : NULL;
}

attnc_timings attnc_jit_timings(const attnc_jit *jit) {
    return jit ? jit->timings : (attnc_timings){0};
}

attnc_jit *emit_jit_new(void) {
    return calloc(1, sizeof(attnc_jit));
}

attnc_timings *emit_jit_timings(attnc_jit *jit) {
    return &jit->timings;
}

/* An LLJIT for jit_tm's CPU (consumed) that resolves what the kernels
 * call outside themselves (libm's cos and sin, for RoPE tables) from
 * this process. Call with jit_lock held. */
static attnc_status new_lljit(attnc_ctx *ctx, LLVMTargetMachineRef jit_tm, LLVMOrcLLJITRef *out) {
    LLVMOrcJITTargetMachineBuilderRef jtmb =
        LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jit_tm); /* consumes jit_tm */
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, jtmb); /* consumes jtmb */
    LLVMOrcLLJITRef lljit = NULL;
    LLVMErrorRef err = LLVMOrcCreateLLJIT(&lljit, builder); /* consumes builder */
    if (err)
        return emit_llvm_error(ctx, err, "creating the JIT");
    LLVMOrcDefinitionGeneratorRef gen = NULL;
    err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
        &gen, LLVMOrcLLJITGetGlobalPrefix(lljit), NULL, NULL);
    if (err) {
        LLVMConsumeError(LLVMOrcDisposeLLJIT(lljit));
        return emit_llvm_error(ctx, err, "creating the JIT");
    }
    LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(lljit), gen);
    *out = lljit;
    return ATTNC_OK;
}

/* Links the objects into a new LLJIT of jit for jit_tm's CPU (consumed)
 * and copies the table that `<name>_kernels` returns. */
attnc_status emit_jit_link(attnc_ctx *ctx, LLVMTargetMachineRef jit_tm, const char *name,
                           const kc_blob *objs, int n, attnc_jit *jit) {
    attnc_status st;
    char sym[ATTN_NAME_MAX + 16];
    snprintf(sym, sizeof sym, "%s_kernels", name);
    LLVMOrcJITTargetAddress addr = 0;
    pthread_mutex_lock(&jit_lock);
    st = new_lljit(ctx, jit_tm, &jit->lljit); /* consumes jit_tm */
    LLVMOrcJITDylibRef jd = st == ATTNC_OK ? LLVMOrcLLJITGetMainJITDylib(jit->lljit) : NULL;
    for (int i = 0; st == ATTNC_OK && i < n; i++) {
        LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(
            (const char *)objs[i].data, objs[i].size, "attnc-unit");
        LLVMErrorRef err = LLVMOrcLLJITAddObjectFile(jit->lljit, jd, buf); /* consumes buf */
        if (err)
            st = emit_llvm_error(ctx, err, "adding an object to the JIT");
    }
    if (st == ATTNC_OK) {
        LLVMErrorRef err = LLVMOrcLLJITLookup(jit->lljit, &addr, sym);
        if (err)
            st = emit_llvm_error(ctx, err, sym);
    }
    pthread_mutex_unlock(&jit_lock);
    if (st != ATTNC_OK)
        return st;
    const attn_kernels *(*get)(void) = (const attn_kernels *(*)(void))(uintptr_t)addr;
    jit->table = *get();
    return ATTNC_OK;
}

static attnc_status probes_compile(attnc_ctx *ctx, const attnc_options *opt, attnc_jit **out,
                                   attnc_probes *pr) {
    attnc_jit *jit = calloc(1, sizeof *jit);
    LLVMTargetMachineRef tm = NULL, jit_tm = NULL;
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    attnc_status st = jit ? ATTNC_OK : ATTNC_E_NOMEM;
    if (st == ATTNC_OK)
        st = emit_target_machine(ctx, opt, &tm);
    if (st == ATTNC_OK)
        st = emit_target_machine(ctx, opt, &jit_tm);
    if (st != ATTNC_OK)
        goto done;
    cg_target target = emit_target_shape(tm);
    cg_probe_work work;
    LLVMModuleRef mod = cg_probe_build(LLVMOrcThreadSafeContextGetContext(tsc), &target, &work);
    pr->flops_per_iter = work.fma;
    pr->bf16_flops_per_iter = work.bf16;
    pr->amx_flops_per_iter = work.amx;
    pr->int8_ops_per_iter = work.int8;
    pr->lanes = target.lanes;
    if ((st = emit_optimize(ctx, mod, tm)) != ATTNC_OK) {
        LLVMDisposeModule(mod);
        goto done;
    }
    pthread_mutex_lock(&jit_lock);
    st = new_lljit(ctx, jit_tm, &jit->lljit); /* consumes jit_tm */
    jit_tm = NULL;
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
    if (st == ATTNC_OK) {
        LLVMErrorRef err =
            LLVMOrcLLJITAddLLVMIRModule(jit->lljit, LLVMOrcLLJITGetMainJITDylib(jit->lljit), tsm);
        if (err) /* consumed tsm either way */
            st = emit_llvm_error(ctx, err, "adding the probes to the JIT");
    } else {
        LLVMOrcDisposeThreadSafeModule(tsm);
    }
    const char *names[5] = {"attnc_probe_fma", "attnc_probe_read", "attnc_probe_bf16",
                            "attnc_probe_amx", "attnc_probe_int8"};
    LLVMOrcJITTargetAddress addr[5] = {0, 0, 0, 0, 0};
    for (int i = 0; st == ATTNC_OK && i < 5; i++) {
        if ((i == 2 && !work.bf16) || (i == 3 && !work.amx) || (i == 4 && !work.int8))
            continue;
        LLVMErrorRef err = LLVMOrcLLJITLookup(jit->lljit, &addr[i], names[i]);
        if (err)
            st = emit_llvm_error(ctx, err, names[i]);
    }
    pthread_mutex_unlock(&jit_lock);
    if (st == ATTNC_OK) {
        pr->fma = (void (*)(float *, int64_t))(uintptr_t)addr[0];
        pr->read = (float (*)(const float *, int64_t))(uintptr_t)addr[1];
        pr->bf16 = addr[2] ? (void (*)(float *, int64_t))(uintptr_t)addr[2] : NULL;
        pr->amx = addr[3] ? (void (*)(float *, int64_t))(uintptr_t)addr[3] : NULL;
        pr->int8 = addr[4] ? (void (*)(float *, int64_t))(uintptr_t)addr[4] : NULL;
        jit->table.abi_version = ATTN_KERNELS_ABI;
        *out = jit;
        jit = NULL;
    }
done:
    if (tm)
        LLVMDisposeTargetMachine(tm);
    if (jit_tm)
        LLVMDisposeTargetMachine(jit_tm);
    LLVMOrcDisposeThreadSafeContext(tsc);
    attnc_jit_free(jit);
    return st;
}

attnc_status attnc_probes_compile_for(attnc_ctx *ctx, const attnc_options *opt, attnc_jit **jit,
                                      attnc_probes *out) {
    attnc_ctx *work = attnc_ctx_new();
    if (!work)
        return ATTNC_E_NOMEM;
    attnc_status st = ATTNC_E_INVALID;
    if (!jit || !out)
        diag_error(work, st, (attnc_loc){0}, "attnc_probes_compile: NULL jit or out");
    else if (opt && opt->target)
        diag_error(work, st = ATTNC_E_SPEC, (attnc_loc){0}, "the probes run here: no --target");
    else
        st = probes_compile(work, opt, jit, out);
    return diag_call_end(ctx, work, st);
}

attnc_status attnc_probes_compile(attnc_ctx *ctx, attnc_jit **jit, attnc_probes *out) {
    return attnc_probes_compile_for(ctx, NULL, jit, out);
}
