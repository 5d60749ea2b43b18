#!/usr/bin/env bash
# Issue 17 experiment: fio 4k randwrite qd16 on ext4 over `pmkit attach --transport uring` with the
# queue threads pinned (default) and unpinned (PMKIT_FUSE_URING_PIN=0), and on ext4 over a /dev/shm
# loop device, alternating. As root, enable_uring = Y.   SECS=4 REPS=3 scripts/uring-pin-qd16.sh PMKIT
set -euo pipefail
PMKIT=$1; SECS=${SECS:-5}; REPS=${REPS:-3}
W=$(mktemp -d /dev/shm/q16.XXXX); mkdir -p "$W/b"
truncate -s 1G "$W/shm.img"; LOOP=$(losetup --find --show "$W/shm.img")
mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP"; mount "$LOOP" "$W/b"
trap 'umount "$W/b"; losetup -d "$LOOP"; rm -rf "$W"' EXIT
job() { fio --name=q --directory="$1" --size=256M --time_based --runtime="$SECS" --output-format=json \
    --rw=randwrite --bs=4k --ioengine=libaio --iodepth=16 --direct=1 | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["jobs"][0]["write"]["iops"])'; }
att() { # pin
    mkdir -p "$W/a"; rm -f "$W/pm"
    PMKIT_FUSE_URING_PIN=$1 "$PMKIT" attach "$W/pm" --size 1G --mkfs ext4 --mountpoint "$W/a" --transport uring >"$W/attach.log" 2>&1 &
    for _ in $(seq 100); do grep -q "^detach with" "$W/attach.log" 2>/dev/null && break; sleep 0.2; done
    job "$W/a"; "$PMKIT" detach "$W/a" >/dev/null; wait
}
for r in $(seq "$REPS"); do
    p=$(att 1); u=$(att 0); l=$(job "$W/b"); rm -f "$W"/b/q.*
    echo "rep $r: pinned $p unpinned $u loop $l  ratios $(python3 -c "print('%.2f %.2f' % ($p/$l, $u/$l))")  load $(cut -d' ' -f1 /proc/loadavg)"
done
