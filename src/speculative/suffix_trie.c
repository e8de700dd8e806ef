/* The depth-bounded suffix trie behind the `suffix` drafter; see
 * suffix_internal.h for what it stores and guarantees. */
#include "speculative/suffix_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define ROOT 0u

typedef struct sfx_node {
    int32_t tok;                 /* last token of the string */
    uint32_t count;              /* occurrences of the string (tails: 1) */
    uint32_t child;              /* first child, NIL = none */
    uint32_t next, prev;         /* siblings; `next` also links the free list */
    uint32_t occ_seq;            /* latest occurrence: sequence id ... */
    int32_t occ_start;           /* ... and start position */
    uint16_t depth;              /* string length */
    uint8_t tail;                /* 1: stands for the unique continuation of occ */
    uint8_t live;
} sfx_node;

typedef struct sfx_edge {        /* (parent, token) -> child; child NIL = empty slot */
    uint32_t parent;
    int32_t tok;
    uint32_t child;
} sfx_edge;

typedef struct sfx_seq {
    uint32_t id;                 /* ids grow by one per sequence, so index = id - first id */
    int32_t *tok;                /* (cap) owned */
    int n, cap;
} sfx_seq;

struct sp_sfx {
    int D;                       /* depth bound */
    sfx_node *nodes;             /* (node_cap) pool; node 0 is the root */
    uint32_t node_cap, node_hw, free_head;
    int64_t live;                /* live nodes, root included */
    sfx_edge *edges;             /* (edge_cap) open addressing, linear probing */
    size_t edge_cap, edge_used;
    sfx_seq *seqs;               /* (seq_cap) retained sequences, oldest first */
    int n_seqs, seq_cap;
    uint32_t next_id;
    bool open;                   /* the last sequence is still being appended to */
    uint32_t *act;               /* (D) deepest node of the active suffix starting at p, slot p % D */
    int64_t tokens;
    uint32_t *stack;             /* (stack_cap) scratch for subtree removal */
    size_t stack_cap;
};

/* ----------------------------------------------------------------------------
 * Sequences
 * ------------------------------------------------------------------------- */

static const sfx_seq *seq_by_id(const sp_sfx *t, uint32_t id) {
    if (!t->n_seqs) return NULL;
    uint32_t i = id - t->seqs[0].id;
    return i < (uint32_t)t->n_seqs ? &t->seqs[i] : NULL;
}

/* Tokens of the occurrence (seq, start) that are in the trie's depth range:
 * min(D, sequence length - start). */
static int occ_extent(const sp_sfx *t, uint32_t seq, int32_t start) {
    const sfx_seq *s = seq_by_id(t, seq);
    int e = s ? s->n - start : 0;
    return e < t->D ? e : t->D;
}

/* ----------------------------------------------------------------------------
 * Edge hash: (parent, token) -> child
 * ------------------------------------------------------------------------- */

static size_t edge_home(const sp_sfx *t, uint32_t parent, int32_t tok) {
    return (size_t)sp_hash64(((uint64_t)parent << 32) ^ (uint32_t)tok) & (t->edge_cap - 1);
}

static uint32_t find_child(const sp_sfx *t, uint32_t parent, int32_t tok) {
    for (size_t i = edge_home(t, parent, tok);; i = (i + 1) & (t->edge_cap - 1)) {
        const sfx_edge *e = &t->edges[i];
        if (e->child == NIL) return NIL;
        if (e->parent == parent && e->tok == tok) return e->child;
    }
}

static void edge_put_raw(sp_sfx *t, sfx_edge e) {
    size_t i = edge_home(t, e.parent, e.tok);
    while (t->edges[i].child != NIL) i = (i + 1) & (t->edge_cap - 1);
    t->edges[i] = e;
}

static void edges_resize(sp_sfx *t, size_t cap) {
    sfx_edge *old = t->edges;
    size_t old_cap = t->edge_cap;
    t->edges = sp_xmalloc(cap * sizeof *t->edges);
    for (size_t i = 0; i < cap; i++) t->edges[i].child = NIL;
    t->edge_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].child != NIL) edge_put_raw(t, old[i]);
    free(old);
}

static void edge_put(sp_sfx *t, uint32_t parent, int32_t tok, uint32_t child) {
    if ((t->edge_used + 1) * 2 > t->edge_cap) edges_resize(t, t->edge_cap * 2);
    edge_put_raw(t, (sfx_edge){ parent, tok, child });
    t->edge_used++;
}

/* Deletes the edge with backward-shift deletion, so that no tombstones
 * accumulate however many nodes come and go. */
static void edge_del(sp_sfx *t, uint32_t parent, int32_t tok) {
    const size_t mask = t->edge_cap - 1;
    size_t i = edge_home(t, parent, tok);
    while (!(t->edges[i].parent == parent && t->edges[i].tok == tok)) {
        assert(t->edges[i].child != NIL);
        i = (i + 1) & mask;
    }
    for (size_t j = i;;) {
        j = (j + 1) & mask;
        if (t->edges[j].child == NIL) break;
        size_t k = edge_home(t, t->edges[j].parent, t->edges[j].tok);
        /* entry j may stay if its home lies cyclically in (i, j] */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        t->edges[i] = t->edges[j];
        i = j;
    }
    t->edges[i].child = NIL;
    t->edge_used--;
}

/* ----------------------------------------------------------------------------
 * Nodes
 * ------------------------------------------------------------------------- */

static uint32_t node_new(sp_sfx *t, int32_t tok, int depth, uint32_t seq, int32_t start) {
    uint32_t x;
    if (t->free_head != NIL) {
        x = t->free_head;
        t->free_head = t->nodes[x].next;
    } else {
        SP_VEC_GROW(t->nodes, t->node_cap, t->node_hw + 1);
        x = t->node_hw++;
    }
    t->nodes[x] = (sfx_node){ .tok = tok, .count = 1, .child = NIL, .next = NIL, .prev = NIL,
                              .occ_seq = seq, .occ_start = start, .depth = (uint16_t)depth,
                              .tail = 1, .live = 1 };
    t->live++;
    return x;
}

static void node_link(sp_sfx *t, uint32_t parent, uint32_t c) {
    sfx_node *n = &t->nodes[c];
    n->prev = NIL;
    n->next = t->nodes[parent].child;
    if (n->next != NIL) t->nodes[n->next].prev = c;
    t->nodes[parent].child = c;
    edge_put(t, parent, n->tok, c);
}

static void node_unlink(sp_sfx *t, uint32_t parent, uint32_t c) {
    sfx_node *n = &t->nodes[c];
    if (n->prev != NIL) t->nodes[n->prev].next = n->next;
    else t->nodes[parent].child = n->next;
    if (n->next != NIL) t->nodes[n->next].prev = n->prev;
    edge_del(t, parent, n->tok);
}

static void node_release(sp_sfx *t, uint32_t x) {
    t->nodes[x].live = 0;
    t->nodes[x].next = t->free_head;
    t->free_head = x;
    t->live--;
}

/* Frees c (already unlinked from its parent) and everything below it. */
static void free_subtree(sp_sfx *t, uint32_t c) {
    size_t n = 0;
    t->stack[n++] = c;
    while (n) {
        uint32_t x = t->stack[--n];
        for (uint32_t y = t->nodes[x].child; y != NIL; y = t->nodes[y].next) {
            edge_del(t, x, t->nodes[y].tok);
            SP_VEC_GROW(t->stack, t->stack_cap, n + 1);
            t->stack[n++] = y;
        }
        node_release(t, x);
    }
}

/* ----------------------------------------------------------------------------
 * Creation
 * ------------------------------------------------------------------------- */

sp_sfx *sp_sfx_create(int max_depth) {
    assert(max_depth >= 2 && max_depth <= SP_SFX_MAX_DEPTH);
    sp_sfx *t = sp_xcalloc(1, sizeof *t);
    t->D = max_depth;
    t->node_cap = 256;
    t->nodes = sp_xmalloc((size_t)t->node_cap * sizeof *t->nodes);
    t->free_head = NIL;
    t->nodes[ROOT] = (sfx_node){ .tok = -1, .count = 0, .child = NIL, .next = NIL, .prev = NIL,
                                 .occ_seq = 0, .occ_start = 0, .depth = 0, .tail = 0, .live = 1 };
    t->node_hw = 1;
    t->live = 1;
    t->edge_cap = 512;
    t->edges = sp_xmalloc(t->edge_cap * sizeof *t->edges);
    for (size_t i = 0; i < t->edge_cap; i++) t->edges[i].child = NIL;
    t->act = sp_xcalloc((size_t)max_depth, sizeof *t->act);
    t->stack_cap = 64;
    t->stack = sp_xmalloc(t->stack_cap * sizeof *t->stack);
    return t;
}

void sp_sfx_free(sp_sfx *t) {
    if (!t) return;
    for (int i = 0; i < t->n_seqs; i++) free(t->seqs[i].tok);
    free(t->seqs);
    free(t->nodes);
    free(t->edges);
    free(t->act);
    free(t->stack);
    free(t);
}

int sp_sfx_max_depth(const sp_sfx *t) { return t->D; }
int sp_sfx_n_seqs(const sp_sfx *t) { return t->n_seqs; }
int64_t sp_sfx_tokens(const sp_sfx *t) { return t->tokens; }
int64_t sp_sfx_nodes(const sp_sfx *t) { return t->live; }

size_t sp_sfx_bytes(const sp_sfx *t) {
    size_t b = sizeof *t + (size_t)t->node_cap * sizeof *t->nodes + t->edge_cap * sizeof *t->edges +
               (size_t)t->seq_cap * sizeof *t->seqs + (size_t)t->D * sizeof *t->act +
               t->stack_cap * sizeof *t->stack;
    for (int i = 0; i < t->n_seqs; i++) b += (size_t)t->seqs[i].cap * sizeof(int32_t);
    return b;
}

const int32_t *sp_sfx_seq(const sp_sfx *t, int i, int *n) {
    assert(i >= 0 && i < t->n_seqs);
    *n = t->seqs[i].n;
    return t->seqs[i].tok;
}

/* ----------------------------------------------------------------------------
 * Appending
 * ------------------------------------------------------------------------- */

void sp_sfx_open_seq(sp_sfx *t) {
    sp_sfx_close_seq(t);
    SP_VEC_GROW(t->seqs, t->seq_cap, t->n_seqs + 1);
    t->seqs[t->n_seqs++] = (sfx_seq){ .id = t->next_id++ };
    t->open = true;
}

void sp_sfx_close_seq(sp_sfx *t) {
    if (!t->open) return;
    sfx_seq *s = &t->seqs[t->n_seqs - 1];
    if (s->cap > s->n && s->n > 0) {    /* closed sequences never grow again */
        s->cap = s->n;
        s->tok = sp_xrealloc(s->tok, (size_t)s->n * sizeof(int32_t));
    }
    t->open = false;
}

/* A second occurrence (sid, p) has walked into the tail c: c becomes an
 * ordinary node with count 2, and the old occurrence's continuation below
 * it (if it reaches that deep) becomes a new tail.  If the old occurrence
 * is an active suffix of the open sequence, its pointer moves down to the
 * new tail, so that its own extensions stay no-ops. */
static void split_tail(sp_sfx *t, uint32_t c, uint32_t sid, int32_t p, int L) {
    const uint32_t s2 = t->nodes[c].occ_seq;
    const int32_t p2 = t->nodes[c].occ_start;
    const int depth = t->nodes[c].depth;
    t->nodes[c].tail = 0;
    t->nodes[c].count = 2;
    t->nodes[c].occ_seq = sid;
    t->nodes[c].occ_start = p;
    if (occ_extent(t, s2, p2) <= depth) return;
    const int32_t y = seq_by_id(t, s2)->tok[p2 + depth];
    uint32_t c2 = node_new(t, y, depth + 1, s2, p2);
    node_link(t, c, c2);
    const bool active = t->open && s2 == t->seqs[t->n_seqs - 1].id && p2 >= L - t->D;
    if (active) {
        assert(t->act[p2 % t->D] == c);
        t->act[p2 % t->D] = c2;
    }
}

/* Extends the active suffix starting at p, whose deepest node is x, by
 * token tok; returns its new deepest node. */
static uint32_t extend(sp_sfx *t, uint32_t x, int32_t tok, uint32_t sid, int32_t p, int L) {
    if (t->nodes[x].tail) {             /* its own unique continuation: implicit */
        assert(t->nodes[x].occ_seq == sid && t->nodes[x].occ_start == p);
        return x;
    }
    uint32_t c = find_child(t, x, tok);
    if (c == NIL) {
        c = node_new(t, tok, t->nodes[x].depth + 1, sid, p);
        node_link(t, x, c);
    } else if (t->nodes[c].tail) {
        split_tail(t, c, sid, p, L);
    } else {
        t->nodes[c].count++;
        t->nodes[c].occ_seq = sid;
        t->nodes[c].occ_start = p;
    }
    return c;
}

static void append_one(sp_sfx *t, int32_t tok) {
    sfx_seq *s = &t->seqs[t->n_seqs - 1];
    SP_VEC_GROW(s->tok, s->cap, s->n + 1);
    s->tok[s->n++] = tok;
    const int L = s->n;
    const uint32_t sid = s->id;
    t->tokens++;
    t->nodes[ROOT].count++;             /* a new suffix starts at L - 1 */
    t->act[(L - 1) % t->D] = ROOT;
    for (int p = L - t->D > 0 ? L - t->D : 0; p < L; p++) {
        uint32_t *a = &t->act[p % t->D];
        *a = extend(t, *a, tok, sid, p, L);
    }
}

void sp_sfx_append(sp_sfx *t, const int32_t *tok, int n) {
    if (!t->open) sp_sfx_open_seq(t);
    for (int i = 0; i < n; i++) append_one(t, tok[i]);
}

/* ----------------------------------------------------------------------------
 * Eviction
 * ------------------------------------------------------------------------- */

/* Walks every suffix of the oldest sequence down its (depth-bounded) path,
 * decrementing counts; a tail reached is that suffix's own and goes, a node
 * whose count reaches zero goes with its subtree (nothing below it can
 * have a count left).  Every surviving node's latest occurrence lies in a
 * newer sequence, so occurrences never dangle. */
bool sp_sfx_evict_oldest(sp_sfx *t) {
    if (!t->n_seqs || (t->open && t->n_seqs == 1)) return false;
    const sfx_seq *s = &t->seqs[0];
    for (int p = 0; p < s->n; p++) {
        t->nodes[ROOT].count--;
        const int len = s->n - p < t->D ? s->n - p : t->D;
        uint32_t x = ROOT;
        for (int d = 0; d < len; d++) {
            uint32_t c = find_child(t, x, s->tok[p + d]);
            assert(c != NIL);
            if (t->nodes[c].tail) {
                assert(t->nodes[c].occ_seq == s->id && t->nodes[c].occ_start == p);
                node_unlink(t, x, c);
                node_release(t, c);
                break;
            }
            if (--t->nodes[c].count == 0) {
                node_unlink(t, x, c);
                free_subtree(t, c);
                break;
            }
            x = c;
        }
    }
    t->tokens -= s->n;
    free(t->seqs[0].tok);
    memmove(t->seqs, t->seqs + 1, (size_t)(t->n_seqs - 1) * sizeof *t->seqs);
    t->n_seqs--;
    return true;
}

/* ----------------------------------------------------------------------------
 * Walking
 * ------------------------------------------------------------------------- */

typedef struct sfx_loc {
    uint32_t node;               /* deepest node on the path */
    int depth;                   /* string length (> node depth while reading an occurrence) */
} sfx_loc;

/* True when the string's continuation is read from the node's (unique)
 * occurrence: inside a tail, or past the depth bound below a node that
 * was seen once. */
static bool reading(const sp_sfx *t, sfx_loc l) {
    const sfx_node *n = &t->nodes[l.node];
    return n->tail || (n->count == 1 && n->child == NIL && l.depth >= t->D);
}

static bool read_next(const sp_sfx *t, sfx_loc l, int32_t *tok) {
    const sfx_node *n = &t->nodes[l.node];
    const sfx_seq *s = seq_by_id(t, n->occ_seq);
    const int64_t pos = (int64_t)n->occ_start + l.depth;
    if (!s || pos >= s->n) return false;
    *tok = s->tok[pos];
    return true;
}

static bool step(const sp_sfx *t, sfx_loc *l, int32_t tok) {
    if (reading(t, *l)) {
        int32_t y;
        if (!read_next(t, *l, &y) || y != tok) return false;
        l->depth++;
        return true;
    }
    uint32_t c = find_child(t, l->node, tok);
    if (c == NIL) return false;
    *l = (sfx_loc){ c, l->depth + 1 };
    return true;
}

static bool walk(const sp_sfx *t, const int32_t *s, int n, sfx_loc *l) {
    *l = (sfx_loc){ ROOT, 0 };
    for (int i = 0; i < n; i++)
        if (!step(t, l, s[i])) return false;
    return true;
}

static bool has_continuation(const sp_sfx *t, sfx_loc l) {
    int32_t y;
    if (reading(t, l)) return read_next(t, l, &y);
    return t->nodes[l.node].child != NIL;
}

int64_t sp_sfx_count(const sp_sfx *t, const int32_t *s, int n) {
    assert(n >= 0 && n <= t->D);
    sfx_loc l;
    if (!walk(t, s, n, &l)) return 0;
    return reading(t, l) ? 1 : t->nodes[l.node].count;
}

/* Binary search: if the suffix of length m occurred followed by x, the
 * suffix of length m - 1 occurred (one position later) followed by x too,
 * and that string is within the depth bound, so validity is monotone.
 * Lengths stop at D - 1, where every continuation is still counted. */
int sp_sfx_match(const sp_sfx *t, const int32_t *ctx, int n, int max_len) {
    int hi = max_len < n ? max_len : n;
    if (hi > t->D - 1) hi = t->D - 1;
    int lo = 0;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        sfx_loc l;
        if (walk(t, ctx + n - mid, mid, &l) && has_continuation(t, l)) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* ----------------------------------------------------------------------------
 * Proposals
 * ------------------------------------------------------------------------- */

#define SFX_MAX_ITEMS (SP_SFX_MAX_WIDTH * (SP_MAX_DRAFT + 1))

typedef struct sfx_item {        /* a candidate token not yet emitted */
    double p;                    /* cumulative probability */
    sfx_loc at;                  /* locus of the path including tok */
    int32_t tok;
    int parent;                  /* emitted index, -1 = the pending token */
    int len;                     /* path length including tok */
} sfx_item;

typedef struct sfx_frontier {
    sfx_item it[SFX_MAX_ITEMS];
    int n;
} sfx_frontier;

/* Does child a rank before child b: more occurrences, then the more recent
 * latest occurrence, then the smaller token. */
static bool ranks_before(const sfx_node *a, const sfx_node *b) {
    if (a->count != b->count) return a->count > b->count;
    if (a->occ_seq != b->occ_seq) return a->occ_seq > b->occ_seq;
    if (a->occ_start != b->occ_start) return a->occ_start > b->occ_start;
    return a->tok < b->tok;
}

static void push_item(sfx_frontier *f, sfx_item it, float min_prob) {
    if (it.p < (double)min_prob) return;
    assert(f->n < SFX_MAX_ITEMS);
    f->it[f->n++] = it;
}

/* Adds the `width` most frequent continuations of locus l (whose path has
 * probability base and length len) to the frontier. */
static void push_children(const sp_sfx *t, sfx_loc l, double base, int parent, int len, int width,
                          float min_prob, sfx_frontier *f) {
    if (reading(t, l)) {
        int32_t y;
        if (read_next(t, l, &y))
            push_item(f, (sfx_item){ base, { l.node, l.depth + 1 }, y, parent, len + 1 }, min_prob);
        return;
    }
    uint32_t top[SP_SFX_MAX_WIDTH];
    int nt = 0;
    uint64_t total = 0;
    for (uint32_t c = t->nodes[l.node].child; c != NIL; c = t->nodes[c].next) {
        total += t->nodes[c].count;
        int i = nt < width ? nt++ : width;          /* insertion into the sorted top list */
        while (i > 0 && ranks_before(&t->nodes[c], &t->nodes[top[i - 1]])) {
            if (i < width) top[i] = top[i - 1];
            i--;
        }
        if (i < width) top[i] = c;
    }
    for (int i = 0; i < nt; i++) {
        const sfx_node *c = &t->nodes[top[i]];
        const double q = base * ((double)c->count / (double)total);
        push_item(f, (sfx_item){ q, { top[i], c->depth }, c->tok, parent, len + 1 }, min_prob);
    }
}

/* Takes the most probable frontier item (the earliest on ties). */
static sfx_item pop_best(sfx_frontier *f) {
    int b = 0;
    for (int i = 1; i < f->n; i++)
        if (f->it[i].p > f->it[b].p) b = i;
    sfx_item it = f->it[b];
    memmove(f->it + b, f->it + b + 1, (size_t)(f->n - b - 1) * sizeof *f->it);
    f->n--;
    return it;
}

/* Rewrites the proposal in depth-first preorder, children in emission
 * order (= by decreasing probability, since best-first emits in that
 * order): the first root-to-leaf run becomes the most probable chain. */
static void preorder(sp_sfx_cand *c) {
    int order[SP_MAX_DRAFT], newidx[SP_MAX_DRAFT], stack[SP_MAX_DRAFT + 1], n = 0, sp = 0;
    /* push the roots in reverse so the first is visited first */
    for (int i = c->n - 1; i >= 0; i--)
        if (c->parent[i] < 0) stack[sp++] = i;
    while (sp) {
        const int x = stack[--sp];
        order[n++] = x;
        for (int i = c->n - 1; i > x; i--)
            if (c->parent[i] == x) stack[sp++] = i;
    }
    assert(n == c->n);
    sp_sfx_cand o = *c;
    for (int i = 0; i < n; i++) newidx[order[i]] = i;
    for (int i = 0; i < n; i++) {
        const int x = order[i];
        c->tok[i] = o.tok[x];
        c->prob[i] = o.prob[x];
        c->parent[i] = o.parent[x] < 0 ? -1 : newidx[o.parent[x]];
    }
}

/* The best-first expansion from the match of length m (ctx[n-m..n), known
 * to occur with a continuation) into out, without reordering. */
static void expand(const sp_sfx *t, const int32_t *pat, int m, const sp_sfx_params *p, int max_n,
                   int width, int cap, sp_sfx_cand *out) {
    out->n = 0;
    out->match_len = m;
    out->score = 0;
    sfx_loc at;
    bool ok = walk(t, pat, m, &at);
    assert(ok);
    (void)ok;
    sfx_frontier f;
    f.n = 0;
    push_children(t, at, 1.0, -1, 0, width, p->min_prob, &f);
    while (out->n < max_n && f.n) {
        const sfx_item it = pop_best(&f);
        out->tok[out->n] = it.tok;
        out->parent[out->n] = it.parent;
        out->prob[out->n] = (float)it.p;
        out->score += it.p;
        out->n++;
        if (it.len < cap) push_children(t, it.at, it.p, out->n - 1, it.len, width, p->min_prob, &f);
    }
}

/* Tries the match lengths from the longest down and keeps the best score
 * (the longer match on ties).  A match of length m yields at most
 * floor(factor * m) tokens of probability <= 1, so the search stops once
 * that bound cannot beat the best: usually after one or two lengths, but a
 * long match whose continuation is cut short (periodic text, where the
 * longest match overlaps the end of the context) gives way to a shorter
 * one with a longer continuation. */
void sp_sfx_propose(const sp_sfx *t, const int32_t *ctx, int n, const sp_sfx_params *p,
                    sp_sfx_cand *out) {
    out->n = 0;
    out->match_len = 0;
    out->score = 0;
    const int max_n = p->max_n < SP_MAX_DRAFT ? p->max_n : SP_MAX_DRAFT;
    const int width = p->width < 1 ? 1 : p->width > SP_SFX_MAX_WIDTH ? SP_SFX_MAX_WIDTH : p->width;
    if (max_n < 1) return;
    const int room = max_n < t->D / 2 ? max_n : t->D / 2;
    sp_sfx_cand c;
    for (int m = sp_sfx_match(t, ctx, n, t->D - room); m >= 1; m--) {
        const double capd = (double)p->factor * m + 1e-6;
        const int cap = capd >= max_n ? max_n : (int)capd;
        if (cap < 1 || (double)cap <= out->score) break;
        expand(t, ctx + n - m, m, p, max_n, width, cap, &c);
        if (c.score > out->score) *out = c;
    }
    if (width > 1 && out->n) preorder(out);
}

/* ----------------------------------------------------------------------------
 * Invariants
 * ------------------------------------------------------------------------- */

#define CHECK(cond, ...) do { if (!(cond)) { snprintf(msg, cap, __VA_ARGS__); return -1; } } while (0)

/* Checks one non-root node x, child of `parent`, whose string is path[0..depth). */
static int check_node(const sp_sfx *t, uint32_t parent, uint32_t x, const int32_t *path, char *msg,
                      size_t cap) {
    const sfx_node *n = &t->nodes[x];
    CHECK(n->live, "node %u on a path is free", x);
    CHECK(find_child(t, parent, n->tok) == x, "node %u missing from the edge hash", x);
    CHECK(n->depth == t->nodes[parent].depth + 1, "node %u has depth %d", x, n->depth);
    CHECK(n->depth <= t->D, "node %u deeper than the bound", x);
    CHECK(n->count >= 1, "node %u has count 0", x);
    CHECK(!n->tail || (n->count == 1 && n->child == NIL), "tail %u has count %u or children", x,
          n->count);
    const sfx_seq *s = seq_by_id(t, n->occ_seq);
    CHECK(s, "node %u: occurrence in evicted sequence %u", x, n->occ_seq);
    CHECK(n->occ_start >= 0 && n->occ_start + n->depth <= s->n, "node %u: occurrence out of range", x);
    CHECK(!memcmp(s->tok + n->occ_start, path, (size_t)n->depth * sizeof(int32_t)),
          "node %u: occurrence does not spell its string", x);
    uint64_t sum = 0;
    for (uint32_t c = n->child; c != NIL; c = t->nodes[c].next) sum += t->nodes[c].count;
    CHECK(sum <= n->count, "node %u: children count %llu > %u", x, (unsigned long long)sum, n->count);
    return 0;
}

int sp_sfx_check(const sp_sfx *t, char *msg, size_t cap) {
    CHECK(t->nodes[ROOT].count == (uint64_t)t->tokens, "root count %u, tokens %lld",
          t->nodes[ROOT].count, (long long)t->tokens);
    int64_t tok_sum = 0;
    for (int i = 0; i < t->n_seqs; i++) tok_sum += t->seqs[i].n;
    CHECK(tok_sum == t->tokens, "sequences hold %lld tokens, counted %lld", (long long)tok_sum,
          (long long)t->tokens);
    /* depth-first walk with the path spelled out */
    typedef struct { uint32_t x, parent; } fr;
    fr *st = sp_xmalloc((size_t)(t->live + 1) * sizeof *st);
    int32_t path[SP_SFX_MAX_DEPTH + 1];
    int64_t seen = 1, sp = 0;
    uint64_t root_sum = 0;
    for (uint32_t c = t->nodes[ROOT].child; c != NIL; c = t->nodes[c].next) {
        root_sum += t->nodes[c].count;
        if (sp <= t->live) st[sp++] = (fr){ c, ROOT };
    }
    int rc = 0;
    if (root_sum > t->nodes[ROOT].count) { snprintf(msg, cap, "root children exceed root"); rc = -1; }
    while (!rc && sp) {
        fr f = st[--sp];
        const sfx_node *n = &t->nodes[f.x];
        if (n->depth < 1 || n->depth > t->D) { snprintf(msg, cap, "node %u: depth %d", f.x, n->depth); rc = -1; break; }
        path[n->depth - 1] = n->tok;
        if ((rc = check_node(t, f.parent, f.x, path, msg, cap))) break;
        if (++seen > t->live) { snprintf(msg, cap, "more reachable nodes than live ones"); rc = -1; break; }
        for (uint32_t c = n->child; c != NIL; c = t->nodes[c].next)
            if (sp <= t->live) st[sp++] = (fr){ c, f.x };
    }
    free(st);
    if (rc) return rc;
    CHECK(seen == t->live, "%lld reachable nodes, %lld live", (long long)seen, (long long)t->live);
    CHECK(t->edge_used == (size_t)(t->live - 1), "%zu edges for %lld nodes", t->edge_used,
          (long long)t->live);
    return 0;
}
