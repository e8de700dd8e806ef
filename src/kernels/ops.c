/* Vector operations of a transformer layer (portable C).
 *
 * The arithmetic follows ggml's CPU reference where it matters for
 * agreement with llama.cpp: RMSNorm accumulates the sum of squares in
 * double, RoPE advances theta by repeated multiplication, softmax sums the
 * exponentials in double, GELU goes through F16 as ggml's table does.
 */
#include "kernels/internal.h"

#include <math.h>

void sp_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    SP_KDISPATCH(rmsnorm, out, x, w, n, eps);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w) {
        for (int i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
    } else {
        for (int i = 0; i < n; i++) out[i] = x[i] * scale;
    }
}

void sp_rope(float *head, int head_dim, int n_rot, int pos, float freq_base, bool neox) {
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cosf(theta), s = sinf(theta);
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + half : 2 * i + 1;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
        theta *= theta_scale;
    }
    (void)head_dim; /* dims >= n_rot pass through unchanged */
}

/* The same theta recurrence and cosf/sinf as sp_rope, once per position. */
void sp_rope_table(float *cs, int n_rot, int pos, float freq_base) {
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        cs[2 * i] = cosf(theta);
        cs[2 * i + 1] = sinf(theta);
        theta *= theta_scale;
    }
}

/* The rotation of sp_rope with the table's c and s: bit-identical. */
void sp_rope_apply(float *head, const float *cs, int n_rot, bool neox) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + half : 2 * i + 1;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}

int sp_argmax(const float *x, int n) {
    const sp_kfuncs *k = sp_kern();
    if (k->argmax) return k->argmax(x, n);
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void sp_softmax(float *x, int n) {
    SP_KDISPATCH(softmax, x, n);
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        const float e = expf(x[i] - max);
        x[i] = e;
        sum += (double)e;
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void sp_swiglu(float *out, const float *gate, const float *up, int n) {
    SP_KDISPATCH(swiglu, out, gate, up, n);
    for (int i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = (g / (1.0f + expf(-g))) * up[i];
    }
}

/* GELU (tanh approximation) as llama.cpp's CPU backend evaluates it: from
 * a table indexed by the F16 value of the input, holding F16 results
 * (ggml's GGML_GELU_FP16), with gelu(x) = 0 below -10 and x above 10.  The
 * table is not stored: each entry is recomputed from the same float
 * formula (equal to ggml's entry unless the two compilations' float
 * rounding straddles an F16 rounding boundary, which is rare).  Plain float
 * GELU would differ from llama.cpp by about 5e-4 relative on every element. */
float sp_gelu_f16(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float h = sp_f16_to_f32(sp_f32_to_f16(x));
    const float g = 0.5f * h * (1.0f + tanhf(k * h * (1.0f + 0.044715f * h * h)));
    return sp_f16_to_f32(sp_f32_to_f16(g));
}

void sp_geglu(float *out, const float *gate, const float *up, int n) {
    SP_KDISPATCH(geglu, out, gate, up, n);
    for (int i = 0; i < n; i++) out[i] = sp_gelu_f16(gate[i]) * up[i];
}

void sp_vec_add(float *y, const float *x, int n) {
    SP_KDISPATCH(vec_add, y, x, n);
    for (int i = 0; i < n; i++) y[i] += x[i];
}

void sp_vec_scale(float *y, float s, int n) {
    SP_KDISPATCH(vec_scale, y, s, n);
    for (int i = 0; i < n; i++) y[i] *= s;
}
