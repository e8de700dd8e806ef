/*
 * base — the bottom layer of specula: errors, logging, memory (growing
 * arrays included), index lists, threads, randomness, half-precision
 * floats, timers and the table of tensor types.
 *
 * Everything above may call this; this calls only libc and pthreads.
 */
#ifndef SP_BASE_H
#define SP_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Errors
 *
 * Fallible functions return 0 on success and -1 on failure, and write a
 * human-readable message into a caller-owned sp_err.  The message names the
 * problem precisely (which field, which offset, what was expected) because it
 * is what the user sees when a file or request is bad.
 * ---------------------------------------------------------------------- */
typedef struct sp_err {
    char msg[512];
} sp_err;

/* Formats the message into err (if not NULL) and returns -1. */
int sp_err_set(sp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "prefix: " to an existing message; returns -1. */
int sp_err_prefix(sp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------
 * Logging (to stderr).  Level 0 = errors only, 1 = info (default), 2 = debug.
 * ---------------------------------------------------------------------- */
extern int sp_log_level;
void sp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define sp_info(...)  sp_log(1, __VA_ARGS__)
#define sp_debug(...) sp_log(2, __VA_ARGS__)

/* ------------------------------------------------------------------------
 * Memory.  sp_xmalloc and friends abort with a message on exhaustion: the
 * engine cannot continue without its buffers and every caller would do the
 * same.  Aligned buffers (64 bytes, for SIMD and cache lines) are released
 * with sp_free_aligned.
 * ---------------------------------------------------------------------- */
void *sp_xmalloc(size_t n);
void *sp_xcalloc(size_t n, size_t size);
void *sp_xrealloc(void *p, size_t n);
char *sp_xstrdup(const char *s);
void *sp_alloc_aligned(size_t n);      /* zero-filled */
void sp_free_aligned(void *p);
/* A large zero-filled region for data read often and in full (packed
 * weights): page-aligned, backed by huge pages where the kernel allows
 * (fewer TLB misses on every pass over it).  Released with sp_free_big
 * and the same size. */
void *sp_alloc_big(size_t n);
void sp_free_big(void *p, size_t n);

/* Grows a heap array to hold at least `need` elements.  ptr is a typed
 * pointer (NULL while cap is 0) and cap its capacity in elements, of any
 * integer type; both are updated.  The capacity doubles (from
 * SP_VEC_MIN_CAP) until it is enough, so n single pushes cost O(n) copies
 * in all.  A size that overflows size_t or a capacity that does not fit
 * cap's type aborts with a message, like running out of memory (no caller
 * could go on).  Evaluates its arguments more than once: pass plain
 * lvalues and side-effect-free expressions. */
#define SP_VEC_MIN_CAP 16
#define SP_VEC_GROW(ptr, cap, need)                                                   \
    do {                                                                              \
        if ((uint64_t)(need) > (uint64_t)(cap)) {                                    \
            size_t sp_vec_cap_ = (size_t)(cap);                                       \
            (ptr) = sp_grow((ptr), sizeof *(ptr), &sp_vec_cap_, (size_t)(need));      \
            (cap) = sp_vec_cap_;                                                      \
            if ((uint64_t)(cap) != (uint64_t)sp_vec_cap_) sp_grow_fail(sp_vec_cap_, sizeof *(ptr)); \
        }                                                                             \
    } while (0)
/* SP_VEC_GROW's worker: reallocates p (elements of elem bytes) to the
 * doubled capacity >= need (> *cap) and stores that capacity in *cap. */
void *sp_grow(void *p, size_t elem, size_t *cap, size_t need);
/* Aborts: an array of n elements of elem bytes cannot be sized. */
_Noreturn void sp_grow_fail(size_t n, size_t elem);

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool sp_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool sp_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ------------------------------------------------------------------------
 * Index lists (list.c): "0-7,28-29", as --self-layers and quantize's
 * --layers take them.
 * ---------------------------------------------------------------------- */
/* Parses comma-separated decimal indices N and ranges N-M (N <= M) into
 * keep[0..n): keep[i] = 1 for every listed i, else 0.  Items may overlap
 * and come in any order unless `ascending`, where each must start after
 * the previous one ended (for lists whose order means something).  On an
 * error (empty list, an item that is not N or N-M, a range that goes
 * backwards, an index >= n, with ascending one out of order or twice)
 * returns -1 and err names the problem; keep is then unspecified. */
int sp_parse_index_list(const char *spec, int n, bool ascending, uint8_t *keep, sp_err *err);

/* ------------------------------------------------------------------------
 * Timers
 * ---------------------------------------------------------------------- */
uint64_t sp_now_ns(void);              /* monotonic clock */
static inline double sp_ns_to_s(uint64_t ns) { return (double)ns * 1e-9; }

/* Peak resident set size of this process in bytes (0 if unknown). */
uint64_t sp_peak_rss(void);

/* ------------------------------------------------------------------------
 * Thread pool
 *
 * sp_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once on each of the nth
 * threads (the caller is thread 0) and returns when all have finished.
 * Workers spin briefly before sleeping, so back-to-back operations of a
 * forward pass pay little synchronisation cost.  A pool is used by one
 * caller at a time.
 * ---------------------------------------------------------------------- */
typedef struct sp_pool sp_pool;
typedef void (*sp_pool_fn)(void *ctx, int ith, int nth);

sp_pool *sp_pool_create(int n_threads);     /* n_threads >= 1 */
void sp_pool_free(sp_pool *pool);
int sp_pool_size(const sp_pool *pool);
void sp_pool_run(sp_pool *pool, sp_pool_fn fn, void *ctx);
/* One step of a wait loop inside a pool job (spins = steps so far): a CPU
 * pause hint for the first steps, then sched_yield, so a thread waiting
 * for another one that was descheduled gives it the core. */
void sp_pool_relax(int spins);
/* Number of physical cores (best effort; >= 1). */
int sp_physical_cores(void);

/* Splits [0, n) into nth nearly equal chunks; chunk ith is [*lo, *hi). */
static inline void sp_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

/* ------------------------------------------------------------------------
 * Randomness keyed by (seed, position)
 *
 * Sampling draws its uniform number from a hash of (seed, position, stream)
 * instead of a running generator state.  The same seed therefore gives the
 * same draw at the same position whatever happened before: batching,
 * speculation, retries.  That is what lets speculative decoding reproduce
 * plain decoding exactly at temperature > 0.
 * ---------------------------------------------------------------------- */
uint64_t sp_hash64(uint64_t x);                                   /* splitmix64 finaliser */
uint64_t sp_rng_u64(uint64_t seed, uint64_t pos, uint64_t stream);
double sp_rng_uniform(uint64_t seed, uint64_t pos, uint64_t stream); /* [0, 1), 53 bits */

/* A small sequential generator for tests and tools (not for sampling). */
typedef struct sp_rng { uint64_t s; } sp_rng;
static inline uint64_t sp_rng_next(sp_rng *r) { r->s += 0x9E3779B97F4A7C15ull; return sp_hash64(r->s); }
static inline double sp_rng_next_f64(sp_rng *r) { return (double)(sp_rng_next(r) >> 11) * 0x1.0p-53; }

/* ------------------------------------------------------------------------
 * Half-precision floats (IEEE fp16 and bfloat16), bit-exact conversions.
 * fp32 -> fp16 rounds to nearest even; NaN stays NaN.
 * ---------------------------------------------------------------------- */
typedef uint16_t sp_f16;
typedef uint16_t sp_bf16;
float sp_f16_to_f32_slow(sp_f16 h);
sp_f16 sp_f32_to_f16(float f);
extern float sp_f16_table[65536];      /* filled by sp_base_init() */
static inline float sp_f16_to_f32(sp_f16 h) { return sp_f16_table[h]; }
static inline float sp_bf16_to_f32(sp_bf16 h) {
    union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };
    return v.f;
}
sp_bf16 sp_f32_to_bf16(float f);

/* One-time process initialisation (tables).  Idempotent and thread-safe. */
void sp_base_init(void);

/* ------------------------------------------------------------------------
 * Tensor element types, numbered as in GGUF/ggml.
 *
 * This table is a fact of the file format, so both the GGUF reader (to
 * validate tensor sizes) and the kernels (to compute on them) use it.
 * Types the kernels cannot compute still have sizes here so that `specula
 * info` can describe any valid file.
 * ---------------------------------------------------------------------- */
typedef enum sp_dtype {
    SP_F32 = 0, SP_F16 = 1, SP_Q4_0 = 2, SP_Q4_1 = 3,
    SP_Q5_0 = 6, SP_Q5_1 = 7, SP_Q8_0 = 8, SP_Q8_1 = 9,
    SP_Q2_K = 10, SP_Q3_K = 11, SP_Q4_K = 12, SP_Q5_K = 13, SP_Q6_K = 14, SP_Q8_K = 15,
    SP_IQ2_XXS = 16, SP_IQ2_XS = 17, SP_IQ3_XXS = 18, SP_IQ1_S = 19, SP_IQ4_NL = 20,
    SP_IQ3_S = 21, SP_IQ2_S = 22, SP_IQ4_XS = 23, SP_I8 = 24, SP_I16 = 25, SP_I32 = 26,
    SP_I64 = 27, SP_F64 = 28, SP_IQ1_M = 29, SP_BF16 = 30,
    SP_TQ1_0 = 34, SP_TQ2_0 = 35, SP_MXFP4 = 39,
    SP_DTYPE_COUNT = 40
} sp_dtype;

typedef struct sp_dtype_info {
    const char *name;       /* NULL for unassigned ids */
    uint32_t block;         /* elements per block */
    uint32_t bytes;         /* bytes per block */
} sp_dtype_info;

/* NULL if t is not a known type id. */
const sp_dtype_info *sp_dtype_get(uint32_t t);
static inline const char *sp_dtype_name(uint32_t t) {
    const sp_dtype_info *i = sp_dtype_get(t);
    return i ? i->name : "unknown";
}
/* Bytes of a row of n elements, or 0 if n is not a multiple of the block
 * size or the type is unknown. */
uint64_t sp_dtype_row_bytes(uint32_t t, uint64_t n);

#endif /* SP_BASE_H */
