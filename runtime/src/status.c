/* status.c: status names, the failure message every entry point writes,
 * and overflow-checked element counts. */
#include <stdarg.h>
#include <stdio.h>

#include "rt.h"

const char *attn_status_str(attn_status s) {
    switch (s) {
    case ATTN_OK: return "ok";
    case ATTN_E_INVALID: return "invalid argument";
    case ATTN_E_CAPACITY: return "cache capacity exceeded";
    case ATTN_E_NOMEM: return "out of memory";
    case ATTN_E_IO: return "I/O error";
    case ATTN_E_FORMAT: return "malformed or mismatched file";
    case ATTN_E_CPU: return "the kernels need CPU features this machine lacks";
    case ATTN_STATUS_COUNT: break;
    }
    return "unknown status";
}

attn_status rt_vfail(attn_msg *m, attn_status st, const char *fmt, va_list ap) {
    if (m)
        vsnprintf(m->text, sizeof m->text, fmt, ap);
    return st;
}

attn_status rt_fail(attn_msg *m, attn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rt_vfail(m, st, fmt, ap);
    va_end(ap);
    return st;
}

int64_t rt_numel(int ndim, const int64_t *shape, int64_t limit) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        if (shape[i] != 0 && n > limit / shape[i])
            return -1;
        n *= shape[i];
    }
    return n;
}
