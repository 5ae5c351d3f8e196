#!/usr/bin/env bash
# The hash join (issue 46) side by side with DuckDB: floe-bench join (floe batched and one at
# a time, a radix-partitioned hashbrown join) and DuckDB on the same relations, alternately,
# ROUNDS rounds; prints the medians and floe-batched's ratio to DuckDB per join. DuckDB (and
# numpy) come from PyPI into a virtual environment of their own (installed when missing).
#
# Usage: bash ci/join.sh [floe-bench join flags...]   e.g. --build 2^25 (workload A's |R|)
# Environment: ROUNDS (3), THREADS (all cores), OUT (results/join: raw outputs and
# summary.txt), JOIN_VENV (target/join-venv), FLOE_BENCH (a floe-bench binary; default: built
# here in release). The relations are written once to $OUT/tables (16 bytes a tuple: at
# --build 2^25 that is 9 GiB; removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/retry.sh
rounds="${ROUNDS:-3}"
threads="${THREADS:-$(nproc)}"
out="${OUT:-results/join}"
venv="${JOIN_VENV:-target/join-venv}"
mkdir -p "$out"
if ! "$venv/bin/python" -c 'import duckdb, numpy' 2>/dev/null; then
    echo "join.sh: installing duckdb and numpy into $venv (PyPI)"
    python3 -m venv "$venv"
    retry_once "pip install duckdb numpy" "$venv/bin/pip" install --quiet duckdb numpy
fi
bench="${FLOE_BENCH:-}"
if [ -z "$bench" ]; then
    cargo build --release -q -p floe-bench
    bench=target/release/floe-bench
fi
tables="$out/tables"
trap 'rm -rf "$tables"' EXIT
: >"$out/runs.txt"
for round in $(seq 1 "$rounds"); do
    dump=()
    if [ "$round" = 1 ]; then dump=(--dump "$tables"); fi
    "$bench" join --threads "$threads" --repeat 1 "${dump[@]}" "$@" | tee "$out/floe-$round.txt"
    # Engine rows: engine join part build probe total Mtuples/s ...
    awk -v r="$round" '$1 ~ /^(floe|floe-batched|hashbrown)$/ && NF >= 7 {print r, $1, $2, $7}' \
        "$out/floe-$round.txt" >>"$out/runs.txt"
    "$venv/bin/python" crates/floe-bench/scripts/join_duckdb.py "$tables" "$threads" 1 \
        | tee "$out/duckdb-$round.txt" | awk -v r="$round" '{print r, $1, $2, $4}' >>"$out/runs.txt"
done
{
    echo "medians over $rounds rounds, Mtuples/s ((|R| + |S|) / time), $threads threads"
    awk '{v[$2" "$3] = v[$2" "$3] " " $4} END {for (k in v) print k, v[k]}' "$out/runs.txt" |
        sort | while read -r engine join values; do
            median="$(echo "$values" | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
            echo "$engine $join $median"
        done | tee "$out/medians.txt"
    for join in inner semi anti; do
        f="$(awk -v j="$join" '$1 == "floe-batched" && $2 == j {print $3}' "$out/medians.txt")"
        d="$(awk -v j="$join" '$1 == "duckdb" && $2 == j {print $3}' "$out/medians.txt")"
        if [ -n "$f" ] && [ -n "$d" ]; then
            echo "$join: floe-batched $f, DuckDB $d: floe/DuckDB $(awk -v a="$f" -v b="$d" 'BEGIN {printf "%.2f", a / b}')x"
        fi
    done
} | tee "$out/summary.txt"
