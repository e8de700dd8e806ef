/* Our engine against llama.cpp on the same GGUF files.
 *
 * tests/data/reference-*.json were recorded with llama-cpp-python by
 * scripts/reference/gen_model_reference.py (generator and command are in the
 * files).  For every prompt we require:
 *   - our tokenizer gives the same prompt ids;
 *   - top-1 next token equal, and the recorded top-5 logits within 0.1*scale;
 *   - the 32-token greedy continuation equal token for token.  Where the two
 *     implementations legitimately differ is a near-tie: if we diverge at a
 *     step where llama.cpp's own top-2 margin is below SP_NEAR_TIE, the
 *     test accepts the flip (and prints it) and stops comparing that case.
 */
#include "test_util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <math.h>

#define SP_NEAR_TIE 0.05

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10;
}
static char *unhex(const char *h, size_t *len) {
    size_t n = strlen(h) / 2;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) s[i] = (char)(hexval(h[2 * i]) << 4 | hexval(h[2 * i + 1]));
    s[n] = 0;
    *len = n;
    return s;
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static float margin(const float *x, int n, int32_t top) {
    float second = -INFINITY;
    for (int i = 0; i < n; i++) if (i != top && x[i] > second) second = x[i];
    return x[top] - second;
}

static void check_model(const char *model_file, const char *ref_file) {
    sp_err err;
    sp_model *m = sp_model_load(sp_test_model_path(model_file), &err);
    if (!m) fail_msg("load: %s", err.msg);
    sp_tokenizer *tok = sp_tokenizer_load(m->gguf, &err);
    if (!tok) fail_msg("tokenizer: %s", err.msg);
    json_error_t jerr;
    json_t *root = json_load_file(ref_file, 0, &jerr);
    if (!root) fail_msg("%s: %s", ref_file, jerr.text);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 8);
    sp_pool *pool = sp_pool_create(2);
    sp_workspace *ws = sp_workspace_create(m, 256, pool);
    const int V = m->hp.n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    int exact = 0, flips = 0;
    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        size_t plen;
        char *prompt = unhex(json_string_value(json_object_get(c, "prompt_hex")), &plen);
        json_t *pids = json_object_get(c, "prompt_ids");
        sp_tokens ours = { 0 };
        assert_int_equal(sp_tokenize(tok, prompt, plen, sp_tokenizer_add_bos(tok), true, &ours, &err), 0);
        int n = (int)json_array_size(pids);
        int32_t *ids = malloc((size_t)n * sizeof(int32_t));
        for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pids, (size_t)i));
        if (ours.n != n || memcmp(ours.ids, ids, (size_t)n * sizeof(int32_t)) != 0)
            fail_msg("%s/%s: our prompt tokens differ from llama.cpp's", model_file, name);

        sp_kv *kv = sp_kv_create(m, 512);
        assert_int_equal(sp_model_forward(m, kv, ws, ids, n, SP_LOGITS_LAST, logits, &err), 0);
        json_t *top5 = json_object_get(c, "top5");
        int32_t ref_top = (int32_t)json_integer_value(json_array_get(json_array_get(top5, 0), 0));
        int32_t our_top = argmax(logits, V);
        if (our_top != ref_top)
            fail_msg("%s/%s: top-1 %d, llama.cpp %d", model_file, name, our_top, ref_top);
        for (size_t k = 0; k < json_array_size(top5); k++) {
            json_t *e = json_array_get(top5, k);
            int32_t id = (int32_t)json_integer_value(json_array_get(e, 0));
            double lg = json_number_value(json_array_get(e, 1));
            if (fabs(logits[id] - lg) > 0.1 + 0.01 * fabs(lg))
                fail_msg("%s/%s: logit of %d is %f, llama.cpp %f", model_file, name, id,
                         (double)logits[id], lg);
        }

        json_t *greedy = json_object_get(c, "greedy_ids"), *margins = json_object_get(c, "greedy_margins");
        int32_t t = our_top;
        for (size_t s = 0; s < json_array_size(greedy); s++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(greedy, s));
            if (t != want) {
                double ref_m = json_number_value(json_array_get(margins, s));
                if (ref_m >= SP_NEAR_TIE)
                    fail_msg("%s/%s: greedy step %zu: %d, llama.cpp %d (llama.cpp margin %.4f, ours %.4f)",
                             model_file, name, s, t, want, ref_m, (double)margin(logits, V, t));
                printf("# %s/%s: near-tie flip at step %zu (llama.cpp margin %.4f, ours %.4f)\n",
                       model_file, name, s, ref_m, (double)margin(logits, V, t));
                flips++;
                goto next;
            }
            if (s + 1 == json_array_size(greedy)) break;
            assert_int_equal(sp_model_forward(m, kv, ws, &t, 1, SP_LOGITS_LAST, logits, &err), 0);
            t = argmax(logits, V);
        }
        exact++;
    next:
        sp_kv_free(kv);
        sp_tokens_free(&ours);
        free(ids);
        free(prompt);
    }
    printf("# %s: %d cases exact over 32 greedy tokens, %d near-tie flips\n", model_file, exact, flips);
    assert_true(exact >= (int)json_array_size(cases) - 2);
    free(logits);
    sp_workspace_free(ws);
    sp_pool_free(pool);
    json_decref(root);
    sp_tokenizer_free(tok);
    sp_model_free(m);
}

static void test_smollm2(void **st) { (void)st; check_model(SP_TEST_SMOLLM2, "tests/data/reference-smollm2-135m.json"); }
static void test_gemma3(void **st) { (void)st; check_model(SP_TEST_GEMMA3, "tests/data/reference-gemma3-270m.json"); }

int main(void) {
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_smollm2), cmocka_unit_test(test_gemma3) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
