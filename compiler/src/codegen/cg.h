/* cg.h: code generation as the pipeline sees it (compile.c, emit/): the
 * target's shape, the buffer plan, the units and how to build them, the
 * kernel table and the probes. cg_plan.c decides where every value lives
 * (a buffer of the kernel table plus strides); the cg_*.c kernel families
 * turn each node into one LLVM function `void k(args*, i32 ith, i32 nth)`
 * with the helpers of cg_build.h; cg_module.c drives them. Only codegen/
 * and emit/ see llvm-c. */
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
    int machine_lanes;  /* lanes of a machine vector (a kernel may widen lanes) */
    int flash_rv;       /* flash: vectors of query rows per work item */
    int flash_bks;      /* flash: keys per score pass */
    int flash_bk;       /* flash: keys per tile (score passes of flash_bks) */
    int flash_dc;       /* flash: most head_dim rows per p.v register block */
    int flash_pairs_rv; /* flash by vdpbf16ps pairs: flash_rv, flash_bks and flash_dc */
    int flash_pairs_bks;
    int flash_pairs_dc;
    int flash_prefix_rv; /* flash, a prefix call's items in f32 (0: flash_rv's): its rv, bks, dc */
    int flash_prefix_bks;
    int flash_prefix_dc;
    int flash_amx_rv;      /* flash on AMX tiles: tiles of 16 query rows per work item */
    int flash_amx_bk;      /* flash on AMX tiles: keys per tile (a multiple of 32) */
    int split_pv_regs;     /* split decode: registers for the p.v sums of a row block */
    int split_accs;        /* split decode: score partial sums of a row block (rows x chains) */
    int split_vecs;        /* split decode: vectors of keys a tile (where blocks hold them) */
    bool fma_bcast;        /* an FMA takes a broadcast element from memory (AVX-512) */
    bool bf16_dot;         /* vdpbf16ps (AVX512-BF16): compute bf16's products in pairs */
    bool amx;              /* AMX tiles (amx-tile, amx-bf16): compute bf16's GEMM */
    bool amx_emulated;     /* amx, the tile instructions emulated ($ATTNC_AMX_EMULATE) */
    bool vnni;             /* vpdpbusd on the target's vectors: activations q8_0's products */
    bool usdot;            /* AArch64 usdot (i8mm): the same products, a machine vector at a time */
    bool bfdot;            /* AArch64 bfdot (bf16): compute bf16's projections in pairs of k */
    int gemm_mr;           /* GEMM: rows of the micro-kernel (2 vectors of sums each) */
    int gemm_kc;           /* GEMM: steps of k per block (a panel's kc x nr stays in cache) */
    int gemm_mc_tiles;     /* GEMM: micro-kernel tiles of mr rows per row block */
    int gemm_rest_tiles;   /* GEMM: tiles the last row block may take beyond mc */
    int gemm_ku;           /* GEMM and GEMV: k steps per trip of the f32/f16/bf16 loop */
    int gemm_amx_mc;       /* GEMM on AMX tiles: most rows per row block */
    int gemm_amx_kc;       /* GEMM on AMX tiles: most k per block */
    int gemm_amx_x_bytes;  /* GEMM on AMX tiles: bytes of an x block (mc x kc bf16) */
    int gemv_rows;         /* calls of at most this many rows run a linear as a GEMV */
    int probe_accs;        /* roofline's FMA probe: independent accumulators */
    uint32_t cpu_features; /* ATTN_CPU_* bits the code may use: the table records them */
} cg_target;

/* The target of lanes-wide f32 vectors and regs vector registers, with
 * the kernels' shapes for it. */
ATTNC_HIDDEN cg_target cg_target_for(int lanes, int regs);

typedef struct cg_plan {
    cg_view *view; /* by node id */
    int *packed;   /* by node id: a linear's packed weight buffer */
    int *split;    /* by node id: a split flash node's partial results */
    int cascade;   /* the ATTN_BUF_CASCADE buffer (cg_split_cascades), or -1 */
    int n_buffers;
    attn_buffer_desc buffers[ATTN_MAX_BUFFERS];
    bool *emit;                          /* by node id: the node gets a kernel */
    attn_phase *phase;                   /* by node id */
    int input_buf[ATTN_EXPR_MAX_INPUTS]; /* the expressions' inputs read: their buffers, else -1 */
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
    uint32_t *step_flags;    /* ctx arena: ATTN_STEP_* */
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
/* The ATTN_CPU_* features the kernel table of cfg's kernels for target t
 * records (its cpu_features): t's, less AMX, VNNI and I8MM where cfg's
 * compute and activations do not use them. */
ATTNC_HIDDEN uint32_t cg_table_features(const cg_target *t, const attn_config *cfg);

/* What one round of each machine probe does (0: the target has none). */
typedef struct cg_probe_work {
    int64_t fma, bf16, amx; /* FLOPs */
    int64_t int8;           /* int8 multiply-adds, two operations each */
} cg_probe_work;

/* The machine probes of `attnc roofline` (cg_probe.c): attnc_probe_fma,
 * attnc_probe_read and, where the target has bf16 dot products, AMX and
 * VNNI, attnc_probe_bf16, attnc_probe_amx and attnc_probe_int8. */
ATTNC_HIDDEN LLVMModuleRef cg_probe_build(LLVMContextRef ctx, const cg_target *t,
                                          cg_probe_work *work);

#endif
