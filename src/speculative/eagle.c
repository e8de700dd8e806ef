/* "eagle": an EAGLE-3-style draft head (model/head.c) that reads the
 * target's own hidden states.
 *
 * Position bookkeeping.  At position p the head takes the pair (g_p, x_{p+1}):
 * g_p fused from the target's taps at p, x_{p+1} the token after it.  The
 * draft keeps two queues: fused rows whose next token has not arrived yet
 * (feat, from prefill and from the verified rows each commit hands over),
 * and tokens that arrived after the last processed position (toks, from
 * the feed and from accepted drafts).  Pairs are run through the head in
 * one batched pass when a proposal is asked for.  The last pair's output
 * h and logits start the proposal; each further draft token runs one head
 * row (h, the token just drafted) at the next position, so drafting feeds
 * the head's own hidden state forward.  Those draft rows are dropped from
 * the head's cache at commit: only verified rows ever stay in it.  While
 * the sequence is kept plain, pairs are not run at all, and the oldest are
 * dropped past a bound (skip_old), leaving a gap between the cache's
 * first rows and the recent ones.
 *
 * Drafting stops early when the head's top probability falls below
 * min_prob, so the adaptive controller sees the head's real confidence;
 * the target's verification decides every token, so the output is plain
 * decoding's whatever the head says. */
#include "speculative/speculative.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EAGLE_ROWS 64            /* head rows per batched pass */
#define EAGLE_KEEP 16            /* pairs kept unrun while no proposal is asked */
#define EAGLE_SINK 4             /* first cache rows kept when older pairs are skipped */
#define SP_EAGLE_MAX_WIDTH 8     /* tree width: the first draft's candidates */

typedef struct eagle_drafter {
    sp_head *head;               /* owned */
    const sp_model *target;      /* borrowed */
    sp_pool *pool;               /* borrowed */
    int n_ctx;
    float min_prob;
    int tree_width;              /* first-draft candidates: 1 = chains */
    bool sample;                 /* --draft-sample: drafts sampled from the head's q */
    sp_head_ws *gws;             /* the passes shared by several sequences' drafts (made at first use) */
    float *gin;                  /* (SP_HEAD_MAX_ROWS, d) their inputs */
} eagle_drafter;

typedef struct eagle_draft {
    const eagle_drafter *e;
    const sp_head *h;
    sp_kv *kv;                   /* the head's cache: verified rows, then a proposal's draft rows */
    sp_head_ws *ws;
    int n_true;                  /* cache entries from verified rows */
    int gap;                     /* positions before feat_pos not in the cache (skipped):
                                    n_true + gap == feat_pos */
    float *feat;                 /* (cap_feat, 3 d_t) taps of rows waiting for their next token
                                    (fused in the batched pass that runs them) */
    int n_feat, cap_feat;
    int feat_pos;                /* position of feat[0] */
    int32_t *toks;               /* tokens after the last processed position */
    int n_toks, cap_toks;
    float *out;                  /* (EAGLE_ROWS, d) outputs of the last pass */
    float *g;                    /* (EAGLE_ROWS, d) fused inputs of a pass */
    float *h_last;               /* (d) the output to feed forward */
    float *logits;               /* (n_vocab_draft) */
    float *probs;                /* (n_vocab_draft) top_tokens' softmax of logits */
    bool have_logits;            /* logits/h_last belong to the latest processed position */
    int32_t prop[SP_MAX_DRAFT];
    int32_t parent[SP_MAX_DRAFT]; /* a tree proposal's parents */
    int n_prop;
    bool tree;                   /* the last proposal is a tree */
    /* the proposal being built (draft_begin .. draft_end) */
    int max_n, n_sib;
    double chain_p;              /* the head's probability that the chain so far is right */
    double expect;               /* the sum of chain_p over the chain, + the siblings' probabilities */
    int32_t first[SP_EAGLE_MAX_WIDTH];   /* the first draft's candidates, best first */
    float pfirst[SP_EAGLE_MAX_WIDTH];
    sp_sampler *smp;             /* drafts sampled (T > 0 with --draft-sample), else NULL */
    float *q;                    /* (SP_MAX_DRAFT, target n_vocab) the proposal's q, with smp */
    uint64_t pos_key;            /* the draws' counter, apart from the target's */
} eagle_draft;

/* ----------------------------------------------------------------------------
 * Queues
 * ------------------------------------------------------------------------- */

/* Floats of one queued row: its taps at the three layers. */
static size_t feat_width(const eagle_draft *g) { return (size_t)SP_HEAD_TAPS * g->h->hp.n_embd_target; }

static void feat_push(eagle_draft *g, const sp_taps *t) {
    const size_t w = feat_width(g);
    assert(t->n_layers == SP_HEAD_TAPS && (size_t)t->n_layers * t->dim == w && t->pos == g->feat_pos + g->n_feat);
    SP_VEC_GROW(g->feat, g->cap_feat, (g->n_feat + (size_t)t->n_rows) * w);
    memcpy(g->feat + (size_t)g->n_feat * w, t->data, (size_t)t->n_rows * w * sizeof(float));
    g->n_feat += t->n_rows;
}

static void toks_push(eagle_draft *g, const int32_t *t, int n) {
    if (n <= 0) return;
    SP_VEC_GROW(g->toks, g->cap_toks, g->n_toks + n);
    memcpy(g->toks + g->n_toks, t, (size_t)n * sizeof *t);
    g->n_toks += n;
}

/* Runs the pairs whose token has arrived (at most max_rows) through the
 * head, appending to its cache; the last one's output and logits become
 * the proposal's start. */
static int run_pairs(eagle_draft *g, int max_rows, sp_err *err) {
    const int d = g->h->hp.n_embd;
    const size_t w = feat_width(g);
    int ready = g->n_feat < g->n_toks ? g->n_feat : g->n_toks;
    if (ready > max_rows) ready = max_rows;
    assert(g->kv->n == g->n_true && g->n_true + g->gap == g->feat_pos);
    for (int at = 0; at < ready; at += EAGLE_ROWS) {
        const int n = ready - at < EAGLE_ROWS ? ready - at : EAGLE_ROWS;
        const bool last = at + n == ready;
        sp_head_fuse(g->h, g->ws, g->feat + (size_t)at * w, n, g->g);
        if (sp_head_forward(g->h, g->ws, g->kv, g->g, g->toks + at, n, g->out, last ? g->logits : NULL, err))
            return -1;
        if (last) memcpy(g->h_last, g->out + (size_t)(n - 1) * d, (size_t)d * sizeof(float));
    }
    if (!ready) return 0;
    memmove(g->feat, g->feat + (size_t)ready * w, (size_t)(g->n_feat - ready) * w * sizeof(float));
    memmove(g->toks, g->toks + ready, (size_t)(g->n_toks - ready) * sizeof *g->toks);
    g->n_feat -= ready;
    g->n_toks -= ready;
    g->feat_pos += ready;
    g->n_true = g->kv->n;
    g->have_logits = true;
    return 0;
}

static int run_ready(eagle_draft *g, sp_err *err) { return run_pairs(g, g->n_feat, err); }

/* While no proposal is asked (the controller or the speculation gate keeps
 * the sequence plain), running every verified row through the head would
 * cost 3-4 % of a target row each for drafts nobody makes: under load that
 * upkeep alone made eagle slower than no speculation.  So pairs wait, and
 * past 2 EAGLE_KEEP of them the oldest are dropped unrun: the cache keeps
 * its first EAGLE_SINK rows and the most recent EAGLE_KEEP pairs follow
 * them when a proposal comes.  Positions are cache slots, so the head then
 * sees the recent rows right after the first ones (the gap closed, as
 * StreamingLLM keeps attention sinks and a recent window); what it drafts
 * may differ, never what the target accepts.  The bound is small because
 * the gate's plain stretches are short (42 steps between probes): a bound
 * above them would skip nothing and only move the upkeep to the probe. */
static int skip_old(eagle_draft *g, sp_err *err) {
    int ready = g->n_feat < g->n_toks ? g->n_feat : g->n_toks;
    if (ready <= 2 * EAGLE_KEEP) return 0;
    if (g->gap == 0 && g->n_true < EAGLE_SINK) {     /* the sequence's first rows are the ones kept */
        if (run_pairs(g, EAGLE_SINK - g->n_true, err)) return -1;
        ready = g->n_feat < g->n_toks ? g->n_feat : g->n_toks;
    }
    const int drop = ready - EAGLE_KEEP;
    const size_t w = feat_width(g);
    const int keep_rows = g->n_true < EAGLE_SINK ? g->n_true : EAGLE_SINK;
    sp_kv_trim(g->kv, keep_rows);
    g->gap += g->n_true - keep_rows + drop;
    g->n_true = keep_rows;
    memmove(g->feat, g->feat + (size_t)drop * w, (size_t)(g->n_feat - drop) * w * sizeof(float));
    memmove(g->toks, g->toks + drop, (size_t)(g->n_toks - drop) * sizeof *g->toks);
    g->n_feat -= drop;
    g->n_toks -= drop;
    g->feat_pos += drop;
    g->have_logits = false;
    assert(g->kv->n == g->n_true && g->n_true + g->gap == g->feat_pos);
    return 0;
}

/* ----------------------------------------------------------------------------
 * Drafting
 * ------------------------------------------------------------------------- */

/* The head's w most likely draft tokens, best first (the lower id among
 * equals), with their probabilities (softmax over the draft vocabulary);
 * w <= SP_EAGLE_MAX_WIDTH.  Runs once per draft token, so both parts are
 * the SIMD kernels' (a scalar double exp over 8k logits cost 1.2 % of a
 * target forward per draft). */
static void top_tokens(eagle_draft *g, int w, int32_t *ids, float *probs) {
    const int V = g->h->hp.n_vocab_draft;
    const float *l = g->logits;
    int best[SP_EAGLE_MAX_WIDTH], n = 0;
    if (w == 1) {
        best[n++] = sp_argmax(l, V);
    } else {
        for (int i = 0; i < V; i++) {              /* insertion into the running top w */
            if (n == w && !(l[i] > l[best[w - 1]])) continue;
            int j = n < w ? n++ : w - 1;
            while (j > 0 && l[i] > l[best[j - 1]]) { best[j] = best[j - 1]; j--; }
            best[j] = i;
        }
    }
    memcpy(g->probs, l, (size_t)V * sizeof(float));
    sp_softmax(g->probs, V);
    for (int j = 0; j < n; j++) {
        ids[j] = g->h->d2t[best[j]];
        probs[j] = g->probs[best[j]];
    }
}

/* Draft i sampled from the head: the request's temperature, top-k, top-p
 * and min-p on the draft vocabulary give q, written densely over the
 * target's ids (q = 0 outside the draft vocabulary: verification then
 * leaves those tokens p's whole mass, which speculative sampling needs to
 * stay exact).  Returns the target id drawn; *top = q's largest entry. */
static int32_t sample_draft(eagle_draft *g, int i, float *top) {
    const int V = g->e->target->hp.n_vocab;
    return sp_draft_sample(g->smp, g->logits, g->h->d2t, g->q + (size_t)i * V, V, 0xEA61Eull, g->pos_key++, top);
}

/* A chain of greedy drafts, each row feeding the head's own output
 * forward, while the head's top probability stays at min_prob or above.
 * With tree_width > 1 the first draft's runners-up join as siblings after
 * the chain (parent -1): each costs one verified row and no head pass, and
 * catches the rounds where the head's first choice is wrong but another is
 * right.  Slots go where the head expects more: the chain grows only while
 * its next token's probability (the product along the chain) is at least
 * that of the sibling the remaining slots would otherwise hold.
 *
 * The chain is built step by step so that the drafts of several sequences
 * can share each head pass (eagle_propose_group): draft_begin takes the
 * head's latest logits, draft_next decides the next token and whether a
 * head row must follow for it, draft_end adds the siblings. */
static void draft_begin(eagle_draft *g, int max_n) {
    const int W = g->e->tree_width;
    top_tokens(g, W, g->first, g->pfirst);
    g->n_sib = 0;                    /* runners-up worth a row: at least min_prob / 3 */
    while (g->n_sib + 1 < W && g->pfirst[g->n_sib + 1] >= g->e->min_prob / 3) g->n_sib++;
    if (g->smp) g->n_sib = 0;        /* sampled drafts come as a chain with q */
    g->n_prop = 0;
    g->tree = false;
    g->chain_p = 1;
    g->expect = 0;
    g->max_n = max_n;
}

/* Considers the next draft from the head's latest logits; true when it was
 * taken and the chain goes on, so a head row must run for it. */
static bool draft_next(eagle_draft *g) {
    if (g->n_prop >= g->max_n) return false;
    int32_t t;
    float p;
    if (g->smp) t = sample_draft(g, g->n_prop, &p);
    else if (g->n_prop == 0) { t = g->first[0]; p = g->pfirst[0]; }
    else top_tokens(g, 1, &t, &p);
    const int left = g->max_n - g->n_prop;   /* slots left, this one included */
    const float displaced = g->n_prop > 0 && left <= g->n_sib ? g->pfirst[left] : 0;
    if (p < g->e->min_prob || g->chain_p * p < displaced) return false;
    g->chain_p *= p;
    g->expect += g->chain_p;
    g->parent[g->n_prop] = g->n_prop - 1;
    g->prop[g->n_prop++] = t;
    return g->n_prop < g->max_n && g->kv->n < g->kv->n_ctx;
}

static void draft_end(eagle_draft *g) {
    for (int j = 1; j <= g->n_sib && g->n_prop > 0 && g->n_prop < g->max_n; j++) {
        g->parent[g->n_prop] = -1;
        g->prop[g->n_prop++] = g->first[j];
        g->expect += g->pfirst[j];
        g->tree = true;
    }
    g->have_logits = false;          /* the logits now belong to a draft position */
}

static int draft(eagle_draft *g, int max_n, sp_err *err) {
    const int d = g->h->hp.n_embd;
    draft_begin(g, max_n);
    while (draft_next(g)) {
        /* the next row: the head's own output stands in for the target's
         * features at the position of the token just drafted */
        memcpy(g->out, g->h_last, (size_t)d * sizeof(float));
        if (sp_head_forward(g->h, g->ws, g->kv, g->out, &g->prop[g->n_prop - 1], 1, g->h_last, g->logits, err))
            return -1;
    }
    draft_end(g);
    return 0;
}

/* ----------------------------------------------------------------------------
 * Seam operations
 * ------------------------------------------------------------------------- */

static sp_draft *eg_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    eagle_drafter *e = d->impl;
    if (t->model != e->target) {
        sp_err_set(err, "drafter '%s' was loaded for %s, not for %s", d->name, e->target->name, t->model->name);
        return NULL;
    }
    eagle_draft *g = sp_xcalloc(1, sizeof *g);
    g->e = e;
    g->h = e->head;
    g->kv = sp_head_kv_create(e->head, e->n_ctx);
    g->ws = sp_head_ws_create(e->head, EAGLE_ROWS, e->n_ctx, e->pool);
    const size_t dd = (size_t)e->head->hp.n_embd;
    g->out = sp_xmalloc((size_t)EAGLE_ROWS * dd * sizeof(float));
    g->g = sp_xmalloc((size_t)EAGLE_ROWS * dd * sizeof(float));
    g->h_last = sp_xmalloc(dd * sizeof(float));
    g->logits = sp_xmalloc((size_t)e->head->hp.n_vocab_draft * sizeof(float));
    g->probs = sp_xmalloc((size_t)e->head->hp.n_vocab_draft * sizeof(float));
    if (e->sample && t->sampling && t->sampling->temperature > 0) {
        /* q need not follow p's whole pipeline to be exact, only be the
         * distribution drafts are drawn from: logit biases and penalties,
         * keyed by target ids and history, stay with the target */
        sp_sampler_params sp = *t->sampling;
        sp.bias = NULL;
        sp.n_bias = 0;
        sp.repeat_penalty = 1;
        sp.presence_penalty = sp.frequency_penalty = 0;
        g->smp = sp_sampler_create(&sp, e->head->hp.n_vocab_draft);
        g->q = sp_alloc_aligned((size_t)SP_MAX_DRAFT * e->target->hp.n_vocab * sizeof(float));
    }
    sp_draft *s = sp_xcalloc(1, sizeof *s);
    s->drafter = d;
    s->impl = g;
    return s;
}

static int eg_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    eagle_draft *g = s->impl;
    if (!taps || taps->n_rows != n || taps->pos != 0)
        return sp_err_set(err, "drafter '%s' needs the prompt's hidden states from position 0", s->drafter->name);
    sp_kv_trim(g->kv, 0);
    g->n_true = g->n_feat = g->n_toks = g->feat_pos = g->gap = 0;
    g->have_logits = false;
    feat_push(g, taps);
    toks_push(g, prompt + 1, n - 1);     /* x_{p+1} for p = 0 .. n-2 */
    return 0;
}

/* Takes in the feed and catches the head's cache up.  Returns 1 when a
 * proposal can start (max_n > 0, the head's logits are the latest
 * position's), 0 when not, -1 + err. */
static int catch_up(eagle_draft *g, const int32_t *feed, int n_feed, int max_n, sp_proposal *out, sp_err *err) {
    toks_push(g, feed, n_feed);
    *out = (sp_proposal){ 0 };
    /* pairs wait for a proposal (one batched pass later is cheaper, and
     * none at all for the pairs skip_old drops) */
    if (max_n <= 0) return skip_old(g, err) ? -1 : 0;
    /* catching up is owed whether or not this round drafts: all but the
     * last row's share of the pass (whose logits start the proposal) is
     * reported as absorbing, not as the cost of the drafts */
    const int ready = g->n_feat < g->n_toks ? g->n_feat : g->n_toks;
    const uint64_t t0 = sp_now_ns();
    if (run_ready(g, err)) return -1;
    if (ready > 0) {
        const uint64_t dt = sp_now_ns() - t0;
        out->absorb_ns = max_n > 0 ? dt * (uint64_t)(ready - 1) / (uint64_t)ready : dt;
    }
    return max_n > 0 && g->have_logits && g->n_feat == 0;
}

static void proposal_out(eagle_draft *g, sp_proposal *out) {
    out->n = g->n_prop;
    out->tokens = g->prop;
    out->parent = g->tree ? g->parent : NULL;
    out->q = g->smp && g->n_prop ? g->q : NULL;
    out->expect = g->n_prop ? g->expect : 0;
}

static int eg_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out, sp_err *err) {
    eagle_draft *g = s->impl;
    const int r = catch_up(g, feed, n_feed, max_n, out, err);
    if (r <= 0) return r;
    if (draft(g, max_n > SP_MAX_DRAFT ? SP_MAX_DRAFT : max_n, err)) return -1;
    proposal_out(g, out);
    return 0;
}

/* The proposals of n sequences' drafts of this drafter with their head
 * passes shared: each catches up on its own (rows of one sequence batch
 * already), then the chains grow in lockstep, one row per still-drafting
 * sequence in each pass, so the head's weights are read once per draft
 * position instead of once per sequence.  Every proposal is the one
 * eg_propose would make.  Each out[i].draft_ns is the time of the passes
 * the sequence had a row in, each counted whole: the controller then
 * charges a draft what it costs alone.  (Charging only each row's share
 * made it draft longer than pays: in a load test of 4 clients eagle fell
 * from 0.87x to 0.80x of plain; charged whole it measured 0.83-0.88x, with
 * 5 % more tokens per second than before the passes were shared.) */
static int eg_propose_group(sp_draft **s, const int32_t *const *feed, const int *n_feed, const int *max_n,
                            sp_proposal *out, int n, sp_err *err) {
    eagle_drafter *e = s[0]->drafter->impl;
    const int d = e->head->hp.n_embd;
    bool *on = sp_xcalloc((size_t)n, 2 * sizeof *on), *started = on + n;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        eagle_draft *g = s[i]->impl;
        assert(s[i]->drafter->impl == e);
        const int r = catch_up(g, feed[i], n_feed[i], max_n[i], &out[i], err);
        if (r < 0) rc = -1;
        else if (r == 1) {
            draft_begin(g, max_n[i] > SP_MAX_DRAFT ? SP_MAX_DRAFT : max_n[i]);
            started[i] = true;
            on[i] = draft_next(g);
        }
    }
    if (!rc && !e->gws) {
        e->gws = sp_head_ws_create(e->head, SP_HEAD_MAX_ROWS, e->n_ctx, e->pool);
        e->gin = sp_xmalloc((size_t)SP_HEAD_MAX_ROWS * d * sizeof(float));
    }
    while (!rc) {                    /* one pass per draft position (at most SP_HEAD_MAX_ROWS rows) */
        sp_kv *kv[SP_HEAD_MAX_ROWS];
        int32_t tok[SP_HEAD_MAX_ROWS];
        float *o[SP_HEAD_MAX_ROWS], *lg[SP_HEAD_MAX_ROWS];
        int who[SP_HEAD_MAX_ROWS], k = 0;
        for (int i = 0; i < n && k < SP_HEAD_MAX_ROWS; i++) {
            if (!on[i]) continue;
            eagle_draft *g = s[i]->impl;
            kv[k] = g->kv;
            memcpy(e->gin + (size_t)k * d, g->h_last, (size_t)d * sizeof(float));
            tok[k] = g->prop[g->n_prop - 1];
            o[k] = g->h_last;
            lg[k] = g->logits;
            who[k++] = i;
        }
        if (k == 0) break;           /* every chain has ended */
        const uint64_t t0 = sp_now_ns();
        if (sp_head_forward_rows(e->head, e->gws, kv, e->gin, tok, k, o, lg, err)) { rc = -1; break; }
        const uint64_t pass = sp_now_ns() - t0;
        for (int j = 0; j < k; j++) {
            out[who[j]].draft_ns += pass;
            on[who[j]] = draft_next(s[who[j]]->impl);
        }
    }
    for (int i = 0; i < n && !rc; i++)
        if (started[i]) {
            draft_end(s[i]->impl);
            proposal_out(s[i]->impl, &out[i]);
        }
    free(on);
    return rc;
}

/* Drops the proposal's draft rows from the head's cache; the verified rows
 * queue for the next pass with the accepted drafts as their next tokens. */
static void eg_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path, const sp_taps *v) {
    eagle_draft *g = s->impl;
    sp_kv_trim(g->kv, g->n_true);
    if (n_drafted > 0) {
        assert(n_drafted == g->n_prop && n_accepted <= n_drafted && (path || !g->tree || n_accepted == 0));
        for (int i = 0; i < n_accepted; i++) toks_push(g, &g->prop[path ? path[i] : i], 1);
        g->n_prop = 0;
    }
    if (v) feat_push(g, v);
}

/* After a restore of a state that covers the prompt's first n_done
 * positions (its fused rows end there): the rest of the prompt's rows join
 * the queue, and the queued rows' next tokens are taken from the prompt,
 * as prefill would have put them (a generated token the state had queued
 * need not be the new prompt's). */
static int eg_resume(sp_draft *s, const int32_t *prompt, int n, int n_done, const sp_taps *taps, sp_err *err) {
    eagle_draft *g = s->impl;
    if (g->feat_pos + g->n_feat != n_done || g->n_feat < 1)
        return sp_err_set(err, "drafter '%s': the restored state covers %d positions, not %d", s->drafter->name,
                          g->feat_pos + g->n_feat, n_done);
    if (!taps || taps->pos > n_done || taps->pos + taps->n_rows != n)
        return sp_err_set(err, "drafter '%s' needs the hidden states of the prompt from position %d",
                          s->drafter->name, n_done);
    g->n_toks = 0;                   /* x_{p+1} for every queued row p, from the prompt */
    const int skip = n_done - taps->pos;     /* rows the state already holds */
    const sp_taps rest = { .n_rows = taps->n_rows - skip, .n_layers = taps->n_layers, .dim = taps->dim,
                           .pos = n_done, .data = taps->data + (size_t)skip * feat_width(g) };
    if (rest.n_rows > 0) feat_push(g, &rest);
    toks_push(g, prompt + g->feat_pos + 1, n - g->feat_pos - 1);
    return 0;
}

/* State: the verified part of the head cache and both queues.  Ready
 * pairs are run first, so what is kept is the head's small cache rather
 * than the target's taps (three rows of the residual stream per token),
 * all but the last row: its next token is the one a resumed prompt brings
 * (eg_resume), which need not be the token this sequence had queued. */
static int eg_checkpoint(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err) {
    eagle_draft *g = s->impl;
    if (g->n_feat > 1 && run_pairs(g, g->n_feat - 1, err)) return -1;
    const size_t d = feat_width(g);
    const size_t kvb = (size_t)g->n_true * (size_t)g->kv->kv_dim * sizeof(sp_f16);
    const int32_t hdr[4] = { g->n_true, g->n_feat, g->feat_pos, g->n_toks };
    const size_t n = sp_ckpt_header(s->drafter, NULL, 0) + sizeof hdr + 2 * kvb +
                     (size_t)g->n_feat * d * sizeof(float) + (size_t)g->n_toks * sizeof(int32_t);
    uint8_t *b = sp_xmalloc(n), *p = b + sp_ckpt_header(s->drafter, b, n);
    memcpy(p, hdr, sizeof hdr); p += sizeof hdr;
    memcpy(p, g->kv->k, kvb); p += kvb;
    memcpy(p, g->kv->v, kvb); p += kvb;
    if (g->n_feat) memcpy(p, g->feat, (size_t)g->n_feat * d * sizeof(float));
    p += (size_t)g->n_feat * d * sizeof(float);
    if (g->n_toks) memcpy(p, g->toks, (size_t)g->n_toks * sizeof(int32_t));
    *buf = b;
    *len = n;
    return 0;
}

static int eg_restore(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err) {
    eagle_draft *g = s->impl;
    const long off = sp_ckpt_check(s->drafter, buf, len, err);
    if (off < 0) return -1;
    int32_t hdr[4];
    if (len - (size_t)off < sizeof hdr) return sp_err_set(err, "eagle checkpoint: truncated");
    memcpy(hdr, buf + off, sizeof hdr);
    const size_t d = feat_width(g);
    const size_t kvd = (size_t)g->kv->kv_dim;
    /* cache rows, queued rows, position of the queue (at least the rows: a
     * gap of skipped ones may lie between), queued tokens */
    if (hdr[0] < 0 || hdr[0] > g->kv->n_ctx || hdr[1] < 0 || hdr[1] > (1 << 20) || hdr[2] < hdr[0] ||
        hdr[2] > (1 << 30) || hdr[3] < 0 || hdr[3] > (1 << 20))
        return sp_err_set(err, "eagle checkpoint: bad header");
    const size_t kvb = (size_t)hdr[0] * kvd * sizeof(sp_f16);
    const size_t need = sizeof hdr + 2 * kvb + (size_t)hdr[1] * d * sizeof(float) + (size_t)hdr[3] * sizeof(int32_t);
    if (len - (size_t)off != need) return sp_err_set(err, "eagle checkpoint: %zu bytes, expected %zu", len - (size_t)off, need);
    const uint8_t *p = buf + off + sizeof hdr;
    memcpy(g->kv->k, p, kvb); p += kvb;
    memcpy(g->kv->v, p, kvb); p += kvb;
    g->kv->n = g->n_true = hdr[0];
    g->feat_pos = hdr[2];
    g->gap = hdr[2] - hdr[0];
    g->n_feat = g->n_toks = 0;
    SP_VEC_GROW(g->feat, g->cap_feat, (size_t)hdr[1] * d);
    if (hdr[1]) memcpy(g->feat, p, (size_t)hdr[1] * d * sizeof(float));
    p += (size_t)hdr[1] * d * sizeof(float);
    g->n_feat = hdr[1];
    toks_push(g, (const int32_t *)(const void *)p, hdr[3]);
    g->have_logits = false;
    return 0;
}

static void eg_close(sp_draft *s) {
    eagle_draft *g = s->impl;
    sp_kv_free(g->kv);
    sp_head_ws_free(g->ws);
    free(g->feat);
    free(g->toks);
    free(g->out);
    free(g->g);
    free(g->h_last);
    free(g->logits);
    free(g->probs);
    sp_sampler_free(g->smp);
    sp_free_aligned(g->q);
    free(g);
    free(s);
}

static void eg_free(sp_drafter *d) {
    eagle_drafter *e = d->impl;
    sp_head_ws_free(e->gws);
    free(e->gin);
    sp_head_free(e->head);
    free(e);
    free(d);
}

static const sp_drafter_ops eagle_ops = {
    .open = eg_open, .prefill = eg_prefill, .propose = eg_propose, .propose_group = eg_propose_group,
    .commit = eg_commit,
    .checkpoint = eg_checkpoint, .restore = eg_restore, .close = eg_close, .free = eg_free,
    .resume = eg_resume,
};

sp_drafter *sp_eagle_create(const char *path, const sp_model *target, const sp_eagle_opts *o, sp_pool *pool,
                            sp_err *err) {
    sp_head *h = sp_head_load(path, target, err);
    if (!h) return NULL;
    eagle_drafter *e = sp_xcalloc(1, sizeof *e);
    e->head = h;
    e->target = target;
    e->pool = pool;
    e->n_ctx = o && o->n_ctx > 0 ? o->n_ctx : 4096;
    e->min_prob = o && o->min_prob >= 0 ? o->min_prob : h->min_prob;
    e->tree_width = o && o->tree_width > 0 ? o->tree_width : 1;
    e->sample = o && o->sample;
    if (e->tree_width > SP_EAGLE_MAX_WIDTH) {
        sp_head_free(h);
        free(e);
        sp_err_set(err, "eagle: tree width must be in [1, %d] (got %d)", SP_EAGLE_MAX_WIDTH, o->tree_width);
        return NULL;
    }
    sp_drafter *d = sp_drafter_alloc();
    d->ops = &eagle_ops;
    d->impl = e;
    snprintf(d->name, sizeof d->name, "eagle");
    char fp[17];
    sp_model_fingerprint_gguf(h->gguf, fp);
    /* v2: fc runs in F16 beside quantized matrices, so a v1 state's cache
     * rows differ from what this build computes in their last bits */
    snprintf(d->ns, sizeof d->ns, "eagle-v2:%s:%s:%.3f:%d%s", fp, target->fingerprint, (double)e->min_prob,
             e->tree_width, e->sample ? ":sample" : "");
    d->needs = SP_CAP_HIDDEN_TAPS | (e->sample ? SP_CAP_SAMPLING : 0);
    d->n_taps = SP_HEAD_TAPS;
    memcpy(d->tap_layers, h->hp.target_layers, sizeof h->hp.target_layers);
    d->cheap = false;
    d->keeps_state = true;
    /* the head is trained on chains of 3 (--ttt); asked for up to 16 it
     * drafted deeper only where its confidence, uncalibrated there, ran
     * ahead of its acceptance: capped at 4 the adaptive length gained
     * 1-2 % on chat and math (BENCHMARKS.md, ninth round) */
    d->adaptive_cap = 4;
    return d;
}

/* ----------------------------------------------------------------------------
 * Cost
 * ------------------------------------------------------------------------- */

static int cmp_f64(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int sp_eagle_cost(const char *path, const sp_model *target, sp_workspace *ws, sp_pool *pool, sp_eagle_cost_t *out,
                  sp_err *err) {
    enum { REPS = 31, CTX = 64 };
    sp_head *h = sp_head_load(path, target, err);
    if (!h) return -1;
    const int d = h->hp.n_embd;
    sp_head_ws *hw = sp_head_ws_create(h, 4, CTX + 4 * REPS + 8, pool);
    sp_kv *hkv = sp_head_kv_create(h, CTX + 4 * REPS + 8);
    sp_kv *kv = sp_kv_create(target, CTX + 2);
    float *logits = sp_alloc_aligned((size_t)target->hp.n_vocab * sizeof(float));
    float *taps = sp_xcalloc((size_t)2 * SP_HEAD_TAPS * d, sizeof(float));
    float *g = sp_xcalloc((size_t)2 * d, sizeof(float)), *o = sp_xcalloc((size_t)2 * d, sizeof(float));
    float *hl = sp_xmalloc((size_t)h->hp.n_vocab_draft * sizeof(float));
    double row[REPS], catchup[REPS], fwd[REPS];
    int32_t toks[CTX];
    for (int i = 0; i < CTX; i++) toks[i] = (int32_t)((i * 7919 + 13) % target->hp.n_vocab);
    for (int i = 0; i < 2 * SP_HEAD_TAPS * d; i++) taps[i] = (float)((i * 37) % 101 - 50) * 0.02f;
    int rc = sp_model_forward(target, kv, ws, toks, CTX, SP_LOGITS_NONE, NULL, err);
    for (int r = -4; r < REPS && !rc; r++) {   /* r < 0 warms up */
        /* a target row between head passes evicts the head's weights from
         * the caches, as a verification does in a real round */
        uint64_t t0 = sp_now_ns();
        rc = sp_model_forward(target, kv, ws, toks, 1, SP_LOGITS_LAST, logits, err);
        sp_kv_trim(kv, CTX);
        uint64_t t1 = sp_now_ns();
        sp_head_fuse(h, hw, taps, 2, g);
        if (!rc) rc = sp_head_forward(h, hw, hkv, g, toks, 2, o, NULL, err);
        uint64_t t2 = sp_now_ns();
        if (!rc) rc = sp_head_forward(h, hw, hkv, o + d, toks, 1, o, hl, err);
        uint64_t t3 = sp_now_ns();
        if (r >= 0) {
            fwd[r] = sp_ns_to_s(t1 - t0);
            catchup[r] = sp_ns_to_s(t2 - t1) / 2;
            row[r] = sp_ns_to_s(t3 - t2);
        }
    }
    if (!rc) {
        qsort(fwd, REPS, sizeof *fwd, cmp_f64);
        qsort(catchup, REPS, sizeof *catchup, cmp_f64);
        qsort(row, REPS, sizeof *row, cmp_f64);
        *out = (sp_eagle_cost_t){ .t1 = fwd[REPS / 2], .draft_row = row[REPS / 2], .catchup_row = catchup[REPS / 2],
                                  .n_vocab_draft = h->hp.n_vocab_draft };
    }
    free(hl); free(o); free(g); free(taps);
    sp_free_aligned(logits);
    sp_kv_free(kv);
    sp_kv_free(hkv);
    sp_head_ws_free(hw);
    sp_head_free(h);
    return rc;
}
