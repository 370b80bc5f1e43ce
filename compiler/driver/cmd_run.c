/* cmd_run.c: `attnc run`: a spec + weights + input tensor x -> output y,
 * fed through the KV cache in chunks by the JIT-compiled kernels or the
 * reference engine; y is written atomically. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char run_usage[] =
    "usage: attnc run SPEC --weights W --input X.safetensors -o Y.safetensors\n"
    "                 [--memory M.safetensors]\n"
    "                 [--engine jit|reference] [--chunk N] [--prefix P | --layer N]\n"
    "                 [--threads N]\n"
    "                 [--cpu NAME] [--disable-pass NAME]... [--emit-llvm F] [--emit-asm F]\n"
    "                 [--check-finite] [--no-cache] [--shard I/N] [-v]\n"
    "\n"
    "Runs the attention block of SPEC on the tensor 'x' [tokens, d_model] of X\n"
    "(F32, F16 or BF16) and writes 'y' [tokens, d_model] F32 to Y.\n"
    "\n"
    "  --weights W         a checkpoint: a .safetensors file, a sharded one's\n"
    "                      model.safetensors.index.json, or a .gguf file; tensors\n"
    "                      named as SPEC's weights.layout says (llama: q_proj, k_proj,\n"
    "                      v_proj, o_proj .weight/.bias); F32, F16, BF16, Q8_0 or\n"
    "                      Q4_0 (GGUF, or attnc's U8 blocks), kept in\n"
    "                      SPEC's dtype\n"
    "  --prefix P          prepended to every weight name, e.g. model.layers.0.self_attn.\n"
    "  --layer N           the prefix of layer N in the layout's checkpoints\n"
    "                      (model.layers.N.self_attn., blk.N. in GGUF, ...)\n"
    "  --input X           safetensors file holding 'x'\n"
    "  --memory M          cross-attention (and only then): safetensors file holding\n"
    "                      'memory' [rows, memory_dim] (F32, F16 or BF16), the\n"
    "                      encoder output every token attends to; at most\n"
    "                      kv_cache.max_tokens rows\n"
    "  -o, --output Y      output file; written only when everything succeeded\n"
    "  --engine E          jit (default: kernels compiled for this CPU) or reference\n"
    "                      (plain C, the definition of the semantics)\n"
    "  --chunk N           feed N tokens at a time through the KV cache (default: all);\n"
    "                      gives the same y as one shot; needs causal: true (or\n"
    "                      cross_attention)\n"
    "  --threads N         threads for the jit engine (default: $ATTN_THREADS or all CPUs)\n"
    "  --cpu NAME          compile for an LLVM CPU (x86-64-v3, generic, ...) instead of\n"
    "                      this host's\n"
    "  --disable-pass P    skip a graph pass (repeatable; attnc ir --list-passes)\n"
    "  --emit-llvm F       write the optimized LLVM IR of the kernels to F\n"
    "  --emit-asm F        write their assembly to F\n"
    "  --check-finite      reject weights or inputs holding NaN or infinity (exit 2);\n"
    "                      without it they are used as they are and propagate\n"
    "  --no-cache          neither read nor write the kernel cache (attnc cache --help)\n"
    "  --shard I/N         run shard I of N of the heads (attnc compile --help): W is\n"
    "                      the whole block's checkpoint, of which the shard keeps its\n"
    "                      slices; y is its partial output (the N shards' y sum to\n"
    "                      the whole block's)\n"
    "  -v                  print the compile time of each stage (and whether the\n"
    "                      kernel cache held the kernels)\n";

typedef struct engine {
    attn_ref *ref;
    attnc_jit *jit;
    attn_block *block;
    attn_cache *cache;
    int32_t seq;
} engine;

static void engine_free(engine *e) {
    attn_ref_free(e->ref);
    attn_cache_free(e->cache);
    attn_block_free(e->block);
    attnc_jit_free(e->jit);
}

static void print_timings(const attnc_timings *t) {
    if (t->cache == ATTNC_CACHE_HIT) { /* nothing was lowered or compiled */
        fprintf(stderr, "compile: spec %.1f ms, cache hit %.1f ms, link %.1f ms, total %.1f ms\n",
                t->spec_ms, t->cache_ms, t->jit_ms, t->total_ms);
        return;
    }
    fprintf(stderr,
            "compile: spec %.1f ms, ir %.1f ms, passes %.1f ms, llvm ir %.1f ms, "
            "optimize %.1f ms, codegen %.1f ms (%.1f ms on %d threads), cache %s %.1f ms, "
            "link %.1f ms, total %.1f ms\n",
            t->spec_ms, t->ir_ms, t->passes_ms, t->llvm_ms, t->optimize_ms, t->codegen_ms,
            t->objects_ms, t->threads, cache_result_name(t->cache), t->cache_ms, t->jit_ms,
            t->total_ms);
}

int cmd_run(int argc, char **argv) {
    const char *help = NULL, *weights = NULL, *input = NULL, *output = NULL, *verbose = NULL;
    const char *check_finite = NULL, *no_cache = NULL;
    const char *engine_s = "jit", *chunk_s = NULL, *prefix = NULL, *threads_s = NULL;
    const char *layer_s = NULL, *memory_path = NULL, *shard = NULL;
    const char *disabled[32], *pos[1];
    int n_disabled = 0, n_pos;
    attnc_options o = attnc_options_default();
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--weights", NULL, true, &weights, NULL, 0},
        {"--input", NULL, true, &input, NULL, 0},
        {"--memory", NULL, true, &memory_path, NULL, 0},
        {"--output", "-o", true, &output, NULL, 0},
        {"--engine", NULL, true, &engine_s, NULL, 0},
        {"--chunk", NULL, true, &chunk_s, NULL, 0},
        {"--prefix", NULL, true, &prefix, NULL, 0},
        {"--layer", NULL, true, &layer_s, NULL, 0},
        {"--threads", NULL, true, &threads_s, NULL, 0},
        {"--cpu", NULL, true, &o.cpu, NULL, 0},
        {"--disable-pass", NULL, true, disabled, &n_disabled, 32},
        {"--emit-llvm", NULL, true, &o.emit_llvm, NULL, 0},
        {"--emit-asm", NULL, true, &o.emit_asm, NULL, 0},
        {"--verbose", "-v", false, &verbose, NULL, 0},
        {"--check-finite", NULL, false, &check_finite, NULL, 0},
        {"--no-cache", NULL, false, &no_cache, NULL, 0},
        {"--shard", NULL, true, &shard, NULL, 0},
        {0},
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
    bool use_jit = strcmp(engine_s, "jit") == 0;
    if (!use_jit && strcmp(engine_s, "reference") != 0)
        return usage_error("run", "--engine expects jit or reference, found '%s'", engine_s);
    int64_t chunk = 0, threads = 0, layer = -1;
    if (prefix && layer_s)
        return usage_error("run", "give --prefix or --layer, not both");
    if ((layer_s && !parse_int("run", "--layer", layer_s, 0, 1000000, &layer)) ||
        (chunk_s && !parse_int("run", "--chunk", chunk_s, 1, ATTN_MAX_TOKENS, &chunk)) ||
        (threads_s && !parse_int("run", "--threads", threads_s, 1, 1024, &threads)))
        return EXIT_USAGE;
    if (!check_pass_names("run", disabled, n_disabled) || (shard && !parse_shard("run", shard, &o)))
        return EXIT_USAGE;
    o.disabled_passes = disabled;
    o.n_disabled_passes = n_disabled;
    o.no_cache = no_cache != NULL;

    attn_config cfg;
    int rc = load_spec_shard(pos[0], &o, &cfg);
    if (rc != EXIT_OK)
        return rc;

    bool cross = cfg.memory_dim > 0;
    if (cross && !memory_path) {
        fprintf(stderr,
                "attnc: error: %s has cross_attention: give its memory with --memory "
                "M.safetensors (tensor 'memory' [rows, %lld])\n",
                pos[0], (long long)cfg.memory_dim);
        return EXIT_USAGE;
    }
    if (!cross && memory_path)
        return usage_error("run",
                           "--memory is for cross-attention, and %s has no "
                           "cross_attention",
                           pos[0]);
    attn_msg m = {{0}};
    attn_weights *w = NULL;
    engine e = {0};
    float *x = NULL, *y = NULL, *memory = NULL;
    int64_t T = 0, rows = 0;
    attn_status st;
    attn_st *xf = NULL, *mf = NULL;
    char layer_prefix[128];
    if (layer >= 0) {
        if ((st = attn_layer_prefix(&cfg, weights, layer, layer_prefix, sizeof layer_prefix, &m)))
            return runtime_error(st, &m);
        prefix = layer_prefix;
    }
    /* the jit engine loads the checkpoint straight into its block, in the
     * spec's dtype; the reference engine needs f32 weights */
    if ((use_jit && (st = attn_weights_check(&cfg, weights, prefix, &m))) ||
        (!use_jit && (st = attn_weights_load(&cfg, weights, prefix, &w, &m))) ||
        (st = attn_st_open(input, &xf, &m)) ||
        (st = attn_st_read_rows_f32(xf, "x", cfg.d_model, &x, &T, &m)) ||
        (cross && (st = attn_st_open(memory_path, &mf, &m))) ||
        (cross && (st = attn_st_read_rows_f32(mf, "memory", cfg.memory_dim, &memory, &rows, &m)))) {
        rc = runtime_error(st, &m);
        goto done;
    }
    if (!use_jit && check_finite && (st = attn_weights_check_finite(w, &m))) {
        fprintf(stderr, "attnc: error: %s: %s\n", weights, m.text);
        rc = EXIT_INPUT;
        goto done;
    }
    char what[1100];
    snprintf(what, sizeof what, "%s: tensor 'x'", input);
    if (check_finite && (st = attn_check_finite(x, (size_t)(T * cfg.d_model), what, &m))) {
        rc = runtime_error(st, &m);
        goto done;
    }
    if (cross && check_finite) {
        snprintf(what, sizeof what, "%s: tensor 'memory'", memory_path);
        if ((st = attn_check_finite(memory, (size_t)(rows * cfg.memory_dim), what, &m))) {
            rc = runtime_error(st, &m);
            goto done;
        }
    }
    if (cross && (rows < 1 || rows > cfg.kv_max_tokens)) {
        fprintf(stderr,
                "attnc: error: %s: 'memory' has %lld rows; kv_cache.max_tokens of %s is "
                "%lld\n",
                memory_path, (long long)rows, pos[0], (long long)cfg.kv_max_tokens);
        rc = EXIT_INPUT;
        goto done;
    }
    if (!cross && T > cfg.kv_max_tokens) {
        fprintf(stderr,
                "attnc: error: %s: 'x' has %lld tokens; kv_cache.max_tokens of %s is %lld\n", input,
                (long long)T, pos[0], (long long)cfg.kv_max_tokens);
        rc = EXIT_INPUT;
        goto done;
    }
    if (chunk == 0 || chunk > T)
        chunk = T;
    if (!cfg.causal && !cross && chunk < T) {
        rc = usage_error("run", "--chunk needs a causal spec: a non-causal block attends to "
                                "keys that later chunks have not delivered yet");
        goto done;
    }
    if (!(y = malloc((size_t)(T * cfg.d_model) * sizeof(float)))) {
        rc = runtime_error(ATTN_E_NOMEM, NULL);
        goto done;
    }
    if (use_jit) {
        attnc_ctx *cx = attnc_ctx_new();
        if ((rc = compile_report(cx, attnc_jit_compile_file(cx, pos[0], &o, &e.jit))) != EXIT_OK)
            goto done;
        if (verbose) {
            attnc_timings t = attnc_jit_timings(e.jit);
            print_timings(&t);
        }
        attn_block_options bo = attn_block_options_default();
        bo.n_threads = (int)threads;
        if ((st = attn_block_new(attnc_jit_kernels(e.jit), &bo, &e.block)) ||
            (st = attn_block_load(e.block, weights, prefix,
                                  check_finite ? ATTN_LOAD_CHECK_FINITE : 0)) ||
            (st = attn_cache_new(e.block, cross ? rows : T, &e.cache)) ||
            (st = attn_seq_new(e.cache, &e.seq)) ||
            (cross && (st = attn_seq_set_memory(e.cache, e.seq, rows, memory)))) {
            snprintf(m.text, sizeof m.text, "%s",
                     e.cache   ? attn_cache_error(e.cache)
                     : e.block ? attn_block_error(e.block)
                               : "");
            rc = runtime_error(st, &m);
            goto done;
        }
    } else if ((st = attn_ref_new(w, cross ? rows : T, &e.ref, &m)) != ATTN_OK ||
               (cross && (st = attn_ref_set_memory(e.ref, rows, memory, &m)))) {
        rc = runtime_error(st, &m);
        goto done;
    }
    double t0 = now_seconds();
    for (int64_t at = 0; at < T; at += chunk) {
        int64_t n = T - at < chunk ? T - at : chunk;
        const float *xs = x + at * cfg.d_model;
        float *ys = y + at * cfg.d_model;
        int32_t n32 = (int32_t)n;
        st = use_jit ? attn_forward(e.block, e.cache, 1, &e.seq, &n32, xs, ys)
                     : attn_ref_forward(e.ref, n, xs, ys, &m);
        if (st) {
            if (use_jit)
                snprintf(m.text, sizeof m.text, "%s", attn_cache_error(e.cache));
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
           (long long)T, (long long)chunk, engine_s, secs, (double)T / (secs > 0 ? secs : 1e-9));
    printf("y [%lld, %lld] f32: rms %.6g, sum %.6g -> %s\n", (long long)T, (long long)cfg.d_model,
           sqrt(sq / (double)(T * cfg.d_model)), sum, output);
    rc = EXIT_OK;
done:
    engine_free(&e);
    attn_st_close(xf);
    attn_st_close(mf);
    attn_weights_free(w);
    free(x);
    free(memory);
    free(y);
    return rc;
}
