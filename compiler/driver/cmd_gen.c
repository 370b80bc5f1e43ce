/* cmd_gen.c: `attnc gen-weights` and `attnc gen-input`: deterministic
 * random weights and inputs, so anyone can run a spec without a
 * checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
#include "util.h"

static const char weights_usage[] =
    "usage: attnc gen-weights SPEC -o W.safetensors [--seed S] [--dtype T]\n"
    "                         [--prefix P]\n"
    "\n"
    "Writes deterministic random weights for SPEC under the Hugging Face names\n"
    "q_proj.weight [heads*head_dim, d_model], k_proj.weight and v_proj.weight\n"
    "[kv_groups*head_dim, d_model] (memory_dim with cross_attention),\n"
    "o_proj.weight [d_model, heads*head_dim] and,\n"
    "when the spec asks, the .bias tensors (other weights.layout values: that\n"
    "family's names and fused q/k/v, as attnc run reads them). Weights are\n"
    "uniform with variance 1/fan_in, biases uniform in [-0.1, 0.1].\n"
    "\n"
    "  --seed S     random seed (default 1)\n"
    "  --dtype T    stored dtype: f32, f16, bf16, q8_0 or q4_0 (default: the spec's\n"
    "               dtype); q8_0 and q4_0 matrices are ggml's blocks in U8 tensors\n"
    "               (docs/spec.md, \"Quantized weights\"), vectors stay f32\n"
    "  --prefix P   prepended to every name, e.g. model.layers.0.self_attn.\n";

static const char input_usage[] =
    "usage: attnc gen-input SPEC [--tokens T] [--memory-rows N] -o X.safetensors\n"
    "                       [--seed S] [--dtype T] [--doc-len N] [--prefix N]\n"
    "\n"
    "Writes the tensor 'x' [T, d_model] and, for a cross-attention spec, 'memory'\n"
    "[N, memory_dim] (attnc run --memory), of deterministic random numbers,\n"
    "uniform with variance 1; at least one of them. A spec's token and sequence\n"
    "inputs (inputs:) go beside x as I32 tensors of their names (attnc run\n"
    "--inputs): a token input p / N at position p (--doc-len N, default 256:\n"
    "documents of N tokens), a sequence input N (--prefix N, default T / 2).\n"
    "\n"
    "  --tokens T        number of tokens (rows of x)\n"
    "  --memory-rows N   rows of memory (cross_attention only)\n"
    "  --seed S     random seed (default 2)\n"
    "  --dtype T    stored dtype: f32 (default), f16 or bf16\n";

int cmd_gen_weights(int argc, char **argv) {
    const char *help = NULL, *output = NULL, *seed_s = NULL, *dtype_s = NULL, *prefix = NULL;
    const char *pos[1];
    int n_pos;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},    {"--output", "-o", true, &output, NULL, 0},
        {"--seed", NULL, true, &seed_s, NULL, 0},   {"--dtype", NULL, true, &dtype_s, NULL, 0},
        {"--prefix", NULL, true, &prefix, NULL, 0}, {0},
    };
    if (!parse_opts("gen-weights", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(weights_usage, stdout);
        return EXIT_OK;
    }
    if (n_pos != 1 || !output)
        return usage_error("gen-weights", "expected one SPEC file and -o");
    int64_t seed = 1;
    attn_dtype dt = ATTN_DTYPE_F32;
    if ((seed_s && !parse_int("gen-weights", "--seed", seed_s, 0, INT64_MAX, &seed)) ||
        (dtype_s && !parse_dtype("gen-weights", "--dtype", dtype_s, true, &dt)))
        return EXIT_USAGE;
    attn_config cfg;
    int rc = load_spec(pos[0], &cfg);
    if (rc != EXIT_OK)
        return rc;
    if (!dtype_s)
        dt = cfg.dtype;
    attn_msg m = {{0}};
    attn_weights *w = NULL;
    attn_status st = attn_weights_random(&cfg, (uint64_t)seed, &w, &m);
    if (!st)
        st = attn_weights_save(w, output, dt, prefix, &m);
    attn_weights_free(w);
    if (st)
        return runtime_error(st, &m);
    printf("%s: weights (%s, seed %lld) -> %s\n", cfg.name, attn_dtype_name(dt), (long long)seed,
           output);
    return EXIT_OK;
}

int cmd_gen_input(int argc, char **argv) {
    const char *help = NULL, *output = NULL, *seed_s = NULL, *dtype_s = NULL, *tokens_s = NULL;
    const char *rows_s = NULL, *doc_s = NULL, *prefix_s = NULL, *pos[1];
    int n_pos;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--output", "-o", true, &output, NULL, 0},
        {"--seed", NULL, true, &seed_s, NULL, 0},
        {"--dtype", NULL, true, &dtype_s, NULL, 0},
        {"--tokens", NULL, true, &tokens_s, NULL, 0},
        {"--memory-rows", NULL, true, &rows_s, NULL, 0},
        {"--doc-len", NULL, true, &doc_s, NULL, 0},
        {"--prefix", NULL, true, &prefix_s, NULL, 0},
        {0},
    };
    if (!parse_opts("gen-input", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(input_usage, stdout);
        return EXIT_OK;
    }
    if (n_pos != 1 || !output || (!tokens_s && !rows_s))
        return usage_error("gen-input",
                           "expected one SPEC file, --tokens or --memory-rows, and -o");
    int64_t seed = 2, T = 0, rows = 0, doc_len = 256, prefix = -1;
    attn_dtype dt = ATTN_DTYPE_F32;
    if ((tokens_s && !parse_int("gen-input", "--tokens", tokens_s, 1, ATTN_MAX_TOKENS, &T)) ||
        (rows_s && !parse_int("gen-input", "--memory-rows", rows_s, 1, ATTN_MAX_TOKENS, &rows)) ||
        (seed_s && !parse_int("gen-input", "--seed", seed_s, 0, INT64_MAX, &seed)) ||
        (dtype_s && !parse_dtype("gen-input", "--dtype", dtype_s, false, &dt)) ||
        (doc_s && !parse_int("gen-input", "--doc-len", doc_s, 1, ATTN_MAX_TOKENS, &doc_len)) ||
        (prefix_s && !parse_int("gen-input", "--prefix", prefix_s, INT32_MIN, INT32_MAX, &prefix)))
        return EXIT_USAGE;
    attn_config cfg;
    int rc = load_spec(pos[0], &cfg);
    if (rc != EXIT_OK)
        return rc;
    if (rows && cfg.memory_dim == 0)
        return usage_error("gen-input",
                           "--memory-rows is for cross-attention, and %s has no "
                           "cross_attention",
                           pos[0]);
    /* x from the seed's stream, then the memory from where x ended */
    size_t nx = (size_t)(T * cfg.d_model), nm = (size_t)(rows * cfg.memory_dim);
    float *x = malloc((nx + nm + 1) * sizeof *x);
    if (!x) {
        fprintf(stderr, "attnc: error: out of memory for %zu floats\n", nx + nm);
        return EXIT_INTERNAL;
    }
    uint64_t state = (uint64_t)seed;
    attn_random_uniform(&state, x, nx + nm, sqrt(3.0));
    attn_msg m = {{0}};
    attn_st_tensor t[2];
    attn_st_ints ti[ATTN_EXPR_MAX_INPUTS];
    int n = 0, ni = 0;
    if (T)
        t[n++] = (attn_st_tensor){"x", dt, 2, {T, cfg.d_model}, x};
    if (rows)
        t[n++] = (attn_st_tensor){"memory", dt, 2, {rows, cfg.memory_dim}, x + nx};
    /* the expressions' token and sequence inputs (one array serves them all) */
    attn_inputs in;
    attn_inputs_parse(cfg.inputs, &in, NULL); /* checked with the spec */
    int32_t *v = malloc((size_t)(T + 1) * sizeof *v);
    if (!v) {
        free(x);
        fprintf(stderr, "attnc: error: out of memory for %lld values\n", (long long)T);
        return EXIT_INTERNAL;
    }
    for (int64_t p = 0; p < T; p++)
        v[p] = (int32_t)(p / doc_len);
    v[T] = (int32_t)(prefix >= 0 ? prefix : T / 2);
    for (int i = 0; T && i < in.n; i++)
        if (in.in[i].per == ATTN_INPUT_TOKEN)
            ti[ni++] = (attn_st_ints){in.name[i], 1, {T}, v};
        else if (in.in[i].per == ATTN_INPUT_SEQUENCE)
            ti[ni++] = (attn_st_ints){in.name[i], 0, {0}, v + T};
    attn_status st = attn_st_write_ints(output, t, n, ti, ni, &m);
    free(x);
    free(v);
    if (st)
        return runtime_error(st, &m);
    if (T)
        printf("%s: input x [%lld, %lld] (%s, seed %lld) -> %s\n", cfg.name, (long long)T,
               (long long)cfg.d_model, attn_dtype_name(dt), (long long)seed, output);
    for (int i = 0; i < ni; i++)
        printf("%s: input %s %s (I32) -> %s\n", cfg.name, ti[i].name,
               ti[i].ndim ? "[tokens]: p / doc-len" : "[]: one value", output);
    if (rows)
        printf("%s: memory [%lld, %lld] (%s, seed %lld) -> %s\n", cfg.name, (long long)rows,
               (long long)cfg.memory_dim, attn_dtype_name(dt), (long long)seed, output);
    return EXIT_OK;
}
