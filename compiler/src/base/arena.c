/* arena.c: bump allocation in chunks; everything is freed at once with the
 * context, so no pass frees what it allocates. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

struct arena_chunk {
    arena_chunk *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

enum { CHUNK_MIN = 16 * 1024 };

void *arena_alloc(arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > CHUNK_MIN ? n : CHUNK_MIN;
        c = malloc(sizeof *c + size);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strndup(arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void arena_fini(arena *a) {
    for (arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
}
