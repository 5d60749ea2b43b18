# copy_file_range(2) as Linux answers it, in directory argv[1]: explicit offsets and the
# descriptors' own (which advance), one by number through syscall(), a copy past the source's
# end, overlapping and disjoint ranges of one file, a destination open for appending, a
# directory, a read-only destination, and a sparse source (read back equal; PMFS keeps its
# holes, tmpfs fills them, so where the holes lie is not printed). The tests run it on tmpfs
# (the model), on the PMFS mount and through the shim, and compare what it prints.
import errno
import os
import sys

d = sys.argv[1]
K, M = 4096, 1 << 20


def e(op):
    try:
        return str(op())
    except OSError as x:
        return errno.errorcode[x.errno]


def data(n, seed):
    return bytes((i * 7 + seed) % 251 for i in range(n))


src = os.open(f"{d}/src", os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(src, data(50_000, 1), 0)
dst = os.open(f"{d}/dst", os.O_CREAT | os.O_RDWR, 0o644)
print("explicit", e(lambda: os.copy_file_range(src, dst, 10_000, 100, 2_000)))
print("offsets after", os.lseek(src, 0, os.SEEK_CUR), os.lseek(dst, 0, os.SEEK_CUR))
os.lseek(src, 30_000, os.SEEK_SET)
print("own offsets", e(lambda: os.copy_file_range(src, dst, 5_000)))
print("offsets after", os.lseek(src, 0, os.SEEK_CUR), os.lseek(dst, 0, os.SEEK_CUR))
print("past the end", e(lambda: os.copy_file_range(src, dst, 100, 60_000, 0)))
print("to the end", e(lambda: os.copy_file_range(src, dst, 1 << 30, 45_000, 20_000)))
print("overlap", e(lambda: os.copy_file_range(src, src, 1_000, 0, 500)))
print("disjoint", e(lambda: os.copy_file_range(src, src, 1_000, 0, 40_000)))
print("dst size", os.fstat(dst).st_size, "src size", os.fstat(src).st_size)
want = bytearray(25_000)
want[2_000:12_000] = data(50_000, 1)[100:10_100]
want[0:5_000] = data(50_000, 1)[30_000:35_000]
want[20_000:25_000] = data(50_000, 1)[45_000:]
print("dst as copied", os.pread(dst, 1 << 20, 0) == bytes(want))
# By number through libc's syscall(), as fsx calls it.
import ctypes
NR = {"x86_64": 326, "aarch64": 285}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
o_in, o_out = ctypes.c_longlong(0), ctypes.c_longlong(30_000)
n = libc.syscall(NR, src, ctypes.byref(o_in), dst, ctypes.byref(o_out), ctypes.c_size_t(100), 0)
print("by syscall()", n, o_in.value, o_out.value, os.pread(dst, 100, 30_000) == data(50_000, 1)[:100])
app = os.open(f"{d}/dst", os.O_WRONLY | os.O_APPEND)
print("append", e(lambda: os.copy_file_range(src, app, 10, 0, 0)))
os.close(app)
ro = os.open(f"{d}/dst", os.O_RDONLY)
print("read-only destination", e(lambda: os.copy_file_range(src, ro, 10, 0, 0)))
os.close(ro)
os.mkdir(f"{d}/dir")
dfd = os.open(f"{d}/dir", os.O_RDONLY)
print("directory source", e(lambda: os.copy_file_range(dfd, dst, 10, 0, 0)))
os.close(dfd)
# Sparse: 4 KiB, a 2 MiB hole, 4 KiB, a hole to 3 MiB.
sp = os.open(f"{d}/sparse", os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(sp, b"a" * K, 0)
os.ftruncate(sp, 3 * M)
os.pwrite(sp, b"b" * K, 2 * M)
cp = os.open(f"{d}/sparse-copy", os.O_CREAT | os.O_RDWR, 0o644)
print("sparse", e(lambda: os.copy_file_range(sp, cp, 3 * M, 0, 0)))
print("sparse equal", os.pread(cp, 4 * M, 0) == os.pread(sp, 4 * M, 0))
for fd in (src, dst, sp, cp):
    os.close(fd)
