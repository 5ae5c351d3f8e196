// FlatMap<u64, u64> batched gets (Batch::get_many, chunks of 2048, depth 64) of present keys:
// args N ROUNDS.
use std::time::Instant;

#[inline(never)]
fn reads(map: &floe::FlatMap<u64, u64>, keys: &[u64], values: &mut [Option<u64>]) -> u64 {
    let batch = map.batch().prefetch(floe::Prefetch::Always);
    let mut hits = 0;
    for (chunk, out) in keys.chunks(2048).zip(values.chunks_mut(2048)) {
        batch.get_many(chunk, out).unwrap();
        hits += out.iter().filter(|v| v.is_some()).count() as u64;
    }
    hits
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).map_or(1 << 16, |s| s.parse().unwrap());
    let rounds: usize = args.get(2).map_or(1, |s| s.parse().unwrap());
    let map = floe::FlatMap::<u64, u64>::with_capacity(n as usize);
    for k in 0..n {
        map.insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k);
    }
    let keys: Vec<u64> = (0..n)
        .map(|i| ((i * 7919) % n).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let mut values = vec![None; n as usize];
    for _ in 0..rounds {
        let t = Instant::now();
        let s = reads(&map, &keys, &mut values);
        let dt = t.elapsed();
        println!("{n} gets: {:.2} ns each (hits {s})", dt.as_nanos() as f64 / n as f64);
    }
}
