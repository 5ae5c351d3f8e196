#!/usr/bin/env bash
# Formatting, clippy with warnings as errors, and docs without broken links.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/features.sh
cargo fmt --all -- --check
# The workspace as ci/test.sh builds it (floe with serde, which floe-bench turns on, and its
# crash points), then floe alone with no optional feature (what a user's build compiles).
cargo clippy --workspace --all-targets "${workspace_features[@]}" -- -D warnings
cargo clippy -p floe --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# The library packages as crates.io would take it (metadata, license, README; not built
# again here: the tests build it).
cargo package -p floe --no-verify --quiet --allow-dirty
