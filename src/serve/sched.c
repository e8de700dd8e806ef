/*
 * The scheduler: jobs over the batch engine (sp_ctx, src/engine).
 *
 * One thread owns the context.  Between steps it drops cancelled jobs and
 * admits queued ones into free slots; each step is one sp_ctx_step (every
 * running sequence's rows in ONE batched forward: decoding windows first,
 * then prompt chunks), after which jobs whose sequence ended are finished
 * and their slots freed.  The context guarantees that every request
 * produces exactly what it would alone.
 */
#include "serve/internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef struct sp_sched_opts {
    int parallel, queue_max;
} sp_sched_opts;

struct sp_sched {
    sp_ctx *ctx;                     /* borrowed; the scheduler thread alone uses it */
    sp_metrics *mx;
    sp_sched_opts o;                 /* parallel = the context's slots */
    sp_job **slots;                  /* (parallel) the job in context slot i, or NULL */
    sp_job **queue;                  /* (queue_max) ring, under mu */
    int q_head, q_len;
    int running;                     /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;                   /* under mu */
    uint64_t deadline;               /* running jobs are cancelled after it */
    bool started, joined;
    pthread_t thr;
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
            sp_job_end_with(j, SP_JOB_CANCELLED, NULL, NULL);
            sp_job_unref(j);
        } else {
            s->queue[(s->q_head + w++) % s->o.queue_max] = j;
        }
    }
    s->q_len = w;
}

/* The job of slot i leaves the context (mu held). */
static void free_slot(sp_sched *s, int i) {
    assert(s->slots[i] && s->running > 0);
    sp_ctx_remove(s->ctx, i);
    sp_job_unref(s->slots[i]);
    s->slots[i] = NULL;
    s->running--;
}

static const sp_spec_stats *stats_of(const sp_sched *s, int i) { return sp_ctx_seq_stats(s->ctx, i); }

/* Ends running jobs whose client left (or, past the shutdown deadline,
 * every running job). */
static void reap_running(sp_sched *s) {
    const bool late = s->stopping && sp_now_ns() >= s->deadline;
    for (int i = 0; i < s->o.parallel; i++) {
        sp_job *j = s->slots[i];
        if (!j) continue;
        if (sp_job_cancelled(j)) {
            sp_job_end_with(j, SP_JOB_CANCELLED, NULL, stats_of(s, i));
            free_slot(s, i);
        } else if (late) {
            sp_api_err e = err_503("The server is shutting down; the request was cancelled.");
            sp_job_end_with(j, SP_JOB_FAILED, &e, stats_of(s, i));
            free_slot(s, i);
        }
    }
}

/* Moves queued jobs into free slots (FIFO). */
static void admit(sp_sched *s) {
    while (s->running < s->o.parallel && s->q_len > 0) {
        sp_job *j = queue_pop(s);
        sp_err e;
        const int id = sp_job_start(j, s->ctx, &e);
        if (id < 0) {
            sp_api_err ae;
            sp_api_fail(&ae, 500, "server_error", NULL, NULL, "%s", e.msg);
            sp_job_end_with(j, SP_JOB_FAILED, &ae, NULL);
            sp_job_unref(j);
            continue;
        }
        assert(!s->slots[id]);
        s->slots[id] = j;
        s->running++;
    }
}

static void fail_queue(sp_sched *s) {
    while (s->q_len > 0) {
        sp_job *j = queue_pop(s);
        sp_api_err e = err_503("The server is shutting down.");
        sp_job_end_with(j, SP_JOB_FAILED, &e, NULL);
        sp_job_unref(j);
    }
}

/* ----------------------------------------------------------------------------
 * One step (scheduler thread, mu not held: slots change only here)
 * ------------------------------------------------------------------------- */

/* Ends slot i's job by how its sequence ended. */
static void end_slot(sp_sched *s, int i, sp_finish f) {
    sp_job *j = s->slots[i];
    if (f == SP_FINISH_ERROR) {
        /* A grammar that allows no token is the request's constraint, not a
         * server fault: a 400 (which clients do not retry, unlike a 500). */
        const char *msg = sp_ctx_seq_error(s->ctx, i);
        const bool dead_end = sp_job_constrained(j) && strstr(msg, "grammar");
        sp_api_err e;
        if (dead_end)
            sp_api_fail(&e, 400, "invalid_request_error", "grammar_dead_end", NULL,
                        "The output's grammar allows no further token (%s).", msg);
        else
            sp_api_fail(&e, 500, "server_error", NULL, NULL, "%s", msg);
        sp_job_end_with(j, SP_JOB_FAILED, &e, stats_of(s, i));
    } else {
        sp_job_finish(j, f, stats_of(s, i));
    }
    pthread_mutex_lock(&s->mu);
    free_slot(s, i);
    pthread_mutex_unlock(&s->mu);
}

static void step(sp_sched *s) {
    /* every running job has its sequence in the context, and only those */
    assert(sp_ctx_n_seqs(s->ctx) == s->running);
    sp_ctx_step(s->ctx);
    const sp_ctx_pass pass = sp_ctx_last_pass(s->ctx);
    if (s->mx && pass.n_seqs > 0) sp_metrics_step(s->mx, pass.n_seqs, pass.n_rows, pass.ns);
    /* finished sequences (including those the plan found at the context
     * limit) leave between steps */
    for (int i = 0; i < s->o.parallel; i++) {
        if (!s->slots[i]) continue;
        const sp_finish f = sp_ctx_seq_finish(s->ctx, i);
        if (f != SP_FINISH_NONE) end_slot(s, i, f);
    }
    if (s->mx && sp_ctx_cache(s->ctx)) {
        const sp_pcache_stats cs = sp_pcache_get_stats(sp_ctx_cache(s->ctx));
        sp_metrics_cache(s->mx, &cs);
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

sp_sched *sp_sched_create(sp_ctx *ctx, int queue_max, sp_metrics *mx) {
    sp_sched *s = sp_xcalloc(1, sizeof *s);
    s->ctx = ctx;
    s->mx = mx;
    s->o = (sp_sched_opts){ .parallel = sp_ctx_n_slots(ctx), .queue_max = queue_max < 1 ? 1 : queue_max };
    s->slots = sp_xcalloc((size_t)s->o.parallel, sizeof *s->slots);
    s->queue = sp_xcalloc((size_t)s->o.queue_max, sizeof *s->queue);
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
    for (int i = 0; i < s->o.parallel; i++)
        if (s->slots[i]) free_slot(s, i);
    while (s->q_len > 0) sp_job_unref(queue_pop(s));
    free(s->slots);
    free(s->queue);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
