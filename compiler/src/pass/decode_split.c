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
 *           thread's stack).
 *
 * MLA: the flash kernel computes the chunks itself, over its own items
 * of query rows (its values are a view of the cached latent, which the
 * split kernel does not read), so its stack does not grow with N; N is
 * then bounded by the partials, 16 chunks x heads x N x (the output's
 * head_dim + 2) floats, to 4 MiB a sequence, and is 1 at least:
 * deepseek_v3 (128 heads of 512 latent values) 1, deepseek_v2_lite 7. */
#include "pass/pass.h"

enum {
    SPLIT_MAX_TOKENS = 8,
    SPLIT_STACK_BYTES = 256 * 1024,
    SPLIT_PARTS_BYTES = 4 << 20,
};

attnc_status pass_decode_split(attnc_ctx *ctx, ir_graph *g, bool *changed) {
    (void)ctx;
    for (int i = 0; i < g->n_nodes; i++) {
        ir_node *f = g->nodes[i];
        /* a flash of long prefills only (mla_absorb) never has few tokens */
        if (f->dead || f->op != IR_OP_FLASH || f->split_tokens || f->gate > 0)
            continue;
        int64_t n = SPLIT_STACK_BYTES / (ir_cfg_heads(g) * ir_cfg_head_dim(g) * 8);
        if (ir_cfg_mla(g)) {
            n = SPLIT_PARTS_BYTES / (IR_SPLIT_CHUNKS * ir_cfg_heads(g) * (f->ne[0].c + 2) * 4);
            n = n < 1 ? 1 : n;
        }
        f->split_tokens = n < SPLIT_MAX_TOKENS ? n : SPLIT_MAX_TOKENS;
        *changed |= f->split_tokens > 0;
    }
    return ATTNC_OK;
}
