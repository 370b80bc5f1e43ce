/* base.h: what every compiler stage shares: the context with its arena,
 * diagnostics, and the assertion for broken invariants. */
#ifndef ATTNC_BASE_H
#define ATTNC_BASE_H

#include <stdbool.h>
#include <stddef.h>

#include "attnc.h"

#define ATTNC_HIDDEN __attribute__((visibility("hidden")))

/* For bugs, never for bad input: reports file:line and aborts in every build. */
#define ATTNC_ASSERT(cond) ((cond) ? (void)0 : attnc_assert_fail(#cond, __FILE__, __LINE__))
ATTNC_HIDDEN _Noreturn void attnc_assert_fail(const char *cond, const char *file, int line);

typedef struct arena_chunk arena_chunk;
typedef struct arena {
    arena_chunk *head; /* owned list of chunks, newest first */
    bool failed;       /* an allocation failed; results are incomplete */
} arena;

ATTNC_HIDDEN void *arena_alloc(arena *a, size_t n); /* zeroed; NULL sets failed */
ATTNC_HIDDEN char *arena_strndup(arena *a, const char *s, size_t n);
ATTNC_HIDDEN void arena_fini(arena *a);

struct attnc_ctx {
    arena arena;
    attnc_diag *diags; /* owned (realloc'd), messages in the arena */
    size_t n_diags, cap_diags;
    size_t n_errors;
};

/* Records an error at loc (printf-style message). Past ATTNC_MAX_ERRORS it
 * records one note saying more errors were dropped, then nothing. */
ATTNC_HIDDEN void diag_error(attnc_ctx *ctx, attnc_status code, attnc_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
ATTNC_HIDDEN void diag_note(attnc_ctx *ctx, attnc_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ATTNC_HIDDEN void diag_warning(attnc_ctx *ctx, attnc_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The end of a public call that worked in a context of its own (work):
 * its diagnostics are appended to the caller's ctx (when not NULL), work
 * is freed, and st returned. */
ATTNC_HIDDEN attnc_status diag_call_end(attnc_ctx *ctx, attnc_ctx *work, attnc_status st);
/* The code of the first error, or ATTNC_OK. */
ATTNC_HIDDEN attnc_status diag_first_code(const attnc_ctx *ctx);
/* The regular file at path into *text, NUL-terminated (malloc'd; *len its
 * bytes, the NUL not counted); else a diagnostic at `at` ("cannot open
 * WHAT: ...", "not a regular file", "WHAT is N bytes; the limit is MAX",
 * "cannot read WHAT") and its code: ATTNC_E_NOMEM out of memory, else
 * ATTNC_E_IO. */
ATTNC_HIDDEN attnc_status diag_read_file(attnc_ctx *ctx, attnc_loc at, const char *path,
                                         const char *what, uint64_t max, char **text, size_t *len);

/* A monotonic clock in milliseconds: what the stage timings use. */
ATTNC_HIDDEN double base_now_ms(void);

/* d as the spec and IR printers write numbers: integers as integers, else
 * the shortest %g text that reads back as d; into buf, which it returns. */
ATTNC_HIDDEN const char *base_num(double d, char *buf, size_t n);

#endif
