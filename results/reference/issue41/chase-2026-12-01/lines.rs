// Lines per batched get (line-stats): N keys, one thread.
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a[1].parse().unwrap();
    let map = floe::FlatMap::<u64, u64>::builder().capacity(n).build().unwrap();
    let mut x = 0x9e3779b97f4a7c15u64;
    let keys: Vec<u64> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x }).collect();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, k + 1)).collect();
    for c in pairs.chunks(1024) { map.batch().insert_new_each(c, |_, _| {}); }
    let mut vals = vec![None; 1024];
    let (r0, p0) = (floe::lines_read(), floe::link_lines_prefetched());
    for c in keys.chunks(1024) { map.batch().get_many(c, &mut vals[..c.len()]).unwrap(); }
    let (r1, p1) = (floe::lines_read(), floe::link_lines_prefetched());
    let misses: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(0x2545f4914f6cdd1d) | 1).collect();
    for c in misses.chunks(1024) { map.batch().get_many(c, &mut vals[..c.len()]).unwrap(); }
    let (r2, p2) = (floe::lines_read(), floe::link_lines_prefetched());
    println!("len {} hits: lines read {:.4} link lines prefetched {:.4} a get; misses: read {:.4} prefetched {:.4}",
        map.len(), (r1 - r0) as f64 / n as f64, (p1 - p0) as f64 / n as f64,
        (r2 - r1) as f64 / n as f64, (p2 - p1) as f64 / n as f64);
}
