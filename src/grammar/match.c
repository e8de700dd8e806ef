/*
 * match.c — the pushdown matcher over code points.
 *
 * A stack is a chain of interned nodes (pos, parent): pos is the grammar
 * element to match next, the parent chain the return positions.  Equal
 * stacks are the same node id, so a position — the set of live stacks — is
 * a sorted array of ids, itself interned: set ids are compared, hashed and
 * used as mask-cache keys directly.
 *
 * Expansion keeps every stack's top on a terminal (a character class):
 * a rule reference pushes the first element of each alternative; an END
 * pops to the parent.  A return position that is END is never pushed (a
 * tail call): the stacks of right-recursive rules such as x* stay the same
 * height, so a JSON string returns to the same set after every character
 * and its mask is computed once.
 *
 * Transitions are memoized per set: 128 entries for ASCII, and for the rest
 * a hash table keyed by which of the set's stacks take the code point (in
 * a free string every non-ASCII code point is one entry).  Once the sets of a grammar region have been seen, advancing
 * costs a table lookup and allocates nothing.
 */
#include "grammar/internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* ------------------------------------------------------------------------
 * Node interning
 * ---------------------------------------------------------------------- */
static void node_ht_grow(sp_gmatch *m) {
    uint32_t cap = m->node_ht_cap ? m->node_ht_cap * 2 : 1024;
    uint32_t *ht = sp_xcalloc(cap, sizeof *ht);
    for (uint32_t id = 1; id < m->n_nodes; id++) {
        uint32_t h = (uint32_t)mix64((uint64_t)m->nodes[id].pos << 32 | m->nodes[id].parent) & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = id + 1;
    }
    free(m->node_ht);
    m->node_ht = ht;
    m->node_ht_cap = cap;
}

static uint32_t node_intern(sp_gmatch *m, uint32_t pos, uint32_t parent) {
    if (2 * (m->n_nodes + 1) > m->node_ht_cap) node_ht_grow(m);
    uint32_t mask = m->node_ht_cap - 1;
    uint32_t h = (uint32_t)mix64((uint64_t)pos << 32 | parent) & mask;
    for (; m->node_ht[h]; h = (h + 1) & mask) {
        const sp_gnode *n = &m->nodes[m->node_ht[h] - 1];
        if (n->pos == pos && n->parent == parent) return m->node_ht[h] - 1;
    }
    SP_VEC_GROW(m->nodes, m->cap_nodes, (size_t)m->n_nodes + 1);
    m->nodes[m->n_nodes] = (sp_gnode){ pos, parent, 0 };
    m->node_ht[h] = m->n_nodes + 1;
    return m->n_nodes++;
}

/* ------------------------------------------------------------------------
 * Set interning
 * ---------------------------------------------------------------------- */
static uint64_t set_hash(const uint32_t *ids, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t k = 0; k < n; k++) h = mix64(h ^ ids[k]);
    return h;
}

static void set_ht_grow(sp_gmatch *m) {
    uint32_t cap = m->set_ht_cap ? m->set_ht_cap * 2 : 256;
    uint32_t *ht = sp_xcalloc(cap, sizeof *ht);
    for (uint32_t id = 0; id < m->n_sets; id++) {
        uint32_t h = (uint32_t)m->sets[id].hash & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = id + 1;
    }
    free(m->set_ht);
    m->set_ht = ht;
    m->set_ht_cap = cap;
}

/* The id of the set ids[0..n) (sorted, unique). */
static uint32_t set_intern(sp_gmatch *m, const uint32_t *ids, size_t n) {
    if (n == 0) return SP_GM_DEAD;
    if (2 * (m->n_sets + 1) > m->set_ht_cap) set_ht_grow(m);
    uint64_t hash = set_hash(ids, n);
    uint32_t mask = m->set_ht_cap - 1, h = (uint32_t)hash & mask;
    for (; m->set_ht[h]; h = (h + 1) & mask) {
        const sp_gset *s = &m->sets[m->set_ht[h] - 1];
        if (s->hash == hash && s->len == n && memcmp(m->set_nodes + s->off, ids, n * sizeof *ids) == 0)
            return m->set_ht[h] - 1;
    }
    SP_VEC_GROW(m->set_nodes, m->cap_set_nodes, m->n_set_nodes + n);
    memcpy(m->set_nodes + m->n_set_nodes, ids, n * sizeof *ids);
    SP_VEC_GROW(m->sets, m->cap_sets, (size_t)m->n_sets + 1);
    m->sets[m->n_sets] = (sp_gset){ (uint32_t)m->n_set_nodes, (uint32_t)n, hash, NULL };
    m->n_set_nodes += n;
    m->set_ht[h] = m->n_sets + 1;
    return m->n_sets++;
}

/* ------------------------------------------------------------------------
 * Expansion: stacks to the stacks whose tops are terminals
 * ---------------------------------------------------------------------- */
static void work_push(sp_gmatch *m, uint32_t id) {
    SP_VEC_GROW(m->work, m->cap_work, m->n_work + 1);
    m->work[m->n_work++] = id;
}

static void out_push(sp_gmatch *m, uint32_t id) {
    SP_VEC_GROW(m->out, m->cap_out, m->n_out + 1);
    m->out[m->n_out++] = id;
}

/* Queues the stack "match element pos next, then return to parent". */
static void push_pos(sp_gmatch *m, uint32_t pos, uint32_t parent) {
    if (m->g->elems[pos].type == SP_GE_END) {
        if (parent == SP_GM_ACCEPT) out_push(m, SP_GM_ACCEPT);
        else work_push(m, parent);           /* the parent is never at an END */
        return;
    }
    work_push(m, node_intern(m, pos, parent));
}

/* Expands the queued stacks into m->out.  Marks (per epoch) visit every
 * node once, which bounds the work and stops nullable loops. */
static void expand(sp_gmatch *m) {
    const sp_grammar *g = m->g;
    while (m->n_work) {
        uint32_t id = m->work[--m->n_work];
        sp_gnode *n = &m->nodes[id];
        if (n->mark == m->epoch) continue;
        n->mark = m->epoch;
        uint32_t pos = n->pos, parent = n->parent;
        const sp_gelem *e = &g->elems[pos];
        assert(e->type != SP_GE_END);
        if (e->type == SP_GE_CHAR) { out_push(m, id); continue; }
        uint32_t ret = pos + 1;
        uint32_t up = g->elems[ret].type == SP_GE_END ? parent : node_intern(m, ret, parent);
        for (uint32_t a = g->rule_alts[e->arg]; a < g->rule_alts[e->arg + 1]; a++)
            push_pos(m, g->alt_start[a], up);
    }
}

static void next_epoch(sp_gmatch *m) {
    if (++m->epoch == 0) {                   /* wrapped: forget every old mark */
        for (uint32_t k = 0; k < m->n_nodes; k++) m->nodes[k].mark = 0;
        m->epoch = 1;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* m->out, sorted and deduplicated, interned. */
static uint32_t out_intern(sp_gmatch *m) {
    if (m->n_out > 1) qsort(m->out, m->n_out, sizeof *m->out, cmp_u32);
    size_t w = 0;
    for (size_t k = 0; k < m->n_out; k++)
        if (w == 0 || m->out[k] != m->out[w - 1]) m->out[w++] = m->out[k];
    m->n_out = w;
    return set_intern(m, m->out, w);
}

static uint32_t initial_set(sp_gmatch *m) {
    const sp_grammar *g = m->g;
    next_epoch(m);
    m->n_work = m->n_out = 0;
    for (uint32_t a = g->rule_alts[g->root]; a < g->rule_alts[g->root + 1]; a++)
        push_pos(m, g->alt_start[a], SP_GM_ACCEPT);
    expand(m);
    return out_intern(m);
}

static uint32_t compute_advance(sp_gmatch *m, uint32_t set, uint32_t cp) {
    const sp_grammar *g = m->g;
    next_epoch(m);
    m->n_work = m->n_out = 0;
    uint32_t n;
    const uint32_t *ids = sp_gm_set_nodes(m, set, &n);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t id = ids[k];
        if (id == SP_GM_ACCEPT) continue;
        const sp_gnode *nd = &m->nodes[id];
        const sp_gelem *e = &g->elems[nd->pos];
        assert(e->type == SP_GE_CHAR);
        if (sp_gclass_has(g, &g->classes[e->arg], cp)) push_pos(m, nd->pos + 1, nd->parent);
    }
    expand(m);
    return out_intern(m);
}

static uint32_t tr_slot(uint32_t set, uint64_t bits, uint32_t cap) {
    return (uint32_t)mix64(bits ^ (uint64_t)set << 40 ^ set) & (cap - 1);
}

static void tr_grow(sp_gmatch *m) {
    uint32_t cap = m->tr_cap ? m->tr_cap * 2 : 1024;
    struct sp_gtr *tr = sp_xmalloc(cap * sizeof *tr);
    for (uint32_t k = 0; k < cap; k++) tr[k].set = UINT32_MAX;
    for (uint32_t k = 0; k < m->tr_cap; k++) {
        if (m->tr[k].set == UINT32_MAX) continue;
        uint32_t h = tr_slot(m->tr[k].set, m->tr[k].bits, cap);
        while (tr[h].set != UINT32_MAX) h = (h + 1) & (cap - 1);
        tr[h] = m->tr[k];
    }
    free(m->tr);
    m->tr = tr;
    m->tr_cap = cap;
}

/* Which stacks of the set take cp, as a bitmask (the set's order); sets of
 * over 64 stacks are keyed by the code point itself, tagged by bit 63
 * (which a 64-stack mask could also have: those fall back as well). */
static uint64_t tr_bits(const sp_gmatch *m, uint32_t set, uint32_t cp) {
    uint32_t n;
    const uint32_t *ids = sp_gm_set_nodes(m, set, &n);
    if (n >= 64) return 1ull << 63 | cp;
    const sp_grammar *g = m->g;
    uint64_t bits = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (ids[k] == SP_GM_ACCEPT) continue;
        const sp_gelem *e = &g->elems[m->nodes[ids[k]].pos];
        if (sp_gclass_has(g, &g->classes[e->arg], cp)) bits |= 1ull << k;
    }
    return bits;
}

/* The set after code point cp (SP_GM_DEAD if no stack takes it); memoized. */
uint32_t sp_gm_advance(sp_gmatch *m, uint32_t set, uint32_t cp) {
    if (set == SP_GM_DEAD) return SP_GM_DEAD;
    if (cp < 128) {
        int32_t *tab = m->sets[set].ascii;
        if (tab && tab[cp] >= 0) return (uint32_t)tab[cp];
        uint32_t to = compute_advance(m, set, cp);
        if (!m->sets[set].ascii) {
            m->sets[set].ascii = sp_xmalloc(128 * sizeof(int32_t));
            memset(m->sets[set].ascii, 0xff, 128 * sizeof(int32_t));
        }
        m->sets[set].ascii[cp] = (int32_t)to;
        return to;
    }
    uint64_t bits = tr_bits(m, set, cp);
    if (bits == 0) return SP_GM_DEAD;
    if (m->tr_cap) {
        uint32_t mask = m->tr_cap - 1;
        for (uint32_t h = tr_slot(set, bits, m->tr_cap); m->tr[h].set != UINT32_MAX; h = (h + 1) & mask)
            if (m->tr[h].set == set && m->tr[h].bits == bits) return m->tr[h].to;
    }
    uint32_t to = compute_advance(m, set, cp);
    if (2 * (m->tr_n + 1) > m->tr_cap) tr_grow(m);
    uint32_t mask = m->tr_cap - 1, h = tr_slot(set, bits, m->tr_cap);
    while (m->tr[h].set != UINT32_MAX) h = (h + 1) & mask;
    m->tr[h] = (struct sp_gtr){ bits, set, to };
    m->tr_n++;
    return to;
}

/* ------------------------------------------------------------------------
 * Bytes: UTF-8 assembled across calls
 * ---------------------------------------------------------------------- */
static int utf8_need(uint8_t lead) {
    return lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3
         : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
}

/* Allowed range of the continuation byte after `have` bytes of lead
 * (the second byte excludes overlongs, surrogates and > U+10FFFF). */
static void cont_range(uint8_t lead, int have, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (have != 1) return;
    if (lead == 0xE0) *lo = 0xA0;
    else if (lead == 0xED) *hi = 0x9F;
    else if (lead == 0xF0) *lo = 0x90;
    else if (lead == 0xF4) *hi = 0x8F;
}

static bool class_meets(const sp_grammar *g, const sp_gclass *c, uint32_t lo, uint32_t hi) {
    const uint32_t *r = g->ranges + 2 * (size_t)c->first;
    if (!c->neg) {
        for (uint32_t k = 0; k < c->n; k++)
            if (r[2 * k] <= hi && r[2 * k + 1] >= lo) return true;
        return false;
    }
    /* negated: some point of [lo, hi] lies outside every (sorted, merged) range */
    uint32_t next = lo;
    for (uint32_t k = 0; k < c->n && next <= hi; k++) {
        if (r[2 * k + 1] < next) continue;
        if (r[2 * k] > next) return true;
        if (r[2 * k + 1] >= hi) return false;
        next = r[2 * k + 1] + 1;
    }
    return next <= hi;
}

/* Can some code point starting with the pending bytes be matched? */
static bool partial_ok(sp_gmatch *m, const sp_gpos *p) {
    int need = utf8_need(p->pend[0]);
    uint32_t lo = p->pend[0] & (0x7F >> need), hi = lo;
    for (int k = 1; k < need; k++) {
        uint32_t b = k < p->npend ? (uint32_t)(p->pend[k] & 0x3F) : 0;
        uint32_t bh = k < p->npend ? b : 0x3F;
        lo = lo << 6 | b;
        hi = hi << 6 | bh;
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (lo < min[need]) lo = min[need];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (p->pend[0] == 0xED && hi > 0xD7FF) hi = 0xD7FF;
    const sp_grammar *g = m->g;
    uint32_t n;
    const uint32_t *ids = sp_gm_set_nodes(m, p->set, &n);
    for (uint32_t k = 0; k < n; k++) {
        if (ids[k] == SP_GM_ACCEPT) continue;
        const sp_gelem *e = &g->elems[m->nodes[ids[k]].pos];
        if (class_meets(g, &g->classes[e->arg], lo, hi)) return true;
    }
    return false;
}

/* Advances *p by one byte; false (and *p unchanged) if the grammar or
 * UTF-8 rules it out. */
bool sp_gm_step_byte(sp_gmatch *m, sp_gpos *p, uint8_t b) {
    if (p->npend == 0) {
        if (b < 0x80) {
            uint32_t to = sp_gm_advance(m, p->set, b);
            if (to == SP_GM_DEAD) return false;
            p->set = to;
            return true;
        }
        if (!utf8_need(b)) return false;
        sp_gpos q = *p;
        q.pend[0] = b;
        q.npend = 1;
        if (!partial_ok(m, &q)) return false;
        *p = q;
        return true;
    }
    uint8_t lo, hi;
    cont_range(p->pend[0], p->npend, &lo, &hi);
    if (b < lo || b > hi) return false;
    int need = utf8_need(p->pend[0]);
    if (p->npend + 1 == need) {
        uint32_t cp = p->pend[0] & (0x7F >> need);
        for (int k = 1; k < p->npend; k++) cp = cp << 6 | (p->pend[k] & 0x3F);
        cp = cp << 6 | (b & 0x3F);
        uint32_t to = sp_gm_advance(m, p->set, cp);
        if (to == SP_GM_DEAD) return false;
        *p = (sp_gpos){ to, 0, { 0, 0, 0 } };
        return true;
    }
    sp_gpos q = *p;
    q.pend[q.npend++] = b;
    if (!partial_ok(m, &q)) return false;
    *p = q;
    return true;
}

bool sp_gm_pos_can_end(const sp_gmatch *m, const sp_gpos *p) {
    if (p->npend || p->set == SP_GM_DEAD) return false;
    uint32_t n;
    const uint32_t *ids = sp_gm_set_nodes(m, p->set, &n);
    return n > 0 && ids[0] == SP_GM_ACCEPT;      /* sorted: the accept node comes first */
}

/* ------------------------------------------------------------------------
 * Text and tokens on a state (the matcher's or a scratch copy)
 * ---------------------------------------------------------------------- */
/* Feeds bytes to an active state: how many were taken (n = all). */
static size_t feed_active(sp_gmatch *m, sp_gstate *s, const char *bytes, size_t n) {
    size_t k = 0;
    for (; k < n; k++)
        if (!sp_gm_step_byte(m, &s->pos, (uint8_t)bytes[k])) break;
    return k;
}

/* A lazy state sees bytes: looks for the trigger across calls (keeping a
 * tail of trigger-length - 1 bytes).  When it completes, the state turns
 * active and the bytes after the trigger go to the grammar: as many as it
 * takes (the rest is dropped: the grammar constrains what follows, and a
 * token that straddles the trigger is not the grammar's to refuse). */
static void feed_lazy(sp_gmatch *m, sp_gstate *s, const char *bytes, size_t n) {
    size_t tl = m->trigger_len;
    for (size_t k = 0; k < n; k++) {
        /* append, keeping at most tl - 1 bytes plus the new one */
        if (s->ntail == tl) {
            memmove(s->tail, s->tail + 1, tl - 1);
            s->ntail--;
        }
        s->tail[s->ntail++] = bytes[k];
        if (s->ntail == tl && memcmp(s->tail, m->trigger, tl) == 0) {
            s->active = true;
            s->ntail = 0;
            feed_active(m, s, bytes + k + 1, n - k - 1);
            return;
        }
    }
}

static bool state_accept_eog(const sp_gmatch *m, sp_gstate *s) {
    if (!sp_gm_pos_can_end(m, &s->pos)) return false;
    s->ended = true;
    return true;
}

/* Advances s over token tok; false (s unspecified) if not allowed. */
bool sp_gm_state_accept_token(sp_gmatch *m, sp_gstate *s, int32_t tok) {
    const sp_gvocab *v = m->v;
    if (s->ended || tok < 0 || tok >= v->n_vocab) return false;
    if (!s->active) {
        /* the trigger may be a special token (<tool_call>): seen rendered */
        char buf[256], *piece = buf;
        size_t len = sp_token_piece(v->t, tok, true, buf, sizeof buf);
        if (len > sizeof buf) {
            piece = sp_xmalloc(len);
            sp_token_piece(v->t, tok, true, piece, len);
        }
        feed_lazy(m, s, piece, len);
        if (piece != buf) free(piece);
        return true;
    }
    if (v->kind[tok] == SP_GV_EOG) return state_accept_eog(m, s);
    if (v->kind[tok] != SP_GV_TEXT) return false;
    uint32_t a = v->off[tok], b = v->off[tok + 1];
    return feed_active(m, s, v->bytes + a, b - a) == b - a;
}

/* ------------------------------------------------------------------------
 * The public matcher
 * ---------------------------------------------------------------------- */
sp_gmatch *sp_gmatch_create(const sp_grammar *g, const sp_gvocab *v, const char *trigger, sp_err *err) {
    if (!g) { sp_err_set(err, "grammar matcher: no grammar"); return NULL; }
    size_t tl = trigger ? strlen(trigger) : 0;
    if (tl >= SP_GM_TRIGGER_MAX) {
        sp_err_set(err, "grammar matcher: trigger of %zu bytes (at most %d)", tl, SP_GM_TRIGGER_MAX - 1);
        return NULL;
    }
    sp_gmatch *m = sp_xcalloc(1, sizeof *m);
    m->g = g;
    m->v = v;
    memcpy(m->trigger, trigger ? trigger : "", tl);
    m->trigger_len = tl;
    node_intern(m, UINT32_MAX, UINT32_MAX);      /* node 0: the empty stack */
    m->nodes[0].mark = 0;
    /* set 0 is the empty set: reserve its slot so ids line up */
    SP_VEC_GROW(m->sets, m->cap_sets, 1);
    m->sets[0] = (sp_gset){ 0, 0, 0, NULL };
    m->n_sets = 1;
    set_ht_grow(m);
    m->st.pos.set = initial_set(m);
    m->st.active = tl == 0;
    return m;
}

void sp_gmatch_free(sp_gmatch *m) {
    if (!m) return;
    sp_gm_mask_free(m);
    for (uint32_t k = 0; k < m->n_sets; k++) free(m->sets[k].ascii);
    free(m->sets);
    free(m->set_nodes);
    free(m->set_ht);
    free(m->nodes);
    free(m->node_ht);
    free(m->tr);
    free(m->work);
    free(m->out);
    free(m);
}

bool sp_gmatch_active(const sp_gmatch *m) { return m->st.active; }
bool sp_gmatch_ended(const sp_gmatch *m) { return m->st.ended; }

bool sp_gmatch_can_end(const sp_gmatch *m) {
    return m->st.active && !m->st.ended && sp_gm_pos_can_end(m, &m->st.pos);
}

bool sp_gmatch_must_end(const sp_gmatch *m) {
    if (!sp_gmatch_can_end(m)) return false;
    uint32_t n;
    sp_gm_set_nodes(m, m->st.pos.set, &n);
    return n == 1;                               /* only the empty stack */
}

int sp_gmatch_accept_bytes(sp_gmatch *m, const char *bytes, size_t n, sp_err *err) {
    if (m->st.ended) return sp_err_set(err, "grammar: the matcher has ended");
    if (!m->st.active) {
        feed_lazy(m, &m->st, bytes, n);
        return 0;
    }
    sp_gpos save = m->st.pos;
    size_t k = feed_active(m, &m->st, bytes, n);
    if (k == n) return 0;
    m->st.pos = save;
    return sp_err_set(err, "grammar: byte %zu (0x%02x) is not allowed here", k, (uint8_t)bytes[k]);
}

bool sp_gmatch_allows(sp_gmatch *m, int32_t tok) {
    assert(m->v);
    if (!m->v) return false;
    if (!m->st.active) return !m->st.ended;
    sp_gstate s = m->st;
    return sp_gm_state_accept_token(m, &s, tok);
}

int sp_gmatch_accept(sp_gmatch *m, int32_t tok, sp_err *err) {
    assert(m->v);
    if (!m->v) return sp_err_set(err, "grammar: matcher without a vocabulary");
    sp_gstate s = m->st;
    if (!sp_gm_state_accept_token(m, &s, tok))
        return sp_err_set(err, "grammar: token %d is not allowed here", (int)tok);
    m->st = s;
    return 0;
}

int sp_gmatch_check(sp_gmatch *m, const int32_t *tokens, int n) {
    assert(m->v);
    if (!m->v) return 0;
    sp_gstate s = m->st;
    for (int k = 0; k < n; k++)
        if (!sp_gm_state_accept_token(m, &s, tokens[k])) return k;
    return n;
}

void sp_gmatch_get_stats(const sp_gmatch *m, sp_gmatch_stats *out) { *out = m->stats; }
