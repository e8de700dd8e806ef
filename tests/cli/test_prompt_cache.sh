#!/usr/bin/env bash
# run --prompt-cache (release build), TAP output: a second run of a prompt
# reuses the first run's rows from the file and prints the same answer (also
# with speculation); --prompt-cache-ro leaves the file as it was; a corrupt,
# truncated or foreign (another model's) file is ignored with a warning and
# the run still answers; bad flag combinations are usage errors.
cd "$(dirname "$0")/../.."
BIN=build/release/specula
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp

P="$(python3 -c "print('A lighthouse keeper writes in his log every night. ' * 30)") What does he write about?"
run() { "$BIN" run -m smollm2-135m -t 2 --temp 0 -n 24 -p "$P" "$@"; }
cached() { sed -n 's/^prompt: \([0-9]*\) tokens (+\([0-9]*\) cached).*/\1 \2/p' "$1"; }

run --prompt-cache "$tmp/c.bin" > "$tmp/o1" 2> "$tmp/e1"; rc=$?
check "a first run with --prompt-cache exits 0 and writes the file" bash -c "[ $rc -eq 0 ] && [ -s $tmp/c.bin ]"
read -r new1 c1 <<< "$(cached "$tmp/e1")"
check "the first run prefills the whole prompt ($new1 new, $c1 cached)" test "$c1" = 0
run --prompt-cache "$tmp/c.bin" > "$tmp/o2" 2> "$tmp/e2"
read -r new2 c2 <<< "$(cached "$tmp/e2")"
check "the second run takes all but one prompt token from the file ($new2 new, $c2 cached)" \
    bash -c "[ '$new2' = 1 ] && [ $((new2 + c2)) -eq $new1 ]"
check "and prints the same answer" cmp -s "$tmp/o1" "$tmp/o2"
run --prompt-cache "$tmp/c.bin" --spec suffix > "$tmp/o3" 2> "$tmp/e3"
check "with --spec suffix too" bash -c "cmp -s $tmp/o1 $tmp/o3 && grep -q '(+$c2 cached)' $tmp/e3"
cp "$tmp/c.bin" "$tmp/before.bin"
"$BIN" run -m smollm2-135m -t 2 --temp 0 -n 8 -p "Something else entirely." --prompt-cache "$tmp/c.bin" \
    --prompt-cache-ro > /dev/null 2>&1
check "--prompt-cache-ro leaves the file unchanged" cmp -s "$tmp/c.bin" "$tmp/before.bin"

head -c 5000 "$tmp/c.bin" > "$tmp/cut.bin"
run --prompt-cache "$tmp/cut.bin" > "$tmp/o4" 2> "$tmp/e4"; rc=$?
check "a truncated file: a warning, a cold run, the same answer" \
    bash -c "[ $rc -eq 0 ] && grep -q 'warning: prefix cache .*truncated' $tmp/e4 && grep -q '(+0 cached)' $tmp/e4 && cmp -s $tmp/o1 $tmp/o4"
python3 - "$tmp/c.bin" "$tmp/flip.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0x10
open(sys.argv[2], "wb").write(b)
PY
run --prompt-cache "$tmp/flip.bin" > "$tmp/o5" 2> "$tmp/e5"; rc=$?
check "a flipped bit: the checksum refuses it, the answer is the same" \
    bash -c "[ $rc -eq 0 ] && grep -q 'checksum mismatch' $tmp/e5 && grep -q '(+0 cached)' $tmp/e5 && cmp -s $tmp/o1 $tmp/o5"
"$BIN" run -m gemma3-270m -t 2 --temp 0 -n 4 -p "$P" --prompt-cache "$tmp/c.bin" --prompt-cache-ro \
    > /dev/null 2> "$tmp/e6"; rc=$?
check "another model's file: a warning naming both identities" \
    bash -c "[ $rc -eq 0 ] && grep -q \"made for 'model:.*', not for this engine's 'model:\" $tmp/e6"
"$BIN" run -p hi --prompt-cache-ro > /dev/null 2>&1; check "--prompt-cache-ro alone exits 2" test $? -eq 2
"$BIN" run -p hi --prompt-cache "" > /dev/null 2>&1; check "an empty --prompt-cache exits 2" test $? -eq 2
echo "1..$n"
