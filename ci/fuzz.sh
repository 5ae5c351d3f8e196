#!/usr/bin/env bash
# Differential fuzzing of FlatMap against std's HashMap (fuzz/fuzz_targets/differential.rs):
# a bounded run from the corpus in the repository. Installs nightly and cargo-fuzz when
# missing. FLOE_FUZZ_SECONDS (default 60) bounds the run; new corpus entries it finds are kept
# in fuzz/corpus/differential (commit the ones worth keeping, after `cargo fuzz cmin`).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing nightly (rustup)"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
seconds="${FLOE_FUZZ_SECONDS:-60}"
mkdir -p fuzz/corpus/differential
cd fuzz
cargo +nightly fuzz run differential corpus/differential -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 "$@"
