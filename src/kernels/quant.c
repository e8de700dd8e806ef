/*
 * Tensor block formats: the ggml/GGUF quantized layouts, their conversion
 * to and from floats, and the dot product of a weight row with an
 * activation row (portable C).  These are the reference implementations:
 * the SIMD matmul (quant_avx2.c) quantizes activations to the same values
 * and computes the same dot products in another summation order.
 *
 * Layouts are bit-exact with ggml's, because the weights come from real
 * llama.cpp files.  Every block is declared with byte arrays only, so a
 * block needs no alignment; multi-byte fields are little-endian and read
 * with memcpy.
 *
 * Numerics (the determinism contract of kernels.h).  Every function is a
 * pure function of its inputs with a fixed operation order:
 *   - Quantized dot products: within a block the products of the int8
 *     values are summed exactly in int32 (the K-quants weight each
 *     sub-block's sum by its integer scale, still in int32, and take the
 *     min term from the Q8_K bsums).  Each block then contributes one float
 *     expression, added to a single float accumulator in block order:
 *        Q4_0/Q5_0/Q8_0:  acc += (float)isum * (dw * dx)
 *        Q4_1/Q5_1:       acc += (float)isum * (dw * dx) + mw * sx
 *        Q4_K/Q5_K:       acc += (float)isum * (dw * dx) - (float)imin * (dminw * dx)
 *        Q6_K:            acc += (float)isum * (dw * dx)
 *   - F16 x F16 and BF16 x BF16: each product is exact in double; the sum is
 *     kept in double in 4 interleaved partial sums (element i goes to sum
 *     i % 4), combined as (s0 + s1) + (s2 + s3), then rounded to float.
 *   - F32 x F32: float products and sums in 8 interleaved partial sums
 *     (element i goes to sum i % 8), combined pairwise.
 *   With GCC in ISO C mode (-std=c11) no multiply-add is fused; a compiler
 *   that contracts a*b+c into an FMA still gives one fixed result per build.
 *
 * Two sets of quantizers (kernels.h):
 *   - sp_quantize_row: ggml's reference quantizers (quantize_row_*_ref), the
 *     ones llama.cpp uses to write quantized weights into a GGUF file;
 *   - sp_quantize_act_row: what llama.cpp's x86 CPU backend does to an
 *     activation row before a dot product (the from_float of the weight's
 *     vec_dot_type).  Q8_0/Q8_1 follow its AVX2 quantize_row_q8_0/q8_1:
 *     q = x * (127 / amax) rounded half to even, where the reference divides
 *     by d = amax / 127 and rounds halves away from zero; the two differ on
 *     ties and on the last bit of the scale, which moved our matmul outputs
 *     1e-4..1e-3 (of the row's largest) away from llama.cpp's on the same
 *     inputs (tests/model/test_ops_reference.c).  Q8_K is the reference
 *     quantizer in both sets (x86 runs quantize_row_q8_K_ref), as are the
 *     float formats.
 * Inputs are expected finite; NaN or infinity gives unspecified (but
 * defined, never undefined-behaviour) quantized values.
 *
 * Precondition: sp_base_init() has run (the fp16 table).
 */
#include "kernels/internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant.c reads GGUF little-endian blocks directly: little-endian hosts only"
#endif

/* Block layouts (as in ggml-common.h): see internal.h. */

/* ========================================================================
 * Helpers
 * ===================================================================== */
static inline float sp_q_ld_f16(const uint8_t p[2]) {
    sp_f16 h;
    memcpy(&h, p, 2);
    return sp_f16_to_f32(h);
}
static inline void sp_q_st_f16(uint8_t p[2], float f) {
    sp_f16 h = sp_f32_to_f16(f);
    memcpy(p, &h, 2);
}
static inline float sp_q_ld_f32(const uint8_t p[4]) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* Truncates v toward zero and clamps to [lo, hi] (NaN gives lo): the
 * (int8_t)(v) conversion of ggml's reference quantizers, made total. */
static inline int sp_q_trunc(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* roundf(v) (halves away from zero) clamped to [-128, 127]; NaN gives 0.
 * For |v| < 128, v - trunc(v) is exact, so this equals roundf exactly. */
static inline int sp_q_round_away(float v) {
    if (!(v > -128.5f && v < 127.5f)) return v > 0 ? 127 : (v < 0 ? -128 : 0);
    int t = (int)v;
    float r = v - (float)t;
    return t + (r >= 0.5f) - (r <= -0.5f);
}

/* Round to nearest, ties to even (ggml's nearest_int): adding 1.5*2^23
 * leaves the rounded integer in the low mantissa bits.  Valid for
 * |v| <= 2^22; other values give an unspecified int, never UB. */
static inline int sp_q_round_even(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The int8 of an activation Q8_0/Q8_1 value v = x * (127 / amax): v
 * rounded half to even (the _mm256_round_ps of ggml's AVX2 quantizer).
 * |v| <= 127 (plus a rounding error) for finite rows, where the clamp
 * changes nothing; it keeps the sign of an infinite v (a subnormal row,
 * whose 127 / amax overflows) and NaN gives 0.  quant_avx2.c's
 * sp_v_round_q8 is the same function lane by lane. */
static inline int8_t sp_q_round_q8(float v) {
    if (v != v) return 0;
    v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
    return (int8_t)sp_q_round_even(v);
}

/* Exact sum of n products of int8 values (n <= 2^17 cannot overflow). */
static inline int32_t sp_q_isum(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += (int32_t)a[i] * (int32_t)b[i];
    return s;
}

/* Largest |x| of a block and the signed value that has it (first one). */
static inline float sp_q_absmax(const float *x, int n, float *signed_max) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    }
    if (signed_max) *signed_max = max;
    return amax;
}

static inline void sp_q_minmax(const float *x, int n, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static _Noreturn void sp_q_bad_type(const char *fn, uint32_t t) {
    fprintf(stderr, "specula: %s: unsupported tensor type %s (%u)\n", fn, sp_dtype_name(t), t);
    abort();
}

/* ========================================================================
 * Unpacking: one block to int8 values (shared by dequantize and dot)
 * ===================================================================== */
static inline void sp_q4_0_unpack(const sp_blk_q4_0 *b, int8_t q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 15) - 8);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}
static inline void sp_q4_1_unpack(const sp_blk_q4_1 *b, int8_t q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(b->qs[j] & 15);
        q[j + 16] = (int8_t)(b->qs[j] >> 4);
    }
}
/* Five-bit values 0..31 minus off: low nibble from qs, bit j of the
 * little-endian 32-bit qh is the high bit of element j.  The bit test is
 * written against a table of 16-bit masks so that the compiler vectorizes
 * it (building the high bits in a byte array with scalar stores would stall
 * the vector loads of the dot that follows). */
static const uint16_t sp_q_bit[16] = {
    1u << 0, 1u << 1, 1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,
    1u << 8, 1u << 9, 1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
};
static inline void sp_q5_unpack(const uint8_t qs[16], const uint8_t qh4[4], int off, int8_t q[32]) {
    const uint16_t h0 = (uint16_t)(qh4[0] | (qh4[1] << 8)), h1 = (uint16_t)(qh4[2] | (qh4[3] << 8));
    for (int j = 0; j < 16; j++)
        q[j] = (int8_t)(((qs[j] & 15) | ((h0 & sp_q_bit[j]) ? 16 : 0)) - off);
    for (int j = 0; j < 16; j++)
        q[j + 16] = (int8_t)(((qs[j] >> 4) | ((h1 & sp_q_bit[j]) ? 16 : 0)) - off);
}
static inline void sp_q4_K_unpack(const sp_blk_q4_K *b, int8_t q[256]) {
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = (int8_t)(b->qs[32 * c + l] & 15);
            q[64 * c + 32 + l] = (int8_t)(b->qs[32 * c + l] >> 4);
        }
    }
}
static inline void sp_q5_K_unpack(const sp_blk_q5_K *b, int8_t q[256]) {
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int h0 = (b->qh[l] >> (2 * c)) & 1, h1 = (b->qh[l] >> (2 * c + 1)) & 1;
            q[64 * c + l] = (int8_t)((b->qs[32 * c + l] & 15) | (h0 << 4));
            q[64 * c + 32 + l] = (int8_t)((b->qs[32 * c + l] >> 4) | (h1 << 4));
        }
    }
}
/* Six-bit values minus 32 (-32..31).  Half h covers elements 128h..128h+127
 * from ql[64h..], qh[32h..]: ql byte l gives elements l (low) and l+64
 * (high), ql byte l+32 gives l+32 and l+96; qh byte l gives their top two
 * bits at shifts 0, 4, 2, 6 respectively. */
static inline void sp_q6_K_unpack(const sp_blk_q6_K *b, int8_t q[256]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

/* ========================================================================
 * Quantization (F32 -> blocks); nb = number of blocks
 * ===================================================================== */

/* Q4_0: d = signed absmax / -8, q = trunc(x/d + 8.5) clamped to 15. */
static void sp_quant_q4_0(const float *x, sp_blk_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float max;
        sp_q_absmax(x, SP_QK, &max);
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        sp_q_st_f16(y[i].d, d);
        for (int j = 0; j < 16; j++) {
            int a = sp_q_trunc(x[j] * id + 8.5f, 0, 15);
            int b = sp_q_trunc(x[j + 16] * id + 8.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

/* Q4_1: d = (max - min) / 15, m = min, q = trunc((x - min)/d + 0.5) <= 15. */
static void sp_quant_q4_1(const float *x, sp_blk_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float mn, mx;
        sp_q_minmax(x, SP_QK, &mn, &mx);
        const float d = (mx - mn) / 15, id = d ? 1.0f / d : 0.0f;
        sp_q_st_f16(y[i].d, d);
        sp_q_st_f16(y[i].m, mn);
        for (int j = 0; j < 16; j++) {
            int a = sp_q_trunc((x[j] - mn) * id + 0.5f, 0, 15);
            int b = sp_q_trunc((x[j + 16] - mn) * id + 0.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

/* Packs 32 five-bit values into qs (low nibbles) and qh (fifth bits). */
static void sp_q5_pack(const int v[32], uint8_t qs[16], uint8_t qh4[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((v[j] & 15) | ((v[j + 16] & 15) << 4));
        qh |= (uint32_t)((v[j] >> 4) & 1) << j;
        qh |= (uint32_t)((v[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh4, &qh, 4);
}

/* Q5_0: d = signed absmax / -16, q = trunc(x/d + 16.5) clamped to 31. */
static void sp_quant_q5_0(const float *x, sp_blk_q5_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float max;
        sp_q_absmax(x, SP_QK, &max);
        const float d = max / -16, id = d ? 1.0f / d : 0.0f;
        int v[32];
        for (int j = 0; j < 32; j++) v[j] = sp_q_trunc(x[j] * id + 16.5f, 0, 31);
        sp_q_st_f16(y[i].d, d);
        sp_q5_pack(v, y[i].qs, y[i].qh);
    }
}

/* Q5_1: d = (max - min) / 31, m = min, q = trunc((x - min)/d + 0.5). */
static void sp_quant_q5_1(const float *x, sp_blk_q5_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        float mn, mx;
        sp_q_minmax(x, SP_QK, &mn, &mx);
        const float d = (mx - mn) / 31, id = d ? 1.0f / d : 0.0f;
        int v[32];
        for (int j = 0; j < 32; j++) v[j] = sp_q_trunc((x[j] - mn) * id + 0.5f, 0, 31);
        sp_q_st_f16(y[i].d, d);
        sp_q_st_f16(y[i].m, mn);
        sp_q5_pack(v, y[i].qs, y[i].qh);
    }
}

/* The quants of one Q8_0/Q8_1 block; returns the fp32 scale d = amax / 127
 * (stored as fp16 by the caller) and the sum of the quants in *sum.
 *   act = false, the weight rule (quantize_row_q8_0_ref / q8_1_ref):
 *     q = roundf(x * (1 / d)), halves away from zero;
 *   act = true, the activation rule (llama.cpp x86, AVX2):
 *     q = rne(x * (127 / amax)). */
static float sp_q8_block(const float *x, int8_t q[SP_QK], bool act, int *sum) {
    const float amax = sp_q_absmax(x, SP_QK, NULL), d = amax / 127;
    int s = 0;
    if (act) {
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < SP_QK; j++) {
            q[j] = sp_q_round_q8(x[j] * id);
            s += q[j];
        }
    } else {
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < SP_QK; j++) {
            q[j] = (int8_t)sp_q_round_away(x[j] * id);
            s += q[j];
        }
    }
    *sum = s;
    return d;
}

/* Q8_0: d and the quants of sp_q8_block. */
static void sp_quant_q8_0(const float *x, sp_blk_q8_0 *y, int64_t nb, bool act) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        int sum;
        sp_q_st_f16(y[i].d, sp_q8_block(x, y[i].qs, act, &sum));
    }
}

/* Q8_1: as Q8_0, plus s = fp16(d * sum(q)) with the fp32 d (both rules). */
static void sp_quant_q8_1(const float *x, sp_blk_q8_1 *y, int64_t nb, bool act) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK) {
        int sum;
        const float d = sp_q8_block(x, y[i].qs, act, &sum);
        sp_q_st_f16(y[i].d, d);
        sp_q_st_f16(y[i].s, (float)sum * d);
    }
}

/* Q8_K (ggml's quantize_row_q8_K_ref, as current llama.cpp runs it on x86
 * and ARM): iscale = -127 / signed absmax, q = min(127, rint(iscale * x)),
 * d = 1 / iscale, bsums of each 16 values.  An all-zero block gets d = 0. */
static void sp_quant_q8_K(const float *x, sp_blk_q8_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SP_QK_K) {
        float max;
        const float amax = sp_q_absmax(x, SP_QK_K, &max);
        int16_t bsums[16] = {0};
        float d = 0.0f;
        if (amax == 0.0f) {
            memset(y[i].qs, 0, sizeof y[i].qs);
        } else {
            const float iscale = -127.f / max;
            for (int j = 0; j < SP_QK_K; j++) {
                int v = sp_q_round_even(iscale * x[j]);
                v = v > 127 ? 127 : (v < -128 ? -128 : v);
                y[i].qs[j] = (int8_t)v;
                bsums[j / 16] = (int16_t)(bsums[j / 16] + v);
            }
            d = 1 / iscale;
        }
        memcpy(y[i].d, &d, 4);
        memcpy(y[i].bsums, bsums, sizeof bsums);
    }
}

static void sp_quant_f16(const float *x, sp_f16 *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = sp_f32_to_f16(x[i]);
}
static void sp_quant_bf16(const float *x, sp_bf16 *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = sp_f32_to_bf16(x[i]);
}

/* ========================================================================
 * Dequantization (blocks -> F32); each follows ggml's dequantize_row_*
 * float expression so values match llama.cpp bit for bit.
 * ===================================================================== */
static void sp_deq_q4_0(const sp_blk_q4_0 *x, float *y, int64_t nb) {
    int8_t q[32];
    for (int64_t i = 0; i < nb; i++, y += SP_QK) {
        const float d = sp_q_ld_f16(x[i].d);
        sp_q4_0_unpack(&x[i], q);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d;
    }
}
static void sp_deq_q4_1(const sp_blk_q4_1 *x, float *y, int64_t nb) {
    int8_t q[32];
    for (int64_t i = 0; i < nb; i++, y += SP_QK) {
        const float d = sp_q_ld_f16(x[i].d), m = sp_q_ld_f16(x[i].m);
        sp_q4_1_unpack(&x[i], q);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d + m;
    }
}
static void sp_deq_q5_0(const sp_blk_q5_0 *x, float *y, int64_t nb) {
    int8_t q[32];
    for (int64_t i = 0; i < nb; i++, y += SP_QK) {
        const float d = sp_q_ld_f16(x[i].d);
        sp_q5_unpack(x[i].qs, x[i].qh, 16, q);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d;
    }
}
static void sp_deq_q5_1(const sp_blk_q5_1 *x, float *y, int64_t nb) {
    int8_t q[32];
    for (int64_t i = 0; i < nb; i++, y += SP_QK) {
        const float d = sp_q_ld_f16(x[i].d), m = sp_q_ld_f16(x[i].m);
        sp_q5_unpack(x[i].qs, x[i].qh, 0, q);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d + m;
    }
}
static void sp_deq_q8_0(const sp_blk_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += SP_QK) {
        const float d = sp_q_ld_f16(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}
static void sp_deq_q8_1(const sp_blk_q8_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += SP_QK) {
        const float d = sp_q_ld_f16(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}
/* Q4_K/Q5_K: y = (d*sc) * q - (dmin*mn), per 32-element sub-block. */
static void sp_deq_kq(const int8_t q[256], const uint8_t scales[12], float d, float dmin,
                      float *y) {
    uint8_t sc[8], mn[8];
    sp_q_kscales(scales, sc, mn);
    for (int s = 0; s < 8; s++) {
        const float ds = d * sc[s], ms = dmin * mn[s];
        for (int l = 0; l < 32; l++) y[32 * s + l] = ds * (float)q[32 * s + l] - ms;
    }
}
static void sp_deq_q4_K(const sp_blk_q4_K *x, float *y, int64_t nb) {
    int8_t q[256];
    for (int64_t i = 0; i < nb; i++, y += SP_QK_K) {
        sp_q4_K_unpack(&x[i], q);
        sp_deq_kq(q, x[i].scales, sp_q_ld_f16(x[i].d), sp_q_ld_f16(x[i].dmin), y);
    }
}
static void sp_deq_q5_K(const sp_blk_q5_K *x, float *y, int64_t nb) {
    int8_t q[256];
    for (int64_t i = 0; i < nb; i++, y += SP_QK_K) {
        sp_q5_K_unpack(&x[i], q);
        sp_deq_kq(q, x[i].scales, sp_q_ld_f16(x[i].d), sp_q_ld_f16(x[i].dmin), y);
    }
}
/* Q6_K: y = (d * scale) * q, scale per 16 elements. */
static void sp_deq_q6_K(const sp_blk_q6_K *x, float *y, int64_t nb) {
    int8_t q[256];
    for (int64_t i = 0; i < nb; i++, y += SP_QK_K) {
        const float d = sp_q_ld_f16(x[i].d);
        sp_q6_K_unpack(&x[i], q);
        for (int g = 0; g < 16; g++) {
            const float ds = d * (float)x[i].scales[g];
            for (int l = 0; l < 16; l++) y[16 * g + l] = ds * (float)q[16 * g + l];
        }
    }
}
static void sp_deq_q8_K(const sp_blk_q8_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += SP_QK_K) {
        const float d = sp_q_ld_f32(x[i].d);
        for (int j = 0; j < SP_QK_K; j++) y[j] = d * (float)x[i].qs[j];
    }
}
static void sp_deq_f16(const sp_f16 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = sp_f16_to_f32(x[i]);
}
static void sp_deq_bf16(const sp_bf16 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = sp_bf16_to_f32(x[i]);
}

/* ========================================================================
 * Dot products: weight row (w) x activation row (x) in sp_act_type(w).
 * Summation orders are those documented at the top of this file.
 * ===================================================================== */
static float sp_dot_q4_0(int64_t nb, const sp_blk_q4_0 *w, const sp_blk_q8_0 *x) {
    float acc = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < nb; i++) {
        sp_q4_0_unpack(&w[i], q);
        const int32_t isum = sp_q_isum(q, x[i].qs, 32);
        acc += (float)isum * (sp_q_ld_f16(w[i].d) * sp_q_ld_f16(x[i].d));
    }
    return acc;
}
static float sp_dot_q4_1(int64_t nb, const sp_blk_q4_1 *w, const sp_blk_q8_1 *x) {
    float acc = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < nb; i++) {
        sp_q4_1_unpack(&w[i], q);
        const int32_t isum = sp_q_isum(q, x[i].qs, 32);
        acc += (float)isum * (sp_q_ld_f16(w[i].d) * sp_q_ld_f16(x[i].d)) +
               sp_q_ld_f16(w[i].m) * sp_q_ld_f16(x[i].s);
    }
    return acc;
}
static float sp_dot_q5_0(int64_t nb, const sp_blk_q5_0 *w, const sp_blk_q8_0 *x) {
    float acc = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < nb; i++) {
        sp_q5_unpack(w[i].qs, w[i].qh, 16, q);
        const int32_t isum = sp_q_isum(q, x[i].qs, 32);
        acc += (float)isum * (sp_q_ld_f16(w[i].d) * sp_q_ld_f16(x[i].d));
    }
    return acc;
}
static float sp_dot_q5_1(int64_t nb, const sp_blk_q5_1 *w, const sp_blk_q8_1 *x) {
    float acc = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < nb; i++) {
        sp_q5_unpack(w[i].qs, w[i].qh, 0, q);
        const int32_t isum = sp_q_isum(q, x[i].qs, 32);
        acc += (float)isum * (sp_q_ld_f16(w[i].d) * sp_q_ld_f16(x[i].d)) +
               sp_q_ld_f16(w[i].m) * sp_q_ld_f16(x[i].s);
    }
    return acc;
}
static float sp_dot_q8_0(int64_t nb, const sp_blk_q8_0 *w, const sp_blk_q8_0 *x) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const int32_t isum = sp_q_isum(w[i].qs, x[i].qs, 32);
        acc += (float)isum * (sp_q_ld_f16(w[i].d) * sp_q_ld_f16(x[i].d));
    }
    return acc;
}

/* Q4_K/Q5_K block against Q8_K: scaled integer sum, and the min term
 * sum_g bsums[g] * mn[g/2] (each 32-element sub-block is two bsums). */
static inline float sp_dot_kq_block(const int8_t q[256], const uint8_t scales[12], float d,
                                    float dmin, const sp_blk_q8_K *x) {
    uint8_t sc[8], mn[8];
    int16_t bsums[16];
    sp_q_kscales(scales, sc, mn);
    memcpy(bsums, x->bsums, sizeof bsums);
    int32_t isum = 0, imin = 0;
    for (int s = 0; s < 8; s++) isum += (int32_t)sc[s] * sp_q_isum(q + 32 * s, x->qs + 32 * s, 32);
    for (int g = 0; g < 16; g++) imin += (int32_t)mn[g / 2] * bsums[g];
    const float dx = sp_q_ld_f32(x->d);
    return (float)isum * (d * dx) - (float)imin * (dmin * dx);
}
static float sp_dot_q4_K(int64_t nb, const sp_blk_q4_K *w, const sp_blk_q8_K *x) {
    float acc = 0.0f;
    int8_t q[256];
    for (int64_t i = 0; i < nb; i++) {
        sp_q4_K_unpack(&w[i], q);
        acc += sp_dot_kq_block(q, w[i].scales, sp_q_ld_f16(w[i].d), sp_q_ld_f16(w[i].dmin), &x[i]);
    }
    return acc;
}
static float sp_dot_q5_K(int64_t nb, const sp_blk_q5_K *w, const sp_blk_q8_K *x) {
    float acc = 0.0f;
    int8_t q[256];
    for (int64_t i = 0; i < nb; i++) {
        sp_q5_K_unpack(&w[i], q);
        acc += sp_dot_kq_block(q, w[i].scales, sp_q_ld_f16(w[i].d), sp_q_ld_f16(w[i].dmin), &x[i]);
    }
    return acc;
}
static float sp_dot_q6_K(int64_t nb, const sp_blk_q6_K *w, const sp_blk_q8_K *x) {
    float acc = 0.0f;
    int8_t q[256];
    for (int64_t i = 0; i < nb; i++) {
        sp_q6_K_unpack(&w[i], q);
        int32_t isum = 0;
        for (int g = 0; g < 16; g++)
            isum += (int32_t)w[i].scales[g] * sp_q_isum(q + 16 * g, x[i].qs + 16 * g, 16);
        acc += (float)isum * (sp_q_ld_f16(w[i].d) * sp_q_ld_f32(x[i].d));
    }
    return acc;
}

static float sp_dot_f32(int64_t n, const float *w, const float *x) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += w[i + l] * x[i + l];
    for (int l = 0; i < n; i++, l++) s[l] += w[i] * x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
static float sp_dot_f16(int64_t n, const sp_f16 *w, const sp_f16 *x) {
    double s[4] = {0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++)
            s[l] += (double)sp_f16_to_f32(w[i + l]) * (double)sp_f16_to_f32(x[i + l]);
    for (int l = 0; i < n; i++, l++) s[l] += (double)sp_f16_to_f32(w[i]) * (double)sp_f16_to_f32(x[i]);
    return (float)((s[0] + s[1]) + (s[2] + s[3]));
}
static float sp_dot_bf16(int64_t n, const sp_bf16 *w, const sp_bf16 *x) {
    double s[4] = {0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++)
            s[l] += (double)sp_bf16_to_f32(w[i + l]) * (double)sp_bf16_to_f32(x[i + l]);
    for (int l = 0; i < n; i++, l++) s[l] += (double)sp_bf16_to_f32(w[i]) * (double)sp_bf16_to_f32(x[i]);
    return (float)((s[0] + s[1]) + (s[2] + s[3]));
}

/* ========================================================================
 * Public interface
 * ===================================================================== */
bool sp_kernel_supports(uint32_t type) {
    switch (type) {
    case SP_F32: case SP_F16: case SP_BF16:
    case SP_Q4_0: case SP_Q4_1: case SP_Q5_0: case SP_Q5_1: case SP_Q8_0:
    case SP_Q4_K: case SP_Q5_K: case SP_Q6_K:
        return true;
    default:
        return false;
    }
}

const char *sp_kernel_supported_list(void) {
    return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K";
}

/* ggml's vec_dot_type of each weight type.  Unsupported types get F32 (a
 * caller must check sp_kernel_supports first). */
uint32_t sp_act_type(uint32_t wtype) {
    switch (wtype) {
    case SP_Q4_0: case SP_Q5_0: case SP_Q8_0: return SP_Q8_0;
    case SP_Q4_1: case SP_Q5_1: return SP_Q8_1;
    case SP_Q4_K: case SP_Q5_K: case SP_Q6_K: return SP_Q8_K;
    case SP_F16: return SP_F16;
    case SP_BF16: return SP_BF16;
    default: return SP_F32;
    }
}

/* Number of blocks of n elements of type t (n must be a multiple). */
static int64_t sp_q_nblocks(uint32_t t, int64_t n) {
    const sp_dtype_info *info = sp_dtype_get(t);
    assert(info && n >= 0 && n % info->block == 0);
    return info ? n / info->block : 0;
}

void sp_quantize_row(uint32_t t, const float *x, void *dst, int64_t n) {
    const int64_t nb = sp_q_nblocks(t, n);
    switch (t) {
    case SP_F32: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    case SP_F16: sp_quant_f16(x, dst, n); break;
    case SP_BF16: sp_quant_bf16(x, dst, n); break;
    case SP_Q4_0: sp_quant_q4_0(x, dst, nb); break;
    case SP_Q4_1: sp_quant_q4_1(x, dst, nb); break;
    case SP_Q5_0: sp_quant_q5_0(x, dst, nb); break;
    case SP_Q5_1: sp_quant_q5_1(x, dst, nb); break;
    case SP_Q8_0: sp_quant_q8_0(x, dst, nb, false); break;
    case SP_Q8_1: sp_quant_q8_1(x, dst, nb, false); break;
    case SP_Q8_K: sp_quant_q8_K(x, dst, nb); break;
    default: sp_q_bad_type("sp_quantize_row", t);
    }
}

void sp_quantize_act_row(uint32_t t, const float *x, void *dst, int64_t n) {
    const int64_t nb = sp_q_nblocks(t, n);
    switch (t) {
    case SP_Q8_0: sp_quant_q8_0(x, dst, nb, true); break;
    case SP_Q8_1: sp_quant_q8_1(x, dst, nb, true); break;
    case SP_F32: case SP_F16: case SP_BF16: case SP_Q8_K: sp_quantize_row(t, x, dst, n); break;
    default: sp_q_bad_type("sp_quantize_act_row", t);
    }
}

void sp_dequantize_row(uint32_t t, const void *src, float *dst, int64_t n) {
    const int64_t nb = sp_q_nblocks(t, n);
    switch (t) {
    case SP_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case SP_F16: sp_deq_f16(src, dst, n); break;
    case SP_BF16: sp_deq_bf16(src, dst, n); break;
    case SP_Q4_0: sp_deq_q4_0(src, dst, nb); break;
    case SP_Q4_1: sp_deq_q4_1(src, dst, nb); break;
    case SP_Q5_0: sp_deq_q5_0(src, dst, nb); break;
    case SP_Q5_1: sp_deq_q5_1(src, dst, nb); break;
    case SP_Q8_0: sp_deq_q8_0(src, dst, nb); break;
    case SP_Q8_1: sp_deq_q8_1(src, dst, nb); break;
    case SP_Q4_K: sp_deq_q4_K(src, dst, nb); break;
    case SP_Q5_K: sp_deq_q5_K(src, dst, nb); break;
    case SP_Q6_K: sp_deq_q6_K(src, dst, nb); break;
    case SP_Q8_K: sp_deq_q8_K(src, dst, nb); break;
    default: sp_q_bad_type("sp_dequantize_row", t);
    }
}

float sp_vec_dot(uint32_t wtype, int64_t n, const void *w, const void *x) {
    const int64_t nb = sp_q_nblocks(wtype, n);
    switch (wtype) {
    case SP_F32: return sp_dot_f32(n, w, x);
    case SP_F16: return sp_dot_f16(n, w, x);
    case SP_BF16: return sp_dot_bf16(n, w, x);
    case SP_Q4_0: return sp_dot_q4_0(nb, w, x);
    case SP_Q4_1: return sp_dot_q4_1(nb, w, x);
    case SP_Q5_0: return sp_dot_q5_0(nb, w, x);
    case SP_Q5_1: return sp_dot_q5_1(nb, w, x);
    case SP_Q8_0: return sp_dot_q8_0(nb, w, x);
    case SP_Q4_K: return sp_dot_q4_K(nb, w, x);
    case SP_Q5_K: return sp_dot_q5_K(nb, w, x);
    case SP_Q6_K: return sp_dot_q6_K(nb, w, x);
    default: sp_q_bad_type("sp_vec_dot", wtype);
    }
}
