// Instructions per unbatched get: leapfrog's LeapMap beside floe's FlatMap (Mix64 for both),
// N keys, REPS passes: args N REPS MODE(leap|floe|none) [BACKEND avx2]. Run with REPS 1 and
// 11 under callgrind and subtract.
use std::hash::{BuildHasher, Hasher};
#[derive(Clone, Default)]
struct Mix;
struct MixHasher(u64);
impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33; x = x.wrapping_mul(0xff51afd7ed558ccd); x ^= x >> 33; x = x.wrapping_mul(0xc4ceb9fe1a85ec53); x ^ (x >> 33)
    }
    fn write(&mut self, _: &[u8]) { unimplemented!() }
    fn write_u64(&mut self, v: u64) { self.0 = v; }
}
impl BuildHasher for Mix {
    type Hasher = MixHasher;
    fn build_hasher(&self) -> MixHasher { MixHasher(0) }
}
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a[1].parse().unwrap();
    let reps: usize = a[2].parse().unwrap();
    let mode = a[3].as_str();
    let mut x = 0x9e3779b97f4a7c15u64;
    let keys: Vec<u64> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x | 1 }).collect();
    let mut sum = 0u64;
    let t = std::time::Instant::now();
    let threads: usize = std::env::var("THREADS").ok().map_or(1, |s| s.parse().unwrap());
    if threads > 1 {
        fn timed<F: Fn(u64) -> u64 + Sync>(keys: &[u64], reps: usize, threads: usize, get: F) -> f64 {
            let start = std::sync::Barrier::new(threads);
            let ns: Vec<f64> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads).map(|t| { let (get, start) = (&get, &start); s.spawn(move || {
                    let off = t * keys.len() / threads;
                    start.wait();
                    let began = std::time::Instant::now();
                    let mut sum = 0u64;
                    for _ in 0..reps { for i in 0..keys.len() { let k = keys[(i + off) % keys.len()]; sum += u64::from(get(k) != k); } }
                    assert_eq!(sum, 0, "wrong answers");
                    std::hint::black_box(sum);
                    began.elapsed().as_nanos() as f64
                })}).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let slowest = ns.iter().cloned().fold(0.0, f64::max);
            (threads * reps * keys.len()) as f64 / slowest * 1e3
        }
        match mode {
            "leap" => {
                let m = leapfrog::LeapMap::<u64, u64, Mix>::with_capacity_and_hasher(n, Mix);
                for &k in &keys { m.insert(k, k); }
                println!("leap {threads} threads {:.2} M gets/s", timed(&keys, reps, threads, |k| m.get(&k).and_then(|mut r| r.value()).unwrap_or(0)));
            }
            _ => {
                let b = floe::FlatMap::<u64, u64>::builder().capacity(n).backend(if std::env::var("AVX512").is_ok() { floe::Backend::Avx512 } else { floe::Backend::Avx2 });
                let m = if mode == "floefix" { b.max_bins(1).build().unwrap() } else { b.build().unwrap() };
                for &k in &keys { let _ = m.insert(k, k); }
                println!("{mode} {threads} threads {:.2} M gets/s", timed(&keys, reps, threads, |k| m.get(&k).unwrap_or(0)));
            }
        }
        return;
    }
    match mode {
        "leap" => {
            let m = leapfrog::LeapMap::<u64, u64, Mix>::with_capacity_and_hasher(n, Mix);
            for &k in &keys { m.insert(k, k); }
            let t = std::time::Instant::now();
            for _ in 0..reps { for &k in &keys { sum = sum.wrapping_add(m.get(&k).and_then(|mut r| r.value()).unwrap_or(0)); } }
            eprintln!("leap {:.2} ns/get", t.elapsed().as_nanos() as f64 / (reps * n) as f64);
        }
        "floe" | "floefix" => {
            let b = floe::FlatMap::<u64, u64>::builder().capacity(n).backend(if std::env::var("AVX512").is_ok() { floe::Backend::Avx512 } else { floe::Backend::Avx2 });
            let m = if mode == "floefix" { b.max_bins(1).build().unwrap() } else { b.build().unwrap() };
            for &k in &keys { let _ = m.insert(k, k); }
            let t = std::time::Instant::now();
            for _ in 0..reps { for &k in &keys { sum = sum.wrapping_add(m.get(&k).unwrap_or(0)); } }
            eprintln!("{mode} {:.2} ns/get", t.elapsed().as_nanos() as f64 / (reps * n) as f64);
        }
        "leappad" => {
            // leapfrog's get plus about 44 independent ALU instructions a get (off the
            // critical path: an accumulator no load depends on).
            let m = leapfrog::LeapMap::<u64, u64, Mix>::with_capacity_and_hasher(n, Mix);
            for &k in &keys { m.insert(k, k); }
            let mut acc = [1u64; 4];
            let t = std::time::Instant::now();
            let chains: usize = std::env::var("CHAINS").ok().map_or(4, |s| s.parse().unwrap());
            for _ in 0..reps { for &k in &keys {
                sum = sum.wrapping_add(m.get(&k).and_then(|mut r| r.value()).unwrap_or(0));
                for j in 0..chains.min(4) { acc[j] = std::hint::black_box(acc[j].rotate_left(7) ^ k).wrapping_mul(0x9e37) ^ (acc[j] >> 3); }
            } }
            eprintln!("leappad {:.2} ns/get {}", t.elapsed().as_nanos() as f64 / (reps * n) as f64, acc.iter().sum::<u64>());
        }
        _ => {}
    }
    let _ = t;
    println!("{}", std::hint::black_box(sum));
}
