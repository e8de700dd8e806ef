/* sp_ctx: KV slots, sequences in them, and the plan -> one batched
 * forward -> apply step (see engine.h). */
#include "engine/engine.h"

#include "cache/cache.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    bool used;
    sp_kv *kv;                       /* owned, reused by the slot's sequences */
    sp_seq *seq;                     /* owned while used */
    sp_sampler *smp;                 /* owned while used */
    sp_draft *draft;                 /* owned while used, NULL = plain */
    sp_gmatch *gm;                   /* owned while used, NULL = unconstrained */
    uint64_t admitted;               /* admission order, for prefill fairness */
    /* with the prefix cache (cache_on) */
    bool cache_on;
    bool prompt_done;                /* the prompt's prefill ended (its rows went in, if whole) */
    bool primed;                     /* the draft was primed with the whole prompt */
    int32_t *hist;                   /* the prompt, then every emitted token: row i of kv is hist[i]'s */
    int n_hist, cap_hist, n_prompt;
    sp_emit_fn emit;                 /* the caller's, behind slot_emit */
    void *ud;
    char err[sizeof(sp_err)];        /* why it ended with SP_FINISH_ERROR */
} slot;

struct sp_ctx {
    const sp_model *m;               /* borrowed */
    const sp_tokenizer *tok;         /* borrowed */
    sp_ctx_params p;                 /* defaults filled in */
    sp_pool *pool;
    bool own_pool;
    sp_workspace *ws;                /* owned */
    slot *slots;                     /* (n_slots) */
    uint64_t n_admitted;
    const sp_cost_curve *cost;       /* the given curve, or &measured once known */
    sp_cost_curve measured;
    sp_gvocab *gv;                   /* the vocabulary's trie, built for the first grammar */
    sp_pcache *pcache;               /* owned; NULL = no prefix cache */
    bool closing;                    /* sp_ctx_free: nothing more goes into the cache */
    /* step scratch */
    sp_fwd_seq *fwds;                /* (n_slots) */
    int *fwd_slot;                   /* (n_slots) the slot of fwds[i] */
    int *order;                      /* (n_slots) */
    int *deferred;                   /* (n_slots) slots whose proposals come from a group call */
    sp_seq **group;                  /* (n_slots) */
    int64_t *emitted;                /* (n_slots) a planned slot's tokens before the step */
    sp_ctx_pass last;
    /* the speculation gate (spec_gate.c): one per drafter (its serial), for
     * the steps whose decoding sequences all draft with it; the least
     * recently used one makes room for a new drafter */
    struct { uint64_t serial; uint64_t used; sp_spec_gate g; } gates[SP_CTX_GATES];
    int n_gates;
    uint64_t gate_clock;             /* gate_of calls, for `used` */
    sp_spec_gate *gate;              /* this step's, NULL = none */
    int gate_seqs;                   /* its decoding sequences */
    sp_gate_mode gate_mode;          /* its mode */
    bool pass_prefill;               /* the pass holds prompt rows (not measured) */
};

sp_ctx_params sp_ctx_default_params(void) {
    return (sp_ctx_params){ .n_slots = 1, .n_ctx = 0, .batch_rows = 256,
                            .kv_types = { .k = SP_F16, .v = SP_F16, .quant_start = 0 } };
}

sp_seq_params sp_seq_default_params(void) {
    return (sp_seq_params){ .max_tokens = 128, .sampling = sp_sampler_defaults(),
                            .draft_max = SP_DRAFT_ADAPTIVE, .use_cache = true };
}

/* ----------------------------------------------------------------------------
 * Life cycle
 * ------------------------------------------------------------------------- */

sp_ctx *sp_ctx_create(const sp_model *m, const sp_tokenizer *tok, const sp_ctx_params *p, sp_err *err) {
    sp_ctx_params o = p ? *p : sp_ctx_default_params();
    if (o.n_ctx <= 0) o.n_ctx = m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (o.batch_rows <= 0) o.batch_rows = 256;
    if (o.n_slots < 1 || o.n_slots > 4096) {
        sp_err_set(err, "context: 1 to 4096 slots (got %d)", o.n_slots);
        return NULL;
    }
    if (o.n_ctx < 2) {
        sp_err_set(err, "context: a slot must hold at least 2 tokens (got %d)", o.n_ctx);
        return NULL;
    }
    if (sp_kv_types_check(m, &o.kv_types, err)) return NULL;
    sp_ctx *c = sp_xcalloc(1, sizeof *c);
    c->m = m;
    c->tok = tok;
    c->own_pool = !o.pool;
    if (!o.threads) o.threads = o.pool ? sp_pool_size(o.pool) : sp_physical_cores();
    c->pool = o.pool ? o.pool : sp_pool_create(o.threads);
    o.pool = c->pool;
    c->p = o;
    c->ws = sp_workspace_create(m, o.batch_rows, c->pool);
    c->cost = o.cost;
    c->slots = sp_xcalloc((size_t)o.n_slots, sizeof *c->slots);
    for (int i = 0; i < o.n_slots; i++) c->slots[i].kv = sp_kv_create_typed(m, o.n_ctx, &o.kv_types);
    c->fwds = sp_xcalloc((size_t)o.n_slots, sizeof *c->fwds);
    c->fwd_slot = sp_xcalloc((size_t)o.n_slots, sizeof *c->fwd_slot);
    c->deferred = sp_xcalloc((size_t)o.n_slots, sizeof *c->deferred);
    c->group = sp_xcalloc((size_t)o.n_slots, sizeof *c->group);
    c->order = sp_xcalloc((size_t)o.n_slots, sizeof *c->order);
    c->emitted = sp_xcalloc((size_t)o.n_slots, sizeof *c->emitted);
    if (o.cache_bytes) {
        /* what a row depends on besides its tokens: the weights and how
         * the cache stores them */
        char id[96], kvn[48];
        sp_kv_types_name(&o.kv_types, kvn, sizeof kvn);
        snprintf(id, sizeof id, "model:%s;%s", m->fingerprint, kvn);
        c->pcache = sp_pcache_create_like(c->slots[0].kv, o.cache_bytes, id);
    }
    return c;
}

void sp_ctx_free(sp_ctx *c) {
    if (!c) return;
    c->closing = true;
    for (int i = 0; i < c->p.n_slots; i++) {
        sp_ctx_remove(c, i);
        sp_kv_free(c->slots[i].kv);
        free(c->slots[i].hist);
    }
    free(c->slots);
    free(c->fwds);
    free(c->fwd_slot);
    free(c->deferred);
    free(c->group);
    free(c->order);
    free(c->emitted);
    sp_gvocab_free(c->gv);
    sp_pcache_free(c->pcache);
    sp_workspace_free(c->ws);
    if (c->own_pool) sp_pool_free(c->pool);
    free(c);
}

const sp_model *sp_ctx_model(const sp_ctx *c) { return c->m; }
const sp_tokenizer *sp_ctx_tokenizer(const sp_ctx *c) { return c->tok; }
sp_pool *sp_ctx_pool(const sp_ctx *c) { return c->pool; }
sp_workspace *sp_ctx_workspace(const sp_ctx *c) { return c->ws; }
int sp_ctx_threads(const sp_ctx *c) { return c->p.threads; }
int sp_ctx_n_ctx(const sp_ctx *c) { return c->p.n_ctx; }
int sp_ctx_n_slots(const sp_ctx *c) { return c->p.n_slots; }
sp_ctx_pass sp_ctx_last_pass(const sp_ctx *c) { return c->last; }
sp_pcache *sp_ctx_cache(sp_ctx *c) { return c->pcache; }

int sp_ctx_n_seqs(const sp_ctx *c) {
    int n = 0;
    for (int i = 0; i < c->p.n_slots; i++) n += c->slots[i].used;
    return n;
}

int sp_ctx_cost(sp_ctx *c, const sp_cost_curve **out, sp_err *err) {
    if (!c->cost) {
        if (sp_cost_get(c->m, c->ws, c->p.threads, c->p.cost_dir, &c->measured, err)) return -1;
        c->cost = &c->measured;
    }
    *out = c->cost;
    return 0;
}

/* ----------------------------------------------------------------------------
 * Sequences
 * ------------------------------------------------------------------------- */

static slot *slot_of(const sp_ctx *c, int id) {
    assert(id >= 0 && id < c->p.n_slots && c->slots[id].used);
    return &c->slots[id];
}

/* ----------------------------------------------------------------------------
 * The prefix cache
 * ------------------------------------------------------------------------- */

static sp_emit_result slot_emit(void *ud, int32_t tok, bool drafted, const float *logits) {
    slot *s = ud;
    SP_VEC_GROW(s->hist, s->cap_hist, s->n_hist + 1);
    s->hist[s->n_hist++] = tok;
    return s->emit(s->ud, tok, drafted, logits);
}

/* Puts the slot's rows into the cache, and its draft's state beside them
 * when `ckpt` (the state must cover exactly those rows' tokens).  Nothing
 * from a sequence that failed: its cache may hold a half-written pass. */
static void cache_store(sp_ctx *c, slot *s, bool ckpt) {
    if (c->closing || sp_seq_finish_reason(s->seq) == SP_FINISH_ERROR) return;
    const int n = s->kv->n < s->n_hist ? s->kv->n : s->n_hist;
    if (n <= 0 || sp_pcache_store(c->pcache, s->hist, n, s->kv) < n || !ckpt) return;
    uint8_t *blob;
    size_t len;
    sp_err e;
    if (sp_draft_checkpoint(s->draft, &blob, &len, &e)) {
        sp_debug("prefix cache: no checkpoint of '%s': %s\n", s->draft->drafter->name, e.msg);
        return;
    }
    sp_pcache_put_ckpt(c->pcache, s->hist, n, s->draft->drafter->ns, blob, len);
    free(blob);
}

/* A drafter's state is kept when priming it costs passes (keeps_state).
 * Its checkpoint covers exactly the rows stored with it: after the prompt's
 * prefill, the prompt; at the end, every row in the cache (a drafter that
 * reads hidden states has had every verified row committed to it). */
static bool keeps_state(const slot *s) { return s->draft && s->draft->drafter->keeps_state; }

/* The prompt has been prefilled: its rows, and the draft's state right
 * after its prefill, go into the cache. */
static void cache_prompt_done(sp_ctx *c, slot *s) {
    s->prompt_done = true;
    s->primed = s->kv->n >= s->n_prompt && sp_seq_finish_reason(s->seq) != SP_FINISH_ERROR;
    if (s->primed) cache_store(c, s, keeps_state(s));
}

/* Starts slot s from the longest cached prefix of the prompt, resuming its
 * draft from a checkpoint where one of its namespace lies on the prompt
 * (the whole prompt included: a repeated prompt resumes too).  A drafter
 * that reads hidden states gets rows only up to its checkpoint (it needs
 * the states of every row after it).  Returns the rows loaded; *resumed
 * the prompt tokens the restored draft covers (0 = primed cold). */
static int cache_start(sp_ctx *c, slot *s, const sp_seq_params *p, int *resumed) {
    const int max = p->n_prompt - 1;   /* the last prompt row gives the first logits: always run */
    const bool taps = s->draft && (s->draft->drafter->needs & SP_CAP_HIDDEN_TAPS);
    *resumed = 0;
    if (keeps_state(s)) {
        const uint8_t *blob;
        size_t len;
        sp_err e;
        const int at = sp_pcache_find_ckpt(c->pcache, p->prompt, p->n_prompt, p->n_prompt, s->draft->drafter->ns,
                                           &blob, &len);
        if (at > 0 && !sp_draft_restore(s->draft, blob, len, &e)) *resumed = at;
        else if (at > 0) sp_info("prefix cache: checkpoint of '%s' refused: %s\n", s->draft->drafter->name, e.msg);
    }
    const int lim = taps ? (*resumed < max ? *resumed : max) : max;
    const int got = sp_pcache_load(c->pcache, p->prompt, p->n_prompt, lim, s->kv);
    if (taps && got != lim) {        /* cannot happen: the checkpoint's rows lie on its path */
        *resumed = 0;
        sp_kv_trim(s->kv, 0);
        return 0;
    }
    return got;
}

static void slot_release(slot *s) {
    sp_seq_free(s->seq);
    sp_draft_close(s->draft);
    sp_sampler_free(s->smp);
    sp_gmatch_free(s->gm);
    s->gm = NULL;
    s->seq = NULL;
    s->draft = NULL;
    s->smp = NULL;
    s->used = false;
    s->err[0] = 0;
    s->cache_on = s->prompt_done = s->primed = false;
    s->n_hist = 0;
}

int sp_ctx_add(sp_ctx *c, const sp_seq_params *p, sp_err *err) {
    assert(p->emit);
    int id = 0;
    while (id < c->p.n_slots && c->slots[id].used) id++;
    if (id == c->p.n_slots) return sp_err_set(err, "no free slot (%d sequences running)", c->p.n_slots);
    const int V = c->m->hp.n_vocab;
    if (sp_sampler_validate(&p->sampling, V, err)) return -1;
    const bool drafts = p->drafter && p->draft_max != 0;
    const sp_cost_curve *cost = NULL;
    if (drafts && p->draft_max == SP_DRAFT_ADAPTIVE && sp_ctx_cost(c, &cost, err)) return -1;
    slot *s = &c->slots[id];
    s->smp = sp_sampler_create(&p->sampling, V);
    if (p->penalize_prompt)
        for (int i = 0; i < p->n_prompt; i++) sp_sampler_accept(s->smp, p->prompt[i]);
    if (drafts) {
        const sp_target t = sp_target_full(c->m, c->tok, sp_sampler_params_of(s->smp));
        if (!(s->draft = sp_draft_open(p->drafter, &t, err))) {
            slot_release(s);
            return -1;
        }
    }
    if (p->grammar) {
        if (!c->gv && !(c->gv = sp_gvocab_create(c->tok, err))) {
            slot_release(s);
            return -1;
        }
        if (!(s->gm = sp_gmatch_create(p->grammar, c->gv, p->grammar_trigger, err))) {
            slot_release(s);
            return -1;
        }
    }
    if (p->keep_cached < 0 || p->keep_cached > s->kv->n) {
        sp_err_set(err, "cannot keep %d cached tokens: the slot holds %d", p->keep_cached, s->kv->n);
        slot_release(s);
        return -1;
    }
    sp_kv_trim(s->kv, p->keep_cached);
    int keep = p->keep_cached, resumed = 0;
    s->cache_on = c->pcache && p->use_cache && !p->keep_cached && p->n_prompt > 0;
    if (s->cache_on) {
        keep = cache_start(c, s, p, &resumed);
        s->n_hist = 0;
        SP_VEC_GROW(s->hist, s->cap_hist, p->n_prompt);
        memcpy(s->hist, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
        s->n_hist = s->n_prompt = p->n_prompt;
        s->emit = p->emit;
        s->ud = p->ud;
    }
    const sp_gen_config cfg = { .max_tokens = p->max_tokens, .draft_max = drafts ? p->draft_max : 0,
                                .cost = cost, .forced_spans = p->forced_spans && p->draft_max != 0 };
    s->seq = s->cache_on ? sp_seq_create(c->m, s->kv, s->smp, s->draft, &cfg, slot_emit, s)
                         : sp_seq_create(c->m, s->kv, s->smp, s->draft, &cfg, p->emit, p->ud);
    sp_seq_set_grammar(s->seq, s->gm);
    s->used = true;
    if (sp_seq_start(s->seq, p->prompt, p->n_prompt, keep, resumed, err)) {
        slot_release(s);
        return -1;
    }
    s->admitted = c->n_admitted++;
    return id;
}

void sp_ctx_cancel(sp_ctx *c, int id) { sp_seq_abort(slot_of(c, id)->seq, SP_FINISH_CANCELLED); }

void sp_ctx_remove(sp_ctx *c, int id) {
    assert(id >= 0 && id < c->p.n_slots);
    slot *s = &c->slots[id];
    if (!s->used) return;
    if (s->cache_on) cache_store(c, s, s->primed && keeps_state(s));
    slot_release(s);
}

sp_finish sp_ctx_seq_finish(const sp_ctx *c, int id) { return sp_seq_finish_reason(slot_of(c, id)->seq); }
bool sp_ctx_seq_prefilling(const sp_ctx *c, int id) { return sp_seq_prefilling(slot_of(c, id)->seq); }
const sp_spec_stats *sp_ctx_seq_stats(const sp_ctx *c, int id) { return sp_seq_stats(slot_of(c, id)->seq); }
const char *sp_ctx_seq_error(const sp_ctx *c, int id) { return slot_of(c, id)->err; }
int sp_ctx_seq_n_cached(const sp_ctx *c, int id) { return slot_of(c, id)->kv->n; }

/* Ends slot i's sequence with an error message. */
static void fail_slot(sp_ctx *c, int i, const char *msg) {
    slot *s = &c->slots[i];
    snprintf(s->err, sizeof s->err, "%s", msg);
    sp_seq_abort(s->seq, SP_FINISH_ERROR);
}

/* ----------------------------------------------------------------------------
 * The step
 * ------------------------------------------------------------------------- */

static bool running(const sp_ctx *c, int i) {
    return c->slots[i].used && sp_seq_finish_reason(c->slots[i].seq) == SP_FINISH_NONE;
}

/* Plans slot i with at most max_rows rows (0 = all) into a pass that
 * already holds `rows` rows expected to emit *tokens tokens; adds it to the
 * pass if it has rows (and its expected tokens to *tokens).  Returns the
 * rows added. */
static int plan_slot(sp_ctx *c, int i, int max_rows, int rows, double *tokens, int *n) {
    sp_err e;
    sp_fwd_seq *f = &c->fwds[*n];
    sp_seq *q = c->slots[i].seq;
    if (sp_seq_plan(q, max_rows, rows, *tokens, f, &e)) {
        fail_slot(c, i, e.msg);
        return 0;
    }
    if (f->n == 0) return 0;
    c->fwd_slot[(*n)++] = i;
    *tokens += sp_seq_planned_tokens(q);
    return f->n;
}

/* Running prefilling slots, oldest admission first. */
static int prefill_order(const sp_ctx *c, int *order) {
    int n = 0;
    for (int i = 0; i < c->p.n_slots; i++) {
        if (!running(c, i) || !sp_seq_prefilling(c->slots[i].seq)) continue;
        int k = n++;
        while (k > 0 && c->slots[order[k - 1]].admitted > c->slots[i].admitted) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    return n;
}

/* The drafter slot i's draft would share passes with (one that proposes
 * in groups), or NULL. */
static const sp_drafter *group_drafter(const sp_ctx *c, int i) {
    const sp_draft *d = c->slots[i].draft;
    return d && d->drafter->ops->propose_group ? d->drafter : NULL;
}

/* Plans decoding slot i into a pass holding `rows` rows; its proposal may
 * wait for a group call (may_defer), then it goes to c->deferred and the
 * rows it asks for count as planned. */
static int plan_decode_slot(sp_ctx *c, int i, bool may_defer, int rows, double *tokens, int *n, int *nd) {
    if (!may_defer) return plan_slot(c, i, 0, rows, tokens, n);
    sp_err e;
    sp_fwd_seq *f = &c->fwds[*n];
    sp_seq *q = c->slots[i].seq;
    bool deferred;
    if (sp_seq_plan_deferrable(q, 0, rows, *tokens, f, &deferred, &e)) {
        fail_slot(c, i, e.msg);
        return 0;
    }
    *tokens += sp_seq_planned_tokens(q);
    if (deferred) {
        c->deferred[(*nd)++] = i;
        return sp_seq_deferred(q) + 1;
    }
    if (f->n == 0) return 0;
    c->fwd_slot[(*n)++] = i;
    return f->n;
}

/* The deferred slots' proposals, one group call per drafter (the heads of
 * every sequence drafting with it share their passes), then their windows
 * join the pass.  Returns the rows the windows have beyond the ones
 * counted when they were deferred. */
static int plan_groups(sp_ctx *c, int nd, int *n) {
    int extra = 0;
    for (int a = 0; a < nd; a++) {
        const int first = c->deferred[a];
        if (first < 0) continue;
        const sp_drafter *d = group_drafter(c, first);
        int k = 0;
        for (int b = a; b < nd; b++) {
            const int i = c->deferred[b];
            if (i < 0 || group_drafter(c, i) != d) continue;
            extra -= sp_seq_deferred(c->slots[i].seq) + 1;
            c->group[k] = c->slots[i].seq;
            c->fwd_slot[*n + k++] = i;
            c->deferred[b] = -1;
        }
        sp_err e;
        if (sp_seq_plan_group(c->group, k, &c->fwds[*n], &e)) {
            for (int j = 0; j < k; j++) fail_slot(c, c->fwd_slot[*n + j], e.msg);
            continue;
        }
        for (int j = 0; j < k; j++) extra += c->fwds[*n + j].n;
        *n += k;
    }
    return extra;
}

/* The gate of drafter d, made at its first use.  Keyed by serial, not
 * address: a drafter freed and another made in its place must not inherit
 * its measurements.  A full table drops the least recently used gate. */
static sp_spec_gate *gate_of(sp_ctx *c, const sp_drafter *d) {
    int at = -1;
    c->gate_clock++;
    for (int i = 0; i < c->n_gates && at < 0; i++)
        if (c->gates[i].serial == d->serial) at = i;
    if (at < 0) {
        if (c->n_gates < SP_CTX_GATES) at = c->n_gates++;
        else {
            at = 0;
            for (int i = 1; i < c->n_gates; i++)
                if (c->gates[i].used < c->gates[at].used) at = i;
        }
        c->gates[at].serial = d->serial;
        sp_spec_gate_init(&c->gates[at].g, d->cheap_lead > 0);
    }
    c->gates[at].used = c->gate_clock;
    return &c->gates[at].g;
}

/* The gate's mode for this step.  It applies when every decoding sequence
 * drafts with one drafter under the adaptive length: then the step's rate
 * is that drafter's (or plain decoding's) and can be measured.  Steps of
 * mixed drafters draft as their controllers choose. */
static void gate_step(sp_ctx *c) {
    c->gate = NULL;
    const sp_drafter *d = NULL;
    int n = 0;
    for (int i = 0; i < c->p.n_slots; i++)
        if (running(c, i)) sp_seq_gate(c->slots[i].seq, SP_GATE_ALL);
    for (int i = 0; i < c->p.n_slots; i++) {
        if (!running(c, i) || sp_seq_prefilling(c->slots[i].seq)) continue;
        const sp_drafter *di = sp_seq_gateable(c->slots[i].seq) ? c->slots[i].draft->drafter : NULL;
        if (!di || (n > 0 && di != d)) return;
        d = di;
        n++;
    }
    if (!n || c->p.no_gate || !d->serial) return;   /* serial 0: not made by sp_drafter_alloc */
    c->gate = gate_of(c, d);
    c->gate_seqs = n;
    c->gate_mode = sp_spec_gate_next(c->gate, n);
    for (int i = 0; i < c->p.n_slots; i++)
        if (running(c, i) && !sp_seq_prefilling(c->slots[i].seq)) sp_seq_gate(c->slots[i].seq, c->gate_mode);
}

/* Plans the pass: decoding windows first, each sequence's draft length
 * chosen for the pass as planned so far (more rows make extra draft rows
 * dearer), then prompt chunks within the rest of the row budget.  Where
 * two or more decoding sequences draft with one drafter that proposes in
 * groups, their proposals come from one group call after their lengths
 * are chosen.  Returns the sequences planned; *rows_out the rows. */
static int plan_pass(sp_ctx *c, int *rows_out) {
    int n = 0, rows = 0, nd = 0;
    double tokens = 0.0;
    gate_step(c);
    for (int i = 0; i < c->p.n_slots; i++) {
        if (!running(c, i) || sp_seq_prefilling(c->slots[i].seq)) continue;
        const sp_drafter *d = group_drafter(c, i);
        bool shared = false;
        for (int j = 0; d && j < c->p.n_slots && !shared; j++)
            shared = j != i && running(c, j) && !sp_seq_prefilling(c->slots[j].seq) && group_drafter(c, j) == d;
        rows += plan_decode_slot(c, i, shared, rows, &tokens, &n, &nd);
    }
    if (nd) rows += plan_groups(c, nd, &n);
    const int quarter = c->p.batch_rows / 4 > 0 ? c->p.batch_rows / 4 : 1;
    int budget = c->p.batch_rows - rows;
    if (budget < quarter) budget = quarter;
    const int n_pre = prefill_order(c, c->order);
    c->pass_prefill = false;
    for (int k = 0; k < n_pre && budget > 0; k++) {
        const int got = plan_slot(c, c->order[k], budget, rows, &tokens, &n);
        budget -= got;
        rows += got;
        c->pass_prefill |= got > 0;
    }
    *rows_out = rows;
    return n;
}

int sp_ctx_step(sp_ctx *c) {
    int rows = 0;
    const uint64_t t_step = sp_now_ns();
    const int n = plan_pass(c, &rows);
    c->last = (sp_ctx_pass){ n, rows, 0 };
    if (n > 0) {
        sp_err e;
        for (int k = 0; k < n; k++) c->emitted[k] = sp_seq_stats(c->slots[c->fwd_slot[k]].seq)->emitted;
        const uint64_t t0 = sp_now_ns();
        const int rc = sp_model_forward_batch(c->m, c->ws, c->fwds, n, &e);
        c->last.ns = sp_now_ns() - t0;
        double tokens = 0;
        for (int k = 0; k < n; k++) {
            const int i = c->fwd_slot[k];
            slot *s = &c->slots[i];
            if (rc) fail_slot(c, i, e.msg);
            else if (sp_seq_apply(s->seq, c->last.ns, &e)) fail_slot(c, i, e.msg);
            if (s->cache_on && !s->prompt_done && !sp_seq_prefilling(s->seq)) cache_prompt_done(c, s);
            tokens += (double)(sp_seq_stats(s->seq)->emitted - c->emitted[k]);
        }
        /* the whole step, planning and drafting included, as the gate
         * compares them; a pass with prompt rows says nothing of either */
        if (c->gate && !c->pass_prefill && !rc)
            sp_spec_gate_observe(c->gate, c->gate_seqs, c->gate_mode, tokens, sp_ns_to_s(sp_now_ns() - t_step));
    }
    int left = 0;
    for (int i = 0; i < c->p.n_slots; i++) left += running(c, i);
    return left;
}

int sp_ctx_generate(sp_ctx *c, const sp_seq_params *p, sp_spec_stats *stats, sp_finish *finish,
                    sp_err *err) {
    const int id = sp_ctx_add(c, p, err);
    if (id < 0) return -1;
    while (sp_ctx_seq_finish(c, id) == SP_FINISH_NONE) sp_ctx_step(c);
    const sp_finish f = sp_ctx_seq_finish(c, id);
    if (stats) *stats = *sp_ctx_seq_stats(c, id);
    if (finish) *finish = f;
    const int rc = f == SP_FINISH_ERROR ? sp_err_set(err, "%s", sp_ctx_seq_error(c, id)) : 0;
    sp_ctx_remove(c, id);
    return rc;
}
