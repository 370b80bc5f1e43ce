/* compile.h: the pipeline up to the fused graph, shared by the public
 * entry points (IR text, JIT, object emission). */
#ifndef ATTNC_COMPILE_H
#define ATTNC_COMPILE_H

#include "pass/pass.h"

/* Loads the spec and runs the pipeline (stopping after `after`, which may
 * be "lower"); the graph lives in ctx's arena. Stage times go to *t when
 * not NULL. */
ATTNC_HIDDEN attnc_status compile_graph(attnc_ctx *ctx, const char *spec_path,
                                        const attnc_options *opt, const char *after, ir_graph **out,
                                        attnc_timings *t);
/* The same from a loaded spec (locs: where its keys were). */
ATTNC_HIDDEN attnc_status compile_graph_of(attnc_ctx *ctx, const attn_config *cfg,
                                           const spec_locs *locs, const attnc_options *opt,
                                           const char *after, ir_graph **out, attnc_timings *t);
/* Loads the spec at spec_path as opt asks: its config, or (opt's
 * shard_count > 0) that of shard shard_index of it (attn_config_shard). */
ATTNC_HIDDEN attnc_status compile_load_spec(attnc_ctx *ctx, const char *spec_path,
                                            const attnc_options *opt, attn_config *cfg,
                                            spec_locs *locs);
ATTNC_HIDDEN double compile_now_ms(void);

#endif
