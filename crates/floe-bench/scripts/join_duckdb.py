"""DuckDB on floe-bench join's relations (written with `floe-bench join --dump DIR`).

Usage: join_duckdb.py DIR THREADS REPEAT [JOINS]

Loads R and S (little-endian u64 columns) into DuckDB tables (not timed), then times each
join as one SQL query returning a count and a checksum, the same answers floe-bench computes
(DIR/answers.txt; a different answer exits 1):

    inner  SELECT count(*), sum(r.p + s.p) FROM r JOIN s ON r.k = s.k
    semi   SELECT count(*), sum(s.p) FROM s SEMI JOIN r ON s.k = r.k
    anti   SELECT count(*), sum(s.p) FROM s ANTI JOIN r ON s.k = r.k

Prints one line per join: `duckdb JOIN SECONDS MTUPLES_PER_S` (median of REPEAT runs;
tuples are |R| + |S|, as floe-bench counts them).
"""

import os
import statistics
import sys
import time

import duckdb
import numpy as np

QUERIES = {
    "inner": "SELECT count(*), sum(r.p + s.p) FROM r JOIN s ON r.k = s.k",
    "semi": "SELECT count(*), sum(s.p) FROM s SEMI JOIN r ON s.k = r.k",
    "anti": "SELECT count(*), sum(s.p) FROM s ANTI JOIN r ON s.k = r.k",
}


def column(directory, name):
    return np.fromfile(os.path.join(directory, name), dtype="<u8")


def main():
    if len(sys.argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    directory, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    joins = sys.argv[4].split(",") if len(sys.argv) == 5 else list(QUERIES)
    answers = {}
    with open(os.path.join(directory, "answers.txt")) as text:
        for line in text:
            kind, rows, checksum = line.split()
            answers[kind.lower()] = (int(rows), int(checksum))
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    r_cols = {"k": column(directory, "r_keys.u64"), "p": column(directory, "r_payloads.u64")}
    s_cols = {"k": column(directory, "s_keys.u64"), "p": column(directory, "s_payloads.u64")}
    con.register("r_cols", r_cols)
    con.register("s_cols", s_cols)
    con.execute("CREATE TABLE r AS SELECT k, p FROM r_cols")
    con.execute("CREATE TABLE s AS SELECT k, p FROM s_cols")
    con.unregister("r_cols")
    con.unregister("s_cols")
    tuples = len(r_cols["k"]) + len(s_cols["k"])
    del r_cols, s_cols
    for kind in joins:
        if kind not in QUERIES:
            print(f"join_duckdb: unknown join {kind}", file=sys.stderr)
            return 2
        seconds = []
        for _ in range(repeat):
            start = time.perf_counter()
            rows, total = con.execute(QUERIES[kind]).fetchone()
            seconds.append(time.perf_counter() - start)
            got = (int(rows), int(total or 0) % (1 << 64))
            if kind in answers and got != answers[kind]:
                print(f"join_duckdb: {kind} answered {got}, floe-bench {answers[kind]}",
                      file=sys.stderr)
                return 1
        median = statistics.median(seconds)
        print(f"duckdb {kind} {median:.3f} {tuples / median / 1e6:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
