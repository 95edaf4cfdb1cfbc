#!/usr/bin/env python3
"""extract-vmlinux.py BZIMAGE OUT - unpack the ELF vmlinux from a Debian bzImage.

Debian compresses its kernel with xz. The uncompressed ELF carries the PVH
entry note, so QEMU can boot it with -kernel directly, skipping the real-mode
setup and the self-decompression (about half the boot time under TCG).
"""
import lzma
import sys

src, dst = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
off = data.find(b"\xfd7zXZ\x00")
if off < 0:
    sys.exit(f"{src}: no xz stream (not a Debian bzImage?)")
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[off:])
if out[:4] != b"\x7fELF":
    sys.exit(f"{src}: the xz stream is not an ELF vmlinux")
with open(dst + ".tmp", "wb") as f:
    f.write(out)
import os
os.replace(dst + ".tmp", dst)
print(f"{dst}: {len(out)} bytes")
