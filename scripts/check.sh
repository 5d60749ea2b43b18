#!/usr/bin/env bash
# The gates CI runs before the tests: formatting, lints (warnings denied, with the workspace's
# unsafe rules), documentation, the house rules no compiler checks (scripts/tidy.py), and
# docs/figures.md matching the benchmark JSON it is generated from (scripts/figures.py).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_cargo
for tool in rustfmt clippy-driver; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "pmkit: $tool is missing; install it with: rustup component add ${tool%-driver}" >&2
        exit 1
    }
done
echo "== cargo fmt --check"
cargo fmt --all --check
cargo fmt --manifest-path fuzz/Cargo.toml --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
echo "== tidy"
python3 scripts/tidy.py
echo "== figures"
python3 scripts/figures.py --check
