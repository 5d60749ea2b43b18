#!/usr/bin/env python3
"""Extract the uncompressed kernel (an ELF `vmlinux`) from a bzImage.

QEMU boots a vmlinux at its PVH entry point in 8-16 s under TCG, where the bzImage's real-mode
setup and decompressor take about 40 s. This does what the kernel's scripts/extract-vmlinux does:
find a compressed stream in the image and keep the first that decompresses to an ELF file.
"""

import gzip
import lzma
import subprocess
import sys
import zlib


def unzstd(b: bytes) -> bytes:
    """Python has no zstd before 3.14: the zstd tool, whose output stands even when it then
    complains about the bytes after the stream (the rest of the image)."""
    return subprocess.run(["zstd", "-dcq"], input=b, capture_output=True).stdout

MAGICS = [
    (b"\xfd7zXZ\x00", lambda b: lzma.LZMADecompressor().decompress(b)),
    (b"\x1f\x8b\x08", lambda b: zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(b)),
    # Debian's kernels from 6.12 on.
    (b"\x28\xb5\x2f\xfd", unzstd),
]


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    data = open(src, "rb").read()
    for magic, unpack in MAGICS:
        at = data.find(magic)
        while at >= 0:
            try:
                out = unpack(data[at:])
            except (lzma.LZMAError, zlib.error, gzip.BadGzipFile, EOFError):
                out = b""
            if out.startswith(b"\x7fELF"):
                open(dst, "wb").write(out)
                return 0
            at = data.find(magic, at + 1)
    print(f"extract-vmlinux: no ELF kernel found in {src}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
