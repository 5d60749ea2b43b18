#!/usr/bin/env bash
# kill -9 soak: N trials of each front end killed mid-write, every acknowledged record verified.
#
#   scripts/soak.sh [N]      N trials of each (default 100); CI runs 3 through scripts/test.sh
#
# - serve: two NBD clients (8 requests in flight each) write stamped blocks with a FLUSH every 40
#   writes; the server gets SIGKILL mid-run and is restarted on the same PM file; every write
#   acknowledged before the last completed FLUSH was sent must read back whole (trials alternate
#   the default engine and pt-batch). See frontends/cli/tests/serve_kill.rs.
# - attach: ext4 on `pmkit attach`; a writer appends fsync'ed records; `attach` gets SIGKILL
#   mid-run; after `pmkit detach` (stale clean-up) and re-attach every fsync'ed record is present
#   and fsck is clean. See frontends/cli/tests/attach.rs. Needs root, /dev/fuse and loop devices.
# - fs mount: `pmkit fs mount` (PMFS) killed under fsync'ing writers, under fio (every completed
#   write verified from fio's saved state) and under a large untar (every file a prefix of its
#   source); `pmkit fs check` clean after each. See frontends/cli/tests/fs_mount.rs, fs_suites.rs.
#
# Scratch files live in /dev/shm and temporary directories and are removed by the tests, pass or
# fail. Prints one line per trial and a summary; exits non-zero on the first lost record.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_cargo
trials="${1:-100}"
case "$trials" in '' | *[!0-9]*) echo "usage: $0 [TRIALS]" >&2; exit 2 ;; esac
log="$(mktemp /tmp/pmkit-soak.XXXXXX)"
trap 'rm -f "$log"' EXIT
start=$(date +%s)
set +e
PMKIT_KILL_TRIALS="$trials" PMKIT_ATTACH_TRIALS="$trials" \
    cargo test -p pmkit --locked --test serve_kill --test attach -- \
    --nocapture --test-threads=1 kill 2>&1 | tee "$log" | grep -E --line-buffered \
    'trial [0-9]+ \(|kill -9 trials|panicked|skipping'
status=${PIPESTATUS[0]}
PMKIT_KILL_TRIALS="$trials" cargo test -p pmkit --locked --test fs_mount --test fs_suites -- \
    --nocapture --test-threads=1 kill_9 2>&1 | tee -a "$log" | grep -E --line-buffered \
    'pmfs kill trial|panicked|skipped'
fs_status=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$fs_status
set -e
serve_trials=$(grep -oE 'trial [0-9]+ \(' "$log" | wc -l)
attach_line=$(grep -oE '[0-9]+ kill -9 trials.*' "$log" || true)
writes=$(grep -oE 'trial [0-9]+ \([^)]*\): [0-9]+ writes' "$log" | awk '{s += $(NF - 1)} END {print s + 0}')
echo "soak: serve: $serve_trials of $trials trials passed, $writes writes checked;" \
    "attach: ${attach_line:-no summary (failed or skipped)};" \
    "fs mount: $(grep -c 'pmfs kill trial' "$log") trials passed; $(($(date +%s) - start)) s"
exit "$status"
