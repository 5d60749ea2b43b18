#!/usr/bin/env bash
# The FUSE round trip of the PMFS mount per transport: mount a fresh pool with
# `--cache none` (attributes never cached, so every fstat of an open file is one GETATTR request)
# over /dev/fuse, then over io_uring, time N fstat calls on one open file from one thread, and
# read the daemon's --stats file for the requests it served and their mean time in the library.
# Per transport it prints: µs per fstat (the whole round trip: syscall, FUSE, daemon, reply),
# GETATTR requests per fstat (must be 1), library µs per GETATTR, and the rest (round trip minus
# library: what the kernel and the transport cost). The same for 4 KiB pwrite (one WRITE each:
# no writeback cache).
#
#   scripts/fuse-roundtrip.sh PMKIT [N]      e.g. scripts/fuse-roundtrip.sh target/release/pmkit
#
# REPS=R (default 5) repeats the whole measurement R times, the transports alternating, and
# prints every row, then the median of each column per transport and call.
#
# Needs root, /dev/fuse, python3, and /sys/module/fuse/parameters/enable_uring = Y for uring
# (left as it is: the uring row is skipped when it is N).
set -euo pipefail
pmkit=$(realpath "${1:?usage: $0 PMKIT [N]}")
n=${2:-50000}
transports="dev"
[ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ] && transports="dev uring"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; $n calls each"
reps=${REPS:-5}
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
header() {
    printf '%-6s %-12s %10s %14s %12s %10s\n' transport call "us/call" "requests/call" "library us" "rest us"
}
header
for rep in $(seq "$reps"); do
for t in $transports; do
    work=$(mktemp -d /dev/shm/pmkit-rt.XXXXXX)
    mkdir "$work/mnt"
    "$pmkit" fs mkfs "$work/pool" --size 256M >/dev/null 2>&1
    "$pmkit" fs mount "$work/pool" "$work/mnt" --cache none --transport "$t" \
        --stats "$work/stats.json" >"$work/out" 2>"$work/err" &
    daemon=$!
    for _ in $(seq 100); do grep -q "^ready" "$work/out" 2>/dev/null && break; sleep 0.1; done
    grep -q "^ready" "$work/out" || { cat "$work/err" >&2; exit 1; }
    # Times, then the request counts before and after each loop (from the stats file at exit
    # only, so each loop runs on its own mount: fstat first, then pwrite).
    python3 - "$work/mnt/f" "$n" >"$work/times" <<'EOF'
import os, sys, time
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
for _ in range(1000):
    os.fstat(fd)
t = time.perf_counter()
for _ in range(n):
    os.fstat(fd)
print("fstat", (time.perf_counter() - t) / n * 1e6)
buf = b"x" * 4096
for i in range(1000):
    os.pwrite(fd, buf, 0)
t = time.perf_counter()
for i in range(n):
    os.pwrite(fd, buf, (i % 256) * 4096)
print("pwrite", (time.perf_counter() - t) / n * 1e6)
os.close(fd)
EOF
    "$pmkit" fs umount "$work/mnt" >/dev/null
    wait "$daemon"
    python3 - "$work/stats.json" "$work/times" "$t" "$n" <<'EOF'
import json, sys
stats, times, t, n = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = {r["op"]: r for r in stats["ops"]}
for line in open(times):
    call, us = line.split()
    us = float(us)
    op = {"fstat": "getattr", "pwrite": "write"}[call]
    r = rows[op]
    # n timed calls plus 1000 warm-up calls, and the odd request of open/close.
    per = r["ops"] / (n + 1000)
    print(f"{t:<6} {call + ' ' + op:<12} {us:10.2f} {per:14.2f} {r['mean_us']:12.2f} {us - per * r['mean_us']:10.2f}")
EOF
    rm -rf "$work"
done
done | tee "$rows"
echo "median of $reps:"
header
python3 - "$rows" <<'EOF'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    f = line.split()
    by.setdefault((f[0], f[1] + " " + f[2]), []).append([float(x) for x in f[3:]])
for (t, call), v in by.items():
    m = [statistics.median(c) for c in zip(*v)]
    print(f"{t:<6} {call:<12} {m[0]:10.2f} {m[1]:14.2f} {m[2]:12.2f} {m[3]:10.2f}")
EOF
