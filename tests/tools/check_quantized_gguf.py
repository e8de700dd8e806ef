#!/usr/bin/env python3
"""Checks a file written by `specula quantize` with an independent GGUF reader,
the `gguf` package from PyPI (llama.cpp's gguf-py).

  check_quantized_gguf.py SRC OUT --type TYPE [--layers LIST] [--keep-output-type]
                          [--name NAME] [--data all|N]

From SRC and the options it works out, on its own, what OUT must hold and
compares:
  * OUT opens with gguf.GGUFReader and is GGUF version 3;
  * tensors: the kept ones in source order, blk.N renumbered to the position
    of N in LIST, same shapes; types by specula's documented rules (1-D: F32;
    token_embd/output: Q8_0 for a 4/5-bit TYPE, else TYPE, unless
    --keep-output-type; others TYPE; rows not a multiple of the block: F16;
    types specula cannot dequantize: unchanged);
  * data: tensors of unchanged type byte-identical to the source; converted
    ones byte-identical to gguf-py's own quantize(dequantize(source)) (its
    numpy port of ggml's reference quantizers).  --data N checks N converted
    tensors spread over the file (default: all);
  * metadata: every source pair with the same type and encoded bytes, except
    {arch}.block_count (the number kept), per-block arrays {arch}.* (the kept
    blocks' entries), general.file_type (gguf.LlamaFileType of TYPE),
    general.quantization_version (2 for quantized types) and general.name
    (when --name is given); no other pairs.
SRC is read with the few lines of standard-library parsing below (gguf-py
takes seconds per file on large vocabularies; it reads OUT, the file under
test).  Prints one line per failed check and exits 1 if any failed, else a
summary line starting with "ok:".
"""
import argparse
import re
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf import quants

LOW_BIT = {"Q4_0", "Q4_1", "Q5_0", "Q5_1"}
# types specula can dequantize (sp_kernel_supports); others are copied unchanged
CONVERTIBLE = {QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K}
FILE_TYPE = {"F32": "ALL_F32", "F16": "MOSTLY_F16", "BF16": "MOSTLY_BF16", "Q4_0": "MOSTLY_Q4_0",
             "Q4_1": "MOSTLY_Q4_1", "Q5_0": "MOSTLY_Q5_0", "Q5_1": "MOSTLY_Q5_1", "Q8_0": "MOSTLY_Q8_0"}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
errors = []


def fail(msg):
    errors.append(msg)
    print("FAIL: " + msg)


class Source:
    """The source file: metadata (type, encoded value bytes, decoded value)
    and tensor infos (name, shape, type, data as uint8 rows)."""

    def __init__(self, path):
        self.b = np.memmap(path, dtype=np.uint8, mode="r")
        buf = self.b
        n_t, n_kv = struct.unpack_from("<QQ", buf, 8)
        off = 24
        self.kv = {}
        for _ in range(n_kv):
            key, off = self._str(off)
            (t,) = struct.unpack_from("<I", buf, off)
            start = off + 4
            value, off = self._value(start, t)
            self.kv[key.decode()] = (t, bytes(buf[start:off]), value)
        infos = []
        for _ in range(n_t):
            name, off = self._str(off)
            (nd,) = struct.unpack_from("<I", buf, off)
            shape = list(struct.unpack_from("<%dQ" % nd, buf, off + 4))
            ttype, toff = struct.unpack_from("<IQ", buf, off + 4 + 8 * nd)
            off += 4 + 8 * nd + 12
            infos.append((name.decode(), shape, QT(ttype), toff))
        align = self.kv.get("general.alignment", (0, b"", 32))[2]
        data = off + (-off) % align
        self.tensors = []
        for name, shape, ttype, toff in infos:
            block, size = gguf.GGML_QUANT_SIZES[ttype]
            rows = int(np.prod(shape[1:], dtype=np.int64))
            row_bytes = shape[0] // block * size
            arr = self.b[data + toff:data + toff + rows * row_bytes].reshape(rows, row_bytes)
            self.tensors.append((name, shape, ttype, arr))

    def _str(self, off):
        (n,) = struct.unpack_from("<Q", self.b, off)
        return bytes(self.b[off + 8:off + 8 + n]), off + 8 + n

    def _value(self, off, t):
        if t in SCALAR:
            return struct.unpack_from(SCALAR[t], self.b, off)[0], off + struct.calcsize(SCALAR[t])
        if t == VT.STRING:
            s, off = self._str(off)
            return s.decode("utf-8", "replace"), off
        et, n = struct.unpack_from("<IQ", self.b, off)
        off += 12
        out = []
        for _ in range(n):
            v, off = self._value(off, et)
            out.append(v)
        return (et, out), off


def parse_layers(s):
    out = []
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def expected_type(shape, ttype, name, qtype, keep_output):
    head = name in ("token_embd.weight", "output.weight")
    if qtype == "keep" or (head and keep_output):
        return ttype
    if len(shape) == 1:
        want = QT.F32
    elif head and qtype in LOW_BIT:
        want = QT.Q8_0
    else:
        want = QT[qtype]
    if want == ttype or ttype not in CONVERTIBLE:
        return ttype
    if shape[0] % gguf.GGML_QUANT_SIZES[want][0]:
        return QT.F16
    return want


def expected_tensors(src, layers, qtype, keep_output):
    new_index = {old: i for i, old in enumerate(layers)} if layers is not None else None
    out = []
    for name, shape, ttype, data in src.tensors:
        m = re.match(r"blk\.(\d+)(\..*)$", name)
        if m and new_index is not None:
            old = int(m.group(1))
            if old not in new_index:
                continue
            name = "blk.%d%s" % (new_index[old], m.group(2))
        out.append((name, shape, ttype, data, expected_type(shape, ttype, name, qtype, keep_output)))
    return out


def check_data(name, src_type, src_data, out_t, qtype):
    got = np.asarray(out_t.data).view(np.uint8).reshape(-1)
    if src_type == qtype:
        if not np.array_equal(src_data.reshape(-1), got):
            fail("%s: copied data differs from the source" % name)
        return
    floats = quants.dequantize(np.asarray(src_data), src_type).astype(np.float32)
    want = quants.quantize(floats, qtype)
    if want.view(np.uint8).tobytes() != got.tobytes():
        fail("%s: %s data differs from gguf-py's quantize(dequantize(source))" % (name, qtype.name))


def check_metadata(src, out, arch, layers, qtype, name):
    overrides = {}
    if layers is not None:
        n_layer = src.kv["%s.block_count" % arch][2]
        overrides["%s.block_count" % arch] = len(layers)
        # per-block arrays ({arch}.* with one entry per block) keep the kept blocks' entries
        for k, (t, _, v) in src.kv.items():
            if k.startswith(arch + ".") and t == VT.ARRAY and v[0] != VT.ARRAY and len(v[1]) == n_layer:
                overrides[k] = [v[1][i] for i in layers]
    if qtype != "keep":
        overrides["general.file_type"] = gguf.LlamaFileType[FILE_TYPE[qtype]].value
        if qtype not in ("F32", "F16", "BF16"):
            overrides["general.quantization_version"] = 2
    if name is not None:
        overrides["general.name"] = name
    skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
    out_keys = [k for k in out.fields if k not in skip]
    extra = set(out_keys) - set(src.kv) - set(overrides)
    if extra:
        fail("unexpected metadata keys in output: %s" % sorted(extra))
    for k, (t, raw, _) in src.kv.items():
        f = out.fields.get(k)
        if f is None:
            fail("metadata key %s missing from output" % k)
        elif f.types[0] != t:
            fail("metadata key %s changed type" % k)
        elif k not in overrides and b"".join(bytes(p) for p in f.parts[3:]) != raw:
            fail("metadata key %s differs from the source" % k)
    for k, v in overrides.items():
        if k not in out.fields:
            fail("metadata key %s missing from output" % k)
        elif out.fields[k].contents() != v:
            fail("metadata key %s is %r, expected %r" % (k, out.fields[k].contents(), v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--type", required=True)
    ap.add_argument("--layers")
    ap.add_argument("--keep-output-type", action="store_true")
    ap.add_argument("--name")
    ap.add_argument("--data", default="all")
    a = ap.parse_args()

    src = Source(a.src)
    out = gguf.GGUFReader(a.out)
    version = out.fields["GGUF.version"].contents()
    if version != 3:
        fail("GGUF version %r, expected 3" % version)
    arch = src.kv["general.architecture"][2]
    layers = parse_layers(a.layers) if a.layers else None
    want = expected_tensors(src, layers, a.type, a.keep_output_type)
    if len(out.tensors) != len(want):
        fail("%d tensors, expected %d" % (len(out.tensors), len(want)))
    converted = []
    for (name, shape, src_type, src_data, qtype), out_t in zip(want, out.tensors):
        if out_t.name != name:
            fail("tensor %s where %s was expected" % (out_t.name, name))
        elif out_t.tensor_type != qtype:
            fail("%s has type %s, expected %s" % (name, out_t.tensor_type.name, qtype.name))
        elif [int(x) for x in out_t.shape] != shape:
            fail("%s has shape %s, expected %s" % (name, [int(x) for x in out_t.shape], shape))
        elif qtype == src_type:
            check_data(name, src_type, src_data, out_t, qtype)
        else:
            converted.append((name, src_type, src_data, out_t, qtype))
    n = len(converted) if a.data == "all" else min(int(a.data), len(converted))
    for i in range(n):
        check_data(*converted[i * len(converted) // n])
    check_metadata(src, out, arch, layers, a.type, a.name)
    if errors:
        print("%d check(s) failed" % len(errors))
        return 1
    types = sorted({t.tensor_type.name for t in out.tensors})
    print("ok: %s: GGUF v3, %d tensors (%s), %d converted (%d checked against gguf-py), %d metadata keys"
          % (a.out, len(out.tensors), ",".join(types), len(converted), n, len(out.fields) - 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
