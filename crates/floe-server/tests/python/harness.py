"""Start and stop floe-server and memcached on loopback for the client tests.

Every server listens on 127.0.0.1 on a free port and is killed when its context ends;
nothing here waits without a timeout.
"""

import contextlib
import os
import socket
import subprocess
import time

FLOE_SERVER = os.environ.get("FLOE_SERVER", "target/release/floe-server")
# The reference memcached (Debian's by default; MEMCACHED names another build).
MEMCACHED = os.environ.get("MEMCACHED", "memcached")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, process, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listening on {port} after {seconds} s")


@contextlib.contextmanager
def server(kind="floe", threads=2, memory_mb=64, extra=()):
    """A running server: yields its port."""
    port = free_port()
    binary = FLOE_SERVER if kind == "floe" else MEMCACHED
    args = [binary, "-p", str(port), "-l", "127.0.0.1", "-t", str(threads), "-m", str(memory_mb), "-U", "0", *extra]
    if kind == "memcached" and os.geteuid() == 0:
        args += ["-u", "root"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(port, process)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if kind == "floe" and process.returncode not in (0, -15):
            raise RuntimeError(f"floe-server exited with {process.returncode}: {process.stderr.read().decode()}")


class Connection:
    """A raw text-protocol connection that reads replies up to a sentinel `mn`."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""

    def request(self, command):
        """Send `command` and `mn`; return everything before the `MN` line."""
        self.sock.sendall(command + b"mn\r\n")
        while True:
            end = self._find_mn()
            if end is not None:
                reply, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
                return reply
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError(f"connection closed; got {self.buffer!r}")
            self.buffer += chunk

    def _find_mn(self):
        # The sentinel is a whole line; values in these tests never contain it.
        if self.buffer.startswith(b"MN\r\n"):
            return 0
        at = self.buffer.find(b"\r\nMN\r\n")
        return None if at < 0 else at + 2

    def close(self):
        self.sock.close()


if __name__ == "__main__":
    # `python3 harness.py --wait PORT`: wait (10 s at most) for a server started by a script.
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--wait":
        port = int(sys.argv[2])
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit(f"nothing listening on {port}")
                time.sleep(0.02)
