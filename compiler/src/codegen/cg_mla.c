/* cg_mla.c: the kernels of multi-head latent attention (spec key mla)
 * around its linears and its attention: the RMS norm of q_a, the latent
 * each token caches (c normalized, k_pe rotated), the queries taken into
 * latent space through kv_b_proj's K rows (q_pe rotated beside them), and
 * the latent outputs taken out of it through its V rows. kv_b_proj is
 * f32, [heads * (n + dv), L] as Hugging Face stores it: head h's K rows
 * are h * (n + dv) + i (i < n), its V rows follow. Sums of squares and
 * dot products are reductions the vectorizer may reassociate; threads
 * split tokens (or heads x token blocks), so results never depend on the
 * thread count. compute bf16 rounds every product's operands (q_nope, the
 * latents, the latent outputs, a float dtype's kv_b_proj); the absorbed
 * form's products are not the expanded form's (the reference's): it
 * rounds q's latent and the latent output where the expanded form rounds
 * each head's keys and values, so it meets the reference within compute
 * bf16's tolerance, not to the summation order. */
#include "codegen/cg_build.h"

/* Tokens of one work item of the per-head products: kv_b's rows are read
 * once per block of them. */
enum { MLA_TOKENS = 16 };

/* Pointer to element (d, h, t) of n: [d, t] when n is 2-D. */
static LLVMValueRef at3(cg *c, const ir_node *n, LLVMValueRef d, LLVMValueRef h, LLVMValueRef t) {
    LLVMValueRef i3[3] = {d, h, t}, i2[2] = {d, t};
    return cg_addr(c, n, n->ndim == 3 ? i3 : i2);
}

static LLVMValueRef ld3(cg *c, const ir_node *n, LLVMValueRef d, LLVMValueRef h, LLVMValueRef t) {
    return cg_load(c, n->dt, at3(c, n, d, h, t));
}

static LLVMValueRef add(cg *c, LLVMValueRef a, int64_t b) {
    return LLVMBuildAdd(c->b, a, cg_i64(c, b), "");
}

/* 1 / sqrt(mean of the squares of x[0..len) of head h, token t + eps),
 * the mean in double (as the reference's). */
static LLVMValueRef rms_factor(cg *c, const ir_node *x, LLVMValueRef h, LLVMValueRef t,
                               int64_t len) {
    LLVMValueRef acc = cg_slot(c, c->f32, NULL);
    LLVMBuildStore(c->b, cg_f32(c, 0), acc);
    cg_loop li = cg_for(c, cg_i64(c, 0), cg_i64(c, len), "i");
    LLVMValueRef e = ld3(c, x, li.i, h, t);
    LLVMBuildStore(c->b, cg_fadd(c, LLVMBuildLoad2(c->b, c->f32, acc, ""), cg_fmul(c, e, e)), acc);
    cg_for_end(c, &li);
    return cg_rms_factor(c, LLVMBuildLoad2(c->b, c->f32, acc, ""), len, ir_cfg_mla_eps(c->g));
}

/* y[out0 + i, h, t] = x[in0 + i, h, t] * r * w[i], i < len. */
static void scale_by(cg *c, const ir_node *x, int64_t in0, const ir_node *w, LLVMValueRef r,
                     const ir_node *y, int64_t out0, LLVMValueRef h, LLVMValueRef t, int64_t len) {
    cg_loop li = cg_for(c, cg_i64(c, 0), cg_i64(c, len), "i");
    LLVMValueRef wi[1] = {li.i};
    LLVMValueRef v = LLVMBuildFMul(c->b, ld3(c, x, add(c, li.i, in0), h, t), r, "");
    v = LLVMBuildFMul(c->b, v, cg_load(c, w->dt, cg_addr(c, w, wi)), "");
    cg_store(c, y->dt, v, at3(c, y, add(c, li.i, out0), h, t));
    cg_for_end(c, &li);
}

/* y[out0 + .., h, t] = x[in0 + .., h, t] rotated by the rope table tab
 * (cos of each pair, then sin) of token t: the spec's style over
 * qk_rope_head_dim dims, as cg_rope.c turns a head. */
static void rotate(cg *c, const ir_node *tab, const ir_node *x, int64_t in0, const ir_node *y,
                   int64_t out0, LLVMValueRef h, LLVMValueRef t) {
    int64_t half = ir_cfg_mla_qk_rope_head_dim(c->g) / 2;
    cg_loop lp = cg_for(c, cg_i64(c, 0), cg_i64(c, half), "pair");
    LLVMValueRef ci[2] = {lp.i, t}, si[2] = {add(c, lp.i, half), t};
    LLVMValueRef cs = cg_load(c, tab->dt, cg_addr(c, tab, ci));
    LLVMValueRef sn = cg_load(c, tab->dt, cg_addr(c, tab, si));
    LLVMValueRef ia, ib, ra, rb;
    cg_rope_pair(c, lp.i, half, &ia, &ib);
    LLVMValueRef a = ld3(c, x, add(c, ia, in0), h, t), b = ld3(c, x, add(c, ib, in0), h, t);
    cg_rope_turn(c, a, b, cs, sn, &ra, &rb);
    cg_store(c, y->dt, ra, at3(c, y, add(c, ia, out0), h, t));
    cg_store(c, y->dt, rb, at3(c, y, add(c, ib, out0), h, t));
    cg_for_end(c, &lp);
}

void cg_emit_rms_norm(cg *c, const ir_node *n, const char *name) {
    const ir_node *x = n->args[0], *w = n->args[1];
    int64_t len = n->ne[0].c;
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi, z = cg_i64(c, 0);
    cg_share(c, c->S, &lo, &hi);
    cg_loop lt = cg_for(c, lo, hi, "t");
    scale_by(c, x, 0, w, rms_factor(c, x, z, lt.i, len), n, 0, z, lt.i, len);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}

void cg_emit_mla_latent(cg *c, const ir_node *n, const char *name) {
    const ir_node *x = n->args[0], *w = n->args[1], *tab = n->args[2];
    int64_t kvl = ir_cfg_mla_kv_lora_rank(c->g);
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi, z = cg_i64(c, 0);
    cg_share(c, c->S, &lo, &hi);
    cg_loop lt = cg_for(c, lo, hi, "t");
    scale_by(c, x, 0, w, rms_factor(c, x, z, lt.i, kvl), n, 0, z, lt.i, kvl);
    rotate(c, tab, x, kvl, n, kvl, z, lt.i);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}

/* Work items of the per-head products: (head, block of MLA_TOKENS
 * tokens); this thread's share, with the item's head and tokens. */
typedef struct head_items {
    cg_loop li;
    LLVMValueRef h, t0, t1;
} head_items;

static head_items head_items_begin(cg *c) {
    head_items it;
    LLVMValueRef blocks =
        LLVMBuildSDiv(c->b, add(c, c->S, MLA_TOKENS - 1), cg_i64(c, MLA_TOKENS), "blocks");
    LLVMValueRef lo, hi;
    cg_share(c, LLVMBuildMul(c->b, blocks, cg_i64(c, ir_cfg_heads(c->g)), ""), &lo, &hi);
    it.li = cg_for(c, lo, hi, "item");
    it.h = LLVMBuildSRem(c->b, it.li.i, cg_i64(c, ir_cfg_heads(c->g)), "h");
    it.t0 = LLVMBuildMul(c->b, LLVMBuildSDiv(c->b, it.li.i, cg_i64(c, ir_cfg_heads(c->g)), ""),
                         cg_i64(c, MLA_TOKENS), "t0");
    it.t1 = cg_intrinsic(c, "llvm.smin", c->i64, add(c, it.t0, MLA_TOKENS), c->S);
    return it;
}

/* Element (row, col) of kv_b_proj [heads * (n + dv), L]. */
static LLVMValueRef kvb_at(cg *c, const ir_node *w, LLVMValueRef row, LLVMValueRef col) {
    LLVMValueRef i[2] = {col, row}; /* weights are [in, out] */
    return cg_addr(c, w, i);
}

/* That element as a product's operand: compute bf16 rounds a float
 * dtype's (a block format's d * q are taken as they are), as the
 * reference's linear and mla_expand do. */
static LLVMValueRef kvb_operand(cg *c, const ir_node *w, LLVMValueRef row, LLVMValueRef col) {
    LLVMValueRef x = cg_load(c, w->dt, kvb_at(c, w, row, col));
    return attn_dtype_block(ir_cfg_dtype(c->g)) == 1 ? cg_operand(c, x) : x;
}

void cg_emit_mla_query(cg *c, const ir_node *n, const char *name) {
    const ir_node *q = n->args[0], *w = n->args[1], *tab = n->args[2];
    int64_t kvl = ir_cfg_mla_kv_lora_rank(c->g), nope = ir_cfg_mla_qk_nope_head_dim(c->g);
    int64_t per = nope + ir_cfg_mla_v_head_dim(c->g);
    cg_kernel_begin(c, name);
    head_items it = head_items_begin(c);
    /* q_lat[c] = sum_i q_nope[i] W_kb[h][i][c]: each of kv_b's rows once
     * for the block's tokens, added into the output row by row */
    cg_loop lt = cg_for(c, it.t0, it.t1, "t");
    cg_loop lz = cg_for(c, cg_i64(c, 0), cg_i64(c, kvl), "c");
    cg_store(c, n->dt, cg_f32(c, 0), at3(c, n, lz.i, it.h, lt.i));
    cg_for_end(c, &lz);
    rotate(c, tab, q, nope, n, kvl, it.h, lt.i);
    cg_for_end(c, &lt);
    cg_loop lr = cg_for(c, cg_i64(c, 0), cg_i64(c, nope), "i");
    LLVMValueRef row = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, it.h, cg_i64(c, per), ""), lr.i, "");
    cg_loop lt2 = cg_for(c, it.t0, it.t1, "t");
    LLVMValueRef qi = cg_operand(c, ld3(c, q, lr.i, it.h, lt2.i));
    cg_loop lc = cg_for(c, cg_i64(c, 0), cg_i64(c, kvl), "c");
    LLVMValueRef yp = at3(c, n, lc.i, it.h, lt2.i);
    LLVMValueRef y =
        cg_fadd(c, cg_load(c, n->dt, yp), cg_fmul(c, qi, kvb_operand(c, w, row, lc.i)));
    cg_store(c, n->dt, y, yp);
    cg_for_end(c, &lc);
    cg_for_end(c, &lt2);
    cg_for_end(c, &lr);
    cg_for_end(c, &it.li);
    cg_kernel_end(c);
}

void cg_emit_mla_output(cg *c, const ir_node *n, const char *name) {
    const ir_node *o = n->args[0], *w = n->args[1];
    int64_t kvl = ir_cfg_mla_kv_lora_rank(c->g), nope = ir_cfg_mla_qk_nope_head_dim(c->g);
    int64_t dv = ir_cfg_mla_v_head_dim(c->g), per = nope + dv;
    cg_kernel_begin(c, name);
    head_items it = head_items_begin(c);
    /* out[h * dv + v] = sum_c o_lat[c] W_vb[h][v][c] */
    LLVMValueRef acc = cg_slot(c, c->f32, NULL);
    cg_loop lv = cg_for(c, cg_i64(c, 0), cg_i64(c, dv), "v");
    LLVMValueRef row =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, it.h, cg_i64(c, per), ""), add(c, lv.i, nope), "");
    cg_loop lt = cg_for(c, it.t0, it.t1, "t");
    LLVMBuildStore(c->b, cg_f32(c, 0), acc);
    cg_loop lc = cg_for(c, cg_i64(c, 0), cg_i64(c, kvl), "c");
    LLVMValueRef x =
        cg_fmul(c, cg_operand(c, ld3(c, o, lc.i, it.h, lt.i)), kvb_operand(c, w, row, lc.i));
    LLVMBuildStore(c->b, cg_fadd(c, LLVMBuildLoad2(c->b, c->f32, acc, ""), x), acc);
    cg_for_end(c, &lc);
    LLVMValueRef oi[2] = {LLVMBuildAdd(c->b, LLVMBuildMul(c->b, it.h, cg_i64(c, dv), ""), lv.i, ""),
                          lt.i};
    cg_store(c, n->dt, LLVMBuildLoad2(c->b, c->f32, acc, ""), cg_addr(c, n, oi));
    cg_for_end(c, &lt);
    cg_for_end(c, &lv);
    cg_for_end(c, &it.li);
    cg_kernel_end(c);
}

/* ---- the expanded form (mla_absorb disabled) ---------------------------- */

void cg_emit_mla_rope(cg *c, const ir_node *n, const char *name) {
    const ir_node *q = n->args[0], *tab = n->args[1];
    int64_t nope = ir_cfg_mla_qk_nope_head_dim(c->g);
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi;
    cg_share(c, c->S, &lo, &hi);
    cg_loop lt = cg_for(c, lo, hi, "t");
    cg_loop lh = cg_for(c, cg_i64(c, 0), cg_i64(c, ir_cfg_heads(c->g)), "h");
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, nope), "d");
    cg_store(c, n->dt, ld3(c, q, ld.i, lh.i, lt.i), at3(c, n, ld.i, lh.i, lt.i));
    cg_for_end(c, &ld);
    rotate(c, tab, q, nope, n, nope, lh.i, lt.i);
    cg_for_end(c, &lh);
    cg_for_end(c, &lt);
    cg_kernel_end(c);
}

/* nr rows of kv_b from wrow (of one head's K or V rows) times the
 * block's latents into n's rows from orow: out[row][token] = sum_c
 * W[row][c] xt[c][token],
 * xt the latents transposed ([kvl][2 lanes]), nr x 2 vectors of sums in
 * registers (W's element a broadcast, the GEMM's register tile), then
 * into n through the slot tile ([nr][2 lanes]) for the block's nb keys. */
static void expand_rows(cg *c, const ir_node *n, const ir_node *w, LLVMValueRef xt,
                        LLVMValueRef tile, LLVMValueRef h, LLVMValueRef wrow, LLVMValueRef orow,
                        int nr, LLVMValueRef j0, LLVMValueRef nb) {
    int L = c->target.lanes, na = 2 * nr;
    int64_t kvl = ir_cfg_mla_kv_lora_rank(c->g);
    LLVMValueRef init[64], next[64];
    for (int a = 0; a < na; a++)
        init[a] = cg_vf32(c, 0);
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "latent", c->vf, na);
    LLVMValueRef x[2];
    for (int v = 0; v < 2; v++)
        x[v] = cg_vload(c, ATTN_DTYPE_F32,
                        cg_gep(c, c->f32, xt,
                               LLVMBuildAdd(c->b, LLVMBuildMul(c->b, l.i, cg_i64(c, 2 * L), ""),
                                            cg_i64(c, v * L), "")));
    for (int r = 0; r < nr; r++) {
        LLVMValueRef wr = cg_splat(c, kvb_operand(c, w, add(c, wrow, r), l.i));
        for (int v = 0; v < 2; v++)
            next[2 * r + v] = cg_fma(c, wr, x[v], l.acc[2 * r + v]);
    }
    cg_acc_loop_end(c, &l, cg_i64(c, kvl), init, next);
    for (int a = 0; a < na; a++)
        cg_vstore(c, ATTN_DTYPE_F32, next[a], cg_gep(c, c->f32, tile, cg_i64(c, (int64_t)a * L)));
    cg_loop lr = cg_for(c, cg_i64(c, 0), cg_i64(c, nr), "r");
    cg_loop lt = cg_for(c, cg_i64(c, 0), nb, "t");
    LLVMValueRef e = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lr.i, cg_i64(c, 2 * L), ""), lt.i, "");
    cg_store(c, n->dt, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, tile, e), ""),
             at3(c, n, LLVMBuildAdd(c->b, orow, lr.i, ""), h, LLVMBuildAdd(c->b, j0, lt.i, "")));
    cg_for_end(c, &lt);
    cg_for_end(c, &lr);
}

/* Every visible key's K (mla_keys: [c_kv . W_kb[h]; k_pe]) or V
 * (mla_values: c_kv . W_vb[h]) for every head, as the modeling file
 * expands them. A work item is a block of 2 vectors of keys and one
 * head; a thread takes a run of items, block-major, and widens a block's
 * latents once, transposed (the keys of one latent dim side by side),
 * for all its heads. Then each of the head's rows times them as the
 * GEMM's register tile: gemm_mr rows x 2 vectors of keys of sums, a row's
 * element broadcast (deepseek_v2_lite prefill 2048, whole block: 480.8
 * ms with dot products of one row and one key each, 427.9 now). */
void cg_emit_mla_expand(cg *c, const ir_node *n, const char *name) {
    const ir_node *lat = n->args[0], *w = n->args[1];
    bool keys = n->op == IR_OP_MLA_KEYS;
    int64_t kvl = ir_cfg_mla_kv_lora_rank(c->g), nope = ir_cfg_mla_qk_nope_head_dim(c->g);
    int64_t per = nope + ir_cfg_mla_v_head_dim(c->g),
            rows = keys ? nope : ir_cfg_mla_v_head_dim(c->g);
    int L = c->target.lanes, mr = c->target.gemm_mr, tb = 2 * L;
    LLVMValueRef z = cg_i64(c, 0);
    cg_kernel_begin(c, name);
    LLVMValueRef xt = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(kvl * tb)), NULL);
    LLVMValueRef tile = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(mr * tb)), NULL);
    LLVMValueRef staged = cg_slot(c, c->i64, cg_i64(c, -1));
    LLVMSetAlignment(xt, 64);
    LLVMSetAlignment(tile, 64);
    /* keys no query of this call sees may be released: from jlo on */
    LLVMValueRef nkeys = LLVMBuildSub(c->b, c->T, c->jlo, "");
    LLVMValueRef blocks = LLVMBuildSDiv(c->b, add(c, nkeys, tb - 1), cg_i64(c, tb), "blocks");
    LLVMValueRef lo, hi;
    cg_share(c, LLVMBuildMul(c->b, blocks, cg_i64(c, ir_cfg_heads(c->g)), ""), &lo, &hi);
    cg_loop li = cg_for(c, lo, hi, "item");
    LLVMValueRef blk = LLVMBuildSDiv(c->b, li.i, cg_i64(c, ir_cfg_heads(c->g)), "blk");
    LLVMValueRef h = LLVMBuildSRem(c->b, li.i, cg_i64(c, ir_cfg_heads(c->g)), "h");
    LLVMValueRef j0 = LLVMBuildAdd(c->b, c->jlo, LLVMBuildMul(c->b, blk, cg_i64(c, tb), ""), "j0");
    LLVMValueRef nb =
        LLVMBuildSub(c->b, cg_intrinsic(c, "llvm.smin", c->i64, add(c, j0, tb), c->T), j0, "nb");
    /* the block's latents, transposed, once per block (keys past nb: 0) */
    LLVMBasicBlockRef stage = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "stage");
    LLVMBasicBlockRef ready = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "staged");
    LLVMBuildCondBr(
        c->b, LLVMBuildICmp(c->b, LLVMIntNE, LLVMBuildLoad2(c->b, c->i64, staged, ""), blk, ""),
        stage, ready);
    LLVMPositionBuilderAtEnd(c->b, stage);
    LLVMBuildStore(c->b, blk, staged);
    cg_loop lt = cg_for(c, z, cg_i64(c, tb), "t");
    LLVMValueRef in = LLVMBuildICmp(c->b, LLVMIntSLT, lt.i, nb, "");
    LLVMValueRef jt =
        LLVMBuildSelect(c->b, in, LLVMBuildAdd(c->b, j0, lt.i, ""), j0, ""); /* a key held */
    cg_loop lc = cg_for(c, z, cg_i64(c, kvl), "c");
    LLVMValueRef src[3] = {lc.i, z, jt};
    LLVMValueRef x = LLVMBuildSelect(
        c->b, in, cg_operand(c, cg_load_elem(c, lat, cg_addr(c, lat, src))), cg_f32(c, 0), "");
    LLVMBuildStore(
        c->b, x,
        cg_gep(c, c->f32, xt,
               LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lc.i, cg_i64(c, tb), ""), lt.i, "")));
    cg_for_end(c, &lc);
    cg_for_end(c, &lt);
    LLVMBuildBr(c->b, ready);
    LLVMPositionBuilderAtEnd(c->b, ready);
    if (keys) { /* k_pe, the same for every head */
        cg_loop lk = cg_for(c, z, nb, "t");
        cg_loop lr = cg_for(c, z, cg_i64(c, ir_cfg_mla_qk_rope_head_dim(c->g)), "r");
        LLVMValueRef jk = LLVMBuildAdd(c->b, j0, lk.i, "");
        LLVMValueRef pe[3] = {add(c, lr.i, kvl), z, jk};
        cg_store(c, n->dt, cg_load_elem(c, lat, cg_addr(c, lat, pe)),
                 at3(c, n, add(c, lr.i, nope), h, jk));
        cg_for_end(c, &lr);
        cg_for_end(c, &lk);
    }
    LLVMValueRef row0 =
        add(c, LLVMBuildMul(c->b, h, cg_i64(c, per), ""), keys ? 0 : nope); /* kv_b's row */
    int64_t full = rows / mr * mr;
    if (full) {
        cg_loop lb = cg_for(c, z, cg_i64(c, rows / mr), "rows");
        LLVMValueRef o = LLVMBuildMul(c->b, lb.i, cg_i64(c, mr), "");
        expand_rows(c, n, w, xt, tile, h, LLVMBuildAdd(c->b, row0, o, ""), o, mr, j0, nb);
        cg_for_end(c, &lb);
    }
    if (rows > full)
        expand_rows(c, n, w, xt, tile, h, add(c, row0, full), cg_i64(c, full), (int)(rows - full),
                    j0, nb);
    cg_for_end(c, &li);
    cg_kernel_end(c);
}
