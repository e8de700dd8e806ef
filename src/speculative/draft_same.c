/* The same-vocabulary model drafter ("draft" with a model of the target's
 * vocabulary, and "self"): token ids pass through unchanged.
 *
 * The draft cache holds every token of the history except those at the
 * end of hist that are not yet cached (unfed: known tokens not yet run
 * through the draft model).  propose(feed) runs unfed + feed in one pass,
 * then drafts one token per pass; commit(n, k) trims the cache back to the
 * history plus the accepted drafts, so rejected drafts vanish exactly (an
 * all-accepted round's last draft was never run: it becomes unfed).  With
 * `sample` (and a temperature above 0) drafts are drawn from the draft's
 * distribution q, which the proposal returns for speculative sampling.
 */
#include "speculative/draft_model_internal.h"

#include <stdlib.h>

static int same_prefill(dm_draft *g, const int32_t *prompt, int n, sp_err *err) {
    sp_dm_reset(g);
    sp_dm_ints_push(&g->hist, &g->n_hist, &g->cap_hist, prompt, n);
    return sp_dm_prefill_cache(g, err);
}

/* After a restore: keep the cached rows whose tokens the prompt shares,
 * then run the rest as prefill does. */
static int same_resume(dm_draft *g, const int32_t *prompt, int n, sp_err *err) {
    int keep = 0;
    while (keep < g->n_cached && keep < n && g->hist[keep] == prompt[keep]) keep++;
    sp_kv_trim(g->kv, keep);
    g->n_cached = keep;
    g->n_hist = 0;
    sp_dm_ints_push(&g->hist, &g->n_hist, &g->cap_hist, prompt, n);
    return sp_dm_prefill_cache(g, err);
}

static int same_propose(dm_draft *g, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                        sp_err *err) {
    *out = (sp_proposal){ 0 };
    g->n_out = 0;
    sp_dm_ints_push(&g->hist, &g->n_hist, &g->cap_hist, feed, n_feed);
    if (max_n <= 0) return 0;
    if (sp_dm_draft_tokens(g, max_n, err)) return -1;
    *out = (sp_proposal){ .n = g->n_out, .tokens = g->out, .q = g->smp ? g->q : NULL };
    return 0;
}

static void same_commit(dm_draft *g, int n_drafted, int n_accepted) {
    if (n_drafted <= 0) return;
    /* the cache holds the history and the drafts that were run (all but
     * the last, unless drafting stopped early): keep the accepted ones; an
     * accepted draft that was never run stays in hist as unfed */
    const int ran = g->kv->n - g->n_hist;
    const int kept = n_accepted < ran ? n_accepted : ran;
    sp_kv_trim(g->kv, g->n_hist + kept);
    sp_dm_ints_push(&g->hist, &g->n_hist, &g->cap_hist, g->out, n_accepted);
    g->n_cached = g->kv->n;
    g->n_out = 0;
}

static void same_close(dm_draft *g) {
    sp_dm_core_fini(g);
    free(g);
}

static const dm_kind same_kind = {
    .prefill = same_prefill, .propose = same_propose, .commit = same_commit, .close = same_close,
    .resume = same_resume,
};

dm_draft *sp_dm_same_open(dm_drafter *dm, const sp_target *t, sp_err *err) {
    /* ids pass through, so the vocabularies must at least be the same size
     * (self shares the target's model) */
    if (dm->model->hp.n_vocab != t->model->hp.n_vocab && dm->owns_model) {
        sp_err_set(err, "draft model vocabulary (%d) differs from the target's (%d)",
                   dm->model->hp.n_vocab, t->model->hp.n_vocab);
        return NULL;
    }
    dm_draft *g = sp_xcalloc(1, sizeof *g);
    if (dm->o.sample && t->sampling && t->sampling->temperature > 0) {
        /* the request's sampling applied to the draft's logits gives q */
        g->smp = sp_sampler_create(t->sampling, dm->model->hp.n_vocab);
        g->q = sp_alloc_aligned((size_t)SP_MAX_DRAFT * dm->model->hp.n_vocab * sizeof(float));
    }
    sp_dm_core_init(g, dm, &same_kind);
    return g;
}
