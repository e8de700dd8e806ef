/*
 * kernels/internal.h — private to the kernels layer (never included from
 * another layer): the ggml block layouts shared by the portable code
 * (quant.c) and the SIMD code (*_avx2.c, pack_vnni.c, pack_avx512.c), and
 * the dispatch table that picks the SIMD or the portable implementation at
 * run time.
 *
 * Dispatch.  One binary runs on any x86-64: the SIMD code is compiled with
 * per-function target attributes and only reached after CPUID said the CPU
 * (and the OS, via XGETBV) supports its instructions (AVX2, FMA and F16C;
 * plus AVX-VNNI or AVX-512 F/BW/VL/VNNI for the wider levels).  The active table
 * is the best the CPU supports, chosen on first use, unless a caller set
 * one before with sp_kernels_select() (by name: scalar | avx2 | vnni |
 * avx512 | auto; the command line passes SPECULA_SIMD) or
 * sp_kernels_set_simd() (tests).  A NULL entry means "use the portable
 * code".
 */
#ifndef SP_KERNELS_INTERNAL_H
#define SP_KERNELS_INTERNAL_H

#include "kernels/kernels.h"

#include <string.h>

/* Compiles the functions between SP_TARGET_BEGIN("avx2,fma,f16c") and
 * SP_TARGET_END for that instruction set (GCC or clang), the rest of the
 * binary staying generic x86-64: the SIMD files are reached only through
 * the dispatch table, after CPUID said the CPU has the set. */
#define SP_PRAGMA_STR(x) _Pragma(#x)
#if defined(__clang__)
#define SP_TARGET_BEGIN(t) SP_PRAGMA_STR(clang attribute push(__attribute__((target(t))), apply_to = function))
#define SP_TARGET_END _Pragma("clang attribute pop")
#else
#define SP_TARGET_BEGIN(t) _Pragma("GCC push_options") SP_PRAGMA_STR(GCC target(t))
#define SP_TARGET_END _Pragma("GCC pop_options")
#endif

/* ========================================================================
 * Block layouts (as in ggml-common.h).  Byte arrays only, so a block needs
 * no alignment; multi-byte fields are little-endian, read with memcpy.
 * ===================================================================== */
#define SP_QK 32        /* elements per block of the legacy formats */
#define SP_QK_K 256     /* elements per K-quant super-block */

typedef struct { uint8_t d[2]; uint8_t qs[16]; } sp_blk_q4_0;            /* x = d*(q-8) */
typedef struct { uint8_t d[2]; uint8_t m[2]; uint8_t qs[16]; } sp_blk_q4_1; /* x = d*q + m */
typedef struct { uint8_t d[2]; uint8_t qh[4]; uint8_t qs[16]; } sp_blk_q5_0; /* x = d*(q-16) */
typedef struct { uint8_t d[2]; uint8_t m[2]; uint8_t qh[4]; uint8_t qs[16]; } sp_blk_q5_1;
typedef struct { uint8_t d[2]; int8_t qs[32]; } sp_blk_q8_0;             /* x = d*q */
typedef struct { uint8_t d[2]; uint8_t s[2]; int8_t qs[32]; } sp_blk_q8_1; /* s = d*sum(q) */
/* Q4_K: 8 sub-blocks of 32; x = d*sc[s]*q - dmin*mn[s], sc/mn 6-bit packed
 * in scales[12]; qs byte l of 64-chunk c holds element 64c+l (low nibble)
 * and 64c+32+l (high nibble). */
typedef struct { uint8_t d[2]; uint8_t dmin[2]; uint8_t scales[12]; uint8_t qs[128]; } sp_blk_q4_K;
/* Q5_K: as Q4_K plus a fifth bit: bit 2c of qh[l] for element 64c+l, bit
 * 2c+1 for element 64c+32+l. */
typedef struct {
    uint8_t d[2]; uint8_t dmin[2]; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128];
} sp_blk_q5_K;
/* Q6_K: 16 sub-blocks of 16 with int8 scales; x = d*scales[e/16]*(q-32). */
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint8_t d[2]; } sp_blk_q6_K;
/* Q8_K: float d, 256 int8, bsums[g] = sum of qs[16g..16g+15] as int16. */
typedef struct { uint8_t d[4]; int8_t qs[256]; uint8_t bsums[32]; } sp_blk_q8_K;

_Static_assert(sizeof(sp_blk_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(sp_blk_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(sp_blk_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(sp_blk_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(sp_blk_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(sp_blk_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(sp_blk_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(sp_blk_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(sp_blk_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(sp_blk_q8_K) == 292, "q8_K layout");

/* Packed blocks (pack.c): block b of 8 consecutive rows r = 0..7.  The
 * values are moved in runs of 4 bytes: lane r of each 32-byte vector holds
 * 4 bytes of row r, so a vector op works on the 8 rows at once.
 *   Q4_1x8: qs[32k + 4r + i] = row r's qs[4k + i] (k < 4): the low nibbles
 *           of vector k are elements 4k..4k+3, the high ones 16+4k..16+4k+3.
 *   Q5_0x8: qs as Q4_1x8; qh[4r + i] = row r's qh[i] (lane r of the
 *           vector holds the row's 32 high bits).
 *   Q8_0x8: qs[32j + 4r + i] = row r's qs[4j + i] (j < 8): elements 4j..4j+3.
 * Scales stay fp16, one per row, in row order.  A group of 8 rows is nb
 * consecutive packed blocks (nb = blocks per row). */
#define SP_PACK_ROWS 8
/* Longest row that may be packed (the portable path unpacks a row on the
 * stack). */
#define SP_PACK_MAX_IN 32768
typedef struct { uint8_t d[16]; uint8_t m[16]; uint8_t qs[128]; } sp_blk_q4_1x8;
typedef struct { uint8_t d[16]; uint8_t qh[32]; uint8_t qs[128]; } sp_blk_q5_0x8;
typedef struct { uint8_t d[16]; int8_t qs[256]; } sp_blk_q8_0x8;
_Static_assert(sizeof(sp_blk_q4_1x8) == 8 * sizeof(sp_blk_q4_1), "q4_1x8 layout");
_Static_assert(sizeof(sp_blk_q5_0x8) == 8 * sizeof(sp_blk_q5_0), "q5_0x8 layout");
_Static_assert(sizeof(sp_blk_q8_0x8) == 8 * sizeof(sp_blk_q8_0), "q8_0x8 layout");

/* Decodes the 8 six-bit scales and mins of a Q4_K/Q5_K block. */
static inline void sp_q_kscales(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* ========================================================================
 * Prepared activations of the SIMD matmul ("split" layout)
 *
 * The SIMD path quantizes each activation row to the same values as
 * sp_quantize_act_row(sp_act_type(wtype)) — bit for bit, a test checks it — but
 * stores them split by field so the kernels load aligned vectors and never
 * convert an fp16 scale in the inner loop.  One prepared row, at a 64-byte
 * aligned address, holds:
 *   Q8_0:  int8 q[n] | float d[nb] | int32 qsum[nb]       (nb = n / 32; qsum
 *          = sum q, for kernels that offset the weights to unsigned)
 *   Q8_1:  int8 q[n] | float d[nb] | float s[nb]          (s = fp16(d*sum q))
 *   Q8_K:  int8 q[n] | float d[nb] | int16 bsums[16 nb]  (nb = n / 256)
 *   F16:   float x[n] rounded through fp16 (the values sp_quantize_act_row(F16)
 *          gives, widened back)
 *   F32:   float x[n]
 * d of Q8_0/Q8_1 is the fp16-rounded scale (the value the block stores).
 * ===================================================================== */
typedef struct sp_act_view {
    const int8_t *q;        /* quantized values, or NULL for float rows */
    const float *d;         /* per-block scales */
    const float *s;         /* Q8_1: per-block d*sum(q) */
    const int32_t *qsum;    /* Q8_0: per-block sum(q), exact */
    const int16_t *bsums;   /* Q8_K: 16 per block */
    const float *f;         /* F16/F32 rows: the float values */
} sp_act_view;

/* Bytes of one prepared row (rounded up to 64 so rows stay aligned). */
static inline size_t sp_act_split_bytes(uint32_t wtype, int64_t n) {
    size_t b;
    switch (sp_act_type(wtype)) {
    case SP_Q8_0: case SP_Q8_1: b = (size_t)n + (size_t)(n / 32) * 8; break;
    case SP_Q8_K: b = (size_t)n + (size_t)(n / 256) * 36; break;
    default: b = (size_t)n * sizeof(float); break;
    }
    return (b + 63) & ~(size_t)63;
}

/* The fields of a prepared row at p (Q8_K keeps bsums before d so both
 * stay aligned). */
static inline sp_act_view sp_act_split_view(uint32_t wtype, int64_t n, const void *p) {
    sp_act_view v = {0};
    const uint8_t *b = p;
    switch (sp_act_type(wtype)) {
    case SP_Q8_0: case SP_Q8_1:
        v.q = (const int8_t *)b;
        v.d = (const float *)(const void *)(b + n);
        if (sp_act_type(wtype) == SP_Q8_1) v.s = v.d + n / 32;
        else v.qsum = (const int32_t *)(const void *)(v.d + n / 32);
        break;
    case SP_Q8_K:
        v.q = (const int8_t *)b;
        v.bsums = (const int16_t *)(const void *)(b + n);
        v.d = (const float *)(const void *)(b + n + (n / 256) * 32);
        break;
    default:
        v.f = (const float *)p;
        break;
    }
    return v;
}

/* Views of the prepared rows r0 .. r0 + max - 1 (fewer at the end of nr)
 * at act, rows act_stride bytes apart; returns how many (the kernels take
 * activation rows 16 at a time, the K-quant ones 64). */
static inline int sp_act_views(uint32_t wtype, int64_t n, const void *act, size_t act_stride, int r0, int nr,
                               int max, sp_act_view *v) {
    const int g = nr - r0 < max ? nr - r0 : max;
    for (int r = 0; r < g; r++)
        v[r] = sp_act_split_view(wtype, n, (const uint8_t *)act + (size_t)(r0 + r) * act_stride);
    return g;
}

/* ========================================================================
 * Dispatch table
 * ===================================================================== */
typedef struct sp_kfuncs {
    const char *name;                     /* "scalar", "avx2+fma+f16c" */
    sp_simd level;
    /* Matmul: true if dot_rows handles weights of type wtype (else the
     * portable path runs). */
    bool (*dot_supports)(uint32_t wtype);
    /* Prepares one activation row of n floats into dst (split layout,
     * sp_act_split_bytes). */
    void (*act_prepare)(uint32_t wtype, const float *x, int64_t n, void *dst);
    /* y[r * ldy + o] = dot(weight row o, prepared activation row r) for
     * o < n_w, r < nr; weight rows are w_stride bytes apart, activation
     * rows act_stride.  The float operations of each (weight row,
     * activation row) pair depend on neither nr nor n_w. */
    void (*dot_rows)(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int64_t n_w,
                     const void *act, size_t act_stride, int nr, float *y, size_t ldy);
    /* Packed matrices (pack.c): y[r * ldy + 8g + i] = dot(row i of group g,
     * prepared activation row r) for g < n_groups, i < 8, r < nr; groups
     * are g_stride bytes apart.  Same per-pair contract as dot_rows.  NULL:
     * the portable path unpacks each row. */
    void (*dot_packed)(uint32_t wtype, int64_t n, const void *w, size_t g_stride, int64_t n_groups,
                       const void *act, size_t act_stride, int nr, float *y, size_t ldy);
    /* Vector operations (same contracts as the public functions). */
    void (*rmsnorm)(float *out, const float *x, const float *w, int n, float eps);
    void (*softmax)(float *x, int n);
    int (*argmax)(const float *x, int n);
    void (*swiglu)(float *out, const float *gate, const float *up, int n);
    void (*geglu)(float *out, const float *gate, const float *up, int n);
    void (*vec_add)(float *y, const float *x, int n);
    void (*vec_scale)(float *y, float s, int n);
    void (*attn_head)(float *out, const float *q, const sp_f16 *k, const sp_f16 *v,
                      size_t stride, int head_dim, int lo, int hi, float scale, float *scores);
    void (*attn_heads)(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                       size_t stride, int head_dim, int lo, int hi, float scale, float *scores);
    void (*attn_heads_idx)(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                           size_t stride, int head_dim, const int32_t *idx, int n, float scale,
                           float *scores);
    void (*attn_heads_q)(float *out, const float *q, int n_q, const void *k, uint32_t tk, size_t k_stride,
                         const void *v, uint32_t tv, size_t v_stride, int head_dim, int lo, const int32_t *idx,
                         int n, float scale, float *scores);
} sp_kfuncs;

/* ops.c: GELU(tanh) of x as llama.cpp's CPU backend evaluates it (through
 * F16; see ops.c).  The SIMD GEGLU tabulates it. */
float sp_gelu_f16(float x);

/* The active table (chosen once, on first use). */
const sp_kfuncs *sp_kern(void);

/* Calls the active table's entry fn with the arguments and returns from
 * the calling (void) function, if the table has one; otherwise falls
 * through to the portable code that follows. */
#define SP_KDISPATCH(fn, ...)                                                \
    do {                                                                     \
        const sp_kfuncs *k_ = sp_kern();                                     \
        if (k_->fn) { k_->fn(__VA_ARGS__); return; }                         \
    } while (0)

#if defined(__x86_64__)
extern const sp_kfuncs sp_kfuncs_avx2;
extern const sp_kfuncs sp_kfuncs_vnni;
extern const sp_kfuncs sp_kfuncs_avx512;

/* quant_avx2.c */
bool sp_avx2_dot_supports(uint32_t wtype);
void sp_avx2_act_prepare(uint32_t wtype, const float *x, int64_t n, void *dst);
void sp_avx2_dot_rows(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int64_t n_w,
                      const void *act, size_t act_stride, int nr, float *y, size_t ldy);
/* the same with the K-quant kernels on 512-bit registers (AVX-512 F/BW CPUs only) */
void sp_avx512_dot_rows(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int64_t n_w,
                        const void *act, size_t act_stride, int nr, float *y, size_t ldy);
int64_t sp_avx2_peak_loop(int64_t iters);
/* pack_avx2.c */
void sp_avx2_dot_packed(uint32_t wtype, int64_t n, const void *w, size_t g_stride, int64_t n_groups,
                        const void *act, size_t act_stride, int nr, float *y, size_t ldy);
/* pack_vnni.c (AVX-VNNI CPUs only) */
void sp_vnni_dot_packed(uint32_t wtype, int64_t n, const void *w, size_t g_stride, int64_t n_groups,
                        const void *act, size_t act_stride, int nr, float *y, size_t ldy);
int64_t sp_vnni_peak_loop(int64_t iters);
/* pack_avx512.c (AVX-512 F/BW/VL/VNNI CPUs only) */
void sp_avx512_dot_packed(uint32_t wtype, int64_t n, const void *w, size_t g_stride, int64_t n_groups,
                          const void *act, size_t act_stride, int nr, float *y, size_t ldy);
int64_t sp_avx512_peak_loop(int64_t iters);
/* Runs CALL(NQ) with NQ the constant min(nq, 8) (nq >= 1), so that each
 * group size of the attention kernels inlines its own code (registers
 * per head and key are sized by it). */
#define SP_ATTN_NQ_DISPATCH(nq, CALL)                                                          \
    switch ((nq) < 8 ? (nq) : 8) {                                                             \
    case 1: CALL(1); break;                                                                    \
    case 2: CALL(2); break;                                                                    \
    case 3: CALL(3); break;                                                                    \
    case 4: CALL(4); break;                                                                    \
    case 5: CALL(5); break;                                                                    \
    case 6: CALL(6); break;                                                                    \
    case 7: CALL(7); break;                                                                    \
    default: CALL(8); break;                                                                   \
    }
/* attn_avx512.c (AVX-512 F/BW/VL CPUs only): as the AVX2 ones, 16 lanes */
void sp_avx512_attn_head(float *out, const float *q, const sp_f16 *k, const sp_f16 *v,
                         size_t stride, int head_dim, int lo, int hi, float scale, float *scores);
void sp_avx512_attn_heads(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                          size_t stride, int head_dim, int lo, int hi, float scale, float *scores);
void sp_avx512_attn_heads_idx(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                              size_t stride, int head_dim, const int32_t *idx, int n, float scale,
                              float *scores);
/* ops_avx2.c */
void sp_avx2_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
void sp_avx2_softmax(float *x, int n);
int sp_avx2_argmax(const float *x, int n);
void sp_avx2_swiglu(float *out, const float *gate, const float *up, int n);
void sp_avx2_geglu(float *out, const float *gate, const float *up, int n);
void sp_avx2_vec_add(float *y, const float *x, int n);
void sp_avx2_vec_scale(float *y, float s, int n);
void sp_avx2_attn_head(float *out, const float *q, const sp_f16 *k, const sp_f16 *v,
                       size_t stride, int head_dim, int lo, int hi, float scale, float *scores);
void sp_avx2_attn_heads(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                        size_t stride, int head_dim, int lo, int hi, float scale, float *scores);
void sp_avx2_attn_heads_idx(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                            size_t stride, int head_dim, const int32_t *idx, int n, float scale,
                            float *scores);
void sp_avx2_attn_heads_q(float *out, const float *q, int n_q, const void *k, uint32_t tk, size_t k_stride,
                          const void *v, uint32_t tv, size_t v_stride, int head_dim, int lo, const int32_t *idx,
                          int n, float scale, float *scores);
/* y = exp(x) with the vectorised exp of the SIMD ops (for its test). */
void sp_avx2_exp_row(float *y, const float *x, int n);
#endif

#endif /* SP_KERNELS_INTERNAL_H */
