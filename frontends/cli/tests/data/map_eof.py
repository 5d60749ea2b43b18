# The last page of a shared mapping reads zeros past the end of the file, as Linux maps any
# file: after a shrink (the bytes cut off were data), and after appends into blocks that held
# another file's data (a removed file's blocks, which the appends' preallocation may take).
# Run in directory argv[1]; prints one line per case. The shim's test runs it on the pool and
# on tmpfs, the model.
import ctypes
import mmap
import os
import sys

d = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
P = 4096


def past_eof(fd, size):
    """The bytes of the mapping's last page past `size`."""
    length = (size + P - 1) // P * P
    addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    tail = ctypes.string_at(addr + size, length - size)
    libc.munmap(addr, length)
    return tail


fd = os.open(f"{d}/shrunk", os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b"\xaa" * 3 * P)
os.ftruncate(fd, P + 100)
print("after a shrink", set(past_eof(fd, P + 100)) == {0})
os.close(fd)

junk = os.open(f"{d}/junk", os.O_CREAT | os.O_RDWR, 0o644)
os.write(junk, b"\xbb" * (1 << 20))
os.close(junk)
os.unlink(f"{d}/junk")
fd = os.open(f"{d}/appended", os.O_CREAT | os.O_RDWR, 0o644)
for _ in range(25):
    os.write(fd, b"y" * 1000)
print("after appends", set(past_eof(fd, 25_000)) == {0})
os.close(fd)
