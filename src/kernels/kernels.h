/*
 * kernels — the arithmetic of the engine: tensor block formats, dot
 * products, matrix multiplication and the small vector operations of a
 * transformer layer.
 *
 * Numerics contract (what makes speculation lossless and testable):
 *   - Every function computes each output element from its inputs alone,
 *     in a fixed order.  In particular sp_matmul computes row r of the
 *     output with exactly the same operations whether it is called with 1
 *     row or 16, so a verification window gives bit-identical logits to
 *     one-token decoding ("batch invariance").
 *   - Weights are multiplied against activations quantized once per row to
 *     the weight type's activation format (sp_act_type), as ggml does, so
 *     results track the reference implementation closely.
 *
 * All buffers are borrowed; nothing here allocates except sp_matmul's
 * caller-provided scratch (see sp_matmul_scratch_bytes).
 */
#ifndef SP_KERNELS_H
#define SP_KERNELS_H

#include "base/base.h"

/* ------------------------------------------------------------------------
 * Run-time dispatch (cpu.c)
 *
 * The kernels have a portable C implementation and, on x86-64, an
 * AVX2+FMA+F16C one (and on CPUs with AVX-VNNI the same with dpbusd in the
 * packed matmul, on CPUs with AVX-512 VNNI the same on 512-bit registers);
 * the best level the CPU supports is chosen on first use unless the
 * caller selected one (sp_kernels_select; the command line takes it from
 * SPECULA_SIMD).  The SIMD results may differ from the portable ones
 * within float rounding (other summation orders), but each level on its
 * own keeps every guarantee of this header, batch invariance included.
 * sp_vec_dot, sp_quantize_row and sp_quantize_act_row are always the
 * portable reference.
 * ---------------------------------------------------------------------- */
typedef enum sp_simd {
    SP_SIMD_SCALAR = 0,
    SP_SIMD_AVX2 = 1,   /* AVX2 + FMA + F16C */
    SP_SIMD_VNNI = 2,   /* the same plus AVX-VNNI (packed kernels use dpbusd; bit-identical to AVX2) */
    SP_SIMD_AVX512 = 3  /* AVX2 level plus AVX-512 F/BW/VL/VNNI (packed kernels on 512-bit
                         * registers, 16 rows a vector, bit-identical to AVX2; F16 attention
                         * on 16 lanes, whose score sums agree with AVX2's to rounding).
                         * Does not imply AVX-VNNI: ask sp_kernels_simd_supported. */
} sp_simd;

/* Best level this CPU (and OS) supports. */
sp_simd sp_kernels_simd_best(void);
/* Whether this CPU (and OS) supports the level. */
bool sp_kernels_simd_supported(sp_simd level);
/* Level in use. */
sp_simd sp_kernels_simd(void);
/* Switches level (tests, benchmarks): returns 0, or -1 if the CPU lacks
 * it (sp_kernels_simd_supported).  Not thread-safe: call while no kernel runs. */
int sp_kernels_set_simd(sp_simd level);
/* Selects the level by the name a user gives: "scalar", "avx2", "vnni",
 * "avx512"; NULL, "" or "auto" = sp_kernels_simd_best().  Returns 0, or
 * -1 + err (an unknown name, with the accepted ones; a level this CPU
 * lacks, with what it needs), the level in use then unchanged.  Not
 * thread-safe, like sp_kernels_set_simd: call at start. */
int sp_kernels_select(const char *level, sp_err *err);
/* The level in use, for logs: "scalar", "avx2+fma+f16c",
 * "avx2+fma+f16c+avxvnni" or "avx2+fma+f16c+avx512vnni". */
const char *sp_kernels_describe(void);
/* Peak int8 multiply-accumulate rate of one thread, GMAC/s, measured for
 * about `seconds` (best of 3): a register-only loop of the instructions
 * that do the kernels' multiply-accumulates (AVX2: maddubs + add on 8
 * independent chains, the cheapest form any kernel uses; VNNI: 256-bit
 * dpbusd, AVX512: 512-bit dpbusd, 12 chains; scalar: the portable int8
 * loop).  For
 * benchmarks: the kernels' achieved MAC rate is quoted against it. */
double sp_kernels_peak_gmacs(double seconds);
/* Read bandwidth of a buffer of `bytes` (large: beyond the caches), GB/s,
 * read by all threads of the pool, best of 4 (probe.c). */
double sp_kernels_read_gbps(sp_pool *pool, size_t bytes);

/* ------------------------------------------------------------------------
 * Block formats (quant.c)
 *
 * Supported weight types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K.  Activation types: F32, F16, BF16, Q8_0, Q8_1, Q8_K.
 * ---------------------------------------------------------------------- */

/* True if sp_vec_dot / sp_dequantize_row accept this weight type. */
bool sp_kernel_supports(uint32_t type);
/* Comma-separated list of supported weight type names (for error messages). */
const char *sp_kernel_supported_list(void);
/* The type activations are quantized to before a dot with weights of type t. */
uint32_t sp_act_type(uint32_t wtype);

/* Converts n floats (n a multiple of the block size) to blocks of type t
 * with ggml's reference quantizers (quantize_row_*_ref): the bytes
 * llama.cpp writes into a GGUF file, so this is the one for weights
 * (`specula quantize`).  Supported t: F32, F16, BF16, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, Q8_1, Q8_K. */
void sp_quantize_row(uint32_t t, const float *x, void *dst, int64_t n);
/* Converts an activation row to the activation type t as the matmul does
 * (the portable path stores exactly these blocks; the SIMD path the same
 * values in its own layout): the bytes llama.cpp's x86 CPU backend gives.
 * Supported t: F32, F16, BF16, Q8_0, Q8_1, Q8_K.  Differs from
 * sp_quantize_row only for Q8_0/Q8_1, where it scales by 127 / absmax and
 * rounds halves to even (llama.cpp's AVX2 quantizer) instead of dividing
 * by absmax / 127 and rounding halves away from zero (the reference). */
void sp_quantize_act_row(uint32_t t, const float *x, void *dst, int64_t n);
/* Converts n elements of blocks of type t to floats. */
void sp_dequantize_row(uint32_t t, const void *src, float *dst, int64_t n);
/* Dot product of a weight row of type wtype with an activation row already
 * quantized to sp_act_type(wtype).  n = elements (multiple of the block). */
float sp_vec_dot(uint32_t wtype, int64_t n, const void *w, const void *x);

/* ------------------------------------------------------------------------
 * Matrix multiplication (matmul.c)
 *
 * y[r][o] = sum_i W[o][i] * x[r][i]   for r < n_rows, o < n_out.
 * W is n_out rows of n_in elements of type wtype, contiguous.  x is n_rows
 * rows of n_in floats (stride n_in), y is n_rows rows of n_out floats
 * (stride ldy >= n_out).  Work is split over output rows between threads.
 * ---------------------------------------------------------------------- */
typedef struct sp_matrix {
    const void *data;   /* borrowed, n_out rows */
    uint32_t type;      /* sp_dtype */
    int64_t n_in;       /* elements per row */
    int64_t n_out;      /* rows */
    /* NULL, or the same blocks interleaved by groups of 8 rows
     * (sp_matrix_pack); when set, the kernels read only this.  Owned by
     * whoever packed it (sp_model_free for a model's matrices). */
    void *packed;
} sp_matrix;

/* Scratch bytes sp_matmul needs for n_rows activation rows of n_in. */
size_t sp_matmul_scratch_bytes(uint32_t wtype, int64_t n_in, int n_rows);
void sp_matmul(const sp_matrix *w, const float *x, int n_rows, float *y, int64_t ldy,
               void *scratch, sp_pool *pool);
/* Several matrices of the same input at once (a layer's Q, K and V, or
 * its gate and up): y[i] = w[i] x with stride w[i]->n_out, in one pass of
 * the thread pool, each distinct activation form prepared once.  Every
 * output is bit-identical to sp_matmul's; n_mats <= SP_MATMUL_MAX, all of
 * the same n_in; scratch of sp_matmul_many_scratch_bytes. */
#define SP_MATMUL_MAX 4
size_t sp_matmul_many_scratch_bytes(const sp_matrix *const *w, int n_mats, int n_rows);
void sp_matmul_many(const sp_matrix *const *w, const float *x, int n_rows, float *const *y, int n_mats,
                    void *scratch, sp_pool *pool);
/* Copies row `row` of W to floats (an embedding lookup). */
void sp_matrix_get_row(const sp_matrix *w, int64_t row, float *out);

/* ------------------------------------------------------------------------
 * Packed weights (pack.c)
 *
 * In a window of K activation rows the multiply-accumulates, not memory,
 * bound the matmul.  A packed matrix holds the very same blocks (same
 * bytes of values and scales, same total size) with 8 rows interleaved, so
 * that one vector lane holds one output row: the integer dot products of a
 * block land in 8 lanes at once and need no horizontal sums, and one float
 * fma scales 8 outputs.  Types: Q4_1, Q5_0, Q8_0 (others stay unpacked); n_out a
 * multiple of 8.  Results keep every guarantee of this header (a packed
 * matrix gives bit-identical outputs for any number of rows; the portable
 * path gives exactly the unpacked portable result).
 * ---------------------------------------------------------------------- */
/* True if the level in use has kernels for packed matrices (packing pays
 * off only then; the portable path reads them more slowly). */
bool sp_kernels_have_packed(void);
/* True if a matrix of this type and shape can be packed. */
bool sp_matrix_packable(uint32_t type, int64_t n_in, int64_t n_out);
/* Bytes of the packed copy (equal to the unpacked size). */
size_t sp_matrix_packed_bytes(const sp_matrix *w);
/* Writes the packed copy of w->data (w must be packable) to dst, which the
 * caller allocates (sp_matrix_packed_bytes, 32-byte aligned) and then
 * stores in w->packed. */
void sp_matrix_pack(const sp_matrix *w, void *dst);
/* The same for rows [row0, row0 + n_rows) only, row0 and n_rows multiples
 * of 8 (n_rows may end at n_out): they read bytes [row0, row0 + n_rows) x
 * row_bytes of w->data and write the same byte range of dst, so a loader
 * can pack a large matrix in slices and release each source slice at once
 * (peak memory: the packed copy plus one slice, not two copies). */
void sp_matrix_pack_rows(const sp_matrix *w, void *dst, int64_t row0, int64_t n_rows);
/* Copies the original blocks of row `row` of a packed matrix to dst
 * (sp_dtype_row_bytes bytes). */
void sp_matrix_unpack_row(const sp_matrix *w, int64_t row, void *dst);

/* ------------------------------------------------------------------------
 * Vector operations (ops.c)
 * ---------------------------------------------------------------------- */
/* out = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no scale).  In place ok. */
void sp_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* Rotary embedding on one head of size head_dim at position pos, rotating the
 * first n_rot dims.  neox=false: pairs (2i, 2i+1); neox=true: pairs (i, i+n_rot/2). */
void sp_rope(float *head, int head_dim, int n_rot, int pos, float freq_base, bool neox);
/* sp_rope in two steps, for many heads at one position: the table of
 * cos/sin (cs: n_rot floats) once, then the rotation of each head, with
 * results bit-identical to sp_rope. */
void sp_rope_table(float *cs, int n_rot, int pos, float freq_base);
void sp_rope_apply(float *head, const float *cs, int n_rot, bool neox);
/* In-place softmax over n values. */
void sp_softmax(float *x, int n);
/* The index of the largest of x[0..n), the lowest among equals (greedy
 * decoding's choice); NaN never wins, and a NaN x[0] gives 0, as the loop
 * "best = 0; if (x[i] > x[best]) best = i" does.  n >= 1. */
int sp_argmax(const float *x, int n);
/* x = silu(gate) * up, x = gelu_tanh(gate) * up. */
void sp_swiglu(float *out, const float *gate, const float *up, int n);
void sp_geglu(float *out, const float *gate, const float *up, int n);
void sp_vec_add(float *y, const float *x, int n);          /* y += x */
void sp_vec_scale(float *y, float s, int n);               /* y *= s */

/* ------------------------------------------------------------------------
 * Attention (attention.c)
 *
 * One query head against the cached keys/values of one KV head.  k and v
 * point at position 0 of that head in the cache; position j of it is at
 * k + j * stride (stride in elements).  Keys [lo, hi) are attended.
 * scores is caller scratch of hi - lo floats.  The summation order is fixed
 * (by key position), so a row's output does not depend on other rows.
 * ---------------------------------------------------------------------- */
void sp_attn_head(float *out, const float *q, const sp_f16 *k, const sp_f16 *v, size_t stride,
                  int head_dim, int lo, int hi, float scale, float *scores);
/* n_q query heads that share one KV head (grouped-query attention): head h
 * reads q + h * head_dim and writes out + h * head_dim (out may be q), with
 * exactly the result sp_attn_head gives it; scores is caller scratch of
 * n_q * (hi - lo) floats.  The group only shares the pass over the cache
 * (loads and F16 conversions), so callers may group heads as they like. */
void sp_attn_heads(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                   size_t stride, int head_dim, int lo, int hi, float scale, float *scores);
/* As sp_attn_heads over an explicit list of key slots idx[0..n) (any
 * order, e.g. a cached prefix then the ancestors of a node in a draft
 * tree).  A list equal to lo..hi-1 gives sp_attn_heads's result bit for
 * bit; scores needs n_q * n floats. */
void sp_attn_heads_idx(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                       size_t stride, int head_dim, const int32_t *idx, int n, float scale,
                       float *scores);
/* As sp_attn_heads (idx NULL: keys lo..lo+n-1; else the slots idx[0..n))
 * over a cache whose K and V rows may be quantized: tk, tv are SP_F16,
 * SP_Q8_0 or SP_Q4_0, k and v point at the head's first value of position
 * 0, and position j's is k_stride (v_stride) bytes further.  As llama.cpp
 * with a quantized K cache, the query is converted to Q8_0 (K's vec-dot
 * type) and each score is sp_vec_dot(tk, ...); a quantized V row is
 * dequantized and weighted by the F16-rounded probability.  F16 parts are
 * computed as in sp_attn_heads.  head_dim <= 512 (a multiple of 32 when
 * quantized), n_q <= 16; scores needs n_q * n floats. */
void sp_attn_heads_q(float *out, const float *q, int n_q, const void *k, uint32_t tk, size_t k_stride,
                     const void *v, uint32_t tv, size_t v_stride, int head_dim, int lo, const int32_t *idx,
                     int n, float scale, float *scores);

#endif /* SP_KERNELS_H */
