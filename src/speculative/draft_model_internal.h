/*
 * draft_model_internal.h — what the two model drafters share.  Internal to
 * src/speculative/ (draft_model.c, draft_same.c, draft_cross.c).
 *
 * A model drafter runs a second model, or the target with some layers
 * skipped ("self"), a few tokens ahead.  Two drafters do so:
 *
 *   same vocabulary (draft_same.c)   token ids pass through; the draft
 *       cache rolls back exactly; with `sample` the draft returns q.
 *   cross vocabulary (draft_cross.c) the tokenizers differ: drafts are made
 *       on text and re-tokenized for the target; greedy only.
 *
 * Which one a request gets depends on the target's tokenizer, so the
 * choice is made when a draft is opened (draft_model.c compares the
 * vocabularies) and the draft carries its kind's operations (dm_kind).
 * Everything else lives here: the drafter (the draft model, engine
 * lifetime) and the draft core (the draft model's cache and history, one
 * forward step, the greedy or sampled pick, the drafting loop).
 */
#ifndef SP_DRAFT_MODEL_INTERNAL_H
#define SP_DRAFT_MODEL_INTERNAL_H

#include "speculative/speculative.h"

/* Extra draft tokens the cross-vocabulary drafter drafts beyond max_n: its
 * text is re-tokenized for the target and loses a token or so at the end.
 * Shared because it sizes the core's output buffer. */
#define DM_EXTRA 3

/* The drafter (engine lifetime). */
typedef struct dm_drafter {
    sp_model *model;             /* the draft model; owned unless self */
    bool owns_model;
    uint8_t *skip;               /* self: layers the draft skips (owned) */
    sp_tokenizer *tok;           /* the draft's tokenizer (owned; NULL for self) */
    sp_pool *pool;               /* borrowed */
    sp_draft_model_opts o;
} dm_drafter;

typedef struct dm_draft dm_draft;

/* The per-request operations of one kind of model drafter (the seam's
 * prefill, propose, commit and close, on the core).  draft_model.c's seam
 * operations forward to them; each kind has its own, without branches on
 * the other. */
typedef struct dm_kind {
    int (*prefill)(dm_draft *g, const int32_t *prompt, int n, sp_err *err);
    int (*propose)(dm_draft *g, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                   sp_err *err);
    void (*commit)(dm_draft *g, int n_drafted, int n_accepted);
    /* Optional (NULL: no checkpoints): the history holds a restored state;
     * prime with the prompt, keeping the cached rows it shares with it. */
    int (*resume)(dm_draft *g, const int32_t *prompt, int n, sp_err *err);
    /* frees the kind's state, the core (sp_dm_core_fini) and the allocation */
    void (*close)(dm_draft *g);
} dm_kind;

/* The draft core (one per request).  A kind with more state embeds it
 * first in its own struct. */
struct dm_draft {
    dm_drafter *dm;
    const dm_kind *kind;
    sp_sampler *smp;             /* sample mode: the request's sampling on draft logits */
    float *q;                    /* (SP_MAX_DRAFT, n_vocab) sample mode */
    uint64_t pos_key;            /* sample mode: draw counter */
    sp_kv *kv;
    sp_workspace *ws;
    float *logits;               /* (draft n_vocab) */
    int32_t *hist;               /* draft-vocabulary tokens: the cache's contents, then unfed */
    int n_hist, cap_hist;
    int n_cached;                /* hist[0..n_cached) are in the cache */
    int32_t out[SP_MAX_DRAFT + DM_EXTRA + 1];
    int n_out;
};

/* Appends t[0..k) to the growable array *a (*n used, *cap allocated). */
void sp_dm_ints_push(int32_t **a, int *n, int *cap, const int32_t *t, int k);

/* Sets up the core of g (allocated and zeroed by the kind): the draft
 * cache, the workspace (skipping self's layers) and the logits buffer. */
void sp_dm_core_init(dm_draft *g, dm_drafter *dm, const dm_kind *kind);
/* Frees what the core holds (not g itself). */
void sp_dm_core_fini(dm_draft *g);

/* Empties the draft cache and the history, before a prompt. */
void sp_dm_reset(dm_draft *g);
/* Prefills the draft cache with the history but its last token (propose
 * runs that one), from the rows it already holds (hist[0..n_cached)),
 * unless the history does not fit the cache. */
int sp_dm_prefill_cache(dm_draft *g, sp_err *err);
/* Runs the unfed history, then drafts up to max_n tokens after it into
 * g->out[0..g->n_out), each run through the draft model but the last;
 * stops early below min_prob or when the draft cache is full.  With a
 * sampler g->q[i] is the distribution draft i was drawn from. */
int sp_dm_draft_tokens(dm_draft *g, int max_n, sp_err *err);

/* The two kinds: each opens a draft of its kind for dm (the tokenizer
 * check is done), or fails with err. */
dm_draft *sp_dm_same_open(dm_drafter *dm, const sp_target *t, sp_err *err);
dm_draft *sp_dm_cross_open(dm_drafter *dm, const sp_target *t, sp_err *err);

#endif /* SP_DRAFT_MODEL_INTERNAL_H */
