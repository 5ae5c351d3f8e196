#!/usr/bin/env bash
# floe-kmer against jellyfish 2 on real reads: bowtie2's example reads (10,000 short reads)
# and long reads, k = 15, 21 and 31, with and without -C, through the batched and the
# delegated engine: every k-mer's count (`jellyfish dump -c | sort`) and the histogram
# (`jellyfish histo`) must be the same. kmc, on one case,
# must agree with floe-kmer -C too. First, the crate's test against a naive counter on the
# same reads (tests/real_data.rs, which skips where the reads are not installed, as on a
# fresh machine's ci/test.sh). Installs (apt) what it needs and the benchmark's tools
# (ci/kmer-bench.sh, ci/kmer-data.sh): jellyfish, kmc, bowtie2-examples, kleborate-examples,
# art-nextgen-simulation-tools. About a minute after the build.
#
# Correctness only: the debug build (what ci/test.sh builds) is quick enough for inputs this
# small; FLOE_KMER_PROFILE=release checks the optimised one.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/apt.sh

reads_dir=/usr/share/doc/bowtie2/examples/reads
missing=()
command -v jellyfish >/dev/null || missing+=(jellyfish)
command -v kmc >/dev/null || missing+=(kmc)
command -v art_illumina >/dev/null || missing+=(art-nextgen-simulation-tools)
[ -e "$reads_dir/reads_1.fq.gz" ] || missing+=(bowtie2-examples)
compgen -G "/usr/share/doc/kleborate/examples/data/*.fna.xz" >/dev/null || missing+=(kleborate-examples)
if ((${#missing[@]})); then
    echo "kmer.sh: installing ${missing[*]} (apt)"
    apt_install "${missing[@]}"
fi

cargo test --quiet -p floe-kmer --test real_data

profile="${FLOE_KMER_PROFILE:-dev}"
cargo build --quiet --profile "$profile" -p floe-kmer
case "$profile" in
    dev) floe_kmer="$PWD/target/debug/floe-kmer" ;;
    *) floe_kmer="$PWD/target/$profile/floe-kmer" ;;
esac

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# jellyfish does not read gzip: it gets the decompressed reads, floe-kmer the .gz files.
zcat "$reads_dir/reads_1.fq.gz" >"$tmp/reads_1.fq"
zcat "$reads_dir/longreads.fq.gz" >"$tmp/longreads.fq"

# Both sides sorted by the same rules.
export LC_ALL=C

failed=0
check() { # name, then the two files that must be equal
    if cmp -s "$2" "$3"; then
        echo "  ok    $1 ($(wc -l <"$2") lines)"
    else
        echo "  FAIL  $1; the first differences (< jellyfish or kmc, > floe-kmer):"
        diff "$2" "$3" | head -10
        failed=1
    fi
}

for name in reads_1 longreads; do
    for k in 15 21 31; do
        for strand in "" -C; do
            what="$name k=$k ${strand:-(both strands apart)}"
            jellyfish count -m "$k" -s 10M -t 2 $strand -o "$tmp/x.jf" "$tmp/$name.fq"
            jellyfish dump -c "$tmp/x.jf" | sort >"$tmp/jellyfish.txt"
            jellyfish histo "$tmp/x.jf" >"$tmp/jellyfish.histo"
            for engine in batched delegated; do
                "$floe_kmer" count -q -m "$k" -t 2 $strand --engine "$engine" -o "$tmp/floe.txt" "$reads_dir/$name.fq.gz"
                "$floe_kmer" count -q -m "$k" -t 2 $strand --engine "$engine" --histo "$reads_dir/$name.fq.gz" >"$tmp/floe.histo"
                check "$what, $engine: counts" "$tmp/jellyfish.txt" "$tmp/floe.txt"
                check "$what, $engine: histogram" "$tmp/jellyfish.histo" "$tmp/floe.histo"
            done
        done
    done
done

# kmc counts canonical k-mers only; its dump is `KMER<tab>COUNT`, sorted with -s.
mkdir "$tmp/kmc"
kmc -hp -k21 -t2 -ci1 -cs4294967295 -fq "$tmp/reads_1.fq" "$tmp/kmc/out" "$tmp/kmc" >/dev/null
kmc_tools -hp transform "$tmp/kmc/out" dump -s "$tmp/kmc.tsv" >/dev/null
tr '\t' ' ' <"$tmp/kmc.tsv" >"$tmp/kmc.txt"
"$floe_kmer" count -q -m 21 -t 2 -C -o "$tmp/floe.txt" "$reads_dir/reads_1.fq.gz"
check "reads_1 k=21 -C: counts against kmc" "$tmp/kmc.txt" "$tmp/floe.txt"

if ((failed)); then
    echo "kmer.sh: floe-kmer disagrees with jellyfish or kmc" >&2
    exit 1
fi
echo "kmer.sh: floe-kmer agrees with jellyfish and kmc"
