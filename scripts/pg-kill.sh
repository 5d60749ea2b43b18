#!/usr/bin/env bash
# PostgreSQL through the LD_PRELOAD shim beside the PMFS mount of its pool, killed with SIGKILL
# under load. One pool for every trial; each trial mounts it (`pmkit fs mount`, whose daemon also
# serves the shim's processes), starts PostgreSQL's server under the shim (its data directory in
# the pool, the prefix the mount point), runs a client that inserts numbered rows, one
# transaction each, and records a number only once its COMMIT has returned (acknowledged), then
# kills with SIGKILL, alternately, the mount's daemon (every PostgreSQL process then loses its
# file system: a crash) or one PostgreSQL backend (the server resets and recovers by itself).
# After each trial the pool is mounted again, PostgreSQL recovers, and every acknowledged row
# must be in the table, read through the shim and, as a file check, `pmkit fs check` of the
# unmounted pool must be clean.
#
#   scripts/pg-kill.sh PMKIT [TRIALS]      e.g. scripts/pg-kill.sh target/release/pmkit 10
#
# Needs root, /dev/fuse, PostgreSQL (scripts/bench-packages.txt) and libpmkit_preload.so beside
# PMKIT. Prints a line per trial; exits non-zero at the first lost row or unclean check.
set -euo pipefail
pmkit=$(realpath "${1:?usage: $0 PMKIT [TRIALS]}")
trials=${2:-10}
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
[ -x "$pgbin/initdb" ] || { echo "PostgreSQL not found under /usr/lib/postgresql" >&2; exit 1; }
so=$(dirname "$pmkit")/libpmkit_preload.so
[ -f "$so" ] || { echo "$so missing: cargo build --release -p pmkit-preload" >&2; exit 1; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, pku $(grep -qw pku /proc/cpuinfo && echo yes || echo no); $trials trials"
work=$(mktemp -d /dev/shm/pmkit-pgkill.XXXXXX)
sock=$(mktemp -d /tmp/pmkit-pgkill-sock.XXXXXX)
chmod 755 "$work"; chmod 777 "$sock"
mnt=$work/mnt
mkdir "$mnt"
daemon=""
shim="LD_PRELOAD=$so PMKIT_PRELOAD_POOL=$work/pool PMKIT_PRELOAD_PREFIX=$mnt"
pg="runuser -u postgres -- env $shim"
psql() { timeout 60 runuser -u postgres -- "$pgbin/psql" -h "$sock" -p 5497 -d postgres -qAtX "$@"; }
postmaster() { cat "$sock/postmaster.pid.copy" 2>/dev/null || true; }
mount_pool() {
    "$pmkit" fs mount "$work/pool" "$mnt" >"$work/out" 2>>"$work/err" &
    daemon=$!
    for _ in $(seq 100); do grep -q "^ready" "$work/out" 2>/dev/null && break; sleep 0.1; done
    grep -q "^ready" "$work/out" || { cat "$work/err" >&2; exit 1; }
}
start_pg() {
    $pg "$pgbin/pg_ctl" -D "$mnt/pg" -w -t 120 -l "$sock/pg.log" \
        -o "-k $sock -c listen_addresses='' -p 5497 -c shared_buffers=32MB" start >/dev/null 2>>"$sock/pg_ctl.err"
    # Its pid, kept outside the pool: the pool may be gone when the server must be killed.
    $pg head -1 "$mnt/pg/postmaster.pid" >"$sock/postmaster.pid.copy"
}
kill_pg() {
    local pm
    pm=$(postmaster)
    [ -n "$pm" ] || return 0
    pkill -9 -P "$pm" 2>/dev/null || true
    kill -9 "$pm" 2>/dev/null || true
    while kill -0 "$pm" 2>/dev/null; do sleep 0.05; done
    rm -f "$sock/postmaster.pid.copy" "$sock"/.s.PGSQL.*
}
stop_all() {
    kill_pg
    if [ -n "$daemon" ]; then
        "$pmkit" fs umount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
        daemon=""
    fi
}
trap 'stop_all; rm -rf "$work" "$sock"' EXIT

"$pmkit" fs mkfs "$work/pool" --size 1G >/dev/null 2>&1
chmod 666 "$work/pool"
mount_pool
env $shim chown postgres:postgres "$mnt"
$pg "$pgbin/initdb" -D "$mnt/pg" -A trust >/dev/null
start_pg
psql -c "CREATE TABLE t (i int PRIMARY KEY)"
acked=$work/acked
: >"$acked"
next=0
for trial in $(seq "$trials"); do
    # The client: one transaction per row, the number recorded once COMMIT returned.
    (
        i=$next
        while psql -c "INSERT INTO t VALUES ($i)" >/dev/null 2>&1; do
            echo "$i" >>"$acked"
            i=$((i + 1))
        done
    ) &
    client=$!
    sleep 2.5
    if [ $((trial % 2)) = 1 ]; then
        what="the mount's daemon"
        kill -9 "$daemon"
        wait "$daemon" 2>/dev/null || true
        daemon=""
        wait "$client" 2>/dev/null || true
        kill_pg
        mount_pool # detaches the stale mount, recovers the pool
    else
        pm=$(postmaster)
        victim=$(pgrep -P "$pm" -f 'postgres: postgres postgres' | head -1 || true)
        [ -n "$victim" ] || victim=$(pgrep -P "$pm" | shuf -n 1)
        cmd=$(cat /proc/"$victim"/cmdline 2>/dev/null | tr '\0' ' ' | cut -c1-40 || true)
        what="PostgreSQL process $victim ($cmd)"
        kill -9 "$victim" 2>/dev/null || true
        sleep 1
        kill "$client" 2>/dev/null || true
        wait "$client" 2>/dev/null || true
        kill_pg
    fi
    start_pg # PostgreSQL's crash recovery, through the shim
    n=$(wc -l <"$acked")
    have=$(psql -c "SELECT count(*) FROM t")
    missing=$(psql -c "SELECT count(*) FROM unnest(ARRAY[$(paste -sd, "$acked")]::int[]) a(i) WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.i = a.i)")
    next=$(( $(psql -c "SELECT coalesce(max(i), -1) FROM t") + 1 ))
    echo "trial $trial: killed $what; $n rows acknowledged, $have in the table, $missing acknowledged rows missing"
    [ "$missing" = 0 ] || { echo "LOST acknowledged rows" >&2; exit 1; }
done
$pg "$pgbin/pg_ctl" -D "$mnt/pg" -m fast -w stop >/dev/null
rm -f "$sock/postmaster.pid.copy"
"$pmkit" fs umount "$mnt" >/dev/null
wait "$daemon" 2>/dev/null || true
daemon=""
"$pmkit" fs check "$work/pool" | tail -1
