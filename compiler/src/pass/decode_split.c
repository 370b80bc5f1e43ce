/* decode_split: a flash node also gets a path for calls with few new
 * tokens (decode): there the work of one K/V group is only a few query
 * rows against all keys, too little to share among threads by rows, so
 * the keys are cut into chunks computed apart (each a partial softmax:
 * max, sum, weighted V) and merged by log-sum-exp in chunk order. The
 * chunks depend on the key count only, never on the thread count.
 *
 * matches   %o = flash %q, %k, %v ...
 * produces  %o = flash %q, %k, %v ... split_kv<=N
 *           (N = 8 new tokens, fewer when the rows' queries and outputs,
 *           heads x N x head_dim x 8 bytes, would pass 256 KB of a
 *           thread's stack). */
#include "pass/pass.h"

enum { SPLIT_MAX_TOKENS = 8, SPLIT_STACK_BYTES = 256 * 1024 };

attnc_status pass_decode_split(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    (void)ctx;
    /* MLA's values are a view of its cached latent (K's layout), which
     * the split kernel does not read: its decode takes the flash path */
    if (g->cfg.mla_kv_lora_rank > 0)
        return ATTNC_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *f = g->nodes[i];
        if (f->dead || f->op != IR_OP_FLASH || f->split_tokens)
            continue;
        int64_t n = SPLIT_STACK_BYTES / (g->cfg.heads * g->cfg.head_dim * 8);
        f->split_tokens = n < SPLIT_MAX_TOKENS ? n : SPLIT_MAX_TOKENS;
        *changed |= f->split_tokens > 0;
    }
    return ATTNC_OK;
}
