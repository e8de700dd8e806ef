/* The KV cache of one sequence. */
#include "model/model.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

sp_kv *sp_kv_create(const sp_model *m, int n_ctx) {
    return sp_kv_create_dims(m->hp.n_layer, n_ctx, m->hp.n_head_kv * m->hp.head_dim);
}

sp_kv *sp_kv_create_dims(int n_layer, int n_ctx, int kv_dim) {
    assert(n_layer > 0 && n_ctx > 0 && kv_dim > 0);
    sp_kv *kv = sp_xcalloc(1, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    const size_t n = (size_t)kv->n_layer * (size_t)n_ctx * (size_t)kv->kv_dim;
    kv->k = sp_alloc_aligned(n * sizeof(sp_f16));
    kv->v = sp_alloc_aligned(n * sizeof(sp_f16));
    return kv;
}

void sp_kv_free(sp_kv *kv) {
    if (!kv) return;
    sp_free_aligned(kv->k);
    sp_free_aligned(kv->v);
    free(kv);
}

/* Trimming only moves the end: attention reads positions [lo, p] of the
 * query's own position p, so entries at or beyond n are never read before a
 * forward pass overwrites them.  That makes the trim exact. */
void sp_kv_trim(sp_kv *kv, int n_keep) {
    assert(n_keep >= 0 && n_keep <= kv->n);
    kv->n = n_keep;
}

/* Rows move only towards lower slots (path[i] >= i since a node's index
 * exceeds its parent's), so copying in path order never overwrites a row
 * still to be moved. */
void sp_kv_keep_path(sp_kv *kv, int base, const int32_t *path, int n_path) {
    const size_t kvd = (size_t)kv->kv_dim;
    for (int i = 0; i < n_path; i++) {
        assert(path[i] >= i && base + path[i] < kv->n);
        if (path[i] == i) continue;
        for (int il = 0; il < kv->n_layer; il++) {
            const size_t lo = (size_t)il * kv->n_ctx;
            memcpy(kv->k + (lo + base + i) * kvd, kv->k + (lo + base + path[i]) * kvd, kvd * sizeof(sp_f16));
            memcpy(kv->v + (lo + base + i) * kvd, kv->v + (lo + base + path[i]) * kvd, kvd * sizeof(sp_f16));
        }
    }
    kv->n = base + n_path;
}
