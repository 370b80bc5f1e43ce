/* fuzz_expr.c: libFuzzer target for the score_mod / mask_mod expression
 * parser (attn_expr.h). Any text must either fail with a message and an
 * offset inside it, or give an expression whose canonical text reads
 * back to the same text and the same values at a few points. The first
 * byte picks the kind (odd: mask_mod), or (bit 1 set) that the text is a
 * config's inputs declaration (attn_inputs_parse), which must fail with
 * a message or print canonical text that parses to the same inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"

#define CHECK(cond) ((cond) ? (void)0 : abort())

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static const attn_expr_input inputs[] = {
    {"doc", ATTN_INPUT_TOKEN, 0, {0, 0}},
    {"prefix", ATTN_INPUT_SEQUENCE, 0, {0, 0}},
    {"bias", ATTN_INPUT_WEIGHT, 2, {4, 32}},
};

static int32_t token(void *ctx, int input, int32_t pos) {
    (void)ctx;
    CHECK(input == 0);
    return pos / 3;
}

static int32_t sequence(void *ctx, int input) {
    (void)ctx;
    CHECK(input == 1);
    return 5;
}

static float weight(void *ctx, int input, int64_t i, int64_t j) {
    (void)ctx;
    CHECK(input == 2 && i >= 0 && i < 4 && j >= 0 && j < 32);
    return (float)(i - j) * 0.25f;
}

/* text as an inputs declaration. */
static void fuzz_inputs(const char *text) {
    attn_inputs a, b;
    attn_msg m = {{0}};
    if (attn_inputs_parse(text, &a, &m) != ATTN_OK) {
        CHECK(m.text[0]);
        return;
    }
    char p1[4096], p2[4096];
    size_t len = attn_inputs_print(&a, p1, sizeof p1);
    CHECK(len < sizeof p1 && a.n <= ATTN_EXPR_MAX_INPUTS);
    CHECK(attn_inputs_parse(p1, &b, &m) == ATTN_OK && b.n == a.n);
    CHECK(attn_inputs_print(&b, p2, sizeof p2) == len && !strcmp(p1, p2));
    for (int i = 0; i < a.n; i++)
        CHECK(a.in[i].per != ATTN_INPUT_WEIGHT ||
              (a.in[i].rank >= 1 && a.in[i].rank <= 2 && a.in[i].dims[0] >= 1 &&
               a.in[i].dims[0] * (a.in[i].rank > 1 ? a.in[i].dims[1] : 1) <=
                   ATTN_INPUT_MAX_ELEMENTS));
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size && (data[0] & 2)) {
        char *text = malloc(size);
        CHECK(text);
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        fuzz_inputs(text);
        free(text);
        return 0;
    }
    attn_expr_kind kind = size && (data[0] & 1) ? ATTN_EXPR_MASK_MOD : ATTN_EXPR_SCORE_MOD;
    size_t n = size ? size - 1 : 0;
    char *text = malloc(n + 1);
    CHECK(text);
    if (n)
        memcpy(text, data + 1, n);
    text[n] = 0; /* the parser takes text: up to the first NUL */
    attn_expr *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    CHECK(a && b);
    attn_msg m = {{0}};
    int32_t at = -1;
    attn_status st = attn_expr_parse(text, kind, inputs, 3, a, &m, &at);
    if (st != ATTN_OK) {
        CHECK(st == ATTN_E_INVALID && m.text[0] && at >= 0 && (size_t)at <= strlen(text));
    } else {
        CHECK(a->n_nodes > 0 && a->n_nodes <= ATTN_EXPR_MAX_NODES);
        size_t len = attn_expr_print(a, inputs, NULL, 0);
        char *p1 = malloc(len + 1), *p2 = malloc(len + 1);
        CHECK(p1 && p2);
        CHECK(attn_expr_print(a, inputs, p1, len + 1) == len);
        /* the canonical text may be longer than the parser's limits allow
         * (parentheses); where it parses, it is the same expression */
        if (attn_expr_parse(p1, kind, inputs, 3, b, &m, &at) == ATTN_OK) {
            CHECK(attn_expr_print(b, inputs, p2, len + 1) == len && !strcmp(p1, p2));
            for (int32_t q = -2; q < 9; q += 3)
                for (int32_t kv = -1; kv < 7; kv += 2) {
                    attn_expr_env env = {.score = 0.5f * (float)(q - kv),
                                         .q = q,
                                         .kv = kv,
                                         .h = q & 3,
                                         .g = kv & 1,
                                         .token = token,
                                         .sequence = sequence,
                                         .weight = weight};
                    float x = attn_expr_eval(a, inputs, &env), y = attn_expr_eval(b, inputs, &env);
                    CHECK(memcmp(&x, &y, sizeof x) == 0 || (isnan(x) && isnan(y)));
                }
        }
        free(p1);
        free(p2);
    }
    free(a);
    free(b);
    free(text);
    return 0;
}
