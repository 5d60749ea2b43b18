#!/bin/sh
# In the guest: `pmkit attach --via nbd` (the kernel's NBD client, served by pmkit over socket
# pairs) or `--via ublk` (the kernel's ublk driver, served over io_uring; Linux 6.0+, so the
# guest runs the backports kernel: scripts/vm/run.sh --kernel backports). ext4 made and mounted, files written and fsynced; a detach while the mount is busy is
# refused and serves on; kill -9 of the attaching process mid-write; `pmkit detach` clears the
# stale attachment (lazy unmount, disconnect); reattached without mkfs, e2fsck and every fsynced
# file compared; then a sub-block direct write and 4 concurrent direct writers on the bare
# device, read back; a lazy detach under a holder of the mount, closed cleanly when it leaves.
#   scripts/vm/guest-attach.sh DEVICE_FILE [nbd|ublk]   (the file made here, 256 MiB, when
#   missing; the route nbd by default)
set -eu
. scripts/vm/guest-lib.sh
dev=$1 via=${2:-nbd} mnt=/mnt/attach
case "$via" in
    nbd) modprobe nbd; says="kernel's NBD client"; node='/dev/nbd[0-9]*' ;;
    ublk) modprobe ublk_drv; says="kernel's ublk driver"; node='/dev/ublkb[0-9]*' ;;
    *) echo "$0: route $via is not nbd or ublk" >&2; exit 2 ;;
esac
# connected: whether the kernel still has the device of the attachment ($nbd): an NBD device
# keeps its sysfs pid until disconnected, a ublk device its char device until deleted.
connected() {
    case "$via" in
        nbd) [ -e "/sys/block/${nbd#/dev/}/pid" ] ;;
        ublk) [ -e "/sys/class/ublk-char/ublkc${nbd#/dev/ublkb}" ] ;;
    esac
}
mkdir -p "$mnt"
[ -e "$dev" ] || "$pmkit" create "$dev" --size 256M > /dev/null

# attach_on LOG ARGS...: `pmkit attach DEV ARGS` in the background, its pid in $pid, once it
# says where the device is; the device in $nbd (/dev/nbdN or /dev/ublkbN).
attach_on() {
    log=$1; shift
    "$pmkit" attach "$dev" "$@" > "$log" 2>&1 &
    pid=$!
    wait_for "$log" grep -q "^detach with" "$log"
    nbd=$(sed -n "s|^  block device: \\($node\\) .*|\\1|p" "$log")
    [ -b "$nbd" ] || { cat "$log"; echo "$0: no $node in the output" >&2; exit 1; }
}

attach_on /tmp/attach1.log --via "$via" --mkfs ext4 --mountpoint "$mnt"
grep -q "$says" /tmp/attach1.log
for i in 1 2 3 4 5 6 7 8; do
    head -c $((i * 65536 + 123)) /dev/urandom > "$mnt/f$i"
    sync "$mnt/f$i"
done
(cd "$mnt" && sha256sum f*) > /tmp/sums
# Busy: a process inside the mount. The detach is refused, naming it; the device serves on.
(cd "$mnt" && sleep 30) &
holder=$!
sleep 0.5
if "$pmkit" detach "$mnt" > /tmp/detach.log 2>&1; then
    cat /tmp/detach.log; echo "$0: a busy detach succeeded" >&2; exit 1
fi
grep -q busy /tmp/detach.log || { cat /tmp/detach.log; exit 1; }
kill "$holder"; wait "$holder" 2>/dev/null || true
(cd "$mnt" && sha256sum -c --quiet /tmp/sums)

# kill -9 with writes in flight (not fsynced, not checked).
head -c 4000000 /dev/urandom > "$mnt/unsynced" 2>/dev/null &
sleep 0.2
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
wait || true
"$pmkit" detach "$mnt" > /tmp/detach2.log 2>&1 || { cat /tmp/detach2.log; exit 1; }
grep -q "stale attachment" /tmp/detach2.log || { cat /tmp/detach2.log; exit 1; }
! connected || { echo "$0: $nbd still connected after detach" >&2; exit 1; }

# Reattached (the device recovers from the kill); the file system checked, then mounted.
attach_on /tmp/attach2.log --via "$via"
rc=0
e2fsck -fy "$nbd" > /tmp/fsck.log 2>&1 || rc=$?
# 0: clean; 1: errors fixed (the journal replayed the cut writes). Anything else is damage.
[ "$rc" -le 1 ] || { cat /tmp/fsck.log; echo "$0: e2fsck exit $rc"; exit 1; }
mount "$nbd" "$mnt"
(cd "$mnt" && sha256sum -c --quiet /tmp/sums)
umount "$mnt"
# Sub-block I/O on the bare device: 512-byte direct writes inside one 4 KiB block.
blocks=$(cat "/sys/block/${nbd#/dev/}/queue/logical_block_size")
head -c 4096 /dev/urandom > /tmp/blk
dd if=/tmp/blk of="$nbd" bs=4096 seek=100 oflag=direct status=none
head -c 512 /dev/urandom > /tmp/sec
dd if=/tmp/sec of=/tmp/blk bs=512 seek=3 conv=notrunc status=none
if [ "$blocks" -le 512 ]; then
    dd if=/tmp/sec of="$nbd" bs=512 seek=$((100 * 8 + 3)) oflag=direct status=none
else
    dd if=/tmp/blk of="$nbd" bs=4096 seek=100 oflag=direct status=none
fi
dd if="$nbd" of=/tmp/back bs=4096 skip=100 count=1 iflag=direct status=none
cmp /tmp/blk /tmp/back
# Concurrent direct writers (threads of one process: a process start is slow under TCG): writer
# w owns blocks w, w+4, w+8, ... of the first 4 MiB, written in 3 passes; each block must hold
# its writer's last bytes.
/usr/bin/python3 - "$nbd" <<'PY'
import mmap, os, sys, threading
W, BLOCKS, B = 4, 1024, 4096
fd = os.open(sys.argv[1], os.O_RDWR | os.O_DIRECT)
def data(w, p):
    return bytes([(p * W + w) | 0x80]) * B
def writer(w, p):
    buf = mmap.mmap(-1, B)
    buf.write(data(w, p))
    for b in range(w, BLOCKS, W):
        os.pwritev(fd, [buf], b * B)
for p in range(3):
    ts = [threading.Thread(target=writer, args=(w, p)) for w in range(W)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    buf = mmap.mmap(-1, B)
    for b in range(BLOCKS):
        os.preadv(fd, [buf], b * B)
        if buf[:] != data(b % W, p):
            sys.exit(f"block {b} lost writer {b % W}'s bytes in pass {p}")
PY
kill "$pid"
wait "$pid" || { cat /tmp/attach2.log; echo "$0: attach did not detach cleanly" >&2; exit 1; }
grep -q "device closed cleanly" /tmp/attach2.log || { cat /tmp/attach2.log; exit 1; }
! connected || { echo "$0: $nbd still connected" >&2; exit 1; }
# A lazy detach while a process holds the mount: the mount point is free at once, the device is
# served until the holder leaves, then disconnected and closed cleanly.
attach_on /tmp/attach3.log --via "$via" --mkfs ext4 --mountpoint "$mnt"
(cd "$mnt" && sleep 4) &
holder=$!
sleep 0.5
"$pmkit" detach --lazy "$mnt" > /tmp/detach3.log 2>&1 || { cat /tmp/detach3.log; exit 1; }
grep -q "lazily" /tmp/detach3.log || { cat /tmp/detach3.log; exit 1; }
! mountpoint -q "$mnt" || { echo "$0: $mnt still mounted after a lazy detach" >&2; exit 1; }
connected || { echo "$0: $nbd disconnected under its holder" >&2; exit 1; }
wait "$holder" || true
wait "$pid" || { cat /tmp/attach3.log; echo "$0: attach did not detach cleanly" >&2; exit 1; }
grep -q "device closed cleanly" /tmp/attach3.log || { cat /tmp/attach3.log; exit 1; }
! connected || { echo "$0: $nbd still connected" >&2; exit 1; }
"$pmkit" check "$dev" > /dev/null
echo "guest-attach.sh: attach --via $via: ext4 made and mounted on $nbd, busy detach refused, kill -9 cleared by detach, reattached, e2fsck exit $rc, 8 fsynced files intact, sub-block and 4 concurrent writers' blocks equal, lazy detach served its holder, then detached clean (logical block $blocks)"
