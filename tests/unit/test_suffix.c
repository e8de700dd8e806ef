/* Unit tests for the `suffix` drafter: the depth-bounded suffix trie
 * against brute force on random streams (counts, matches, chain proposals),
 * eviction (exactly a trie of the retained sequences, bounded memory),
 * hand-checked proposals, tree shape, the drafter through the seam (local
 * vs engine-wide candidates), checkpoints, and concurrent drafts. */
#include "test_util.h"
#include "speculative/suffix_internal.h"

#include <pthread.h>

/* ---------------------------------------------------------------------------
 * Brute-force reference over a set of sequences
 * ------------------------------------------------------------------------ */

#define MAXSEQ 64

typedef struct corpus {
    const int32_t *s[MAXSEQ];
    int n[MAXSEQ];
    int k;
} corpus;

static bool occurs_at(const corpus *c, int j, int i, const int32_t *s, int m) {
    return i + m <= c->n[j] && !memcmp(c->s[j] + i, s, (size_t)m * sizeof *s);
}

static int64_t ref_count(const corpus *c, const int32_t *s, int m) {
    int64_t k = 0;
    for (int j = 0; j < c->k; j++)
        for (int i = 0; i + m <= c->n[j]; i++) k += occurs_at(c, j, i, s, m);
    return k;
}

/* Longest suffix of ctx (<= max_len, < D) occurring followed by a token. */
static int ref_match(const corpus *c, const int32_t *ctx, int n, int max_len, int D) {
    int hi = max_len < n ? max_len : n;
    if (hi > D - 1) hi = D - 1;
    for (int m = hi; m >= 1; m--)
        for (int j = 0; j < c->k; j++)
            for (int i = 0; i + m < c->n[j]; i++)
                if (occurs_at(c, j, i, ctx + n - m, m)) return m;
    return 0;
}

/* The chain from the match of length m, the obvious way; returns its
 * length, *score the sum of its probabilities. */
static int ref_chain_at(const corpus *c, const int32_t *ctx, int n, int m, int D,
                        const sp_sfx_params *p, int32_t *out, double *prob, double *score) {
    double capd = (double)p->factor * m + 1e-6;
    const int cap = capd >= p->max_n ? p->max_n : (int)capd;
    int32_t P[1024];
    int d = m, k = 0;
    memcpy(P, ctx + n - m, (size_t)m * sizeof *P);
    double pr = 1.0;
    *score = 0;
    while (k < cap) {
        int32_t x = -1;
        double q;
        if (d < D) {
            int64_t total = 0, best_cnt = 0;
            int best_j = -1, best_i = -1;
            for (int j = 0; j < c->k; j++)
                for (int i = 0; i + d < c->n[j]; i++) {
                    if (!occurs_at(c, j, i, P, d)) continue;
                    total++;
                    const int32_t y = c->s[j][i + d];
                    /* count and latest occurrence of P y */
                    int64_t cnt = 0;
                    int lj = -1, li = -1;
                    for (int j2 = 0; j2 < c->k; j2++)
                        for (int i2 = 0; i2 + d < c->n[j2]; i2++)
                            if (c->s[j2][i2 + d] == y && occurs_at(c, j2, i2, P, d)) {
                                cnt++;
                                lj = j2;
                                li = i2;
                            }
                    bool better = cnt > best_cnt ||
                                  (cnt == best_cnt && (lj > best_j || (lj == best_j && li > best_i))) ||
                                  (cnt == best_cnt && lj == best_j && li == best_i && y < x);
                    if (better) { best_cnt = cnt; best_j = lj; best_i = li; x = y; }
                }
            if (!total) break;
            q = pr * ((double)best_cnt / (double)total);
        } else {
            /* past the depth bound: only a string seen once continues, by
             * reading its occurrence */
            int oj = -1, oi = -1, cnt = 0;
            for (int j = 0; j < c->k; j++)
                for (int i = 0; i + D <= c->n[j]; i++)
                    if (occurs_at(c, j, i, P, D)) { cnt++; oj = j; oi = i; }
            if (cnt != 1 || oi + d >= c->n[oj]) break;
            x = c->s[oj][oi + d];
            q = pr;
        }
        if (q < (double)p->min_prob) break;
        out[k] = x;
        prob[k] = q;
        *score += q;
        k++;
        P[d++] = x;
        pr = q;
    }
    return k;
}

/* The documented chain rule: every match length, the best score, the
 * longer match on ties.  Returns the length; *m_out the match length. */
static int ref_chain(const corpus *c, const int32_t *ctx, int n, int D, const sp_sfx_params *p,
                     int32_t *out, double *prob, int *m_out) {
    const int room = p->max_n < D / 2 ? p->max_n : D / 2;
    int best_n = 0;
    double best = 0;
    *m_out = 0;
    for (int m = ref_match(c, ctx, n, D - room, D); m >= 1; m--) {
        int32_t o[SP_MAX_DRAFT];
        double pr[SP_MAX_DRAFT], sc;
        const int k = ref_chain_at(c, ctx, n, m, D, p, o, pr, &sc);
        if (sc > best) {
            best = sc;
            best_n = k;
            *m_out = m;
            memcpy(out, o, (size_t)k * sizeof *o);
            memcpy(prob, pr, (size_t)k * sizeof *pr);
        }
    }
    return best_n;
}

static void check_trie(const sp_sfx *t) {
    char msg[256];
    if (sp_sfx_check(t, msg, sizeof msg)) fail_msg("trie invariant: %s", msg);
}

/* Every substring (length <= D) of the corpus, plus random strings, has
 * the brute-force count. */
static void check_counts(const sp_sfx *t, const corpus *c, const corpus *probe, int D, sp_rng *r,
                         int alpha) {
    for (int j = 0; j < probe->k; j++)
        for (int i = 0; i < probe->n[j]; i++)
            for (int m = 1; m <= D && i + m <= probe->n[j]; m++) {
                const int64_t got = sp_sfx_count(t, probe->s[j] + i, m), want = ref_count(c, probe->s[j] + i, m);
                if (got != want)
                    fail_msg("count of seq %d [%d, +%d): trie %lld, reference %lld", j, i, m,
                             (long long)got, (long long)want);
            }
    for (int k = 0; k < 200; k++) {
        int32_t s[16];
        const int m = 1 + (int)(sp_rng_next(r) % (uint64_t)(D < 16 ? D : 16));
        for (int i = 0; i < m; i++) s[i] = (int32_t)(sp_rng_next(r) % (uint64_t)alpha);
        assert_int_equal(sp_sfx_count(t, s, m), ref_count(c, s, m));
    }
    int64_t total = 0;
    for (int j = 0; j < c->k; j++) total += c->n[j];
    assert_int_equal(sp_sfx_count(t, NULL, 0), total);
}

static int32_t *random_seq(sp_rng *r, int n, int alpha) {
    int32_t *s = malloc((size_t)n * sizeof *s);
    for (int i = 0; i < n; i++) {
        /* repeat an earlier stretch now and then, so deep paths repeat */
        if (i > 8 && sp_rng_next(r) % 4 == 0) {
            int from = (int)(sp_rng_next(r) % (uint64_t)(i - 4)), len = 2 + (int)(sp_rng_next(r) % 6);
            for (int k = 0; k < len && i < n; k++) s[i++] = s[from + k];
            i--;
            continue;
        }
        s[i] = (int32_t)(sp_rng_next(r) % (uint64_t)alpha);
    }
    return s;
}

/* ---------------------------------------------------------------------------
 * The trie against brute force
 * ------------------------------------------------------------------------ */

/* One open sequence grown token by token (the per-request use): counts,
 * invariants and matches stay exact at every step. */
static void test_trie_single_stream(void **st) {
    (void)st;
    const int depths[] = { 2, 3, 5, 8 }, alphas[] = { 2, 3, 5, 4 };
    for (int cfg = 0; cfg < 4; cfg++) {
        const int D = depths[cfg], A = alphas[cfg];
        sp_rng r = { 11 + (uint64_t)cfg };
        int32_t *s = random_seq(&r, 160, A);
        sp_sfx *t = sp_sfx_create(D);
        corpus c = { .k = 1 };
        c.s[0] = s;
        for (int L = 1; L <= 160; L++) {
            sp_sfx_append(t, s + L - 1, 1);
            c.n[0] = L;
            if (L % 8 == 0 || L < 12) {
                check_trie(t);
                check_counts(t, &c, &c, D, &r, A);
            }
            for (int ml = 1; ml <= D; ml++) {
                const int got = sp_sfx_match(t, s, L, ml), want = ref_match(&c, s, L, ml, D);
                if (got != want) fail_msg("D=%d L=%d max_len %d: match %d, reference %d", D, L, ml, got, want);
            }
        }
        sp_sfx_free(t);
        free(s);
    }
}

static sp_sfx *build(corpus *c, int D) {
    sp_sfx *t = sp_sfx_create(D);
    for (int j = 0; j < c->k; j++) {
        sp_sfx_open_seq(t);
        sp_sfx_append(t, c->s[j], c->n[j]);
        sp_sfx_close_seq(t);
    }
    return t;
}

/* Several closed sequences: counts and matches of arbitrary contexts. */
static void test_trie_many_sequences(void **st) {
    (void)st;
    sp_rng r = { 5 };
    const int D = 6, A = 4;
    corpus c = { .k = 12 };
    for (int j = 0; j < c.k; j++) {
        c.n[j] = 1 + (int)(sp_rng_next(&r) % 40);
        c.s[j] = random_seq(&r, c.n[j], A);
    }
    sp_sfx *t = build(&c, D);
    check_trie(t);
    assert_int_equal(sp_sfx_n_seqs(t), 12);
    check_counts(t, &c, &c, D, &r, A);
    for (int k = 0; k < 500; k++) {
        int32_t ctx[20];
        const int n = 1 + (int)(sp_rng_next(&r) % 20), ml = 1 + (int)(sp_rng_next(&r) % 8);
        for (int i = 0; i < n; i++) ctx[i] = (int32_t)(sp_rng_next(&r) % A);
        assert_int_equal(sp_sfx_match(t, ctx, n, ml), ref_match(&c, ctx, n, ml, D));
    }
    sp_sfx_free(t);
    for (int j = 0; j < c.k; j++) free((void *)c.s[j]);
}

static void assert_same_cand(const sp_sfx_cand *a, const sp_sfx_cand *b) {
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->match_len, b->match_len);
    assert_memory_equal(a->tok, b->tok, (size_t)a->n * sizeof(int32_t));
    assert_memory_equal(a->parent, b->parent, (size_t)a->n * sizeof(int32_t));
    assert_memory_equal(a->prob, b->prob, (size_t)a->n * sizeof(float));
}

/* Evicting the oldest sequences leaves exactly the trie of the retained
 * ones: the same counts for every string (evicted ones included), the same
 * matches and proposals, and the nodes of the evicted ones are freed. */
static void test_trie_evict_exact(void **st) {
    (void)st;
    sp_rng r = { 77 };
    for (int D = 3; D <= 9; D += 3) {
        const int A = 3;
        corpus all = { .k = 20 };
        for (int j = 0; j < all.k; j++) {
            all.n[j] = 1 + (int)(sp_rng_next(&r) % 50);
            all.s[j] = random_seq(&r, all.n[j], A);
        }
        sp_sfx *t = build(&all, D);
        const int64_t nodes_all = sp_sfx_nodes(t);
        for (int ev = 1; ev < all.k; ev++) {
            assert_true(sp_sfx_evict_oldest(t));
            check_trie(t);
            corpus kept = { .k = all.k - ev };
            for (int j = 0; j < kept.k; j++) { kept.s[j] = all.s[ev + j]; kept.n[j] = all.n[ev + j]; }
            check_counts(t, &kept, &all, D, &r, A);
            sp_sfx *fresh = build(&kept, D);
            assert_int_equal(sp_sfx_tokens(t), sp_sfx_tokens(fresh));
            assert_true(sp_sfx_nodes(t) <= nodes_all);
            for (int k = 0; k < 100; k++) {
                int32_t ctx[24];
                const int n = 1 + (int)(sp_rng_next(&r) % 24);
                for (int i = 0; i < n; i++) ctx[i] = (int32_t)(sp_rng_next(&r) % A);
                const sp_sfx_params p = { .max_n = 1 + (int)(sp_rng_next(&r) % 10), .factor = 2.0f,
                                          .min_prob = 0.05f, .width = 1 + (int)(k % 3) };
                sp_sfx_cand a, b;
                sp_sfx_propose(t, ctx, n, &p, &a);
                sp_sfx_propose(fresh, ctx, n, &p, &b);
                assert_same_cand(&a, &b);
            }
            sp_sfx_free(fresh);
        }
        assert_true(sp_sfx_evict_oldest(t));
        assert_int_equal(sp_sfx_nodes(t), 1);        /* only the root */
        assert_int_equal(sp_sfx_tokens(t), 0);
        assert_false(sp_sfx_evict_oldest(t));
        check_trie(t);
        sp_sfx_free(t);
        for (int j = 0; j < all.k; j++) free((void *)all.s[j]);
    }
}

/* Chain proposals equal the documented rule computed by brute force, for
 * the per-request use (context = the trie's own open sequence) and the
 * engine-wide use (other sequences), with random parameters. */
static void test_propose_matches_reference(void **st) {
    (void)st;
    sp_rng r = { 2024 };
    int proposed = 0, beyond = 0, shorter = 0;
    for (int cfg = 0; cfg < 6; cfg++) {
        const int D = (const int[]){ 4, 6, 8, 12, 5, 16 }[cfg], A = 2 + cfg % 4;
        int32_t *s = random_seq(&r, 300, A);
        sp_sfx *t = sp_sfx_create(D);
        corpus c = { .k = 1 };
        c.s[0] = s;
        for (int L = 1; L <= 300; L++) {
            sp_sfx_append(t, s + L - 1, 1);
            c.n[0] = L;
            const sp_sfx_params p = { .max_n = 1 + (int)(sp_rng_next(&r) % 12),
                                      .factor = (float)(0.5 + (double)(sp_rng_next(&r) % 6) * 0.5),
                                      .min_prob = (float)((double)(sp_rng_next(&r) % 5) * 0.1), .width = 1 };
            sp_sfx_cand got;
            sp_sfx_propose(t, s, L, &p, &got);
            int32_t want[32];
            double prob[32];
            int wm;
            const int wn = ref_chain(&c, s, L, D, &p, want, prob, &wm);
            if (got.n != wn || memcmp(got.tok, want, (size_t)wn * sizeof *want))
                fail_msg("D=%d L=%d max_n=%d factor=%g minp=%g: %d tokens, reference %d", D, L, p.max_n,
                         (double)p.factor, (double)p.min_prob, got.n, wn);
            if (wn) assert_int_equal(got.match_len, wm);
            shorter += wn && wm < sp_sfx_match(t, s, L, D - (p.max_n < D / 2 ? p.max_n : D / 2));
            double score = 0;
            for (int i = 0; i < wn; i++) {
                assert_float_equal(got.prob[i], (float)prob[i], 1e-6);
                assert_int_equal(got.parent[i], i - 1);
                score += prob[i];
            }
            assert_float_equal(got.score, score, 1e-9);
            proposed += wn > 0;
            beyond += got.match_len + wn > D;
        }
        sp_sfx_free(t);
        free(s);
    }
    /* engine-wide: closed sequences, an unrelated context */
    corpus c = { .k = 8 };
    for (int j = 0; j < c.k; j++) { c.n[j] = 60; c.s[j] = random_seq(&r, 60, 3); }
    sp_sfx *t = build(&c, 7);
    for (int k = 0; k < 400; k++) {
        int32_t ctx[30];
        const int n = 1 + (int)(sp_rng_next(&r) % 30);
        for (int i = 0; i < n; i++) ctx[i] = (int32_t)(sp_rng_next(&r) % 3);
        const sp_sfx_params p = { .max_n = 1 + (int)(sp_rng_next(&r) % 16), .factor = 3.0f,
                                  .min_prob = 0.02f, .width = 1 };
        sp_sfx_cand got;
        sp_sfx_propose(t, ctx, n, &p, &got);
        int32_t want[32];
        double prob[32];
        int wm;
        const int wn = ref_chain(&c, ctx, n, 7, &p, want, prob, &wm);
        assert_int_equal(got.n, wn);
        assert_memory_equal(got.tok, want, (size_t)wn * sizeof *want);
        beyond += got.match_len + wn > 7;
    }
    sp_sfx_free(t);
    for (int j = 0; j < c.k; j++) free((void *)c.s[j]);
    printf("# %d non-empty proposals, %d read past the depth bound, %d from a shorter match\n",
           proposed, beyond, shorter);
    assert_true(proposed > 500);
    assert_true(beyond > 20);      /* the unique-continuation path really ran */
    assert_true(shorter > 20);     /* and so did the search over match lengths */
}

/* ---------------------------------------------------------------------------
 * Hand-checked proposals and tree shape
 * ------------------------------------------------------------------------ */

/* History 7 1 2 7 1 2 7 1 3 7 1.  The longest context suffix seen before
 * with a continuation is "7 1" (at 0, 3, 6; "3 7 1" only ends the history).
 * Its continuations: 2 twice, 3 once -> 2 with 2/3.  "7 1 2" (at 0, 3) is
 * always followed by 7 -> 2/3.  "7 1 2 7" -> 1 -> 2/3.  "7 1 2 7 1" is
 * followed by 2 (at 0) and 3 (at 3): a tie, the more recent wins -> 3 with
 * 1/3. */
static void test_propose_hand(void **st) {
    (void)st;
    const int32_t h[] = { 7, 1, 2, 7, 1, 2, 7, 1, 3, 7, 1 };
    sp_sfx *t = sp_sfx_create(8);
    sp_sfx_append(t, h, 11);
    sp_sfx_cand c;
    /* factor 1: at most 1 * 2 tokens */
    sp_sfx_propose(t, h, 11, &(sp_sfx_params){ 4, 1.0f, 0.1f, 1 }, &c);
    assert_int_equal(c.match_len, 2);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.tok[0], 2);
    assert_int_equal(c.tok[1], 7);
    assert_float_equal(c.prob[0], 2.0 / 3, 1e-6);
    assert_float_equal(c.prob[1], 2.0 / 3, 1e-6);
    assert_float_equal(c.score, 4.0 / 3, 1e-6);
    /* factor 2: four tokens, the last one 3 (recency breaks the tie) */
    sp_sfx_propose(t, h, 11, &(sp_sfx_params){ 4, 2.0f, 0.1f, 1 }, &c);
    const int32_t want[] = { 2, 7, 1, 3 };
    assert_int_equal(c.n, 4);
    assert_memory_equal(c.tok, want, sizeof want);
    assert_float_equal(c.prob[3], 1.0 / 3, 1e-6);
    /* min_prob 0.5 stops before the 1/3 token */
    sp_sfx_propose(t, h, 11, &(sp_sfx_params){ 4, 2.0f, 0.5f, 1 }, &c);
    assert_int_equal(c.n, 3);
    /* min_prob 0.7 stops at once */
    sp_sfx_propose(t, h, 11, &(sp_sfx_params){ 4, 2.0f, 0.7f, 1 }, &c);
    assert_int_equal(c.n, 0);
    /* max_n caps the length */
    sp_sfx_propose(t, h, 11, &(sp_sfx_params){ 1, 2.0f, 0.1f, 1 }, &c);
    assert_int_equal(c.n, 1);
    /* width 2, factor 1 (paths of 2), 4 tokens: best-first takes 2 (2/3),
     * 7 (2/3), then the alternative first token 3 (1/3) and its
     * continuation 7 ("7 1 3" is followed by 7): preorder 2 7 | 3 7 */
    sp_sfx_propose(t, h, 11, &(sp_sfx_params){ 4, 1.0f, 0.1f, 2 }, &c);
    const int32_t wt[] = { 2, 7, 3, 7 }, wp[] = { -1, 0, -1, 2 };
    assert_int_equal(c.n, 4);
    assert_memory_equal(c.tok, wt, sizeof wt);
    assert_memory_equal(c.parent, wp, sizeof wp);
    assert_float_equal(c.score, 2.0, 1e-6);
    /* an unseen context proposes nothing */
    const int32_t other[] = { 9, 9, 9 };
    sp_sfx_propose(t, other, 3, &(sp_sfx_params){ 4, 2.0f, 0.1f, 1 }, &c);
    assert_int_equal(c.n, 0);
    assert_int_equal(c.match_len, 0);
    sp_sfx_free(t);

    /* Periodic text: 9 then (1 2) ten times.  The longest match (18 tokens,
     * the occurrence shifted by one period) runs into the end of the
     * history after 2 tokens; shorter matches have more (overlapping)
     * occurrences that reach further: m = 16 gives 4 tokens, ..., m = 12
     * the full 8, and m <= 11 cannot do better, so 12 wins. */
    int32_t per[21] = { 9 };
    for (int i = 1; i < 21; i++) per[i] = i % 2 ? 1 : 2;
    t = sp_sfx_create(64);
    sp_sfx_append(t, per, 21);
    sp_sfx_propose(t, per, 21, &(sp_sfx_params){ 8, 1.0f, 0.1f, 1 }, &c);
    assert_int_equal(sp_sfx_match(t, per, 21, 64), 18);
    assert_int_equal(c.match_len, 12);
    assert_int_equal(c.n, 8);
    for (int i = 0; i < 8; i++) assert_int_equal(c.tok[i], i % 2 ? 2 : 1);
    assert_float_equal(c.score, 8.0, 1e-6);
    sp_sfx_free(t);

    /* A long exact repeat drafts past the depth bound by reading the unique
     * earlier occurrence: D = 4 limits the match to 4 - 2 = 2 tokens, factor
     * 4 allows 8. */
    int32_t x[40];
    for (int i = 0; i < 30; i++) x[i] = 100 + i;
    for (int i = 0; i < 10; i++) x[30 + i] = 100 + i;
    t = sp_sfx_create(4);
    sp_sfx_append(t, x, 40);
    sp_sfx_propose(t, x, 40, &(sp_sfx_params){ 16, 4.0f, 0.1f, 1 }, &c);
    assert_int_equal(c.match_len, 2);
    assert_int_equal(c.n, 8);
    assert_memory_equal(c.tok, x + 10, 8 * sizeof(int32_t));
    assert_float_equal(c.score, 8.0, 1e-6);
    sp_sfx_free(t);
}

/* Trees on random streams: parents valid and earlier (topological), at
 * most max_n tokens, paths at most the length cap, siblings distinct,
 * probabilities at least min_prob and not above the parent's, the score
 * their sum, and the first run a prefix of the chain proposal. */
static void test_tree_shape(void **st) {
    (void)st;
    sp_rng r = { 31337 };
    int branched = 0, same_match = 0;
    for (int round = 0; round < 400; round++) {
        const int D = 6 + (int)(sp_rng_next(&r) % 10), A = 2 + (int)(sp_rng_next(&r) % 4);
        const int L = 20 + (int)(sp_rng_next(&r) % 200);
        int32_t *s = random_seq(&r, L, A);
        sp_sfx *t = sp_sfx_create(D);
        sp_sfx_append(t, s, L);
        const sp_sfx_params p = { .max_n = 1 + (int)(sp_rng_next(&r) % SP_MAX_DRAFT),
                                  .factor = (float)(1 + sp_rng_next(&r) % 3),
                                  .min_prob = (float)((double)(sp_rng_next(&r) % 3) * 0.05),
                                  .width = 2 + (int)(sp_rng_next(&r) % 3) };
        sp_sfx_cand c, chain;
        sp_sfx_propose(t, s, L, &p, &c);
        sp_sfx_params p1 = p;
        p1.width = 1;
        sp_sfx_propose(t, s, L, &p1, &chain);
        assert_true(c.n <= p.max_n);
        const int cap = (int)((double)p.factor * c.match_len + 1e-6);
        int depth[SP_MAX_DRAFT], nroots = 0;
        double score = 0;
        for (int i = 0; i < c.n; i++) {
            assert_true(c.parent[i] >= -1 && c.parent[i] < i);
            depth[i] = c.parent[i] < 0 ? 1 : depth[c.parent[i]] + 1;
            assert_true(depth[i] <= cap);
            assert_true(c.prob[i] >= p.min_prob - 1e-6f);
            if (c.parent[i] >= 0) assert_true(c.prob[i] <= c.prob[c.parent[i]] + 1e-6f);
            else nroots++;
            for (int j = 0; j < i; j++)
                if (c.parent[j] == c.parent[i]) assert_int_not_equal(c.tok[j], c.tok[i]);
            score += c.prob[i];
        }
        assert_float_equal(c.score, score, 1e-5);
        int run = 0;
        while (run < c.n && c.parent[run] == run - 1) run++;
        if (c.match_len == chain.match_len) {     /* same match: the first run starts the chain */
            assert_true(run <= chain.n);
            assert_memory_equal(c.tok, chain.tok, (size_t)run * sizeof(int32_t));
            same_match++;
        }
        /* the tree from the chain's match already scores at least the chain */
        assert_true(c.score >= chain.score - 1e-9);
        branched += nroots > 1 || run < c.n;
        sp_sfx_free(t);
        free(s);
    }
    printf("# %d of 400 trees branched, %d from the chain's match\n", branched, same_match);
    assert_true(branched > 50);
    assert_true(same_match > 200);
}

/* ---------------------------------------------------------------------------
 * The drafter through the seam
 * ------------------------------------------------------------------------ */

static sp_draft *open_draft(sp_drafter *d) {
    sp_err err;
    sp_target t = { .model = NULL, .caps = SP_CAP_SHARED_EMBED };
    sp_draft *s = sp_draft_open(d, &t, &err);
    assert_non_null(s);
    return s;
}

/* Feeds tokens one per round without drafting (max_n = 0). */
static void feed_all(sp_draft *s, const int32_t *tok, int n) {
    sp_err err;
    sp_proposal p;
    for (int i = 0; i < n; i++) {
        assert_int_equal(s->drafter->ops->propose(s, tok + i, 1, 0, &p, &err), 0);
        assert_int_equal(p.n, 0);
    }
}

/* A repeated request drafts its earlier output from the engine-wide trie,
 * with the length growing with the match; rejected tokens never enter the
 * history. */
static void test_drafter_global(void **st) {
    (void)st;
    sp_err err;
    sp_suffix_opts o = sp_suffix_defaults();
    o.global_prompt_tail = 0;              /* outputs only */
    sp_drafter *d = sp_suffix_create(&o, &err);
    assert_non_null(d);
    assert_string_equal(d->name, "suffix");
    const int32_t prompt[] = { 100, 101, 102 };
    const int32_t out[] = { 5, 6, 7, 8, 9, 10, 11, 12 };
    sp_draft *s = open_draft(d);
    assert_int_equal(d->ops->prefill(s, prompt, 3, NULL, &err), 0);
    feed_all(s, out, 8);
    sp_draft_close(s);
    sp_suffix_info info;
    sp_suffix_global_info(d, &info);
    assert_int_equal(info.seqs, 1);
    assert_int_equal(info.tokens, 8);
    assert_int_equal(info.check, 0);

    s = open_draft(d);
    assert_int_equal(d->ops->prefill(s, prompt, 3, NULL, &err), 0);
    sp_proposal p;
    assert_int_equal(d->ops->propose(s, &out[0], 1, 8, &p, &err), 0);
    assert_int_equal(p.n, 1);              /* match "5": factor 1 -> 1 token */
    assert_int_equal(p.tokens[0], 6);
    assert_null(p.parent);
    assert_null(p.q);
    d->ops->commit(s, 1, 1, NULL, NULL);
    assert_int_equal(d->ops->propose(s, &out[2], 1, 8, &p, &err), 0);
    assert_int_equal(p.n, 3);              /* match "5 6 7" -> 8 9 10 */
    assert_memory_equal(p.tokens, out + 3, 3 * sizeof(int32_t));
    d->ops->commit(s, 3, 1, NULL, NULL);         /* 8 accepted, 9 and 10 rejected */
    const int32_t corr = 50;
    assert_int_equal(d->ops->propose(s, &corr, 1, 8, &p, &err), 0);
    assert_int_equal(p.n, 0);              /* "... 8 50" never seen */
    uint8_t *buf;
    size_t len;
    assert_int_equal(sp_draft_checkpoint(s, &buf, &len, &err), 0);
    /* the history is prompt + 5 6 7 8 50: the rejected 9 10 are not in it */
    const int32_t hist[] = { 100, 101, 102, 5, 6, 7, 8, 50 };
    const size_t hdr = sp_ckpt_header(d, NULL, 0);
    assert_int_equal(len, hdr + 4 + sizeof hist);
    assert_memory_equal(buf + hdr + 4, hist, sizeof hist);
    free(buf);
    sp_draft_close(s);
    sp_suffix_global_info(d, &info);
    assert_int_equal(info.seqs, 2);
    assert_int_equal(info.tokens, 8 + 5);      /* + 5 6 7 8 50 */
    sp_drafter_free(d);

    /* with (the tail of) the prompts in the engine-wide trie, the repeat
     * matches across the prompt/output boundary at once */
    o.global_prompt_tail = 2;
    d = sp_suffix_create(&o, &err);
    s = open_draft(d);
    d->ops->prefill(s, prompt, 3, NULL, &err);
    feed_all(s, out, 8);
    sp_draft_close(s);
    sp_suffix_global_info(d, &info);
    assert_int_equal(info.tokens, 2 + 8);
    s = open_draft(d);
    d->ops->prefill(s, prompt, 3, NULL, &err);
    assert_int_equal(d->ops->propose(s, &out[0], 1, 8, &p, &err), 0);
    assert_int_equal(p.n, 3);              /* match "101 102 5": 3 tokens */
    assert_memory_equal(p.tokens, out + 1, 3 * sizeof(int32_t));
    sp_draft_close(s);
    sp_drafter_free(d);
    o.global_prompts = true;
    d = sp_suffix_create(&o, &err);
    s = open_draft(d);
    d->ops->prefill(s, prompt, 3, NULL, &err);
    feed_all(s, out, 8);
    sp_draft_close(s);
    s = open_draft(d);
    d->ops->prefill(s, prompt, 3, NULL, &err);
    assert_int_equal(d->ops->propose(s, &out[0], 1, 8, &p, &err), 0);
    assert_int_equal(p.n, 4);              /* match "100 101 102 5": 4 tokens */
    assert_memory_equal(p.tokens, out + 1, 4 * sizeof(int32_t));
    sp_draft_close(s);
    sp_drafter_free(d);

    /* no engine-wide trie: the repeat proposes nothing */
    o = sp_suffix_defaults();
    o.global_tokens = 0;
    d = sp_suffix_create(&o, &err);
    s = open_draft(d);
    d->ops->prefill(s, prompt, 3, NULL, &err);
    feed_all(s, out, 8);
    sp_draft_close(s);
    s = open_draft(d);
    d->ops->prefill(s, prompt, 3, NULL, &err);
    assert_int_equal(d->ops->propose(s, &out[0], 1, 8, &p, &err), 0);
    assert_int_equal(p.n, 0);
    sp_draft_close(s);
    sp_drafter_free(d);
}

/* The request's own trie beats a weaker engine-wide candidate and the
 * other way round: the higher expected accepted length wins. */
static void test_drafter_picks_best(void **st) {
    (void)st;
    sp_err err;
    sp_drafter *d = sp_suffix_create(NULL, &err);
    /* engine-wide: "1 2" followed by 3 four times, by 4 once */
    const int32_t g[] = { 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 4 };
    sp_draft *s = open_draft(d);
    d->ops->prefill(s, NULL, 0, NULL, &err);
    feed_all(s, g, 19);
    sp_draft_close(s);
    /* the request has seen "1 2 4 0" once: locally 4 (prob 1), globally 3
     * (prob 4/5): the local candidate scores higher */
    const int32_t pr[] = { 1, 2, 4, 0, 9, 1 };
    s = open_draft(d);
    d->ops->prefill(s, pr, 6, NULL, &err);
    sp_proposal p;
    const int32_t two = 2;
    assert_int_equal(d->ops->propose(s, &two, 1, 1, &p, &err), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.tokens[0], 4);
    sp_draft_close(s);
    /* a request without local evidence takes the engine-wide 3 */
    const int32_t pr2[] = { 9, 1 };
    s = open_draft(d);
    d->ops->prefill(s, pr2, 2, NULL, &err);
    assert_int_equal(d->ops->propose(s, &two, 1, 1, &p, &err), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.tokens[0], 3);
    sp_draft_close(s);
    sp_drafter_free(d);
}

/* Checkpoint: a restored draft proposes exactly as the original from then
 * on; other namespaces, truncated blobs and bad prompt lengths are
 * refused with a message. */
static void test_checkpoint(void **st) {
    (void)st;
    sp_err err;
    sp_suffix_opts o = sp_suffix_defaults();
    o.global_tokens = 0;
    sp_drafter *d = sp_suffix_create(&o, &err);
    sp_rng r = { 3 };
    int32_t *h = random_seq(&r, 400, 5);
    sp_draft *a = open_draft(d);
    d->ops->prefill(a, h, 100, NULL, &err);
    feed_all(a, h + 100, 50);
    uint8_t *buf;
    size_t len;
    assert_int_equal(sp_draft_checkpoint(a, &buf, &len, &err), 0);
    assert_memory_equal(buf, "suffix-v1:", 10);
    sp_draft *b = open_draft(d);
    assert_int_equal(sp_draft_restore(b, buf, len, &err), 0);
    int compared = 0;
    for (int i = 150; i < 400; i++) {
        sp_proposal pa, pb;
        assert_int_equal(d->ops->propose(a, h + i, 1, 8, &pa, &err), 0);
        assert_int_equal(d->ops->propose(b, h + i, 1, 8, &pb, &err), 0);
        assert_int_equal(pa.n, pb.n);
        assert_memory_equal(pa.tokens, pb.tokens, (size_t)pa.n * sizeof(int32_t));
        compared += pa.n;
        const int k = pa.n ? (int)(sp_rng_next(&r) % (uint64_t)(pa.n + 1)) : 0;
        d->ops->commit(a, pa.n, k, NULL, NULL);
        d->ops->commit(b, pb.n, k, NULL, NULL);
    }
    assert_true(compared > 100);

    /* other parameters = other namespace */
    sp_suffix_opts o2 = o;
    o2.factor = 2.0f;
    sp_drafter *d2 = sp_suffix_create(&o2, &err);
    sp_draft *c = open_draft(d2);
    assert_int_equal(sp_draft_restore(c, buf, len, &err), -1);
    assert_non_null(strstr(err.msg, "does not match"));
    sp_draft_close(c);
    sp_drafter_free(d2);
    /* an ngram checkpoint */
    sp_drafter *ng = sp_ngram_create(1, 3, &err);
    sp_draft *gs = open_draft(ng);
    ng->ops->prefill(gs, h, 10, NULL, &err);
    uint8_t *nbuf;
    size_t nlen;
    assert_int_equal(sp_draft_checkpoint(gs, &nbuf, &nlen, &err), 0);
    assert_int_equal(sp_draft_restore(b, nbuf, nlen, &err), -1);
    free(nbuf);
    sp_draft_close(gs);
    sp_drafter_free(ng);
    /* truncated payload, bad prompt length, no header */
    const size_t hdr = sp_ckpt_header(d, NULL, 0);
    assert_int_equal(sp_draft_restore(b, buf, hdr + 2, &err), -1);
    assert_non_null(strstr(err.msg, "suffix checkpoint"));
    assert_int_equal(sp_draft_restore(b, buf, len - 1, &err), -1);
    uint8_t *bad = malloc(len);
    memcpy(bad, buf, len);
    const int32_t huge = 1000000;
    memcpy(bad + hdr, &huge, 4);
    assert_int_equal(sp_draft_restore(b, bad, len, &err), -1);
    assert_non_null(strstr(err.msg, "prompt length"));
    assert_int_equal(sp_draft_restore(b, (const uint8_t *)"xyz", 3, &err), -1);
    free(bad);
    /* an empty history round-trips */
    sp_draft *e = open_draft(d);
    uint8_t *ebuf;
    size_t elen;
    assert_int_equal(sp_draft_checkpoint(e, &ebuf, &elen, &err), 0);
    assert_int_equal(sp_draft_restore(b, ebuf, elen, &err), 0);
    free(ebuf);
    sp_draft_close(e);
    free(buf);
    sp_draft_close(a);
    sp_draft_close(b);
    sp_drafter_free(d);
    free(h);
}

static void test_options(void **st) {
    (void)st;
    sp_err err;
    sp_suffix_opts o = sp_suffix_defaults();
    o.max_depth = 2;
    assert_null(sp_suffix_create(&o, &err));
    assert_non_null(strstr(err.msg, "max depth"));
    o = sp_suffix_defaults();
    o.min_prob = 1.5f;
    assert_null(sp_suffix_create(&o, &err));
    o = sp_suffix_defaults();
    o.factor = 0;
    assert_null(sp_suffix_create(&o, &err));
    o = sp_suffix_defaults();
    o.tree_width = 9;
    assert_null(sp_suffix_create(&o, &err));
    /* by name, with options */
    sp_drafter_opts dopts = { .suffix_factor = 2.5f, .suffix_min_prob = 0.2f, .suffix_max_depth = 32 };
    sp_drafter *d = sp_drafter_create("suffix", &dopts, &err);
    assert_non_null(d);
    assert_string_equal(d->ns, "suffix-v1:depth=32:factor=2.5:minp=0.2:width=1");
    sp_drafter_free(d);
    dopts.suffix_max_depth = 1000;
    assert_null(sp_drafter_create("suffix", &dopts, &err));
    assert_null(sp_drafter_create("suffixx", NULL, &err));
    assert_non_null(strstr(err.msg, "suffix"));
}

/* Many requests through a small engine-wide budget: tokens and nodes stay
 * within it after every close, and the trie stays consistent. */
static void test_global_bounded(void **st) {
    (void)st;
    sp_err err;
    sp_suffix_opts o = sp_suffix_defaults();
    o.global_tokens = 500;
    o.global_nodes = 3000;
    sp_drafter *d = sp_suffix_create(&o, &err);
    sp_rng r = { 8 };
    int64_t max_nodes = 0;
    for (int req = 0; req < 150; req++) {
        const int n = 20 + (int)(sp_rng_next(&r) % 100);
        int32_t *x = random_seq(&r, n, req % 2 ? 50 : 4);
        sp_draft *s = open_draft(d);
        d->ops->prefill(s, x, 5, NULL, &err);
        feed_all(s, x + 5, n - 5);
        sp_draft_close(s);
        sp_suffix_info info;
        sp_suffix_global_info(d, &info);
        assert_int_equal(info.check, 0);
        assert_true(info.tokens <= 500 || info.seqs == 1);
        assert_true(info.nodes <= 3000 || info.seqs == 1);
        if (info.nodes > max_nodes) max_nodes = info.nodes;
        free(x);
    }
    printf("# engine-wide trie peaked at %lld nodes\n", (long long)max_nodes);
    /* a sequence longer than the budget keeps its last 500 tokens */
    int32_t *big = random_seq(&r, 2000, 1000);
    sp_draft *s = open_draft(d);
    d->ops->prefill(s, NULL, 0, NULL, &err);
    feed_all(s, big, 2000);
    sp_draft_close(s);
    sp_suffix_info info;
    sp_suffix_global_info(d, &info);
    assert_int_equal(info.seqs, 1);
    assert_int_equal(info.tokens, 500);
    free(big);
    sp_drafter_free(d);
}

/* ---------------------------------------------------------------------------
 * Concurrency: several threads drafting on one drafter
 * ------------------------------------------------------------------------ */

typedef struct worker {
    sp_drafter *d;
    uint64_t seed;
    int requests;
    int64_t proposed, bad;
} worker;

/* A request repeats one of a few "documents" with small edits, proposing
 * each round and accepting the proposal while it agrees with the text. */
static void *work(void *arg) {
    worker *w = arg;
    sp_rng r = { w->seed };
    sp_err err;
    sp_target tg = { .model = NULL, .caps = SP_CAP_SHARED_EMBED };
    int32_t doc[4][300];
    sp_rng dr = { 1234 };               /* the same documents in every thread */
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 300; i++) doc[k][i] = (int32_t)(sp_rng_next(&dr) % 200);
    for (int req = 0; req < w->requests; req++) {
        int32_t text[300];
        memcpy(text, doc[sp_rng_next(&r) % 4], sizeof text);
        for (int e = 0; e < 3; e++) text[sp_rng_next(&r) % 300] = (int32_t)(sp_rng_next(&r) % 200);
        sp_draft *s = sp_draft_open(w->d, &tg, &err);
        if (!s) { w->bad++; continue; }
        const sp_drafter_ops *ops = w->d->ops;
        ops->prefill(s, text, 10, NULL, &err);
        int i = 10;
        while (i < 300) {
            sp_proposal p;
            if (ops->propose(s, &text[i], 1, 8, &p, &err)) { w->bad++; break; }
            i++;
            if (p.n < 0 || p.n > 8) w->bad++;
            int k = 0;
            while (k < p.n && i + k < 300 && p.tokens[k] == text[i + k]) k++;
            ops->commit(s, p.n, k, NULL, NULL);
            i += k;
            w->proposed += p.n;
        }
        sp_draft_close(s);
    }
    return NULL;
}

static void test_concurrent(void **st) {
    (void)st;
    sp_err err;
    sp_suffix_opts o = sp_suffix_defaults();
    o.global_tokens = 3000;              /* small: evictions happen while others draft */
    sp_drafter *d = sp_suffix_create(&o, &err);
    enum { NT = 4 };
    pthread_t th[NT];
    worker w[NT];
    for (int i = 0; i < NT; i++) {
        w[i] = (worker){ .d = d, .seed = 100 + (uint64_t)i, .requests = 25 };
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    int64_t proposed = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].bad, 0);
        proposed += w[i].proposed;
    }
    sp_suffix_info info;
    sp_suffix_global_info(d, &info);
    assert_int_equal(info.check, 0);
    assert_true(info.tokens <= 3000);
    printf("# %lld tokens proposed by %d threads; engine-wide trie: %d sequences, %lld tokens, %lld nodes\n",
           (long long)proposed, NT, info.seqs, (long long)info.tokens, (long long)info.nodes);
    assert_true(proposed > 1000);
    sp_drafter_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trie_single_stream),
        cmocka_unit_test(test_trie_many_sequences),
        cmocka_unit_test(test_trie_evict_exact),
        cmocka_unit_test(test_propose_matches_reference),
        cmocka_unit_test(test_propose_hand),
        cmocka_unit_test(test_tree_shape),
        cmocka_unit_test(test_drafter_global),
        cmocka_unit_test(test_drafter_picks_best),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_global_bounded),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
