#!/usr/bin/env bash
# Instructions per operation of floe's maps and cache, counted exactly by valgrind's callgrind
# (these hosts have no hardware counters): the example `op_instructions` runs each operation
# over KEYS keys for P1 and then P2 passes, and the difference of the two counts over the
# operations between them is one operation's cost, set-up and exit cancelled out. Counts do
# not depend on the host's load, so two builds compare in one line each (BENCHMARKS.md cites
# these for the batched and single paths).
#
#   bash ci/instructions.sh [OP...]      # default: every operation below
#
# Environment: KEYS (65536: a table that fits the caches, so the count is the code's, not a
# miss's), BACKEND (avx2; valgrind decodes no AVX-512).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/apt.sh

keys="${KEYS:-65536}"
backend="${BACKEND:-avx2}"
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(get get-many insert-new-each fetch-add-each fetch-add insert map-get cache-get cache-insert flat-cache-get flat-cache-insert)

if ! command -v valgrind >/dev/null; then
    echo "instructions.sh: installing valgrind"
    apt_install valgrind >/dev/null
fi
cargo build --release -q -p floe --example op_instructions
bin=target/release/examples/op_instructions
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Instructions of one run (callgrind's total of `Ir`).
count() {
    valgrind --tool=callgrind --callgrind-out-file="$work/out" "$bin" "$@" >/dev/null 2>"$work/log" ||
        { cat "$work/log" >&2; echo "instructions.sh: $bin $* failed" >&2; exit 1; }
    awk '/^summary:/ { print $2 }' "$work/out"
}

printf '%-16s %12s   (%s keys, backend %s)\n' operation "instr/op" "$keys" "$backend"
for op in "${ops[@]}"; do
    # Inserts of fresh keys run once (0 passes against 1); a full cache's inserts 1 against 3
    # (the first pass fills it); the rest 1 against 11.
    case "$op" in
        insert-new-each) low=0 high=1 ;;
        cache-insert | flat-cache-insert) low=1 high=3 ;;
        *) low=1 high=11 ;;
    esac
    a="$(count "$op" "$keys" "$low" "$backend")"
    b="$(count "$op" "$keys" "$high" "$backend")"
    awk -v a="$a" -v b="$b" -v n="$keys" -v p="$((high - low))" -v op="$op" \
        'BEGIN { printf "%-16s %12.1f\n", op, (b - a) / (n * p) }'
done
