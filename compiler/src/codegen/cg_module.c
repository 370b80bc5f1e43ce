/* cg_module.c: graph -> LLVM modules. Plans the buffers and the units
 * (one kernel per node that computes something, named
 * attnk_<graph>_<id>_<op> so JIT lookups and object symbols agree, in
 * graph order: that order is the table's step order; a split flash's
 * decode path; the table), then builds any set of units into a module:
 * all of them (objects), or one each on several threads (the JIT). */
#include <llvm-c/Analysis.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cg_build.h"

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
    case IR_OP_RMS_NORM: cg_emit_rms_norm(c, n, name); break;
    case IR_OP_MLA_LATENT: cg_emit_mla_latent(c, n, name); break;
    case IR_OP_MLA_QUERY: cg_emit_mla_query(c, n, name); break;
    case IR_OP_MLA_ROPE: cg_emit_mla_rope(c, n, name); break;
    case IR_OP_MLA_KEYS:
    case IR_OP_MLA_VALUES: cg_emit_mla_expand(c, n, name); break;
    case IR_OP_MLA_OUTPUT: cg_emit_mla_output(c, n, name); break;
    case IR_OP_BY_PREFILL: cg_emit_by_prefill(c, n, name); break;
    case IR_OP_SCALE:
    case IR_OP_SOFTCAP:
    case IR_OP_ALIBI:
    case IR_OP_MASK:
    case IR_OP_SCORE_MOD:
    case IR_OP_MASK_MOD:
    case IR_OP_SOFTMAX: cg_emit_rowwise(c, n, name); break;
    case IR_OP_INPUT:
    case IR_OP_MEMORY:
    case IR_OP_WEIGHT:
    case IR_OP_SLICE:
    case IR_OP_SPLIT_HEADS:
    case IR_OP_MERGE_HEADS:
    case IR_OP_COUNT: ATTNC_ASSERT(!"node without a kernel");
    }
}

/* Rough relative sizes of the kernels' code, for compiling the biggest
 * first (so the last unit a thread takes is a small one): the flash
 * kernel and its split path are the biggest, then the linears with their
 * micro-kernels; the others take a few milliseconds each. */
static int unit_cost(cg_unit_kind kind, const ir_node *n) {
    switch (kind) {
    case CG_UNIT_SPLIT: return 60;
    case CG_UNIT_NODE: return n->op == IR_OP_FLASH ? 90 : n->op == IR_OP_LINEAR ? 20 : 2;
    default: return 1;
    }
}

/* Appends a unit; its name goes to the ctx arena. */
static attnc_status add_unit(ir_graph *g, cg_result *r, cg_unit_kind kind, const ir_node *n,
                             attn_phase phase, const char *name) {
    cg_unit *u = &r->units[r->n_units++];
    bool vector_ir = kind == CG_UNIT_SPLIT || kind == CG_UNIT_MERGE ||
                     (kind == CG_UNIT_NODE && (n->op == IR_OP_FLASH || n->op == IR_OP_LINEAR));
    *u = (cg_unit){
        kind,     n, arena_strndup(&g->ctx->arena, name, strlen(name)), phase, unit_cost(kind, n),
        vector_ir};
    if (!u->name) {
        diag_error(g->ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
        return ATTNC_E_NOMEM;
    }
    if (kind != CG_UNIT_SPLIT && kind != CG_UNIT_TABLE) {
        r->step_names[r->n_steps] = u->name;
        /* the steps of a flash that takes shared-prefix calls (plan_cascade) */
        bool prefix = r->plan.cascade >= 0 && n && n->op == IR_OP_FLASH &&
                      (kind == CG_UNIT_NODE || kind == CG_UNIT_MERGE);
        r->step_flags[r->n_steps] = prefix ? ATTN_STEP_PREFIX : 0;
        r->step_phase[r->n_steps++] = phase;
    }
    return ATTNC_OK;
}

attnc_status cg_units_plan(ir_graph *g, const cg_target *t, cg_result *out) {
    memset(out, 0, sizeof *out);
    out->g = g;
    out->target = *t;
    attnc_status st = cg_plan_build(g, t, &out->plan);
    if (st != ATTNC_OK)
        return st;
    /* three kernels per node at most (a split flash: its split path and
     * merge), plus a load-time pack per linear, plus the table */
    size_t max_units = 4 * (size_t)g->n_nodes + 1;
    out->step_names = arena_alloc(&g->ctx->arena, max_units * sizeof *out->step_names);
    out->step_phase = arena_alloc(&g->ctx->arena, max_units * sizeof *out->step_phase);
    out->step_flags = arena_alloc(&g->ctx->arena, max_units * sizeof *out->step_flags);
    out->units = arena_alloc(&g->ctx->arena, max_units * sizeof *out->units);
    if (!out->step_names || !out->step_phase || !out->step_flags || !out->units) {
        diag_error(g->ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
        return ATTNC_E_NOMEM;
    }
    char name[160];
    for (int i = 0; st == ATTNC_OK && i < g->n_nodes; i++) { /* load phase first: packing */
        const ir_node *n = g->nodes[i];
        if (n->dead || n->op != IR_OP_LINEAR)
            continue;
        snprintf(name, sizeof name, "attnk_%s_%d_pack", ir_cfg_name(g), n->id);
        st = add_unit(g, out, CG_UNIT_PACK, n, ATTN_PHASE_LOAD, name);
    }
    for (int i = 0; st == ATTNC_OK && i < g->n_nodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->dead || !out->plan.emit[n->id])
            continue;
        attn_phase ph = out->plan.phase[n->id];
        snprintf(name, sizeof name, "attnk_%s_%d_%s", ir_cfg_name(g), n->id, ir_op_name(n->op));
        st = add_unit(g, out, CG_UNIT_NODE, n, ph, name);
        if (st == ATTNC_OK && n->op == IR_OP_FLASH && n->split_tokens) {
            snprintf(name, sizeof name, "attnk_%s_%d_flash_split", ir_cfg_name(g), n->id);
            if (!cg_split_by_flash(g))
                st = add_unit(g, out, CG_UNIT_SPLIT, n, ph, name);
            snprintf(name, sizeof name, "attnk_%s_%d_flash_merge", ir_cfg_name(g), n->id);
            if (st == ATTNC_OK)
                st = add_unit(g, out, CG_UNIT_MERGE, n, ph, name);
        }
    }
    snprintf(name, sizeof name, "%s_kernels", ir_cfg_name(g));
    if (st == ATTNC_OK)
        st = add_unit(g, out, CG_UNIT_TABLE, NULL, ATTN_PHASE_LOAD, name);
    out->n_buffers = out->plan.n_buffers;
    memcpy(out->buffers, out->plan.buffers, sizeof out->buffers);
    return st;
}

static void emit_unit(cg *c, const cg_result *r, const cg_unit *u) {
    c->phase = u->phase;
    c->gate = u->kind != CG_UNIT_PACK && u->n ? u->n->gate : 0;
    switch (u->kind) {
    case CG_UNIT_PACK: cg_emit_pack(c, u->n, u->name); break;
    case CG_UNIT_NODE: emit_node(c, u->n, u->name); break;
    case CG_UNIT_SPLIT:
        cg_kernel_begin(c, u->name);
        cg_emit_split_partials(c, u->n);
        cg_kernel_end(c);
        break;
    case CG_UNIT_MERGE: cg_emit_split_merge(c, u->n, u->name); break;
    case CG_UNIT_TABLE: cg_table_build(r, c->mod); break;
    }
}

LLVMModuleRef cg_units_build(const cg_result *r, const int *which, int n, LLVMContextRef llctx,
                             char **why) {
    cg c = {.g = r->g,
            .plan = &r->plan,
            .llctx = llctx,
            .n_buffers = r->plan.n_buffers,
            .target = r->target};
    char mod_name[ATTN_NAME_MAX + 24];
    snprintf(mod_name, sizeof mod_name, "attnc.%s.%d", ir_cfg_name(r->g), n == 1 ? which[0] : -1);
    c.mod = LLVMModuleCreateWithNameInContext(mod_name, llctx);
    c.b = LLVMCreateBuilderInContext(llctx);
    c.i16 = LLVMInt16TypeInContext(llctx);
    c.i32 = LLVMInt32TypeInContext(llctx);
    c.i64 = LLVMInt64TypeInContext(llctx);
    c.f16 = LLVMHalfTypeInContext(llctx);
    c.f32 = LLVMFloatTypeInContext(llctx);
    c.f64 = LLVMDoubleTypeInContext(llctx);
    c.ptr = LLVMPointerTypeInContext(llctx, 0);
    c.vf = LLVMVectorType(c.f32, (unsigned)r->target.lanes);
    c.vi = LLVMVectorType(c.i32, (unsigned)r->target.lanes);
    LLVMTypeRef params[3] = {c.ptr, c.i32, c.i32};
    c.kernel_ty = LLVMFunctionType(LLVMVoidTypeInContext(llctx), params, 3, false);
    for (int i = 0; i < n; i++)
        emit_unit(&c, r, &r->units[which[i]]);
    LLVMDisposeBuilder(c.b);
    *why = NULL;
    if (LLVMVerifyModule(c.mod, LLVMReturnStatusAction, why)) {
        LLVMDisposeModule(c.mod);
        return NULL;
    }
    LLVMDisposeMessage(*why);
    *why = NULL;
    return c.mod;
}
