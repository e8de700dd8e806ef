#!/usr/bin/env bash
# End-to-end tests of `specula quantize` (release build), TAP output:
# option errors, a byte-identical copy, SmolLM2 to Q8_0 with 10 of its 30
# blocks (loads, runs, and passes the `gguf` package's reader with every
# tensor and metadata pair as expected), full SmolLM2 Q8_0 perplexity next to
# the source's, gemma3 to Q4_0 (loads and generates), the gemma3
# sliding-window warning, and a synthetic file for the F16 fallback,
# unconvertible tensors and per-block metadata arrays.
# The gguf package comes from tests/tools/gguf_python.sh (the repository's
# .venv, set up by scripts/setup.sh, or python3 when it already has it).
cd "$(dirname "$0")/../.."
BIN=build/release/specula
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp
MODELS="${SPECULA_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specula/models}"
SMOL="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA="$MODELS/gemma-3-270m-q4_k_m.gguf"
PY=$(tests/tools/gguf_python.sh) || PY=""
check "a Python with the gguf package is available" test -n "$PY"

# --- options ----------------------------------------------------------------
"$BIN" quantize --help > "$tmp/h" 2>&1; rc=$?
check "quantize --help exits 0 and prints usage" bash -c "[ $rc -eq 0 ] && grep -q 'usage: specula quantize' $tmp/h && grep -q -- '--layers LIST' $tmp/h"
"$BIN" --help | grep -q "quantize"; check "specula --help lists quantize" test $? -eq 0
usage() { # name needle args...
    local name="$1" needle="$2"; shift 2
    "$BIN" quantize "$@" >/dev/null 2>"$tmp/e"; local rc=$?
    check "$name exits 2" bash -c "[ $rc -eq 2 ] && grep -q -- \"$needle\" $tmp/e"
}
usage "no -o" "no output file" -m smollm2-135m
usage "no -m" "no source model" -o "$tmp/x.gguf"
usage "unknown --type" "--type expects Q4_0, Q4_1" -m smollm2-135m -o "$tmp/x.gguf" --type Q3_K
usage "--layers backwards" "range 7-0 goes backwards" -m smollm2-135m -o "$tmp/x.gguf" --layers 7-0
usage "--layers not ascending" "got '0-3,2-5': 2 is listed out of order or twice" -m smollm2-135m -o "$tmp/x.gguf" --layers 0-3,2-5
usage "--layers garbage" "--layers expects ascending block numbers .* got '1,,2': expected N or N-M at ',2'" -m smollm2-135m -o "$tmp/x.gguf" --layers 1,,2
usage "--layers empty" "--layers expects ascending block numbers .*: empty list" -m smollm2-135m -o "$tmp/x.gguf" --layers ""
usage "--layers out of range" "block 30 is out of range (the model has 30 blocks: 0-29)" -m smollm2-135m -o "$tmp/x.gguf" --layers 0-30
usage "unknown option" "unknown option '--bogus'" -m smollm2-135m -o "$tmp/x.gguf" --bogus
check "no output file after usage errors" test ! -e "$tmp/x.gguf"
"$BIN" quantize -m /nonexistent.gguf -o "$tmp/x.gguf" >/dev/null 2>"$tmp/e"; rc=$?
check "missing source exits 1" bash -c "[ $rc -eq 1 ] && grep -q 'no such file' $tmp/e"
"$BIN" quantize -m smollm2-135m -o "$tmp/nodir/x.gguf" >/dev/null 2>"$tmp/e"; rc=$?
check "unwritable output exits 1 naming the path" bash -c "[ $rc -eq 1 ] && grep -q \"writing '$tmp/nodir/x.gguf': cannot create a temporary file\" $tmp/e"

# --- byte-identical copies --------------------------------------------------
"$BIN" quantize -q -m smollm2-135m -o "$tmp/copy.gguf" 2>/dev/null
check "--type keep reproduces the llama.cpp-written source byte for byte" cmp -s "$SMOL" "$tmp/copy.gguf"
"$BIN" quantize -q -m smollm2-135m -o "$tmp/copy.gguf" --layers 0-29 2>/dev/null
check "--layers with every block reproduces the source byte for byte" cmp -s "$SMOL" "$tmp/copy.gguf"
rm -f "$tmp/copy.gguf"

# --- SmolLM2: Q8_0, 10 of 30 blocks ----------------------------------------
"$BIN" quantize -m smollm2-135m -o "$tmp/s8.gguf" --type Q8_0 --layers 0-7,28-29 --name "smol draft" 2>"$tmp/e"; rc=$?
check "smollm2 Q8_0 --layers 0-7,28-29 exits 0" test $rc -eq 0
check "progress on stderr" bash -c "grep -q 'keeping 10 of 30 blocks' $tmp/e && grep -q 'blk.9.ffn_up.weight .* Q4_1 -> Q8_0' $tmp/e && grep -q 'wrote .*: 92 tensors' $tmp/e"
"$BIN" info -m "$tmp/s8.gguf" > "$tmp/i" 2>&1
check "info: 10 layers, Q8_0 and F32 only, name, tokenizer" bash -c "grep -q 'layers:        10' $tmp/i && grep -q 'tensor types: F32 x21 (0.0 MiB) Q8_0 x71' $tmp/i && grep -q 'name:          smol draft' $tmp/i && grep -q 'gpt2 (BPE, pre=smollm), 49152 tokens' $tmp/i"
"$BIN" run -m "$tmp/s8.gguf" -p "The capital of France is" -n 16 --temp 0 --ignore-eos > "$tmp/o" 2>"$tmp/s"
check "run on the 10-block model generates 16 tokens of text" bash -c "grep -q 'generated: 16 tokens' $tmp/s && [ \$(wc -c < $tmp/o) -gt 16 ]"
if [ -n "$PY" ]; then
    "$PY" tests/tools/check_quantized_gguf.py "$SMOL" "$tmp/s8.gguf" --type Q8_0 --layers 0-7,28-29 --name "smol draft" --data 24 > "$tmp/p" 2>&1
    check "gguf package: 92 tensors, types, shapes, data, metadata as expected" grep -q "^ok: .* 92 tensors (F32,Q8_0)" "$tmp/p"
    sed 's/^/# /' "$tmp/p"
fi
rm -f "$tmp/s8.gguf"

# --- SmolLM2: full Q8_0, perplexity ----------------------------------------
"$BIN" quantize -q -m smollm2-135m -o "$tmp/s8full.gguf" --type Q8_0 2>/dev/null
"$BIN" perplexity -m "$tmp/s8full.gguf" -f tests/data/perplexity.txt --chunks 1 > "$tmp/ppl" 2>&1
ppl=$(sed -n 's/^perplexity: \([0-9.]*\) over.*/\1/p' "$tmp/ppl")
# llama.cpp's perplexity of the Q4_1 source on the same chunk (tests/data/perplexity-reference.json)
ref=$(python3 -c "import json; d = json.load(open('tests/data/perplexity-reference.json')); print([m for m in d['models'] if m['key'] == 'smollm2-135m'][0]['chunks'][0]['ppl'])")
echo "# perplexity chunk 1: Q8_0 requantized $ppl, Q4_1 source (llama.cpp) $ref"
check "Q8_0 requantized perplexity within 1% of the source's" python3 -c "import sys; p, r = float('$ppl'), float('$ref'); sys.exit(abs(p / r - 1) > 0.01)"
rm -f "$tmp/s8full.gguf"

# --- gemma3: Q4_0, and the sliding-window pattern ---------------------------
"$BIN" quantize -q -m gemma3-270m -o "$tmp/g4.gguf" --type Q4_0 2>"$tmp/e"; rc=$?
check "gemma3 Q4_0 exits 0" test $rc -eq 0
"$BIN" info -m "$tmp/g4.gguf" > "$tmp/i" 2>&1
check "gemma3 Q4_0: 18 layers, Q4_0 matrices, Q8_0 embedding, 262144 tokens" bash -c "grep -q 'layers:        18' $tmp/i && grep -q 'F32 x109 .* Q4_0 x126 .* Q8_0 x1 ' $tmp/i && grep -q '262144 tokens' $tmp/i"
"$BIN" run -m "$tmp/g4.gguf" -p "The capital of France is" -n 12 --temp 0 > "$tmp/o" 2>/dev/null
echo "# gemma3 Q4_0: $(tr '\n' ' ' < "$tmp/o")"
check "gemma3 Q4_0 generates (greedy: names the capital)" grep -qi "capital" "$tmp/o"
rm -f "$tmp/g4.gguf"
"$BIN" quantize -q -m gemma3-270m -o "$tmp/g.gguf" --layers 0-3,8-9 2>"$tmp/e"
check "gemma3 --layers warns when a block changes attention kind" grep -q "1 kept block(s) change kind: 9->5 (sliding-window becomes global)" "$tmp/e"
"$BIN" quantize -q -m gemma3-270m -o "$tmp/g.gguf" --layers 0-5,12-17 2>"$tmp/e"
check "gemma3 --layers keeping the pattern does not warn" bash -c "! grep -q warning $tmp/e"
rm -f "$tmp/g.gguf"

# --- synthetic: F16 fallback, unconvertible tensors, per-block arrays -------
if [ -n "$PY" ]; then
    "$PY" tests/tools/make_toy_gguf.py "$tmp/toy.gguf"
    "$BIN" quantize -m "$tmp/toy.gguf" -o "$tmp/toy4.gguf" --type Q4_0 --layers 0,2 2>"$tmp/e"; rc=$?
    check "toy Q4_0 --layers 0,2 exits 0" test $rc -eq 0
    check "rows of 48 fall back to F16 with a notice" grep -q "notice: blk.1.odd.weight rows of 48 are not a multiple of the Q4_0 block size 32; written as F16" "$tmp/e"
    check "an I32 tensor is copied with a notice" grep -q "notice: blk.1.ids has type I32, which specula cannot convert; copied unchanged" "$tmp/e"
    check "per-block arrays are cut" grep -q "toy.attention.head_count: per-block array cut to the 2 kept blocks" "$tmp/e"
    "$PY" tests/tools/check_quantized_gguf.py "$tmp/toy.gguf" "$tmp/toy4.gguf" --type Q4_0 --layers 0,2 > "$tmp/p" 2>&1
    check "gguf package: toy output as expected (types, renumbering, cut arrays)" grep -q "^ok: .* 10 tensors (F16,F32,I32,Q4_0)" "$tmp/p"
    sed 's/^/# /' "$tmp/p"
    # the checker itself must notice a wrong block selection
    "$PY" tests/tools/check_quantized_gguf.py "$tmp/toy.gguf" "$tmp/toy4.gguf" --type Q4_0 --layers 0,1 > "$tmp/p" 2>&1
    check "gguf package check fails when told other blocks" bash -c "! grep -q '^ok:' $tmp/p && grep -q 'blk.1.ffn_up.weight: Q4_0 data differs' $tmp/p && grep -q 'toy.attention.head_count is' $tmp/p"
    "$BIN" quantize -m "$tmp/toy.gguf" -o "$tmp/toy4.gguf" --layers 3 >/dev/null 2>"$tmp/e"; rc=$?
    check "toy --layers 3 exits 2 (3 blocks)" bash -c "[ $rc -eq 2 ] && grep -q 'block 3 is out of range (the model has 3 blocks: 0-2)' $tmp/e"
fi
echo "1..$n"
