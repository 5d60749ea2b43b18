#!/bin/sh
# In a guest started with --nvdimm: make the emulated NVDIMM's namespace fsdax (ext4 on
# /dev/pmem0 mounted with -o dax at DIR, default /mnt/pmem) or devdax (/dev/dax0.0).
#   scripts/vm/guest-pmem.sh fsdax [DIR] | devdax
set -eu
[ "${PMKIT_IN_VM:-}" = 1 ] || { echo "guest-pmem.sh: runs inside scripts/vm/run.sh only" >&2; exit 2; }
mode=${1:?fsdax or devdax}
ndctl create-namespace -f -e namespace0.0 -m "$mode" > /dev/null
case "$mode" in
    fsdax)
        dir=${2:-/mnt/pmem}
        mkfs.ext4 -q -F /dev/pmem0
        mkdir -p "$dir"
        mount -o dax /dev/pmem0 "$dir"
        grep -q " $dir ext4 .*dax" /proc/mounts || { echo "guest-pmem.sh: $dir is not mounted with dax" >&2; exit 1; }
        echo "fsdax: ext4 -o dax on /dev/pmem0 at $dir"
        ;;
    devdax)
        [ -c /dev/dax0.0 ] || { echo "guest-pmem.sh: no /dev/dax0.0" >&2; exit 1; }
        echo "devdax: /dev/dax0.0 ($(cat /sys/bus/dax/devices/dax0.0/size) bytes)"
        ;;
    *) echo "guest-pmem.sh: fsdax or devdax, not $mode" >&2; exit 2 ;;
esac
