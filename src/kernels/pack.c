/* Packed weights: the layout of internal.h (sp_blk_q4_1x8, sp_blk_q5_0x8,
 * sp_blk_q8_0x8),
 * built from and turned back into ordinary rows.  Packing only moves
 * bytes: every value and scale of the original blocks is kept, so
 * unpacking a row gives its original blocks exactly. */
#include "kernels/internal.h"

bool sp_matrix_packable(uint32_t type, int64_t n_in, int64_t n_out) {
    return (type == SP_Q4_1 || type == SP_Q5_0 || type == SP_Q8_0) && n_in > 0 && n_in % SP_QK == 0 &&
           n_in <= SP_PACK_MAX_IN && n_out > 0 && n_out % SP_PACK_ROWS == 0;
}

size_t sp_matrix_packed_bytes(const sp_matrix *w) {
    return (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in) * (size_t)w->n_out;
}

/* n runs of 4 bytes: run k of a row's field <-> lane r of packed vector k. */
static void sp_runs_in(uint8_t *x, const void *b, int n, int r) {
    for (int k = 0; k < n; k++) memcpy(x + 32 * k + 4 * r, (const uint8_t *)b + 4 * k, 4);
}
static void sp_runs_out(const uint8_t *x, void *b, int n, int r) {
    for (int k = 0; k < n; k++) memcpy((uint8_t *)b + 4 * k, x + 32 * k + 4 * r, 4);
}

/* Row r (< 8) of packed block x <-> original block b. */
static void sp_pack_q4_1(const sp_blk_q4_1 *b, sp_blk_q4_1x8 *x, int r) {
    memcpy(x->d + 2 * r, b->d, 2);
    memcpy(x->m + 2 * r, b->m, 2);
    sp_runs_in(x->qs, b->qs, 4, r);
}
static void sp_unpack_q4_1(const sp_blk_q4_1x8 *x, sp_blk_q4_1 *b, int r) {
    memcpy(b->d, x->d + 2 * r, 2);
    memcpy(b->m, x->m + 2 * r, 2);
    sp_runs_out(x->qs, b->qs, 4, r);
}
static void sp_pack_q5_0(const sp_blk_q5_0 *b, sp_blk_q5_0x8 *x, int r) {
    memcpy(x->d + 2 * r, b->d, 2);
    sp_runs_in(x->qh, b->qh, 1, r);
    sp_runs_in(x->qs, b->qs, 4, r);
}
static void sp_unpack_q5_0(const sp_blk_q5_0x8 *x, sp_blk_q5_0 *b, int r) {
    memcpy(b->d, x->d + 2 * r, 2);
    sp_runs_out(x->qh, b->qh, 1, r);
    sp_runs_out(x->qs, b->qs, 4, r);
}
static void sp_pack_q8_0(const sp_blk_q8_0 *b, sp_blk_q8_0x8 *x, int r) {
    memcpy(x->d + 2 * r, b->d, 2);
    sp_runs_in((uint8_t *)x->qs, b->qs, 8, r);
}
static void sp_unpack_q8_0(const sp_blk_q8_0x8 *x, sp_blk_q8_0 *b, int r) {
    memcpy(b->d, x->d + 2 * r, 2);
    sp_runs_out((const uint8_t *)x->qs, b->qs, 8, r);
}

void sp_matrix_pack_rows(const sp_matrix *w, void *dst, int64_t row0, int64_t n_rows) {
    const int64_t nb = w->n_in / SP_QK;
    for (int64_t o = row0; o < row0 + n_rows; o++) {
        const int64_t g = o / SP_PACK_ROWS;
        const int r = (int)(o % SP_PACK_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            if (w->type == SP_Q4_1)
                sp_pack_q4_1((const sp_blk_q4_1 *)w->data + o * nb + b, (sp_blk_q4_1x8 *)dst + g * nb + b, r);
            else if (w->type == SP_Q5_0)
                sp_pack_q5_0((const sp_blk_q5_0 *)w->data + o * nb + b, (sp_blk_q5_0x8 *)dst + g * nb + b, r);
            else
                sp_pack_q8_0((const sp_blk_q8_0 *)w->data + o * nb + b, (sp_blk_q8_0x8 *)dst + g * nb + b, r);
        }
    }
}

void sp_matrix_pack(const sp_matrix *w, void *dst) { sp_matrix_pack_rows(w, dst, 0, w->n_out); }

void sp_matrix_unpack_row(const sp_matrix *w, int64_t row, void *dst) {
    const int64_t nb = w->n_in / SP_QK, g = row / SP_PACK_ROWS;
    const int r = (int)(row % SP_PACK_ROWS);
    for (int64_t b = 0; b < nb; b++) {
        if (w->type == SP_Q4_1)
            sp_unpack_q4_1((const sp_blk_q4_1x8 *)w->packed + g * nb + b, (sp_blk_q4_1 *)dst + b, r);
        else if (w->type == SP_Q5_0)
            sp_unpack_q5_0((const sp_blk_q5_0x8 *)w->packed + g * nb + b, (sp_blk_q5_0 *)dst + b, r);
        else
            sp_unpack_q8_0((const sp_blk_q8_0x8 *)w->packed + g * nb + b, (sp_blk_q8_0 *)dst + b, r);
    }
}
