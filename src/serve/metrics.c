/*
 * Server metrics in the Prometheus text exposition format (version 0.0.4):
 * HTTP requests by endpoint and status, tokens, queue and running gauges,
 * batch sizes per step, speculation per method (drafted / accepted, per
 * draft position) and latency histograms.  One mutex guards everything;
 * updates are a few additions.
 */
#include "serve/internal.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MX_MAX_BUCKETS 16
#define MX_MAX_HTTP 48
#define MX_MAX_METHODS 8

typedef struct mx_hist {
    const double *le;                /* upper bounds (static) */
    int n;
    uint64_t counts[MX_MAX_BUCKETS]; /* per bucket, not cumulative */
    uint64_t total;
    double sum;
} mx_hist;

typedef struct mx_method {
    char name[32];
    int64_t requests, rounds, spec_rounds, gated_rounds, drafted, accepted, emitted;
    int64_t pos_drafted[SP_STAT_POSITIONS], pos_accepted[SP_STAT_POSITIONS];
} mx_method;

static const double LAT_S[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120 };
static const double ITL_S[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1 };
static const double SEQS[] = { 1, 2, 4, 8, 16, 32, 64 };
static const double ROWS[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024 };
#define NB(a) ((int)(sizeof a / sizeof *a))

struct sp_metrics {
    pthread_mutex_t mu;
    struct { char endpoint[40]; int status; uint64_t n; } http[MX_MAX_HTTP];
    int n_http;
    mx_method methods[MX_MAX_METHODS];
    int n_methods;
    int64_t prompt_tokens, cached_tokens, gen_tokens, finished, cancelled, steps;
    bool have_cache;
    sp_pcache_stats cache;
    int queued, running;
    mx_hist h_queue, h_ttft, h_e2e, h_itl, h_step, h_seqs, h_rows;
};

static void hist_init(mx_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->le = le;
    h->n = n;
}

static void hist_add(mx_hist *h, double x) {
    int b = 0;
    while (b < h->n && x > h->le[b]) b++;
    if (b < h->n) h->counts[b]++;
    h->total++;
    h->sum += x;
}

sp_metrics *sp_metrics_create(void) {
    sp_metrics *mx = sp_xcalloc(1, sizeof *mx);
    pthread_mutex_init(&mx->mu, NULL);
    hist_init(&mx->h_queue, LAT_S, NB(LAT_S));
    hist_init(&mx->h_ttft, LAT_S, NB(LAT_S));
    hist_init(&mx->h_e2e, LAT_S, NB(LAT_S));
    hist_init(&mx->h_itl, ITL_S, NB(ITL_S));
    hist_init(&mx->h_step, LAT_S, NB(LAT_S));
    hist_init(&mx->h_seqs, SEQS, NB(SEQS));
    hist_init(&mx->h_rows, ROWS, NB(ROWS));
    return mx;
}

void sp_metrics_free(sp_metrics *mx) {
    if (!mx) return;
    pthread_mutex_destroy(&mx->mu);
    free(mx);
}

void sp_metrics_http(sp_metrics *mx, const char *endpoint, int status) {
    pthread_mutex_lock(&mx->mu);
    int i = 0;
    while (i < mx->n_http && (mx->http[i].status != status || strcmp(mx->http[i].endpoint, endpoint))) i++;
    if (i == mx->n_http && mx->n_http < MX_MAX_HTTP) {
        snprintf(mx->http[i].endpoint, sizeof mx->http[i].endpoint, "%s", endpoint);
        mx->http[i].status = status;
        mx->n_http++;
    }
    if (i < mx->n_http) mx->http[i].n++;
    pthread_mutex_unlock(&mx->mu);
}

void sp_metrics_step(sp_metrics *mx, int n_seqs, int n_rows, uint64_t ns) {
    pthread_mutex_lock(&mx->mu);
    mx->steps++;
    hist_add(&mx->h_seqs, n_seqs);
    hist_add(&mx->h_rows, n_rows);
    hist_add(&mx->h_step, sp_ns_to_s(ns));
    pthread_mutex_unlock(&mx->mu);
}

void sp_metrics_cache(sp_metrics *mx, const sp_pcache_stats *st) {
    pthread_mutex_lock(&mx->mu);
    mx->have_cache = true;
    mx->cache = *st;
    pthread_mutex_unlock(&mx->mu);
}

void sp_metrics_load(sp_metrics *mx, int queued, int running) {
    pthread_mutex_lock(&mx->mu);
    mx->queued = queued;
    mx->running = running;
    pthread_mutex_unlock(&mx->mu);
}

static mx_method *method_of(sp_metrics *mx, const char *name) {
    for (int i = 0; i < mx->n_methods; i++)
        if (!strcmp(mx->methods[i].name, name)) return &mx->methods[i];
    if (mx->n_methods == MX_MAX_METHODS) return NULL;
    mx_method *m = &mx->methods[mx->n_methods++];
    snprintf(m->name, sizeof m->name, "%s", name);
    return m;
}

void sp_metrics_generation(sp_metrics *mx, const char *method, const sp_spec_stats *st,
                           uint64_t queue_ns, uint64_t ttft_ns, uint64_t total_ns,
                           bool cancelled) {
    pthread_mutex_lock(&mx->mu);
    if (cancelled) mx->cancelled++;
    else mx->finished++;
    mx->prompt_tokens += st->n_prompt;
    mx->cached_tokens += st->n_cached;
    mx->gen_tokens += st->emitted;
    mx_method *m = method_of(mx, method);
    if (m) {
        m->requests++;
        m->rounds += st->rounds;
        m->spec_rounds += st->spec_rounds;
        m->gated_rounds += st->gated_rounds;
        m->drafted += st->drafted;
        m->accepted += st->accepted;
        m->emitted += st->emitted;
        for (int i = 0; i < SP_STAT_POSITIONS; i++) {
            m->pos_drafted[i] += st->pos_drafted[i];
            m->pos_accepted[i] += st->pos_accepted[i];
        }
    }
    hist_add(&mx->h_queue, sp_ns_to_s(queue_ns));
    if (ttft_ns) hist_add(&mx->h_ttft, sp_ns_to_s(ttft_ns));
    if (!cancelled) hist_add(&mx->h_e2e, sp_ns_to_s(total_ns));
    pthread_mutex_unlock(&mx->mu);
}

void sp_metrics_itl(sp_metrics *mx, uint64_t ns) {
    pthread_mutex_lock(&mx->mu);
    hist_add(&mx->h_itl, sp_ns_to_s(ns));
    pthread_mutex_unlock(&mx->mu);
}

/* ----------------------------------------------------------------------------
 * Exposition
 * ------------------------------------------------------------------------- */

typedef struct mx_buf {
    char *s;
    size_t n, cap;
} mx_buf;

static void put(mx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(mx_buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        assert(k >= 0);   /* our formats are valid */
        if ((size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
        SP_VEC_GROW(b->s, b->cap, b->n + (size_t)k + 1);
    }
}

static void head(mx_buf *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist_put(mx_buf *b, const char *name, const char *help, const mx_hist *h) {
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
        (unsigned long long)h->total, name, h->sum, name, (unsigned long long)h->total);
}

static void put_methods(mx_buf *b, const sp_metrics *mx) {
    static const char *const names[] = { "specula_spec_requests_total", "specula_spec_rounds_total",
                                         "specula_spec_drafted_tokens_total",
                                         "specula_spec_accepted_tokens_total", "specula_spec_gated_rounds_total" };
    static const char *const helps[] = { "Generations finished, by speculation method.",
                                         "Verification rounds that carried draft tokens.",
                                         "Draft tokens verified by the target.",
                                         "Draft tokens the target accepted.",
                                         "Rounds run plain because steps with drafts measured slower." };
    for (int k = 0; k < 5; k++) {
        head(b, names[k], "counter", helps[k]);
        for (int i = 0; i < mx->n_methods; i++) {
            const mx_method *m = &mx->methods[i];
            const int64_t v[5] = { m->requests, m->spec_rounds, m->drafted, m->accepted, m->gated_rounds };
            put(b, "%s{method=\"%s\"} %lld\n", names[k], m->name, (long long)v[k]);
        }
    }
    head(b, "specula_spec_position_drafted_total", "counter",
         "Rounds with a draft token at this position (0 = first draft token).");
    for (int i = 0; i < mx->n_methods; i++)
        for (int p = 0; p < SP_STAT_POSITIONS && mx->methods[i].pos_drafted[p]; p++)
            put(b, "specula_spec_position_drafted_total{method=\"%s\",position=\"%d\"} %lld\n",
                mx->methods[i].name, p, (long long)mx->methods[i].pos_drafted[p]);
    head(b, "specula_spec_position_accepted_total", "counter",
         "Rounds whose draft token at this position was accepted.");
    for (int i = 0; i < mx->n_methods; i++)
        for (int p = 0; p < SP_STAT_POSITIONS && mx->methods[i].pos_drafted[p]; p++)
            put(b, "specula_spec_position_accepted_total{method=\"%s\",position=\"%d\"} %lld\n",
                mx->methods[i].name, p, (long long)mx->methods[i].pos_accepted[p]);
}

static void put_cache(mx_buf *b, const sp_pcache_stats *c) {
    static const struct { const char *name, *type, *help; } m[] = {
        { "specula_prefix_cache_lookups_total", "counter", "Requests that looked up the prefix cache." },
        { "specula_prefix_cache_hits_total", "counter", "Lookups that found a cached prefix." },
        { "specula_prefix_cache_hit_tokens_total", "counter", "Prompt tokens loaded from the prefix cache." },
        { "specula_prefix_cache_stored_tokens_total", "counter", "Tokens whose KV rows entered the cache." },
        { "specula_prefix_cache_evictions_total", "counter", "Cache entries evicted (least recently used)." },
        { "specula_prefix_cache_evicted_tokens_total", "counter", "Tokens whose rows were evicted." },
        { "specula_prefix_cache_checkpoint_hits_total", "counter", "Drafter states resumed from the cache." },
        { "specula_prefix_cache_bytes", "gauge", "Bytes the prefix cache holds." },
        { "specula_prefix_cache_budget_bytes", "gauge", "The prefix cache's budget (--cache-ram)." },
        { "specula_prefix_cache_entries", "gauge", "Edges of the cache's radix tree." },
    };
    const long long v[] = { c->lookups, c->hits, c->hit_tokens, c->stored_tokens, c->evictions,
                            c->evicted_tokens, c->ckpt_hits, (long long)c->bytes, (long long)c->budget,
                            c->nodes };
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
        head(b, m[i].name, m[i].type, m[i].help);
        put(b, "%s %lld\n", m[i].name, v[i]);
    }
}

char *sp_metrics_render(sp_metrics *mx) {
    mx_buf b = { sp_xmalloc(8192), 0, 8192 };
    pthread_mutex_lock(&mx->mu);
    head(&b, "specula_http_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
    for (int i = 0; i < mx->n_http; i++)
        put(&b, "specula_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", mx->http[i].endpoint,
            mx->http[i].status, (unsigned long long)mx->http[i].n);
    head(&b, "specula_requests_finished_total", "counter", "Generations that ran to their end.");
    put(&b, "specula_requests_finished_total %lld\n", (long long)mx->finished);
    head(&b, "specula_requests_cancelled_total", "counter", "Generations cancelled (client disconnected).");
    put(&b, "specula_requests_cancelled_total %lld\n", (long long)mx->cancelled);
    head(&b, "specula_prompt_tokens_total", "counter", "Prompt tokens prefilled.");
    put(&b, "specula_prompt_tokens_total %lld\n", (long long)mx->prompt_tokens);
    head(&b, "specula_prompt_tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache.");
    put(&b, "specula_prompt_tokens_cached_total %lld\n", (long long)mx->cached_tokens);
    if (mx->have_cache) put_cache(&b, &mx->cache);
    head(&b, "specula_generation_tokens_total", "counter", "Tokens generated.");
    put(&b, "specula_generation_tokens_total %lld\n", (long long)mx->gen_tokens);
    head(&b, "specula_queue_length", "gauge", "Requests waiting for a slot.");
    put(&b, "specula_queue_length %d\n", mx->queued);
    head(&b, "specula_requests_running", "gauge", "Requests in a slot (prefilling or decoding).");
    put(&b, "specula_requests_running %d\n", mx->running);
    head(&b, "specula_steps_total", "counter", "Batched forward passes.");
    put(&b, "specula_steps_total %lld\n", (long long)mx->steps);
    hist_put(&b, "specula_batch_sequences", "Sequences per batched forward pass.", &mx->h_seqs);
    hist_put(&b, "specula_batch_rows", "Rows (tokens) per batched forward pass.", &mx->h_rows);
    hist_put(&b, "specula_step_seconds", "Duration of a batched forward pass.", &mx->h_step);
    put_methods(&b, mx);
    hist_put(&b, "specula_queue_seconds", "Time from arrival to a slot.", &mx->h_queue);
    hist_put(&b, "specula_time_to_first_token_seconds", "Time from arrival to the first token.", &mx->h_ttft);
    hist_put(&b, "specula_inter_token_seconds", "Time between consecutive tokens of a request.", &mx->h_itl);
    hist_put(&b, "specula_request_seconds", "Time from arrival to the last token.", &mx->h_e2e);
    pthread_mutex_unlock(&mx->mu);
    return b.s;
}
