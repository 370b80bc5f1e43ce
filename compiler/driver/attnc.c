/* attnc.c: the command-line driver: dispatches subcommands and implements
 * `check`. The only code that prints diagnostics or chooses exit codes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char usage[] =
    "usage: attnc COMMAND [ARGS]\n"
    "\n"
    "Compiles a YAML attention-block spec into native kernels and runs it.\n"
    "\n"
    "commands:\n"
    "  check SPEC          validate a spec and print it normalized\n"
    "  ir SPEC             print the graph IR after the pass pipeline\n"
    "  opt FILE.ir         run passes over printed graph IR (--spec SPEC --pass P)\n"
    "  compile SPEC -o F   compile ahead of time: an object defining NAME_kernels()\n"
    "  run SPEC ...        run the block on a checkpoint and an input tensor\n"
    "  import CONFIG       write a layer's spec from a config.json or a .gguf file\n"
    "  gen-weights SPEC    write random weights for a spec\n"
    "  gen-input SPEC      write a random input tensor for a spec\n"
    "  bench SPEC          time the kernels on random weights against the roofline\n"
    "  roofline            measure this machine's FMA peak and read bandwidth\n"
    "  cache info|clear    the kernel cache: where, how big; empty it\n"
    "  help [COMMAND]      this text, or one command's ('attnc COMMAND --help')\n"
    "  --version           print attnc's version\n"
    "\n"
    "'attnc COMMAND --help' describes one command.\n"
    "exit codes: 0 ok, 1 usage, 2 bad input (spec, weights, tensors), 3 internal\n";

static const char check_usage[] =
    "usage: attnc check SPEC\n"
    "\n"
    "Validates SPEC and prints it as normalized YAML with every default filled in.\n"
    "Every error is reported as FILE:LINE:COL: error: MESSAGE (exit 2).\n";

static int cmd_check(int argc, char **argv) {
    const char *help = NULL, *pos[1];
    int n_pos;
    const opt opts[] = {{"--help", "-h", false, &help, NULL, 0}, {0}};
    if (!parse_opts("check", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(check_usage, stdout);
        return EXIT_OK;
    }
    if (n_pos != 1)
        return usage_error("check", "expected one SPEC file");
    attn_config cfg;
    int rc = load_spec(pos[0], &cfg);
    if (rc != EXIT_OK)
        return rc;
    char *yaml = attnc_spec_to_yaml(&cfg);
    if (!yaml) {
        fprintf(stderr, "attnc: error: out of memory\n");
        return EXIT_INTERNAL;
    }
    fputs(yaml, stdout);
    free(yaml);
    return EXIT_OK;
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } cmds[] = {
        {"check", cmd_check},
        {"ir", cmd_ir},
        {"opt", cmd_opt},
        {"compile", cmd_compile},
        {"run", cmd_run},
        {"import", cmd_import},
        {"gen-weights", cmd_gen_weights},
        {"gen-input", cmd_gen_input},
        {"bench", cmd_bench},
        {"roofline", cmd_roofline},
        {"cache", cmd_cache},
    };
    if (argc < 2) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    const char *c = argv[1];
    size_t n_cmds = sizeof cmds / sizeof cmds[0];
    if (!strcmp(c, "help") && argc > 2) { /* attnc help run: run --help */
        for (size_t i = 0; i < n_cmds; i++)
            if (!strcmp(argv[2], cmds[i].name))
                return cmds[i].run(2, (char *[]){argv[2], "--help", NULL});
        c = argv[2]; /* unknown: said below, with a suggestion */
    } else if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        fputs(usage, stdout);
        return EXIT_OK;
    }
    if (!strcmp(c, "--version")) {
        printf("attnc %s\n", ATTNC_VERSION);
        return EXIT_OK;
    }
    const char *names[sizeof cmds / sizeof cmds[0]];
    for (size_t i = 0; i < n_cmds; i++) {
        if (!strcmp(c, cmds[i].name) && c == argv[1])
            return cmds[i].run(argc - 1, argv + 1);
        names[i] = cmds[i].name;
    }
    const char *near = attnc_suggest(c, names, n_cmds);
    if (near)
        fprintf(stderr, "attnc: error: unknown command '%s'; did you mean '%s'?\n\n%s", c, near,
                usage);
    else
        fprintf(stderr, "attnc: error: unknown command '%s'\n\n%s", c, usage);
    return EXIT_USAGE;
}
