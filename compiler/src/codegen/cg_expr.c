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

LLVMValueRef cg_expr(cg *c, const attn_expr *e, const cg_expr_at *at) {
    LLVMTypeRef shape = LLVMTypeOf(at->kv);
    LLVMTypeRef fty = cg_like(shape, c->f32), bty = cg_like(shape, LLVMInt1TypeInContext(c->llctx));
    LLVMValueRef v[ATTN_EXPR_MAX_NODES];
    for (int k = 0; k < e->n_nodes; k++) {
        const attn_expr_node *x = &e->node[k];
        LLVMValueRef a = x->a >= 0 ? v[x->a] : NULL, b = x->b >= 0 ? v[x->b] : NULL,
                     cc = x->c >= 0 ? v[x->c] : NULL;
        bool f = x->type == ATTN_EXPR_F32;
        bool fo = x->a >= 0 && e->node[x->a].type == ATTN_EXPR_F32; /* the operands' type */
        LLVMValueRef r = NULL;
        switch (x->op) {
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
        case ATTN_EXPR_INPUT: ATTNC_ASSERT(!"expression inputs are not compiled"); break;
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
    return v[e->n_nodes - 1];
}

const attn_expr *cg_expr_of(cg *c, bool mask) {
    const char *text = mask ? ir_cfg_mask_mod(c->g) : ir_cfg_score_mod(c->g);
    if (!text[0])
        return NULL;
    if (!c->expr_parsed[mask]) {
        /* the config was checked: its text parses */
        attn_status st = attn_expr_parse(text, mask ? ATTN_EXPR_MASK_MOD : ATTN_EXPR_SCORE_MOD,
                                         NULL, 0, &c->expr[mask], NULL, NULL);
        ATTNC_ASSERT(st == ATTN_OK);
        c->expr_parsed[mask] = true;
    }
    return &c->expr[mask];
}
