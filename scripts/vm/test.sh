#!/usr/bin/env bash
# The guest stage of CI: what this machine's CPU and kernel cannot run natively, run in QEMU
# guests (scripts/vm/run.sh): a CPU with protection keys (`-cpu max`), an emulated NVDIMM as fsdax
# (ext4 -o dax, MAP_SYNC) and device-dax, the kernel's NBD client, and (on Debian's backports
# kernel, 6.12) the kernel's ublk driver.
#
#   scripts/vm/test.sh          the CI stage (bounded: under 15 minutes on 2 cores)
#   scripts/vm/test.sh --all    also pjdfstest through the LD_PRELOAD shim (over 10 minutes)
#
# The test executables are built here (cargo test --no-run) and run there unchanged: the guest
# sees this machine's files. Under TCG the guest is 6-16x slower than native; nothing here is a
# speed figure.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib.sh
require_cargo
all=0
[ "${1:-}" = --all ] && all=1
# The suite files, where the guest sees them (its /tmp is its own).
mkdir -p target/vm
work=$(mktemp -d "$PWD/target/vm/suites.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The executable of test target TEST of package PKG (built if it is not).
exe() {
    cargo test --locked --no-run --message-format=json -p "$1" --test "$2" 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    j = json.loads(line)
    if j.get("executable") and j["target"]["name"] == sys.argv[1]:
        print(j["executable"])' "$2"
}
# The C examples link the shared libraries (cargo test does not build them).
# --workspace, as scripts/test.sh builds: a narrower set resolves features apart and rebuilds.
cargo build --locked --workspace
pmkit=$PWD/target/debug/pmkit

# The suites whose tests pick `pkey` where the CPU has it (directly, or as `auto`'s choice on a
# file): each line is NAME<TAB>COMMAND for scripts/vm/guest-suite.sh.
protection_suite() {
    local t
    for t in "pmkit-media guard" "pmkit-blk stray" "pmkit-blk basic" "pmkit-blk atomic_race" \
        "pmkit-obj protect" "pmkit-libpmo c_abi" "pmkit-fs stray" "pmkit-fs api" "pmkit-fs xip" \
        "pmkit-fs posix" "pmkit-fs model" "pmkit-libpmfs c_abi" "pmkit-fs crash_tail"; do
        set -- $t
        printf '%s %s\t%s --test-threads 2\n' "$1" "$2" "$(exe "$1" "$2")"
    done
}
protection_suite > "$work/protection"

# 1. pku, pools on /dev/shm (tmpfs in the guest).
{
    printf 'probe: pku\t%s probe | grep -E "pku +yes"\n' "$pmkit"
    cat "$work/protection"
} > "$work/pku-shm"
# 2. pku, pools on an fsdax ext4 (MAP_SYNC): /dev/shm is bind-mounted over it, so the suites'
#    pools land there unchanged; then the block device and PMFS from the command line.
{
    printf 'fsdax: ext4 -o dax\tscripts/vm/guest-pmem.sh fsdax /mnt/pmem && mount --bind /mnt/pmem /dev/shm\n'
    printf 'probe: MAP_SYNC\t%s probe --dir /mnt/pmem --size-mib 16 | grep "DAX: mapped MAP_SYNC"\n' "$pmkit"
    printf 'blk on fsdax\t%s create /mnt/pmem/d.pmbd --size 64M && %s info /mnt/pmem/d.pmbd && %s check /mnt/pmem/d.pmbd\n' "$pmkit" "$pmkit" "$pmkit"
    printf 'serve on fsdax under nbd-client\tscripts/vm/guest-nbd.sh /mnt/pmem/d.pmbd\n'
    printf 'serve with TLS under nbd-client -x\tscripts/vm/guest-nbd-tls.sh /mnt/pmem/d.pmbd\n'
    printf 'attach --via nbd on fsdax\tscripts/vm/guest-attach.sh /mnt/pmem/a.pmbd\n'
    printf 'pmfs on fsdax\tscripts/vm/guest-pmfs.sh /mnt/pmem/pool\n'
    # posix's random-calls test takes /dev/shm's file system as its model of Linux and expects
    # tmpfs there (here ext4, whose directories seek differently): it runs in the first guest.
    sed '/^pmkit-fs posix\t/s/$/ --skip random_calls_match_the_kernel/' "$work/protection"
    # pjdfstest against the FUSE mount and (with --all: over 10 minutes under TCG, a process
    # start per call) through the shim, in the default protection (pkey on this CPU), pools on
    # the DAX file system.
    printf 'pjdfstest, FUSE mount\tbash scripts/pjdfstest.sh\n'
    [ "$all" = 0 ] || printf 'pjdfstest, LD_PRELOAD shim\tbash scripts/pjdfstest.sh --preload\n'

} > "$work/fsdax"
# 3. device-dax: the block device on /dev/dax0.0, served under nbd-client.
{
    printf 'devdax\tscripts/vm/guest-pmem.sh devdax\n'
    printf 'blk on devdax\t%s create /dev/dax0.0 --force && %s info /dev/dax0.0 && %s check /dev/dax0.0\n' "$pmkit" "$pmkit" "$pmkit"
    printf 'serve on devdax under nbd-client\tscripts/vm/guest-nbd.sh /dev/dax0.0\n'
    printf 'pmfs on devdax\tscripts/vm/guest-pmfs.sh /dev/dax0.0\n'
    printf 'X-Mem slow tier on devdax\tPMKIT_TEST_DEVDAX=/dev/dax0.0 %s --exact a_device_dax_slow_tier_keeps_what_moves_there --nocapture\n' \
        "$(exe pmkit-xmem slow_tier)"
} > "$work/devdax"

failed=0
stage() {
    local name=$1; shift
    echo "== guest: $name"
    local start=$SECONDS
    if bash scripts/vm/run.sh "$@"; then
        echo "== guest: $name: passed ($((SECONDS - start)) s)"
    else
        echo "== guest: $name: FAILED ($((SECONDS - start)) s)"
        failed=$((failed + 1))
    fi
}
stage "pku, /dev/shm" --timeout 900 -- scripts/vm/guest-suite.sh "$work/pku-shm" 600
limit=$((all ? 3600 : 600))
stage "pku, fsdax" --nvdimm 1 --timeout $((limit + 600)) -- scripts/vm/guest-suite.sh "$work/fsdax" "$limit"
stage "pku, device-dax" --nvdimm 1 --timeout 600 -- scripts/vm/guest-suite.sh "$work/devdax" 300
# 4. ublk: Debian's 6.1 has no ublk_drv; the backports kernel (fetched, not installed) has.
printf 'attach --via ublk\tscripts/vm/guest-attach.sh /dev/shm/a.pmbd ublk\n' > "$work/ublk"
stage "ublk, kernel 6.12" --kernel backports --timeout 600 -- scripts/vm/guest-suite.sh "$work/ublk" 300
[ "$failed" = 0 ] || { echo "scripts/vm/test.sh: $failed guest stages failed" >&2; exit 1; }
echo "scripts/vm/test.sh: every guest stage passed"
