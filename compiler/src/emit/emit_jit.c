/* emit_jit.c: ORC LLJIT. The fused graph becomes a module in a
 * thread-safe context, is optimized for the chosen CPU, added to a fresh
 * LLJIT and its kernels looked up into a kernel table. Creating JITs,
 * adding modules and looking up symbols are serialized by one mutex;
 * calling the compiled kernels is not. */
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "compile.h"
#include "emit/emit.h"

/* The one piece of shared state: LLVM's ORC setup is not safe to run
 * concurrently from several threads. */
static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;

struct attnc_jit {
    LLVMOrcLLJITRef lljit; /* owned; disposing it frees the code */
    attn_kernels table;
    attn_buffer_desc buffers[ATTN_MAX_BUFFERS];
    attn_kernel_step *steps; /* owned */
    char *names;             /* owned: the step names, NUL-separated */
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
    free(jit->steps);
    free(jit->names);
    free(jit);
}

const attn_kernels *attnc_jit_kernels(const attnc_jit *jit) {
    return jit ? &jit->table : NULL;
}

attnc_timings attnc_jit_timings(const attnc_jit *jit) {
    return jit ? jit->timings : (attnc_timings){0};
}

/* Builds the LLJIT for tm's CPU and adds mod to it; both consumed. */
static attnc_status make_lljit(attnc_ctx *ctx, LLVMTargetMachineRef jit_tm,
                               LLVMOrcThreadSafeModuleRef tsm, LLVMOrcLLJITRef *out) {
    LLVMOrcJITTargetMachineBuilderRef jtmb =
        LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jit_tm); /* consumes jit_tm */
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, jtmb); /* consumes jtmb */
    LLVMOrcLLJITRef lljit = NULL;
    LLVMErrorRef err = LLVMOrcCreateLLJIT(&lljit, builder); /* consumes builder */
    if (err) {
        LLVMOrcDisposeThreadSafeModule(tsm);
        return emit_llvm_error(ctx, err, "creating the JIT");
    }
    LLVMOrcDefinitionGeneratorRef gen = NULL;
    err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
        &gen, LLVMOrcLLJITGetGlobalPrefix(lljit), NULL, NULL);
    if (!err) {
        /* libm's cos and sin, used by RoPE, resolve from this process */
        LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(lljit), gen);
        err = LLVMOrcLLJITAddLLVMIRModule(lljit, LLVMOrcLLJITGetMainJITDylib(lljit), tsm);
        tsm = NULL; /* consumed, also on error */
    }
    if (err) {
        if (tsm)
            LLVMOrcDisposeThreadSafeModule(tsm);
        LLVMConsumeError(LLVMOrcDisposeLLJIT(lljit));
        return emit_llvm_error(ctx, err, "adding the module to the JIT");
    }
    *out = lljit;
    return ATTNC_OK;
}

static attnc_status jit_compile(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                                attnc_jit **out) {
    attnc_jit *jit = calloc(1, sizeof *jit);
    if (!jit) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
        return ATTNC_E_NOMEM;
    }
    ir_graph *g = NULL;
    attnc_status st = compile_graph(ctx, spec_path, opt, NULL, &g, &jit->timings);
    LLVMTargetMachineRef tm = NULL, jit_tm = NULL;
    LLVMOrcThreadSafeContextRef tsc = NULL;
    cg_result res = {0};
    if (st != ATTNC_OK)
        goto fail;
    double t0 = compile_now_ms();
    tsc = LLVMOrcCreateNewThreadSafeContext();
    if ((st = emit_target_machine(ctx, opt, &tm)) != ATTNC_OK)
        goto fail;
    cg_target target;
    emit_target_shape(tm, &target.lanes, &target.regs);
    if ((st = cg_module_build(g, LLVMOrcThreadSafeContextGetContext(tsc), &target, &res)) != ATTNC_OK)
        goto fail;
    double t1 = compile_now_ms();
    if ((st = emit_optimize(ctx, res.module, tm)) != ATTNC_OK ||
        (st = emit_dumps(ctx, res.module, tm, opt)) != ATTNC_OK ||
        (st = emit_target_machine(ctx, opt, &jit_tm)) != ATTNC_OK)
        goto fail;
    double t2 = compile_now_ms();
    jit->timings.llvm_ms = t1 - t0;
    jit->timings.optimize_ms = t2 - t1;

    size_t names_len = 0;
    for (int i = 0; i < res.n_steps; i++)
        names_len += strlen(res.step_names[i]) + 1;
    jit->steps = calloc((size_t)res.n_steps + 1, sizeof *jit->steps);
    jit->names = malloc(names_len + 1);
    if (!jit->steps || !jit->names) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
        st = ATTNC_E_NOMEM;
        goto fail;
    }
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(res.module, tsc);
    res.module = NULL; /* owned by tsm now */
    pthread_mutex_lock(&jit_lock);
    st = make_lljit(ctx, jit_tm, tsm, &jit->lljit); /* consumes jit_tm and tsm */
    jit_tm = NULL;
    char *at = jit->names;
    for (int i = 0; st == ATTNC_OK && i < res.n_steps; i++) {
        LLVMOrcJITTargetAddress addr = 0;
        LLVMErrorRef err = LLVMOrcLLJITLookup(jit->lljit, &addr, res.step_names[i]);
        if (err) {
            st = emit_llvm_error(ctx, err, res.step_names[i]);
            break;
        }
        strcpy(at, res.step_names[i]);
        jit->steps[i].name = at;
        at += strlen(at) + 1;
        jit->steps[i].fn = (attn_kernel_fn)(uintptr_t)addr;
        jit->steps[i].phase = res.step_phase[i];
    }
    pthread_mutex_unlock(&jit_lock);
    if (st != ATTNC_OK)
        goto fail;
    jit->timings.jit_ms = compile_now_ms() - t2;
    memcpy(jit->buffers, res.buffers, sizeof jit->buffers);
    jit->table = (attn_kernels){
        .abi_version = ATTN_KERNELS_ABI,
        .n_buffers = (uint32_t)res.n_buffers,
        .n_steps = (uint32_t)res.n_steps,
        .config = g->cfg,
        .buffers = jit->buffers,
        .steps = jit->steps,
    };
    LLVMDisposeTargetMachine(tm);
    LLVMOrcDisposeThreadSafeContext(tsc); /* the module keeps its own reference */
    *out = jit;
    return ATTNC_OK;
fail:
    if (res.module)
        LLVMDisposeModule(res.module);
    if (tm)
        LLVMDisposeTargetMachine(tm);
    if (jit_tm)
        LLVMDisposeTargetMachine(jit_tm);
    if (tsc)
        LLVMOrcDisposeThreadSafeContext(tsc);
    attnc_jit_free(jit);
    return st;
}

attnc_status attnc_jit_compile_file(const char *spec_path, const attnc_options *opt,
                                    attnc_jit **out, char **error) {
    if (error)
        *error = NULL;
    attnc_ctx *ctx = attnc_ctx_new();
    if (!ctx)
        return ATTNC_E_NOMEM;
    attnc_status st = spec_path && out ? jit_compile(ctx, spec_path, opt, out) : ATTNC_E_IO;
    if (st != ATTNC_OK && error)
        *error = compile_diag_text(ctx, spec_path ? "compilation failed" : "no spec path");
    attnc_ctx_free(ctx);
    return st;
}

static attnc_status probes_compile(attnc_ctx *ctx, attnc_jit **out, attnc_probes *pr) {
    attnc_jit *jit = calloc(1, sizeof *jit);
    LLVMTargetMachineRef tm = NULL, jit_tm = NULL;
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    attnc_status st = jit ? ATTNC_OK : ATTNC_E_NOMEM;
    if (st == ATTNC_OK)
        st = emit_target_machine(ctx, NULL, &tm);
    if (st == ATTNC_OK)
        st = emit_target_machine(ctx, NULL, &jit_tm);
    if (st != ATTNC_OK)
        goto done;
    cg_target target;
    emit_target_shape(tm, &target.lanes, &target.regs);
    LLVMModuleRef mod = cg_probe_build(LLVMOrcThreadSafeContextGetContext(tsc), &target, &pr->flops_per_iter);
    pr->lanes = target.lanes;
    if ((st = emit_optimize(ctx, mod, tm)) != ATTNC_OK) {
        LLVMDisposeModule(mod);
        goto done;
    }
    pthread_mutex_lock(&jit_lock);
    st = make_lljit(ctx, jit_tm, LLVMOrcCreateNewThreadSafeModule(mod, tsc), &jit->lljit);
    jit_tm = NULL;
    const char *names[2] = {"attnc_probe_fma", "attnc_probe_read"};
    LLVMOrcJITTargetAddress addr[2] = {0, 0};
    for (int i = 0; st == ATTNC_OK && i < 2; i++) {
        LLVMErrorRef err = LLVMOrcLLJITLookup(jit->lljit, &addr[i], names[i]);
        if (err)
            st = emit_llvm_error(ctx, err, names[i]);
    }
    pthread_mutex_unlock(&jit_lock);
    if (st == ATTNC_OK) {
        pr->fma = (void (*)(float *, int64_t))(uintptr_t)addr[0];
        pr->read = (float (*)(const float *, int64_t))(uintptr_t)addr[1];
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

attnc_status attnc_probes_compile(attnc_jit **jit, attnc_probes *out, char **error) {
    if (error)
        *error = NULL;
    attnc_ctx *ctx = attnc_ctx_new();
    if (!ctx)
        return ATTNC_E_NOMEM;
    attnc_status st = jit && out ? probes_compile(ctx, jit, out) : ATTNC_E_IO;
    if (st != ATTNC_OK && error)
        *error = compile_diag_text(ctx, "compiling the probes failed");
    attnc_ctx_free(ctx);
    return st;
}
