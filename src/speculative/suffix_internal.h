/*
 * suffix_internal.h — the depth-bounded suffix trie behind the `suffix`
 * drafter (SuffixDecoding).  Internal to src/speculative/; the unit tests include
 * it to check the structure against brute force.  Nothing else should.
 *
 * What it stores.  A trie holds one or more token sequences.  For every
 * string s with |s| <= max_depth it knows count(s), the number of positions
 * where s occurs inside a stored sequence.  Appending a token to the open
 * sequence extends the (at most max_depth) suffixes that are still shorter
 * than max_depth by that token: O(max_depth) work per token.
 *
 * How.  A node per string, except that a string seen once is not expanded:
 * a *tail* node (count 1) stands for its whole unique continuation, which
 * is read from the stored sequence (its occurrence).  A second occurrence
 * walking into a tail materialises it one level at a time.  Non-repeating
 * text therefore costs about one node per token; text that repeats costs
 * up to max_depth nodes per repeated token, which is why the engine-wide
 * trie has a node budget as well as a token budget.
 *
 * Sequences are evicted oldest first (FIFO): every suffix of the evicted
 * sequence is walked and its counts decremented, nodes reaching zero are
 * freed.  Afterwards the counts are exactly those of a trie built from the
 * retained sequences alone.
 *
 * Every node remembers the latest occurrence that passed through it; a
 * node with count 1 can therefore be continued past max_depth by reading
 * that occurrence (a unique string has a unique continuation at any
 * length), which is what lets long exact repeats draft far.
 *
 * Proposals (sp_sfx_propose): a *match* is a suffix of the context that
 * occurred before with a continuation, at most
 * max_depth - min(max_n, max_depth / 2) tokens long (so that it leaves
 * room for a continuation inside the depth bound).  From the match,
 * best-first expansion: a child t of string P gets probability
 *     prob(P t) = prob(P) * count(P t) / sum_x count(P x)
 * (the sum over continuations, so occurrences at the end of a sequence —
 * the context itself in the per-request trie — do not dilute it);
 * candidates below min_prob are dropped, a path is at most
 * floor(factor * match length) long, the whole proposal at most max_n
 * tokens, and each node contributes its `width` most frequent children
 * (ties: the most recent occurrence, then the smaller token id).  width 1
 * gives the chain of most probable tokens.  score = sum of the emitted
 * tokens' probabilities = the expected number of accepted tokens under the
 * frequency model.  Trees come out in depth-first preorder with the more
 * probable child first, so the first root-to-leaf run is the chain and
 * the order is topological.  Every match length is tried, longest first,
 * and the best score wins (the longer match on ties); the search stops as
 * soon as floor(factor * m) cannot beat it, so in practice the longest
 * match decides unless its continuation is cut short.
 *
 * Not thread-safe: the drafter serialises access to the shared trie.
 */
#ifndef SP_SPEC_SUFFIX_INTERNAL_H
#define SP_SPEC_SUFFIX_INTERNAL_H

#include "speculative/speculative.h"

#define SP_SFX_MAX_DEPTH 512          /* largest max_depth accepted */
#define SP_SFX_MAX_WIDTH 8            /* largest tree width accepted */

typedef struct sp_sfx sp_sfx;

/* One structure's proposal.  tok/parent/prob (n) in topological order;
 * parent -1 = the pending token. */
typedef struct sp_sfx_cand {
    int n;
    int match_len;                    /* length of the matched context suffix, 0 = none */
    double score;                     /* sum of prob */
    int32_t tok[SP_MAX_DRAFT];
    int32_t parent[SP_MAX_DRAFT];
    float prob[SP_MAX_DRAFT];
} sp_sfx_cand;

typedef struct sp_sfx_params {
    int max_n;                        /* tokens in the proposal, 1..SP_MAX_DRAFT */
    float factor;                     /* a path is at most floor(factor * match_len) */
    float min_prob;                   /* candidates below are dropped */
    int width;                        /* children per node, 1 = chain */
} sp_sfx_params;

/* A trie with the given depth bound (2..SP_SFX_MAX_DEPTH); never NULL. */
sp_sfx *sp_sfx_create(int max_depth);
void sp_sfx_free(sp_sfx *t);
int sp_sfx_max_depth(const sp_sfx *t);

/* Starts a new sequence (closing the open one, if any); appends go to it. */
void sp_sfx_open_seq(sp_sfx *t);
/* Appends n tokens to the open sequence (opens one if none is open). */
void sp_sfx_append(sp_sfx *t, const int32_t *tok, int n);
/* Closes the open sequence: it is complete and may be evicted. */
void sp_sfx_close_seq(sp_sfx *t);
/* Evicts the oldest sequence (which must be closed); false if there is none. */
bool sp_sfx_evict_oldest(sp_sfx *t);

/* The i-th retained sequence, oldest first (borrowed, valid until the next
 * change); *n gets its length. */
const int32_t *sp_sfx_seq(const sp_sfx *t, int i, int *n);
int sp_sfx_n_seqs(const sp_sfx *t);
int64_t sp_sfx_tokens(const sp_sfx *t);       /* tokens in retained sequences */
int64_t sp_sfx_nodes(const sp_sfx *t);        /* live nodes, the root included */
size_t sp_sfx_bytes(const sp_sfx *t);         /* heap bytes held */

/* count(s) for n <= max_depth (n = 0: the number of stored tokens). */
int64_t sp_sfx_count(const sp_sfx *t, const int32_t *s, int n);
/* Length of the longest suffix of ctx[0..n), at most max_len and at most
 * max_depth - 1 tokens, that occurs in the trie followed by a token; 0 if
 * none. */
int sp_sfx_match(const sp_sfx *t, const int32_t *ctx, int n, int max_len);
/* The proposal for the context ctx[0..n) (see the top of this file). */
void sp_sfx_propose(const sp_sfx *t, const int32_t *ctx, int n, const sp_sfx_params *p,
                    sp_sfx_cand *out);

/* Checks the structural invariants (links, hash, counts, occurrences);
 * 0 if they hold, else -1 with a description in msg. */
int sp_sfx_check(const sp_sfx *t, char *msg, size_t cap);

/* The engine-wide trie of a `suffix` drafter, read under its lock (a
 * diagnostic: it also runs sp_sfx_check, which walks the whole trie). */
typedef struct sp_suffix_info {
    int seqs;
    int64_t tokens, nodes;
    size_t bytes;
    int check;                        /* sp_sfx_check: 0 = consistent */
    char msg[128];                    /* its message otherwise */
} sp_suffix_info;
void sp_suffix_global_info(sp_drafter *d, sp_suffix_info *out);

#endif /* SP_SPEC_SUFFIX_INTERNAL_H */
