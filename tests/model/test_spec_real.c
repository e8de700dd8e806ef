/* Losslessness of speculative decoding on the real models: for every prompt
 * of a small test set, ngram speculation (fixed and adaptive draft length)
 * emits exactly the tokens of plain decoding, at temperature 0 and at
 * temperature 0.8 with a fixed seed; stops inside an accepted run, max_tokens
 * and the context limit behave exactly as in plain decoding. */
#include "test_util.h"
#include "spec/spec.h"
#include "tokenizer/tokenizer.h"

typedef struct run_out {
    int32_t toks[512];
    bool drafted[512];
    int n;
    int stop_at;                 /* SP_EMIT_STOP on the stop_at-th token (1-based), 0 = never */
    const sp_tokenizer *tok;     /* stop at end-of-generation tokens */
} run_out;

static sp_emit_result collect(void *ud, int32_t t, bool drafted) {
    run_out *o = ud;
    o->drafted[o->n] = drafted;
    o->toks[o->n++] = t;
    if (o->stop_at && o->n == o->stop_at) return SP_EMIT_STOP;
    if (o->tok && sp_tokenizer_is_eog(o->tok, t)) return SP_EMIT_STOP;
    return SP_EMIT_CONTINUE;
}

typedef struct fixture {
    sp_model *m;
    sp_tokenizer *tok;
    sp_pool *pool;
    sp_workspace *ws;
    sp_drafter *ngram;
    sp_drafter *tree;            /* ngram with tree proposals (width 3) */
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
    f->ngram = sp_ngram_create(1, 3, &err);
    f->tree = sp_ngram_create_tree(1, 3, 3, &err);
    for (int k = 1; k <= SP_MAX_DRAFT + 1; k++) f->cheap.t[k] = 1.0 + 0.05 * (k - 1);
    f->cheap.valid = true;
    *state = f;
    return 0;
}
static int setup_smol(void **s) { return setup(s, SP_TEST_SMOLLM2); }
static int setup_gemma(void **s) { return setup(s, SP_TEST_GEMMA3); }
static int teardown(void **state) {
    fixture *f = *state;
    sp_drafter_free(f->ngram);
    sp_drafter_free(f->tree);
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

/* Runs one generation; returns its stats. */
static sp_spec_stats gen_with(fixture *f, sp_drafter *dr, const sp_tokens *p, float temp, int draft_max,
                              bool spec, int max_tokens, int n_ctx, run_out *o, sp_finish *fin, int *kv_n) {
    sp_err err;
    sp_sampler_params sp = sp_sampler_defaults();
    sp.temperature = temp; sp.top_k = 40; sp.top_p = 0.95f; sp.seed = 1234;
    sp_sampler *smp = sp_sampler_create(&sp, f->m->hp.n_vocab);
    sp_kv *kv = sp_kv_create(f->m, n_ctx);
    sp_target t = sp_target_full(f->m, f->tok, &sp);
    sp_draft *d = spec ? sp_draft_open(dr, &t, &err) : NULL;
    sp_gen_config cfg = { .max_tokens = max_tokens, .draft_max = spec ? draft_max : 0, .cost = &f->cheap };
    sp_spec_stats st;
    o->n = 0;
    int rc = sp_generate(f->m, kv, f->ws, smp, d, &cfg, p->ids, p->n, collect, o, &st, fin, &err);
    if (rc) fail_msg("generate: %s", err.msg);
    if (kv_n) *kv_n = kv->n;
    sp_draft_close(d);
    sp_kv_free(kv);
    sp_sampler_free(smp);
    return st;
}

static sp_spec_stats gen(fixture *f, const sp_tokens *p, float temp, int draft_max, bool spec,
                         int max_tokens, int n_ctx, run_out *o, sp_finish *fin, int *kv_n) {
    return gen_with(f, f->ngram, p, temp, draft_max, spec, max_tokens, n_ctx, o, fin, kv_n);
}

static void assert_same(const run_out *a, const run_out *b, const char *what) {
    if (a->n != b->n || memcmp(a->toks, b->toks, (size_t)a->n * sizeof(int32_t)) != 0) {
        int i = 0;
        while (i < a->n && i < b->n && a->toks[i] == b->toks[i]) i++;
        fail_msg("%s: speculative output differs from plain at token %d (lengths %d, %d)", what, i,
                 a->n, b->n);
    }
}

static void test_lossless(void **state) {
    fixture *f = *state;
    int64_t drafted = 0, accepted = 0, tree_accepted = 0;
    for (size_t i = 0; i < sizeof prompts / sizeof *prompts; i++) {
        sp_tokens p = { 0 };
        prompt_tokens(f, prompts[i], &p);
        const float temps[] = { 0.0f, 0.8f };
        for (int ti = 0; ti < 2; ti++) {
            run_out plain = { .tok = f->tok }, fixed = { .tok = f->tok }, adapt = { .tok = f->tok };
            run_out tree = { .tok = f->tok };
            sp_finish f1, f2, f3, f4;
            gen(f, &p, temps[ti], 0, false, 40, 1024, &plain, &f1, NULL);
            sp_spec_stats s2 = gen(f, &p, temps[ti], 5, true, 40, 1024, &fixed, &f2, NULL);
            sp_spec_stats s3 = gen(f, &p, temps[ti], SP_DRAFT_ADAPTIVE, true, 40, 1024, &adapt, &f3, NULL);
            sp_spec_stats s4 = gen_with(f, f->tree, &p, temps[ti], 8, true, 40, 1024, &tree, &f4, NULL);
            char what[64];
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, tree of width 3", i, (double)temps[ti]);
            assert_same(&plain, &tree, what);
            assert_int_equal(f1, f4);
            tree_accepted += s4.accepted;
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, draft 5", i, (double)temps[ti]);
            assert_same(&plain, &fixed, what);
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, adaptive", i, (double)temps[ti]);
            assert_same(&plain, &adapt, what);
            assert_int_equal(f1, f2);
            assert_int_equal(f1, f3);
            drafted += s2.drafted + s3.drafted;
            accepted += s2.accepted + s3.accepted;
        }
        sp_tokens_free(&p);
    }
    printf("# drafted %lld, accepted %lld; trees accepted %lld\n", (long long)drafted,
           (long long)accepted, (long long)tree_accepted);
    assert_true(accepted > 0);   /* the test really exercised accepted drafts */
    assert_true(tree_accepted > 0);
}

/* A stop on a token that came from an accepted draft (as an EOS or a stop
 * string would) ends the request there, with the same tokens and the same
 * cache length as plain decoding; max_tokens and the context limit too. */
static void test_edges(void **state) {
    fixture *f = *state;
    sp_tokens p = { 0 };
    prompt_tokens(f, prompts[2], &p);
    run_out probe = { 0 };
    sp_finish fin;
    gen(f, &p, 0.0f, 6, true, 60, 1024, &probe, &fin, NULL);
    int j = -1;
    for (int i = 3; i < probe.n; i++)
        if (probe.drafted[i] && i + 1 < probe.n && probe.drafted[i + 1]) { j = i; break; }
    if (j < 0) fail_msg("no accepted run to stop inside");
    run_out a = { .stop_at = j + 1 }, b = { .stop_at = j + 1 };
    int kva, kvb;
    sp_finish fa, fb;
    gen(f, &p, 0.0f, 0, false, 60, 1024, &a, &fa, &kva);
    gen(f, &p, 0.0f, 6, true, 60, 1024, &b, &fb, &kvb);
    assert_same(&a, &b, "stop inside an accepted run");
    assert_true(b.drafted[j]);
    assert_int_equal(fa, SP_FINISH_STOP);
    assert_int_equal(fb, SP_FINISH_STOP);
    assert_int_equal(kva, p.n + a.n - 1);
    assert_int_equal(kvb, kva);

    const int maxes[] = { 1, 2, 7 };
    for (int i = 0; i < 3; i++) {
        run_out x = { 0 }, y = { 0 };
        gen(f, &p, 0.0f, 0, false, maxes[i], 1024, &x, &fa, &kva);
        gen(f, &p, 0.0f, 6, true, maxes[i], 1024, &y, &fb, &kvb);
        assert_same(&x, &y, "max_tokens");
        assert_int_equal(x.n, maxes[i]);
        assert_int_equal(fa, SP_FINISH_LENGTH);
        assert_int_equal(fb, SP_FINISH_LENGTH);
        assert_int_equal(kva, kvb);
    }
    run_out x = { 0 }, y = { 0 };
    gen(f, &p, 0.0f, 0, false, 200, p.n + 12, &x, &fa, &kva);
    gen(f, &p, 0.0f, 6, true, 200, p.n + 12, &y, &fb, &kvb);
    assert_same(&x, &y, "context limit");
    assert_int_equal(fa, SP_FINISH_CONTEXT);
    assert_int_equal(fb, SP_FINISH_CONTEXT);
    assert_int_equal(x.n, 13);
    sp_tokens_free(&p);
}

/* Model drafters: a same-vocabulary draft model (the target itself, so
 * drafts are accepted), a draft model of another vocabulary (SmolLM2 for
 * Gemma: drafting on text), self-speculation, a combination, and
 * speculative sampling with q: all reproduce plain decoding exactly at
 * temperature 0, and token-match drafters also at 0.8 with a seed. */
static void check_drafter(fixture *f, const char *method, const sp_drafter_opts *o, bool t08) {
    sp_err err;
    sp_drafter *d = sp_drafter_create(method, o, &err);
    if (!d) fail_msg("%s: %s", method, err.msg);
    int64_t accepted = 0;
    for (size_t i = 1; i < sizeof prompts / sizeof *prompts; i++) {
        sp_tokens p = { 0 };
        prompt_tokens(f, prompts[i], &p);
        for (int ti = 0; ti < (t08 ? 2 : 1); ti++) {
            const float temp = ti ? 0.8f : 0.0f;
            run_out plain = { .tok = f->tok }, spec = { .tok = f->tok };
            sp_finish f1, f2;
            gen(f, &p, temp, 0, false, 24, 1024, &plain, &f1, NULL);
            sp_spec_stats st = gen_with(f, d, &p, temp, 4, true, 24, 1024, &spec, &f2, NULL);
            char what[96];
            snprintf(what, sizeof what, "%s, prompt %zu, T=%.1f", method, i, (double)temp);
            assert_same(&plain, &spec, what);
            assert_int_equal(f1, f2);
            accepted += st.accepted;
        }
        sp_tokens_free(&p);
    }
    printf("# %s: accepted %lld\n", method, (long long)accepted);
    assert_true(accepted > 0);
    sp_drafter_free(d);
}

static void test_model_drafters(void **state) {
    fixture *f = *state;
    const bool gemma = f->m->hp.arch == SP_ARCH_GEMMA3;
    sp_drafter_opts o = { .pool = f->pool, .target = f->m };
    /* the target as its own draft: every greedy draft is accepted */
    o.draft_model = sp_test_model_path(gemma ? SP_TEST_GEMMA3 : SP_TEST_SMOLLM2);
    check_drafter(f, "draft", &o, false);
    o.dm.sample = true;                  /* q returned: speculative sampling (T = 0 here) */
    check_drafter(f, "draft", &o, false);
    o.dm.sample = false;
    if (gemma) {                         /* cross-tokenizer: SmolLM2 drafts for Gemma */
        char path[4096];
        snprintf(path, sizeof path, "%s", sp_test_model_path(SP_TEST_SMOLLM2));
        o.draft_model = path;
        check_drafter(f, "draft", &o, true);
        check_drafter(f, "ngram,draft", &o, false);
    }
    o.self_layers = gemma ? "0-11,17" : "0-13,16-29";
    check_drafter(f, "self", &o, true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lossless, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_edges, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_lossless, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_edges, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_model_drafters, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_model_drafters, setup_gemma, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
