/* Unit tests for the speculative layer that need no model: the ngram
 * drafter against a brute-force reference, checkpoints, capability checks,
 * the speculative-sampling verifier (statistically), the adaptive
 * controller and statistics. */
#include "test_util.h"
#include "speculative/speculative.h"

#include <math.h>

/* ---------------------------------------------------------------------------
 * ngram
 * ------------------------------------------------------------------------ */

/* Saxena / vLLM prompt lookup, written the obvious O(L * k) way. */
static int ref_ngram(const int32_t *h, int L, int min, int max, int n, int32_t *out) {
    for (int k = max < L - 1 ? max : L - 1; k >= min; k--) {
        for (int i = 0; i + k < L; i++) {
            if (memcmp(h + i, h + L - k, (size_t)k * sizeof(int32_t)) != 0) continue;
            int m = L - (i + k) < n ? L - (i + k) : n;
            memcpy(out, h + i + k, (size_t)m * sizeof(int32_t));
            return m;
        }
    }
    return 0;
}

static sp_draft *open_ngram(sp_drafter **d, int min, int max) {
    sp_err err;
    *d = sp_ngram_create(min, max, &err);
    assert_non_null(*d);
    sp_target t = { .model = NULL, .caps = SP_CAP_SHARED_EMBED };
    sp_draft *s = sp_draft_open(*d, &t, &err);
    assert_non_null(s);
    return s;
}

static void test_ngram_basic(void **st) {
    (void)st;
    sp_drafter *d;
    sp_draft *s = open_ngram(&d, 1, 3);
    sp_err err;
    const int32_t prompt[] = { 5, 6, 7, 8, 9, 5, 6, 7, 1, 5, 6 };
    assert_int_equal(d->ops->prefill(s, prompt, 11, NULL, &err), 0);
    sp_proposal p;
    int32_t feed = 7;                       /* history ends "5 6 7": first occurrence at 0 */
    assert_int_equal(d->ops->propose(s, &feed, 1, 4, &p, &err), 0);
    assert_int_equal(p.n, 4);
    assert_null(p.q);
    assert_null(p.parent);
    const int32_t want[] = { 8, 9, 5, 6 };
    assert_memory_equal(p.tokens, want, sizeof want);
    d->ops->commit(s, 4, 2, NULL, NULL);          /* 8, 9 accepted; correction arrives as feed */
    feed = 3;                               /* history: ... 7 8 9 3 -> no 3 before: k=1 "3" unseen */
    assert_int_equal(d->ops->propose(s, &feed, 1, 4, &p, &err), 0);
    assert_int_equal(p.n, 0);
    d->ops->commit(s, 0, 0, NULL, NULL);
    feed = 9;                               /* "... 9 3 9": longest match "9" at 4 -> 5 6 7 1 */
    assert_int_equal(d->ops->propose(s, &feed, 1, 3, &p, &err), 0);
    const int32_t want2[] = { 5, 6, 7 };
    assert_int_equal(p.n, 3);
    assert_memory_equal(p.tokens, want2, sizeof want2);
    /* max_n = 0 only absorbs the feed */
    d->ops->commit(s, 3, 0, NULL, NULL);
    feed = 5;
    assert_int_equal(d->ops->propose(s, &feed, 1, 0, &p, &err), 0);
    assert_int_equal(p.n, 0);
    sp_draft_close(s);
    sp_drafter_free(d);
}

/* Random streams over a small alphabet, driven through the seam with random
 * accept counts, must always propose what the brute-force lookup proposes on
 * the same history. */
static void test_ngram_matches_reference(void **st) {
    (void)st;
    for (int cfg = 0; cfg < 3; cfg++) {
        const int mins[] = { 1, 2, 1 }, maxs[] = { 3, 4, 1 };
        sp_drafter *d;
        sp_draft *s = open_ngram(&d, mins[cfg], maxs[cfg]);
        sp_err err;
        sp_rng r = { 99 + (uint64_t)cfg };
        int32_t hist[6000];
        int L = 40;
        for (int i = 0; i < L; i++) hist[i] = (int32_t)(sp_rng_next(&r) % 6);
        assert_int_equal(d->ops->prefill(s, hist, L, NULL, &err), 0);
        while (L < 5000) {
            int32_t feed = (int32_t)(sp_rng_next(&r) % 6);
            hist[L++] = feed;
            int max_n = 1 + (int)(sp_rng_next(&r) % 8);
            sp_proposal p;
            assert_int_equal(d->ops->propose(s, &feed, 1, max_n, &p, &err), 0);
            int32_t want[16];
            int wn = ref_ngram(hist, L, mins[cfg], maxs[cfg], max_n, want);
            assert_int_equal(p.n, wn);
            assert_memory_equal(p.tokens, want, (size_t)wn * sizeof(int32_t));
            int k = p.n ? (int)(sp_rng_next(&r) % (uint64_t)(p.n + 1)) : 0;
            memcpy(hist + L, p.tokens, (size_t)k * sizeof(int32_t));
            L += k;
            d->ops->commit(s, p.n, k, NULL, NULL);
        }
        sp_draft_close(s);
        sp_drafter_free(d);
    }
}

/* A 32k-token history: proposals stay exact (spot-checked against the
 * reference) and the whole run stays fast (the index is incremental). */
static void test_ngram_long_history(void **st) {
    (void)st;
    sp_drafter *d;
    sp_draft *s = open_ngram(&d, 1, 3);
    sp_err err;
    const int L0 = 32768;
    int32_t *hist = malloc((L0 + 4096) * sizeof(int32_t));
    sp_rng r = { 7 };
    for (int i = 0; i < L0; i++) hist[i] = (int32_t)(sp_rng_next(&r) % 5000);
    assert_int_equal(d->ops->prefill(s, hist, L0, NULL, &err), 0);
    int L = L0;
    uint64_t t0 = sp_now_ns();
    const int rounds = 2000;
    for (int i = 0; i < rounds; i++) {
        /* feed copies an earlier span so that matches happen */
        int32_t feed = hist[(i * 131) % L0];
        hist[L++] = feed;
        sp_proposal p;
        assert_int_equal(d->ops->propose(s, &feed, 1, 10, &p, &err), 0);
        if (i % 200 == 0) {
            int32_t want[16];
            int wn = ref_ngram(hist, L, 1, 3, 10, want);
            assert_int_equal(p.n, wn);
            assert_memory_equal(p.tokens, want, (size_t)wn * sizeof(int32_t));
        }
        d->ops->commit(s, p.n, 0, NULL, NULL);
    }
    double us = (double)(sp_now_ns() - t0) / 1e3 / rounds;
    printf("# ngram on a %d-token history: %.2f us per round (incl. index build amortised)\n", L0, us);
    free(hist);
    sp_draft_close(s);
    sp_drafter_free(d);
}

static void test_ngram_checkpoint(void **st) {
    (void)st;
    sp_drafter *d, *d2;
    sp_draft *s = open_ngram(&d, 1, 3), *t = open_ngram(&d2, 1, 3);
    sp_err err;
    const int32_t prompt[] = { 1, 2, 3, 4, 1, 2, 3, 9, 1, 2 };
    assert_int_equal(d->ops->prefill(s, prompt, 10, NULL, &err), 0);
    uint8_t *blob;
    size_t len;
    assert_int_equal(sp_draft_checkpoint(s, &blob, &len, &err), 0);
    assert_int_equal(sp_draft_restore(t, blob, len, &err), 0);
    sp_proposal p1, p2;
    int32_t feed = 3;
    assert_int_equal(d->ops->propose(s, &feed, 1, 5, &p1, &err), 0);
    assert_int_equal(d2->ops->propose(t, &feed, 1, 5, &p2, &err), 0);
    const int32_t want[] = { 4, 1, 2, 3, 9 };   /* "1 2 3" first at 0 */
    assert_int_equal(p1.n, 5);
    assert_memory_equal(p1.tokens, want, sizeof want);
    assert_int_equal(p1.n, p2.n);
    assert_memory_equal(p1.tokens, p2.tokens, (size_t)p1.n * sizeof(int32_t));
    /* another parameterisation refuses this state */
    sp_drafter *d3;
    sp_draft *u = open_ngram(&d3, 2, 3);
    assert_int_equal(sp_draft_restore(u, blob, len, &err), -1);
    assert_non_null(strstr(err.msg, "does not match"));
    assert_int_equal(sp_draft_restore(t, blob, len - 1, &err), -1);  /* torn payload */
    assert_int_equal(sp_draft_restore(t, (const uint8_t *)"garbage", 7, &err), -1);
    free(blob);
    sp_draft_close(s); sp_draft_close(t); sp_draft_close(u);
    sp_drafter_free(d); sp_drafter_free(d2); sp_drafter_free(d3);
}

/* Tree proposals: the continuations of the first W occurrences, merged on
 * shared prefixes, parents before children, within the budget. */
static void test_ngram_tree(void **st) {
    (void)st;
    sp_err err;
    sp_drafter *d = sp_ngram_create_tree(1, 2, 3, &err);
    assert_non_null(d);
    sp_target t = { .model = NULL, .caps = 0 };
    sp_draft *s = sp_draft_open(d, &t, &err);
    /* "7 8" occurs followed by 1 2, by 1 3 and by 4 5 */
    const int32_t prompt[] = { 7, 8, 1, 2, 0, 7, 8, 1, 3, 0, 7, 8, 4, 5, 0, 9, 7 };
    assert_int_equal(d->ops->prefill(s, prompt, 17, NULL, &err), 0);
    sp_proposal p;
    int32_t feed = 8;
    assert_int_equal(d->ops->propose(s, &feed, 1, 6, &p, &err), 0);
    assert_non_null(p.parent);
    /* branches of 6/3 = 2 tokens: 1-2, 1-3 (shares 1), 4-5 */
    const int32_t tok[] = { 1, 2, 3, 4, 5 }, par[] = { -1, 0, 0, -1, 3 };
    assert_int_equal(p.n, 5);
    assert_memory_equal(p.tokens, tok, sizeof tok);
    assert_memory_equal(p.parent, par, sizeof par);
    /* accepted path 1 -> 3 enters the history */
    const int32_t path[] = { 0, 2 };
    d->ops->commit(s, 5, 2, path, NULL);
    uint8_t *blob;
    size_t len;
    assert_int_equal(sp_draft_checkpoint(s, &blob, &len, &err), 0);
    size_t n = (len - sp_ckpt_header(d, NULL, 0)) / sizeof(int32_t);
    assert_int_equal(n, 20);
    int32_t h[20];
    memcpy(h, blob + sp_ckpt_header(d, NULL, 0), sizeof h);
    assert_int_equal(h[18], 1);
    assert_int_equal(h[19], 3);
    free(blob);
    /* a budget smaller than the branches cuts the tree */
    feed = 0;
    assert_int_equal(d->ops->propose(s, &feed, 1, 0, &p, &err), 0);
    d->ops->commit(s, 0, 0, NULL, NULL);
    feed = 7;
    assert_int_equal(d->ops->propose(s, &feed, 1, 1, &p, &err), 0);
    assert_int_equal(p.n, 1);
    sp_draft_close(s);
    sp_drafter_free(d);
    assert_null(sp_ngram_create_tree(1, 3, 9, &err));
}

static void test_ngram_bad_params(void **st) {
    (void)st;
    sp_err err;
    assert_null(sp_ngram_create(0, 3, &err));
    assert_null(sp_ngram_create(4, 3, &err));
    assert_non_null(strstr(err.msg, "ngram"));
    assert_null(sp_drafter_create("bogus", NULL, &err));
    assert_non_null(strstr(err.msg, "unknown speculative method 'bogus'"));
}

/* A drafter that needs hidden-state taps is refused by a target that has
 * none, with a message naming what is missing. */
static sp_draft *never_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    (void)d; (void)t;
    sp_err_set(err, "should not be called");
    return NULL;
}
static void test_capability_refusal(void **st) {
    (void)st;
    static const sp_drafter_ops ops = { .open = never_open };
    sp_drafter d = { .ops = &ops, .name = "eagle", .needs = SP_CAP_HIDDEN_TAPS };
    sp_target t = { .model = NULL, .caps = SP_CAP_SHARED_EMBED };
    sp_err err;
    assert_null(sp_draft_open(&d, &t, &err));
    assert_non_null(strstr(err.msg, "drafter 'eagle' needs hidden-state taps"));
    assert_non_null(strstr(err.msg, "offers only shared embeddings"));
}

/* ---------------------------------------------------------------------------
 * Combinations: which member's proposal goes out, and every member still
 * sees every emitted token.
 * ------------------------------------------------------------------------ */

/* A scripted member (one draft at a time): proposes base, base+1, .. (n of
 * them) with the estimate `expect` (0 = none), counts the times it is
 * asked, and keeps the stream it has seen (prompt, feeds, its own accepted
 * drafts). */
typedef struct fk_drafter {
    int32_t base;
    int n;
    double expect;
    int accept;                  /* how many of its proposal the target accepts */
    int asked;
    int32_t hist[512];
    int n_hist;
    int32_t prop[SP_MAX_DRAFT];
} fk_drafter;

static void fk_push(fk_drafter *f, const int32_t *t, int n) {
    assert_true(f->n_hist + n <= 512);
    memcpy(f->hist + f->n_hist, t, (size_t)n * sizeof *t);
    f->n_hist += n;
}
static sp_draft *fk_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    (void)t; (void)err;
    sp_draft *s = sp_xcalloc(1, sizeof *s);
    s->drafter = d;
    return s;
}
static int fk_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    (void)taps; (void)err;
    fk_drafter *f = s->drafter->impl;
    f->n_hist = 0;
    fk_push(f, prompt, n);
    return 0;
}
static int fk_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out, sp_err *err) {
    (void)err;
    fk_drafter *f = s->drafter->impl;
    fk_push(f, feed, n_feed);
    *out = (sp_proposal){ 0 };
    if (max_n <= 0) return 0;
    f->asked++;
    const int n = f->n < max_n ? f->n : max_n;
    for (int i = 0; i < n; i++) f->prop[i] = f->base + i;
    *out = (sp_proposal){ .n = n, .tokens = f->prop, .expect = n ? f->expect : 0 };
    return 0;
}
static void fk_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path, const sp_taps *v) {
    (void)n_drafted; (void)path; (void)v;
    fk_drafter *f = s->drafter->impl;
    fk_push(f, f->prop, n_accepted);
}
static void fk_close(sp_draft *s) { free(s); }
static void fk_free(sp_drafter *d) { free(d->impl); free(d); }

static sp_drafter *fk_create(const char *name, int32_t base, int n, double expect, bool cheap) {
    static const sp_drafter_ops ops = { .open = fk_open, .prefill = fk_prefill, .propose = fk_propose,
                                        .commit = fk_commit, .close = fk_close, .free = fk_free };
    sp_drafter *d = sp_drafter_alloc();
    d->ops = &ops;
    snprintf(d->name, sizeof d->name, "%s", name);
    d->cheap = cheap;
    fk_drafter *f = sp_xcalloc(1, sizeof *f);
    f->base = base;
    f->n = n;
    f->expect = expect;
    d->impl = f;
    return d;
}

typedef struct cb_fixture {
    sp_drafter *cb;
    fk_drafter *a, *b;           /* the members, a first (cheap) */
    sp_draft *s;
    int32_t truth[512];          /* the emitted stream */
    int n_truth;
    int32_t next;                /* the token the next round feeds */
} cb_fixture;

/* b reads hidden-state taps when b_taps (of a 4-layer target). */
static void cb_setup_taps(cb_fixture *x, double ea, double eb, bool b_taps) {
    static sp_model model;
    model.hp.n_layer = 4;
    sp_err err;
    sp_drafter *m[2] = { fk_create("a", 100, 3, ea, true), fk_create("b", 200, 2, eb, false) };
    if (b_taps) {
        m[1]->needs |= SP_CAP_HIDDEN_TAPS;
        m[1]->n_taps = 1;
        m[1]->keeps_state = true;
    }
    x->a = m[0]->impl;
    x->b = m[1]->impl;
    x->cb = sp_combine_create(m, 2, &err);
    assert_non_null(x->cb);
    const sp_target t = { .model = &model, .caps = SP_CAP_SHARED_EMBED | SP_CAP_HIDDEN_TAPS };
    x->s = sp_draft_open(x->cb, &t, &err);
    assert_non_null(x->s);
}

static void cb_setup(cb_fixture *x, double ea, double eb) { cb_setup_taps(x, ea, eb, false); }

/* A new request: prompt 1 2 3, then the first generated token 7. */
static void cb_request(cb_fixture *x) {
    sp_err err;
    const int32_t prompt[3] = { 1, 2, 3 };
    assert_int_equal(x->cb->ops->prefill(x->s, prompt, 3, NULL, &err), 0);
    memcpy(x->truth, prompt, sizeof prompt);
    x->n_truth = 3;
    x->next = 7;
    x->a->asked = x->b->asked = 0;
}

/* One round: the pending token is fed, the winner's `accept` tokens of its
 * proposal are accepted, then a correction token becomes the next feed.
 * Returns the name of the member whose proposal went out ("" for none). */
static const char *cb_round(cb_fixture *x) {
    sp_err err;
    sp_proposal p;
    x->truth[x->n_truth++] = x->next;
    assert_int_equal(sp_draft_propose(x->s, &x->next, 1, 4, &p, &err), 0);
    int n_acc = !p.n ? 0 : p.tokens == x->a->prop ? x->a->accept : x->b->accept;
    if (n_acc > p.n) n_acc = p.n;
    if (n_acc > 0) memcpy(x->truth + x->n_truth, p.tokens, (size_t)n_acc * sizeof(int32_t));
    x->n_truth += n_acc;
    x->cb->ops->commit(x->s, p.n, n_acc, NULL, NULL);
    x->next = 50 + x->n_truth % 40;
    return p.n ? p.by : "";
}

/* Both members ask to be asked (a proposes nothing, b is asked), so each
 * takes in its backlog; then each has seen exactly the emitted stream. */
static void cb_check_streams(cb_fixture *x) {
    const int na = x->a->n, nb = x->b->accept;
    x->a->n = 0;
    x->b->accept = 0;            /* (accepted drafts would wait in a's backlog again) */
    cb_round(x);
    x->a->n = na;
    x->b->accept = nb;
    assert_int_equal(x->a->n_hist, x->n_truth);
    assert_int_equal(x->b->n_hist, x->n_truth);
    assert_memory_equal(x->a->hist, x->truth, (size_t)x->n_truth * sizeof(int32_t));
    assert_memory_equal(x->b->hist, x->truth, (size_t)x->n_truth * sizeof(int32_t));
}

static void cb_teardown(cb_fixture *x) {
    sp_draft_close(x->s);
    sp_drafter_free(x->cb);
}

/* Members without estimates: the first that proposes wins and the next is
 * not asked (the rule of "ngram,suffix,draft"). */
static void test_combine_first_wins(void **st) {
    (void)st;
    cb_fixture x;
    cb_setup(&x, 0, 0);
    cb_request(&x);
    for (int r = 0; r < 5; r++) {
        x.a->accept = r % 3;
        assert_string_equal(cb_round(&x), "a");
    }
    assert_int_equal(x.b->asked, 0);
    cb_check_streams(&x);
    cb_teardown(&x);
}

/* A promising estimate ends the asking; a weak one lets the next member
 * propose, and the better estimate goes out (the loser sees the winner's
 * accepted tokens with its next feed). */
static void test_combine_estimates(void **st) {
    (void)st;
    cb_fixture x;
    cb_setup(&x, 1.5, 0.9);
    cb_request(&x);
    x.a->accept = 3;
    x.b->accept = 2;
    assert_string_equal(cb_round(&x), "a");          /* 1.5 expected: b is not asked */
    assert_int_equal(x.b->asked, 0);
    x.a->expect = 0.4;
    assert_string_equal(cb_round(&x), "b");          /* 0.4 against 0.9 */
    assert_int_equal(x.b->asked, 1);
    x.b->expect = 0.3;
    assert_string_equal(cb_round(&x), "a");          /* 0.4 against 0.3: the earlier, better one */
    assert_int_equal(x.b->asked, 2);
    x.b->n = 0;
    assert_string_equal(cb_round(&x), "a");          /* b has nothing: a's weak proposal still goes */
    x.a->n = 0;
    assert_string_equal(cb_round(&x), "");           /* nobody proposes */
    x.a->n = 3;
    x.b->n = 2;
    cb_check_streams(&x);
    cb_teardown(&x);
}

/* A short proposal the member is sure of ends the asking too (a
 * one-token suffix match grows with the match); a long one with the same
 * estimate does not. */
static void test_combine_sure(void **st) {
    (void)st;
    cb_fixture x;
    cb_setup(&x, 0.95, 0.9);
    cb_request(&x);
    x.a->n = 1;
    x.a->accept = 1;
    assert_string_equal(cb_round(&x), "a");          /* 0.95 of 1 token: sure */
    assert_int_equal(x.b->asked, 0);
    x.a->n = 3;
    assert_string_equal(cb_round(&x), "a");          /* 0.95 of 3: b is asked, a's is still better */
    assert_int_equal(x.b->asked, 1);
    cb_check_streams(&x);
    cb_teardown(&x);
}

/* A member whose confident proposals keep failing loses its word: after
 * enough rejected rounds the next member is asked and wins, and a new
 * request starts both records afresh. */
static void test_combine_record(void **st) {
    (void)st;
    cb_fixture x;
    cb_setup(&x, 3.0, 0.9);
    cb_request(&x);
    x.a->accept = 0;                                /* a's drafts are all rejected */
    x.b->accept = 2;                                /* b's are right */
    int first_b = -1;
    for (int r = 0; r < 40 && first_b < 0; r++)
        if (!strcmp(cb_round(&x), "b")) first_b = r;
    assert_true(first_b >= 2);                      /* a kept its word for a while */
    assert_true(first_b < 40);
    for (int i = 0; i < 5; i++) assert_string_equal(cb_round(&x), "b");   /* and then b keeps winning */
    cb_check_streams(&x);
    cb_request(&x);
    assert_string_equal(cb_round(&x), "a");         /* a fresh record: a's 3.0 ends the asking */
    assert_int_equal(x.b->asked, 0);
    cb_teardown(&x);
}

/* A member that is not asked keeps a backlog, except one that reads taps:
 * it is fed every round (with nothing to propose), so the rows it is
 * handed never pile up for one catch-up pass. */
static void test_combine_feeds_tap_readers(void **st) {
    (void)st;
    for (int taps = 0; taps < 2; taps++) {
        cb_fixture x;
        cb_setup_taps(&x, 2.0, 0.9, taps);
        cb_request(&x);
        x.a->accept = 2;
        for (int r = 0; r < 6; r++) {
            assert_string_equal(cb_round(&x), "a");
            /* b has seen the stream up to this round's feed (the accepted
             * drafts reach it with the next) or only the prompt */
            assert_int_equal(x.b->n_hist, taps ? x.n_truth - 2 : 3);
        }
        assert_int_equal(x.b->asked, 0);
        x.s->members = x.cb->cheap_lead;               /* the gate's cheap mode: the same */
        assert_string_equal(cb_round(&x), "a");
        assert_int_equal(x.b->n_hist, taps ? x.n_truth - 2 : 3);
        x.s->members = 0;
        cb_check_streams(&x);
        cb_teardown(&x);
    }
}

/* Under the gate's "cheap members only" the costly member is never asked,
 * whatever the estimates. */
static void test_combine_gate_members(void **st) {
    (void)st;
    cb_fixture x;
    cb_setup(&x, 0.2, 0.9);
    assert_int_equal(x.cb->cheap_lead, 1);
    cb_request(&x);
    x.s->members = x.cb->cheap_lead;
    x.a->accept = x.b->accept = 1;
    for (int r = 0; r < 4; r++) assert_string_equal(cb_round(&x), "a");
    assert_int_equal(x.b->asked, 0);
    x.s->members = 0;
    assert_string_equal(cb_round(&x), "b");
    cb_check_streams(&x);
    cb_teardown(&x);
}

/* ---------------------------------------------------------------------------
 * Speculative sampling: the emitted token is distributed as p whatever q is.
 * ------------------------------------------------------------------------ */
static void test_specsample_distribution(void **st) {
    (void)st;
    enum { V = 6 };
    const sp_cand p[] = { { 2, 0.40f }, { 0, 0.25f }, { 5, 0.15f }, { 1, 0.12f }, { 4, 0.08f } };
    const float q[V] = { 0.10f, 0.30f, 0.10f, 0.05f, 0.05f, 0.40f };   /* token 3: q > 0, p = 0 */
    const float q_full[V] = { 0.10f, 0.30f, 0.10f, 0.05f, 0.05f, 0.40f };
    (void)q_full;
    const int N = 200000;
    int hist[V] = { 0 }, acc = 0;
    sp_rng r = { 2024 };
    for (int i = 0; i < N; i++) {
        double u = sp_rng_next_f64(&r), cum = 0;
        int32_t x = V - 1;
        for (int v = 0; v < V; v++) { cum += q[v]; if (u < cum) { x = v; break; } }
        bool a;
        int32_t t = sp_verify_specsample(p, 5, q, V, x, sp_rng_next_f64(&r), sp_rng_next_f64(&r), &a);
        assert_true(t >= 0 && t < V);
        if (a) { acc++; assert_int_equal(t, x); }
        hist[t]++;
    }
    double pv[V] = { 0.25, 0.12, 0.40, 0.0, 0.08, 0.15 }, chi = 0;
    assert_int_equal(hist[3], 0);                          /* p(3) = 0: never emitted */
    for (int v = 0; v < V; v++) {
        if (pv[v] == 0) continue;
        double e = N * pv[v];
        chi += (hist[v] - e) * (hist[v] - e) / e;
    }
    printf("# speculative sampling: chi-square %.2f (4 dof), acceptance %.4f\n", chi, (double)acc / N);
    assert_true(chi < 18.47);                             /* 4 dof, p = 0.001 */
    /* acceptance rate = sum_v min(p, q) = .1+.12+.1+0+.05+.15 = 0.52 */
    assert_true(fabs((double)acc / N - 0.52) < 0.01);
}

static void test_specsample_degenerate(void **st) {
    (void)st;
    const sp_cand p1[] = { { 3, 1.0f } };             /* greedy target */
    float q[5] = { 0.2f, 0.2f, 0.2f, 0.2f, 0.2f };
    bool a;
    assert_int_equal(sp_verify_specsample(p1, 1, q, 5, 3, 0.99, 0.5, &a), 3);
    assert_true(a);
    assert_int_equal(sp_verify_specsample(p1, 1, q, 5, 1, 0.0, 0.5, &a), 3);
    assert_false(a);
    float q0[5] = { 0, 0, 0, 0, 0 };                  /* a draft that gave no mass */
    assert_int_equal(sp_verify_specsample(p1, 1, q0, 5, 3, 0.7, 0.5, &a), 3);
    assert_true(a);
    assert_int_equal(sp_verify_specsample(p1, 1, q0, 5, 99, 0.0, 0.5, &a), 3);  /* out of range */
    assert_false(a);
}

/* ---------------------------------------------------------------------------
 * Adaptive draft length
 * ------------------------------------------------------------------------ */
static void curve(sp_cost_curve *c, double slope) {
    for (int k = 1; k <= SP_MAX_DRAFT + 1; k++) c->t[k] = 1.0 + slope * (k - 1);
    c->valid = true;
}

static void test_adapt(void **st) {
    (void)st;
    sp_cost_curve cheap, linear;
    curve(&cheap, 0.05);
    curve(&linear, 1.0);
    sp_adapt a;
    sp_adapt_init(&a, &cheap, 16);
    assert_true(sp_adapt_choose(&a) > 0);           /* optimistic prior tries drafting */
    for (int i = 0; i < 200; i++) sp_adapt_observe(&a, 8, 8);
    assert_true(sp_adapt_choose(&a) >= 8);
    assert_true(sp_adapt_expected(&a, 8) > 8.0);
    for (int i = 0; i < 300; i++) sp_adapt_observe(&a, 4, 0);
    assert_int_equal(sp_adapt_choose(&a), 0);       /* nothing accepted: plain decoding */
    assert_true(sp_adapt_expected(&a, 4) < 1.2);
    /* when a window costs as much as separate steps, never draft */
    sp_adapt_init(&a, &linear, 16);
    for (int i = 0; i < 200; i++) sp_adapt_observe(&a, 8, 7);
    assert_int_equal(sp_adapt_choose(&a), 0);
    /* half acceptance on a moderately cheap curve: a short draft */
    sp_cost_curve mid;
    curve(&mid, 0.2);
    sp_adapt_init(&a, &mid, 16);
    for (int i = 0; i < 200; i++) sp_adapt_observe(&a, 8, i % 2 ? 1 : 0);
    int n = sp_adapt_choose(&a);
    assert_true(n >= 1 && n <= 3);
    /* good acceptance on a cheap curve, but each draft token costs
     * a whole target pass (a draft model as slow as the target): plain decoding */
    sp_adapt_init(&a, &cheap, 16);
    for (int i = 0; i < 200; i++) sp_adapt_observe(&a, 4, 3);
    assert_true(sp_adapt_choose(&a) >= 3);
    for (int i = 0; i < 50; i++) sp_adapt_draft_cost(&a, 4, 4 * 1.0);
    assert_int_equal(sp_adapt_choose(&a), 0);
    /* a cheap draft model (a tenth of a pass per token) drafts again */
    for (int i = 0; i < 300; i++) sp_adapt_draft_cost(&a, 4, 4 * 0.1);
    n = sp_adapt_choose(&a);
    assert_true(n >= 2 && n <= 4);
    sp_adapt_draft_cost(&a, 0, 5.0);                 /* nothing asked: ignored */
    assert_int_equal(sp_adapt_choose(&a), n);
}

/* In a pass shared with other sequences extra rows cost their full share:
 * a request that drafts alone stops drafting in a full pass unless its
 * drafts are very likely to be accepted. */
static void test_adapt_in_pass(void **st) {
    (void)st;
    sp_cost_curve mid;
    curve(&mid, 0.2);                                /* t(K) = 1 + 0.2 (K - 1) */
    sp_adapt a;
    sp_adapt_init(&a, &mid, 10);
    for (int i = 0; i < 300; i++) sp_adapt_observe(&a, 4, i % 10 < 4 ? 1 : 0); /* 40 % at position 0 */
    const int alone = sp_adapt_choose(&a);
    assert_true(alone >= 1);
    assert_int_equal(sp_adapt_choose_in(&a, 0, 0.0), alone);   /* an empty pass is "alone" */
    assert_int_equal(sp_adapt_choose_in(&a, 8, 8.0), 0);       /* 8 plain rows already in the pass */
    /* a request whose drafts are all accepted still drafts there, also
     * past the end of the measured curve (24 + 1 + 10 rows > SP_MAX_DRAFT + 1,
     * where t is extended along its last slope) */
    for (int i = 0; i < 300; i++) sp_adapt_observe(&a, 10, 10);
    assert_true(sp_adapt_choose_in(&a, 8, 8.0) >= 8);
    assert_true(sp_adapt_choose_in(&a, 24, 24.0) >= 8);
    /* negative inputs are clamped (never a better rate from nothing) */
    assert_int_equal(sp_adapt_choose_in(&a, -5, -3.0), sp_adapt_choose(&a));
    /* a drafter whose proposals spend long catching up (a head taking in
     * verified rows): alone that time is paid anyway and it drafts; with
     * other rows in the pass it would hold them all up, and it does not */
    sp_adapt b;
    sp_adapt_init(&b, &mid, 10);
    for (int i = 0; i < 300; i++) sp_adapt_observe(&b, 2, i % 10 < 6 ? 1 : 0);   /* 60 % at position 0 */
    const int lone = sp_adapt_choose(&b), shared = sp_adapt_choose_in(&b, 3, 3.0);
    assert_true(lone >= 1 && shared >= 1);
    for (int i = 0; i < 300; i++) sp_adapt_absorb_cost(&b, 1.5);   /* 1.5 passes per proposal */
    assert_int_equal(sp_adapt_choose(&b), lone);
    assert_int_equal(sp_adapt_choose_in(&b, 3, 3.0), 0);
    sp_adapt_absorb_cost(&b, -1.0);                                 /* ignored */
    assert_int_equal(sp_adapt_choose_in(&b, 3, 3.0), 0);
}

static void test_stats(void **st) {
    (void)st;
    sp_spec_stats a = { 0 }, b = { 0 };
    b.requests = 1; b.rounds = 10; b.spec_rounds = 8; b.drafted = 40; b.accepted = 20; b.forwards = 10; b.emitted = 31;
    b.pos_drafted[0] = 8; b.pos_accepted[0] = 6; b.total_ns = 2000000000ull;
    sp_stats_add(&a, &b);
    sp_stats_add(&a, &b);
    assert_int_equal(a.drafted, 80);
    assert_float_equal(sp_stats_accept_rate(&a), 0.5, 1e-12);
    assert_float_equal(sp_stats_mean_accept_len(&a), 1.0 + 40.0 / 16.0, 1e-12);
    assert_float_equal(sp_stats_tokens_per_forward(&a), 60.0 / 20.0, 1e-12);
    assert_float_equal(sp_stats_decode_tps(&a), 62.0 / 4.0, 1e-9);
    char buf[1024];
    sp_stats_format(&a, "ngram", buf, sizeof buf);
    assert_non_null(strstr(buf, "spec ngram: 20 rounds (16 drafting, 0 gated plain, 0 cheap only), drafted 80, accepted 40 (50.0%)"));
    assert_non_null(strstr(buf, "accept by position: 0.75"));
}

/* The gate under a simulated clock: each step's seconds and tokens come
 * from its mode's true rate (tps[mode]), with a first step after each
 * switch that pays for the other mode, which must not be measured. */
typedef struct gate_sim { double tps[3], switch_s; int steps[3]; } gate_sim;

static void gate_run(sp_spec_gate *g, gate_sim *m, int n_seqs, int steps) {
    int last = -1;
    for (int i = 0; i < steps; i++) {
        const sp_gate_mode mode = sp_spec_gate_next(g, n_seqs);
        const double tokens = mode == SP_GATE_PLAIN ? 1.0 : 1.5;    /* tokens per step */
        double s = tokens / m->tps[mode];
        if (last >= 0 && last != (int)mode) s += m->switch_s;       /* a catch-up after a switch */
        last = (int)mode;
        m->steps[mode]++;
        sp_spec_gate_observe(g, n_seqs, mode, tokens, s);
    }
}

static void gate_reset(gate_sim *m) { m->steps[0] = m->steps[1] = m->steps[2] = 0; }

static void test_spec_gate(void **st) {
    (void)st;
    sp_spec_gate g;
    /* drafting pays (1.3x): the gate keeps it on, probing plain in at most
     * an eighth of the steps once past its first cycles */
    sp_spec_gate_init(&g, false);
    gate_sim a = { { 100, 0, 130 }, 0.05, { 0 } };
    gate_run(&g, &a, 1, 32);
    gate_reset(&a);
    gate_run(&g, &a, 1, 960);
    assert_true(a.steps[SP_GATE_PLAIN] <= 960 / 8);
    assert_int_equal(a.steps[SP_GATE_CHEAP], 0);     /* not a mode of this gate */
    /* the rates are the true ones: the switch steps' catch-up (50 ms, 5x a
     * step) was not measured */
    assert_true(fabs(sp_spec_gate_rate(&g, 1, SP_GATE_ALL) - 130) < 1e-6);
    assert_true(fabs(sp_spec_gate_rate(&g, 1, SP_GATE_PLAIN) - 100) < 1e-6);
    /* drafting loses (0.9x): after the first cycles the gate runs plain
     * and probes drafting in at most an eighth of the steps */
    sp_spec_gate_init(&g, false);
    gate_sim b = { { 100, 0, 90 }, 0.05, { 0 } };
    gate_run(&g, &b, 1, 32);
    gate_reset(&b);
    gate_run(&g, &b, 1, 960);
    assert_true(b.steps[SP_GATE_ALL] <= 960 / 8);
    /* buckets are apart: four sequences where drafting loses do not turn
     * it off for one sequence where it pays */
    gate_sim c = { { 100, 0, 60 }, 0, { 0 } };
    sp_spec_gate_init(&g, false);
    gate_run(&g, &c, 4, 640);
    gate_sim d = { { 100, 0, 130 }, 0, { 0 } };
    gate_run(&g, &d, 1, 640);
    assert_true(d.steps[SP_GATE_ALL] > 640 * 3 / 4);
    assert_true(c.steps[SP_GATE_PLAIN] > 640 * 3 / 4);
    assert_true(sp_spec_gate_rate(&g, 2, SP_GATE_ALL) == 0);   /* an unmeasured bucket knows nothing */
    /* the mode changes when the text does: drafting that paid and stops
     * paying is turned off within a few cycles */
    gate_sim e = { { 100, 0, 150 }, 0, { 0 } };
    sp_spec_gate_init(&g, false);
    gate_run(&g, &e, 1, 480);
    e.tps[SP_GATE_ALL] = 70;
    gate_run(&g, &e, 1, 480);
    gate_reset(&e);
    gate_run(&g, &e, 1, 480);
    assert_true(e.steps[SP_GATE_ALL] <= 480 / 8);
    /* a clear drafting lead (2x) backs the probes off: after the first
     * cycles plain runs in at most 1 step of 24 (6 of each 174) */
    sp_spec_gate_init(&g, false);
    gate_sim k = { { 100, 0, 200 }, 0.02, { 0 } };
    gate_run(&g, &k, 1, 300);
    gate_reset(&k);
    gate_run(&g, &k, 1, 1740);
    assert_true(k.steps[SP_GATE_PLAIN] > 0 && k.steps[SP_GATE_PLAIN] <= 1740 / 24);
    /* ... and a leader that slows down hands over within the usual cycle
     * (42 steps and the probes), not at the end of its long one */
    k.tps[SP_GATE_ALL] = 60;
    gate_reset(&k);
    gate_run(&g, &k, 1, 100);
    assert_true(k.steps[SP_GATE_ALL] < 60);
    /* a plain leader never backs off: drafting is probed in 6 steps of
     * every 48, however clearly it loses */
    sp_spec_gate_init(&g, false);
    gate_sim l = { { 100, 0, 50 }, 0.02, { 0 } };
    gate_run(&g, &l, 1, 300);
    gate_reset(&l);
    gate_run(&g, &l, 1, 960);
    assert_true(l.steps[SP_GATE_ALL] >= 960 / 8 - 6);
    /* three modes (a combination led by a cheap drafter): the cheap one
     * alone is fastest, so it leads; each other mode is probed */
    sp_spec_gate_init(&g, true);
    gate_sim f = { { 100, 136, 127 }, 0.02, { 0 } };
    gate_run(&g, &f, 1, 64);
    gate_reset(&f);
    gate_run(&g, &f, 1, 1080);
    assert_true(f.steps[SP_GATE_CHEAP] >= 1080 * 3 / 4);
    assert_true(f.steps[SP_GATE_PLAIN] > 0 && f.steps[SP_GATE_ALL] > 0);
    assert_true(fabs(sp_spec_gate_rate(&g, 1, SP_GATE_CHEAP) - 136) < 1e-6);
    /* and when all members pay more, all of them lead */
    sp_spec_gate_init(&g, true);
    gate_sim h = { { 100, 115, 127 }, 0.02, { 0 } };
    gate_run(&g, &h, 1, 64);
    gate_reset(&h);
    gate_run(&g, &h, 1, 1080);
    assert_true(h.steps[SP_GATE_ALL] >= 1080 * 3 / 4);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_basic), cmocka_unit_test(test_ngram_matches_reference),
        cmocka_unit_test(test_ngram_long_history), cmocka_unit_test(test_ngram_checkpoint),
        cmocka_unit_test(test_ngram_tree), cmocka_unit_test(test_ngram_bad_params), cmocka_unit_test(test_capability_refusal),
        cmocka_unit_test(test_combine_first_wins), cmocka_unit_test(test_combine_estimates),
        cmocka_unit_test(test_combine_record), cmocka_unit_test(test_combine_gate_members),
        cmocka_unit_test(test_combine_feeds_tap_readers), cmocka_unit_test(test_combine_sure),
        cmocka_unit_test(test_specsample_distribution), cmocka_unit_test(test_specsample_degenerate),
        cmocka_unit_test(test_adapt), cmocka_unit_test(test_adapt_in_pass),
        cmocka_unit_test(test_stats), cmocka_unit_test(test_spec_gate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
