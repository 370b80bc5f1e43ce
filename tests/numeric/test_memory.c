/* test_memory.c: prefill of 16384 tokens on `seed` in one call runs in a
 * peak RSS within twice its weights + KV cache + activations (the kernel
 * table's buffers at that size): no hidden O(S^2) value. The prefill runs
 * in a child process so its peak is measured alone (not under sanitizers,
 * whose shadow memory counts in RSS; the S x T check still runs there). */
#define _DEFAULT_SOURCE /* wait4 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attnc.h"
#include "support.h"

#define S_TOKENS 16384

static char spec[1100]; /* seed with room for S_TOKENS in its cache */

static attnc_jit *compile_seed(void) {
    return jit_or_fail(spec, NULL);
}

/* Bytes of weights (as loaded and packed), cache and activations. */
static double budget(const attn_kernels *k) {
    const attn_config *c = &k->config;
    double bytes = 0, S = S_TOKENS, T = S_TOKENS;
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        if (d->st != 0)
            fail_msg("buffer %u grows with S x T", i);
        double elems = (double)d->c + (double)d->s * S + (double)d->t * T;
        switch ((attn_buf_role)d->role) {
        case ATTN_BUF_INPUT:
        case ATTN_BUF_OUTPUT:
        case ATTN_BUF_MEMORY:
        case ATTN_BUF_SCRATCH:
        case ATTN_BUF_CASCADE:
        case ATTN_BUF_PACKED: bytes += elems * 4; break;
        case ATTN_BUF_WEIGHT: bytes += d->load_only ? 0 : elems * 4; break;
        case ATTN_BUF_CACHE_K:
        case ATTN_BUF_CACHE_V:
            bytes +=
                T * (double)(c->kv_groups * c->head_dim) * (double)attn_dtype_size(c->kv_dtype);
            break;
        case ATTN_BUF_TOKEN_INPUT:
        case ATTN_BUF_SEQ_INPUT: bytes += T * 4; break;
        case ATTN_BUF_ROLE_COUNT: break;
        }
    }
    /* the weights as given (f32) live while the block packs them */
    double D = (double)c->d_model, qd = (double)(c->heads * c->head_dim),
           kv = (double)(c->kv_groups * c->head_dim);
    return bytes + (D * (qd + 2 * kv) + qd * D) * 4;
}

static void prefill(void) {
    attnc_jit *jit = compile_seed();
    const attn_kernels *k = attnc_jit_kernels(jit);
    attn_weights *w;
    attn_block *b;
    attn_cache *c;
    int32_t s, n = S_TOKENS;
    size_t elems = (size_t)S_TOKENS * (size_t)k->config.d_model;
    float *x = random_floats(elems, 3), *y = malloc(elems * sizeof *y);
    if (attn_weights_random(&k->config, 1, &w, NULL) || attn_block_new(k, NULL, &b) ||
        attn_block_set_weights(b, w) || attn_cache_new(b, S_TOKENS, &c) || attn_seq_new(c, &s))
        _exit(10);
    attn_weights_free(w);
    if (attn_forward(b, c, 1, &s, &n, x, y) != ATTN_OK)
        _exit(11);
    for (size_t i = 0; i < elems; i++)
        if (!(y[i] == y[i]))
            _exit(12);
    _exit(0);
}

static void prefill_16k_stays_within_twice_its_data(void **state) {
    (void)state;
    char *dir = tmpdir_new(), *seed = read_file(ATTNC_SOURCE_DIR "/specs/seed.yaml", NULL);
    assert_non_null(seed);
    snprintf(spec, sizeof spec, "%s", path_in(dir, "seed16k.yaml"));
    char *text = malloc(strlen(seed) + 64);
    sprintf(text, "%skv_cache: {max_tokens: %d}\n", seed, S_TOKENS);
    write_file(spec, text, strlen(text));
    free(text);
    free(seed);
    attnc_jit *jit = compile_seed();
    double want = budget(attnc_jit_kernels(jit));
    attnc_jit_free(jit);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        prefill();
    int status;
    struct rusage ru;
    assert_int_equal(wait4(pid, &status, 0, &ru), pid);
    tmpdir_remove(dir);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    double rss = (double)ru.ru_maxrss * 1024;
    printf("prefill %d tokens: peak RSS %.0f MB, weights + KV + activations %.0f MB\n", S_TOKENS,
           rss / 1e6, want / 1e6);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* shadow memory and quarantine make RSS no measure of the kernels' data */
    printf("sanitizer build: peak RSS not compared\n");
#else
    if (rss > 2 * want)
        fail_msg("peak RSS %.0f MB exceeds twice %.0f MB", rss / 1e6, want / 1e6);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefill_16k_stays_within_twice_its_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
