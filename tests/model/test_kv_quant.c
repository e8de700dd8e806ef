/* Quantized KV caches (--cache-type-k/-v q8_0|q4_0, --kv-quant-start) on
 * the real models: rows are batch-invariant (a window of rows equals the
 * same rows run one at a time, bit for bit), the types really change the
 * numbers and the memory, speculation stays exact against the target as
 * configured (chains, trees, the eagle head; T = 0 and seeded 0.8), a
 * prefix-cache hit equals a cold run, and a cache saved under one KV
 * scheme is refused by an engine of another. */
#include "spec_fixture.h"

#include "cache/cache.h"

#include <unistd.h>

static const sp_kv_types SCHEMES[] = {
    { SP_Q8_0, SP_Q8_0, 0 },
    { SP_Q4_0, SP_Q4_0, 0 },
    { SP_Q8_0, SP_Q4_0, 2 },         /* mixed, first two layers F16 */
};
#define N_SCHEMES ((int)(sizeof SCHEMES / sizeof *SCHEMES))

static void tokens(int32_t *t, int n, int V) {
    uint32_t s = 99;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = (int32_t)(s % (uint32_t)V);
    }
}

/* A window of 6 rows after a 12-token prefill gives the logits of 18
 * one-row passes exactly; F16 gives other logits; memory per token. */
static void test_batch_invariant(void **state) {
    fixture *f = *state;
    const sp_model *m = f->m;
    const int V = m->hp.n_vocab;
    int32_t t[18];
    tokens(t, 18, V);
    sp_err err;
    sp_workspace *ws = sp_workspace_create(m, 64, f->pool);
    float *win = malloc((size_t)6 * V * sizeof(float)), *one = malloc((size_t)6 * V * sizeof(float));
    float *f16 = malloc((size_t)6 * V * sizeof(float));
    sp_kv *c = sp_kv_create(m, 32);
    assert_int_equal(sp_model_forward(m, c, ws, t, 12, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, c, ws, t + 12, 6, SP_LOGITS_ALL, f16, &err), 0);
    sp_kv_free(c);
    for (int s = 0; s < N_SCHEMES; s++) {
        assert_int_equal(sp_kv_types_check(m, &SCHEMES[s], &err), 0);
        sp_kv *a = sp_kv_create_typed(m, 32, &SCHEMES[s]), *b = sp_kv_create_typed(m, 32, &SCHEMES[s]);
        assert_false(a->f16);
        assert_int_equal(sp_model_forward(m, a, ws, t, 12, SP_LOGITS_NONE, NULL, &err), 0);
        assert_int_equal(sp_model_forward(m, a, ws, t + 12, 6, SP_LOGITS_ALL, win, &err), 0);
        for (int i = 0; i < 18; i++)
            assert_int_equal(sp_model_forward(m, b, ws, t + i, 1, i >= 12 ? SP_LOGITS_LAST : SP_LOGITS_NONE,
                                              i >= 12 ? one + (size_t)(i - 12) * V : NULL, &err), 0);
        assert_memory_equal(win, one, (size_t)6 * V * sizeof(float));
        assert_true(memcmp(win, f16, (size_t)6 * V * sizeof(float)) != 0);
        sp_kv_free(a);
        sp_kv_free(b);
    }
    /* memory per token: q8_0 34/64 of F16, q4_0 18/64 */
    const size_t bf = sp_kv_bytes_per_token(m, NULL), b8 = sp_kv_bytes_per_token(m, &SCHEMES[0]),
                 b4 = sp_kv_bytes_per_token(m, &SCHEMES[1]);
    assert_int_equal(b8 * 64, bf * 34);
    assert_int_equal(b4 * 64, bf * 18);
    /* refused: a type without a quantized cache, a start beyond the layers */
    sp_kv_types bad = { SP_Q5_0, SP_F16, 0 };
    assert_int_equal(sp_kv_types_check(m, &bad, &err), -1);
    bad = (sp_kv_types){ SP_Q8_0, SP_Q8_0, m->hp.n_layer + 1 };
    assert_int_equal(sp_kv_types_check(m, &bad, &err), -1);
    assert_non_null(strstr(err.msg, "layers"));
    free(win);
    free(one);
    free(f16);
    sp_workspace_free(ws);
}

static sp_ctx *ctx_typed(fixture *f, const sp_kv_types *t, size_t cache) {
    sp_err err;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 1024;
    cp.batch_rows = 64;
    cp.pool = f->pool;
    cp.cost = &f->cheap;
    cp.kv_types = *t;
    cp.cache_bytes = cache;
    sp_ctx *c = sp_ctx_create(f->m, f->tok, &cp, &err);
    if (!c) fail_msg("context: %s", err.msg);
    return c;
}

static sp_spec_stats gen_in(fixture *f, sp_ctx *c, sp_drafter *d, const sp_tokens *p, float temp, run_out *o) {
    sp_err err;
    sp_seq_params sq = sp_seq_default_params();
    sq.prompt = p->ids;
    sq.n_prompt = p->n;
    sq.max_tokens = 32;
    sq.sampling = fx_sampling(temp);
    sq.drafter = d;
    sq.emit = fx_collect;
    sq.ud = o;
    o->n = 0;
    o->tok = f->tok;
    sp_spec_stats st;
    if (sp_ctx_generate(c, &sq, &st, NULL, &err)) fail_msg("generate: %s", err.msg);
    return st;
}

/* Speculation (ngram chains and trees, the shipped eagle head) emits
 * plain decoding's tokens over the same quantized cache; a repeated prompt
 * hits the prefix cache and emits the same again. */
static void test_spec_and_cache(void **state) {
    fixture *f = *state;
    sp_err err;
    sp_drafter *ng = sp_ngram_create(1, 3, &err), *tree = sp_ngram_create_tree(1, 3, 3, &err);
    const sp_eagle_opts eo = { .n_ctx = 1024, .min_prob = -1, .tree_width = 1 };
    sp_drafter *eagle = sp_eagle_create(f->m->hp.arch == SP_ARCH_GEMMA3 ? "drafters/gemma3-270m.eagle3.gguf"
                                                                       : "drafters/smollm2-135m.eagle3.gguf",
                                        f->m, &eo, f->pool, &err);
    assert_non_null(eagle);
    sp_drafter *ds[3] = { ng, tree, eagle };
    int64_t accepted = 0;
    for (int s = 0; s < N_SCHEMES; s++)
        for (size_t pi = 0; pi < 2; pi++) {
            sp_tokens p = { 0 };
            fx_prompt(f, fx_prompts[pi], &p);
            for (int ti = 0; ti < 2; ti++) {
                const float temp = ti ? 0.8f : 0.0f;
                sp_ctx *c = ctx_typed(f, &SCHEMES[s], 32u << 20);
                run_out plain, o;
                gen_in(f, c, NULL, &p, temp, &plain);
                for (int di = 0; di < 3; di++) {
                    const sp_spec_stats st = gen_in(f, c, ds[di], &p, temp, &o);
                    char what[96];
                    snprintf(what, sizeof what, "scheme %d, prompt %zu, T=%.1f, %s", s, pi, (double)temp,
                             di == 0 ? "ngram" : di == 1 ? "ngram tree" : "eagle");
                    fx_assert_same(&plain, &o, what);
                    /* the prefix cache served the prompt, except to eagle: it needs the hidden
                     * states of every row its state lacks, and no eagle state is cached yet */
                    assert_int_equal(st.n_cached, di == 2 ? 0 : p.n - 1);
                    accepted += st.accepted;
                }
                sp_ctx_free(c);
            }
            sp_tokens_free(&p);
        }
    printf("# accepted %lld draft tokens over quantized caches\n", (long long)accepted);
    assert_true(accepted > 0);
    sp_drafter_free(ng);
    sp_drafter_free(tree);
    sp_drafter_free(eagle);
}

/* A prefix cache saved under q8_0 rows is refused by an F16 engine and by
 * one that quantizes from another layer, and loads into its own scheme. */
static void test_cache_identity(void **state) {
    fixture *f = *state;
    sp_err err;
    char path[64];
    snprintf(path, sizeof path, "/tmp/specula-kvq-%d.spcache", (int)getpid());
    sp_tokens p = { 0 };
    fx_prompt(f, fx_prompts[0], &p);
    sp_ctx *c = ctx_typed(f, &SCHEMES[0], 32u << 20);
    run_out a, b;
    gen_in(f, c, NULL, &p, 0.0f, &a);
    assert_int_equal(sp_pcache_save(sp_ctx_cache(c), path, &err), 0);
    sp_ctx_free(c);
    const sp_kv_types f16 = { SP_F16, SP_F16, 0 }, later = { SP_Q8_0, SP_Q8_0, 1 };
    c = ctx_typed(f, &f16, 32u << 20);
    assert_int_equal(sp_pcache_load_file(sp_ctx_cache(c), path, f->m->hp.n_vocab, &err), -1);
    assert_non_null(strstr(err.msg, "kv:q8_0/q8_0@0"));
    sp_ctx_free(c);
    c = ctx_typed(f, &later, 32u << 20);
    assert_int_equal(sp_pcache_load_file(sp_ctx_cache(c), path, f->m->hp.n_vocab, &err), -1);
    sp_ctx_free(c);
    c = ctx_typed(f, &SCHEMES[0], 32u << 20);
    assert_int_equal(sp_pcache_load_file(sp_ctx_cache(c), path, f->m->hp.n_vocab, &err), 0);
    const sp_spec_stats st = gen_in(f, c, NULL, &p, 0.0f, &b);
    fx_assert_same(&a, &b, "q8_0 cache loaded from disk");
    assert_int_equal(st.n_cached, p.n - 1);
    sp_ctx_free(c);
    unlink(path);
    sp_tokens_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batch_invariant, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_batch_invariant, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_spec_and_cache, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_spec_and_cache, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_cache_identity, fx_setup_smol, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
