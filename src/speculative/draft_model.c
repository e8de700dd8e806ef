/* Model drafters: a second model ("draft") or the target's own layers
 * ("self").  This file holds what both kinds share (see
 * draft_model_internal.h): the drafter, the draft core — the draft model's
 * cache and history, one forward step, the greedy or sampled pick, the
 * drafting loop — and the seam operations, which open a draft of the kind
 * the vocabularies call for and forward the per-request operations to it.
 * The kinds: draft_same.c (same vocabulary, also self) and draft_cross.c
 * (different vocabularies, drafting on text).
 */
#include "speculative/draft_model_internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------
 * The draft core
 * ------------------------------------------------------------------------ */

void sp_dm_ints_push(int32_t **a, int *n, int *cap, const int32_t *t, int k) {
    if (k <= 0) return;
    SP_VEC_GROW(*a, *cap, *n + k);
    memcpy(*a + *n, t, (size_t)k * sizeof(int32_t));
    *n += k;
}

void sp_dm_core_init(dm_draft *g, dm_drafter *dm, const dm_kind *kind) {
    g->dm = dm;
    g->kind = kind;
    int ctx = dm->o.n_ctx > 0 ? dm->o.n_ctx : 4096;
    g->kv = sp_kv_create(dm->model, ctx);
    g->ws = sp_workspace_create(dm->model, 64, dm->pool);
    if (dm->skip) sp_workspace_skip_layers(g->ws, dm->model, dm->skip);
    g->logits = sp_alloc_aligned((size_t)dm->model->hp.n_vocab * sizeof(float));
}

void sp_dm_core_fini(dm_draft *g) {
    sp_sampler_free(g->smp);
    sp_free_aligned(g->q);
    sp_kv_free(g->kv);
    sp_workspace_free(g->ws);
    sp_free_aligned(g->logits);
    free(g->hist);
}

void sp_dm_reset(dm_draft *g) {
    sp_kv_trim(g->kv, 0);
    g->n_hist = g->n_cached = 0;
}

int sp_dm_prefill_cache(dm_draft *g, sp_err *err) {
    assert(g->kv->n == g->n_cached);
    const int m = g->n_hist - 1;
    if (m > g->kv->n_ctx - 1 || m <= g->n_cached) return 0;
    if (sp_model_forward(g->dm->model, g->kv, g->ws, g->hist + g->n_cached, m - g->n_cached, SP_LOGITS_NONE,
                         NULL, err))
        return -1;
    g->n_cached = m;
    return 0;
}

/* Brings the cache up to the whole history and leaves the logits after it
 * (the history is never empty when this is called).  1 when the cache is
 * full (no more drafting). */
static int run_unfed(dm_draft *g, sp_err *err) {
    if (g->n_cached == g->n_hist) {
        /* all cached: recompute the last token's logits */
        sp_kv_trim(g->kv, g->n_hist - 1);
        g->n_cached = g->n_hist - 1;
    }
    int n = g->n_hist - g->n_cached;
    if (g->kv->n + n > g->kv->n_ctx) return 1;
    if (sp_model_forward(g->dm->model, g->kv, g->ws, g->hist + g->n_cached, n, SP_LOGITS_LAST,
                         g->logits, err))
        return -1;
    g->n_cached = g->n_hist;
    return 0;
}

/* The greedy pick: the argmax of g->logits; *top_p its probability, only
 * computed when min_prob asks for it (a full softmax pass). */
static int32_t pick_greedy(dm_draft *g, float *top_p) {
    const int V = g->dm->model->hp.n_vocab;
    int32_t best = 0;
    for (int j = 1; j < V; j++)
        if (g->logits[j] > g->logits[best]) best = j;
    if (top_p && g->dm->o.min_prob > 0) {
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)(g->logits[j] - g->logits[best]));
        *top_p = (float)(1.0 / sum);
    }
    return best;
}

/* The sampled pick of draft i: the request's sampler on g->logits gives
 * the distribution, stored densely as q[i] (V) for speculative sampling. */
static int32_t pick_sampled(dm_draft *g, int i, float *top_p) {
    const int V = g->dm->model->hp.n_vocab;
    return sp_draft_sample(g->smp, g->logits, NULL, g->q + (size_t)i * V, V, 0xD1CEull, g->pos_key++, top_p);
}

int sp_dm_draft_tokens(dm_draft *g, int max_n, sp_err *err) {
    g->n_out = 0;
    int rc = run_unfed(g, err);
    if (rc) return rc < 0 ? -1 : 0;
    for (int i = 0; i < max_n; i++) {
        float top = 1.0f;
        int32_t t = g->smp ? pick_sampled(g, i, &top) : pick_greedy(g, &top);
        if (g->dm->o.min_prob > 0 && i > 0 && top < g->dm->o.min_prob) break;
        g->out[g->n_out++] = t;
        if (i + 1 == max_n || g->kv->n + 1 > g->kv->n_ctx) break;
        if (sp_model_forward(g->dm->model, g->kv, g->ws, &t, 1, SP_LOGITS_LAST, g->logits, err)) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Seam operations: open picks the kind, the rest forward to it
 * ------------------------------------------------------------------------ */

static sp_draft *dm_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    dm_drafter *dm = d->impl;
    /* self has no tokenizer of its own: it shares the target's vocabulary */
    const bool cross = dm->tok && !sp_tokenizer_same_vocab(dm->tok, t->tok);
    if (dm->tok && !t->tok) {
        sp_err_set(err, "drafter '%s' needs the target's tokenizer", d->name);
        return NULL;
    }
    dm_draft *g = cross ? sp_dm_cross_open(dm, t, err) : sp_dm_same_open(dm, t, err);
    if (!g) return NULL;
    sp_draft *s = sp_xcalloc(1, sizeof *s);
    s->drafter = d;
    s->impl = g;
    return s;
}

static int dm_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    (void)taps;
    dm_draft *g = s->impl;
    return g->kind->prefill(g, prompt, n, err);
}

static int dm_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                      sp_err *err) {
    dm_draft *g = s->impl;
    return g->kind->propose(g, feed, n_feed, max_n, out, err);
}

static void dm_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path,
                      const sp_taps *v) {
    (void)v; (void)path;         /* chains only: accepted drafts are the first n_accepted */
    dm_draft *g = s->impl;
    g->kind->commit(g, n_drafted, n_accepted);
}

/* State: the history and the draft cache's rows of its first n_cached
 * tokens (same vocabulary only: a cross-vocabulary draft's history is
 * text re-tokenized as it goes, not worth keeping). */
static int dm_checkpoint(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err) {
    dm_draft *g = s->impl;
    if (!g->kind->resume)
        return sp_err_set(err, "drafter '%s': checkpoints of a cross-vocabulary draft are not supported",
                          s->drafter->name);
    const sp_kv *kv = g->kv;
    const size_t row = (size_t)kv->kv_dim * sizeof(sp_f16), h = sp_ckpt_header(s->drafter, NULL, 0);
    const int32_t hdr[2] = { g->n_hist, g->n_cached };
    *len = h + sizeof hdr + (size_t)g->n_hist * sizeof(int32_t) + 2 * (size_t)kv->n_layer * g->n_cached * row;
    uint8_t *p = *buf = sp_xmalloc(*len);
    p += sp_ckpt_header(s->drafter, p, h);
    memcpy(p, hdr, sizeof hdr); p += sizeof hdr;
    if (g->n_hist) memcpy(p, g->hist, (size_t)g->n_hist * sizeof(int32_t));
    p += (size_t)g->n_hist * sizeof(int32_t);
    for (int il = 0; il < kv->n_layer; il++) {
        const size_t at = (size_t)il * kv->n_ctx * kv->kv_dim, n = (size_t)g->n_cached * row;
        memcpy(p, kv->k + at, n); p += n;
        memcpy(p, kv->v + at, n); p += n;
    }
    return 0;
}

static int dm_restore(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err) {
    dm_draft *g = s->impl;
    const long off = sp_ckpt_check(s->drafter, buf, len, err);
    if (off < 0) return -1;
    if (!g->kind->resume)
        return sp_err_set(err, "drafter '%s': checkpoints of a cross-vocabulary draft are not supported",
                          s->drafter->name);
    sp_kv *kv = g->kv;
    int32_t hdr[2];
    const size_t row = (size_t)kv->kv_dim * sizeof(sp_f16);
    if (len - (size_t)off < sizeof hdr) return sp_err_set(err, "draft checkpoint: truncated");
    memcpy(hdr, buf + off, sizeof hdr);
    if (hdr[0] < 0 || hdr[0] > (1 << 24) || hdr[1] < 0 || hdr[1] > hdr[0] || hdr[1] > kv->n_ctx)
        return sp_err_set(err, "draft checkpoint: bad header");
    const size_t need = sizeof hdr + (size_t)hdr[0] * sizeof(int32_t) + 2 * (size_t)kv->n_layer * hdr[1] * row;
    if (len - (size_t)off != need)
        return sp_err_set(err, "draft checkpoint: %zu bytes, expected %zu", len - (size_t)off, need);
    const uint8_t *p = buf + off + sizeof hdr;
    const int V = g->dm->model->hp.n_vocab;
    for (int i = 0; i < hdr[0]; i++) {
        int32_t t;
        memcpy(&t, p + (size_t)i * sizeof t, sizeof t);
        if (t < 0 || t >= V) return sp_err_set(err, "draft checkpoint: token %d outside the vocabulary", t);
    }
    sp_dm_reset(g);
    sp_dm_ints_push(&g->hist, &g->n_hist, &g->cap_hist, (const int32_t *)(const void *)p, hdr[0]);
    p += (size_t)hdr[0] * sizeof(int32_t);
    for (int il = 0; il < kv->n_layer; il++) {
        const size_t at = (size_t)il * kv->n_ctx * kv->kv_dim, n = (size_t)hdr[1] * row;
        memcpy(kv->k + at, p, n); p += n;
        memcpy(kv->v + at, p, n); p += n;
    }
    kv->n = g->n_cached = hdr[1];
    return 0;
}

static int dm_resume(sp_draft *s, const int32_t *prompt, int n, int n_done, const sp_taps *taps, sp_err *err) {
    (void)taps; (void)n_done;    /* the rows kept are those whose tokens match, whatever the boundary */
    dm_draft *g = s->impl;
    return g->kind->resume(g, prompt, n, err);
}

static void dm_close(sp_draft *s) {
    dm_draft *g = s->impl;
    g->kind->close(g);
    free(s);
}

static void dm_free(sp_drafter *d) {
    dm_drafter *dm = d->impl;
    if (dm->owns_model) sp_model_free(dm->model);
    sp_tokenizer_free(dm->tok);
    free(dm->skip);
    free(dm);
    free(d);
}

static const sp_drafter_ops dm_ops = {
    .open = dm_open, .prefill = dm_prefill, .propose = dm_propose, .commit = dm_commit,
    .checkpoint = dm_checkpoint, .restore = dm_restore, .close = dm_close, .free = dm_free,
    .resume = dm_resume,
};

/* ---------------------------------------------------------------------------
 * Creation
 * ------------------------------------------------------------------------ */

static sp_drafter *dm_new(dm_drafter *dm, const char *name) {
    sp_drafter *d = sp_drafter_alloc();
    d->ops = &dm_ops;
    d->impl = dm;
    d->cheap = false;
    d->keeps_state = true;       /* (a cross-vocabulary draft's checkpoint fails: then none is kept) */
    d->needs = (dm->tok ? SP_CAP_TOKENIZER : 0) | (dm->o.sample ? SP_CAP_SAMPLING : 0);
    snprintf(d->name, sizeof d->name, "%s", name);
    /* the draft's weights by their fingerprint (a name can be shared) */
    snprintf(d->ns, sizeof d->ns, "%s-v2:%s%s", name, dm->model->fingerprint, dm->o.sample ? ":sample" : "");
    return d;
}

sp_drafter *sp_draft_model_create(const char *path, const sp_draft_model_opts *o, sp_pool *pool,
                                  sp_err *err) {
    dm_drafter *dm = sp_xcalloc(1, sizeof *dm);
    if (o) dm->o = *o;
    dm->pool = pool;
    dm->owns_model = true;
    const sp_model_load_opts lo = dm->o.load ? *dm->o.load : sp_model_load_default_opts();
    dm->o.load = NULL;   /* borrowed only for this call */
    if (!(dm->model = sp_model_load_with(path, &lo, err))) { free(dm); return NULL; }
    if (!(dm->tok = sp_tokenizer_load(dm->model->gguf, err))) {
        sp_err_prefix(err, "draft model %s", path);
        sp_model_free(dm->model);
        free(dm);
        return NULL;
    }
    return dm_new(dm, "draft");
}

sp_drafter *sp_self_create(const sp_model *target, const uint8_t *skip, const sp_draft_model_opts *o,
                           sp_pool *pool, sp_err *err) {
    int used = 0;
    for (int il = 0; il < target->hp.n_layer; il++) used += !skip[il];
    if (used == 0 || used == target->hp.n_layer) {
        sp_err_set(err, "self: the draft must use some but not all of the %d layers (uses %d)",
                   target->hp.n_layer, used);
        return NULL;
    }
    dm_drafter *dm = sp_xcalloc(1, sizeof *dm);
    if (o) dm->o = *o;
    dm->pool = pool;
    dm->model = (sp_model *)target;   /* borrowed: only read */
    dm->skip = sp_xmalloc((size_t)target->hp.n_layer);
    memcpy(dm->skip, skip, (size_t)target->hp.n_layer);
    sp_drafter *d = dm_new(dm, "self");
    /* the namespace names the layers (a hash of the kept set: a list of
     * them could outgrow the namespace) */
    uint64_t h = 1469598103934665603ull;
    for (int il = 0; il < target->hp.n_layer; il++) h = (h ^ (uint64_t)(skip[il] ? 0 : il + 1)) * 1099511628211ull;
    const size_t n = strlen(d->ns);
    snprintf(d->ns + n, sizeof d->ns - n, ":layers-%016llx", (unsigned long long)h);
    return d;
}
