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

/* Bytes from the start of scratch to the first 64-byte boundary. */
static size_t sp_mm_align_pad(const void *p) { return (size_t)(-(uintptr_t)p & 63u); }

size_t sp_matmul_scratch_bytes(uint32_t wtype, int64_t n_in, int n_rows) {
    const uint32_t at = sp_act_type(wtype);
    const size_t portable = at == SP_F32 ? 0 : (size_t)sp_dtype_row_bytes(at, (uint64_t)n_in) * (size_t)n_rows;
    const size_t simd = sp_act_split_bytes(wtype, n_in) * (size_t)n_rows + 64;
    return portable > simd ? portable : simd;
}

typedef struct {
    const sp_matrix *w;
    const sp_kfuncs *k;       /* SIMD table, or NULL for the portable path */
    const float *x;           /* n_rows float rows (stride n_in) */
    void *xq;                 /* n_rows prepared activation rows */
    size_t xq_stride;         /* bytes between prepared rows */
    int n_rows;
    float *y;
    int64_t ldy;
    int64_t chunk;            /* output rows taken at a time */
    _Atomic int64_t next;     /* first output row not yet taken */
    _Atomic int prepared;     /* threads done preparing their activation rows */
} sp_matmul_job;

/* Activation row r: the split layout (SIMD) or blocks of sp_act_type
 * (sp_quantize_act_row). */
static void sp_mm_prepare(sp_matmul_job *job, int r) {
    const int64_t n = job->w->n_in;
    void *dst = (uint8_t *)job->xq + (size_t)r * job->xq_stride;
    if (job->k) job->k->act_prepare(job->w->type, job->x + (size_t)r * (size_t)n, n, dst);
    else sp_quantize_act_row(sp_act_type(job->w->type), job->x + (size_t)r * (size_t)n, dst, n);
}

/* Output rows [lo, hi) of a packed matrix (lo, hi multiples of 8): the
 * SIMD kernel on whole groups, or the portable dot on each row unpacked to
 * its original blocks (so exactly the unpacked portable result). */
static void sp_mm_rows_packed(const sp_matmul_job *job, int64_t lo, int64_t hi) {
    const sp_matrix *w = job->w;
    const size_t wrow = (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in);
    if (job->k && job->k->dot_packed) {
        const size_t gbytes = wrow * SP_PACK_ROWS;
        job->k->dot_packed(w->type, w->n_in, (const uint8_t *)w->packed + (size_t)(lo / SP_PACK_ROWS) * gbytes,
                           gbytes, (hi - lo) / SP_PACK_ROWS, job->xq, job->xq_stride, job->n_rows,
                           job->y + lo, (size_t)job->ldy);
        return;
    }
    _Alignas(64) uint8_t row[SP_PACK_MAX_IN / SP_QK * sizeof(sp_blk_q8_0)];
    for (int64_t o = lo; o < hi; o++) {
        sp_matrix_unpack_row(w, o, row);
        for (int r = 0; r < job->n_rows; r++) {
            const void *xr = (const uint8_t *)job->xq + (size_t)r * job->xq_stride;
            job->y[(size_t)r * (size_t)job->ldy + (size_t)o] = sp_vec_dot(w->type, w->n_in, row, xr);
        }
    }
}

/* Output rows [lo, hi) for every activation row. */
static void sp_mm_rows(const sp_matmul_job *job, int64_t lo, int64_t hi) {
    const sp_matrix *w = job->w;
    const size_t wrow = (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in);
    if (w->packed) {
        sp_mm_rows_packed(job, lo, hi);
        return;
    }
    if (job->k) {
        job->k->dot_rows(w->type, w->n_in, (const uint8_t *)w->data + (size_t)lo * wrow, wrow, hi - lo,
                         job->xq, job->xq_stride, job->n_rows, job->y + lo, (size_t)job->ldy);
        return;
    }
    for (int64_t o = lo; o < hi; o++) {
        const void *wr = (const uint8_t *)w->data + (size_t)o * wrow;
        for (int r = 0; r < job->n_rows; r++) {
            const void *xr = (const uint8_t *)job->xq + (size_t)r * job->xq_stride;
            job->y[(size_t)r * (size_t)job->ldy + (size_t)o] = sp_vec_dot(w->type, w->n_in, wr, xr);
        }
    }
}

/* Thread ith prepares activation rows ith, ith + nth, ... (when they need
 * preparing) and waits until every thread has; then each thread takes
 * chunks of output rows until none is left. */
static void sp_matmul_worker(void *ctx, int ith, int nth) {
    sp_matmul_job *job = ctx;
    if (job->xq != job->x) {
        for (int r = ith; r < job->n_rows; r += nth) sp_mm_prepare(job, r);
        atomic_fetch_add_explicit(&job->prepared, 1, memory_order_acq_rel);
        for (int spins = 0; atomic_load_explicit(&job->prepared, memory_order_acquire) < nth; spins++)
            sp_pool_relax(spins);
    }
    const int64_t n_out = job->w->n_out;
    for (;;) {
        const int64_t lo = atomic_fetch_add_explicit(&job->next, job->chunk, memory_order_relaxed);
        if (lo >= n_out) break;
        sp_mm_rows(job, lo, lo + job->chunk < n_out ? lo + job->chunk : n_out);
    }
}

void sp_matmul(const sp_matrix *w, const float *x, int n_rows, float *y, int64_t ldy,
               void *scratch, sp_pool *pool) {
    const sp_kfuncs *k = sp_kern();
    const uint32_t at = sp_act_type(w->type);
    const int nth = sp_pool_size(pool);
    sp_matmul_job job = { .w = w, .x = x, .n_rows = n_rows, .y = y, .ldy = ldy };
    /* A packed matrix on a level without a packed kernel runs the
     * portable path (which unpacks rows). */
    if (k->dot_supports && k->dot_supports(w->type) && (!w->packed || k->dot_packed)) {
        job.k = k;
        job.xq = (uint8_t *)scratch + sp_mm_align_pad(scratch);
        job.xq_stride = sp_act_split_bytes(w->type, w->n_in);
    } else if (at == SP_F32) {
        job.xq = (void *)(uintptr_t)x;
        job.xq_stride = (size_t)w->n_in * sizeof(float);
    } else {
        job.xq = scratch;
        job.xq_stride = (size_t)sp_dtype_row_bytes(at, (uint64_t)w->n_in);
    }
    /* About 8 chunks per thread, so a late or slower core gets less. */
    int64_t chunk = w->n_out / (8 * (int64_t)nth);
    job.chunk = chunk < 4 ? 4 : (chunk > 256 ? 256 : chunk);
    if (w->packed) job.chunk = (job.chunk + SP_PACK_ROWS - 1) / SP_PACK_ROWS * SP_PACK_ROWS;
    atomic_init(&job.next, 0);
    atomic_init(&job.prepared, 0);
    sp_pool_run(pool, sp_matmul_worker, &job);
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
