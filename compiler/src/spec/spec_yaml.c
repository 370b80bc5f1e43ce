/* spec_yaml.c: libyaml events -> a tree of located nodes (the only file
 * that sees libyaml). Aliases are refused, so an alias bomb costs nothing;
 * nesting is capped at SPEC_MAX_DEPTH. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "spec/spec.h"

static attnc_loc loc_of(const char *file, yaml_mark_t m) {
    return (attnc_loc){file, (uint32_t)m.line + 1, (uint32_t)m.column + 1};
}

static void add_child(ynode *parent, ynode *child) {
    if (parent->last)
        parent->last->next = child;
    else
        parent->first = child;
    parent->last = child;
    parent->n++;
}

static void syntax_error(attnc_ctx *ctx, const char *file, const yaml_parser_t *p, const char *text,
                         size_t len) {
    const char *problem = p->problem ? p->problem : "malformed YAML";
    if (p->error == YAML_READER_ERROR) {
        /* the reader gives a byte offset, not a mark */
        attnc_loc at = {file, 1, 1};
        for (size_t i = 0; i < p->problem_offset && i < len; i++, at.col++)
            if (text[i] == '\n')
                at.line++, at.col = 0;
        diag_error(ctx, ATTNC_E_YAML, at, "not valid UTF-8: %s (byte 0x%02x)", problem,
                   (unsigned)p->problem_value & 0xffu);
    } else if (p->context)
        diag_error(ctx, ATTNC_E_YAML, loc_of(file, p->problem_mark),
                   "YAML syntax error: %s (%s at %zu:%zu)", problem, p->context,
                   p->context_mark.line + 1, p->context_mark.column + 1);
    else
        diag_error(ctx, ATTNC_E_YAML, loc_of(file, p->problem_mark), "YAML syntax error: %s",
                   problem);
}

attnc_status spec_yaml_read(attnc_ctx *ctx, const char *file, const char *text, size_t len,
                            ynode **root) {
    yaml_parser_t p;
    yaml_event_t ev;
    ynode *stack[SPEC_MAX_DEPTH + 1];
    int depth = 0, docs = 0;
    bool done = false, ok = true;

    *root = NULL;
    if (!yaml_parser_initialize(&p)) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){file, 0, 0}, "out of memory");
        return ATTNC_E_NOMEM;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    while (ok && !done) {
        if (!yaml_parser_parse(&p, &ev)) {
            syntax_error(ctx, file, &p, text, len);
            break;
        }
        attnc_loc at = loc_of(file, ev.start_mark);
        ynode *n = NULL;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = true; break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                diag_error(ctx, ATTNC_E_YAML, at, "a spec holds one YAML document, found a second");
                ok = false;
            }
            break;
        case YAML_ALIAS_EVENT:
            diag_error(ctx, ATTNC_E_YAML, at, "YAML aliases (*%s) are not allowed in a spec",
                       (const char *)ev.data.alias.anchor);
            ok = false;
            break;
        case YAML_SCALAR_EVENT:
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT:
            n = arena_alloc(&ctx->arena, sizeof *n);
            if (!n) {
                ok = false;
                break;
            }
            n->loc = at;
            if (ev.type == YAML_SCALAR_EVENT) {
                n->kind = YNODE_SCALAR;
                n->len = ev.data.scalar.length;
                n->str = arena_strndup(&ctx->arena, (const char *)ev.data.scalar.value, n->len);
                n->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
                if (!n->str)
                    ok = false;
            } else {
                n->kind = ev.type == YAML_MAPPING_START_EVENT ? YNODE_MAP : YNODE_SEQ;
            }
            if (depth > 0)
                add_child(stack[depth - 1], n);
            else
                *root = n;
            if (n->kind != YNODE_SCALAR) {
                if (depth == SPEC_MAX_DEPTH) {
                    diag_error(ctx, ATTNC_E_YAML, at, "nesting deeper than %d levels",
                               SPEC_MAX_DEPTH);
                    ok = false;
                    break;
                }
                stack[depth++] = n;
            }
            break;
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT: depth--; break;
        case YAML_NO_EVENT:
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT: break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    if (ctx->arena.failed && ok) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){file, 0, 0}, "out of memory");
    }
    return diag_first_code(ctx);
}
