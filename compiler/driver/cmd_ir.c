/* cmd_ir.c: `attnc ir`: the graph IR of a spec, after lowering, after one
 * pass, or after the whole pipeline. */
#include <stdio.h>
#include <string.h>

#include "util.h"

static const char ir_usage[] =
    "usage: attnc ir SPEC [--after PASS] [--disable-pass NAME]... [--list-passes]\n"
    "\n"
    "Prints the graph IR of SPEC after the whole pass pipeline: the config it\n"
    "was built for on 'config FIELD=VALUE ...' lines, then one node a line,\n"
    "  %ID = OP OPERANDS ATTRIBUTES : DTYPE[SHAPE]  ; LINE:COL of the spec key\n"
    "with ne[0] innermost, S the new tokens and T the cached plus new tokens.\n"
    "attnc opt reads it back.\n"
    "\n"
    "  --after PASS         stop after PASS; 'lower' prints the unfused graph\n"
    "  --disable-pass NAME  skip a pass (repeatable)\n"
    "  --list-passes        name the passes in pipeline order\n";

int cmd_ir(int argc, char **argv) {
    const char *help = NULL, *after = NULL, *list = NULL, *disabled[32], *pos[1];
    int n_disabled = 0, n_pos;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--after", NULL, true, &after, NULL, 0},
        {"--disable-pass", NULL, true, disabled, &n_disabled, 32},
        {"--list-passes", NULL, false, &list, NULL, 0},
        {0},
    };
    if (!parse_opts("ir", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(ir_usage, stdout);
        return EXIT_OK;
    }
    if (list) {
        for (int i = 0; attnc_pass_name(i); i++)
            printf("%-16s %s\n", attnc_pass_name(i), attnc_pass_summary(i));
        return EXIT_OK;
    }
    if (n_pos != 1)
        return usage_error("ir", "expected one SPEC file");
    if ((after && strcmp(after, "lower") != 0 && !check_pass_names("ir", &after, 1)) ||
        !check_pass_names("ir", disabled, n_disabled))
        return EXIT_USAGE;
    attnc_options o = attnc_options_default();
    o.disabled_passes = disabled;
    o.n_disabled_passes = n_disabled;
    attnc_ctx *ctx = attnc_ctx_new();
    if (!ctx)
        return EXIT_INTERNAL;
    const char *text = NULL;
    attnc_status st = attnc_ir_text(ctx, pos[0], &o, after, &text);
    int rc = print_diags(ctx, st);
    if (rc == EXIT_OK)
        fputs(text, stdout);
    attnc_ctx_free(ctx);
    return rc;
}

static const char opt_usage[] =
    "usage: attnc opt FILE.ir [--spec SPEC] [--pass NAME]...\n"
    "\n"
    "Reads the graph IR in FILE.ir as `attnc ir SPEC` prints it: the config\n"
    "lines (every field of the config the graph was built for), then one\n"
    "node a line. Checks it (the verifier; every shape is inferred again and\n"
    "must be the printed one, and every node's attributes the ones the\n"
    "config gives it: RoPE's base, the mask's window are edited on the\n"
    "config lines), runs the passes named, in the order given, over it, and\n"
    "prints the result: a pass can be run on its own, on a graph written or\n"
    "edited by hand (tests/passes).\n"
    "\n"
    "  --spec SPEC   the spec of a graph without config lines (a spec given\n"
    "                with config lines must have the same config)\n"
    "  --pass NAME   a pass to run (repeatable; attnc ir --list-passes)\n";

int cmd_opt(int argc, char **argv) {
    const char *help = NULL, *spec = NULL, *passes[32], *pos[1];
    int n_passes = 0, n_pos;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--spec", NULL, true, &spec, NULL, 0},
        {"--pass", NULL, true, passes, &n_passes, 32},
        {0},
    };
    if (!parse_opts("opt", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(opt_usage, stdout);
        return EXIT_OK;
    }
    if (n_pos != 1)
        return usage_error("opt", "expected one FILE.ir");
    if (!check_pass_names("opt", passes, n_passes))
        return EXIT_USAGE;
    attnc_ctx *ctx = attnc_ctx_new();
    if (!ctx)
        return EXIT_INTERNAL;
    const char *text = NULL;
    attnc_status st = attnc_opt_text(ctx, spec, pos[0], passes, n_passes, &text);
    int rc = print_diags(ctx, st);
    if (rc == EXIT_OK)
        fputs(text, stdout);
    attnc_ctx_free(ctx);
    return rc;
}
