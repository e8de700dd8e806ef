/* String -> int32 hash map over borrowed keys (token texts, merges). */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Hashing: FNV-1a over the bytes, finished with splitmix64 so that the low
 * bits used for the table index are well mixed.  Streaming, so that a pair
 * "a b" can be hashed from its two halves without building the string.
 * ---------------------------------------------------------------------- */
#define SM_FNV_OFFSET 0xcbf29ce484222325ull
#define SM_FNV_PRIME 0x100000001b3ull

static uint64_t sm_feed(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= SM_FNV_PRIME;
    }
    return h;
}

static uint32_t sm_finish(uint64_t h) { return (uint32_t)(sp_hash64(h) >> 32); }

void sp_strmap_init(sp_strmap *m, uint32_t expected) {
    uint64_t cap = 16;
    while (cap < (uint64_t)expected * 2) cap <<= 1;
    m->ents = sp_xmalloc((expected ? expected : 1) * sizeof *m->ents);
    m->n = 0;
    m->cap = expected;
    m->slots = sp_xcalloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
}

void sp_strmap_free(sp_strmap *m) {
    free(m->ents);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* Finds the slot of the entry whose key satisfies eq, or the empty slot
 * where it would go.  The table is at most half full, so probing ends. */
static uint64_t sm_probe(const sp_strmap *m, uint32_t hash,
                         bool (*eq)(const sp_strmap_ent *, const void *), const void *ctx) {
    uint64_t i = hash & m->mask;
    for (;;) {
        uint32_t s = m->slots[i];
        if (s == 0) return i;
        const sp_strmap_ent *e = &m->ents[s - 1];
        if (e->hash == hash && eq(e, ctx)) return i;
        i = (i + 1) & m->mask;
    }
}

typedef struct sm_key {
    const char *a, *b;
    size_t an, bn;      /* b == NULL: plain key a; else "a b" */
} sm_key;

static bool sm_eq(const sp_strmap_ent *e, const void *ctx) {
    const sm_key *k = ctx;
    if (!k->b) return e->len == k->an && memcmp(e->key, k->a, k->an) == 0;
    return e->len == k->an + 1 + k->bn && memcmp(e->key, k->a, k->an) == 0 &&
           e->key[k->an] == ' ' && memcmp(e->key + k->an + 1, k->b, k->bn) == 0;
}

int32_t sp_strmap_put(sp_strmap *m, const char *key, uint32_t len, int32_t val) {
    sm_key k = { .a = key, .an = len };
    uint32_t hash = sm_finish(sm_feed(SM_FNV_OFFSET, key, len));
    uint64_t i = sm_probe(m, hash, sm_eq, &k);
    if (m->slots[i]) return m->ents[m->slots[i] - 1].val;
    assert(m->n < m->cap);
    m->ents[m->n] = (sp_strmap_ent){ .key = key, .len = len, .hash = hash, .val = val };
    m->slots[i] = ++m->n;
    return -1;
}

int32_t sp_strmap_get(const sp_strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    sm_key k = { .a = key, .an = len };
    uint32_t hash = sm_finish(sm_feed(SM_FNV_OFFSET, key, len));
    uint32_t s = m->slots[sm_probe(m, hash, sm_eq, &k)];
    return s ? m->ents[s - 1].val : -1;
}

int32_t sp_strmap_get_pair(const sp_strmap *m, const char *a, size_t an, const char *b,
                           size_t bn) {
    if (!m->slots) return -1;
    sm_key k = { .a = a, .an = an, .b = b, .bn = bn };
    uint64_t h = sm_feed(SM_FNV_OFFSET, a, an);
    h = sm_feed(h, " ", 1);
    uint32_t hash = sm_finish(sm_feed(h, b, bn));
    uint32_t s = m->slots[sm_probe(m, hash, sm_eq, &k)];
    return s ? m->ents[s - 1].val : -1;
}
