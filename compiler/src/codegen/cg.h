/* cg.h: code generation. cg_plan.c decides where every value lives (a
 * buffer of the kernel table plus strides); the cg_*.c kernel families
 * turn each node into one LLVM function `void k(args*, i32 ith, i32 nth)`;
 * cg_module.c drives them. Only codegen/ and emit/ see llvm-c. */
#ifndef ATTNC_CG_H
#define ATTNC_CG_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "ir/ir.h"

/* Where a node's value lives: element (i, j, k) is at
 * buf[off + i*nb[0] + j*nb[1] + k*nb[2]], elements of type dt. */
typedef struct cg_view {
    int buf; /* -1: no storage (weights are named by the table, views alias) */
    attn_dtype dt;
    ir_dim off;
    ir_dim nb[IR_MAX_DIMS];
    bool paged;          /* the cache: dim 2 is a token j read through the block table,
                            nb[2] its stride within its block (cg_cache_strides) */
    bool batch_rows;     /* outermost dim is S over the whole batch: sequence-phase
                            kernels add tok0 to it */
    bool from_first_key; /* per-sequence scratch: its T dims hold keys jlo..T-1
                            only (T - jlo of them), see cg_first_key */
} cg_view;

/* What the target's vector unit looks like (f32 lanes of one vector, the
 * number of vector registers) and the register blocking of every kernel
 * family chosen for it, in one place (cg_target_for): kernels read their
 * shapes from here. Any values are correct on any target (LLVM
 * legalizes); only speed depends on them. */
typedef struct cg_target {
    int lanes, regs;
    int flash_rv;          /* flash: vectors of query rows per work item */
    int flash_bks;         /* flash: keys per score pass */
    int flash_bk;          /* flash: keys per tile (score passes of flash_bks) */
    int flash_dc;          /* flash: most head_dim rows per p.v register block */
    int split_pv_regs;     /* split decode: registers for the p.v sums of a row block */
    int split_accs;        /* split decode: score partial sums of a row block (rows x chains) */
    int split_vecs;        /* split decode: vectors of keys a tile (where blocks hold them) */
    bool fma_bcast;        /* an FMA takes a broadcast element from memory (AVX-512) */
    int gemm_mr;           /* GEMM: rows of the micro-kernel (2 vectors of sums each) */
    int gemm_kc;           /* GEMM: steps of k per block (a panel's kc x nr stays in cache) */
    int gemm_mc_tiles;     /* GEMM: micro-kernel tiles of mr rows per row block */
    int gemm_ku;           /* GEMM and GEMV: k steps per trip of the f32/f16/bf16 loop */
    int gemv_rows;         /* calls of at most this many rows run a linear as a GEMV */
    int probe_accs;        /* roofline's FMA probe: independent accumulators */
    uint32_t cpu_features; /* ATTN_CPU_* bits the code may use: the table records them */
} cg_target;

/* The target of lanes-wide f32 vectors and regs vector registers, with
 * the kernels' shapes for it. */
ATTNC_HIDDEN cg_target cg_target_for(int lanes, int regs);

/* The register-blocked GEMM of a linear: y[S, N] = x[S, K] . W^T. W is
 * packed at load time into np panels of nr = 2 * lanes output columns,
 * [panel][k][nr]; a micro-kernel keeps mr rows x nr columns in registers
 * for kc steps of k; rows come in blocks of mc (cg_gemm.c). */
typedef struct cg_gemm {
    int64_t n, k, np;
    int lanes, nr, mr, kc, mc, ku;
} cg_gemm;

/* Calls with at most this many new tokens (the target's gemv_rows) run a
 * linear as a GEMV: every thread streams its panels once, all rows at a
 * time, no x copy, no k blocks (measured switch point: docs/design.md). */
#define CG_GEMV_ROWS 8

ATTNC_HIDDEN cg_gemm cg_gemm_shape(const ir_node *lin, const cg_target *t);
/* 4-byte words of the packed panels of g for weights of dtype dt. */
ATTNC_HIDDEN int64_t cg_gemm_packed_words(const cg_gemm *g, attn_dtype dt);

typedef struct cg_plan {
    cg_view *view; /* by node id */
    int *packed;   /* by node id: a linear's packed weight buffer */
    int *split;    /* by node id: a split flash node's partial results */
    int n_buffers;
    attn_buffer_desc buffers[ATTN_MAX_BUFFERS];
    bool *emit;        /* by node id: the node gets a kernel */
    attn_phase *phase; /* by node id */
} cg_plan;

/* Lays out every live node of g (arena memory). */
ATTNC_HIDDEN attnc_status cg_plan_build(ir_graph *g, const cg_target *t, cg_plan *p);

/* What code generation builds, unit by unit: each unit is one function
 * (a kernel with its helpers, a split flash's decode path, or the table
 * and its accessor) and depends on no other unit's code, so units can be
 * built and compiled in separate contexts on separate threads; a flash
 * kernel calls its split path by name. */
typedef enum cg_unit_kind {
    CG_UNIT_PACK,  /* a linear's load-time pack */
    CG_UNIT_NODE,  /* the kernel of a node */
    CG_UNIT_SPLIT, /* a split flash's decode path, called by its kernel */
    CG_UNIT_MERGE, /* a split flash's merge */
    CG_UNIT_TABLE  /* the kernel table and `const attn_kernels *<name>_kernels(void)` */
} cg_unit_kind;

typedef struct cg_unit {
    cg_unit_kind kind;
    const ir_node *n; /* NULL for the table */
    const char *name; /* the function it defines */
    attn_phase phase;
    int cost;       /* rough relative size of its code: the biggest are compiled first */
    bool vector_ir; /* written in vectors (GEMM tiles, flash, split decode, merge):
                       needs no loop vectorizer */
} cg_unit;

/* The plan of code generation: buffers, steps (the table) and units. */
typedef struct cg_result {
    ir_graph *g;
    cg_target target;
    cg_plan plan;
    int n_buffers;
    attn_buffer_desc buffers[ATTN_MAX_BUFFERS];
    int n_steps;
    const char **step_names; /* ctx arena */
    attn_phase *step_phase;  /* ctx arena */
    int n_units;
    cg_unit *units; /* ctx arena; the table is the last */
} cg_result;

/* Plans g's buffers and units for target t (ctx arena). */
ATTNC_HIDDEN attnc_status cg_units_plan(ir_graph *g, const cg_target *t, cg_result *out);
/* Builds units which[0..n) of r into a new module of llctx; NULL with
 * *why (LLVM's message, dispose it) when the module does not verify.
 * Reads r and its graph only: calls with distinct contexts may run on
 * distinct threads at once. */
ATTNC_HIDDEN LLVMModuleRef cg_units_build(const cg_result *r, const int *which, int n,
                                          LLVMContextRef llctx, char **why);

/* Adds the kernel table as constant data and `const attn_kernels
 * *<name>_kernels(void)` returning it (its kernels declared where mod
 * lacks them). The config and buffer descriptors are stored as the bytes
 * of their C structs (with zeroed padding, so equal inputs give equal
 * objects): the target must share the host's LP64 little-endian layout. */
ATTNC_HIDDEN void cg_table_build(const cg_result *r, LLVMModuleRef mod);

/* The machine probes of `attnc roofline` (cg_probe.c): attnc_probe_fma
 * and attnc_probe_read; *flops_per_iter is what one fma round does. */
ATTNC_HIDDEN LLVMModuleRef cg_probe_build(LLVMContextRef ctx, const cg_target *t,
                                          int64_t *flops_per_iter);

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
    LLVMValueRef tok0, pos, slot, table; /* i64, ptrs (see attn_kernel_args) */
    LLVMValueRef jlo, Tk;                /* first visible key and T - jlo (sequence phase) */
    LLVMValueRef base[ATTN_MAX_BUFFERS]; /* loaded once: stores cannot change them */
    LLVMValueRef S, P, T;                /* i64 */
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

/* This thread's share [lo, hi) of n items. */
ATTNC_HIDDEN void cg_share(cg *c, LLVMValueRef n, LLVMValueRef *lo, LLVMValueRef *hi);

/* The pool layout (attn_kernels.h): in a block, column col (K/V head x
 * head_dim + d) of the token at offset o is element col * col_stride +
 * o * tok_stride; K (which 0) keeps a column's tokens side by side, V
 * (which 1) a token's columns. */
ATTNC_HIDDEN void cg_cache_strides(const attn_config *cfg, int which, int64_t *col_stride,
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
ATTNC_HIDDEN LLVMValueRef cg_vf32(cg *c, double v);
ATTNC_HIDDEN LLVMValueRef cg_lane_ids(cg *c); /* <0, 1, .., lanes-1> i32 */
ATTNC_HIDDEN LLVMValueRef cg_vload(cg *c, attn_dtype dt, LLVMValueRef p);          /* -> f32 */
ATTNC_HIDDEN void cg_vstore(cg *c, attn_dtype dt, LLVMValueRef v, LLVMValueRef p); /* from f32 */
/* Lanes where mask is set (read from p, dtype dt, as f32); others read as
 * 0 / are left alone. */
ATTNC_HIDDEN LLVMValueRef cg_vload_masked(cg *c, attn_dtype dt, LLVMValueRef p, LLVMValueRef mask);
ATTNC_HIDDEN void cg_vstore_masked(cg *c, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask);
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
/* What the flash kernels share (cg_mask.c). i1 lanes: keys (i32 vector)
 * hidden from rows at positions pos (i32 vector) by n's causal mask and
 * window, or already by `beyond`. */
ATTNC_HIDDEN LLVMValueRef cg_keys_hidden(cg *c, const ir_node *n, LLVMValueRef keys,
                                         LLVMValueRef pos, LLVMValueRef beyond);
/* Whether the key tile [j0, jlast] is cut for rows at positions
 * pmin..pmax: keys at or past jend, or some key a row's mask or window
 * hides (p.v must then skip weight-0 keys). */
ATTNC_HIDDEN LLVMValueRef cg_tile_cut(cg *c, const ir_node *n, LLVMValueRef j0, LLVMValueRef jlast,
                                      LLVMValueRef jend, LLVMValueRef pmin, LLVMValueRef pmax);
/* s + slope * (keys - pos) (ALiBi's -slope (p - j)): f32 vectors s and
 * slope, i32 vectors keys and pos. */
ATTNC_HIDDEN LLVMValueRef cg_alibi_add(cg *c, LLVMValueRef s, LLVMValueRef slope, LLVMValueRef keys,
                                       LLVMValueRef pos);
/* cap * tanh(s / cap) with n's softcap, or s without one (vectors). */
ATTNC_HIDDEN LLVMValueRef cg_softcap(cg *c, const ir_node *n, LLVMValueRef s);
/* The split path of a flash node (cg_split.c): the partials, emitted
 * inside the flash kernel for calls of at most split_tokens new tokens,
 * and the kernel merging them; the size of the partials buffer. */
ATTNC_HIDDEN void cg_emit_split_partials(cg *c, const ir_node *n);
ATTNC_HIDDEN void cg_emit_split_merge(cg *c, const ir_node *n, const char *name);
ATTNC_HIDDEN int64_t cg_split_elements(const ir_node *n, const attn_config *cfg);
/* Whether the flash kernel computes the partials itself (over its own
 * row items, one chunk of keys each) instead of the split kernel: MLA,
 * whose values are a view of the cached latent's rows. */
ATTNC_HIDDEN bool cg_split_by_flash(const ir_graph *g);
/* A call's keys [jfirst, jend) as nc chunks of nt tiles from jbeg. */
typedef struct cg_chunks {
    LLVMValueRef jfirst, jbeg, jend, nt, nc;
} cg_chunks;
ATTNC_HIDDEN void cg_split_chunks(cg *c, const ir_node *n, cg_chunks *k);
/* The first key of chunk ch (ch = nc: jend). */
ATTNC_HIDDEN LLVMValueRef cg_split_chunk_key(cg *c, const cg_chunks *k, LLVMValueRef ch);
/* Element e (0: m, 1: l, 2..: o) of row `row` (token x heads + head) of a chunk's partials. */
ATTNC_HIDDEN LLVMValueRef cg_split_part(cg *c, const ir_node *n, LLVMValueRef chunk,
                                        LLVMValueRef row, LLVMValueRef e);

#endif
