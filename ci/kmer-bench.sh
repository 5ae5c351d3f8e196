#!/usr/bin/env bash
# floe-kmer against jellyfish 2 and kmc 3 on the same reads, the same k and thread count.
#
#   bash ci/kmer-bench.sh [READS.fq]
#
# READS defaults to results/kmer-data/reads.fq, made by ci/kmer-data.sh when missing.
# Environment: THREADS (2: -t for every tool), REPS (3 runs a measurement, the median
# reported), KS ("15 21 31"; up to 64), ENGINES (floe-kmer's --engine values; default
# compact, batched, unbatched and delegated; above k = 32 compact only), VERIFY (1: after
# the timings, check floe-kmer's counts against jellyfish's and kmc's for each k; 0 skips
# it), OUT (results/kmer-bench: the table, bench.txt, and the raw times, runs.txt).
#
# What is timed, per k: counting the file into each tool's database: floe-kmer's (count -o,
# sorted), `jellyfish count`'s (.jf), kmc's. Both strands apart
# and canonical (-C) for floe-kmer and jellyfish; kmc counts canonical k-mers only, so its
# row compares with the -C rows. Each tool's hash size: jellyfish's -s and floe-kmer's -s
# are both set to the distinct k-mers of the input (found by an untimed floe-kmer run) plus
# a quarter, so neither grows its table nor (jellyfish) spills to disk; kmc sizes itself.
# Reported: median wall seconds, millions of k-mers counted per second (the k-mers in the
# file, as floe-kmer counts them, over the wall time) and the largest RSS of the runs, all
# from /usr/bin/time -f '%e %M'.
#
# ci/kmer.sh installs jellyfish, kmc and the data's packages.
set -euo pipefail
cd "$(dirname "$0")/.."

threads="${THREADS:-2}"
reps="${REPS:-3}"
ks="${KS:-15 21 31}"
verify="${VERIFY:-1}"
out="${OUT:-results/kmer-bench}"
reads="${1:-results/kmer-data/reads.fq}"

if [ ! -e "$reads" ]; then
    if [ $# -gt 0 ]; then
        echo "kmer-bench.sh: $reads does not exist" >&2
        exit 2
    fi
    bash ci/kmer-data.sh "$(dirname "$reads")"
fi
for tool in jellyfish kmc kmc_tools /usr/bin/time; do
    command -v "$tool" >/dev/null || {
        echo "kmer-bench.sh: $tool is missing (ci/kmer.sh installs it)" >&2
        exit 2
    }
done

cargo build --quiet --release -p floe-kmer
floe_kmer="$PWD/target/release/floe-kmer"
default_engines="compact batched unbatched"
# The hook for the delegated engine: measured as soon as the binary offers it.
if "$floe_kmer" count --help | grep -q delegated; then
    default_engines+=" delegated"
fi
engines="${ENGINES:-$default_engines}"

mkdir -p "$out"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/kmer-bench.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

table="$out/bench.txt"
runs="$out/runs.txt"
: >"$runs"
{
    echo "# ci/kmer-bench.sh: $(basename "$reads") ($(du -h "$reads" | cut -f1)), -t $threads, median of $reps"
    echo "# $(sed -n "s/^model name[[:space:]]*: //p" /proc/cpuinfo | head -1); $(uname -srm); $(nproc) CPUs; $(jellyfish --version); kmc $(kmc 2>&1 | sed -n 's/.*ver\. \([0-9.]*\).*/\1/p' | head -1)"
    printf '%-3s %-30s %10s %10s %12s\n' k tool seconds Mkmers/s max_RSS_MiB
} | tee "$table"

# time_runs K LABEL KMERS COMMAND...: runs COMMAND REPS times, adds its row to the table.
time_runs() {
    local k=$1 label=$2 kmers=$3 i
    shift 3
    : >"$tmp/times"
    for ((i = 0; i < reps; i++)); do
        if ! /usr/bin/time -f '%e %M' -o "$tmp/time" "$@" >/dev/null 2>"$tmp/stderr"; then
            echo "kmer-bench.sh: failed: $*" >&2
            cat "$tmp/stderr" >&2
            exit 1
        fi
        printf '%s\t%s\t%s\n' "$k" "$label" "$(cat "$tmp/time")" >>"$runs"
        cat "$tmp/time" >>"$tmp/times"
    done
    sort -n "$tmp/times" | awk -v k="$k" -v label="$label" -v kmers="$kmers" '
        { seconds[NR] = $1; if ($2 > rss) rss = $2 }
        END {
            median = seconds[int((NR + 1) / 2)]
            printf "%-3s %-30s %10.2f %10.1f %12.0f\n", k, label, median,
                kmers / (median > 0 ? median : 1e-9) / 1e6, rss / 1024
        }' | tee -a "$table"
}

# The summary line floe-kmer prints: "floe-kmer: TOTAL ...-mers, DISTINCT distinct, ...".
total_and_distinct() {
    sed -nE 's/^floe-kmer: ([0-9]+) .*-mers, ([0-9]+) distinct.*/\1 \2/p'
}

declare -A sizes
for k in $ks; do
    for strand in "" -C; do
        read -r kmers distinct < <("$floe_kmer" count -m "$k" -t "$threads" $strand --histo "$reads" 2>&1 >/dev/null | total_and_distinct)
        size=$((distinct + distinct / 4))
        sizes[$k$strand]=$size
        name="${strand:+ -C}"
        for engine in $engines; do
            # floe's maps hold 8-byte keys: above k = 32 only the compact engine counts.
            if ((k > 32)) && [ "$engine" != compact ]; then
                continue
            fi
            time_runs "$k" "floe-kmer$name $engine" "$kmers" \
                "$floe_kmer" count -q -m "$k" -t "$threads" $strand -s "$size" --engine "$engine" -o "$tmp/floe.fkdb" "$reads"
        done
        time_runs "$k" "jellyfish$name" "$kmers" \
            jellyfish count -m "$k" -t "$threads" $strand -s "$size" -o "$tmp/x.jf" "$reads"
        rm -f "$tmp"/x.jf*
        if [ -n "$strand" ]; then
            rm -rf "$tmp/kmc"
            mkdir "$tmp/kmc"
            time_runs "$k" "kmc (canonical)" "$kmers" \
                kmc -hp -k"$k" -t"$threads" -ci1 -cs4294967295 -fq "$reads" "$tmp/kmc/out" "$tmp/kmc"
        fi
    done
done

if [ "$verify" = 1 ]; then
    echo "== verifying: floe-kmer's counts against jellyfish's (and kmc's, canonical)"
    for k in $ks; do
        for strand in "" -C; do
            jellyfish count -m "$k" -t "$threads" $strand -s "${sizes[$k$strand]}" -o "$tmp/x.jf" "$reads"
            jellyfish dump -c "$tmp/x.jf" | sort -S 25% >"$tmp/jellyfish.txt"
            rm -f "$tmp"/x.jf*
            "$floe_kmer" count -q -m "$k" -t "$threads" $strand -o "$tmp/floe.fkdb" "$reads"
            "$floe_kmer" dump -c "$tmp/floe.fkdb" >"$tmp/floe$strand.txt"
            if ! cmp -s "$tmp/jellyfish.txt" "$tmp/floe$strand.txt"; then
                echo "kmer-bench.sh: k=$k ${strand:-(both strands)}: floe-kmer and jellyfish differ:" >&2
                diff "$tmp/jellyfish.txt" "$tmp/floe$strand.txt" | head >&2
                exit 1
            fi
            echo "  k=$k ${strand:-(both strands)}: floe-kmer = jellyfish ($(wc -l <"$tmp/floe$strand.txt") k-mers)"
        done
        rm -rf "$tmp/kmc"
        mkdir "$tmp/kmc"
        kmc -hp -k"$k" -t"$threads" -ci1 -cs4294967295 -fq "$reads" "$tmp/kmc/out" "$tmp/kmc" >/dev/null
        kmc_tools -hp transform "$tmp/kmc/out" dump -s "$tmp/kmc.tsv" >/dev/null
        if ! tr '\t' ' ' <"$tmp/kmc.tsv" | cmp -s - "$tmp/floe-C.txt"; then
            echo "kmer-bench.sh: k=$k: floe-kmer -C and kmc differ" >&2
            exit 1
        fi
        echo "  k=$k -C: floe-kmer = kmc"
        rm -f "$tmp"/floe*.txt "$tmp"/floe.fkdb "$tmp"/jellyfish.txt "$tmp"/kmc.tsv
    done
fi
echo "kmer-bench.sh: the table is in $table, every run in $runs"
