/*
 * Incremental detokenization for streaming: the bytes of each piece are
 * appended to a tiny carry buffer and only complete UTF-8 characters are
 * released, so a character split over several tokens (byte-fallback
 * emoji, CJK) is never printed in halves.  Invalid bytes are released as
 * U+FFFD, one per maximal invalid subpart (as Python's "replace" does).
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

#define DT_FFFD "\xef\xbf\xbd"

typedef struct dt_out {
    char *buf;
    size_t cap;         /* includes the NUL */
    size_t w, n;        /* bytes written, bytes released */
    bool full;
} dt_out;

/* Appends one whole character (or U+FFFD) if it fits; once one does not,
 * the rest is counted but not written, so out never ends in half a
 * character. */
static void dt_put(dt_out *o, const char *s, size_t k) {
    if (!o->full && o->cap > 0 && o->w + k <= o->cap - 1) {
        memcpy(o->buf + o->w, s, k);
        o->w += k;
    } else {
        o->full = true;
    }
    o->n += k;
}

/* Releases the complete characters of s[0..n); a valid but incomplete tail
 * goes back to d->pending unless final (then it becomes U+FFFD). */
static void dt_release(sp_detok *d, const unsigned char *s, size_t n, bool final, dt_out *o) {
    size_t i = 0;
    d->n_pending = 0;
    while (i < n) {
        size_t bad;
        int r = sp_utf8_check(s + i, n - i, &bad);
        if (r > 0) {
            dt_put(o, (const char *)s + i, (size_t)r);
            i += (size_t)r;
        } else if (r == 0) {
            dt_put(o, DT_FFFD, 3);
            i += bad;
        } else if (final) {
            dt_put(o, DT_FFFD, 3);
            i = n;
        } else {
            memcpy(d->pending, s + i, n - i); /* at most 3 bytes */
            d->n_pending = (int)(n - i);
            i = n;
        }
    }
    if (o->cap > 0) o->buf[o->w] = 0;
}

size_t sp_detok_push(sp_detok *d, const sp_tokenizer *t, int32_t id, bool render_special,
                     char *out, size_t cap) {
    unsigned char small[256];
    size_t np = (size_t)d->n_pending;
    size_t len = sp_token_piece(t, id, render_special, NULL, 0);
    unsigned char *buf = np + len <= sizeof small ? small : sp_xmalloc(np + len);
    memcpy(buf, d->pending, np);
    sp_token_piece(t, id, render_special, (char *)buf + np, len);
    dt_out o = { .buf = out, .cap = cap };
    dt_release(d, buf, np + len, false, &o);
    if (buf != small) free(buf);
    return o.n;
}

size_t sp_detok_flush(sp_detok *d, char *out, size_t cap) {
    unsigned char buf[sizeof d->pending];
    size_t np = (size_t)d->n_pending;
    memcpy(buf, d->pending, np);
    dt_out o = { .buf = out, .cap = cap };
    dt_release(d, buf, np, true, &o);
    return o.n;
}
