#!/usr/bin/env python3
"""Checks a draft head written by `specula train-draft` with an independent
GGUF reader (llama.cpp's gguf-py) against what llama.cpp's `eagle3` loader
reads (llama-arch.cpp / models/eagle3.cpp as of its EAGLE-3 support):

  check_eagle3_gguf.py HEAD N_TARGET_LAYERS N_TARGET_VOCAB

  * general.architecture "eagle3"; eagle3.block_count 1 (UINT32);
    eagle3.{context_length, embedding_length, feed_forward_length,
    attention.head_count, attention.head_count_kv, target_hidden_size}
    UINT32; eagle3.attention.layer_norm_rms_epsilon and rope.freq_base
    FLOAT32; eagle3.target_layers and eagle3.extract_layers INT32[3], each
    0..N_TARGET_LAYERS; eagle3.norm_before_residual BOOL;
  * the target's tokenizer: tokenizer.ggml.model and N_TARGET_VOCAB tokens;
  * exactly the tensors the loader creates, with their shapes: fc {3Ht, H},
    output_norm {H}, output {H, Vd}, d2t {Vd} I64 with distinct ids in
    [0, N_TARGET_VOCAB), blk.0.{attn_norm, attn_norm_2, ffn_norm} {H} F32,
    attn_q/k/v {2H, ...}, attn_output {Hq, H}, ffn_gate/up {H, ff},
    ffn_down {ff, H}; no token_embd (the target's is shared).
Prints one line per failed check and exits 1 if any failed, else "ok: ..."."""
import sys

import numpy as np
import gguf
from gguf import GGUFValueType as VT

path, n_layers, n_vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = gguf.GGUFReader(path)
bad = []


def field(name, vtype, count=None):
    f = r.fields.get(name)
    if f is None:
        bad.append(f"missing key {name}")
        return None
    if f.types[0] != vtype:
        bad.append(f"{name}: type {f.types[0].name}, expected {vtype.name}")
        return None
    if vtype == VT.ARRAY:
        vals = [f.parts[i][0] for i in f.data]
        if count is not None and len(vals) != count:
            bad.append(f"{name}: {len(vals)} entries, expected {count}")
        return vals
    if vtype == VT.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]][0]


if field("general.architecture", VT.STRING) != "eagle3":
    bad.append("general.architecture is not eagle3")
if field("eagle3.block_count", VT.UINT32) != 1:
    bad.append("eagle3.block_count is not 1")
H = field("eagle3.embedding_length", VT.UINT32)
ff = field("eagle3.feed_forward_length", VT.UINT32)
nh = field("eagle3.attention.head_count", VT.UINT32)
nkv = field("eagle3.attention.head_count_kv", VT.UINT32)
Ht = field("eagle3.target_hidden_size", VT.UINT32)
field("eagle3.context_length", VT.UINT32)
field("eagle3.attention.layer_norm_rms_epsilon", VT.FLOAT32)
field("eagle3.rope.freq_base", VT.FLOAT32)
field("eagle3.norm_before_residual", VT.BOOL)
for key in ("eagle3.target_layers", "eagle3.extract_layers"):
    f = r.fields.get(key)
    if f is None or f.types != [VT.ARRAY, VT.INT32]:
        bad.append(f"{key}: not an INT32 array")
    else:
        ids = [int(f.parts[i][0]) for i in f.data]
        if len(ids) != 3 or not all(0 <= i <= n_layers for i in ids):
            bad.append(f"{key} = {ids}: need 3 layer ids in 0..{n_layers}")
field("tokenizer.ggml.model", VT.STRING)
toks = r.fields.get("tokenizer.ggml.tokens")
if toks is None or len(toks.data) != n_vocab:
    bad.append(f"tokenizer.ggml.tokens: {None if toks is None else len(toks.data)} tokens, expected {n_vocab}")

t = {x.name: x for x in r.tensors}
hd = H // nh if H and nh else 0
out = t.get("output.weight")
Vd = int(out.shape[1]) if out is not None else 0
want = {
    "fc.weight": (3 * (Ht or 0), H), "output_norm.weight": (H,), "output.weight": (H, Vd), "d2t": (Vd,),
    "blk.0.attn_norm.weight": (H,), "blk.0.attn_norm_2.weight": (H,), "blk.0.ffn_norm.weight": (H,),
    "blk.0.attn_q.weight": (2 * H, nh * hd), "blk.0.attn_k.weight": (2 * H, nkv * hd),
    "blk.0.attn_v.weight": (2 * H, nkv * hd), "blk.0.attn_output.weight": (nh * hd, H),
    "blk.0.ffn_gate.weight": (H, ff), "blk.0.ffn_up.weight": (H, ff), "blk.0.ffn_down.weight": (ff, H),
}
if set(t) != set(want):
    bad.append(f"tensors {sorted(set(t) ^ set(want))} differ from what llama.cpp's eagle3 loader creates")
for name, shape in want.items():
    x = t.get(name)
    if x is not None and tuple(int(s) for s in x.shape) != shape:
        bad.append(f"{name}: shape {tuple(int(s) for s in x.shape)}, expected {shape}")
    if x is not None and len(shape) == 1 and name != "d2t" and x.tensor_type != gguf.GGMLQuantizationType.F32:
        bad.append(f"{name}: {x.tensor_type.name}, norms are F32")
d2t = t.get("d2t")
if d2t is not None:
    if d2t.tensor_type != gguf.GGMLQuantizationType.I64:
        bad.append(f"d2t: {d2t.tensor_type.name}, llama.cpp requires I64")
    ids = np.asarray(d2t.data).astype(np.int64)
    if len(set(ids.tolist())) != len(ids) or ids.min() < 0 or ids.max() >= n_vocab:
        bad.append("d2t: ids repeat or fall outside the target vocabulary")
for b in bad:
    print(b)
if bad:
    sys.exit(1)
print(f"ok: eagle3 head H={H} ff={ff} heads={nh}/{nkv} draft vocab {Vd}, {len(t)} tensors")
