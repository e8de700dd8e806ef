/*
 * train/internal.h — private to the train layer: the GEMM micro-kernels,
 * the vector operations of attention and the target pragmas of the SIMD
 * code (simd.c).
 *
 * A micro-kernel adds to one MR x NR tile of C the product of a packed
 * A panel (kc x MR, ap[k*MR + i]) and a packed B panel (kc x NR,
 * bp[k*NR + j]), k in order: each element of C is a chain of kc
 * multiply-adds (FMAs in the SIMD kernels) starting from its old value,
 * whatever tile or thread computes it.  That is what makes the GEMM
 * bit-identical across thread counts.
 */
#ifndef SP_TRAIN_INTERNAL_H
#define SP_TRAIN_INTERNAL_H

#include "train/train.h"

/* As kernels/internal.h (private to that layer, hence repeated here):
 * the functions between the two are compiled for the instruction set t
 * and reached only after CPUID said the CPU has it. */
#define SP_TR_PRAGMA_STR(x) _Pragma(#x)
#if defined(__clang__)
#define SP_TR_TARGET_BEGIN(t) SP_TR_PRAGMA_STR(clang attribute push(__attribute__((target(t))), apply_to = function))
#define SP_TR_TARGET_END _Pragma("clang attribute pop")
#else
#define SP_TR_TARGET_BEGIN(t) _Pragma("GCC push_options") SP_TR_PRAGMA_STR(GCC target(t))
#define SP_TR_TARGET_END _Pragma("GCC pop_options")
#endif

typedef void (*sp_tr_ukernel)(int kc, const float *ap, const float *bp, float *c, int64_t ldc);

typedef struct sp_tr_gemm_kern {
    const char *name;
    int mr, nr;
    sp_tr_ukernel uk;
} sp_tr_gemm_kern;

/* The vector operations of attention, per SIMD level, over a list of
 * rows r_j = base + idx[j] * stride (n floats each). */
typedef struct sp_tr_vec_ops {
    /* out[j] = x . r_j */
    void (*dots)(float *out, const float *x, const float *base, const int32_t *idx, int len,
                 size_t stride, int n);
    /* y += sum_j w[j] r_j, j in order (y held in registers for n <= 64) */
    void (*wsum)(float *y, const float *w, const float *base, const int32_t *idx, int len,
                 size_t stride, int n);
    /* r_j += w[j] x for every j (rows may repeat: j in order) */
    void (*scatter)(float *base, const int32_t *idx, int len, size_t stride, const float *w,
                    const float *x, int n);
} sp_tr_vec_ops;

#if defined(__x86_64__)
extern const sp_tr_gemm_kern sp_tr_kern_avx2;    /* 6 x 16, AVX2 + FMA */
extern const sp_tr_gemm_kern sp_tr_kern_avx512;  /* 12 x 32, AVX-512F */
extern const sp_tr_vec_ops sp_tr_vec_avx2;
extern const sp_tr_vec_ops sp_tr_vec_avx512;
#endif

#endif /* SP_TRAIN_INTERNAL_H */
