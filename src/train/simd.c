/*
 * The SIMD code of the train layer: the GEMM micro-kernels (contract in
 * train/internal.h) and the dot / axpy of attention.
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

/* dot and axpy: lanes summed in a fixed order, so each level is
 * deterministic; the tails are masked (AVX-512) or scalar (AVX2). */
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

static void sp_tr_axpy_avx2(float *y, float a, const float *x, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
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

static void sp_tr_axpy_avx512(float *y, float a, const float *x, int n) {
    const __m512 va = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 r = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}
SP_TR_TARGET_END

const sp_tr_vec_ops sp_tr_vec_avx2 = { sp_tr_dot_avx2, sp_tr_axpy_avx2 };
const sp_tr_vec_ops sp_tr_vec_avx512 = { sp_tr_dot_avx512, sp_tr_axpy_avx512 };

const sp_tr_gemm_kern sp_tr_kern_avx2 = { "avx2+fma 6x16", 6, 16, sp_tr_uk_avx2 };
const sp_tr_gemm_kern sp_tr_kern_avx512 = { "avx512f 12x32", 12, 32, sp_tr_uk_avx512 };

#endif
