#!/usr/bin/env bash
# Runs specula's whole test suite and ends with "N passed, N failed".
#
#   unit tests   build/asan/tests/test_*   (ASan + UBSan), every binary under tests/unit
#   model tests  build/release/tests/test_* from tests/model (real models, release build);
#                test_grammar_spec again from build/asan
#   cli tests    tests/cli/*.sh            (the release binary, end to end)
#   serve tests  tests/serve/test_*.py     (`specula serve` with curl and the openai package);
#                test_serve, test_serve_http and test_tools again against build/asan/specula
#                (test_serve_asan, test_serve_http_asan: a sanitizer report fails
#                them), and test_serve_fuzz, the request fuzzer (ASan server)
#   template tests tests/template/test_*.py (`specula template` against Python's jinja2
#                on public chat templates); again against build/asan/specula (_asan)
#
# Every test binary prints TAP (cmocka's TAP output); a binary that crashes or
# exits non-zero without reporting a failure counts as one failed test.
# Usage: tests/run.sh [filter]   (filter: substring of the test binary name)
set -u
cd "$(dirname "$0")/.."
filter="${1:-}"
passed=0; failed=0; failed_names=()
export CMOCKA_MESSAGE_OUTPUT=TAP
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
mkdir -p tests/artifacts

run_one() { # name command...
    local name="$1"; shift
    [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && return
    local log="tests/artifacts/$name.log" t0=$SECONDS
    mkdir -p "$(dirname "$log")"
    "$@" > "$log" 2>&1
    local rc=$?
    local ok nok
    ok=$(grep -cE '^ok ' "$log")
    nok=$(grep -cE '^not ok ' "$log")
    passed=$((passed + ok)); failed=$((failed + nok))
    if [ "$nok" -gt 0 ]; then
        failed_names+=("$name: $(grep -E '^not ok ' "$log" | head -5 | tr '\n' ';')")
    fi
    if [ $rc -ne 0 ] && [ "$nok" -eq 0 ]; then
        failed=$((failed + 1)); failed_names+=("$name: exited with $rc")
    fi
    printf '%-32s %3d ok %3d failed  (%ds)\n' "$name" "$ok" "$nok" $((SECONDS - t0)) >&2
    if [ $rc -ne 0 ] || [ "$nok" -gt 0 ]; then tail -n 30 "$log" >&2; fi
}

for t in build/asan/tests/test_*; do
    [ -x "$t" ] || continue
    b=$(basename "$t")
    [ -f "tests/unit/$b.c" ] || continue
    run_one "unit/$b" "$t"
done
for t in build/release/tests/test_*; do
    [ -x "$t" ] || continue
    b=$(basename "$t")
    [ -f "tests/model/$b.c" ] || continue
    run_one "model/$b" "$t"
done
# the round loop under a grammar with every drafter, once more with asserts
# and ASan+UBSan (the drafters' commit protocol is asserted, not compiled
# into release)
[ -x build/asan/tests/test_grammar_spec ] && run_one "model/test_grammar_spec_asan" build/asan/tests/test_grammar_spec
for t in tests/cli/*.sh; do
    [ -f "$t" ] || continue
    run_one "cli/$(basename "$t" .sh)" bash "$t"
done
# server tests: real clients (the openai package from the venv scripts/setup.sh makes)
py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python
for t in tests/serve/test_*.py; do
    [ -f "$t" ] || continue
    run_one "serve/$(basename "$t" .py)" "$py" "$t"
done
# the same servers built with ASan+UBSan: CI sees memory errors and undefined
# behaviour in the HTTP and scheduler code (the suites check each server's report files)
for t in tests/serve/test_serve.py tests/serve/test_serve_http.py tests/serve/test_tools.py tests/serve/test_prefix_cache.py \
         tests/serve/test_endpoints.py; do
    run_one "serve/$(basename "$t" .py)_asan" env SPECULA_BIN=build/asan/specula "$py" "$t"
done
# chat templates: `specula template` byte for byte against jinja2 (the venv's),
# then once more with the ASan+UBSan binary
for t in tests/template/test_*.py; do
    [ -f "$t" ] || continue
    run_one "template/$(basename "$t" .py)" "$py" "$t"
    run_one "template/$(basename "$t" .py)_asan" env SPECULA_BIN=build/asan/specula "$py" "$t"
done

for f in "${failed_names[@]}"; do echo "FAILED $f" >&2; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
