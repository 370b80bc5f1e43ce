/* test_new_key.c: what adding a plain spec key costs. This test's build
 * compiles the runtime and the spec stage against a copy of
 * attn_config.def with one more line (tests/CMakeLists.txt writes it):
 *
 *   ATTN_PLAIN(I64, test_key, "test_key", TEST_KEY, 7, 0, 100)
 *
 * and nothing else changed. That line alone must give the field, its
 * parse with its range and location, its default, its place in the
 * normalized spec (and so in the kernel cache's key), the config check
 * and equality, and its entry in attn_config_fields. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "spec/spec.h"

static attnc_status load(attnc_ctx *ctx, const char *text, attn_config *c) {
    return attnc_spec_load_string(ctx, "k.yaml", text, strlen(text), c);
}

#define SPEC "name: k\nheads: 4\nhead_dim: 8\n"

static void the_key_parses_prints_and_checks(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c, d;
    assert_int_equal(load(ctx, SPEC, &c), ATTNC_OK);
    assert_int_equal(c.test_key, 7); /* the default */
    assert_int_equal(load(ctx, SPEC "test_key: 42\n", &d), ATTNC_OK);
    assert_int_equal(d.test_key, 42);
    char *yaml = attnc_spec_to_yaml(&d);
    assert_non_null(strstr(yaml, "\ntest_key: 42\n"));
    attn_config e; /* the printed spec loads back to the same config */
    assert_int_equal(load(ctx, yaml, &e), ATTNC_OK);
    assert_int_equal(e.test_key, 42);
    free(yaml);

    /* out of range: located, the range named; a typo: the nearest key */
    attnc_ctx *bad = attnc_ctx_new();
    assert_int_equal(load(bad, SPEC "test_key: 101\n", &e), ATTNC_E_SPEC);
    char text[1024];
    attnc_diag_text(bad, text, sizeof text);
    assert_string_equal(text, "k.yaml:4:11: error: test_key: expected an integer in 0..100, "
                              "found 101\n");
    attnc_ctx_free(bad);
    bad = attnc_ctx_new();
    assert_int_equal(load(bad, SPEC "test_kye: 1\n", &e), ATTNC_E_SPEC);
    attnc_diag_text(bad, text, sizeof text);
    assert_non_null(strstr(text, "did you mean 'test_key'?"));
    attnc_ctx_free(bad);

    /* the runtime: the range in attn_config_check, the field in the table */
    attn_msg m;
    d.test_key = 500;
    assert_int_equal(attn_config_check(&d, &m), ATTN_E_INVALID);
    assert_string_equal(m.text, "test_key (500) must be in 0..100");
    size_t n;
    const attn_config_field *f = attn_config_fields(&n);
    assert_string_equal(f[n - 1].name, "test_key");
    assert_int_equal(f[n - 1].offset, offsetof(attn_config, test_key));
    assert_true(f[n - 1].plain && f[n - 1].def == 7);
    /* the passes and codegen read it through its accessor */
    ir_graph g = {.cfg = e};
    assert_int_equal(ir_cfg_test_key(&g), 42);
    attnc_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_key_parses_prints_and_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
