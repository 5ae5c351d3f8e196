// Memory per entry of floe::FlatCache<u64, u64> at 1M entries: RSS growth after filling, and
// after as many inserts again (each evicting one), per entry held.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}
fn main() {
    let n: u64 = std::env::args().nth(1).map_or(1 << 20, |a| a.parse().unwrap());
    let before = rss();
    let cache = floe::FlatCache::<u64, u64>::new(n);
    for k in 0..n {
        cache.insert(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), k);
    }
    let filled = rss();
    for k in n..2 * n {
        cache.insert(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), k);
    }
    let churned = rss();
    let held = cache.len() as u64;
    println!(
        "entries {n}: held {held}; filled {:.1} B/entry; after the churn {:.1} B/entry",
        (filled - before) as f64 / n as f64,
        (churned - before) as f64 / held as f64
    );
}
