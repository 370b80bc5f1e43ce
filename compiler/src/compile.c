/* compile.c: the compiler's public entry points that span stages: spec ->
 * graph IR -> passes (and, for the JIT, codegen and emission). */
#include <string.h>

#include "pass/pass.h"

attnc_options attnc_options_default(void) {
    return (attnc_options){0};
}

const char *attnc_pass_name(int i) {
    const attnc_pass *p = pass_at(i);
    return p ? p->name : NULL;
}

const char *attnc_pass_summary(int i) {
    const attnc_pass *p = pass_at(i);
    return p ? p->summary : NULL;
}

/* Loads the spec and runs the pipeline (stopping after `after`, which may
 * be "lower"); the graph lives in ctx's arena. */
ATTNC_HIDDEN attnc_status compile_graph(attnc_ctx *ctx, const char *spec_path,
                                        const attnc_options *opt, const char *after,
                                        ir_graph **out);

attnc_status compile_graph(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                           const char *after, ir_graph **out) {
    attn_config cfg;
    spec_locs locs;
    ir_graph *g = NULL;
    attnc_status st = spec_load_file(ctx, spec_path, &cfg, &locs);
    if (st == ATTNC_OK)
        st = ir_build(ctx, &cfg, &locs, &g);
    if (st != ATTNC_OK)
        return st;
    pass_options po = {0};
    if (opt) {
        po.disabled = opt->disabled_passes;
        po.n_disabled = opt->n_disabled_passes;
    }
    if (after && strcmp(after, "lower") == 0) {
        po.n_disabled = 0;
        st = ir_verify(g);
    } else {
        po.stop_after = after;
        st = pass_run_pipeline(g, &po);
    }
    if (st == ATTNC_OK)
        *out = g;
    return st;
}

attnc_status attnc_ir_text(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                           const char *after_pass, const char **text) {
    if (!ctx || !spec_path || !text)
        return ATTNC_E_IO;
    ir_graph *g;
    attnc_status st = compile_graph(ctx, spec_path, opt, after_pass, &g);
    if (st != ATTNC_OK)
        return st;
    *text = ir_print(g);
    if (!*text) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory printing the graph");
        return ATTNC_E_NOMEM;
    }
    return ATTNC_OK;
}
