#!/usr/bin/env bash
# Build what the VM harness boots, once per kernel: the kernel uncompressed (PVH entry: fast to
# boot under TCG) and an initramfs of busybox, the virtio and 9p modules, and scripts/vm/init.
# Usage: scripts/vm/image.sh [KERNEL_VERSION]   (default: the newest installed with its image)
# A version installed in /boot and /lib/modules, or one fetched by scripts/vm/kernel.sh (its
# files under $PMKIT_VM_DIR/kernels/VERSION).
# Prints the directory holding `vmlinux` and `initramfs.cpio.gz`.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib.sh
install_packages scripts/vm/packages.txt >&2
# The newest kernel that has both its image and its modules (the host's own modules directory
# may have no image in /boot).
ver=${1:-$(for v in $(ls /lib/modules); do [ -e "/boot/vmlinuz-$v" ] && echo "$v"; done | sort -V | tail -1)}
# The kernel's root: / for an installed kernel, its own tree for a fetched one.
kroot=/
fetched=${PMKIT_VM_DIR:-$PWD/target/vm}/kernels/$ver
[ -e "/boot/vmlinuz-$ver" ] || kroot=$fetched
[ -e "$kroot/boot/vmlinuz-$ver" ] || { echo "image.sh: no /boot/vmlinuz-$ver (apt-get install linux-image-amd64) and no $fetched (scripts/vm/kernel.sh)" >&2; exit 1; }
out=${PMKIT_VM_DIR:-$PWD/target/vm}/$ver
stamp="$out/.built-from-$(sha256sum scripts/vm/init scripts/vm/image.sh | sha256sum | cut -c1-16)"
if [ -e "$stamp" ] && [ "$out/vmlinux" -nt "$kroot/boot/vmlinuz-$ver" ]; then echo "$out"; exit 0; fi
rm -rf "$out" && mkdir -p "$out"
python3 scripts/vm/extract-vmlinux.py "$kroot/boot/vmlinuz-$ver" "$out/vmlinux"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,mods}
cp /bin/busybox "$root/bin/busybox"
cp scripts/vm/init "$root/init"
chmod +x "$root/init"
# The modules to reach the host over virtio-9p, in dependency order (busybox insmod, no
# modprobe; compressed modules unpacked, as busybox may not read them). Built-in ones print no
# insmod line.
: > "$root/modules.order"
for m in virtio_pci 9pnet_virtio 9p; do
    modprobe --show-depends -d "$kroot" -S "$ver" "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
    name=$(basename "$ko")
    case "$ko" in
        *.xz) name=${name%.xz}; xz -dc "$ko" > "$root/mods/$name" ;;
        *.zst) name=${name%.zst}; zstd -qdc "$ko" > "$root/mods/$name" ;;
        *) cp "$ko" "$root/mods/" ;;
    esac
    echo "/mods/$name" >> "$root/modules.order"
done
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out/initramfs.cpio.gz"
touch "$stamp"
echo "$out"
