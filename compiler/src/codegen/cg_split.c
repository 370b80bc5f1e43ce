/* cg_split.c: the decode path of a flash node with split_kv (decode_split
 * pass): calls with at most split_tokens new tokens per sequence.
 *
 * The keys any row sees, [jbeg, jend), are cut into at most SPLIT_CHUNKS
 * chunks of whole tiles of the vector width, their sizes within one tile
 * of each other (one chunk per SPLIT_MIN_KEYS keys, rounded up): the cut
 * depends on the key count only. A work item is
 * one chunk, with all query rows (new tokens x heads); each thread takes
 * a run of consecutive chunks. Keys come in tiles of one vector width
 * (the kernel's vectors: split_widen machine vectors), starting at
 * multiples of it; within a tile, K/V head by K/V head, K and
 * V are read straight from the cache and converted in registers, for
 * blocks of up to SPLIT_ROWS query rows of the head's group at once. The
 * cache keeps each K column's tokens side by side (attn_kernels.h), so
 * the tile's keys of one dimension d are one vector: the scores of the
 * block's rows are sum_d q[d] k[d][keys], a broadcast q element times
 * that vector, lane j key j's score (a gather where a block does not
 * hold whole tiles). Then an online softmax per row (against a
 * reference m that moves only when a score passes it) and p.v for the
 * block's rows (each V vector converted once). While a tile computes,
 * the next tile's K and V are prefetched into L2 between the loads: each
 * K/V head its own K (where blocks hold whole tiles) and a share of the V
 * rows in memory order. The chunk's result per row is its reference m
 * (at least its max), sum l and unnormalized output o, stored to the
 * node's split buffer.
 *
 * The merge kernel (a step of its own, after all items) combines each
 * row's chunks in chunk order: out = sum_c e^(m_c - M) o_c / sum_c
 * e^(m_c - M) l_c, M the largest m_c. Nothing depends on the thread
 * count. For calls with more new tokens the flash kernel runs its own
 * path and the merge kernel returns at once. */
#include <math.h>
#include <string.h>

#include "codegen/cg_build.h"

enum {
    SPLIT_CHUNKS = IR_SPLIT_CHUNKS,
    SPLIT_MIN_KEYS = 64,
    SPLIT_MIN_KEYS_FLASH = 512,               /* chunks of the flash kernel's items (design.md) */
    SPLIT_ROWS = 4,                           /* query rows of a K/V head computed together */
    SPLIT_CHAINS = 16,                        /* score sums in flight: rows x chains per row */
    SPLIT_SLACK = 8,                          /* softmax reference: a tile's max + this */
    SPLIT_MAX_VECTORS = ATTN_MAX_HEAD_DIM / 4 /* vectors of head_dim, 4 lanes at least */
};

typedef struct split {
    const ir_node *n, *q, *k, *v;
    int64_t hd, hdp, nv, group, hk, rows_max; /* padded head_dim, its vectors; rows_max =
                                                 heads x split_tokens */
    int lanes, rb, pv_part;                   /* rows per block; head_dim vectors per p.v pass */
    attn_dtype kdt, vdt;
    int64_t kd; /* elements from k[d] to k[d + 1] of a key */
    bool kvec;  /* a tile's keys of one d are one vector in memory */
    int buf;    /* the partial results: [chunk][row][2 + hd], row = token x heads + head */
    /* score_mod: its row parts (cg_expr_row_parts) per row, [n_pre][rows_max] f32 */
    LLVMValueRef pre;
    int n_pre, pre_node[4];
    /* compute bf16 where the CPU has vdpbf16ps (16 lanes): q.k over pairs
     * of d's (kpairs; q as pairs, qp [rows_max][hdp / 2] i32) and p.v
     * over pairs of keys (vpairs; p as pairs, pp [SPLIT_ROWS][lanes / 2]) */
    bool kpairs, vpairs;
    LLVMValueRef qp, pp;
    /* activations q8_0 over a q8_0 cache: q's blocks kept apart (qint:
     * the staged q holds each block's integer q, qd [rows_max][hd / 32]
     * its d); kdot: q.k by vpdpbusd (VNNI, where blocks hold whole
     * tiles), q also as bytes in words qw [rows_max][hd / 4] and
     * qc [rows_max][hd / 32] (cg_q8_row) */
    bool qint, kdot;
    LLVMValueRef qd, qw, qc;
} split;

int64_t cg_split_elements(const ir_node *n, const ir_graph *g) {
    return SPLIT_CHUNKS * ir_cfg_heads(g) * n->split_tokens * (n->ne[0].c + 2);
}

bool cg_split_by_flash(const ir_graph *g) {
    return ir_cfg_mla(g);
}

bool cg_split_cascades(const ir_node *n, const ir_graph *g) {
    return n->op == IR_OP_FLASH && n->dt == ATTN_DTYPE_F32 && n->split_tokens > 0 &&
           !cg_split_by_flash(g) && ir_cfg_memory_dim(g) == 0 && !n->alibi && !n->score_mod &&
           !n->mask_mod && ir_cfg_sliding_window(g) <= 0 && ir_cfg_chunk(g) <= 0;
}

/* Machine vectors in one of the split kernel's vectors: the target's
 * split_vecs where cache blocks hold whole tiles of them (a tile's keys
 * of one d then stay one load), else 1. */
static int split_widen(const cg *c) {
    int w = c->target.split_vecs;
    return w > 1 && ir_cfg_kv_block_tokens(c->g) % (c->target.lanes * w) == 0 ? w : 1;
}

/* Keys per tile of the partials: the split kernel's vector width, or
 * the flash kernel's key tile where it computes them. */
static int64_t tile_keys(cg *c) {
    return cg_split_by_flash(c->g) ? c->target.flash_bk : c->target.lanes * split_widen(c);
}

/* What the partials' buffer and the merge need: the output's rows and
 * their head_dim (MLA's absorbed form: the latent), the buffer. */
static split split_base(cg *c, const ir_node *n) {
    split s = {.n = n, .q = n->args[0], .k = n->args[1], .v = n->args[2]};
    s.lanes = c->target.lanes;
    s.hd = n->ne[0].c;
    s.nv = (s.hd + s.lanes - 1) / s.lanes;
    s.hdp = s.nv * s.lanes;
    s.rows_max = ir_cfg_heads(c->g) * n->split_tokens;
    s.buf = c->plan->split[n->id];
    return s;
}

static split split_of(cg *c, const ir_node *n) {
    split s = split_base(c, n);
    ATTNC_ASSERT(s.hd == ir_cfg_head_dim(c->g));
    s.hk = s.k->ne[1].c;
    s.group = ir_cfg_heads(c->g) / s.hk;
    s.kdt = c->plan->view[s.k->id].dt;
    s.vdt = c->plan->view[s.v->id].dt;
    s.rb = s.group < SPLIT_ROWS ? (int)s.group : SPLIT_ROWS;
    /* p.v keeps rb x pv_part accumulators: half the registers */
    s.pv_part = c->target.split_pv_regs / s.rb;
    s.pv_part = s.pv_part < 1 ? 1 : s.pv_part > s.nv ? (int)s.nv : s.pv_part;
    /* rows of q, v and the output are contiguous over head_dim */
    const ir_node *rows[3] = {s.q, s.v, n};
    for (int i = 0; i < 3; i++)
        ATTNC_ASSERT(ir_dim_eq(c->plan->view[rows[i]->id].nb[0], ir_const(1)));
    const cg_view *kv = &c->plan->view[s.k->id];
    ATTNC_ASSERT(ir_dim_is_const(kv->nb[0], &s.kd));
    /* tiles start at multiples of lanes: whole tiles in each block */
    s.kvec = kv->paged && ir_dim_eq(kv->nb[2], ir_const(1)) &&
             ir_cfg_kv_block_tokens(c->g) % s.lanes == 0;
    /* (q8_0: d * q rounded as an f32 cache's pairs; not where q.k is an
     * integer dot product, qint) */
    bool pairs = cg_bf16_pairs_pay(c) && s.lanes == 16 && s.hd % 2 == 0;
    s.qint = s.kdt == ATTN_DTYPE_Q8_0 && ir_cfg_q8_query(c->g);
    s.kpairs = pairs && !s.qint;
    s.vpairs = pairs;
    s.kdot = s.qint && s.kvec && (c->target.vnni || c->target.usdot);
    return s;
}

/* The bf16 pairs (x[2i], x[2i + 1]) of a vector x of values bf16 holds
 * exactly (rounded already), as i32 (the first of a pair in the low
 * half, as vdpbf16ps reads them). */
static LLVMValueRef pairs_of(cg *c, LLVMValueRef x) {
    int L = c->target.lanes;
    LLVMValueRef bits = LLVMBuildLShr(c->b, LLVMBuildBitCast(c->b, x, c->vi, ""),
                                      cg_splat(c, LLVMConstInt(c->i32, 16, false)), "");
    LLVMValueRef w =
        LLVMBuildTrunc(c->b, bits, LLVMVectorType(LLVMInt16TypeInContext(c->llctx), L), "");
    return LLVMBuildBitCast(c->b, w, LLVMVectorType(c->i32, (unsigned)L / 2), "");
}

/* Stores pairs_of(x) at element `at` of the i32 slot `slot`. */
static void store_pairs(cg *c, LLVMValueRef x, LLVMValueRef slot, LLVMValueRef at) {
    LLVMSetAlignment(LLVMBuildStore(c->b, pairs_of(c, x), cg_gep(c, c->i32, slot, at)), 4);
}

/* Whether the mask_mod may show one of the keys [j0, j0 + tk) to a row
 * of the call (positions P .. P + S - 1). */
static LLVMValueRef keys_may_show(cg *c, const ir_node *n, LLVMValueRef j0, int64_t tk) {
    LLVMValueRef pmax = LLVMBuildSub(c->b, LLVMBuildAdd(c->b, c->P, c->S, ""), cg_i64(c, 1), "");
    return cg_tile_live(c, n, j0, LLVMBuildAdd(c->b, j0, cg_i64(c, tk - 1), ""), c->P, pmax);
}

/* From key j, by step keys (+-tk) a tile at a time while the tile of tk
 * keys from j (step > 0) or before j (step < 0) is hidden from every row
 * of the call by the mask_mod and j has not reached stop: the key reached. */
static LLVMValueRef skip_hidden(cg *c, const ir_node *n, LLVMValueRef j, LLVMValueRef stop,
                                int64_t step) {
    int64_t tk = step > 0 ? step : -step;
    LLVMValueRef slot = cg_slot(c, c->i64, j);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "hidden_test");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "hidden_tile");
    LLVMBasicBlockRef out = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "hidden_done");
    LLVMBuildBr(c->b, head);
    LLVMPositionBuilderAtEnd(c->b, head);
    LLVMValueRef at = LLVMBuildLoad2(c->b, c->i64, slot, "");
    LLVMValueRef live =
        keys_may_show(c, n, step > 0 ? at : LLVMBuildSub(c->b, at, cg_i64(c, tk), ""), tk);
    LLVMValueRef more = LLVMBuildICmp(c->b, step > 0 ? LLVMIntSLT : LLVMIntSGT, at, stop, "");
    LLVMBuildCondBr(c->b, LLVMBuildAnd(c->b, more, LLVMBuildNot(c->b, live, ""), ""), body, out);
    LLVMPositionBuilderAtEnd(c->b, body);
    LLVMBuildStore(c->b, LLVMBuildAdd(c->b, at, cg_i64(c, step), ""), slot);
    LLVMBuildBr(c->b, head);
    LLVMPositionBuilderAtEnd(c->b, out);
    return at;
}

/* Whether the mask_mod may show a key of tile t (of tk keys from jbeg)
 * to a row of the call. */
static LLVMValueRef tile_may_show(cg *c, const ir_node *n, LLVMValueRef jbeg, LLVMValueRef t,
                                  int64_t tk) {
    return keys_may_show(
        c, n, LLVMBuildAdd(c->b, jbeg, LLVMBuildMul(c->b, t, cg_i64(c, tk), ""), ""), tk);
}

/* With a mask_mod: the chunks cut so that each holds as many of the
 * tiles the mask may show as the others, give or take one (StreamingLLM's
 * sinks and window: the window's tiles shared out, not the range between),
 * and no more chunks than such tiles. Two passes over the tiles. */
static void cut_shown(cg *c, const ir_node *n, cg_chunks *k, int64_t tk) {
    LLVMValueRef count = cg_slot(c, c->i64, cg_i64(c, 0));
    cg_loop l1 = cg_for(c, cg_i64(c, 0), k->nt, "count_shown");
    LLVMBuildStore(
        c->b,
        LLVMBuildAdd(c->b, LLVMBuildLoad2(c->b, c->i64, count, ""),
                     LLVMBuildZExt(c->b, tile_may_show(c, n, k->jbeg, l1.i, tk), c->i64, ""), ""),
        count);
    cg_for_end(c, &l1);
    LLVMValueRef shown = LLVMBuildLoad2(c->b, c->i64, count, "shown");
    k->nc = cg_intrinsic(c, "llvm.smax", c->i64, cg_i64(c, 1),
                         cg_intrinsic(c, "llvm.smin", c->i64, k->nc, shown));
    k->bnd = cg_slot(c, LLVMArrayType2(c->i64, SPLIT_CHUNKS + 1), NULL);
    LLVMBuildStore(c->b, k->jbeg, k->bnd);
    cg_loop lb = cg_for(c, cg_i64(c, 1), LLVMBuildAdd(c->b, k->nc, cg_i64(c, 1), ""), "bnd");
    LLVMBuildStore(c->b, k->jend, cg_gep(c, c->i64, k->bnd, lb.i));
    cg_for_end(c, &lb);
    /* chunk `next` starts at the tile before which shown * next / nc
     * shown tiles lie (nc <= shown: one chunk start a tile at most) */
    LLVMValueRef next = cg_slot(c, c->i64, cg_i64(c, 1));
    LLVMBuildStore(c->b, cg_i64(c, 0), count);
    cg_loop l2 = cg_for(c, cg_i64(c, 0), k->nt, "cut_shown");
    LLVMBasicBlockRef done = cg_live_begin(c, tile_may_show(c, n, k->jbeg, l2.i, tk));
    LLVMValueRef nx = LLVMBuildLoad2(c->b, c->i64, next, ""),
                 cnt = LLVMBuildLoad2(c->b, c->i64, count, "");
    LLVMValueRef due = LLVMBuildSDiv(c->b, LLVMBuildMul(c->b, shown, nx, ""), k->nc, "");
    LLVMValueRef cut = LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, nx, k->nc, ""),
                                    LLVMBuildICmp(c->b, LLVMIntEQ, cnt, due, ""), "");
    LLVMBasicBlockRef cut_done = cg_live_begin(c, cut);
    LLVMBuildStore(c->b,
                   LLVMBuildAdd(c->b, k->jbeg, LLVMBuildMul(c->b, l2.i, cg_i64(c, tk), ""), ""),
                   cg_gep(c, c->i64, k->bnd, nx));
    LLVMBuildStore(c->b, LLVMBuildAdd(c->b, nx, cg_i64(c, 1), ""), next);
    cg_live_end(c, cut_done);
    LLVMBuildStore(c->b, LLVMBuildAdd(c->b, cnt, cg_i64(c, 1), ""), count);
    cg_live_end(c, done);
    cg_for_end(c, &l2);
}

/* The keys the call's rows see, [*jfirst, *jend), and their chunks: *nt
 * tiles (tile_keys each) from *jbeg (jfirst rounded down to a multiple
 * of the tile), cut into *nc chunks of whole tiles whose sizes differ by
 * one tile at most (one chunk per SPLIT_MIN_KEYS keys, rounded up, at
 * most SPLIT_CHUNKS); with a mask_mod, the keys narrowed to the tiles it
 * may show and the chunks cut by a count of those (skip_hidden,
 * cut_shown). Shared by the partials and the merge, so they agree. */
void cg_split_chunks(cg *c, const ir_node *n, cg_chunks *k) {
    int64_t tk = tile_keys(c);
    k->bnd = NULL;
    k->jfirst = c->jlo;
    k->jend = c->T;
    LLVMValueRef first = n->causal ? cg_first_key_at(c, c->P) : NULL; /* the first row's */
    if (first)
        k->jfirst = cg_intrinsic(c, "llvm.smax", c->i64, k->jfirst, first);
    if (c->n_shared) /* an own call after a prefix call: the keys past the prefix */
        k->jfirst = cg_intrinsic(c, "llvm.smax", c->i64, k->jfirst, c->n_shared);
    if (n->mask_mod) {
        /* tiles the mask_mod hides from every row, at either end, are not
         * shared out (a window written as an expression splits its keys
         * among the threads as the built-in window does); the partials
         * and the merge see the same chunks */
        k->jfirst = cg_intrinsic(c, "llvm.smin", c->i64, skip_hidden(c, n, k->jfirst, k->jend, tk),
                                 k->jend);
        k->jend = cg_intrinsic(c, "llvm.smax", c->i64, skip_hidden(c, n, k->jend, k->jfirst, -tk),
                               k->jfirst);
    }
    /* a mask_mod that hides every key leaves jfirst == jend: no tiles
     * (rounded down, a tile from jbeg would clamp its keys to jfirst,
     * a key no block holds) */
    k->jbeg =
        LLVMBuildSub(c->b, k->jfirst, LLVMBuildSRem(c->b, k->jfirst, cg_i64(c, tk), ""), "jbeg");
    if (n->mask_mod)
        k->jbeg = LLVMBuildSelect(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, k->jfirst, k->jend, ""),
                                  k->jbeg, k->jend, "jbeg");
    LLVMValueRef nk = LLVMBuildSub(c->b, k->jend, k->jbeg, "");
    k->nt = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, nk, cg_i64(c, tk - 1), ""), cg_i64(c, tk), "nt");
    int64_t min_keys = cg_split_by_flash(c->g) ? SPLIT_MIN_KEYS_FLASH : SPLIT_MIN_KEYS;
    int64_t min_tiles = min_keys / tk > 1 ? min_keys / tk : 1;
    LLVMValueRef want = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, k->nt, cg_i64(c, min_tiles - 1), ""),
                                      cg_i64(c, min_tiles), "");
    k->nc = cg_intrinsic(c, "llvm.smin", c->i64, want, cg_i64(c, SPLIT_CHUNKS));
    if (n->mask_mod)
        cut_shown(c, n, k, tk);
}

/* The first key of chunk ch: tile nt * ch / nc, so the chunks' sizes
 * differ by one tile at most (a cut of whole chunks of the rounded-up
 * size left the last one short: with two threads one took up to an
 * eighth more keys than the other); past the last, jend. */
LLVMValueRef cg_split_chunk_key(cg *c, const cg_chunks *k, LLVMValueRef ch) {
    if (k->bnd)
        return LLVMBuildLoad2(c->b, c->i64, cg_gep(c, c->i64, k->bnd, ch), "");
    LLVMValueRef tile = LLVMBuildSDiv(c->b, LLVMBuildMul(c->b, k->nt, ch, ""), k->nc, "");
    LLVMValueRef j =
        LLVMBuildAdd(c->b, k->jbeg, LLVMBuildMul(c->b, tile, cg_i64(c, tile_keys(c)), ""), "");
    return cg_intrinsic(c, "llvm.smin", c->i64, j, k->jend);
}

/* Element e of row r of chunk in the split buffer. */
static LLVMValueRef part_at(cg *c, const split *s, LLVMValueRef chunk, LLVMValueRef r,
                            LLVMValueRef e) {
    LLVMValueRef row =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, chunk, cg_i64(c, s->rows_max), ""), r, "");
    LLVMValueRef off = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, row, cg_i64(c, s->hd + 2), ""), e, "");
    return cg_buf_elem(c, s->buf, ATTN_DTYPE_F32, off);
}

LLVMValueRef cg_split_part(cg *c, const ir_node *n, LLVMValueRef chunk, LLVMValueRef row,
                           LLVMValueRef e) {
    split s = split_base(c, n);
    return part_at(c, &s, chunk, row, e);
}

LLVMValueRef cg_split_cascade_row(cg *c, const ir_node *n, LLVMValueRef row) {
    LLVMValueRef brow =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, c->tok0, cg_i64(c, ir_cfg_heads(c->g)), ""), row, "");
    return cg_buf_elem(c, c->plan->cascade, ATTN_DTYPE_F32,
                       LLVMBuildMul(c->b, brow, cg_i64(c, n->ne[0].c + 2), ""));
}

/* The largest lane of v (maxnum: NaN lanes are passed over, as the
 * flash kernel's running max does), by halving. */
static LLVMValueRef max_across(cg *c, LLVMValueRef v) {
    for (int w = c->target.lanes / 2; w >= 1; w /= 2) {
        int idx[64];
        for (int l = 0; l < c->target.lanes; l++)
            idx[l] = (l + w) % c->target.lanes;
        v = cg_intrinsic(c, "llvm.maxnum", c->vf, v, cg_shuffle(c, v, idx, c->target.lanes));
    }
    return LLVMBuildExtractElement(c->b, v, LLVMConstInt(c->i32, 0, false), "");
}

/* The lanes of vector v of head_dim inside it; NULL if all are. */
static LLVMValueRef inside_hd(cg *c, const split *s, int64_t v) {
    if ((v + 1) * s->lanes <= s->hd)
        return NULL;
    return LLVMBuildICmp(c->b, LLVMIntSLT, cg_lane_ids(c),
                         cg_splat(c, LLVMConstInt(c->i32, (unsigned)(s->hd - v * s->lanes), false)),
                         "");
}

/* Vector v of the head_dim elements at p (dtype dt) as f32; lanes past
 * head_dim read as 0. */
static LLVMValueRef row_vec(cg *c, const split *s, attn_dtype dt, LLVMValueRef p, int64_t v) {
    LLVMValueRef at = cg_gep(c, cg_elem_type(c, dt), p, cg_i64(c, v * s->lanes));
    LLVMValueRef inside = inside_hd(c, s, v);
    return inside ? cg_vload_masked(c, dt, at, inside) : cg_vload(c, dt, at);
}

/* The next tile's V token rows (all heads, each one run of memory),
 * handed out to the K/V heads of this tile: head h asks for the lines of
 * rows [h * per_rows, (h + 1) * per_rows) (the last row again past the
 * tile's), spread over its p.v loads, so the rows arrive while this tile
 * computes and memory is read front to back. (Each head asks for its own
 * K of the next tile during its scores.) */
typedef struct ahead {
    LLVMValueRef rows; /* [lanes] pointers to the next tile's token rows */
    int64_t row_lines, per_rows;
} ahead;

static ahead ahead_of(cg *c, const split *s, const ir_node *kv, attn_dtype dt) {
    ahead a = {.rows = NULL};
    /* a token's rows of all heads must be one run of memory */
    if (!ir_dim_eq(c->plan->view[kv->id].nb[1], ir_const(s->hd)))
        return a;
    a.rows = cg_slot(c, LLVMArrayType2(c->ptr, (uint64_t)s->lanes), NULL);
    a.row_lines = (s->hk * s->hd * (int64_t)cg_elem_bytes(dt) + 63) / 64;
    a.per_rows = (s->lanes + s->hk - 1) / s->hk;
    return a;
}

/* Prefetches of head kvh for load number it of n: those due by then. */
static void ahead_step(cg *c, const ahead *a, LLVMValueRef kvh, int64_t it, int64_t n) {
    if (!a->rows)
        return;
    int64_t lines = a->per_rows * a->row_lines;
    for (int64_t k = it * lines / n; k < (it + 1) * lines / n; k++) {
        LLVMValueRef ri = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, kvh, cg_i64(c, a->per_rows), ""),
                                       cg_i64(c, k / a->row_lines), "");
        ri = cg_intrinsic(c, "llvm.smin", c->i64, ri, cg_i64(c, c->target.lanes - 1));
        LLVMValueRef row = LLVMBuildLoad2(c->b, c->ptr, cg_gep(c, c->ptr, a->rows, ri), "");
        /* into L2 (prefetcht1). llama3_8b decode @4096 core, f16 cache,
         * one thread, AVX2 / AVX-512 code (AMD EPYC Zen 4): 0.94-0.96 /
         * 0.77-0.78 ms; into L1 1.19-1.20 / 1.18-1.23; non-temporal
         * 1.21-1.28 / 1.16-1.18; every other line 1.38-1.40 /
         * 1.22-1.34; a unit's all at once 1.14-1.22 / 1.04-1.21; over
         * the q.k loop instead 1.01 / 1.22-1.26 (docs/performance.md) */
        cg_prefetch(
            c, cg_gep(c, LLVMInt8TypeInContext(c->llctx), row, cg_i64(c, k % a->row_lines * 64)),
            2);
    }
}

/* One pass of pv_block: head_dim vectors [v0, v0 + nvp) for the
 * block's rows. v0 >= 0: a pass of known vectors, issuing the tile's
 * prefetches due by load *it when av is not NULL; v0 < 0: whole vectors
 * from element off (i64) on, known only when it runs. pd (q8_0): the
 * weights p times each key's d of each block of 32 of head_dim,
 * [block][row][key], which the q of V are multiplied by (ps keeps p for
 * the guard). */
static void pv_pass(cg *c, const split *s, LLVMValueRef const *orow, const LLVMValueRef *vrow,
                    LLVMValueRef pd, LLVMValueRef ps, const ahead *av, LLVMValueRef kvh,
                    bool guarded, int64_t v0, LLVMValueRef off, int64_t nvp, int64_t *it) {
    int L = s->lanes;
    LLVMValueRef acc[SPLIT_ROWS][64], at[64];
    for (int64_t v = 0; v < nvp; v++)
        at[v] = v0 >= 0 ? cg_i64(c, (v0 + v) * L) : LLVMBuildAdd(c->b, off, cg_i64(c, v * L), "");
    for (int i = 0; i < s->rb; i++)
        for (int64_t v = 0; v < nvp; v++)
            acc[i][v] = cg_vload(c, ATTN_DTYPE_F32, cg_gep(c, c->f32, orow[i], at[v]));
    /* compute bf16: each element of V dequantized, then rounded as an
     * operand (pd holds the keys' d alone: scale_weights) */
    bool deq = pd && ir_cfg_bf16(c->g);
    /* each row's p[j] in a register for the pass's vectors, unless the
     * FMA takes it from memory (below) */
    bool hold = (!pd || deq) && (guarded || !c->target.fma_bcast);
    /* keys (j, j + 1) at once by vdpbf16ps: their p as a pair (rounded
     * when formed) times the pair of their v[d]; a guarded pass goes key
     * by key (a weight 0 skips its key) */
    bool pairs = s->vpairs && !guarded;
    LLVMValueRef pp = pairs ? cg_opaque_ptr(c, s->pp) : NULL;
    for (int j = 0; pairs && j < L; j += 2) {
        /* each row's pair of p's broadcast once for the pass's vectors
         * (a broadcast for each product cost a third more instructions) */
        LLVMValueRef pj[SPLIT_ROWS];
        for (int i = 0; i < s->rb; i++)
            pj[i] =
                cg_splat(c, LLVMBuildLoad2(c->b, c->i32,
                                           cg_gep(c, c->i32, pp, cg_i64(c, (i * L + j) / 2)), ""));
        for (int64_t v = 0; v < nvp; v++) {
            ATTNC_ASSERT(v0 >= 0);
            for (int h = 0; av && h < 2; h++)
                ahead_step(c, av, kvh, (*it)++, L * s->nv);
            LLVMValueRef x[2];
            for (int h = 0; h < 2; h++) {
                x[h] = row_vec(c, s, s->vdt, vrow[j + h], v0 + v);
                if (!pd)
                    continue;
                /* q8_0: d * q, key j + h's d of the block alone in pd
                 * (scale_weights) */
                LLVMValueRef dat = cg_i64(c, (v0 + v) * L / 32 * SPLIT_ROWS * L + j + h);
                LLVMValueRef d = LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, pd, dat), "");
                x[h] = LLVMBuildFMul(c->b, x[h], cg_splat(c, d), "");
            }
            LLVMValueRef vp = cg_cache_pair(c, pd ? ATTN_DTYPE_F32 : s->vdt, x[0], x[1]);
            for (int i = 0; i < s->rb; i++)
                acc[i][v] = cg_dot_pairs(c, acc[i][v], pj[i], vp);
        }
    }
    /* guarded: a key of weight 0 for every row (hidden from them all:
     * every other key of a dilated mask's tiles) is skipped, its V
     * unread, where there are registers for it (32: with 16, AVX2's
     * sums spilled around the branches). dilated_window decode @4096
     * core, 2 threads (AMD EPYC Zen 5), f32 cache: 0.65 -> 0.54 ms with
     * the skip; 0.52 -> 0.41 with it and the select below as a
     * merge-masked FMA; f16 0.54 -> 0.31 (docs/performance.md) */
    bool skip = guarded && c->target.regs >= 32;
    for (int j = 0; !pairs && j < L; j++) {
        LLVMValueRef p1[SPLIT_ROWS], pj[SPLIT_ROWS], nonzero[SPLIT_ROWS], some = NULL;
        for (int i = 0; (hold || guarded) && i < s->rb; i++) {
            p1[i] = LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, ps, cg_i64(c, i * L + j)), "");
            if (skip) {
                LLVMValueRef nz = LLVMBuildFCmp(c->b, LLVMRealUNE, p1[i], cg_f32(c, 0), "");
                some = i ? LLVMBuildOr(c->b, some, nz, "") : nz;
            }
        }
        LLVMBasicBlockRef from = NULL, with = NULL, past = NULL;
        LLVMValueRef before[SPLIT_ROWS][64];
        if (skip) {
            from = LLVMGetInsertBlock(c->b);
            with = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_key");
            past = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_key_done");
            for (int i = 0; i < s->rb; i++)
                memcpy(before[i], acc[i], sizeof(LLVMValueRef) * (size_t)nvp);
            LLVMBuildCondBr(c->b, some, with, past);
            LLVMPositionBuilderAtEnd(c->b, with);
        }
        for (int i = 0; (hold || guarded) && i < s->rb; i++) {
            pj[i] = cg_splat(c, p1[i]);
            /* (the weight tested as nonzero: the select below is then a
             * merge-masked FMA on AVX-512, not an FMA and a blend) */
            if (guarded)
                nonzero[i] = LLVMBuildFCmp(c->b, LLVMRealUNE, pj[i], cg_vf32(c, 0), "");
        }
        for (int64_t v = 0; v < nvp; v++) {
            if (av)
                ahead_step(c, av, kvh, (*it)++, L * s->nv);
            LLVMValueRef vv =
                v0 >= 0 ? row_vec(c, s, s->vdt, vrow[j], v0 + v)
                        : cg_vload(c, s->vdt, cg_gep(c, cg_elem_type(c, s->vdt), vrow[j], at[v]));
            /* q8_0: key j's d of the vector's block (lanes divide 32) */
            LLVMValueRef wrow = ps, blk = NULL;
            if (pd)
                blk = cg_gep(c, c->f32, pd,
                             LLVMBuildMul(c->b, LLVMBuildUDiv(c->b, at[v], cg_i64(c, 32), ""),
                                          cg_i64(c, SPLIT_ROWS * L), ""));
            if (deq)
                vv = LLVMBuildFMul(
                    c->b, vv,
                    cg_splat(
                        c, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, blk, cg_i64(c, j)), "")),
                    "");
            vv = cg_operand(c, vv);
            /* q8_0 (f32): the weight of row i is p[i][j] d[j][the block] */
            if (pd && !deq)
                wrow = blk;
            for (int i = 0; i < s->rb; i++) {
                /* else p[j] is loaded for each FMA, volatile so the
                 * loads are not merged: each is the FMA's broadcast
                 * operand (AVX-512: measured 3% faster than one
                 * broadcast register per row and key) */
                LLVMValueRef p = hold ? pj[i] : NULL;
                if (!p) {
                    p = LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, wrow, cg_i64(c, i * L + j)),
                                       "");
                    LLVMSetVolatile(p, 1);
                    p = cg_splat(c, p);
                }
                LLVMValueRef sum = cg_fma(c, p, vv, acc[i][v]);
                acc[i][v] = guarded ? LLVMBuildSelect(c->b, nonzero[i], sum, acc[i][v], "") : sum;
            }
        }
        if (skip) {
            LLVMBasicBlockRef end = LLVMGetInsertBlock(c->b);
            LLVMBuildBr(c->b, past);
            LLVMPositionBuilderAtEnd(c->b, past);
            for (int i = 0; i < s->rb; i++)
                for (int64_t v = 0; v < nvp; v++) {
                    LLVMValueRef in[2] = {before[i][v], acc[i][v]};
                    LLVMBasicBlockRef bb[2] = {from, end};
                    acc[i][v] = LLVMBuildPhi(c->b, c->vf, "");
                    LLVMAddIncoming(acc[i][v], in, bb, 2);
                }
        }
    }
    for (int i = 0; i < s->rb; i++)
        for (int64_t v = 0; v < nvp; v++)
            cg_vstore(c, ATTN_DTYPE_F32, acc[i][v], cg_gep(c, c->f32, orow[i], at[v]));
}

/* The block's rows: o += sum_j p[j] v[j] over one tile, pv_part
 * vectors of head_dim at a time for all rows (each V vector converted
 * once); `guarded`: a key of weight 0 adds nothing even if its v is not
 * finite (as in flash). All loads of a pass come before its stores, so a
 * row twice in the block (the last, repeated) stores the same values.
 * The hot unguarded path is unrolled over all passes, its prefetches
 * spread over its loads; the guarded one (the edge tiles of a chunk)
 * loops over its passes of whole vectors and asks for its prefetches at
 * once: that halves the code of the split path, and its compile time. */
static void pv_block(cg *c, const split *s, LLVMValueRef const *orow, const LLVMValueRef *vrow,
                     LLVMValueRef pd, LLVMValueRef ps, const ahead *av, LLVMValueRef kvh,
                     bool guarded) {
    int L = s->lanes;
    int64_t it = 0, v0 = 0;
    ps = cg_opaque_ptr(c, ps);
    if (pd)
        pd = cg_opaque_ptr(c, pd);
    if (guarded) {
        ahead_step(c, av, kvh, 0, 1);
        av = NULL;
        int64_t passes = s->hd / L / s->pv_part; /* of whole vectors only */
        if (passes > 1) {
            cg_loop lp = cg_for(c, cg_i64(c, 0), cg_i64(c, passes), "pv_pass");
            LLVMValueRef off = LLVMBuildMul(c->b, lp.i, cg_i64(c, (int64_t)s->pv_part * L), "");
            pv_pass(c, s, orow, vrow, pd, ps, NULL, kvh, true, -1, off, s->pv_part, &it);
            cg_for_end(c, &lp);
            v0 = passes * s->pv_part;
        }
    }
    for (; v0 < s->nv; v0 += s->pv_part) {
        int64_t nvp = s->nv - v0 < s->pv_part ? s->nv - v0 : s->pv_part;
        pv_pass(c, s, orow, vrow, pd, ps, av, kvh, guarded, v0, NULL, nvp, &it);
    }
}

/* Row `row` of a per-row f32 slot of `width` floats a row. */
static LLVMValueRef row_at(cg *c, LLVMValueRef slot, LLVMValueRef row, int64_t width) {
    return cg_gep(c, c->f32, slot, LLVMBuildMul(c->b, row, cg_i64(c, width), ""));
}

/* The softmax reference m to subtract: a row that has seen only hidden
 * keys keeps m = -inf, and uses 0 (its p and alpha are then 0, not NaN). */
static LLVMValueRef finite_m(cg *c, LLVMValueRef m) {
    return LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, m, cg_f32(c, -INFINITY), ""),
                           cg_f32(c, 0), m, "");
}

/* Copies head_dim elements of the query row at p (dtype dt), times scale,
 * to f32 at dst, zero-padded to whole vectors, rounded as compute says
 * (scale: cg_query_scale's). */
static void stage_row(cg *c, const split *s, attn_dtype dt, LLVMValueRef p, LLVMValueRef dst,
                      double scale) {
    for (int64_t v = 0; v < s->nv; v++) {
        LLVMValueRef x = cg_qk_operand(c, row_vec(c, s, dt, p, v));
        if (scale != 1.0)
            x = LLVMBuildFMul(c->b, x, cg_vf32(c, scale), "");
        cg_vstore(c, ATTN_DTYPE_F32, x, cg_gep(c, c->f32, dst, cg_i64(c, v * s->lanes)));
    }
}

/* A tile of keys [j0, j0 + lanes): the keys the rows see are [jfirst,
 * cj1) (keys past cj1 in `past`); jnext is the next tile's first key (or
 * j0 again past the last); `partial` if some key is hidden from some row. */
typedef struct tile {
    LLVMValueRef j0, jnext, jfirst, cj1, keys, past, partial;
} tile;

/* One unit of a tile's work: K/V head kvh and a block of up to rb rows
 * of its group (token tok, head kvh * group + hh; the last block repeats
 * the last row where it runs out), row r = tok * heads + head, its output
 * row orow. */
typedef struct unit {
    LLVMValueRef kvh, tok[SPLIT_ROWS], r[SPLIT_ROWS], orow[SPLIT_ROWS];
} unit;

/* Unit u of nblk row blocks per K/V head and nrows rows per group. */
static unit unit_of(cg *c, const split *s, LLVMValueRef u, LLVMValueRef nblk, LLVMValueRef nrows,
                    LLVMValueRef os) {
    unit w;
    w.kvh = LLVMBuildSDiv(c->b, u, nblk, "kvh");
    LLVMValueRef blk = LLVMBuildSRem(c->b, u, nblk, "");
    for (int i = 0; i < s->rb; i++) {
        LLVMValueRef gi = cg_intrinsic(
            c, "llvm.smin", c->i64,
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, blk, cg_i64(c, s->rb), ""), cg_i64(c, i), ""),
            LLVMBuildSub(c->b, nrows, cg_i64(c, 1), ""));
        w.tok[i] = LLVMBuildSDiv(c->b, gi, cg_i64(c, s->group), "tok");
        w.r[i] = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, w.tok[i], cg_i64(c, ir_cfg_heads(c->g)), ""),
                              LLVMBuildAdd(c->b, LLVMBuildMul(c->b, w.kvh, cg_i64(c, s->group), ""),
                                           LLVMBuildSRem(c->b, gi, cg_i64(c, s->group), ""), ""),
                              "r");
        w.orow[i] = row_at(c, os, w.r[i], s->hdp);
    }
    return w;
}

/* q8_0 K (which 0) or V (1): the f16 d of a tile from the element at p
 * (its first key, column 0 of a head) on, into L2: head_dim / 32 rows of
 * the tile's keys, side by side for whole tiles in a block. */
static void prefetch_scales(cg *c, const split *s, int which, int buf, LLVMValueRef p) {
    LLVMValueRef d = cg_cache_scale(c, which, buf, p);
    int64_t bytes = (s->hd / 32) * ir_cfg_kv_block_tokens(c->g) * 2;
    for (int64_t b = 0; b < bytes; b += 64)
        cg_prefetch(c, cg_gep(c, LLVMInt8TypeInContext(c->llctx), d, cg_i64(c, b)), 2);
}

/* The row of key j of the tile in kv (K or V), head kvh: keys outside
 * [jfirst, cj1) read the nearest one (masked; blocks before jfirst may
 * have been released). */
static LLVMValueRef key_row(cg *c, const ir_node *kv, const tile *t, LLVMValueRef kvh, int j) {
    LLVMValueRef kj =
        cg_intrinsic(c, "llvm.smin", c->i64, LLVMBuildAdd(c->b, t->j0, cg_i64(c, j), ""),
                     LLVMBuildSub(c->b, t->cj1, cg_i64(c, 1), ""));
    LLVMValueRef ki[3] = {cg_i64(c, 0), kvh, cg_intrinsic(c, "llvm.smax", c->i64, kj, t->jfirst)};
    return cg_addr(c, kv, ki);
}

/* What unit_scores' steps share. */
typedef struct score_ops {
    const split *s;
    const unit *w;
    LLVMTypeRef et;
    LLVMValueRef kt, kpf, kptrs, qb; /* the tile's K (kvec), the next tile's, K rows, q */
    LLVMValueRef kd;                 /* q8_0: the f16 scales of kt's keys (kvec), or of kptrs' */
    LLVMValueRef qw, qc;             /* kdot: q's words and corrections (opaque) */
    LLVMValueRef *tot;               /* q8_0: each row's scores so far, scaled */
    bool deq; /* q8_0 with compute bf16: each element dequantized, then rounded */
    int chains;
    int64_t line_d;
} score_ops;

/* The tile's keys' d (dk as score_d's), as the cache holds them. */
static LLVMValueRef keys_d(cg *c, const score_ops *o, LLVMValueRef d, int64_t dk) {
    const split *s = o->s;
    LLVMValueRef off = LLVMBuildMul(c->b, d, cg_i64(c, s->kd), "");
    if (!s->kvec)
        return cg_vgather(c, s->kdt, LLVMBuildGEP2(c->b, o->et, o->kptrs, &off, 1, ""));
    if (dk % o->line_d == 0) /* the next tile's line of this d, into L2 */
        cg_prefetch(c, cg_gep(c, o->et, o->kpf, off), 2);
    return cg_vload(c, s->kdt, cg_gep(c, o->et, o->kt, off));
}

/* q8_0: the tile's keys' d of d's block of 32 (block_tokens apart). */
static LLVMValueRef keys_scale(cg *c, const score_ops *o, LLVMValueRef d) {
    LLVMValueRef at = cg_cache_scale_step(c, d);
    return o->s->kvec
               ? cg_vload(c, ATTN_DTYPE_F16, cg_gep(c, c->f16, o->kd, at))
               : cg_vgather(c, ATTN_DTYPE_F16, LLVMBuildGEP2(c->b, c->f16, o->kd, &at, 1, ""));
}

/* Row i's total of the scores += sum (a block of 32 d's, exact with
 * qint) times the keys' d (dv) of block blk, and with qint the row's d
 * of it: the f32 sums and vpdpbusd's give the same bits. */
static void block_total(cg *c, const score_ops *o, int i, LLVMValueRef blk, bool first,
                        LLVMValueRef sum, LLVMValueRef dv) {
    const split *s = o->s;
    if (s->qint) {
        LLVMValueRef at =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, o->w->r[i], cg_i64(c, s->hd / 32), ""), blk, "");
        dv = LLVMBuildFMul(
            c->b, dv, cg_splat(c, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, s->qd, at), "")),
            "");
    }
    o->tot[i] = first ? LLVMBuildFMul(c->b, sum, dv, "") : cg_fma(c, sum, dv, o->tot[i]);
}

/* kdot: block blk of 32 d's of the scores: the tile's keys of d..d+3
 * (four vectors of bytes; one load where a block's d rows are a tile
 * long) interleaved, key j's four bytes in lane j, plus 128 (unsigned,
 * as vpdpbusd takes them), times each row's word of q (broadcast), up
 * to two chains of exact int32 sums per row (split_accs of them in all,
 * as score_d's) started at -128 sum q (qc), then into the rows' totals as
 * score_d's f32 sums. */
static void dot_block(cg *c, const score_ops *o, LLVMValueRef blk, bool first) {
    const split *s = o->s;
    int L = s->lanes, idx[256];
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    for (int j = 0; j < L; j++)
        for (int e = 0; e < 4; e++)
            idx[4 * j + e] = e * L + j;
    int chains = c->target.split_accs / s->rb >= 2 ? 2 : 1;
    LLVMValueRef d0 = LLVMBuildMul(c->b, blk, cg_i64(c, 32), ""), acc[SPLIT_ROWS][2];
    LLVMValueRef wbase[SPLIT_ROWS];
    for (int i = 0; i < s->rb; i++) {
        LLVMValueRef at =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, o->w->r[i], cg_i64(c, s->hd / 32), ""), blk, "");
        acc[i][0] = cg_splat(c, LLVMBuildLoad2(c->b, c->i32, cg_gep(c, c->i32, o->qc, at), ""));
        acc[i][1] = LLVMConstNull(c->vi);
        wbase[i] =
            cg_gep(c, c->i32, o->qw,
                   LLVMBuildAdd(c->b, LLVMBuildMul(c->b, o->w->r[i], cg_i64(c, s->hd / 4), ""),
                                LLVMBuildMul(c->b, blk, cg_i64(c, 8), ""), ""));
    }
    LLVMValueRef top = cg_splat(c, LLVMConstInt(c->i32, 0x80808080u, false));
    for (int g = 0; g < 8; g++) {
        LLVMValueRef rows[4];
        for (int e = 0; e < 4; e++) {
            int64_t de = 4 * g + e; /* d - 32 blk: line_d divides 32 */
            LLVMValueRef off =
                LLVMBuildMul(c->b, LLVMBuildAdd(c->b, d0, cg_i64(c, de), ""), cg_i64(c, s->kd), "");
            if (de % o->line_d == 0) /* the next tile's line of this d, into L2 */
                cg_prefetch(c, cg_gep(c, i8, o->kpf, off), 2);
            if (e && s->kd == L)
                continue;
            LLVMTypeRef vt = LLVMVectorType(i8, (unsigned)(s->kd == L ? 4 * L : L));
            rows[e] = LLVMBuildLoad2(c->b, vt, cg_gep(c, i8, o->kt, off), "");
            LLVMSetAlignment(rows[e], 1);
        }
        LLVMValueRef k = s->kd == L ? rows[0] : cg_concat(c, rows, 4);
        k = LLVMBuildXor(c->b, LLVMBuildBitCast(c->b, cg_shuffle(c, k, idx, 4 * L), c->vi, ""), top,
                         "");
        for (int i = 0; i < s->rb; i++) {
            LLVMValueRef q = cg_splat(
                c, LLVMBuildLoad2(c->b, c->i32, cg_gep(c, c->i32, wbase[i], cg_i64(c, g)), ""));
            acc[i][g % chains] = cg_dot_u8s8(c, acc[i][g % chains], k, q);
        }
    }
    LLVMValueRef dv =
        cg_vload(c, ATTN_DTYPE_F16,
                 cg_gep(c, c->f16, o->kd,
                        LLVMBuildMul(c->b, blk, cg_i64(c, ir_cfg_kv_block_tokens(c->g)), "")));
    for (int i = 0; i < s->rb; i++)
        block_total(c, o, i, blk, first,
                    LLVMBuildSIToFP(c->b, LLVMBuildAdd(c->b, acc[i][0], acc[i][1], ""), c->vf, ""),
                    dv);
}

/* kdot: the rows' totals (o->tot) over all of head_dim's blocks of 32:
 * up to 4 unrolled, more a loop carrying the totals. */
static void dot_scores(cg *c, const score_ops *o) {
    int64_t nq = o->s->hd / 32;
    dot_block(c, o, cg_i64(c, 0), true);
    if (nq <= 4) {
        for (int64_t b = 1; b < nq; b++)
            dot_block(c, o, cg_i64(c, b), false);
        return;
    }
    int rb = o->s->rb;
    LLVMValueRef init[SPLIT_ROWS], next[SPLIT_ROWS];
    for (int i = 0; i < rb; i++)
        init[i] = o->tot[i];
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "qk_block", c->vf, rb);
    for (int i = 0; i < rb; i++)
        o->tot[i] = l.acc[i];
    dot_block(c, o, LLVMBuildAdd(c->b, l.i, cg_i64(c, 1), ""), false);
    for (int i = 0; i < rb; i++)
        next[i] = o->tot[i];
    cg_acc_loop_end(c, &l, cg_i64(c, nq - 1), init, next);
}

/* One d of the scores (d, an i64 value; dk, a number congruent to it
 * modulo chains, line_d and (q8_0) 32, and below chains only for d
 * itself): each row's chain d mod chains += q[row][d] * k[d][keys].
 * q8_0: the chains sum q * (int8 of k) over a block of 32 d's (each
 * starting anew in it); at the block's last d they are added up and
 * times the keys' d into the row's total (tot), so k's scale costs a
 * multiply per block, not per d; with compute bf16 (deq) each element is
 * dequantized and rounded as an operand, summed as a float cache's;
 * with pairs (kpairs) d counts pairs of d's, each by vdpbf16ps. */
static void score_d(cg *c, const score_ops *o, LLVMValueRef d, int64_t dk,
                    LLVMValueRef acc[SPLIT_ROWS][SPLIT_CHAINS]) {
    const split *s = o->s;
    if (s->kpairs) { /* d (and dk) count pairs of d's: (2d, 2d + 1) by vdpbf16ps */
        LLVMValueRef d0 = LLVMBuildMul(c->b, d, cg_i64(c, 2), "");
        LLVMValueRef k0 = keys_d(c, o, d0, 2 * dk),
                     k1 = keys_d(c, o, LLVMBuildAdd(c->b, d0, cg_i64(c, 1), ""), 2 * dk + 1);
        attn_dtype pdt = s->kdt;
        if (o->kd) { /* q8_0: d * q (one block for both), paired as f32 */
            LLVMValueRef dv = keys_scale(c, o, d0);
            k0 = LLVMBuildFMul(c->b, k0, dv, ""), k1 = LLVMBuildFMul(c->b, k1, dv, "");
            pdt = ATTN_DTYPE_F32;
        }
        LLVMValueRef kp = cg_cache_pair(c, pdt, k0, k1);
        int u = (int)(dk % o->chains);
        for (int i = 0; i < s->rb; i++) {
            LLVMValueRef qe = LLVMBuildAdd(
                c->b, LLVMBuildMul(c->b, o->w->r[i], cg_i64(c, s->hdp / 2), ""), d, "");
            LLVMValueRef q =
                cg_splat(c, LLVMBuildLoad2(c->b, c->i32, cg_gep(c, c->i32, s->qp, qe), ""));
            acc[i][u] = cg_dot_pairs(c, dk < o->chains ? cg_vf32(c, 0) : acc[i][u], q, kp);
        }
        return;
    }
    LLVMValueRef kv = keys_d(c, o, d, dk);
    LLVMValueRef dv = o->kd ? keys_scale(c, o, d) : NULL;
    if (o->deq)
        kv = LLVMBuildFMul(c->b, kv, dv, "");
    kv = cg_qk_operand(c, kv);
    int u = (int)(dk % o->chains);
    bool blocks = o->kd && !o->deq;                             /* sums per block of 32 */
    bool first = blocks ? dk % 32 < o->chains : dk < o->chains; /* the chain's first d */
    for (int i = 0; i < s->rb; i++) {
        LLVMValueRef qe =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, o->w->r[i], cg_i64(c, s->hdp), ""), d, "");
        LLVMValueRef qd =
            cg_splat(c, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, o->qb, qe), ""));
        acc[i][u] = first ? LLVMBuildFMul(c->b, qd, kv, "") : cg_fma(c, qd, kv, acc[i][u]);
    }
    if (!blocks || dk % 32 != 31)
        return;
    for (int i = 0; i < s->rb; i++) {
        LLVMValueRef sum = acc[i][0];
        for (int v = 1; v < o->chains; v++)
            sum = LLVMBuildFAdd(c->b, sum, acc[i][v], "");
        LLVMValueRef blk = LLVMBuildUDiv(c->b, d, cg_i64(c, 32), "");
        block_total(c, o, i, blk, dk < 32, sum, dv);
    }
}

/* Unit w's scores of tile t, x[i] row i's: for each d, the tile's
 * keys converted once, times each row's q[d] (loaded through a pointer
 * the optimizer cannot follow, so it stays an FMA's broadcast operand
 * instead of a register kept across the tile); chains sums per row
 * (d mod chains) hide the FMA latency. Hidden keys score -inf. */
static void unit_scores(cg *c, const split *s, const tile *t, const unit *w, LLVMValueRef qs,
                        LLVMValueRef *x) {
    int L = s->lanes;
    LLVMTypeRef et = cg_elem_type(c, s->kdt);
    LLVMValueRef kt = NULL, kpf = NULL, kptrs = NULL;
    if (s->kvec) { /* the tile's keys in the block of j0, side by side */
        LLVMValueRef ki[3] = {cg_i64(c, 0), w->kvh, t->j0},
                     kn[3] = {cg_i64(c, 0), w->kvh, t->jnext};
        kt = cg_addr(c, s->k, ki);
        /* the next tile's K through an opaque pointer too: else the line
         * addresses are hoisted out of the loop, kept live and spilled */
        kpf = cg_opaque_ptr(c, cg_addr(c, s->k, kn));
    } else {
        kptrs = LLVMGetUndef(LLVMVectorType(c->ptr, (unsigned)L));
        for (int j = 0; j < L; j++)
            kptrs = LLVMBuildInsertElement(c->b, kptrs, key_row(c, s->k, t, w->kvh, j),
                                           LLVMConstInt(c->i32, (unsigned)j, false), "");
    }
    /* q8_0: sums per block of 32 d's, each times its scale; compute bf16
     * dequantizes each element instead (deq) */
    bool deq = s->kdt == ATTN_DTYPE_Q8_0 && ir_cfg_bf16(c->g) && !s->qint;
    bool q8 = s->kdt == ATTN_DTYPE_Q8_0 && !deq;
    int most = c->target.split_accs < SPLIT_CHAINS ? c->target.split_accs : SPLIT_CHAINS;
    int64_t nd = s->kpairs ? s->hd / 2 : s->hd; /* steps of score_d */
    int chains = most / s->rb < nd ? most / s->rb : (int)nd;
    chains = chains < 1 ? 1 : chains;
    int64_t es = (int64_t)cg_elem_bytes(s->kdt);
    int64_t line_d = s->kd * es >= 64 ? 1 : 64 / (s->kd * es); /* d rows per cache line */
    LLVMValueRef qb = cg_opaque_ptr(c, qs), acc[SPLIT_ROWS][SPLIT_CHAINS], kd = NULL,
                 tot[SPLIT_ROWS];
    if (q8 || deq)
        kd = cg_cache_scale(c, 0, c->plan->view[s->k->id].buf, s->kvec ? kt : kptrs);
    if (kd && s->kvec) /* the next tile's d, as its K lines (score_d, dot_block) */
        prefetch_scales(c, s, 0, c->plan->view[s->k->id].buf, kpf);
    score_ops ops = {s, w, et, kt, kpf, kptrs, qb, kd, NULL, NULL, tot, deq, chains, line_d};
    if (s->kdot) {
        ops.qw = cg_opaque_ptr(c, s->qw);
        ops.qc = cg_opaque_ptr(c, s->qc);
    }
    /* blocks of nb d's (whole chains and cache lines, 32 FMAs at least):
     * the first and the tail unrolled, the others a loop, so the code is
     * a few blocks long whatever head_dim is; each chain still sums its
     * d's in order (the same bits as unrolled) */
    int64_t nb = chains > line_d ? chains : line_d;
    while (nb * s->rb < 32 || (q8 && nb % 32)) /* q8_0: whole blocks of 32 d's */
        nb *= 2;
    int64_t blocks = nd / nb, d = 0;
    if (blocks < 3)
        blocks = 0; /* short: all unrolled */
    if (s->kdot) {  /* all of it: nothing left for score_d */
        dot_scores(c, &ops);
        nd = 0, blocks = 0;
    }
    for (; d < (blocks ? nb : nd); d++)
        score_d(c, &ops, cg_i64(c, d), d, acc);
    if (blocks) {
        /* the loop carries the chains, or with q8_0 (whole blocks of 32
         * d's in each trip) the rows' totals */
        LLVMValueRef init[SPLIT_CHAINS * SPLIT_ROWS], next[SPLIT_CHAINS * SPLIT_ROWS];
        LLVMValueRef *carry[SPLIT_CHAINS * SPLIT_ROWS];
        int na = 0;
        for (int i = 0; i < s->rb; i++)
            for (int u = 0; u < (q8 ? 1 : chains); u++)
                carry[na++] = q8 ? &tot[i] : &acc[i][u];
        for (int k = 0; k < na; k++)
            init[k] = *carry[k];
        cg_acc_loop l;
        cg_acc_loop_begin(c, &l, "qk_block", c->vf, na);
        for (int k = 0; k < na; k++)
            *carry[k] = l.acc[k];
        LLVMValueRef d0 =
            LLVMBuildMul(c->b, LLVMBuildAdd(c->b, l.i, cg_i64(c, 1), ""), cg_i64(c, nb), "d0");
        for (int64_t k = 0; k < nb; k++) /* k: d's place in its block, d - k a multiple of nb */
            score_d(c, &ops, LLVMBuildAdd(c->b, d0, cg_i64(c, k), ""), nb + k, acc);
        for (int k = 0; k < na; k++)
            next[k] = *carry[k];
        cg_acc_loop_end(c, &l, cg_i64(c, blocks - 1), init, next);
        for (d = blocks * nb; d < nd; d++)
            score_d(c, &ops, cg_i64(c, d), d, acc);
    }
    for (int i = 0; i < s->rb; i++) {
        for (int v = 1; v < chains; v *= 2) /* pairwise: (0+1)+(2+3).. */
            for (int u = 0; !q8 && u + v < chains; u += 2 * v)
                acc[i][u] = LLVMBuildFAdd(c->b, acc[i][u], acc[i][u + v], "");
        if (q8)
            acc[i][0] = tot[i];
        LLVMValueRef posv =
            cg_splat(c, LLVMBuildTrunc(c->b, LLVMBuildAdd(c->b, c->P, w->tok[i], ""), c->i32, ""));
        LLVMValueRef head = LLVMBuildSRem(c->b, w->r[i], cg_i64(c, ir_cfg_heads(c->g)), "");
        LLVMValueRef headv = NULL; /* among the block's all: what expressions read */
        if (s->n->score_mod || s->n->mask_mod)
            headv = cg_splat(
                c, LLVMBuildTrunc(c->b, LLVMBuildAdd(c->b, head, cg_i64(c, cg_expr_head0(c)), ""),
                                  c->i32, ""));
        LLVMValueRef sc = cg_scale_sum(c, s->n, acc[i][0]);
        LLVMValueRef pre[ATTN_EXPR_MAX_NODES] = {NULL};
        for (int k = 0; k < s->n_pre; k++)
            pre[s->pre_node[k]] = cg_splat(
                c,
                LLVMBuildLoad2(c->b, c->f32,
                               cg_gep(c, c->f32, s->pre,
                                      LLVMBuildAdd(c->b, w->r[i], cg_i64(c, k * s->rows_max), "")),
                               ""));
        sc = cg_softcap(c, s->n,
                        cg_score_mod(c, s->n, sc, t->keys, posv, headv, s->n_pre ? pre : NULL));
        if (s->n->alibi)
            sc = cg_alibi_add(c, sc, cg_splat(c, cg_alibi_slope(c, head)), t->keys, posv);
        LLVMValueRef bits = cg_tree_bits(c, w->tok[i]);
        if (bits)
            bits = cg_splat(c, bits);
        x[i] = LLVMBuildSelect(c->b, cg_keys_hidden(c, s->n, t->keys, posv, headv, bits, t->past),
                               cg_vf32(c, -INFINITY), sc, "");
    }
}

/* Unit w's online softmax of its scores x, per row against a
 * reference m that moves only when a score passes it: then to the
 * tile's max + SPLIT_SLACK, and l and o are rescaled (every row's m, l
 * and o are read before any is written: a repeated row writes the same
 * values). Otherwise no max is taken and nothing is rescaled; p = e^(s -
 * m) <= 1 either way, to ps. */
static void unit_softmax(cg *c, const split *s, const unit *w, LLVMValueRef const *x,
                         LLVMValueRef ms, LLVMValueRef ls, LLVMValueRef ps) {
    int L = s->lanes;
    LLVMValueRef mold[SPLIT_ROWS], lold[SPLIT_ROWS], grow = NULL;
    LLVMTypeRef mask_ty = LLVMVectorType(LLVMInt1TypeInContext(c->llctx), (unsigned)L);
    for (int i = 0; i < s->rb; i++) {
        mold[i] = LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, ms, w->r[i]), "");
        lold[i] = cg_vload(c, ATTN_DTYPE_F32, row_at(c, ls, w->r[i], L));
        LLVMValueRef g =
            cg_intrinsic(c, "llvm.vector.reduce.or", mask_ty,
                         LLVMBuildFCmp(c->b, LLVMRealOGT, x[i], cg_splat(c, mold[i]), ""), NULL);
        grow = i ? LLVMBuildOr(c->b, grow, g, "") : g;
    }
    LLVMBasicBlockRef from = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef moved = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "rescale");
    LLVMBasicBlockRef kept = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "softmax");
    LLVMBuildCondBr(c->b, grow, moved, kept);
    LLVMPositionBuilderAtEnd(c->b, moved);
    LLVMValueRef mnew[SPLIT_ROWS], lnew[SPLIT_ROWS], alpha[SPLIT_ROWS];
    for (int i = 0; i < s->rb; i++) {
        LLVMValueRef top = LLVMBuildFAdd(c->b, max_across(c, x[i]), cg_f32(c, SPLIT_SLACK), "");
        mnew[i] = cg_intrinsic(c, "llvm.maxnum", c->f32, mold[i], top);
        alpha[i] = cg_exp_nonpos(c, LLVMBuildFSub(c->b, mold[i], finite_m(c, mnew[i]), ""));
        lnew[i] = LLVMBuildFMul(c->b, lold[i], cg_splat(c, alpha[i]), "");
    }
    for (int64_t v = 0; v < s->nv; v++) {
        LLVMValueRef o[SPLIT_ROWS];
        for (int i = 0; i < s->rb; i++)
            o[i] = LLVMBuildFMul(
                c->b, cg_vload(c, ATTN_DTYPE_F32, cg_gep(c, c->f32, w->orow[i], cg_i64(c, v * L))),
                cg_splat(c, alpha[i]), "");
        for (int i = 0; i < s->rb; i++)
            cg_vstore(c, ATTN_DTYPE_F32, o[i], cg_gep(c, c->f32, w->orow[i], cg_i64(c, v * L)));
    }
    for (int i = 0; i < s->rb; i++)
        LLVMBuildStore(c->b, mnew[i], cg_gep(c, c->f32, ms, w->r[i]));
    LLVMBuildBr(c->b, kept);
    LLVMPositionBuilderAtEnd(c->b, kept);
    LLVMValueRef m[SPLIT_ROWS], l[SPLIT_ROWS];
    for (int i = 0; i < s->rb; i++) {
        LLVMBasicBlockRef bb[2] = {moved, from};
        LLVMValueRef mv[2] = {mnew[i], mold[i]}, lv[2] = {lnew[i], lold[i]};
        m[i] = LLVMBuildPhi(c->b, c->f32, "m");
        l[i] = LLVMBuildPhi(c->b, c->vf, "l");
        LLVMAddIncoming(m[i], mv, bb, 2);
        LLVMAddIncoming(l[i], lv, bb, 2);
    }
    for (int i = 0; i < s->rb; i++) {
        LLVMValueRef p =
            cg_exp_nonpos(c, LLVMBuildFSub(c->b, x[i], cg_splat(c, finite_m(c, m[i])), ""));
        l[i] = LLVMBuildFAdd(c->b, l[i], p, "");
        p = cg_operand(c, p);
        cg_vstore(c, ATTN_DTYPE_F32, p, cg_gep(c, c->f32, ps, cg_i64(c, i * L)));
        if (s->vpairs)
            store_pairs(c, p, s->pp, cg_i64(c, i * L / 2));
    }
    for (int i = 0; i < s->rb; i++)
        cg_vstore(c, ATTN_DTYPE_F32, l[i], row_at(c, ls, w->r[i], L));
}

/* q8_0: pd[b][i][j] = p[i][j] times key j's d of V's block b of 32: the
 * keys' d of a block, at vd[j] + b * block_tokens, are one vector where
 * the tile lies in one block (one), else a gather; then rb multiplies,
 * instead of a multiply per V vector in p.v. Compute bf16 rounds each
 * dequantized element of V instead: pd[b][0][j] = d alone. */
static void scale_weights(cg *c, const split *s, const LLVMValueRef *vd, bool one, LLVMValueRef ps,
                          LLVMValueRef pd) {
    int L = s->lanes;
    int64_t bt = ir_cfg_kv_block_tokens(c->g);
    LLVMValueRef ptrs = NULL;
    for (int j = 0; !one && j < L; j++)
        ptrs = LLVMBuildInsertElement(c->b,
                                      j ? ptrs : LLVMGetUndef(LLVMVectorType(c->ptr, (unsigned)L)),
                                      vd[j], LLVMConstInt(c->i32, (unsigned)j, false), "");
    for (int64_t b = 0; b < s->hd / 32; b++) {
        LLVMValueRef at = cg_i64(c, b * bt);
        LLVMValueRef d =
            one ? cg_vload(c, ATTN_DTYPE_F16, cg_gep(c, c->f16, vd[0], at))
                : cg_vgather(c, ATTN_DTYPE_F16, LLVMBuildGEP2(c->b, c->f16, ptrs, &at, 1, ""));
        if (ir_cfg_bf16(c->g)) {
            cg_vstore(c, ATTN_DTYPE_F32, d, cg_gep(c, c->f32, pd, cg_i64(c, b * SPLIT_ROWS * L)));
            continue;
        }
        for (int i = 0; i < s->rb; i++) {
            LLVMValueRef p = cg_vload(c, ATTN_DTYPE_F32, cg_gep(c, c->f32, ps, cg_i64(c, i * L)));
            cg_vstore(c, ATTN_DTYPE_F32, LLVMBuildFMul(c->b, p, d, ""),
                      cg_gep(c, c->f32, pd, cg_i64(c, (b * SPLIT_ROWS + i) * L)));
        }
    }
}

/* Unit w's p.v over tile t, guarded where the tile is partial. A whole
 * tile lies in one block (kvec): its V rows are one row's address plus
 * multiples of the token stride, instead of a block table look-up per
 * key (which the vectorizer turned into gathers). */
static void unit_pv(cg *c, const split *s, const tile *t, const unit *w, LLVMValueRef ps,
                    LLVMValueRef pd, const ahead *av) {
    LLVMValueRef vrow[64], vd[64];
    bool q8 = s->vdt == ATTN_DTYPE_Q8_0;
    int vbuf = c->plan->view[s->v->id].buf;
    LLVMBasicBlockRef guarded = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_partial");
    LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_full");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_done");
    LLVMBuildCondBr(c->b, t->partial, guarded, plain);
    LLVMPositionBuilderAtEnd(c->b, guarded);
    for (int j = 0; j < s->lanes; j++) {
        vrow[j] = key_row(c, s->v, t, w->kvh, j);
        if (q8)
            vd[j] = cg_cache_scale(c, 1, vbuf, vrow[j]);
    }
    if (q8)
        scale_weights(c, s, vd, false, ps, pd);
    pv_block(c, s, w->orow, vrow, q8 ? pd : NULL, ps, av, w->kvh, true);
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, plain);
    const cg_view *vv = &c->plan->view[s->v->id];
    int64_t ts;
    bool one_block = s->kvec && vv->paged && ir_dim_is_const(vv->nb[2], &ts);
    for (int j = 0; j < s->lanes; j++) {
        vrow[j] = one_block && j ? cg_gep(c, cg_elem_type(c, s->vdt), vrow[0], cg_i64(c, j * ts))
                                 : key_row(c, s->v, t, w->kvh, j);
        if (q8 && (j == 0 || !one_block))
            vd[j] = cg_cache_scale(c, 1, vbuf, vrow[j]);
    }
    if (q8)
        scale_weights(c, s, vd, one_block, ps, pd);
    if (q8 && one_block && av->rows) { /* the next tile's d, as its V rows (ahead_step) */
        LLVMValueRef next = LLVMBuildLoad2(c->b, c->ptr, av->rows, "");
        prefetch_scales(c, s, 1, vbuf,
                        cg_gep(c, cg_elem_type(c, s->vdt), next,
                               LLVMBuildMul(c->b, w->kvh, cg_i64(c, s->hd), "")));
    }
    pv_block(c, s, w->orow, vrow, q8 ? pd : NULL, ps, av, w->kvh, false);
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, done);
}

static void emit_partials(cg *c, const ir_node *n);

/* The partials in vectors of split_widen machine vectors (LLVM splits
 * each operation): a tile of 16 keys with AVX2, so each q[d] broadcast
 * serves two K vectors and a tile's softmax and bookkeeping serve twice
 * the FMAs. The register counts of the target are of machine vectors. */
void cg_emit_split_partials(cg *c, const ir_node *n) {
    cg_target t = c->target;
    LLVMTypeRef vf = c->vf, vi = c->vi;
    int w = split_widen(c);
    c->target.lanes *= w;
    c->target.split_vecs = 1;
    c->target.split_accs /= w;
    c->target.split_pv_regs /= w;
    c->vf = LLVMVectorType(c->f32, (unsigned)c->target.lanes);
    c->vi = LLVMVectorType(c->i32, (unsigned)c->target.lanes);
    emit_partials(c, n);
    c->target = t;
    c->vf = vf, c->vi = vi;
}

/* A chunk's m, l (its lanes' sums) and o per row, into the partials. */
static void store_partials(cg *c, const split *s, LLVMValueRef chunk, LLVMValueRef rows,
                           LLVMValueRef ms, LLVMValueRef ls, LLVMValueRef os) {
    int L = s->lanes;
    cg_loop lw = cg_for(c, cg_i64(c, 0), rows, "r");
    LLVMBuildStore(c->b, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, ms, lw.i), ""),
                   part_at(c, s, chunk, lw.i, cg_i64(c, 0)));
    LLVMValueRef lsum = cg_intrinsic(c, "llvm.vector.reduce.fadd", c->vf, cg_f32(c, -0.0),
                                     cg_vload(c, ATTN_DTYPE_F32, row_at(c, ls, lw.i, L)));
    LLVMSetFastMathFlags(lsum, LLVMFastMathAllowReassoc);
    LLVMBuildStore(c->b, lsum, part_at(c, s, chunk, lw.i, cg_i64(c, 1)));
    /* in vectors (a scalar loop took about 2% of llama3_8b's decode
     * core), the last one masked: the next row's m follows head_dim */
    LLVMValueRef src = row_at(c, os, lw.i, s->hdp);
    LLVMValueRef dst = part_at(c, s, chunk, lw.i, cg_i64(c, 2));
    for (int64_t v = 0; v < s->nv; v++) {
        LLVMValueRef ov = cg_vload(c, ATTN_DTYPE_F32, cg_gep(c, c->f32, src, cg_i64(c, v * L)));
        LLVMValueRef to = cg_gep(c, c->f32, dst, cg_i64(c, v * L)), inside = inside_hd(c, s, v);
        if (inside)
            cg_vstore_masked(c, ov, to, inside);
        else
            cg_vstore(c, ATTN_DTYPE_F32, ov, to);
    }
    cg_for_end(c, &lw);
}

static void emit_partials(cg *c, const ir_node *n) {
    split s = split_of(c, n);
    int L = s.lanes;
    ATTNC_ASSERT(s.nv <= SPLIT_MAX_VECTORS && L <= 64);
    LLVMValueRef qs = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(s.rows_max * s.hdp)), NULL);
    LLVMValueRef os = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(s.rows_max * s.hdp)), NULL);
    LLVMValueRef ps = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(SPLIT_ROWS * L)), NULL);
    /* q8_0 V: p times each key's d, per block of 32 of head_dim */
    LLVMValueRef pd =
        s.vdt != ATTN_DTYPE_Q8_0
            ? NULL
            : cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)((s.hd / 32) * SPLIT_ROWS * L)), NULL);
    LLVMValueRef ms = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)s.rows_max), NULL);
    /* l per row as a vector of lane sums, added up at the chunk's end */
    LLVMValueRef ls = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(s.rows_max * L)), NULL);
    LLVMValueRef slots[3] = {qs, os, ps};
    for (int i = 0; i < 3; i++)
        LLVMSetAlignment(slots[i], 64);
    if (s.kpairs)
        s.qp = cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)(s.rows_max * s.hdp / 2)), NULL);
    if (s.vpairs)
        s.pp = cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)(SPLIT_ROWS * L / 2)), NULL);
    if (s.qint)
        s.qd = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(s.rows_max * s.hd / 32)), NULL);
    if (s.kdot) {
        s.qw = cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)(s.rows_max * s.hd / 4)), NULL);
        s.qc = cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)(s.rows_max * s.hd / 32)), NULL);
    }
    /* alibi_expr's slope exp(-c * (h + 1)) per row and tile of keys cost
     * its decode @4000 core 5.1-5.5 ms against the built-in's 4.0-4.8 */
    s.n_pre = n->score_mod ? cg_expr_row_parts(cg_expr_of(c, false), s.pre_node, 4) : 0;
    if (s.n_pre)
        s.pre = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(s.n_pre * s.rows_max)), NULL);
    ahead av = ahead_of(c, &s, s.v, s.vdt);

    cg_chunks ck;
    cg_split_chunks(c, n, &ck);
    LLVMValueRef jfirst = ck.jfirst, jend = ck.jend;
    LLVMValueRef rows = LLVMBuildMul(c->b, c->S, cg_i64(c, ir_cfg_heads(c->g)), "rows");
    /* a thread's chunks are consecutive, so the prefetch of the next tile
     * runs on into its next chunk */
    LLVMValueRef clo, chi;
    cg_share(c, ck.nc, &clo, &chi);

    /* the rows' queries (scaled), once for the thread's chunks (quantizing
     * them for each chunk cost llama3_8b's decode @4096 over a q8_0 cache
     * about 6%); row = token * heads + head */
    LLVMBasicBlockRef staged = cg_live_begin(c, LLVMBuildICmp(c->b, LLVMIntSLT, clo, chi, ""));
    cg_loop lq = cg_for(c, cg_i64(c, 0), rows, "q_row");
    LLVMValueRef qi[3] = {cg_i64(c, 0),
                          LLVMBuildSRem(c->b, lq.i, cg_i64(c, ir_cfg_heads(c->g)), ""),
                          LLVMBuildSDiv(c->b, lq.i, cg_i64(c, ir_cfg_heads(c->g)), "")};
    LLVMValueRef at = LLVMBuildMul(c->b, lq.i, cg_i64(c, s.hdp), "");
    stage_row(c, &s, s.q->dt, cg_addr(c, s.q, qi), cg_gep(c, c->f32, qs, at),
              cg_query_scale(c, n->scale));
    if (s.qint) { /* q as ggml quantizes it for q.k (cg_flash.c, item_rows), blocks apart */
        LLVMValueRef bq = LLVMBuildMul(c->b, lq.i, cg_i64(c, s.hd / 32), "");
        cg_q8_row(c, cg_gep(c, c->f32, qs, at), s.hd, cg_gep(c, c->f32, s.qd, bq),
                  s.kdot ? cg_gep(c, c->i32, s.qw, LLVMBuildMul(c->b, bq, cg_i64(c, 8), "")) : NULL,
                  s.kdot ? cg_gep(c, c->i32, s.qc, bq) : NULL);
    } else if (ir_cfg_q8_query(c->g)) {
        cg_q8_round_trip(c, cg_gep(c, c->f32, qs, at), s.hd);
    }
    for (int64_t v = 0; s.kpairs && v < s.nv; v++) /* rounded when staged */
        store_pairs(c,
                    cg_vload(c, ATTN_DTYPE_F32,
                             cg_gep(c, c->f32, qs, LLVMBuildAdd(c->b, at, cg_i64(c, v * L), ""))),
                    s.qp,
                    LLVMBuildAdd(c->b, LLVMBuildUDiv(c->b, at, cg_i64(c, 2), ""),
                                 cg_i64(c, v * L / 2), ""));
    if (s.n_pre) { /* the score_mod's row parts, once per row (kv stands in for the shape) */
        LLVMValueRef pos = LLVMBuildTrunc(c->b, LLVMBuildAdd(c->b, c->P, qi[2], ""), c->i32, "");
        LLVMValueRef h = LLVMBuildTrunc(
            c->b, LLVMBuildAdd(c->b, qi[1], cg_i64(c, cg_expr_head0(c)), ""), c->i32, "");
        LLVMValueRef vals[ATTN_EXPR_MAX_NODES];
        cg_expr_at ex = {cg_f32(c, 0), pos, pos, h, NULL};
        cg_expr_values(c, cg_expr_of(c, false), &ex, vals);
        for (int k = 0; k < s.n_pre; k++)
            LLVMBuildStore(
                c->b, vals[s.pre_node[k]],
                cg_gep(c, c->f32, s.pre, LLVMBuildAdd(c->b, lq.i, cg_i64(c, k * s.rows_max), "")));
    }
    cg_for_end(c, &lq);
    cg_live_end(c, staged);

    cg_loop li = cg_for(c, clo, chi, "chunk");
    LLVMValueRef chunk = li.i;
    LLVMValueRef cj0 = cg_split_chunk_key(c, &ck, chunk);
    LLVMValueRef cj1 = cg_split_chunk_key(c, &ck, LLVMBuildAdd(c->b, chunk, cg_i64(c, 1), ""));

    /* the rows' empty results */
    cg_loop lr = cg_for(c, cg_i64(c, 0), rows, "r");
    at = LLVMBuildMul(c->b, lr.i, cg_i64(c, s.hdp), "");
    for (int64_t v = 0; v < s.nv; v++)
        cg_vstore(c, ATTN_DTYPE_F32, cg_vf32(c, 0),
                  cg_gep(c, c->f32, os, LLVMBuildAdd(c->b, at, cg_i64(c, v * L), "")));
    LLVMBuildStore(c->b, cg_f32(c, -INFINITY), cg_gep(c, c->f32, ms, lr.i));
    cg_vstore(c, ATTN_DTYPE_F32, cg_vf32(c, 0), row_at(c, ls, lr.i, L));
    cg_for_end(c, &lr);

    LLVMValueRef nt = LLVMBuildSDiv(
        c->b, LLVMBuildAdd(c->b, LLVMBuildSub(c->b, cj1, cj0, ""), cg_i64(c, L - 1), ""),
        cg_i64(c, L), "");
    cg_loop lt = cg_for(c, cg_i64(c, 0), nt, "ktile");
    LLVMValueRef j0 = LLVMBuildAdd(c->b, cj0, LLVMBuildMul(c->b, lt.i, cg_i64(c, L), ""), "j0");
    /* some key of the tile is hidden from some row: guard p.v */
    LLVMValueRef jlast = LLVMBuildAdd(c->b, j0, cg_i64(c, L - 1), "");
    LLVMValueRef pmax = LLVMBuildSub(c->b, LLVMBuildAdd(c->b, c->P, c->S, ""), cg_i64(c, 1), "");
    /* keys before jfirst (the first tile's) are outside every row's window */
    LLVMValueRef partial = cg_tile_cut(c, n, j0, jlast, cj1, c->P, pmax);
    LLVMValueRef keys = LLVMBuildAdd(c->b, cg_splat(c, LLVMBuildTrunc(c->b, j0, c->i32, "")),
                                     cg_lane_ids(c), "keys");
    LLVMValueRef past = LLVMBuildICmp(c->b, LLVMIntSGE, keys,
                                      cg_splat(c, LLVMBuildTrunc(c->b, cj1, c->i32, "")), "");
    if (c->n_shared) { /* a prefix's last keys in the own call's first tile: not its own */
        past = LLVMBuildOr(c->b, past,
                           LLVMBuildICmp(c->b, LLVMIntSLT, keys,
                                         cg_splat(c, LLVMBuildTrunc(c->b, jfirst, c->i32, "")), ""),
                           "");
        partial = LLVMBuildOr(c->b, partial, LLVMBuildICmp(c->b, LLVMIntSLT, j0, jfirst, ""), "");
    }
    /* the next tile's V token rows (past the keys: the last key again), its
     * first key (past the keys: this tile's) */
    for (int j = 0; av.rows && j < L; j++) {
        LLVMValueRef ki[3] = {cg_i64(c, 0), cg_i64(c, 0),
                              cg_intrinsic(c, "llvm.smin", c->i64,
                                           LLVMBuildAdd(c->b, j0, cg_i64(c, L + j), ""),
                                           LLVMBuildSub(c->b, jend, cg_i64(c, 1), ""))};
        LLVMBuildStore(c->b, cg_addr(c, s.v, ki), cg_gep(c, c->ptr, av.rows, cg_i64(c, j)));
    }
    LLVMValueRef jnext = LLVMBuildAdd(c->b, j0, cg_i64(c, L), "");
    jnext =
        LLVMBuildSelect(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, jnext, jend, ""), jnext, j0, "jnext");

    tile t = {.j0 = j0,
              .jnext = jnext,
              .jfirst = jfirst,
              .cj1 = cj1,
              .keys = keys,
              .past = past,
              .partial = partial};

    /* the tile's units, (K/V head, row block), in order (software
     * pipelining them, unit u's scores between unit u - 1's softmax and
     * p.v, measured no faster with the cache in L3) */
    LLVMValueRef nrows = LLVMBuildMul(c->b, c->S, cg_i64(c, s.group), "");
    LLVMValueRef nblk = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, nrows, cg_i64(c, s.rb - 1), ""),
                                      cg_i64(c, s.rb), "");
    /* a tile mask_mod hides from every row: skipped */
    LLVMBasicBlockRef done = cg_live_begin(c, cg_tile_live(c, n, j0, jlast, c->P, pmax));
    cg_loop lu = cg_for(c, cg_i64(c, 0), LLVMBuildMul(c->b, nblk, cg_i64(c, s.hk), ""), "unit");
    unit w = unit_of(c, &s, lu.i, nblk, nrows, os);
    LLVMValueRef x[SPLIT_ROWS];
    unit_scores(c, &s, &t, &w, qs, x);
    unit_softmax(c, &s, &w, x, ms, ls, ps);
    unit_pv(c, &s, &t, &w, ps, pd, &av);
    cg_for_end(c, &lu);
    cg_live_end(c, done);
    cg_for_end(c, &lt);

    store_partials(c, &s, chunk, rows, ms, ls, os);
    cg_for_end(c, &li);
}

void cg_emit_split_merge(cg *c, const ir_node *n, const char *name) {
    split s = split_base(c, n);
    int64_t H = ir_cfg_heads(c->g);
    ATTNC_ASSERT(n->dt == ATTN_DTYPE_F32);
    cg_kernel_begin(c, name);
    LLVMValueRef wts = cg_slot(c, LLVMArrayType2(c->f32, SPLIT_CHUNKS), NULL);
    LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "merge");
    LLVMBasicBlockRef out = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "not_split");
    LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLE, c->S, cg_i64(c, n->split_tokens), ""),
                    run, out);
    LLVMPositionBuilderAtEnd(c->b, out);
    LLVMBuildRetVoid(c->b);
    LLVMPositionBuilderAtEnd(c->b, run);
    cg_chunks ck;
    cg_split_chunks(c, n, &ck);
    LLVMValueRef nc = ck.nc, lo, hi;
    cg_share(c, LLVMBuildMul(c->b, c->S, cg_i64(c, H), ""), &lo, &hi);
    cg_loop lr = cg_for(c, lo, hi, "row"); /* row = token * heads + head */
    LLVMValueRef r = lr.i;
    /* the largest max M, each chunk's weight e^(m_c - M), their sum with l */
    LLVMValueRef mslot = cg_slot(c, c->f32, NULL), lslot = cg_slot(c, c->f32, NULL);
    LLVMBuildStore(c->b, cg_f32(c, -INFINITY), mslot);
    cg_loop lc = cg_for(c, cg_i64(c, 0), nc, "chunk");
    LLVMValueRef mc = LLVMBuildLoad2(c->b, c->f32, part_at(c, &s, lc.i, r, cg_i64(c, 0)), "");
    LLVMBuildStore(
        c->b, cg_intrinsic(c, "llvm.maxnum", c->f32, LLVMBuildLoad2(c->b, c->f32, mslot, ""), mc),
        mslot);
    cg_for_end(c, &lc);
    /* shared-prefix calls (attn_kernel_args): a prefix call stores its
     * rows' state (M, the sum L and the unnormalized output) at their
     * batch rows of the cascade buffer, and no output; an own call after
     * it (n_shared > 0) takes that state as one more chunk (its m and l
     * slots stay -inf and 0 otherwise: weight 0) */
    LLVMValueRef pre = c->prefix, joins = NULL, cas = NULL, mshared = NULL, lshared = NULL;
    if (pre) {
        joins = LLVMBuildAnd(c->b, LLVMBuildNot(c->b, pre, ""),
                             LLVMBuildICmp(c->b, LLVMIntSGT, c->n_shared, cg_i64(c, 0), ""), "");
        cas = cg_split_cascade_row(c, n, r);
        mshared = cg_slot(c, c->f32, cg_f32(c, -INFINITY));
        lshared = cg_slot(c, c->f32, cg_f32(c, 0));
        LLVMBasicBlockRef got = cg_live_begin(c, joins);
        LLVMValueRef m = LLVMBuildLoad2(c->b, c->f32, cas, "");
        LLVMBuildStore(c->b, m, mshared);
        LLVMBuildStore(c->b, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, cas, cg_i64(c, 1)), ""),
                       lshared);
        LLVMBuildStore(
            c->b,
            cg_intrinsic(c, "llvm.maxnum", c->f32, LLVMBuildLoad2(c->b, c->f32, mslot, ""), m),
            mslot);
        cg_live_end(c, got);
    }
    /* a sink joins the max and the sum (and adds no output); an own
     * call's, not the prefix's */
    const ir_node *sinks = ir_sinks(n);
    LLVMValueRef sink = NULL;
    if (sinks) {
        LLVMValueRef si[1] = {LLVMBuildSRem(c->b, r, cg_i64(c, H), "")};
        sink = cg_load(c, sinks->dt, cg_addr(c, sinks, si));
        if (pre)
            sink = LLVMBuildSelect(c->b, pre, cg_f32(c, -INFINITY), sink, "");
        LLVMBuildStore(
            c->b,
            cg_intrinsic(c, "llvm.maxnum", c->f32, LLVMBuildLoad2(c->b, c->f32, mslot, ""), sink),
            mslot);
    }
    LLVMValueRef M = LLVMBuildLoad2(c->b, c->f32, mslot, "M");
    M = finite_m(c, M);
    LLVMBuildStore(c->b, sink ? cg_exp_nonpos(c, LLVMBuildFSub(c->b, sink, M, "")) : cg_f32(c, 0),
                   lslot);
    LLVMValueRef wshared = NULL;
    if (pre) {
        wshared =
            cg_exp_nonpos(c, LLVMBuildFSub(c->b, LLVMBuildLoad2(c->b, c->f32, mshared, ""), M, ""));
        LLVMBuildStore(c->b,
                       cg_fma(c, wshared, LLVMBuildLoad2(c->b, c->f32, lshared, ""),
                              LLVMBuildLoad2(c->b, c->f32, lslot, "")),
                       lslot);
    }
    cg_loop lc2 = cg_for(c, cg_i64(c, 0), nc, "chunk");
    LLVMValueRef w = cg_exp_nonpos(
        c, LLVMBuildFSub(c->b,
                         LLVMBuildLoad2(c->b, c->f32, part_at(c, &s, lc2.i, r, cg_i64(c, 0)), ""),
                         M, ""));
    LLVMBuildStore(c->b, w, cg_gep(c, c->f32, wts, lc2.i));
    LLVMValueRef lw = LLVMBuildFMul(
        c->b, w, LLVMBuildLoad2(c->b, c->f32, part_at(c, &s, lc2.i, r, cg_i64(c, 1)), ""), "");
    LLVMBuildStore(c->b, LLVMBuildFAdd(c->b, LLVMBuildLoad2(c->b, c->f32, lslot, ""), lw, ""),
                   lslot);
    cg_for_end(c, &lc2);
    LLVMValueRef L = LLVMBuildLoad2(c->b, c->f32, lslot, "L");
    LLVMValueRef inv = cg_inv_sum(c, n, L);
    LLVMValueRef oi[3] = {cg_i64(c, 0), LLVMBuildSRem(c->b, r, cg_i64(c, H), ""),
                          LLVMBuildSDiv(c->b, r, cg_i64(c, H), "")};
    LLVMValueRef orow = cg_addr(c, n, oi);
    LLVMValueRef oshared = NULL; /* the prefix's output where an own call joins it */
    if (pre) {
        LLVMBasicBlockRef put = cg_live_begin(c, pre);
        LLVMBuildStore(c->b, M, cas);
        LLVMBuildStore(c->b, L, cg_gep(c, c->f32, cas, cg_i64(c, 1)));
        cg_live_end(c, put);
        inv = LLVMBuildSelect(c->b, pre, cg_f32(c, 1), inv, "");
        /* never read through cas where no prefix call ran (unbound) */
        oshared = LLVMBuildSelect(c->b, joins, cg_gep(c, c->f32, cas, cg_i64(c, 2)),
                                  part_at(c, &s, cg_i64(c, 0), r, cg_i64(c, 2)), "");
        orow = LLVMBuildSelect(c->b, pre, cg_gep(c, c->f32, cas, cg_i64(c, 2)), orow, "");
    }
    /* out = sum_c w_c o_c / sum_c w_c l_c, whole vectors of head_dim, then the rest */
    int64_t full = s.hd / s.lanes;
    for (int64_t v = 0; v <= full; v++) {
        bool vec = v < full;
        int64_t d0 = v * s.lanes, nd = vec ? 1 : s.hd - d0;
        for (int64_t d = 0; d < nd; d++) {
            LLVMValueRef init = vec ? cg_vf32(c, 0) : cg_f32(c, 0), next;
            if (oshared) {
                LLVMValueRef op = cg_gep(c, c->f32, oshared, cg_i64(c, d0 + d));
                LLVMValueRef o =
                    vec ? LLVMBuildFMul(c->b, cg_splat(c, wshared), cg_vload(c, ATTN_DTYPE_F32, op),
                                        "")
                        : LLVMBuildFMul(c->b, wshared, LLVMBuildLoad2(c->b, c->f32, op, ""), "");
                init = LLVMBuildSelect(c->b, joins, o, init, "");
            }
            cg_acc_loop l;
            cg_acc_loop_begin(c, &l, "chunk", vec ? c->vf : c->f32, 1);
            LLVMValueRef wc = LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, wts, l.i), "");
            LLVMValueRef op =
                cg_gep(c, c->f32, part_at(c, &s, l.i, r, cg_i64(c, 2)), cg_i64(c, d0 + d));
            next = vec ? cg_fma(c, cg_splat(c, wc), cg_vload(c, ATTN_DTYPE_F32, op), l.acc[0])
                       : cg_fma(c, wc, LLVMBuildLoad2(c->b, c->f32, op, ""), l.acc[0]);
            cg_acc_loop_end(c, &l, nc, &init, &next);
            LLVMValueRef dst = cg_gep(c, c->f32, orow, cg_i64(c, d0 + d));
            if (vec)
                cg_vstore(c, ATTN_DTYPE_F32, LLVMBuildFMul(c->b, next, cg_splat(c, inv), ""), dst);
            else
                LLVMBuildStore(c->b, LLVMBuildFMul(c->b, next, inv, ""), dst);
        }
    }
    cg_for_end(c, &lr);
    cg_kernel_end(c);
}
