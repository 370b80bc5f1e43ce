/* cg_gemm.c: linears as a register-blocked GEMM over packed weights.
 *
 * y[t, o] = (sum_i x[t, i] W[o, i] + b[o]) * (o < scale_cols ? F : 1),
 * then, in the same epilogue, RoPE on the rotated heads' columns (cos and
 * sin from the rope_table) and the K/V columns stored into their cache
 * rows slot[t], converted to the cache dtype.
 *
 * Packing (load phase, once): W [N, K] becomes np panels of nr = 2 * lanes
 * output columns, laid out [panel][k][nr], in the weights' dtype (f16 and
 * bf16 are widened to f32 in registers: exactly; bf16's two vectors of a
 * k interleaved, so that one load of 32-bit lanes holds the first
 * vector's weights in their low halves and the second's in their high
 * halves: a shift and a mask widen them, with no shuffle). A panel's first vector holds
 * columns c0.. and its second c1.. (lanes each): c1 = c0 + lanes, except
 * in rotated heads of the `half` style, where c1 = c0 + rotary_dim / 2 so
 * that the pairs RoPE turns meet in the same lanes of two registers. Past
 * N the panel is zero. The panel map is a constant table in the module.
 * Weights in ggml's block formats (q8_0, q4_0) keep their bytes: a panel
 * is a run of k blocks of 32, each [nr f16 scales][32 x nr int8] (q8_0) or
 * [nr f16 scales][16 x nr bytes, k = 2i in the low nibble and 2i + 1 in
 * the high one] (q4_0), 34 or 18 bytes per weight as in the file; the
 * micro-kernel widens a block's scales once and each weight exactly
 * (d * q is exact in f32), so every sum is the f32 kernel's over the
 * dequantized weights, bit for bit. With activations q8_0 the panels hold
 * the same bytes in the order of int8 dot products, and x is quantized
 * where it is packed (cg_int8.c).
 *
 * The kernel: threads split the panels; each walks k in blocks of kc, rows
 * in blocks of mc, its panels, and the rows of a block mr at a time; the
 * micro-kernel keeps mr x nr sums in registers for kc steps (x broadcast
 * from its rows, two vectors of the panel loaded per step). Partial sums
 * of a k block go to the linear's own f32 buffer; the last block runs the
 * epilogue. On AMX tiles the threads form a grid instead (amx_grid):
 * each takes a share of the row blocks and a share of the panels, so
 * that an x block is packed by one thread, not by all. Every output is
 * summed by one thread in one order: results do not depend on the thread
 * count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_build.h"

enum { KIND_PLAIN, KIND_HALF, KIND_INTERLEAVED };
enum { DST_OWN, DST_CACHE_K, DST_CACHE_V };
enum { MAP_C0, MAP_C1, MAP_KIND, MAP_FREQ, MAP_DST, MAP_D0, MAP_D1, MAP_FIELDS = 8 };

cg_gemm cg_gemm_shape(const ir_node *lin, const cg_target *t, const ir_graph *graph) {
    cg_gemm g;
    g.n = lin->ne[0].c;
    g.k = lin->args[1]->ne[0].c;
    g.lanes = t->lanes;
    g.nr = 2 * t->lanes;
    g.np = (g.n + g.nr - 1) / g.nr;
    g.mr = t->gemm_mr;
    /* the target's blocks (cg_target_for has the measurements). Earlier,
     * AVX-512 code on an Intel Xeon, llama3_8b prefill 2048, whole block:
     * kc 256, mc 16 mr: 1240-1320 ms; kc 512, 16 mr: 1160-1200; kc 768,
     * 12 mr: 1130-1200; kc 1024, 4 mr: 1090-1150 (the same 229 KB x block
     * as the first). Fewer k blocks: fewer passes of partial sums through
     * y; the panels stream from L2 either way. */
    g.kc = t->gemm_kc;
    g.mc = t->gemm_mc_tiles * g.mr;
    g.ku = t->gemm_ku > 1 ? t->gemm_ku : 1;
    /* compute bf16: float weights rounded to bf16 once, in the panels;
     * a block format's d * q stay as they are (README "compute") */
    bool bf16 = ir_cfg_bf16(graph);
    g.wdt =
        bf16 && attn_dtype_block(ir_cfg_dtype(graph)) == 1 ? ATTN_DTYPE_BF16 : ir_cfg_dtype(graph);
    g.pairs = bf16 && g.wdt == ATTN_DTYPE_BF16 && (t->bf16_dot || t->bfdot);
    /* pairs: half the k steps a k block; twice the k of it (the x block
     * the same bytes): llama3_8b prefill 2048 block, AMD EPYC Zen 5, 2
     * threads, alternating: kc 1024 548-564 ms, 2048 532-538, 4096 529-595 */
    if (g.pairs)
        g.kc *= 2;
    /* AMX: tiles of 16 rows x 32 k; a micro-kernel of 2 x 2 f32 tiles is
     * 32 rows x one panel's 32 columns. The whole k in one block where
     * it fits the target's gemm_amx_kc (no partial sums through y), and
     * as many rows as the x block's bytes allow (cg_target_for) */
    g.amx = g.pairs && t->amx;
    /* AArch64 with bf16: bfmmla, a pair of rows' 4 k times 4 k of two
     * columns into their 2 x 2 sums (twice bfdot's products an
     * instruction); 6 row pairs x 4 column pairs of sums, the 4 column
     * pairs of a panel and a row pair's x in the 32 registers */
    g.mmla = g.pairs && t->bfdot;
    if (g.mmla) {
        g.mr = 12;
        g.mc = t->gemm_mc_tiles * g.mr;
    }
    if (g.amx) {
        int64_t kp = (g.k + 31) / 32 * 32;
        g.kc = (int)(kp < t->gemm_amx_kc ? kp : t->gemm_amx_kc);
        int64_t mc = t->gemm_amx_x_bytes / (2 * (int64_t)g.kc) / 32 * 32;
        g.mr = 32;
        g.mc = (int)(mc < 32 ? 32 : mc > t->gemm_amx_mc ? t->gemm_amx_mc : mc);
    }
    /* activations q8_0: a row's int32 and f32 sums (2 vectors each), two
     * panel vectors, a broadcast and the two weight scales in registers;
     * row blocks of as many rows as the f32 kernel's */
    g.i8 =
        ir_cfg_activations(graph) == ATTN_DTYPE_Q8_0 && attn_dtype_block(ir_cfg_dtype(graph)) > 1;
    if (g.i8) {
        g.mr = (t->regs - 5) / 4 > 1 ? (t->regs - 5) / 4 : 1;
        g.mc = (t->gemm_mc_tiles * t->gemm_mr) / g.mr * g.mr;
        /* smmla (AArch64 with i8mm): rows in pairs, the same 4 registers
         * a row (6 rows) */
        g.mmla = t->usdot;
        ATTNC_ASSERT(!g.mmla || g.mr % 2 == 0);
    }
    return g;
}

/* k steps of a panel as packed: with pairs, k rounded up to even (the
 * last pair's second weight 0). */
static int64_t packed_k(const cg_gemm *g) {
    return g->amx     ? (g->k + 31) / 32 * 32
           : g->mmla  ? (g->k + 3) / 4 * 4
           : g->pairs ? (g->k + 1) / 2 * 2
                      : g->k;
}

int64_t cg_gemm_packed_words(const cg_gemm *g) {
    attn_dtype dt = g->wdt;
    int64_t bytes = attn_dtype_block(dt) > 1
                        ? g->np * (g->k / 32) * g->nr * (int64_t)attn_dtype_bytes(dt, 32)
                        : g->np * packed_k(g) * g->nr * (int64_t)attn_dtype_size(dt);
    return (bytes + 3) / 4;
}

/* Bytes of one k block of 32 of a panel of a block format. */
static int64_t panel_block_bytes(const cg_gemm *g, attn_dtype dt) {
    return g->nr * (int64_t)attn_dtype_bytes(dt, 32);
}

/* The panel map of linear n: MAP_FIELDS ints per panel (malloc'd). */
static int32_t *panel_map(const cg *c, const ir_node *n, const cg_gemm *gm) {
    int32_t *map = calloc((size_t)gm->np * MAP_FIELDS, sizeof *map);
    ATTNC_ASSERT(map);
    int64_t hd = ir_cfg_head_dim(c->g), rot = ir_cfg_rotary_dim(c->g),
            kvd = ir_cfg_kv_groups(c->g) * hd, V = gm->lanes;
    int64_t p = 0;
    for (int64_t col = 0; col < gm->n;) {
        int32_t *e = &map[p * MAP_FIELDS];
        if (col < n->rope_cols && (col % hd) < rot) {
            int64_t h0 = col - col % hd, j = col % hd;
            if (ir_cfg_rope_style(c->g) ==
                ATTN_ROPE_HALF) { /* j counts pairs: [j, j+V) and +rot/2 */
                e[MAP_C0] = (int32_t)col;
                e[MAP_C1] = (int32_t)(col + rot / 2);
                e[MAP_KIND] = KIND_HALF;
                e[MAP_FREQ] = (int32_t)j;
                col = j + V == rot / 2 ? h0 + rot : col + V;
            } else {
                e[MAP_C0] = (int32_t)col;
                e[MAP_C1] = (int32_t)(col + V);
                e[MAP_KIND] = KIND_INTERLEAVED;
                e[MAP_FREQ] = (int32_t)(j / 2);
                col += 2 * V;
            }
        } else {
            e[MAP_C0] = (int32_t)col;
            e[MAP_C1] = (int32_t)(col + V);
            e[MAP_KIND] = KIND_PLAIN;
            col += 2 * V;
        }
        e[MAP_DST] = DST_OWN;
        e[MAP_D0] = e[MAP_C0];
        e[MAP_D1] = e[MAP_C1];
        for (int k = 0; k < 2; k++)
            if (n->to_cache[k] && e[MAP_C0] >= n->cache_col[k] &&
                e[MAP_C0] < n->cache_col[k] + kvd) {
                e[MAP_DST] = k ? DST_CACHE_V : DST_CACHE_K;
                e[MAP_D0] = (int32_t)(e[MAP_C0] - n->cache_col[k]);
                e[MAP_D1] = (int32_t)(e[MAP_C1] - n->cache_col[k]);
            }
        p++;
    }
    ATTNC_ASSERT(p == gm->np);
    return map;
}

static LLVMValueRef map_global(cg *c, const ir_node *n, const cg_gemm *gm) {
    int32_t *map = panel_map(c, n, gm);
    size_t count = (size_t)gm->np * MAP_FIELDS;
    LLVMValueRef *e = malloc(count * sizeof *e);
    ATTNC_ASSERT(e);
    for (size_t i = 0; i < count; i++)
        e[i] = LLVMConstInt(c->i32, (unsigned long long)(uint32_t)map[i], false);
    LLVMTypeRef ty = LLVMArrayType2(c->i32, count);
    char name[64];
    snprintf(name, sizeof name, "panels_%d", n->id);
    LLVMValueRef gv = LLVMGetNamedGlobal(c->mod, name);
    if (!gv) {
        gv = LLVMAddGlobal(c->mod, ty, name);
        LLVMSetInitializer(gv, LLVMConstArray2(c->i32, e, count));
        LLVMSetGlobalConstant(gv, true);
        LLVMSetLinkage(gv, LLVMPrivateLinkage);
    }
    free(e);
    free(map);
    return gv;
}

/* Field f of panel p's map entry, as i64. */
static LLVMValueRef map_field(cg *c, LLVMValueRef map, LLVMValueRef p, int f) {
    LLVMValueRef i =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, p, cg_i64(c, MAP_FIELDS), ""), cg_i64(c, f), "");
    return LLVMBuildSExt(c->b, LLVMBuildLoad2(c->b, c->i32, cg_gep(c, c->i32, map, i), ""), c->i64,
                         "");
}

/* Lanes of the vector starting at column col (i64) that lie below n
 * (i64), or below the constant n. */
static LLVMValueRef lanes_before(cg *c, LLVMValueRef col, LLVMValueRef n) {
    LLVMValueRef ids =
        LLVMBuildAdd(c->b, cg_splat(c, LLVMBuildTrunc(c->b, col, c->i32, "")), cg_lane_ids(c), "");
    return LLVMBuildICmp(c->b, LLVMIntSLT, ids, cg_splat(c, LLVMBuildTrunc(c->b, n, c->i32, "")),
                         "");
}

static LLVMValueRef lanes_below(cg *c, LLVMValueRef col, int64_t n) {
    return lanes_before(c, col, cg_i64(c, n));
}

/* Byte i8 at p + off. */
static LLVMValueRef byte_at(cg *c, LLVMValueRef p, LLVMValueRef off) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    LLVMValueRef v = LLVMBuildLoad2(c->b, i8, cg_gep(c, i8, p, off), "");
    return v;
}

static void put_byte(cg *c, LLVMValueRef v, LLVMValueRef p, LLVMValueRef off) {
    LLVMBuildStore(c->b, v, cg_gep(c, LLVMInt8TypeInContext(c->llctx), p, off));
}

/* The panels of a block format: column col (lane ll of panel lp) copied
 * block by block; past N, scale 0 and zero weights. */
static void pack_blocks(cg *c, const cg_gemm *gm, attn_dtype dt, int src, int dst, LLVMValueRef lp,
                        LLVMValueRef ll, LLVMValueRef col, LLVMValueRef inside) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    int64_t kb = gm->k / 32, bb = (int64_t)attn_dtype_bytes(dt, 32),
            pbb = panel_block_bytes(gm, dt);
    bool q8 = dt == ATTN_DTYPE_Q8_0;
    LLVMValueRef srow =
        cg_gep(c, i8, c->base[src], LLVMBuildMul(c->b, col, cg_i64(c, kb * bb), ""));
    LLVMValueRef dpan =
        cg_gep(c, i8, c->base[dst], LLVMBuildMul(c->b, lp, cg_i64(c, kb * pbb), ""));
    cg_loop lb = cg_for(c, cg_i64(c, 0), cg_i64(c, kb), "block");
    LLVMValueRef sb = cg_gep(c, i8, srow, LLVMBuildMul(c->b, lb.i, cg_i64(c, bb), ""));
    LLVMValueRef db = cg_gep(c, i8, dpan, LLVMBuildMul(c->b, lb.i, cg_i64(c, pbb), ""));
    LLVMValueRef zero8 = LLVMConstInt(i8, 0, false);
    for (int h = 0; h < 2; h++) { /* the f16 scale, byte by byte */
        LLVMValueRef d = LLVMBuildSelect(c->b, inside, byte_at(c, sb, cg_i64(c, h)), zero8, "");
        put_byte(c, d, db,
                 LLVMBuildAdd(c->b, LLVMBuildMul(c->b, ll, cg_i64(c, 2), ""), cg_i64(c, h), ""));
    }
    LLVMValueRef dq = cg_gep(c, i8, db, LLVMBuildAdd(c->b, cg_i64(c, 2 * gm->nr), ll, ""));
    if (gm->i8) {
        cg_pack_int8_block(c, q8, gm->nr, sb, cg_gep(c, i8, db, cg_i64(c, 2 * gm->nr)), ll, inside);
    } else if (q8) {
        cg_loop lj = cg_for(c, cg_i64(c, 0), cg_i64(c, 32), "q");
        LLVMValueRef q = byte_at(c, sb, LLVMBuildAdd(c->b, lj.i, cg_i64(c, 2), ""));
        put_byte(c, LLVMBuildSelect(c->b, inside, q, zero8, ""), dq,
                 LLVMBuildMul(c->b, lj.i, cg_i64(c, gm->nr), ""));
        cg_for_end(c, &lj);
    } else {
        /* ggml: value e < 16 in the low nibble of byte e, 16 + e in the
         * high nibble of byte e; here k = 2i low, 2i + 1 high of byte i */
        LLVMValueRef nib[32];
        for (int e = 0; e < 16; e++) {
            LLVMValueRef b = byte_at(c, sb, cg_i64(c, 2 + e));
            nib[e] = LLVMBuildAnd(c->b, b, LLVMConstInt(i8, 15, false), "");
            nib[16 + e] = LLVMBuildLShr(c->b, b, LLVMConstInt(i8, 4, false), "");
        }
        for (int i = 0; i < 16; i++) {
            LLVMValueRef v =
                LLVMBuildOr(c->b, nib[2 * i],
                            LLVMBuildShl(c->b, nib[2 * i + 1], LLVMConstInt(i8, 4, false), ""), "");
            put_byte(c, LLVMBuildSelect(c->b, inside, v, LLVMConstInt(i8, 0x88, false), ""), dq,
                     cg_i64(c, i * gm->nr));
        }
    }
    cg_for_end(c, &lb);
}

/* Where weight k of lane ll (of nr) of panel lp goes, in elements of the
 * panels' dtype: [panel][k][nr], bf16's two vectors interleaved (lane i
 * of the first at 2i, of the second at 2i + 1); pairs: [panel][k/2][nr][k
 * & 1]; mmla: [panel][k/4][nr][k & 3] (two lanes' 4 k are one operand). */
static LLVMValueRef packed_at(cg *c, const cg_gemm *gm, LLVMValueRef lp, LLVMValueRef ll,
                              LLVMValueRef k) {
    LLVMValueRef two = cg_i64(c, 2);
    if (gm->pairs) { /* groups of n = 2 (4) k: [panel][k/n][nr][k % n] */
        LLVMValueRef n = cg_i64(c, gm->mmla ? 4 : 2);
        LLVMValueRef group = LLVMBuildAdd(
            c->b, LLVMBuildMul(c->b, lp, LLVMBuildSDiv(c->b, cg_i64(c, packed_k(gm)), n, ""), ""),
            LLVMBuildSDiv(c->b, k, n, ""), "");
        LLVMValueRef lane =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, group, cg_i64(c, gm->nr), ""), ll, "");
        return LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lane, n, ""), LLVMBuildSRem(c->b, k, n, ""),
                            "");
    }
    LLVMValueRef at_k = ll;
    if (gm->wdt == ATTN_DTYPE_BF16) {
        LLVMValueRef second = LLVMBuildICmp(c->b, LLVMIntSGE, ll, cg_i64(c, gm->lanes), "");
        at_k = LLVMBuildAdd(
            c->b, LLVMBuildMul(c->b, LLVMBuildSRem(c->b, ll, cg_i64(c, gm->lanes), ""), two, ""),
            LLVMBuildZExt(c->b, second, c->i64, ""), "");
    }
    LLVMValueRef row = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lp, cg_i64(c, gm->k), ""), k, "");
    return LLVMBuildAdd(c->b, LLVMBuildMul(c->b, row, cg_i64(c, gm->nr), ""), at_k, "");
}

void cg_emit_pack(cg *c, const ir_node *n, const char *name) {
    cg_gemm gm = cg_gemm_shape(n, &c->target, c->g);
    const ir_node *w = n->args[1];
    int src = c->plan->view[w->id].buf, dst = c->plan->packed[n->id];
    LLVMValueRef map = map_global(c, n, &gm);
    attn_dtype dt = ir_cfg_dtype(c->g); /* the weight buffer is in the weights' dtype */
    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi;
    cg_share(c, cg_i64(c, gm.np), &lo, &hi);
    cg_loop lp = cg_for(c, lo, hi, "panel");
    cg_loop ll = cg_for(c, cg_i64(c, 0), cg_i64(c, gm.nr), "lane");
    LLVMValueRef second = LLVMBuildICmp(c->b, LLVMIntSGE, ll.i, cg_i64(c, gm.lanes), "");
    LLVMValueRef col = LLVMBuildAdd(c->b,
                                    LLVMBuildSelect(c->b, second, map_field(c, map, lp.i, MAP_C1),
                                                    map_field(c, map, lp.i, MAP_C0), ""),
                                    LLVMBuildSRem(c->b, ll.i, cg_i64(c, gm.lanes), ""), "col");
    LLVMValueRef inside = LLVMBuildICmp(c->b, LLVMIntSLT, col, cg_i64(c, gm.n), "");
    /* past the last column: zero (the address is clamped to stay inside W) */
    LLVMValueRef safe = LLVMBuildSelect(c->b, inside, col, cg_i64(c, 0), "");
    if (attn_dtype_block(dt) > 1) {
        pack_blocks(c, &gm, dt, src, dst, lp.i, ll.i, safe, inside);
    } else {
        attn_dtype pdt = gm.wdt; /* the panels' dtype */
        cg_loop lk = cg_for(c, cg_i64(c, 0), cg_i64(c, packed_k(&gm)), "k");
        LLVMValueRef real = LLVMBuildICmp(c->b, LLVMIntSLT, lk.i, cg_i64(c, gm.k), "");
        LLVMValueRef at = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, safe, cg_i64(c, gm.k), ""),
                                       LLVMBuildSelect(c->b, real, lk.i, cg_i64(c, 0), ""), "");
        LLVMValueRef v = cg_operand(c, cg_load(c, dt, cg_buf_elem(c, src, dt, at)));
        v = LLVMBuildSelect(c->b, LLVMBuildAnd(c->b, inside, real, ""), v, cg_f32(c, 0), "");
        cg_store(c, pdt, v, cg_buf_elem(c, dst, pdt, packed_at(c, &gm, lp.i, ll.i, lk.i)));
        cg_for_end(c, &lk);
    }
    cg_for_end(c, &ll);
    cg_for_end(c, &lp);
    cg_kernel_end(c);
}

/* What the micro-kernels of one linear share. */
typedef struct gemm_ctx {
    const ir_node *n;
    cg_gemm gm;
    LLVMValueRef map;
    int x_buf, w_buf, y_buf, bias_buf, table_buf, cache_buf[2];
    attn_dtype kv_dt;
} gemm_ctx;

/* Rotates v0/v1 (columns of panel map entry e) of token t by the rope table. */
static void rope(cg *c, const gemm_ctx *gc, LLVMValueRef t, LLVMValueRef kind, LLVMValueRef freq,
                 LLVMValueRef *v0, LLVMValueRef *v1) {
    int64_t rot = ir_cfg_rotary_dim(c->g), V = gc->gm.lanes;
    LLVMValueRef row = LLVMBuildMul(c->b, t, cg_i64(c, rot), "");
    LLVMValueRef cos_at = LLVMBuildAdd(c->b, row, freq, "");
    LLVMValueRef sin_at = LLVMBuildAdd(c->b, cos_at, cg_i64(c, rot / 2), "");
    LLVMBasicBlockRef here = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef half = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "rope_half");
    LLVMBasicBlockRef inter = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "rope_inter");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "rope_done");
    LLVMValueRef sw = LLVMBuildSwitch(c->b, kind, done, 2);
    LLVMAddCase(sw, LLVMConstInt(c->i64, KIND_HALF, false), half);
    LLVMAddCase(sw, LLVMConstInt(c->i64, KIND_INTERLEAVED, false), inter);

    LLVMPositionBuilderAtEnd(c->b, half);
    LLVMValueRef cs =
        cg_vload(c, ATTN_DTYPE_F32, cg_buf_elem(c, gc->table_buf, ATTN_DTYPE_F32, cos_at));
    LLVMValueRef sn =
        cg_vload(c, ATTN_DTYPE_F32, cg_buf_elem(c, gc->table_buf, ATTN_DTYPE_F32, sin_at));
    LLVMValueRef a = *v0, b = *v1;
    LLVMValueRef h0 =
        LLVMBuildFSub(c->b, LLVMBuildFMul(c->b, a, cs, ""), LLVMBuildFMul(c->b, b, sn, ""), "");
    LLVMValueRef h1 =
        LLVMBuildFAdd(c->b, LLVMBuildFMul(c->b, a, sn, ""), LLVMBuildFMul(c->b, b, cs, ""), "");
    LLVMBuildBr(c->b, done);

    /* interleaved: lanes (2i, 2i+1) are a pair; vector 1 continues vector 0 */
    LLVMPositionBuilderAtEnd(c->b, inter);
    int dup[64], swap[64];
    for (int l = 0; l < V; l++) {
        dup[l] = l / 2;
        swap[l] = l ^ 1;
    }
    LLVMValueRef sign = cg_vf32(c, 1.0);
    for (int l = 0; l < V; l += 2)
        sign = LLVMBuildInsertElement(c->b, sign, cg_f32(c, -1.0),
                                      LLVMConstInt(c->i32, (unsigned)l, false), "");
    LLVMValueRef in[2] = {*v0, *v1}, out[2];
    for (int k = 0; k < 2; k++) {
        LLVMValueRef off = cg_i64(c, k * V / 2);
        LLVMValueRef ck = cg_vload(
            c, ATTN_DTYPE_F32,
            cg_buf_elem(c, gc->table_buf, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, cos_at, off, "")));
        LLVMValueRef sk = cg_vload(
            c, ATTN_DTYPE_F32,
            cg_buf_elem(c, gc->table_buf, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, sin_at, off, "")));
        ck = cg_shuffle(c, ck, dup, (int)V);
        sk = LLVMBuildFMul(c->b, cg_shuffle(c, sk, dup, (int)V), sign, "");
        out[k] = LLVMBuildFAdd(c->b, LLVMBuildFMul(c->b, in[k], ck, ""),
                               LLVMBuildFMul(c->b, cg_shuffle(c, in[k], swap, (int)V), sk, ""), "");
    }
    LLVMBuildBr(c->b, done);

    LLVMPositionBuilderAtEnd(c->b, done);
    LLVMValueRef r0 = LLVMBuildPhi(c->b, c->vf, ""), r1 = LLVMBuildPhi(c->b, c->vf, "");
    LLVMValueRef in0[3] = {*v0, h0, out[0]}, in1[3] = {*v1, h1, out[1]};
    LLVMBasicBlockRef from[3] = {here, half, inter};
    LLVMAddIncoming(r0, in0, from, 3);
    LLVMAddIncoming(r1, in1, from, 3);
    *v0 = r0;
    *v1 = r1;
}

/* Final values of row t, panel p: bias, scale, RoPE, store. */
static void epilogue(cg *c, const gemm_ctx *gc, LLVMValueRef t, LLVMValueRef p, LLVMValueRef v[2]) {
    const ir_node *n = gc->n;
    LLVMValueRef col[2] = {map_field(c, gc->map, p, MAP_C0), map_field(c, gc->map, p, MAP_C1)};
    for (int k = 0; k < 2; k++) {
        LLVMValueRef inside = lanes_below(c, col[k], gc->gm.n);
        if (gc->bias_buf >= 0) {
            LLVMValueRef bias = cg_buf_elem(c, gc->bias_buf, ATTN_DTYPE_F32, col[k]);
            v[k] = LLVMBuildFAdd(c->b, v[k], cg_vload_masked(c, ATTN_DTYPE_F32, bias, inside), "");
        }
        if (n->scale_cols) {
            LLVMValueRef scaled = lanes_below(c, col[k], n->scale_cols);
            v[k] = LLVMBuildFMul(
                c->b, v[k], LLVMBuildSelect(c->b, scaled, cg_vf32(c, n->scale), cg_vf32(c, 1), ""),
                "");
        }
    }
    if (n->rope_cols)
        rope(c, gc, t, map_field(c, gc->map, p, MAP_KIND), map_field(c, gc->map, p, MAP_FREQ),
             &v[0], &v[1]);
    LLVMValueRef dst = map_field(c, gc->map, p, MAP_DST);
    LLVMValueRef dcol[2] = {map_field(c, gc->map, p, MAP_D0), map_field(c, gc->map, p, MAP_D1)};
    LLVMBasicBlockRef own = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "own");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "stored");
    LLVMValueRef sw = LLVMBuildSwitch(c->b, dst, own, 2);
    for (int k = 0; k < 2; k++) {
        if (!n->to_cache[k])
            continue;
        LLVMBasicBlockRef bb =
            LLVMAppendBasicBlockInContext(c->llctx, c->fn, k ? "cache_v" : "cache_k");
        LLVMAddCase(sw, LLVMConstInt(c->i64, k ? DST_CACHE_V : DST_CACHE_K, false), bb);
        LLVMPositionBuilderAtEnd(c->b, bb);
        LLVMValueRef slot = LLVMBuildLoad2(c->b, c->i64, cg_gep(c, c->i64, c->slot, t), "slot");
        int64_t cs, ts;
        cg_cache_strides(c->g, k, &cs, &ts);
        for (int j = 0; j < 2; j++) {
            if (cs == 1) { /* the token's columns side by side */
                cg_vstore(c, gc->kv_dt, v[j],
                          cg_cache_elem(c, k, gc->cache_buf[k], gc->kv_dt, slot, dcol[j]));
                continue;
            }
            for (int l = 0; l < gc->gm.lanes; l++) {
                LLVMValueRef cl = LLVMBuildAdd(c->b, dcol[j], cg_i64(c, l), "");
                cg_store(c, gc->kv_dt,
                         LLVMBuildExtractElement(c->b, v[j],
                                                 LLVMConstInt(c->i32, (unsigned)l, false), ""),
                         cg_cache_elem(c, k, gc->cache_buf[k], gc->kv_dt, slot, cl));
            }
        }
        LLVMBuildBr(c->b, done);
    }
    LLVMPositionBuilderAtEnd(c->b, own);
    LLVMValueRef row = LLVMBuildMul(c->b, t, cg_i64(c, gc->gm.n), "");
    for (int j = 0; j < 2; j++)
        cg_vstore_masked(
            c, v[j],
            cg_buf_elem(c, gc->y_buf, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, row, dcol[j], "")),
            lanes_below(c, col[j], gc->gm.n));
    LLVMBuildBr(c->b, done);
    LLVMPositionBuilderAtEnd(c->b, done);
}

/* Row t of panel p from its sums v[2] (columns col, those below N in
 * inside): the epilogue when `last` (the final k block), else the partial
 * sums to y. */
static void row_out(cg *c, const gemm_ctx *gc, LLVMValueRef t, LLVMValueRef p, LLVMValueRef v[2],
                    LLVMValueRef last, const LLVMValueRef *col, const LLVMValueRef *inside) {
    LLVMBasicBlockRef fin = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "final");
    LLVMBasicBlockRef part = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "partial");
    LLVMBasicBlockRef next_r = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "next_row");
    LLVMBuildCondBr(c->b, last, fin, part);
    LLVMPositionBuilderAtEnd(c->b, part);
    LLVMValueRef row = LLVMBuildMul(c->b, t, cg_i64(c, gc->gm.n), "");
    for (int j = 0; j < 2; j++)
        cg_vstore_masked(
            c, v[j], cg_buf_elem(c, gc->y_buf, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, row, col[j], "")),
            inside[j]);
    LLVMBuildBr(c->b, next_r);
    LLVMPositionBuilderAtEnd(c->b, fin);
    epilogue(c, gc, t, p, v);
    LLVMBuildBr(c->b, next_r);
    LLVMPositionBuilderAtEnd(c->b, next_r);
}

/* Rows m..m+R-1 of panel p from their sums v[2 * row + vector]: the
 * epilogue when `last` (the final k block), else partial sums to y. Rows
 * one by one from the stack: code size does not grow with R. */
static void finish_rows(cg *c, const gemm_ctx *gc, int R, LLVMValueRef m, LLVMValueRef p,
                        const LLVMValueRef *sums_v, LLVMValueRef last, const LLVMValueRef *col,
                        const LLVMValueRef *inside) {
    LLVMTypeRef buf_ty = LLVMArrayType2(c->vf, (uint64_t)(2 * R));
    LLVMValueRef sums = cg_slot(c, buf_ty, NULL);
    for (int i = 0; i < 2 * R; i++) {
        LLVMValueRef at[2] = {cg_i64(c, 0), cg_i64(c, i)};
        LLVMBuildStore(c->b, sums_v[i], LLVMBuildInBoundsGEP2(c->b, buf_ty, sums, at, 2, ""));
    }
    cg_loop lr = cg_for(c, cg_i64(c, 0), cg_i64(c, R), "r");
    LLVMValueRef t = LLVMBuildAdd(c->b, m, lr.i, "t");
    LLVMValueRef v[2];
    for (int j = 0; j < 2; j++) {
        LLVMValueRef at[2] = {
            cg_i64(c, 0),
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lr.i, cg_i64(c, 2), ""), cg_i64(c, j), "")};
        v[j] =
            LLVMBuildLoad2(c->b, c->vf, LLVMBuildInBoundsGEP2(c->b, buf_ty, sums, at, 2, ""), "");
    }
    row_out(c, gc, t, p, v, last, col, inside);
    cg_for_end(c, &lr);
}

/* x of row r at local k (x0 as micro's). */
static LLVMValueRef x_at(cg *c, const cg_gemm *gm, bool direct, LLVMValueRef x0, int r,
                         LLVMValueRef k) {
    LLVMValueRef xa = direct
                          ? cg_gep(c, c->f32, x0, LLVMBuildAdd(c->b, k, cg_i64(c, r * gm->k), ""))
                          : cg_gep(c, c->f32, x0,
                                   LLVMBuildAdd(c->b, LLVMBuildMul(c->b, k, cg_i64(c, gm->mr), ""),
                                                cg_i64(c, r), ""));
    LLVMValueRef x = LLVMBuildLoad2(c->b, c->f32, xa, "");
    return cg_splat(c, direct ? cg_operand(c, x) : x); /* packed x is rounded (pack_x) */
}

/* acc[2r + j] += x[r, k] * w[k, vector j] for the panel vectors b[2] of k. */
static void fma_rows(cg *c, const cg_gemm *gm, int R, bool direct, LLVMValueRef x0, LLVMValueRef k,
                     const LLVMValueRef b[2], LLVMValueRef *acc) {
    for (int r = 0; r < R; r++) {
        LLVMValueRef xb = x_at(c, gm, direct, x0, r, k);
        acc[2 * r] = cg_fma(c, xb, b[0], acc[2 * r]);
        acc[2 * r + 1] = cg_fma(c, xb, b[1], acc[2 * r + 1]);
    }
}

/* Step k of the f32, f16 or bf16 sums: acc (the R rows' sums of npan
 * panels, panel pp's at acc + pp * 2R) += x[row][k] * the panels' k. */
static void float_step(cg *c, const gemm_ctx *gc, int R, bool direct, attn_dtype wdt, int npan,
                       const LLVMValueRef *w, LLVMValueRef x0, LLVMValueRef k, LLVMValueRef *acc) {
    const cg_gemm *gm = &gc->gm;
    LLVMTypeRef wet = cg_elem_type(c, wdt);
    LLVMValueRef wk = LLVMBuildMul(c->b, k, cg_i64(c, gm->nr), "");
    for (int pp = 0; pp < npan; pp++) {
        LLVMValueRef b[2];
        if (wdt == ATTN_DTYPE_BF16) { /* interleaved (the packing): low halves, high halves */
            LLVMValueRef v = LLVMBuildLoad2(c->b, c->vi, cg_gep(c, wet, w[pp], wk), "");
            LLVMSetAlignment(v, 2);
            LLVMValueRef hi16 = cg_splat(c, LLVMConstInt(c->i32, 0xffff0000u, false));
            b[0] = LLVMBuildBitCast(
                c->b, LLVMBuildShl(c->b, v, cg_splat(c, LLVMConstInt(c->i32, 16, false)), ""),
                c->vf, "");
            b[1] = LLVMBuildBitCast(c->b, LLVMBuildAnd(c->b, v, hi16, ""), c->vf, "");
        } else {
            b[0] = cg_vload(c, wdt, cg_gep(c, wet, w[pp], wk));
            b[1] = cg_vload(
                c, wdt, cg_gep(c, wet, w[pp], LLVMBuildAdd(c->b, wk, cg_i64(c, gm->lanes), "")));
        }
        fma_rows(c, gm, R, direct, x0, k, b, acc + pp * 2 * R);
    }
}

/* Trips t in [0, trips) of u steps each, k = k0 + t * u + i: the sums in
 * acc (init on entry, the result on exit). `maybe_none`: trips may be 0
 * (a branch around the loop; else it runs at least once). */
static void float_trips(cg *c, const gemm_ctx *gc, int R, bool direct, attn_dtype wdt, int npan,
                        const LLVMValueRef *w, LLVMValueRef x0, LLVMValueRef k0, LLVMValueRef trips,
                        int u, bool maybe_none, LLVMValueRef *acc) {
    int na = 2 * R * npan;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b), join = NULL;
    if (maybe_none) {
        LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "k_trips");
        join = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "k_done");
        LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSGT, trips, cg_i64(c, 0), ""), go, join);
        LLVMPositionBuilderAtEnd(c->b, go);
    }
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "k", c->vf, na);
    LLVMValueRef next[2 * 14 * 2];
    memcpy(next, l.acc, (size_t)na * sizeof *next);
    LLVMValueRef first = LLVMBuildAdd(c->b, k0, LLVMBuildMul(c->b, l.i, cg_i64(c, u), ""), "");
    for (int i = 0; i < u; i++)
        float_step(c, gc, R, direct, wdt, npan, w, x0,
                   i ? LLVMBuildAdd(c->b, first, cg_i64(c, i), "") : first, next);
    cg_acc_loop_end(c, &l, trips, acc, next);
    if (!maybe_none) {
        memcpy(acc, next, (size_t)na * sizeof *next);
        return;
    }
    LLVMBasicBlockRef after = LLVMGetInsertBlock(c->b);
    LLVMBuildBr(c->b, join);
    LLVMPositionBuilderAtEnd(c->b, join);
    for (int a = 0; a < na; a++) {
        LLVMValueRef phi = LLVMBuildPhi(c->b, c->vf, "");
        LLVMAddIncoming(phi, &acc[a], &pre, 1);
        LLVMAddIncoming(phi, &next[a], &after, 1);
        acc[a] = phi;
    }
}

/* The sums of R rows over k in [0, kn) from init into next, the f32, f16
 * or bf16 weights of npan panels from w[pp] (nr per k), widened exactly;
 * panel pp's sums at init/next + pp * 2R. With ku > 1, trips of ku steps,
 * then the kn % ku left one at a time: each sum is still one chain over k
 * in order, the same bits. */
static void float_sums(cg *c, const gemm_ctx *gc, int R, bool direct, attn_dtype wdt, int npan,
                       const LLVMValueRef *w, LLVMValueRef kn, LLVMValueRef x0,
                       const LLVMValueRef *init, LLVMValueRef *next) {
    int u = gc->gm.ku;
    memcpy(next, init, (size_t)(2 * R * npan) * sizeof *next);
    if (u == 1) {
        float_trips(c, gc, R, direct, wdt, npan, w, x0, cg_i64(c, 0), kn, 1, false, next);
        return;
    }
    LLVMValueRef trips = LLVMBuildSDiv(c->b, kn, cg_i64(c, u), "");
    LLVMValueRef done = LLVMBuildMul(c->b, trips, cg_i64(c, u), "");
    float_trips(c, gc, R, direct, wdt, npan, w, x0, cg_i64(c, 0), trips, u, true, next);
    float_trips(c, gc, R, direct, wdt, npan, w, x0, done, LLVMBuildSub(c->b, kn, done, ""), 1, true,
                next);
}

/* x of row r at pair kk (local), broadcast as lanes i32 pairs: packed by
 * pack_x ([kk][mr] i32), or (direct) read in place from row r and rounded,
 * the k past K zero. */
static LLVMValueRef xpair_at(cg *c, const cg_gemm *gm, bool direct, LLVMValueRef x0, int r,
                             LLVMValueRef kk) {
    if (!direct) {
        LLVMValueRef at =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, kk, cg_i64(c, gm->mr), ""), cg_i64(c, r), "");
        return cg_splat(c, LLVMBuildLoad2(c->b, c->i32, cg_gep(c, c->i32, x0, at), ""));
    }
    LLVMValueRef k = LLVMBuildMul(c->b, kk, cg_i64(c, 2), "");
    LLVMValueRef k1 = LLVMBuildAdd(c->b, k, cg_i64(c, 1), "");
    LLVMValueRef in = LLVMBuildICmp(c->b, LLVMIntSLT, k1, cg_i64(c, gm->k), "");
    LLVMValueRef row = cg_i64(c, r * gm->k);
    LLVMValueRef lo =
        LLVMBuildLoad2(c->b, c->f32, cg_gep(c, c->f32, x0, LLVMBuildAdd(c->b, row, k, "")), "");
    LLVMValueRef hi = LLVMBuildLoad2(
        c->b, c->f32,
        cg_gep(c, c->f32, x0, LLVMBuildAdd(c->b, row, LLVMBuildSelect(c->b, in, k1, k, ""), "")),
        "");
    hi = LLVMBuildSelect(c->b, in, hi, cg_f32(c, 0), "");
    return cg_splat(c, cg_bf16_pair(c, lo, hi));
}

/* float_sums for pairs (gm->pairs): pairs of k in [0, kn) from init into
 * next, the panels' bf16 pairs from w[pp] (nr pairs per pair of k). */
static void pair_sums(cg *c, const gemm_ctx *gc, int R, bool direct, int npan,
                      const LLVMValueRef *w, LLVMValueRef kn, LLVMValueRef x0,
                      const LLVMValueRef *init, LLVMValueRef *next) {
    const cg_gemm *gm = &gc->gm;
    int na = 2 * R * npan;
    LLVMValueRef npairs =
        LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, kn, cg_i64(c, 1), ""), cg_i64(c, 2), "");
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "kpair", c->vf, na);
    memcpy(next, l.acc, (size_t)na * sizeof *next);
    LLVMValueRef wk = LLVMBuildMul(c->b, l.i, cg_i64(c, gm->nr), ""); /* i32 words */
    for (int pp = 0; pp < npan; pp++) {
        LLVMValueRef b[2];
        for (int j = 0; j < 2; j++) {
            LLVMValueRef at = LLVMBuildAdd(c->b, wk, cg_i64(c, j * gm->lanes), "");
            b[j] = LLVMBuildLoad2(c->b, c->vi, cg_gep(c, c->i32, w[pp], at), "");
            LLVMSetAlignment(b[j], 4);
        }
        for (int r = 0; r < R; r++) {
            LLVMValueRef xb = xpair_at(c, gm, direct, x0, r, l.i);
            LLVMValueRef *a = next + pp * 2 * R + 2 * r;
            a[0] = cg_dot_pairs(c, a[0], xb, b[0]);
            a[1] = cg_dot_pairs(c, a[1], xb, b[1]);
        }
    }
    cg_acc_loop_end(c, &l, npairs, init, next);
}

/* mmla: x of rows r and r + 1 (r + 1 < R, else zeros) at quad kq
 * (local) as the bfmmla operand of their 4 k's each (pairs of bf16 in
 * words: [r: k, k + 2][r + 1: k, k + 2]): packed by pack_x ([kq][mr][2]
 * words), or (direct) read in place and rounded, the k past K zero. */
static LLVMValueRef xquad_at(cg *c, const cg_gemm *gm, bool direct, LLVMValueRef x0, int r, int R,
                             LLVMValueRef kq) {
    bool two = r + 1 < R;
    LLVMValueRef v;
    if (!direct) {
        LLVMValueRef at = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, kq, cg_i64(c, 2 * gm->mr), ""),
                                       cg_i64(c, 2 * r), "");
        LLVMTypeRef ty = LLVMVectorType(c->i32, two ? 4 : 2);
        v = LLVMBuildLoad2(c->b, ty, cg_gep(c, c->i32, x0, at), "");
        LLVMSetAlignment(v, 4);
        if (!two) { /* the partner row's sums are dropped: its operand is 0 */
            static const int lo[4] = {0, 1, 2, 3};
            v = cg_shuffle2(c, v, LLVMConstNull(ty), lo, 4);
        }
    } else {
        LLVMValueRef k = LLVMBuildMul(c->b, kq, cg_i64(c, 4), "");
        LLVMValueRef x[2];
        for (int h = 0; h < 2; h++) {
            x[h] = LLVMConstNull(c->vf);
            if (h && !two)
                continue;
            x[h] = cg_vload_masked(
                c, ATTN_DTYPE_F32,
                cg_gep(c, c->f32, x0, LLVMBuildAdd(c->b, k, cg_i64(c, (r + h) * gm->k), "")),
                lanes_below(c, k, gm->k));
        }
        static const int even[4] = {0, 2, 4, 6}, odd[4] = {1, 3, 5, 7};
        v = cg_bf16_pair(c, cg_shuffle2(c, x[0], x[1], even, 4),
                         cg_shuffle2(c, x[0], x[1], odd, 4));
    }
    return v;
}

/* bfmmla: acc (lanes [r c, r c + 1, r + 1 c, r + 1 c + 1]) + the products
 * of x's 2 x 4 bf16 (rows r, r + 1) and w's 4 x 2 (columns c, c + 1). Arm's
 * A64 reference (BFMMLA) sums each lane as two BFDotAdd steps, pairs of k
 * in order: bfdot's arithmetic, two pairs an instruction. */
static LLVMValueRef bfmmla(cg *c, LLVMValueRef acc, LLVMValueRef x, LLVMValueRef w) {
    static const char name[] = "llvm.aarch64.neon.bfmmla";
    unsigned id = LLVMLookupIntrinsicID(name, sizeof name - 1);
    ATTNC_ASSERT(id != 0 && c->target.lanes == 4);
    LLVMTypeRef bv = LLVMVectorType(LLVMBFloatTypeInContext(c->llctx), 8);
    LLVMValueRef args[3] = {acc, LLVMBuildBitCast(c->b, x, bv, ""),
                            LLVMBuildBitCast(c->b, w, bv, "")};
    return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, NULL, 0),
                          LLVMGetIntrinsicDeclaration(c->mod, id, NULL, 0), args, 3, "");
}

void cg_mmla_blocks(cg *c, int R, const LLVMValueRef *from, LLVMValueRef *to, bool back) {
    static const int first[4] = {0, 1, 4, 5}, second[4] = {2, 3, 6, 7};
    for (int i = 0; i < (R + 1) / 2; i++)
        for (int j = 0; j < 2; j++) {
            LLVMValueRef *row[2] = {&to[2 * (2 * i) + j], &to[2 * (2 * i + 1) + j]};
            if (back) {
                LLVMValueRef a = from[4 * i + 2 * j], b = from[4 * i + 2 * j + 1];
                *row[0] = cg_shuffle2(c, a, b, first, 4);
                if (2 * i + 1 < R)
                    *row[1] = cg_shuffle2(c, a, b, second, 4);
                continue;
            }
            LLVMValueRef r0 = from[2 * (2 * i) + j],
                         r1 = 2 * i + 1 < R ? from[2 * (2 * i + 1) + j] : LLVMConstNull(c->vf);
            to[4 * i + 2 * j] = cg_shuffle2(c, r0, r1, first, 4);
            to[4 * i + 2 * j + 1] = cg_shuffle2(c, r0, r1, second, 4);
        }
}

/* pair_sums on bfmmla (gm->mmla): quads of k in [0, kn), the panels'
 * words from w[pp] (2 nr per quad), x's row pairs by xquad_at. Each sum
 * is bfdot's chain over the pairs of k in order, so the GEMV's and the
 * GEMM's results agree bit for bit. */
static void mmla_sums(cg *c, const gemm_ctx *gc, int R, bool direct, int npan,
                      const LLVMValueRef *w, LLVMValueRef kn, LLVMValueRef x0,
                      const LLVMValueRef *init, LLVMValueRef *next) {
    const cg_gemm *gm = &gc->gm;
    int P = (R + 1) / 2, na = 4 * P * npan;
    ATTNC_ASSERT(gm->nr == 8 && na <= 64);
    LLVMValueRef start[64], sums[64];
    for (int pp = 0; pp < npan; pp++)
        cg_mmla_blocks(c, R, init + pp * 2 * R, start + pp * 4 * P, false);
    LLVMValueRef nquads =
        LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, kn, cg_i64(c, 3), ""), cg_i64(c, 4), "");
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "kquad", c->vf, na);
    memcpy(sums, l.acc, (size_t)na * sizeof *sums);
    LLVMValueRef wq = LLVMBuildMul(c->b, l.i, cg_i64(c, 2 * gm->nr), ""); /* i32 words */
    LLVMValueRef xq[14];
    for (int i = 0; i < P; i++)
        xq[i] = xquad_at(c, gm, direct, x0, 2 * i, R, l.i);
    for (int pp = 0; pp < npan; pp++)
        for (int q = 0; q < 4; q++) {
            LLVMValueRef b = LLVMBuildLoad2(
                c->b, c->vi, cg_gep(c, c->i32, w[pp], LLVMBuildAdd(c->b, wq, cg_i64(c, 4 * q), "")),
                "");
            LLVMSetAlignment(b, 4);
            for (int i = 0; i < P; i++) {
                LLVMValueRef *a = &sums[pp * 4 * P + 4 * i + q];
                *a = bfmmla(c, *a, xq[i], b);
            }
        }
    cg_acc_loop_end(c, &l, nquads, start, sums);
    for (int pp = 0; pp < npan; pp++)
        cg_mmla_blocks(c, R, sums + pp * 4 * P, next + pp * 2 * R, true);
}

/* <lanes x i8> at p, as <lanes x i32>: sign- or zero-extended. */
static LLVMValueRef bytes_at(cg *c, LLVMValueRef p, bool sign) {
    LLVMTypeRef vt = LLVMVectorType(LLVMInt8TypeInContext(c->llctx), (unsigned)c->target.lanes);
    LLVMValueRef v = LLVMBuildLoad2(c->b, vt, p, "");
    LLVMSetAlignment(v, 1);
    return sign ? LLVMBuildSExt(c->b, v, c->vi, "") : LLVMBuildZExt(c->b, v, c->vi, "");
}

/* One k block of 32 of a panel of a block format, at blk: its scale
 * vectors d (and -8 d) once, then at step i of its loop (32 steps for
 * q8_0, 16 for q4_0) the weights of k = i (q8_0: b[0], b[1]) or of
 * k = 2i and 2i + 1 (q4_0: b[0..1], b[2..3]): d * q or d * q - 8 d, exact. */
typedef struct qblock {
    LLVMValueRef blk, d[2], md[2];
    bool q8;
} qblock;

static qblock qblock_at(cg *c, const cg_gemm *gm, attn_dtype dt, LLVMValueRef blk) {
    qblock q = {.blk = blk, .q8 = dt == ATTN_DTYPE_Q8_0};
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    for (int j = 0; j < 2; j++) {
        q.d[j] = cg_vload(c, ATTN_DTYPE_F16, cg_gep(c, i8, blk, cg_i64(c, 2 * j * gm->lanes)));
        q.md[j] = LLVMBuildFMul(c->b, q.d[j], cg_vf32(c, -8.0), "");
    }
    return q;
}

static void qblock_weights(cg *c, const cg_gemm *gm, const qblock *q, LLVMValueRef i,
                           LLVMValueRef b[4]) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    LLVMValueRef qp = cg_gep(c, i8, q->blk,
                             LLVMBuildAdd(c->b, cg_i64(c, 2 * gm->nr),
                                          LLVMBuildMul(c->b, i, cg_i64(c, gm->nr), ""), ""));
    LLVMValueRef raw[2] = {bytes_at(c, qp, q->q8),
                           bytes_at(c, cg_gep(c, i8, qp, cg_i64(c, gm->lanes)), q->q8)};
    for (int j = 0; j < 2; j++) {
        if (q->q8) {
            b[j] = LLVMBuildFMul(c->b, LLVMBuildSIToFP(c->b, raw[j], c->vf, ""), q->d[j], "");
            continue;
        }
        LLVMValueRef lo =
            LLVMBuildAnd(c->b, raw[j], cg_splat(c, LLVMConstInt(c->i32, 15, false)), "");
        LLVMValueRef hi =
            LLVMBuildLShr(c->b, raw[j], cg_splat(c, LLVMConstInt(c->i32, 4, false)), "");
        b[j] = cg_fma(c, LLVMBuildSIToFP(c->b, lo, c->vf, ""), q->d[j], q->md[j]);
        b[2 + j] = cg_fma(c, LLVMBuildSIToFP(c->b, hi, c->vf, ""), q->d[j], q->md[j]);
    }
}

/* Panel p of f32, f16 or bf16 weights from k = kb: its first weight. */
static LLVMValueRef fpanel_at(cg *c, const gemm_ctx *gc, LLVMValueRef p, LLVMValueRef kb) {
    const cg_gemm *gm = &gc->gm;
    LLVMValueRef first =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, p, cg_i64(c, packed_k(gm)), ""), kb, "");
    return cg_buf_elem(c, gc->w_buf, gm->wdt, LLVMBuildMul(c->b, first, cg_i64(c, gm->nr), ""));
}

/* The k blocks of 32 from kb of panel p of a block format: their first
 * byte. */
static LLVMValueRef qpanel_at(cg *c, const gemm_ctx *gc, LLVMValueRef p, LLVMValueRef kb) {
    const cg_gemm *gm = &gc->gm;
    LLVMValueRef first = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, p, cg_i64(c, gm->k / 32), ""),
                                      LLVMBuildSDiv(c->b, kb, cg_i64(c, 32), ""), "");
    return cg_gep(
        c, LLVMInt8TypeInContext(c->llctx), c->base[gc->w_buf],
        LLVMBuildMul(c->b, first, cg_i64(c, panel_block_bytes(gm, ir_cfg_dtype(c->g))), ""));
}

/* float_sums straight from npan panels of a block format at w0[] (the
 * GEMV: each weight is used once, so it is widened where it is used);
 * panel pp's sums at init/next + pp * 2R. Two panels give each
 * iteration twice the independent FMAs (one chain per output column,
 * in k order, as alone). */
static void block_sums(cg *c, const gemm_ctx *gc, int R, bool direct, int npan,
                       const LLVMValueRef *w0, LLVMValueRef kn, LLVMValueRef x0,
                       const LLVMValueRef *init, LLVMValueRef *next) {
    const cg_gemm *gm = &gc->gm;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    int na = 2 * R * npan;
    int64_t pbb = panel_block_bytes(gm, ir_cfg_dtype(c->g));
    cg_acc_loop lb;
    cg_acc_loop_begin(c, &lb, "kblock32", c->vf, na);
    qblock q[2];
    for (int pp = 0; pp < npan; pp++)
        q[pp] = qblock_at(c, gm, ir_cfg_dtype(c->g),
                          cg_gep(c, i8, w0[pp], LLVMBuildMul(c->b, lb.i, cg_i64(c, pbb), "")));
    LLVMValueRef k0 = LLVMBuildMul(c->b, lb.i, cg_i64(c, 32), "");
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "k", c->vf, na);
    memcpy(next, l.acc, (size_t)na * sizeof *next);
    LLVMValueRef b[2][4];
    for (int pp = 0; pp < npan; pp++)
        qblock_weights(c, gm, &q[pp], l.i, b[pp]);
    LLVMValueRef k =
        LLVMBuildAdd(c->b, k0, q[0].q8 ? l.i : LLVMBuildMul(c->b, l.i, cg_i64(c, 2), ""), "");
    for (int pp = 0; pp < npan; pp++)
        fma_rows(c, gm, R, direct, x0, k, b[pp], next + pp * 2 * R);
    for (int pp = 0; !q[0].q8 && pp < npan; pp++) /* k = 2i + 1: the high nibbles */
        fma_rows(c, gm, R, direct, x0, LLVMBuildAdd(c->b, k, cg_i64(c, 1), ""), b[pp] + 2,
                 next + pp * 2 * R);
    cg_acc_loop_end(c, &l, cg_i64(c, q[0].q8 ? 32 : 16), lb.acc, next);
    cg_acc_loop_end(c, &lb, LLVMBuildSDiv(c->b, kn, cg_i64(c, 32), ""), init, next);
}

/* void unpack(args, p, kb, w): the weights of panel p, k in [kb, kb +
 * kc), of a block format, widened into f32 at w (nr per k): the GEMM then
 * runs its f32 micro-kernel over them for every row tile of a row block
 * (widening once per tile cost a fifth of the FMA ports' time). */
static LLVMValueRef unpack_fn(cg *c, const gemm_ctx *gc, const char *kname) {
    const cg_gemm *gm = &gc->gm;
    char name[160];
    snprintf(name, sizeof name, "%s_unpack", kname);
    LLVMTypeRef params[4] = {c->ptr, c->i64, c->i64, c->ptr};
    LLVMValueRef fn = cg_helper_begin(c, name, params, 4);
    LLVMValueRef p = LLVMGetParam(fn, 1), kb = LLVMGetParam(fn, 2), w = LLVMGetParam(fn, 3);
    LLVMValueRef kn = cg_intrinsic(c, "llvm.smin", c->i64, cg_i64(c, gm->kc),
                                   LLVMBuildSub(c->b, cg_i64(c, gm->k), kb, ""));
    LLVMValueRef w0 = qpanel_at(c, gc, p, kb);
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    cg_loop lb = cg_for(c, cg_i64(c, 0), LLVMBuildSDiv(c->b, kn, cg_i64(c, 32), ""), "kblock32");
    qblock q = qblock_at(
        c, gm, ir_cfg_dtype(c->g),
        cg_gep(c, i8, w0,
               LLVMBuildMul(c->b, lb.i, cg_i64(c, panel_block_bytes(gm, ir_cfg_dtype(c->g))), "")));
    cg_loop l = cg_for(c, cg_i64(c, 0), cg_i64(c, q.q8 ? 32 : 16), "k");
    LLVMValueRef b[4];
    qblock_weights(c, gm, &q, l.i, b);
    LLVMValueRef k = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lb.i, cg_i64(c, 32), ""),
                                  q.q8 ? l.i : LLVMBuildMul(c->b, l.i, cg_i64(c, 2), ""), "");
    for (int h = 0; h < (q.q8 ? 1 : 2); h++)
        for (int j = 0; j < 2; j++) {
            LLVMValueRef at = LLVMBuildAdd(
                c->b,
                LLVMBuildMul(c->b, LLVMBuildAdd(c->b, k, cg_i64(c, h), ""), cg_i64(c, gm->nr), ""),
                cg_i64(c, j * gm->lanes), "");
            cg_vstore(c, ATTN_DTYPE_F32, b[2 * h + j], cg_gep(c, c->f32, w, at));
        }
    cg_for_end(c, &l);
    cg_for_end(c, &lb);
    LLVMBuildRetVoid(c->b);
    return fn;
}

/* void micro_R(args, m, p, kb, a): rows m..m+R-1, panel p, k block kb;
 * x of these rows packed at a, mr floats per k. `direct` (the GEMV of
 * few rows): all of k at once (kb = 0), x read in place, a = row m of x:
 * each output is still one FMA chain over k in order, so results equal
 * the blocked GEMM's bit for bit. */
static LLVMValueRef micro(cg *c, const gemm_ctx *gc, int R, const char *kname, bool direct,
                          int npan) {
    const cg_gemm *gm = &gc->gm;
    char name[160];
    snprintf(name, sizeof name, "%s_%s%d%s", kname, direct ? "gemv" : "micro", R,
             npan > 1 ? "x2" : "");
    LLVMTypeRef params[6] = {c->ptr, c->i64, c->i64, c->i64, c->ptr, c->ptr};
    LLVMValueRef fn = cg_helper_begin(c, name, params, 6);
    LLVMValueRef m = LLVMGetParam(fn, 1), p = LLVMGetParam(fn, 2), kb = LLVMGetParam(fn, 3);
    LLVMValueRef x0 = LLVMGetParam(fn, 4);
    LLVMValueRef kn = direct ? cg_i64(c, gm->k)
                             : cg_intrinsic(c, "llvm.smin", c->i64, cg_i64(c, gm->kc),
                                            LLVMBuildSub(c->b, cg_i64(c, gm->k), kb, ""));
    LLVMValueRef first = direct ? LLVMConstInt(LLVMInt1TypeInContext(c->llctx), 1, false)
                                : LLVMBuildICmp(c->b, LLVMIntEQ, kb, cg_i64(c, 0), "first");
    LLVMValueRef last =
        direct ? first
               : LLVMBuildICmp(c->b, LLVMIntSGE, LLVMBuildAdd(c->b, kb, cg_i64(c, gm->kc), ""),
                               cg_i64(c, gm->k), "last");
    /* panels p and (npan 2) p + 1: their columns and sums so far, zero
     * or the partial sums of earlier k blocks */
    LLVMValueRef pan[2], col[2][2], inside[2][2], init[2 * 14 * 2];
    ATTNC_ASSERT(R <= 28 && (npan == 1 || 2 * R * npan <= 2 * 14 * 2));
    for (int pp = 0; pp < npan; pp++) {
        pan[pp] = LLVMBuildAdd(c->b, p, cg_i64(c, pp), "");
        for (int j = 0; j < 2; j++) {
            col[pp][j] = map_field(c, gc->map, pan[pp], j ? MAP_C1 : MAP_C0);
            inside[pp][j] = lanes_below(c, col[pp][j], gm->n);
        }
        for (int r = 0; r < R; r++) {
            LLVMValueRef row =
                LLVMBuildMul(c->b, LLVMBuildAdd(c->b, m, cg_i64(c, r), ""), cg_i64(c, gm->n), "");
            for (int j = 0; j < 2; j++) {
                LLVMValueRef mask = LLVMBuildAnd(c->b, inside[pp][j],
                                                 cg_splat(c, LLVMBuildNot(c->b, first, "")), "");
                LLVMValueRef y = cg_buf_elem(c, gc->y_buf, ATTN_DTYPE_F32,
                                             LLVMBuildAdd(c->b, row, col[pp][j], ""));
                init[pp * 2 * R + 2 * r + j] = cg_vload_masked(c, ATTN_DTYPE_F32, y, mask);
            }
        }
    }
    LLVMValueRef next[2 * 14 * 2];
    attn_dtype wdt = ir_cfg_dtype(c->g);
    if (gm->i8) { /* x quantized at x0: by the GEMV, tiles of R rows; else pack_x's of mr */
        LLVMValueRef w0[2];
        for (int pp = 0; pp < npan; pp++)
            w0[pp] = qpanel_at(c, gc, pan[pp], kb);
        cg_int8_sums(c, gm->nr, R, npan, w0, panel_block_bytes(gm, wdt), wdt == ATTN_DTYPE_Q8_0,
                     LLVMBuildSDiv(c->b, kn, cg_i64(c, 32), ""), x0, direct ? R : gm->mr, init,
                     next);
    } else if (attn_dtype_block(wdt) > 1 && direct) {
        LLVMValueRef w0[2];
        for (int pp = 0; pp < npan; pp++)
            w0[pp] = qpanel_at(c, gc, pan[pp], kb);
        block_sums(c, gc, R, direct, npan, w0, kn, x0, init, next);
    } else if (attn_dtype_block(wdt) > 1) { /* the panel unpacked by the caller */
        LLVMValueRef w0 = LLVMGetParam(fn, 5);
        float_sums(c, gc, R, direct, ATTN_DTYPE_F32, 1, &w0, kn, x0, init, next);
    } else {
        LLVMValueRef w0[2];
        for (int pp = 0; pp < npan; pp++)
            w0[pp] = fpanel_at(c, gc, pan[pp], kb);
        if (gm->mmla)
            mmla_sums(c, gc, R, direct, npan, w0, kn, x0, init, next);
        else if (gm->pairs)
            pair_sums(c, gc, R, direct, npan, w0, kn, x0, init, next);
        else
            float_sums(c, gc, R, direct, gm->wdt, npan, w0, kn, x0, init, next);
    }
    for (int pp = 0; pp < npan; pp++)
        finish_rows(c, gc, R, m, pan[pp], next + pp * 2 * R, last, col[pp], inside[pp]);
    LLVMBuildRetVoid(c->b);
    return fn;
}

/* activations q8_0: what the weights' unsigned bytes add to each q of x
 * (cg_int8.c): q8_0's q + 128, q4_0's nibble = q + 8. */
static int i8_offset(const cg *c) {
    return ir_cfg_dtype(c->g) == ATTN_DTYPE_Q8_0 ? 128 : 8;
}

/* What a linear's kernels read and write: its buffers, shape and map. */
static gemm_ctx linear_ctx(cg *c, const ir_node *n) {
    const cg_plan *pl = c->plan;
    const ir_node *x = n->args[0], *bias = ir_linear_bias(n), *tab = ir_linear_rope_table(n);
    gemm_ctx gc = {.n = n,
                   .gm = cg_gemm_shape(n, &c->target, c->g),
                   .bias_buf = -1,
                   .table_buf = -1,
                   .cache_buf = {-1, -1},
                   .kv_dt = ir_cfg_kv_dtype(c->g)};
    const cg_view *xv = &pl->view[x->id], *yv = &pl->view[n->id];
    /* x and y are row-major [S, K] and [S, N] (inputs, merged heads, y) */
    ATTNC_ASSERT(ir_dim_eq(xv->nb[0], ir_const(1)) && ir_dim_eq(xv->nb[1], ir_const(gc.gm.k)) &&
                 ir_dim_eq(xv->off, ir_const(0)));
    ATTNC_ASSERT(ir_dim_eq(yv->nb[1], ir_const(gc.gm.n)) && ir_dim_eq(yv->off, ir_const(0)));
    gc.x_buf = xv->buf;
    gc.y_buf = yv->buf;
    gc.w_buf = pl->packed[n->id];
    if (bias)
        gc.bias_buf = pl->view[bias->id].buf;
    if (tab)
        gc.table_buf = pl->view[tab->id].buf;
    for (int i = 0; i < c->g->n_nodes; i++) { /* the cache buffers, from the appends */
        const ir_node *a = c->g->nodes[i];
        if (!a->dead && a->op == IR_OP_CACHE_APPEND)
            gc.cache_buf[a->cache] = pl->view[a->id].buf;
    }
    gc.map = map_global(c, n, &gc.gm);
    return gc;
}

/* Few rows (S <= gemv_rows): a GEMV, each thread streaming its panels
 * [lo, hi) once for all rows (pairs of panels for 1 or 2 rows); more rows
 * go on to gemm_bb, where the builder is left. */
static void emit_gemv(cg *c, const gemm_ctx *g, LLVMTypeRef micro_ty, LLVMValueRef const *gemv,
                      LLVMValueRef const *gemv2, int gemv_rows, LLVMValueRef lo, LLVMValueRef hi,
                      LLVMBasicBlockRef gemm_bb) {
    const gemm_ctx gc = *g;
    /* activations q8_0: each thread quantizes the rows (one tile of them) */
    int64_t qx_words = gc.gm.k / 32 * CG_QX_WORDS * gemv_rows;
    LLVMValueRef qx =
        gc.gm.i8 ? cg_slot(c, LLVMArrayType2(c->i32, (uint64_t)qx_words), NULL) : NULL;
    LLVMValueRef x = gc.gm.i8 ? qx : c->base[gc.x_buf];
    LLVMBasicBlockRef done_bb = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "gemv_done");
    LLVMValueRef sw = LLVMBuildSwitch(c->b, c->S, gemm_bb, (unsigned)gemv_rows);
    for (int r = 1; r <= gemv_rows; r++) {
        LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "gemv");
        LLVMAddCase(sw, cg_i64(c, r), bb);
        LLVMPositionBuilderAtEnd(c->b, bb);
        if (gc.gm.i8)
            cg_quantize_rows(c, gc.x_buf, gc.gm.k, cg_i64(c, 0), cg_i64(c, r), cg_i64(c, 0),
                             cg_i64(c, gc.gm.k / 32), qx, r, qx_words, i8_offset(c));
        LLVMValueRef from = lo;
        if (r <= 2 && gemv2[r - 1]) { /* pairs of panels, then the odd one */
            LLVMValueRef npairs =
                LLVMBuildSDiv(c->b, LLVMBuildSub(c->b, hi, lo, ""), cg_i64(c, 2), "");
            cg_loop l2 = cg_for(c, cg_i64(c, 0), npairs, "panel_pair");
            LLVMValueRef p2 =
                LLVMBuildAdd(c->b, lo, LLVMBuildMul(c->b, l2.i, cg_i64(c, 2), ""), "");
            LLVMValueRef args[6] = {c->args, cg_i64(c, 0),         p2, cg_i64(c, 0),
                                    x,       LLVMConstNull(c->ptr)};
            LLVMBuildCall2(c->b, micro_ty, gemv2[r - 1], args, 6, "");
            cg_for_end(c, &l2);
            from = LLVMBuildAdd(c->b, lo, LLVMBuildMul(c->b, npairs, cg_i64(c, 2), ""), "");
        }
        cg_loop lp = cg_for(c, from, hi, "panel");
        LLVMValueRef args[6] = {c->args, cg_i64(c, 0),         lp.i, cg_i64(c, 0),
                                x,       LLVMConstNull(c->ptr)};
        LLVMBuildCall2(c->b, micro_ty, gemv[r - 1], args, 6, "");
        cg_for_end(c, &lp);
        LLVMBuildBr(c->b, done_bb);
    }
    LLVMPositionBuilderAtEnd(c->b, done_bb);
    LLVMBuildRetVoid(c->b);
    LLVMPositionBuilderAtEnd(c->b, gemm_bb);
}

/* The lanes bf16 pairs of x[xrow + k .. xrow + k + 2 lanes) as i32
 * words, zero from k + kreal on. AVX512-BF16: cg_dot_words (vdpbf16ps
 * and the AMX tiles take a subnormal as 0; llama3_8b prefill 2048 block,
 * compute bf16, Xeon with AMX, 2 threads, with the flash's pairs
 * likewise: 192 -> 182 ms); else the even and odd k's rounded by
 * cg_bf16_pair. */
static LLVMValueRef pairs_at(cg *c, const gemm_ctx *gc, LLVMValueRef xrow, LLVMValueRef k,
                             LLVMValueRef kreal) {
    int L = gc->gm.lanes;
    LLVMValueRef x[2];
    for (int h = 0; h < 2; h++) {
        LLVMValueRef kh = LLVMBuildAdd(c->b, k, cg_i64(c, h * L), "");
        x[h] = cg_vload_masked(
            c, ATTN_DTYPE_F32,
            cg_buf_elem(c, gc->x_buf, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, xrow, kh, "")),
            lanes_before(c, kh, kreal));
    }
    if (c->target.bf16_dot)
        return cg_dot_words(c, x[0], x[1]); /* consecutive k's: the pairs as they come */
    int even[64], odd[64];
    for (int i = 0; i < L; i++)
        even[i] = 2 * i, odd[i] = 2 * i + 1;
    return cg_bf16_pair(c, cg_shuffle2(c, x[0], x[1], even, L), cg_shuffle2(c, x[0], x[1], odd, L));
}

/* Rows [mb, mend) of x, k's [kb, kb + kn), into this thread's block ap:
 * [tile of mr rows][k][mr]. */
static void pack_x(cg *c, const gemm_ctx *g, LLVMValueRef ap, LLVMValueRef mb, LLVMValueRef mend,
                   LLVMValueRef kb, LLVMValueRef kn) {
    const gemm_ctx gc = *g;
    cg_loop lr = cg_for(c, mb, mend, "pack_row");
    LLVMValueRef rl = LLVMBuildSub(c->b, lr.i, mb, "");
    LLVMValueRef tile = LLVMBuildSDiv(c->b, rl, cg_i64(c, gc.gm.mr), "");
    LLVMValueRef in_tile = LLVMBuildSRem(c->b, rl, cg_i64(c, gc.gm.mr), "");
    LLVMValueRef xrow =
        LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lr.i, cg_i64(c, gc.gm.k), ""), kb, "");
    if (gc.gm.pairs) {
        /* [tile][kc/2][mr] i32 pairs of bf16, past kn zero: 2 lanes k a
         * step (pairs_at), each pair stored to its place (llama3_8b
         * prefill 2048 block, compute bf16, Zen 5, 2 threads, alternating:
         * one pair a step 430-432 ms, this 406-437) */
        int L = gc.gm.lanes;
        ATTNC_ASSERT(gc.gm.kc % (2 * L) == 0);
        LLVMValueRef steps = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, kn, cg_i64(c, 2 * L - 1), ""),
                                           cg_i64(c, 2 * L), "");
        cg_loop ls = cg_for(c, cg_i64(c, 0), steps, "pack_step");
        LLVMValueRef pair =
            pairs_at(c, &gc, xrow, LLVMBuildMul(c->b, ls.i, cg_i64(c, 2 * L), ""), kn);
        /* pair j of the step: [kpair][mr] words, or (mmla) [kquad][mr][2] */
        int mr = gc.gm.mr;
        bool q = gc.gm.mmla;
        LLVMValueRef to = LLVMBuildAdd(
            c->b,
            LLVMBuildMul(c->b,
                         LLVMBuildAdd(c->b, LLVMBuildMul(c->b, tile, cg_i64(c, gc.gm.kc / 2), ""),
                                      LLVMBuildMul(c->b, ls.i, cg_i64(c, L), ""), ""),
                         cg_i64(c, mr), ""),
            q ? LLVMBuildMul(c->b, in_tile, cg_i64(c, 2), "") : in_tile, "");
        for (int j = 0; j < L; j++)
            LLVMBuildStore(
                c->b,
                LLVMBuildExtractElement(c->b, pair,
                                        LLVMConstInt(c->i32, (unsigned long long)j, false), ""),
                cg_gep(c, c->i32, ap,
                       LLVMBuildAdd(c->b, to, cg_i64(c, q ? j / 2 * 2 * mr + j % 2 : j * mr), "")));
        cg_for_end(c, &ls);
        cg_for_end(c, &lr);
        return;
    }
    cg_loop lkk = cg_for(c, cg_i64(c, 0), kn, "pack_k");
    LLVMValueRef xe =
        cg_load(c, ATTN_DTYPE_F32,
                cg_buf_elem(c, gc.x_buf, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, xrow, lkk.i, "")));
    LLVMValueRef to = LLVMBuildAdd(
        c->b,
        LLVMBuildMul(
            c->b, LLVMBuildAdd(c->b, LLVMBuildMul(c->b, tile, cg_i64(c, gc.gm.kc), ""), lkk.i, ""),
            cg_i64(c, gc.gm.mr), ""),
        in_tile, "");
    LLVMBuildStore(c->b, cg_operand(c, xe), cg_gep(c, c->f32, ap, to));
    cg_for_end(c, &lkk);
    cg_for_end(c, &lr);
}

/* AMX: rows [mb, mend) of x (then zeros to a multiple of 32), k's [kb, kb + kn)
 * rounded up to 32 (zero past kn), into ap as the tiles' A operands:
 * tile (t, s) of rows 16t.. and k's 32s.. is 1 KB at ((t * kc / 32 + s)
 * * 256 words, its 16 rows of 16 i32 pairs of bf16 contiguous; 32 k a
 * step. (One element a step cost more than the tiles' products at 16
 * threads: every thread packs the whole block, and each packs it for
 * its share of the panels alone.) Until tiles of their own, a tile's 16
 * rows lay kc * 2 bytes apart (4 KB at kc 2048), in a few sets of the L1
 * cache: llama3_8b prefill 2048 block, Xeon with AMX, kc 2048, mc 64,
 * 16 threads 82-86 -> 78 ms, 2 threads 470-624 -> 426. */
static void pack_x_amx(cg *c, const gemm_ctx *gc, LLVMValueRef ap, LLVMValueRef mb,
                       LLVMValueRef mend, LLVMValueRef kb, LLVMValueRef kn) {
    const cg_gemm *gm = &gc->gm;
    LLVMValueRef steps =
        LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, kn, cg_i64(c, 31), ""), cg_i64(c, 32), "");
    /* the tiles of 32 rows the block's rows need (a short block: not mc) */
    LLVMValueRef nrows = LLVMBuildMul(
        c->b,
        LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, LLVMBuildSub(c->b, mend, mb, ""), cg_i64(c, 31), ""),
                      cg_i64(c, 32), ""),
        cg_i64(c, 32), "");
    cg_loop lr = cg_for(c, cg_i64(c, 0), nrows, "pack_row");
    LLVMValueRef row = LLVMBuildAdd(c->b, mb, lr.i, "");
    LLVMValueRef real = LLVMBuildICmp(c->b, LLVMIntSLT, row, mend, "");
    /* rows past mend read as zeros (no lane of theirs is loaded) */
    LLVMValueRef kreal = LLVMBuildSelect(c->b, real, kn, cg_i64(c, 0), "");
    LLVMValueRef xrow = LLVMBuildAdd(
        c->b, LLVMBuildMul(c->b, LLVMBuildSelect(c->b, real, row, mb, ""), cg_i64(c, gm->k), ""),
        kb, "");
    /* the row's first word: tile t = row / 16 of steps kc / 32, row % 16 */
    LLVMValueRef row0 = LLVMBuildAdd(
        c->b,
        LLVMBuildMul(c->b, LLVMBuildSDiv(c->b, lr.i, cg_i64(c, 16), ""),
                     cg_i64(c, gm->kc / 32 * 256), ""),
        LLVMBuildMul(c->b, LLVMBuildSRem(c->b, lr.i, cg_i64(c, 16), ""), cg_i64(c, 16), ""), "");
    cg_loop ls = cg_for(c, cg_i64(c, 0), steps, "pack_step");
    LLVMValueRef pair = pairs_at(c, gc, xrow, LLVMBuildMul(c->b, ls.i, cg_i64(c, 32), ""), kreal);
    LLVMValueRef to = LLVMBuildAdd(c->b, row0, LLVMBuildMul(c->b, ls.i, cg_i64(c, 256), ""), "");
    LLVMValueRef st = LLVMBuildStore(c->b, pair, cg_gep(c, c->i32, ap, to));
    LLVMSetAlignment(st, 64);
    cg_for_end(c, &ls);
    cg_for_end(c, &lr);
}

/* Where the micro-kernel's operands of k step s lie: A[0], B[0], A[1],
 * B[1] (x's tiles of rows 0-15 and 16-31 at a, the panel's column
 * halves at wb). */
static void amx_operand_ptrs(cg *c, const cg_gemm *gm, LLVMValueRef a, LLVMValueRef wb,
                             LLVMValueRef s, LLVMValueRef *ops) {
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    for (int h = 0; h < 2; h++) {
        LLVMValueRef at = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, s, cg_i64(c, 1024), ""),
                                       cg_i64(c, h * gm->kc / 32 * 1024), "");
        LLVMValueRef bt = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, s, cg_i64(c, 16 * gm->nr * 4), ""),
                                       cg_i64(c, h * 64), "");
        ops[2 * h] = cg_gep(c, i8, a, at);
        ops[2 * h + 1] = cg_gep(c, i8, wb, bt);
    }
}

/* Rows m..m+R-1 (R <= 32) of panel p, k block kb, x's tiles of the 32
 * rows at a (pack_x_amx's): four 16 x 16 f32 tiles (two row halves x
 * the panel's two column halves) summed by tdpbf16ps over the block's
 * tiles of 32 k (the A tile 16 rows x 32 k of x, the B tile 32 k x 16
 * columns: 16 rows of the panel's pairs), stored to the stack, then row
 * by row the block's sums (plus the partial sums of earlier blocks) to
 * the epilogue or to y. Emitted in the kernel itself: as a function of
 * its own, every call loaded the tile configuration (ldtilecfg) and
 * released the tiles (tilerelease) on the way out (llama3_8b prefill
 * 2048 block, Xeon with AMX, 2 threads, alternating: 207 and 464 ms
 * called, 175 and 407 inline; 16 threads 52-60 both ways, noisy). */
static void amx_micro(cg *c, const gemm_ctx *gc, LLVMValueRef m, LLVMValueRef p, LLVMValueRef kb,
                      LLVMValueRef a, LLVMValueRef R) {
    const cg_gemm *gm = &gc->gm;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(c->llctx);
    LLVMValueRef kn = cg_intrinsic(c, "llvm.smin", c->i64, cg_i64(c, gm->kc),
                                   LLVMBuildSub(c->b, cg_i64(c, gm->k), kb, ""));
    LLVMValueRef steps =
        LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, kn, cg_i64(c, 31), ""), cg_i64(c, 32), "");
    LLVMValueRef first = LLVMBuildICmp(c->b, LLVMIntEQ, kb, cg_i64(c, 0), "first");
    LLVMValueRef last = LLVMBuildICmp(
        c->b, LLVMIntSGE, LLVMBuildAdd(c->b, kb, cg_i64(c, gm->kc), ""), cg_i64(c, gm->k), "last");
    LLVMValueRef wb = fpanel_at(c, gc, p, kb); /* the panel's pairs from kb: B's rows */
    LLVMValueRef astride = cg_i64(c, 64), bstride = cg_i64(c, gm->nr * 4);
    /* tiles 0-3 the sums, 4-7 A[0], B[0], A[1], B[1] of the step: all
     * eight of the machine's tile registers. Each operand is loaded for
     * the next step as soon as the step's last product that reads it is
     * issued (the tiles are not renamed: loading them after all four
     * products left the loads' latency between the steps; llama3_8b
     * prefill 2048 block, compute bf16, Xeon with AMX, 2 threads, three
     * alternating rounds: medians 204.5-208.8 -> 183.4-198.3 ms). The
     * last step reloads its own operands. */
    LLVMValueRef init[8], next[8];
    for (int i = 0; i < 4; i++)
        init[i] = cg_tile_zero(c);
    LLVMValueRef ops[4];
    amx_operand_ptrs(c, gm, a, wb, cg_i64(c, 0), ops);
    for (int i = 0; i < 4; i++)
        init[4 + i] = cg_tile_load(c, ops[i], i % 2 ? bstride : astride);
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "ktile", cg_tile_type(c), 8);
    LLVMValueRef nx =
        cg_intrinsic(c, "llvm.smin", c->i64, LLVMBuildAdd(c->b, l.i, cg_i64(c, 1), ""),
                     LLVMBuildSub(c->b, steps, cg_i64(c, 1), ""));
    amx_operand_ptrs(c, gm, a, wb, nx, ops);
    /* sum i: rows half i / 2 (A[i / 2]), columns half i % 2 (B[i % 2]) */
    next[0] = cg_tile_dp_bf16(c, l.acc[0], l.acc[4], l.acc[5]);
    next[1] = cg_tile_dp_bf16(c, l.acc[1], l.acc[4], l.acc[7]);
    next[4] = cg_tile_load(c, ops[0], astride);
    next[2] = cg_tile_dp_bf16(c, l.acc[2], l.acc[6], l.acc[5]);
    next[5] = cg_tile_load(c, ops[1], bstride);
    next[3] = cg_tile_dp_bf16(c, l.acc[3], l.acc[6], l.acc[7]);
    next[6] = cg_tile_load(c, ops[2], astride);
    next[7] = cg_tile_load(c, ops[3], bstride);
    cg_acc_loop_end(c, &l, steps, init, next);
    LLVMValueRef sc = cg_slot(c, LLVMArrayType2(c->f32, 32 * 32), NULL);
    LLVMSetAlignment(sc, 64);
    for (int i = 0; i < 4; i++)
        cg_tile_store(c, cg_gep(c, i8, sc, cg_i64(c, (i / 2) * 16 * 128 + (i % 2) * 64)),
                      cg_i64(c, 128), next[i]);
    LLVMValueRef col[2], inside[2];
    for (int j = 0; j < 2; j++) {
        col[j] = map_field(c, gc->map, p, j ? MAP_C1 : MAP_C0);
        inside[j] = lanes_below(c, col[j], gm->n);
    }
    cg_loop lr = cg_for(c, cg_i64(c, 0), R, "r");
    LLVMValueRef t = LLVMBuildAdd(c->b, m, lr.i, "t");
    LLVMValueRef row = LLVMBuildMul(c->b, t, cg_i64(c, gm->n), "");
    LLVMValueRef v[2], yat[2];
    for (int j = 0; j < 2; j++) {
        v[j] = cg_vload(c, ATTN_DTYPE_F32,
                        cg_gep(c, c->f32, sc,
                               LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lr.i, cg_i64(c, 32), ""),
                                            cg_i64(c, j * 16), "")));
        yat[j] = cg_buf_elem(c, gc->y_buf, ATTN_DTYPE_F32, LLVMBuildAdd(c->b, row, col[j], ""));
        LLVMValueRef mask =
            LLVMBuildAnd(c->b, inside[j], cg_splat(c, LLVMBuildNot(c->b, first, "")), "");
        v[j] = LLVMBuildFAdd(c->b, v[j], cg_vload_masked(c, ATTN_DTYPE_F32, yat[j], mask), "");
    }
    row_out(c, gc, t, p, v, last, col, inside);
    cg_for_end(c, &lr);
}

/* The AMX micro-kernel over the tiles of 32 rows of rows [mb, mend). */
static void amx_rows(cg *c, const gemm_ctx *gc, LLVMValueRef ap, LLVMValueRef mb, LLVMValueRef mend,
                     LLVMValueRef panel, LLVMValueRef kb) {
    LLVMValueRef nt =
        LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, LLVMBuildSub(c->b, mend, mb, ""), cg_i64(c, 31), ""),
                      cg_i64(c, 32), "");
    cg_loop lt = cg_for(c, cg_i64(c, 0), nt, "rtile");
    LLVMValueRef m = LLVMBuildAdd(c->b, mb, LLVMBuildMul(c->b, lt.i, cg_i64(c, 32), ""), "");
    LLVMValueRef R =
        cg_intrinsic(c, "llvm.smin", c->i64, cg_i64(c, 32), LLVMBuildSub(c->b, mend, m, ""));
    LLVMValueRef at = LLVMBuildMul(c->b, lt.i, cg_i64(c, 32 * gc->gm.kc / 2), "");
    amx_micro(c, gc, m, panel, kb, cg_gep(c, c->i32, ap, at), R);
    cg_for_end(c, &lt);
}

/* The AMX GEMM's threads as a grid of tm x tn: thread ith takes the row
 * blocks of share ith / tn of tm and the panels of share ith % tn of tn.
 * tm is the largest divisor of nth with at least 4 row blocks each (1
 * for few rows: every thread its panels of all of them). Each thread
 * packs the x blocks of its own rows, where splitting the panels alone
 * had every thread pack all of x: at 16 threads 16 times over (llama3_8b
 * prefill 2048 block, compute bf16, Xeon with AMX, 2 threads: x packed
 * once instead of twice, 23 of the block's 200 ms were packing). Every
 * output is still summed by one thread in one order, whichever it is. */
static void amx_grid(cg *c, LLVMValueRef n_mb, LLVMValueRef np, LLVMValueRef *mlo,
                     LLVMValueRef *mhi, LLVMValueRef *plo, LLVMValueRef *phi) {
    LLVMValueRef slot = cg_slot(c, c->i64, cg_i64(c, 1));
    cg_loop lt = cg_for(c, cg_i64(c, 2), LLVMBuildAdd(c->b, c->nth, cg_i64(c, 1), ""), "tm");
    LLVMValueRef divides =
        LLVMBuildICmp(c->b, LLVMIntEQ, LLVMBuildSRem(c->b, c->nth, lt.i, ""), cg_i64(c, 0), "");
    LLVMValueRef enough =
        LLVMBuildICmp(c->b, LLVMIntSLE, LLVMBuildMul(c->b, lt.i, cg_i64(c, 4), ""), n_mb, "");
    LLVMValueRef best = LLVMBuildLoad2(c->b, c->i64, slot, "");
    LLVMBuildStore(
        c->b, LLVMBuildSelect(c->b, LLVMBuildAnd(c->b, divides, enough, ""), lt.i, best, ""), slot);
    cg_for_end(c, &lt);
    LLVMValueRef tm = LLVMBuildLoad2(c->b, c->i64, slot, "tm");
    LLVMValueRef tn = LLVMBuildSDiv(c->b, c->nth, tm, "tn");
    cg_share_of(c, n_mb, LLVMBuildSDiv(c->b, c->ith, tn, ""), tm, mlo, mhi);
    cg_share_of(c, np, LLVMBuildSRem(c->b, c->ith, tn, ""), tn, plo, phi);
}

void cg_emit_linear(cg *c, const ir_node *n, const char *name) {
    gemm_ctx gc = linear_ctx(c, n);
    /* micro-kernels for mr rows and the powers of two below it */
    int sizes[8], n_sizes = 0;
    LLVMValueRef fns[8];
    sizes[n_sizes++] = gc.gm.mr;
    for (int r = 8; r >= 1; r /= 2)
        if (r < gc.gm.mr)
            sizes[n_sizes++] = r;
    if (gc.gm.amx) /* one AMX micro-kernel takes every row count */
        n_sizes = 0;
    for (int i = 0; i < n_sizes; i++)
        fns[i] = micro(c, &gc, sizes[i], name, false, 1);
    LLVMValueRef gemv[CG_GEMV_ROWS], gemv2[2] = {NULL, NULL};
    int gemv_rows = c->target.gemv_rows < CG_GEMV_ROWS ? c->target.gemv_rows : CG_GEMV_ROWS;
    /* bf16 weights too: widened exactly, as in the GEMM (a GEMV of
     * vdpbf16ps on (k, k+1) pairs of a column, x split into bf16 hi + lo,
     * was inexact and slower: the llama3_8b decode block read at 47-77% of
     * the read bandwidth where this reads at 81-92%, at 43-53 GB/s) */
    for (int r = 1; r <= gemv_rows; r++)
        gemv[r - 1] = micro(c, &gc, r, name, true, 1);
    /* a GEMV of 1 or 2 rows takes panels two at a time, in every dtype:
     * one panel's FMA chains alone wait on their latency (llama3_8b
     * decode block @4096, f16 cache, Intel Xeon AVX-512: bf16 weights
     * 3.96 -> 3.16 ms, f32 5.94 -> 5.01-5.15; its AVX2 code, x86-64-v3,
     * on the same machine: bf16 4.69 -> 3.19-3.35, f32 5.85 -> 4.99-5.23;
     * four panels at a time measured no better) */
    for (int r = 1; r <= 2; r++)
        gemv2[r - 1] = micro(c, &gc, r, name, true, 2);
    LLVMTypeRef params[6] = {c->ptr, c->i64, c->i64, c->i64, c->ptr, c->ptr};
    LLVMTypeRef micro_ty = LLVMFunctionType(LLVMVoidTypeInContext(c->llctx), params, 6, false);
    bool blocks = attn_dtype_block(ir_cfg_dtype(c->g)) > 1 && !gc.gm.i8; /* widened to f32 */
    LLVMValueRef unpack = blocks ? unpack_fn(c, &gc, name) : NULL;
    LLVMTypeRef unpack_params[4] = {c->ptr, c->i64, c->i64, c->ptr};
    LLVMTypeRef unpack_ty =
        LLVMFunctionType(LLVMVoidTypeInContext(c->llctx), unpack_params, 4, false);

    cg_kernel_begin(c, name);
    LLVMValueRef lo, hi;
    cg_share(c, cg_i64(c, gc.gm.np), &lo, &hi);
    /* few rows: a GEMV, each thread streaming its panels once for all rows */
    LLVMBasicBlockRef gemm_bb = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "gemm");
    emit_gemv(c, &gc, micro_ty, gemv, gemv2, gemv_rows, lo, hi, gemm_bb);
    LLVMValueRef mslot = cg_slot(c, c->i64, cg_i64(c, 0));
    /* this thread's copy of the x block: [tile of mr rows][k][mr], so the
     * micro-kernel's broadcasts read one short contiguous run per k
     * instead of mr rows a whole row apart (which share cache sets) */
    /* pairs: i32 each; int8: the quantized blocks of x (cg_int8.c) */
    int64_t tile_words = gc.gm.i8      ? gc.gm.kc / 32 * CG_QX_WORDS * gc.gm.mr
                         : gc.gm.pairs ? gc.gm.kc / 2 * gc.gm.mr
                                       : gc.gm.kc * gc.gm.mr;
    /* row blocks of mc rows, the last taking up to the target's
     * gemm_rest_tiles tiles more (rest): a block of a few rows streams
     * every panel from memory again for them. llama3_8b, 64 sequences
     * decoding a token each (`attnc bench --mode decode --batch 64
     * --cache 512 --kv-dtype f16 --part block`, f32 weights, 2 threads,
     * alternating): AVX-512 code on an AMD EPYC Zen 5, blocks of 56 + 8
     * rows 19.7-22.8 ms, one of 64 rows 17.4-19.4; AVX2 code on an AMD
     * EPYC Zen 3, 48 + 16 rows (a rest of one tile) against one block of
     * 64 (of three), medians of alternating rounds: 78.1 against 60.2 ms
     * with the memory read at 16-19 GB/s, 44.9 against 44.3 (fastest
     * runs 43.2 against 41.2) at 33 GB/s (docs/performance.md). AMX
     * keeps its blocks of whole 32-row tiles (amx_grid) */
    int rest = gc.gm.amx ? 0 : c->target.gemm_rest_tiles * gc.gm.mr;
    int64_t ap_words = (gc.gm.mc + rest) / gc.gm.mr * tile_words;
    LLVMTypeRef ap_ty = LLVMArrayType2(c->f32, (uint64_t)ap_words);
    LLVMValueRef ap = cg_slot(c, ap_ty, NULL);
    LLVMSetAlignment(ap, 64);
    LLVMValueRef n_mb =
        LLVMBuildSDiv(c->b,
                      LLVMBuildAdd(c->b, LLVMBuildSub(c->b, c->S, cg_i64(c, rest), ""),
                                   cg_i64(c, gc.gm.mc - 1), ""),
                      cg_i64(c, gc.gm.mc), "");
    n_mb = cg_intrinsic(c, "llvm.smax", c->i64, n_mb, cg_i64(c, 1));
    LLVMValueRef mlo = cg_i64(c, 0), mhi = n_mb;
    if (gc.gm.amx)
        amx_grid(c, n_mb, cg_i64(c, gc.gm.np), &mlo, &mhi, &lo, &hi);
    cg_loop lk = cg_for(c, cg_i64(c, 0), cg_i64(c, (gc.gm.k + gc.gm.kc - 1) / gc.gm.kc), "kblock");
    LLVMValueRef kb = LLVMBuildMul(c->b, lk.i, cg_i64(c, gc.gm.kc), "kb");
    cg_loop lm = cg_for(c, mlo, mhi, "mblock");
    LLVMValueRef mb = LLVMBuildMul(c->b, lm.i, cg_i64(c, gc.gm.mc), "mb");
    LLVMValueRef mend =
        LLVMBuildSelect(/* the last block: to S */
                        c->b,
                        LLVMBuildICmp(c->b, LLVMIntEQ, lm.i,
                                      LLVMBuildSub(c->b, n_mb, cg_i64(c, 1), ""), ""),
                        c->S, LLVMBuildAdd(c->b, mb, cg_i64(c, gc.gm.mc), ""), "mend");
    LLVMValueRef kn = cg_intrinsic(c, "llvm.smin", c->i64, cg_i64(c, gc.gm.kc),
                                   LLVMBuildSub(c->b, cg_i64(c, gc.gm.k), kb, ""));
    if (gc.gm.amx)
        pack_x_amx(c, &gc, ap, mb, mend, kb, kn);
    else if (gc.gm.i8)
        cg_quantize_rows(c, gc.x_buf, gc.gm.k, mb, mend, kb,
                         LLVMBuildSDiv(c->b, kn, cg_i64(c, 32), ""), ap, gc.gm.mr, tile_words,
                         i8_offset(c));
    else
        pack_x(c, &gc, ap, mb, mend, kb, kn);
    /* a block format's panel, unpacked to f32 once per row block */
    LLVMValueRef wp = NULL;
    if (blocks) {
        wp = cg_slot(c, LLVMArrayType2(c->f32, (uint64_t)(gc.gm.kc * gc.gm.nr)), NULL);
        LLVMSetAlignment(wp, 64);
    }
    cg_loop lp = cg_for(c, lo, hi, "panel");
    if (blocks) {
        LLVMValueRef uargs[4] = {c->args, lp.i, kb, wp};
        LLVMBuildCall2(c->b, unpack_ty, unpack, uargs, 4, "");
    }
    LLVMBuildStore(c->b, mb, mslot);
    if (gc.gm.amx) /* tiles of 32 rows of the block */
        amx_rows(c, &gc, ap, mb, mend, lp.i, kb);
    for (int i = 0; i < n_sizes; i++) {
        /* mr rows while they last; then each smaller size at most once */
        LLVMBasicBlockRef test = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "rows");
        LLVMBasicBlockRef call = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "call");
        LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(c->llctx, c->fn, "rows_done");
        LLVMBuildBr(c->b, test);
        LLVMPositionBuilderAtEnd(c->b, test);
        LLVMValueRef m = LLVMBuildLoad2(c->b, c->i64, mslot, "m");
        LLVMValueRef fits = LLVMBuildICmp(c->b, LLVMIntSLE,
                                          LLVMBuildAdd(c->b, m, cg_i64(c, sizes[i]), ""), mend, "");
        LLVMBuildCondBr(c->b, fits, call, next);
        LLVMPositionBuilderAtEnd(c->b, call);
        LLVMValueRef ml = LLVMBuildSub(c->b, m, mb, "");
        LLVMValueRef t0 = LLVMBuildSDiv(c->b, ml, cg_i64(c, gc.gm.mr), "");
        LLVMValueRef in_tile = LLVMBuildSRem(c->b, ml, cg_i64(c, gc.gm.mr), "");
        if (gc.gm.mmla) /* two words a row a quad of k */
            in_tile = LLVMBuildMul(c->b, in_tile, cg_i64(c, 2), "");
        LLVMValueRef a_off =
            LLVMBuildAdd(c->b, LLVMBuildMul(c->b, t0, cg_i64(c, tile_words), ""), in_tile, "");
        LLVMValueRef args[6] = {
            c->args, m, lp.i, kb, cg_gep(c, c->f32, ap, a_off), wp ? wp : LLVMConstNull(c->ptr)};
        LLVMBuildCall2(c->b, micro_ty, fns[i], args, 6, "");
        LLVMBuildStore(c->b, LLVMBuildAdd(c->b, m, cg_i64(c, sizes[i]), ""), mslot);
        LLVMBuildBr(c->b, i == 0 ? test : next);
        LLVMPositionBuilderAtEnd(c->b, next);
    }
    cg_for_end(c, &lp);
    cg_for_end(c, &lm);
    cg_for_end(c, &lk);
    cg_kernel_end(c);
}
