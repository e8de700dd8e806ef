/*
 * spec — lossless speculative decoding: the drafter seam, the round loop,
 * verification, the drafters, statistics and the adaptive draft length.
 *
 * One round of a sequence:
 *
 *   feed = tokens emitted since the last round (the correction or bonus)
 *   proposal = draft.propose(feed, n_max)           0..n_max draft tokens
 *   logits = target.forward([pending, d1..dn])      n+1 rows, one pass
 *   accept walk: at row i the target samples its own token with the full
 *     sampler keyed by (seed, position); keep d(i+1) while equal; the first
 *     difference (the correction) or the row after the last draft (the
 *     bonus) ends the round.  Every sampled token is emitted in order, so
 *     EOS, stop strings and max_tokens act exactly as in plain decoding.
 *   kv.trim(rejected positions); draft.commit(n, accepted)
 *
 * Because the window's logits are bit-identical to one-token decoding
 * (batch invariance, see model.h) and the draws are keyed by position,
 * token match gives the same text as plain decoding at any temperature.
 * Drafters that return their distribution q are verified by speculative
 * sampling instead (accept with min(1, p/q), else resample from
 * norm(max(0, p - q))), which preserves the target distribution exactly.
 */
#ifndef SP_SPEC_H
#define SP_SPEC_H

#include "base/base.h"
#include "model/model.h"
#include "grammar/grammar.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"   /* cross-tokenizer drafting re-tokenizes text */

#define SP_MAX_DRAFT 32              /* longest proposal a round verifies */
#define SP_STAT_POSITIONS SP_MAX_DRAFT

/* ==========================================================================
 * The drafter seam
 * ======================================================================= */

/* What the target offers drafters.  A drafter declares what it needs and is
 * refused at open when the target lacks it. */
enum {
    SP_CAP_SHARED_EMBED = 1u << 0,   /* token embeddings / LM head readable */
    SP_CAP_HIDDEN_TAPS = 1u << 1,    /* hidden states at chosen layers per row */
    SP_CAP_ANCHOR_HIDDEN = 1u << 2,  /* final hidden state of the pending row */
    SP_CAP_LAYER_KV = 1u << 3,       /* read-only KV of a layer */
    SP_CAP_TOKENIZER = 1u << 4,      /* the target's tokenizer (cross-vocabulary drafting) */
    SP_CAP_SAMPLING = 1u << 5,       /* the request's sampling parameters (drafters returning q) */
};
const char *sp_caps_describe(uint32_t caps, char *buf, size_t cap);

typedef struct sp_target {
    const sp_model *model;           /* identity of the target (borrowed) */
    uint32_t caps;                   /* SP_CAP_* the engine provides */
    const sp_tokenizer *tok;         /* with SP_CAP_TOKENIZER (borrowed) */
    const sp_sampler_params *sampling; /* with SP_CAP_SAMPLING (borrowed, request lifetime) */
} sp_target;
/* The capabilities this engine's forward pass provides for a model. */
sp_target sp_target_of(const sp_model *m);
/* The same, plus the target's tokenizer and the request's sampling
 * parameters (either may be NULL). */
sp_target sp_target_full(const sp_model *m, const sp_tokenizer *tok, const sp_sampler_params *sampling);

/* Hidden states handed to drafters that declare SP_CAP_HIDDEN_TAPS: for
 * each row, the target's residual stream at the drafter's tap layers (see
 * sp_fwd_seq), a row's taps contiguous (the concatenation an EAGLE-style
 * fusion layer reads).  Rows are consecutive positions of the sequence:
 * for prefill the prompt's, for commit the anchor (the pending token the
 * round verified first) and the accepted drafts that stay in the cache. */
typedef struct sp_taps {
    int n_rows, n_layers, dim;
    int pos;                         /* sequence position of row 0 */
    const float *data;               /* (n_rows, n_layers, dim), borrowed for the call */
} sp_taps;

/* A proposal.  Arrays are owned by the draft and valid until its next call. */
typedef struct sp_proposal {
    int n;                           /* draft tokens; 0 = plain step */
    const int32_t *tokens;           /* (n) */
    const int32_t *parent;           /* (n) tree parents (-1 = the pending token), NULL = chain */
    const float *q;                  /* (n, n_vocab) draft distributions, NULL = deterministic */
    const char *by;                  /* the drafter that proposed (static or drafter-lifetime
                                        name; set by sp_draft_propose when a drafter leaves it NULL) */
    uint64_t absorb_ns;              /* of this call's time, what went to taking in the feed and
                                        verified rows, which the drafter does whether it drafts or
                                        not (a head catching its cache up): the adaptive length
                                        charges drafting only the rest */
    uint64_t draft_ns;               /* propose_group only: the time of the passes this draft had
                                        a row in (shared with other sequences' drafts) */
    double expect;                   /* the drafter's own estimate of the tokens verification will
                                        accept: the sum over the proposal's tokens of the probability
                                        that the path to each is right; 0 = no estimate.  A
                                        combination compares its members' proposals by it */
} sp_proposal;

typedef struct sp_drafter sp_drafter;
typedef struct sp_draft sp_draft;

/* The operations every drafter implements.  A draft (one per request) owns
 * only that request's state; the drafter (engine lifetime) owns weights and
 * global tables. */
typedef struct sp_drafter_ops {
    /* Per request. */
    sp_draft *(*open)(sp_drafter *d, const sp_target *t, sp_err *err);
    /* Primes the draft with the prompt (the whole prompt; its last token is
     * already in the target cache, the first generated token arrives as the
     * first feed).  taps: the prompt's rows, for drafters that asked. */
    int (*prefill)(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err);
    /* Optional (NULL: the drafter's state is not worth keeping beside a
     * cached prefix; it is primed afresh).  As prefill, after a restore of
     * a checkpoint whose state covers prompt[0..n_done): the draft takes in
     * the rest.  taps (drafters that asked) cover the rows the target ran,
     * [taps->pos, n) with taps->pos <= n_done: rows before n_done are
     * already in the state and are skipped. */
    int (*resume)(sp_draft *s, const int32_t *prompt, int n, int n_done, const sp_taps *taps, sp_err *err);
    /* Absorbs feed (tokens emitted since the last round, oldest first) and
     * proposes up to max_n tokens.  max_n = 0 only absorbs the feed. */
    int (*propose)(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                   sp_err *err);
    /* Optional (NULL: each draft proposes on its own).  propose for n
     * drafts of this drafter at once (several sequences of one batched
     * step), as if each s[i] were asked propose(feed[i], n_feed[i],
     * max_n[i]) -> out[i], so they can share passes.  The engine uses it
     * when two or more sequences draft with the same drafter. */
    int (*propose_group)(sp_draft **s, const int32_t *const *feed, const int *n_feed, const int *max_n,
                         sp_proposal *out, int n, sp_err *err);
    /* The outcome of the last proposal: n_accepted of its tokens were
     * emitted, in order: path[0..n_accepted) are their indices in the
     * proposal (for a chain path is NULL and they are the first
     * n_accepted).  Rejected tokens must not enter the draft's state; the
     * correction/bonus arrives as the next feed.  verified: for drafters
     * that declare SP_CAP_HIDDEN_TAPS, the verified rows that entered the
     * target cache (the anchor, then the accepted drafts; never a rejected
     * row), else NULL.  Such drafters get a commit after every round, with
     * n_drafted = 0 when the round had no proposal, so no row is missed. */
    void (*commit)(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path,
                   const sp_taps *verified);
    /* Optional (NULL: the drafter cannot).  As propose, but the proposal
     * continues the feed followed by `ahead`: tokens about to be verified
     * before the proposal (a grammar-forced span) that the draft must not
     * absorb yet.  The next commit counts over ahead + proposal as one
     * chain (n_drafted = n_ahead + out->n, n_accepted along it), so the
     * accepted ahead tokens enter the draft's state there.  Chains only;
     * n_ahead + max_n <= SP_MAX_DRAFT. */
    int (*propose_ahead)(sp_draft *s, const int32_t *feed, int n_feed, const int32_t *ahead, int n_ahead,
                         int max_n, sp_proposal *out, sp_err *err);
    /* Serialises the draft's state (after its namespace header) into a new
     * malloc'd buffer; restore accepts only a matching namespace. */
    int (*checkpoint)(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err);
    int (*restore)(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err);
    void (*close)(sp_draft *s);
    /* Engine lifetime. */
    void (*free)(sp_drafter *d);
} sp_drafter_ops;

struct sp_drafter {
    const sp_drafter_ops *ops;
    char name[32];                   /* "ngram" */
    char ns[96];                     /* checkpoint namespace: method, params, version */
    uint32_t needs;                  /* SP_CAP_* required of the target */
    int n_taps;                      /* with SP_CAP_HIDDEN_TAPS: the layer boundaries it reads */
    int32_t tap_layers[SP_MAX_TAPS]; /* (see sp_fwd_seq: l < n_layer = input of layer l) */
    bool cheap;                      /* proposing costs ~nothing (may shadow-propose) */
    bool keeps_state;                /* has ops->resume: its state is worth a checkpoint beside a
                                        cached prefix (priming it costs passes; model-free drafters
                                        rebuild theirs from the tokens in microseconds) */
    int adaptive_cap;                /* the longest draft the adaptive length asks of it (0: 16) */
    int cheap_lead;                  /* a combination of cheap drafters then costly ones: how many
                                        cheap ones lead (0 = none; the gate may run them alone) */
    uint64_t serial;                 /* unique to this drafter in the process (sp_drafter_alloc):
                                        state kept about it elsewhere (a context's gates) is keyed
                                        by it, as a freed drafter's address may come back */
    void *impl;
};

/* A zeroed drafter with a new serial, for a drafter's create function. */
sp_drafter *sp_drafter_alloc(void);

struct sp_draft {
    sp_drafter *drafter;             /* borrowed */
    void *impl;
    int members;                     /* a combination: the leading members that may propose
                                        (0 = all; set by the gate) */
};

/* Generic entry points (check capabilities, namespaces, proposals). */
sp_draft *sp_draft_open(sp_drafter *d, const sp_target *t, sp_err *err);
/* ops->propose, then checks the proposal's shape (0 <= n <= max_n, tree
 * parents before their children, no q with a tree) and names its drafter
 * in out->by. */
int sp_draft_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                     sp_err *err);
/* ops->propose_group over n drafts of one drafter (which has it), with the
 * same checks on each proposal. */
int sp_draft_propose_group(sp_draft **s, const int32_t *const *feed, const int *n_feed, const int *max_n,
                           sp_proposal *out, int n, sp_err *err);
/* ops->propose_ahead (which must exist), with the same checks; a tree is
 * refused. */
int sp_draft_propose_ahead(sp_draft *s, const int32_t *feed, int n_feed, const int32_t *ahead, int n_ahead,
                           int max_n, sp_proposal *out, sp_err *err);
void sp_draft_close(sp_draft *s);
void sp_drafter_free(sp_drafter *d);
int sp_draft_checkpoint(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err);
int sp_draft_restore(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err);

/* Namespace header helpers for checkpoint blobs: "<ns>\n" then payload. */
size_t sp_ckpt_header(const sp_drafter *d, uint8_t *buf, size_t cap);
/* Checks the header; returns the payload offset or -1 + err. */
long sp_ckpt_check(const sp_drafter *d, const uint8_t *buf, size_t len, sp_err *err);
/* A sampled draft token (drafters returning q): the sampler's final
 * distribution over `logits`, written densely to q (n_vocab entries, 0
 * off its candidates; map: candidate id -> target id, NULL = the same),
 * and one draw from it keyed by (seed ^ key, pos), apart from the
 * target's draws.  *top (may be NULL) = q's largest entry. */
int32_t sp_draft_sample(sp_sampler *smp, const float *logits, const int32_t *map, float *q, int n_vocab,
                        uint64_t key, uint64_t pos, float *top);

/* ==========================================================================
 * Drafters
 * ======================================================================= */

/* Prompt lookup: the longest suffix k-gram of (prompt + output), k from
 * max_ngram down to min_ngram, at its first occurrence; proposes the
 * tokens that followed it.  Incremental hash index: O(max-min+1) per token. */
sp_drafter *sp_ngram_create(int min_ngram, int max_ngram, sp_err *err);
/* Tree proposals: the continuations of the first `width` occurrences. */
sp_drafter *sp_ngram_create_tree(int min_ngram, int max_ngram, int width, sp_err *err);

/* Suffix-tree drafting (SuffixDecoding, Oliaro et al., NeurIPS 2025).  A
 * depth-bounded suffix trie over the request's history (prompt + output)
 * and an engine-wide one over the outputs of earlier requests, each with
 * the last global_prompt_tail tokens of its prompt (bounded:
 * oldest evicted first; shared by concurrent drafts under a mutex; a
 * request's output joins it when its draft closes).  A proposal follows a
 * context suffix that occurred before with a continuation (at most
 * max_depth - min(max_n, max_depth / 2) tokens; the longest unless a
 * shorter one scores higher), takes at each step the
 * most frequent continuation with probability count(child) / sum of the
 * sibling counts (cumulative product along the path), stops below
 * min_prob, and is at most factor * match length long; of the two
 * structures the one with the higher expected accepted length (sum of the
 * cumulative probabilities) wins, on a tie the longer match.  tree_width > 1
 * returns a token tree in `parent` (each node's tree_width most frequent
 * continuations, best-first by probability, at most max_n tokens,
 * depth-first preorder so the first run is the chain). */
typedef struct sp_suffix_opts {
    int max_depth;                   /* trie depth bound, 4..512 (default 64) */
    float factor;                    /* draft length <= factor * match length (default 1) */
    float min_prob;                  /* drop candidates below this probability (default 0.1) */
    int tree_width;                  /* 1 = chain (default); 2..8 = tree proposals */
    int64_t global_tokens;           /* engine-wide budget in tokens, 0 = no engine-wide trie (default 65536) */
    int64_t global_nodes;            /* engine-wide budget in trie nodes (default 524288, ~40 MB at most) */
    bool global_prompts;             /* engine-wide trie gets whole prompts too (default false) */
    int global_prompt_tail;          /* else the last N prompt tokens before each output (default 8):
                                        the end of the request and the template's turn header, so a
                                        repeated request matches across the prompt/output boundary */
} sp_suffix_opts;
sp_suffix_opts sp_suffix_defaults(void);
/* o = NULL: the defaults.  Fails (err) on out-of-range options. */
sp_drafter *sp_suffix_create(const sp_suffix_opts *o, sp_err *err);

/* A second, smaller model drafts ("draft"), or the target drafts with a
 * subset of its own layers ("self").  Same vocabulary: token ids pass
 * through, the draft cache rolls back exactly on rejection, and with
 * `sample` the draft samples from its own distribution q (the request's
 * sampling parameters applied to the draft's logits) and returns q, so
 * the target verifies by speculative sampling.  Different vocabularies
 * (checked: kind, size, special tokens, every token's text): drafts are
 * made on text — the target history is detokenized and re-tokenized for
 * the draft model, the draft's text re-tokenized for the target after the
 * last few target tokens (universal assisted generation); greedy only. */
typedef struct sp_draft_model_opts {
    int n_ctx;                       /* draft cache size (0 = 4096) */
    bool sample;                     /* speculative sampling with q (same vocabulary only) */
    float min_prob;                  /* stop drafting when the draft's top probability is below (0 = never) */
    bool min_prob_set;               /* "eagle": min_prob was given (0 included); else the head file's */
    const sp_model_load_opts *load;  /* "draft": how the draft model is loaded (borrowed, read at
                                      * creation); NULL = sp_model_load_default_opts() */
} sp_draft_model_opts;
/* path: the draft GGUF.  pool is borrowed (the engine's). */
sp_drafter *sp_draft_model_create(const char *path, const sp_draft_model_opts *o, sp_pool *pool,
                                  sp_err *err);
/* skip[il] != 0: layers of `target` the draft skips (copied). */
sp_drafter *sp_self_create(const sp_model *target, const uint8_t *skip, const sp_draft_model_opts *o,
                           sp_pool *pool, sp_err *err);
/* The bridge of cross-vocabulary drafting: target tokens (at most max_n)
 * that continue a target token history with `text`.  The text of the last
 * few history tokens is tokenized together with `text`; when it comes out
 * as the very same tokens, what follows them is the continuation, minus
 * its last token (the text may end inside a word).  So history +
 * continuation is always a tokenization of a prefix of history-text +
 * text: nothing lost, nothing duplicated.  Returns the count (0 when the
 * boundary does not re-tokenize cleanly) or -1 + err. */
int sp_xvocab_continue(const sp_tokenizer *ttok, const int32_t *thist, int n_thist, const char *text,
                       size_t n_text, int max_n, int32_t *out, sp_err *err);

/* An EAGLE-3-style draft head (model/head.c) that reads the target's
 * hidden states at three layers (SP_CAP_HIDDEN_TAPS) and drafts greedily
 * from its reduced vocabulary, feeding its own hidden state forward, until
 * its top probability falls below min_prob (see eagle.c).  The head file
 * must have been trained for `target` (checked by fingerprint). */
typedef struct sp_eagle_opts {
    int n_ctx;                       /* the head's cache (0 = 4096; the target's context) */
    float min_prob;                  /* < 0: the head file's specula.draft_min_prob */
    int tree_width;                  /* 0/1: chains; 2..8: the first draft's likely runners-up join as siblings */
    bool sample;                     /* at T > 0, sample drafts from the head and return q (exact by
                                        speculative sampling); chains only */
} sp_eagle_opts;
sp_drafter *sp_eagle_create(const char *path, const sp_model *target, const sp_eagle_opts *o, sp_pool *pool,
                            sp_err *err);
/* What a head costs on this machine, each part timed right after a
 * one-row target forward (which evicts the head's weights from the caches,
 * as a round's verification does); medians in seconds. */
typedef struct sp_eagle_cost_t {
    double t1;                       /* the one-row target forward */
    double draft_row;                /* one drafted token: a head row and its LM head */
    double catchup_row;              /* one verified row entering the head: fc and the layer (2 a pass) */
    int n_vocab_draft;
} sp_eagle_cost_t;
int sp_eagle_cost(const char *path, const sp_model *target, sp_workspace *ws, sp_pool *pool, sp_eagle_cost_t *out,
                  sp_err *err);

/* Creates a drafter by name ("ngram", "suffix", "draft", "self", "eagle",
 * or a combination "A,B" / "A+B") with parameters from the options below
 * (0 = default). */
typedef struct sp_drafter_opts {
    int ngram_min, ngram_max;
    float suffix_factor, suffix_min_prob;
    int suffix_max_depth;
    int tree_width;                  /* tree proposals (ngram, suffix); 0/1 = chains */
    /* model drafters */
    const char *draft_model;         /* "draft": path of the draft GGUF */
    const sp_model *target;          /* "self": the target (borrowed) */
    const char *self_layers;         /* "self": layers the draft keeps, e.g. "0-14,29" (any order,
                                      * sp_parse_index_list); NULL = default */
    sp_pool *pool;                   /* the engine's pool (borrowed) */
    const char *draft_head;          /* "eagle": path of the head's GGUF */
    sp_draft_model_opts dm;
} sp_drafter_opts;
/* Several drafters, asked in order; the proposal expected to gain most is
 * verified (see combine.c); takes ownership of subs[0..n). */
sp_drafter *sp_combine_create(sp_drafter **subs, int n, sp_err *err);
/* The layers "self" keeps by default for a model: [0, n/2) and the last. */
void sp_self_default_layers(const sp_model *m, uint8_t *keep);
sp_drafter *sp_drafter_create(const char *name, const sp_drafter_opts *o, sp_err *err);
/* Checks a method name (or combination) without creating anything. */
int sp_drafter_check_name(const char *name, sp_err *err);

/* ==========================================================================
 * Verification (verify.c)
 * ======================================================================= */

/* Speculative sampling for one position: the target distribution p (as the
 * sampler's candidates), the draft distribution q (dense, n_vocab), the
 * draft token x.  Accepts x with probability min(1, p(x)/q(x)) using u_acc;
 * else returns a token from norm(max(0, p - q)) drawn with u_res.  *accepted
 * says which. */
int32_t sp_verify_specsample(const sp_cand *p, int n_p, const float *q, int n_vocab, int32_t x,
                             double u_acc, double u_res, bool *accepted);

/* ==========================================================================
 * Statistics (stats.c)
 * ======================================================================= */
typedef struct sp_method_stats {
    char name[16];
    int64_t rounds, drafted, accepted;
} sp_method_stats;
#define SP_STAT_METHODS 5            /* a combination of 4 + "grammar" (forced spans) */

typedef struct sp_spec_stats {
    int64_t requests;                /* generations summed into these stats */
    sp_method_stats by_method[SP_STAT_METHODS]; /* per drafter of a combination */
    int n_methods;
    int64_t rounds;                  /* verification rounds (incl. plain steps) */
    int64_t spec_rounds;             /* rounds with >= 1 draft token */
    int64_t drafted, accepted;
    int64_t pos_drafted[SP_STAT_POSITIONS];  /* drafts at position i of a proposal */
    int64_t pos_accepted[SP_STAT_POSITIONS];
    int64_t forwards;                /* target passes after prefill */
    int64_t group_proposals;         /* proposals made in a group call with other sequences' drafts */
    int64_t gated_rounds;            /* rounds in which the gate (spec_gate.c) allowed no drafts */
    int64_t cheap_rounds;            /* ... or only a combination's cheap members */
    int64_t emitted;                 /* generated tokens */
    int64_t n_prompt;                /* prompt tokens prefilled */
    int64_t n_cached;                /* prompt tokens found in a cache (not prefilled) */
    uint64_t prefill_ns, draft_ns, verify_ns, sample_ns, total_ns;
    /* under a grammar */
    int64_t forced_drafted, forced_accepted;  /* grammar-forced draft tokens (also under "grammar"
                                                 in by_method) */
    int64_t masks, mask_misses;      /* rows that needed the grammar's mask; of those, computed */
    uint64_t mask_ns;                /* time in the grammar: masks, checks, forced spans */
} sp_spec_stats;

void sp_stats_add(sp_spec_stats *into, const sp_spec_stats *s);
/* Records a verified proposal of drafter `name` (per-drafter breakdown). */
void sp_stats_method(sp_spec_stats *st, const char *name, int drafted, int accepted);
double sp_stats_accept_rate(const sp_spec_stats *s);     /* accepted / drafted */
double sp_stats_mean_accept_len(const sp_spec_stats *s); /* 1 + accepted / spec rounds */
double sp_stats_tokens_per_forward(const sp_spec_stats *s);
double sp_stats_decode_tps(const sp_spec_stats *s);      /* emitted / decode seconds */
/* One line: "spec ngram: rounds R, drafted D, accepted A (x%), mean accept len L, ..." */
void sp_stats_format(const sp_spec_stats *s, const char *method, char *buf, size_t cap);

/* ==========================================================================
 * Verification cost and adaptive draft length (adaptive.c)
 * ======================================================================= */

/* t(K): seconds of a target forward over K rows, K = 1..SP_MAX_DRAFT+1. */
typedef struct sp_cost_curve {
    double t[SP_MAX_DRAFT + 2];      /* t[K]; t[0] unused */
    bool valid;
} sp_cost_curve;

/* Measures t(K) for K in ks (others interpolated) with reps repetitions
 * (median), using a scratch cache, each window after ctx0 tokens of
 * context (the controller's curve: 32; attention makes a window dearer as
 * the context grows). */
int sp_cost_measure(const sp_model *m, sp_workspace *ws, const int *ks, int n_ks, int reps, int ctx0,
                    sp_cost_curve *c, sp_err *err);
/* Loads the curve cached for (model, threads, this binary) in cache_dir,
 * or measures it and saves it there (best effort).  cache_dir must exist
 * (the caller picks it: `specula` uses ~/.cache/specula/cost); NULL
 * measures without a cache. */
int sp_cost_get(const sp_model *m, sp_workspace *ws, int threads, const char *cache_dir, sp_cost_curve *c,
                sp_err *err);

/* Per-request controller: running acceptance per draft position, the
 * cost curve and the measured cost of drafting pick the draft length that
 * maximises expected emitted tokens per second.  Falls to 0 (plain
 * decoding) when speculation does not pay, and keeps learning from shadow
 * proposals (cheap drafters) meanwhile. */
typedef struct sp_adapt {
    double tried[SP_MAX_DRAFT], hit[SP_MAX_DRAFT];   /* decayed counts per position */
    double draft_s, draft_n;         /* decayed seconds spent drafting, tokens asked for */
    double absorb_s, absorb_n;       /* decayed seconds a proposal spent catching up, proposals */
    const sp_cost_curve *cost;       /* borrowed */
    int cap;                         /* upper bound on the draft length */
} sp_adapt;
void sp_adapt_init(sp_adapt *a, const sp_cost_curve *cost, int cap);
/* Best draft length in [0, cap] for a sequence alone in its pass. */
int sp_adapt_choose(const sp_adapt *a);
/* The same when the pass already holds `rows` rows of other sequences,
 * expected to emit `tokens` tokens (continuous batching): the length that
 * maximises the whole pass's tokens per second. */
int sp_adapt_choose_in(const sp_adapt *a, int rows, double tokens);
/* A proposal's catch-up time (sp_proposal.absorb_ns): alone a drafter pays
 * it whether it drafts now or later, but in a pass with other sequences it
 * delays every row at once, so there it is charged to drafting. */
void sp_adapt_absorb_cost(sp_adapt *a, double seconds);
/* Records a verified (or shadow) proposal: n drafted, k accepted. */
void sp_adapt_observe(sp_adapt *a, int n, int k);
/* Records that asking the drafter for n tokens took `seconds` (a draft
 * model's or self-speculation's forwards; ~0 for lookup drafters). */
void sp_adapt_draft_cost(sp_adapt *a, int n, double seconds);
/* Draft tokens of the first proposal of a drafter whose cost is not yet
 * measured (one that runs a model): the probe that measures it. */
#define SP_ADAPT_PROBE 2
/* Plain rounds after which a costly drafter the controller stopped is
 * probed again (SP_ADAPT_PROBE tokens). */
#define SP_ADAPT_REPROBE 16
/* Expected tokens per round with a draft of n (1 + sum of survival). */
double sp_adapt_expected(const sp_adapt *a, int n);

/* ==========================================================================
 * The gate: whether drafting pays, measured end to end (spec_gate.c)
 * ======================================================================= */

/* What a step may draft with.  CHEAP exists for combinations whose cheap
 * members lead (sp_drafter.cheap_lead): "suffix,eagle" with suffix alone. */
typedef enum { SP_GATE_PLAIN = 0, SP_GATE_CHEAP = 1, SP_GATE_ALL = 2 } sp_gate_mode;

/* Steps are bucketed by the sequences decoding in their pass: 1 .. 8+. */
#define SP_SPEC_GATE_BUCKETS 8
typedef struct sp_spec_gate_bucket {
    double tok[3], sec[3], n[3];     /* per mode: decayed tokens, seconds and steps measured */
    int pos, cycle;                  /* step within the current cycle; cycles done */
    int backoff;                     /* the main part is 2^backoff times the usual (a clear lead) */
    sp_gate_mode prefer;             /* the cycle's main mode */
    bool fresh;                      /* the last step switched modes (it is not measured) */
    int last;                        /* the last step's mode (-1 before the first) */
} sp_spec_gate_bucket;
typedef struct sp_spec_gate {
    bool cheap;                      /* CHEAP is a mode of this gate */
    sp_spec_gate_bucket b[SP_SPEC_GATE_BUCKETS];
} sp_spec_gate;

/* A gate whose modes are PLAIN and ALL, and CHEAP too when `cheap`. */
void sp_spec_gate_init(sp_spec_gate *g, bool cheap);
/* The mode of the next step whose pass decodes n_seqs sequences.
 * Advances that bucket's schedule. */
sp_gate_mode sp_spec_gate_next(sp_spec_gate *g, int n_seqs);
/* The step sp_spec_gate_next was just asked about took `seconds` of wall
 * time (planning, drafting, the forward, verification) and emitted
 * `tokens`. */
void sp_spec_gate_observe(sp_spec_gate *g, int n_seqs, sp_gate_mode mode, double tokens, double seconds);
/* The measured tokens per second of a bucket's mode, 0 while unknown. */
double sp_spec_gate_rate(const sp_spec_gate *g, int n_seqs, sp_gate_mode mode);

/* ==========================================================================
 * The round loop of one sequence (round.c)
 *
 * A round has three phases so that the engine (src/engine) can verify the
 * windows of many sequences in one target pass:
 *
 *   sp_seq_plan    propose; describe this sequence's rows of the pass
 *   (the engine runs every planned row in one sp_model_forward_batch)
 *   sp_seq_apply   accept walk over the pass's logits, KV compaction,
 *                  drafter commit, emission
 *
 * Prompts are prefilled through the same phases, in chunks.
 * ======================================================================= */

typedef enum sp_emit_result { SP_EMIT_CONTINUE = 0, SP_EMIT_STOP = 1 } sp_emit_result;
/* Called for every generated token, in order.  `drafted` is true when the
 * token was a draft the target accepted; `logits` is the target's row
 * (n_vocab floats, before any sampler transform) the token was sampled
 * from, borrowed for the call (for logprobs).  SP_EMIT_STOP ends the
 * sequence after this token. */
typedef sp_emit_result (*sp_emit_fn)(void *ud, int32_t token, bool drafted, const float *logits);

/* Why a sequence ended. */
typedef enum sp_finish {
    SP_FINISH_NONE = 0,              /* still running */
    SP_FINISH_STOP,                  /* the callback stopped (EOS, stop string) */
    SP_FINISH_LENGTH,                /* max_tokens reached */
    SP_FINISH_CONTEXT,               /* the context window is full */
    SP_FINISH_CANCELLED,             /* cancelled by its owner */
    SP_FINISH_ERROR,                 /* failed (a drafter or the pass reported an error) */
} sp_finish;
const char *sp_finish_name(sp_finish f);

#define SP_DRAFT_ADAPTIVE (-1)

typedef struct sp_gen_config {
    int max_tokens;
    int draft_max;                   /* > 0 fixed, SP_DRAFT_ADAPTIVE, 0 = never draft */
    const sp_cost_curve *cost;       /* required for SP_DRAFT_ADAPTIVE */
    bool forced_spans;               /* under a grammar: propose the tokens it forces as drafts */
} sp_gen_config;

/* One generation in progress.  Owns its logits buffer; borrows the model,
 * cache, sampler and draft. */
typedef struct sp_seq sp_seq;

sp_seq *sp_seq_create(const sp_model *m, sp_kv *kv, sp_sampler *smp, sp_draft *draft,
                      const sp_gen_config *cfg, sp_emit_fn emit, void *ud);
/* Constrains the sequence's output to a grammar (gm borrowed, at the start
 * of its grammar; call before sp_seq_start).  Every row is sampled under
 * the grammar's mask, the matcher advances over each emitted token, drafts
 * the grammar forbids end their proposal before verification, and with
 * cfg.forced_spans the tokens the grammar forces are proposed as drafts.
 * A position where the grammar allows no token ends the sequence with an
 * error (sp_seq_apply fails with a message naming the grammar). */
void sp_seq_set_grammar(sp_seq *q, sp_gmatch *gm);
/* The gate's word for the next plans (ctx.c): PLAIN = draft nothing
 * (forced spans still run), CHEAP = a combination's leading cheap members
 * only.  Only a sequence under the adaptive length obeys: a fixed
 * --draft-max is the caller's choice. */
void sp_seq_gate(sp_seq *q, sp_gate_mode mode);
/* Whether the gate applies: a drafter under the adaptive length. */
bool sp_seq_gateable(const sp_seq *q);
void sp_seq_free(sp_seq *q);
/* Starts a generation: the prompt (copied) is prefilled by the next plans,
 * except its first n_cached tokens, which the cache already holds (its
 * first n_cached rows, exactly those tokens' and positions': the caller's
 * word).  The drafter is primed with the whole prompt, or, when n_resumed
 * > 0, was restored from a checkpoint covering the prompt's first
 * n_resumed tokens and is primed with the rest (ops->resume).  Fails on an
 * empty prompt, one the cache holds whole, one that does not fit, or a
 * cached prefix with a drafter that reads hidden states unless its state
 * covers at least the cached rows (it needs the hidden states of every row
 * it has not seen). */
int sp_seq_start(sp_seq *q, const int32_t *prompt, int n_prompt, int n_cached, int n_resumed, sp_err *err);
bool sp_seq_prefilling(const sp_seq *q);
/* Plans this sequence's rows of the next pass into fwd: a prompt chunk of
 * at most max_rows (0 = all), or the verification window [pending,
 * drafts...].  The pass already holds pass_rows rows of other sequences,
 * expected to emit pass_tokens tokens: the adaptive draft length maximises
 * the whole pass's rate (sp_adapt_choose_in).  fwd->n == 0 when there is
 * nothing to run (the sequence has finished). */
int sp_seq_plan(sp_seq *q, int max_rows, int pass_rows, double pass_tokens, sp_fwd_seq *fwd,
                sp_err *err);
/* As sp_seq_plan, except that a sequence whose drafter proposes in groups
 * (ops->propose_group) and is to be asked for a proposal stops before
 * asking: *deferred is set, fwd->n is 0 and its planned tokens are the
 * controller's expectation for the length it will ask. */
int sp_seq_plan_deferrable(sp_seq *q, int max_rows, int pass_rows, double pass_tokens, sp_fwd_seq *fwd,
                           bool *deferred, sp_err *err);
/* Completes the deferred plans of n sequences whose drafts share one
 * drafter: one propose_group for all, then each one's window into fwd[i]
 * as sp_seq_plan would have planned it.  Each sequence is charged the
 * drafting time its proposal reports (ops->propose_group's draft_ns and
 * absorb_ns).  On error every one of them has failed. */
int sp_seq_plan_group(sp_seq **q, int n, sp_fwd_seq *fwd, sp_err *err);
/* The draft length a deferred plan asks for (0 = not deferred). */
int sp_seq_deferred(const sp_seq *q);
/* Tokens the last planned pass of q is expected to emit (its controller's
 * estimate; 0 for a prompt chunk that is not the last). */
double sp_seq_planned_tokens(const sp_seq *q);
/* After the planned rows ran (alone or batched with other sequences'
 * rows): accept walk, cache compaction, commit, emission.  verify_ns is
 * the pass's time, for statistics. */
int sp_seq_apply(sp_seq *q, uint64_t verify_ns, sp_err *err);
/* Ends the sequence now with `why` (SP_FINISH_CANCELLED or _ERROR); the
 * cache keeps what it holds. */
void sp_seq_abort(sp_seq *q, sp_finish why);
/* SP_FINISH_NONE while running, else why it ended. */
sp_finish sp_seq_finish_reason(const sp_seq *q);
const sp_spec_stats *sp_seq_stats(const sp_seq *q);

#endif /* SP_SPEC_H */
