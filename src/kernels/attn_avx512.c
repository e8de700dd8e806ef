/*
 * Attention over an F16 KV cache on AVX-512: the AVX2 kernel's plan
 * (ops_avx2.c: the query heads of one KV head share each key's and value's
 * load and F16 conversion; the queries and the probabilities rounded to
 * F16 as llama.cpp does) on 16 lanes, with the horizontal sums of the
 * scores done four at a time.
 *
 * Why: in decoding, attention is the part of a forward that grows with the
 * context (SmolLM2 at 1,000 tokens: t(1) 4.4 ms against 2.4 ms at 32), and
 * a verification window of k + 1 rows pays it k + 1 times.  The AVX2
 * kernel spent about 60 % of its scores on horizontal sums (one 8-lane
 * tree per head and key); here a score is hd / 16 fmas plus a quarter of a
 * four-way tree.
 *
 * Exactness.  Each (head, key) score is its own 16-lane sum over d in
 * order, reduced by one fixed tree (lane i + lane i + 8, then + 4, + 2,
 * + 1), whether it is reduced alone or with three others; each output
 * element sums its probability-weighted values key by key.  So a row's
 * result depends only on its query and its keys: batch invariance and
 * tree/range equality hold as on the other levels.  The order of the
 * score sums differs from the AVX2 level's (8 lanes), so the two levels
 * agree to float rounding, not bit for bit (kernels.h).
 */
#include "kernels/internal.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

SP_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl")

#define SP_ZA static inline __attribute__((always_inline))
#define SP_ZA_UNROLL _Pragma("GCC unroll 16")

/* Keys ahead whose rows are prefetched (see ops_avx2.c's SP_O_PF); the
 * first ones are asked for before the loop. */
#define SP_ZA_PF 64

/* The first c (<= 16) lanes. */
SP_ZA __mmask16 sp_za_mask(int c) { return c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << c) - 1u); }

/* 16 F16 values at p as floats (the first c, the rest zero). */
SP_ZA __m512 sp_za_ld_h(const sp_f16 *p, int c) {
    if (c >= 16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(sp_za_mask(c), p));
}

SP_ZA __m512 sp_za_ld(const float *p, int c) {
    return c >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(sp_za_mask(c), p);
}

SP_ZA void sp_za_prefetch(const sp_f16 *base, const int32_t *idx, int j, int n, size_t stride, int nbytes) {
    if (j >= n) return;
    const char *p = (const char *)(base + (size_t)(idx ? idx[j] : j) * stride);
    for (int off = 0; off < nbytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

/* x rounded through F16, n values, into y (y may be x). */
static void sp_za_f16_round(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 16) {
        const int c = n - i < 16 ? n - i : 16;
        const __m512 r = _mm512_cvtph_ps(_mm512_cvtps_ph(sp_za_ld(x + i, c), _MM_FROUND_TO_NEAREST_INT));
        _mm512_mask_storeu_ps(y + i, sp_za_mask(c), r);
    }
}

/* The sum of v's 16 lanes by the fixed tree: s_i = v_i + v_{i+8} (i < 8),
 * then s_i + s_{i+4}, then + 2, then + 1. */
SP_ZA float sp_za_sum1(__m512 v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
    return _mm_cvtss_f32(s4);
}

/* The sums of a, b, c, d, each by sp_za_sum1's tree, in one vector. */
SP_ZA __m128 sp_za_sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    /* + 8: [a_i + a_i+8 (8) | b_i + b_i+8 (8)], the same for c, d */
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    /* + 4: one 128-bit lane per sum, [a | b | c | d] */
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(1, 0, 3, 2)));   /* + 2 */
    s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(2, 3, 0, 1)));   /* + 1 */
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

/* Scores of NQ (<= 4) heads, queries hd apart (already F16-rounded),
 * against keys j0 .. j0 + J - 1 (J = 4 or 1); head h's scores n apart. */
SP_ZA void sp_za_qk(const float *q, const sp_f16 *k0, const int32_t *idx, size_t stride, int hd, float scale,
                    float *scores, int n, int j0, const int NQ, const int J) {
    __m512 a[4][4];
    SP_ZA_UNROLL for (int h = 0; h < NQ; h++)
        SP_ZA_UNROLL for (int j = 0; j < J; j++) a[h][j] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
        const int c = hd - d < 16 ? hd - d : 16;
        __m512 kv[4];
        SP_ZA_UNROLL for (int j = 0; j < J; j++)
            kv[j] = sp_za_ld_h(k0 + (size_t)(idx ? idx[j0 + j] : j0 + j) * stride + d, c);
        SP_ZA_UNROLL for (int h = 0; h < NQ; h++) {
            const __m512 qv = sp_za_ld(q + (size_t)h * hd + d, c);
            SP_ZA_UNROLL for (int j = 0; j < J; j++) a[h][j] = _mm512_fmadd_ps(qv, kv[j], a[h][j]);
        }
    }
    SP_ZA_UNROLL for (int h = 0; h < NQ; h++) {
        float *s = scores + (size_t)h * n + j0;
        if (J == 4)
            _mm_storeu_ps(s, _mm_mul_ps(sp_za_sum4(a[h][0], a[h][1], a[h][2], a[h][3]), _mm_set1_ps(scale)));
        else
            s[0] = sp_za_sum1(a[h][0]) * scale;
    }
}

/* All scores of NQ (<= 4) heads over the n keys. */
SP_ZA void sp_za_scores(const float *q, const sp_f16 *k0, const int32_t *idx, size_t stride, int hd, float scale,
                        float *scores, int n, const int NQ) {
    const int kbytes = hd * (int)sizeof(sp_f16);
    for (int t = 0; t < SP_ZA_PF; t++) sp_za_prefetch(k0, idx, t, n, stride, kbytes);   /* the first keys */
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        SP_ZA_UNROLL for (int t = 0; t < 4; t++) sp_za_prefetch(k0, idx, j + t + SP_ZA_PF, n, stride, kbytes);
        sp_za_qk(q, k0, idx, stride, hd, scale, scores, n, j, NQ, 4);
    }
    for (; j < n; j++) sp_za_qk(q, k0, idx, stride, hd, scale, scores, n, j, NQ, 1);
}

/* out[h][d] = sum_j p[h][j] v_j[d], keys in order, for NQ (<= 8) heads,
 * 16 * DV dims at a time. */
SP_ZA void sp_za_pv(float *out, const float *p, int n, const sp_f16 *v0, const int32_t *idx, size_t stride, int hd,
                    const int NQ, const int DV) {
    for (int d0 = 0; d0 < hd; d0 += 16 * DV) {
        __m512 a[8][8];
        SP_ZA_UNROLL for (int h = 0; h < NQ; h++)
            SP_ZA_UNROLL for (int i = 0; i < DV; i++) a[h][i] = _mm512_setzero_ps();
        const int pf_bytes = (hd - d0 < 16 * DV ? hd - d0 : 16 * DV) * (int)sizeof(sp_f16);
        for (int t = 0; t < SP_ZA_PF; t++) sp_za_prefetch(v0 + d0, idx, t, n, stride, pf_bytes);
        for (int j = 0; j < n; j++) {
            sp_za_prefetch(v0 + d0, idx, j + SP_ZA_PF, n, stride, pf_bytes);
            const sp_f16 *vj = v0 + (size_t)(idx ? idx[j] : j) * stride + d0;
            __m512 vv[8];
            SP_ZA_UNROLL for (int i = 0; i < DV; i++) {
                const int c = hd - d0 - 16 * i;
                vv[i] = c > 0 ? sp_za_ld_h(vj + 16 * i, c) : _mm512_setzero_ps();
            }
            SP_ZA_UNROLL for (int h = 0; h < NQ; h++) {
                const __m512 pb = _mm512_set1_ps(p[(size_t)h * n + j]);
                SP_ZA_UNROLL for (int i = 0; i < DV; i++) a[h][i] = _mm512_fmadd_ps(pb, vv[i], a[h][i]);
            }
        }
        SP_ZA_UNROLL for (int h = 0; h < NQ; h++) {
            SP_ZA_UNROLL for (int i = 0; i < DV; i++) {
                const int c = hd - d0 - 16 * i;
                if (c > 0) _mm512_mask_storeu_ps(out + (size_t)h * hd + d0 + 16 * i, sp_za_mask(c), a[h][i]);
            }
        }
    }
}

/* NQ (<= 8) heads sharing one KV head over keys lo .. hi - 1 (idx NULL) or
 * the slots idx[0 .. hi - lo).  out may be q. */
SP_ZA void sp_za_group(float *out, const float *q, const sp_f16 *k, const sp_f16 *v, size_t stride, int hd, int lo,
                       int hi, const int32_t *idx, float scale, float *scores, const int NQ) {
    const int n = hi - lo;
    /* values: NQ * DV accumulators of 16 lanes, at most 16 */
    const int DV = NQ == 1 ? 8 : (NQ == 2 ? 8 : (NQ <= 4 ? 4 : 2));
    /* out holds the F16-rounded queries until the scores are done */
    sp_za_f16_round(out, q, NQ * hd);
    const sp_f16 *k0 = idx ? k : k + (size_t)lo * stride;
    if (NQ <= 4) {
        sp_za_scores(out, k0, idx, stride, hd, scale, scores, n, NQ);
    } else {   /* heads 0-3, then the rest: each head's scores as alone */
        sp_za_scores(out, k0, idx, stride, hd, scale, scores, n, 4);
        sp_za_scores(out + 4 * (size_t)hd, k0, idx, stride, hd, scale, scores + 4 * (size_t)n, n, NQ > 4 ? NQ - 4 : 1);
    }
    for (int h = 0; h < NQ; h++) {
        sp_avx2_softmax(scores + (size_t)h * n, n);
        sp_za_f16_round(scores + (size_t)h * n, scores + (size_t)h * n, n);
    }
    sp_za_pv(out, scores, n, idx ? v : v + (size_t)lo * stride, idx, stride, hd, NQ, DV);
}

static void sp_za_heads(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v, size_t stride,
                        int head_dim, int lo, int hi, const int32_t *idx, float scale, float *scores) {
    for (int h0 = 0; h0 < n_q; h0 += 8) {
        const size_t off = (size_t)h0 * head_dim;
        float *o = out + off, *sc = scores + (size_t)h0 * (size_t)(hi - lo);
        const float *qh = q + off;
#define SP_GROUP(NQ) sp_za_group(o, qh, k, v, stride, head_dim, lo, hi, idx, scale, sc, NQ)
        SP_ATTN_NQ_DISPATCH(n_q - h0, SP_GROUP)
#undef SP_GROUP
    }
}

void sp_avx512_attn_heads(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v, size_t stride,
                          int head_dim, int lo, int hi, float scale, float *scores) {
    sp_za_heads(out, q, n_q, k, v, stride, head_dim, lo, hi, NULL, scale, scores);
}

void sp_avx512_attn_heads_idx(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v, size_t stride,
                              int head_dim, const int32_t *idx, int n, float scale, float *scores) {
    sp_za_heads(out, q, n_q, k, v, stride, head_dim, 0, n, idx, scale, scores);
}

void sp_avx512_attn_head(float *out, const float *q, const sp_f16 *k, const sp_f16 *v, size_t stride, int head_dim,
                         int lo, int hi, float scale, float *scores) {
    sp_za_group(out, q, k, v, stride, head_dim, lo, hi, NULL, scale, scores, 1);
}

SP_TARGET_END

#endif /* __x86_64__ */
