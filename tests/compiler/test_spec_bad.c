/* test_spec_bad.c: every file in tests/specs/bad carries `# expect: ...`
 * lines; loading it must produce exactly those diagnostics, in order
 * (without the file name prefix). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

#define BAD_DIR ATTNC_SOURCE_DIR "/tests/specs/bad"

static int check_file(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", BAD_DIR, name);
    char *text = read_file(path, NULL);
    assert_non_null(text);
    const char *want[64];
    int n_want = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "# expect: ", 10) == 0 && n_want < 64)
            want[n_want++] = line + 10;
    if (n_want == 0) {
        print_error("%s: no '# expect:' lines\n", name);
        free(text);
        return 1;
    }
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c;
    attnc_status st = attnc_spec_load_file(ctx, path, &c);
    int failures = st == ATTNC_OK;
    if (st == ATTNC_OK)
        print_error("%s: loaded without error\n", name);
    size_t n = attnc_diag_count(ctx), plen = strlen(path);
    for (size_t i = 0; i < n || i < (size_t)n_want; i++) {
        char buf[2048] = "(none)";
        const char *got = buf;
        if (i < n) {
            attnc_diag_format(attnc_diag_get(ctx, i), buf, sizeof buf);
            if (strncmp(buf, path, plen) == 0 && buf[plen] == ':')
                got = buf + plen + 1 + (buf[plen + 1] == ' ');
        }
        const char *exp = i < (size_t)n_want ? want[i] : "(none)";
        if (strcmp(got, exp) != 0) {
            print_error("%s: diagnostic %zu\n  expected: %s\n  got:      %s\n", name, i + 1, exp,
                        got);
            failures++;
        }
    }
    attnc_ctx_free(ctx);
    free(text);
    return failures;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int yaml_only(const struct dirent *e) {
    size_t n = strlen(e->d_name);
    return n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0;
}

static void every_bad_spec_gives_its_expected_diagnostics(void **state) {
    (void)state;
    struct dirent **list;
    int n = scandir(BAD_DIR, &list, yaml_only, by_name);
    assert_true(n >= 30);
    int failures = 0;
    for (int i = 0; i < n; i++) {
        failures += check_file(list[i]->d_name);
        free(list[i]);
    }
    free(list);
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_bad_spec_gives_its_expected_diagnostics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
