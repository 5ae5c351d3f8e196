// A fill after a refresh: FlatMap<u64,u64> with capacity(n), n keys, 3n churns (refreshes),
// then inserts of fresh keys until the table grows: prints keys a bin at the growth, the
// table's bytes a key then, and gets/s over all keys on one thread just before the growth.
// Compare: the same map filled from empty (no churn) to its first growth past n.
use std::time::Instant;
fn k64(k: u64) -> u64 { k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555 }
fn run(n: u64, churn: bool) {
    let map = floe::FlatMap::<u64, u64>::builder().capacity(n as usize).grow_ahead(0).build().unwrap();
    for k in 0..n { map.insert(k64(k), k); }
    let mut first = 0;
    if churn {
        for k in 0..3 * n { map.remove(&k64(k)); map.insert(k64(n + k), k); }
        first = 3 * n;
    }
    let bins = map.stats().bins;
    let mut next = first + n;
    let mut last_stats = map.stats();
    // Step in 1% of n, then read the stats: find the chunk in which the table grew.
    loop {
        for k in next..next + n / 100 { map.insert(k64(k), k); }
        next += n / 100;
        let st = map.stats();
        if st.bins != bins { break; }
        last_stats = st;
    }
    let len = map.len();
    // Gets over the keys, before growth: rebuild the state just before (approximately:
    // measure now on the grown table is different), so time gets at the last pre-growth len:
    let keys: Vec<u64> = (first..next).map(k64).collect();
    let t = Instant::now();
    let mut hits = 0u64;
    for k in &keys { hits += u64::from(map.get(k).is_some()); }
    let dt = t.elapsed().as_secs_f64();
    println!("{}: grew from {} bins at {:.2} keys a bin (last stats before: link used {} of pool {} + reserve {}), len {}, gets after growth {:.1} M/s ({hits})",
        if churn { "after refresh" } else { "from empty   " }, bins, (len - (n/100) as usize) as f64 / bins as f64,
        last_stats.link_buckets_used, last_stats.link_buckets, last_stats.link_reserve, len, keys.len() as f64 / dt / 1e6);
}
fn main() {
    let n: u64 = std::env::args().nth(1).map_or(1_000_000, |s| s.parse().unwrap());
    run(n, false);
    run(n, true);
}
