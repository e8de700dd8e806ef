/* Thread pool with a spin-then-sleep handoff.
 *
 * A forward pass issues a few hundred small operations; each sp_pool_run is
 * a generation bump that workers watch.  Workers spin on the counter for a
 * short while (the next op usually arrives within microseconds) and only
 * then sleep on a condition variable, so per-op cost stays low without
 * burning a core while the engine is idle.
 *
 * Every wait (a worker for the next op, the caller for the workers) spins
 * with a pause hint first and then calls sched_yield between checks: when
 * the machine is oversubscribed (other processes, more threads than
 * cores) the thread being waited for may be descheduled, and a pure spin
 * would burn the time slice it needs.
 */
#include "base/base.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SP_POOL_SPIN 200000      /* checks before a worker sleeps */
#define SP_POOL_PURE_SPIN 1000   /* checks before a waiter starts yielding */

/* One wait step: a CPU pause hint for the first checks, then yield. */
void sp_pool_relax(int spins) {
    if (spins < SP_POOL_PURE_SPIN) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    } else {
        sched_yield();
    }
}

struct sp_pool {
    int n;                       /* threads including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t gen;        /* bumped once per job */
    _Atomic int pending;         /* workers still running the current job */
    _Atomic int stop;
    sp_pool_fn fn;
    void *ctx;
};

typedef struct { sp_pool *pool; int ith; } sp_worker_arg;

static void *sp_worker(void *p) {
    sp_worker_arg arg = *(sp_worker_arg *)p;
    free(p);
    sp_pool *pool = arg.pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen &&
               !atomic_load(&pool->stop) && spins < SP_POOL_SPIN)
            sp_pool_relax(spins++);
        if (g == seen && !atomic_load(&pool->stop)) {
            pthread_mutex_lock(&pool->mu);
            while ((g = atomic_load(&pool->gen)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = g;
        pool->fn(pool->ctx, arg.ith, pool->n);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
    }
}

sp_pool *sp_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    sp_pool *pool = sp_xcalloc(1, sizeof *pool);
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->threads = sp_xcalloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        sp_worker_arg *arg = sp_xmalloc(sizeof *arg);
        arg->pool = pool;
        arg->ith = i;
        if (pthread_create(&pool->threads[i], NULL, sp_worker, arg) != 0) {
            fprintf(stderr, "specula: cannot create thread %d\n", i);
            abort();
        }
    }
    return pool;
}

void sp_pool_free(sp_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool->threads);
    free(pool);
}

int sp_pool_size(const sp_pool *pool) { return pool ? pool->n : 1; }

void sp_pool_run(sp_pool *pool, sp_pool_fn fn, void *ctx) {
    if (!pool || pool->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store(&pool->pending, pool->n - 1);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add_explicit(&pool->gen, 1, memory_order_release);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    fn(ctx, 0, pool->n);
    for (int spins = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; spins++)
        sp_pool_relax(spins);
}

int sp_physical_cores(void) {
    /* Count distinct (physical id, core id) pairs in /proc/cpuinfo; fall back
     * to the online CPU count. */
    FILE *f = fopen("/proc/cpuinfo", "r");
    int n = 0;
    if (f) {
        char line[256];
        int phys = -1, core = -1;
        int seen[1024][2];
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "physical id : %d", &phys) == 1) continue;
            if (sscanf(line, "core id : %d", &core) == 1) {
                int dup = 0;
                for (int i = 0; i < n; i++)
                    if (seen[i][0] == phys && seen[i][1] == core) dup = 1;
                if (!dup && n < 1024) { seen[n][0] = phys; seen[n][1] = core; n++; }
            }
        }
        fclose(f);
    }
    if (n < 1) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n;
}
