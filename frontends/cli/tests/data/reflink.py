# Reflink on PMFS, in directory argv[1] of a pool, through argv[2] ("mount" or "shim"):
# copy_file_range of whole blocks shares them (the free space barely moves), and the copy and
# the source then change apart: writes, a shrink and an unlink on either side leave the other
# as it was. Through the shim also the ioctls `cp --reflink` uses: FICLONE, FICLONERANGE (its
# alignment rule), EXDEV with a file outside the pool, EBADF for a read-only destination, and
# FIEMAP's shared flag. (The kernel sends a FUSE file system no FICLONE: on the mount `cp`
# falls back to copy_file_range, which shares.) Prints one line per check; the tests hold each.
import errno
import fcntl
import os
import struct
import sys
import tempfile

d, how = sys.argv[1], sys.argv[2]
K = 4096
RW = os.O_CREAT | os.O_RDWR


def data(n, seed):
    return bytes((i * 7 + seed) % 251 for i in range(n))


def e(op):
    try:
        op()
        return "ok"
    except OSError as x:
        return errno.errorcode[x.errno]


def free():
    s = os.statvfs(d)
    return s.f_bfree * s.f_frsize // K


n = 4 << 20
src_bytes = data(n, 3)
src = os.open(f"{d}/src", RW, 0o644)
os.pwrite(src, src_bytes, 0)
dst = os.open(f"{d}/dst", RW, 0o644)
before = free()
done = 0
while done < n:
    done += os.copy_file_range(src, dst, n - done, done, done)
# A copy would take 1,024 blocks; sharing them takes the copy's few tree nodes.
print("copy_file_range shares", before - free() < 32)
print("the copy reads back", os.pread(dst, n + 1, 0) == src_bytes)
os.pwrite(dst, b"x" * 100, 1 << 20)
want = bytearray(src_bytes)
want[1 << 20 : (1 << 20) + 100] = b"x" * 100
print("a write to the copy leaves the source", os.pread(src, n + 1, 0) == src_bytes)
print("the copy has the write", os.pread(dst, n + 1, 0) == bytes(want))
os.ftruncate(dst, 10_000)
print("a shrink of the copy leaves the source", os.pread(src, n + 1, 0) == src_bytes)
os.pwrite(src, b"y" * 100, 5_000)
print("a write to the source leaves the copy", os.pread(dst, n, 0) == bytes(want[:10_000]))
os.close(src)
os.unlink(f"{d}/src")
print("the copy outlives the source", os.pread(dst, n, 0) == bytes(want[:10_000]))
os.close(dst)

if how == "shim":
    FICLONE, FICLONERANGE, FIEMAP = 0x40049409, 0x4020940D, 0xC020660B

    def shared(fd):
        head = struct.pack("QQIIII", 0, 2**64 - 1, 0, 0, 32, 0)
        buf = bytearray(head + bytes(56 * 32))
        fcntl.ioctl(fd, FIEMAP, buf, True)
        (mapped,) = struct.unpack_from("I", buf, 20)
        flags = [struct.unpack_from("I", buf, 32 + i * 56 + 40)[0] for i in range(mapped)]
        return mapped > 0 and all(f & 0x2000 for f in flags)

    a = os.open(f"{d}/a", RW, 0o644)
    os.pwrite(a, data(10 * K + 5, 4), 0)
    b = os.open(f"{d}/b", RW, 0o644)
    print("FICLONE", e(lambda: fcntl.ioctl(b, FICLONE, a)))
    print("FICLONE bytes", os.pread(b, 1 << 20, 0) == os.pread(a, 1 << 20, 0))
    print("FIEMAP shared", shared(a), shared(b))
    c = os.open(f"{d}/c", RW, 0o644)
    r = struct.pack("qQQQ", a, 4 * K, 4 * K, 8 * K)
    print("FICLONERANGE", e(lambda: fcntl.ioctl(c, FICLONERANGE, r)))
    print("FICLONERANGE bytes", os.pread(c, 1 << 20, 0) == bytes(8 * K) + os.pread(a, 4 * K, 4 * K))
    bad = struct.pack("qQQQ", a, 1, 4 * K, 0)
    print("unaligned", e(lambda: fcntl.ioctl(c, FICLONERANGE, bad)))
    ro = os.open(f"{d}/b", os.O_RDONLY)
    print("read-only destination", e(lambda: fcntl.ioctl(ro, FICLONE, a)))
    with tempfile.TemporaryFile() as out:
        print("outside the pool", e(lambda: fcntl.ioctl(out.fileno(), FICLONE, a)))
    for fd in (a, b, c, ro):
        os.close(fd)
