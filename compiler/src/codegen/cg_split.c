/* cg_split.c: the decode path of a flash node with split_kv (decode_split
 * pass): calls with at most split_tokens new tokens per sequence.
 *
 * The keys any row sees, [jbeg, jend), are cut into at most SPLIT_CHUNKS
 * chunks of ck keys (a multiple of the vector width, at least
 * SPLIT_MIN_KEYS): the cut depends on the key count only. A work item is
 * one chunk, with all query rows (new tokens x heads); chunks are dealt
 * round-robin to the threads. Keys come in tiles of one vector width;
 * within a tile, K/V heads come in batches (as many as fit 128 KB of f32):
 * a batch's rows of all the tile's keys are converted to f32 into a stack
 * stage key by key (each cache row read in order, the next tile's rows
 * prefetched), once for all query heads of each group; an f32 cache with
 * whole-vector rows is read in place instead. For each row the tile's
 * scores are head_dim-wide dot products reduced together into one vector
 * (a score per lane), then an online softmax and p.v as vectors over
 * head_dim. The chunk's result per row is its max m, sum l and
 * unnormalized output o, stored to the node's split buffer.
 *
 * The merge kernel (a step of its own, after all items) combines each
 * row's chunks in chunk order: out = sum_c e^(m_c - M) o_c / sum_c
 * e^(m_c - M) l_c, M the largest m_c. Nothing depends on the thread
 * count. For calls with more new tokens the flash kernel runs its own
 * path and the merge kernel returns at once. */
#include <math.h>

#include "codegen/cg.h"

enum {
    SPLIT_CHUNKS = 16,
    SPLIT_MIN_KEYS = 64,
    SPLIT_STAGE_BYTES = 128 * 1024,
    SPLIT_MAX_VECTORS = ATTN_MAX_HEAD_DIM / 4 /* vectors of head_dim, 4 lanes at least */
};

typedef struct split {
    const ir_node *n, *q, *k, *v;
    int64_t hd, hdp, nv, group, hk, rows_max; /* padded head_dim, its vectors; rows_max =
                                                 heads x split_tokens */
    int lanes;
    attn_dtype kdt, vdt;
    bool in_place; /* K/V rows read from the cache as they are */
    int64_t gb;    /* K/V heads staged at once */
    int buf;       /* the partial results: [chunk][row][2 + hd], row = token x heads + head */
} split;

int64_t cg_split_elements(const ir_node *n, const attn_config *cfg) {
    return SPLIT_CHUNKS * cfg->heads * n->split_tokens * (cfg->head_dim + 2);
}

static split split_of(cg *c, const ir_node *n) {
    const attn_config *cfg = &c->g->cfg;
    split s = {.n = n, .q = n->args[0], .k = n->args[1], .v = n->args[2]};
    s.lanes = c->target.lanes;
    s.hd = cfg->head_dim;
    s.nv = (s.hd + s.lanes - 1) / s.lanes;
    s.hdp = s.nv * s.lanes;
    s.hk = s.k->ne[1].c;
    s.group = cfg->heads / s.hk;
    s.rows_max = cfg->heads * n->split_tokens;
    s.kdt = c->plan->view[s.k->id].dt;
    s.vdt = c->plan->view[s.v->id].dt;
    /* f16/bf16 rows are converted once into the stage (measured faster
     * than converting them for every query row) */
    s.in_place = s.hd == s.hdp && s.kdt == ATTN_DTYPE_F32 && s.vdt == ATTN_DTYPE_F32;
    s.gb = SPLIT_STAGE_BYTES / (s.lanes * s.hdp * 8);
    s.gb = s.gb < 1 ? 1 : s.gb > s.hk ? s.hk : s.gb;
    s.buf = c->plan->split[n->id];
    /* rows of q, k, v and the output are contiguous over head_dim */
    const ir_node *rows[4] = {s.q, s.k, s.v, n};
    for (int i = 0; i < 4; i++)
        ATTNC_ASSERT(ir_dim_eq(c->plan->view[rows[i]->id].nb[0], ir_const(1)));
    return s;
}

/* The keys the call's rows see, [*jbeg, *jend), and their chunks: *nc of
 * *ck keys. Shared by both kernels, so they agree. */
static void chunks(cg *c, const split *s, LLVMValueRef *jbeg, LLVMValueRef *jend, LLVMValueRef *ck,
                   LLVMValueRef *nc) {
    const attn_config *cfg = &c->g->cfg;
    *jbeg = c->jlo;
    *jend = c->T;
    if (s->n->causal && cfg->sliding_window > 0)
        *jbeg = cg_intrinsic(c, "llvm.smax", c->i64, *jbeg,
                             LLVMBuildSub(c->b, c->P, cg_i64(c, cfg->sliding_window - 1), ""));
    LLVMValueRef nk = LLVMBuildSub(c->b, *jend, *jbeg, "");
    LLVMValueRef per = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, nk, cg_i64(c, SPLIT_CHUNKS - 1), ""),
                                     cg_i64(c, SPLIT_CHUNKS), "");
    per = LLVMBuildMul(c->b,
                       LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, per, cg_i64(c, s->lanes - 1), ""),
                                     cg_i64(c, s->lanes), ""),
                       cg_i64(c, s->lanes), "");
    *ck = cg_intrinsic(c, "llvm.smax", c->i64, per, cg_i64(c, SPLIT_MIN_KEYS));
    *nc = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, nk, LLVMBuildSub(c->b, *ck, cg_i64(c, 1), ""), ""), *ck,
                        "nc");
}

/* Element e of row r of chunk in the split buffer. */
static LLVMValueRef part_at(cg *c, const split *s, LLVMValueRef chunk, LLVMValueRef r, int64_t e) {
    LLVMValueRef row = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, chunk, cg_i64(c, s->rows_max), ""), r, "");
    LLVMValueRef off = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, row, cg_i64(c, s->hd + 2), ""), cg_i64(c, e), "");
    return cg_buf_elem(c, s->buf, ATTN_DTYPE_F32, off);
}

/* Lane j of the result is the sum of the lanes of v[j] (lanes vectors):
 * pairs of vectors fold their halves together, log2(lanes) times, and a
 * last shuffle puts the sums in key order. */
static LLVMValueRef sum_across(cg *c, LLVMValueRef *v) {
    int L = c->target.lanes, n = L, w = L;
    LLVMValueRef cur[64];
    int key[64][64]; /* key[i][seg]: whose sums segment seg of cur[i] holds */
    for (int i = 0; i < L; i++) {
        cur[i] = v[i];
        key[i][0] = i;
    }
    while (w > 1) {
        int h = w / 2, nseg = L / w;
        for (int i = 0; i < n / 2; i++) {
            LLVMValueRef lo_idx[64], hi_idx[64];
            int nk[64];
            for (int sg = 0; sg < nseg; sg++)
                for (int ab = 0; ab < 2; ab++) {
                    int to = (2 * sg + ab) * h, from = ab * L + sg * w;
                    for (int l = 0; l < h; l++) {
                        lo_idx[to + l] = LLVMConstInt(c->i32, (unsigned)(from + l), false);
                        hi_idx[to + l] = LLVMConstInt(c->i32, (unsigned)(from + h + l), false);
                    }
                    nk[2 * sg + ab] = key[2 * i + ab][sg];
                }
            LLVMValueRef a = cur[2 * i], b = cur[2 * i + 1];
            cur[i] = LLVMBuildFAdd(c->b, LLVMBuildShuffleVector(c->b, a, b, LLVMConstVector(lo_idx, (unsigned)L), ""),
                                   LLVMBuildShuffleVector(c->b, a, b, LLVMConstVector(hi_idx, (unsigned)L), ""), "");
            for (int sg = 0; sg < 2 * nseg; sg++)
                key[i][sg] = nk[sg];
        }
        n /= 2;
        w = h;
    }
    int perm[64];
    for (int l = 0; l < L; l++)
        perm[key[0][l]] = l;
    return cg_shuffle(c, cur[0], perm, L);
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

/* Copies head_dim elements of the row at p (dtype dt) to f32 at dst,
 * zero-padded to whole vectors. */
static void stage_row(cg *c, const split *s, attn_dtype dt, LLVMValueRef p, LLVMValueRef dst, double scale) {
    LLVMTypeRef et = dt == ATTN_DTYPE_F32 ? c->f32 : dt == ATTN_DTYPE_F16 ? c->f16 : c->i16;
    for (int64_t v = 0; v < s->nv; v++) {
        LLVMValueRef to = cg_gep(c, c->f32, dst, cg_i64(c, v * s->lanes));
        if ((v + 1) * s->lanes <= s->hd) {
            LLVMValueRef x = cg_vload(c, dt, cg_gep(c, et, p, cg_i64(c, v * s->lanes)));
            if (scale != 1.0)
                x = LLVMBuildFMul(c->b, x, cg_vf32(c, scale), "");
            cg_vstore(c, ATTN_DTYPE_F32, x, to);
            continue;
        }
        for (int64_t d = v * s->lanes; d < s->hdp; d++) {
            LLVMValueRef x = cg_f32(c, 0);
            if (d < s->hd) {
                x = cg_load(c, dt, cg_gep(c, et, p, cg_i64(c, d)));
                if (scale != 1.0)
                    x = LLVMBuildFMul(c->b, x, cg_f32(c, scale), "");
            }
            LLVMBuildStore(c->b, x, cg_gep(c, c->f32, dst, cg_i64(c, d)));
        }
    }
}

/* Asks for the cache lines of the head_dim elements at p (dtype dt). */
static void prefetch_row(cg *c, const split *s, attn_dtype dt, LLVMValueRef p) {
    LLVMTypeRef ty = c->ptr;
    unsigned id = LLVMLookupIntrinsicID("llvm.prefetch", 13);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, &ty, 1);
    LLVMTypeRef fty = LLVMIntrinsicGetType(c->llctx, id, &ty, 1);
    int64_t bytes = s->hd * (int64_t)attn_dtype_size(dt);
    for (int64_t at = 0; at < bytes; at += 64) {
        LLVMValueRef args[4] = {cg_gep(c, LLVMInt8TypeInContext(c->llctx), p, cg_i64(c, at)),
                                LLVMConstInt(c->i32, 0, false), LLVMConstInt(c->i32, 3, false),
                                LLVMConstInt(c->i32, 1, false)};
        LLVMBuildCall2(c->b, fty, fn, args, 4, "");
    }
}

/* Vector v of the row at p (dtype dt), as f32. */
static LLVMValueRef row_vec(cg *c, const split *s, attn_dtype dt, LLVMValueRef p, int64_t v) {
    LLVMTypeRef et = dt == ATTN_DTYPE_F32 ? c->f32 : dt == ATTN_DTYPE_F16 ? c->f16 : c->i16;
    return cg_vload(c, dt, cg_gep(c, et, p, cg_i64(c, v * s->lanes)));
}

/* o[row] = o * alpha + sum_j p[j] v[j] over one tile; `guarded`: a key of
 * weight 0 adds nothing even if its v is not finite (as in flash). */
static void pv_row(cg *c, const split *s, LLVMValueRef orow, const LLVMValueRef *vrow, LLVMValueRef p,
                   LLVMValueRef alpha, bool guarded) {
    LLVMValueRef acc[SPLIT_MAX_VECTORS];
    for (int64_t v = 0; v < s->nv; v++)
        acc[v] = LLVMBuildFMul(c->b, cg_vload(c, ATTN_DTYPE_F32, cg_gep(c, c->f32, orow, cg_i64(c, v * s->lanes))),
                               cg_splat(c, alpha), "");
    for (int j = 0; j < s->lanes; j++) {
        int idx[64];
        for (int l = 0; l < s->lanes; l++)
            idx[l] = j;
        LLVMValueRef pj = cg_shuffle(c, p, idx, s->lanes);
        LLVMValueRef zero = guarded ? LLVMBuildFCmp(c->b, LLVMRealOEQ, pj, cg_vf32(c, 0), "") : NULL;
        for (int64_t v = 0; v < s->nv; v++) {
            LLVMValueRef vv = row_vec(c, s, s->in_place ? s->vdt : ATTN_DTYPE_F32, vrow[j], v);
            LLVMValueRef sum = cg_fma(c, pj, vv, acc[v]);
            acc[v] = guarded ? LLVMBuildSelect(c->b, zero, acc[v], sum, "") : sum;
        }
    }
    for (int64_t v = 0; v < s->nv; v++)
        cg_vstore(c, ATTN_DTYPE_F32, acc[v], cg_gep(c, c->f32, orow, cg_i64(c, v * s->lanes)));
}

void cg_emit_split_partials(cg *c, const ir_node *n) {
    const attn_config *cfg = &c->g->cfg;
    split s = split_of(c, n);
    int L = s.lanes;
    ATTNC_ASSERT(s.nv <= SPLIT_MAX_VECTORS && L <= 64);
    LLVMValueRef qs = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(s.rows_max * s.hdp)), NULL);
    LLVMValueRef os = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(s.rows_max * s.hdp)), NULL);
    /* K and V stages in one array, V 17 cache lines past a multiple of 4 KB
     * after K: stores to one and loads from the other never share the low
     * address bits a store-to-load check compares */
    int64_t stage = (L * s.gb * s.hdp + 1023) / 1024 * 1024 + 17 * 16;
    LLVMValueRef kt = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(stage + L * s.gb * s.hdp)), NULL);
    LLVMValueRef vt = cg_gep(c, c->f32, kt, cg_i64(c, stage));
    LLVMValueRef ms = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)s.rows_max), NULL);
    LLVMValueRef ls = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)s.rows_max), NULL);
    LLVMValueRef slots[3] = {qs, os, kt};
    for (int i = 0; i < 3; i++)
        LLVMSetAlignment(slots[i], 64);

    LLVMValueRef jbeg, jend, ck, nc;
    chunks(c, &s, &jbeg, &jend, &ck, &nc);
    LLVMValueRef rows = LLVMBuildMul(c->b, c->S, cg_i64(c, cfg->heads), "rows");
    /* chunk = ith + i * nth */
    LLVMValueRef mine = LLVMBuildSDiv(
        c->b, LLVMBuildAdd(c->b, LLVMBuildSub(c->b, nc, c->ith, ""), LLVMBuildSub(c->b, c->nth, cg_i64(c, 1), ""), ""),
        c->nth, "");
    cg_loop li = cg_for(c, cg_i64(c, 0), mine, "item");
    LLVMValueRef chunk = LLVMBuildAdd(c->b, c->ith, LLVMBuildMul(c->b, li.i, c->nth, ""), "chunk");
    LLVMValueRef cj0 = LLVMBuildAdd(c->b, jbeg, LLVMBuildMul(c->b, chunk, ck, ""), "cj0");
    LLVMValueRef cj1 = cg_intrinsic(c, "llvm.smin", c->i64, LLVMBuildAdd(c->b, cj0, ck, ""), jend);

    /* the rows' queries (scaled) and empty results; row = token * heads + head */
    cg_loop lr = cg_for(c, cg_i64(c, 0), rows, "r");
    LLVMValueRef qi[3] = {cg_i64(c, 0), LLVMBuildSRem(c->b, lr.i, cg_i64(c, cfg->heads), ""),
                          LLVMBuildSDiv(c->b, lr.i, cg_i64(c, cfg->heads), "")};
    LLVMValueRef at = LLVMBuildMul(c->b, lr.i, cg_i64(c, s.hdp), "");
    stage_row(c, &s, s.q->dt, cg_addr(c, s.q, qi), cg_gep(c, c->f32, qs, at), n->factor);
    for (int64_t v = 0; v < s.nv; v++)
        cg_vstore(c, ATTN_DTYPE_F32, cg_vf32(c, 0), cg_gep(c, c->f32, os, LLVMBuildAdd(c->b, at, cg_i64(c, v * L), "")));
    LLVMBuildStore(c->b, cg_f32(c, -INFINITY), cg_gep(c, c->f32, ms, lr.i));
    LLVMBuildStore(c->b, cg_f32(c, 0), cg_gep(c, c->f32, ls, lr.i));
    cg_for_end(c, &lr);

    LLVMValueRef nt = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, LLVMBuildSub(c->b, cj1, cj0, ""), cg_i64(c, L - 1), ""),
                                    cg_i64(c, L), "");
    cg_loop lt = cg_for(c, cg_i64(c, 0), nt, "ktile");
    LLVMValueRef j0 = LLVMBuildAdd(c->b, cj0, LLVMBuildMul(c->b, lt.i, cg_i64(c, L), ""), "j0");
    /* some key of the tile is hidden from some row: guard p.v */
    LLVMValueRef jlast = LLVMBuildAdd(c->b, j0, cg_i64(c, L - 1), "");
    LLVMValueRef pmax = LLVMBuildSub(c->b, LLVMBuildAdd(c->b, c->P, c->S, ""), cg_i64(c, 1), "");
    LLVMValueRef partial = cg_tile_cut(c, n, j0, jlast, cj1, c->P, pmax);
    LLVMValueRef keys = LLVMBuildAdd(c->b, cg_splat(c, LLVMBuildTrunc(c->b, j0, c->i32, "")), cg_lane_ids(c), "keys");
    LLVMValueRef past = LLVMBuildICmp(c->b, LLVMIntSGE, keys, cg_splat(c, LLVMBuildTrunc(c->b, cj1, c->i32, "")), "");

    /* K/V heads in batches of gb: unless read in place, a batch's rows of all
     * the tile's keys are staged first, key by key (cache rows in order, one
     * contiguous run per key), then its heads are computed from the stage */
    cg_loop lb = cg_for(c, cg_i64(c, 0), cg_i64(c, (s.hk + s.gb - 1) / s.gb), "kvbatch");
    LLVMValueRef g0 = LLVMBuildMul(c->b, lb.i, cg_i64(c, s.gb), "g0");
    LLVMValueRef gn = cg_intrinsic(c, "llvm.smin", c->i64, cg_i64(c, s.gb), LLVMBuildSub(c->b, cg_i64(c, s.hk), g0, ""));
    if (!s.in_place) {
        cg_loop lj = cg_for(c, cg_i64(c, 0), cg_i64(c, L), "stage_key");
        /* keys past the chunk read its last key (masked below) */
        LLVMValueRef kj = cg_intrinsic(c, "llvm.smin", c->i64, LLVMBuildAdd(c->b, j0, lj.i, ""),
                                       LLVMBuildSub(c->b, cj1, cg_i64(c, 1), ""));
        cg_loop lh = cg_for(c, cg_i64(c, 0), gn, "stage_head");
        LLVMValueRef ki[3] = {cg_i64(c, 0), LLVMBuildAdd(c->b, g0, lh.i, ""), kj};
        LLVMValueRef to = LLVMBuildMul(c->b, LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lj.i, cg_i64(c, s.gb), ""), lh.i, ""),
                                       cg_i64(c, s.hdp), "");
        stage_row(c, &s, s.kdt, cg_addr(c, s.k, ki), cg_gep(c, c->f32, kt, to), 1.0);
        stage_row(c, &s, s.vdt, cg_addr(c, s.v, ki), cg_gep(c, c->f32, vt, to), 1.0);
        /* the same rows of the next tile, on their way while this one computes */
        ki[2] = cg_intrinsic(c, "llvm.smin", c->i64, LLVMBuildAdd(c->b, ki[2], cg_i64(c, L), ""),
                             LLVMBuildSub(c->b, jend, cg_i64(c, 1), ""));
        prefetch_row(c, &s, s.kdt, cg_addr(c, s.k, ki));
        prefetch_row(c, &s, s.vdt, cg_addr(c, s.v, ki));
        cg_for_end(c, &lh);
        cg_for_end(c, &lj);
    }
    cg_loop lgi = cg_for(c, cg_i64(c, 0), gn, "kvh");
    LLVMValueRef kvh = LLVMBuildAdd(c->b, g0, lgi.i, "kvh");
    LLVMValueRef krow[64], vrow[64];
    for (int j = 0; j < L; j++) {
        if (s.in_place) {
            LLVMValueRef kj = cg_intrinsic(c, "llvm.smin", c->i64, LLVMBuildAdd(c->b, j0, cg_i64(c, j), ""),
                                           LLVMBuildSub(c->b, cj1, cg_i64(c, 1), ""));
            LLVMValueRef ki[3] = {cg_i64(c, 0), kvh, kj};
            krow[j] = cg_addr(c, s.k, ki);
            vrow[j] = cg_addr(c, s.v, ki);
        } else {
            LLVMValueRef e = LLVMBuildMul(c->b, LLVMBuildAdd(c->b, cg_i64(c, (int64_t)j * s.gb), lgi.i, ""),
                                          cg_i64(c, s.hdp), "");
            krow[j] = cg_gep(c, c->f32, kt, e);
            vrow[j] = cg_gep(c, c->f32, vt, e);
        }
    }
    /* the group's rows: token tok, head kvh * group + hh */
    cg_loop lr2 = cg_for(c, cg_i64(c, 0), LLVMBuildMul(c->b, c->S, cg_i64(c, s.group), ""), "row");
    LLVMValueRef tok = LLVMBuildSDiv(c->b, lr2.i, cg_i64(c, s.group), "tok");
    LLVMValueRef r = LLVMBuildAdd(
        c->b, LLVMBuildMul(c->b, tok, cg_i64(c, cfg->heads), ""),
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, kvh, cg_i64(c, s.group), ""), LLVMBuildSRem(c->b, lr2.i, cg_i64(c, s.group), ""), ""),
        "r");
    LLVMValueRef base = LLVMBuildMul(c->b, r, cg_i64(c, s.hdp), "");
    LLVMValueRef qrow = cg_gep(c, c->f32, qs, base), orow = cg_gep(c, c->f32, os, base);
    LLVMValueRef qv[SPLIT_MAX_VECTORS], acc[64];
    for (int64_t v = 0; v < s.nv; v++)
        qv[v] = cg_vload(c, ATTN_DTYPE_F32, cg_gep(c, c->f32, qrow, cg_i64(c, v * L)));
    for (int j = 0; j < L; j++) {
        attn_dtype kdt = s.in_place ? s.kdt : ATTN_DTYPE_F32;
        acc[j] = LLVMBuildFMul(c->b, qv[0], row_vec(c, &s, kdt, krow[j], 0), "");
        for (int64_t v = 1; v < s.nv; v++)
            acc[j] = cg_fma(c, qv[v], row_vec(c, &s, kdt, krow[j], v), acc[j]);
    }
    LLVMValueRef sc = cg_softcap(c, n, sum_across(c, acc));
    LLVMValueRef posv = cg_splat(c, LLVMBuildTrunc(c->b, LLVMBuildAdd(c->b, c->P, tok, ""), c->i32, ""));
    LLVMValueRef hidden = cg_keys_hidden(c, n, keys, posv, past);
    sc = LLVMBuildSelect(c->b, hidden, cg_vf32(c, -INFINITY), sc, "");
    /* online softmax over the row's keys so far */
    LLVMValueRef mp = cg_gep(c, c->f32, ms, r), lp = cg_gep(c, c->f32, ls, r);
    LLVMValueRef mold = LLVMBuildLoad2(c->b, c->f32, mp, "");
    LLVMValueRef mnew = cg_intrinsic(c, "llvm.maxnum", c->f32, mold, max_across(c, sc));
    /* a row that has seen only hidden keys keeps max -inf: use 0 then */
    LLVMValueRef muse = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, mnew, cg_f32(c, -INFINITY), ""),
                                        cg_f32(c, 0), mnew, "");
    LLVMValueRef alpha = cg_exp_nonpos(c, LLVMBuildFSub(c->b, mold, muse, ""));
    LLVMValueRef p = cg_exp_nonpos(c, LLVMBuildFSub(c->b, sc, cg_splat(c, muse), ""));
    LLVMValueRef l = LLVMBuildFMul(c->b, LLVMBuildLoad2(c->b, c->f32, lp, ""), alpha, "");
    LLVMValueRef psum = cg_intrinsic(c, "llvm.vector.reduce.fadd", c->vf, cg_f32(c, -0.0), p);
    LLVMSetFastMathFlags(psum, LLVMFastMathAllowReassoc);
    LLVMBuildStore(c->b, LLVMBuildFAdd(c->b, l, psum, ""), lp);
    LLVMBuildStore(c->b, mnew, mp);
    LLVMBasicBlockRef guarded = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_partial");
    LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_full");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "pv_done");
    LLVMBuildCondBr(c->b, partial, guarded, plain);
    LLVMPositionBuilderAtEnd(c->b, guarded);
    pv_row(c, &s, orow, vrow, p, alpha, true);
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, plain);
    pv_row(c, &s, orow, vrow, p, alpha, false);
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, done);
    cg_for_end(c, &lr2);
    cg_for_end(c, &lgi);
    cg_for_end(c, &lb);
    cg_for_end(c, &lt);

    /* the chunk's m, l, o per row */
    cg_loop lw = cg_for(c, cg_i64(c, 0), rows, "r");
    LLVMBuildStore(c->b, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, ms, lw.i), ""), part_at(c, &s, chunk, lw.i, 0));
    LLVMBuildStore(c->b, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, ls, lw.i), ""), part_at(c, &s, chunk, lw.i, 1));
    LLVMValueRef src = cg_gep(c, c->f32, os, LLVMBuildMul(c->b, lw.i, cg_i64(c, s.hdp), ""));
    LLVMValueRef dst = part_at(c, &s, chunk, lw.i, 2);
    cg_loop ld = cg_for(c, cg_i64(c, 0), cg_i64(c, s.hd), "d");
    LLVMBuildStore(c->b, LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, src, ld.i), ""), cg_gep(c, c->f32, dst, ld.i));
    cg_for_end(c, &ld);
    cg_for_end(c, &lw);
    cg_for_end(c, &li);
}

void cg_emit_split_merge(cg *c, const ir_node *n, const char *name) {
    split s = split_of(c, n);
    int64_t H = c->g->cfg.heads;
    ATTNC_ASSERT(n->dt == ATTN_DTYPE_F32);
    cg_kernel_begin(c, name);
    LLVMValueRef wts = cg_slot(c, LLVMArrayType2(c->f32, SPLIT_CHUNKS), NULL);
    LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "merge");
    LLVMBasicBlockRef out = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "not_split");
    LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLE, c->S, cg_i64(c, n->split_tokens), ""), run, out);
    LLVMPositionBuilderAtEnd(c->b, out);
    LLVMBuildRetVoid(c->b);
    LLVMPositionBuilderAtEnd(c->b, run);
    LLVMValueRef jbeg, jend, ck, nc;
    chunks(c, &s, &jbeg, &jend, &ck, &nc);
    LLVMValueRef lo, hi;
    cg_share(c, LLVMBuildMul(c->b, c->S, cg_i64(c, H), ""), &lo, &hi);
    cg_loop lr = cg_for(c, lo, hi, "row"); /* row = token * heads + head */
    LLVMValueRef r = lr.i;
    /* the largest max M, each chunk's weight e^(m_c - M), their sum with l */
    LLVMValueRef mslot = cg_slot(c, c->f32, NULL), lslot = cg_slot(c, c->f32, NULL);
    LLVMBuildStore(c->b, cg_f32(c, -INFINITY), mslot);
    cg_loop lc = cg_for(c, cg_i64(c, 0), nc, "chunk");
    LLVMValueRef mc = LLVMBuildLoad2(c->b, c->f32, part_at(c, &s, lc.i, r, 0), "");
    LLVMBuildStore(c->b, cg_intrinsic(c, "llvm.maxnum", c->f32, LLVMBuildLoad2(c->b, c->f32, mslot, ""), mc), mslot);
    cg_for_end(c, &lc);
    LLVMValueRef M = LLVMBuildLoad2(c->b, c->f32, mslot, "M");
    M = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOEQ, M, cg_f32(c, -INFINITY), ""), cg_f32(c, 0), M, "");
    LLVMBuildStore(c->b, cg_f32(c, 0), lslot);
    cg_loop lc2 = cg_for(c, cg_i64(c, 0), nc, "chunk");
    LLVMValueRef w = cg_exp_nonpos(c, LLVMBuildFSub(c->b, LLVMBuildLoad2(c->b, c->f32, part_at(c, &s, lc2.i, r, 0), ""), M, ""));
    LLVMBuildStore(c->b, w, cg_gep(c, c->f32, wts, lc2.i));
    LLVMValueRef lw = LLVMBuildFMul(c->b, w, LLVMBuildLoad2(c->b, c->f32, part_at(c, &s, lc2.i, r, 1), ""), "");
    LLVMBuildStore(c->b, LLVMBuildFAdd(c->b, LLVMBuildLoad2(c->b, c->f32, lslot, ""), lw, ""), lslot);
    cg_for_end(c, &lc2);
    LLVMValueRef inv = LLVMBuildFDiv(c->b, cg_f32(c, 1), LLVMBuildLoad2(c->b, c->f32, lslot, ""), "");
    LLVMValueRef oi[3] = {cg_i64(c, 0), LLVMBuildSRem(c->b, r, cg_i64(c, H), ""), LLVMBuildSDiv(c->b, r, cg_i64(c, H), "")};
    LLVMValueRef orow = cg_addr(c, n, oi);
    /* out = sum_c w_c o_c / sum_c w_c l_c, whole vectors of head_dim, then the rest */
    int64_t full = s.hd / s.lanes;
    for (int64_t v = 0; v <= full; v++) {
        bool vec = v < full;
        int64_t d0 = v * s.lanes, nd = vec ? 1 : s.hd - d0;
        for (int64_t d = 0; d < nd; d++) {
            LLVMValueRef init = vec ? cg_vf32(c, 0) : cg_f32(c, 0), next;
            cg_acc_loop l;
            cg_acc_loop_begin(c, &l, "chunk", vec ? c->vf : c->f32, 1);
            LLVMValueRef wc = LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, wts, l.i), "");
            LLVMValueRef op = cg_gep(c, c->f32, part_at(c, &s, l.i, r, 2), cg_i64(c, d0 + d));
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
