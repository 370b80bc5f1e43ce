/* prefix.c: the index of published blocks (prefix.h). Keys come from the
 * caller (often hashes already, but maybe small counters), so each is
 * mixed before it picks a slot; linear probing, and deletion by moving
 * later entries of the run back (no tombstones), keep lookups short at
 * a load of at most one half. */
#include <stdlib.h>

#include "prefix.h"

bool prefix_init(prefix_index *p, int64_t n_blocks) {
    uint64_t n = 16;
    while (n < 2 * (uint64_t)n_blocks)
        n *= 2;
    *p = (prefix_index){.head = -1, .tail = -1, .mask = n - 1};
    p->key = malloc((size_t)n_blocks * sizeof *p->key);
    p->depth = malloc((size_t)n_blocks * sizeof *p->depth);
    p->prev = malloc((size_t)n_blocks * sizeof *p->prev);
    p->next = malloc((size_t)n_blocks * sizeof *p->next);
    p->slots = malloc((size_t)n * sizeof *p->slots);
    if (!p->key || !p->depth || !p->prev || !p->next || !p->slots) {
        prefix_fini(p);
        return false;
    }
    for (int64_t i = 0; i < n_blocks; i++)
        p->depth[i] = -1;
    for (uint64_t i = 0; i < n; i++)
        p->slots[i] = -1;
    return true;
}

void prefix_fini(prefix_index *p) {
    free(p->key);
    free(p->depth);
    free(p->prev);
    free(p->next);
    free(p->slots);
    *p = (prefix_index){.head = -1, .tail = -1};
}

bool prefix_has(const prefix_index *p, int32_t blk) {
    return p->depth && p->depth[blk] >= 0;
}

/* The finalizer of the SplitMix64 generator: every input bit moves
 * about half the output bits. */
static uint64_t mix(uint64_t k) {
    k = (k ^ (k >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    k = (k ^ (k >> 27)) * UINT64_C(0x94d049bb133111eb);
    return k ^ (k >> 31);
}

/* The slot holding key, or the empty slot ending its run. */
static uint64_t slot_of(const prefix_index *p, uint64_t key) {
    uint64_t i = mix(key) & p->mask;
    while (p->slots[i] >= 0 && p->key[p->slots[i]] != key)
        i = (i + 1) & p->mask;
    return i;
}

bool prefix_known(const prefix_index *p, uint64_t key) {
    return p->slots && p->slots[slot_of(p, key)] >= 0;
}

int32_t prefix_find(const prefix_index *p, uint64_t key, int64_t depth) {
    if (!p->slots)
        return -1;
    int32_t blk = p->slots[slot_of(p, key)];
    return blk >= 0 && p->depth[blk] == depth ? blk : -1;
}

void prefix_add(prefix_index *p, uint64_t key, int64_t depth, int32_t blk) {
    p->key[blk] = key;
    p->depth[blk] = (int32_t)depth;
    p->slots[slot_of(p, key)] = blk;
    p->published++;
}

void prefix_wake(prefix_index *p, int32_t blk) {
    int32_t a = p->prev[blk], b = p->next[blk];
    if (a >= 0)
        p->next[a] = b;
    else
        p->head = b;
    if (b >= 0)
        p->prev[b] = a;
    else
        p->tail = a;
    p->idle--;
}

void prefix_rest(prefix_index *p, int32_t blk) {
    p->prev[blk] = p->tail;
    p->next[blk] = -1;
    if (p->tail >= 0)
        p->next[p->tail] = blk;
    else
        p->head = blk;
    p->tail = blk;
    p->idle++;
}

/* Empties slot i and moves back the entries after it that probing
 * would no longer reach. */
static void erase(prefix_index *p, uint64_t i) {
    for (uint64_t j = (i + 1) & p->mask; p->slots[j] >= 0; j = (j + 1) & p->mask) {
        uint64_t home = mix(p->key[p->slots[j]]) & p->mask;
        /* j's entry stays unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            p->slots[i] = p->slots[j];
            i = j;
        }
    }
    p->slots[i] = -1;
}

int32_t prefix_evict(prefix_index *p) {
    int32_t blk = p->head;
    if (blk < 0)
        return -1;
    prefix_wake(p, blk);
    erase(p, slot_of(p, p->key[blk]));
    p->depth[blk] = -1;
    p->published--;
    p->evicted++;
    return blk;
}
