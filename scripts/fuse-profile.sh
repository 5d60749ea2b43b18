#!/usr/bin/env bash
# Where a request's time goes on the `pmkit attach` FUSE path: the same fio job on
# ext4 over `pmkit attach` and on ext4 over a loop device on a /dev/shm file, with the attaching
# process's context switches and system calls counted over the run. As root.
#   scripts/fuse-profile.sh PMKIT_BINARY [extra pmkit attach flags...]
set -euo pipefail
PMKIT=${1:?pmkit binary}; shift
SECS=${SECS:-10}
W=$(mktemp -d /dev/shm/p17.XXXX)
mkdir -p "$W/a" "$W/b"
cleanup() {
    "$PMKIT" detach "$W/a" >/dev/null 2>&1 || true
    umount "$W/b" 2>/dev/null || true
    [ -n "${LOOP:-}" ] && losetup -d "$LOOP" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
"$PMKIT" attach "$W/pm" --size 1G --mkfs ext4 --mountpoint "$W/a" "$@" >"$W/attach.log" 2>&1 &
for _ in $(seq 100); do grep -q "^detach with" "$W/attach.log" 2>/dev/null && break; sleep 0.2; done
PID=$(pgrep -f "attach $W/pm" | head -1)
truncate -s 1G "$W/shm.img"
LOOP=$(losetup --find --show "$W/shm.img")
mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP"
mount "$LOOP" "$W/b"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) ($(nproc) cores), kernel $(uname -r)"
echo "daemon pid $PID, threads: $(ls /proc/$PID/task | wc -l) ($(cat /proc/$PID/task/*/comm | sort | uniq -c | tr '\n' ' '))"
L=$(basename "$(awk '/block device:/ {print $3}' "$W/attach.log")")
echo "$(grep 'FUSE file:' "$W/attach.log" | sed 's/^ *//'); $L: dio $(cat /sys/block/$L/loop/dio), max_sectors_kb $(cat /sys/block/$L/queue/max_sectors_kb)"
ctx() { awk '/ctxt_switches/ {s+=$2} END {print s}' /proc/$PID/task/*/status; }
job() { # name dir args...
    local name=$1 dir=$2; shift 2
    fio --name="$name" --directory="$dir" --size=256M --time_based --runtime="$SECS" \
        --output-format=json "$@" | python3 -c 'import json,sys; w=json.load(sys.stdin)["jobs"][0]["write"]; print("%.0f IOPS %.1f MB/s" % (w["iops"], w["bw_bytes"]/1e6))'
}
for spec in "randwrite-qd16:--rw=randwrite --bs=4k --ioengine=libaio --iodepth=16 --direct=1" \
            "randwrite-fsync1:--rw=randwrite --bs=4k --ioengine=psync --fsync=1" \
            "seqwrite-1m:--rw=write --bs=1M --ioengine=libaio --iodepth=4 --direct=1 --end_fsync=1"; do
    name=${spec%%:*}; args=${spec#*:}
    c0=$(ctx); r0=$(awk '/syscr|syscw/ {printf "%s ", $2}' /proc/$PID/io)
    # shellcheck disable=SC2086
    a=$(job "$name" "$W/a" $args); c1=$(ctx); r1=$(awk '/syscr|syscw/ {printf "%s ", $2}' /proc/$PID/io)
    # shellcheck disable=SC2086
    b=$(job "$name" "$W/b" $args)
    set -- $r0; sr0=$1; sw0=$2; set -- $r1; sr1=$1; sw1=$2
    echo "$name: attach $a | shm-loop $b | daemon: $((c1 - c0)) ctx switches, $((sr1 - sr0)) read syscalls, $((sw1 - sw0)) write syscalls"
    rm -f "$W"/a/"$name".* "$W"/b/"$name".*
done
