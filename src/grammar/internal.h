/*
 * grammar/internal.h — the compiled grammar, the vocabulary trie and the
 * matcher's interning tables, shared by gbnf.c, match.c, vocab.c and mask.c.
 * Not part of the module's contract (grammar.h is).
 */
#ifndef SP_GRAMMAR_INTERNAL_H
#define SP_GRAMMAR_INTERNAL_H

#include "grammar/grammar.h"

/* ------------------------------------------------------------------------
 * Compiled grammar.  Every rule is a list of alternatives; every
 * alternative a sequence of elements ended by an END element.  All
 * sequences of all rules live in one array, so a grammar position (what a
 * stack holds) is a plain element index.
 * ---------------------------------------------------------------------- */
enum { SP_GE_END = 0, SP_GE_CHAR = 1, SP_GE_REF = 2 };

typedef struct sp_gelem {
    uint32_t type;                 /* SP_GE_* */
    uint32_t arg;                  /* CHAR: class index; REF: rule index */
} sp_gelem;

/* A set of code points: sorted, disjoint, non-adjacent ranges (merged at
 * parse time), possibly negated. */
typedef struct sp_gclass {
    uint32_t first, n;             /* ranges[2*first ..] : n (lo, hi) pairs */
    bool neg;
} sp_gclass;

struct sp_grammar {
    sp_gelem *elems;
    uint32_t n_elems;
    uint32_t *alt_start;           /* first element of every alternative */
    uint32_t *rule_alts;           /* rule r: alternatives rule_alts[r] .. rule_alts[r+1] */
    int n_rules;
    uint32_t root;
    sp_gclass *classes;
    uint32_t n_classes;
    uint32_t *ranges;              /* (lo, hi) pairs */
};

static inline bool sp_gclass_has(const sp_grammar *g, const sp_gclass *c, uint32_t cp) {
    const uint32_t *r = g->ranges + 2 * (size_t)c->first;
    bool in = false;
    for (uint32_t i = 0; i < c->n; i++) {
        if (cp < r[2 * i]) break;             /* sorted: no later range holds cp */
        if (cp <= r[2 * i + 1]) { in = true; break; }
    }
    return in != c->neg;
}

/* ------------------------------------------------------------------------
 * Vocabulary: token bytes and a byte trie in preorder.  Node i's subtree is
 * nodes [i, end); its tokens are toks[tok_off[i] .. tok_off[i+1]).  A mask
 * is a linear scan that jumps to `end` to prune a subtree.
 * ---------------------------------------------------------------------- */
enum { SP_GV_NONE = 0, SP_GV_TEXT = 1, SP_GV_EOG = 2 };

typedef struct sp_gtnode {
    uint32_t end;
    uint32_t tok_off;
    uint16_t depth;                /* root 0 */
    uint8_t byte;
} sp_gtnode;

struct sp_gvocab {
    const sp_tokenizer *t;
    int32_t n_vocab;
    uint8_t *kind;                 /* SP_GV_* per token */
    char *bytes;                   /* the pieces of text tokens, concatenated */
    uint32_t *off;                 /* token i: bytes[off[i] .. off[i+1]) */
    int32_t *eog;                  /* end-of-generation ids */
    int n_eog;
    sp_gtnode *nodes;              /* n_nodes + 1 (a sentinel with tok_off = n_toks) */
    uint32_t n_nodes;
    int32_t *toks;
    uint32_t max_depth;
};

/* ------------------------------------------------------------------------
 * Matcher.  Stacks are interned nodes (pos, parent); node 0 is the empty
 * stack (the grammar accepted).  Stack sets are interned sorted arrays of
 * node ids; set 0 is the empty set (a dead end).  A position is a set plus
 * the pending bytes of a code point split across tokens.
 * ---------------------------------------------------------------------- */
#define SP_GM_ACCEPT 0u            /* node id of the empty stack */
#define SP_GM_DEAD 0u              /* set id of the empty set */
#define SP_GM_TRIGGER_MAX 256      /* bytes of a lazy trigger */

typedef struct sp_gpos {
    uint32_t set;
    uint8_t npend;                 /* bytes of an incomplete code point */
    uint8_t pend[3];
} sp_gpos;

/* Everything a token changes: copied whole by sp_gmatch_check. */
typedef struct sp_gstate {
    sp_gpos pos;
    bool active, ended;
    uint16_t ntail;                /* lazy: last bytes seen, a trigger prefix */
    char tail[SP_GM_TRIGGER_MAX];
} sp_gstate;

typedef struct sp_gnode {
    uint32_t pos, parent, mark;
} sp_gnode;

typedef struct sp_gset {
    uint32_t off, len;             /* node ids: m->set_nodes[off .. off+len) */
    uint64_t hash;
    int32_t *ascii;                /* 128 transitions, -1 unknown; NULL until used */
} sp_gset;

/* A position as a state of the byte-level automaton the mask walk builds
 * lazily: one table lookup per trie node.  Tables have 256 entries for a
 * position on a code point boundary, 64 (continuation bytes) otherwise;
 * entries: a state id, SP_GPS_UNKNOWN or SP_GPS_DEAD. */
#define SP_GPS_UNKNOWN (-1)
#define SP_GPS_DEAD (-2)
typedef struct sp_gpstate {
    sp_gpos pos;
    int32_t *next;
} sp_gpstate;

typedef struct sp_gmask_entry {
    uint64_t key;                  /* set << 32 | pending bytes, or empty */
    uint64_t *bits;
    int n_allowed;
} sp_gmask_entry;

struct sp_gmatch {
    const sp_grammar *g;
    const sp_gvocab *v;
    char trigger[SP_GM_TRIGGER_MAX];
    size_t trigger_len;
    sp_gstate st;

    /* node interning */
    sp_gnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *node_ht;             /* id + 1, 0 = empty slot */
    uint32_t node_ht_cap;
    uint32_t epoch;

    /* set interning */
    sp_gset *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *set_nodes;
    size_t n_set_nodes, cap_set_nodes;
    uint32_t *set_ht;
    uint32_t set_ht_cap;

    /* transitions on non-ASCII code points, by which of the set's stacks
     * take the code point (code points alike to the set share one entry):
     * (set, bitmask of stacks) -> set; sets of over 64 stacks use (set, cp) */
    struct sp_gtr { uint64_t bits; uint32_t set, to; } *tr;   /* set UINT32_MAX = empty */
    uint32_t tr_cap, tr_n;

    /* scratch of one advance (reused: no malloc per step once grown) */
    uint32_t *work, *out;
    size_t cap_work, cap_out, n_work, n_out;

    /* masks */
    sp_gmask_entry *cache;
    uint32_t cache_cap, cache_n;
    uint64_t *all_ones, *none;     /* inactive / ended */
    int32_t *dfs;                  /* automaton state per trie depth */
    sp_gpstate *ps;
    uint32_t n_ps, cap_ps;
    uint32_t *ps_ht;               /* id + 1 by pos key */
    uint32_t ps_ht_cap;
    size_t ps_bytes;               /* of the tables: dropped whole past a bound */
    sp_gmatch_stats stats;
};

/* match.c, used by mask.c */
uint32_t sp_gm_advance(sp_gmatch *m, uint32_t set, uint32_t cp);
bool sp_gm_step_byte(sp_gmatch *m, sp_gpos *p, uint8_t b);
bool sp_gm_pos_can_end(const sp_gmatch *m, const sp_gpos *p);
bool sp_gm_state_accept_token(sp_gmatch *m, sp_gstate *s, int32_t tok);

/* mask.c, used by match.c */
void sp_gm_mask_free(sp_gmatch *m);

static inline const uint32_t *sp_gm_set_nodes(const sp_gmatch *m, uint32_t set, uint32_t *len) {
    *len = m->sets[set].len;
    return m->set_nodes + m->sets[set].off;
}

#endif /* SP_GRAMMAR_INTERNAL_H */
