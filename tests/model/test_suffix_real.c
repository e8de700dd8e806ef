/* Losslessness of `suffix` speculation on the real models: for every prompt
 * of a small test set, suffix drafting (fixed and adaptive draft length)
 * emits exactly the tokens of plain decoding, at temperature 0 and at
 * temperature 0.8 with a fixed seed; a repeated request drafts from the
 * engine-wide trie (the earlier output) and is still exact. */
#include "test_util.h"
#include "spec/spec.h"
#include "tokenizer/tokenizer.h"

typedef struct run_out {
    int32_t toks[512];
    int n;
    const sp_tokenizer *tok;     /* stop at end-of-generation tokens */
} run_out;

static sp_emit_result collect(void *ud, int32_t t, bool drafted) {
    (void)drafted;
    run_out *o = ud;
    o->toks[o->n++] = t;
    return sp_tokenizer_is_eog(o->tok, t) ? SP_EMIT_STOP : SP_EMIT_CONTINUE;
}

typedef struct fixture {
    sp_model *m;
    sp_tokenizer *tok;
    sp_pool *pool;
    sp_workspace *ws;
    sp_cost_curve cheap;         /* makes the adaptive controller draft */
} fixture;

static int setup(void **state, const char *file) {
    sp_err err;
    fixture *f = calloc(1, sizeof *f);
    f->m = sp_model_load(sp_test_model_path(file), &err);
    if (!f->m) { fprintf(stderr, "%s\n", err.msg); return -1; }
    f->tok = sp_tokenizer_load(f->m->gguf, &err);
    f->pool = sp_pool_create(2);
    f->ws = sp_workspace_create(f->m, 64, f->pool);
    for (int k = 1; k <= SP_MAX_DRAFT + 1; k++) f->cheap.t[k] = 1.0 + 0.05 * (k - 1);
    f->cheap.valid = true;
    *state = f;
    return 0;
}
static int setup_smol(void **s) { return setup(s, SP_TEST_SMOLLM2); }
static int setup_gemma(void **s) { return setup(s, SP_TEST_GEMMA3); }
static int teardown(void **state) {
    fixture *f = *state;
    sp_workspace_free(f->ws);
    sp_pool_free(f->pool);
    sp_tokenizer_free(f->tok);
    sp_model_free(f->m);
    free(f);
    return 0;
}

static const char *const prompts[] = {
    "Rename the variable `total` to `sum` and print the whole function:\n\n"
    "def add_all(values):\n    total = 0\n    for v in values:\n        total += v\n    return total\n",
    "Convert to JSON: name Alice, age 30, city Paris; name Bob, age 25, city Rome.",
    "List the days of the week, one per line, then list them again in the same order.",
};

static void prompt_tokens(const fixture *f, const char *user, sp_tokens *out) {
    sp_err err;
    sp_chat_msg msg = { "user", user };
    char *text = NULL, sys[512];
    assert_int_equal(sp_chat_render(sp_chat_detect(f->m->gguf), &msg, 1, true,
                                    sp_chat_default_system(f->m->gguf, sys, sizeof sys), &text, &err), 0);
    assert_int_equal(sp_tokenize(f->tok, text, strlen(text), sp_tokenizer_add_bos(f->tok), true, out, &err), 0);
    free(text);
}

/* Runs one generation (drafter NULL = plain); returns its stats. */
static sp_spec_stats gen(fixture *f, sp_drafter *d, const sp_tokens *p, float temp, int draft_max,
                         int max_tokens, run_out *o) {
    sp_err err;
    sp_sampler_params sp = sp_sampler_defaults();
    sp.temperature = temp; sp.top_k = 40; sp.top_p = 0.95f; sp.seed = 1234;
    sp_sampler *smp = sp_sampler_create(&sp, f->m->hp.n_vocab);
    sp_kv *kv = sp_kv_create(f->m, 1024);
    sp_target t = sp_target_of(f->m);
    sp_draft *dr = d ? sp_draft_open(d, &t, &err) : NULL;
    if (d && !dr) fail_msg("open: %s", err.msg);
    sp_gen_config cfg = { .max_tokens = max_tokens, .draft_max = d ? draft_max : 0, .cost = &f->cheap };
    sp_spec_stats st;
    sp_finish fin;
    o->n = 0;
    o->tok = f->tok;
    if (sp_generate(f->m, kv, f->ws, smp, dr, &cfg, p->ids, p->n, collect, o, &st, &fin, &err))
        fail_msg("generate: %s", err.msg);
    sp_draft_close(dr);          /* the output joins the engine-wide trie */
    sp_kv_free(kv);
    sp_sampler_free(smp);
    return st;
}

static void assert_same(const run_out *a, const run_out *b, const char *what) {
    if (a->n != b->n || memcmp(a->toks, b->toks, (size_t)a->n * sizeof(int32_t)) != 0) {
        int i = 0;
        while (i < a->n && i < b->n && a->toks[i] == b->toks[i]) i++;
        fail_msg("%s: speculative output differs from plain at token %d (lengths %d, %d)", what, i,
                 a->n, b->n);
    }
}

/* Every prompt, both temperatures, fixed and adaptive draft length: the
 * tokens of plain decoding.  One drafter serves all requests, so later
 * ones also draft from the earlier outputs. */
static void test_lossless(void **state) {
    fixture *f = *state;
    sp_err err;
    sp_drafter *d = sp_drafter_create("suffix", NULL, &err);
    assert_non_null(d);
    int64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < sizeof prompts / sizeof *prompts; i++) {
        sp_tokens p = { 0 };
        prompt_tokens(f, prompts[i], &p);
        const float temps[] = { 0.0f, 0.8f };
        for (int ti = 0; ti < 2; ti++) {
            run_out plain, fixed, adapt;
            gen(f, NULL, &p, temps[ti], 0, 40, &plain);
            sp_spec_stats s2 = gen(f, d, &p, temps[ti], 5, 40, &fixed);
            sp_spec_stats s3 = gen(f, d, &p, temps[ti], SP_DRAFT_ADAPTIVE, 40, &adapt);
            char what[64];
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, draft 5", i, (double)temps[ti]);
            assert_same(&plain, &fixed, what);
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, adaptive", i, (double)temps[ti]);
            assert_same(&plain, &adapt, what);
            drafted += s2.drafted + s3.drafted;
            accepted += s2.accepted + s3.accepted;
        }
        sp_tokens_free(&p);
    }
    printf("# drafted %lld, accepted %lld\n", (long long)drafted, (long long)accepted);
    assert_true(accepted > 0);
    sp_drafter_free(d);
}

/* A request repeated on a fresh drafter: the first run knows only its
 * prompt; the second drafts the first run's output from the engine-wide
 * trie, accepts far more, and is still exactly plain decoding. */
static void test_repeat(void **state) {
    fixture *f = *state;
    sp_err err;
    const float temps[] = { 0.0f, 0.8f };
    for (int ti = 0; ti < 2; ti++) {
        sp_drafter *d = sp_drafter_create("suffix", NULL, &err);
        sp_tokens p = { 0 };
        prompt_tokens(f, prompts[2], &p);
        run_out plain, first, second;
        gen(f, NULL, &p, temps[ti], 0, 64, &plain);
        sp_spec_stats s1 = gen(f, d, &p, temps[ti], 8, 64, &first);
        sp_spec_stats s2 = gen(f, d, &p, temps[ti], 8, 64, &second);
        assert_same(&plain, &first, "first request");
        assert_same(&plain, &second, "repeated request");
        printf("# T=%.1f: first run accepted %lld of %lld drafted, repeat %lld of %lld (%lld tokens)\n",
               (double)temps[ti], (long long)s1.accepted, (long long)s1.drafted, (long long)s2.accepted,
               (long long)s2.drafted, (long long)s2.emitted);
        assert_true(s2.accepted > 0);
        assert_true(s2.accepted > s1.accepted);
        /* most of the repeat comes from drafts (the first token comes from
         * the prefill, a few more are the bonus tokens of the rounds) */
        assert_true(s2.accepted * 4 >= s2.emitted * 3);
        sp_tokens_free(&p);
        sp_drafter_free(d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lossless, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_repeat, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_lossless, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_repeat, setup_gemma, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
