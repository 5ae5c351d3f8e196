#!/usr/bin/env bash
# floe-kmer against jellyfish 2 on real reads: bowtie2's example reads (10,000 short reads)
# and long reads, k = 15, 21 and 31 (and 41 and 63 on the short reads), with and without
# -C, through every engine that counts the k (the compact one only above 32): every k-mer's count (`jellyfish dump -c | sort` against floe-kmer's
# database read by `dump -c`) and the histogram (`jellyfish histo`) must be the same; so
# must `query -s`, `stats`, a bucketed `histo -f` and the FASTA dump of both databases, and
# the text `count --text` and `count --histo` write without one, and `merge` of the reads'
# halves must equal `jellyfish merge`'s; above 32 a count within --memory must write the
# same database. kmc, at k = 21 and 41, must agree with floe-kmer -C too. First, the crate's test against a naive counter on the
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
source ci/features.sh

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

# Built as ci/test.sh's build was (the workspace, ci/features.sh), so that cargo reuses it.
cargo test --quiet --workspace "${workspace_features[@]}" --test real_data

profile="${FLOE_KMER_PROFILE:-dev}"
if [ "$profile" = dev ]; then
    cargo build --quiet --workspace --bins "${workspace_features[@]}"
else
    cargo build --quiet --profile "$profile" -p floe-kmer
fi
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
    # Long k on the short reads only (the debug build's time: CI's 30 minutes).
    ks="15 21 31"
    [ "$name" = reads_1 ] && ks+=" 41 63"
    for k in $ks; do
        engines="compact batched delegated"
        ((k <= 32)) || engines=compact
        for strand in "" -C; do
            what="$name k=$k ${strand:-(both strands apart)}"
            jellyfish count -m "$k" -s 10M -t 2 $strand -o "$tmp/x.jf" "$tmp/$name.fq"
            jellyfish dump -c "$tmp/x.jf" | sort >"$tmp/jellyfish.txt"
            jellyfish histo "$tmp/x.jf" >"$tmp/jellyfish.histo"
            # Every engine's database, read back by dump and histo.
            for engine in $engines; do
                "$floe_kmer" count -q -m "$k" -t 2 $strand --engine "$engine" -o "$tmp/floe.fkdb" "$reads_dir/$name.fq.gz"
                "$floe_kmer" dump -c "$tmp/floe.fkdb" >"$tmp/floe.txt"
                "$floe_kmer" histo "$tmp/floe.fkdb" >"$tmp/floe.histo"
                check "$what, $engine: dump -c" "$tmp/jellyfish.txt" "$tmp/floe.txt"
                check "$what, $engine: histo" "$tmp/jellyfish.histo" "$tmp/floe.histo"
            done
            # The last database answers the other readers as jellyfish's does: queries for
            # every k-mer of the first 1000 reads (either strand, N-broken), statistics, a
            # bucketed histogram, the FASTA dump.
            head -4000 "$tmp/$name.fq" >"$tmp/query.fq"
            jellyfish query -s "$tmp/query.fq" "$tmp/x.jf" >"$tmp/jellyfish.query"
            "$floe_kmer" query -s "$tmp/query.fq" "$tmp/floe.fkdb" >"$tmp/floe.query"
            check "$what: query -s" "$tmp/jellyfish.query" "$tmp/floe.query"
            jellyfish stats "$tmp/x.jf" >"$tmp/jellyfish.stats"
            "$floe_kmer" stats "$tmp/floe.fkdb" >"$tmp/floe.stats"
            check "$what: stats" "$tmp/jellyfish.stats" "$tmp/floe.stats"
            jellyfish histo -f -l 3 -h 40 -i 4 "$tmp/x.jf" >"$tmp/jellyfish.histo"
            "$floe_kmer" histo -f -l 3 -h 40 -i 4 "$tmp/floe.fkdb" >"$tmp/floe.histo"
            check "$what: histo -f -l 3 -h 40 -i 4" "$tmp/jellyfish.histo" "$tmp/floe.histo"
            # jellyfish dumps in hash order: both FASTA dumps as (count, k-mer) pairs, sorted.
            jellyfish dump "$tmp/x.jf" | paste - - | sort >"$tmp/jellyfish.fasta"
            "$floe_kmer" dump "$tmp/floe.fkdb" | paste - - | sort >"$tmp/floe.fasta"
            check "$what: dump (FASTA)" "$tmp/jellyfish.fasta" "$tmp/floe.fasta"
            # The text output without a database, from the count itself.
            "$floe_kmer" count -q -m "$k" -t 2 $strand --text -o "$tmp/floe.txt" "$reads_dir/$name.fq.gz"
            "$floe_kmer" count -q -m "$k" -t 2 $strand --histo "$reads_dir/$name.fq.gz" >"$tmp/floe.histo"
            jellyfish histo "$tmp/x.jf" >"$tmp/jellyfish.histo"
            check "$what: count --text" "$tmp/jellyfish.txt" "$tmp/floe.txt"
            check "$what: count --histo" "$tmp/jellyfish.histo" "$tmp/floe.histo"
            if ((k > 32)); then
                # Long k-mers within a budget: passes cut by their first 32 bases.
                "$floe_kmer" count -q -m "$k" -t 2 $strand --memory 20M -o "$tmp/floe.fkdb" "$reads_dir/$name.fq.gz"
                "$floe_kmer" dump -c "$tmp/floe.fkdb" >"$tmp/floe.txt"
                check "$what: count --memory 20M" "$tmp/jellyfish.txt" "$tmp/floe.txt"
            fi
        done
    done
done

# kmc counts canonical k-mers only; its dump is `KMER<tab>COUNT`, sorted with -s.
for k in 21 41; do
    rm -rf "$tmp/kmc"
    mkdir "$tmp/kmc"
    kmc -hp -k$k -t2 -ci1 -cs4294967295 -fq "$tmp/reads_1.fq" "$tmp/kmc/out" "$tmp/kmc" >/dev/null
    kmc_tools -hp transform "$tmp/kmc/out" dump -s "$tmp/kmc.tsv" >/dev/null
    tr '\t' ' ' <"$tmp/kmc.tsv" >"$tmp/kmc.txt"
    "$floe_kmer" count -q -m $k -t 2 -C --text -o "$tmp/floe.txt" "$reads_dir/reads_1.fq.gz"
    check "reads_1 k=$k -C: counts against kmc" "$tmp/kmc.txt" "$tmp/floe.txt"
done

# merge, against jellyfish merge: the reads in two halves, each counted, merged.
head -20000 "$tmp/reads_1.fq" >"$tmp/half_1.fq"
tail -n +20001 "$tmp/reads_1.fq" >"$tmp/half_2.fq"
for k in 21 41; do
    for half in 1 2; do
        jellyfish count -m $k -s 10M -t 2 -C -o "$tmp/half_$half.jf" "$tmp/half_$half.fq"
        "$floe_kmer" count -q -m $k -t 2 -C -o "$tmp/half_$half.fkdb" "$tmp/half_$half.fq"
    done
    jellyfish merge -o "$tmp/merged.jf" "$tmp/half_1.jf" "$tmp/half_2.jf"
    jellyfish dump -c "$tmp/merged.jf" | sort >"$tmp/jellyfish.txt"
    "$floe_kmer" merge -o "$tmp/merged.fkdb" "$tmp/half_1.fkdb" "$tmp/half_2.fkdb"
    "$floe_kmer" dump -c "$tmp/merged.fkdb" >"$tmp/floe.txt"
    check "reads_1 in halves k=$k -C: merge" "$tmp/jellyfish.txt" "$tmp/floe.txt"
done

if ((failed)); then
    echo "kmer.sh: floe-kmer disagrees with jellyfish or kmc" >&2
    exit 1
fi
echo "kmer.sh: floe-kmer agrees with jellyfish and kmc"
