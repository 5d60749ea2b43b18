#!/usr/bin/env bash
# Issue 18's first figure: fio 64-byte random writes with fdatasync after each (psync, 1 thread,
# 16 MiB file, 8 s) on PMFS through the LD_PRELOAD shim (protection none and the default), the
# PMFS FUSE mount, ext4 on `pmkit attach` (the thesis's ext4-on-PMBD baseline) and tmpfs, one
# after the other, with the ratio to ext4 on attach. Prints a table; --json for the raw numbers.
# Needs root, /dev/fuse, fio, e2fsprogs; builds the release binaries first.
#
#   scripts/bench-64b-sync.sh [--json] [--seconds N]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_cargo
json=false
secs=8
while [ $# -gt 0 ]; do
    case "$1" in
    --json) json=true ;;
    --seconds) secs="$2"; shift ;;
    *) echo "usage: $0 [--json] [--seconds N]" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "needs root (attach and the FUSE mount)" >&2; exit 1; }
cargo build --release --locked -q -p pmkit -p pmkit-preload
target="${CARGO_TARGET_DIR:-$PWD/target}/release"
pmkit="$target/pmkit"
shim="$target/libpmkit_preload.so"
work=$(mktemp -d /dev/shm/pmkit-64b.XXXXXX)
cleanup() {
    "$pmkit" fs umount "$work/mnt" >/dev/null 2>&1 || true
    "$pmkit" detach "$work/ext4" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/pfx" "$work/mnt" "$work/ext4" "$work/tmpfs"
# One fio run in DIR (the rest of the command line: a prefix such as `env ... `); prints IOPS.
run() {
    local dir="$1"; shift
    "$@" fio --thread --name=w --directory="$dir" --rw=randwrite --bs=64 --size=16M \
        --ioengine=psync --fdatasync=1 --runtime="$secs" --time_based --output-format=json \
        2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; assert j["error"] == 0, j["error"]; print(round(j["write"]["iops"]))'
}
fresh_pool() { rm -f "$work/pool"; "$pmkit" fs mkfs "$work/pool" --size 512M >/dev/null; }
declare -A iops
fresh_pool
iops[shim-none]=$(run "$work/pfx" env PMFS_PROTECT=none PMKIT_PRELOAD_POOL="$work/pool" \
    PMKIT_PRELOAD_PREFIX="$work/pfx" LD_PRELOAD="$shim")
fresh_pool
iops[shim-default]=$(run "$work/pfx" env PMKIT_PRELOAD_POOL="$work/pool" \
    PMKIT_PRELOAD_PREFIX="$work/pfx" LD_PRELOAD="$shim")
[ -z "$(ls -A "$work/pfx")" ] || { echo "the shim leaked files to the kernel" >&2; exit 1; }
fresh_pool
"$pmkit" fs mount "$work/pool" "$work/mnt" >"$work/mount.out" 2>&1 &
for _ in $(seq 100); do grep -q "^ready" "$work/mount.out" 2>/dev/null && break; sleep 0.1; done
iops[fuse-mount]=$(run "$work/mnt" env)
"$pmkit" fs umount "$work/mnt" >/dev/null
"$pmkit" create "$work/dev.pmbd" --size 1G >/dev/null
"$pmkit" attach "$work/dev.pmbd" --mountpoint "$work/ext4" --mkfs ext4 >"$work/attach.out" 2>&1 &
for _ in $(seq 120); do mountpoint -q "$work/ext4" && break; sleep 0.5; done
mountpoint -q "$work/ext4" || { cat "$work/attach.out" >&2; exit 1; }
iops[ext4-attach]=$(run "$work/ext4" env)
"$pmkit" detach "$work/ext4" >/dev/null
iops[tmpfs]=$(run "$work/tmpfs" env)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
pku=$(grep -qw pku /proc/cpuinfo && echo yes || echo no)
base=${iops[ext4-attach]}
if $json; then
    printf '{"cpu": "%s, %s CPUs, pku %s", "seconds": %s, "iops": {' "$cpu" "$(nproc)" "$pku" "$secs"
    sep=""
    for k in shim-none shim-default fuse-mount ext4-attach tmpfs; do
        printf '%s"%s": %s' "$sep" "$k" "${iops[$k]}"; sep=", "
    done
    printf '}}\n'
else
    echo "fio 64 B random writes + fdatasync, 1 thread, ${secs} s each; CPU: $cpu, $(nproc) CPUs, pku $pku"
    for k in shim-none shim-default fuse-mount ext4-attach tmpfs; do
        printf '%-14s %10s IOPS  %7.2fx ext4-attach\n' "$k" "${iops[$k]}" \
            "$(python3 -c "print(${iops[$k]} / $base)")"
    done
fi
