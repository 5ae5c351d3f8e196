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
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    retry_once "cargo install cargo-fuzz" cargo install cargo-fuzz --locked
fi
seconds="${FLOE_FUZZ_SECONDS:-60}"
cd fuzz
# Each target for the whole budget: FlatMap (with batches), Map (with collision lists), the
# server's parsers, damaged directories.
for target in differential any_map server_protocol damaged_dir; do
    mkdir -p "corpus/$target"
    cargo +nightly fuzz run "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 -timeout=60 "$@"
done
