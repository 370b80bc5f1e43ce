/* aot_main.c: a program linked from an object `attnc compile` emitted and
 * libattn alone (no LLVM): runs the kernels over a prompt of 15 tokens
 * and decode calls of $AOT_DECODE_TOKENS (1 unset) up to 23, through the paged cache
 * (cross-attention: against a memory of 37 rows, projected by the object's memory-phase kernels)
 * and compares with the reference engine; a spec's token inputs hold p / 5 at position p, its
 * sequence inputs 9 (in both). Built by
 * test_aot with -DKERNELS=<name>_kernels -include <name>.h. Exit 0 when
 * within the cache dtype's tolerance (1e-4 f32, 2e-3 f16 and q8_0, 1.6e-2
 * bf16, as test_jit; activations q8_0: at least 2e-3, as
 * test_activations; compute bf16: at least 8e-3, as test_compute).
 * With an argument, the outputs' bytes are also written to that file
 * (test_aot compares two objects' runs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn.h"
#include "attn_expr.h"

/* cfg's token inputs for positions 0..T-1 and its sequence inputs, into
 * the cache's sequence s and the reference r. Nonzero on failure. */
static int give_inputs(const attn_config *cfg, attn_cache *c, int32_t s, attn_ref *r, int64_t T) {
    attn_inputs in;
    int32_t v[64], nine = 9;
    if (attn_inputs_parse(cfg->inputs, &in, NULL) || T > 64)
        return 1;
    for (int64_t p = 0; p < T; p++)
        v[p] = (int32_t)(p / 5);
    for (int i = 0; i < in.n; i++) {
        bool token = in.in[i].per == ATTN_INPUT_TOKEN;
        if (in.in[i].per == ATTN_INPUT_WEIGHT)
            continue;
        if ((c && attn_seq_set_input(c, s, in.name[i], 0, token ? T : 1, token ? v : &nine)) ||
            (r && attn_ref_set_input(r, in.name[i], 0, token ? T : 1, token ? v : &nine, NULL)))
            return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const attn_kernels *k = KERNELS();
    const attn_config *cfg = &k->config;
    int64_t T = 23, D = cfg->d_model, M = cfg->memory_dim > 0 ? 37 : 0;
    attn_weights *w;
    attn_block *b;
    attn_cache *c;
    attn_ref *r;
    int32_t s, prompt = 15;
    float *x = malloc((size_t)(T * D) * sizeof *x), *y = malloc((size_t)(T * D) * sizeof *y),
          *want = malloc((size_t)(T * D) * sizeof *want);
    float *memory = malloc((size_t)(M * cfg->memory_dim + 1) * sizeof *memory);
    uint64_t seed = 5;
    attn_random_uniform(&seed, x, (size_t)(T * D), 1.7);
    attn_random_uniform(&seed, memory, (size_t)(M * cfg->memory_dim), 1.7);
    if (attn_weights_random(cfg, 1, &w, NULL) || attn_block_new(k, NULL, &b) ||
        attn_block_set_weights(b, w) || attn_cache_new(b, T > M ? T : M, &c) ||
        attn_seq_new(c, &s) || (M && attn_seq_set_memory(c, s, M, memory)) ||
        give_inputs(cfg, c, s, NULL, T) || attn_forward(b, c, 1, &s, &prompt, x, y)) {
        fprintf(stderr, "aot: setup failed\n");
        return 2;
    }
    /* decode calls of $AOT_DECODE_TOKENS new tokens (1 to 8; 1 unset) */
    const char *e = getenv("AOT_DECODE_TOKENS");
    int32_t step = e ? atoi(e) : 1;
    if (step < 1 || step > 8) {
        fprintf(stderr, "aot: AOT_DECODE_TOKENS must be 1 to 8\n");
        return 2;
    }
    for (int64_t t = prompt; t < T; t += step) {
        int32_t n = T - t < step ? (int32_t)(T - t) : step;
        if (attn_forward(b, c, 1, &s, &n, x + t * D, y + t * D)) {
            fprintf(stderr, "aot: decode failed: %s\n", attn_cache_error(c));
            return 2;
        }
    }
    /* the same calls (a block without causal sees its calls' keys) */
    if (attn_ref_new(w, T > M ? T : M, &r, NULL) ||
        (M && attn_ref_set_memory(r, M, memory, NULL)) || give_inputs(cfg, NULL, 0, r, T) ||
        attn_ref_forward(r, prompt, x, want, NULL))
        return 2;
    for (int64_t t = prompt; t < T; t += step)
        if (attn_ref_forward(r, T - t < step ? T - t : step, x + t * D, want + t * D, NULL))
            return 2;
    double num = 0, den = 0;
    for (int64_t i = 0; i < T * D; i++) {
        num = fmax(num, fabs((double)y[i] - want[i]));
        den = fmax(den, fabs((double)want[i]));
    }
    printf("%s: %lld tokens through the emitted kernels, relative error %.3g\n", cfg->name,
           (long long)T, num / den);
    FILE *out = argc > 1 ? fopen(argv[1], "wb") : NULL;
    if (argc > 1 &&
        (!out || fwrite(y, sizeof *y, (size_t)(T * D), out) != (size_t)(T * D) || fclose(out))) {
        fprintf(stderr, "aot: cannot write %s\n", argv[1]);
        return 2;
    }
    attn_ref_free(r);
    attn_cache_free(c);
    attn_block_free(b);
    attn_weights_free(w);
    free(x), free(y), free(want), free(memory);
    attn_dtype kv = cfg->kv_dtype;
    double tol = kv == ATTN_DTYPE_F32 ? 1e-4 : kv == ATTN_DTYPE_BF16 ? 1.6e-2 : 2e-3;
    if (cfg->activations == ATTN_DTYPE_Q8_0 && tol < 2e-3)
        tol = 2e-3;
    if (cfg->compute == ATTN_DTYPE_BF16 && tol < 8e-3) /* p's rounding (docs/spec.md) */
        tol = 8e-3;
    return num / den <= tol ? 0 : 1;
}
