/* Suffix-tree drafting ("suffix"): SuffixDecoding (Oliaro et al.,
 * NeurIPS 2025), written for this seam.
 *
 * Two structures answer every proposal (suffix_internal.h has the trie
 * and the proposal rule):
 *   - per request: a trie over the draft's history (prompt + feed tokens +
 *     accepted drafts; rejected drafts never enter it), extended by
 *     O(max_depth) per token;
 *   - engine-wide: a trie over the outputs of earlier requests, each
 *     preceded by the last global_prompt_tail tokens of its prompt (the
 *     whole prompt with global_prompts), owned by the drafter.  A
 *     request's output is added when its draft closes (so concurrent
 *     requests do not see each other's partial outputs), under a mutex
 *     that proposals take too; the oldest sequences are evicted while the
 *     trie holds more than global_tokens tokens or global_nodes nodes.
 * The candidate with the higher score (expected accepted tokens) wins; on
 * equal scores (typically two certain chains cut at max_n) the longer, more
 * specific match, then the request's own trie.
 *
 * Checkpoints hold the history and the prompt length ("suffix-v1:..."); a
 * restore rebuilds the request's trie from it.  The engine-wide trie is
 * not part of a request's state and is never checkpointed.
 */
#include "speculative/suffix_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct suffix_drafter {
    sp_suffix_opts o;
    pthread_mutex_t mu;          /* guards global */
    sp_sfx *global;              /* NULL when global_tokens == 0 */
} suffix_drafter;

typedef struct suffix_draft {
    sp_sfx *local;               /* one open sequence: the history */
    int n_prompt;
    sp_sfx_cand cand[2];         /* scratch: request's, engine-wide */
    int32_t out[SP_MAX_DRAFT], parent[SP_MAX_DRAFT];
    int n_out;
} suffix_draft;

sp_suffix_opts sp_suffix_defaults(void) {
    return (sp_suffix_opts){ .max_depth = 64, .factor = 1.0f, .min_prob = 0.1f, .tree_width = 1,
                             .global_tokens = 1 << 16, .global_nodes = 1 << 19,
                             .global_prompts = false, .global_prompt_tail = 8 };
}

/* ---- per-request state ---- */

static void local_reset(suffix_draft *g, int max_depth) {
    sp_sfx_free(g->local);
    g->local = sp_sfx_create(max_depth);
    sp_sfx_open_seq(g->local);
    g->n_prompt = 0;
    g->n_out = 0;
}

static const int32_t *history(const suffix_draft *g, int *n) {
    return sp_sfx_seq(g->local, 0, n);
}

/* Adds a finished request to the engine-wide trie and evicts the oldest
 * sequences until both budgets hold (the newest always stays). */
static void global_add(suffix_drafter *c, const int32_t *tok, int n) {
    if (n > c->o.global_tokens) {
        tok += n - c->o.global_tokens;
        n = (int)c->o.global_tokens;
    }
    if (n <= 0) return;
    pthread_mutex_lock(&c->mu);
    sp_sfx_open_seq(c->global);
    sp_sfx_append(c->global, tok, n);
    sp_sfx_close_seq(c->global);
    while (sp_sfx_n_seqs(c->global) > 1 && (sp_sfx_tokens(c->global) > c->o.global_tokens ||
                                            sp_sfx_nodes(c->global) > c->o.global_nodes))
        sp_sfx_evict_oldest(c->global);
    pthread_mutex_unlock(&c->mu);
}

/* ---- seam operations ---- */

static sp_draft *suffix_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    (void)t; (void)err;
    const suffix_drafter *c = d->impl;
    sp_draft *s = sp_xcalloc(1, sizeof *s);
    suffix_draft *g = sp_xcalloc(1, sizeof *g);
    local_reset(g, c->o.max_depth);
    s->drafter = d;
    s->impl = g;
    return s;
}

static int suffix_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    (void)taps; (void)err;
    const suffix_drafter *c = s->drafter->impl;
    suffix_draft *g = s->impl;
    local_reset(g, c->o.max_depth);
    sp_sfx_append(g->local, prompt, n);
    g->n_prompt = n;
    return 0;
}

/* The better of the request's and the engine-wide trie's candidates for
 * the context h[0..n). */
static const sp_sfx_cand *best_candidate(suffix_drafter *c, suffix_draft *g, const int32_t *h, int n,
                                         const sp_sfx_params *p) {
    sp_sfx_propose(g->local, h, n, p, &g->cand[0]);
    const sp_sfx_cand *best = &g->cand[0];
    if (c->global) {
        pthread_mutex_lock(&c->mu);
        sp_sfx_propose(c->global, h, n, p, &g->cand[1]);
        pthread_mutex_unlock(&c->mu);
        const sp_sfx_cand *o = &g->cand[1];
        if (o->score > best->score || (o->score == best->score && o->match_len > best->match_len))
            best = o;
    }
    return best;
}

/* The context is the history's last max_depth tokens (no match is longer)
 * followed by `ahead`, which the tries never see; out holds ahead + the
 * proposal, so commit appends the accepted part of both. */
static int suffix_propose_ahead(sp_draft *s, const int32_t *feed, int n_feed, const int32_t *ahead, int n_ahead,
                                int max_n, sp_proposal *out, sp_err *err) {
    (void)err;
    suffix_drafter *c = s->drafter->impl;
    suffix_draft *g = s->impl;
    sp_sfx_append(g->local, feed, n_feed);
    *out = (sp_proposal){ 0 };
    int n;
    const int32_t *h = history(g, &n);
    const int tail = n < c->o.max_depth ? n : c->o.max_depth;
    int32_t ctx[SP_SFX_MAX_DEPTH + SP_MAX_DRAFT];
    memcpy(ctx, h + n - tail, (size_t)tail * sizeof(int32_t));
    memcpy(ctx + tail, ahead, (size_t)n_ahead * sizeof(int32_t));
    memcpy(g->out, ahead, (size_t)n_ahead * sizeof(int32_t));
    g->n_out = n_ahead;
    if (max_n <= 0) return 0;
    const sp_sfx_params p = { .max_n = max_n, .factor = c->o.factor, .min_prob = c->o.min_prob, .width = 1 };
    const sp_sfx_cand *best = best_candidate(c, g, ctx, tail + n_ahead, &p);
    memcpy(g->out + n_ahead, best->tok, (size_t)best->n * sizeof(int32_t));
    g->n_out = n_ahead + best->n;
    *out = (sp_proposal){ .n = best->n, .tokens = g->out + n_ahead, .expect = best->score };
    return 0;
}

static int suffix_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                          sp_err *err) {
    (void)err;
    suffix_drafter *c = s->drafter->impl;
    suffix_draft *g = s->impl;
    sp_sfx_append(g->local, feed, n_feed);
    g->n_out = 0;
    *out = (sp_proposal){ 0 };
    if (max_n <= 0) return 0;
    const sp_sfx_params p = { .max_n = max_n < SP_MAX_DRAFT ? max_n : SP_MAX_DRAFT,
                              .factor = c->o.factor, .min_prob = c->o.min_prob,
                              .width = c->o.tree_width };
    int n;
    const int32_t *h = history(g, &n);
    const sp_sfx_cand *best = best_candidate(c, g, h, n, &p);
    g->n_out = best->n;
    memcpy(g->out, best->tok, (size_t)best->n * sizeof(int32_t));
    memcpy(g->parent, best->parent, (size_t)best->n * sizeof(int32_t));
    *out = (sp_proposal){ .n = g->n_out, .tokens = g->out,
                          .parent = c->o.tree_width > 1 ? g->parent : NULL, .expect = best->score };
    return 0;
}

/* The accepted tokens are the proposal's first n_accepted for a chain, or
 * the nodes named by path for a tree. */
static void suffix_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path,
                          const sp_taps *v) {
    (void)v; (void)n_drafted;
    suffix_draft *g = s->impl;
    if (n_accepted > g->n_out) n_accepted = g->n_out;
    for (int i = 0; i < n_accepted; i++) sp_sfx_append(g->local, &g->out[path ? path[i] : i], 1);
    g->n_out = 0;
}

static int suffix_checkpoint(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err) {
    (void)err;
    suffix_draft *g = s->impl;
    int n;
    const int32_t *h = history(g, &n);
    const size_t hdr = sp_ckpt_header(s->drafter, NULL, 0);
    const int32_t np = g->n_prompt;
    *len = hdr + sizeof np + (size_t)n * sizeof(int32_t);
    *buf = sp_xmalloc(*len);
    sp_ckpt_header(s->drafter, *buf, hdr);
    memcpy(*buf + hdr, &np, sizeof np);
    if (n) memcpy(*buf + hdr + sizeof np, h, (size_t)n * sizeof(int32_t));
    return 0;
}

static int suffix_restore(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err) {
    const suffix_drafter *c = s->drafter->impl;
    suffix_draft *g = s->impl;
    long off = sp_ckpt_check(s->drafter, buf, len, err);
    if (off < 0) return -1;
    size_t bytes = len - (size_t)off;
    if (bytes < sizeof(int32_t) || bytes % sizeof(int32_t) || bytes / sizeof(int32_t) - 1 > INT32_MAX)
        return sp_err_set(err, "suffix checkpoint: payload of %zu bytes is not a prompt length and a history",
                          bytes);
    int32_t np;
    memcpy(&np, buf + off, sizeof np);
    const int n = (int)(bytes / sizeof(int32_t) - 1);
    if (np < 0 || np > n)
        return sp_err_set(err, "suffix checkpoint: prompt length %d outside the history (%d tokens)", np, n);
    int32_t *h = sp_xmalloc((size_t)(n ? n : 1) * sizeof *h);
    memcpy(h, buf + off + sizeof np, (size_t)n * sizeof *h);
    local_reset(g, c->o.max_depth);
    sp_sfx_append(g->local, h, n);
    g->n_prompt = np;
    free(h);
    return 0;
}

/* A closing request hands its output, after the tail of its prompt (or
 * the whole prompt), to the engine-wide trie. */
static void suffix_close(sp_draft *s) {
    suffix_drafter *c = s->drafter->impl;
    suffix_draft *g = s->impl;
    if (c->global) {
        int n;
        const int32_t *h = history(g, &n);
        const int tail = c->o.global_prompt_tail < g->n_prompt ? c->o.global_prompt_tail : g->n_prompt;
        const int from = c->o.global_prompts ? 0 : g->n_prompt - tail;
        global_add(c, h + from, n - from);
    }
    sp_sfx_free(g->local);
    free(g);
    free(s);
}

static void suffix_free(sp_drafter *d) {
    suffix_drafter *c = d->impl;
    sp_sfx_free(c->global);
    pthread_mutex_destroy(&c->mu);
    free(c);
    free(d);
}

static const sp_drafter_ops suffix_ops = {
    .open = suffix_open, .prefill = suffix_prefill, .propose = suffix_propose,
    .propose_ahead = suffix_propose_ahead,
    .commit = suffix_commit, .checkpoint = suffix_checkpoint, .restore = suffix_restore,
    .close = suffix_close, .free = suffix_free,
};

void sp_suffix_global_info(sp_drafter *d, sp_suffix_info *out) {
    suffix_drafter *c = d->impl;
    *out = (sp_suffix_info){ 0 };
    if (!c->global) return;
    pthread_mutex_lock(&c->mu);
    out->seqs = sp_sfx_n_seqs(c->global);
    out->tokens = sp_sfx_tokens(c->global);
    out->nodes = sp_sfx_nodes(c->global);
    out->bytes = sp_sfx_bytes(c->global);
    out->check = sp_sfx_check(c->global, out->msg, sizeof out->msg);
    pthread_mutex_unlock(&c->mu);
}

static int check_opts(const sp_suffix_opts *o, sp_err *err) {
    if (o->max_depth < 4 || o->max_depth > SP_SFX_MAX_DEPTH)
        return sp_err_set(err, "suffix: max depth must be in [4, %d] (got %d)", SP_SFX_MAX_DEPTH, o->max_depth);
    if (!(o->factor > 0 && o->factor <= 64))
        return sp_err_set(err, "suffix: factor must be in (0, 64] (got %g)", (double)o->factor);
    if (!(o->min_prob >= 0 && o->min_prob <= 1))
        return sp_err_set(err, "suffix: min prob must be in [0, 1] (got %g)", (double)o->min_prob);
    if (o->tree_width < 1 || o->tree_width > SP_SFX_MAX_WIDTH)
        return sp_err_set(err, "suffix: tree width must be in [1, %d] (got %d)", SP_SFX_MAX_WIDTH, o->tree_width);
    if (o->global_tokens < 0 || o->global_tokens > INT32_MAX)
        return sp_err_set(err, "suffix: engine-wide token budget must be in [0, 2^31) (got %lld)",
                          (long long)o->global_tokens);
    if (o->global_prompt_tail < 0 || o->global_prompt_tail > 4096)
        return sp_err_set(err, "suffix: prompt tail must be in [0, 4096] (got %d)", o->global_prompt_tail);
    if (o->global_tokens > 0 && o->global_nodes < 1)
        return sp_err_set(err, "suffix: engine-wide node budget must be positive (got %lld)",
                          (long long)o->global_nodes);
    return 0;
}

sp_drafter *sp_suffix_create(const sp_suffix_opts *opts, sp_err *err) {
    const sp_suffix_opts o = opts ? *opts : sp_suffix_defaults();
    if (check_opts(&o, err)) return NULL;
    sp_drafter *d = sp_drafter_alloc();
    suffix_drafter *c = sp_xcalloc(1, sizeof *c);
    c->o = o;
    pthread_mutex_init(&c->mu, NULL);
    c->global = o.global_tokens > 0 ? sp_sfx_create(o.max_depth) : NULL;
    d->ops = &suffix_ops;
    d->impl = c;
    d->needs = 0;
    d->cheap = true;
    snprintf(d->name, sizeof d->name, "suffix");
    snprintf(d->ns, sizeof d->ns, "suffix-v1:depth=%d:factor=%g:minp=%g:width=%d", o.max_depth,
             (double)o.factor, (double)o.min_prob, o.tree_width);
    return d;
}
