#!/usr/bin/env bash
# Formatting, clippy with warnings as errors, and docs without broken links.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p floe --all-targets --features serde -- -D warnings
cargo clippy -p floe --all-targets --features crash-points -- -D warnings
cargo clippy -p floe --all-targets --features serde,crash-points -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# The library packages as crates.io would take it (metadata, license, README; not built
# again here: the tests build it).
cargo package -p floe --no-verify --quiet --allow-dirty
