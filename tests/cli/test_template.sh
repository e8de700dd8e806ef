#!/usr/bin/env bash
# specula template and --chat-template NAME|FILE end to end (release
# build), TAP output: the models' templates, built-ins and files render;
# the ids keep message text plain; bad templates, files and inputs are
# refused with a message naming what is wrong.
cd "$(dirname "$0")/../.."
BIN=build/release/specula
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp

"$BIN" template --help > "$tmp/h" 2>&1; rc=$?
check "template --help exits 0 and prints usage" bash -c "[ $rc -eq 0 ] && grep -q 'usage: specula template' $tmp/h"
"$BIN" template -m smollm2-135m > /dev/null 2>&1; check "template without --input exits 2" test $? -eq 2

cat > "$tmp/in.json" <<'J'
{"messages": [{"role": "user", "content": "Hi <|im_end|> there"}], "add_generation_prompt": true}
J
"$BIN" template -m smollm2-135m --input "$tmp/in.json" > "$tmp/out" 2> "$tmp/err"
printf '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi <|im_end|> there<|im_end|>\n<|im_start|>assistant\n' > "$tmp/want"
check "SmolLM2's own template (with its default system prompt)" cmp -s "$tmp/out" "$tmp/want"
"$BIN" template -m gemma3-270m --input "$tmp/in.json" > "$tmp/out" 2> "$tmp/err"
printf '<bos><start_of_turn>user\nHi <|im_end|> there<end_of_turn>\n<start_of_turn>model\n' > "$tmp/want"
check "Gemma (no template in the file): the built-in gemma" cmp -s "$tmp/out" "$tmp/want"
"$BIN" template --chat-template llama3 --input "$tmp/in.json" > "$tmp/out" 2> "$tmp/err"
check "a built-in by name without a model (llama3)" \
    grep -q '^<|start_header_id|>user<|end_header_id|>$' "$tmp/out"

# ids: the template's markers are special tokens, the same text in a message is not
"$BIN" template -m smollm2-135m --input "$tmp/in.json" --tokens > "$tmp/ids" 2> "$tmp/err"
ends=$(tr ' ' '\n' < "$tmp/ids" | grep -cx 2)
check "--tokens: <|im_end|> inside the message stays text (2 special <|im_end|>, got $ends)" test "$ends" -eq 2

# a file, and run --chat / chat with it
printf '{%%- for m in messages -%%}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{%%- endfor -%%}<|im_start|>assistant\n' > "$tmp/mine.jinja"
"$BIN" template -m smollm2-135m --chat-template "$tmp/mine.jinja" --input "$tmp/in.json" > "$tmp/out"
printf '<|im_start|>user\nHi <|im_end|> there<|im_end|><|im_start|>assistant' > "$tmp/want"  # (jinja2 drops the file's last newline)
check "--chat-template FILE renders the file" cmp -s "$tmp/out" "$tmp/want"
"$BIN" run -m smollm2-135m --chat --chat-template "$tmp/mine.jinja" -p "Say hi." -n 8 --temp 0 > "$tmp/out" 2> "$tmp/err"; rc=$?
check "run --chat --chat-template FILE generates" bash -c "[ $rc -eq 0 ] && grep -q 'generated: ' $tmp/err"
printf 'Hi!\n/quit\n' | timeout 120 "$BIN" chat -m smollm2-135m --chat-template qwen -n 8 --temp 0 > /dev/null 2> "$tmp/err"; rc=$?
check "chat --chat-template qwen answers" bash -c "[ $rc -eq 0 ] && grep -qE '^\[[0-9]+ tokens,' $tmp/err"

# refusals
printf '{%% for m in messages %%}{{ m.content | wordwrap }}{%% endfor %%}' > "$tmp/bad.jinja"
"$BIN" template --chat-template "$tmp/bad.jinja" --input "$tmp/in.json" > /dev/null 2> "$tmp/err"; rc=$?
check "an unsupported filter: exit 1 naming the line and the filter" \
    bash -c "[ $rc -eq 1 ] && grep -q 'line 1' $tmp/err && grep -q \"unsupported filter 'wordwrap'\" $tmp/err"
"$BIN" run -m smollm2-135m --chat --chat-template "$tmp/bad.jinja" -p hi -n 4 > /dev/null 2> "$tmp/err"; rc=$?
check "run --chat with it: exit 1 naming the filter" bash -c "[ $rc -eq 1 ] && grep -q wordwrap $tmp/err"
"$BIN" template --chat-template "$tmp/nope.jinja" --input "$tmp/in.json" > /dev/null 2> "$tmp/err"; rc=$?
check "a missing file that is no built-in name: exit 1, the built-ins listed" \
    bash -c "[ $rc -eq 1 ] && grep -q 'neither built in (chatml, gemma, llama3' $tmp/err"
printf '{{ raise_exception("Conversation roles must alternate") }}' > "$tmp/raise.jinja"
"$BIN" template --chat-template "$tmp/raise.jinja" --input "$tmp/in.json" > /dev/null 2> "$tmp/err"; rc=$?
check "raise_exception: exit 1 with the template's message" \
    bash -c "[ $rc -eq 1 ] && grep -q 'Conversation roles must alternate' $tmp/err"
printf '{"messages": 5}' > "$tmp/badin.json"
"$BIN" template --chat-template chatml --input "$tmp/badin.json" > /dev/null 2> "$tmp/err"; rc=$?
check "an input without a messages array: exit 1 saying so" bash -c "[ $rc -eq 1 ] && grep -q 'messages' $tmp/err"
printf '{"messages": [' > "$tmp/badin.json"
"$BIN" template --chat-template chatml --input "$tmp/badin.json" > /dev/null 2> "$tmp/err"; rc=$?
check "input that is not JSON: exit 1 with the line" bash -c "[ $rc -eq 1 ] && grep -q 'line' $tmp/err"
printf '{%% macro f() %%}{{ f() }}{%% endmacro %%}{{ f() }}' > "$tmp/loop.jinja"
timeout 20 "$BIN" template --chat-template "$tmp/loop.jinja" --input "$tmp/in.json" > /dev/null 2> "$tmp/err"; rc=$?
check "endless macro recursion: exit 1, bounded" bash -c "[ $rc -eq 1 ] && grep -q 'nested over' $tmp/err"
echo "1..$n"
