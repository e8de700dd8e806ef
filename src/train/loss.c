/*
 * Softmax cross-entropy against soft (top-k, renormalised) targets.
 */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct sp_tr_ce_job {
    float *dlogits;
    const float *logits, *probs, *w;
    const int32_t *ids;
    int n, V, k;
    float denom;
    double *row_loss;       /* per row: w * CE */
    signed char *row_hit;   /* per row: argmax matched (1, 0), masked (-1) */
} sp_tr_ce_job;

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
    double ce = 0.0;
    for (int j = 0; j < V; j++) dl[j] *= sc;
    for (int i = 0; i < k; i++) {
        if (id[i] < 0 || id[i] >= V) continue;
        const double pi = p[i] / psum;
        ce -= pi * (l[id[i]] - z);
        dl[id[i]] -= (float)(c * pi);
    }
    jb->row_loss[t] = w * ce;
    jb->row_hit[t] = amax == id[best];
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

float sp_tr_softce(sp_pool *pool, float *dlogits, const float *logits, int n, int V,
                   const int32_t *ids, const float *probs, int k, const float *w, float denom,
                   float *acc) {
    sp_tr_ce_job jb = { dlogits, logits, probs, w, ids, n, V, k, denom, NULL, NULL };
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
