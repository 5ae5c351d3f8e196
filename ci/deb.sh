#!/usr/bin/env bash
# floe-server as a Debian package: builds it with cargo-deb (installed, pinned, when missing),
# checks what it holds, installs it with dpkg, verifies its systemd unit (systemd-analyze;
# the CI machine runs no systemd to start it under), then starts the installed binary from
# the installed /etc/floe-server.conf as the unit would (in the foreground, on a free port on
# 127.0.0.1), talks to it, stops it with SIGTERM, does the same from Debian's stock
# /etc/memcached.conf, and purges the package.
# Run by .ci/run; by hand: `bash ci/deb.sh` (as root or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/apt.sh

cargo_deb_version=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q "$cargo_deb_version"; then
    echo "deb.sh: installing cargo-deb $cargo_deb_version"
    # `--debug`: a tool that packs one small binary needs no optimiser; built in 34 s against
    # 3 min 46 s for a release build (Intel, 2026-11-30), and the .deb packs in about a second.
    retry_once "cargo install cargo-deb $cargo_deb_version" \
        cargo install cargo-deb --version "$cargo_deb_version" --locked --debug
fi
command -v systemd-analyze >/dev/null || apt_install systemd
# Debian's stock memcached.conf, which the installed floe-server must take as it is.
[ -e /etc/memcached.conf ] || apt_install memcached
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo

cargo build --release -p floe-server
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
# The manual page, generated from the flags' definitions.
"$target/release/floe-server" --man | gzip -9n > "$target/release/floe-server.1.gz"
rm -rf "$target/debian"
cargo deb -p floe-server --no-build --strip
deb="$(ls "$target"/debian/floe-server_*.deb)"

echo "== contents of $(basename "$deb")"
contents="$(dpkg-deb -c "$deb")"
for path in ./usr/bin/floe-server ./usr/share/man/man1/floe-server.1.gz ./etc/floe-server.conf \
    ./lib/systemd/system/floe-server.service; do
    grep -q " $path\$" <<<"$contents" || { echo "deb.sh: $path is not in the package"; exit 1; }
done
[ "$(dpkg-deb -I "$deb" conffiles)" = "/etc/floe-server.conf" ] || { echo "deb.sh: the config is not a conffile"; exit 1; }

echo "== install"
$sudo dpkg -i "$deb"
trap '$sudo dpkg --purge floe-server >/dev/null 2>&1 || true' EXIT
/usr/bin/floe-server --version
man -l /usr/share/man/man1/floe-server.1.gz 2>/dev/null | grep -q -- "--memory-limit" \
    || zcat /usr/share/man/man1/floe-server.1.gz | grep -q 'memory\\-limit' \
    || { echo "deb.sh: the manual page lacks the flags"; exit 1; }
echo "== systemd-analyze verify"
systemd-analyze verify /lib/systemd/system/floe-server.service

echo "== start from /etc/floe-server.conf (the unit's command line; -P and -p overridden)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
pidfile="$(mktemp -u)"
/usr/bin/floe-server --config /etc/floe-server.conf -p "$port" -P "$pidfile" -v &
server=$!
trap 'kill $server 2>/dev/null || true; $sudo dpkg --purge floe-server >/dev/null 2>&1 || true' EXIT
python3 crates/floe-server/tests/python/harness.py --wait "$port"
python3 - "$port" <<'PY'
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as s:
    s.sendall(b"set deb 0 0 2\r\nok\r\nget deb\r\nstats settings\r\n")
    reply = b""
    while not reply.endswith(b"END\r\n") or reply.count(b"END\r\n") < 2:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit(f"closed: {reply!r}")
        reply += chunk
assert reply.startswith(b"STORED\r\nVALUE deb 0 2\r\nok\r\nEND\r\n"), reply[:80]
assert b"STAT maxbytes 67108864\r\n" in reply, "the config's -m 64"
print("deb.sh: the installed floe-server serves with the installed config")
PY
[ "$(cat "$pidfile")" = "$server" ] || { echo "deb.sh: the pid file does not name the server"; exit 1; }
kill -TERM "$server"
wait "$server"
[ ! -e "$pidfile" ] || { echo "deb.sh: the pid file was left after a clean stop"; exit 1; }

echo "== start from Debian's stock /etc/memcached.conf"
/usr/bin/floe-server --config /etc/memcached.conf -p "$port" -P "$pidfile" &
server=$!
python3 crates/floe-server/tests/python/harness.py --wait "$port"
python3 - "$port" <<'PY'
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as s:
    s.sendall(b"version\r\n")
    assert s.recv(100).startswith(b"VERSION "), "no version"
print("deb.sh: floe-server serves with /etc/memcached.conf")
PY
kill -TERM "$server"
wait "$server"
$sudo dpkg --purge floe-server
trap - EXIT
echo "deb.sh: the package builds, installs, serves and removes cleanly"
