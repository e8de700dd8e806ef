/* Unit tests for the run-time dispatch and the SIMD kernels (cpu.c,
 * quant_avx2.c, ops_avx2.c, matmul.c, pack.c, pack_avx2.c, pack_vnni.c):
 *   - dispatch: levels, names, switching, selecting by name;
 *   - activation quantizers: the SIMD ones give exactly the portable values
 *     (random rows, rounding ties, zeros, huge and subnormal values);
 *   - matmul: SIMD vs portable within float tolerance for every weight type,
 *     odd sizes, zero blocks, extreme scales;
 *   - batch invariance: a row's outputs are bit-identical whether it is
 *     multiplied alone or with 1..16 others, with 1 or 2 threads, on both
 *     levels;
 *   - packed matrices: layout round trip, portable packed == portable
 *     unpacked exactly, SIMD within tolerance, AVX-VNNI == AVX2 exactly;
 *   - vector operations and attention: SIMD vs portable (bit-exact where the
 *     contract says so), and the accuracy of the vectorised exp.
 * SIMD tests run when the CPU has the level; on other machines they check
 * that switching to it is refused. */
#include "test_util.h"
#include "kernels/internal.h"

#include <math.h>

static int setup(void **state) {
    (void)state;
    sp_base_init();
    return 0;
}

/* Leaves the active level at the best one after each test. */
static int teardown(void **state) {
    (void)state;
    sp_kernels_set_simd(sp_kernels_simd_best());
    return 0;
}

static bool have_avx2(void) { return sp_kernels_simd_supported(SP_SIMD_AVX2); }
static bool have_vnni(void) { return sp_kernels_simd_supported(SP_SIMD_VNNI); }
static bool have_avx512(void) { return sp_kernels_simd_supported(SP_SIMD_AVX512); }

static void put_f16(uint8_t *p, float f) {
    sp_f16 h = sp_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static float urand(sp_rng *r) { return (float)(2.0 * sp_rng_next_f64(r) - 1.0); }

/* ------------------------------------------------------------------------
 * Dispatch
 * ---------------------------------------------------------------------- */
static void test_dispatch(void **state) {
    (void)state;
    assert_int_equal(sp_kernels_set_simd(SP_SIMD_SCALAR), 0);
    assert_int_equal(sp_kernels_simd(), SP_SIMD_SCALAR);
    assert_string_equal(sp_kernels_describe(), "scalar");
    /* the peak loop runs and reports a rate (its value is not asserted) */
    const double peak = sp_kernels_peak_gmacs(0.01);
    assert_true(peak > 0 && isfinite(peak));
    if (have_avx2()) {
        assert_int_equal(sp_kernels_set_simd(SP_SIMD_AVX2), 0);
        assert_int_equal(sp_kernels_simd(), SP_SIMD_AVX2);
        assert_string_equal(sp_kernels_describe(), "avx2+fma+f16c");
        const double vpeak = sp_kernels_peak_gmacs(0.01);
        assert_true(vpeak > 0 && isfinite(vpeak));
    } else {
        assert_int_equal(sp_kernels_set_simd(SP_SIMD_AVX2), -1);
        assert_int_equal(sp_kernels_simd(), SP_SIMD_SCALAR);
    }
    if (have_vnni()) {
        assert_int_equal(sp_kernels_set_simd(SP_SIMD_VNNI), 0);
        assert_int_equal(sp_kernels_simd(), SP_SIMD_VNNI);
        assert_string_equal(sp_kernels_describe(), "avx2+fma+f16c+avxvnni");
        assert_true(sp_kernels_have_packed());
        const double npeak = sp_kernels_peak_gmacs(0.01);
        assert_true(npeak > 0 && isfinite(npeak));
    } else {
        const sp_simd before = sp_kernels_simd();
        assert_int_equal(sp_kernels_set_simd(SP_SIMD_VNNI), -1);
        assert_int_equal(sp_kernels_simd(), before);
    }
    if (have_avx512()) {
        assert_int_equal(sp_kernels_set_simd(SP_SIMD_AVX512), 0);
        assert_int_equal(sp_kernels_simd(), SP_SIMD_AVX512);
        assert_string_equal(sp_kernels_describe(), "avx2+fma+f16c+avx512vnni");
        assert_int_equal(sp_kernels_simd_best(), SP_SIMD_AVX512);
        assert_true(sp_kernels_have_packed());
        const double zpeak = sp_kernels_peak_gmacs(0.01);
        assert_true(zpeak > 0 && isfinite(zpeak));
    } else {
        const sp_simd before = sp_kernels_simd();
        assert_int_equal(sp_kernels_set_simd(SP_SIMD_AVX512), -1);
        assert_int_equal(sp_kernels_simd(), before);
    }
    assert_int_equal(sp_kernels_set_simd(SP_SIMD_SCALAR), 0);
    assert_false(sp_kernels_have_packed());
}

/* sp_kernels_select: by name, "auto"/""/NULL = the best; an unknown name
 * or a level the CPU lacks is an error that names it and changes nothing. */
static void test_select(void **state) {
    (void)state;
    sp_err err;
    assert_int_equal(sp_kernels_select("scalar", &err), 0);
    assert_int_equal(sp_kernels_simd(), SP_SIMD_SCALAR);
    const char *best_names[] = { NULL, "", "auto" };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sp_kernels_set_simd(SP_SIMD_SCALAR), 0);
        assert_int_equal(sp_kernels_select(best_names[i], &err), 0);
        assert_int_equal(sp_kernels_simd(), sp_kernels_simd_best());
    }
    assert_int_equal(sp_kernels_set_simd(SP_SIMD_SCALAR), 0);
    assert_int_equal(sp_kernels_select("bogus", &err), -1);
    assert_string_equal(err.msg, "unknown SIMD level bogus (scalar, avx2, vnni, avx512, auto)");
    assert_int_equal(sp_kernels_select("AVX2", &err), -1);    /* names are lower case */
    assert_int_equal(sp_kernels_simd(), SP_SIMD_SCALAR);
    static const struct { const char *name; sp_simd level; const char *msg; } levels[] = {
        { "avx2", SP_SIMD_AVX2, "SIMD level avx2 needs AVX2/FMA/F16C, which this CPU lacks" },
        { "vnni", SP_SIMD_VNNI, "SIMD level vnni needs AVX-VNNI, which this CPU lacks" },
        { "avx512", SP_SIMD_AVX512, "SIMD level avx512 needs AVX-512 F/BW/VL/VNNI, which this CPU lacks" },
    };
    for (size_t i = 0; i < sizeof levels / sizeof *levels; i++) {
        assert_int_equal(sp_kernels_set_simd(SP_SIMD_SCALAR), 0);
        if (sp_kernels_simd_supported(levels[i].level)) {
            assert_int_equal(sp_kernels_select(levels[i].name, &err), 0);
            assert_int_equal(sp_kernels_simd(), levels[i].level);
        } else {
            assert_int_equal(sp_kernels_select(levels[i].name, &err), -1);
            assert_string_equal(err.msg, levels[i].msg);
            assert_int_equal(sp_kernels_simd(), SP_SIMD_SCALAR);
        }
    }
}

/* ------------------------------------------------------------------------
 * Activation quantizers: SIMD split layout == portable blocks, bit for bit
 * ---------------------------------------------------------------------- */

/* Rows that exercise the quantizers: random with outliers, exact rounding
 * ties, all zeros, a zero block among others, huge, subnormal, negative
 * maxima, repeated maxima of both signs, ties at a scale other than 1,
 * NaN and infinities, near ties at arbitrary scales. */
static void make_act_row(int kind, float *x, int64_t n, uint64_t seed) {
    sp_rng r = {seed};
    for (int64_t i = 0; i < n; i++) x[i] = urand(&r) * (i % 97 == 13 ? 20.0f : 1.0f);
    switch (kind) {
    case 0: break;
    case 1: /* ties: block max 127 -> d = 1, values k + 0.5 */
        for (int64_t i = 0; i < n; i++) x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(i % 200) - 100) + 0.5f;
        break;
    case 2: for (int64_t i = 0; i < n; i++) x[i] = 0.0f; break;
    case 3: for (int64_t i = 0; i < n && i < 256; i++) x[i] = 0.0f; break;
    case 4: for (int64_t i = 0; i < n; i++) x[i] *= 1e30f; break;
    case 5: for (int64_t i = 0; i < n; i++) x[i] *= 1e-41f; break; /* subnormal */
    case 6: for (int64_t i = 0; i < n; i += 7) x[i] = -50.0f; break;
    case 7: for (int64_t i = 0; i < n; i += 5) x[i] = (i / 5) % 2 ? 30.0f : -30.0f; break;
    case 8: /* ties at another scale: multiples of 1/16, block max 127/8 -> id = 8 */
        for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(sp_rng_next(&r) % 509) - 254) * 0.0625f;
        for (int64_t i = 5; i < n; i += 32) x[i] = i % 64 == 5 ? 15.875f : -15.875f;
        break;
    case 9: /* not finite: NaN and infinities among finite values */
        for (int64_t i = 3; i < n; i += 41) x[i] = (i / 41) % 3 == 0 ? NAN : ((i / 41) % 3 == 1 ? INFINITY : -INFINITY);
        break;
    case 10: /* near ties at arbitrary scales: x = (k + 0.5) / (127 / amax) with
              * amax the block's first value; the exact expression of the scale
              * decides the rounding of about one value in eight */
        for (int64_t b = 0; b + 32 <= n; b += 32) {
            const float amax = 0.5f + 2.5f * (float)sp_rng_next_f64(&r), id = 127.0f / amax;
            x[b] = amax;
            for (int j = 1; j < 32; j++) x[b + j] = ((float)((int)(sp_rng_next(&r) % 252) - 126) + 0.5f) / id;
        }
        break;
    default: break;
    }
}

/* Compares a prepared (split) row with the portable blocks of the same row. */
static void check_prepared(uint32_t wt, const float *x, int64_t n, const char *what) {
    const uint32_t at = sp_act_type(wt);
    uint8_t *blk = malloc((size_t)sp_dtype_row_bytes(at, (uint64_t)n));
    uint8_t *split = sp_alloc_aligned(sp_act_split_bytes(wt, n));
    sp_quantize_act_row(at, x, blk, n);
    sp_kern()->act_prepare(wt, x, n, split);
    const sp_act_view v = sp_act_split_view(wt, n, split);
    if (at == SP_Q8_0 || at == SP_Q8_1) {
        const size_t bb = at == SP_Q8_0 ? 34 : 36, qo = at == SP_Q8_0 ? 2 : 4;
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *p = blk + (size_t)b * bb;
            sp_f16 h;
            memcpy(&h, p, 2);
            if (memcmp(p + qo, v.q + 32 * b, 32) != 0) fail_msg("%s %s block %lld: q differ", what, sp_dtype_name(at), (long long)b);
            if (memcmp(&(float){sp_f16_to_f32(h)}, &v.d[b], 4) != 0)
                fail_msg("%s %s block %lld: d %g vs %g", what, sp_dtype_name(at), (long long)b, sp_f16_to_f32(h), v.d[b]);
            if (at == SP_Q8_1) {
                memcpy(&h, p + 2, 2);
                if (memcmp(&(float){sp_f16_to_f32(h)}, &v.s[b], 4) != 0) fail_msg("%s Q8_1 block %lld: s differ", what, (long long)b);
            } else {
                int32_t s = 0;
                for (int i = 0; i < 32; i++) s += (int8_t)p[qo + i];
                if (v.qsum[b] != s) fail_msg("%s Q8_0 block %lld: qsum %d vs %d", what, (long long)b, v.qsum[b], s);
            }
        }
    } else if (at == SP_Q8_K) {
        for (int64_t b = 0; b < n / 256; b++) {
            const uint8_t *p = blk + (size_t)b * 292;
            if (memcmp(p, &v.d[b], 4) != 0) fail_msg("%s Q8_K block %lld: d differ", what, (long long)b);
            if (memcmp(p + 4, v.q + 256 * b, 256) != 0) fail_msg("%s Q8_K block %lld: q differ", what, (long long)b);
            if (memcmp(p + 260, v.bsums + 16 * b, 32) != 0) fail_msg("%s Q8_K block %lld: bsums differ", what, (long long)b);
        }
    } else if (at == SP_F16) {
        for (int64_t i = 0; i < n; i++) {
            sp_f16 h;
            memcpy(&h, blk + 2 * i, 2);
            if (memcmp(&(float){sp_f16_to_f32(h)}, &v.f[i], 4) != 0) fail_msg("%s F16 element %lld differs", what, (long long)i);
        }
    } else {
        assert_memory_equal(v.f, x, (size_t)n * sizeof(float));
    }
    free(blk);
    sp_free_aligned(split);
}

static void test_act_prepare_exact(void **state) {
    (void)state;
    if (!have_avx2()) { assert_int_equal(sp_kernels_set_simd(SP_SIMD_AVX2), -1); return; }
    assert_int_equal(sp_kernels_set_simd(SP_SIMD_AVX2), 0);
    const uint32_t wts[] = {SP_Q4_0, SP_Q4_1, SP_Q4_K, SP_F16, SP_F32};
    const int64_t n = 1024;
    float *x = malloc((size_t)n * sizeof(float));
    for (size_t k = 0; k < sizeof wts / sizeof *wts; k++) {
        for (int kind = 0; kind < 11; kind++) {
            for (uint64_t seed = 1; seed <= 3; seed++) {
                make_act_row(kind, x, n, seed * 100 + (uint64_t)kind);
                char what[64];
                snprintf(what, sizeof what, "kind %d seed %llu", kind, (unsigned long long)seed);
                check_prepared(wts[k], x, n, what);
            }
        }
    }
    /* F16/F32 rows of any length (tails). */
    for (int64_t m = 1; m < 20; m++) {
        make_act_row(0, x, m, (uint64_t)m);
        check_prepared(SP_F16, x, m, "short");
        check_prepared(SP_F32, x, m, "short");
    }
    free(x);
}

/* ------------------------------------------------------------------------
 * Matmul: SIMD vs portable, and batch invariance
 * ---------------------------------------------------------------------- */
static const uint32_t k_types[] = {SP_F32, SP_F16, SP_BF16, SP_Q4_0, SP_Q4_1, SP_Q5_0,
                                   SP_Q5_1, SP_Q8_0, SP_Q4_K, SP_Q5_K, SP_Q6_K};
#define K_NT (sizeof k_types / sizeof *k_types)

/* Random weights: random bytes with sane fp16 scales (scale_kind 0), or
 * extreme ones (1: largest fp16 scales with small activations elsewhere;
 * 2: subnormal fp16 scales), every 5th block all zero (scales included). */
static void random_weights(uint32_t t, uint8_t *w, int64_t n_out, int64_t n_in, int scale_kind,
                           uint64_t seed) {
    sp_rng r = {seed};
    const size_t rb = (size_t)sp_dtype_row_bytes(t, (uint64_t)n_in);
    const sp_dtype_info *info = sp_dtype_get(t);
    if (t == SP_F32 || t == SP_F16 || t == SP_BF16) {
        for (int64_t i = 0; i < n_out * n_in; i++) {
            const float v = urand(&r) * (scale_kind == 1 ? 1000.0f : 1.0f);
            if (t == SP_F32) memcpy(w + 4 * i, &v, 4);
            else if (t == SP_F16) put_f16(w + 2 * i, v);
            else { sp_bf16 h = sp_f32_to_bf16(v); memcpy(w + 2 * i, &h, 2); }
        }
        return;
    }
    for (size_t i = 0; i < rb * (size_t)n_out; i++) w[i] = (uint8_t)sp_rng_next(&r);
    const size_t bb = info->bytes;
    size_t blk = 0;
    for (size_t off = 0; off < rb * (size_t)n_out; off += bb, blk++) {
        uint8_t *b = w + off;
        if (blk % 5 == 4) { memset(b, 0, bb); continue; }
        float d = (float)(0.001 + 0.01 * sp_rng_next_f64(&r)), m = (float)(0.02 * sp_rng_next_f64(&r) - 0.01);
        if (scale_kind == 1) { d = 60000.0f; m = -30000.0f; }
        if (scale_kind == 2) { d = 3e-7f; m = 1e-7f; }
        switch (t) {
        case SP_Q4_0: case SP_Q5_0: case SP_Q8_0: put_f16(b, d); break;
        case SP_Q4_1: case SP_Q5_1: put_f16(b, d); put_f16(b + 2, m); break;
        case SP_Q4_K: case SP_Q5_K: put_f16(b, d); put_f16(b + 2, fabsf(m)); break;
        case SP_Q6_K: put_f16(b + 208, d); break;
        default: fail_msg("random_weights: type %u", t);
        }
    }
}

typedef struct mm_case {
    uint32_t t;
    int64_t n_in, n_out;
    int n_rows;
    uint8_t *w;
    float *x;
    void *packed;   /* NULL, or w packed (mm_case_pack): the matmuls then read this */
} mm_case;

static void mm_case_init(mm_case *c, uint32_t t, int64_t n_in, int64_t n_out, int n_rows, int scale_kind,
                         int act_kind, uint64_t seed) {
    c->t = t; c->n_in = n_in; c->n_out = n_out; c->n_rows = n_rows; c->packed = NULL;
    c->w = malloc((size_t)sp_dtype_row_bytes(t, (uint64_t)n_in) * (size_t)n_out);
    c->x = malloc((size_t)n_rows * (size_t)n_in * sizeof(float));
    random_weights(t, c->w, n_out, n_in, scale_kind, seed);
    for (int r = 0; r < n_rows; r++) {
        make_act_row(act_kind == 2 && r % 2 ? 0 : act_kind, c->x + (size_t)r * n_in, n_in, seed * 31 + (uint64_t)r);
        if (scale_kind == 1) sp_vec_scale(c->x + (size_t)r * n_in, 1e-3f, (int)n_in);
    }
}

static void mm_case_free(mm_case *c) { free(c->w); free(c->x); sp_free_aligned(c->packed); }

static void mm_case_pack(mm_case *c) {
    sp_matrix m = { c->w, c->t, c->n_in, c->n_out, NULL };
    assert_true(sp_matrix_packable(c->t, c->n_in, c->n_out));
    assert_int_equal(sp_matrix_packed_bytes(&m), sp_dtype_row_bytes(c->t, (uint64_t)c->n_in) * (size_t)c->n_out);
    c->packed = sp_alloc_aligned(sp_matrix_packed_bytes(&m));
    sp_matrix_pack(&m, c->packed);
}

/* y (n_rows x n_out) = W x with the given level and thread count. */
static void mm_run(const mm_case *c, sp_simd level, int threads, const float *x, int n_rows, float *y) {
    assert_int_equal(sp_kernels_set_simd(level), 0);
    sp_matrix m = { c->w, c->t, c->n_in, c->n_out, c->packed };
    void *scratch = sp_alloc_aligned(sp_matmul_scratch_bytes(c->t, c->n_in, n_rows));
    sp_pool *pool = threads > 1 ? sp_pool_create(threads) : NULL;
    sp_matmul(&m, x, n_rows, y, c->n_out, scratch, pool);
    sp_pool_free(pool);
    sp_free_aligned(scratch);
}

/* Sum over i of |W[o][i] * x[r][i]| (dequantized weights), the scale of
 * the rounding error of output (r, o). */
static double mm_abs_scale(const mm_case *c, int r, int64_t o) {
    float *wd = malloc((size_t)c->n_in * sizeof(float));
    sp_matrix m = { c->w, c->t, c->n_in, c->n_out, NULL };
    sp_matrix_get_row(&m, o, wd);
    double s = 0;
    for (int64_t i = 0; i < c->n_in; i++) s += fabs((double)wd[i] * c->x[(size_t)r * c->n_in + i]);
    free(wd);
    return s;
}

static void check_simd_vs_scalar(const mm_case *c, const char *what) {
    const size_t ny = (size_t)c->n_rows * (size_t)c->n_out;
    float *ys = malloc(ny * sizeof(float)), *yv = malloc(ny * sizeof(float));
    mm_run(c, SP_SIMD_SCALAR, 1, c->x, c->n_rows, ys);
    mm_run(c, SP_SIMD_AVX2, 2, c->x, c->n_rows, yv);
    for (int r = 0; r < c->n_rows; r++) {
        for (int64_t o = 0; o < c->n_out; o++) {
            const float a = ys[(size_t)r * c->n_out + o], b = yv[(size_t)r * c->n_out + o];
            if (!isfinite(a) || !isfinite(b)) fail_msg("%s %s: non-finite %g %g", what, sp_dtype_name(c->t), a, b);
            if (a == b) continue;
            /* Activations quantize identically: only the order of the float
             * sums differs (plus F16 products in float instead of double). */
            const double tol = 1e-5 * mm_abs_scale(c, r, o) + 1e-30;
            if (!(fabs((double)a - b) <= tol))
                fail_msg("%s %s n_in=%lld row %d out %lld: scalar %.9g simd %.9g (tol %.3g)", what,
                         sp_dtype_name(c->t), (long long)c->n_in, r, (long long)o, a, b, tol);
        }
    }
    free(ys); free(yv);
}

static int64_t block_of(uint32_t t) {
    const uint32_t at = sp_act_type(t);
    const int64_t a = sp_dtype_get(t)->block, b = sp_dtype_get(at)->block;
    return a > b ? a : b;
}

static void test_matmul_simd_vs_scalar(void **state) {
    (void)state;
    if (!have_avx2()) { assert_int_equal(sp_kernels_set_simd(SP_SIMD_AVX2), -1); return; }
    for (size_t k = 0; k < K_NT; k++) {
        const uint32_t t = k_types[k];
        const int64_t bk = block_of(t);
        /* 1, 3, 7, 17 blocks (and 129 for the 32-blocks: more than one panel
         * group of 8, odd); float types also odd element counts. */
        const int64_t ns[] = {bk, 3 * bk, 7 * bk, 17 * bk, bk == 32 ? 129 * bk : 2 * bk, bk == 1 ? 13 : bk,
                              bk == 1 ? 101 : bk};
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            for (int sk = 0; sk < 3; sk++) {
                mm_case c;
                /* activation kinds of make_act_row except 4 (1e30: fp16
                 * scales overflow to inf, so there is nothing to compare) */
                static const int kinds[] = {0, 1, 2, 3, 5, 6, 7};
                mm_case_init(&c, t, ns[ni], 37, 1 + (int)(ni % 5), sk, kinds[(ni + (size_t)sk) % 7],
                             1000 * k + ni * 10 + (size_t)sk);
                char what[48];
                snprintf(what, sizeof what, "scales %d", sk);
                check_simd_vs_scalar(&c, what);
                mm_case_free(&c);
            }
        }
    }
}

/* Long rows: more than one SIMD segment (4096 elements). */
static void test_matmul_long_rows(void **state) {
    (void)state;
    if (!have_avx2()) return;
    const uint32_t ts[] = {SP_Q4_1, SP_Q5_0, SP_Q8_0, SP_Q4_K, SP_Q6_K, SP_F16};
    for (size_t k = 0; k < sizeof ts / sizeof *ts; k++) {
        mm_case c;
        mm_case_init(&c, ts[k], 9216, 5, 3, 0, 0, 77 + k);
        check_simd_vs_scalar(&c, "long");
        mm_case_free(&c);
    }
}

/* The packable types. */
static const uint32_t k_packed[] = {SP_Q4_1, SP_Q5_0, SP_Q8_0};
#define K_NP (sizeof k_packed / sizeof *k_packed)

/* Row r of a pass of n rows equals the same row multiplied alone, bit for
 * bit, for n = 1..17 and 1 or 2 threads, on every level; with pack, for
 * the packable types packed (24 outputs: three groups of 8 rows). */
static void check_batch_invariance(sp_simd level, bool pack) {
    const size_t nt = pack ? K_NP : K_NT;
    const int64_t n_out = pack ? 24 : 13;
    for (size_t k = 0; k < nt; k++) {
        const uint32_t t = pack ? k_packed[k] : k_types[k];
        const int64_t n_in = block_of(t) == 1 ? 100 : (block_of(t) == 32 ? (pack ? 37 : 9) * 32 : 2 * 256);
        mm_case c;
        mm_case_init(&c, t, n_in, n_out, 17, 0, 0, 500 + k);
        if (pack) mm_case_pack(&c);
        const size_t no = (size_t)n_out;
        float *one = malloc(17 * no * sizeof(float)), *many = malloc(17 * no * sizeof(float));
        for (int r = 0; r < 17; r++) mm_run(&c, level, 1, c.x + (size_t)r * n_in, 1, one + r * no);
        for (int n = 1; n <= 17; n++) {
            for (int th = 1; th <= 2; th++) {
                mm_run(&c, level, th, c.x, n, many);
                if (memcmp(one, many, (size_t)n * no * sizeof(float)) != 0)
                    fail_msg("%s %s%s: %d rows, %d threads differ from single rows", sp_kernels_describe(),
                             sp_dtype_name(t), pack ? " packed" : "", n, th);
            }
        }
        free(one); free(many);
        mm_case_free(&c);
    }
}

/* Prefill-sized calls: 70 rows at once (K-quant kernels take 64 rows per
 * unpacked panel, the others 16) give every row exactly its single-row
 * result, on every SIMD level. */
static void test_batch_invariance_wide(void **state) {
    (void)state;
    static const uint32_t ts[] = {SP_Q4_K, SP_Q5_K, SP_Q6_K, SP_Q8_0};
    const sp_simd levels[] = {SP_SIMD_AVX2, SP_SIMD_VNNI, SP_SIMD_AVX512};
    const int rows = 70;
    for (size_t k = 0; k < sizeof ts / sizeof *ts; k++) {
        mm_case c;
        mm_case_init(&c, ts[k], 512, 9, rows, 0, 0, 1300 + k);
        float *one = malloc((size_t)rows * 9 * sizeof(float)), *many = malloc((size_t)rows * 9 * sizeof(float));
        for (size_t li = 0; li < sizeof levels / sizeof *levels; li++) {
            if (!sp_kernels_simd_supported(levels[li])) continue;
            for (int r = 0; r < rows; r++) mm_run(&c, levels[li], 1, c.x + (size_t)r * 512, 1, one + r * 9);
            mm_run(&c, levels[li], 2, c.x, rows, many);
            if (memcmp(one, many, (size_t)rows * 9 * sizeof(float)) != 0)
                fail_msg("%s %s: %d rows at once differ from single rows", sp_kernels_describe(),
                         sp_dtype_name(ts[k]), rows);
        }
        free(one); free(many);
        mm_case_free(&c);
    }
}

static void test_batch_invariance_scalar(void **state) {
    (void)state;
    check_batch_invariance(SP_SIMD_SCALAR, false);
    check_batch_invariance(SP_SIMD_SCALAR, true);
}

static void test_batch_invariance_simd(void **state) {
    (void)state;
    if (!have_avx2()) { assert_int_equal(sp_kernels_set_simd(SP_SIMD_AVX2), -1); return; }
    check_batch_invariance(SP_SIMD_AVX2, false);
    check_batch_invariance(SP_SIMD_AVX2, true);
    if (have_vnni()) check_batch_invariance(SP_SIMD_VNNI, true);
    if (have_avx512()) check_batch_invariance(SP_SIMD_AVX512, true);
}

/* ------------------------------------------------------------------------
 * Packed matrices
 * ---------------------------------------------------------------------- */
static void test_pack_shapes(void **state) {
    (void)state;
    assert_true(sp_matrix_packable(SP_Q4_1, 576, 1536));
    assert_true(sp_matrix_packable(SP_Q8_0, 32, 8));
    assert_true(sp_matrix_packable(SP_Q5_0, 640, 256));
    assert_false(sp_matrix_packable(SP_Q4_1, 576, 12));         /* rows not a multiple of 8 */
    assert_false(sp_matrix_packable(SP_Q8_0, 576, 0));
    assert_false(sp_matrix_packable(SP_Q4_0, 576, 64));         /* type without packed kernels */
    assert_false(sp_matrix_packable(SP_Q6_K, 512, 64));
    assert_false(sp_matrix_packable(SP_Q4_1, 40, 64));          /* not whole blocks */
    assert_false(sp_matrix_packable(SP_Q4_1, SP_PACK_MAX_IN + 32, 64));
    assert_true(sp_matrix_packable(SP_Q4_1, SP_PACK_MAX_IN, 64));
}

/* Packing moves bytes only: every row unpacks to its original blocks, and
 * a row read from the packed matrix has the same floats. */
static void test_pack_roundtrip(void **state) {
    (void)state;
    for (size_t k = 0; k < K_NP; k++) {
        mm_case c;
        mm_case_init(&c, k_packed[k], 5 * 32, 32, 1, 0, 0, 900 + k);
        mm_case_pack(&c);
        const sp_matrix plain = { c.w, c.t, c.n_in, c.n_out, NULL };
        const sp_matrix packed = { c.w, c.t, c.n_in, c.n_out, c.packed };
        assert_true(memcmp(c.w, c.packed, sp_matrix_packed_bytes(&plain)) != 0);  /* it did move */
        const size_t rb = (size_t)sp_dtype_row_bytes(c.t, (uint64_t)c.n_in);
        uint8_t *row = malloc(rb);
        float *a = malloc((size_t)c.n_in * sizeof(float)), *b = malloc((size_t)c.n_in * sizeof(float));
        for (int64_t o = 0; o < c.n_out; o++) {
            sp_matrix_unpack_row(&packed, o, row);
            assert_memory_equal(row, c.w + (size_t)o * rb, rb);
            sp_matrix_get_row(&plain, o, a);
            sp_matrix_get_row(&packed, o, b);
            assert_memory_equal(a, b, (size_t)c.n_in * sizeof(float));
        }
        free(row); free(a); free(b);
        mm_case_free(&c);
    }
}

/* Packing rows [r0, r0 + n) writes exactly the byte range of those rows:
 * the loader packs large matrices in slices (releasing each source slice),
 * so slices in any order must give the bytes of one whole pack, and a
 * slice must not touch bytes outside its range. */
static void test_pack_rows_slices(void **state) {
    (void)state;
    for (size_t k = 0; k < K_NP; k++) {
        mm_case c;
        mm_case_init(&c, k_packed[k], 3 * 32, 40, 1, 0, 0, 950 + k);
        mm_case_pack(&c);
        const sp_matrix w = { c.w, c.t, c.n_in, c.n_out, NULL };
        const size_t rb = (size_t)sp_dtype_row_bytes(c.t, (uint64_t)c.n_in), all = rb * (size_t)c.n_out;
        uint8_t *dst = malloc(all);
        memset(dst, 0xA5, all);
        sp_matrix_pack_rows(&w, dst, 16, 16);                   /* a middle slice first */
        for (size_t i = 0; i < all; i++)
            if (i < 16 * rb || i >= 32 * rb) assert_int_equal(dst[i], 0xA5);
        assert_memory_equal(dst + 16 * rb, (uint8_t *)c.packed + 16 * rb, 16 * rb);
        sp_matrix_pack_rows(&w, dst, 32, 8);                    /* the last, then the first */
        sp_matrix_pack_rows(&w, dst, 0, 16);
        assert_memory_equal(dst, c.packed, all);
        free(dst);
        mm_case_free(&c);
    }
}

/* Packed matmul: the portable path gives exactly the unpacked portable
 * result; the SIMD kernel agrees with it within float tolerance, for 1..65
 * blocks (more than one panel segment of 32), 1..17 rows, all scale kinds,
 * 1 and 2 threads. */
static void test_packed_matmul(void **state) {
    (void)state;
    const int64_t nbs[] = {1, 3, 17, 33, 65};
    for (size_t k = 0; k < K_NP; k++) {
        for (size_t ni = 0; ni < sizeof nbs / sizeof *nbs; ni++) {
            for (int sk = 0; sk < 3; sk++) {
                static const int kinds[] = {0, 1, 2, 3, 5, 6, 7};
                const int rows = 1 + (int)((ni * 3 + (size_t)sk * 7) % 17);
                mm_case c;
                mm_case_init(&c, k_packed[k], nbs[ni] * 32, 40, rows, sk, kinds[(ni + (size_t)sk) % 7],
                             700 + 100 * k + ni * 10 + (size_t)sk);
                const size_t ny = (size_t)rows * 40;
                float *yu = malloc(ny * sizeof(float)), *yp = malloc(ny * sizeof(float));
                mm_run(&c, SP_SIMD_SCALAR, 1, c.x, rows, yu);
                mm_case_pack(&c);
                mm_run(&c, SP_SIMD_SCALAR, 2, c.x, rows, yp);
                if (memcmp(yu, yp, ny * sizeof(float)) != 0)
                    fail_msg("%s packed portable != unpacked portable (%lld blocks)", sp_dtype_name(c.t),
                             (long long)nbs[ni]);
                if (have_avx2()) check_simd_vs_scalar(&c, "packed");
                /* dpbusd (256- or 512-bit) gives the same exact integer
                 * sums: bit-identical to AVX2 */
                static const sp_simd dp[] = {SP_SIMD_VNNI, SP_SIMD_AVX512};
                for (size_t di = 0; di < 2 && have_avx2(); di++) {
                    if (!sp_kernels_simd_supported(dp[di])) continue;
                    mm_run(&c, SP_SIMD_AVX2, 1, c.x, rows, yu);
                    mm_run(&c, dp[di], 2, c.x, rows, yp);
                    if (memcmp(yu, yp, ny * sizeof(float)) != 0)
                        fail_msg("%s packed: level %d != avx2 (%lld blocks, %d rows)", sp_dtype_name(c.t),
                                 (int)dp[di], (long long)nbs[ni], rows);
                }
                free(yu); free(yp);
                mm_case_free(&c);
            }
        }
    }
}

/* The AVX-512 level's K-quant kernels (two sub-blocks a step) give the
 * AVX2 kernels' results bit for bit: 1..17 rows (chunks of 4, 3, 2, 1),
 * rows longer than one panel segment (4096 elements), all scale kinds. */
static void test_kquant_avx512(void **state) {
    (void)state;
    if (!have_avx512()) { return; }
    static const uint32_t kq[] = {SP_Q4_K, SP_Q5_K, SP_Q6_K};
    const int64_t ns[] = {256, 768, 4352};
    for (size_t k = 0; k < 3; k++) {
        for (size_t ni = 0; ni < 3; ni++) {
            for (int rows = 1; rows <= 17; rows += 2 + (int)ni) {
                mm_case c;
                mm_case_init(&c, kq[k], ns[ni], 12, rows, rows % 3, rows % 7, 1100 + 10 * k + ni);
                const size_t ny = (size_t)rows * 12;
                float *ya = malloc(ny * sizeof(float)), *yz = malloc(ny * sizeof(float));
                mm_run(&c, SP_SIMD_AVX2, 1, c.x, rows, ya);
                mm_run(&c, SP_SIMD_AVX512, 2, c.x, rows, yz);
                if (memcmp(ya, yz, ny * sizeof(float)) != 0)
                    fail_msg("%s n_in=%lld %d rows: avx512 != avx2", sp_dtype_name(c.t), (long long)ns[ni], rows);
                free(ya); free(yz);
                mm_case_free(&c);
            }
        }
    }
}

/* sp_matmul_many gives each matrix exactly sp_matmul's output, at every
 * level and thread count: matrices that share one prepared activation
 * form (two Q4_1; Q5_0 and Q8_0), ones that need their own (Q4_0 beside
 * Q4_1, Q4_K, Q6_K), float weights, packed and unpacked ones mixed. */
static void test_matmul_many(void **state) {
    (void)state;
    static const uint32_t sets[][SP_MATMUL_MAX] = {
        {SP_Q4_1, SP_Q4_1, SP_Q4_0, SP_Q4_K}, {SP_Q5_0, SP_Q8_0, SP_Q5_0, SP_F32}, {SP_Q8_0, SP_F16, SP_Q6_K, SP_Q4_1}};
    const sp_simd levels[] = {SP_SIMD_SCALAR, SP_SIMD_AVX2, SP_SIMD_VNNI, SP_SIMD_AVX512};
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        for (int rows = 1; rows <= 17; rows += 8) {
            mm_case c[SP_MATMUL_MAX];
            const int64_t n_in = 256, outs[] = {40, 24, 64, 16};
            for (int i = 0; i < SP_MATMUL_MAX; i++) {
                mm_case_init(&c[i], sets[si][i], n_in, outs[i], rows, 0, 0, 900 + 10 * si + (size_t)i);
                memcpy(c[i].x, c[0].x, (size_t)rows * n_in * sizeof(float));   /* one input for all */
                if (i % 2 == 0 && sp_matrix_packable(c[i].t, n_in, outs[i])) mm_case_pack(&c[i]);
            }
            for (size_t li = 0; li < sizeof levels / sizeof *levels; li++) {
                if (!sp_kernels_simd_supported(levels[li])) continue;
                for (int threads = 1; threads <= 2; threads++) {
                    sp_matrix m[SP_MATMUL_MAX];
                    const sp_matrix *mp[SP_MATMUL_MAX];
                    float *y[SP_MATMUL_MAX], *ref[SP_MATMUL_MAX];
                    for (int i = 0; i < SP_MATMUL_MAX; i++) {
                        m[i] = (sp_matrix){ c[i].w, c[i].t, n_in, outs[i], c[i].packed };
                        mp[i] = &m[i];
                        y[i] = malloc((size_t)rows * outs[i] * sizeof(float));
                        ref[i] = malloc((size_t)rows * outs[i] * sizeof(float));
                        mm_run(&c[i], levels[li], threads, c[0].x, rows, ref[i]);
                    }
                    assert_int_equal(sp_kernels_set_simd(levels[li]), 0);
                    void *scratch = sp_alloc_aligned(sp_matmul_many_scratch_bytes(mp, SP_MATMUL_MAX, rows));
                    sp_pool *pool = threads > 1 ? sp_pool_create(threads) : NULL;
                    sp_matmul_many(mp, c[0].x, rows, y, SP_MATMUL_MAX, scratch, pool);
                    sp_pool_free(pool);
                    sp_free_aligned(scratch);
                    for (int i = 0; i < SP_MATMUL_MAX; i++) {
                        if (memcmp(y[i], ref[i], (size_t)rows * outs[i] * sizeof(float)) != 0)
                            fail_msg("matmul_many: %s (set %zu, level %d, %d threads, %d rows) != sp_matmul",
                                     sp_dtype_name(c[i].t), si, (int)levels[li], threads, rows);
                        free(y[i]); free(ref[i]);
                    }
                }
            }
            for (int i = 0; i < SP_MATMUL_MAX; i++) mm_case_free(&c[i]);
        }
    }
}

/* ------------------------------------------------------------------------
 * Vector operations and attention
 * ---------------------------------------------------------------------- */
static void fill(float *x, int n, float scale, uint64_t seed) {
    sp_rng r = {seed};
    for (int i = 0; i < n; i++) x[i] = urand(&r) * scale;
}

static void assert_close(const float *a, const float *b, int n, double rel, double abs_tol, const char *what) {
    for (int i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        if (!(fabs((double)a[i] - b[i]) <= rel * fabs((double)a[i]) + abs_tol))
            fail_msg("%s[%d]: scalar %.9g simd %.9g", what, i, a[i], b[i]);
    }
}

/* sp_argmax: the scalar loop's index on every level, for random rows of
 * every tail length and the edge cases (ties, NaN first or inside, all
 * -inf, signed zeros, the maximum in the tail). */
static int argmax_ref(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void check_argmax(const float *x, int n, const char *what) {
    const int want = argmax_ref(x, n);
    const sp_simd levels[] = { SP_SIMD_SCALAR, SP_SIMD_AVX2 };
    for (int l = 0; l < 2; l++) {
        if (levels[l] != SP_SIMD_SCALAR && !have_avx2()) continue;
        sp_kernels_set_simd(levels[l]);
        const int got = sp_argmax(x, n);
        if (got != want) fail_msg("argmax %s (n %d, level %d): %d, want %d", what, n, l, got, want);
    }
}

static void test_argmax(void **state) {
    (void)state;
    float x[300];
    sp_rng r = { 77 };
    for (int n = 1; n <= 40; n++) {
        for (int i = 0; i < n; i++) x[i] = urand(&r);
        check_argmax(x, n, "random");
        for (int i = 0; i < n; i++) x[i] = (float)(int)(urand(&r) * 3);   /* many ties */
        check_argmax(x, n, "ties");
    }
    for (int i = 0; i < 300; i++) x[i] = -INFINITY;
    check_argmax(x, 300, "all -inf");
    x[299] = -1e30f;
    check_argmax(x, 300, "last in the tail");
    x[0] = NAN;
    x[100] = 5;
    check_argmax(x, 300, "NaN first");
    assert_int_equal(sp_argmax(x, 300), 0);
    x[0] = 1;
    x[50] = NAN;
    x[100] = NAN;
    x[200] = 4;
    check_argmax(x, 300, "NaN inside");
    assert_int_equal(sp_argmax(x, 300), 200);
    for (int i = 0; i < 300; i++) x[i] = -1;
    x[20] = -0.0f;
    x[30] = 0.0f;
    check_argmax(x, 300, "signed zeros");
    assert_int_equal(sp_argmax(x, 300), 20);
}

static void test_ops_simd_vs_scalar(void **state) {
    (void)state;
    if (!have_avx2()) return;
    const int ns[] = {1, 7, 8, 9, 64, 100, 576, 2049};
    float *x = malloc(4096 * sizeof(float)), *w = malloc(4096 * sizeof(float));
    float *a = malloc(4096 * sizeof(float)), *b = malloc(4096 * sizeof(float));
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        const int n = ns[k];
        fill(x, n, 3.0f, 10 + k);
        fill(w, n, 1.0f, 20 + k);
        /* RMSNorm: the sum of squares in another order: ~1 ulp. */
        for (int with_w = 0; with_w < 2; with_w++) {
            sp_kernels_set_simd(SP_SIMD_SCALAR);
            sp_rmsnorm(a, x, with_w ? w : NULL, n, 1e-6f);
            sp_kernels_set_simd(SP_SIMD_AVX2);
            sp_rmsnorm(b, x, with_w ? w : NULL, n, 1e-6f);
            assert_close(a, b, n, 1e-6, 0, "rmsnorm");
        }
        /* softmax over a wide range (scores of -30..30). */
        fill(x, n, 30.0f, 30 + k);
        memcpy(a, x, (size_t)n * sizeof(float));
        memcpy(b, x, (size_t)n * sizeof(float));
        sp_kernels_set_simd(SP_SIMD_SCALAR);
        sp_softmax(a, n);
        sp_kernels_set_simd(SP_SIMD_AVX2);
        sp_softmax(b, n);
        assert_close(a, b, n, 1e-6, 1e-30, "softmax");
        /* SwiGLU (exp approximation: a few ulp), GeGLU and the elementwise
         * ones bit-exact. */
        fill(x, n, 12.0f, 40 + k);
        fill(w, n, 2.0f, 50 + k);
        sp_kernels_set_simd(SP_SIMD_SCALAR);
        sp_swiglu(a, x, w, n);
        sp_kernels_set_simd(SP_SIMD_AVX2);
        sp_swiglu(b, x, w, n);
        assert_close(a, b, n, 1e-6, 1e-30, "swiglu");
        sp_kernels_set_simd(SP_SIMD_SCALAR);
        sp_geglu(a, x, w, n);
        sp_kernels_set_simd(SP_SIMD_AVX2);
        sp_geglu(b, x, w, n);
        assert_memory_equal(a, b, (size_t)n * sizeof(float));
        memcpy(a, x, (size_t)n * sizeof(float));
        memcpy(b, x, (size_t)n * sizeof(float));
        sp_kernels_set_simd(SP_SIMD_SCALAR);
        sp_vec_add(a, w, n);
        sp_vec_scale(a, 0.37f, n);
        sp_kernels_set_simd(SP_SIMD_AVX2);
        sp_vec_add(b, w, n);
        sp_vec_scale(b, 0.37f, n);
        assert_memory_equal(a, b, (size_t)n * sizeof(float));
    }
    free(x); free(w); free(a); free(b);
}

/* GeGLU is a table of the portable function: equal on every F16 value and
 * around the +-10 clamps. */
static void test_geglu_all_f16(void **state) {
    (void)state;
    if (!have_avx2()) return;
    float *g = malloc(65536 * sizeof(float) + 64), *u = malloc(65536 * sizeof(float) + 64);
    float *a = malloc(65536 * sizeof(float) + 64), *b = malloc(65536 * sizeof(float) + 64);
    int n = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float v = sp_f16_to_f32((sp_f16)h);
        if (isnan(v)) continue;
        g[n] = v;
        u[n++] = 1.5f;
    }
    const float edges[] = {9.999f, 9.9999990f, 10.0f, 10.001f, -9.999f, -9.9999990f, -10.0f, -10.001f, 1e-8f, -1e-8f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) { g[n] = edges[i]; u[n++] = -0.75f; }
    sp_kernels_set_simd(SP_SIMD_SCALAR);
    sp_geglu(a, g, u, n);
    sp_kernels_set_simd(SP_SIMD_AVX2);
    sp_geglu(b, g, u, n);
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) fail_msg("geglu(%.9g): scalar %.9g simd %.9g", g[i], a[i], b[i]);
    free(g); free(u); free(a); free(b);
}

/* The vectorised exp: relative error <= 3e-7 against the double exp over
 * [-87, 88.7], and the special values. */
static void test_exp_accuracy(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (!have_avx2()) return;
    enum { N = 200003 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) x[i] = -87.0f + (88.7f + 87.0f) * (float)i / (float)(N - 1);
    sp_avx2_exp_row(y, x, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        const double want = exp((double)x[i]), rel = fabs(y[i] - want) / want;
        if (rel > worst) worst = rel;
    }
    if (!(worst <= 3e-7)) fail_msg("exp: worst relative error %.3g", worst);
    const float sx[] = {-INFINITY, -100.0f, 0.0f, 89.0f, INFINITY, NAN};
    float sy[6];
    sp_avx2_exp_row(sy, sx, 6);
    assert_true(sy[0] == 0.0f && sy[1] == 0.0f && sy[2] == 1.0f);
    assert_true(isinf(sy[3]) && sy[3] > 0 && isinf(sy[4]) && sy[4] > 0);
    assert_true(isnan(sy[5]));
    free(x); free(y);
#endif
}

static void test_attention_simd_vs_scalar(void **state) {
    (void)state;
    if (!have_avx2()) return;
    const int hds[] = {20, 64, 256};
    for (size_t k = 0; k < sizeof hds / sizeof *hds; k++) {
        const int hd = hds[k], n_pos = 300;
        const size_t stride = (size_t)hd * 3; /* 3 KV heads interleaved */
        sp_f16 *kc = malloc((size_t)n_pos * stride * sizeof(sp_f16)), *vc = malloc((size_t)n_pos * stride * sizeof(sp_f16));
        sp_rng r = {k + 1};
        for (size_t i = 0; i < (size_t)n_pos * stride; i++) {
            kc[i] = sp_f32_to_f16(urand(&r) * 2.0f);
            vc[i] = sp_f32_to_f16(urand(&r));
        }
        float q[256], a[256], b[256], scores[300];
        fill(q, hd, 1.0f, 90 + k);
        const int ranges[][2] = {{0, 1}, {0, 3}, {5, 6}, {0, 299}, {17, 300}, {100, 131}};
        for (size_t ri = 0; ri < sizeof ranges / sizeof *ranges; ri++)
        for (int lv = 0; lv < (have_avx512() ? 2 : 1); lv++) {
            const sp_f16 *kh = kc + hd, *vh = vc + hd; /* KV head 1 */
            sp_kernels_set_simd(SP_SIMD_SCALAR);
            sp_attn_head(a, q, kh, vh, stride, hd, ranges[ri][0], ranges[ri][1], 0.125f, scores);
            sp_kernels_set_simd(lv ? SP_SIMD_AVX512 : SP_SIMD_AVX2);   /* AVX-512: its own 16-lane kernel */
            sp_attn_head(b, q, kh, vh, stride, hd, ranges[ri][0], ranges[ri][1], 0.125f, scores);
            /* Scores summed in another order; the probabilities are rounded
             * to F16, so a score 1 ulp apart can move one probability by an
             * F16 ulp: a few 1e-4 absolute on outputs of magnitude <= 1. */
            assert_close(a, b, hd, 1e-3, 1e-3, "attention");
            /* out may alias q */
            float qq[256];
            memcpy(qq, q, sizeof qq);
            sp_attn_head(qq, qq, kh, vh, stride, hd, ranges[ri][0], ranges[ri][1], 0.125f, scores);
            assert_memory_equal(qq, b, (size_t)hd * sizeof(float));
        }
        free(kc); free(vc);
    }
}

/* A group of heads gives each head exactly sp_attn_head's result, for
 * every group size (1..9 covers the 8-head split) and on every level; a
 * key list equal to a range gives the range's result (tree verification
 * rows against chain rows).  Head sizes 24 and 72 leave a partial vector
 * on both SIMD widths; key counts cover the 4-key blocks and their tails. */
static void test_attention_groups(void **state) {
    (void)state;
    const int hds[] = { 24, 72 }, n_pos = 70, nq_max = 9;
    for (size_t hi_d = 0; hi_d < sizeof hds / sizeof *hds; hi_d++) {
        const int hd = hds[hi_d];
        const size_t stride = (size_t)hd * 2;
        sp_f16 *kc = malloc((size_t)n_pos * stride * sizeof(sp_f16)), *vc = malloc((size_t)n_pos * stride * sizeof(sp_f16));
        sp_rng r = {99};
        for (size_t i = 0; i < (size_t)n_pos * stride; i++) {
            kc[i] = sp_f32_to_f16(urand(&r) * 2.0f);
            vc[i] = sp_f32_to_f16(urand(&r));
        }
        float *q = malloc(sizeof(float) * 9 * 72), *one = malloc(sizeof(float) * 9 * 72);
        float *grp = malloc(sizeof(float) * 9 * 72), *scores = malloc(sizeof(float) * 9 * 70);
        int32_t idx[70];
        fill(q, nq_max * hd, 1.0f, 7);
        const sp_simd levels[] = { SP_SIMD_SCALAR, SP_SIMD_AVX2, SP_SIMD_AVX512 };
        for (size_t li = 0; li < sizeof levels / sizeof *levels; li++) {
            if (!sp_kernels_simd_supported(levels[li])) continue;
            sp_kernels_set_simd(levels[li]);
            for (int nq = 1; nq <= nq_max; nq++) {
                for (int lo = 0; lo <= 3; lo += 3) {
                    const int hi = n_pos - (nq % 4);
                    for (int h = 0; h < nq; h++)
                        sp_attn_head(one + h * hd, q + h * hd, kc + hd, vc + hd, stride, hd, lo, hi, 0.2f, scores);
                    sp_attn_heads(grp, q, nq, kc + hd, vc + hd, stride, hd, lo, hi, 0.2f, scores);
                    if (memcmp(one, grp, (size_t)nq * hd * sizeof(float)) != 0)
                        fail_msg("%s: group of %d heads differs from single heads", sp_kernels_describe(), nq);
                    for (int j = 0; j < hi - lo; j++) idx[j] = lo + j;
                    sp_attn_heads_idx(grp, q, nq, kc + hd, vc + hd, stride, hd, idx, hi - lo, 0.2f, scores);
                    if (memcmp(one, grp, (size_t)nq * hd * sizeof(float)) != 0)
                        fail_msg("%s: a key list of %d heads differs from its range", sp_kernels_describe(), nq);
                }
            }
        }
        free(kc); free(vc); free(q); free(one); free(grp); free(scores);
    }
}

/* Attention over quantized K/V rows (sp_attn_heads_q): on every level a
 * group of heads gives each head its result alone and a key list equal to
 * a range gives the range's result, bit for bit; the levels agree within
 * rounding, and both agree with attention in double over the dequantized
 * rows (the query through Q8_0 against quantized keys, as documented). */
static void test_attention_quant(void **state) {
    (void)state;
    const uint32_t kinds[][2] = { { SP_Q8_0, SP_Q8_0 }, { SP_Q4_0, SP_Q4_0 }, { SP_F16, SP_Q8_0 },
                                  { SP_Q8_0, SP_F16 }, { SP_Q4_0, SP_Q8_0 } };
    const int hds[] = { 64, 256 }, n_pos = 90, NQ = 4;
    for (size_t hi_ = 0; hi_ < 2; hi_++)
        for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++) {
            const int hd = hds[hi_];
            const uint32_t tk = kinds[ki][0], tv = kinds[ki][1];
            const size_t rk = tk == SP_F16 ? (size_t)hd * 2 : (size_t)hd / 32 * (tk == SP_Q8_0 ? 34 : 18);
            const size_t rv = tv == SP_F16 ? (size_t)hd * 2 : (size_t)hd / 32 * (tv == SP_Q8_0 ? 34 : 18);
            uint8_t *kc = malloc((size_t)n_pos * rk), *vc = malloc((size_t)n_pos * rv);
            float *kf = malloc((size_t)n_pos * hd * sizeof(float)), *vf = malloc((size_t)n_pos * hd * sizeof(float));
            float row[256];
            for (int p = 0; p < n_pos; p++) {
                fill(row, hd, 2.0f, 1000 + p);
                if (tk == SP_F16) for (int d = 0; d < hd; d++) ((sp_f16 *)(void *)(kc + p * rk))[d] = sp_f32_to_f16(row[d]);
                else sp_quantize_row(tk, row, kc + p * rk, hd);
                sp_dequantize_row(tk == SP_F16 ? SP_F16 : tk, kc + p * rk, kf + (size_t)p * hd, hd);
                fill(row, hd, 1.0f, 5000 + p);
                if (tv == SP_F16) for (int d = 0; d < hd; d++) ((sp_f16 *)(void *)(vc + p * rv))[d] = sp_f32_to_f16(row[d]);
                else sp_quantize_row(tv, row, vc + p * rv, hd);
                sp_dequantize_row(tv == SP_F16 ? SP_F16 : tv, vc + p * rv, vf + (size_t)p * hd, hd);
            }
            float q[4 * 256], grp[4 * 256], one[4 * 256], lst[4 * 256], lvl[2][4 * 256], scores[4 * 90];
            fill(q, NQ * hd, 1.0f, 77 + ki);
            int32_t idx[90];
            const int lo = 7, n = n_pos - lo;
            for (int j = 0; j < n; j++) idx[j] = lo + j;
            for (int level = 0; level <= (have_avx2() ? 1 : 0); level++) {
                sp_kernels_set_simd(level ? SP_SIMD_AVX2 : SP_SIMD_SCALAR);
                sp_attn_heads_q(grp, q, NQ, kc, tk, rk, vc, tv, rv, hd, lo, NULL, n, 0.125f, scores);
                for (int h = 0; h < NQ; h++)
                    sp_attn_heads_q(one + h * hd, q + h * hd, 1, kc, tk, rk, vc, tv, rv, hd, lo, NULL, n, 0.125f, scores);
                sp_attn_heads_q(lst, q, NQ, kc, tk, rk, vc, tv, rv, hd, 0, idx, n, 0.125f, scores);
                if (memcmp(grp, one, (size_t)NQ * hd * sizeof(float)) || memcmp(grp, lst, (size_t)NQ * hd * sizeof(float)))
                    fail_msg("%s, hd %d, types %u/%u: grouping or a key list changed a result", sp_kernels_describe(),
                             hd, tk, tv);
                memcpy(lvl[level], grp, sizeof grp);
            }
            if (have_avx2()) assert_close(lvl[0], lvl[1], NQ * hd, 1e-3, 1e-3, "quantized attention");
            /* the reference in double over dequantized rows */
            for (int h = 0; h < NQ; h++) {
                float qx[256];
                if (tk == SP_F16) for (int d = 0; d < hd; d++) qx[d] = sp_f16_to_f32(sp_f32_to_f16(q[h * hd + d]));
                else {
                    uint8_t qb[8 * 34];
                    sp_quantize_act_row(SP_Q8_0, q + h * hd, qb, hd);
                    sp_dequantize_row(SP_Q8_0, qb, qx, hd);
                }
                double s[90], mx = -1e30, sum = 0;
                for (int j = 0; j < n; j++) {
                    s[j] = 0;
                    for (int d = 0; d < hd; d++) s[j] += (double)qx[d] * kf[(size_t)(lo + j) * hd + d];
                    s[j] *= 0.125;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j < n; j++) sum += exp(s[j] - mx);
                float ref[256];
                for (int d = 0; d < hd; d++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += exp(s[j] - mx) / sum * vf[(size_t)(lo + j) * hd + d];
                    ref[d] = (float)o;
                }
                assert_close(ref, lvl[0] + h * hd, hd, 2e-3, 2e-3, "quantized attention vs double");
            }
            free(kc); free(vc); free(kf); free(vf);
        }
}

/* The RoPE table path is bit-identical to sp_rope. */
static void test_rope_table(void **state) {
    (void)state;
    const int n_rots[] = {64, 32, 256};
    const float bases[] = {10000.0f, 1e6f, 100000.0f};
    float a[256], b[256], cs[256];
    for (int k = 0; k < 3; k++) {
        for (int neox = 0; neox < 2; neox++) {
            for (int pos = 0; pos < 5000; pos += 777) {
                const int hd = n_rots[k] == 32 ? 64 : n_rots[k];
                fill(a, hd, 2.0f, (uint64_t)pos + 1);
                memcpy(b, a, sizeof a);
                sp_rope(a, hd, n_rots[k], pos, bases[k], neox);
                sp_rope_table(cs, n_rots[k], pos, bases[k]);
                sp_rope_apply(b, cs, n_rots[k], neox);
                assert_memory_equal(a, b, (size_t)hd * sizeof(float));
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_dispatch, teardown),
        cmocka_unit_test_teardown(test_select, teardown),
        cmocka_unit_test_teardown(test_act_prepare_exact, teardown),
        cmocka_unit_test_teardown(test_matmul_simd_vs_scalar, teardown),
        cmocka_unit_test_teardown(test_matmul_long_rows, teardown),
        cmocka_unit_test_teardown(test_batch_invariance_scalar, teardown),
        cmocka_unit_test_teardown(test_batch_invariance_simd, teardown),
        cmocka_unit_test_teardown(test_batch_invariance_wide, teardown),
        cmocka_unit_test_teardown(test_pack_shapes, teardown),
        cmocka_unit_test_teardown(test_pack_roundtrip, teardown),
        cmocka_unit_test_teardown(test_pack_rows_slices, teardown),
        cmocka_unit_test_teardown(test_packed_matmul, teardown),
        cmocka_unit_test_teardown(test_matmul_many, teardown),
        cmocka_unit_test_teardown(test_kquant_avx512, teardown),
        cmocka_unit_test_teardown(test_ops_simd_vs_scalar, teardown),
        cmocka_unit_test_teardown(test_argmax, teardown),
        cmocka_unit_test_teardown(test_geglu_all_f16, teardown),
        cmocka_unit_test_teardown(test_exp_accuracy, teardown),
        cmocka_unit_test_teardown(test_attention_simd_vs_scalar, teardown),
        cmocka_unit_test_teardown(test_attention_groups, teardown),
        cmocka_unit_test_teardown(test_attention_quant, teardown),
        cmocka_unit_test_teardown(test_rope_table, teardown),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
