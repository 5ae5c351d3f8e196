// Refresh attack: 4 writer threads churn their own keys (remove oldest, insert new) on one
// FlatMap near its fill point while 2 readers check pinned keys; then the same with a hasher
// that crowds keys into a quarter of the bins. Reports churn rate, bins, refresh evidence.
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
#[derive(Clone, Default)]
struct Crowd;
struct CrowdHasher(u64);
impl Hasher for CrowdHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        z & 0x3FFF_FFFF_FFFF_FFFF // the top two bits zero: a quarter of the bins
    }
    fn write(&mut self, _: &[u8]) { unreachable!() }
    fn write_u64(&mut self, k: u64) { self.0 = k; }
}
impl BuildHasher for Crowd { type Hasher = CrowdHasher; fn build_hasher(&self) -> CrowdHasher { CrowdHasher(0) } }
fn key(t: u64, i: u64) -> u64 { (i * 8 + t + 10_000).wrapping_mul(0x9e37_79b9_7f4a_7c15) }
fn run<S: BuildHasher + Clone + Default + Send + Sync + 'static>(name: &str, map: floe::FlatMap<u64, u64, S>, live: u64, rounds: u64) {
    for k in 0..1000 { map.insert(k, k); }
    for t in 0..4 { for i in 0..live { map.insert(key(t, i), i); } }
    let before = map.stats();
    let done = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|s| {
        let ws: Vec<_> = (0..4).map(|t| { let map = &map; s.spawn(move || for i in 0..rounds {
            assert_eq!(map.remove(&key(t, i)), Some(i));
            assert!(map.insert_new(key(t, i + live), i + live).is_inserted());
        })}).collect();
        for _ in 0..2 { let (map, done) = (&map, &done); s.spawn(move || while !done.load(Ordering::Relaxed) {
            for k in 0..1000 { assert_eq!(map.get(&k), Some(k)); }
        }); }
        for w in ws { w.join().unwrap(); }
        done.store(true, Ordering::Relaxed);
    });
    let secs = start.elapsed().as_secs_f64();
    let after = map.stats();
    assert_eq!(map.check_invariants(), 4 * live as usize + 1000);
    for t in 0..4 { for i in rounds..rounds + live { assert_eq!(map.get(&key(t, i)), Some(i)); } }
    println!("{name}: {:.2} M churns/s; bins {} -> {}; allocated {} -> {}", 4.0 * rounds as f64 / secs / 1e6, before.bins, after.bins, before.allocated_bytes, after.allocated_bytes);
}
fn main() {
    let live = 250_000u64;
    run("uniform", floe::FlatMap::<u64, u64>::builder().capacity(4 * live as usize + 1000).build().unwrap(), live, 1_000_000);
    run("crowded", floe::FlatMap::<u64, u64>::builder().capacity(4 * live as usize + 1000).hasher(Crowd).build().unwrap(), live, 1_000_000);
}
