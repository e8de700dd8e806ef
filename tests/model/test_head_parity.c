/* The trainer's head (train/head_train.c) and the engine's head
 * (model/head.c) are one network: a head written by the trainer and loaded
 * by the engine gives, on the real model's taps, the outputs and logits
 * the trainer computed for every unrolled step.  Step 0 over rows 0..P is
 * the engine's catch-up pass over the pairs (g_p, x_{p+1}); step j at row
 * P is the engine's j-th draft row from anchor P, fed the head's own
 * output and (teacher-forced, as the trainer is) the token x_{P+1+j}.  A
 * difference in any op, norm, position, residual or weight layout between
 * the two fails here, on both architectures (SmolLM2: raw residual; Gemma
 * 3: the normed one).  The trainer's static functions are reached by
 * including its source. */
#include "spec_fixture.h"
#include "../../src/train/head_train.c"

#include <unistd.h>

enum { J = 3, VD = 512 };

static const char *const text =
    "The river rises in the hills north of the town and runs south for forty miles. In spring the water "
    "is high and cold; in late summer it is low and warm. Farmers along its banks grow wheat, barley and "
    "apples, and sell them at the market on Saturdays.";

/* max |a - b| over n, relative to max |b| */
static double rel_diff(const float *a, const float *b, size_t n) {
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return m / (s > 0 ? s : 1);
}

static int argmax_of(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

static void check_parity(fixture *f, bool norm_residual) {
    sp_err err;
    const sp_model *m = f->m;
    const int d = m->hp.n_embd, L = m->hp.n_layer;
    sp_tokens tk = { 0 };
    assert_int_equal(sp_tokenize(f->tok, text, strlen(text), true, false, &tk, &err), 0);
    const int n = tk.n;
    assert_true(n >= 24);

    /* the real model's taps, rounded to bf16 as the data file keeps them */
    const int32_t layers[3] = { 2, L / 2, L - 3 };
    float *taps = malloc((size_t)n * 3 * d * sizeof(float));
    sp_kv *kv = sp_kv_create(m, n);
    sp_fwd_seq fw = { .kv = kv, .tokens = tk.ids, .n = n, .mode = SP_LOGITS_NONE, .tap_layers = layers, .n_taps = 3,
                      .taps = taps };
    assert_int_equal(sp_model_forward_batch(m, f->ws, &fw, 1, &err), 0);
    sp_kv_free(kv);
    uint16_t *taps16 = malloc((size_t)n * 3 * d * sizeof(uint16_t));
    for (size_t i = 0; i < (size_t)n * 3 * d; i++) {
        taps16[i] = sp_f32_to_bf16(taps[i]);
        taps[i] = sp_bf16_to_f32(taps16[i]);
    }
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    uint16_t *probs = malloc((size_t)n * sizeof(uint16_t));
    for (int p = 0; p < n; p++) {
        ids[p] = tk.ids[p + 1 < n ? p + 1 : p];
        probs[p] = sp_f32_to_f16(1.0f);
    }
    const sp_distill_seq q = { .n = n, .loss_from = 0, .tokens = tk.ids, .ids = ids, .probs = probs, .taps = taps16 };

    /* a trainer with the real model's shapes and perturbed initial weights */
    sp_head_train_opts o = sp_head_train_default_opts();
    o.ttt_steps = J;
    o.seq_len = n;
    o.draft_vocab = VD;
    o.norm_residual = norm_residual;
    memcpy(o.tap_layers, layers, sizeof layers);
    o.head_type = SP_F32;
    o.min_prob = 0.25f;
    trainer tr;
    trainer_init(&tr, m, f->pool, &o, 1);
    assert_int_equal(declare(&tr.a, &tr.D, &err), 0);
    int32_t d2t[VD];
    for (int i = 0; i < m->hp.n_vocab; i++) tr.t2d[i] = -1;
    int nv = 0;                                    /* the sequence's tokens first, then low ids */
    for (int p = 0; p < n && nv < VD; p++)
        if (tr.t2d[tk.ids[p]] < 0) { tr.t2d[tk.ids[p]] = nv; d2t[nv++] = tk.ids[p]; }
    for (int id = 0; nv < VD; id++)
        if (tr.t2d[id] < 0) { tr.t2d[id] = nv; d2t[nv++] = id; }
    init_params(&tr.a, &tr.D, m, d2t, 11);
    for (int i = 0; i < P_COUNT; i++) {
        float *p = sp_tr_param(&tr.a, i);
        sp_rng r = { 200 + (uint64_t)i };
        const float amp = i == P_OUT ? 0.0f : 0.05f;
        for (size_t e = 0; e < tr.a.views[i].numel; e++) p[e] += (float)(sp_rng_next_f64(&r) * 2 - 1) * amp;
    }
    run_seq(&tr, &q, false, 1, NULL);

    char path[] = "/tmp/specula-parity-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    int rc = 0;
    write_head(&tr, &o, d2t, path, &err, &rc);
    if (rc) fail_msg("write: %s", err.msg);
    sp_head *h = sp_head_load(path, m, &err);
    if (!h) fail_msg("load: %s", err.msg);
    unlink(path);
    assert_int_equal(h->hp.norm_before_residual, norm_residual);

    /* the engine: catch-up over pairs 0..P, then J - 1 draft rows */
    const int P = n - 1 - J, V = VD;
    sp_head_ws *hw = sp_head_ws_create(h, 64, n + J, f->pool);
    sp_kv *hkv = sp_head_kv_create(h, n + J);
    float *g = malloc((size_t)(P + 1) * d * sizeof(float)), *out = malloc((size_t)(P + 1) * d * sizeof(float));
    float *logits = malloc((size_t)V * sizeof(float)), *hl = malloc((size_t)d * sizeof(float));
    assert_true(P + 1 <= 64);
    sp_head_fuse(h, hw, taps, P + 1, g);
    assert_int_equal(sp_head_forward(h, hw, hkv, g, tk.ids + 1, P + 1, out, logits, &err), 0);
    const double tol = 2e-3;
    for (int p = 0; p <= P; p++) {
        const double e = rel_diff(out + (size_t)p * d, tr.s[0].h2 + (size_t)p * d, (size_t)d);
        if (e > tol) fail_msg("step 0 row %d: the engine's output differs from the trainer's by %.3g", p, e);
    }
    for (int j = 0; j < J; j++) {
        const float *want = tr.s[j].logits + (size_t)P * V;
        const double e = rel_diff(logits, want, (size_t)V);
        if (e > tol) fail_msg("step %d at row %d: logits differ by %.3g", j, P, e);
        assert_int_equal(argmax_of(logits, V), argmax_of(want, V));
        if (j + 1 == J) break;
        memcpy(hl, j == 0 ? out + (size_t)P * d : hl, (size_t)d * sizeof(float));
        const int32_t next = tk.ids[P + 2 + j];   /* step j + 1's input token x_{P+2+j} */
        float *o1 = malloc((size_t)d * sizeof(float));
        assert_int_equal(sp_head_forward(h, hw, hkv, hl, &next, 1, o1, logits, &err), 0);
        const double eo = rel_diff(o1, tr.s[j + 1].h2 + (size_t)P * d, (size_t)d);
        if (eo > tol) fail_msg("step %d at row %d: output differs by %.3g", j + 1, P, eo);
        memcpy(hl, o1, (size_t)d * sizeof(float));
        free(o1);
    }
    free(g); free(out); free(logits); free(hl);
    sp_kv_free(hkv);
    sp_head_ws_free(hw);
    sp_head_free(h);
    trainer_free(&tr);
    free(taps); free(taps16); free(ids); free(probs);
    sp_tokens_free(&tk);
}

static void test_parity_raw_residual(void **state) { check_parity(*state, false); }
static void test_parity_normed_residual(void **state) { check_parity(*state, true); }

int main(void) {
    const struct CMUnitTest smol[] = {
        cmocka_unit_test(test_parity_raw_residual),
        cmocka_unit_test(test_parity_normed_residual),
    };
    const struct CMUnitTest gemma[] = {
        cmocka_unit_test(test_parity_normed_residual),
    };
    int rc = cmocka_run_group_tests_name("smollm2", smol, fx_setup_smol, fx_teardown);
    rc |= cmocka_run_group_tests_name("gemma3", gemma, fx_setup_gemma, fx_teardown);
    return rc;
}
