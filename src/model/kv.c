/* The KV cache of one sequence. */
#include "model/model.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of n values of a storage type (n a multiple of 32 when quantized). */
static size_t type_bytes(uint32_t t, size_t n) {
    switch (t) {
    case SP_Q8_0: return n / 32 * 34;
    case SP_Q4_0: return n / 32 * 18;
    default: return n * sizeof(sp_f16);
    }
}

static const sp_kv_types all_f16 = { SP_F16, SP_F16, 0 };

int sp_kv_type_parse(const char *name, uint32_t *out) {
    if (!strcmp(name, "f16")) *out = SP_F16;
    else if (!strcmp(name, "q8_0")) *out = SP_Q8_0;
    else if (!strcmp(name, "q4_0")) *out = SP_Q4_0;
    else return -1;
    return 0;
}

static const char *type_name(uint32_t t) { return t == SP_Q8_0 ? "q8_0" : t == SP_Q4_0 ? "q4_0" : "f16"; }

void sp_kv_types_name(const sp_kv_types *t, char *buf, size_t cap) {
    if (!t || (t->k == SP_F16 && t->v == SP_F16)) snprintf(buf, cap, "kv:f16");
    else snprintf(buf, cap, "kv:%s/%s@%d", type_name(t->k), type_name(t->v), t->quant_start);
}

int sp_kv_types_check(const sp_model *m, const sp_kv_types *t, sp_err *err) {
    const uint32_t ts[2] = { t->k, t->v };
    for (int i = 0; i < 2; i++) {
        if (ts[i] != SP_F16 && ts[i] != SP_Q8_0 && ts[i] != SP_Q4_0)
            return sp_err_set(err, "KV cache type %u: only f16, q8_0 and q4_0", ts[i]);
        if (ts[i] != SP_F16 && m->hp.head_dim % 32)
            return sp_err_set(err, "a %s KV cache needs heads of a multiple of 32 values (this model's have %d)",
                              type_name(ts[i]), m->hp.head_dim);
    }
    if (t->quant_start < 0 || t->quant_start > m->hp.n_layer)
        return sp_err_set(err, "--kv-quant-start %d: the model has %d layers", t->quant_start, m->hp.n_layer);
    return 0;
}

size_t sp_kv_bytes_per_token(const sp_model *m, const sp_kv_types *t) {
    if (!t) t = &all_f16;
    const size_t kvd = (size_t)m->hp.n_head_kv * m->hp.head_dim;
    size_t b = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const bool q = il >= t->quant_start;
        b += type_bytes(q ? t->k : SP_F16, kvd) + type_bytes(q ? t->v : SP_F16, kvd);
    }
    return b;
}

static sp_kv *kv_new(int n_layer, int n_ctx, int kv_dim, const sp_kv_types *t) {
    assert(n_layer > 0 && n_ctx > 0 && kv_dim > 0);
    sp_kv *kv = sp_xcalloc(1, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->type_k = sp_xmalloc((size_t)n_layer * sizeof *kv->type_k);
    kv->type_v = sp_xmalloc((size_t)n_layer * sizeof *kv->type_v);
    kv->row_k = sp_xmalloc((size_t)n_layer * sizeof *kv->row_k);
    kv->row_v = sp_xmalloc((size_t)n_layer * sizeof *kv->row_v);
    kv->off_k = sp_xmalloc((size_t)n_layer * sizeof *kv->off_k);
    kv->off_v = sp_xmalloc((size_t)n_layer * sizeof *kv->off_v);
    size_t bk = 0, bv = 0;
    kv->f16 = true;
    for (int il = 0; il < n_layer; il++) {
        const bool q = il >= t->quant_start;
        kv->type_k[il] = q ? t->k : SP_F16;
        kv->type_v[il] = q ? t->v : SP_F16;
        kv->f16 &= kv->type_k[il] == SP_F16 && kv->type_v[il] == SP_F16;
        kv->row_k[il] = type_bytes(kv->type_k[il], (size_t)kv_dim);
        kv->row_v[il] = type_bytes(kv->type_v[il], (size_t)kv_dim);
        kv->off_k[il] = bk;
        kv->off_v[il] = bv;
        bk += kv->row_k[il] * (size_t)n_ctx;
        bv += kv->row_v[il] * (size_t)n_ctx;
    }
    kv->k = sp_alloc_aligned(bk);
    kv->v = sp_alloc_aligned(bv);
    return kv;
}

sp_kv *sp_kv_create(const sp_model *m, int n_ctx) { return sp_kv_create_typed(m, n_ctx, NULL); }

sp_kv *sp_kv_create_typed(const sp_model *m, int n_ctx, const sp_kv_types *t) {
    return kv_new(m->hp.n_layer, n_ctx, m->hp.n_head_kv * m->hp.head_dim, t ? t : &all_f16);
}

sp_kv *sp_kv_create_dims(int n_layer, int n_ctx, int kv_dim) { return kv_new(n_layer, n_ctx, kv_dim, &all_f16); }

void sp_kv_free(sp_kv *kv) {
    if (!kv) return;
    sp_free_aligned(kv->k);
    sp_free_aligned(kv->v);
    free(kv->type_k);
    free(kv->type_v);
    free(kv->row_k);
    free(kv->row_v);
    free(kv->off_k);
    free(kv->off_v);
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
    for (int i = 0; i < n_path; i++) {
        assert(path[i] >= i && base + path[i] < kv->n);
        if (path[i] == i) continue;
        for (int il = 0; il < kv->n_layer; il++) {
            memcpy(sp_kv_krow(kv, il, base + i), sp_kv_krow(kv, il, base + path[i]), kv->row_k[il]);
            memcpy(sp_kv_vrow(kv, il, base + i), sp_kv_vrow(kv, il, base + path[i]), kv->row_v[il]);
        }
    }
    kv->n = base + n_path;
}
