/* Hidden-state taps through the round loop on the real models: a drafter
 * that declares SP_CAP_HIDDEN_TAPS gets the prompt's rows at prefill and,
 * after every round, the verified rows that entered the cache (the anchor
 * and the accepted drafts), never a rejected one.  The recorder drafter
 * below proposes drafts from the plain output with a wrong token in the
 * middle (so rounds reject rows) and records every row it is handed; the
 * rows, laid end to end, must equal bit for bit the taps of one plain
 * forward over the tokens the cache holds.  A rejected row fed to it, a
 * row missed or one given twice misaligns them and fails the test. */
#include "spec_fixture.h"

#define MAXROWS 1024

typedef struct rec_drafter {
    const int32_t *oracle;           /* the plain output (borrowed) */
    int n_oracle;
    int rows;                        /* rows recorded by the last draft */
    float *data;                     /* (MAXROWS, n_taps, n_embd) */
    int dim, n_taps;
    int commits_without_proposal;
} rec_drafter;

typedef struct rec_draft {
    rec_drafter *r;
    int emitted;                     /* tokens fed so far */
    int32_t prop[8];
    int pos;                         /* sequence position of the next recorded row */
} rec_draft;

static sp_draft *rec_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    (void)t; (void)err;
    rec_drafter *r = d->impl;
    r->rows = 0;
    rec_draft *g = calloc(1, sizeof *g);
    g->r = r;
    sp_draft *s = calloc(1, sizeof *s);
    s->drafter = d;
    s->impl = g;
    return s;
}

static void record(rec_draft *g, const sp_taps *t) {
    rec_drafter *r = g->r;
    assert_non_null(t);
    assert_int_equal(t->n_layers, r->n_taps);
    assert_int_equal(t->dim, r->dim);
    assert_int_equal(t->pos, g->pos);            /* consecutive positions, none missed or repeated */
    assert_true(r->rows + t->n_rows <= MAXROWS);
    const size_t row = (size_t)r->n_taps * r->dim;
    memcpy(r->data + (size_t)r->rows * row, t->data, (size_t)t->n_rows * row * sizeof(float));
    r->rows += t->n_rows;
    g->pos += t->n_rows;
}

static int rec_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    (void)prompt; (void)err;
    rec_draft *g = s->impl;
    assert_int_equal(taps->n_rows, n);
    record(g, taps);
    return 0;
}

/* Drafts the oracle's next tokens, the third one wrong. */
static int rec_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out, sp_err *err) {
    (void)feed; (void)err;
    rec_draft *g = s->impl;
    g->emitted += n_feed;
    int n = 0;
    while (n < max_n && n < 5 && g->emitted + n < g->r->n_oracle) {
        g->prop[n] = g->r->oracle[g->emitted + n];
        if (n == 2) g->prop[n] = (g->prop[n] + 1) % 1000;
        n++;
    }
    *out = (sp_proposal){ .n = n, .tokens = g->prop };
    return 0;
}

static void rec_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path, const sp_taps *v) {
    (void)path;
    rec_draft *g = s->impl;
    if (!v) return;                  /* combine asked it and it proposed nothing: rows come next */
    /* its own proposal: the anchor and at most the accepted drafts; as a
     * bystander in a combination (n_drafted 0): the anchor and whatever the
     * winner got accepted (those tokens reach it with the next feed) */
    assert_true(v->n_rows >= 1 && (!n_drafted || v->n_rows <= n_accepted + 1));
    if (!n_drafted) g->r->commits_without_proposal++;
    g->emitted += n_accepted;
    record(g, v);
}

static int rec_checkpoint(sp_draft *s, uint8_t **b, size_t *l, sp_err *e) { (void)s; (void)b; (void)l; return sp_err_set(e, "no"); }
static int rec_restore(sp_draft *s, const uint8_t *b, size_t l, sp_err *e) { (void)s; (void)b; (void)l; return sp_err_set(e, "no"); }
static void rec_close(sp_draft *s) { free(s->impl); free(s); }
static void rec_free(sp_drafter *d) { free(d); }

static const sp_drafter_ops rec_ops = {
    .open = rec_open, .prefill = rec_prefill, .propose = rec_propose, .commit = rec_commit,
    .checkpoint = rec_checkpoint, .restore = rec_restore, .close = rec_close, .free = rec_free,
};

static sp_drafter *rec_create(rec_drafter *r, const sp_model *m) {
    sp_drafter *d = calloc(1, sizeof *d);
    d->ops = &rec_ops;
    snprintf(d->name, sizeof d->name, "recorder");
    snprintf(d->ns, sizeof d->ns, "recorder-v1");
    d->needs = SP_CAP_HIDDEN_TAPS;
    d->n_taps = 2;
    d->tap_layers[0] = 1;
    d->tap_layers[1] = m->hp.n_layer;
    d->impl = r;
    r->n_taps = 2;
    r->dim = m->hp.n_embd;
    return d;
}

/* The taps of one plain pass over tokens[0..n) (the reference). */
static float *reference_taps(fixture *f, const sp_drafter *d, const int32_t *tokens, int n) {
    sp_err err;
    sp_kv *kv = sp_kv_create(f->m, n + 1);
    float *taps = malloc((size_t)n * d->n_taps * f->m->hp.n_embd * sizeof(float));
    const int32_t *toks = tokens;
    for (int at = 0; at < n;) {      /* the fixture's workspace holds 64 rows a pass */
        const int c = n - at < 64 ? n - at : 64;
        sp_fwd_seq q = { .kv = kv, .tokens = toks + at, .n = c, .tap_layers = d->tap_layers, .n_taps = d->n_taps,
                         .taps = taps + (size_t)at * d->n_taps * f->m->hp.n_embd };
        assert_int_equal(sp_model_forward_batch(f->m, f->ws, &q, 1, &err), 0);
        at += c;
    }
    sp_kv_free(kv);
    return taps;
}

static void check(fixture *f, bool combined, float temp) {
    sp_tokens p = { 0 };
    fx_prompt(f, "List the days of the week, one per line, then list them again in the same order.", &p);
    run_out plain = { .n = 0 }, spec = { .n = 0 };
    fx_gen(f, NULL, &p, temp, 0, 40, 512, &plain, NULL, NULL);
    rec_drafter r = { .oracle = plain.toks, .n_oracle = plain.n };
    r.data = malloc((size_t)MAXROWS * 2 * f->m->hp.n_embd * sizeof(float));
    sp_drafter *d = rec_create(&r, f->m), *dr = d;
    sp_err err;
    if (combined) {
        sp_drafter *subs[2] = { sp_drafter_create("ngram", NULL, &err), d };
        dr = sp_combine_create(subs, 2, &err);
        assert_non_null(dr);
        assert_int_equal(dr->n_taps, 2);
    }
    int kv_n = 0;
    const sp_spec_stats st = fx_gen(f, dr, &p, temp, 5, 40, 512, &spec, NULL, &kv_n);
    fx_assert_same(&plain, &spec, "recorder");
    assert_true(st.drafted > st.accepted);       /* rows were rejected */
    assert_true(st.accepted > 0);
    if (combined) assert_true(r.commits_without_proposal > 0);   /* ngram won some rounds */
    /* every row in the cache, exactly once, in order */
    assert_int_equal(r.rows, kv_n);
    int32_t all[1024];
    memcpy(all, p.ids, (size_t)p.n * sizeof(int32_t));
    memcpy(all + p.n, plain.toks, (size_t)(kv_n - p.n) * sizeof(int32_t));
    float *ref = reference_taps(f, d, all, kv_n);
    const size_t row = (size_t)2 * f->m->hp.n_embd;
    for (int i = 0; i < kv_n; i++)
        if (memcmp(ref + i * row, r.data + i * row, row * sizeof(float)))
            fail_msg("row %d of %d (prompt %d) differs from the plain pass's taps", i, kv_n, p.n);
    free(ref);
    free(r.data);
    sp_drafter_free(dr);
    sp_tokens_free(&p);
}

static void test_taps_chain(void **state) { check(*state, false, 0.0f); }
static void test_taps_sampled(void **state) { check(*state, false, 0.8f); }
static void test_taps_combined(void **state) { check(*state, true, 0.0f); }

/* A drafter asking for a layer the target lacks is refused at open. */
static void test_taps_refused(void **state) {
    fixture *f = *state;
    rec_drafter r = { 0 };
    sp_drafter *d = rec_create(&r, f->m);
    d->tap_layers[1] = f->m->hp.n_layer + 1;
    sp_err err;
    sp_target t = sp_target_of(f->m);
    assert_null(sp_draft_open(d, &t, &err));
    assert_non_null(strstr(err.msg, "taps layer"));
    t.caps &= ~SP_CAP_HIDDEN_TAPS;
    assert_null(sp_draft_open(d, &t, &err));
    assert_non_null(strstr(err.msg, "hidden-state taps"));
    sp_drafter_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_taps_chain), cmocka_unit_test(test_taps_sampled),
        cmocka_unit_test(test_taps_combined), cmocka_unit_test(test_taps_refused),
    };
    int rc = cmocka_run_group_tests_name("smollm2", tests, fx_setup_smol, fx_teardown);
    rc |= cmocka_run_group_tests_name("gemma3", tests, fx_setup_gemma, fx_teardown);
    return rc;
}
