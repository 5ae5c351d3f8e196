#!/usr/bin/env bash
# The hash join (issue 46) side by side with DuckDB: floe-bench join (floe batched and one at
# a time, a radix-partitioned hashbrown join) and DuckDB on the same relations, alternately,
# ROUNDS rounds; prints the medians and floe-batched's ratio to DuckDB per join. DuckDB (and
# numpy) come from PyPI into a virtual environment of their own (installed when missing).
#
# With ETH_DIR set, each round also runs ETH's joins (Balkesen et al., the code DRAMHiT's
# repository carries as lib/eth_hashjoin: mars-research/vldb13-eth-hashjoin, a copy you fetch;
# floe does not vendor it): its radix join (PRO) and its no-partitioning join (NPO, with its
# prefetching), inner joins that count matches, on relations of the same shape it generates
# itself (R's keys are 1..|R| shuffled, S's drawn uniformly or by zipf from them; its hash is
# the key's low bits, which such dense keys make collision-free). It is built in
# target/eth-hashjoin from a copy of ETH_DIR, as workload A asks (--enable-key8B: 16-byte
# tuples; --enable-prefetch-npj), with its own radix defaults (2 passes, 18 bits) and
# -O3 -march=native; libnuma-dev is installed when missing (as root).
#
# Usage: bash ci/join.sh [floe-bench join flags...]   e.g. --build 2^25 (workload A's |R|)
# Environment: ROUNDS (3), THREADS (all cores), OUT (results/join: raw outputs and
# summary.txt), JOIN_VENV (target/join-venv), FLOE_BENCH (a floe-bench binary; default: built
# here in release), ETH_DIR (unset: no ETH joins). The relations are written once to
# $OUT/tables (16 bytes a tuple: at --build 2^25 that is 9 GiB; removed at the end); ETH's
# radix join holds its relations twice (17 GiB of memory at |R| = 2^25).
set -euo pipefail
# ETH_DIR as given, relative to where the script was started.
if [ -n "${ETH_DIR:-}" ]; then ETH_DIR="$(cd "$ETH_DIR" 2>/dev/null && pwd || echo "$ETH_DIR")"; fi
cd "$(dirname "$0")/.."
source ci/apt.sh
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
eth=""
if [ -n "${ETH_DIR:-}" ]; then
    if [ ! -f "$ETH_DIR/src/no_partitioning_join.c" ] || [ ! -x "$ETH_DIR/configure" ]; then
        echo "join.sh: ETH_DIR=$ETH_DIR is not a copy of vldb13-eth-hashjoin (no src/no_partitioning_join.c or configure)" >&2
        exit 2
    fi
    eth=target/eth-hashjoin/src/mchashjoins
    # Built again when the copy or the recipe changes.
    recipe="$ETH_DIR key8B prefetch-npj O3 native passes=2 bits=18"
    if [ ! -x "$eth" ] || [ "$(cat target/eth-hashjoin.recipe 2>/dev/null)" != "$recipe" ]; then
        if ! dpkg -s libnuma-dev >/dev/null 2>&1; then
            echo "join.sh: installing libnuma-dev (ETH's joins link it)"
            apt_install libnuma-dev >/dev/null
        fi
        echo "join.sh: building ETH's joins in target/eth-hashjoin"
        rm -rf target/eth-hashjoin
        mkdir -p target/eth-hashjoin
        cp -a "$ETH_DIR/." target/eth-hashjoin/
        (
            cd target/eth-hashjoin
            if [ -f Makefile ]; then make distclean >/dev/null 2>&1 || true; fi
            ./configure --enable-key8B --enable-prefetch-npj >configure.log 2>&1 ||
                { tail -20 configure.log; exit 1; }
            # main.c prints NUM_PASSES and NUM_RADIX_BITS without including prj_params.h: name
            # its defaults here; libnuma goes after the objects that use it.
            make -j"$(nproc)" CFLAGS="-O3 -march=native -DNUM_PASSES=2 -DNUM_RADIX_BITS=18" \
                LIBS="-lpthread -lm -lnuma" >make.log 2>&1 || { tail -20 make.log; exit 1; }
        )
        echo "$recipe" >target/eth-hashjoin.recipe
    fi
fi
# ETH's inner joins on relations of floe-bench's shape (round 1's header line gives |R|, |S|
# and S's distribution): rows "round eth-pro|eth-npo inner Mtuples/s".
eth_round() {
    local round="$1" shape r s dist skew=() r_size r_distinct s_size absent
    shape="$(grep -m1 '^join: ' "$out/floe-1.txt" || true)"
    if [ -z "$shape" ]; then
        echo "join.sh: ETH's joins skipped: no 'join:' line in $out/floe-1.txt" >&2
        return
    fi
    r="$(echo "$shape" | sed -n 's/.*|R| = \([0-9]*\) (\([0-9]*\) distinct.*/\1 \2/p')"
    s="$(echo "$shape" | sed -n 's/.*|S| = \([0-9]*\) (\([^,]*\), \([0-9.]*\)% absent.*/\1 \2 \3/p')"
    read -r r_size r_distinct <<<"$r"
    read -r s_size dist absent <<<"$s"
    if [ "$r_size" != "$r_distinct" ] || [ "$absent" != "0.0" ]; then
        echo "join.sh: ETH's joins skipped: they take unique build keys and no absent probe keys" >&2
        return
    fi
    case "$dist" in
    uniform) ;;
    zipf:*) skew=(--skew="${dist#zipf:}") ;;
    *)
        echo "join.sh: ETH's joins skipped: S drawn by $dist (ETH draws uniformly or by zipf)" >&2
        return
        ;;
    esac
    for algo in PRO NPO; do
        local log="$out/eth-$algo-$round.txt"
        # A failure (ETH's radix join holds 17 GiB at |R| = 2^25) is reported by the check below.
        (cd "$(dirname "$eth")" && ./mchashjoins -a "$algo" -n "$threads" -r "$r_size" \
            -s "$s_size" "${skew[@]}") >"$log" 2>&1 || true
        local matches usecs
        matches="$(sed -n 's/.*Results = \([0-9]*\)\..*/\1/p' "$log")"
        # The line after the header that names TOTAL-TIME-USECS: PRO prints comma-separated
        # figures (the sixth), NPO whitespace-separated ones (the first).
        usecs="$(awk 'found { if (index($0, ",")) { split($0, f, ", *"); print f[6] } else print $1; exit }
            /TOTAL-TIME-USECS/ { found = 1 }' "$log")"
        if [ "$matches" != "$s_size" ] || [ -z "$usecs" ]; then
            echo "join.sh: ETH's $algo gave $matches matches (expected $s_size) or no time; see $log" >&2
            exit 1
        fi
        awk -v round="$round" -v algo="$(echo "$algo" | tr 'A-Z' 'a-z')" -v n="$((r_size + s_size))" \
            -v us="$usecs" 'BEGIN { printf "%s eth-%s inner %.1f\n", round, algo, n / us }' |
            tee -a "$out/runs.txt"
    done
}
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
    if [ -n "$eth" ]; then eth_round "$round"; fi
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
    f="$(awk '$1 == "floe-batched" && $2 == "inner" {print $3}' "$out/medians.txt")"
    for algo in pro npo; do
        e="$(awk -v a="eth-$algo" '$1 == a {print $3}' "$out/medians.txt")"
        if [ -n "$f" ] && [ -n "$e" ]; then
            echo "inner: floe-batched $f, ETH's ${algo^^} $e: floe/ETH-${algo^^} $(awk -v a="$f" -v b="$e" 'BEGIN {printf "%.2f", a / b}')x"
        fi
    done
} | tee "$out/summary.txt"
