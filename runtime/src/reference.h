/* reference.h: the pieces of the reference engine, exposed to the tests so
 * each rule of the semantics can be checked on its own (not installed). */
#ifndef ATTN_REFERENCE_H
#define ATTN_REFERENCE_H

#include "rt.h"

/* Rotates one head x[head_dim] in place as token position pos. */
RT_HIDDEN void ref_rope_apply(const attn_config *c, const double *inv_freq, int64_t pos, double *x);

/* QK-norm of one token's projected q (n_heads = heads) or k (kv_groups)
 * x[n_heads][head_dim] in place, with weight w (NULL without one). */
RT_HIDDEN void ref_qk_norm(const attn_config *c, const float *w, int64_t n_heads, double *x);

/* Attention of query q[heads][head_dim] at position pos over the n_kv
 * cached tokens k, v [n_kv][kv_groups][head_dim] (positions 0..n_kv-1):
 * scale, softcap, ALiBi, causal/window/chunk mask, softmax (with the
 * heads' sinks[heads] when the config has them), p.v into
 * out[heads][head_dim].
 * probs, if not NULL, receives the weights [heads][n_kv] (0 where masked);
 * scratch holds n_kv doubles. */
RT_HIDDEN void ref_attend(const attn_config *c, int64_t pos, const double *q, int64_t n_kv,
                          const float *k, const float *v, const float *sinks, double *out,
                          double *probs, double *scratch);

/* The values of the expressions' inputs (attn_inputs) a reference
 * attention reads: token input i's values at positions 0..n_token[i]-1
 * (0 elsewhere), sequence input i's value, weight input i's tensor. */
typedef struct ref_values {
    const int32_t *token[ATTN_EXPR_MAX_INPUTS];
    int64_t n_token[ATTN_EXPR_MAX_INPUTS];
    int32_t sequence[ATTN_EXPR_MAX_INPUTS];
    float *const *weight; /* [ATTN_EXPR_MAX_INPUTS] (attn_weights.input) */
} ref_values;

/* ref_attend with the inputs' values in (NULL: every read gives 0). */
RT_HIDDEN void ref_attend_in(const attn_config *c, const ref_values *in, int64_t pos,
                             const double *q, int64_t n_kv, const float *k, const float *v,
                             const float *sinks, double *out, double *probs, double *scratch);

#endif
