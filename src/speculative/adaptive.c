/* Verification cost curve and the adaptive draft length.
 *
 * Speculation pays when the tokens a round is expected to emit grow faster
 * than the cost of verifying the window.  The controller keeps, per draft
 * position j, a decayed estimate u_j of the probability that the token at
 * position j is accepted (for a chain that means all before it were too),
 * so a draft of n is expected to emit E(n) = 1 + u_0 + ... + u_(n-1) tokens
 * at cost t(n+1) + n c, where c is the measured time the drafter takes per
 * token asked for (a draft model's forwards; microseconds for lookup
 * drafters).  It picks the n that maximises E(n) / (t(n+1) + n c); n = 0
 * is a plain step, so a request never runs slower than plain decoding by
 * more than the cost of the rounds that taught it so.
 */
#include "speculative/speculative.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ----------------------------------------------------------------------------
 * Cost curve
 * ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Fills unmeasured entries by linear interpolation between measured ones,
 * and extrapolation from the last two beyond them. */
static void interpolate(sp_cost_curve *c, const bool *have) {
    const int N = SP_MAX_DRAFT + 1;
    int prev = -1;
    for (int k = 1; k <= N; k++) {
        if (!have[k]) continue;
        if (prev > 0)
            for (int j = prev + 1; j < k; j++)
                c->t[j] = c->t[prev] + (c->t[k] - c->t[prev]) * (double)(j - prev) / (double)(k - prev);
        prev = k;
    }
    int last = prev, before = -1;
    for (int k = last - 1; k >= 1; k--)
        if (have[k]) { before = k; break; }
    double slope = before > 0 ? (c->t[last] - c->t[before]) / (double)(last - before) : c->t[last];
    for (int j = last + 1; j <= N; j++) c->t[j] = c->t[last] + slope * (double)(j - last);
}

int sp_cost_measure(const sp_model *m, sp_workspace *ws, const int *ks, int n_ks, int reps, int ctx0,
                    sp_cost_curve *c, sp_err *err) {
    const int V = m->hp.n_vocab;
    int kmax = 1;
    for (int i = 0; i < n_ks; i++) {
        if (ks[i] < 1 || ks[i] > SP_MAX_DRAFT + 1) return sp_err_set(err, "cost: K=%d out of range", ks[i]);
        if (ks[i] > kmax) kmax = ks[i];
    }
    if (ctx0 < 1 || ctx0 > m->hp.n_ctx_train - kmax - 1)
        return sp_err_set(err, "cost: a context of %d tokens is out of range (1..%d for this model)", ctx0,
                          m->hp.n_ctx_train - kmax - 1);
    sp_kv *kv = sp_kv_create(m, ctx0 + kmax + 1);
    float *logits = sp_alloc_aligned((size_t)kmax * V * sizeof(float));
    int32_t *toks = sp_xmalloc((size_t)(ctx0 + kmax) * sizeof *toks);
    for (int i = 0; i < ctx0 + kmax; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    int rc = -1;
    double *samples = sp_xmalloc((size_t)(reps + 1) * sizeof(double));
    bool have[SP_MAX_DRAFT + 2] = { false };
    memset(c, 0, sizeof *c);
    if (sp_model_forward(m, kv, ws, toks, ctx0, SP_LOGITS_NONE, NULL, err)) goto done;
    /* warm up first: right after loading, the threads, caches and clock
     * are cold, and a curve measured then put t(1) 50% above a steady
     * one-row forward (a costlier-looking target makes drafting look
     * cheaper than it is) */
    for (int r = 0; r < 16; r++) {
        if (sp_model_forward(m, kv, ws, toks + ctx0, 1, SP_LOGITS_ALL, logits, err)) goto done;
        sp_kv_trim(kv, ctx0);
    }
    for (int i = 0; i < n_ks; i++) {
        const int K = ks[i];
        for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
            uint64_t t0 = sp_now_ns();
            if (sp_model_forward(m, kv, ws, toks + ctx0, K, SP_LOGITS_ALL, logits, err)) goto done;
            samples[r] = sp_ns_to_s(sp_now_ns() - t0);
            sp_kv_trim(kv, ctx0);
        }
        qsort(samples + 1, (size_t)reps, sizeof(double), cmp_double);
        c->t[K] = samples[1 + reps / 2];
        have[K] = true;
    }
    if (!have[1]) { sp_err_set(err, "cost: K=1 must be measured"); goto done; }
    interpolate(c, have);
    /* A wider window never costs less: noise must not make it look so. */
    for (int k = 2; k <= SP_MAX_DRAFT + 1; k++)
        if (c->t[k] < c->t[k - 1]) c->t[k] = c->t[k - 1];
    c->valid = true;
    rc = 0;
done:
    free(samples);
    free(toks);
    sp_free_aligned(logits);
    sp_kv_free(kv);
    return rc;
}

/* The cache file of (model, threads) in dir; false if the name does not
 * fit in cap (then there is no cache).  The running binary's stamp (size
 * and modification time of /proc/self/exe) is part of the name: it
 * invalidates curves measured with other kernels, and any rebuild changes
 * it, not only one that recompiles this file; the SIMD level in use is
 * part of it as well. */
static bool cost_cache_path(const sp_model *m, int threads, const char *dir, char *buf, size_t cap) {
    const char *base = strrchr(m->path, '/');
    base = base ? base + 1 : m->path;
    struct stat st;
    char stamp[64];
    if (stat("/proc/self/exe", &st) == 0)
        snprintf(stamp, sizeof stamp, "%llx-%llx", (unsigned long long)st.st_size,
                 (unsigned long long)st.st_mtime);
    else
        snprintf(stamp, sizeof stamp, "%s-%s", __DATE__, __TIME__);
    /* the kernel level too: SPECULA_SIMD=avx2 on an AVX-512 machine must not
     * reuse the AVX-512 curve (its t(1) is half the AVX2 one) */
    const int n = snprintf(buf, cap, "%s/%s-%llu-t%d-k%d-%s.txt", dir, base,
                           (unsigned long long)sp_gguf_file_size(m->gguf), threads, (int)sp_kernels_simd(), stamp);
    if (n < 0 || (size_t)n >= cap) return false;
    for (char *p = buf + strlen(dir) + 1; *p; p++)   /* the file name only: dir is the caller's */
        if (*p == ' ' || *p == ':') *p = '_';
    return true;
}

static bool cost_load(const char *path, sp_cost_curve *c) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    memset(c, 0, sizeof *c);
    int k, n = 0;
    double t;
    while (fscanf(f, "%d %lf", &k, &t) == 2)
        if (k >= 1 && k <= SP_MAX_DRAFT + 1 && t > 0) { c->t[k] = t; n++; }
    fclose(f);
    c->valid = n == SP_MAX_DRAFT + 1;
    return c->valid;
}

/* Best effort: a curve that cannot be saved is measured again next time. */
static void cost_save(const char *path, const sp_cost_curve *c) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int k = 1; k <= SP_MAX_DRAFT + 1; k++) fprintf(f, "%d %.9f\n", k, c->t[k]);
    fclose(f);
}

int sp_cost_get(const sp_model *m, sp_workspace *ws, int threads, const char *cache_dir, sp_cost_curve *c,
                sp_err *err) {
    char path[4096];
    const bool cached = cache_dir && cost_cache_path(m, threads, cache_dir, path, sizeof path);
    if (cached && cost_load(path, c)) return 0;
    static const int ks[] = { 1, 2, 3, 4, 6, 8, 12, 17 };
    if (sp_cost_measure(m, ws, ks, (int)(sizeof ks / sizeof *ks), 5, 32, c, err)) return -1;
    if (cached) cost_save(path, c);
    return 0;
}

/* ----------------------------------------------------------------------------
 * Controller
 * ------------------------------------------------------------------------- */

#define SP_ADAPT_DECAY 0.97        /* memory of ~30 proposals */
#define SP_ADAPT_PRIOR_HIT 1.0     /* optimistic prior u = 0.5 with weight 2 ... */
#define SP_ADAPT_PRIOR_TRIED 2.0   /* ... so a new request tries speculating */

void sp_adapt_init(sp_adapt *a, const sp_cost_curve *cost, int cap) {
    memset(a, 0, sizeof *a);
    a->cost = cost;
    a->cap = cap < 0 ? 0 : cap > SP_MAX_DRAFT ? SP_MAX_DRAFT : cap;
}

double sp_adapt_expected(const sp_adapt *a, int n) {
    double e = 1.0, prev = 1.0;
    for (int j = 0; j < n; j++) {
        double u = (a->hit[j] + SP_ADAPT_PRIOR_HIT) / (a->tried[j] + SP_ADAPT_PRIOR_TRIED);
        if (u > prev) u = prev;    /* a later position cannot beat an earlier one */
        e += u;
        prev = u;
    }
    return e;
}

/* t(K) for any K >= 1: the curve, then a straight line with the slope of
 * its last four points (a pass of many sequences may exceed the longest
 * window measured; beyond it the forward is compute-bound, so linear). */
static double cost_at(const sp_cost_curve *c, int k) {
    const int top = SP_MAX_DRAFT + 1;
    if (k <= top) return c->t[k < 1 ? 1 : k];
    const double slope = (c->t[top] - c->t[top - 4]) / 4.0;
    return c->t[top] + (k - top) * (slope > 0 ? slope : 0.0);
}

int sp_adapt_choose(const sp_adapt *a) { return sp_adapt_choose_in(a, 0, 0.0); }

/* Maximises (tokens + E(n)) / (t(rows + 1 + n) + n * c): the pass's
 * expected tokens per second when this sequence adds its pending token and
 * n drafts to the rows already in it (c: the drafter's seconds per token).
 * Alone (rows = 0) that is the sequence's own rate; in a full pass extra
 * rows cost nearly their full share, so drafts must be likelier to pay. */
int sp_adapt_choose_in(const sp_adapt *a, int rows, double tokens) {
    if (!a->cost || !a->cost->valid) return a->cap;
    const double c = a->draft_n > 0 ? a->draft_s / a->draft_n : 0.0;
    /* with other rows in the pass, a proposal's catch-up holds them all up:
     * it counts against drafting (alone, waiting pairs are caught up in one
     * batch later at a fraction of the cost, so it does not) */
    const double catchup = rows > 0 && a->absorb_n > 0 ? a->absorb_s / a->absorb_n : 0.0;
    if (rows < 0) rows = 0;
    if (tokens < 0) tokens = 0;
    int best = 0;
    double best_rate = (tokens + 1.0) / cost_at(a->cost, rows + 1);
    for (int n = 1; n <= a->cap; n++) {
        double rate = (tokens + sp_adapt_expected(a, n)) / (cost_at(a->cost, rows + n + 1) + n * c + catchup);
        if (rate > best_rate * 1.0001) { best = n; best_rate = rate; }
    }
    return best;
}

void sp_adapt_observe(sp_adapt *a, int n, int k) {
    for (int j = 0; j < SP_MAX_DRAFT; j++) {
        a->tried[j] *= SP_ADAPT_DECAY;
        a->hit[j] *= SP_ADAPT_DECAY;
    }
    for (int j = 0; j < n && j < SP_MAX_DRAFT; j++) {
        a->tried[j] += 1.0;
        if (j < k) a->hit[j] += 1.0;
    }
}

void sp_adapt_absorb_cost(sp_adapt *a, double seconds) {
    if (seconds < 0) return;
    a->absorb_s = a->absorb_s * SP_ADAPT_DECAY + seconds;
    a->absorb_n = a->absorb_n * SP_ADAPT_DECAY + 1.0;
}

void sp_adapt_draft_cost(sp_adapt *a, int n, double seconds) {
    if (n <= 0 || seconds < 0) return;
    a->draft_s = a->draft_s * SP_ADAPT_DECAY + seconds;
    a->draft_n = a->draft_n * SP_ADAPT_DECAY + n;
}
