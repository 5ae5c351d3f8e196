"""Prometheus's memcached exporter against floe-server, beside memcached itself.

Both servers get the same commands; one exporter scrapes each. floe-server must read as up
(`memcached_up 1`), the exporter must log no error, every metric family the exporter gives
for memcached must be there for floe-server but those of the settings floe-server documents
as left out (memcached's segmented-LRU tuning: `stats.rs`, and tools.py's list), and the
series that follow from the commands alone (commands by status, items, bytes read) must be
equal.

Usage: python3 exporter.py EXPORTER (the exporter's binary; ci/server.sh builds it from
ci/exporter). Exits non-zero with the differences if any.
"""

import contextlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness import Connection, free_port, server, wait_listening

# The exporter's families for fields floe-server leaves out (tools.py lists them; stats.rs
# says why): the `stats settings` of memcached's segmented LRU (hot_lru_pct, warm_lru_pct,
# hot_max_factor, warm_max_factor) and the `stats items` hits by segment (hits_to_hot, _warm,
# _cold, _temp): S3-FIFO has no such segments, and a get does not learn which queue its item
# is in.
LEFT_OUT = {
    "memcached_lru_crawler_hot_percent",
    "memcached_lru_crawler_warm_percent",
    "memcached_lru_crawler_hot_max_factor",
    "memcached_lru_crawler_warm_max_factor",
    "memcached_slab_lru_hits_total",
}

# Series whose values follow from the commands alone: equal on both servers.
SAME_SERIES = re.compile(
    r'^memcached_(commands_total\{command="[a-z]+",status="[a-z]+"\}'
    r"|current_items|items_total|read_bytes_total)$"
)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


@contextlib.contextmanager
def exporter(binary, memcached_port):
    """An exporter scraping the server on `memcached_port`: yields its metrics URL and a
    function giving its log so far."""
    port = free_port()
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [binary, f"--memcached.address=127.0.0.1:{memcached_port}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_listening(port, process)

        def logged():
            log.seek(0)
            return log.read().decode(errors="replace")

        yield f"http://127.0.0.1:{port}/metrics", logged
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def scrape(url):
    """The exporter's `memcached_*` series: {series (name and labels): value}."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    series = {}
    for line in text.splitlines():
        if line.startswith("memcached_"):
            name, value = line.rsplit(" ", 1)
            series[name] = float(value)
    return series


def family(series_name):
    return series_name.split("{", 1)[0]


def commands(conn):
    """Items of several sizes, some read, some missed, a few of each other command."""
    for i in range(200):
        value = b"v%d-" % i * (1 + i % 29)
        conn.request(b"set key:%d %d 0 %d\r\n%s\r\n" % (i, i, len(value), value))
    for i in range(0, 260, 3):
        conn.request(b"get key:%d\r\n" % i)
    conn.request(b"gets key:1 key:2 nothing\r\n")
    conn.request(b"set n 0 0 1\r\n5\r\nincr n 2\r\ndecr n 1\r\nincr missing 1\r\n")
    conn.request(b"touch key:3 100\r\ntouch missing 100\r\n")
    conn.request(b"cas key:4 0 0 1 1\r\nx\r\ncas missing 0 0 1 1\r\ny\r\n")
    conn.request(b"delete key:5\r\ndelete missing\r\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: exporter.py EXPORTER")
    binary = sys.argv[1]
    scraped = {}
    for kind in ("memcached", "floe"):
        with server(kind) as port:
            conn = Connection(port)
            commands(conn)
            conn.close()
            with exporter(binary, port) as (url, logged):
                # The exporter reads the server afresh at each scrape; the second shows that
                # a scrape leaves the server as it found it.
                first = scrape(url)
                time.sleep(0.2)
                scraped[kind] = scrape(url)
                check(scraped[kind].get("memcached_up") == 1.0,
                      f"{kind}: memcached_up is {scraped[kind].get('memcached_up')}")
                check(first.get("memcached_current_items") == scraped[kind].get("memcached_current_items"),
                      f"{kind}: current_items moved between two scrapes")
                errors = [line for line in logged().splitlines() if "level=error" in line]
                check(not errors, f"{kind}: the exporter logged errors: {errors[:3]}")
    memcached, floe = scraped["memcached"], scraped["floe"]
    missing = {family(s) for s in memcached} - {family(s) for s in floe} - LEFT_OUT
    check(not missing, f"families the exporter gives for memcached but not floe-server: {sorted(missing)}")
    compared = 0
    for name, value in memcached.items():
        if SAME_SERIES.match(name):
            compared += 1
            check(floe.get(name) == value, f"{name}: memcached {value}, floe-server {floe.get(name)}")
    check(compared >= 10, f"only {compared} series compared")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"exporter.py: {len({family(s) for s in floe})} metric families read from floe-server, "
          f"{compared} series equal to memcached's")


if __name__ == "__main__":
    main()
