/* cg_module.c: graph -> LLVM module. Plans the buffers, then emits one
 * kernel per node that computes something, named attnk_<graph>_<id>_<op>
 * so JIT lookups and object symbols agree, in graph order: that order is
 * the table's step order. */
#include <llvm-c/Analysis.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cg.h"

static void emit_node(cg *c, const ir_node *n, const char *name) {
    switch (n->op) {
    case IR_OP_LINEAR: cg_emit_linear(c, n, name); break;
    case IR_OP_ROPE: cg_emit_rope(c, n, name); break;
    case IR_OP_QK_NORM: cg_emit_qk_norm(c, n, name); break;
    case IR_OP_TEMPERATURE: cg_emit_temperature(c, n, name); break;
    case IR_OP_CACHE_APPEND:
    case IR_OP_GQA_EXPAND:
    case IR_OP_OUTPUT: cg_emit_copy(c, n, name); break;
    case IR_OP_QK: cg_emit_qk(c, n, name); break;
    case IR_OP_FLASH: cg_emit_flash(c, n, name); break;
    case IR_OP_ROPE_TABLE: cg_emit_rope_table(c, n, name); break;
    case IR_OP_PV: cg_emit_pv(c, n, name); break;
    case IR_OP_SCALE:
    case IR_OP_SOFTCAP:
    case IR_OP_ALIBI:
    case IR_OP_MASK:
    case IR_OP_SOFTMAX: cg_emit_rowwise(c, n, name); break;
    case IR_OP_INPUT:
    case IR_OP_WEIGHT:
    case IR_OP_SLICE:
    case IR_OP_SPLIT_HEADS:
    case IR_OP_MERGE_HEADS:
    case IR_OP_COUNT: ATTNC_ASSERT(!"node without a kernel");
    }
}

attnc_status cg_module_build(ir_graph *g, LLVMContextRef llctx, const cg_target *t,
                             cg_result *out) {
    cg_plan plan;
    attnc_status st = cg_plan_build(g, t, &plan);
    if (st != ATTNC_OK)
        return st;
    /* two kernels per node at most (a split flash: its merge), plus a
     * load-time pack per linear */
    size_t max_steps = 3 * (size_t)g->n_nodes;
    const char **names = arena_alloc(&g->ctx->arena, max_steps * sizeof *names);
    attn_phase *phases = arena_alloc(&g->ctx->arena, max_steps * sizeof *phases);
    if (!names || !phases) {
        diag_error(g->ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
        return ATTNC_E_NOMEM;
    }
    cg c = {.g = g, .plan = &plan, .llctx = llctx, .n_buffers = plan.n_buffers, .target = *t};
    char mod_name[ATTN_NAME_MAX + 8];
    snprintf(mod_name, sizeof mod_name, "attnc.%s", g->cfg.name);
    c.mod = LLVMModuleCreateWithNameInContext(mod_name, llctx);
    c.b = LLVMCreateBuilderInContext(llctx);
    c.i16 = LLVMInt16TypeInContext(llctx);
    c.i32 = LLVMInt32TypeInContext(llctx);
    c.i64 = LLVMInt64TypeInContext(llctx);
    c.f16 = LLVMHalfTypeInContext(llctx);
    c.f32 = LLVMFloatTypeInContext(llctx);
    c.f64 = LLVMDoubleTypeInContext(llctx);
    c.ptr = LLVMPointerTypeInContext(llctx, 0);
    c.vf = LLVMVectorType(c.f32, (unsigned)t->lanes);
    c.vi = LLVMVectorType(c.i32, (unsigned)t->lanes);
    LLVMTypeRef params[3] = {c.ptr, c.i32, c.i32};
    c.kernel_ty = LLVMFunctionType(LLVMVoidTypeInContext(llctx), params, 3, false);

    int n_steps = 0;
    for (int i = 0; i < g->n_nodes; i++) { /* load phase first: packing */
        const ir_node *n = g->nodes[i];
        if (n->dead || n->op != IR_OP_LINEAR)
            continue;
        char name[128];
        snprintf(name, sizeof name, "attnk_%s_%d_pack", g->cfg.name, n->id);
        c.phase = phases[n_steps] = ATTN_PHASE_LOAD;
        cg_emit_pack(&c, n, name);
        names[n_steps++] = arena_strndup(&g->ctx->arena, name, strlen(name));
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->dead || !plan.emit[n->id])
            continue;
        char name[128];
        snprintf(name, sizeof name, "attnk_%s_%d_%s", g->cfg.name, n->id, ir_op_name(n->op));
        c.phase = plan.phase[n->id];
        phases[n_steps] = c.phase;
        emit_node(&c, n, name);
        names[n_steps++] = arena_strndup(&g->ctx->arena, name, strlen(name));
        if (n->op == IR_OP_FLASH && n->split_tokens) {
            snprintf(name, sizeof name, "attnk_%s_%d_flash_merge", g->cfg.name, n->id);
            phases[n_steps] = c.phase;
            cg_emit_split_merge(&c, n, name);
            names[n_steps++] = arena_strndup(&g->ctx->arena, name, strlen(name));
        }
    }
    LLVMDisposeBuilder(c.b);
    char *why = NULL;
    if (LLVMVerifyModule(c.mod, LLVMReturnStatusAction, &why)) {
        diag_error(g->ctx, ATTNC_E_LLVM, (attnc_loc){0}, "generated module is invalid: %s",
                   why ? why : "?");
        LLVMDisposeMessage(why);
        LLVMDisposeModule(c.mod);
        return ATTNC_E_LLVM;
    }
    LLVMDisposeMessage(why);
    out->module = c.mod;
    out->n_buffers = plan.n_buffers;
    memcpy(out->buffers, plan.buffers, sizeof plan.buffers);
    out->n_steps = n_steps;
    out->step_names = names;
    out->step_phase = phases;
    return ATTNC_OK;
}
