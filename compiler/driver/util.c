/* util.c: option parsing, spec loading and error printing for the driver. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "attnc %s: error: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nsee 'attnc %s --help'\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

static const opt *find_opt(const opt *opts, const char *word, size_t len) {
    for (const opt *o = opts; o->name; o++)
        if ((strlen(o->name) == len && strncmp(o->name, word, len) == 0) ||
            (o->alias && strlen(o->alias) == len && strncmp(o->alias, word, len) == 0))
            return o;
    return NULL;
}

bool parse_opts(const char *cmd, int argc, char **argv, int first, const opt *opts,
                const char **positional, int max_pos, int *n_pos) {
    *n_pos = 0;
    bool only_words = false;
    for (int i = first; i < argc; i++) {
        const char *w = argv[i];
        if (only_words || w[0] != '-' || w[1] == 0) {
            if (*n_pos == max_pos) {
                usage_error(cmd, "unexpected argument '%s'", w);
                return false;
            }
            positional[(*n_pos)++] = w;
            continue;
        }
        if (strcmp(w, "--") == 0) {
            only_words = true;
            continue;
        }
        const char *eq = strchr(w, '=');
        size_t len = eq && w[1] == '-' ? (size_t)(eq - w) : strlen(w);
        const opt *o = find_opt(opts, w, len);
        if (!o) {
            const char *names[64], *near;
            size_t n = 0;
            char word[128];
            snprintf(word, sizeof word, "%.*s", (int)len, w);
            for (const opt *k = opts; k->name && n + 2 <= 64; k++) {
                names[n++] = k->name;
                if (k->alias)
                    names[n++] = k->alias;
            }
            if ((near = attnc_suggest(word, names, n)))
                usage_error(cmd, "unknown option '%s'; did you mean '%s'?", word, near);
            else
                usage_error(cmd, "unknown option '%s'", word);
            return false;
        }
        if (!o->has_arg) {
            if (eq && w[1] == '-') {
                usage_error(cmd, "option '%s' takes no value", o->name);
                return false;
            }
            *o->value = "1";
        } else if (!(eq && w[1] == '-') && i + 1 >= argc) {
            usage_error(cmd, "option '%s' needs a value", o->name);
            return false;
        } else {
            const char *v = eq && w[1] == '-' ? eq + 1 : argv[++i];
            if (!o->n_values) {
                *o->value = v;
            } else if (*o->n_values < o->max_values) {
                o->value[(*o->n_values)++] = v;
            } else {
                usage_error(cmd, "option '%s' given more than %d times", o->name, o->max_values);
                return false;
            }
        }
    }
    return true;
}

bool parse_int(const char *cmd, const char *name, const char *text, int64_t lo, int64_t hi,
               int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < lo || v > hi) {
        usage_error(cmd, "%s expects an integer in %lld..%lld, found '%s'", name, (long long)lo,
                    (long long)hi, text);
        return false;
    }
    *out = v;
    return true;
}

bool parse_shard(const char *cmd, const char *text, attnc_options *o) {
    char *end, *slash = text ? strchr(text, '/') : NULL;
    errno = 0;
    long long i = slash ? strtoll(text, &end, 10) : -1;
    bool ok = slash && end == slash && slash != text;
    long long n = ok ? strtoll(slash + 1, &end, 10) : 0;
    ok = ok && slash[1] && !*end && !errno && n >= 1 && n <= ATTN_MAX_HEADS && i >= 0 && i < n;
    if (!ok) {
        usage_error(cmd, "--shard expects I/N with 1 <= N <= %d and 0 <= I < N, found '%s'",
                    ATTN_MAX_HEADS, text ? text : "");
        return false;
    }
    o->shard_index = i, o->shard_count = n;
    return true;
}

bool parse_dtype(const char *cmd, const char *name, const char *text, bool blocks,
                 attn_dtype *out) {
    for (int t = 0; t < ATTN_DTYPE_COUNT; t++) {
        if (strcmp(text, attn_dtype_name((attn_dtype)t)) == 0 &&
            (blocks || attn_dtype_block((attn_dtype)t) == 1)) {
            *out = (attn_dtype)t;
            return true;
        }
    }
    usage_error(cmd, "%s expects f32, f16, bf16%s, found '%s'", name,
                blocks ? ", q8_0 or q4_0" : "", text);
    return false;
}

int print_diags(const attnc_ctx *ctx, attnc_status st) {
    for (size_t i = 0; i < attnc_diag_count(ctx); i++) {
        char buf[1536];
        attnc_diag_format(attnc_diag_get(ctx, i), buf, sizeof buf);
        fprintf(stderr, "%s\n", buf);
    }
    switch (st) {
    case ATTNC_OK: return EXIT_OK;
    case ATTNC_E_IO:
    case ATTNC_E_YAML:
    case ATTNC_E_SPEC: return EXIT_INPUT;
    case ATTNC_E_SHAPE:
    case ATTNC_E_LLVM:
    case ATTNC_E_NOMEM:
    case ATTNC_E_INVALID: /* the driver passed a bad argument: its bug */
    case ATTNC_STATUS_COUNT: break;
    }
    return EXIT_INTERNAL;
}

int load_spec(const char *path, attn_config *cfg) {
    attnc_ctx *ctx = attnc_ctx_new();
    if (!ctx) {
        fprintf(stderr, "attnc: error: out of memory\n");
        return EXIT_INTERNAL;
    }
    int rc = print_diags(ctx, attnc_spec_load_file(ctx, path, cfg));
    attnc_ctx_free(ctx);
    return rc;
}

int load_spec_shard(const char *path, const attnc_options *o, attn_config *cfg) {
    int rc = load_spec(path, cfg);
    if (rc != EXIT_OK || o->shard_count <= 0)
        return rc;
    attn_msg m;
    attn_config whole = *cfg;
    if (attn_config_shard(&whole, o->shard_index, o->shard_count, cfg, &m) != ATTN_OK) {
        fprintf(stderr, "attnc: error: %s: --shard %lld/%lld: %s\n", path,
                (long long)o->shard_index, (long long)o->shard_count, m.text);
        return EXIT_INPUT;
    }
    return EXIT_OK;
}

int runtime_error(attn_status st, const attn_msg *msg) {
    fprintf(stderr, "attnc: error: %s\n", msg && msg->text[0] ? msg->text : attn_status_str(st));
    return st == ATTN_E_NOMEM ? EXIT_INTERNAL : EXIT_INPUT;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool check_pass_names(const char *cmd, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        bool known = false;
        for (int p = 0; attnc_pass_name(p); p++)
            known |= strcmp(attnc_pass_name(p), names[i]) == 0;
        if (!known) {
            usage_error(cmd, "unknown pass '%s' (attnc ir --list-passes names them)", names[i]);
            return false;
        }
    }
    return true;
}

const char *cache_result_name(attnc_cache_result r) {
    static const char *const names[ATTNC_CACHE_RESULT_COUNT] = {"off", "miss", "hit"};
    return (unsigned)r < ATTNC_CACHE_RESULT_COUNT ? names[r] : "?";
}

int compile_report(attnc_ctx *ctx, attnc_status st) {
    if (st != ATTNC_OK && !attnc_diag_count(ctx)) /* no context, or out of memory */
        fprintf(stderr, "attnc: error: %s\n", attnc_status_str(st));
    int rc = print_diags(ctx, st);
    attnc_ctx_free(ctx);
    return rc;
}
