// A working set of HOT% of the cache read round after round (cache-aside), with a scan of
// SCAN% of the cache's never-repeated keys between rounds: the hot keys' hit ratio over rounds
// 10..60. args HOT SCAN (percent).
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let hot_pct: u64 = a[1].parse().unwrap();
    let scan_pct: u64 = a[2].parse().unwrap();
    let n = 65_536u64;
    let cache = floe::Cache::<u64, u64>::new(n);
    let hot = n * hot_pct / 100;
    let scan = n * scan_pct / 100;
    let mut next_scan = 1u64 << 40;
    let (mut hits, mut reads) = (0u64, 0u64);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..60 {
        for _ in 0..hot {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            let key = x % hot;
            let hit = cache.get(&key).is_some();
            if !hit { cache.insert(key, key); }
            if round >= 10 { reads += 1; hits += u64::from(hit); }
        }
        for _ in 0..scan { cache.insert(next_scan, 0); next_scan += 1; }
    }
    println!("hot {hot_pct}% scan {scan_pct}%: hot hit ratio {:.2}% (small share at end {})", 100.0 * hits as f64 / reads as f64, cache.small_queue_share());
}
