#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer (ASan + UBSan).
#
#   fuzz/run-fuzz.sh [SECONDS]     default 60
#
# Builds build/fuzz/fuzz_gguf (make fuzz, needs clang), writes a seed corpus
# into a temporary directory (synthetic GGUFs from fuzz/gen_seeds.c, plus the
# first 64 KiB of the SmolLM2 model if it is in the cache -- never committed),
# and runs the fuzzer.  Exits non-zero if it finds a crash, a leak, undefined
# behaviour or a timeout; the offending input is kept in build/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"

make -s fuzz
work=$(mktemp -d "${TMPDIR:-/tmp}/specula-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/seeds" build/fuzz/artifacts

${CC:-cc} -std=c11 -O1 -o "$work/gen_seeds" fuzz/gen_seeds.c
"$work/gen_seeds" "$work/seeds"
models="${SPECULA_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specula/models}"
if [ -f "$models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    head -c 65536 "$models/SmolLM2-135M-Instruct.Q4_1.gguf" > "$work/seeds/smollm2-head"
fi
echo "fuzz: $(ls "$work/seeds" | wc -l) seeds, ${secs}s" >&2

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
rc=0
build/fuzz/fuzz_gguf "$work/corpus" "$work/seeds" \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
    -dict=fuzz/gguf.dict -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "fuzz: FAILED (exit $rc); reproducer in build/fuzz/artifacts/:" >&2
    ls -t build/fuzz/artifacts/ | head -3 >&2
    exit 1
fi
echo "fuzz: no crash in ${secs}s ($(ls "$work/corpus" | wc -l) corpus entries)" >&2
