"""Memory of idle connections: N clients each store and read one 1 MB value, then idle; the
server's resident memory is printed. A measurement, not a test (BENCHMARKS.md, floe-server):

    python3 idle_memory.py BINARY [--clients 400] [--port 22200]

BINARY is floe-server or memcached (run with -m 64 -t 2 on 127.0.0.1).
"""

import argparse
import socket
import subprocess
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--clients", type=int, default=400)
    parser.add_argument("--port", type=int, default=22200)
    args = parser.parse_args()
    command = [args.binary, "-p", str(args.port), "-l", "127.0.0.1", "-m", "64", "-t", "2"]
    if "memcached" in args.binary:
        command += ["-u", "root", "-U", "0"]
    server = subprocess.Popen(command)
    try:
        time.sleep(0.5)
        value = b"x" * 1_000_000
        clients = []
        for i in range(args.clients):
            client = socket.create_connection(("127.0.0.1", args.port), timeout=10)
            key = b"k%d" % (i % 40)
            client.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
            if not client.recv(100).startswith(b"STORED"):
                raise SystemExit("client %d: set refused" % i)
            client.sendall(b"get %s\r\n" % key)
            reply = b""
            while not reply.endswith(b"END\r\n"):
                chunk = client.recv(1 << 20)
                if not chunk:
                    raise SystemExit("client %d: connection closed" % i)
                reply += chunk
            clients.append(client)
        # floe-server gives back an idle connection's buffers after one to two seconds.
        time.sleep(3)
        with open("/proc/%d/status" % server.pid) as status:
            rss_kb = int(next(l for l in status if l.startswith("VmRSS")).split()[1])
        print("%s: %d idle clients after a 1 MB set and get: RSS %.1f MiB"
              % (args.binary, args.clients, rss_kb / 1024))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
