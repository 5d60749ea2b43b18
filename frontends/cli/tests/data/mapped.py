# mmap of a file, MAP_SHARED and MAP_PRIVATE, in directory argv[1]: stores through a shared
# mapping are the file's bytes (read back with pread, and after munmap), a private mapping's
# are its own; mapping changes no size. The tests run it on tmpfs (the model) and through the
# shim, and compare what it prints.
import mmap
import os
import sys

d = sys.argv[1]
fd = os.open(f"{d}/m", os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, bytes(range(256)) * 40)  # 10,240 bytes: not a whole number of pages
m = mmap.mmap(fd, 10240, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
print("shared reads", m[250:260].hex())
m[0:5] = b"HELLO"
m[10235:10240] = b"WORLD"
print("pread sees", os.pread(fd, 5, 0), os.pread(fd, 5, 10235))
os.pwrite(fd, b"pw", 100)
print("mapping sees", m[100:102])
m.flush()
m.close()
print("size", os.fstat(fd).st_size)
p = mmap.mmap(fd, 4096, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
print("private reads", p[0:5])
p[0:5] = b"xxxxx"
print("private keeps its own", p[0:5], os.pread(fd, 5, 0))
p.close()
r = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
print("read-only whole file", len(r), r[10235:10240])
r.close()
os.close(fd)
print("after close", open(f"{d}/m", "rb").read()[:5])
