#!/usr/bin/env python3
"""Writes a copy of a GGUF file with one header field changed, for tests of
error paths on otherwise real files (standard library only).

  patch_gguf.py IN OUT arch NEWNAME        same-length value of general.architecture
  patch_gguf.py IN OUT ttype TENSOR TYPEID  set a tensor's type id (sizes must agree)
"""
import shutil
import struct
import sys

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(b, off, t):
    if t in SCALAR:
        return off + SCALAR[t]
    if t == 8:
        (n,) = struct.unpack_from("<Q", b, off)
        return off + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, off)
        off += 12
        for _ in range(n):
            off = skip_value(b, off, et)
        return off
    raise ValueError("bad type %d" % t)


def main():
    src, dst, what = sys.argv[1:4]
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        b = bytearray(f.read(16 << 20))
        n_t, n_kv = struct.unpack_from("<QQ", b, 8)
        off = 24
        for _ in range(n_kv):
            (kl,) = struct.unpack_from("<Q", b, off)
            key = bytes(b[off + 8:off + 8 + kl]).decode()
            off += 8 + kl
            (t,) = struct.unpack_from("<I", b, off)
            off += 4
            if what == "arch" and key == "general.architecture":
                (vl,) = struct.unpack_from("<Q", b, off)
                new = sys.argv[4].encode()
                assert len(new) == vl, "new name must have the same length"
                f.seek(off + 8)
                f.write(new)
                return
            off = skip_value(b, off, t)
        for _ in range(n_t):
            (nl,) = struct.unpack_from("<Q", b, off)
            name = bytes(b[off + 8:off + 8 + nl]).decode()
            off += 8 + nl
            (nd,) = struct.unpack_from("<I", b, off)
            off += 4 + 8 * nd
            if what == "ttype" and name == sys.argv[4]:
                f.seek(off)
                f.write(struct.pack("<I", int(sys.argv[5])))
                return
            off += 4 + 8
    sys.exit("field not found")


if __name__ == "__main__":
    main()
