/* test_reference.c: the reference engine, rule by rule (hand-worked
 * numbers, RoPE properties, GQA, masks, softcap), and as a whole against a
 * second, independently structured implementation in this file (full
 * score matrices, HF-style RoPE) over a randomized sweep of configs. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "support.h"

/* ---- an independent implementation ---------------------------------------- */

/* inv_freq as the Hugging Face code writes it: base^(-(2i)/d), then the
 * scaling rule with its wavelength masks. */
static void hf_inv_freq(const attn_config *c, double *f) {
    int64_t half = c->rotary_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        double fr = 1.0 / pow(c->rope_base, (double)(2 * i) / (double)c->rotary_dim);
        if (c->rope_scaling == ATTN_SCALING_LINEAR)
            fr /= c->rope_factor;
        if (c->rope_scaling == ATTN_SCALING_LLAMA3) {
            double old = (double)c->rope_original_max_position;
            double wl = 2 * acos(-1.0) / fr;
            double lw = old / c->rope_low_freq_factor, hw = old / c->rope_high_freq_factor;
            double scaled = wl > lw ? fr / c->rope_factor : fr;
            double sm = (old / wl - c->rope_low_freq_factor) /
                        (c->rope_high_freq_factor - c->rope_low_freq_factor);
            double smoothed = (1 - sm) * scaled / c->rope_factor + sm * scaled;
            bool medium = !(wl < hw) && !(wl > lw);
            fr = medium ? smoothed : scaled;
        }
        f[i] = fr;
    }
}

/* x*cos + rotate(x)*sin over the rotary dims, as HF's rotate_half or
 * GPT-J's rotate_every_two. */
static void hf_rope(const attn_config *c, double *x, int64_t pos) {
    if (c->rope_style == ATTN_ROPE_NONE)
        return;
    int64_t rd = c->rotary_dim, half = rd / 2;
    double f[ATTN_MAX_HEAD_DIM / 2], rot[ATTN_MAX_HEAD_DIM], cs[ATTN_MAX_HEAD_DIM],
        sn[ATTN_MAX_HEAD_DIM];
    hf_inv_freq(c, f);
    for (int64_t d = 0; d < rd; d++) {
        int64_t i = c->rope_style == ATTN_ROPE_HALF ? d % half : d / 2;
        cs[d] = cos((double)pos * f[i]);
        sn[d] = sin((double)pos * f[i]);
        if (c->rope_style == ATTN_ROPE_HALF)
            rot[d] = d < half ? -x[d + half] : x[d - half];
        else
            rot[d] = d % 2 == 0 ? -x[d + 1] : x[d - 1];
    }
    for (int64_t d = 0; d < rd; d++)
        x[d] = x[d] * cs[d] + rot[d] * sn[d];
}

/* The whole block over T tokens at positions 0..T-1, in one shot. */
static void naive_block(const attn_weights *w, int64_t T, const float *x, float *y) {
    const attn_config *c = &w->cfg;
    int64_t H = c->heads, G = c->kv_groups, hd = c->head_dim, D = c->d_model;
    double *Q = calloc((size_t)(T * H * hd), sizeof *Q);
    double *K = calloc((size_t)(T * G * hd), sizeof *K);
    double *V = calloc((size_t)(T * G * hd), sizeof *V);
    double *O = calloc((size_t)(T * H * hd), sizeof *O);
    double *S = calloc((size_t)(T * T), sizeof *S);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t o = 0; o < H * hd; o++) {
            double a = w->bq ? w->bq[o] : 0;
            for (int64_t i = 0; i < D; i++)
                a += (double)w->wq[o * D + i] * x[t * D + i];
            Q[t * H * hd + o] = a;
        }
        for (int64_t o = 0; o < G * hd; o++) {
            double a = w->bk ? w->bk[o] : 0, b = w->bv ? w->bv[o] : 0;
            for (int64_t i = 0; i < D; i++) {
                a += (double)w->wk[o * D + i] * x[t * D + i];
                b += (double)w->wv[o * D + i] * x[t * D + i];
            }
            K[t * G * hd + o] = a;
            V[t * G * hd + o] = b;
        }
        for (int64_t h = 0; h < H; h++)
            hf_rope(c, Q + (t * H + h) * hd, t);
        for (int64_t g = 0; g < G; g++)
            hf_rope(c, K + (t * G + g) * hd, t);
        for (int64_t o = 0; o < G * hd; o++) {
            K[t * G * hd + o] = rt_round(c->kv_dtype, (float)K[t * G * hd + o]);
            V[t * G * hd + o] = rt_round(c->kv_dtype, (float)V[t * G * hd + o]);
        }
    }
    for (int64_t h = 0; h < H; h++) {
        int64_t g = h / (H / G);
        for (int64_t i = 0; i < T; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < T; j++) {
                bool keep =
                    !c->causal || (j <= i && (c->sliding_window == 0 || j > i - c->sliding_window));
                double s = 0;
                for (int64_t d = 0; d < hd; d++)
                    s += Q[(i * H + h) * hd + d] * K[(j * G + g) * hd + d];
                s *= c->scale;
                if (c->softcap > 0)
                    s = c->softcap * tanh(s / c->softcap);
                S[i * T + j] = keep ? s : -INFINITY;
                mx = fmax(mx, S[i * T + j]);
            }
            for (int64_t j = 0; j < T; j++)
                sum += S[i * T + j] = exp(S[i * T + j] - mx);
            for (int64_t j = 0; j < T; j++)
                for (int64_t d = 0; d < hd; d++)
                    O[(i * H + h) * hd + d] += S[i * T + j] / sum * V[(j * G + g) * hd + d];
        }
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < D; o++) {
            double a = w->bo ? w->bo[o] : 0;
            for (int64_t i = 0; i < H * hd; i++)
                a += (double)w->wo[o * H * hd + i] * O[t * H * hd + i];
            y[t * D + o] = (float)a;
        }
    free(Q);
    free(K);
    free(V);
    free(O);
    free(S);
}

/* ---- helpers -------------------------------------------------------------- */

static float *random_input(int64_t T, int64_t D, uint64_t seed) {
    return random_floats((size_t)(T * D), seed);
}

/* Runs the reference over x in chunks of `chunk` tokens into y. */
static void run_ref_chunked(const attn_weights *w, int64_t T, const float *x, float *y,
                            int64_t chunk) {
    attn_ref *r;
    attn_msg m;
    assert_int_equal(attn_ref_new(w, T, &r, &m), ATTN_OK);
    int64_t D = w->cfg.d_model;
    for (int64_t at = 0; at < T; at += chunk) {
        int64_t n = T - at < chunk ? T - at : chunk;
        assert_int_equal(attn_ref_forward(r, n, x + at * D, y + at * D, &m), ATTN_OK);
    }
    assert_int_equal(attn_ref_len(r), T);
    attn_ref_free(r);
}

static attn_config with_rope(attn_config c, attn_rope_style style, int64_t rotary,
                             attn_rope_scaling sc) {
    c.rope_style = style;
    c.rope_base = 10000;
    c.rotary_dim = rotary;
    c.rope_scaling = sc;
    c.rope_factor = 8;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_position = 64; /* small, so short tests see all three bands */
    return c;
}

/* ---- hand-worked numbers -------------------------------------------------- */

static void reference_hand_worked_causal_weights(void **state) {
    (void)state;
    /* Q = K = [[1,0],[0,1],[1,1]], V = [[1,2],[3,0],[0,1]], scale 1, causal */
    attn_config c = config_small(1, 1, 2, 2);
    c.scale = 1;
    c.scale_auto = false;
    double Q[3][2] = {{1, 0}, {0, 1}, {1, 1}};
    float K[6] = {1, 0, 0, 1, 1, 1}, V[6] = {1, 2, 3, 0, 0, 1};
    double want[3][3] = {{1, 0, 0}, {0.268941, 0.731059, 0}, {0.211942, 0.211942, 0.576117}};
    for (int p = 0; p < 3; p++) {
        double out[2], probs[3], scratch[3];
        ref_attend(&c, p, Q[p], 3, K, V, NULL, out, probs, scratch);
        for (int j = 0; j < 3; j++)
            assert_float_equal(probs[j], want[p][j], 1e-6);
        double o0 = 0, o1 = 0;
        for (int j = 0; j < 3; j++)
            o0 += want[p][j] * V[2 * j], o1 += want[p][j] * V[2 * j + 1];
        assert_float_equal(out[0], o0, 1e-5);
        assert_float_equal(out[1], o1, 1e-5);
    }
    /* exact forms: 1/(1+e) and 1/(2+e) */
    double out[2], probs[3], scratch[3];
    ref_attend(&c, 2, Q[2], 3, K, V, NULL, out, probs, scratch);
    assert_float_equal(probs[0], 1 / (2 + exp(1.0)), 1e-15);
    assert_float_equal(probs[2], exp(1.0) / (2 + exp(1.0)), 1e-15);
}

/* compute bf16's rounding of an operand (rt_round bf16): to nearest, ties
 * to even, subnormals kept, a carry into the exponent, NaN stays NaN. */
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void bf16_rounding_of_operands(void **state) {
    (void)state;
    const struct {
        uint32_t in, out;
    } cases[] = {
        {0x3f808000u, 0x3f800000u}, /* 1 + 2^-8: a tie, to the even 1 */
        {0x3f818000u, 0x3f820000u}, /* 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6 */
        {0xbf808001u, 0xbf810000u}, /* -(1 + 2^-8 + 2^-23): past the tie, away */
        {0x3f80ffffu, 0x3f810000u}, /* below the next: up */
        {0x3fffffffu, 0x40000000u}, /* a carry into the exponent: 2 */
        {0x00018000u, 0x00020000u}, /* a subnormal tie, odd: up */
        {0x00028000u, 0x00020000u}, /* a subnormal tie, even: down */
        {0x00007fffu, 0x00000000u}, /* the smallest subnormals: 0 */
        {0x80000000u, 0x80000000u}, /* -0 */
        {0x7f7fffffu, 0x7f800000u}, /* FLT_MAX: infinity */
        {0xff800000u, 0xff800000u}, /* -infinity */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (bits(rt_round(ATTN_DTYPE_BF16, from_bits(cases[i].in))) != cases[i].out)
            fail_msg("bf16(0x%08x) = 0x%08x, want 0x%08x", cases[i].in,
                     bits(rt_round(ATTN_DTYPE_BF16, from_bits(cases[i].in))), cases[i].out);
    assert_true(isnan(rt_round(ATTN_DTYPE_BF16, from_bits(0x7f800001u)))); /* low bits only */
    assert_true(isnan(rt_round(ATTN_DTYPE_BF16, NAN)));
}

/* Two heads of 4 dims, two keys, scale 1/2, compute bf16: q0 = 1 + 2^-8
 * rounds to 1, q1 = 1 + 3 * 2^-8 to 1.015625; k0 = e0, k1 = 0; v0 = (2,
 * 0, 0, 0), v1 = (0, 4, 1 + 2^-8, 0) (its third rounds to 1). Head 0: s =
 * (1/2, 0), e = (1, e^-1/2 = 0.60653), bf16(e1) = 0.60546875; head 1: s =
 * (0.5078125, 0), e = (1, e^-0.5078125 = 0.60181), bf16(e1) = 0.6015625.
 * o = (bf16(e0) v0 + bf16(e1) bf16(v1)) / (e0 + e1), the sum unrounded. */
static void reference_bf16_attention_worked_by_hand(void **state) {
    (void)state;
    attn_config c = config_small(2, 1, 4, 8);
    c.causal = false;
    c.scale = 0.5, c.scale_auto = false;
    c.compute = ATTN_DTYPE_BF16;
    double q[8] = {1 + 0x1p-8, 0, 0, 0, 1 + 3 * 0x1p-8, 0, 0, 0};
    float K[8] = {1, 0, 0, 0, 0, 0, 0, 0}, V[8] = {2, 0, 0, 0, 0, 4, 1 + 0x1p-8f, 0};
    double out[8], probs[4], s[2];
    ref_attend(&c, 1, q, 2, K, V, NULL, out, probs, s);
    const double e1[2] = {exp(-0.5), exp(-0.5078125)}, r1[2] = {0.60546875, 0.6015625};
    for (int h = 0; h < 2; h++) {
        double l = 1 + e1[h];
        double want[4] = {2 / l, 4 * r1[h] / l, r1[h] / l, 0};
        for (int d = 0; d < 4; d++)
            assert_float_equal(out[h * 4 + d], want[d], 1e-12);
    }
    /* compute f32: no rounding anywhere */
    c.compute = ATTN_DTYPE_F32;
    ref_attend(&c, 1, q, 2, K, V, NULL, out, probs, s);
    double l = 1 + exp(-0.5 * (1 + 0x1p-8));
    assert_float_equal(out[2], exp(-0.5 * (1 + 0x1p-8)) * (1 + 0x1p-8) / l, 1e-12);
}

/* ---- features of current models, worked by hand ----------------------------- */

static void reference_yarn_frequencies_and_factor(void **state) {
    (void)state;
    /* rotary_dim 8, base 10^4, factor 4, original 64, betas 32 and 1: the
     * correction dims are 0.19 and 1.01, rounded out to 0 and 2 (truncate):
     * ramp 0, 1/2, 1, 1 over the 4 frequencies 1, 0.1, 0.01, 0.001 */
    attn_config c = with_rope(config_small(1, 1, 8, 8), ATTN_ROPE_HALF, 8, ATTN_SCALING_YARN);
    c.rope_factor = 4, c.rope_beta_fast = 32, c.rope_beta_slow = 1, c.rope_truncate = true;
    c.rope_mscale = 1, c.rope_mscale_all_dim = 0;
    c.rope_attention_factor = attn_yarn_default_attention_factor(&c);
    assert_int_equal(attn_config_check(&c, NULL), ATTN_OK);
    double f[4];
    attn_rope_inv_freq(&c, f);
    double want[4] = {1.0, 0.1 / 4 / 2 + 0.1 / 2, 0.01 / 4, 0.001 / 4};
    for (int i = 0; i < 4; i++)
        assert_float_equal(f[i], want[i], 1e-12);
    /* not truncated: the ramp ends at 1.008 (1 + 0.001 against a
     * singularity is not it: 0.19 rounds to 0 by max(low, 0) only) */
    c.rope_truncate = false;
    attn_rope_inv_freq(&c, f);
    assert_float_equal(f[0], 1.0, 1e-12);
    assert_float_equal(f[1], 0.025595245891924, 1e-12);
    assert_float_equal(f[2], 0.0025, 1e-12);
    /* attention factor 0.1 ln 4 + 1; mscale / mscale_all_dim both set: their ratio */
    assert_float_equal(c.rope_attention_factor, 0.1 * log(4.0) + 1, 1e-15);
    assert_float_equal(attn_rope_cos_factor(&c), c.rope_attention_factor, 0);
    c.rope_mscale = 0.707, c.rope_mscale_all_dim = 1;
    assert_float_equal(attn_yarn_default_attention_factor(&c),
                       (0.0707 * log(4.0) + 1) / (0.1 * log(4.0) + 1), 1e-15);
    /* cos and sin carry the factor: a rotation at position 0 scales by it */
    double x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    c.rope_mscale = 1, c.rope_mscale_all_dim = 0;
    attn_rope_inv_freq(&c, f);
    ref_rope_apply(&c, f, 0, x);
    for (int i = 0; i < 8; i++)
        assert_float_equal(x[i], (i + 1) * c.rope_attention_factor, 1e-12);
}

static void reference_alibi_slopes_and_scores(void **state) {
    (void)state;
    double s[12];
    attn_config c = config_small(8, 8, 4, 4);
    attn_alibi_slopes(&c, s);
    for (int h = 0; h < 8; h++)
        assert_float_equal(s[h], pow(2.0, -(h + 1)), 1e-15);
    /* 12 heads: 8 as above, then 2^(-4/8 * (1, 3, 5, 7)) */
    c = config_small(12, 12, 4, 4);
    attn_alibi_slopes(&c, s);
    assert_float_equal(s[7], 1.0 / 256, 1e-15);
    for (int h = 8; h < 12; h++)
        assert_float_equal(s[h], pow(2.0, -0.5 * (2 * (h - 8) + 1)), 1e-15);
    /* 2 heads of 4 dims, q = 0: scores are -slope_h (p - j) alone, slopes
     * 2^-4 and 2^-8; at p = 2 the weights are e^(-2m), e^(-m), 1 over their sum */
    c = config_small(2, 2, 4, 8);
    c.alibi = true;
    double q[8] = {0}, out[8], probs[6], scratch[3];
    float K[24] = {0}, V[24];
    for (int i = 0; i < 24; i++)
        V[i] = (float)(i % 5);
    ref_attend(&c, 2, q, 3, K, V, NULL, out, probs, scratch);
    for (int h = 0; h < 2; h++) {
        double m = h ? 1.0 / 256 : 1.0 / 16, z = exp(-2 * m) + exp(-m) + 1;
        assert_float_equal(probs[h * 3 + 0], exp(-2 * m) / z, 1e-15);
        assert_float_equal(probs[h * 3 + 1], exp(-m) / z, 1e-15);
        assert_float_equal(probs[h * 3 + 2], 1 / z, 1e-15);
    }
}

static void reference_sinks_join_the_denominator(void **state) {
    (void)state;
    /* 2 heads of 4 dims, q = 0, 3 visible keys: every score is 0, so each
     * key weighs 1 / (e^sink + 3): 1/4 for sink 0, 1/5 for sink ln 2 */
    attn_config c = config_small(2, 1, 4, 4);
    c.sinks = true;
    double q[8] = {0}, out[8], probs[6], scratch[3];
    float K[12] = {0}, V[12] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    float sinks[2] = {0, (float)log(2.0)};
    ref_attend(&c, 2, q, 3, K, V, sinks, out, probs, scratch);
    for (int j = 0; j < 3; j++) {
        assert_float_equal(probs[j], 0.25, 1e-15);
        assert_float_equal(probs[3 + j], 1 / ((double)expf(sinks[1]) + 3), 1e-15);
    }
    assert_float_equal(out[0], 6 * 0.25, 1e-12); /* (1 + 2 + 3) / 4: weights sum below 1 */
    /* a very large sink takes nearly all the weight */
    sinks[0] = 50;
    ref_attend(&c, 2, q, 3, K, V, sinks, out, probs, scratch);
    assert_true(probs[0] < 1e-20 && fabs(out[0]) < 1e-20);
}

static void reference_chunks_hide_earlier_chunks(void **state) {
    (void)state;
    attn_config c = config_small(1, 1, 2, 2);
    c.chunk = 2;
    c.scale = 1;
    assert_int_equal(attn_first_key(&c, 0), 0);
    assert_int_equal(attn_first_key(&c, 1), 0);
    assert_int_equal(attn_first_key(&c, 2), 2);
    assert_int_equal(attn_first_key(&c, 5), 4);
    /* with a window as well, the later of the two */
    c.sliding_window = 3;
    assert_int_equal(attn_first_key(&c, 5), 4);
    c.chunk = 8;
    assert_int_equal(attn_first_key(&c, 9), 8);
    assert_int_equal(attn_first_key(&c, 13), 11);
    c.sliding_window = 0;
    c.chunk = 2;
    /* p = 3 sees keys 2 and 3 only: equal scores, weights 1/2 */
    double q[2] = {1, 0}, out[2], probs[4], scratch[4];
    float K[8] = {1, 0, 1, 0, 1, 0, 1, 0}, V[8] = {9, 9, 9, 9, 1, 2, 3, 4};
    ref_attend(&c, 3, q, 4, K, V, NULL, out, probs, scratch);
    assert_float_equal(probs[0], 0, 0);
    assert_float_equal(probs[1], 0, 0);
    assert_float_equal(probs[2], 0.5, 1e-15);
    assert_float_equal(out[0], 2, 1e-12);
    assert_float_equal(out[1], 3, 1e-12);
    c.causal = false; /* chunks need causal: the config says so */
    assert_int_equal(attn_config_check(&c, NULL), ATTN_E_INVALID);
}

static void reference_qk_norm_and_temperature(void **state) {
    (void)state;
    /* 2 heads of 4: [1, 2, 3, 4] has mean square 7.5, [2, 0, 0, 0] 1 */
    attn_config c = config_small(2, 2, 4, 8);
    c.qk_norm = ATTN_QK_NORM_HEAD, c.qk_norm_weight = true, c.qk_norm_eps = 0;
    float w[4] = {1, 1, 2, 0.5f};
    double x[8] = {1, 2, 3, 4, 2, 0, 0, 0};
    ref_qk_norm(&c, w, 2, x);
    double r = 1 / sqrt(7.5);
    assert_float_equal(x[0], r, 1e-15);
    assert_float_equal(x[2], 3 * r * 2, 1e-15);
    assert_float_equal(x[3], 4 * r * 0.5, 1e-15);
    assert_float_equal(x[4], 2, 1e-15);
    /* offset 1 (Gemma): times 1 + weight; eps inside the root */
    c.qk_norm_offset = 1, c.qk_norm_eps = 0.5;
    double y[8] = {1, 2, 3, 4, 2, 0, 0, 0};
    ref_qk_norm(&c, w, 2, y);
    assert_float_equal(y[1], 2 / sqrt(8.0) * 2, 1e-15);
    assert_float_equal(y[3], 4 / sqrt(8.0) * 1.5, 1e-15);
    /* over the whole row (OLMo 2): mean square (30 + 4) / 8; no weight */
    c.qk_norm = ATTN_QK_NORM_ALL, c.qk_norm_weight = false, c.qk_norm_eps = 0, c.qk_norm_offset = 0;
    double z[8] = {1, 2, 3, 4, 2, 0, 0, 0};
    ref_qk_norm(&c, NULL, 2, z);
    assert_float_equal(z[3], 4 / sqrt(34.0 / 8), 1e-15);
    assert_float_equal(z[4], 2 / sqrt(34.0 / 8), 1e-15);
    /* Llama 4's temperature: log(floor((p + 1) / 8192) + 1) * 0.1 + 1 */
    c.temp_floor_scale = 8192, c.temp_attn_scale = 0.1;
    assert_float_equal(attn_query_temperature(&c, 0), 1, 0);
    assert_float_equal(attn_query_temperature(&c, 8190), 1, 0);
    assert_float_equal(attn_query_temperature(&c, 8191), 1 + 0.1 * log(2.0), 1e-15);
    assert_float_equal(attn_query_temperature(&c, 3 * 8192 - 1), 1 + 0.1 * log(4.0), 1e-15);
    c.temp_floor_scale = 0;
    assert_float_equal(attn_query_temperature(&c, 100000), 1, 0);
}

static void reference_noncausal_sees_every_key(void **state) {
    (void)state;
    attn_config c = config_small(1, 1, 2, 2);
    c.scale = 1;
    c.causal = false;
    double q[2] = {1, 0};
    float K[6] = {1, 0, 0, 1, 1, 1}, V[6] = {1, 2, 3, 0, 0, 1};
    double out[2], probs[3], scratch[3];
    ref_attend(&c, 0, q, 3, K, V, NULL, out, probs, scratch);
    double e = exp(1.0);
    assert_float_equal(probs[0], e / (2 * e + 1), 1e-15);
    assert_float_equal(probs[1], 1 / (2 * e + 1), 1e-15);
    assert_float_equal(probs[2], e / (2 * e + 1), 1e-15);
}

static void reference_block_with_identity_projections(void **state) {
    (void)state;
    /* Wq = Wk = Wv = Wo = I: y_t = sum_j p_tj x_j with the weights above */
    attn_config c = config_small(1, 1, 2, 2);
    c.scale = 1;
    c.scale_auto = false;
    attn_weights *w;
    assert_int_equal(attn_weights_new(&c, &w, NULL), ATTN_OK);
    float *mats[] = {w->wq, w->wk, w->wv, w->wo};
    for (int i = 0; i < 4; i++)
        mats[i][0] = mats[i][3] = 1;
    float x[6] = {1, 0, 0, 1, 1, 1}, y[6];
    run_ref_chunked(w, 3, x, y, 3);
    double a = 1 / (1 + exp(1.0)), b = 1 / (2 + exp(1.0));
    float want[6] = {1, 0, (float)a, (float)(1 - a), (float)(1 - b), (float)(1 - b)};
    for (int i = 0; i < 6; i++)
        assert_float_equal(y[i], want[i], 1e-6);
    attn_weights_free(w);
}

/* ---- RoPE ----------------------------------------------------------------- */

static void rope_position_zero_is_identity(void **state) {
    (void)state;
    attn_config base = config_small(1, 1, 16, 16);
    for (int style = ATTN_ROPE_HALF; style <= ATTN_ROPE_INTERLEAVED; style++) {
        attn_config c = with_rope(base, (attn_rope_style)style, 10, ATTN_SCALING_LLAMA3);
        double f[8], x[16], x0[16];
        attn_rope_inv_freq(&c, f);
        uint64_t s = 1;
        for (int d = 0; d < 16; d++)
            x[d] = x0[d] = rnd_unit(&s);
        ref_rope_apply(&c, f, 0, x);
        assert_memory_equal(x, x0, sizeof x);
    }
}

static void rope_scores_depend_only_on_relative_position(void **state) {
    (void)state;
    attn_config base = config_small(1, 1, 32, 32);
    for (int style = ATTN_ROPE_HALF; style <= ATTN_ROPE_INTERLEAVED; style++) {
        for (int sc = 0; sc < ATTN_SCALING_COUNT; sc++) {
            attn_config c = with_rope(base, (attn_rope_style)style, 32, (attn_rope_scaling)sc);
            double f[16], q[32], k[32];
            attn_rope_inv_freq(&c, f);
            uint64_t s = 11;
            for (int d = 0; d < 32; d++)
                q[d] = rnd_unit(&s), k[d] = rnd_unit(&s);
            const int64_t pairs[][2] = {{5, 2}, {13, 10}, {1003, 1000}, {3, 0}};
            double ref_dot = 0;
            for (int p = 0; p < 4; p++) {
                double qm[32], kn[32], dot = 0;
                memcpy(qm, q, sizeof q);
                memcpy(kn, k, sizeof k);
                ref_rope_apply(&c, f, pairs[p][0], qm);
                ref_rope_apply(&c, f, pairs[p][1], kn);
                for (int d = 0; d < 32; d++)
                    dot += qm[d] * kn[d];
                if (p == 0)
                    ref_dot = dot;
                else
                    assert_float_equal(dot, ref_dot, 1e-9);
            }
        }
    }
}

static void rope_interleaved_equals_half_after_permutation(void **state) {
    (void)state;
    /* P moves interleaved pair (2i, 2i+1) to half pair (i, i + r/2) */
    attn_config base = config_small(1, 1, 24, 24);
    attn_config ci = with_rope(base, ATTN_ROPE_INTERLEAVED, 16, ATTN_SCALING_NONE);
    attn_config ch = with_rope(base, ATTN_ROPE_HALF, 16, ATTN_SCALING_NONE);
    double f[8], x[24], px[24];
    attn_rope_inv_freq(&ci, f);
    uint64_t s = 5;
    for (int d = 0; d < 24; d++)
        x[d] = rnd_unit(&s);
    for (int i = 0; i < 8; i++)
        px[i] = x[2 * i], px[i + 8] = x[2 * i + 1];
    for (int d = 16; d < 24; d++)
        px[d] = x[d];
    ref_rope_apply(&ci, f, 37, x);
    ref_rope_apply(&ch, f, 37, px);
    for (int i = 0; i < 8; i++) {
        assert_float_equal(px[i], x[2 * i], 1e-12);
        assert_float_equal(px[i + 8], x[2 * i + 1], 1e-12);
    }
    for (int d = 16; d < 24; d++)
        assert_float_equal(px[d], x[d], 0);
}

static void rope_partial_leaves_tail_dims_untouched(void **state) {
    (void)state;
    attn_config base = config_small(1, 1, 16, 16);
    for (int style = ATTN_ROPE_HALF; style <= ATTN_ROPE_INTERLEAVED; style++) {
        attn_config c = with_rope(base, (attn_rope_style)style, 6, ATTN_SCALING_NONE);
        double f[3], x[16], x0[16];
        attn_rope_inv_freq(&c, f);
        for (int d = 0; d < 16; d++)
            x[d] = x0[d] = d + 1;
        ref_rope_apply(&c, f, 9, x);
        assert_memory_equal(x + 6, x0 + 6, 10 * sizeof(double));
        assert_memory_not_equal(x, x0, 6 * sizeof(double));
        double n0 = 0, n1 = 0; /* a rotation keeps the norm */
        for (int d = 0; d < 6; d++)
            n0 += x0[d] * x0[d], n1 += x[d] * x[d];
        assert_float_equal(n0, n1, 1e-9);
    }
}

static void rope_scaling_rules_for_frequencies(void **state) {
    (void)state;
    attn_config base = config_small(1, 1, 64, 64);
    attn_config none = with_rope(base, ATTN_ROPE_HALF, 64, ATTN_SCALING_NONE);
    attn_config lin = with_rope(base, ATTN_ROPE_HALF, 64, ATTN_SCALING_LINEAR);
    attn_config l3 = with_rope(base, ATTN_ROPE_HALF, 64, ATTN_SCALING_LLAMA3);
    double f0[32], fl[32], f3[32];
    attn_rope_inv_freq(&none, f0);
    attn_rope_inv_freq(&lin, fl);
    attn_rope_inv_freq(&l3, f3);
    assert_float_equal(f0[0], 1.0, 0);
    assert_float_equal(f0[1], pow(10000, -2.0 / 64), 1e-15);
    int kept = 0, divided = 0, smoothed = 0;
    for (int i = 0; i < 32; i++) {
        assert_float_equal(fl[i], f0[i] / 8, 1e-18);
        double wl = 2 * acos(-1.0) / f0[i];
        if (wl < 64.0 / 4) { /* high frequency: kept */
            assert_float_equal(f3[i], f0[i], 0);
            kept++;
        } else if (wl > 64.0 / 1) { /* low frequency: divided by factor */
            assert_float_equal(f3[i], f0[i] / 8, 1e-18);
            divided++;
        } else { /* between: a blend of both */
            assert_true(f3[i] < f0[i] && f3[i] > f0[i] / 8);
            smoothed++;
        }
    }
    assert_true(kept > 0 && divided > 0 && smoothed > 0);
    double hf[32];
    hf_inv_freq(&l3, hf);
    for (int i = 0; i < 32; i++)
        assert_float_equal(f3[i], hf[i], 1e-15 + 1e-12 * hf[i]);
}

/* ---- block-level properties ---------------------------------------------- */

static void gqa_equals_mha_with_replicated_kv_heads(void **state) {
    (void)state;
    attn_config g = with_rope(config_small(6, 2, 8, 20), ATTN_ROPE_HALF, 8, ATTN_SCALING_NONE);
    attn_config m = g;
    m.kv_groups = 6;
    attn_weights *wg, *wm;
    assert_int_equal(attn_weights_random(&g, 3, &wg, NULL), ATTN_OK);
    assert_int_equal(attn_weights_new(&m, &wm, NULL), ATTN_OK);
    size_t D = 20, hd = 8;
    memcpy(wm->wq, wg->wq, 48 * D * sizeof(float));
    memcpy(wm->wo, wg->wo, D * 48 * sizeof(float));
    for (size_t h = 0; h < 6; h++) { /* MHA head h gets K/V head h / 3 */
        memcpy(wm->wk + h * hd * D, wg->wk + (h / 3) * hd * D, hd * D * sizeof(float));
        memcpy(wm->wv + h * hd * D, wg->wv + (h / 3) * hd * D, hd * D * sizeof(float));
    }
    float *x = random_input(9, 20, 4), yg[180], ym[180];
    run_ref_chunked(wg, 9, x, yg, 9);
    run_ref_chunked(wm, 9, x, ym, 9);
    assert_true(rel_err(yg, ym, 180) < 1e-6);
    free(x);
    attn_weights_free(wg);
    attn_weights_free(wm);
}

/* A spread of configs: every feature switched on somewhere. */
static attn_config ref_sweep_config(int i, uint64_t *s) {
    static const int64_t dims[] = {2, 4, 8, 16, 32, 48, 64};
    int64_t hd = dims[i % 7];
    int64_t kv = 1 + (int64_t)((rnd_unit(s) + 1) * 2) % 4;
    int64_t heads = kv * (1 + (int64_t)((rnd_unit(s) + 1) * 2) % 4);
    int64_t D = 4 + (int64_t)((rnd_unit(s) + 1) * 30);
    attn_config c = config_small(heads, kv, hd, D);
    c.causal = i % 5 != 0;
    if (i % 3 != 2) {
        int64_t rot = i % 4 == 1 && hd >= 4 ? hd / 2 - (hd / 2) % 2 : hd;
        c = with_rope(c, i % 2 ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF, rot > 1 ? rot : 2,
                      (attn_rope_scaling)(i % 3));
        c.rope_base = i % 2 ? 10000 : 500000;
    }
    if (c.causal && i % 4 == 3)
        c.sliding_window = 1 + i % 6;
    if (i % 6 == 4)
        c.softcap = 0.5 + i % 3;
    c.qkv_bias = i % 7 == 3;
    c.o_bias = i % 8 == 5;
    if (i % 9 == 1)
        c.scale = 0.7, c.scale_auto = false;
    c.kv_dtype = (attn_dtype)(i % 10 == 7 ? ATTN_DTYPE_F16 : i % 10 == 8 ? ATTN_DTYPE_BF16 : 0);
    c.dtype = (attn_dtype)(i % 11 == 6 ? ATTN_DTYPE_BF16 : 0);
    return c;
}

static void reference_matches_independent_implementation_over_sweep(void **state) {
    (void)state;
    uint64_t s = 2024;
    for (int i = 0; i < 80; i++) {
        attn_config c = ref_sweep_config(i, &s);
        attn_msg m;
        if (attn_config_check(&c, &m) != ATTN_OK)
            fail_msg("sweep config %d invalid: %s", i, m.text);
        int64_t T = 1 + i % 23;
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, (uint64_t)i, &w, NULL), ATTN_OK);
        float *x = random_input(T, c.d_model, (uint64_t)i + 100);
        size_t n = (size_t)(T * c.d_model);
        float *y = malloc(n * sizeof *y), *want = malloc(n * sizeof *want);
        run_ref_chunked(w, T, x, y, T);
        naive_block(w, T, x, want);
        double e = rel_err(y, want, n);
        if (!(e < 1e-5))
            fail_msg("config %d (heads %lld kv %lld hd %lld T %lld): rel err %g", i,
                     (long long)c.heads, (long long)c.kv_groups, (long long)c.head_dim,
                     (long long)T, e);
        free(x);
        free(y);
        free(want);
        attn_weights_free(w);
    }
}

static void chunked_equals_one_shot(void **state) {
    (void)state;
    uint64_t s = 77;
    for (int i = 0; i < 24; i++) {
        attn_config c = ref_sweep_config(i, &s);
        c.causal = true; /* chunks are defined for causal blocks */
        int64_t T = 20;
        attn_weights *w;
        assert_int_equal(attn_weights_random(&c, (uint64_t)i, &w, NULL), ATTN_OK);
        float *x = random_input(T, c.d_model, 9);
        size_t n = (size_t)(T * c.d_model);
        float *y1 = malloc(n * sizeof(float)), *yc = malloc(n * sizeof(float));
        run_ref_chunked(w, T, x, y1, T);
        const int64_t chunks[] = {1, 3, 7};
        for (int k = 0; k < 3; k++) {
            run_ref_chunked(w, T, x, yc, chunks[k]);
            assert_true(rel_err(yc, y1, n) <= 1e-6);
        }
        free(x);
        free(y1);
        free(yc);
        attn_weights_free(w);
    }
}

static void sliding_window_gives_zero_weight_outside(void **state) {
    (void)state;
    attn_config c = config_small(2, 1, 4, 8);
    c.sliding_window = 3;
    uint64_t s = 1;
    float K[40], V[40];
    double q[8], out[8], probs[20], scratch[10];
    for (int i = 0; i < 40; i++)
        K[i] = (float)rnd_unit(&s), V[i] = (float)rnd_unit(&s);
    for (int i = 0; i < 8; i++)
        q[i] = rnd_unit(&s);
    ref_attend(&c, 6, q, 10, K, V, NULL, out, probs, scratch);
    for (int h = 0; h < 2; h++) {
        double sum = 0;
        for (int j = 0; j < 10; j++) {
            bool in = j >= 4 && j <= 6; /* 6 - 3 < j <= 6 */
            if (in)
                assert_true(probs[h * 10 + j] > 0);
            else
                assert_true(probs[h * 10 + j] == 0);
            sum += probs[h * 10 + j];
        }
        assert_float_equal(sum, 1.0, 1e-12);
    }
}

static void softcap_bounds_scores(void **state) {
    (void)state;
    attn_config c = config_small(1, 1, 4, 4);
    c.causal = false;
    c.softcap = 0.5;
    float K[8] = {100, 0, 0, 0, -100, 0, 0, 0}, V[8] = {1, 0, 0, 0, 0, 1, 0, 0};
    double q[4] = {1, 0, 0, 0}, out[4], probs[2], scratch[2];
    ref_attend(&c, 0, q, 2, K, V, NULL, out, probs, scratch);
    /* scores 50 and -50 capped to about +-0.5: weights e^0.5 : e^-0.5 */
    double want = 1 / (1 + exp(-2 * 0.5 * tanh(50 / 0.5)));
    assert_float_equal(probs[0], want, 1e-12);
    c.softcap = 0;
    ref_attend(&c, 0, q, 2, K, V, NULL, out, probs, scratch);
    assert_true(probs[0] > 1 - 1e-12);
}

/* score_mod and mask_mod: a mask as an expression hides what the
 * built-in hides (bit for bit), a score expression is applied before the
 * softmax (softcap's form against softcap), head-dependent masks, and a
 * query that sees no key gives zeros. */
static void reference_expressions(void **state) {
    (void)state;
    uint64_t s = 5;
    float K[2 * 12 * 8], V[2 * 12 * 8];
    double q[4 * 8], out[4 * 8], probs[4 * 12], want[4 * 12], scratch[12];
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++)
        K[i] = 3 * (float)rnd_unit(&s), V[i] = (float)rnd_unit(&s);
    for (int i = 0; i < 32; i++)
        q[i] = 3 * rnd_unit(&s);
    attn_config w = config_small(4, 2, 8, 32);
    w.sliding_window = 3;
    ref_attend(&w, 9, q, 12, K, V, NULL, out, want, scratch);
    attn_config e = config_small(4, 2, 8, 32);
    snprintf(e.mask_mod, sizeof e.mask_mod, "q - kv < 3");
    ref_attend(&e, 9, q, 12, K, V, NULL, out, probs, scratch);
    assert_memory_equal(probs, want, sizeof want);
    /* softcap 2 and its expression (f32 arithmetic: close, not equal) */
    attn_config sc = config_small(4, 2, 8, 32);
    sc.softcap = 2;
    ref_attend(&sc, 9, q, 12, K, V, NULL, out, want, scratch);
    snprintf(e.mask_mod, sizeof e.mask_mod, "%s", "");
    snprintf(e.score_mod, sizeof e.score_mod, "2 * tanh(score / 2)");
    ref_attend(&e, 9, q, 12, K, V, NULL, out, probs, scratch);
    for (int i = 0; i < 4 * 12; i++)
        assert_float_equal(probs[i], want[i], 1e-6);
    /* head 1 sees key 0 and the last two (StreamingLLM's sink and
     * window); the others only keys of the same parity as the query */
    snprintf(e.score_mod, sizeof e.score_mod, "%s", "");
    snprintf(e.mask_mod, sizeof e.mask_mod,
             "where(h == 1, kv < 1 or q - kv < 2, (q - kv) %% 2 == 0)");
    ref_attend(&e, 9, q, 12, K, V, NULL, out, probs, scratch);
    for (int h = 0; h < 4; h++)
        for (int j = 0; j < 12; j++) {
            bool in = j <= 9 && (h == 1 ? j < 1 || 9 - j < 2 : (9 - j) % 2 == 0);
            if (in != (probs[h * 12 + j] > 0))
                fail_msg("head %d key %d: weight %g", h, j, probs[h * 12 + j]);
        }
    /* nothing seen: zeros, no NaN */
    snprintf(e.mask_mod, sizeof e.mask_mod, "h == 2 and kv == 0");
    ref_attend(&e, 9, q, 12, K, V, NULL, out, probs, scratch);
    for (int h = 0; h < 4; h++)
        for (int d = 0; d < 8; d++)
            assert_true(h == 2 ? out[h * 8 + d] == V[d + 8 * (2 / 2)] : out[h * 8 + d] == 0);
    /* whole blocks: chunked feeding == one shot with both expressions */
    attn_config b = config_small(4, 2, 8, 32);
    snprintf(b.score_mod, sizeof b.score_mod, "score - 0.25 * (q - kv) + where(kv == 0, 1.5, 0)");
    snprintf(b.mask_mod, sizeof b.mask_mod, "kv < 2 or q - kv < 5");
    attn_weights *wt;
    attn_msg m;
    assert_int_equal(attn_weights_random(&b, 9, &wt, &m), ATTN_OK);
    float *x = random_input(13, 32, 10), *y1 = malloc(13 * 32 * sizeof *y1),
          *y2 = malloc(13 * 32 * sizeof *y2);
    run_ref_chunked(wt, 13, x, y1, 13);
    run_ref_chunked(wt, 13, x, y2, 3);
    assert_memory_equal(y1, y2, 13 * 32 * sizeof *y1);
    /* and differs from the block without them */
    attn_config plain = b;
    plain.score_mod[0] = plain.mask_mod[0] = 0;
    attn_weights *wp;
    assert_int_equal(attn_weights_random(&plain, 9, &wp, &m), ATTN_OK);
    run_ref_chunked(wp, 13, x, y2, 13);
    assert_true(rel_err(y1, y2, 13 * 32) > 1e-3);
    attn_weights_free(wt);
    attn_weights_free(wp);
    free(x);
    free(y1);
    free(y2);
    /* configs compare expressions by their canonical text */
    attn_config p1 = config_small(4, 2, 8, 32), p2 = p1;
    snprintf(p1.mask_mod, sizeof p1.mask_mod, "q-kv<4 and not(h==2)");
    snprintf(p2.mask_mod, sizeof p2.mask_mod, "(((q - kv) < 4) and (not (h == 2)))");
    assert_null(attn_config_differs(&p1, &p2));
    snprintf(p2.mask_mod, sizeof p2.mask_mod, "q - kv < 5 and not (h == 2)");
    assert_string_equal(attn_config_differs(&p1, &p2), "mask_mod");
    p2.mask_mod[0] = 0;
    assert_string_equal(attn_config_differs(&p1, &p2), "mask_mod");
    /* a broken expression: attn_config_check says which key and why */
    snprintf(b.mask_mod, sizeof b.mask_mod, "q - kv");
    assert_int_equal(attn_config_check(&b, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "mask_mod: mask_mod must be a bool, got int"));
}

static void kv_cache_dtype_rounds_keys_and_values(void **state) {
    (void)state;
    attn_config c = with_rope(config_small(4, 2, 16, 32), ATTN_ROPE_HALF, 16, ATTN_SCALING_NONE);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 8, &w, NULL), ATTN_OK);
    float *x = random_input(12, 32, 3), y32[384], y16[384], yb[384];
    run_ref_chunked(w, 12, x, y32, 12);
    w->cfg.kv_dtype = ATTN_DTYPE_F16;
    run_ref_chunked(w, 12, x, y16, 12);
    w->cfg.kv_dtype = ATTN_DTYPE_BF16;
    run_ref_chunked(w, 12, x, yb, 12);
    double e16 = rel_err(y16, y32, 384), eb = rel_err(yb, y32, 384);
    assert_true(e16 > 0 && e16 < 2e-3);
    assert_true(eb > e16 && eb < 2e-2);
    free(x);
    attn_weights_free(w);
}

static void capacity_exhaustion_appends_nothing(void **state) {
    (void)state;
    attn_config c = config_small(2, 1, 4, 8);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 1, &w, NULL), ATTN_OK);
    attn_ref *r;
    attn_msg m;
    assert_int_equal(attn_ref_new(w, 5, &r, &m), ATTN_OK);
    float *x = random_input(6, 8, 1), y[48];
    assert_int_equal(attn_ref_forward(r, 3, x, y, &m), ATTN_OK);
    assert_int_equal(attn_ref_forward(r, 3, x + 24, y + 24, &m), ATTN_E_CAPACITY);
    assert_non_null(strstr(m.text, "3 of 5 cache positions are used"));
    assert_int_equal(attn_ref_len(r), 3);
    assert_int_equal(attn_ref_forward(r, 2, x + 24, y + 24, &m), ATTN_OK);
    assert_int_equal(attn_ref_len(r), 5);
    assert_int_equal(attn_ref_forward(r, 1, x, y, &m), ATTN_E_CAPACITY);
    assert_int_equal(attn_ref_forward(NULL, 1, x, y, &m), ATTN_E_INVALID);
    assert_int_equal(attn_ref_forward(r, -1, x, y, &m), ATTN_E_INVALID);
    attn_ref_free(r);
    attn_ref *r2 = NULL;
    assert_int_equal(attn_ref_new(w, c.kv_max_tokens + 1, &r2, &m), ATTN_E_INVALID);
    assert_null(r2);
    free(x);
    attn_weights_free(w);
}

static void truncate_then_reappend_equals_fresh_run(void **state) {
    (void)state;
    attn_config c = with_rope(config_small(4, 2, 8, 16), ATTN_ROPE_HALF, 8, ATTN_SCALING_NONE);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 2, &w, NULL), ATTN_OK);
    float *x = random_input(10, 16, 5), *other = random_input(4, 16, 6);
    float fresh[160], y[160], junk[64];
    run_ref_chunked(w, 10, x, fresh, 10);
    attn_ref *r;
    assert_int_equal(attn_ref_new(w, 0, &r, NULL), ATTN_OK);
    assert_int_equal(attn_ref_forward(r, 6, x, y, NULL), ATTN_OK);
    assert_int_equal(attn_ref_forward(r, 4, other, junk, NULL), ATTN_OK); /* rejected tokens */
    assert_int_equal(attn_ref_truncate(r, 6), ATTN_OK);
    assert_int_equal(attn_ref_truncate(r, 7), ATTN_E_INVALID);
    assert_int_equal(attn_ref_forward(r, 4, x + 96, y + 96, NULL), ATTN_OK);
    assert_memory_equal(y, fresh, sizeof fresh);
    attn_ref_free(r);
    free(x);
    free(other);
    attn_weights_free(w);
}

static void results_do_not_depend_on_thread_count(void **state) {
    (void)state;
    attn_config c = with_rope(config_small(8, 2, 16, 64), ATTN_ROPE_HALF, 16, ATTN_SCALING_LLAMA3);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, 4, &w, NULL), ATTN_OK);
    float *x = random_input(33, 64, 5);
    float *y[3];
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        y[t] = malloc(33 * 64 * sizeof(float));
        run_ref_chunked(w, 33, x, y[t], 33);
    }
    assert_memory_equal(y[0], y[1], 33 * 64 * sizeof(float));
    assert_memory_equal(y[0], y[2], 33 * 64 * sizeof(float));
    for (int t = 0; t < 3; t++)
        free(y[t]);
    free(x);
    attn_weights_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_hand_worked_causal_weights),
        cmocka_unit_test(bf16_rounding_of_operands),
        cmocka_unit_test(reference_bf16_attention_worked_by_hand),
        cmocka_unit_test(reference_noncausal_sees_every_key),
        cmocka_unit_test(reference_block_with_identity_projections),
        cmocka_unit_test(rope_position_zero_is_identity),
        cmocka_unit_test(rope_scores_depend_only_on_relative_position),
        cmocka_unit_test(rope_interleaved_equals_half_after_permutation),
        cmocka_unit_test(rope_partial_leaves_tail_dims_untouched),
        cmocka_unit_test(rope_scaling_rules_for_frequencies),
        cmocka_unit_test(gqa_equals_mha_with_replicated_kv_heads),
        cmocka_unit_test(reference_matches_independent_implementation_over_sweep),
        cmocka_unit_test(chunked_equals_one_shot),
        cmocka_unit_test(sliding_window_gives_zero_weight_outside),
        cmocka_unit_test(softcap_bounds_scores),
        cmocka_unit_test(reference_expressions),
        cmocka_unit_test(kv_cache_dtype_rounds_keys_and_values),
        cmocka_unit_test(capacity_exhaustion_appends_nothing),
        cmocka_unit_test(truncate_then_reappend_equals_fresh_run),
        cmocka_unit_test(results_do_not_depend_on_thread_count),
        cmocka_unit_test(reference_yarn_frequencies_and_factor),
        cmocka_unit_test(reference_alibi_slopes_and_scores),
        cmocka_unit_test(reference_sinks_join_the_denominator),
        cmocka_unit_test(reference_chunks_hide_earlier_chunks),
        cmocka_unit_test(reference_qk_norm_and_temperature),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
