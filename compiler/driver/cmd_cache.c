/* cmd_cache.c: `attnc cache info|clear`: the kernel cache's directory,
 * entries and size, and emptying it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char cache_usage[] =
    "usage: attnc cache info [--dir D]\n"
    "       attnc cache clear [--dir D]\n"
    "\n"
    "JIT compiles (run, bench, the C API) and attnc compile keep what they\n"
    "compile in the kernel cache and reuse it when the same spec is compiled\n"
    "again with the same passes, target, CPU and features by the same attnc and\n"
    "LLVM. It lives in $ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else\n"
    "~/.cache/attnc; --no-cache on run, bench and compile bypasses it.\n"
    "\n"
    "  info       print the directory, its entries and their size in bytes\n"
    "  clear      remove every entry (safe while other processes compile)\n"
    "  --dir D    this directory instead\n";

int cmd_cache(int argc, char **argv) {
    const char *help = NULL, *dir_opt = NULL, *pos[1];
    int n_pos;
    const opt opts[] = {
        {"--help", "-h", false, &help, NULL, 0},
        {"--dir", NULL, true, &dir_opt, NULL, 0},
        {0},
    };
    if (!parse_opts("cache", argc, argv, 1, opts, pos, 1, &n_pos))
        return EXIT_USAGE;
    if (help) {
        fputs(cache_usage, stdout);
        return EXIT_OK;
    }
    if (n_pos != 1)
        return usage_error("cache", "expected info or clear");
    static const char *const words[] = {"info", "clear"};
    bool info = strcmp(pos[0], "info") == 0;
    if (!info && strcmp(pos[0], "clear") != 0) {
        const char *near = attnc_suggest(pos[0], words, 2);
        if (near)
            return usage_error("cache", "unknown action '%s'; did you mean '%s'?", pos[0], near);
        return usage_error("cache", "unknown action '%s'; expected info or clear", pos[0]);
    }
    char dir[4096];
    attnc_options o = attnc_options_default();
    o.cache_dir = dir_opt;
    if (attnc_cache_dir(&o, dir, sizeof dir) != ATTNC_OK || !dir[0]) {
        fprintf(stderr, "attnc: error: cache: no cache directory: set $ATTNC_CACHE_DIR or $HOME\n");
        return EXIT_INPUT;
    }
    attnc_cache_stats st;
    attnc_ctx *cx = attnc_ctx_new();
    int rc = compile_report(cx, info ? attnc_cache_stats_get(cx, dir, &st)
                                     : attnc_cache_clear(cx, dir, &st));
    if (rc != EXIT_OK)
        return rc;
    if (info)
        printf("path: %s\nentries: %llu\nbytes: %llu\n", dir, (unsigned long long)st.entries,
               (unsigned long long)st.bytes);
    else
        printf("removed %llu entries (%llu bytes) from %s\n", (unsigned long long)st.entries,
               (unsigned long long)st.bytes, dir);
    return EXIT_OK;
}
