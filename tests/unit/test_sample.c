/* Unit tests for the sampler. */
#include "test_util.h"
#include "sample/sample.h"

#include <math.h>

static sp_sampler *mk(float temp, int top_k, float top_p, float min_p, int nv) {
    sp_sampler_params p = sp_sampler_defaults();
    p.temperature = temp; p.top_k = top_k; p.top_p = top_p; p.min_p = min_p; p.seed = 7;
    return sp_sampler_create(&p, nv);
}

static void test_greedy_argmax_ties_lowest_id(void **st) {
    (void)st;
    float l[6] = { 0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -INFINITY };
    sp_sampler *s = mk(0, 0, 1, 0, 6);
    assert_true(sp_sampler_is_greedy(s));
    assert_int_equal(sp_sampler_sample(s, l, 0), 1);
    int n;
    const sp_cand *c = sp_sampler_dist(s, l, &n);
    assert_int_equal(n, 1);
    assert_int_equal(c[0].id, 1);
    assert_true(c[0].p == 1.0f);
    sp_sampler_free(s);
}

static void test_logit_bias(void **st) {
    (void)st;
    float l[4] = { 1, 3, 2, 0 };
    sp_logit_bias b[2] = { { 1, -INFINITY }, { 3, 5.0f } };
    sp_sampler_params p = sp_sampler_defaults();
    p.bias = b; p.n_bias = 2;
    sp_sampler *s = sp_sampler_create(&p, 4);
    assert_int_equal(sp_sampler_sample(s, l, 0), 3);   /* 0 + 5 beats 2 */
    b[1].bias = 0;                                      /* the sampler copied the bias */
    assert_int_equal(sp_sampler_sample(s, l, 0), 3);
    sp_sampler_free(s);
    /* banned token never sampled at temperature > 0 */
    p = sp_sampler_defaults();
    sp_logit_bias ban = { 1, -INFINITY };
    p.bias = &ban; p.n_bias = 1; p.temperature = 1.0f;
    s = sp_sampler_create(&p, 4);
    for (uint64_t pos = 0; pos < 500; pos++) assert_int_not_equal(sp_sampler_sample(s, l, pos), 1);
    sp_sampler_free(s);
}

static void test_penalties(void **st) {
    (void)st;
    float l[3] = { 2.0f, 1.9f, -1.0f };
    sp_sampler_params p = sp_sampler_defaults();
    p.repeat_penalty = 2.0f;
    sp_sampler *s = sp_sampler_create(&p, 3);
    sp_sampler_accept(s, 0);
    assert_int_equal(sp_sampler_sample(s, l, 0), 1);    /* 2.0/2 = 1.0 < 1.9 */
    sp_sampler_unaccept(s, 1);
    assert_int_equal(sp_sampler_sample(s, l, 0), 0);
    sp_sampler_free(s);

    p = sp_sampler_defaults();
    p.frequency_penalty = 0.1f;
    s = sp_sampler_create(&p, 3);
    sp_sampler_accept(s, 0);
    assert_int_equal(sp_sampler_sample(s, l, 0), 0);    /* 2.0 - 0.1 = 1.9 ties, lowest id */
    sp_sampler_accept(s, 0);
    assert_int_equal(sp_sampler_sample(s, l, 0), 1);    /* 2.0 - 0.2 < 1.9 */
    sp_sampler_free(s);

    p = sp_sampler_defaults();
    p.presence_penalty = 0.15f;
    p.repeat_last_n = 2;
    s = sp_sampler_create(&p, 3);
    sp_sampler_accept(s, 0);
    sp_sampler_accept(s, 0);
    assert_int_equal(sp_sampler_sample(s, l, 0), 1);    /* presence counts once: 1.85 < 1.9 */
    sp_sampler_accept(s, 2);
    sp_sampler_accept(s, 2);                            /* token 0 left the window */
    assert_int_equal(sp_sampler_sample(s, l, 0), 0);
    sp_sampler_free(s);
}

static void test_top_k_top_p_min_p(void **st) {
    (void)st;
    /* logits chosen so that softmax is easy to reason about */
    float l[5] = { logf(0.1f), logf(0.4f), logf(0.2f), logf(0.25f), logf(0.05f) };
    int n;
    sp_sampler *s = mk(1.0f, 2, 1.0f, 0, 5);
    const sp_cand *c = sp_sampler_dist(s, l, &n);
    assert_int_equal(n, 2);
    assert_int_equal(c[0].id, 1);
    assert_int_equal(c[1].id, 3);
    assert_float_equal(c[0].p, 0.4 / 0.65, 1e-6);
    sp_sampler_free(s);

    s = mk(1.0f, 0, 0.7f, 0, 5);   /* 0.4 + 0.25 = 0.65 < 0.7 -> add 0.2 */
    c = sp_sampler_dist(s, l, &n);
    assert_int_equal(n, 3);
    assert_int_equal(c[2].id, 2);
    assert_float_equal(c[2].p, 0.2 / 0.85, 1e-6);
    sp_sampler_free(s);

    s = mk(1.0f, 0, 1.0f, 0.45f, 5);  /* keep p >= 0.18 */
    c = sp_sampler_dist(s, l, &n);
    assert_int_equal(n, 3);
    double sum = 0;
    for (int i = 0; i < n; i++) { sum += c[i].p; assert_true(c[i].id == 1 || c[i].id == 2 || c[i].id == 3); }
    assert_float_equal(sum, 1.0, 1e-6);
    sp_sampler_free(s);

    /* temperature sharpens: at T = 0.5, p ~ p^2 normalised */
    s = mk(0.5f, 0, 1.0f, 0, 5);
    c = sp_sampler_dist(s, l, &n);
    assert_int_equal(n, 5);
    double z = 0.01 + 0.16 + 0.04 + 0.0625 + 0.0025;
    for (int i = 0; i < n; i++)
        if (c[i].id == 1) assert_float_equal(c[i].p, 0.16 / z, 1e-5);
    sp_sampler_free(s);
}

static void test_keyed_draws(void **st) {
    (void)st;
    float l[4] = { 0, 0, 0, 0 };
    sp_sampler *a = mk(1.0f, 0, 1.0f, 0, 4), *b = mk(1.0f, 0, 1.0f, 0, 4);
    /* same (seed, pos) -> same token, regardless of call order */
    int32_t t10 = sp_sampler_sample(a, l, 10);
    for (uint64_t pos = 0; pos < 10; pos++) sp_sampler_sample(b, l, pos);
    assert_int_equal(sp_sampler_sample(b, l, 10), t10);
    sp_sampler_free(a);
    sp_sampler_free(b);
}

/* Empirical histogram of draws matches the distribution (chi-square). */
static void test_draw_distribution(void **st) {
    (void)st;
    float l[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) };
    const double p[4] = { 0.5, 0.3, 0.15, 0.05 };
    sp_sampler *s = mk(1.0f, 0, 1.0f, 0, 4);
    int hist[4] = { 0 };
    const int N = 40000;
    for (int i = 0; i < N; i++) hist[sp_sampler_sample(s, l, (uint64_t)i)]++;
    double chi = 0;
    for (int k = 0; k < 4; k++) chi += (hist[k] - N * p[k]) * (hist[k] - N * p[k]) / (N * p[k]);
    assert_true(chi < 16.27); /* 3 dof, p = 0.001 */
    sp_sampler_free(s);
}

static void test_validate(void **st) {
    (void)st;
    sp_err e;
    sp_sampler_params p = sp_sampler_defaults();
    assert_int_equal(sp_sampler_validate(&p, 10, &e), 0);
    p.temperature = -1; assert_int_equal(sp_sampler_validate(&p, 10, &e), -1);
    assert_non_null(strstr(e.msg, "temperature"));
    p = sp_sampler_defaults(); p.top_p = 0; assert_int_equal(sp_sampler_validate(&p, 10, &e), -1);
    p = sp_sampler_defaults(); p.top_p = 1.5f; assert_int_equal(sp_sampler_validate(&p, 10, &e), -1);
    p = sp_sampler_defaults(); p.min_p = -0.1f; assert_int_equal(sp_sampler_validate(&p, 10, &e), -1);
    p = sp_sampler_defaults(); p.top_k = -3; assert_int_equal(sp_sampler_validate(&p, 10, &e), -1);
    p = sp_sampler_defaults(); p.repeat_penalty = 0; assert_int_equal(sp_sampler_validate(&p, 10, &e), -1);
    sp_logit_bias b = { 10, 1.0f };
    p = sp_sampler_defaults(); p.bias = &b; p.n_bias = 1;
    assert_int_equal(sp_sampler_validate(&p, 10, &e), -1);
    assert_non_null(strstr(e.msg, "logit_bias"));
    b.token = 3; b.bias = NAN;
    assert_int_equal(sp_sampler_validate(&p, 10, &e), -1);
}

static void test_pick(void **st) {
    (void)st;
    sp_cand c[3] = { { 5, 0.5f }, { 2, 0.3f }, { 9, 0.2f } };
    assert_int_equal(sp_cand_pick(c, 3, 0.0), 5);
    assert_int_equal(sp_cand_pick(c, 3, 0.49), 5);
    assert_int_equal(sp_cand_pick(c, 3, 0.5), 2);
    assert_int_equal(sp_cand_pick(c, 3, 0.81), 9);
    assert_int_equal(sp_cand_pick(c, 3, 0.9999999), 9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_argmax_ties_lowest_id), cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_penalties), cmocka_unit_test(test_top_k_top_p_min_p),
        cmocka_unit_test(test_keyed_draws), cmocka_unit_test(test_draw_distribution),
        cmocka_unit_test(test_validate), cmocka_unit_test(test_pick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
