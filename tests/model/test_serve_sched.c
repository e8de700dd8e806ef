/* The server's scheduler on the real models: several jobs of different
 * lengths, sampling settings and speculation methods, run as rows of
 * shared batched passes with chunked prefill, each produce exactly the
 * text (and logprobs) of the same generation run alone in a context of its
 * own;
 * a cancelled job frees its slot; stop strings cut the text. */
#include "spec_fixture.h"
#include "serve/internal.h"

#include <math.h>

/* Per model group: the lookup drafters the jobs may name (suffix keeps a
 * trie of earlier outputs, so each model gets its own). */
static sp_drafter *g_ngram, *g_suffix;

static int setup_with(void **state, int (*fx)(void **)) {
    if (fx(state)) return -1;
    sp_err err;
    g_ngram = sp_drafter_create("ngram", &(sp_drafter_opts){ 0 }, &err);
    g_suffix = sp_drafter_create("suffix", &(sp_drafter_opts){ 0 }, &err);
    return g_ngram && g_suffix ? 0 : -1;
}
static int setup_smol(void **s) { return setup_with(s, fx_setup_smol); }
static int setup_gemma(void **s) { return setup_with(s, fx_setup_gemma); }
static int teardown(void **state) {
    sp_drafter_free(g_ngram);
    sp_drafter_free(g_suffix);
    g_ngram = g_suffix = NULL;
    return fx_teardown(state);
}

/* One generation as the server would run it. */
typedef struct spec_case {
    const char *prompt;
    float temperature;
    uint64_t seed;
    int max_tokens;
    const char *method;              /* "none", "ngram", "suffix" */
    int draft_max;
    bool ignore_eos;
} spec_case;

static sp_drafter *drafter_of(fixture *f, const char *method) {
    return !strcmp(method, "ngram") ? g_ngram : !strcmp(method, "suffix") ? g_suffix : NULL;
}

static sp_sampler_params params_of(const spec_case *c) {
    sp_sampler_params p = sp_sampler_defaults();
    p.temperature = c->temperature;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.seed = c->seed;
    p.presence_penalty = 0.3f;       /* penalties over generated tokens only, as the server */
    p.repeat_last_n = -1;
    return p;
}

/* ---- the solo reference: alone in a one-slot context --------------------- */

typedef struct solo_out {
    const sp_tokenizer *tok;
    sp_detok d;
    char text[8192];
    size_t n;
} solo_out;

static sp_emit_result solo_emit(void *ud, int32_t t, bool drafted, const float *logits) {
    (void)drafted; (void)logits;
    solo_out *o = ud;
    if (sp_tokenizer_is_eog(o->tok, t)) return SP_EMIT_STOP;
    char buf[1024];
    size_t k = sp_detok_push(&o->d, o->tok, t, false, buf, sizeof buf);
    assert_true(o->n + k < sizeof o->text);
    memcpy(o->text + o->n, buf, k);
    o->n += k;
    return SP_EMIT_CONTINUE;
}

static void solo(fixture *f, const spec_case *c, const sp_tokens *prompt, solo_out *o) {
    memset(o, 0, sizeof *o);
    o->tok = f->tok;
    sp_err err;
    sp_ctx *ctx = fx_ctx(f, 1, 1024);
    sp_seq_params sq = sp_seq_default_params();
    sq.prompt = prompt->ids;
    sq.n_prompt = prompt->n;
    sq.max_tokens = c->max_tokens;
    sq.sampling = params_of(c);
    sq.drafter = drafter_of(f, c->method);
    sq.draft_max = c->draft_max;
    sq.emit = solo_emit;
    sq.ud = o;
    assert_int_equal(sp_ctx_generate(ctx, &sq, NULL, NULL, &err), 0);
    char buf[64];
    size_t k = sp_detok_flush(&o->d, buf, sizeof buf);
    memcpy(o->text + o->n, buf, k);
    o->n += k;
    o->text[o->n] = 0;
    sp_ctx_free(ctx);
}

/* The server's context: parallel slots of n_ctx tokens, a step budget of
 * batch_rows rows. */
static sp_ctx *server_ctx(fixture *f, int parallel, int n_ctx, int batch_rows) {
    sp_err err;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_slots = parallel;
    cp.n_ctx = n_ctx;
    cp.batch_rows = batch_rows;
    cp.pool = f->pool;
    cp.cost = &f->cheap;
    sp_ctx *c = sp_ctx_create(f->m, f->tok, &cp, &err);
    assert_non_null(c);
    return c;
}

/* ---- the scheduled run --------------------------------------------------- */

static sp_job *make_job(fixture *f, const spec_case *c, const sp_tokens *prompt, char **stops, int n_stops) {
    sp_sampler_params p = params_of(c);
    sp_job_cfg jc = { .m = f->m, .tok = f->tok, .prompt = prompt->ids, .n_prompt = prompt->n,
                      .max_tokens = c->max_tokens, .sampling = &p, .stops = stops, .n_stops = n_stops,
                      .drafter = drafter_of(f, c->method), .draft_max = c->draft_max,
                      .logprobs = true, .top_logprobs = 2, .ignore_eos = c->ignore_eos };
    sp_api_err e;
    sp_job *j = sp_job_create(&jc, &e);
    assert_non_null(j);
    return j;
}

typedef struct job_out {
    char text[8192];
    size_t n;
    int n_lps;
    sp_job_delta end;
} job_out;

/* Drains a job to its end. */
static void drain(sp_job *j, job_out *o) {
    memset(o, 0, sizeof *o);
    for (;;) {
        sp_job_wait(j, 100);
        sp_job_delta d;
        sp_job_take(j, &d);
        assert_true(o->n + d.n_text < sizeof o->text);
        memcpy(o->text + o->n, d.text, d.n_text);
        o->n += d.n_text;
        o->n_lps += d.n_lps;
        sp_job_delta_free(&d);
        if (d.end) { o->end = d; break; }
    }
    o->text[o->n] = 0;
}

static void tokenize(fixture *f, const char *text, sp_tokens *out) {
    sp_err err;
    memset(out, 0, sizeof *out);
    assert_int_equal(sp_tokenize(f->tok, text, strlen(text), sp_tokenizer_add_bos(f->tok), true, out, &err), 0);
}

/* The value of a metric line "name value" in Prometheus text. */
static double metric(const char *text, const char *name) {
    const char *p = strstr(text, name);
    assert_non_null(p);
    return atof(p + strlen(name));
}

static const char *LONG_PROMPT =
    "The history of the printing press begins in the fifteenth century, when movable type made books "
    "cheaper to produce. Within a few decades printers worked in many cities, and the number of books "
    "grew quickly. Summarise this in one sentence, then list three consequences: one, two, three.";

/* Six jobs on three slots with a 16-row step budget: long prompts prefill
 * in chunks while others decode, jobs join and leave between steps. */
static void scheduled_equals_solo(fixture *f) {
    const spec_case cases[] = {
        { "Once upon a time", 0.0f, 1, 24, "none", 0, false },
        { LONG_PROMPT, 0.8f, 42, 20, "ngram", 4, false },
        { "1, 2, 3, 4, 5, 6, 7, 8,", 0.0f, 3, 30, "ngram", SP_DRAFT_ADAPTIVE, false },
        { "red green blue red green blue red", 0.8f, 7, 16, "suffix", 6, false },
        { LONG_PROMPT, 0.0f, 9, 12, "suffix", SP_DRAFT_ADAPTIVE, false },
        { "The sea is", 1.0f, 11, 28, "none", 0, false },
    };
    enum { NC = sizeof cases / sizeof *cases };
    sp_tokens prompts[NC];
    solo_out ref[NC];
    for (int i = 0; i < NC; i++) {
        tokenize(f, cases[i].prompt, &prompts[i]);
        solo(f, &cases[i], &prompts[i], &ref[i]);
    }
    sp_metrics *mx = sp_metrics_create();
    sp_ctx *ctx = server_ctx(f, 3, 1024, 16);
    sp_sched *s = sp_sched_create(ctx, 8, mx);
    sp_job *jobs[NC];
    sp_api_err e;
    for (int i = 0; i < NC; i++) {
        jobs[i] = make_job(f, &cases[i], &prompts[i], NULL, 0);
        assert_int_equal(sp_sched_submit(s, jobs[i], &e), 0);
    }
    for (int i = 0; i < NC; i++) {
        job_out o;
        drain(jobs[i], &o);
        assert_int_equal(o.end.end, SP_JOB_FINISHED);
        if (strcmp(o.text, ref[i].text)) fail_msg("job %d: '%s' != solo '%s'", i, o.text, ref[i].text);
        assert_true(o.end.stats.emitted > 0);
        assert_int_equal(o.end.stats.n_prompt, prompts[i].n);
        /* one logprob entry per emitted token, end-of-generation excluded */
        assert_int_equal(o.n_lps, o.end.stats.emitted - (o.end.finish == SP_FINISH_STOP ? 1 : 0));
        sp_job_unref(jobs[i]);
        sp_tokens_free(&prompts[i]);
    }
    /* steps really batched several sequences */
    char *t = sp_metrics_render(mx);
    const double one = metric(t, "specula_batch_sequences_bucket{le=\"1\"}");
    const double all = metric(t, "specula_batch_sequences_count");
    if (!(all > one + 5)) fail_msg("steps %g, with one sequence %g", all, one);
    free(t);
    sp_sched_free(s);
    sp_ctx_free(ctx);
    sp_metrics_free(mx);
}

static void test_scheduled_equals_solo_smol(void **state) { scheduled_equals_solo(*state); }
static void test_scheduled_equals_solo_gemma(void **state) { scheduled_equals_solo(*state); }

/* A cancelled job ends CANCELLED and its slot serves the next one, whose
 * output is still exact. */
static void test_cancel_frees_slot(void **state) {
    fixture *f = *state;
    sp_ctx *ctx = server_ctx(f, 1, 512, 64);
    sp_sched *s = sp_sched_create(ctx, 4, NULL);
    spec_case longc = { "Tell me a story.", 0.8f, 5, 400, "ngram", 4, true };
    spec_case next = { "The capital of France is", 0.0f, 1, 10, "ngram", 4, false };
    sp_tokens p1, p2;
    tokenize(f, longc.prompt, &p1);
    tokenize(f, next.prompt, &p2);
    solo_out ref;
    solo(f, &next, &p2, &ref);
    sp_job *a = make_job(f, &longc, &p1, NULL, 0), *b = make_job(f, &next, &p2, NULL, 0);
    sp_api_err e;
    assert_int_equal(sp_sched_submit(s, a, &e), 0);
    assert_int_equal(sp_sched_submit(s, b, &e), 0);
    sp_job_delta d;
    do { sp_job_wait(a, 100); sp_job_take(a, &d); sp_job_delta_free(&d); } while (!d.n_text && !d.end);
    sp_job_cancel(a);
    sp_sched_kick(s);
    job_out oa, ob;
    drain(a, &oa);
    assert_int_equal(oa.end.end, SP_JOB_CANCELLED);
    assert_true(oa.end.stats.emitted < 400);
    drain(b, &ob);
    assert_int_equal(ob.end.end, SP_JOB_FINISHED);
    assert_string_equal(ob.text, ref.text);
    sp_job_unref(a);
    sp_job_unref(b);
    sp_tokens_free(&p1);
    sp_tokens_free(&p2);
    sp_sched_free(s);
    sp_ctx_free(ctx);
}

/* Stop strings cut the text at the first stop string; the queue bound and
 * a stopped scheduler answer 503. */
static void test_stop_and_overload(void **state) {
    fixture *f = *state;
    spec_case c = { "1, 2, 3, 4, 5, 6, 7, 8,", 0.0f, 1, 30, "ngram", 4, false };
    sp_tokens p;
    tokenize(f, c.prompt, &p);
    solo_out ref;
    solo(f, &c, &p, &ref);
    assert_true(ref.n > 6);
    char stop[4] = { 0 };
    memcpy(stop, ref.text + 3, 3);
    const char *cut = strstr(ref.text, stop);
    char *stops[] = { stop };
    sp_ctx *ctx = server_ctx(f, 1, 512, 64);
    sp_sched *s = sp_sched_create(ctx, 1, NULL);
    sp_job *j = make_job(f, &c, &p, stops, 1);
    sp_api_err e;
    assert_int_equal(sp_sched_submit(s, j, &e), 0);
    job_out o;
    drain(j, &o);
    assert_int_equal(o.end.finish, SP_FINISH_STOP);
    assert_int_equal(o.n, (size_t)(cut - ref.text));
    assert_memory_equal(o.text, ref.text, o.n);
    sp_job_unref(j);
    /* overload: one running (long), one queued, the third refused */
    spec_case lc = { "Tell me a story.", 0.8f, 5, 300, "none", 0, true };
    sp_tokens lp;
    tokenize(f, lc.prompt, &lp);
    sp_job *a = make_job(f, &lc, &lp, NULL, 0), *b = make_job(f, &lc, &lp, NULL, 0), *x = make_job(f, &lc, &lp, NULL, 0);
    assert_int_equal(sp_sched_submit(s, a, &e), 0);
    int q = 0, r = 0;
    for (int i = 0; i < 200 && (r != 1 || q != 0); i++) { sp_sched_load(s, &q, &r); sp_job_wait(a, 10); }
    assert_int_equal(r, 1);
    assert_int_equal(q, 0);
    assert_int_equal(sp_sched_submit(s, b, &e), 0);
    assert_int_equal(sp_sched_submit(s, x, &e), -1);
    assert_int_equal(e.status, 503);
    /* stop: the queued job fails with 503, the running one may finish */
    sp_sched_stop(s, 0);
    job_out ob;
    drain(b, &ob);
    assert_int_equal(ob.end.end, SP_JOB_FAILED);
    assert_int_equal(ob.end.err.status, 503);
    assert_int_equal(sp_sched_submit(s, x, &e), -1);
    sp_job_unref(a);
    sp_job_unref(b);
    sp_job_unref(x);
    sp_tokens_free(&p);
    sp_tokens_free(&lp);
    sp_sched_free(s);
    sp_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest smol[] = {
        cmocka_unit_test(test_scheduled_equals_solo_smol),
        cmocka_unit_test(test_cancel_frees_slot),
        cmocka_unit_test(test_stop_and_overload),
    };
    const struct CMUnitTest gemma[] = {
        cmocka_unit_test(test_scheduled_equals_solo_gemma),
    };
    int rc = cmocka_run_group_tests_name("smollm2", smol, setup_smol, teardown);
    rc |= cmocka_run_group_tests_name("gemma3", gemma, setup_gemma, teardown);
    return rc;
}
