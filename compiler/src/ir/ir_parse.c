/* ir_parse.c: ir_print's text read back into a graph (attnc opt). The
 * config the graph was built for first, every field of attn_config.def:
 *   config name=seed heads=12 kv_groups=4 head_dim=64 ...
 * then one node a line:
 *   %27 = linear %0, %26, %31 scale=0.0625 cols=4096 : f32[8192, S]  ; 8:1
 * ids, operands, the attributes ir_ops.def gives the op, dtype, shape and
 * the spec key's line:col. Every shape is inferred again and must be the
 * printed one, and every node's attributes must be the ones the printer
 * gives it with that config (RoPE's base, the mask's window come from
 * the config lines), so a hand-edited file can neither lie about shapes
 * nor have an edit ignored. A text without config lines (older files,
 * hand-written tests) takes its config from the spec and is not held to
 * the printer's attributes. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

typedef struct parser {
    attnc_ctx *ctx;
    ir_graph *g;
    const char *path;
    uint32_t line;
    ir_node **by_id; /* [cap] */
    int cap, max_id;
    bool strict; /* config lines given: attributes must print as written */
} parser;

static attnc_status fail(parser *p, const char *at, const char *line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static attnc_status fail(parser *p, const char *at, const char *line, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t col = at && line && at >= line ? (uint32_t)(at - line) + 1 : 1;
    diag_error(p->ctx, ATTNC_E_SPEC, (attnc_loc){p->path, p->line, col}, "%s", msg);
    return ATTNC_E_SPEC;
}

static const char *skip_spaces(const char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* An integer at *s (advanced past it); false if none. */
static bool int_at(const char **s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(*s, &end, 10);
    if (end == *s || errno)
        return false;
    *v = x;
    *s = end;
    return true;
}

/* One dim as put_dim prints it: terms c, m*S, S, m*T, S*T joined by + or -. */
static bool dim_at(const char **s, ir_dim *d) {
    *d = (ir_dim){0, 0, 0, 0};
    const char *q = *s;
    bool any = false;
    for (;;) {
        int sign = 1;
        if (*q == '-' || (*q == '+' && any)) {
            sign = *q == '-' ? -1 : 1;
            q++;
        } else if (any) {
            break;
        }
        int64_t m = 1;
        bool num = *q >= '0' && *q <= '9';
        if (num && !int_at(&q, &m))
            return false;
        if (num && *q != '*') { /* a constant term */
            d->c += sign * m;
        } else {
            if (num)
                q++; /* the '*' */
            int64_t *to = NULL;
            if (strncmp(q, "S*T", 3) == 0)
                to = &d->st, q += 3;
            else if (*q == 'S')
                to = &d->s, q++;
            else if (*q == 'T')
                to = &d->t, q++;
            if (!to)
                return false;
            *to += sign * m;
        }
        any = true;
    }
    *s = q;
    return any;
}

/* A word of the attribute list: up to a space (or the end). */
static size_t word_len(const char *s) {
    return strcspn(s, " \t");
}

static bool word_is(const char *w, size_t n, const char *want) {
    return strlen(want) == n && strncmp(w, want, n) == 0;
}

/* "key=" at w: the value after it, or NULL. */
static const char *value_of(const char *w, size_t n, const char *key) {
    size_t k = strlen(key);
    return n > k + 1 && strncmp(w, key, k) == 0 && w[k] == '=' ? w + k + 1 : NULL;
}

static bool num_value(const char *v, const char *end, double *out) {
    char *e;
    errno = 0;
    double x = strtod(v, &e);
    if (e != end || errno)
        return false;
    *out = x;
    return true;
}

static bool int_value(const char *v, const char *end, int64_t *out) {
    const char *q = v;
    return int_at(&q, out) && q == end;
}

/* One attribute word w (n bytes) of node n; false if n's op has no such
 * attribute. Words the printer derives from the config are accepted and
 * skipped. */
static bool attribute(ir_node *n, const char *w, size_t len) {
    const char *end = w + len, *v;
    for (int k = 0; k < 2; k++) /* the gate, of any op (ir_verify checks where) */
        if ((v = value_of(w, len, k ? "unless_prefill>" : "when_prefill>"))) {
            int64_t at;
            if (!int_value(v, end, &at) || at < 1)
                return false;
            n->gate = k ? -at : at;
            return true;
        }
    switch (n->op) {
    case IR_OP_WEIGHT: {
        char name[64];
        if (len >= sizeof name)
            return false;
        memcpy(name, w, len);
        name[len] = 0;
        n->weight = ir_weight_id(name);
        return n->weight >= 0;
    }
    case IR_OP_LINEAR:
        if ((v = value_of(w, len, "scale")))
            return num_value(v, end, &n->scale);
        if ((v = value_of(w, len, "cols")))
            return int_value(v, end, &n->scale_cols);
        if ((v = value_of(w, len, "rope_cols")))
            return int_value(v, end, &n->rope_cols);
        for (int k = 0; k < 2; k++)
            if ((v = value_of(w, len, k ? "cache_v" : "cache_k"))) {
                n->to_cache[k] = true;
                return int_value(v, end, &n->cache_col[k]);
            }
        return false;
    case IR_OP_SLICE:
        if ((v = value_of(w, len, "offset")))
            return int_value(v, end, &n->offset);
        if ((v = value_of(w, len, "cols")))
            return int_value(v, end, &n->cols);
        return false;
    case IR_OP_CACHE_APPEND:
        if (word_is(w, len, "k") || word_is(w, len, "v")) {
            n->cache = *w == 'v';
            return true;
        }
        return word_is(w, len, "stored_by_epilogue") && (n->fused = true);
    case IR_OP_SCALE: return num_value(w, end, &n->scale);
    case IR_OP_SOFTCAP: return num_value(w, end, &n->softcap);
    case IR_OP_FLASH:
        if ((v = value_of(w, len, "scale")))
            return num_value(v, end, &n->scale);
        if ((v = value_of(w, len, "softcap")))
            return num_value(v, end, &n->softcap);
        if ((v = value_of(w, len, "split_kv<")))
            return int_value(v, end, &n->split_tokens);
        if (word_is(w, len, "causal"))
            return (n->causal = true);
        if (word_is(w, len, "alibi"))
            return (n->alibi = true);
        if (word_is(w, len, "score_mod"))
            return (n->score_mod = true);
        if (word_is(w, len, "mask_mod"))
            return (n->mask_mod = true);
        return value_of(w, len, "window") || value_of(w, len, "chunk") || value_of(w, len, "group");
    case IR_OP_QK:
    case IR_OP_PV: return value_of(w, len, "group") != NULL;
    case IR_OP_BY_PREFILL: return (v = value_of(w, len, "tokens")) && int_value(v, end, &n->tokens);
    case IR_OP_MASK:
        return word_is(w, len, "causal") || value_of(w, len, "window") || value_of(w, len, "chunk");
    case IR_OP_ROPE:
    case IR_OP_ROPE_TABLE:
        return value_of(w, len, "base") || value_of(w, len, "style") ||
               value_of(w, len, "rotary_dim") || value_of(w, len, "scaling");
    case IR_OP_QK_NORM:
        return word_is(w, len, "rms") || value_of(w, len, "scope") || value_of(w, len, "eps") ||
               value_of(w, len, "offset");
    case IR_OP_TEMPERATURE:
        return value_of(w, len, "floor_scale") || value_of(w, len, "attn_scale");
    default: return false;
    }
}

static ir_op op_named(const char *s, size_t n) {
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (word_is(s, n, ir_op_name((ir_op)op)))
            return (ir_op)op;
    return IR_OP_COUNT;
}

static attn_dtype dtype_named(const char *s, size_t n) {
    for (int t = 0; t < ATTN_DTYPE_COUNT; t++)
        if (word_is(s, n, attn_dtype_name((attn_dtype)t)))
            return (attn_dtype)t;
    return ATTN_DTYPE_COUNT;
}

/* One "config name=value ..." line into c; seen[i] marks field i. */
static attnc_status config_line(parser *p, const char *line, attn_config *c, bool *seen) {
    size_t nf;
    const attn_config_field *f = attn_config_fields(&nf);
    const char *s = skip_spaces(skip_spaces(line) + 6);
    while (*s) {
        size_t len = word_len(s), eq = strcspn(s, "=");
        if (eq < len && s[eq + 1] == '"') { /* an expression: "text", spaces inside */
            const char *close = strchr(s + eq + 2, '"');
            if (!close)
                return fail(p, s + eq + 1, line, "expected the closing '\"'");
            len = (size_t)(close + 1 - s);
        }
        if (eq >= len)
            return fail(p, s, line, "expected FIELD=VALUE, found '%.*s'", (int)len, s);
        size_t i = 0;
        while (i < nf && !(strlen(f[i].name) == eq && strncmp(f[i].name, s, eq) == 0))
            i++;
        if (i == nf) {
            const char *names[256];
            for (size_t j = 0; j < nf && j < 256; j++)
                names[j] = f[j].name;
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)(eq < 63 ? eq : 63), s);
            const char *near = attnc_suggest(word, names, nf < 256 ? nf : 256);
            return fail(p, s, line, "unknown config field '%s'%s%s%s", word,
                        near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        }
        const char *v = s + eq + 1;
        size_t vl = len - eq - 1;
        char text[96], *end;
        snprintf(text, sizeof text, "%.*s", (int)(vl < 95 ? vl : 95), v);
        char *at = (char *)c + f[i].offset;
        bool ok = vl > 0 && vl < 95;
        errno = 0;
        if (f[i].kind == ATTN_KIND_EXPR) /* "text": no other limit than the field's */
            ok = vl >= 2 && v[0] == '"' && v[vl - 1] == '"' && vl - 2 < ATTN_EXPR_TEXT_MAX;
        switch (f[i].kind) {
        case ATTN_KIND_EXPR:
            if (ok) {
                memset(at, 0, ATTN_EXPR_TEXT_MAX);
                memcpy(at, v + 1, vl - 2);
            }
            break;
        case ATTN_KIND_NAME:
            ok = ok && vl < ATTN_NAME_MAX;
            if (ok) {
                memset(at, 0, ATTN_NAME_MAX);
                memcpy(at, v, vl);
            }
            break;
        case ATTN_KIND_I64:
        case ATTN_KIND_I32: {
            long long x = ok ? strtoll(text, &end, 10) : 0;
            ok = ok && !*end && !errno &&
                 (f[i].kind == ATTN_KIND_I64 || (x >= INT32_MIN && x <= INT32_MAX));
            if (ok && f[i].kind == ATTN_KIND_I64)
                *(int64_t *)at = x;
            else if (ok)
                *(int32_t *)at = (int32_t)x;
            break;
        }
        case ATTN_KIND_F64: {
            double x = ok ? strtod(text, &end) : 0;
            ok = ok && !*end && !errno;
            if (ok)
                *(double *)at = x;
            break;
        }
        case ATTN_KIND_BOOL:
            ok = ok && (strcmp(text, "true") == 0 || strcmp(text, "false") == 0);
            if (ok)
                *(bool *)at = text[0] == 't';
            break;
        default: {
            int e = ir_enum_value(f[i].kind, v, vl);
            ok = e >= 0;
            if (ok)
                memcpy(at, &(int32_t){e}, sizeof(int32_t));
        }
        }
        if (!ok)
            return fail(p, v, line, "config %s: '%.*s' is not a value of it", f[i].name, (int)vl,
                        v);
        if (seen[i])
            return fail(p, s, line, "config %s is given twice", f[i].name);
        seen[i] = true;
        s = skip_spaces(s + len);
    }
    return ATTNC_OK;
}

/* One node line (its text in line, NUL-terminated). */
static attnc_status node_line(parser *p, const char *line, const char *spec_path) {
    const char *s = skip_spaces(line), *start = s;
    int64_t id;
    if (*s != '%' || (s++, !int_at(&s, &id)) || id < 0 || id > 1000000)
        return fail(p, s, line, "expected '%%ID = op ...' (ID a number up to 1000000)");
    s = skip_spaces(s);
    if (*s != '=')
        return fail(p, s, line, "expected '=' after %%%lld", (long long)id);
    s = skip_spaces(s + 1);
    size_t n = word_len(s);
    ir_op op = op_named(s, n);
    if (op == IR_OP_COUNT)
        return fail(p, s, line, "unknown op '%.*s'", (int)n, s);
    s = skip_spaces(s + n);
    ir_node *args[IR_MAX_ARGS];
    int nargs = 0;
    while (*s == '%') {
        const char *at = s++;
        int64_t a;
        if (!int_at(&s, &a) || a < 0 || a >= p->cap || !p->by_id[a])
            return fail(p, at, line, "operand %.*s is not defined on an earlier line",
                        (int)strcspn(at, " ,\t"), at);
        if (nargs == IR_MAX_ARGS)
            return fail(p, at, line, "more than %d operands", IR_MAX_ARGS);
        args[nargs++] = p->by_id[a];
        s = skip_spaces(*s == ',' ? s + 1 : s);
    }
    ir_node *node = ir_new(p->g, op, args, nargs, (attnc_loc){spec_path, 0, 0});
    if (!node)
        return diag_first_code(p->ctx);
    node->id = (int)id;
    const char *attrs = s;
    while (*s && *s != ':') {
        size_t len = word_len(s);
        if (!attribute(node, s, len))
            return fail(p, s, line, "'%.*s' is not an attribute of %s", (int)len, s,
                        ir_op_name(op));
        s = skip_spaces(s + len);
    }
    if (*s != ':')
        return fail(p, s, line, "expected ': dtype[dims]'");
    size_t attrs_len = (size_t)(s - attrs);
    while (attrs_len && (attrs[attrs_len - 1] == ' ' || attrs[attrs_len - 1] == '\t'))
        attrs_len--;
    s = skip_spaces(s + 1);
    size_t tl = strcspn(s, "[");
    attn_dtype dt = dtype_named(s, tl);
    if (dt == ATTN_DTYPE_COUNT || s[tl] != '[')
        return fail(p, s, line, "expected a dtype and '[' (f32[...])");
    s += tl + 1;
    int ndim = 0;
    ir_dim dims[IR_MAX_DIMS];
    while (*s != ']') {
        if (ndim == IR_MAX_DIMS || !dim_at(&s, &dims[ndim]))
            return fail(p, s, line, "expected a dim (a number, S, T or S*T terms) or ']'");
        ndim++;
        s = skip_spaces(*s == ',' ? s + 1 : s);
    }
    s = skip_spaces(s + 1);
    if (*s == ';') { /* the spec key's line:col */
        s = skip_spaces(s + 1);
        int64_t l, c;
        if (!int_at(&s, &l) || *s != ':' || (s++, !int_at(&s, &c)) || l < 0 || c < 0 ||
            l > UINT32_MAX || c > UINT32_MAX)
            return fail(p, s, line, "expected '; line:col'");
        node->loc.line = (uint32_t)l, node->loc.col = (uint32_t)c;
        s = skip_spaces(s);
    }
    if (*s)
        return fail(p, s, line, "unexpected '%s' at the end of the line", s);
    if (node->id < p->cap && p->by_id[node->id])
        return fail(p, start, line, "%%%d is defined twice", node->id);
    if (node->id >= p->cap) {
        int cap = 2 * node->id + 16;
        ir_node **by_id = arena_alloc(&p->ctx->arena, (size_t)cap * sizeof *by_id);
        if (!by_id)
            return diag_first_code(p->ctx);
        if (p->cap)
            memcpy(by_id, p->by_id, (size_t)p->cap * sizeof *by_id);
        p->by_id = by_id, p->cap = cap;
    }
    if (!ir_insert(p->g, node, NULL)) /* its shape, inferred */
        return fail(p, start, line, "%s %%%d: its operands do not fit it (see above)",
                    ir_op_name(op), node->id);
    bool same = node->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = ir_dim_eq(node->ne[d], dims[d]);
    if (!same || node->dt != dt)
        return fail(p, start, line, "%%%d: the printed shape is not what its operands give",
                    node->id);
    if (p->strict) { /* what is written is what the node and the config give */
        const char *want = ir_node_attrs(p->g, node);
        want = want ? skip_spaces(want) : "";
        if (strlen(want) != attrs_len || strncmp(want, attrs, attrs_len) != 0)
            return fail(p, attrs, line,
                        "%%%d: the node and the config lines give the attributes '%s', not "
                        "'%.*s' (attributes the config sets are edited on its lines)",
                        node->id, want, (int)attrs_len, attrs);
    }
    p->by_id[node->id] = node;
    if (node->id > p->max_id)
        p->max_id = node->id;
    return ATTNC_OK;
}

attnc_status ir_parse(attnc_ctx *ctx, const attn_config *cfg, const spec_locs *locs,
                      const char *path, const char *text, ir_graph **out) {
    ir_graph *g = arena_alloc(&ctx->arena, sizeof *g);
    char *copy = text ? arena_strndup(&ctx->arena, text, strlen(text)) : NULL;
    size_t nf;
    attn_config_fields(&nf);
    bool *seen = arena_alloc(&ctx->arena, nf * sizeof *seen);
    if (!g || !copy || !seen) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
        return ATTNC_E_NOMEM;
    }
    memset(g, 0, sizeof *g);
    memset(seen, 0, nf * sizeof *seen);
    g->ctx = ctx;
    parser p = {ctx, g, path, 0, NULL, 0, -1, false};
    const char *spec_path = locs ? locs->key[0].file : "<spec>";
    attn_config own;
    memset(&own, 0, sizeof own);
    bool header = false;
    uint32_t config_at = 0;
    for (char *line = copy, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        p.line++;
        const char *s = skip_spaces(line);
        if (!*s || *s == ';')
            continue;
        if (!header && strncmp(s, "config ", 7) == 0) {
            attnc_status st = config_line(&p, line, &own, seen);
            if (st != ATTNC_OK)
                return st;
            config_at = config_at ? config_at : p.line;
            continue;
        }
        if (!header) {
            if (strncmp(s, "graph ", 6) != 0)
                return fail(&p, s, line, "expected 'config ...' lines or 'graph NAME' first");
            if (config_at) { /* the text's own config: whole, valid, the spec's if given */
                for (size_t i = 0; i < nf; i++) /* an expression not given is none */
                    if (!seen[i] && attn_config_fields(NULL)[i].kind != ATTN_KIND_EXPR)
                        return fail(&p, s, line, "the config lines lack %s",
                                    attn_config_fields(NULL)[i].name);
                attn_msg m;
                const char *diff = cfg ? attn_config_differs(&own, cfg) : NULL;
                if (attn_config_check(&own, &m) != ATTN_OK || diff) {
                    p.line = config_at;
                    return diff ? fail(&p, NULL, NULL, "the config lines and the spec differ in %s",
                                       diff)
                                : fail(&p, NULL, NULL, "the config lines: %s", m.text);
                }
                g->cfg = own;
                p.strict = true;
            } else if (cfg) {
                g->cfg = *cfg;
            } else {
                return fail(&p, s, line,
                            "no config lines: name the spec the graph is of (--spec), or "
                            "print the graph again with attnc ir");
            }
            for (int k = 0; k < SPEC_K_COUNT; k++)
                g->locs.key[k] = locs ? locs->key[k] : (attnc_loc){spec_path, 0, 0};
            const char *name = g->cfg.name;
            size_t n = strlen(name);
            s = skip_spaces(s + 6);
            if (strncmp(s, name, n) != 0 || (s[n] && s[n] != ' ' && s[n] != '\t'))
                return fail(&p, s, line, "the graph is '%.*s'; the %s is '%s'", (int)word_len(s), s,
                            config_at ? "config's name" : "spec", name);
            header = true;
            continue;
        }
        attnc_status st = node_line(&p, line, spec_path);
        if (st != ATTNC_OK)
            return st;
    }
    if (!header)
        return fail(&p, NULL, NULL, "no 'graph NAME' line");
    g->next_id = p.max_id + 1; /* new nodes get ids after the file's, as in the pipeline */
    ir_recount_uses(g);
    attnc_status st = ir_verify(g);
    if (st == ATTNC_OK)
        *out = g;
    return st;
}
