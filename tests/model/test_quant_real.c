/*
 * The block formats on the real models' tensors: every tensor type of
 * SmolLM2 (F32, Q4_1, Q8_0) and Gemma 3 (F32, Q5_0, Q4_K, Q6_K, Q8_0).
 * Rows are dequantized and checked against values from an independent
 * implementation (the gguf Python package, gguf-py 0.19.0,
 * gguf.quants.dequantize), checked for sanity, and used in dot products.
 */
#include "test_util.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

#include <math.h>

static sp_gguf *open_model(const char *file) {
    sp_base_init();
    sp_err err = {{0}};
    sp_gguf *g = sp_gguf_open(sp_test_model_path(file), &err);
    if (!g) print_error("%s: %s\n", file, err.msg);
    assert_non_null(g);
    return g;
}

static const sp_gguf_tensor *find(const sp_gguf *g, const char *name) {
    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, name);
    if (!t) print_error("no tensor %s\n", name);
    assert_non_null(t);
    return t;
}

static int64_t n_rows(const sp_gguf_tensor *t) { return (int64_t)(t->n_elements / t->ne[0]); }

static const void *row_ptr(const sp_gguf_tensor *t, int64_t r) {
    return (const uint8_t *)t->data + (size_t)r * sp_dtype_row_bytes(t->type, t->ne[0]);
}

/* ------------------------------------------------------------------------
 * The set of tensor types of each model
 * ---------------------------------------------------------------------- */
static void check_types(const char *file, const uint32_t *want, int n_want) {
    sp_gguf *g = open_model(file);
    bool seen[SP_DTYPE_COUNT] = {0};
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        assert_true(t->type < SP_DTYPE_COUNT);
        if (!sp_kernel_supports(t->type)) print_error("unsupported type %s\n", sp_dtype_name(t->type));
        assert_true(sp_kernel_supports(t->type));
        seen[t->type] = true;
    }
    int n_seen = 0;
    for (int t = 0; t < SP_DTYPE_COUNT; t++) n_seen += seen[t];
    assert_int_equal(n_seen, n_want);
    for (int i = 0; i < n_want; i++) assert_true(seen[want[i]]);
    sp_gguf_close(g);
}

static void test_types_smollm2(void **state) {
    (void)state;
    const uint32_t want[] = {SP_F32, SP_Q4_1, SP_Q8_0};
    check_types(SP_TEST_SMOLLM2, want, 3);
}

static void test_types_gemma3(void **state) {
    (void)state;
    const uint32_t want[] = {SP_F32, SP_Q5_0, SP_Q4_K, SP_Q6_K, SP_Q8_0};
    check_types(SP_TEST_GEMMA3, want, 5);
}

/* ------------------------------------------------------------------------
 * Rows against gguf-py: elements 0, 1, 2, 3, n/2, n-1 (printed with %.9g,
 * so they convert back to the exact float), and the double sums of the row
 * and of its squares.
 * ---------------------------------------------------------------------- */
typedef struct {
    const char *file, *tensor;
    int64_t row;
    float v[6];
    double sum, sumsq;
} ref_row;

static const ref_row k_refs[] = {
    {SP_TEST_SMOLLM2, "token_embd.weight", 0,          /* Q8_0 */
     {-0.106544495f, 0.0329780579f, 0.0481987f, -0.0228309631f, -0.0885772705f, 0.0297546387f},
     -2.2541093826293945, 8.5952948968633791},
    {SP_TEST_SMOLLM2, "token_embd.weight", 1000,
     {-0.111938477f, -0.0739593506f, 0.037979126f, -0.0179901123f, -0.0212869644f, 0.118103027f},
     1.9784250259399414, 7.0178814038144992},
    {SP_TEST_SMOLLM2, "token_embd.weight", 49151,
     {0.011505127f, 0.00575256348f, 0.0977935791f, -0.0977935791f, 0.0880737305f, -0.0417022705f},
     -0.46622085571289062, 15.193982947952463},
    {SP_TEST_SMOLLM2, "blk.0.ffn_down.weight", 0,      /* Q4_1 */
     {-0.330810547f, 0.346069336f, 0.0753173828f, -0.466186523f, -0.285217285f, 0.0640869141f},
     -17.089996337890625, 166.88934148382396},
    {SP_TEST_SMOLLM2, "blk.0.ffn_down.weight", 575,
     {-0.040222168f, -0.143615723f, -0.117767334f, 0.19241333f, -0.0507202148f, -0.181365967f},
     1.4561767578125, 26.398640965577215},
    {SP_TEST_SMOLLM2, "blk.0.attn_norm.weight", 0,     /* F32 */
     {0.0139770508f, 0.0238037109f, -0.0197753906f, -0.0302734375f, 0.0200195312f, -0.0383300781f},
     0.61294364929199219, 0.91808354090244393},
    {SP_TEST_GEMMA3, "token_embd.weight", 2,           /* Q8_0 */
     {-0.0142424107f, 0.0105669498f, 0.0133235455f, 0.0124046803f, 0.00212752819f, -0.0703082085f},
     1.4879008531570435, 1.0642288608167547},
    {SP_TEST_GEMMA3, "token_embd.weight", 100000,
     {-0.0050983429f, -0.0373878479f, -0.0356884003f, 0.0424861908f, 0.00944709778f, -0.0644254684f},
     -0.22972583770751953, 1.0636770268993132},
    {SP_TEST_GEMMA3, "blk.0.attn_k.weight", 0,         /* Q5_0 */
     {0.0f, -0.027557373f, 0.0118103027f, -0.027557373f, 0.00921630859f, -0.0305480957f},
     -0.5359344482421875, 0.5221409744117409},
    {SP_TEST_GEMMA3, "blk.0.attn_k.weight", 255,
     {-0.0206298828f, 0.0825195312f, -0.0103149414f, 0.0464172363f, 0.036529541f, 0.0240478516f},
     -0.055572509765625, 1.1061656652018428},
    {SP_TEST_GEMMA3, "blk.0.attn_output.weight", 0,    /* Q4_K */
     {-0.0157051086f, 0.0496692657f, -0.0374965668f, 0.0605649948f, 0.0132780075f, -0.0848178864f},
     1.0064644813537598, 1.931844423227119},
    {SP_TEST_GEMMA3, "blk.0.attn_output.weight", 639,
     {-0.0393362045f, 0.104498863f, 0.0428552628f, 0.0428552628f, 0.00800180435f, -0.0114076138f},
     0.58930468559265137, 0.76039481821626964},
    {SP_TEST_GEMMA3, "blk.0.ffn_down.weight", 0,       /* Q6_K */
     {0.00521171093f, 0.0217154622f, -0.0251899362f, 0.0138978958f, 0.016204834f, 0.00891685486f},
     0.52242231369018555, 0.7618259048432563},
    {SP_TEST_GEMMA3, "blk.0.ffn_down.weight", 639,
     {0.00161170959f, 0.0f, 0.00886440277f, 0.000805854797f, -0.00797653198f, -0.0094140172f},
     0.13615798950195312, 0.2238424334889757},
    {SP_TEST_GEMMA3, "output_norm.weight", 0,          /* F32 */
     {7.125f, 9.5625f, 47.0f, 145.0f, 6.75f, 21.625f},
     16861.6953125, 1871095.028137207},
};

static void test_rows_match_gguf_py(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof k_refs / sizeof *k_refs; k++) {
        const ref_row *r = &k_refs[k];
        sp_gguf *g = open_model(r->file);
        const sp_gguf_tensor *t = find(g, r->tensor);
        const int64_t n = (int64_t)t->ne[0];
        float *y = malloc((size_t)n * sizeof(float));
        sp_dequantize_row(t->type, row_ptr(t, r->row), y, n);
        const int64_t idx[6] = {0, 1, 2, 3, n / 2, n - 1};
        for (int i = 0; i < 6; i++) {
            if (y[idx[i]] != r->v[i])
                fail_msg("%s row %lld [%lld]: %.9g, gguf-py %.9g", r->tensor, (long long)r->row,
                         (long long)idx[i], y[idx[i]], r->v[i]);
        }
        double sum = 0, sumsq = 0;
        for (int64_t i = 0; i < n; i++) { sum += y[i]; sumsq += (double)y[i] * y[i]; }
        if (fabs(sum - r->sum) > 1e-9 * sqrt(r->sumsq * (double)n) || fabs(sumsq - r->sumsq) > 1e-9 * r->sumsq)
            fail_msg("%s row %lld: sum %.17g / %.17g, gguf-py %.17g / %.17g", r->tensor,
                     (long long)r->row, sum, sumsq, r->sum, r->sumsq);
        free(y);
        sp_gguf_close(g);
    }
}

/* ------------------------------------------------------------------------
 * Every type: rows of a few tensors are finite, of plausible magnitude,
 * and their dot with quantized activations matches the float dot.
 * ---------------------------------------------------------------------- */
static void fill_random(float *x, int64_t n, uint64_t seed) {
    sp_rng r = {seed};
    for (int64_t i = 0; i < n; i++) x[i] = (float)(2.0 * sp_rng_next_f64(&r) - 1.0);
}

/* sum_i w_i * x_i in double, where x is the activation row as the dot sees
 * it (dequantized); for Q8_1 the m term uses the stored s by definition. */
static double ref_dot(uint32_t wt, int64_t n, const void *w, const float *wd, const void *xq,
                      double *scale) {
    uint32_t at = sp_act_type(wt);
    float *xd = malloc((size_t)n * sizeof(float));
    sp_dequantize_row(at, xq, xd, n);
    double s = 0, a = 0;
    for (int64_t i = 0; i < n; i++) { s += (double)wd[i] * xd[i]; a += fabs((double)wd[i] * xd[i]); }
    if (at == SP_Q8_1) {
        const size_t wb = sp_dtype_get(wt)->bytes;
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *wp = (const uint8_t *)w + b * wb, *xp = (const uint8_t *)xq + b * 36;
            sp_f16 h;
            memcpy(&h, wp + 2, 2);
            double m = sp_f16_to_f32(h);
            memcpy(&h, xp, 2);
            double dx = sp_f16_to_f32(h);
            memcpy(&h, xp + 2, 2);
            double sx = sp_f16_to_f32(h);
            int qsum = 0;
            for (int j = 0; j < 32; j++) qsum += ((const int8_t *)(xp + 4))[j];
            s += m * (sx - dx * qsum);
            a += fabs(m * sx);
        }
    }
    free(xd);
    *scale = a;
    return s;
}

static void check_row(const sp_gguf_tensor *t, int64_t r) {
    char name[128];
    sp_str_cpy(t->name, name, sizeof name);
    const uint32_t wt = t->type, at = sp_act_type(wt);
    const int64_t n = (int64_t)t->ne[0];
    const void *w = row_ptr(t, r);
    float *wd = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
    void *xq = malloc((size_t)sp_dtype_row_bytes(at, (uint64_t)n));
    sp_dequantize_row(wt, w, wd, n);
    double sq = 0, amax = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(wd[i])) fail_msg("%s row %lld [%lld] not finite", name, (long long)r, (long long)i);
        sq += (double)wd[i] * wd[i];
        amax = fmax(amax, fabs(wd[i]));
    }
    const double rms = sqrt(sq / (double)n);
    /* weights are O(0.01..1); Gemma's norm weights reach a few hundred */
    if (!(rms > 1e-4 && amax < 1e4))
        fail_msg("%s row %lld: rms %.3g max %.3g implausible", name, (long long)r, rms, amax);

    fill_random(x, n, 1234 + (uint64_t)r);
    sp_quantize_row(at, x, xq, n);
    const double got = sp_vec_dot(wt, n, w, xq);
    double scale, exact = ref_dot(wt, n, w, wd, xq, &scale);
    if (!(fabs(got - exact) <= 1e-5 * scale))
        fail_msg("%s row %lld: dot %.9g, reference %.9g (scale %.3g)", name, (long long)r, got, exact, scale);
    double fdot = 0, fscale = 0;
    for (int64_t i = 0; i < n; i++) { fdot += (double)wd[i] * x[i]; fscale += fabs((double)wd[i] * x[i]); }
    if (!(fabs(got - fdot) <= 5e-3 * fscale))
        fail_msg("%s row %lld: dot %.9g, float dot %.9g (scale %.3g)", name, (long long)r, got, fdot, fscale);
    free(wd); free(x); free(xq);
}

/* For each type of the model: the first, a middle and the last tensor of
 * that type, rows first / middle / last. */
static void check_model_rows(const char *file) {
    sp_gguf *g = open_model(file);
    const uint64_t nt = sp_gguf_n_tensors(g);
    for (uint32_t type = 0; type < SP_DTYPE_COUNT; type++) {
        uint64_t idx[1024], cnt = 0;
        for (uint64_t i = 0; i < nt && cnt < 1024; i++)
            if (sp_gguf_tensor_at(g, i)->type == type) idx[cnt++] = i;
        if (!cnt) continue;
        const uint64_t pick[3] = {idx[0], idx[cnt / 2], idx[cnt - 1]};
        for (int p = 0; p < 3; p++) {
            const sp_gguf_tensor *t = sp_gguf_tensor_at(g, pick[p]);
            const int64_t nr = n_rows(t);
            check_row(t, 0);
            check_row(t, nr / 2);
            check_row(t, nr - 1);
        }
        print_message("# %s: %s checked (%llu tensors)\n", file, sp_dtype_name(type),
                      (unsigned long long)cnt);
    }
    sp_gguf_close(g);
}

static void test_rows_smollm2(void **state) {
    (void)state;
    check_model_rows(SP_TEST_SMOLLM2);
}

static void test_rows_gemma3(void **state) {
    (void)state;
    check_model_rows(SP_TEST_GEMMA3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_smollm2),
        cmocka_unit_test(test_types_gemma3),
        cmocka_unit_test(test_rows_match_gguf_py),
        cmocka_unit_test(test_rows_smollm2),
        cmocka_unit_test(test_rows_gemma3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
