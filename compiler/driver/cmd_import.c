/* cmd_import.c: `attnc import`: the spec of one layer's attention from a
 * Hugging Face config.json or a GGUF file (attnc_import, spec_import.c),
 * written atomically or printed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

static const char import_usage[] =
    "usage: attnc import CONFIG [--layer N] [-o SPEC] [--name NAME] [--dtype T]\n"
    "                    [--max-tokens N]\n"
    "\n"
    "Writes the spec of layer N's attention from CONFIG: a Hugging Face\n"
    "config.json or a .gguf file (its metadata). Each key carries a comment\n"
    "naming the field it came from. Families: llama, mistral, qwen2, qwen3,\n"
    "gemma2, gemma3, olmo2, gpt_oss, phi3, falcon, gptj, gpt_neox, bloom (GGUF:\n"
    "llama, qwen2, qwen3, gemma2, gemma3, olmo2, phi3, falcon, gptj, gptneox,\n"
    "bloom). A field that changes attention in a way attnc cannot express is\n"
    "an error naming it.\n"
    "\n"
    "  --layer N        the layer (default 0): window and RoPE may differ by layer\n"
    "  -o, --output F   write the spec to F (default: standard output)\n"
    "  --name NAME      the spec's name (default: MODELTYPE_layerN)\n"
    "  --dtype T        weights dtype f32|f16|bf16|q8_0|q4_0 (default: config.json's\n"
    "                   torch_dtype, a GGUF layer's q weight type; else f32)\n"
    "  --max-tokens N   kv_cache.max_tokens (default: the model's context length,\n"
    "                   at most 8192; 4096 when it names none)\n";

static int write_out(const char *path, const char *text) {
    if (!path) {
        fputs(text, stdout);
        return EXIT_OK;
    }
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp)
        return runtime_error(ATTN_E_NOMEM, NULL);
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
    bool ok = fp && fputs(text, fp) >= 0;
    ok = fp && fclose(fp) == 0 && ok;
    if (fd >= 0 && !fp)
        close(fd);
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "attnc: error: %s: cannot write: %s\n", path, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        free(tmp);
        return EXIT_INPUT;
    }
    free(tmp);
    printf("wrote %s\n", path);
    return EXIT_OK;
}

int cmd_import(int argc, char **argv) {
    const char *help = NULL, *layer_s = NULL, *output = NULL, *name_s = NULL, *dtype_s = NULL;
    const char *max_s = NULL, *pos[1];
    int n_pos;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--layer", NULL, true, &layer_s, NULL, 0},
        {"--output", "-o", true, &output, NULL, 0},
        {"--name", NULL, true, &name_s, NULL, 0},
        {"--dtype", NULL, true, &dtype_s, NULL, 0},
        {"--max-tokens", NULL, true, &max_s, NULL, 0},
        {0},
    };
    if (!parse_opts("import", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(import_usage, stdout);
        return EXIT_OK;
    }
    if (n_pos != 1)
        return usage_error("import", "expected one config.json or .gguf file");
    attnc_import_options io = attnc_import_options_default();
    int64_t layer = 0;
    attn_dtype dt = ATTN_DTYPE_F32;
    if ((layer_s && !parse_int("import", "--layer", layer_s, 0, 1000000, &layer)) ||
        (max_s &&
         !parse_int("import", "--max-tokens", max_s, 1, ATTN_MAX_TOKENS, &io.max_tokens)) ||
        (dtype_s && !parse_dtype("import", "--dtype", dtype_s, true, &dt)))
        return EXIT_USAGE;
    io.name = name_s;
    io.dtype = dtype_s ? (int)dt : -1;
    attnc_ctx *ctx = attnc_ctx_new();
    if (!ctx)
        return runtime_error(ATTN_E_NOMEM, NULL);
    char *text = NULL;
    attnc_status st = attnc_import(ctx, pos[0], layer, &io, &text);
    int rc = print_diags(ctx, st);
    attnc_ctx_free(ctx);
    if (rc != EXIT_OK)
        return rc;
    rc = write_out(output, text);
    free(text);
    return rc;
}
