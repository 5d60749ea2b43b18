#!/usr/bin/env bash
# Fetch Debian's bookworm-backports kernel (6.12: it has ublk_drv, which bookworm's 6.1 lacks) for
# the VM harness, without touching this machine's apt sources or installed packages: apt runs on
# a private sources list, lists and cache, and the package is unpacked, not installed.
#
#   scripts/vm/kernel.sh backports
#
# Prints the kernel's version. Its files land in $PMKIT_VM_DIR/kernels/VERSION (default
# target/vm/kernels/VERSION): boot/vmlinuz-VERSION and lib/modules/VERSION (depmod run there).
# `scripts/vm/run.sh --kernel backports` calls this and boots it.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "${1:-}" = backports ] || { echo "usage: $0 backports" >&2; exit 2; }
base=${PMKIT_VM_DIR:-$PWD/target/vm}/kernels
apt_dir="$base/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main" \
    > "$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o Dir::State::status=/dev/null -o Debug::NoLocking=1)
# One refresh a day is plenty: the kernel package changes rarely.
if [ -z "$(find "$apt_dir/lists" -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
    apt-get "${apt_opts[@]}" update -qq >&2
fi
# linux-image-amd64 (the metapackage) names the current image package.
pkg=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$pkg" ] || { echo "kernel.sh: no linux-image package in bookworm-backports" >&2; exit 1; }
ver=${pkg#linux-image-}
out="$base/$ver"
if [ ! -e "$out/.done" ]; then
    rm -rf "$out" && mkdir -p "$out"
    (cd "$apt_dir/cache" && apt-get "${apt_opts[@]}" download -qq "$pkg" >&2)
    deb=$(ls "$apt_dir/cache/${pkg}_"*.deb | tail -1)
    dpkg-deb -x "$deb" "$out"
    depmod -b "$out" "$ver"
    rm -f "$deb"
    touch "$out/.done"
fi
echo "$ver"
