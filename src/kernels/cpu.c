/* CPU feature detection and the kernels' dispatch table.
 *
 * The table is the one sp_kernels_select / sp_kernels_set_simd set, else
 * the best the CPU supports, picked on the first sp_kern() call; the
 * pointer is published atomically so the worker threads that run kernels
 * concurrently all see one table. */
#include "kernels/internal.h"

#include <stdatomic.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <string.h>

/* The portable table: every entry NULL, so each public function runs its
 * own C code. */
static const sp_kfuncs sp_kfuncs_scalar = { .name = "scalar", .level = SP_SIMD_SCALAR };

#if defined(__x86_64__)
/* The entries the AVX2 and the AVX-VNNI tables share. */
#define SP_KFUNCS_AVX2_COMMON                        \
    .dot_supports = sp_avx2_dot_supports,            \
    .act_prepare = sp_avx2_act_prepare,              \
    .rmsnorm = sp_avx2_rmsnorm,                      \
    .softmax = sp_avx2_softmax,                      \
    .argmax = sp_avx2_argmax,                        \
    .swiglu = sp_avx2_swiglu,                        \
    .geglu = sp_avx2_geglu,                          \
    .vec_add = sp_avx2_vec_add,                      \
    .vec_scale = sp_avx2_vec_scale,                  \
    .attn_heads_q = sp_avx2_attn_heads_q

/* The AVX2 F16 attention (the AVX-512 table has its own). */
#define SP_KFUNCS_AVX2_ATTN                          \
    .attn_head = sp_avx2_attn_head,                  \
    .attn_heads = sp_avx2_attn_heads,                \
    .attn_heads_idx = sp_avx2_attn_heads_idx

const sp_kfuncs sp_kfuncs_avx2 = {
    .name = "avx2+fma+f16c",
    .level = SP_SIMD_AVX2,
    SP_KFUNCS_AVX2_COMMON,
    SP_KFUNCS_AVX2_ATTN,
    .dot_rows = sp_avx2_dot_rows,
    .dot_packed = sp_avx2_dot_packed,
};

/* AVX2 plus AVX-VNNI: only the packed kernels differ. */
const sp_kfuncs sp_kfuncs_vnni = {
    .name = "avx2+fma+f16c+avxvnni",
    .level = SP_SIMD_VNNI,
    SP_KFUNCS_AVX2_COMMON,
    SP_KFUNCS_AVX2_ATTN,
    .dot_rows = sp_avx2_dot_rows,
    .dot_packed = sp_vnni_dot_packed,
};

/* AVX2 plus AVX-512 VNNI: the packed and the K-quant kernels and the F16
 * attention (attn_avx512.c) differ. */
const sp_kfuncs sp_kfuncs_avx512 = {
    .name = "avx2+fma+f16c+avx512vnni",
    .level = SP_SIMD_AVX512,
    SP_KFUNCS_AVX2_COMMON,
    .dot_rows = sp_avx512_dot_rows,
    .dot_packed = sp_avx512_dot_packed,
    .attn_head = sp_avx512_attn_head,
    .attn_heads = sp_avx512_attn_heads,
    .attn_heads_idx = sp_avx512_attn_heads_idx,
};
#endif

static _Atomic(const sp_kfuncs *) sp_kern_active;

/* True if the CPU and the OS support AVX2, FMA and F16C.  GCC's
 * __builtin_cpu_supports reads CPUID and checks XGETBV for the saved YMM
 * state, so a kernel that runs without AVX support in the OS reports false. */
static bool sp_cpu_has_avx2(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

/* True if the CPU has AVX-VNNI (CPUID leaf 7 subleaf 1, EAX bit 4): the
 * VEX-encoded dpbusd on 256-bit registers, whose state sp_cpu_has_avx2
 * already found enabled by the OS.  Read with CPUID directly because
 * compilers disagree on the name __builtin_cpu_supports takes for it. */
static bool sp_cpu_has_avxvnni(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return (a >> 4) & 1u;
#else
    return false;
#endif
}

/* True if the CPU has AVX-512 F, BW, VL and VNNI and the OS saves the
 * 512-bit state (__builtin_cpu_supports checks XGETBV for it too). */
static bool sp_cpu_has_avx512vnni(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

bool sp_kernels_simd_supported(sp_simd level) {
    switch (level) {
    case SP_SIMD_SCALAR: return true;
    case SP_SIMD_AVX2: return sp_cpu_has_avx2();
    case SP_SIMD_VNNI: return sp_cpu_has_avx2() && sp_cpu_has_avxvnni();
    case SP_SIMD_AVX512: return sp_cpu_has_avx2() && sp_cpu_has_avx512vnni();
    }
    return false;
}

/* The widest: 512-bit dpbusd does twice the work of the 256-bit one. */
sp_simd sp_kernels_simd_best(void) {
    if (sp_kernels_simd_supported(SP_SIMD_AVX512)) return SP_SIMD_AVX512;
    if (sp_kernels_simd_supported(SP_SIMD_VNNI)) return SP_SIMD_VNNI;
    return sp_kernels_simd_supported(SP_SIMD_AVX2) ? SP_SIMD_AVX2 : SP_SIMD_SCALAR;
}

static const sp_kfuncs *sp_kfuncs_for(sp_simd level) {
#if defined(__x86_64__)
    if (level == SP_SIMD_AVX2) return &sp_kfuncs_avx2;
    if (level == SP_SIMD_VNNI) return &sp_kfuncs_vnni;
    if (level == SP_SIMD_AVX512) return &sp_kfuncs_avx512;
#endif
    (void)level;
    return &sp_kfuncs_scalar;
}

const sp_kfuncs *sp_kern(void) {
    const sp_kfuncs *k = atomic_load_explicit(&sp_kern_active, memory_order_acquire);
    if (k) return k;
    /* Two threads may get here at once; both compute the same table. */
    const sp_kfuncs *want = sp_kfuncs_for(sp_kernels_simd_best());
    const sp_kfuncs *expected = NULL;
    if (!atomic_compare_exchange_strong(&sp_kern_active, &expected, want)) return expected;
    return want;
}

sp_simd sp_kernels_simd(void) { return sp_kern()->level; }

int sp_kernels_set_simd(sp_simd level) {
    if (!sp_kernels_simd_supported(level)) return -1;
    atomic_store_explicit(&sp_kern_active, sp_kfuncs_for(level), memory_order_release);
    return 0;
}

int sp_kernels_select(const char *level, sp_err *err) {
    if (!level || !*level || strcmp(level, "auto") == 0)
        return sp_kernels_set_simd(sp_kernels_simd_best());   /* always supported */
    static const struct { const char *name; sp_simd level; const char *needs; } known[] = {
        { "scalar", SP_SIMD_SCALAR, "" },
        { "avx2", SP_SIMD_AVX2, "AVX2/FMA/F16C" },
        { "vnni", SP_SIMD_VNNI, "AVX-VNNI" },
        { "avx512", SP_SIMD_AVX512, "AVX-512 F/BW/VL/VNNI" },
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        if (strcmp(level, known[i].name) != 0) continue;
        if (sp_kernels_set_simd(known[i].level) == 0) return 0;
        return sp_err_set(err, "SIMD level %s needs %s, which this CPU lacks", level, known[i].needs);
    }
    return sp_err_set(err, "unknown SIMD level %s (scalar, avx2, vnni, avx512, auto)", level);
}

const char *sp_kernels_describe(void) { return sp_kern()->name; }

bool sp_kernels_have_packed(void) { return sp_kern()->dot_packed != NULL; }

/* The portable counterpart of the peak loop: 8 chains of int8 products
 * summed in int32, 32 per chain and round. */
static int64_t sp_scalar_peak_loop(int64_t iters) {
    int8_t y[32];
    int32_t acc[8] = {0};
    for (int i = 0; i < 32; i++) y[i] = (int8_t)(i - 16);
    volatile int8_t wv = 3;
    for (int64_t it = 0; it < iters; it++) {
        const int8_t w = wv;
        for (int c = 0; c < 8; c++)
            for (int i = 0; i < 32; i++) acc[c] += (int32_t)w * y[i] + c;
    }
    int64_t s = 0;
    for (int c = 0; c < 8; c++) s += acc[c];
    return s;
}

/* Rounds of the active level's loop until `seconds` have passed (at least
 * a few milliseconds), best of 3 measurements. */
double sp_kernels_peak_gmacs(double seconds) {
    int64_t (*loop)(int64_t) = sp_scalar_peak_loop;
    double macs = 8.0 * 32.0; /* per round of the loop */
#if defined(__x86_64__)
    if (sp_kern()->level == SP_SIMD_AVX2) loop = sp_avx2_peak_loop;
    if (sp_kern()->level == SP_SIMD_VNNI) { loop = sp_vnni_peak_loop; macs = 12.0 * 32.0; }
    if (sp_kern()->level == SP_SIMD_AVX512) { loop = sp_avx512_peak_loop; macs = 12.0 * 64.0; }
#endif
    int64_t iters = 1000, sink = 0;
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        for (;;) {
            const uint64_t t0 = sp_now_ns();
            sink += loop(iters);
            const double s = sp_ns_to_s(sp_now_ns() - t0);
            if (s >= seconds / 3 || s >= 1.0) {
                const double r = (double)iters * macs / s * 1e-9;
                if (r > best) best = r;
                break;
            }
            iters = s > 1e-4 ? (int64_t)((double)iters * (seconds / 3) / s) + 1 : iters * 10;
        }
    }
    return sink == INT64_MIN ? -1.0 : best; /* uses the loops' results */
}
