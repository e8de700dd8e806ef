#!/usr/bin/env python3
"""Writes a tiny synthetic GGUF (architecture "toy", 3 blocks) with gguf-py's
GGUFWriter, for tests of `specula quantize` on cases the real models lack:
rows that are not a multiple of 32 (F16 fallback), an integer tensor (copied
unchanged), per-block metadata arrays, string and nested arrays.

  make_toy_gguf.py OUT
"""
import sys

import numpy as np
import gguf


def main():
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(sys.argv[1], "toy")
    w.add_name("toy model")
    w.add_block_count(3)
    w.add_context_length(64)
    w.add_array("toy.attention.head_count", [1, 2, 3])        # one entry per block
    w.add_array("toy.block_names", ["zero", "one", "two"])     # one entry per block
    w.add_array("toy.rope.sections", [4, 4])                   # not per block
    w.add_array("general.nested", [[1, 2], [3]])
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b", "\u00e9"])
    w.add_float32("toy.eps", 1e-5)
    w.add_bool("toy.flag", True)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    w.add_tensor("token_embd.weight", f32(4, 48))              # ne = [48, 4]
    for i in range(3):
        w.add_tensor("blk.%d.attn_norm.weight" % i, f32(48))
        w.add_tensor("blk.%d.ffn_up.weight" % i, f32(3, 64))   # ne = [64, 3]
        w.add_tensor("blk.%d.odd.weight" % i, f32(2, 48))      # rows of 48: no 32-block
        w.add_tensor("blk.%d.ids" % i, np.arange(4, dtype=np.int32) + i)
    w.add_tensor("output_norm.weight", f32(48))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
