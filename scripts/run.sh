#!/usr/bin/env bash
# Set up and run pmkit's main job on the embedded default (no PM hardware needed).
# Idempotent: re-running skips installed packages and reuses the build.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
install_packages scripts/build-packages.txt scripts/run-packages.txt
require_cargo
# The product: the binary and the LD_PRELOAD shim; the benchmarks (`pmkit bench`) are the
# pmkit-bench package.
cargo build --release --locked -p pmkit -p pmkit-preload
target_dir="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)"
echo "pmkit: built ${target_dir}/release/pmkit and the LD_PRELOAD shim ${target_dir}/release/libpmkit_preload.so" >&2
# The main job: serve the embedded default device (1 GiB of emulated PM in /dev/shm) over NBD.
exec "${CARGO_TARGET_DIR:-target}/release/pmkit" serve "$@"
