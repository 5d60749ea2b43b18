#!/usr/bin/env bash
# Build pmkit's Debian package from this tree: the files scripts/install.sh puts under /usr,
# staged and packed with dpkg-deb. Prints the .deb's path.
#
#   scripts/deb.sh [--profile release|debug] [--no-build]
#
# --profile  the cargo profile packaged (default release; CI packages its debug build, to test
#            the package without a second build of the workspace).
# The package's dependencies are the Debian packages that own the shared libraries its
# executables and libraries load (read from their ELF headers), and fuse3 (fusermount3 and the
# kernel's FUSE for `pmkit fs mount` and `pmkit attach`).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
install_packages scripts/build-packages.txt
profile=release build=()
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile=$2; shift 2 ;;
        --no-build) build=(--no-build); shift ;;
        *) echo "deb.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
arch=$(dpkg --print-architecture)
out=${CARGO_TARGET_DIR:-target}/debian
stage=$out/pmkit_${version}_$arch
rm -rf "$stage" && mkdir -p "$stage"
bash scripts/install.sh --prefix /usr --destdir "$stage" --profile "$profile" "${build[@]}" >&2
# dpkg keeps the list of files; the install script's own list is not shipped. Debug information
# is left out as Debian's packages leave it out (the symbols stay, for backtraces).
rm -rf "$stage/usr/share/pmkit"
find "$stage/usr/bin" "$stage/usr/lib" -type f \( -perm -u+x -o -name '*.so*' \) -exec strip --strip-debug {} +

# Dependencies: the owner of every shared library the ELF files need (their own libraries aside).
needed=$(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -exec objdump -p {} + 2>/dev/null |
    awk '$1 == "NEEDED" { print $2 }' | sort -u | grep -Ev '^lib(pmfs|pmo|xmem)\.so' || true)
deps=() cache=$(ldconfig -p)
for so in $needed; do
    path=$(echo "$cache" | awk -v so="$so" '$1 == so && /x86-64|x86_64|64bit/ { print $NF; exit }')
    [ -n "$path" ] || { echo "deb.sh: no installed library $so (needed by the package)" >&2; exit 1; }
    # dpkg knows the file by the name its package installed: the link's target or the link.
    owner=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path")
    pkg=${owner%%:*}
    deps+=("$pkg")
done
depends=$(printf '%s\n' "${deps[@]}" fuse3 | sort -u | paste -sd, | sed 's/,/, /g')
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)

mkdir -p "$stage/DEBIAN" "$stage/usr/share/doc/pmkit"
cat > "$stage/DEBIAN/control" <<EOF
Package: pmkit
Version: $version
Architecture: $arch
Maintainer: pmkit developers <pmkit@localhost>
Installed-Size: $size
Depends: $depends
Recommends: ndctl, daxctl, nbd-client
Section: admin
Priority: optional
Description: persistent-memory storage stack in user space
 PMBD, a protected block device on persistent memory served over NBD
 (pmkit serve, systemd unit pmkit-serve@) and as a kernel block device
 (pmkit attach); PMFS, a file system on persistent memory mounted with FUSE
 (pmkit fs mount, mount -t fuse.pmkit, /etc/fstab, unit pmkit-fs@), used in
 process (libpmfs) or by unmodified programs through an LD_PRELOAD shim;
 persistent memory objects (libpmo) and tiered allocation (libxmem), with
 their headers and pkg-config files; man pages and shell completions.
EOF
cat > "$stage/usr/share/doc/pmkit/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: pmkit

Files: *
Copyright: pmkit developers
License: MIT or Apache-2.0
 On Debian systems the Apache License 2.0 is in /usr/share/common-licenses/Apache-2.0.
EOF
# Maintainer scripts: the libraries' cache and systemd's view of the units; on removal, the
# running instances are stopped and PMFS mounts unmounted first, so every pool and device is
# left clean and nothing of the package keeps running.
cat > "$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    ldconfig
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
fi
EOF
cat > "$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
    if [ -d /run/systemd/system ]; then
        systemctl stop 'pmkit-serve@*.service' 'pmkit-fs@*.service' || true
    fi
    # PMFS mounts made by the mount helper or by hand: unmount them, which marks their pools clean.
    awk '$1 ~ /^pmkit-fs\[/ { print $2 }' /proc/self/mounts | while read -r dir; do
        dir=$(printf '%b' "$dir")
        /usr/bin/pmkit fs umount "$dir" || echo "pmkit: $dir stays mounted (busy); its daemon keeps running" >&2
    done
fi
EOF
cat > "$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = purge ]; then
    ldconfig
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
fi
if [ "$1" = purge ]; then
    rmdir /etc/pmkit/serve /etc/pmkit/fs /etc/pmkit 2>/dev/null || true
fi
EOF
chmod 755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
deb=$out/pmkit_${version}_$arch.deb
# xz as Debian's archive uses; a debug build (CI's) is packed fast instead.
[ "$profile" = release ] && z=(-Zxz) || z=(-Zgzip -z1)
dpkg-deb --root-owner-group "${z[@]}" --build "$stage" "$deb" >&2
echo "$deb"
