#!/usr/bin/env bash
# Differential fuzzing against std's HashMap: FlatMap (fuzz/fuzz_targets/differential.rs) and
# Map (fuzz/fuzz_targets/any_map.rs); floe-server's protocol parsers on arbitrary bytes, whole
# against split into reads (fuzz/fuzz_targets/server_protocol.rs); persistent directories
# damaged every way (fuzz/fuzz_targets/damaged_dir.rs: refused, or opened holding what they
# held). Each a bounded run from its corpus in the repository; an input that runs 60 s
# (a hang) fails the run.
# Installs nightly and cargo-fuzz when missing. FLOE_FUZZ_SECONDS (default 60) bounds each
# target's run; new corpus entries are kept in fuzz/corpus/<target> (commit the ones worth
# keeping, after `cargo fuzz cmin`).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/retry.sh
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing nightly (rustup)"
    retry_once "rustup toolchain install nightly" rustup toolchain install nightly --profile minimal
fi
# A pinned version: a new release cannot change what CI runs (or fail to build) overnight.
cargo_fuzz_version=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -qx "cargo-fuzz $cargo_fuzz_version"; then
    echo "fuzz.sh: installing cargo-fuzz $cargo_fuzz_version"
    # `--debug`: cargo-fuzz only drives cargo and the fuzzer, so its own speed does not matter;
    # a debug build takes a fraction of a release build's minutes (ci/deb.sh does the same).
    retry_once "cargo install cargo-fuzz $cargo_fuzz_version" \
        cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --debug
fi
seconds="${FLOE_FUZZ_SECONDS:-60}"
cd fuzz
# Every target built in one cargo run first (their compiles overlap on two cores); `fuzz run`
# below then finds them built.
cargo +nightly fuzz build
# Each target for the whole budget: FlatMap (with batches), Map (with collision lists), the
# server's parsers, damaged directories.
for target in differential any_map server_protocol damaged_dir; do
    mkdir -p "corpus/$target"
    cargo +nightly fuzz run "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 -timeout=60 "$@"
done
