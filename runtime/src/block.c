/* block.c: a block is a kernel table plus its weights, staged one by one
 * in the dtype the kernels take them in (from f32 attn_weights or straight
 * from a checkpoint) and packed by the table's load-phase steps into the
 * kernels' own layouts. Once loaded it is only read (cache.c runs it). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "block.h"

attn_block_options attn_block_options_default(void) {
    return (attn_block_options){0};
}

const char *attn_block_error(const attn_block *b) {
    return b ? b->error.text : "no block";
}

attn_status attn_block_new(const attn_kernels *k, const attn_block_options *opt, attn_block **out) {
    if (!out)
        return ATTN_E_INVALID;
    attn_status st = attn_kernels_check(k, NULL); /* the reason: attn_kernels_check(k, msg) */
    if (st != ATTN_OK)
        return st;
    /* options naming a shard: the one the kernels were compiled for */
    int64_t count = k->config.shard_count > 1 ? k->config.shard_count : 1;
    if (opt && opt->shard_count > 0 &&
        (opt->shard_count != count || opt->shard_index != k->config.shard_index))
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
        rt_free_large(b->weight[i]);
    for (int i = 0; i < ATTN_MAX_BUFFERS; i++)
        rt_free_large(b->packed[i]);
    free(b);
}

/* A weight staged for packing only: mapped anonymous memory, returned to
 * the system as soon as it is freed (the heap may keep a freed buffer of
 * this size resident, and a load would then peak at every weight twice). */
static void *stage_map(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advice only: a fault per 2 MiB, not per 4 KiB */
#endif
    return p;
}

/* Fills dst (rt_weight_numel elements of rt_weight_dtype) with weight id. */
typedef attn_status (*stage_fn)(void *ctx, const attn_config *c, int id, void *dst, attn_msg *m);

static size_t weight_bytes(const attn_config *c, int id) {
    return attn_dtype_bytes(rt_weight_dtype(c, id), (int64_t)rt_weight_numel(c, id));
}

/* Weight id staged into fresh memory at *out: kept by the block when
 * forwards read it (keep), else mapped, for packing only. */
static attn_status stage_one(attn_block *b, stage_fn stage, void *ctx, int id, bool keep,
                             void **out) {
    size_t bytes = weight_bytes(&b->cfg, id);
    if (!bytes)
        return rt_fail(&b->error, ATTN_E_INVALID,
                       "the kernels need weight %d, which the configuration does not have", id);
    if (!(*out = keep ? rt_alloc_large(bytes) : stage_map(bytes)))
        return rt_fail(&b->error, ATTN_E_NOMEM, "out of memory staging weight %d", id);
    return stage(ctx, &b->cfg, id, *out, &b->error);
}

static void unstage(const attn_config *c, int id, bool keep, void *p) {
    if (keep)
        rt_free_large(p);
    else if (p)
        munmap(p, weight_bytes(c, id));
}

/* Runs the table's load steps, staging each weight just before the first
 * step that packs it and freeing it after the last (unless forwards read
 * it too): the i-th load step packs the i-th packed buffer from the weight
 * that buffer names (attn_kernels.h), so at most one staged weight and
 * the panels made so far are in memory at once. On success the block's
 * weights and panels are replaced; on failure nothing changed. */
static attn_status load_weights(attn_block *b, stage_fn stage, void *ctx) {
    const attn_kernels *k = b->k;
    void *staged[ATTN_WEIGHT_COUNT] = {0}, *packed[ATTN_MAX_BUFFERS] = {0};
    int pk[ATTN_MAX_BUFFERS], npk = 0, last[ATTN_WEIGHT_COUNT];
    bool at_run[ATTN_WEIGHT_COUNT] = {0};
    for (int i = 0; i < ATTN_WEIGHT_COUNT; i++)
        last[i] = -1;
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        if (d->role == ATTN_BUF_PACKED)
            last[d->weight] = npk, pk[npk++] = (int)i;
        else if (d->role == ATTN_BUF_WEIGHT && !d->load_only)
            at_run[d->weight] = true;
    }
    attn_status st = ATTN_OK;
    attn_kernel_args args = {.abi_version = ATTN_KERNELS_ABI};
    for (int li = 0, si = 0; st == ATTN_OK && si < (int)k->n_steps; si++) {
        if (k->steps[si].phase != ATTN_PHASE_LOAD)
            continue;
        const attn_buffer_desc *pd = &k->buffers[pk[li]];
        int id = (int)pd->weight;
        if (!staged[id] && (st = stage_one(b, stage, ctx, id, at_run[id], &staged[id])))
            break;
        if (pd->c < 0 || pd->s || pd->t || pd->st ||
            !(packed[pk[li]] = rt_alloc_large((size_t)pd->c * sizeof(float)))) {
            st = rt_fail(&b->error, ATTN_E_NOMEM, "out of memory packing weights");
            break;
        }
        for (uint32_t i = 0; i < k->n_buffers; i++)
            args.buf[i] = k->buffers[i].role == ATTN_BUF_WEIGHT   ? staged[k->buffers[i].weight]
                          : k->buffers[i].role == ATTN_BUF_PACKED ? packed[i]
                                                                  : NULL;
        attn_kernel_fn fn = k->steps[si].fn;
#pragma omp parallel num_threads(b->n_threads)
        fn(&args, (uint32_t)omp_get_thread_num(), (uint32_t)omp_get_num_threads());
        if (last[id] == li && !at_run[id]) {
            unstage(&b->cfg, id, false, staged[id]);
            staged[id] = NULL;
        }
        li++;
    }
    for (int id = 0; st == ATTN_OK && id < ATTN_WEIGHT_COUNT; id++)
        if (at_run[id] && !staged[id])
            st = stage_one(b, stage, ctx, id, true, &staged[id]);
    for (int j = 0; j < ATTN_WEIGHT_COUNT; j++) {
        if (st == ATTN_OK) {
            rt_free_large(b->weight[j]);
            b->weight[j] = staged[j]; /* only weights forwards read are left */
        } else {
            unstage(&b->cfg, j, at_run[j], staged[j]);
        }
    }
    for (int i = 0; i < ATTN_MAX_BUFFERS; i++) {
        if (st == ATTN_OK) {
            rt_free_large(b->packed[i]);
            b->packed[i] = packed[i];
        } else {
            rt_free_large(packed[i]);
        }
    }
    b->loaded |= st == ATTN_OK;
    return st;
}

static attn_status stage_from_weights(void *ctx, const attn_config *c, int id, void *dst,
                                      attn_msg *m) {
    return rt_weight_from(ctx, c, id, dst, m);
}

attn_status attn_block_set_weights(attn_block *b, const attn_weights *w) {
    if (!b || !w)
        return ATTN_E_INVALID;
    attn_config whole = rt_config_whole(&b->cfg); /* a shard takes the whole block's too */
    if (!rt_config_equal(&w->cfg, &b->cfg) && !rt_config_equal(&w->cfg, &whole))
        return rt_fail(&b->error, ATTN_E_INVALID, "weights were made for another configuration");
    return load_weights(b, stage_from_weights, (void *)w);
}

typedef struct src_ctx {
    rt_src *src;
    const char *prefix;
    bool check_finite;
} src_ctx;

static attn_status stage_from_source(void *ctx, const attn_config *c, int id, void *dst,
                                     attn_msg *m) {
    src_ctx *s = ctx;
    return rt_weight_gather(s->src, c, s->prefix, id, s->check_finite, dst, m);
}

attn_status attn_block_load(attn_block *b, const char *path, const char *prefix, unsigned flags) {
    if (!b)
        return ATTN_E_INVALID;
    if (!path)
        return rt_fail(&b->error, ATTN_E_INVALID, "attn_block_load: NULL path");
    src_ctx ctx = {NULL, prefix, (flags & ATTN_LOAD_CHECK_FINITE) != 0};
    attn_status st = rt_src_open(path, &ctx.src, &b->error);
    if (st)
        return st;
    st = load_weights(b, stage_from_source, &ctx);
    rt_src_close(ctx.src);
    return st;
}

attn_status attn_block_load_safetensors(attn_block *b, const char *path, const char *prefix) {
    return attn_block_load(b, path, prefix, 0);
}
