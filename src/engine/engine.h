/*
 * engine — sp_ctx, the batch engine every command drives.
 *
 * A context owns, for one loaded model: the thread pool (or borrows one),
 * the forward workspace, a fixed set of KV slots, and the one step that
 * advances every sequence in it:
 *
 *   plan   every running sequence describes its rows: verification windows
 *          [pending, drafts...] of decoding sequences first (never cut),
 *          then prompt chunks of prefilling sequences, oldest first, within
 *          what is left of the row budget (at least a quarter of it)
 *   pass   ONE sp_model_forward_batch over all planned rows
 *   apply  each sequence's accept walk, KV compaction, drafter commit and
 *          emission (sp_seq_apply)
 *
 * so a long prompt joins over several steps without starving decoding
 * sequences.  Sequences never share a cache, sampler or draft, and each
 * row's arithmetic is independent of the others in the pass (batch
 * invariance), so every sequence produces exactly what it would alone.
 *
 * `run` is one slot stepped until it ends; `bench` drives one slot prompt
 * after prompt; `serve` puts HTTP and jobs on top of many slots.
 *
 * Threads: a context is used by one thread at a time (the server's
 * scheduler thread owns its context).  Emit callbacks run inside
 * sp_ctx_step on that thread.
 */
#ifndef SP_ENGINE_H
#define SP_ENGINE_H

#include "base/base.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "sample/sample.h"
#include "speculative/speculative.h"
#include "tokenizer/tokenizer.h"

typedef struct sp_ctx sp_ctx;

typedef struct sp_ctx_params {
    int n_slots;                     /* sequences at once, each with a KV cache (default 1) */
    int n_ctx;                       /* tokens per slot (0 = min(4096, the model's trained context)) */
    int batch_rows;                  /* rows per pass; prompt chunks fill what windows leave (default 256) */
    int threads;                     /* 0 = physical cores; ignored when pool is given */
    sp_pool *pool;                   /* borrowed; NULL = the context creates its own */
    const sp_cost_curve *cost;       /* borrowed t(K) for adaptive draft lengths; NULL = measured
                                        (or read from cost_dir) when first needed */
    const char *cost_dir;            /* where measured curves are cached (NULL = not cached) */
    sp_kv_types kv_types;            /* how the slots' caches store K and V (default: all F16) */
    size_t cache_bytes;              /* prefix cache (src/cache): 0 = none; else sequences with
                                        use_cache share the KV rows of prompts and answers within
                                        this many bytes, with drafter checkpoints beside them */
    bool no_gate;                    /* drafting under the adaptive length is not gated by the
                                        measured rate of whole steps (spec_gate.c); default: gated */
} sp_ctx_params;

/* Drafters whose gates a context keeps (more share none: ungated). */
#define SP_CTX_GATES 8

sp_ctx_params sp_ctx_default_params(void);

/* Creates a context over a loaded model and its tokenizer (both borrowed:
 * they must outlive the context).  NULL + err on bad parameters. */
sp_ctx *sp_ctx_create(const sp_model *m, const sp_tokenizer *tok, const sp_ctx_params *p, sp_err *err);
/* Frees the context; sequences still in it are closed (their drafts
 * closed, so engine-wide drafter tables learn their outputs). */
void sp_ctx_free(sp_ctx *c);

const sp_model *sp_ctx_model(const sp_ctx *c);
const sp_tokenizer *sp_ctx_tokenizer(const sp_ctx *c);
sp_pool *sp_ctx_pool(const sp_ctx *c);
sp_workspace *sp_ctx_workspace(const sp_ctx *c);
int sp_ctx_threads(const sp_ctx *c);
int sp_ctx_n_ctx(const sp_ctx *c);
int sp_ctx_n_slots(const sp_ctx *c);
/* Sequences in the context (running or ended but not yet removed). */
int sp_ctx_n_seqs(const sp_ctx *c);

/* The cost curve t(K) adaptive draft lengths use: the one given at
 * creation, else read from cost_dir or measured once (seconds). */
int sp_ctx_cost(sp_ctx *c, const sp_cost_curve **out, sp_err *err);

/* ------------------------------------------------------------------------
 * Sequences
 * ---------------------------------------------------------------------- */
typedef struct sp_seq_params {
    const int32_t *prompt;           /* (n_prompt) copied */
    int n_prompt;
    int max_tokens;                  /* tokens to generate (default 128) */
    sp_sampler_params sampling;      /* copied, bias included (default: greedy) */
    bool penalize_prompt;            /* prompt tokens enter the penalty window (default false) */
    sp_drafter *drafter;             /* NULL = plain decoding; borrowed, outlives the sequence */
    int draft_max;                   /* SP_DRAFT_ADAPTIVE (default), 0 = no drafting, > 0 fixed */
    int keep_cached;                 /* the first keep_cached tokens of prompt are what the cache of
                                        the slot (the lowest free one) already holds from the sequence
                                        before: they are kept, not prefilled (default 0: start
                                        afresh).  The caller vouches that they match; drafters are
                                        primed with the whole prompt, and one that reads hidden states
                                        refuses a kept prefix (it needs them from position 0) */
    const sp_grammar *grammar;       /* NULL = unconstrained; borrowed, outlives the sequence */
    const char *grammar_trigger;     /* NULL = the grammar applies from the first token; else it
                                        applies after this text appears in the output (lazy) */
    bool forced_spans;               /* under a grammar, verify the tokens it forces as drafts
                                        (with or without a drafter; not when draft_max == 0);
                                        default false: plain constrained decoding */
    bool use_cache;                  /* with the context's prefix cache: start from the longest
                                        cached prefix of the prompt (its rows copied, the rest
                                        prefilled; output identical to a cold start) and leave the
                                        prompt's and the answer's rows in the cache (default true;
                                        not with keep_cached) */
    sp_emit_fn emit;                 /* every generated token, inside sp_ctx_step (required) */
    void *ud;
} sp_seq_params;

sp_seq_params sp_seq_default_params(void);

/* Adds a sequence in a free slot: opens its draft and queues its prompt
 * for prefill by the next steps.  Returns its id (>= 0) or -1 + err: no
 * free slot, an empty prompt, a prompt that does not fit the slot, bad
 * sampling parameters, a drafter that refuses the target. */
int sp_ctx_add(sp_ctx *c, const sp_seq_params *p, sp_err *err);
/* One pass: plans every running sequence, runs their rows as one batched
 * forward, applies the results.  A sequence that fails (its drafter, or
 * the pass) ends with SP_FINISH_ERROR and keeps the message
 * (sp_ctx_seq_error); the step itself fails only on a broken invariant.
 * Returns the number of sequences still running. */
int sp_ctx_step(sp_ctx *c);
/* Ends a running sequence now (SP_FINISH_CANCELLED); it stays until
 * removed. */
void sp_ctx_cancel(sp_ctx *c, int id);
/* Frees the sequence's slot: closes its draft (engine-wide drafter tables
 * learn its output), releases its sampler.  Any state, running or ended. */
void sp_ctx_remove(sp_ctx *c, int id);

/* SP_FINISH_NONE while running, else why it ended. */
sp_finish sp_ctx_seq_finish(const sp_ctx *c, int id);
bool sp_ctx_seq_prefilling(const sp_ctx *c, int id);
const sp_spec_stats *sp_ctx_seq_stats(const sp_ctx *c, int id);
/* The error of a sequence that ended with SP_FINISH_ERROR ("" otherwise). */
const char *sp_ctx_seq_error(const sp_ctx *c, int id);
/* Tokens in the sequence's cache (prompt prefilled so far + accepted). */
int sp_ctx_seq_n_cached(const sp_ctx *c, int id);

/* The context's prefix cache (NULL when cache_bytes is 0); for its
 * statistics.  Owned by the context; the context's thread only. */
struct sp_pcache *sp_ctx_cache(sp_ctx *c);

/* The last pass: sequences and rows in it, its duration (0s before any). */
typedef struct sp_ctx_pass {
    int n_seqs, n_rows;
    uint64_t ns;
} sp_ctx_pass;
sp_ctx_pass sp_ctx_last_pass(const sp_ctx *c);

/* Adds a sequence, steps the context until it ends, removes it.  Other
 * sequences in the context advance too.  The convenience `run` is. */
int sp_ctx_generate(sp_ctx *c, const sp_seq_params *p, sp_spec_stats *stats, sp_finish *finish,
                    sp_err *err);

#endif /* SP_ENGINE_H */
