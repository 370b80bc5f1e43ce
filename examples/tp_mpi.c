/* tp_mpi.c: tensor parallelism over MPI. Each of N ranks compiles shard
 * rank/N of SPEC's heads (attnc_options.shard_*), loads its slices of
 * the whole block's checkpoint W, and runs a prefill and decode steps;
 * after every forward call one MPI_Allreduce (sum, in place) turns the
 * ranks' partial outputs into the block's output. Rank 0 then runs the
 * whole block alone on the same tokens and prints the largest relative
 * error of the summed outputs (exit 3 above the cache dtype's tolerance).
 *
 * Usage: mpirun -np N tp_mpi SPEC W [--prompt P] [--steps S] [--threads T]
 *                                   [--bench-prefill P] [--bench-decode C] [--runs R]
 * --bench-prefill P: also time prefills of P tokens; --bench-decode C: time
 * decode steps on a sequence of C tokens (medians of R runs, timed on
 * rank 0: the forward call from a barrier, then its allreduce from
 * another). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

typedef struct rank_block {
    attnc_jit *jit;
    attn_block *block;
    attn_cache *cache;
    int32_t seq;
} rank_block;

static int rank = 0;

static int die(const char *what, const char *why) {
    fprintf(stderr, "tp_mpi (rank %d): %s: %s\n", rank, what, why);
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
}

/* Shard index of count (0 of 0: the whole block) of spec, its weights
 * from the whole block's checkpoint, a cache of capacity tokens. */
static rank_block open_block(const char *spec, const char *weights, int64_t index, int64_t count,
                             int threads, int64_t capacity) {
    rank_block r = {0};
    attnc_options o = attnc_options_default();
    o.shard_index = index, o.shard_count = count;
    attnc_ctx *ctx = attnc_ctx_new();
    char err[2048];
    attnc_status cst = attnc_jit_compile_file(ctx, spec, &o, &r.jit);
    attnc_diag_text(ctx, err, sizeof err);
    attnc_ctx_free(ctx);
    if (cst != ATTNC_OK)
        die("compile", err[0] ? err : attnc_status_str(cst));
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = threads;
    bo.shard_index = index, bo.shard_count = count;
    attn_status st = attn_block_new(attnc_jit_kernels(r.jit), &bo, &r.block);
    if (st)
        die("block", attn_status_str(st));
    if (attn_block_load(r.block, weights, NULL, 0))
        die(weights, attn_block_error(r.block));
    if ((st = attn_cache_new(r.block, capacity, &r.cache)) || (st = attn_seq_new(r.cache, &r.seq)))
        die("cache", attn_status_str(st));
    return r;
}

static void close_block(rank_block *r) {
    attn_cache_free(r->cache);
    attn_block_free(r->block);
    attnc_jit_free(r->jit);
}

/* One forward call of n tokens, then (sharded) the allreduce of y. */
static void forward(rank_block *r, int64_t n, int64_t d_model, const float *x, float *y,
                    bool reduce) {
    int32_t nt = (int32_t)n;
    if (attn_forward(r->block, r->cache, 1, &r->seq, &nt, x, y))
        die("forward", attn_cache_error(r->cache));
    if (reduce)
        MPI_Allreduce(MPI_IN_PLACE, y, (int)(n * d_model), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median ms of runs calls of n tokens (decode: the sequence truncated
 * back to len after each), with their allreduce; *reduce_ms the median of
 * the allreduce alone (after a barrier: the wire's cost, not the wait for
 * the slowest rank). */
static double time_calls(rank_block *r, int64_t len, int64_t n, int64_t d_model, const float *x,
                         float *y, bool reduce, int runs, double *reduce_ms) {
    double *t = malloc((size_t)runs * sizeof *t), *tr = malloc((size_t)runs * sizeof *tr);
    for (int i = 0; i <= runs; i++) { /* the first: a warm-up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        forward(r, n, d_model, x, y, false); /* its allreduce below, timed apart */
        double t1 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        double t2 = MPI_Wtime();
        if (reduce)
            MPI_Allreduce(MPI_IN_PLACE, y, (int)(n * d_model), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (i)
            t[i - 1] = (t1 - t0) * 1e3, tr[i - 1] = (MPI_Wtime() - t2) * 1e3;
        if (attn_seq_truncate(r->cache, r->seq, len))
            die("truncate", attn_cache_error(r->cache));
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    qsort(tr, (size_t)runs, sizeof *tr, cmp_double);
    double median = t[runs / 2];
    *reduce_ms = tr[runs / 2];
    free(t), free(tr);
    return median;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np N tp_mpi SPEC W [--prompt P] [--steps S] "
                            "[--threads T] [--bench-prefill P] [--bench-decode C] [--runs R]\n");
        MPI_Finalize();
        return 1;
    }
    int64_t prompt = 13, steps = 4, bench_prefill = 0, bench_decode = 0;
    int threads = 1, runs = 7;
    for (int i = 3; i + 1 < argc; i += 2) {
        long long v = atoll(argv[i + 1]);
        if (strcmp(argv[i], "--prompt") == 0)
            prompt = v;
        else if (strcmp(argv[i], "--steps") == 0)
            steps = v;
        else if (strcmp(argv[i], "--threads") == 0)
            threads = (int)v;
        else if (strcmp(argv[i], "--bench-prefill") == 0)
            bench_prefill = v;
        else if (strcmp(argv[i], "--bench-decode") == 0)
            bench_decode = v;
        else if (strcmp(argv[i], "--runs") == 0)
            runs = (int)v;
        else
            return die("usage", argv[i]);
    }
    if (prompt < 1 || steps < 0 || threads < 1 || runs < 1 || bench_prefill < 0 || bench_decode < 0)
        return die("usage", "counts must be positive");
    const char *spec = argv[1], *weights = argv[2];
    attn_config cfg;
    attnc_ctx *ctx = attnc_ctx_new();
    if (!ctx || attnc_spec_load_file(ctx, spec, &cfg) != ATTNC_OK)
        return die(spec, "cannot load the spec (attnc check SPEC says why)");
    attnc_ctx_free(ctx);
    int64_t D = cfg.d_model, T = prompt + steps;
    int64_t longest = T > bench_prefill ? T : bench_prefill; /* tokens of x, the cache's */
    longest = longest > bench_decode + 1 ? longest : bench_decode + 1;
    int64_t tokens = longest;
    float *x = malloc((size_t)(tokens * D) * sizeof *x);
    float *y = malloc((size_t)(tokens * D) * sizeof *y);
    float *whole = malloc((size_t)(T * D) * sizeof *whole);
    if (!x || !y || !whole)
        return die("memory", "out of memory");
    uint64_t seed = 3; /* the same tokens on every rank */
    attn_random_uniform(&seed, x, (size_t)(tokens * D), sqrt(3.0));

    bool sharded = size > 1;
    rank_block r =
        open_block(spec, weights, sharded ? rank : 0, sharded ? size : 0, threads, longest);
    forward(&r, prompt, D, x, y, sharded);
    for (int64_t t = prompt; t < T; t++)
        forward(&r, 1, D, x + t * D, y + t * D, sharded);
    int rc = 0;
    if (rank == 0) { /* the whole block alone, on the same tokens */
        rank_block w = open_block(spec, weights, 0, 0, threads, T);
        forward(&w, prompt, D, x, whole, false);
        for (int64_t t = prompt; t < T; t++)
            forward(&w, 1, D, x + t * D, whole + t * D, false);
        close_block(&w);
        double num = 0, den = 0;
        for (int64_t e = 0; e < T * D; e++) {
            double d = fabs((double)y[e] - whole[e]);
            num = d > num || isnan(d) ? (isnan(d) ? INFINITY : d) : num;
            den = fabs((double)whole[e]) > den ? fabs((double)whole[e]) : den;
        }
        double err = den > 0 ? num / den : num;
        double tol = cfg.kv_dtype == ATTN_DTYPE_F32 ? 1e-4 : 2e-2;
        printf("tp_mpi: %s, %d rank%s x %d thread%s: prefill %lld + %lld decode steps, "
               "max relative error against the whole block %.3g (tolerance %g)\n",
               cfg.name, size, size > 1 ? "s" : "", threads, threads > 1 ? "s" : "",
               (long long)prompt, (long long)steps, err, tol);
        rc = err <= tol ? 0 : 3;
    }
    if (bench_prefill || bench_decode) {
        if (attn_seq_truncate(r.cache, r.seq, 0))
            die("truncate", attn_cache_error(r.cache));
        double prefill_ms = 0, decode_ms = 0, prefill_ar = 0, decode_ar = 0;
        if (bench_prefill)
            prefill_ms = time_calls(&r, 0, bench_prefill, D, x, y, sharded, runs, &prefill_ar);
        if (bench_decode) {
            for (int64_t done = 0; done < bench_decode; done += 512) /* fill the cache */
                forward(&r, bench_decode - done < 512 ? bench_decode - done : 512, D, x + done * D,
                        y, false);
            decode_ms = time_calls(&r, bench_decode, 1, D, x + bench_decode * D, y, sharded, runs,
                                   &decode_ar);
        }
        if (rank == 0)
            printf("tp_mpi bench: %s, %d rank%s x %d thread%s, median of %d: prefill %lld "
                   "tokens %.3f ms (its allreduce %.3f ms), decode at %lld %.3f ms (%.3f ms)\n",
                   cfg.name, size, size > 1 ? "s" : "", threads, threads > 1 ? "s" : "", runs,
                   (long long)bench_prefill, prefill_ms + prefill_ar, prefill_ar,
                   (long long)bench_decode, decode_ms + decode_ar, decode_ar);
    }
    close_block(&r);
    free(x), free(y), free(whole);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
