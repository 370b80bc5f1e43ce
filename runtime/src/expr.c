/* expr.c: score_mod and mask_mod expressions (attn_expr.h): a recursive
 * descent parser that types each node as it builds it (ints widen to f32
 * where a float is needed, never back but through floor), folds constant
 * subtrees, and the evaluator that defines every operation.
 *
 * Precedence, loosest first: or, and, not, one comparison (they do not
 * chain), + -, * / // %, unary -, then literals, names, calls f(..),
 * inputs name[..] and parentheses. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
#include "rt.h"

typedef struct parser {
    const char *src, *p;
    attn_expr_kind kind;
    const attn_expr_input *inputs;
    int n_inputs, depth;
    attn_expr *e;
    attn_msg *msg;
    int32_t err_at;
    bool failed;
} parser;

const char *attn_expr_type_name(attn_expr_type t) {
    return t == ATTN_EXPR_BOOL ? "bool" : t == ATTN_EXPR_INT ? "int" : "f32";
}

static int32_t offset(const parser *ps, const char *at) {
    return (int32_t)(at - ps->src);
}

/* The first error wins; returns -1 (no node) for the caller to pass up. */
static int fail_at(parser *ps, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_at(parser *ps, const char *at, const char *fmt, ...) {
    if (!ps->failed) {
        va_list ap;
        va_start(ap, fmt);
        rt_vfail(ps->msg, ATTN_E_INVALID, fmt, ap);
        va_end(ap);
        ps->failed = true;
        ps->err_at = offset(ps, at);
    }
    return -1;
}

static void skip_space(parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
        ps->p++;
}

/* The next token is punctuation s (longest match: "//" is not "/"). */
static bool peek_punct(parser *ps, const char *s) {
    skip_space(ps);
    size_t n = strlen(s);
    if (strncmp(ps->p, s, n) != 0)
        return false;
    /* "/" must not be the start of "//", "<" of "<=", "=" of "==" .. */
    if (n == 1 && (s[0] == '/' || s[0] == '<' || s[0] == '>') &&
        (ps->p[1] == '=' || (s[0] == '/' && ps->p[1] == '/')))
        return false;
    return true;
}

static bool eat_punct(parser *ps, const char *s) {
    if (!peek_punct(ps, s))
        return false;
    ps->p += strlen(s);
    return true;
}

static bool is_name_char(char ch) {
    return isalnum((unsigned char)ch) || ch == '_';
}

/* The next token is the word w (a keyword or name). */
static bool peek_word(parser *ps, const char *w) {
    skip_space(ps);
    size_t n = strlen(w);
    return strncmp(ps->p, w, n) == 0 && !is_name_char(ps->p[n]);
}

static bool eat_word(parser *ps, const char *w) {
    if (!peek_word(ps, w))
        return false;
    ps->p += strlen(w);
    return true;
}

/* ---- building nodes ------------------------------------------------------ */

static int32_t wrap(int64_t v) {
    return (int32_t)(uint32_t)(uint64_t)v;
}

static int32_t floor_div(int32_t a, int32_t b) {
    if (b == 0)
        return 0;
    if (b == -1)
        return wrap(-(int64_t)a);
    int32_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int32_t floor_mod(int32_t a, int32_t b) {
    if (b == 0 || b == -1)
        return 0;
    int32_t r = a % b;
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

static int32_t floor_to_int(float f) {
    if (isnan(f))
        return 0;
    float r = floorf(f);
    if (r >= 2147483648.0f)
        return INT32_MAX;
    if (r < -2147483648.0f)
        return INT32_MIN;
    return (int32_t)r;
}

typedef union value {
    int32_t i; /* bool and int */
    float f;
} value;

static value eval_node(const attn_expr *e, int k, const attn_expr_input *in,
                       const attn_expr_env *env);

/* The value of node k when it has no names or inputs below it. */
static value fold_value(const attn_expr *e, int k) {
    static const attn_expr_env none = {0};
    return eval_node(e, k, NULL, &none);
}

static bool is_lit(const attn_expr *e, int k) {
    return k >= 0 && e->node[k].op == ATTN_EXPR_LIT;
}

/* A node over children a, b, c (-1: none) of type t, folded to a literal
 * when its children are literals. */
static int add_node(parser *ps, const char *at, attn_expr_op op, attn_expr_type t, int a, int b,
                    int c) {
    attn_expr *e = ps->e;
    if (ps->failed || (a < -1 || b < -1 || c < -1))
        return -1;
    if (e->n_nodes >= ATTN_EXPR_MAX_NODES)
        return fail_at(ps, at, "expression too long (more than %d nodes)", ATTN_EXPR_MAX_NODES);
    int k = e->n_nodes++;
    e->node[k] = (attn_expr_node){
        .op = op, .type = t, .a = a, .b = b, .c = c, .input = -1, .at = offset(ps, at)};
    bool leaf = op == ATTN_EXPR_LIT || op == ATTN_EXPR_SCORE || op == ATTN_EXPR_Q ||
                op == ATTN_EXPR_KV || op == ATTN_EXPR_HEAD || op == ATTN_EXPR_GROUP ||
                op == ATTN_EXPR_INPUT;
    if (!leaf && (a < 0 || is_lit(e, a)) && (b < 0 || is_lit(e, b)) && (c < 0 || is_lit(e, c))) {
        value v = fold_value(e, k);
        /* the children were the last nodes built: drop them with it */
        int keep = k;
        int kids[3] = {a, b, c};
        for (int j = 0; j < 3; j++)
            if (kids[j] >= 0 && kids[j] < keep)
                keep = kids[j];
        if (keep + (a >= 0) + (b >= 0) + (c >= 0) == k) {
            e->n_nodes = keep + 1;
            k = keep;
        }
        e->node[k] = (attn_expr_node){.op = ATTN_EXPR_LIT,
                                      .type = t,
                                      .a = -1,
                                      .b = -1,
                                      .c = -1,
                                      .input = -1,
                                      .i = t == ATTN_EXPR_F32 ? 0 : v.i,
                                      .f = t == ATTN_EXPR_F32 ? v.f : 0,
                                      .at = offset(ps, at)};
    }
    return k;
}

static int lit_int(parser *ps, const char *at, attn_expr_type t, int32_t v) {
    int k = add_node(ps, at, ATTN_EXPR_LIT, t, -1, -1, -1);
    if (k >= 0)
        ps->e->node[k].i = v;
    return k;
}

static int lit_f32(parser *ps, const char *at, float v) {
    int k = add_node(ps, at, ATTN_EXPR_LIT, ATTN_EXPR_F32, -1, -1, -1);
    if (k >= 0)
        ps->e->node[k].f = v;
    return k;
}

static attn_expr_type type_of(const parser *ps, int k) {
    return ps->e->node[k].type;
}

static bool numeric(const parser *ps, int k) {
    return type_of(ps, k) != ATTN_EXPR_BOOL;
}

static int to_f32(parser *ps, int k) {
    if (k < 0 || type_of(ps, k) == ATTN_EXPR_F32)
        return k;
    return add_node(ps, ps->src + ps->e->node[k].at, ATTN_EXPR_TO_F32, ATTN_EXPR_F32, k, -1, -1);
}

/* Operand k of what must be a number (ints and f32). */
static bool need_number(parser *ps, const char *at, const char *what, int k) {
    if (k < 0)
        return false;
    if (numeric(ps, k))
        return true;
    fail_at(ps, at, "'%s' needs numbers, got bool", what);
    return false;
}

/* ---- the grammar --------------------------------------------------------- */

static int parse_or(parser *ps);

static int enter(parser *ps) {
    if (++ps->depth > ATTN_EXPR_MAX_DEPTH)
        return fail_at(ps, ps->p, "expression nested too deeply (more than %d levels)",
                       ATTN_EXPR_MAX_DEPTH);
    return 0;
}

/* Levenshtein distance of a and b, capped at 3. */
static int distance(const char *a, size_t na, const char *b) {
    size_t nb = strlen(b);
    if (na > 32 || nb > 32)
        return 3;
    int row[33];
    for (size_t j = 0; j <= nb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int prev = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int cur = row[j];
            int sub = prev + (a[i - 1] != b[j - 1]);
            int del = row[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            prev = cur;
        }
    }
    return row[nb] > 3 ? 3 : row[nb];
}

static const char *const functions[] = {"where", "min", "max",  "abs",  "clamp",
                                        "exp",   "log", "sqrt", "tanh", "floor"};
enum { N_FUNCTIONS = sizeof functions / sizeof functions[0] };

/* "unknown name 'x'", with the closest known name when one is close. */
static int unknown_name(parser *ps, const char *at, size_t n) {
    const char *best = NULL;
    int bd = n > 2 ? 3 : 2;
    const char *names[5 + ATTN_EXPR_MAX_INPUTS + N_FUNCTIONS];
    int nn = 0;
    names[nn++] = "q";
    names[nn++] = "kv";
    names[nn++] = "h";
    names[nn++] = "g";
    if (ps->kind == ATTN_EXPR_SCORE_MOD)
        names[nn++] = "score";
    for (int i = 0; i < ps->n_inputs; i++)
        names[nn++] = ps->inputs[i].name;
    for (int i = 0; i < N_FUNCTIONS; i++)
        names[nn++] = functions[i];
    for (int i = 0; i < nn; i++) {
        int d = distance(at, n, names[i]);
        if (d < bd) {
            bd = d;
            best = names[i];
        }
    }
    if (n == 5 && strncmp(at, "score", 5) == 0)
        return fail_at(ps, at, "'score' is only known in score_mod");
    if (best)
        return fail_at(ps, at, "unknown name '%.*s' (did you mean '%s'?)", (int)n, at, best);
    return fail_at(ps, at, "unknown name '%.*s'", (int)n, at);
}

/* Arguments of a call or an index, after its opening bracket, up to close;
 * at most max. */
static int parse_args(parser *ps, char close, int *arg, int max) {
    int n = 0;
    char cl[2] = {close, 0};
    if (eat_punct(ps, cl))
        return 0;
    for (;;) {
        if (n == max) {
            fail_at(ps, ps->p, "too many arguments (at most %d)", max);
            return -1;
        }
        if ((arg[n++] = parse_or(ps)) < 0)
            return -1;
        if (eat_punct(ps, cl))
            return n;
        if (!eat_punct(ps, ",")) {
            fail_at(ps, ps->p, "expected ',' or '%c'", close);
            return -1;
        }
    }
}

static int need_int_index(parser *ps, const char *at, const char *name, int k) {
    if (k >= 0 && type_of(ps, k) != ATTN_EXPR_INT)
        return fail_at(ps, ps->src + ps->e->node[k].at, "an index of '%s' must be an int, got %s",
                       name, attn_expr_type_name(type_of(ps, k)));
    (void)at;
    return k;
}

static int parse_input(parser *ps, const char *at, int in) {
    const attn_expr_input *x = &ps->inputs[in];
    int arg[2] = {-1, -1}, n = 0;
    bool bracket = eat_punct(ps, "[");
    if (bracket && (n = parse_args(ps, ']', arg, 2)) < 0)
        return -1;
    int want = x->per == ATTN_INPUT_TOKEN ? 1 : x->per == ATTN_INPUT_SEQUENCE ? 0 : x->rank;
    if (n != want || (want == 0 && bracket))
        return fail_at(ps, at, "'%s' takes %d ind%s (%s), got %d", x->name, want,
                       want == 1 ? "ex" : "ices",
                       x->per == ATTN_INPUT_TOKEN      ? "a position: name[q] or name[kv]"
                       : x->per == ATTN_INPUT_SEQUENCE ? "one value per sequence"
                                                       : "a weight's dimensions",
                       n);
    for (int j = 0; j < n; j++)
        if (need_int_index(ps, at, x->name, arg[j]) < 0)
            return -1;
    int k =
        add_node(ps, at, ATTN_EXPR_INPUT,
                 x->per == ATTN_INPUT_WEIGHT ? ATTN_EXPR_F32 : ATTN_EXPR_INT, arg[0], arg[1], -1);
    if (k >= 0) {
        ps->e->node[k].input = in;
        ps->e->inputs_used |= 1u << in;
    }
    return k;
}

/* Both operands of a binary numeric operation in one type: int if both
 * are, else f32. */
static attn_expr_type unify(parser *ps, int *a, int *b) {
    if (type_of(ps, *a) == ATTN_EXPR_INT && type_of(ps, *b) == ATTN_EXPR_INT)
        return ATTN_EXPR_INT;
    *a = to_f32(ps, *a);
    *b = to_f32(ps, *b);
    return ATTN_EXPR_F32;
}

static int parse_call(parser *ps, const char *at, const char *name) {
    int arg[3], n = parse_args(ps, ')', arg, 3);
    if (n < 0)
        return -1;
    static const struct {
        const char *name;
        attn_expr_op op;
        int args;
    } fns[] = {{"where", ATTN_EXPR_WHERE, 3}, {"min", ATTN_EXPR_MIN, 2},
               {"max", ATTN_EXPR_MAX, 2},     {"abs", ATTN_EXPR_ABS, 1},
               {"clamp", ATTN_EXPR_CLAMP, 3}, {"exp", ATTN_EXPR_EXP, 1},
               {"log", ATTN_EXPR_LOG, 1},     {"sqrt", ATTN_EXPR_SQRT, 1},
               {"tanh", ATTN_EXPR_TANH, 1},   {"floor", ATTN_EXPR_FLOOR, 1}};
    int f = 0;
    while (strcmp(fns[f].name, name) != 0)
        f++;
    if (n != fns[f].args)
        return fail_at(ps, at, "'%s' takes %d argument%s, got %d", name, fns[f].args,
                       fns[f].args == 1 ? "" : "s", n);
    attn_expr_op op = fns[f].op;
    if (op == ATTN_EXPR_WHERE) {
        if (type_of(ps, arg[0]) != ATTN_EXPR_BOOL)
            return fail_at(ps, at, "'where' needs a bool condition, got %s",
                           attn_expr_type_name(type_of(ps, arg[0])));
        attn_expr_type t = type_of(ps, arg[1]);
        if (t != type_of(ps, arg[2])) {
            if (!numeric(ps, arg[1]) || !numeric(ps, arg[2]))
                return fail_at(ps, at, "'where' needs its two values of one type, got %s and %s",
                               attn_expr_type_name(t), attn_expr_type_name(type_of(ps, arg[2])));
            t = unify(ps, &arg[1], &arg[2]);
        }
        return add_node(ps, at, op, t, arg[0], arg[1], arg[2]);
    }
    for (int j = 0; j < n; j++)
        if (!need_number(ps, at, name, arg[j]))
            return -1;
    switch (op) {
    case ATTN_EXPR_MIN:
    case ATTN_EXPR_MAX: {
        attn_expr_type t = unify(ps, &arg[0], &arg[1]);
        return add_node(ps, at, op, t, arg[0], arg[1], -1);
    }
    case ATTN_EXPR_CLAMP: {
        bool ints = type_of(ps, arg[0]) == ATTN_EXPR_INT && type_of(ps, arg[1]) == ATTN_EXPR_INT &&
                    type_of(ps, arg[2]) == ATTN_EXPR_INT;
        for (int j = 0; j < 3 && !ints; j++)
            arg[j] = to_f32(ps, arg[j]);
        return add_node(ps, at, op, ints ? ATTN_EXPR_INT : ATTN_EXPR_F32, arg[0], arg[1], arg[2]);
    }
    case ATTN_EXPR_ABS: return add_node(ps, at, op, type_of(ps, arg[0]), arg[0], -1, -1);
    case ATTN_EXPR_FLOOR:
        if (type_of(ps, arg[0]) == ATTN_EXPR_INT)
            return arg[0];
        return add_node(ps, at, op, ATTN_EXPR_INT, arg[0], -1, -1);
    default: return add_node(ps, at, op, ATTN_EXPR_F32, to_f32(ps, arg[0]), -1, -1);
    }
}

static int parse_number(parser *ps) {
    const char *at = ps->p, *q = ps->p;
    while (isdigit((unsigned char)*q))
        q++;
    bool real = *q == '.' || *q == 'e' || *q == 'E';
    if (real) {
        char *end;
        float f = strtof(at, &end);
        if (end == at || is_name_char(*end) || *end == '.')
            return fail_at(ps, at, "malformed number");
        if (isinf(f))
            return fail_at(ps, at, "number out of range (use 'inf')");
        ps->p = end;
        return lit_f32(ps, at, f);
    }
    if (is_name_char(*q))
        return fail_at(ps, at, "malformed number");
    int64_t v = 0;
    for (const char *d = at; d < q; d++) {
        v = v * 10 + (*d - '0');
        if (v > INT32_MAX)
            return fail_at(ps, at, "integer out of range (at most %d)", INT32_MAX);
    }
    ps->p = q;
    return lit_int(ps, at, ATTN_EXPR_INT, (int32_t)v);
}

static int parse_primary(parser *ps) {
    skip_space(ps);
    const char *at = ps->p;
    if (enter(ps) < 0)
        return -1;
    int k;
    if (isdigit((unsigned char)*at) || (*at == '.' && isdigit((unsigned char)at[1]))) {
        k = parse_number(ps);
    } else if (eat_punct(ps, "(")) {
        k = parse_or(ps);
        if (k >= 0 && !eat_punct(ps, ")"))
            k = fail_at(ps, ps->p, "expected ')'");
    } else if (is_name_char(*at)) {
        const char *q = at;
        while (is_name_char(*q))
            q++;
        size_t n = (size_t)(q - at);
        char name[64];
        if (n >= sizeof name) {
            ps->depth--;
            return unknown_name(ps, at, n);
        }
        memcpy(name, at, n);
        name[n] = 0;
        ps->p = q;
        int fn = 0;
        while (fn < N_FUNCTIONS && strcmp(functions[fn], name) != 0)
            fn++;
        int in = 0;
        while (in < ps->n_inputs && strcmp(ps->inputs[in].name, name) != 0)
            in++;
        if (!strcmp(name, "inf")) {
            k = lit_f32(ps, at, INFINITY);
        } else if (!strcmp(name, "true") || !strcmp(name, "false")) {
            k = lit_int(ps, at, ATTN_EXPR_BOOL, name[0] == 't');
        } else if (!strcmp(name, "and") || !strcmp(name, "or") || !strcmp(name, "not")) {
            k = fail_at(ps, at, "expected a value, found '%s'", name);
        } else if (in < ps->n_inputs) {
            k = parse_input(ps, at, in);
        } else if (fn < N_FUNCTIONS) {
            k = eat_punct(ps, "(") ? parse_call(ps, at, name)
                                   : fail_at(ps, at, "'%s' is a function: %s(..)", name, name);
        } else if (!strcmp(name, "q") || !strcmp(name, "kv") || !strcmp(name, "h") ||
                   !strcmp(name, "g")) {
            attn_expr_op op = name[0] == 'q'   ? ATTN_EXPR_Q
                              : name[0] == 'k' ? ATTN_EXPR_KV
                              : name[0] == 'h' ? ATTN_EXPR_HEAD
                                               : ATTN_EXPR_GROUP;
            k = add_node(ps, at, op, ATTN_EXPR_INT, -1, -1, -1);
        } else if (!strcmp(name, "score") && ps->kind == ATTN_EXPR_SCORE_MOD) {
            k = add_node(ps, at, ATTN_EXPR_SCORE, ATTN_EXPR_F32, -1, -1, -1);
        } else {
            k = unknown_name(ps, at, n);
        }
    } else if (*at == 0) {
        k = fail_at(ps, at, "expected a value, found the end");
    } else {
        k = fail_at(ps, at, "expected a value, found '%c'", *at);
    }
    ps->depth--;
    return k;
}

static int parse_unary(parser *ps) {
    skip_space(ps);
    const char *at = ps->p;
    if (eat_punct(ps, "-")) {
        if (enter(ps) < 0)
            return -1;
        int a = parse_unary(ps);
        ps->depth--;
        if (!need_number(ps, at, "-", a))
            return -1;
        return add_node(ps, at, ATTN_EXPR_NEG, type_of(ps, a), a, -1, -1);
    }
    return parse_primary(ps);
}

static int parse_product(parser *ps) {
    int a = parse_unary(ps);
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        attn_expr_op op;
        const char *what;
        if (eat_punct(ps, "//"))
            op = ATTN_EXPR_IDIV, what = "//";
        else if (eat_punct(ps, "*"))
            op = ATTN_EXPR_MUL, what = "*";
        else if (eat_punct(ps, "/"))
            op = ATTN_EXPR_DIV, what = "/";
        else if (eat_punct(ps, "%"))
            op = ATTN_EXPR_MOD, what = "%";
        else
            return a;
        int b = parse_unary(ps);
        if (a < 0 || b < 0 || !need_number(ps, at, what, a) || !need_number(ps, at, what, b))
            return -1;
        if (op == ATTN_EXPR_IDIV || op == ATTN_EXPR_MOD) {
            if (type_of(ps, a) != ATTN_EXPR_INT || type_of(ps, b) != ATTN_EXPR_INT)
                return fail_at(ps, at, "'%s' needs ints, got %s and %s (floor(..) makes an int)",
                               what, attn_expr_type_name(type_of(ps, a)),
                               attn_expr_type_name(type_of(ps, b)));
            a = add_node(ps, at, op, ATTN_EXPR_INT, a, b, -1);
        } else if (op == ATTN_EXPR_DIV) {
            a = add_node(ps, at, op, ATTN_EXPR_F32, to_f32(ps, a), to_f32(ps, b), -1);
        } else {
            attn_expr_type t = unify(ps, &a, &b);
            a = add_node(ps, at, op, t, a, b, -1);
        }
    }
}

static int parse_sum(parser *ps) {
    int a = parse_product(ps);
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        attn_expr_op op;
        if (eat_punct(ps, "+"))
            op = ATTN_EXPR_ADD;
        else if (eat_punct(ps, "-"))
            op = ATTN_EXPR_SUB;
        else
            return a;
        int b = parse_product(ps);
        const char *what = op == ATTN_EXPR_ADD ? "+" : "-";
        if (a < 0 || b < 0 || !need_number(ps, at, what, a) || !need_number(ps, at, what, b))
            return -1;
        attn_expr_type t = unify(ps, &a, &b);
        a = add_node(ps, at, op, t, a, b, -1);
    }
}

static bool comparison(parser *ps, attn_expr_op *op, const char **what) {
    static const struct {
        const char *s;
        attn_expr_op op;
    } cmp[] = {{"<=", ATTN_EXPR_LE}, {">=", ATTN_EXPR_GE}, {"==", ATTN_EXPR_EQ},
               {"!=", ATTN_EXPR_NE}, {"<", ATTN_EXPR_LT},  {">", ATTN_EXPR_GT}};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        if (eat_punct(ps, cmp[i].s)) {
            *op = cmp[i].op;
            *what = cmp[i].s;
            return true;
        }
    return false;
}

static int parse_comparison(parser *ps) {
    int a = parse_sum(ps);
    skip_space(ps);
    const char *at = ps->p, *what;
    attn_expr_op op;
    if (a < 0 || !comparison(ps, &op, &what))
        return a;
    int b = parse_sum(ps);
    if (b < 0)
        return -1;
    skip_space(ps);
    const char *again = ps->p, *w2;
    attn_expr_op op2;
    if (comparison(ps, &op2, &w2))
        return fail_at(ps, again, "comparisons do not chain; join them with 'and'");
    bool eq = op == ATTN_EXPR_EQ || op == ATTN_EXPR_NE;
    if (eq && type_of(ps, a) == ATTN_EXPR_BOOL && type_of(ps, b) == ATTN_EXPR_BOOL)
        return add_node(ps, at, op, ATTN_EXPR_BOOL, a, b, -1);
    if (!need_number(ps, at, what, a) || !need_number(ps, at, what, b))
        return -1;
    unify(ps, &a, &b);
    return add_node(ps, at, op, ATTN_EXPR_BOOL, a, b, -1);
}

static int parse_not(parser *ps) {
    skip_space(ps);
    const char *at = ps->p;
    if (!eat_word(ps, "not"))
        return parse_comparison(ps);
    if (enter(ps) < 0)
        return -1;
    int a = parse_not(ps);
    ps->depth--;
    if (a >= 0 && type_of(ps, a) != ATTN_EXPR_BOOL)
        return fail_at(ps, at, "'not' needs a bool, got %s", attn_expr_type_name(type_of(ps, a)));
    return add_node(ps, at, ATTN_EXPR_NOT, ATTN_EXPR_BOOL, a, -1, -1);
}

static int parse_logic(parser *ps, const char *word, attn_expr_op op, int (*next)(parser *)) {
    int a = next(ps);
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        if (a < 0 || !eat_word(ps, word))
            return a;
        int b = next(ps);
        if (b < 0)
            return -1;
        if (type_of(ps, a) != ATTN_EXPR_BOOL || type_of(ps, b) != ATTN_EXPR_BOOL)
            return fail_at(
                ps, at, "'%s' needs booleans, got %s", word,
                attn_expr_type_name(type_of(ps, type_of(ps, a) != ATTN_EXPR_BOOL ? a : b)));
        a = add_node(ps, at, op, ATTN_EXPR_BOOL, a, b, -1);
    }
}

static int parse_and(parser *ps) {
    return parse_logic(ps, "and", ATTN_EXPR_AND, parse_not);
}

static int parse_or(parser *ps) {
    if (enter(ps) < 0)
        return -1;
    int k = parse_logic(ps, "or", ATTN_EXPR_OR, parse_and);
    ps->depth--;
    return k;
}

/* Nodes no longer reachable from the root (folded away where they were
 * not the last built) are dropped, keeping children before parents. */
static void compact(attn_expr *e) {
    int n = e->n_nodes, map[ATTN_EXPR_MAX_NODES];
    bool live[ATTN_EXPR_MAX_NODES] = {0};
    live[n - 1] = true;
    for (int k = n - 1; k >= 0; k--)
        if (live[k]) {
            const attn_expr_node *x = &e->node[k];
            int kids[3] = {x->a, x->b, x->c};
            for (int j = 0; j < 3; j++)
                if (kids[j] >= 0)
                    live[kids[j]] = true;
        }
    int m = 0;
    e->inputs_used = 0;
    for (int k = 0; k < n; k++) {
        if (!live[k])
            continue;
        map[k] = m;
        attn_expr_node x = e->node[k];
        x.a = x.a >= 0 ? map[x.a] : -1;
        x.b = x.b >= 0 ? map[x.b] : -1;
        x.c = x.c >= 0 ? map[x.c] : -1;
        if (x.op == ATTN_EXPR_INPUT)
            e->inputs_used |= 1u << x.input;
        e->node[m++] = x;
    }
    e->n_nodes = m;
}

attn_status attn_expr_parse(const char *src, attn_expr_kind kind, const attn_expr_input *inputs,
                            int n_inputs, attn_expr *out, attn_msg *msg, int32_t *at) {
    if (at)
        *at = 0;
    if (!src || !out || n_inputs < 0 || n_inputs > ATTN_EXPR_MAX_INPUTS || (n_inputs && !inputs))
        return rt_fail(msg, ATTN_E_INVALID, "attn_expr_parse: bad arguments");
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i].name ||
            (inputs[i].per == ATTN_INPUT_WEIGHT && (inputs[i].rank < 1 || inputs[i].rank > 2)))
            return rt_fail(msg, ATTN_E_INVALID, "attn_expr_parse: bad input %d", i);
    parser ps = {.src = src,
                 .p = src,
                 .kind = kind,
                 .inputs = inputs,
                 .n_inputs = n_inputs,
                 .e = out,
                 .msg = msg};
    out->n_nodes = 0;
    out->inputs_used = 0;
    int root = parse_or(&ps);
    skip_space(&ps);
    if (root >= 0 && *ps.p)
        root = fail_at(&ps, ps.p, "unexpected '%c' after the expression", *ps.p);
    if (root >= 0 && kind == ATTN_EXPR_MASK_MOD && type_of(&ps, root) != ATTN_EXPR_BOOL)
        root = fail_at(&ps, src, "mask_mod must be a bool, got %s",
                       attn_expr_type_name(type_of(&ps, root)));
    if (root >= 0 && kind == ATTN_EXPR_SCORE_MOD && type_of(&ps, root) == ATTN_EXPR_BOOL)
        root = fail_at(&ps, src, "score_mod must be a number, got bool");
    if (root >= 0 && kind == ATTN_EXPR_SCORE_MOD)
        root = to_f32(&ps, root);
    if (root < 0) {
        if (at)
            *at = ps.err_at;
        out->n_nodes = 0;
        return ATTN_E_INVALID;
    }
    /* the root last (a folded subtree may have left it earlier) */
    if (root != out->n_nodes - 1) {
        attn_expr_node r = out->node[root];
        if (out->n_nodes >= ATTN_EXPR_MAX_NODES) {
            fail_at(&ps, src, "expression too long (more than %d nodes)", ATTN_EXPR_MAX_NODES);
            if (at)
                *at = 0;
            return ATTN_E_INVALID;
        }
        out->node[out->n_nodes++] = r;
    }
    compact(out);
    return ATTN_OK;
}

/* ---- evaluation ---------------------------------------------------------- */

static int64_t clamp_index(int32_t i, int64_t dim) {
    return i < 0 ? 0 : i >= dim ? dim - 1 : i;
}

static value eval_node(const attn_expr *e, int k, const attn_expr_input *in,
                       const attn_expr_env *env) {
    const attn_expr_node *x = &e->node[k];
    value a = {0}, b = {0}, c = {0}, r = {0};
    if (x->op != ATTN_EXPR_INPUT) {
        if (x->a >= 0)
            a = eval_node(e, x->a, in, env);
        if (x->b >= 0)
            b = eval_node(e, x->b, in, env);
        if (x->c >= 0)
            c = eval_node(e, x->c, in, env);
    }
    bool f = x->type == ATTN_EXPR_F32;
    /* the operands' type, for comparisons */
    bool fo = x->a >= 0 && e->node[x->a].type == ATTN_EXPR_F32;
    switch (x->op) {
    case ATTN_EXPR_LIT:
        if (f)
            r.f = x->f;
        else
            r.i = x->i;
        break;
    case ATTN_EXPR_SCORE: r.f = env->score; break;
    case ATTN_EXPR_Q: r.i = env->q; break;
    case ATTN_EXPR_KV: r.i = env->kv; break;
    case ATTN_EXPR_HEAD: r.i = env->h; break;
    case ATTN_EXPR_GROUP: r.i = env->g; break;
    case ATTN_EXPR_INPUT: {
        const attn_expr_input *p = &in[x->input];
        if (p->per == ATTN_INPUT_SEQUENCE) {
            r.i = env->sequence ? env->sequence(env->ctx, x->input) : 0;
        } else if (p->per == ATTN_INPUT_TOKEN) {
            int32_t pos = eval_node(e, x->a, in, env).i;
            r.i = env->token ? env->token(env->ctx, x->input, pos) : 0;
        } else {
            int64_t i = clamp_index(eval_node(e, x->a, in, env).i, p->dims[0]);
            int64_t j = p->rank > 1 ? clamp_index(eval_node(e, x->b, in, env).i, p->dims[1]) : 0;
            r.f = env->weight ? env->weight(env->ctx, x->input, i, j) : 0;
        }
        break;
    }
    case ATTN_EXPR_TO_F32: r.f = (float)a.i; break;
    case ATTN_EXPR_NEG:
        if (f)
            r.f = -a.f;
        else
            r.i = wrap(-(int64_t)a.i);
        break;
    case ATTN_EXPR_NOT: r.i = !a.i; break;
    case ATTN_EXPR_ADD:
        if (f)
            r.f = a.f + b.f;
        else
            r.i = wrap((int64_t)a.i + b.i);
        break;
    case ATTN_EXPR_SUB:
        if (f)
            r.f = a.f - b.f;
        else
            r.i = wrap((int64_t)a.i - b.i);
        break;
    case ATTN_EXPR_MUL:
        if (f)
            r.f = a.f * b.f;
        else
            r.i = wrap((int64_t)a.i * b.i);
        break;
    case ATTN_EXPR_DIV: r.f = a.f / b.f; break;
    case ATTN_EXPR_IDIV: r.i = floor_div(a.i, b.i); break;
    case ATTN_EXPR_MOD: r.i = floor_mod(a.i, b.i); break;
    case ATTN_EXPR_LT: r.i = fo ? a.f < b.f : a.i < b.i; break;
    case ATTN_EXPR_LE: r.i = fo ? a.f <= b.f : a.i <= b.i; break;
    case ATTN_EXPR_GT: r.i = fo ? a.f > b.f : a.i > b.i; break;
    case ATTN_EXPR_GE: r.i = fo ? a.f >= b.f : a.i >= b.i; break;
    case ATTN_EXPR_EQ: r.i = fo ? a.f == b.f : a.i == b.i; break;
    case ATTN_EXPR_NE: r.i = fo ? a.f != b.f : a.i != b.i; break;
    case ATTN_EXPR_AND: r.i = a.i && b.i; break;
    case ATTN_EXPR_OR: r.i = a.i || b.i; break;
    case ATTN_EXPR_WHERE: r = a.i ? b : c; break;
    case ATTN_EXPR_MIN:
        if (f)
            r.f = a.f < b.f ? a.f : b.f;
        else
            r.i = a.i < b.i ? a.i : b.i;
        break;
    case ATTN_EXPR_MAX:
        if (f)
            r.f = a.f > b.f ? a.f : b.f;
        else
            r.i = a.i > b.i ? a.i : b.i;
        break;
    case ATTN_EXPR_ABS:
        if (f)
            r.f = fabsf(a.f);
        else
            r.i = a.i < 0 ? wrap(-(int64_t)a.i) : a.i;
        break;
    case ATTN_EXPR_CLAMP:
        if (f) {
            float m = a.f > b.f ? a.f : b.f;
            r.f = m < c.f ? m : c.f;
        } else {
            int32_t m = a.i > b.i ? a.i : b.i;
            r.i = m < c.i ? m : c.i;
        }
        break;
    case ATTN_EXPR_EXP: r.f = expf(a.f); break;
    case ATTN_EXPR_LOG: r.f = logf(a.f); break;
    case ATTN_EXPR_SQRT: r.f = sqrtf(a.f); break;
    case ATTN_EXPR_TANH: r.f = tanhf(a.f); break;
    case ATTN_EXPR_FLOOR: r.i = floor_to_int(a.f); break;
    case ATTN_EXPR_OP_COUNT: break;
    }
    return r;
}

float attn_expr_eval(const attn_expr *e, const attn_expr_input *inputs, const attn_expr_env *env) {
    int root = e->n_nodes - 1;
    value v = eval_node(e, root, inputs, env);
    return e->node[root].type == ATTN_EXPR_F32 ? v.f : (float)v.i;
}

/* ---- printing ------------------------------------------------------------ */

typedef struct out {
    char *buf;
    size_t n, len;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = o->len < o->n ? o->buf + o->len : NULL;
    int w = vsnprintf(dst, dst ? o->n - o->len : 0, fmt, ap);
    va_end(ap);
    if (w > 0)
        o->len += (size_t)w;
}

static const char *op_text(attn_expr_op op) {
    switch (op) {
    case ATTN_EXPR_NEG: return "-";
    case ATTN_EXPR_NOT: return "not ";
    case ATTN_EXPR_ADD: return " + ";
    case ATTN_EXPR_SUB: return " - ";
    case ATTN_EXPR_MUL: return " * ";
    case ATTN_EXPR_DIV: return " / ";
    case ATTN_EXPR_IDIV: return " // ";
    case ATTN_EXPR_MOD: return " % ";
    case ATTN_EXPR_LT: return " < ";
    case ATTN_EXPR_LE: return " <= ";
    case ATTN_EXPR_GT: return " > ";
    case ATTN_EXPR_GE: return " >= ";
    case ATTN_EXPR_EQ: return " == ";
    case ATTN_EXPR_NE: return " != ";
    case ATTN_EXPR_AND: return " and ";
    case ATTN_EXPR_OR: return " or ";
    case ATTN_EXPR_WHERE: return "where";
    case ATTN_EXPR_MIN: return "min";
    case ATTN_EXPR_MAX: return "max";
    case ATTN_EXPR_ABS: return "abs";
    case ATTN_EXPR_CLAMP: return "clamp";
    case ATTN_EXPR_EXP: return "exp";
    case ATTN_EXPR_LOG: return "log";
    case ATTN_EXPR_SQRT: return "sqrt";
    case ATTN_EXPR_TANH: return "tanh";
    case ATTN_EXPR_FLOOR: return "floor";
    default: return "?";
    }
}

static void print_node(const attn_expr *e, int k, const attn_expr_input *in, out *o) {
    const attn_expr_node *x = &e->node[k];
    switch (x->op) {
    case ATTN_EXPR_LIT:
        if (x->type == ATTN_EXPR_BOOL)
            put(o, "%s", x->i ? "true" : "false");
        else if (x->type == ATTN_EXPR_INT && x->i == INT32_MIN)
            put(o, "(-2147483647 - 1)"); /* 2147483648 is no int literal */
        else if (x->type == ATTN_EXPR_INT)
            put(o, x->i < 0 ? "(%d)" : "%d", (int)x->i);
        else if (isnan(x->f))
            put(o, "(inf - inf)");
        else if (isinf(x->f))
            put(o, x->f < 0 ? "(-inf)" : "inf");
        else { /* the fewest digits that read back as the float, with a '.' or 'e' */
            char t[40];
            for (int digits = 6; digits <= 9; digits++) {
                snprintf(t, sizeof t, "%.*g", digits, (double)fabsf(x->f));
                if (strtof(t, NULL) == fabsf(x->f))
                    break;
            }
            const char *dot = strpbrk(t, ".e") ? "" : ".0";
            put(o, signbit(x->f) ? "(-%s%s)" : "%s%s", t, dot);
        }
        return;
    case ATTN_EXPR_SCORE: put(o, "score"); return;
    case ATTN_EXPR_Q: put(o, "q"); return;
    case ATTN_EXPR_KV: put(o, "kv"); return;
    case ATTN_EXPR_HEAD: put(o, "h"); return;
    case ATTN_EXPR_GROUP: put(o, "g"); return;
    case ATTN_EXPR_INPUT:
        put(o, "%s", in ? in[x->input].name : "input");
        if (x->a >= 0) {
            put(o, "[");
            print_node(e, x->a, in, o);
            if (x->b >= 0) {
                put(o, ", ");
                print_node(e, x->b, in, o);
            }
            put(o, "]");
        }
        return;
    case ATTN_EXPR_TO_F32: print_node(e, x->a, in, o); return; /* widening is implicit */
    case ATTN_EXPR_NEG:
    case ATTN_EXPR_NOT:
        put(o, "(%s", op_text(x->op));
        print_node(e, x->a, in, o);
        put(o, ")");
        return;
    case ATTN_EXPR_WHERE:
    case ATTN_EXPR_MIN:
    case ATTN_EXPR_MAX:
    case ATTN_EXPR_ABS:
    case ATTN_EXPR_CLAMP:
    case ATTN_EXPR_EXP:
    case ATTN_EXPR_LOG:
    case ATTN_EXPR_SQRT:
    case ATTN_EXPR_TANH:
    case ATTN_EXPR_FLOOR: {
        put(o, "%s(", op_text(x->op));
        int kids[3] = {x->a, x->b, x->c};
        for (int j = 0; j < 3 && kids[j] >= 0; j++) {
            if (j)
                put(o, ", ");
            print_node(e, kids[j], in, o);
        }
        put(o, ")");
        return;
    }
    default:
        put(o, "(");
        print_node(e, x->a, in, o);
        put(o, "%s", op_text(x->op));
        print_node(e, x->b, in, o);
        put(o, ")");
        return;
    }
}

size_t attn_expr_print(const attn_expr *e, const attn_expr_input *inputs, char *buf, size_t n) {
    out o = {buf, n, 0};
    if (n)
        buf[0] = 0;
    if (e->n_nodes > 0)
        print_node(e, e->n_nodes - 1, inputs, &o);
    if (n)
        buf[o.len < n ? o.len : n - 1] = 0;
    return o.len;
}

attn_status attn_expr_canonical(const char *src, attn_expr_kind kind, const attn_expr_input *inputs,
                                int n_inputs, char *buf, size_t n, attn_msg *msg, int32_t *at) {
    if (at)
        *at = 0;
    if (!buf || n == 0)
        return rt_fail(msg, ATTN_E_INVALID, "attn_expr_canonical: no buffer");
    buf[0] = 0;
    attn_expr *e = malloc(sizeof *e); /* 9 KB: not on a caller's stack */
    if (!e)
        return rt_fail(msg, ATTN_E_NOMEM, "out of memory");
    attn_status st = attn_expr_parse(src, kind, inputs, n_inputs, e, msg, at);
    if (st == ATTN_OK && attn_expr_print(e, inputs, buf, n) >= n) {
        buf[0] = 0;
        st = rt_fail(msg, ATTN_E_INVALID,
                     "the expression is too long (at most %zu bytes as attnc prints it)", n - 1);
    }
    free(e);
    return st;
}

/* ---- declared inputs ---------------------------------------------------------- */

static const char *const per_names[] = {"token", "sequence", "weight"};

static const char *skip_blank(const char *p) {
    while (*p == ' ')
        p++;
    return p;
}

/* A decimal int64 in 1..max at *p, advancing it; false if none. */
static bool read_dim(const char **p, int64_t max, int64_t *dim) {
    const char *s = skip_blank(*p);
    if (!isdigit((unsigned char)*s))
        return false;
    int64_t v = 0;
    while (isdigit((unsigned char)*s)) {
        v = v * 10 + (*s++ - '0');
        if (v > max)
            return false;
    }
    *dim = v;
    *p = s;
    return v >= 1;
}

attn_status attn_inputs_parse(const char *text, attn_inputs *res, attn_msg *msg) {
    if (!text || !res)
        return rt_fail(msg, ATTN_E_INVALID, "attn_inputs_parse: bad arguments");
    memset(res, 0, sizeof *res);
    const char *p = skip_blank(text);
    while (*p) {
        if (res->n == ATTN_EXPR_MAX_INPUTS)
            return rt_fail(msg, ATTN_E_INVALID, "inputs: more than %d", ATTN_EXPR_MAX_INPUTS);
        attn_expr_input *x = &res->in[res->n];
        char *name = res->name[res->n];
        size_t len = 0;
        while (isalnum((unsigned char)p[len]) || p[len] == '_')
            len++;
        if (len == 0 || len >= ATTN_NAME_MAX || isdigit((unsigned char)p[0]))
            return rt_fail(msg, ATTN_E_INVALID, "inputs: expected a name at '%.24s'", p);
        memcpy(name, p, len);
        name[len] = 0;
        if (attn_inputs_find(res, name) >= 0)
            return rt_fail(msg, ATTN_E_INVALID, "inputs: '%s' is declared twice", name);
        p = skip_blank(p + len);
        if (*p++ != ':')
            return rt_fail(msg, ATTN_E_INVALID, "inputs: expected ':' after '%s'", name);
        p = skip_blank(p);
        int per = -1;
        for (int i = 0; i < 3; i++)
            if (strncmp(p, per_names[i], strlen(per_names[i])) == 0 &&
                !isalnum((unsigned char)p[strlen(per_names[i])]))
                per = i;
        if (per < 0)
            return rt_fail(msg, ATTN_E_INVALID,
                           "inputs: '%s' must be per token, sequence or weight", name);
        p = skip_blank(p + strlen(per_names[per]));
        *x = (attn_expr_input){.name = name, .per = (attn_input_per)per};
        if (per == ATTN_INPUT_WEIGHT) {
            if (*p++ != '[')
                return rt_fail(msg, ATTN_E_INVALID, "inputs: weight '%s' needs a shape", name);
            while (x->rank < 2 && read_dim(&p, ATTN_INPUT_MAX_ELEMENTS, &x->dims[x->rank])) {
                x->rank++;
                p = skip_blank(p);
                if (*p != ',')
                    break;
                p++;
            }
            if (x->rank == 0 || *p++ != ']')
                return rt_fail(msg, ATTN_E_INVALID,
                               "inputs: weight '%s' needs a shape of 1 or 2 dimensions >= 1", name);
            if (x->dims[0] * (x->rank > 1 ? x->dims[1] : 1) > ATTN_INPUT_MAX_ELEMENTS)
                return rt_fail(msg, ATTN_E_INVALID,
                               "inputs: weight '%s' has more than %lld elements", name,
                               (long long)ATTN_INPUT_MAX_ELEMENTS);
            p = skip_blank(p);
        }
        res->n++;
        if (*p == ';')
            p = skip_blank(p + 1);
        else if (*p)
            return rt_fail(msg, ATTN_E_INVALID, "inputs: expected ';' at '%.24s'", p);
    }
    return ATTN_OK;
}

size_t attn_inputs_print(const attn_inputs *in, char *buf, size_t n) {
    out o = {buf, n, 0};
    if (n)
        buf[0] = 0;
    for (int i = 0; i < in->n; i++) {
        const attn_expr_input *x = &in->in[i];
        put(&o, "%s%s: %s", i ? "; " : "", in->name[i], per_names[x->per]);
        if (x->per == ATTN_INPUT_WEIGHT) {
            put(&o, " [%lld", (long long)x->dims[0]);
            if (x->rank > 1)
                put(&o, ", %lld", (long long)x->dims[1]);
            put(&o, "]");
        }
    }
    if (n)
        buf[o.len < n ? o.len : n - 1] = 0;
    return o.len;
}

int attn_inputs_find(const attn_inputs *in, const char *name) {
    for (int i = 0; i < in->n; i++)
        if (strcmp(in->name[i], name) == 0)
            return i;
    return -1;
}

attn_status attn_config_parse_expr(const attn_config *c, bool mask, attn_expr *e, attn_inputs *in,
                                   attn_msg *msg) {
    const char *text = mask ? c->mask_mod : c->score_mod;
    attn_status st = attn_inputs_parse(c->inputs, in, msg);
    e->n_nodes = 0;
    e->inputs_used = 0;
    if (st != ATTN_OK || !text[0])
        return st;
    return attn_expr_parse(text, mask ? ATTN_EXPR_MASK_MOD : ATTN_EXPR_SCORE_MOD, in->in, in->n, e,
                           msg, NULL);
}
