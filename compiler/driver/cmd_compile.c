/* cmd_compile.c: `attnc compile`: a spec to an object file (or assembly or
 * LLVM IR) defining <name>_kernels(), and optionally its header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char compile_usage[] =
    "usage: attnc compile SPEC -o FILE [--header FILE.h] [--emit obj|asm|llvm]\n"
    "                     [--target TRIPLE] [--cpu NAME] [--features LIST]\n"
    "                     [--disable-pass NAME]... [--no-cache] [--shard I/N]\n"
    "\n"
    "Compiles SPEC ahead of time. The object defines\n"
    "  const attn_kernels *NAME_kernels(void);\n"
    "(NAME from the spec), which the header declares; link both with libattn and\n"
    "run them with attn_block_new(NAME_kernels(), ...). The object needs nothing\n"
    "but libc and libm. Same spec, target and options: byte-identical output.\n"
    "\n"
    "  -o FILE           output; written only when everything succeeded\n"
    "  --header FILE.h   also write the header (spec and options in a comment)\n"
    "  --emit KIND       obj (default), asm or llvm\n"
    "  --target TRIPLE   e.g. aarch64-linux-gnu (default: this host)\n"
    "  --cpu NAME        e.g. x86-64-v3, generic (default: this host's CPU, or the\n"
    "                    target's generic CPU with --target)\n"
    "  --features LIST   LLVM feature string, e.g. +avx2,+fma\n"
    "  --disable-pass P  skip a graph pass (repeatable)\n"
    "  --no-cache        neither read nor write the kernel cache (attnc cache --help)\n"
    "  --shard I/N       shard I of N of the heads (tensor parallelism): the K/V\n"
    "                    groups [I*G/N, (I+1)*G/N) and their query heads; the\n"
    "                    forward gives a partial output, summing to the whole\n"
    "                    block's over the N shards (G must be a multiple of N)\n";

#if defined(__x86_64__)
#define PORTABLE_HINT "--cpu x86-64-v3 runs on any AVX2 machine"
#else
#define PORTABLE_HINT "--cpu generic runs on any machine of the architecture"
#endif

int cmd_compile(int argc, char **argv) {
    const char *help = NULL, *output = NULL, *header = NULL, *emit = "obj";
    const char *disabled[32], *pos[1], *no_cache = NULL, *shard = NULL;
    int n_disabled = 0, n_pos;
    attnc_options o = attnc_options_default();
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--output", "-o", true, &output, NULL, 0},
        {"--header", NULL, true, &header, NULL, 0},
        {"--emit", NULL, true, &emit, NULL, 0},
        {"--target", NULL, true, &o.target, NULL, 0},
        {"--cpu", NULL, true, &o.cpu, NULL, 0},
        {"--features", NULL, true, &o.features, NULL, 0},
        {"--disable-pass", NULL, true, disabled, &n_disabled, 32},
        {"--no-cache", NULL, false, &no_cache, NULL, 0},
        {"--shard", NULL, true, &shard, NULL, 0},
        {0},
    };
    if (!parse_opts("compile", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(compile_usage, stdout);
        return EXIT_OK;
    }
    if (n_pos != 1 || !output)
        return usage_error("compile", "expected one SPEC file and -o");
    static const char *const kinds[ATTNC_EMIT_COUNT] = {"obj", "asm", "llvm"};
    int kind = -1;
    for (int i = 0; i < ATTNC_EMIT_COUNT; i++)
        if (strcmp(emit, kinds[i]) == 0)
            kind = i;
    if (kind < 0)
        return usage_error("compile", "--emit expects obj, asm or llvm, found '%s'", emit);
    if (!check_pass_names("compile", disabled, n_disabled) ||
        (shard && !parse_shard("compile", shard, &o)))
        return EXIT_USAGE;
    o.disabled_passes = disabled;
    o.n_disabled_passes = n_disabled;
    o.no_cache = no_cache != NULL;
    attnc_ctx *cx = attnc_ctx_new();
    int rc = compile_report(
        cx, attnc_compile_file(cx, pos[0], &o, (attnc_emit_kind)kind, output, header));
    if (rc != EXIT_OK)
        return rc;
    printf("wrote %s%s%s\n", output, header ? " and " : "", header ? header : "");
    char cpu[128], names[512];
    uint32_t features;
    if (!o.cpu && !o.target &&
        attnc_spec_cpu_features(NULL, pos[0], &o, cpu, sizeof cpu, &features) == ATTNC_OK) {
        attn_cpu_feature_names(features, names, sizeof names);
        printf("for this machine's CPU, %s: the code needs %s; a CPU without them refuses "
               "it (%s)\n",
               cpu, features ? names : "no optional feature", PORTABLE_HINT);
    }
    return EXIT_OK;
}
