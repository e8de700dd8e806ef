/*
 * Unit tests of the training ops (src/train): every backward against
 * central differences of a double-precision reference forward, the SIMD
 * GEMM against that reference and across thread counts, RoPE against the
 * engine's kernels, list attention against masked attention, the loss,
 * AdamW and its schedule, the arena, and a tiny model that learns.
 */
#include "test_util.h"
#include "train/train.h"
#include "kernels/kernels.h"

#include <math.h>

/* ---- helpers ------------------------------------------------------------ */

static void fill(float *p, size_t n, uint64_t seed, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * (float)sp_rng_uniform(seed, i, 7) - 1.0f);
}
static double *to_d(const float *p, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = p[i];
    return d;
}
static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* Central differences of f(ctx) with respect to each x[i] (in double). */
typedef double (*loss_fn)(void *ctx);
static void fd_grad(loss_fn f, void *ctx, double *x, size_t n, double *g) {
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i];
        x[i] = x0 + h;
        const double lp = f(ctx);
        x[i] = x0 - h;
        const double lm = f(ctx);
        x[i] = x0;
        g[i] = (lp - lm) / (2 * h);
    }
}

/* |got - want| <= atol + rtol |want| everywhere: float backward vs double differences. */
static void expect_close(const char *what, const float *got, const double *want, size_t n, double atol,
                         double rtol) {
    for (size_t i = 0; i < n; i++) {
        if (fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i])) continue;
        fail_msg("%s[%zu]: got %.8g, want %.8g", what, i, (double)got[i], want[i]);
    }
}
#define ATOL 2e-5
#define RTOL 1e-4

/* Checks the analytic gradient g (float) of the loss against differences wrt x. */
static void check_fd(const char *what, loss_fn f, void *ctx, double *x, size_t n, const float *g) {
    double *want = malloc(n * sizeof *want);
    fd_grad(f, ctx, x, n, want);
    expect_close(what, g, want, n, ATOL, RTOL);
    free(want);
}

/* ---- linear ------------------------------------------------------------- */

typedef struct { int n, in, out; double *x, *w, *b, *r; } lin_ctx;

static void lin_ref(const lin_ctx *c, double *y) {
    for (int t = 0; t < c->n; t++)
        for (int o = 0; o < c->out; o++) {
            double s = c->b ? c->b[o] : 0.0;
            for (int i = 0; i < c->in; i++) s += c->x[t * c->in + i] * c->w[o * c->in + i];
            y[t * c->out + o] = s;
        }
}
static double lin_loss(void *p) {
    const lin_ctx *c = p;
    double *y = malloc(sizeof(double) * (size_t)c->n * c->out), l = 0;
    lin_ref(c, y);
    for (int i = 0; i < c->n * c->out; i++) l += c->r[i] * y[i];
    free(y);
    return l;
}

static void test_linear_grad(void **state) {
    (void)state;
    const int n = 7, in = 13, out = 37;   /* edge tiles on every kernel */
    float *x = falloc(n * in), *w = falloc(out * in), *b = falloc(out), *r = falloc(n * out);
    float *y = falloc(n * out), *dx = falloc(n * in), *dw = falloc(out * in), *db = falloc(out);
    fill(x, n * in, 1, 1); fill(w, out * in, 2, 1); fill(b, out, 3, 1); fill(r, n * out, 4, 1);
    sp_tr_linear_fwd(NULL, y, x, w, b, n, in, out);
    lin_ctx c = { n, in, out, to_d(x, n * in), to_d(w, out * in), to_d(b, out), to_d(r, n * out) };
    double *yr = malloc(sizeof(double) * n * out);
    lin_ref(&c, yr);
    expect_close("linear y", y, yr, n * out, 1e-5, 1e-5);
    /* accumulates: start the gradients at 1, then subtract it */
    for (int i = 0; i < n * in; i++) dx[i] = 1;
    sp_tr_linear_bwd(NULL, dx, dw, db, r, x, w, n, in, out);
    for (int i = 0; i < n * in; i++) dx[i] -= 1;
    check_fd("linear dx", lin_loss, &c, c.x, n * in, dx);
    check_fd("linear dw", lin_loss, &c, c.w, out * in, dw);
    check_fd("linear db", lin_loss, &c, c.b, out, db);
    free(x); free(w); free(b); free(r); free(y); free(dx); free(dw); free(db);
    free(c.x); free(c.w); free(c.b); free(c.r); free(yr);
}

/* Every SIMD level against the double reference and the portable code, and
 * bit-identical results for 1, 2 and 3 threads, on shapes that cross the K,
 * M and N blocking and have edge tiles. */
static void test_linear_levels_threads(void **state) {
    (void)state;
    static const int shapes[][3] = { { 100, 300, 70 }, { 9, 40, 1100 }, { 1, 5, 3 } };
    sp_pool *p2 = sp_pool_create(2), *p3 = sp_pool_create(3);
    const sp_simd saved = sp_kernels_simd();
    for (int lv = SP_SIMD_SCALAR; lv <= SP_SIMD_AVX512; lv++) {
        if (sp_kernels_set_simd((sp_simd)lv) != 0) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const int n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
            float *x = falloc(n * in), *w = falloc(out * in), *dy = falloc(n * out);
            fill(x, n * in, 10, 1); fill(w, out * in, 11, 1); fill(dy, n * out, 12, 1);
            float *y1 = falloc(n * out), *y2 = falloc(n * out), *dx1 = falloc(n * in), *dx2 = falloc(n * in);
            float *dw1 = falloc(out * in), *dw2 = falloc(out * in);
            sp_tr_linear_fwd(NULL, y1, x, w, NULL, n, in, out);
            sp_tr_linear_fwd(p2, y2, x, w, NULL, n, in, out);
            sp_tr_linear_bwd(NULL, dx1, dw1, NULL, dy, x, w, n, in, out);
            sp_tr_linear_bwd(p2, dx2, dw2, NULL, dy, x, w, n, in, out);
            assert_memory_equal(y1, y2, sizeof(float) * n * out);
            assert_memory_equal(dx1, dx2, sizeof(float) * n * in);
            assert_memory_equal(dw1, dw2, sizeof(float) * out * in);
            memset(dx2, 0, sizeof(float) * n * in);
            memset(dw2, 0, sizeof(float) * out * in);
            sp_tr_linear_fwd(p3, y2, x, w, NULL, n, in, out);
            sp_tr_linear_bwd(p3, dx2, dw2, NULL, dy, x, w, n, in, out);
            assert_memory_equal(y1, y2, sizeof(float) * n * out);
            assert_memory_equal(dx1, dx2, sizeof(float) * n * in);
            assert_memory_equal(dw1, dw2, sizeof(float) * out * in);
            /* the reference, tolerance of float sums of up to 300 terms of size 1 */
            lin_ctx c = { n, in, out, to_d(x, n * in), to_d(w, out * in), NULL, NULL };
            double *yr = malloc(sizeof(double) * n * out);
            lin_ref(&c, yr);
            expect_close("linear y (level)", y1, yr, n * out, 1e-4, 1e-5);
            for (int i = 0; i < in; i++) {          /* the last row of dx and of dW summed in double */
                double sx = 0, sw = 0;
                for (int o = 0; o < out; o++) sx += (double)dy[(n - 1) * out + o] * w[o * in + i];
                for (int t = 0; t < n; t++) sw += (double)dy[t * out + out - 1] * x[t * in + i];
                expect_close("linear dx (level)", &dx1[(n - 1) * in + i], &sx, 1, 1e-4, 1e-5);
                expect_close("linear dw (level)", &dw1[(out - 1) * in + i], &sw, 1, 1e-4, 1e-5);
            }
            /* and everything against the portable code: only the rounding of
             * FMA against multiply-then-add may differ */
            float *ys = falloc(n * out), *dxs = falloc(n * in), *dws = falloc(out * in);
            sp_kernels_set_simd(SP_SIMD_SCALAR);
            sp_tr_linear_fwd(NULL, ys, x, w, NULL, n, in, out);
            sp_tr_linear_bwd(NULL, dxs, dws, NULL, dy, x, w, n, in, out);
            sp_kernels_set_simd((sp_simd)lv);
            double *ysd = to_d(ys, n * out), *dxsd = to_d(dxs, n * in), *dwsd = to_d(dws, out * in);
            expect_close("linear y vs scalar", y1, ysd, n * out, 2e-5, 1e-5);
            expect_close("linear dx vs scalar", dx1, dxsd, n * in, 2e-5, 1e-5);
            expect_close("linear dw vs scalar", dw1, dwsd, out * in, 2e-5, 1e-5);
            free(ys); free(dxs); free(dws); free(ysd); free(dxsd); free(dwsd);
            free(c.x); free(c.w); free(yr);
            free(x); free(w); free(dy); free(y1); free(y2); free(dx1); free(dx2); free(dw1); free(dw2);
        }
    }
    sp_kernels_set_simd(saved);
    sp_pool_free(p2);
    sp_pool_free(p3);
}

/* ---- rmsnorm ------------------------------------------------------------ */

typedef struct { int n, d; double *x, *g, *r; } rms_ctx;
static double rms_loss(void *p) {
    const rms_ctx *c = p;
    double l = 0;
    for (int t = 0; t < c->n; t++) {
        double ss = 0;
        for (int i = 0; i < c->d; i++) ss += c->x[t * c->d + i] * c->x[t * c->d + i];
        const double rs = 1 / sqrt(ss / c->d + 1e-5);
        for (int i = 0; i < c->d; i++) l += c->r[t * c->d + i] * c->x[t * c->d + i] * rs * c->g[i];
    }
    return l;
}

static void test_rmsnorm_grad(void **state) {
    (void)state;
    const int n = 3, d = 10;
    float *x = falloc(n * d), *g = falloc(d), *r = falloc(n * d), *y = falloc(n * d), rstd[3];
    float *dx = falloc(n * d), *dg = falloc(d);
    fill(x, n * d, 20, 2); fill(g, d, 21, 1.5f); fill(r, n * d, 22, 1);
    sp_tr_rmsnorm_fwd(y, rstd, x, g, n, d, 1e-5f);
    rms_ctx c = { n, d, to_d(x, n * d), to_d(g, d), to_d(r, n * d) };
    double l = 0;
    for (int i = 0; i < n * d; i++) l += (double)r[i] * y[i];
    assert_true(fabs(l - rms_loss(&c)) < 1e-5);
    sp_tr_rmsnorm_bwd(dx, dg, r, x, g, rstd, n, d);
    check_fd("rmsnorm dx", rms_loss, &c, c.x, n * d, dx);
    check_fd("rmsnorm dg", rms_loss, &c, c.g, d, dg);
    free(x); free(g); free(r); free(y); free(dx); free(dg); free(c.x); free(c.g); free(c.r);
}

/* ---- rope --------------------------------------------------------------- */

enum { RN = 3, RH = 2, RHD = 8, RROT = 6 };
static const int32_t rope_pos[RN] = { 0, 5, 1234 };

typedef struct { double *x, *r; bool neox; } rope_ctx;
/* the rotation in double with the kernels' cos/sin table (so the
 * differences see the same angles as the float code) */
static double rope_loss(void *p) {
    const rope_ctx *c = p;
    double l = 0;
    float cs[RROT];
    for (int t = 0; t < RN; t++) {
        sp_rope_table(cs, RROT, rope_pos[t], 10000.0f);
        for (int h = 0; h < RH; h++) {
            const double *x = c->x + (t * RH + h) * RHD, *r = c->r + (t * RH + h) * RHD;
            for (int i = 0; i < RROT / 2; i++) {
                const int a = c->neox ? i : 2 * i, b = c->neox ? i + RROT / 2 : 2 * i + 1;
                l += r[a] * (x[a] * cs[2 * i] - x[b] * cs[2 * i + 1]);
                l += r[b] * (x[a] * cs[2 * i + 1] + x[b] * cs[2 * i]);
            }
            for (int i = RROT; i < RHD; i++) l += r[i] * x[i];
        }
    }
    return l;
}

static void test_rope(void **state) {
    (void)state;
    const int d = RH * RHD;
    for (int neox = 0; neox < 2; neox++) {
        float x[RN * RH * RHD], y[RN * RH * RHD], want[RN * RH * RHD], r[RN * RH * RHD], dx[RN * RH * RHD];
        fill(x, RN * d, 30, 1); fill(r, RN * d, 31, 1);
        memcpy(want, x, sizeof x);
        float cs[RROT];
        for (int t = 0; t < RN; t++) {
            sp_rope_table(cs, RROT, rope_pos[t], 10000.0f);
            for (int h = 0; h < RH; h++) sp_rope_apply(want + t * d + h * RHD, cs, RROT, neox);
        }
        sp_tr_rope_fwd(y, x, rope_pos, RN, RH, RHD, RROT, 10000.0f, neox);
        assert_memory_equal(y, want, sizeof y);                  /* the engine's rotation, bit for bit */
        for (int t = 0; t < RN; t++) {
            float h0[RHD];
            memcpy(h0, x + t * d, sizeof h0);
            sp_rope(h0, RHD, RROT, rope_pos[t], 10000.0f, neox);
            assert_memory_equal(h0, want + t * d, sizeof h0);
        }
        memcpy(y, x, sizeof x);                                  /* in place */
        sp_tr_rope_fwd(y, y, rope_pos, RN, RH, RHD, RROT, 10000.0f, neox);
        assert_memory_equal(y, want, sizeof y);
        memset(dx, 0, sizeof dx);
        sp_tr_rope_bwd(dx, r, rope_pos, RN, RH, RHD, RROT, 10000.0f, neox);
        rope_ctx c = { to_d(x, RN * d), to_d(r, RN * d), neox };
        check_fd(neox ? "rope neox dx" : "rope llama dx", rope_loss, &c, c.x, RN * d, dx);
        free(c.x); free(c.r);
    }
}

/* ---- swiglu, add -------------------------------------------------------- */

typedef struct { int n; double *g, *u, *r; } swi_ctx;
static double swi_loss(void *p) {
    const swi_ctx *c = p;
    double l = 0;
    for (int i = 0; i < c->n; i++) l += c->r[i] * c->g[i] / (1 + exp(-c->g[i])) * c->u[i];
    return l;
}

static void test_swiglu_add(void **state) {
    (void)state;
    enum { N = 24 };
    float g[N], u[N], r[N], h[N], dg[N] = { 0 }, du[N] = { 0 };
    fill(g, N, 40, 5); fill(u, N, 41, 2); fill(r, N, 42, 1);
    sp_tr_swiglu_fwd(h, g, u, N);
    swi_ctx c = { N, to_d(g, N), to_d(u, N), to_d(r, N) };
    double l = 0;
    for (int i = 0; i < N; i++) l += (double)r[i] * h[i];
    assert_true(fabs(l - swi_loss(&c)) < 1e-5);
    sp_tr_swiglu_bwd(dg, du, r, g, u, N);
    check_fd("swiglu dgate", swi_loss, &c, c.g, N, dg);
    check_fd("swiglu dup", swi_loss, &c, c.u, N, du);
    free(c.g); free(c.u); free(c.r);
    float a[3] = { 1, 2, 3 }, b[3] = { 10, 20, 30 }, y[3];
    sp_tr_add_fwd(y, a, b, 3);
    assert_true(y[0] == 11 && y[1] == 22 && y[2] == 33);
    sp_tr_acc(y, a, 3);
    assert_true(y[0] == 12 && y[1] == 24 && y[2] == 36);
}

/* ---- attention ---------------------------------------------------------- */

enum { AT = 4, AS = 8, AH = 4, AKV = 2, AHD = 21 };  /* 21: vector body and tail */

/* Masked attention in double: row t attends the key rows s with mask[t][s]. */
typedef struct { bool mask[AT][AS]; double *q, *k, *v, *r; } att_ctx;
static double att_loss(void *p) {
    const att_ctx *c = p;
    double l = 0;
    for (int t = 0; t < AT; t++)
        for (int h = 0; h < AH; h++) {
            const int g = h / (AH / AKV);
            double sc[AS], mx = -INFINITY, sum = 0;
            for (int s = 0; s < AS; s++) {
                if (!c->mask[t][s]) continue;
                double d = 0;
                for (int i = 0; i < AHD; i++) d += c->q[(t * AH + h) * AHD + i] * c->k[(s * AKV + g) * AHD + i];
                sc[s] = d / sqrt(AHD);
                mx = sc[s] > mx ? sc[s] : mx;
            }
            for (int s = 0; s < AS; s++) if (c->mask[t][s]) sum += exp(sc[s] - mx);
            for (int s = 0; s < AS; s++) {
                if (!c->mask[t][s]) continue;
                const double a = exp(sc[s] - mx) / sum;
                for (int i = 0; i < AHD; i++)
                    l += c->r[(t * AH + h) * AHD + i] * a * c->v[(s * AKV + g) * AHD + i];
            }
        }
    return l;
}

/* Training-time-test shape: key rows 0..3 are step 0, 4..7 step 1; the
 * step-1 query row t attends step 0's rows 0..t and its own row 4+t.  The
 * lists go in descending order (any order is allowed).  At every SIMD level. */
static void attention_grad_at_level(void) {
    att_ctx c = { 0 };
    int32_t koff[AT + 1], kidx[AT * AS], nk = 0;
    for (int t = 0; t < AT; t++) {
        koff[t] = nk;
        for (int s = AS - 1; s >= 0; s--) {
            c.mask[t][s] = s <= t || s == AT + t;
            if (c.mask[t][s]) kidx[nk++] = s;
        }
    }
    koff[AT] = nk;
    const sp_tr_attn_shape sh = { AT, AS, AH, AKV, AHD, koff, kidx };
    const int qn = AT * AH * AHD, kn = AS * AKV * AHD;
    float *q = falloc(qn), *k = falloc(kn), *v = falloc(kn), *r = falloc(qn), *out = falloc(qn);
    float *att = falloc(AH * nk), *dq = falloc(qn), *dk = falloc(kn), *dv = falloc(kn);
    fill(q, qn, 50, 2); fill(k, kn, 51, 2); fill(v, kn, 52, 1); fill(r, qn, 53, 1);
    sp_tr_attn_fwd(NULL, out, att, q, k, v, &sh);
    c.q = to_d(q, qn); c.k = to_d(k, kn); c.v = to_d(v, kn); c.r = to_d(r, qn);
    double l = 0;
    for (int i = 0; i < qn; i++) l += (double)r[i] * out[i];
    assert_true(fabs(l - att_loss(&c)) < 1e-5);
    for (int t = 0; t < AT; t++)       /* saved probabilities: each (row, head) sums to 1 */
        for (int h = 0; h < AH; h++) {
            const int len = koff[t + 1] - koff[t];
            double s = 0;
            for (int j = 0; j < len; j++) s += att[koff[t] * AH + h * len + j];
            assert_true(fabs(s - 1) < 1e-6);
        }
    sp_tr_attn_bwd(NULL, dq, dk, dv, r, att, q, k, v, &sh);
    check_fd("attn dq", att_loss, &c, c.q, qn, dq);
    check_fd("attn dk", att_loss, &c, c.k, kn, dk);
    check_fd("attn dv", att_loss, &c, c.v, kn, dv);
    free(q); free(k); free(v); free(r); free(out); free(att); free(dq); free(dk); free(dv);
    free(c.q); free(c.k); free(c.v); free(c.r);
}

static void test_attention_grad(void **state) {
    (void)state;
    const sp_simd saved = sp_kernels_simd();
    for (int lv = SP_SIMD_SCALAR; lv <= SP_SIMD_AVX512; lv++)
        if (sp_kernels_set_simd((sp_simd)lv) == 0) attention_grad_at_level();
    sp_kernels_set_simd(saved);
}

/* T rows with `past` cached rows before them == the last T rows of causal
 * attention over the whole sequence; 1 and 2 threads give the same output
 * and dq bit for bit, dk and dv within rounding (summed per thread), and
 * 2 threads twice the same bits. */
static void test_attention_cache_threads(void **state) {
    (void)state;
    enum { P = 5, T = 6, S = P + T, H = 4, KV = 2, HD = 8 };
    const int qd = H * HD, kd = KV * HD;
    int32_t koff[T + 1], kidx[T * P + T * (T + 1) / 2], koff2[S + 1], kidx2[S * (S + 1) / 2];
    sp_tr_attn_causal(koff, kidx, T, P);
    sp_tr_attn_causal(koff2, kidx2, S, 0);
    assert_int_equal(koff[T], T * P + T * (T + 1) / 2);
    const sp_tr_attn_shape sh = { T, S, H, KV, HD, koff, kidx }, sh2 = { S, S, H, KV, HD, koff2, kidx2 };
    float *qf = falloc(S * qd), *k = falloc(S * kd), *v = falloc(S * kd), *dout = falloc(S * qd);
    fill(qf, S * qd, 60, 1); fill(k, S * kd, 61, 1); fill(v, S * kd, 62, 1); fill(dout, S * qd, 63, 1);
    float *o1 = falloc(T * qd), *o2 = falloc(S * qd), *a1 = falloc(H * koff[T]), *a2 = falloc(H * koff2[S]);
    sp_tr_attn_fwd(NULL, o1, a1, qf + P * qd, k, v, &sh);
    sp_tr_attn_fwd(NULL, o2, a2, qf, k, v, &sh2);
    assert_memory_equal(o1, o2 + P * qd, sizeof(float) * T * qd);
    sp_pool *p2 = sp_pool_create(2);
    float *o3 = falloc(T * qd), *a3 = falloc(H * koff[T]);
    sp_tr_attn_fwd(p2, o3, a3, qf + P * qd, k, v, &sh);
    assert_memory_equal(o1, o3, sizeof(float) * T * qd);
    float *g[3][3];
    for (int run = 0; run < 3; run++) {
        g[run][0] = falloc(T * qd); g[run][1] = falloc(S * kd); g[run][2] = falloc(S * kd);
        sp_tr_attn_bwd(run ? p2 : NULL, g[run][0], g[run][1], g[run][2], dout, a1, qf + P * qd, k, v, &sh);
    }
    assert_memory_equal(g[0][0], g[1][0], sizeof(float) * T * qd);
    for (int i = 0; i < 3; i++) assert_memory_equal(g[1][i], g[2][i], sizeof(float) * (i ? S * kd : T * qd));
    for (int i = 1; i < 3; i++) {
        double *want = to_d(g[0][i], S * kd);
        expect_close(i == 1 ? "dk 2 threads" : "dv 2 threads", g[1][i], want, S * kd, 1e-6, 1e-5);
        free(want);
    }
    for (int run = 0; run < 3; run++) for (int i = 0; i < 3; i++) free(g[run][i]);
    sp_pool_free(p2);
    free(qf); free(k); free(v); free(dout); free(o1); free(o2); free(o3); free(a1); free(a2); free(a3);
}

/* The training-time-test lists: step 0 is causal; step 2 of T = 3 adds the
 * row's own keys of steps 1 and 2 (rows 3 + t and 6 + t). */
static void test_attention_ttt_lists(void **state) {
    (void)state;
    int32_t koff[4], kidx[12], coff[4], cidx[6];
    sp_tr_attn_ttt(koff, kidx, 3, 0);
    sp_tr_attn_causal(coff, cidx, 3, 0);
    assert_memory_equal(koff, coff, sizeof coff);
    assert_memory_equal(kidx, cidx, sizeof cidx);
    sp_tr_attn_ttt(koff, kidx, 3, 2);
    const int32_t want_off[4] = { 0, 3, 7, 12 }, want_idx[12] = { 0, 3, 6,  0, 1, 4, 7,  0, 1, 2, 5, 8 };
    assert_memory_equal(koff, want_off, sizeof want_off);
    assert_memory_equal(kidx, want_idx, sizeof want_idx);
}

/* ---- soft cross-entropy -------------------------------------------------- */

enum { CN = 5, CV = 11, CK = 3 };
typedef struct { double *l; const int32_t *ids; const float *p, *w; double denom; } ce_ctx;
/* Row t's log-normaliser log sum exp(l) and its targets' mass; false when
 * the row is masked (no target mass or weight 0). */
static bool ref_row(const ce_ctx *c, int t, double *lse, double *ps) {
    double mx = -INFINITY, se = 0;
    *ps = 0;
    for (int j = 0; j < CV; j++) mx = c->l[t * CV + j] > mx ? c->l[t * CV + j] : mx;
    for (int j = 0; j < CV; j++) se += exp(c->l[t * CV + j] - mx);
    for (int i = 0; i < CK; i++) if (c->ids[t * CK + i] >= 0) *ps += c->p[t * CK + i];
    *lse = mx + log(se);
    return *ps > 0 && c->w[t] != 0;
}

static double ce_loss(void *p) {
    const ce_ctx *c = p;
    double loss = 0;
    for (int t = 0; t < CN; t++) {
        double lse, ps, ce = 0;
        if (!ref_row(c, t, &lse, &ps)) continue;
        for (int i = 0; i < CK; i++)
            if (c->ids[t * CK + i] >= 0)
                ce -= c->p[t * CK + i] / ps * (c->l[t * CV + c->ids[t * CK + i]] - lse);
        loss += c->w[t] * ce;
    }
    return loss / c->denom;
}

static void test_softce(void **state) {
    (void)state;
    /* row 2 has weight 0, row 4 no valid target: 3 rows count.  Targets do
     * not sum to 1; row 1 has a padding id (-1). */
    const int32_t ids[CN * CK] = { 3, 7, 1,  5, -1, 2,  0, 1, 2,  9, 3, 4,  -1, -1, -1 };
    const float p[CN * CK] = { .5f, .2f, .1f,  .3f, .9f, .3f,  .3f, .3f, .3f,  .1f, .6f, .05f,  .4f, .4f, .2f };
    const float w[CN] = { 1, 0.8f, 0, 0.64f, 1 };
    float l[CN * CV], dl[CN * CV], acc;
    fill(l, CN * CV, 70, 3);
    l[0 * CV + 3] = 9;      /* row 0: argmax 3 = target's top id: hit */
    l[1 * CV + 2] = 9;      /* row 1: argmax 2, top id 5 (ties: first): miss */
    l[3 * CV + 3] = 9;      /* row 3: argmax 3 = top id 3: hit */
    const float loss = sp_tr_softce(NULL, dl, l, CN, CV, ids, p, CK, w, 0, &acc);
    assert_true(fabs(acc - 2.0 / 3.0) < 1e-6);
    ce_ctx c = { to_d(l, CN * CV), ids, p, w, 3.0 };
    assert_true(fabs(loss - ce_loss(&c)) < 1e-5);
    check_fd("softce dlogits", ce_loss, &c, c.l, CN * CV, dl);
    for (int j = 0; j < CV; j++) assert_true(dl[2 * CV + j] == 0 && dl[4 * CV + j] == 0);
    /* a given denominator, and 2 threads give the same bits */
    sp_pool *p2 = sp_pool_create(2);
    float dl2[CN * CV], acc2;
    const float loss2 = sp_tr_softce(p2, dl2, l, CN, CV, ids, p, CK, w, 7.5f, &acc2);
    c.denom = 7.5;
    assert_true(fabs(loss2 - ce_loss(&c)) < 1e-5);
    const float loss3 = sp_tr_softce(NULL, dl, l, CN, CV, ids, p, CK, w, 7.5f, NULL);
    assert_true(loss2 == loss3 && acc2 == acc);
    assert_memory_equal(dl, dl2, sizeof dl);
    sp_pool_free(p2);
    free(c.l);
}

/* ---- the LK loss (-log acceptance rate) ----------------------------------- */

static double lk_loss(void *p) {
    const ce_ctx *c = p;
    double loss = 0;
    for (int t = 0; t < CN; t++) {
        double lse, ps, alpha = 0;
        if (!ref_row(c, t, &lse, &ps)) continue;
        for (int i = 0; i < CK; i++) {
            const int32_t id = c->ids[t * CK + i];
            if (id < 0) continue;
            const double q = exp(c->l[t * CV + id] - lse), pi = c->p[t * CK + i] / ps;
            alpha += q < pi ? q : pi;
        }
        loss -= c->w[t] * log(alpha);
    }
    return loss / c->denom;
}

static void test_lk_loss(void **state) {
    (void)state;
    /* By hand: q = softmax(0, ln 2, 0) = (1/4, 1/2, 1/4), targets id 1 with
     * 0.6 and id 0 with 0.4: alpha = min(.6, .5) + min(.4, .25) = 0.75; both
     * targets are short (S = {0, 1}, Q_S = 0.75), so
     * dL/dl_j = q_j (Q_S - [j in S]) / alpha = (-1/12, -1/6, 1/4). */
    {
        const float l[3] = { 0.0f, (float)log(2.0), 0.0f }, p[2] = { 0.6f, 0.4f };
        const int32_t ids[2] = { 1, 0 };
        float dl[3], acc;
        const float loss = sp_tr_loss(SP_TR_LOSS_LK, NULL, dl, l, 1, 3, ids, p, 2, NULL, 0, &acc);
        assert_true(fabs(loss + log(0.75)) < 1e-6);
        assert_true(fabs(dl[0] + 1.0 / 12) < 1e-6 && fabs(dl[1] + 1.0 / 6) < 1e-6 && fabs(dl[2] - 0.25) < 1e-6);
        assert_true(acc == 1.0f);   /* argmax 1 is the target's top id */
        /* q = p: every draft is accepted, loss 0 (the cross-entropy would be the entropy, 0.67) */
        const float l2[3] = { (float)log(0.4), (float)log(0.6), -100.0f };
        assert_true(fabs(sp_tr_loss(SP_TR_LOSS_LK, NULL, dl, l2, 1, 3, ids, p, 2, NULL, 0, NULL)) < 1e-6);
        assert_true(fabs(sp_tr_softce(NULL, dl, l2, 1, 3, ids, p, 2, NULL, 0, NULL) - 0.673) < 1e-3);
    }
    /* The rows, masks and weights of test_softce, against finite differences
     * (no q lies within the step of its p: min's kink is not crossed). */
    const int32_t ids[CN * CK] = { 3, 7, 1,  5, -1, 2,  0, 1, 2,  9, 3, 4,  -1, -1, -1 };
    const float p[CN * CK] = { .5f, .2f, .1f,  .3f, .9f, .3f,  .3f, .3f, .3f,  .1f, .6f, .05f,  .4f, .4f, .2f };
    const float w[CN] = { 1, 0.8f, 0, 0.64f, 1 };
    float l[CN * CV], dl[CN * CV], acc;
    fill(l, CN * CV, 71, 2);
    l[0 * CV + 3] = 3;
    l[3 * CV + 3] = 4;
    const float loss = sp_tr_loss(SP_TR_LOSS_LK, NULL, dl, l, CN, CV, ids, p, CK, w, 0, &acc);
    ce_ctx c = { to_d(l, CN * CV), ids, p, w, 3.0 };
    assert_true(fabs(loss - lk_loss(&c)) < 1e-5);
    check_fd("lk dlogits", lk_loss, &c, c.l, CN * CV, dl);
    for (int j = 0; j < CV; j++) assert_true(dl[2 * CV + j] == 0 && dl[4 * CV + j] == 0);
    /* not the cross-entropy: the two losses differ on the same rows */
    float dce[CN * CV];
    assert_true(fabs(loss - sp_tr_softce(NULL, dce, l, CN, CV, ids, p, CK, w, 0, NULL)) > 1e-3);
    /* 2 threads give the same bits */
    sp_pool *p2 = sp_pool_create(2);
    float dl2[CN * CV], acc2;
    assert_true(sp_tr_loss(SP_TR_LOSS_LK, p2, dl2, l, CN, CV, ids, p, CK, w, 0, &acc2) == loss && acc2 == acc);
    assert_memory_equal(dl, dl2, sizeof dl);
    sp_pool_free(p2);
    free(c.l);
}

/* ---- optimizer ----------------------------------------------------------- */

static void test_adamw(void **state) {
    (void)state;
    const sp_tr_adamw h = { 0.9f, 0.999f, 1e-8f, 0 };
    float p[3] = { 1.0f, -2.0f, 0.5f }, g[3] = { 0.1f, -0.2f, 0.0f }, m[3] = { 0 }, v[3] = { 0 };
    /* step 1: m^ = g, v^ = g^2, so the update is sign(g) (0 for g = 0):
     *   p -= 0.01 (sign(g) + 0.1 p) */
    sp_tr_adamw_step(p, g, m, v, 3, &h, 0.01f, 0.1f, 1);
    assert_true(fabs(p[0] - 0.989) < 1e-6);
    assert_true(fabs(p[1] - -1.988) < 1e-6);
    assert_true(fabs(p[2] - 0.4995) < 1e-6);
    assert_true(fabs(m[1] - -0.02) < 1e-8 && fabs(v[1] - 4e-5) < 1e-8);   /* (1 - 0.999f) is 0.00100005 */
    /* step 2 with g = (0.3, 0, 0): m = 0.9 m + 0.1 g = (0.039, -0.018, 0),
     * v = 0.999 v + 0.001 g^2 = (0.00009999, 0.00003996, 0), corrections 1/0.19
     * and 1/0.001999 */
    g[0] = 0.3f; g[1] = 0.0f;
    sp_tr_adamw_step(p, g, m, v, 3, &h, 0.01f, 0.1f, 2);
    const double u0 = (0.039 / 0.19) / (sqrt(0.00009999 / 0.001999) + 1e-8);
    const double u1 = (-0.018 / 0.19) / (sqrt(0.00003996 / 0.001999) + 1e-8);
    assert_true(fabs(p[0] - (0.989 - 0.01 * (u0 + 0.0989))) < 2e-6);
    assert_true(fabs(p[1] - (-1.988 - 0.01 * (u1 - 0.1988))) < 2e-6);
    assert_true(fabs(p[2] - (0.4995 - 0.01 * 0.04995)) < 2e-6);
}

static void test_lr_clip(void **state) {
    (void)state;
    /* warmup 10, cosine to 1e-4 at step 110 */
    assert_true(fabs(sp_tr_lr_cosine(0, 10, 110, 1e-3f, 1e-4f) - 1e-4) < 1e-9);
    assert_true(fabs(sp_tr_lr_cosine(4, 10, 110, 1e-3f, 1e-4f) - 5e-4) < 1e-9);
    assert_true(fabs(sp_tr_lr_cosine(9, 10, 110, 1e-3f, 1e-4f) - 1e-3) < 1e-9);
    assert_true(fabs(sp_tr_lr_cosine(10, 10, 110, 1e-3f, 1e-4f) - 1e-3) < 1e-9);
    assert_true(fabs(sp_tr_lr_cosine(60, 10, 110, 1e-3f, 1e-4f) - 5.5e-4) < 1e-9);
    assert_true(fabs(sp_tr_lr_cosine(35, 10, 110, 1e-3f, 1e-4f) - (1e-4 + 0.9e-3 * (1 + cos(M_PI / 4)) / 2)) < 1e-9);
    assert_true(fabs(sp_tr_lr_cosine(110, 10, 110, 1e-3f, 1e-4f) - 1e-4) < 1e-9);
    assert_true(fabs(sp_tr_lr_cosine(500, 10, 110, 1e-3f, 1e-4f) - 1e-4) < 1e-9);
    float g[3] = { 3, 0, 4 };
    assert_true(sp_tr_clip_grad(g, 3, 10) == 5.0f);        /* below: untouched */
    assert_true(g[0] == 3 && g[2] == 4);
    assert_true(sp_tr_clip_grad(g, 3, 1) == 5.0f);         /* above: scaled to norm 1 */
    assert_true(fabs(g[0] - 0.6) < 1e-7 && g[1] == 0 && fabs(g[2] - 0.8) < 1e-7);
    g[1] = INFINITY;
    assert_true(isinf(sp_tr_clip_grad(g, 3, 1)) && g[0] == 0.6f);
}

static void test_arena(void **state) {
    (void)state;
    sp_tr_arena a = { 0 };
    sp_err err;
    const int64_t s1[2] = { 3, 5 }, s2[1] = { 7 };
    assert_int_equal(sp_tr_arena_add(&a, "fc.weight", 2, s1, true, &err), 0);
    assert_int_equal(sp_tr_arena_add(&a, "norm.weight", 1, s2, false, &err), 1);
    assert_int_equal(sp_tr_arena_add(&a, "fc.weight", 1, s2, true, &err), -1);
    assert_non_null(strstr(err.msg, "duplicate"));
    const int64_t bad[1] = { 0 };
    assert_int_equal(sp_tr_arena_add(&a, "x", 1, bad, true, &err), -1);
    sp_tr_arena_alloc(&a);
    assert_int_equal(sp_tr_arena_add(&a, "late", 1, s2, true, &err), -1);
    assert_int_equal(sp_tr_arena_find(&a, "norm.weight"), 1);
    assert_int_equal(sp_tr_arena_find(&a, "nope"), -1);
    assert_int_equal(a.views[1].off, 16);                   /* 15 floats, aligned up to 16 */
    assert_int_equal(a.size, 23);
    sp_tr_arena_init_normal(&a, 0, 0.02f, 5);
    float first = sp_tr_param(&a, 0)[0];
    sp_tr_arena_init_normal(&a, 0, 0.02f, 5);
    assert_true(first == sp_tr_param(&a, 0)[0] && first != 0);
    /* AdamW through the arena: decay only where marked */
    for (int i = 0; i < 7; i++) sp_tr_param(&a, 1)[i] = 1.0f;
    sp_tr_arena_zero_grad(&a);
    const sp_tr_adamw h = { 0.9f, 0.999f, 1e-8f, 0 };
    sp_tr_arena_adamw(&a, NULL, &h, 0.1f, 0.5f, 1);
    assert_true(sp_tr_param(&a, 1)[3] == 1.0f);               /* zero grad, no decay */
    assert_true(fabs(sp_tr_param(&a, 0)[0] - first * 0.95f) < 1e-9);
    /* 2 threads: the same bits as 1 (from the same state) */
    fill(a.grad, a.size, 90, 1);
    const size_t bytes = sizeof(float) * a.size;
    float *st0 = falloc(3 * a.size), *st1 = falloc(3 * a.size);
    memcpy(st0, a.param, bytes); memcpy(st0 + a.size, a.m, bytes); memcpy(st0 + 2 * a.size, a.v, bytes);
    sp_tr_arena_adamw(&a, NULL, &h, 0.1f, 0.5f, 2);
    memcpy(st1, a.param, bytes); memcpy(st1 + a.size, a.m, bytes); memcpy(st1 + 2 * a.size, a.v, bytes);
    memcpy(a.param, st0, bytes); memcpy(a.m, st0 + a.size, bytes); memcpy(a.v, st0 + 2 * a.size, bytes);
    sp_pool *p2 = sp_pool_create(2);
    sp_tr_arena_adamw(&a, p2, &h, 0.1f, 0.5f, 2);
    assert_memory_equal(a.param, st1, bytes);
    assert_memory_equal(a.m, st1 + a.size, bytes);
    assert_memory_equal(a.v, st1 + 2 * a.size, bytes);
    sp_pool_free(p2);
    sp_tr_arena_free(&a);
    free(st0); free(st1);
}

/* ---- a tiny model learns ------------------------------------------------- */

/* x(16) -> linear(32) -> rmsnorm -> linear(24) -> soft CE against the top-8
 * of a fixed random teacher's softmax.  300 full-batch AdamW steps must bring
 * the loss near the targets' entropy (its minimum; this model plateaus about
 * 0.06 above it, as it cannot put zero mass outside the top 8), which the
 * untrained model is 1.6 above. */
enum { MB = 128, MI = 16, MH = 32, MV = 24, MK = 8 };

typedef struct { float *x, *h, *hn, *rstd, *lg, *dlg, *dhn, *dh; } tiny_act;

static float tiny_step(sp_tr_arena *a, const tiny_act *t, const int32_t *ids, const float *pr, float *acc) {
    const int w1 = 0, b1 = 1, g = 2, w2 = 3, b2 = 4;
    sp_tr_linear_fwd(NULL, t->h, t->x, sp_tr_param(a, w1), sp_tr_param(a, b1), MB, MI, MH);
    sp_tr_rmsnorm_fwd(t->hn, t->rstd, t->h, sp_tr_param(a, g), MB, MH, 1e-5f);
    sp_tr_linear_fwd(NULL, t->lg, t->hn, sp_tr_param(a, w2), sp_tr_param(a, b2), MB, MH, MV);
    const float loss = sp_tr_softce(NULL, t->dlg, t->lg, MB, MV, ids, pr, MK, NULL, 0, acc);
    sp_tr_arena_zero_grad(a);
    memset(t->dhn, 0, sizeof(float) * MB * MH);
    memset(t->dh, 0, sizeof(float) * MB * MH);
    sp_tr_linear_bwd(NULL, t->dhn, sp_tr_grad(a, w2), sp_tr_grad(a, b2), t->dlg, t->hn, sp_tr_param(a, w2), MB, MH, MV);
    sp_tr_rmsnorm_bwd(t->dh, sp_tr_grad(a, g), t->dhn, t->h, sp_tr_param(a, g), t->rstd, MB, MH);
    sp_tr_linear_bwd(NULL, NULL, sp_tr_grad(a, w1), sp_tr_grad(a, b1), t->dh, t->x, sp_tr_param(a, w1), MB, MI, MH);
    return loss;
}

static void test_tiny_model_learns(void **state) {
    (void)state;
    tiny_act t = { falloc(MB * MI), falloc(MB * MH), falloc(MB * MH), falloc(MB), falloc(MB * MV),
                   falloc(MB * MV), falloc(MB * MH), falloc(MB * MH) };
    float *teacher = falloc(MV * MI), *tl = falloc(MB * MV), pr[MB * MK];
    int32_t ids[MB * MK];
    fill(t.x, MB * MI, 80, 1);
    fill(teacher, MV * MI, 81, 1.5f);
    sp_tr_linear_fwd(NULL, tl, t.x, teacher, NULL, MB, MI, MV);
    double entropy = 0;
    for (int r = 0; r < MB; r++) {          /* top-8 of softmax(teacher x), by selection */
        float *l = tl + r * MV, ps = 0;
        sp_softmax(l, MV);
        for (int i = 0; i < MK; i++) {
            int best = 0;
            for (int j = 1; j < MV; j++) best = l[j] > l[best] ? j : best;
            ids[r * MK + i] = best;
            pr[r * MK + i] = l[best];
            ps += l[best];
            l[best] = -1;
        }
        for (int i = 0; i < MK; i++) entropy -= pr[r * MK + i] / ps * log(pr[r * MK + i] / ps) / MB;
    }
    sp_tr_arena a = { 0 };
    sp_err err;
    const int64_t sw1[2] = { MH, MI }, sb1[1] = { MH }, sg[1] = { MH }, sw2[2] = { MV, MH }, sb2[1] = { MV };
    assert_int_equal(sp_tr_arena_add(&a, "w1", 2, sw1, true, &err), 0);
    assert_int_equal(sp_tr_arena_add(&a, "b1", 1, sb1, false, &err), 1);
    assert_int_equal(sp_tr_arena_add(&a, "g", 1, sg, false, &err), 2);
    assert_int_equal(sp_tr_arena_add(&a, "w2", 2, sw2, true, &err), 3);
    assert_int_equal(sp_tr_arena_add(&a, "b2", 1, sb2, false, &err), 4);
    sp_tr_arena_alloc(&a);
    sp_tr_arena_init_normal(&a, 0, 0.25f, 1);
    sp_tr_arena_init_normal(&a, 3, 0.02f, 2);
    for (int i = 0; i < MH; i++) sp_tr_param(&a, 2)[i] = 1.0f;
    const sp_tr_adamw h = { 0.9f, 0.999f, 1e-8f, 0 };
    float acc0, acc = 0, loss = 0;
    const float loss0 = tiny_step(&a, &t, ids, pr, &acc0);
    const int steps = 300;
    for (int s = 0; s < steps; s++) {
        loss = tiny_step(&a, &t, ids, pr, &acc);
        sp_tr_clip_grad(a.grad, a.size, 1.0f);
        sp_tr_arena_adamw(&a, NULL, &h, sp_tr_lr_cosine(s, 20, steps, 2e-2f, 1e-3f), 0.01f, s + 1);
    }
    loss = tiny_step(&a, &t, ids, pr, &acc);
    print_message("tiny model: entropy %.4f, loss %.4f -> %.4f, top-1 %.2f -> %.2f\n", entropy, loss0, loss,
                  acc0, acc);
    assert_true(loss0 > entropy + 1.0);
    assert_true(loss < entropy + 0.15);
    assert_true(acc > 0.8f && acc0 < 0.3f);
    sp_tr_arena_free(&a);
    free(t.x); free(t.h); free(t.hn); free(t.rstd); free(t.lg); free(t.dlg); free(t.dhn); free(t.dh);
    free(teacher); free(tl);
}

/* ---- a whole decoder layer: the ops wired together ------------------------ */

/* x -> rmsnorm -> q,k,v -> rope(q,k) -> causal GQA attention -> o -> h = x + o
 *   -> rmsnorm -> swiglu(gate, up) -> down -> y = h + down;  loss = sum r . y.
 * The analytic gradients of x and every parameter against float central
 * differences (step 1e-2, loose tolerance: this checks the wiring and the
 * accumulate convention, the ops are checked tightly above). */
enum { LT = 5, LD = 16, LH = 4, LKV = 2, LHD = 4, LF = 24 };
enum { P_G1, P_WQ, P_WK, P_WV, P_WO, P_G2, P_WG, P_WU, P_WD, P_N };

typedef struct {
    float xn[LT * LD], r1[LT], q[LT * LD], k[LT * LKV * LHD], v[LT * LKV * LHD], qr[LT * LD],
        kr[LT * LKV * LHD], att[LH * LT * (LT + 1) / 2], ao[LT * LD], o[LT * LD], h[LT * LD], hn[LT * LD],
        r2[LT], gt[LT * LF], up[LT * LF], sw[LT * LF], dn[LT * LD], y[LT * LD];
} layer_acts;

static const int32_t layer_pos[LT] = { 0, 1, 2, 3, 4 };

static double layer_fwd(const sp_tr_arena *a, const float *x, const float *r, const sp_tr_attn_shape *sh,
                        layer_acts *c) {
    const int kd = LKV * LHD;
    sp_tr_rmsnorm_fwd(c->xn, c->r1, x, sp_tr_param(a, P_G1), LT, LD, 1e-5f);
    sp_tr_linear_fwd(NULL, c->q, c->xn, sp_tr_param(a, P_WQ), NULL, LT, LD, LD);
    sp_tr_linear_fwd(NULL, c->k, c->xn, sp_tr_param(a, P_WK), NULL, LT, LD, kd);
    sp_tr_linear_fwd(NULL, c->v, c->xn, sp_tr_param(a, P_WV), NULL, LT, LD, kd);
    sp_tr_rope_fwd(c->qr, c->q, layer_pos, LT, LH, LHD, LHD, 10000.0f, true);
    sp_tr_rope_fwd(c->kr, c->k, layer_pos, LT, LKV, LHD, LHD, 10000.0f, true);
    sp_tr_attn_fwd(NULL, c->ao, c->att, c->qr, c->kr, c->v, sh);
    sp_tr_linear_fwd(NULL, c->o, c->ao, sp_tr_param(a, P_WO), NULL, LT, LD, LD);
    sp_tr_add_fwd(c->h, x, c->o, LT * LD);
    sp_tr_rmsnorm_fwd(c->hn, c->r2, c->h, sp_tr_param(a, P_G2), LT, LD, 1e-5f);
    sp_tr_linear_fwd(NULL, c->gt, c->hn, sp_tr_param(a, P_WG), NULL, LT, LD, LF);
    sp_tr_linear_fwd(NULL, c->up, c->hn, sp_tr_param(a, P_WU), NULL, LT, LD, LF);
    sp_tr_swiglu_fwd(c->sw, c->gt, c->up, LT * LF);
    sp_tr_linear_fwd(NULL, c->dn, c->sw, sp_tr_param(a, P_WD), NULL, LT, LF, LD);
    sp_tr_add_fwd(c->y, c->h, c->dn, LT * LD);
    double l = 0;
    for (int i = 0; i < LT * LD; i++) l += (double)r[i] * c->y[i];
    return l;
}

/* The backward in reverse order; every gradient buffer starts at zero and
 * is accumulated into (h feeds both the residual and the second norm). */
static void layer_bwd(sp_tr_arena *a, const float *x, const float *r, const sp_tr_attn_shape *sh,
                      const layer_acts *c, float *dx) {
    const int kd = LKV * LHD;
    float dh[LT * LD] = { 0 }, dsw[LT * LF] = { 0 }, dgt[LT * LF] = { 0 }, dup[LT * LF] = { 0 };
    float dhn[LT * LD] = { 0 }, dao[LT * LD] = { 0 }, dqr[LT * LD] = { 0 }, dkr[LT * kd], dv[LT * kd];
    float dq[LT * LD] = { 0 }, dk[LT * kd], dxn[LT * LD] = { 0 };
    memset(dkr, 0, sizeof dkr); memset(dv, 0, sizeof dv); memset(dk, 0, sizeof dk);
    sp_tr_acc(dh, r, LT * LD);                                            /* y = h + dn */
    sp_tr_linear_bwd(NULL, dsw, sp_tr_grad(a, P_WD), NULL, r, c->sw, sp_tr_param(a, P_WD), LT, LF, LD);
    sp_tr_swiglu_bwd(dgt, dup, dsw, c->gt, c->up, LT * LF);
    sp_tr_linear_bwd(NULL, dhn, sp_tr_grad(a, P_WG), NULL, dgt, c->hn, sp_tr_param(a, P_WG), LT, LD, LF);
    sp_tr_linear_bwd(NULL, dhn, sp_tr_grad(a, P_WU), NULL, dup, c->hn, sp_tr_param(a, P_WU), LT, LD, LF);
    sp_tr_rmsnorm_bwd(dh, sp_tr_grad(a, P_G2), dhn, c->h, sp_tr_param(a, P_G2), c->r2, LT, LD);
    sp_tr_acc(dx, dh, LT * LD);                                           /* h = x + o */
    sp_tr_linear_bwd(NULL, dao, sp_tr_grad(a, P_WO), NULL, dh, c->ao, sp_tr_param(a, P_WO), LT, LD, LD);
    sp_tr_attn_bwd(NULL, dqr, dkr, dv, dao, c->att, c->qr, c->kr, c->v, sh);
    sp_tr_rope_bwd(dq, dqr, layer_pos, LT, LH, LHD, LHD, 10000.0f, true);
    sp_tr_rope_bwd(dk, dkr, layer_pos, LT, LKV, LHD, LHD, 10000.0f, true);
    sp_tr_linear_bwd(NULL, dxn, sp_tr_grad(a, P_WQ), NULL, dq, c->xn, sp_tr_param(a, P_WQ), LT, LD, LD);
    sp_tr_linear_bwd(NULL, dxn, sp_tr_grad(a, P_WK), NULL, dk, c->xn, sp_tr_param(a, P_WK), LT, LD, kd);
    sp_tr_linear_bwd(NULL, dxn, sp_tr_grad(a, P_WV), NULL, dv, c->xn, sp_tr_param(a, P_WV), LT, LD, kd);
    sp_tr_rmsnorm_bwd(dx, sp_tr_grad(a, P_G1), dxn, x, sp_tr_param(a, P_G1), c->r1, LT, LD);
}

static void layer_fd(const char *what, float *v, size_t n, const float *g, const sp_tr_arena *a, const float *x,
                     const float *r, const sp_tr_attn_shape *sh, layer_acts *c) {
    for (size_t i = 0; i < n; i++) {
        const float v0 = v[i], h = 1e-2f;
        v[i] = v0 + h;
        const double lp = layer_fwd(a, x, r, sh, c);
        v[i] = v0 - h;
        const double lm = layer_fwd(a, x, r, sh, c);
        v[i] = v0;
        const double want = (lp - lm) / (2.0 * h);
        expect_close(what, &g[i], &want, 1, 1e-3, 1.5e-2);
    }
}

static void test_decoder_layer_grad(void **state) {
    (void)state;
    static const int64_t shp[P_N][2] = { { LD, 1 }, { LD, LD }, { LKV * LHD, LD }, { LKV * LHD, LD }, { LD, LD },
                                         { LD, 1 }, { LF, LD }, { LF, LD }, { LD, LF } };
    static const char *names[P_N] = { "g1", "wq", "wk", "wv", "wo", "g2", "wg", "wu", "wd" };
    sp_tr_arena a = { 0 };
    sp_err err;
    for (int i = 0; i < P_N; i++)
        assert_int_equal(sp_tr_arena_add(&a, names[i], shp[i][1] == 1 ? 1 : 2, shp[i], shp[i][1] != 1, &err), i);
    sp_tr_arena_alloc(&a);
    for (int i = 0; i < P_N; i++) sp_tr_arena_init_normal(&a, i, shp[i][1] == 1 ? 0.3f : 0.4f, 100 + i);
    for (int i = 0; i < LD; i++) { sp_tr_param(&a, P_G1)[i] += 1; sp_tr_param(&a, P_G2)[i] += 1; }
    int32_t koff[LT + 1], kidx[LT * (LT + 1) / 2];
    sp_tr_attn_causal(koff, kidx, LT, 0);
    const sp_tr_attn_shape sh = { LT, LT, LH, LKV, LHD, koff, kidx };
    float x[LT * LD], r[LT * LD], dx[LT * LD] = { 0 };
    fill(x, LT * LD, 110, 1); fill(r, LT * LD, 111, 1);
    layer_acts *c = calloc(1, sizeof *c);
    layer_fwd(&a, x, r, &sh, c);
    sp_tr_arena_zero_grad(&a);
    layer_bwd(&a, x, r, &sh, c, dx);
    layer_fd("layer dx", x, LT * LD, dx, &a, x, r, &sh, c);
    for (int i = 0; i < P_N; i++)
        layer_fd(names[i], sp_tr_param(&a, i), a.views[i].numel, sp_tr_grad(&a, i), &a, x, r, &sh, c);
    free(c);
    sp_tr_arena_free(&a);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_grad), cmocka_unit_test(test_linear_levels_threads),
        cmocka_unit_test(test_rmsnorm_grad), cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu_add), cmocka_unit_test(test_attention_grad),
        cmocka_unit_test(test_attention_cache_threads), cmocka_unit_test(test_attention_ttt_lists),
        cmocka_unit_test(test_softce),
        cmocka_unit_test(test_lk_loss),
        cmocka_unit_test(test_adamw), cmocka_unit_test(test_lr_clip), cmocka_unit_test(test_arena),
        cmocka_unit_test(test_decoder_layer_grad), cmocka_unit_test(test_tiny_model_learns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
