#!/usr/bin/env bash
# perplexity --kl-divergence-base / --kl-divergence (release build), TAP
# output: a base run against itself gives KL 0 and full top-1 agreement;
# q8_0 keys and values give a KL above 0; the base file is untrusted input:
# another text, -c or a truncated, foreign or corrupt file is refused with a
# message and a non-zero exit, never a crash; bad flag combinations exit 2.
cd "$(dirname "$0")/../.."
BIN=build/release/specula
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp

P=tests/data/perplexity.txt
ppl() { "$BIN" perplexity -m smollm2-135m -t 2 -f "$P" -c 256 --chunks 2 "$@"; }
ppl --kl-divergence-base "$tmp/base.bin" > "$tmp/o0" 2>/dev/null; rc=$?
check "a base run saves its distributions" bash -c "[ $rc -eq 0 ] && [ -s $tmp/base.bin ] && grep -q 'saved the base' $tmp/o0"
ppl --kl-divergence-base "$tmp/base.bin" --kl-divergence > "$tmp/o1" 2>/dev/null
check "the same run against it: KL 0, top-1 agreement 100 %" \
    grep -q 'mean 0.000000, .*top-1 agreement 100.00 %' "$tmp/o1"
ppl --kl-divergence-base "$tmp/base.bin" --kl-divergence -ctk q8_0 -ctv q8_0 > "$tmp/o2" 2>/dev/null
check "q8_0 keys and values: a KL above 0" bash -c "grep -q 'KL divergence vs base: mean 0.00[0-9]*[1-9]' $tmp/o2"
"$BIN" perplexity -m smollm2-135m -t 2 -f "$P" -c 128 --chunks 2 --kl-divergence-base "$tmp/base.bin" \
    --kl-divergence > /dev/null 2> "$tmp/e3"; rc=$?
check "another -c is refused naming what differs" bash -c "[ $rc -eq 1 ] && grep -q 'ctx 256/128' $tmp/e3"
head -c 3000 "$tmp/base.bin" > "$tmp/cut.bin"
ppl --kl-divergence-base "$tmp/cut.bin" --kl-divergence > /dev/null 2> "$tmp/e4"; rc=$?
check "a truncated base file is refused" bash -c "[ $rc -eq 1 ] && grep -q 'ends early' $tmp/e4"
printf 'not a base file at all' > "$tmp/junk.bin"
ppl --kl-divergence-base "$tmp/junk.bin" --kl-divergence > /dev/null 2> "$tmp/e5"; rc=$?
check "a foreign file is refused" bash -c "[ $rc -eq 1 ] && grep -q 'not a base run' $tmp/e5"
python3 - "$tmp/base.bin" "$tmp/bad.bin" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<i", b, 56, 10**9)          # after the 56-byte header: the first record's first token id, far outside the vocabulary
open(sys.argv[2], "wb").write(b)
PY
ppl --kl-divergence-base "$tmp/bad.bin" --kl-divergence > /dev/null 2> "$tmp/e6"; rc=$?
check "a record with a token outside the vocabulary is refused" bash -c "[ $rc -eq 1 ] && grep -q 'a bad record' $tmp/e6"
"$BIN" perplexity -m smollm2-135m -f "$P" --kl-divergence > /dev/null 2>&1
check "--kl-divergence without a base file exits 2" test $? -eq 2
echo "1..$n"
