#!/usr/bin/env bash
# Runs the GGUF reader's libFuzzer harness for a short budget (CI) and
# reports it as one TAP test.  SPECULA_FUZZ_SECONDS overrides the budget.
cd "$(dirname "$0")/../.."
secs="${SPECULA_FUZZ_SECONDS:-60}"
if fuzz/run-fuzz.sh "$secs" > tests/artifacts/fuzz_gguf.out 2>&1; then
    echo "ok 1 - gguf fuzzer ran ${secs}s without a crash"
else
    echo "not ok 1 - gguf fuzzer found a crash or failed to run (see tests/artifacts/fuzz_gguf.out)"
    tail -n 20 tests/artifacts/fuzz_gguf.out | sed 's/^/# /'
fi
echo "1..1"
