#!/bin/sh
# In the guest: `pmkit serve` under the kernel's NBD client. ext4 made and mounted on /dev/nbd0,
# files written and fsynced, the server killed with SIGKILL mid-use, then served again,
# reconnected, checked with e2fsck and every fsynced file compared with what was written.
#   scripts/vm/guest-nbd.sh DEVICE_FILE   (a pmkit device: `pmkit create`)
set -eu
. scripts/vm/guest-lib.sh
dev=$1 sock=/tmp/pmkit-nbd.sock mnt=/mnt/nbd
modprobe nbd
serve_on "$sock" "$dev"
nbd-client -unix "$sock" /dev/nbd0 -b 4096
mkfs.ext4 -q -F /dev/nbd0
mkdir -p "$mnt"
mount /dev/nbd0 "$mnt"
for i in 1 2 3 4 5 6 7 8; do
    head -c $((i * 65536 + 123)) /dev/urandom > "$mnt/f$i"
    sync "$mnt/f$i"
done
(cd "$mnt" && sha256sum f*) > /tmp/sums
# Writes in flight when the server dies: not fsynced, not checked.
head -c 4000000 /dev/urandom > "$mnt/unsynced" &
sleep 0.2
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
nbd-client -d /dev/nbd0 || true
umount -l "$mnt" 2>/dev/null || true
wait || true
serve_on "$sock" "$dev"
nbd-client -unix "$sock" /dev/nbd0 -b 4096
rc=0
e2fsck -fy /dev/nbd0 > /tmp/fsck.log 2>&1 || rc=$?
# 0: clean; 1: errors fixed (the journal replayed the cut writes). Anything else is damage.
[ "$rc" -le 1 ] || { cat /tmp/fsck.log; echo "guest-nbd.sh: e2fsck exit $rc"; exit 1; }
mount /dev/nbd0 "$mnt"
(cd "$mnt" && sha256sum -c --quiet /tmp/sums)
umount "$mnt"
nbd-client -d /dev/nbd0
kill "$pid"
wait "$pid" 2>/dev/null || true
echo "guest-nbd.sh: ext4 over pmkit serve survived kill -9 of the server; e2fsck exit $rc; 8 fsynced files intact"
