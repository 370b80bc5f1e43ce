/* test_concurrency.c: what may run at once does, correctly: two blocks'
 * forwards on two threads, two caches sharing one block on two threads
 * (each publishing a block and finding it again: the prefix cache),
 * two JIT compiles on two threads, two reference
 * engines on two threads. Results must equal the same work done one after
 * the other. Built and run under ThreadSanitizer by scripts/test (with
 * OMP_NUM_THREADS=1: libgomp itself is not instrumented). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

#define T_TOKENS 9

typedef struct job {
    const char *spec;
    attn_block *block;    /* shared by both jobs, or NULL: a block of its own */
    const attnc_jit *jit; /* shared, or NULL: compile in the thread */
    const attn_weights *w;
    const float *x;
    float *y;
    int rounds;
    bool reference;
    int failures;
} job;

static void run_one(job *j, const attn_kernels *k) {
    int64_t D = j->w->cfg.d_model;
    if (j->reference) {
        attn_ref *r;
        if (attn_ref_new(j->w, T_TOKENS, &r, NULL) ||
            attn_ref_forward(r, T_TOKENS, j->x, j->y, NULL))
            j->failures++;
        attn_ref_free(r);
        return;
    }
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = 1;
    attn_block *b = j->block;
    attn_cache *c = NULL;
    int32_t s, t, first = 4, rest = T_TOKENS - 4;
    uint64_t key = 7; /* the first block (4 tokens) published, found again by t */
    int64_t got = 0;
    if ((!j->block && (attn_block_new(k, &bo, &b) || attn_block_set_weights(b, j->w))) ||
        attn_cache_new(b, 2 * T_TOKENS, &c) || attn_seq_new(c, &s) ||
        attn_forward(b, c, 1, &s, &first, j->x, j->y) || attn_cache_publish(c, s, 1, &key) ||
        attn_seq_free(c, s) || attn_seq_from_prefix(c, 1, &key, &t, &got) || got != 4 ||
        attn_forward(b, c, 1, &t, &rest, j->x + 4 * D, j->y + 4 * D))
        j->failures++;
    attn_cache_free(c);
    if (!j->block)
        attn_block_free(b);
}

static void *worker(void *p) {
    job *j = p;
    for (int r = 0; r < j->rounds; r++) {
        if (j->jit) {
            run_one(j, attnc_jit_kernels(j->jit));
        } else if (j->reference) {
            run_one(j, NULL);
        } else {
            attnc_jit *jit = NULL;
            if (attnc_jit_compile_file(NULL, j->spec, NULL, &jit) != ATTNC_OK) {
                j->failures++;
                continue;
            }
            run_one(j, attnc_jit_kernels(jit));
            attnc_jit_free(jit);
        }
    }
    return NULL;
}

typedef struct fixture {
    char *dir;
    char spec[2][1024];
    attn_weights *w[2];
    float *x[2], *want[2], *y[2];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = tmpdir_new();
    const char *text[2] = {
        "name: conc_a\nheads: 6\nkv_groups: 2\nhead_dim: 16\nd_model: 40\nrope: {}\n"
        "kv_cache: {block_tokens: 4}\n",
        "name: conc_b\nheads: 4\nhead_dim: 32\nd_model: 24\nsoftcap: 20\nsliding_window: 5\n"
        "rope: {style: interleaved, rotary_dim: 16}\nqkv_bias: true\nkv_cache: {block_tokens: 4}\n",
    };
    for (int i = 0; i < 2; i++) {
        snprintf(f->spec[i], sizeof f->spec[i], "%s", path_in(f->dir, i ? "b.yaml" : "a.yaml"));
        write_file(f->spec[i], text[i], strlen(text[i]));
        attnc_ctx *ctx = attnc_ctx_new();
        attn_config c;
        assert_int_equal(attnc_spec_load_file(ctx, f->spec[i], &c), ATTNC_OK);
        attnc_ctx_free(ctx);
        assert_int_equal(attn_weights_random(&c, (uint64_t)i + 1, &f->w[i], NULL), ATTN_OK);
        size_t n = (size_t)(T_TOKENS * c.d_model);
        f->x[i] = malloc(n * sizeof(float));
        f->y[i] = malloc(n * sizeof(float));
        f->want[i] = malloc(n * sizeof(float));
        uint64_t s = (uint64_t)i + 10;
        attn_random_uniform(&s, f->x[i], n, 1.0);
        attn_ref *r;
        assert_int_equal(attn_ref_new(f->w[i], T_TOKENS, &r, NULL), ATTN_OK);
        assert_int_equal(attn_ref_forward(r, T_TOKENS, f->x[i], f->want[i], NULL), ATTN_OK);
        attn_ref_free(r);
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    for (int i = 0; i < 2; i++) {
        attn_weights_free(f->w[i]);
        free(f->x[i]);
        free(f->y[i]);
        free(f->want[i]);
    }
    tmpdir_remove(f->dir);
    free(f);
    return 0;
}

static void run_pair(fixture *f, job jobs[2]) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, &jobs[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(jobs[i].failures, 0);
        double e = rel_err(f->y[i], f->want[i], (size_t)(T_TOKENS * f->w[i]->cfg.d_model));
        if (!(e <= 1e-4))
            fail_msg("job %d: relative error %g", i, e);
    }
}

static void two_blocks_and_two_caches_of_one_block_run_at_once(void **state) {
    fixture *f = *state;
    attnc_jit *jit[2];
    for (int i = 0; i < 2; i++)
        jit[i] = jit_or_fail(f->spec[i], NULL);
    job jobs[2];
    for (int i = 0; i < 2; i++)
        jobs[i] = (job){f->spec[i], NULL, jit[i], f->w[i], f->x[i], f->y[i], 20, false, 0};
    run_pair(f, jobs);
    /* two caches of one block at once: the block is only read */
    fixture same = *f;
    same.w[1] = f->w[0], same.x[1] = f->x[0], same.want[1] = f->want[0];
    same.y[1] = malloc((size_t)(T_TOKENS * f->w[0]->cfg.d_model) * sizeof(float));
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = 1;
    attn_block *shared;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit[0]), &bo, &shared), ATTN_OK);
    assert_int_equal(attn_block_set_weights(shared, f->w[0]), ATTN_OK);
    jobs[0] = (job){f->spec[0], shared, jit[0], f->w[0], f->x[0], same.y[0], 20, false, 0};
    jobs[1] = (job){f->spec[0], shared, jit[0], f->w[0], f->x[0], same.y[1], 20, false, 0};
    run_pair(&same, jobs);
    attn_block_free(shared);
    free(same.y[1]);
    for (int i = 0; i < 2; i++)
        attnc_jit_free(jit[i]);
}

static void two_jit_compiles_at_once(void **state) {
    fixture *f = *state;
    job jobs[2];
    for (int i = 0; i < 2; i++)
        jobs[i] = (job){f->spec[i], NULL, NULL, f->w[i], f->x[i], f->y[i], 3, false, 0};
    run_pair(f, jobs);
}

static void two_reference_engines_at_once(void **state) {
    fixture *f = *state;
    job jobs[2];
    for (int i = 0; i < 2; i++)
        jobs[i] = (job){f->spec[i], NULL, NULL, f->w[i], f->x[i], f->y[i], 5, true, 0};
    run_pair(f, jobs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_blocks_and_two_caches_of_one_block_run_at_once),
        cmocka_unit_test(two_jit_compiles_at_once),
        cmocka_unit_test(two_reference_engines_at_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
