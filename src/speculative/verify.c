/* Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): accept a
 * draft token x ~ q with probability min(1, p(x)/q(x)), otherwise draw from
 * the residual norm(max(0, p - q)).  The emitted token is distributed
 * exactly as p. */
#include "speculative/speculative.h"

int32_t sp_verify_specsample(const sp_cand *p, int n_p, const float *q, int n_vocab, int32_t x,
                             double u_acc, double u_res, bool *accepted) {
    double px = 0;
    for (int i = 0; i < n_p; i++)
        if (p[i].id == x) { px = p[i].p; break; }
    const double qx = (x >= 0 && x < n_vocab) ? q[x] : 0.0;
    /* A draft cannot propose a token it gives no mass; if one does, accept
     * it exactly when the target can produce it (the limit of p/q). */
    const double ratio = qx > 0 ? px / qx : (px > 0 ? 1.0 : 0.0);
    if (u_acc < ratio) {
        *accepted = true;
        return x;
    }
    *accepted = false;
    /* Residual over the target's candidates (tokens outside p have p = 0 and
     * so no residual mass). */
    double total = 0;
    for (int i = 0; i < n_p; i++) {
        double r = (double)p[i].p - (double)q[p[i].id];
        if (r > 0) total += r;
    }
    if (total <= 0) return sp_cand_pick(p, n_p, u_res); /* p == q: unreachable in exact arithmetic */
    double target = u_res * total, cum = 0;
    int32_t last = p[0].id;
    for (int i = 0; i < n_p; i++) {
        double r = (double)p[i].p - (double)q[p[i].id];
        if (r <= 0) continue;
        cum += r;
        last = p[i].id;
        if (target < cum) return p[i].id;
    }
    return last;
}
