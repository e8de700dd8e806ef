/*
 * AVX2+FMA+F16C matmul kernels: activation quantizers (to the split layout
 * of internal.h) and dot products of one weight row with up to any number
 * of activation rows.
 *
 * Only reached through the dispatch table after CPUID said the CPU has
 * AVX2, FMA and F16C; the whole file is compiled for that target by pragma,
 * the rest of the binary is not.
 *
 * Quantizers.  They give exactly the values of quant.c's portable ones (the
 * same float expressions, the rounding helpers emulated lane by lane,
 * including their behaviour on NaN and infinity), so only the dot
 * products' summation order differs between the two paths.
 *
 * Dot products and batch invariance.  For each (weight row, activation row)
 * pair the float operations are a fixed sequence that does not depend on
 * how many activation rows share the call:
 *   - the integer dot of a block is exact (int8 x int8 -> int16 pairs by
 *     maddubs, never saturating for the value ranges below, -> int32 by
 *     madd); integer work may be arranged freely because it is exact;
 *   - legacy formats (32-element blocks): acc = fma(cvt(isum_b), dw_b * dx_b,
 *     acc) on 8 lanes, b in row order; Q4_1/Q5_1 also accm = fma([mw_b, 0..],
 *     sx_b, accm); result = hsum(acc) (Q4_1/Q5_1: hsum(acc + accm));
 *   - K-quants: acc = fma(cvt(isum_b), d_b * dx_b, acc), then (Q4_K/Q5_K)
 *     acc = fnmadd(cvt(imin_b), dmin_b * dx_b, acc); result = hsum(acc);
 *   - F16/F32: 8-lane fmas, groups of 8 elements alternating between two
 *     accumulators; result = hsum(acc[0] + acc[1]);
 *   - hsum adds the 8 lanes in one fixed tree.
 * Rows are processed in register chunks (legacy signed formats: 8, Q4_1/
 * Q5_1, F16/F32 and the K-quants: 4; the weight block is unpacked once
 * per chunk, the K-quants once per weight row); every chunk size runs the
 * same per-pair sequence, and tests check bit-exactness for 1..17 rows.
 * Chunk sizes were chosen by measurement: Q4_1/Q5_1 keep two accumulators
 * per row (the min term in the second, so one row is not latency-bound),
 * and 8 rows of them would spill.
 *
 * Value ranges that keep maddubs exact: activations are in [-127, 127]
 * (what the quantizers produce); signed weights use the sign trick
 * |w| * (y * sign w) with |w| <= 128; unsigned weights are at most 63.
 */
#include "kernels/internal.h"

#if defined(__x86_64__)

#include <immintrin.h>

SP_TARGET_BEGIN("avx2,fma,f16c")

#define SP_AI static inline __attribute__((always_inline))
/* Loops over the rows of a register chunk must be unrolled so that the
 * accumulators stay in registers. */
#define SP_PRAGMA(x) _Pragma(#x)
#define SP_UNROLL SP_PRAGMA(GCC unroll 4)
#define SP_UNROLL8 SP_PRAGMA(GCC unroll 8)

/* Elements of a K-quant weight row unpacked at a time (stack panel). */
#define SP_KSEG 4096
/* Activation rows a K-quant row kernel takes at once (see sp_v_dot_rows). */
#define SP_KQ_ROWS 64
static inline bool sp_dtype_is_kquant(uint32_t t) { return t == SP_Q4_K || t == SP_Q5_K || t == SP_Q6_K; }

/* ========================================================================
 * Small vector helpers
 * ===================================================================== */

/* Sum of the 8 lanes in a fixed tree: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
SP_AI float sp_v_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

SP_AI int32_t sp_v_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

SP_AI float sp_v_hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

SP_AI __m256 sp_v_abs(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

/* Largest |x| of n (a multiple of 8) floats, ignoring NaN like the portable
 * sp_q_absmax (max_ps returns its second operand when either is NaN). */
SP_AI float sp_v_absmax(const float *x, int n) {
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(sp_v_abs(_mm256_loadu_ps(x + i)), m);
    return sp_v_hmax(m);
}

/* Packs 4 x 8 int32 (values in int8 range) to 32 int8 in order. */
SP_AI __m256i sp_v_pack_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i abcd = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* sp_q_round_q8 lane by lane: NaN -> 0, v clamped to [-127, 127], rounded
 * half to even (as _mm256_round_ps in ggml's AVX2 quantize_row_q8_0; the
 * portable 1.5 * 2^23 trick gives the same integer on this range). */
SP_AI __m256i sp_v_round_q8(__m256 v) {
    const __m256 ord = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
    /* max/min return their second operand when the first is NaN. */
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    v = _mm256_and_ps(v, ord);
    return _mm256_cvttps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* sp_q_round_even lane by lane (the 1.5 * 2^23 trick, bit for bit, for
 * every input), clamped to [-128, 127] as the Q8_K quantizer does. */
SP_AI __m256i sp_v_round_even_i8(__m256 v) {
    const __m256 t = _mm256_add_ps(v, _mm256_set1_ps(12582912.f));
    __m256i i = _mm256_and_si256(_mm256_castps_si256(t), _mm256_set1_epi32(0x007fffff));
    i = _mm256_sub_epi32(i, _mm256_set1_epi32(0x00400000));
    i = _mm256_min_epi32(i, _mm256_set1_epi32(127));
    return _mm256_max_epi32(i, _mm256_set1_epi32(-128));
}

static inline float sp_v_f16_round(float f) { return sp_f16_to_f32(sp_f32_to_f16(f)); }

/* An fp16 field of a block (unaligned, little-endian) as a float. */
static inline float sp_v_ld_f16(const uint8_t p[2]) {
    uint16_t h;
    memcpy(&h, p, 2);
    return sp_f16_to_f32(h);
}

/* ========================================================================
 * Activation quantizers (F32 row -> split layout)
 * ===================================================================== */

/* Q8_0 / Q8_1 of one row (sp_quantize_act_row's rule): d = absmax / 127,
 * q = round_q8(x * (127 / absmax)); the layout keeps the fp16-rounded d;
 * Q8_0 also the exact sum q, Q8_1 s = fp16(d * sum q). */
static void sp_avx2_prep_q8(const float *x, int64_t n, void *dst, bool with_sum) {
    const int64_t nb = n / SP_QK;
    int8_t *q = dst;
    float *dd = (float *)(q + n), *ss = dd + nb;
    int32_t *qs = (int32_t *)(void *)(dd + nb);
    for (int64_t b = 0; b < nb; b++, x += SP_QK) {
        const float amax = sp_v_absmax(x, SP_QK), d = amax / 127;
        const __m256 vid = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i v[4];
        for (int k = 0; k < 4; k++) v[k] = sp_v_round_q8(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid));
        _mm256_storeu_si256((__m256i *)(q + SP_QK * b), sp_v_pack_i8(v[0], v[1], v[2], v[3]));
        dd[b] = sp_v_f16_round(d);
        const int32_t s = sp_v_hsum_i32(_mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3])));
        if (with_sum) ss[b] = sp_v_f16_round((float)s * d);
        else qs[b] = s;
    }
}

/* Index of the first element of x[0..n) whose |x| equals amax (> 0). */
static int sp_v_first_abs(const float *x, int n, float amax) {
    const __m256 m = _mm256_set1_ps(amax);
    for (int i = 0; i < n; i += 8) {
        const int bits = _mm256_movemask_ps(_mm256_cmp_ps(sp_v_abs(_mm256_loadu_ps(x + i)), m, _CMP_EQ_OQ));
        if (bits) return i + __builtin_ctz((unsigned)bits);
    }
    return 0; /* unreachable when amax came from x */
}

/* Q8_K of one row: iscale = -127 / (signed absmax), q = clamp(round_even(
 * iscale * x)), d = 1 / iscale, bsums per 16; all-zero blocks get d = 0. */
static void sp_avx2_prep_q8_K(const float *x, int64_t n, void *dst) {
    const int64_t nb = n / SP_QK_K;
    int8_t *q = dst;
    int16_t *bs = (int16_t *)(q + n);
    float *dd = (float *)(bs + 16 * nb);
    for (int64_t b = 0; b < nb; b++, x += SP_QK_K) {
        int8_t *qb = q + SP_QK_K * b;
        const float amax = sp_v_absmax(x, SP_QK_K);
        if (amax == 0.0f) {
            memset(qb, 0, SP_QK_K);
            memset(bs + 16 * b, 0, 32);
            dd[b] = 0.0f;
            continue;
        }
        const float iscale = -127.f / x[sp_v_first_abs(x, SP_QK_K, amax)];
        const __m256 vis = _mm256_set1_ps(iscale);
        for (int k = 0; k < SP_QK_K; k += 32) {
            __m256i v[4];
            for (int j = 0; j < 4; j++)
                v[j] = sp_v_round_even_i8(_mm256_mul_ps(vis, _mm256_loadu_ps(x + k + 8 * j)));
            _mm256_storeu_si256((__m256i *)(qb + k), sp_v_pack_i8(v[0], v[1], v[2], v[3]));
            bs[16 * b + k / 16] = (int16_t)sp_v_hsum_i32(_mm256_add_epi32(v[0], v[1]));
            bs[16 * b + k / 16 + 1] = (int16_t)sp_v_hsum_i32(_mm256_add_epi32(v[2], v[3]));
        }
        dd[b] = 1 / iscale;
    }
}

/* F16 activations: the row rounded through fp16 (F16C rounds to nearest
 * even, as sp_f32_to_f16 does) and widened back to float. */
static void sp_avx2_prep_f16(const float *x, int64_t n, float *dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = sp_v_f16_round(x[i]);
}

/* ========================================================================
 * Legacy formats (32-element blocks): one chunk of R activation rows
 * ===================================================================== */

/* A weight block as 32 int8 in element order: for the signed formats the
 * values themselves, for Q4_1/Q5_1 the unsigned 0..31. */
SP_AI __m256i sp_v_nibbles(const uint8_t qs[16]) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(15));
}

/* Byte j = 0xFF if bit j of the little-endian 32-bit qh is set, else 0. */
SP_AI __m256i sp_v_bits32(const uint8_t qh4[4]) {
    uint32_t h;
    memcpy(&h, qh4, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* The fp16 fields at p (d, or d and m) as floats in lanes 0 (and 1). */
SP_AI __m128 sp_v_f16x1(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(h));
}
SP_AI __m128 sp_v_f16x2(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)h));
}

/* Unpacks block b of a legacy row: the values (signed or unsigned as
 * above) and the scales (lane 0: d, lane 1: m for Q4_1/Q5_1). */
SP_AI __m256i sp_v_legacy_block(const uint32_t t, const uint8_t *w, int64_t b, __m128 *dm) {
    switch (t) {
    case SP_Q4_0: {
        const sp_blk_q4_0 *x = (const sp_blk_q4_0 *)w + b;
        *dm = sp_v_f16x1(x->d);
        return _mm256_sub_epi8(sp_v_nibbles(x->qs), _mm256_set1_epi8(8));
    }
    case SP_Q4_1: {
        const sp_blk_q4_1 *x = (const sp_blk_q4_1 *)w + b;
        *dm = sp_v_f16x2(x->d);
        return sp_v_nibbles(x->qs);
    }
    case SP_Q5_0: {
        const sp_blk_q5_0 *x = (const sp_blk_q5_0 *)w + b;
        *dm = sp_v_f16x1(x->d);
        /* bit clear: nibble | 0xF0 = nibble - 16 as int8; set: nibble. */
        const __m256i hi = _mm256_andnot_si256(sp_v_bits32(x->qh), _mm256_set1_epi8((char)0xF0));
        return _mm256_or_si256(sp_v_nibbles(x->qs), hi);
    }
    case SP_Q5_1: {
        const sp_blk_q5_1 *x = (const sp_blk_q5_1 *)w + b;
        *dm = sp_v_f16x2(x->d);
        const __m256i hi = _mm256_and_si256(sp_v_bits32(x->qh), _mm256_set1_epi8(16));
        return _mm256_or_si256(sp_v_nibbles(x->qs), hi);
    }
    default: { /* SP_Q8_0 */
        const sp_blk_q8_0 *x = (const sp_blk_q8_0 *)w + b;
        *dm = sp_v_f16x1(x->d);
        return _mm256_loadu_si256((const __m256i *)x->qs);
    }
    }
}

/* Block b of one row: acc = fma(cvt(isum), dw * dx, acc), and for
 * Q4_1/Q5_1 accm = fma([mw, 0, ..., 0], sx, accm) (the min term in lane 0
 * of a second accumulator: two independent chains, no scalar registers). */
SP_AI void sp_v_legacy_step(const uint32_t t, __m256i wq, __m256 vdw, __m256 mz, const sp_act_view *v,
                            int64_t b, __m256 *acc, __m256 *accm) {
    const bool is_signed = t == SP_Q4_0 || t == SP_Q5_0 || t == SP_Q8_0;
    const __m256i y = _mm256_loadu_si256((const __m256i *)(v->q + SP_QK * b));
    const __m256i p = is_signed ? _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(y, wq))
                                : _mm256_maddubs_epi16(wq, y);
    const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    *acc = _mm256_fmadd_ps(f, _mm256_mul_ps(vdw, _mm256_broadcast_ss(v->d + b)), *acc);
    if (t == SP_Q4_1 || t == SP_Q5_1) *accm = _mm256_fmadd_ps(mz, _mm256_broadcast_ss(v->s + b), *accm);
}

/* R rows (R <= 8, a constant after inlining) of one legacy weight row,
 * blocks in order: y = hsum(acc) (Q4_1/Q5_1: hsum(acc + accm)). */
SP_AI void sp_v_legacy_chunk(const uint32_t t, const uint8_t *w, int64_t nb, const sp_act_view *v,
                             float *y, size_t ldy, const int R) {
    const bool has_min = t == SP_Q4_1 || t == SP_Q5_1;
    __m256 a[8], am[8];
    SP_UNROLL8 for (int r = 0; r < R; r++) a[r] = am[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m128 dm;
        const __m256i wq = sp_v_legacy_block(t, w, b, &dm);
        const __m256 vd = _mm256_broadcastss_ps(dm);
        /* [m, 0, 0, 0] from [d, m, 0, 0], widened with zeros. */
        const __m256 mz = has_min ? _mm256_zextps128_ps256(_mm_blend_ps(_mm_setzero_ps(), _mm_movehdup_ps(dm), 1))
                                  : _mm256_setzero_ps();
        SP_UNROLL8 for (int r = 0; r < R; r++) sp_v_legacy_step(t, wq, vd, mz, v + r, b, &a[r], &am[r]);
    }
    SP_UNROLL8 for (int r = 0; r < R; r++) y[(size_t)r * ldy] = sp_v_hsum(has_min ? _mm256_add_ps(a[r], am[r]) : a[r]);
}

/* nr rows of one legacy weight row in chunks of 8 (signed formats) or 4
 * (Q4_1/Q5_1) rows and the remainder; t is a constant after inlining. */
SP_AI void sp_v_dot_legacy(const uint32_t t, int64_t n, const void *w, const sp_act_view *v,
                           int nr, float *y, size_t ldy) {
    const int64_t nb = n / SP_QK;
    const bool has_min = t == SP_Q4_1 || t == SP_Q5_1;
    int r = 0;
    if (!has_min)
        for (; r + 8 <= nr; r += 8) sp_v_legacy_chunk(t, w, nb, v + r, y + (size_t)r * ldy, ldy, 8);
    for (; r + 4 <= nr; r += 4) sp_v_legacy_chunk(t, w, nb, v + r, y + (size_t)r * ldy, ldy, 4);
    switch (nr - r) {
    case 3: sp_v_legacy_chunk(t, w, nb, v + r, y + (size_t)r * ldy, ldy, 3); break;
    case 2: sp_v_legacy_chunk(t, w, nb, v + r, y + (size_t)r * ldy, ldy, 2); break;
    case 1: sp_v_legacy_chunk(t, w, nb, v + r, y + (size_t)r * ldy, ldy, 1); break;
    default: break;
    }
}

/* One weight row against nr <= 16 prepared rows: y[r * ldy]. */
typedef void (*sp_v_row_fn)(int64_t n, const void *w, const sp_act_view *v, int nr, float *y,
                            size_t ldy);

#define SP_V_LEGACY_FN(name, T)                                                            \
    static void name(int64_t n, const void *w, const sp_act_view *v, int nr, float *y,     \
                     size_t ldy) {                                                         \
        sp_v_dot_legacy(T, n, w, v, nr, y, ldy);                                           \
    }
SP_V_LEGACY_FN(sp_v_row_q4_0, SP_Q4_0)
SP_V_LEGACY_FN(sp_v_row_q4_1, SP_Q4_1)
SP_V_LEGACY_FN(sp_v_row_q5_0, SP_Q5_0)
SP_V_LEGACY_FN(sp_v_row_q5_1, SP_Q5_1)
SP_V_LEGACY_FN(sp_v_row_q8_0, SP_Q8_0)

/* ========================================================================
 * K-quants: the weight row is unpacked once per segment into a panel of
 * unsigned values and int16 scale vectors, then each chunk of R rows runs
 * over it.
 * ===================================================================== */
typedef struct sp_kpanel {
    __m256i q[SP_KSEG / 32];        /* unsigned values, element order */
    __m256i sc[SP_KSEG / 32];       /* int16 scale per maddubs lane of each 32 */
    __m256i mn[SP_KSEG / SP_QK_K];  /* int16 per bsum group: the min (Q4_K/Q5_K) or 32*scale (Q6_K) */
    float d[SP_KSEG / SP_QK_K], dmin[SP_KSEG / SP_QK_K];
} sp_kpanel;

static void sp_v_unpack_q4_K(const sp_blk_q4_K *x, sp_kpanel *p, int k) {
    uint8_t sc[8], mn[8];
    sp_q_kscales(x->scales, sc, mn);
    int16_t m16[16];
    for (int g = 0; g < 16; g++) m16[g] = mn[g / 2];
    p->mn[k] = _mm256_loadu_si256((const __m256i *)m16);
    const __m256i lo = _mm256_set1_epi8(15);
    for (int c = 0; c < 4; c++) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
        p->q[8 * k + 2 * c] = _mm256_and_si256(b, lo);
        p->q[8 * k + 2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(b, 4), lo);
    }
    for (int s = 0; s < 8; s++) p->sc[8 * k + s] = _mm256_set1_epi16(sc[s]);
    p->d[k] = sp_v_ld_f16(x->d);
    p->dmin[k] = sp_v_ld_f16(x->dmin);
}

static void sp_v_unpack_q5_K(const sp_blk_q5_K *x, sp_kpanel *p, int k) {
    uint8_t sc[8], mn[8];
    sp_q_kscales(x->scales, sc, mn);
    int16_t m16[16];
    for (int g = 0; g < 16; g++) m16[g] = mn[g / 2];
    p->mn[k] = _mm256_loadu_si256((const __m256i *)m16);
    const __m256i lo = _mm256_set1_epi8(15), b16 = _mm256_set1_epi8(16);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
    for (int c = 0; c < 4; c++) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
        const __m256i m0 = _mm256_set1_epi8((char)(1 << (2 * c))), m1 = _mm256_set1_epi8((char)(2 << (2 * c)));
        const __m256i h0 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m0), m0), b16);
        const __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m1), m1), b16);
        p->q[8 * k + 2 * c] = _mm256_or_si256(_mm256_and_si256(b, lo), h0);
        p->q[8 * k + 2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), lo), h1);
    }
    for (int s = 0; s < 8; s++) p->sc[8 * k + s] = _mm256_set1_epi16(sc[s]);
    p->d[k] = sp_v_ld_f16(x->d);
    p->dmin[k] = sp_v_ld_f16(x->dmin);
}

/* Q6_K as unsigned 0..63; the -32 offset is folded into the min vector
 * (32 * scale per group of 16), subtracted in int32. */
static void sp_v_unpack_q6_K(const sp_blk_q6_K *x, sp_kpanel *p, int k) {
    const __m256i lo = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        __m256i *o = p->q + 8 * k + 4 * h;
        o[0] = _mm256_or_si256(_mm256_and_si256(l0, lo), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        o[1] = _mm256_or_si256(_mm256_and_si256(l1, lo), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        o[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo), _mm256_and_si256(qh, m30));
        o[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
    }
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    p->mn[k] = _mm256_slli_epi16(s16, 5);
    for (int s = 0; s < 8; s++)
        p->sc[8 * k + s] = _mm256_inserti128_si256(_mm256_set1_epi16(x->scales[2 * s]),
                                                   _mm_set1_epi16(x->scales[2 * s + 1]), 1);
    p->d[k] = sp_v_ld_f16(x->d);
    p->dmin[k] = 0.0f;
}

/* Accumulator a plus super-block k (block b of the row) of one activation
 * row vr, from isum, its 8 int32 lanes of scaled products: the mins (or
 * Q6_K's offset) taken off against the row's bsums, then the scales. */
SP_AI __m256 sp_v_kq_scale(const sp_kpanel *p, int k, int64_t b, bool q6, const sp_act_view *vr, __m256i isum,
                           __m256 vd, __m256 vm, __m256 a) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)(vr->bsums + 16 * b));
    const __m256i imin = _mm256_madd_epi16(p->mn[k], bs);
    const __m256 dx = _mm256_broadcast_ss(vr->d + b);
    if (q6) return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, imin)), _mm256_mul_ps(vd, dx), a);
    a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(vd, dx), a);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(vm, dx), a);
}

/* R rows over nk super-blocks of the panel; kb = index of the panel's
 * first block in the row.  Accumulators live in acc[] between segments. */
SP_AI void sp_v_kq_chunk(const sp_kpanel *p, int nk, int64_t kb, bool q6, const sp_act_view *v,
                         __m256 *acc, const int R) {
    __m256 a[4];
    SP_UNROLL for (int r = 0; r < R; r++) a[r] = acc[r];
    for (int k = 0; k < nk; k++) {
        const int64_t b = kb + k;
        const __m256 vd = _mm256_broadcast_ss(&p->d[k]), vm = _mm256_broadcast_ss(&p->dmin[k]);
        SP_UNROLL for (int r = 0; r < R; r++) {
            const int8_t *yq = v[r].q + SP_QK_K * b;
            __m256i isum = _mm256_setzero_si256();
            SP_UNROLL8 for (int s = 0; s < 8; s++) {
                const __m256i y = _mm256_loadu_si256((const __m256i *)(yq + 32 * s));
                const __m256i prod = _mm256_maddubs_epi16(p->q[8 * k + s], y);
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(prod, p->sc[8 * k + s]));
            }
            a[r] = sp_v_kq_scale(p, k, b, q6, &v[r], isum, vd, vm, a[r]);
        }
    }
    SP_UNROLL for (int r = 0; r < R; r++) acc[r] = a[r];
}

/* sp_v_kq_chunk on 512-bit registers, for the AVX-512 level: the halves
 * of a vector hold neighbouring 32-element sub-blocks of the panel, so one
 * step does two of the 256-bit kernel's; the halves' int32 sums are added
 * (exact) before the float steps, which are the 256-bit kernel's, so the
 * result is bit-identical.  Not inlined: only the AVX-512 table calls it. */
#define SP_Z_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw")))
SP_Z_TARGET SP_AI void sp_z_kq_chunk_r(const sp_kpanel *p, int nk, int64_t kb, bool q6, const sp_act_view *v,
                                       __m256 *acc, const int R) {
    __m256 a[4];
    SP_UNROLL for (int r = 0; r < R; r++) a[r] = acc[r];
    for (int k = 0; k < nk; k++) {
        const int64_t b = kb + k;
        const __m256 vd = _mm256_broadcast_ss(&p->d[k]), vm = _mm256_broadcast_ss(&p->dmin[k]);
        SP_UNROLL for (int r = 0; r < R; r++) {
            const int8_t *yq = v[r].q + SP_QK_K * b;
            __m512i isum = _mm512_setzero_si512();
            SP_UNROLL for (int s = 0; s < 4; s++) {
                const __m512i y = _mm512_loadu_si512((const void *)(yq + 64 * s));
                const __m512i prod = _mm512_maddubs_epi16(_mm512_loadu_si512((const void *)&p->q[8 * k + 2 * s]), y);
                isum = _mm512_add_epi32(isum, _mm512_madd_epi16(prod, _mm512_loadu_si512((const void *)&p->sc[8 * k + 2 * s])));
            }
            const __m256i is = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
            a[r] = sp_v_kq_scale(p, k, b, q6, &v[r], is, vd, vm, a[r]);
        }
    }
    SP_UNROLL for (int r = 0; r < R; r++) acc[r] = a[r];
}
SP_Z_TARGET __attribute__((noinline)) static void sp_z_kq_chunk(const sp_kpanel *p, int nk, int64_t kb, bool q6,
                                                                const sp_act_view *v, __m256 *acc, int R) {
    switch (R) {
    case 4: sp_z_kq_chunk_r(p, nk, kb, q6, v, acc, 4); break;
    case 3: sp_z_kq_chunk_r(p, nk, kb, q6, v, acc, 3); break;
    case 2: sp_z_kq_chunk_r(p, nk, kb, q6, v, acc, 2); break;
    default: sp_z_kq_chunk_r(p, nk, kb, q6, v, acc, 1); break;
    }
}

/* R rows of a panel segment with the chosen chunk kernel. */
SP_AI void sp_v_kq_rows(bool wide, const sp_kpanel *p, int nk, int64_t kb, bool q6, const sp_act_view *v,
                        __m256 *acc, const int R) {
    if (wide) sp_z_kq_chunk(p, nk, kb, q6, v, acc, R);
    else sp_v_kq_chunk(p, nk, kb, q6, v, acc, R);
}

/* nr <= SP_KQ_ROWS rows of one K-quant weight row, SP_KSEG elements at a
 * time; wide: the AVX-512 chunk kernel. */
SP_AI void sp_v_dot_kq(const uint32_t t, const bool wide, int64_t n, const void *w, const sp_act_view *v, int nr,
                        float *y, size_t ldy) {
    const int64_t nb = n / SP_QK_K;
    const bool q6 = t == SP_Q6_K;
    sp_kpanel p;
    __m256 acc[SP_KQ_ROWS];
    for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < nb; kb += SP_KSEG / SP_QK_K) {
        const int nk = nb - kb < SP_KSEG / SP_QK_K ? (int)(nb - kb) : SP_KSEG / SP_QK_K;
        for (int k = 0; k < nk; k++) {
            if (t == SP_Q4_K) sp_v_unpack_q4_K((const sp_blk_q4_K *)w + kb + k, &p, k);
            else if (t == SP_Q5_K) sp_v_unpack_q5_K((const sp_blk_q5_K *)w + kb + k, &p, k);
            else sp_v_unpack_q6_K((const sp_blk_q6_K *)w + kb + k, &p, k);
        }
        int r = 0;
        for (; r + 4 <= nr; r += 4) sp_v_kq_rows(wide, &p, nk, kb, q6, v + r, acc + r, 4);
        switch (nr - r) {
        case 3: sp_v_kq_rows(wide, &p, nk, kb, q6, v + r, acc + r, 3); break;
        case 2: sp_v_kq_rows(wide, &p, nk, kb, q6, v + r, acc + r, 2); break;
        case 1: sp_v_kq_rows(wide, &p, nk, kb, q6, v + r, acc + r, 1); break;
        default: break;
        }
    }
    for (int r = 0; r < nr; r++) y[(size_t)r * ldy] = sp_v_hsum(acc[r]);
}

#define SP_V_KQ_FN(name, T, WIDE)                                                          \
    static void name(int64_t n, const void *w, const sp_act_view *v, int nr, float *y,     \
                     size_t ldy) {                                                         \
        sp_v_dot_kq(T, WIDE, n, w, v, nr, y, ldy);                                         \
    }
SP_V_KQ_FN(sp_v_row_q4_K, SP_Q4_K, false)
SP_V_KQ_FN(sp_v_row_q5_K, SP_Q5_K, false)
SP_V_KQ_FN(sp_v_row_q6_K, SP_Q6_K, false)
SP_V_KQ_FN(sp_z_row_q4_K, SP_Q4_K, true)
SP_V_KQ_FN(sp_z_row_q5_K, SP_Q5_K, true)
SP_V_KQ_FN(sp_z_row_q6_K, SP_Q6_K, true)

/* ========================================================================
 * F16 / F32 weights against float rows
 * ===================================================================== */

/* 8 weights at w[i..i+8), or the first k < 8 of them and zeros. */
SP_AI __m256 sp_v_ld_w(uint32_t t, const void *w, int64_t i, int k) {
    if (t == SP_F32) {
        const float *p = (const float *)w + i;
        if (k == 8) return _mm256_loadu_ps(p);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        return _mm256_maskload_ps(p, mask);
    }
    const uint16_t *p = (const uint16_t *)w + i;
    if (k == 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, (size_t)k * 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
}

SP_AI __m256 sp_v_ld_x(const float *x, int k) {
    if (k == 8) return _mm256_loadu_ps(x);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(x, mask);
}

/* Even 8-blocks of a row sum into a0, odd ones into a1, added at the end.
 * The two sets are named, not an array indexed by the block's parity: so
 * indexed, the accumulators lived in memory and every FMA waited on a
 * store (10 GFMA/s on two cores for the draft head's F32 fc). */
SP_AI void sp_v_float_chunk(uint32_t t, int64_t n, const void *w, const sp_act_view *v, float *y,
                            size_t ldy, const int R) {
    __m256 a0[4], a1[4];
    SP_UNROLL for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = sp_v_ld_w(t, w, i, 8), w1 = sp_v_ld_w(t, w, i + 8, 8);
        SP_UNROLL for (int r = 0; r < R; r++) {
            a0[r] = _mm256_fmadd_ps(w0, sp_v_ld_x(v[r].f + i, 8), a0[r]);
            a1[r] = _mm256_fmadd_ps(w1, sp_v_ld_x(v[r].f + i + 8, 8), a1[r]);
        }
    }
    if (i < n) {                     /* an even block, perhaps short */
        const int k = n - i < 8 ? (int)(n - i) : 8;
        const __m256 w0 = sp_v_ld_w(t, w, i, k);
        SP_UNROLL for (int r = 0; r < R; r++) a0[r] = _mm256_fmadd_ps(w0, sp_v_ld_x(v[r].f + i, k), a0[r]);
        i += 8;
    }
    if (i < n) {                     /* the odd one after it, short */
        const int k = (int)(n - i);
        const __m256 w1 = sp_v_ld_w(t, w, i, k);
        SP_UNROLL for (int r = 0; r < R; r++) a1[r] = _mm256_fmadd_ps(w1, sp_v_ld_x(v[r].f + i, k), a1[r]);
    }
    SP_UNROLL for (int r = 0; r < R; r++) y[(size_t)r * ldy] = sp_v_hsum(_mm256_add_ps(a0[r], a1[r]));
}

SP_AI void sp_v_dot_float(const uint32_t t, int64_t n, const void *w, const sp_act_view *v,
                          int nr, float *y, size_t ldy) {
    int r = 0;
    for (; r + 4 <= nr; r += 4) sp_v_float_chunk(t, n, w, v + r, y + (size_t)r * ldy, ldy, 4);
    switch (nr - r) {
    case 3: sp_v_float_chunk(t, n, w, v + r, y + (size_t)r * ldy, ldy, 3); break;
    case 2: sp_v_float_chunk(t, n, w, v + r, y + (size_t)r * ldy, ldy, 2); break;
    case 1: sp_v_float_chunk(t, n, w, v + r, y + (size_t)r * ldy, ldy, 1); break;
    default: break;
    }
}

static void sp_v_row_f32(int64_t n, const void *w, const sp_act_view *v, int nr, float *y, size_t ldy) {
    sp_v_dot_float(SP_F32, n, w, v, nr, y, ldy);
}
static void sp_v_row_f16(int64_t n, const void *w, const sp_act_view *v, int nr, float *y, size_t ldy) {
    sp_v_dot_float(SP_F16, n, w, v, nr, y, ldy);
}

/* ========================================================================
 * Peak int8 multiply-accumulate rate (for benchmarks)
 * ===================================================================== */

/* iters rounds of 8 independent maddubs + add chains, on registers: 8 * 32
 * MACs per round.  These are the instructions of the cheapest multiply-
 * accumulate in the kernels (packed Q4_1 sums maddubs results in int16;
 * the others add a madd), so the rate is an upper bound for all of them.
 * Returns a value that depends on the result so the loop cannot be
 * dropped. */
__attribute__((noinline)) int64_t sp_avx2_peak_loop(int64_t iters) {
    __m256i w = _mm256_set1_epi8(3), a[8], y[8];
    SP_UNROLL8 for (int i = 0; i < 8; i++) {
        a[i] = _mm256_setzero_si256();
        y[i] = _mm256_set1_epi8((char)(i + 1));
    }
    for (int64_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+x"(w));
        SP_UNROLL8 for (int i = 0; i < 8; i++) a[i] = _mm256_add_epi16(a[i], _mm256_maddubs_epi16(w, y[i]));
    }
    __m256i s = a[0];
    for (int i = 1; i < 8; i++) s = _mm256_add_epi16(s, a[i]);
    return sp_v_hsum_i32(_mm256_madd_epi16(s, _mm256_set1_epi16(1)));
}

/* ========================================================================
 * Table entries
 * ===================================================================== */
/* The row kernel of a weight type, NULL if there is none. */
static sp_v_row_fn sp_v_row_kernel(uint32_t wtype) {
    switch (wtype) {
    case SP_F32: return sp_v_row_f32;
    case SP_F16: return sp_v_row_f16;
    case SP_Q4_0: return sp_v_row_q4_0;
    case SP_Q4_1: return sp_v_row_q4_1;
    case SP_Q5_0: return sp_v_row_q5_0;
    case SP_Q5_1: return sp_v_row_q5_1;
    case SP_Q8_0: return sp_v_row_q8_0;
    case SP_Q4_K: return sp_v_row_q4_K;
    case SP_Q5_K: return sp_v_row_q5_K;
    case SP_Q6_K: return sp_v_row_q6_K;
    default: return NULL;
    }
}

bool sp_avx2_dot_supports(uint32_t wtype) { return sp_v_row_kernel(wtype) != NULL; }

void sp_avx2_act_prepare(uint32_t wtype, const float *x, int64_t n, void *dst) {
    switch (sp_act_type(wtype)) {
    case SP_Q8_0: sp_avx2_prep_q8(x, n, dst, false); break;
    case SP_Q8_1: sp_avx2_prep_q8(x, n, dst, true); break;
    case SP_Q8_K: sp_avx2_prep_q8_K(x, n, dst); break;
    case SP_F16: sp_avx2_prep_f16(x, n, dst); break;
    default: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    }
}

/* Rows of 16 activation rows at a time; within a group, each weight row
 * once against all of them, with row kernel fn. */
static void sp_v_dot_rows(sp_v_row_fn fn, uint32_t wtype, int64_t n, const void *w, size_t w_stride, int64_t n_w,
                          const void *act, size_t act_stride, int nr, float *y, size_t ldy) {
    /* K-quant kernels unpack each weight row into a panel first: 64 rows
     * share one unpacking (prefill), the others take 16 at a time. */
    const int group = sp_dtype_is_kquant(wtype) ? SP_KQ_ROWS : 16;
    sp_act_view v[SP_KQ_ROWS];
    for (int r0 = 0; r0 < nr; r0 += group) {
        const int g = sp_act_views(wtype, n, act, act_stride, r0, nr, group, v);
        float *yr = y + (size_t)r0 * ldy;
        for (int64_t o = 0; o < n_w; o++) fn(n, (const uint8_t *)w + (size_t)o * w_stride, v, g, yr + o, ldy);
    }
}

void sp_avx2_dot_rows(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int64_t n_w,
                      const void *act, size_t act_stride, int nr, float *y, size_t ldy) {
    sp_v_dot_rows(sp_v_row_kernel(wtype), wtype, n, w, w_stride, n_w, act, act_stride, nr, y, ldy);
}

/* The AVX-512 level: K-quants on 512-bit registers (bit-identical), the
 * rest as on AVX2.  Only reached after CPUID reported AVX-512 (cpu.c). */
void sp_avx512_dot_rows(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int64_t n_w,
                        const void *act, size_t act_stride, int nr, float *y, size_t ldy) {
    sp_v_row_fn fn = sp_v_row_kernel(wtype);
    if (wtype == SP_Q4_K) fn = sp_z_row_q4_K;
    else if (wtype == SP_Q5_K) fn = sp_z_row_q5_K;
    else if (wtype == SP_Q6_K) fn = sp_z_row_q6_K;
    sp_v_dot_rows(fn, wtype, n, w, w_stride, n_w, act, act_stride, nr, y, ldy);
}

SP_TARGET_END

#endif /* __x86_64__ */
