/* Real-model tests of the forward pass: batch invariance (exact), KV trim
 * exactness, chunking and thread-count invariance, bad input, load options. */
#include "test_util.h"
#include "kernels/kernels.h"
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


/* Two sequences with their own caches in one pass give each exactly what
 * it gets alone. */
static void test_multi_sequence(void **state) {
    fixture *f = *state;
    const sp_model *m = f->m;
    const int V = m->hp.n_vocab;
    int32_t t[48];
    tokens(t, 48, V);
    sp_err err;
    sp_workspace *ws = sp_workspace_create(m, 64, f->pool);
    sp_kv *a = sp_kv_create(m, 64), *b = sp_kv_create(m, 64), *a1 = sp_kv_create(m, 64), *b1 = sp_kv_create(m, 64);
    float *la = malloc((size_t)5 * V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
    float *ra = malloc((size_t)5 * V * sizeof(float)), *rb = malloc((size_t)V * sizeof(float));
    assert_int_equal(sp_model_forward(m, a, ws, t, 10, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, b, ws, t + 20, 17, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, a1, ws, t, 10, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, b1, ws, t + 20, 17, SP_LOGITS_NONE, NULL, &err), 0);
    sp_fwd_seq seqs[2] = {
        { .kv = a, .tokens = t + 10, .n = 5, .mode = SP_LOGITS_ALL, .logits = la },
        { .kv = b, .tokens = t + 37, .n = 3, .mode = SP_LOGITS_LAST, .logits = lb },
    };
    assert_int_equal(sp_model_forward_batch(m, ws, seqs, 2, &err), 0);
    assert_int_equal(a->n, 15);
    assert_int_equal(b->n, 20);
    assert_int_equal(sp_model_forward(m, a1, ws, t + 10, 5, SP_LOGITS_ALL, ra, &err), 0);
    assert_int_equal(sp_model_forward(m, b1, ws, t + 37, 3, SP_LOGITS_LAST, rb, &err), 0);
    assert_memory_equal(la, ra, (size_t)5 * V * sizeof(float));
    assert_memory_equal(lb, rb, (size_t)V * sizeof(float));
    /* a cache may not appear twice in a pass */
    seqs[1].kv = a;
    assert_int_equal(sp_model_forward_batch(m, ws, seqs, 2, &err), -1);
    assert_non_null(strstr(err.msg, "share a cache"));
    sp_kv_free(a); sp_kv_free(b); sp_kv_free(a1); sp_kv_free(b1);
    sp_workspace_free(ws);
    free(la); free(lb); free(ra); free(rb);
}

/* Hidden-state taps: the rows of a 16-row window (batched with another
 * sequence that asks for none) carry bit-identical taps to one-row passes;
 * asking for taps changes no logit; tap layer 0 is the (scaled) token
 * embedding; bad tap requests are refused. */
static void test_taps(void **state) {
    fixture *f = *state;
    const sp_model *m = f->m;
    const int V = m->hp.n_vocab, d = m->hp.n_embd, L = m->hp.n_layer, P = 20, N = 16;
    const int32_t layers[4] = { 2, L / 2, L - 3, L };
    enum { T = 4 };
    int32_t t[64];
    tokens(t, 64, V);
    sp_err err;
    sp_workspace *ws = sp_workspace_create(m, 64, f->pool);
    sp_kv *a = sp_kv_create(m, 128), *b = sp_kv_create(m, 128), *o = sp_kv_create(m, 128);
    float *win = malloc((size_t)N * V * sizeof(float)), *one = malloc((size_t)V * sizeof(float));
    float *plain = malloc((size_t)N * V * sizeof(float)), *olog = malloc((size_t)V * sizeof(float));
    float *wtaps = malloc((size_t)N * T * d * sizeof(float)), *otaps = malloc((size_t)T * d * sizeof(float));
    assert_int_equal(sp_model_forward(m, a, ws, t, P, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, b, ws, t, P, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, o, ws, t + 40, 10, SP_LOGITS_NONE, NULL, &err), 0);
    /* the window with taps, batched with an untapped sequence */
    sp_fwd_seq seqs[2] = {
        { .kv = o, .tokens = t + 50, .n = 3, .mode = SP_LOGITS_LAST, .logits = olog },
        { .kv = a, .tokens = t + P, .n = N, .mode = SP_LOGITS_ALL, .logits = win,
          .tap_layers = layers, .n_taps = T, .taps = wtaps },
    };
    assert_int_equal(sp_model_forward_batch(m, ws, seqs, 2, &err), 0);
    /* the same window without taps: same logits */
    sp_kv_trim(a, P);
    assert_int_equal(sp_model_forward(m, a, ws, t + P, N, SP_LOGITS_ALL, plain, &err), 0);
    assert_memory_equal(win, plain, (size_t)N * V * sizeof(float));
    /* one row at a time: same taps, bit for bit */
    for (int i = 0; i < N; i++) {
        sp_fwd_seq q = { .kv = b, .tokens = t + P + i, .n = 1, .mode = SP_LOGITS_LAST, .logits = one,
                         .tap_layers = layers, .n_taps = T, .taps = otaps };
        assert_int_equal(sp_model_forward_batch(m, ws, &q, 1, &err), 0);
        assert_memory_equal(otaps, wtaps + (size_t)i * T * d, (size_t)T * d * sizeof(float));
        assert_memory_equal(one, win + (size_t)i * V, (size_t)V * sizeof(float));
    }
    /* layer 0 is the embedding the first layer reads */
    const int32_t zero = 0;
    float *emb = malloc((size_t)d * sizeof(float));
    sp_matrix_get_row(&m->tok_embd, t[P + N], emb);
    sp_vec_scale(emb, m->hp.embd_scale, d);
    sp_fwd_seq q0 = { .kv = b, .tokens = t + P + N, .n = 1, .tap_layers = &zero, .n_taps = 1, .taps = otaps };
    assert_int_equal(sp_model_forward_batch(m, ws, &q0, 1, &err), 0);
    assert_memory_equal(otaps, emb, (size_t)d * sizeof(float));
    /* bad requests */
    const int32_t bad = L + 1;
    sp_fwd_seq qb = { .kv = b, .tokens = t, .n = 1, .tap_layers = &bad, .n_taps = 1, .taps = otaps };
    assert_int_equal(sp_model_forward_batch(m, ws, &qb, 1, &err), -1);
    assert_non_null(strstr(err.msg, "tap layer"));
    qb.tap_layers = layers;
    qb.taps = NULL;
    assert_int_equal(sp_model_forward_batch(m, ws, &qb, 1, &err), -1);
    sp_kv_free(a); sp_kv_free(b); sp_kv_free(o);
    sp_workspace_free(ws);
    free(win); free(one); free(plain); free(olog); free(wtaps); free(otaps); free(emb);
}

/* A draft tree verified in one pass: every node's logits equal those of
 * its root-to-node path run as a chain, and keeping one path leaves the
 * cache exactly as plain decoding of that path would.  prefix sets the
 * context length (Gemma: beyond its 512-token sliding window). */
static void tree_check(fixture *f, int prefix) {
    const sp_model *m = f->m;
    const int V = m->hp.n_vocab;
    int32_t *t = malloc((size_t)(prefix + 16) * sizeof(int32_t));
    tokens(t, prefix + 16, V);
    /*        0
     *      /   \
     *     1     4
     *    / \    |
     *   2   3   5 - 6      tokens: distinct ids from t[prefix..] */
    const int32_t parent[7] = { -1, 0, 1, 1, 0, 4, 5 };
    const int32_t *win = t + prefix;
    sp_err err;
    sp_workspace *ws = sp_workspace_create(m, 64, f->pool);
    const int ctx = prefix + 16;
    sp_kv *kv = sp_kv_create(m, ctx);
    float *lt = malloc((size_t)7 * V * sizeof(float)), *lc = malloc((size_t)7 * V * sizeof(float));
    assert_int_equal(sp_model_forward(m, kv, ws, t, prefix, SP_LOGITS_NONE, NULL, &err), 0);
    sp_fwd_seq q = { .kv = kv, .tokens = win, .n = 7, .parent = parent, .mode = SP_LOGITS_ALL, .logits = lt };
    assert_int_equal(sp_model_forward_batch(m, ws, &q, 1, &err), 0);
    assert_int_equal(kv->n, prefix + 7);
    const int32_t leaves[3][4] = { { 0, 1, 2, -1 }, { 0, 1, 3, -1 }, { 0, 4, 5, 6 } };
    for (int p = 0; p < 3; p++) {
        int32_t path_tok[4];
        int n = 0;
        while (n < 4 && leaves[p][n] >= 0) { path_tok[n] = win[leaves[p][n]]; n++; }
        sp_kv *c = sp_kv_create(m, ctx);
        assert_int_equal(sp_model_forward(m, c, ws, t, prefix, SP_LOGITS_NONE, NULL, &err), 0);
        assert_int_equal(sp_model_forward(m, c, ws, path_tok, n, SP_LOGITS_ALL, lc, &err), 0);
        for (int i = 0; i < n; i++)
            assert_memory_equal(lt + (size_t)leaves[p][i] * V, lc + (size_t)i * V, (size_t)V * sizeof(float));
        sp_kv_free(c);
    }
    /* keep the path 0-4-5, then one more token: as if decoded plainly */
    const int32_t keep[3] = { 0, 4, 5 };
    sp_kv_keep_path(kv, prefix, keep, 3);
    assert_int_equal(kv->n, prefix + 3);
    int32_t next = t[prefix + 10];
    assert_int_equal(sp_model_forward(m, kv, ws, &next, 1, SP_LOGITS_LAST, lt, &err), 0);
    sp_kv *c = sp_kv_create(m, ctx);
    int32_t plain[4] = { win[0], win[4], win[5], next };
    assert_int_equal(sp_model_forward(m, c, ws, t, prefix, SP_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(sp_model_forward(m, c, ws, plain, 4, SP_LOGITS_LAST, lc, &err), 0);
    assert_memory_equal(lt, lc, (size_t)V * sizeof(float));
    /* a parent that is not an earlier row is refused */
    const int32_t bad[2] = { -1, 1 };
    sp_fwd_seq qb = { .kv = kv, .tokens = win, .n = 2, .parent = bad, .mode = SP_LOGITS_NONE };
    assert_int_equal(sp_model_forward_batch(m, ws, &qb, 1, &err), -1);
    assert_non_null(strstr(err.msg, "parent"));
    sp_kv_free(c);
    sp_kv_free(kv);
    sp_workspace_free(ws);
    free(lt); free(lc); free(t);
}
static void test_tree(void **state) { tree_check(*state, 20); }
static void test_tree_sliding_window(void **state) { tree_check(*state, 515); }

/* sp_model_load_with: pack = false keeps the mapped layout (nothing
 * packed) and still runs; the defaults pack wherever the kernels can. */
static void test_load_opts(void **state) {
    fixture *f = *state;
    assert_true(sp_model_load_default_opts().pack);
    assert_int_equal(f->m->packed != NULL, sp_kernels_have_packed());   /* sp_model_load: defaults */
    sp_err err;
    const sp_model_load_opts plain = { .pack = false };
    sp_model *m = sp_model_load_with(sp_test_model_path(SP_TEST_SMOLLM2), &plain, &err);
    assert_non_null(m);
    assert_null(m->packed);
    assert_int_equal(m->packed_bytes, 0);
    const int V = m->hp.n_vocab;
    int32_t t[8];
    tokens(t, 8, V);
    float *logits = malloc((size_t)V * sizeof(float));
    sp_workspace *ws = sp_workspace_create(m, 8, f->pool);
    sp_kv *kv = sp_kv_create(m, 16);
    assert_int_equal(sp_model_forward(m, kv, ws, t, 8, SP_LOGITS_LAST, logits, &err), 0);
    for (int j = 0; j < V; j += 997) assert_true(isfinite(logits[j]));
    sp_kv_free(kv);
    sp_workspace_free(ws);
    free(logits);
    sp_model_free(m);
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
        cmocka_unit_test_setup_teardown(test_multi_sequence, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_multi_sequence, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_taps, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_taps, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_tree, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_load_opts, setup_smol, teardown),
        cmocka_unit_test_setup_teardown(test_tree, setup_gemma, teardown),
        cmocka_unit_test_setup_teardown(test_tree_sliding_window, setup_gemma, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
