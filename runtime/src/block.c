/* block.c: runs a kernel table. A block owns f32 weights (packed as the
 * table asks) and a scratch area sized for the largest call so far; a run
 * fills the kernel arguments and executes the steps in order on an OpenMP
 * team, a barrier between steps. Kernels split each step by (ith, nth). */
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_kernels.h"
#include "rt.h"

struct attn_block {
    const attn_kernels *k; /* borrowed */
    attn_config cfg;
    int n_threads;
    float *weight[ATTN_WEIGHT_COUNT]; /* owned; NULL when the table does not use it */
    bool loaded;
    void *scratch; /* owned */
    size_t scratch_bytes;
    char error[ATTN_MSG_MAX];
};

struct attn_kv {
    attn_config cfg;
    int64_t cap, len;
    void *k, *v; /* owned: [cap][kv_groups][head_dim] in cfg.kv_dtype */
};

static attn_status fail(attn_block *b, attn_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static attn_status fail(attn_block *b, attn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->error, sizeof b->error, fmt, ap);
    va_end(ap);
    return st;
}

attn_block_options attn_block_options_default(void) {
    return (attn_block_options){0};
}

const char *attn_block_error(const attn_block *b) {
    return b ? b->error : "no block";
}

attn_status attn_block_new(const attn_kernels *k, const attn_block_options *opt,
                           attn_block **out) {
    if (!k || !out || k->abi_version != ATTN_KERNELS_ABI || k->n_buffers > ATTN_MAX_BUFFERS ||
        k->n_buffers < 2 || (k->n_steps && !k->steps) || !k->buffers)
        return ATTN_E_INVALID;
    if (attn_config_check(&k->config, NULL) != ATTN_OK)
        return ATTN_E_INVALID;
    for (uint32_t i = 0; i < k->n_steps; i++)
        if (!k->steps[i].fn)
            return ATTN_E_INVALID;
    for (uint32_t i = 0; i < k->n_buffers; i++)
        if (k->buffers[i].role >= ATTN_BUF_ROLE_COUNT ||
            (k->buffers[i].role == ATTN_BUF_WEIGHT && k->buffers[i].weight >= ATTN_WEIGHT_COUNT))
            return ATTN_E_INVALID;
    attn_block *b = calloc(1, sizeof *b);
    if (!b)
        return ATTN_E_NOMEM;
    b->k = k;
    b->cfg = k->config;
    b->n_threads = opt && opt->n_threads > 0 ? opt->n_threads : 0;
    if (!b->n_threads) {
        const char *env = getenv("ATTN_THREADS");
        b->n_threads = env && atoi(env) > 0 ? atoi(env) : omp_get_num_procs();
    }
    *out = b;
    return ATTN_OK;
}

void attn_block_free(attn_block *b) {
    if (!b)
        return;
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++)
        free(b->weight[i]);
    free(b->scratch);
    free(b);
}

/* Copies the parts (rows concatenated) into a fresh f32 array. */
static float *concat(const float *const *parts, const size_t *n, int count) {
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += n[i];
    float *p = malloc(total * sizeof *p);
    for (size_t at = 0, i = 0; p && (int)i < count; at += n[i], i++)
        memcpy(p + at, parts[i], n[i] * sizeof *p);
    return p;
}

attn_status attn_block_set_weights(attn_block *b, const attn_weights *w) {
    if (!b || !w)
        return ATTN_E_INVALID;
    if (!rt_config_equal(&w->cfg, &b->cfg))
        return fail(b, ATTN_E_INVALID, "weights were made for another configuration");
    const attn_config *c = &b->cfg;
    size_t D = (size_t)c->d_model, qd = (size_t)(c->heads * c->head_dim),
           kvd = (size_t)(c->kv_groups * c->head_dim);
    /* each weight id as the rows it is made of: packed ids have three */
    const struct {
        const float *p[3];
        size_t n[3];
        int count;
    } parts[ATTN_WEIGHT_COUNT] = {
        [ATTN_W_Q] = {{w->wq}, {qd * D}, 1},
        [ATTN_W_K] = {{w->wk}, {kvd * D}, 1},
        [ATTN_W_V] = {{w->wv}, {kvd * D}, 1},
        [ATTN_W_O] = {{w->wo}, {D * qd}, 1},
        [ATTN_B_Q] = {{w->bq}, {qd}, 1},
        [ATTN_B_K] = {{w->bk}, {kvd}, 1},
        [ATTN_B_V] = {{w->bv}, {kvd}, 1},
        [ATTN_B_O] = {{w->bo}, {D}, 1},
        [ATTN_W_QKV] = {{w->wq, w->wk, w->wv}, {qd * D, kvd * D, kvd * D}, 3},
        [ATTN_B_QKV] = {{w->bq, w->bk, w->bv}, {qd, kvd, kvd}, 3},
    };
    float *fresh[ATTN_WEIGHT_COUNT] = {0};
    attn_status st = ATTN_OK;
    for (uint32_t i = 0; i < b->k->n_buffers && st == ATTN_OK; i++) {
        const attn_buffer_desc *d = &b->k->buffers[i];
        if (d->role != ATTN_BUF_WEIGHT || fresh[d->weight])
            continue;
        if (!parts[d->weight].p[0]) /* a bias the weights do not have */
            st = fail(b, ATTN_E_INVALID, "the kernels need weight %u, which is absent", d->weight);
        else if (!(fresh[d->weight] = concat(parts[d->weight].p, parts[d->weight].n,
                                             parts[d->weight].count)))
            st = fail(b, ATTN_E_NOMEM, "out of memory copying weight %u", d->weight);
    }
    for (int j = 0; j < ATTN_WEIGHT_COUNT; j++) {
        if (st == ATTN_OK) {
            free(b->weight[j]);
            b->weight[j] = fresh[j];
        } else {
            free(fresh[j]);
        }
    }
    b->loaded |= st == ATTN_OK;
    return st;
}

attn_status attn_block_load_safetensors(attn_block *b, const char *path, const char *prefix) {
    if (!b)
        return ATTN_E_INVALID;
    attn_msg m = {{0}};
    attn_weights *w = NULL;
    attn_status st = attn_weights_load(&b->cfg, path, prefix, &w, &m);
    if (st)
        return fail(b, st, "%s", m.text);
    st = attn_block_set_weights(b, w);
    attn_weights_free(w);
    return st;
}

attn_status attn_kv_new(const attn_block *b, int64_t capacity_tokens, attn_kv **out) {
    if (!b || !out)
        return ATTN_E_INVALID;
    int64_t cap = capacity_tokens > 0 ? capacity_tokens : b->cfg.kv_max_tokens;
    if (cap > b->cfg.kv_max_tokens)
        return ATTN_E_INVALID;
    attn_kv *kv = calloc(1, sizeof *kv);
    size_t bytes = (size_t)(cap * b->cfg.kv_groups * b->cfg.head_dim) *
                   attn_dtype_size(b->cfg.kv_dtype);
    if (kv) {
        kv->k = malloc(bytes);
        kv->v = malloc(bytes);
    }
    if (!kv || !kv->k || !kv->v) {
        attn_kv_free(kv);
        return ATTN_E_NOMEM;
    }
    kv->cfg = b->cfg;
    kv->cap = cap;
    *out = kv;
    return ATTN_OK;
}

void attn_kv_free(attn_kv *kv) {
    if (!kv)
        return;
    free(kv->k);
    free(kv->v);
    free(kv);
}

int64_t attn_kv_len(const attn_kv *kv) {
    return kv ? kv->len : -1;
}

attn_status attn_kv_truncate(attn_kv *kv, int64_t n_tokens) {
    if (!kv || n_tokens < 0 || n_tokens > kv->len)
        return ATTN_E_INVALID;
    kv->len = n_tokens;
    return ATTN_OK;
}

static size_t scratch_elems(const attn_buffer_desc *d, int64_t S, int64_t T) {
    return (size_t)(d->c + d->s * S + d->t * T + d->st * S * T);
}

attn_status attn_block_run(attn_block *b, attn_kv *kv, int64_t n_tokens, const float *x,
                           float *y) {
    if (!b || !kv || n_tokens < 0 || (n_tokens > 0 && (!x || !y)))
        return b ? fail(b, ATTN_E_INVALID, "attn_block_run: bad argument") : ATTN_E_INVALID;
    if (!b->loaded)
        return fail(b, ATTN_E_INVALID, "the block has no weights");
    if (!rt_config_equal(&kv->cfg, &b->cfg))
        return fail(b, ATTN_E_INVALID, "the cache belongs to another configuration");
    if (n_tokens > kv->cap - kv->len)
        return fail(b, ATTN_E_CAPACITY,
                    "%lld new tokens do not fit: %lld of %lld cache positions are used",
                    (long long)n_tokens, (long long)kv->len, (long long)kv->cap);
    if (n_tokens == 0)
        return ATTN_OK;
    const attn_kernels *k = b->k;
    int64_t S = n_tokens, T = kv->len + n_tokens;
    size_t need = 0;
    for (uint32_t i = 0; i < k->n_buffers; i++)
        if (k->buffers[i].role == ATTN_BUF_SCRATCH)
            need += (scratch_elems(&k->buffers[i], S, T) * sizeof(float) + 63) & ~(size_t)63;
    if (need > b->scratch_bytes) {
        void *p = NULL;
        if (posix_memalign(&p, 64, need) != 0)
            return fail(b, ATTN_E_NOMEM, "out of memory for %zu bytes of scratch", need);
        free(b->scratch);
        b->scratch = p;
        b->scratch_bytes = need;
    }
    attn_kernel_args a = {.abi_version = ATTN_KERNELS_ABI, .n_tokens = S, .n_past = kv->len};
    size_t at = 0;
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        switch ((attn_buf_role)d->role) {
        case ATTN_BUF_INPUT: a.buf[i] = (void *)x; break;
        case ATTN_BUF_OUTPUT: a.buf[i] = y; break;
        case ATTN_BUF_WEIGHT: a.buf[i] = b->weight[d->weight]; break;
        case ATTN_BUF_CACHE_K: a.buf[i] = kv->k; break;
        case ATTN_BUF_CACHE_V: a.buf[i] = kv->v; break;
        case ATTN_BUF_SCRATCH:
            a.buf[i] = (char *)b->scratch + at;
            at += (scratch_elems(d, S, T) * sizeof(float) + 63) & ~(size_t)63;
            break;
        case ATTN_BUF_ROLE_COUNT: break;
        }
        if (d->role == ATTN_BUF_WEIGHT && !a.buf[i])
            return fail(b, ATTN_E_INVALID, "weight %u is missing", d->weight);
    }
#pragma omp parallel num_threads(b->n_threads)
    {
        uint32_t ith = (uint32_t)omp_get_thread_num(), nth = (uint32_t)omp_get_num_threads();
        for (uint32_t s = 0; s < k->n_steps; s++) {
            k->steps[s].fn(&a, ith, nth);
#pragma omp barrier
        }
    }
    kv->len = T;
    return ATTN_OK;
}
