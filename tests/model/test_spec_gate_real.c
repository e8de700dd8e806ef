/*
 * The speculation gate on the real engine (sp_ctx, SmolLM2): a drafter
 * that knows plain decoding's answer (an oracle: every draft accepted)
 * makes the adaptive controller draft every round.  When its rounds also
 * cost time the controller cannot see (a sleep in commit, where no draft
 * cost is charged), whole steps with drafts are slower than plain ones:
 * the gate must measure that and run most steps plain.  When they cost
 * nothing extra, drafting pays and the gate must leave it on.  Output
 * equals plain decoding's either way; --no-spec-gate (no_gate) drafts as
 * the controller says.
 */
#include "spec_fixture.h"

#include <time.h>

#define GEN 200

typedef struct oracle {
    const int32_t *toks;         /* plain decoding's output */
    int n;
    int sleep_ms;                /* extra time of each round with drafts, in commit */
    int every;                   /* > 0: proposes only while (emitted / every) is even */
    int propose_ms;              /* > 0: each proposal sleeps this long and proposes nothing */
} oracle;

static void sleep_ms(int ms) {
    struct timespec ts = { 0, ms * 1000000L };
    nanosleep(&ts, NULL);
}

typedef struct oracle_draft {
    int n_gen;                   /* generated tokens the draft has seen */
} oracle_draft;

static sp_draft *or_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    (void)t; (void)err;
    sp_draft *s = calloc(1, sizeof *s);
    s->drafter = d;
    s->impl = calloc(1, sizeof(oracle_draft));
    return s;
}
static int or_prefill(sp_draft *s, const int32_t *p, int n, const sp_taps *t, sp_err *err) {
    (void)p; (void)n; (void)t; (void)err;
    ((oracle_draft *)s->impl)->n_gen = 0;
    return 0;
}
/* The next two tokens of the answer after what was emitted. */
static int or_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out, sp_err *err) {
    (void)feed; (void)err;
    const oracle *o = s->drafter->impl;
    oracle_draft *g = s->impl;
    g->n_gen += n_feed;
    if (o->propose_ms > 0) {     /* a costly member that finds nothing */
        sleep_ms(o->propose_ms);
        *out = (sp_proposal){ 0 };
        return 0;
    }
    int n = max_n < 2 ? max_n : 2;
    if (o->every > 0 && (g->n_gen / o->every) % 2) n = 0;
    if (g->n_gen + n > o->n) n = o->n - g->n_gen > 0 ? o->n - g->n_gen : 0;
    *out = (sp_proposal){ .n = n, .tokens = o->toks + g->n_gen };
    return 0;
}
static void or_commit(sp_draft *s, int nd, int na, const int32_t *path, const sp_taps *v) {
    (void)path; (void)v;
    const oracle *o = s->drafter->impl;
    ((oracle_draft *)s->impl)->n_gen += na;
    if (na > 0 && o->sleep_ms) sleep_ms(o->sleep_ms);   /* a verified round (a shadow proposal accepts none) */
}
static int or_ckpt(sp_draft *s, uint8_t **b, size_t *l, sp_err *err) {
    (void)s; (void)b; (void)l;
    return sp_err_set(err, "no checkpoints");
}
static int or_restore(sp_draft *s, const uint8_t *b, size_t l, sp_err *err) {
    (void)s; (void)b; (void)l;
    return sp_err_set(err, "no checkpoints");
}
static void or_close(sp_draft *s) { free(s->impl); free(s); }
static void or_free(sp_drafter *d) { free(d); }
static const sp_drafter_ops or_ops = { .open = or_open, .prefill = or_prefill, .propose = or_propose,
                                       .commit = or_commit, .checkpoint = or_ckpt, .restore = or_restore,
                                       .close = or_close, .free = or_free };

static sp_ctx *new_ctx(fixture *f, bool no_gate) {
    sp_err err;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 512;
    cp.pool = f->pool;
    cp.cost = &f->cheap;
    cp.no_gate = no_gate;
    sp_ctx *c = sp_ctx_create(f->m, f->tok, &cp, &err);
    assert_non_null(c);
    return c;
}

/* n tokens of p in context c (end-of-generation not honoured, so every run
 * is as long). */
static sp_spec_stats gen_in(sp_ctx *c, sp_drafter *d, const sp_tokens *p, int n, run_out *o) {
    sp_err err;
    sp_seq_params sq = sp_seq_default_params();
    sq.prompt = p->ids;
    sq.n_prompt = p->n;
    sq.max_tokens = n;
    sq.drafter = d;
    sq.sampling.temperature = 0;
    sq.emit = fx_collect;
    sq.ud = o;
    o->n = 0;
    o->tok = NULL;
    sp_spec_stats st;
    sp_finish fin;
    if (sp_ctx_generate(c, &sq, &st, &fin, &err)) fail_msg("generate: %s", err.msg);
    assert_int_equal(o->n, n);
    return st;
}

/* GEN tokens of p in a context of its own, gated unless no_gate. */
static sp_spec_stats gen(fixture *f, sp_drafter *d, const sp_tokens *p, bool no_gate, run_out *o) {
    sp_ctx *c = new_ctx(f, no_gate);
    const sp_spec_stats st = gen_in(c, d, p, GEN, o);
    sp_ctx_free(c);
    return st;
}

static sp_drafter *oracle_drafter(oracle *o, const char *name, bool cheap) {
    sp_drafter *d = sp_drafter_alloc();
    d->ops = &or_ops;
    d->impl = o;
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->ns, sizeof d->ns, "%s", name);
    d->cheap = cheap;
    return d;
}

/* Time a drafting round hides from the controller, enough that drafting
 * must lose: at least 30 ms, and ten plain tokens' worth, so a round of
 * three tokens costs several plain steps even on a slow or busy host (at a
 * flat 30 ms, tests or a training run beside this one made plain steps
 * slow enough that the gate rightly kept drafting). */
static int hidden_ms(double plain_ms) {
    const int ms = plain_ms * 10 > 30 ? (int)(plain_ms * 10) : 30;
    return ms > 900 ? 900 : ms;      /* sleep_ms takes < 1 s */
}

static void test_gate(void **state) {
    fixture *f = *state;
    sp_tokens p = { 0 };
    fx_prompt(f, "Write a short story about a lighthouse keeper who finds a message in a bottle.", &p);
    run_out plain, out;
    const uint64_t t0 = sp_now_ns();
    gen(f, NULL, &p, false, &plain);
    const double plain_ms = (double)(sp_now_ns() - t0) / 1e6 / GEN;  /* per token, this host, now */
    oracle o = { plain.toks, GEN, 0, 0, 0 };
    sp_drafter *d = oracle_drafter(&o, "oracle", true);

    /* drafting pays (every draft accepted, nothing hidden): mostly on */
    sp_spec_stats st = gen(f, d, &p, false, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    fprintf(stderr, "# oracle, free: rounds %lld, gated %lld, accepted %lld\n", (long long)st.rounds,
            (long long)st.gated_rounds, (long long)st.accepted);
    assert_true(st.gated_rounds * 4 < st.rounds);
    assert_true(st.accepted > GEN / 2);

    /* time the controller cannot see in each drafting round: mostly off */
    o.sleep_ms = hidden_ms(plain_ms);
    st = gen(f, d, &p, false, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    fprintf(stderr, "# oracle, %d ms a round (plain %.1f ms a token): rounds %lld, gated %lld, spec rounds %lld\n",
            o.sleep_ms, plain_ms, (long long)st.rounds, (long long)st.gated_rounds, (long long)st.spec_rounds);
    assert_true(st.gated_rounds * 2 > st.rounds);

    /* ungated, the controller drafts in every round it can */
    st = gen(f, d, &p, true, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    assert_int_equal(st.gated_rounds, 0);
    assert_true(st.spec_rounds * 4 > st.rounds * 3);
    sp_drafter_free(d);
    sp_tokens_free(&p);
}

/* A combination led by a cheap drafter (an oracle that proposes in every
 * other run of 8 tokens) and a costly one asked only when the cheap one
 * finds nothing (20 ms a proposal, never a draft: what "suffix,eagle"
 * pays when eagle does not help).  The cheap member alone is the fastest
 * mode: the gate must run most steps with it alone (cheap_rounds), probe
 * the others, and the output must equal plain decoding's.  A combination
 * of cheap members only has no such mode. */
static void test_gate_cheap(void **state) {
    fixture *f = *state;
    sp_tokens p = { 0 };
    fx_prompt(f, "Explain how a refrigerator keeps food cold, step by step.", &p);
    run_out plain, out;
    gen(f, NULL, &p, false, &plain);
    oracle lead = { plain.toks, GEN, 0, 8, 0 }, slow = { plain.toks, GEN, 0, 0, 20 };
    sp_drafter *subs[2] = { oracle_drafter(&lead, "lead", true), oracle_drafter(&slow, "slow", false) };
    sp_err err;
    sp_drafter *d = sp_combine_create(subs, 2, &err);
    assert_non_null(d);
    assert_int_equal(d->cheap_lead, 1);
    sp_spec_stats st = gen(f, d, &p, false, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    fprintf(stderr, "# lead,slow: rounds %lld, cheap only %lld, gated plain %lld, accepted %lld\n",
            (long long)st.rounds, (long long)st.cheap_rounds, (long long)st.gated_rounds, (long long)st.accepted);
    assert_true(st.cheap_rounds * 2 > st.rounds);
    assert_true(st.accepted > GEN / 4);
    /* ungated, every mode-less round asks the slow member too */
    st = gen(f, d, &p, true, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    assert_int_equal(st.cheap_rounds, 0);
    sp_drafter_free(d);
    /* two cheap members: no cheap-only mode */
    sp_drafter *two[2] = { oracle_drafter(&lead, "a", true), oracle_drafter(&lead, "b", true) };
    d = sp_combine_create(two, 2, &err);
    assert_non_null(d);
    assert_int_equal(d->cheap_lead, 0);
    st = gen(f, d, &p, false, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    assert_int_equal(st.cheap_rounds, 0);
    sp_drafter_free(d);
    sp_tokens_free(&p);
}

/* One context, many drafters: each has a gate of its own.  A drafter
 * made where a freed one lay (malloc hands the address back) starts
 * unmeasured instead of inheriting the old one's verdict, and a drafter
 * beyond the table's SP_CTX_GATES is still gated (the least recently used
 * gate makes room). */
static void test_gate_per_drafter(void **state) {
    fixture *f = *state;
    sp_tokens p = { 0 };
    fx_prompt(f, "Write a short story about a lighthouse keeper who finds a message in a bottle.", &p);
    run_out plain, out;
    const uint64_t t0 = sp_now_ns();
    gen(f, NULL, &p, false, &plain);
    const double plain_ms = (double)(sp_now_ns() - t0) / 1e6 / GEN;
    oracle slow = { plain.toks, GEN, hidden_ms(plain_ms), 0, 0 }, fast = { plain.toks, GEN, 0, 0, 0 };
    sp_ctx *c = new_ctx(f, false);

    sp_drafter *a = oracle_drafter(&slow, "oracle", true);
    const void *where = a;
    sp_spec_stats st = gen_in(c, a, &p, GEN, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    assert_true(st.gated_rounds * 2 > st.rounds);
    sp_drafter_free(a);

    sp_drafter *b = oracle_drafter(&fast, "oracle", true);
    st = gen_in(c, b, &p, GEN, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    fprintf(stderr, "# a free drafter after a slow one (%s address): rounds %lld, gated %lld\n",
            (const void *)b == where ? "same" : "another", (long long)st.rounds, (long long)st.gated_rounds);
    assert_true(st.gated_rounds * 4 < st.rounds);

    sp_drafter *fill[SP_CTX_GATES];
    for (int i = 0; i < SP_CTX_GATES; i++) {
        fill[i] = oracle_drafter(&fast, "fill", true);
        gen_in(c, fill[i], &p, 16, &out);
    }
    sp_drafter *z = oracle_drafter(&slow, "oracle", true);
    st = gen_in(c, z, &p, GEN, &out);
    assert_memory_equal(out.toks, plain.toks, GEN * sizeof(int32_t));
    fprintf(stderr, "# a slow drafter after %d others: rounds %lld, gated %lld\n", SP_CTX_GATES + 1,
            (long long)st.rounds, (long long)st.gated_rounds);
    assert_true(st.gated_rounds * 2 > st.rounds);
    for (int i = 0; i < SP_CTX_GATES; i++) sp_drafter_free(fill[i]);
    sp_drafter_free(z);
    sp_drafter_free(b);
    sp_ctx_free(c);
    sp_tokens_free(&p);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gate, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_gate_cheap, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_gate_per_drafter, fx_setup_smol, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
