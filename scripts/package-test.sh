#!/usr/bin/env bash
# The package test: build pmkit's Debian package, install it with dpkg, then with the installed
# files only (nothing from target/) serve a device through the pmkit-serve@ unit, mount a pool
# through its unit, through `mount -t fuse.pmkit` and through an fstab line, compile and run the
# C examples with pkg-config, read a man page, and remove the package: nothing may be left
# running or installed.
#
#   scripts/package-test.sh [--profile debug|release]
#
# It changes the machine (installs and removes the `pmkit` package, writes /etc/pmkit), so it
# runs only in CI or when asked (PMKIT_TEST_PACKAGE=1), as root. Without systemd as PID 1 (CI's
# machine), the units are checked with `systemd-analyze verify` and run by scripts/unit-run.py,
# which does what systemd does with them (EnvironmentFile, ExecStart, Type=notify, KillSignal).
set -euo pipefail
# Under pipefail a `grep -q` that stops reading early can kill its writer with SIGPIPE (exit
# 141) and fail the step at random: the greps here read all their input.
cd "$(dirname "$0")/.."
if [ "${CI:-}" != true ] && [ "${PMKIT_TEST_PACKAGE:-}" != 1 ]; then
    echo "package-test.sh: skipped: it installs and removes the pmkit package system-wide (CI=true or PMKIT_TEST_PACKAGE=1 runs it)"
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "package-test.sh: must run as root (dpkg -i, mount)" >&2; exit 1; }
profile=debug
[ "${1:-}" = --profile ] && profile=$2
. scripts/lib.sh
install_packages scripts/test-packages.txt
repo=$PWD
deb=$(bash scripts/deb.sh --profile "$profile" --no-build)
work=$(mktemp -d /tmp/pmkit-package.XXXXXX)
step() { echo "== package: $*"; }
cleanup() {
    set +e
    for u in pmkit-serve@pkgtest pmkit-fs@pkgtest; do
        [ -e "/run/pmkit-unit-run/$u.pid" ] && python3 "$repo/scripts/unit-run.py" "$u" stop 2>/dev/null
    done
    rm -rf /run/pmkit-unit-run
    for d in "$work"/mnt*; do mountpoint -q "$d" && umount -l "$d"; done
    rm -f /etc/pmkit/serve/pkgtest.conf /etc/pmkit/fs/pkgtest.conf
    dpkg-query -W pmkit > /dev/null 2>&1 && dpkg -P pmkit > /dev/null
    rm -rf "$work" /dev/shm/pmkit-pkgtest.*
}
trap cleanup EXIT

step "install $deb"
dpkg -i "$deb"
# From here on: the installed files only.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
cd "$work"
[ "$(command -v pmkit)" = /usr/bin/pmkit ] || { echo "pmkit is not /usr/bin/pmkit" >&2; exit 1; }
pmkit --version | grep "on-media formats" >/dev/null
[ -x /sbin/mount.fuse.pmkit ]

step "man pages and completions"
man -w pmkit-fs-mount mount.fuse.pmkit > /dev/null
MANWIDTH=100 man -P cat pmkit-fs-mount 2>/dev/null | grep -- "--read-only" >/dev/null
MANWIDTH=100 man -P cat pmkit 2>/dev/null | grep "141" >/dev/null
grep -q "_pmkit" /usr/share/bash-completion/completions/pmkit

step "C examples with pkg-config (headers and libraries from the package)"
pkg-config --cflags --libs pmfs pmo xmem
for lib in pmfs pmo xmem; do
    # shellcheck disable=SC2046 # pkg-config's output is a list of flags
    cc -std=c11 -Wall -Wextra -Werror "$repo/frontends/c/$lib/examples/${lib}_example.c" \
        $(pkg-config --cflags --libs "$lib") -o "$work/$lib"
    deps=$(ldd "$work/$lib")
    grep -E "lib$lib.so.0 => (/usr)?/lib/x86_64-linux-gnu/lib$lib.so.0" <<<"$deps" >/dev/null ||
        { echo "$lib example: not linked to the package's lib$lib.so.0:" >&2; echo "$deps" >&2; exit 1; }
done
rm -f /dev/shm/pmkit-pkgtest.*
out=$("$work/pmfs" /dev/shm/pmkit-pkgtest.pmfs) || { echo "pmfs example failed: $out" >&2; exit 1; }
[ "$(tail -1 <<<"$out")" = ok ] || { echo "pmfs example: $out" >&2; exit 1; }
"$work/pmo" /dev/shm/pmkit-pkgtest.pmo > /dev/null
"$work/xmem" /dev/shm/pmkit-pkgtest.xmem > /dev/null
rm -f /dev/shm/pmkit-pkgtest.*

step "units: systemd-analyze verify"
systemd-analyze verify pmkit-serve@pkgtest.service pmkit-fs@pkgtest.service

step "pmkit-serve@pkgtest: serve, stop (clean), kill -9, start again"
unit="python3 $repo/scripts/unit-run.py"
pmkit create /dev/shm/pmkit-pkgtest.pmbd --size 64M > /dev/null
printf 'DEVICE=/dev/shm/pmkit-pkgtest.pmbd\nOPTIONS=--socket %s/nbd.sock\n' "$work" > /etc/pmkit/serve/pkgtest.conf
$unit pmkit-serve@pkgtest start
size=$(nbdinfo --size "nbd+unix:///?socket=$work/nbd.sock")
[ "$size" -gt $((32 << 20)) ]
head -c 1M /dev/urandom > "$work/data"
nbdcopy "$work/data" "nbd+unix:///?socket=$work/nbd.sock"
$unit pmkit-serve@pkgtest stop
pmkit check /dev/shm/pmkit-pkgtest.pmbd
$unit pmkit-serve@pkgtest start
$unit pmkit-serve@pkgtest kill
$unit pmkit-serve@pkgtest start
nbdcopy "nbd+unix:///?socket=$work/nbd.sock" "$work/back"
cmp -n 1048576 "$work/back" "$work/data"
$unit pmkit-serve@pkgtest stop
pmkit check /dev/shm/pmkit-pkgtest.pmbd

# The daemon of a PMFS mount ends after `umount` returns: wait for it before the pool is used.
daemon_gone() {
    local i
    for i in $(seq 100); do
        pgrep -f "fs mount $1 " > /dev/null || return 0
        sleep 0.1
    done
    echo "the daemon of $1 still runs 10 s after umount" >&2
    return 1
}
pool=/dev/shm/pmkit-pkgtest.pool
pmkit fs mkfs "$pool" --size 64M > /dev/null
mkdir -p "$work/mnt"

step "pmkit-fs@pkgtest: mount, stop (clean), kill -9, start again"
printf 'POOL=%s\nMOUNTPOINT=%s/mnt\nOPTIONS=--threads 2\n' "$pool" "$work" > /etc/pmkit/fs/pkgtest.conf
$unit pmkit-fs@pkgtest start
echo unit > "$work/mnt/by-unit"
$unit pmkit-fs@pkgtest stop
pmkit fs check "$pool" > /dev/null
$unit pmkit-fs@pkgtest start
$unit pmkit-fs@pkgtest kill
$unit pmkit-fs@pkgtest start
grep -qx unit "$work/mnt/by-unit"
$unit pmkit-fs@pkgtest stop
pmkit fs check "$pool" > /dev/null

step "mount -t fuse.pmkit, umount"
mount -t fuse.pmkit "$pool" "$work/mnt" -o threads=2,noatime
grep -q "^pmkit-fs\[.*$work/mnt fuse" /proc/self/mounts
echo helper > "$work/mnt/by-helper"
umount "$work/mnt"
daemon_gone "$pool"
pmkit fs check "$pool" > /dev/null

step "an fstab line (mount -T FILE), umount"
printf '%s %s/mnt fuse.pmkit noauto,nofail,cache=short,x-systemd.automount 0 0\n' "$pool" "$work" > "$work/fstab"
mount -T "$work/fstab" "$work/mnt"
grep -qx helper "$work/mnt/by-helper"
grep -qx unit "$work/mnt/by-unit"
umount "$work/mnt"
daemon_gone "$pool"
pmkit fs check "$pool" > /dev/null

step "a mount left at removal is unmounted by the package (its pool clean)"
mount -t fuse.pmkit "$pool" "$work/mnt"
rm -f /etc/pmkit/serve/pkgtest.conf /etc/pmkit/fs/pkgtest.conf
dpkg -r pmkit
daemon_gone "$pool"
if mountpoint -q "$work/mnt"; then echo "still mounted after dpkg -r" >&2; exit 1; fi
if pgrep -f "^/usr/bin/pmkit" > /dev/null; then echo "pmkit still running after dpkg -r" >&2; pgrep -af pmkit; exit 1; fi
if [ -e /usr/bin/pmkit ] || [ -e /sbin/mount.fuse.pmkit ] || [ -e /usr/lib/x86_64-linux-gnu/libpmfs.so.0 ]; then
    echo "files left after dpkg -r" >&2; exit 1
fi
"$repo/target/$profile/pmkit" fs check "$pool" > /dev/null
echo "package-test.sh: the package installed, served, mounted and removed cleanly"
