#!/usr/bin/env bash
# Run a command as root in a QEMU guest that sees this machine's files: the host's root
# read-only, the repository writable at the same path, /tmp and /dev/shm its own. Its output
# streams here; its exit status is this script's.
#
#   scripts/vm/run.sh [--cpu MODEL] [--nvdimm GIB] [--mem GIB] [--smp N] [--kernel VERSION]
#                     [--timeout SECONDS] -- COMMAND...
#
# --cpu      QEMU CPU model (default `max`: protection keys, pku and ospke). TCG only: this
#            machine's KVM is a nested PVM host that does not boot a stock kernel.
# --nvdimm   an emulated NVDIMM of GIB GiB, backed by a sparse file on disk (never /dev/shm:
#            that is RAM). In the guest, scripts/vm/guest-pmem.sh makes it fsdax or devdax.
# --kernel   a kernel version installed in /boot and /lib/modules (default: the newest), or
#            `backports`: Debian's bookworm-backports kernel (6.12, with ublk_drv), fetched by
#            scripts/vm/kernel.sh without installing it; the guest sees its modules at
#            /lib/modules/VERSION.
# Speed under TCG is 6-16x below native: the guest proves behaviour, never performance.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
cpu=max nvdimm=0 mem=2 smp=2 kernel= timeout=900
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) cpu=$2; shift 2 ;;
        --nvdimm) nvdimm=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --smp) smp=$2; shift 2 ;;
        --kernel) kernel=$2; shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "run.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "run.sh: no command given (... -- COMMAND)" >&2; exit 2; }
base=${PMKIT_VM_DIR:-$repo/target/vm}
[ "$kernel" = backports ] && kernel=$(bash scripts/vm/kernel.sh backports)
img=$(bash scripts/vm/image.sh $kernel)
# A fetched kernel's modules: the guest's init binds them at /lib/modules/VERSION.
kmods=
[ -n "$kernel" ] && [ -d "$base/kernels/$kernel/lib/modules/$kernel" ] && kmods=" pmkit.kmods=$base/kernels/$kernel/lib/modules"
run=$(mktemp -d "$base/run.XXXXXX")
trap 'rm -rf "$run"' EXIT
{
    echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    echo "export HOME=/tmp PMKIT_IN_VM=1 RUST_BACKTRACE=${RUST_BACKTRACE:-1} CI=${CI:-}"
    printf '%q ' "$@"
    echo
} > "$run/cmd.sh"
machine=pc
dimm=()
if [ "$nvdimm" != 0 ]; then
    machine=pc,nvdimm=on
    truncate -s "${nvdimm}G" "$run/nvdimm.img"
    dimm=(-m "${mem}G,slots=2,maxmem=$((mem + nvdimm))G"
          -object "memory-backend-file,id=mem1,share=on,mem-path=$run/nvdimm.img,size=${nvdimm}G"
          -device nvdimm,id=nvdimm1,memdev=mem1)
else
    dimm=(-m "${mem}G")
fi
rc=0
timeout --foreground "$timeout" qemu-system-x86_64 \
    -machine "$machine" -accel tcg,thread=multi -cpu "$cpu" -smp "$smp" "${dimm[@]}" \
    -kernel "$img/vmlinux" -initrd "$img/initramfs.cpio.gz" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 pmkit.run=$run pmkit.work=$repo$kmods" \
    -fsdev local,id=root,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=root,mount_tag=root \
    -fsdev "local,id=work,path=$repo,security_model=none,multidevs=remap" \
    -device virtio-9p-pci,fsdev=work,mount_tag=work \
    -nographic -no-reboot -nodefaults -serial stdio < /dev/null || rc=$?
if [ "$rc" = 124 ]; then
    echo "run.sh: the guest ran past --timeout $timeout s" >&2
    exit 124
fi
[ -s "$run/rc" ] || { echo "run.sh: the guest stopped without the command's status (qemu exit $rc)" >&2; exit 125; }
exit "$(cat "$run/rc")"
