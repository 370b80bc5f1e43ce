/* spec.c: the spec stage's public entry points: read a file (bounded),
 * parse it (spec_yaml.c), validate it (spec_check.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec.h"

static attnc_status load_string(attnc_ctx *ctx, const char *name, const char *text, size_t len,
                                attn_config *out, spec_locs *locs) {
    if (!ctx || !text || !out)
        return ATTNC_E_INVALID;
    const char *file =
        arena_strndup(&ctx->arena, name ? name : "<spec>", strlen(name ? name : "<spec>"));
    if (!file)
        return ATTNC_E_NOMEM;
    ynode *root = NULL;
    attnc_status st = spec_yaml_read(ctx, file, text, len, &root);
    if (st != ATTNC_OK)
        return st;
    return spec_check(ctx, file, root, out, locs);
}

attnc_status attnc_spec_load_string(attnc_ctx *ctx, const char *name, const char *text, size_t len,
                                    attn_config *out) {
    return load_string(ctx, name, text, len, out, NULL);
}

attnc_status attnc_spec_load_file(attnc_ctx *ctx, const char *path, attn_config *out) {
    return spec_load_file(ctx, path, out, NULL);
}

attnc_status spec_load_file(attnc_ctx *ctx, const char *path, attn_config *out, spec_locs *locs) {
    if (!ctx || !path || !out)
        return ATTNC_E_INVALID;
    const char *file = arena_strndup(&ctx->arena, path, strlen(path));
    attnc_loc at = {file ? file : "<spec>", 0, 0};
    char *text;
    size_t len;
    attnc_status st = diag_read_file(ctx, at, path, "spec", SPEC_MAX_BYTES, &text, &len);
    if (st != ATTNC_OK)
        return st;
    st = load_string(ctx, path, text, len, out, locs);
    free(text);
    return st;
}

const attn_config_field *spec_plain_field(spec_key k) {
    if (k < SPEC_K_FIRST_PLAIN || k >= SPEC_K_COUNT)
        return NULL;
    size_t n;
    const attn_config_field *f = attn_config_fields(&n);
    for (size_t i = 0, at = SPEC_K_FIRST_PLAIN; i < n; i++)
        if (f[i].plain && at++ == (size_t)k)
            return &f[i];
    return NULL;
}
