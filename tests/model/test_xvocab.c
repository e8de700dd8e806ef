/* Cross-vocabulary drafting on hard strings: the bridge from a draft's text
 * to target tokens never loses or duplicates text, for both models as the
 * target, on ASCII, accents, CJK, emoji, code, whitespace runs and special
 * tokens; and where the split is at a word boundary it agrees with
 * tokenizing the whole text. */
#include "test_util.h"
#include "speculative/speculative.h"

static const char *const texts[] = {
    "The quick brown fox jumps over the lazy dog. It was a bright cold day in April.",
    "Caf\xc3\xa9 na\xc3\xafve \xc3\x85ngstr\xc3\xb6m, stra\xc3\x9f" "e: \xce\xb1\xce\xb2\xce\xb3 \xd0\xb4\xd0\xb0",
    "\xe4\xb8\xad\xe6\x96\x87\xe5\x88\x86\xe8\xaf\x8d\xe5\xbe\x88\xe9\x9a\xbe\xe3\x80\x82\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa8\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
    "emoji \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb and flags \xf0\x9f\x87\xab\xf0\x9f\x87\xb7 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!!",
    "def f(x):\n    if x > 0:\n\t\treturn {\"a\": [1, 2, 3]}\n    return None  # done\n",
    "spaces:     five    four   three  two end\n\n\n\nnewlines",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\nHi there, how can I help?",
    "<|im_start|>assistant\nSure! Here's the list:\n1. apples\n2. pears<|im_end|>",
};

static char *detok(const sp_tokenizer *t, const int32_t *ids, int n, size_t *len) {
    size_t cap = 1 << 16, m = 0;
    char *buf = malloc(cap);
    for (int i = 0; i < n; i++) m += sp_token_piece(t, ids[i], true, buf + m, cap - m);
    *len = m;
    return buf;
}

static void check_target(const char *file) {
    sp_err err;
    sp_gguf *g = sp_gguf_open(sp_test_model_path(file), &err);
    assert_non_null(g);
    sp_tokenizer *tok = sp_tokenizer_load(g, &err);
    assert_non_null(tok);
    int tried = 0, produced = 0, agree = 0;
    for (size_t ti = 0; ti < sizeof texts / sizeof *texts; ti++) {
        const char *s = texts[ti];
        const size_t L = strlen(s);
        sp_tokens whole = { 0 };
        assert_int_equal(sp_tokenize(tok, s, L, false, true, &whole, &err), 0);
        /* the history is a prefix of the text's own tokenization, as when the
         * target generated it; the draft's text is the rest */
        for (int k = 1; k + 2 <= whole.n; k++) {
            size_t hl;
            char *ht = detok(tok, whole.ids, k, &hl);
            assert_true(hl <= L);
            assert_memory_equal(ht, s, hl);
            int32_t out[64];
            int m = sp_xvocab_continue(tok, whole.ids, k, s + hl, L - hl, 64, out, &err);
            assert_true(m >= 0);
            tried++;
            /* history + continuation is a tokenization of a prefix of the text */
            size_t cl;
            char *ct = detok(tok, out, m, &cl);
            assert_true(hl + cl <= L);
            if (cl) assert_memory_equal(ct, s + hl, cl);
            if (m > 0) produced++;
            if (m > 0 && k + m <= whole.n && !memcmp(whole.ids + k, out, (size_t)m * sizeof(int32_t))) agree++;
            free(ht);
            free(ct);
        }
        sp_tokens_free(&whole);
    }
    printf("# %s: %d splits, %d with a continuation, %d equal to the whole text's tokenization\n",
           file, tried, produced, agree);
    assert_true(produced >= tried * 9 / 10);
    assert_true(agree >= produced * 8 / 10);
    sp_tokenizer_free(tok);
    sp_gguf_close(g);
}

static void test_gemma_target(void **st) { (void)st; check_target(SP_TEST_GEMMA3); }
static void test_smollm2_target(void **st) { (void)st; check_target(SP_TEST_SMOLLM2); }

int main(void) {
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_gemma_target), cmocka_unit_test(test_smollm2_target) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
