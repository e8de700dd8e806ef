/*
 * GFLOP/s of the training linear layer (forward, backward dx, backward dW)
 * at the draft head's shapes, per thread count and GEMM kernel, and the
 * time of attention and of the loss.
 *   make bench-train && build/release/bench_train [threads...]
 * SPECULA_SIMD=scalar|avx2|avx512 picks the level.
 */
#include "train/train.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>

static double best_of(int reps, void (*fn)(void *), void *ctx) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const uint64_t t0 = sp_now_ns();
        fn(ctx);
        const double s = sp_ns_to_s(sp_now_ns() - t0);
        best = s < best ? s : best;
    }
    return best;
}

typedef struct { sp_pool *pool; int n, in, out, which; float *x, *w, *y, *dy, *dx, *dw; } job;

static void run(void *p) {
    job *j = p;
    if (j->which == 0) sp_tr_linear_fwd(j->pool, j->y, j->x, j->w, NULL, j->n, j->in, j->out);
    if (j->which == 1) sp_tr_linear_bwd(j->pool, j->dx, NULL, NULL, j->dy, j->x, j->w, j->n, j->in, j->out);
    if (j->which == 2) sp_tr_linear_bwd(j->pool, NULL, j->dw, NULL, j->dy, j->x, j->w, j->n, j->in, j->out);
}

static float *rnd(size_t n, uint64_t seed) {
    float *p = sp_alloc_aligned(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = (float)sp_rng_uniform(seed, i, 0) - 0.5f;
    return p;
}

/* Milliseconds of the other costly ops at the draft head's sizes: causal
 * attention of T rows (9 heads, 3 kv heads, 64 dims), the loss over 8192
 * logits of 512 rows. */
typedef struct { sp_pool *pool; int which; float *q, *k, *v, *o, *att, *dq, *dk, *dv, *lg, *dl, *p;
                 int32_t *koff, *kidx, *ids; sp_tr_attn_shape sh; } opjob;

static void run_op(void *p) {
    opjob *j = p;
    if (j->which == 0) sp_tr_attn_fwd(j->pool, j->o, j->att, j->q, j->k, j->v, &j->sh);
    if (j->which == 1) sp_tr_attn_bwd(j->pool, j->dq, j->dk, j->dv, j->o, j->att, j->q, j->k, j->v, &j->sh);
    if (j->which == 2) sp_tr_softce(j->pool, j->dl, j->lg, 512, 8192, j->ids, j->p, 64, NULL, 0, NULL);
}

static void bench_ops(sp_pool *pool, int nt) {
    enum { T = 512, H = 9, KV = 3, HD = 64, V = 8192, K = 64 };
    opjob j = { .pool = pool };
    j.koff = malloc(sizeof(int32_t) * (T + 1));
    j.kidx = malloc(sizeof(int32_t) * T * (T + 1) / 2);
    sp_tr_attn_causal(j.koff, j.kidx, T, 0);
    j.sh = (sp_tr_attn_shape){ T, T, H, KV, HD, j.koff, j.kidx };
    j.q = rnd(T * H * HD, 1); j.k = rnd(T * KV * HD, 2); j.v = rnd(T * KV * HD, 3); j.o = rnd(T * H * HD, 4);
    j.att = rnd((size_t)H * j.koff[T], 5); j.dq = rnd(T * H * HD, 6); j.dk = rnd(T * KV * HD, 7);
    j.dv = rnd(T * KV * HD, 8); j.lg = rnd((size_t)T * V, 9); j.dl = rnd((size_t)T * V, 10); j.p = rnd(T * K, 11);
    j.ids = malloc(sizeof(int32_t) * T * K);
    for (int i = 0; i < T * K; i++) j.ids[i] = (i * 131) % V;
    static const char *names[] = { "attn fwd", "attn bwd", "softce" };
    printf("threads %d  ms:", nt);
    for (j.which = 0; j.which < 3; j.which++) printf("  %s %.1f", names[j.which], best_of(3, run_op, &j) * 1e3);
    printf("   (attention T=%d causal, %d heads, %d kv, hd %d; softce %d x %d, k %d)\n", T, H, KV, HD, T, V, K);
    free(j.koff); free(j.kidx); free(j.ids);
    float *bufs[] = { j.q, j.k, j.v, j.o, j.att, j.dq, j.dk, j.dv, j.lg, j.dl, j.p };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) sp_free_aligned(bufs[i]);
}

int main(int argc, char **argv) {
    sp_base_init();
    static const int shapes[][3] = { { 512, 1152, 576 }, { 512, 576, 8192 }, { 512, 576, 1536 } };
    printf("kernel: %s\n", sp_tr_gemm_kernel());
    for (int a = 1; a < argc || a == 1; a++) {
        const int nt = argc > 1 ? atoi(argv[a]) : 1;
        sp_pool *pool = sp_pool_create(nt);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const int n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
            job j = { pool, n, in, out, 0, rnd((size_t)n * in, 1), rnd((size_t)out * in, 2),
                      rnd((size_t)n * out, 3), rnd((size_t)n * out, 4), rnd((size_t)n * in, 5),
                      rnd((size_t)out * in, 6) };
            const double flop = 2.0 * n * in * out;
            printf("threads %d  n=%d in=%d out=%d  GFLOP/s:", nt, n, in, out);
            static const char *names[] = { "fwd", "bwd-dx", "bwd-dW" };
            for (j.which = 0; j.which < 3; j.which++)
                printf("  %s %.1f", names[j.which], flop / best_of(5, run, &j) * 1e-9);
            printf("\n");
            sp_free_aligned(j.x); sp_free_aligned(j.w); sp_free_aligned(j.y);
            sp_free_aligned(j.dy); sp_free_aligned(j.dx); sp_free_aligned(j.dw);
        }
        bench_ops(pool, nt);
        sp_pool_free(pool);
    }
    return 0;
}
