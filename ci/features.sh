# shellcheck shell=bash
# The features of the workspace's one debug build (ci/test.sh's). A script that builds or
# tests after it passes the same with `--workspace`, so cargo reuses that build's artifacts:
# `-p some-crate`, or other features, resolve floe's features anew and compile floe and every
# crate above it again (1 min 51 s of a CPU-bound CI run in ci/capi.sh, 2026-11-30).
# `crash-points` are inert unless FLOE_CRASH_AT is set (crates/floe/src/sync.rs).
workspace_features=(--features floe/crash-points)
