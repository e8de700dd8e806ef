/* Real-model tests of the forward pass: batch invariance (exact), KV trim
 * exactness, chunking and thread-count invariance, bad input. */
#include "test_util.h"
#include "model/model.h"

#include <math.h>

typedef struct fixture {
    sp_model *m;
    sp_pool *pool;
} fixture;

static int setup(void **state, const char *file) {
    sp_err err;
    fixture *f = calloc(1, sizeof *f);
    f->m = sp_model_load(sp_test_model_path(file), &err);
    if (!f->m) { fprintf(stderr, "load: %s\n", err.msg); free(f); return -1; }
    f->pool = sp_pool_create(2);
    *state = f;
    return 0;
}
static int setup_smol(void **state) { return setup(state, SP_TEST_SMOLLM2); }
static int setup_gemma(void **state) { return setup(state, SP_TEST_GEMMA3); }
static int teardown(void **state) {
    fixture *f = *state;
    sp_pool_free(f->pool);
    sp_model_free(f->m);
    free(f);
    return 0;
}

/* A fixed, varied token sequence (valid ids for both vocabularies). */
static void tokens(int32_t *t, int n, int n_vocab) {
    sp_rng r = { 12345 };
    for (int i = 0; i < n; i++) t[i] = (int32_t)(sp_rng_next(&r) % (uint64_t)(n_vocab < 30000 ? n_vocab : 30000));
}

/* Logits of a window of N rows are bit-identical to N one-token steps. */
static void test_batch_invariance(void **state) {
    fixture *f = *state;
    const sp_model *m = f->m;
    const int V = m->hp.n_vocab, P = 20, N = 16;
    int32_t t[36];
    tokens(t, P + N, V);
    float *win = malloc((size_t)N * V * sizeof(float)), *one = malloc((size_t)V * sizeof(float));
    sp_err err;
    sp_workspace *ws = sp_workspace_create(m, 64, f->pool);
    sp_kv *a = sp_kv_create(m, 128), *b = sp_kv_create(m, 128);
    assert_int_equal(sp_model_forward(m, a, ws, t, P, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, b, ws, t, P, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, a, ws, t + P, N, SP_LOGITS_ALL, win, &err), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(sp_model_forward(m, b, ws, t + P + i, 1, SP_LOGITS_LAST, one, &err), 0);
        assert_memory_equal(one, win + (size_t)i * V, (size_t)V * sizeof(float));
        for (int j = 0; j < V; j += 997) assert_true(isfinite(one[j]));
    }
    sp_kv_free(a); sp_kv_free(b);
    sp_workspace_free(ws);
    free(win); free(one);
}

/* Prefill in chunks of 1, 7 or all at once, and with 1 or 2 threads, gives
 * the same last logits. */
static void test_chunk_and_thread_invariance(void **state) {
    fixture *f = *state;
    const sp_model *m = f->m;
    const int V = m->hp.n_vocab, P = 40;
    int32_t t[40];
    tokens(t, P, V);
    float *ref = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
    sp_err err;
    sp_pool *one = sp_pool_create(1);
    const int rows[] = { 64, 1, 7 };
    for (int k = 0; k < 3; k++) {
        sp_workspace *ws = sp_workspace_create(m, rows[k], k == 2 ? one : f->pool);
        sp_kv *kv = sp_kv_create(m, 64);
        assert_int_equal(sp_model_forward(m, kv, ws, t, P, SP_LOGITS_LAST, k ? got : ref, &err), 0);
        assert_int_equal(kv->n, P);
        if (k) assert_memory_equal(ref, got, (size_t)V * sizeof(float));
        sp_kv_free(kv);
        sp_workspace_free(ws);
    }
    sp_pool_free(one);
    free(ref); free(got);
}

/* A cache trimmed after a rejected window and regrown gives the same logits
 * as a cache that never saw the rejected tokens. */
static void test_kv_trim_exact(void **state) {
    fixture *f = *state;
    const sp_model *m = f->m;
    const int V = m->hp.n_vocab;
    int32_t t[30], junk[8];
    tokens(t, 30, V);
    for (int i = 0; i < 8; i++) junk[i] = (t[i] * 7 + 3) % V;
    float *a = malloc((size_t)8 * V * sizeof(float)), *b = malloc((size_t)4 * V * sizeof(float));
    sp_err err;
    sp_workspace *ws = sp_workspace_create(m, 32, f->pool);
    sp_kv *kv1 = sp_kv_create(m, 64), *kv2 = sp_kv_create(m, 64);
    assert_int_equal(sp_model_forward(m, kv1, ws, t, 26, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, kv1, ws, junk, 8, SP_LOGITS_ALL, a, &err), 0);
    sp_kv_trim(kv1, 22);
    assert_int_equal(kv1->n, 22);
    assert_int_equal(sp_model_forward(m, kv1, ws, t + 22, 4, SP_LOGITS_ALL, a, &err), 0);
    assert_int_equal(sp_model_forward(m, kv2, ws, t, 22, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, kv2, ws, t + 22, 4, SP_LOGITS_ALL, b, &err), 0);
    assert_memory_equal(a, b, (size_t)4 * V * sizeof(float));
    sp_kv_free(kv1); sp_kv_free(kv2);
    sp_workspace_free(ws);
    free(a); free(b);
}

static void test_bad_input(void **state) {
    fixture *f = *state;
    const sp_model *m = f->m;
    sp_err err;
    sp_workspace *ws = sp_workspace_create(m, 8, f->pool);
    sp_kv *kv = sp_kv_create(m, 16);
    int32_t bad[2] = { 1, m->hp.n_vocab };
    assert_int_equal(sp_model_forward(m, kv, ws, bad, 2, SP_LOGITS_NONE, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "out of range"));
    assert_int_equal(kv->n, 0);
    int32_t neg = -1;
    assert_int_equal(sp_model_forward(m, kv, ws, &neg, 1, SP_LOGITS_NONE, NULL, &err), -1);
    int32_t many[17] = { 0 };
    assert_int_equal(sp_model_forward(m, kv, ws, many, 17, SP_LOGITS_NONE, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "context"));
    assert_int_equal(sp_model_forward(m, kv, ws, many, 0, SP_LOGITS_NONE, NULL, &err), -1);
    assert_int_equal(sp_model_forward(m, kv, ws, many, 1, SP_LOGITS_LAST, NULL, &err), -1);
    assert_int_equal(kv->n, 0);
    sp_kv_free(kv);
    sp_workspace_free(ws);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batch_invariance, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_batch_invariance, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_and_thread_invariance, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_and_thread_invariance, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_kv_trim_exact, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_kv_trim_exact, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, setup_smol, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
