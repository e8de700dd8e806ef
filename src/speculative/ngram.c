/* Prompt-lookup drafting ("ngram").
 *
 * The draft's history is prompt + emitted tokens (rebuilt from the feed and
 * commit discipline of the seam: feed tokens and accepted drafts are
 * appended, rejected drafts never are).  To propose, the trailing k-gram of
 * the history is looked up for k = max..min; the first (earliest)
 * occurrence wins, and the tokens that followed it are proposed.  That is
 * the order of Saxena's prompt lookup decoding and vLLM's ngram proposer.
 *
 * The index maps each k-gram to its first start position.  It holds every
 * k-gram that ends at least one token before the end of the history, so a
 * match always has a continuation; appending a token inserts (max-min+1)
 * k-grams, and a proposal is max-min+1 lookups: microseconds at any
 * history length.
 *
 * With a tree width W > 1 the proposal is a token tree: the continuations
 * of the first W occurrences of the longest matching k-gram (each at most
 * max_n / W tokens), merged where they share a prefix.  Every slot keeps
 * the chain of its k-gram's occurrences (first, next, ..., last) for that.
 */
#include "speculative/speculative.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ngram_drafter {
    int min, max, width;
} ngram_drafter;

typedef struct ngram_slot {
    uint64_t h;                  /* hash of (k, tokens) */
    int32_t start1;              /* first start position + 1; 0 = empty */
    int32_t k;
    int32_t last;                /* last start position of this k-gram */
} ngram_slot;

typedef struct ngram_draft {
    int min, max, width;
    int32_t *next;               /* (cap, max-min+1) next start of the same k-gram, -1 = none */
    int32_t *hist;               /* (cap) prompt + emitted tokens */
    int n, cap;
    int indexed;                 /* k-grams ending before position `indexed` are in the table */
    ngram_slot *slots;           /* open addressing table */
    size_t n_slots, used;
    int32_t out[SP_MAX_DRAFT];
    int32_t parent[SP_MAX_DRAFT];
    int n_out;
} ngram_draft;

static uint64_t gram_hash(const int32_t *t, int k) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)k;
    for (int i = 0; i < k; i++) h = sp_hash64(h ^ (uint32_t)t[i]);
    return h;
}

static void table_grow(ngram_draft *g);

/* Finds the slot of the k-gram t[0..k) (its first occurrence) or the empty
 * slot where it would go. */
static size_t table_find(const ngram_draft *g, const int32_t *t, int k, uint64_t h) {
    size_t mask = g->n_slots - 1, i = (size_t)h & mask;
    for (;;) {
        const ngram_slot *s = &g->slots[i];
        if (!s->start1) return i;
        if (s->h == h && s->k == k &&
            memcmp(g->hist + s->start1 - 1, t, (size_t)k * sizeof(int32_t)) == 0)
            return i;
        i = (i + 1) & mask;
    }
}

static void table_insert(ngram_draft *g, int start, int k) {
    if ((g->used + 1) * 2 > g->n_slots) table_grow(g);
    const int32_t *t = g->hist + start;
    uint64_t h = gram_hash(t, k);
    size_t i = table_find(g, t, k, h);
    const int nk = g->max - g->min + 1;
    g->next[(size_t)start * nk + (k - g->min)] = -1;
    if (g->slots[i].start1) {           /* keep the first occurrence, chain this one */
        g->next[(size_t)g->slots[i].last * nk + (k - g->min)] = start;
        g->slots[i].last = start;
        return;
    }
    g->slots[i] = (ngram_slot){ h, start + 1, k, start };
    g->used++;
}

static void table_grow(ngram_draft *g) {
    size_t old_n = g->n_slots;
    ngram_slot *old = g->slots;
    g->n_slots = old_n ? old_n * 2 : 1024;
    g->slots = sp_xcalloc(g->n_slots, sizeof *g->slots);
    for (size_t i = 0; i < old_n; i++) {
        if (!old[i].start1) continue;
        size_t j = (size_t)old[i].h & (g->n_slots - 1);
        while (g->slots[j].start1) j = (j + 1) & (g->n_slots - 1);
        g->slots[j] = old[i];
    }
    free(old);
}

/* Indexes every k-gram ending at or before position n - 2. */
static void index_upto(ngram_draft *g) {
    for (; g->indexed < g->n - 1; g->indexed++) {
        int end = g->indexed;                  /* last token of the k-grams */
        for (int k = g->min; k <= g->max; k++)
            if (end - k + 1 >= 0) table_insert(g, end - k + 1, k);
    }
}

/* Room for `need` positions in hist and next, which share the capacity
 * (next holds max - min + 1 entries per position, row by row, so a
 * reallocation keeps them in place). */
static void hist_reserve(ngram_draft *g, int need) {
    const int old = g->cap;
    SP_VEC_GROW(g->hist, g->cap, need);
    if (g->cap != old)
        g->next = sp_xrealloc(g->next, (size_t)g->cap * (size_t)(g->max - g->min + 1) * sizeof(int32_t));
}

static void hist_push(ngram_draft *g, const int32_t *t, int n) {
    hist_reserve(g, g->n + n);
    memcpy(g->hist + g->n, t, (size_t)n * sizeof(int32_t));
    g->n += n;
}

static void hist_reset(ngram_draft *g) {
    g->n = 0;
    g->indexed = 0;
    g->used = 0;
    if (g->slots) memset(g->slots, 0, g->n_slots * sizeof *g->slots);
}

/* Adds a continuation to the proposal tree, sharing existing prefixes;
 * stops at the node budget. */
static void tree_add(ngram_draft *g, const int32_t *cont, int len, int budget) {
    int parent = -1;
    for (int i = 0; i < len; i++) {
        int found = -1;
        for (int j = parent + 1; j < g->n_out; j++)
            if (g->parent[j] == parent && g->out[j] == cont[i]) { found = j; break; }
        if (found < 0) {
            if (g->n_out == budget) return;
            found = g->n_out++;
            g->out[found] = cont[i];
            g->parent[found] = parent;
        }
        parent = found;
    }
}

/* The proposal for the history's tail, from the k-grams indexed so far. */
static int lookup_indexed(ngram_draft *g, int max_n) {
    const int L = g->n, nk = g->max - g->min + 1;
    g->n_out = 0;
    for (int k = g->max < L - 1 ? g->max : L - 1; k >= g->min; k--) {
        const int32_t *tail = g->hist + L - k;
        size_t i = table_find(g, tail, k, gram_hash(tail, k));
        if (!g->slots[i].start1) continue;
        int occ = g->slots[i].start1 - 1;
        if (g->width <= 1) {
            int start = occ + k;                 /* first token after the match */
            int n = L - start < max_n ? L - start : max_n;
            memcpy(g->out, g->hist + start, (size_t)n * sizeof(int32_t));
            g->n_out = n;
            return n;
        }
        const int per = max_n / g->width > 0 ? max_n / g->width : 1;
        for (int w = 0; w < g->width && occ >= 0 && g->n_out < max_n; w++) {
            int start = occ + k;
            int n = L - start < per ? L - start : per;
            tree_add(g, g->hist + start, n, max_n);
            occ = g->next[(size_t)occ * nk + (k - g->min)];
        }
        return g->n_out;
    }
    return 0;
}

static int ngram_lookup(ngram_draft *g, int max_n) {
    index_upto(g);
    return lookup_indexed(g, max_n);
}

/* ---- seam operations ---- */

static sp_draft *ngram_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    (void)t; (void)err;
    const ngram_drafter *cfg = d->impl;
    sp_draft *s = sp_xcalloc(1, sizeof *s);
    ngram_draft *g = sp_xcalloc(1, sizeof *g);
    g->min = cfg->min;
    g->max = cfg->max;
    g->width = cfg->width;
    s->drafter = d;
    s->impl = g;
    return s;
}

static int ngram_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    (void)taps; (void)err;
    ngram_draft *g = s->impl;
    hist_reset(g);
    hist_push(g, prompt, n);
    return 0;
}

static int ngram_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                         sp_err *err) {
    (void)err;
    ngram_draft *g = s->impl;
    hist_push(g, feed, n_feed);
    g->n_out = max_n > 0 ? ngram_lookup(g, max_n < SP_MAX_DRAFT ? max_n : SP_MAX_DRAFT) : 0;
    *out = (sp_proposal){ .n = g->n_out, .tokens = g->out, .parent = g->width > 1 ? g->parent : NULL };
    return 0;
}

/* The history's k-grams are indexed, then `ahead` is appended for the
 * lookup only (never indexed) and taken off again; out holds ahead + the
 * proposal, so commit pushes the accepted part of both. */
static int ngram_propose_ahead(sp_draft *s, const int32_t *feed, int n_feed, const int32_t *ahead, int n_ahead,
                               int max_n, sp_proposal *out, sp_err *err) {
    (void)err;
    ngram_draft *g = s->impl;
    hist_push(g, feed, n_feed);
    index_upto(g);
    hist_push(g, ahead, n_ahead);
    const int width = g->width;
    g->width = 1;                                /* chains only after a forced span */
    const int n = max_n > 0 ? lookup_indexed(g, max_n) : 0;
    g->width = width;
    g->n -= n_ahead;
    memmove(g->out + n_ahead, g->out, (size_t)n * sizeof(int32_t));
    memcpy(g->out, ahead, (size_t)n_ahead * sizeof(int32_t));
    g->n_out = n_ahead + n;
    *out = (sp_proposal){ .n = n, .tokens = g->out + n_ahead };
    return 0;
}

static void ngram_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path,
                         const sp_taps *v) {
    (void)v;
    ngram_draft *g = s->impl;
    (void)n_drafted;
    for (int i = 0; i < n_accepted; i++) hist_push(g, &g->out[path ? path[i] : i], 1);
    g->n_out = 0;
}

static int ngram_checkpoint(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err) {
    (void)err;
    ngram_draft *g = s->impl;
    size_t h = sp_ckpt_header(s->drafter, NULL, 0);
    *len = h + (size_t)g->n * sizeof(int32_t);
    *buf = sp_xmalloc(*len);
    sp_ckpt_header(s->drafter, *buf, h);
    memcpy(*buf + h, g->hist, (size_t)g->n * sizeof(int32_t));
    return 0;
}

static int ngram_restore(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err) {
    ngram_draft *g = s->impl;
    long off = sp_ckpt_check(s->drafter, buf, len, err);
    if (off < 0) return -1;
    size_t bytes = len - (size_t)off;
    if (bytes % sizeof(int32_t)) return sp_err_set(err, "ngram checkpoint: truncated history");
    hist_reset(g);
    int n = (int)(bytes / sizeof(int32_t));
    hist_reserve(g, n);
    memcpy(g->hist, buf + off, bytes);
    g->n = n;
    return 0;
}

static void ngram_close(sp_draft *s) {
    ngram_draft *g = s->impl;
    free(g->hist);
    free(g->next);
    free(g->slots);
    free(g);
    free(s);
}

static void ngram_free(sp_drafter *d) {
    free(d->impl);
    free(d);
}

static const sp_drafter_ops ngram_ops = {
    .open = ngram_open, .prefill = ngram_prefill, .propose = ngram_propose,
    .propose_ahead = ngram_propose_ahead,
    .commit = ngram_commit, .checkpoint = ngram_checkpoint, .restore = ngram_restore,
    .close = ngram_close, .free = ngram_free,
};

sp_drafter *sp_ngram_create(int min_ngram, int max_ngram, sp_err *err) {
    return sp_ngram_create_tree(min_ngram, max_ngram, 1, err);
}

sp_drafter *sp_ngram_create_tree(int min_ngram, int max_ngram, int width, sp_err *err) {
    if (width < 1 || width > 8) {
        sp_err_set(err, "ngram: tree width must be in [1, 8] (got %d)", width);
        return NULL;
    }
    if (min_ngram < 1 || max_ngram < min_ngram || max_ngram > 64) {
        sp_err_set(err, "ngram: need 1 <= ngram-min <= ngram-max <= 64 (got %d, %d)", min_ngram,
                   max_ngram);
        return NULL;
    }
    sp_drafter *d = sp_drafter_alloc();
    ngram_drafter *c = sp_xmalloc(sizeof *c);
    c->min = min_ngram;
    c->max = max_ngram;
    c->width = width;
    d->ops = &ngram_ops;
    d->impl = c;
    d->needs = 0;
    d->cheap = true;
    snprintf(d->name, sizeof d->name, "ngram");
    snprintf(d->ns, sizeof d->ns, "ngram-history-v1:min=%d:max=%d", min_ngram, max_ngram);
    /* the tree width changes proposals, not the state: same namespace */
    return d;
}
