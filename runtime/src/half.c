/* half.c: binary16 and bfloat16 conversions used by safetensors I/O and by
 * the reference engine's rounding of weights and K/V to their dtypes. */
#include <math.h>
#include <string.h>

#include "rt.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t rt_f32_to_bf16(float f) {
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float rt_bf16_to_f32(uint16_t h) {
    return float_of((uint32_t)h << 16);
}

uint16_t rt_f32_to_f16(float f) {
    uint32_t u = bits_of(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return sign | 0x7e00u;
    if (a >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return sign | 0x7c00u;
    if (a < 0x38800000u) { /* below 2^-14: subnormal or zero */
        /* value = a_f32; subnormal unit is 2^-24; round-to-nearest-even
         * through the float adder, which rounds exactly this way. */
        float v = float_of(a) + 0.5f; /* 0.5 = 2^-1: ulp of 2^-1..1 is 2^-24 */
        return sign | (uint16_t)(bits_of(v) - bits_of(0.5f));
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
    return sign | (uint16_t)(a >> 13);
}

float rt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)
        return float_of(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) /* zero or subnormal: mant * 2^-24 exactly */
        return float_of(sign | bits_of((float)mant * 0x1p-24f));
    return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

float rt_round(attn_dtype t, float f) {
    switch (t) {
    case ATTN_DTYPE_F32: return f;
    case ATTN_DTYPE_F16: return rt_f16_to_f32(rt_f32_to_f16(f));
    case ATTN_DTYPE_BF16: return rt_bf16_to_f32(rt_f32_to_bf16(f));
    case ATTN_DTYPE_Q8_0:
    case ATTN_DTYPE_Q4_0: return f;
    case ATTN_DTYPE_COUNT: break;
    }
    return NAN;
}
