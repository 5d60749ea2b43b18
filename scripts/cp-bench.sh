#!/usr/bin/env bash
# `cp` of one 256 MiB file on the PMFS mount of each binary given (each transport), beside ext4
# on a /dev/shm loop device (which copies), XFS (reflink=1) and Btrfs on one (which share the
# blocks, as PMFS format 8 does; where mkfs.xfs / mkfs.btrfs and the kernel have them) and tmpfs,
# in one run: a fresh pool (2 GiB) or file system per target,
# the file written from /dev/urandom (untimed), then `cp src dst; rm dst` three times, timed;
# prints seconds per copy, and for the mount the requests its daemon answered (`--stats`) and
# the blocks the copies took from the pool's free space. One more copy is compared with `cmp`.
#
#   scripts/cp-bench.sh BIN [BIN ...]     e.g. scripts/cp-bench.sh target/release/pmkit /tmp/pmkit-old
#
# Needs root, /dev/fuse, e2fsprogs, bc, python3; the uring transport needs enable_uring = Y.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN ...]" >&2; exit 2; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, pku $(grep -qw pku /proc/cpuinfo && echo yes || echo no)"
mib=256
timed() { # DIR -> seconds per copy
    head -c $((mib << 20)) /dev/urandom > "$1/src"
    sync
    local s e
    s=$(date +%s.%N)
    for _ in 1 2 3; do cp "$1/src" "$1/dst"; rm "$1/dst"; done
    e=$(date +%s.%N)
    cp "$1/src" "$1/dst"
    cmp "$1/src" "$1/dst"
    echo "($e - $s) / 3" | bc -l | xargs printf '%.3f'
}
transports="dev"
[ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ] && transports="dev uring"
for bin in "$@"; do
    for t in $transports; do
        w=$(mktemp -d /dev/shm/pmkit-cp.XXXXXX)
        mkdir "$w/m"
        "$bin" fs mkfs "$w/pool" --size 2G > /dev/null
        setsid "$bin" fs mount "$w/pool" "$w/m" --transport "$t" --stats "$w/stats.json" > "$w/log" 2>&1 < /dev/null &
        for _ in $(seq 100); do mountpoint -q "$w/m" && break; sleep 0.1; done
        secs=$(timed "$w/m")
        took=$(( $(stat -f -c %a "$w/m/src") ))
        rm "$w/m/dst"
        took=$(( $(stat -f -c %a "$w/m/src") - took ))
        "$bin" fs umount "$w/m" > /dev/null
        for _ in $(seq 50); do [ -s "$w/stats.json" ] && break; sleep 0.1; done
        reqs=$(python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
print(', '.join(f\"{r['op']} {r['ops']}\" for r in j['ops'] if r['op'] in ('read', 'write', 'copy_file_range') and r['ops']))" "$w/stats.json")
        echo "pmfs $t $bin: $secs s per $mib MiB cp ($reqs; a copy took $took blocks of 4 KiB)"
        rm -rf "$w"
    done
done
w=$(mktemp -d /dev/shm/pmkit-cp.XXXXXX)
mkdir "$w/m"
truncate -s 2G "$w/img"
mkfs.ext4 -q "$w/img"
mount -o loop "$w/img" "$w/m"
echo "ext4-loop: $(timed "$w/m") s per $mib MiB cp"
umount "$w/m"
rm -rf "$w"
for fs in xfs btrfs; do
    command -v "mkfs.$fs" > /dev/null && grep -qw "$fs" /proc/filesystems || continue
    w=$(mktemp -d /dev/shm/pmkit-cp.XXXXXX)
    mkdir "$w/m"
    truncate -s 2G "$w/img"
    case $fs in
        xfs) mkfs.xfs -q -m reflink=1 "$w/img" ;;
        btrfs) mkfs.btrfs -q "$w/img" > /dev/null ;;
    esac
    mount -o loop "$w/img" "$w/m"
    echo "$fs-loop (reflink): $(timed "$w/m") s per $mib MiB cp"
    umount "$w/m"
    rm -rf "$w"
done
w=$(mktemp -d /dev/shm/pmkit-cp.XXXXXX)
echo "tmpfs: $(timed "$w") s per $mib MiB cp"
rm -rf "$w"
