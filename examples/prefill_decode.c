/* prefill_decode.c: the public APIs end to end. Loads a spec, makes random
 * weights, prefills a prompt, then decodes one token at a time through the
 * cache, and checks the decoded outputs equal a one-shot run of the same
 * tokens. Usage: prefill_decode SPEC [PROMPT_TOKENS] [DECODE_STEPS] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attnc.h"

static int fail(const char *what, attn_status st, const attn_msg *m) {
    fprintf(stderr, "prefill_decode: %s: %s\n", what, m->text[0] ? m->text : attn_status_str(st));
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: prefill_decode SPEC [PROMPT_TOKENS] [DECODE_STEPS]\n");
        return 1;
    }
    int64_t prompt = argc > 2 ? atoll(argv[2]) : 7, steps = argc > 3 ? atoll(argv[3]) : 5;
    if (prompt < 1 || steps < 0 || prompt + steps > 1 << 16) {
        fprintf(stderr, "prefill_decode: bad token counts\n");
        return 1;
    }
    attn_config cfg;
    attnc_ctx *ctx = attnc_ctx_new();
    if (!ctx || attnc_spec_load_file(ctx, argv[1], &cfg) != ATTNC_OK) {
        for (size_t i = 0; i < attnc_diag_count(ctx); i++) {
            char buf[1024];
            attnc_diag_format(attnc_diag_get(ctx, i), buf, sizeof buf);
            fprintf(stderr, "%s\n", buf);
        }
        attnc_ctx_free(ctx);
        return 2;
    }
    attnc_ctx_free(ctx);

    int64_t T = prompt + steps, D = cfg.d_model;
    attn_msg m = {{0}};
    attn_weights *w = NULL;
    attn_ref *stream = NULL, *oneshot = NULL;
    attn_status st = attn_weights_random(&cfg, 1, &w, &m);
    if (st)
        return fail("weights", st, &m);
    float *x = malloc((size_t)(T * D) * sizeof *x);
    float *y = malloc((size_t)(T * D) * sizeof *y), *want = malloc((size_t)(T * D) * sizeof *y);
    if (!x || !y || !want)
        return fail("memory", ATTN_E_NOMEM, &m);
    uint64_t seed = 2;
    attn_random_uniform(&seed, x, (size_t)(T * D), sqrt(3.0));

    if ((st = attn_ref_new(w, T, &stream, &m)) || (st = attn_ref_new(w, T, &oneshot, &m)))
        return fail("engine", st, &m);
    if ((st = attn_ref_forward(stream, prompt, x, y, &m)))
        return fail("prefill", st, &m);
    for (int64_t t = prompt; t < T; t++)
        if ((st = attn_ref_forward(stream, 1, x + t * D, y + t * D, &m)))
            return fail("decode", st, &m);
    if ((st = attn_ref_forward(oneshot, T, x, want, &m)))
        return fail("one shot", st, &m);

    double err = 0, scale = 0;
    for (int64_t i = 0; i < T * D; i++) {
        err = fmax(err, fabs((double)y[i] - want[i]));
        scale = fmax(scale, fabs((double)want[i]));
    }
    printf("%s: prefill %lld + decode %lld tokens; max relative difference to one shot %.3g\n",
           cfg.name, (long long)prompt, (long long)steps, err / scale);
    attn_ref_free(stream);
    attn_ref_free(oneshot);
    attn_weights_free(w);
    free(x);
    free(y);
    free(want);
    return err <= 1e-5 * scale ? 0 : 3;
}
