/* Losslessness of speculative decoding on the real models: for every prompt
 * of a small test set, ngram speculation (fixed and adaptive draft length)
 * emits exactly the tokens of plain decoding, at temperature 0 and at
 * temperature 0.8 with a fixed seed; stops inside an accepted run, max_tokens
 * and the context limit behave exactly as in plain decoding.  Also: the
 * cost curve's cache directory (sp_cost_get). */
#include "spec_fixture.h"

#include <dirent.h>
#include <unistd.h>

/* ngram drafters, chain and tree of width 3, shared by the tests. */
static sp_drafter *g_ngram, *g_tree;

static sp_spec_stats gen_with(fixture *f, sp_drafter *dr, const sp_tokens *p, float temp, int draft_max,
                              bool spec, int max_tokens, int n_ctx, run_out *o, sp_finish *fin, int *kv_n) {
    const int stop_at = o->stop_at;
    memset(o, 0, sizeof *o);
    o->stop_at = stop_at;
    return fx_gen(f, spec ? dr : NULL, p, temp, draft_max, max_tokens, n_ctx, o, fin, kv_n);
}

static sp_spec_stats gen(fixture *f, const sp_tokens *p, float temp, int draft_max, bool spec,
                         int max_tokens, int n_ctx, run_out *o, sp_finish *fin, int *kv_n) {
    return gen_with(f, g_ngram, p, temp, draft_max, spec, max_tokens, n_ctx, o, fin, kv_n);
}

static void test_lossless(void **state) {
    fixture *f = *state;
    int64_t drafted = 0, accepted = 0, tree_accepted = 0;
    for (size_t i = 0; i < FX_N_PROMPTS; i++) {
        sp_tokens p = { 0 };
        fx_prompt(f, fx_prompts[i], &p);
        const float temps[] = { 0.0f, 0.8f };
        for (int ti = 0; ti < 2; ti++) {
            run_out plain = { .tok = f->tok }, fixed = { .tok = f->tok }, adapt = { .tok = f->tok };
            run_out tree = { .tok = f->tok };
            sp_finish f1, f2, f3, f4;
            gen(f, &p, temps[ti], 0, false, 40, 1024, &plain, &f1, NULL);
            sp_spec_stats s2 = gen(f, &p, temps[ti], 5, true, 40, 1024, &fixed, &f2, NULL);
            sp_spec_stats s3 = gen(f, &p, temps[ti], SP_DRAFT_ADAPTIVE, true, 40, 1024, &adapt, &f3, NULL);
            sp_spec_stats s4 = gen_with(f, g_tree, &p, temps[ti], 8, true, 40, 1024, &tree, &f4, NULL);
            char what[64];
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, tree of width 3", i, (double)temps[ti]);
            fx_assert_same(&plain, &tree, what);
            assert_int_equal(f1, f4);
            tree_accepted += s4.accepted;
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, draft 5", i, (double)temps[ti]);
            fx_assert_same(&plain, &fixed, what);
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, adaptive", i, (double)temps[ti]);
            fx_assert_same(&plain, &adapt, what);
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
    fx_prompt(f, fx_prompts[2], &p);
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
    fx_assert_same(&a, &b, "stop inside an accepted run");
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
        fx_assert_same(&x, &y, "max_tokens");
        assert_int_equal(x.n, maxes[i]);
        assert_int_equal(fa, SP_FINISH_LENGTH);
        assert_int_equal(fb, SP_FINISH_LENGTH);
        assert_int_equal(kva, kvb);
    }
    run_out x = { 0 }, y = { 0 };
    gen(f, &p, 0.0f, 0, false, 200, p.n + 12, &x, &fa, &kva);
    gen(f, &p, 0.0f, 6, true, 200, p.n + 12, &y, &fb, &kvb);
    fx_assert_same(&x, &y, "context limit");
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
static void check_drafter_n(fixture *f, const char *method, const sp_drafter_opts *o, bool t08,
                            int draft_max, int max_tokens) {
    sp_err err;
    sp_drafter *d = sp_drafter_create(method, o, &err);
    if (!d) fail_msg("%s: %s", method, err.msg);
    int64_t accepted = 0;
    for (size_t i = 1; i < FX_N_PROMPTS; i++) {
        sp_tokens p = { 0 };
        fx_prompt(f, fx_prompts[i], &p);
        for (int ti = 0; ti < (t08 ? 2 : 1); ti++) {
            const float temp = ti ? 0.8f : 0.0f;
            run_out plain = { .tok = f->tok }, spec = { .tok = f->tok };
            sp_finish f1, f2;
            gen(f, &p, temp, 0, false, max_tokens, 1024, &plain, &f1, NULL);
            sp_spec_stats st = gen_with(f, d, &p, temp, draft_max, true, max_tokens, 1024, &spec, &f2, NULL);
            char what[96];
            snprintf(what, sizeof what, "%s, prompt %zu, T=%.1f", method, i, (double)temp);
            fx_assert_same(&plain, &spec, what);
            assert_int_equal(f1, f2);
            accepted += st.accepted;
        }
        sp_tokens_free(&p);
    }
    printf("# %s (draft-max %d): accepted %lld\n", method, draft_max, (long long)accepted);
    assert_true(accepted > 0);
    sp_drafter_free(d);
}

static void check_drafter(fixture *f, const char *method, const sp_drafter_opts *o, bool t08) {
    check_drafter_n(f, method, o, t08, 4, 24);
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
    const sp_model_load_opts plain = { .pack = false };
    o.dm.load = &plain;                  /* a draft model loaded unpacked drafts losslessly too */
    check_drafter(f, "draft", &o, false);
    o.dm.load = NULL;
    if (gemma) {                         /* cross-tokenizer: SmolLM2 drafts for Gemma */
        char path[4096];
        snprintf(path, sizeof path, "%s", sp_test_model_path(SP_TEST_SMOLLM2));
        o.draft_model = path;
        check_drafter(f, "draft", &o, true);
        /* long drafts: a draft runs more tokens than the re-tokenized tail
         * (DM_TAIL), so the next alignment must start inside the text, not
         * among the drafted tokens (which once read a stale text offset) */
        check_drafter_n(f, "draft", &o, false, 12, 48);
        check_drafter(f, "ngram,draft", &o, false);
    }
    o.self_layers = gemma ? "0-11,17" : "0-13,16-29";
    check_drafter(f, "self", &o, true);
}

/* The one file of a directory (its path into buf); fails the test unless
 * there is exactly one. */
static void only_file(const char *dir, char *buf, size_t cap) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(buf, cap, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 1);
}

/* sp_cost_get with a cache directory saves the measured curve there as
 * one file and reads it back next time; with NULL it measures and writes
 * nothing. */
/* One sequence in slot 0 of c (drafter NULL = plain), collecting into o;
 * returns the tokens its cache holds at the end. */
static int run_in(fixture *f, sp_ctx *c, sp_drafter *d, const int32_t *prompt, int n, int keep, float temp,
                  run_out *o) {
    sp_err err;
    sp_seq_params sq = sp_seq_default_params();
    sq.prompt = prompt;
    sq.n_prompt = n;
    sq.max_tokens = 24;
    sq.sampling = fx_sampling(temp);
    sq.drafter = d;
    sq.keep_cached = keep;
    sq.emit = fx_collect;
    sq.ud = o;
    o->n = 0;
    o->tok = f->tok;
    const int id = sp_ctx_add(c, &sq, &err);
    if (id < 0) fail_msg("add: %s", err.msg);
    while (sp_ctx_seq_finish(c, id) == SP_FINISH_NONE) sp_ctx_step(c);
    if (sp_ctx_seq_finish(c, id) == SP_FINISH_ERROR) fail_msg("generate: %s", sp_ctx_seq_error(c, id));
    const int cached = sp_ctx_seq_n_cached(c, id);
    sp_ctx_remove(c, id);
    return cached;
}

/* A second turn that keeps the first turn's cache (keep_cached) emits what
 * a cold start over the whole conversation emits (T = 0 and seeded 0.8,
 * plain and ngram); keeping more than the slot holds is refused. */
static void test_keep_cached(void **state) {
    fixture *f = *state;
    sp_err err;
    sp_tokens p1 = { 0 }, p2 = { 0 };
    fx_prompt(f, "Name three fruits.", &p1);
    const char *more = "\nNow name three vegetables, one per line.\n";
    assert_int_equal(sp_tokenize(f->tok, more, strlen(more), false, false, &p2, &err), 0);
    sp_drafter *ng = sp_drafter_create("ngram", NULL, &err);
    for (int ti = 0; ti < 2; ti++)
        for (int di = 0; di < 2; di++) {
            const float temp = ti ? 0.8f : 0.0f;
            sp_drafter *d = di ? ng : NULL;
            run_out a, b, cold;
            sp_ctx *c = fx_ctx(f, 1, 512);
            const int n_a = run_in(f, c, d, p1.ids, p1.n, 0, temp, &a);
            assert_int_equal(n_a, p1.n + a.n - 1);          /* the last token is pending, not cached */
            /* the whole conversation: the first turn's cached tokens, then the second prompt */
            int32_t all[512];
            const int n_all = n_a + p2.n;
            memcpy(all, p1.ids, (size_t)p1.n * sizeof(int32_t));
            memcpy(all + p1.n, a.toks, (size_t)(n_a - p1.n) * sizeof(int32_t));
            memcpy(all + n_a, p2.ids, (size_t)p2.n * sizeof(int32_t));
            const int n_b = run_in(f, c, d, all, n_all, n_a, temp, &b);
            assert_int_equal(n_b, n_all + b.n - 1);
            sp_ctx_free(c);
            /* cold: all of it prefilled at once */
            c = fx_ctx(f, 1, 512);
            run_in(f, c, d, all, n_all, 0, temp, &cold);
            fx_assert_same(&cold, &b, di ? "kept cache, ngram" : "kept cache, plain");
            /* more than the slot holds; the whole prompt */
            sp_seq_params sq = sp_seq_default_params();
            sq.prompt = all;
            sq.n_prompt = n_all;
            sq.keep_cached = n_all + cold.n + 10;
            sq.emit = fx_collect;
            sq.ud = &b;
            assert_int_equal(sp_ctx_add(c, &sq, &err), -1);
            assert_non_null(strstr(err.msg, "cannot keep"));
            sq.keep_cached = n_all;
            assert_int_equal(sp_ctx_add(c, &sq, &err), -1);
            assert_non_null(strstr(err.msg, "whole prompt"));
            sp_ctx_free(c);
        }
    sp_drafter_free(ng);
    sp_tokens_free(&p1);
    sp_tokens_free(&p2);
}

static void test_cost_cache(void **state) {
    fixture *f = *state;
    char dir[] = "/tmp/specula-cost-XXXXXX", file[4096];
    assert_non_null(mkdtemp(dir));
    sp_err err;
    sp_cost_curve c;
    assert_int_equal(sp_cost_get(f->m, f->ws, 2, dir, &c, &err), 0);
    assert_true(c.valid);
    only_file(dir, file, sizeof file);
    FILE *fp = fopen(file, "w");          /* a curve no measurement gives: read back, not measured */
    assert_non_null(fp);
    for (int k = 1; k <= SP_MAX_DRAFT + 1; k++) fprintf(fp, "%d %d\n", k, k);
    fclose(fp);
    assert_int_equal(sp_cost_get(f->m, f->ws, 2, dir, &c, &err), 0);
    for (int k = 1; k <= SP_MAX_DRAFT + 1; k++) assert_true(c.t[k] == k);
    assert_int_equal(sp_cost_get(f->m, f->ws, 2, NULL, &c, &err), 0);   /* measured: below 1 s */
    assert_true(c.valid && c.t[1] < 1.0);
    only_file(dir, file, sizeof file);   /* nothing new */
    assert_int_equal(unlink(file), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void) {
    sp_err err;
    g_ngram = sp_ngram_create(1, 3, &err);
    g_tree = sp_ngram_create_tree(1, 3, 3, &err);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lossless, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_edges, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lossless, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_edges, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_model_drafters, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_model_drafters, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_cost_cache, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_keep_cached, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_keep_cached, fx_setup_gemma, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sp_drafter_free(g_ngram);
    sp_drafter_free(g_tree);
    return rc;
}
