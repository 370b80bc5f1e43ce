/* test_gguf.c: the GGUF reader on well-formed files (metadata of every
 * type asked for, tensors where they are, shapes, alignment) and on every
 * kind of broken one: each refused with a message naming the fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static unsigned char *good(size_t *n, char *dir) {
    float w[64];
    for (int i = 0; i < 64; i++)
        w[i] = (float)i;
    int32_t arr[3] = {4, 8, 4};
    test_gguf_kv kv[] = {
        {"general.architecture", ATTN_GGUF_STRING, 0, 0, "llama", NULL, 0},
        {"llama.attention.head_count", ATTN_GGUF_ARRAY, 0, 0, NULL, arr, 3},
        {"llama.rope.freq_base", ATTN_GGUF_FLOAT32, 0, 10000, NULL, NULL, 0},
        {"llama.flag", ATTN_GGUF_BOOL, 1, 0, NULL, NULL, 0},
        {"llama.block_count", ATTN_GGUF_UINT32, 3, 0, NULL, NULL, 0},
    };
    test_gguf_tensor t[] = {{"a", 0, 2, {4, 8}, w, 128}, {"b", 0, 1, {16}, w + 32, 64}};
    write_gguf(path_in(dir, "g.gguf"), kv, 5, t, 2, 64);
    return (unsigned char *)read_file(path_in(dir, "g.gguf"), n);
}

static void reads_metadata_and_tensors(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    size_t n;
    unsigned char *b = good(&n, dir);
    attn_gguf *g = NULL;
    attn_msg m;
    assert_int_equal(attn_gguf_open(path_in(dir, "g.gguf"), &g, &m), ATTN_OK);
    assert_int_equal(attn_gguf_count(g), 2);
    const attn_gguf_tensor *a = attn_gguf_find(g, "a");
    assert_non_null(a);
    assert_int_equal(a->ndim, 2);
    assert_int_equal(a->ne[0], 8); /* fastest first */
    assert_int_equal(a->ne[1], 4);
    assert_string_equal(a->type_name, "F32");
    assert_int_equal((uintptr_t)a->data % 64, (uintptr_t)attn_gguf_find(g, "b")->data % 64);
    assert_true(((const float *)attn_gguf_find(g, "b")->data)[0] == 32.0f);
    int64_t v;
    double d;
    bool flag;
    const char *s;
    size_t sl;
    assert_true(attn_gguf_get_int(g, "llama.attention.head_count", 1, &v) && v == 8);
    assert_false(attn_gguf_get_int(g, "llama.attention.head_count", 3, &v));
    assert_int_equal(attn_gguf_array_len(g, "llama.attention.head_count"), 3);
    assert_true(attn_gguf_get_float(g, "llama.rope.freq_base", 0, &d) && d == 10000);
    assert_false(attn_gguf_get_int(g, "llama.rope.freq_base", 0, &v)); /* a float */
    assert_true(attn_gguf_get_float(g, "llama.block_count", 0, &d) && d == 3);
    assert_true(attn_gguf_get_bool(g, "llama.flag", &flag) && flag);
    assert_true(attn_gguf_get_str(g, "general.architecture", &s, &sl) && sl == 5 &&
                memcmp(s, "llama", 5) == 0);
    assert_int_equal(attn_gguf_kv_type(g, "nothing"), -1);
    assert_string_equal(attn_gguf_type_name(8), "Q8_0");
    assert_null(attn_gguf_type_name(5));
    attn_gguf_close(g);
    /* from memory: the same */
    assert_int_equal(attn_gguf_open_memory(b, n, "mem", &g, &m), ATTN_OK);
    attn_gguf_close(g);
    free(b);
    tmpdir_remove(dir);
}

/* b with the u64 at byte off replaced */
static void put64(unsigned char *b, size_t off, uint64_t v) {
    for (int i = 0; i < 8; i++)
        b[off + (size_t)i] = (unsigned char)(v >> (8 * i));
}

static void expect_bad(const unsigned char *b, size_t n, const char *want) {
    attn_gguf *g = NULL;
    attn_msg m = {{0}};
    attn_status st = attn_gguf_open_memory(b, n, "bad.gguf", &g, &m);
    if (st == ATTN_OK)
        fail_msg("accepted a file that should fail with '%s'", want);
    assert_int_equal(st, ATTN_E_FORMAT);
    assert_null(g);
    if (!strstr(m.text, want))
        fail_msg("message '%s' lacks '%s'", m.text, want);
}

static void refuses_every_broken_file(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    size_t n;
    unsigned char *b = good(&n, dir), *c = malloc(n);
    expect_bad(b, 3, "needs 4 bytes");
    memcpy(c, b, n), c[0] = 'X';
    expect_bad(c, n, "not a GGUF file");
    memcpy(c, b, n), c[4] = 1;
    expect_bad(c, n, "GGUF version 1; versions 2 and 3 are supported");
    memcpy(c, b, n), put64(c, 8, 1u << 30);
    expect_bad(c, n, "cannot fit in");
    memcpy(c, b, n), put64(c, 24, 0xffffffffffffull); /* the first key's length */
    expect_bad(c, n, "metadata key at byte 24 is 281474976710655 bytes long");
    for (size_t cut = 24; cut < n; cut += 7) /* every truncation: a message, no read past */
        expect_bad(b, cut, "bad.gguf: ");
    /* a tensor's offset moved off the alignment, then past the end */
    size_t at = 0;
    static const unsigned char name_b[9] = {1, 0, 0, 0, 0, 0, 0, 0, 'b'}; /* length 1, "b" */
    for (size_t i = 0; i + 9 <= n && !at; i++)
        if (memcmp(b + i, name_b, 9) == 0)
            at = i + 9;
    assert_true(at > 0);
    size_t off_at = at + 4 + 8 + 4; /* n_dims, ne[0], type */
    memcpy(c, b, n), put64(c, off_at, 65);
    expect_bad(c, n, "tensor 'b': offset 65 is not a multiple of the alignment 64");
    memcpy(c, b, n), put64(c, off_at, 1 << 20);
    expect_bad(c, n, "run past the end of the file");
    memcpy(c, b, n), put64(c, off_at, 0);
    expect_bad(c, n, "tensors 'b' and 'a' overlap");
    memcpy(c, b, n), c[off_at - 4] = 77;
    expect_bad(c, n, "tensor 'b' has unknown ggml type 77");
    memcpy(c, b, n), c[off_at - 4] = 8; /* Q8_0 rows of 16: not whole blocks */
    expect_bad(c, n, "its rows (16) are not whole blocks of 32");
    memcpy(c, b, n), c[at] = 9; /* 9 dimensions */
    expect_bad(c, n, "tensor 'b' has 9 dimensions");
    /* duplicate key and alignment not a power of two */
    test_gguf_kv kv[] = {{"x", ATTN_GGUF_UINT32, 1, 0, NULL, NULL, 0},
                         {"x", ATTN_GGUF_UINT32, 2, 0, NULL, NULL, 0}};
    write_gguf(path_in(dir, "d.gguf"), kv, 2, NULL, 0, 32);
    size_t dn;
    unsigned char *d = (unsigned char *)read_file(path_in(dir, "d.gguf"), &dn);
    expect_bad(d, dn, "metadata 'x' appears twice");
    free(d);
    test_gguf_kv al[] = {{"general.alignment", ATTN_GGUF_UINT32, 48, 0, NULL, NULL, 0}};
    write_gguf(path_in(dir, "a.gguf"), al, 1, NULL, 0, 32);
    d = (unsigned char *)read_file(path_in(dir, "a.gguf"), &dn);
    expect_bad(d, dn, "general.alignment must be a u32 power of two");
    free(d);
    attn_msg m;
    attn_gguf *g = NULL;
    assert_int_equal(attn_gguf_open(path_in(dir, "missing.gguf"), &g, &m), ATTN_E_IO);
    free(b);
    free(c);
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_metadata_and_tensors),
        cmocka_unit_test(refuses_every_broken_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
