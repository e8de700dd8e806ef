#!/usr/bin/env bash
# End-to-end tests of the specula command line (release build), TAP output.
cd "$(dirname "$0")/../.."
BIN=build/release/specula
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp

# usage errors exit 2 with a clear message
"$BIN" >/dev/null 2>&1; check "no command exits 2" test $? -eq 2
"$BIN" frobnicate >/dev/null 2>"$tmp/e"; rc=$?
check "unknown command exits 2 and says so" bash -c "[ $rc -eq 2 ] && grep -q \"unknown command 'frobnicate'\" $tmp/e"
"$BIN" run --bogus -p x >/dev/null 2>"$tmp/e"; rc=$?
check "unknown flag exits 2" bash -c "[ $rc -eq 2 ] && grep -q \"unknown option '--bogus'\" $tmp/e"
"$BIN" run -p x -n abc >/dev/null 2>"$tmp/e"; rc=$?
check "non-numeric -n exits 2" bash -c "[ $rc -eq 2 ] && grep -q 'expects an integer' $tmp/e"
"$BIN" run -p x --temp -1 >/dev/null 2>"$tmp/e"; rc=$?
check "negative temperature exits 2" bash -c "[ $rc -eq 2 ] && grep -q -- '--temp expects a number' $tmp/e"
"$BIN" run -p x --top-p 1.5 >/dev/null 2>&1; check "top-p > 1 exits 2" test $? -eq 2
"$BIN" run -p >/dev/null 2>"$tmp/e"; rc=$?
check "missing value exits 2" bash -c "[ $rc -eq 2 ] && grep -q 'needs a value' $tmp/e"
"$BIN" run >/dev/null 2>"$tmp/e"; rc=$?
check "missing prompt exits 2" bash -c "[ $rc -eq 2 ] && grep -q 'no prompt' $tmp/e"
for c in run info perplexity bench; do
    "$BIN" $c --help > "$tmp/h" 2>&1; rc=$?
    check "$c --help exits 0 and prints usage" bash -c "[ $rc -eq 0 ] && grep -q 'usage: specula $c' $tmp/h"
done
"$BIN" --help > "$tmp/h"; check "--help lists commands" grep -q "perplexity" "$tmp/h"

# runtime errors exit 1 with a message naming the problem
"$BIN" info -m /nonexistent.gguf >/dev/null 2>"$tmp/e"; rc=$?
check "missing model file exits 1" bash -c "[ $rc -eq 1 ] && grep -q 'no such file' $tmp/e"
XDG_CACHE_HOME="$tmp/empty" "$BIN" info -m gemma3-270m >/dev/null 2>"$tmp/e"; rc=$?
check "model not downloaded says how to fetch" bash -c "[ $rc -eq 1 ] && grep -q 'scripts/fetch-models.sh gemma3-270m' $tmp/e"
head -c 100 /dev/urandom > "$tmp/bad.gguf"
"$BIN" info -m "$tmp/bad.gguf" >/dev/null 2>"$tmp/e"; rc=$?
check "garbage file exits 1 with a gguf error" bash -c "[ $rc -eq 1 ] && grep -qi 'gguf' $tmp/e"

# an unknown architecture or tensor type is refused with the supported list
SMOL="${SPECULA_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specula/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
python3 tests/tools/patch_gguf.py "$SMOL" "$tmp/arch.gguf" arch mamba
"$BIN" info -m "$tmp/arch.gguf" >/dev/null 2>"$tmp/e"; rc=$?
check "unknown architecture lists the supported ones" bash -c "[ $rc -eq 1 ] && grep -q \"unsupported architecture 'mamba' (supported: llama, gemma3)\" $tmp/e"
rm -f "$tmp/arch.gguf"
python3 tests/tools/patch_gguf.py "$SMOL" "$tmp/type.gguf" ttype blk.3.attn_norm.weight 26
"$BIN" run -m "$tmp/type.gguf" -p hi >/dev/null 2>"$tmp/e"; rc=$?
check "unsupported tensor type lists the supported ones" bash -c "[ $rc -eq 1 ] && grep -q \"blk.3.attn_norm.weight' has unsupported type I32 (supported: F32, F16, BF16, Q4_0\" $tmp/e"
rm -f "$tmp/type.gguf"

# info
"$BIN" info -m smollm2-135m > "$tmp/i" 2>&1
check "info smollm2: llama, 30 layers, BPE, its own chat template" bash -c "grep -q 'architecture:  llama' $tmp/i && grep -q 'layers:        30' $tmp/i && grep -q 'gpt2' $tmp/i && grep -q 'chat template: the file.s tokenizer.chat_template' $tmp/i"
"$BIN" info -m gemma3-270m > "$tmp/i" 2>&1
check "info gemma3: gemma3, 18 layers, sliding window, gemma template" bash -c "grep -q 'architecture:  gemma3' $tmp/i && grep -q 'layers:        18' $tmp/i && grep -q 'window 512' $tmp/i && grep -q 'chat template: built-in gemma' $tmp/i"

# kernels and packed weights: info names the level; packing keeps the
# resident memory of a run within 5% of the plain mapped layout's
SPECULA_SIMD=scalar "$BIN" info -m smollm2-135m > "$tmp/i" 2>&1
check "info names the kernels (scalar: nothing packed)" bash -c "grep -q '^kernels:       scalar\$' $tmp/i"
SPECULA_SIMD=bogus "$BIN" info -m smollm2-135m > "$tmp/i" 2>&1
check "unknown SPECULA_SIMD is reported with the accepted values, the best level runs" bash -c "grep -q 'SPECULA_SIMD: unknown SIMD level bogus (scalar, avx2, vnni, avx512, auto); using ' $tmp/i && grep -q '^kernels: ' $tmp/i"
SPECULA_SIMD=avx512 "$BIN" info -m smollm2-135m > "$tmp/i" 2>&1
if grep -qw avx512_vnni /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
    check "SPECULA_SIMD=avx512 runs the AVX-512 VNNI kernels" grep -q '^kernels:       avx2+fma+f16c+avx512vnni ' "$tmp/i"
else
    check "SPECULA_SIMD=avx512 on a CPU without it says so" grep -q 'SPECULA_SIMD: SIMD level avx512 needs AVX-512 F/BW/VL/VNNI, which this CPU lacks; using ' "$tmp/i"
fi
if grep -qw avx2 /proc/cpuinfo; then
    "$BIN" info -m smollm2-135m > "$tmp/i" 2>&1
    check "info: SIMD kernels pack the Q4_1/Q5_0/Q8_0 matrices" grep -q '^kernels:       avx2+fma+f16c.* (Q4_1/Q5_0/Q8_0 matrices packed: ' "$tmp/i"
    SPECULA_PACK=0 "$BIN" info -m smollm2-135m > "$tmp/i" 2>&1
    check "info: SPECULA_PACK=0 keeps the matrices unpacked" grep -q '^kernels:       avx2+fma+f16c[a-z0-9+]*$' "$tmp/i"
    rss() { sed -n 's/.*peak RSS \([0-9]*\) MiB.*/\1/p' "$1"; }
    for m in smollm2-135m gemma3-270m; do
        "$BIN" run -m $m -p "The capital of France is" -n 8 --temp 0 > /dev/null 2>"$tmp/p1"
        SPECULA_PACK=0 "$BIN" run -m $m -p "The capital of France is" -n 8 --temp 0 > /dev/null 2>"$tmp/p0"
        a=$(rss "$tmp/p1"); b=$(rss "$tmp/p0")
        check "$m: packed peak RSS ${a} MiB within 5% of unpacked ${b} MiB" bash -c "[ -n '$a' ] && [ -n '$b' ] && [ \$(( $a * 100 )) -le \$(( $b * 105 )) ]"
    done
fi

# the adaptive draft length's cost curve: cached under $XDG_CACHE_HOME/specula/cost, made when
# missing, read back by the next run; a cache that cannot be made only costs a measurement
XDG_CACHE_HOME="$tmp/xdg" "$BIN" run -m "$SMOL" --spec ngram -p "The capital of France is" -n 4 --temp 0 > "$tmp/c1" 2>/dev/null; rc=$?
check "adaptive run caches its cost curve in \$XDG_CACHE_HOME/specula/cost" bash -c "[ $rc -eq 0 ] && ls $tmp/xdg/specula/cost/SmolLM2-135M-Instruct.Q4_1.gguf-*-t*.txt"
XDG_CACHE_HOME="$tmp/xdg" "$BIN" run -m "$SMOL" --spec ngram -p "The capital of France is" -n 4 --temp 0 > "$tmp/c2" 2>/dev/null; rc=$?
check "a cached cost curve is reused (same output, still one file)" bash -c "[ $rc -eq 0 ] && cmp -s $tmp/c1 $tmp/c2 && [ \$(ls $tmp/xdg/specula/cost | wc -l) -eq 1 ]"
XDG_CACHE_HOME=/dev/null/x "$BIN" run -m "$SMOL" --spec ngram -p "The capital of France is" -n 4 --temp 0 > "$tmp/c3" 2>/dev/null; rc=$?
check "an unwritable cache directory: the run measures and goes on" bash -c "[ $rc -eq 0 ] && cmp -s $tmp/c1 $tmp/c3"

# run: greedy is deterministic and stats go to stderr
"$BIN" run -m smollm2-135m -p "The capital of France is" -n 12 --temp 0 > "$tmp/o1" 2>"$tmp/s1"
"$BIN" run -m smollm2-135m -p "The capital of France is" -n 12 --temp 0 -t 1 > "$tmp/o2" 2>/dev/null
check "greedy run prints text" grep -q "Paris" "$tmp/o1"
check "greedy output identical with 1 and 2 threads" cmp -s "$tmp/o1" "$tmp/o2"
check "stats on stderr" bash -c "grep -q 'prompt: 5 tokens, prefill' $tmp/s1 && grep -q 'generated: 12 tokens, decode' $tmp/s1"
"$BIN" run -m smollm2-135m -p "Once upon a time" -n 16 --temp 0.9 --seed 42 > "$tmp/a" 2>/dev/null
"$BIN" run -m smollm2-135m -p "Once upon a time" -n 16 --temp 0.9 --seed 42 > "$tmp/b" 2>/dev/null
"$BIN" run -m smollm2-135m -p "Once upon a time" -n 16 --temp 0.9 --seed 43 > "$tmp/c" 2>/dev/null
check "same seed, same text" cmp -s "$tmp/a" "$tmp/b"
check "other seed, other text" bash -c "! cmp -s $tmp/a $tmp/c"
"$BIN" run -m smollm2-135m -p "1, 2, 3, 4," -n 30 --temp 0 --stop " 7" > "$tmp/o" 2>/dev/null
check "stop string ends output before it" bash -c "grep -q '6,' $tmp/o && ! grep -q ' 7' $tmp/o"
"$BIN" run -m smollm2-135m --chat -p "What is 2+2?" -n 40 --temp 0 > "$tmp/o" 2>"$tmp/s"
check "chat run answers and stops at end of turn" bash -c "grep -q '4' $tmp/o && grep -q 'finish: stop' $tmp/s"
"$BIN" run -m gemma3-270m -p "The capital of France is" -n 8 --temp 0 > "$tmp/o" 2>/dev/null
check "gemma3 greedy run (llama.cpp: \" the capital of the country of France\")" grep -q "the capital of the country" "$tmp/o"
printf 'The capital of France is' > "$tmp/p.txt"
"$BIN" run -m smollm2-135m -f "$tmp/p.txt" -n 12 --temp 0 > "$tmp/o3" 2>/dev/null
check "prompt from file equals -p" cmp -s "$tmp/o1" "$tmp/o3"

# speculative run: same text as plain, one-line summary on stderr
"$BIN" run -m smollm2-135m -p "1. red 2. green 3. blue 1. red 2. green 3." -n 12 --temp 0 > "$tmp/p0" 2>/dev/null
"$BIN" run -m smollm2-135m -p "1. red 2. green 3. blue 1. red 2. green 3." -n 12 --temp 0 --spec ngram --draft-max 4 > "$tmp/p1" 2>"$tmp/s1"
check "run --spec ngram equals plain" cmp -s "$tmp/p0" "$tmp/p1"
check "run --spec ngram prints the speculation summary" grep -q "^spec ngram: .* rounds .*drafted .*accepted .*mean accept len" "$tmp/s1"
"$BIN" run -p x --spec bogus >/dev/null 2>"$tmp/e"; rc=$?
check "unknown --spec exits 2" bash -c "[ $rc -eq 2 ] && grep -q \"unknown speculative method 'bogus'\" $tmp/e"
"$BIN" run -p x --draft-max 99 >/dev/null 2>&1; check "--draft-max out of range exits 2" test $? -eq 2

# bench: a two-prompt set, plain vs ngram, table + JSON, lossless
cat > "$tmp/prompts.jsonl" <<'JSONL'
{"id": "t1", "category": "transform", "messages": [{"role": "user", "content": "Repeat exactly: alpha beta gamma delta alpha beta gamma delta"}], "max_tokens": 12}

{"id": "t2", "category": "chat", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
JSONL
"$BIN" bench -m smollm2-135m --prompts "$tmp/prompts.jsonl" --methods plain,ngram --repeats 1 --warmup 0 --draft-max 4 --json "$tmp/b.json" > "$tmp/b.txt" 2>"$tmp/b.err"; rc=$?
check "bench exits 0" test $rc -eq 0
check "bench prints per-category and overall rows" bash -c "grep -q '^transform *ngram' $tmp/b.txt && grep -q '^chat *plain' $tmp/b.txt && grep -qE '^overall *ngram .* yes +[0-9.]+%$' $tmp/b.txt"
check "bench prints acceptance by draft position" grep -qE '^# ngram acceptance by draft position \(overall\): 1: [0-9]+% of [0-9]+' $tmp/b.txt
check "bench splits a target forward's time (verify, draft, sample, other) per method" grep -qE '^# time per target forward \(ms\): method verify draft sample other  plain [0-9.]+ 0.000 [0-9.]+ [0-9.]+  ngram [0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+$' $tmp/b.txt
check "bench JSON has overall speedup and acceptance" python3 -c "import json; d=json.load(open('$tmp/b.json')); o=d['overall']['ngram']; assert o['lossless'] and o['speedup']>0 and 'acceptance_rate' in o and len(d['prompts'])==2"
check "bench shows progress on stderr" grep -q "\[  2/2\]" "$tmp/b.err"
printf '{"id": "x", "category": "c", "messages": "nope", "max_tokens": 4}\n' > "$tmp/bad.jsonl"
"$BIN" bench -m smollm2-135m --prompts "$tmp/bad.jsonl" > /dev/null 2>"$tmp/e"; rc=$?
check "bench rejects a malformed prompt line with its line number" bash -c "[ $rc -eq 1 ] && grep -q 'bad.jsonl:1: expected' $tmp/e"
"$BIN" bench --methods plain,bogus >/dev/null 2>&1; check "bench unknown method exits 2" test $? -eq 2
# the verify cost after a given context, and its bad values
"$BIN" bench --verify-cost -m smollm2-135m --cost-ctx 300 > "$tmp/vc.txt" 2>"$tmp/e"; rc=$?
check "bench --verify-cost --cost-ctx 300 measures after 300 tokens, K = 1..16" bash -c "[ $rc -eq 0 ] && grep -q 'after a 300-token context' $tmp/vc.txt && grep -qE '^16 [0-9.]+$' $tmp/vc.txt"
"$BIN" bench -m smollm2-135m --cost-ctx 300 >/dev/null 2>"$tmp/e"; rc=$?
check "bench --cost-ctx without --verify-cost exits 2" bash -c "[ $rc -eq 2 ] && grep -q 'goes with --verify-cost' $tmp/e"
"$BIN" bench --verify-cost -m smollm2-135m --cost-ctx 9000 >/dev/null 2>"$tmp/e"; rc=$?
check "bench --cost-ctx past the model's context exits 1 naming the range" bash -c "[ $rc -eq 1 ] && grep -q 'out of range (1..8175' $tmp/e"

# structured output: run with a grammar or a JSON schema, the errors, and a
# bench line with a json_schema (forced spans counted, lossless)
out=$("$BIN" run -m smollm2-135m --chat -p "Is the sky blue? Answer yes or no." --temp 0 -n 8 -q \
      --grammar 'root ::= "yes" | "no"' 2>/dev/null)
check "run --grammar: the output is one of the grammar's sentences ($out)" bash -c "[ '$out' = yes ] || [ '$out' = no ]"
echo '{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}' > "$tmp/s.json"
"$BIN" run -m smollm2-135m --chat -p "Tom is 34. Give his name and age as JSON." --temp 0 -n 40 -q \
    --json-schema-file "$tmp/s.json" --spec suffix > "$tmp/o.json" 2>"$tmp/e"; rc=$?
check "run --json-schema-file --spec suffix: exits 0 and prints JSON with name and age" \
    python3 -c "import json,sys; d=json.load(open('$tmp/o.json')); sys.exit(0 if $rc == 0 and isinstance(d['name'], str) and isinstance(d['age'], int) else 1)"
"$BIN" run -m smollm2-135m -p x --grammar 'root ::= "a" (' >/dev/null 2>"$tmp/e"; rc=$?
check "run: a bad grammar exits 1 naming line and column" bash -c "[ $rc -eq 1 ] && grep -q 'grammar: line 1, column' $tmp/e"
"$BIN" run -m smollm2-135m -p x -j '{"type":"string","pattern":"a+"}' >/dev/null 2>"$tmp/e"; rc=$?
check "run: an unsupported schema keyword exits 1 naming it" bash -c "[ $rc -eq 1 ] && grep -q 'unsupported keyword \"pattern\"' $tmp/e"
"$BIN" run -p x --grammar 'root ::= "a"' -j '{}' >/dev/null 2>&1; check "run: two grammar sources exit 2" test $? -eq 2
"$BIN" run -p x --spec forced >/dev/null 2>&1; check "run --spec forced without a grammar exits 2" test $? -eq 2
cat > "$tmp/sp.jsonl" <<'JSONL'
{"id": "ex", "category": "extract", "max_tokens": 48, "messages": [{"role": "user", "content": "Extract the city and the year as JSON: the fair moved to Lyon in 1998."}], "json_schema": {"type": "object", "properties": {"city": {"type": "string"}, "year": {"type": "integer"}}, "required": ["city", "year"], "additionalProperties": false}}
JSONL
"$BIN" bench -m smollm2-135m --prompts "$tmp/sp.jsonl" --methods plain,forced,ngram --repeats 1 --warmup 0 > "$tmp/b.txt" 2>/dev/null; rc=$?
check "bench with a json_schema line: lossless, forced spans counted" bash -c "[ $rc -eq 0 ] && grep -qE '^overall *forced .* yes ' $tmp/b.txt && grep -qE '^# grammar forced: forced [1-9][0-9]* of' $tmp/b.txt && grep -qE '^# grammar plain: forced 0 of' $tmp/b.txt"
printf '{"id": "x", "category": "c", "prompt": "a", "max_tokens": 4, "json_schema": {"type": "bogus"}}\n' > "$tmp/bad.jsonl"
"$BIN" bench -m smollm2-135m --prompts "$tmp/bad.jsonl" > /dev/null 2>"$tmp/e"; rc=$?
check "bench rejects a bad json_schema naming the prompt" bash -c "[ $rc -eq 1 ] && grep -q \"prompt 'x'\" $tmp/e"

# perplexity on the first chunk, against llama.cpp's value (tests/data/perplexity-reference.json)
ref_chunk0() { python3 -c "import json,sys; d=json.load(open('tests/data/perplexity-reference.json')); print([m for m in d['models'] if m['key']==sys.argv[1]][0]['chunks'][0]['ppl'])" "$1"; }
for m in smollm2-135m gemma3-270m; do
    got=$("$BIN" perplexity -m $m -f tests/data/perplexity.txt --chunks 1 2>/dev/null | sed -n 's/^perplexity: \([0-9.]*\) .*/\1/p')
    want=$(ref_chunk0 $m)
    check "perplexity $m chunk 0 within 2% of llama.cpp ($got vs $want)" python3 -c "import sys; g,w=float('$got' or 'nan'),float('$want'); sys.exit(0 if abs(g-w)/w < 0.02 else 1)"
done
echo "1..$n"
