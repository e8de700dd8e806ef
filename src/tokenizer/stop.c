/*
 * Stop strings for streamed generation.  Generated text is pushed piece by
 * piece; a byte is released only once no stop string can begin at it, so
 * a stop string split over several tokens is found before any of it is
 * shown, and the released text ends right before the first stop string.
 *
 * The hold-back is exact rather than "longest stop - 1 bytes": only the
 * longest tail of the pending text that is a proper prefix of some stop
 * string is kept, so text without a stop-string start streams at once.
 */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

int sp_stop_init(sp_stop *s, const char *const *stops, int n_stops, sp_err *err) {
    memset(s, 0, sizeof *s);
    if (n_stops < 0) return sp_err_set(err, "stop: negative count");
    for (int i = 0; i < n_stops; i++)
        if (!stops[i] || !stops[i][0]) return sp_err_set(err, "stop: stop string %d is empty", i);
    s->stops = sp_xcalloc(n_stops ? (size_t)n_stops : 1, sizeof *s->stops);
    s->lens = sp_xcalloc(n_stops ? (size_t)n_stops : 1, sizeof *s->lens);
    for (int i = 0; i < n_stops; i++) {
        s->stops[i] = sp_xstrdup(stops[i]);
        s->lens[i] = strlen(stops[i]);
    }
    s->n_stops = n_stops;
    return 0;
}

void sp_stop_free(sp_stop *s) {
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* Forgets the bytes handed out by the last release. */
static void drop_released(sp_stop *s) {
    if (!s->out_n) return;
    memmove(s->buf, s->buf + s->out_n, s->n - s->out_n);
    s->n -= s->out_n;
    s->out_n = 0;
}

/* Earliest occurrence of any stop string that ends after byte `from` of
 * the pending text (earlier bytes were searched before), or -1. */
static long find_stop(const sp_stop *s, size_t from) {
    long best = -1;
    for (int i = 0; i < s->n_stops; i++) {
        const size_t L = s->lens[i];
        if (L > s->n) continue;
        const size_t start = from >= L ? from - L + 1 : 0;
        const char *hit = memmem(s->buf + start, s->n - start, s->stops[i], L);
        if (hit && (best < 0 || hit - s->buf < best)) best = hit - s->buf;
    }
    return best;
}

bool sp_stop_push(sp_stop *s, const char *text, size_t n) {
    if (s->hit) return true;
    drop_released(s);
    SP_VEC_GROW(s->buf, s->cap, s->n + n + 1);
    const size_t from = s->n;
    memcpy(s->buf + s->n, text, n);
    s->n += n;
    s->buf[s->n] = 0;
    const long at = n ? find_stop(s, from) : -1;
    if (at < 0) return false;
    s->n = (size_t)at;
    s->buf[s->n] = 0;
    s->hit = true;
    return true;
}

/* Length of the longest tail of the pending text that is a proper prefix
 * of some stop string: those bytes may still become a stop string. */
static size_t hold_len(const sp_stop *s) {
    size_t best = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t t = s->lens[i] - 1 < s->n ? s->lens[i] - 1 : s->n;
        for (; t > best; t--)
            if (!memcmp(s->buf + s->n - t, s->stops[i], t)) { best = t; break; }
    }
    return best;
}

const char *sp_stop_release(sp_stop *s, bool final, size_t *len) {
    drop_released(s);
    size_t k = s->n;
    if (!final && !s->hit) {
        k = s->n - hold_len(s);
        /* never split a UTF-8 character */
        while (k > 0 && k < s->n && ((unsigned char)s->buf[k] & 0xC0) == 0x80) k--;
    }
    s->out_n = k;
    *len = k;
    return s->buf ? s->buf : "";
}

bool sp_stop_hit(const sp_stop *s) { return s->hit; }
