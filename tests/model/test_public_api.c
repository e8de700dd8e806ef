/* The public API, compiled against include/specula.h alone (the Makefile
 * builds this test with -Iinclude only): loading, tokens, chat template,
 * generation with and without speculation, several sequences stepped in
 * one context, cancel, and the errors a caller sees. */
#include "test_util.h"
#include <specula.h>

#include <math.h>
#include <unistd.h>

#define MAXT 64

typedef struct out_t {
    int32_t t[MAXT];
    int n;
    int stop_at;                     /* stop after this many tokens, 0 = never */
} out_t;

static bool on_token(void *ud, int32_t tok, bool drafted) {
    (void)drafted;
    out_t *o = ud;
    if (o->n < MAXT) o->t[o->n] = tok;
    o->n++;
    return o->stop_at && o->n >= o->stop_at;
}

static specula_model *g_model;

static int setup(void **state) {
    (void)state;
    specula_error err;
    g_model = specula_model_load(sp_test_model_path(SP_TEST_SMOLLM2), NULL, &err);
    if (!g_model) fprintf(stderr, "%s\n", err.message);
    return g_model ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    specula_model_free(g_model);
    return 0;
}

static int tokenize(const char *text, int32_t *ids, int cap) {
    specula_error err;
    const int n = specula_tokenize(g_model, text, strlen(text), true, true, ids, cap, &err);
    assert_true(n > 0 && n <= cap);
    return n;
}

static void test_version_and_model(void **state) {
    (void)state;
    assert_int_equal(specula_api_version(), SPECULA_API_VERSION);
    assert_int_equal(specula_model_n_vocab(g_model), 49152);
    assert_true(specula_model_n_ctx_train(g_model) >= 2048);
    assert_true(strlen(specula_model_name(g_model)) > 0);
    specula_error err;
    assert_null(specula_model_load("/nonexistent/model.gguf", NULL, &err));
    assert_non_null(strstr(err.message, "/nonexistent/model.gguf"));
}

/* Tokens round-trip through text; a short buffer reports the full count. */
static void test_tokens(void **state) {
    (void)state;
    const char *text = "Hello world, this is specula.";
    int32_t ids[64], few[2];
    const int n = tokenize(text, ids, 64);
    specula_error err;
    assert_int_equal(specula_tokenize(g_model, text, strlen(text), true, true, few, 2, &err), n);
    assert_memory_equal(few, ids, sizeof few);
    char buf[128];
    assert_int_equal(specula_detokenize(g_model, ids, n, false, buf, sizeof buf, &err), (int)strlen(text));
    assert_string_equal(buf, text);
    char tiny[6];
    assert_int_equal(specula_detokenize(g_model, ids, n, false, tiny, sizeof tiny, &err), (int)strlen(text));
    assert_string_equal(tiny, "Hello");
    const int32_t bad = 1 << 30;
    assert_int_equal(specula_detokenize(g_model, &bad, 1, false, buf, sizeof buf, &err), -1);
    assert_non_null(strstr(err.message, "out of range"));
    int32_t im_end;
    assert_int_equal(specula_tokenize(g_model, "<|im_end|>", 10, false, true, &im_end, 1, &err), 1);
    assert_true(specula_token_is_eog(g_model, im_end));
    assert_false(specula_token_is_eog(g_model, ids[0]));
}

static void test_chat_apply(void **state) {
    (void)state;
    specula_chat_message msgs[] = { { "user", "Hi!" } };
    char buf[512];
    specula_error err;
    const int n = specula_chat_apply(g_model, msgs, 1, true, buf, sizeof buf, &err);
    assert_true(n > 0);
    assert_int_equal((int)strlen(buf), n);
    assert_non_null(strstr(buf, "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"));
    /* the template decides which roles it renders; a message without content is an error */
    specula_chat_message bad[] = { { "user", NULL } };
    assert_int_equal(specula_chat_apply(g_model, bad, 1, true, buf, sizeof buf, &err), -1);
    assert_non_null(strstr(err.message, "content"));
}

static specula_seq_params seq_of(const int32_t *ids, int n, out_t *o, specula_drafter *d, int max_tokens) {
    specula_seq_params p = specula_seq_default_params();
    p.prompt = ids;
    p.n_prompt = n;
    p.max_tokens = max_tokens;
    p.drafter = d;
    p.draft_max = d ? 8 : 0;
    p.on_token = on_token;
    p.user_data = o;
    return p;
}

/* Speculation gives plain decoding's tokens (greedy) and accepts drafts. */
static void test_generate_lossless(void **state) {
    (void)state;
    specula_error err;
    specula_ctx *c = specula_ctx_create(g_model, NULL, &err);
    assert_non_null(c);
    specula_drafter_params dp = specula_drafter_default_params();
    dp.method = "ngram";
    specula_drafter *d = specula_drafter_create(c, &dp, &err);
    assert_non_null(d);
    assert_string_equal(specula_drafter_name(d), "ngram");
    int32_t ids[64];
    const int n = tokenize("a b c d e f a b c d e f a b c", ids, 64);
    out_t outs[2] = { { .n = 0 }, { .n = 0 } };
    specula_stats st[2];
    for (int spec = 0; spec < 2; spec++) {
        specula_seq_params p = seq_of(ids, n, &outs[spec], spec ? d : NULL, 16);
        specula_finish fin;
        assert_int_equal(specula_generate(c, &p, &st[spec], &fin, &err), 0);
        assert_int_equal(fin, SPECULA_FINISH_LENGTH);
        assert_string_equal(specula_finish_name(fin), "length");
    }
    assert_int_equal(outs[0].n, 16);
    assert_int_equal(outs[1].n, 16);
    assert_memory_equal(outs[0].t, outs[1].t, 16 * sizeof(int32_t));
    assert_int_equal(st[0].drafted, 0);
    assert_true(st[1].accepted > 0);
    assert_true(st[1].rounds < st[0].rounds);
    assert_int_equal(st[1].n_prompt, n);
    assert_int_equal(st[1].n_generated, 16);
    specula_drafter_free(d);
    specula_ctx_free(c);
}

/* The prefix cache: a repeated prompt takes all but its last token from
 * it and gives the same output; saved to a file and loaded into another
 * context it does the same; cache_prompt = false bypasses it; a context
 * without one refuses save and load, and a corrupt file is refused. */
static void test_prefix_cache(void **state) {
    (void)state;
    specula_error err;
    specula_ctx_params cp = specula_ctx_default_params();
    cp.cache_bytes = 64u << 20;
    specula_ctx *c = specula_ctx_create(g_model, &cp, &err);
    assert_non_null(c);
    int32_t ids[64];
    const int n = tokenize("The capital of France is Paris. The capital of Italy is", ids, 64);
    out_t o[3] = { { .n = 0 }, { .n = 0 }, { .n = 0 } };
    specula_stats st[3];
    for (int i = 0; i < 2; i++) {
        specula_seq_params p = seq_of(ids, n, &o[i], NULL, 12);
        assert_true(p.cache_prompt);
        assert_int_equal(specula_generate(c, &p, &st[i], NULL, &err), 0);
    }
    assert_int_equal(st[0].n_cached, 0);
    assert_int_equal(st[0].n_prompt, n);
    assert_int_equal(st[1].n_cached, n - 1);
    assert_int_equal(st[1].n_prompt, 1);
    assert_memory_equal(o[0].t, o[1].t, 12 * sizeof(int32_t));
    char path[64];
    snprintf(path, sizeof path, "/tmp/specula-api-cache-%d.bin", (int)getpid());
    assert_int_equal(specula_cache_save(c, path, &err), 0);
    specula_ctx *c2 = specula_ctx_create(g_model, &cp, &err);
    assert_int_equal(specula_cache_load(c2, path, &err), 0);
    specula_seq_params p = seq_of(ids, n, &o[2], NULL, 12);
    assert_int_equal(specula_generate(c2, &p, &st[2], NULL, &err), 0);
    assert_int_equal(st[2].n_cached, n - 1);
    assert_memory_equal(o[0].t, o[2].t, 12 * sizeof(int32_t));
    assert_int_equal(specula_cache_load(c2, path, &err), -1);                  /* not empty */
    p.cache_prompt = false;
    o[2].n = 0;
    assert_int_equal(specula_generate(c2, &p, &st[2], NULL, &err), 0);
    assert_int_equal(st[2].n_cached, 0);
    specula_ctx_free(c2);
    FILE *f = fopen(path, "r+b");                                              /* one byte changed */
    assert_non_null(f);
    fseek(f, 100, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    c2 = specula_ctx_create(g_model, &cp, &err);
    assert_int_equal(specula_cache_load(c2, path, &err), -1);
    assert_non_null(strstr(err.message, "prefix cache"));
    specula_ctx_free(c2);
    specula_ctx *plain = specula_ctx_create(g_model, NULL, &err);
    assert_int_equal(specula_cache_save(plain, path, &err), -1);
    assert_non_null(strstr(err.message, "no prefix cache"));
    specula_ctx_free(plain);
    unlink(path);
    specula_ctx_free(c);
}

/* A grammar constrains the output (compiled at add; a bad one is an error
 * naming its position); a JSON schema becomes one; with a drafter the
 * forced spans are drafted and the output does not change. */
static void test_grammar(void **state) {
    (void)state;
    specula_error err;
    specula_ctx *c = specula_ctx_create(g_model, NULL, &err);
    assert_non_null(c);
    char gbnf[4096];
    const char *schema = "{\"type\":\"object\",\"properties\":{\"answer\":{\"type\":\"string\",\"enum\":"
                         "[\"yes\",\"no\"]},\"confidence\":{\"type\":\"integer\"}},"
                         "\"required\":[\"answer\",\"confidence\"]}";
    const long len = specula_json_schema_to_grammar(schema, strlen(schema), gbnf, sizeof gbnf, &err);
    assert_true(len > 0 && len < (long)sizeof gbnf);
    const char *bad = "{\"type\":\"strange\"}";
    assert_int_equal(specula_json_schema_to_grammar(bad, strlen(bad), gbnf + len + 1, 64, &err), -1);
    assert_true(strlen(err.message) > 0);
    specula_drafter_params dp = specula_drafter_default_params();
    dp.method = "ngram";
    specula_drafter *d = specula_drafter_create(c, &dp, &err);
    int32_t ids[64];
    const int n = tokenize("<|im_start|>user\nIs the sky blue? Answer in JSON.<|im_end|>\n<|im_start|>assistant\n",
                           ids, 64);
    out_t outs[2] = { { .n = 0 }, { .n = 0 } };
    specula_stats st[2];
    for (int spec = 0; spec < 2; spec++) {
        specula_seq_params p = seq_of(ids, n, &outs[spec], spec ? d : NULL, 48);
        p.grammar = gbnf;
        p.draft_max = SPECULA_DRAFT_ADAPTIVE;
        if (specula_generate(c, &p, &st[spec], NULL, &err)) fail_msg("generate: %s", err.message);
    }
    assert_int_equal(outs[0].n, outs[1].n);
    assert_memory_equal(outs[0].t, outs[1].t, (size_t)(outs[0].n < MAXT ? outs[0].n : MAXT) * sizeof(int32_t));
    assert_int_equal(st[0].forced_drafted, 0);
    assert_true(st[1].forced_accepted > 0);
    char text[512];
    const int tn = outs[0].n - 1;   /* the last token ends the generation */
    assert_true(specula_token_is_eog(g_model, outs[0].t[tn]));
    specula_detokenize(g_model, outs[0].t, tn, false, text, sizeof text, &err);
    assert_true(text[0] == '{' && strstr(text, "\"answer\"") && strstr(text, "\"confidence\""));
    /* a bad grammar: refused at add with its position */
    out_t o = { .n = 0 };
    specula_seq_params p = seq_of(ids, n, &o, NULL, 8);
    p.grammar = "root ::= \"a\" (";
    assert_int_equal(specula_seq_add(c, &p, &err), -1);
    assert_non_null(strstr(err.message, "line 1"));
    specula_drafter_free(d);
    specula_ctx_free(c);
}

/* Two sequences stepped together in one context give what each gives
 * alone (seeded sampling at T = 0.8); a third has no free slot; a
 * cancelled one ends CANCELLED; the callback's stop ends STOP. */
static void test_batched_sequences(void **state) {
    (void)state;
    specula_error err;
    specula_ctx_params cp = specula_ctx_default_params();
    cp.n_slots = 2;
    cp.n_ctx = 512;
    specula_ctx *c = specula_ctx_create(g_model, &cp, &err);
    assert_non_null(c);
    int32_t a[64], b[64];
    const int na = tokenize("The capital of France is", a, 64), nb = tokenize("Once upon a time", b, 64);
    out_t solo[2] = { { .n = 0 }, { .n = 0 } }, both[2] = { { .n = 0 }, { .n = 0 } };
    specula_seq_params pa = seq_of(a, na, &solo[0], NULL, 20), pb = seq_of(b, nb, &solo[1], NULL, 24);
    pa.sampling.temperature = pb.sampling.temperature = 0.8f;
    pa.sampling.seed = 7;
    pb.sampling.seed = 9;
    assert_int_equal(specula_generate(c, &pa, NULL, NULL, &err), 0);
    assert_int_equal(specula_generate(c, &pb, NULL, NULL, &err), 0);
    pa.user_data = &both[0];
    pb.user_data = &both[1];
    const int ia = specula_seq_add(c, &pa, &err), ib = specula_seq_add(c, &pb, &err);
    assert_true(ia >= 0 && ib >= 0 && ia != ib);
    out_t x = { .n = 0 };
    specula_seq_params px = seq_of(a, na, &x, NULL, 4);
    assert_int_equal(specula_seq_add(c, &px, &err), -1);
    assert_non_null(strstr(err.message, "no free slot"));
    while (specula_step(c) > 0) {}
    assert_int_equal(specula_seq_finish(c, ia), SPECULA_FINISH_LENGTH);
    assert_int_equal(specula_seq_finish(c, ib), SPECULA_FINISH_LENGTH);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(both[i].n, solo[i].n);
        assert_memory_equal(both[i].t, solo[i].t, (size_t)solo[i].n * sizeof(int32_t));
    }
    specula_seq_remove(c, ia);
    specula_seq_remove(c, ib);
    /* cancel and stop */
    out_t oc = { .n = 0 }, os = { .n = 0, .stop_at = 3 };
    specula_seq_params pc = seq_of(a, na, &oc, NULL, 100), ps = seq_of(b, nb, &os, NULL, 100);
    const int ic = specula_seq_add(c, &pc, &err), is = specula_seq_add(c, &ps, &err);
    assert_true(ic >= 0 && is >= 0);
    specula_step(c);
    specula_seq_cancel(c, ic);
    while (specula_step(c) > 0) {}
    assert_int_equal(specula_seq_finish(c, ic), SPECULA_FINISH_CANCELLED);
    assert_int_equal(specula_seq_finish(c, is), SPECULA_FINISH_STOP);
    assert_int_equal(os.n, 3);
    specula_stats st;
    specula_seq_stats(c, is, &st);
    assert_int_equal(st.n_generated, 3);
    assert_string_equal(specula_seq_error(c, is), "");
    specula_ctx_free(c);             /* frees the sequences still in it */
}

/* What a caller gets wrong is an error, not a crash. */
static void test_errors(void **state) {
    (void)state;
    specula_error err;
    specula_ctx_params cp = specula_ctx_default_params();
    cp.n_slots = 0;
    assert_null(specula_ctx_create(g_model, &cp, &err));
    assert_non_null(strstr(err.message, "slots"));
    specula_ctx *c = specula_ctx_create(g_model, NULL, &err);
    specula_drafter_params dp = specula_drafter_default_params();
    dp.method = "telepathy";
    assert_null(specula_drafter_create(c, &dp, &err));
    assert_non_null(strstr(err.message, "telepathy"));
    int32_t ids[8];
    const int n = tokenize("Hi", ids, 8);
    out_t o = { .n = 0 };
    specula_seq_params p = seq_of(ids, n, &o, NULL, 4);
    p.sampling.temperature = NAN;
    assert_int_equal(specula_generate(c, &p, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.message, "temperature"));
    p = seq_of(ids, 0, &o, NULL, 4);
    assert_int_equal(specula_generate(c, &p, NULL, NULL, &err), -1);
    p = seq_of(ids, n, &o, NULL, 4);
    p.on_token = NULL;
    assert_int_equal(specula_seq_add(c, &p, &err), -1);
    assert_non_null(strstr(err.message, "on_token"));
    specula_ctx_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_model), cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_chat_apply),        cmocka_unit_test(test_generate_lossless),
        cmocka_unit_test(test_batched_sequences), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_grammar),           cmocka_unit_test(test_prefix_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
