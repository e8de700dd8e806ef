#!/usr/bin/env bash
# Installs what specula needs to build and test on Debian (12 "bookworm" or
# later).  Idempotent: packages already present are not reinstalled.
set -euo pipefail
PKGS=(build-essential pkg-config libpcre2-dev libcmocka-dev libjansson-dev libmicrohttpd-dev clang libclang-rt-14-dev
      python3 python3-pip python3-venv ca-certificates gcc-aarch64-linux-gnu libc6-dev-arm64-cross chromium)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "setup: installing ${missing[*]}" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The server tests (tests/serve) talk to `specula serve` through the official
# `openai` Python package, installed from PyPI into a venv at .venv (Debian
# 12 refuses system-wide pip installs; the tests use .venv/bin/python).
cd "$(dirname "$0")/.."
# The page test (tests/serve/test_page.py) drives Debian's chromium over the
# DevTools protocol with the `websocket-client` package; the structured-output
# tests validate what the server returns with the `jsonschema` package.
if ! .venv/bin/python -c "import openai, websocket, jsonschema" 2>/dev/null; then
    echo "setup: installing the openai, websocket-client and jsonschema packages into .venv" >&2
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check "openai>=1.0" "websocket-client>=1.5" "jsonschema>=4.0"
fi
# `specula quantize` tests check the files it writes with llama.cpp's `gguf`
# package (pinned in tests/tools/gguf_python.sh, which installs it here).
tests/tools/gguf_python.sh >/dev/null
echo "setup: build dependencies present" >&2
