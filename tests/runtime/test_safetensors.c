/* test_safetensors.c: round trips for every dtype, and a clear error (never
 * a crash) for every kind of malformed file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rt.h"
#include "support.h"

static int setup(void **state) {
    *state = tmpdir_new();
    return 0;
}

static int teardown(void **state) {
    tmpdir_remove(*state);
    return 0;
}

static const char *raw_file(const char *dir, const char *header, uint64_t hlen, size_t data_len) {
    const char *path = path_in(dir, "raw.safetensors");
    write_raw_safetensors(path, header, hlen, data_len);
    return path;
}

/* Opening path fails with st and a message containing want. */
static void assert_open_fails(const char *path, attn_status st, const char *want) {
    attn_st *f = (attn_st *)0x1;
    attn_msg m = {{0}};
    assert_int_equal(attn_st_open(path, &f, &m), st);
    assert_true(f == (attn_st *)0x1); /* *out untouched */
    if (!strstr(m.text, want))
        fail_msg("message '%s' lacks '%s'", m.text, want);
}

static void st_round_trips_every_dtype(void **state) {
    const char *dir = *state;
    float a[24], b[3] = {1.5f, -2.25f, 1e-3f}, scalar = 3.0f;
    uint64_t s = 1;
    for (int i = 0; i < 24; i++)
        a[i] = (float)(rnd_unit(&s) * 100);
    for (int t = 0; t <= ATTN_DTYPE_BF16; t++) { /* the block formats: test_quant.c */
        attn_st_tensor ts[] = {
            {"a", (attn_dtype)t, 3, {2, 3, 4}, a},
            {"b.bias", (attn_dtype)t, 1, {3}, b},
            {"s", (attn_dtype)t, 0, {0}, &scalar},
            {"empty", (attn_dtype)t, 2, {0, 5}, NULL},
        };
        const char *path = path_in(dir, "rt.safetensors");
        attn_msg m;
        assert_int_equal(attn_st_write(path, ts, 4, &m), ATTN_OK);
        attn_st *f;
        assert_int_equal(attn_st_open(path, &f, &m), ATTN_OK);
        assert_int_equal(attn_st_count(f), 4);
        const attn_st_info *info = attn_st_find(f, "a");
        assert_non_null(info);
        assert_int_equal(info->ndim, 3);
        assert_int_equal(info->shape[2], 4);
        assert_int_equal(info->nbytes, 24 * attn_dtype_size((attn_dtype)t));
        assert_int_equal((uintptr_t)info->data % 8, 0); /* header padding keeps data aligned */
        float back[24];
        assert_int_equal(attn_st_read_f32(f, "a", 3, (int64_t[]){2, 3, 4}, back, &m), ATTN_OK);
        for (int i = 0; i < 24; i++)
            assert_true(back[i] == rt_round((attn_dtype)t, a[i]));
        assert_int_equal(attn_st_read_f32(f, "s", 0, NULL, back, &m), ATTN_OK);
        assert_true(back[0] == 3.0f);
        assert_int_equal(attn_st_read_f32(f, "empty", 2, (int64_t[]){0, 5}, back, &m), ATTN_OK);
        assert_null(attn_st_find(f, "nope"));
        attn_st_close(f);
    }
    assert_int_equal(dir_count(dir), 1); /* no temporary file left */
}

static void st_header_is_padded_to_8_bytes_with_metadata(void **state) {
    const char *dir = *state;
    float x = 1;
    attn_st_tensor t = {"odd_name_x", ATTN_DTYPE_F32, 1, {1}, &x};
    const char *path = path_in(dir, "p.safetensors");
    assert_int_equal(attn_st_write(path, &t, 1, NULL), ATTN_OK);
    size_t n;
    char *b = read_file(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | (unsigned char)b[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(n, 8 + hlen + 4);
    assert_non_null(strstr(b + 8, "\"__metadata__\""));
    free(b);
}

static void st_read_names_tensor_and_both_shapes(void **state) {
    const char *dir = *state;
    float a[6] = {0};
    attn_st_tensor t[] = {{"w", ATTN_DTYPE_F32, 2, {2, 3}, a}};
    const char *path = path_in(dir, "s.safetensors");
    assert_int_equal(attn_st_write(path, t, 1, NULL), ATTN_OK);
    attn_st *f;
    attn_msg m;
    assert_int_equal(attn_st_open(path, &f, &m), ATTN_OK);
    float dst[6] = {7, 7, 7, 7, 7, 7};
    assert_int_equal(attn_st_read_f32(f, "w", 2, (int64_t[]){3, 2}, dst, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(m.text, "tensor 'w' has shape [2, 3], expected [3, 2]"));
    assert_true(dst[0] == 7);
    assert_int_equal(attn_st_read_f32(f, "v", 1, (int64_t[]){6}, dst, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(m.text, "missing tensor 'v'"));
    float *rows;
    int64_t nrows;
    assert_int_equal(attn_st_read_rows_f32(f, "w", 3, &rows, &nrows, &m), ATTN_OK);
    assert_int_equal(nrows, 2);
    free(rows);
    assert_int_equal(attn_st_read_rows_f32(f, "w", 4, &rows, &nrows, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(m.text, "has shape [2, 3], expected [rows >= 1, 4]"));
    attn_st_close(f);
}

static void st_rejects_unsupported_dtype_by_name(void **state) {
    const char *path = raw_file(*state,
                                "{\"ids\":{\"dtype\":\"I32\",\"shape\":[2],"
                                "\"data_offsets\":[0,8]}}",
                                UINT64_MAX, 8);
    attn_st *f;
    attn_msg m;
    assert_int_equal(attn_st_open(path, &f, &m), ATTN_OK); /* other tensors may be usable */
    float d[2];
    assert_int_equal(attn_st_read_f32(f, "ids", 1, (int64_t[]){2}, d, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(
        m.text,
        "tensor 'ids' has dtype I32; supported are F32, F16, BF16 and attnc's q8_0 and q4_0"));
    attn_st_close(f);
}

static void st_rejects_every_malformed_file(void **state) {
    const char *dir = *state;
    const char *ok_entry = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char h[512];
    static const struct {
        const char *header;
        uint64_t hlen;
        size_t data;
        const char *want;
    } cases[] = {
        {"{}", 1000, 0, "header length 1000 exceeds the 2 bytes after the length field"},
        {"{}", UINT64_MAX - 1, 0, "exceeds the"},
        {"[1,2]", UINT64_MAX, 0, "header is not a JSON object"},
        {"{\"a\":", UINT64_MAX, 0, "malformed JSON"},
        {"{\"a\":{}} trailing", UINT64_MAX, 0, "malformed JSON"},
        {"{\"a\":1}", UINT64_MAX, 0, "tensor 'a': header entry is not an object"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4, "needs string 'dtype'"},
        {"{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4,
         "tensor 'a': unknown dtype 'F128'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4,
         "shape entries must be non-negative integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", UINT64_MAX, 4,
         "shape entries must be non-negative integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
         "\"data_offsets\":[0,4]}}",
         UINT64_MAX, 4, "shape's byte size overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
         UINT64_MAX, 4, "9 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", UINT64_MAX, 8,
         "data_offsets must be [begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", UINT64_MAX, 8,
         "data_offsets must be [begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", UINT64_MAX, 8,
         "data_offsets span 8 bytes but F32 of that shape needs 12"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", UINT64_MAX, 8,
         "tensor 'a': data_offsets [4, 12] out of range: the data buffer has 8 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         UINT64_MAX, 12, "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         UINT64_MAX, 16, "tensor 'a' appears twice"},
        {"  ", UINT64_MAX, 0, "header is not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = raw_file(dir, cases[i].header, cases[i].hlen, cases[i].data);
        assert_open_fails(path, ATTN_E_FORMAT, cases[i].want);
    }
    snprintf(h, sizeof h, "{%s}", ok_entry);
    /* truncated: the data the header promises is not there */
    assert_open_fails(raw_file(dir, h, UINT64_MAX, 4), ATTN_E_FORMAT, "out of range");
    /* shorter than the length field */
    const char *path = path_in(dir, "short.safetensors");
    write_file(path, "abc", 3);
    assert_open_fails(path, ATTN_E_FORMAT, "file is 3 bytes");
    write_file(path, "", 0);
    assert_open_fails(path, ATTN_E_FORMAT, "file is 0 bytes");
    assert_open_fails(path_in(dir, "missing.safetensors"), ATTN_E_IO, "cannot open");
    assert_open_fails(dir, ATTN_E_IO, "not a regular file");
}

static void st_fuzzed_headers_never_crash(void **state) {
    /* byte flips of a valid file: each either opens or fails cleanly */
    const char *dir = *state;
    float a[4] = {1, 2, 3, 4};
    attn_st_tensor t[] = {{"a", ATTN_DTYPE_F16, 1, {4}, a}, {"b", ATTN_DTYPE_F32, 2, {2, 2}, a}};
    const char *path = path_in(dir, "good.safetensors");
    assert_int_equal(attn_st_write(path, t, 2, NULL), ATTN_OK);
    size_t n;
    char *good = read_file(path, &n);
    uint64_t s = 3;
    for (int iter = 0; iter < 3000; iter++) {
        char *b = malloc(n);
        memcpy(b, good, n);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)((rnd_unit(&s) + 1) / 2 * (double)(n < 120 ? n : 120));
            b[at % n] = (char)(int)(rnd_unit(&s) * 128);
        }
        const char *p = path_in(dir, "fuzz.safetensors");
        write_file(p, b, n);
        attn_st *f = NULL;
        attn_msg m;
        if (attn_st_open(p, &f, &m) == ATTN_OK) {
            for (int i = 0; i < attn_st_count(f); i++) {
                const attn_st_info *info = attn_st_get(f, i);
                float *dst = malloc(info->nbytes * 2 + 4);
                attn_st_read_f32(f, info->name, info->ndim, info->shape, dst, &m);
                free(dst);
            }
            attn_st_close(f);
        } else {
            assert_true(m.text[0] != 0);
        }
        free(b);
    }
    free(good);
}

static void st_write_failure_leaves_nothing_behind(void **state) {
    const char *dir = *state;
    float x = 1;
    attn_st_tensor t = {"x", ATTN_DTYPE_F32, 1, {1}, &x};
    attn_msg m;
    assert_int_equal(attn_st_write(path_in(dir, "no/such/dir/y.safetensors"), &t, 1, &m),
                     ATTN_E_IO);
    assert_non_null(strstr(m.text, "cannot create"));
    /* an existing file stays untouched when the new content is invalid */
    const char *path = path_in(dir, "keep.safetensors");
    write_file(path, "old", 3);
    attn_st_tensor dup[] = {t, t};
    assert_int_equal(attn_st_write(path, dup, 2, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "given twice"));
    size_t n;
    char *b = read_file(path, &n);
    assert_int_equal(n, 3);
    free(b);
    assert_int_equal(dir_count(dir), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(st_round_trips_every_dtype, setup, teardown),
        cmocka_unit_test_setup_teardown(st_header_is_padded_to_8_bytes_with_metadata, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(st_read_names_tensor_and_both_shapes, setup, teardown),
        cmocka_unit_test_setup_teardown(st_rejects_unsupported_dtype_by_name, setup, teardown),
        cmocka_unit_test_setup_teardown(st_rejects_every_malformed_file, setup, teardown),
        cmocka_unit_test_setup_teardown(st_fuzzed_headers_never_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(st_write_failure_leaves_nothing_behind, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
