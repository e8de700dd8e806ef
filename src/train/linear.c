/*
 * Linear layers on one GEMM: C(M,N) += A(M,K) . B(K,N), A and B read
 * through strides so the three products of a linear layer need no
 * transposed copies:
 *   forward  y  += x  . W^T   A = x (n,in),   B(i,o) = W[o*in + i]
 *   backward dx += dy . W     A = dy (n,out), B = W (out,in)
 *   backward dW += dy^T . x   A(o,t) = dy[t*out + o], B = x (n,in)
 *
 * The GEMM is the classic BLIS loop nest: per thread, a range of columns
 * (whole NR panels) in NC chunks; K in KC slices, for each a packed copy of
 * B (KC x NC, NR-column panels) and, per MC rows, a packed copy of A (MC x
 * KC, MR-row panels); then the micro-kernel on every MR x NR tile.  Packing
 * pads with zeros, and an edge tile goes through a full-size scratch tile,
 * so every element of C sees the same operations whatever the split.
 */
#include "train/internal.h"
#include "kernels/kernels.h"

#include <string.h>

enum { SP_TR_KC = 256, SP_TR_MC = 96, SP_TR_NC = 1024 };

/* The portable micro-kernel: 4 x 16, plain multiply then add. */
static void sp_tr_uk_scalar(int kc, const float *ap, const float *bp, float *c, int64_t ldc) {
    float acc[4][16];
    for (int i = 0; i < 4; i++) memcpy(acc[i], c + i * ldc, sizeof acc[i]);
    for (int k = 0; k < kc; k++, ap += 4, bp += 16)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 16; j++) acc[i][j] += ap[i] * bp[j];
    for (int i = 0; i < 4; i++) memcpy(c + i * ldc, acc[i], sizeof acc[i]);
}
static const sp_tr_gemm_kern sp_tr_kern_scalar = { "scalar 4x16", 4, 16, sp_tr_uk_scalar };

static const sp_tr_gemm_kern *sp_tr_kern(void) {
#if defined(__x86_64__)
    switch (sp_kernels_simd()) {
    case SP_SIMD_AVX512: return &sp_tr_kern_avx512;
    case SP_SIMD_AVX2: case SP_SIMD_VNNI: return &sp_tr_kern_avx2;
    default: break;
    }
#endif
    return &sp_tr_kern_scalar;
}

const char *sp_tr_gemm_kernel(void) { return sp_tr_kern()->name; }

typedef struct sp_tr_gemm_job {
    int M, N, K;
    const float *a, *b;
    int64_t rsa, csa, rsb, csb, ldc;
    float *c;
    const sp_tr_gemm_kern *kern;
} sp_tr_gemm_job;

/* A panel of width w (mr rows of A or nr columns of B) for kc values of k:
 * dst[k][j] <- src[j * sj + k * sk] for j < n, zero for n <= j < w.  The
 * loop order follows the source's unit stride, so the reads are sequential
 * (perf put a fifth of the training samples on a strided gather here; the
 * wall-clock gain was smaller, 0-7 %: the stalls are mostly the memory's,
 * and they move to the micro-kernel). */
static void sp_tr_pack_panel(float *dst, const float *src, int64_t sj, int64_t sk, int kc, int n, int w) {
    if (n < w) memset(dst, 0, sizeof(float) * (size_t)kc * w);
    if (sj == 1) {                               /* each k: n neighbours */
        for (int k = 0; k < kc; k++) memcpy(dst + (size_t)k * w, src + k * sk, sizeof(float) * (size_t)n);
    } else if (sk == 1) {                        /* each j: a run of kc */
        for (int j = 0; j < n; j++) {
            const float *s = src + j * sj;
            for (int k = 0; k < kc; k++) dst[(size_t)k * w + j] = s[k];
        }
    } else {
        for (int k = 0; k < kc; k++)
            for (int j = 0; j < n; j++) dst[(size_t)k * w + j] = src[j * sj + k * sk];
    }
}

/* ap[panel][k][mr] <- A(i0 + panel*mr + i, p0 + k), zero past M */
static void sp_tr_pack_a(float *ap, const sp_tr_gemm_job *g, int i0, int mc, int p0, int kc, int mr) {
    for (int ir = 0; ir < mc; ir += mr, ap += (size_t)mr * kc) {
        const int m = mc - ir < mr ? mc - ir : mr;
        sp_tr_pack_panel(ap, g->a + (int64_t)(i0 + ir) * g->rsa + (int64_t)p0 * g->csa, g->rsa, g->csa, kc, m, mr);
    }
}

/* bp[panel][k][nr] <- B(p0 + k, j0 + panel*nr + j), zero past the end */
static void sp_tr_pack_b(float *bp, const sp_tr_gemm_job *g, int p0, int kc, int j0, int nc, int nr) {
    for (int jr = 0; jr < nc; jr += nr, bp += (size_t)nr * kc) {
        const int n = nc - jr < nr ? nc - jr : nr;
        sp_tr_pack_panel(bp, g->b + (int64_t)p0 * g->rsb + (int64_t)(j0 + jr) * g->csb, g->csb, g->rsb, kc, n, nr);
    }
}

/* One tile; an edge tile (m < mr or n < nr) through a zero-padded copy. */
static void sp_tr_tile(const sp_tr_gemm_kern *kn, int kc, const float *ap, const float *bp, float *c,
                       int64_t ldc, int m, int n, float *tmp) {
    if (m == kn->mr && n == kn->nr) { kn->uk(kc, ap, bp, c, ldc); return; }
    memset(tmp, 0, sizeof(float) * (size_t)kn->mr * kn->nr);
    for (int i = 0; i < m; i++) memcpy(tmp + i * kn->nr, c + i * ldc, sizeof(float) * (size_t)n);
    kn->uk(kc, ap, bp, tmp, kn->nr);
    for (int i = 0; i < m; i++) memcpy(c + i * ldc, tmp + i * kn->nr, sizeof(float) * (size_t)n);
}

static void sp_tr_gemm_thread(void *ctx, int ith, int nth) {
    const sp_tr_gemm_job *g = ctx;
    const sp_tr_gemm_kern *kn = g->kern;
    const int mr = kn->mr, nr = kn->nr;
    int64_t p_lo, p_hi;
    sp_split((g->N + nr - 1) / nr, ith, nth, &p_lo, &p_hi);   /* whole column panels */
    const int j_lo = (int)(p_lo * nr), j_hi = (int)(p_hi * nr < g->N ? p_hi * nr : g->N);
    if (j_lo >= j_hi || g->M == 0 || g->K == 0) return;
    const int nc_max = SP_TR_NC - SP_TR_NC % nr, mc_max = SP_TR_MC - SP_TR_MC % mr;
    /* scratch for the blocks this call really packs (small products stay cheap) */
    const size_t kc_n = g->K < SP_TR_KC ? (size_t)g->K : SP_TR_KC;
    const size_t nc_n = (size_t)(j_hi - j_lo < nc_max ? (j_hi - j_lo + nr - 1) / nr * nr : nc_max);
    const size_t mc_n = (size_t)(g->M < mc_max ? (g->M + mr - 1) / mr * mr : mc_max);
    float *bp = sp_alloc_aligned(sizeof(float) * kc_n * nc_n);
    float *ap = sp_alloc_aligned(sizeof(float) * kc_n * mc_n);
    float *tmp = sp_alloc_aligned(sizeof(float) * (size_t)mr * nr);
    for (int jc = j_lo; jc < j_hi; jc += nc_max) {
        const int nc = j_hi - jc < nc_max ? j_hi - jc : nc_max;
        for (int pc = 0; pc < g->K; pc += SP_TR_KC) {
            const int kc = g->K - pc < SP_TR_KC ? g->K - pc : SP_TR_KC;
            sp_tr_pack_b(bp, g, pc, kc, jc, nc, nr);
            for (int ic = 0; ic < g->M; ic += mc_max) {
                const int mc = g->M - ic < mc_max ? g->M - ic : mc_max;
                sp_tr_pack_a(ap, g, ic, mc, pc, kc, mr);
                for (int jr = 0; jr < nc; jr += nr)
                    for (int ir = 0; ir < mc; ir += mr) {
                        float *c = g->c + (int64_t)(ic + ir) * g->ldc + jc + jr;
                        const int m = mc - ir < mr ? mc - ir : mr, n = nc - jr < nr ? nc - jr : nr;
                        sp_tr_tile(kn, kc, ap + (size_t)ir * kc, bp + (size_t)jr * kc, c, g->ldc, m, n, tmp);
                    }
            }
        }
    }
    sp_free_aligned(tmp);
    sp_free_aligned(ap);
    sp_free_aligned(bp);
}

void sp_tr_gemm(sp_pool *pool, int M, int N, int K, const float *a, int64_t rsa, int64_t csa,
                const float *b, int64_t rsb, int64_t csb, float *c, int64_t ldc) {
    sp_tr_gemm_job g = { M, N, K, a, b, rsa, csa, rsb, csb, ldc, c, sp_tr_kern() };
    if (pool && sp_pool_size(pool) > 1) sp_pool_run(pool, sp_tr_gemm_thread, &g);
    else sp_tr_gemm_thread(&g, 0, 1);
}

void sp_tr_linear_fwd(sp_pool *pool, float *y, const float *x, const float *w, const float *b,
                      int n, int in, int out) {
    for (int t = 0; t < n; t++) {
        if (b) memcpy(y + (size_t)t * out, b, sizeof(float) * (size_t)out);
        else memset(y + (size_t)t * out, 0, sizeof(float) * (size_t)out);
    }
    sp_tr_gemm(pool, n, out, in, x, in, 1, w, 1, in, y, out);
}

void sp_tr_linear_bwd(sp_pool *pool, float *dx, float *dw, float *db, const float *dy,
                      const float *x, const float *w, int n, int in, int out) {
    if (dx) sp_tr_gemm(pool, n, in, out, dy, out, 1, w, in, 1, dx, in);
    if (dw) sp_tr_gemm(pool, out, in, n, dy, 1, out, x, in, 1, dw, in);
    if (db)
        for (int t = 0; t < n; t++)
            for (int o = 0; o < out; o++) db[o] += dy[(size_t)t * out + o];
}
