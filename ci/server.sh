#!/usr/bin/env bash
# floe-server against real clients and a real memcached, all on 127.0.0.1: pymemcache's own
# integration tests (shipped in its wheel), libmemcached's memccapable (text and binary
# protocols), a differential test against Debian's memcached 1.6 (random command streams,
# every reply compared), and scale-out behind pymemcache's HashClient, twemproxy
# (nutcracker) and libmemcached's ketama (pylibmc); warm restarts (-e) through pymemcache
# beside memcached's own, and floe-server SIGKILLed at random instants, with writers on keys of
# their own (FLOE_SERVER_KILL_ROUNDS, default 40) and racing on shared keys
# (FLOE_SERVER_SHARED_KILL_ROUNDS, default 60); memcached-tool and the stats groups beside
# memcached's; Prometheus's memcached exporter reading both (ci/exporter.sh builds it with
# Go). Installs what it needs (Debian: memcached,
# libmemcached-tools, nutcracker, libmemcached-dev to build pylibmc; PyPI: pymemcache, pytest,
# pylibmc). FLOE_DIFF_SEEDS (default 4) sets the differential runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/apt.sh

missing=()
command -v memcached >/dev/null || missing+=(memcached)
command -v memccapable >/dev/null || missing+=(libmemcached-tools)
command -v nutcracker >/dev/null || missing+=(nutcracker)
[ -e /usr/include/libmemcached/memcached.h ] || missing+=(libmemcached-dev zlib1g-dev)
if ((${#missing[@]})); then
    echo "server.sh: installing ${missing[*]} (apt)"
    apt_install "${missing[@]}"
fi
if ! python3 -c "import pymemcache, pytest, pylibmc" 2>/dev/null; then
    echo "server.sh: installing pymemcache, pytest and pylibmc (pip)"
    retry_once "pip install pymemcache pytest pylibmc" \
        python3 -m pip install -q pymemcache pytest pylibmc
fi

cargo build --release -p floe-server
export FLOE_SERVER="$PWD/target/release/floe-server"
tests=crates/floe-server/tests/python

echo "== pymemcache's integration tests against floe-server"
pymemcache_tests="$(python3 -c 'import os, pymemcache; print(os.path.dirname(pymemcache.__file__))')/test/test_integration.py"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$FLOE_SERVER" -p "$port" -l 127.0.0.1 -t 2 -m 64 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
python3 "$tests/harness.py" --wait "$port"
timeout 300 python3 -m pytest -q -p no:cacheprovider "$pymemcache_tests" --server 127.0.0.1 --port "$port" -W ignore::pytest.PytestUnknownMarkWarning

echo "== memccapable (libmemcached) against floe-server"
timeout 120 memccapable -h 127.0.0.1 -p "$port" -t 5
kill "$server"
wait "$server" || true
trap - EXIT

echo "== memcached's tools (memcached-tool display/dump/keys/stats/settings), stats fields, stats detail and lru_crawler against memcached"
(cd "$tests" && timeout 300 python3 tools.py)

echo "== Prometheus's memcached exporter (ci/exporter.sh builds a pinned release) against floe-server and memcached"
exporter="$(bash ci/exporter.sh)"
(cd "$tests" && timeout 120 python3 exporter.py "$exporter")

echo "== differential test against memcached"
(cd "$tests" && timeout 900 python3 differential.py --seeds "${FLOE_DIFF_SEEDS:-4}" --commands 4000)

echo "== scale-out: HashClient, nutcracker and libmemcached ketama over three floe-servers"
(cd "$tests" && timeout 300 python3 scale_out.py)

echo "== warm restarts (-e) through pymemcache: floe-server (SIGTERM, SIGKILL) and memcached (SIGUSR1)"
(cd "$tests" && timeout 300 python3 warm_restart.py)

echo "== floe-server -e killed at random instants (every acknowledged write must come back; keys raced on restore to a linearizable state)"
FLOE_SERVER_KILL_ROUNDS="${FLOE_SERVER_KILL_ROUNDS:-40}" \
    FLOE_SERVER_SHARED_KILL_ROUNDS="${FLOE_SERVER_SHARED_KILL_ROUNDS:-60}" timeout 900 \
    cargo test -p floe-server --test persist sigkill -- --nocapture
