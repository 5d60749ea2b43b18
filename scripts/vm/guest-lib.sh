# Shared by the guest scripts (sourced, in the guest only).
[ "${PMKIT_IN_VM:-}" = 1 ] || { echo "$0: runs inside scripts/vm/run.sh only" >&2; exit 2; }
pmkit=${PMKIT:-$PWD/target/debug/pmkit}

# Wait up to a minute (a guest under TCG is slow) until COMMAND succeeds; else print LOG, fail.
#   wait_for LOG COMMAND...
wait_for() {
    log=$1; shift
    i=0
    until "$@" > /dev/null 2>&1; do
        i=$((i + 1))
        [ "$i" -lt 600 ] || { cat "$log"; echo "$0: gave up waiting for: $*" >&2; exit 1; }
        sleep 0.1
    done
}

# `pmkit serve DEVICE --socket SOCKET ARGS...` in the background, its pid in $pid, once the
# socket is there.
serve_on() {
    sock=$1 dev=$2; shift 2
    rm -f "$sock"
    "$pmkit" serve "$dev" --socket "$sock" "$@" > /tmp/serve.log 2>&1 &
    pid=$!
    wait_for /tmp/serve.log test -S "$sock"
}
