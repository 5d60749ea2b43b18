# Vectored reads and writes at an offset (preadv, pwritev, and preadv2/pwritev2 with flags and
# with offset -1, the descriptor's position), in directory argv[1]. The tests run it on tmpfs
# (the model) and through the shim, and compare what it prints.
import os
import sys

d = sys.argv[1]
fd = os.open(f"{d}/v", os.O_CREAT | os.O_RDWR, 0o644)
print("pwritev", os.pwritev(fd, [b"abc", b"", b"defg"], 10))
a, b = bytearray(4), bytearray(20)
print("preadv", os.preadv(fd, [a, b], 8), bytes(a), bytes(b))
print("pwritev2 dsync", os.pwritev(fd, [b"XY"], 0, os.RWF_DSYNC))
print("preadv2 hipri", os.preadv(fd, [a], 0, os.RWF_HIPRI), bytes(a))
os.lseek(fd, 3, os.SEEK_SET)
print("pwritev2 at the position", os.pwritev(fd, [b"pos"], -1, os.RWF_SYNC), os.lseek(fd, 0, os.SEEK_CUR))
os.lseek(fd, 0, os.SEEK_SET)
c = bytearray(6)
print("preadv2 at the position", os.preadv(fd, [c], -1, os.RWF_HIPRI), bytes(c), os.lseek(fd, 0, os.SEEK_CUR))
print("past the end", os.preadv(fd, [a], 100))
print("size", os.fstat(fd).st_size, open(f"{d}/v", "rb").read())
os.close(fd)
