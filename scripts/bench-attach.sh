#!/usr/bin/env bash
# Install what `pmkit bench attach` needs (PostgreSQL, fio, sqlite3, e2fsprogs, fuse3) and run it:
# pgbench, SQLite and fio on ext4 over pmkit attach vs ext4 over a /dev/shm loop device. As root.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
install_packages scripts/build-packages.txt scripts/test-packages.txt scripts/bench-packages.txt
require_cargo
cargo build --release --locked -p pmkit -p pmkit-bench
exec "${CARGO_TARGET_DIR:-target}/release/pmkit" bench attach "$@"
