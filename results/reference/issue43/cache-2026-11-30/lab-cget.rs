// floe::Cache gets of present keys: args N rounds.
use std::time::Instant;

#[inline(never)]
fn reads(cache: &floe::Cache<u64, u64>, keys: &[u64]) -> u64 {
    let mut sum = 0;
    for k in keys {
        sum += cache.get(k).unwrap_or(0);
    }
    sum
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).map_or(1 << 14, |s| s.parse().unwrap());
    let rounds: usize = args.get(2).map_or(1, |s| s.parse().unwrap());
    let cache = floe::Cache::<u64, u64>::builder().max_capacity(n).build().unwrap();
    for k in 0..n {
        cache.insert(k, k);
    }
    let keys: Vec<u64> = (0..n).map(|i| (i.wrapping_mul(0x9E3779B97F4A7C15) >> 7) % n).collect();
    for _ in 0..rounds {
        let t = Instant::now();
        let s = reads(&cache, &keys);
        let dt = t.elapsed();
        println!("{n} gets: {:.2} ns each (sum {s})", dt.as_nanos() as f64 / n as f64);
    }
}
