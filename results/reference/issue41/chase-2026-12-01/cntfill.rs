// Instructions per fresh-key insert through insert_new_each: run with FILL=1 and FILL=0, subtract.
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a[1].parse().unwrap();
    let fill: bool = a[2] == "1";
    let map = floe::FlatMap::<u64, u64>::builder().capacity(n).backend(floe::Backend::Avx2).build().unwrap();
    let mut x = 0x9e3779b97f4a7c15u64;
    let pairs: Vec<(u64, u64)> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; (x, x + 1) }).collect();
    if fill { for c in pairs.chunks(1024) { map.batch().insert_new_each(c, |_, _| {}); } }
    eprintln!("{}", std::hint::black_box(map.len()));
}
