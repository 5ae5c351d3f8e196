#!/usr/bin/env bash
# floe against DRAMHiT (mars-research/DRAMHiT, its 2025 SIMD table) on DRAMHiT's own shape:
# 23.5M keys (70% of 2^25 slots), 2 threads, uniform keys, batched. The two run alternately,
# ROUNDS times, and the medians and ratios are printed.
#
#   bash ci/dramhit.sh DRAMHIT_DIR
#
# DRAMHIT_DIR is a copy of DRAMHiT you fetched with the submodules it builds with (floe does
# not vendor it): `git clone --recursive https://github.com/mars-research/DRAMHiT`, or the
# repository and, at the commits its tree names, lib/xxHash, lib/plog, lib/wyhash, lib/fnv,
# lib/cityhash and lib/eth_hashjoin (`git ls-tree HEAD lib/` lists them). The script builds it
# in DRAMHIT_DIR/build-floe (Debian packages libboost-program-options-dev libnuma-dev
# libcapstone-dev libabsl-dev zlib1g-dev cmake g++ installed when missing, as root), with the
# recipe of the authors' 2025 runs: -DDRAMHiT_VARIANT=2025_INLINE -DBUCKETIZATION=ON
# -DBRANCH=simd -DUNIFORM_PROBING=ON -DPREFETCH=DOUBLE, CPUFREQ_MHZ the TSC rate.
#
# What runs, per round:
#   DRAMHiT: --mode 11 --ht-type 3 --ht-size 33554432 --ht-fill 70 --batch-len 16
#            --find_queue_sz 64 --num-threads 2 (inserts the 23.5M keys into the empty table,
#            its `set`, then finds each, its `get`; 2 MiB pages, which it maps itself);
#   floe:    floe-bench run --workload get --api batch (get_many through the public API, the
#            default depth, each answer checked) and --api bare (the same gets, only each
#            call's hits counted, as DRAMHiT's loop counts its finds) on 23,488,102 keys,
#            in the default layout and in the dense one
#            (`--maps floe-dense`: 0.45 GB where the default takes 1.1 GB and DRAMHiT 0.5 GB,
#            which matters on hosts where a random line costs more the larger the array:
#            BENCHMARKS.md, "DRAM speed"), and --workload fill --api batch (batched inserts of
#            fresh keys into a table made for them, 23.5M of 31.3M, faulted in when built as
#            DRAMHiT's is: --populate on), 2 threads; each with the
#            machine's random-line ceiling and the minimal table's insert (`insert, L2 64`, the
#            ceiling's reference for what an insert costs with no protocol) measured in the same run.
# Environment: ROUNDS (3), THREADS (2), OUT (results/dramhit: the raw outputs, runs.txt and
# summary.txt), FLOE_BENCH (a floe-bench binary; default: built here in release).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/apt.sh

if [ $# -ne 1 ] || [ ! -f "$1/CMakeLists.txt" ]; then
    echo "usage: bash ci/dramhit.sh DRAMHIT_DIR (a copy of mars-research/DRAMHiT with its submodules)" >&2
    exit 2
fi
dramhit="$(cd "$1" && pwd)"
for sub in lib/xxHash lib/plog lib/wyhash lib/fnv lib/cityhash lib/eth_hashjoin; do
    if [ -z "$(ls -A "$dramhit/$sub" 2>/dev/null)" ]; then
        echo "dramhit.sh: $dramhit/$sub is empty: fetch the submodules (git submodule update --init $sub)" >&2
        exit 2
    fi
done
rounds="${ROUNDS:-3}"
threads="${THREADS:-2}"
out="${OUT:-results/dramhit}"
mkdir -p "$out"

# Debian packages DRAMHiT builds with.
need=()
for pkg in cmake g++ libboost-program-options-dev libnuma-dev libcapstone-dev libabsl-dev zlib1g-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "dramhit.sh: installing ${need[*]}"
    apt_install "${need[@]}" >/dev/null
fi

# The TSC rate in MHz (DRAMHiT converts its cycle counts with it).
mhz="$(awk -F: '/^cpu MHz/ { printf "%d", $2 + 0.5; exit }' /proc/cpuinfo)"
build="$dramhit/build-floe"
if [ ! -x "$build/dramhit" ]; then
    echo "dramhit.sh: building DRAMHiT in $build (CPUFREQ_MHZ=$mhz)"
    cmake -S "$dramhit" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCPUFREQ_MHZ="$mhz" \
        -DDRAMHiT_VARIANT=2025_INLINE -DBUCKETIZATION=ON -DBRANCH=simd -DUNIFORM_PROBING=ON \
        -DPREFETCH=DOUBLE >"$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
    cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
fi

# DRAMHiT maps its 512 MiB table in 2 MiB pages: reserve them.
pages="$(cat /proc/sys/vm/nr_hugepages)"
if [ "$pages" -lt 300 ]; then
    if [ -w /proc/sys/vm/nr_hugepages ]; then
        echo 700 >/proc/sys/vm/nr_hugepages
    else
        echo "dramhit.sh: DRAMHiT needs 300 huge pages (vm.nr_hugepages is $pages; run as root or raise it)" >&2
        exit 1
    fi
fi

bench="${FLOE_BENCH:-}"
if [ -z "$bench" ]; then
    cargo build --release -q -p floe-bench
    bench=target/release/floe-bench
fi

machine="$(awk -F: '/^model name/ { sub(/^ +/, "", $2); print $2; exit }' /proc/cpuinfo)"
echo "CPU: $machine, $(nproc) cores; $rounds rounds, $threads threads" | tee "$out/summary.txt"
: >"$out/runs.txt"
floe_run() {
    local workload="$1" keys="$2" map="${4:-floe}" api="${5:-batch}"
    local name="$map-$workload-$3"
    if [ "$api" != batch ]; then name="$name-$api"; fi
    local csv="$out/$name.csv"
    # --populate on: floe's table faulted in when built, as DRAMHiT writes its whole table
    # when it allocates it, so both time their inserts and not first touches of fresh pages.
    "$bench" run --workload "$workload" --api "$api" --keys "$keys" --threads "$threads" \
        --maps "$map" --repeat 1 --memory off --latency off --populate on --csv "$csv" \
        >"$out/$name.log" 2>&1
    # mops (column 7) and the matching ceiling (the last column) of the run's last row: a
    # bare run times the batch loop first and the bare one after it (two rows).
    awk -F, 'NR > 1 { row = $7 " " $NF } END { print row }' "$csv"
}
# The minimal table's insert at this thread count: the last column of the ceiling table's row.
minimal_insert() {
    awk -v t="$threads" '/^threads +read/ { table = 1; next } table && $1 == t { print $NF; exit }' "$1"
}
printf '%-6s %12s %12s %10s %12s %10s %12s %10s %14s %10s\n' round dramhit_set dramhit_get floe_get get_ceiling floe_fill fill_ceiling dense_get minimal_insert bare_get |
    tee -a "$out/runs.txt"
for round in $(seq 1 "$rounds"); do
    log="$out/dramhit-$round.log"
    # From the output directory: DRAMHiT writes its own dramhit.log into the working one.
    (cd "$out" && "$build/dramhit" --mode 11 --ht-type 3 --ht-size 33554432 --ht-fill 70 \
        --insert-factor 1 --read-factor 1 --drop-caches 0 --hw-pref 1 --numa-split 1 \
        --batch-len 16 --find_queue_sz 64 --num-threads "$threads") >"$log" 2>&1
    set_mops="$(sed -n 's/.*set_mops : \([0-9.]*\).*/\1/p' "$log")"
    get_mops="$(sed -n 's/.*get_mops : \([0-9.]*\).*/\1/p' "$log")"
    read -r floe_get get_ceiling < <(floe_run get 23488102 "$round")
    read -r floe_fill fill_ceiling < <(floe_run fill 31317469 "$round")
    read -r dense_get _ < <(floe_run get 23488102 "$round" floe-dense)
    read -r bare_get _ < <(floe_run get 23488102 "$round" floe bare)
    insert_reference="$(minimal_insert "$out/floe-fill-$round.log")"
    printf '%-6s %12s %12s %10s %12s %10s %12s %10s %14s %10s\n' "$round" "$set_mops" "$get_mops" "$floe_get" \
        "$get_ceiling" "$floe_fill" "$fill_ceiling" "$dense_get" "$insert_reference" "$bare_get" | tee -a "$out/runs.txt"
done

# The median of column $1 of runs.txt.
median() {
    awk -v c="$1" 'NR > 1 { print $c }' "$out/runs.txt" | sort -g |
        awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
d_set="$(median 2)" d_get="$(median 3)" f_get="$(median 4)" ceiling="$(median 5)" f_fill="$(median 6)"
f_dense="$(median 8)" minimal="$(median 9)" f_bare="$(median 10)"
{
    echo "medians of $rounds rounds (M ops/s):"
    echo "  batched get:    floe $f_get, DRAMHiT $d_get: floe/DRAMHiT $(ratio "$f_get" "$d_get")x;" \
        "floe/ceiling (best read window) $(ratio "$f_get" "$ceiling")x"
    echo "  batched get, hits counted as DRAMHiT's loop counts them (--api bare): floe $f_bare:" \
        "floe/DRAMHiT $(ratio "$f_bare" "$d_get")x"
    echo "  batched get, dense layout: floe $f_dense: floe/DRAMHiT $(ratio "$f_dense" "$d_get")x"
    echo "  batched insert: floe $f_fill, DRAMHiT set $d_set: floe/DRAMHiT $(ratio "$f_fill" "$d_set")x;" \
        "floe/minimal insert (ceiling.rs) $(ratio "$f_fill" "$minimal")x"
} | tee -a "$out/summary.txt"
