/*
 * Jobs: one generation each, and the channel its output flows through.
 *
 * The scheduler thread emits tokens into a job (detokenize, stop strings,
 * logprobs) and appends the text that became safe to show; the HTTP
 * thread takes it.  Everything the emit path touches besides the channel
 * belongs to the scheduler thread alone.
 */
#include "serve/internal.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The bytes [start, end) of the pushed text that one token released. */
typedef struct tok_span {
    size_t start, end;
    bool drafted;
} tok_span;

struct sp_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                        /* under mu */
    int cancel;                      /* atomic: the client is gone */
    /* configuration (immutable) */
    const sp_model *m;
    const sp_tokenizer *tok;
    int32_t *prompt;                 /* (n_prompt) owned */
    int n_prompt;
    int max_tokens;
    bool logprobs, ignore_eos, no_cache;
    int top_logprobs;
    int draft_max;
    sp_metrics *mx;
    char method[32];
    sp_drafter *drafter;             /* borrowed; NULL = plain decoding */
    sp_sampler_params sampling;      /* bias points into `bias` */
    sp_logit_bias *bias;             /* owned copy */
    sp_grammar *grammar;             /* owned; the sequence borrows it */
    char *grammar_trigger;           /* owned */
    /* scheduler-thread state */
    bool started;                    /* its sequence was added to the context */
    sp_detok detok;
    sp_stop stop;
    size_t pushed;                   /* bytes of text pushed into stop */
    uint64_t t_submit, t_start, t_first, t_last;
    int n_drafted_emitted;
    /* the channel (under mu) */
    char *out;                       /* released text not yet taken */
    size_t n_out, cap_out;
    size_t released;                 /* bytes released so far, in total */
    sp_lp_entry *lps;                /* entries not yet taken */
    int n_lps, cap_lps;
    tok_span *spans;                 /* texts of tokens not wholly taken */
    int n_spans, cap_spans;
    sp_job_end end;
    sp_finish finish;
    sp_api_err err;
    sp_spec_stats stats;
    bool changed;                    /* something to take */
};

/* ----------------------------------------------------------------------------
 * Life cycle
 * ------------------------------------------------------------------------- */

sp_job *sp_job_create(const sp_job_cfg *c, sp_api_err *err) {
    sp_job *j = sp_xcalloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->grammar = c->grammar;
    j->grammar_trigger = c->grammar_trigger ? sp_xstrdup(c->grammar_trigger) : NULL;
    j->m = c->m;
    j->tok = c->tok;
    j->prompt = sp_xmalloc((size_t)c->n_prompt * sizeof(int32_t));
    memcpy(j->prompt, c->prompt, (size_t)c->n_prompt * sizeof(int32_t));
    j->n_prompt = c->n_prompt;
    j->max_tokens = c->max_tokens;
    j->logprobs = c->logprobs;
    j->top_logprobs = c->top_logprobs;
    j->ignore_eos = c->ignore_eos;
    j->no_cache = c->no_cache;
    j->draft_max = c->drafter ? c->draft_max : 0;
    j->mx = c->mx;
    snprintf(j->method, sizeof j->method, "%s", c->drafter ? c->drafter->name : "none");
    j->sampling = *c->sampling;
    if (c->sampling->n_bias > 0) {
        j->bias = sp_xmalloc((size_t)c->sampling->n_bias * sizeof *j->bias);
        memcpy(j->bias, c->sampling->bias, (size_t)c->sampling->n_bias * sizeof *j->bias);
    }
    j->sampling.bias = j->bias;
    sp_err e;
    if (sp_stop_init(&j->stop, (const char *const *)c->stops, c->n_stops, &e)) {
        sp_api_fail(err, 400, "invalid_request_error", NULL, "stop", "%s", e.msg);
        sp_job_unref(j);
        return NULL;
    }
    j->drafter = c->drafter;
    return j;
}

void sp_job_ref(sp_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void sp_job_unref(sp_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    const int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    /* the last reference goes after the scheduler removed the sequence */
    sp_grammar_free(j->grammar);
    free(j->grammar_trigger);
    free(j->bias);
    sp_stop_free(&j->stop);
    free(j->prompt);
    free(j->out);
    free(j->lps);
    free(j->spans);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

const char *sp_job_method(const sp_job *j) { return j->method; }
int sp_job_n_prompt(const sp_job *j) { return j->n_prompt; }
bool sp_job_constrained(const sp_job *j) { return j->grammar != NULL; }
uint64_t sp_job_t_submit(const sp_job *j) { return j->t_submit; }
void sp_job_set_t_submit(sp_job *j, uint64_t t) { j->t_submit = t; }

void sp_job_cancel(sp_job *j) { __atomic_store_n(&j->cancel, 1, __ATOMIC_RELEASE); }
bool sp_job_cancelled(const sp_job *j) { return __atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE); }

/* ----------------------------------------------------------------------------
 * The channel
 * ------------------------------------------------------------------------- */

/* Appends released text (caller holds mu). */
static void put_text(sp_job *j, const char *s, size_t n) {
    if (!n) return;
    SP_VEC_GROW(j->out, j->cap_out, j->n_out + n);
    memcpy(j->out + j->n_out, s, n);
    j->n_out += n;
    j->released += n;
    j->changed = true;
}

static void put_lp(sp_job *j, const sp_lp_entry *e) {
    SP_VEC_GROW(j->lps, j->cap_lps, j->n_lps + 1);
    j->lps[j->n_lps++] = *e;
}

static void put_span(sp_job *j, size_t start, size_t end, bool drafted) {
    SP_VEC_GROW(j->spans, j->cap_spans, j->n_spans + 1);
    j->spans[j->n_spans++] = (tok_span){ start, end, drafted };
}

/* Appends a run to d->segs, merged into the last one if it has the same
 * flag. */
static void add_seg(sp_job_delta *d, int *cap, size_t len, bool drafted, int tokens) {
    if (!len) return;
    if (d->n_segs && d->segs[d->n_segs - 1].drafted == drafted) {
        d->segs[d->n_segs - 1].len += len;
        d->segs[d->n_segs - 1].tokens += tokens;
        return;
    }
    SP_VEC_GROW(d->segs, *cap, d->n_segs + 1);
    d->segs[d->n_segs++] = (sp_text_seg){ len, drafted, tokens };
}

/* The drafted marks of the text being taken, bytes [lo, hi) of the output
 * (caller holds mu).  Spans are in order and do not overlap; bytes no span
 * covers are the target's; a span that ends by hi is consumed, one that
 * goes on stays for the next take. */
static void take_segs(sp_job *j, size_t lo, size_t hi, sp_job_delta *d) {
    int cap = 0, k = 0;
    size_t at = lo;
    for (; k < j->n_spans && j->spans[k].start < hi; k++) {
        const tok_span *sp = &j->spans[k];
        const size_t s = sp->start > lo ? sp->start : lo, e = sp->end < hi ? sp->end : hi;
        if (e <= s) continue;
        add_seg(d, &cap, s - at, false, 0);
        add_seg(d, &cap, e - s, sp->drafted, sp->start >= lo);
        at = e;
    }
    add_seg(d, &cap, hi - at, false, 0);
    if (k > 0 && j->spans[k - 1].end > hi) k--;    /* the last one goes on */
    /* Text that only the final flush released (an answer made of an
     * incomplete UTF-8 sequence) comes with no span at all, and spans may
     * still be NULL: memmove with a NULL pointer is undefined even for 0
     * bytes, so shift only when something was consumed. */
    if (k == 0) return;
    memmove(j->spans, j->spans + k, (size_t)(j->n_spans - k) * sizeof *j->spans);
    j->n_spans -= k;
}

bool sp_job_wait(sp_job *j, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&j->mu);
    while (!j->changed && !j->end)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) == ETIMEDOUT) break;
    const bool any = j->changed || j->end;
    pthread_mutex_unlock(&j->mu);
    return any;
}

/* Logprob entries go out with the text they belong to: an entry whose text
 * starts before the released length (all of them once the job ended
 * without a stop string; those before the cut when one was hit). */
static int lps_ready(const sp_job *j) {
    const bool all = j->end && !sp_stop_hit(&j->stop);
    int k = 0;
    while (k < j->n_lps && (all || j->lps[k].offset < j->released)) k++;
    return k;
}

void sp_job_take(sp_job *j, sp_job_delta *d) {
    memset(d, 0, sizeof *d);
    pthread_mutex_lock(&j->mu);
    if (j->n_out) {
        d->text = sp_xmalloc(j->n_out + 1);
        memcpy(d->text, j->out, j->n_out);
        d->text[j->n_out] = 0;
        d->n_text = j->n_out;
        take_segs(j, j->released - j->n_out, j->released, d);
        j->n_out = 0;
    }
    const int k = lps_ready(j);
    if (k) {
        d->lps = sp_xmalloc((size_t)k * sizeof *d->lps);
        memcpy(d->lps, j->lps, (size_t)k * sizeof *d->lps);
        d->n_lps = k;
        memmove(j->lps, j->lps + k, (size_t)(j->n_lps - k) * sizeof *j->lps);
        j->n_lps -= k;
    }
    if (j->end) {                    /* entries past a stop string are dropped */
        d->end = j->end;
        d->finish = j->finish;
        d->err = j->err;
        d->stats = j->stats;
        d->n_drafted_emitted = j->n_drafted_emitted;
        j->n_lps = 0;
        j->n_spans = 0;              /* texts past a stop string */
    }
    j->changed = false;
    pthread_mutex_unlock(&j->mu);
}

void sp_job_delta_free(sp_job_delta *d) {
    free(d->text);
    free(d->lps);
    free(d->segs);
    d->text = NULL;
    d->lps = NULL;
    d->segs = NULL;
}

/* ----------------------------------------------------------------------------
 * Emission (scheduler thread)
 * ------------------------------------------------------------------------- */

/* Log-softmax of the raw logits: the emitted token's value and the
 * top_logprobs best alternatives (descending, ties by id). */
static void logprob_entry(const sp_job *j, const float *row, int32_t tok, sp_lp_entry *e) {
    const int V = j->m->hp.n_vocab;
    float max = -INFINITY;
    for (int i = 0; i < V; i++) max = row[i] > max ? row[i] : max;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)row[i] - max);
    const double lse = max + log(sum);
    e->token = tok;
    e->lp = (float)(row[tok] - lse);
    e->n_top = 0;
    for (int i = 0; i < V && j->top_logprobs > 0; i++) {
        int k = e->n_top;
        if (k == j->top_logprobs && !(row[i] > row[e->top[k - 1].id])) continue;
        if (k < j->top_logprobs) e->n_top++;
        else k--;                    /* replace the worst */
        while (k > 0 && row[i] > row[e->top[k - 1].id]) { e->top[k] = e->top[k - 1]; k--; }
        e->top[k] = (sp_lp_alt){ i, 0 };
    }
    for (int k = 0; k < e->n_top; k++) e->top[k].lp = (float)(row[e->top[k].id] - lse);
}

/* Moves the text stop strings allow into the channel. */
static void release_text(sp_job *j, bool final) {
    size_t n;
    const char *s = sp_stop_release(&j->stop, final, &n);
    pthread_mutex_lock(&j->mu);
    put_text(j, s, n);
    pthread_mutex_unlock(&j->mu);
    if (n) pthread_cond_broadcast(&j->cv);
}

static sp_emit_result on_token(void *ud, int32_t tok, bool drafted, const float *logits) {
    sp_job *j = ud;
    const uint64_t now = sp_now_ns();
    if (!j->t_first) j->t_first = now;
    else if (j->mx) sp_metrics_itl(j->mx, now - j->t_last);
    j->t_last = now;
    if (drafted) j->n_drafted_emitted++;
    if (!j->ignore_eos && sp_tokenizer_is_eog(j->tok, tok)) return SP_EMIT_STOP;
    if (j->logprobs) {
        sp_lp_entry e;
        logprob_entry(j, logits, tok, &e);
        e.offset = j->pushed;
        pthread_mutex_lock(&j->mu);
        put_lp(j, &e);
        pthread_mutex_unlock(&j->mu);
    }
    char buf[SP_DETOK_CAP(256)];
    const size_t cap = SP_DETOK_CAP(sp_tokenizer_max_token_len(j->tok));
    char *piece = cap <= sizeof buf ? buf : sp_xmalloc(cap);
    size_t n = sp_detok_push(&j->detok, j->tok, tok, false, piece, cap);
    if (n > cap - 1) n = cap - 1;
    const bool hit = sp_stop_push(&j->stop, piece, n);
    if (n) {
        pthread_mutex_lock(&j->mu);
        put_span(j, j->pushed, j->pushed + n, drafted);
        pthread_mutex_unlock(&j->mu);
    }
    j->pushed += n;
    if (piece != buf) free(piece);
    release_text(j, false);
    return hit ? SP_EMIT_STOP : SP_EMIT_CONTINUE;
}

/* Drafts are opened by the context, on the scheduler thread, like every
 * other use of the engine-wide drafters. */
int sp_job_start(sp_job *j, sp_ctx *ctx, sp_err *err) {
    sp_seq_params p = sp_seq_default_params();
    p.prompt = j->prompt;
    p.n_prompt = j->n_prompt;
    p.max_tokens = j->max_tokens;
    p.sampling = j->sampling;
    p.penalize_prompt = false;       /* OpenAI: penalties count generated tokens */
    p.drafter = j->drafter;
    p.draft_max = j->draft_max;
    p.grammar = j->grammar;
    p.grammar_trigger = j->grammar_trigger;
    p.forced_spans = j->drafter != NULL;  /* a speculating server drafts what the grammar forces */
    p.use_cache = !j->no_cache;
    p.emit = on_token;
    p.ud = j;
    j->t_start = sp_now_ns();
    const int id = sp_ctx_add(ctx, &p, err);
    j->started = id >= 0;
    return id;
}

/* Records the end under the lock and wakes the consumer. */
static void set_end(sp_job *j, sp_job_end end, sp_finish finish, const sp_api_err *err,
                    const sp_spec_stats *st) {
    pthread_mutex_lock(&j->mu);
    if (!j->end) {
        j->end = end;
        j->finish = finish;
        if (err) j->err = *err;
        if (st) j->stats = *st;
    }
    pthread_mutex_unlock(&j->mu);
    pthread_cond_broadcast(&j->cv);
}

/* Metrics and one log line per generation (jobs with metrics are the
 * server's; tests run jobs without).  how: a finish reason's name,
 * "cancelled" or "failed". */
static void record(sp_job *j, const char *how, const sp_spec_stats *stats) {
    if (!j->mx) return;
    const uint64_t now = sp_now_ns();
    const sp_spec_stats st = stats ? *stats : (sp_spec_stats){ 0 };
    const bool cancelled = !strcmp(how, "cancelled");
    sp_metrics_generation(j->mx, j->method, &st, j->t_start ? j->t_start - j->t_submit : now - j->t_submit,
                          j->t_first ? j->t_first - j->t_submit : 0, now - j->t_submit, cancelled);
    sp_info("specula serve: %s: prompt %d, completion %lld tokens, %.2f s (first token %.2f s), spec %s: "
            "drafted %lld, accepted %lld\n", how, j->n_prompt, (long long)st.emitted,
            sp_ns_to_s(now - j->t_submit), j->t_first ? sp_ns_to_s(j->t_first - j->t_submit) : 0.0,
            j->method, (long long)st.drafted, (long long)st.accepted);
}

void sp_job_finish(sp_job *j, sp_finish f, const sp_spec_stats *stats) {
    assert(j->started && f != SP_FINISH_NONE && f != SP_FINISH_ERROR);
    char buf[64];
    const size_t n = sp_detok_flush(&j->detok, buf, sizeof buf);
    sp_stop_push(&j->stop, buf, n);
    j->pushed += n;
    release_text(j, true);
    record(j, sp_finish_name(f), stats);
    set_end(j, SP_JOB_FINISHED, f, NULL, stats);
}

void sp_job_end_with(sp_job *j, sp_job_end end, const sp_api_err *err, const sp_spec_stats *stats) {
    record(j, end == SP_JOB_CANCELLED ? "cancelled" : "failed", stats);
    set_end(j, end, SP_FINISH_NONE, err, stats);
}
