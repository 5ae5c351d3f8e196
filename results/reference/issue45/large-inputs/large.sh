#!/bin/bash
# floe-kmer (one pass; and within --memory 64M), jellyfish and kmc on larger inputs (issue 45):
# 100x simulated Klebsiella reads (COVERAGE=100 bash ci/kmer-data.sh /tmp/kd100) and the
# largest real reads in a Debian data package (wtdbg2-examples: 280 MB of PacBio E. coli
# reads, selfSampleData/pacbio_filtered.fastq). Canonical, 2 threads, ROUNDS rounds
# alternating; -s = distinct + 25% for floe-kmer and jellyfish (as ci/kmer-bench.sh).
# Columns: data k round tool seconds max-RSS-KiB.
set -u
fk=${FK:-target/release/floe-kmer}
rounds=${ROUNDS:-1}
tmp=/tmp/large; mkdir -p $tmp
lscpu | grep "Model name"
for data in /tmp/kd100/reads.fq /tmp/pacbio/selfSampleData/pacbio_filtered.fastq; do
  for k in 21 31; do
    distinct=$($fk count -m $k -t 2 -C --histo $data 2>&1 >/dev/null | sed -nE 's/.*-mers, ([0-9]+) distinct.*/\1/p')
    size=$((distinct + distinct / 4))
    echo "data=$data k=$k distinct=$distinct -s $size"
    for round in $(seq 1 $rounds); do
      for tool in floe floe-64M jellyfish kmc; do
        rm -rf $tmp/kmc; mkdir -p $tmp/kmc
        case $tool in
          floe) cmd="$fk count -q -m $k -t 2 -C -s $size -o $tmp/f.fkdb $data";;
          floe-64M) cmd="$fk count -q -m $k -t 2 -C -s $size --memory 64M -o $tmp/f64.fkdb $data";;
          jellyfish) cmd="jellyfish count -m $k -t 2 -C -s $size -o $tmp/x.jf $data";;
          kmc) cmd="kmc -hp -k$k -t2 -ci1 -cs4294967295 -fq $data $tmp/kmc/out $tmp/kmc";;
        esac
        /usr/bin/time -o $tmp/time.txt -f "%e %M" $cmd >/dev/null 2>&1
        echo "$(basename $data) k=$k round=$round $tool $(tail -1 $tmp/time.txt)"
      done
    done
    a=$($fk dump -c $tmp/f.fkdb | md5sum | cut -c1-12); b=$($fk dump -c $tmp/f64.fkdb | md5sum | cut -c1-12)
    j=$(jellyfish dump -c $tmp/x.jf | sort | md5sum | cut -c1-12)
    echo "$(basename $data) k=$k dumps (md5): floe $a, floe-64M $b, jellyfish sorted $j"
  done
done
