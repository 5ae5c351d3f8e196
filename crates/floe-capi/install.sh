#!/usr/bin/env bash
# Build floe's C library and install it the way C libraries install (what cargo-c's
# `cargo cinstall` does for a crate; cargo-c itself is not needed):
#
#   $LIBDIR/libfloe_capi.so.X.Y.Z    the shared library, its SONAME libfloe_capi.so.0.Y
#   $LIBDIR/libfloe_capi.so.0.Y      -> libfloe_capi.so.X.Y.Z (what programs load)
#   $LIBDIR/libfloe_capi.so          -> libfloe_capi.so.X.Y.Z (what `-lfloe_capi` finds)
#   $LIBDIR/libfloe_capi.a           the static library
#   $LIBDIR/pkgconfig/floe.pc        `pkg-config --cflags --libs floe` (`--static` adds the
#                                    system libraries the static library needs)
#   $INCLUDEDIR/floe.h               the header
#
# usage: bash crates/floe-capi/install.sh [--prefix DIR] [--libdir DIR] [--includedir DIR]
#            [--destdir DIR] [--profile NAME]
#   --prefix      where to install (default /usr/local)
#   --libdir      default PREFIX/lib; --includedir default PREFIX/include
#   --destdir     stage the files under DIR (for packagers); floe.pc still names PREFIX
#   --profile     cargo's build profile (default release; ci/capi.sh installs the dev build)
# Then, for example:
#   cc app.c $(pkg-config --cflags --libs floe) -o app
#   cc app.c PREFIX/lib/libfloe_capi.a $(pkg-config --static --libs-only-l floe | sed 's/-lfloe_capi//')
# (set PKG_CONFIG_PATH=LIBDIR/pkgconfig for a prefix pkg-config does not search, and
# run `ldconfig` after installing to a system directory).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
    sed -n '13,18p' "$0" >&2
    exit 2
}
prefix=/usr/local libdir="" includedir="" destdir="" profile=release
while (($#)); do
    case "$1" in
    --prefix | --libdir | --includedir | --destdir | --profile)
        (($# >= 2)) || { echo "install.sh: $1 needs a value" >&2; usage; }
        value="$2"
        [ -n "$value" ] || { echo "install.sh: $1 needs a value" >&2; usage; }
        case "$1" in
        --prefix) prefix="$value" ;;
        --libdir) libdir="$value" ;;
        --includedir) includedir="$value" ;;
        --destdir) destdir="$value" ;;
        --profile) profile="$value" ;;
        esac
        shift 2
        ;;
    -h | --help) usage ;;
    *)
        echo "install.sh: unknown argument '$1'" >&2
        usage
        ;;
    esac
done
for dir in "$prefix" "${libdir:-/}" "${includedir:-/}"; do
    case "$dir" in
    /*) ;;
    *)
        echo "install.sh: '$dir' is not an absolute path (floe.pc records it)" >&2
        exit 2
        ;;
    esac
done
libdir="${libdir:-$prefix/lib}"
includedir="${includedir:-$prefix/include}"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' crates/floe-capi/Cargo.toml | head -1)"
major="${version%%.*}"
rest="${version#*.}"
minor="${rest%%.*}"
# As build.rs sets it.
if [ "$major" = 0 ]; then abi="0.$minor"; else abi="$major"; fi

echo "install.sh: building floe-capi $version ($profile profile)"
cargo build --quiet -p floe-capi --profile "$profile"
target="${CARGO_TARGET_DIR:-target}"
if [ "$profile" = dev ]; then built="$target/debug"; else built="$target/$profile"; fi
for file in libfloe_capi.a libfloe_capi.so; do
    [ -f "$built/$file" ] || { echo "install.sh: the build made no $built/$file" >&2; exit 1; }
done
soname="$(readelf -d "$built/libfloe_capi.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
if [ "$soname" != "libfloe_capi.so.$abi" ]; then
    echo "install.sh: $built/libfloe_capi.so has SONAME '$soname', not libfloe_capi.so.$abi" >&2
    exit 1
fi

# The system libraries a program linking the static library needs: those of Rust's standard
# library (floe links nothing else), as rustc reports them for an empty static library.
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
: >"$probe/empty.rs"
private="$(rustc --crate-type staticlib --crate-name probe --print native-static-libs \
    -o "$probe/libprobe.a" "$probe/empty.rs" 2>&1 |
    sed -n 's/.*native-static-libs: //p')"
[ -n "$private" ] || { echo "install.sh: rustc did not say which system libraries a static library needs" >&2; exit 1; }

lib="$destdir$libdir"
inc="$destdir$includedir"
install -d "$lib/pkgconfig" "$inc"
install -m 644 crates/floe-capi/include/floe.h "$inc/floe.h"
install -m 644 "$built/libfloe_capi.a" "$lib/libfloe_capi.a"
install -m 755 "$built/libfloe_capi.so" "$lib/libfloe_capi.so.$version"
ln -sfn "libfloe_capi.so.$version" "$lib/libfloe_capi.so.$abi"
ln -sfn "libfloe_capi.so.$version" "$lib/libfloe_capi.so"
cat >"$lib/pkgconfig/floe.pc" <<PC
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: floe
Description: A concurrent hash map at the speed of DRAM, from C and C++ (floe-capi)
Version: $version
URL: https://crates.io/crates/floe
Libs: -L\${libdir} -lfloe_capi
Libs.private: $private
Cflags: -I\${includedir}
PC
chmod 644 "$lib/pkgconfig/floe.pc"
echo "install.sh: installed floe-capi $version:"
for file in "$inc/floe.h" "$lib/libfloe_capi.a" "$lib/libfloe_capi.so.$version" \
    "$lib/libfloe_capi.so.$abi" "$lib/libfloe_capi.so" "$lib/pkgconfig/floe.pc"; do
    echo "  $file"
done
