#!/usr/bin/env bash
# Miri on the library's unit tests (scalar backend: the SIMD backends are inline assembly,
# which Miri does not run). Installs nightly Miri through rustup when it is missing: a green CI
# must mean Miri ran.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri.sh: installing nightly Miri (rustup)"
    rustup toolchain install nightly --profile minimal --component miri
fi
cargo +nightly miri setup
cargo +nightly miri test -p floe --lib "$@"
cargo +nightly miri test -p floe --features serde --lib journal:: "$@"
