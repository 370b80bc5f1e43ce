/* cg_flash.c: attention as one tiled online-softmax kernel (the flash
 * node): no [T, S, heads] scores exist.
 *
 * A work item is one K/V head with up to `rows` query rows of its group:
 * rows = rv vectors of lanes, each row one (query head of the group, new
 * token) pair, token-major. Its queries are transposed once into qt[d][row]
 * (and scaled), so the lanes of a vector are rows. Keys then come in tiles
 * of bk: for each, the scores s[key][row] = sum_d k[key][d] * qt[d][row]
 * take bk x rv vector sums in registers (a key's element broadcast to all
 * rows), softcap and the causal/window mask are applied in registers, and
 * the online softmax (running max m and sum l per row, max and sums across
 * the tile's keys being plain vector ops) rescales the output ot[d][row]
 * and adds p . v, again as a register block of dc dims x rv vectors.
 * K/V tiles entirely masked for all rows of an item are never visited;
 * each K/V tile is read once for all query heads of its group.
 *
 * Items are dealt round-robin to the threads; each is computed by one
 * thread in one order, so results do not depend on the thread count. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cg_build.h"

/* The softmax reference's headroom: a row's m moves to its tile's max +
 * this, so the next scores that pass it rescale nothing (cg_split.c's
 * SPLIT_SLACK, the same reason). */
enum { FLASH_SLACK = 8 };

/* A score_mod's distance table (flash.dist) for items of one head spans
 * this many keys (dtiles * bk), besides its rows. */
enum { DIST_KEYS = 256 };

typedef struct flash {
    const ir_node *n, *q, *k, *v;
    int64_t hd, vd, group, hpi, tiles_q, chunks; /* q.k and value dims, heads per item.. */
    int lanes, rv, rows, bk, bks, dc;            /* keys per tile, per score pass */
    /* compute bf16 on AVX512-BF16: qt holds [hd/2][rows] and the widened
     * tile kf [hd/2][bk] i32 pairs of bf16 (d, d + 1), vf [bk/2][vd] pairs
     * of keys (j, j + 1): q.k and (full tiles) p.v by vdpbf16ps */
    bool pairs;
    /* pairs where V is K's first vd dims (MLA's latent): V's pairs of keys
     * are made from K's vectors of keys, so vf is [vd][bk/2] (pairs of
     * keys (2i, 2i + 1) of each d) instead of [bk/2][vd] */
    bool vt;
    bool amx;        /* AMX tiles for both products (amx_key_tile): bk a multiple of 32 */
    LLVMValueRef pp; /* pairs: the tile's p as [bk/2][rows] pairs of keys (j, j + 1) */
    LLVMTypeRef qt_ty, pb_ty;
    LLVMValueRef qt, ot, pb, m, l; /* stack: [hd*rows], [vd*rows], [bk*rows], [rows], [rows] */
    LLVMValueRef lv;               /* amx: each row's sum as a vector [rows][lanes], or NULL */
    LLVMValueRef qr;      /* ir_cfg_q8_query: the rows' q quantized and back [rows][hd], or NULL */
    LLVMValueRef sl, pos; /* the rows' ALiBi slopes [rows] (f32), positions (i32) */
    LLVMValueRef tb;      /* the rows' tree bits [rows] (i64; cg_tree_bits), or NULL */
    LLVMValueRef hv;      /* score_mod, mask_mod: the rows' heads [rows] (i32, cg_expr_head0 on) */
    /* score_mod: its row parts (cg_expr_row_parts) computed per row, [n_pre][rows] f32 */
    LLVMValueRef pre;
    int n_pre, pre_node[4];
    /* score_mod score + X(q - kv, h) (cg_expr_distance_addend): X's node,
     * else -1, and the table of it for dtiles key tiles from one whose
     * index is a multiple of dtiles [rows + dtiles * bk * hpi] f32: entry
     * dd * hpi + i at distance pos(row 0) - (the last tile's last key) + dd
     * * dil, head (row 0's) + i, so that row r and key jj of the tile read
     * entry doff + r + (bk - 1 - jj) * hpi, a vector of rows at once, doff
     * (i64) = (tiles after this one in the table) * bk * hpi */
    int dist;
    bool dist_minus; /* score - X */
    int64_t dtiles;
    LLVMValueRef dtab, doff;
    LLVMValueRef kf, vf; /* f16, bf16, q8_0 cache: a tile's K [hd][bk], V [bk][hd] in f32 */
    /* the next tile's K and V (its first key's element 0), prefetched
     * during this tile's score passes (scores), or NULL */
    LLVMValueRef next_k, next_v;
    /* the rows' q or output rows [rows] (ptr), which are inside [rows]
     * (i32), 1 / l [rows]; where rows past the item store to [vd + 2] */
    LLVMValueRef rowp, rowok, inv, dummy;
    /* a dilated mask_mod (cg_expr_dilation): the item's rows are the
     * tokens s0, s0 + dil, .. and its keys kres + dil * j for the key
     * indices j its tiles run over (i64, set per item), the only keys the
     * mask may show those rows (kv = q + dshift, mod dil); dil 1: every
     * token and key, kres unused */
    int64_t dil, dshift;
    LLVMValueRef kres;
} flash;

/* The position of the item's key index j (dilated: kres + dil * j). */
static LLVMValueRef key_at(cg *c, const flash *f, LLVMValueRef j) {
    if (f->dil == 1)
        return j;
    return LLVMBuildAdd(c->b, f->kres, LLVMBuildMul(c->b, j, cg_i64(c, f->dil), ""), "key");
}

static LLVMValueRef at_f32(cg *c, LLVMValueRef base, LLVMValueRef i) {
    return cg_gep(c, c->f32, base, i);
}

/* Row vector v of the [.., rows] array a at row block `line`. */
static LLVMValueRef line_ptr(cg *c, const flash *f, LLVMValueRef a, LLVMValueRef line, int v) {
    return at_f32(c, a,
                  LLVMBuildAdd(c->b, LLVMBuildMul(c->b, line, cg_i64(c, f->rows), ""),
                               cg_i64(c, (int64_t)v * f->lanes), ""));
}

/* Vector v of the rows' positions or heads (i32), or ALiBi slopes, read where it
 * is used through a pointer the optimizer cannot follow: kept in
 * registers across the tile, rv of them took registers the score and
 * p.v loops need (test_spills). */
static LLVMValueRef row_i32(cg *c, const flash *f, LLVMValueRef a, int v) {
    LLVMValueRef p = cg_gep(c, c->i32, cg_opaque_ptr(c, a), cg_i64(c, (int64_t)v * f->lanes));
    LLVMValueRef x = LLVMBuildLoad2(c->b, LLVMVectorType(c->i32, (unsigned)f->lanes), p, "");
    LLVMSetAlignment(x, 4);
    return x;
}

static LLVMValueRef row_pos(cg *c, const flash *f, int v) {
    return row_i32(c, f, f->pos, v);
}

static LLVMValueRef row_tree_bits(cg *c, const flash *f, int v) {
    LLVMValueRef p = cg_gep(c, c->i64, cg_opaque_ptr(c, f->tb), cg_i64(c, (int64_t)v * f->lanes));
    LLVMValueRef x = LLVMBuildLoad2(c->b, LLVMVectorType(c->i64, (unsigned)f->lanes), p, "bits");
    LLVMSetAlignment(x, 8);
    return x;
}

static LLVMValueRef row_head(cg *c, const flash *f, int v) {
    return f->hv ? row_i32(c, f, f->hv, v) : NULL;
}

/* Vector v of the rows' row part i of the score_mod (at base: f->pre,
 * or an opaque copy of it). */
static LLVMValueRef row_pre_at(cg *c, const flash *f, int i, LLVMValueRef base, int v) {
    return at_f32(c, base, cg_i64(c, (int64_t)i * f->rows + (int64_t)v * f->lanes));
}

static LLVMValueRef row_slope(cg *c, const flash *f, int v) {
    return cg_vload(c, ATTN_DTYPE_F32,
                    at_f32(c, cg_opaque_ptr(c, f->sl), cg_i64(c, (int64_t)v * f->lanes)));
}

/* A head's K or V row of one key: its element 0 at p; with a q8_0 cache
 * also its first block's scale at d (cg_cache_scale), NULL otherwise;
 * or (f32 set) the row widened into the tile's scratch, element e at
 * p + e * stride. */
typedef struct kv_row {
    LLVMValueRef p, d;
    bool f32;
    int64_t stride;
    int half; /* pairs: 1 the low, 2 the high half of i32 pairs at p (else 0) */
} kv_row;

static kv_row kv_row_at(cg *c, const ir_node *kv, LLVMValueRef p) {
    const cg_view *v = &c->plan->view[kv->id];
    kv_row r = {p, NULL, false, 0, 0};
    if (v->dt == ATTN_DTYPE_Q8_0)
        r.d = cg_cache_scale(c, cg_cache_which(c, kv), v->buf, p);
    return r;
}

/* Element d (stride: the view's nb[0]) of the K or V row r as f32 (any
 * cache dtype; q8_0: q times the d of its block of 32, the next block's
 * d block_tokens further). */
static LLVMValueRef elem(cg *c, const ir_node *kv, kv_row r, LLVMValueRef d) {
    const cg_view *v = &c->plan->view[kv->id];
    if (r.half)
        return cg_bf16_half(
            c,
            LLVMBuildLoad2(c->b, c->i32,
                           cg_gep(c, c->i32, r.p, LLVMBuildMul(c->b, d, cg_i64(c, r.stride), "")),
                           ""),
            r.half == 2);
    if (r.f32)
        return LLVMBuildLoad2(
            c->b, c->f32, cg_gep(c, c->f32, r.p, LLVMBuildMul(c->b, d, cg_i64(c, r.stride), "")),
            "");
    int64_t stride;
    ATTNC_ASSERT(ir_dim_is_const(v->nb[0], &stride));
    LLVMValueRef i = LLVMBuildMul(c->b, d, cg_i64(c, stride), "");
    LLVMValueRef x =
        cg_load(c, v->dt, LLVMBuildInBoundsGEP2(c->b, cg_elem_type(c, v->dt), r.p, &i, 1, ""));
    if (r.d) {
        LLVMValueRef at = cg_cache_scale_step(c, d);
        x = LLVMBuildFMul(c->b, x, cg_load(c, ATTN_DTYPE_F16, cg_gep(c, c->f16, r.d, at)), "");
    }
    return x;
}

/* Element d of the K (key) or V row r, splat to every row of a vector. */
static LLVMValueRef bcast(cg *c, const ir_node *kv, kv_row r, LLVMValueRef d, bool key) {
    LLVMValueRef x = elem(c, kv, r, d);
    if (!r.f32) /* a widened tile is rounded */
        x = key ? cg_qk_operand(c, x) : cg_operand(c, x);
    return cg_splat(c, x);
}

/* Row r of an item: its head and token (valid when *ok). */
static void row_of(cg *c, const flash *f, LLVMValueRef kvh, LLVMValueRef chunk, LLVMValueRef s0,
                   LLVMValueRef r, LLVMValueRef *head, LLVMValueRef *tok, LLVMValueRef *ok) {
    LLVMValueRef hi = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, chunk, cg_i64(c, f->hpi), ""),
                                   LLVMBuildSRem(c->b, r, cg_i64(c, f->hpi), ""), "");
    *head = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, kvh, cg_i64(c, f->group), ""), hi, "head");
    *tok = LLVMBuildAdd(
        c->b, s0,
        LLVMBuildMul(c->b, LLVMBuildSDiv(c->b, r, cg_i64(c, f->hpi), ""), cg_i64(c, f->dil), ""),
        "tok");
    *ok = LLVMBuildAnd(
        c->b, LLVMBuildICmp(c->b, LLVMIntSLT, hi, cg_i64(c, f->group), ""),
        LLVMBuildAnd(c->b,
                     LLVMBuildICmp(c->b, LLVMIntSLT, r, cg_i64(c, f->hpi * (f->rows / f->hpi)), ""),
                     LLVMBuildICmp(c->b, LLVMIntSLT, *tok, c->S, ""), ""),
        "");
}

/* ot[d][row] += sum_j p[j][row] v[j][d] over the tile's keys (any
 * rescaling of ot was done before); `guarded`: a key of weight 0 adds
 * nothing even if its v is not finite (masked keys of a partial tile, as
 * the reference skips them). */
static void pv_pairs(cg *c, const flash *f);

static void pv_tile(cg *c, const flash *f, const kv_row *vrow, bool guarded) {
    if (f->pairs && !guarded) {
        pv_pairs(c, f);
        return;
    }
    /* guarded, each row vector's p and its mask are live too, and a sum
     * before its select: fewer dims at once where they do not fit (AVX2
     * spilled a third of its sums; AVX-512's masks are mask registers) */
    int dc = f->dc;
    while (guarded && dc > 1 && dc * f->rv + 2 * f->rv + 2 > c->target.regs)
        dc /= 2;
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, f->vd / dc), "dchunk");
    /* AVX-512 items of 4 row vectors (a prefix call's, compute bf16's):
     * LLVM's scheduler hoists the tile's p loads and keeps one vector on
     * the stack, with 4 x 4 or 4 x 2 sums alike: 1 spill and 1 reload
     * per 128 or 256 FMAs, in tiles a mask cuts (a prefix call: its last
     * tile, where the prefix is no multiple of 16 keys). test_spills
     * knows this loop by its name */
    if (guarded && f->rv >= 4)
        LLVMSetValueName2(LLVMBasicBlockAsValue(ld.body), "pv_edge_rows4", 13);
    LLVMValueRef d0 = LLVMBuildMul(c->b, ld.i, cg_i64(c, dc), "");
    /* p through a pointer made in each trip: else the bk x rv vectors of
     * p (the same in every trip) were hoisted out of the loop, spilled
     * and reloaded (with their masks, when guarded) */
    LLVMValueRef pb = cg_opaque_ptr(c, f->pairs ? f->pp : f->pb), acc[64];
    for (int dd = 0; dd < dc; dd++)
        for (int v = 0; v < f->rv; v++) {
            LLVMValueRef line = LLVMBuildAdd(c->b, d0, cg_i64(c, dd), "");
            acc[dd * f->rv + v] = cg_vload(c, ATTN_DTYPE_F32, line_ptr(c, f, f->ot, line, v));
        }
    for (int j = 0; j < f->bk; j++) {
        LLVMValueRef p[8], adds[8];
        for (int v = 0; v < f->rv; v++) {
            if (f->pairs) /* key j's half of the pairs of p (pp) */
                p[v] = cg_bf16_half(
                    c, LLVMBuildLoad2(c->b, c->vi, line_ptr(c, f, pb, cg_i64(c, j / 2), v), ""),
                    j % 2);
            else
                p[v] = cg_vload(c, ATTN_DTYPE_F32, line_ptr(c, f, pb, cg_i64(c, j), v));
            if (guarded) /* p != 0 (or NaN): the lanes that add */
                adds[v] = LLVMBuildFCmp(c->b, LLVMRealUNE, p[v], cg_vf32(c, 0), "");
        }
        for (int dd = 0; dd < dc; dd++) {
            LLVMValueRef vb =
                bcast(c, f->v, vrow[j], LLVMBuildAdd(c->b, d0, cg_i64(c, dd), ""), false);
            for (int v = 0; v < f->rv; v++) {
                LLVMValueRef *a = &acc[dd * f->rv + v], sum = cg_fma(c, p[v], vb, *a);
                *a = guarded ? LLVMBuildSelect(c->b, adds[v], sum, *a, "") : sum;
            }
        }
    }
    for (int dd = 0; dd < dc; dd++)
        for (int v = 0; v < f->rv; v++)
            LLVMBuildStore(c->b, acc[dd * f->rv + v],
                           line_ptr(c, f, f->ot, LLVMBuildAdd(c->b, d0, cg_i64(c, dd), ""), v));
    cg_for_end(c, &ld);
}

/* Into L2, in trip i of `trips` of score pass j0 / bks: the next tile's
 * K rows of the trip's d's (pass 0) and a trip's share of its V rows
 * (pass 1, or 0 when there is one). A head's V row of one key lies a
 * token row (every head's) from the next, which the hardware prefetchers
 * do not follow from one row to the next, and widen_tile and
 * widen_pairs read a whole tile at its start. llama3_8b prefill 2048
 * core, 2 threads (AMD EPYC Zen 4), medians: compute bf16, f32 cache
 * 141 -> 121 ms; f32 206 -> 198 and 231 -> 199. */
static void prefetch_next(cg *c, const flash *f, int j0, LLVMValueRef i, int64_t trips) {
    const cg_view *kv = &c->plan->view[f->k->id], *vv = &c->plan->view[f->v->id];
    int64_t es = cg_elem_bytes(kv->dt), drow, vrow, pass = j0 / f->bks, passes = f->bk / f->bks;
    if (!f->next_k || !ir_dim_is_const(kv->nb[0], &drow) || !ir_dim_is_const(vv->nb[2], &vrow))
        return;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    int64_t line = -1;
    if (pass == 0) { /* the d's of the trip: each row's bk keys */
        int64_t dpt = f->hd / trips;
        LLVMValueRef base = LLVMBuildMul(c->b, i, cg_i64(c, dpt * drow * es), "");
        for (int64_t t = 0; t < dpt; t++)
            for (int64_t b = 0; b < f->bk * f->dil * es; b += 64) { /* dilated: its span */
                int64_t off = t * drow * es + b;
                if (off / 64 == line) /* rows that share a line */
                    continue;
                line = off / 64;
                cg_prefetch(
                    c, cg_gep(c, i8, f->next_k, LLVMBuildAdd(c->b, base, cg_i64(c, off), "")), 2);
            }
    }
    int64_t per_key = trips / f->bk, row_bytes = f->vd * es;
    if (pass != (passes > 1) || per_key < 1 || trips % f->bk || row_bytes % per_key)
        return;
    /* key i / per_key, part i % per_key of its row */
    int64_t part = row_bytes / per_key;
    LLVMValueRef at = LLVMBuildAdd(
        c->b,
        LLVMBuildMul(c->b, LLVMBuildUDiv(c->b, i, cg_i64(c, per_key), ""),
                     cg_i64(c, vrow * f->dil * es), ""),
        LLVMBuildMul(c->b, LLVMBuildURem(c->b, i, cg_i64(c, per_key), ""), cg_i64(c, part), ""),
        "");
    for (int64_t b = 0; b < part; b += 64)
        cg_prefetch(c, cg_gep(c, i8, f->next_v, LLVMBuildAdd(c->b, at, cg_i64(c, b), "")), 2);
}

/* Scores of keys krow[0..bks) for all rows, summed over d in registers,
 * softcapped and, with ALiBi, biased (the keys are key0 + j0 + j), stored
 * to pb[j0 + j][row]. */
static void scores(cg *c, const flash *f, const kv_row *krow, int j0, LLVMValueRef key0) {
    int na = f->bks * f->rv;
    int64_t trips = f->pairs ? f->hd / 2 : f->hd;
    LLVMValueRef init[64], next[64], qv[8];
    for (int i = 0; i < na; i++)
        init[i] = cg_vf32(c, 0);
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "qk", c->vf, na);
    prefetch_next(c, f, j0, l.i, trips);
    for (int v = 0; v < f->rv; v++)
        qv[v] = f->pairs ? LLVMBuildLoad2(c->b, c->vi, line_ptr(c, f, f->qt, l.i, v), "")
                         : cg_vload(c, ATTN_DTYPE_F32, line_ptr(c, f, f->qt, l.i, v));
    for (int j = 0; j < f->bks; j++) {
        if (f->pairs) { /* the pair (d, d + 1) of l.i of key j, times each row's */
            LLVMValueRef at = LLVMBuildMul(c->b, l.i, cg_i64(c, krow[j].stride), "");
            LLVMValueRef kb =
                cg_splat(c, LLVMBuildLoad2(c->b, c->i32, cg_gep(c, c->i32, krow[j].p, at), ""));
            for (int v = 0; v < f->rv; v++)
                next[j * f->rv + v] = cg_dot_pairs(c, l.acc[j * f->rv + v], kb, qv[v]);
            continue;
        }
        LLVMValueRef kb = bcast(c, f->k, krow[j], l.i, true);
        for (int v = 0; v < f->rv; v++)
            next[j * f->rv + v] = cg_fma(c, kb, qv[v], l.acc[j * f->rv + v]);
    }
    cg_acc_loop_end(c, &l, cg_i64(c, trips), init, next);
    for (int i = 0; i < na; i++)
        next[i] = cg_scale_sum(c, f->n, next[i]);
    for (int j = 0; j < f->bks; j++) {
        LLVMValueRef keyv = NULL;
        if (f->n->alibi || f->n->score_mod)
            keyv = cg_splat(
                c,
                LLVMBuildTrunc(c->b, key_at(c, f, LLVMBuildAdd(c->b, key0, cg_i64(c, j0 + j), "")),
                               c->i32, ""));
        for (int v = 0; v < f->rv; v++) {
            LLVMValueRef x = next[j * f->rv + v];
            if (f->dist >= 0) { /* score + X: X from the tile's table */
                int64_t at = (int64_t)v * f->lanes + (f->bk - 1 - (j0 + j)) * f->hpi;
                LLVMValueRef t = cg_vload(c, ATTN_DTYPE_F32,
                                          at_f32(c, cg_opaque_ptr(c, f->dtab),
                                                 LLVMBuildAdd(c->b, f->doff, cg_i64(c, at), "")));
                x = f->dist_minus ? LLVMBuildFSub(c->b, x, t, "") : LLVMBuildFAdd(c->b, x, t, "");
            } else if (f->n->score_mod) {
                LLVMValueRef pre[ATTN_EXPR_MAX_NODES] = {NULL};
                for (int i = 0; i < f->n_pre; i++)
                    pre[f->pre_node[i]] = cg_vload(
                        c, ATTN_DTYPE_F32, row_pre_at(c, f, i, cg_opaque_ptr(c, f->pre), v));
                x = cg_score_mod(c, f->n, x, keyv, row_pos(c, f, v), row_head(c, f, v),
                                 f->n_pre ? pre : NULL);
            }
            x = cg_softcap(c, f->n, x);
            if (f->n->alibi)
                x = cg_alibi_add(c, x, row_slope(c, f, v), keyv, row_pos(c, f, v));
            cg_vstore(c, ATTN_DTYPE_F32, x, line_ptr(c, f, f->pb, cg_i64(c, j0 + j), v));
        }
    }
}

/* -inf for the (key, row) pairs of the tile that are hidden: keys past
 * jend, and with a causal mask keys after the row (or before its window). */
static void mask_tile(cg *c, const flash *f, LLVMValueRef j0, LLVMValueRef jend) {
    LLVMValueRef posv[8];
    for (int v = 0; v < f->rv; v++)
        posv[v] = row_pos(c, f, v);
    for (int j = 0; j < f->bk; j++) {
        LLVMValueRef key = LLVMBuildAdd(c->b, j0, cg_i64(c, j), "");
        LLVMValueRef beyond = cg_splat(c, LLVMBuildICmp(c->b, LLVMIntSGE, key, jend, ""));
        LLVMValueRef keyv = cg_splat(c, LLVMBuildTrunc(c->b, key_at(c, f, key), c->i32, ""));
        for (int v = 0; v < f->rv; v++) {
            LLVMValueRef bits = f->tb ? row_tree_bits(c, f, v) : NULL;
            LLVMValueRef hidden =
                cg_keys_hidden(c, f->n, keyv, posv[v], row_head(c, f, v), bits, beyond);
            LLVMValueRef at = line_ptr(c, f, f->pb, cg_i64(c, j), v);
            cg_vstore(c, ATTN_DTYPE_F32,
                      LLVMBuildSelect(c->b, hidden, cg_vf32(c, -INFINITY),
                                      cg_vload(c, ATTN_DTYPE_F32, at), ""),
                      at);
        }
    }
}

/* Dilated keys (f->dil) a K vector path takes: runs of this many keys
 * that one block holds at stride dil (bt / dil of them, at most lanes,
 * dividing lanes), for dil up to DIL_VECTOR_MAX dividing bt; else 0 (key
 * by key). */
enum { DIL_VECTOR_MAX = 4 };

static int dilated_run(const flash *f, int64_t bt) {
    if (f->dil == 1 || f->dil > DIL_VECTOR_MAX || bt % f->dil)
        return 0;
    int64_t g = bt / f->dil < f->lanes ? bt / f->dil : f->lanes;
    return g >= 2 && f->lanes % g == 0 ? (int)g : 0;
}

/* Branches to *vec where each run of the tile's keys (run of them from a
 * multiple of run; run = lanes, or dilated_run's) lies in one block at
 * stride step (1, or dil; the last key repeated past jend breaks it), so
 * that those keys of one d are a vector or a shuffle of one, else to
 * *one; both end at *done. */
static void branch_on_together(cg *c, const flash *f, const kv_row *krow, attn_dtype dt, int run,
                               int64_t step, LLVMBasicBlockRef *vec, LLVMBasicBlockRef *one,
                               LLVMBasicBlockRef *done) {
    LLVMValueRef together = NULL;
    for (int g = 0; g < f->bk / run; g++) {
        const kv_row *k0 = krow + g * run;
        LLVMValueRef span = LLVMBuildSub(c->b, LLVMBuildPtrToInt(c->b, k0[run - 1].p, c->i64, ""),
                                         LLVMBuildPtrToInt(c->b, k0[0].p, c->i64, ""), "");
        LLVMValueRef t = LLVMBuildICmp(c->b, LLVMIntEQ, span,
                                       cg_i64(c, (run - 1) * step * cg_elem_bytes(dt)), "");
        together = g ? LLVMBuildAnd(c->b, together, t, "") : t;
    }
    *vec = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "k_vectors");
    *one = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "k_keys");
    *done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "k_widened");
    LLVMBuildCondBr(c->b, together, *vec, *one);
}

/* The lanes-element vector of type et from the run of keys at k0 (run
 * of them at stride dil from p + at, their class r: p - r is their
 * block's slot dil * m of a multiple of dil), lanes / run runs; r -1:
 * lanes keys side by side from p + at. */
static LLVMValueRef k_lanes(cg *c, const flash *f, const kv_row *k0, bool scale, attn_dtype dt,
                            LLVMValueRef at, int run, int r) {
    int L = f->lanes;
    LLVMTypeRef et = cg_elem_type(c, dt);
    if (r < 0) {
        LLVMValueRef v = LLVMBuildLoad2(c->b, LLVMVectorType(et, (unsigned)L),
                                        cg_gep(c, et, scale ? k0->d : k0->p, at), "");
        LLVMSetAlignment(v, cg_elem_bytes(dt));
        return v;
    }
    LLVMValueRef part[64], pick[64];
    int n = L / run;
    for (int i = 0; i < run; i++)
        pick[i] = LLVMConstInt(c->i32, (unsigned long long)(r + f->dil * i), false);
    for (int q = 0; q < n; q++) {
        const kv_row *k = k0 + q * run;
        LLVMValueRef from =
            cg_gep(c, et, scale ? k->d : k->p, LLVMBuildSub(c->b, at, cg_i64(c, r), ""));
        LLVMValueRef raw =
            LLVMBuildLoad2(c->b, LLVMVectorType(et, (unsigned)(run * f->dil)), from, "");
        LLVMSetAlignment(raw, cg_elem_bytes(dt));
        part[q] = LLVMBuildShuffleVector(c->b, raw, LLVMGetPoison(LLVMTypeOf(raw)),
                                         LLVMConstVector(pick, (unsigned)run), "");
    }
    for (int w = run; n > 1; w *= 2, n /= 2) /* concatenate pairs of parts */
        for (int q = 0; q < n / 2; q++) {
            LLVMValueRef cat[64];
            for (int i = 0; i < 2 * w; i++)
                cat[i] = LLVMConstInt(c->i32, (unsigned long long)i, false);
            part[q] = LLVMBuildShuffleVector(c->b, part[2 * q], part[2 * q + 1],
                                             LLVMConstVector(cat, (unsigned)(2 * w)), "");
        }
    return part[0];
}

/* q8_0: the d of d's block of 32 of the keys k_lanes takes from k0, as
 * f32 (the keys' elements of d times it: d * q, exact in f32). */
static LLVMValueRef k_scales(cg *c, const flash *f, const kv_row *k0, LLVMValueRef d, int run,
                             int r) {
    LLVMValueRef at = cg_cache_scale_step(c, d);
    return cg_vwiden(c, ATTN_DTYPE_F16, k_lanes(c, f, k0, true, ATTN_DTYPE_F16, at, run, r));
}

/* K of the tile into kf [hd][bk] a vector of keys at a time (k_lanes:
 * side by side, r -1, or dilated runs of class r). */
static void widen_k_vectors(cg *c, const flash *f, const kv_row *krow, int r) {
    int L = f->lanes;
    int64_t bt = ir_cfg_kv_block_tokens(c->g);
    attn_dtype dt = c->plan->view[f->k->id].dt;
    int run = r < 0 ? L : dilated_run(f, bt);
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, f->hd), "d");
    for (int jv = 0; jv < f->bk / L; jv++) {
        const kv_row *k0 = krow + jv * L;
        LLVMValueRef x = cg_vwiden(
            c, dt,
            k_lanes(c, f, k0, false, dt, LLVMBuildMul(c->b, ld.i, cg_i64(c, bt), ""), run, r));
        if (k0->d)
            x = LLVMBuildFMul(c->b, x, k_scales(c, f, k0, ld.i, run, r), "");
        cg_vstore(c, ATTN_DTYPE_F32, cg_qk_operand(c, x),
                  cg_gep(c, c->f32, f->kf,
                         LLVMBuildAdd(c->b, LLVMBuildMul(c->b, ld.i, cg_i64(c, f->bk), ""),
                                      cg_i64(c, jv * L), "")));
    }
    cg_for_end(c, &ld);
}

/* Branches to *one unless the tile's keys come in vectors (side by side,
 * or dilated runs), which widen(c, f, krow, r) takes: r -1, or a loop
 * per key class r (its shuffles constants); they end at *done. */
static void k_vectors(cg *c, const flash *f, const kv_row *krow,
                      void (*widen)(cg *, const flash *, const kv_row *, int),
                      LLVMBasicBlockRef *one, LLVMBasicBlockRef *done) {
    int64_t bt = ir_cfg_kv_block_tokens(c->g);
    int run = dilated_run(f, bt);
    LLVMBasicBlockRef vec;
    branch_on_together(c, f, krow, c->plan->view[f->k->id].dt, run ? run : f->lanes,
                       run ? f->dil : 1, &vec, one, done);
    LLVMPositionBuilderAtEnd(c->b, vec);
    if (!run) {
        widen(c, f, krow, -1);
        LLVMBuildBr(c->b, *done);
        return;
    }
    LLVMValueRef sw = LLVMBuildSwitch(c->b, f->kres, *one, (unsigned)f->dil);
    for (int r = 0; r < f->dil; r++) {
        LLVMBasicBlockRef at = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "k_class");
        LLVMAddCase(sw, cg_i64(c, r), at);
        LLVMPositionBuilderAtEnd(c->b, at);
        widen(c, f, krow, r);
        LLVMBuildBr(c->b, *done);
    }
}

/* The vector of V row r's elements from e on (lanes of them, inside one
 * block of 32: lanes divide 32) as f32 (q8_0: d * q, exact). */
static LLVMValueRef v_vector(cg *c, const flash *f, kv_row r, LLVMValueRef e) {
    attn_dtype dt = c->plan->view[f->v->id].dt;
    LLVMValueRef x = cg_vload(c, dt, cg_gep(c, cg_elem_type(c, dt), r.p, e));
    if (!r.d)
        return x;
    LLVMValueRef at = cg_cache_scale_step(c, e);
    return LLVMBuildFMul(c->b, x,
                         cg_splat(c, cg_load(c, ATTN_DTYPE_F16, cg_gep(c, c->f16, r.d, at))), "");
}

/* A tile of bk keys of an f16, bf16 or q8_0 cache as f32 (exact; q8_0:
 * d * q): K into kf [hd][bk], the keys of one d as a vector (q8_0: and
 * their d) when the tile's keys are side by side in one block, else key
 * by key; V into vf [bk][hd], a key's row a vector at a time. The rows
 * then broadcast f32 from the stack: each element is widened once per
 * tile instead of once per use. Compute bf16 (any cache): rounded to
 * bf16 here, once. */
static void widen_tile(cg *c, const flash *f, kv_row *krow, kv_row *vrow) {
    int L = f->lanes;
    LLVMBasicBlockRef one, done;
    k_vectors(c, f, krow, widen_k_vectors, &one, &done);
    LLVMPositionBuilderAtEnd(c->b, one);
    for (int j = 0; j < f->bk; j++) {
        cg_loop lk = cg_for(c, cg_i64(c, 0), cg_i64(c, f->hd), "d");
        LLVMBuildStore(c->b, cg_qk_operand(c, elem(c, f->k, krow[j], lk.i)),
                       cg_gep(c, c->f32, f->kf,
                              LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lk.i, cg_i64(c, f->bk), ""),
                                           cg_i64(c, j), "")));
        cg_for_end(c, &lk);
    }
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, done);
    if (!f->vf) { /* the values are K's first dims (MLA's latent): read them from kf */
        for (int j = 0; j < f->bk; j++) {
            krow[j] = (kv_row){cg_gep(c, c->f32, f->kf, cg_i64(c, j)), NULL, true, f->bk, 0};
            vrow[j] = krow[j];
        }
        return;
    }
    /* V: a key's row is contiguous; lanes divide 32 */
    for (int j = 0; j < f->bk; j++) {
        cg_loop lv = cg_for(c, cg_i64(c, 0), cg_i64(c, f->hd / L), "dv");
        LLVMValueRef e = LLVMBuildMul(c->b, lv.i, cg_i64(c, L), "");
        LLVMValueRef x = v_vector(c, f, vrow[j], e);
        cg_vstore(c, ATTN_DTYPE_F32, cg_operand(c, x),
                  cg_gep(c, c->f32, f->vf, LLVMBuildAdd(c->b, cg_i64(c, j * f->hd), e, "")));
        cg_for_end(c, &lv);
    }
    for (int j = 0; j < f->bk; j++) {
        krow[j] = (kv_row){cg_gep(c, c->f32, f->kf, cg_i64(c, j)), NULL, true, f->bk, 0};
        vrow[j] = (kv_row){cg_gep(c, c->f32, f->vf, cg_i64(c, j * f->hd)), NULL, true, 1, 0};
    }
}

/* Pair (d, d + 1) of the tile's keys into kf [hd/2][bk], a vector of keys
 * at a time (k_lanes with r); f->vt and d < vd: the same vectors' pairs
 * of keys (2i, 2i + 1) into vf [vd][bk/2], d's and d + 1's. */
static void k_pair_row(cg *c, const flash *f, const kv_row *krow, int r, LLVMValueRef dp,
                       bool with_v) {
    int L = f->lanes;
    int64_t bt = ir_cfg_kv_block_tokens(c->g);
    attn_dtype dt = c->plan->view[f->k->id].dt;
    int run = r < 0 ? L : dilated_run(f, bt);
    LLVMValueRef d0 = LLVMBuildMul(c->b, dp, cg_i64(c, 2 * bt), "");
    /* q8_0: d * q in f32 (d and d + 1 share their block), rounded as an
     * f32 cache's pairs */
    attn_dtype pdt = krow->d ? ATTN_DTYPE_F32 : dt;
    for (int jv = 0; jv < f->bk / L; jv++) {
        LLVMValueRef x[2], scale = NULL;
        for (int h = 0; h < 2; h++) {
            x[h] = cg_vwiden(c, dt,
                             k_lanes(c, f, krow + jv * L, false, dt,
                                     LLVMBuildAdd(c->b, d0, cg_i64(c, h * bt), ""), run, r));
            if (krow->d) { /* one load of the keys' d for both */
                if (!h)
                    scale = k_scales(c, f, krow + jv * L, LLVMBuildMul(c->b, dp, cg_i64(c, 2), ""),
                                     run, r);
                x[h] = LLVMBuildFMul(c->b, x[h], scale, "");
            }
        }
        LLVMValueRef to =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, dp, cg_i64(c, f->bk), ""), cg_i64(c, jv * L), "");
        LLVMBuildStore(c->b, cg_cache_pair(c, pdt, x[0], x[1]), cg_gep(c, c->i32, f->kf, to));
        if (!with_v)
            continue;
        /* even keys of d, then of d + 1, and the odd ones: L / 2 pairs each */
        LLVMValueRef ev[64], od[64];
        for (int i = 0; i < L; i++) {
            ev[i] = LLVMConstInt(c->i32, (unsigned long long)(i / (L / 2) * L + 2 * (i % (L / 2))),
                                 false);
            od[i] = LLVMConstInt(
                c->i32, (unsigned long long)(i / (L / 2) * L + 2 * (i % (L / 2)) + 1), false);
        }
        LLVMValueRef vp = cg_cache_pair(
            c, pdt, LLVMBuildShuffleVector(c->b, x[0], x[1], LLVMConstVector(ev, (unsigned)L), ""),
            LLVMBuildShuffleVector(c->b, x[0], x[1], LLVMConstVector(od, (unsigned)L), ""));
        for (int h = 0; h < 2; h++) {
            LLVMValueRef half[32];
            for (int i = 0; i < L / 2; i++)
                half[i] = LLVMConstInt(c->i32, (unsigned long long)(h * L / 2 + i), false);
            LLVMValueRef part = LLVMBuildShuffleVector(c->b, vp, LLVMGetPoison(LLVMTypeOf(vp)),
                                                       LLVMConstVector(half, (unsigned)L / 2), "");
            LLVMValueRef at = LLVMBuildAdd(
                c->b,
                LLVMBuildMul(
                    c->b,
                    LLVMBuildAdd(c->b, LLVMBuildMul(c->b, dp, cg_i64(c, 2), ""), cg_i64(c, h), ""),
                    cg_i64(c, f->bk / 2), ""),
                cg_i64(c, jv * L / 2), "");
            LLVMSetAlignment(LLVMBuildStore(c->b, part, cg_gep(c, c->i32, f->vf, at)), 4);
        }
    }
}

/* K of the tile into kf [hd/2][bk] as pairs (d, d + 1) (and f->vt: V's
 * pairs of keys into vf), a vector of keys at a time. */
static void widen_k_pairs(cg *c, const flash *f, const kv_row *krow, int r) {
    int64_t nv = f->vt ? f->vd / 2 : 0; /* pairs of d's with V's too */
    if (nv) {
        cg_loop lv = cg_for(c, cg_i64(c, 0), cg_i64(c, nv), "dvpair");
        k_pair_row(c, f, krow, r, lv.i, true);
        cg_for_end(c, &lv);
    }
    cg_loop ld = cg_for(c, cg_i64(c, nv), cg_i64(c, f->hd / 2), "dpair");
    k_pair_row(c, f, krow, r, ld.i, false);
    cg_for_end(c, &ld);
}

/* widen_tile for pairs (f->pairs): K into kf [hd/2][bk] and V into vf
 * [bk/2][vd] (f->vt: [vd][bk/2]), i32 pairs of bf16, rounded once. */
static void widen_pairs(cg *c, const flash *f, kv_row *krow, kv_row *vrow) {
    int L = f->lanes;
    attn_dtype dt = c->plan->view[f->k->id].dt;
    LLVMBasicBlockRef one, done;
    k_vectors(c, f, krow, widen_k_pairs, &one, &done);
    LLVMPositionBuilderAtEnd(c->b, one);
    for (int j = 0; j < f->bk; j++) {
        cg_loop lk = cg_for(c, cg_i64(c, 0), cg_i64(c, f->hd / 2), "dpair");
        LLVMValueRef d = LLVMBuildMul(c->b, lk.i, cg_i64(c, 2), "");
        LLVMValueRef pair =
            cg_bf16_pair(c, elem(c, f->k, krow[j], d),
                         elem(c, f->k, krow[j], LLVMBuildAdd(c->b, d, cg_i64(c, 1), "")));
        LLVMValueRef to =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lk.i, cg_i64(c, f->bk), ""), cg_i64(c, j), "");
        LLVMBuildStore(c->b, pair, cg_gep(c, c->i32, f->kf, to));
        cg_for_end(c, &lk);
    }
    for (int jp = 0; f->vt && jp < f->bk / 2; jp++) { /* V's pairs of keys, [vd][bk/2] */
        cg_loop lv = cg_for(c, cg_i64(c, 0), cg_i64(c, f->vd), "dv");
        LLVMValueRef pair = cg_bf16_pair(c, elem(c, f->v, vrow[2 * jp], lv.i),
                                         elem(c, f->v, vrow[2 * jp + 1], lv.i));
        LLVMValueRef to = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lv.i, cg_i64(c, f->bk / 2), ""),
                                       cg_i64(c, jp), "");
        LLVMBuildStore(c->b, pair, cg_gep(c, c->i32, f->vf, to));
        cg_for_end(c, &lv);
    }
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, done);
    /* V: keys (2i, 2i + 1), a vector of d's at a time (their rows are
     * contiguous) */
    for (int jp = 0; !f->vt && jp < f->bk / 2; jp++) {
        cg_loop lv = cg_for(c, cg_i64(c, 0), cg_i64(c, f->vd / L), "dv");
        LLVMValueRef e = LLVMBuildMul(c->b, lv.i, cg_i64(c, L), "");
        LLVMValueRef x0 = v_vector(c, f, vrow[2 * jp], e);
        LLVMValueRef x1 = v_vector(c, f, vrow[2 * jp + 1], e);
        LLVMBuildStore(c->b, cg_cache_pair(c, vrow[0].d ? ATTN_DTYPE_F32 : dt, x0, x1),
                       cg_gep(c, c->i32, f->vf, LLVMBuildAdd(c->b, cg_i64(c, jp * f->vd), e, "")));
        cg_for_end(c, &lv);
    }
    for (int j = 0; j < f->bk; j++) {
        krow[j] = (kv_row){cg_gep(c, c->i32, f->kf, cg_i64(c, j)), NULL, true, f->bk, 0};
        vrow[j] = f->vt ? (kv_row){cg_gep(c, c->i32, f->vf, cg_i64(c, j / 2)), NULL, true,
                                   f->bk / 2, j % 2 ? 2 : 1}
                        : (kv_row){cg_gep(c, c->i32, f->vf, cg_i64(c, j / 2 * f->vd)), NULL, true,
                                   1, j % 2 ? 2 : 1};
    }
}

/* pv_tile of a full tile with pairs: ot[d][row] += p[j][row] v[j][d] over
 * the tile's keys two at a time: the rows' p of keys (j, j + 1) (pp,
 * rounded into pairs when formed) times the broadcast pair of their v[d]. */
static void pv_pairs(cg *c, const flash *f) {
    int dc = f->dc;
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, f->vd / dc), "dchunk");
    LLVMValueRef d0 = LLVMBuildMul(c->b, ld.i, cg_i64(c, dc), "");
    LLVMValueRef pb = cg_opaque_ptr(c, f->pp), acc[64];
    for (int dd = 0; dd < dc; dd++)
        for (int v = 0; v < f->rv; v++) {
            LLVMValueRef line = LLVMBuildAdd(c->b, d0, cg_i64(c, dd), "");
            acc[dd * f->rv + v] = cg_vload(c, ATTN_DTYPE_F32, line_ptr(c, f, f->ot, line, v));
        }
    for (int jp = 0; jp < f->bk / 2; jp++) {
        LLVMValueRef p[8];
        for (int v = 0; v < f->rv; v++)
            p[v] = LLVMBuildLoad2(c->b, c->vi, line_ptr(c, f, pb, cg_i64(c, jp), v), "");
        for (int dd = 0; dd < dc; dd++) {
            LLVMValueRef d = LLVMBuildAdd(c->b, d0, cg_i64(c, dd), "");
            LLVMValueRef at =
                f->vt ? LLVMBuildAdd(c->b, LLVMBuildMul(c->b, d, cg_i64(c, f->bk / 2), ""),
                                     cg_i64(c, jp), "")
                      : LLVMBuildAdd(c->b, cg_i64(c, jp * f->vd), d, "");
            LLVMValueRef vb =
                cg_splat(c, LLVMBuildLoad2(c->b, c->i32, cg_gep(c, c->i32, f->vf, at), ""));
            for (int v = 0; v < f->rv; v++)
                acc[dd * f->rv + v] = cg_dot_pairs(c, acc[dd * f->rv + v], vb, p[v]);
        }
    }
    for (int dd = 0; dd < dc; dd++)
        for (int v = 0; v < f->rv; v++)
            LLVMBuildStore(c->b, acc[dd * f->rv + v],
                           line_ptr(c, f, f->ot, LLVMBuildAdd(c->b, d0, cg_i64(c, dd), ""), v));
    cg_for_end(c, &ld);
}

/* AMX (compute bf16 where the target has AMX tiles: f->amx). The item's
 * arrays are row-major, so that both products take as their second
 * operand the tile widen_pairs makes: S[row][key] = Q[row][d] K[key][d]
 * (kf: pairs (d, d + 1) of each key) and O[row][d] += P[row][key]
 * V[key][d] (vf: pairs of keys (j, j + 1) of each d). qt holds Q as bf16
 * [rows][hd], pb S [rows][bk] (f32), pp P [rows][bk] (bf16), ot O
 * [rows][vd]; m is per row, l a vector per row (lv, summed in item_out).
 * The softmax runs along each row's keys, bk / 16 vectors of them (P's A
 * tiles: rows of 32 keys).
 * Turning the scores around instead (S^T = K Q^T, the other kernels'
 * [key][row]) would transpose K and V for every tile. */
enum { AMX_ROWS = 16 };

/* Stores 32 bf16 (cg_bf16_words) at byte offset `at` of base. */
static void store_bf16x32(cg *c, LLVMValueRef v, LLVMValueRef base, LLVMValueRef at) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    LLVMSetAlignment(LLVMBuildStore(c->b, v, cg_gep(c, i8, base, at)), 2);
}

/* A tile at byte offset `at` of base, rows `stride` bytes apart. */
static LLVMValueRef tile_at(cg *c, LLVMValueRef base, int64_t at, int64_t stride) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    return cg_tile_load(c, cg_gep(c, i8, base, cg_i64(c, at)), cg_i64(c, stride));
}

/* Row r's query (q at p, dtype dt) into qt as bf16, 0 where !ok. */
static void amx_query_row(cg *c, const flash *f, LLVMValueRef r, LLVMValueRef p, attn_dtype dt,
                          LLVMValueRef ok) {
    LLVMTypeRef et = cg_elem_type(c, dt);
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, f->hd / 32), "dq");
    LLVMValueRef d0 = LLVMBuildMul(c->b, ld.i, cg_i64(c, 32), "");
    LLVMValueRef x[2];
    for (int h = 0; h < 2; h++) {
        x[h] = cg_vload(c, dt, cg_gep(c, et, p, LLVMBuildAdd(c->b, d0, cg_i64(c, 16 * h), "")));
        x[h] = LLVMBuildSelect(c->b, ok, x[h], cg_vf32(c, 0), "");
    }
    LLVMValueRef at =
        LLVMBuildMul(c->b, LLVMBuildAdd(c->b, LLVMBuildMul(c->b, r, cg_i64(c, f->hd), ""), d0, ""),
                     cg_i64(c, 2), "");
    store_bf16x32(c, cg_bf16_words(c, x[0], x[1]), f->qt, at);
    cg_for_end(c, &ld);
}

/* S = Q K over the tile: rv tiles of 16 rows x 16 keys for each 16
 * keys, summed over the hd / 32 tiles of d; AMX_SUMS row tiles at a time
 * (their sums, a tile of K and one of Q: the 8 tile registers). */
enum { AMX_SUMS = 6 };
static void amx_scores(cg *c, const flash *f) {
    int64_t qstride = f->hd * 2, kstride = f->bk * 4;
    for (int r0 = 0; r0 < f->rv; r0 += AMX_SUMS) {
        int nr = f->rv - r0 < AMX_SUMS ? f->rv - r0 : AMX_SUMS;
        for (int kt = 0; kt < f->bk / 16; kt++) {
            LLVMValueRef acc[AMX_SUMS];
            for (int rt = 0; rt < nr; rt++)
                acc[rt] = cg_tile_zero(c);
            for (int64_t dk = 0; dk < f->hd / 32; dk++) {
                LLVMValueRef kb = tile_at(c, f->kf, (dk * 16 * f->bk + kt * 16) * 4, kstride);
                for (int rt = 0; rt < nr; rt++) {
                    int64_t row = (int64_t)(r0 + rt) * AMX_ROWS;
                    LLVMValueRef qa = tile_at(c, f->qt, (row * f->hd + dk * 32) * 2, qstride);
                    acc[rt] = cg_tile_dp_bf16(c, acc[rt], qa, kb);
                }
            }
            LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
            for (int rt = 0; rt < nr; rt++) {
                int64_t row = (int64_t)(r0 + rt) * AMX_ROWS;
                cg_tile_store(c, cg_gep(c, i8, f->pb, cg_i64(c, (row * f->bk + kt * 16) * 4)),
                              cg_i64(c, kstride), acc[rt]);
            }
        }
    }
}

/* O += P V: for each 16 d's, rv tiles of 16 rows, bk / 32 tiles of 32
 * keys each (their V tiles loaded once for the rv rows' tiles). */
static void amx_pv(cg *c, const flash *f) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    int64_t ostride = f->vd * 4, ng = f->bk / 32;
    for (int64_t dt = 0; dt < f->vd / 16; dt++) {
        LLVMValueRef vb[4];
        for (int64_t g = 0; g < ng; g++) /* keys 32g..: pair rows 16g.. */
            vb[g] = tile_at(c, f->vf, (g * 16 * f->hd + dt * 16) * 4, f->hd * 4);
        for (int rt = 0; rt < f->rv; rt++) {
            int64_t at = ((int64_t)rt * AMX_ROWS * f->vd + dt * 16) * 4;
            LLVMValueRef o = tile_at(c, f->ot, at, ostride);
            for (int64_t g = 0; g < ng; g++) {
                LLVMValueRef pa =
                    tile_at(c, f->pp, ((int64_t)rt * AMX_ROWS * f->bk + g * 32) * 2, f->bk * 2);
                o = cg_tile_dp_bf16(c, o, pa, vb[g]);
            }
            cg_tile_store(c, cg_gep(c, i8, f->ot, cg_i64(c, at)), cg_i64(c, ostride), o);
        }
    }
}

static LLVMValueRef row_scalar(cg *c, LLVMTypeRef t, LLVMValueRef a, LLVMValueRef r) {
    return LLVMBuildLoad2(c->b, t, cg_gep(c, t, cg_opaque_ptr(c, a), r), "");
}

/* The tile's softmax along each row r: its scores (pb) through the
 * scale, score_mod, softcap, ALiBi and (`masked`) the mask, the running
 * max and sum as in key_tile (the max moves only when a score passes it,
 * then to the tile's max + FLASH_SLACK, rescaling l and the row of O),
 * and p = e^(s - m) rounded to bf16 into pp. Whether a score passes m is
 * one compare of the row's vectors: the tile's max (a reduction across
 * the lanes) is needed only when one does, and the sum l stays a vector
 * (lv), reduced once in item_out. */
static void amx_softmax(cg *c, const flash *f, LLVMValueRef j0, LLVMValueRef jend, bool masked) {
    const ir_node *n = f->n;
    int nv = f->bk / f->lanes;
    cg_loop lr = cg_for(c, cg_i64(c, 0), cg_i64(c, f->rows), masked ? "amx_row_cut" : "amx_row");
    LLVMValueRef r = lr.i;
    LLVMValueRef pos = cg_splat(c, row_scalar(c, c->i32, f->pos, r));
    LLVMValueRef head = f->hv ? cg_splat(c, row_scalar(c, c->i32, f->hv, r)) : NULL;
    LLVMValueRef pre[ATTN_EXPR_MAX_NODES] = {NULL};
    for (int i = 0; i < f->n_pre; i++)
        pre[f->pre_node[i]] =
            cg_splat(c, row_scalar(c, c->f32, f->pre,
                                   LLVMBuildAdd(c->b, r, cg_i64(c, (int64_t)i * f->rows), "")));
    LLVMValueRef key0 =
        LLVMBuildAdd(c->b, cg_splat(c, LLVMBuildTrunc(c->b, j0, c->i32, "")), cg_lane_ids(c), "");
    LLVMValueRef s[8], top = cg_vf32(c, -INFINITY);
    for (int k = 0; k < nv; k++) {
        LLVMValueRef idx = LLVMBuildAdd(
            c->b, key0,
            cg_splat(c, LLVMConstInt(c->i32, (unsigned long long)(k * f->lanes), false)), "");
        LLVMValueRef keys = idx; /* dilated: kres + dil * idx */
        if (f->dil > 1)
            keys = LLVMBuildAdd(
                c->b, cg_splat(c, LLVMBuildTrunc(c->b, f->kres, c->i32, "")),
                LLVMBuildMul(c->b, idx,
                             cg_splat(c, LLVMConstInt(c->i32, (unsigned long long)f->dil, false)),
                             ""),
                "");
        LLVMValueRef at = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, r, cg_i64(c, f->bk), ""),
                                       cg_i64(c, (int64_t)k * f->lanes), "");
        LLVMValueRef x = cg_scale_sum(c, n, cg_vload(c, ATTN_DTYPE_F32, at_f32(c, f->pb, at)));
        if (n->score_mod)
            x = cg_score_mod(c, n, x, keys, pos, head, f->n_pre ? pre : NULL);
        x = cg_softcap(c, n, x);
        if (n->alibi)
            x = cg_alibi_add(c, x, cg_splat(c, row_scalar(c, c->f32, f->sl, r)), keys, pos);
        if (masked) {
            LLVMValueRef bits = f->tb ? cg_splat(c, row_scalar(c, c->i64, f->tb, r)) : NULL;
            LLVMValueRef beyond = LLVMBuildICmp(
                c->b, LLVMIntSGE, idx, cg_splat(c, LLVMBuildTrunc(c->b, jend, c->i32, "")), "");
            LLVMValueRef hidden = cg_keys_hidden(c, n, keys, pos, head, bits, beyond);
            x = LLVMBuildSelect(c->b, hidden, cg_vf32(c, -INFINITY), x, "");
        }
        s[k] = x;
        top = cg_intrinsic(c, "llvm.maxnum", c->vf, top, x);
    }
    LLVMValueRef mp = at_f32(c, f->m, r);
    LLVMValueRef lp = at_f32(c, f->lv, LLVMBuildMul(c->b, r, cg_i64(c, f->lanes), ""));
    LLVMValueRef mold = LLVMBuildLoad2(c->b, c->f32, mp, "mold");
    LLVMTypeRef mt = LLVMVectorType(LLVMInt1TypeInContext(c->llctx), (unsigned)f->lanes);
    LLVMValueRef grow =
        cg_intrinsic(c, "llvm.vector.reduce.or", mt,
                     LLVMBuildFCmp(c->b, LLVMRealOGT, top, cg_splat(c, mold), "passes"), NULL);
    LLVMBasicBlockRef rescale = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "amx_rescale");
    LLVMBasicBlockRef weights = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "amx_weights");
    LLVMBuildCondBr(c->b, grow, rescale, weights);
    LLVMPositionBuilderAtEnd(c->b, rescale);
    LLVMValueRef tmax = cg_intrinsic(c, "llvm.vector.reduce.fmax", c->vf, top, NULL);
    LLVMValueRef mnew = LLVMBuildFAdd(c->b, tmax, cg_f32(c, FLASH_SLACK), "mnew");
    LLVMBuildStore(c->b, mnew, mp);
    /* mold may be -inf (no key seen yet): alpha 0 */
    LLVMValueRef alpha = cg_exp_nonpos(c, cg_splat(c, LLVMBuildFSub(c->b, mold, mnew, "")));
    cg_vstore(c, ATTN_DTYPE_F32, LLVMBuildFMul(c->b, cg_vload(c, ATTN_DTYPE_F32, lp), alpha, ""),
              lp);
    LLVMValueRef orow = at_f32(c, f->ot, LLVMBuildMul(c->b, r, cg_i64(c, f->vd), ""));
    for (int64_t d = 0; d < f->vd; d += f->lanes) {
        LLVMValueRef at = at_f32(c, orow, cg_i64(c, d));
        cg_vstore(c, ATTN_DTYPE_F32,
                  LLVMBuildFMul(c->b, cg_vload(c, ATTN_DTYPE_F32, at), alpha, ""), at);
    }
    LLVMBuildBr(c->b, weights);
    LLVMPositionBuilderAtEnd(c->b, weights);
    /* a row that has seen only masked keys keeps m = -inf: 0 stands in */
    LLVMValueRef m = LLVMBuildLoad2(c->b, c->f32, mp, "m");
    LLVMValueRef muse = LLVMBuildSelect(
        c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, m, cg_f32(c, -INFINITY), ""), cg_f32(c, 0), m, "");
    LLVMValueRef p[8], sum = NULL;
    for (int k = 0; k < nv; k++) {
        p[k] = cg_exp_nonpos(c, LLVMBuildFSub(c->b, s[k], cg_splat(c, muse), ""));
        sum = k ? LLVMBuildFAdd(c->b, sum, p[k], "") : p[k];
    }
    cg_vstore(c, ATTN_DTYPE_F32, LLVMBuildFAdd(c->b, cg_vload(c, ATTN_DTYPE_F32, lp), sum, ""), lp);
    for (int k = 0; k < nv; k += 2) /* P's rows as A tiles: 32 keys each */
        store_bf16x32(c, cg_dot_words(c, p[k], p[k + 1]), f->pp,
                      LLVMBuildAdd(c->b, LLVMBuildMul(c->b, r, cg_i64(c, f->bk * 2), ""),
                                   cg_i64(c, (int64_t)k * f->lanes * 2), ""));
    cg_for_end(c, &lr);
}

/* Whether some value of the tile's V pairs (vf) is not finite (i1). */
static LLVMValueRef amx_v_not_finite(cg *c, const flash *f) {
    LLVMValueRef lo = cg_splat(c, LLVMConstInt(c->i32, 0x7f80, false));
    LLVMValueRef hi = cg_splat(c, LLVMConstInt(c->i32, 0x7f800000u, false));
    LLVMTypeRef mt = LLVMVectorType(LLVMInt1TypeInContext(c->llctx), (unsigned)f->lanes);
    LLVMValueRef none = LLVMConstNull(mt), bad;
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "v_finite", mt, 1);
    LLVMValueRef w = LLVMBuildLoad2(
        c->b, c->vi, cg_gep(c, c->i32, f->vf, LLVMBuildMul(c->b, l.i, cg_i64(c, f->lanes), "")),
        "");
    bad = LLVMBuildOr(
        c->b, l.acc[0],
        LLVMBuildOr(c->b, LLVMBuildICmp(c->b, LLVMIntEQ, LLVMBuildAnd(c->b, w, lo, ""), lo, ""),
                    LLVMBuildICmp(c->b, LLVMIntEQ, LLVMBuildAnd(c->b, w, hi, ""), hi, ""), ""),
        "");
    cg_acc_loop_end(c, &l, cg_i64(c, f->bk / 2 * f->hd / f->lanes), &none, &bad);
    return cg_intrinsic(c, "llvm.vector.reduce.or", mt, bad, NULL);
}

/* amx_pv for a cut tile whose V holds a value that is not finite: the
 * keys of weight 0 add nothing (as the other kernels' guarded p.v and
 * the reference, which skip masked keys), a row and a key at a time. */
static void amx_pv_guarded(cg *c, const flash *f) {
    LLVMTypeRef i16 = LLVMInt16TypeInContext(c->llctx);
    cg_loop lr = cg_for(c, cg_i64(c, 0), cg_i64(c, f->rows), "gpv_row");
    cg_loop lj = cg_for(c, cg_i64(c, 0), cg_i64(c, f->bk), "gpv_key");
    LLVMValueRef at = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lr.i, cg_i64(c, f->bk), ""), lj.i, "");
    LLVMValueRef bits =
        LLVMBuildZExt(c->b, LLVMBuildLoad2(c->b, i16, cg_gep(c, i16, f->pp, at), ""), c->i32, "");
    LLVMValueRef p = LLVMBuildBitCast(
        c->b, LLVMBuildShl(c->b, bits, LLVMConstInt(c->i32, 16, false), ""), c->f32, "p");
    LLVMBasicBlockRef add = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "gpv_add");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "gpv_next");
    LLVMBuildCondBr(c->b, LLVMBuildFCmp(c->b, LLVMRealUNE, p, cg_f32(c, 0), ""), add, next);
    LLVMPositionBuilderAtEnd(c->b, add);
    /* key j's v: the low (j even) or high halves of pair row j / 2 */
    LLVMValueRef vrow = cg_gep(
        c, c->i32, f->vf,
        LLVMBuildMul(c->b, LLVMBuildSDiv(c->b, lj.i, cg_i64(c, 2), ""), cg_i64(c, f->hd), ""));
    LLVMValueRef odd = cg_splat(c, LLVMBuildTrunc(c->b, LLVMBuildAnd(c->b, lj.i, cg_i64(c, 1), ""),
                                                  LLVMInt1TypeInContext(c->llctx), ""));
    LLVMValueRef orow = at_f32(c, f->ot, LLVMBuildMul(c->b, lr.i, cg_i64(c, f->vd), ""));
    for (int64_t d = 0; d < f->vd; d += f->lanes) {
        LLVMValueRef w = LLVMBuildLoad2(c->b, c->vi, cg_gep(c, c->i32, vrow, cg_i64(c, d)), "");
        LLVMValueRef v =
            LLVMBuildSelect(c->b, odd, cg_bf16_half(c, w, true), cg_bf16_half(c, w, false), "");
        LLVMValueRef o = at_f32(c, orow, cg_i64(c, d));
        cg_vstore(c, ATTN_DTYPE_F32, cg_fma(c, cg_splat(c, p), v, cg_vload(c, ATTN_DTYPE_F32, o)),
                  o);
    }
    LLVMBuildBr(c->b, next);
    LLVMPositionBuilderAtEnd(c->b, next);
    cg_for_end(c, &lj);
    cg_for_end(c, &lr);
}

/* key_tile with AMX tiles (f->amx). */
static void amx_key_tile(cg *c, const flash *f, kv_row *krow, kv_row *vrow, LLVMValueRef j0,
                         LLVMValueRef jend, LLVMValueRef partial) {
    widen_pairs(c, f, krow, vrow);
    amx_scores(c, f);
    LLVMBasicBlockRef cut = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "amx_cut");
    LLVMBasicBlockRef whole = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "amx_whole");
    LLVMBasicBlockRef guarded = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "amx_pv_guarded");
    LLVMBasicBlockRef pv = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "amx_pv");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "amx_pv_done");
    LLVMBuildCondBr(c->b, partial, cut, whole);
    LLVMPositionBuilderAtEnd(c->b, cut);
    amx_softmax(c, f, j0, jend, true);
    LLVMBuildCondBr(c->b, amx_v_not_finite(c, f), guarded, pv);
    LLVMPositionBuilderAtEnd(c->b, guarded);
    amx_pv_guarded(c, f);
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, whole);
    amx_softmax(c, f, j0, jend, false);
    LLVMBuildBr(c->b, pv);
    LLVMPositionBuilderAtEnd(c->b, pv);
    amx_pv(c, f);
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, done);
}

/* One tile of bk keys j0.. (below jend). */
/* The score_mod's X(d, h) over the dtiles key tiles from j0 for the
 * item's rows (f->dtab's layout), a vector of entries a step. */
static void distance_table(cg *c, const flash *f, LLVMValueRef j0) {
    LLVMValueRef pos0 = LLVMBuildExtractElement(c->b, row_pos(c, f, 0), cg_i64(c, 0), "");
    LLVMValueRef h0 = LLVMBuildExtractElement(c->b, row_head(c, f, 0), cg_i64(c, 0), "");
    LLVMValueRef last = LLVMBuildTrunc(
        c->b, key_at(c, f, LLVMBuildAdd(c->b, j0, cg_i64(c, f->dtiles * f->bk - 1), "")), c->i32,
        "");
    LLVMValueRef dmin = cg_splat(c, LLVMBuildSub(c->b, pos0, last, "dmin"));
    int64_t len = f->rows + f->dtiles * f->bk * f->hpi, steps = (len + f->lanes - 1) / f->lanes;
    cg_loop l = cg_for(c, cg_i64(c, 0), cg_i64(c, steps), "dtab");
    LLVMValueRef e0 = LLVMBuildMul(c->b, l.i, cg_i64(c, f->lanes), "");
    LLVMValueRef e =
        LLVMBuildAdd(c->b, cg_splat(c, LLVMBuildTrunc(c->b, e0, c->i32, "")), cg_lane_ids(c), "");
    LLVMValueRef hpi = cg_splat(c, LLVMConstInt(c->i32, (unsigned long long)f->hpi, false));
    LLVMValueRef step = cg_splat(c, LLVMConstInt(c->i32, (unsigned long long)f->dil, false));
    LLVMValueRef d = LLVMBuildAdd(
        c->b, dmin, LLVMBuildMul(c->b, LLVMBuildUDiv(c->b, e, hpi, ""), step, ""), "d");
    LLVMValueRef h = LLVMBuildAdd(c->b, cg_splat(c, h0), LLVMBuildURem(c->b, e, hpi, ""), "h");
    LLVMValueRef vals[ATTN_EXPR_MAX_NODES];
    cg_expr_at at = {cg_vf32(c, 0), d, LLVMConstNull(c->vi), h, NULL}; /* q - kv = d */
    cg_expr_values(c, cg_expr_of(c, false), &at, vals);
    cg_vstore(c, ATTN_DTYPE_F32, vals[f->dist], at_f32(c, f->dtab, e0));
    cg_for_end(c, &l);
}

static void key_tile(cg *c, const flash *f, LLVMValueRef kvh, LLVMValueRef j0, LLVMValueRef jend,
                     LLVMValueRef partial) {
    kv_row krow[128], vrow[128]; /* f->bk of them */
    /* keys past jend (masked below) read the block of key jend - 1 to its
     * end, the keys side by side as before them (a vector of keys past
     * that block reads the vector before it): the tile's vectors of keys
     * stay whole for widen_pairs and widen_tile (else key by key, ten
     * times slower). What those slots hold (unwritten, or another
     * sequence's) is masked: p = 0, and p.v skips weight 0 where V may
     * not be finite (the guarded p.v, amx_pv_guarded). */
    int64_t bt = ir_cfg_kv_block_tokens(c->g);
    /* else: the last key (dilated keys are never side by side) */
    bool whole = f->kf && bt >= f->lanes && f->dil == 1;
    LLVMValueRef last = LLVMBuildSub(c->b, jend, cg_i64(c, 1), ""), block_end = NULL;
    if (whole)
        block_end = LLVMBuildAdd(
            c->b,
            LLVMBuildMul(c->b, LLVMBuildSDiv(c->b, last, cg_i64(c, bt), ""), cg_i64(c, bt), ""),
            cg_i64(c, bt - 1), "block_end");
    for (int j = 0; j < f->bk; j++) {
        LLVMValueRef kj = LLVMBuildAdd(c->b, j0, cg_i64(c, j), "");
        if (whole) {
            /* past the block: back by whole vectors into it (j0 + j - L *
             * ceil(over / L)); smaller blocks never hold a vector of
             * keys, and going back a vector could leave them for one the
             * window released */
            LLVMValueRef over = cg_intrinsic(c, "llvm.smax", c->i64,
                                             LLVMBuildSub(c->b, kj, block_end, ""), cg_i64(c, 0));
            LLVMValueRef back = LLVMBuildMul(
                c->b,
                LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, over, cg_i64(c, f->lanes - 1), ""),
                              cg_i64(c, f->lanes), ""),
                cg_i64(c, f->lanes), "");
            kj = cg_intrinsic(c, "llvm.smax", c->i64, LLVMBuildSub(c->b, kj, back, ""),
                              cg_i64(c, 0));
            kj = cg_intrinsic(c, "llvm.smin", c->i64, kj, block_end);
        } else {
            kj = key_at(c, f, cg_intrinsic(c, "llvm.smin", c->i64, kj, last));
        }
        LLVMValueRef ki[3] = {cg_i64(c, 0), kvh, kj};
        krow[j] = kv_row_at(c, f->k, cg_addr(c, f->k, ki));
        vrow[j] = kv_row_at(c, f->v, cg_addr(c, f->v, ki));
    }
    if (f->amx) {
        amx_key_tile(c, f, krow, vrow, j0, jend, partial);
        return;
    }
    /* the next tile's first key (this tile's last past jend) */
    flash ahead = *f;
    LLVMValueRef ki[3] = {cg_i64(c, 0), kvh,
                          key_at(c, f,
                                 cg_intrinsic(c, "llvm.smin", c->i64,
                                              LLVMBuildAdd(c->b, j0, cg_i64(c, f->bk), ""), last))};
    ahead.next_k = cg_addr(c, f->k, ki);
    ahead.next_v = cg_addr(c, f->v, ki);
    if (f->kf && f->pairs) /* bf16 pairs, for vdpbf16ps */
        widen_pairs(c, f, krow, vrow);
    else if (f->kf) /* a narrow cache: the tile widened once, for all rows of the item */
        widen_tile(c, f, krow, vrow);
    if (f->dist >= 0 && f->dtiles == 1)
        distance_table(c, f, j0);
    for (int j = 0; j < f->bk; j += f->bks)
        scores(c, &ahead, krow + j, j, j0);
    /* the scores read back through a pointer the optimizer cannot follow:
     * else it forwarded the first passes' stored scores to the softmax,
     * kept them in registers across the next pass's loop and spilled
     * there (test_spills) */
    flash after = *f;
    after.pb = cg_opaque_ptr(c, f->pb);
    f = &after;
    /* only tiles on the diagonal (or the window's edge) are masked */
    LLVMBasicBlockRef masked = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "mask");
    LLVMBasicBlockRef softmax = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "softmax");
    LLVMBuildCondBr(c->b, partial, masked, softmax);
    LLVMPositionBuilderAtEnd(c->b, masked);
    mask_tile(c, f, j0, jend);
    LLVMBuildBr(c->b, softmax);
    LLVMPositionBuilderAtEnd(c->b, softmax);

    /* online softmax against a reference m per row that moves only when a
     * score of the tile passes it, then to the tile's max + FLASH_SLACK (as
     * the split kernel's, cg_split.c): l and ot are rescaled in a branch
     * most tiles skip, and p = e^(s - m) <= 1 either way */
    LLVMTypeRef mask_ty = LLVMVectorType(LLVMInt1TypeInContext(c->llctx), (unsigned)f->lanes);
    LLVMValueRef ninf = cg_vf32(c, -INFINITY), mold[8], up[8], grow = NULL;
    for (int v = 0; v < f->rv; v++) {
        mold[v] = cg_vload(c, ATTN_DTYPE_F32, at_f32(c, f->m, cg_i64(c, (int64_t)v * f->lanes)));
        for (int j = 0; j < f->bk; j++) {
            LLVMValueRef s = cg_vload(c, ATTN_DTYPE_F32, line_ptr(c, f, f->pb, cg_i64(c, j), v));
            LLVMValueRef gt = LLVMBuildFCmp(c->b, LLVMRealOGT, s, mold[v], "");
            up[v] = j ? LLVMBuildOr(c->b, up[v], gt, "") : gt;
        }
        LLVMValueRef g = cg_intrinsic(c, "llvm.vector.reduce.or", mask_ty, up[v], NULL);
        grow = v ? LLVMBuildOr(c->b, grow, g, "") : g;
    }
    LLVMBasicBlockRef rescale = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "rescale");
    LLVMBasicBlockRef weights = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "weights");
    LLVMBuildCondBr(c->b, grow, rescale, weights);
    LLVMPositionBuilderAtEnd(c->b, rescale);
    LLVMValueRef alpha[8];
    for (int v = 0; v < f->rv; v++) {
        LLVMValueRef top = ninf;
        for (int j = 0; j < f->bk; j++)
            top = cg_intrinsic(c, "llvm.maxnum", c->vf, top,
                               cg_vload(c, ATTN_DTYPE_F32, line_ptr(c, f, f->pb, cg_i64(c, j), v)));
        LLVMValueRef mnew = LLVMBuildSelect(
            c->b, up[v], LLVMBuildFAdd(c->b, top, cg_vf32(c, FLASH_SLACK), ""), mold[v], "");
        /* a row that has seen only masked keys keeps m = -inf: 0 stands in */
        LLVMValueRef muse = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, mnew, ninf, ""),
                                            cg_vf32(c, 0), mnew, "");
        alpha[v] = cg_exp_nonpos(c, LLVMBuildFSub(c->b, mold[v], muse, ""));
        LLVMValueRef lp = at_f32(c, f->l, cg_i64(c, (int64_t)v * f->lanes));
        cg_vstore(c, ATTN_DTYPE_F32,
                  LLVMBuildFMul(c->b, cg_vload(c, ATTN_DTYPE_F32, lp), alpha[v], ""), lp);
        cg_vstore(c, ATTN_DTYPE_F32, mnew, at_f32(c, f->m, cg_i64(c, (int64_t)v * f->lanes)));
    }
    cg_loop lr = cg_for(c, cg_i64(c, 0), cg_i64(c, f->vd), "rescale_d");
    for (int v = 0; v < f->rv; v++) {
        LLVMValueRef at = line_ptr(c, f, f->ot, lr.i, v);
        cg_vstore(c, ATTN_DTYPE_F32,
                  LLVMBuildFMul(c->b, cg_vload(c, ATTN_DTYPE_F32, at), alpha[v], ""), at);
    }
    cg_for_end(c, &lr);
    LLVMBuildBr(c->b, weights);
    LLVMPositionBuilderAtEnd(c->b, weights);
    for (int v = 0; v < f->rv; v++) {
        LLVMValueRef mp = at_f32(c, f->m, cg_i64(c, (int64_t)v * f->lanes));
        LLVMValueRef lp = at_f32(c, f->l, cg_i64(c, (int64_t)v * f->lanes));
        LLVMValueRef m = cg_vload(c, ATTN_DTYPE_F32, mp);
        LLVMValueRef muse = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, m, ninf, ""),
                                            cg_vf32(c, 0), m, "");
        LLVMValueRef sum = cg_vload(c, ATTN_DTYPE_F32, lp), prev = NULL;
        for (int j = 0; j < f->bk; j++) {
            LLVMValueRef pj = line_ptr(c, f, f->pb, cg_i64(c, j), v);
            LLVMValueRef p =
                cg_exp_nonpos(c, LLVMBuildFSub(c->b, cg_vload(c, ATTN_DTYPE_F32, pj), muse, ""));
            sum = LLVMBuildFAdd(c->b, sum, p, ""); /* the sum keeps p unrounded */
            if (!f->pairs)
                cg_vstore(c, ATTN_DTYPE_F32, cg_operand(c, p), pj);
            else if (j % 2) /* keys (j - 1, j) as the pairs p.v takes (pv_pairs) */
                LLVMBuildStore(c->b, cg_dot_pair(c, prev, p),
                               line_ptr(c, f, f->pp, cg_i64(c, j / 2), v));
            prev = p;
        }
        cg_vstore(c, ATTN_DTYPE_F32, sum, lp);
    }
    LLVMBasicBlockRef guarded = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_partial");
    LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_full");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_done");
    LLVMBuildCondBr(c->b, partial, guarded, plain);
    LLVMPositionBuilderAtEnd(c->b, guarded);
    pv_tile(c, f, vrow, true);
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, plain);
    pv_tile(c, f, vrow, false);
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, done);
}

/* f's items of rv vectors of rows: its rows, heads per item and items
 * per token's group. */
static void flash_rows(flash *f, int rv) {
    f->rv = rv;
    f->rows = f->rv * f->lanes;
    f->hpi = f->group < f->rows ? f->group : f->rows;
    f->chunks = (f->group + f->hpi - 1) / f->hpi;
}

/* The work items of node n with rv vectors of rows each, bks keys a
 * score pass and p.v blocks of up to dc dims (cg_target's flash_*,
 * flash_pairs_* or flash_prefix_*). */
static flash flash_shape(cg *c, const ir_node *n, int rv, int bks, int dc) {
    flash f = {.n = n, .q = n->args[0], .k = n->args[1], .v = n->args[2], .dist = -1, .dil = 1};
    f.hd = f.q->ne[0].c; /* head_dim; MLA: its latent and rope dims, its values the latent */
    f.vd = f.v->ne[0].c;
    f.group = ir_cfg_heads(c->g) / f.k->ne[1].c;
    f.lanes = c->target.lanes;
    flash_rows(&f, rv);
    f.bks = bks;
    f.bk = c->target.flash_bk;
    /* the largest power of two up to it dividing head_dim */
    f.dc = dc;
    while (f.vd % f.dc)
        f.dc /= 2;
    ATTNC_ASSERT(f.rv <= 8 && f.bk <= 32 && f.dc * f.rv <= 64 && f.bks * f.rv <= 64);
    return f;
}

static void flash_items(cg *c, const flash *fp, bool split);
static void flash_items_at(cg *c, const flash *fp, bool split, LLVMValueRef s_base,
                           LLVMValueRef s_end);
static int64_t in_blocks(cg *c, const flash *f, const ir_node *rows, int64_t nd);

/* The end of an item: the next one (item + step), back at head. */
static void flash_next(cg *c, LLVMValueRef item, LLVMValueRef step, LLVMBasicBlockRef head,
                       LLVMBasicBlockRef exit) {
    LLVMValueRef next = LLVMBuildAdd(c->b, item, step, "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(c->b);
    LLVMAddIncoming(item, &next, &latch, 1);
    LLVMBuildBr(c->b, head);
    LLVMPositionBuilderAtEnd(c->b, exit);
}

/* Calls of at most this many new tokens without a split path (MLA's
 * decode) take items of fewer rows when a token's rows would make an odd
 * number of items: deepseek_v3's 128 heads are 3 items of 48 rows on
 * AVX-512 (two threads: 2 + 1), 4 of 32 (2 + 2): decode core at 4096
 * keys 5.41 -> 4.12 ms; prefill keeps 48 (1024 tokens: 534 against 577
 * ms with 32). */
enum { FLASH_FEW_TOKENS = 8 };

/* The rows per item of the split path computed here (MLA): the fewest
 * row vectors a token's group takes (the most rows of those): on AVX-512,
 * deepseek_v2_lite's 16 heads one vector, not 3 of which 2 are empty;
 * deepseek_v3's 128 heads 4 items of 2 vectors, not 3 of 3. */
static int split_rv(const flash *f) {
    int best = 1;
    for (int rv = 1; rv <= f->rv; rv++) {
        int64_t rows = (int64_t)rv * f->lanes;
        int64_t cost = (f->group + rows - 1) / rows * rv;
        int64_t best_rows = (int64_t)best * f->lanes;
        if (cost <= (f->group + best_rows - 1) / best_rows * best)
            best = rv;
    }
    return best;
}

/* Node n's items of rv vectors of rows in the target's f32 shape. */
static flash plain_shape(cg *c, const ir_node *n, int rv) {
    return flash_shape(c, n, rv, c->target.flash_bks, c->target.flash_dc);
}

void cg_emit_flash(cg *c, const ir_node *n, const char *name) {
    const cg_target *t = &c->target;
    flash f = plain_shape(c, n, t->flash_rv);
    attn_dtype kvdt = c->plan->view[f.k->id].dt;
    /* MLA: the values are a view of K's rows (their first dims) */
    const cg_view *kview = &c->plan->view[f.k->id], *vview = &c->plan->view[f.v->id];
    bool v_in_k = cg_cache_which(c, f.v) == 0 && vview->buf == kview->buf &&
                  ir_dim_eq(vview->off, kview->off);
    bool narrow = (kvdt != ATTN_DTYPE_F32 || ir_cfg_bf16(c->g)) && cg_cache_which(c, f.k) == 0 &&
                  (cg_cache_which(c, f.v) == 1 || v_in_k) && f.hd % f.lanes == 0;
    /* compute bf16 by vdpbf16ps: tiles widened into pairs (widen_pairs;
     * a q8_0 cache's d * q, as an f32 cache's), q.k and full tiles' p.v
     * in pairs (scores, pv_pairs); not where q.k takes a quantized q
     * (ir_cfg_q8_query: exact integer products, K unrounded) */
    bool pairs = narrow && cg_bf16_pairs_pay(c) && !ir_cfg_q8_query(c->g) && f.hd % 2 == 0 &&
                 f.bk % 2 == 0 && f.vd % f.lanes == 0 && (f.vd == f.hd || v_in_k);
    if (pairs)
        f = flash_shape(c, n, t->flash_pairs_rv, t->flash_pairs_bks, t->flash_pairs_dc);
    flash few = f;
    if (n->split_tokens < FLASH_FEW_TOKENS && f.rv > 1 && f.chunks % 2 == 1 && f.chunks > 1)
        few = plain_shape(c, n, f.rv - 1);
    bool by_flash = n->split_tokens && cg_split_by_flash(c->g);
    flash sp = by_flash ? plain_shape(c, n, split_rv(&f)) : f;

    cg_kernel_begin(c, name);
    /* a prefix call (attn_kernel_args) in f32: items of the target's
     * prefix shape where it has one */
    flash cas = f;
    bool by_prefix = c->prefix && !pairs && !ir_cfg_bf16(c->g) && t->flash_prefix_rv > f.rv;
    if (by_prefix)
        cas = flash_shape(c, n, t->flash_prefix_rv, t->flash_prefix_bks, t->flash_prefix_dc);
    /* AMX tiles: compute bf16 over any cache (q8_0: d * q paired by
     * widen_pairs; not where q.k takes a quantized q), the rows of q and
     * of the output contiguous (AMX_ROWS rows a vector of rows) */
    f.amx = narrow && !v_in_k && ir_cfg_bf16(c->g) && c->target.amx && f.lanes == AMX_ROWS &&
            !ir_cfg_q8_query(c->g) && f.hd % 32 == 0 && f.vd == f.hd &&
            in_blocks(c, &f, f.q, f.hd) == f.hd && in_blocks(c, &f, n, f.vd) == f.vd;
    if (f.amx) { /* few and sp (shaped above) use the slots of f's larger rows */
        int rv = c->target.flash_amx_rv;
        /* not flash_shape: its limits are the vector kernels' */
        flash_rows(&f, rv > f.rv ? rv : f.rv);
        f.amx = true;
        f.bk = c->target.flash_amx_bk;
        ATTNC_ASSERT(f.bk % 32 == 0 && f.bk <= 128);
    }
    /* the slots hold the most rows of f and cas */
    int64_t rows = f.rows > cas.rows ? f.rows : cas.rows;
    LLVMTypeRef big = LLVMArrayType2(c->f32, (uint64_t)(f.hd * rows));
    LLVMTypeRef outt = LLVMArrayType2(c->f32, (uint64_t)(f.vd * rows));
    LLVMTypeRef pbt = LLVMArrayType2(c->f32, (uint64_t)(f.bk * rows));
    LLVMTypeRef rowt = LLVMArrayType2(c->f32, (uint64_t)rows);
    f.qt = cg_slot(c, big, NULL);
    f.ot = cg_slot(c, outt, NULL);
    f.pb = cg_slot(c, pbt, NULL);
    f.m = cg_slot(c, rowt, NULL);
    f.l = cg_slot(c, rowt, NULL);
    if (f.amx) {
        f.lv = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(f.rows * f.lanes)), NULL);
        LLVMSetAlignment(f.lv, 64);
    }
    if (ir_cfg_q8_query(c->g) && !f.amx) {
        ATTNC_ASSERT(f.hd % 32 == 0);
        f.qr = cg_slot(c, big, NULL);
        LLVMSetAlignment(f.qr, 64);
    }
    f.sl = cg_slot(c, rowt, NULL);
    f.pos = cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)rows), NULL);
    if (ir_cfg_tree(c->g)) {
        f.tb = cg_slot(c, LLVMArrayType2(c->i64, (uint64_t)rows), NULL);
        LLVMSetAlignment(f.tb, 64);
    }
    if (n->score_mod || n->mask_mod) {
        f.hv = cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)rows), NULL);
        LLVMSetAlignment(f.hv, 64);
    }
    /* T5's bucketed bias per key (log, floor, a gather) took t5_relative_bias'
     * prefill 2048 core 89-95 ms against 40 without it; a table per tile
     * evaluates it (rows + bk * hpi) / (rows * bk) as often, and one for
     * dtiles tiles (rows + dtiles * bk * hpi) / (dtiles * rows * bk) as
     * often, for items of one head (no GQA): t5_relative_bias' 41.2 ->
     * 37.9 ms with 16 tiles (AMD EPYC Zen 4, 2 threads, 4 alternating
     * rounds; the same spec without score_mod 36.9 ms). Items of 4 heads
     * (alibi_expr) took 214 against 201 ms with tables of 4 tiles (5
     * rounds, noisy): they keep one table a tile, built in the tile */
    f.dist = n->score_mod ? cg_expr_distance_addend(cg_expr_of(c, false), &f.dist_minus) : -1;
    if (f.dist >= 0) {
        f.dtiles = f.hpi == 1 ? DIST_KEYS / f.bk : 1;
        /* a vector past the last entry */
        int64_t most = rows + f.dtiles * f.bk * f.hpi + f.lanes;
        f.dtab = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)most), NULL);
        LLVMSetAlignment(f.dtab, 64);
    }
    /* computed per key and row, alibi_expr's slope exp(-c * (h + 1)) cost
     * its prefill 2048 core 216-263 ms against the built-in ALiBi's
     * 200-229; once per row, 209-217 (Zen 5, 2 threads, alternating) */
    f.n_pre =
        n->score_mod && f.dist < 0 ? cg_expr_row_parts(cg_expr_of(c, false), f.pre_node, 4) : 0;
    if (f.n_pre) {
        f.pre = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(f.n_pre * rows)), NULL);
        LLVMSetAlignment(f.pre, 64);
    }
    f.rowp = cg_slot(c, LLVMArrayType2(c->ptr, (uint64_t)rows), NULL);
    f.rowok = cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)rows), NULL);
    f.inv = cg_slot(c, rowt, NULL);
    f.dummy = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(f.vd + 2)), NULL);
    LLVMValueRef slots[10] = {f.qt, f.ot, f.pb, f.m, f.l, f.sl, f.pos, f.rowok, f.inv, f.dummy};
    for (int i = 0; i < 10; i++)
        LLVMSetAlignment(slots[i], 64);
    /* compute bf16: tiles rounded once too */
    if (narrow) { /* a narrow cache: tiles widened once (widen_tile) */
        ATTNC_ASSERT(vview->dt == kvdt && f.bk % f.lanes == 0 &&
                     (kvdt != ATTN_DTYPE_Q8_0 || 32 % f.lanes == 0));
        LLVMTypeRef tile = LLVMArrayType2(c->f32, (uint64_t)(f.hd * f.bk));
        f.kf = cg_slot(c, tile, NULL);
        LLVMSetAlignment(f.kf, 64);
        if (!v_in_k || pairs) { /* else V is read from kf */
            f.vf = cg_slot(c, tile, NULL);
            LLVMSetAlignment(f.vf, 64);
        }
        /* (a q8_0 tile is dequantized and rounded by widen_tile or
         * widen_pairs) */
        f.pairs = pairs;
        f.vt = pairs && v_in_k;
        if (f.pairs || f.amx) {
            f.pp = cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)(f.bk / 2 * f.rows)), NULL);
            LLVMSetAlignment(f.pp, 64);
        }
    }
    /* the other shapes' items use f's slots (sized for the most rows) */
    flash *alt[3] = {&few, &sp, &cas};
    for (int i = 0; i < 3; i++) {
        alt[i]->qt = f.qt, alt[i]->ot = f.ot, alt[i]->pb = f.pb, alt[i]->m = f.m, alt[i]->l = f.l;
        alt[i]->sl = f.sl, alt[i]->pos = f.pos, alt[i]->tb = f.tb, alt[i]->hv = f.hv,
        alt[i]->kf = f.kf;
        alt[i]->vf = f.vf;
        alt[i]->rowp = f.rowp, alt[i]->rowok = f.rowok, alt[i]->inv = f.inv;
        alt[i]->dummy = f.dummy, alt[i]->pairs = f.pairs, alt[i]->pp = f.pp, alt[i]->qr = f.qr;
        alt[i]->vt = f.vt;
        alt[i]->pre = f.pre, alt[i]->n_pre = f.n_pre;
        alt[i]->dist = f.dist, alt[i]->dist_minus = f.dist_minus;
        /* their rows + dtiles * bk * hpi are at most f's */
        alt[i]->dtab = f.dtab, alt[i]->dtiles = f.dtiles;
        memcpy(alt[i]->pre_node, f.pre_node, sizeof f.pre_node);
    }
    if (n->split_tokens) { /* few new tokens: chunks of keys, merged by the next step */
        LLVMBasicBlockRef split = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "split_kv");
        LLVMBasicBlockRef whole = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "flash");
        LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLE, c->S, cg_i64(c, n->split_tokens), ""),
                        split, whole);
        LLVMPositionBuilderAtEnd(c->b, split);
        if (by_flash) {
            flash_items(c, &sp, true);
        } else { /* a function of its own (a unit, cg_module.c): compiled beside this one */
            char split_name[160];
            snprintf(split_name, sizeof split_name, "%s_split", name);
            LLVMValueRef params[3] = {c->args, LLVMGetParam(c->fn, 1), LLVMGetParam(c->fn, 2)};
            LLVMValueRef call =
                LLVMBuildCall2(c->b, c->kernel_ty, cg_kernel_decl(c, split_name), params, 3, "");
            LLVMSetTailCall(call, true);
        }
        cg_kernel_end(c);
        LLVMPositionBuilderAtEnd(c->b, whole);
    }

    /* a dilated mask_mod (cg_expr_dilation): the items take the rows and
     * keys of one residue class, so their tiles hold only pairs the
     * dilation shows, and the rest of the mask decides which tiles are
     * cut. dilated_window prefill 2048 core, 2 threads (AMD EPYC Zen 5),
     * f32 cache: 120 -> 66 ms (88% of causal llama3_8b's FLOP rate); f16
     * 120 -> 67 ms with its keys widened by shuffles (k_lanes; 86%). The
     * split path keeps the whole mask. */
    attn_expr rest, full;
    int64_t shift = 0;
    int dil = n->mask_mod ? cg_expr_dilation(cg_expr_of(c, true), &shift, &rest) : 0;
    if (dil) {
        f.dil = few.dil = dil;
        f.dshift = few.dshift = shift;
        full = c->expr[1];
        c->expr[1] = rest;
        c->bounds_at = NULL;
    }
    if (by_prefix) {
        LLVMBasicBlockRef pre = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "prefix_items");
        LLVMBasicBlockRef own = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "own_items");
        LLVMBuildCondBr(c->b, c->prefix, pre, own);
        LLVMPositionBuilderAtEnd(c->b, pre);
        flash_items(c, &cas, false);
        cg_kernel_end(c);
        LLVMPositionBuilderAtEnd(c->b, own);
    }
    if (few.rv != f.rv) {
        LLVMBasicBlockRef small = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "few_tokens");
        LLVMBasicBlockRef large = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "many_tokens");
        LLVMBuildCondBr(c->b,
                        LLVMBuildICmp(c->b, LLVMIntSLE, c->S, cg_i64(c, FLASH_FEW_TOKENS), ""),
                        small, large);
        LLVMPositionBuilderAtEnd(c->b, small);
        flash_items(c, &few, false);
        cg_kernel_end(c);
        LLVMPositionBuilderAtEnd(c->b, large);
    }
    /* a prefix call's last tokens, where they fit one machine vector of
     * rows a K/V head, in items of one vector instead of a full item
     * mostly empty: AVX2's 32 sequences of group 4 (128 rows a head) are
     * 5 items of 24 rows and one of 8, not a sixth of 24. llama3_8b,
     * `attnc bench --mode decode --batch 32 --cache 4160 --shared-prefix
     * 4096 --kv-dtype f16 --part core`, AMD EPYC Zen 3, 2 threads,
     * alternating rounds: 18.45 -> 17.54 ms (6 rounds), 17.24 -> 16.14
     * (5, each faster; 70.3 -> 75.3% of the FMA peak). Cold compile of
     * llama3_8b 426 -> 446 ms. AVX-512's prefix calls take their own
     * items (by_prefix) */
    flash tail = f;
    flash_rows(&tail, 1);
    bool by_tail =
        c->prefix && !dil && !f.amx && !pairs && f.rv > 1 && f.chunks == 1 && tail.chunks == 1;
    LLVMValueRef end = NULL, base = NULL, use_tail = NULL;
    if (by_tail) { /* the full items' tokens [0, base), the tail's [base, S) */
        int64_t bq = f.rows / f.hpi;
        base = LLVMBuildMul(c->b, LLVMBuildSDiv(c->b, c->S, cg_i64(c, bq), ""), cg_i64(c, bq),
                            "tail_s0");
        LLVMValueRef left = LLVMBuildSub(c->b, c->S, base, "tail_tokens");
        use_tail = LLVMBuildAnd(
            c->b, c->prefix,
            LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntSGT, left, cg_i64(c, 0), ""),
                         LLVMBuildICmp(c->b, LLVMIntSLE, left, cg_i64(c, tail.rows / tail.hpi), ""),
                         ""),
            "use_tail");
        end = LLVMBuildSelect(c->b, use_tail, base, c->S, "full_end");
    }
    flash_items_at(c, &f, false, NULL, end);
    if (by_tail) {
        LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "tail_items");
        LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "tail_done");
        LLVMBuildCondBr(c->b, use_tail, yes, done);
        LLVMPositionBuilderAtEnd(c->b, yes);
        flash_items_at(c, &tail, false, base, c->S);
        LLVMBuildBr(c->b, done);
        LLVMPositionBuilderAtEnd(c->b, done);
    }
    cg_kernel_end(c);
    if (dil) {
        c->expr[1] = full;
        c->bounds_at = NULL;
    }
}

/* How many of the nd d's of the rows of `rows` (a node whose rows are
 * contiguous in d; NULL: the split buffer's, which are) go in blocks of
 * lanes: whole blocks, or none. */
static int64_t in_blocks(cg *c, const flash *f, const ir_node *rows, int64_t nd) {
    if (rows && !ir_dim_eq(c->plan->view[rows->id].nb[0], ir_const(1)))
        return 0;
    return nd / f->lanes * f->lanes;
}

/* The rows' d's [0, nd) in blocks of lanes d's by lanes rows, transposed
 * in registers between the rows (rowp: each row's element 0, dtype dt)
 * and the item's [d][row] arrays, instead of an element at a time:
 * AVX-512 code's llama3_8b prefill 1024 core, one thread (AMD EPYC Zen
 * 4), 99.7-101.1 -> 94.1-99.1 ms, seed core 73.0-74.6 -> 69.2-69.5 ms;
 * AVX2 code within its noise (docs/performance.md).
 * out = false: qt = q * scale, 0 where rowok is 0; out = true: the rows
 * get ot, times inv if `by_inv` (a row past the item points at the
 * dummy). */
static void rows_in_blocks(cg *c, const flash *f, int64_t nd, bool out, double scale, bool by_inv,
                           attn_dtype dt) {
    int L = f->lanes;
    LLVMTypeRef et = cg_elem_type(c, dt), vi = LLVMVectorType(c->i32, (unsigned)L);
    for (int v = 0; nd && v < f->rv; v++) {
        LLVMValueRef inside = NULL, inv = NULL, x[64];
        if (!out) {
            LLVMValueRef ok = LLVMBuildLoad2(
                c->b, vi, cg_gep(c, c->i32, f->rowok, cg_i64(c, (int64_t)v * L)), "");
            LLVMSetAlignment(ok, 4);
            inside = LLVMBuildICmp(c->b, LLVMIntNE, ok, LLVMConstNull(vi), "");
        } else if (by_inv) {
            inv = cg_vload(c, ATTN_DTYPE_F32, at_f32(c, f->inv, cg_i64(c, (int64_t)v * L)));
        }
        cg_loop lb = cg_for(c, cg_i64(c, 0), cg_i64(c, nd / L), "dblock");
        LLVMValueRef d0 = LLVMBuildMul(c->b, lb.i, cg_i64(c, L), "d0"), rowp[64];
        for (int i = 0; i < L; i++)
            rowp[i] = cg_gep(
                c, et,
                LLVMBuildLoad2(c->b, c->ptr, cg_gep(c, c->ptr, f->rowp, cg_i64(c, v * L + i)), ""),
                d0);
        for (int k = 0; k < L; k++) {
            if (!out) {
                x[k] = cg_vload(c, dt, rowp[k]);
                continue;
            }
            x[k] = cg_vload(c, ATTN_DTYPE_F32,
                            line_ptr(c, f, f->ot, LLVMBuildAdd(c->b, d0, cg_i64(c, k), ""), v));
            if (inv)
                x[k] = LLVMBuildFMul(c->b, x[k], inv, "");
        }
        cg_transpose(c, x);
        for (int k = 0; k < L; k++) {
            if (out) {
                cg_vstore(c, dt, x[k], rowp[k]);
                continue;
            }
            x[k] = cg_qk_operand(c, x[k]);
            if (scale != 1.0)
                x[k] = LLVMBuildFMul(c->b, x[k], cg_vf32(c, scale), "");
            cg_vstore(c, ATTN_DTYPE_F32, LLVMBuildSelect(c->b, inside, x[k], cg_vf32(c, 0), ""),
                      line_ptr(c, f, f->qt, LLVMBuildAdd(c->b, d0, cg_i64(c, k), ""), v));
        }
        cg_for_end(c, &lb);
    }
}

/* Every work item of f, dealt round-robin to the threads; `split`: each
 * item also takes one chunk of the keys (cg_split_chunks), chunk-major,
 * a thread a run of consecutive items (so a chunk's keys are read from
 * memory once for all of its items), and stores its rows' partials for
 * the merge (cg_split.c) instead of their outputs. */
/* An item's start: its query rows staged in qt (times the scale, 0 past
 * the item), their max and sum (a sink starts them), ALiBi slopes, ot = 0,
 * and the rows' positions. */
static void item_rows(cg *c, const flash *f, LLVMValueRef kvh, LLVMValueRef chunk, LLVMValueRef s0,
                      bool split) {
    const ir_node *n = f->n;
    /* qt[d][r] = q[d, head, tok] * scale (0 for rows past the item):
     * blocks of lanes d's after the row loop (rows_in_blocks), the d's
     * past the last block here */
    int64_t qb = f->amx ? f->hd : in_blocks(c, f, f->q, f->hd);
    cg_loop lr = cg_for(c, cg_i64(c, 0), cg_i64(c, f->rows), "r");
    LLVMValueRef hh, tok, ok;
    row_of(c, f, kvh, chunk, s0, lr.i, &hh, &tok, &ok);
    LLVMValueRef safe_h = LLVMBuildSelect(c->b, ok, hh, cg_i64(c, 0), "");
    LLVMValueRef safe_t = LLVMBuildSelect(c->b, ok, tok, cg_i64(c, 0), "");
    /* activations q8_0 over a q8_0 cache: the row's q as ggml quantizes
     * it for q.k (ggml-cpu ops.cpp, flash_attn_ext: q_to_vec_dot, then
     * the scale times the sum), read from qr from here on */
    LLVMValueRef qrow = NULL;
    if (f->qr) {
        qrow = at_f32(c, f->qr, LLVMBuildMul(c->b, lr.i, cg_i64(c, f->hd), ""));
        cg_q8_query_row(c, f->q, safe_h, safe_t, qrow, f->hd);
    }
    if (f->amx) { /* qt[r] = q[., head, tok] as bf16, row-major */
        LLVMValueRef q0[3] = {cg_i64(c, 0), safe_h, safe_t};
        amx_query_row(c, f, lr.i, cg_addr(c, f->q, q0), f->q->dt, cg_splat(c, ok));
    } else if (qb) {
        LLVMValueRef q0[3] = {cg_i64(c, 0), safe_h, safe_t};
        LLVMBuildStore(c->b, qrow ? qrow : cg_addr(c, f->q, q0), cg_gep(c, c->ptr, f->rowp, lr.i));
        LLVMBuildStore(c->b, LLVMBuildZExt(c->b, ok, c->i32, ""),
                       cg_gep(c, c->i32, f->rowok, lr.i));
    }
    if (qb < f->hd) {
        cg_loop ld = cg_for(c, cg_i64(c, qb), cg_i64(c, f->hd), "d");
        LLVMValueRef qi[3] = {ld.i, safe_h, safe_t};
        LLVMValueRef qv = qrow ? LLVMBuildLoad2(c->b, c->f32, at_f32(c, qrow, ld.i), "")
                               : cg_qk_operand(c, cg_load(c, f->q->dt, cg_addr(c, f->q, qi)));
        if (cg_query_scale(c, n->scale) != 1.0)
            qv = LLVMBuildFMul(c->b, qv, cg_f32(c, n->scale), "");
        LLVMValueRef line =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, ld.i, cg_i64(c, f->rows), ""), lr.i, "");
        LLVMBuildStore(c->b, LLVMBuildSelect(c->b, ok, qv, cg_f32(c, 0), ""),
                       at_f32(c, f->qt, line));
        cg_for_end(c, &ld);
    }
    /* a sink starts the row's max and sum: exp(sink - sink) = 1 */
    const ir_node *sinks = ir_sinks(n);
    LLVMValueRef m0 = cg_f32(c, -INFINITY), l0 = cg_f32(c, 0);
    if (sinks && !split) { /* split: the merge adds the sink; a prefix call: the own call's */
        LLVMValueRef si[1] = {safe_h};
        LLVMValueRef with =
            c->prefix ? LLVMBuildAnd(c->b, ok, LLVMBuildNot(c->b, c->prefix, ""), "") : ok;
        m0 = LLVMBuildSelect(c->b, with, cg_load(c, sinks->dt, cg_addr(c, sinks, si)), m0, "");
        l0 = LLVMBuildSelect(c->b, with, cg_f32(c, 1), l0, "");
    }
    LLVMBuildStore(c->b, m0, at_f32(c, f->m, lr.i));
    LLVMBuildStore(c->b, l0, at_f32(c, f->l, lr.i));
    if (f->lv) /* the sum's vector: l0 in lane 0 */
        cg_vstore(c, ATTN_DTYPE_F32,
                  LLVMBuildInsertElement(c->b, cg_vf32(c, 0), l0, cg_i64(c, 0), ""),
                  at_f32(c, f->lv, LLVMBuildMul(c->b, lr.i, cg_i64(c, f->lanes), "")));
    if (n->alibi)
        LLVMBuildStore(c->b, cg_alibi_slope(c, safe_h), at_f32(c, f->sl, lr.i));
    if (f->hv)
        LLVMBuildStore(c->b,
                       LLVMBuildTrunc(c->b,
                                      LLVMBuildAdd(c->b, safe_h, cg_i64(c, cg_expr_head0(c)), ""),
                                      c->i32, ""),
                       cg_gep(c, c->i32, f->hv, lr.i));
    cg_for_end(c, &lr);
    if (!f->amx)
        rows_in_blocks(c, f, qb, false, cg_query_scale(c, n->scale), false,
                       f->qr ? ATTN_DTYPE_F32 : f->q->dt);
    if (f->pairs) { /* qt as pairs (d, d + 1), in place: pair i is written over d = i */
        cg_loop lq = cg_for(c, cg_i64(c, 0), cg_i64(c, f->hd / 2), "qpair");
        LLVMValueRef d = LLVMBuildMul(c->b, lq.i, cg_i64(c, 2), "");
        for (int v = 0; v < f->rv; v++) {
            LLVMValueRef a = cg_vload(c, ATTN_DTYPE_F32, line_ptr(c, f, f->qt, d, v));
            LLVMValueRef b =
                cg_vload(c, ATTN_DTYPE_F32,
                         line_ptr(c, f, f->qt, LLVMBuildAdd(c->b, d, cg_i64(c, 1), ""), v));
            LLVMBuildStore(c->b, cg_dot_pair(c, a, b), line_ptr(c, f, f->qt, lq.i, v));
        }
        cg_for_end(c, &lq);
    }
    /* ot = 0 */
    cg_loop lz = cg_for(c, cg_i64(c, 0), cg_i64(c, f->vd), "d");
    for (int v = 0; v < f->rv; v++)
        cg_vstore(c, ATTN_DTYPE_F32, cg_vf32(c, 0), line_ptr(c, f, f->ot, lz.i, v));
    cg_for_end(c, &lz);
    /* positions of the rows (token-major) and the keys any of them sees */
    for (int v = 0; v < f->rv; v++) { /* i32: positions stay below ATTN_MAX_TOKENS */
        LLVMValueRef e[64];
        for (int l = 0; l < f->lanes; l++)
            e[l] = LLVMConstInt(c->i32, (unsigned long long)((v * f->lanes + l) / f->hpi * f->dil),
                                false);
        LLVMValueRef posv = LLVMBuildAdd(
            c->b, cg_splat(c, LLVMBuildTrunc(c->b, LLVMBuildAdd(c->b, c->P, s0, ""), c->i32, "")),
            LLVMConstVector(e, (unsigned)f->lanes), "posv");
        LLVMValueRef at = cg_gep(c, c->i32, f->pos, cg_i64(c, (int64_t)v * f->lanes));
        LLVMSetAlignment(LLVMBuildStore(c->b, posv, at), 4);
        if (f->n_pre) { /* the score_mod's row parts (kv stands in for the shape) */
            LLVMValueRef vals[ATTN_EXPR_MAX_NODES];
            cg_expr_at ex = {cg_vf32(c, 0), posv, posv, row_head(c, f, v), NULL};
            cg_expr_values(c, cg_expr_of(c, false), &ex, vals);
            for (int i = 0; i < f->n_pre; i++)
                cg_vstore(c, ATTN_DTYPE_F32, vals[f->pre_node[i]], row_pre_at(c, f, i, f->pre, v));
        }
    }
    for (int r = 0; f->tb && r < f->rows; r += (int)f->hpi) { /* a draft tree: a word per token */
        LLVMValueRef bits =
            cg_tree_bits(c, LLVMBuildAdd(c->b, s0, cg_i64(c, r / f->hpi * f->dil), ""));
        for (int h = r; h < r + f->hpi && h < f->rows; h++)
            LLVMBuildStore(c->b, bits, cg_gep(c, c->i64, f->tb, cg_i64(c, h)));
    }
}

/* The key tiles the item's rows see (its chunk of them when split), each
 * through key_tile. */
static void item_keys(cg *c, const flash *f, LLVMValueRef kvh, LLVMValueRef s0, LLVMValueRef kc,
                      const cg_chunks *ck, bool split) {
    const ir_node *n = f->n;
    int64_t bq = f->rows / f->hpi, dil = f->dil;
    LLVMValueRef left = LLVMBuildSub(c->b, c->S, s0, ""); /* > 0 */
    if (dil > 1)
        left = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, left, cg_i64(c, dil - 1), ""), cg_i64(c, dil),
                             "");
    LLVMValueRef ns = cg_intrinsic(c, "llvm.smin", c->i64, cg_i64(c, bq), left);
    LLVMValueRef pmin = LLVMBuildAdd(c->b, c->P, s0, "pmin");
    LLVMValueRef pmax = LLVMBuildAdd(
        c->b, pmin,
        LLVMBuildMul(c->b, LLVMBuildSub(c->b, ns, cg_i64(c, 1), ""), cg_i64(c, dil), ""), "pmax");
    LLVMValueRef jbeg = c->jlo, jend = c->T;
    if (n->causal) {
        jend = LLVMBuildAdd(c->b, pmax, cg_i64(c, 1), "jend");
        LLVMValueRef first = cg_first_key_at(c, pmin); /* the first row's: the smallest */
        if (first)
            jbeg = cg_intrinsic(c, "llvm.smax", c->i64, jbeg, first);
    }
    if (c->prefix) /* a prefix call (T = P): the prefix's keys, all its rows see them */
        jend = cg_intrinsic(c, "llvm.smin", c->i64, jend, c->T);
    if (split) { /* the item's chunk of those keys */
        jbeg = cg_intrinsic(c, "llvm.smax", c->i64, jbeg, cg_split_chunk_key(c, ck, kc));
        jend = cg_intrinsic(c, "llvm.smin", c->i64, jend,
                            cg_split_chunk_key(c, ck, LLVMBuildAdd(c->b, kc, cg_i64(c, 1), "")));
    }
    /* dilated: the keys of the rows' class, kres + dil * j for j in
     * [ceil((jbeg - kres) / dil), ceil((jend - kres) / dil)); key_at(j) <
     * jend exactly where j is below the second (both numerators >= 0) */
    flash g = *f;
    LLVMValueRef kend = jend;
    if (dil > 1) {
        LLVMValueRef r = LLVMBuildSRem(c->b, LLVMBuildAdd(c->b, pmin, cg_i64(c, f->dshift), ""),
                                       cg_i64(c, dil), "");
        g.kres =
            LLVMBuildSRem(c->b, LLVMBuildAdd(c->b, r, cg_i64(c, dil), ""), cg_i64(c, dil), "kres");
        LLVMValueRef j[2] = {jbeg, jend};
        for (int i = 0; i < 2; i++)
            j[i] = LLVMBuildSDiv(
                c->b,
                LLVMBuildAdd(c->b, LLVMBuildSub(c->b, j[i], g.kres, ""), cg_i64(c, dil - 1), ""),
                cg_i64(c, dil), "");
        jbeg = j[0], kend = j[1];
    }
    f = &g;
    LLVMValueRef ntk = LLVMBuildSDiv(
        c->b, LLVMBuildAdd(c->b, LLVMBuildSub(c->b, kend, jbeg, ""), cg_i64(c, f->bk - 1), ""),
        cg_i64(c, f->bk), "");
    cg_loop lt = cg_for(c, cg_i64(c, 0), ntk, "ktile");
    LLVMValueRef j0 =
        LLVMBuildAdd(c->b, jbeg, LLVMBuildMul(c->b, lt.i, cg_i64(c, f->bk), ""), "j0");
    LLVMValueRef jlast = LLVMBuildAdd(c->b, j0, cg_i64(c, f->bk - 1), "");
    LLVMValueRef k0 = key_at(c, f, j0), klast = key_at(c, f, jlast);
    g.doff = cg_i64(c, 0);
    if (f->dist >= 0 && !f->amx && f->dtiles > 1) { /* the table at each dtiles-th tile */
        LLVMValueRef o = LLVMBuildURem(c->b, lt.i, cg_i64(c, f->dtiles), "");
        LLVMBasicBlockRef built =
            cg_live_begin(c, LLVMBuildICmp(c->b, LLVMIntEQ, o, cg_i64(c, 0), ""));
        distance_table(c, f, j0);
        cg_live_end(c, built);
        g.doff = LLVMBuildMul(c->b, LLVMBuildSub(c->b, cg_i64(c, f->dtiles - 1), o, ""),
                              cg_i64(c, f->bk * f->hpi), "doff");
    }
    /* some key of the tile is hidden from some row: guard p.v */
    LLVMValueRef partial = cg_tile_cut(c, n, k0, klast, jend, pmin, pmax);
    /* a tile mask_mod hides from every row: skipped */
    LLVMBasicBlockRef done = cg_live_begin(c, cg_tile_live(c, n, k0, klast, pmin, pmax));
    key_tile(c, f, kvh, j0, kend, partial);
    cg_live_end(c, done);
    cg_for_end(c, &lt);
}

/* The item's rows out: ot / l into the output, or (split) the chunk's m,
 * l and o into the split buffer. */
static void item_out(cg *c, const flash *f, LLVMValueRef kvh, LLVMValueRef chunk, LLVMValueRef s0,
                     LLVMValueRef kc, bool split) {
    const ir_node *n = f->n;
    LLVMValueRef hh, tok, ok;
    /* out[d, head, tok] = ot[d][r] / l[r], split: the chunk's m, l and o
     * of the row; blocks of lanes d's after the row loop, the d's past
     * the last block here */
    const ir_node *dst = split ? NULL : n;
    int64_t ob = f->amx ? 0 : in_blocks(c, f, dst, f->vd);
    cg_loop lo = cg_for(c, cg_i64(c, 0), cg_i64(c, f->rows), "r");
    row_of(c, f, kvh, chunk, s0, lo.i, &hh, &tok, &ok);
    if (f->lv) { /* l = the sum of its vector's lanes */
        LLVMValueRef l = cg_intrinsic(
            c, "llvm.vector.reduce.fadd", c->vf, cg_f32(c, 0),
            cg_vload(c, ATTN_DTYPE_F32,
                     at_f32(c, f->lv, LLVMBuildMul(c->b, lo.i, cg_i64(c, f->lanes), ""))));
        LLVMSetFastMathFlags(l, LLVMFastMathAllowReassoc);
        LLVMBuildStore(c->b, l, at_f32(c, f->l, lo.i));
    }
    LLVMValueRef inv =
        split ? NULL : cg_inv_sum(c, n, LLVMBuildLoad2(c->b, c->f32, at_f32(c, f->l, lo.i), ""));
    LLVMValueRef row =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, tok, cg_i64(c, ir_cfg_heads(c->g)), ""), hh, "row");
    /* a prefix call (attn_kernel_args): the row's m, l and unnormalized
     * output go to its batch row of the cascade buffer instead */
    LLVMValueRef pre = split ? NULL : c->prefix, cas = NULL;
    if (pre) {
        cas = cg_split_cascade_row(c, n, row);
        inv = LLVMBuildSelect(c->b, pre, cg_f32(c, 1), inv, "");
    }
    if (ob) { /* a row past the item stores its blocks to the dummy */
        LLVMValueRef oi[3] = {cg_i64(c, 0), hh, tok};
        LLVMValueRef at = split ? cg_split_part(c, n, kc, row, cg_i64(c, 2)) : cg_addr(c, n, oi);
        if (pre)
            at = LLVMBuildSelect(c->b, pre, cg_gep(c, c->f32, cas, cg_i64(c, 2)), at, "");
        LLVMBuildStore(c->b, LLVMBuildSelect(c->b, ok, at, f->dummy, ""),
                       cg_gep(c, c->ptr, f->rowp, lo.i));
        if (inv)
            LLVMBuildStore(c->b, inv, at_f32(c, f->inv, lo.i));
    }
    LLVMBasicBlockRef store = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "store");
    LLVMBasicBlockRef skip = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "skip");
    LLVMBuildCondBr(c->b, ok, store, skip);
    LLVMPositionBuilderAtEnd(c->b, store);
    if (split || pre) {
        LLVMBasicBlockRef put = cg_live_begin(c, pre);
        LLVMValueRef ml[2] = {f->m, f->l};
        for (int e = 0; e < 2; e++)
            LLVMBuildStore(c->b, LLVMBuildLoad2(c->b, c->f32, at_f32(c, ml[e], lo.i), ""),
                           split ? cg_split_part(c, n, kc, row, cg_i64(c, e))
                                 : cg_gep(c, c->f32, cas, cg_i64(c, e)));
        cg_live_end(c, put);
    }
    if (f->amx) { /* ot[r] row-major; the output's rows are contiguous (f->amx) */
        LLVMValueRef oi[3] = {cg_i64(c, 0), hh, tok}, out = cg_addr(c, n, oi);
        if (pre)
            out = LLVMBuildSelect(c->b, pre, cg_gep(c, c->f32, cas, cg_i64(c, 2)), out, "");
        LLVMValueRef orow = at_f32(c, f->ot, LLVMBuildMul(c->b, lo.i, cg_i64(c, f->vd), ""));
        for (int64_t d = 0; d < f->vd; d += f->lanes)
            cg_vstore(c, n->dt,
                      LLVMBuildFMul(c->b,
                                    cg_vload(c, ATTN_DTYPE_F32, at_f32(c, orow, cg_i64(c, d))),
                                    cg_splat(c, inv), ""),
                      cg_gep(c, cg_elem_type(c, n->dt), out, cg_i64(c, d)));
    } else if (ob < f->vd) {
        cg_loop ld = cg_for(c, cg_i64(c, ob), cg_i64(c, f->vd), "d");
        LLVMValueRef src =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, ld.i, cg_i64(c, f->rows), ""), lo.i, "");
        LLVMValueRef x = LLVMBuildLoad2(c->b, c->f32, at_f32(c, f->ot, src), "");
        LLVMValueRef oi[3] = {ld.i, hh, tok};
        LLVMValueRef to = cg_addr(c, n, oi);
        if (pre)
            to = LLVMBuildSelect(c->b, pre,
                                 cg_gep(c, c->f32, cas, LLVMBuildAdd(c->b, ld.i, cg_i64(c, 2), "")),
                                 to, "");
        if (split)
            LLVMBuildStore(
                c->b, x, cg_split_part(c, n, kc, row, LLVMBuildAdd(c->b, ld.i, cg_i64(c, 2), "")));
        else
            cg_store(c, n->dt, LLVMBuildFMul(c->b, x, inv, ""), to);
        cg_for_end(c, &ld);
    }
    LLVMBuildBr(c->b, skip);
    LLVMPositionBuilderAtEnd(c->b, skip);
    cg_for_end(c, &lo);
    rows_in_blocks(c, f, ob, true, 1.0, !split, split ? ATTN_DTYPE_F32 : n->dt);
}

static void flash_items(cg *c, const flash *fp, bool split) {
    flash_items_at(c, fp, split, NULL, NULL);
}

/* The items of tokens [s_base, s_end) (NULL: 0 and S; the rows past S
 * of an item are left out as ever). */
static void flash_items_at(cg *c, const flash *fp, bool split, LLVMValueRef s_base,
                           LLVMValueRef s_end) {
    flash f = *fp;
    const ir_node *n = f.n;
    int64_t bq = f.rows / f.hpi, dil = f.dil; /* tokens per item */
    ATTNC_ASSERT(dil == 1 || !split);
    ATTNC_ASSERT(dil == 1 || (!s_base && !s_end));
    LLVMValueRef tokens = s_end ? s_end : c->S;
    if (s_base)
        tokens = LLVMBuildSub(c->b, tokens, s_base, "");
    /* dilated: each class of tokens s = rho (mod dil) in items of its own,
     * ceil(ceil(S / dil) / bq) per class (the last ones of a class with
     * fewer tokens may hold none: skipped) */
    LLVMValueRef per_class =
        LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, tokens, cg_i64(c, dil - 1), ""), cg_i64(c, dil), "");
    LLVMValueRef ntq =
        LLVMBuildMul(c->b,
                     LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, per_class, cg_i64(c, bq - 1), ""),
                                   cg_i64(c, bq), ""),
                     cg_i64(c, dil), "");
    int64_t per_tile = f.k->ne[1].c * f.chunks;
    LLVMValueRef per_chunk = LLVMBuildMul(c->b, ntq, cg_i64(c, per_tile), "items");
    /* for (i = ith; i < items; i += nth), split: for (i = lo; i < hi; i++) */
    cg_chunks ck;
    LLVMValueRef i0 = c->ith, items = per_chunk, step = c->nth;
    if (split) {
        cg_split_chunks(c, n, &ck);
        cg_share(c, LLVMBuildMul(c->b, ck.nc, per_chunk, ""), &i0, &items);
        step = cg_i64(c, 1);
    }
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "item");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "item_body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "items_done");
    LLVMBuildBr(c->b, head);
    LLVMPositionBuilderAtEnd(c->b, head);
    LLVMValueRef item = LLVMBuildPhi(c->b, c->i64, "i");
    LLVMAddIncoming(item, &i0, &pre, 1);
    LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, item, items, ""), body, exit);
    LLVMPositionBuilderAtEnd(c->b, body);

    LLVMValueRef kc = NULL, in_chunk = item;
    if (split) {
        kc = LLVMBuildSDiv(c->b, item, per_chunk, "kchunk");
        in_chunk = LLVMBuildSRem(c->b, item, per_chunk, "");
    }
    LLVMValueRef tq = LLVMBuildSDiv(c->b, in_chunk, cg_i64(c, per_tile), "tq");
    LLVMValueRef rest = LLVMBuildSRem(c->b, in_chunk, cg_i64(c, per_tile), "");
    LLVMValueRef kvh = LLVMBuildSDiv(c->b, rest, cg_i64(c, f.chunks), "kvh");
    LLVMValueRef chunk = LLVMBuildSRem(c->b, rest, cg_i64(c, f.chunks), "chunk");
    LLVMValueRef s0 = LLVMBuildMul(c->b, tq, cg_i64(c, bq), "s0");
    if (s_base)
        s0 = LLVMBuildAdd(c->b, s0, s_base, "s0");
    LLVMBasicBlockRef some = NULL;
    if (dil > 1) { /* class tq % dil, its tokens' item tq / dil */
        s0 = LLVMBuildAdd(c->b, LLVMBuildSRem(c->b, tq, cg_i64(c, dil), ""),
                          LLVMBuildMul(c->b, LLVMBuildSDiv(c->b, tq, cg_i64(c, dil), ""),
                                       cg_i64(c, bq * dil), ""),
                          "s0");
        some = cg_live_begin(c, LLVMBuildICmp(c->b, LLVMIntSLT, s0, c->S, ""));
    }

    item_rows(c, &f, kvh, chunk, s0, split);
    item_keys(c, &f, kvh, s0, kc, &ck, split);
    item_out(c, &f, kvh, chunk, s0, kc, split);
    cg_live_end(c, some);
    flash_next(c, item, step, head, exit);
}
