/*
 * Losses of the draft head's logits against soft (top-k, renormalised)
 * targets: softmax cross-entropy (KL up to the targets' entropy), or the
 * negative log of the acceptance rate of speculative sampling, -log sum
 * min(p, q) (the "LK" loss: it optimises what verification accepts, where
 * KL spends a small head's capacity on matching the whole distribution).
 */
#include "train/train.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct sp_tr_ce_job {
    sp_tr_loss_kind kind;
    float *dlogits;
    const float *logits, *probs, *w;
    const int32_t *ids;
    int n, V, k;
    float denom;
    double *row_loss;       /* per row: w * CE */
    signed char *row_hit;   /* per row: argmax matched (1, 0), masked (-1) */
} sp_tr_ce_job;

/* One row of the LK loss, dl holding exp(l_j - max): with q = softmax(l),
 *   alpha = sum_i min(p_i, q_id_i),  L = -log alpha,
 * and S the targets q falls short of (q_id_i < p_i), Q_S = sum_S q_id_i:
 *   d alpha / d l_j = q_j (1[j in S] - Q_S),
 *   dL / d l_j = c q_j (Q_S - 1[j in S]) / alpha  (scaled by c = w/denom).
 * Each factor q_j / alpha is at most 1 for j in S (alpha >= Q_S >= q_j), so
 * a small alpha does not blow the gradient up. Writes dl, returns L. */
static double sp_tr_lk_row(float *dl, double se, const int32_t *id, const float *p, int k, int V, double psum,
                           double c) {
    assert(k <= SP_TR_LK_MAX_K);
    double alpha = 0.0, qs = 0.0, sub[SP_TR_LK_MAX_K];
    for (int i = 0; i < k; i++) {
        sub[i] = 0.0;
        if (id[i] < 0 || id[i] >= V) continue;
        const double pi = p[i] / psum, qi = dl[id[i]] / se;
        alpha += qi < pi ? qi : pi;
        if (qi < pi) {
            qs += qi;
            sub[i] = qi;
        }
    }
    if (alpha < 1e-30) alpha = 1e-30;    /* every target's q underflowed: a finite, flat row */
    const double f = c / alpha;
    for (int j = 0; j < V; j++) dl[j] = (float)(f * (dl[j] / se) * qs);
    for (int i = 0; i < k; i++)
        if (sub[i] > 0.0) dl[id[i]] -= (float)(f * sub[i]);
    return -log(alpha);
}

/* One row: p = target / sum(target); with z = logsumexp(l),
 *   CE = -sum_i p_i (l_id_i - z),  dCE/dl = softmax(l) - p  (scaled by w/denom). */
static void sp_tr_ce_row(const sp_tr_ce_job *jb, int t) {
    const int V = jb->V, k = jb->k;
    const float *l = jb->logits + (size_t)t * V, *p = jb->probs + (size_t)t * k;
    const int32_t *id = jb->ids + (size_t)t * k;
    float *dl = jb->dlogits + (size_t)t * V;
    const float w = jb->w ? jb->w[t] : 1.0f;
    double psum = 0.0;
    int best = -1;
    for (int i = 0; i < k; i++) {
        if (id[i] < 0 || id[i] >= V) continue;
        psum += p[i];
        if (best < 0 || p[i] > p[best]) best = i;
    }
    jb->row_loss[t] = 0.0;
    jb->row_hit[t] = -1;
    if (w == 0.0f || !(psum > 0.0)) { memset(dl, 0, sizeof(float) * (size_t)V); return; }
    int amax = 0;
    for (int j = 1; j < V; j++) amax = l[j] > l[amax] ? j : amax;
    /* one expf per logit, kept in dl, summed in double */
    const float mx = l[amax];
    double se = 0.0;
    for (int j = 0; j < V; j++) se += dl[j] = expf(l[j] - mx);
    const double z = mx + log(se), c = w / jb->denom;
    const float sc = (float)(c / se);
    jb->row_hit[t] = amax == id[best];
    if (jb->kind == SP_TR_LOSS_LK) {
        jb->row_loss[t] = w * sp_tr_lk_row(dl, se, id, p, k, V, psum, c);
        return;
    }
    double ce = 0.0;
    for (int j = 0; j < V; j++) dl[j] *= sc;
    for (int i = 0; i < k; i++) {
        if (id[i] < 0 || id[i] >= V) continue;
        const double pi = p[i] / psum;
        ce -= pi * (l[id[i]] - z);
        dl[id[i]] -= (float)(c * pi);
    }
    jb->row_loss[t] = w * ce;
}

static void sp_tr_ce_thread(void *ctx, int ith, int nth) {
    const sp_tr_ce_job *jb = ctx;
    int64_t lo, hi;
    sp_split(jb->n, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) sp_tr_ce_row(jb, (int)t);
}

/* Whether row t takes part: weight != 0 and some valid target mass. */
static bool sp_tr_ce_active(const sp_tr_ce_job *jb, int t) {
    if (jb->w && jb->w[t] == 0.0f) return false;
    double psum = 0.0;
    for (int i = 0; i < jb->k; i++) {
        const int32_t id = jb->ids[(size_t)t * jb->k + i];
        if (id >= 0 && id < jb->V) psum += jb->probs[(size_t)t * jb->k + i];
    }
    return psum > 0.0;
}

float sp_tr_loss(sp_tr_loss_kind kind, sp_pool *pool, float *dlogits, const float *logits, int n, int V,
                 const int32_t *ids, const float *probs, int k, const float *w, float denom, float *acc) {
    sp_tr_ce_job jb = { kind, dlogits, logits, probs, w, ids, n, V, k, denom, NULL, NULL };
    int active = 0;
    for (int t = 0; t < n; t++) active += sp_tr_ce_active(&jb, t);
    if (!(jb.denom > 0.0f)) jb.denom = active > 0 ? (float)active : 1.0f;
    jb.row_loss = sp_xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    jb.row_hit = sp_xmalloc((size_t)(n > 0 ? n : 1));
    if (pool && sp_pool_size(pool) > 1) sp_pool_run(pool, sp_tr_ce_thread, &jb);
    else sp_tr_ce_thread(&jb, 0, 1);
    /* summed in row order: the same loss for any thread count */
    double loss = 0.0;
    int hits = 0;
    for (int t = 0; t < n; t++) {
        if (jb.row_hit[t] < 0) continue;
        loss += jb.row_loss[t];
        hits += jb.row_hit[t];
    }
    if (acc) *acc = active > 0 ? (float)hits / (float)active : 0.0f;
    free(jb.row_loss);
    free(jb.row_hit);
    return (float)(loss / jb.denom);
}

float sp_tr_softce(sp_pool *pool, float *dlogits, const float *logits, int n, int V,
                   const int32_t *ids, const float *probs, int k, const float *w, float denom,
                   float *acc) {
    return sp_tr_loss(SP_TR_LOSS_CE, pool, dlogits, logits, n, V, ids, probs, k, w, denom, acc);
}
