/*
 * Shared fixture of the real-model speculation tests: a model with its
 * tokenizer, pool and workspace, the chat prompts the tests use, and one
 * generation with or without a drafter, collecting the emitted tokens.
 * Helpers are static inline so a test may use only some of them.
 */
#ifndef SP_SPEC_FIXTURE_H
#define SP_SPEC_FIXTURE_H

#include "test_util.h"
#include "engine/engine.h"
#include "speculative/speculative.h"
#include "tokenizer/tokenizer.h"

typedef struct run_out {
    int32_t toks[512];
    bool drafted[512];
    int n;
    int stop_at;                 /* SP_EMIT_STOP on the stop_at-th token (1-based), 0 = never */
    const sp_tokenizer *tok;     /* stop at end-of-generation tokens (set by fx_gen) */
} run_out;

static inline sp_emit_result fx_collect(void *ud, int32_t t, bool drafted, const float *logits) {
    (void)logits;
    run_out *o = ud;
    if (o->n < 512) { o->drafted[o->n] = drafted; o->toks[o->n] = t; }
    o->n++;
    if (o->stop_at && o->n == o->stop_at) return SP_EMIT_STOP;
    if (o->tok && sp_tokenizer_is_eog(o->tok, t)) return SP_EMIT_STOP;
    return SP_EMIT_CONTINUE;
}

typedef struct fixture {
    sp_model *m;
    sp_tokenizer *tok;
    sp_pool *pool;
    sp_workspace *ws;
    sp_cost_curve cheap;         /* makes the adaptive controller draft */
} fixture;

static inline int fx_setup(void **state, const char *file) {
    sp_err err;
    fixture *f = calloc(1, sizeof *f);
    f->m = sp_model_load(sp_test_model_path(file), &err);
    if (!f->m) { fprintf(stderr, "%s\n", err.msg); free(f); return -1; }
    f->tok = sp_tokenizer_load(f->m->gguf, &err);
    f->pool = sp_pool_create(2);
    f->ws = sp_workspace_create(f->m, 64, f->pool);
    for (int k = 1; k <= SP_MAX_DRAFT + 1; k++) f->cheap.t[k] = 1.0 + 0.05 * (k - 1);
    f->cheap.valid = true;
    *state = f;
    return 0;
}
static inline int fx_setup_smol(void **s) { return fx_setup(s, SP_TEST_SMOLLM2); }
static inline int fx_setup_gemma(void **s) { return fx_setup(s, SP_TEST_GEMMA3); }
static inline int fx_teardown(void **state) {
    fixture *f = *state;
    sp_workspace_free(f->ws);
    sp_pool_free(f->pool);
    sp_tokenizer_free(f->tok);
    sp_model_free(f->m);
    free(f);
    return 0;
}

/* (unused in tests that bring their own prompts) */
__attribute__((unused)) static const char *const fx_prompts[] = {
    "Rename the variable `total` to `sum` and print the whole function:\n\n"
    "def add_all(values):\n    total = 0\n    for v in values:\n        total += v\n    return total\n",
    "Convert to JSON: name Alice, age 30, city Paris; name Bob, age 25, city Rome.",
    "List the days of the week, one per line, then list them again in the same order.",
};
#define FX_N_PROMPTS (sizeof fx_prompts / sizeof *fx_prompts)

/* The user message in the model's chat template, tokenized. */
static inline void fx_prompt(const fixture *f, const char *user, sp_tokens *out) {
    sp_err err;
    sp_chat_msg msg = { "user", user };
    sp_chat_tmpl *ct = NULL;
    assert_int_equal(sp_chat_tmpl_for_model(f->m->gguf, f->tok, NULL, NULL, NULL, &ct, &err), 0);
    assert_non_null(ct);
    assert_int_equal(sp_chat_tokenize(ct, f->tok, &msg, 1, true, sp_tokenizer_add_bos(f->tok), out, &err), 0);
    sp_chat_tmpl_free(ct);
}

/* A one-slot context of n_ctx tokens on the fixture's pool, with the
 * cost curve that makes the adaptive controller draft.  Ungated: these
 * tests check what drafters propose and the controller chooses, which the
 * gate (test_spec_gate_real) would otherwise overrule by this host's
 * clock. */
static inline sp_ctx *fx_ctx(fixture *f, int n_slots, int n_ctx) {
    sp_err err;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.no_gate = true;
    cp.n_slots = n_slots;
    cp.n_ctx = n_ctx;
    cp.batch_rows = 64;
    cp.pool = f->pool;
    cp.cost = &f->cheap;
    sp_ctx *c = sp_ctx_create(f->m, f->tok, &cp, &err);
    if (!c) fail_msg("context: %s", err.msg);
    return c;
}

/* The sampling the fixture's generations use: top-k 40, top-p 0.95,
 * seed 1234. */
static inline sp_sampler_params fx_sampling(float temp) {
    sp_sampler_params sp = sp_sampler_defaults();
    sp.temperature = temp; sp.top_k = 40; sp.top_p = 0.95f; sp.seed = 1234;
    return sp;
}

/* Runs the sequence sq (its emit and ud set here, to collect into o) in a
 * one-slot context of its own until it ends.  An error fails the test
 * unless errbuf is given (then it gets the message).  Returns the finish
 * reason; st and kv_n (may be NULL) get the stats and the final cache
 * length. */
static inline sp_finish fx_run(fixture *f, sp_seq_params *sq, int n_ctx, run_out *o, sp_spec_stats *st,
                               int *kv_n, char *errbuf, size_t errcap) {
    sp_err err;
    sp_ctx *c = fx_ctx(f, 1, n_ctx);
    sq->emit = fx_collect;
    sq->ud = o;
    o->n = 0;
    o->tok = f->tok;
    const int id = sp_ctx_add(c, sq, &err);
    if (id < 0) fail_msg("add: %s", err.msg);
    while (sp_ctx_seq_finish(c, id) == SP_FINISH_NONE) sp_ctx_step(c);
    const sp_finish fin = sp_ctx_seq_finish(c, id);
    if (fin == SP_FINISH_ERROR && !errbuf) fail_msg("generate: %s", sp_ctx_seq_error(c, id));
    if (errbuf) snprintf(errbuf, errcap, "%s", sp_ctx_seq_error(c, id));
    if (st) *st = *sp_ctx_seq_stats(c, id);
    if (kv_n) *kv_n = sp_ctx_seq_n_cached(c, id);
    sp_ctx_free(c);              /* closes the draft (suffix: the output joins the engine-wide trie) */
    return fin;
}

/* One generation (drafter NULL = plain) in a context of its own; returns
 * its stats, the finish reason and the final cache length. */
static inline sp_spec_stats fx_gen(fixture *f, sp_drafter *dr, const sp_tokens *p, float temp, int draft_max,
                            int max_tokens, int n_ctx, run_out *o, sp_finish *fin, int *kv_n) {
    sp_seq_params sq = sp_seq_default_params();
    sq.prompt = p->ids;
    sq.n_prompt = p->n;
    sq.max_tokens = max_tokens;
    sq.sampling = fx_sampling(temp);
    sq.drafter = dr;
    sq.draft_max = draft_max;
    sp_spec_stats st;
    const sp_finish f_ = fx_run(f, &sq, n_ctx, o, &st, kv_n, NULL, 0);
    if (fin) *fin = f_;
    return st;
}

static inline void fx_assert_same(const run_out *a, const run_out *b, const char *what) {
    if (a->n != b->n || memcmp(a->toks, b->toks, (size_t)(a->n < 512 ? a->n : 512) * sizeof(int32_t)) != 0) {
        int i = 0;
        while (i < a->n && i < b->n && i < 512 && a->toks[i] == b->toks[i]) i++;
        fail_msg("%s: speculative output differs from plain at token %d (lengths %d, %d)", what, i,
                 a->n, b->n);
    }
}

#endif
