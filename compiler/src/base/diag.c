/* diag.c: the context and its diagnostics. Library code records; only the
 * driver prints. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "base/base.h"

void attnc_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "%s:%d: internal error: assertion '%s' failed\n", file, line, cond);
    abort();
}

attnc_ctx *attnc_ctx_new(void) {
    return calloc(1, sizeof(attnc_ctx));
}

void attnc_ctx_free(attnc_ctx *ctx) {
    if (!ctx)
        return;
    arena_fini(&ctx->arena);
    free(ctx->diags);
    free(ctx);
}

size_t attnc_diag_count(const attnc_ctx *ctx) {
    return ctx ? ctx->n_diags : 0;
}

const attnc_diag *attnc_diag_get(const attnc_ctx *ctx, size_t i) {
    return ctx && i < ctx->n_diags ? &ctx->diags[i] : NULL;
}

static const char *sev_name(attnc_severity s) {
    switch (s) {
    case ATTNC_SEV_ERROR: return "error";
    case ATTNC_SEV_NOTE: return "note";
    case ATTNC_SEV_WARNING: return "warning";
    case ATTNC_SEV_COUNT: break;
    }
    return "?";
}

const char *attnc_status_str(attnc_status s) {
    switch (s) {
    case ATTNC_OK: return "ok";
    case ATTNC_E_IO: return "I/O error";
    case ATTNC_E_YAML: return "malformed YAML";
    case ATTNC_E_SPEC: return "invalid spec";
    case ATTNC_E_SHAPE: return "inconsistent shapes";
    case ATTNC_E_LLVM: return "code generation failed";
    case ATTNC_E_NOMEM: return "out of memory";
    case ATTNC_E_INVALID: return "invalid argument";
    case ATTNC_STATUS_COUNT: break;
    }
    return "unknown status";
}

int attnc_diag_format(const attnc_diag *d, char *buf, size_t n) {
    const attnc_loc *l = &d->loc;
    const char *file = l->file ? l->file : "";
    const char *sep = l->file ? ": " : "";
    if (l->line && l->col)
        return snprintf(buf, n, "%s:%u:%u: %s: %s", file, l->line, l->col, sev_name(d->sev),
                        d->msg);
    if (l->line)
        return snprintf(buf, n, "%s:%u: %s: %s", file, l->line, sev_name(d->sev), d->msg);
    return snprintf(buf, n, "%s%s%s: %s", file, sep, sev_name(d->sev), d->msg);
}

int attnc_diag_text(const attnc_ctx *ctx, char *buf, size_t n) {
    size_t at = 0;
    if (n)
        buf[0] = 0;
    for (size_t i = 0; i < attnc_diag_count(ctx); i++) {
        int len = attnc_diag_format(attnc_diag_get(ctx, i), at < n ? buf + at : NULL,
                                    at < n ? n - at : 0);
        if (len < 0)
            return len;
        at += (size_t)len;
        if (at + 1 < n) { /* else the line was cut: buf already ends */
            buf[at] = '\n';
            buf[at + 1] = 0;
        }
        at++;
    }
    return (int)at;
}

attnc_status diag_call_end(attnc_ctx *ctx, attnc_ctx *work, attnc_status st) {
    for (size_t i = 0; ctx && i < work->n_diags; i++) {
        const attnc_diag *d = &work->diags[i];
        attnc_loc loc = d->loc; /* its file may live in work's arena */
        if (loc.file && !(loc.file = arena_strndup(&ctx->arena, loc.file, strlen(loc.file))))
            loc.file = "?";
        if (d->sev == ATTNC_SEV_ERROR)
            diag_error(ctx, d->code, loc, "%s", d->msg);
        else if (d->sev == ATTNC_SEV_WARNING)
            diag_warning(ctx, loc, "%s", d->msg);
        else
            diag_note(ctx, loc, "%s", d->msg);
    }
    attnc_ctx_free(work);
    return st;
}

static void add(attnc_ctx *ctx, attnc_severity sev, attnc_status code, attnc_loc loc,
                const char *fmt, va_list ap) {
    if (ctx->n_diags == ctx->cap_diags) {
        size_t cap = ctx->cap_diags ? 2 * ctx->cap_diags : 8;
        attnc_diag *d = realloc(ctx->diags, cap * sizeof *d);
        if (!d)
            return;
        ctx->diags = d;
        ctx->cap_diags = cap;
    }
    char buf[1024];
    int len = vsnprintf(buf, sizeof buf, fmt, ap);
    if (len < 0)
        return;
    size_t keep = (size_t)len < sizeof buf ? (size_t)len : sizeof buf - 1;
    const char *msg = arena_strndup(&ctx->arena, buf, keep);
    if (!msg)
        msg = "out of memory while reporting an error";
    ctx->diags[ctx->n_diags++] = (attnc_diag){sev, code, loc, msg};
}

void diag_error(attnc_ctx *ctx, attnc_status code, attnc_loc loc, const char *fmt, ...) {
    if (ctx->n_errors == ATTNC_MAX_ERRORS) {
        ctx->n_errors++;
        diag_note(ctx, (attnc_loc){loc.file, 0, 0}, "too many errors; stopping after %d",
                  ATTNC_MAX_ERRORS);
    }
    if (ctx->n_errors > ATTNC_MAX_ERRORS)
        return;
    ctx->n_errors++;
    va_list ap;
    va_start(ap, fmt);
    add(ctx, ATTNC_SEV_ERROR, code, loc, fmt, ap);
    va_end(ap);
}

void diag_note(attnc_ctx *ctx, attnc_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add(ctx, ATTNC_SEV_NOTE, ATTNC_OK, loc, fmt, ap);
    va_end(ap);
}

void diag_warning(attnc_ctx *ctx, attnc_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add(ctx, ATTNC_SEV_WARNING, ATTNC_OK, loc, fmt, ap);
    va_end(ap);
}

attnc_status diag_first_code(const attnc_ctx *ctx) {
    for (size_t i = 0; i < ctx->n_diags; i++)
        if (ctx->diags[i].sev == ATTNC_SEV_ERROR)
            return ctx->diags[i].code;
    return ctx->n_errors ? ATTNC_E_NOMEM : ATTNC_OK; /* an error too big to record */
}

/* ---- the known word nearest to a typo ------------------------------------ */

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return SIZE_MAX;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (tolower((unsigned char)a[i - 1]) != b[j - 1]);
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[lb];
}

const char *attnc_suggest(const char *word, const char *const *known, size_t n) {
    if (!word || !known)
        return NULL;
    const char *best = NULL;
    size_t best_d = SIZE_MAX, len = strlen(word);
    for (size_t i = 0; i < n; i++) {
        size_t d = known[i] ? edit_distance(word, known[i]) : SIZE_MAX;
        if (d < best_d) {
            best_d = d;
            best = known[i];
        }
    }
    size_t limit = len < 6 ? 2 : len / 3 + 1;
    return best_d <= limit ? best : NULL;
}

attnc_status diag_read_file(attnc_ctx *ctx, attnc_loc at, const char *path, const char *what,
                            uint64_t max, char **text, size_t *len) {
    FILE *fp = fopen(path, "rb");
    struct stat sb;
    if (!fp) {
        diag_error(ctx, ATTNC_E_IO, at, "cannot open %s: %s", what, strerror(errno));
        return ATTNC_E_IO;
    }
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        diag_error(ctx, ATTNC_E_IO, at, "not a regular file");
        fclose(fp);
        return ATTNC_E_IO;
    }
    if ((uintmax_t)sb.st_size > max) {
        diag_error(ctx, ATTNC_E_IO, at, "%s is %lld bytes; the limit is %llu", what,
                   (long long)sb.st_size, (unsigned long long)max);
        fclose(fp);
        return ATTNC_E_IO;
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)sb.st_size, fp) : 0;
    bool bad = !buf || ferror(fp);
    fclose(fp);
    if (bad) {
        attnc_status st = buf ? ATTNC_E_IO : ATTNC_E_NOMEM;
        diag_error(ctx, st, at, "cannot read %s", what);
        free(buf);
        return st;
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    return ATTNC_OK;
}

double base_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* Integers as integers; else the shortest text that reads back as d. */
const char *base_num(double d, char *buf, size_t n) {
    if (d == (double)(long long)d && d > -1e15 && d < 1e15) {
        snprintf(buf, n, "%lld", (long long)d);
        return buf;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    return buf;
}
