/*
 * Attention where each query row attends an explicit list of key rows
 * (see train.h).  Plain causal attention is the list 0..t; training-time
 * test of a draft head attends, at unrolled step j, the first step's keys
 * up to its position and its own earlier steps' keys at that position,
 * which no single mask rule over one sequence expresses, but a list does.
 */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline int sp_tr_len(const sp_tr_attn_shape *s, int t) { return s->koff[t + 1] - s->koff[t]; }

/* att row of (row t, head h) */
static inline size_t sp_tr_att_at(const sp_tr_attn_shape *s, int t, int h) {
    return (size_t)s->koff[t] * s->n_head + (size_t)h * sp_tr_len(s, t);
}

typedef struct sp_tr_attn_job {
    float *out, *att, *dq, *dk, *dv;
    const float *dout, *q, *k, *v;
    const sp_tr_attn_shape *s;
} sp_tr_attn_job;

/* Forward, threads split by query rows:
 *   a_j = softmax_j(q_h . k_{idx_j} / sqrt(hd)),  out_h = sum_j a_j v_{idx_j} */
static void sp_tr_attn_fwd_thread(void *ctx, int ith, int nth) {
    const sp_tr_attn_job *jb = ctx;
    const sp_tr_attn_shape *s = jb->s;
    const int hd = s->hd, grp = s->n_head / s->n_kv;
    const size_t qd = (size_t)s->n_head * hd, kd = (size_t)s->n_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    int64_t lo, hi;
    sp_split(s->T, ith, nth, &lo, &hi);
    for (int t = (int)lo; t < hi; t++) {
        const int len = sp_tr_len(s, t);
        const int32_t *idx = s->kidx + s->koff[t];
        for (int h = 0; h < s->n_head; h++) {
            const float *qh = jb->q + t * qd + (size_t)h * hd;
            float *a = jb->att + sp_tr_att_at(s, t, h), *o = jb->out + t * qd + (size_t)h * hd;
            const size_t ko = (size_t)(h / grp) * hd;
            float mx = -INFINITY;
            for (int j = 0; j < len; j++) {
                const float *kj = jb->k + idx[j] * kd + ko;
                float dot = 0.0f;
                for (int i = 0; i < hd; i++) dot += qh[i] * kj[i];
                a[j] = dot * scale;
                mx = a[j] > mx ? a[j] : mx;
            }
            double sum = 0.0;
            for (int j = 0; j < len; j++) { a[j] = expf(a[j] - mx); sum += a[j]; }
            const float inv = (float)(1.0 / sum);
            memset(o, 0, sizeof(float) * (size_t)hd);
            for (int j = 0; j < len; j++) {
                a[j] *= inv;
                const float *vj = jb->v + idx[j] * kd + ko;
                for (int i = 0; i < hd; i++) o[i] += a[j] * vj[i];
            }
        }
    }
}

void sp_tr_attn_fwd(sp_pool *pool, float *out, float *att, const float *q, const float *k,
                    const float *v, const sp_tr_attn_shape *s) {
    sp_tr_attn_job jb = { .out = out, .att = att, .q = q, .k = k, .v = v, .s = s };
    if (pool && sp_pool_size(pool) > 1) sp_pool_run(pool, sp_tr_attn_fwd_thread, &jb);
    else sp_tr_attn_fwd_thread(&jb, 0, 1);
}

/* Backward, threads split by kv head (the rows of dk and dv a kv head owns
 * are touched by no other thread; rows in order keep the sums fixed):
 *   dv_j += a_j dout_h;  da_j = dout_h . v_j;  ds_j = a_j (da_j - sum_i a_i da_i)
 *   dq_h += scale sum_j ds_j k_j;  dk_j += scale ds_j q_h */
static void sp_tr_attn_bwd_thread(void *ctx, int ith, int nth) {
    const sp_tr_attn_job *jb = ctx;
    const sp_tr_attn_shape *s = jb->s;
    const int hd = s->hd, grp = s->n_head / s->n_kv;
    const size_t qd = (size_t)s->n_head * hd, kd = (size_t)s->n_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    int64_t g_lo, g_hi;
    sp_split(s->n_kv, ith, nth, &g_lo, &g_hi);
    int max_len = 0;
    for (int t = 0; t < s->T; t++) max_len = sp_tr_len(s, t) > max_len ? sp_tr_len(s, t) : max_len;
    float *ds = sp_xmalloc(sizeof(float) * (size_t)(max_len > 0 ? max_len : 1));
    for (int t = 0; t < s->T; t++) {
        const int len = sp_tr_len(s, t);
        const int32_t *idx = s->kidx + s->koff[t];
        for (int h = (int)g_lo * grp; h < g_hi * grp; h++) {
            const size_t qo = t * qd + (size_t)h * hd, ko = (size_t)(h / grp) * hd;
            const float *a = jb->att + sp_tr_att_at(s, t, h), *doh = jb->dout + qo, *qh = jb->q + qo;
            double adot = 0.0;
            for (int j = 0; j < len; j++) {
                const float *vj = jb->v + idx[j] * kd + ko;
                float da = 0.0f;
                for (int i = 0; i < hd; i++) da += doh[i] * vj[i];
                ds[j] = da;
                adot += (double)a[j] * da;
                if (jb->dv) {
                    float *dvj = jb->dv + idx[j] * kd + ko;
                    for (int i = 0; i < hd; i++) dvj[i] += a[j] * doh[i];
                }
            }
            for (int j = 0; j < len; j++) {
                const float d = scale * a[j] * (ds[j] - (float)adot);
                const float *kj = jb->k + idx[j] * kd + ko;
                if (jb->dq)
                    for (int i = 0; i < hd; i++) jb->dq[qo + i] += d * kj[i];
                if (jb->dk) {
                    float *dkj = jb->dk + idx[j] * kd + ko;
                    for (int i = 0; i < hd; i++) dkj[i] += d * qh[i];
                }
            }
        }
    }
    free(ds);
}

void sp_tr_attn_bwd(sp_pool *pool, float *dq, float *dk, float *dv, const float *dout,
                    const float *att, const float *q, const float *k, const float *v,
                    const sp_tr_attn_shape *s) {
    sp_tr_attn_job jb = { .att = (float *)att, .dq = dq, .dk = dk, .dv = dv, .dout = dout,
                          .q = q, .k = k, .v = v, .s = s };
    if (pool && sp_pool_size(pool) > 1) sp_pool_run(pool, sp_tr_attn_bwd_thread, &jb);
    else sp_tr_attn_bwd_thread(&jb, 0, 1);
}

void sp_tr_attn_causal(int32_t *koff, int32_t *kidx, int T, int past) {
    int32_t n = 0;
    for (int t = 0; t < T; t++) {
        koff[t] = n;
        for (int j = 0; j <= past + t; j++) kidx[n++] = j;
    }
    koff[T] = n;
}
