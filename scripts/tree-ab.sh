#!/usr/bin/env bash
# Two pmkit binaries side by side on the PMFS mount over a Linux source tree: per run a fresh
# 1 GiB pool mounted with default options (plus EXTRA), the tree `pmkit-bench fs-tree` caches
# (/dev/shm/pmkit-bench-fs-tree-linux-6.1-subset.tar; run that bench once first) untarred onto
# it, then `find -type f` and `grep -r EXPORT_SYMBOL_GPL` timed (their first pass); the binaries
# alternated A B A B. Prints seconds per step.
#
#   scripts/tree-ab.sh A B [PAIRS] [TRANSPORT]   e.g. scripts/tree-ab.sh target/release/pmkit /tmp/pmkit-old 3 uring
#
# EXTRA="--cache writeback" adds mount options. Needs root, /dev/fuse, GNU tar, find, grep.
set -euo pipefail
a=$(realpath "${1:?usage: $0 A B [PAIRS] [TRANSPORT]}")
b=$(realpath "${2:?usage: $0 A B [PAIRS] [TRANSPORT]}")
pairs=${3:-3}
transport=${4:-auto}
tar=/dev/shm/pmkit-bench-fs-tree-linux-6.1-subset.tar
[ -f "$tar" ] || { echo "$tar is missing: run pmkit-bench fs-tree --quick once" >&2; exit 1; }
secs() { local s; s=$(date +%s.%N); "$@" > /dev/null; echo "$(date +%s.%N) - $s" | bc; }
one() { # BIN -> "find S grep S"
    local w
    w=$(mktemp -d /dev/shm/pmkit-tree-ab.XXXXXX)
    mkdir "$w/m"
    "$1" fs mkfs "$w/pool" --size 1G > /dev/null 2>&1
    # shellcheck disable=SC2086
    setsid "$1" fs mount "$w/pool" "$w/m" --transport "$transport" ${EXTRA:-} > "$w/log" 2>&1 < /dev/null &
    for _ in $(seq 100); do mountpoint -q "$w/m" && break; sleep 0.1; done
    mkdir "$w/m/a"
    tar -xf "$tar" -C "$w/m/a"
    sync -f "$w/m/a"
    echo "find $(secs find "$w/m/a" -type f) grep $(secs grep -r EXPORT_SYMBOL_GPL "$w/m/a")"
    "$1" fs umount "$w/m" > /dev/null 2>&1 || true
    sleep 0.5
    rm -rf "$w"
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, pku $(grep -qw pku /proc/cpuinfo && echo yes || echo no); transport $transport ${EXTRA:-}"
for i in $(seq "$pairs"); do
    echo "pair $i: A $(one "$a"); B $(one "$b")"
done
