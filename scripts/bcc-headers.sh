#!/bin/sh
# Make Debian's installed kernel headers visible to bcc for the running kernel.
#
# bcc compiles its BPF programs against /lib/modules/$(uname -r)/build (and .../source).
# Hosts that run a kernel without a matching headers package (cloud and VM images, custom
# kernels) have no such directory, so every bcc tool fails with "Unable to find kernel
# headers". Programs that only use tracepoints and BPF helpers (the profiler's bcc backend)
# do not depend on kernel struct layouts, so the headers of another kernel of the same
# architecture (Debian's linux-headers-<arch>) are enough to compile them.
#
#   scripts/bcc-headers.sh [install]   link the newest /usr/src/linux-headers-*-<arch> (idempotent)
#   scripts/bcc-headers.sh remove      undo exactly what install did (leaves anything else alone)
#   scripts/bcc-headers.sh status      say what is there; exit 0 if build/ has headers
#
# Environment: KERNEL_RELEASE (default: uname -r), MODULES_ROOT (default: /lib/modules),
# HEADERS_ROOT (default: /usr/src), for tests and for preparing another kernel's tree.
# What install created is listed in <modules>/<release>/.profiler-bcc-headers; remove
# only deletes what that file names.
set -eu

action=${1:-install}
release=${KERNEL_RELEASE:-$(uname -r)}
modules=${MODULES_ROOT:-/lib/modules}
src=${HEADERS_ROOT:-/usr/src}
dir="$modules/$release"
marker="$dir/.profiler-bcc-headers"

say() { printf 'bcc-headers: %s\n' "$*"; }
die() { printf 'bcc-headers: %s\n' "$*" >&2; exit 1; }

arch() {
    if command -v dpkg >/dev/null 2>&1; then
        dpkg --print-architecture
    else
        case $(uname -m) in
            x86_64) echo amd64 ;;
            aarch64) echo arm64 ;;
            *) uname -m ;;
        esac
    fi
}

# The newest linux-headers-<version>-<arch> directory that has a Makefile and include/.
find_headers() {
    a=$(arch)
    best=
    for d in $(ls -d "$src"/linux-headers-*-"$a" 2>/dev/null | sort -V); do
        [ -f "$d/Makefile" ] || [ -d "$d/include" ] || continue
        best=$d
    done
    [ -n "$best" ] && echo "$best"
}

has_headers() {  # a build dir bcc can use
    [ -d "$1" ] && { [ -d "$1/include" ] || [ -d "$1/arch" ]; }
}

case $action in
install)
    build=$(find_headers) || die "no $src/linux-headers-*-$(arch) found: install the headers package (apt-get install linux-headers-$(arch))"
    common="${build%-"$(arch)"}-common"
    created=
    if [ ! -d "$dir" ]; then
        mkdir -p "$dir"
        created="dir $dir"
    fi
    if [ -L "$dir/build" ] || [ -e "$dir/build" ]; then
        if has_headers "$dir/build"; then
            say "$dir/build already present ($(readlink -f "$dir/build")), left as it is"
        else
            die "$dir/build exists but holds no headers: remove it and re-run"
        fi
    else
        ln -s "$build" "$dir/build"
        created="$created
build $build"
        say "linked $dir/build -> $build"
    fi
    if [ -d "$common" ] && [ ! -e "$dir/source" ] && [ ! -L "$dir/source" ]; then
        ln -s "$common" "$dir/source"
        created="$created
source $common"
        say "linked $dir/source -> $common"
    fi
    if [ -n "$created" ]; then
        # Append, so a second install after a partial first one still records everything.
        printf '%s\n' "$created" | sed '/^$/d' >>"$marker"
    fi
    say "ok: bcc compiles tracepoint programs for $release against $(readlink -f "$dir/build")"
    ;;
remove)
    if [ ! -f "$marker" ]; then
        say "nothing to remove for $release (no $marker: not set up by this script)"
        exit 0
    fi
    while read -r what target; do
        case $what in
        build | source)
            if [ -L "$dir/$what" ] && [ "$(readlink "$dir/$what")" = "$target" ]; then
                rm -f "$dir/$what"
                say "removed $dir/$what"
            fi
            ;;
        esac
    done <"$marker"
    if grep -q '^dir ' "$marker"; then
        rm -f "$marker"
        rmdir "$dir" 2>/dev/null && say "removed $dir" || say "kept $dir (not empty)"
    else
        rm -f "$marker"
    fi
    ;;
status)
    if has_headers "$dir/build"; then
        say "ok: $dir/build -> $(readlink -f "$dir/build")"
        exit 0
    fi
    if build=$(find_headers); then
        say "missing: $dir/build; fix: $0 install (links $build)"
    else
        say "missing: $dir/build and no $src/linux-headers-*-$(arch); fix: apt-get install linux-headers-$(arch), then $0 install"
    fi
    exit 1
    ;;
*)
    die "usage: $0 [install|remove|status]"
    ;;
esac
