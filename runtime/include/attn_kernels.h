/* attn_kernels.h: the one ABI between the compiler and the runtime. A
 * kernel table lists the buffers one forward step uses and the kernels to
 * run over them in order; the JIT fills it in memory, an emitted object
 * defines it as data. The runtime runs it without knowing the IR. */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_KERNELS_ABI 16
#define ATTN_MAX_BUFFERS 48

/* What one kernel call sees; every other size is a constant compiled into
 * the kernels. A step runs in one of two phases:
 * - tokens: once over all new tokens of a batch (n_tokens of them, back to
 *   back by sequence): projections, RoPE at pos[t], the K/V append into
 *   cache row slot[t] (= block * block_tokens + offset);
 * - sequence: once per sequence of the batch, with its n_tokens (S) new
 *   tokens at batch rows tok0.., n_past (P) tokens cached before them
 *   (T = P + S), read through block_table (cache row of token j:
 *   block_table[j / block_tokens] * block_tokens + j % block_tokens).
 *   tree (attn_forward_tree; NULL otherwise): new token i sees, of the
 *   call's keys P.., only P + k for the bits k set in tree[i] (S <= 64);
 *   the causal mask still applies by index, and RoPE takes pos[t].
 * Shared-prefix ("cascade") calls, where the table has an
 * ATTN_BUF_CASCADE buffer: sequences of a batch whose first blocks are
 * the same blocks of the pool attend to those keys once, together.
 * - A prefix call (flags ATTN_ARGS_PREFIX) runs the steps marked
 *   ATTN_STEP_PREFIX only: its n_tokens rows are the new tokens of
 *   several sequences, back to back at batch rows tok0.., and every row
 *   sees exactly the keys 0..n_past-1 of block_table (T = P, nothing of
 *   its own). It writes each row's softmax state over them, unnormalized,
 *   to the cascade buffer at the row's batch index, and no output.
 * - Then each of those sequences' own call (n_shared = the prefix's key
 *   count) reads only its keys from n_shared on and merges the state the
 *   prefix call left for its rows. n_shared is 0 in every other call. */
typedef struct attn_kernel_args {
    uint32_t abi_version;
    uint32_t flags; /* ATTN_ARGS_* */
    int64_t n_tokens;
    int64_t n_past;
    int64_t tok0;
    const int64_t *pos;
    const int64_t *slot;
    const int32_t *block_table;
    const uint64_t *tree;
    int64_t n_shared;
    void *buf[ATTN_MAX_BUFFERS];
} attn_kernel_args;

#define ATTN_ARGS_PREFIX (1u << 0)

_Static_assert(offsetof(attn_kernel_args, abi_version) == 0, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, n_tokens) == 8, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, n_past) == 16, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, tok0) == 24, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, pos) == 32, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, slot) == 40, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, block_table) == 48, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, tree) == 56, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, flags) == 4, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, n_shared) == 64, "kernel ABI");
_Static_assert(offsetof(attn_kernel_args, buf) == 72, "kernel ABI");

/* - load: once when a block's weights are set (n_tokens = 0), turning the
 *   weight buffers into the kernels' packed buffers; never in a forward.
 * - memory (cross-attention): once per attn_seq_set_memory, over the
 *   memory's rows (n_tokens of them, cache rows slot[t]): the K/V
 *   projections of the memory into the sequence's cache. A forward's
 *   sequence phase then reads the n_past memory rows as its keys (T = P)
 *   and appends nothing. */
typedef enum attn_phase {
    ATTN_PHASE_TOKENS,
    ATTN_PHASE_SEQUENCE,
    ATTN_PHASE_LOAD,
    ATTN_PHASE_MEMORY,
    ATTN_PHASE_COUNT
} attn_phase;

/* Thread ith of nth does its share; calls with the same args and all ith
 * in 0..nth-1 do the whole step, and the result does not depend on nth. */
typedef void (*attn_kernel_fn)(const attn_kernel_args *a, uint32_t ith, uint32_t nth);

/* Weights a table may ask for. QKV is the row-wise concatenation of Q, K
 * and V ([q; k; v], each [out, in]); BQKV likewise for the biases. */
typedef enum attn_weight_id {
    ATTN_W_Q,
    ATTN_W_K,
    ATTN_W_V,
    ATTN_W_O,
    ATTN_B_Q,
    ATTN_B_K,
    ATTN_B_V,
    ATTN_B_O,
    ATTN_W_QKV,
    ATTN_B_QKV,
    ATTN_W_Q_NORM, /* qk_norm weights (f32, as stored) */
    ATTN_W_K_NORM,
    ATTN_W_SINKS, /* [heads] */
    /* multi-head latent attention (attn_config.mla_*) */
    ATTN_W_Q_A,       /* q_a_proj */
    ATTN_W_Q_A_NORM,  /* q_a_layernorm (f32) */
    ATTN_W_Q_B,       /* q_b_proj */
    ATTN_W_KV_A,      /* kv_a_proj_with_mqa */
    ATTN_W_KV_A_NORM, /* kv_a_layernorm (f32) */
    ATTN_W_KV_B,      /* kv_b_proj, f32 (the MLA kernels read it as it is) */
    /* the expressions' weight inputs: ATTN_W_INPUT + i is input i of the
     * config's (attn_inputs, per: weight), f32, stored under its name */
    ATTN_W_INPUT,
    ATTN_WEIGHT_COUNT = ATTN_W_INPUT + ATTN_EXPR_MAX_INPUTS
} attn_weight_id;

typedef enum attn_buf_role {
    ATTN_BUF_INPUT,       /* x [S, d_model] f32 */
    ATTN_BUF_OUTPUT,      /* y [S, d_model] f32 */
    ATTN_BUF_WEIGHT,      /* weight id in `weight`: the projection matrices (W_Q, W_K, W_V,
                             W_O, W_QKV) in the config's dtype, the others f32 */
    ATTN_BUF_CACHE_K,     /* the block pool, kv_dtype: [blocks, kv_groups * head_dim, block_tokens]
                             (in a block, each column's tokens side by side) */
    ATTN_BUF_CACHE_V,     /* the block pool, kv_dtype: [blocks, block_tokens, kv_groups * head_dim]
                             (MLA: the K pool holds each token's latent [c_kv; k_pe],
                             attn_cache_columns; no V pool) */
    ATTN_BUF_SCRATCH,     /* f32, elements = c + s*S + t*T + st*S*T; S of the batch (all
                             its new tokens) or, if per_sequence, of one sequence, whose T
                             then counts keys from the first visible one: T - attn_first_key(P)
                             (attn.h: a window's or a chunk's first key), else P + S */
    ATTN_BUF_MEMORY,      /* cross-attention: the memory [S, memory_dim] f32 (memory phase) */
    ATTN_BUF_PACKED,      /* weights in the kernels' own layout, c elements of 4 bytes, owned
                             by the block; made from weight `weight` by a load-phase step:
                             the i-th load step writes the i-th packed buffer and reads
                             only that weight */
    ATTN_BUF_TOKEN_INPUT, /* a token input of the expressions (input `weight`, attn_inputs):
                             an attn_token_input of the sequence (sequence phase only) */
    ATTN_BUF_SEQ_INPUT,   /* a sequence input (input `weight`): its int32 value */
    ATTN_BUF_CASCADE,     /* f32 scratch of s*S elements over a batch's new tokens: each row's
                             softmax state over a shared prefix (kernel args); `weight`: the
                             most new tokens of a sequence whose own call follows a prefix call;
                             `prefill_min` here: the most new tokens one prefix call takes (0:
                             any). Present only where the kernels take shared-prefix calls;
                             bound only in calls that make them */
    ATTN_BUF_ROLE_COUNT
} attn_buf_role;

/* What an ATTN_BUF_TOKEN_INPUT buffer points at: the values of positions
 * 0..n-1 (0 where none was set); a read at any other index gives 0. */
typedef struct attn_token_input {
    const int32_t *v;
    int64_t n;
} attn_token_input;
_Static_assert(sizeof(attn_token_input) == 16, "kernel ABI");

typedef struct attn_buffer_desc {
    uint32_t role;         /* attn_buf_role */
    uint32_t weight;       /* attn_weight_id, for ATTN_BUF_WEIGHT */
    uint32_t per_sequence; /* scratch used only within one sequence's steps */
    uint32_t load_only;    /* weight read by load-phase steps only: freed after them */
    int64_t c, s, t, st;
    int64_t prefill_min; /* scratch: > 0, used only by a sequence holding no tokens that
                            prefills at least this many: no memory for it in other calls */
} attn_buffer_desc;

typedef struct attn_kernel_step {
    const char *name; /* symbol, attnk_<graph>_<node>_<op> */
    attn_kernel_fn fn;
    uint32_t phase; /* attn_phase */
    uint32_t flags; /* ATTN_STEP_* */
} attn_kernel_step;

/* The step takes prefix calls (ATTN_ARGS_PREFIX); the others do not run in them. */
#define ATTN_STEP_PREFIX (1u << 0)

/* CPU features a table's code may use (attn_kernels.cpu_features), as the
 * compiler found them enabled for its target: attn_block_new refuses a
 * table whose features the running CPU lacks (attn_kernels_check says
 * which) instead of letting it die of an illegal instruction. x86-64
 * bits (cpuid, and the OS saving the AVX / AVX-512 registers): */
#define ATTN_CPU_SSE4_1 (1u << 0)
#define ATTN_CPU_SSE4_2 (1u << 1)
#define ATTN_CPU_POPCNT (1u << 2)
#define ATTN_CPU_AVX (1u << 3)
#define ATTN_CPU_AVX2 (1u << 4)
#define ATTN_CPU_FMA (1u << 5)
#define ATTN_CPU_F16C (1u << 6)
#define ATTN_CPU_BMI2 (1u << 7)
#define ATTN_CPU_LZCNT (1u << 8)
#define ATTN_CPU_MOVBE (1u << 9)
#define ATTN_CPU_AVX512F (1u << 10)
#define ATTN_CPU_AVX512BW (1u << 11)
#define ATTN_CPU_AVX512DQ (1u << 12)
#define ATTN_CPU_AVX512VL (1u << 13)
#define ATTN_CPU_AVX512BF16 (1u << 14)
#define ATTN_CPU_AVX512FP16 (1u << 15)
#define ATTN_CPU_AVX512VBMI (1u << 16)
/* AMX tiles (the OS saving their state: XCR0 bits 17-18; the runtime asks
 * Linux for it, arch_prctl ARCH_REQ_XCOMP_PERM, before running them) */
#define ATTN_CPU_AMX_TILE (1u << 17)
#define ATTN_CPU_AMX_BF16 (1u << 18)
/* int8 dot products (vpdpbusd) on zmm, and their VEX form on ymm */
#define ATTN_CPU_AVX512VNNI (1u << 19)
#define ATTN_CPU_AVXVNNI (1u << 20)
/* AArch64 bits (hwcaps): */
#define ATTN_CPU_ARM_FP16 (1u << 24) /* half-precision arithmetic, scalar and vector */
#define ATTN_CPU_ARM_BF16 (1u << 25)
#define ATTN_CPU_ARM_I8MM (1u << 26) /* int8 matrix multiplies: usdot (activations q8_0) */

typedef struct attn_kernels {
    uint32_t abi_version; /* ATTN_KERNELS_ABI */
    uint32_t n_buffers;
    uint32_t n_steps;
    uint32_t cpu_features; /* ATTN_CPU_* bits the code needs */
    attn_config config;
    const attn_buffer_desc *buffers; /* n_buffers; index = args.buf index */
    const attn_kernel_step *steps;   /* n_steps, run in order */
} attn_kernels;

/* An emitted object lays the table out as {4 x u32, config bytes, ptr, ptr}
 * and each step as {ptr, ptr, u32, u32}: pinned here. */
_Static_assert(offsetof(attn_kernels, config) == 16, "kernel ABI");
_Static_assert(sizeof(attn_config) % 8 == 0, "kernel ABI");
_Static_assert(offsetof(attn_kernels, buffers) == 16 + sizeof(attn_config), "kernel ABI");
_Static_assert(offsetof(attn_kernels, steps) == 24 + sizeof(attn_config), "kernel ABI");
_Static_assert(sizeof(attn_buffer_desc) == 56, "kernel ABI");
_Static_assert(offsetof(attn_kernel_step, phase) == 16 && sizeof(attn_kernel_step) == 24,
               "kernel ABI");

#ifdef __cplusplus
}
#endif
#endif
