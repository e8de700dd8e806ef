#!/usr/bin/env python3
"""Record llama.cpp's intermediate tensors of a few layers for the op-level test.

Writes, for each test model, tests/data/ops-reference-<model>.json (the index
and provenance) and tests/data/ops-reference-<model>.f32 (the tensors: float32,
little-endian, concatenated).  tests/model/test_ops_reference.c runs each of
our ops on llama.cpp's input of that op and compares with llama.cpp's output.

How: one short prompt is decoded in one llama_decode with an eval callback
(cb_eval) that is asked about every graph node and copies the F32 results of
the nodes below.  Settings: n_ctx=512, one batch, flash attention off (the
test checks our attention against ggml's non-flash path), f16 KV cache, CPU,
n_threads=1.

Which nodes (llama.cpp's graph names; "L" is the layer):
  embd                    GET_ROWS: token embeddings
  inp_scaled              SCALE: embeddings * sqrt(n_embd) (gemma3)
  attn_norm-L             MUL: RMS norm * weight
  Qcur-L, Kcur-L, Vcur-L  MUL_MAT: projections
  Qcur_normed-L, Kcur_normed-L   MUL: per-head RMS norm (gemma3)
  Qcur_rope-L, Kcur_rope-L       the ROPE nodes named Qcur-L / Kcur-L
  Qscaled-L               the unnamed SCALE right after Qcur-L's ROPE (gemma3)
  kqv_out-L               CONT: attention output, heads concatenated
  attn_out-L              MUL_MAT by wo (gemma3: the unnamed MUL_MAT after kqv_out-L)
  attn_post_norm-L, sa_out-L     gemma3; llama: ffn_inp-L
  ffn_norm-L, ffn_gate-L, ffn_up-L, ffn_swiglu-L / ffn_geglu-L, ffn_out-L
  ffn_post_norm-L         gemma3
  l_out-L                 ADD: the layer's output (residual stream)
Rows: only the last prompt position is kept (the ops are row-wise), except
Kcur_rope and Vcur, kept for every position because attention at the last
position reads all of them.  l_out of the layer before each recorded layer is
kept too (that layer's input).

Layers: 0 and 1 for both models, and 5 for gemma3 (its first global-attention
layer: RoPE base 1e6 instead of the sliding-window layers' 1e4).

Run from the repo root:  /tmp/refvenv/bin/python scripts/reference/gen_tensor_reference.py
"""

import ctypes
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import llama_cpp as L  # noqa: E402

import refcommon as rc  # noqa: E402

PROMPT = "The capital of France is"
LAYERS = {"smollm2-135m": [0, 1], "gemma3-270m": [0, 1, 5]}
ALL_ROWS = ("Kcur_rope", "Vcur")

# Per architecture: (our name, llama.cpp's name, op) for each recorded node of
# a layer; llama.cpp's name has "{L}" for the layer.
LAYER_NODES = {
    "llama": [
        ("attn_norm", "attn_norm-{L}", "MUL"),
        ("Qcur", "Qcur-{L}", "MUL_MAT"), ("Kcur", "Kcur-{L}", "MUL_MAT"),
        ("Vcur", "Vcur-{L}", "MUL_MAT"),
        ("Qcur_rope", "Qcur-{L}", "ROPE"), ("Kcur_rope", "Kcur-{L}", "ROPE"),
        ("kqv_out", "kqv_out-{L}", "CONT"), ("attn_out", "attn_out-{L}", "MUL_MAT"),
        ("ffn_inp", "ffn_inp-{L}", "ADD"), ("ffn_norm", "ffn_norm-{L}", "MUL"),
        ("ffn_gate", "ffn_gate-{L}", "MUL_MAT"), ("ffn_up", "ffn_up-{L}", "MUL_MAT"),
        ("ffn_swiglu", "ffn_swiglu-{L}", "SWIGLU"), ("ffn_out", "ffn_out-{L}", "MUL_MAT"),
        ("l_out", "l_out-{L}", "ADD"),
    ],
    "gemma3": [
        ("attn_norm", "attn_norm-{L}", "MUL"),
        ("Qcur", "Qcur-{L}", "MUL_MAT"), ("Kcur", "Kcur-{L}", "MUL_MAT"),
        ("Vcur", "Vcur-{L}", "MUL_MAT"),
        ("Qcur_normed", "Qcur_normed-{L}", "MUL"), ("Kcur_normed", "Kcur_normed-{L}", "MUL"),
        ("Qcur_rope", "Qcur-{L}", "ROPE"), ("Kcur_rope", "Kcur-{L}", "ROPE"),
        ("Qscaled", "Qscaled-{L}", "SCALE"),
        ("kqv_out", "kqv_out-{L}", "CONT"), ("attn_out", "attn_out-{L}", "MUL_MAT"),
        ("attn_post_norm", "attn_post_norm-{L}", "MUL"), ("sa_out", "sa_out-{L}", "ADD"),
        ("ffn_norm", "ffn_norm-{L}", "MUL"),
        ("ffn_gate", "ffn_gate-{L}", "MUL_MAT"), ("ffn_up", "ffn_up-{L}", "MUL_MAT"),
        ("ffn_geglu", "ffn_geglu-{L}", "GEGLU"), ("ffn_out", "ffn_out-{L}", "MUL_MAT"),
        ("ffn_post_norm", "ffn_post_norm-{L}", "MUL"), ("l_out", "l_out-{L}", "ADD"),
    ],
}
GLOBAL_NODES = {
    "llama": [("embd", "embd", "GET_ROWS")],
    "gemma3": [("embd", "embd", "GET_ROWS"), ("inp_scaled", "inp_scaled", "SCALE")],
}


class Tensor(ctypes.Structure):
    """The leading fields of struct ggml_tensor (ggml 0.25)."""
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64)]


def ggml_base():
    lib = ctypes.CDLL(os.path.join(os.path.dirname(L.__file__), "lib", "libggml-base.so"))
    lib.ggml_get_name.restype = ctypes.c_char_p
    lib.ggml_get_name.argtypes = [ctypes.c_void_p]
    lib.ggml_nbytes.restype = ctypes.c_size_t
    lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
    lib.ggml_is_contiguous.restype = ctypes.c_bool
    lib.ggml_is_contiguous.argtypes = [ctypes.c_void_p]
    lib.ggml_op_desc.restype = ctypes.c_char_p  # op name; GLU nodes: SWIGLU, GEGLU
    lib.ggml_op_desc.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_size_t]
    return lib


def wanted(arch, layers):
    """{(llama.cpp name, op): our name} of every node to record."""
    w = {(g, op): ours for ours, g, op in GLOBAL_NODES[arch]}
    for il in layers:
        for ours, g, op in LAYER_NODES[arch]:
            w[(g.format(L=il), op)] = "%s-%d" % (ours, il)
        if il > 0 and il - 1 not in layers:
            w[("l_out-%d" % (il - 1), "ADD")] = "l_out-%d" % (il - 1)
    return w


def capture(path, ids, arch, layers):
    """Decodes ids in one batch; returns {our name: (n_tokens, n) float32} of
    the wanted nodes."""
    gb = ggml_base()
    want = wanted(arch, layers)
    got = {}
    prev = [None, None]  # name and op of the previous node

    def cb(t, ask, _ud):
        if ask:
            return True
        tt = Tensor.from_address(t)
        name, op = gb.ggml_get_name(t).decode(), gb.ggml_op_desc(t).decode()
        # unnamed nodes: the query scaling after RoPE, the output projection
        if op == "SCALE" and prev[1] == "ROPE" and prev[0].startswith("Qcur-"):
            name = "Qscaled-" + prev[0].split("-")[1]
        if op == "MUL_MAT" and prev[0] and prev[0].startswith("kqv_out-") and name.startswith("node_"):
            name = "attn_out-" + prev[0].split("-")[1]
        prev[0], prev[1] = name, op
        key = want.get((name, op))
        if key is None:
            return True
        assert tt.type == 0 and gb.ggml_is_contiguous(t), (name, op)
        assert key not in got, "node %s/%s seen twice" % (name, op)
        nbytes = gb.ggml_nbytes(t)
        buf = (ctypes.c_uint8 * nbytes)()
        gb.ggml_backend_tensor_get(t, buf, 0, nbytes)
        got[key] = np.frombuffer(bytes(buf), dtype="<f4").reshape(len(ids), -1).copy()
        return True

    cbf = L.ggml_backend_sched_eval_callback(cb)
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = 1
    cp.flash_attn_type = 0  # disabled
    cp.cb_eval = cbf
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(len(ids), 0, 1)
    batch.n_tokens = len(ids)
    for i, tok in enumerate(ids):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, 1
    assert L.llama_decode(ctx, batch) == 0
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    missing = sorted(set(want.values()) - set(got))
    assert not missing, "nodes not seen: %s" % missing
    return got


def tokenize(path, text):
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    add_bos = bool(L.llama_vocab_get_add_bos(vocab))
    raw = text.encode("utf-8")
    buf = (L.llama_token * 64)()
    n = L.llama_tokenize(vocab, raw, len(raw), buf, 64, add_bos, True)
    assert 0 < n <= 64
    arch = ctypes.create_string_buffer(64)
    L.llama_model_meta_val_str(model, b"general.architecture", arch, 64)
    L.llama_model_free(model)
    return [int(buf[i]) for i in range(n)], arch.value.decode()


def run(key):
    path = rc.model_path(key)
    ids, arch = tokenize(path, PROMPT)
    layers = LAYERS[key]
    got = capture(path, ids, arch, layers)
    T = len(ids)
    blob, index, offset = bytearray(), [], 0
    order = [ours for ours, _, _ in GLOBAL_NODES[arch]]
    for il in sorted(set(layers) | {il - 1 for il in layers if il > 0 and il - 1 not in layers}):
        names = [ours for ours, _, _ in LAYER_NODES[arch]] if il in layers else ["l_out"]
        order += ["%s-%d" % (n, il) for n in names]
    for name in order:
        a = got[name]
        rows = list(range(T)) if name.rsplit("-", 1)[0] in ALL_ROWS else [T - 1]
        data = np.ascontiguousarray(a[rows], dtype="<f4")
        index.append({"name": name, "pos": rows, "n": int(a.shape[1]), "offset": offset})
        blob += data.tobytes()
        offset += data.size
    base = os.path.join(rc.DATA, "ops-reference-%s" % key)
    with open(base + ".f32", "wb") as f:
        f.write(bytes(blob))
    print("wrote %s (%d bytes)" % (os.path.relpath(base + ".f32", rc.REPO), len(blob)))
    rc.write_json(base + ".json", {
        "model": os.path.basename(path),
        "model_sha256": rc.sha256_file(path),
        "generator": rc.generator(),
        "command": rc.command(),
        "system_info": rc.system_info(),
        "settings": "n_ctx=512 one batch flash_attn=off kv=f16 cpu n_threads=1; "
                    "tensors copied by cb_eval after each node",
        "prompt": PROMPT,
        "prompt_ids": ids,
        "layers": layers,
        "data": os.path.basename(base + ".f32"),
        "data_sha256": hashlib.sha256(bytes(blob)).hexdigest(),
        "n_floats": offset,
        "tensors": index,
    })


def quiet(_level, _text, _ud):
    """llama.cpp's log callback: drop the load and graph messages."""


QUIET = L.llama_log_callback(quiet)


def main():
    L.llama_log_set(QUIET, None)
    L.llama_backend_init()
    for key in rc.MODELS:
        run(key)


if __name__ == "__main__":
    main()
