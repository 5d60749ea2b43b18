#!/usr/bin/env bash
# PostgreSQL's bulk load and its transactions on the PMFS mount in each write mode, against
# ext4 on a /dev/shm loop device, in one run with the targets rotated per round: per target,
# a fresh file system, initdb, `pgbench -i -s SCALE` timed (the bulk load: 8 KiB writes, a
# checkpoint and fsyncs at the end), then `pgbench -c 4 -j 2 -T SECS` (transactions per second,
# each commit an fsync of the WAL). Prints every measurement and the median per target, with
# the ratio to ext4 on the loop device.
#
#   scripts/pgbench-load.sh PMKIT [SCALE] [SECS]   e.g. scripts/pgbench-load.sh target/release/pmkit 10 20
#
# ROUNDS=R (default 3). TARGETS="..." picks targets (default: pmfs-long pmfs-writeback
# ext4-loop): pmfs-long (durable on return, the default mount), pmfs-writeback (`--cache
# writeback`), pmfs-shim (PostgreSQL's programs under the LD_PRELOAD shim, the pool served by
# `pmkit fs serve`; libpmkit_preload.so beside PMKIT; the pool is checked after each run),
# pmfs-peer (the same programs under the shim, the pool served by its FUSE mount's daemon, the
# shim's prefix the mount point),
# ext4-loop (ext4 on a loop device over a /dev/shm file, default options).
# Needs root, /dev/fuse, losetup, mkfs.ext4 and PostgreSQL (scripts/bench-packages.txt).
set -euo pipefail
pmkit=$(realpath "${1:?usage: $0 PMKIT [SCALE] [SECS]}")
scale=${2:-10}
secs=${3:-20}
rounds=${ROUNDS:-3}
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
[ -x "$pgbin/initdb" ] || { echo "PostgreSQL not found under /usr/lib/postgresql" >&2; exit 1; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, pku $(grep -qw pku /proc/cpuinfo && echo yes || echo no); scale $scale, ${secs} s of transactions, $rounds rounds"
rows=$(mktemp)
work=""
daemon=""
loop=""
shim=""
cleanup() {
    [ -n "$work" ] && { runuser -u postgres -- env $shim "$pgbin/pg_ctl" -D "$work/mnt/pg" -m immediate stop >/dev/null 2>&1 || true; }
    if [ -n "$daemon" ] && [ -n "$shim" ]; then
        kill -TERM "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true
        for _ in $(seq 100); do mountpoint -q "$work/mnt" || break; sleep 0.1; done
        "$pmkit" fs check "$work/pool" >/dev/null || echo "pmkit fs check found problems in the served pool" >&2
    elif [ -n "$daemon" ]; then
        "$pmkit" fs umount "$work/mnt" >/dev/null 2>&1 || umount -l "$work/mnt" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true
    fi
    [ -n "$loop" ] && { umount "$work/mnt" 2>/dev/null || true; losetup -d "$loop" 2>/dev/null || true; }
    [ -n "$work" ] && rm -rf "$work"
    work="" daemon="" loop="" shim=""
}
trap 'cleanup; rm -f "$rows"' EXIT
# Until the daemon just started says it is ready (else its errors, and out).
wait_ready() {
    for _ in $(seq 100); do grep -q "^ready" "$work/out" 2>/dev/null && break; sleep 0.1; done
    grep -q "^ready" "$work/out" || { cat "$work/err" >&2; exit 1; }
}
up() {
    work=$(mktemp -d /dev/shm/pmkit-pg.XXXXXX)
    chmod 755 "$work"
    mkdir "$work/mnt"
    case $1 in
    pmfs-shim)
        "$pmkit" fs mkfs "$work/pool" --size 2G >/dev/null 2>&1
        chmod 666 "$work/pool"
        "$pmkit" fs serve "$work/pool" >"$work/out" 2>"$work/err" &
        daemon=$!
        wait_ready
        shim="LD_PRELOAD=$(dirname "$pmkit")/libpmkit_preload.so PMKIT_PRELOAD_POOL=$work/pool PMKIT_PRELOAD_PREFIX=$work/mnt"
        env $shim chown postgres:postgres "$work/mnt"
        return
        ;;
    pmfs-peer)
        "$pmkit" fs mkfs "$work/pool" --size 2G >/dev/null 2>&1
        chmod 666 "$work/pool"
        "$pmkit" fs mount "$work/pool" "$work/mnt" >"$work/out" 2>"$work/err" &
        daemon=$!
        wait_ready
        # The prefix is the mount point: the shim's processes and the kernel see one tree.
        shim="LD_PRELOAD=$(dirname "$pmkit")/libpmkit_preload.so PMKIT_PRELOAD_POOL=$work/pool PMKIT_PRELOAD_PREFIX=$work/mnt"
        env $shim chown postgres:postgres "$work/mnt"
        return
        ;;
    pmfs-*)
        local cache=${1#pmfs-}
        "$pmkit" fs mkfs "$work/pool" --size 2G >/dev/null 2>&1
        "$pmkit" fs mount "$work/pool" "$work/mnt" --cache "$cache" >"$work/out" 2>"$work/err" &
        daemon=$!
        wait_ready
        ;;
    ext4-loop)
        truncate -s 2G "$work/disk"
        loop=$(losetup -f --show "$work/disk")
        mkfs.ext4 -q "$loop"
        mount "$loop" "$work/mnt"
        ;;
    esac
    chown postgres:postgres "$work/mnt"
}
measure() {
    local t=$1 round=$2
    up "$t"
    # Under the shim the socket and the log stay in the kernel's tree (pgbench runs without the
    # shim; a socket bound in the pool is the binding process's alone).
    local pg="runuser -u postgres -- env $shim" data="$work/mnt/pg" sock="$work/mnt" log="$work/mnt/pg.log"
    if [ -n "$shim" ]; then sock=$(mktemp -d /tmp/pmkit-pgsock.XXXXXX); chmod 777 "$sock"; log="$sock/pg.log"; fi
    $pg "$pgbin/initdb" -D "$data" -A trust --no-sync >/dev/null
    $pg "$pgbin/pg_ctl" -D "$data" -w -l "$log" \
        -o "-k $sock -c listen_addresses='' -p 5498 -c shared_buffers=128MB -c max_wal_size=1GB" start >/dev/null
    local t0 t1
    t0=$(date +%s.%N)
    local bench="runuser -u postgres --"
    $bench "$pgbin/pgbench" -h "$sock" -p 5498 -i -q -s "$scale" postgres >/dev/null 2>&1
    t1=$(date +%s.%N)
    local load tps
    load=$(echo "$t1 - $t0" | bc)
    tps=$($bench "$pgbin/pgbench" -h "$sock" -p 5498 -c 4 -j 2 -T "$secs" postgres 2>/dev/null \
        | awk '/^tps = /{print $3}')
    $pg "$pgbin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    if [ -n "$shim" ]; then grep -E "PANIC|FATAL" "$log" >&2 || true; rm -rf "$sock"; fi
    cleanup
    printf '%-15s round %d: load %7.2f s, %9.1f tps\n' "$t" "$round" "$load" "$tps"
    echo "$t $load $tps" >>"$rows"
}
read -r -a targets <<< "${TARGETS:-pmfs-long pmfs-writeback ext4-loop}"
n=${#targets[@]}
for r in $(seq "$rounds"); do
    # rotated, so no target always runs first or last
    for k in $(seq 0 $((n - 1))); do
        measure "${targets[$(( (k + r) % n ))]}" "$r"
    done
done
echo "medians (ratio to ext4-loop: load time, inverted so higher is better; tps):"
python3 - "$rows" "${targets[@]}" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for t in sys.argv[2:]:
    load = statistics.median(float(r[1]) for r in rows if r[0] == t)
    tps = statistics.median(float(r[2]) for r in rows if r[0] == t)
    med[t] = (load, tps)
base = med.get("ext4-loop") or next(iter(med.values()))
for t, (load, tps) in med.items():
    print(f"{t:15} load {load:7.2f} s ({base[0] / load:.2f}x)  {tps:9.1f} tps ({tps / base[1]:.2f}x)")
EOF
