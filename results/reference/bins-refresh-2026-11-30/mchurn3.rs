// Churn at a constant size, timed: fill n keys, then 3n (remove oldest, insert new) on one
// thread, reporting churn throughput, bins and table bytes a key. FlatMap<u64,u64>, then
// Map<u128,[u64;4]>. Arguments: n, the capacity to build with (0: none), and `dense` for
// Layout::Dense (the default layout otherwise).
use std::time::Instant;
fn k64(k: u64) -> u64 { k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555 }
fn main() {
    let n: u64 = std::env::args().nth(1).map_or(1_000_000, |s| s.parse().unwrap());
    let cap: usize = std::env::args().nth(2).map_or(0, |s| s.parse().unwrap());
    let layout = if std::env::args().nth(3).is_some_and(|s| s == "dense") { floe::Layout::Dense } else { floe::Layout::Bins };
    let mut fb = floe::FlatMap::<u64, u64>::builder().layout(layout).grow_ahead(0);
    if cap > 0 { fb = fb.capacity(cap); }
    let flat = fb.build().unwrap();
    let t = Instant::now();
    for k in 0..n { flat.insert(k64(k), k); }
    let fill = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for k in 0..3 * n { flat.remove(&k64(k)); flat.insert(k64(n + k), k); }
    let churn = t.elapsed().as_secs_f64();
    let st = flat.stats();
    println!("FlatMap: fill {:.2} M/s, churn {:.2} M/s, bins {}, table {:.1} B/key", n as f64 / fill / 1e6, 3.0 * n as f64 / churn / 1e6, st.bins, st.allocated_bytes as f64 / n as f64);
    drop(flat);
    let mut mb = floe::Map::<u128, [u64; 4]>::builder().layout(layout).grow_ahead(0);
    if cap > 0 { mb = mb.capacity(cap); }
    let map = mb.build().unwrap();
    let m = map.pin();
    let t = Instant::now();
    for k in 0..n { m.insert(u128::from(k64(k)), [k; 4]); }
    let fill = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for k in 0..3 * n { m.remove(&u128::from(k64(k))); m.insert(u128::from(k64(n + k)), [k; 4]); }
    let churn = t.elapsed().as_secs_f64();
    let st = map.stats();
    println!("Map:     fill {:.2} M/s, churn {:.2} M/s, bins {}, table {:.1} B/key", n as f64 / fill / 1e6, 3.0 * n as f64 / churn / 1e6, st.bins, st.allocated_bytes as f64 / n as f64);
}
