/*
 * Shared helpers for specula's C tests (unit and real-model).
 *
 * Tests use cmocka; tests/run.sh runs every test binary with TAP output and
 * sums the results into the final "N passed, N failed" line.
 */
#ifndef SP_TEST_UTIL_H
#define SP_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/* Path of a real model in the cache (fetched by scripts/fetch-models.sh).
 * Returns a static buffer.  Tests that need a model fail, never skip, when
 * it is missing: CI fetches them. */
static inline const char *sp_test_model_path(const char *file) {
    static char buf[4096];
    const char *dir = getenv("SPECULA_MODELS");
    if (dir && *dir) {
        snprintf(buf, sizeof buf, "%s/%s", dir, file);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME");
        const char *home = getenv("HOME");
        if (xdg && *xdg) snprintf(buf, sizeof buf, "%s/specula/models/%s", xdg, file);
        else snprintf(buf, sizeof buf, "%s/.cache/specula/models/%s", home ? home : ".", file);
    }
    return buf;
}
#define SP_TEST_SMOLLM2 "SmolLM2-135M-Instruct.Q4_1.gguf"
#define SP_TEST_GEMMA3 "gemma-3-270m-q4_k_m.gguf"

/* Reads a whole file (test data) into a NUL-terminated malloc'd buffer. */
static inline char *sp_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[n] = 0; if (len) *len = (size_t)n; }
    return b;
}

#endif
