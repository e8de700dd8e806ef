/* Unit tests for the tensor block formats (src/kernels/quant.c):
 * hand-built blocks of every weight type, quantizer known answers and
 * round trips, dot products against a double-precision reference, edge
 * cases and determinism. */
#include "test_util.h"
#include "kernels/kernels.h"

#include <math.h>

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */
static int setup(void **state) {
    (void)state;
    sp_base_init();
    return 0;
}

static void put_f16(uint8_t *p, float f) {
    sp_f16 h = sp_f32_to_f16(f);
    memcpy(p, &h, 2);
}
static float get_f16(const uint8_t *p) {
    sp_f16 h;
    memcpy(&h, p, 2);
    return sp_f16_to_f32(h);
}
static float get_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

static size_t row_bytes(uint32_t t, int64_t n) {
    size_t b = (size_t)sp_dtype_row_bytes(t, (uint64_t)n);
    assert_true(b > 0);
    return b;
}
static int64_t block_of(uint32_t t) { return sp_dtype_get(t)->block; }

/* The weight rule (sp_quantize_row) or the activation rule
 * (sp_quantize_act_row) of type t. */
static void quantize(bool act, uint32_t t, const float *x, void *dst, int64_t n) {
    if (act) sp_quantize_act_row(t, x, dst, n);
    else sp_quantize_row(t, x, dst, n);
}
static size_t block_bytes(uint32_t t) { return sp_dtype_get(t)->bytes; }

/* Activation-like data: uniform in [-1, 1) with an outlier every 97. */
static void fill_random(float *x, int64_t n, uint64_t seed) {
    sp_rng r = {seed};
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(2.0 * sp_rng_next_f64(&r) - 1.0);
        if (i % 97 == 13) x[i] *= 20.0f;
    }
}

/* Random blocks of any weight type: random bytes, with every fp16 scale
 * field (d, dmin, m) replaced by a sane value so results stay finite. */
static void random_blocks(uint32_t t, uint8_t *dst, int64_t n, uint64_t seed) {
    sp_rng r = {seed};
    size_t nbytes = row_bytes(t, n), bb = block_bytes(t);
    for (size_t i = 0; i < nbytes; i++) dst[i] = (uint8_t)sp_rng_next(&r);
    for (size_t off = 0; off < nbytes; off += bb) {
        uint8_t *b = dst + off;
        float d = (float)(0.001 + 0.01 * sp_rng_next_f64(&r));
        float m = (float)(0.02 * sp_rng_next_f64(&r) - 0.01);
        switch (t) {
        case SP_Q4_0: case SP_Q5_0: case SP_Q8_0: put_f16(b, d); break;
        case SP_Q4_1: case SP_Q5_1: put_f16(b, d); put_f16(b + 2, m); break;
        case SP_Q4_K: case SP_Q5_K: put_f16(b, d); put_f16(b + 2, fabsf(m)); break;
        case SP_Q6_K: put_f16(b + 208, d); break;
        default: fail_msg("random_blocks: type %u", t);
        }
    }
}

/* ------------------------------------------------------------------------
 * Hand-built blocks, dequantized
 * ---------------------------------------------------------------------- */
static void test_dequant_q4_0(void **state) {
    (void)state;
    uint8_t b[18];
    put_f16(b, 0.5f);                       /* d = 0.5 (0x3800) */
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    sp_dequantize_row(SP_Q4_0, b, y, 32);
    assert_true(y[0] == -4.0f);             /* (0 - 8) * 0.5 */
    assert_true(y[15] == 3.5f);             /* (15 - 8) * 0.5 */
    assert_true(y[16] == 3.5f);             /* high nibble of qs[0] = 15: (15 - 8) * 0.5 */
    assert_true(y[31] == -4.0f);            /* high nibble of qs[15] = 0 */
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)(j - 8) * 0.5f);
        assert_true(y[j + 16] == (float)(7 - j) * 0.5f);
    }
}

static void test_dequant_q4_1(void **state) {
    (void)state;
    uint8_t b[20];
    put_f16(b, 0.25f);                      /* d */
    put_f16(b + 2, -1.0f);                  /* m */
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    sp_dequantize_row(SP_Q4_1, b, y, 32);
    assert_true(y[0] == -1.0f);             /* 0 * 0.25 - 1 */
    assert_true(y[5] == 0.25f);             /* 5 * 0.25 - 1 */
    assert_true(y[16] == 2.75f);            /* 15 * 0.25 - 1 */
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)j * 0.25f - 1.0f);
        assert_true(y[j + 16] == (float)(15 - j) * 0.25f - 1.0f);
    }
}

/* Fifth bit of element e (0..31) is bit e of the little-endian qh. */
static void fill_q5(uint8_t *qh, uint8_t *qs) {
    const uint8_t h[4] = {0x55, 0x55, 0xAA, 0xAA};   /* qh = 0xAAAA5555 */
    memcpy(qh, h, 4);
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(j | ((15 - j) << 4));
}
static int q5_expected(int e) {   /* the 5-bit value of element e of fill_q5 */
    uint32_t qh = 0xAAAA5555u;
    int nib = e < 16 ? e : 15 - (e - 16);
    return nib | (int)(((qh >> e) & 1) << 4);
}

static void test_dequant_q5_0(void **state) {
    (void)state;
    uint8_t b[22];
    put_f16(b, 2.0f);
    fill_q5(b + 2, b + 6);
    float y[32];
    sp_dequantize_row(SP_Q5_0, b, y, 32);
    assert_true(y[0] == 0.0f);              /* nibble 0, qh bit 0 = 1: (16 - 16) * 2 */
    assert_true(y[1] == -30.0f);            /* nibble 1, qh bit 1 = 0: (1 - 16) * 2 */
    assert_true(y[16] == -2.0f);            /* nibble 15, qh bit 16 = 0: (15 - 16) * 2 */
    assert_true(y[17] == 28.0f);            /* nibble 14, qh bit 17 = 1: (30 - 16) * 2 */
    for (int e = 0; e < 32; e++) assert_true(y[e] == (float)(q5_expected(e) - 16) * 2.0f);
}

static void test_dequant_q5_1(void **state) {
    (void)state;
    uint8_t b[24];
    put_f16(b, 0.5f);
    put_f16(b + 2, -8.0f);
    fill_q5(b + 4, b + 8);
    float y[32];
    sp_dequantize_row(SP_Q5_1, b, y, 32);
    assert_true(y[0] == 0.0f);              /* q = 16: 16 * 0.5 - 8 */
    assert_true(y[1] == -7.5f);             /* q = 1 */
    assert_true(y[16] == -0.5f);            /* q = 15 */
    assert_true(y[17] == 7.0f);             /* q = 30 */
    for (int e = 0; e < 32; e++) assert_true(y[e] == (float)q5_expected(e) * 0.5f - 8.0f);
}

static void test_dequant_q8_0(void **state) {
    (void)state;
    uint8_t b[34];
    put_f16(b, 0.125f);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    float y[32];
    sp_dequantize_row(SP_Q8_0, b, y, 32);
    assert_true(y[0] == -16.0f);            /* -128 * 0.125 */
    assert_true(y[31] == 15.0f);            /* 120 * 0.125 */
    for (int j = 0; j < 32; j++) assert_true(y[j] == (float)(j * 8 - 128) * 0.125f);
}

/* Q4_K/Q5_K test block: d = 0.5, dmin = 0.25,
 *   sc = {1, 2, 3, 4, 40, 50, 60, 63}, mn = {5, 6, 7, 8, 33, 17, 9, 63}.
 * Packing (sub-blocks 0..3 in the low 6 bits of bytes 0..3 / 4..7; 4..7 as
 * low nibbles in bytes 8..11 and top 2 bits in bits 6..7 of bytes 0..7):
 *   s[0] = 1 | (40>>4)<<6 = 0x81   s[4] = 5 | (33>>4)<<6 = 0x85
 *   s[1] = 2 | (50>>4)<<6 = 0xC2   s[5] = 6 | (17>>4)<<6 = 0x46
 *   s[2] = 3 | (60>>4)<<6 = 0xC3   s[6] = 7 | (9>>4)<<6  = 0x07
 *   s[3] = 4 | (63>>4)<<6 = 0xC4   s[7] = 8 | (63>>4)<<6 = 0xC8
 *   s[8]  = (40&15) | (33&15)<<4 = 0x18   s[9]  = (50&15) | (17&15)<<4 = 0x12
 *   s[10] = (60&15) | (9&15)<<4  = 0x9C   s[11] = (63&15) | (63&15)<<4 = 0xFF */
static const uint8_t k_scales[12] = {0x81, 0xC2, 0xC3, 0xC4, 0x85, 0x46, 0x07, 0xC8,
                                     0x18, 0x12, 0x9C, 0xFF};
static const int k_sc[8] = {1, 2, 3, 4, 40, 50, 60, 63};
static const int k_mn[8] = {5, 6, 7, 8, 33, 17, 9, 63};

/* The 4-bit value of element e: byte 32*(e/64) + e%32 of qs, low nibble
 * for the first 32 of each 64, high nibble for the second. */
static int k_nibble(const uint8_t *qs, int e) {
    uint8_t byte = qs[32 * (e / 64) + e % 32];
    return (e % 64) < 32 ? (byte & 15) : (byte >> 4);
}

static void test_dequant_q4_K(void **state) {
    (void)state;
    uint8_t b[144];
    put_f16(b, 0.5f);
    put_f16(b + 2, 0.25f);
    memcpy(b + 4, k_scales, 12);
    uint8_t *qs = b + 16;
    for (int k = 0; k < 128; k++) qs[k] = (uint8_t)(k * 37 + 11);
    float y[256];
    sp_dequantize_row(SP_Q4_K, b, y, 256);
    assert_true(y[0] == 4.25f);       /* qs[0]=0x0B low 11, sub 0: 0.5*1*11 - 0.25*5 */
    assert_true(y[32] == -1.5f);      /* qs[0] high 0, sub 1: 0.5*2*0 - 0.25*6 */
    assert_true(y[200] == 87.75f);    /* qs[104]=0x13 low 3, sub 6: 0.5*60*3 - 0.25*9 */
    assert_true(y[255] == 173.25f);   /* qs[127]=0x66 high 6, sub 7: 0.5*63*6 - 0.25*63 */
    for (int e = 0; e < 256; e++) {
        int s = e / 32;
        double want = 0.5 * k_sc[s] * k_nibble(qs, e) - 0.25 * k_mn[s];
        assert_true(y[e] == (float)want);
    }
}

static void test_dequant_q5_K(void **state) {
    (void)state;
    uint8_t b[176];
    put_f16(b, 0.5f);
    put_f16(b + 2, 0.25f);
    memcpy(b + 4, k_scales, 12);
    uint8_t *qh = b + 16, *qs = b + 48;
    for (int l = 0; l < 32; l++) qh[l] = (uint8_t)(l * 29 + 3);
    for (int k = 0; k < 128; k++) qs[k] = (uint8_t)(k * 37 + 11);
    float y[256];
    sp_dequantize_row(SP_Q5_K, b, y, 256);
    assert_true(y[0] == 12.25f);      /* 11 + 16 (qh[0]=3 bit 0): 0.5*1*27 - 1.25 */
    assert_true(y[32] == 14.5f);      /* 0 + 16 (qh[0] bit 1): 0.5*2*16 - 1.5 */
    assert_true(y[255] == 677.25f);   /* 6 + 16 (qh[31]=0x86 bit 7): 0.5*63*22 - 15.75 */
    for (int e = 0; e < 256; e++) {
        int s = e / 32, bit = 2 * (e / 64) + ((e % 64) >= 32);
        int q = k_nibble(qs, e) + 16 * ((qh[e % 32] >> bit) & 1);
        double want = 0.5 * k_sc[s] * q - 0.25 * k_mn[s];
        assert_true(y[e] == (float)want);
    }
}

/* Q6_K element e: half h = e/128, quarter u = (e%128)/32, l = e%32.
 * Low 4 bits: ql[64h + l + 32*(u&1)], low nibble if u < 2 else high;
 * high 2 bits: qh[32h + l] >> 2u.  Value (q - 32) * d * scales[e/16]. */
static void test_dequant_q6_K(void **state) {
    (void)state;
    uint8_t b[210];
    uint8_t *ql = b, *qh = b + 128;
    int8_t *sc = (int8_t *)(b + 192);
    for (int k = 0; k < 128; k++) ql[k] = (uint8_t)(k * 13 + 5);
    for (int k = 0; k < 64; k++) qh[k] = (uint8_t)(k * 59 + 1);
    for (int g = 0; g < 16; g++) sc[g] = (int8_t)(g * 9 - 70);
    put_f16(b + 208, 0.25f);
    float y[256];
    sp_dequantize_row(SP_Q6_K, b, y, 256);
    assert_true(y[0] == 192.5f);      /* ql[0]=5, qh[0]=1: q = 21 - 32 = -11; 0.25*-70*-11 */
    assert_true(y[100] == -116.0f);   /* ql[36]=0xD9 hi 13, qh[4]=0xED>>6 = 3: q = 61-32 = 29; 0.25*-16*29 */
    assert_true(y[255] == 113.75f);   /* ql[127]=0x78 hi 7, qh[63]=0x86>>6 = 2: q = 39-32 = 7; 0.25*65*7 */
    for (int e = 0; e < 256; e++) {
        int h = e / 128, u = (e % 128) / 32, l = e % 32;
        uint8_t lo = ql[64 * h + l + 32 * (u & 1)];
        int q = (u < 2 ? (lo & 15) : (lo >> 4)) | (((qh[32 * h + l] >> (2 * u)) & 3) << 4);
        double want = 0.25 * sc[e / 16] * (q - 32);
        assert_true(y[e] == (float)want);
    }
}

static void test_dequant_float_types(void **state) {
    (void)state;
    const sp_f16 h[4] = {0x3C00, 0xC000, 0x8000, 0x7BFF};  /* 1, -2, -0, 65504 */
    float y[4];
    sp_dequantize_row(SP_F16, h, y, 4);
    assert_true(y[0] == 1.0f && y[1] == -2.0f && y[3] == 65504.0f);
    assert_true(y[2] == 0.0f && signbit(y[2]));
    const sp_bf16 bf[3] = {0x3F80, 0xC040, 0x8000};        /* 1, -3, -0 */
    sp_dequantize_row(SP_BF16, bf, y, 3);
    assert_true(y[0] == 1.0f && y[1] == -3.0f && y[2] == 0.0f && signbit(y[2]));
    const float f[3] = {1.5f, -0.0f, 3e38f};
    sp_dequantize_row(SP_F32, f, y, 3);
    assert_true(y[0] == 1.5f && signbit(y[1]) && y[2] == 3e38f);
}

/* ------------------------------------------------------------------------
 * Quantizers: known answers and agreement with ggml's arithmetic (the
 * reference rule for weights, the x86 rule for activations)
 * ---------------------------------------------------------------------- */
static void test_quant_q4_0_known(void **state) {
    (void)state;
    float x[32];
    /* x[j] = (j - 8) * 0.5 for j < 16 (amax 4 at x[0] = -4), x[16..] = 0.
     * d = -4 / -8 = 0.5; q = trunc(x/0.5 + 8.5) = j; zeros give 8. */
    for (int j = 0; j < 32; j++) x[j] = j < 16 ? (float)(j - 8) * 0.5f : 0.0f;
    uint8_t b[18];
    sp_quantize_row(SP_Q4_0, x, b, 32);
    assert_true(get_f16(b) == 0.5f);
    for (int j = 0; j < 16; j++) assert_int_equal(b[2 + j], j | (8 << 4));
    /* Sign of d follows the first element of largest magnitude: x[0] = 4,
     * x[1] = -4 gives d = -0.5; x[1]/d + 8.5 = 16.5 is clamped to 15. */
    memset(x, 0, sizeof x);
    x[0] = 4.0f;
    x[1] = -4.0f;
    sp_quantize_row(SP_Q4_0, x, b, 32);
    assert_true(get_f16(b) == -0.5f);
    assert_int_equal(b[2] & 15, 0);         /* 4 / -0.5 + 8.5 = 0.5 -> 0 */
    assert_int_equal(b[3] & 15, 15);        /* clamped */
    float y[32];
    sp_dequantize_row(SP_Q4_0, b, y, 32);
    assert_true(y[0] == 4.0f && y[1] == -3.5f);
}

/* Q8_0/Q8_1 with d = 1 (amax 127), so q is x rounded: ties decide.  The
 * weight rule (sp_quantize_row, ggml's reference) rounds halves away from
 * zero; the activation rule (sp_quantize_act_row, llama.cpp x86) to even. */
static void test_quant_q8_known(void **state) {
    (void)state;
    float x[256] = {0};
    x[0] = 127.0f; x[1] = 2.5f; x[2] = -2.5f; x[3] = 0.49f; x[4] = -126.5f;
    x[5] = 3.5f; x[6] = -3.5f; x[7] = 0.5f; x[8] = -0.5f; x[9] = -1.5f;
    /* weight rule: halves away from zero */
    const int want_w[10] = {127, 3, -3, 0, -127, 4, -4, 1, -1, -2};
    /* activation rule: halves to even (both directions, both signs) */
    const int want_a[10] = {127, 2, -2, 0, -126, 4, -4, 0, 0, -2};
    uint8_t b[36];
    for (int act = 0; act < 2; act++) {
        const int *want = act ? want_a : want_w;
        if (act) sp_quantize_act_row(SP_Q8_0, x, b, 32);
        else sp_quantize_row(SP_Q8_0, x, b, 32);
        assert_true(get_f16(b) == 1.0f);
        const int8_t *q = (const int8_t *)(b + 2);
        int sum = 0;
        for (int j = 0; j < 10; j++) {
            if (q[j] != want[j]) fail_msg("rule %d: q[%d] = %d, want %d", act, j, q[j], want[j]);
            sum += want[j];
        }
        for (int j = 10; j < 32; j++) assert_int_equal(q[j], 0);
        /* Q8_1: the same quants, s = d * sum(q): -2 (weight), -1 (activation:
         * -126.5 gives -126). */
        if (act) sp_quantize_act_row(SP_Q8_1, x, b, 32);
        else sp_quantize_row(SP_Q8_1, x, b, 32);
        assert_true(get_f16(b) == 1.0f);
        assert_int_equal(sum, act ? -1 : -2);
        assert_true(get_f16(b + 2) == (float)sum);
        for (int j = 0; j < 10; j++) assert_int_equal(((const int8_t *)(b + 4))[j], want[j]);
    }
    /* The scales differ too: 1 / (amax / 127) and 127 / amax are one ulp
     * apart for this amax, which moves x * id across .5 without a tie:
     * 1.5000001 -> 2 (weight), 1.4999999 -> 1 (activation). */
    float y[32] = {0};
    y[0] = 0x1.a23d18p+0f;                  /* amax 1.6337447 */
    y[1] = 0x1.3c261ep-6f;                  /* 0.019296197 */
    y[2] = -y[1];
    sp_quantize_row(SP_Q8_0, y, b, 32);
    assert_int_equal(((const int8_t *)(b + 2))[1], 2);
    assert_int_equal(((const int8_t *)(b + 2))[2], -2);
    sp_quantize_act_row(SP_Q8_0, y, b, 32);
    assert_int_equal(((const int8_t *)(b + 2))[0], 127);
    assert_int_equal(((const int8_t *)(b + 2))[1], 1);
    assert_int_equal(((const int8_t *)(b + 2))[2], -1);
    /* Q8_K has one rule in both sets (the reference, which x86 also runs):
     * iscale = -127 / 127 = -1, q = rint(-x), ties to even. */
    x[6] = x[7] = x[8] = x[9] = 0.0f;
    uint8_t k[292], k2[292];
    sp_quantize_row(SP_Q8_K, x, k, 256);
    sp_quantize_act_row(SP_Q8_K, x, k2, 256);
    assert_memory_equal(k, k2, sizeof k);
    assert_true(get_f32(k) == -1.0f);       /* d = 1 / iscale */
    const int8_t *kq = (const int8_t *)(k + 4);
    assert_int_equal(kq[0], -127);
    assert_int_equal(kq[1], -2);            /* rint(-2.5) = -2 */
    assert_int_equal(kq[2], 2);             /* rint(2.5) = 2 */
    assert_int_equal(kq[4], 126);           /* rint(126.5) = 126 */
    assert_int_equal(kq[5], -4);            /* rint(-3.5) = -4 */
    int16_t bs[16];
    memcpy(bs, k + 260, 32);
    assert_int_equal(bs[0], -127 - 2 + 2 + 0 + 126 - 4);
    for (int g = 1; g < 16; g++) assert_int_equal(bs[g], 0);
    /* A negative signed max gives a positive d and -128 never appears. */
    memset(x, 0, sizeof x);
    x[7] = -254.0f; x[8] = 254.0f;
    sp_quantize_row(SP_Q8_K, x, k, 256);
    assert_true(get_f32(k) == 2.0f);
    assert_int_equal(kq[7], -127);
    assert_int_equal(kq[8], 127);
}

/* Independent statements of the quantizers (one block), written from the
 * formulas; the library must agree bit for bit.  Q8_0/Q8_1: act = false is
 * ggml's quantize_row_q8_0_ref / q8_1_ref (id = 1 / d, roundf), act = true
 * its AVX2 quantize_row_q8_0 / q8_1 (id = 127 / amax, round half to even,
 * which nearbyintf does in the default rounding mode). */
static void ref_q8_0(const float *x, uint8_t *b, bool with_sum, bool act) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127, id = act ? (amax != 0 ? 127.0f / amax : 0.0f) : (d != 0 ? 1.0f / d : 0.0f);
    int sum = 0;
    int8_t *q = (int8_t *)(b + (with_sum ? 4 : 2));
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)(act ? nearbyintf(x[j] * id) : roundf(x[j] * id));
        sum += q[j];
    }
    put_f16(b, d);
    if (with_sum) put_f16(b + 2, (float)sum * d);
}
static void ref_q8_K(const float *x, uint8_t *b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 256; j++) if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    float iscale = -127.f / max, d = 1 / iscale;
    int16_t bs[16] = {0};
    for (int j = 0; j < 256; j++) {
        int v = (int)nearbyintf(iscale * x[j]);
        if (v > 127) v = 127;
        ((int8_t *)(b + 4))[j] = (int8_t)v;
        bs[j / 16] = (int16_t)(bs[j / 16] + v);
    }
    memcpy(b, &d, 4);
    memcpy(b + 260, bs, 32);
}
static void ref_q4_q5(uint32_t t, const float *x, uint8_t *b) {
    bool has_min = t == SP_Q4_1 || t == SP_Q5_1, five = t == SP_Q5_0 || t == SP_Q5_1;
    int nmax = five ? 31 : 15;
    float d, id, mn = 0;
    if (has_min) {
        float mx = -INFINITY;
        mn = INFINITY;
        for (int j = 0; j < 32; j++) { mn = fminf(mn, x[j]); mx = fmaxf(mx, x[j]); }
        d = (mx - mn) / nmax;
    } else {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        d = max / (five ? -16 : -8);
    }
    id = d != 0 ? 1.0f / d : 0.0f;
    int v[32];
    for (int j = 0; j < 32; j++) {
        float f = has_min ? (x[j] - mn) * id + 0.5f : x[j] * id + (five ? 16.5f : 8.5f);
        v[j] = (int)f;
        if (v[j] > nmax) v[j] = nmax;
    }
    put_f16(b, d);
    uint8_t *p = b + 2;
    if (has_min) { put_f16(p, mn); p += 2; }
    if (five) {
        uint32_t qh = 0;
        for (int j = 0; j < 32; j++) qh |= (uint32_t)(v[j] >> 4) << j;
        memcpy(p, &qh, 4);
        p += 4;
    }
    for (int j = 0; j < 16; j++) p[j] = (uint8_t)((v[j] & 15) | ((v[j + 16] & 15) << 4));
}

/* Rows for the quantizer comparisons (kind 0): random with outliers (no
 * ties).  Kind 1: multiples of 1/16 in [-15.875, 15.875] with that maximum
 * in two blocks of three: there id = 8 under both rules and x * id is a
 * multiple of 1/2, a tie half of the time.  Kind 2: near ties at arbitrary
 * scales, x = (k + 0.5) / (127 / amax) with amax the block's first value,
 * where 1 / (amax / 127) and 127 / amax round one value in eight apart. */
static void fill_quant_row(float *x, int64_t n, uint64_t seed, int kind) {
    fill_random(x, n, seed);
    sp_rng r = {seed};
    for (int64_t i = 0; kind == 1 && i < n; i++) {
        x[i] = (float)((int)(sp_rng_next(&r) % 509) - 254) * 0.0625f;
        if (i % 32 == 5 && i % 96 != 5) x[i] = i % 64 == 5 ? 15.875f : -15.875f;
    }
    for (int64_t b = 0; kind == 2 && b + 32 <= n; b += 32) {
        const float amax = 0.5f + 2.5f * (float)sp_rng_next_f64(&r), id = 127.0f / amax;
        x[b] = amax;
        for (int j = 1; j < 32; j++) x[b + j] = ((float)((int)(sp_rng_next(&r) % 252) - 126) + 0.5f) / id;
    }
}

static void test_quant_matches_reference(void **state) {
    (void)state;
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float));
    uint8_t *got = malloc(row_bytes(SP_Q8_K, N) + 64), *want = malloc(row_bytes(SP_Q8_K, N) + 64);
    const uint32_t types[] = {SP_Q4_0, SP_Q4_1, SP_Q5_0, SP_Q5_1, SP_Q8_0, SP_Q8_1, SP_Q8_K};
    long ties = 0;
    for (int seed = 1; seed <= 9; seed++) {
        fill_quant_row(x, N, (uint64_t)seed, (seed - 1) / 3);
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            uint32_t t = types[ti];
            int64_t bk = block_of(t);
            size_t bb = block_bytes(t);
            const bool has_act = t == SP_Q8_0 || t == SP_Q8_1 || t == SP_Q8_K;
            for (int act = 0; act <= (int)has_act; act++) {
                if (act) sp_quantize_act_row(t, x, got, N);
                else sp_quantize_row(t, x, got, N);
                for (int64_t i = 0; i < N / bk; i++) {
                    uint8_t *w = want + i * bb;
                    if (t == SP_Q8_0 || t == SP_Q8_1) ref_q8_0(x + i * bk, w, t == SP_Q8_1, act);
                    else if (t == SP_Q8_K) ref_q8_K(x + i * bk, w);
                    else ref_q4_q5(t, x + i * bk, w);
                }
                if (memcmp(got, want, row_bytes(t, N)) != 0)
                    fail_msg("%s (%s rule) differs", sp_dtype_name(t), act ? "activation" : "weight");
            }
        }
        /* the tie rows do have ties for the two Q8_0 rules to disagree on */
        sp_quantize_row(SP_Q8_0, x, want, N);
        sp_quantize_act_row(SP_Q8_0, x, got, N);
        for (int64_t i = 0; seed > 3 && i < N / 32; i++) ties += memcmp(got + 34 * i, want + 34 * i, 34) != 0;
    }
    /* kinds 1 and 2: 6 rows x 128 blocks, most with several values the two
     * rules round apart */
    assert_true(ties >= 500);
    free(x); free(got); free(want);
}

/* Subnormal rows: 127 / amax overflows to infinity.  The activation rule
 * still gives every value its sign (the clamp of sp_quantize_act_row), and
 * zeros stay zero. */
static void test_quant_act_tiny(void **state) {
    (void)state;
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)((j % 5) - 2) * 1e-41f;
    uint8_t b[36];
    for (int t = 0; t < 2; t++) {
        sp_quantize_act_row(t ? SP_Q8_1 : SP_Q8_0, x, b, 32);
        const int8_t *q = (const int8_t *)(b + (t ? 4 : 2));
        for (int j = 0; j < 32; j++) {
            const int want = x[j] > 0 ? 127 : (x[j] < 0 ? -127 : 0);
            if (q[j] != want) fail_msg("%d: q[%d] = %d for %g", t, j, q[j], x[j]);
        }
    }
}

/* ------------------------------------------------------------------------
 * Round trips: |x - dequant(quant(x))| within each type's bound
 * ---------------------------------------------------------------------- */
/* Worst-case error allowed for element j of block b (bk elements). */
static double roundtrip_bound(uint32_t t, const float *blk, int bk, float xj) {
    double amax = 0, mn = INFINITY, mx = -INFINITY;
    for (int j = 0; j < bk; j++) {
        amax = fmax(amax, fabs(blk[j]));
        mn = fmin(mn, blk[j]);
        mx = fmax(mx, blk[j]);
    }
    switch (t) {
    case SP_F32: return 0;
    case SP_F16: return fabs(xj) * 0x1p-11 + 0x1p-25;
    case SP_BF16: return fabs(xj) * 0x1p-8;
    /* signed-max formats: one step |d| at the clamped end, else d/2, plus
     * the fp16 rounding of d times the largest |q| */
    case SP_Q4_0: return amax / 8 * (1 + 8 * 0x1p-11) + 1e-7;
    case SP_Q5_0: return amax / 16 * (1 + 16 * 0x1p-11) + 1e-7;
    /* d/2 plus fp16 rounding of d (times |q| <= 127) */
    case SP_Q8_0: case SP_Q8_1: return amax / 127 * (0.5 + 127 * 0x1p-11) + 1e-7;
    /* d/2 plus float rounding of iscale * x, d and d * q */
    case SP_Q8_K: return amax / 127 * (0.5 + 127 * 0x1p-21) + 1e-7;
    /* d/2 plus fp16 rounding of d (times q <= nmax) and of m */
    case SP_Q4_1: return (mx - mn) / 15 * (0.5 + 15 * 0x1p-11) + fabs(mn) * 0x1p-11 + 1e-7;
    case SP_Q5_1: return (mx - mn) / 31 * (0.5 + 31 * 0x1p-11) + fabs(mn) * 0x1p-11 + 1e-7;
    default: fail_msg("no bound for %u", t);
    }
    return 0;
}

/* Distance between quantization levels of a block. */
static double quant_step(uint32_t t, const float *blk, int bk) {
    double amax = 0, mn = INFINITY, mx = -INFINITY;
    for (int j = 0; j < bk; j++) {
        amax = fmax(amax, fabs(blk[j]));
        mn = fmin(mn, blk[j]);
        mx = fmax(mx, blk[j]);
    }
    switch (t) {
    case SP_Q4_0: return amax / 8;
    case SP_Q5_0: return amax / 16;
    case SP_Q4_1: return (mx - mn) / 15;
    case SP_Q5_1: return (mx - mn) / 31;
    default: return amax / 127;
    }
}

static void test_roundtrip(void **state) {
    (void)state;
    enum { N = 4096 };
    /* every type with the weight rule, then the activation rule's Q8_0/Q8_1 */
    const uint32_t types[] = {SP_F32, SP_F16, SP_BF16, SP_Q4_0, SP_Q4_1, SP_Q5_0,
                              SP_Q5_1, SP_Q8_0, SP_Q8_1, SP_Q8_K, SP_Q8_0, SP_Q8_1};
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(row_bytes(SP_F32, N));
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        uint32_t t = types[ti];
        int bk = (int)block_of(t);
        fill_random(x, N, 100 + ti);
        quantize(ti >= 10, t, x, q, N);
        sp_dequantize_row(t, q, y, N);
        double sq = 0;
        for (int i = 0; i < N; i++) {
            const float *blk = x + (i / bk) * bk;
            double b = roundtrip_bound(t, bk > 1 ? blk : x + i, bk, x[i]);
            if (!(fabs((double)y[i] - x[i]) <= b))
                fail_msg("%s: element %d: %.9g -> %.9g (bound %.3g)", sp_dtype_name(t), i, x[i], y[i], b);
            if (bk > 1) {
                double e = ((double)y[i] - x[i]) / quant_step(t, blk, bk);
                sq += e * e;
            }
        }
        /* Rounding to the nearest level leaves an error spread evenly over
         * +-step/2: rms 0.29 steps (truncation would give 0.58). */
        double rms = sqrt(sq / N);
        if (bk > 1 && !(rms > 0.2 && rms < 0.35))
            fail_msg("%s: rms error %.3g steps", sp_dtype_name(t), rms);
    }
    free(x); free(y); free(q);
}

/* ------------------------------------------------------------------------
 * vec_dot against dequantize(w) . dequantize(quantize(x)) in double
 * ---------------------------------------------------------------------- */
/* The reference of one dot.  For Q8_1 activations the dot uses the stored
 * s = fp16(d * sum(q)) for the weight's m term by definition, so the
 * reference replaces m * dx * sum(q) of each block by m * s. */
static double ref_dot(uint32_t wt, int64_t n, const void *w, const void *xq, double *scale) {
    uint32_t at = sp_act_type(wt);
    float *wd = malloc((size_t)n * sizeof(float)), *xd = malloc((size_t)n * sizeof(float));
    sp_dequantize_row(wt, w, wd, n);
    sp_dequantize_row(at, xq, xd, n);
    double s = 0, a = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)wd[i] * xd[i];
        a += fabs((double)wd[i] * xd[i]);
    }
    if (at == SP_Q8_1) {
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *wb = (const uint8_t *)w + b * block_bytes(wt);
            const uint8_t *xb = (const uint8_t *)xq + b * 36;
            double m = get_f16(wb + 2), dx = get_f16(xb), sx = get_f16(xb + 2);
            int qsum = 0;
            for (int j = 0; j < 32; j++) qsum += ((const int8_t *)(xb + 4))[j];
            s += m * (sx - dx * qsum);
            a += fabs(m * sx);
        }
    }
    free(wd); free(xd);
    *scale = a;
    return s;
}

static const uint32_t k_wtypes[] = {SP_F32, SP_F16, SP_BF16, SP_Q4_0, SP_Q4_1, SP_Q5_0,
                                    SP_Q5_1, SP_Q8_0, SP_Q4_K, SP_Q5_K, SP_Q6_K};
enum { K_NW = sizeof k_wtypes / sizeof *k_wtypes };

/* A weight row of type wt: quantized random data for the types that have a
 * quantizer, random blocks for the K-quants. */
static void make_weights(uint32_t wt, int64_t n, void *w, uint64_t seed) {
    if (wt == SP_Q4_K || wt == SP_Q5_K || wt == SP_Q6_K) {
        random_blocks(wt, w, n, seed);
        return;
    }
    float *f = malloc((size_t)n * sizeof(float));
    fill_random(f, n, seed);
    for (int64_t i = 0; i < n; i++) f[i] *= 0.05f;
    sp_quantize_row(wt, f, w, n);
    free(f);
}

static void test_vec_dot_vs_reference(void **state) {
    (void)state;
    for (int k = 0; k < K_NW; k++) {
        uint32_t wt = k_wtypes[k], at = sp_act_type(wt);
        int64_t bk = block_of(wt) > block_of(at) ? block_of(wt) : block_of(at);
        const int64_t ns[] = {bk, 2 * bk, 8 * bk, 4096 - 4096 % bk, bk == 1 ? 7 : 16 * bk};
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            int64_t n = ns[ni];
            void *w = malloc(row_bytes(wt, n)), *xq = malloc(row_bytes(at, n));
            float *x = malloc((size_t)n * sizeof(float));
            for (int rep = 0; rep < 3; rep++) {
                uint64_t seed = 1000 * (uint64_t)k + 10 * ni + (uint64_t)rep;
                make_weights(wt, n, w, seed);
                fill_random(x, n, seed + 7);
                sp_quantize_act_row(at, x, xq, n);
                double scale, want = ref_dot(wt, n, w, xq, &scale);
                double got = sp_vec_dot(wt, n, w, xq);
                if (!(fabs(got - want) <= 1e-5 * scale + 1e-30))
                    fail_msg("%s n=%lld: got %.9g want %.9g (scale %.3g)", sp_dtype_name(wt),
                             (long long)n, got, want, scale);
                /* the dot is not trivially 0 */
                assert_true(scale > 0);
            }
            free(w); free(xq); free(x);
        }
    }
}

/* The dot also tracks the unquantized activations (a weak check that the
 * activation format is the right one: relative error of a few percent). */
static void test_vec_dot_tracks_float(void **state) {
    (void)state;
    enum { N = 2048 };
    float *x = malloc(N * sizeof(float)), *wd = malloc(N * sizeof(float));
    for (int k = 0; k < K_NW; k++) {
        uint32_t wt = k_wtypes[k], at = sp_act_type(wt);
        void *w = malloc(row_bytes(wt, N)), *xq = malloc(row_bytes(at, N));
        make_weights(wt, N, w, 77 + (uint64_t)k);
        fill_random(x, N, 78);
        sp_dequantize_row(wt, w, wd, N);
        double want = 0, scale = 0;
        for (int i = 0; i < N; i++) { want += (double)wd[i] * x[i]; scale += fabs((double)wd[i] * x[i]); }
        sp_quantize_act_row(at, x, xq, N);
        double got = sp_vec_dot(wt, N, w, xq);
        if (!(fabs(got - want) <= 0.02 * scale))
            fail_msg("%s: got %.6g want %.6g (scale %.3g)", sp_dtype_name(wt), got, want, scale);
        free(w); free(xq);
    }
    free(x); free(wd);
}

/* ------------------------------------------------------------------------
 * Edge cases
 * ---------------------------------------------------------------------- */
static void test_zero_blocks(void **state) {
    (void)state;
    float x[256], y[256];
    uint8_t q[1024];
    const uint32_t qt[] = {SP_F16, SP_BF16, SP_Q4_0, SP_Q4_1, SP_Q5_0, SP_Q5_1,
                           SP_Q8_0, SP_Q8_1, SP_Q8_K};
    for (int neg = 0; neg < 2; neg++) {
        for (int i = 0; i < 256; i++) x[i] = neg ? -0.0f : 0.0f;
        for (size_t ti = 0; ti < sizeof qt / sizeof *qt; ti++) {
            for (int act = 0; act < 2; act++) {
                if (act && (qt[ti] != SP_Q8_0 && qt[ti] != SP_Q8_1)) continue;
                memset(q, 0xEE, sizeof q);
                quantize(act, qt[ti], x, q, 256);
                sp_dequantize_row(qt[ti], q, y, 256);
                for (int i = 0; i < 256; i++)
                    if (y[i] != 0.0f) fail_msg("%s: y[%d] = %g", sp_dtype_name(qt[ti]), i, y[i]);
            }
        }
    }
    /* Q8_K of zeros: d = 0, quants and bsums 0 (no NaN from -127/0). */
    sp_quantize_row(SP_Q8_K, x, q, 256);
    for (int i = 0; i < 292; i++) assert_int_equal(q[i], 0);
    /* -0.0 keeps its sign in the float formats */
    uint16_t h;
    sp_quantize_row(SP_F16, x, &h, 1);
    assert_int_equal(h, 0x8000);
    sp_quantize_row(SP_BF16, x, &h, 1);
    assert_int_equal(h, 0x8000);
    /* zero weights (d = dmin = 0 with arbitrary quants) dot to exactly 0 */
    for (int k = 0; k < K_NW; k++) {
        uint32_t wt = k_wtypes[k], at = sp_act_type(wt);
        uint8_t w[1024], xq[1024];
        if (wt == SP_Q4_K || wt == SP_Q5_K || wt == SP_Q6_K) {
            random_blocks(wt, w, 256, 5);
            if (wt == SP_Q6_K) put_f16(w + 208, 0.0f);
            else { put_f16(w, 0.0f); put_f16(w + 2, 0.0f); }
        } else {
            for (int i = 0; i < 256; i++) x[i] = 0.0f;
            sp_quantize_row(wt, x, w, 256);
        }
        fill_random(x, 256, 9);
        sp_quantize_act_row(at, x, xq, 256);
        float d = sp_vec_dot(wt, 256, w, xq);
        if (d != 0.0f) fail_msg("%s: zero weights dot %g", sp_dtype_name(wt), d);
        sp_dequantize_row(wt, w, y, 256);
        for (int i = 0; i < 256; i++) assert_true(y[i] == 0.0f);
    }
}

static void test_max_magnitude(void **state) {
    (void)state;
    float x[256], y[256];
    uint8_t q[1024];
    struct { uint32_t t; float big; bool act; } cases[] = {
        {SP_Q8_0, 60000.0f, false}, {SP_Q8_1, 60000.0f, false}, {SP_Q8_0, 60000.0f, true},
        {SP_Q8_1, 60000.0f, true}, {SP_Q4_0, 60000.0f, false}, {SP_Q5_0, 60000.0f, false},
        {SP_Q4_1, 30000.0f, false}, {SP_Q5_1, 30000.0f, false}, {SP_Q8_K, 1e30f, false},
        {SP_F16, 65504.0f, false}, {SP_BF16, 3.0e38f, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint32_t t = cases[c].t;
        for (int i = 0; i < 256; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * cases[c].big * ((float)(i % 7) / 6.0f);
        quantize(cases[c].act, t, x, q, 256);
        sp_dequantize_row(t, q, y, 256);
        int bk = (int)block_of(t);
        for (int i = 0; i < 256; i++) {
            if (!isfinite(y[i])) fail_msg("%s: y[%d] not finite", sp_dtype_name(t), i);
            double b = roundtrip_bound(t, bk > 1 ? x + (i / bk) * bk : x + i, bk, x[i]);
            if (fabs((double)y[i] - x[i]) > b)
                fail_msg("%s: %g -> %g (bound %g)", sp_dtype_name(t), x[i], y[i], b);
        }
    }
    /* Largest quants of every weight type: all bits set (q = 15/31/-32..31,
     * scales 63) with d = 1: finite, and the dot matches the reference. */
    for (int k = 3; k < K_NW; k++) {
        uint32_t wt = k_wtypes[k], at = sp_act_type(wt);
        uint8_t w[1024], xq[1024];
        memset(w, 0xFF, row_bytes(wt, 256));
        size_t bb = block_bytes(wt);
        for (size_t off = 0; off < row_bytes(wt, 256); off += bb) {
            if (wt == SP_Q6_K) put_f16(w + off + 208, 1.0f);
            else put_f16(w + off, 1.0f);
            if (wt == SP_Q4_1 || wt == SP_Q5_1 || wt == SP_Q4_K || wt == SP_Q5_K) put_f16(w + off + 2, 1.0f);
        }
        for (int i = 0; i < 256; i++) x[i] = 1000.0f;
        sp_quantize_act_row(at, x, xq, 256);
        double scale, want = ref_dot(wt, 256, w, xq, &scale);
        float got = sp_vec_dot(wt, 256, w, xq);
        assert_true(isfinite(got));
        if (!(fabs(got - want) <= 1e-5 * scale))
            fail_msg("%s: got %.9g want %.9g", sp_dtype_name(wt), got, want);
    }
}

static void test_q8_K_bsums(void **state) {
    (void)state;
    enum { N = 1024 };
    float x[N];
    uint8_t q[4 * 292];
    for (int seed = 0; seed < 20; seed++) {
        fill_random(x, N, 500 + (uint64_t)seed);
        if (seed == 1) for (int i = 0; i < N; i++) x[i] = 3.0f;     /* all -127 */
        if (seed == 2) for (int i = 0; i < N; i++) x[i] = -3.0f;    /* all -127 too */
        sp_quantize_row(SP_Q8_K, x, q, N);
        for (int b = 0; b < N / 256; b++) {
            const uint8_t *blk = q + b * 292;
            const int8_t *qs = (const int8_t *)(blk + 4);
            int16_t bs[16];
            memcpy(bs, blk + 260, 32);
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++) s += qs[16 * g + l];
                assert_int_equal(bs[g], s);
                if (seed == 1 || seed == 2) assert_int_equal(bs[g], -127 * 16);
            }
            /* d = 1 / (-127 / max): negative for a positive max */
            if (seed == 1) assert_true(fabsf(get_f32(blk) + 3.0f / 127.0f) < 1e-8f);
            if (seed == 2) assert_true(fabsf(get_f32(blk) - 3.0f / 127.0f) < 1e-8f);
        }
    }
}

static void test_supports(void **state) {
    (void)state;
    const uint32_t yes[] = {SP_F32, SP_F16, SP_BF16, SP_Q4_0, SP_Q4_1, SP_Q5_0, SP_Q5_1,
                            SP_Q8_0, SP_Q4_K, SP_Q5_K, SP_Q6_K};
    const uint32_t no[] = {SP_Q2_K, SP_Q3_K, SP_Q8_1, SP_Q8_K, SP_IQ2_XXS, SP_IQ2_XS,
                           SP_IQ3_XXS, SP_IQ1_S, SP_IQ4_NL, SP_IQ3_S, SP_IQ2_S, SP_IQ4_XS,
                           SP_IQ1_M, SP_I8, SP_I32, SP_F64, SP_TQ1_0, SP_MXFP4, 4, 5, 1000};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) assert_true(sp_kernel_supports(yes[i]));
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) assert_false(sp_kernel_supports(no[i]));
    const char *list = sp_kernel_supported_list();
    assert_string_equal(list, "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K");
    /* the list names exactly the supported types */
    for (uint32_t t = 0; t < SP_DTYPE_COUNT; t++) {
        const sp_dtype_info *info = sp_dtype_get(t);
        if (!info) { assert_false(sp_kernel_supports(t)); continue; }
        char tok[32];
        snprintf(tok, sizeof tok, "%s,", info->name);
        char padded[256];
        snprintf(padded, sizeof padded, " %s,", list);
        char needle[40];
        snprintf(needle, sizeof needle, " %s", tok);
        assert_int_equal(strstr(padded, needle) != NULL, sp_kernel_supports(t));
    }
}

static void test_act_type(void **state) {
    (void)state;
    assert_int_equal(sp_act_type(SP_Q4_0), SP_Q8_0);
    assert_int_equal(sp_act_type(SP_Q5_0), SP_Q8_0);
    assert_int_equal(sp_act_type(SP_Q8_0), SP_Q8_0);
    assert_int_equal(sp_act_type(SP_Q4_1), SP_Q8_1);
    assert_int_equal(sp_act_type(SP_Q5_1), SP_Q8_1);
    assert_int_equal(sp_act_type(SP_Q4_K), SP_Q8_K);
    assert_int_equal(sp_act_type(SP_Q5_K), SP_Q8_K);
    assert_int_equal(sp_act_type(SP_Q6_K), SP_Q8_K);
    assert_int_equal(sp_act_type(SP_F16), SP_F16);
    assert_int_equal(sp_act_type(SP_BF16), SP_BF16);
    assert_int_equal(sp_act_type(SP_F32), SP_F32);
}

/* ------------------------------------------------------------------------
 * Determinism: same inputs -> bit-identical results, wherever the buffers
 * are (blocks need no alignment: copies at odd addresses agree too)
 * ---------------------------------------------------------------------- */
static void test_determinism(void **state) {
    (void)state;
    enum { N = 1024 };
    float x[N];
    for (int k = 0; k < K_NW; k++) {
        uint32_t wt = k_wtypes[k], at = sp_act_type(wt);
        size_t wb = row_bytes(wt, N), xb = row_bytes(at, N);
        uint8_t *w = malloc(wb), *xq = malloc(xb), *xq2 = malloc(xb);
        make_weights(wt, N, w, 900 + (uint64_t)k);
        fill_random(x, N, 901);
        sp_quantize_act_row(at, x, xq, N);
        sp_quantize_act_row(at, x, xq2, N);
        assert_memory_equal(xq, xq2, xb);
        float a = sp_vec_dot(wt, N, w, xq), b = sp_vec_dot(wt, N, w, xq);
        assert_memory_equal(&a, &b, sizeof a);
        if (block_of(wt) > 1) {
            uint8_t *wo = malloc(wb + 1), *xo = malloc(xb + 3);
            memcpy(wo + 1, w, wb);
            memcpy(xo + 3, xq, xb);
            float c = sp_vec_dot(wt, N, wo + 1, xo + 3);
            assert_memory_equal(&a, &c, sizeof a);
            float y1[N], y2[N];
            sp_dequantize_row(wt, w, y1, N);
            sp_dequantize_row(wt, wo + 1, y2, N);
            assert_memory_equal(y1, y2, sizeof y1);
            free(wo); free(xo);
        }
        free(w); free(xq); free(xq2);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_q4_0),
        cmocka_unit_test(test_dequant_q4_1),
        cmocka_unit_test(test_dequant_q5_0),
        cmocka_unit_test(test_dequant_q5_1),
        cmocka_unit_test(test_dequant_q8_0),
        cmocka_unit_test(test_dequant_q4_K),
        cmocka_unit_test(test_dequant_q5_K),
        cmocka_unit_test(test_dequant_q6_K),
        cmocka_unit_test(test_dequant_float_types),
        cmocka_unit_test(test_quant_q4_0_known),
        cmocka_unit_test(test_quant_q8_known),
        cmocka_unit_test(test_quant_matches_reference),
        cmocka_unit_test(test_quant_act_tiny),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_vec_dot_vs_reference),
        cmocka_unit_test(test_vec_dot_tracks_float),
        cmocka_unit_test(test_zero_blocks),
        cmocka_unit_test(test_max_magnitude),
        cmocka_unit_test(test_q8_K_bsums),
        cmocka_unit_test(test_supports),
        cmocka_unit_test(test_act_type),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
