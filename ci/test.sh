#!/usr/bin/env bash
# The test suite: unit, integration (differential, linearizability, concurrency, API) and doc
# tests of every crate, over every SIMD backend this CPU supports. A few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/features.sh
# floe with its test-only and optional features, in the one build of the workspace: crash
# points between the steps of every write protocol (tests/persist.rs: every 17th point here,
# all of them in ci/stress.sh), the serde implementations and their tests (floe-bench turns
# serde on for the whole workspace's build), and PersistentMap (which needs them): reopening,
# a kill harness, every third crash point, damaged and full directories, the journal's unit
# tests, and which directory each kind of map opens or makes. A crash point is inert unless
# FLOE_CRASH_AT is set, which only those tests do. (A separate `-p floe --features ...` run
# compiled floe and its test dependencies again and ran its unit tests twice: 1 min 55 s of a
# CPU-bound CI run, 2026-11-30.) The features are in ci/features.sh, for the scripts that
# build after this one.
cargo test --workspace --all-targets "${workspace_features[@]}" "$@"
cargo test --workspace --doc "${workspace_features[@]}" "$@"
# The lock-manager example checks its own invariants (money, accounts, locks) at the end.
cargo run --quiet -p floe --example lock_manager -- --threads 4 --transactions 5000
# The hash-join example checks its answers (duplicate build keys, absent probe keys) against
# a std HashMap join and exits 1 if they differ.
cargo run --quiet -p floe --example hash_join -- 100000 400000 30000 3
# The instruction counter's program (ci/instructions.sh) checks the sum of its answers: each
# operation once, on the CPU's own backend, so a wrong path fails here and not in a count.
for op in get get-many insert-new-each fetch-add-each fetch-add insert map-get cache-get cache-insert flat-cache-get flat-cache-insert; do
    cargo run --quiet -p floe --example op_instructions -- "$op" 20000 1 auto >/dev/null
done
# ...and refuses bad arguments with exit code 2 (an unknown operation or backend, a key count
# that is not one, a second pass of fresh inserts).
for bad in "nope 10 1" "get x 1" "get 0 1" "get 10 1 avx9" "insert-new-each 10 2"; do
    status=0
    # shellcheck disable=SC2086 # the arguments are meant to split
    cargo run --quiet -p floe --example op_instructions -- $bad >/dev/null 2>&1 || status=$?
    [ "$status" -eq 2 ] || { echo "op_instructions $bad: exit $status, not 2" >&2; exit 1; }
done
