/* The cross-vocabulary model drafter (universal assisted generation): a
 * draft model whose tokenizer differs from the target's.  Greedy only.
 *
 * The draft works on text: the target history is kept as text (the
 * target's pieces); the draft's tokens are that text re-tokenized with the
 * draft tokenizer, re-tokenizing only a tail (from a few tokens back:
 * earlier tokens are stable across word boundaries); the draft cache is
 * trimmed to the common prefix with what it holds.  The draft's greedy
 * continuation becomes text, which is tokenized for the target together
 * with the text of the last few target tokens: the proposal is what
 * follows them, when they come out as the very same target tokens (else
 * no proposal this round).  The last proposal token is dropped: the
 * draft's text may end inside a word.  Drafts are only proposals, so none
 * of this affects the output; it only decides how many are accepted.
 */
#include "speculative/draft_model_internal.h"

#include <stdlib.h>
#include <string.h>

#define DM_TAIL 8                /* draft tokens re-tokenized from */
#define DM_ANCHOR 3              /* target tokens the draft text is re-tokenized after */

typedef struct cross_draft {
    dm_draft core;               /* first: the kind's operations get &core */
    const sp_tokenizer *ttok;    /* the target's tokenizer, borrowed */
    char *text;                  /* the target history as text */
    size_t n_text, cap_text;
    int32_t *thist;              /* the target history as target tokens */
    int n_thist, cap_thist;
    size_t *dstart;              /* text offset where each draft token (core.hist) starts */
    int cap_dstart;
    int n_dsync;                 /* core.hist[0..n_dsync) came from the text (dstart valid);
                                  * the drafted tokens after them have no offsets */
} cross_draft;

static cross_draft *cross_of(dm_draft *g) {
    return (cross_draft *)g;     /* core is the first member */
}

/* ---------------------------------------------------------------------------
 * The target history as text
 * ------------------------------------------------------------------------ */

static void text_push(cross_draft *x, const char *s, size_t n) {
    SP_VEC_GROW(x->text, x->cap_text, x->n_text + n + 1);
    memcpy(x->text + x->n_text, s, n);
    x->n_text += n;
    x->text[x->n_text] = 0;
}

/* Appends target tokens to the target history (ids and text). */
static void target_push(cross_draft *x, const int32_t *t, int n) {
    sp_dm_ints_push(&x->thist, &x->n_thist, &x->cap_thist, t, n);
    char buf[1024];
    for (int i = 0; i < n; i++) {
        size_t len = sp_token_piece(x->ttok, t[i], true, buf, sizeof buf);
        text_push(x, buf, len < sizeof buf ? len : sizeof buf);
    }
}

/* ---------------------------------------------------------------------------
 * Alignment
 * ------------------------------------------------------------------------ */

/* Records the text offset of the draft tokens hist[keep..n_hist), which
 * start at text offset `from`, from their pieces. */
static void note_offsets(cross_draft *x, int keep, size_t from) {
    dm_draft *g = &x->core;
    SP_VEC_GROW(x->dstart, x->cap_dstart, g->n_hist + 1);
    size_t off = from;
    char buf[1024];
    for (int i = keep; i < g->n_hist; i++) {
        x->dstart[i] = off;
        off += sp_token_piece(g->dm->tok, g->hist[i], true, buf, sizeof buf);
    }
    x->n_dsync = g->n_hist;
}

/* Re-tokenizes the tail of the target text for the draft and trims the
 * draft cache to the prefix it still shares with the new tokens. */
static int sync_draft_tokens(cross_draft *x, sp_err *err) {
    dm_draft *g = &x->core;
    /* re-tokenize from DM_TAIL tokens before the end of what came from the
     * text: the drafted tokens after it (as many as a draft ran, up to
     * SP_MAX_DRAFT + DM_EXTRA) have no text offset */
    const int synced = g->n_hist < x->n_dsync ? g->n_hist : x->n_dsync;
    int keep = synced > DM_TAIL ? synced - DM_TAIL : 0;
    size_t from = keep ? x->dstart[keep] : 0;
    sp_tokens t = { 0 };
    const bool bos = keep == 0 && sp_tokenizer_add_bos(g->dm->tok);
    if (sp_tokenize(g->dm->tok, x->text + from, x->n_text - from, bos, false, &t, err)) return -1;
    /* common prefix with what the cache holds */
    int same = keep;
    while (same - keep < t.n && same < g->n_cached && g->hist[same] == t.ids[same - keep]) same++;
    if (same < g->n_cached) {
        sp_kv_trim(g->kv, same);
        g->n_cached = same;
    }
    g->n_hist = keep;
    sp_dm_ints_push(&g->hist, &g->n_hist, &g->cap_hist, t.ids, t.n);
    note_offsets(x, keep, from);
    sp_tokens_free(&t);
    return 0;
}

/* Target tokens that continue the history with the draft's text. */
static int target_proposal(cross_draft *x, int max_n, int32_t *out, sp_err *err) {
    const dm_draft *g = &x->core;
    char draft_text[4096];
    size_t n = 0;
    for (int i = 0; i < g->n_out && n < sizeof draft_text; i++)
        n += sp_token_piece(g->dm->tok, g->out[i], false, draft_text + n, sizeof draft_text - n);
    if (n > sizeof draft_text) n = sizeof draft_text;
    return sp_xvocab_continue(x->ttok, x->thist, x->n_thist, draft_text, n, max_n, out, err);
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
 * Operations
 * ------------------------------------------------------------------------ */

static int cross_prefill(dm_draft *g, const int32_t *prompt, int n, sp_err *err) {
    cross_draft *x = cross_of(g);
    sp_dm_reset(g);
    x->n_dsync = 0;
    x->n_text = 0;
    x->n_thist = 0;
    target_push(x, prompt, n);
    if (sync_draft_tokens(x, err)) return -1;
    return sp_dm_prefill_cache(g, err);
}

static int cross_propose(dm_draft *g, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                         sp_err *err) {
    cross_draft *x = cross_of(g);
    *out = (sp_proposal){ 0 };
    g->n_out = 0;
    target_push(x, feed, n_feed);
    if (max_n <= 0) return 0;
    if (sync_draft_tokens(x, err)) return -1;
    /* a few more draft tokens than asked: re-tokenizing loses the last */
    if (sp_dm_draft_tokens(g, max_n + DM_EXTRA, err)) return -1;
    int32_t prop[SP_MAX_DRAFT + DM_EXTRA + 1];
    int m = g->n_out ? target_proposal(x, max_n, prop, err) : 0;
    if (m < 0) return -1;
    /* the draft cache keeps the drafted tokens it ran: the next sync
     * trims whatever the target did not confirm */
    const int ran = g->kv->n - g->n_hist;
    sp_dm_ints_push(&g->hist, &g->n_hist, &g->cap_hist, g->out, ran);
    g->n_cached = g->n_hist;
    /* g->out now holds the proposal in target tokens */
    memcpy(g->out, prop, (size_t)m * sizeof(int32_t));
    g->n_out = m;
    *out = (sp_proposal){ .n = m, .tokens = g->out };
    return 0;
}

static void cross_commit(dm_draft *g, int n_drafted, int n_accepted) {
    (void)n_drafted;
    /* the accepted target tokens join the target history; the draft side
     * catches up at the next sync (chains only: this drafter never
     * proposes trees) */
    target_push(cross_of(g), g->out, n_accepted);
    g->n_out = 0;
}

static void cross_close(dm_draft *g) {
    cross_draft *x = cross_of(g);
    free(x->text);
    free(x->thist);
    free(x->dstart);
    sp_dm_core_fini(g);
    free(x);
}

static const dm_kind cross_kind = {
    .prefill = cross_prefill, .propose = cross_propose, .commit = cross_commit, .close = cross_close,
};

dm_draft *sp_dm_cross_open(dm_drafter *dm, const sp_target *t, sp_err *err) {
    (void)err;                   /* nothing to refuse: open checked the tokenizer */
    cross_draft *x = sp_xcalloc(1, sizeof *x);
    x->ttok = t->tok;
    sp_dm_core_init(&x->core, dm, &cross_kind);
    return &x->core;
}
