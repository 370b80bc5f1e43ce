/* test_expr.c: the score_mod / mask_mod expression language
 * (attn_expr.h): values against hand-worked ones (floored division and
 * modulo, wrap-around, widening, floor's saturation, inputs and their
 * clamped indices), constant folding, canonical printing that reads back
 * as the same expression, and every kind of error at its offset. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn_expr.h"
#include "support.h"

static const attn_expr_input inputs[] = {
    {"doc", ATTN_INPUT_TOKEN, 0, {0, 0}},
    {"prefix", ATTN_INPUT_SEQUENCE, 0, {0, 0}},
    {"bias", ATTN_INPUT_WEIGHT, 2, {4, 32}},
    {"slope", ATTN_INPUT_WEIGHT, 1, {4, 0}},
};
enum { N_INPUTS = sizeof inputs / sizeof inputs[0] };

static int32_t doc_of(void *ctx, int input, int32_t pos) {
    (void)ctx;
    assert_int_equal(input, 0);
    return pos >= 0 && pos < 100 ? pos / 10 : 0; /* documents of 10; 0 where unset */
}

static int32_t prefix_of(void *ctx, int input) {
    (void)ctx;
    assert_int_equal(input, 1);
    return 7;
}

static float weight_of(void *ctx, int input, int64_t i, int64_t j) {
    (void)ctx;
    if (input == 2) {
        assert_true(i >= 0 && i < 4 && j >= 0 && j < 32);
        return (float)(100 * i + j);
    }
    assert_int_equal(input, 3);
    assert_true(i >= 0 && i < 4 && j == 0);
    return 0.5f * (float)(i + 1);
}

static attn_expr parse_ok(const char *src, attn_expr_kind kind) {
    attn_expr e;
    attn_msg m = {{0}};
    int32_t at = -1;
    if (attn_expr_parse(src, kind, inputs, N_INPUTS, &e, &m, &at) != ATTN_OK)
        fail_msg("'%s': %s (at %d)", src, m.text, (int)at);
    return e;
}

static float eval_at(const attn_expr *e, float score, int32_t q, int32_t kv, int32_t h) {
    attn_expr_env env = {.score = score,
                         .q = q,
                         .kv = kv,
                         .h = h,
                         .g = h / 4,
                         .token = doc_of,
                         .sequence = prefix_of,
                         .weight = weight_of};
    return attn_expr_eval(e, inputs, &env);
}

/* src evaluated at (score 2.5, q 13, kv 4, h 6, g 1) is want. */
static void expect(const char *src, attn_expr_kind kind, float want) {
    attn_expr e = parse_ok(src, kind);
    float got = eval_at(&e, 2.5f, 13, 4, 6);
    if (!(got == want || (isnan(got) && isnan(want))))
        fail_msg("'%s' = %.9g, want %.9g", src, (double)got, (double)want);
}

static void values_are_the_documented_ones(void **state) {
    (void)state;
    const attn_expr_kind S = ATTN_EXPR_SCORE_MOD, M = ATTN_EXPR_MASK_MOD;
    expect("score", S, 2.5f);
    expect("q - kv", S, 9);
    expect("(q - kv) / 2", S, 4.5f); /* '/' is float division */
    expect("(kv - q) // 2", S, -5);  /* floored: -9 // 2 */
    expect("(kv - q) % 4", S, 3);    /* floored: the divisor's sign */
    expect("q % (0 - 4)", S, -3);
    expect("q // 0", S, 0);
    expect("q % 0", S, 0);
    expect("(0 - 2147483647 - 1) // (0 - 1)", S, (float)INT32_MIN); /* wraps */
    expect("2147483647 + q", S, (float)(INT32_MIN + 12));
    expect("floor(score * 3)", S, 7);
    expect("floor(0.0 - score)", S, -3);
    expect("floor(score * 1e30)", S, (float)INT32_MAX); /* saturated */
    expect("floor(log(0.0 - 1.0))", S, 0);              /* NaN */
    expect("where(q > kv, score, 0 - inf)", S, 2.5f);
    expect("min(q, kv) + max(q, 20)", S, 24);
    expect("clamp(q - kv, 0, 8) + abs(kv - q)", S, 17);
    expect("clamp(score, 0, 2)", S, 2);
    expect("exp(0) + sqrt(16) + tanh(0) + log(1)", S, 5);
    expect("30 * tanh(score / 30)", S, 30 * tanhf(2.5f / 30));
    expect("h + g * 100", S, 106);
    expect("bias[h - 3, q - kv] + slope[g]", S, 309 + 1.0f);
    expect("bias[99, 0 - 5]", S, 300); /* indices clamped */
    expect("q - kv >= 0", M, 1);
    expect("q < kv", M, 0);
    expect("doc[q] == doc[kv]", M, 0);
    expect("doc[kv + 200] == 0", M, 1); /* unset positions read 0 */
    expect("kv < prefix or q - kv < 4", M, 1);
    expect("not (q == 13) or h != 6", M, 0);
    expect("(q > 2) == true", M, 1);
    expect("q / 2 == 6.5", M, 1);           /* int widened */
    expect("0.0 / 0.0 != 0.0 / 0.0", M, 1); /* NaN */
}

/* Constant subtrees become one literal; reading q, kv, an input or score
 * is never folded. */
static void constants_fold(void **state) {
    (void)state;
    attn_expr e = parse_ok("1 + 2 * 3 - 10 // 4", ATTN_EXPR_SCORE_MOD);
    assert_int_equal(e.n_nodes, 1);
    assert_int_equal(e.node[0].op, ATTN_EXPR_LIT);
    assert_true(e.node[0].f == 5.0f);
    e = parse_ok("q - kv < 2 * 2048", ATTN_EXPR_MASK_MOD);
    assert_int_equal(e.n_nodes, 5); /* q, kv, -, 4096, < */
    assert_int_equal(e.node[3].op, ATTN_EXPR_LIT);
    assert_int_equal(e.node[3].i, 4096);
    assert_int_equal(e.inputs_used, 0);
    e = parse_ok("doc[q] == doc[kv] and kv < prefix", ATTN_EXPR_MASK_MOD);
    assert_int_equal(e.inputs_used, 3);
    e = parse_ok("score + slope[h]", ATTN_EXPR_SCORE_MOD);
    assert_int_equal(e.inputs_used, 8);
}

/* The canonical text parses to an expression of the same text and the
 * same values. */
static void printing_reads_back(void **state) {
    (void)state;
    const char *srcs[] = {
        "score",
        "30 * tanh(score / 30)",
        "where(q - kv > 3, score - 0.25 * (q - kv), -inf)",
        "score + bias[h, min(31, floor(log(abs(q - kv) + 1) * 4.5))]",
        "-(q // -3) + kv % 5 - floor(-2.75)",
        "score * 1e-7 + 3.0e9 - 0.1",
        "(0 - 2147483647 - 1) + q",
        "0.0 / 0.0 + score",
        "-score - -(-2.0)",
    };
    for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
        attn_expr a = parse_ok(srcs[i], ATTN_EXPR_SCORE_MOD);
        char ta[512], tb[512];
        assert_true(attn_expr_print(&a, inputs, ta, sizeof ta) < sizeof ta);
        attn_expr b = parse_ok(ta, ATTN_EXPR_SCORE_MOD);
        attn_expr_print(&b, inputs, tb, sizeof tb);
        if (strcmp(ta, tb) != 0)
            fail_msg("'%s' printed '%s', which prints '%s'", srcs[i], ta, tb);
        for (int32_t q = 0; q < 40; q += 7)
            for (int32_t kv = 0; kv <= q; kv += 3) {
                float x = eval_at(&a, 0.75f * (float)q - 3, q, kv, q % 4),
                      y = eval_at(&b, 0.75f * (float)q - 3, q, kv, q % 4);
                if (memcmp(&x, &y, sizeof x) != 0)
                    fail_msg("'%s' and '%s' at q %d kv %d: %g, %g", srcs[i], ta, (int)q, (int)kv,
                             (double)x, (double)y);
            }
    }
    attn_expr e = parse_ok("q - kv < 4096 and not (kv < 4)", ATTN_EXPR_MASK_MOD);
    char t[128];
    attn_expr_print(&e, inputs, t, sizeof t);
    assert_string_equal(t, "(((q - kv) < 4096) and (not (kv < 4)))");
    /* attn_expr_canonical: the text a config holds, or the parse error, or
     * "too long" where it does not fit; "" on error */
    char canon[64], tiny[16];
    assert_int_equal(attn_expr_canonical("q-kv<4096 and not(kv<4)", ATTN_EXPR_MASK_MOD, inputs,
                                         N_INPUTS, canon, sizeof canon, NULL, NULL),
                     ATTN_OK);
    assert_string_equal(canon, t);
    attn_msg m;
    int32_t at;
    assert_int_equal(attn_expr_canonical("q-kv<4096 and not(kv<4)", ATTN_EXPR_MASK_MOD, inputs,
                                         N_INPUTS, tiny, sizeof tiny, &m, &at),
                     ATTN_E_INVALID);
    assert_string_equal(tiny, "");
    assert_non_null(strstr(m.text, "too long (at most 15 bytes"));
    assert_int_equal(attn_expr_canonical("q < kv and 1", ATTN_EXPR_MASK_MOD, inputs, N_INPUTS,
                                         canon, sizeof canon, &m, &at),
                     ATTN_E_INVALID);
    assert_string_equal(canon, "");
    assert_int_equal(at, 7);
    /* a short buffer: truncated, NUL-terminated, the full length returned */
    char small[8];
    assert_int_equal(attn_expr_print(&e, inputs, small, sizeof small), strlen(t));
    assert_string_equal(small, "(((q - ");
}

static void errors_say_what_and_where(void **state) {
    (void)state;
    static const struct {
        const char *src;
        attn_expr_kind kind;
        const char *msg;
        int at;
    } cases[] = {
        {"dco[q] == doc[kv]", ATTN_EXPR_MASK_MOD, "unknown name 'dco' (did you mean 'doc'?)", 0},
        {"q < kv and 1.5", ATTN_EXPR_MASK_MOD, "'and' needs booleans, got f32", 7},
        {"q < 1 or 2", ATTN_EXPR_MASK_MOD, "'or' needs booleans, got int", 6},
        {"not q", ATTN_EXPR_MASK_MOD, "'not' needs a bool, got int", 0},
        {"score > 0", ATTN_EXPR_MASK_MOD, "'score' is only known in score_mod", 0},
        {"q - kv", ATTN_EXPR_MASK_MOD, "mask_mod must be a bool, got int", 0},
        {"q > kv", ATTN_EXPR_SCORE_MOD, "score_mod must be a number, got bool", 0},
        {"0 < q < kv", ATTN_EXPR_MASK_MOD, "comparisons do not chain", 6},
        {"q // 2.0 > 1", ATTN_EXPR_MASK_MOD, "'//' needs ints, got int and f32", 2},
        {"score % 2", ATTN_EXPR_SCORE_MOD, "'%' needs ints, got f32 and int", 6},
        {"(q < kv", ATTN_EXPR_MASK_MOD, "expected ')'", 7},
        {"score +", ATTN_EXPR_SCORE_MOD, "expected a value, found the end", 7},
        {"score + * 2", ATTN_EXPR_SCORE_MOD, "expected a value, found '*'", 8},
        {"where(q, 1, 2)", ATTN_EXPR_SCORE_MOD, "'where' needs a bool condition, got int", 0},
        {"where(q > 1, q > 2, 2)", ATTN_EXPR_SCORE_MOD, "two values of one type", 0},
        {"floor + 1", ATTN_EXPR_SCORE_MOD, "'floor' is a function", 0},
        {"score + exp(1, 2)", ATTN_EXPR_SCORE_MOD, "'exp' takes 1 argument, got 2", 8},
        {"score * abs(q > 1)", ATTN_EXPR_SCORE_MOD, "'abs' needs numbers, got bool", 8},
        {"score + (q > 1)", ATTN_EXPR_SCORE_MOD, "'+' needs numbers, got bool", 6},
        {"-(q > 1) < 0", ATTN_EXPR_MASK_MOD, "'-' needs numbers, got bool", 0},
        {"kv < prefix[q]", ATTN_EXPR_MASK_MOD, "'prefix' takes 0 indices", 5},
        {"score + bias[h]", ATTN_EXPR_SCORE_MOD, "'bias' takes 2 indices", 8},
        {"doc[q] == doc", ATTN_EXPR_MASK_MOD, "'doc' takes 1 index", 10},
        {"score + slope[score]", ATTN_EXPR_SCORE_MOD, "an index of 'slope' must be an int", 14},
        {"score * 12abc", ATTN_EXPR_SCORE_MOD, "malformed number", 8},
        {"score * 1.5.2", ATTN_EXPR_SCORE_MOD, "malformed number", 8},
        {"q < 99999999999", ATTN_EXPR_MASK_MOD, "integer out of range", 4},
        {"q < 1e99", ATTN_EXPR_MASK_MOD, "number out of range (use 'inf')", 4},
        {"q < kv $", ATTN_EXPR_MASK_MOD, "unexpected '$' after the expression", 7},
        {"q < kv and", ATTN_EXPR_MASK_MOD, "expected a value, found the end", 10},
        {"q < and", ATTN_EXPR_MASK_MOD, "expected a value, found 'and'", 4},
        {"kv < xyzzy", ATTN_EXPR_MASK_MOD, "unknown name 'xyzzy'", 5},
        {"", ATTN_EXPR_MASK_MOD, "expected a value, found the end", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_expr e;
        attn_msg m = {{0}};
        int32_t at = -1;
        attn_status st =
            attn_expr_parse(cases[i].src, cases[i].kind, inputs, N_INPUTS, &e, &m, &at);
        if (st != ATTN_E_INVALID || !strstr(m.text, cases[i].msg) || at != cases[i].at)
            fail_msg("'%s': status %d, '%s' at %d; want '%s' at %d", cases[i].src, (int)st, m.text,
                     (int)at, cases[i].msg, cases[i].at);
        assert_int_equal(e.n_nodes, 0);
    }
}

/* head, then unit n times, then tail, into buf (2048 bytes). */
static const char *repeated(char *buf, const char *head, const char *unit, int n,
                            const char *tail) {
    snprintf(buf, 2048, "%s", head);
    for (int i = 0; i < n; i++)
        strcat(buf, unit);
    strcat(buf, tail);
    return buf;
}

/* text fails to parse as kind with a message holding want. */
static void parse_fails(const char *text, attn_expr_kind kind, const char *want) {
    attn_expr e;
    attn_msg m = {{0}};
    int32_t at;
    assert_int_equal(attn_expr_parse(text, kind, NULL, 0, &e, &m, &at), ATTN_E_INVALID);
    if (!strstr(m.text, want))
        fail_msg("'%.40s...': '%s', want '%s'", text, m.text, want);
}

/* Limits: nesting, length, and arguments that are no expression. */
static void limits_are_errors_not_crashes(void **state) {
    (void)state;
    char buf[2048], open[256];
    repeated(open, "", "(", 100, "q");
    parse_fails(repeated(buf, open, ")", 100, ""), ATTN_EXPR_SCORE_MOD, "nested too deeply");
    parse_fails(repeated(buf, "", "not ", 200, "q < kv"), ATTN_EXPR_MASK_MOD, "nested too deeply");
    parse_fails(repeated(buf, "score", " + q", 200, ""), ATTN_EXPR_SCORE_MOD,
                "expression too long");
    /* left-associative: each + 1 adds to score, no constant subtree */
    parse_fails(repeated(buf, "score", " + 1", 200, ""), ATTN_EXPR_SCORE_MOD,
                "expression too long");
    /* a constant subtree folds as it is built: score, 201, + */
    attn_expr e;
    attn_msg m;
    int32_t at;
    assert_int_equal(attn_expr_parse(repeated(buf, "score + (1", " + 1", 200, ")"),
                                     ATTN_EXPR_SCORE_MOD, NULL, 0, &e, &m, &at),
                     ATTN_OK);
    assert_int_equal(e.n_nodes, 3);
    assert_true(e.node[1].f == 201.0f);
    assert_int_equal(attn_expr_parse(NULL, ATTN_EXPR_SCORE_MOD, NULL, 0, &e, &m, &at),
                     ATTN_E_INVALID);
    attn_expr_input bad = {"w", ATTN_INPUT_WEIGHT, 3, {1, 1}};
    assert_int_equal(attn_expr_parse("score", ATTN_EXPR_SCORE_MOD, &bad, 1, &e, &m, &at),
                     ATTN_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values_are_the_documented_ones),
        cmocka_unit_test(constants_fold),
        cmocka_unit_test(printing_reads_back),
        cmocka_unit_test(errors_say_what_and_where),
        cmocka_unit_test(limits_are_errors_not_crashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
