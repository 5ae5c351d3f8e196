#!/usr/bin/env bash
# loom models of the bin protocols (tests/loom.rs), exhaustive up to the preemption bound.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debug assertions stay on: some models rely on the engine's own invariant checks.
export RUSTFLAGS="--cfg floe_loom -C debug-assertions=on ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
# Optimised, but without the release profile's fat LTO and single codegen unit: the models
# need speed, not the last percent of it, and three fat-LTO links (the model test, the unit
# tests, floe-kmer's) were the longest single-threaded builds of a CI run (2 min 24 s of
# build before the first model ran, Intel, 2026-11-30), with the whole run CPU-bound.
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
# A separate target dir so the loom build does not invalidate the normal one.
cargo test --release -p floe --test loom --target-dir target/loom "$@"
# The reader-announcement protocol (src/reclaim.rs) has its model among the unit tests (run
# when no filter was given: cargo takes one test filter per command).
if [ "$#" -eq 0 ]; then
    cargo test --release -p floe --lib --target-dir target/loom reclaim::model
    # The delegation section queue (src/delegate/queue.rs).
    cargo test --release -p floe --lib --target-dir target/loom delegate::queue::model
    # The dense layout's headerless get against every write (src/raw/dense/mod.rs).
    cargo test --release -p floe --lib --target-dir target/loom raw::dense::model
    # The default layout's crowd read before a growth (src/raw/bins/mod.rs, `keys_of_bin`).
    cargo test --release -p floe --lib --target-dir target/loom raw::bins::model
    # floe-kmer's compact counting table: slots claimed by CAS, growth under the write lock
    # (crates/floe-kmer/src/count/compact.rs).
    cargo test --release -p floe-kmer --lib --target-dir target/loom count::compact::model
fi
