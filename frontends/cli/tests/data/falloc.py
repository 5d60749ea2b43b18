# fallocate(2)'s modes in directory argv[1], each checked against what Linux documents for it
# (the script holds the expected bytes and sizes itself: tmpfs, the obvious model, has no
# ZERO_RANGE). One line per case: "<case> ok", or "<case> <what differed>", or the errno name
# the call failed with. The tests run it on the PMFS mount and through the shim.
import ctypes
import errno
import os
import sys

d = sys.argv[1]
K = 4096
KEEP, PUNCH, COLLAPSE, ZERO, INSERT = 0x01, 0x02, 0x08, 0x10, 0x20
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def pattern(n):
    return bytes((i * 31 + 7) % 251 for i in range(n))


def case(name, mode, off, length, size=40 * K):
    path = f"{d}/{name}"
    data = bytearray(pattern(size))
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    blocks = os.fstat(fd).st_blocks
    if libc.fallocate(fd, mode, off, length) != 0:
        print(name, errno.errorcode[ctypes.get_errno()])
        os.close(fd)
        return
    end = off + length
    if mode & (PUNCH | ZERO):
        z = min(end, len(data))
        data[off:z] = bytes(max(0, z - off))
    if not mode & KEEP and end > len(data):
        data += bytes(end - len(data))
    st = os.fstat(fd)
    got = os.pread(fd, len(data) + K, 0)
    os.close(fd)
    bad = []
    if st.st_size != len(data):
        bad.append(f"size {st.st_size} not {len(data)}")
    if got != bytes(data):
        first = next(i for i, (a, b) in enumerate(zip(got + b"?", data)) if a != b)
        bad.append(f"bytes differ from {first}")
    if mode == PUNCH | KEEP and length >= 8 * K and st.st_blocks >= blocks:
        bad.append(f"no block freed ({blocks} -> {st.st_blocks})")
    if mode == KEEP and st.st_blocks <= blocks:
        bad.append(f"nothing allocated ({blocks} -> {st.st_blocks})")
    print(name, "ok" if not bad else "; ".join(bad))


case("allocate-past-end", 0, 38 * K, 10 * K)
case("keep-size", KEEP, 60 * K, 20 * K)
case("punch-middle", PUNCH | KEEP, 2 * K + 100, 20 * K)
case("punch-aligned", PUNCH | KEEP, 8 * K, 16 * K)
case("punch-in-one-block", PUNCH | KEEP, 5000, 100)
case("punch-past-end", PUNCH | KEEP, 30 * K, 100 * K)
case("punch-without-keep-size", PUNCH, 0, K)
case("zero-range", ZERO, 3 * K + 5, 9 * K)
case("zero-range-past-end", ZERO, 36 * K, 10 * K)
case("zero-range-keep-size", ZERO | KEEP, 36 * K, 10 * K)
case("collapse", COLLAPSE, 4 * K, 4 * K)
case("insert", INSERT, 4 * K, 4 * K)
