#!/usr/bin/env bash
# Cross-compiles the library for aarch64 (Debian's gcc-aarch64-linux-gnu) to
# check that the portable build stays portable: every x86 SIMD path must be
# behind `#if defined(__x86_64__)` and the dispatch must fall back to the
# scalar kernels.  Compiles only (no link, nothing runs): exits non-zero on
# any warning or error.  Skips (exit 0, message) when the cross compiler is
# not installed:  apt-get install gcc-aarch64-linux-gnu
set -eu
cd "$(dirname "$0")/.."
CC=${CROSS_CC:-aarch64-linux-gnu-gcc}
if ! command -v "$CC" > /dev/null; then
    echo "check-aarch64: $CC not installed, skipped (apt-get install gcc-aarch64-linux-gnu)"
    exit 0
fi
# The tokenizer includes <pcre2.h>; the cross sysroot has no pcre2, so the
# host's header (architecture-independent) is offered on its own.
inc=$(mktemp -d)
trap 'rm -rf "$inc"' EXIT
for h in pcre2.h; do [ -f "/usr/include/$h" ] && ln -s "/usr/include/$h" "$inc/$h"; done
fail=0
for f in src/base/*.c src/gguf/*.c src/kernels/*.c src/model/*.c src/tokenizer/*.c src/sample/*.c src/speculative/*.c; do
    if ! "$CC" -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
        -Iinclude -Isrc -I"$inc" -O2 -c -o /dev/null "$f"; then
        echo "check-aarch64: $f failed"
        fail=1
    fi
done
[ $fail -eq 0 ] && echo "check-aarch64: library compiles for aarch64 ($($CC -dumpversion))"
exit $fail
