/* test_runtime_deps.c: the runtime library stands alone: libattn.so does
 * not link LLVM or libyaml (ldd), imports no LLVM symbol (nm), and
 * exports its API but none of its internals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* The command's whole output, malloc'd. */
static char *output_of(const char *cmd) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0, k;
    char *buf = malloc(cap);
    while ((k = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (cap - len < 2)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    assert_int_equal(pclose(p), 0);
    return buf;
}

static void runtime_library_does_not_link_llvm(void **state) {
    (void)state;
    char *ldd = output_of("ldd " ATTN_SHARED_LIB);
    assert_null(strstr(ldd, "LLVM"));
    assert_null(strstr(ldd, "libyaml"));
    assert_non_null(strstr(ldd, "libcjson"));
    free(ldd);
    char *undef = output_of("nm -D --undefined-only " ATTN_SHARED_LIB);
    assert_null(strstr(undef, "LLVM"));
    assert_null(strstr(undef, "yaml_"));
    free(undef);
}

static void runtime_library_exports_only_its_api(void **state) {
    (void)state;
    char *defined = output_of("nm -D --defined-only " ATTN_SHARED_LIB);
    assert_non_null(strstr(defined, " attn_forward\n"));
    assert_non_null(strstr(defined, " attn_seq_fork\n"));
    assert_non_null(strstr(defined, " attn_ref_forward\n"));
    assert_non_null(strstr(defined, " attn_st_open\n"));
    assert_null(strstr(defined, "rt_fail"));
    assert_null(strstr(defined, "ref_attend"));
    free(defined);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(runtime_library_does_not_link_llvm),
        cmocka_unit_test(runtime_library_exports_only_its_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
