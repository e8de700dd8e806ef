/*
 * Per-row and elementwise operations with their backward passes.
 */
#include "train/train.h"
#include "kernels/kernels.h"

#include <math.h>

/* ---- RMSNorm ---------------------------------------------------------- */

void sp_tr_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *g, int n, int d, float eps) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * d;
        float *yt = y + (size_t)t * d;
        double ss = 0.0;
        for (int i = 0; i < d; i++) ss += (double)xt[i] * xt[i];
        const float r = (float)(1.0 / sqrt(ss / d + eps));
        for (int i = 0; i < d; i++) yt[i] = xt[i] * r * g[i];
        rstd[t] = r;
    }
}

/* y_i = x_i r g_i with r = (mean x^2 + eps)^-1/2, dr/dx_i = -r^3 x_i / d:
 *   dx_i = r g_i dy_i - x_i r^3 / d * sum_j dy_j g_j x_j */
void sp_tr_rmsnorm_bwd(float *dx, float *dg, const float *dy, const float *x, const float *g,
                       const float *rstd, int n, int d) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * d, *dyt = dy + (size_t)t * d;
        const float r = rstd[t];
        if (dg)
            for (int i = 0; i < d; i++) dg[i] += dyt[i] * xt[i] * r;
        if (!dx) continue;
        double dot = 0.0;
        for (int i = 0; i < d; i++) dot += (double)dyt[i] * g[i] * xt[i];
        const float c = (float)(dot * r * r * r / d);
        float *dxt = dx + (size_t)t * d;
        for (int i = 0; i < d; i++) dxt[i] += r * g[i] * dyt[i] - xt[i] * c;
    }
}

/* ---- RoPE ------------------------------------------------------------- */

/* Rotates the pairs of each head of one row by the table cs (sp_rope_table):
 * sign +1 is the forward rotation (the formula of sp_rope_apply), -1 its
 * inverse; acc adds the result to y instead of storing it. */
static void sp_tr_rope_row(float *y, const float *x, const float *cs, int n_head, int head_dim,
                           int n_rot, bool neox, float sign, bool acc) {
    const int half = n_rot / 2;
    for (int h = 0; h < n_head; h++) {
        const float *xh = x + (size_t)h * head_dim;
        float *yh = y + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            const float c = cs[2 * i], s = sign * cs[2 * i + 1];
            const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            const float x0 = xh[a], x1 = xh[b];
            const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
            if (acc) { yh[a] += y0; yh[b] += y1; }
            else { yh[a] = y0; yh[b] = y1; }
        }
        for (int i = n_rot; i < head_dim; i++) yh[i] = acc ? yh[i] + xh[i] : xh[i];
    }
}

void sp_tr_rope_fwd(float *y, const float *x, const int32_t *pos, int n, int n_head, int head_dim,
                    int n_rot, float base, bool neox) {
    float cs[n_rot > 0 ? n_rot : 1];
    const size_t d = (size_t)n_head * head_dim;
    for (int t = 0; t < n; t++) {
        sp_rope_table(cs, n_rot, pos[t], base);
        sp_tr_rope_row(y + t * d, x + t * d, cs, n_head, head_dim, n_rot, neox, 1.0f, false);
    }
}

/* The rotation is orthogonal: its backward is the rotation by -theta. */
void sp_tr_rope_bwd(float *dx, const float *dy, const int32_t *pos, int n, int n_head, int head_dim,
                    int n_rot, float base, bool neox) {
    float cs[n_rot > 0 ? n_rot : 1];
    const size_t d = (size_t)n_head * head_dim;
    for (int t = 0; t < n; t++) {
        sp_rope_table(cs, n_rot, pos[t], base);
        sp_tr_rope_row(dx + t * d, dy + t * d, cs, n_head, head_dim, n_rot, neox, -1.0f, true);
    }
}

/* ---- SwiGLU, add -------------------------------------------------------- */

void sp_tr_swiglu_fwd(float *h, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float g = gate[i];
        h[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* silu(g) = g s(g), silu'(g) = s(g) (1 + g (1 - s(g))) with s the sigmoid */
void sp_tr_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                      size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float g = gate[i], s = 1.0f / (1.0f + expf(-g));
        if (dgate) dgate[i] += dh[i] * up[i] * s * (1.0f + g * (1.0f - s));
        if (dup) dup[i] += dh[i] * g * s;
    }
}

void sp_tr_add_fwd(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void sp_tr_acc(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
