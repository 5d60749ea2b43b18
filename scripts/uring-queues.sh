#!/usr/bin/env bash
# Experiment: how the FUSE io_uring queue threads' ring entries are laid out, measured
# on ext4 over `pmkit attach --transport uring` beside ext4 over a /dev/shm loop device.
# Each configuration is a name and the PMKIT_FUSE_URING_* variables it sets (see
# frontends/fuse/src/uring/queue.rs, `Shape`); every repetition attaches a fresh device per
# configuration and runs four fio jobs on it, then the same jobs on the loop device, and reports
# each job's result with the share of CPU time that was idle during it. Medians at the end.
# As root, with enable_uring = Y.      SECS=4 REPS=3 scripts/uring-queues.sh PMKIT
# ORDER sets the order of the jobs (default "qd16 qd1 fsync1 seq1m").
# ATTACH_ARGS adds flags to every `pmkit attach` (e.g. "--protect none").
#   CONFIGS="base:PMKIT_FUSE_URING_LOCAL=32 helper:PMKIT_FUSE_URING_LOCAL=8,PMKIT_FUSE_URING_HELPERS=1"
set -euo pipefail
PMKIT=$1; SECS=${SECS:-4}; REPS=${REPS:-3}
CONFIGS=${CONFIGS:-"base:PMKIT_FUSE_URING_LOCAL=32 spill:PMKIT_FUSE_URING_LOCAL=8,PMKIT_FUSE_URING_SPILL=24 helper:PMKIT_FUSE_URING_LOCAL=8,PMKIT_FUSE_URING_HELPERS=1,PMKIT_FUSE_URING_HELPER_DEPTH=8"}
W=$(mktemp -d /dev/shm/uq.XXXX); mkdir -p "$W/b" "$W/a"
truncate -s 1G "$W/shm.img"; LOOP=$(losetup --find --show "$W/shm.img")
mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP"; mount "$LOOP" "$W/b"
trap '"$PMKIT" detach "$W/a" >/dev/null 2>&1 || true; umount "$W/b"; losetup -d "$LOOP"; rm -rf "$W"' EXIT
JOBS=("qd16:--rw=randwrite --bs=4k --ioengine=libaio --iodepth=16 --direct=1"
      "qd1:--rw=randwrite --bs=4k --ioengine=libaio --iodepth=1 --direct=1"
      "fsync1:--rw=randwrite --bs=4k --ioengine=psync --fsync=1"
      "seq1m:--rw=write --bs=1M --ioengine=libaio --iodepth=4 --direct=1 --end_fsync=1")
idle() { awk '/^cpu / {print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
job() { # dir fio-args: prints "value idle%" (IOPS, or MB/s for seq1m)
    local dir=$1 s0 s1; shift
    s0=$(idle)
    # shellcheck disable=SC2068
    fio --name=q --directory="$dir" --size=256M --time_based --runtime="$SECS" --output-format=json $@ >"$W/fio.json"
    s1=$(idle)
    python3 - "$s0" "$s1" "$W/fio.json" "$*" <<'PY'
import json, sys
i0, t0 = map(int, sys.argv[1].split()); i1, t1 = map(int, sys.argv[2].split())
w = json.load(open(sys.argv[3]))["jobs"][0]["write"]
v = w["bw_bytes"] / 1e6 if "--bs=1M" in sys.argv[4] else w["iops"]
print("%.0f %.0f" % (v, 100 * (i1 - i0) / max(t1 - t0, 1)))
PY
    rm -f "$dir"/q.*
}
ORDER=${ORDER:-"qd16 qd1 fsync1 seq1m"}   # the order the jobs run in on each device
runall() { # dir label
    for name in $ORDER; do
        for spec in "${JOBS[@]}"; do
            if [ "${spec%%:*}" = "$name" ]; then echo "$2 $name $(job "$1" "${spec#*:}")"; fi
        done
    done
}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') ($(nproc) CPUs), pku $(grep -qw pku /proc/cpuinfo && echo yes || echo no)"
for r in $(seq "$REPS"); do
    for c in $CONFIGS; do
        name=${c%%:*}; vars=${c#*:}
        rm -f "$W/pm"
        env ${vars//,/ } "$PMKIT" attach "$W/pm" --size 1G --mkfs ext4 --mountpoint "$W/a" --transport uring ${ATTACH_ARGS:-} >"$W/attach.log" 2>&1 &
        for _ in $(seq 100); do grep -q "^detach with" "$W/attach.log" 2>/dev/null && break; sleep 0.2; done
        runall "$W/a" "$name" | sed "s/^/rep $r /"
        "$PMKIT" detach "$W/a" >/dev/null; wait
    done
    runall "$W/b" loop | sed "s/^/rep $r /"
done | tee "$W/all.txt"
echo "medians over $REPS repetitions (IOPS; seq1m MB/s; idle % of CPU time; ratio to loop):"
python3 - "$W/all.txt" <<'PY'
import sys, statistics as st
from collections import defaultdict
v = defaultdict(list); idle = defaultdict(list); order = []
for line in open(sys.argv[1]):
    _, _, name, job, val, i = line.split()
    v[(name, job)].append(float(val)); idle[(name, job)].append(float(i))
    if name not in order: order.append(name)
jobs = [j for j in ["qd16", "qd1", "fsync1", "seq1m"] if ("loop", j) in v]
print("%-8s" % "" + "".join("%24s" % j for j in jobs))
for n in order:
    cells = []
    for j in jobs:
        m = st.median(v[(n, j)]); l = st.median(v[("loop", j)])
        cells.append("%10.0f %4.0f%% %5.2fx" % (m, st.median(idle[(n, j)]), m / l))
    print("%-8s" % n + "".join("%24s" % c for c in cells))
print("all samples:", {f"{n}/{j}": [int(x) for x in v[(n, j)]] for n in order for j in jobs})
PY
