/* Denormal floats off while a head trains.
 *
 * Gemma's residual stream reaches the thousands while the head's gradients
 * and Adam's second moments shrink towards 1e-38: products land in the
 * subnormal range, where each x86 multiply or add takes a microcode assist
 * of ~100 cycles.  Training Gemma's head ran at 38 tokens/s with them and
 * 251 with flush-to-zero and denormals-are-zero set (one thread, same
 * data).  Values that small carry nothing a draft head needs.
 *
 * MXCSR is per thread, so the mode is set on every thread of the pool and
 * restored afterwards: inference in the same process keeps IEEE
 * semantics.  Other architectures keep their default mode. */
#include "train/train.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FP_FTZ_DAZ 0x8040u           /* MXCSR flush-to-zero (bit 15) and denormals-are-zero (bit 6) */

typedef struct fp_job {
    bool on;
    unsigned saved[SP_TR_MAX_THREADS];
} fp_job;

static void fp_set(void *ctx, int ith, int nth) {
    fp_job *j = ctx;
    (void)nth;
    if (ith >= SP_TR_MAX_THREADS) return;
    if (j->on) {
        j->saved[ith] = _mm_getcsr();
        _mm_setcsr(j->saved[ith] | FP_FTZ_DAZ);
    } else {
        _mm_setcsr(j->saved[ith]);
    }
}

sp_tr_fpenv *sp_tr_denormals_off(sp_pool *pool) {
    fp_job *j = sp_xcalloc(1, sizeof *j);
    j->on = true;
    if (pool) sp_pool_run(pool, fp_set, j);
    else fp_set(j, 0, 1);
    return (sp_tr_fpenv *)j;
}

void sp_tr_denormals_restore(sp_pool *pool, sp_tr_fpenv *env) {
    fp_job *j = (fp_job *)env;
    if (!j) return;
    j->on = false;
    if (pool) sp_pool_run(pool, fp_set, j);
    else fp_set(j, 0, 1);
    free(j);
}
#else
sp_tr_fpenv *sp_tr_denormals_off(sp_pool *pool) { (void)pool; return NULL; }
void sp_tr_denormals_restore(sp_pool *pool, sp_tr_fpenv *env) { (void)pool; (void)env; }
#endif
