/* cmd_gen.c: `attnc gen-weights` and `attnc gen-input`: deterministic
 * random weights and inputs, so anyone can run a spec without a
 * checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    "                       [--seed S] [--dtype T]\n"
    "\n"
    "Writes the tensor 'x' [T, d_model] and, for a cross-attention spec, 'memory'\n"
    "[N, memory_dim] (attnc run --memory), of deterministic random numbers,\n"
    "uniform with variance 1; at least one of them.\n"
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
    const char *rows_s = NULL, *pos[1];
    int n_pos;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--output", "-o", true, &output, NULL, 0},
        {"--seed", NULL, true, &seed_s, NULL, 0},
        {"--dtype", NULL, true, &dtype_s, NULL, 0},
        {"--tokens", NULL, true, &tokens_s, NULL, 0},
        {"--memory-rows", NULL, true, &rows_s, NULL, 0},
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
    int64_t seed = 2, T = 0, rows = 0;
    attn_dtype dt = ATTN_DTYPE_F32;
    if ((tokens_s && !parse_int("gen-input", "--tokens", tokens_s, 1, ATTN_MAX_TOKENS, &T)) ||
        (rows_s && !parse_int("gen-input", "--memory-rows", rows_s, 1, ATTN_MAX_TOKENS, &rows)) ||
        (seed_s && !parse_int("gen-input", "--seed", seed_s, 0, INT64_MAX, &seed)) ||
        (dtype_s && !parse_dtype("gen-input", "--dtype", dtype_s, false, &dt)))
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
    int n = 0;
    if (T)
        t[n++] = (attn_st_tensor){"x", dt, 2, {T, cfg.d_model}, x};
    if (rows)
        t[n++] = (attn_st_tensor){"memory", dt, 2, {rows, cfg.memory_dim}, x + nx};
    attn_status st = attn_st_write(output, t, n, &m);
    free(x);
    if (st)
        return runtime_error(st, &m);
    if (T)
        printf("%s: input x [%lld, %lld] (%s, seed %lld) -> %s\n", cfg.name, (long long)T,
               (long long)cfg.d_model, attn_dtype_name(dt), (long long)seed, output);
    if (rows)
        printf("%s: memory [%lld, %lld] (%s, seed %lld) -> %s\n", cfg.name, (long long)rows,
               (long long)cfg.memory_dim, attn_dtype_name(dt), (long long)seed, output);
    return EXIT_OK;
}
