#!/bin/bash
# floe-kmer --memory beside floe-kmer without it and jellyfish, k = 21 and 31 canonical, 2 threads,
# three alternating rounds; -s = distinct + 25% as ci/kmer-bench.sh sets it.
set -u
fk=/work/main/target/release/floe-kmer
reads=/tmp/kd/reads.fq
tmp=/tmp/memcap; mkdir -p $tmp
lscpu | grep "Model name"
for k in 21 31; do
  distinct=$($fk count -m $k -t 2 -C --histo $reads 2>&1 >/dev/null | sed -nE 's/.*-mers, ([0-9]+) distinct.*/\1/p')
  size=$((distinct + distinct / 4))
  echo "k=$k distinct=$distinct -s $size"
  for round in 1 2 3; do
    for tool in floe floe-64M floe-32M jellyfish; do
      case $tool in
        floe) cmd="$fk count -q -m $k -t 2 -C -s $size -o $tmp/f.fkdb $reads";;
        floe-64M) cmd="$fk count -q -m $k -t 2 -C -s $size --memory 64M -o $tmp/f64.fkdb $reads";;
        floe-32M) cmd="$fk count -q -m $k -t 2 -C -s $size --memory 32M -o $tmp/f32.fkdb $reads";;
        jellyfish) cmd="jellyfish count -m $k -t 2 -C -s $size -o $tmp/x.jf $reads";;
      esac
      /usr/bin/time -o $tmp/time.txt -f "%e %M" $cmd >/dev/null 2>&1; r=$(tail -1 $tmp/time.txt)
      echo "k=$k round=$round $tool seconds_maxrss_kb $r"
    done
  done
  a=$($fk dump -c $tmp/f.fkdb | md5sum); b=$($fk dump -c $tmp/f64.fkdb | md5sum); c=$($fk dump -c $tmp/f32.fkdb | md5sum)
  j=$(jellyfish dump -c $tmp/x.jf | sort | md5sum)
  echo "k=$k dumps: floe $a | 64M $b | 32M $c | jellyfish (sorted) $j"
done
