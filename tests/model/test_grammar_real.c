/*
 * Grammar masks on the real vocabularies of SmolLM2-135M (byte-level BPE,
 * 49,152 tokens) and Gemma 3 270M (SentencePiece with <0xXX> byte tokens,
 * 262,144 tokens).
 *
 * The trie walk of sp_gmatch_mask is compared with brute force at several
 * positions of a JSON grammar: every token's bytes walked alone
 * (sp_gmatch_allows), and for a sample of tokens a fresh text-level matcher
 * fed the whole text (prefix + token piece), which shares no state with the
 * token-level matcher.  Timings are printed as TAP comments.
 */
#include "test_util.h"
#include "base/base.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

static const char *JSON_GBNF =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

typedef struct model {
    const char *file;
    sp_gguf *gguf;
    sp_tokenizer *t;
    sp_gvocab *v;
    sp_grammar *json;
} model;

static model SMOL = { SP_TEST_SMOLLM2, NULL, NULL, NULL, NULL };
static model GEMMA = { SP_TEST_GEMMA3, NULL, NULL, NULL, NULL };

static int load(model *md) {
    sp_err e = { { 0 } };
    md->gguf = sp_gguf_open(sp_test_model_path(md->file), &e);
    if (!md->gguf) { fprintf(stderr, "# %s\n", e.msg); return -1; }
    md->t = sp_tokenizer_load(md->gguf, &e);
    if (!md->t) { fprintf(stderr, "# %s\n", e.msg); return -1; }
    uint64_t t0 = sp_now_ns();
    md->v = sp_gvocab_create(md->t, &e);
    if (!md->v) { fprintf(stderr, "# %s\n", e.msg); return -1; }
    printf("# %s: vocabulary trie of %d tokens built in %.1f ms\n", md->file, sp_gvocab_n_vocab(md->v),
           (double)(sp_now_ns() - t0) / 1e6);
    md->json = sp_grammar_parse(JSON_GBNF, strlen(JSON_GBNF), &e);
    if (!md->json) { fprintf(stderr, "# %s\n", e.msg); return -1; }
    return 0;
}

static void unload(model *md) {
    sp_grammar_free(md->json);
    sp_gvocab_free(md->v);
    sp_tokenizer_free(md->t);
    sp_gguf_close(md->gguf);
}

static int group_setup(void **state) {
    (void)state;
    return load(&SMOL) || load(&GEMMA) ? -1 : 0;
}

static int group_teardown(void **state) {
    (void)state;
    unload(&SMOL);
    unload(&GEMMA);
    return 0;
}

static bool bit(const uint64_t *bits, int32_t t) { return bits[t >> 6] >> (t & 63) & 1; }

static sp_gmatch *at(const model *md, const sp_grammar *g, const char *prefix, size_t len) {
    sp_err e = { { 0 } };
    sp_gmatch *m = sp_gmatch_create(g, md->v, NULL, &e);
    assert_non_null(m);
    assert_int_equal(sp_gmatch_accept_bytes(m, prefix, len, &e), 0);
    return m;
}

/* Independent reference for a text token: a fresh text-level matcher fed
 * prefix + the token's piece. */
static bool text_ref(const model *md, const sp_grammar *g, const char *prefix, size_t len, int32_t tok) {
    char piece[1024];
    size_t n = sp_token_piece(md->t, tok, false, piece, sizeof piece);
    assert_true(n <= sizeof piece);
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &e);
    bool ok = sp_gmatch_accept_bytes(m, prefix, len, &e) == 0 && sp_gmatch_accept_bytes(m, piece, n, &e) == 0;
    sp_gmatch_free(m);
    return ok;
}

/* The mask at prefix equals brute force; returns the number allowed. */
static int check_position(const model *md, const sp_grammar *g, const char *prefix, size_t len) {
    sp_gmatch *m = at(md, g, prefix, len);
    int n_allowed = -1;
    const uint64_t *bits = sp_gmatch_mask(m, &n_allowed);
    int32_t nv = sp_gvocab_n_vocab(md->v);
    bool can_end = sp_gmatch_can_end(m), must_end = sp_gmatch_must_end(m);
    int count = 0, checked_text = 0, allowed_text = 0;
    for (int32_t t = 0; t < nv; t++) {
        bool b = bit(bits, t);
        count += b;
        assert_int_equal(b, sp_gmatch_allows(m, t));
        if (sp_tokenizer_is_eog(md->t, t)) {
            assert_int_equal(b, can_end);
            continue;
        }
        if (sp_tokenizer_is_control(md->t, t) || sp_token_piece(md->t, t, false, NULL, 0) == 0) {
            assert_false(b);                           /* never text */
            continue;
        }
        if (must_end) assert_false(b);
        if (b) allowed_text++;
        /* the fresh-matcher reference on a sample: every allowed token up
         * to 300, and every 211th token */
        if ((b && allowed_text <= 300) || t % 211 == 0) {
            bool r = text_ref(md, g, prefix, len, t);
            if (r != b) fprintf(stderr, "# token %d: mask %d, reference %d\n", t, b, r);
            assert_int_equal(b, r);
            checked_text++;
        }
    }
    assert_int_equal(count, n_allowed);
    assert_true(checked_text > 100);
    sp_gmatch_free(m);
    return n_allowed;
}

static void json_positions(const model *md) {
    static const char *prefixes[] = {
        "",                          /* only '{' and what starts with it */
        "{",                         /* ws, a key, '}' */
        "{\"na",                     /* inside a string: wide */
        "{\"name\": ",               /* a value */
        "{\"n\": -12",               /* a number */
        "{\"n\": [1, tr",            /* inside a literal: narrow */
        "{\"s\": \"caf\xc3",         /* a code point split: one byte pending */
        "{\"s\": \"\xe2\x82",        /* two bytes pending */
        "{\"a\": {}}",               /* complete; whitespace may follow */
        "{\"a\": {}}\n  ",           /* complete after whitespace */
    };
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++) {
        int n = check_position(md, md->json, prefixes[k], strlen(prefixes[k]));
        printf("# %s: %-16.*s %7d allowed\n", md->file, (int)strlen(prefixes[k]), prefixes[k], n);
        assert_true(n > 0);
    }
}

static void test_mask_reference_smollm(void **state) { (void)state; json_positions(&SMOL); }
static void test_mask_reference_gemma(void **state) { (void)state; json_positions(&GEMMA); }

/* ------------------------------------------------------------------------
 * End of generation
 * ---------------------------------------------------------------------- */
static void eog_case(const model *md) {
    const char *src = "root ::= \"{\\\"a\\\":\" [0-9] \"}\" \" \"?";
    sp_err e;
    sp_grammar *g = sp_grammar_parse(src, strlen(src), &e);
    assert_non_null(g);
    int32_t nv = sp_gvocab_n_vocab(md->v);
    int n_eog = 0;
    for (int32_t t = 0; t < nv; t++) n_eog += sp_tokenizer_is_eog(md->t, t);
    assert_true(n_eog > 0);

    sp_gmatch *m = at(md, g, "{\"a\":7", 6);           /* EOG not allowed yet */
    int n;
    const uint64_t *bits = sp_gmatch_mask(m, &n);
    for (int32_t t = 0; t < nv; t++) if (sp_tokenizer_is_eog(md->t, t)) assert_false(bit(bits, t));
    sp_gmatch_free(m);

    m = at(md, g, "{\"a\":7}", 7);                     /* may end, or add a space */
    assert_true(sp_gmatch_can_end(m));
    assert_false(sp_gmatch_must_end(m));
    bits = sp_gmatch_mask(m, &n);
    assert_true(n > n_eog);
    for (int32_t t = 0; t < nv; t++) if (sp_tokenizer_is_eog(md->t, t)) assert_true(bit(bits, t));
    sp_gmatch_free(m);

    m = at(md, g, "{\"a\":7} ", 8);                    /* must end: EOG alone */
    assert_true(sp_gmatch_must_end(m));
    bits = sp_gmatch_mask(m, &n);
    assert_int_equal(n, n_eog);
    for (int32_t t = 0; t < nv; t++) assert_int_equal(bit(bits, t), sp_tokenizer_is_eog(md->t, t));
    int32_t forced[4];
    assert_int_equal(sp_gmatch_forced(m, forced, 4), 1);
    assert_true(sp_tokenizer_is_eog(md->t, forced[0]));
    int32_t eos = sp_tokenizer_eos(md->t);
    if (eos >= 0 && sp_tokenizer_is_eog(md->t, eos)) assert_int_equal(forced[0], eos);
    assert_int_equal(sp_gmatch_accept(m, forced[0], &e), 0);
    assert_true(sp_gmatch_ended(m));
    /* ended: only more ends of generation, for a caller that ignores them */
    bits = sp_gmatch_mask(m, &n);
    assert_int_equal(n, n_eog);
    for (int32_t t = 0; t < nv; t++) assert_int_equal(bit(bits, t), sp_tokenizer_is_eog(md->t, t));
    assert_true(sp_gmatch_allows(m, forced[0]));
    assert_int_equal(sp_gmatch_accept(m, forced[0], &e), 0);
    assert_true(sp_gmatch_ended(m));
    int32_t text_tok = -1;
    for (int32_t t = 0; t < nv && text_tok < 0; t++)
        if (!sp_tokenizer_is_eog(md->t, t) && !sp_tokenizer_is_control(md->t, t)) text_tok = t;
    assert_false(sp_gmatch_allows(m, text_tok));
    assert_int_equal(sp_gmatch_accept(m, text_tok, &e), -1);
    sp_gmatch_free(m);
    sp_grammar_free(g);
}

static void test_eog_smollm(void **state) { (void)state; eog_case(&SMOL); }
static void test_eog_gemma(void **state) { (void)state; eog_case(&GEMMA); }

/* ------------------------------------------------------------------------
 * Forced tokens, check, cache
 * ---------------------------------------------------------------------- */
static void forced_case(const model *md) {
    const char *src = "root ::= \"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\":\" \" \"? [0-9]+ \"}\"";
    sp_err e;
    sp_grammar *g = sp_grammar_parse(src, strlen(src), &e);
    assert_non_null(g);
    sp_gmatch *m = sp_gmatch_create(g, md->v, NULL, &e);
    char text[256];
    size_t len = sp_gmatch_forced_text(m, text, sizeof text);
    assert_string_equal(text, "{\"name\": \"get_weather\", \"arguments\":");
    int32_t toks[64];
    int n = sp_gmatch_forced(m, toks, 64);
    assert_true(n > 0);
    assert_int_equal(sp_gmatch_check(m, toks, n), n);
    /* their text is (a prefix of) the forced text, token after token */
    size_t w = 0;
    for (int k = 0; k < n; k++) {
        char piece[256];
        size_t pl = sp_token_piece(md->t, toks[k], false, piece, sizeof piece);
        assert_true(w + pl <= len);
        assert_memory_equal(text + w, piece, pl);
        w += pl;
        assert_true(sp_gmatch_allows(m, toks[k]));
        assert_int_equal(sp_gmatch_accept(m, toks[k], &e), 0);
    }
    printf("# %s: %d forced tokens cover %zu of %zu forced bytes\n", md->file, n, w, len);
    assert_true(w >= len / 2);
    /* a cap smaller than the count */
    sp_gmatch *m2 = sp_gmatch_create(g, md->v, NULL, &e);
    if (n > 1) assert_int_equal(sp_gmatch_forced(m2, toks, 1), 1);
    sp_gmatch_free(m2);
    sp_gmatch_free(m);
    sp_grammar_free(g);
}

/* forced_safe leaves out a last token that a longer token could spell
 * merged with what follows ("the" before [a-z]+: "there", "them"), keeps
 * it where nothing longer fits ("the" before a digit), and agrees with
 * forced_after on what comes before. */
static void forced_safe_case(const model *md) {
    sp_err e;
    const int32_t the = sp_tokenizer_find(md->t, "the");
    assert_true(the >= 0);
    const char *open = "root ::= \"the\" [a-z]+", *closed = "root ::= \"the\" [0-9]";
    sp_grammar *go = sp_grammar_parse(open, strlen(open), &e), *gc = sp_grammar_parse(closed, strlen(closed), &e);
    assert_non_null(go);
    assert_non_null(gc);
    sp_gmatch *mo = sp_gmatch_create(go, md->v, NULL, &e), *mc = sp_gmatch_create(gc, md->v, NULL, &e);
    int32_t toks[8];
    assert_int_equal(sp_gmatch_forced(mo, toks, 8), 1);
    assert_int_equal(toks[0], the);
    assert_int_equal(sp_gmatch_forced_safe(mo, NULL, 0, toks, 8), 0);
    assert_int_equal(sp_gmatch_forced_safe(mc, NULL, 0, toks, 8), 1);
    assert_int_equal(toks[0], the);
    /* after a prefix: `{"a": ` then the span `"b"` and its colon */
    const char *kv = "root ::= \"{\\\"a\\\": 1, \\\"b\\\":\" [0-9]";
    sp_grammar *gk = sp_grammar_parse(kv, strlen(kv), &e);
    assert_non_null(gk);
    sp_gmatch *mk = sp_gmatch_create(gk, md->v, NULL, &e);
    int32_t all[32], after[32], safe[32];
    const int n = sp_gmatch_forced(mk, all, 32);
    assert_true(n >= 3);
    const int na = sp_gmatch_forced_after(mk, all, 2, after, 32);
    const int ns = sp_gmatch_forced_safe(mk, all, 2, safe, 32);
    assert_true(ns <= na && na >= 1);
    assert_memory_equal(safe, after, (size_t)ns * sizeof(int32_t));
    sp_gmatch_free(mk);
    sp_grammar_free(gk);
    sp_gmatch_free(mo);
    sp_gmatch_free(mc);
    sp_grammar_free(go);
    sp_grammar_free(gc);
}

static void test_forced_smollm(void **state) { (void)state; forced_case(&SMOL); }
static void test_forced_safe_smollm(void **state) { (void)state; forced_safe_case(&SMOL); }
static void test_forced_safe_gemma(void **state) { (void)state; forced_safe_case(&GEMMA); }
static void test_forced_gemma(void **state) { (void)state; forced_case(&GEMMA); }

static void check_case(const model *md) {
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(md->json, md->v, NULL, &e);
    sp_tokens toks = { 0 };
    const char *good = "{\"key\": [1, 2, {\"x\": \"y\"}]}";
    assert_int_equal(sp_tokenize(md->t, good, strlen(good), false, false, &toks, &e), 0);
    int n = toks.n;
    assert_int_equal(sp_gmatch_check(m, toks.ids, n), n);
    /* a forbidden token after the third */
    sp_tokens bad = { 0 };
    assert_int_equal(sp_tokenize(md->t, "}", 1, false, false, &bad, &e), 0);
    int32_t chain[8] = { toks.ids[0], toks.ids[1], toks.ids[2], bad.ids[0], toks.ids[3] };
    char before[64], after[64];
    sp_gmatch_forced_text(m, before, sizeof before);
    int expect = 3;
    /* "{" "\"" "key"...: unless the tokenizer merged "{\"" into one token,
     * "}" right after the third token is inside the key string: allowed */
    char p3[64];
    size_t l3 = 0;
    for (int k = 0; k < 3; k++) l3 += sp_token_piece(md->t, toks.ids[k], false, p3 + l3, sizeof p3 - l3);
    sp_gmatch *probe = at(md, md->json, p3, l3);
    if (sp_gmatch_allows(probe, bad.ids[0])) expect = 5;  /* "}" inside a string is text */
    sp_gmatch_free(probe);
    int got = sp_gmatch_check(m, chain, 5);
    if (expect == 3) assert_int_equal(got, 3);
    else assert_true(got >= 4);
    /* the matcher did not move */
    sp_gmatch_forced_text(m, after, sizeof after);
    assert_string_equal(before, after);
    assert_int_equal(sp_gmatch_check(m, toks.ids, n), n);
    int32_t only_bad = bad.ids[0];
    assert_int_equal(sp_gmatch_check(m, &only_bad, 1), 0);   /* '}' cannot start */
    sp_tokens_free(&bad);
    sp_tokens_free(&toks);
    sp_gmatch_free(m);
}

static void test_check_smollm(void **state) { (void)state; check_case(&SMOL); }
static void test_check_gemma(void **state) { (void)state; check_case(&GEMMA); }

/* Time of a mask at the current position, in microseconds. */
static double mask_us(sp_gmatch *m, int *n) {
    uint64_t t0 = sp_now_ns();
    sp_gmatch_mask(m, n);
    return (double)(sp_now_ns() - t0) / 1e3;
}

static void cache_case(const model *md) {
    sp_err e;
    sp_gmatch *m = at(md, md->json, "{\"na", 4);
    int n1, n2, n3;
    sp_gmatch_stats st;
    double wide_miss = mask_us(m, &n1);
    const uint64_t *b1 = sp_gmatch_mask(m, &n1);
    size_t words = ((size_t)sp_gvocab_n_vocab(md->v) + 63) / 64;
    uint64_t *copy = malloc(words * 8);
    memcpy(copy, b1, words * 8);
    sp_gmatch_get_stats(m, &st);
    assert_int_equal(st.masks, 2);
    assert_int_equal(st.mask_misses, 1);
    assert_true(st.mask_ns > 0);
    /* another character of the string: the same stack set, a hit */
    assert_int_equal(sp_gmatch_accept_bytes(m, "me", 2, &e), 0);
    double wide_hit = mask_us(m, &n2);
    const uint64_t *b2 = sp_gmatch_mask(m, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(copy, b2, words * 8);
    sp_gmatch_get_stats(m, &st);
    assert_int_equal(st.masks, 4);
    assert_int_equal(st.mask_misses, 1);
    /* leave the string: a different mask, a miss */
    assert_int_equal(sp_gmatch_accept_bytes(m, "\": tr", 5, &e), 0);
    double narrow = mask_us(m, &n3);
    sp_gmatch_get_stats(m, &st);
    assert_int_equal(st.mask_misses, 2);
    assert_true(n3 < n1);
    /* the first mask of a value position (several branches) */
    sp_gmatch *m2 = at(md, md->json, "{\"a\":", 5);
    int n4;
    double value_miss = mask_us(m2, &n4);
    printf("# %s: mask wide miss %.0f us (%d allowed), wide hit %.2f us, narrow miss %.0f us (%d "
           "allowed), value miss %.0f us (%d allowed)\n",
           md->file, wide_miss, n1, wide_hit, narrow, n3, value_miss, n4);
    sp_gmatch_free(m2);
    free(copy);
    sp_gmatch_free(m);
}

static void test_cache_smollm(void **state) { (void)state; cache_case(&SMOL); }
static void test_cache_gemma(void **state) { (void)state; cache_case(&GEMMA); }

/* ------------------------------------------------------------------------
 * Lazy trigger
 * ---------------------------------------------------------------------- */
static void lazy_case(const model *md) {
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(md->json, md->v, "<tool_call>", &e);
    assert_false(sp_gmatch_active(m));
    int n;
    const uint64_t *bits = sp_gmatch_mask(m, &n);
    int32_t nv = sp_gvocab_n_vocab(md->v);
    assert_int_equal(n, nv);
    for (int32_t t = 0; t < nv; t += 997) assert_true(bit(bits, t));
    int32_t forced[4];
    assert_int_equal(sp_gmatch_forced(m, forced, 4), 0);

    const char *text = "Let me call it. <tool_call>{\"city";
    sp_tokens toks = { 0 };
    assert_int_equal(sp_tokenize(md->t, text, strlen(text), false, false, &toks, &e), 0);
    int k = 0;
    size_t seen = 0;
    const char *trig_end = strstr(text, "<tool_call>") + strlen("<tool_call>");
    for (; k < toks.n; k++) {
        assert_true(sp_gmatch_allows(m, toks.ids[k]));
        assert_int_equal(sp_gmatch_accept(m, toks.ids[k], &e), 0);
        seen += sp_token_piece(md->t, toks.ids[k], false, NULL, 0);
        assert_int_equal(sp_gmatch_active(m), seen >= (size_t)(trig_end - text));
    }
    assert_true(sp_gmatch_active(m));
    /* the rest after the trigger was fed: the position is that of the text
     * after it ({"city), inside a string */
    sp_gmatch *ref = at(md, md->json, trig_end, strlen(trig_end));
    int nr;
    const uint64_t *rb = sp_gmatch_mask(ref, &nr);
    bits = sp_gmatch_mask(m, &n);
    assert_int_equal(n, nr);
    assert_memory_equal(bits, rb, (((size_t)nv + 63) / 64) * 8);
    if (sp_tokenizer_eos(md->t) >= 0) assert_false(sp_gmatch_allows(m, sp_tokenizer_eos(md->t)));
    sp_gmatch_free(ref);
    sp_tokens_free(&toks);
    sp_gmatch_free(m);
}

static void test_lazy_smollm(void **state) { (void)state; lazy_case(&SMOL); }
static void test_lazy_gemma(void **state) { (void)state; lazy_case(&GEMMA); }

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_reference_smollm),
        cmocka_unit_test(test_mask_reference_gemma),
        cmocka_unit_test(test_eog_smollm),
        cmocka_unit_test(test_eog_gemma),
        cmocka_unit_test(test_forced_smollm),
        cmocka_unit_test(test_forced_gemma),
        cmocka_unit_test(test_forced_safe_smollm),
        cmocka_unit_test(test_forced_safe_gemma),
        cmocka_unit_test(test_check_smollm),
        cmocka_unit_test(test_check_gemma),
        cmocka_unit_test(test_cache_smollm),
        cmocka_unit_test(test_cache_gemma),
        cmocka_unit_test(test_lazy_smollm),
        cmocka_unit_test(test_lazy_gemma),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
