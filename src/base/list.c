/* Index lists: "0-7,28-29". */
#include "base/base.h"

#include <assert.h>
#include <string.h>

/* Reads the decimal number at *p (digits only: no sign, no spaces) into
 * *v, saturated at n so a long string of digits cannot overflow (any
 * value >= n is out of range anyway).  Returns false if *p is not a
 * digit; else moves *p past the digits. */
static bool read_index(const char **p, int n, long *v) {
    const char *s = *p;
    if (*s < '0' || *s > '9') return false;
    long x = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if (x < n) x = x * 10 + (*s - '0');
    *v = x < n ? x : n;
    *p = s;
    return true;
}

/* The error of a number that is not below n, quoting it as written. */
static int out_of_range(const char *num, const char *end, int n, sp_err *err) {
    return sp_err_set(err, "%.*s is out of range (0-%d)", (int)(end - num), num, n - 1);
}

/* Parses one item, N or N-M, at *p into [*lo, *hi]; checks the bounds. */
static int read_item(const char **p, int n, long *lo, long *hi, sp_err *err) {
    const char *s = *p;
    if (!read_index(p, n, lo)) goto syntax;
    if (*lo >= n) return out_of_range(s, *p, n, err);
    *hi = *lo;
    if (**p != '-') return 0;
    s = ++*p;
    if (!read_index(p, n, hi)) goto syntax;
    if (*hi >= n) return out_of_range(s, *p, n, err);
    if (*hi < *lo) return sp_err_set(err, "range %ld-%ld goes backwards", *lo, *hi);
    return 0;
syntax:
    if (!**p) return sp_err_set(err, "expected N or N-M at the end");
    return sp_err_set(err, "expected N or N-M at '%s'", *p);
}

int sp_parse_index_list(const char *spec, int n, bool ascending, uint8_t *keep, sp_err *err) {
    assert(spec && keep && n > 0);
    memset(keep, 0, (size_t)n);
    if (!*spec) return sp_err_set(err, "empty list");
    long prev_hi = -1;
    for (const char *p = spec;;) {
        long lo = 0, hi = 0;   /* set by read_item; initialised for the compiler */
        if (read_item(&p, n, &lo, &hi, err)) return -1;
        if (ascending && lo <= prev_hi)
            return sp_err_set(err, "%ld is listed out of order or twice (the list must be ascending)", lo);
        prev_hi = hi;
        memset(keep + lo, 1, (size_t)(hi - lo + 1));
        if (!*p) return 0;
        if (*p != ',') return sp_err_set(err, "expected ',' or the end at '%s'", p);
        p++;
    }
}
