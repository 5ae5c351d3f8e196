"""Warm restarts through a real client (pymemcache), floe-server beside memcached.

Each server is filled, stopped the way its warm restart wants (floe-server -e DIR: SIGTERM, or
SIGKILL for a crash; memcached -e FILE: SIGUSR1, its restartable shutdown) and started again
on the same state. Then every item must be back with its value, flags and CAS unique, deleted
items must stay deleted, items whose expiry passed while the server was down must be gone,
and an hour's expiry must still be about an hour. memcached is held to the same checks, so a
difference between the two shows as a failure naming the server.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from pymemcache.client.base import Client

from harness import FLOE_SERVER, MEMCACHED, free_port, wait_listening

ITEMS = 3000


def start(kind, port, state):
    if kind == "memcached":
        args = [MEMCACHED, "-p", str(port), "-l", "127.0.0.1", "-t", "2", "-m", "64", "-U", "0", "-e", state]
        if os.geteuid() == 0:
            args += ["-u", "root"]
    else:
        args = [FLOE_SERVER, "-p", str(port), "-l", "127.0.0.1", "-t", "2", "-m", "64", "-e", state]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_listening(port, process)
    return process


def stop(process, how):
    process.send_signal(how)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError("the server did not stop within 30 s")


def fill(client):
    """Store the items; returns what `gets` must answer for each after the restart."""
    expected = {}
    for i in range(ITEMS):
        key = f"item:{i}"
        value = (f"{i}:" + "v" * (i % 700)).encode()
        expire = 3600 if i % 5 == 0 else (1 if i % 7 == 0 else 0)
        assert client.set(key, value, expire=expire, noreply=False, flags=i % 65536)
    for i in range(0, ITEMS, 11):
        assert client.delete(f"item:{i}", noreply=False)
    assert client.append("item:1", b"+appended", noreply=False)
    assert client.incr("counter", 1) is None
    client.set("counter", b"41", noreply=False)
    assert client.incr("counter", 1) == 42
    for i in range(ITEMS):
        key = f"item:{i}"
        got = client.gets(key)
        if i % 11 == 0:
            assert got == (None, None), (key, got)
        elif i % 7 == 0 and i % 5 != 0:
            expected[key] = "expires"
        else:
            expected[key] = got
    expected["counter"] = client.gets("counter")
    return expected


def wait_restored(client):
    """floe-server serves while it restores (writes wait, reads miss what is not back yet):
    wait until its `persist_restoring` stat is 0. memcached restores before it listens."""
    deadline = time.monotonic() + 60
    while client.stats().get(b"persist_restoring", 0) not in (0, b"0"):
        if time.monotonic() > deadline:
            raise RuntimeError("still restoring after 60 s")
        time.sleep(0.01)


def check(kind, how, client, expected):
    for key, want in expected.items():
        got = client.gets(key)
        if want == "expires":
            assert got == (None, None), f"{kind} after {how}: {key} should have expired, got {got}"
        else:
            assert got == want, f"{kind} after {how}: {key} is {got}, was {want}"
    for i in range(0, ITEMS, 11):
        assert client.get(f"item:{i}") is None, f"{kind} after {how}: deleted item:{i} is back"
    # `mg ... t`: the remaining time to live, kept across the restart.
    ttl = int(client.raw_command(b"mg item:5 t", b"\r\n").split(b"t")[-1])
    assert 3500 <= ttl <= 3600, f"{kind} after {how}: item:5 has {ttl} s left"


def run(kind, how):
    scratch = tempfile.mkdtemp(prefix=f"warm-{kind}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    state = os.path.join(scratch, "state")
    port = free_port()
    process = start(kind, port, state)
    try:
        client = Client(("127.0.0.1", port), timeout=10)
        expected = fill(client)
        client.close()
        stop(process, how)
        # The 1-second items expire while the server is down.
        time.sleep(2.1)
        began = time.monotonic()
        process = start(kind, port, state)
        client = Client(("127.0.0.1", port), timeout=10)
        wait_restored(client)
        check(kind, how.name, client, expected)
        client.close()
        print(f"{kind} after {how.name}: {len(expected)} keys checked, listening again {time.monotonic() - began:.2f} s after the start")
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    run("floe", signal.SIGTERM)
    run("floe", signal.SIGKILL)
    run("memcached", signal.SIGUSR1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
