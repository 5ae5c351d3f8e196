// floe::Cache inserts of fresh keys into a full cache (each evicts one): args CAP N; run with
// N and 2N under callgrind and subtract for instructions per insert; prints ns per insert.
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let cap: u64 = a[1].parse().unwrap();
    let n: u64 = a[2].parse().unwrap();
    let cache = floe::Cache::<u128, u64>::new(cap);
    for k in 0..cap { cache.insert(u128::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15), k); }
    let t = std::time::Instant::now();
    for k in cap..cap + n { cache.insert(u128::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15), k); }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    eprintln!("{ns:.1} ns/insert, len {}", cache.len());
}
