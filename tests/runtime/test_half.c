/* test_half.c: f16 and bf16 conversions: exact round trips, round to
 * nearest even, overflow, subnormals, NaN; f16 checked against the
 * compiler's own _Float16 over many random values. */
#include <math.h>
#include <string.h>

#include "rt.h"
#include "support.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void f16_round_trips_every_value(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = rt_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
            assert_true(isnan(rt_f16_to_f32(rt_f32_to_f16(f))));
            continue;
        }
        assert_int_equal(rt_f32_to_f16(f), h);
    }
}

static void bf16_round_trips_every_value(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = rt_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(rt_bf16_to_f32(rt_f32_to_bf16(f))));
        else
            assert_int_equal(rt_f32_to_bf16(f), h);
    }
}

static void f16_rounds_to_nearest_even(void **state) {
    (void)state;
    assert_int_equal(rt_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     /* tie -> even (down) */
    assert_int_equal(rt_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie -> even (up) */
    assert_int_equal(rt_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(rt_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(rt_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(rt_f32_to_f16(65520.0f), 0x7c00); /* overflow -> inf */
    assert_int_equal(rt_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(rt_f32_to_f16(0x1p-24f), 0x0001); /* smallest subnormal */
    assert_int_equal(rt_f32_to_f16(0x1p-25f), 0x0000); /* tie -> even (zero) */
    assert_int_equal(rt_f32_to_f16(0x1.8p-24f), 0x0002);
    assert_int_equal(rt_f32_to_f16(-0.0f), 0x8000);
    assert_true(isnan(rt_f16_to_f32(rt_f32_to_f16(NAN))));
}

static void bf16_rounds_to_nearest_even(void **state) {
    (void)state;
    assert_int_equal(rt_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(rt_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie -> even */
    assert_int_equal(rt_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even */
    assert_int_equal(rt_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(rt_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(rt_f32_to_bf16(3.4e38f), 0x7f80); /* rounds past the largest */
    assert_true(isnan(rt_bf16_to_f32(rt_f32_to_bf16(NAN))));
    uint32_t nan_low = 0x7f800001u; /* a NaN whose payload is only in low bits */
    float f;
    memcpy(&f, &nan_low, 4);
    assert_true(isnan(rt_bf16_to_f32(rt_f32_to_bf16(f))));
}

static void f16_agrees_with_the_compiler_float16(void **state) {
    (void)state;
#ifdef __FLT16_MAX__
    uint64_t s = 42;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)((rnd_unit(&s) + 1.0) * 2147483647.0);
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f))
            continue;
        _Float16 h = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        if (rt_f32_to_f16(f) != hb)
            fail_msg("f=%a (0x%08x): ours 0x%04x, compiler 0x%04x", (double)f, bits(f),
                     rt_f32_to_f16(f), hb);
    }
#else
    skip();
#endif
}

static void rt_round_is_idempotent(void **state) {
    (void)state;
    uint64_t s = 7;
    for (int i = 0; i < 100000; i++) {
        float f = (float)(rnd_unit(&s) * 1000.0);
        for (int t = 0; t < ATTN_DTYPE_COUNT; t++) {
            float r = rt_round((attn_dtype)t, f);
            assert_true(rt_round((attn_dtype)t, r) == r);
            assert_true(fabsf(r - f) <= fabsf(f) * (t == ATTN_DTYPE_BF16 ? 0x1p-8f : 0x1p-11f));
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(f16_round_trips_every_value),
        cmocka_unit_test(bf16_round_trips_every_value),
        cmocka_unit_test(f16_rounds_to_nearest_even),
        cmocka_unit_test(bf16_rounds_to_nearest_even),
        cmocka_unit_test(f16_agrees_with_the_compiler_float16),
        cmocka_unit_test(rt_round_is_idempotent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
