/*
 * AdamW, its learning-rate schedule and gradient clipping.
 */
#include "train/train.h"

#include <math.h>

void sp_tr_adamw_step(float *p, const float *g, float *m, float *v, size_t n, const sp_tr_adamw *h,
                      float lr, float wd, int64_t step) {
    const float b1 = h->beta1, b2 = h->beta2;
    /* bias corrections in double: 1 - b^step loses digits in float for b2 near 1 */
    const float c1 = (float)(1.0 / (1.0 - pow(b1, (double)step)));
    const float c2 = (float)(1.0 / (1.0 - pow(b2, (double)step)));
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        const float upd = (m[i] * c1) / (sqrtf(v[i] * c2) + h->eps);
        p[i] -= lr * (upd + wd * p[i]);
    }
}

float sp_tr_lr_cosine(int64_t step, int64_t warmup, int64_t total, float peak, float floor) {
    if (step < warmup) return peak * (float)(step + 1) / (float)warmup;
    if (step >= total || total <= warmup) return floor;
    const double progress = (double)(step - warmup) / (double)(total - warmup);
    return floor + (float)(0.5 * (1.0 + cos(M_PI * progress))) * (peak - floor);
}

float sp_tr_clip_grad(float *g, size_t n, float max_norm) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    const float norm = (float)sqrt(ss);
    if (isfinite(norm) && max_norm > 0.0f && norm > max_norm) {
        const float s = max_norm / norm;
        for (size_t i = 0; i < n; i++) g[i] *= s;
    }
    return norm;
}
