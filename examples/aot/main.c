/* main.c: an engine that ships compiled kernels. No LLVM here: the kernels
 * come from seed.o (emitted by `attnc compile`), the rest from libattn.
 * Loads weights and an input, prefills the first PROMPT tokens, decodes the
 * rest one at a time through the paged cache, and compares with the outputs
 * `attnc run --engine reference` wrote. Usage:
 *   aot_example W.safetensors X.safetensors Y_REF.safetensors [PROMPT] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn.h"
#include "seed.h"

static float *read_rows(const char *path, const char *name, int64_t cols, int64_t *rows) {
    attn_st *f = NULL;
    attn_msg m = {{0}};
    float *data = NULL;
    if (attn_st_open(path, &f, &m) || attn_st_read_rows_f32(f, name, cols, &data, rows, &m))
        fprintf(stderr, "aot_example: %s\n", m.text);
    attn_st_close(f);
    return data;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr,
                "usage: aot_example W.safetensors X.safetensors Y_REF.safetensors [PROMPT]\n");
        return 1;
    }
    const attn_kernels *k = seed_kernels();
    int64_t D = k->config.d_model, T = 0, T_ref = 0;
    float *x = read_rows(argv[2], "x", D, &T), *want = read_rows(argv[3], "y", D, &T_ref);
    if (!x || !want || T != T_ref)
        return 2;
    int32_t prompt = argc > 4 ? atoi(argv[4]) : (int32_t)(T / 2), one = 1, s;
    if (prompt < 1 || prompt > T)
        prompt = (int32_t)T;
    float *y = malloc((size_t)(T * D) * sizeof *y);
    attn_block *b = NULL;
    attn_cache *c = NULL;
    attn_msg m = {{0}};
    if (!y || attn_block_new(k, NULL, &b)) { /* e.g. built for a CPU this one is not */
        attn_kernels_check(k, &m);
        fprintf(stderr, "aot_example: %s\n", m.text);
        return 2;
    }
    if (attn_block_load_safetensors(b, argv[1], NULL)) {
        fprintf(stderr, "aot_example: %s\n", attn_block_error(b));
        return 2;
    }
    if (attn_cache_new(b, T, &c) || attn_seq_new(c, &s) || attn_forward(b, c, 1, &s, &prompt, x, y))
        return 2;
    for (int64_t t = prompt; t < T; t++)
        if (attn_forward(b, c, 1, &s, &one, x + t * D, y + t * D)) {
            fprintf(stderr, "aot_example: %s\n", attn_cache_error(c));
            return 2;
        }
    double num = 0, den = 0;
    for (int64_t i = 0; i < T * D; i++) {
        num = fmax(num, fabs((double)y[i] - want[i]));
        den = fmax(den, fabs((double)want[i]));
    }
    printf("aot_example: %s, prefill %d + decode %lld tokens; max relative difference to "
           "attnc run --engine reference: %.3g\n",
           k->config.name, prompt, (long long)(T - prompt), num / den);
    attn_cache_free(c);
    attn_block_free(b);
    free(x), free(y), free(want);
    return num / den <= 1e-4 ? 0 : 1;
}
