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

/* The half-float scale of a block. */
static inline float blk_d(const uint8_t d[2]) {
    sp_f16 h;
    memcpy(&h, d, sizeof h);
    return sp_f16_to_f32(h);
}

/* The int8 values of one key row (head_dim values of type t, Q8_0 or
 * Q4_0) and its block scales. */
static void key_unpack(uint32_t t, const uint8_t *row, int nb, int8_t *q, float *d) {
    for (int b = 0; b < nb; b++) {
        if (t == SP_Q8_0) {
            const sp_blk_q8_0 *x = (const sp_blk_q8_0 *)(const void *)row + b;
            memcpy(q + 32 * b, x->qs, 32);
            d[b] = blk_d(x->d);
        } else {
            const sp_blk_q4_0 *x = (const sp_blk_q4_0 *)(const void *)row + b;
            for (int j = 0; j < 16; j++) {
                q[32 * b + j] = (int8_t)((x->qs[j] & 15) - 8);
                q[32 * b + j + 16] = (int8_t)((x->qs[j] >> 4) - 8);
            }
            d[b] = blk_d(x->d);
        }
    }
}

/* Score of a Q8_0 query (int8 qq, scales dq) against an unpacked key:
 * per block the integer dot, scaled by both scales, summed in block order
 * (as ggml's vec_dot_q8_0_q8_0 / q4_0_q8_0). */
static inline float key_dot(const int8_t *qk, const float *dk, const int8_t *qq, const float *dq, int nb) {
    float s = 0.0f;
    for (int b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++) isum += (int32_t)qk[32 * b + j] * (int32_t)qq[32 * b + j];
        s += (float)isum * (dk[b] * dq[b]);
    }
    return s;
}

/* The query heads of one KV head over a cache with quantized K or V rows
 * (see kernels.h).  Keys outside, heads inside: each K and V row is
 * decoded once for the whole group.  Every sum runs in a fixed order (key
 * by key, block by block), so a row's result depends only on its query
 * and its keys, whatever the batch. */
void sp_attn_heads_q(float *out, const float *q, int n_q, const void *k, uint32_t tk, size_t k_stride,
                     const void *v, uint32_t tv, size_t v_stride, int head_dim, int lo, const int32_t *idx,
                     int n, float scale, float *scores) {
    enum { MAXD = 512, MAXH = 16 };
    assert(head_dim <= MAXD && n_q <= MAXH && (tk == SP_F16 || head_dim % 32 == 0) &&
           (tv == SP_F16 || head_dim % 32 == 0));
    SP_KDISPATCH(attn_heads_q, out, q, n_q, k, tk, k_stride, v, tv, v_stride, head_dim, lo, idx, n, scale, scores);
    const int nb = head_dim / 32;
    static _Thread_local float qf[MAXH][MAXD], vrow[MAXD], kd[MAXD / 32], qd[MAXH][MAXD / 32];
    static _Thread_local int8_t qq[MAXH][MAXD], kq[MAXD];
    for (int h = 0; h < n_q; h++) {              /* the queries: F16-rounded, or Q8_0 for quantized keys */
        const float *qh = q + (size_t)h * head_dim;
        if (tk == SP_F16) {
            for (int d = 0; d < head_dim; d++) qf[h][d] = sp_attn_f16_round(qh[d]);
        } else {
            sp_blk_q8_0 blk[MAXD / 32];
            sp_quantize_act_row(SP_Q8_0, qh, blk, head_dim);
            for (int b = 0; b < nb; b++) {
                memcpy(qq[h] + 32 * b, blk[b].qs, 32);
                qd[h][b] = blk_d(blk[b].d);
            }
        }
    }
    for (int j = 0; j < n; j++) {
        const uint8_t *kj = (const uint8_t *)k + (size_t)(idx ? idx[j] : lo + j) * k_stride;
        if (tk == SP_F16) {
            const sp_f16 *kh = (const sp_f16 *)(const void *)kj;
            for (int h = 0; h < n_q; h++) {
                float s = 0.0f;
                for (int d = 0; d < head_dim; d++) s += qf[h][d] * sp_f16_to_f32(kh[d]);
                scores[(size_t)h * n + j] = s * scale;
            }
        } else {
            key_unpack(tk, kj, nb, kq, kd);
            for (int h = 0; h < n_q; h++) scores[(size_t)h * n + j] = key_dot(kq, kd, qq[h], qd[h], nb) * scale;
        }
    }
    for (int h = 0; h < n_q; h++) {
        sp_softmax(scores + (size_t)h * n, n);
        memset(out + (size_t)h * head_dim, 0, (size_t)head_dim * sizeof(float));
    }
    for (int j = 0; j < n; j++) {
        const uint8_t *vj = (const uint8_t *)v + (size_t)(idx ? idx[j] : lo + j) * v_stride;
        if (tv == SP_F16) for (int d = 0; d < head_dim; d++) vrow[d] = sp_f16_to_f32(((const sp_f16 *)(const void *)vj)[d]);
        else sp_dequantize_row(tv, vj, vrow, head_dim);
        for (int h = 0; h < n_q; h++) {
            const float p = sp_attn_f16_round(scores[(size_t)h * n + j]);
            float *oh = out + (size_t)h * head_dim;
            for (int d = 0; d < head_dim; d++) oh[d] += p * vrow[d];
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
