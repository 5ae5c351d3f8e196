// Instruction counting lab: N keys in a FlatMap<u64,u64>; MODE batch|single|bare; REPS passes.
use std::hint::black_box;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a[1].parse().unwrap();
    let reps: usize = a[2].parse().unwrap();
    let mode = a[3].as_str();
    let be = match a.get(4).map(|s| s.as_str()) { Some("avx2") => floe::Backend::Avx2, Some("avx512") => floe::Backend::Avx512, Some("scalar") => floe::Backend::Scalar, _ => floe::Backend::Auto };
    let map = floe::FlatMap::<u64, u64>::builder().capacity(n).backend(be).build().unwrap();
    eprintln!("backend {:?}", map.backend());
    let mut x = 0x9e3779b97f4a7c15u64;
    let keys: Vec<u64> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x }).collect();
    for &k in &keys { let _ = map.insert(k, k + 1); }
    let mut vals = vec![None; 1024];
    let t = std::time::Instant::now();
    let mut sum = 0u64;
    for _ in 0..reps {
        match mode {
            "batch" => for c in keys.chunks(1024) {
                match std::env::var("PF").as_deref() { Ok("always") => map.batch().prefetch(floe::Prefetch::Always).get_many(c, &mut vals[..c.len()]).unwrap(), Ok("never") => map.batch().prefetch(floe::Prefetch::Never).get_many(c, &mut vals[..c.len()]).unwrap(), _ => map.batch().get_many(c, &mut vals[..c.len()]).unwrap() };
                sum += vals[..c.len()].iter().map(|v| v.unwrap_or(0)).sum::<u64>();
            },
            "single" => for &k in &keys { sum += map.get(&k).unwrap_or(0); },
            _ => panic!(),
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / (reps * n) as f64;
    eprintln!("{mode} n={n} reps={reps}: {ns:.2} ns/op sum={}", black_box(sum));
}
