/* The example of include/specula.h, compiled against the public header
 * only, generates the same text with and without speculation. */
#include "test_util.h"
#include <specula.h>

typedef struct { int32_t t[64]; int n; } out_t;
static sp_emit_result on_token(void *ud, int32_t tok, bool drafted) {
    (void)drafted;
    out_t *o = ud;
    o->t[o->n++] = tok;
    return SP_EMIT_CONTINUE;
}

static void test_example(void **st) {
    (void)st;
    sp_err err;
    sp_model *m = sp_model_load(sp_test_model_path(SP_TEST_SMOLLM2), &err);
    assert_non_null(m);
    sp_tokenizer *tok = sp_tokenizer_load(m->gguf, &err);
    assert_non_null(tok);
    sp_pool *pool = sp_pool_create(sp_physical_cores());
    sp_workspace *ws = sp_workspace_create(m, 256, pool);
    sp_drafter *ngram = sp_ngram_create(1, 3, &err);
    sp_target t = sp_target_of(m);
    const char *text = "a b c d e f a b c d e f a b c";
    sp_tokens prompt = { 0 };
    assert_int_equal(sp_tokenize(tok, text, strlen(text), sp_tokenizer_add_bos(tok), true, &prompt, &err), 0);
    out_t outs[2] = { { .n = 0 }, { .n = 0 } };
    for (int spec = 0; spec < 2; spec++) {
        sp_kv *kv = sp_kv_create(m, 256);
        sp_sampler_params sp = sp_sampler_defaults();
        sp_sampler *smp = sp_sampler_create(&sp, m->hp.n_vocab);
        sp_draft *d = spec ? sp_draft_open(ngram, &t, &err) : NULL;
        sp_gen_config cfg = { .max_tokens = 16, .draft_max = spec ? 8 : 0 };
        sp_spec_stats stats;
        sp_finish fin;
        assert_int_equal(sp_generate(m, kv, ws, smp, d, &cfg, prompt.ids, prompt.n, on_token, &outs[spec],
                                     &stats, &fin, &err), 0);
        assert_int_equal(fin, SP_FINISH_LENGTH);
        if (spec) assert_true(stats.accepted > 0);
        sp_draft_close(d);
        sp_sampler_free(smp);
        sp_kv_free(kv);
    }
    assert_int_equal(outs[0].n, 16);
    assert_int_equal(outs[1].n, 16);
    assert_memory_equal(outs[0].t, outs[1].t, sizeof outs[0].t);
    sp_tokens_free(&prompt);
    sp_drafter_free(ngram);
    sp_workspace_free(ws);
    sp_pool_free(pool);
    sp_tokenizer_free(tok);
    sp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_example) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
