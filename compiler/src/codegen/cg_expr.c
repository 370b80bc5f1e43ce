/* cg_expr.c: score_mod and mask_mod (attn_expr.h) as code, on scalars or
 * on vectors of any lane count: every node of the checked tree becomes
 * the operation attn_expr_eval defines, lane by lane. Integer division
 * and modulo by 0 (and by -1, whose INT_MIN case LLVM leaves undefined)
 * take a safe divisor and select the defined result; floor saturates
 * through llvm.fptosi.sat (NaN 0); exp, log and tanh are polynomials
 * (cg_exp, cg_log, cg_tanh), within a few ulps of the C library's. */
#include <string.h>

#include "attn_expr.h"
#include "codegen/cg_build.h"

static LLVMValueRef int_const(cg *c, LLVMTypeRef shape, int64_t v) {
    return cg_const_splat(cg_like(shape, c->i32),
                          LLVMConstInt(c->i32, (unsigned long long)v, true));
}

/* a // b and a % b, floored, 0 where b is 0 (and b = -1 without overflow). */
static LLVMValueRef floor_div_mod(cg *c, LLVMTypeRef shape, LLVMValueRef a, LLVMValueRef b,
                                  bool mod) {
    LLVMValueRef zero = int_const(c, shape, 0), one = int_const(c, shape, 1),
                 minus = int_const(c, shape, -1);
    LLVMValueRef b0 = LLVMBuildICmp(c->b, LLVMIntEQ, b, zero, "");
    LLVMValueRef bm = LLVMBuildICmp(c->b, LLVMIntEQ, b, minus, "");
    LLVMValueRef safe = LLVMBuildSelect(c->b, LLVMBuildOr(c->b, b0, bm, ""), one, b, "");
    LLVMValueRef q = LLVMBuildSDiv(c->b, a, safe, ""), r = LLVMBuildSRem(c->b, a, safe, "");
    /* a remainder whose sign differs from the divisor's: one step down */
    LLVMValueRef off = LLVMBuildAnd(
        c->b, LLVMBuildICmp(c->b, LLVMIntNE, r, zero, ""),
        LLVMBuildICmp(c->b, LLVMIntSLT, LLVMBuildXor(c->b, r, safe, ""), zero, ""), "");
    if (mod) {
        r = LLVMBuildSelect(c->b, off, LLVMBuildAdd(c->b, r, safe, ""), r, "");
        return LLVMBuildSelect(c->b, LLVMBuildOr(c->b, b0, bm, ""), zero, r, "");
    }
    q = LLVMBuildSelect(c->b, off, LLVMBuildSub(c->b, q, one, ""), q, "");
    q = LLVMBuildSelect(c->b, bm, LLVMBuildSub(c->b, zero, a, ""), q, "");
    return LLVMBuildSelect(c->b, b0, zero, q, "");
}

static LLVMValueRef floor_to_int(cg *c, LLVMValueRef x) {
    LLVMTypeRef fty = LLVMTypeOf(x), ity = cg_like(fty, c->i32);
    LLVMValueRef f = cg_intrinsic(c, "llvm.floor", fty, x, NULL);
    const char *name = "llvm.fptosi.sat";
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    ATTNC_ASSERT(id != 0);
    LLVMTypeRef tys[2] = {ity, fty};
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, tys, 2);
    return LLVMBuildCall2(c->b, LLVMIntrinsicGetType(c->llctx, id, tys, 2), fn, &f, 1, "");
}

static LLVMRealPredicate real_pred(attn_expr_op op) {
    switch (op) {
    case ATTN_EXPR_LT: return LLVMRealOLT;
    case ATTN_EXPR_LE: return LLVMRealOLE;
    case ATTN_EXPR_GT: return LLVMRealOGT;
    case ATTN_EXPR_GE: return LLVMRealOGE;
    case ATTN_EXPR_EQ: return LLVMRealOEQ;
    default: return LLVMRealUNE; /* != is true where either is NaN, as in C */
    }
}

static LLVMIntPredicate int_pred(attn_expr_op op) {
    switch (op) {
    case ATTN_EXPR_LT: return LLVMIntSLT;
    case ATTN_EXPR_LE: return LLVMIntSLE;
    case ATTN_EXPR_GT: return LLVMIntSGT;
    case ATTN_EXPR_GE: return LLVMIntSGE;
    case ATTN_EXPR_EQ: return LLVMIntEQ;
    default: return LLVMIntNE;
    }
}

/* scalar s (i32 or f32) in every lane of shape's like (s for a scalar). */
static LLVMValueRef splat_like(cg *c, LLVMTypeRef shape, LLVMValueRef s) {
    if (LLVMGetTypeKind(shape) != LLVMVectorTypeKind)
        return s;
    unsigned n = LLVMGetVectorSize(shape);
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), n);
    LLVMValueRef v =
        LLVMBuildInsertElement(c->b, LLVMGetPoison(vt), s, LLVMConstInt(c->i32, 0, false), "");
    return LLVMBuildShuffleVector(c->b, v, LLVMGetPoison(vt),
                                  LLVMConstNull(LLVMVectorType(c->i32, n)), "");
}

/* min(max(i, 0), dim - 1): a weight input's index clamped into its dimension. */
static LLVMValueRef clamp_index(cg *c, LLVMTypeRef shape, LLVMValueRef i, int64_t dim) {
    LLVMTypeRef ty = LLVMTypeOf(i);
    i = cg_intrinsic(c, "llvm.smax", ty, i, int_const(c, shape, 0));
    return cg_intrinsic(c, "llvm.smin", ty, i, int_const(c, shape, dim - 1));
}

/* Input node x's value (attn_expr_eval's): a sequence input's value, a
 * token input's at position a (0 outside the positions bound), a weight
 * input's element at the clamped indices a (, b). */
static LLVMValueRef read_input(cg *c, LLVMTypeRef shape, const attn_expr_node *x, LLVMValueRef a,
                               LLVMValueRef b) {
    const attn_expr_input *in = &c->inputs.in[x->input];
    ATTNC_ASSERT(c->in_len[x->input] || c->in_ptr[x->input]); /* bound: sequence phase */
    if (in->per == ATTN_INPUT_SEQUENCE)
        return splat_like(c, shape, c->in_len[x->input]);
    if (in->per == ATTN_INPUT_TOKEN) { /* 0 <= a < n, as unsigned */
        LLVMValueRef ok =
            LLVMBuildICmp(c->b, LLVMIntULT, a, splat_like(c, shape, c->in_len[x->input]), "");
        return cg_read_at(c, c->i32, c->in_ptr[x->input], a, ok);
    }
    LLVMValueRef i = clamp_index(c, shape, a, in->dims[0]);
    if (in->rank > 1)
        i = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, i, int_const(c, shape, in->dims[1]), ""),
                         clamp_index(c, shape, b, in->dims[1]), "");
    return cg_read_at(c, c->f32, c->in_ptr[x->input], i, NULL);
}

LLVMValueRef cg_expr(cg *c, const attn_expr *e, const cg_expr_at *at) {
    LLVMValueRef v[ATTN_EXPR_MAX_NODES];
    cg_expr_values(c, e, at, v);
    return v[e->n_nodes - 1];
}

void cg_expr_values(cg *c, const attn_expr *e, const cg_expr_at *at, LLVMValueRef *v) {
    LLVMTypeRef shape = LLVMTypeOf(at->kv);
    LLVMTypeRef fty = cg_like(shape, c->f32), bty = cg_like(shape, LLVMInt1TypeInContext(c->llctx));
    for (int k = 0; k < e->n_nodes; k++) {
        const attn_expr_node *x = &e->node[k];
        LLVMValueRef a = x->a >= 0 ? v[x->a] : NULL, b = x->b >= 0 ? v[x->b] : NULL,
                     cc = x->c >= 0 ? v[x->c] : NULL;
        bool f = x->type == ATTN_EXPR_F32;
        bool fo = x->a >= 0 && e->node[x->a].type == ATTN_EXPR_F32; /* the operands' type */
        LLVMValueRef r = at->pre ? at->pre[k] : NULL; /* (its operands, unused, fold away) */
        switch (r ? ATTN_EXPR_OP_COUNT : x->op) {
        case ATTN_EXPR_LIT:
            r = f ? cg_const_splat(fty, LLVMConstReal(c->f32, x->f))
                : x->type == ATTN_EXPR_BOOL
                    ? cg_const_splat(bty, LLVMConstInt(LLVMInt1TypeInContext(c->llctx),
                                                       (unsigned long long)(x->i != 0), false))
                    : int_const(c, shape, x->i);
            break;
        case ATTN_EXPR_SCORE:
            ATTNC_ASSERT(at->score);
            r = at->score;
            break;
        case ATTN_EXPR_Q: r = at->q; break;
        case ATTN_EXPR_KV: r = at->kv; break;
        case ATTN_EXPR_HEAD: r = at->h; break;
        case ATTN_EXPR_GROUP: /* heads are >= 0 */
            r = LLVMBuildUDiv(c->b, at->h,
                              int_const(c, shape, ir_cfg_heads(c->g) / ir_cfg_kv_groups(c->g)), "");
            break;
        case ATTN_EXPR_INPUT: r = read_input(c, shape, x, a, b); break;
        case ATTN_EXPR_TO_F32: r = LLVMBuildSIToFP(c->b, a, fty, ""); break;
        case ATTN_EXPR_NEG:
            r = f ? LLVMBuildFNeg(c->b, a, "") : LLVMBuildSub(c->b, int_const(c, shape, 0), a, "");
            break;
        case ATTN_EXPR_NOT: r = LLVMBuildNot(c->b, a, ""); break;
        case ATTN_EXPR_ADD:
            r = f ? LLVMBuildFAdd(c->b, a, b, "") : LLVMBuildAdd(c->b, a, b, "");
            break;
        case ATTN_EXPR_SUB:
            r = f ? LLVMBuildFSub(c->b, a, b, "") : LLVMBuildSub(c->b, a, b, "");
            break;
        case ATTN_EXPR_MUL:
            r = f ? LLVMBuildFMul(c->b, a, b, "") : LLVMBuildMul(c->b, a, b, "");
            break;
        case ATTN_EXPR_DIV: r = LLVMBuildFDiv(c->b, a, b, ""); break;
        case ATTN_EXPR_IDIV: r = floor_div_mod(c, shape, a, b, false); break;
        case ATTN_EXPR_MOD: r = floor_div_mod(c, shape, a, b, true); break;
        case ATTN_EXPR_LT:
        case ATTN_EXPR_LE:
        case ATTN_EXPR_GT:
        case ATTN_EXPR_GE:
        case ATTN_EXPR_EQ:
        case ATTN_EXPR_NE:
            r = fo ? LLVMBuildFCmp(c->b, real_pred(x->op), a, b, "")
                   : LLVMBuildICmp(c->b, int_pred(x->op), a, b, "");
            break;
        case ATTN_EXPR_AND: r = LLVMBuildAnd(c->b, a, b, ""); break;
        case ATTN_EXPR_OR: r = LLVMBuildOr(c->b, a, b, ""); break;
        case ATTN_EXPR_WHERE: r = LLVMBuildSelect(c->b, a, b, cc, ""); break;
        case ATTN_EXPR_MIN:
        case ATTN_EXPR_MAX: {
            bool lt = x->op == ATTN_EXPR_MIN;
            LLVMValueRef pick = f ? LLVMBuildFCmp(c->b, lt ? LLVMRealOLT : LLVMRealOGT, a, b, "")
                                  : LLVMBuildICmp(c->b, lt ? LLVMIntSLT : LLVMIntSGT, a, b, "");
            r = LLVMBuildSelect(c->b, pick, a, b, "");
            break;
        }
        case ATTN_EXPR_ABS:
            r = f ? cg_intrinsic(c, "llvm.fabs", fty, a, NULL)
                  : LLVMBuildSelect(c->b,
                                    LLVMBuildICmp(c->b, LLVMIntSLT, a, int_const(c, shape, 0), ""),
                                    LLVMBuildSub(c->b, int_const(c, shape, 0), a, ""), a, "");
            break;
        case ATTN_EXPR_CLAMP: {
            LLVMValueRef up = f ? LLVMBuildFCmp(c->b, LLVMRealOGT, a, b, "")
                                : LLVMBuildICmp(c->b, LLVMIntSGT, a, b, "");
            LLVMValueRef m = LLVMBuildSelect(c->b, up, a, b, "");
            LLVMValueRef down = f ? LLVMBuildFCmp(c->b, LLVMRealOLT, m, cc, "")
                                  : LLVMBuildICmp(c->b, LLVMIntSLT, m, cc, "");
            r = LLVMBuildSelect(c->b, down, m, cc, "");
            break;
        }
        case ATTN_EXPR_EXP: r = cg_exp(c, a); break;
        case ATTN_EXPR_LOG: r = cg_log(c, a); break;
        case ATTN_EXPR_SQRT: r = cg_intrinsic(c, "llvm.sqrt", fty, a, NULL); break;
        case ATTN_EXPR_TANH: r = cg_tanh(c, a); break;
        case ATTN_EXPR_FLOOR: r = floor_to_int(c, a); break;
        case ATTN_EXPR_OP_COUNT: break;
        }
        ATTNC_ASSERT(r);
        v[k] = r;
    }
}

int cg_expr_row_parts(const attn_expr *e, int *node, int max) {
    bool row[ATTN_EXPR_MAX_NODES], used_by_key[ATTN_EXPR_MAX_NODES] = {false};
    for (int k = 0; k < e->n_nodes; k++) {
        const attn_expr_node *x = &e->node[k];
        int kids[3] = {x->a, x->b, x->c};
        row[k] = x->op == ATTN_EXPR_LIT || x->op == ATTN_EXPR_Q || x->op == ATTN_EXPR_HEAD ||
                 x->op == ATTN_EXPR_GROUP ||
                 (x->op != ATTN_EXPR_SCORE && x->op != ATTN_EXPR_KV && x->op != ATTN_EXPR_INPUT &&
                  x->a >= 0);
        for (int i = 0; i < 3; i++)
            if (kids[i] >= 0)
                row[k] = row[k] && row[kids[i]];
        for (int i = 0; i < 3; i++)
            if (kids[i] >= 0 && !row[k])
                used_by_key[kids[i]] = true;
    }
    int n = 0;
    for (int k = 0; k < e->n_nodes && n < max; k++)
        if (row[k] && used_by_key[k] && e->node[k].type == ATTN_EXPR_F32 &&
            e->node[k].op != ATTN_EXPR_LIT && e->node[k].op != ATTN_EXPR_TO_F32)
            node[n++] = k;
    return n;
}

int cg_expr_distance_addend(const attn_expr *e, bool *minus) {
    int n = e->n_nodes, root = n - 1, parents[ATTN_EXPR_MAX_NODES] = {0},
        parent[ATTN_EXPR_MAX_NODES];
    const attn_expr_node *r = &e->node[root];
    if (n < 3 || (r->op != ATTN_EXPR_ADD && r->op != ATTN_EXPR_SUB) || r->type != ATTN_EXPR_F32)
        return -1;
    int x = e->node[r->a].op == ATTN_EXPR_SCORE                             ? r->b
            : e->node[r->b].op == ATTN_EXPR_SCORE && r->op == ATTN_EXPR_ADD ? r->a
                                                                            : -1;
    *minus = r->op == ATTN_EXPR_SUB;
    for (int k = 0; k < n; k++) {
        const attn_expr_node *y = &e->node[k];
        int kids[3] = {y->a, y->b, y->c};
        for (int i = 0; i < 3; i++)
            if (kids[i] >= 0)
                parents[kids[i]]++, parent[kids[i]] = k;
    }
    bool in[ATTN_EXPR_MAX_NODES] = {false}; /* x's subtree (children come first) */
    if (x >= 0)
        in[x] = true;
    for (int k = x; k >= 0; k--) {
        const attn_expr_node *y = &e->node[k];
        if (!in[k])
            continue;
        if (y->op == ATTN_EXPR_SCORE || (k != x && parents[k] != 1))
            return -1;
        if (y->op == ATTN_EXPR_Q || y->op == ATTN_EXPR_KV) { /* only as q - kv */
            const attn_expr_node *p = &e->node[parent[k]];
            if (p->op != ATTN_EXPR_SUB || e->node[p->a].op != ATTN_EXPR_Q ||
                e->node[p->b].op != ATTN_EXPR_KV)
                return -1;
        }
        int kids[3] = {y->a, y->b, y->c};
        for (int i = 0; i < 3; i++)
            if (kids[i] >= 0)
                in[kids[i]] = true;
    }
    return x;
}

/* P if node k of e is (q - kv) % P == R or (kv - q) % P == R (either
 * side of the ==) as cg_expr_dilation takes it, *shift set; else 0. */
static int dilation_at(const attn_expr *e, int k, int64_t *shift) {
    const attn_expr_node *x = &e->node[k];
    if (x->op != ATTN_EXPR_EQ)
        return 0;
    for (int side = 0; side < 2; side++) {
        const attn_expr_node *m = &e->node[side ? x->b : x->a], *r = &e->node[side ? x->a : x->b];
        if (m->op != ATTN_EXPR_MOD || r->op != ATTN_EXPR_LIT || r->type != ATTN_EXPR_INT)
            continue;
        const attn_expr_node *d = &e->node[m->a], *p = &e->node[m->b];
        if (d->op != ATTN_EXPR_SUB || p->op != ATTN_EXPR_LIT || p->i < 2 ||
            p->i > CG_DILATION_MAX || r->i < 0 || r->i >= p->i)
            continue;
        attn_expr_op a = e->node[d->a].op, b = e->node[d->b].op;
        if (a == ATTN_EXPR_Q && b == ATTN_EXPR_KV) /* q - kv = R: kv = q - R */
            *shift = -(int64_t)r->i;
        else if (a == ATTN_EXPR_KV && b == ATTN_EXPR_Q) /* kv - q = R */
            *shift = r->i;
        else
            continue;
        return p->i;
    }
    return 0;
}

int cg_expr_dilation(const attn_expr *e, int64_t *shift, attn_expr *rest) {
    int stack[2 * ATTN_EXPR_MAX_NODES + 1], n = 0; /* two per `and`, each taken once */
    bool seen[ATTN_EXPR_MAX_NODES] = {false};
    stack[n++] = e->n_nodes - 1;
    while (n > 0) {
        int k = stack[--n];
        const attn_expr_node *x = &e->node[k];
        if (seen[k])
            continue;
        seen[k] = true;
        if (x->op == ATTN_EXPR_AND) {
            stack[n++] = x->a;
            stack[n++] = x->b;
            continue;
        }
        int p = dilation_at(e, k, shift);
        if (!p)
            continue;
        *rest = *e; /* the conjunct's own nodes stay, read by nothing */
        rest->node[k] = (attn_expr_node){.op = ATTN_EXPR_LIT,
                                         .type = ATTN_EXPR_BOOL,
                                         .a = -1,
                                         .b = -1,
                                         .c = -1,
                                         .i = 1,
                                         .at = x->at};
        return p;
    }
    return 0;
}

const attn_expr *cg_expr_of(cg *c, bool mask) {
    const char *text = mask ? ir_cfg_mask_mod(c->g) : ir_cfg_score_mod(c->g);
    if (!text[0])
        return NULL;
    if (!c->expr_parsed[mask]) {
        /* the config was checked: its text parses */
        attn_status st = attn_config_parse_expr(&c->g->cfg, mask, &c->expr[mask], &c->inputs, NULL);
        ATTNC_ASSERT(st == ATTN_OK);
        c->expr_parsed[mask] = true;
    }
    return &c->expr[mask];
}

/* Interval bounds of the expression's int nodes (i64 scalars, within
 * int32: a bound past it gives the whole int32 range, which every
 * wrapped value lies in) and, for its boolean nodes, whether each may be
 * true and may be false somewhere in the box (i1). Float nodes are not
 * bounded: a comparison of floats may be either. */
typedef struct bounds {
    LLVMValueRef lo, hi;  /* int */
    LLVMValueRef yes, no; /* bool: may be true, may be false */
} bounds;

static LLVMValueRef smin64(cg *c, LLVMValueRef a, LLVMValueRef b) {
    return cg_intrinsic(c, "llvm.smin", c->i64, a, b);
}

static LLVMValueRef smax64(cg *c, LLVMValueRef a, LLVMValueRef b) {
    return cg_intrinsic(c, "llvm.smax", c->i64, a, b);
}

static LLVMValueRef i1c(cg *c, bool v) {
    return LLVMConstInt(LLVMInt1TypeInContext(c->llctx), v, false);
}

static bounds whole_int(cg *c) {
    return (bounds){cg_i64(c, INT32_MIN), cg_i64(c, INT32_MAX), NULL, NULL};
}

/* [lo, hi], or the whole int32 range where it leaves it. */
static bounds int_bounds(cg *c, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMValueRef out =
        LLVMBuildOr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, lo, cg_i64(c, INT32_MIN), ""),
                    LLVMBuildICmp(c->b, LLVMIntSGT, hi, cg_i64(c, INT32_MAX), ""), "");
    return (bounds){LLVMBuildSelect(c->b, out, cg_i64(c, INT32_MIN), lo, ""),
                    LLVMBuildSelect(c->b, out, cg_i64(c, INT32_MAX), hi, ""), NULL, NULL};
}

/* floor(a / d) of an i64 a and a constant d other than 0. */
static LLVMValueRef floor_div64(cg *c, LLVMValueRef a, int64_t d) {
    LLVMValueRef q = LLVMBuildSDiv(c->b, a, cg_i64(c, d), ""),
                 r = LLVMBuildSRem(c->b, a, cg_i64(c, d), "");
    LLVMValueRef off =
        LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntNE, r, cg_i64(c, 0), ""),
                     LLVMBuildICmp(c->b, d > 0 ? LLVMIntSLT : LLVMIntSGT, r, cg_i64(c, 0), ""), "");
    return LLVMBuildSub(c->b, q, LLVMBuildZExt(c->b, off, c->i64, ""), "");
}

/* a // d and a % d over a's bounds, for the literal divisor d. */
static bounds div_bounds(cg *c, bounds a, int64_t d, bool mod) {
    if (d == 0 || (mod && d == -1))
        return (bounds){cg_i64(c, 0), cg_i64(c, 0), NULL, NULL};
    if (d == -1) /* -a, wrapping at INT_MIN */
        return int_bounds(c, LLVMBuildNeg(c->b, a.hi, ""), LLVMBuildNeg(c->b, a.lo, ""));
    LLVMValueRef ql = floor_div64(c, a.lo, d), qh = floor_div64(c, a.hi, d);
    if (!mod)
        return d > 0 ? (bounds){ql, qh, NULL, NULL} : (bounds){qh, ql, NULL, NULL};
    if (d < 0) /* (d, 0] */
        return (bounds){cg_i64(c, d + 1), cg_i64(c, 0), NULL, NULL};
    /* within one period: [a.lo mod d, a.hi mod d]; else [0, d) */
    LLVMValueRef one = LLVMBuildICmp(c->b, LLVMIntEQ, ql, qh, "");
    LLVMValueRef rl = LLVMBuildSub(c->b, a.lo, LLVMBuildMul(c->b, ql, cg_i64(c, d), ""), "");
    LLVMValueRef rh = LLVMBuildSub(c->b, a.hi, LLVMBuildMul(c->b, qh, cg_i64(c, d), ""), "");
    return (bounds){LLVMBuildSelect(c->b, one, rl, cg_i64(c, 0), ""),
                    LLVMBuildSelect(c->b, one, rh, cg_i64(c, d - 1), ""), NULL, NULL};
}

/* The comparison op of int bounds a and b: may it be true, may it be false. */
static bounds compare_bounds(cg *c, attn_expr_op op, bounds a, bounds b) {
    if (op == ATTN_EXPR_GT || op == ATTN_EXPR_GE) { /* a > b is b < a */
        bounds t = a;
        a = b, b = t;
        op = op == ATTN_EXPR_GT ? ATTN_EXPR_LT : ATTN_EXPR_LE;
    }
    if (op == ATTN_EXPR_LT || op == ATTN_EXPR_LE) {
        bool strict = op == ATTN_EXPR_LT;
        return (bounds){NULL, NULL,
                        LLVMBuildICmp(c->b, strict ? LLVMIntSLT : LLVMIntSLE, a.lo, b.hi, ""),
                        LLVMBuildICmp(c->b, strict ? LLVMIntSGE : LLVMIntSGT, a.hi, b.lo, "")};
    }
    /* == and !=: equal somewhere where they overlap; unequal somewhere
     * unless both are the same single value */
    LLVMValueRef overlap = LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntSLE, a.lo, b.hi, ""),
                                        LLVMBuildICmp(c->b, LLVMIntSLE, b.lo, a.hi, ""), "");
    LLVMValueRef single =
        LLVMBuildAnd(c->b,
                     LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntEQ, a.lo, a.hi, ""),
                                  LLVMBuildICmp(c->b, LLVMIntEQ, b.lo, b.hi, ""), ""),
                     LLVMBuildICmp(c->b, LLVMIntEQ, a.lo, b.lo, ""), "");
    LLVMValueRef differ = LLVMBuildNot(c->b, single, "");
    return op == ATTN_EXPR_EQ ? (bounds){NULL, NULL, overlap, differ}
                              : (bounds){NULL, NULL, differ, overlap};
}

/* Positions a token input's bounds scan at most: a wider index range
 * gives the whole int range (a tile's rows and keys are far fewer). */
#define TOKEN_SCAN_MAX 1024

/* The reduction `name` (llvm.vector.reduce.*) of vector v. */
static LLVMValueRef reduce(cg *c, const char *name, LLVMValueRef v) {
    return cg_intrinsic(c, name, LLVMTypeOf(v), v, NULL);
}

/* Bounds of token input k read at indices [lo, hi]: the least and
 * greatest value it holds there, by a scan, 0 among them where the range
 * leaves the positions bound (those read 0). */
static bounds token_bounds(cg *c, int k, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMValueRef n = LLVMBuildSExt(c->b, c->in_len[k], c->i64, "");
    LLVMValueRef outside = LLVMBuildOr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, lo, cg_i64(c, 0), ""),
                                       LLVMBuildICmp(c->b, LLVMIntSGE, hi, n, ""), "");
    LLVMValueRef wide = LLVMBuildICmp(c->b, LLVMIntSGT, LLVMBuildSub(c->b, hi, lo, ""),
                                      cg_i64(c, TOKEN_SCAN_MAX), "");
    LLVMValueRef from = smax64(c, lo, cg_i64(c, 0));
    LLVMValueRef to = smin64(c, LLVMBuildAdd(c->b, hi, cg_i64(c, 1), ""), n);
    to = LLVMBuildSelect(c->b, wide, from, to, ""); /* no scan */
    /* a vector of lanes a step, masked past `to` (none when from >= to) */
    int L = c->target.lanes;
    LLVMValueRef big = cg_const_splat(c->vi, LLVMConstInt(c->i32, INT32_MAX, true)),
                 small = cg_const_splat(c->vi,
                                        LLVMConstInt(c->i32, (unsigned long long)INT32_MIN, true));
    LLVMValueRef steps = LLVMBuildSDiv(
        c->b, LLVMBuildAdd(c->b, LLVMBuildSub(c->b, to, from, ""), cg_i64(c, L - 1), ""),
        cg_i64(c, L), "");
    cg_acc_loop l;
    cg_acc_loop_begin(c, &l, "token_bounds", c->vi, 2);
    LLVMValueRef at = LLVMBuildAdd(c->b, from, LLVMBuildMul(c->b, l.i, cg_i64(c, L), ""), "");
    LLVMValueRef left = LLVMBuildTrunc(
        c->b, smin64(c, smax64(c, LLVMBuildSub(c->b, to, at, ""), cg_i64(c, 0)), cg_i64(c, L)),
        c->i32, "");
    LLVMValueRef live = LLVMBuildICmp(c->b, LLVMIntSLT, cg_lane_ids(c), cg_splat(c, left), "");
    LLVMValueRef args[4] = {LLVMBuildInBoundsGEP2(c->b, c->i32, c->in_ptr[k], &at, 1, ""),
                            LLVMConstInt(c->i32, 4, false), live, LLVMConstNull(c->vi)};
    LLVMValueRef v = cg_masked_call(c, "llvm.masked.load", c->vi, c->ptr, args, 4);
    LLVMValueRef next[2] = {
        cg_intrinsic(c, "llvm.smin", c->vi, l.acc[0], LLVMBuildSelect(c->b, live, v, big, "")),
        cg_intrinsic(c, "llvm.smax", c->vi, l.acc[1], LLVMBuildSelect(c->b, live, v, small, ""))};
    LLVMValueRef init[2] = {big, small};
    cg_acc_loop_end(c, &l, steps, init, next);
    LLVMValueRef lo_v =
                     LLVMBuildSExt(c->b, reduce(c, "llvm.vector.reduce.smin", next[0]), c->i64, ""),
                 hi_v =
                     LLVMBuildSExt(c->b, reduce(c, "llvm.vector.reduce.smax", next[1]), c->i64, "");
    lo_v = LLVMBuildSelect(c->b, outside, smin64(c, lo_v, cg_i64(c, 0)), lo_v, "");
    hi_v = LLVMBuildSelect(c->b, outside, smax64(c, hi_v, cg_i64(c, 0)), hi_v, "");
    return (bounds){LLVMBuildSelect(c->b, wide, cg_i64(c, INT32_MIN), lo_v, ""),
                    LLVMBuildSelect(c->b, wide, cg_i64(c, INT32_MAX), hi_v, ""), NULL, NULL};
}

void cg_expr_bounds(cg *c, const attn_expr *e, const cg_expr_box *box, LLVMValueRef *yes,
                    LLVMValueRef *no) {
    bounds v[ATTN_EXPR_MAX_NODES];
    int64_t hpg = ir_cfg_heads(c->g) / ir_cfg_kv_groups(c->g);
    for (int k = 0; k < e->n_nodes; k++) {
        const attn_expr_node *x = &e->node[k];
        bounds a = x->a >= 0 ? v[x->a] : (bounds){0}, b = x->b >= 0 ? v[x->b] : (bounds){0},
               cc = x->c >= 0 ? v[x->c] : (bounds){0};
        bool fo = x->a >= 0 && e->node[x->a].type == ATTN_EXPR_F32;
        bounds r = x->type == ATTN_EXPR_BOOL ? (bounds){NULL, NULL, i1c(c, 1), i1c(c, 1)}
                                             : whole_int(c); /* floats: unbounded */
        switch (x->op) {
        case ATTN_EXPR_LIT:
            if (x->type == ATTN_EXPR_BOOL)
                r = (bounds){NULL, NULL, i1c(c, x->i != 0), i1c(c, x->i == 0)};
            else if (x->type == ATTN_EXPR_INT)
                r = (bounds){cg_i64(c, x->i), cg_i64(c, x->i), NULL, NULL};
            break;
        case ATTN_EXPR_Q: r = (bounds){box->q0, box->q1, NULL, NULL}; break;
        case ATTN_EXPR_KV: r = (bounds){box->k0, box->k1, NULL, NULL}; break;
        case ATTN_EXPR_HEAD: r = (bounds){box->h0, box->h1, NULL, NULL}; break;
        case ATTN_EXPR_GROUP: /* heads are >= 0 */
            r = (bounds){LLVMBuildSDiv(c->b, box->h0, cg_i64(c, hpg), ""),
                         LLVMBuildSDiv(c->b, box->h1, cg_i64(c, hpg), ""), NULL, NULL};
            break;
        case ATTN_EXPR_NEG:
            if (x->type == ATTN_EXPR_INT)
                r = int_bounds(c, LLVMBuildNeg(c->b, a.hi, ""), LLVMBuildNeg(c->b, a.lo, ""));
            break;
        case ATTN_EXPR_NOT: r = (bounds){NULL, NULL, a.no, a.yes}; break;
        case ATTN_EXPR_ADD:
            if (x->type == ATTN_EXPR_INT)
                r = int_bounds(c, LLVMBuildAdd(c->b, a.lo, b.lo, ""),
                               LLVMBuildAdd(c->b, a.hi, b.hi, ""));
            break;
        case ATTN_EXPR_SUB:
            if (x->type == ATTN_EXPR_INT)
                r = int_bounds(c, LLVMBuildSub(c->b, a.lo, b.hi, ""),
                               LLVMBuildSub(c->b, a.hi, b.lo, ""));
            break;
        case ATTN_EXPR_MUL:
            if (x->type == ATTN_EXPR_INT) { /* |products| < 2^62 */
                LLVMValueRef p[4] = {
                    LLVMBuildMul(c->b, a.lo, b.lo, ""), LLVMBuildMul(c->b, a.lo, b.hi, ""),
                    LLVMBuildMul(c->b, a.hi, b.lo, ""), LLVMBuildMul(c->b, a.hi, b.hi, "")};
                r = int_bounds(c, smin64(c, smin64(c, p[0], p[1]), smin64(c, p[2], p[3])),
                               smax64(c, smax64(c, p[0], p[1]), smax64(c, p[2], p[3])));
            }
            break;
        case ATTN_EXPR_IDIV:
        case ATTN_EXPR_MOD:
            if (e->node[x->b].op == ATTN_EXPR_LIT) /* else: any int */
                r = div_bounds(c, a, e->node[x->b].i, x->op == ATTN_EXPR_MOD);
            break;
        case ATTN_EXPR_LT:
        case ATTN_EXPR_LE:
        case ATTN_EXPR_GT:
        case ATTN_EXPR_GE:
        case ATTN_EXPR_EQ:
        case ATTN_EXPR_NE:
            if (!fo)
                r = compare_bounds(c, x->op, a, b);
            break;
        case ATTN_EXPR_AND:
            r = (bounds){NULL, NULL, LLVMBuildAnd(c->b, a.yes, b.yes, ""),
                         LLVMBuildOr(c->b, a.no, b.no, "")};
            break;
        case ATTN_EXPR_OR:
            r = (bounds){NULL, NULL, LLVMBuildOr(c->b, a.yes, b.yes, ""),
                         LLVMBuildAnd(c->b, a.no, b.no, "")};
            break;
        case ATTN_EXPR_WHERE: { /* b where a may be true, cc where it may be false */
            if (x->type == ATTN_EXPR_F32)
                break;
            LLVMValueRef only_b = LLVMBuildNot(c->b, a.no, ""),
                         only_c = LLVMBuildNot(c->b, a.yes, "");
            LLVMValueRef fields[2][3] = {{b.lo, cc.lo, NULL}, {b.hi, cc.hi, NULL}};
            if (x->type == ATTN_EXPR_BOOL)
                fields[0][0] = b.yes, fields[0][1] = cc.yes, fields[1][0] = b.no,
                fields[1][1] = cc.no;
            LLVMValueRef out[2];
            for (int i = 0; i < 2; i++) {
                LLVMValueRef both = x->type == ATTN_EXPR_BOOL
                                        ? LLVMBuildOr(c->b, fields[i][0], fields[i][1], "")
                                        : (i == 0 ? smin64 : smax64)(c, fields[i][0], fields[i][1]);
                out[i] = LLVMBuildSelect(c->b, only_b, fields[i][0],
                                         LLVMBuildSelect(c->b, only_c, fields[i][1], both, ""), "");
            }
            r = x->type == ATTN_EXPR_BOOL ? (bounds){NULL, NULL, out[0], out[1]}
                                          : (bounds){out[0], out[1], NULL, NULL};
            break;
        }
        case ATTN_EXPR_MIN:
            if (x->type == ATTN_EXPR_INT)
                r = (bounds){smin64(c, a.lo, b.lo), smin64(c, a.hi, b.hi), NULL, NULL};
            break;
        case ATTN_EXPR_MAX:
            if (x->type == ATTN_EXPR_INT)
                r = (bounds){smax64(c, a.lo, b.lo), smax64(c, a.hi, b.hi), NULL, NULL};
            break;
        case ATTN_EXPR_CLAMP: /* min(max(a, b), c) */
            if (x->type == ATTN_EXPR_INT)
                r = (bounds){smin64(c, smax64(c, a.lo, b.lo), cc.lo),
                             smin64(c, smax64(c, a.hi, b.hi), cc.hi), NULL, NULL};
            break;
        case ATTN_EXPR_ABS:
            if (x->type == ATTN_EXPR_INT) { /* |INT_MIN| wraps: int_bounds */
                LLVMValueRef neg = LLVMBuildICmp(c->b, LLVMIntSLE, a.hi, cg_i64(c, 0), "");
                LLVMValueRef pos = LLVMBuildICmp(c->b, LLVMIntSGE, a.lo, cg_i64(c, 0), "");
                LLVMValueRef lo = LLVMBuildSelect(
                    c->b, pos, a.lo,
                    LLVMBuildSelect(c->b, neg, LLVMBuildNeg(c->b, a.hi, ""), cg_i64(c, 0), ""), "");
                LLVMValueRef hi = smax64(c, LLVMBuildNeg(c->b, a.lo, ""), a.hi);
                r = int_bounds(c, lo, hi);
            }
            break;
        case ATTN_EXPR_INPUT:
            if (c->inputs.in[x->input].per == ATTN_INPUT_SEQUENCE) {
                LLVMValueRef s = LLVMBuildSExt(c->b, c->in_len[x->input], c->i64, "");
                r = (bounds){s, s, NULL, NULL};
            } else if (c->inputs.in[x->input].per == ATTN_INPUT_TOKEN) {
                r = token_bounds(c, x->input, a.lo, a.hi);
            }
            break;
        default: break; /* score, weights, floats, floor: unbounded */
        }
        v[k] = r;
    }
    *yes = v[e->n_nodes - 1].yes;
    *no = v[e->n_nodes - 1].no;
}
