/*
 * kernels/pack_kern.h — the body of the packed-weight kernels, included by
 * pack_avx2.c (SP_PK_VNNI 0: maddubs + add) and pack_vnni.c (SP_PK_VNNI 1:
 * AVX-VNNI dpbusd), each compiled for its own target.  The integer sums
 * are exact either way (see pack_avx2.c), so both give bit-identical
 * results.  Both read the weight vectors straight from the blocks: a
 * load and at most a few bit operations per vector are cheaper than
 * storing a panel and loading it back, except for AVX2's Q5_0 with many
 * rows, whose 5th bits it unpacks once to a panel.
 *
 * The includer defines SP_PK_VNNI and SP_PK_DOT_PACKED (the name of the
 * exported entry) and opens the target pragma.  Private to the kernels.
 */
#define SP_AI static inline __attribute__((always_inline))
#define SP_PRAGMA(x) _Pragma(#x)
#define SP_UNROLL SP_PRAGMA(GCC unroll 8)

/* Packed blocks of one group taken at a time (the AVX2 Q5_0 panel). */
#define SP_PSEG 32

/* The 4 bytes at p in every 32-bit lane. */
SP_AI __m256i sp_p_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

SP_AI __m256 sp_p_f16x8(const uint8_t p[16]) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* Vector u (< 8) of a packed block: 4 elements of each of the 8 rows, in
 * the order of sp_p_off.  Q4_1: the nibbles (0..15).  Q5_0: w + 16 (0..31;
 * see sp_p_q5_0_vec).  Q8_0: w as stored.  Each is a few instructions on
 * one 32-byte load, so kernels call them per use (AVX2 Q5_0 may keep a panel). */
SP_AI __m256i sp_p_nib_vec(const uint8_t *qs, int u) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)(qs + 32 * (u / 2)));
    return _mm256_and_si256(u % 2 ? _mm256_srli_epi16(b, 4) : b, _mm256_set1_epi8(15));
}
SP_AI __m256i sp_p_q4_1_vec(const sp_blk_q4_1x8 *x, int u) { return sp_p_nib_vec(x->qs, u); }

/* Q5_0: lane r of the qh vector is row r's 32 high bits; for the 4
 * elements e0..e0+3 of vector u each byte of a lane picks the byte of its
 * lane that holds bit e0 + i (a shuffle), masks that bit and widens it to
 * 16 (compare, and), which goes above the nibble. */
SP_AI __m256i sp_p_q5_0_vec(const sp_blk_q5_0x8 *x, int u) {
    const __m256i h16 = _mm256_set1_epi8(16);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
    const __m256i idx0 = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
                                          0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m256i bits = _mm256_set1_epi32(0x08040201);
    const int e0 = 16 * (u % 2) + 4 * (u / 2);
    const __m256i sel = _mm256_shuffle_epi8(qh, _mm256_add_epi8(idx0, _mm256_set1_epi8((char)(e0 / 8))));
    const __m256i m = e0 % 8 ? _mm256_slli_epi32(bits, 4) : bits;
    const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(sel, m), m), h16);
    return _mm256_or_si256(sp_p_nib_vec(x->qs, u), hb);
}

SP_AI __m256i sp_p_q8_0_vec(const sp_blk_q8_0x8 *x, int u) {
    return _mm256_loadu_si256((const __m256i *)(x->qs + 32 * u));
}

/* Offset in the activation block of the 4 elements of vector u. */
SP_AI int sp_p_off(uint32_t t, int u) { return t == SP_Q8_0 ? 4 * u : 4 * (u / 2) + 16 * (u % 2); }

#if SP_PK_VNNI

/* The VNNI kernel for all three formats: one dpbusd per 4 elements of 8
 * rows, the weights unsigned (Q4_1 nibbles, Q5_0 w + 16, Q8_0 w + 128) and
 * the offset taken back as 16 or 128 times the activation block's sum,
 * exact in int32.  R (1, 2 or 4) activation rows share each weight
 * vector, read from the nk blocks at xb; 4 / R chains per row and block
 * (blocks are independent, so out-of-order execution overlaps them too). */
SP_AI __m256i sp_p_vnni_vec(const uint32_t t, const void *xb, int k, int u) {
    if (t == SP_Q4_1) return sp_p_q4_1_vec((const sp_blk_q4_1x8 *)xb + k, u);
    if (t == SP_Q5_0) return sp_p_q5_0_vec((const sp_blk_q5_0x8 *)xb + k, u);
    return _mm256_xor_si256(sp_p_q8_0_vec((const sp_blk_q8_0x8 *)xb + k, u), _mm256_set1_epi8((char)0x80));
}
SP_AI __m256 sp_p_vnni_d(const uint32_t t, const void *xb, int k) {
    if (t == SP_Q4_1) return sp_p_f16x8(((const sp_blk_q4_1x8 *)xb + k)->d);
    if (t == SP_Q5_0) return sp_p_f16x8(((const sp_blk_q5_0x8 *)xb + k)->d);
    return sp_p_f16x8(((const sp_blk_q8_0x8 *)xb + k)->d);
}

SP_AI void sp_p_rows(const uint32_t t, const void *xb, int nk, int64_t kb, const sp_act_view *v,
                     __m256 *acc, __m256 *accm, const int R) {
    __m256 a[4], am[4];
    SP_UNROLL for (int r = 0; r < R; r++) { a[r] = acc[r]; am[r] = accm[r]; }
    for (int k = 0; k < nk; k++) {
        const int64_t b = kb + k;
        /* C chains per row, 4 in all: fewer rows need more chains to
         * hide the dpbusd latency */
        const int C = 4 / R;
        __m256i s[4];
        SP_UNROLL for (int i = 0; i < 4; i++) s[i] = _mm256_setzero_si256();
        if (t != SP_Q4_1)
            SP_UNROLL for (int r = 0; r < R; r++) s[r * C] = _mm256_set1_epi32((t == SP_Q5_0 ? -16 : -128) * v[r].qsum[b]);
        SP_UNROLL for (int u = 0; u < 8; u++) {
            const __m256i q = sp_p_vnni_vec(t, xb, k, u);
            const int off = sp_p_off(t, u);
            SP_UNROLL for (int r = 0; r < R; r++)
                s[r * C + u % C] = _mm256_dpbusd_avx_epi32(s[r * C + u % C], q, sp_p_bcast4(v[r].q + SP_QK * b + off));
        }
        const __m256 d = sp_p_vnni_d(t, xb, k);
        const __m256 m = t == SP_Q4_1 ? sp_p_f16x8(((const sp_blk_q4_1x8 *)xb + k)->m) : d;
        SP_UNROLL for (int r = 0; r < R; r++) {
            __m256i si = s[r * C];
            SP_UNROLL for (int c = 1; c < C; c++) si = _mm256_add_epi32(si, s[r * C + c]);
            a[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(d, _mm256_broadcast_ss(v[r].d + b)), a[r]);
            if (t == SP_Q4_1) am[r] = _mm256_fmadd_ps(m, _mm256_broadcast_ss(v[r].s + b), am[r]);
        }
    }
    SP_UNROLL for (int r = 0; r < R; r++) { acc[r] = a[r]; accm[r] = am[r]; }
}
#define SP_PK_R 4

#else

/* The kernels straight from the packed blocks, R (1 to 4) activation rows
 * sharing each weight vector.  For these formats a weight vector is one
 * load and a few integer operations (an and/shift, a bit merge, an abs),
 * cheaper than storing it to a panel and loading it back.  Reading the
 * blocks again for each group of R rows pays for any number of rows for
 * Q4_1 and Q8_0 and up to 8 rows for Q5_0, whose 5th bits cost more to
 * merge (measured on Zen 3, 576 x 1536: 1 row 23-40 % faster, 4 rows
 * 30-35 %, 16 rows 5-18 %).
 * The integer sums are exact in any order and the float operations are
 * those of the panel kernels in the same order, so both paths give
 * bit-identical results (batch invariance across the switch: test_simd
 * checks every row count from 1 to 17 against single rows). */
SP_AI void sp_p_nib_direct(const uint32_t t, const void *xb, int nk, int64_t kb, const sp_act_view *v,
                           __m256 *acc, __m256 *accm, const int R) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 a[4], am[4];
    SP_UNROLL for (int r = 0; r < R; r++) { a[r] = acc[r]; am[r] = accm[r]; }
    for (int k = 0; k < nk; k++) {
        const int64_t b = kb + k;
        __m256i s[4];
        SP_UNROLL for (int r = 0; r < R; r++) s[r] = _mm256_setzero_si256();
        SP_UNROLL for (int u = 0; u < 8; u++) {
            const int off = sp_p_off(t, u);
            if (t == SP_Q4_1) {
                const __m256i q = sp_p_q4_1_vec((const sp_blk_q4_1x8 *)xb + k, u);
                SP_UNROLL for (int r = 0; r < R; r++)
                    s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(q, sp_p_bcast4(v[r].q + SP_QK * b + off)));
            } else {
                const __m256i w = _mm256_sub_epi8(sp_p_q5_0_vec((const sp_blk_q5_0x8 *)xb + k, u), _mm256_set1_epi8(16));
                const __m256i aw = _mm256_abs_epi8(w);
                SP_UNROLL for (int r = 0; r < R; r++)
                    s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(sp_p_bcast4(v[r].q + SP_QK * b + off), w)));
            }
        }
        const __m256 d = t == SP_Q4_1 ? sp_p_f16x8(((const sp_blk_q4_1x8 *)xb + k)->d)
                                      : sp_p_f16x8(((const sp_blk_q5_0x8 *)xb + k)->d);
        SP_UNROLL for (int r = 0; r < R; r++) {
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s[r], ones));
            a[r] = _mm256_fmadd_ps(f, _mm256_mul_ps(d, _mm256_broadcast_ss(v[r].d + b)), a[r]);
            if (t == SP_Q4_1)
                am[r] = _mm256_fmadd_ps(sp_p_f16x8(((const sp_blk_q4_1x8 *)xb + k)->m), _mm256_broadcast_ss(v[r].s + b), am[r]);
        }
    }
    SP_UNROLL for (int r = 0; r < R; r++) { acc[r] = a[r]; accm[r] = am[r]; }
}

SP_AI void sp_p_q8_0_direct(const sp_blk_q8_0x8 *x, int nk, int64_t kb, const sp_act_view *v,
                            __m256 *acc, const int R) {
    const __m256i ones = _mm256_set1_epi16(1);
    /* C chains per row, about 4 in all, to hide the maddubs + madd latency */
    const int C = R == 1 ? 4 : R == 2 ? 2 : 1;
    __m256 a[4];
    SP_UNROLL for (int r = 0; r < R; r++) a[r] = acc[r];
    for (int k = 0; k < nk; k++) {
        const int64_t b = kb + k;
        __m256i s[4];
        SP_UNROLL for (int i = 0; i < 4; i++) s[i] = _mm256_setzero_si256();
        SP_UNROLL for (int j = 0; j < 8; j++) {
            const __m256i w = sp_p_q8_0_vec(x + k, j);
            const __m256i aw = _mm256_abs_epi8(w);
            SP_UNROLL for (int r = 0; r < R; r++) {
                const __m256i ys = _mm256_sign_epi8(sp_p_bcast4(v[r].q + SP_QK * b + 4 * j), w);
                s[r * C + j % C] = _mm256_add_epi32(s[r * C + j % C], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, ys), ones));
            }
        }
        const __m256 d = sp_p_f16x8(x[k].d);
        SP_UNROLL for (int r = 0; r < R; r++) {
            __m256i si = s[r * C];
            SP_UNROLL for (int c = 1; c < C; c++) si = _mm256_add_epi32(si, s[r * C + c]);
            a[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(d, _mm256_broadcast_ss(v[r].d + b)), a[r]);
        }
    }
    SP_UNROLL for (int r = 0; r < R; r++) acc[r] = a[r];
}

SP_AI void sp_p_rows_direct(const uint32_t t, const void *xb, int nk, int64_t kb, const sp_act_view *v,
                            __m256 *acc, __m256 *accm, const int R) {
    if (t == SP_Q8_0) sp_p_q8_0_direct((const sp_blk_q8_0x8 *)xb, nk, kb, v, acc, R);
    else sp_p_nib_direct(t, xb, nk, kb, v, acc, accm, R);
}

/* All nr rows from the blocks: groups of 4, then the rest in one call. */
SP_AI void sp_p_all_direct(const uint32_t t, const void *xb, int nk, int64_t kb, const sp_act_view *v,
                           int nr, __m256 *acc, __m256 *accm) {
    int r = 0;
    for (; r + 4 <= nr; r += 4) sp_p_rows_direct(t, xb, nk, kb, v + r, acc + r, accm + r, 4);
    if (nr - r == 3) sp_p_rows_direct(t, xb, nk, kb, v + r, acc + r, accm + r, 3);
    else if (nr - r == 2) sp_p_rows_direct(t, xb, nk, kb, v + r, acc + r, accm + r, 2);
    else if (nr - r == 1) sp_p_rows_direct(t, xb, nk, kb, v + r, acc + r, accm + r, 1);
}

/* Up to this many activation rows Q5_0 reads the blocks directly; from
 * there on its panel (unpacked once per segment) pays. */
#define SP_PK_DIRECT_Q5_0 8
/* Q5_0 from many rows: the 8 vectors of each block of a segment unpacked
 * once to a panel (|w| and w, for the signs) that every pair of rows reads. */
typedef struct sp_ppanel {
    __m256i q[SP_PSEG][8];   /* vector u of block k: |w| */
    __m256i s[SP_PSEG][8];   /* the signed values w */
    __m256 d[SP_PSEG];       /* the 8 rows' scales */
} sp_ppanel;

SP_AI void sp_p_q5_0_unpack(const sp_blk_q5_0x8 *x, int nk, sp_ppanel *p) {
    for (int k = 0; k < nk; k++) {
        for (int u = 0; u < 8; u++) {
            const __m256i w = _mm256_sub_epi8(sp_p_q5_0_vec(x + k, u), _mm256_set1_epi8(16));
            p->s[k][u] = w;
            p->q[k][u] = _mm256_abs_epi8(w);
        }
        p->d[k] = sp_p_f16x8(x[k].d);
    }
}

/* R (1 or 2) rows over the nk blocks of the panel; kb is the index of the
 * panel's first block in the row.  |w| by sign(y, w), 8 of them summed in
 * int16 stay exact (at most 8 * 2 * 16 * 127 = 32512). */
SP_AI void sp_p_q5_0_panel_rows(const sp_ppanel *p, int nk, int64_t kb, const sp_act_view *v,
                                __m256 *acc, const int R) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 a[2];
    SP_UNROLL for (int r = 0; r < R; r++) a[r] = acc[r];
    for (int k = 0; k < nk; k++) {
        const int64_t b = kb + k;
        SP_UNROLL for (int r = 0; r < R; r++) {
            const int8_t *y = v[r].q + SP_QK * b;
            __m256i s = _mm256_setzero_si256();
            SP_UNROLL for (int u = 0; u < 8; u++) {
                const __m256i yb = sp_p_bcast4(y + sp_p_off(SP_Q5_0, u));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(p->q[k][u], _mm256_sign_epi8(yb, p->s[k][u])));
            }
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones));
            a[r] = _mm256_fmadd_ps(f, _mm256_mul_ps(p->d[k], _mm256_broadcast_ss(v[r].d + b)), a[r]);
        }
    }
    SP_UNROLL for (int r = 0; r < R; r++) acc[r] = a[r];
}

#endif

/* One group of 8 weight rows (nb packed blocks at x) against nr <= 16
 * prepared rows: y[r * ldy + i]. */
static void sp_p_group(uint32_t t, int64_t nb, const void *x, const sp_act_view *v, int nr, float *y,
                       size_t ldy) {
#if !SP_PK_VNNI
    sp_ppanel p;
#endif
    const size_t blk = 8 * (size_t)sp_dtype_row_bytes(t, SP_QK);   /* bytes of a packed block */
    __m256 acc[16], accm[16];
    for (int r = 0; r < nr; r++) acc[r] = accm[r] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < nb; kb += SP_PSEG) {
        const int nk = nb - kb < SP_PSEG ? (int)(nb - kb) : SP_PSEG;
        const void *xb = (const uint8_t *)x + (size_t)kb * blk;
        /* t is a constant in each expansion, so each inlines its own kernel */
#if SP_PK_VNNI
#define SP_P_ALL_ROWS(T)                                                                             \
        do {                                                                                         \
            int r = 0;                                                                               \
            for (; r + SP_PK_R <= nr; r += SP_PK_R) sp_p_rows(T, xb, nk, kb, v + r, acc + r, accm + r, SP_PK_R); \
            if (SP_PK_R > 2 && r + 2 <= nr) { sp_p_rows(T, xb, nk, kb, v + r, acc + r, accm + r, 2); r += 2; } \
            if (r < nr) sp_p_rows(T, xb, nk, kb, v + r, acc + r, accm + r, 1);                       \
        } while (0)
#else
#define SP_P_ALL_ROWS(T)                                                                             \
        do {                                                                                         \
            if (T != SP_Q5_0 || nr <= SP_PK_DIRECT_Q5_0) {                                           \
                sp_p_all_direct(T, xb, nk, kb, v, nr, acc, accm);                                    \
                break;                                                                               \
            }                                                                                        \
            sp_p_q5_0_unpack((const sp_blk_q5_0x8 *)xb, nk, &p);                                    \
            int r = 0;                                                                               \
            for (; r + 2 <= nr; r += 2) sp_p_q5_0_panel_rows(&p, nk, kb, v + r, acc + r, 2);         \
            if (r < nr) sp_p_q5_0_panel_rows(&p, nk, kb, v + r, acc + r, 1);                         \
        } while (0)
#endif
        if (t == SP_Q4_1) SP_P_ALL_ROWS(SP_Q4_1);
        else if (t == SP_Q5_0) SP_P_ALL_ROWS(SP_Q5_0);
        else SP_P_ALL_ROWS(SP_Q8_0);
#undef SP_P_ALL_ROWS
    }
    for (int r = 0; r < nr; r++)
        _mm256_storeu_ps(y + (size_t)r * ldy, t == SP_Q4_1 ? _mm256_add_ps(acc[r], accm[r]) : acc[r]);
}

void SP_PK_DOT_PACKED(uint32_t wtype, int64_t n, const void *w, size_t g_stride, int64_t n_groups,
                        const void *act, size_t act_stride, int nr, float *y, size_t ldy) {
    const int64_t nb = n / SP_QK;
    sp_act_view v[16];
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int g = sp_act_views(wtype, n, act, act_stride, r0, nr, 16, v);
        for (int64_t gi = 0; gi < n_groups; gi++)
            sp_p_group(wtype, nb, (const uint8_t *)w + (size_t)gi * g_stride, v, g,
                       y + (size_t)r0 * ldy + (size_t)gi * SP_PACK_ROWS, ldy);
    }
}

