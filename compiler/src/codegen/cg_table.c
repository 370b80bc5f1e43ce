/* cg_table.c: the kernel table as data, for emitted objects: the config
 * and buffer descriptors as bytes, the steps as {name, kernel, phase}, and
 * the accessor function the generated header declares. */
#include <stdio.h>
#include <string.h>

#include "codegen/cg_build.h"

static LLVMValueRef bytes_global(LLVMModuleRef mod, LLVMContextRef llctx, const char *name,
                                 const void *p, size_t n) {
    LLVMValueRef init = LLVMConstStringInContext(llctx, p, (unsigned)n, true);
    LLVMValueRef g = LLVMAddGlobal(mod, LLVMTypeOf(init), name);
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, true);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetAlignment(g, 8);
    return g;
}

/* AMX only where the kernels use it (compute bf16's GEMM and flash
 * prefill), so that other kernels compiled on an AMX machine neither need
 * its state nor ask Linux for it; VNNI (AArch64: i8mm) only where
 * activations q8_0's products use it, and the form they use. */
uint32_t cg_table_features(const cg_target *t, const attn_config *cfg) {
    uint32_t f = t->cpu_features;
    bool q8 = cfg->activations == ATTN_DTYPE_Q8_0;
    if (!(t->amx && cfg->compute == ATTN_DTYPE_BF16))
        f &= ~(uint32_t)(ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16);
    if (!(t->usdot && q8))
        f &= ~(uint32_t)ATTN_CPU_ARM_I8MM;
    uint32_t vnni = ATTN_CPU_AVX512VNNI | ATTN_CPU_AVXVNNI;
    if (!(t->vnni && q8))
        f &= ~vnni;
    else if (t->lanes == 16) /* zmm: the EVEX form */
        f &= ~(uint32_t)ATTN_CPU_AVXVNNI;
    else /* ymm: LLVM takes the VEX form where there is one */
        f &= ~(f & ATTN_CPU_AVXVNNI ? (uint32_t)ATTN_CPU_AVX512VNNI : (uint32_t)ATTN_CPU_AVXVNNI);
    return f;
}

void cg_table_build(const cg_result *res, LLVMModuleRef mod) {
    const ir_graph *g = res->g;
    LLVMContextRef llctx = LLVMGetModuleContext(mod);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(llctx), ptr = LLVMPointerTypeInContext(llctx, 0);
    LLVMTypeRef kparams[3] = {ptr, i32, i32};
    LLVMTypeRef kernel_ty = LLVMFunctionType(LLVMVoidTypeInContext(llctx), kparams, 3, false);
    const char *name = ir_cfg_name(g);

    /* the config, field by field (attn_config.def) into zeroed storage:
     * padding stays 0, and so do the name's bytes after its end */
    attn_config cfg;
    memset(&cfg, 0, sizeof cfg);
    const attn_config *c = &g->cfg; /* the one reader of every field */
#define COPY_NAME(f) memcpy(cfg.f, c->f, strnlen(c->f, ATTN_NAME_MAX - 1))
#define COPY_EXPR(f) memcpy(cfg.f, c->f, strnlen(c->f, ATTN_EXPR_TEXT_MAX - 1))
#define ATTN_FIELD(k, f, key) COPY_##k(f);
#define ATTN_PLAIN(k, f, key, token, def, lo, hi) COPY_##k(f);
#define COPY_I64(f) cfg.f = c->f
#define COPY_I32 COPY_I64
#define COPY_F64 COPY_I64
#define COPY_BOOL COPY_I64
#define COPY_ROPE_STYLE COPY_I64
#define COPY_SCALING COPY_I64
#define COPY_QK_NORM COPY_I64
#define COPY_LAYOUT COPY_I64
#define COPY_DTYPE COPY_I64
#include "attn_config.def"
#undef ATTN_FIELD
#undef ATTN_PLAIN

    attn_buffer_desc bufs[ATTN_MAX_BUFFERS];
    memset(bufs, 0, sizeof bufs);
    for (int i = 0; i < res->n_buffers; i++) {
        const attn_buffer_desc *d = &res->buffers[i];
        bufs[i].role = d->role, bufs[i].weight = d->weight, bufs[i].per_sequence = d->per_sequence;
        bufs[i].load_only = d->load_only; /* else an object's blocks keep unpacked weights */
        bufs[i].c = d->c, bufs[i].s = d->s, bufs[i].t = d->t, bufs[i].st = d->st;
        bufs[i].prefill_min = d->prefill_min;
    }
    LLVMValueRef buffers =
        bytes_global(mod, llctx, "attn.buffers", bufs, (size_t)res->n_buffers * sizeof bufs[0]);

    /* steps: {name, kernel, phase, flags} */
    LLVMTypeRef step_fields[4] = {ptr, ptr, i32, i32};
    LLVMTypeRef step_ty = LLVMStructTypeInContext(llctx, step_fields, 4, false);
    LLVMValueRef steps[256];
    ATTNC_ASSERT(res->n_steps <= 256);
    for (int i = 0; i < res->n_steps; i++) {
        const char *sym = res->step_names[i];
        LLVMValueRef str = LLVMConstStringInContext(llctx, sym, (unsigned)strlen(sym), false);
        LLVMValueRef sg = LLVMAddGlobal(mod, LLVMTypeOf(str), "attn.step_name");
        LLVMSetInitializer(sg, str);
        LLVMSetGlobalConstant(sg, true);
        LLVMSetLinkage(sg, LLVMPrivateLinkage);
        LLVMValueRef fn = LLVMGetNamedFunction(mod, sym);
        if (!fn) /* built in another unit */
            fn = LLVMAddFunction(mod, sym, kernel_ty);
        LLVMValueRef f[4] = {sg, fn, LLVMConstInt(i32, res->step_phase[i], false),
                             LLVMConstInt(i32, res->step_flags[i], false)};
        steps[i] = LLVMConstNamedStruct(step_ty, f, 4);
    }
    LLVMValueRef steps_init = LLVMConstArray2(step_ty, steps, (uint64_t)res->n_steps);
    LLVMValueRef steps_g = LLVMAddGlobal(mod, LLVMTypeOf(steps_init), "attn.steps");
    LLVMSetInitializer(steps_g, steps_init);
    LLVMSetGlobalConstant(steps_g, true);
    LLVMSetLinkage(steps_g, LLVMPrivateLinkage);

    /* the table: {abi, n_buffers, n_steps, cpu_features, config bytes, buffers, steps} */
    LLVMValueRef cfg_bytes = LLVMConstStringInContext(llctx, (const char *)&cfg, sizeof cfg, true);
    LLVMTypeRef table_fields[7] = {i32, i32, i32, i32, LLVMTypeOf(cfg_bytes), ptr, ptr};
    LLVMTypeRef table_ty = LLVMStructTypeInContext(llctx, table_fields, 7, false);
    LLVMValueRef tf[7] = {LLVMConstInt(i32, ATTN_KERNELS_ABI, false),
                          LLVMConstInt(i32, (unsigned long long)res->n_buffers, false),
                          LLVMConstInt(i32, (unsigned long long)res->n_steps, false),
                          LLVMConstInt(i32, cg_table_features(&res->target, &g->cfg), false),
                          cfg_bytes,
                          buffers,
                          steps_g};
    LLVMValueRef table = LLVMAddGlobal(mod, table_ty, "attn.table");
    LLVMSetInitializer(table, LLVMConstNamedStruct(table_ty, tf, 7));
    LLVMSetGlobalConstant(table, true);
    LLVMSetLinkage(table, LLVMPrivateLinkage);
    LLVMSetAlignment(table, 8);

    /* const attn_kernels *<name>_kernels(void) { return &table; } */
    char fname[ATTN_NAME_MAX + 16];
    snprintf(fname, sizeof fname, "%s_kernels", name);
    LLVMValueRef fn = LLVMAddFunction(mod, fname, LLVMFunctionType(ptr, NULL, 0, false));
    LLVMSetLinkage(fn, LLVMExternalLinkage);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(llctx);
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(llctx, fn, "entry"));
    LLVMBuildRet(b, table);
    LLVMDisposeBuilder(b);
}
