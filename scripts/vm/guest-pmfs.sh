#!/bin/sh
# In the guest: PMFS from the command line on POOL (a file on fsdax or /dev/shm, or device-dax): mkfs, a FUSE
# mount in the default protection mode (pkey on this CPU), files written, read back, renamed and
# removed, unmount, check, and a second mount that finds every file.
#   scripts/vm/guest-pmfs.sh POOL   (a file, or a device-dax device)
set -eu
. scripts/vm/guest-lib.sh
pool=$1 mnt=/mnt/pmfs
modprobe fuse
mkdir -p "$mnt"
# A device-dax device has its size, and may hold an earlier step's format: it is scratch here.
if [ -c "$pool" ]; then "$pmkit" fs mkfs "$pool" --force; else "$pmkit" fs mkfs "$pool" --size 64M; fi
mount_it() {
    "$pmkit" fs mount "$pool" "$mnt" > /tmp/pmfs-mount.log 2>&1 &
    wait_for /tmp/pmfs-mount.log grep -q "^ready:" /tmp/pmfs-mount.log
    grep "^ready:" /tmp/pmfs-mount.log
}
mount_it
# The default (`auto`) on a CPU with protection keys is pkey.
if grep -qw pku /proc/cpuinfo; then
    grep "^protection pkey" /tmp/pmfs-mount.log || { cat /tmp/pmfs-mount.log; echo "guest-pmfs.sh: auto did not pick pkey"; exit 1; }
fi
mkdir "$mnt/d"
for i in 1 2 3 4 5; do head -c $((i * 10000 + 7)) /dev/urandom > "$mnt/d/f$i"; done
(cd "$mnt/d" && sha256sum f*) > /tmp/pmfs-sums
mv "$mnt/d/f5" "$mnt/d/g5" && sed -i 's/ f5$/ g5/' /tmp/pmfs-sums
head -c 5000 /dev/urandom > "$mnt/gone" && rm "$mnt/gone"
"$pmkit" fs umount "$mnt"
"$pmkit" fs check "$pool"
mount_it
(cd "$mnt/d" && sha256sum -c --quiet /tmp/pmfs-sums)
[ ! -e "$mnt/gone" ]
"$pmkit" fs umount "$mnt"
echo "guest-pmfs.sh: PMFS on $pool: mkfs, mount, files, unmount, check, remount: all as expected"
