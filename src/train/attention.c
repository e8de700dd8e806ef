/*
 * Attention where each query row attends an explicit list of key rows
 * (see train.h).  Plain causal attention is the list 0..t; training-time
 * test of a draft head attends, at unrolled step j, the first step's keys
 * up to its position and its own earlier steps' keys at that position,
 * which no single mask rule over one sequence expresses, but a list does.
 *
 * Threads split the query rows so that each gets the same number of list
 * entries (the work; causal rows grow).  The backward's dk and dv gather
 * from many rows: each thread sums into its own buffer and the buffers are
 * added in thread order, so the result is fixed for a given thread count.
 */
#include "train/internal.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void sp_tr_dots_scalar(float *out, const float *x, const float *base, const int32_t *idx, int len,
                              size_t stride, int n) {
    for (int j = 0; j < len; j++) {
        const float *r = base + idx[j] * stride;
        float s = 0.0f;
        for (int i = 0; i < n; i++) s += x[i] * r[i];
        out[j] = s;
    }
}
static void sp_tr_wsum_scalar(float *y, const float *w, const float *base, const int32_t *idx, int len,
                              size_t stride, int n) {
    for (int j = 0; j < len; j++)
        for (int i = 0; i < n; i++) y[i] += w[j] * base[idx[j] * stride + i];
}
static void sp_tr_scatter_scalar(float *base, const int32_t *idx, int len, size_t stride, const float *w,
                                 const float *x, int n) {
    for (int j = 0; j < len; j++)
        for (int i = 0; i < n; i++) base[idx[j] * stride + i] += w[j] * x[i];
}
static const sp_tr_vec_ops sp_tr_vec_scalar = { sp_tr_dots_scalar, sp_tr_wsum_scalar, sp_tr_scatter_scalar };

static const sp_tr_vec_ops *sp_tr_vec(void) {
#if defined(__x86_64__)
    switch (sp_kernels_simd()) {
    case SP_SIMD_AVX512: return &sp_tr_vec_avx512;
    case SP_SIMD_AVX2: case SP_SIMD_VNNI: return &sp_tr_vec_avx2;
    default: break;
    }
#endif
    return &sp_tr_vec_scalar;
}

static inline int sp_tr_len(const sp_tr_attn_shape *s, int t) { return s->koff[t + 1] - s->koff[t]; }

/* att row of (row t, head h) */
static inline size_t sp_tr_att_at(const sp_tr_attn_shape *s, int t, int h) {
    return (size_t)s->koff[t] * s->n_head + (size_t)h * sp_tr_len(s, t);
}

/* First row t in [0, T] with koff[t] >= e. */
static int sp_tr_row_at(const sp_tr_attn_shape *s, int64_t e) {
    int lo = 0, hi = s->T;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (s->koff[mid] >= e) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* Rows [*lo, *hi) of thread ith: equal shares of the list entries. */
static void sp_tr_attn_rows(const sp_tr_attn_shape *s, int ith, int nth, int *lo, int *hi) {
    const int64_t b = s->koff[0], n = s->koff[s->T] - b;
    *lo = ith == 0 ? 0 : sp_tr_row_at(s, b + n * ith / nth);
    *hi = ith == nth - 1 ? s->T : sp_tr_row_at(s, b + n * (ith + 1) / nth);
}

typedef struct sp_tr_attn_job {
    float *out, *att_out, *dq, *dk, *dv;    /* att_out: the forward's probabilities */
    const float *att, *dout, *q, *k, *v;
    const sp_tr_attn_shape *s;
    const sp_tr_vec_ops *vo;
    float **kbuf, **vbuf;       /* backward, more than one thread: per-thread dk, dv */
} sp_tr_attn_job;

/* Forward: a_j = softmax_j(q_h . k_{idx_j} / sqrt(hd)),  out_h = sum_j a_j v_{idx_j} */
static void sp_tr_attn_fwd_thread(void *ctx, int ith, int nth) {
    const sp_tr_attn_job *jb = ctx;
    const sp_tr_attn_shape *s = jb->s;
    const int hd = s->hd, grp = s->n_head / s->n_kv;
    const size_t qd = (size_t)s->n_head * hd, kd = (size_t)s->n_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    int lo, hi;
    sp_tr_attn_rows(s, ith, nth, &lo, &hi);
    for (int t = lo; t < hi; t++) {
        const int len = sp_tr_len(s, t);
        const int32_t *idx = s->kidx + s->koff[t];
        for (int h = 0; h < s->n_head; h++) {
            const float *qh = jb->q + t * qd + (size_t)h * hd;
            float *a = jb->att_out + sp_tr_att_at(s, t, h), *o = jb->out + t * qd + (size_t)h * hd;
            const size_t ko = (size_t)(h / grp) * hd;
            jb->vo->dots(a, qh, jb->k + ko, idx, len, kd, hd);
            for (int j = 0; j < len; j++) a[j] *= scale;
            if (len > 0) sp_softmax(a, len);        /* the kernels' (SIMD) softmax */
            memset(o, 0, sizeof(float) * (size_t)hd);
            jb->vo->wsum(o, a, jb->v + ko, idx, len, kd, hd);
        }
    }
}

void sp_tr_attn_fwd(sp_pool *pool, float *out, float *att, const float *q, const float *k,
                    const float *v, const sp_tr_attn_shape *s) {
    sp_tr_attn_job jb = { .out = out, .att_out = att, .q = q, .k = k, .v = v, .s = s, .vo = sp_tr_vec() };
    if (pool && sp_pool_size(pool) > 1) sp_pool_run(pool, sp_tr_attn_fwd_thread, &jb);
    else sp_tr_attn_fwd_thread(&jb, 0, 1);
}

/* Backward:
 *   dv_j += a_j dout_h;  da_j = dout_h . v_j;  ds_j = a_j (da_j - sum_i a_i da_i)
 *   dq_h += scale sum_j ds_j k_j;  dk_j += scale ds_j q_h */
static void sp_tr_attn_bwd_thread(void *ctx, int ith, int nth) {
    const sp_tr_attn_job *jb = ctx;
    const sp_tr_attn_shape *s = jb->s;
    const int hd = s->hd, grp = s->n_head / s->n_kv;
    const size_t qd = (size_t)s->n_head * hd, kd = (size_t)s->n_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *dk = jb->kbuf ? jb->kbuf[ith] : jb->dk, *dv = jb->vbuf ? jb->vbuf[ith] : jb->dv;
    int lo, hi, max_len = 1;
    sp_tr_attn_rows(s, ith, nth, &lo, &hi);
    for (int t = lo; t < hi; t++) max_len = sp_tr_len(s, t) > max_len ? sp_tr_len(s, t) : max_len;
    float *da = sp_xmalloc(sizeof(float) * (size_t)max_len);
    for (int t = lo; t < hi; t++) {
        const int len = sp_tr_len(s, t);
        const int32_t *idx = s->kidx + s->koff[t];
        for (int h = 0; h < s->n_head; h++) {
            const size_t qo = t * qd + (size_t)h * hd, ko = (size_t)(h / grp) * hd;
            const float *a = jb->att + sp_tr_att_at(s, t, h), *doh = jb->dout + qo, *qh = jb->q + qo;
            jb->vo->dots(da, doh, jb->v + ko, idx, len, kd, hd);
            if (dv) jb->vo->scatter(dv + ko, idx, len, kd, a, doh, hd);
            double adot = 0.0;
            for (int j = 0; j < len; j++) adot += (double)a[j] * da[j];
            for (int j = 0; j < len; j++) da[j] = scale * a[j] * (da[j] - (float)adot);   /* ds */
            if (dk) jb->vo->scatter(dk + ko, idx, len, kd, da, qh, hd);
            if (jb->dq) jb->vo->wsum(jb->dq + qo, da, jb->k + ko, idx, len, kd, hd);
        }
    }
    free(da);
}

/* dk += kbuf[0] + kbuf[1] + ..., the same for dv, threads split the elements. */
static void sp_tr_attn_reduce_thread(void *ctx, int ith, int nth) {
    const sp_tr_attn_job *jb = ctx;
    int64_t lo, hi;
    sp_split((int64_t)jb->s->S * jb->s->n_kv * jb->s->hd, ith, nth, &lo, &hi);
    for (int th = 0; th < nth; th++)
        for (int64_t e = lo; e < hi; e++) {
            if (jb->dk) jb->dk[e] += jb->kbuf[th][e];
            if (jb->dv) jb->dv[e] += jb->vbuf[th][e];
        }
}

void sp_tr_attn_bwd(sp_pool *pool, float *dq, float *dk, float *dv, const float *dout,
                    const float *att, const float *q, const float *k, const float *v,
                    const sp_tr_attn_shape *s) {
    sp_tr_attn_job jb = { .att = att, .dq = dq, .dk = dk, .dv = dv, .dout = dout,
                          .q = q, .k = k, .v = v, .s = s, .vo = sp_tr_vec() };
    const int nth = pool ? sp_pool_size(pool) : 1;
    if (nth == 1) { sp_tr_attn_bwd_thread(&jb, 0, 1); return; }
    const size_t nkv = (size_t)s->S * s->n_kv * s->hd;
    float *kb[nth], *vb[nth];
    for (int th = 0; th < nth; th++) {
        kb[th] = dk ? sp_alloc_aligned(sizeof(float) * (nkv ? nkv : 1)) : NULL;
        vb[th] = dv ? sp_alloc_aligned(sizeof(float) * (nkv ? nkv : 1)) : NULL;
    }
    jb.kbuf = kb;
    jb.vbuf = vb;
    sp_pool_run(pool, sp_tr_attn_bwd_thread, &jb);
    sp_pool_run(pool, sp_tr_attn_reduce_thread, &jb);
    for (int th = 0; th < nth; th++) { sp_free_aligned(kb[th]); sp_free_aligned(vb[th]); }
}

void sp_tr_attn_causal(int32_t *koff, int32_t *kidx, int T, int past) {
    int32_t n = 0;
    for (int t = 0; t < T; t++) {
        koff[t] = n;
        for (int j = 0; j <= past + t; j++) kidx[n++] = j;
    }
    koff[T] = n;
}

void sp_tr_attn_ttt(int32_t *koff, int32_t *kidx, int T, int step) {
    int32_t n = 0;
    for (int t = 0; t < T; t++) {
        koff[t] = n;
        for (int j = 0; j <= t; j++) kidx[n++] = j;
        for (int i = 1; i <= step; i++) kidx[n++] = i * T + t;
    }
    koff[T] = n;
}
