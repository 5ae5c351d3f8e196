// instructions per fetch_add batch / insert: N keys prefilled, MODE add|single_add
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a[1].parse().unwrap();
    let reps: usize = a[2].parse().unwrap();
    let mode = a[3].as_str();
    let map = floe::FlatMap::<u64, u64>::builder().capacity(n).backend(floe::Backend::Avx2).build().unwrap();
    let mut x = 0x9e3779b97f4a7c15u64;
    let keys: Vec<u64> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x }).collect();
    for &k in &keys { let _ = map.insert(k, k + 1); }
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, 1)).collect();
    for _ in 0..reps {
        match mode {
            "add" => for c in pairs.chunks(1024) { map.batch().fetch_add_each(c, |_, _| {}); },
            "single_add" => for &k in &keys { let _ = map.fetch_add(k, 1); },
            _ => panic!(),
        }
    }
    eprintln!("{}", map.get(&keys[0]).unwrap());
}
