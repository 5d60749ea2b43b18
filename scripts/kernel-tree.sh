#!/bin/bash
# Debian's Linux source tree (linux-source-6.1, apt-get install linux-source-6.1) untarred, then
# `git init && git add -A -f && git commit` (its .gitignore ignores everything: -f), on the PMFS
# FUSE mount of a pool made with mkfs's defaults, through the LD_PRELOAD shim on a pool served by
# `pmkit fs serve` (every command a client of the server: tar, git and make fork and exec), and
# on ext4 on a /dev/shm loop file of the same size; times, `df` and `df -i`, then
# `pmkit fs check`. TARGETS picks (default "mount shim ext4"; "peer": through the shim with the
# pool mounted, the mount's daemon serving the shim's processes, then the tree checked through
# the mount). Needs root, /dev/fuse, a release
# build (cargo build --release -p pmkit -p pmkit-preload) and SIZE (default 4G) of free memory
# twice over.
# BUILD=1 also builds part of the tree on each (`make defconfig && make -j2 kernel/`; needs flex,
# bison, bc, libelf-dev and libssl-dev, in scripts/bench-packages.txt) and compares the objects
# of each build with ext4's byte for byte.
set -u
P=/work/main/target/release/pmkit
L=/work/main/target/release/libpmkit_preload.so
T=/usr/src/linux-source-6.1.tar.xz
TARGETS=${TARGETS:-mount shim ext4}
SIZE=${SIZE:-4G}
W=/dev/shm/kt; rm -rf $W; mkdir -p $W/m $W/e $W/s
run() { # name dir
  local d=$2
  local t0=$(date +%s.%N)
  tar xJf $T -C $d || echo "tar failed"
  local t1=$(date +%s.%N)
  (cd $d/linux-source-6.1 && git init -q && git -c gc.auto=0 add -A -f && git -c gc.auto=0 -c user.name=b -c user.email=b@b commit -qm tree) || echo "git failed"
  local t2=$(date +%s.%N)
  local files=$(cd $d && find linux-source-6.1 -path '*/.git' -prune -o -print | wc -l)
  echo "$1: untar $(echo "$t1 - $t0" | bc) s, git init+add+commit $(echo "$t2 - $t1" | bc) s, entries $files"
  if [ "${BUILD:-0}" = 1 ]; then
    local t3=$(date +%s.%N)
    # .scmversion (empty): the release string is not taken from git, whose commit (its time)
    # differs between the two trees and would differ in the objects that embed it.
    (cd $d/linux-source-6.1 && touch .scmversion && make -s defconfig > /dev/null && make -s -j2 kernel/ > $W/make-$(basename $d).log 2>&1) || echo "make failed (log: $W/make-$(basename $d).log)"
    local t4=$(date +%s.%N)
    local n=$(cd $d/linux-source-6.1 && find kernel -name '*.o' | wc -l)
    (cd $d/linux-source-6.1 && find kernel -name '*.o' | sort | xargs sha256sum) > $W/objects-$(basename $d).txt
    echo "$1: make defconfig + make -j2 kernel/ $(echo "$t4 - $t3" | bc) s, $n objects"
  fi
  df -h $d | tail -1; df -i $d | tail -1
}
want() { [[ " $TARGETS " == *" $1 "* ]]; }
export -f run; export W T BUILD SIZE
if want mount; then
  $P fs mkfs $W/pool --size $SIZE > /dev/null
  setsid $P fs mount $W/pool $W/m > $W/mount.log 2>&1 < /dev/null &
  sleep 2
  run "PMFS mount (default pool $SIZE)" $W/m
  (cd $W/m/linux-source-6.1 && git status --porcelain --ignored=no | wc -l | sed 's/^/git status changes: /')
  umount $W/m; sleep 2
  $P fs check $W/pool | tail -2
  rm -f $W/pool
fi
if want shim; then
  $P fs mkfs $W/spool --size $SIZE > /dev/null
  setsid $P fs serve $W/spool > $W/serve.log 2>&1 < /dev/null &
  server=$!
  sleep 1
  shim() { env LD_PRELOAD=$L PMKIT_PRELOAD_POOL=$W/spool PMKIT_PRELOAD_PREFIX=$W/s "$@"; }
  shim bash -c "run 'PMFS through the shim, served (default pool $SIZE)' $W/s"
  shim bash -c "cd $W/s/linux-source-6.1 && git status --porcelain --ignored=no | wc -l | sed 's/^/git status changes: /'"
  kill -TERM $server; wait $server
  $P fs check $W/spool | tail -2
  rm -f $W/spool
fi
if want peer; then
  # The shim's processes beside the mount: the mount's daemon serves them, the shim's prefix is
  # the mount point; then the kernel checks the same tree through the mount.
  $P fs mkfs $W/ppool --size $SIZE > /dev/null
  mkdir -p $W/p
  setsid $P fs mount $W/ppool $W/p > $W/peer.log 2>&1 < /dev/null &
  sleep 2
  peer() { env LD_PRELOAD=$L PMKIT_PRELOAD_POOL=$W/ppool PMKIT_PRELOAD_PREFIX=$W/p "$@"; }
  peer bash -c "run 'PMFS through the shim beside its mount (default pool $SIZE)' $W/p"
  (cd $W/p/linux-source-6.1 && git status --porcelain --ignored=no | wc -l | sed 's/^/git status changes, through the mount: /')
  # A clone in the pool through the shim (its objects hard-linked, its tree checked out), then
  # checked by git through the mount.
  peer bash -c "t0=\$(date +%s.%N); cd $W/p && git clone -q linux-source-6.1 clone && echo \"git clone through the shim: \$(echo \$(date +%s.%N) - \$t0 | bc) s\""
  (cd $W/p/clone && git fsck --no-progress 2>&1 | wc -l | sed 's/^/git fsck of the clone through the mount, lines of complaint: /' && git status --porcelain | wc -l | sed 's/^/clone status changes, through the mount: /')
  if [ "${BUILD:-0}" = 1 ]; then
    (cd $W/p/linux-source-6.1 && find kernel -name '*.o' | sort | xargs sha256sum) > $W/objects-p-mount.txt
    cmp -s $W/objects-p.txt $W/objects-p-mount.txt && echo "objects read through the mount: the same as through the shim" || echo "objects read through the mount DIFFER from the shim's"
  fi
  umount $W/p; sleep 2
  $P fs check $W/ppool | tail -2
  rm -f $W/ppool
fi
if want ext4; then
  truncate -s $SIZE $W/ext4.img && mkfs.ext4 -q $W/ext4.img && mount -o loop $W/ext4.img $W/e
  run "ext4 on a /dev/shm loop ($SIZE)" $W/e
  umount $W/e
fi
if [ "${BUILD:-0}" = 1 ] && want ext4; then
  for t in m s p; do
    [ -f $W/objects-$t.txt ] || continue
    if cmp -s $W/objects-$t.txt $W/objects-e.txt; then echo "objects ($t): identical to ext4's"
    else echo "objects ($t) DIFFER ($(diff $W/objects-$t.txt $W/objects-e.txt | grep -c '^<') of them):"; diff $W/objects-$t.txt $W/objects-e.txt | grep '^<'; fi
  done
fi
rm -rf $W
