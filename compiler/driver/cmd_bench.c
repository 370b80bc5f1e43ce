/* cmd_bench.c: `attnc roofline` (this machine's FP32 FMA peak and read
 * bandwidth, measured with probes compiled like the kernels) and `attnc
 * bench` (a spec JIT-run on random weights: checked against the reference
 * first, then timed, reported against the roofline of the same run). */
#define _DEFAULT_SOURCE /* mkstemps */
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attn_expr.h"
#include "util.h"

static const char roofline_usage[] =
    "usage: attnc roofline [--threads N] [--runs N] [--cpu NAME] [--json]\n"
    "\n"
    "Measures what bench divides by, with code compiled for this CPU as the\n"
    "kernels are: the FP32 FMA peak (independent vector fused multiply-adds in\n"
    "registers on every thread), on CPUs with AVX512-BF16 the bf16 dot product\n"
    "peak (vdpbf16ps, what compute: bf16 runs), on AMX CPUs the bf16 tile\n"
    "peak (tdpbf16ps), on VNNI CPUs the int8 dot product peak (vpdpbusd, what\n"
    "activations: q8_0 runs; a multiply-add counts as two operations), and\n"
    "the read bandwidth (every thread summing its part of a 1 GiB array).\n"
    "Prints the median of --runs (default 7) runs, with min and max. A compute\n"
    "probe's run lasts about 0.2 s, or $ATTNC_PROBE_SECONDS (0.001 to 10).\n"
    "\n"
    "  --threads N   threads (default: $ATTN_THREADS or all CPUs)\n"
    "  --cpu NAME    compile the probes for CPU NAME (e.g. x86-64-v3: AVX2 vectors on\n"
    "                an AVX-512 machine), which must run here\n"
    "  --json        one JSON object: threads, fma_gflops, bf16_gflops (AVX512-BF16),\n"
    "                amx_bf16_gflops (AMX), int8_gops (VNNI), read_gbps (+ _min/_max)\n";

static const char bench_usage[] =
    "usage: attnc bench SPEC [--mode prefill|decode] [--part core|block] [--seq N]\n"
    "                   [--cache N] [--threads N] [--runs N] [--json] [--ablation]\n"
    "                   [--dtype D] [--kv-dtype D] [--compute C] [--activations A]\n"
    "                   [--cpu NAME] [--disable-pass P]...\n"
    "                   [--no-cache] [--memory N] [--shard I/N] [--batch N]\n"
    "                   [--shared-prefix P] [--doc-len N] [--prefix N]\n"
    "\n"
    "JIT-compiles SPEC, loads random weights, checks the kernels against the\n"
    "reference engine (prefill of min(N, 96) tokens, then 2 decode steps; exit 3\n"
    "if the error exceeds the documented tolerance: 1e-4 relative with an f32\n"
    "cache, 2e-3 f16 and q8_0 (MLA: 1e-2), 1.6e-2 bf16; at least 8e-3 with\n"
    "compute bf16), measures the roofline,\n"
    "then times a warm-up and --runs (default 7, at least 5) runs and prints the\n"
    "median, min and max.\n"
    "Just before each run every thread reads its part of 256 MiB, as the roofline\n"
    "does, which empties the caches (decode then makes one untimed call, so the\n"
    "timed one finds the caches as a decode loop leaves them).\n"
    "\n"
    "  --mode prefill   (default) one sequence of --seq tokens (default 2048) into an\n"
    "                   empty cache\n"
    "  --mode decode    one new token on a sequence holding --cache tokens (default\n"
    "                   4096); the cache is rolled back after each run\n"
    "  --part block     (default) the whole forward call\n"
    "  --part core      RoPE and attention: every kernel but the projections (with\n"
    "                   rope_epilogue, RoPE and the cache store run inside the q/k/v\n"
    "                   projection and count as block)\n"
    "  --batch N        N sequences in each timed call (default 1), each decoding\n"
    "                   one token after --cache tokens or prefilling --seq tokens;\n"
    "                   the work and bytes are N times one sequence's, the\n"
    "                   weights' bytes once\n"
    "  --shared-prefix P  the batch's sequences share their first P tokens: forks\n"
    "                   of one sequence that holds them (decode: P <= --cache, the\n"
    "                   rest each sequence's own; prefill: each holds the P shared\n"
    "                   tokens and prefills --seq after them); the shared keys'\n"
    "                   bytes count once\n"
    "  --doc-len N      a spec's token inputs (inputs: per token) hold p / N at\n"
    "                   position p: documents of N tokens (default 256)\n"
    "  --prefix N       a spec's sequence inputs hold N (default 0)\n"
    "  --memory N       cross-attention (needed then): each sequence attends to N\n"
    "                   memory rows, projected once by attn_seq_set_memory before\n"
    "                   the timed calls (its time is printed, not counted);\n"
    "                   prefill is --seq tokens against them, decode one token\n"
    "  --dtype D        weights f32, f16, bf16, q8_0 or q4_0 instead of the spec's dtype\n"
    "  --shard I/N      shard I of N of the heads (attnc compile --help): times what\n"
    "                   one tensor-parallel rank computes, its partial output\n"
    "  --kv-dtype D     K/V cache f32, f16, bf16 or q8_0 instead of the spec's kv_cache.dtype\n"
    "  --compute C      f32 or bf16 instead of the spec's compute: the arithmetic\n"
    "                   of the matrix products (bf16 operands, f32 sums)\n"
    "  --activations A  f32 or q8_0 instead of the spec's activations: q8_0 quantizes\n"
    "                   the projections' input rows for int8 products (q8_0 or q4_0\n"
    "                   weights)\n"
    "  --cpu NAME       compile kernels and roofline probes for CPU NAME instead of\n"
    "                   this one's (e.g. x86-64-v3: the AVX2 code, 16 registers, on\n"
    "                   an AVX-512 machine); its features must be this CPU's\n"
    "  --ablation       one row per fusion pass disabled, after the full pipeline\n"
    "  --no-cache       compile every variant anew: neither read nor write the\n"
    "                   kernel cache (attnc cache --help)\n"
    "  --json           one JSON object per row: spec, mode, part, cpu, seq, compute,\n"
    "                   activations, cache, batch, shared_prefix,\n"
    "                   threads, variant, ms_median, ms_min, ms_max, flops, bytes,\n"
    "                   cache_token_bytes (what the cache holds per token: K and V\n"
    "                   of every K/V group, or MLA's latent, in the cache dtype),\n"
    "                   gflops, gbps, peak_gflops and peak_kind (fma; for compute\n"
    "                   bf16 bf16_dot, or amx_bf16 on an AMX CPU but for a\n"
    "                   decode core (its split kernel runs f32 FMAs); for\n"
    "                   a block of activations q8_0 on a VNNI CPU vnni_int8: the\n"
    "                   peak %peak is against), read_gbps (+ _min/_max: the reads\n"
    "                   before the runs), pct_peak, pct_read, compile_ms (the JIT\n"
    "                   compile's wall clock) and compile_cache (off, miss or hit);\n"
    "                   with --shard, shard (\"I/N\")\n"
    "\n"
    "Useful work counted (S new tokens, T = P + S keys, H heads, hd head_dim,\n"
    "D d_model, kv = kv_groups * hd; cross-attention: every query sees the N\n"
    "memory rows, and the block's projections are q and o only):\n"
    "  flops core  = 4 * hd * H * (keys each query sees, summed over queries):\n"
    "                q.k and p.v; causal counts only the visible half of S x S,\n"
    "                a mask_mod the pairs it shows (evaluated pair by pair)\n"
    "  flops block = core + 2 * S * D * (H*hd + 2*kv) + 2 * S * H*hd * D\n"
    "  bytes core  = K and V of the visible keys once (cache dtype) + q and out\n"
    "  bytes block = core + weights (spec dtype; q8_0 34 and q4_0 18 bytes per 32) + x, y\n"
    "MLA (L = kv_lora_rank, r = qk_rope_head_dim, n = qk_nope_head_dim, dv =\n"
    "v_head_dim; absorbed: one latent per key; expanded, as prefills of at\n"
    "least attnc_mla_prefill_tokens into an empty sequence run, and every call\n"
    "with --disable-pass mla_absorb: K and V expanded per head):\n"
    "  flops core  = 2 * (2L + r) * H * pairs (scores over L + r, values over L),\n"
    "                expanded 2 * (n + r + dv) * H * pairs\n"
    "  bytes core  = the visible keys' latents (L + r each, cache dtype) + q, out\n"
    "  core leaves out the linears, q_a's norm and the products with kv_b_proj\n"
    "  (mla_query and mla_output, or mla_keys and mla_values), which --part\n"
    "  block adds with their weights (kv_b_proj in f32)\n"
    "GFLOP/s and GB/s are these over the median time; %peak is against the FMA\n"
    "peak of the roofline; %read is the median over the runs of each run's GB/s\n"
    "against the read just before it (a shared machine's bandwidth can change\n"
    "within seconds; the roofline's read, printed first, is one moment).\n";

typedef struct stat3 {
    double median, min, max;
} stat3;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static stat3 stats(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    stat3 s = {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[0], v[n - 1]};
    return s;
}

typedef struct roofline {
    int threads;
    stat3 fma, read; /* GFLOP/s, GB/s */
    bool has_bf16;   /* the CPU has bf16 dot products: their peak */
    stat3 bf16;
    bool has_amx; /* and AMX tiles (granted by the OS): their bf16 peak */
    stat3 amx;
    bool has_int8; /* VNNI: its int8 dot products' peak, GOP/s */
    stat3 int8;
} roofline;

/* The probes, compiled like the kernels, and the array the read probe
 * sums (on huge pages where the system allows, advice only, as the
 * runtime's KV pool and packed weights are: the bandwidth they can
 * reach), kept for bench's read before each run. */
typedef struct probes {
    attnc_jit *jit;
    attnc_probes pr;
    float *data;
    int threads;
} probes;

enum {
    PROBE_FLOATS = (1 << 30) / sizeof(float),    /* the roofline's read: 1 GiB */
    PROBE_RUN_FLOATS = (1 << 28) / sizeof(float) /* before each bench run: 256 MiB */
};

static void probes_close(probes *p) {
    attnc_jit_free(p->jit);
    free(p->data);
    *p = (probes){0};
}

/* EXIT_OK if code compiled for cpu (NULL: this one) runs here, else the
 * features this CPU lacks, as an input error. */
static int cpu_runs_here(const char *cmd, const char *cpu) {
    if (!cpu)
        return EXIT_OK;
    attnc_options o = attnc_options_default();
    o.cpu = cpu;
    char name[128], list[512];
    uint32_t need;
    attnc_ctx *cx = attnc_ctx_new();
    int rc = compile_report(cx, attnc_target_cpu(cx, &o, name, sizeof name, &need));
    if (rc != EXIT_OK)
        return rc;
    uint32_t missing = need & ~attn_cpu_features();
    if (!missing)
        return EXIT_OK;
    attn_cpu_feature_names(missing, list, sizeof list);
    fprintf(stderr, "attnc: error: %s: --cpu %s needs CPU features this machine lacks: %s\n", cmd,
            cpu, list);
    return EXIT_INPUT;
}

static int probes_open(int threads, const char *cpu, probes *p) {
    *p = (probes){.threads = threads};
    attnc_options o = attnc_options_default();
    o.cpu = cpu;
    attnc_ctx *cx = attnc_ctx_new();
    int rc = compile_report(cx, attnc_probes_compile_for(cx, &o, &p->jit, &p->pr));
    if (rc != EXIT_OK)
        return rc;
    if (posix_memalign((void **)&p->data, 2 << 20, PROBE_FLOATS * sizeof *p->data)) {
        p->data = NULL;
        probes_close(p);
        return runtime_error(ATTN_E_NOMEM, NULL);
    }
    (void)madvise(p->data, PROBE_FLOATS * sizeof *p->data, MADV_HUGEPAGE);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < (int64_t)PROBE_FLOATS; i++) /* first touch, in parallel */
        p->data[i] = 1.0f;
    return EXIT_OK;
}

/* One read of data[0..n) by all threads, GB/s; -1 if some thread's sum
 * (its part is hi - lo ones) says not every element was read. */
static double probe_read(const probes *p, int64_t n) {
    double t0 = 0, t1 = 0;
    int wrong = 0;
#pragma omp parallel num_threads(p->threads) reduction(+ : wrong)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t lo = n / 64 * t / nt * 64, hi = n / 64 * (t + 1) / nt * 64;
#pragma omp barrier
#pragma omp master
        t0 = now_seconds();
        double sum = p->pr.read(p->data + lo, hi - lo);
#pragma omp barrier
#pragma omp master
        t1 = now_seconds();
        wrong += fabs(sum - (double)(hi - lo)) > 1e-5 * (double)(hi - lo);
    }
    return wrong ? -1 : (double)n * sizeof(float) / (t1 - t0) / 1e9;
}

static int read_probe_error(void) {
    fprintf(stderr, "attnc: error: the read probe's sums were off\n");
    return EXIT_INTERNAL;
}

/* Seconds a compute probe's run lasts: 0.2, or $ATTNC_PROBE_SECONDS
 * (0.001-10; the test suite's bench runs take 0.01: their roofline is
 * not what they check). */
static double probe_seconds(void) {
    const char *env = getenv("ATTNC_PROBE_SECONDS");
    double s = env ? atof(env) : 0;
    return s >= 0.001 && s <= 10 ? s : 0.2;
}

/* GFLOP/s of `runs` timings of probe fn (flops a round) on every thread,
 * after calibrating to about probe_seconds() a run. */
static void time_probe(const probes *p, void (*fn)(float *, int64_t), int64_t flops, int runs,
                       float *io, double *out) {
    double want = probe_seconds(), enough = want / 4;
    int64_t iters = 1 << 10;
    for (double dt = 0; dt < enough && iters < (INT64_C(1) << 40);) {
        iters *= 4;
        double t0 = now_seconds();
        io[0] = 0.999999f;
        io[1] = 1e-6f;
        fn(io, iters);
        dt = now_seconds() - t0;
        if (dt >= enough)
            iters = (int64_t)((double)iters * want / dt);
    }
    for (int k = 0; k < runs; k++) {
        double t0 = 0, t1 = 0;
#pragma omp parallel num_threads(p->threads)
        {
            int t = omp_get_thread_num();
            float *mine = io + 64 * t;
            mine[0] = 0.999999f;
            mine[1] = 1e-6f;
#pragma omp barrier
#pragma omp master
            t0 = now_seconds();
            fn(mine, iters);
#pragma omp barrier
#pragma omp master
            t1 = now_seconds();
        }
        out[k] = (double)p->threads * (double)iters * (double)flops / (t1 - t0) / 1e9;
    }
}

static int measure_roofline(const probes *p, int runs, roofline *r) {
    float *io = NULL;
    double *fma = malloc((size_t)runs * sizeof *fma), *rd = malloc((size_t)runs * sizeof *rd);
    if (posix_memalign((void **)&io, 64, (size_t)p->threads * 64 * sizeof *io) || !fma || !rd) {
        free(fma);
        free(rd);
        return runtime_error(ATTN_E_NOMEM, NULL);
    }
    r->threads = p->threads;
    time_probe(p, p->pr.fma, p->pr.flops_per_iter, runs, io, fma);
    r->fma = stats(fma, runs);
    r->has_bf16 = p->pr.bf16 != NULL;
    if (r->has_bf16) {
        time_probe(p, p->pr.bf16, p->pr.bf16_flops_per_iter, runs, io, fma);
        r->bf16 = stats(fma, runs);
    }
    r->has_amx = p->pr.amx && attn_cpu_request_amx(NULL) == ATTN_OK;
    if (r->has_amx) {
        time_probe(p, p->pr.amx, p->pr.amx_flops_per_iter, runs, io, fma);
        r->amx = stats(fma, runs);
    }
    r->has_int8 = p->pr.int8 != NULL;
    if (r->has_int8) {
        time_probe(p, p->pr.int8, p->pr.int8_ops_per_iter, runs, io, fma);
        r->int8 = stats(fma, runs);
    }
    bool wrong = false;
    for (int k = 0; k < runs; k++)
        wrong |= (rd[k] = probe_read(p, PROBE_FLOATS)) < 0;
    r->read = stats(rd, runs);
    free(io);
    free(fma);
    free(rd);
    return wrong ? read_probe_error() : EXIT_OK;
}

static int default_threads(void) {
    const char *env = getenv("ATTN_THREADS");
    return env && atoi(env) > 0 ? atoi(env) : omp_get_num_procs();
}

static void print_roofline_line(const roofline *r) {
    char bf16[288] = "";
    if (r->has_bf16)
        snprintf(bf16, sizeof bf16, ", bf16 dot peak %.1f GFLOP/s (%.1f-%.1f)", r->bf16.median,
                 r->bf16.min, r->bf16.max);
    if (r->has_amx)
        snprintf(bf16 + strlen(bf16), sizeof bf16 - strlen(bf16),
                 ", AMX bf16 peak %.1f GFLOP/s (%.1f-%.1f)", r->amx.median, r->amx.min, r->amx.max);
    if (r->has_int8)
        snprintf(bf16 + strlen(bf16), sizeof bf16 - strlen(bf16),
                 ", int8 dot peak %.1f GOP/s (%.1f-%.1f)", r->int8.median, r->int8.min,
                 r->int8.max);
    fprintf(stdout,
            "roofline (%d threads, median of runs): FMA peak %.1f GFLOP/s (%.1f-%.1f)%s, "
            "read %.1f GB/s (%.1f-%.1f)\n",
            r->threads, r->fma.median, r->fma.min, r->fma.max, bf16, r->read.median, r->read.min,
            r->read.max);
}

int cmd_roofline(int argc, char **argv) {
    const char *help = NULL, *threads_s = NULL, *runs_s = NULL, *json = NULL, *cpu = NULL;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0}, {"--threads", NULL, true, &threads_s, NULL, 0},
        {"--cpu", NULL, true, &cpu, NULL, 0},    {"--runs", NULL, true, &runs_s, NULL, 0},
        {"--json", NULL, false, &json, NULL, 0}, {0},
    };
    const char *pos[1];
    int n_pos;
    if (!parse_opts("roofline", argc, argv, 1, opts, pos, 0, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(roofline_usage, stdout);
        return EXIT_OK;
    }
    int64_t threads = default_threads(), runs = 7;
    if ((threads_s && !parse_int("roofline", "--threads", threads_s, 1, 1024, &threads)) ||
        (runs_s && !parse_int("roofline", "--runs", runs_s, 1, 1000, &runs)))
        return EXIT_USAGE;
    roofline r = {0};
    probes pb = {0};
    int rc = cpu_runs_here("roofline", cpu);
    if (rc == EXIT_OK)
        rc = probes_open((int)threads, cpu, &pb);
    if (rc == EXIT_OK)
        rc = measure_roofline(&pb, (int)runs, &r);
    probes_close(&pb);
    if (rc != EXIT_OK)
        return rc;
    if (!json) {
        print_roofline_line(&r);
        return EXIT_OK;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "threads", r.threads);
    cJSON_AddNumberToObject(o, "fma_gflops", r.fma.median);
    cJSON_AddNumberToObject(o, "fma_gflops_min", r.fma.min);
    cJSON_AddNumberToObject(o, "fma_gflops_max", r.fma.max);
    if (r.has_bf16) {
        cJSON_AddNumberToObject(o, "bf16_gflops", r.bf16.median);
        cJSON_AddNumberToObject(o, "bf16_gflops_min", r.bf16.min);
        cJSON_AddNumberToObject(o, "bf16_gflops_max", r.bf16.max);
    }
    if (r.has_amx) {
        cJSON_AddNumberToObject(o, "amx_bf16_gflops", r.amx.median);
        cJSON_AddNumberToObject(o, "amx_bf16_gflops_min", r.amx.min);
        cJSON_AddNumberToObject(o, "amx_bf16_gflops_max", r.amx.max);
    }
    if (r.has_int8) {
        cJSON_AddNumberToObject(o, "int8_gops", r.int8.median);
        cJSON_AddNumberToObject(o, "int8_gops_min", r.int8.min);
        cJSON_AddNumberToObject(o, "int8_gops_max", r.int8.max);
    }
    cJSON_AddNumberToObject(o, "read_gbps", r.read.median);
    cJSON_AddNumberToObject(o, "read_gbps_min", r.read.min);
    cJSON_AddNumberToObject(o, "read_gbps_max", r.read.max);
    char *text = cJSON_PrintUnformatted(o);
    if (text)
        puts(text);
    free(text);
    cJSON_Delete(o);
    return text ? EXIT_OK : runtime_error(ATTN_E_NOMEM, NULL);
}

/* ---- bench -------------------------------------------------------------- */

typedef struct bench {
    const char *spec;
    const char *compiled; /* the spec compiled: spec, or a copy with other dtypes */
    attn_config cfg;
    attn_weights *w;
    bool decode, core;
    int64_t seq, cache; /* prefill: seq new tokens; decode: 1 new on cache */
    int threads, runs;
    const char *disabled[40];
    int n_disabled;
    bool no_cache;
    const char *cpu;     /* NULL: this CPU */
    int64_t memory;      /* cross-attention: memory rows (0: self-attention) */
    int batch;           /* sequences in each timed call */
    int64_t shared;      /* the tokens they share (--shared-prefix) */
    float *mem;          /* [memory, memory_dim] */
    attnc_options shard; /* its shard_index and shard_count (0 of 0: whole) */
    int64_t doc_len;     /* token inputs: p / doc_len at position p (--doc-len) */
    int32_t prefix;      /* sequence inputs: this value (--prefix) */
} bench;

/* The value the bench gives a token input at position p, a sequence input. */
static int32_t bench_token(const bench *b, int64_t p) {
    return (int32_t)(p / b->doc_len);
}

/* The spec's token inputs for positions 0..n-1 and its sequence inputs,
 * into seq of cache (or the reference r where cache is NULL). */
static attn_status give_inputs(const bench *b, attn_cache *cache, int32_t seq, attn_ref *r,
                               int64_t n, attn_msg *m) {
    attn_inputs in;
    if (!b->cfg.inputs[0] || attn_inputs_parse(b->cfg.inputs, &in, m) != ATTN_OK)
        return ATTN_OK;
    int32_t *v = malloc((size_t)(n + 1) * sizeof *v);
    if (!v)
        return ATTN_E_NOMEM;
    for (int64_t p = 0; p < n; p++)
        v[p] = bench_token(b, p);
    attn_status st = ATTN_OK;
    for (int i = 0; i < in.n && st == ATTN_OK; i++) {
        if (in.in[i].per == ATTN_INPUT_WEIGHT)
            continue;
        bool token = in.in[i].per == ATTN_INPUT_TOKEN;
        const int32_t *x = token ? v : &b->prefix;
        int64_t k = token ? n : 1;
        st = cache ? attn_seq_set_input(cache, seq, in.name[i], 0, k, x)
                   : attn_ref_set_input(r, in.name[i], 0, k, x, m);
        if (st && cache)
            snprintf(m->text, sizeof m->text, "%s", attn_cache_error(cache));
    }
    free(v);
    return st;
}

/* Bytes the cache holds per token: K and V rows of every K/V group, or
 * MLA's one latent, in the cache dtype. */
static double cache_token_bytes(const attn_config *c) {
    return (double)attn_dtype_bytes(c->kv_dtype, attn_cache_columns(c, 0)) +
           (double)attn_dtype_bytes(c->kv_dtype, attn_cache_columns(c, 1));
}

/* What a mask_mod reads in mask_mod_pairs: the bench's inputs, token
 * values at positions 0..T-1 (the runs set those; a read past them is 0,
 * as in the kernels). */
typedef struct pairs_ctx {
    const bench *b;
    int64_t T;
    attn_inputs in;
} pairs_ctx;

static int32_t pairs_token(void *ctx, int input, int32_t pos) {
    const pairs_ctx *x = ctx;
    (void)input;
    return pos >= 0 && pos < x->T ? bench_token(x->b, pos) : 0;
}

static int32_t pairs_sequence(void *ctx, int input) {
    (void)input;
    return ((const pairs_ctx *)ctx)->b->prefix;
}

static float pairs_weight(void *ctx, int input, int64_t i, int64_t j) {
    const pairs_ctx *x = ctx;
    const attn_expr_input *d = &x->in.in[input];
    return x->b->w->input[input][i * (d->rank > 1 ? d->dims[1] : 1) + j];
}

/* The (query, key) pairs a mask_mod shows, summed over the S queries
 * from position P and averaged over the heads, and (*keys) the keys some
 * query of some head sees; -1 without a mask_mod. Each pair through
 * attn_expr_eval, each head only where the mask reads h or g. */
static double mask_mod_pairs(const bench *b, int64_t P, int64_t S, double *keys) {
    const attn_config *c = &b->cfg;
    attn_expr e;
    pairs_ctx x = {b, P + S, {0}};
    if (!c->mask_mod[0] || attn_config_parse_expr(c, true, &e, &x.in, NULL) != ATTN_OK)
        return -1;
    bool by_head = false;
    for (int i = 0; i < e.n_nodes; i++)
        by_head |= e.node[i].op == ATTN_EXPR_HEAD || e.node[i].op == ATTN_EXPR_GROUP;
    int64_t T = P + S, nh = by_head ? c->heads : 1, h0 = c->heads * c->shard_index;
    unsigned char *seen = calloc((size_t)T, 1);
    if (!seen)
        return -1;
    double pairs = 0;
    for (int64_t h = 0; h < nh; h++)
        for (int64_t pos = P; pos < T; pos++) {
            int64_t lo = c->causal ? attn_first_key(c, pos) : 0, hi = c->causal ? pos : T - 1;
            attn_expr_env env = {.q = (int32_t)pos,
                                 .h = (int32_t)(h0 + h),
                                 .g = (int32_t)((h0 + h) / (c->heads / c->kv_groups)),
                                 .ctx = &x,
                                 .token = pairs_token,
                                 .sequence = pairs_sequence,
                                 .weight = pairs_weight};
            for (int64_t j = lo; j <= hi; j++) {
                env.kv = (int32_t)j;
                if (attn_expr_eval(&e, x.in.in, &env) != 0)
                    pairs += 1, seen[j] = 1;
            }
        }
    *keys = 0;
    for (int64_t j = 0; j < T; j++)
        *keys += seen[j];
    free(seen);
    return pairs / (double)nh;
}

/* The useful work of one sequence's call (see the usage text); *wbytes
 * the weights' share of *bytes. */
static void work_one(const bench *b, double *flops, double *bytes, double *wbytes) {
    const attn_config *c = &b->cfg;
    double P = b->decode ? (double)b->cache : (double)b->shared, S = b->decode ? 1 : (double)b->seq;
    double pairs = 0; /* (query, visible key) pairs */
    for (int64_t s = 0; s < (int64_t)S; s++) {
        int64_t pos = (int64_t)P + s; /* keys from the window's or chunk's first */
        pairs += c->causal ? (double)(pos + 1 - attn_first_key(c, pos)) : P + S;
    }
    double H = (double)c->heads, hd = (double)c->head_dim, D = (double)c->d_model;
    double qd = H * hd, kv = (double)(c->kv_groups * c->head_dim);
    double kv_keys = P + S - (double)attn_first_key(c, (int64_t)P); /* the keys read */
    double masked = mask_mod_pairs(b, (int64_t)P, (int64_t)S, &kv_keys);
    if (masked >= 0)
        pairs = masked;
    if (b->memory) /* every query sees every memory row */
        pairs = S * (double)b->memory, kv_keys = (double)b->memory;
    *flops = 4 * hd * H * pairs;
    *bytes = kv_keys * cache_token_bytes(c) + 2 * S * qd * 4;
    *wbytes = 0;
    if (c->mla_kv_lora_rank > 0) { /* attention over the latent (absorbed) */
        double L = (double)c->mla_kv_lora_rank, r = (double)c->mla_qk_rope_head_dim;
        double n = (double)c->mla_qk_nope_head_dim, dv = (double)c->mla_v_head_dim;
        double ql = (double)c->mla_q_lora_rank, lat = L + r;
        bool expanded = P == 0 && S >= (double)attnc_mla_prefill_tokens(c);
        for (int i = 0; i < b->n_disabled; i++)
            expanded |= strcmp(b->disabled[i], "mla_absorb") == 0;
        *flops = 2 * (expanded ? n + r + dv : 2 * L + r) * H * pairs;
        *bytes = kv_keys * cache_token_bytes(c) + S * H * (lat + L) * 4;
        if (b->core)
            return;
        double wq = ql > 0 ? D * ql + ql * qd : D * qd, wo = H * dv * D;
        /* the products with kv_b_proj: of the queries and outputs, or of
         * every key expanded */
        *flops += 2 * S * (wq + D * lat + wo) + 2 * (expanded ? kv_keys : S) * H * (n + dv) * L;
        /* kv_b_proj is kept in f32 */
        *wbytes =
            (double)attn_dtype_bytes(c->dtype, (int64_t)(wq + D * lat + wo)) + H * (n + dv) * L * 4;
        *bytes += *wbytes + 2 * S * D * 4;
        return;
    }
    if (!b->core && b->memory) { /* K and V were projected with the memory */
        *flops += 4 * S * D * qd;
        *wbytes = (double)attn_dtype_bytes(c->dtype, (int64_t)(2 * qd * D));
        *bytes += *wbytes + 2 * S * D * 4;
    } else if (!b->core) {
        *flops += 2 * S * D * (qd + 2 * kv) + 2 * S * qd * D;
        /* the block formats at their size: 34 or 18 bytes per 32 weights */
        *wbytes = (double)attn_dtype_bytes(c->dtype, (int64_t)(D * (qd + 2 * kv) + qd * D));
        *bytes += *wbytes + 2 * S * D * 4;
    }
}

/* The useful work of one timed call: --batch sequences' own, the
 * weights and the shared keys the sequences see read once. */
static void work(const bench *b, double *flops, double *bytes) {
    double wbytes;
    work_one(b, flops, bytes, &wbytes);
    *flops *= b->batch;
    *bytes = (*bytes - wbytes) * b->batch + wbytes;
    int64_t first = attn_first_key(&b->cfg, b->decode ? b->cache : b->shared);
    if (b->shared > first)
        *bytes -= (double)(b->batch - 1) * (double)(b->shared - first) * cache_token_bytes(&b->cfg);
}

/* A step --part core leaves out: the linears, and MLA's products with
 * kv_b_proj and q_a's norm (its projections' share). */
static bool is_projection(const char *step) {
    static const char *const ends[] = {"_linear",     "_rms_norm", "_mla_query",
                                       "_mla_output", "_mla_keys", "_mla_values"};
    size_t n = strlen(step);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        size_t m = strlen(ends[i]);
        if (n >= m && strcmp(step + n - m, ends[i]) == 0)
            return true;
    }
    return false;
}

static double tolerance(const attn_config *c) {
    attn_dtype kv = c->kv_dtype;
    if (kv == ATTN_DTYPE_Q8_0 && c->mla_kv_lora_rank > 0)
        return 1e-2; /* a latent element's Q8_0 step is every head's (docs/spec.md, MLA) */
    double t = kv == ATTN_DTYPE_F32 ? 1e-4 : kv == ATTN_DTYPE_BF16 ? 1.6e-2 : 2e-3; /* f16, q8_0 */
    /* compute bf16: p rounded against the running max (docs/spec.md, compute) */
    if (c->compute == ATTN_DTYPE_BF16 && t < 8e-3)
        t = 8e-3;
    /* activations q8_0: the output projection's input, f32 here and double
     * in the reference, may round to another q (docs/spec.md, activations) */
    return c->activations == ATTN_DTYPE_Q8_0 && t < 2e-3 ? 2e-3 : t;
}

/* cfg as a spec in a fresh file made from path's template (ends in
 * ".yaml" after the XXXXXX), for a compile with dtypes the spec lacks. */
static int write_spec_copy(const attn_config *cfg, char *path) {
    char *text = attnc_spec_to_yaml(cfg);
    int fd = text ? mkstemps(path, 5) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0;
    if (f)
        ok &= fclose(f) == 0;
    else if (fd >= 0)
        close(fd);
    free(text);
    if (!ok) {
        if (fd >= 0)
            remove(path);
        fprintf(stderr,
                "attnc: error: bench: cannot write a spec with the requested dtypes to %s\n", path);
        return EXIT_INPUT;
    }
    return EXIT_OK;
}

/* n inputs of unit variance, as `attnc gen-input` makes them. */
static float *random_input(int64_t n, uint64_t seed) {
    float *x = malloc((size_t)n * sizeof *x);
    if (x)
        attn_random_uniform(&seed, x, (size_t)n, sqrt(3.0));
    return x;
}

typedef struct runner {
    attnc_timings compile; /* of jit */
    attnc_jit *jit;
    attn_block *block;
    attn_cache *cache;
} runner;

static void runner_free(runner *r) {
    attn_cache_free(r->cache);
    attn_block_free(r->block);
    attnc_jit_free(r->jit);
}

/* JIT-compiles the spec with `extra` disabled on top of the user's, and
 * makes a block and a cache of capacity tokens. */
static int runner_new(const bench *b, const char *extra, int64_t capacity, runner *r) {
    const char *off[41];
    int n = b->n_disabled;
    memcpy(off, b->disabled, (size_t)n * sizeof *off);
    if (extra)
        off[n++] = extra;
    attnc_options o = attnc_options_default();
    o.disabled_passes = off;
    o.n_disabled_passes = n;
    o.no_cache = b->no_cache;
    o.cpu = b->cpu;
    o.shard_index = b->shard.shard_index, o.shard_count = b->shard.shard_count;
    attnc_ctx *cx = attnc_ctx_new();
    int rc = compile_report(cx, attnc_jit_compile_file(cx, b->compiled, &o, &r->jit));
    if (rc != EXIT_OK)
        return rc;
    r->compile = attnc_jit_timings(r->jit);
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = b->threads;
    attn_status st;
    if ((st = attn_block_new(attnc_jit_kernels(r->jit), &bo, &r->block)) ||
        (st = attn_block_set_weights(r->block, b->w)) ||
        (st = attn_cache_new(r->block, capacity, &r->cache))) {
        attn_msg m;
        snprintf(m.text, sizeof m.text, "%s", r->block ? attn_block_error(r->block) : "");
        return runtime_error(st, &m);
    }
    return EXIT_OK;
}

/* One forward of ns[i] tokens on each sequence seqs[i], x their rows in
 * turn; prints the cache's error. */
static int forward_all(runner *r, int n, const int32_t *seqs, const int32_t *ns, const float *x,
                       float *y) {
    attn_status st = attn_forward(r->block, r->cache, n, seqs, ns, x, y);
    if (st) {
        attn_msg m;
        snprintf(m.text, sizeof m.text, "%s", attn_cache_error(r->cache));
        return runtime_error(st, &m);
    }
    return EXIT_OK;
}

/* One forward of n tokens of x on seq. */
static int forward(runner *r, int32_t seq, int64_t n, const float *x, float *y) {
    int32_t n32 = (int32_t)n;
    return forward_all(r, 1, &seq, &n32, x, y);
}

/* Cross-attention: the bench's memory into seq (nothing otherwise); its
 * wall time to *secs if not NULL. */
static int set_memory(const bench *b, runner *r, int32_t seq, double *secs) {
    if (!b->memory)
        return EXIT_OK;
    double t0 = now_seconds();
    attn_status st = attn_seq_set_memory(r->cache, seq, b->memory, b->mem);
    if (secs)
        *secs = now_seconds() - t0;
    if (st) {
        attn_msg m;
        snprintf(m.text, sizeof m.text, "%s", attn_cache_error(r->cache));
        return runtime_error(st, &m);
    }
    return EXIT_OK;
}

/* The kernels against the reference: a prefill of min(N, 96) tokens and
 * two decode steps. */
static int check(const bench *b, runner *r, double *err) {
    const attn_config *c = &b->cfg;
    int64_t n = b->decode ? b->cache : b->seq;
    int64_t pre = n < 96 ? n : 96, total = pre + 2, D = c->d_model;
    float *x = random_input(total * D, 11), *y = malloc((size_t)(total * D) * sizeof *y);
    float *ref = malloc((size_t)(total * D) * sizeof *ref);
    attn_ref *rf = NULL;
    attn_msg m = {{0}};
    int32_t seq = -1;
    int rc = x && y && ref ? EXIT_OK : runtime_error(ATTN_E_NOMEM, NULL);
    attn_status st;
    if (rc == EXIT_OK &&
        ((st = attn_ref_new(b->w, b->memory ? b->memory : total, &rf, &m)) ||
         (st = give_inputs(b, NULL, 0, rf, total, &m)) ||
         (b->memory && (st = attn_ref_set_memory(rf, b->memory, b->mem, &m))) ||
         (st = attn_ref_forward(rf, pre, x, ref, &m)) ||
         (st = attn_ref_forward(rf, 1, x + pre * D, ref + pre * D, &m)) ||
         (st = attn_ref_forward(rf, 1, x + (pre + 1) * D, ref + (pre + 1) * D, &m))))
        rc = runtime_error(st, &m);
    if (rc == EXIT_OK && (st = attn_seq_new(r->cache, &seq)))
        rc = runtime_error(st, NULL);
    if (rc == EXIT_OK && (st = give_inputs(b, r->cache, seq, NULL, total, &m)))
        rc = runtime_error(st, &m);
    if (rc == EXIT_OK)
        rc = set_memory(b, r, seq, NULL);
    if (rc == EXIT_OK)
        rc = forward(r, seq, pre, x, y);
    for (int64_t k = pre; rc == EXIT_OK && k < total; k++)
        rc = forward(r, seq, 1, x + k * D, y + k * D);
    if (rc == EXIT_OK) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < total * D; i++) {
            double d = fabs((double)y[i] - ref[i]);
            num = isnan(d) || d > num ? (isnan(d) ? INFINITY : d) : num;
            den = fabs((double)ref[i]) > den ? fabs((double)ref[i]) : den;
        }
        *err = den > 0 ? num / den : num;
        if (!(*err <= tolerance(c))) {
            fprintf(stderr,
                    "attnc: error: bench: %s: the kernels disagree with the reference: relative "
                    "error %.3g over %lld tokens exceeds %.3g; not timing wrong results\n",
                    b->spec, *err, (long long)total, tolerance(c));
            rc = EXIT_INTERNAL;
        }
    }
    if (seq >= 0)
        attn_seq_free(r->cache, seq);
    attn_ref_free(rf);
    free(x);
    free(y);
    free(ref);
    return rc;
}

/* b->batch new sequences, each with the bench's memory and, decoding,
 * the past tokens of x (untimed); with --shared-prefix forks of one
 * sequence holding x's first b->shared tokens (freed after the forks). */
static int fill_batch(const bench *b, runner *r, int32_t *seqs, int64_t past, const float *x,
                      float *y) {
    int rc = EXIT_OK;
    int32_t base = -1;
    for (int i = 0; i < b->batch; i++)
        seqs[i] = -1;
    if (b->shared) {
        attn_msg m;
        attn_status st = attn_seq_new(r->cache, &base);
        if (!st && (st = give_inputs(b, r->cache, base, NULL, b->shared, &m)))
            return runtime_error(st, &m);
        rc = st ? runtime_error(st, NULL) : forward(r, base, b->shared, x, y);
        past -= b->decode ? b->shared : 0, x += b->shared * b->cfg.d_model;
    }
    for (int i = 0; rc == EXIT_OK && i < b->batch; i++) {
        attn_status st =
            b->shared ? attn_seq_fork(r->cache, base, &seqs[i]) : attn_seq_new(r->cache, &seqs[i]);
        rc = st ? runtime_error(st, NULL) : EXIT_OK;
        double mem_secs = 0;
        if (rc == EXIT_OK)
            rc = set_memory(b, r, seqs[i], &mem_secs);
        if (rc == EXIT_OK && b->memory && i == 0)
            fprintf(stderr,
                    "bench: %s: the memory's K/V projections (%lld rows, untimed): %.3f ms\n",
                    b->spec, (long long)b->memory, mem_secs * 1e3);
        attn_msg m;
        if (rc == EXIT_OK && (st = give_inputs(b, r->cache, seqs[i], NULL, past, &m)))
            rc = runtime_error(st, &m);
        if (rc == EXIT_OK && b->decode && past) /* the cache to decode against, not timed */
            rc = forward(r, seqs[i], past, x, y);
    }
    if (base >= 0)
        attn_seq_free(r->cache, base);
    return rc;
}

static void free_batch(const bench *b, runner *r, const int32_t *seqs) {
    for (int i = 0; i < b->batch; i++)
        if (seqs[i] >= 0)
            attn_seq_free(r->cache, seqs[i]);
}

/* Times the warm-up and b->runs calls; times[k] in seconds, bw[k] the
 * read bandwidth (GB/s) measured just before call k. */
static int time_runs(const bench *b, runner *r, const probes *pb, const char *variant,
                     double *times, double *bw) {
    const attn_config *c = &b->cfg;
    /* cross-attention decodes one token against the memory, no cached tokens */
    int64_t past = b->memory ? 0 : b->cache;
    int64_t D = c->d_model, n = b->decode ? past + 1 : b->shared + b->seq,
            S = b->decode ? 1 : b->seq;
    int N = b->batch;
    /* x: one sequence's tokens; xs: the S rows each sequence takes, in turn */
    float *x = random_input(n * D, 5), *xs = N > 1 ? malloc((size_t)(N * S * D) * sizeof *xs) : x;
    float *y = malloc((size_t)((n > N * S ? n : N * S) * D) * sizeof *y);
    int32_t *seqs = malloc((size_t)N * 2 * sizeof *seqs), *ns = seqs ? seqs + N : NULL;
    if (!x || !xs || !y || !seqs) {
        free(x), free(y), free(seqs);
        if (N > 1)
            free(xs);
        return runtime_error(ATTN_E_NOMEM, NULL);
    }
    for (int i = 0; i < N; i++)
        ns[i] = (int32_t)S;
    for (int i = 0; N > 1 && i < N; i++)
        memcpy(xs + (int64_t)i * S * D, x + (n - S) * D, (size_t)(S * D) * sizeof *xs);
    const float *xin = N > 1 ? xs : x + (n - S) * D;
    const attn_kernels *k = attnc_jit_kernels(r->jit);
    int rc = fill_batch(b, r, seqs, past, x, y);
    for (int run = -1; rc == EXIT_OK && run < b->runs; run++) {
        if (run >= 0 && (bw[run] = probe_read(pb, PROBE_RUN_FLOATS)) < 0) {
            rc = read_probe_error();
            break;
        }
        if (b->decode && run >= 0) { /* after the probe, the caches as a decode loop leaves them */
            for (int i = 0; i < N && rc == EXIT_OK; i++) {
                attn_msg m;
                attn_status st = give_inputs(b, r->cache, seqs[i], NULL, n, &m);
                rc = st ? runtime_error(st, &m) : EXIT_OK;
            }
            if (rc == EXIT_OK)
                rc = forward_all(r, N, seqs, ns, xin, y);
            for (int i = 0; i < N; i++)
                attn_seq_truncate(r->cache, seqs[i], past);
            if (rc != EXIT_OK)
                break;
        }
        if (!b->decode && run >= 0 && b->memory) { /* the memory stays */
            for (int i = 0; i < N; i++)
                attn_seq_truncate(r->cache, seqs[i], 0);
        } else if (!b->decode && run >= 0 && b->shared) { /* from the shared tokens */
            for (int i = 0; i < N; i++)
                attn_seq_truncate(r->cache, seqs[i], b->shared);
        } else if (!b->decode && run >= 0) { /* each prefill starts from an empty cache */
            for (int i = 0; i < N; i++) {
                attn_seq_free(r->cache, seqs[i]);
                attn_seq_new(r->cache, &seqs[i]);
            }
        }
        for (int i = 0; i < N && rc == EXIT_OK; i++) { /* the new tokens' inputs, untimed */
            attn_msg m;
            attn_status st = give_inputs(b, r->cache, seqs[i], NULL, n, &m);
            rc = st ? runtime_error(st, &m) : EXIT_OK;
        }
        if (rc != EXIT_OK)
            break;
        attn_cache_profile(r->cache, b->core);
        double t0 = now_seconds();
        rc = forward_all(r, N, seqs, ns, xin, y);
        double dt = now_seconds() - t0;
        for (int i = 0; b->decode && i < N; i++)
            attn_seq_truncate(r->cache, seqs[i], past);
        if (b->core) { /* the batch's side-by-side sequences: one span (attn_cache_profile) */
            uint32_t n_steps;
            const double *sec = attn_cache_step_seconds(r->cache, &n_steps);
            dt = 0;
            for (uint32_t i = 0; i < n_steps; i++)
                if (!is_projection(k->steps[i].name))
                    dt += sec[i];
        }
        if (run >= 0)
            times[run] = dt;
        if (dt > 0.5 || run == b->runs - 1)
            fprintf(stderr, "bench: %s: %s %d/%d: %.3f ms\n", b->spec, variant, run + 1, b->runs,
                    dt * 1e3);
    }
    attn_cache_profile(r->cache, false);
    free_batch(b, r, seqs);
    free(x), free(y), free(seqs);
    if (N > 1)
        free(xs);
    return rc;
}

/* One row: times (seconds) and bw (GB/s) per run, both sorted here;
 * %read is the median of each run's GB/s over the bandwidth read just
 * before it. */
static void report(const bench *b, const roofline *rl, const char *variant, const attnc_timings *ct,
                   double *times, double *bw, bool json, bool first) {
    double flops, bytes;
    work(b, &flops, &bytes);
    double *ratio = times + b->runs; /* the caller's times hold 2 x runs */
    for (int k = 0; k < b->runs; k++)
        ratio[k] = 100 * bytes / times[k] / 1e9 / bw[k];
    stat3 t = stats(times, b->runs), rd = stats(bw, b->runs);
    double gflops = flops / t.median / 1e9, gbps = bytes / t.median / 1e9;
    /* the peak of the arithmetic the kernels run: for compute bf16 where
     * the CPU has them (the code compiled for it uses them) AMX tiles (the
     * projections and the flash prefill) or bf16 dot products (without
     * AMX), else f32 FMAs (the decode core on an AMX CPU: its split kernel
     * runs f32 FMAs on the rounded operands, cg_flash.c says why); for
     * activations q8_0 the block's int8 dot products (its projections) */
    bool amx_decode_core = rl->has_amx && b->core && b->decode;
    bool bf16 = b->cfg.compute == ATTN_DTYPE_BF16 && rl->has_bf16 && !amx_decode_core;
    bool amx = bf16 && rl->has_amx;
    bool int8 = b->cfg.activations == ATTN_DTYPE_Q8_0 && rl->has_int8 && !b->core;
    double peak = int8   ? rl->int8.median
                  : amx  ? rl->amx.median
                  : bf16 ? rl->bf16.median
                         : rl->fma.median;
    double pct_peak = 100 * gflops / peak, pct_read = stats(ratio, b->runs).median;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "spec", b->cfg.name);
        cJSON_AddStringToObject(o, "mode", b->decode ? "decode" : "prefill");
        cJSON_AddStringToObject(o, "part", b->core ? "core" : "block");
        cJSON_AddStringToObject(o, "cpu", b->cpu ? b->cpu : "host");
        cJSON_AddNumberToObject(o, "seq", b->decode ? 1 : (double)b->seq);
        cJSON_AddStringToObject(o, "compute", attn_dtype_name(b->cfg.compute));
        cJSON_AddStringToObject(o, "activations", attn_dtype_name(b->cfg.activations));
        cJSON_AddNumberToObject(o, "cache", b->decode && !b->memory ? (double)b->cache : 0);
        cJSON_AddNumberToObject(o, "memory", (double)b->memory);
        cJSON_AddNumberToObject(o, "batch", b->batch);
        cJSON_AddNumberToObject(o, "shared_prefix", (double)b->shared);
        if (b->cfg.shard_count > 1) {
            char sh[64];
            snprintf(sh, sizeof sh, "%lld/%lld", (long long)b->cfg.shard_index,
                     (long long)b->cfg.shard_count);
            cJSON_AddStringToObject(o, "shard", sh);
        }
        cJSON_AddNumberToObject(o, "threads", b->threads);
        cJSON_AddStringToObject(o, "variant", variant);
        cJSON_AddNumberToObject(o, "ms_median", t.median * 1e3);
        cJSON_AddNumberToObject(o, "ms_min", t.min * 1e3);
        cJSON_AddNumberToObject(o, "ms_max", t.max * 1e3);
        cJSON_AddNumberToObject(o, "flops", flops);
        cJSON_AddNumberToObject(o, "bytes", bytes);
        cJSON_AddNumberToObject(o, "cache_token_bytes", cache_token_bytes(&b->cfg));
        cJSON_AddNumberToObject(o, "gflops", gflops);
        cJSON_AddNumberToObject(o, "gbps", gbps);
        cJSON_AddNumberToObject(o, "peak_gflops", peak);
        cJSON_AddStringToObject(o, "peak_kind",
                                int8   ? "vnni_int8"
                                : amx  ? "amx_bf16"
                                : bf16 ? "bf16_dot"
                                       : "fma");
        cJSON_AddNumberToObject(o, "read_gbps", rd.median);
        cJSON_AddNumberToObject(o, "read_gbps_min", rd.min);
        cJSON_AddNumberToObject(o, "read_gbps_max", rd.max);
        cJSON_AddNumberToObject(o, "pct_peak", pct_peak);
        cJSON_AddNumberToObject(o, "pct_read", pct_read);
        cJSON_AddNumberToObject(o, "compile_ms", ct->total_ms);
        cJSON_AddStringToObject(o, "compile_cache", cache_result_name(ct->cache));
        char *text = cJSON_PrintUnformatted(o);
        if (text)
            puts(text);
        free(text);
        cJSON_Delete(o);
        return;
    }
    if (first)
        printf("%-22s %10s %10s %10s %9s %7s %8s %7s %13s\n", "variant", "ms_median", "ms_min",
               "ms_max", "GFLOP/s", "%peak", "GB/s", "%read", "read GB/s");
    printf("%-22s %10.3f %10.3f %10.3f %9.1f %7.1f %8.2f %7.1f %13.1f\n", variant, t.median * 1e3,
           t.min * 1e3, t.max * 1e3, gflops, pct_peak, gbps, pct_read, rd.median);
    fflush(stdout);
}

/* Compiles, checks and times one variant (extra = a pass disabled). */
static int bench_variant(const bench *b, const probes *pb, const roofline *rl, const char *extra,
                         bool json, bool first) {
    runner r = {0};
    int64_t n = b->memory ? b->memory : b->decode ? b->cache + 1 : b->seq;
    int64_t capacity = (n + b->shared + 2 * b->cfg.kv_block_tokens) * b->batch + 98;
    double err = 0, *times = malloc((size_t)b->runs * 3 * sizeof *times),
           *bw = times ? times + 2 * b->runs : NULL;
    char variant[64];
    snprintf(variant, sizeof variant, extra ? "-%s" : "all passes", extra);
    int rc = times ? runner_new(b, extra, capacity, &r) : runtime_error(ATTN_E_NOMEM, NULL);
    if (rc == EXIT_OK)
        rc = check(b, &r, &err);
    if (rc == EXIT_OK) {
        if (!json)
            fprintf(stderr,
                    "bench: %s: %s: compiled in %.1f ms (kernel cache: %s); checked against the "
                    "reference: relative error %.2g\n",
                    b->spec, variant, r.compile.total_ms, cache_result_name(r.compile.cache), err);
        rc = time_runs(b, &r, pb, variant, times, bw);
    }
    if (rc == EXIT_OK)
        report(b, rl, variant, &r.compile, times, bw, json, first);
    runner_free(&r);
    free(times);
    return rc;
}

/* What bench was asked besides the bench itself. */
typedef struct bench_ask {
    const char *mode, *part, *shard_s, *cache_s;
    bool json, ablation;
    attn_dtype dtype, kv_dtype, compute, activations; /* ATTN_DTYPE_COUNT: the spec's */
} bench_ask;

/* The command line into b and q; EXIT_OK, -1 after --help, or the exit
 * code after the message. */
static int bench_parse(int argc, char **argv, bench *b, bench_ask *q) {
    const char *help = NULL, *seq_s = NULL, *threads_s = NULL, *runs_s = NULL, *json = NULL;
    const char *ablation = NULL, *dtype_s = NULL, *kv_dtype_s = NULL, *no_cache = NULL;
    const char *compute_s = NULL, *activations_s = NULL;
    const char *memory_s = NULL, *batch_s = NULL, *shared_s = NULL, *pos[1];
    const char *doc_len_s = NULL, *prefix_s = NULL;
    q->mode = "prefill", q->part = "block";
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--mode", NULL, true, &q->mode, NULL, 0},
        {"--part", NULL, true, &q->part, NULL, 0},
        {"--seq", NULL, true, &seq_s, NULL, 0},
        {"--cache", NULL, true, &q->cache_s, NULL, 0},
        {"--threads", NULL, true, &threads_s, NULL, 0},
        {"--runs", NULL, true, &runs_s, NULL, 0},
        {"--json", NULL, false, &json, NULL, 0},
        {"--ablation", NULL, false, &ablation, NULL, 0},
        {"--dtype", NULL, true, &dtype_s, NULL, 0},
        {"--kv-dtype", NULL, true, &kv_dtype_s, NULL, 0},
        {"--compute", NULL, true, &compute_s, NULL, 0},
        {"--activations", NULL, true, &activations_s, NULL, 0},
        {"--cpu", NULL, true, &b->cpu, NULL, 0},
        {"--disable-pass", NULL, true, b->disabled, &b->n_disabled, 32},
        {"--no-cache", NULL, false, &no_cache, NULL, 0},
        {"--memory", NULL, true, &memory_s, NULL, 0},
        {"--shard", NULL, true, &q->shard_s, NULL, 0},
        {"--batch", NULL, true, &batch_s, NULL, 0},
        {"--shared-prefix", NULL, true, &shared_s, NULL, 0},
        {"--doc-len", NULL, true, &doc_len_s, NULL, 0},
        {"--prefix", NULL, true, &prefix_s, NULL, 0},
        {0},
    };
    int n_pos;
    if (!parse_opts("bench", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(bench_usage, stdout);
        return -1;
    }
    if (n_pos != 1)
        return usage_error("bench", "expected one SPEC file");
    if (strcmp(q->mode, "prefill") && strcmp(q->mode, "decode"))
        return usage_error("bench", "--mode expects prefill or decode, found '%s'", q->mode);
    if (strcmp(q->part, "core") && strcmp(q->part, "block"))
        return usage_error("bench", "--part expects core or block, found '%s'", q->part);
    b->decode = strcmp(q->mode, "decode") == 0;
    b->core = strcmp(q->part, "core") == 0;
    if (b->decode && seq_s)
        return usage_error("bench",
                           "--seq is for --mode prefill; decode adds one token to --cache");
    if (!b->decode && q->cache_s)
        return usage_error("bench", "--cache is for --mode decode");
    int64_t seq = 2048, cache = 4096, threads = default_threads(), runs = 7, batch = 1, shared = 0,
            doc_len = 256, prefix = 0;
    if ((seq_s && !parse_int("bench", "--seq", seq_s, 1, ATTN_MAX_TOKENS, &seq)) ||
        (q->cache_s &&
         !parse_int("bench", "--cache", q->cache_s, 1, ATTN_MAX_TOKENS - 1, &cache)) ||
        (threads_s && !parse_int("bench", "--threads", threads_s, 1, 1024, &threads)) ||
        (runs_s && !parse_int("bench", "--runs", runs_s, 5, 1000, &runs)) ||
        (memory_s && !parse_int("bench", "--memory", memory_s, 1, ATTN_MAX_TOKENS, &b->memory)) ||
        (batch_s && !parse_int("bench", "--batch", batch_s, 1, 4096, &batch)) ||
        (shared_s &&
         !parse_int("bench", "--shared-prefix", shared_s, 0, ATTN_MAX_TOKENS, &shared)) ||
        (doc_len_s && !parse_int("bench", "--doc-len", doc_len_s, 1, ATTN_MAX_TOKENS, &doc_len)) ||
        (prefix_s && !parse_int("bench", "--prefix", prefix_s, INT32_MIN, INT32_MAX, &prefix)))
        return EXIT_USAGE;
    if (shared && b->decode && shared > cache)
        return usage_error("bench", "--shared-prefix %lld is more than the --cache %lld tokens",
                           (long long)shared, (long long)cache);
    if (shared && memory_s)
        return usage_error("bench", "--shared-prefix shares tokens; a cross-attention sequence "
                                    "attends to its --memory");
    q->dtype = q->kv_dtype = q->compute = q->activations = ATTN_DTYPE_COUNT;
    if (activations_s && strcmp(activations_s, "f32") && strcmp(activations_s, "q8_0"))
        return usage_error("bench", "--activations expects f32 or q8_0, found '%s'", activations_s);
    if (activations_s)
        q->activations = strcmp(activations_s, "q8_0") ? ATTN_DTYPE_F32 : ATTN_DTYPE_Q8_0;
    if (compute_s && strcmp(compute_s, "f32") && strcmp(compute_s, "bf16"))
        return usage_error("bench", "--compute expects f32 or bf16, found '%s'", compute_s);
    if (compute_s)
        q->compute = strcmp(compute_s, "bf16") ? ATTN_DTYPE_F32 : ATTN_DTYPE_BF16;
    if ((dtype_s && !parse_dtype("bench", "--dtype", dtype_s, true, &q->dtype)) ||
        (kv_dtype_s && !parse_dtype("bench", "--kv-dtype", kv_dtype_s, true, &q->kv_dtype)))
        return EXIT_USAGE;
    if (!check_pass_names("bench", b->disabled, b->n_disabled) ||
        (q->shard_s && !parse_shard("bench", q->shard_s, &b->shard)))
        return EXIT_USAGE;
    b->spec = pos[0];
    b->no_cache = no_cache != NULL;
    b->seq = seq;
    b->cache = cache;
    b->threads = (int)threads;
    b->runs = (int)runs;
    b->batch = (int)batch;
    b->shared = shared;
    b->doc_len = doc_len;
    b->prefix = (int32_t)prefix;
    q->json = json != NULL;
    q->ablation = ablation != NULL;
    return EXIT_OK;
}

/* The spec with the dtypes asked for (a copy at tmp when they differ),
 * checked against the tokens asked, sharded, and its random weights and
 * memory. */
static int bench_prepare(bench *b, const bench_ask *q, char *tmp) {
    int rc = load_spec(b->spec, &b->cfg);
    if (rc == EXIT_OK)
        rc = cpu_runs_here("bench", b->cpu);
    if (rc != EXIT_OK)
        return rc;
    bool other_dtypes = q->dtype != ATTN_DTYPE_COUNT || q->kv_dtype != ATTN_DTYPE_COUNT ||
                        q->compute != ATTN_DTYPE_COUNT || q->activations != ATTN_DTYPE_COUNT;
    if (q->compute != ATTN_DTYPE_COUNT)
        b->cfg.compute = q->compute;
    if (q->activations != ATTN_DTYPE_COUNT)
        b->cfg.activations = q->activations;
    if (q->dtype != ATTN_DTYPE_COUNT)
        b->cfg.dtype = q->dtype;
    if (q->kv_dtype != ATTN_DTYPE_COUNT)
        b->cfg.kv_dtype = q->kv_dtype;
    bool cross = b->cfg.memory_dim > 0;
    if (cross && !b->memory) {
        fprintf(stderr,
                "attnc: error: bench: %s has cross_attention: give its memory rows with "
                "--memory N\n",
                b->spec);
        return EXIT_USAGE;
    }
    if (!cross && b->memory)
        return usage_error("bench",
                           "--memory is for cross-attention, and %s has no "
                           "cross_attention",
                           b->spec);
    if (cross && q->cache_s)
        return usage_error("bench", "--cache is for self-attention; cross-attention decodes one "
                                    "token against --memory rows");
    int64_t need = cross ? b->memory : b->decode ? b->cache + 1 : b->seq;
    if (need > b->cfg.kv_max_tokens) {
        fprintf(stderr, "attnc: error: bench: %lld tokens exceed kv_cache.max_tokens %lld of %s\n",
                (long long)need, (long long)b->cfg.kv_max_tokens, b->spec);
        return EXIT_INPUT;
    }
    attn_msg m = {{0}};
    attn_config whole = b->cfg; /* the spec copy below is the whole block's */
    if (b->shard.shard_count > 0 &&
        attn_config_shard(&whole, b->shard.shard_index, b->shard.shard_count, &b->cfg, &m) !=
            ATTN_OK) {
        fprintf(stderr, "attnc: error: %s: --shard %s: %s\n", b->spec, q->shard_s, m.text);
        return EXIT_INPUT;
    }
    attn_status st = attn_weights_random(&b->cfg, 1, &b->w, &m);
    if (st)
        return runtime_error(st, &m);
    if (cross && !(b->mem = random_input(b->memory * b->cfg.memory_dim, 7)))
        return runtime_error(ATTN_E_NOMEM, NULL);
    b->compiled = b->spec;
    if (other_dtypes && (rc = write_spec_copy(&whole, tmp)) != EXIT_OK)
        return rc;
    if (other_dtypes)
        b->compiled = tmp;
    return EXIT_OK;
}

/* The roofline, then the spec's row and, with --ablation, a row per pass
 * disabled. */
static int bench_rows(bench *b, const bench_ask *q) {
    roofline rl;
    probes pb;
    int rc;
    if ((rc = probes_open(b->threads, b->cpu, &pb)) == EXIT_OK &&
        (rc = measure_roofline(&pb, 7, &rl)) == EXIT_OK) {
        if (!q->json) {
            bool cross = b->cfg.memory_dim > 0;
            char against[64] = "";
            if (cross)
                snprintf(against, sizeof against, ", memory %lld rows", (long long)b->memory);
            if (b->batch > 1)
                snprintf(against + strlen(against), sizeof against - strlen(against), ", batch %d",
                         b->batch);
            if (b->shared)
                snprintf(against + strlen(against), sizeof against - strlen(against),
                         ", shared prefix %lld", (long long)b->shared);
            printf("attnc bench %s: mode %s, part %s, %s %lld%s, %d threads, weights %s, cache "
                   "%s (%.0f bytes a token), compute %s, activations %s%s%s\n",
                   b->cfg.name, q->mode, q->part, b->decode ? "cache" : "seq",
                   (long long)(b->decode ? (cross ? 0 : b->cache) : b->seq), against, b->threads,
                   attn_dtype_name(b->cfg.dtype), attn_dtype_name(b->cfg.kv_dtype),
                   cache_token_bytes(&b->cfg), attn_dtype_name(b->cfg.compute),
                   attn_dtype_name(b->cfg.activations), b->cpu ? ", cpu " : "",
                   b->cpu ? b->cpu : "");
            print_roofline_line(&rl);
        }
        rc = bench_variant(b, &pb, &rl, NULL, q->json, true);
    }
    for (int i = 0; rc == EXIT_OK && q->ablation && attnc_pass_name(i); i++) {
        const char *p = attnc_pass_name(i);
        bool off = strcmp(p, "dce") == 0;
        for (int j = 0; j < b->n_disabled; j++)
            off |= strcmp(b->disabled[j], p) == 0;
        if (!off)
            rc = bench_variant(b, &pb, &rl, p, q->json, false);
    }
    probes_close(&pb);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench b = {0};
    bench_ask q = {0};
    char tmp[] = "/tmp/attnc-bench-XXXXXX.yaml"; /* the spec with the dtypes asked for */
    int rc = bench_parse(argc, argv, &b, &q);
    if (rc != EXIT_OK)
        return rc < 0 ? EXIT_OK : rc;
    if ((rc = bench_prepare(&b, &q, tmp)) == EXIT_OK)
        rc = bench_rows(&b, &q);
    attn_weights_free(b.w);
    free(b.mem);
    if (b.compiled && b.compiled != b.spec)
        remove(tmp);
    return rc;
}
