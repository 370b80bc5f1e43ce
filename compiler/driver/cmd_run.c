/* cmd_run.c: `attnc run`: a spec + weights + input tensor x -> output y,
 * fed through the KV cache in chunks by the JIT-compiled kernels or the
 * reference engine; y is written atomically. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
#include "util.h"

static const char run_usage[] =
    "usage: attnc run SPEC --weights W --input X.safetensors -o Y.safetensors\n"
    "                 [--memory M.safetensors] [--inputs I.safetensors]\n"
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
    "  --inputs I          a spec with token or sequence inputs (inputs:): safetensors\n"
    "                      file holding each as an I32 tensor of its name: a token\n"
    "                      input one value per token of x ([tokens]), a sequence\n"
    "                      input one value ([] or [1])\n"
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

/* What run was asked, and what it read. */
typedef struct run_job {
    const char *spec, *weights, *input, *output, *memory_path, *prefix, *engine_s, *inputs_path;
    bool use_jit, verbose, check_finite;
    int64_t chunk, threads, layer;
    const char *disabled[32];
    attnc_options o;
    attn_config cfg;
    char layer_prefix[128];
    attn_weights *w; /* the reference engine's */
    attn_st *xf, *mf, *inf;
    attn_inputs decl;                      /* the spec's */
    int32_t *values[ATTN_EXPR_MAX_INPUTS]; /* token: [T]; sequence: [1] (NULL: weights) */
    float *x, *memory, *y;
    int64_t T, rows; /* tokens of x, rows of the memory */
} run_job;

/* The command line into j; EXIT_OK, or the exit code after the message. */
static int run_parse(int argc, char **argv, run_job *j) {
    const char *help = NULL, *verbose = NULL, *check_finite = NULL, *no_cache = NULL;
    const char *chunk_s = NULL, *threads_s = NULL, *layer_s = NULL, *shard = NULL, *pos[1];
    int n_disabled = 0, n_pos;
    j->engine_s = "jit";
    j->o = attnc_options_default();
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--weights", NULL, true, &j->weights, NULL, 0},
        {"--input", NULL, true, &j->input, NULL, 0},
        {"--memory", NULL, true, &j->memory_path, NULL, 0},
        {"--inputs", NULL, true, &j->inputs_path, NULL, 0},
        {"--output", "-o", true, &j->output, NULL, 0},
        {"--engine", NULL, true, &j->engine_s, NULL, 0},
        {"--chunk", NULL, true, &chunk_s, NULL, 0},
        {"--prefix", NULL, true, &j->prefix, NULL, 0},
        {"--layer", NULL, true, &layer_s, NULL, 0},
        {"--threads", NULL, true, &threads_s, NULL, 0},
        {"--cpu", NULL, true, &j->o.cpu, NULL, 0},
        {"--disable-pass", NULL, true, j->disabled, &n_disabled, 32},
        {"--emit-llvm", NULL, true, &j->o.emit_llvm, NULL, 0},
        {"--emit-asm", NULL, true, &j->o.emit_asm, NULL, 0},
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
        return -1; /* done: exit 0 */
    }
    if (n_pos != 1)
        return usage_error("run", "expected one SPEC file");
    if (!j->weights || !j->input || !j->output)
        return usage_error("run", "--weights, --input and -o are required");
    j->spec = pos[0];
    j->use_jit = strcmp(j->engine_s, "jit") == 0;
    if (!j->use_jit && strcmp(j->engine_s, "reference") != 0)
        return usage_error("run", "--engine expects jit or reference, found '%s'", j->engine_s);
    j->layer = -1;
    if (j->prefix && layer_s)
        return usage_error("run", "give --prefix or --layer, not both");
    if ((layer_s && !parse_int("run", "--layer", layer_s, 0, 1000000, &j->layer)) ||
        (chunk_s && !parse_int("run", "--chunk", chunk_s, 1, ATTN_MAX_TOKENS, &j->chunk)) ||
        (threads_s && !parse_int("run", "--threads", threads_s, 1, 1024, &j->threads)))
        return EXIT_USAGE;
    if (!check_pass_names("run", j->disabled, n_disabled) ||
        (shard && !parse_shard("run", shard, &j->o)))
        return EXIT_USAGE;
    j->o.disabled_passes = j->disabled;
    j->o.n_disabled_passes = n_disabled;
    j->o.no_cache = no_cache != NULL;
    j->verbose = verbose != NULL;
    j->check_finite = check_finite != NULL;
    return EXIT_OK;
}

/* The spec's token and sequence inputs from --inputs into j->values. */
static int read_inputs(run_job *j) {
    attn_msg m = {{0}};
    attn_inputs_parse(j->cfg.inputs, &j->decl, NULL); /* checked with the spec */
    bool need = false;
    for (int i = 0; i < j->decl.n; i++)
        need |= j->decl.in[i].per != ATTN_INPUT_WEIGHT;
    if (!need && j->inputs_path)
        return usage_error("run",
                           "--inputs is for a spec with token or sequence inputs, and %s "
                           "has none",
                           j->spec);
    if (need && !j->inputs_path) {
        fprintf(stderr,
                "attnc: error: %s reads token or sequence inputs (inputs:): give them with "
                "--inputs I.safetensors\n",
                j->spec);
        return EXIT_USAGE;
    }
    attn_status st;
    if (need && (st = attn_st_open(j->inputs_path, &j->inf, &m)))
        return runtime_error(st, &m);
    for (int i = 0; need && i < j->decl.n; i++) {
        attn_input_per per = j->decl.in[i].per;
        const char *name = j->decl.name[i];
        if (per == ATTN_INPUT_WEIGHT)
            continue;
        const attn_st_info *t = attn_st_find(j->inf, name);
        int64_t want = per == ATTN_INPUT_TOKEN ? j->T : 1, n = 1;
        for (int d = 0; t && d < t->ndim; d++)
            n *= t->shape[d];
        const char *why = !t                             ? "is missing"
                          : strcmp(t->dtype, "I32") != 0 ? "is not I32"
                          : t->ndim > 1 || n != want     ? "has the wrong shape"
                                                         : NULL;
        if (why) {
            fprintf(stderr,
                    "attnc: error: %s: tensor '%s' %s: input '%s' is per %s: an I32 tensor of "
                    "%s\n",
                    j->inputs_path, name, why, name, per == ATTN_INPUT_TOKEN ? "token" : "sequence",
                    per == ATTN_INPUT_TOKEN ? "one value per token of x" : "one value");
            return EXIT_INPUT;
        }
        if (!(j->values[i] = malloc((size_t)want * sizeof(int32_t))))
            return runtime_error(ATTN_E_NOMEM, NULL);
        memcpy(j->values[i], t->data, (size_t)want * sizeof(int32_t)); /* may be unaligned */
    }
    return EXIT_OK;
}

/* The spec, then the weights (checked, or loaded for the reference
 * engine), x and the memory, each checked as asked and against the
 * cache's size. */
static int run_read(run_job *j) {
    int rc = load_spec_shard(j->spec, &j->o, &j->cfg);
    if (rc != EXIT_OK)
        return rc;
    const attn_config *cfg = &j->cfg;
    bool cross = cfg->memory_dim > 0;
    if (cross && !j->memory_path) {
        fprintf(stderr,
                "attnc: error: %s has cross_attention: give its memory with --memory "
                "M.safetensors (tensor 'memory' [rows, %lld])\n",
                j->spec, (long long)cfg->memory_dim);
        return EXIT_USAGE;
    }
    if (!cross && j->memory_path)
        return usage_error("run",
                           "--memory is for cross-attention, and %s has no "
                           "cross_attention",
                           j->spec);
    attn_msg m = {{0}};
    attn_status st;
    if (j->layer >= 0) {
        if ((st = attn_layer_prefix(cfg, j->weights, j->layer, j->layer_prefix,
                                    sizeof j->layer_prefix, &m)))
            return runtime_error(st, &m);
        j->prefix = j->layer_prefix;
    }
    /* the jit engine loads the checkpoint straight into its block, in the
     * spec's dtype; the reference engine needs f32 weights */
    if ((j->use_jit && (st = attn_weights_check(cfg, j->weights, j->prefix, &m))) ||
        (!j->use_jit && (st = attn_weights_load(cfg, j->weights, j->prefix, &j->w, &m))) ||
        (st = attn_st_open(j->input, &j->xf, &m)) ||
        (st = attn_st_read_rows_f32(j->xf, "x", cfg->d_model, &j->x, &j->T, &m)) ||
        (cross && (st = attn_st_open(j->memory_path, &j->mf, &m))) ||
        (cross &&
         (st = attn_st_read_rows_f32(j->mf, "memory", cfg->memory_dim, &j->memory, &j->rows, &m))))
        return runtime_error(st, &m);
    if ((rc = read_inputs(j)) != EXIT_OK)
        return rc;
    if (!j->use_jit && j->check_finite && (st = attn_weights_check_finite(j->w, &m))) {
        fprintf(stderr, "attnc: error: %s: %s\n", j->weights, m.text);
        return EXIT_INPUT;
    }
    char what[1100];
    snprintf(what, sizeof what, "%s: tensor 'x'", j->input);
    if (j->check_finite && (st = attn_check_finite(j->x, (size_t)(j->T * cfg->d_model), what, &m)))
        return runtime_error(st, &m);
    if (cross && j->check_finite) {
        snprintf(what, sizeof what, "%s: tensor 'memory'", j->memory_path);
        if ((st = attn_check_finite(j->memory, (size_t)(j->rows * cfg->memory_dim), what, &m)))
            return runtime_error(st, &m);
    }
    if (cross && (j->rows < 1 || j->rows > cfg->kv_max_tokens)) {
        fprintf(stderr,
                "attnc: error: %s: 'memory' has %lld rows; kv_cache.max_tokens of %s is "
                "%lld\n",
                j->memory_path, (long long)j->rows, j->spec, (long long)cfg->kv_max_tokens);
        return EXIT_INPUT;
    }
    if (!cross && j->T > cfg->kv_max_tokens) {
        fprintf(stderr,
                "attnc: error: %s: 'x' has %lld tokens; kv_cache.max_tokens of %s is %lld\n",
                j->input, (long long)j->T, j->spec, (long long)cfg->kv_max_tokens);
        return EXIT_INPUT;
    }
    if (j->chunk == 0 || j->chunk > j->T)
        j->chunk = j->T;
    if (!cfg->causal && !cross && j->chunk < j->T)
        return usage_error("run", "--chunk needs a causal spec: a non-causal block attends to "
                                  "keys that later chunks have not delivered yet");
    if (!(j->y = malloc((size_t)(j->T * cfg->d_model) * sizeof(float))))
        return runtime_error(ATTN_E_NOMEM, NULL);
    return EXIT_OK;
}

/* The engine asked for, with one sequence (holding the memory, if any). */
static int run_engine(run_job *j, engine *e) {
    bool cross = j->cfg.memory_dim > 0;
    int64_t slots = cross ? j->rows : j->T;
    attn_msg m = {{0}};
    attn_status st;
    if (!j->use_jit) {
        if ((st = attn_ref_new(j->w, slots, &e->ref, &m)) != ATTN_OK ||
            (cross && (st = attn_ref_set_memory(e->ref, j->rows, j->memory, &m))))
            return runtime_error(st, &m);
        for (int i = 0; i < j->decl.n; i++) {
            bool token = j->decl.in[i].per == ATTN_INPUT_TOKEN;
            if (j->values[i] && (st = attn_ref_set_input(e->ref, j->decl.name[i], 0,
                                                         token ? j->T : 1, j->values[i], &m)))
                return runtime_error(st, &m);
        }
        return EXIT_OK;
    }
    attnc_ctx *cx = attnc_ctx_new();
    int rc = compile_report(cx, attnc_jit_compile_file(cx, j->spec, &j->o, &e->jit));
    if (rc != EXIT_OK)
        return rc;
    if (j->verbose) {
        attnc_timings t = attnc_jit_timings(e->jit);
        print_timings(&t);
    }
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = (int)j->threads;
    if ((st = attn_block_new(attnc_jit_kernels(e->jit), &bo, &e->block)) ||
        (st = attn_block_load(e->block, j->weights, j->prefix,
                              j->check_finite ? ATTN_LOAD_CHECK_FINITE : 0)) ||
        (st = attn_cache_new(e->block, slots, &e->cache)) ||
        (st = attn_seq_new(e->cache, &e->seq)) ||
        (cross && (st = attn_seq_set_memory(e->cache, e->seq, j->rows, j->memory)))) {
        snprintf(m.text, sizeof m.text, "%s",
                 e->cache   ? attn_cache_error(e->cache)
                 : e->block ? attn_block_error(e->block)
                            : "");
        return runtime_error(st, &m);
    }
    for (int i = 0; i < j->decl.n; i++) {
        bool token = j->decl.in[i].per == ATTN_INPUT_TOKEN;
        if (j->values[i] && (st = attn_seq_set_input(e->cache, e->seq, j->decl.name[i], 0,
                                                     token ? j->T : 1, j->values[i]))) {
            snprintf(m.text, sizeof m.text, "%s", attn_cache_error(e->cache));
            return runtime_error(st, &m);
        }
    }
    return EXIT_OK;
}

/* x through the engine in chunks, y written, a summary printed. */
static int run_feed(run_job *j, engine *e) {
    const attn_config *cfg = &j->cfg;
    attn_msg m = {{0}};
    attn_status st;
    double t0 = now_seconds();
    for (int64_t at = 0; at < j->T; at += j->chunk) {
        int64_t n = j->T - at < j->chunk ? j->T - at : j->chunk;
        const float *xs = j->x + at * cfg->d_model;
        float *ys = j->y + at * cfg->d_model;
        int32_t n32 = (int32_t)n;
        st = j->use_jit ? attn_forward(e->block, e->cache, 1, &e->seq, &n32, xs, ys)
                        : attn_ref_forward(e->ref, n, xs, ys, &m);
        if (st) {
            if (j->use_jit)
                snprintf(m.text, sizeof m.text, "%s", attn_cache_error(e->cache));
            return runtime_error(st, &m);
        }
    }
    double secs = now_seconds() - t0;
    attn_st_tensor out = {"y", ATTN_DTYPE_F32, 2, {j->T, cfg->d_model}, j->y};
    if ((st = attn_st_write(j->output, &out, 1, &m)))
        return runtime_error(st, &m);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < j->T * cfg->d_model; i++) {
        sum += j->y[i];
        sq += (double)j->y[i] * j->y[i];
    }
    printf("%s: %lld tokens (chunks of %lld), engine %s: %.3f s, %.1f tokens/s\n", cfg->name,
           (long long)j->T, (long long)j->chunk, j->engine_s, secs,
           (double)j->T / (secs > 0 ? secs : 1e-9));
    printf("y [%lld, %lld] f32: rms %.6g, sum %.6g -> %s\n", (long long)j->T,
           (long long)cfg->d_model, sqrt(sq / (double)(j->T * cfg->d_model)), sum, j->output);
    return EXIT_OK;
}

int cmd_run(int argc, char **argv) {
    run_job j = {0};
    engine e = {0};
    int rc = run_parse(argc, argv, &j);
    if (rc != EXIT_OK)
        return rc < 0 ? EXIT_OK : rc;
    if ((rc = run_read(&j)) == EXIT_OK && (rc = run_engine(&j, &e)) == EXIT_OK)
        rc = run_feed(&j, &e);
    engine_free(&e);
    attn_st_close(j.xf);
    attn_st_close(j.mf);
    attn_st_close(j.inf);
    for (int i = 0; i < ATTN_EXPR_MAX_INPUTS; i++)
        free(j.values[i]);
    attn_weights_free(j.w);
    free(j.x);
    free(j.memory);
    free(j.y);
    return rc;
}
