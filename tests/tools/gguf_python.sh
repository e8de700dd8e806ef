#!/usr/bin/env bash
# Prints the path of a Python interpreter that imports the `gguf` package
# (llama.cpp's gguf-py, from PyPI) at the pinned version, for tests that
# check our GGUF files with an independent reader.  In order:
#   1. $SPECULA_GGUF_PYTHON, if set;
#   2. the repository's venv .venv/bin/python (made by scripts/setup.sh), or
#      python3, if it already has the package;
#   3. otherwise installs it into .venv (creating the venv if needed, with
#      `python3 -m venv`: Debian's python3-venv, from scripts/setup.sh).
# A venv rather than `pip install --user`: Debian 12's system Python refuses
# user installs (PEP 668, "externally managed environment").
# Exits non-zero with a message on stderr when none can be had.
set -euo pipefail
cd "$(dirname "$0")/../.."
GGUF_VERSION=0.19.0
VENV=.venv

has_gguf() { # python
    "$1" -c "import importlib.metadata as m, sys, gguf; sys.exit(m.version('gguf') != '$GGUF_VERSION')" 2>/dev/null
}

if [ -n "${SPECULA_GGUF_PYTHON:-}" ]; then echo "$SPECULA_GGUF_PYTHON"; exit 0; fi
if has_gguf "$VENV/bin/python"; then echo "$PWD/$VENV/bin/python"; exit 0; fi
if has_gguf python3; then command -v python3; exit 0; fi
echo "gguf_python: installing gguf==$GGUF_VERSION from PyPI into $VENV" >&2
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2 \
    || { echo "gguf_python: python3 -m venv failed (apt-get install python3-venv)" >&2; exit 1; }
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "gguf==$GGUF_VERSION" >&2 \
    || { echo "gguf_python: pip install gguf==$GGUF_VERSION failed (network access to PyPI?)" >&2; exit 1; }
has_gguf "$VENV/bin/python" || { echo "gguf_python: gguf does not import in $VENV" >&2; exit 1; }
echo "$PWD/$VENV/bin/python"
