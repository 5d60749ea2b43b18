#!/usr/bin/env bash
# The fuzz targets (fuzz/, its own cargo workspace). CI runs this with no arguments.
#
#   scripts/fuzz.sh                 every target over its seeds and deterministic generated inputs
#                                   (`cargo test`, any toolchain), then the libFuzzer binaries
#                                   built (stable links them; they are not coverage-guided there)
#   scripts/fuzz.sh --run SECONDS   then each target coverage-guided with libFuzzer for SECONDS:
#                                   with nightly + cargo-fuzz (AddressSanitizer too), else on
#                                   stable with SanitizerCoverage flags only
#
# Extra arguments after `--` go to the test binary (e.g. `-- blk_image`); PMKIT_FUZZ_CASES=N sets
# the generated inputs per target.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_cargo

run_secs=""
test_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --run) run_secs="${2:?--run needs SECONDS}"; shift 2 ;;
        --) shift; test_args=("$@"); break ;;
        *) echo "usage: $0 [--run SECONDS] [-- TEST ARGS]" >&2; exit 2 ;;
    esac
done

manifest=fuzz/Cargo.toml
cargo test --manifest-path "$manifest" --locked -- "${test_args[@]}"
# The libFuzzer binaries: libfuzzer-sys compiles libFuzzer with the C++ compiler.
cargo build --manifest-path "$manifest" --bins --locked

[ -n "$run_secs" ] || exit 0
cd fuzz
targets=(nbd_server nbd_starttls blk_superblock blk_image obj_pool fs_image fs_repair)
if cargo +nightly fuzz --version >/dev/null 2>&1; then
    # cargo-fuzz: coverage plus AddressSanitizer (nightly).
    for target in "${targets[@]}"; do
        # Start from the committed seeds; new finds go to corpus/<target> (ignored by git).
        mkdir -p "corpus/$target"
        cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
            -max_total_time="$run_secs" -max_len=4096
    done
    exit 0
fi
# Stable: the same coverage instrumentation cargo-fuzz asks for (SanitizerCoverage), without
# AddressSanitizer (nightly only). `--target` keeps the flags off build scripts.
echo "pmkit: no nightly cargo-fuzz; fuzzing with coverage on stable (no AddressSanitizer)" >&2
host=$(rustc -vV | sed -n 's/^host: //p')
sancov="-Cllvm-args=-sanitizer-coverage"
RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module $sancov-level=4 $sancov-inline-8bit-counters \
$sancov-pc-table $sancov-trace-compares -Cdebug-assertions -Coverflow-checks" \
    cargo build --release --locked --bins --target "$host" --target-dir target/stable-cov
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" artifacts
    "target/stable-cov/$host/release/$target" "corpus/$target" "seeds/$target" \
        -max_total_time="$run_secs" -max_len=4096 -artifact_prefix=artifacts/ -print_final_stats=1
done
