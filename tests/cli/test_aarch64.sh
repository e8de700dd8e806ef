#!/usr/bin/env bash
# The library cross-compiles for aarch64 (portable kernels, x86 SIMD behind
# #if): scripts/check-aarch64.sh as one TAP test, skipped when Debian's
# gcc-aarch64-linux-gnu is not installed.
cd "$(dirname "$0")/../.."
mkdir -p tests/artifacts
if ! command -v "${CROSS_CC:-aarch64-linux-gnu-gcc}" > /dev/null; then
    echo "ok 1 - aarch64 cross-compile # SKIP gcc-aarch64-linux-gnu not installed"
elif scripts/check-aarch64.sh > tests/artifacts/check_aarch64.out 2>&1; then
    echo "ok 1 - library cross-compiles for aarch64 without warnings"
else
    echo "not ok 1 - aarch64 cross-compile failed (see tests/artifacts/check_aarch64.out)"
    tail -n 20 tests/artifacts/check_aarch64.out | sed 's/^/# /'
fi
echo "1..1"
