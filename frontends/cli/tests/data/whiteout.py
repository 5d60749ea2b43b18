# renameat2's RENAME_WHITEOUT (overlayfs's way of hiding a lower file) in directory argv[1]:
# the source name then names a character device 0:0 with mode 0. The tests run it on tmpfs (the
# model), on the PMFS mount and through the shim, and compare what it prints.
import ctypes
import errno
import os
import stat
import sys

d = sys.argv[1]
NOREPLACE, WHITEOUT = 1, 4
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100


def rename2(a, b, flags):
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), flags) != 0:
        return errno.errorcode[ctypes.get_errno()]
    return "ok"


def show(name):
    try:
        st = os.lstat(f"{d}/{name}")
    except OSError as x:
        return f"{name}: {errno.errorcode[x.errno]}"
    kind = "chr" if stat.S_ISCHR(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
    return f"{name}: {kind} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} mode {st.st_mode & 0o7777:o} links {st.st_nlink}"


with open(f"{d}/a", "w") as f:
    f.write("lower")
print("rename a b whiteout:", rename2(f"{d}/a", f"{d}/b", WHITEOUT))
print(show("a"))
print(show("b"), open(f"{d}/b").read())
with open(f"{d}/c", "w") as f:
    f.write("c")
print("rename c b whiteout|noreplace:", rename2(f"{d}/c", f"{d}/b", WHITEOUT | NOREPLACE))
print("rename c b whiteout (replace):", rename2(f"{d}/c", f"{d}/b", WHITEOUT))
print(show("c"))
print(show("b"), open(f"{d}/b").read())
os.mkdir(f"{d}/m")
print("rename m n whiteout:", rename2(f"{d}/m", f"{d}/n", WHITEOUT))
print(show("m"))
print(show("n"))
os.unlink(f"{d}/a")
print(show("a"))
print(sorted(os.listdir(d)))
