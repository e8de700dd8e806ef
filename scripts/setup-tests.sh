#!/usr/bin/env bash
# Installs what only specula's tests need, on top of scripts/setup.sh: the
# unit-test harness (cmocka), clang with its runtime (the libFuzzer harness),
# the aarch64 cross compiler (the portable-build test), chromium (the page
# test), and Python packages in .venv: the official `openai` client (server
# tests), `websocket-client` (drives chromium), `jsonschema` (structured
# output), `jinja2` (the chat-template golden test) and llama.cpp's `gguf`
# (checks what `specula quantize` writes); and the public chat templates that
# golden test renders (scripts/fetch-templates.sh).
# `make test` and .ci/run run it; idempotent and quick once installed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/apt-install.sh setup-tests libcmocka-dev clang libclang-rt-14-dev python3-venv gcc-aarch64-linux-gnu \
    libc6-dev-arm64-cross chromium curl
# Debian 12 refuses system-wide pip installs: the tests use .venv/bin/python.
if ! .venv/bin/python -c "import openai, websocket, jsonschema, jinja2, sys
sys.exit(tuple(map(int, jinja2.__version__.split('.')[:2])) < (3, 1))" 2>/dev/null; then
    echo "setup-tests: installing the openai, websocket-client, jsonschema and jinja2 packages into .venv" >&2
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check "openai>=1.0" "websocket-client>=1.5" "jsonschema>=4.0" \
        "jinja2>=3.1"
fi
# pinned in tests/tools/gguf_python.sh, which installs it into .venv
tests/tools/gguf_python.sh >/dev/null
scripts/fetch-templates.sh >&2
echo "setup-tests: test dependencies present" >&2
