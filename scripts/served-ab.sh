#!/usr/bin/env bash
# Two builds of the served shim side by side: per run a fresh pool served by `pmkit fs serve`
# and CLIENTS Python processes under the shim at once (each in a directory of its own), timing
# open + close of one file (N times) and create (open O_CREAT|O_EXCL + close, 2,000 new files);
# the builds alternated A B A B so drift hits both. Prints µs per call of each process.
#
#   scripts/served-ab.sh A_DIR B_DIR [PAIRS]   e.g. scripts/served-ab.sh target/release /tmp/old/release 3
#
# A_DIR and B_DIR hold `pmkit` and `libpmkit_preload.so` of one build each (a shim and a server of
# different builds refuse each other). CLIENTS=2 (default), N=10000. Needs python3.
set -euo pipefail
a=$(realpath "${1:?usage: $0 A_DIR B_DIR [PAIRS]}")
b=$(realpath "${2:?usage: $0 A_DIR B_DIR [PAIRS]}")
pairs=${3:-3}
clients=${CLIENTS:-2}
n=${N:-10000}
one() { # DIR -> one line per client
    local w sp pids=()
    w=$(mktemp -d /dev/shm/pmkit-served-ab.XXXXXX)
    "$1/pmkit" fs mkfs "$w/pool" --size 64M > /dev/null 2>&1
    setsid "$1/pmkit" fs serve "$w/pool" > "$w/log" 2>&1 < /dev/null &
    sp=$!
    for _ in $(seq 50); do grep -q . "$w/log" 2>/dev/null && break; sleep 0.1; done
    sleep 0.2
    for c in $(seq "$clients"); do
        LD_PRELOAD="$1/libpmkit_preload.so" PMKIT_PRELOAD_POOL="$w/pool" PMKIT_PRELOAD_PREFIX=/pmfs \
            python3 - "$c" "$n" > "$w/out$c" <<'PY' &
import os, sys, time
c, n = sys.argv[1], int(sys.argv[2])
d = f"/pmfs/d{c}"
os.mkdir(d)
open(f"{d}/f", "w").close()
time.sleep(0.3)  # the other clients start too
t = time.perf_counter()
for _ in range(n):
    os.close(os.open(f"{d}/f", os.O_RDONLY))
oc = (time.perf_counter() - t) / n * 1e6
t = time.perf_counter()
for i in range(2000):
    os.close(os.open(f"{d}/c{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
cr = (time.perf_counter() - t) / 2000 * 1e6
print(f"open+close {oc:.2f} us, create {cr:.2f} us")
PY
        pids+=($!)
    done
    wait "${pids[@]}"
    for c in $(seq "$clients"); do echo "  client $c: $(cat "$w/out$c")"; done
    kill -TERM "$sp"; wait "$sp" 2>/dev/null || true
    rm -rf "$w"
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, pku $(grep -qw pku /proc/cpuinfo && echo yes || echo no); $clients client(s)"
for i in $(seq "$pairs"); do
    echo "pair $i, A ($a):"; one "$a"
    echo "pair $i, B ($b):"; one "$b"
done
