#!/usr/bin/env bash
# Miri on the library's unit tests (scalar backend: the SIMD backends are inline assembly,
# which Miri does not run). Installs nightly Miri through rustup when it is missing: a green CI
# must mean Miri ran.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/retry.sh
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri.sh: installing nightly Miri (rustup)"
    retry_once "rustup toolchain install nightly (miri)" \
        rustup toolchain install nightly --profile minimal --component miri
fi
retry_once "cargo miri setup" cargo +nightly miri setup
# FLOE_MIRI_SETUP_ONLY=1: install and set up, run nothing (`.ci/run` does this first, then runs
# the tests in the background, so no other script installs nightly at the same time).
if [ "${FLOE_MIRI_SETUP_ONLY:-0}" = 1 ]; then
    exit 0
fi
# With serde: the journal's tests need it (one build of the library, not two).
cargo +nightly miri test -p floe --features serde --lib "$@"
# floe-kmer's compact table: its slots are a zeroed allocation shared by the counting threads.
cargo +nightly miri test -p floe-kmer --lib count::compact "$@"
# floe-server's items (one allocation, a dynamically sized type reached through a thin word)
# and its index (items retired through `seize` while readers hold them).
cargo +nightly miri test -p floe-server --lib "$@" -- cache::index cache::tests::an_item_holds \
    cache::tests::a_small_item
