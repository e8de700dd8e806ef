/* The prefix cache in the engine (sp_ctx_params.cache_bytes) on the real
 * models: a request that finds its prompt, or a conversation that extends
 * an earlier one, in the cache emits exactly what a cold start emits, for
 * plain decoding and every drafter (ngram, suffix, self, the shipped eagle
 * head, suffix+eagle), at T = 0 and seeded T = 0.8; drafters that keep
 * state resume from their checkpoint; a checkpoint that is not theirs is
 * refused and the request runs cold, still exact; a request admitted while
 * another with the same prompt runs reuses its rows; a budget too small
 * for everything still gives exact output. */
#include "spec_fixture.h"

#include "cache/cache.h"

static sp_ctx *cache_ctx(fixture *f, int n_slots, size_t bytes) {
    sp_err err;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_slots = n_slots;
    cp.n_ctx = 1024;
    cp.batch_rows = 64;
    cp.pool = f->pool;
    cp.cost = &f->cheap;
    cp.cache_bytes = bytes;
    sp_ctx *c = sp_ctx_create(f->m, f->tok, &cp, &err);
    if (!c) fail_msg("context: %s", err.msg);
    return c;
}

static sp_seq_params seq_of(fixture *f, sp_drafter *d, const int32_t *prompt, int n, float temp, run_out *o) {
    sp_seq_params sq = sp_seq_default_params();
    sq.prompt = prompt;
    sq.n_prompt = n;
    sq.max_tokens = 24;
    sq.sampling = fx_sampling(temp);
    sq.drafter = d;
    /* a fixed draft length: the adaptive one reads the clock (the drafter's
     * measured cost), so under load a cold and a warm run could draft
     * differently although their drafters hold the same state */
    sq.draft_max = d ? 4 : 0;
    sq.emit = fx_collect;
    sq.ud = o;
    o->n = 0;
    o->tok = f->tok;
    return sq;
}

/* One sequence in c until it ends; returns its stats (*kv_n: the rows its
 * cache holds at the end). */
static sp_spec_stats run_c(fixture *f, sp_ctx *c, sp_drafter *d, const int32_t *prompt, int n, float temp,
                           run_out *o, int *kv_n) {
    sp_err err;
    sp_seq_params sq = seq_of(f, d, prompt, n, temp, o);
    const int id = sp_ctx_add(c, &sq, &err);
    if (id < 0) fail_msg("add: %s", err.msg);
    while (sp_ctx_seq_finish(c, id) == SP_FINISH_NONE) sp_ctx_step(c);
    if (sp_ctx_seq_finish(c, id) == SP_FINISH_ERROR) fail_msg("generate: %s", sp_ctx_seq_error(c, id));
    const sp_spec_stats st = *sp_ctx_seq_stats(c, id);
    if (kv_n) *kv_n = sp_ctx_seq_n_cached(c, id);
    sp_ctx_remove(c, id);
    return st;
}

/* A cold run: a context of its own without a cache. */
static sp_spec_stats run_cold(fixture *f, sp_drafter *d, const int32_t *prompt, int n, float temp, run_out *o) {
    sp_ctx *c = cache_ctx(f, 1, 0);
    const sp_spec_stats st = run_c(f, c, d, prompt, n, temp, o, NULL);
    assert_int_equal(st.n_cached, 0);
    sp_ctx_free(c);
    return st;
}

/* A drafter resumed from its checkpoint drafts exactly what it drafts
 * cold: the same proposals, so the same counts (drafters whose state
 * depends only on the request; suffix also learns across requests). */
static void same_drafting(const sp_spec_stats *cold, const sp_spec_stats *warm, const char *what) {
    if (cold->drafted != warm->drafted || cold->accepted != warm->accepted || cold->rounds != warm->rounds)
        fail_msg("%s: resumed drafter drafted %lld, accepted %lld in %lld rounds; cold %lld, %lld in %lld", what,
                 (long long)warm->drafted, (long long)warm->accepted, (long long)warm->rounds,
                 (long long)cold->drafted, (long long)cold->accepted, (long long)cold->rounds);
}

static const char *head_path(const fixture *f) {
    return f->m->hp.arch == SP_ARCH_GEMMA3 ? "drafters/gemma3-270m.eagle3.gguf" : "drafters/smollm2-135m.eagle3.gguf";
}

static sp_drafter *make_eagle(fixture *f) {
    sp_err err;
    const sp_eagle_opts eo = { .n_ctx = 1024, .min_prob = -1, .tree_width = 1 };
    sp_drafter *d = sp_eagle_create(head_path(f), f->m, &eo, f->pool, &err);
    if (!d) fail_msg("eagle: %s", err.msg);
    return d;
}

enum { N_DRAFTERS = 6 };

/* plain, ngram, suffix, self, eagle, suffix+eagle */
static void make_drafters(fixture *f, sp_drafter **d, const char **names) {
    sp_err err;
    const bool gemma = f->m->hp.arch == SP_ARCH_GEMMA3;
    sp_drafter_opts o = { .pool = f->pool, .target = f->m };
    o.self_layers = gemma ? "0-11,17" : "0-13,16-29";
    static const char *const nm[N_DRAFTERS] = { "plain", "ngram", "suffix", "self", "eagle", "suffix+eagle" };
    d[0] = NULL;
    d[1] = sp_drafter_create("ngram", &o, &err);
    d[2] = sp_drafter_create("suffix", &o, &err);
    d[3] = sp_drafter_create("self", &o, &err);
    d[4] = make_eagle(f);
    sp_drafter *subs[2] = { sp_drafter_create("suffix", &o, &err), make_eagle(f) };
    d[5] = sp_combine_create(subs, 2, &err);
    for (int i = 0; i < N_DRAFTERS; i++) {
        names[i] = nm[i];
        if (i && !d[i]) fail_msg("drafter %s: %s", nm[i], err.msg);
    }
}

static void free_drafters(sp_drafter **d) {
    for (int i = 0; i < N_DRAFTERS; i++) sp_drafter_free(d[i]);
}

static void fixture_prompts(fixture *f, sp_tokens *p1, sp_tokens *p2) {
    fx_prompt(f, "Here is a list of the planets of the solar system: Mercury, Venus, Earth, Mars, Jupiter, "
                 "Saturn, Uranus and Neptune. Which of them are gas giants? Answer in one sentence.", p1);
    sp_err err;
    const char *more = "\nNow list the rocky planets, one per line.\n";
    assert_int_equal(sp_tokenize(f->tok, more, strlen(more), false, false, p2, &err), 0);
}

/* The same prompt twice, then a conversation that extends the first: each
 * warm run equals its cold run; rows and drafter states are reused. */
static void test_hit_equals_cold(void **state) {
    fixture *f = *state;
    sp_drafter *d[N_DRAFTERS];
    const char *names[N_DRAFTERS];
    make_drafters(f, d, names);
    sp_tokens p1 = { 0 }, p2 = { 0 };
    fixture_prompts(f, &p1, &p2);
    for (int ti = 0; ti < 2; ti++)
        for (int di = 0; di < N_DRAFTERS; di++) {
            const float temp = ti ? 0.8f : 0.0f;
            char what[96];
            const bool keeps = d[di] && d[di]->keeps_state;
            run_out cold1, a, b, cold2, w;
            const sp_spec_stats sc1 = run_cold(f, d[di], p1.ids, p1.n, temp, &cold1);
            const bool exact_state = di == 3 || di == 4;   /* self, eagle */
            sp_ctx *c = cache_ctx(f, 2, 64u << 20);
            int n_a;
            sp_spec_stats st = run_c(f, c, d[di], p1.ids, p1.n, temp, &a, &n_a);
            snprintf(what, sizeof what, "%s T=%.1f first run", names[di], (double)temp);
            fx_assert_same(&cold1, &a, what);
            assert_int_equal(st.n_cached, 0);
            const int64_t ck0 = sp_pcache_get_stats(sp_ctx_cache(c)).ckpt_hits;
            st = run_c(f, c, d[di], p1.ids, p1.n, temp, &b, NULL);
            snprintf(what, sizeof what, "%s T=%.1f repeated prompt", names[di], (double)temp);
            fx_assert_same(&cold1, &b, what);
            assert_int_equal(st.n_cached, p1.n - 1);     /* all but the row that gives the first logits */
            assert_int_equal(st.n_prompt, 1);
            const int64_t ck1 = sp_pcache_get_stats(sp_ctx_cache(c)).ckpt_hits;
            assert_int_equal(ck1 - ck0, keeps ? 1 : 0);   /* a drafter with state resumed warm */
            if (exact_state) same_drafting(&sc1, &st, what);
            /* the conversation goes on: first turn, its answer, a new message */
            int32_t all[1024];
            const int n_all = n_a + p2.n;
            memcpy(all, p1.ids, (size_t)p1.n * sizeof(int32_t));
            memcpy(all + p1.n, a.toks, (size_t)(n_a - p1.n) * sizeof(int32_t));
            memcpy(all + n_a, p2.ids, (size_t)p2.n * sizeof(int32_t));
            const sp_spec_stats sc2 = run_cold(f, d[di], all, n_all, temp, &cold2);
            st = run_c(f, c, d[di], all, n_all, temp, &w, NULL);
            snprintf(what, sizeof what, "%s T=%.1f next turn", names[di], (double)temp);
            fx_assert_same(&cold2, &w, what);
            if (exact_state) same_drafting(&sc2, &st, what);
            /* the answer's rows came too, and a drafter with state resumes
             * from its state at the end of the first turn */
            assert_int_equal(st.n_cached, n_a);
            assert_int_equal(sp_pcache_get_stats(sp_ctx_cache(c)).ckpt_hits - ck1, keeps ? 1 : 0);
            sp_ctx_free(c);
        }
    free_drafters(d);
    sp_tokens_free(&p1);
    sp_tokens_free(&p2);
}

/* Checkpoints that are not the drafter's: another drafter's (another
 * namespace) is never handed out; bytes under its namespace that another
 * drafter or another target wrote are refused by the restore, and the
 * request starts cold (no rows for a drafter that reads hidden states),
 * with exact output. */
static void test_foreign_checkpoint(void **state) {
    fixture *f = *state;
    sp_err err;
    sp_tokens p1 = { 0 }, p2 = { 0 };
    fixture_prompts(f, &p1, &p2);
    sp_drafter *eagle = make_eagle(f);
    sp_drafter_opts o = { .pool = f->pool, .target = f->m };
    sp_drafter *ng = sp_drafter_create("ngram", &o, &err);
    run_out cold, got;
    run_cold(f, eagle, p1.ids, p1.n, 0.0f, &cold);
    sp_ctx *c = cache_ctx(f, 1, 64u << 20);
    run_c(f, c, ng, p1.ids, p1.n, 0.0f, &got, NULL);       /* the prompt's rows, no eagle state */
    sp_pcache *pc = sp_ctx_cache(c);
    const uint8_t *blob;
    size_t len;
    assert_int_equal(sp_pcache_find_ckpt(pc, p1.ids, p1.n, p1.n, eagle->ns, &blob, &len), 0);
    /* an ngram checkpoint filed under eagle's namespace (a corrupt entry) */
    const sp_target t = sp_target_of(f->m);
    sp_draft *nd = sp_draft_open(ng, &t, &err);
    assert_non_null(nd);
    assert_int_equal(ng->ops->prefill(nd, p1.ids, p1.n, NULL, &err), 0);
    uint8_t *nb;
    size_t nlen;
    assert_int_equal(sp_draft_checkpoint(nd, &nb, &nlen, &err), 0);
    sp_draft_close(nd);
    assert_int_equal(sp_pcache_put_ckpt(pc, p1.ids, p1.n, eagle->ns, nb, nlen), 0);
    free(nb);
    sp_spec_stats st = run_c(f, c, eagle, p1.ids, p1.n, 0.0f, &got, NULL);
    fx_assert_same(&cold, &got, "eagle after a refused checkpoint");
    assert_int_equal(st.n_cached, 0);                      /* cold: it needs every row's hidden states */
    /* its own checkpoint now sits there (put after its prefill): a state
     * written for another target carries that target in its namespace */
    assert_true(sp_pcache_find_ckpt(pc, p1.ids, p1.n, p1.n, eagle->ns, &blob, &len) == p1.n);
    uint8_t *other = malloc(len + 64);
    const char *nl = memchr(blob, '\n', len);
    assert_non_null(nl);
    const size_t hdr = (size_t)(nl - (const char *)blob);
    char ns[128];
    snprintf(ns, sizeof ns, "%.*s", (int)hdr, (const char *)blob);
    char *fp = strstr(ns, f->m->fingerprint);
    assert_non_null(fp);
    fp[0] = fp[0] == '0' ? '1' : '0';                      /* another target's fingerprint */
    memcpy(other, ns, hdr);
    memcpy(other + hdr, blob + hdr, len - hdr);
    uint8_t *mine = malloc(len);
    memcpy(mine, blob, len);
    assert_int_equal(sp_pcache_put_ckpt(pc, p1.ids, p1.n, eagle->ns, other, len), 0);
    free(other);
    st = run_c(f, c, eagle, p1.ids, p1.n, 0.0f, &got, NULL);
    fx_assert_same(&cold, &got, "eagle after another target's checkpoint");
    assert_int_equal(st.n_cached, 0);
    /* its own, cut short */
    assert_int_equal(sp_pcache_put_ckpt(pc, p1.ids, p1.n, eagle->ns, mine, len - 7), 0);
    free(mine);
    st = run_c(f, c, eagle, p1.ids, p1.n, 0.0f, &got, NULL);
    fx_assert_same(&cold, &got, "eagle after a truncated checkpoint");
    assert_int_equal(st.n_cached, 0);
    /* and the whole one it left: resumed */
    st = run_c(f, c, eagle, p1.ids, p1.n, 0.0f, &got, NULL);
    fx_assert_same(&cold, &got, "eagle resumed");
    assert_int_equal(st.n_cached, p1.n - 1);
    sp_ctx_free(c);
    sp_drafter_free(eagle);
    sp_drafter_free(ng);
    sp_tokens_free(&p1);
    sp_tokens_free(&p2);
}

/* A request admitted while another with the same prompt decodes reuses
 * the rows the first left after its prefill; both equal cold.  A budget
 * that holds only part of the rows still gives exact output. */
static void test_running_and_small_budget(void **state) {
    fixture *f = *state;
    sp_err err;
    sp_tokens p1 = { 0 }, p2 = { 0 };
    fixture_prompts(f, &p1, &p2);
    run_out cold, a, b;
    run_cold(f, NULL, p1.ids, p1.n, 0.8f, &cold);
    sp_ctx *c = cache_ctx(f, 2, 64u << 20);
    sp_seq_params qa = seq_of(f, NULL, p1.ids, p1.n, 0.8f, &a);
    const int ia = sp_ctx_add(c, &qa, &err);
    assert_true(ia >= 0);
    while (sp_ctx_seq_prefilling(c, ia)) sp_ctx_step(c);
    sp_seq_params qb = seq_of(f, NULL, p1.ids, p1.n, 0.8f, &b);
    const int ib = sp_ctx_add(c, &qb, &err);
    assert_true(ib >= 0);
    while (sp_ctx_step(c) > 0) {}
    assert_int_equal(sp_ctx_seq_stats(c, ib)->n_cached, p1.n - 1);
    sp_ctx_remove(c, ia);
    sp_ctx_remove(c, ib);
    fx_assert_same(&cold, &a, "first of two");
    fx_assert_same(&cold, &b, "second, from the first's rows");
    sp_ctx_free(c);
    /* room for about half the prompt's rows */
    sp_pcache *probe = sp_pcache_create(f->m->hp.n_layer, f->m->hp.n_head_kv * f->m->hp.head_dim, 1, "");
    const size_t half = sp_pcache_token_bytes(probe) * (size_t)p1.n / 2;
    sp_pcache_free(probe);
    c = cache_ctx(f, 1, half);
    run_c(f, c, NULL, p1.ids, p1.n, 0.8f, &a, NULL);
    const sp_spec_stats st = run_c(f, c, NULL, p1.ids, p1.n, 0.8f, &b, NULL);
    fx_assert_same(&cold, &a, "small budget, first");
    fx_assert_same(&cold, &b, "small budget, second");
    assert_true(st.n_cached > 0 && st.n_cached <= p1.n / 2 + 1);
    assert_true(sp_pcache_get_stats(sp_ctx_cache(c)).bytes <= half);
    sp_ctx_free(c);
    sp_tokens_free(&p1);
    sp_tokens_free(&p2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hit_equals_cold, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_hit_equals_cold, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_foreign_checkpoint, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_foreign_checkpoint, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_running_and_small_budget, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_running_and_small_budget, fx_setup_gemma, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
