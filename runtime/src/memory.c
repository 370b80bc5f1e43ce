/* memory.c: allocations the kernels stream through. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rt.h"

enum { HUGE_PAGE = 2 << 20, MAX_GUARDED = 4096 };

/* Allocations made under $ATTN_GUARD_PAGES, each a mapping of its own:
 * rt_free_large finds them here (a mutex: they are test runs). */
static struct {
    void *user, *map;
    size_t len;
} guarded[MAX_GUARDED];
static int n_guarded;
static atomic_int live_guarded;
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;

/* bytes (a multiple of 64) between two pages nothing may touch, against
 * the first (front) or the second (back); NULL: no guard asked for, or
 * none left (the caller then allocates as usual). */
static void *alloc_guarded(size_t bytes) {
    const char *mode = getenv("ATTN_GUARD_PAGES");
    bool front = mode && !strcmp(mode, "front"), back = mode && !strcmp(mode, "back");
    if (!front && !back)
        return NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t body = (bytes + page - 1) / page * page, len = body + 2 * page;
    char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    if (mprotect(map, page, PROT_NONE) || mprotect(map + page + body, page, PROT_NONE)) {
        munmap(map, len);
        return NULL;
    }
    char *user = front ? map + page : map + page + body - bytes;
    pthread_mutex_lock(&guard_lock);
    int i = 0;
    while (i < n_guarded && guarded[i].user)
        i++;
    if (i == MAX_GUARDED) {
        pthread_mutex_unlock(&guard_lock);
        munmap(map, len);
        return NULL;
    }
    n_guarded += i == n_guarded;
    guarded[i].user = user, guarded[i].map = map, guarded[i].len = len;
    atomic_fetch_add(&live_guarded, 1);
    pthread_mutex_unlock(&guard_lock);
    return user;
}

void *rt_alloc_heap(size_t bytes) {
    bytes = (bytes + 63) & ~(size_t)63;
    if (!bytes)
        bytes = 64;
    void *p = NULL;
    if (bytes < HUGE_PAGE)
        return posix_memalign(&p, 64, bytes) ? NULL : p;
    size_t whole = (bytes + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    if (posix_memalign(&p, HUGE_PAGE, whole))
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, whole, MADV_HUGEPAGE); /* advice only: without it, 4 KB pages */
#endif
    return p;
}

void *rt_alloc_large(size_t bytes) {
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = alloc_guarded(n ? n : 64);
    return p ? p : rt_alloc_heap(bytes);
}

void rt_free_large(void *p) {
    if (p && atomic_load(&live_guarded) > 0) {
        pthread_mutex_lock(&guard_lock);
        for (int i = 0; i < n_guarded; i++)
            if (guarded[i].user == p) {
                munmap(guarded[i].map, guarded[i].len);
                guarded[i].user = NULL;
                atomic_fetch_sub(&live_guarded, 1);
                pthread_mutex_unlock(&guard_lock);
                return;
            }
        pthread_mutex_unlock(&guard_lock);
    }
    free(p);
}
