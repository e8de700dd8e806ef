/* Memory helpers, timers and process statistics. */
#include "base/base.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

static void sp_oom(size_t n) {
    fprintf(stderr, "specula: out of memory (allocating %zu bytes)\n", n);
    abort();
}

void *sp_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) sp_oom(n);
    return p;
}

void *sp_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) sp_oom(n * size);
    return p;
}

void *sp_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) sp_oom(n);
    return q;
}

void sp_grow_fail(size_t n, size_t elem) {
    fprintf(stderr, "specula: an array of %zu elements of %zu bytes is too large\n", n, elem);
    abort();
}

void *sp_grow(void *p, size_t elem, size_t *cap, size_t need) {
    assert(elem > 0 && need > *cap);
    size_t c = *cap ? *cap : SP_VEC_MIN_CAP;
    while (c < need) c = c > SIZE_MAX / 2 ? need : 2 * c;   /* no wrap: need itself is the last step */
    size_t bytes;
    if (__builtin_mul_overflow(c, elem, &bytes)) sp_grow_fail(c, elem);
    *cap = c;
    return sp_xrealloc(p, bytes);
}

char *sp_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(sp_xmalloc(n), s, n);
}

void *sp_alloc_aligned(size_t n) {
    size_t rounded = (n + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) sp_oom(n);
    memset(p, 0, rounded ? rounded : 64);
    return p;
}

void sp_free_aligned(void *p) { free(p); }

void *sp_alloc_big(size_t n) {
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) sp_oom(n);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n ? n : 1, MADV_HUGEPAGE); /* a hint: fine if refused */
#endif
    return p;
}

void sp_free_big(void *p, size_t n) {
    if (p) munmap(p, n ? n : 1);
}

uint64_t sp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sp_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024ull; /* Linux reports KiB */
}
