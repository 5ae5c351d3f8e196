#!/usr/bin/env bash
# The k-mer benchmark's input: simulated Illumina reads of a Klebsiella pneumoniae genome.
#
#   bash ci/kmer-data.sh [OUTDIR]     (default results/kmer-data)
#
# The genome is Kleborate's example HS11286 (5.3 Mb, a chromosome and six plasmids; Debian's
# kleborate-examples), decompressed to OUTDIR/genome.fna; art_illumina (Debian's
# art-nextgen-simulation-tools) simulates single-end HiSeq 2500 reads of 150 bases at
# COVERAGE-fold coverage (default 30: ~1.1 M reads, ~170 M bases, a 370 MB FASTQ) with the
# fixed seed SEED (default 1), into OUTDIR/reads.fq. The same arguments make the same file.
# ci/kmer.sh installs both packages.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-results/kmer-data}"
coverage="${COVERAGE:-30}"
seed="${SEED:-1}"
genome_xz=/usr/share/doc/kleborate/examples/data/Klebs_HS11286.fna.xz
for need in "$genome_xz:kleborate-examples" "$(command -v art_illumina || echo /nonexistent):art-nextgen-simulation-tools"; do
    if [ ! -e "${need%%:*}" ]; then
        echo "kmer-data.sh: ${need%%:*} is missing: apt-get install ${need##*:} (or run ci/kmer.sh)" >&2
        exit 2
    fi
done

mkdir -p "$out"
xz -dc "$genome_xz" >"$out/genome.fna"
# -na: no alignment file; -q: no summary. art_illumina writes PREFIX.fq.
art_illumina -q -na -ss HS25 -l 150 -f "$coverage" -rs "$seed" -i "$out/genome.fna" -o "$out/reads" >/dev/null
reads="$out/reads.fq"
[ -s "$reads" ] || { echo "kmer-data.sh: art_illumina wrote no reads" >&2; exit 1; }
echo "kmer-data.sh: $reads: $(du -h "$reads" | cut -f1), $(($(wc -l <"$reads") / 4)) reads of 150 bases" \
    "(${coverage}x of $(grep -v '>' "$out/genome.fna" | tr -d '\n' | wc -c) bases, seed $seed)"
