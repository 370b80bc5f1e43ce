/* pass_manager.c: the pipeline, top to bottom. After each pass the use
 * counts are recomputed and the graph verified, so a pass that breaks the
 * graph fails at once, naming itself. */
#include <string.h>

#include "pass/pass.h"

static const attnc_pass pipeline[] = {
    {"mla_absorb",
     "multi-head latent attention scores the cached latent itself (queries go into latent space, "
     "outputs come out of it; no per-head K or V) in all calls but long prefills into an empty "
     "sequence, which keep the expanded form",
     pass_mla_absorb},
    {"fuse_qkv", "q, k and v projections become one linear over packed weights", pass_fuse_qkv},
    {"fold_scale", "the score scale moves into the q projection's epilogue", pass_fold_scale},
    {"rope_epilogue",
     "RoPE moves into the q/k projection's epilogue, which also stores k and v into the cache",
     pass_rope_epilogue},
    {"drop_gqa_expand", "K/V head repetition becomes an index mapping; nothing is copied",
     pass_drop_gqa_expand},
    {"causal_mask",
     "a mask_mod that hides every key after its query (q - kv >= 0, kv <= q, as a conjunct) "
     "adds the causal mask under causal: false: causal key ranges, the expression on cut tiles "
     "only",
     pass_causal_mask},
    {"flash_attention",
     "scores, scale, softcap, mask, softmax and p.v become one tiled online-softmax node",
     pass_flash_attention},
    {"decode_split",
     "calls with few new tokens split the keys of flash attention across threads, merged in a "
     "fixed order",
     pass_decode_split},
    {"dce", "nodes whose values nobody uses are removed", pass_dce},
};

int pass_count(void) {
    return (int)(sizeof pipeline / sizeof pipeline[0]);
}

const attnc_pass *pass_at(int i) {
    return i >= 0 && i < pass_count() ? &pipeline[i] : NULL;
}

const attnc_pass *pass_find(const char *name) {
    for (int i = 0; i < pass_count(); i++)
        if (strcmp(pipeline[i].name, name) == 0)
            return &pipeline[i];
    return NULL;
}

static bool is_disabled(const pass_options *o, const char *name) {
    for (int i = 0; o && i < o->n_disabled; i++)
        if (strcmp(o->disabled[i], name) == 0)
            return true;
    return false;
}

attnc_status pass_run_pipeline(ir_graph *g, const pass_options *o) {
    attnc_loc none = {0};
    for (int i = 0; o && i < o->n_disabled; i++)
        if (!pass_find(o->disabled[i])) {
            diag_error(g->ctx, ATTNC_E_SPEC, none, "unknown pass '%s'", o->disabled[i]);
            return ATTNC_E_SPEC;
        }
    if (o && o->stop_after) {
        if (!pass_find(o->stop_after)) {
            diag_error(g->ctx, ATTNC_E_SPEC, none, "unknown pass '%s'", o->stop_after);
            return ATTNC_E_SPEC;
        }
        if (is_disabled(o, o->stop_after)) {
            diag_error(g->ctx, ATTNC_E_SPEC, none, "pass '%s' is both disabled and asked for",
                       o->stop_after);
            return ATTNC_E_SPEC;
        }
    }
    attnc_status st = ir_verify(g);
    for (int i = 0; st == ATTNC_OK && i < pass_count(); i++) {
        const attnc_pass *p = &pipeline[i];
        if (is_disabled(o, p->name))
            continue;
        bool changed = false;
        st = p->run(g->ctx, g, &changed);
        ir_recount_uses(g);
        if (st == ATTNC_OK && (st = ir_verify(g)) != ATTNC_OK)
            diag_note(g->ctx, none, "the graph broke in pass '%s'", p->name);
        if (o && o->stop_after && strcmp(o->stop_after, p->name) == 0)
            break;
    }
    return st;
}

ir_node *pass_source_linear(ir_node *n, int64_t *col0, int64_t *cols) {
    *col0 = 0;
    *cols = -1;
    for (; n; n = n->args[0]) {
        if (n->op == IR_OP_LINEAR) {
            if (*cols < 0)
                *cols = n->ne[0].c;
            return n;
        }
        if (n->n_uses != 1)
            return NULL; /* someone else would see the scaled value */
        if (n->op == IR_OP_SLICE) {
            if (*cols < 0)
                *cols = n->cols;
            *col0 += n->offset;
        } else if (n->op != IR_OP_ROPE && n->op != IR_OP_SPLIT_HEADS) {
            return NULL; /* only views and rotations commute with scaling */
        }
    }
    return NULL;
}
