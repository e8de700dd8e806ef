#!/usr/bin/env bash
# specula chat end to end (release build), TAP output: turns that keep the
# conversation cached, /spec, /reset, errors that do not end the chat, and
# Ctrl-C through a pseudo-terminal stopping an answer without leaving.
cd "$(dirname "$0")/../.."
BIN=build/release/specula
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp

"$BIN" chat --help > "$tmp/h" 2>&1; rc=$?
check "chat --help exits 0 and prints usage" bash -c "[ $rc -eq 0 ] && grep -q 'usage: specula chat' $tmp/h"
"$BIN" chat --spec bogus < /dev/null > /dev/null 2>&1; check "chat --spec bogus exits 2" test $? -eq 2

printf 'Name three fruits.\nNow three vegetables.\n/spec ngram\n/spec bogus\n/frobnicate\nAnd three colours?\n/reset\nHi!\n/quit\n' |
    timeout 300 "$BIN" chat -m smollm2-135m --temp 0 -n 32 > "$tmp/out" 2> "$tmp/err"; rc=$?
check "a piped chat session exits 0" test $rc -eq 0
mapfile -t stats < <(grep -E '^\[[0-9]+ tokens,' "$tmp/err")
check "four answers, each with its statistics (${#stats[@]})" test "${#stats[@]}" -eq 4
new_cached() { sed -n 's/.*prompt \([0-9]*\) tokens: \([0-9]*\) new, \([0-9]*\) cached.*/\1 \2 \3/p' <<< "$1"; }
read -r p1 n1 c1 <<< "$(new_cached "${stats[0]}")"
read -r p2 n2 c2 <<< "$(new_cached "${stats[1]}")"
read -r p3 n3 c3 <<< "$(new_cached "${stats[2]}")"
read -r p4 n4 c4 <<< "$(new_cached "${stats[3]}")"
check "turn 1 prefills everything ($n1 of $p1)" bash -c "[ '$c1' = 0 ] && [ '$n1' = '$p1' ]"
check "turn 2 keeps turn 1 cached and prefills only the rest ($n2 new, $c2 cached of $p2)" \
    bash -c "[ $c2 -ge $p1 ] && [ $((n2 + c2)) -eq $p2 ] && [ $n2 -lt 24 ]"
check "turn 3 (after /spec ngram) keeps turns 1-2 cached and drafts with ngram ($c3 cached)" \
    bash -c "[ $c3 -ge $p2 ] && grep -q 'spec ngram' <<< '${stats[2]}'"
check "after /reset nothing is cached ($c4)" test "$c4" = 0
check "/spec switches and says so; a bad one is an error that keeps the chat" \
    bash -c "grep -q '^\[speculation: ngram\]' $tmp/err && grep -q '^\[/spec: ' $tmp/err"
check "an unknown command lists the commands" grep -q '^\[unknown command /frobnicate: /reset' "$tmp/err"
check "the answers are on stdout" bash -c "[ \$(grep -c '^> ' $tmp/out) -ge 4 ]"

# Ctrl-C through a pseudo-terminal: stops the answer, the chat goes on
python3 - "$BIN" > "$tmp/pty" 2>&1 <<'PY'
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "chat", "-m", "smollm2-135m", "--temp", "0", "-n", "2000", "--spec", "none"])
out = b""
def read_until(pred, timeout):
    global out
    t0 = time.time()
    while time.time() - t0 < timeout and not pred(out):
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                out += os.read(fd, 4096)
            except OSError:
                break
    return pred(out)
ok = read_until(lambda o: b"> " in o, 120)
os.write(fd, b"Write a very long story about a dragon who learns to cook, in twenty chapters.\n")
ok = ok and read_until(lambda o: o.count(b" ") > 40, 120)
os.write(fd, b"\x03")
ok = ok and read_until(lambda o: b"stopped" in o, 60)
os.write(fd, b"Say hi.\n")
ok = ok and read_until(lambda o: o.count(b" tokens,") >= 2, 120)
os.write(fd, b"/quit\n")
read_until(lambda o: False, 3)
_, status = os.waitpid(pid, 0)
print("stopped" if ok else "not-stopped", "exit", os.waitstatus_to_exitcode(status))
sys.stdout.write(out.decode("utf-8", "replace")[-2000:])
PY
check "Ctrl-C stops the answer, the next message gets an answer, /quit exits 0" \
    bash -c "head -1 $tmp/pty | grep -q '^stopped exit 0$'" || sed -n '1,40p' "$tmp/pty" | sed 's/^/# /'
# eagle reads hidden states: its turns go through the prefix cache, which
# keeps the head's state beside the rows, so turn 2 prefills only the new message
printf 'Name three fruits.\nNow three vegetables.\n/quit\n' |
    timeout 300 "$BIN" chat -m smollm2-135m --temp 0 -n 24 --spec eagle > /dev/null 2> "$tmp/eerr"
mapfile -t est < <(grep -E '^\[[0-9]+ tokens,' "$tmp/eerr")
read -r ep1 en1 ec1 <<< "$(new_cached "${est[0]}")"
read -r ep2 en2 ec2 <<< "$(new_cached "${est[1]}")"
check "with eagle, turn 2 finds turn 1 in the prefix cache ($en2 new, $ec2 cached of $ep2)" \
    bash -c "[ '$ec1' = 0 ] && [ $ec2 -ge $ep1 ] && [ $((en2 + ec2)) -eq $ep2 ] && grep -q 'spec eagle' <<< '${est[1]}'"
echo "1..$n"
