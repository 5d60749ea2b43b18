#!/bin/sh
# In the guest: run each step of a suite file (lines `NAME<TAB>COMMAND`, `#` comments), each
# with a time limit, printing its time and result; exit 1 if any failed.
#   scripts/vm/guest-suite.sh SUITE [LIMIT_SECONDS]
set -u
[ "${PMKIT_IN_VM:-}" = 1 ] || { echo "guest-suite.sh: runs inside scripts/vm/run.sh only" >&2; exit 2; }
suite=$1 limit=${2:-600}
failed=0 n=0
tab=$(printf '\t')
while IFS="$tab" read -r name cmd; do
    case "$name" in ''|'#'*) continue ;; esac
    n=$((n + 1))
    echo "== $name"
    start=$(date +%s)
    timeout "$limit" sh -c "$cmd" < /dev/null
    rc=$?
    took=$(($(date +%s) - start))
    if [ "$rc" = 0 ]; then
        echo "== $name: ok ($took s)"
    else
        echo "== $name: FAILED (exit $rc, $took s)"
        failed=$((failed + 1))
    fi
done < "$suite"
echo "== $((n - failed)) of $n steps passed"
[ "$failed" = 0 ]
