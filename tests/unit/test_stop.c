/* Unit tests for stop strings with streaming hold-back (tokenizer/stop.c). */
#include "test_util.h"
#include "tokenizer/tokenizer.h"

/* Feeds pieces one by one, collecting released text; returns whether a stop
 * string was hit.  out gets everything released, NUL-terminated. */
static bool feed(sp_stop *s, const char *const *pieces, int n, char *out, size_t cap) {
    size_t w = 0, len;
    bool hit = false;
    for (int i = 0; i < n && !hit; i++) {
        hit = sp_stop_push(s, pieces[i], strlen(pieces[i]));
        const char *r = sp_stop_release(s, false, &len);
        assert_true(w + len < cap);
        memcpy(out + w, r, len);
        w += len;
    }
    const char *r = sp_stop_release(s, true, &len);
    assert_true(w + len < cap);
    memcpy(out + w, r, len);
    w += len;
    out[w] = 0;
    return hit;
}

static void test_no_stops_streams_everything(void **state) {
    (void)state;
    sp_stop s;
    assert_int_equal(sp_stop_init(&s, NULL, 0, NULL), 0);
    assert_false(sp_stop_push(&s, "hello", 5));
    size_t len;
    const char *r = sp_stop_release(&s, false, &len);
    assert_int_equal(len, 5);
    assert_memory_equal(r, "hello", 5);
    r = sp_stop_release(&s, false, &len);
    assert_int_equal(len, 0);
    sp_stop_free(&s);
}

static void test_split_stop_found_before_release(void **state) {
    (void)state;
    const char *stops[] = { "END" };
    sp_stop s;
    assert_int_equal(sp_stop_init(&s, stops, 1, NULL), 0);
    size_t len;
    assert_false(sp_stop_push(&s, "abc E", 5));
    const char *r = sp_stop_release(&s, false, &len);
    assert_int_equal(len, 4);                 /* "E" held: it may start END */
    assert_memory_equal(r, "abc ", 4);
    assert_false(sp_stop_push(&s, "N", 1));
    sp_stop_release(&s, false, &len);
    assert_int_equal(len, 0);                 /* "EN" held */
    assert_true(sp_stop_push(&s, "D and more", 10));
    assert_true(sp_stop_hit(&s));
    r = sp_stop_release(&s, false, &len);
    assert_int_equal(len, 0);                 /* nothing of END is released */
    assert_true(sp_stop_push(&s, "ignored", 7));
    sp_stop_release(&s, true, &len);
    assert_int_equal(len, 0);
    sp_stop_free(&s);
}

static void test_false_start_is_released(void **state) {
    (void)state;
    const char *stops[] = { "END" };
    const char *pieces[] = { "E", "N", "x", "EN", "DING" };
    sp_stop s;
    char out[64];
    assert_int_equal(sp_stop_init(&s, stops, 1, NULL), 0);
    assert_true(feed(&s, pieces, 5, out, sizeof out));
    assert_string_equal(out, "ENx");
    sp_stop_free(&s);
}

static void test_earliest_of_several(void **state) {
    (void)state;
    /* "cd" (at 1) and "bcd" (at 0) complete in the same piece: the cut is
     * at the earliest start among the strings found. */
    const char *stops[] = { "xyz", "cd", "bcd" };
    const char *pieces[] = { "a", "bc", "de" };
    sp_stop s;
    char out[64];
    assert_int_equal(sp_stop_init(&s, stops, 3, NULL), 0);
    assert_true(feed(&s, pieces, 3, out, sizeof out));
    assert_string_equal(out, "a");
    sp_stop_free(&s);
}

static void test_no_hit_releases_all_at_end(void **state) {
    (void)state;
    const char *stops[] = { "</s>" };
    const char *pieces[] = { "x <", "/", "t> y <" };
    sp_stop s;
    char out[64];
    assert_int_equal(sp_stop_init(&s, stops, 1, NULL), 0);
    assert_false(feed(&s, pieces, 3, out, sizeof out));
    assert_string_equal(out, "x </t> y <");
    sp_stop_free(&s);
}

static void test_utf8_not_split(void **state) {
    (void)state;
    /* A stop string starting with the tail bytes of a character: the
     * release must not end inside the character. */
    const char *stops[] = { "\xa9X" };
    sp_stop s;
    assert_int_equal(sp_stop_init(&s, stops, 1, NULL), 0);
    size_t len;
    assert_false(sp_stop_push(&s, "a\xc2\xa9", 3));
    sp_stop_release(&s, false, &len);
    assert_int_equal(len, 1);                 /* "a"; the whole of U+00A9 is held */
    assert_true(sp_stop_push(&s, "X", 1));
    const char *r = sp_stop_release(&s, true, &len);
    assert_int_equal(len, 1);                 /* "\xc2" before the stop string */
    assert_int_equal((unsigned char)r[0], 0xc2);
    sp_stop_free(&s);
}

static void test_nul_bytes_and_long_text(void **state) {
    (void)state;
    const char *stops[] = { "STOP" };
    sp_stop s;
    assert_int_equal(sp_stop_init(&s, stops, 1, NULL), 0);
    size_t total = 0, len;
    for (int i = 0; i < 1000; i++) {
        assert_false(sp_stop_push(&s, "ab\0S", 4));
        sp_stop_release(&s, false, &len);
        total += len;
    }
    assert_int_equal(total, 3999);            /* the last "S" is held */
    assert_true(sp_stop_push(&s, "TOP", 3));
    sp_stop_release(&s, true, &len);
    assert_int_equal(len, 0);
    sp_stop_free(&s);
}

static void test_empty_stop_refused(void **state) {
    (void)state;
    const char *stops[] = { "ok", "" };
    sp_stop s;
    sp_err err;
    assert_int_equal(sp_stop_init(&s, stops, 2, &err), -1);
    assert_non_null(strstr(err.msg, "empty"));
}

/* Earliest start of a stop string inside text[0..n), or -1. */
static int first_stop(const char *text, int n, const char *const *stops, int ns) {
    int best = -1;
    for (int k = 0; k < ns; k++) {
        const char *h = memmem(text, (size_t)n, stops[k], strlen(stops[k]));
        if (h && (best < 0 || h - text < best)) best = (int)(h - text);
    }
    return best;
}

/* The released stream equals the text cut where generation would stop:
 * after the first piece whose text contains a stop string, at the earliest
 * stop string in the text so far.  Random texts, stop sets and pieces. */
static void test_random_against_reference(void **state) {
    (void)state;
    sp_rng rng = { 7 };
    for (int iter = 0; iter < 5000; iter++) {
        char text[64], stop_buf[3][8];
        const char *stops[3];
        int n = (int)(sp_rng_next(&rng) % 40);
        for (int i = 0; i < n; i++) text[i] = "abc"[sp_rng_next(&rng) % 3];
        text[n] = 0;
        int ns = (int)(sp_rng_next(&rng) % 4);
        for (int k = 0; k < ns; k++) {
            int L = 1 + (int)(sp_rng_next(&rng) % 4);
            for (int i = 0; i < L; i++) stop_buf[k][i] = "abc"[sp_rng_next(&rng) % 3];
            stop_buf[k][L] = 0;
            stops[k] = stop_buf[k];
        }
        int ends[64], n_pieces = 0;
        for (int i = 0; i < n;) {
            int k = 1 + (int)(sp_rng_next(&rng) % 5);
            i += k < n - i ? k : n - i;
            ends[n_pieces++] = i;
        }
        /* reference */
        int cut = n;
        for (int p = 0; p < n_pieces; p++) {
            int at = first_stop(text, ends[p], stops, ns);
            if (at >= 0) { cut = at; break; }
        }
        sp_stop s;
        assert_int_equal(sp_stop_init(&s, stops, ns, NULL), 0);
        char out[128];
        size_t w = 0, len;
        bool hit = false;
        for (int p = 0, i = 0; p < n_pieces && !hit; i = ends[p++]) {
            hit = sp_stop_push(&s, text + i, (size_t)(ends[p] - i));
            const char *r = sp_stop_release(&s, false, &len);
            memcpy(out + w, r, len);
            w += len;
            assert_true(w <= (size_t)cut);
            /* what is held back could still begin a stop string */
            if (!hit && w < (size_t)ends[p]) {
                bool prefix = false;
                for (int k = 0; k < ns; k++)
                    prefix |= !strncmp(text + w, stops[k], (size_t)ends[p] - w);
                assert_true(prefix);
            }
        }
        const char *r = sp_stop_release(&s, true, &len);
        memcpy(out + w, r, len);
        w += len;
        assert_int_equal(w, (size_t)cut);
        assert_memory_equal(out, text, (size_t)cut);
        assert_int_equal(hit, cut < n);
        sp_stop_free(&s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_stops_streams_everything),
        cmocka_unit_test(test_split_stop_found_before_release),
        cmocka_unit_test(test_false_start_is_released),
        cmocka_unit_test(test_earliest_of_several),
        cmocka_unit_test(test_no_hit_releases_all_at_end),
        cmocka_unit_test(test_utf8_not_split),
        cmocka_unit_test(test_nul_bytes_and_long_text),
        cmocka_unit_test(test_empty_stop_refused),
        cmocka_unit_test(test_random_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
