"""Shared helpers for the reference-data generators in scripts/reference/.

These scripts run llama.cpp (through llama-cpp-python) on the same GGUF files
the specula tests use and store what it produces as JSON under tests/data/.
CI never runs them; it only reads the stored JSON.
"""

import ctypes
import hashlib
import json
import math
import os
import shlex
import sys

import llama_cpp

MODELS = {
    "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
}

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(REPO, "tests", "data")


def model_path(key):
    """Absolute path of a test model, as sp_test_model_path finds it."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "specula", "models", MODELS[key])


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def generator():
    """'llama-cpp-python X.Y.Z (llama.cpp/ggml <commit>, ggml <version>)'."""
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    commit = version = "unknown"
    try:
        lib = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
        lib.ggml_commit.restype = ctypes.c_char_p
        lib.ggml_version.restype = ctypes.c_char_p
        commit = lib.ggml_commit().decode()
        version = lib.ggml_version().decode()
    except (OSError, AttributeError):
        pass
    return "llama-cpp-python %s (ggml commit %s, ggml %s)" % (
        llama_cpp.__version__, commit, version)


def system_info():
    """llama.cpp's CPU feature line: which SIMD paths produced the numbers."""
    return llama_cpp.llama_print_system_info().decode().strip().rstrip("|").strip()


def command():
    """The command line that produced the data, relative to the repo root."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    return " ".join(shlex.quote(a) for a in [sys.executable, script] + sys.argv[1:])


def vocab_of(llm):
    return llama_cpp.llama_model_get_vocab(llm.model)


def piece(llm, tok, special):
    """Bytes of one token's piece via llama_token_to_piece (lstrip=0).

    llama-cpp-python's own detokenize uses a 32-byte buffer and silently
    mangles longer pieces (the negative 'needed' length is used as a slice),
    so call the C function directly and retry with the size it asks for.
    """
    size = 64
    while True:
        buf = (ctypes.c_char * size)()
        n = llama_cpp.llama_token_to_piece(vocab_of(llm), tok, buf, size, 0, special)
        if n >= 0:
            return bytes(buf[:n])
        size = -n


def detok(llm, ids, special=False):
    return b"".join(piece(llm, t, special) for t in ids)


def _fmt(v):
    """Compact JSON for one value; floats with 6 decimals."""
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError("non-finite float")
        return "%.6f" % v
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + _fmt(x) for k, x in v.items()) + "}"
    return json.dumps(v, ensure_ascii=True)


def write_json(path, obj):
    """One object per file; each top-level key on its own line and each
    element of a top-level list on its own line, so diffs stay readable.
    Strings are ASCII-only (non-ASCII as \\u escapes); byte-exact data is
    always also given as hex."""
    lines = []
    items = list(obj.items())
    for i, (k, v) in enumerate(items):
        sep = "," if i + 1 < len(items) else ""
        if isinstance(v, list) and v and isinstance(v[0], dict):
            inner = ",\n".join("  " + _fmt(x) for x in v)
            lines.append(" %s: [\n%s\n ]%s" % (json.dumps(k), inner, sep))
        elif isinstance(v, dict) and len(v) > 8:
            inner = ",\n".join("  %s: %s" % (json.dumps(str(a)), _fmt(b)) for a, b in v.items())
            lines.append(" %s: {\n%s\n }%s" % (json.dumps(k), inner, sep))
        else:
            lines.append(" %s: %s%s" % (json.dumps(k), _fmt(v), sep))
    text = "{\n" + "\n".join(lines) + "\n}\n"
    json.loads(text)  # must round-trip
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="ascii") as f:
        f.write(text)
    print("wrote %s (%d bytes)" % (os.path.relpath(path, REPO), len(text)))
