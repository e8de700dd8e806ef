/* The round loop of one sequence: propose, verify in one batched pass,
 * accept, trim, commit.  Plain decoding is the same loop with empty
 * proposals.
 *
 * A round has three phases so that the engine can verify the windows of
 * many sequences in one target pass: sp_seq_plan (propose; describe the
 * rows), the batched forward (the engine's), sp_seq_apply (accept walk,
 * cache compaction, commit, emission).  Prompts are prefilled through the
 * same phases in chunks. */
#include "speculative/speculative.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define SP_SHADOW_MAX 8          /* shadow proposals measure acceptance while not drafting */

enum { SRC_FORCED = 0, SRC_DRAFT = 1 };

/* Under a grammar at T > 0, candidate lists up to this long are checked
 * token by token instead of masking the row. */
#define SP_FILTER_MAX 4096

typedef enum { SEQ_PREFILL, SEQ_DECODE, SEQ_DONE } seq_state;

struct sp_seq {
    const sp_model *m;
    sp_kv *kv;
    sp_sampler *smp;
    sp_draft *draft;
    sp_gen_config cfg;
    sp_emit_fn emit;
    void *ud;
    seq_state state;
    int32_t *prompt;             /* (n_prompt) owned copy while prefilling */
    int n_prompt, n_prefilled;
    int n_resumed;               /* the draft's restored state covers prompt[0..n_resumed) */
    int n_start;                 /* prompt rows the cache held at the start (no taps for them) */
    float *logits;               /* (SP_MAX_DRAFT + 1, n_vocab) owned */
    /* hidden-state taps, for a draft whose drafter reads them */
    int n_taps;                  /* its tap layers; 0 = no taps */
    const int32_t *tap_layers;   /* (n_taps) the drafter's */
    float *ptaps;                /* (n_prompt, n_taps, n_embd) owned while prefilling */
    float *wtaps;                /* (SP_MAX_DRAFT + 1, n_taps, n_embd) owned: the window's rows */
    sp_taps kept;                /* what the last commit was handed */
    int32_t pending;             /* last emitted token, not yet in the cache */
    /* the round being verified */
    int32_t window[SP_MAX_DRAFT + 1];
    int32_t wparent[SP_MAX_DRAFT + 1];
    sp_proposal prop;
    int n_draft, base, n_rows;
    double planned_tokens;       /* tokens the planned pass is expected to emit */
    uint64_t t_plan;
    /* adaptive length and shadow proposals */
    sp_adapt adapt;
    int32_t shadow[SP_SHADOW_MAX];
    int n_shadow, shadow_pos;    /* n_shadow = 0: no shadow proposal pending */
    int idle_rounds;             /* rounds since the last one that asked for drafts */
    sp_gate_mode gate;           /* what the next plans may draft with (sp_seq_gate) */
    /* grammar */
    sp_gmatch *gm;               /* borrowed; NULL = unconstrained */
    float *mrow;                 /* (n_vocab) a logit row under the grammar's mask */
    int32_t *backlog;            /* emitted tokens the draft has not been fed (after forced rounds) */
    int n_back, cap_back;
    /* A proposal the grammar takes part in: forced spans and the draft's
     * continuations, alternating, in `chain` (src says whose each token is). */
    int32_t chain[SP_MAX_DRAFT];
    uint8_t src[SP_MAX_DRAFT];   /* SRC_FORCED or SRC_DRAFT */
    int n_chain;                 /* 0 = the round's proposal is the draft's own (prop) */
    bool fed;                    /* the draft was fed this round's emitted tokens */
    bool ahead;                  /* the draft continued the chain (propose_ahead): it commits
                                    over chain[0..n_known) */
    int n_known;
    int d1_at, nd1;              /* the draft's first part of the chain (for the controller) */
    const char *d_by;            /* the draft's name */
    int n_proposed;              /* the draft's own proposal, before the grammar cut it */
    bool tree_filtered;          /* ...a tree, now gtok/gpar, node i being the draft's gorig[i] */
    int32_t gorig[SP_MAX_DRAFT];
    int n_told;                  /* after propose_ahead: the chain it saw + its own proposal */
    sp_cand *gcand;              /* (SP_FILTER_MAX) the sampler's candidates the grammar allows */
    int32_t gtok[SP_MAX_DRAFT];  /* a proposal filtered by the grammar */
    int32_t gpar[SP_MAX_DRAFT];
    sp_finish finish;
    sp_spec_stats st;
    uint64_t t_start, t_prefill0;
    int deferred;                /* > 0: the plan waits for a group proposal of this draft length */
};

const char *sp_finish_name(sp_finish f) {
    switch (f) {
    case SP_FINISH_STOP: return "stop";
    case SP_FINISH_LENGTH: return "length";
    case SP_FINISH_CONTEXT: return "context";
    case SP_FINISH_CANCELLED: return "cancelled";
    case SP_FINISH_ERROR: return "error";
    default: return "none";
    }
}

/* Bytes of the taps of n rows. */
static size_t tap_bytes(const sp_seq *q, int n) {
    return (size_t)n * (size_t)q->n_taps * (size_t)q->m->hp.n_embd * sizeof(float);
}

sp_seq *sp_seq_create(const sp_model *m, sp_kv *kv, sp_sampler *smp, sp_draft *draft,
                      const sp_gen_config *cfg, sp_emit_fn emit, void *ud) {
    assert(cfg->draft_max != SP_DRAFT_ADAPTIVE || !draft || (cfg->cost && cfg->cost->valid));
    sp_seq *q = sp_xcalloc(1, sizeof *q);
    q->gate = SP_GATE_ALL;
    q->m = m; q->kv = kv; q->smp = smp; q->draft = draft;
    q->cfg = *cfg;
    q->emit = emit; q->ud = ud;
    q->state = SEQ_DONE;
    q->logits = sp_alloc_aligned((size_t)(SP_MAX_DRAFT + 1) * m->hp.n_vocab * sizeof(float));
    if (draft && (draft->drafter->needs & SP_CAP_HIDDEN_TAPS)) {
        q->n_taps = draft->drafter->n_taps;
        q->tap_layers = draft->drafter->tap_layers;
        q->wtaps = sp_xmalloc(tap_bytes(q, SP_MAX_DRAFT + 1));
    }
    const int own = draft ? draft->drafter->adaptive_cap : 0;
    int cap = cfg->draft_max == SP_DRAFT_ADAPTIVE ? (own > 0 ? own : 16) : cfg->draft_max;
    sp_adapt_init(&q->adapt, cfg->cost, cap);
    return q;
}

void sp_seq_gate(sp_seq *q, sp_gate_mode mode) {
    q->gate = mode;
    if (q->draft) q->draft->members = mode == SP_GATE_CHEAP ? q->draft->drafter->cheap_lead : 0;
}

bool sp_seq_gateable(const sp_seq *q) { return q->draft && q->cfg.draft_max == SP_DRAFT_ADAPTIVE; }

void sp_seq_set_grammar(sp_seq *q, sp_gmatch *gm) {
    assert(q->state != SEQ_DECODE);
    q->gm = gm;
    if (gm && !q->mrow) q->mrow = sp_alloc_aligned((size_t)q->m->hp.n_vocab * sizeof(float));
    if (gm && !q->gcand) q->gcand = sp_xmalloc(SP_FILTER_MAX * sizeof *q->gcand);
}

void sp_seq_free(sp_seq *q) {
    if (!q) return;
    sp_free_aligned(q->mrow);
    free(q->gcand);
    free(q->backlog);
    sp_free_aligned(q->logits);
    free(q->ptaps);
    free(q->wtaps);
    free(q->prompt);
    free(q);
}

sp_finish sp_seq_finish_reason(const sp_seq *q) { return q->state == SEQ_DONE ? q->finish : SP_FINISH_NONE; }
const sp_spec_stats *sp_seq_stats(const sp_seq *q) { return &q->st; }
bool sp_seq_prefilling(const sp_seq *q) { return q->state == SEQ_PREFILL; }

/* Shadow bookkeeping: compares an unverified proposal with what the target
 * actually emitted, to keep acceptance estimates fresh while not drafting. */
static void shadow_see(sp_seq *q, int32_t tok) {
    if (!q->n_shadow) return;
    if (q->shadow[q->shadow_pos] == tok && ++q->shadow_pos < q->n_shadow) return;
    /* resolved: a mismatch at shadow_pos, or every shadow token matched */
    sp_adapt_observe(&q->adapt, q->n_shadow, q->shadow_pos);
    q->n_shadow = 0;
}

/* Hands one token, sampled from logit row `row`, to the caller; returns
 * true when the request is over. */
static bool emit_token(sp_seq *q, int32_t tok, bool drafted, const float *row) {
    q->st.emitted++;
    shadow_see(q, tok);
    const sp_emit_result r = q->emit(q->ud, tok, drafted, row);
    if (r == SP_EMIT_STOP) {
        q->finish = SP_FINISH_STOP;
        return true;
    }
    if (q->st.emitted >= q->cfg.max_tokens) {
        q->finish = SP_FINISH_LENGTH;
        return true;
    }
    return false;
}

static void set_done(sp_seq *q, sp_finish f) {
    if (!q->finish) q->finish = f;
    q->state = SEQ_DONE;
}

void sp_seq_abort(sp_seq *q, sp_finish why) {
    assert(why == SP_FINISH_CANCELLED || why == SP_FINISH_ERROR);
    if (q->state != SEQ_DONE) set_done(q, why);
}

int sp_seq_start(sp_seq *q, const int32_t *prompt, int n_prompt, int n_cached, int n_resumed, sp_err *err) {
    if (n_prompt <= 0) return sp_err_set(err, "generate: the prompt is empty");
    assert(n_cached >= 0 && n_cached <= q->kv->n);
    if (n_cached >= n_prompt)
        return sp_err_set(err, "generate: the cache already holds the whole prompt (%d of %d tokens)", n_cached,
                          n_prompt);
    if (q->kv->n - n_cached + n_prompt >= q->kv->n_ctx)
        return sp_err_set(err, "generate: the prompt (%d tokens) does not fit the context (%d)",
                          n_prompt - n_cached, q->kv->n_ctx - q->kv->n);
    assert(n_resumed >= 0 && n_resumed <= n_prompt && (!n_resumed || (q->draft && q->draft->drafter->ops->resume)));
    if (n_cached && q->n_taps && n_resumed < n_cached)
        return sp_err_set(err, "drafter '%s' needs the prompt's hidden states from position 0: it cannot "
                          "start after a cached prefix", q->draft->drafter->name);
    free(q->prompt);
    q->prompt = sp_xmalloc((size_t)n_prompt * sizeof(int32_t));
    memcpy(q->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    if (q->n_taps) {
        free(q->ptaps);
        q->ptaps = sp_xmalloc(tap_bytes(q, n_prompt));
    }
    q->n_prompt = n_prompt;
    q->n_prefilled = n_cached;       /* the cache holds those rows: the passes start after them */
    q->n_resumed = n_resumed;
    q->n_start = n_cached;
    q->state = SEQ_PREFILL;
    q->finish = SP_FINISH_NONE;
    memset(&q->st, 0, sizeof q->st);
    q->st.n_prompt = n_prompt - n_cached;
    q->st.n_cached = n_cached;
    q->st.requests = 1;
    q->t_prefill0 = sp_now_ns();
    return 0;
}

/* ----------------------------------------------------------------------------
 * The grammar: masked sampling, drafts checked before verification, forced
 * spans proposed as drafts
 * ------------------------------------------------------------------------- */

static void backlog_push(sp_seq *q, const int32_t *t, int n) {
    SP_VEC_GROW(q->backlog, q->cap_back, q->n_back + n);
    memcpy(q->backlog + q->n_back, t, (size_t)n * sizeof(int32_t));
    q->n_back += n;
}

/* The grammar constrains the next token (a lazy one has been triggered). */
static bool constrained(const sp_seq *q) { return q->gm && sp_gmatch_active(q->gm); }

static int dead_end(const sp_seq *q, sp_err *err) {
    return sp_err_set(err, "grammar: no token can continue the output after %lld generated tokens (dead end)",
                      (long long)q->st.emitted);
}

/* The row with every token the grammar forbids at -inf (a copy: the
 * target's row stays as it was, for logprobs); NULL when none is allowed. */
static const float *masked_row(sp_seq *q, const float *row) {
    const uint64_t t0 = sp_now_ns();
    sp_gmatch_stats a, b;
    sp_gmatch_get_stats(q->gm, &a);
    memcpy(q->mrow, row, (size_t)q->m->hp.n_vocab * sizeof(float));
    const int n = sp_gmatch_apply(q->gm, q->mrow);
    sp_gmatch_get_stats(q->gm, &b);
    q->st.mask_misses += b.mask_misses - a.mask_misses;
    q->st.mask_ns += sp_now_ns() - t0;
    return n > 0 ? q->mrow : NULL;
}

/* The sampler's candidates for `row` (after its top-k, top-p, min-p) that
 * the grammar allows, renormalised: each checked by walking its bytes, so
 * no mask over the vocabulary.  NULL where the row must be masked whole:
 * a list longer than SP_FILTER_MAX (a sampler that truncates nothing, for
 * which filtering and masking give the same distribution) or one with no
 * allowed token. */
static const sp_cand *allowed_cands(sp_seq *q, const float *row, int *n_out) {
    int nc;
    const sp_cand *c = sp_sampler_dist(q->smp, row, &nc);
    if (nc > SP_FILTER_MAX) return NULL;
    const uint64_t t0 = sp_now_ns();
    double z = 0;
    int m = 0;
    for (int i = 0; i < nc; i++)
        if (sp_gmatch_allows(q->gm, c[i].id)) {
            q->gcand[m++] = c[i];
            z += c[i].p;
        }
    for (int i = 0; i < m; i++) q->gcand[i].p = (float)(q->gcand[i].p / z);
    q->st.mask_ns += sp_now_ns() - t0;
    *n_out = m;
    return m > 0 && z > 0 ? q->gcand : NULL;
}

/* The token for `row` at sequence position pos, as the sampler draws it
 * under the grammar. */
static int sample_at(sp_seq *q, const float *row, uint64_t pos, int32_t *tok, sp_err *err) {
    if (!constrained(q)) {
        *tok = sp_sampler_sample(q->smp, row, pos);
        return 0;
    }
    q->st.masks++;
    if (!sp_sampler_is_greedy(q->smp)) {
        int m;
        const sp_cand *c = allowed_cands(q, row, &m);
        if (c) {
            /* the sampler's own draw for this position, over the allowed */
            *tok = m == 1 ? c[0].id
                          : sp_cand_pick(c, m, sp_rng_uniform(sp_sampler_params_of(q->smp)->seed, pos, 0));
            return 0;
        }
    } else {
        /* The mask only removes candidates, so when the unmasked choice is
         * allowed it is also the masked one: one token's bytes walked
         * instead of a mask over the vocabulary. */
        const int32_t t = sp_sampler_sample(q->smp, row, pos);
        const uint64_t t0 = sp_now_ns();
        const bool ok = sp_gmatch_allows(q->gm, t);
        q->st.mask_ns += sp_now_ns() - t0;
        if (ok) {
            *tok = t;
            return 0;
        }
    }
    const float *m = masked_row(q, row);
    if (!m) return dead_end(q, err);
    *tok = sp_sampler_sample(q->smp, m, pos);
    return 0;
}

/* The matcher takes an emitted token (a lazy one watches for its trigger). */
static int grammar_accept(sp_seq *q, int32_t tok, sp_err *err) {
    if (!q->gm) return 0;
    const uint64_t t0 = sp_now_ns();
    /* a token the sampler drew under the mask is allowed; one it could not
     * avoid (every allowed token banned by a logit bias) is a dead end */
    const int rc = sp_gmatch_accept(q->gm, tok, NULL) ? dead_end(q, err) : 0;
    q->st.mask_ns += sp_now_ns() - t0;
    return rc;
}

static int draft_budget(const sp_seq *q, int pass_rows, double pass_tokens);

/* The room a proposal has: SP_MAX_DRAFT, max_tokens and the cache. */
static int proposal_cap(const sp_seq *q) {
    int cap = SP_MAX_DRAFT;
    const int left = q->cfg.max_tokens - (int)q->st.emitted - 1;   /* the round emits up to n + 1 */
    const int room = q->kv->n_ctx - q->kv->n - 1;
    if (cap > left) cap = left;
    if (cap > room) cap = room;
    return cap < 0 ? 0 : cap;
}

static void chain_push(sp_seq *q, const int32_t *t, int n, uint8_t src) {
    assert(q->n_chain + n <= SP_MAX_DRAFT);
    if (t != q->chain + q->n_chain) memmove(q->chain + q->n_chain, t, (size_t)n * sizeof(int32_t));
    memset(q->src + q->n_chain, src, (size_t)n);
    q->n_chain += n;
}

/* Appends the tokens the grammar forces after the chain (at most up to
 * cap); returns how many.  The span's last token is left out when the
 * model could spell its text merged with what follows (sp_gmatch_forced_safe). */
static int chain_forced(sp_seq *q, int cap) {
    const int at = q->n_chain;
    if (at >= cap) return 0;
    const uint64_t t0 = sp_now_ns();
    const int n = sp_gmatch_forced_safe(q->gm, q->chain, at, q->chain + at, cap - at);
    q->st.mask_ns += sp_now_ns() - t0;
    chain_push(q, q->chain + at, n, SRC_FORCED);
    return n;
}

/* Asks the draft to continue the chain (propose_ahead: the chain is
 * context it does not absorb), feeding it this round's tokens on the
 * first ask; appends what the grammar allows of its proposal.  Returns
 * how many it added, or -1 + err. */
static int chain_draft(sp_seq *q, int max_n, sp_err *err) {
    const int32_t *feed = &q->pending;           /* (with n_feed 0: nothing new, never NULL) */
    int n_feed = 0;
    if (!q->fed) {
        backlog_push(q, &q->pending, 1);
        feed = q->backlog;
        n_feed = q->n_back;
        q->fed = true;
    }
    const uint64_t t0 = sp_now_ns();
    sp_proposal d;
    const int rc = sp_draft_propose_ahead(q->draft, feed, n_feed, q->chain, q->n_chain, max_n, &d, err);
    q->n_back = 0;
    const uint64_t dt = sp_now_ns() - t0;
    q->st.draft_ns += dt;
    if (rc) return -1;
    sp_adapt_draft_cost(&q->adapt, max_n, sp_ns_to_s(dt > d.absorb_ns ? dt - d.absorb_ns : 0));
    q->ahead = true;
    const int at = q->n_chain;
    q->n_told = at + d.n;
    memcpy(q->chain + at, d.tokens, (size_t)d.n * sizeof(int32_t));
    const uint64_t t1 = sp_now_ns();
    const int ok = sp_gmatch_check(q->gm, q->chain, at + d.n) - at;   /* the draft's guesses, checked */
    q->st.mask_ns += sp_now_ns() - t1;
    const int n = ok > 0 ? ok : 0;
    chain_push(q, q->chain + at, n, SRC_DRAFT);
    q->n_known = q->n_chain;
    if (n && !q->nd1) {
        q->d1_at = at;
        q->nd1 = n;
    }
    q->d_by = d.by;
    return n;
}

/* Alternates the draft's continuation and the grammar's forced span while
 * both add tokens, within the draft's budget and the cap. */
static int chain_extend(sp_seq *q, int budget, int cap, sp_err *err) {
    while (budget > 0 && q->n_chain < cap) {
        const int d = chain_draft(q, budget < cap - q->n_chain ? budget : cap - q->n_chain, err);
        if (d < 0) return -1;
        if (d == 0) break;
        budget -= d;
        if (chain_forced(q, cap) == 0) break;
    }
    return 0;
}

/* The draft may continue a chain it has not absorbed (and is committed
 * exactly its own rows otherwise: tap readers are not). */
static bool can_chain(const sp_seq *q) {
    return q->draft && q->draft->drafter->ops->propose_ahead && !q->n_taps;
}

/* Where the grammar forces the next tokens, they open the proposal with no
 * drafter call; a draft that can continue past them chains its proposal
 * after them (then the grammar's span after that, and so on); any other
 * is fed them after the round.  Returns the proposal's length (0: the
 * grammar branches here and the draft proposes as usual), or -1 + err. */
static int forced_span(sp_seq *q, int pass_rows, double pass_tokens, sp_err *err) {
    if (!q->cfg.forced_spans || !constrained(q) || sp_gmatch_ended(q->gm)) return 0;
    const int cap = proposal_cap(q);
    if (chain_forced(q, cap) == 0) return 0;
    if (can_chain(q)) {
        const int nf = q->n_chain;
        if (chain_extend(q, draft_budget(q, pass_rows + nf + 1, pass_tokens + nf + 1), cap, err)) return -1;
    }
    if (q->draft && !q->fed) backlog_push(q, &q->pending, 1);
    q->prop = (sp_proposal){ .n = q->n_chain, .tokens = q->chain, .by = "grammar" };
    return q->n_chain;
}

/* After a draft's own chain, the grammar's forced span there, and (for a
 * draft that can) its continuation after that, alternating.  Not for
 * trees or draft distributions. */
static int forced_after_draft(sp_seq *q, sp_proposal *prop, int budget, sp_err *err) {
    if (!q->cfg.forced_spans || !constrained(q) || prop->n == 0 || prop->parent || prop->q || q->n_taps)
        return 0;
    const int cap = proposal_cap(q);
    q->fed = true;                               /* propose fed it */
    q->d1_at = 0;
    q->nd1 = prop->n;
    q->n_known = prop->n;                        /* its own proposal, before any propose_ahead */
    q->d_by = prop->by;
    chain_push(q, prop->tokens, prop->n, SRC_DRAFT);
    if (chain_forced(q, cap) && can_chain(q) && chain_extend(q, budget - prop->n, cap, err)) return -1;
    prop->tokens = q->chain;
    prop->n = q->n_chain;
    return 0;
}

/* Cuts a draft's proposal where the grammar forbids a token: a chain at
 * its first forbidden token, a tree by dropping every node whose path
 * from the pending token the grammar forbids (with its subtree). */
static void grammar_filter(sp_seq *q, sp_proposal *prop) {
    q->n_proposed = prop->n;                     /* what the draft commits over */
    q->tree_filtered = false;
    if (!constrained(q) || prop->n == 0) return;
    const uint64_t t0 = sp_now_ns();
    if (!prop->parent) {
        prop->n = sp_gmatch_check(q->gm, prop->tokens, prop->n);
    } else {
        int32_t map[SP_MAX_DRAFT], path[SP_MAX_DRAFT];
        int kept = 0;
        for (int j = 0; j < prop->n; j++) {
            const int par = prop->parent[j];
            map[j] = -1;
            if (par >= 0 && map[par] < 0) continue;      /* its parent was dropped */
            int d = 0;
            for (int x = j; x >= 0; x = prop->parent[x]) path[d++] = prop->tokens[x];
            for (int a = 0, b = d - 1; a < b; a++, b--) {
                const int32_t t = path[a]; path[a] = path[b]; path[b] = t;
            }
            if (sp_gmatch_check(q->gm, path, d) < d) continue;
            q->gtok[kept] = prop->tokens[j];
            q->gpar[kept] = par < 0 ? -1 : map[par];
            q->gorig[kept] = j;
            map[j] = kept++;
        }
        q->tree_filtered = true;
        prop->n = kept;
        prop->tokens = q->gtok;
        prop->parent = q->gpar;
    }
    q->st.mask_ns += sp_now_ns() - t0;
}

/* ----------------------------------------------------------------------------
 * Planning: the rows of the next pass
 * ------------------------------------------------------------------------- */

/* How many draft tokens this round may verify, in a pass that already
 * holds pass_rows rows expected to emit pass_tokens tokens. */
static int draft_budget(const sp_seq *q, int pass_rows, double pass_tokens) {
    if (!q->draft || q->cfg.draft_max == 0) return 0;
    if (q->gate == SP_GATE_PLAIN && q->cfg.draft_max == SP_DRAFT_ADAPTIVE) return 0;   /* not idle: no reprobe */
    int n = q->cfg.draft_max == SP_DRAFT_ADAPTIVE ? sp_adapt_choose_in(&q->adapt, pass_rows, pass_tokens)
                                                  : q->cfg.draft_max;
    /* a drafter that runs a model has an unknown cost until it has drafted
     * once: probe with a short draft rather than the optimistic prior's */
    if (q->cfg.draft_max == SP_DRAFT_ADAPTIVE && !q->draft->drafter->cheap && q->adapt.draft_n == 0 &&
        n > SP_ADAPT_PROBE)
        n = SP_ADAPT_PROBE;
    /* a costly drafter gets no shadow proposals, so after the controller
     * stopped it, nothing would ever show that it pays again: probe it
     * every SP_ADAPT_REPROBE plain rounds (a bounded cost) */
    if (q->cfg.draft_max == SP_DRAFT_ADAPTIVE && !q->draft->drafter->cheap && n == 0 &&
        q->idle_rounds >= SP_ADAPT_REPROBE)
        n = SP_ADAPT_PROBE;
    const int left = q->cfg.max_tokens - (int)q->st.emitted - 1;  /* the round emits up to n + 1 */
    const int room = q->kv->n_ctx - q->kv->n - 1;                  /* cache slots after the pending token */
    if (n > left) n = left;
    if (n > room) n = room;
    if (n > SP_MAX_DRAFT) n = SP_MAX_DRAFT;
    return n < 0 ? 0 : n;
}

/* The feed: tokens emitted since the draft was last asked (more than the
 * pending token after rounds that verified a grammar-forced span). */
static const int32_t *take_feed(sp_seq *q, int *n_feed) {
    *n_feed = 1;
    if (!q->n_back) return &q->pending;
    backlog_push(q, &q->pending, 1);
    *n_feed = q->n_back;
    q->n_back = 0;
    return q->backlog;
}

/* A proposal's cost for the controller: dt the call's time (or this
 * draft's share of a shared one), absorbing excluded. */
static void charge_proposal(sp_seq *q, int ask, uint64_t dt, const sp_proposal *prop) {
    q->st.draft_ns += dt;
    const uint64_t drafting = dt > prop->absorb_ns ? dt - prop->absorb_ns : 0;
    if (ask > 0) {
        sp_adapt_draft_cost(&q->adapt, ask, sp_ns_to_s(drafting));
        sp_adapt_absorb_cost(&q->adapt, sp_ns_to_s(prop->absorb_ns));
    }
}

/* Asks the draft for a proposal (or a shadow one); returns the number of
 * draft tokens to verify. */
static int propose(sp_seq *q, int budget, sp_proposal *prop, sp_err *err) {
    memset(prop, 0, sizeof *prop);
    if (!q->draft) return 0;
    const bool shadow = budget == 0 && q->cfg.draft_max == SP_DRAFT_ADAPTIVE &&
                        q->draft->drafter->cheap && q->n_shadow == 0;
    int ask = shadow ? SP_SHADOW_MAX : budget;
    uint64_t t0 = sp_now_ns();
    int n_feed;
    const int32_t *feed = take_feed(q, &n_feed);
    if (sp_draft_propose(q->draft, feed, n_feed, ask, prop, err)) return -1;
    if (shadow) {
        /* a shadow follows one chain: the first root-to-leaf run */
        int m = 0;
        while (m < prop->n && (!prop->parent || prop->parent[m] == m - 1)) m++;
        memcpy(q->shadow, prop->tokens, (size_t)m * sizeof(int32_t));
        q->n_shadow = m;
        q->shadow_pos = 0;
        q->draft->drafter->ops->commit(q->draft, prop->n, 0, NULL, NULL);
        prop->n = 0;
    }
    charge_proposal(q, shadow ? 0 : ask, sp_now_ns() - t0, prop);
    return prop->n;
}

double sp_seq_planned_tokens(const sp_seq *q) { return q->planned_tokens; }
int sp_seq_deferred(const sp_seq *q) { return q->deferred; }

/* The verification window [pending, drafts...] of a round proposing n
 * tokens (q->prop, or the chain the grammar took part in). */
static void plan_window(sp_seq *q, int n, sp_fwd_seq *fwd) {
    q->n_draft = n;
    q->base = q->kv->n;          /* slot and position of the pending token */
    q->window[0] = q->pending;
    if (n > 0) memcpy(q->window + 1, q->prop.tokens, (size_t)n * sizeof(int32_t));
    if (q->prop.parent) {
        q->wparent[0] = -1;
        for (int i = 0; i < n; i++) q->wparent[i + 1] = q->prop.parent[i] + 1;
    }
    q->n_rows = n + 1;
    *fwd = (sp_fwd_seq){ .kv = q->kv, .tokens = q->window, .n = n + 1,
                         .parent = q->prop.parent ? q->wparent : NULL, .mode = SP_LOGITS_ALL,
                         .logits = q->logits, .tap_layers = q->tap_layers, .n_taps = q->n_taps,
                         .taps = q->wtaps };
}

/* After the draft's own proposal (q->prop, asked with `budget`): the
 * grammar's cut and forced continuation, then the window. */
static int plan_after_proposal(sp_seq *q, int budget, sp_fwd_seq *fwd, sp_err *err) {
    grammar_filter(q, &q->prop);
    if (forced_after_draft(q, &q->prop, budget, err)) return -1;
    q->planned_tokens = sp_adapt_expected(&q->adapt, q->prop.n);
    plan_window(q, q->prop.n, fwd);
    return 0;
}

static int plan(sp_seq *q, int max_rows, int pass_rows, double pass_tokens, bool may_defer, sp_fwd_seq *fwd,
                sp_err *err) {
    memset(fwd, 0, sizeof *fwd);
    q->planned_tokens = 0.0;
    q->deferred = 0;
    if (q->state == SEQ_DONE) return 0;
    q->t_plan = sp_now_ns();
    if (q->state == SEQ_PREFILL) {
        int n = q->n_prompt - q->n_prefilled;
        if (max_rows > 0 && n > max_rows) n = max_rows;
        const bool last = q->n_prefilled + n == q->n_prompt;
        *fwd = (sp_fwd_seq){ .kv = q->kv, .tokens = q->prompt + q->n_prefilled, .n = n,
                             .mode = last ? SP_LOGITS_LAST : SP_LOGITS_NONE, .logits = q->logits,
                             .tap_layers = q->tap_layers, .n_taps = q->n_taps,
                             .taps = q->n_taps ? (float *)((char *)q->ptaps + tap_bytes(q, q->n_prefilled)) : NULL };
        q->n_rows = n;
        q->planned_tokens = last ? 1.0 : 0.0;
        return 0;
    }
    if (q->kv->n >= q->kv->n_ctx) { set_done(q, SP_FINISH_CONTEXT); return 0; }
    q->n_chain = q->n_known = q->nd1 = q->d1_at = q->n_proposed = q->n_told = 0;
    q->fed = q->ahead = q->tree_filtered = false;
    q->d_by = NULL;
    int n = forced_span(q, pass_rows, pass_tokens, err);
    if (n < 0) return -1;
    if (n == 0) {
        const int budget = draft_budget(q, pass_rows, pass_tokens);
        if (q->gate == SP_GATE_PLAIN) q->st.gated_rounds++;
        else q->idle_rounds = budget > 0 ? 0 : q->idle_rounds + 1;
        if (q->gate == SP_GATE_CHEAP) q->st.cheap_rounds++;
        if (may_defer && budget > 0 && q->draft && q->draft->drafter->ops->propose_group) {
            /* the proposal comes from a group call with other sequences'
             * drafts (sp_seq_plan_group); until then the controller's
             * expectation for the length asked stands in */
            q->deferred = budget;
            q->planned_tokens = sp_adapt_expected(&q->adapt, budget);
            return 0;
        }
        if (propose(q, budget, &q->prop, err) < 0) return -1;
        return plan_after_proposal(q, budget, fwd, err);
    }
    /* forced tokens are all but certain; the draft's as the controller expects */
    int nf = 0;
    for (int i = 0; i < n; i++) nf += q->src[i] == SRC_FORCED;
    q->planned_tokens = nf + sp_adapt_expected(&q->adapt, n - nf);
    plan_window(q, n, fwd);
    return 0;
}

int sp_seq_plan(sp_seq *q, int max_rows, int pass_rows, double pass_tokens, sp_fwd_seq *fwd,
                sp_err *err) {
    return plan(q, max_rows, pass_rows, pass_tokens, false, fwd, err);
}

int sp_seq_plan_deferrable(sp_seq *q, int max_rows, int pass_rows, double pass_tokens, sp_fwd_seq *fwd,
                           bool *deferred, sp_err *err) {
    const int rc = plan(q, max_rows, pass_rows, pass_tokens, true, fwd, err);
    *deferred = rc == 0 && q->deferred > 0;
    return rc;
}

int sp_seq_plan_group(sp_seq **qs, int n, sp_fwd_seq *fwd, sp_err *err) {
    if (n <= 0) return 0;
    sp_draft **d = sp_xmalloc((size_t)n * sizeof *d);
    const int32_t **feed = sp_xmalloc((size_t)n * sizeof *feed);
    int *n_feed = sp_xmalloc((size_t)n * 2 * sizeof *n_feed), *ask = n_feed + n;
    sp_proposal *prop = sp_xmalloc((size_t)n * sizeof *prop);
    for (int i = 0; i < n; i++) {
        sp_seq *q = qs[i];
        assert(q->deferred > 0 && q->draft && q->draft->drafter == qs[0]->draft->drafter);
        d[i] = q->draft;
        feed[i] = take_feed(q, &n_feed[i]);
        ask[i] = q->deferred;
    }
    const uint64_t t0 = sp_now_ns();
    int rc = sp_draft_propose_group(d, feed, n_feed, ask, prop, n, err);
    const uint64_t dt = sp_now_ns() - t0;
    uint64_t shared = 0;             /* what the proposals report; the rest of dt is split evenly */
    for (int i = 0; i < n; i++) shared += prop[i].draft_ns + prop[i].absorb_ns;
    for (int i = 0; i < n && !rc; i++) {
        sp_seq *q = qs[i];
        q->prop = prop[i];
        q->st.group_proposals++;
        const uint64_t own = dt > shared ? (dt - shared) / (uint64_t)n : 0;
        charge_proposal(q, ask[i], prop[i].draft_ns + prop[i].absorb_ns + own, &prop[i]);
        const int budget = q->deferred;
        q->deferred = 0;
        rc = plan_after_proposal(q, budget, &fwd[i], err);
    }
    free(d);
    free(feed);
    free(n_feed);
    free(prop);
    return rc;
}

/* ----------------------------------------------------------------------------
 * Finishing: what the pass decided
 * ------------------------------------------------------------------------- */

static int finish_prefill(sp_seq *q, sp_err *err) {
    assert(q->n_rows > 0 && q->n_prefilled + q->n_rows <= q->n_prompt);
    q->n_prefilled += q->n_rows;
    if (q->n_prefilled < q->n_prompt) return 0;
    /* taps exist for the rows this sequence ran: [n_start, n_prompt) */
    const int r = q->n_resumed, c0 = q->n_start;
    const sp_taps taps = { .n_rows = q->n_prompt - c0, .n_layers = q->n_taps, .dim = q->m->hp.n_embd,
                           .pos = q->kv->n - q->n_prompt + c0,
                           .data = q->ptaps ? (const float *)((char *)q->ptaps + tap_bytes(q, c0)) : NULL };
    const sp_drafter_ops *ops = q->draft ? q->draft->drafter->ops : NULL;
    if (ops && (r ? ops->resume(q->draft, q->prompt, q->n_prompt, r, q->n_taps ? &taps : NULL, err)
                  : ops->prefill(q->draft, q->prompt, q->n_prompt, q->n_taps ? &taps : NULL, err)))
        return -1;
    free(q->prompt);
    q->prompt = NULL;
    free(q->ptaps);
    q->ptaps = NULL;
    q->t_start = sp_now_ns();
    q->st.prefill_ns = q->t_start - q->t_prefill0;
    if (q->cfg.max_tokens <= 0) { set_done(q, SP_FINISH_LENGTH); return 0; }
    q->state = SEQ_DECODE;
    int32_t tok;
    if (sample_at(q, q->logits, (uint64_t)q->kv->n, &tok, err) || grammar_accept(q, tok, err)) return -1;
    sp_sampler_accept(q->smp, tok);
    q->pending = tok;
    if (emit_token(q, tok, false, q->logits)) set_done(q, q->finish);
    q->st.total_ns = sp_now_ns() - q->t_start;
    return 0;
}

/* The taps of the window rows that stayed in the cache (keep[0..n_kept),
 * ascending: the anchor, then the accepted drafts), moved to the front of
 * the window's buffer, so the drafter sees no rejected row. */
static const sp_taps *kept_taps(sp_seq *q, const int32_t *keep, int n_kept) {
    const size_t row = tap_bytes(q, 1);
    for (int j = 0; j < n_kept; j++) {
        assert(keep[j] >= j);
        if (keep[j] != j) memmove((char *)q->wtaps + (size_t)j * row, (char *)q->wtaps + (size_t)keep[j] * row, row);
    }
    q->kept = (sp_taps){ .n_rows = n_kept, .n_layers = q->n_taps, .dim = q->m->hp.n_embd, .pos = q->base,
                         .data = q->wtaps };
    return &q->kept;
}

/* The child of window row `node` whose token is tok, or -1. */
static int child_with(const sp_seq *q, int node, int32_t tok) {
    if (!q->prop.parent) return node < q->n_draft && q->window[node + 1] == tok ? node + 1 : -1;
    for (int j = node + 1; j <= q->n_draft; j++)
        if (q->wparent[j] == node && q->window[j] == tok) return j;
    return -1;
}

static bool has_child(const sp_seq *q, int node) {
    if (!q->prop.parent) return node < q->n_draft;
    for (int j = node + 1; j <= q->n_draft; j++)
        if (q->wparent[j] == node) return true;
    return false;
}

/* Statistics, the draft's commit and the controller's observations after
 * a round that verified n proposed tokens and accepted k. */
static void commit_round(sp_seq *q, int n, int k, int32_t *path, const int32_t *keep, int n_cached) {
    int nf = 0, kf = 0, kd = 0;
    for (int i = 0; i < q->n_chain; i++) {
        const bool forced = q->src[i] == SRC_FORCED;
        nf += forced;
        if (i < k && forced) kf++;
        else if (i < k) kd++;
    }
    const int nd = q->n_chain ? q->n_chain - nf : n;   /* a plain proposal is all the draft's */
    if (!q->n_chain) kd = k;
    if (nf) {
        sp_stats_method(&q->st, "grammar", nf, kf);
        q->st.forced_drafted += nf;
        q->st.forced_accepted += kf;
    }
    if (nd) sp_stats_method(&q->st, q->n_chain ? q->d_by : q->prop.by, nd, kd);
    /* (a proposal the grammar cut to nothing still gets its commit) */
    if (q->draft && (n > 0 || q->n_taps || q->n_proposed > 0)) {
        const sp_taps *verified = q->n_taps ? kept_taps(q, keep, n_cached) : NULL;
        const uint64_t t2 = sp_now_ns();
        const sp_drafter_ops *ops = q->draft->drafter->ops;
        if (!q->n_chain) {
            /* the draft commits over what it proposed: a tree the grammar
             * cut is mapped back to the draft's own node numbers */
            if (q->tree_filtered)
                for (int i = 0; i < k; i++) path[i] = q->gorig[path[i]];
            ops->commit(q->draft, q->n_proposed, k, q->prop.parent ? path : NULL, verified);
        } else {
            /* the draft commits the part it knows (the chain up to its last
             * continuation, or its own proposal) and learns the accepted
             * rest with its next feed; a draft not asked at all still gets
             * every verified row when it reads taps */
            const int known = q->ahead ? q->n_known : q->nd1 && !q->d1_at ? q->nd1 : 0;
            const int told = q->ahead ? q->n_told : q->n_proposed;
            const int kk = k < known ? k : known;
            if (known) ops->commit(q->draft, told, kk, NULL, verified);
            else if (q->n_taps) ops->commit(q->draft, 0, 0, NULL, verified);
            if (k > kk) backlog_push(q, q->chain + kk, k - kk);
        }
        q->st.draft_ns += sp_now_ns() - t2;
    }
    q->st.rounds++;
    if (n > 0) {
        q->st.spec_rounds++;
        q->st.drafted += n;
        q->st.accepted += k;
    }
    /* the controller learns from the draft's first part, where it had its
     * chance (everything before it accepted): per depth, was there a draft
     * token at depth d, and was one accepted */
    const int at = q->n_chain ? q->d1_at : 0, m = q->n_chain ? q->nd1 : n;
    if (m > 0 && k >= at) {
        int max_depth = 0, depth[SP_MAX_DRAFT + 1];
        depth[0] = 0;
        for (int j = 1; j <= m; j++) {
            depth[j] = q->prop.parent && !q->n_chain ? depth[q->wparent[j]] + 1 : j;
            if (depth[j] > max_depth) max_depth = depth[j];
        }
        const int ka = k - at < m ? k - at : m;
        for (int d = 0; d < max_depth && d < SP_STAT_POSITIONS; d++) {
            q->st.pos_drafted[d]++;
            if (d < ka) q->st.pos_accepted[d]++;
        }
        sp_adapt_observe(&q->adapt, q->prop.parent && !q->n_chain ? max_depth : m, ka);
    }
}

static int finish_round(sp_seq *q, sp_err *err) {
    const int V = q->m->hp.n_vocab, n = q->n_draft, P = q->base;
    const uint64_t seed = sp_sampler_params_of(q->smp)->seed;
    /* the pass appended the window [pending, drafts...] after the cache */
    assert(n >= 0 && n <= SP_MAX_DRAFT && q->n_rows == n + 1);
    assert(q->kv->n == P + n + 1);
    const uint64_t t1 = sp_now_ns();
    q->st.forwards++;

    /* Accept walk from the pending token down the proposal: the row of the
     * node at depth d predicts the token at position P + d + 1. */
    int32_t keep[SP_MAX_DRAFT + 1], path[SP_MAX_DRAFT];
    int n_keep = 1, k = 0, node = 0;
    keep[0] = 0;
    int32_t tok = -1;
    bool last_matched = false, dead = false;
    for (;;) {
        const float *row = q->logits + (size_t)node * V;
        const uint64_t pos = (uint64_t)(P + k + 1);
        int child = -1;
        if (q->prop.q && node < n) {   /* chains only: node == k */
            int nc;
            bool acc;
            const sp_cand *c = NULL;
            if (constrained(q)) {
                q->st.masks++;
                if (!(c = allowed_cands(q, row, &nc))) {
                    const float *srow = masked_row(q, row);
                    if (!srow) { dead = true; break; }
                    c = sp_sampler_dist(q->smp, srow, &nc);
                }
            } else {
                c = sp_sampler_dist(q->smp, row, &nc);
            }
            tok = sp_verify_specsample(c, nc, q->prop.q + (size_t)node * V, V, q->window[node + 1],
                                       sp_rng_uniform(seed, pos, 1), sp_rng_uniform(seed, pos, 2), &acc);
            child = acc ? node + 1 : -1;
        } else {
            if (sample_at(q, row, pos, &tok, err)) { dead = true; break; }
            child = has_child(q, node) ? child_with(q, node, tok) : -1;
        }
        if (grammar_accept(q, tok, err)) { dead = true; break; }
        sp_sampler_accept(q->smp, tok);
        last_matched = child >= 0;
        if (last_matched) {
            path[k++] = child - 1;
            keep[n_keep++] = child;
            node = child;
        }
        if (emit_token(q, tok, last_matched, row) || !last_matched) break;
    }
    if (dead) {
        /* the grammar allows nothing here: end as if stopped after the last
         * emitted token (the sequence fails below, after the bookkeeping) */
        last_matched = k > 0;
        tok = k > 0 ? q->window[keep[k]] : q->pending;
    }
    /* The cache keeps every emitted token except the last, which becomes the
     * pending token (as in plain decoding): the old pending token and the
     * accepted drafts, minus the last draft if the request stopped on it. */
    assert(k <= n && n_keep == k + 1);
    const int n_cached = n_keep - (last_matched ? 1 : 0);
    sp_kv_keep_path(q->kv, P, keep, n_cached);
    q->pending = tok;
    q->st.sample_ns += sp_now_ns() - t1;

    commit_round(q, n, k, path, keep, n_cached);
    if (dead) return -1;                 /* err says why; the engine ends the sequence */
    if (q->finish) set_done(q, q->finish);
    q->st.total_ns = sp_now_ns() - q->t_start;
    return 0;
}

int sp_seq_apply(sp_seq *q, uint64_t verify_ns, sp_err *err) {
    if (q->state == SEQ_DONE) return 0;
    if (q->state == SEQ_PREFILL) return finish_prefill(q, err);
    q->st.verify_ns += verify_ns;
    return finish_round(q, err);
}
