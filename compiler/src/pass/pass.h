/* pass.h: graph passes and the pipeline that runs them. Each pass is one
 * function over the graph in a file of its own; pass_manager.c lists them
 * in one table, top to bottom, and verifies the graph after each. */
#ifndef ATTNC_PASS_H
#define ATTNC_PASS_H

#include "ir/ir.h"

typedef struct attnc_pass {
    const char *name;    /* "fuse_qkv"; the --after / --disable-pass key */
    const char *summary; /* one line for --list-passes */
    attnc_status (*run)(attnc_ctx *ctx, ir_graph *g, bool *changed);
} attnc_pass;

typedef struct pass_options {
    const char *const *disabled; /* names of passes to skip */
    int n_disabled;
    const char *stop_after; /* NULL = run the whole pipeline */
} pass_options;

ATTNC_HIDDEN int pass_count(void);
ATTNC_HIDDEN const attnc_pass *pass_at(int i);
ATTNC_HIDDEN const attnc_pass *pass_find(const char *name);

/* Runs the pipeline over g; an unknown name in o is an error. */
ATTNC_HIDDEN attnc_status pass_run_pipeline(ir_graph *g, const pass_options *o);

ATTNC_HIDDEN attnc_status pass_mla_absorb(attnc_ctx *ctx, ir_graph *g, bool *changed);
ATTNC_HIDDEN attnc_status pass_fuse_qkv(attnc_ctx *ctx, ir_graph *g, bool *changed);
ATTNC_HIDDEN attnc_status pass_fold_scale(attnc_ctx *ctx, ir_graph *g, bool *changed);
ATTNC_HIDDEN attnc_status pass_rope_epilogue(attnc_ctx *ctx, ir_graph *g, bool *changed);
ATTNC_HIDDEN attnc_status pass_causal_mask(attnc_ctx *ctx, ir_graph *g, bool *changed);
ATTNC_HIDDEN attnc_status pass_flash_attention(attnc_ctx *ctx, ir_graph *g, bool *changed);
ATTNC_HIDDEN attnc_status pass_drop_gqa_expand(attnc_ctx *ctx, ir_graph *g, bool *changed);
ATTNC_HIDDEN attnc_status pass_decode_split(attnc_ctx *ctx, ir_graph *g, bool *changed);
ATTNC_HIDDEN attnc_status pass_dce(attnc_ctx *ctx, ir_graph *g, bool *changed);

/* The live node that produces n's value through views and ROPE (which
 * commutes with scaling), or NULL; shared by passes that look upstream. */
ATTNC_HIDDEN ir_node *pass_source_linear(ir_node *n, int64_t *col0, int64_t *cols);

#endif
