/* block.c: a block is a kernel table plus its f32 weights, concatenated
 * as the table asks and then packed by the table's load-phase steps into
 * the kernels' own layouts. Once loaded it is only read (cache.c runs it). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"

attn_block_options attn_block_options_default(void) {
    return (attn_block_options){0};
}

const char *attn_block_error(const attn_block *b) {
    return b ? b->error.text : "no block";
}

attn_status attn_block_new(const attn_kernels *k, const attn_block_options *opt,
                           attn_block **out) {
    if (!k || !out || k->abi_version != ATTN_KERNELS_ABI || k->n_buffers > ATTN_MAX_BUFFERS ||
        k->n_buffers < 2 || (k->n_steps && !k->steps) || !k->buffers)
        return ATTN_E_INVALID;
    if (attn_config_check(&k->config, NULL) != ATTN_OK)
        return ATTN_E_INVALID;
    for (uint32_t i = 0; i < k->n_steps; i++)
        if (!k->steps[i].fn || k->steps[i].phase >= ATTN_PHASE_COUNT)
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
    for (int i = 0; i < ATTN_MAX_BUFFERS; i++)
        free(b->packed[i]);
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

/* Runs the table's load steps over weights w into fresh packed buffers;
 * weights only they read are freed (set to NULL in w). */
static attn_status pack(attn_block *b, float **w, void **packed) {
    const attn_kernels *k = b->k;
    attn_kernel_args args = {.abi_version = ATTN_KERNELS_ABI};
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        if (d->role == ATTN_BUF_WEIGHT) {
            args.buf[i] = w[d->weight];
        } else if (d->role == ATTN_BUF_PACKED) {
            if (d->c < 0 || d->s || d->t || d->st ||
                !(packed[i] = rt_alloc_large((size_t)d->c * sizeof(float))))
                return rt_fail(&b->error, ATTN_E_NOMEM, "out of memory packing weights");
            args.buf[i] = packed[i];
        }
    }
#pragma omp parallel num_threads(b->n_threads)
    {
        uint32_t ith = (uint32_t)omp_get_thread_num(), nth = (uint32_t)omp_get_num_threads();
        for (uint32_t i = 0; i < k->n_steps; i++) {
            if (k->steps[i].phase != ATTN_PHASE_LOAD)
                continue;
            k->steps[i].fn(&args, ith, nth);
#pragma omp barrier
        }
    }
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        if (d->role == ATTN_BUF_WEIGHT && d->load_only) {
            free(w[d->weight]);
            w[d->weight] = NULL;
        }
    }
    return ATTN_OK;
}

attn_status attn_block_set_weights(attn_block *b, const attn_weights *w) {
    if (!b || !w)
        return ATTN_E_INVALID;
    if (!rt_config_equal(&w->cfg, &b->cfg))
        return rt_fail(&b->error, ATTN_E_INVALID, "weights were made for another configuration");
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
        [ATTN_W_Q_NORM] = {{w->q_norm}, {c->qk_norm == ATTN_QK_NORM_ALL ? qd : (size_t)c->head_dim}, 1},
        [ATTN_W_K_NORM] = {{w->k_norm}, {c->qk_norm == ATTN_QK_NORM_ALL ? kvd : (size_t)c->head_dim}, 1},
        [ATTN_W_SINKS] = {{w->sinks}, {(size_t)c->heads}, 1},
    };
    float *fresh[ATTN_WEIGHT_COUNT] = {0};
    attn_status st = ATTN_OK;
    for (uint32_t i = 0; i < b->k->n_buffers && st == ATTN_OK; i++) {
        const attn_buffer_desc *d = &b->k->buffers[i];
        if (d->role != ATTN_BUF_WEIGHT || fresh[d->weight])
            continue;
        if (!parts[d->weight].p[0]) /* a bias the weights do not have */
            st = rt_fail(&b->error, ATTN_E_INVALID, "the kernels need weight %u, which is absent",
                         d->weight);
        else if (!(fresh[d->weight] = concat(parts[d->weight].p, parts[d->weight].n,
                                             parts[d->weight].count)))
            st = rt_fail(&b->error, ATTN_E_NOMEM, "out of memory copying weight %u", d->weight);
    }
    void *packed[ATTN_MAX_BUFFERS] = {0};
    if (st == ATTN_OK)
        st = pack(b, fresh, packed);
    for (int j = 0; j < ATTN_WEIGHT_COUNT; j++) {
        if (st == ATTN_OK) {
            free(b->weight[j]);
            b->weight[j] = fresh[j];
        } else {
            free(fresh[j]);
        }
    }
    for (int i = 0; i < ATTN_MAX_BUFFERS; i++) {
        if (st == ATTN_OK) {
            free(b->packed[i]);
            b->packed[i] = packed[i];
        } else {
            free(packed[i]);
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
        return rt_fail(&b->error, st, "%s", m.text);
    st = attn_block_set_weights(b, w);
    attn_weights_free(w);
    return st;
}
