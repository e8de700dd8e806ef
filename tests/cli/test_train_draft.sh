#!/usr/bin/env bash
# specula train-draft end to end on a tiny budget (seconds, not a real
# training run): data from a small text folder, a head trained and written,
# then used by run --spec eagle with output equal to plain decoding; the
# data file is reused; bad options and foreign data are refused.  TAP output.
cd "$(dirname "$0")/../.."
BIN=build/release/specula
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp
mkdir -p "$tmp/text"
cp /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/GPL-3 "$tmp/text/" 2>/dev/null
python3 - "$tmp/text/notes.txt" <<'EOF'
import sys
lines = [f"Item {i}: the quick brown fox number {i} jumps over the lazy dog number {i + 1}." for i in range(300)]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF

# sequences of 160 tokens: a chat prompt (about 40 tokens of template and
# request, the rest text) must fit whole in half of one
small=(--data "$tmp/text" --tokens 1500 --seq-len 160 --draft-vocab 512 --batch 4 --eval-every 0 -t 2)
"$BIN" train-draft -m smollm2-135m -o "$tmp/h.gguf" "${small[@]}" > "$tmp/out" 2> "$tmp/err"; rc=$?
check "train-draft trains and writes a head" bash -c "[ $rc -eq 0 ] && [ -s '$tmp/h.gguf' ]"
[ $rc -ne 0 ] && tail -5 "$tmp/err" | sed 's/^/# /'
check "it prints held-out acceptance per position and the data/training times" \
    bash -c "tr '\r' '\n' < '$tmp/err' | grep -q 'held-out acceptance of a chain of 1..3 drafts' && grep -q 'wrote' '$tmp/err'"
check "the data file is kept beside the head" test -s "$tmp/h.gguf.distill"
# every answer is an answer: its prompt whole, up to the assistant header
# (before, prompts over half a sequence were cut at the end, and the model
# went on with the user's text), and no end of turn inside it
py=$(tests/tools/gguf_python.sh)
"$py" tests/tools/check_distill_answers.py \
    "${SPECULA_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specula/models}/SmolLM2-135M-Instruct.Q4_1.gguf" \
    "$tmp/h.gguf.distill" $'<|im_start|>assistant\n' '<|im_end|>' > "$tmp/ans" 2>&1
check "the data's prompts end with the assistant header and its answers hold no end of turn" grep -q '^ok:' "$tmp/ans"
grep -v '^ok:' "$tmp/ans" | sed 's/^/# /'
# --doc-share: the share of requests about a snippet of the text; every
# line of this corpus names the brown fox, no generated request does
mkdir -p "$tmp/fox" && cp "$tmp/text/notes.txt" "$tmp/fox/"
for share in 0 1; do
    "$BIN" train-draft -m smollm2-135m -o "$tmp/d$share.gguf" --data "$tmp/fox" --tokens 1000 --answer-share 1 \
        --doc-share $share --seq-len 160 --draft-vocab 256 --batch 2 --eval-every 0 -t 2 > /dev/null 2> "$tmp/e"
    "$py" tests/tools/check_distill_answers.py \
        "${SPECULA_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specula/models}/SmolLM2-135M-Instruct.Q4_1.gguf" \
        "$tmp/d$share.gguf.distill" $'<|im_start|>assistant\n' '<|im_end|>' 'brown fox' > "$tmp/ans$share" 2>&1
    echo "# --doc-share $share: $(cat "$tmp/ans$share")"
done
check "--doc-share 0: no request pastes the text" grep -Eq '^ok: [1-9][0-9]* answers, 0 pasted$' "$tmp/ans0"
check "--doc-share 1: every request pastes it" \
    bash -c "grep -Eq '^ok: ([1-9][0-9]*) answers, \\1 pasted$' '$tmp/ans1'"
"$BIN" train-draft -m smollm2-135m -o "$tmp/x.gguf" --doc-share 1.5 > /dev/null 2> "$tmp/e"; rc=$?
check "--doc-share outside [0, 1] exits 2" bash -c "[ $rc -eq 2 ] && grep -q 'doc-share' '$tmp/e'"
"$BIN" train-draft -m smollm2-135m -o "$tmp/short.gguf" --data "$tmp/text" --tokens 1000 --seq-len 32 --eval-every 0 \
    -t 2 > /dev/null 2> "$tmp/e"; rc=$?
check "sequences too short for any whole prompt are refused, saying so" \
    bash -c "[ $rc -eq 1 ] && grep -q 'no prompt fits' '$tmp/e'"
check "a checkpoint is kept" test -s "$tmp/h.gguf.ckpt"
# what llama.cpp's eagle3 loader reads, checked with llama.cpp's own gguf-py
"$py" tests/tools/check_eagle3_gguf.py "$tmp/h.gguf" 30 49152 > "$tmp/chk" 2>&1
check "the head has llama.cpp's eagle3 layout (gguf-py)" grep -q '^ok:' "$tmp/chk"
grep -v '^ok:' "$tmp/chk" | sed 's/^/# /'
types=$("$py" -c "import sys, gguf; r = gguf.GGUFReader(sys.argv[1]); print(*sorted(t.name + '=' + t.tensor_type.name for t in r.tensors if t.name in ('blk.0.attn_q.weight', 'fc.weight', 'output.weight')))" "$tmp/h.gguf")
check "its matrices are Q4_1 by default, fc stays F32" test "$types" = "blk.0.attn_q.weight=Q4_1 fc.weight=F32 output.weight=Q4_1"
echo "# $types"

p="Item 7: the quick brown fox"
"$BIN" run -m smollm2-135m -p "$p" -n 40 --temp 0 -q > "$tmp/plain" 2>/dev/null
"$BIN" run -m smollm2-135m -p "$p" -n 40 --temp 0 --spec eagle --draft-head "$tmp/h.gguf" > "$tmp/spec" 2> "$tmp/spec.err"
check "run --spec eagle with the trained head gives plain decoding's text" cmp -s "$tmp/plain" "$tmp/spec"
check "and reports its drafts" grep -q "spec eagle:" "$tmp/spec.err"
"$BIN" run -m smollm2-135m -p "$p" -n 24 --temp 0.8 --seed 5 -q > "$tmp/plain8" 2>/dev/null
"$BIN" run -m smollm2-135m -p "$p" -n 24 --temp 0.8 --seed 5 -q --spec suffix,eagle --draft-head "$tmp/h.gguf" > "$tmp/spec8" 2>/dev/null
check "suffix,eagle at T=0.8 (seeded) gives plain decoding's text" cmp -s "$tmp/plain8" "$tmp/spec8"

# prompts are made from UTF-8 text only: snippets of multi-byte text end on
# whole characters, and files in other encodings are skipped (a prompt must
# be valid UTF-8 to be rendered: before, a snippet cut inside a character
# stopped the data recording with "message 0 is not valid UTF-8")
mkdir -p "$tmp/utf8" "$tmp/latin1"
python3 - "$tmp/utf8/cjk.txt" "$tmp/latin1/l1.txt" <<'EOF2'
import sys
lines = [f"第{i}行：日本語のテキストと中文文本，ünïcödé {i} — ★ 𝄞 混合。" for i in range(200)]
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines) + "\n")
open(sys.argv[2], "wb").write(("".join(f"Caf\xe9 cr\xe8me br\xfbl\xe9e number {i}.\n" for i in range(200))).encode("latin-1"))
EOF2
"$BIN" train-draft -m smollm2-135m -o "$tmp/u.gguf" --data "$tmp/utf8" --tokens 1000 --answer-share 0.9 --seq-len 160 \
    --draft-vocab 256 --batch 2 --epochs 1 --eval-every 0 -t 2 > /dev/null 2> "$tmp/e"; rc=$?
check "prompts from multi-byte UTF-8 text end on whole characters" test $rc -eq 0
[ $rc -ne 0 ] && tail -2 "$tmp/e" | sed 's/^/# /'
"$BIN" train-draft -m smollm2-135m -o "$tmp/l.gguf" --data "$tmp/latin1" --tokens 1000 --seq-len 48 --eval-every 0 -t 2 \
    > /dev/null 2> "$tmp/e"; rc=$?
check "a folder of Latin-1 text only is refused: no usable text" bash -c "[ $rc -eq 1 ] && grep -q 'no usable text' '$tmp/e'"

# the data is reused when it matches: the second run does not record again
"$BIN" train-draft -m smollm2-135m -o "$tmp/h2.gguf" --data-file "$tmp/h.gguf.distill" "${small[@]}" > /dev/null 2> "$tmp/err2"; rc=$?
check "a matching data file is reused" bash -c "[ $rc -eq 0 ] && ! grep -q 'recording' '$tmp/err2'"
# and recorded again, saying why, when a data option differs (here --doc-share)
cp "$tmp/h.gguf.distill" "$tmp/h3.distill"
"$BIN" train-draft -m smollm2-135m -o "$tmp/h3.gguf" --data-file "$tmp/h3.distill" "${small[@]}" --doc-share 0.5 \
    > /dev/null 2> "$tmp/err3"; rc=$?
check "data recorded with other options is recorded again, saying so" \
    bash -c "[ $rc -eq 0 ] && grep -q 'other data options' '$tmp/err3' && grep -q 'recording' '$tmp/err3'"
# a head for SmolLM2 is refused for Gemma, naming both
"$BIN" run -m gemma3-270m -p hi -n 4 --spec eagle --draft-head "$tmp/h.gguf" > /dev/null 2> "$tmp/e"; rc=$?
check "a SmolLM2 head is refused for Gemma" bash -c "[ $rc -eq 1 ] && grep -q 'draft head' '$tmp/e'"
# data made by another model is refused
"$BIN" train-draft -m gemma3-270m -o "$tmp/g.gguf" --data-file "$tmp/h.gguf.distill" "${small[@]}" --tokens 1000 \
    > /dev/null 2> "$tmp/e"; rc=$?
check "data of another model is not reused (recorded again)" bash -c "grep -q 'recording' '$tmp/e' || [ $rc -ne 0 ]"
# usage errors
"$BIN" train-draft -m smollm2-135m > /dev/null 2> "$tmp/e"; rc=$?
check "no -o exits 2" bash -c "[ $rc -eq 2 ] && grep -q 'no output' '$tmp/e'"
"$BIN" train-draft -m smollm2-135m -o "$tmp/x.gguf" --ttt 9 > /dev/null 2> "$tmp/e"; rc=$?
check "--ttt out of range exits 2" test $rc -eq 2
"$BIN" train-draft -m smollm2-135m -o "$tmp/x.gguf" --answers poems > /dev/null 2> "$tmp/e"; rc=$?
check "--answers takes chat or text" bash -c "[ $rc -eq 2 ] && grep -q 'chat or text' '$tmp/e'"
"$BIN" train-draft -m smollm2-135m -o "$tmp/x.gguf" --self-requests 1.5 > /dev/null 2> "$tmp/e"; rc=$?
check "--self-requests outside [0, 1] exits 2" test $rc -eq 2
"$BIN" train-draft -m gemma3-270m -o "$tmp/x.gguf" --answers text --self-requests 0.5 > /dev/null 2> "$tmp/e"; rc=$?
check "--self-requests with --answers text exits 2, saying why" \
    bash -c "[ $rc -eq 2 ] && grep -q 'self-requests is for chat answers' '$tmp/e'"
"$BIN" train-draft -m smollm2-135m -o "$tmp/x.gguf" --topics -0.1 > /dev/null 2> "$tmp/e"; rc=$?
check "--topics outside [0, 1] exits 2" test $rc -eq 2
"$BIN" train-draft -m gemma3-270m -o "$tmp/x.gguf" --answers text --topics 0.5 > /dev/null 2> "$tmp/e"; rc=$?
check "--topics with --answers text exits 2, saying why" \
    bash -c "[ $rc -eq 2 ] && grep -q 'topics is for chat answers' '$tmp/e'"
"$BIN" train-draft -m smollm2-135m -o "$tmp/x.gguf" --head-type q3_k > /dev/null 2> "$tmp/e"; rc=$?
check "--head-type takes the listed types" bash -c "[ $rc -eq 2 ] && grep -q 'q4_1' '$tmp/e'"
# --head-type q8_0 from the checkpoint: no step left to train, the head is written again
"$BIN" train-draft -m smollm2-135m -o "$tmp/h8.gguf" --data-file "$tmp/h.gguf.distill" --resume "$tmp/h.gguf.ckpt" \
    --checkpoint "$tmp/h8.ckpt" --head-type q8_0 "${small[@]}" > /dev/null 2> "$tmp/e"; rc=$?
types=$("$py" -c "import sys, gguf; r = gguf.GGUFReader(sys.argv[1]); print(*sorted(t.name + '=' + t.tensor_type.name for t in r.tensors if t.name in ('blk.0.attn_q.weight', 'fc.weight')))" "$tmp/h8.gguf" 2>&1)
check "--head-type q8_0 rewrites a finished checkpoint's head as Q8_0" \
    bash -c "[ $rc -eq 0 ] && [ '$types' = 'blk.0.attn_q.weight=Q8_0 fc.weight=F32' ]"
"$BIN" run -m smollm2-135m -p "$p" -n 40 --temp 0 --spec eagle --draft-head "$tmp/h8.gguf" --tree-width 3 > "$tmp/spec" 2> /dev/null
check "run --spec eagle --tree-width 3 gives plain decoding's text" cmp -s "$tmp/plain" "$tmp/spec"
# --draft-min-prob 0 means no threshold (not the head file's 0.3): with
# --draft-max 3 every drafting round drafts 3 tokens (the last two may
# have fewer tokens left to make)
"$BIN" run -m smollm2-135m -p "$p" -n 40 --temp 0 --spec eagle --draft-head "$tmp/h8.gguf" --draft-max 3 \
    --draft-min-prob 0 > "$tmp/spec" 2> "$tmp/spec.err"
counts=$(sed -n 's/.*(\([0-9]*\) drafting.*drafted \([0-9]*\),.*/\1 \2/p' "$tmp/spec.err")
check "--draft-min-prob 0 drafts the full --draft-max every round, output unchanged ($counts)" \
    bash -c "set -- $counts; [ \$# -eq 2 ] && [ \$1 -ge 5 ] && [ \$2 -ge \$((3 * \$1 - 3)) ] && cmp -s '$tmp/plain' '$tmp/spec'"
"$BIN" run -m smollm2-135m -p "$p" -n 40 --temp 0.8 --seed 2 --spec eagle --draft-sample --draft-head "$tmp/h8.gguf" \
    > "$tmp/spec" 2> "$tmp/spec.err"; rc=$?
check "run --spec eagle --draft-sample at T=0.8 generates (speculative sampling)" \
    bash -c "[ $rc -eq 0 ] && [ -s '$tmp/spec' ] && grep -q 'spec eagle:' '$tmp/spec.err'"
# --norm-residual: the head records eagle3.norm_before_residual and drafts losslessly
"$BIN" train-draft -m smollm2-135m -o "$tmp/hn.gguf" --data-file "$tmp/h.gguf.distill" --checkpoint "$tmp/hn.ckpt" \
    --norm-residual "${small[@]}" > /dev/null 2> "$tmp/e"; rc=$?
nbr=$("$py" -c "import sys, gguf; r = gguf.GGUFReader(sys.argv[1]); f = r.fields['eagle3.norm_before_residual']; print(bool(f.parts[f.data[0]][0]))" "$tmp/hn.gguf" 2>&1)
check "--norm-residual writes eagle3.norm_before_residual = true" bash -c "[ $rc -eq 0 ] && [ '$nbr' = 'True' ]"
"$BIN" run -m smollm2-135m -p "$p" -n 40 --temp 0 --spec eagle --draft-head "$tmp/hn.gguf" > "$tmp/spec" 2> /dev/null
check "and run --spec eagle with it gives plain decoding's text" cmp -s "$tmp/plain" "$tmp/spec"
# --loss lk: the same data and seed give another head, which drafts losslessly
"$BIN" train-draft -m smollm2-135m -o "$tmp/hlk.gguf" --data-file "$tmp/h.gguf.distill" --checkpoint "$tmp/hlk.ckpt" \
    --loss lk "${small[@]}" > /dev/null 2> "$tmp/e"; rc=$?
same=$("$py" -c "import sys, gguf
w = [{t.name: bytes(t.data) for t in gguf.GGUFReader(f).tensors} for f in sys.argv[1:]]
print(w[0]['fc.weight'] == w[1]['fc.weight'])" "$tmp/h.gguf" "$tmp/hlk.gguf" 2>&1)
check "--loss lk trains a head other than the cross-entropy's (its weights differ)" \
    bash -c "[ $rc -eq 0 ] && [ '$same' = 'False' ]"
"$BIN" run -m smollm2-135m -p "$p" -n 40 --temp 0 --spec eagle --draft-head "$tmp/hlk.gguf" > "$tmp/spec" 2> /dev/null
check "and run --spec eagle with it gives plain decoding's text" cmp -s "$tmp/plain" "$tmp/spec"
"$BIN" train-draft -m smollm2-135m -o "$tmp/x.gguf" --loss mse > /dev/null 2> "$tmp/e"; rc=$?
check "--loss takes ce or lk" bash -c "[ $rc -eq 2 ] && grep -q 'ce or lk' '$tmp/e'"
printf 'SPDSTL01garbage' > "$tmp/bad.distill"
"$BIN" train-draft -m smollm2-135m -o "$tmp/y.gguf" --data-file "$tmp/bad.distill" --data "$tmp/text" --tokens 1000 \
    --seq-len 160 --draft-vocab 512 --eval-every 0 > /dev/null 2> "$tmp/e"; rc=$?
check "a corrupt data file is reported and made again" bash -c "[ $rc -eq 0 ] && grep -q 'unusable' '$tmp/e'"
printf 'not a checkpoint' > "$tmp/bad.ckpt"
"$BIN" train-draft -m smollm2-135m -o "$tmp/z.gguf" --data-file "$tmp/h.gguf.distill" --resume "$tmp/bad.ckpt" \
    "${small[@]}" > /dev/null 2> "$tmp/e"; rc=$?
check "a bad --resume checkpoint is an error naming it" bash -c "[ $rc -eq 1 ] && grep -q 'bad.ckpt' '$tmp/e'"
# a model with no shipped head (a renamed copy) and no --draft-head
ln -s "${XDG_CACHE_HOME:-$HOME/.cache}/specula/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$tmp/unknown.gguf"
"$BIN" run -m "$tmp/unknown.gguf" -p hi -n 4 --spec eagle > /dev/null 2> "$tmp/e"; rc=$?
check "--spec eagle without a head says what it needs" bash -c "[ $rc -ne 0 ] && grep -q 'draft-head' '$tmp/e'"
echo "1..$n"
