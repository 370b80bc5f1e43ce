/* fuzz_gguf.c: libFuzzer target for the GGUF reader. Any input must either
 * fail with a message or open into metadata and tensors whose every read
 * stays inside the input (ASan watches). */
#include <stdlib.h>
#include <string.h>

#include "attn.h"

#define CHECK(cond) ((cond) ? (void)0 : abort())

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    attn_gguf *g = NULL;
    attn_msg m = {{0}};
    if (attn_gguf_open_memory(data, size, "fuzz.gguf", &g, &m) != ATTN_OK) {
        CHECK(m.text[0] != 0 && g == NULL);
        return 0;
    }
    for (int i = 0; i < attn_gguf_kv_count(g); i++) {
        const char *k = attn_gguf_kv_key(g, i);
        CHECK(k && attn_gguf_kv_type(g, k) >= 0);
        int64_t v;
        double d;
        bool b;
        const char *s;
        size_t n;
        (void)attn_gguf_get_int(g, k, 0, &v);
        (void)attn_gguf_get_float(g, k, 1, &d);
        (void)attn_gguf_get_bool(g, k, &b);
        if (attn_gguf_get_str(g, k, &s, &n))
            CHECK((const unsigned char *)s >= data && (const unsigned char *)s + n <= data + size);
        (void)attn_gguf_array_len(g, k);
    }
    for (int i = 0; i < attn_gguf_count(g); i++) {
        const attn_gguf_tensor *t = attn_gguf_get(g, i);
        CHECK(t && t->name && t->type_name && attn_gguf_find(g, t->name) == t);
        CHECK((const unsigned char *)t->data >= data &&
              (const unsigned char *)t->data + t->nbytes <= data + size);
        size_t sum = 0; /* touch the data: ASan checks every byte is inside */
        for (size_t j = 0; j < t->nbytes; j += 61)
            sum += ((const unsigned char *)t->data)[j];
        CHECK(sum <= 255 * (t->nbytes / 61 + 1));
    }
    attn_gguf_close(g);
    return 0;
}
