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
    let (mut refreshes, mut alloc, bins0) = (0, st0.allocated_bytes, st0.bins);
    for i in 0..5 * n {
        map.remove(&key(i));
        map.insert(key(n + i), i);
        let st = map.stats();
        if !st.migrating && st.allocated_bytes != alloc { if st.bins == bins0 { refreshes += 1; } alloc = st.allocated_bytes; }
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
