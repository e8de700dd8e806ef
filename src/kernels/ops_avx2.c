/*
 * AVX2+FMA+F16C vector operations and attention (see ops.c and
 * attention.c for the portable versions and the contracts).
 *
 * Agreement with the portable code:
 *   - elementwise operations (the scaling step of RMSNorm, vec_add,
 *     vec_scale) and GEGLU (a table of the portable function) are
 *     bit-identical;
 *   - sums (RMSNorm's sum of squares, softmax's sum, q.k, the weighted V
 *     sum) use 8-lane partial sums in a fixed order: the result differs from
 *     the portable one within float rounding, never with the batch;
 *   - exp is sp_v_exp below (Cody-Waite reduction and a degree-6
 *     polynomial; max relative error about 2e-7 against expf, a test checks
 *     it over the whole range); SiLU is g / (1 + exp(-g)) with it.
 */
#include "kernels/internal.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <pthread.h>

SP_TARGET_BEGIN("avx2,fma,f16c")

#define SP_AI static inline __attribute__((always_inline))

SP_AI float sp_o_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* exp(x) on 8 lanes: n = round(x log2 e), r = x - n ln2 (two-constant
 * Cody-Waite), exp(r) by the Cephes expf polynomial, times 2^n built in the
 * exponent field.  x >= 88.72 gives +inf, x < -87.33 gives 0 (expf would
 * give a subnormal below 1.2e-38), NaN gives NaN. */
SP_AI __m256 sp_v_exp(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7228317f), lo = _mm256_set1_ps(-87.3365479f);
    const __m256 over = _mm256_cmp_ps(x, hi, _CMP_GE_OQ), under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* n in [-126, 128]: 2^n as (n + 127) << 23, split in two factors so
     * n = 128 (x near the overflow bound) stays representable. */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), over);
    e = _mm256_andnot_ps(under, e);
    /* NaN in, NaN out (the clamps above would have made it finite). */
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

void sp_avx2_exp_row(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, sp_v_exp(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) {
        float t[8] = {x[i]};
        _mm256_storeu_ps(t, sp_v_exp(_mm256_loadu_ps(t)));
        y[i] = t[0];
    }
}

/* Loads k < 8 floats and zeros (tails). */
SP_AI __m256 sp_o_ld_tail(const float *x, int k) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(x, mask);
}
SP_AI void sp_o_st_tail(float *y, __m256 v, int k) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(y, mask, v);
}

/* ========================================================================
 * Norms and elementwise operations
 * ===================================================================== */

/* Sum of squares: float products (as the portable code), summed in double
 * on 2 x 4 lanes, combined in a fixed order. */
void sp_avx2_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i), sq = _mm256_mul_ps(v, v);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    const __m256d s = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < n; i++) out[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

void sp_avx2_vec_add(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

void sp_avx2_vec_scale(float *y, float s, int n) {
    const __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vs));
    for (; i < n; i++) y[i] *= s;
}

/* Two passes over x (a logits row, in L2 after the LM head wrote it): the
 * largest non-NaN value (max_ps returns its second operand when either is
 * NaN, so the running maximum never becomes one), then the first index
 * holding it.  The scalar loop's answer exactly: ties and -0.0 == +0.0 go
 * to the lower index, and a NaN x[0] wins (nothing compares above it). */
int sp_avx2_argmax(const float *x, int n) {
    if (isnan(x[0])) return 0;
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(_mm256_loadu_ps(x + i), vm);
    float lanes[8];
    _mm256_storeu_ps(lanes, vm);
    float max = -INFINITY;
    for (int j = 0; j < 8; j++) max = lanes[j] > max ? lanes[j] : max;
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    const __m256 vmax = _mm256_set1_ps(max);
    for (i = 0; i + 8 <= n; i += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vmax, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (x[i] == max) return i;
    return 0;                        /* unreachable: x[0] is not NaN, so some x[i] holds max */
}

/* x = exp(x - max) / sum, the sum in double (4 lanes, fixed order). */
void sp_avx2_softmax(float *x, int n) {
    if (n <= 0) return;
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(_mm256_loadu_ps(x + i), vm);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float max = _mm_cvtss_f32(m4);
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    const __m256 vmax = _mm256_set1_ps(max);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (i = 0; i < n; i += 8) {
        const int k = n - i < 8 ? n - i : 8;
        __m256 e = sp_v_exp(_mm256_sub_ps(k == 8 ? _mm256_loadu_ps(x + i) : sp_o_ld_tail(x + i, k), vmax));
        if (k < 8) {
            const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            e = _mm256_and_ps(e, _mm256_castsi256_ps(keep));
            sp_o_st_tail(x + i, e, k);
        } else {
            _mm256_storeu_ps(x + i, e);
        }
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    const __m256d s = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    const double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    sp_avx2_vec_scale(x, (float)(1.0 / sum), n);
}

/* out = g / (1 + exp(-g)) * up. */
void sp_avx2_swiglu(float *out, const float *gate, const float *up, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n; i += 8) {
        const int k = n - i < 8 ? n - i : 8;
        const __m256 g = k == 8 ? _mm256_loadu_ps(gate + i) : sp_o_ld_tail(gate + i, k);
        const __m256 u = k == 8 ? _mm256_loadu_ps(up + i) : sp_o_ld_tail(up + i, k);
        const __m256 e = sp_v_exp(_mm256_xor_ps(g, neg));
        const __m256 r = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
        if (k == 8) _mm256_storeu_ps(out + i, r);
        else sp_o_st_tail(out + i, r, k);
    }
}

/* GEGLU through the F16 table of ggml (see sp_gelu_f16 in ops.c): the
 * gate rounded to F16 indexes a table of sp_gelu_f16 over all F16 values,
 * with the same clamps (0 at or below -10, the input itself at or above
 * 10), so the result is bit-identical to the portable code.  The entries
 * of +-10 are the ones inputs just inside the clamps round to: they are
 * computed from such an input. */
static float sp_gelu_table[65536];
static pthread_once_t sp_gelu_once = PTHREAD_ONCE_INIT;

static void sp_gelu_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float x = sp_f16_to_f32((sp_f16)h);
        if (x == 10.0f || x == -10.0f) x = nextafterf(x, 0.0f);
        sp_gelu_table[h] = sp_gelu_f16(x);
    }
}

void sp_avx2_geglu(float *out, const float *gate, const float *up, int n) {
    pthread_once(&sp_gelu_once, sp_gelu_table_init);
    const __m256 p10 = _mm256_set1_ps(10.0f), m10 = _mm256_set1_ps(-10.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
        __m256 r = _mm256_i32gather_ps(sp_gelu_table, idx, 4);
        r = _mm256_blendv_ps(r, g, _mm256_cmp_ps(g, p10, _CMP_GE_OQ));
        r = _mm256_andnot_ps(_mm256_cmp_ps(g, m10, _CMP_LE_OQ), r);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(r, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = sp_gelu_f16(gate[i]) * up[i];
}

/* ========================================================================
 * Attention of one query head over an F16 cache
 * ===================================================================== */

/* 8 values of an F16 row (or the first k and zeros). */
SP_AI __m256 sp_o_ld_h(const sp_f16 *p, int k) {
    if (k == 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    sp_f16 t[8] = {0};
    memcpy(t, p, (size_t)k * sizeof(sp_f16));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}

#define SP_O_UNROLL(n) _Pragma("GCC unroll 8")

/* Keys and values are read at a stride of the whole KV row (all heads), a
 * head's slice at a time, from a cache that outgrows L2 after a few hundred
 * positions: without help the loads wait on memory one row after the other
 * (perf: most of attention's time on the F16 loads).  Asking for the row
 * SP_O_PF keys ahead keeps several misses in flight, and the first SP_O_PF
 * rows are asked for before the loop.  64 rather than 8: a one-row forward
 * of SmolLM2 after 1,500 tokens took 5.0 instead of 5.9 ms (AMD Zen 5,
 * AVX2 level; at the AVX-512 level 32 and 128 were no better than 64).
 * Prefetches change no result. */
#define SP_O_PF 64
SP_AI void sp_o_prefetch(const sp_f16 *base, const int32_t *idx, int j, int n, size_t stride, int nbytes) {
    if (j >= n) return;
    const char *p = (const char *)(base + (size_t)(idx ? idx[j] : j) * stride);
    for (int off = 0; off < nbytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

/* Scores of NQ heads (queries hd apart) against keys j0 .. j0 + J - 1:
 * each (head, key) is its own 8-lane sum over d in order, then hsum and
 * the scale; head h's scores are n apart.  Constants NQ, J after inlining. */
SP_AI void sp_o_qk(const float *q, const sp_f16 *k0, const int32_t *idx, size_t stride, int hd,
                   float scale, float *scores, int n, int j0, const int NQ, const int J) {
    __m256 a[8][4];
    SP_O_UNROLL(8) for (int h = 0; h < NQ; h++)
        SP_O_UNROLL(4) for (int j = 0; j < J; j++) a[h][j] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        const int c = hd - d < 8 ? hd - d : 8;
        __m256 kv[4];
        SP_O_UNROLL(4) for (int j = 0; j < J; j++)
            kv[j] = sp_o_ld_h(k0 + (size_t)(idx ? idx[j0 + j] : j0 + j) * stride + d, c);
        SP_O_UNROLL(8) for (int h = 0; h < NQ; h++) {
            const __m256 qv = c == 8 ? _mm256_loadu_ps(q + (size_t)h * hd + d) : sp_o_ld_tail(q + (size_t)h * hd + d, c);
            SP_O_UNROLL(4) for (int j = 0; j < J; j++) a[h][j] = _mm256_fmadd_ps(qv, kv[j], a[h][j]);
        }
    }
    SP_O_UNROLL(8) for (int h = 0; h < NQ; h++)
        SP_O_UNROLL(4) for (int j = 0; j < J; j++) scores[(size_t)h * n + j0 + j] = sp_o_hsum(a[h][j]) * scale;
}

/* out[h][d] = sum_j p[h][j] v_j[d], keys in order, for NQ heads; 8 * DV
 * dims at a time.  Constants NQ, DV after inlining. */
SP_AI void sp_o_pv(float *out, const float *p, int n, const sp_f16 *v0, const int32_t *idx,
                   size_t stride, int hd, const int NQ, const int DV) {
    for (int d0 = 0; d0 < hd; d0 += 8 * DV) {
        __m256 a[8][8];
        SP_O_UNROLL(8) for (int h = 0; h < NQ; h++)
            SP_O_UNROLL(8) for (int i = 0; i < DV; i++) a[h][i] = _mm256_setzero_ps();
        const int pf_bytes = (hd - d0 < 8 * DV ? hd - d0 : 8 * DV) * (int)sizeof(sp_f16);
        for (int t = 0; t < SP_O_PF; t++) sp_o_prefetch(v0 + d0, idx, t, n, stride, pf_bytes);
        for (int j = 0; j < n; j++) {
            sp_o_prefetch(v0 + d0, idx, j + SP_O_PF, n, stride, pf_bytes);
            const sp_f16 *vj = v0 + (size_t)(idx ? idx[j] : j) * stride + d0;
            __m256 vv[8];
            SP_O_UNROLL(8) for (int i = 0; i < DV; i++) {
                const int c = hd - d0 - 8 * i;
                vv[i] = c >= 8 ? sp_o_ld_h(vj + 8 * i, 8) : (c > 0 ? sp_o_ld_h(vj + 8 * i, c) : _mm256_setzero_ps());
            }
            SP_O_UNROLL(8) for (int h = 0; h < NQ; h++) {
                const __m256 pb = _mm256_broadcast_ss(p + (size_t)h * n + j);
                SP_O_UNROLL(8) for (int i = 0; i < DV; i++) a[h][i] = _mm256_fmadd_ps(pb, vv[i], a[h][i]);
            }
        }
        SP_O_UNROLL(8) for (int h = 0; h < NQ; h++) {
            SP_O_UNROLL(8) for (int i = 0; i < DV; i++) {
                const int c = hd - d0 - 8 * i;
                float *o = out + (size_t)h * hd + d0 + 8 * i;
                if (c >= 8) _mm256_storeu_ps(o, a[h][i]);
                else if (c > 0) sp_o_st_tail(o, a[h][i], c);
            }
        }
    }
}

/* x rounded through F16 (F16C rounds to nearest even, as sp_f32_to_f16),
 * in place or into y. */
static void sp_o_f16_round(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) y[i] = sp_f16_to_f32(sp_f32_to_f16(x[i]));
}

/* NQ (<= 8) heads sharing one KV head, as the portable sp_attn_head does
 * each: the queries and the probabilities rounded to F16, scores and the
 * weighted V sum in 8 lanes.  Grouping only shares the cache loads and
 * their F16 conversions: every head's operations are those it would do
 * alone (J keys / DV vectors at a time never mix heads). */
SP_AI void sp_o_attn_group(float *out, const float *q, const sp_f16 *k, const sp_f16 *v, size_t stride,
                           int hd, int lo, int hi, const int32_t *idx, float scale, float *scores,
                           const int NQ) {
    const int n = hi - lo;
    const int J = NQ <= 2 ? 4 : (NQ <= 4 ? 2 : 1);
    const int DV = NQ == 1 ? 8 : (NQ == 2 ? 4 : (NQ <= 4 ? 2 : 1));
    /* out holds the F16-rounded queries until the scores are done (out may be q). */
    sp_o_f16_round(out, q, NQ * hd);
    const sp_f16 *k0 = idx ? k : k + (size_t)lo * stride;
    int j = 0;
    const int kbytes = hd * (int)sizeof(sp_f16);
    for (int t = 0; t < SP_O_PF; t++) sp_o_prefetch(k0, idx, t, n, stride, kbytes);   /* the first keys */
    for (; j + J <= n; j += J) {
        SP_O_UNROLL(4) for (int t = 0; t < J; t++) sp_o_prefetch(k0, idx, j + t + SP_O_PF, n, stride, kbytes);
        sp_o_qk(out, k0, idx, stride, hd, scale, scores, n, j, NQ, J);
    }
    for (; j < n; j++) sp_o_qk(out, k0, idx, stride, hd, scale, scores, n, j, NQ, 1);
    for (int h = 0; h < NQ; h++) {
        sp_avx2_softmax(scores + (size_t)h * n, n);
        sp_o_f16_round(scores + (size_t)h * n, scores + (size_t)h * n, n);
    }
    sp_o_pv(out, scores, n, idx ? v : v + (size_t)lo * stride, idx, stride, hd, NQ, DV);
}

static void sp_o_attn_heads(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                            size_t stride, int head_dim, int lo, int hi, const int32_t *idx,
                            float scale, float *scores) {
    for (int h0 = 0; h0 < n_q; h0 += 8) {
        const size_t off = (size_t)h0 * head_dim;
        float *o = out + off, *sc = scores + (size_t)h0 * (size_t)(hi - lo);
        const float *qh = q + off;
#define SP_GROUP(NQ) sp_o_attn_group(o, qh, k, v, stride, head_dim, lo, hi, idx, scale, sc, NQ)
        SP_ATTN_NQ_DISPATCH(n_q - h0, SP_GROUP)
#undef SP_GROUP
    }
}

void sp_avx2_attn_heads(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                        size_t stride, int head_dim, int lo, int hi, float scale, float *scores) {
    sp_o_attn_heads(out, q, n_q, k, v, stride, head_dim, lo, hi, NULL, scale, scores);
}

void sp_avx2_attn_heads_idx(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                            size_t stride, int head_dim, const int32_t *idx, int n, float scale,
                            float *scores) {
    sp_o_attn_heads(out, q, n_q, k, v, stride, head_dim, 0, n, idx, scale, scores);
}

void sp_avx2_attn_head(float *out, const float *q, const sp_f16 *k, const sp_f16 *v,
                       size_t stride, int head_dim, int lo, int hi, float scale, float *scores) {
    sp_o_attn_group(out, q, k, v, stride, head_dim, lo, hi, NULL, scale, scores, 1);
}

/* ----------------------------------------------------------------------------
 * Attention over quantized K/V rows (sp_attn_heads_q): the portable
 * algorithm with its inner loops in 256-bit registers, bit-identical to it
 * (integer block dots are exact, the scores are summed block by block in
 * the same order, and V is weighted with a multiply and an add, as the
 * portable code compiles without contraction).
 * ------------------------------------------------------------------------- */

SP_AI float sp_o_blk_d(const uint8_t d[2]) {
    sp_f16 h;
    memcpy(&h, d, sizeof h);
    return sp_f16_to_f32(h);
}

/* The 32 int8 values of block b of a key row of type t. */
SP_AI __m256i sp_o_key_blk(uint32_t t, const uint8_t *row, int b, float *d) {
    if (t == SP_Q8_0) {
        const sp_blk_q8_0 *x = (const sp_blk_q8_0 *)(const void *)row + b;
        *d = sp_o_blk_d(x->d);
        return _mm256_loadu_si256((const __m256i *)(const void *)x->qs);
    }
    const sp_blk_q4_0 *x = (const sp_blk_q4_0 *)(const void *)row + b;
    *d = sp_o_blk_d(x->d);
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)x->qs), m = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(raw, m), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m);
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

/* Exact sum of the 32 products of two int8 vectors (values in [-127, 127]). */
SP_AI int32_t sp_o_dot_i8(__m256i a, __m256i b) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
    const __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p32), _mm256_extracti128_si256(p32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

void sp_avx2_attn_heads_q(float *out, const float *q, int n_q, const void *k, uint32_t tk, size_t k_stride,
                          const void *v, uint32_t tv, size_t v_stride, int head_dim, int lo, const int32_t *idx,
                          int n, float scale, float *scores) {
    enum { MAXD = 512, MAXH = 16 };
    const int nb = head_dim / 32;
    static _Thread_local float qf[MAXH][MAXD], vrow[MAXD], qd[MAXH][MAXD / 32];
    static _Thread_local int8_t qq[MAXH][MAXD];
    for (int h = 0; h < n_q; h++) {
        const float *qh = q + (size_t)h * head_dim;
        if (tk == SP_F16) {
            sp_o_f16_round(qf[h], qh, head_dim);
        } else {
            sp_blk_q8_0 blk[MAXD / 32];
            sp_quantize_act_row(SP_Q8_0, qh, blk, head_dim);
            for (int b = 0; b < nb; b++) {
                memcpy(qq[h] + 32 * b, blk[b].qs, 32);
                qd[h][b] = sp_o_blk_d(blk[b].d);
            }
        }
    }
    for (int j = 0; j < n; j++) {
        const uint8_t *kj = (const uint8_t *)k + (size_t)(idx ? idx[j] : lo + j) * k_stride;
        if (tk == SP_F16) {                      /* the portable loop: F16 keys with quantized values */
            const sp_f16 *kh = (const sp_f16 *)(const void *)kj;
            for (int h = 0; h < n_q; h++) {
                float s = 0.0f;
                for (int d = 0; d < head_dim; d++) s += qf[h][d] * sp_f16_to_f32(kh[d]);
                scores[(size_t)h * n + j] = s * scale;
            }
            continue;
        }
        float s[MAXH] = { 0 };
        for (int b = 0; b < nb; b++) {
            float dk;
            const __m256i kb = sp_o_key_blk(tk, kj, b, &dk);
            for (int h = 0; h < n_q; h++) {
                const __m256i qb = _mm256_loadu_si256((const __m256i *)(const void *)(qq[h] + 32 * b));
                s[h] += (float)sp_o_dot_i8(kb, qb) * (dk * qd[h][b]);
            }
        }
        for (int h = 0; h < n_q; h++) scores[(size_t)h * n + j] = s[h] * scale;
    }
    for (int h = 0; h < n_q; h++) {
        sp_softmax(scores + (size_t)h * n, n);
        sp_o_f16_round(scores + (size_t)h * n, scores + (size_t)h * n, n);   /* as the portable code */
        memset(out + (size_t)h * head_dim, 0, (size_t)head_dim * sizeof(float));
    }
    for (int j = 0; j < n; j++) {
        const uint8_t *vj = (const uint8_t *)v + (size_t)(idx ? idx[j] : lo + j) * v_stride;
        if (tv == SP_F16) {
            for (int d = 0; d < head_dim; d += 8) _mm256_storeu_ps(vrow + d, sp_o_ld_h((const sp_f16 *)(const void *)vj + d, 8));
        } else {
            for (int b = 0; b < nb; b++) {
                float dv;
                const __m256i vb = sp_o_key_blk(tv, vj, b, &dv);
                const __m256 ds = _mm256_set1_ps(dv);
                const __m128i v0 = _mm256_castsi256_si128(vb), v1 = _mm256_extracti128_si256(vb, 1);
                const __m128i parts[4] = { v0, _mm_srli_si128(v0, 8), v1, _mm_srli_si128(v1, 8) };
                for (int c = 0; c < 4; c++)
                    _mm256_storeu_ps(vrow + 32 * b + 8 * c,
                                     _mm256_mul_ps(ds, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[c]))));
            }
        }
        for (int h = 0; h < n_q; h++) {
            const __m256 p = _mm256_set1_ps(scores[(size_t)h * n + j]);      /* rounded to F16 above */
            float *oh = out + (size_t)h * head_dim;
            for (int d = 0; d < head_dim; d += 8)
                _mm256_storeu_ps(oh + d, _mm256_add_ps(_mm256_loadu_ps(oh + d),
                                                       _mm256_mul_ps(p, _mm256_loadu_ps(vrow + d))));
        }
    }
}

SP_TARGET_END

#endif /* __x86_64__ */
