#!/usr/bin/env bash
# PostgreSQL's bulk load (`pgbench -i -s SCALE`, timed) on the PMFS mount of two pmkit binaries,
# alternated per round, beside ext4 on a /dev/shm loop device: per run a fresh 2 GiB pool or file
# system and a fresh `initdb`. Prints each round's seconds; compare the medians.
#
#   scripts/pg-load-ab.sh OLD NEW [ROUNDS] [SCALE]      e.g. scripts/pg-load-ab.sh /tmp/pmkit-old target/release/pmkit 5 10
#
# MODE=writeback|long|none picks the mount's cache mode (default writeback). Needs root,
# /dev/fuse, losetup, mkfs.ext4 and PostgreSQL (scripts/bench-packages.txt).
set -euo pipefail
old=$(realpath "${1:?usage: $0 OLD NEW [ROUNDS] [SCALE]}")
new=$(realpath "${2:?usage: $0 OLD NEW [ROUNDS] [SCALE]}")
rounds=${3:-5}
scale=${4:-10}
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, pku $(grep -qw pku /proc/cpuinfo && echo yes || echo no); cache ${MODE:-writeback}, scale $scale"
pg() { # DIR -> seconds of pgbench -i
    chown postgres "$1"
    runuser -u postgres -- "$pgbin/initdb" -D "$1/pg" >/dev/null 2>&1
    runuser -u postgres -- "$pgbin/pg_ctl" -D "$1/pg" -o "-k $1 -c listen_addresses=''" -l "$1/pglog" start >/dev/null
    local s e
    s=$(date +%s.%N)
    runuser -u postgres -- "$pgbin/pgbench" -h "$1" -i -s "$scale" postgres >/dev/null 2>&1
    e=$(date +%s.%N)
    runuser -u postgres -- "$pgbin/pg_ctl" -D "$1/pg" -m fast stop >/dev/null
    echo "$e - $s" | bc -l | xargs printf '%.3f'
}
pmfs() { # BIN -> seconds
    local w d t
    w=$(mktemp -d /dev/shm/pmkit-pgab.XXXXXX); chmod 755 "$w"; mkdir "$w/mnt"
    "$1" fs mkfs "$w/pool" --size 2G >/dev/null 2>&1
    "$1" fs mount "$w/pool" "$w/mnt" --cache "${MODE:-writeback}" >"$w/out" 2>"$w/err" &
    d=$!
    for _ in $(seq 100); do grep -q "^ready" "$w/out" 2>/dev/null && break; sleep 0.1; done
    grep -q "^ready" "$w/out" || { cat "$w/err" >&2; exit 1; }
    t=$(pg "$w/mnt")
    "$1" fs umount "$w/mnt" >/dev/null; wait "$d" || true
    rm -rf "$w"; echo "$t"
}
ext4() { # -> seconds
    local w t
    w=$(mktemp -d /dev/shm/pmkit-pgab.XXXXXX); chmod 755 "$w"; mkdir "$w/mnt"
    truncate -s 2G "$w/img"; mkfs.ext4 -q "$w/img"; mount -o loop "$w/img" "$w/mnt"
    t=$(pg "$w/mnt"); umount "$w/mnt"; rm -rf "$w"; echo "$t"
}
for r in $(seq "$rounds"); do
    echo "round $r: old $(pmfs "$old") new $(pmfs "$new") ext4-loop $(ext4)"
done
