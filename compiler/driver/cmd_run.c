/* cmd_run.c: `attnc run`: a spec + weights + input tensor x -> output y,
 * fed through the KV cache in chunks; y is written atomically. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char run_usage[] =
    "usage: attnc run SPEC --weights W.safetensors --input X.safetensors -o Y.safetensors\n"
    "                 [--engine reference] [--chunk N] [--prefix P]\n"
    "\n"
    "Runs the attention block of SPEC on the tensor 'x' [tokens, d_model] of X\n"
    "(F32, F16 or BF16) and writes 'y' [tokens, d_model] F32 to Y.\n"
    "\n"
    "  --weights W     q_proj/k_proj/v_proj/o_proj .weight (and .bias) in Hugging\n"
    "                  Face layout [out, in]; any of F32, F16, BF16\n"
    "  --prefix P      prepended to every weight name, e.g. model.layers.0.self_attn.\n"
    "  --input X       safetensors file holding 'x'\n"
    "  -o, --output Y  output file; written only when everything succeeded\n"
    "  --engine E      reference (plain C, the definition of the semantics)\n"
    "  --chunk N       feed N tokens at a time through the KV cache (default: all);\n"
    "                  gives the same y as one shot; needs causal: true\n";

/* Reads tensor 'x' [T, d_model]; *x is malloc'd. */
static attn_status read_input(const char *path, int64_t d_model, float **x, int64_t *T,
                              attn_msg *m) {
    attn_st *f = NULL;
    attn_status st = attn_st_open(path, &f, m);
    if (st == ATTN_OK)
        st = attn_st_read_rows_f32(f, "x", d_model, x, T, m);
    attn_st_close(f);
    return st;
}

int cmd_run(int argc, char **argv) {
    const char *help = NULL, *weights = NULL, *input = NULL, *output = NULL;
    const char *engine = "reference", *chunk_s = NULL, *prefix = NULL, *pos[1];
    int n_pos;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},       {"--weights", NULL, true, &weights, NULL, 0},
        {"--input", NULL, true, &input, NULL, 0},      {"--output", "-o", true, &output, NULL, 0},
        {"--engine", NULL, true, &engine, NULL, 0},    {"--chunk", NULL, true, &chunk_s, NULL, 0},
        {"--prefix", NULL, true, &prefix, NULL, 0},    {0},
    };
    if (!parse_opts("run", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(run_usage, stdout);
        return EXIT_OK;
    }
    if (n_pos != 1)
        return usage_error("run", "expected one SPEC file");
    if (!weights || !input || !output)
        return usage_error("run", "--weights, --input and -o are required");
    if (strcmp(engine, "reference") != 0)
        return usage_error("run", "--engine expects reference (the only engine built so far), "
                                  "found '%s'",
                           engine);
    int64_t chunk = 0;
    if (chunk_s && !parse_int("run", "--chunk", chunk_s, 1, ATTN_MAX_TOKENS, &chunk))
        return EXIT_USAGE;

    attn_config cfg;
    int rc = load_spec(pos[0], &cfg);
    if (rc != EXIT_OK)
        return rc;

    attn_msg m = {{0}};
    attn_weights *w = NULL;
    attn_ref *ref = NULL;
    float *x = NULL, *y = NULL;
    int64_t T = 0;
    attn_status st;
    if ((st = attn_weights_load(&cfg, weights, prefix, &w, &m)) ||
        (st = read_input(input, cfg.d_model, &x, &T, &m))) {
        rc = runtime_error(st, &m);
        goto done;
    }
    if (T > cfg.kv_max_tokens) {
        fprintf(stderr, "attnc: error: %s: 'x' has %lld tokens; kv_cache.max_tokens of %s is %lld\n",
                input, (long long)T, pos[0], (long long)cfg.kv_max_tokens);
        rc = EXIT_INPUT;
        goto done;
    }
    if (chunk == 0 || chunk > T)
        chunk = T;
    if (!cfg.causal && chunk < T) {
        rc = usage_error("run", "--chunk needs a causal spec: a non-causal block attends to "
                                "keys that later chunks have not delivered yet");
        goto done;
    }
    if (!(y = malloc((size_t)(T * cfg.d_model) * sizeof(float))) ||
        (st = attn_ref_new(w, T, &ref, &m)) != ATTN_OK) {
        rc = runtime_error(y ? st : ATTN_E_NOMEM, &m);
        goto done;
    }
    double t0 = now_seconds();
    for (int64_t at = 0; at < T; at += chunk) {
        int64_t n = T - at < chunk ? T - at : chunk;
        if ((st = attn_ref_forward(ref, n, x + at * cfg.d_model, y + at * cfg.d_model, &m))) {
            rc = runtime_error(st, &m);
            goto done;
        }
    }
    double secs = now_seconds() - t0;
    attn_st_tensor out = {"y", ATTN_DTYPE_F32, 2, {T, cfg.d_model}, y};
    if ((st = attn_st_write(output, &out, 1, &m))) {
        rc = runtime_error(st, &m);
        goto done;
    }
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < T * cfg.d_model; i++) {
        sum += y[i];
        sq += (double)y[i] * y[i];
    }
    printf("%s: %lld tokens (chunks of %lld), engine %s: %.3f s, %.1f tokens/s\n", cfg.name,
           (long long)T, (long long)chunk, engine, secs, (double)T / (secs > 0 ? secs : 1e-9));
    printf("y [%lld, %lld] f32: rms %.6g, sum %.6g -> %s\n", (long long)T,
           (long long)cfg.d_model, sqrt(sq / (double)(T * cfg.d_model)), sum, output);
    rc = EXIT_OK;
done:
    attn_ref_free(ref);
    attn_weights_free(w);
    free(x);
    free(y);
    return rc;
}
