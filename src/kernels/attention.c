/* Scaled dot-product attention of one query head over an F16 KV cache. */
#include "kernels/kernels.h"

#include <string.h>

void sp_attn_head(float *out, const float *q, const sp_f16 *k, const sp_f16 *v, size_t stride,
                  int head_dim, int lo, int hi, float scale, float *scores) {
    const int n = hi - lo;
    for (int j = 0; j < n; j++) {
        const sp_f16 *kj = k + (size_t)(lo + j) * stride;
        float s = 0.0f;
        for (int d = 0; d < head_dim; d++) s += q[d] * sp_f16_to_f32(kj[d]);
        scores[j] = s * scale;
    }
    sp_softmax(scores, n);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int j = 0; j < n; j++) {
        const sp_f16 *vj = v + (size_t)(lo + j) * stride;
        const float p = scores[j];
        for (int d = 0; d < head_dim; d++) out[d] += p * sp_f16_to_f32(vj[d]);
    }
}
