#!/usr/bin/env bash
# scripts/loadtest.sh's method list, TAP output: one server offers one
# method beyond none, ngram and suffix, so a list naming two is refused
# before anything starts (it used to print a row of refused requests).
# Lists it accepts are stopped at the next check (a binary that does not
# exist), so no server or Locust run is needed.
cd "$(dirname "$0")/../.."
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp

scripts/loadtest.sh -m lt-test-model -s "none eagle suffix,eagle" > "$tmp/out" 2> "$tmp/err"; rc=$?
check "two model-based methods: exit 2 ($rc)" test $rc -eq 2
check "the message names both" bash -c "grep -q \"'eagle' and 'suffix,eagle'\" $tmp/err"
check "nothing started: no output folder" test ! -e build/loadtest/lt-test-model

for list in "none eagle" "none ngram suffix eagle eagle" "none suffix"; do
    scripts/loadtest.sh -m lt-test-model -s "$list" -b "$tmp/no-such-binary" > /dev/null 2> "$tmp/err"; rc=$?
    check "'$list' passes the method check (stops at the missing binary, $rc)" \
        bash -c "[ $rc -eq 1 ] && grep -q 'no-such-binary missing' $tmp/err"
done
echo "1..$n"
