/* Errors and logging. */
#include "base/base.h"

#include <stdio.h>
#include <string.h>

int sp_log_level = 1;

int sp_err_set(sp_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int sp_err_prefix(sp_err *err, const char *fmt, ...) {
    if (err) {
        char prefix[256], old[sizeof err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, err->msg, sizeof old);
        size_t n = strlen(prefix);
        if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
        memcpy(err->msg, prefix, n);
        memcpy(err->msg + n, ": ", 2);
        size_t rest = sizeof err->msg - n - 3;
        size_t m = strnlen(old, rest);
        memcpy(err->msg + n + 2, old, m);
        err->msg[n + 2 + m] = 0;
    }
    return -1;
}

void sp_log(int level, const char *fmt, ...) {
    if (level > sp_log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}
