/* reference.c: the reference engine. Plain loops, double accumulation, one
 * rule per function in the order of README "Semantics"; it defines what
 * every generated kernel must compute. Speed is not a goal: the token loop
 * runs on OpenMP threads only because each token's work is independent, so
 * results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
#include "reference.h"

struct attn_ref {
    const attn_weights *w; /* borrowed */
    attn_config c;
    int64_t cap, len;
    int64_t mem;      /* cross-attention: memory rows in k, v (0 = none yet) */
    float *k, *v;     /* owned: [cap][kv_groups][head_dim], rounded to kv_dtype;
                         MLA: k [cap][kv_lora_rank + qk_rope_head_dim] (c_kv, k_pe), no v */
    double *inv_freq; /* owned: [rotary_dim/2] */
    ref_values in;    /* token values owned: [kv_max_tokens] each, when set */
};

/* YaRN's mscale (Hugging Face modeling_rope_utils.py, get_mscale). */
static double yarn_mscale(double factor, double m) {
    return factor <= 1 ? 1.0 : 0.1 * m * log(factor) + 1.0;
}

double attn_yarn_default_attention_factor(const attn_config *c) {
    /* _compute_yarn_parameters: mscale and mscale_all_dim both nonzero
     * give their ratio, else get_mscale(factor) */
    if (c->rope_mscale != 0 && c->rope_mscale_all_dim != 0)
        return yarn_mscale(c->rope_factor, c->rope_mscale) /
               yarn_mscale(c->rope_factor, c->rope_mscale_all_dim);
    return yarn_mscale(c->rope_factor, 1.0);
}

double attn_mla_softmax_mscale(const attn_config *c) {
    /* modeling_deepseek_v3.py, DeepseekV3Attention.__init__ */
    if (!c || c->rope_style == ATTN_ROPE_NONE || c->rope_scaling != ATTN_SCALING_YARN ||
        c->rope_mscale_all_dim == 0)
        return 1.0;
    double m = yarn_mscale(c->rope_factor, c->rope_mscale_all_dim);
    return m * m;
}

double attn_rope_cos_factor(const attn_config *c) {
    return c->rope_style != ATTN_ROPE_NONE && c->rope_scaling == ATTN_SCALING_YARN
               ? c->rope_attention_factor
               : 1.0;
}

/* YaRN's correction dim of a number of rotations (find_correction_dim). */
static double yarn_dim(const attn_config *c, double rotations) {
    return (double)c->rotary_dim *
           log((double)c->rope_original_max_position / (rotations * 2 * 3.14159265358979323846)) /
           (2 * log(c->rope_base));
}

void attn_rope_inv_freq(const attn_config *c, double *inv_freq) {
    if (c->rope_style == ATTN_ROPE_NONE)
        return;
    int64_t half = c->rotary_dim / 2;
    /* YaRN's ramp from dim low (extrapolated) to high (interpolated):
     * find_correction_range and linear_ramp_factor */
    double low = 0, high = 1;
    if (c->rope_scaling == ATTN_SCALING_YARN) {
        low = yarn_dim(c, c->rope_beta_fast);
        high = yarn_dim(c, c->rope_beta_slow);
        if (c->rope_truncate)
            low = floor(low), high = ceil(high);
        low = low > 0 ? low : 0;
        high = high < (double)(c->rotary_dim - 1) ? high : (double)(c->rotary_dim - 1);
        if (low == high)
            high += 0.001;
    }
    for (int64_t i = 0; i < half; i++) {
        double f = pow(c->rope_base, -2.0 * (double)i / (double)c->rotary_dim);
        switch (c->rope_scaling) {
        case ATTN_SCALING_NONE: break;
        case ATTN_SCALING_LINEAR: f /= c->rope_factor; break;
        case ATTN_SCALING_LLAMA3: {
            /* Llama 3.1: keep high frequencies, divide low ones by factor,
             * interpolate smoothly between the two wavelength bounds. */
            double old = (double)c->rope_original_max_position;
            double low_wavelen = old / c->rope_low_freq_factor;
            double high_wavelen = old / c->rope_high_freq_factor;
            double wavelen = 2.0 * 3.14159265358979323846 / f;
            if (wavelen > low_wavelen) {
                f /= c->rope_factor;
            } else if (wavelen >= high_wavelen && high_wavelen < low_wavelen) {
                double smooth = (old / wavelen - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1.0 - smooth) * f / c->rope_factor + smooth * f;
            }
            break;
        }
        case ATTN_SCALING_YARN: {
            double ramp = ((double)i - low) / (high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            /* ramp 0: extrapolated (f as is), 1: interpolated (f / factor) */
            f = f / c->rope_factor * ramp + f * (1 - ramp);
            break;
        }
        case ATTN_SCALING_COUNT: break;
        }
        inv_freq[i] = f;
    }
}

void attn_alibi_slopes(const attn_config *c, double *slope) {
    /* Hugging Face modeling_bloom.py, build_alibi_tensor: n the largest
     * power of two <= heads, slopes (2^(-8/n))^(h+1) for h < n, then
     * (2^(-4/n))^(1, 3, 5, ..) for the remaining heads */
    int64_t all = c->shard_count > 1 ? c->heads * c->shard_count : c->heads;
    int64_t first = c->shard_count > 1 ? c->heads * c->shard_index : 0, n = 1;
    while (2 * n <= all)
        n *= 2;
    for (int64_t i = 0; i < c->heads; i++) {
        int64_t h = first + i; /* among all heads of the block */
        slope[i] = h < n ? pow(2.0, -8.0 / (double)n * (double)(h + 1))
                         : pow(2.0, -4.0 / (double)n * (double)(2 * (h - n) + 1));
    }
}

int64_t attn_first_key(const attn_config *c, int64_t pos) {
    int64_t first = 0;
    if (c->causal && c->sliding_window > 0 && pos - c->sliding_window + 1 > first)
        first = pos - c->sliding_window + 1;
    if (c->causal && c->chunk > 0 && pos / c->chunk * c->chunk > first)
        first = pos / c->chunk * c->chunk;
    return first;
}

double attn_query_temperature(const attn_config *c, int64_t pos) {
    /* Hugging Face modeling_llama4.py, Llama4TextAttention: attn_scales */
    if (c->temp_floor_scale <= 0)
        return 1.0;
    return log(floor((double)(pos + 1) / (double)c->temp_floor_scale) + 1.0) * c->temp_attn_scale +
           1.0;
}

void ref_rope_apply(const attn_config *c, const double *inv_freq, int64_t pos, double *x) {
    if (c->rope_style == ATTN_ROPE_NONE)
        return;
    int64_t half = c->rotary_dim / 2;
    double af = attn_rope_cos_factor(c); /* YaRN's attention factor, else 1 */
    for (int64_t i = 0; i < half; i++) {
        int64_t ia = c->rope_style == ATTN_ROPE_HALF ? i : 2 * i;
        int64_t ib = c->rope_style == ATTN_ROPE_HALF ? i + half : 2 * i + 1;
        double th = (double)pos * inv_freq[i];
        double cs = cos(th) * af, sn = sin(th) * af, a = x[ia], b = x[ib];
        x[ia] = a * cs - b * sn;
        x[ib] = a * sn + b * cs;
    }
}

/* An operand of a matrix product as compute takes it: with bf16 the f32
 * value rounded to bf16 (round to nearest, ties to even; NaN stays NaN),
 * as PyTorch's bf16 matmul and SDPA read their operands. */
static double operand(const attn_config *c, double x) {
    return c->compute == ATTN_DTYPE_BF16 ? (double)rt_round(ATTN_DTYPE_BF16, (float)x) : x;
}

static bool key_visible(const attn_config *c, int64_t pos, int64_t j) {
    if (!c->causal)
        return true;
    return j <= pos && j >= attn_first_key(c, pos);
}

void ref_qk_norm(const attn_config *c, const float *w, int64_t n_heads, double *x) {
    if (c->qk_norm == ATTN_QK_NORM_NONE)
        return;
    /* x * rsqrt(mean(x^2) + eps) (* weight or (1 + weight)) over each
     * head (scope head) or the whole row (scope all); the weight's index
     * runs over what one normalization covers */
    int64_t len = c->qk_norm == ATTN_QK_NORM_HEAD ? c->head_dim : n_heads * c->head_dim;
    for (int64_t at = 0; at < n_heads * c->head_dim; at += len) {
        double ss = 0;
        for (int64_t i = 0; i < len; i++)
            ss += x[at + i] * x[at + i];
        double r = 1.0 / sqrt(ss / (double)len + c->qk_norm_eps);
        for (int64_t i = 0; i < len; i++) {
            double g = c->qk_norm_weight ? (double)w[i] + c->qk_norm_offset : 1.0;
            x[at + i] = x[at + i] * r * g;
        }
    }
}

/* score_mod and mask_mod, parsed once per ref_attend (NULL: none), their
 * inputs and the values they read. */
typedef struct ref_exprs {
    attn_expr *score, *mask;
    attn_inputs decl;
    const ref_values *in;
} ref_exprs;

/* The config's expression parsed into *e (on the caller's stack: 9 KB
 * each), or NULL for none; attn_config_check has parsed it already. */
static attn_expr *parse_expr(const attn_config *c, bool mask, attn_expr *e, attn_inputs *decl) {
    return attn_config_parse_expr(c, mask, e, decl, NULL) == ATTN_OK && e->n_nodes ? e : NULL;
}

static int32_t token_value(void *ctx, int input, int32_t pos) {
    const ref_exprs *x = ctx;
    return x->in && pos >= 0 && pos < x->in->n_token[input] ? x->in->token[input][pos] : 0;
}

static int32_t sequence_value(void *ctx, int input) {
    const ref_exprs *x = ctx;
    return x->in ? x->in->sequence[input] : 0;
}

static float weight_value(void *ctx, int input, int64_t i, int64_t j) {
    const ref_exprs *x = ctx;
    const attn_expr_input *d = &x->decl.in[input];
    return x->in && x->in->weight ? x->in->weight[input][i * (d->rank > 1 ? d->dims[1] : 1) + j]
                                  : 0;
}

/* The expressions at query position pos, key j, head h (global) of group
 * g; score is scale * q.k. */
static float eval_at(const ref_exprs *x, const attn_expr *e, float score, int64_t pos, int64_t j,
                     int64_t h, int64_t g) {
    attn_expr_env env = {.score = score,
                         .q = (int32_t)pos,
                         .kv = (int32_t)j,
                         .h = (int32_t)h,
                         .g = (int32_t)g,
                         .ctx = (void *)x,
                         .token = token_value,
                         .sequence = sequence_value,
                         .weight = weight_value};
    return attn_expr_eval(e, x->decl.in, &env);
}

static bool mask_holds(const ref_exprs *x, int64_t pos, int64_t j, int64_t h, int64_t g) {
    return !x->mask || eval_at(x, x->mask, 0, pos, j, h, g) != 0;
}

static double score_of(const ref_exprs *x, double score, int64_t pos, int64_t j, int64_t h,
                       int64_t g) {
    return x->score ? (double)eval_at(x, x->score, (float)score, pos, j, h, g) : score;
}

void ref_attend(const attn_config *c, int64_t pos, const double *q, int64_t n_kv, const float *k,
                const float *v, const float *sinks, double *out, double *probs, double *s) {
    ref_attend_in(c, NULL, pos, q, n_kv, k, v, sinks, out, probs, s);
}

void ref_attend_in(const attn_config *c, const ref_values *in, int64_t pos, const double *q,
                   int64_t n_kv, const float *k, const float *v, const float *sinks, double *out,
                   double *probs, double *s) {
    int64_t hd = c->head_dim, vd = attn_v_head_dim(c), group = c->heads / c->kv_groups;
    /* the head and group the expressions see: among all of the block's */
    int64_t h0 = c->shard_count > 1 ? c->heads * c->shard_index : 0;
    attn_expr se, me;
    ref_exprs x = {.in = in};
    x.score = parse_expr(c, false, &se, &x.decl);
    x.mask = parse_expr(c, true, &me, &x.decl);
    double slopes[ATTN_MAX_HEADS];
    if (c->alibi)
        attn_alibi_slopes(c, slopes);
    bool q8q = rt_q8_query(c); /* q quantized (attn_ref_forward): q.k exact, any compute */
    for (int64_t h = 0; h < c->heads; h++) {
        const double *qh = q + h * hd;
        int64_t kvh = h / group, hg = h0 + h, gg = hg / group;
        double slope = c->alibi ? slopes[h] : 0;
        /* a sink (gpt-oss) joins the max and the denominator, attends to nothing */
        double mx = c->sinks ? (double)sinks[h] : -INFINITY;
        for (int64_t j = 0; j < n_kv; j++) {
            if (!key_visible(c, pos, j) || !mask_holds(&x, pos, j, hg, gg)) {
                s[j] = -INFINITY;
                continue;
            }
            const float *kj = k + (j * c->kv_groups + kvh) * hd;
            double dot = 0;
            for (int64_t d = 0; d < hd; d++) /* (q8_query: the blocks' exact sums) */
                dot += q8q ? qh[d] * (double)kj[d] : operand(c, qh[d]) * operand(c, kj[d]);
            double sc = score_of(&x, dot * c->scale, pos, j, hg, gg);
            if (c->softcap > 0)
                sc = c->softcap * tanh(sc / c->softcap);
            if (c->alibi)
                sc -= slope * (double)(pos - j);
            s[j] = sc;
            if (sc > mx)
                mx = sc;
        }
        double sum = c->sinks ? exp((double)sinks[h] - mx) : 0;
        for (int64_t j = 0; j < n_kv; j++) {
            s[j] = s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
            sum += s[j];
        }
        /* a query that sees no key (mask_mod can hide them all) gives 0,
         * as FlexAttention's does */
        if (sum == 0)
            sum = INFINITY;
        double *oh = out + h * vd;
        for (int64_t d = 0; d < vd; d++)
            oh[d] = 0;
        /* compute bf16: o = sum_j bf16(e_j) bf16(v_j) / sum_j e_j, each
         * e_j = exp(s_j - max) against the row's final max */
        bool bf16 = c->compute == ATTN_DTYPE_BF16;
        for (int64_t j = 0; j < n_kv; j++) {
            double p = s[j] / sum;
            if (probs)
                probs[h * n_kv + j] = p;
            if (p == 0)
                continue;
            const float *vj = v + (j * c->kv_groups + kvh) * vd;
            double e = bf16 ? operand(c, s[j]) : p;
            for (int64_t d = 0; d < vd; d++)
                oh[d] += e * operand(c, vj[d]);
        }
        for (int64_t d = 0; bf16 && d < vd; d++)
            oh[d] /= sum;
    }
}

/* activations q8_0: y[n_out] = W . x + b with x (as f32) quantized to
 * ggml's Q8_0 blocks (ggml-quants.c quantize_row_q8_0_ref: d = max|x| /
 * 127 stored as f16, q = round(x / d)), each block's sum d_x * sum q W
 * (W = d_w q_w exactly: the int32 sum of ggml's vec_dot_q8_0_q8_0 and
 * vec_dot_q4_0_q8_0 times both scales). A row holding a value that is
 * not finite, or whose scale overflows f16, gives NaN. */
static void linear_q8(const float *W, const float *b, int64_t n_out, int64_t n_in, const double *x,
                      double *y) {
    int64_t nb = n_in / RT_QK;
    float *xf = malloc((size_t)n_in * sizeof *xf);
    unsigned char *blk = malloc((size_t)nb * rt_quant_block_bytes(ATTN_DTYPE_Q8_0));
    bool bad = !xf || !blk;
    for (int64_t i = 0; !bad && i < n_in; i++)
        xf[i] = (float)x[i];
    bad = bad || rt_quant_row(ATTN_DTYPE_Q8_0, xf, blk, n_in) >= 0;
    for (int64_t o = 0; o < n_out; o++) {
        const float *row = W + o * n_in;
        double acc = b ? (double)b[o] : 0.0;
        for (int64_t k = 0; !bad && k < nb; k++) {
            const unsigned char *q = blk + k * (int64_t)rt_quant_block_bytes(ATTN_DTYPE_Q8_0);
            double s = 0;
            for (int j = 0; j < RT_QK; j++)
                s += (double)(int8_t)q[2 + j] * row[k * RT_QK + j];
            acc += (double)rt_f16_to_f32((uint16_t)(q[0] | q[1] << 8)) * s;
        }
        y[o] = bad ? NAN : acc;
    }
    free(xf);
    free(blk);
}

/* y[n_out] = W[n_out, n_in] . x + b, in double; compute bf16 rounds x
 * and weights of a float dtype (a block format's d * q are taken as
 * they are); activations q8_0 with int8 weights: linear_q8 (float
 * weights: activations q8_0 is there for a q8_0 cache's q.k alone). */
static void linear(const attn_config *c, const float *W, const float *b, int64_t n_out,
                   int64_t n_in, const double *x, double *y) {
    if (c->activations == ATTN_DTYPE_Q8_0 && attn_dtype_block(c->dtype) > 1) {
        linear_q8(W, b, n_out, n_in, x, y);
        return;
    }
    bool round_w = attn_dtype_block(c->dtype) == 1;
    double *xr = NULL;
    if (c->compute != ATTN_DTYPE_F32 && !(xr = malloc((size_t)n_in * sizeof *xr))) {
        for (int64_t o = 0; o < n_out; o++)
            y[o] = NAN;
        return;
    }
    for (int64_t i = 0; xr && i < n_in; i++)
        xr[i] = operand(c, x[i]);
    const double *xs = xr ? xr : x;
    for (int64_t o = 0; o < n_out; o++) {
        const float *row = W + o * n_in;
        /* four partial sums: exact to double's rounding in any order,
         * and four times as fast as one chain of dependent adds */
        double acc[4] = {0, 0, 0, 0};
        int64_t i = 0;
        if (xr && round_w)
            for (; i < n_in; i++)
                acc[i & 3] += operand(c, row[i]) * xs[i];
        for (; i + 4 <= n_in; i += 4)
            for (int k = 0; k < 4; k++)
                acc[k] += (double)row[i + k] * xs[i + k];
        for (; i < n_in; i++)
            acc[0] += (double)row[i] * xs[i];
        y[o] = (b ? (double)b[o] : 0.0) + ((acc[0] + acc[1]) + (acc[2] + acc[3]));
    }
    free(xr);
}

static void widen(const float *x, int64_t n, double *xd) {
    for (int64_t i = 0; i < n; i++)
        xd[i] = x[i];
}

attn_status attn_ref_new(const attn_weights *w, int64_t capacity_tokens, attn_ref **out,
                         attn_msg *m) {
    if (!w || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_ref_new: NULL argument");
    attn_status st = attn_config_check(&w->cfg, m);
    if (st)
        return st;
    const attn_config *c = &w->cfg;
    int64_t cap = capacity_tokens > 0 ? capacity_tokens : c->kv_max_tokens;
    if (cap > c->kv_max_tokens)
        return rt_fail(m, ATTN_E_INVALID, "capacity %lld exceeds kv_cache.max_tokens %lld",
                       (long long)cap, (long long)c->kv_max_tokens);
    attn_ref *r = calloc(1, sizeof *r);
    if (r) {
        r->k = malloc((size_t)(cap * attn_cache_columns(c, 0)) * sizeof(float));
        r->v = malloc((size_t)(cap * attn_cache_columns(c, 1) + 1) * sizeof(float));
        r->inv_freq = malloc((size_t)(c->rotary_dim / 2 + 1) * sizeof(double));
    }
    if (!r || !r->k || !r->v || !r->inv_freq) {
        attn_ref_free(r);
        return rt_fail(m, ATTN_E_NOMEM, "out of memory for a %lld-token reference cache",
                       (long long)cap);
    }
    r->w = w;
    r->c = *c;
    r->cap = cap;
    r->in.weight = w->input;
    if (c->rope_style != ATTN_ROPE_NONE)
        attn_rope_inv_freq(c, r->inv_freq);
    *out = r;
    return ATTN_OK;
}

void attn_ref_free(attn_ref *r) {
    if (!r)
        return;
    free(r->k);
    free(r->v);
    free(r->inv_freq);
    for (int i = 0; i < ATTN_EXPR_MAX_INPUTS; i++)
        free((void *)r->in.token[i]);
    free(r);
}

attn_status attn_ref_set_input(attn_ref *r, const char *name, int64_t first, int64_t n,
                               const int32_t *values, attn_msg *m) {
    attn_inputs decl;
    if (!r || !name || (n > 0 && !values))
        return rt_fail(m, ATTN_E_INVALID, "attn_ref_set_input: NULL argument");
    attn_inputs_parse(r->c.inputs, &decl, NULL); /* checked with the config */
    int k = attn_inputs_find(&decl, name);
    if (k < 0 || decl.in[k].per == ATTN_INPUT_WEIGHT)
        return rt_fail(m, ATTN_E_INVALID, "the block has no %s input '%s'",
                       k < 0 ? "token or sequence" : "settable", name);
    if (decl.in[k].per == ATTN_INPUT_SEQUENCE) {
        if (first != 0 || n != 1)
            return rt_fail(m, ATTN_E_INVALID, "'%s' is one value per sequence", name);
        r->in.sequence[k] = values[0];
        return ATTN_OK;
    }
    int64_t max = r->c.kv_max_tokens;
    if (first < 0 || n < 0 || n > max || first > max - n)
        return rt_fail(m, ATTN_E_INVALID, "positions %lld.. of '%s' are past %lld",
                       (long long)first, name, (long long)max);
    if (!r->in.token[k] && !(r->in.token[k] = calloc((size_t)max, sizeof(int32_t))))
        return rt_fail(m, ATTN_E_NOMEM, "out of memory for input '%s'", name);
    memcpy((int32_t *)r->in.token[k] + first, values, (size_t)n * sizeof *values);
    if (first + n > r->in.n_token[k])
        r->in.n_token[k] = first + n;
    return ATTN_OK;
}

int64_t attn_ref_len(const attn_ref *r) {
    return r ? r->len : -1;
}

attn_status attn_ref_truncate(attn_ref *r, int64_t n_tokens) {
    if (!r || n_tokens < 0 || n_tokens > r->len)
        return ATTN_E_INVALID;
    r->len = n_tokens;                             /* a memory stays */
    for (int i = 0; i < ATTN_EXPR_MAX_INPUTS; i++) /* token values past it go */
        if (r->in.n_token[i] > n_tokens) {
            memset((int32_t *)r->in.token[i] + n_tokens, 0,
                   (size_t)(r->in.n_token[i] - n_tokens) * sizeof(int32_t));
            r->in.n_token[i] = n_tokens;
        }
    return ATTN_OK;
}

/* Width of what K and V are projected from: x, or (cross-attention) the
 * memory. */
static int64_t kv_in(const attn_config *c) {
    return c->memory_dim > 0 ? c->memory_dim : c->d_model;
}

/* Projects one token's (or memory row's) K and V, rotates K, rounds both
 * to the cache dtype and stores them at cache row pos. tmp holds kv_in +
 * kv_groups*head_dim. */
static void append_kv(attn_ref *r, const float *x, int64_t pos, double *tmp) {
    const attn_config *c = &r->c;
    const attn_weights *w = r->w;
    int64_t hd = c->head_dim, kvd = c->kv_groups * hd, in = kv_in(c);
    float *krow = r->k + pos * kvd, *vrow = r->v + pos * kvd;
    double *xd = tmp + kvd;
    widen(x, in, xd);
    linear(c, w->wk, w->bk, kvd, in, xd, tmp);
    ref_qk_norm(c, w->k_norm, c->kv_groups, tmp);
    for (int64_t g = 0; g < c->kv_groups; g++)
        ref_rope_apply(c, r->inv_freq, pos, tmp + g * hd);
    for (int64_t i = 0; i < kvd; i++)
        krow[i] = (float)tmp[i];
    rt_round_row(c->kv_dtype, krow, kvd);
    linear(c, w->wv, w->bv, kvd, in, xd, tmp);
    for (int64_t i = 0; i < kvd; i++)
        vrow[i] = (float)tmp[i];
    rt_round_row(c->kv_dtype, vrow, kvd);
}

/* ---- multi-head latent attention ------------------------------------------
 * Hugging Face modeling_deepseek_v3.py, DeepseekV3Attention.forward: the
 * latent c_kv (normalized) and the rotated k_pe are what is cached; each
 * forward expands every cached token's keys and values per head through
 * kv_b_proj, as that forward does. RoPE turns pairs of q_pe and k_pe as
 * ref_rope_apply does (rope_interleave's de-interleaving permutes q_pe
 * and k_pe alike, so the dot products are the same). */

/* x[n] * rsqrt(mean(x^2) + eps) * w: DeepseekV3RMSNorm. */
static void rms_norm(const float *w, int64_t n, double eps, double *x) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] * r * (double)w[i];
}

/* One token's latent: kv_a_proj_with_mqa(x) = [c; k_pe], c normalized,
 * k_pe rotated at pos, rounded to the cache dtype into cache row pos.
 * tmp holds kv_lora_rank + qk_rope_head_dim + d_model. */
static void mla_append(attn_ref *r, const float *x, int64_t pos, double *tmp) {
    const attn_config *c = &r->c;
    int64_t kvl = c->mla_kv_lora_rank, n = attn_cache_columns(c, 0);
    double *xd = tmp + n;
    widen(x, c->d_model, xd);
    linear(c, r->w->wkv_a, NULL, n, c->d_model, xd, tmp);
    rms_norm(r->w->kv_a_norm, kvl, c->mla_eps, tmp);
    ref_rope_apply(c, r->inv_freq, pos, tmp + kvl);
    float *row = r->k + pos * n;
    for (int64_t i = 0; i < n; i++)
        row[i] = (float)tmp[i];
    rt_round_row(c->kv_dtype, row, n);
}

/* One token's queries q[heads][head_dim], the last qk_rope_head_dim of
 * each head rotated; tmp holds q_lora_rank doubles. */
static void mla_query(const attn_ref *r, const double *xd, int64_t pos, double *q, double *tmp) {
    const attn_config *c = &r->c;
    const attn_weights *w = r->w;
    int64_t hd = c->head_dim, qd = c->heads * hd, ql = c->mla_q_lora_rank;
    if (ql == 0) {
        linear(c, w->wq, NULL, qd, c->d_model, xd, q);
    } else {
        linear(c, w->wq_a, NULL, ql, c->d_model, xd, tmp);
        rms_norm(w->q_a_norm, ql, c->mla_eps, tmp);
        linear(c, w->wq_b, NULL, qd, ql, tmp, q);
    }
    for (int64_t h = 0; h < c->heads; h++)
        ref_rope_apply(c, r->inv_freq, pos, q + h * hd + c->mla_qk_nope_head_dim);
}

/* Every cached token's keys k [n][heads][head_dim] = [W_kb[h] . c_kv;
 * k_pe] and values v [n][heads][v_head_dim] = W_vb[h] . c_kv, in f32, as
 * the modeling file expands them (modeling_deepseek_v3.py,
 * DeepseekV3Attention.forward: kv_b_proj of the normalized latent).
 * compute bf16 rounds c_kv and (float dtypes) kv_b_proj as operands, as
 * linear does; the results are q.k's and p.v's operands, rounded there. */
static void mla_expand(const attn_ref *r, int64_t n, float *k, float *v) {
    const attn_config *c = &r->c;
    int64_t kvl = c->mla_kv_lora_rank, nope = c->mla_qk_nope_head_dim, hd = c->head_dim;
    int64_t vd = c->mla_v_head_dim, H = c->heads;
    bool round_w = attn_dtype_block(c->dtype) == 1; /* a block format's d * q as they are */
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++) {
        const float *lat = r->k + j * attn_cache_columns(c, 0);
        double cl[ATTN_MAX_HEAD_DIM]; /* c_kv as an operand (kvl < that: check_mla) */
        for (int64_t i = 0; i < kvl; i++)
            cl[i] = operand(c, lat[i]);
        for (int64_t h = 0; h < H; h++) {
            /* kv_b_proj's rows of head h: nope rows of K, then vd of V */
            const float *wb = r->w->wkv_b + h * (nope + vd) * kvl;
            for (int64_t o = 0; o < nope + vd; o++) {
                double acc = 0;
                for (int64_t i = 0; i < kvl; i++)
                    acc +=
                        (round_w ? operand(c, wb[o * kvl + i]) : (double)wb[o * kvl + i]) * cl[i];
                if (o < nope)
                    k[(j * H + h) * hd + o] = (float)acc;
                else
                    v[(j * H + h) * vd + o - nope] = (float)acc;
            }
            for (int64_t i = nope; i < hd; i++) /* k_pe, shared by the heads */
                k[(j * H + h) * hd + i] = lat[kvl + i - nope];
        }
    }
}

/* K/V rows base.. of rows [n, kv_in] (x or the memory), in parallel. */
static attn_status project_rows(attn_ref *r, int64_t n, const float *rows, int64_t base,
                                attn_msg *m) {
    const attn_config *c = &r->c;
    size_t scratch = (size_t)(attn_cache_columns(c, 0) + kv_in(c)); /* a K row, its input */
    bool oom = false;
#pragma omp parallel
    {
        double *tmp = malloc(scratch * sizeof *tmp);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n; t++)
            if (tmp && c->mla_kv_lora_rank > 0)
                mla_append(r, rows + t * kv_in(c), base + t, tmp);
            else if (tmp)
                append_kv(r, rows + t * kv_in(c), base + t, tmp);
        if (!tmp) {
#pragma omp atomic write
            oom = true;
        }
        free(tmp);
    }
    return oom ? rt_fail(m, ATTN_E_NOMEM, "out of memory for reference scratch") : ATTN_OK;
}

attn_status attn_ref_set_memory(attn_ref *r, int64_t n_rows, const float *memory, attn_msg *m) {
    if (!r || !memory)
        return rt_fail(m, ATTN_E_INVALID, "attn_ref_set_memory: NULL argument");
    if (r->c.memory_dim == 0)
        return rt_fail(m, ATTN_E_INVALID, "attn_ref_set_memory: '%s' is self-attention", r->c.name);
    if (n_rows < 1 || n_rows > r->cap)
        return rt_fail(m, ATTN_E_INVALID,
                       "attn_ref_set_memory: %lld rows; the cache holds 1 to %lld",
                       (long long)n_rows, (long long)r->cap);
    if (r->len > 0)
        return rt_fail(m, ATTN_E_INVALID,
                       "attn_ref_set_memory: the memory can be replaced only before the first "
                       "forward");
    r->mem = 0;
    attn_status st = project_rows(r, n_rows, memory, 0, m);
    if (st == ATTN_OK)
        r->mem = n_rows;
    return st;
}

attn_status attn_ref_forward(attn_ref *r, int64_t n_tokens, const float *x, float *y, attn_msg *m) {
    if (!r || n_tokens < 0 || (n_tokens > 0 && (!x || !y)))
        return rt_fail(m, ATTN_E_INVALID, "attn_ref_forward: bad argument");
    bool cross = r->c.memory_dim > 0;
    if (cross && r->mem == 0)
        return rt_fail(m, ATTN_E_INVALID, "attn_ref_forward: cross-attention without a memory");
    if (!cross && n_tokens > r->cap - r->len)
        return rt_fail(m, ATTN_E_CAPACITY,
                       "%lld new tokens do not fit: %lld of %lld cache positions are used",
                       (long long)n_tokens, (long long)r->len, (long long)r->cap);
    const attn_config *c = &r->c;
    const attn_weights *w = r->w;
    bool mla = c->mla_kv_lora_rank > 0;
    int64_t hd = c->head_dim, qd = c->heads * hd, od = c->heads * attn_v_head_dim(c);
    bool q8q = rt_q8_query(c);
    int64_t D = c->d_model, ql = c->mla_q_lora_rank;
    /* cross-attention: the keys are the memory's rows */
    int64_t n_kv = cross ? r->mem : r->len + n_tokens, base = r->len;
    bool oom = false;

    /* All K/V first: a non-causal query sees every key of this call. */
    attn_status st = cross ? ATTN_OK : project_rows(r, n_tokens, x, base, m);
    if (st)
        return st;
    /* MLA: every head's keys and values, from the latents */
    const float *K = r->k, *V = r->v;
    float *kx = NULL, *vx = NULL;
    if (mla) {
        kx = malloc((size_t)(n_kv * qd) * sizeof *kx);
        vx = malloc((size_t)(n_kv * od) * sizeof *vx);
        if (!kx || !vx) {
            free(kx);
            free(vx);
            return rt_fail(m, ATTN_E_NOMEM, "out of memory expanding %lld tokens' keys",
                           (long long)n_kv);
        }
        mla_expand(r, n_kv, kx, vx);
        K = kx, V = vx;
    }

#pragma omp parallel
    {
        /* q [qd], o [od], x and y [D], scores [n_kv], MLA's q latent [ql] */
        double *q = malloc((size_t)(qd + od + 2 * D + n_kv + ql) * sizeof *q);
        float *qf = malloc((size_t)hd * sizeof *qf); /* a head's q as f32 (q8_query) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_tokens; t++) {
            if (!q || !qf)
                continue;
            int64_t pos = base + t;
            double *o = q + qd, *xd = o + od, *yd = xd + D, *s = yd + D, *qa = s + n_kv;
            widen(x + t * D, D, xd);
            if (mla) {
                mla_query(r, xd, pos, q, qa);
            } else {
                linear(c, w->wq, w->bq, qd, D, xd, q);
                ref_qk_norm(c, w->q_norm, c->heads, q);
                for (int64_t h = 0; h < c->heads; h++)
                    ref_rope_apply(c, r->inv_freq, pos, q + h * hd);
            }
            double temp = attn_query_temperature(c, pos);
            for (int64_t i = 0; temp != 1.0 && i < qd; i++)
                q[i] *= temp;
            /* activations q8_0 over a q8_0 cache: each head's q (f32, as
             * the kernels hold it) quantized to Q8_0 blocks for q.k, as
             * ggml quantizes it for a q8_0 K (ggml-cpu ops.cpp,
             * flash_attn_ext: q_to_vec_dot); d_q q8 times the cache's d_k
             * k8 is exact in double, so q.k is ggml's int32 sums times the
             * two scales (vec_dot_q8_0_q8_0); the scale comes after */
            for (int64_t h = 0; q8q && h < c->heads; h++) {
                for (int64_t d = 0; d < hd; d++)
                    qf[d] = (float)q[h * hd + d];
                rt_round_row(ATTN_DTYPE_Q8_0, qf, hd);
                for (int64_t d = 0; d < hd; d++)
                    q[h * hd + d] = qf[d];
            }
            ref_attend_in(c, &r->in, pos, q, n_kv, K, V, w->sinks, o, NULL, s);
            linear(c, w->wo, w->bo, D, od, o, yd);
            for (int64_t i = 0; i < D; i++)
                y[t * D + i] = (float)yd[i];
        }
        if (!q || !qf) {
#pragma omp atomic write
            oom = true;
        }
        free(q);
        free(qf);
    }
    free(kx);
    free(vx);
    if (oom) /* rows past len may hold new K/V, but len is unchanged */
        return rt_fail(m, ATTN_E_NOMEM, "out of memory for reference scratch");
    r->len = base + n_tokens;
    return ATTN_OK;
}
