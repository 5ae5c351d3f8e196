// Two FlatMaps with the same keys, capacities n and CAP2 (env), gets interleaved per rep: is the
// chained share (sizing) what costs? args N THREADS REPS.
use std::hint::black_box;
fn build(n: usize, cap: usize, keys: &[u64], threads: usize) -> floe::FlatMap<u64, u64> {
    let map = floe::FlatMap::<u64, u64>::builder().capacity(cap).populate(true).backend(floe::Backend::Avx512).build().unwrap();
    std::thread::scope(|s| {
        for part in keys.chunks(n.div_ceil(threads)) {
            let map = &map;
            s.spawn(move || {
                let pairs: Vec<(u64, u64)> = part.iter().map(|&k| (k, k + 1)).collect();
                for c in pairs.chunks(1024) { map.batch().insert_new_each(c, |_, _| {}); }
            });
        }
    });
    map
}
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a[1].parse().unwrap();
    let threads: usize = a[2].parse().unwrap();
    let reps: usize = a[3].parse().unwrap();
    let cap2: usize = std::env::var("CAP2").ok().and_then(|v| v.parse().ok()).unwrap_or(n * 14 / 10);
    let mut x = 0x9e3779b97f4a7c15u64;
    let keys: Vec<u64> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x }).collect();
    let maps = [build(n, n, &keys, threads), build(n, cap2, &keys, threads)];
    let mut acc = [0f64; 2];
    for rep in 0..reps {
        let which = rep % 2;
        let map = &maps[which];
        let t = std::time::Instant::now();
        let total: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = keys.chunks(n.div_ceil(threads)).map(|part| {
                s.spawn(move || {
                    let mut vals = vec![None; 1024];
                    let mut sum = 0u64;
                    for c in part.chunks(1024) {
                        map.batch().get_many(c, &mut vals[..c.len()]).unwrap();
                        sum += vals[..c.len()].iter().filter(|v| v.is_some()).count() as u64;
                    }
                    sum
                })
            }).collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let secs = t.elapsed().as_secs_f64();
        acc[which] += secs;
        eprintln!("map {which} {:.1} M/s hits {} linked-miss {}", n as f64 / secs / 1e6, black_box(total), floe::LINKED_MISS.swap(0, std::sync::atomic::Ordering::Relaxed));
    }
    let per = (reps / 2) as f64 * n as f64 / 1e6;
    println!("cap n {:.1} cap2 {:.1} M/s, ratio cap2/n {:.3}", per / acc[0], per / acc[1], acc[0] / acc[1]);
}
