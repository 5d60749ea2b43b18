# SEEK_DATA and SEEK_HOLE as Linux answers them, in directory argv[1]: files with data, holes
# and a hole at the end, written so that no file system has a reason to allocate ahead (the
# size is set before the second extent is written). The tests run it on tmpfs (the model), on
# the PMFS mount and through the shim, and compare what it prints.
import errno
import os
import sys

d = sys.argv[1]
K, M = 4096, 1 << 20


def at(fd, off, whence):
    try:
        return str(os.lseek(fd, off, whence))
    except OSError as x:
        return errno.errorcode[x.errno]


def show(name, offsets):
    fd = os.open(f"{d}/{name}", os.O_RDONLY)
    for off in offsets:
        print(name, off, at(fd, off, os.SEEK_DATA), at(fd, off, os.SEEK_HOLE))
    os.close(fd)


fd = os.open(f"{d}/holes", os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b"a" * K, 0)
os.ftruncate(fd, 3 * M)
os.pwrite(fd, b"b" * K, M)
os.pwrite(fd, b"c" * 100, 2 * M + 10)
os.close(fd)
show("holes", [0, 100, K, K + 1, M - 1, M, M + 100, M + K, 2 * M, 2 * M + K, 3 * M - 1, 3 * M, 4 * M])
os.close(os.open(f"{d}/empty", os.O_CREAT | os.O_RDWR, 0o644))
show("empty", [0, 1])
fd = os.open(f"{d}/sparse", os.O_CREAT | os.O_RDWR, 0o644)
os.ftruncate(fd, M)
os.close(fd)
show("sparse", [0, M - 1, M])
