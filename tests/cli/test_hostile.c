/* test_hostile.c: inputs built to hurt: YAML alias bombs, deep nesting,
 * enormous numbers and strings, bytes that are not UTF-8, safetensors with
 * lying headers and overflowing shapes, NaN and infinity. Each gets a clear
 * message and exit 2 within a CPU-time limit (ulimit -t), and nothing is
 * written; NaN that is let through propagates the same in both engines. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

typedef cli_fixture fixture;

/* 20 s of CPU and, where no sanitizer reserves its shadow memory, 2 GB of
 * address space: hostile input must be refused within both */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LIMITED_SH "ulimit -t 20 && exec \"$0\" \"$@\""
#else
#define LIMITED_SH "ulimit -t 20 && ulimit -v 2000000 && exec \"$0\" \"$@\""
#endif
#define ATTNC_LIMITED(f, ...)                                                                      \
    run_cmd((const char *[]){"/bin/sh", "-c", LIMITED_SH, ATTNC_BIN, __VA_ARGS__, NULL}, NULL,     \
            (f)->err)

static void assert_err_has(fixture *f, const char *want) {
    char *s = read_file(f->err, NULL);
    assert_non_null(s);
    if (!strstr(s, want))
        fail_msg("stderr lacks '%s':\n%.2000s", want, s);
    free(s);
}

static const char *put(fixture *f, const char *name, const char *data, size_t n) {
    const char *p = path_in(f->dir, name);
    write_file(p, data, n);
    return p;
}

static void hostile_yaml_is_refused_quickly(void **state) {
    fixture *f = *state;
    static char buf[3 << 20];
    /* billion laughs */
    size_t n =
        (size_t)snprintf(buf, sizeof buf, "name: x\nheads: 8\nhead_dim: 64\na0: &a0 [lol, lol]\n");
    for (int i = 1; i < 30; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "a%d: &a%d [*a%d, *a%d, *a%d]\n", i, i,
                              i - 1, i - 1, i - 1);
    assert_int_equal(ATTNC_LIMITED(f, "check", put(f, "bomb.yaml", buf, n)), 2);
    assert_err_has(f, "aliases");
    /* nesting a million deep */
    n = (size_t)snprintf(buf, sizeof buf, "name: x\nheads: ");
    memset(buf + n, '[', 1000000);
    n += 1000000;
    assert_int_equal(ATTNC_LIMITED(f, "check", put(f, "deep.yaml", buf, n)), 2);
    assert_err_has(f, "nesting deeper than 32 levels");
    /* enormous numbers */
    const char *big =
        "name: x\nheads: 1000000000000\nhead_dim: 1e400\nd_model: -99999999999999999999\n";
    assert_int_equal(ATTNC_LIMITED(f, "check", put(f, "big.yaml", big, strlen(big))), 2);
    assert_err_has(f, "heads: expected an integer in 1..1024, found 1000000000000");
    /* a huge string value (under the size limit) and a file over it */
    n = (size_t)snprintf(buf, sizeof buf, "name: \"");
    memset(buf + n, 'a', 900000);
    n += 900000;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "\"\nheads: 8\nhead_dim: 64\n");
    assert_int_equal(ATTNC_LIMITED(f, "check", put(f, "longname.yaml", buf, n)), 2);
    assert_err_has(f, "name: expected at most 63 characters");
    memset(buf, '#', 2 << 20);
    assert_int_equal(ATTNC_LIMITED(f, "check", put(f, "huge.yaml", buf, 2 << 20)), 2);
    assert_err_has(f, "the limit is 1048576");
    /* not UTF-8 */
    const char *bin = "name: x\nheads: 8\nhead_dim: \xc3\x28\n";
    assert_int_equal(ATTNC_LIMITED(f, "check", put(f, "bin.yaml", bin, strlen(bin))), 2);
    assert_err_has(f, "bin.yaml:3:12: error: not valid UTF-8"); /* the bad trailing byte */
    /* NUL bytes */
    assert_int_equal(ATTNC_LIMITED(f, "check", put(f, "nul.yaml", "name: x\0\nheads: 8\n", 18)), 2);
}

static void hostile_safetensors_are_refused(void **state) {
    fixture *f = *state;
    const char *spec = ATTNC_SOURCE_DIR "/specs/seed.yaml";
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    assert_int_equal(
        run_cmd((const char *[]){ATTNC_BIN, "gen-weights", spec, "-o", w, NULL}, NULL, NULL), 0);
    assert_int_equal(
        run_cmd((const char *[]){ATTNC_BIN, "gen-input", spec, "--tokens", "2", "-o", x, NULL},
                NULL, NULL),
        0);
    const char *y = path_in(f->dir, "y.safetensors");
    static const struct {
        const char *header;
        uint64_t hlen;
        size_t data;
        const char *want;
    } cases[] = {
        {"{}", 1u << 30, 0, "header length 1073741824 exceeds"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
         UINT64_MAX, 8, "byte size overflows"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2,768],\"data_offsets\":[0,6144]},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         UINT64_MAX, 6144, "overlap"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2,768],\"data_offsets\":[0,6144]}}", UINT64_MAX, 100,
         "out of range"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2,768],\"data_offsets\":[0,6144]}", UINT64_MAX, 6144,
         "malformed JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t hlen = cases[i].hlen;
        const char *bad = path_in(f->dir, "bad.safetensors");
        write_raw_safetensors(bad, cases[i].header, hlen, cases[i].data);
        assert_int_equal(ATTNC_LIMITED(f, "run", spec, "--weights", w, "--input", bad, "-o", y), 2);
        assert_err_has(f, cases[i].want);
        assert_int_equal(ATTNC_LIMITED(f, "run", spec, "--weights", bad, "--input", x, "-o", y), 2);
    }
    FILE *fp = fopen(y, "rb");
    assert_null(fp); /* nothing written */
}

static void nan_is_rejected_on_request_and_propagates_otherwise(void **state) {
    fixture *f = *state;
    const char *spec = ATTNC_SOURCE_DIR "/specs/seed.yaml";
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    assert_int_equal(
        run_cmd((const char *[]){ATTNC_BIN, "gen-weights", spec, "-o", w, NULL}, NULL, NULL), 0);
    /* an input with one NaN, written through the runtime */
    float xs[2 * 768] = {0};
    xs[800] = NAN;
    attn_st_tensor t = {"x", ATTN_DTYPE_F32, 2, {2, 768}, xs};
    assert_int_equal(attn_st_write(x, &t, 1, NULL), ATTN_OK);
    const char *y = path_in(f->dir, "y.safetensors");
    assert_int_equal(
        ATTNC_LIMITED(f, "run", spec, "--weights", w, "--input", x, "-o", y, "--check-finite"), 2);
    assert_err_has(f, "tensor 'x' holds NaN at element 800");
    const char *engines[] = {"jit", "reference"};
    for (int e = 0; e < 2; e++) {
        assert_int_equal(ATTNC_LIMITED(f, "run", spec, "--weights", w, "--input", x, "-o", y,
                                       "--engine", engines[e]),
                         0);
        attn_st *st;
        assert_int_equal(attn_st_open(y, &st, NULL), ATTN_OK);
        float *out;
        int64_t rows;
        assert_int_equal(attn_st_read_rows_f32(st, "y", 768, &out, &rows, NULL), ATTN_OK);
        /* token 0 never sees token 1's NaN (causal); token 1 does */
        assert_true(isfinite(out[0]) && isfinite(out[767]));
        assert_true(isnan(out[768]));
        free(out);
        attn_st_close(st);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(hostile_yaml_is_refused_quickly, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(hostile_safetensors_are_refused, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(nan_is_rejected_on_request_and_propagates_otherwise,
                                        cli_fixture_setup, cli_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
