// Attack on floe::Cache's one-lookup eviction: every key on one hash (a constant hasher, so
// every entry sits in one collision list) or on few, many threads inserting, reading and
// removing over one small cache; the counts must agree at the end.
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
#[derive(Default)]
struct Few(u64);
impl Hasher for Few {
    fn write(&mut self, b: &[u8]) { for &x in b { self.0 = self.0.wrapping_mul(31).wrapping_add(x as u64); } }
    fn write_u64(&mut self, v: u64) { self.0 = v; }
    fn finish(&self) -> u64 { let m = std::env::var("HASHES").ok().and_then(|v| v.parse().ok()).unwrap_or(1u64); (self.0 % m).wrapping_mul(0x9E37_79B9_7F4A_7C15) }
}
fn main() {
    let threads = 6;
    let evicted = std::sync::Arc::new(AtomicU64::new(0));
    let e2 = evicted.clone();
    let cache = floe::Cache::<u64, u64, _>::builder().max_capacity(64)
        .eviction_listener(move |_, _, cause| if cause == floe::RemovalCause::Size { e2.fetch_add(1, Ordering::Relaxed); })
        .hasher(BuildHasherDefault::<Few>::default()).build().unwrap();
    std::thread::scope(|s| {
        for t in 0..threads {
            let cache = &cache;
            s.spawn(move || {
                for i in 0..20_000u64 {
                    let k = (i * 7 + t) % 500;
                    match i % 5 {
                        0 | 1 => { cache.insert(k, k); }
                        2 | 3 => { if let Some(v) = cache.get(&k) { assert_eq!(v, k); } }
                        _ => { cache.remove(&k); }
                    }
                }
            });
        }
    });
    let stats = cache.stats();
    let mut live = 0;
    cache.for_each(|k, v| { assert_eq!(k, v); live += 1; });
    println!("len {} live {} weighted {} evictions {} (listener {}) insertions {}", cache.len(), live, cache.weighted_size(), stats.evictions, evicted.load(Ordering::Relaxed), stats.insertions);
    assert!(cache.len() <= 64 + threads as usize, "over capacity");
    assert_eq!(cache.len(), live);
    assert_eq!(cache.weighted_size() as usize, live);
    assert_eq!(stats.evictions, evicted.load(Ordering::Relaxed));
}
