#!/usr/bin/env bash
# floe from C and C++ (issue 16):
# - the header crates/floe-capi/include/floe.h is what cbindgen makes of the crate now;
# - the C ABI's Rust tests, then the C test program (crates/floe-capi/tests/c/test.c) against
#   the shared and the static library, both under AddressSanitizer and
#   UndefinedBehaviorSanitizer (the Rust library is not instrumented, but the sanitizer
#   runtime in the program sees its allocations and frees through the malloc and free it
#   intercepts, and checks every access of the C side), and the example
#   (examples/example.c) as C, with the header also compiled as C++;
# - install.sh installs the library to a prefix (SONAME and its links, floe.pc, the header),
#   and the example builds against the installed copy through pkg-config, shared and static;
# - floe-bench's C++ peers are all in the build (`floe-bench peers`), answer every check on a
#   small table, and floe through its C ABI too.
# Installs what it needs when missing (Debian: cbindgen, libtbb-dev, libcuckoo-dev,
# libabsl-dev, pkg-config; PyPI: boost-headers, Boost 1.85's headers, which floe-bench's
# build.rs finds through `boost_headers.get_include()`, or FLOE_BOOST_INCLUDE).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/apt.sh
source ci/features.sh

missing=()
command -v cbindgen >/dev/null || missing+=(cbindgen)
command -v pkg-config >/dev/null || missing+=(pkg-config)
[ -e /usr/include/oneapi/tbb/concurrent_hash_map.h ] || missing+=(libtbb-dev)
[ -e /usr/include/libcuckoo/cuckoohash_map.hh ] || missing+=(libcuckoo-dev)
[ -e /usr/include/absl/container/flat_hash_map.h ] || missing+=(libabsl-dev)
if ((${#missing[@]})); then
    echo "capi.sh: installing ${missing[*]} (apt)"
    apt_install "${missing[@]}"
fi
if ! python3 -c "import boost_headers" 2>/dev/null; then
    echo "capi.sh: installing boost-headers (pip)"
    retry_once "pip install boost-headers" python3 -m pip install -q boost-headers
    missing+=(boost-headers)
fi
if ((${#missing[@]})); then
    # floe-bench's build script looks for the peers' libraries when it runs, and cargo runs
    # it again only when it changes: an earlier build (ci/test.sh's) did without them.
    touch crates/floe-bench/build.rs
fi

echo "== the header is up to date (cbindgen $(cbindgen --version | cut -d' ' -f2))"
fresh="$(mktemp)"
trap 'rm -f "$fresh"' EXIT
(cd crates/floe-capi && cbindgen --quiet --config cbindgen.toml --output "$fresh")
if ! diff -u crates/floe-capi/include/floe.h "$fresh"; then
    echo "capi.sh: include/floe.h is stale; regenerate it from crates/floe-capi:" >&2
    echo "  cbindgen --config cbindgen.toml --output include/floe.h" >&2
    echo "(the header in the repository is Debian 12's cbindgen 0.24.3's; another version" >&2
    echo "may only lay it out differently)" >&2
    exit 1
fi

echo "== the C ABI's Rust tests"
cargo test -p floe-capi
cargo build -p floe-capi

echo "== the C tests and the example, with sanitizers"
lib=target/debug
build="$(mktemp -d)"
# The shared library's SONAME (build.rs): programs linked against it load that name, which
# only an install (install.sh) or this link in the build directory provides.
version="$(sed -n 's/^version = "\(.*\)"/\1/p' crates/floe-capi/Cargo.toml | head -1)"
soname="libfloe_capi.so.$(echo "$version" | awk -F. '{ print ($1 == 0) ? "0." $2 : $1 }')"
ln -sfn libfloe_capi.so "$lib/$soname"
trap 'rm -rf "$fresh" "$build"' EXIT
cflags=(-std=c11 -g -O1 -Wall -Wextra -Werror -fno-omit-frame-pointer
    -fsanitize=address,undefined -fno-sanitize-recover=undefined
    -I crates/floe-capi/include)
cc "${cflags[@]}" crates/floe-capi/tests/c/test.c -L "$lib" -lfloe_capi \
    -Wl,-rpath,"$PWD/$lib" -lpthread -o "$build/test-shared"
cc "${cflags[@]}" crates/floe-capi/tests/c/test.c "$lib/libfloe_capi.a" \
    -lpthread -ldl -lm -o "$build/test-static"
cc "${cflags[@]}" crates/floe-capi/examples/example.c "$lib/libfloe_capi.a" \
    -lpthread -ldl -lm -o "$build/example"
# The header from C++ (its `extern "C"` block and enum types).
c++ -std=c++17 -Wall -Wextra -Werror -Wno-missing-field-initializers -fsyntax-only -x c++ \
    -I crates/floe-capi/include crates/floe-capi/examples/example.c
echo "-- shared library"
"$build/test-shared"
echo "-- static library"
"$build/test-static"
echo "-- example"
"$build/example"

echo "== installed to a prefix (crates/floe-capi/install.sh), the example built with pkg-config"
prefix="$build/prefix"
bash crates/floe-capi/install.sh --profile dev --prefix "$prefix"
installed="$prefix/lib"
[ "$(readlink "$installed/$soname")" = "libfloe_capi.so.$version" ] ||
    { echo "capi.sh: $installed/$soname is not a link to libfloe_capi.so.$version" >&2; exit 1; }
export PKG_CONFIG_PATH="$installed/pkgconfig"
[ "$(pkg-config --modversion floe)" = "$version" ] ||
    { echo "capi.sh: pkg-config's floe is not version $version" >&2; exit 1; }
pc_cflags=(-std=c11 -Wall -Wextra -Werror)
# shellcheck disable=SC2046 # pkg-config's flags are words
cc "${pc_cflags[@]}" crates/floe-capi/examples/example.c $(pkg-config --cflags --libs floe) \
    -Wl,-rpath,"$installed" -o "$build/example-pkg-config"
# The program asks for the SONAME, not the unversioned name or the file.
readelf -d "$build/example-pkg-config" | grep -q "NEEDED.*\[$soname\]" ||
    { echo "capi.sh: the example does not load $soname" >&2; readelf -d "$build/example-pkg-config" >&2; exit 1; }
"$build/example-pkg-config" >/dev/null
# The static library with the system libraries `pkg-config --static` names.
# shellcheck disable=SC2046
cc "${pc_cflags[@]}" $(pkg-config --cflags floe) crates/floe-capi/examples/example.c \
    "$(pkg-config --variable=libdir floe)/libfloe_capi.a" \
    $(pkg-config --static --libs-only-l floe | sed 's/-lfloe_capi//') -o "$build/example-static-pkg-config"
"$build/example-static-pkg-config" >/dev/null
unset PKG_CONFIG_PATH
echo "-- both ran"

echo "== floe-bench's C++ peers and floe through its C ABI"
# Built as ci/test.sh's build was (the workspace, ci/features.sh), so that only floe-bench
# itself compiles again (its build script finding the peers): `-p floe-bench` resolves the
# dependencies' features for it alone and compiled them all again, 1 min 21 s of a CPU-bound
# CI run (2026-11-30). Hence the binary run directly, not through `cargo run`.
cargo build --workspace --bins "${workspace_features[@]}"
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
bench="$target/debug/floe-bench"
"$bench" peers
cargo test --workspace "${workspace_features[@]}" --bin floe-bench maps::cpp
for workload in get insdel putheavy; do
    "$bench" run --workload "$workload" --keys 2^12 --threads 1 \
        --seconds 0.05 --repeat 1 --memory off --latency off \
        --maps floe,floe-capi,boost,tbb,libcuckoo,absl
done
"$bench" run --workload get --keys 2^12 --threads 1 --seconds 0.05 \
    --repeat 1 --memory off --api batch --batch 16 --maps floe,floe-capi,boost
