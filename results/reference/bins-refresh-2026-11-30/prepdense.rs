// Dense layout: churn at a constant size until refreshes happen, then fill until it grows
// twice: how many growths took prepared memory (stats().prepared_growths).
fn key(i: u64) -> u64 { i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1 }
fn main() {
    let dense = std::env::args().nth(1).map_or(true, |s| s == "dense");
    let layout = if dense { floe::Layout::Dense } else { floe::Layout::Bins };
    let n = 200_000u64;
    let map = floe::FlatMap::<u64, u64>::builder().layout(layout).capacity(n as usize).build().unwrap();
    for i in 0..n { map.insert(key(i), i); }
    let st0 = map.stats();
    let (mut refreshes, bins0, mut was_migrating) = (0, st0.bins, false);
    for i in 0..5 * n {
        map.remove(&key(i));
        map.insert(key(n + i), i);
        let st = map.stats();
        // A migration that ends with the same bins (lines) was a refresh.
        if was_migrating && !st.migrating && st.bins == bins0 { refreshes += 1; }
        was_migrating = st.migrating;
    }
    let st1 = map.stats();
    println!("{layout:?}: after churn: bins {} -> {}, refreshes seen {refreshes}, prepared growths {}", bins0, st1.bins, st1.prepared_growths);
    let (mut growths, mut bins) = (0, st1.bins);
    let mut i = 6 * n;
    while growths < 3 {
        map.insert(key(i), i); i += 1;
        let st = map.stats();
        if !st.migrating && st.bins > bins { growths += 1; bins = st.bins; println!("  growth {growths} to {bins} lines/bins, prepared growths so far {}", st.prepared_growths); }
    }
}
