/* cg_build.h: what the kernel families share (codegen/ only): the GEMM's
 * shape, the builder state of one kernel and the helpers that emit LLVM
 * IR for it. The pipeline's view of code generation is cg.h. */
#ifndef ATTNC_CG_BUILD_H
#define ATTNC_CG_BUILD_H

#include "attn_expr.h"
#include "codegen/cg.h"

/* The register-blocked GEMM of a linear: y[S, N] = x[S, K] . W^T. W is
 * packed at load time into np panels of nr = 2 * lanes output columns,
 * [panel][k][nr]; a micro-kernel keeps mr rows x nr columns in registers
 * for kc steps of k; rows come in blocks of mc (cg_gemm.c). */
typedef struct cg_gemm {
    int64_t n, k, np;
    int lanes, nr, mr, kc, mc, ku;
    attn_dtype wdt; /* the panels' dtype: the weights', or bf16 (compute bf16 rounds floats) */
    bool pairs;     /* bf16 panels of (k, k + 1) pairs for vdpbf16ps: [panel][k/2][nr][2] */
    bool amx;       /* pairs on AMX: the panels are tiles' B (k padded to 32), x row-major */
    bool mmla;      /* pairs on AArch64's bfmmla: quads of k, [panel][k/4][nr][4] (k padded
                       to 4), x [tile][k/4][mr][4]; rows in pairs */
    bool i8;        /* activations q8_0: x quantized, int8 panels (cg_int8.c) */
} cg_gemm;

/* Calls with at most this many new tokens (the target's gemv_rows) run a
 * linear as a GEMV: every thread streams its panels once, all rows at a
 * time, no x copy, no k blocks (measured switch point: docs/design.md). */
#define CG_GEMV_ROWS 8

ATTNC_HIDDEN cg_gemm cg_gemm_shape(const ir_node *lin, const cg_target *t, const ir_graph *graph);
/* 4-byte words of the packed panels of g. */
ATTNC_HIDDEN int64_t cg_gemm_packed_words(const cg_gemm *g);

/* ---- helpers for the kernel families ---------------------------------- */

typedef struct cg {
    ir_graph *g;
    const cg_plan *plan;
    LLVMContextRef llctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMValueRef fn;
    LLVMTypeRef i16, i32, i64, f16, f32, f64, ptr, kernel_ty;
    cg_target target;
    LLVMTypeRef vf, vi; /* <lanes x f32>, <lanes x i32> */
    int n_buffers;      /* buffer pointers loaded at each kernel's entry */
    attn_phase phase;   /* of the kernel being built */
    int64_t gate;       /* of its node (ir_node.gate): its kernels return at once in other calls */
    /* in the current kernel */
    LLVMValueRef args, ith, nth;
    LLVMValueRef tok0, pos, slot, table, tree; /* i64, ptrs (see attn_kernel_args) */
    LLVMValueRef jlo, Tk;                      /* first visible key and T - jlo (sequence phase) */
    LLVMValueRef base[ATTN_MAX_BUFFERS];       /* loaded once: stores cannot change them */
    LLVMValueRef S, P, T;                      /* i64 */
    /* where the plan has a cascade buffer, in the sequence phase: the
     * call is a prefix call (i1), and its n_shared (attn_kernel_args) */
    LLVMValueRef prefix, n_shared;
    /* the config's score_mod (0) and mask_mod (1), parsed at their first
     * use (cg_expr_of) */
    attn_expr expr[2];
    bool expr_parsed[2];
    attn_inputs inputs; /* the config's, parsed with them */
    /* the inputs the expressions read, loaded at a sequence-phase
     * function's entry: a token input's values and count (i32), a sequence
     * input's value (i32 in in_len), a weight input's base */
    LLVMValueRef in_ptr[ATTN_EXPR_MAX_INPUTS], in_len[ATTN_EXPR_MAX_INPUTS];
    /* the last tile bounds of the mask_mod (cg_mask.c): its box, the block
     * they were computed in (they serve the rest of it), may be true, false */
    LLVMValueRef bounds_key[4], bounds_yes, bounds_no;
    LLVMBasicBlockRef bounds_at;
} cg;

typedef struct cg_loop {
    LLVMValueRef i; /* i64 induction variable */
    LLVMBasicBlockRef header, body, exit;
    LLVMValueRef phi;
} cg_loop;

/* Starts kernel `name` for node n: entry block, S/P/T loaded; with a
 * gate (c->gate), returns at once in the calls it is off. */
ATTNC_HIDDEN void cg_kernel_begin(cg *c, const char *name);
/* i1: the call prefills a sequence holding no tokens with at least
 * `tokens` new ones (sequence phase). */
ATTNC_HIDDEN LLVMValueRef cg_prefill_at_least(cg *c, int64_t tokens);
/* Kernel `name` of the module, declared if not (yet) defined. */
ATTNC_HIDDEN LLVMValueRef cg_kernel_decl(cg *c, const char *name);
/* Starts a helper function of the kernel being built (internal, first
 * parameter the args pointer; ith = 0, nth = 1 inside). The caller saves
 * and restores c->fn and the builder position around it. */
ATTNC_HIDDEN LLVMValueRef cg_helper_begin(cg *c, const char *name, LLVMTypeRef *params, int n);
ATTNC_HIDDEN void cg_kernel_end(cg *c);

/* A stack slot in the entry block (promoted to a register by the
 * optimizer); used for accumulators. init (stored where the builder is)
 * may be NULL: large arrays must not get an aggregate store. */
ATTNC_HIDDEN LLVMValueRef cg_slot(cg *c, LLVMTypeRef ty, LLVMValueRef init);
ATTNC_HIDDEN LLVMValueRef cg_i64(cg *c, int64_t v);
ATTNC_HIDDEN LLVMValueRef cg_f32(cg *c, double v);
ATTNC_HIDDEN LLVMValueRef cg_dim(cg *c, ir_dim d);

/* for (i = lo; i < hi; i++) { body } */
ATTNC_HIDDEN cg_loop cg_for(cg *c, LLVMValueRef lo, LLVMValueRef hi, const char *name);
ATTNC_HIDDEN void cg_for_end(cg *c, cg_loop *l);

/* for (i = 0; i < hi; i++), run at least once, carrying n values of type
 * ty in registers: *acc gets their phis; cg_acc_loop_end closes it with
 * their values on entry (init, built before begin) and after an
 * iteration (next), which are the loop's results after it. n <= 64. */
typedef struct cg_acc_loop {
    LLVMValueRef i;
    LLVMValueRef acc[64];
    LLVMBasicBlockRef pre, body, exit;
    int n;
} cg_acc_loop;
ATTNC_HIDDEN void cg_acc_loop_begin(cg *c, cg_acc_loop *l, const char *name, LLVMTypeRef ty, int n);
ATTNC_HIDDEN void cg_acc_loop_end(cg *c, cg_acc_loop *l, LLVMValueRef hi, const LLVMValueRef *init,
                                  const LLVMValueRef *next);

/* The first key any query of this call can see: attn_first_key(P) (older
 * blocks may be released), 0 without a window or chunks. */
ATTNC_HIDDEN LLVMValueRef cg_first_key(cg *c);
/* attn_first_key of pos (i64, or a vector of i32 positions), or NULL
 * when every earlier key is visible (no window, no chunks). */
ATTNC_HIDDEN LLVMValueRef cg_first_key_at(cg *c, LLVMValueRef pos);
/* A private constant array of v[0..n) as floating type elem (f32, f64),
 * named name ("" = none). */
ATTNC_HIDDEN LLVMValueRef cg_const_table(cg *c, LLVMTypeRef elem, const double *v, int64_t n,
                                         const char *name);
/* ALiBi's slope of head `head` (i64), loaded from a constant table. */
ATTNC_HIDDEN LLVMValueRef cg_alibi_slope(cg *c, LLVMValueRef head);

/* This thread's share [lo, hi) of n items; share i of t of them. */
ATTNC_HIDDEN void cg_share(cg *c, LLVMValueRef n, LLVMValueRef *lo, LLVMValueRef *hi);
ATTNC_HIDDEN void cg_share_of(cg *c, LLVMValueRef n, LLVMValueRef i, LLVMValueRef t,
                              LLVMValueRef *lo, LLVMValueRef *hi);

/* The pool layout (attn_kernels.h): in a block, column col (K/V head x
 * head_dim + d) of the token at offset o is element col * col_stride +
 * o * tok_stride; K (which 0) keeps a column's tokens side by side, V
 * (which 1) a token's columns. */
ATTNC_HIDDEN void cg_cache_strides(const ir_graph *g, int which, int64_t *col_stride,
                                   int64_t *tok_stride);
/* Pointer to column col of cache row slot (block * block_tokens + o) of
 * cache which, buffer buf. */
ATTNC_HIDDEN LLVMValueRef cg_cache_elem(cg *c, int which, int buf, attn_dtype dt, LLVMValueRef slot,
                                        LLVMValueRef col);
/* The f16 scale d of the q8_0 cache element at p (a pointer, or a vector
 * of them) of cache `which` (0 K, 1 V) in buffer buf: within p's pool
 * block, after the block's int8 values, [column / 32][token] for K and V
 * alike, so the next block of 32 columns' d is block_tokens further and
 * a tile's tokens' d are side by side. */
ATTNC_HIDDEN LLVMValueRef cg_cache_scale(cg *c, int which, int buf, LLVMValueRef p);
/* f16 elements from column 0's d (cg_cache_scale) to column col's (an
 * i64): (col / 32) * block_tokens. */
ATTNC_HIDDEN LLVMValueRef cg_cache_scale_step(cg *c, LLVMValueRef col);
/* 0 if n's view is the K cache, 1 the V cache, -1 neither. */
ATTNC_HIDDEN int cg_cache_which(const cg *c, const ir_node *n);
/* The element of n's view at p as f32: cg_load, and for a q8_0 cache its
 * q times its block's d (exact). */
ATTNC_HIDDEN LLVMValueRef cg_load_elem(cg *c, const ir_node *n, LLVMValueRef p);
/* Pointer to element idx[0..ndim) of node n's view. */
ATTNC_HIDDEN LLVMValueRef cg_addr(cg *c, const ir_node *n, LLVMValueRef const *idx);
/* Base pointer of buffer k plus an element offset, for element type dt. */
ATTNC_HIDDEN LLVMValueRef cg_buf_elem(cg *c, int k, attn_dtype dt, LLVMValueRef off);
/* Bytes of one element of dt in memory, and its alignment (q8_0: its
 * int8 q; its scales live apart, cg_cache_scale). */
ATTNC_HIDDEN unsigned cg_elem_bytes(attn_dtype dt);
/* The LLVM element type of dtype dt in memory (bf16: i16). */
ATTNC_HIDDEN LLVMTypeRef cg_elem_type(cg *c, attn_dtype dt);
ATTNC_HIDDEN LLVMValueRef cg_load(cg *c, attn_dtype dt, LLVMValueRef p); /* -> f32 */
ATTNC_HIDDEN void cg_store(cg *c, attn_dtype dt, LLVMValueRef v, LLVMValueRef p);

/* Float arithmetic that may be reassociated and contracted (reductions
 * vectorize); results then depend on the vector width, not on threads. */
ATTNC_HIDDEN LLVMValueRef cg_fadd(cg *c, LLVMValueRef a, LLVMValueRef b);
ATTNC_HIDDEN LLVMValueRef cg_fmul(cg *c, LLVMValueRef a, LLVMValueRef b);

/* Vectors of c->target.lanes f32 (or i32) lanes. */
ATTNC_HIDDEN LLVMValueRef cg_splat(cg *c, LLVMValueRef scalar);
/* Elements idx[0..n) of a's and then b's (b NULL: a's only), n <= 256. */
ATTNC_HIDDEN LLVMValueRef cg_shuffle2(cg *c, LLVMValueRef a, LLVMValueRef b, const int *idx, int n);
/* The n vectors v (of one type; n a power of two) end to end. */
ATTNC_HIDDEN LLVMValueRef cg_concat(cg *c, const LLVMValueRef *v, int n);
/* The constant of type ty (a scalar, or a vector of any lane count) with
 * every element `one` (a scalar constant). */
ATTNC_HIDDEN LLVMValueRef cg_const_splat(LLVMTypeRef ty, LLVMValueRef one);
/* ty with its element type replaced by elem (the same lanes, or a scalar). */
ATTNC_HIDDEN LLVMTypeRef cg_like(LLVMTypeRef ty, LLVMTypeRef elem);
ATTNC_HIDDEN LLVMValueRef cg_vf32(cg *c, double v);
ATTNC_HIDDEN LLVMValueRef cg_lane_ids(cg *c); /* <0, 1, .., lanes-1> i32 */
ATTNC_HIDDEN LLVMValueRef cg_vload(cg *c, attn_dtype dt, LLVMValueRef p); /* -> f32 */
/* A vector of lanes elements of dtype dt (its cg_elem_type) as f32. */
ATTNC_HIDDEN LLVMValueRef cg_vwiden(cg *c, attn_dtype dt, LLVMValueRef v);
ATTNC_HIDDEN void cg_vstore(cg *c, attn_dtype dt, LLVMValueRef v, LLVMValueRef p); /* from f32 */
/* Lanes where mask is set (read from p, dtype dt, as f32); others read as
 * 0 / are left alone. */
ATTNC_HIDDEN LLVMValueRef cg_vload_masked(cg *c, attn_dtype dt, LLVMValueRef p, LLVMValueRef mask);
ATTNC_HIDDEN void cg_vstore_masked(cg *c, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask);
/* The masked memory intrinsic `name` (llvm.masked.load, .gather, .store)
 * over vector type vt and pointer type pt, with its n args. */
ATTNC_HIDDEN LLVMValueRef cg_masked_call(cg *c, const char *name, LLVMTypeRef vt, LLVMTypeRef pt,
                                         LLVMValueRef *args, int n);
/* base[idx] (elements of type elem, 4 bytes) where ok holds, 0 where it
 * does not (ok NULL: everywhere); idx i32 of any shape, ok i1 of its. */
ATTNC_HIDDEN LLVMValueRef cg_read_at(cg *c, LLVMTypeRef elem, LLVMValueRef base, LLVMValueRef idx,
                                     LLVMValueRef ok);
/* The elements (dtype dt) at the lanes' pointers ptrs (<lanes x ptr>), as f32. */
ATTNC_HIDDEN LLVMValueRef cg_vgather(cg *c, attn_dtype dt, LLVMValueRef ptrs);
/* p itself, through a volatile stack slot: the optimizer cannot tell
 * loads through it from other memory, so it neither forwards stored
 * values to them, nor hoists them out of the loop they are in, nor
 * merges loads of the same element made far apart (which kept values
 * live across a hot loop and spilled them); they stay loads, folded into
 * the FMAs where the ISA can. */
ATTNC_HIDDEN LLVMValueRef cg_opaque_ptr(cg *c, LLVMValueRef p);
/* Asks for the cache line at p (a read; locality 3: into L1 .. 0: none). */
ATTNC_HIDDEN void cg_prefetch(cg *c, LLVMValueRef p, int locality);
/* a * b + acc, fused where the target has FMA (results depend on the
 * target, not on threads). */
ATTNC_HIDDEN LLVMValueRef cg_fma(cg *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef acc);
/* An f32 operand (scalar or vector) of a matrix product as the config's
 * compute takes it: with bf16 rounded to bf16 (to nearest, ties to even,
 * subnormals kept; NaN stays NaN, quiet), else v itself. */
ATTNC_HIDDEN LLVMValueRef cg_operand(cg *c, LLVMValueRef v);
/* An operand of q.k (q or k) as cg_operand takes it, but v itself where
 * activations q8_0 quantize the query over a q8_0 cache
 * (ir_cfg_q8_query): q.k is then exact sums of the blocks' integers,
 * whatever compute is. */
ATTNC_HIDDEN LLVMValueRef cg_qk_operand(cg *c, LLVMValueRef v);
/* Whether compute bf16 takes its products as vdpbf16ps over pairs
 * (cg_dot_pairs): where the target has it, except AMX CPUs. */
ATTNC_HIDDEN bool cg_bf16_pairs_pay(const cg *c);
ATTNC_HIDDEN LLVMValueRef cg_bf16_round(cg *c, LLVMValueRef v);
/* Two f32 (scalars or vectors) as i32 pairs of bf16, each rounded: lo in
 * the low half (the first of a pair), hi in the high half; and back: the
 * f32 of a pair's low or high half. */
ATTNC_HIDDEN LLVMValueRef cg_bf16_pair(cg *c, LLVMValueRef lo, LLVMValueRef hi);
/* lo and hi (16 f32 each) rounded to bf16 as cg_bf16_round rounds, as 32
 * i16 words: lo's, then hi's (vcvtne2ps2bf16 where the target has it). */
ATTNC_HIDDEN LLVMValueRef cg_bf16_words(cg *c, LLVMValueRef lo, LLVMValueRef hi);
ATTNC_HIDDEN LLVMValueRef cg_bf16_half(cg *c, LLVMValueRef pair, bool high);
/* cg_bf16_pair of K or V elements of cache dtype dt widened to f32: a
 * bf16 cache's words as they are (exact), an f16 cache's (never
 * subnormal in f32) by vcvtne2ps2bf16 without cg_bf16_words' check, an
 * f32 cache's where vdpbf16ps or AMX tiles take them (cg_bf16_pairs_pay,
 * target.amx) by cg_dot_pair. */
ATTNC_HIDDEN LLVMValueRef cg_cache_pair(cg *c, attn_dtype dt, LLVMValueRef lo, LLVMValueRef hi);
/* cg_bf16_words for operands of vdpbf16ps or AMX tiles only (target
 * bf16_dot): one vcvtne2ps2bf16, which takes a subnormal as 0, as both
 * take a subnormal bf16 operand as 0 (so cg_bf16_words' check would buy
 * nothing there); NaN quiet, the rest rounded as cg_bf16_round. As 16
 * i32: pairs of consecutive values. */
ATTNC_HIDDEN LLVMValueRef cg_dot_words(cg *c, LLVMValueRef lo, LLVMValueRef hi);
/* cg_bf16_pair of two vectors of 16 f32 by cg_dot_words: for vdpbf16ps
 * or AMX tiles only. */
ATTNC_HIDDEN LLVMValueRef cg_dot_pair(cg *c, LLVMValueRef lo, LLVMValueRef hi);
/* AVX512-BF16 (target.bf16_dot): acc + the products of the bf16 pairs of
 * x and w in each lane (vectors of lanes i32 pairs): vdpbf16ps, the
 * high halves' product added first, then the low ones', each product
 * exact in f32 and each sum rounded to nearest even. x, the operand
 * callers broadcast, is the instruction's last source, the one that may
 * be a broadcast from memory ({1to16}): LLVM folds a splat load there. */
ATTNC_HIDDEN LLVMValueRef cg_dot_pairs(cg *c, LLVMValueRef acc, LLVMValueRef x, LLVMValueRef w);
/* AMX tiles (target.amx): 16 rows of 64 bytes. A tile's type (x86_amx,
 * or a pointer where target.amx_emulated: cg_amx.c); a tile of zeros;
 * one loaded from p (i8 *), its rows stride (i64) bytes apart; stored
 * there; acc + a . b, acc 16 x 16 f32, a 16 rows x 16 bf16 pairs, b 16
 * rows (pair j of the reduction) x 16 columns' pairs (tdpbf16ps). */
ATTNC_HIDDEN LLVMTypeRef cg_tile_type(cg *c);
ATTNC_HIDDEN LLVMValueRef cg_tile_zero(cg *c);
ATTNC_HIDDEN LLVMValueRef cg_tile_load(cg *c, LLVMValueRef p, LLVMValueRef stride);
ATTNC_HIDDEN void cg_tile_store(cg *c, LLVMValueRef p, LLVMValueRef stride, LLVMValueRef t);
ATTNC_HIDDEN LLVMValueRef cg_tile_dp_bf16(cg *c, LLVMValueRef acc, LLVMValueRef a, LLVMValueRef b);
/* Where a q.k node's scale goes: compute f32 multiplies the staged
 * queries by it (cg_query_scale gives it, cg_scale_sum leaves the sum
 * alone); compute bf16 rounds the queries unscaled (cg_query_scale gives
 * 1) and multiplies the f32 sum (cg_scale_sum), as activations q8_0 over
 * a q8_0 cache does with the queries it quantizes (ir_cfg_q8_query). */
ATTNC_HIDDEN double cg_query_scale(const cg *c, double scale);
ATTNC_HIDDEN LLVMValueRef cg_scale_sum(cg *c, const ir_node *n, LLVMValueRef sum);
/* A shuffle of v by constant lane indices idx[0..n). */
ATTNC_HIDDEN LLVMValueRef cg_shuffle(cg *c, LLVMValueRef v, const int *idx, int n);
ATTNC_HIDDEN void cg_transpose(cg *c, LLVMValueRef *v); /* lanes vectors, in place */
ATTNC_HIDDEN LLVMValueRef cg_gep(cg *c, LLVMTypeRef elem, LLVMValueRef p, LLVMValueRef off);

/* exp(x) for f32 (scalar or vector) as a polynomial in the IR (no libm call; the loop
 * vectorizer turns it into vector code): 0 below -87.34, NaN for NaN, max
 * relative error 8.1e-8 (test_cg measures it). tanh built on it. */
ATTNC_HIDDEN LLVMValueRef cg_exp(cg *c, LLVMValueRef x);
/* The same for x <= 0 (or -inf, NaN) only, as softmax's s - max: 18
 * operations in the IR against 30 (no clamp above, rounding without a floor or a
 * conversion, fused multiply-adds, NaN kept without a select); max
 * relative error 8.3e-8 over [-87, 0]. */
ATTNC_HIDDEN LLVMValueRef cg_exp_nonpos(cg *c, LLVMValueRef x);
ATTNC_HIDDEN LLVMValueRef cg_tanh(cg *c, LLVMValueRef x);
/* ln x (f32 scalar or vector), Cephes' logf polynomial: -inf at 0, NaN
 * below, inf and NaN through; subnormals scaled first. */
ATTNC_HIDDEN LLVMValueRef cg_log(cg *c, LLVMValueRef x);
/* Calls an overloaded LLVM intrinsic on one or two values of type ty. */
ATTNC_HIDDEN LLVMValueRef cg_intrinsic(cg *c, const char *name, LLVMTypeRef ty, LLVMValueRef a,
                                       LLVMValueRef b);

/* The kernel families; each emits the kernel of node n named name. */
ATTNC_HIDDEN void cg_emit_linear(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_rope(cg *c, const ir_node *n, const char *name);
/* RoPE's pair i of `half` pairs in the spec's style: dims (i, i + half)
 * or (2i, 2i + 1); and the pair (a, b) turned by (cos, sin):
 * (a cos - b sin, a sin + b cos) (cg_rope.c). */
ATTNC_HIDDEN void cg_rope_pair(cg *c, LLVMValueRef i, int64_t half, LLVMValueRef *ia,
                               LLVMValueRef *ib);
ATTNC_HIDDEN void cg_rope_turn(cg *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef cs,
                               LLVMValueRef sn, LLVMValueRef *ra, LLVMValueRef *rb);
ATTNC_HIDDEN void cg_emit_qk_norm(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_temperature(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_copy(cg *c, const ir_node *n, const char *name);
/* by_prefill: its chosen operand, copied (cg_copy.c). */
ATTNC_HIDDEN void cg_emit_by_prefill(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_qk(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_pv(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_rowwise(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_rope_table(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_pack(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_flash(cg *c, const ir_node *n, const char *name);
/* 1 / sqrt(sumsq / len + eps) (f32 sumsq, in double, as f32): RMS norms (cg_norm.c) */
ATTNC_HIDDEN LLVMValueRef cg_rms_factor(cg *c, LLVMValueRef sumsq, int64_t len, double eps);
/* multi-head latent attention's own kernels (cg_mla.c) */
ATTNC_HIDDEN void cg_emit_rms_norm(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_mla_latent(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_mla_query(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_mla_rope(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_mla_expand(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN void cg_emit_mla_output(cg *c, const ir_node *n, const char *name);
/* attn_forward_tree's bits (i64) of the call's token t (i64): the keys
 * of the call it sees (attn_kernel_args.tree), all ones in a call that
 * is no tree; NULL when the block's kernels take no tree (ir_cfg_tree). */
ATTNC_HIDDEN LLVMValueRef cg_tree_bits(cg *c, LLVMValueRef t);
/* i1 (lanes): keys (i32 or i64) of the call that tree bits (i64, the
 * same lanes) hide. */
ATTNC_HIDDEN LLVMValueRef cg_tree_hidden(cg *c, LLVMValueRef keys, LLVMValueRef bits);
/* What the flash kernels share (cg_mask.c). i1 lanes: keys (i32 vector)
 * hidden from rows at positions pos (i32 vector) of query heads `heads`
 * (i32 vector, among the block's all; read by mask_mod only, else may be
 * NULL) by n's causal mask, window and mask_mod, by the rows' tree bits
 * (i64 vector; NULL: none), or already by `beyond`. */
ATTNC_HIDDEN LLVMValueRef cg_keys_hidden(cg *c, const ir_node *n, LLVMValueRef keys,
                                         LLVMValueRef pos, LLVMValueRef heads, LLVMValueRef bits,
                                         LLVMValueRef beyond);
/* s (f32 vector) through n's score_mod, or s without one; keys, pos and
 * heads as for cg_keys_hidden; pre: cg_expr_at's (or NULL). */
ATTNC_HIDDEN LLVMValueRef cg_score_mod(cg *c, const ir_node *n, LLVMValueRef s, LLVMValueRef keys,
                                       LLVMValueRef pos, LLVMValueRef heads,
                                       const LLVMValueRef *pre);
/* The first of the block's query heads among all of the model's (a
 * shard's offset; 0 for a whole block): what h reads in expressions. */
ATTNC_HIDDEN int64_t cg_expr_head0(cg *c);
/* 1 / l of a row's softmax sum l (f32); in a block with a mask_mod, 0
 * where l is 0 (the row saw no key: its output is 0, as the reference's). */
ATTNC_HIDDEN LLVMValueRef cg_inv_sum(cg *c, const ir_node *n, LLVMValueRef l);
/* Whether n's mask_mod may show some key of [j0, jlast] to some row at
 * positions pmin..pmax (i1); NULL without a mask_mod. A tile it proves
 * hidden is skipped: no q.k, no K/V loads. */
ATTNC_HIDDEN LLVMValueRef cg_tile_live(cg *c, const ir_node *n, LLVMValueRef j0, LLVMValueRef jlast,
                                       LLVMValueRef pmin, LLVMValueRef pmax);
/* Code between cg_live_begin and cg_live_end runs only where live (i1)
 * holds; always where live is NULL. */
ATTNC_HIDDEN LLVMBasicBlockRef cg_live_begin(cg *c, LLVMValueRef live);
ATTNC_HIDDEN void cg_live_end(cg *c, LLVMBasicBlockRef done);
/* Whether the key tile [j0, jlast] is cut for rows at positions
 * pmin..pmax: keys at or past jend, or some key a row's mask, window or
 * mask_mod may hide (p.v must then skip weight-0 keys). */
ATTNC_HIDDEN LLVMValueRef cg_tile_cut(cg *c, const ir_node *n, LLVMValueRef j0, LLVMValueRef jlast,
                                      LLVMValueRef jend, LLVMValueRef pmin, LLVMValueRef pmax);
/* s + slope * (keys - pos) (ALiBi's -slope (p - j)): f32 vectors s and
 * slope, i32 vectors keys and pos. */
ATTNC_HIDDEN LLVMValueRef cg_alibi_add(cg *c, LLVMValueRef s, LLVMValueRef slope, LLVMValueRef keys,
                                       LLVMValueRef pos);
/* cap * tanh(s / cap) with n's softcap, or s without one (vectors). */
ATTNC_HIDDEN LLVMValueRef cg_softcap(cg *c, const ir_node *n, LLVMValueRef s);

/* score_mod and mask_mod (cg_expr.c). What an expression reads, all of
 * one shape (i32 scalars or vectors of one lane count): the query's
 * position q, the key's kv, the query head h (among all of the block's)
 * and score (f32, score_mod only); g = h / (heads / kv_groups). */
typedef struct cg_expr_at {
    LLVMValueRef score, q, kv, h;
    const LLVMValueRef *pre; /* [n_nodes]: a node's value computed before, or NULL (or pre NULL) */
} cg_expr_at;
/* The expression's value at `at`: i1, i32 or f32 of at->kv's shape; and
 * every node's, into v[0..n_nodes). */
ATTNC_HIDDEN LLVMValueRef cg_expr(cg *c, const attn_expr *e, const cg_expr_at *at);
ATTNC_HIDDEN void cg_expr_values(cg *c, const attn_expr *e, const cg_expr_at *at, LLVMValueRef *v);
/* A box of (query position, key position, head): i64 scalars, bounds
 * included. What a boolean expression may be over it: *yes, it may be
 * true somewhere in the box; *no, it may be false somewhere (i1; by
 * interval arithmetic on the int nodes, so a mask affine in q and kv is
 * bounded exactly; a token input read at an index range by scanning its
 * values there; one reading floats may be either). */
typedef struct cg_expr_box {
    LLVMValueRef q0, q1, k0, k1, h0, h1;
} cg_expr_box;
ATTNC_HIDDEN void cg_expr_bounds(cg *c, const attn_expr *e, const cg_expr_box *box,
                                 LLVMValueRef *yes, LLVMValueRef *no);
/* The float nodes of e worth computing once per row rather than per key:
 * the largest parts that read only q, h, g and literals and are not
 * literals themselves (ALiBi's slope exp(-c * (h + 1))). Their indices
 * into node[0..max), how many. */
ATTNC_HIDDEN int cg_expr_row_parts(const attn_expr *e, int *node, int max);
/* Whether score_mod e is score + X, X + score or (*minus) score - X, with
 * X reading q and kv only as q - kv (and h, g, literals, inputs): X is
 * then a function of the distance d = q - kv and the head, tabulated per
 * key tile. X's node index, or -1. */
ATTNC_HIDDEN int cg_expr_distance_addend(const attn_expr *e, bool *minus);
/* Whether mask_mod e requires, as a conjunct of its top-level `and`s,
 * (q - kv) % P == R or (kv - q) % P == R for literals 2 <= P <=
 * CG_DILATION_MAX and 0 <= R < P (a dilated window): then a key is seen
 * only where kv = q + *shift (mod P), and the flash kernel takes each
 * residue class of rows with the keys of its class alone. P, with *rest
 * = e with that conjunct true; 0 if none. */
enum { CG_DILATION_MAX = 64 };
ATTNC_HIDDEN int cg_expr_dilation(const attn_expr *e, int64_t *shift, attn_expr *rest);
/* The config's mask_mod (mask) or score_mod, parsed; NULL if it has none. */
ATTNC_HIDDEN const attn_expr *cg_expr_of(cg *c, bool mask);
/* The split path of a flash node (cg_split.c): the partials, emitted
 * inside the flash kernel for calls of at most split_tokens new tokens,
 * and the kernel merging them; the size of the partials buffer. */
ATTNC_HIDDEN void cg_emit_split_partials(cg *c, const ir_node *n);
ATTNC_HIDDEN void cg_emit_split_merge(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN int64_t cg_split_elements(const ir_node *n, const ir_graph *g);
/* Whether the flash kernel computes the partials itself (over its own
 * row items, one chunk of keys each) instead of the split kernel: MLA,
 * whose values are a view of the cached latent's rows. */
ATTNC_HIDDEN bool cg_split_by_flash(const ir_graph *g);
/* Whether flash node n takes shared-prefix calls (attn_kernels.h): its
 * split path's rows see every key of a prefix alike, whatever their
 * positions (no window, chunk, ALiBi or expression), so rows of several
 * sequences can share the prefix's tiles. */
ATTNC_HIDDEN bool cg_split_cascades(const ir_node *n, const ir_graph *g);
/* A call's keys [jfirst, jend) as nc chunks of nt tiles from jbeg. */
typedef struct cg_chunks {
    LLVMValueRef jfirst, jbeg, jend, nt, nc;
    LLVMValueRef bnd; /* with a mask_mod: [nc + 1] i64, chunk c's first key (else NULL) */
} cg_chunks;
ATTNC_HIDDEN void cg_split_chunks(cg *c, const ir_node *n, cg_chunks *k);
/* The first key of chunk ch (ch = nc: jend). */
ATTNC_HIDDEN LLVMValueRef cg_split_chunk_key(cg *c, const cg_chunks *k, LLVMValueRef ch);
/* A prefix call's state of row `row` (token x heads + head) in the
 * cascade buffer (attn_kernel_args): m, l, then the unnormalized o. */
ATTNC_HIDDEN LLVMValueRef cg_split_cascade_row(cg *c, const ir_node *n, LLVMValueRef row);
/* Element e (0: m, 1: l, 2..: o) of row `row` (token x heads + head) of a chunk's partials. */
ATTNC_HIDDEN LLVMValueRef cg_split_part(cg *c, const ir_node *n, LLVMValueRef chunk,
                                        LLVMValueRef row, LLVMValueRef e);

/* ---- activations q8_0 (cg_int8.c) --------------------------------------- */
/* The n f32 values at p (n a multiple of 32) quantized in place to
 * ggml's Q8_0 blocks and back: each block of 32 becomes d * q, d =
 * max|x| / 127 held as f16, q = round(x / d) (ggml-quants.c
 * quantize_row_q8_0_ref), all of it NaN where a value is not finite. */
ATTNC_HIDDEN void cg_q8_round_trip(cg *c, LLVMValueRef p, int64_t n);
/* dst[0..hd) (f32) = the query row q[., h, t] quantized to Q8_0 blocks
 * and back: q as ir_cfg_q8_query takes it for q.k. */
ATTNC_HIDDEN void cg_q8_query_row(cg *c, const ir_node *q, LLVMValueRef h, LLVMValueRef t,
                                  LLVMValueRef dst, int64_t hd);
/* The same blocks kept apart (a q8_0 cache's q.k, cg_split.c): each
 * value becomes its q (an integer-valued f32), block b's d goes to
 * dq[b] (f32); with words, q also as bytes, four to an i32 (words[8b +
 * g]: the block's values 4g..4g+3), and corr[b] = -128 * sum q (i32),
 * what a dot product with the other operand's bytes plus 128 takes back. */
ATTNC_HIDDEN void cg_q8_row(cg *c, LLVMValueRef p, int64_t n, LLVMValueRef dq, LLVMValueRef words,
                            LLVMValueRef corr);

/* Words of one quantized x block of 32 for each row of a tile: 8 of q,
 * d (f32), -off * sum q (i32). */
#define CG_QX_WORDS 10
/* acc + the four u8 x s8 products of each 32-bit lane of u and s
 * (<lanes x i32>): vpdpbusd, or the same integers without VNNI. */
ATTNC_HIDDEN LLVMValueRef cg_dot_u8s8(cg *c, LLVMValueRef acc, LLVMValueRef u, LLVMValueRef s);
/* Rows [r0, r1) of x (f32 buffer x_buf, rows of K), nblk blocks of 32
 * from k = kb, quantized into dst: tiles of xs rows (row r0 + i in tile
 * i / xs), tile_words apart; off: the weights' offset (128 q8_0, 8 q4_0). */
ATTNC_HIDDEN void cg_quantize_rows(cg *c, int x_buf, int64_t K, LLVMValueRef r0, LLVMValueRef r1,
                                   LLVMValueRef kb, LLVMValueRef nblk, LLVMValueRef dst, int64_t xs,
                                   int64_t tile_words, int off);
/* The sums of R rows (quantized x at xq, a tile of xs rows) over nblk
 * blocks against npan int8 panels at w0[] (pbb bytes a block), from
 * init into next, panel pp's at + pp * 2R. */
ATTNC_HIDDEN void cg_int8_sums(cg *c, int64_t nr, int R, int npan, const LLVMValueRef *w0,
                               int64_t pbb, bool q8, LLVMValueRef nblk, LLVMValueRef xq, int64_t xs,
                               const LLVMValueRef *init, LLVMValueRef *next);
/* One ggml block at sb of the column in lane ll (of nr) into a panel
 * block's data at dq, in the int8 order; past N (inside false) zero. */
/* AArch64 with i8mm: the GEMM's int8 products by smmla (cg_int8.c), x's
 * rows and the panels in the order of its 2 x 8 operands. */
ATTNC_HIDDEN bool cg_int8_mmla(const cg *c);
/* The sums of R rows (vector j of row r at 2r + j, lanes columns) as the
 * 2 x 2 blocks of row pairs (pair i, column pair q at 4i + q: lanes [r c,
 * r c+1, r+1 c, r+1 c+1] of rows 2i.. and columns 2q.. of the panel's 8),
 * or (back) the reverse; a missing partner row is 0 and not written back. */
ATTNC_HIDDEN void cg_mmla_blocks(cg *c, int R, const LLVMValueRef *from, LLVMValueRef *to,
                                 bool back);
ATTNC_HIDDEN void cg_pack_int8_block(cg *c, bool q8, int64_t nr, LLVMValueRef sb, LLVMValueRef dq,
                                     LLVMValueRef ll, LLVMValueRef inside);

#endif
