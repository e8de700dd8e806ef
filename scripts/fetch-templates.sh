#!/usr/bin/env bash
# Fetch public chat templates for the chat-template golden test
# (tests/template/test_templates.py).
#
# The vLLM 0.11.0 sdist on PyPI carries 40 Jinja chat templates
# (examples/*.jinja and vllm/transformers_utils/chat_templates/*.jinja).  The
# sdist is downloaded with curl (`pip download` would try to build its
# metadata), checked against a pinned SHA-256, and only its *.jinja files are
# kept, flattened, under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/specula/templates/vllm-0.11.0/
# Both folders hold a template_chatml.jinja: the one from examples/ keeps its
# name, the other becomes transformers_utils_template_chatml.jinja.  A marker
# file there makes a second run a quick no-op.
#
# Usage: scripts/fetch-templates.sh
set -euo pipefail

VLLM_VERSION="0.11.0"
VLLM_URL="https://files.pythonhosted.org/packages/82/5a/36d2351206f4d8d871b10780f874d03957985e08298d430cc837723e07af/vllm-$VLLM_VERSION.tar.gz"
VLLM_SHA="f435a64c24e9c4178d657a76f8edd8548ddc444012f7d06a9f79ac3a6392bfae"
VLLM_COUNT=40
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/specula/templates/vllm-$VLLM_VERSION"
MARKER="$DIR/.fetched"

die() { echo "fetch-templates: $*" >&2; exit 1; }

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required (apt-get install $2)"; }

# the marker names the sdist's hash: a folder from another sdist is refetched
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$VLLM_SHA" ]; then
    echo "templates: ok ($DIR)"
    exit 0
fi

need curl curl
need tar tar
need sha256sum coreutils
mkdir -p "$(dirname "$DIR")"
# next to $DIR, so the final rename stays on one file system
tmp=$(mktemp -d "$(dirname "$DIR")/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "templates: downloading the vllm-$VLLM_VERSION sdist from PyPI (about 11 MB)..." >&2
curl -fL --retry 3 --connect-timeout 30 -sS -o "$tmp/vllm.tar.gz" "$VLLM_URL" \
    || die "could not download $VLLM_URL.
Check network access to files.pythonhosted.org, then re-run: scripts/fetch-templates.sh"
got=$(sha256sum "$tmp/vllm.tar.gz" | cut -d' ' -f1)
[ "$got" = "$VLLM_SHA" ] || die "SHA-256 mismatch for vllm-$VLLM_VERSION.tar.gz
  expected $VLLM_SHA
  got      $got"

mkdir -p "$tmp/x" "$tmp/out"
tar -xzf "$tmp/vllm.tar.gz" -C "$tmp/x" --wildcards --no-anchored '*.jinja' \
    || die "could not extract the *.jinja files from vllm-$VLLM_VERSION.tar.gz"
top="$tmp/x/vllm-$VLLM_VERSION"
[ -d "$top/examples" ] || die "examples/ missing from vllm-$VLLM_VERSION.tar.gz"
while IFS= read -r -d '' f; do
    rel=${f#"$top"/}
    base=$(basename "$f")
    case "$rel" in
        examples/*.jinja) name="$base" ;;
        vllm/transformers_utils/chat_templates/template_chatml.jinja) name="transformers_utils_$base" ;;
        vllm/transformers_utils/chat_templates/*.jinja) name="$base" ;;
        *) continue ;;
    esac
    [ -e "$tmp/out/$name" ] && die "two templates would be named $name"
    cp "$f" "$tmp/out/$name"
done < <(find "$top" -type f -name '*.jinja' -print0)
n=$(find "$tmp/out" -type f -name '*.jinja' | wc -l)
[ "$n" -eq "$VLLM_COUNT" ] || die "expected $VLLM_COUNT templates in vllm-$VLLM_VERSION.tar.gz, found $n"

echo "$VLLM_SHA" > "$tmp/out/.fetched"
rm -rf "$DIR"
mv "$tmp/out" "$DIR"
echo "templates: ok ($DIR)"
