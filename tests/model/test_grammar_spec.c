/* Speculation under a grammar on the real models: every drafter, with and
 * without grammar-forced spans, at T = 0 and seeded T = 0.8, emits exactly
 * the tokens of plain constrained decoding; the output matches the
 * grammar; forced spans are drafted and counted; a dead end fails the
 * sequence with a message instead of hanging. */
#include "spec_fixture.h"
#include "grammar/grammar.h"

#include <math.h>

static const char contact_schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"company\":{\"type\":\"string\"},"
    "\"email\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},\"employees\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3}},"
    "\"required\":[\"name\",\"company\",\"email\",\"city\",\"employees\",\"tags\"],\"additionalProperties\":false}";

static const char *const prompts[] = {
    "Extract the details as a JSON object with the keys name, company, email, city, employees, tags.\n\n"
    "Hi, this is Maria Ostrander from Pellham Logistics in Leeds (maria@pellham.example). We are 120 "
    "people and we work in freight and warehousing.",
    "Give me a JSON object describing a made-up company contact with name, company, email, city, "
    "employees and tags.",
};

typedef struct gen_opts {
    sp_drafter *drafter;
    bool forced;
    float temp;
    const sp_grammar *g;
    const sp_logit_bias *bias;
    int n_bias;
    int max_tokens;
    int draft_max;               /* 0 = adaptive */
} gen_opts;

/* One constrained generation; fails the test on an error unless err is
 * given (then the error text is copied there and the finish returned). */
static sp_finish gen(fixture *f, const sp_tokens *p, const gen_opts *go, run_out *o, sp_spec_stats *st,
                     char *errbuf, size_t errcap) {
    sp_seq_params sq = sp_seq_default_params();
    sq.prompt = p->ids;
    sq.n_prompt = p->n;
    sq.max_tokens = go->max_tokens ? go->max_tokens : 96;
    sq.sampling = fx_sampling(go->temp);
    sq.sampling.bias = go->bias;
    sq.sampling.n_bias = go->n_bias;
    sq.drafter = go->drafter;
    if (go->draft_max) sq.draft_max = go->draft_max;
    sq.grammar = go->g;
    sq.forced_spans = go->forced;
    return fx_run(f, &sq, 1024, o, st, NULL, errbuf, errcap);
}

static sp_grammar *schema_grammar(const char *schema) {
    sp_err err;
    char *gbnf = sp_schema_to_gbnf(schema, strlen(schema), &err);
    if (!gbnf) fail_msg("schema: %s", err.msg);
    sp_grammar *g = sp_grammar_parse(gbnf, strlen(gbnf), &err);
    free(gbnf);
    if (!g) fail_msg("grammar: %s", err.msg);
    return g;
}

/* The output (without its end-of-generation token) is a complete sentence
 * of the grammar. */
static void assert_matches(fixture *f, const sp_grammar *g, const run_out *o) {
    sp_err err;
    char text[8192];
    size_t n = 0;
    for (int i = 0; i < o->n && i < 512; i++) {
        if (sp_tokenizer_is_eog(f->tok, o->toks[i])) {
            assert_int_equal(i, o->n - 1);    /* only as the last token */
            break;
        }
        n += sp_token_piece(f->tok, o->toks[i], false, text + n, sizeof text - n);
        assert_true(n < sizeof text);
    }
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &err);
    assert_non_null(m);
    if (sp_gmatch_accept_bytes(m, text, n, &err)) fail_msg("output does not match: %s\n%.*s", err.msg, (int)n, text);
    if (sp_tokenizer_is_eog(f->tok, o->toks[o->n - 1])) assert_true(sp_gmatch_can_end(m));
    sp_gmatch_free(m);
}

static sp_drafter *make(const char *name) {
    sp_err err;
    sp_drafter *d = sp_drafter_create(name, NULL, &err);
    if (!d) fail_msg("%s: %s", name, err.msg);
    return d;
}

/* Every method reproduces plain constrained decoding: at T = 0 (first
 * prompt) with and without forced spans, at T = 0.8 (second prompt) with. */
static void check_methods(fixture *f, sp_drafter **ds, const char *const *names, int nd) {
    sp_grammar *g = schema_grammar(contact_schema);
    for (size_t pi = 0; pi < sizeof prompts / sizeof *prompts; pi++) {
        sp_tokens p = { 0 };
        fx_prompt(f, prompts[pi], &p);
        {
            const int ti = (int)pi;
            const float temp = ti ? 0.8f : 0.0f;
            run_out plain, spec;
            sp_spec_stats st;
            gen_opts go = { .g = g, .temp = temp, .max_tokens = 64 };
            gen(f, &p, &go, &plain, &st, NULL, 0);
            assert_int_equal(st.forced_drafted, 0);
            assert_true(st.masks > 0);
            assert_matches(f, g, &plain);
            /* forced spans alone, then each drafter with and without them */
            go.forced = true;
            gen(f, &p, &go, &spec, &st, NULL, 0);
            fx_assert_same(&plain, &spec, "forced spans");
            assert_true(st.forced_drafted > 0);
            assert_true(st.forced_accepted > 0);
            assert_true(st.forced_accepted <= st.forced_drafted);
            for (int d = 0; d < nd; d++)
                for (int fs = ti; fs < 2; fs++) {
                    go.drafter = ds[d];
                    go.forced = fs;
                    gen(f, &p, &go, &spec, &st, NULL, 0);
                    char what[96];
                    snprintf(what, sizeof what, "%s%s, T=%.1f, prompt %zu", names[d], fs ? "+forced" : "",
                             (double)temp, pi);
                    fx_assert_same(&plain, &spec, what);
                    if (!fs) assert_int_equal(st.forced_drafted, 0);
                }
            go.drafter = NULL;
        }
        sp_tokens_free(&p);
    }
    sp_grammar_free(g);
}

static void test_lossless_smol(void **state) {
    fixture *f = *state;
    sp_err err;
    sp_eagle_opts eo = { .n_ctx = 1024, .min_prob = -1 };
    sp_drafter *eagle = sp_eagle_create("drafters/smollm2-135m.eagle3.gguf", f->m, &eo, f->pool, &err);
    if (!eagle) fail_msg("eagle: %s", err.msg);
    sp_drafter *subs[2] = { make("suffix"), NULL };
    subs[1] = sp_eagle_create("drafters/smollm2-135m.eagle3.gguf", f->m, &eo, f->pool, &err);
    assert_non_null(subs[1]);
    sp_drafter *ds[] = { make("ngram"), make("suffix"), eagle, sp_combine_create(subs, 2, &err) };
    assert_non_null(ds[3]);
    const char *const names[] = { "ngram", "suffix", "eagle", "suffix,eagle" };
    check_methods(f, ds, names, 4);
    for (int d = 0; d < 4; d++) sp_drafter_free(ds[d]);
}

static void test_lossless_gemma(void **state) {
    fixture *f = *state;
    sp_drafter *ds[] = { make("ngram"), make("suffix") };
    const char *const names[] = { "ngram", "suffix" };
    check_methods(f, ds, names, 2);
    for (int d = 0; d < 2; d++) sp_drafter_free(ds[d]);
}

/* A grammar whose every allowed token is banned by a logit bias: at T = 0
 * the sequence ends with an error naming the grammar, after no token.  (At
 * T > 0 the sampler's rule for a distribution with every token banned
 * applies: the unbiased argmax of the masked row, an allowed token.) */
static void test_dead_end(void **state) {
    fixture *f = *state;
    sp_err err;
    const char *text = "root ::= \"{\" [a-z]+ \"}\"";
    sp_grammar *g = sp_grammar_parse(text, strlen(text), &err);
    assert_non_null(g);
    sp_gvocab *v = sp_gvocab_create(f->tok, &err);
    sp_gmatch *m = sp_gmatch_create(g, v, NULL, &err);
    int n_allowed;
    const uint64_t *mask = sp_gmatch_mask(m, &n_allowed);
    assert_true(n_allowed > 0);
    const int V = sp_gvocab_n_vocab(v);
    sp_logit_bias *bias = calloc((size_t)n_allowed, sizeof *bias);
    int nb = 0;
    for (int t = 0; t < V; t++)
        if (mask[t / 64] >> (t % 64) & 1) bias[nb++] = (sp_logit_bias){ t, -INFINITY };
    assert_int_equal(nb, n_allowed);
    sp_tokens p = { 0 };
    fx_prompt(f, prompts[0], &p);
    run_out o;
    char msg[512];
    gen_opts go = { .g = g, .bias = bias, .n_bias = nb };
    assert_int_equal(gen(f, &p, &go, &o, NULL, msg, sizeof msg), SP_FINISH_ERROR);
    assert_non_null(strstr(msg, "grammar"));
    assert_int_equal(o.n, 0);
    sp_tokens_free(&p);
    free(bias);
    sp_gmatch_free(m);
    sp_gvocab_free(v);
    sp_grammar_free(g);
}

/* A forced span is verified like any draft: with a grammar that forces a
 * long literal, one round emits several tokens. */
static void test_forced_literal(void **state) {
    fixture *f = *state;
    sp_err err;
    const char *text = "root ::= \"The answer, in the format the user asked for, is: \" [0-9]+ \".\"";
    sp_grammar *g = sp_grammar_parse(text, strlen(text), &err);
    assert_non_null(g);
    sp_tokens p = { 0 };
    fx_prompt(f, "What is six times seven?", &p);
    run_out plain, spec;
    sp_spec_stats sp, ss;
    gen_opts go = { .g = g, .max_tokens = 40 };
    gen(f, &p, &go, &plain, &sp, NULL, 0);
    go.forced = true;
    gen(f, &p, &go, &spec, &ss, NULL, 0);
    fx_assert_same(&plain, &spec, "forced literal");
    assert_matches(f, g, &plain);
    assert_true(ss.forced_accepted >= 5);
    assert_true(ss.forwards < sp.forwards);
    sp_tokens_free(&p);
    sp_grammar_free(g);
}

/* A drafter that proposes the same chain every round. */
typedef struct fixed_chain {
    int32_t toks[2];
} fixed_chain;

static sp_draft *fc_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    (void)t; (void)err;
    sp_draft *s = calloc(1, sizeof *s);
    s->drafter = d;
    return s;
}
static int fc_prefill(sp_draft *s, const int32_t *p, int n, const sp_taps *t, sp_err *err) {
    (void)s; (void)p; (void)n; (void)t; (void)err;
    return 0;
}
static int fc_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out, sp_err *err) {
    (void)feed; (void)n_feed; (void)err;
    const fixed_chain *c = s->drafter->impl;
    *out = (sp_proposal){ .n = max_n < 2 ? max_n : 2, .tokens = c->toks };
    return 0;
}
static void fc_commit(sp_draft *s, int nd, int na, const int32_t *path, const sp_taps *v) {
    (void)s; (void)nd; (void)na; (void)path; (void)v;
}
static int fc_ckpt(sp_draft *s, uint8_t **b, size_t *l, sp_err *err) {
    (void)s; (void)b; (void)l;
    return sp_err_set(err, "no checkpoints");
}
static int fc_restore(sp_draft *s, const uint8_t *b, size_t l, sp_err *err) {
    (void)s; (void)b; (void)l;
    return sp_err_set(err, "no checkpoints");
}
static void fc_close(sp_draft *s) { free(s); }
static void fc_free(sp_drafter *d) { free(d); }
static const sp_drafter_ops fc_ops = { .open = fc_open, .prefill = fc_prefill, .propose = fc_propose,
                                       .commit = fc_commit, .checkpoint = fc_ckpt, .restore = fc_restore,
                                       .close = fc_close, .free = fc_free };

/* A draft token the grammar forbids ends the proposal before verification:
 * a drafter that always proposes [digit, letter] under a digits-only
 * grammar has exactly one token verified per round. */
static void test_drafts_filtered(void **state) {
    fixture *f = *state;
    sp_err err;
    const char *text = "root ::= [0-9]{40}";
    sp_grammar *g = sp_grammar_parse(text, strlen(text), &err);
    assert_non_null(g);
    fixed_chain c = { { sp_tokenizer_find(f->tok, "7"), sp_tokenizer_find(f->tok, "a") } };
    assert_true(c.toks[0] >= 0 && c.toks[1] >= 0);
    sp_drafter *d = calloc(1, sizeof *d);
    *d = (sp_drafter){ .ops = &fc_ops, .name = "fixed", .ns = "fixed", .cheap = true, .impl = &c };
    sp_tokens p = { 0 };
    fx_prompt(f, "Write forty digits.", &p);
    run_out plain, spec;
    sp_spec_stats st;
    gen_opts go = { .g = g, .max_tokens = 48, .draft_max = 4 };
    gen(f, &p, &go, &plain, NULL, NULL, 0);
    go.drafter = d;
    gen(f, &p, &go, &spec, &st, NULL, 0);
    fx_assert_same(&plain, &spec, "filtered drafts");
    assert_true(st.spec_rounds > 0);
    assert_int_equal(st.drafted, st.spec_rounds);      /* never the forbidden second token */
    assert_matches(f, g, &plain);
    sp_tokens_free(&p);
    sp_drafter_free(d);
    sp_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lossless_smol, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_forced_literal, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_dead_end, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_drafts_filtered, fx_setup_smol, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lossless_gemma, fx_setup_gemma, fx_teardown),
        cmocka_unit_test_setup_teardown(test_forced_literal, fx_setup_gemma, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
