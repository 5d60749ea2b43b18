#!/usr/bin/env bash
# pjdfstest (crates.io `pjdfstest`, the Rust port) against `pmkit fs mount`: install it when
# missing (about 50 s to build), mount a fresh pool in /dev/shm, run the suite with
# scripts/pjdfstest/pmfs.toml (expected failures listed there, justified in
# scripts/pjdfstest/expected-failures.md), unmount, and require `pmkit fs check` clean.
# Needs root and /dev/fuse; without them it is skipped, except in CI (CI set), where it fails.
#
#   PMKIT_FS_TRANSPORT=dev|uring     mount over that FUSE transport (default auto: io_uring where
#                                    the kernel offers it); PMKIT_PROFILE=release uses a release
#                                    build instead of the debug one; PMKIT_FS_CACHE=MODE mounts
#                                    with `--cache MODE` (default long)
#   scripts/pjdfstest.sh --preload   the same suite through the LD_PRELOAD shim (frontends/preload)
#                                    instead of the FUSE mount, with scripts/pjdfstest/preload.toml
#                                    (three expected failures, justified in expected-failures.md);
#                                    PMKIT_PJDFSTEST_LOG=FILE keeps the suite's full log there
# In a guest of scripts/vm/run.sh (PMKIT_IN_VM=1) nothing is built: the suite and pmkit are the
# ones this script built on the host before.
set -euo pipefail
preload=false
[ "${1:-}" = --preload ] && preload=true
cd "$(dirname "$0")/.."
. scripts/lib.sh
in_vm=false
[ "${PMKIT_IN_VM:-}" = 1 ] && in_vm=true
# cargo, on the host only (the guest sees the host's builds, read-only but for the repository).
build() { $in_vm || cargo "$@"; }
$in_vm || require_cargo
if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
    echo "pjdfstest: needs root and /dev/fuse" >&2
    [ -z "${CI:-}" ] && exit 0
    exit 1
fi
version=0.2.2
target="${CARGO_TARGET_DIR:-$PWD/target}"
tools="$target/tools"
if ! "$tools/bin/pjdfstest" --version 2>/dev/null | grep -q "$version"; then
    $in_vm && { echo "pjdfstest: not built on the host (run scripts/pjdfstest.sh there first)" >&2; exit 1; }
    CARGO_TARGET_DIR="$target/tools-build" cargo install pjdfstest --version "$version" --locked --root "$tools"
fi
profile="${PMKIT_PROFILE:-debug}"
if [ "$profile" = release ]; then
    build build --locked --release -p pmkit
else
    # The whole workspace, as scripts/test.sh builds it: `-p pmkit` alone resolves the
    # dependencies' features apart and builds them again.
    build build --locked --workspace
fi
pmkit="$target/$profile/pmkit"
work=$(mktemp -d /dev/shm/pmkit-pjdfstest.XXXXXX)
chmod 755 "$work"  # the suite switches to other users, who must reach the mount
mkdir "$work/mnt"
cleanup() {
    "$pmkit" fs umount "$work/mnt" >/dev/null 2>&1 || umount -l "$work/mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
"$pmkit" fs mkfs "$work/pool" --size 256M >/dev/null
cfg="$PWD/scripts/pjdfstest/pmfs.toml"
cfg_preload="$PWD/scripts/pjdfstest/preload.toml"
if $preload; then
    build build --locked --workspace  # the shim below is the debug build
    status=0
    (cd "$work/mnt" && env PMKIT_PRELOAD_POOL="$work/pool" PMKIT_PRELOAD_PREFIX="$work/mnt" \
        LD_PRELOAD="$target/debug/libpmkit_preload.so" \
        "$tools/bin/pjdfstest" -c "$cfg_preload" -p "$work/mnt") \
        >"$work/pjdfstest.log" 2>&1 || status=$?
    [ -z "${PMKIT_PJDFSTEST_LOG:-}" ] || cp "$work/pjdfstest.log" "$PMKIT_PJDFSTEST_LOG"
    grep "^Summary" "$work/pjdfstest.log"
    if [ "$status" -ne 0 ]; then
        grep -E "FAILED$" "$work/pjdfstest.log" >&2
        echo "pjdfstest through the shim: unexpected failures (PMKIT_PJDFSTEST_LOG=FILE keeps the log)" >&2
        exit 1
    fi
    "$pmkit" fs check "$work/pool"
    exit 0
fi
"$pmkit" fs mount "$work/pool" "$work/mnt" --transport "${PMKIT_FS_TRANSPORT:-auto}" \
    --cache "${PMKIT_FS_CACHE:-long}" >"$work/mount.out" 2>"$work/mount.err" &
for _ in $(seq 600); do  # up to a minute: a guest under TCG mounts slowly
    grep -q "^ready: serving" "$work/mount.out" 2>/dev/null && break
    sleep 0.1
done
grep -q "^ready: serving" "$work/mount.out" || { cat "$work/mount.err" >&2; exit 1; }
grep "^ready: serving" "$work/mount.out"
(cd "$work/mnt" && "$tools/bin/pjdfstest" -c "$cfg" -p "$work/mnt") >"$work/pjdfstest.log" 2>&1 || {
    grep -E "FAILED$|^Summary" "$work/pjdfstest.log" >&2
    echo "pjdfstest: unexpected failures (full log: $work/pjdfstest.log, kept)" >&2
    trap - EXIT
    "$pmkit" fs umount "$work/mnt" >&2 || true
    exit 1
}
grep "^Summary" "$work/pjdfstest.log"
"$pmkit" fs umount "$work/mnt"
wait
"$pmkit" fs check "$work/pool" | tee "$work/check.out"
# Nothing is open once the suite is done: every file it removed must be gone, not left on the
# orphan list (the kernel's FORGET frees what it held, as its RELEASE did).
grep -q " 0 orphans" "$work/check.out" || { echo "pjdfstest: orphans left after the suite" >&2; exit 1; }
