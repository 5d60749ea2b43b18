# O_TMPFILE and linkat of a descriptor, in the directory argv[1]: by /proc/self/fd/N with
# AT_SYMLINK_FOLLOW (the form open(2) gives; Python's os.link calls link(2) there, which does
# not follow it, hence ctypes) and by AT_EMPTY_PATH (needs root). One line per step, the errno
# name where a step fails. Run on tmpfs (the kernel's answers) and through the shim.
import ctypes
import errno
import os
import sys

d = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_FOLLOW = 0x400


def tried(what, f):
    try:
        r = f()
        print(what, "ok" if r is None else r)
    except OSError as e:
        print(what, errno.errorcode[e.errno])


def linkat(*args):
    if libc.linkat(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def link_empty(fd, path):
    linkat(fd, b"", -100, path.encode(), AT_EMPTY_PATH)


def link_proc(fd, path):
    linkat(-100, b"/proc/self/fd/%d" % fd, -100, path.encode(), AT_SYMLINK_FOLLOW)


fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
os.write(fd, b"made with no name")
st = os.fstat(fd)
print("unnamed:", st.st_nlink, oct(st.st_mode & 0o7777), sorted(os.listdir(d)))
link_proc(fd, os.path.join(d, "named"))
print("named:", os.fstat(fd).st_nlink, open(os.path.join(d, "named")).read())
tried("again", lambda: link_proc(fd, os.path.join(d, "named")))
os.close(fd)

fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o600)
os.write(fd, b"by AT_EMPTY_PATH")
tried("empty path", lambda: link_empty(fd, os.path.join(d, "empty")))
os.close(fd)
print("empty:", open(os.path.join(d, "empty")).read())

fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
tried("excl", lambda: link_proc(fd, os.path.join(d, "x")))
tried("excl, empty path", lambda: link_empty(fd, os.path.join(d, "x")))
os.close(fd)

fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
os.close(fd)
print("closed unnamed:", sorted(os.listdir(d)))

tried("on a file", lambda: os.open(os.path.join(d, "named"), os.O_TMPFILE | os.O_RDWR, 0o600))
tried("read-only", lambda: os.open(d, os.O_TMPFILE | os.O_RDONLY, 0o600))
tried("missing", lambda: os.open(os.path.join(d, "nope"), os.O_TMPFILE | os.O_RDWR, 0o600))
