/* Matrix multiplication of quantized weights by activation rows.
 *
 * Each activation row is quantized once to the weight type's activation
 * format.  Threads then take chunks of output rows (weight rows) from a
 * shared counter, so both cores stay busy even when one is disturbed and
 * each weight row is read from memory once per call whatever the number
 * of activation rows:
 *   - SIMD path (dispatch table has a kernel for the type): activations in
 *     the split layout of internal.h; one dot_rows call per chunk of weight
 *     rows multiplies each weight row against all activation rows (its
 *     blocks unpacked once per register chunk of 4-8 activation rows, not
 *     once per row);
 *   - packed matrices (pack.c): the SIMD level's dot_packed on whole
 *     groups of 8 output rows (chunks are multiples of 8), or, on the
 *     portable path, each row unpacked to its original blocks first;
 *   - portable path: one sp_vec_dot per (weight row, activation row).
 * Either way an output element is a fixed function of its weight row and
 * activation row: which thread computes it, and how many rows share the
 * call, change nothing (batch invariance).
 */
#include "kernels/internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* Bytes from the start of scratch to the first 64-byte boundary. */
static size_t sp_mm_align_pad(const void *p) { return (size_t)(-(uintptr_t)p & 63u); }

size_t sp_matmul_scratch_bytes(uint32_t wtype, int64_t n_in, int n_rows) {
    const uint32_t at = sp_act_type(wtype);
    const size_t portable = at == SP_F32 ? 0 : (size_t)sp_dtype_row_bytes(at, (uint64_t)n_in) * (size_t)n_rows + 64;
    const size_t simd = sp_act_split_bytes(wtype, n_in) * (size_t)n_rows + 64;
    return portable > simd ? portable : simd;
}

/* One matrix of a call: its weights, where its activation rows were
 * prepared and where its output goes. */
typedef struct {
    const sp_matrix *w;
    const sp_kfuncs *k;       /* SIMD table, or NULL for the portable path */
    void *xq;                 /* n_rows prepared activation rows */
    size_t xq_stride;         /* bytes between prepared rows */
    bool prep;                /* this part prepares xq (else an earlier part did) */
    float *y;
    int64_t ldy;
    int64_t chunk;            /* output rows taken at a time */
    _Atomic int64_t next;     /* first output row not yet taken */
} sp_mm_part;

typedef struct {
    const float *x;           /* n_rows float rows (stride n_in), shared by all parts */
    int n_rows;
    int n_parts;
    sp_mm_part part[SP_MATMUL_MAX];
    _Atomic int prepared;     /* threads done preparing their activation rows */
} sp_matmul_job;

/* Activation row r of part p: the split layout (SIMD) or blocks of
 * sp_act_type (sp_quantize_act_row). */
static void sp_mm_prepare(const sp_matmul_job *job, const sp_mm_part *p, int r) {
    const int64_t n = p->w->n_in;
    void *dst = (uint8_t *)p->xq + (size_t)r * p->xq_stride;
    if (p->k) p->k->act_prepare(p->w->type, job->x + (size_t)r * (size_t)n, n, dst);
    else sp_quantize_act_row(sp_act_type(p->w->type), job->x + (size_t)r * (size_t)n, dst, n);
}

/* Output rows [lo, hi) of a packed matrix (lo, hi multiples of 8): the
 * SIMD kernel on whole groups, or the portable dot on each row unpacked to
 * its original blocks (so exactly the unpacked portable result). */
static void sp_mm_rows_packed(const sp_mm_part *p, int n_rows, int64_t lo, int64_t hi) {
    const sp_matrix *w = p->w;
    const size_t wrow = (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in);
    if (p->k && p->k->dot_packed) {
        const size_t gbytes = wrow * SP_PACK_ROWS;
        p->k->dot_packed(w->type, w->n_in, (const uint8_t *)w->packed + (size_t)(lo / SP_PACK_ROWS) * gbytes,
                         gbytes, (hi - lo) / SP_PACK_ROWS, p->xq, p->xq_stride, n_rows, p->y + lo,
                         (size_t)p->ldy);
        return;
    }
    _Alignas(64) uint8_t row[SP_PACK_MAX_IN / SP_QK * sizeof(sp_blk_q8_0)];
    for (int64_t o = lo; o < hi; o++) {
        sp_matrix_unpack_row(w, o, row);
        for (int r = 0; r < n_rows; r++) {
            const void *xr = (const uint8_t *)p->xq + (size_t)r * p->xq_stride;
            p->y[(size_t)r * (size_t)p->ldy + (size_t)o] = sp_vec_dot(w->type, w->n_in, row, xr);
        }
    }
}

/* Output rows [lo, hi) of part p for every activation row. */
static void sp_mm_rows(const sp_mm_part *p, int n_rows, int64_t lo, int64_t hi) {
    const sp_matrix *w = p->w;
    const size_t wrow = (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in);
    if (w->packed) {
        sp_mm_rows_packed(p, n_rows, lo, hi);
        return;
    }
    if (p->k) {
        p->k->dot_rows(w->type, w->n_in, (const uint8_t *)w->data + (size_t)lo * wrow, wrow, hi - lo, p->xq,
                       p->xq_stride, n_rows, p->y + lo, (size_t)p->ldy);
        return;
    }
    for (int64_t o = lo; o < hi; o++) {
        const void *wr = (const uint8_t *)w->data + (size_t)o * wrow;
        for (int r = 0; r < n_rows; r++) {
            const void *xr = (const uint8_t *)p->xq + (size_t)r * p->xq_stride;
            p->y[(size_t)r * (size_t)p->ldy + (size_t)o] = sp_vec_dot(w->type, w->n_in, wr, xr);
        }
    }
}

/* Thread ith prepares the (part, row) pairs ith, ith + nth, ... that need
 * preparing and waits until every thread has; then each thread takes
 * chunks of output rows, part after part, until none is left (no wait
 * between parts: they write different outputs). */
static void sp_matmul_worker(void *ctx, int ith, int nth) {
    sp_matmul_job *job = ctx;
    const int nr = job->n_rows;
    bool any_prep = false;
    for (int i = 0, seq = 0; i < job->n_parts; i++) {
        const sp_mm_part *p = &job->part[i];
        if (!p->prep) continue;
        any_prep = true;
        for (int r = 0; r < nr; r++, seq++)
            if (seq % nth == ith) sp_mm_prepare(job, p, r);
    }
    if (any_prep) {
        atomic_fetch_add_explicit(&job->prepared, 1, memory_order_acq_rel);
        for (int spins = 0; atomic_load_explicit(&job->prepared, memory_order_acquire) < nth; spins++)
            sp_pool_relax(spins);
    }
    for (int i = 0; i < job->n_parts; i++) {
        sp_mm_part *p = &job->part[i];
        const int64_t n_out = p->w->n_out;
        for (;;) {
            const int64_t lo = atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
            if (lo >= n_out) break;
            sp_mm_rows(p, nr, lo, lo + p->chunk < n_out ? lo + p->chunk : n_out);
        }
    }
}

/* How part p reads its activations: the SIMD split layout, the float rows
 * themselves, or portable blocks; parts of the same n_in and form share
 * one prepared copy. */
typedef enum { SP_MM_SIMD, SP_MM_F32, SP_MM_PORTABLE } sp_mm_form;

static sp_mm_form sp_mm_form_of(const sp_kfuncs *k, const sp_matrix *w) {
    if (k->dot_supports && k->dot_supports(w->type) && (!w->packed || k->dot_packed)) return SP_MM_SIMD;
    /* A packed matrix on a level without a packed kernel runs the
     * portable path (which unpacks rows). */
    return sp_act_type(w->type) == SP_F32 ? SP_MM_F32 : SP_MM_PORTABLE;
}

/* Bytes of one prepared activation row of w in form f (0 for F32). */
static size_t sp_mm_row_bytes(sp_mm_form f, const sp_matrix *w) {
    if (f == SP_MM_SIMD) return sp_act_split_bytes(w->type, w->n_in);
    if (f == SP_MM_F32) return 0;
    return (size_t)sp_dtype_row_bytes(sp_act_type(w->type), (uint64_t)w->n_in);
}

size_t sp_matmul_many_scratch_bytes(const sp_matrix *const *w, int n_mats, int n_rows) {
    size_t s = 0;
    for (int i = 0; i < n_mats; i++) s += sp_matmul_scratch_bytes(w[i]->type, w[i]->n_in, n_rows) + 64;
    return s;
}

/* The call of sp_matmul_many with output strides ldy (NULL: n_out). */
static void sp_mm_run(const sp_matrix *const *w, const float *x, int n_rows, float *const *y, const int64_t *ldy,
                      int n_mats, void *scratch, sp_pool *pool) {
    /* A caller's bug, not bad input: stop rather than read x wrongly. */
    for (int i = 0; i < n_mats; i++)
        if (n_mats > SP_MATMUL_MAX || w[i]->n_in != w[0]->n_in) {
            fprintf(stderr, "specula: sp_matmul_many: %d matrices (at most %d) of one n_in required\n", n_mats,
                    SP_MATMUL_MAX);
            abort();
        }
    const sp_kfuncs *k = sp_kern();
    const int nth = sp_pool_size(pool);
    sp_matmul_job job = { .x = x, .n_rows = n_rows, .n_parts = n_mats };
    sp_mm_form form[SP_MATMUL_MAX];
    uint8_t *free_at = scratch;
    for (int i = 0; i < n_mats; i++) {
        sp_mm_part *p = &job.part[i];
        p->w = w[i];
        p->y = y[i];
        p->ldy = ldy ? ldy[i] : w[i]->n_out;
        form[i] = sp_mm_form_of(k, w[i]);
        p->k = form[i] == SP_MM_SIMD ? k : NULL;
        p->xq_stride = form[i] == SP_MM_F32 ? (size_t)w[i]->n_in * sizeof(float) : sp_mm_row_bytes(form[i], w[i]);
        if (form[i] == SP_MM_F32) {
            p->xq = (void *)(uintptr_t)x;
        } else {
            /* The same prepared rows as an earlier part: same form, same
             * activation type and length. */
            for (int j = 0; j < i && !p->xq; j++)
                if (form[j] == form[i] && w[j]->n_in == w[i]->n_in &&
                    sp_act_type(w[j]->type) == sp_act_type(w[i]->type))
                    p->xq = job.part[j].xq;
            if (!p->xq) {
                free_at += sp_mm_align_pad(free_at);
                p->xq = free_at;
                p->prep = true;
                free_at += p->xq_stride * (size_t)n_rows;
            }
        }
        /* About 8 chunks per thread, so a late or slower core gets less. */
        int64_t chunk = w[i]->n_out / (8 * (int64_t)nth);
        p->chunk = chunk < 4 ? 4 : (chunk > 256 ? 256 : chunk);
        /* packed: whole pairs of groups (the AVX-512 kernel does two at once) */
        if (w[i]->packed) p->chunk = (p->chunk + 2 * SP_PACK_ROWS - 1) / (2 * SP_PACK_ROWS) * (2 * SP_PACK_ROWS);
        atomic_init(&p->next, 0);
    }
    atomic_init(&job.prepared, 0);
    sp_pool_run(pool, sp_matmul_worker, &job);
}

void sp_matmul_many(const sp_matrix *const *w, const float *x, int n_rows, float *const *y, int n_mats,
                    void *scratch, sp_pool *pool) {
    sp_mm_run(w, x, n_rows, y, NULL, n_mats, scratch, pool);
}

void sp_matmul(const sp_matrix *w, const float *x, int n_rows, float *y, int64_t ldy,
               void *scratch, sp_pool *pool) {
    sp_mm_run(&w, x, n_rows, &y, &ldy, 1, scratch, pool);
}

void sp_matrix_get_row(const sp_matrix *w, int64_t row, float *out) {
    const size_t wrow = (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in);
    if (w->packed) {
        _Alignas(64) uint8_t blocks[SP_PACK_MAX_IN / SP_QK * sizeof(sp_blk_q8_0)];
        sp_matrix_unpack_row(w, row, blocks);
        sp_dequantize_row(w->type, blocks, out, w->n_in);
        return;
    }
    sp_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)row * wrow, out, w->n_in);
}
