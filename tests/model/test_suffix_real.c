/* Losslessness of `suffix` speculation on the real models: for every prompt
 * of a small test set, suffix drafting (fixed and adaptive draft length)
 * emits exactly the tokens of plain decoding, at temperature 0 and at
 * temperature 0.8 with a fixed seed; a repeated request drafts from the
 * engine-wide trie (the earlier output) and is still exact. */
#include "spec_fixture.h"

/* Runs one generation (drafter NULL = plain); returns its stats. */
static sp_spec_stats gen(fixture *f, sp_drafter *d, const sp_tokens *p, float temp, int draft_max,
                         int max_tokens, run_out *o) {
    memset(o, 0, sizeof *o);
    return fx_gen(f, d, p, temp, draft_max, max_tokens, 1024, o, NULL, NULL);
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
    for (size_t i = 0; i < FX_N_PROMPTS; i++) {
        sp_tokens p = { 0 };
        fx_prompt(f, fx_prompts[i], &p);
        const float temps[] = { 0.0f, 0.8f };
        for (int ti = 0; ti < 2; ti++) {
            run_out plain = { .n = 0 }, fixed = { .n = 0 }, adapt = { .n = 0 };
            gen(f, NULL, &p, temps[ti], 0, 40, &plain);
            sp_spec_stats s2 = gen(f, d, &p, temps[ti], 5, 40, &fixed);
            sp_spec_stats s3 = gen(f, d, &p, temps[ti], SP_DRAFT_ADAPTIVE, 40, &adapt);
            char what[64];
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, draft 5", i, (double)temps[ti]);
            fx_assert_same(&plain, &fixed, what);
            snprintf(what, sizeof what, "prompt %zu, T=%.1f, adaptive", i, (double)temps[ti]);
            fx_assert_same(&plain, &adapt, what);
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
        fx_prompt(f, fx_prompts[2], &p);
        run_out plain = { .n = 0 }, first = { .n = 0 }, second = { .n = 0 };
        gen(f, NULL, &p, temps[ti], 0, 64, &plain);
        sp_spec_stats s1 = gen(f, d, &p, temps[ti], 8, 64, &first);
        sp_spec_stats s2 = gen(f, d, &p, temps[ti], 8, 64, &second);
        fx_assert_same(&plain, &first, "first request");
        fx_assert_same(&plain, &second, "repeated request");
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
        cmocka_unit_test_setup_teardown(test_lossless, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_repeat, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lossless, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_repeat, fx_setup_gemma, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
