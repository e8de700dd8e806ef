/* Model drafters: a second model ("draft") or the target's own layers
 * ("self").
 *
 * Same vocabulary.  The draft cache holds every token of the history
 * except those in `unfed` (known tokens not yet run through the draft
 * model).  propose(feed) runs unfed + feed in one pass, then drafts one
 * token per pass; commit(n, k) trims the cache back to the history plus
 * the accepted drafts, so rejected drafts vanish exactly (an all-accepted
 * round's last draft was never run: it becomes unfed).
 *
 * Different vocabularies (universal assisted generation).  The draft works
 * on text: the target history is kept as text (the target's pieces); the
 * draft's tokens are that text re-tokenized with the draft tokenizer,
 * re-tokenizing only a tail (from a few tokens back: earlier tokens are
 * stable across word boundaries); the draft cache is trimmed to the common
 * prefix with what it holds.  The draft's greedy continuation becomes text,
 * which is tokenized for the target together with the text of the last
 * few target tokens: the proposal is what follows them, when they come out
 * as the very same target tokens (else no proposal this round).  The last
 * proposal token is dropped: the draft's text may end inside a word.
 * Drafts are only proposals, so none of this affects the output; it only
 * decides how many are accepted.
 */
#include "speculative/speculative.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DM_TAIL 8                /* draft tokens re-tokenized from (cross-vocabulary) */
#define DM_ANCHOR 3              /* target tokens the draft text is re-tokenized after */
#define DM_EXTRA 3               /* extra draft tokens when drafting on text */

typedef struct dm_drafter {
    sp_model *model;             /* the draft model; owned unless self */
    bool owns_model;
    uint8_t *skip;               /* self: layers the draft skips (owned) */
    sp_tokenizer *tok;           /* the draft's tokenizer (owned; NULL for self) */
    sp_pool *pool;               /* borrowed */
    sp_draft_model_opts o;
} dm_drafter;

typedef struct dm_draft {
    dm_drafter *dm;
    const sp_tokenizer *ttok;    /* the target's tokenizer (cross-vocabulary), borrowed */
    bool cross;
    sp_sampler *smp;             /* sample mode: the request's sampling on draft logits */
    sp_kv *kv;
    sp_workspace *ws;
    float *logits;               /* (draft n_vocab) */
    int32_t *hist;               /* draft-vocabulary tokens: the cache's contents, then unfed */
    int n_hist, cap_hist;
    int n_cached;                /* hist[0..n_cached) are in the cache */
    int32_t out[SP_MAX_DRAFT + DM_EXTRA + 1];
    int n_out;
    float *q;                    /* (SP_MAX_DRAFT, n_vocab) sample mode */
    /* cross-vocabulary */
    char *text;                  /* the target history as text */
    size_t n_text, cap_text;
    int32_t *thist;              /* the target history as target tokens */
    int n_thist, cap_thist;
    size_t *dstart;              /* text offset where each draft token (hist) starts */
    int cap_dstart;
    int n_dsync;                 /* hist[0..n_dsync) came from the text (dstart valid); the
                                  * drafted tokens after them have no offsets */
    uint64_t pos_key;            /* sample mode: draw counter */
} dm_draft;

/* ---------------------------------------------------------------------------
 * Small buffers
 * ------------------------------------------------------------------------ */

static void ints_push(int32_t **a, int *n, int *cap, const int32_t *t, int k) {
    SP_VEC_GROW(*a, *cap, *n + k);
    memcpy(*a + *n, t, (size_t)k * sizeof(int32_t));
    *n += k;
}

static void text_push(dm_draft *g, const char *s, size_t n) {
    SP_VEC_GROW(g->text, g->cap_text, g->n_text + n + 1);
    memcpy(g->text + g->n_text, s, n);
    g->n_text += n;
    g->text[g->n_text] = 0;
}

/* Appends target tokens to the target history (ids and text). */
static void target_push(dm_draft *g, const int32_t *t, int n) {
    ints_push(&g->thist, &g->n_thist, &g->cap_thist, t, n);
    char buf[1024];
    for (int i = 0; i < n; i++) {
        size_t len = sp_token_piece(g->ttok, t[i], true, buf, sizeof buf);
        text_push(g, buf, len < sizeof buf ? len : sizeof buf);
    }
}

/* ---------------------------------------------------------------------------
 * Running the draft model
 * ------------------------------------------------------------------------ */

/* Brings the cache up to the whole history and leaves the logits after it
 * (the history is never empty when this is called). */
static int run_unfed(dm_draft *g, sp_err *err) {
    if (g->n_cached == g->n_hist) {
        /* all cached: recompute the last token's logits */
        sp_kv_trim(g->kv, g->n_hist - 1);
        g->n_cached = g->n_hist - 1;
    }
    int n = g->n_hist - g->n_cached;
    if (g->kv->n + n > g->kv->n_ctx) return 1; /* full: no more drafting */
    if (sp_model_forward(g->dm->model, g->kv, g->ws, g->hist + g->n_cached, n, SP_LOGITS_LAST,
                         g->logits, err))
        return -1;
    g->n_cached = g->n_hist;
    return 0;
}

/* The draft's next token from g->logits: greedy, or sampled with q. */
static int32_t pick(dm_draft *g, int i, float *top_p) {
    const int V = g->dm->model->hp.n_vocab;
    if (!g->smp) {
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
    int nc;
    const sp_cand *c = sp_sampler_dist(g->smp, g->logits, &nc);
    float *q = g->q + (size_t)i * V;
    memset(q, 0, (size_t)V * sizeof(float));
    for (int j = 0; j < nc; j++) q[c[j].id] = c[j].p;
    if (top_p) *top_p = c[0].p;
    const uint64_t seed = sp_sampler_params_of(g->smp)->seed;
    return sp_cand_pick(c, nc, sp_rng_uniform(seed ^ 0xD1CEull, g->pos_key++, 3));
}

/* Drafts up to max_n tokens after the history into g->out. */
static int draft_tokens(dm_draft *g, int max_n, sp_err *err) {
    g->n_out = 0;
    int rc = run_unfed(g, err);
    if (rc) return rc < 0 ? -1 : 0;
    for (int i = 0; i < max_n; i++) {
        float top = 1.0f;
        int32_t t = pick(g, i, &top);
        if (g->dm->o.min_prob > 0 && i > 0 && top < g->dm->o.min_prob) break;
        g->out[g->n_out++] = t;
        if (i + 1 == max_n || g->kv->n + 1 > g->kv->n_ctx) break;
        if (sp_model_forward(g->dm->model, g->kv, g->ws, &t, 1, SP_LOGITS_LAST, g->logits, err)) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Cross-vocabulary alignment
 * ------------------------------------------------------------------------ */

/* Re-tokenizes the tail of the target text for the draft and trims the
 * draft cache to the prefix it still shares with the new tokens. */
static int sync_draft_tokens(dm_draft *g, sp_err *err) {
    /* re-tokenize from DM_TAIL tokens before the end of what came from the
     * text: the drafted tokens after it (as many as a draft ran, up to
     * SP_MAX_DRAFT + DM_EXTRA) have no text offset */
    const int synced = g->n_hist < g->n_dsync ? g->n_hist : g->n_dsync;
    int keep = synced > DM_TAIL ? synced - DM_TAIL : 0;
    size_t from = keep ? g->dstart[keep] : 0;
    sp_tokens t = { 0 };
    const bool bos = keep == 0 && sp_tokenizer_add_bos(g->dm->tok);
    if (sp_tokenize(g->dm->tok, g->text + from, g->n_text - from, bos, false, &t, err)) return -1;
    /* common prefix with what the cache holds */
    int same = keep;
    while (same - keep < t.n && same < g->n_cached && g->hist[same] == t.ids[same - keep]) same++;
    if (same < g->n_cached) {
        sp_kv_trim(g->kv, same);
        g->n_cached = same;
    }
    g->n_hist = keep;
    ints_push(&g->hist, &g->n_hist, &g->cap_hist, t.ids, t.n);
    SP_VEC_GROW(g->dstart, g->cap_dstart, g->n_hist + 1);
    /* text offsets of the new tokens, from their pieces */
    size_t off = from;
    char buf[1024];
    for (int i = keep; i < g->n_hist; i++) {
        g->dstart[i] = off;
        off += sp_token_piece(g->dm->tok, g->hist[i], true, buf, sizeof buf);
    }
    g->n_dsync = g->n_hist;
    sp_tokens_free(&t);
    return 0;
}

/* Target tokens that continue the history with the draft's text. */
static int target_proposal(dm_draft *g, int max_n, int32_t *out, sp_err *err) {
    char draft_text[4096];
    size_t n = 0;
    for (int i = 0; i < g->n_out && n < sizeof draft_text; i++)
        n += sp_token_piece(g->dm->tok, g->out[i], false, draft_text + n, sizeof draft_text - n);
    if (n > sizeof draft_text) n = sizeof draft_text;
    return sp_xvocab_continue(g->ttok, g->thist, g->n_thist, draft_text, n, max_n, out, err);
}

int sp_xvocab_continue(const sp_tokenizer *ttok, const int32_t *thist, int n_thist, const char *text,
                       size_t n_text, int max_n, int32_t *out, sp_err *err) {
    for (int a = DM_ANCHOR < n_thist ? DM_ANCHOR : n_thist; a >= 1; a--) {
        char buf[8192];
        size_t len = 0;
        for (int i = n_thist - a; i < n_thist && len < sizeof buf; i++)
            len += sp_token_piece(ttok, thist[i], true, buf + len, sizeof buf - len);
        if (len + n_text > sizeof buf) continue;
        memcpy(buf + len, text, n_text);
        sp_tokens t = { 0 };
        if (sp_tokenize(ttok, buf, len + n_text, false, true, &t, err)) return -1;
        const int got = t.n;
        int m = 0;
        if (got > a && memcmp(t.ids, thist + n_thist - a, (size_t)a * sizeof(int32_t)) == 0) {
            m = got - a - 1;            /* drop the possibly cut last token */
            if (m > max_n) m = max_n;
            if (m > 0) memcpy(out, t.ids + a, (size_t)m * sizeof(int32_t));
            sp_tokens_free(&t);
            return m > 0 ? m : 0;
        }
        sp_tokens_free(&t);
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Seam operations
 * ------------------------------------------------------------------------ */

static sp_draft *dm_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    dm_drafter *dm = d->impl;
    dm_draft *g = sp_xcalloc(1, sizeof *g);
    g->dm = dm;
    g->cross = dm->tok && !sp_tokenizer_same_vocab(dm->tok, t->tok);
    if (dm->tok && !t->tok) {
        free(g);
        sp_err_set(err, "drafter '%s' needs the target's tokenizer", d->name);
        return NULL;
    }
    if (!g->cross && dm->model->hp.n_vocab != t->model->hp.n_vocab && dm->owns_model) {
        free(g);
        sp_err_set(err, "draft model vocabulary (%d) differs from the target's (%d)",
                   dm->model->hp.n_vocab, t->model->hp.n_vocab);
        return NULL;
    }
    g->ttok = t->tok;
    if (dm->o.sample && !g->cross && t->sampling && t->sampling->temperature > 0) {
        g->smp = sp_sampler_create(t->sampling, dm->model->hp.n_vocab);
        g->q = sp_alloc_aligned((size_t)SP_MAX_DRAFT * dm->model->hp.n_vocab * sizeof(float));
    }
    int ctx = dm->o.n_ctx > 0 ? dm->o.n_ctx : 4096;
    g->kv = sp_kv_create(dm->model, ctx);
    g->ws = sp_workspace_create(dm->model, 64, dm->pool);
    if (dm->skip) sp_workspace_skip_layers(g->ws, dm->model, dm->skip);
    g->logits = sp_alloc_aligned((size_t)dm->model->hp.n_vocab * sizeof(float));
    sp_draft *s = sp_xcalloc(1, sizeof *s);
    s->drafter = d;
    s->impl = g;
    return s;
}

static int dm_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    (void)taps;
    dm_draft *g = s->impl;
    sp_kv_trim(g->kv, 0);
    g->n_hist = g->n_cached = g->n_dsync = 0;
    g->n_text = g->n_thist = 0;
    if (g->cross) {
        target_push(g, prompt, n);
        if (sync_draft_tokens(g, err)) return -1;
    } else {
        ints_push(&g->hist, &g->n_hist, &g->cap_hist, prompt, n);
    }
    /* prefill the draft cache now (all but the last token: propose runs it) */
    int m = g->n_hist - 1;
    if (m > g->kv->n_ctx - 1) m = 0;
    if (m > 0) {
        if (sp_model_forward(g->dm->model, g->kv, g->ws, g->hist, m, SP_LOGITS_NONE, NULL, err)) return -1;
        g->n_cached = m;
    }
    return 0;
}

static int dm_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                      sp_err *err) {
    dm_draft *g = s->impl;
    *out = (sp_proposal){ 0 };
    g->n_out = 0;
    if (g->cross) {
        target_push(g, feed, n_feed);
        if (max_n <= 0) return 0;
        if (sync_draft_tokens(g, err)) return -1;
        if (draft_tokens(g, max_n + DM_EXTRA, err)) return -1;
        int32_t prop[SP_MAX_DRAFT + DM_EXTRA + 1];
        int m = g->n_out ? target_proposal(g, max_n, prop, err) : 0;
        if (m < 0) return -1;
        /* the draft cache keeps the drafted tokens it ran: the next sync
         * trims whatever the target did not confirm */
        const int ran = g->kv->n - g->n_hist;
        ints_push(&g->hist, &g->n_hist, &g->cap_hist, g->out, ran);
        g->n_cached = g->n_hist;
        memcpy(g->out, prop, (size_t)m * sizeof(int32_t));
        g->n_out = m;
        *out = (sp_proposal){ .n = m, .tokens = g->out };
        return 0;
    }
    ints_push(&g->hist, &g->n_hist, &g->cap_hist, feed, n_feed);
    if (max_n <= 0) return 0;
    if (draft_tokens(g, max_n, err)) return -1;
    *out = (sp_proposal){ .n = g->n_out, .tokens = g->out, .q = g->smp ? g->q : NULL };
    return 0;
}

static void dm_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path,
                      const sp_taps *v) {
    (void)v; (void)path;
    dm_draft *g = s->impl;
    if (g->cross) {
        /* chains only (this drafter never proposes trees) */
        target_push(g, g->out, n_accepted);
        g->n_out = 0;
        return;
    }
    if (n_drafted <= 0) return;
    /* the cache holds the history and the drafts that were run (all but
     * the last, unless drafting stopped early): keep the accepted ones; an
     * accepted draft that was never run stays in hist as unfed */
    const int ran = g->kv->n - g->n_hist;
    const int kept = n_accepted < ran ? n_accepted : ran;
    sp_kv_trim(g->kv, g->n_hist + kept);
    ints_push(&g->hist, &g->n_hist, &g->cap_hist, g->out, n_accepted);
    g->n_cached = g->kv->n;
    g->n_out = 0;
}

static int dm_checkpoint(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err) {
    (void)buf; (void)len;
    return sp_err_set(err, "drafter '%s': checkpoints of a model draft's cache are not supported yet",
                      s->drafter->name);
}

static int dm_restore(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err) {
    (void)buf; (void)len;
    return sp_err_set(err, "drafter '%s': checkpoints of a model draft's cache are not supported yet",
                      s->drafter->name);
}

static void dm_close(sp_draft *s) {
    dm_draft *g = s->impl;
    sp_sampler_free(g->smp);
    sp_free_aligned(g->q);
    sp_kv_free(g->kv);
    sp_workspace_free(g->ws);
    sp_free_aligned(g->logits);
    free(g->hist); free(g->text); free(g->thist); free(g->dstart);
    free(g);
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
};

static sp_drafter *dm_new(dm_drafter *dm, const char *name) {
    sp_drafter *d = sp_xcalloc(1, sizeof *d);
    d->ops = &dm_ops;
    d->impl = dm;
    d->cheap = false;
    d->default_draft_max = 4;
    d->needs = (dm->tok ? SP_CAP_TOKENIZER : 0) | (dm->o.sample ? SP_CAP_SAMPLING : 0);
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->ns, sizeof d->ns, "%s-v1:%.48s%s", name, dm->model->name, dm->o.sample ? ":sample" : "");
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
    /* the namespace names the layers */
    size_t n = strlen(d->ns);
    for (int il = 0; il < target->hp.n_layer && n + 4 < sizeof d->ns; il++)
        if (!skip[il]) n += (size_t)snprintf(d->ns + n, sizeof d->ns - n, ":%d", il);
    return d;
}
