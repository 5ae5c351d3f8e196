#!/bin/bash
# floe-kmer (this build, and the build before k > 32 for k <= 32) against jellyfish and kmc,
# canonical, 2 threads, 30x simulated Klebsiella reads, three rounds (the order turning); -s = distinct + 25%.
set -u
fk=/work/main/target/release/floe-kmer
base=/work/scratch/base-target/release/floe-kmer
reads=${READS:-/tmp/kd/reads.fq}
tmp=/tmp/longk; rm -rf $tmp; mkdir -p $tmp
lscpu | grep "Model name"
for k in ${KS:-21 31 41 63}; do
  distinct=$($fk count -m $k -t 2 -C --histo $reads 2>&1 >/dev/null | sed -nE 's/.*-mers, ([0-9]+) distinct.*/\1/p')
  size=$((distinct + distinct / 4))
  echo "k=$k distinct=$distinct -s $size"
  tools="floe jellyfish kmc"; [ $k -le 32 ] && tools="floe floe-before jellyfish kmc"
  for round in 1 2 3; do
    # The order turns each round, so no tool always runs after the same one.
    read -ra list <<<"$tools"; r=$(( (round - 1) % ${#list[@]} ))
    order="${list[*]:r} ${list[*]:0:r}"
    for tool in $order; do
      case $tool in
        floe) cmd="$fk count -q -m $k -t 2 -C -s $size -o $tmp/f.fkdb $reads";;
        floe-before) cmd="$base count -q -m $k -t 2 -C -s $size -o $tmp/b.fkdb $reads";;
        jellyfish) cmd="jellyfish count -m $k -t 2 -C -s $size -o $tmp/x.jf $reads";;
        kmc) rm -rf $tmp/kmc; mkdir $tmp/kmc; cmd="kmc -k$k -t2 -ci1 -cs4294967295 -fq $reads $tmp/kmc/out $tmp/kmc";;
      esac
      /usr/bin/time -o $tmp/time.txt -f "%e %M" $cmd >/dev/null 2>&1; r=$(tail -1 $tmp/time.txt)
      echo "k=$k round=$round $tool seconds_maxrss_kb $r"
    done
  done
  a=$($fk dump -c $tmp/f.fkdb | md5sum | cut -c1-12)
  j=$(jellyfish dump -c $tmp/x.jf | LC_ALL=C sort -S 25% | md5sum | cut -c1-12)
  kmc_tools transform $tmp/kmc/out dump -s $tmp/kmc.tsv >/dev/null; m=$(tr '\t' ' ' < $tmp/kmc.tsv | md5sum | cut -c1-12)
  echo "k=$k dumps: floe $a | jellyfish (sorted) $j | kmc $m"
done
