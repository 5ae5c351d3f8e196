// A Map of n keys on each layout, then n removes of the oldest key each followed by an insert of a new one.
fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 4096
}
fn key(k: u64) -> u128 { u128::from(k) << 64 | u128::from(k.wrapping_mul(0x9e37_79b9_7f4a_7c15)) }
fn main() {
    let n: u64 = std::env::args().nth(1).map_or(1_000_000, |s| s.parse().unwrap());
    let dense = std::env::args().nth(2).is_some_and(|s| s == "dense");
    let before = rss();
    let mut b = floe::Map::<u128, [u64; 4]>::builder().capacity(1 << 16).grow_ahead(0);
    if dense { b = b.layout(floe::Layout::Dense); }
    let map = b.build().unwrap();
    let m = map.pin();
    for k in 0..n { m.insert(key(k), [0; 4]); }
    let st = map.stats();
    println!("filled: {:.1} B/entry rss, table {:.1} B/entry, links used {}", (rss() - before) as f64 / n as f64, st.bins as f64 * 64.0 / n as f64, st.link_buckets_used);
    for k in 0..n { m.remove(&key(k)); m.insert(key(n + k), [0; 4]); }
    let st = map.stats();
    println!("churned: {:.1} B/entry rss, table {:.1} B/entry, links used {}, len {}", (rss() - before) as f64 / n as f64, st.bins as f64 * 64.0 / n as f64, st.link_buckets_used, map.len());
}
