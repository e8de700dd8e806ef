/* The prefix cache (src/cache/prefix.c): rows come back exactly as stored
 * for every prefix, shared prefixes are split and shared, eviction is
 * least-recently-used and within budget, checkpoints go only to their own
 * namespace.  The rows of a fake cache are a hash of the whole prefix up to
 * their position, as a real KV row depends on the tokens before it, so any
 * row handed back for the wrong prefix shows. */
#include "test_util.h"

#include "cache/cache.h"

#include <unistd.h>

enum { NL = 3, KD = 8, CTX = 512 };

static uint16_t row_val(const int32_t *toks, int p, int il, int j) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(il * 131 + j);
    for (int i = 0; i <= p; i++) h = (h ^ (uint64_t)(uint32_t)toks[i]) * 1099511628211ull;
    return (uint16_t)((h >> 17) & 0x7BFF);    /* a finite half: the exponent never all ones */
}

/* A cache filled with the rows of toks[0..n). */
static sp_kv *kv_of(const int32_t *toks, int n) {
    sp_kv *kv = sp_kv_create_dims(NL, CTX, KD);
    for (int il = 0; il < NL; il++)
        for (int p = 0; p < n; p++)
            for (int j = 0; j < KD; j++) {
                kv->k[((size_t)il * CTX + p) * KD + j] = row_val(toks, p, il, j);
                kv->v[((size_t)il * CTX + p) * KD + j] = (uint16_t)(row_val(toks, p, il, j) ^ 0x03FF);
            }
    kv->n = n;
    return kv;
}

/* kv's rows [0, n) are those of toks. */
static void check_rows(const sp_kv *kv, const int32_t *toks, int n) {
    for (int il = 0; il < NL; il++)
        for (int p = 0; p < n; p++)
            for (int j = 0; j < KD; j++) {
                assert_int_equal(kv->k[((size_t)il * CTX + p) * KD + j], row_val(toks, p, il, j));
                assert_int_equal(kv->v[((size_t)il * CTX + p) * KD + j], (uint16_t)(row_val(toks, p, il, j) ^ 0x03FF));
            }
}

static void fill(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)(seed >> 20);
    }
}

static void test_store_then_load(void **st) {
    (void)st;
    int32_t a[80];
    fill(a, 80, 1);
    sp_pcache *pc = sp_pcache_create(NL, KD, 1 << 20, "test");
    sp_kv *src = kv_of(a, 60), *dst = sp_kv_create_dims(NL, CTX, KD);
    assert_int_equal(sp_pcache_load(pc, a, 80, 79, dst), 0);           /* empty: a miss */
    assert_int_equal(dst->n, 0);
    assert_int_equal(sp_pcache_store(pc, a, 60, src), 60);
    assert_int_equal(sp_pcache_load(pc, a, 80, 79, dst), 60);          /* the whole stored prefix */
    check_rows(dst, a, 60);
    assert_int_equal(sp_pcache_load(pc, a, 80, 25, dst), 25);          /* capped */
    assert_int_equal(dst->n, 25);
    int32_t b[80];
    memcpy(b, a, sizeof b);
    b[40] ^= 1;                                                        /* diverges at 40 */
    assert_int_equal(sp_pcache_load(pc, b, 80, 79, dst), 40);
    check_rows(dst, b, 40);
    const sp_pcache_stats s = sp_pcache_get_stats(pc);
    assert_int_equal(s.lookups, 4);
    assert_int_equal(s.hits, 3);
    assert_int_equal(s.hit_tokens, 60 + 25 + 40);
    assert_int_equal(s.stored_tokens, 60);
    sp_kv_free(src);
    sp_kv_free(dst);
    sp_pcache_free(pc);
}

/* Two prompts sharing a system prompt share its rows: the second store
 * adds only its own tokens, splitting the first edge. */
static void test_shared_prefix_split(void **st) {
    (void)st;
    int32_t a[100], b[100];
    fill(a, 100, 2);
    memcpy(b, a, 30 * sizeof(int32_t));
    fill(b + 30, 70, 3);
    sp_pcache *pc = sp_pcache_create(NL, KD, 1 << 20, "test");
    sp_kv *ka = kv_of(a, 100), *kb = kv_of(b, 100), *dst = sp_kv_create_dims(NL, CTX, KD);
    assert_int_equal(sp_pcache_store(pc, a, 100, ka), 100);
    const size_t one = sp_pcache_get_stats(pc).bytes;
    assert_int_equal(sp_pcache_store(pc, b, 100, kb), 100);
    sp_pcache_stats s = sp_pcache_get_stats(pc);
    assert_int_equal(s.nodes, 3);                                      /* shared 30, a's 70, b's 70 */
    assert_int_equal(s.stored_tokens, 170);
    assert_true(s.bytes < 2 * one);
    assert_int_equal(sp_pcache_load(pc, a, 100, 100, dst), 100);
    check_rows(dst, a, 100);
    assert_int_equal(sp_pcache_load(pc, b, 100, 100, dst), 100);
    check_rows(dst, b, 100);
    assert_int_equal(sp_pcache_store(pc, b, 60, kb), 60);              /* nothing new */
    assert_int_equal(sp_pcache_get_stats(pc).stored_tokens, 170);
    sp_pcache_clear(pc);
    assert_int_equal(sp_pcache_get_stats(pc).bytes, 0);
    assert_int_equal(sp_pcache_load(pc, a, 100, 100, dst), 0);
    sp_kv_free(ka);
    sp_kv_free(kb);
    sp_kv_free(dst);
    sp_pcache_free(pc);
}

/* Room for about two 60-token entries: the least recently used goes. */
static void test_lru_eviction(void **st) {
    (void)st;
    int32_t a[60], b[60], c[60];
    fill(a, 60, 4);
    fill(b, 60, 5);
    fill(c, 60, 6);
    sp_pcache *probe = sp_pcache_create(NL, KD, 1 << 20, "");
    const size_t budget = 2 * (60 * sp_pcache_token_bytes(probe) + 256) + 100;
    sp_pcache_free(probe);
    sp_pcache *pc = sp_pcache_create(NL, KD, budget, "test");
    sp_kv *ka = kv_of(a, 60), *kb = kv_of(b, 60), *kc = kv_of(c, 60), *dst = sp_kv_create_dims(NL, CTX, KD);
    sp_pcache_store(pc, a, 60, ka);
    sp_pcache_store(pc, c, 60, kc);
    assert_int_equal(sp_pcache_load(pc, a, 60, 60, dst), 60);          /* a is now the more recent */
    assert_int_equal(sp_pcache_store(pc, b, 60, kb), 60);
    sp_pcache_stats s = sp_pcache_get_stats(pc);
    assert_int_equal(s.evictions, 1);
    assert_true(s.bytes <= budget);
    assert_int_equal(sp_pcache_match(pc, c, 60), 0);                   /* c went */
    assert_int_equal(sp_pcache_load(pc, a, 60, 60, dst), 60);
    check_rows(dst, a, 60);
    assert_int_equal(sp_pcache_load(pc, b, 60, 60, dst), 60);
    check_rows(dst, b, 60);
    /* more than the whole budget: a prefix is stored, within budget */
    int32_t big[400];
    fill(big, 400, 7);
    sp_kv *kbig = kv_of(big, 400);
    const int got = sp_pcache_store(pc, big, 400, kbig);
    assert_true(got > 60 && got < 400);
    assert_true(sp_pcache_get_stats(pc).bytes <= budget);
    assert_int_equal(sp_pcache_load(pc, big, 400, 400, dst), got);
    check_rows(dst, big, got);
    sp_kv_free(ka);
    sp_kv_free(kb);
    sp_kv_free(kc);
    sp_kv_free(kbig);
    sp_kv_free(dst);
    sp_pcache_free(pc);
}

/* A checkpoint is found only under its own namespace, at a boundary the
 * request's prefix reaches; one put inside an edge splits it there. */
static void test_checkpoints(void **st) {
    (void)st;
    int32_t a[90];
    fill(a, 90, 8);
    sp_pcache *pc = sp_pcache_create(NL, KD, 1 << 20, "test");
    sp_kv *ka = kv_of(a, 90), *dst = sp_kv_create_dims(NL, CTX, KD);
    const uint8_t blob[5] = { 1, 2, 3, 4, 5 };
    assert_int_equal(sp_pcache_put_ckpt(pc, a, 50, "ns-a", blob, 5), -1);   /* not cached yet */
    sp_pcache_store(pc, a, 90, ka);
    assert_int_equal(sp_pcache_put_ckpt(pc, a, 50, "ns-a", blob, 5), 0);
    assert_int_equal(sp_pcache_get_stats(pc).nodes, 2);                      /* split at 50 */
    const uint8_t *got = NULL;
    size_t len = 0;
    assert_int_equal(sp_pcache_find_ckpt(pc, a, 90, 89, "ns-a", &got, &len), 50);
    assert_int_equal(len, 5);
    assert_memory_equal(got, blob, 5);
    assert_int_equal(sp_pcache_find_ckpt(pc, a, 90, 89, "ns-b", &got, &len), 0);  /* another drafter's */
    assert_int_equal(sp_pcache_find_ckpt(pc, a, 90, 49, "ns-a", &got, &len), 0);  /* beyond the limit */
    int32_t b[90];
    memcpy(b, a, sizeof b);
    b[45] ^= 1;
    assert_int_equal(sp_pcache_find_ckpt(pc, b, 90, 89, "ns-a", &got, &len), 0);  /* prefix differs */
    const uint8_t blob2[3] = { 9, 9, 9 };
    assert_int_equal(sp_pcache_put_ckpt(pc, a, 50, "ns-a", blob2, 3), 0);   /* replaced */
    assert_int_equal(sp_pcache_find_ckpt(pc, a, 90, 89, "ns-a", &got, &len), 50);
    assert_int_equal(len, 3);
    assert_memory_equal(got, blob2, 3);
    assert_int_equal(sp_pcache_load(pc, a, 90, 90, dst), 90);              /* rows intact across the split */
    check_rows(dst, a, 90);
    sp_kv_free(ka);
    sp_kv_free(dst);
    sp_pcache_free(pc);
}

/* Random stores, loads and checkpoints over a small alphabet (many shared
 * prefixes, many splits) under a tight budget: every load returns the rows
 * of its own prefix, no more than was matched, and the budget holds. */
static void test_random_against_prefix_rows(void **st) {
    (void)st;
    sp_pcache *probe = sp_pcache_create(NL, KD, 1 << 20, "");
    const size_t budget = 700 * sp_pcache_token_bytes(probe);
    sp_pcache_free(probe);
    sp_pcache *pc = sp_pcache_create(NL, KD, budget, "test");
    sp_kv *dst = sp_kv_create_dims(NL, CTX, KD);
    uint32_t r = 12345;
    int32_t t[200];
    for (int it = 0; it < 400; it++) {
        r = r * 1664525u + 1013904223u;
        const int n = 1 + (int)(r >> 8) % 200;
        for (int i = 0; i < n; i++) {
            r = r * 1664525u + 1013904223u;
            t[i] = (int32_t)((r >> 16) % (i < 20 ? 2 : 4));
        }
        r = r * 1664525u + 1013904223u;
        if ((r >> 10) % 3 == 0) {
            sp_kv *k = kv_of(t, n);
            const int got = sp_pcache_store(pc, t, n, k);
            assert_true(got >= 0 && got <= n);
            assert_true(sp_pcache_match(pc, t, n) >= got);
            if (got > 0 && (r >> 12) % 2) {
                const uint8_t b = (uint8_t)got;
                sp_pcache_put_ckpt(pc, t, got, "x", &b, 1);
            }
            sp_kv_free(k);
        } else {
            const int max = (int)(r >> 14) % (n + 1);
            const int got = sp_pcache_load(pc, t, n, max, dst);
            assert_true(got <= max);
            check_rows(dst, t, got);
            const uint8_t *blob;
            size_t len;
            const int at = sp_pcache_find_ckpt(pc, t, n, n, "x", &blob, &len);
            if (at) {
                assert_int_equal(len, 1);
                assert_int_equal(blob[0], (uint8_t)at);   /* the checkpoint of that boundary */
            }
        }
        assert_true(sp_pcache_get_stats(pc).bytes <= budget);
    }
    assert_true(sp_pcache_get_stats(pc).evictions > 0);
    sp_kv_free(dst);
    sp_pcache_free(pc);
}

/* ---- on disk ---------------------------------------------------------- */

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*n + 1);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void write_all(const char *path, const char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Rewrites the file's checksum (its last 8 bytes) for its content, so a
 * change inside passes the checksum and meets the other checks. */
static void reseal(char *b, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n - 8; i++) h = (h ^ (uint8_t)b[i]) * 1099511628211ull;
    memcpy(b + n - 8, &h, 8);
}

/* Three prompts sharing prefixes, checkpoints on two boundaries. */
static sp_pcache *sample_cache(int32_t t[3][120], size_t budget) {
    sp_pcache *pc = sp_pcache_create(NL, KD, budget, "model:abc;kv:f16");
    fill(t[0], 120, 11);
    memcpy(t[1], t[0], 50 * sizeof(int32_t));
    fill(t[1] + 50, 70, 12);
    memcpy(t[2], t[1], 80 * sizeof(int32_t));
    fill(t[2] + 80, 40, 13);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 120; j++) t[i][j] &= 0xfff;   /* within a 4096-token vocabulary */
        sp_kv *k = kv_of(t[i], 120);
        sp_pcache_store(pc, t[i], 120, k);
        sp_kv_free(k);
    }
    const uint8_t b1[3] = { 1, 2, 3 }, b2[1] = { 9 };
    assert_int_equal(sp_pcache_put_ckpt(pc, t[0], 120, "ns-a", b1, 3), 0);
    assert_int_equal(sp_pcache_put_ckpt(pc, t[1], 80, "ns-b", b2, 1), 0);
    return pc;
}

static void test_save_load(void **st) {
    (void)st;
    char path[64];
    snprintf(path, sizeof path, "/tmp/specula-pcache-%d.bin", (int)getpid());
    int32_t t[3][120];
    sp_pcache *pc = sample_cache(t, 1 << 22);
    sp_err err;
    assert_int_equal(sp_pcache_save(pc, path, &err), 0);
    sp_pcache *back = sp_pcache_create(NL, KD, 1 << 22, "model:abc;kv:f16");
    if (sp_pcache_load_file(back, path, 4096, &err)) fail_msg("%s", err.msg);
    assert_int_equal(sp_pcache_get_stats(back).nodes, sp_pcache_get_stats(pc).nodes);
    assert_int_equal(sp_pcache_get_stats(back).bytes, sp_pcache_get_stats(pc).bytes);
    sp_kv *dst = sp_kv_create_dims(NL, CTX, KD);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sp_pcache_load(back, t[i], 120, 120, dst), 120);
        check_rows(dst, t[i], 120);
    }
    const uint8_t *blob;
    size_t len;
    assert_int_equal(sp_pcache_find_ckpt(back, t[0], 120, 120, "ns-a", &blob, &len), 120);
    assert_int_equal(len, 3);
    assert_int_equal(blob[2], 3);
    assert_int_equal(sp_pcache_find_ckpt(back, t[2], 120, 120, "ns-b", &blob, &len), 80);
    assert_int_equal(sp_pcache_load_file(back, path, 4096, &err), -1);         /* not empty */
    /* another identity, another shape: refused, naming both identities */
    sp_pcache *other = sp_pcache_create(NL, KD, 1 << 22, "model:def;kv:f16");
    assert_int_equal(sp_pcache_load_file(other, path, 4096, &err), -1);
    assert_non_null(strstr(err.msg, "model:abc;kv:f16"));
    assert_non_null(strstr(err.msg, "model:def;kv:f16"));
    sp_pcache_free(other);
    other = sp_pcache_create(NL, KD + 1, 1 << 22, "model:abc;kv:f16");
    assert_int_equal(sp_pcache_load_file(other, path, 4096, &err), -1);
    assert_int_equal(sp_pcache_get_stats(other).nodes, 0);
    sp_pcache_free(other);
    /* a small budget: what fits, parents first, exact rows */
    const size_t small = 130 * sp_pcache_token_bytes(pc);
    other = sp_pcache_create(NL, KD, small, "model:abc;kv:f16");
    assert_int_equal(sp_pcache_load_file(other, path, 4096, &err), 0);
    assert_true(sp_pcache_get_stats(other).bytes <= small && sp_pcache_get_stats(other).nodes > 0);
    for (int i = 0; i < 3; i++) {
        const int got = sp_pcache_load(other, t[i], 120, 120, dst);
        assert_true(got >= 50);                                                   /* the shared part */
        check_rows(dst, t[i], got);
    }
    sp_pcache_free(other);
    /* tokens outside a smaller vocabulary */
    other = sp_pcache_create(NL, KD, 1 << 22, "model:abc;kv:f16");
    assert_int_equal(sp_pcache_load_file(other, path, 100, &err), -1);
    assert_non_null(strstr(err.msg, "vocabulary"));
    assert_int_equal(sp_pcache_get_stats(other).nodes, 0);
    sp_pcache_free(other);
    sp_kv_free(dst);
    sp_pcache_free(back);
    sp_pcache_free(pc);
    unlink(path);
}

/* Corrupt files: every mutation (bit flips, truncation, appended bytes,
 * changed counts, resealed with a valid checksum or not) is refused or
 * loads a cache whose rows are still those of their prefixes; never a
 * crash (this runs under ASan and UBSan). */
static void test_load_fuzz(void **st) {
    (void)st;
    char path[64], bad[64];
    snprintf(path, sizeof path, "/tmp/specula-pcache-%d.bin", (int)getpid());
    snprintf(bad, sizeof bad, "/tmp/specula-pcache-%d.bad", (int)getpid());
    int32_t t[3][120];
    sp_pcache *pc = sample_cache(t, 1 << 22);
    sp_err err;
    assert_int_equal(sp_pcache_save(pc, path, &err), 0);
    sp_pcache_free(pc);
    size_t n;
    char *orig = read_all(path, &n);
    char *b = malloc(n + 64);
    uint32_t r = 777;
    int refused = 0, loaded = 0;
    sp_kv *dst = sp_kv_create_dims(NL, CTX, KD);
    for (int it = 0; it < 3000; it++) {
        memcpy(b, orig, n);
        size_t m = n;
        r = r * 1664525u + 1013904223u;
        const int kind = (int)(r >> 28) % 5;
        r = r * 1664525u + 1013904223u;
        const size_t at = (size_t)(r >> 4) % n;
        if (kind == 0) b[at] ^= (char)(1u << (r & 7));                    /* a bit */
        else if (kind == 1) m = at;                                        /* truncated */
        else if (kind == 2) { memset(b + n, (int)(r & 0xff), 1 + (r & 31)); m = n + 1 + (r & 31); }
        else {                                                             /* resealed: passes the checksum */
            if (kind == 3) b[at] ^= (char)(1u << (r & 7));
            else {                                                         /* a u32 field near the start */
                const size_t f = 8 + 4 * ((r >> 8) % 12);
                const uint32_t v = r;
                memcpy(b + f, &v, 4);
            }
            reseal(b, n);
        }
        write_all(bad, b, m);
        sp_pcache *x = sp_pcache_create(NL, KD, 1 << 22, "model:abc;kv:f16");
        if (sp_pcache_load_file(x, bad, 4096, &err)) {
            refused++;
            assert_int_equal(sp_pcache_get_stats(x).nodes, 0);
            assert_int_equal(sp_pcache_get_stats(x).bytes, 0);
        } else {
            loaded++;                                                      /* a resealed change in a row */
            for (int i = 0; i < 3; i++) sp_pcache_load(x, t[i], 120, 120, dst);
        }
        sp_pcache_free(x);
    }
    printf("# %d corrupt files refused, %d loaded (resealed row bytes)\n", refused, loaded);
    assert_true(refused > 2000);
    sp_kv_free(dst);
    free(b);
    free(orig);
    unlink(path);
    unlink(bad);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_then_load),
        cmocka_unit_test(test_shared_prefix_split),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_checkpoints),
        cmocka_unit_test(test_random_against_prefix_rows),
        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_load_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
