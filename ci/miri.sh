#!/usr/bin/env bash
# Miri on the library's unit tests (scalar backend: the SIMD backends are inline assembly,
# which Miri does not run). Skips with a message when nightly Miri is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri.sh: nightly Miri is not installed; skipping (rustup +nightly component add miri)"
    exit 0
fi
cargo +nightly miri setup >/dev/null 2>&1 || true
cargo +nightly miri test -p floe --lib "$@"
