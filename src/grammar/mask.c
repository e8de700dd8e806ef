/*
 * mask.c — token masks (computed by a walk of the vocabulary trie, cached
 * by position), applying them to logits, and the text and tokens the
 * grammar forces.
 *
 * A mask walks the preorder trie once: each node advances its parent's
 * position by one byte (a memoized transition for ASCII, UTF-8 assembly
 * for the rest) and a node the grammar refuses skips its whole subtree.
 * Positions repeat (every character inside a JSON string returns to the
 * same stack set), so masks are cached by (set id, pending bytes); the
 * cache is dropped whole when it outgrows MASK_CACHE_BYTES, which keeps the
 * bound simple and the hot entries come back after one miss each.
 */
#include "grammar/internal.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MASK_CACHE_BYTES ((size_t)64 << 20)
#define FORCED_TEXT_MAX 1024

static size_t mask_words(const sp_gvocab *v) { return ((size_t)v->n_vocab + 63) / 64; }

static uint64_t pos_key(const sp_gpos *p) {
    return (uint64_t)p->set << 32 | (uint32_t)p->npend << 24 | (uint32_t)p->pend[0] << 16 |
           (uint32_t)p->pend[1] << 8 | p->pend[2];
}

/* ------------------------------------------------------------------------
 * The cache: open addressing on pos_key; bits == NULL marks a free slot.
 * ---------------------------------------------------------------------- */
static uint32_t key_slot(uint64_t key, uint32_t cap) {
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 32;
    return (uint32_t)key & (cap - 1);
}

static sp_gmask_entry *cache_find(sp_gmatch *m, uint64_t key) {
    if (!m->cache_cap) return NULL;
    for (uint32_t h = key_slot(key, m->cache_cap); m->cache[h].bits; h = (h + 1) & (m->cache_cap - 1))
        if (m->cache[h].key == key) return &m->cache[h];
    return NULL;
}

static void cache_clear(sp_gmatch *m) {
    for (uint32_t k = 0; k < m->cache_cap; k++) free(m->cache[k].bits);
    free(m->cache);
    m->cache = NULL;
    m->cache_cap = m->cache_n = 0;
}

static sp_gmask_entry *cache_insert(sp_gmatch *m, uint64_t key, uint64_t *bits, int n_allowed) {
    if ((size_t)(m->cache_n + 1) * mask_words(m->v) * 8 > MASK_CACHE_BYTES) cache_clear(m);
    if (2 * (m->cache_n + 1) > m->cache_cap) {
        uint32_t cap = m->cache_cap ? m->cache_cap * 2 : 64;
        sp_gmask_entry *c = sp_xcalloc(cap, sizeof *c);
        for (uint32_t k = 0; k < m->cache_cap; k++) {
            if (!m->cache[k].bits) continue;
            uint32_t h = key_slot(m->cache[k].key, cap);
            while (c[h].bits) h = (h + 1) & (cap - 1);
            c[h] = m->cache[k];
        }
        free(m->cache);
        m->cache = c;
        m->cache_cap = cap;
    }
    uint32_t h = key_slot(key, m->cache_cap);
    while (m->cache[h].bits) h = (h + 1) & (m->cache_cap - 1);
    m->cache[h] = (sp_gmask_entry){ key, bits, n_allowed };
    m->cache_n++;
    return &m->cache[h];
}

static void ps_clear(sp_gmatch *m);

void sp_gm_mask_free(sp_gmatch *m) {
    cache_clear(m);
    free(m->all_ones);
    free(m->eog_only);
    free(m->dfs);
    ps_clear(m);
    free(m->ps);
    free(m->ps_ht);
}

/* ------------------------------------------------------------------------
 * Computing a mask
 * ---------------------------------------------------------------------- */
/* ------------------------------------------------------------------------
 * The byte automaton of the mask walk
 * ---------------------------------------------------------------------- */
#define PS_MAX_BYTES ((size_t)32 << 20)

static void ps_clear(sp_gmatch *m) {
    for (uint32_t k = 0; k < m->n_ps; k++) free(m->ps[k].next);
    m->n_ps = 0;
    m->ps_bytes = 0;
    if (m->ps_ht) memset(m->ps_ht, 0, m->ps_ht_cap * sizeof *m->ps_ht);
}

static void ps_ht_grow(sp_gmatch *m) {
    uint32_t cap = m->ps_ht_cap ? m->ps_ht_cap * 2 : 1024;
    uint32_t *ht = sp_xcalloc(cap, sizeof *ht);
    for (uint32_t id = 0; id < m->n_ps; id++) {
        uint32_t h = key_slot(pos_key(&m->ps[id].pos), cap);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = id + 1;
    }
    free(m->ps_ht);
    m->ps_ht = ht;
    m->ps_ht_cap = cap;
}

static int32_t ps_intern(sp_gmatch *m, const sp_gpos *p) {
    if (2 * (m->n_ps + 1) > m->ps_ht_cap) ps_ht_grow(m);
    uint64_t key = pos_key(p);
    uint32_t mask = m->ps_ht_cap - 1, h = key_slot(key, m->ps_ht_cap);
    for (; m->ps_ht[h]; h = (h + 1) & mask)
        if (pos_key(&m->ps[m->ps_ht[h] - 1].pos) == key) return (int32_t)(m->ps_ht[h] - 1);
    size_t n = p->npend ? 64 : 256;
    SP_VEC_GROW(m->ps, m->cap_ps, (size_t)m->n_ps + 1);
    m->ps[m->n_ps].pos = *p;
    m->ps[m->n_ps].next = sp_xmalloc(n * sizeof(int32_t));
    memset(m->ps[m->n_ps].next, 0xff, n * sizeof(int32_t));   /* SP_GPS_UNKNOWN */
    m->ps_bytes += n * sizeof(int32_t);
    m->ps_ht[h] = m->n_ps + 1;
    return (int32_t)m->n_ps++;
}

/* The state after byte b from state s (computed and stored on first use). */
static int32_t ps_step(sp_gmatch *m, int32_t s, uint8_t b) {
    sp_gpstate *st = &m->ps[s];
    int idx = st->pos.npend ? b - 0x80 : b;
    if (idx < 0 || idx >= 64 + 192 * !st->pos.npend) return SP_GPS_DEAD;   /* not a continuation */
    int32_t nx = st->next[idx];
    if (nx != SP_GPS_UNKNOWN) return nx;
    sp_gpos q = st->pos;
    nx = sp_gm_step_byte(m, &q, b) ? ps_intern(m, &q) : SP_GPS_DEAD;
    m->ps[s].next[idx] = nx;                      /* ps may have moved */
    return nx;
}

static int compute_mask(sp_gmatch *m, const sp_gpos *start, uint64_t *bits) {
    const sp_gvocab *v = m->v;
    memset(bits, 0, mask_words(v) * 8);
    if (m->ps_bytes > PS_MAX_BYTES) ps_clear(m);  /* states live only within a walk */
    if (!m->dfs) m->dfs = sp_xmalloc(((size_t)v->max_depth + 1) * sizeof *m->dfs);
    int32_t *dfs = m->dfs;
    dfs[0] = ps_intern(m, start);
    const sp_gtnode *nodes = v->nodes;
    uint32_t i = 1, n = v->n_nodes;
    while (i < n) {
        const sp_gtnode *nd = &nodes[i];
        int32_t s = ps_step(m, dfs[nd->depth - 1], nd->byte);
        if (s < 0) {
            i = nd->end;                         /* nothing below can match either */
            continue;
        }
        dfs[nd->depth] = s;
        for (uint32_t k = nd->tok_off; k < nodes[i + 1].tok_off; k++) {
            int32_t t = v->toks[k];
            bits[t >> 6] |= 1ull << (t & 63);
        }
        i++;
    }
    if (sp_gm_pos_can_end(m, start))
        for (int k = 0; k < v->n_eog; k++) bits[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
    int count = 0;
    for (size_t w = 0; w < mask_words(v); w++) count += __builtin_popcountll(bits[w]);
    return count;
}

static const uint64_t *fixed_mask(sp_gmatch *m, bool all, int *n_allowed) {
    const sp_gvocab *v = m->v;
    uint64_t **slot = all ? &m->all_ones : &m->eog_only;
    if (!*slot) {
        size_t words = mask_words(v);
        *slot = sp_xcalloc(words, 8);
        if (all) {
            for (int32_t t = 0; t < v->n_vocab; t++) (*slot)[t >> 6] |= 1ull << (t & 63);
        } else {
            for (int k = 0; k < v->n_eog; k++) (*slot)[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
        }
    }
    *n_allowed = all ? v->n_vocab : v->n_eog;
    return *slot;
}

const uint64_t *sp_gmatch_mask(sp_gmatch *m, int *n_allowed) {
    assert(m->v);
    int dummy;
    if (!n_allowed) n_allowed = &dummy;
    if (!m->v) { *n_allowed = 0; return NULL; }
    m->stats.masks++;
    if (!m->st.active) return fixed_mask(m, true, n_allowed);
    if (m->st.ended) return fixed_mask(m, false, n_allowed);
    uint64_t key = pos_key(&m->st.pos);
    sp_gmask_entry *e = cache_find(m, key);
    if (!e) {
        uint64_t t0 = sp_now_ns();
        uint64_t *bits = sp_xmalloc(mask_words(m->v) * 8);
        int n = compute_mask(m, &m->st.pos, bits);
        e = cache_insert(m, key, bits, n);
        m->stats.mask_misses++;
        m->stats.mask_ns += sp_now_ns() - t0;
    }
    *n_allowed = e->n_allowed;
    return e->bits;
}

int sp_gmatch_apply(sp_gmatch *m, float *logits) {
    int n;
    const uint64_t *bits = sp_gmatch_mask(m, &n);
    if (!bits) return 0;
    for (int32_t t = 0; t < m->v->n_vocab; t++)
        if (!(bits[t >> 6] >> (t & 63) & 1)) logits[t] = -INFINITY;
    return n;
}

/* ------------------------------------------------------------------------
 * Forced text and tokens
 * ---------------------------------------------------------------------- */
/* The only code point set admits, or UINT32_MAX if it admits several or
 * may end.  (A negated class is never "only one": it is conservative.) */
static uint32_t only_code_point(const sp_gmatch *m, uint32_t set) {
    const sp_grammar *g = m->g;
    uint32_t n, cp = UINT32_MAX;
    const uint32_t *ids = sp_gm_set_nodes(m, set, &n);
    if (n == 0 || ids[0] == SP_GM_ACCEPT) return UINT32_MAX;
    for (uint32_t k = 0; k < n; k++) {
        const sp_gclass *c = &g->classes[g->elems[m->nodes[ids[k]].pos].arg];
        const uint32_t *r = g->ranges + 2 * (size_t)c->first;
        if (c->neg || c->n != 1 || r[0] != r[1]) return UINT32_MAX;
        if (cp != UINT32_MAX && r[0] != cp) return UINT32_MAX;
        cp = r[0];
    }
    return cp;
}

static int utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t sp_gmatch_forced_text(sp_gmatch *m, char *buf, size_t cap) {
    if (cap == 0) return 0;
    size_t len = 0;
    if (m->st.active && !m->st.ended && m->st.pos.npend == 0) {
        uint32_t set = m->st.pos.set;
        for (;;) {
            uint32_t cp = only_code_point(m, set);
            if (cp == UINT32_MAX) break;
            char enc[4];
            int el = utf8_encode(cp, enc);
            if (len + (size_t)el > cap - 1) break;
            set = sp_gm_advance(m, set, cp);
            assert(set != SP_GM_DEAD);           /* every stack took cp */
            memcpy(buf + len, enc, (size_t)el);
            len += (size_t)el;
        }
    }
    buf[len] = 0;
    return len;
}

static int forced_end(const sp_gmatch *m, int32_t *out) {
    const sp_gvocab *v = m->v;
    int32_t eos = sp_tokenizer_eos(v->t);
    if (eos >= 0 && eos < v->n_vocab && v->kind[eos] == SP_GV_EOG) out[0] = eos;
    else if (v->n_eog > 0) out[0] = v->eog[0];
    else return 0;
    return 1;
}

int sp_gmatch_forced(sp_gmatch *m, int32_t *out, int cap) {
    assert(m->v);
    if (!m->v || cap <= 0 || !m->st.active || m->st.ended) return 0;
    char text[FORCED_TEXT_MAX];
    size_t len = sp_gmatch_forced_text(m, text, sizeof text);
    if (len == 0) return sp_gmatch_must_end(m) ? forced_end(m, out) : 0;
    sp_tokens toks = { 0 };
    sp_err err;
    int n = 0;
    if (sp_tokenize(m->v->t, text, len, false, false, &toks, &err) == 0) {
        /* the tokenizer may split differently from how the grammar reads
         * (a prefix space, a merge across the end): keep what it allows */
        n = sp_gmatch_check(m, toks.ids, toks.n < cap ? toks.n : cap);
        memcpy(out, toks.ids, (size_t)n * sizeof *out);
    }
    sp_tokens_free(&toks);
    return n;
}

int sp_gmatch_forced_after(sp_gmatch *m, const int32_t *prefix, int n_prefix, int32_t *out, int cap) {
    assert(m->v);
    if (!m->v) return 0;
    /* the state is a value: advance it in place, ask, put it back */
    const sp_gstate save = m->st;
    int n = 0;
    int i = 0;
    while (i < n_prefix && sp_gm_state_accept_token(m, &m->st, prefix[i])) i++;
    if (i == n_prefix) n = sp_gmatch_forced(m, out, cap);
    m->st = save;
    return n;
}

bool sp_gmatch_is_end(const sp_gmatch *m, int32_t tok) {
    return m->v && tok >= 0 && tok < m->v->n_vocab && m->v->kind[tok] == SP_GV_EOG;
}

/* The trie node of token tok's bytes (0 = not found). */
static uint32_t token_node(const sp_gvocab *v, int32_t tok) {
    uint32_t i = 0;
    for (uint32_t k = v->off[tok]; k < v->off[tok + 1]; k++) {
        const uint8_t b = (uint8_t)v->bytes[k];
        uint32_t j = i + 1;
        while (j < v->nodes[i].end && v->nodes[j].byte != b) j = v->nodes[j].end;
        if (j >= v->nodes[i].end) return 0;
        i = j;
    }
    return i;
}

/* Does a longer token that begins with tok's text fit the grammar at
 * `before` (the position tok would be taken from)?  A walk over tok's
 * subtree of the trie only. */
static bool longer_token_fits(sp_gmatch *m, const sp_gpos *before, int32_t tok) {
    const sp_gvocab *v = m->v;
    const uint32_t x = token_node(v, tok);
    if (x == 0) return true;                     /* (every text token is in the trie) */
    if (m->ps_bytes > PS_MAX_BYTES) ps_clear(m);
    if (!m->dfs) m->dfs = sp_xmalloc(((size_t)v->max_depth + 1) * sizeof *m->dfs);
    int32_t *dfs = m->dfs;
    /* the states along tok's own bytes */
    dfs[0] = ps_intern(m, before);
    for (uint32_t k = v->off[tok], d = 1; k < v->off[tok + 1]; k++, d++) {
        dfs[d] = ps_step(m, dfs[d - 1], (uint8_t)v->bytes[k]);
        if (dfs[d] < 0) return false;
    }
    for (uint32_t i = x + 1; i < v->nodes[x].end;) {
        const sp_gtnode *nd = &v->nodes[i];
        const int32_t st = ps_step(m, dfs[nd->depth - 1], nd->byte);
        if (st < 0) {
            i = nd->end;
            continue;
        }
        if (v->nodes[i + 1].tok_off > nd->tok_off) return true;
        dfs[nd->depth] = st;
        i++;
    }
    return false;
}

int sp_gmatch_forced_safe(sp_gmatch *m, const int32_t *prefix, int n_prefix, int32_t *out, int cap) {
    int n = n_prefix ? sp_gmatch_forced_after(m, prefix, n_prefix, out, cap) : sp_gmatch_forced(m, out, cap);
    if (n == 0 || sp_gmatch_is_end(m, out[n - 1])) return n;
    /* the position before the last token: the prefix and the others taken */
    sp_gstate s = m->st;
    for (int i = 0; i < n_prefix; i++)
        if (!sp_gm_state_accept_token(m, &s, prefix[i])) return 0;
    for (int i = 0; i < n - 1; i++)
        if (!sp_gm_state_accept_token(m, &s, out[i])) return 0;
    if (!s.active) return n - 1;                 /* (cannot happen: forced needs an active grammar) */
    return longer_token_fits(m, &s.pos, out[n - 1]) ? n - 1 : n;
}
