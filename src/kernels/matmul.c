/* Matrix multiplication of quantized weights by activation rows.
 *
 * Each activation row is quantized once to the weight type's activation
 * format; then every output element is one sp_vec_dot of a weight row with
 * an activation row.  Threads split the output rows (the weight matrix), so
 * each weight row is read from memory once per call whatever the number of
 * activation rows, and the result of an element never depends on the
 * number of rows or threads: the multiplication is batch-invariant.
 */
#include "kernels/kernels.h"

#include <string.h>

size_t sp_matmul_scratch_bytes(uint32_t wtype, int64_t n_in, int n_rows) {
    const uint32_t at = sp_act_type(wtype);
    if (at == SP_F32) return 0;
    return (size_t)sp_dtype_row_bytes(at, (uint64_t)n_in) * (size_t)n_rows;
}

typedef struct {
    const sp_matrix *w;
    const void *xq;           /* n_rows activation rows in act format */
    size_t xq_stride;         /* bytes between activation rows */
    int n_rows;
    float *y;
    int64_t ldy;
} sp_matmul_job;

/* Thread ith computes a contiguous range of output rows for all activation
 * rows; the split depends only on n_out and the thread count. */
static void sp_matmul_worker(void *ctx, int ith, int nth) {
    const sp_matmul_job *job = ctx;
    const sp_matrix *w = job->w;
    const size_t wrow = (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in);
    int64_t lo, hi;
    sp_split(w->n_out, ith, nth, &lo, &hi);
    for (int64_t o = lo; o < hi; o++) {
        const void *wr = (const uint8_t *)w->data + (size_t)o * wrow;
        for (int r = 0; r < job->n_rows; r++) {
            const void *xr = (const uint8_t *)job->xq + (size_t)r * job->xq_stride;
            job->y[(size_t)r * (size_t)job->ldy + (size_t)o] = sp_vec_dot(w->type, w->n_in, wr, xr);
        }
    }
}

void sp_matmul(const sp_matrix *w, const float *x, int n_rows, float *y, int64_t ldy,
               void *scratch, sp_pool *pool) {
    const uint32_t at = sp_act_type(w->type);
    sp_matmul_job job = { .w = w, .n_rows = n_rows, .y = y, .ldy = ldy };
    if (at == SP_F32) {
        job.xq = x;
        job.xq_stride = (size_t)w->n_in * sizeof(float);
    } else {
        job.xq_stride = (size_t)sp_dtype_row_bytes(at, (uint64_t)w->n_in);
        for (int r = 0; r < n_rows; r++)
            sp_quantize_row(at, x + (size_t)r * (size_t)w->n_in,
                            (uint8_t *)scratch + (size_t)r * job.xq_stride, w->n_in);
        job.xq = scratch;
    }
    sp_pool_run(pool, sp_matmul_worker, &job);
}

void sp_matrix_get_row(const sp_matrix *w, int64_t row, float *out) {
    const size_t wrow = (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in);
    sp_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)row * wrow, out, w->n_in);
}
