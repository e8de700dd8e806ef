/*
 * The scheduler: continuous batching with speculation in every row.
 *
 * One thread owns the model's workspace and the slots (a KV cache each).
 * Between steps it drops cancelled jobs and admits queued ones into free
 * slots; a step plans every running sequence, runs all planned rows as ONE
 * batched forward, and finishes each sequence:
 *
 *   rows = [verification windows of decoding sequences]     (never cut)
 *        + [prompt chunks of prefilling sequences, oldest first, within
 *           what is left of the row budget, at least a quarter of it]
 *
 * so a long prompt joins over several steps without starving the decoding
 * rows.  Sequences never share a cache, sampler or draft, and each row's
 * arithmetic is independent of the others in the pass, so every request
 * produces exactly what it would alone.
 */
#include "serve/internal.h"

#include <stdlib.h>
#include <string.h>

struct sp_sched {
    const sp_model *m;
    sp_workspace *ws;
    sp_metrics *mx;
    sp_sched_opts o;
    sp_kv **kvs;                     /* (parallel) owned */
    sp_job **slots;                  /* (parallel) running job or NULL; scheduler thread writes */
    uint64_t *admitted;              /* (parallel) admission order, for prefill fairness */
    uint64_t n_admitted;
    sp_job **queue;                  /* (queue_max) ring, under mu */
    int q_head, q_len;
    int running;                     /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;                   /* under mu */
    uint64_t deadline;               /* running jobs are cancelled after it */
    bool started, joined;
    pthread_t thr;
    sp_fwd_seq *fwds;                /* (parallel) step scratch */
    int *fwd_slot;                   /* (parallel) */
    int *order;                      /* (parallel) */
};

static sp_api_err err_503(const char *msg) {
    sp_api_err e;
    sp_api_fail(&e, 503, "server_error", "server_overloaded", NULL, "%s", msg);
    return e;
}

/* ----------------------------------------------------------------------------
 * Between steps (mu held)
 * ------------------------------------------------------------------------- */

static sp_job *queue_pop(sp_sched *s) {
    sp_job *j = s->queue[s->q_head];
    s->q_head = (s->q_head + 1) % s->o.queue_max;
    s->q_len--;
    return j;
}

/* Drops cancelled jobs from the queue, keeping the order of the rest. */
static void reap_queue(sp_sched *s) {
    int n = s->q_len, w = 0;
    for (int i = 0; i < n; i++) {
        sp_job *j = s->queue[(s->q_head + i) % s->o.queue_max];
        if (sp_job_cancelled(j)) {
            sp_job_end_with(j, SP_JOB_CANCELLED, NULL);
            sp_job_unref(j);
        } else {
            s->queue[(s->q_head + w++) % s->o.queue_max] = j;
        }
    }
    s->q_len = w;
}

static void free_slot(sp_sched *s, int i) {
    sp_job_unref(s->slots[i]);
    s->slots[i] = NULL;
    s->running--;
}

/* Ends running jobs whose client left (or, past the shutdown deadline,
 * every running job). */
static void reap_running(sp_sched *s) {
    const bool late = s->stopping && sp_now_ns() >= s->deadline;
    for (int i = 0; i < s->o.parallel; i++) {
        sp_job *j = s->slots[i];
        if (!j) continue;
        if (sp_job_cancelled(j)) {
            sp_job_end_with(j, SP_JOB_CANCELLED, NULL);
            free_slot(s, i);
        } else if (late) {
            sp_api_err e = err_503("The server is shutting down; the request was cancelled.");
            sp_job_end_with(j, SP_JOB_FAILED, &e);
            free_slot(s, i);
        }
    }
}

/* Moves queued jobs into free slots (FIFO). */
static void admit(sp_sched *s) {
    for (int i = 0; i < s->o.parallel && s->q_len > 0; i++) {
        if (s->slots[i]) continue;
        sp_job *j = queue_pop(s);
        sp_err e;
        if (sp_job_start(j, s->kvs[i], &e)) {
            sp_api_err ae;
            sp_api_fail(&ae, 500, "server_error", NULL, NULL, "%s", e.msg);
            sp_job_end_with(j, SP_JOB_FAILED, &ae);
            sp_job_unref(j);
            i--;                     /* the slot is still free */
            continue;
        }
        s->slots[i] = j;
        s->admitted[i] = s->n_admitted++;
        s->running++;
    }
}

static void fail_queue(sp_sched *s) {
    while (s->q_len > 0) {
        sp_job *j = queue_pop(s);
        sp_api_err e = err_503("The server is shutting down.");
        sp_job_end_with(j, SP_JOB_FAILED, &e);
        sp_job_unref(j);
    }
}

/* ----------------------------------------------------------------------------
 * One step (scheduler thread, mu not held: slots change only here)
 * ------------------------------------------------------------------------- */

static void fail_slot(sp_sched *s, int i, int status, const char *msg) {
    sp_api_err e;
    sp_api_fail(&e, status, "server_error", NULL, NULL, "%s", msg);
    sp_job_end_with(s->slots[i], SP_JOB_FAILED, &e);
    pthread_mutex_lock(&s->mu);
    free_slot(s, i);
    pthread_mutex_unlock(&s->mu);
}

/* Plans slot i with at most max_rows rows (0 = all) into a pass that
 * already holds `rows` rows expected to emit *tokens tokens; adds it to the
 * pass if it has rows (and its expected tokens to *tokens).  Returns the
 * rows added. */
static int plan_slot(sp_sched *s, int i, int max_rows, int rows, double *tokens, int *n) {
    sp_err e;
    sp_fwd_seq *f = &s->fwds[*n];
    sp_seq *q = sp_job_seq(s->slots[i]);
    if (sp_seq_plan_in(q, max_rows, rows, *tokens, f, &e)) {
        fail_slot(s, i, 500, e.msg);
        return 0;
    }
    if (f->n == 0) return 0;
    s->fwd_slot[(*n)++] = i;
    *tokens += sp_seq_planned_tokens(q);
    return f->n;
}

/* Slot indices of prefilling sequences, oldest admission first. */
static int prefill_order(const sp_sched *s, int *order) {
    int n = 0;
    for (int i = 0; i < s->o.parallel; i++) {
        if (!s->slots[i] || !sp_seq_prefilling(sp_job_seq(s->slots[i]))) continue;
        int k = n++;
        while (k > 0 && s->admitted[order[k - 1]] > s->admitted[i]) { order[k] = order[k - 1]; k--; }
        order[k] = i;
    }
    return n;
}

static void step(sp_sched *s) {
    int n = 0, rows = 0;
    double tokens = 0.0;
    /* decoding rows first: each sequence's draft length is chosen for the
     * pass as planned so far (more rows make extra draft rows dearer) */
    for (int i = 0; i < s->o.parallel; i++)
        if (s->slots[i] && !sp_seq_prefilling(sp_job_seq(s->slots[i])))
            rows += plan_slot(s, i, 0, rows, &tokens, &n);
    int budget = s->o.batch_rows - rows;
    if (budget < s->o.batch_rows / 4) budget = s->o.batch_rows / 4 > 0 ? s->o.batch_rows / 4 : 1;
    const int n_pre = prefill_order(s, s->order);
    for (int k = 0; k < n_pre && budget > 0; k++) {
        const int got = plan_slot(s, s->order[k], budget, rows, &tokens, &n);
        budget -= got;
        rows += got;
    }
    if (n > 0) {
        sp_err e;
        const uint64_t t0 = sp_now_ns();
        const int rc = sp_model_forward_batch(s->m, s->ws, s->fwds, n, &e);
        const uint64_t ns = sp_now_ns() - t0;
        if (s->mx) sp_metrics_step(s->mx, n, rows, ns);
        for (int k = 0; k < n; k++) {
            const int i = s->fwd_slot[k];
            if (rc) fail_slot(s, i, 500, e.msg);
            else if (sp_seq_finish(sp_job_seq(s->slots[i]), ns, &e)) fail_slot(s, i, 500, e.msg);
        }
    }
    /* finished sequences (including those the plan found at the context
     * limit) leave between steps */
    for (int i = 0; i < s->o.parallel; i++) {
        if (!s->slots[i] || !sp_job_after_step(s->slots[i])) continue;
        pthread_mutex_lock(&s->mu);
        free_slot(s, i);
        pthread_mutex_unlock(&s->mu);
    }
}

static void *sched_main(void *arg) {
    sp_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        for (;;) {
            reap_queue(s);
            reap_running(s);
            if (s->stopping) fail_queue(s);
            else admit(s);
            if (s->mx) sp_metrics_load(s->mx, s->q_len, s->running);
            if (s->running > 0 || s->stopping) break;
            pthread_cond_wait(&s->cv, &s->mu);
        }
        const bool done = s->stopping && s->running == 0;
        pthread_mutex_unlock(&s->mu);
        if (done) return NULL;
        step(s);
    }
}

/* ----------------------------------------------------------------------------
 * Public side
 * ------------------------------------------------------------------------- */

sp_sched *sp_sched_create(const sp_model *m, sp_workspace *ws, const sp_sched_opts *o,
                          sp_metrics *mx) {
    sp_sched *s = sp_xcalloc(1, sizeof *s);
    s->m = m;
    s->ws = ws;
    s->mx = mx;
    s->o = *o;
    if (s->o.queue_max < 1) s->o.queue_max = 1;
    s->kvs = sp_xcalloc((size_t)o->parallel, sizeof *s->kvs);
    for (int i = 0; i < o->parallel; i++) s->kvs[i] = sp_kv_create(m, o->n_ctx);
    s->slots = sp_xcalloc((size_t)o->parallel, sizeof *s->slots);
    s->admitted = sp_xcalloc((size_t)o->parallel, sizeof *s->admitted);
    s->queue = sp_xcalloc((size_t)s->o.queue_max, sizeof *s->queue);
    s->fwds = sp_xcalloc((size_t)o->parallel, sizeof *s->fwds);
    s->fwd_slot = sp_xcalloc((size_t)o->parallel, sizeof *s->fwd_slot);
    s->order = sp_xcalloc((size_t)o->parallel, sizeof *s->order);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->started = pthread_create(&s->thr, NULL, sched_main, s) == 0;
    if (!s->started) {
        sp_sched_free(s);
        return NULL;
    }
    return s;
}

int sp_sched_submit(sp_sched *s, sp_job *j, sp_api_err *err) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->stopping) {
        *err = err_503("The server is shutting down.");
        rc = -1;
    } else if (s->q_len == s->o.queue_max) {
        *err = err_503("The server is overloaded: too many requests are waiting. Retry later.");
        rc = -1;
    } else {
        sp_job_ref(j);
        sp_job_set_t_submit(j, sp_now_ns());
        s->queue[(s->q_head + s->q_len++) % s->o.queue_max] = j;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void sp_sched_kick(sp_sched *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sp_sched_load(sp_sched *s, int *queued, int *running) {
    pthread_mutex_lock(&s->mu);
    *queued = s->q_len;
    *running = s->running;
    pthread_mutex_unlock(&s->mu);
}

void sp_sched_stop(sp_sched *s, uint64_t grace_ns) {
    if (!s->started || s->joined) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    s->deadline = sp_now_ns() + grace_ns;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thr, NULL);
    s->joined = true;
}

void sp_sched_free(sp_sched *s) {
    if (!s) return;
    sp_sched_stop(s, 0);
    for (int i = 0; i < s->o.parallel; i++) {
        if (s->slots[i]) sp_job_unref(s->slots[i]);
        sp_kv_free(s->kvs[i]);
    }
    while (s->q_len > 0) sp_job_unref(queue_pop(s));
    free(s->kvs);
    free(s->slots);
    free(s->admitted);
    free(s->queue);
    free(s->fwds);
    free(s->fwd_slot);
    free(s->order);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
