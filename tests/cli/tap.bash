# TAP helpers shared by the tests/cli scripts (sourced after they cd to the
# repository root; not a test itself: tests/run.sh runs *.sh only).
#   check NAME CMD...   "ok N - NAME" when CMD succeeds, else "not ok N - NAME"
#   ok NAME / not_ok NAME [DIAGNOSTIC LINE]...
#   $tmp                a scratch folder removed on exit
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check() { # name condition-command...
    local name="$1"; shift
    if "$@"; then ok "$name"; else not_ok "$name"; fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
