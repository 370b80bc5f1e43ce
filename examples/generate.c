/* generate.c: the public APIs as an inference engine uses them. Compiles a
 * spec with the JIT, loads weights, prefills a prompt, forks it into four
 * sequences, decodes 64 steps with all four advanced by one batched call
 * each step (each sequence gets its own inputs), rolls one back and decodes
 * again, prints tokens/s, and checks every output against the reference
 * engine. Usage: generate SPEC WEIGHTS.safetensors [PROMPT_TOKENS] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnc.h"

enum { N_SEQ = 4, STEPS = 64, ROLLBACK = 16, REDO = 48 };

typedef struct history {
    float *x, *y; /* every input and output of the sequence, in order */
    int64_t len;
} history;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* max |y - reference| / max |reference| over a sequence's whole history. */
static double check(const attn_weights *w, const history *h) {
    int64_t D = w->cfg.d_model;
    float *want = malloc((size_t)(h->len * D) * sizeof *want);
    attn_ref *r = NULL;
    double err = INFINITY;
    if (want && attn_ref_new(w, h->len, &r, NULL) == ATTN_OK &&
        attn_ref_forward(r, h->len, h->x, want, NULL) == ATTN_OK) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < h->len * D; i++) {
            num = fmax(num, fabs((double)h->y[i] - want[i]));
            den = fmax(den, fabs((double)want[i]));
        }
        err = num / (den > 0 ? den : 1);
    }
    attn_ref_free(r);
    free(want);
    return err;
}

static int die(const char *what, const char *why) {
    fprintf(stderr, "generate: %s: %s\n", what, why);
    return 2;
}

/* STEPS batched decode steps, each advancing every sequence by a token
 * (their histories too); *secs their wall time. Nonzero on failure. */
static int decode_steps(attn_block *b, attn_cache *c, const int32_t *seq, history *h, int64_t D,
                        double *secs) {
    float *xb = malloc((size_t)(N_SEQ * D) * sizeof *xb),
          *yb = malloc((size_t)(N_SEQ * D) * sizeof *yb);
    int32_t ones[N_SEQ] = {1, 1, 1, 1};
    int rc = !xb || !yb;
    double t0 = now();
    for (int step = 0; !rc && step < STEPS; step++) {
        for (int s = 0; s < N_SEQ; s++) {
            uint64_t r = 1000003u * (uint64_t)(s + 1) + (uint64_t)step;
            attn_random_uniform(&r, xb + s * D, (size_t)D, 1.7);
        }
        if ((rc = attn_forward(b, c, N_SEQ, seq, ones, xb, yb) != ATTN_OK))
            break;
        for (int s = 0; s < N_SEQ; s++) {
            memcpy(h[s].x + h[s].len * D, xb + s * D, (size_t)D * sizeof(float));
            memcpy(h[s].y + h[s].len * D, yb + s * D, (size_t)D * sizeof(float));
            h[s].len++;
        }
    }
    *secs = now() - t0;
    free(xb);
    free(yb);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: generate SPEC WEIGHTS.safetensors [PROMPT_TOKENS]\n");
        return 1;
    }
    int64_t prompt = argc > 3 ? atoll(argv[3]) : 32;
    if (prompt < 1 || prompt > 4096)
        return die("PROMPT_TOKENS", "expected 1..4096");

    attnc_jit *jit = NULL;
    attnc_ctx *ctx = attnc_ctx_new();
    char err[2048];
    attnc_status cst = attnc_jit_compile_file(ctx, argv[1], NULL, &jit);
    attnc_diag_text(ctx, err, sizeof err); /* every diagnostic, file:line:col */
    attnc_ctx_free(ctx);
    if (cst != ATTNC_OK)
        return die(argv[1], err[0] ? err : attnc_status_str(cst));
    const attn_kernels *k = attnc_jit_kernels(jit);
    const attn_config *cfg = &k->config;
    int64_t D = cfg->d_model, longest = prompt + STEPS;
    if (longest > cfg->kv_max_tokens)
        return die(argv[1], "kv_cache.max_tokens is too small for the prompt and 64 steps");

    attn_block *b = NULL;
    attn_cache *c = NULL;
    attn_weights *w = NULL;
    attn_msg m = {{0}};
    if (attn_block_new(k, NULL, &b) != ATTN_OK)
        return die("attn_block_new", "the kernel table was refused");
    if (attn_block_load_safetensors(b, argv[2], NULL) != ATTN_OK)
        return die(argv[2], attn_block_error(b));
    /* the reference engine reads the same file */
    if (attn_weights_load(cfg, argv[2], NULL, &w, &m) != ATTN_OK)
        return die(argv[2], m.text);
    /* sequences take whole blocks: each of the four may hold every block
     * of the longest sequence, plus its copy of the prompt's last, partly
     * filled block (copied when a fork first appends to it) */
    int64_t bt = cfg->kv_block_tokens, blocks = N_SEQ * ((longest + bt - 1) / bt + 1);
    if (attn_cache_new(b, blocks * bt, &c) != ATTN_OK)
        return die("attn_cache_new", "out of memory");

    history h[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        h[s].x = malloc((size_t)(longest * D) * sizeof(float));
        h[s].y = malloc((size_t)(longest * D) * sizeof(float));
        if (!h[s].x || !h[s].y)
            return die("histories", "out of memory");
    }
    uint64_t rng = 1;
    attn_random_uniform(&rng, h[0].x, (size_t)(prompt * D), 1.7);

    /* prefill once, then fork: the prompt's blocks are shared, not copied */
    int32_t seq[N_SEQ], n_prompt = (int32_t)prompt;
    if (attn_seq_new(c, &seq[0]) || attn_forward(b, c, 1, &seq[0], &n_prompt, h[0].x, h[0].y))
        return die("prefill", attn_cache_error(c));
    h[0].len = prompt;
    for (int s = 1; s < N_SEQ; s++) {
        if (attn_seq_fork(c, seq[0], &seq[s]))
            return die("fork", attn_cache_error(c));
        memcpy(h[s].x, h[0].x, (size_t)(prompt * D) * sizeof(float));
        memcpy(h[s].y, h[0].y, (size_t)(prompt * D) * sizeof(float));
        h[s].len = prompt;
    }
    attn_cache_stats after_fork = attn_cache_get_stats(c);

    /* decode: one batched call per step advances all four sequences */
    double secs;
    if (decode_steps(b, c, seq, h, D, &secs))
        return die("decode", attn_cache_error(c));
    /* roll the last sequence back 16 tokens (rejected speculation) and
     * decode 48 different ones */
    history *last = &h[N_SEQ - 1];
    if (attn_seq_truncate(c, seq[N_SEQ - 1], last->len - ROLLBACK))
        return die("truncate", attn_cache_error(c));
    last->len -= ROLLBACK;
    for (int step = 0; step < REDO && last->len < longest; step++) {
        uint64_t r = 777u + (uint64_t)step;
        attn_random_uniform(&r, last->x + last->len * D, (size_t)D, 1.7);
        int32_t one = 1;
        if (attn_forward(b, c, 1, &seq[N_SEQ - 1], &one, last->x + last->len * D,
                         last->y + last->len * D))
            return die("re-decode", attn_cache_error(c));
        last->len++;
    }

    double worst = 0;
    for (int s = 0; s < N_SEQ; s++)
        worst = fmax(worst, check(w, &h[s]));
    attn_cache_stats end = attn_cache_get_stats(c);
    printf("%s: prompt %lld tokens, forked into %d (blocks used after fork: %lld), %d batched "
           "decode steps: %.0f tokens/s; truncated one by %d and decoded %d more; blocks used "
           "%lld of %lld; max relative difference to the reference %.3g\n",
           cfg->name, (long long)prompt, N_SEQ, (long long)after_fork.blocks_used, STEPS,
           N_SEQ * STEPS / secs, ROLLBACK, REDO, (long long)end.blocks_used,
           (long long)end.blocks_total, worst);

    for (int s = 0; s < N_SEQ; s++) {
        attn_seq_free(c, seq[s]);
        free(h[s].x);
        free(h[s].y);
    }
    attn_cache_free(c);
    attn_weights_free(w);
    attn_block_free(b);
    attnc_jit_free(jit);
    return worst <= 1e-4 ? 0 : 3;
}
