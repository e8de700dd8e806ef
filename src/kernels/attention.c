/* Scaled dot-product attention of one query head over an F16 KV cache.
 *
 * Precision follows llama.cpp's CPU attention (flash attention off), which
 * multiplies the F16 cache by activations converted to F16:
 *   - the query is rounded to F16 before the dot products with the keys
 *     (ggml converts it to the F16 cache's vec_dot type);
 *   - the softmax is computed in float, then each probability is rounded to
 *     F16 before it weights the values (the same conversion for K*Q x V).
 * Without these two roundings every attention output differs from
 * llama.cpp's by 1e-4..1e-3 relative; with them it agrees to float
 * rounding when both are given the same inputs. */
#include "kernels/internal.h"

#include <assert.h>
#include <string.h>

static inline float sp_attn_f16_round(float x) { return sp_f16_to_f32(sp_f32_to_f16(x)); }

/* One head over the keys at slots idx[0..n) (idx NULL: slots lo..lo+n-1),
 * in that order: each score is summed over d in order, then the softmax,
 * then the values weighted key by key.  A row's output depends only on its
 * query and the keys it is given, so a key list that equals a range gives
 * the range's result bit for bit. */
static void attn_core(float *out, const float *q, const sp_f16 *k, const sp_f16 *v, size_t stride,
                      int head_dim, int lo, const int32_t *idx, int n, float scale, float *scores) {
    /* out holds the F16-rounded query until the scores are done (out may be q). */
    for (int d = 0; d < head_dim; d++) out[d] = sp_attn_f16_round(q[d]);
    for (int j = 0; j < n; j++) {
        const sp_f16 *kj = k + (size_t)(idx ? idx[j] : lo + j) * stride;
        float s = 0.0f;
        for (int d = 0; d < head_dim; d++) s += out[d] * sp_f16_to_f32(kj[d]);
        scores[j] = s * scale;
    }
    sp_softmax(scores, n);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int j = 0; j < n; j++) {
        const sp_f16 *vj = v + (size_t)(idx ? idx[j] : lo + j) * stride;
        const float p = sp_attn_f16_round(scores[j]);
        for (int d = 0; d < head_dim; d++) out[d] += p * sp_f16_to_f32(vj[d]);
    }
}

/* One head over a cache with quantized K or V rows (see kernels.h).  The
 * portable path serves every SIMD level: its dot products (sp_vec_dot) are
 * the dispatched ones, and every order of summation is fixed, so a row's
 * result depends only on its query and its keys. */
void sp_attn_heads_q(float *out, const float *q, int n_q, const void *k, uint32_t tk, size_t k_stride,
                     const void *v, uint32_t tv, size_t v_stride, int head_dim, int lo, const int32_t *idx,
                     int n, float scale, float *scores) {
    enum { MAXD = 512 };
    assert(head_dim <= MAXD && (tk == SP_F16 || head_dim % 32 == 0) && (tv == SP_F16 || head_dim % 32 == 0));
    float tmp[MAXD];
    uint8_t qb[MAXD / 32 * 34];
    for (int h = 0; h < n_q; h++) {
        const float *qh = q + (size_t)h * head_dim;
        float *oh = out + (size_t)h * head_dim;
        if (tk == SP_F16) for (int d = 0; d < head_dim; d++) tmp[d] = sp_attn_f16_round(qh[d]);
        else sp_quantize_act_row(SP_Q8_0, qh, qb, head_dim);
        for (int j = 0; j < n; j++) {
            const uint8_t *kj = (const uint8_t *)k + (size_t)(idx ? idx[j] : lo + j) * k_stride;
            float s = 0.0f;
            if (tk == SP_F16) {
                const sp_f16 *kh = (const sp_f16 *)(const void *)kj;
                for (int d = 0; d < head_dim; d++) s += tmp[d] * sp_f16_to_f32(kh[d]);
            } else {
                s = sp_vec_dot(tk, head_dim, kj, qb);
            }
            scores[j] = s * scale;
        }
        sp_softmax(scores, n);
        memset(oh, 0, (size_t)head_dim * sizeof(float));
        for (int j = 0; j < n; j++) {
            const uint8_t *vj = (const uint8_t *)v + (size_t)(idx ? idx[j] : lo + j) * v_stride;
            const float p = sp_attn_f16_round(scores[j]);
            if (tv == SP_F16) {
                const sp_f16 *vh = (const sp_f16 *)(const void *)vj;
                for (int d = 0; d < head_dim; d++) oh[d] += p * sp_f16_to_f32(vh[d]);
            } else {
                sp_dequantize_row(tv, vj, tmp, head_dim);
                for (int d = 0; d < head_dim; d++) oh[d] += p * tmp[d];
            }
        }
    }
}

void sp_attn_head(float *out, const float *q, const sp_f16 *k, const sp_f16 *v, size_t stride,
                  int head_dim, int lo, int hi, float scale, float *scores) {
    SP_KDISPATCH(attn_head, out, q, k, v, stride, head_dim, lo, hi, scale, scores);
    attn_core(out, q, k, v, stride, head_dim, lo, NULL, hi - lo, scale, scores);
}

/* Portable: one head after the other (the SIMD table shares the pass). */
void sp_attn_heads(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                   size_t stride, int head_dim, int lo, int hi, float scale, float *scores) {
    SP_KDISPATCH(attn_heads, out, q, n_q, k, v, stride, head_dim, lo, hi, scale, scores);
    for (int h = 0; h < n_q; h++) {
        const size_t off = (size_t)h * (size_t)head_dim;
        attn_core(out + off, q + off, k, v, stride, head_dim, lo, NULL, hi - lo, scale, scores);
    }
}

void sp_attn_heads_idx(float *out, const float *q, int n_q, const sp_f16 *k, const sp_f16 *v,
                       size_t stride, int head_dim, const int32_t *idx, int n, float scale,
                       float *scores) {
    SP_KDISPATCH(attn_heads_idx, out, q, n_q, k, v, stride, head_dim, idx, n, scale, scores);
    for (int h = 0; h < n_q; h++) {
        const size_t off = (size_t)h * (size_t)head_dim;
        attn_core(out + off, q + off, k, v, stride, head_dim, 0, idx, n, scale, scores);
    }
}
