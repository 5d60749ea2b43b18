#!/usr/bin/env bash
# Install pmkit from this source tree, as its Debian package lays it out (scripts/deb.sh stages
# the package with this script), or remove what an earlier run installed.
#
#   scripts/install.sh [--prefix DIR] [--destdir DIR] [--profile release|debug] [--no-build]
#   scripts/install.sh --uninstall [--prefix DIR]
#
# --prefix   where it goes (default /usr/local). Under /usr the libraries go to the multiarch
#            directory (/usr/lib/x86_64-linux-gnu), as Debian's do.
# --destdir  stage the files under DIR instead of / (for packaging): nothing outside is touched.
# --profile  the cargo profile to build and take the files from (default release).
# --no-build take the files already built.
#
# What goes where (PREFIX=/usr/local):
#   bin/pmkit, bin/pmkit-bench              the command and its benchmarks
#   /sbin/mount.fuse.pmkit -> pmkit         mount(8)'s helper (`mount -t fuse.pmkit`, fstab): mount
#                                           looks only in /sbin (PREFIX/sbin for other prefixes)
#   lib/libpmfs.so.0.1.0, .so.0, .so        the C libraries (and libpmo, libxmem), SONAME .so.0
#   lib/pmkit/libpmkit_preload.so           the LD_PRELOAD shim
#   include/pmkit/{pmfs,pmo,xmem}.h         their headers
#   lib/pkgconfig/{pmfs,pmo,xmem}.pc        `pkg-config --cflags --libs pmfs pmo xmem`
#   share/man/man1/pmkit*.1, man8/mount.fuse.pmkit.8   made by `pmkit generate man`
#   share/{bash-completion,zsh,fish}/...    made by `pmkit generate completions`
#   lib/systemd/system/pmkit-{serve,fs}@.service       the services (docs/install.md)
#   share/doc/pmkit/                        README, docs, example configs; /etc/pmkit/{serve,fs}/
# A list of what was installed is kept in share/pmkit/installed, for --uninstall.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/usr/local destdir= profile=release build=1 uninstall=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=$2; shift 2 ;;
        --destdir) destdir=$2; shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        --uninstall) uninstall=1; shift ;;
        *) echo "install.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
manifest=$prefix/share/pmkit/installed
if [ "$uninstall" = 1 ]; then
    [ -f "$destdir$manifest" ] || { echo "install.sh: nothing recorded in $destdir$manifest" >&2; exit 1; }
    # Files and links first, then the directories that are left empty.
    tac "$destdir$manifest" | while read -r f; do rm -f "$destdir$f"; done
    left=$(cat "$destdir$manifest.dirs" 2>/dev/null || true)
    rm -f "$destdir$manifest" "$destdir$manifest.dirs"
    for d in $(echo "$left" | tac); do rmdir "$destdir$d" 2>/dev/null || true; done
    echo "install.sh: removed pmkit from $prefix"
    exit 0
fi

. scripts/lib.sh
require_cargo
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
major=${version%%.*}
target=${CARGO_TARGET_DIR:-target}/$profile
[ "$profile" = debug ] && cargo_profile=dev || cargo_profile=$profile
if [ "$build" = 1 ]; then
    cargo build --locked --profile "$cargo_profile" -p pmkit -p pmkit-bench -p pmkit-preload \
        -p pmkit-libpmfs -p pmkit-libpmo -p pmkit-libxmem
fi
for f in pmkit pmkit-bench libpmkit_preload.so libpmfs.so libpmo.so libxmem.so; do
    [ -e "$target/$f" ] || { echo "install.sh: $target/$f is not built (drop --no-build)" >&2; exit 1; }
done

multiarch=$(gcc -print-multiarch 2>/dev/null || true)
if [ "$prefix" = /usr ] && [ -n "$multiarch" ]; then
    libdir=$prefix/lib/$multiarch
else
    libdir=$prefix/lib
fi
bindir=$prefix/bin sysconfdir=/etc helperdir=/sbin
# A private prefix ($HOME/.local, /opt/pmkit) keeps its configuration and mount helper inside it
# (mount(8) then does not find the helper: link it into /sbin by hand).
[ "$prefix" = /usr/local ] || [ "$prefix" = /usr ] || { sysconfdir=$prefix/etc; helperdir=$prefix/sbin; }
mandir=$prefix/share/man docdir=$prefix/share/doc/pmkit
unitdir=$prefix/lib/systemd/system

installed=() dirs=()
put() { # put MODE SRC DEST: copy one file
    install -D -m "$1" "$2" "$destdir$3"
    installed+=("$3")
}
link() { # link TARGET NAME
    mkdir -p "$(dirname "$destdir$2")"
    ln -sfn "$1" "$destdir$2"
    installed+=("$2")
}
written() { # written DEST: a file made in place
    installed+=("$1")
}

put 755 "$target/pmkit" "$bindir/pmkit"
put 755 "$target/pmkit-bench" "$bindir/pmkit-bench"
link "$bindir/pmkit" "$helperdir/mount.fuse.pmkit"
put 644 "$target/libpmkit_preload.so" "$libdir/pmkit/libpmkit_preload.so"
for lib in pmfs pmo xmem; do
    put 644 "$target/lib$lib.so" "$libdir/lib$lib.so.$version"
    link "lib$lib.so.$version" "$libdir/lib$lib.so.$major"
    link "lib$lib.so.$major" "$libdir/lib$lib.so"
    put 644 "frontends/c/$lib/include/$lib.h" "$prefix/include/pmkit/$lib.h"
    desc=$(sed -n 's/^description = "\(.*\)"/\1/p' "frontends/c/$lib/Cargo.toml" | sed 's/ (include[^)]*)//')
    mkdir -p "$destdir$libdir/pkgconfig"
    cat > "$destdir$libdir/pkgconfig/$lib.pc" <<EOF
prefix=$prefix
libdir=$libdir
includedir=\${prefix}/include/pmkit

Name: $lib
Description: $desc
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -l$lib
EOF
    written "$libdir/pkgconfig/$lib.pc"
done

# Man pages and completions from the command's own definitions.
pages=$(mktemp -d)
trap 'rm -rf "$pages"' EXIT
"$target/pmkit" generate man "$pages" 2>/dev/null
for p in "$pages"/*; do
    section=${p##*.}
    gzip -9n -c "$p" > "$pages/page.gz"
    put 644 "$pages/page.gz" "$mandir/man$section/$(basename "$p").gz"
done
"$target/pmkit" generate completions bash > "$pages/bash"
"$target/pmkit" generate completions zsh > "$pages/zsh"
"$target/pmkit" generate completions fish > "$pages/fish"
put 644 "$pages/bash" "$prefix/share/bash-completion/completions/pmkit"
put 644 "$pages/zsh" "$prefix/share/zsh/vendor-completions/_pmkit"
put 644 "$pages/fish" "$prefix/share/fish/vendor_completions.d/pmkit.fish"

for u in packaging/systemd/*.service; do
    sed "s|/usr/bin/pmkit|$bindir/pmkit|g; s|/etc/pmkit|$sysconfdir/pmkit|g" "$u" > "$pages/unit"
    put 644 "$pages/unit" "$unitdir/$(basename "$u")"
done
for f in packaging/examples/*.conf; do put 644 "$f" "$docdir/examples/$(basename "$f")"; done
put 644 README.md "$docdir/README.md"
for f in docs/usage.md docs/install.md docs/fs.md docs/nbd.md; do put 644 "$f" "$docdir/$(basename "$f")"; done
for d in "$sysconfdir/pmkit/serve" "$sysconfdir/pmkit/fs"; do
    mkdir -p "$destdir$d"
    dirs+=("$sysconfdir/pmkit" "$d")
done
dirs+=("$libdir/pmkit" "$prefix/include/pmkit" "$docdir/examples" "$docdir" "$prefix/share/pmkit")

mkdir -p "$(dirname "$destdir$manifest")"
printf '%s\n' "${installed[@]}" > "$destdir$manifest"
printf '%s\n' "${dirs[@]}" | awk '!seen[$0]++' > "$destdir$manifest.dirs"
echo "install.sh: installed pmkit $version ($profile) under ${destdir}$prefix (${#installed[@]} files)"
if [ -z "$destdir" ] && [ "$(id -u)" = 0 ]; then
    ldconfig
    [ -d /run/systemd/system ] && systemctl daemon-reload || true
fi
