/* Token sampling: penalties, truncation and one keyed draw. */
#include "sample/sample.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sp_sampler {
    sp_sampler_params p;
    sp_logit_bias *bias;     /* owned copy of p.bias */
    int n_vocab;
    float *work;             /* (n_vocab) transformed logits */
    sp_cand *cands;          /* (n_vocab) candidates */
    int32_t *counts;         /* (n_vocab) occurrences in the penalty window, zero between calls */
    int32_t *hist;           /* accepted tokens */
    int n_hist, cap_hist;
};

sp_sampler_params sp_sampler_defaults(void) {
    return (sp_sampler_params){ .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                                .repeat_penalty = 1.0f, .repeat_last_n = 64 };
}

int sp_sampler_validate(const sp_sampler_params *p, int n_vocab, sp_err *err) {
    if (!isfinite(p->temperature) || p->temperature < 0)
        return sp_err_set(err, "temperature must be a finite number >= 0 (got %g)",
                          (double)p->temperature);
    if (p->top_k < 0) return sp_err_set(err, "top_k must be >= 0 (got %d)", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return sp_err_set(err, "top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return sp_err_set(err, "min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0)
        return sp_err_set(err, "repeat_penalty must be > 0 (got %g)", (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return sp_err_set(err, "presence/frequency penalties must be finite");
    if (p->repeat_last_n < -1)
        return sp_err_set(err, "repeat_last_n must be >= -1 (got %d)", p->repeat_last_n);
    for (int i = 0; i < p->n_bias; i++) {
        if (p->bias[i].token < 0 || p->bias[i].token >= n_vocab)
            return sp_err_set(err, "logit_bias token %d out of range [0, %d)", p->bias[i].token,
                              n_vocab);
        if (isnan(p->bias[i].bias) || p->bias[i].bias == INFINITY)
            return sp_err_set(err, "logit_bias for token %d must be a number or -inf",
                              p->bias[i].token);
    }
    return 0;
}

sp_sampler *sp_sampler_create(const sp_sampler_params *p, int n_vocab) {
    sp_sampler *s = sp_xcalloc(1, sizeof *s);
    s->p = *p;
    s->n_vocab = n_vocab;
    if (p->n_bias > 0) {
        s->bias = sp_xmalloc((size_t)p->n_bias * sizeof *s->bias);
        memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof *s->bias);
    }
    s->p.bias = s->bias;
    s->work = sp_xmalloc((size_t)n_vocab * sizeof(float));
    s->cands = sp_xmalloc((size_t)n_vocab * sizeof(sp_cand));
    s->counts = sp_xcalloc((size_t)n_vocab, sizeof(int32_t));
    return s;
}

void sp_sampler_free(sp_sampler *s) {
    if (!s) return;
    free(s->bias); free(s->work); free(s->cands); free(s->counts); free(s->hist);
    free(s);
}

const sp_sampler_params *sp_sampler_params_of(const sp_sampler *s) { return &s->p; }
bool sp_sampler_is_greedy(const sp_sampler *s) { return s->p.temperature == 0.0f; }
void sp_sampler_reset(sp_sampler *s) { s->n_hist = 0; }

void sp_sampler_accept(sp_sampler *s, int32_t token) {
    SP_VEC_GROW(s->hist, s->cap_hist, s->n_hist + 1);
    s->hist[s->n_hist++] = token;
}

void sp_sampler_unaccept(sp_sampler *s, int n) {
    s->n_hist = n < s->n_hist ? s->n_hist - n : 0;
}

/* ----------------------------------------------------------------------------
 * Logit transforms
 * ------------------------------------------------------------------------- */

static bool has_penalties(const sp_sampler_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
           p->frequency_penalty != 0.0f;
}

/* Whether transform applies penalties to this history. */
static bool penalised(const sp_sampler *s) {
    return has_penalties(&s->p) && s->n_hist > 0 && s->p.repeat_last_n != 0;
}

/* work = logits + bias, then penalties over the accepted window. */
static void transform(sp_sampler *s, const float *logits) {
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof(float));
    for (int i = 0; i < s->p.n_bias; i++) s->work[s->bias[i].token] += s->bias[i].bias;
    if (!penalised(s)) return;
    int from = 0;
    if (s->p.repeat_last_n > 0 && s->n_hist > s->p.repeat_last_n) from = s->n_hist - s->p.repeat_last_n;
    for (int i = from; i < s->n_hist; i++) s->counts[s->hist[i]]++;
    for (int i = from; i < s->n_hist; i++) {
        const int32_t t = s->hist[i];
        const int c = s->counts[t];
        if (c == 0) continue; /* already penalised */
        float *l = &s->work[t];
        if (s->p.repeat_penalty != 1.0f) *l = *l > 0 ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
        *l -= (float)c * s->p.frequency_penalty + s->p.presence_penalty;
        s->counts[t] = 0;
    }
}

/* strict: the lowest id wins ties */
static int32_t argmax(const float *x, int n) { return sp_argmax(x, n); }

/* Candidate order: descending logit/probability, ties by ascending id. */
static int cand_cmp(const void *a, const void *b) {
    const sp_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool cand_before(const sp_cand *x, const sp_cand *y) {
    return x->p > y->p || (x->p == y->p && x->id < y->id);
}

/* Keeps the k best of cands[0..n) in cands[0..k), sorted, using a min-heap
 * of the best so far: O(n log k). */
static int top_k_select(sp_cand *c, int n, int k) {
    if (k >= n) {
        qsort(c, (size_t)n, sizeof *c, cand_cmp);
        return n;
    }
    /* heap in c[0..k): root is the worst of the kept */
    for (int i = k / 2 - 1; i >= 0; i--) {
        for (int j = i;;) {
            int w = j, l = 2 * j + 1, r = l + 1;
            if (l < k && cand_before(&c[w], &c[l])) w = l;
            if (r < k && cand_before(&c[w], &c[r])) w = r;
            if (w == j) break;
            sp_cand t = c[j]; c[j] = c[w]; c[w] = t; j = w;
        }
    }
    for (int i = k; i < n; i++) {
        if (!cand_before(&c[i], &c[0])) continue;
        c[0] = c[i];
        for (int j = 0;;) {
            int w = j, l = 2 * j + 1, r = l + 1;
            if (l < k && cand_before(&c[w], &c[l])) w = l;
            if (r < k && cand_before(&c[w], &c[r])) w = r;
            if (w == j) break;
            sp_cand t = c[j]; c[j] = c[w]; c[w] = t; j = w;
        }
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
    return k;
}

/* Turns logits stored in c[i].p into probabilities (max-subtracted, sum in
 * double). */
static void softmax_cands(sp_cand *c, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = c[i].p > max ? c[i].p : max;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf(c[i].p - max);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

static void renormalise(sp_cand *c, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += c[i].p;
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

const sp_cand *sp_sampler_dist(sp_sampler *s, const float *logits, int *n_cands) {
    if (s->p.temperature == 0.0f && s->p.n_bias == 0 && !penalised(s)) {
        /* greedy on the logits as they are: no copy (a verification asks
         * this of every row it checks) */
        s->cands[0] = (sp_cand){ argmax(logits, s->n_vocab), 1.0f };
        *n_cands = 1;
        return s->cands;
    }
    transform(s, logits);
    sp_cand *c = s->cands;
    const sp_sampler_params *p = &s->p;
    if (p->temperature == 0.0f) {
        c[0] = (sp_cand){ argmax(s->work, s->n_vocab), 1.0f };
        *n_cands = 1;
        return c;
    }
    /* Banned tokens (-inf) never become candidates. */
    int n = 0;
    const float inv_t = 1.0f / p->temperature;
    for (int i = 0; i < s->n_vocab; i++)
        if (s->work[i] != -INFINITY) c[n++] = (sp_cand){ i, s->work[i] * inv_t };
    if (n == 0) { /* everything banned: fall back to the unbiased argmax */
        c[0] = (sp_cand){ argmax(logits, s->n_vocab), 1.0f };
        *n_cands = 1;
        return c;
    }
    bool sorted = false;
    if (p->top_k > 0 && p->top_k < n) {
        n = top_k_select(c, n, p->top_k);
        sorted = true;
    }
    softmax_cands(c, n);
    if (p->top_p < 1.0f) {
        if (!sorted) {
            /* A token with p < (1 - top_p) / n cannot be in the nucleus: all
             * tokens at or below it weigh less than 1 - top_p, so the mass
             * above it already reaches top_p.  Dropping them first keeps the
             * sort small and the result exact. */
            const float floor_p = (1.0f - p->top_p) / (float)n;
            int m = 0;
            for (int i = 0; i < n; i++)
                if (c[i].p >= floor_p) c[m++] = c[i];
            n = m;
            qsort(c, (size_t)n, sizeof *c, cand_cmp);
            sorted = true;
        }
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= p->top_p) { keep = i + 1; break; }
        }
        n = keep;
        renormalise(c, n);
    }
    if (p->min_p > 0.0f) {
        float pmax = 0;
        for (int i = 0; i < n; i++) pmax = c[i].p > pmax ? c[i].p : pmax;
        const float thr = p->min_p * pmax;
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].p >= thr) c[m++] = c[i];
        n = m;
        renormalise(c, n);
    }
    *n_cands = n;
    return c;
}

int32_t sp_cand_pick(const sp_cand *c, int n, double u) {
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += c[i].p;
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id; /* u beyond the rounded total */
}

int32_t sp_sampler_sample(sp_sampler *s, const float *logits, uint64_t pos) {
    int n;
    const sp_cand *c = sp_sampler_dist(s, logits, &n);
    if (n == 1) return c[0].id;
    return sp_cand_pick(c, n, sp_rng_uniform(s->p.seed, pos, 0));
}
