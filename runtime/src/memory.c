/* memory.c: allocations the kernels stream through. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>

#include "rt.h"

enum { HUGE_PAGE = 2 << 20 };

void *rt_alloc_large(size_t bytes) {
    bytes = (bytes + 63) & ~(size_t)63;
    if (!bytes)
        bytes = 64;
    if (bytes < HUGE_PAGE) {
        void *p = NULL;
        return posix_memalign(&p, 64, bytes) ? NULL : p;
    }
    void *p = NULL;
    size_t whole = (bytes + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    if (posix_memalign(&p, HUGE_PAGE, whole))
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, whole, MADV_HUGEPAGE); /* advice only: without it, 4 KB pages */
#endif
    return p;
}
