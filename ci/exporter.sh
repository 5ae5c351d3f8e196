#!/usr/bin/env bash
# Builds Prometheus's memcached exporter at the release ci/exporter/go.mod pins, with the
# module hashes ci/exporter/go.sum records (the Go module proxy serves the modules; its
# checksum database is not reachable here, so the committed go.sum is what verifies them:
# GOSUMDB=off, -mod=readonly), into target/tools/, and prints the binary's path. Needs Go 1.21
# or newer (the machine image's /usr/local/go; Debian 12's golang-go is 1.19).
# Run by ci/server.sh; by hand: `bash ci/exporter.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/retry.sh

PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null; then
    echo "exporter.sh: no Go toolchain (needs 1.21 or newer, as /usr/local/go)" >&2
    exit 1
fi
binary="$PWD/target/tools/memcached_exporter"
if [ ! -x "$binary" ] || [ "$binary" -ot ci/exporter/go.sum ]; then
    echo "exporter.sh: building the memcached exporter ($(go version))" >&2
    mkdir -p target/tools
    (cd ci/exporter && retry_once "go build memcached_exporter" \
        env GOSUMDB=off GOFLAGS=-mod=readonly \
        go build -o "$binary" github.com/prometheus/memcached_exporter/cmd/memcached_exporter) >&2
fi
echo "$binary"
