/* block.h: a block's internals, shared by block.c (weights, table) and
 * cache.c (paged cache, forward). Not installed. */
#ifndef ATTN_BLOCK_H
#define ATTN_BLOCK_H

#include "attn_kernels.h"
#include "rt.h"

struct attn_block {
    const attn_kernels *k; /* borrowed */
    attn_config cfg;
    int n_threads;
    float *weight[ATTN_WEIGHT_COUNT]; /* owned; NULL when the table does not use it or
                                         only its load steps did */
    void *packed[ATTN_MAX_BUFFERS];   /* owned, by buffer index: ATTN_BUF_PACKED buffers */
    bool loaded;
    attn_msg error; /* the last failure */
};

#endif
