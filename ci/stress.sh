#!/usr/bin/env bash
# Long stress runs: the ignored linearizability tests with many rounds, optimised with debug
# assertions on. FLOE_STRESS_ROUNDS sets rounds per configuration (default 20000, ~10 s each).
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_STRESS_ROUNDS="${FLOE_STRESS_ROUNDS:-20000}"
cargo test --profile stress -p floe --test stress -- --include-ignored "$@"
