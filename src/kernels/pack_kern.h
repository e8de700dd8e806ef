/*
 * kernels/pack_kern.h — the body of the packed-weight kernels, included by
 * pack_avx2.c (SP_PK_VNNI 0: maddubs + add) and pack_vnni.c (SP_PK_VNNI 1:
 * AVX-VNNI dpbusd), each compiled for its own target.  Only the integer
 * multiply-accumulate differs, and it is exact either way (see
 * pack_avx2.c), so both give bit-identical results.
 *
 * The includer defines SP_PK_VNNI and SP_PK_DOT_PACKED (the name of the
 * exported entry) and opens the target pragma.  Private to the kernels.
 */
#define SP_AI static inline __attribute__((always_inline))
#define SP_PRAGMA(x) _Pragma(#x)
#define SP_UNROLL SP_PRAGMA(GCC unroll 8)

/* Packed blocks of one group unpacked at a time. */
#define SP_PSEG 32

typedef struct sp_ppanel {
    /* Q4_1: [2k] low, [2k+1] high nibbles of vector k; Q5_0: in that
     * order, |w| (AVX2) or w + 16 (VNNI); Q8_0: vector j, |w| (AVX2) or
     * w + 128 (VNNI) */
    __m256i q[SP_PSEG][8];
#if !SP_PK_VNNI
    __m256i s[SP_PSEG][8];   /* Q5_0: the signed values w (for the signs) */
#endif
    __m256 d[SP_PSEG];       /* the 8 rows' scales */
    __m256 m[SP_PSEG];       /* Q4_1: the 8 rows' mins */
} sp_ppanel;

/* The 4 bytes at p in every 32-bit lane. */
SP_AI __m256i sp_p_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

SP_AI __m256 sp_p_f16x8(const uint8_t p[16]) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static void sp_p_unpack_q4_1(const sp_blk_q4_1x8 *x, sp_ppanel *p, int k) {
    const __m256i lo = _mm256_set1_epi8(15);
    for (int v = 0; v < 4; v++) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * v));
        p->q[k][2 * v] = _mm256_and_si256(b, lo);
        p->q[k][2 * v + 1] = _mm256_and_si256(_mm256_srli_epi16(b, 4), lo);
    }
    p->d[k] = sp_p_f16x8(x->d);
    p->m[k] = sp_p_f16x8(x->m);
}

/* Q5_0: w = (nibble | high bit << 4) - 16, in -16..15.  Lane r of the qh
 * vector is row r's 32 high bits; for the 4 elements e0..e0+3 of a vector
 * each byte of a lane picks the byte of its lane that holds bit e0 + i
 * (a shuffle), masks that bit and widens it to 16 (compare, and). */
static void sp_p_unpack_q5_0(const sp_blk_q5_0x8 *x, sp_ppanel *p, int k) {
    const __m256i lo = _mm256_set1_epi8(15), h16 = _mm256_set1_epi8(16);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
    const __m256i idx0 = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
                                          0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m256i bits = _mm256_set1_epi32(0x08040201);
    for (int v = 0; v < 4; v++) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * v));
        for (int half = 0; half < 2; half++) {
            const int e0 = 16 * half + 4 * v;
            const __m256i nib = half ? _mm256_and_si256(_mm256_srli_epi16(b, 4), lo) : _mm256_and_si256(b, lo);
            const __m256i sel = _mm256_shuffle_epi8(qh, _mm256_add_epi8(idx0, _mm256_set1_epi8((char)(e0 / 8))));
            const __m256i m = e0 % 8 ? _mm256_slli_epi32(bits, 4) : bits;
            const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(sel, m), m), h16);
#if SP_PK_VNNI
            p->q[k][2 * v + half] = _mm256_or_si256(nib, hb);
#else
            const __m256i w = _mm256_sub_epi8(_mm256_or_si256(nib, hb), h16);
            p->s[k][2 * v + half] = w;
            p->q[k][2 * v + half] = _mm256_abs_epi8(w);
#endif
        }
    }
    p->d[k] = sp_p_f16x8(x->d);
}

static void sp_p_unpack_q8_0(const sp_blk_q8_0x8 *x, sp_ppanel *p, int k) {
    for (int j = 0; j < 8; j++) {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
#if SP_PK_VNNI
        p->q[k][j] = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));   /* w + 128 as u8 */
#else
        p->q[k][j] = _mm256_abs_epi8(w);
#endif
    }
    p->d[k] = sp_p_f16x8(x->d);
}

/* R (1 or 2) activation rows over nk packed blocks of the panel in the
 * nibble layout (t, a constant after inlining: Q4_1 or Q5_0); kb is the
 * index of the panel's first block in the row.
 *   Q4_1: nibbles (0..15) by y; the min term goes to accm.
 *   Q5_0: AVX2: |w| by sign(y, w), 8 of them summed in int16 stay exact
 *         (at most 8 * 2 * 16 * 127 = 32512); VNNI: (w + 16) by y, less
 *         16 sum y (exact in int32, no sign step). */
SP_AI void sp_p_nib_rows(const uint32_t t, const sp_ppanel *p, int nk, int64_t kb, const sp_act_view *v,
                         __m256 *acc, __m256 *accm, const int R) {
#if !SP_PK_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    __m256 a[2], am[2];
    SP_UNROLL for (int r = 0; r < R; r++) { a[r] = acc[r]; am[r] = accm[r]; }
    for (int k = 0; k < nk; k++) {
        const int64_t b = kb + k;
        SP_UNROLL for (int r = 0; r < R; r++) {
            const int8_t *y = v[r].q + SP_QK * b;
#if SP_PK_VNNI
            /* four chains: dpbusd has a latency of several cycles, one
             * chain of 8 would leave the units idle (the int32 sums are
             * exact, so the grouping changes nothing) */
            __m256i s4[4];
            SP_UNROLL for (int u = 0; u < 4; u++)
                s4[u] = _mm256_dpbusd_avx_epi32(_mm256_set1_epi32(t == SP_Q5_0 && u == 0 ? -16 * v[r].qsum[b] : 0),
                                                p->q[k][u], sp_p_bcast4(y + 4 * (u / 2) + 16 * (u % 2)));
            SP_UNROLL for (int u = 4; u < 8; u++)
                s4[u - 4] = _mm256_dpbusd_avx_epi32(s4[u - 4], p->q[k][u], sp_p_bcast4(y + 4 * (u / 2) + 16 * (u % 2)));
            const __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(s4[0], s4[1]), _mm256_add_epi32(s4[2], s4[3])));
#else
            __m256i s = _mm256_setzero_si256();
            SP_UNROLL for (int u = 0; u < 8; u++) {
                const __m256i yb = sp_p_bcast4(y + 4 * (u / 2) + 16 * (u % 2));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(p->q[k][u], t == SP_Q5_0 ? _mm256_sign_epi8(yb, p->s[k][u]) : yb));
            }
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones));
#endif
            a[r] = _mm256_fmadd_ps(f, _mm256_mul_ps(p->d[k], _mm256_broadcast_ss(v[r].d + b)), a[r]);
            if (t == SP_Q4_1) am[r] = _mm256_fmadd_ps(p->m[k], _mm256_broadcast_ss(v[r].s + b), am[r]);
        }
    }
    SP_UNROLL for (int r = 0; r < R; r++) { acc[r] = a[r]; accm[r] = am[r]; }
}

/* As sp_p_nib_rows for Q8_0 (x: the packed blocks, for the signs). */
SP_AI void sp_p_q8_0_rows(const sp_ppanel *p, const sp_blk_q8_0x8 *x, int nk, int64_t kb,
                          const sp_act_view *v, __m256 *acc, const int R) {
#if !SP_PK_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    __m256 a[2];
    SP_UNROLL for (int r = 0; r < R; r++) a[r] = acc[r];
    for (int k = 0; k < nk; k++) {
        const int64_t b = kb + k;
        SP_UNROLL for (int r = 0; r < R; r++) {
            const int8_t *y = v[r].q + SP_QK * b;
            /* four independent chains (see the Q4_1 kernel) */
#if SP_PK_VNNI
            /* sum (w + 128) y - 128 sum y: no sign step (exact in int32) */
            __m256i s4[4] = { _mm256_set1_epi32(-128 * v[r].qsum[b]), _mm256_setzero_si256(),
                              _mm256_setzero_si256(), _mm256_setzero_si256() };
            (void)x;
            SP_UNROLL for (int j = 0; j < 8; j++)
                s4[j % 4] = _mm256_dpbusd_avx_epi32(s4[j % 4], p->q[k][j], sp_p_bcast4(y + 4 * j));
#else
            __m256i s4[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                              _mm256_setzero_si256() };
            SP_UNROLL for (int j = 0; j < 8; j++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(x[k].qs + 32 * j));
                const __m256i ys = _mm256_sign_epi8(sp_p_bcast4(y + 4 * j), w);
                s4[j % 4] = _mm256_add_epi32(s4[j % 4], _mm256_madd_epi16(_mm256_maddubs_epi16(p->q[k][j], ys), ones));
            }
#endif
            const __m256i s = _mm256_add_epi32(_mm256_add_epi32(s4[0], s4[1]), _mm256_add_epi32(s4[2], s4[3]));
            a[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(p->d[k], _mm256_broadcast_ss(v[r].d + b)), a[r]);
        }
    }
    SP_UNROLL for (int r = 0; r < R; r++) acc[r] = a[r];
}

/* One group of 8 weight rows (nb packed blocks at x) against nr <= 16
 * prepared rows: y[r * ldy + i]. */
static void sp_p_group(uint32_t t, int64_t nb, const void *x, const sp_act_view *v, int nr, float *y,
                       size_t ldy) {
    sp_ppanel p;
    __m256 acc[16], accm[16];
    for (int r = 0; r < nr; r++) acc[r] = accm[r] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < nb; kb += SP_PSEG) {
        const int nk = nb - kb < SP_PSEG ? (int)(nb - kb) : SP_PSEG;
        if (t == SP_Q4_1) {
            const sp_blk_q4_1x8 *xb = (const sp_blk_q4_1x8 *)x + kb;
            for (int k = 0; k < nk; k++) sp_p_unpack_q4_1(xb + k, &p, k);
            int r = 0;
            for (; r + 2 <= nr; r += 2) sp_p_nib_rows(SP_Q4_1, &p, nk, kb, v + r, acc + r, accm + r, 2);
            if (r < nr) sp_p_nib_rows(SP_Q4_1, &p, nk, kb, v + r, acc + r, accm + r, 1);
        } else if (t == SP_Q5_0) {
            const sp_blk_q5_0x8 *xb = (const sp_blk_q5_0x8 *)x + kb;
            for (int k = 0; k < nk; k++) sp_p_unpack_q5_0(xb + k, &p, k);
            int r = 0;
            for (; r + 2 <= nr; r += 2) sp_p_nib_rows(SP_Q5_0, &p, nk, kb, v + r, acc + r, accm + r, 2);
            if (r < nr) sp_p_nib_rows(SP_Q5_0, &p, nk, kb, v + r, acc + r, accm + r, 1);
        } else {
            const sp_blk_q8_0x8 *xb = (const sp_blk_q8_0x8 *)x + kb;
            for (int k = 0; k < nk; k++) sp_p_unpack_q8_0(xb + k, &p, k);
            int r = 0;
            for (; r + 2 <= nr; r += 2) sp_p_q8_0_rows(&p, xb, nk, kb, v + r, acc + r, 2);
            if (r < nr) sp_p_q8_0_rows(&p, xb, nk, kb, v + r, acc + r, 1);
        }
    }
    for (int r = 0; r < nr; r++)
        _mm256_storeu_ps(y + (size_t)r * ldy, t == SP_Q4_1 ? _mm256_add_ps(acc[r], accm[r]) : acc[r]);
}

void SP_PK_DOT_PACKED(uint32_t wtype, int64_t n, const void *w, size_t g_stride, int64_t n_groups,
                        const void *act, size_t act_stride, int nr, float *y, size_t ldy) {
    const int64_t nb = n / SP_QK;
    sp_act_view v[16];
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int g = nr - r0 < 16 ? nr - r0 : 16;
        for (int r = 0; r < g; r++)
            v[r] = sp_act_split_view(wtype, n, (const uint8_t *)act + (size_t)(r0 + r) * act_stride);
        for (int64_t gi = 0; gi < n_groups; gi++)
            sp_p_group(wtype, nb, (const uint8_t *)w + (size_t)gi * g_stride, v, g,
                       y + (size_t)r0 * ldy + (size_t)gi * SP_PACK_ROWS, ldy);
    }
}

