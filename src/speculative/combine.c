/* Several drafters behind one ("ngram,suffix,draft", "suffix,eagle").
 * Each round the members are asked in order, and a proposal ends the
 * asking when it is expected to pay: later (costlier) drafters run only
 * when the earlier ones find nothing, or nothing promising.
 *
 * Which proposal wins.  A member that estimates its own proposal
 * (sp_proposal.expect: suffix from its trie's counts, eagle from the
 * head's probabilities) is compared by that estimate times its record in
 * this request: (accepted + CB_PRIOR) / (expected + CB_PRIOR) over the
 * proposals of it that were verified.  The record matters because the
 * members' estimates are not on one scale: a suffix match seen once in a
 * chat prompt claims certainty (its trie has one continuation) and is
 * accepted a third of the time, while in an edit of pasted code the same
 * claim holds.  The best proposal so far ends the asking once its
 * calibrated estimate reaches CB_ENOUGH tokens, or CB_SURE per token it
 * proposes (so eagle drafts only where suffix has nothing or a weak match:
 * a sure match of one token, which grows as the match does, is not weak;
 * asking eagle there cost a tenth of suffix's throughput on repeated
 * requests); a member without an estimate wins
 * at once, as every member did before estimates.  Measured on the prompt
 * sets against "the first that proposes wins": chat and math gain, the
 * copying categories stay within noise (BENCHMARKS.md, seventh round).
 *
 * Every sub-draft must still see every emitted token, in order.  A sub-draft
 * that is not asked in a round, or whose proposal lost, keeps a backlog of
 * the tokens it has not seen (the feed, then the accepted drafts of the
 * winner) and gets it as its feed the next time it is asked.  So a model
 * drafter pays for the tokens it missed only when it is needed.  A member
 * that reads the target's hidden states is the exception: it is handed
 * every verified row anyway, so it is fed every round (max_n = 0 when not
 * asked) and keeps its queue of rows bounded (absorb_idle).
 */
#include "speculative/speculative.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CB_MAX 4
#define CB_PRIOR 8.0             /* tokens of record a member starts with, at its estimates' word */
#define CB_ENOUGH 1.0            /* a calibrated estimate that ends the asking */
#define CB_SURE 0.9              /* or one of this much per proposed token (a short, sure proposal) */

typedef struct cb_drafter {
    sp_drafter *sub[CB_MAX];     /* owned */
    int n;
} cb_drafter;

typedef struct cb_draft {
    sp_draft *sub[CB_MAX];
    int n;
    int32_t *backlog[CB_MAX];    /* tokens sub i has not seen */
    int n_back[CB_MAX], cap_back[CB_MAX];
    int winner;                  /* whose proposal is out, -1 = none */
    double expected[CB_MAX];     /* sum of expect over member i's verified proposals */
    double accepted[CB_MAX];     /* and of their accepted tokens (this request) */
    sp_proposal prop;
    bool ahead;                  /* the last call was propose_ahead: the commit counts over chain */
    int32_t chain[SP_MAX_DRAFT]; /* ahead + the winner's proposal */
    int n_chain;
} cb_draft;

static void back_push(cb_draft *g, int i, const int32_t *t, int n) {
    SP_VEC_GROW(g->backlog[i], g->cap_back[i], g->n_back[i] + n);
    memcpy(g->backlog[i] + g->n_back[i], t, (size_t)n * sizeof(int32_t));
    g->n_back[i] += n;
}

static sp_draft *cb_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    cb_drafter *c = d->impl;
    cb_draft *g = sp_xcalloc(1, sizeof *g);
    g->winner = -1;
    for (int i = 0; i < c->n; i++) {
        if (!(g->sub[i] = sp_draft_open(c->sub[i], t, err))) {
            for (int j = 0; j < i; j++) sp_draft_close(g->sub[j]);
            free(g);
            return NULL;
        }
        g->n++;
    }
    sp_draft *s = sp_xcalloc(1, sizeof *s);
    s->drafter = d;
    s->impl = g;
    return s;
}

/* A new request: the members' records start afresh. */
static void records_reset(cb_draft *g) {
    for (int i = 0; i < g->n; i++) g->expected[i] = g->accepted[i] = 0;
}

static int cb_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    cb_draft *g = s->impl;
    records_reset(g);
    for (int i = 0; i < g->n; i++) {
        g->n_back[i] = 0;
        if (g->sub[i]->drafter->ops->prefill(g->sub[i], prompt, n, taps, err)) return -1;
    }
    return 0;
}

/* The members that may propose this round: the leading ones the gate
 * allows (sp_draft.members), or all.  The rest keep their backlog. */
static int asked(const sp_draft *s) {
    const cb_draft *g = s->impl;
    return s->members > 0 && s->members < g->n ? s->members : g->n;
}

static bool wants_taps(const sp_draft *sub) { return sub->drafter->needs & SP_CAP_HIDDEN_TAPS; }

/* A member that reads taps gets every verified row at commit; left
 * unasked it would queue them all and run them through its model the next
 * time it is asked (after a long stretch of the other member winning, a
 * catch-up pass costing more than a target forward).  Fed its tokens with
 * max_n = 0 instead, it keeps its queue bounded as it does while the gate
 * keeps a sequence plain (eagle: skip_old). */
static int absorb_idle(cb_draft *g, int i, sp_err *err) {
    if (g->n_back[i] == 0) return 0;
    sp_proposal p;
    if (sp_draft_propose(g->sub[i], g->backlog[i], g->n_back[i], 0, &p, err)) return -1;
    g->n_back[i] = 0;
    return 0;
}

/* Member i's proposal's expected accepted tokens by its own estimate and
 * its record; a proposal without an estimate counts as certain. */
static double calibrated(const cb_draft *g, int i, const sp_proposal *p) {
    if (!(p->expect > 0)) return (double)SP_MAX_DRAFT;
    return p->expect * (g->accepted[i] + CB_PRIOR) / (g->expected[i] + CB_PRIOR);
}

static int cb_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                      sp_err *err) {
    cb_draft *g = s->impl;
    for (int i = 0; i < g->n; i++) back_push(g, i, feed, n_feed);
    g->winner = -1;
    g->ahead = false;
    *out = (sp_proposal){ 0 };
    uint64_t absorb = 0;
    double best = 0;
    int i = 0;
    for (; max_n > 0 && i < asked(s); i++) {
        sp_draft *sub = g->sub[i];
        sp_proposal p;
        if (sp_draft_propose(sub, g->backlog[i], g->n_back[i], max_n, &p, err)) return -1;
        g->n_back[i] = 0;
        absorb += p.absorb_ns;
        const double v = p.n > 0 ? calibrated(g, i, &p) : 0;
        if (p.n > 0 && (g->winner < 0 || v > best)) {
            if (g->winner >= 0) g->sub[g->winner]->drafter->ops->commit(g->sub[g->winner], 0, 0, NULL, NULL);
            g->winner = i;
            g->prop = p;
            best = v;
        } else sub->drafter->ops->commit(sub, 0, 0, NULL, NULL);
        if (g->winner >= 0 && (best >= CB_ENOUGH || best >= CB_SURE * g->prop.n)) {
            i++;
            break;
        }
    }
    for (; i < g->n; i++)        /* the members not asked this round */
        if (wants_taps(g->sub[i]) && absorb_idle(g, i, err)) return -1;
    if (g->winner >= 0) *out = g->prop;
    out->absorb_ns = absorb;
    return 0;
}

/* The first sub-draft that can continue past `ahead` and does wins;
 * those that cannot keep their backlog (and learn ahead with it). */
static int cb_propose_ahead(sp_draft *s, const int32_t *feed, int n_feed, const int32_t *ahead, int n_ahead,
                            int max_n, sp_proposal *out, sp_err *err) {
    cb_draft *g = s->impl;
    for (int i = 0; i < g->n; i++) back_push(g, i, feed, n_feed);
    g->winner = -1;
    g->ahead = true;
    memcpy(g->chain, ahead, (size_t)n_ahead * sizeof(int32_t));
    g->n_chain = n_ahead;
    *out = (sp_proposal){ 0 };
    for (int i = 0; i < asked(s) && max_n > 0; i++) {
        sp_draft *sub = g->sub[i];
        if (!sub->drafter->ops->propose_ahead) continue;
        sp_proposal p;
        if (sp_draft_propose_ahead(sub, g->backlog[i], g->n_back[i], ahead, n_ahead, max_n, &p, err)) return -1;
        g->n_back[i] = 0;
        if (p.n > 0) {
            g->winner = i;
            memcpy(g->chain + n_ahead, p.tokens, (size_t)p.n * sizeof(int32_t));
            g->n_chain += p.n;
            *out = p;
            return 0;
        }
    }
    return 0;
}

/* After propose_ahead: the winner commits over the whole chain; every other
 * sub-draft (asked or not) learns the accepted part of it with its next feed. */
static void cb_commit_ahead(cb_draft *g, int n_drafted, int n_accepted, const sp_taps *v) {
    g->ahead = false;
    for (int i = 0; i < g->n; i++) {
        sp_draft *sub = g->sub[i];
        if (i == g->winner) {
            sub->drafter->ops->commit(sub, n_drafted, n_accepted, NULL, wants_taps(sub) ? v : NULL);
            continue;
        }
        if (v && wants_taps(sub)) sub->drafter->ops->commit(sub, 0, 0, NULL, v);
        back_push(g, i, g->chain, n_accepted < g->n_chain ? n_accepted : g->n_chain);
    }
    g->winner = -1;
}

static void cb_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path, const sp_taps *v) {
    cb_draft *g = s->impl;
    if (g->ahead) {
        cb_commit_ahead(g, n_drafted, n_accepted, v);
        return;
    }
    /* a sub-draft that reads taps gets every verified row, whoever proposed */
    for (int i = 0; v && i < g->n; i++)
        if (i != g->winner && wants_taps(g->sub[i])) g->sub[i]->drafter->ops->commit(g->sub[i], 0, 0, NULL, v);
    if (g->winner < 0) return;
    if (g->prop.expect > 0 && n_drafted == g->prop.n) {   /* the winner's record (a proposal cut
                                                             short, by a grammar, is left out) */
        g->expected[g->winner] += g->prop.expect;
        g->accepted[g->winner] += n_accepted;
    }
    g->sub[g->winner]->drafter->ops->commit(g->sub[g->winner], n_drafted, n_accepted, path,
                                            wants_taps(g->sub[g->winner]) ? v : NULL);
    /* the others learn the accepted drafts with their next feed */
    for (int i = 0; i < g->n; i++) {
        if (i == g->winner) continue;
        for (int j = 0; j < n_accepted; j++)
            back_push(g, i, &g->prop.tokens[path ? path[j] : j], 1);
    }
    g->winner = -1;
}

/* State: each sub-draft's checkpoint that keeps state (an empty record
 * for the others, which are primed afresh on resume).  Layout after the
 * namespace header: per sub-draft, its length (uint64) and its bytes. */
static int cb_checkpoint(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err) {
    cb_draft *g = s->impl;
    uint8_t *part[CB_MAX] = { 0 };
    size_t plen[CB_MAX] = { 0 }, total = sp_ckpt_header(s->drafter, NULL, 0);
    int rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        if (g->sub[i]->drafter->keeps_state) rc = sp_draft_checkpoint(g->sub[i], &part[i], &plen[i], err);
        total += sizeof(uint64_t) + plen[i];
    }
    if (!rc) {
        uint8_t *p = *buf = sp_xmalloc(total);
        *len = total;
        p += sp_ckpt_header(s->drafter, p, total);
        for (int i = 0; i < g->n; i++) {
            const uint64_t l = plen[i];
            memcpy(p, &l, sizeof l);
            p += sizeof l;
            if (l) memcpy(p, part[i], l);
            p += l;
        }
    }
    for (int i = 0; i < g->n; i++) free(part[i]);
    return rc;
}

static int cb_restore(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err) {
    cb_draft *g = s->impl;
    const long off = sp_ckpt_check(s->drafter, buf, len, err);
    if (off < 0) return -1;
    size_t at = (size_t)off;
    for (int i = 0; i < g->n; i++) {
        uint64_t l;
        if (len - at < sizeof l) return sp_err_set(err, "combine checkpoint: truncated");
        memcpy(&l, buf + at, sizeof l);
        at += sizeof l;
        if (l > len - at) return sp_err_set(err, "combine checkpoint: truncated");
        if (l && !g->sub[i]->drafter->keeps_state)
            return sp_err_set(err, "combine checkpoint: a state for '%s', which keeps none", g->sub[i]->drafter->name);
        if (l && sp_draft_restore(g->sub[i], buf + at, (size_t)l, err)) return -1;
        at += (size_t)l;
        g->n_back[i] = 0;
    }
    if (at != len) return sp_err_set(err, "combine checkpoint: %zu bytes after the last state", len - at);
    return 0;
}

/* Sub-drafts that kept state resume; the others are primed with the whole
 * prompt (they read no hidden states). */
static int cb_resume(sp_draft *s, const int32_t *prompt, int n, int n_done, const sp_taps *taps, sp_err *err) {
    cb_draft *g = s->impl;
    records_reset(g);
    for (int i = 0; i < g->n; i++) {
        sp_draft *sub = g->sub[i];
        g->n_back[i] = 0;
        const int rc = sub->drafter->keeps_state ? sub->drafter->ops->resume(sub, prompt, n, n_done, taps, err)
                                                 : sub->drafter->ops->prefill(sub, prompt, n, NULL, err);
        if (rc) return -1;
    }
    return 0;
}

static void cb_close(sp_draft *s) {
    cb_draft *g = s->impl;
    for (int i = 0; i < g->n; i++) {
        sp_draft_close(g->sub[i]);
        free(g->backlog[i]);
    }
    free(g);
    free(s);
}

static void cb_free(sp_drafter *d) {
    cb_drafter *c = d->impl;
    for (int i = 0; i < c->n; i++) sp_drafter_free(c->sub[i]);
    free(c);
    free(d);
}

static const sp_drafter_ops cb_ops = {
    .open = cb_open, .prefill = cb_prefill, .propose = cb_propose, .propose_ahead = cb_propose_ahead,
    .commit = cb_commit,
    .checkpoint = cb_checkpoint, .restore = cb_restore, .close = cb_close, .free = cb_free,
    .resume = cb_resume,
};

sp_drafter *sp_combine_create(sp_drafter **subs, int n, sp_err *err) {
    if (n < 2 || n > CB_MAX) {
        sp_err_set(err, "combine: 2 to %d drafters (got %d)", CB_MAX, n);
        return NULL;
    }
    cb_drafter *c = sp_xcalloc(1, sizeof *c);
    sp_drafter *d = sp_drafter_alloc();
    d->ops = &cb_ops;
    d->impl = c;
    d->cheap = true;
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (subs[i]->needs & SP_CAP_HIDDEN_TAPS) {
            /* the pass taps one set of layers per sequence */
            if (d->n_taps && (d->n_taps != subs[i]->n_taps ||
                              memcmp(d->tap_layers, subs[i]->tap_layers, (size_t)d->n_taps * sizeof(int32_t)))) {
                sp_err_set(err, "combine: '%s' and an earlier drafter read different tap layers", subs[i]->name);
                free(c);
                free(d);
                return NULL;
            }
            d->n_taps = subs[i]->n_taps;
            memcpy(d->tap_layers, subs[i]->tap_layers, sizeof d->tap_layers);
        }
        c->sub[c->n++] = subs[i];
        d->needs |= subs[i]->needs;
        d->cheap &= subs[i]->cheap;
        d->keeps_state |= subs[i]->keeps_state;
        /* a sub-draft that reads hidden states cannot be primed afresh
         * after a cached prefix: it must keep state */
        assert(subs[i]->keeps_state || !(subs[i]->needs & SP_CAP_HIDDEN_TAPS));
        len += (size_t)snprintf(d->name + len, len < sizeof d->name ? sizeof d->name - len : 0, "%s%s",
                                i ? "," : "", subs[i]->name);
    }
    snprintf(d->ns, sizeof d->ns, "combine-v1:%s", d->name);
    /* cheap members first, then costly ones: the gate may try the cheap
     * ones alone */
    int lead = 0;
    while (lead < c->n && c->sub[lead]->cheap) lead++;
    d->cheap_lead = lead < c->n ? lead : 0;
    return d;
}
