#!/usr/bin/env bash
# End-to-end tests of the `suffix` drafter through the command line (release
# build), TAP output: run --spec suffix, its flags, bench with suffix.
cd "$(dirname "$0")/../.."
BIN=build/release/specula
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp

P="1. red 2. green 3. blue 1. red 2. green 3. blue 1. red 2."
"$BIN" run -m smollm2-135m -p "$P" -n 24 --temp 0 > "$tmp/p0" 2>/dev/null
"$BIN" run -m smollm2-135m -p "$P" -n 24 --temp 0 --spec suffix > "$tmp/p1" 2>"$tmp/s1"
check "run --spec suffix equals plain" cmp -s "$tmp/p0" "$tmp/p1"
check "run --spec suffix prints the speculation summary" grep -q "^spec suffix: .* rounds .*drafted .*accepted .*mean accept len" "$tmp/s1"
"$BIN" run -m smollm2-135m -p "$P" -n 24 --temp 0 --spec suffix --suffix-factor 2 --suffix-min-prob 0.3 --suffix-max-depth 16 --draft-max 6 > "$tmp/p2" 2>/dev/null
check "run --spec suffix with all suffix flags equals plain" cmp -s "$tmp/p0" "$tmp/p2"
"$BIN" run -p x --spec suffix --suffix-factor 0 >/dev/null 2>"$tmp/e"; rc=$?
check "--suffix-factor 0 exits 2" bash -c "[ $rc -eq 2 ] && grep -q -- '--suffix-factor expects a number' $tmp/e"
"$BIN" run -p x --spec suffix --suffix-min-prob 2 >/dev/null 2>&1; check "--suffix-min-prob 2 exits 2" test $? -eq 2
"$BIN" run -p x --spec suffix --suffix-max-depth 3 >/dev/null 2>&1; check "--suffix-max-depth 3 exits 2" test $? -eq 2
"$BIN" run --help | grep -q -- "--spec METHOD .*suffix"; check "run --help names suffix" test $? -eq 0

cat > "$tmp/prompts.jsonl" <<'JSONL'
{"id": "r1", "category": "repeat", "messages": [{"role": "user", "content": "List the colours red, green, blue, one per line."}], "max_tokens": 16}
{"id": "r2", "category": "repeat", "messages": [{"role": "user", "content": "List the colours red, green, blue, one per line."}], "max_tokens": 16}
JSONL
"$BIN" bench -m smollm2-135m --prompts "$tmp/prompts.jsonl" --methods plain,ngram,suffix --repeats 1 --warmup 0 --json "$tmp/b.json" > "$tmp/b.txt" 2>"$tmp/b.err"; rc=$?
check "bench --methods plain,ngram,suffix exits 0" test $rc -eq 0
check "bench prints suffix rows, lossless" bash -c "grep -qE '^repeat *suffix .* yes +[0-9.]+%$' $tmp/b.txt && grep -qE '^overall *suffix .* yes +[0-9.]+%$' $tmp/b.txt"
# the second (identical) request drafts the first one's output from the engine-wide trie
check "bench JSON: suffix accepts drafts on the repeated request" python3 -c "
import json; d = json.load(open('$tmp/b.json'))
r2 = [p for p in d['prompts'] if p['id'] == 'r2'][0]['suffix']
assert d['overall']['suffix']['lossless'] and r2['acceptance_rate'] > 0.5, r2"
echo "1..$n"
