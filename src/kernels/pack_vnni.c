/*
 * The packed-weight kernels of pack_kern.h with AVX-VNNI: one dpbusd does
 * what maddubs + add (+ madd) do on plain AVX2, into int32 lanes, so the
 * 8 steps of a block cost 8 instructions instead of 16.  The integer sums
 * are the same exact values, so results are bit-identical to
 * pack_avx2.c's.  Only reached after CPUID reported AVX-VNNI (cpu.c).
 */
#include "kernels/internal.h"

#if defined(__x86_64__)

#include <immintrin.h>

SP_TARGET_BEGIN("avx2,fma,f16c,avxvnni")

#define SP_PK_VNNI 1
#define SP_PK_DOT_PACKED sp_vnni_dot_packed
#include "kernels/pack_kern.h"

/* The peak loop of this level: 12 independent dpbusd chains (latency 5,
 * two per cycle: 10 in flight keep the units busy), 12 * 32 MACs a round. */
__attribute__((noinline)) int64_t sp_vnni_peak_loop(int64_t iters) {
    __m256i w = _mm256_set1_epi8(3), a[12], y[12];
    for (int i = 0; i < 12; i++) {
        a[i] = _mm256_setzero_si256();
        y[i] = _mm256_set1_epi8((char)(i + 1));
    }
    for (int64_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+x"(w));
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = _mm256_dpbusd_avx_epi32(a[i], w, y[i]);
    }
    __m256i s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, a[i]);
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

SP_TARGET_END

#endif /* __x86_64__ */
