/* attn_expr.h: the expression language of the spec keys score_mod and
 * mask_mod (docs/spec.md, "Score and mask expressions"). One parser and checker serve the spec
 * stage (located errors), the reference engine (attn_expr_eval, the definition of every operation)
 * and the code generator, which lowers the same checked tree to vector code.
 *
 * The language: names score (f32, score_mod only: scale * q.k), q and kv
 * (int positions), h (query head) and g (its K/V group), and the inputs
 * the caller declares (doc[q], prefix, bias[h, i]); int and float
 * literals, inf, true, false; + - * / (float division), // and %
 * (floored, on ints; x // 0 and x % 0 are 0), < <= > >= == != (they do
 * not chain), and or not, where(c, a, b), min max abs clamp exp log sqrt
 * tanh floor (floor gives an int). Loosest first: or, and, not, a
 * comparison, + -, * / // %, unary -.
 *
 * A parsed expression is a flat array of typed nodes, children before
 * parents, the root last; constant subtrees are folded. Integers are
 * int32 with two's-complement wrap-around; floats are IEEE binary32; an
 * int widens to f32 where a float is needed, never back but through
 * floor. */
#ifndef ATTN_EXPR_H
#define ATTN_EXPR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_EXPR_MAX_NODES 256 /* after folding */
#define ATTN_EXPR_MAX_DEPTH 64  /* nesting of parentheses, calls and operators */

typedef enum attn_expr_type { ATTN_EXPR_BOOL, ATTN_EXPR_INT, ATTN_EXPR_F32 } attn_expr_type;

typedef enum attn_expr_op {
    ATTN_EXPR_LIT,    /* .i (bool, int) or .f (f32) */
    ATTN_EXPR_SCORE,  /* f32: scale * q.k (score_mod only) */
    ATTN_EXPR_Q,      /* int: the query's position */
    ATTN_EXPR_KV,     /* int: the key's position */
    ATTN_EXPR_HEAD,   /* int: the query head (global in a shard) */
    ATTN_EXPR_GROUP,  /* int: its K/V group */
    ATTN_EXPR_INPUT,  /* input .input; token: index .a; weight: indices .a, .b (rank 2) */
    ATTN_EXPR_TO_F32, /* .a widened: int to f32 */
    ATTN_EXPR_NEG,
    ATTN_EXPR_NOT,
    ATTN_EXPR_ADD,
    ATTN_EXPR_SUB,
    ATTN_EXPR_MUL,
    ATTN_EXPR_DIV,  /* f32 */
    ATTN_EXPR_IDIV, /* int, floored; x // 0 = 0 */
    ATTN_EXPR_MOD,  /* int, floored (the sign of the divisor); x % 0 = 0 */
    ATTN_EXPR_LT,
    ATTN_EXPR_LE,
    ATTN_EXPR_GT,
    ATTN_EXPR_GE,
    ATTN_EXPR_EQ,
    ATTN_EXPR_NE,
    ATTN_EXPR_AND,
    ATTN_EXPR_OR,
    ATTN_EXPR_WHERE, /* .a ? .b : .c */
    ATTN_EXPR_MIN,   /* a < b ? a : b */
    ATTN_EXPR_MAX,   /* a > b ? a : b */
    ATTN_EXPR_ABS,
    ATTN_EXPR_CLAMP, /* min(max(a, b), c) */
    ATTN_EXPR_EXP,
    ATTN_EXPR_LOG,
    ATTN_EXPR_SQRT,
    ATTN_EXPR_TANH,
    ATTN_EXPR_FLOOR, /* f32 to int: NaN 0, saturated to int32 */
    ATTN_EXPR_OP_COUNT
} attn_expr_op;

typedef struct attn_expr_node {
    attn_expr_op op;
    attn_expr_type type;
    int32_t a, b, c; /* children: node indices, -1 when absent */
    int32_t input;   /* ATTN_EXPR_INPUT: index into the inputs given to the parser */
    int32_t i;       /* literal bool or int */
    float f;         /* literal f32 */
    int32_t at;      /* byte offset in the source where the node starts */
} attn_expr_node;

typedef struct attn_expr {
    int32_t n_nodes;      /* the root is node[n_nodes - 1] */
    uint32_t inputs_used; /* bit i: input i is read */
    attn_expr_node node[ATTN_EXPR_MAX_NODES];
} attn_expr;

typedef enum attn_expr_kind {
    ATTN_EXPR_SCORE_MOD, /* f32 (an int result widens); may read score */
    ATTN_EXPR_MASK_MOD   /* bool */
} attn_expr_kind;

/* The values an expression may read besides q, kv, h, g and score:
 * per token (one int32 per position, read as name[index]), per sequence
 * (one int32, read as name) or a weight (f32, read as name[i] or
 * name[i, j] for rank 1 or 2; indices are clamped into dims). */
typedef enum attn_input_per {
    ATTN_INPUT_TOKEN,
    ATTN_INPUT_SEQUENCE,
    ATTN_INPUT_WEIGHT
} attn_input_per;

typedef struct attn_expr_input {
    const char *name;
    attn_input_per per;
    int32_t rank;    /* weight: 1 or 2 */
    int64_t dims[2]; /* weight */
} attn_expr_input;

/* The inputs a config declares (attn_config.inputs), parsed: in[i] is
 * named name[i], in declaration order. The field's text, canonical as
 * attn_inputs_print writes it: "doc: token; prefix: sequence; bias:
 * weight [32, 32]" ("" for none). */
#define ATTN_INPUT_MAX_ELEMENTS (INT64_C(1) << 24) /* of one weight input */
typedef struct attn_inputs {
    int n;
    attn_expr_input in[ATTN_EXPR_MAX_INPUTS];
    char name[ATTN_EXPR_MAX_INPUTS][ATTN_NAME_MAX];
} attn_inputs;

/* text parsed into *out: names C identifiers, distinct, at most
 * ATTN_EXPR_MAX_INPUTS, weights of rank 1 or 2 with dims >= 1 and at most
 * ATTN_INPUT_MAX_ELEMENTS elements. ATTN_E_INVALID with msg otherwise. */
ATTN_API attn_status attn_inputs_parse(const char *text, attn_inputs *out, attn_msg *msg);
/* in's canonical text into buf (as attn_expr_print: returns the length it
 * needs, writes at most n - 1 characters and a NUL). */
ATTN_API size_t attn_inputs_print(const attn_inputs *in, char *buf, size_t n);
/* The index of input `name` in `in`, -1 if none. */
ATTN_API int attn_inputs_find(const attn_inputs *in, const char *name);
/* A config's score_mod (mask false) or mask_mod (true) parsed over its
 * inputs (*in gets them; e->n_nodes is 0 where the config has none). */
ATTN_API attn_status attn_config_parse_expr(const attn_config *c, bool mask, attn_expr *e,
                                            attn_inputs *in, attn_msg *msg);

/* Parses and checks src as an expression of kind over inputs[0..n_inputs).
 * On error: ATTN_E_INVALID, msg says what ("unknown name 'dco' (did you mean
 * 'doc'?)", "'and' needs booleans, got f32") and *at (when not NULL) is
 * the byte offset in src it points at. */
ATTN_API attn_status attn_expr_parse(const char *src, attn_expr_kind kind,
                                     const attn_expr_input *inputs, int n_inputs, attn_expr *out,
                                     attn_msg *msg, int32_t *at);

/* What an evaluation reads. token(ctx, input, pos): the input's value at
 * position pos (0 where none is set); sequence(ctx, input); weight(ctx,
 * input, i, j): the element at the clamped indices (j 0 for rank 1). */
typedef struct attn_expr_env {
    float score;
    int32_t q, kv, h, g;
    void *ctx;
    int32_t (*token)(void *ctx, int input, int32_t pos);
    int32_t (*sequence)(void *ctx, int input);
    float (*weight)(void *ctx, int input, int64_t i, int64_t j);
} attn_expr_env;

/* The root's value: a score_mod's as f32, a mask_mod's as 0 or 1 (then
 * read it as bool). The definition the kernels follow; exp, log, tanh
 * and sqrt are the C library's binary32 functions. */
ATTN_API float attn_expr_eval(const attn_expr *e, const attn_expr_input *inputs,
                              const attn_expr_env *env);

/* e in canonical text (every operator in parentheses, literals as
 * parsed): equal texts are equal expressions. Returns the length it
 * needs, writes at most n - 1 characters and a NUL (n > 0). */
ATTN_API size_t attn_expr_print(const attn_expr *e, const attn_expr_input *inputs, char *buf,
                                size_t n);

/* src parsed and checked as by attn_expr_parse, then its canonical text
 * (attn_expr_print) into buf of n bytes: what a config holds. On error
 * buf is "" and the status, msg and *at are attn_expr_parse's, or
 * ATTN_E_INVALID "the expression is too long" (*at 0) where the text
 * does not fit, or ATTN_E_NOMEM. */
ATTN_API attn_status attn_expr_canonical(const char *src, attn_expr_kind kind,
                                         const attn_expr_input *inputs, int n_inputs, char *buf,
                                         size_t n, attn_msg *msg, int32_t *at);

/* The name of a type ("bool", "int", "f32"). */
ATTN_API const char *attn_expr_type_name(attn_expr_type t);

#ifdef __cplusplus
}
#endif

#endif
