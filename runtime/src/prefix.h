/* prefix.h: the prefix cache's index (prefix.c), used by cache.c. A
 * published block is found by the caller's key and its place in the
 * chain (depth: logical block index); published blocks no sequence holds
 * are idle, listed least recently used first, and are taken back by
 * prefix_evict when the pool has no free block. Not installed. */
#ifndef ATTN_PREFIX_H
#define ATTN_PREFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "rt.h"

typedef struct prefix_index {
    uint64_t *key;        /* owned [n_blocks]: what a published block is found by */
    int32_t *depth;       /* owned [n_blocks]: its logical index, -1 unpublished */
    int32_t *prev, *next; /* owned [n_blocks]: the idle list, -1 at its ends */
    int32_t head, tail;   /* least and most recently used idle block, -1 none */
    int32_t *slots;       /* owned [mask + 1]: open addressing by key, block or -1 */
    uint64_t mask;
    int64_t published, idle, evicted;
} prefix_index;

/* Room for every block of a pool of n_blocks; false when out of memory
 * (p then stays empty). */
RT_HIDDEN bool prefix_init(prefix_index *p, int64_t n_blocks);
RT_HIDDEN void prefix_fini(prefix_index *p);
RT_HIDDEN bool prefix_has(const prefix_index *p, int32_t blk);
/* The block published under key at this depth, or -1. */
RT_HIDDEN int32_t prefix_find(const prefix_index *p, uint64_t key, int64_t depth);
/* Whether key is published (at any depth). */
RT_HIDDEN bool prefix_known(const prefix_index *p, uint64_t key);
/* Publishes blk (held by a sequence: not idle) under key at depth. */
RT_HIDDEN void prefix_add(prefix_index *p, uint64_t key, int64_t depth, int32_t blk);
/* blk, published, is no longer held: the most recently used idle one. */
RT_HIDDEN void prefix_rest(prefix_index *p, int32_t blk);
/* blk, idle, is held again. */
RT_HIDDEN void prefix_wake(prefix_index *p, int32_t blk);
/* Unpublishes the least recently used idle block and returns it (-1 if
 * none is idle). */
RT_HIDDEN int32_t prefix_evict(prefix_index *p);

#endif
