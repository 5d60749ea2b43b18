# Extended attributes of every kind of file in directory argv[1], as root: user.* only on
# regular files and directories (Linux refuses them elsewhere: EPERM to set, ENODATA to read),
# trusted.* on every kind, the listing of each, and what a rename and a hard link keep. The
# tests run it on tmpfs (the model) and on the PMFS mount, and compare what it prints.
import errno
import os
import socket
import sys

d = sys.argv[1]


def tried(f):
    try:
        r = f()
        return "ok" if r is None else repr(r)
    except OSError as e:
        return errno.errorcode[e.errno]


os.mkdir(f"{d}/dir")
open(f"{d}/file", "w").close()
os.mkfifo(f"{d}/fifo")
os.mknod(f"{d}/chr", 0o600 | 0o020000, os.makedev(1, 3))
os.symlink("file", f"{d}/link")
s = socket.socket(socket.AF_UNIX)
s.bind(f"{d}/sock")
s.close()
for n in ["dir", "file", "fifo", "chr", "link", "sock"]:
    p = f"{d}/{n}"
    kw = {"follow_symlinks": False}
    print(
        n,
        "set user:", tried(lambda: os.setxattr(p, "user.a", b"1", **kw)),
        "get user:", tried(lambda: os.getxattr(p, "user.a", **kw)),
        "set trusted:", tried(lambda: os.setxattr(p, "trusted.t", b"v" * 100, **kw)),
        "get trusted:", tried(lambda: os.getxattr(p, "trusted.t", **kw)),
        "list:", tried(lambda: sorted(os.listxattr(p, **kw))),
        "remove trusted:", tried(lambda: os.removexattr(p, "trusted.t", **kw)),
        "again:", tried(lambda: os.removexattr(p, "trusted.t", **kw)),
    )
os.setxattr(f"{d}/fifo", "trusted.kept", b"yes")
os.rename(f"{d}/fifo", f"{d}/fifo2")
os.link(f"{d}/chr", f"{d}/chr2")
os.setxattr(f"{d}/chr", "trusted.kept", b"both")
print("renamed:", tried(lambda: os.getxattr(f"{d}/fifo2", "trusted.kept")))
print("linked:", tried(lambda: os.getxattr(f"{d}/chr2", "trusted.kept")))
# File capabilities (a valid v2 `vfs_cap_data`: CAP_NET_RAW permitted and effective) go at a
# write, a truncate, a fallocate and a chown, by anyone (root here); a chmod keeps them.
import struct  # noqa: E402

cap = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)
f = f"{d}/file"
for what, change in [
    ("write", lambda: os.close((lambda fd: (os.write(fd, b"x"), fd)[1])(os.open(f, os.O_WRONLY)))),
    ("truncate", lambda: os.truncate(f, 0)),
    ("fallocate", lambda: os.close((lambda fd: (os.posix_fallocate(fd, 0, 8192), fd)[1])(os.open(f, os.O_WRONLY)))),
    ("chown", lambda: os.chown(f, 0, 0)),
    ("chmod", lambda: os.chmod(f, 0o755)),
]:
    os.setxattr(f, "security.capability", cap)
    change()
    print("capability after", what, tried(lambda: len(os.getxattr(f, "security.capability"))))
print("system.*:", tried(lambda: os.setxattr(f, "system.pmkit", b"1")))
