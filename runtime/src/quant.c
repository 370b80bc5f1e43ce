/* quant.c: ggml's block formats Q8_0 and Q4_0, bit for bit, so GGUF
 * tensors load as they are and quantizing at load gives the blocks
 * llama.cpp's converter writes. The layouts are ggml-common.h's block_q8_0
 * (f16 d, 32 x int8 q; w = d * q) and block_q4_0 (f16 d, 16 bytes: element
 * j < 16 in the low nibble of byte j, element 16 + j in its high nibble;
 * w = d * (q - 8)); the quantizers are ggml-quants.c's reference ones,
 * quantize_row_q8_0_ref and quantize_row_q4_0_ref. */
#include <math.h>
#include <string.h>

#include "rt.h"

/* d of a block as stored (little-endian f16) and read back. */
static void put_d(unsigned char *p, float d) {
    uint16_t h = rt_f32_to_f16(d);
    p[0] = (unsigned char)h;
    p[1] = (unsigned char)(h >> 8);
}

static float get_d(const unsigned char *p) {
    return rt_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void q8_block(const float *x, unsigned char *b) {
    float amax = 0.0f;
    for (int j = 0; j < RT_QK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_d(b, d);
    for (int j = 0; j < RT_QK; j++)
        b[2 + j] = (unsigned char)(int8_t)roundf(x[j] * id);
}

static void q4_block(const float *x, unsigned char *b) {
    float amax = 0.0f, max = 0.0f; /* the signed value of largest magnitude, first wins */
    for (int j = 0; j < RT_QK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_d(b, d);
    for (int j = 0; j < RT_QK / 2; j++) {
        /* x * id lies in [-8, 8]: + 8.5 truncated is 0..16, capped at 15 */
        int lo = (int)(x[j] * id + 8.5f), hi = (int)(x[RT_QK / 2 + j] * id + 8.5f);
        b[2 + j] = (unsigned char)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
    }
}

int64_t rt_quant_row(attn_dtype t, const float *x, unsigned char *dst, int64_t n) {
    size_t bb = rt_quant_block_bytes(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    for (int64_t b = 0; b < n / RT_QK; b++) {
        unsigned char *o = dst + (size_t)b * bb;
        if (t == ATTN_DTYPE_Q8_0)
            q8_block(x + b * RT_QK, o);
        else
            q4_block(x + b * RT_QK, o);
        if (!isfinite(get_d(o))) /* |x| beyond f16's range times 127 (or 8) */
            return b * RT_QK;
    }
    return -1;
}

void rt_dequant_row(attn_dtype t, const unsigned char *src, float *y, int64_t n) {
    size_t bb = rt_quant_block_bytes(t);
    for (int64_t b = 0; b < n / RT_QK; b++) {
        const unsigned char *p = src + (size_t)b * bb;
        float d = get_d(p), *o = y + b * RT_QK;
        if (t == ATTN_DTYPE_Q8_0) {
            for (int j = 0; j < RT_QK; j++)
                o[j] = (float)(int8_t)p[2 + j] * d;
            continue;
        }
        for (int j = 0; j < RT_QK / 2; j++) {
            o[j] = (float)((p[2 + j] & 15) - 8) * d;
            o[RT_QK / 2 + j] = (float)((p[2 + j] >> 4) - 8) * d;
        }
    }
}

/* Whether block b of t holds exactly the values x. */
static bool block_holds(attn_dtype t, const unsigned char *b, const float *x) {
    float y[RT_QK];
    rt_dequant_row(t, b, y, RT_QK);
    return memcmp(x, y, sizeof y) == 0;
}

/* A block of t holding exactly the values x, if one exists with the scale
 * the largest |x| suggests: a block another quantizer wrote (llama.cpp's
 * importance-weighted Q4_0, say) has another scale than the reference
 * quantizer would choose, and its values must come back unchanged. */
static bool exact_block(attn_dtype t, const float *x, unsigned char *b) {
    int big = 0;
    for (int j = 1; j < RT_QK; j++)
        if (fabsf(x[j]) > fabsf(x[big]))
            big = j;
    int lo = t == ATTN_DTYPE_Q8_0 ? -127 : -8, hi = t == ATTN_DTYPE_Q8_0 ? 127 : 7;
    for (int q = lo; q <= hi && x[big] != 0.0f; q++) {
        if (q == 0)
            continue;
        float d = rt_f16_to_f32(rt_f32_to_f16(x[big] / (float)q));
        if (!(d != 0.0f) || !isfinite(d) || (float)q * d != x[big])
            continue;
        int qs[RT_QK], j = 0;
        for (; j < RT_QK; j++) {
            float r = rintf(x[j] / d);
            if (r < (float)lo || r > (float)hi || r * d != x[j])
                break;
            qs[j] = (int)r;
        }
        if (j < RT_QK)
            continue;
        put_d(b, d);
        for (j = 0; j < RT_QK; j++) {
            if (t == ATTN_DTYPE_Q8_0)
                b[2 + j] = (unsigned char)(int8_t)qs[j];
            else if (j < RT_QK / 2)
                b[2 + j] = (unsigned char)(qs[j] + 8);
            else
                b[2 + j - RT_QK / 2] |= (unsigned char)((qs[j] + 8) << 4);
        }
        return true;
    }
    return false;
}

int64_t rt_quant_row_exact(attn_dtype t, const float *x, unsigned char *dst, int64_t n) {
    int64_t bad = rt_quant_row(t, x, dst, n);
    size_t bb = rt_quant_block_bytes(t);
    for (int64_t b = 0; bad < 0 && b < n / RT_QK; b++) {
        unsigned char *o = dst + (size_t)b * bb, other[34];
        if (!block_holds(t, o, x + b * RT_QK) && exact_block(t, x + b * RT_QK, other))
            memcpy(o, other, bb);
    }
    return bad;
}

void rt_round_row(attn_dtype t, float *x, int64_t n) {
    if (!rt_quant_block_bytes(t)) {
        for (int64_t i = 0; i < n; i++)
            x[i] = rt_round(t, x[i]);
        return;
    }
    unsigned char b[34];
    for (int64_t i = 0; i + RT_QK <= n; i += RT_QK)
        if (rt_quant_row(t, x + i, b, RT_QK) < 0)
            rt_dequant_row(t, b, x + i, RT_QK);
}

void rt_to_f32(attn_dtype t, const unsigned char *src, float *y, int64_t n) {
    if (attn_dtype_block(t) > 1) {
        rt_dequant_row(t, src, y, n);
    } else if (t == ATTN_DTYPE_F32) {
        memcpy(y, src, (size_t)n * sizeof *y);
    } else {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
            y[i] = t == ATTN_DTYPE_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h);
        }
    }
}

const char *rt_unstorable(float v) {
    return isnan(v) ? "NaN" : isinf(v) ? "infinity" : "values whose block scale overflows f16";
}
