/* The round loop: propose, verify in one batched pass, accept, trim,
 * commit.  Plain decoding is the same loop with empty proposals. */
#include "spec/spec.h"

#include <stdlib.h>
#include <string.h>

#define SP_SHADOW_MAX 8          /* shadow proposals measure acceptance while not drafting */

struct sp_seq {
    const sp_model *m;
    sp_kv *kv;
    sp_workspace *ws;
    sp_sampler *smp;
    sp_draft *draft;
    sp_gen_config cfg;
    sp_emit_fn emit;
    void *ud;
    float *logits;               /* (SP_MAX_DRAFT + 1, n_vocab) owned */
    int32_t pending;             /* last emitted token, not yet in the cache */
    int32_t window[SP_MAX_DRAFT + 1];
    sp_adapt adapt;
    int32_t shadow[SP_SHADOW_MAX];
    int n_shadow, shadow_pos;    /* n_shadow = 0: no shadow proposal pending */
    sp_finish finish;
    sp_spec_stats st;
    uint64_t t_start;
};

const char *sp_finish_name(sp_finish f) {
    switch (f) {
    case SP_FINISH_STOP: return "stop";
    case SP_FINISH_LENGTH: return "length";
    case SP_FINISH_CONTEXT: return "context";
    default: return "none";
    }
}

sp_seq *sp_seq_create(const sp_model *m, sp_kv *kv, sp_workspace *ws, sp_sampler *smp,
                      sp_draft *draft, const sp_gen_config *cfg, sp_emit_fn emit, void *ud) {
    sp_seq *q = sp_xcalloc(1, sizeof *q);
    q->m = m; q->kv = kv; q->ws = ws; q->smp = smp; q->draft = draft;
    q->cfg = *cfg;
    q->emit = emit; q->ud = ud;
    q->logits = sp_alloc_aligned((size_t)(SP_MAX_DRAFT + 1) * m->hp.n_vocab * sizeof(float));
    int cap = cfg->draft_max == SP_DRAFT_ADAPTIVE ? 16 : cfg->draft_max;
    sp_adapt_init(&q->adapt, cfg->cost, cap);
    return q;
}

void sp_seq_free(sp_seq *q) {
    if (!q) return;
    sp_free_aligned(q->logits);
    free(q);
}

sp_finish sp_seq_finished(const sp_seq *q) { return q->finish; }
const sp_spec_stats *sp_seq_stats(const sp_seq *q) { return &q->st; }

/* Shadow bookkeeping: compares an unverified proposal with what the target
 * actually emitted, to keep acceptance estimates fresh while not drafting. */
static void shadow_see(sp_seq *q, int32_t tok) {
    if (!q->n_shadow) return;
    if (q->shadow[q->shadow_pos] == tok && ++q->shadow_pos < q->n_shadow) return;
    /* resolved: a mismatch at shadow_pos, or every shadow token matched */
    sp_adapt_observe(&q->adapt, q->n_shadow, q->shadow_pos);
    q->n_shadow = 0;
}

/* Hands one token to the caller; returns true when the request is over. */
static bool emit_token(sp_seq *q, int32_t tok, bool drafted) {
    q->st.emitted++;
    shadow_see(q, tok);
    if (q->emit(q->ud, tok, drafted) == SP_EMIT_STOP) {
        q->finish = SP_FINISH_STOP;
        return true;
    }
    if (q->st.emitted >= q->cfg.max_tokens) {
        q->finish = SP_FINISH_LENGTH;
        return true;
    }
    return false;
}

int sp_seq_start(sp_seq *q, const int32_t *prompt, int n_prompt, sp_err *err) {
    if (n_prompt <= 0) return sp_err_set(err, "generate: the prompt is empty");
    if (q->kv->n + n_prompt >= q->kv->n_ctx)
        return sp_err_set(err, "generate: the prompt (%d tokens) does not fit the context (%d)",
                          n_prompt, q->kv->n_ctx - q->kv->n);
    uint64_t t0 = sp_now_ns();
    if (sp_model_forward(q->m, q->kv, q->ws, prompt, n_prompt, SP_LOGITS_LAST, q->logits, err))
        return -1;
    q->st.n_prompt = n_prompt;
    q->st.requests = 1;
    if (q->draft && q->draft->drafter->ops->prefill(q->draft, prompt, n_prompt, NULL, err)) return -1;
    q->t_start = sp_now_ns();
    q->st.prefill_ns = q->t_start - t0;
    if (q->cfg.max_tokens <= 0) {
        q->finish = SP_FINISH_LENGTH;
        return 0;
    }
    const int32_t tok = sp_sampler_sample(q->smp, q->logits, (uint64_t)q->kv->n);
    sp_sampler_accept(q->smp, tok);
    q->pending = tok;
    emit_token(q, tok, false);
    q->st.total_ns = sp_now_ns() - q->t_start;
    return 0;
}

/* How many draft tokens this round may verify. */
static int draft_budget(const sp_seq *q) {
    if (!q->draft || q->cfg.draft_max == 0) return 0;
    int n = q->cfg.draft_max == SP_DRAFT_ADAPTIVE ? sp_adapt_choose(&q->adapt) : q->cfg.draft_max;
    const int left = q->cfg.max_tokens - (int)q->st.emitted - 1;  /* the round emits up to n + 1 */
    const int room = q->kv->n_ctx - q->kv->n - 1;                  /* cache slots after the pending token */
    if (n > left) n = left;
    if (n > room) n = room;
    if (n > SP_MAX_DRAFT) n = SP_MAX_DRAFT;
    return n < 0 ? 0 : n;
}

/* Asks the draft for a proposal (or a shadow one); returns the number of
 * draft tokens to verify. */
static int propose(sp_seq *q, int budget, sp_proposal *prop, sp_err *err) {
    memset(prop, 0, sizeof *prop);
    if (!q->draft) return 0;
    const sp_drafter_ops *ops = q->draft->drafter->ops;
    const bool shadow = budget == 0 && q->cfg.draft_max == SP_DRAFT_ADAPTIVE &&
                        q->draft->drafter->cheap && q->n_shadow == 0;
    int ask = shadow ? SP_SHADOW_MAX : budget;
    uint64_t t0 = sp_now_ns();
    if (ops->propose(q->draft, &q->pending, 1, ask, prop, err)) return -1;
    if (prop->n < 0 || prop->n > ask)
        return sp_err_set(err, "drafter '%s' proposed %d tokens, at most %d allowed",
                          q->draft->drafter->name, prop->n, ask);
    if (shadow) {
        memcpy(q->shadow, prop->tokens, (size_t)prop->n * sizeof(int32_t));
        q->n_shadow = prop->n;
        q->shadow_pos = 0;
        ops->commit(q->draft, prop->n, 0, NULL);
        prop->n = 0;
    }
    q->st.draft_ns += sp_now_ns() - t0;
    return prop->n;
}

int sp_seq_step(sp_seq *q, sp_err *err) {
    if (q->finish) return 0;
    if (q->kv->n >= q->kv->n_ctx) { q->finish = SP_FINISH_CONTEXT; return 0; }
    const int V = q->m->hp.n_vocab;
    const uint64_t seed = sp_sampler_params_of(q->smp)->seed;
    sp_proposal prop;
    const int n = propose(q, draft_budget(q), &prop, err);
    if (n < 0) return -1;

    /* One batched target pass over [pending, d1..dn]. */
    const int P = q->kv->n;      /* position of the pending token */
    q->window[0] = q->pending;
    memcpy(q->window + 1, prop.tokens, (size_t)n * sizeof(int32_t));
    uint64_t t0 = sp_now_ns();
    if (sp_model_forward(q->m, q->kv, q->ws, q->window, n + 1, SP_LOGITS_ALL, q->logits, err))
        return -1;
    uint64_t t1 = sp_now_ns();
    q->st.verify_ns += t1 - t0;
    q->st.forwards++;

    /* Accept walk: row i predicts the token at position P + i + 1. */
    int k = 0;
    int32_t tok = -1;
    bool last_matched = false;
    for (int i = 0; i <= n; i++) {
        const float *row = q->logits + (size_t)i * V;
        const uint64_t pos = (uint64_t)(P + i + 1);
        bool matched;
        if (prop.q && i < n) {
            int nc;
            const sp_cand *c = sp_sampler_dist(q->smp, row, &nc);
            tok = sp_verify_specsample(c, nc, prop.q + (size_t)i * V, V, prop.tokens[i],
                                       sp_rng_uniform(seed, pos, 1), sp_rng_uniform(seed, pos, 2),
                                       &matched);
        } else {
            tok = sp_sampler_sample(q->smp, row, pos);
            matched = i < n && tok == prop.tokens[i];
        }
        sp_sampler_accept(q->smp, tok);
        if (matched) k++;
        last_matched = matched;
        if (emit_token(q, tok, matched) || !matched) break;
    }
    /* The cache keeps every emitted token except the last, which becomes the
     * pending token (as in plain decoding): the old pending token and the
     * accepted drafts, minus the last draft if the request stopped on it. */
    sp_kv_trim(q->kv, P + 1 + k - (last_matched ? 1 : 0));
    q->pending = tok;
    q->st.sample_ns += sp_now_ns() - t1;

    if (q->draft && n > 0) {
        uint64_t t2 = sp_now_ns();
        q->draft->drafter->ops->commit(q->draft, n, k, NULL);
        q->st.draft_ns += sp_now_ns() - t2;
    }
    q->st.rounds++;
    if (n > 0) {
        q->st.spec_rounds++;
        q->st.drafted += n;
        q->st.accepted += k;
        for (int i = 0; i < n && i < SP_STAT_POSITIONS; i++) {
            q->st.pos_drafted[i]++;
            if (i < k) q->st.pos_accepted[i]++;
        }
        sp_adapt_observe(&q->adapt, n, k);
    }
    q->st.total_ns = sp_now_ns() - q->t_start;
    return 0;
}

int sp_generate(const sp_model *m, sp_kv *kv, sp_workspace *ws, sp_sampler *smp, sp_draft *draft,
                const sp_gen_config *cfg, const int32_t *prompt, int n_prompt, sp_emit_fn emit,
                void *ud, sp_spec_stats *stats, sp_finish *finish, sp_err *err) {
    sp_seq *q = sp_seq_create(m, kv, ws, smp, draft, cfg, emit, ud);
    int rc = sp_seq_start(q, prompt, n_prompt, err);
    while (rc == 0 && !q->finish) rc = sp_seq_step(q, err);
    if (stats) *stats = q->st;
    if (finish) *finish = q->finish;
    sp_seq_free(q);
    return rc;
}
