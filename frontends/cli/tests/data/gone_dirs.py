# Directories removed while a process holds them, in directory argv[1]: renamed over, removed
# with rmdir, and removed while the working directory. Linux's fstat and stat(".") still
# succeed with no links. The tests run it on tmpfs (the model), on the PMFS mount and through
# the shim, and compare what it prints.
import errno
import os
import sys

d = sys.argv[1]


def links(f):
    try:
        return str(f().st_nlink)
    except OSError as x:
        return errno.errorcode[x.errno]


os.mkdir(f"{d}/a")
os.mkdir(f"{d}/b")
fd = os.open(f"{d}/b", os.O_RDONLY | os.O_DIRECTORY)
os.rename(f"{d}/a", f"{d}/b")
print("renamed over, held open:", links(lambda: os.fstat(fd)))
os.close(fd)

os.mkdir(f"{d}/c")
fd = os.open(f"{d}/c", os.O_RDONLY | os.O_DIRECTORY)
os.rmdir(f"{d}/c")
print("removed, held open:", links(lambda: os.fstat(fd)))
os.close(fd)

os.mkdir(f"{d}/w")
here = os.getcwd()
os.chdir(f"{d}/w")
os.rmdir(f"{d}/w")
print("removed, the working directory:", links(lambda: os.stat(".")))
os.chdir(here)
print("the rest:", sorted(os.listdir(d)))
