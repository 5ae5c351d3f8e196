#!/usr/bin/env bash
# Long stress runs, optimised with debug assertions on:
# - the ignored linearizability tests with many rounds (FLOE_STRESS_ROUNDS per configuration,
#   default 20000, ~10 s each);
# - the ledger tests (tests/ledger.rs) for FLOE_LEDGER_SECONDS per configuration (default 30:
#   about 2x10^8 operations, enough to catch the one-in-10^8 slot races they were written for);
# - delegation (tests/delegate.rs) with 10 x FLOE_STRESS_ROUNDS operations per handle;
# - persistence (tests/persist.rs): every crash point, FLOE_KILL_ROUNDS kills (default 400)
#   and FLOE_POWER_GROWTH_ROUNDS power losses during growths (default 150, each with a second
#   power loss during the recovery);
#   the journaled any-key map (tests/persistent_map.rs): every crash point,
#   FLOE_PMAP_KILL_ROUNDS kills (default 300) and FLOE_PMAP_POWER_ROUNDS simulated power
#   losses (default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_STRESS_ROUNDS="${FLOE_STRESS_ROUNDS:-20000}"
export FLOE_LEDGER_SECONDS="${FLOE_LEDGER_SECONDS:-30}"
# Every binary built once, in one cargo run, with the features the persistence tests need:
# five builds under three feature sets took 111 s of a CPU-bound CI run (2026-11-30). The
# crash points are inert in the others: one fires only at the FLOE_CRASH_AT-th point reached,
# and only the persistence tests set it (the points count only in file-backed tables).
stress_test() {
    cargo test --profile stress -p floe --features serde,crash-points "$@"
}
stress_test --no-run --test stress --test ledger --test delegate --test persist --test persistent_map
stress_test --test stress -- --include-ignored "$@"
stress_test --test ledger "$@"
# Delegation: more handles than cores on partitions that grow, shrink and reserve under them.
stress_test --test delegate -- --include-ignored "$@"
# Persistence: every crash point of the crash script, and a long kill harness.
FLOE_CRASH_STRIDE="${FLOE_CRASH_STRIDE:-1}" FLOE_KILL_ROUNDS="${FLOE_KILL_ROUNDS:-400}" \
    FLOE_POWER_GROWTH_ROUNDS="${FLOE_POWER_GROWTH_ROUNDS:-150}" stress_test --test persist "$@"
FLOE_CRASH_STRIDE="${FLOE_CRASH_STRIDE:-1}" FLOE_PMAP_KILL_ROUNDS="${FLOE_PMAP_KILL_ROUNDS:-300}" \
    FLOE_PMAP_POWER_ROUNDS="${FLOE_PMAP_POWER_ROUNDS:-100}" stress_test --test persistent_map "$@"
