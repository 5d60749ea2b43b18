# The set-user-ID and set-group-ID rules of chown, write and copy_file_range, as Linux keeps them, run by root
# in directory argv[1], which switches to an unprivileged user for the calls checked. The tests
# run it on tmpfs (the kernel's answers are the model), on the PMFS mount and through the shim,
# and compare what it prints.
import errno
import os
import sys

d = sys.argv[1]
N = 65534


def e(op):
    try:
        op()
        return "ok"
    except OSError as x:
        return errno.errorcode[x.errno]


def mode(name):
    return oct(os.lstat(f"{d}/{name}").st_mode & 0o7777)


def made(name, m, owner):
    os.close(os.open(f"{d}/{name}", os.O_CREAT | os.O_WRONLY, 0o644))
    os.chmod(f"{d}/{name}", m)
    if owner:
        os.chown(f"{d}/{name}", N, N)


os.chmod(d, 0o755)
os.mkfifo(f"{d}/fifo", 0o644)
os.chmod(f"{d}/fifo", 0o6755)
os.chown(f"{d}/fifo", N, N)
made("reg", 0o6755, True)
made("sgid_noexec", 0o2644, True)
made("shared", 0o6777, False)
made("plain", 0o644, False)
made("rootsuid", 0o4755, False)
made("dir_like", 0o6755, True)
made("copied", 0o6777, False)
with open(f"{d}/source", "wb") as f:
    f.write(b"copy me")
out = []
os.setgroups([])
os.setegid(N)
os.seteuid(N)
out.append(("chown fifo", e(lambda: os.chown(f"{d}/fifo", -1, N)), mode("fifo")))
out.append(("chown reg", e(lambda: os.chown(f"{d}/reg", N, -1)), mode("reg")))
out.append(("chown sgid without group exec", e(lambda: os.chown(f"{d}/sgid_noexec", -1, N)), mode("sgid_noexec")))
out.append(("chown -1 -1 own", e(lambda: os.chown(f"{d}/dir_like", -1, -1)), mode("dir_like")))
fd = os.open(f"{d}/shared", os.O_WRONLY)
os.write(fd, b"x")
os.close(fd)
out.append(("write by another user", mode("shared")))
src, dst = os.open(f"{d}/source", os.O_RDONLY), os.open(f"{d}/copied", os.O_WRONLY)
out.append(("copy_file_range by another user", e(lambda: os.copy_file_range(src, dst, 7)), mode("copied")))
os.close(src)
os.close(dst)
out.append(("chown -1 -1 not owner", e(lambda: os.chown(f"{d}/plain", -1, -1)), mode("plain")))
out.append(("chown -1 -1 not owner, set-ID", e(lambda: os.chown(f"{d}/rootsuid", -1, -1)), mode("rootsuid")))
os.seteuid(0)
os.setegid(0)
for line in out:
    print(*line)
