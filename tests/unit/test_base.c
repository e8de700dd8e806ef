/* Unit tests for the base layer: half floats, keyed RNG, pool, dtypes,
 * growing arrays, index lists. */
#include "test_util.h"
#include "base/base.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_f16_roundtrip_exact(void **state) {
    (void)state;
    sp_base_init();
    /* Every finite half converts to float and back to the same bits. */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* nan */
        float f = sp_f16_to_f32((sp_f16)h);
        assert_int_equal(sp_f32_to_f16(f), h);
    }
}

static void test_f16_rounding(void **state) {
    (void)state;
    assert_int_equal(sp_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(sp_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(sp_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(sp_f32_to_f16(65520.0f), 0x7c00);  /* rounds up to inf */
    assert_int_equal(sp_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(sp_f32_to_f16(1e-8f), 0x0000);     /* below half of min subnormal */
    assert_int_equal(sp_f32_to_f16(0x1.0p-24f), 0x0001);
    /* 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1.0). */
    assert_int_equal(sp_f32_to_f16(1.0f + 0x1.0p-11f), 0x3c00);
    /* 1 + 3*2^-11 ties to even upwards. */
    assert_int_equal(sp_f32_to_f16(1.0f + 3 * 0x1.0p-11f), 0x3c02);
    assert_true(isnan(sp_f16_to_f32(sp_f32_to_f16(NAN))));
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(sp_f32_to_bf16(1.0f), 0x3f80);
    assert_true(sp_bf16_to_f32(0x3f80) == 1.0f);
    /* ties to even */
    union { uint32_t u; float f; } v = { .u = 0x3f808000u };
    assert_int_equal(sp_f32_to_bf16(v.f), 0x3f80);
    v.u = 0x3f818000u;
    assert_int_equal(sp_f32_to_bf16(v.f), 0x3f82);
}

static void test_rng_keyed(void **state) {
    (void)state;
    /* Pure function of the keys, different across positions/seeds. */
    assert_true(sp_rng_uniform(42, 7, 0) == sp_rng_uniform(42, 7, 0));
    assert_true(sp_rng_uniform(42, 7, 0) != sp_rng_uniform(42, 8, 0));
    assert_true(sp_rng_uniform(42, 7, 0) != sp_rng_uniform(43, 7, 0));
    assert_true(sp_rng_uniform(42, 7, 0) != sp_rng_uniform(42, 7, 1));
    /* Roughly uniform: mean of many draws near 0.5. */
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = sp_rng_uniform(1, (uint64_t)i, 0);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
    }
    assert_true(fabs(sum / 100000 - 0.5) < 0.01);
}

static void add_fn(void *ctx, int ith, int nth) {
    int64_t *acc = ctx;
    int64_t lo, hi;
    sp_split(1000, ith, nth, &lo, &hi);
    int64_t s = 0;
    for (int64_t i = lo; i < hi; i++) s += i;
    __atomic_fetch_add(acc, s, __ATOMIC_SEQ_CST);
}

static void test_pool(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) {
        sp_pool *p = sp_pool_create(n);
        assert_int_equal(sp_pool_size(p), n);
        for (int rep = 0; rep < 200; rep++) {
            int64_t acc = 0;
            sp_pool_run(p, add_fn, &acc);
            assert_int_equal(acc, 999 * 1000 / 2);
        }
        sp_pool_free(p);
    }
    assert_true(sp_physical_cores() >= 1);
}

/* Big regions: page-aligned, zero-filled, writable over their whole size;
 * freeing NULL is a no-op. */
static void test_alloc_big(void **state) {
    (void)state;
    const size_t sizes[] = {1, 4096, 3 * 1024 * 1024 + 17};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        uint8_t *p = sp_alloc_big(sizes[k]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 4096, 0);
        for (size_t i = 0; i < sizes[k]; i += 997) assert_int_equal(p[i], 0);
        assert_int_equal(p[sizes[k] - 1], 0);
        memset(p, 0xA5, sizes[k]);
        assert_int_equal(p[sizes[k] - 1], 0xA5);
        sp_free_big(p, sizes[k]);
    }
    sp_free_big(NULL, 0);
}

static void test_split(void **state) {
    (void)state;
    for (int nth = 1; nth < 7; nth++) {
        int64_t prev = 0;
        for (int i = 0; i < nth; i++) {
            int64_t lo, hi;
            sp_split(10, i, nth, &lo, &hi);
            assert_int_equal(lo, prev);
            assert_true(hi >= lo);
            prev = hi;
        }
        assert_int_equal(prev, 10);
    }
}

static void test_dtype(void **state) {
    (void)state;
    assert_string_equal(sp_dtype_name(SP_Q4_K), "Q4_K");
    assert_int_equal(sp_dtype_row_bytes(SP_Q4_0, 64), 36);
    assert_int_equal(sp_dtype_row_bytes(SP_Q4_0, 33), 0);
    assert_int_equal(sp_dtype_row_bytes(SP_Q6_K, 256), 210);
    assert_null(sp_dtype_get(4));  /* removed Q4_2 */
    assert_null(sp_dtype_get(1000));
    assert_string_equal(sp_dtype_name(77), "unknown");
}

static void test_err(void **state) {
    (void)state;
    sp_err e;
    assert_int_equal(sp_err_set(&e, "bad %d", 3), -1);
    assert_string_equal(e.msg, "bad 3");
    sp_err_prefix(&e, "file %s", "x");
    assert_string_equal(e.msg, "file x: bad 3");
    assert_int_equal(sp_err_set(NULL, "ignored"), -1);
}

static void test_vec_grow(void **state) {
    (void)state;
    int32_t *v = NULL;
    int cap = 0;
    SP_VEC_GROW(v, cap, 1);                 /* from nothing: the minimum */
    assert_non_null(v);
    assert_int_equal(cap, SP_VEC_MIN_CAP);
    for (int i = 0; i < cap; i++) v[i] = i;
    int32_t *before = v;
    SP_VEC_GROW(v, cap, SP_VEC_MIN_CAP);    /* enough already: untouched */
    assert_ptr_equal(v, before);
    assert_int_equal(cap, SP_VEC_MIN_CAP);
    SP_VEC_GROW(v, cap, SP_VEC_MIN_CAP + 1); /* one more: doubles */
    assert_int_equal(cap, 2 * SP_VEC_MIN_CAP);
    SP_VEC_GROW(v, cap, 100);               /* far more: doubles until enough */
    assert_int_equal(cap, 128);
    for (int i = 0; i < SP_VEC_MIN_CAP; i++) assert_int_equal(v[i], i);  /* contents kept */
    v[99] = 7;                              /* ASan: all of it is usable */
    free(v);

    char *b = NULL;                         /* a size_t capacity, bytes */
    size_t bcap = 0;
    SP_VEC_GROW(b, bcap, 1000);
    assert_int_equal(bcap, 1024);
    memset(b, 1, bcap);
    free(b);
}

/* Runs fn in a child process; true if it died of SIGABRT. */
static bool aborts(void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fclose(stderr);                      /* the expected message is noise here */
        fn();
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void grow_bytes_overflow(void) {
    uint64_t *v = NULL;
    size_t cap = 0;
    SP_VEC_GROW(v, cap, SIZE_MAX / 4);      /* 8-byte elements: the size overflows */
}

static void grow_cap_overflow(void) {
    char *v = NULL;
    signed char cap = 100;                  /* 200 does not fit */
    v = malloc(100);
    SP_VEC_GROW(v, cap, 101);
}

static void grow_fits(void) {
    char *v = NULL;
    unsigned char cap = 0;
    SP_VEC_GROW(v, cap, 128);               /* 16 .. 128: fits in 8 bits */
    free(v);
}

static void test_vec_grow_overflow(void **state) {
    (void)state;
    assert_true(aborts(grow_bytes_overflow));
    assert_true(aborts(grow_cap_overflow));
    assert_false(aborts(grow_fits));
}

/* keep[] of a good list, as a string of 0/1. */
static const char *listed(const char *spec, int n, bool ascending) {
    static char out[64];
    uint8_t keep[64];
    sp_err e = {{0}};
    assert_true(n < 64);
    if (sp_parse_index_list(spec, n, ascending, keep, &e)) fail_msg("'%s': %s", spec, e.msg);
    for (int i = 0; i < n; i++) out[i] = (char)('0' + keep[i]);
    out[n] = 0;
    return out;
}

/* The error of a bad list. */
static const char *list_error(const char *spec, int n, bool ascending) {
    static sp_err e;
    uint8_t keep[64];
    assert_int_equal(sp_parse_index_list(spec, n, ascending, keep, &e), -1);
    return e.msg;
}

static void test_index_list(void **state) {
    (void)state;
    /* good lists: single indices, ranges, both ends of the bounds */
    assert_string_equal(listed("0-2,5,7-7", 8, true), "11100101");
    assert_string_equal(listed("9", 10, true), "0000000001");
    assert_string_equal(listed("0", 1, true), "1");
    assert_string_equal(listed("007", 8, true), "00000001");      /* leading zeros are decimal */
    /* any order and overlaps without ascending; the union is kept */
    assert_string_equal(listed("5,0-2,1-3,5", 6, false), "111101");
    /* overlapping or going back with ascending */
    assert_string_equal(list_error("0-3,2-5", 8, true), "2 is listed out of order or twice (the list must be ascending)");
    assert_string_equal(list_error("4,1", 8, true), "1 is listed out of order or twice (the list must be ascending)");
    assert_string_equal(list_error("1,1", 8, true), "1 is listed out of order or twice (the list must be ascending)");
    /* out of range, also numbers too long for any integer type */
    assert_string_equal(list_error("0-8", 8, false), "8 is out of range (0-7)");
    assert_string_equal(list_error("12", 8, false), "12 is out of range (0-7)");
    assert_string_equal(list_error("99999999999999999999999", 8, false),
                        "99999999999999999999999 is out of range (0-7)");
    /* ranges that go backwards */
    assert_string_equal(list_error("7-0", 8, false), "range 7-0 goes backwards");
    /* garbage and empty */
    assert_string_equal(list_error("", 8, false), "empty list");
    assert_string_equal(list_error("1,,2", 8, false), "expected N or N-M at ',2'");
    assert_string_equal(list_error("1,", 8, false), "expected N or N-M at the end");
    assert_string_equal(list_error("3-", 8, false), "expected N or N-M at the end");
    assert_string_equal(list_error("-1", 8, false), "expected N or N-M at '-1'");
    assert_string_equal(list_error(" 1", 8, false), "expected N or N-M at ' 1'");
    assert_string_equal(list_error("x", 8, false), "expected N or N-M at 'x'");
    assert_string_equal(list_error("1-2-3", 8, false), "expected ',' or the end at '-3'");
    assert_string_equal(list_error("1;2", 8, false), "expected ',' or the end at ';2'");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_roundtrip_exact), cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_bf16), cmocka_unit_test(test_rng_keyed),
        cmocka_unit_test(test_pool), cmocka_unit_test(test_alloc_big), cmocka_unit_test(test_split),
        cmocka_unit_test(test_dtype), cmocka_unit_test(test_err),
        cmocka_unit_test(test_vec_grow), cmocka_unit_test(test_vec_grow_overflow),
        cmocka_unit_test(test_index_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
