/* test_quant.c: ggml's block formats Q8_0 and Q4_0: hand-made blocks (scale
 * bits, nibble order, negative scales, zero blocks), round trips, blocks
 * other quantizers write, values no block holds; and the files that carry
 * them (safetensors U8 + __metadata__, attn_weights_save/load). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"
#include "support.h"

static int setup(void **state) {
    *state = tmpdir_new();
    return 0;
}

static int teardown(void **state) {
    tmpdir_remove(*state);
    return 0;
}

static uint16_t d_bits(const unsigned char *b) {
    return (uint16_t)(b[0] | b[1] << 8);
}

/* x_j = j - 16: amax 16 at j = 0, d = 16/127 (f16 0x3008), q = round(x * 127/16). */
static void q8_0_block_by_hand(void **state) {
    (void)state;
    float x[32], y[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    unsigned char b[34];
    assert_int_equal(rt_quant_row(ATTN_DTYPE_Q8_0, x, b, 32), -1);
    assert_int_equal(d_bits(b), 0x3008);
    const int q[][2] = {{0, -127}, {1, -119}, {2, -111}, {16, 0}, {17, 8}, {31, 119}};
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        assert_int_equal((int8_t)b[2 + q[i][0]], q[i][1]);
    rt_dequant_row(ATTN_DTYPE_Q8_0, b, y, 32);
    assert_true(y[0] == -127 * 0.1259765625f);
    assert_true(y[16] == 0.0f);
    assert_int_equal(rt_quant_block_bytes(ATTN_DTYPE_Q8_0), 34);
    assert_int_equal(attn_dtype_bytes(ATTN_DTYPE_Q8_0, 64), 68);
    assert_int_equal(attn_dtype_block(ATTN_DTYPE_Q8_0), 32);
    assert_string_equal(attn_dtype_name(ATTN_DTYPE_Q8_0), "q8_0");
}

/* The same x as Q4_0: max -16, d = -16/-8 = 2, q = trunc(x/2 + 8.5) capped
 * at 15; value e < 16 in the low nibble of byte e, 16 + e in its high one. */
static void q4_0_nibble_order_by_hand(void **state) {
    (void)state;
    float x[32], y[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    unsigned char b[18];
    assert_int_equal(rt_quant_row(ATTN_DTYPE_Q4_0, x, b, 32), -1);
    assert_int_equal(d_bits(b), 0x4000);
    assert_int_equal(b[2 + 0], 0x80);  /* q0 = 0, q16 = 8 */
    assert_int_equal(b[2 + 1], 0x91);  /* q1 = 1, q17 = 9 */
    assert_int_equal(b[2 + 15], 0xf8); /* q15 = 8, q31 = 16 capped to 15 */
    rt_dequant_row(ATTN_DTYPE_Q4_0, b, y, 32);
    assert_true(y[0] == -16.0f);
    assert_true(y[17] == 2.0f);
    assert_true(y[31] == 14.0f); /* the cap: 15 - 8 = 7 steps of 2 */
    assert_int_equal(attn_dtype_bytes(ATTN_DTYPE_Q4_0, 96), 54);
}

static void negative_scales_and_zero_blocks(void **state) {
    (void)state;
    float x[32] = {8.0f}, y[32];
    unsigned char b[34];
    /* Q4_0: the largest magnitude is positive, so d = 8/-8 = -1 */
    assert_int_equal(rt_quant_row(ATTN_DTYPE_Q4_0, x, b, 32), -1);
    assert_int_equal(d_bits(b), 0xbc00);
    assert_int_equal(b[2], 0x80);
    for (int j = 1; j < 16; j++)
        assert_int_equal(b[2 + j], 0x88);
    rt_dequant_row(ATTN_DTYPE_Q4_0, b, y, 32);
    assert_true(y[0] == 8.0f && y[1] == 0.0f);
    /* Q8_0: d is |max| / 127 > 0 and q carries the sign */
    x[0] = -3.0f;
    assert_int_equal(rt_quant_row(ATTN_DTYPE_Q8_0, x, b, 32), -1);
    assert_false(d_bits(b) & 0x8000);
    assert_int_equal((int8_t)b[2], -127);
    /* all zero: d 0 (Q4_0: -0), q 0 (Q8_0) or 8 (Q4_0); values 0 */
    memset(x, 0, sizeof x);
    assert_int_equal(rt_quant_row(ATTN_DTYPE_Q8_0, x, b, 32), -1);
    for (int j = 0; j < 34; j++)
        assert_int_equal(b[j], 0);
    assert_int_equal(rt_quant_row(ATTN_DTYPE_Q4_0, x, b, 32), -1);
    assert_int_equal(d_bits(b), 0x8000); /* 0 / -8 is -0, as in ggml */
    for (int j = 0; j < 16; j++)
        assert_int_equal(b[2 + j], 0x88);
    rt_dequant_row(ATTN_DTYPE_Q4_0, b, y, 32);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == 0.0f);
}

/* Quantizing dequantized values gives the same blocks back: the reference
 * quantizer on its own blocks, and the exact one on blocks of other
 * scales (another quantizer's), which the reference would change. */
static void blocks_round_trip(void **state) {
    (void)state;
    enum { N = 64 * 32 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    unsigned char *a = malloc(N / 32 * 34), *b = malloc(N / 32 * 34);
    uint64_t s = 3;
    for (int t = ATTN_DTYPE_Q8_0; t <= ATTN_DTYPE_Q4_0; t++) {
        attn_random_uniform(&s, x, N, 2.0);
        x[5] = 0; /* exact zeros inside a block too */
        assert_int_equal(rt_quant_row((attn_dtype)t, x, a, N), -1);
        rt_dequant_row((attn_dtype)t, a, y, N);
        assert_int_equal(rt_quant_row((attn_dtype)t, y, b, N), -1);
        assert_memory_equal(a, b, attn_dtype_bytes((attn_dtype)t, N));
        /* a block with scale 0.3 whose q stay well inside the range */
        size_t bb = rt_quant_block_bytes((attn_dtype)t);
        unsigned char own[34];
        uint16_t d = rt_f32_to_f16(0.3f);
        own[0] = (unsigned char)d, own[1] = (unsigned char)(d >> 8);
        for (size_t j = 2; j < bb; j++)
            own[j] = t == ATTN_DTYPE_Q8_0 ? (unsigned char)(int8_t)((int)j % 40 - 20)
                                          : (unsigned char)((3 + j % 9) | (12 - j % 7) << 4);
        float z[32];
        rt_dequant_row((attn_dtype)t, own, y, 32);
        assert_int_equal(rt_quant_row((attn_dtype)t, y, b, 32), -1);
        rt_dequant_row((attn_dtype)t, b, z, 32);
        assert_memory_not_equal(y, z, sizeof z); /* the reference picks its own scale */
        assert_int_equal(rt_quant_row_exact((attn_dtype)t, y, b, 32), -1);
        rt_dequant_row((attn_dtype)t, b, z, 32); /* a block of the same values */
        assert_memory_equal(y, z, sizeof z);
    }
    free(x);
    free(y);
    free(a);
    free(b);
}

static void values_no_block_holds_are_refused(void **state) {
    (void)state;
    float x[64] = {0};
    unsigned char b[68];
    for (int t = ATTN_DTYPE_Q8_0; t <= ATTN_DTYPE_Q4_0; t++) {
        x[37] = NAN;
        assert_int_equal(rt_quant_row((attn_dtype)t, x, b, 64), 37);
        x[37] = -INFINITY;
        assert_int_equal(rt_quant_row((attn_dtype)t, x, b, 64), 37);
        x[37] = 1e7f; /* 1e7 / 127 (or 8) is past f16's 65504 */
        assert_int_equal(rt_quant_row((attn_dtype)t, x, b, 64), 32);
        x[37] = 0;
    }
}

/* A q8_0 tensor in safetensors: U8 bytes [rows, 34 per 32], the format in
 * __metadata__; read back as values; bad rows and NaN refused, with no
 * file left behind. */
static void safetensors_carry_blocks(void **state) {
    const char *dir = *state;
    float a[3 * 64], back[3 * 64];
    uint64_t s = 5;
    attn_random_uniform(&s, a, 3 * 64, 1.0);
    const char *path = path_in(dir, "q.safetensors");
    attn_st_tensor t[] = {{"w", ATTN_DTYPE_Q8_0, 2, {3, 64}, a},
                          {"v", ATTN_DTYPE_Q4_0, 1, {64}, a}};
    attn_msg m;
    assert_int_equal(attn_st_write(path, t, 2, &m), ATTN_OK);
    attn_st *f;
    assert_int_equal(attn_st_open(path, &f, &m), ATTN_OK);
    const attn_st_info *w = attn_st_find(f, "w");
    assert_string_equal(w->dtype, "U8");
    assert_int_equal(w->shape[1], 68);
    assert_int_equal(w->nbytes, 3 * 68);
    assert_string_equal(attn_st_metadata(f, "attnc.format.w"), "q8_0");
    assert_string_equal(attn_st_metadata(f, "attnc.format.v"), "q4_0");
    assert_null(attn_st_metadata(f, "attnc.format.x"));
    int64_t shape[ATTN_ST_MAX_DIMS];
    assert_int_equal(attn_st_format(f, w, shape), ATTN_DTYPE_Q8_0);
    assert_int_equal(shape[0], 3);
    assert_int_equal(shape[1], 64);
    assert_int_equal(attn_st_read_f32(f, "w", 2, (int64_t[]){3, 64}, back, &m), ATTN_OK);
    unsigned char blk[3 * 68];
    float want[3 * 64];
    assert_int_equal(rt_quant_row(ATTN_DTYPE_Q8_0, a, blk, 3 * 64), -1);
    rt_dequant_row(ATTN_DTYPE_Q8_0, blk, want, 3 * 64);
    assert_memory_equal(back, want, sizeof want);
    assert_memory_equal(w->data, blk, sizeof blk);
    assert_int_equal(attn_st_read_f32(f, "w", 2, (int64_t[]){3, 68}, back, &m), ATTN_E_FORMAT);
    assert_non_null(strstr(m.text, "has shape [3, 64], expected [3, 68]"));
    attn_st_close(f);

    /* rows that are not whole blocks; NaN: nothing written */
    const char *bad = path_in(dir, "bad.safetensors");
    attn_st_tensor odd = {"w", ATTN_DTYPE_Q4_0, 2, {2, 40}, a};
    assert_int_equal(attn_st_write(bad, &odd, 1, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "tensor 'w': q4_0 needs rows of a multiple of 32 values"));
    a[70] = NAN;
    assert_int_equal(attn_st_write(bad, t, 1, &m), ATTN_E_INVALID);
    assert_non_null(
        strstr(m.text, "tensor 'w' holds NaN at element 70: it cannot be stored as q8_0"));
    assert_int_equal(dir_count(dir), 1);
}

/* attn_weights_save/load in q8_0 and q4_0: the same values back (biases
 * f32), whatever the spec's dtype; f32 files quantized at load; NaN and
 * quantized vectors refused, naming the tensor. */
static void weights_save_and_load_blocks(void **state) {
    const char *dir = *state;
    for (int t = ATTN_DTYPE_Q8_0; t <= ATTN_DTYPE_Q4_0; t++) {
        attn_config c = config_small(4, 2, 16, 64);
        c.qkv_bias = true;
        c.dtype = (attn_dtype)t;
        attn_weights *w, *back;
        attn_msg m;
        assert_int_equal(attn_weights_random(&c, 7, &w, &m), ATTN_OK);
        const char *path = path_in(dir, "w.safetensors");
        assert_int_equal(attn_weights_save(w, path, c.dtype, NULL, &m), ATTN_OK);
        attn_st *f;
        assert_int_equal(attn_st_open(path, &f, &m), ATTN_OK);
        assert_int_equal(attn_st_format(f, attn_st_find(f, "k_proj.weight"), NULL), c.dtype);
        assert_string_equal(attn_st_find(f, "k_proj.bias")->dtype, "F32");
        attn_st_close(f);
        assert_int_equal(attn_weights_load(&c, path, NULL, &back, &m), ATTN_OK);
        assert_memory_equal(back->wq, w->wq, 64 * 64 * sizeof(float));
        assert_memory_equal(back->wo, w->wo, 64 * 64 * sizeof(float));
        assert_memory_equal(back->bk, w->bk, 32 * sizeof(float));
        attn_weights_free(back);
        attn_config cf = c; /* an f32 spec reads the same values */
        cf.dtype = ATTN_DTYPE_F32;
        assert_int_equal(attn_weights_load(&cf, path, NULL, &back, &m), ATTN_OK);
        assert_memory_equal(back->wv, w->wv, 32 * 64 * sizeof(float));
        attn_weights_free(back);
        /* f32 values quantized at load are the random weights (rounded the same way) */
        attn_weights *raw;
        assert_int_equal(attn_weights_random(&cf, 7, &raw, &m), ATTN_OK);
        assert_int_equal(attn_weights_save(raw, path, ATTN_DTYPE_F32, NULL, &m), ATTN_OK);
        assert_int_equal(attn_weights_load(&c, path, NULL, &back, &m), ATTN_OK);
        assert_memory_equal(back->wk, w->wk, 32 * 64 * sizeof(float));
        attn_weights_free(back);
        raw->wk[100] = INFINITY;
        assert_int_equal(attn_weights_save(raw, path, ATTN_DTYPE_F32, NULL, &m), ATTN_OK);
        assert_int_equal(attn_weights_load(&c, path, NULL, &back, &m), ATTN_E_FORMAT);
        assert_non_null(strstr(m.text, "tensor 'k_proj.weight' holds infinity at element 100: it "
                                       "cannot be quantized"));
        attn_weights_free(raw);
        /* a bias stored in a block format */
        attn_st_tensor qb[] = {{"q_proj.weight", c.dtype, 2, {64, 64}, w->wq},
                               {"k_proj.weight", c.dtype, 2, {32, 64}, w->wk},
                               {"v_proj.weight", c.dtype, 2, {32, 64}, w->wv},
                               {"o_proj.weight", c.dtype, 2, {64, 64}, w->wo},
                               {"q_proj.bias", c.dtype, 1, {64}, w->bq}};
        assert_int_equal(attn_st_write(path, qb, 5, &m), ATTN_OK);
        assert_int_equal(attn_weights_load(&c, path, NULL, &back, &m), ATTN_E_FORMAT);
        assert_non_null(strstr(m.text, "tensor 'q_proj.bias' is stored as Q"));
        assert_non_null(strstr(m.text, "vectors (biases, norms, sinks) must be F32, F16 or BF16"));
        attn_weights_free(w);
    }
    /* a spec whose rows are not whole blocks */
    attn_config c = config_small(4, 2, 12, 48);
    c.dtype = ATTN_DTYPE_Q8_0;
    attn_msg m;
    assert_int_equal(attn_config_check(&c, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "dtype q8_0 quantizes blocks of 32 inputs: d_model (48) and "
                                   "heads * head_dim (48) must be multiples of 32"));
    /* a q8_0 cache quantizes each head's rows in blocks of 32; no q4_0 cache */
    c = config_small(4, 2, 16, 64);
    c.kv_dtype = ATTN_DTYPE_Q8_0;
    assert_int_equal(attn_config_check(&c, &m), ATTN_E_INVALID);
    assert_non_null(
        strstr(m.text, "K and V in blocks of 32: head_dim (16) must be a multiple of 32"));
    c = config_small(4, 2, 32, 64);
    c.kv_dtype = ATTN_DTYPE_Q8_0;
    assert_int_equal(attn_config_check(&c, &m), ATTN_OK);
    c.kv_dtype = ATTN_DTYPE_Q4_0;
    assert_int_equal(attn_config_check(&c, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "kv_cache.dtype q4_0 is not supported"));
}

/* The reference engine rounds K and V rows through q8_0 blocks: each
 * block of 32 comes back as the reference quantizer's values. */
static void reference_rounds_rows_through_blocks(void **state) {
    (void)state;
    float x[96], want[96];
    uint64_t s = 11;
    attn_random_uniform(&s, x, 96, 3.0);
    unsigned char b[3 * 34];
    assert_int_equal(rt_quant_row(ATTN_DTYPE_Q8_0, x, b, 96), -1);
    rt_dequant_row(ATTN_DTYPE_Q8_0, b, want, 96);
    rt_round_row(ATTN_DTYPE_Q8_0, x, 96);
    assert_memory_equal(x, want, sizeof want);
    x[40] = NAN; /* its block stays as it is */
    rt_round_row(ATTN_DTYPE_Q8_0, x, 96);
    assert_true(isnan(x[40]));
    assert_memory_equal(x, want, 32 * sizeof(float));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(q8_0_block_by_hand),
        cmocka_unit_test(q4_0_nibble_order_by_hand),
        cmocka_unit_test(negative_scales_and_zero_blocks),
        cmocka_unit_test(blocks_round_trip),
        cmocka_unit_test(values_no_block_holds_are_refused),
        cmocka_unit_test_setup_teardown(safetensors_carry_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(weights_save_and_load_blocks, setup, teardown),
        cmocka_unit_test(reference_rounds_rows_through_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
