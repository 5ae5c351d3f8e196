"""Several floe-servers behind memcached's distribution layer, unchanged.

1. pymemcache's HashClient (client-side consistent hashing) over three servers: 2,000 keys
   set, every one read back, and every server holds some (their `curr_items` add up).
2. twemproxy (`nutcracker`, ketama distribution) in front of three servers: the same
   through the proxy, then each key read back from the server ketama put it on.
3. libmemcached's own ketama (through pylibmc, libmemcached's Python binding) over three
   servers, once with the text protocol and once with the binary one: the same checks, plus
   counters and deletes, then each key read back from the one server that holds it.

    python3 scale_out.py
"""

import os
import subprocess
import sys
import tempfile
import time

from pymemcache.client.base import Client
from pymemcache.client.hash import HashClient

from harness import free_port, server, wait_listening

N = 2000


def items(port):
    return int(Client(("127.0.0.1", port), timeout=5).stats()[b"curr_items"])


def check_spread(ports, label):
    counts = [items(p) for p in ports]
    print(f"{label}: items per server {counts}")
    assert sum(counts) == N, f"{label}: {sum(counts)} items stored, {N} expected"
    # "Almost nothing" is under 4%: a proxy that does not spread gives one server nothing.
    # Fair shares would be 33% each, but nutcracker's ketama (fnv1a_64 of keys that differ in
    # their last digits, on a ring placed by the servers' random ports) gave one server 8.5%
    # in a CI run, which a 10% bound failed.
    assert all(c > N // 25 for c in counts), f"{label}: a server got (almost) nothing: {counts}"


def hash_client(ports):
    client = HashClient([("127.0.0.1", p) for p in ports], timeout=5, connect_timeout=5)
    for i in range(N):
        assert client.set(f"key:{i}", f"value:{i}"), f"set key:{i}"
    for i in range(N):
        assert client.get(f"key:{i}") == f"value:{i}".encode(), f"get key:{i}"
    many = client.get_many([f"key:{i}" for i in range(0, N, 7)])
    assert len(many) == len(range(0, N, 7)), "get_many lost keys"
    check_spread(ports, "HashClient")


def nutcracker(ports):
    listen = free_port()
    config = (
        "floe:\n"
        f"  listen: 127.0.0.1:{listen}\n"
        "  hash: fnv1a_64\n"
        "  distribution: ketama\n"
        "  timeout: 2000\n"
        "  auto_eject_hosts: false\n"
        "  redis: false\n"
        "  servers:\n" + "".join(f"   - 127.0.0.1:{p}:1\n" for p in ports)
    )
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "nutcracker.yml")
        with open(path, "w") as f:
            f.write(config)
        check = subprocess.run(["nutcracker", "-t", "-c", path], capture_output=True, timeout=30)
        assert check.returncode == 0, check.stderr.decode()
        proxy = subprocess.Popen(
            ["nutcracker", "-c", path, "-s", str(free_port()), "-p", os.path.join(directory, "pid")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_listening(listen, proxy)
            client = Client(("127.0.0.1", listen), timeout=5, connect_timeout=5)
            for i in range(N):
                assert client.set(f"key:{i}", f"value:{i}", noreply=False), f"set key:{i} via nutcracker"
            for i in range(N):
                assert client.get(f"key:{i}") == f"value:{i}".encode(), f"get key:{i} via nutcracker"
            # Multi-gets are split by the proxy over the servers and joined again.
            keys = [f"key:{i}" for i in range(0, N, 13)]
            assert client.get_many(keys) == {k: f"value:{k[4:]}".encode() for k in keys}
            check_spread(ports, "nutcracker")
            # Every key is on exactly one server, and there it reads back.
            direct = [Client(("127.0.0.1", p), timeout=5) for p in ports]
            for i in range(0, N, 17):
                holders = [c for c in direct if c.get(f"key:{i}") == f"value:{i}".encode()]
                assert len(holders) == 1, f"key:{i} on {len(holders)} servers"
        finally:
            proxy.terminate()
            proxy.wait(timeout=10)


def libmemcached_ketama(ports, binary):
    import pylibmc

    label = f"libmemcached ketama ({'binary' if binary else 'text'})"
    client = pylibmc.Client(
        [f"127.0.0.1:{p}" for p in ports],
        binary=binary,
        behaviors={"ketama": True, "ketama_weighted": False, "tcp_nodelay": True},
    )
    assert client.behaviors["ketama"], "pylibmc did not switch to ketama"
    values = {f"key:{i}": f"value:{i}".encode() for i in range(N)}
    # set_multi sends the keys of each server in one pipelined burst.
    assert client.set_multi(values) == [], f"{label}: set_multi failed for some keys"
    for i in range(0, N, 3):
        assert client.get(f"key:{i}") == values[f"key:{i}"], f"{label}: get key:{i}"
    assert client.get_multi(list(values)) == values, f"{label}: get_multi lost keys"
    check_spread(ports, label)
    assert client.set("counter", "41")
    assert client.incr("counter") == 42 and client.decr("counter", 2) == 40, f"{label}: counter"
    assert client.delete("counter") and client.get("counter") is None, f"{label}: delete"
    direct = [Client(("127.0.0.1", p), timeout=5) for p in ports]
    for i in range(0, N, 17):
        holders = [c for c in direct if c.get(f"key:{i}") == values[f"key:{i}"]]
        assert len(holders) == 1, f"{label}: key:{i} on {len(holders)} servers"
    client.disconnect_all()


def main():
    started = time.monotonic()
    with server() as a, server() as b, server() as c:
        hash_client([a, b, c])
    with server() as a, server() as b, server() as c:
        nutcracker([a, b, c])
    for binary in (False, True):
        with server() as a, server() as b, server() as c:
            libmemcached_ketama([a, b, c], binary)
    print(f"scale-out: HashClient, nutcracker and libmemcached's ketama over three floe-servers passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"scale-out FAILED: {e}", file=sys.stderr)
        sys.exit(1)
