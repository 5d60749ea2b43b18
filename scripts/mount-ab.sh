#!/usr/bin/env bash
# Two pmkit binaries side by side on the PMFS mount (default options), one load timed on a
# fresh 256 MiB pool per run, the binaries alternated A B A B per transport so drift hits both;
# prints ops/s of each pair and the median ratio A/B. For a change to the mount's request path:
# build the old binary, copy it aside, build the new one.
#
#   scripts/mount-ab.sh A B [PAIRS]    e.g. scripts/mount-ab.sh /tmp/pmkit-new /tmp/pmkit-old 5
#
# LOAD=append-fsync (default): 4 KiB append + fsync, 200 warm-up then 3,000 timed.
# LOAD=create: open(O_CREAT|O_EXCL) + close of 3,000 new files in one directory.
# LOAD=walk: a tree of 300 directories of 10 files each made (untimed), then 10 passes of a
#   find-like walk (list each directory, stat each subdirectory); ops = directories listed.
# LOAD=find, LOAD=lsl: a tree of 1,000 directories of 20 files, each directory's mode then set
#   (as tar does at its end), the pool unmounted and mounted again (nothing cached), then one
#   timed pass: find-like (subdirectories stat'ed; ops = directories listed) or `ls -lR`-like
#   (every entry stat'ed; ops = entries).
#
# Needs root, /dev/fuse, python3; the uring transport needs enable_uring = Y.
set -euo pipefail
a=$(realpath "${1:?usage: $0 A B [PAIRS]}")
b=$(realpath "${2:?usage: $0 A B [PAIRS]}")
pairs=${3:-5}
load=${LOAD:-append-fsync}
case $load in append-fsync | create | walk | find | lsl) ;; *) echo "LOAD must be append-fsync, create, walk, find or lsl" >&2; exit 2 ;; esac
one() { # BIN TRANSPORT -> ops/s
    local w
    w=$(mktemp -d /dev/shm/pmkit-ab.XXXXXX)
    mkdir "$w/m"
    "$1" fs mkfs "$w/pool" --size 256M > /dev/null
    setsid "$1" fs mount "$w/pool" "$w/m" --transport "$2" > "$w/log" 2>&1 < /dev/null &
    for _ in $(seq 100); do mountpoint -q "$w/m" && break; sleep 0.1; done
    if [ "$load" = find ] || [ "$load" = lsl ]; then
        python3 - "$w/m" <<'PY'
import os, sys
d = sys.argv[1]
for i in range(1000):
    os.makedirs(f"{d}/t/{i % 10}/{i}")
    for k in range(20):
        open(f"{d}/t/{i % 10}/{i}/f{k}", "w").close()
for i in range(1000):
    os.chmod(f"{d}/t/{i % 10}/{i}", 0o750)
PY
        umount "$w/m"
        wait
        setsid "$1" fs mount "$w/pool" "$w/m" --transport "$2" > "$w/log" 2>&1 < /dev/null &
        for _ in $(seq 100); do mountpoint -q "$w/m" && break; sleep 0.1; done
    fi
    python3 - "$w/m" "$load" <<'PY'
import os, sys, time
d, load = sys.argv[1], sys.argv[2]
n = 3000
if load in ("walk", "find", "lsl"):
    if load == "walk":
        for i in range(300):
            os.makedirs(f"{d}/t/{i % 10}/{i}")
            for k in range(10):
                open(f"{d}/t/{i % 10}/{i}/f{k}", "w").close()
    n = 0
    t = time.perf_counter()
    for _ in range(10 if load == "walk" else 1):
        todo = [f"{d}/t"]
        while todo:
            p = todo.pop()
            n += 1
            for e in os.scandir(p):
                if load == "lsl":
                    os.lstat(e.path)
                    n += 1
                if e.is_dir(follow_symlinks=False):
                    os.stat(e.path)
                    todo.append(e.path)
elif load == "create":
    t = time.perf_counter()
    for i in range(n):
        os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
else:
    fd = os.open(f"{d}/f", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    b = b"x" * 4096
    for _ in range(200):
        os.write(fd, b); os.fsync(fd)
    t = time.perf_counter()
    for _ in range(n):
        os.write(fd, b); os.fsync(fd)
print(round(n / (time.perf_counter() - t)))
PY
    umount "$w/m"
    wait
    rm -rf "$w"
}
echo "load $load; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, pku $(grep -qw pku /proc/cpuinfo && echo yes || echo no)"
transports=dev
[ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ] && transports="dev uring"
for t in $transports; do
    ratios=()
    for _ in $(seq "$pairs"); do
        x=$(one "$a" "$t" 2>/dev/null)
        y=$(one "$b" "$t" 2>/dev/null)
        ratios+=("$(python3 -c "print(round($x / $y, 2))")")
        echo "$t: A $x ops/s, B $y ops/s, A/B ${ratios[-1]}"
    done
    echo "$t: median A/B $(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(( (pairs + 1) / 2 ))p")"
done
