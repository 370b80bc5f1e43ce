/* fuzz_safetensors.c: libFuzzer target for the safetensors reader. Any
 * input must either fail with a message or open into tensors whose every
 * read stays inside the input (ASan watches) and fails cleanly where the
 * dtype is not convertible. */
#include <stdlib.h>
#include <string.h>

#include "attn.h"

#define CHECK(cond) ((cond) ? (void)0 : abort())

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    attn_st *f = NULL;
    attn_msg m = {{0}};
    if (attn_st_open_memory(data, size, "fuzz.safetensors", &f, &m) != ATTN_OK) {
        CHECK(m.text[0] != 0);
        return 0;
    }
    for (int i = 0; i < attn_st_count(f); i++) {
        const attn_st_info *t = attn_st_get(f, i);
        CHECK(t && t->name && t->dtype);
        CHECK((const unsigned char *)t->data >= data &&
              (const unsigned char *)t->data + t->nbytes <= data + size);
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= (size_t)t->shape[d];
        CHECK(numel <= t->nbytes || t->nbytes == 0);
        float *dst = malloc((numel ? numel : 1) * sizeof *dst);
        CHECK(dst);
        attn_status st = attn_st_read_f32(f, t->name, t->ndim, t->shape, dst, &m);
        CHECK(st == ATTN_OK || st == ATTN_E_FORMAT);
        free(dst);
        if (t->ndim == 2 && t->shape[1] > 0) {
            float *rows = NULL;
            int64_t n = 0;
            if (attn_st_read_rows_f32(f, t->name, t->shape[1], &rows, &n, &m) == ATTN_OK)
                CHECK(n == t->shape[0]);
            free(rows);
        }
    }
    CHECK(attn_st_find(f, "") == NULL || attn_st_count(f) > 0);
    attn_st_close(f);
    return 0;
}
