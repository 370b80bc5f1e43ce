/* compile.c: the compiler's public entry points that span stages: spec ->
 * graph IR -> passes (and, for the JIT, codegen and emission). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile.h"

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

double compile_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

attnc_status compile_load_spec(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                               attn_config *cfg, spec_locs *locs) {
    attnc_status st = spec_load_file(ctx, spec_path, cfg, locs);
    if (st != ATTNC_OK || !opt || opt->shard_count <= 0)
        return st;
    attn_msg why;
    attn_config whole = *cfg;
    if (attn_config_shard(&whole, opt->shard_index, opt->shard_count, cfg, &why) != ATTN_OK) {
        diag_error(ctx, ATTNC_E_SPEC, (attnc_loc){spec_path, 0, 0}, "--shard %lld/%lld: %s",
                   (long long)opt->shard_index, (long long)opt->shard_count, why.text);
        return ATTNC_E_SPEC;
    }
    return ATTNC_OK;
}

attnc_status compile_graph_of(attnc_ctx *ctx, const attn_config *cfg, const spec_locs *locs,
                              const attnc_options *opt, const char *after, ir_graph **out,
                              attnc_timings *t) {
    ir_graph *g = NULL;
    double t1 = compile_now_ms();
    attnc_status st = ir_build(ctx, cfg, locs, &g);
    double t2 = compile_now_ms();
    if (t)
        t->ir_ms = t2 - t1;
    if (st != ATTNC_OK)
        return st;
    pass_options po = {0};
    if (opt) {
        po.disabled = opt->disabled_passes;
        po.n_disabled = opt->n_disabled_passes;
    }
    if (after && strcmp(after, "lower") == 0) {
        st = ir_verify(g);
    } else {
        po.stop_after = after;
        st = pass_run_pipeline(g, &po);
    }
    if (t)
        t->passes_ms = compile_now_ms() - t2;
    if (st == ATTNC_OK)
        *out = g;
    return st;
}

attnc_status compile_graph(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                           const char *after, ir_graph **out, attnc_timings *t) {
    attn_config cfg;
    spec_locs locs;
    double t0 = compile_now_ms();
    attnc_status st = compile_load_spec(ctx, spec_path, opt, &cfg, &locs);
    if (t)
        t->spec_ms = compile_now_ms() - t0;
    return st == ATTNC_OK ? compile_graph_of(ctx, &cfg, &locs, opt, after, out, t) : st;
}

attnc_status attnc_ir_text(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                           const char *after_pass, const char **text) {
    if (!ctx || !spec_path || !text)
        return ATTNC_E_INVALID;
    ir_graph *g;
    attnc_status st = compile_graph(ctx, spec_path, opt, after_pass, &g, NULL);
    if (st != ATTNC_OK)
        return st;
    *text = ir_print(g);
    if (!*text) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory printing the graph");
        return ATTNC_E_NOMEM;
    }
    return ATTNC_OK;
}

attnc_status attnc_opt_text(attnc_ctx *ctx, const char *spec_path, const char *ir_path,
                            const char *const *passes, int n_passes, const char **text) {
    if (!ctx || !ir_path || !text || n_passes < 0 || (n_passes && !passes))
        return ATTNC_E_INVALID;
    attn_config cfg;
    spec_locs locs;
    attnc_status st = spec_path ? spec_load_file(ctx, spec_path, &cfg, &locs) : ATTNC_OK;
    if (st != ATTNC_OK)
        return st;
    for (int i = 0; i < n_passes; i++)
        if (!passes[i] || !pass_find(passes[i])) {
            diag_error(ctx, ATTNC_E_SPEC, (attnc_loc){0}, "unknown pass '%s'",
                       passes[i] ? passes[i] : "(null)");
            return ATTNC_E_SPEC;
        }
    char *src;
    size_t len;
    ir_graph *g;
    if ((st = diag_read_file(ctx, (attnc_loc){ir_path, 0, 0}, ir_path, "IR file", 64u << 20, &src,
                             &len)) != ATTNC_OK)
        return st;
    st = ir_parse(ctx, spec_path ? &cfg : NULL, spec_path ? &locs : NULL, ir_path, src, &g);
    free(src);
    if (st != ATTNC_OK)
        return st;
    for (int i = 0; i < n_passes; i++) {
        bool changed = false;
        if ((st = pass_find(passes[i])->run(ctx, g, &changed)) != ATTNC_OK)
            return st;
        ir_recount_uses(g);
        if ((st = ir_verify(g)) != ATTNC_OK) {
            diag_note(ctx, (attnc_loc){0}, "the graph broke in pass '%s'", passes[i]);
            return st;
        }
    }
    if (!(*text = ir_print(g))) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory printing the graph");
        return ATTNC_E_NOMEM;
    }
    return ATTNC_OK;
}
