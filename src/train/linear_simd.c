/*
 * The SIMD GEMM micro-kernels (contract in train/internal.h).  The tile
 * sizes keep every accumulator in a register: AVX2 6 rows x 2 vectors of 8
 * (12 of 16 ymm), AVX-512 8 rows x 2 vectors of 16 (16 of 32 zmm), enough
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
    enum { MR = 8 };
    __m512 acc[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        acc[i][0] = _mm512_loadu_ps(c + i * ldc);
        acc[i][1] = _mm512_loadu_ps(c + i * ldc + 16);
    }
    for (int k = 0; k < kc; k++, ap += MR, bp += 32) {
        const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(ap[i]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        _mm512_storeu_ps(c + i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
    }
}
SP_TR_TARGET_END

const sp_tr_gemm_kern sp_tr_kern_avx2 = { "avx2+fma 6x16", 6, 16, sp_tr_uk_avx2 };
const sp_tr_gemm_kern sp_tr_kern_avx512 = { "avx512f 8x32", 8, 32, sp_tr_uk_avx512 };

#endif
