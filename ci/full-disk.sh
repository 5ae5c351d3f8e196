#!/usr/bin/env bash
# A full device on a persistent map's growth, on a real file system: a 24 MiB tmpfs mounted
# for the test (needs root; skipped otherwise). tests/persist.rs's `full_disk_on_growth`
# covers the same path without root (RLIMIT_FSIZE); this one shows a full device is an error,
# not a SIGBUS.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "full-disk: not root, skipped (mounting a tmpfs needs root)"
    exit 0
fi
cargo test -p floe --test persist --no-run "$@"
dir=$(mktemp -d)
mount -t tmpfs -o size=24m floe-full-disk "$dir"
trap 'umount "$dir"; rmdir "$dir"' EXIT
FLOE_FULL_DISK_DIR="$dir" cargo test -p floe --test persist "$@" -- \
    --ignored --exact full_device_on_growth --nocapture
