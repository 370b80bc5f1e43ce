/* cg_plan.c: where every value lives. x and y are the table's first two
 * buffers, each weight and each cache half gets one, every other computed
 * value a scratch buffer of its own, except views (slice, split_heads,
 * merge_heads), which alias their operand, and row-wise score ops, which
 * work in place on a value nobody else reads. */
#include <string.h>

#include "codegen/cg_build.h"

enum { BUF_X, BUF_Y };

static bool is_sym(ir_dim d, int64_t s, int64_t t) {
    return d.c == 0 && d.s == s && d.t == t && d.st == 0;
}

/* a * b for the products shapes need: const * any, S * T. */
static ir_dim dim_mul(ir_dim a, ir_dim b) {
    if (!a.s && !a.t && !a.st)
        return (ir_dim){a.c * b.c, a.c * b.s, a.c * b.t, a.c * b.st};
    if (!b.s && !b.t && !b.st)
        return dim_mul(b, a);
    ATTNC_ASSERT((is_sym(a, 1, 0) && is_sym(b, 0, 1)) || (is_sym(a, 0, 1) && is_sym(b, 1, 0)));
    return (ir_dim){0, 0, 0, 1};
}

static int add_buffer(cg_plan *p, attn_buf_role role, uint32_t weight, bool per_sequence,
                      ir_dim size) {
    ATTNC_ASSERT(p->n_buffers < ATTN_MAX_BUFFERS);
    p->buffers[p->n_buffers] =
        (attn_buffer_desc){role, weight, per_sequence, 0, size.c, size.s, size.t, size.st, 0};
    return p->n_buffers++;
}

/* A fresh buffer holding n contiguously (ne[0] innermost). */
static cg_view contiguous(cg_plan *p, const ir_node *n, attn_buf_role role, int buf) {
    cg_view v = {.buf = buf, .dt = n->dt, .off = ir_const(0)};
    ir_dim stride = ir_const(1);
    for (int d = 0; d < n->ndim; d++) {
        v.nb[d] = stride;
        stride = dim_mul(stride, n->ne[d]);
    }
    v.batch_rows = n->ndim > 0 && ir_dim_eq(n->ne[n->ndim - 1], ir_sym_s());
    if (buf < 0) {
        v.buf = add_buffer(p, role, 0, !v.batch_rows, stride);
        v.from_first_key = !v.batch_rows;
    }
    return v;
}

cg_target cg_target_for(int lanes, int regs) {
    bool wide = regs >= 32; /* AVX-512 and AArch64: 32 registers; AVX2: 16 */
    return (cg_target){
        .lanes = lanes,
        .regs = regs,
        .machine_lanes = lanes,
        /* flash: rv x bks score sums and dc x rv p.v sums in registers;
         * AVX2 with 3 x 4 of them fills its 16 registers (3 q or p
         * vectors and a broadcast besides) without spilling (test_spills),
         * and its llama3_8b prefill core took 211-217 ms instead of 245
         * with 2 x 4 (x86-64-v3 code on an AVX-512 Xeon) */
        .flash_rv = 3,
        .flash_bks = wide ? 8 : 4,
        /* keys per tile: two score passes. AVX2 code's llama3_8b prefill
         * 1024 core, one thread, medians of 9 in alternating rounds (AMD
         * EPYC Zen 4): 8 keys 108-111 ms, 16 keys 112-119, 4 keys
         * 115-133; a tile's K and V (8 keys: 8 KB f32), its queries and
         * outputs (12 KB each) just fill the 32 KB L1 */
        .flash_bk = wide ? 16 : 8,
        .flash_dc = wide ? 8 : 4,
        /* compute bf16 by vdpbf16ps pairs (AVX512-BF16): each item rounds
         * its K/V tiles into pairs, so items of more rows round each for
         * more of them. llama3_8b prefill 2048 core, compute bf16, 2
         * threads (AMD EPYC Zen 4), alternating, medians: 3 row vectors, 8
         * keys a pass, 8 dims 128.6 ms; 4, 4, 4 117.0; 5, 4, 4 122.7; 6,
         * 4, 4 122.5; 8, 2, 2 132.8. f32 with 4, 4, 4: 198 against 198 */
        .flash_pairs_rv = 4,
        .flash_pairs_bks = 4,
        .flash_pairs_dc = 4,
        /* a prefix call's items in f32 on AVX-512: 4 row vectors with 4 x
         * 4 score and p.v sums, not 3 x 8, so that 32 sequences of a group
         * of 4 (128 rows) are 2 items of a K/V head, not 3 of which one a
         * third empty: llama3_8b, 32 sequences after 4096 shared tokens,
         * decode core 15.3 -> 13.1 ms (f32 cache), 14.3 -> 12.5 (f16), AMD
         * EPYC Zen 4, 2 threads, alternating rounds. Prefill keeps 3 x 8:
         * 4 x 4 was its slower on a Xeon (docs/performance.md) */
        .flash_prefix_rv = wide && lanes == 16 ? 4 : 0,
        .flash_prefix_bks = 4,
        .flash_prefix_dc = 4,
        /* AMX flash items (cg_flash.c): each K/V tile is rounded into
         * pairs once for an item's rows. llama3_8b prefill 2048 core,
         * Xeon with AMX, 16 threads: 3 row tiles 26.6-29.5 ms, 4
         * 23.0-23.5, 6 23.2-24.2; 2 threads: 4 130 ms, 6 152 (one run
         * each), with tiles of 32 keys; with 64, 6 (below). Since the
         * operands' cheaper rounding (cg_dot_words) and score passes of at
         * most 6 row tiles (amx_scores), 2 threads, alternating rounds:
         * 6 63.4 ms, 12 51.0-52.1, 16 46.1, 18 48.7-52.3, 24 49.1 (256
         * rows: 128 KB of stack each for q and the output sums) */
        .flash_amx_rv = 16,
        /* AMX flash: keys per tile. llama3_8b prefill 2048 core, Xeon
         * with AMX, alternating: 16 threads, 4 row tiles, 32 keys 24.8
         * ms, 64 keys 21.3 and 18.3 (6 row tiles 17.3); 2 threads 112 ->
         * 106-107. Then 6 row tiles against 4 (64 keys): 16 threads 16.6
         * and 16.0 ms against 19.7 and 18.6; 2 threads 111 and 106 against
         * 111 and 87 (noisy) */
        .flash_amx_bk = 64,
        /* split decode: half the registers hold p.v sums, the rest its
         * V vectors and broadcasts */
        .split_pv_regs = regs / 2,
        /* split decode: a row block's score partials (rows x chains;
         * q8_0 K: of a block of 32 d's); K, q's broadcasts (and q8_0's
         * totals and d) besides: AVX2 with 16 of them spilled a third of
         * them in every trip (test_spills) */
        .split_accs = wide ? 16 : 8,
        /* split decode: machine vectors in a tile of keys. AVX2's 16
         * keys: a q[d] broadcast for two K vectors, the tile's softmax
         * for twice the FMAs; llama3_8b decode @4096 core, one thread,
         * medians of 15 (x86-64-v3 code, AMD EPYC Zen 4), 8 keys -> 16:
         * f16 cache 1.01-1.04 -> 0.94-0.99 ms, f32 2.20-2.35 ->
         * 1.81-1.94, bf16 1.09-1.11 -> 0.99-1.03, q8_0 1.25-1.28 ->
         * 1.12-1.14. AVX-512 keeps 16: 32 keys are not whole tiles of
         * the default cache blocks (16 tokens), gathered: f16 0.80 -> 3.15 */
        .split_vecs = wide ? 1 : 2,
        /* only AVX-512 (16 lanes) folds a broadcast load into an FMA;
         * AVX2 and NEON load it into a register first, which is better
         * loaded once and used for every vector it multiplies */
        .fma_bcast = lanes >= 16,
        /* GEMM: mr rows x 2 vectors of sums, two panel vectors and a
         * broadcast */
        .gemm_mr = (regs - 4) / 2,
        /* GEMM blocks: an x block of mc = tiles x mr rows by kc k steps
         * (copied once, kept in L2) against each panel's kc x nr slice,
         * read from memory once per row block and from L2 by its other
         * tiles. llama3_8b prefill 2048, whole block, f32, medians of 5
         * alternating (AMD EPYC Zen 4, 2 threads): AVX2 code (6 x 16
         * tiles) kc 1024 x 4 tiles 1068-1157 ms (median 1133), kc 512 x
         * 8 tiles 1063-1090 (1076), 768 x 6 1063-1107, 384 x 12
         * 1103-1125, 256 x 16 1202; AVX-512 code (14 x 32 tiles) kc 1024
         * x 4 985-989, 512 x 8 1018-1025, 256 x 16 1081-1086. The small
         * tile takes twice the rows per trip of the weights from memory */
        .gemm_kc = wide ? 1024 : 512,
        .gemm_mc_tiles = wide ? 4 : 8,
        /* the last row block takes up to this many tiles more, so that a
         * batch of 64 rows is one block (AVX-512: 56 + 14; AVX2: 48 + 18)
         * and every panel streams from memory once for it (cg_emit_linear
         * has the measurements) */
        .gemm_rest_tiles = wide ? 1 : 3,
        /* k steps a trip: the AVX2 micro-kernel's trip was 20 vector
         * instructions and 4 of loop counting. llama3_8b prefill 512,
         * whole block, one thread, medians of 5 in alternating rounds
         * (AMD EPYC Zen 4): AVX2 code 531, 545, 548 ms with 1 step a trip,
         * 519, 536, 510 with 4; AVX-512 code 438, 433, 475 against 439,
         * 433, 436 (its trip of 16 keeps 1) */
        .gemm_ku = wide ? 1 : 4,
        /* AMX GEMM: x blocks of 512 KB of bf16 pairs on the stack, the
         * whole k where it is at most 4096 (then 64 rows at k 4096, 128
         * at 2048, at most 256). A k block's sums went through y, which
         * every further block read back from beyond L2 (a third of the
         * GEMM's time with blocks of 1024 k). llama3_8b prefill 2048
         * block, compute bf16, Xeon with AMX, 2 threads, mc x kc: 256 x
         * 1024 199-209 ms, 64 x 4096 179-194, 128 x 2048 187-191.
         * Earlier, before the software-pipelined loop and the thread
         * grid, on the lent 16-core Xeon, 16 threads: 64 x 2048 78 ms,
         * 128 x 2048 78, 512 x 512 79, 256 x 1024 72 */
        .gemm_amx_mc = 256,
        .gemm_amx_kc = 4096,
        .gemm_amx_x_bytes = 512 << 10,
        /* GEMV rows (2 sums each, 2 panel vectors, a broadcast): AVX2's
         * 7 rows spill 2 of their sums and still beat the GEMM (llama3_8b
         * block, 7 tokens: 6.9 against 10.8 ms), its 8 do not (12.2
         * against 10.5 ms; x86-64-v3 code on an AVX-512 Xeon) */
        .gemv_rows = wide ? 8 : 7,
        /* the FMA probe: enough independent chains to cover the latency */
        .probe_accs = regs - 8 > 4 ? regs - 8 : 4,
    };
}

/* Node n's view (a buffer of its own, or a view of its operand's), the
 * buffers it adds (weights, packed panels, the cache, split partials) and
 * whether it is emitted as a kernel. */
static void plan_node(cg_plan *p, const ir_graph *g, const cg_target *tg, ir_node *n,
                      int *weight_buf, int *cache_buf, const ir_node *to_y) {
    cg_view *v = &p->view[n->id];
    const cg_view *a = n->nargs ? &p->view[n->args[0]->id] : NULL;
    switch (n->op) {
    case IR_OP_INPUT: *v = contiguous(p, n, ATTN_BUF_INPUT, BUF_X); break;
    case IR_OP_MEMORY:
        *v = contiguous(
            p, n, ATTN_BUF_MEMORY,
            add_buffer(p, ATTN_BUF_MEMORY, 0, false, (ir_dim){0, ir_cfg_memory_dim(g), 0, 0}));
        break;
    case IR_OP_WEIGHT:
        if (weight_buf[n->weight] < 0) {
            int64_t numel = n->ne[0].c * (n->ndim == 2 ? n->ne[1].c : 1);
            weight_buf[n->weight] =
                add_buffer(p, ATTN_BUF_WEIGHT, (uint32_t)n->weight, false, ir_const(numel));
        }
        *v = contiguous(p, n, ATTN_BUF_WEIGHT, weight_buf[n->weight]);
        break;
    case IR_OP_LINEAR: {
        /* the matrix is read once, at load, into the GEMM's panels */
        cg_gemm gm = cg_gemm_shape(n, tg, g);
        p->buffers[p->view[n->args[1]->id].buf].load_only = 1;
        p->packed[n->id] = add_buffer(p, ATTN_BUF_PACKED, (uint32_t)n->args[1]->weight, false,
                                      ir_const(cg_gemm_packed_words(&gm)));
        *v = contiguous(p, n, ATTN_BUF_SCRATCH, n == to_y ? BUF_Y : -1);
        p->emit[n->id] = true;
        break;
    }
    case IR_OP_ROPE_TABLE:
        *v = contiguous(p, n, ATTN_BUF_SCRATCH, -1);
        p->emit[n->id] = true;
        break;
    case IR_OP_SLICE:
        *v = *a;
        v->off.c += n->offset * a->nb[0].c;
        break;
    case IR_OP_SPLIT_HEADS:
        *v = *a;
        v->nb[0] = a->nb[0];
        v->nb[1] = dim_mul(ir_const(ir_cfg_head_dim(g)), a->nb[0]);
        v->nb[2] = a->nb[1];
        break;
    case IR_OP_MERGE_HEADS:
        /* heads must lie back to back: [hd, H] contiguous */
        ATTNC_ASSERT(ir_dim_eq(a->nb[0], ir_const(1)) && ir_dim_eq(a->nb[1], n->args[0]->ne[0]));
        *v = *a;
        v->nb[1] = a->nb[2];
        v->nb[2] = ir_const(0);
        break;
    case IR_OP_CACHE_APPEND:
        if (cache_buf[n->cache] < 0)
            cache_buf[n->cache] = add_buffer(p, n->cache ? ATTN_BUF_CACHE_V : ATTN_BUF_CACHE_K, 0,
                                             false, ir_const(0));
        *v = contiguous(p, n, ATTN_BUF_SCRATCH, cache_buf[n->cache]);
        v->paged = true;
        {
            int64_t cs, ts;
            cg_cache_strides(g, n->cache, &cs, &ts);
            v->nb[0] = ir_const(cs);
            v->nb[1] = ir_const(n->ne[0].c * cs);
            v->nb[2] = ir_const(ts);
        }
        p->emit[n->id] = !n->fused; /* else the linear's epilogue stores it */
        break;
    case IR_OP_FLASH:
        if (n->split_tokens) /* per sequence, a fixed size (cg_split.c) */
            p->split[n->id] =
                add_buffer(p, ATTN_BUF_SCRATCH, 0, true, ir_const(cg_split_elements(n, g)));
        *v = contiguous(p, n, ATTN_BUF_SCRATCH, -1);
        p->emit[n->id] = true;
        break;
    case IR_OP_RMS_NORM:
    case IR_OP_MLA_LATENT:
    case IR_OP_MLA_ROPE:
    case IR_OP_MLA_KEYS:
    case IR_OP_MLA_VALUES:
    case IR_OP_MLA_QUERY:
    case IR_OP_MLA_OUTPUT:
    case IR_OP_ROPE:
    case IR_OP_QK_NORM:
    case IR_OP_TEMPERATURE:
    case IR_OP_GQA_EXPAND:
    case IR_OP_QK:
    case IR_OP_PV:
        *v = contiguous(p, n, ATTN_BUF_SCRATCH, -1);
        p->emit[n->id] = true;
        break;
    case IR_OP_SCALE:
    case IR_OP_SOFTCAP:
    case IR_OP_ALIBI:
    case IR_OP_MASK:
    case IR_OP_SCORE_MOD:
    case IR_OP_MASK_MOD:
    case IR_OP_SOFTMAX:
        if (n->args[0]->n_uses == 1 && p->buffers[a->buf].role == ATTN_BUF_SCRATCH)
            *v = *a; /* in place */
        else
            *v = contiguous(p, n, ATTN_BUF_SCRATCH, -1);
        p->emit[n->id] = true;
        break;
    case IR_OP_BY_PREFILL:
        *v = contiguous(p, n, ATTN_BUF_SCRATCH, -1);
        p->emit[n->id] = true;
        break;
    case IR_OP_OUTPUT:
        *v = contiguous(p, n, ATTN_BUF_OUTPUT, BUF_Y);
        p->emit[n->id] = a->buf != BUF_Y; /* a copy, unless already stored there */
        break;
    case IR_OP_COUNT: break;
    }
}

/* A buffer for each input the expressions read (every one declared: the
 * config check refuses the others): a token input's view or a sequence
 * input's value (bound per sequence), a weight input's tensor. */
static void plan_inputs(cg_plan *p, const ir_graph *g) {
    attn_inputs in;
    for (int i = 0; i < ATTN_EXPR_MAX_INPUTS; i++)
        p->input_buf[i] = -1;
    if (attn_inputs_parse(g->cfg.inputs, &in, NULL) != ATTN_OK) /* checked: it parses */
        return;
    for (int i = 0; i < in.n; i++) {
        attn_input_per per = in.in[i].per;
        p->input_buf[i] =
            per == ATTN_INPUT_WEIGHT
                ? add_buffer(
                      p, ATTN_BUF_WEIGHT, ATTN_W_INPUT + (uint32_t)i, false,
                      ir_const(in.in[i].dims[0] * (in.in[i].rank > 1 ? in.in[i].dims[1] : 1)))
                : add_buffer(p, per == ATTN_INPUT_TOKEN ? ATTN_BUF_TOKEN_INPUT : ATTN_BUF_SEQ_INPUT,
                             (uint32_t)i, false, ir_const(0));
    }
}

/* Shared-prefix calls (attn_kernels.h) where the sequence phase is one
 * flash node that takes them (cg_split_cascades) and nothing else: its
 * prefix calls then run every step that reads the cache. */
static void plan_cascade(cg_plan *p, const ir_graph *g) {
    const ir_node *f = NULL;
    int n_seq = 0;
    p->cascade = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->dead || !p->emit[n->id] || p->phase[n->id] != ATTN_PHASE_SEQUENCE)
            continue;
        n_seq++;
        f = cg_split_cascades(n, g) ? n : f;
    }
    if (!f || n_seq != 1)
        return;
    /* [token][head][m, l, o]; weight: the most tokens of a sequence joining
     * a prefix call (its own call's split path) */
    p->cascade = add_buffer(p, ATTN_BUF_CASCADE, (uint32_t)f->split_tokens, false,
                            (ir_dim){0, ir_cfg_heads(g) * (f->ne[0].c + 2), 0, 0});
    /* one prefix call for every run of sequences (their tokens past
     * split_tokens on the flash path, tiles of keys widened once for all
     * its rows), not runs of split_tokens on the split path: 32 sequences
     * after 4096 shared tokens, llama3_8b, decode core, AMD EPYC Zen 4, 2
     * threads, alternating rounds, medians: compute bf16, f16 cache 9.8
     * against 15.3 ms; f32 with AVX-512's prefix items of 64 rows
     * (cg_target_for): f32 cache 15.8 -> 12.0 ms, f16 14.1 -> 12.5, q8_0
     * 14.8 -> 13.6; AVX2 code (f32 cache) 21.8 -> 19.4 */
    p->buffers[p->cascade].prefill_min = 0;
}

attnc_status cg_plan_build(ir_graph *g, const cg_target *tg, cg_plan *p) {
    memset(p, 0, sizeof *p);
    p->view = arena_alloc(&g->ctx->arena, (size_t)(g->next_id + 1) * sizeof *p->view);
    p->packed = arena_alloc(&g->ctx->arena, (size_t)(g->next_id + 1) * sizeof *p->packed);
    p->split = arena_alloc(&g->ctx->arena, (size_t)(g->next_id + 1) * sizeof *p->split);
    p->emit = arena_alloc(&g->ctx->arena, (size_t)(g->next_id + 1) * sizeof *p->emit);
    p->phase = arena_alloc(&g->ctx->arena, (size_t)(g->next_id + 1) * sizeof *p->phase);
    if (!p->view || !p->emit || !p->phase || !p->packed || !p->split) {
        diag_error(g->ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory planning buffers");
        return ATTNC_E_NOMEM;
    }
    int weight_buf[ATTN_WEIGHT_COUNT], cache_buf[2] = {-1, -1};
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++)
        weight_buf[i] = -1;
    add_buffer(p, ATTN_BUF_INPUT, 0, false, (ir_dim){0, ir_cfg_d_model(g), 0, 0});
    add_buffer(p, ATTN_BUF_OUTPUT, 0, false, (ir_dim){0, ir_cfg_d_model(g), 0, 0});
    plan_inputs(p, g);
    /* the node whose value the output takes, to be stored in y directly */
    const ir_node *to_y = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == IR_OP_OUTPUT &&
            g->nodes[i]->args[0]->n_uses == 1 && g->nodes[i]->args[0]->op == IR_OP_LINEAR)
            to_y = g->nodes[i]->args[0];

    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *n = g->nodes[i];
        if (n->dead)
            continue;
        /* attention proper runs per sequence; everything else over the batch */
        bool per_seq = n->op == IR_OP_GQA_EXPAND || n->op == IR_OP_QK || n->op == IR_OP_PV ||
                       n->op == IR_OP_MLA_KEYS || n->op == IR_OP_MLA_VALUES ||
                       n->op == IR_OP_FLASH || (ir_op_flags(n->op) & IR_INPLACE);
        /* and what runs only in some calls of a sequence (its gate), or
         * chooses by them */
        per_seq |= n->op == IR_OP_BY_PREFILL || n->gate != 0;
        int fresh = p->n_buffers;
        /* cross-attention: what is computed from the memory runs in the
         * memory phase (once per sequence), up to its cache stores */
        bool from_memory = n->op == IR_OP_MEMORY;
        for (int j = 0; j < n->nargs; j++)
            from_memory |= p->phase[n->args[j]->id] == ATTN_PHASE_MEMORY;
        p->phase[n->id] = per_seq       ? ATTN_PHASE_SEQUENCE
                          : from_memory ? ATTN_PHASE_MEMORY
                                        : ATTN_PHASE_TOKENS;
        plan_node(p, g, tg, n, weight_buf, cache_buf, to_y);
        /* what only prefills of `gate` tokens use needs no memory in other calls */
        for (int b = fresh; n->gate > 0 && b < p->n_buffers; b++)
            if (p->buffers[b].role == ATTN_BUF_SCRATCH)
                p->buffers[b].prefill_min = n->gate;
    }
    plan_cascade(p, g);
    return ATTNC_OK;
}
