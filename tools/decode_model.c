/* decode_model.c: the reads and FMAs of one-token split decode attention
 * (compiler/src/codegen/cg_split.c) and nothing else: how fast this CPU
 * does that work at all, to set beside `attnc bench --mode decode --part
 * core` (which also runs the softmax, the bookkeeping and the merge).
 *
 * The cache is f16 and laid out as the runtime keeps it (attn_kernels.h):
 * blocks of 16 tokens, K [block][8 K/V heads x 128 columns][16 tokens],
 * V [block][16 tokens][8 x 128], llama3_8b's K/V heads. Per 64-byte line
 * of K or V: two F16C conversions and 8 FMAs whose other operand is
 * broadcast from memory, as the kernel's 4 query rows per K/V head do.
 * Block by block, K/V head by K/V head (its K, then its V across the 16
 * token rows), with the next block's lines prefetched into L2 one per
 * line between the loads (head h: its K, and the V token rows 2h and
 * 2h + 1), as the kernel does. Threads take consecutive runs of blocks.
 * Before each run every thread reads its part of 256 MiB, as the bench
 * does, and the run's GB/s is taken over that read.
 *
 * The cache holds 0 and 1 and the broadcast operand is 1, so the FMAs'
 * sum is exact: it is checked (exit 1 if wrong). x86-64 with AVX-512F
 * and F16C only (exit 77 elsewhere, ctest's skip). */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum {
    HEADS = 8,      /* K/V heads */
    HEAD_DIM = 128, /* columns per head */
    TOKENS = 16,    /* tokens per block: one 16-lane tile */
    LINE = 64,
    MAX_CACHE = 1 << 17, /* keeps every lane's sum below 2^24: exact in f32 */
    MAX_RUNS = 1000
};
#define BLOCK_BYTES ((size_t)HEADS * HEAD_DIM * TOKENS * 2)
#define HEAD_K_BYTES ((size_t)HEAD_DIM * TOKENS * 2) /* one head's K in a block */
#define ROW_BYTES ((size_t)HEADS * HEAD_DIM * 2)     /* one token's V, all heads */
#define HEAD_V_BYTES ((size_t)HEAD_DIM * 2)          /* one token's V, one head */
#define PROBE_BYTES ((size_t)256 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

#define TARGET __attribute__((target("avx512f,f16c")))

static const float ones[4] = {1, 1, 1, 1};

/* One line at l: 2 x 16 f16 values, each times 4 query values broadcast
 * from memory (reloaded per line: the optimizer sees a new pointer) into
 * 8 sums. */
TARGET static inline void line(const char *l, __m512 *acc) {
    const float *q = ones;
    __asm__("" : "+r"(q));
    __m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)l));
    __m512 k1 = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(l + 32)));
    /* written out: a loop kept the sums in memory */
    acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(q[0]), k0, acc[0]);
    acc[1] = _mm512_fmadd_ps(_mm512_set1_ps(q[1]), k0, acc[1]);
    acc[2] = _mm512_fmadd_ps(_mm512_set1_ps(q[2]), k0, acc[2]);
    acc[3] = _mm512_fmadd_ps(_mm512_set1_ps(q[3]), k0, acc[3]);
    acc[4] = _mm512_fmadd_ps(_mm512_set1_ps(q[0]), k1, acc[4]);
    acc[5] = _mm512_fmadd_ps(_mm512_set1_ps(q[1]), k1, acc[5]);
    acc[6] = _mm512_fmadd_ps(_mm512_set1_ps(q[2]), k1, acc[6]);
    acc[7] = _mm512_fmadd_ps(_mm512_set1_ps(q[3]), k1, acc[7]);
}

/* Blocks [b0, b1) of K and V (block b1 must exist: it is prefetched);
 * returns the sum of all FMAs. */
TARGET static double stream(const char *k, const char *v, int64_t b0, int64_t b1) {
    __m512 acc[8];
    for (int i = 0; i < 8; i++)
        acc[i] = _mm512_setzero_ps();
    const int k_lines = (int)(HEAD_K_BYTES / LINE), v_lines = (int)(HEAD_V_BYTES / LINE);
    for (int64_t b = b0; b < b1; b++) {
        const char *kb = k + (size_t)b * BLOCK_BYTES, *vb = v + (size_t)b * BLOCK_BYTES;
        for (int h = 0; h < HEADS; h++) {
            const char *kh = kb + h * HEAD_K_BYTES, *kn = kh + BLOCK_BYTES;
            for (int i = 0; i < k_lines; i++) {
                _mm_prefetch(kn + i * LINE, _MM_HINT_T1);
                line(kh + i * LINE, acc);
            }
            /* the next block's token rows 2h and 2h + 1, in memory order */
            const char *vn = vb + BLOCK_BYTES + (size_t)(TOKENS / HEADS * h) * ROW_BYTES;
            for (int j = 0; j < TOKENS; j++)
                for (int i = 0; i < v_lines; i++) {
                    _mm_prefetch(vn + (j * v_lines + i) * LINE, _MM_HINT_T1);
                    line(vb + j * ROW_BYTES + h * HEAD_V_BYTES + i * LINE, acc);
                }
        }
    }
    double sum = 0;
    for (int i = 0; i < 8; i++) {
        float lanes[16];
        _mm512_storeu_ps(lanes, acc[i]);
        for (int l = 0; l < 16; l++)
            sum += lanes[l];
    }
    return sum;
}

/* Reads n floats at p with 512-bit loads; returns their sum. Four sums
 * written out, as in line(): a loop over them kept them in memory. */
TARGET static double read_floats(const float *p, size_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_loadu_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_loadu_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static void *alloc_huge(size_t bytes) {
    size_t whole = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, whole))
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, whole, MADV_HUGEPAGE);
#endif
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

static int usage(const char *msg) {
    fprintf(stderr,
            "decode_model: error: %s\n"
            "usage: decode_model [--cache N] [--runs N] [--threads N]\n"
            "  --cache N    tokens in the f16 cache, a multiple of 16 (default 4096, at most %d)\n"
            "  --runs N     timed runs, 1 to %d (default 15)\n"
            "  --threads N  1 to 1024 (default: OpenMP's, OMP_NUM_THREADS or all cores)\n",
            msg, MAX_CACHE, MAX_RUNS);
    return 2;
}

int main(int argc, char **argv) {
    struct {
        const char *name;
        long value, max;
    } opt[] = {{"--cache", 4096, MAX_CACHE},
               {"--runs", 15, MAX_RUNS},
               {"--threads", omp_get_max_threads(), 1024}};
    char msg[160];
    for (int i = 1; i < argc; i += 2) {
        int o = 0;
        while (o < 3 && strcmp(argv[i], opt[o].name))
            o++;
        if (o == 3) {
            snprintf(msg, sizeof msg, "unknown option '%.40s'", argv[i]);
            return usage(msg);
        }
        char *end = NULL;
        long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
        if (i + 1 == argc || !*argv[i + 1] || *end || v < 1 || v > opt[o].max) {
            snprintf(msg, sizeof msg, "%s expects a number from 1 to %ld", opt[o].name, opt[o].max);
            return usage(msg);
        }
        opt[o].value = v;
    }
    long cache = opt[0].value, runs = opt[1].value, threads = opt[2].value;
    if (cache % TOKENS) {
        snprintf(msg, sizeof msg, "--cache must be a multiple of 16, not %ld", cache);
        return usage(msg);
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("f16c")) {
        fprintf(stderr, "decode_model: this CPU lacks AVX-512F or F16C; nothing measured\n");
        return 77;
    }

    int64_t blocks = cache / TOKENS;
    size_t kv_bytes = (size_t)(blocks + 1) * BLOCK_BYTES; /* + the block prefetched past the end */
    uint16_t *k = alloc_huge(kv_bytes), *v = alloc_huge(kv_bytes);
    float *probe = alloc_huge(PROBE_BYTES);
    double *ms = malloc((size_t)runs * sizeof *ms), *pct = malloc((size_t)runs * sizeof *pct),
           *read = malloc((size_t)runs * sizeof *read);
    int rc = 0;
    if (!k || !v || !probe || !ms || !pct || !read) {
        fprintf(stderr, "decode_model: error: out of memory\n");
        rc = 1;
        goto done;
    }
    /* 0 or 1 (f16 0x3c00); the block past the end holds zeros */
    double want = 0;
    size_t n16 = kv_bytes / 2, used = (size_t)blocks * BLOCK_BYTES / 2;
    for (size_t i = 0; i < n16; i++) {
        k[i] = i < used && i * 7 % 3 == 0 ? 0x3c00 : 0;
        v[i] = i < used && i * 5 % 4 == 1 ? 0x3c00 : 0;
        want += 4.0 * ((k[i] != 0) + (v[i] != 0));
    }
    size_t probe_n = PROBE_BYTES / sizeof(float);
    for (size_t i = 0; i < probe_n; i++)
        probe[i] = 1;

    int wrong = 0, team = 0;
    for (long r = -1; r < runs && !wrong; r++) { /* run -1 warms up */
        double t0 = 0, t1 = 0, t2 = 0, got = 0, seen = 0;
#pragma omp parallel num_threads((int)threads) reduction(+ : got, seen)
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t lo = probe_n / 64 * (size_t)t / (size_t)nt * 64,
                   hi = probe_n / 64 * (size_t)(t + 1) / (size_t)nt * 64;
#pragma omp barrier
#pragma omp master
            {
                team = nt;
                t0 = omp_get_wtime();
            }
            seen += read_floats(probe + lo, hi - lo);
#pragma omp barrier
#pragma omp master
            t1 = omp_get_wtime();
#pragma omp barrier
            got += stream((const char *)k, (const char *)v, blocks * t / nt, blocks * (t + 1) / nt);
#pragma omp barrier
#pragma omp master
            t2 = omp_get_wtime();
        }
        wrong = got != want || seen != (double)(probe_n / 64 * 64);
        if (r >= 0) {
            ms[r] = (t2 - t1) * 1e3;
            read[r] = (double)PROBE_BYTES / (t1 - t0) / 1e9;
            pct[r] = 2.0 * (double)blocks * BLOCK_BYTES / (t2 - t1) / 1e9 / read[r] * 100;
        }
    }
    if (wrong) {
        fprintf(stderr, "decode_model: error: the sums are off: the model did not do its work\n");
        rc = 1;
        goto done;
    }
    double ms_min = ms[0], ms_max = ms[0];
    for (long r = 1; r < runs; r++) {
        ms_min = ms[r] < ms_min ? ms[r] : ms_min;
        ms_max = ms[r] > ms_max ? ms[r] : ms_max;
    }
    double m = median(ms, (int)runs);
    printf(
        "decode model: cache %ld, %d threads: %.3f ms (%.3f-%.3f), %.1f GB/s, %.1f%% of the read "
        "(%.1f GB/s before each run, median)\n",
        cache, team, m, ms_min, ms_max, 2.0 * (double)blocks * BLOCK_BYTES / m / 1e6,
        median(pct, (int)runs), median(read, (int)runs));
done:
    free(ms);
    free(pct);
    free(read);
    free(probe);
    free(k);
    free(v);
    return rc;
}
