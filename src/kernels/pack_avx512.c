/*
 * The packed-weight kernels on AVX-512 (F, BW, VL, VNNI).  Two neighbouring
 * groups of 8 rows sit side by side in one 512-bit vector (group g in the
 * low half, g + 1 in the high half), so one dpbusd multiplies 16 rows by 4
 * elements and one convert, multiply and fma scale 16 rows' block sums:
 * half the instructions per multiply-accumulate of the 256-bit VNNI
 * kernel, on units that run 512-bit dpbusd at about twice the rate.
 *
 * Lane for lane these are pack_kern.h's VNNI steps: the same unsigned
 * weights (Q4_1 nibbles, Q5_0 w + 16, Q8_0 w + 128) and offsets taken back
 * as 16 or 128 times the activation block's sum, the same exact int32 block
 * sums, then the same float operations in the same order, so results are
 * bit-identical to the AVX2 and VNNI levels.  Only reached after CPUID and
 * the OS reported AVX-512 (cpu.c).
 */
#include "kernels/internal.h"

#if defined(__x86_64__)

#include <immintrin.h>

SP_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

#define SP_ZI static inline __attribute__((always_inline))
#define SP_ZPRAGMA(x) _Pragma(#x)
#define SP_ZUNROLL SP_ZPRAGMA(GCC unroll 8)

/* Blocks of a group pair taken at a time, so their weights stay in L1
 * while every activation row passes over them. */
#define SP_ZSEG 32

/* The 32 bytes at p0 in the low half and, when two, those at p1 in the
 * high half (else zeros: a lone last group). */
SP_ZI __m512i sp_z_load2(const uint8_t *p0, const uint8_t *p1, bool two) {
    const __m512i lo = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)p0));
    return two ? _mm512_inserti64x4(lo, _mm256_loadu_si256((const __m256i *)p1), 1) : lo;
}

/* 16 fp16 values: 8 at p0, 8 at p1 (zeros when !two). */
SP_ZI __m512 sp_z_f16x16(const uint8_t *p0, const uint8_t *p1, bool two) {
    const __m128i lo = _mm_loadu_si128((const __m128i *)p0);
    const __m128i hi = two ? _mm_loadu_si128((const __m128i *)p1) : _mm_setzero_si128();
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

/* Vector u (< 8) of block k of both groups, as pack_kern.h's
 * sp_p_vnni_vec gives it for one: 4 unsigned elements of each row. */
SP_ZI __m512i sp_z_vec(const uint32_t t, const uint8_t *b0, const uint8_t *b1, bool two, int u) {
    if (t == SP_Q8_0) {
        const size_t o = offsetof(sp_blk_q8_0x8, qs) + 32 * (size_t)u;
        return _mm512_xor_si512(sp_z_load2(b0 + o, b1 + o, two), _mm512_set1_epi8((char)0x80));
    }
    const size_t oq = (t == SP_Q4_1 ? offsetof(sp_blk_q4_1x8, qs) : offsetof(sp_blk_q5_0x8, qs)) + 32 * (size_t)(u / 2);
    const __m512i b = sp_z_load2(b0 + oq, b1 + oq, two);
    const __m512i nib = _mm512_and_si512(u % 2 ? _mm512_srli_epi16(b, 4) : b, _mm512_set1_epi8(15));
    if (t == SP_Q4_1) return nib;
    /* Q5_0: each byte picks the byte of its row's 32 high bits that holds
     * bit e0 + i (a shuffle within 128-bit lanes) and adds 16 where the bit
     * is set (see sp_p_q5_0_vec). */
    const size_t oh = offsetof(sp_blk_q5_0x8, qh);
    const __m512i qh = sp_z_load2(b0 + oh, b1 + oh, two);
    const int e0 = 16 * (u % 2) + 4 * (u / 2);
    /* in each 128-bit lane: bytes 0-3 pick byte 0 of their row, 4-7 byte 4, ... */
    const __m512i idx = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0);
    const __m512i sel = _mm512_shuffle_epi8(qh, _mm512_add_epi8(idx, _mm512_set1_epi8((char)(e0 / 8))));
    const __m512i bits = _mm512_set1_epi32(e0 % 8 ? 0x80402010 : 0x08040201);
    return _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(sel, bits), nib, _mm512_set1_epi8(16));
}

/* Offset in the activation block of the 4 elements of vector u (as
 * pack_kern.h's sp_p_off). */
SP_ZI int sp_z_off(uint32_t t, int u) { return t == SP_Q8_0 ? 4 * u : 4 * (u / 2) + 16 * (u % 2); }

SP_ZI __m512i sp_z_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* R (1, 2, 4 or 8) activation rows over the nk blocks at b0 (group g) and
 * b1 (group g + 1); kb = index of the first block in the row; 8 / R
 * dpbusd chains per row and block. */
SP_ZI void sp_z_rows(const uint32_t t, const uint8_t *b0, const uint8_t *b1, bool two, size_t blk, int nk,
                     int64_t kb, const sp_act_view *v, __m512 *acc, __m512 *accm, const int R,
                     const uint8_t *pf) {
    __m512 a[8], am[8];
    SP_ZUNROLL for (int r = 0; r < R; r++) { a[r] = acc[r]; am[r] = accm[r]; }
    for (int k = 0; k < nk; k++) {
        const uint8_t *x0 = b0 + (size_t)k * blk, *x1 = b1 + (size_t)k * blk;
        if (pf)
            for (size_t o = 0; o < 2 * blk; o += 64) _mm_prefetch((const char *)pf + (size_t)k * 2 * blk + o, _MM_HINT_T0);
        const int64_t b = kb + k;
        const int C = 8 / R;
        __m512i s[8];
        SP_ZUNROLL for (int i = 0; i < 8; i++) s[i] = _mm512_setzero_si512();
        if (t != SP_Q4_1)
            SP_ZUNROLL for (int r = 0; r < R; r++) s[r * C] = _mm512_set1_epi32((t == SP_Q5_0 ? -16 : -128) * v[r].qsum[b]);
        SP_ZUNROLL for (int u = 0; u < 8; u++) {
            const __m512i q = sp_z_vec(t, x0, x1, two, u);
            const int off = sp_z_off(t, u);
            SP_ZUNROLL for (int r = 0; r < R; r++)
                s[r * C + u % C] = _mm512_dpbusd_epi32(s[r * C + u % C], q, sp_z_bcast4(v[r].q + SP_QK * b + off));
        }
        /* d (and Q4_1's m) lead every packed block */
        const __m512 d = sp_z_f16x16(x0, x1, two);
        const __m512 m = t == SP_Q4_1 ? sp_z_f16x16(x0 + 16, x1 + 16, two) : d;
        SP_ZUNROLL for (int r = 0; r < R; r++) {
            __m512i si = s[r * C];
            SP_ZUNROLL for (int c = 1; c < C; c++) si = _mm512_add_epi32(si, s[r * C + c]);
            a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(d, _mm512_set1_ps(v[r].d[b])), a[r]);
            if (t == SP_Q4_1) am[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(v[r].s[b]), am[r]);
        }
    }
    SP_ZUNROLL for (int r = 0; r < R; r++) { acc[r] = a[r]; accm[r] = am[r]; }
}

/* Groups g (nb packed blocks at x0) and, when two, g + 1 (at x1) against
 * nr <= 16 prepared rows: y[r * ldy + i] for i < 16 (8 when !two).  The
 * first pass over the rows prefetches the 2 * nb blocks at next, if any
 * (the next pair: a large matrix streams from memory, and a window's
 * arithmetic is short enough that the wait for each pair would show). */
static void sp_z_pair(uint32_t t, int64_t nb, const uint8_t *x0, const uint8_t *x1, bool two,
                      const uint8_t *next, const sp_act_view *v, int nr, float *y, size_t ldy) {
    const size_t blk = 8 * (size_t)sp_dtype_row_bytes(t, SP_QK);   /* bytes of a packed block */
    __m512 acc[16], accm[16];
    for (int r = 0; r < nr; r++) acc[r] = accm[r] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < nb; kb += SP_ZSEG) {
        const int nk = nb - kb < SP_ZSEG ? (int)(nb - kb) : SP_ZSEG;
        const uint8_t *b0 = x0 + (size_t)kb * blk, *b1 = x1 + (size_t)kb * blk;
        const uint8_t *pf = next ? next + (size_t)kb * 2 * blk : NULL;
        /* t is a constant in each expansion, so each inlines its own kernel */
#define SP_Z_ALL_ROWS(T)                                                                            \
        do {                                                                                        \
            int r = 0;                                                                              \
            for (; r + 8 <= nr; r += 8) sp_z_rows(T, b0, b1, two, blk, nk, kb, v + r, acc + r, accm + r, 8, r ? NULL : pf); \
            if (r + 4 <= nr) { sp_z_rows(T, b0, b1, two, blk, nk, kb, v + r, acc + r, accm + r, 4, r ? NULL : pf); r += 4; } \
            if (r + 2 <= nr) { sp_z_rows(T, b0, b1, two, blk, nk, kb, v + r, acc + r, accm + r, 2, r ? NULL : pf); r += 2; } \
            if (r < nr) sp_z_rows(T, b0, b1, two, blk, nk, kb, v + r, acc + r, accm + r, 1, r ? NULL : pf); \
        } while (0)
        if (t == SP_Q4_1) SP_Z_ALL_ROWS(SP_Q4_1);
        else if (t == SP_Q5_0) SP_Z_ALL_ROWS(SP_Q5_0);
        else SP_Z_ALL_ROWS(SP_Q8_0);
#undef SP_Z_ALL_ROWS
    }
    for (int r = 0; r < nr; r++) {
        const __m512 o = t == SP_Q4_1 ? _mm512_add_ps(acc[r], accm[r]) : acc[r];
        if (two) _mm512_storeu_ps(y + (size_t)r * ldy, o);
        else _mm256_storeu_ps(y + (size_t)r * ldy, _mm512_castps512_ps256(o));
    }
}

void sp_avx512_dot_packed(uint32_t wtype, int64_t n, const void *w, size_t g_stride, int64_t n_groups,
                          const void *act, size_t act_stride, int nr, float *y, size_t ldy) {
    const int64_t nb = n / SP_QK;
    sp_act_view v[16];
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int g = sp_act_views(wtype, n, act, act_stride, r0, nr, 16, v);
        for (int64_t gi = 0; gi < n_groups; gi += 2) {
            const uint8_t *x0 = (const uint8_t *)w + (size_t)gi * g_stride;
            const bool two = gi + 1 < n_groups;
            const uint8_t *next = gi + 2 < n_groups ? x0 + 2 * g_stride : NULL;
            sp_z_pair(wtype, nb, x0, two ? x0 + g_stride : x0, two, next, v, g,
                      y + (size_t)r0 * ldy + (size_t)gi * SP_PACK_ROWS, ldy);
        }
    }
}

/* The peak loop of this level: 12 independent 512-bit dpbusd chains,
 * 12 * 64 MACs a round. */
__attribute__((noinline)) int64_t sp_avx512_peak_loop(int64_t iters) {
    __m512i w = _mm512_set1_epi8(3), a[12], y[12];
    for (int i = 0; i < 12; i++) {
        a[i] = _mm512_setzero_si512();
        y[i] = _mm512_set1_epi8((char)(i + 1));
    }
    for (int64_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+v"(w));
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = _mm512_dpbusd_epi32(a[i], w, y[i]);
    }
    __m512i s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_epi32(s, a[i]);
    return _mm512_reduce_add_epi32(s);
}

SP_TARGET_END

#endif /* __x86_64__ */
