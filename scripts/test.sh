#!/usr/bin/env bash
# Install everything the tests use and run all of them. Idempotent. CI runs this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
install_packages scripts/build-packages.txt scripts/run-packages.txt scripts/test-packages.txt
require_cargo
# FUSE over io_uring is off in the kernel by default. CI (a throwaway machine) turns it on, so the
# attach tests run on both transports (`auto` then picks io_uring, and
# both_transports_serve_the_same_device runs /dev/fuse too); elsewhere the machine's setting is
# left alone unless PMKIT_ENABLE_FUSE_URING=1.
if [ "${CI:-}" = true ] || [ "${PMKIT_ENABLE_FUSE_URING:-}" = 1 ]; then
    uring=/sys/module/fuse/parameters/enable_uring
    if [ -w "$uring" ]; then
        echo Y > "$uring" && echo "FUSE over io_uring enabled ($uring)"
    fi
fi
# Gates first (fast, and a failing gate fails CI): fmt, clippy, doc, tidy, figures (docs/figures.md
# regenerated from docs/results/*.json: python3 scripts/figures.py).
bash scripts/check.sh
# `cargo test` does not emit cdylibs; the C ABI tests link libpmfs.so, libpmo.so and libxmem.so,
# and the shim's tests load libpmkit_preload.so, so build them first.
# (This also builds pmkit-bench next to pmkit, which `pmkit bench` runs.)
cargo build --workspace --locked
# Tests are built with optimisation (profile.test opt-level=1) and run on 2 cores. The kill -9
# tests run 3 trials each here; scripts/soak.sh runs as many as asked.
export PMKIT_KILL_TRIALS="${PMKIT_KILL_TRIALS:-3}" PMKIT_ATTACH_TRIALS="${PMKIT_ATTACH_TRIALS:-3}"
cargo test --workspace --locked --no-fail-fast "$@"
# The Debian package (scripts/deb.sh, of the debug build above): installed with dpkg, its units,
# mount helper, fstab line, pkg-config and man pages used from the installed files, removed.
# In CI (or with PMKIT_TEST_PACKAGE=1) only: it installs the package system-wide.
bash scripts/package-test.sh
# pjdfstest (installed from crates.io by the script, ~50 s to build) against `pmkit fs mount`.
bash scripts/pjdfstest.sh
PMKIT_FS_CACHE=writeback bash scripts/pjdfstest.sh   # the kernel's write-back cache (~20 s)
bash scripts/pjdfstest.sh --preload
# The fuzz targets (every on-media decoder and the NBD parser) over their seeds and generated
# inputs, on stable; the libFuzzer binaries are built too.
bash scripts/fuzz.sh
# The guest stage: a CPU with protection keys, an emulated NVDIMM as fsdax and device-dax, and the
# kernel's NBD client, in QEMU guests under TCG (scripts/vm/: this machine has none of them).
bash scripts/vm/test.sh
