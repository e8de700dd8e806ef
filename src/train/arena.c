/*
 * The parameter arena: named views into four flat buffers.
 */
#include "train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SP_TR_ALIGN = 16 };   /* floats: views start on 64-byte lines */

int sp_tr_arena_add(sp_tr_arena *a, const char *name, int ndim, const int64_t *shape, bool decay,
                    sp_err *err) {
    if (a->param) return sp_err_set(err, "arena: view '%s' added after allocation", name);
    if (strlen(name) >= sizeof a->views[0].name) return sp_err_set(err, "arena: name '%s' too long", name);
    if (sp_tr_arena_find(a, name) >= 0) return sp_err_set(err, "arena: duplicate view '%s'", name);
    if (ndim < 1 || ndim > SP_TR_MAX_DIMS) return sp_err_set(err, "arena: view '%s' has %d dims", name, ndim);
    sp_tr_view vw = { .ndim = ndim, .decay = decay, .numel = 1 };
    snprintf(vw.name, sizeof vw.name, "%s", name);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) return sp_err_set(err, "arena: view '%s' dim %d is %lld", name, i, (long long)shape[i]);
        vw.shape[i] = shape[i];
        uint64_t numel;
        if (!sp_mul_ok(vw.numel, (uint64_t)shape[i], &numel) || numel > ((uint64_t)1 << 40))
            return sp_err_set(err, "arena: view '%s' is too large", name);
        vw.numel = (size_t)numel;
    }
    vw.off = (a->size + SP_TR_ALIGN - 1) / SP_TR_ALIGN * SP_TR_ALIGN;
    a->size = vw.off + vw.numel;
    if (a->n_views == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 16;
        a->views = sp_xrealloc(a->views, sizeof *a->views * (size_t)a->cap);
    }
    a->views[a->n_views] = vw;
    return a->n_views++;
}

void sp_tr_arena_alloc(sp_tr_arena *a) {
    const size_t b = sizeof(float) * (a->size ? a->size : 1);
    a->param = sp_alloc_aligned(b);
    a->grad = sp_alloc_aligned(b);
    a->m = sp_alloc_aligned(b);
    a->v = sp_alloc_aligned(b);
}

void sp_tr_arena_free(sp_tr_arena *a) {
    sp_free_aligned(a->param);
    sp_free_aligned(a->grad);
    sp_free_aligned(a->m);
    sp_free_aligned(a->v);
    free(a->views);
    memset(a, 0, sizeof *a);
}

int sp_tr_arena_find(const sp_tr_arena *a, const char *name) {
    for (int i = 0; i < a->n_views; i++)
        if (strcmp(a->views[i].name, name) == 0) return i;
    return -1;
}

void sp_tr_arena_zero_grad(sp_tr_arena *a) { memset(a->grad, 0, sizeof(float) * a->size); }

/* Box-Muller on the keyed generator: the values depend on (seed, index) only. */
void sp_tr_arena_init_normal(sp_tr_arena *a, int i, float std, uint64_t seed) {
    float *p = sp_tr_param(a, i);
    const size_t n = a->views[i].numel;
    for (size_t j = 0; j < n; j++) {
        const double u1 = 1.0 - sp_rng_uniform(seed, j, 0), u2 = sp_rng_uniform(seed, j, 1);
        p[j] = std * (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
}

typedef struct sp_tr_adamw_job {
    sp_tr_arena *a;
    const sp_tr_adamw *h;
    float lr, wd;
    int64_t step;
} sp_tr_adamw_job;

/* Each thread updates its share of every view (elementwise: any split
 * gives the same bits). */
static void sp_tr_adamw_thread(void *ctx, int ith, int nth) {
    const sp_tr_adamw_job *jb = ctx;
    const sp_tr_arena *a = jb->a;
    for (int i = 0; i < a->n_views; i++) {
        const sp_tr_view *vw = &a->views[i];
        int64_t lo, hi;
        sp_split((int64_t)vw->numel, ith, nth, &lo, &hi);
        const size_t o = vw->off + (size_t)lo;
        sp_tr_adamw_step(a->param + o, a->grad + o, a->m + o, a->v + o, (size_t)(hi - lo), jb->h, jb->lr,
                         vw->decay ? jb->wd : 0.0f, jb->step);
    }
}

void sp_tr_arena_adamw(sp_tr_arena *a, sp_pool *pool, const sp_tr_adamw *h, float lr, float wd, int64_t step) {
    sp_tr_adamw_job jb = { a, h, lr, wd, step };
    if (pool && sp_pool_size(pool) > 1) sp_pool_run(pool, sp_tr_adamw_thread, &jb);
    else sp_tr_adamw_thread(&jb, 0, 1);
}
