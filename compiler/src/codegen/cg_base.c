/* cg_base.c: what every kernel family builds with: kernel entry, loops,
 * thread shares, addressing through views, dtype loads and stores, and
 * exp/tanh as polynomials in the IR. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_build.h"

static LLVMValueRef iconst(LLVMTypeRef ty, unsigned long long v);

unsigned cg_elem_bytes(attn_dtype dt) {
    return attn_dtype_block(dt) > 1 ? 1 : (unsigned)attn_dtype_size(dt);
}

LLVMValueRef cg_i64(cg *c, int64_t v) {
    return LLVMConstInt(c->i64, (unsigned long long)v, true);
}

LLVMValueRef cg_f32(cg *c, double v) {
    return LLVMConstReal(c->f32, v);
}

static LLVMValueRef args_field(cg *c, unsigned byte_off, LLVMTypeRef ty, const char *name) {
    LLVMValueRef off = cg_i64(c, byte_off);
    LLVMValueRef p = LLVMBuildGEP2(c->b, LLVMInt8TypeInContext(c->llctx), c->args, &off, 1, "");
    return LLVMBuildLoad2(c->b, ty, p, name);
}

/* Entry block of fn and everything a kernel reads from its args. */
static void function_begin(cg *c, LLVMValueRef fn) {
    c->fn = fn;
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "entry");
    LLVMPositionBuilderAtEnd(c->b, entry);
    c->args = LLVMGetParam(c->fn, 0);
    c->S = args_field(c, offsetof(attn_kernel_args, n_tokens), c->i64, "S");
    c->P = args_field(c, offsetof(attn_kernel_args, n_past), c->i64, "P");
    /* cross-attention: the keys are the n_past memory rows */
    c->T = ir_cfg_memory_dim(c->g) > 0 ? c->P : LLVMBuildAdd(c->b, c->P, c->S, "T");
    c->tok0 = args_field(c, offsetof(attn_kernel_args, tok0), c->i64, "tok0");
    c->pos = args_field(c, offsetof(attn_kernel_args, pos), c->ptr, "pos");
    c->slot = args_field(c, offsetof(attn_kernel_args, slot), c->ptr, "slot");
    c->table = args_field(c, offsetof(attn_kernel_args, block_table), c->ptr, "table");
    c->tree = args_field(c, offsetof(attn_kernel_args, tree), c->ptr, "tree");
    c->prefix = c->n_shared = NULL;
    if (c->plan && c->plan->cascade >= 0 && c->phase == ATTN_PHASE_SEQUENCE) {
        LLVMValueRef flags = args_field(c, offsetof(attn_kernel_args, flags), c->i32, "flags");
        LLVMValueRef bit = LLVMConstInt(c->i32, ATTN_ARGS_PREFIX, false);
        c->prefix =
            LLVMBuildICmp(c->b, LLVMIntEQ, LLVMBuildAnd(c->b, flags, bit, ""), bit, "prefix");
        c->n_shared = args_field(c, offsetof(attn_kernel_args, n_shared), c->i64, "n_shared");
        c->T = LLVMBuildSelect(c->b, c->prefix, c->P, c->T, "T"); /* the prefix's keys only */
    }
    c->jlo = c->phase == ATTN_PHASE_SEQUENCE ? cg_first_key(c) : cg_i64(c, 0);
    c->Tk = LLVMBuildSub(c->b, c->T, c->jlo, "Tk");
    /* Loaded here, once: reloading them next to each access would let every
     * float store in a loop possibly change them, which stops vectorization. */
    ATTNC_ASSERT(c->n_buffers <= ATTN_MAX_BUFFERS);
    for (int k = 0; k < c->n_buffers; k++) {
        unsigned byte_off =
            (unsigned)(offsetof(attn_kernel_args, buf) + (size_t)k * sizeof(void *));
        c->base[k] = args_field(c, byte_off, c->ptr, "buf");
    }
    for (int i = 0; c->plan && i < ATTN_EXPR_MAX_INPUTS; i++) {
        int k = c->plan->input_buf[i];
        c->in_ptr[i] = c->in_len[i] = NULL;
        if (k < 0 || c->phase != ATTN_PHASE_SEQUENCE) /* bound for the sequence phase only */
            continue;
        uint32_t role = c->plan->buffers[k].role;
        if (role == ATTN_BUF_TOKEN_INPUT) {
            LLVMValueRef eight = cg_i64(c, offsetof(attn_token_input, n));
            c->in_ptr[i] = LLVMBuildLoad2(c->b, c->ptr, c->base[k], "in_v");
            c->in_len[i] =
                LLVMBuildTrunc(c->b,
                               LLVMBuildLoad2(c->b, c->i64,
                                              LLVMBuildGEP2(c->b, LLVMInt8TypeInContext(c->llctx),
                                                            c->base[k], &eight, 1, ""),
                                              "in_n"),
                               c->i32, "");
        } else if (role == ATTN_BUF_SEQ_INPUT) {
            c->in_len[i] = LLVMBuildLoad2(c->b, c->i32, c->base[k], "in_seq");
        } else {
            c->in_ptr[i] = c->base[k];
        }
    }
}

LLVMValueRef cg_kernel_decl(cg *c, const char *name) {
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (!fn) {
        fn = LLVMAddFunction(c->mod, name, c->kernel_ty);
        LLVMSetLinkage(fn, LLVMExternalLinkage);
    }
    return fn;
}

void cg_kernel_begin(cg *c, const char *name) {
    LLVMValueRef fn = cg_kernel_decl(c, name);
    ATTNC_ASSERT(LLVMCountBasicBlocks(fn) == 0);
    function_begin(c, fn);
    c->ith = LLVMBuildZExt(c->b, LLVMGetParam(c->fn, 1), c->i64, "ith");
    c->nth = LLVMBuildZExt(c->b, LLVMGetParam(c->fn, 2), c->i64, "nth");
    if (!c->gate)
        return;
    /* a gated node's kernel: on only in its calls (ir.h) */
    LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "gate_on");
    LLVMBasicBlockRef off = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "gate_off");
    LLVMValueRef on = cg_prefill_at_least(c, c->gate > 0 ? c->gate : -c->gate);
    LLVMBuildCondBr(c->b, on, c->gate > 0 ? run : off, c->gate > 0 ? off : run);
    LLVMPositionBuilderAtEnd(c->b, off);
    LLVMBuildRetVoid(c->b);
    LLVMPositionBuilderAtEnd(c->b, run);
}

LLVMValueRef cg_prefill_at_least(cg *c, int64_t tokens) {
    return LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntSGE, c->S, cg_i64(c, tokens), ""),
                        LLVMBuildICmp(c->b, LLVMIntEQ, c->P, cg_i64(c, 0), ""), "prefill");
}

LLVMValueRef cg_helper_begin(cg *c, const char *name, LLVMTypeRef *params, int n) {
    LLVMTypeRef ty = LLVMFunctionType(LLVMVoidTypeInContext(c->llctx), params, (unsigned)n, false);
    LLVMValueRef fn = LLVMAddFunction(c->mod, name, ty);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    function_begin(c, fn);
    c->ith = cg_i64(c, 0);
    c->nth = cg_i64(c, 1);
    return fn;
}

LLVMValueRef cg_slot(cg *c, LLVMTypeRef ty, LLVMValueRef init) {
    LLVMBasicBlockRef here = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(c->fn);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first)
        LLVMPositionBuilderBefore(c->b, first);
    else
        LLVMPositionBuilderAtEnd(c->b, entry);
    LLVMValueRef slot = LLVMBuildAlloca(c->b, ty, "slot");
    LLVMPositionBuilderAtEnd(c->b, here);
    if (init)
        LLVMBuildStore(c->b, init, slot);
    return slot;
}

LLVMValueRef cg_opaque_ptr(cg *c, LLVMValueRef p) {
    LLVMValueRef slot = cg_slot(c, c->ptr, NULL);
    LLVMSetVolatile(LLVMBuildStore(c->b, p, slot), 1);
    LLVMValueRef q = LLVMBuildLoad2(c->b, c->ptr, slot, "");
    LLVMSetVolatile(q, 1);
    return q;
}

void cg_kernel_end(cg *c) {
    LLVMBuildRetVoid(c->b);
}

/* d with T standing for the value t. */
static LLVMValueRef dim_with_t(cg *c, ir_dim d, LLVMValueRef t) {
    LLVMValueRef v = cg_i64(c, d.c);
    if (d.s)
        v = LLVMBuildAdd(c->b, v, LLVMBuildMul(c->b, c->S, cg_i64(c, d.s), ""), "");
    if (d.t)
        v = LLVMBuildAdd(c->b, v, LLVMBuildMul(c->b, t, cg_i64(c, d.t), ""), "");
    if (d.st)
        v = LLVMBuildAdd(
            c->b, v, LLVMBuildMul(c->b, LLVMBuildMul(c->b, c->S, t, ""), cg_i64(c, d.st), ""), "");
    return v;
}

LLVMValueRef cg_dim(cg *c, ir_dim d) {
    return dim_with_t(c, d, c->T);
}

cg_loop cg_for(cg *c, LLVMValueRef lo, LLVMValueRef hi, const char *name) {
    cg_loop l;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
    l.header = LLVMAppendBasicBlockInContext(c->llctx, c->fn, name);
    l.body = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "body");
    l.exit = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "exit");
    LLVMBuildBr(c->b, l.header);
    LLVMPositionBuilderAtEnd(c->b, l.header);
    l.phi = LLVMBuildPhi(c->b, c->i64, name);
    LLVMAddIncoming(l.phi, &lo, &pre, 1);
    LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, l.phi, hi, ""), l.body, l.exit);
    LLVMPositionBuilderAtEnd(c->b, l.body);
    l.i = l.phi;
    return l;
}

void cg_for_end(cg *c, cg_loop *l) {
    LLVMValueRef next = LLVMBuildAdd(c->b, l->phi, cg_i64(c, 1), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(c->b);
    LLVMAddIncoming(l->phi, &next, &latch, 1);
    LLVMBuildBr(c->b, l->header);
    LLVMPositionBuilderAtEnd(c->b, l->exit);
}

void cg_acc_loop_begin(cg *c, cg_acc_loop *l, const char *name, LLVMTypeRef ty, int n) {
    ATTNC_ASSERT(n <= 64);
    l->n = n;
    l->pre = LLVMGetInsertBlock(c->b);
    l->body = LLVMAppendBasicBlockInContext(c->llctx, c->fn, name);
    l->exit = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "exit");
    LLVMBuildBr(c->b, l->body);
    LLVMPositionBuilderAtEnd(c->b, l->body);
    l->i = LLVMBuildPhi(c->b, c->i64, name);
    for (int k = 0; k < n; k++)
        l->acc[k] = LLVMBuildPhi(c->b, ty, "acc");
}

void cg_acc_loop_end(cg *c, cg_acc_loop *l, LLVMValueRef hi, const LLVMValueRef *init,
                     const LLVMValueRef *next) {
    LLVMValueRef i1 = LLVMBuildAdd(c->b, l->i, cg_i64(c, 1), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(c->b), pre = l->pre;
    LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, i1, hi, ""), l->body, l->exit);
    LLVMValueRef zero = cg_i64(c, 0);
    LLVMAddIncoming(l->i, &zero, &pre, 1);
    LLVMAddIncoming(l->i, &i1, &latch, 1);
    for (int k = 0; k < l->n; k++) {
        LLVMAddIncoming(l->acc[k], (LLVMValueRef *)&init[k], &pre, 1);
        LLVMAddIncoming(l->acc[k], (LLVMValueRef *)&next[k], &latch, 1);
    }
    LLVMPositionBuilderAtEnd(c->b, l->exit);
}

void cg_share_of(cg *c, LLVMValueRef n, LLVMValueRef i, LLVMValueRef t, LLVMValueRef *lo,
                 LLVMValueRef *hi) {
    /* [n*i/t, n*(i+1)/t): contiguous, covering, fixed by i alone */
    LLVMValueRef a = LLVMBuildMul(c->b, n, i, "");
    LLVMValueRef b = LLVMBuildMul(c->b, n, LLVMBuildAdd(c->b, i, cg_i64(c, 1), ""), "");
    *lo = LLVMBuildSDiv(c->b, a, t, "lo");
    *hi = LLVMBuildSDiv(c->b, b, t, "hi");
}

void cg_share(cg *c, LLVMValueRef n, LLVMValueRef *lo, LLVMValueRef *hi) {
    cg_share_of(c, n, c->ith, c->nth, lo, hi);
}

LLVMTypeRef cg_elem_type(cg *c, attn_dtype dt) {
    switch (dt) {
    case ATTN_DTYPE_F32: return c->f32;
    case ATTN_DTYPE_F16: return c->f16;
    case ATTN_DTYPE_BF16: return c->i16;
    case ATTN_DTYPE_Q8_0: return LLVMInt8TypeInContext(c->llctx); /* q; d: cg_cache_scale */
    case ATTN_DTYPE_Q4_0: /* weights only: cg_gemm.c reads them itself */
    case ATTN_DTYPE_COUNT: break;
    }
    ATTNC_ASSERT(!"dtype");
    return NULL;
}

LLVMValueRef cg_buf_elem(cg *c, int k, attn_dtype dt, LLVMValueRef off) {
    ATTNC_ASSERT(k >= 0 && k < c->n_buffers);
    return LLVMBuildInBoundsGEP2(c->b, cg_elem_type(c, dt), c->base[k], &off, 1, "");
}

LLVMValueRef cg_first_key_at(cg *c, LLVMValueRef pos) {
    /* attn_first_key: the larger of the window's first key and the
     * chunk's start */
    if (!ir_cfg_causal(c->g) || (ir_cfg_sliding_window(c->g) <= 0 && ir_cfg_chunk(c->g) <= 0))
        return NULL;
    LLVMTypeRef ty = LLVMTypeOf(pos); /* constants of it: both are at least 0 */
    LLVMValueRef first = iconst(ty, 0);
    if (ir_cfg_sliding_window(c->g) > 0)
        first = cg_intrinsic(
            c, "llvm.smax", ty, first,
            LLVMBuildSub(c->b, pos,
                         iconst(ty, (unsigned long long)(ir_cfg_sliding_window(c->g) - 1)), ""));
    if (ir_cfg_chunk(c->g) > 0) {
        LLVMValueRef n = iconst(ty, (unsigned long long)ir_cfg_chunk(c->g));
        LLVMValueRef start = LLVMBuildMul(c->b, LLVMBuildUDiv(c->b, pos, n, ""), n, "chunk_start");
        first = cg_intrinsic(c, "llvm.smax", ty, first, start);
    }
    return first;
}

LLVMValueRef cg_first_key(cg *c) {
    LLVMValueRef first = cg_first_key_at(c, c->P);
    return first ? first : cg_i64(c, 0);
}

LLVMValueRef cg_const_table(cg *c, LLVMTypeRef elem, const double *v, int64_t n, const char *name) {
    LLVMValueRef *consts = malloc((size_t)n * sizeof *consts);
    ATTNC_ASSERT(consts);
    for (int64_t i = 0; i < n; i++)
        consts[i] = LLVMConstReal(elem, v[i]);
    LLVMTypeRef ty = LLVMArrayType2(elem, (uint64_t)n);
    LLVMValueRef table = LLVMAddGlobal(c->mod, ty, name);
    LLVMSetInitializer(table, LLVMConstArray2(elem, consts, (uint64_t)n));
    LLVMSetGlobalConstant(table, true);
    LLVMSetLinkage(table, LLVMPrivateLinkage);
    free(consts);
    return table;
}

LLVMValueRef cg_alibi_slope(cg *c, LLVMValueRef head) {
    LLVMValueRef table = LLVMGetNamedGlobal(c->mod, "attnc.alibi_slopes");
    if (!table) { /* one per module */
        double slopes[ATTN_MAX_HEADS];
        ir_cfg_alibi_slopes(c->g, slopes);
        table = cg_const_table(c, c->f32, slopes, ir_cfg_heads(c->g), "attnc.alibi_slopes");
    }
    return LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, table, head), "slope");
}

void cg_cache_strides(const ir_graph *g, int which, int64_t *col_stride, int64_t *tok_stride) {
    int64_t kvd = ir_cfg_cache_columns(g, which);
    *col_stride = which ? 1 : ir_cfg_kv_block_tokens(g);
    *tok_stride = which ? kvd : 1;
}

/* The elements of one pool block: bt * kvd values (K's and V's kvd are
 * equal, MLA has K only); a q8_0 block holds their bt * kvd int8 q, then
 * their bt * kvd / 32 f16 d (cg_cache_scale), counted in bytes (q8_0's
 * element). */
static int64_t cache_block_elems(const ir_graph *g) {
    int64_t n = ir_cfg_kv_block_tokens(g) * ir_cfg_cache_columns(g, 0);
    return ir_cfg_kv_dtype(g) == ATTN_DTYPE_Q8_0 ? n + n / 16 : n;
}

/* Element offset of token offset o (tok_stride apart) of pool block blk:
 * the block's start plus o's place in it. */
static LLVMValueRef block_off(cg *c, LLVMValueRef blk, LLVMValueRef o, int64_t tok_stride) {
    LLVMValueRef start = LLVMBuildMul(c->b, blk, cg_i64(c, cache_block_elems(c->g)), "");
    return LLVMBuildAdd(c->b, start, LLVMBuildMul(c->b, o, cg_i64(c, tok_stride), ""), "");
}

LLVMValueRef cg_cache_scale(cg *c, int which, int buf, LLVMValueRef p) {
    int64_t bt = ir_cfg_kv_block_tokens(c->g), data = bt * ir_cfg_cache_columns(c->g, 0),
            bb = cache_block_elems(c->g);
    LLVMTypeRef pty = LLVMTypeOf(p), ity = cg_like(pty, c->i64);
    bool vec = LLVMGetTypeKind(pty) == LLVMVectorTypeKind;
    LLVMValueRef base = c->base[buf];
    LLVMValueRef b0 = LLVMBuildPtrToInt(c->b, base, c->i64, "");
    LLVMValueRef off =
        LLVMBuildSub(c->b, LLVMBuildPtrToInt(c->b, p, ity, ""), vec ? cg_splat(c, b0) : b0, "");
    LLVMValueRef blk = LLVMBuildUDiv(c->b, off, iconst(ity, (unsigned long long)bb), "");
    LLVMValueRef w = LLVMBuildURem(c->b, off, iconst(ity, (unsigned long long)bb), "");
    /* K [kvd][bt]: column w / bt, token w % bt; V [bt][kvd]: token w /
     * kvd, column w % kvd; d of both at (column / 32) * bt + token: a
     * block's tokens side by side, as K's values are */
    int64_t kvd = ir_cfg_cache_columns(c->g, which);
    LLVMValueRef col = which ? LLVMBuildURem(c->b, w, iconst(ity, (unsigned long long)kvd), "")
                             : LLVMBuildUDiv(c->b, w, iconst(ity, (unsigned long long)bt), "");
    LLVMValueRef tok = which ? LLVMBuildUDiv(c->b, w, iconst(ity, (unsigned long long)kvd), "")
                             : LLVMBuildURem(c->b, w, iconst(ity, (unsigned long long)bt), "");
    LLVMValueRef s = LLVMBuildAdd(c->b,
                                  LLVMBuildMul(c->b, LLVMBuildUDiv(c->b, col, iconst(ity, 32), ""),
                                               iconst(ity, (unsigned long long)bt), ""),
                                  tok, "");
    LLVMValueRef at =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, blk, iconst(ity, (unsigned long long)bb), ""),
                     LLVMBuildAdd(c->b, iconst(ity, (unsigned long long)data),
                                  LLVMBuildMul(c->b, s, iconst(ity, 2), ""), ""),
                     "");
    return LLVMBuildGEP2(c->b, LLVMInt8TypeInContext(c->llctx), base, &at, 1, "scale");
}

LLVMValueRef cg_cache_scale_step(cg *c, LLVMValueRef col) {
    return LLVMBuildMul(c->b, LLVMBuildUDiv(c->b, col, cg_i64(c, 32), ""),
                        cg_i64(c, ir_cfg_kv_block_tokens(c->g)), "");
}

int cg_cache_which(const cg *c, const ir_node *n) {
    const cg_view *v = &c->plan->view[n->id];
    int64_t ts;
    if (!v->paged || !ir_dim_is_const(v->nb[2], &ts))
        return -1;
    return ts == 1 ? 0 : 1; /* K keeps a column's tokens side by side */
}

LLVMValueRef cg_load_elem(cg *c, const ir_node *n, LLVMValueRef p) {
    const cg_view *v = &c->plan->view[n->id];
    LLVMValueRef x = cg_load(c, v->dt, p);
    if (v->dt != ATTN_DTYPE_Q8_0)
        return x;
    LLVMValueRef d = cg_load(c, ATTN_DTYPE_F16, cg_cache_scale(c, cg_cache_which(c, n), v->buf, p));
    return LLVMBuildFMul(c->b, x, d, ""); /* exact: d * q */
}

LLVMValueRef cg_cache_elem(cg *c, int which, int buf, attn_dtype dt, LLVMValueRef slot,
                           LLVMValueRef col) {
    int64_t cs, ts, bt = ir_cfg_kv_block_tokens(c->g);
    cg_cache_strides(c->g, which, &cs, &ts);
    LLVMValueRef off = block_off(c, LLVMBuildSDiv(c->b, slot, cg_i64(c, bt), ""),
                                 LLVMBuildSRem(c->b, slot, cg_i64(c, bt), ""), ts);
    off = LLVMBuildAdd(c->b, off, LLVMBuildMul(c->b, col, cg_i64(c, cs), ""), "");
    return cg_buf_elem(c, buf, dt, off);
}

/* Offset of the sequence's token j in the pool (a view's dim 2, stride
 * tok_stride within its block): through the block table. */
static LLVMValueRef paged_off(cg *c, LLVMValueRef j, int64_t tok_stride) {
    LLVMValueRef bt = cg_i64(c, ir_cfg_kv_block_tokens(c->g));
    LLVMValueRef blk_idx = LLVMBuildSDiv(c->b, j, bt, "");
    LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->i32, c->table, &blk_idx, 1, "");
    LLVMValueRef blk = LLVMBuildSExt(c->b, LLVMBuildLoad2(c->b, c->i32, p, "block"), c->i64, "");
    return block_off(c, blk, LLVMBuildSRem(c->b, j, bt, ""), tok_stride);
}

LLVMValueRef cg_addr(cg *c, const ir_node *n, LLVMValueRef const *idx) {
    const cg_view *v = &c->plan->view[n->id];
    LLVMValueRef t = v->from_first_key ? c->Tk : c->T;
    LLVMValueRef off = dim_with_t(c, v->off, t);
    for (int d = 0; d < n->ndim; d++) {
        LLVMValueRef i = idx[d];
        if (v->paged && d == 2) {
            int64_t ts;
            ATTNC_ASSERT(ir_dim_is_const(v->nb[2], &ts));
            off = LLVMBuildAdd(c->b, off, paged_off(c, i, ts), "");
            continue;
        }
        if (v->batch_rows && d == n->ndim - 1 && c->phase == ATTN_PHASE_SEQUENCE)
            i = LLVMBuildAdd(c->b, i, c->tok0, "");
        else if (v->from_first_key && ir_dim_eq(n->ne[d], ir_sym_t()))
            i = LLVMBuildSub(c->b, i, c->jlo, "");
        off = LLVMBuildAdd(c->b, off, LLVMBuildMul(c->b, i, dim_with_t(c, v->nb[d], t), ""), "");
    }
    return cg_buf_elem(c, v->buf, v->dt, off);
}

LLVMValueRef cg_load(cg *c, attn_dtype dt, LLVMValueRef p) {
    LLVMValueRef v = LLVMBuildLoad2(c->b, cg_elem_type(c, dt), p, "");
    switch (dt) {
    case ATTN_DTYPE_F32: return v;
    case ATTN_DTYPE_F16: return LLVMBuildFPExt(c->b, v, c->f32, "");
    case ATTN_DTYPE_BF16: {
        LLVMValueRef w = LLVMBuildShl(c->b, LLVMBuildZExt(c->b, v, c->i32, ""),
                                      LLVMConstInt(c->i32, 16, false), "");
        return LLVMBuildBitCast(c->b, w, c->f32, "");
    }
    case ATTN_DTYPE_Q8_0: return LLVMBuildSIToFP(c->b, v, c->f32, ""); /* q, to be times d */
    case ATTN_DTYPE_Q4_0:
    case ATTN_DTYPE_COUNT: break;
    }
    return v;
}

void cg_store(cg *c, attn_dtype dt, LLVMValueRef v, LLVMValueRef p) {
    LLVMTypeRef ty = LLVMTypeOf(v), ity = cg_like(ty, c->i32);
    switch (dt) {
    case ATTN_DTYPE_F32: break;
    case ATTN_DTYPE_F16: v = LLVMBuildFPTrunc(c->b, v, cg_like(ty, c->f16), ""); break;
    case ATTN_DTYPE_BF16: {
        /* round to nearest even; NaN stays a quiet NaN (as the runtime) */
        LLVMValueRef u = LLVMBuildBitCast(c->b, v, ity, "");
        LLVMValueRef k16 = iconst(ity, 16);
        LLVMValueRef odd = LLVMBuildAnd(c->b, LLVMBuildLShr(c->b, u, k16, ""), iconst(ity, 1), "");
        LLVMValueRef r =
            LLVMBuildAdd(c->b, u, LLVMBuildAdd(c->b, iconst(ity, 0x7fff), odd, ""), "");
        LLVMValueRef abs = LLVMBuildAnd(c->b, u, iconst(ity, 0x7fffffff), "");
        LLVMValueRef nan = LLVMBuildICmp(c->b, LLVMIntUGT, abs, iconst(ity, 0x7f800000), "");
        LLVMValueRef qnan = LLVMBuildOr(c->b, u, iconst(ity, 0x00400000), "");
        v = LLVMBuildTrunc(c->b,
                           LLVMBuildLShr(c->b, LLVMBuildSelect(c->b, nan, qnan, r, ""), k16, ""),
                           cg_like(ty, c->i16), "");
        break;
    }
    case ATTN_DTYPE_Q8_0: /* blocks: cg_gemm.c reads them itself */
    case ATTN_DTYPE_Q4_0:
    case ATTN_DTYPE_COUNT: break;
    }
    ATTNC_ASSERT(attn_dtype_block(dt) == 1); /* blocks are stored by their kernels */
    LLVMValueRef st = LLVMBuildStore(c->b, v, p);
    LLVMSetAlignment(st, cg_elem_bytes(dt));
}

LLVMValueRef cg_const_splat(LLVMTypeRef ty, LLVMValueRef one) {
    if (LLVMGetTypeKind(ty) != LLVMVectorTypeKind)
        return one;
    unsigned n = LLVMGetVectorSize(ty);
    LLVMValueRef e[64];
    ATTNC_ASSERT(n <= 64);
    for (unsigned i = 0; i < n; i++)
        e[i] = one;
    return LLVMConstVector(e, n);
}

static LLVMTypeRef elem_of(LLVMTypeRef ty) {
    return LLVMGetTypeKind(ty) == LLVMVectorTypeKind ? LLVMGetElementType(ty) : ty;
}

/* A constant of type ty (scalar or vector) with every element v. */
static LLVMValueRef fconst(LLVMTypeRef ty, double v) {
    return cg_const_splat(ty, LLVMConstReal(elem_of(ty), v));
}

static LLVMValueRef iconst(LLVMTypeRef ty, unsigned long long v) {
    return cg_const_splat(ty, LLVMConstInt(elem_of(ty), v, false));
}

LLVMTypeRef cg_like(LLVMTypeRef ty, LLVMTypeRef elem) {
    return LLVMGetTypeKind(ty) == LLVMVectorTypeKind ? LLVMVectorType(elem, LLVMGetVectorSize(ty))
                                                     : elem;
}

LLVMValueRef cg_tree_bits(cg *c, LLVMValueRef t) {
    if (!ir_cfg_tree(c->g))
        return NULL;
    /* no tree: one constant word of ones instead; else tree[min(t, 63)]
     * (rows past the call's tokens read a word nothing uses) */
    const char *name = "attnc.tree_none";
    LLVMValueRef none = LLVMGetNamedGlobal(c->mod, name);
    if (!none) {
        none = LLVMAddGlobal(c->mod, c->i64, name);
        LLVMSetInitializer(none, LLVMConstAllOnes(c->i64));
        LLVMSetGlobalConstant(none, true);
        LLVMSetLinkage(none, LLVMPrivateLinkage);
    }
    LLVMValueRef i = cg_intrinsic(c, "llvm.umin", c->i64, t, cg_i64(c, 63));
    LLVMValueRef at = LLVMBuildGEP2(c->b, c->i64, c->tree, &i, 1, "");
    LLVMValueRef is_none = LLVMBuildICmp(c->b, LLVMIntEQ, c->tree, LLVMConstNull(c->ptr), "");
    return LLVMBuildLoad2(c->b, c->i64, LLVMBuildSelect(c->b, is_none, none, at, ""), "tree_bits");
}

LLVMValueRef cg_tree_hidden(cg *c, LLVMValueRef keys, LLVMValueRef bits) {
    LLVMTypeRef ty = LLVMTypeOf(bits);
    bool vec = LLVMGetTypeKind(ty) == LLVMVectorTypeKind;
    /* k = key - P: a key of the call when k >= 0, seen when bit k is set
     * (k < 64 there: the causal mask hides keys past the row's token) */
    LLVMValueRef k = LLVMBuildSub(c->b, LLVMBuildSExtOrBitCast(c->b, keys, ty, ""),
                                  vec ? cg_splat(c, c->P) : c->P, "");
    LLVMValueRef shift = cg_intrinsic(c, "llvm.umin", ty, k, iconst(ty, 63));
    LLVMValueRef bit = LLVMBuildAnd(c->b, LLVMBuildLShr(c->b, bits, shift, ""), iconst(ty, 1), "");
    return LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntSGE, k, iconst(ty, 0), ""),
                        LLVMBuildICmp(c->b, LLVMIntEQ, bit, iconst(ty, 0), ""), "tree_hidden");
}

LLVMValueRef cg_splat(cg *c, LLVMValueRef s) {
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), (unsigned)c->target.lanes);
    LLVMValueRef v =
        LLVMBuildInsertElement(c->b, LLVMGetPoison(vt), s, LLVMConstInt(c->i32, 0, false), "");
    return LLVMBuildShuffleVector(c->b, v, LLVMGetPoison(vt),
                                  LLVMConstNull(LLVMVectorType(c->i32, (unsigned)c->target.lanes)),
                                  "splat");
}

LLVMValueRef cg_shuffle2(cg *c, LLVMValueRef a, LLVMValueRef b, const int *idx, int n) {
    LLVMValueRef mask[256];
    ATTNC_ASSERT(n <= 256);
    for (int i = 0; i < n; i++)
        mask[i] = LLVMConstInt(c->i32, (unsigned long long)idx[i], false);
    return LLVMBuildShuffleVector(c->b, a, b ? b : LLVMGetPoison(LLVMTypeOf(a)),
                                  LLVMConstVector(mask, (unsigned)n), "");
}

LLVMValueRef cg_concat(cg *c, const LLVMValueRef *v, int n) {
    if (n == 1)
        return v[0];
    ATTNC_ASSERT(n % 2 == 0);
    LLVMValueRef a = cg_concat(c, v, n / 2), b = cg_concat(c, v + n / 2, n / 2);
    int m = 2 * (int)LLVMGetVectorSize(LLVMTypeOf(a)), idx[256];
    for (int i = 0; i < m; i++)
        idx[i] = i;
    return cg_shuffle2(c, a, b, idx, m);
}

LLVMValueRef cg_vf32(cg *c, double v) {
    return fconst(c->vf, v);
}

LLVMValueRef cg_lane_ids(cg *c) {
    LLVMValueRef e[64];
    for (int i = 0; i < c->target.lanes; i++)
        e[i] = LLVMConstInt(c->i32, (unsigned long long)i, false);
    return LLVMConstVector(e, (unsigned)c->target.lanes);
}

LLVMValueRef cg_gep(cg *c, LLVMTypeRef elem, LLVMValueRef p, LLVMValueRef off) {
    return LLVMBuildInBoundsGEP2(c->b, elem, p, &off, 1, "");
}

LLVMValueRef cg_shuffle(cg *c, LLVMValueRef v, const int *idx, int n) {
    return cg_shuffle2(c, v, NULL, idx, n);
}

/* v[0..lanes) as the rows of a lanes x lanes matrix, transposed in
 * place: log2(lanes) rounds, each swapping the off-diagonal b x b blocks
 * of every 2b x 2b block (b = lanes/2 .. 1), a two-input shuffle a
 * vector (x86: vperm2f128/vshuff64x2, unpcklpd/unpckhpd, unpcklps/unpckhps). */
void cg_transpose(cg *c, LLVMValueRef *v) {
    int n = c->target.lanes;
    ATTNC_ASSERT(n <= 64 && (n & (n - 1)) == 0);
    LLVMValueRef lo[64], hi[64];
    for (int b = n / 2; b >= 1; b /= 2) {
        for (int j = 0; j < n; j++) { /* lanes of the second input count from n */
            lo[j] = LLVMConstInt(c->i32, (unsigned)((j & b) ? n + j - b : j), false);
            hi[j] = LLVMConstInt(c->i32, (unsigned)((j & b) ? n + j : j + b), false);
        }
        LLVMValueRef mlo = LLVMConstVector(lo, (unsigned)n), mhi = LLVMConstVector(hi, (unsigned)n);
        for (int i = 0; i < n; i++) {
            if (i & b)
                continue;
            LLVMValueRef a = v[i], d = v[i + b];
            v[i] = LLVMBuildShuffleVector(c->b, a, d, mlo, "");
            v[i + b] = LLVMBuildShuffleVector(c->b, a, d, mhi, "");
        }
    }
}

/* A vector of dtype dt as f32: f16 exactly by fpext, bf16 by a shift;
 * q8_0: its q (times d: cg_cache_scale). */
LLVMValueRef cg_vwiden(cg *c, attn_dtype dt, LLVMValueRef v) {
    switch (dt) {
    case ATTN_DTYPE_F32: return v;
    case ATTN_DTYPE_F16: return LLVMBuildFPExt(c->b, v, c->vf, "");
    case ATTN_DTYPE_BF16:
        return LLVMBuildBitCast(
            c->b, LLVMBuildShl(c->b, LLVMBuildZExt(c->b, v, c->vi, ""), iconst(c->vi, 16), ""),
            c->vf, "");
    case ATTN_DTYPE_Q8_0: return LLVMBuildSIToFP(c->b, v, c->vf, "");
    case ATTN_DTYPE_Q4_0:
    case ATTN_DTYPE_COUNT: break;
    }
    return v;
}

LLVMValueRef cg_vload(cg *c, attn_dtype dt, LLVMValueRef p) {
    LLVMTypeRef vt = LLVMVectorType(cg_elem_type(c, dt), (unsigned)c->target.lanes);
    LLVMValueRef v = LLVMBuildLoad2(c->b, vt, p, "");
    LLVMSetAlignment(v, cg_elem_bytes(dt));
    return cg_vwiden(c, dt, v);
}

void cg_vstore(cg *c, attn_dtype dt, LLVMValueRef v, LLVMValueRef p) {
    cg_store(c, dt, v, p); /* cg_store handles vectors */
}

LLVMValueRef cg_masked_call(cg *c, const char *name, LLVMTypeRef vt, LLVMTypeRef pt,
                            LLVMValueRef *args, int n) {
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMTypeRef tys[2] = {vt, pt};
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, tys, 2);
    LLVMTypeRef fty = LLVMIntrinsicGetType(c->llctx, id, tys, 2);
    return LLVMBuildCall2(c->b, fty, fn, args, (unsigned)n, "");
}

LLVMValueRef cg_vload_masked(cg *c, attn_dtype dt, LLVMValueRef p, LLVMValueRef mask) {
    LLVMTypeRef vt = LLVMVectorType(cg_elem_type(c, dt), (unsigned)c->target.lanes);
    LLVMValueRef args[4] = {p, LLVMConstInt(c->i32, cg_elem_bytes(dt), false), mask,
                            LLVMConstNull(vt)};
    return cg_vwiden(c, dt, cg_masked_call(c, "llvm.masked.load", vt, c->ptr, args, 4));
}

LLVMValueRef cg_vgather(cg *c, attn_dtype dt, LLVMValueRef ptrs) {
    unsigned n = (unsigned)c->target.lanes;
    LLVMTypeRef vt = LLVMVectorType(cg_elem_type(c, dt), n);
    LLVMValueRef args[4] = {ptrs, LLVMConstInt(c->i32, cg_elem_bytes(dt), false),
                            LLVMConstAllOnes(LLVMVectorType(LLVMInt1TypeInContext(c->llctx), n)),
                            LLVMGetUndef(vt)};
    return cg_vwiden(c, dt, cg_masked_call(c, "llvm.masked.gather", vt, LLVMTypeOf(ptrs), args, 4));
}

LLVMValueRef cg_read_at(cg *c, LLVMTypeRef elem, LLVMValueRef base, LLVMValueRef idx,
                        LLVMValueRef ok) {
    LLVMTypeRef shape = LLVMTypeOf(idx), vt = cg_like(shape, elem);
    LLVMValueRef zero = LLVMConstNull(shape);
    if (ok) /* the lanes not read still address base[0] */
        idx = LLVMBuildSelect(c->b, ok, idx, zero, "");
    LLVMValueRef wide = LLVMBuildSExt(c->b, idx, cg_like(shape, c->i64), "");
    LLVMValueRef at = LLVMBuildInBoundsGEP2(c->b, elem, base, &wide, 1, "");
    if (LLVMGetTypeKind(shape) != LLVMVectorTypeKind) {
        LLVMValueRef v = LLVMBuildLoad2(c->b, elem, at, "");
        return ok ? LLVMBuildSelect(c->b, ok, v, LLVMConstNull(elem), "") : v;
    }
    LLVMTypeRef mt = cg_like(shape, LLVMInt1TypeInContext(c->llctx));
    LLVMValueRef args[4] = {at, LLVMConstInt(c->i32, 4, false), ok ? ok : LLVMConstAllOnes(mt),
                            LLVMConstNull(vt)};
    return cg_masked_call(c, "llvm.masked.gather", vt, LLVMTypeOf(at), args, 4);
}

void cg_vstore_masked(cg *c, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask) {
    LLVMValueRef args[4] = {v, p, LLVMConstInt(c->i32, 4, false), mask};
    cg_masked_call(c, "llvm.masked.store", c->vf, c->ptr, args, 4);
}

void cg_prefetch(cg *c, LLVMValueRef p, int locality) {
    LLVMTypeRef ty = c->ptr;
    unsigned id = LLVMLookupIntrinsicID("llvm.prefetch", 13);
    LLVMValueRef args[4] = {p, LLVMConstInt(c->i32, 0, false),
                            LLVMConstInt(c->i32, (unsigned)locality, false),
                            LLVMConstInt(c->i32, 1, false)};
    LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, &ty, 1),
                   LLVMGetIntrinsicDeclaration(c->mod, id, &ty, 1), args, 4, "");
}

LLVMValueRef cg_fma(cg *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef acc) {
    LLVMTypeRef ty = LLVMTypeOf(a);
    unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", 12);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, &ty, 1);
    LLVMValueRef args[3] = {a, b, acc};
    return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, &ty, 1), fn, args, 3, "");
}

/* A constant i32 (of vector type ty when ty is a vector of i32). */
static LLVMValueRef int_like(LLVMTypeRef ty, LLVMTypeRef i32, uint32_t v) {
    LLVMValueRef k = LLVMConstInt(i32, v, false);
    if (LLVMGetTypeKind(ty) != LLVMVectorTypeKind)
        return k;
    unsigned n = LLVMGetVectorSize(ty);
    LLVMValueRef e[64];
    for (unsigned i = 0; i < n; i++)
        e[i] = k;
    return LLVMConstVector(e, n);
}

LLVMValueRef cg_bf16_round(cg *c, LLVMValueRef v) {
    /* the bits u: u + 0x7fff + (bit 16 of u), the low half cleared: ties
     * go to the even high half, a carry into the exponent rounds up to
     * the next power of two or to infinity, as RNE does; NaN (unordered)
     * keeps its high half with the quiet bit set, as the runtime's
     * rt_f32_to_bf16 does */
    LLVMTypeRef ft = LLVMTypeOf(v);
    bool vec = LLVMGetTypeKind(ft) == LLVMVectorTypeKind;
    LLVMTypeRef it = vec ? LLVMVectorType(c->i32, LLVMGetVectorSize(ft)) : c->i32;
    LLVMValueRef u = LLVMBuildBitCast(c->b, v, it, "");
    LLVMValueRef odd = LLVMBuildAnd(c->b, LLVMBuildLShr(c->b, u, int_like(it, c->i32, 16), ""),
                                    int_like(it, c->i32, 1), "");
    LLVMValueRef r =
        LLVMBuildAdd(c->b, u, LLVMBuildAdd(c->b, odd, int_like(it, c->i32, 0x7fff), ""), "");
    LLVMValueRef quiet = LLVMBuildOr(c->b, u, int_like(it, c->i32, 0x400000), "");
    /* NaN: |u| above infinity's bits (an integer compare: a float one on
     * a widened f16 was narrowed back to f16 compares, element by element) */
    LLVMValueRef nan = LLVMBuildICmp(c->b, LLVMIntUGT,
                                     LLVMBuildAnd(c->b, u, int_like(it, c->i32, 0x7fffffffu), ""),
                                     int_like(it, c->i32, 0x7f800000u), "");
    r = LLVMBuildSelect(c->b, nan, quiet, r, "");
    r = LLVMBuildAnd(c->b, r, int_like(it, c->i32, 0xffff0000u), "");
    return LLVMBuildBitCast(c->b, r, ft, "bf16");
}

LLVMValueRef cg_dot_pairs(cg *c, LLVMValueRef acc, LLVMValueRef x, LLVMValueRef w) {
    LLVMTypeRef bv =
        LLVMVectorType(LLVMBFloatTypeInContext(c->llctx), 2 * (unsigned)c->target.lanes);
    if (c->target.bfdot) { /* AArch64's bfdot: lane i + w[2i] x[2i] + w[2i+1] x[2i+1] */
        static const char name[] = "llvm.aarch64.neon.bfdot";
        unsigned id = LLVMLookupIntrinsicID(name, sizeof name - 1);
        ATTNC_ASSERT(id != 0 && c->target.lanes == 4);
        LLVMTypeRef tys[2] = {LLVMTypeOf(acc), bv};
        LLVMValueRef args[3] = {acc, LLVMBuildBitCast(c->b, w, bv, ""),
                                LLVMBuildBitCast(c->b, x, bv, "")};
        return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, tys, 2),
                              LLVMGetIntrinsicDeclaration(c->mod, id, tys, 2), args, 3, "");
    }
    static const char name[] = "llvm.x86.avx512bf16.dpbf16ps.512";
    unsigned id = LLVMLookupIntrinsicID(name, sizeof name - 1);
    ATTNC_ASSERT(id != 0 && c->target.lanes == 16);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, NULL, 0);
    LLVMValueRef args[3] = {acc, LLVMBuildBitCast(c->b, w, bv, ""),
                            LLVMBuildBitCast(c->b, x, bv, "")};
    return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, NULL, 0), fn, args, 3, "");
}

static LLVMValueRef is_subnormal(cg *c, LLVMValueRef x) {
    return cg_intrinsic(c, "llvm.is.fpclass", LLVMTypeOf(x), x,
                        LLVMConstInt(c->i32, 0x90, false)); /* fcSubnormal */
}

/* cg_bf16_words by the integer steps of cg_bf16_round (any target). */
static LLVMValueRef bf16_words_exact(cg *c, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMTypeRef h16 = LLVMVectorType(LLVMInt16TypeInContext(c->llctx), 16);
    LLVMValueRef idx[32], half[2], x[2] = {lo, hi};
    for (int i = 0; i < 32; i++)
        idx[i] = LLVMConstInt(c->i32, (unsigned long long)i, false);
    for (int i = 0; i < 2; i++) {
        LLVMValueRef u = LLVMBuildBitCast(c->b, cg_bf16_round(c, x[i]), c->vi, "");
        half[i] = LLVMBuildTrunc(
            c->b, LLVMBuildLShr(c->b, u, cg_splat(c, LLVMConstInt(c->i32, 16, false)), ""), h16,
            "");
    }
    return LLVMBuildShuffleVector(c->b, half[0], half[1], LLVMConstVector(idx, 32), "bf16_words");
}

/* vcvtne2ps2bf16: lo and hi as 32 bf16 words, lo's first. */
static LLVMValueRef cvtne2ps2bf16(cg *c, LLVMValueRef lo, LLVMValueRef hi) {
    static const char name[] = "llvm.x86.avx512bf16.cvtne2ps2bf16.512";
    unsigned id = LLVMLookupIntrinsicID(name, sizeof name - 1);
    ATTNC_ASSERT(id != 0);
    LLVMValueRef args[2] = {hi, lo}; /* the second operand's words come first */
    return LLVMBuildBitCast(c->b,
                            LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, NULL, 0),
                                           LLVMGetIntrinsicDeclaration(c->mod, id, NULL, 0), args,
                                           2, ""),
                            LLVMVectorType(LLVMInt16TypeInContext(c->llctx), 32), "");
}

/* Words lo0 hi0 lo1 hi1 .. from lo0..lo15 hi0..hi15, as 16 i32 pairs. */
static LLVMValueRef interleave_words(cg *c, LLVMValueRef w) {
    LLVMValueRef idx[32];
    for (int i = 0; i < 32; i++)
        idx[i] = LLVMConstInt(c->i32, (unsigned long long)(i / 2 + (i % 2) * 16), false);
    return LLVMBuildBitCast(c->b, LLVMBuildShuffleVector(c->b, w, w, LLVMConstVector(idx, 32), ""),
                            c->vi, "pair");
}

LLVMValueRef cg_bf16_words(cg *c, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMTypeRef w32 = LLVMVectorType(LLVMInt16TypeInContext(c->llctx), 32);
    ATTNC_ASSERT(c->target.lanes == 16);
    if (!c->target.bf16_dot)
        return bf16_words_exact(c, lo, hi);
    /* vcvtne2ps2bf16 rounds to nearest even and quiets NaN as
     * cg_bf16_round does, but takes subnormal inputs as 0: a vector with
     * one goes the integer way */
    LLVMValueRef sub = LLVMBuildOr(c->b, is_subnormal(c, lo), is_subnormal(c, hi), "");
    LLVMValueRef any = cg_intrinsic(c, "llvm.vector.reduce.or", LLVMTypeOf(sub), sub, NULL);
    LLVMBasicBlockRef exact = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "bf16_exact");
    LLVMBasicBlockRef quick = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "bf16_cvt");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "bf16_done");
    LLVMBuildCondBr(c->b, any, exact, quick);
    LLVMPositionBuilderAtEnd(c->b, exact);
    LLVMValueRef slow = bf16_words_exact(c, lo, hi);
    LLVMBasicBlockRef exact_end = LLVMGetInsertBlock(c->b);
    LLVMBuildBr(c->b, join);
    LLVMPositionBuilderAtEnd(c->b, quick);
    LLVMValueRef fast = cvtne2ps2bf16(c, lo, hi);
    LLVMBuildBr(c->b, join);
    LLVMPositionBuilderAtEnd(c->b, join);
    LLVMValueRef phi = LLVMBuildPhi(c->b, w32, "bf16_words");
    LLVMValueRef vals[2] = {slow, fast};
    LLVMBasicBlockRef from[2] = {exact_end, quick};
    LLVMAddIncoming(phi, vals, from, 2);
    return phi;
}

LLVMValueRef cg_bf16_pair(cg *c, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMTypeRef ft = LLVMTypeOf(lo);
    bool vec = LLVMGetTypeKind(ft) == LLVMVectorTypeKind;
    if (vec && c->target.bf16_dot && LLVMGetVectorSize(ft) == 16)
        return interleave_words(c, cg_bf16_words(c, lo, hi));
    LLVMTypeRef it = vec ? LLVMVectorType(c->i32, LLVMGetVectorSize(ft)) : c->i32;
    LLVMValueRef l = LLVMBuildBitCast(c->b, cg_bf16_round(c, lo), it, "");
    LLVMValueRef h = LLVMBuildBitCast(c->b, cg_bf16_round(c, hi), it, "");
    return LLVMBuildOr(c->b, LLVMBuildLShr(c->b, l, int_like(it, c->i32, 16), ""), h, "pair");
}

LLVMValueRef cg_cache_pair(cg *c, attn_dtype dt, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMTypeRef ft = LLVMTypeOf(lo);
    bool vec16 = LLVMGetTypeKind(ft) == LLVMVectorTypeKind && LLVMGetVectorSize(ft) == 16;
    if (dt == ATTN_DTYPE_BF16 && vec16) { /* exact: the words as they are */
        LLVMValueRef l = LLVMBuildBitCast(c->b, lo, c->vi, ""),
                     h = LLVMBuildBitCast(c->b, hi, c->vi, "");
        return LLVMBuildOr(c->b, LLVMBuildLShr(c->b, l, int_like(c->vi, c->i32, 16), ""),
                           LLVMBuildAnd(c->b, h, int_like(c->vi, c->i32, 0xffff0000u), ""), "pair");
    }
    /* no subnormal check: an f16 widened is never subnormal in f32, and
     * vdpbf16ps (cg_bf16_pairs_pay) and AMX tiles take an f32 cache's
     * pairs as if flushed anyway */
    if (vec16 && c->target.bf16_dot &&
        (dt == ATTN_DTYPE_F16 || (dt == ATTN_DTYPE_F32 && (cg_bf16_pairs_pay(c) || c->target.amx))))
        return cg_dot_pair(c, lo, hi);
    return cg_bf16_pair(c, lo, hi);
}

LLVMValueRef cg_dot_words(cg *c, LLVMValueRef lo, LLVMValueRef hi) {
    ATTNC_ASSERT(c->target.bf16_dot && LLVMGetVectorSize(LLVMTypeOf(lo)) == 16);
    return LLVMBuildBitCast(c->b, cvtne2ps2bf16(c, lo, hi), c->vi, "");
}

LLVMValueRef cg_dot_pair(cg *c, LLVMValueRef lo, LLVMValueRef hi) {
    ATTNC_ASSERT(c->target.bf16_dot && LLVMGetVectorSize(LLVMTypeOf(lo)) == 16);
    return interleave_words(c, cvtne2ps2bf16(c, lo, hi));
}

LLVMValueRef cg_bf16_half(cg *c, LLVMValueRef pair, bool high) {
    LLVMTypeRef it = LLVMTypeOf(pair);
    bool vec = LLVMGetTypeKind(it) == LLVMVectorTypeKind;
    LLVMTypeRef ft = vec ? LLVMVectorType(c->f32, LLVMGetVectorSize(it)) : c->f32;
    LLVMValueRef w = high ? LLVMBuildAnd(c->b, pair, int_like(it, c->i32, 0xffff0000u), "")
                          : LLVMBuildShl(c->b, pair, int_like(it, c->i32, 16), "");
    return LLVMBuildBitCast(c->b, w, ft, "");
}

bool cg_bf16_pairs_pay(const cg *c) {
    /* Not on AMX CPUs (Intel): there vdpbf16ps runs at half the FLOP rate
     * of f32 FMAs (Xeon, 16 threads: 674 against 1280 GFLOP/s), and the
     * llama3_8b prefill 2048 core in pairs took 67 ms against f32's
     * 38-41; f32 FMAs on the rounded operands do the same arithmetic */
    return ir_cfg_bf16(c->g) && c->target.bf16_dot && !c->target.amx;
}

LLVMValueRef cg_operand(cg *c, LLVMValueRef v) {
    return ir_cfg_bf16(c->g) ? cg_bf16_round(c, v) : v;
}

LLVMValueRef cg_qk_operand(cg *c, LLVMValueRef v) {
    return ir_cfg_q8_query(c->g) ? v : cg_operand(c, v);
}

double cg_query_scale(const cg *c, double scale) {
    return ir_cfg_q_unscaled(c->g) ? 1.0 : scale;
}

LLVMValueRef cg_scale_sum(cg *c, const ir_node *n, LLVMValueRef sum) {
    if (!ir_cfg_q_unscaled(c->g) || n->scale == 1.0)
        return sum;
    LLVMValueRef k = cg_f32(c, n->scale);
    if (LLVMGetTypeKind(LLVMTypeOf(sum)) == LLVMVectorTypeKind)
        k = cg_splat(c, k);
    return LLVMBuildFMul(c->b, sum, k, "");
}

static LLVMValueRef fast(LLVMValueRef v) {
    if (LLVMIsAInstruction(v))
        LLVMSetFastMathFlags(v, LLVMFastMathAllowReassoc | LLVMFastMathAllowContract);
    return v;
}

LLVMValueRef cg_fadd(cg *c, LLVMValueRef a, LLVMValueRef b) {
    return fast(LLVMBuildFAdd(c->b, a, b, ""));
}

LLVMValueRef cg_fmul(cg *c, LLVMValueRef a, LLVMValueRef b) {
    return fast(LLVMBuildFMul(c->b, a, b, ""));
}

LLVMValueRef cg_intrinsic(cg *c, const char *name, LLVMTypeRef ty, LLVMValueRef a, LLVMValueRef b) {
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    ATTNC_ASSERT(id != 0);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, &ty, 1);
    LLVMTypeRef fty = LLVMIntrinsicGetType(c->llctx, id, &ty, 1);
    LLVMValueRef args[2] = {a, b};
    return LLVMBuildCall2(c->b, fty, fn, args, b ? 2 : 1, "");
}

/* p(r) = 1 + r + r^2 (...) of both exps: Cephes' expf minimax polynomial */
static const double exp_poly[] = {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                  4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1};

LLVMValueRef cg_exp(cg *c, LLVMValueRef x) {
    /* exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 split in two
     * parts (Cody-Waite), p the minimax polynomial of Cephes' expf. */
    LLVMTypeRef ty = LLVMTypeOf(x), ity = cg_like(ty, c->i32);
    LLVMValueRef lo = fconst(ty, -87.33654), hi = fconst(ty, 88.72283);
    LLVMValueRef under = LLVMBuildFCmp(c->b, LLVMRealOLT, x, lo, "");
    LLVMValueRef xc =
        cg_intrinsic(c, "llvm.minnum", ty, cg_intrinsic(c, "llvm.maxnum", ty, x, lo), hi);
    LLVMValueRef n = cg_intrinsic(
        c, "llvm.floor", ty,
        LLVMBuildFAdd(c->b, LLVMBuildFMul(c->b, xc, fconst(ty, 1.44269504088896341), ""),
                      fconst(ty, 0.5), ""),
        NULL);
    LLVMValueRef r =
        LLVMBuildFSub(c->b, xc, LLVMBuildFMul(c->b, n, fconst(ty, 0.693359375), ""), "");
    r = LLVMBuildFSub(c->b, r, LLVMBuildFMul(c->b, n, fconst(ty, -2.12194440e-4), ""), "");
    LLVMValueRef p = fconst(ty, exp_poly[0]);
    for (int i = 1; i < 6; i++)
        p = LLVMBuildFAdd(c->b, LLVMBuildFMul(c->b, p, r, ""), fconst(ty, exp_poly[i]), "");
    LLVMValueRef r2 = LLVMBuildFMul(c->b, r, r, "");
    p = LLVMBuildFAdd(c->b, LLVMBuildFAdd(c->b, LLVMBuildFMul(c->b, p, r2, ""), r, ""),
                      fconst(ty, 1.0), "");
    /* 2^n through the exponent bits; n in [-126, 128] after clamping */
    LLVMValueRef ni = LLVMBuildFPToSI(c->b, n, ity, "");
    LLVMValueRef bits =
        LLVMBuildShl(c->b, LLVMBuildAdd(c->b, ni, iconst(ity, 127), ""), iconst(ity, 23), "");
    LLVMValueRef two_n = LLVMBuildBitCast(c->b, bits, ty, "");
    /* n = 128 would overflow the exponent: take 2^127 * 2 */
    LLVMValueRef big = LLVMBuildICmp(c->b, LLVMIntSGT, ni, iconst(ity, 127), "");
    two_n = LLVMBuildSelect(c->b, big, LLVMBuildBitCast(c->b, iconst(ity, 254u << 23), ty, ""),
                            two_n, "");
    p = LLVMBuildSelect(c->b, big, LLVMBuildFMul(c->b, p, fconst(ty, 2.0), ""), p, "");
    LLVMValueRef res = LLVMBuildFMul(c->b, p, two_n, "");
    res = LLVMBuildSelect(c->b, under, fconst(ty, 0.0), res, "");
    /* the clamps would turn NaN into a number: keep it NaN, as IEEE exp */
    LLVMValueRef nan = LLVMBuildFCmp(c->b, LLVMRealUNO, x, x, "");
    return LLVMBuildSelect(c->b, nan, x, res, "exp");
}

LLVMValueRef cg_exp_nonpos(cg *c, LLVMValueRef x) {
    /* As cg_exp for x <= 0 with fewer operations (softmax runs it once
     * per score): n = round(x / ln 2) as the low mantissa bits of t = x /
     * ln 2 + 1.5 * 2^23 (no floor, no conversion; 2^n from t's bits), the
     * multiply-adds fused, and no select for NaN: it passes through every
     * step (t's bits are integers, never poison). */
    LLVMTypeRef ty = LLVMTypeOf(x), ity = cg_like(ty, c->i32);
    LLVMValueRef lo = fconst(ty, -87.33654), magic = fconst(ty, 12582912.0);
    LLVMValueRef under = LLVMBuildFCmp(c->b, LLVMRealOLT, x, lo, "");
    LLVMValueRef xc = LLVMBuildSelect(c->b, under, lo, x, ""); /* NaN stays NaN */
    LLVMValueRef t = cg_fma(c, xc, fconst(ty, 1.44269504088896341), magic);
    LLVMValueRef n = LLVMBuildFSub(c->b, t, magic, "");
    LLVMValueRef r = cg_fma(c, n, fconst(ty, -0.693359375), xc);
    r = cg_fma(c, n, fconst(ty, 2.12194440e-4), r);
    LLVMValueRef p = fconst(ty, exp_poly[0]);
    for (int i = 1; i < 6; i++)
        p = cg_fma(c, p, r, fconst(ty, exp_poly[i]));
    p = LLVMBuildFAdd(c->b, cg_fma(c, p, LLVMBuildFMul(c->b, r, r, ""), r), fconst(ty, 1.0), "");
    /* t's bits are those of 1.5 * 2^23 plus n, n in [-126, 0] */
    LLVMValueRef bits =
        LLVMBuildAdd(c->b, LLVMBuildBitCast(c->b, t, ity, ""),
                     iconst(ity, (unsigned long long)(127u - 0x4B400000u) & 0xffffffffu), "");
    LLVMValueRef two_n =
        LLVMBuildBitCast(c->b, LLVMBuildShl(c->b, bits, iconst(ity, 23), ""), ty, "");
    return LLVMBuildSelect(c->b, under, fconst(ty, 0.0), LLVMBuildFMul(c->b, p, two_n, ""), "exp");
}

LLVMValueRef cg_log(cg *c, LLVMValueRef x) {
    /* x = m 2^e, m in [sqrt(1/2), sqrt(2)): ln x = e ln 2 + ln m, ln m by
     * the minimax polynomial of Cephes' logf in m - 1 (ln 2 in two parts) */
    LLVMTypeRef ty = LLVMTypeOf(x), ity = cg_like(ty, c->i32);
    LLVMValueRef tiny = LLVMBuildFCmp(c->b, LLVMRealOLT, x, fconst(ty, 1.17549435e-38), "");
    LLVMValueRef xs = LLVMBuildSelect(c->b, tiny, LLVMBuildFMul(c->b, x, fconst(ty, 8388608.0), ""),
                                      x, ""); /* subnormals: times 2^23 */
    LLVMValueRef bits = LLVMBuildBitCast(c->b, xs, ity, "");
    LLVMValueRef e =
        LLVMBuildSub(c->b, LLVMBuildLShr(c->b, bits, iconst(ity, 23), ""), iconst(ity, 126), "");
    e = LLVMBuildSelect(c->b, tiny, LLVMBuildSub(c->b, e, iconst(ity, 23), ""), e, "");
    /* m in [0.5, 1) */
    LLVMValueRef m =
        LLVMBuildBitCast(c->b,
                         LLVMBuildOr(c->b, LLVMBuildAnd(c->b, bits, iconst(ity, 0x007FFFFFu), ""),
                                     iconst(ity, 0x3F000000u), ""),
                         ty, "");
    LLVMValueRef small = LLVMBuildFCmp(c->b, LLVMRealOLT, m, fconst(ty, 0.707106781186547524), "");
    e = LLVMBuildSelect(c->b, small, LLVMBuildSub(c->b, e, iconst(ity, 1), ""), e, "");
    LLVMValueRef r =
        LLVMBuildFSub(c->b, LLVMBuildSelect(c->b, small, LLVMBuildFAdd(c->b, m, m, ""), m, ""),
                      fconst(ty, 1.0), "");
    static const double p[] = {7.0376836292E-2,  -1.1514610310E-1, 1.1676998740E-1,
                               -1.2420140846E-1, 1.4249322787E-1,  -1.6668057665E-1,
                               2.0000714765E-1,  -2.4999993993E-1, 3.3333331174E-1};
    LLVMValueRef z = LLVMBuildFMul(c->b, r, r, ""), y = fconst(ty, p[0]);
    for (int i = 1; i < 9; i++)
        y = cg_fma(c, y, r, fconst(ty, p[i]));
    y = LLVMBuildFMul(c->b, LLVMBuildFMul(c->b, y, r, ""), z, "");
    LLVMValueRef ef = LLVMBuildSIToFP(c->b, e, ty, "");
    y = cg_fma(c, ef, fconst(ty, -2.12194440e-4), y);
    y = cg_fma(c, z, fconst(ty, -0.5), y);
    LLVMValueRef l = cg_fma(c, ef, fconst(ty, 0.693359375), LLVMBuildFAdd(c->b, r, y, ""));
    /* 0: -inf; below 0 or NaN: NaN; inf: inf */
    l = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, x, fconst(ty, 0.0), ""),
                        fconst(ty, -INFINITY), l, "");
    l = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealULT, x, fconst(ty, 0.0), ""),
                        fconst(ty, NAN), l, "");
    return LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, x, fconst(ty, INFINITY), ""), x,
                           l, "log");
}

LLVMValueRef cg_tanh(cg *c, LLVMValueRef x) {
    /* tanh|x| = 1 - 2 / (exp(2|x|) + 1); the sign put back */
    LLVMTypeRef ty = LLVMTypeOf(x);
    LLVMValueRef ax = cg_intrinsic(c, "llvm.fabs", ty, x, NULL);
    LLVMValueRef e = cg_exp(c, LLVMBuildFMul(c->b, ax, fconst(ty, 2.0), ""));
    LLVMValueRef t = LLVMBuildFSub(
        c->b, fconst(ty, 1.0),
        LLVMBuildFDiv(c->b, fconst(ty, 2.0), LLVMBuildFAdd(c->b, e, fconst(ty, 1.0), ""), ""), "");
    return cg_intrinsic(c, "llvm.copysign", ty, t, x);
}
