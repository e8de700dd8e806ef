/* Machine probes for benchmarks: read bandwidth of a large buffer. */
#include "kernels/kernels.h"

#include <string.h>

typedef struct {
    const uint64_t *buf;
    size_t n;               /* uint64 words */
    uint64_t sink[64];      /* per-thread results, so the loads are not optimised away */
} bw_job;

/* Each thread reads its contiguous share; four independent xor chains let
 * the loads run at the memory system's rate rather than the adder's. */
static void bw_worker(void *ctx, int ith, int nth) {
    bw_job *j = ctx;
    int64_t lo, hi;
    sp_split((int64_t)(j->n / 4), ith, nth, &lo, &hi);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = lo * 4; i < hi * 4; i += 4) {
        a ^= j->buf[i]; b ^= j->buf[i + 1]; c ^= j->buf[i + 2]; d ^= j->buf[i + 3];
    }
    j->sink[ith & 63] = a ^ b ^ c ^ d;
}

double sp_kernels_read_gbps(sp_pool *pool, size_t bytes) {
    bw_job j = { .n = bytes / sizeof(uint64_t) };
    uint64_t *buf = sp_alloc_aligned(j.n * sizeof(uint64_t));
    for (size_t i = 0; i < j.n; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    j.buf = buf;
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        uint64_t t0 = sp_now_ns();
        sp_pool_run(pool, bw_worker, &j);
        double s = sp_ns_to_s(sp_now_ns() - t0);
        double gbps = (double)(j.n * sizeof(uint64_t)) / s / 1e9;
        if (gbps > best) best = gbps;
    }
    sp_free_aligned(buf);
    return best;
}
