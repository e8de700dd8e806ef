/*
 * The SIMD code of the train layer: the GEMM micro-kernels (contract in
 * train/internal.h) and the vector operations of attention.
 *
 * GEMM.  The tile
 * sizes keep every accumulator in a register: AVX2 6 rows x 2 vectors of 8
 * (12 of 16 ymm), AVX-512 12 rows x 2 vectors of 16 (24 of 32 zmm), enough
 * independent FMA chains to cover the FMA latency on two ports.
 */
#include "train/internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

SP_TR_TARGET_BEGIN("avx2,fma")
static void sp_tr_uk_avx2(int kc, const float *ap, const float *bp, float *c, int64_t ldc) {
    enum { MR = 6 };
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        acc[i][0] = _mm256_loadu_ps(c + i * ldc);
        acc[i][1] = _mm256_loadu_ps(c + i * ldc + 8);
    }
    for (int k = 0; k < kc; k++, ap += MR, bp += 16) {
        const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m256 a = _mm256_broadcast_ss(ap + i);
            acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        _mm256_storeu_ps(c + i * ldc, acc[i][0]);
        _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
    }
}
SP_TR_TARGET_END

SP_TR_TARGET_BEGIN("avx512f,avx2,fma")
static void sp_tr_uk_avx512(int kc, const float *ap, const float *bp, float *c, int64_t ldc) {
    enum { MR = 12 };
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        acc[i][0] = _mm512_loadu_ps(c + i * ldc);
        acc[i][1] = _mm512_loadu_ps(c + i * ldc + 16);
    }
    for (int k = 0; k < kc; k++, ap += MR, bp += 32) {
        const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(ap[i]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        _mm512_storeu_ps(c + i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
    }
}
SP_TR_TARGET_END

/* Attention's vector operations: lanes summed in a fixed order, so each
 * level is deterministic; the tails are masked (AVX-512) or scalar (AVX2). */
SP_TR_TARGET_BEGIN("avx2,fma")
static float sp_tr_dot_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    if (i + 8 <= n) { s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0); i += 8; }
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float r = _mm_cvtss_f32(h);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

static void sp_tr_dots_avx2(float *out, const float *x, const float *base, const int32_t *idx, int len,
                            size_t stride, int n) {
    for (int j = 0; j < len; j++) out[j] = sp_tr_dot_avx2(x, base + idx[j] * stride, n);
}

/* 64 floats of y at a time in 8 registers; a scalar tail below 8. */
static void sp_tr_wsum_avx2(float *y, const float *w, const float *base, const int32_t *idx, int len,
                            size_t stride, int n) {
    int c = 0;
    for (; c + 8 <= n; c += 64) {
        const int nv = (n - c) / 8 < 8 ? (n - c) / 8 : 8;
        __m256 acc[8];
        for (int u = 0; u < nv; u++) acc[u] = _mm256_loadu_ps(y + c + 8 * u);
        for (int j = 0; j < len; j++) {
            const float *r = base + idx[j] * stride + c;
            const __m256 a = _mm256_set1_ps(w[j]);
            for (int u = 0; u < nv; u++) acc[u] = _mm256_fmadd_ps(a, _mm256_loadu_ps(r + 8 * u), acc[u]);
        }
        for (int u = 0; u < nv; u++) _mm256_storeu_ps(y + c + 8 * u, acc[u]);
        if (nv < 8) { c += 8 * nv; break; }
    }
    for (; c < n; c++)
        for (int j = 0; j < len; j++) y[c] += w[j] * base[idx[j] * stride + c];
}

static void sp_tr_scatter_avx2(float *base, const int32_t *idx, int len, size_t stride, const float *w,
                               const float *x, int n) {
    for (int j = 0; j < len; j++) {
        float *r = base + idx[j] * stride;
        const __m256 a = _mm256_set1_ps(w[j]);
        int i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(r + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(r + i)));
        for (; i < n; i++) r[i] += w[j] * x[i];
    }
}
SP_TR_TARGET_END

SP_TR_TARGET_BEGIN("avx512f,avx2,fma")
static float sp_tr_dot_avx512(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void sp_tr_dots_avx512(float *out, const float *x, const float *base, const int32_t *idx, int len,
                              size_t stride, int n) {
    for (int j = 0; j < len; j++) out[j] = sp_tr_dot_avx512(x, base + idx[j] * stride, n);
}

/* 64 floats of y at a time in 4 registers, masked at the end. */
static void sp_tr_wsum_avx512(float *y, const float *w, const float *base, const int32_t *idx, int len,
                              size_t stride, int n) {
    for (int c = 0; c < n; c += 64) {
        __mmask16 m[4];
        __m512 acc[4];
        for (int u = 0; u < 4; u++) {
            const int rem = n - c - 16 * u;
            m[u] = rem >= 16 ? 0xffff : rem > 0 ? (__mmask16)((1u << rem) - 1) : 0;
            acc[u] = _mm512_maskz_loadu_ps(m[u], y + c + 16 * u);
        }
        for (int j = 0; j < len; j++) {
            const float *r = base + idx[j] * stride + c;
            const __m512 a = _mm512_set1_ps(w[j]);
            for (int u = 0; u < 4; u++) acc[u] = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m[u], r + 16 * u), acc[u]);
        }
        for (int u = 0; u < 4; u++) _mm512_mask_storeu_ps(y + c + 16 * u, m[u], acc[u]);
    }
}

/* x stays in registers for n <= 64; each r_j is loaded and stored once. */
static void sp_tr_scatter_avx512(float *base, const int32_t *idx, int len, size_t stride, const float *w,
                                 const float *x, int n) {
    for (int c = 0; c < n; c += 64) {
        __mmask16 m[4];
        __m512 xv[4];
        for (int u = 0; u < 4; u++) {
            const int rem = n - c - 16 * u;
            m[u] = rem >= 16 ? 0xffff : rem > 0 ? (__mmask16)((1u << rem) - 1) : 0;
            xv[u] = _mm512_maskz_loadu_ps(m[u], x + c + 16 * u);
        }
        for (int j = 0; j < len; j++) {
            float *r = base + idx[j] * stride + c;
            const __m512 a = _mm512_set1_ps(w[j]);
            for (int u = 0; u < 4; u++)
                _mm512_mask_storeu_ps(r + 16 * u, m[u],
                                      _mm512_fmadd_ps(a, xv[u], _mm512_maskz_loadu_ps(m[u], r + 16 * u)));
        }
    }
}
SP_TR_TARGET_END

const sp_tr_vec_ops sp_tr_vec_avx2 = { sp_tr_dots_avx2, sp_tr_wsum_avx2, sp_tr_scatter_avx2 };
const sp_tr_vec_ops sp_tr_vec_avx512 = { sp_tr_dots_avx512, sp_tr_wsum_avx512, sp_tr_scatter_avx512 };

const sp_tr_gemm_kern sp_tr_kern_avx2 = { "avx2+fma 6x16", 6, 16, sp_tr_uk_avx2 };
const sp_tr_gemm_kern sp_tr_kern_avx512 = { "avx512f 12x32", 12, 32, sp_tr_uk_avx512 };

#endif
