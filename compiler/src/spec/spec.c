/* spec.c: the spec stage's public entry points: read a file (bounded),
 * parse it (spec_yaml.c), validate it (spec_check.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    FILE *fp = fopen(path, "rb");
    struct stat sb;
    if (!fp) {
        diag_error(ctx, ATTNC_E_IO, at, "cannot open spec: %s", strerror(errno));
        return ATTNC_E_IO;
    }
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        diag_error(ctx, ATTNC_E_IO, at, "not a regular file");
        fclose(fp);
        return ATTNC_E_IO;
    }
    if ((uintmax_t)sb.st_size > SPEC_MAX_BYTES) {
        diag_error(ctx, ATTNC_E_IO, at, "spec is %lld bytes; the limit is %u",
                   (long long)sb.st_size, SPEC_MAX_BYTES);
        fclose(fp);
        return ATTNC_E_IO;
    }
    char *text = malloc((size_t)sb.st_size + 1);
    size_t len = text ? fread(text, 1, (size_t)sb.st_size, fp) : 0;
    bool bad = !text || ferror(fp);
    fclose(fp);
    if (bad) {
        diag_error(ctx, text ? ATTNC_E_IO : ATTNC_E_NOMEM, at, "cannot read spec");
        free(text);
        return text ? ATTNC_E_IO : ATTNC_E_NOMEM;
    }
    attnc_status st = load_string(ctx, path, text, len, out, locs);
    free(text);
    return st;
}
