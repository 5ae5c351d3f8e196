// DRAM-shape batched gets: N keys, T threads, get_many in chunks of 1024; prints M gets/s per rep.
use std::hint::black_box;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a[1].parse().unwrap();
    let threads: usize = a[2].parse().unwrap();
    let reps: usize = a[3].parse().unwrap();
    let mode = a.get(4).map(|s| s.as_str()).unwrap_or("batch");
    let chunk: usize = std::env::var("CHUNK").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let cap: usize = std::env::var("CAP").ok().and_then(|v| v.parse().ok()).unwrap_or(n);
    let backend = match std::env::var("BACKEND").as_deref() { Ok("avx2") => floe::Backend::Avx2, Ok("scalar") => floe::Backend::Scalar, Ok("auto") => floe::Backend::Auto, _ => floe::Backend::Avx512 };
    let map = floe::FlatMap::<u64, u64>::builder().capacity(cap).populate(true).backend(backend).build().unwrap();
    let mut x = 0x9e3779b97f4a7c15u64;
    let keys: Vec<u64> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x }).collect();
    std::thread::scope(|s| {
        for part in keys.chunks(n.div_ceil(threads)) {
            let map = &map;
            s.spawn(move || {
                let pairs: Vec<(u64, u64)> = part.iter().map(|&k| (k, k + 1)).collect();
                for c in pairs.chunks(1024) { map.batch().insert_new_each(c, |_, _| {}); }
            });
        }
    });
    eprintln!("len {} backend {:?}", map.len(), map.backend());
    if std::env::var("SMAPS").is_ok() { for l in std::fs::read_to_string("/proc/self/smaps_rollup").unwrap().lines() { if l.starts_with("Rss") || l.starts_with("AnonHuge") { eprintln!("{l}"); } } }
    let inter = std::env::var("INTER").is_ok();
    let mut acc = [0f64; 2];
    for rep in 0..reps {
        let lean = inter && rep % 2 == 1;
        let lmode: u8 = std::env::var("MODE").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
        floe::LEAN.store(if inter { 2 } else { 0 }, std::sync::atomic::Ordering::Relaxed);
        floe::SKIP_SLOW.store(lean && std::env::var("SKIP").is_ok(), std::sync::atomic::Ordering::Relaxed);
        let _ = lmode;
        let t = std::time::Instant::now();
        let total: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = keys.chunks(n.div_ceil(threads)).map(|part| {
                let map = &map;
                s.spawn(move || {
                    let mut vals = vec![None; chunk];
                    let mut sum = 0u64;
                    match mode {
                        "batch" => for c in part.chunks(chunk) {
                            map.batch().get_many(c, &mut vals[..c.len()]).unwrap();
                            sum += vals[..c.len()].iter().filter(|v| v.is_some()).count() as u64;
                        },
                        _ => for &k in part { sum += map.get(&k).is_some() as u64; },
                    }
                    sum
                })
            }).collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let secs = t.elapsed().as_secs_f64();
        acc[lean as usize] += secs;
        eprintln!("torn {} linked-miss {}", floe::TORN_COUNT.swap(0, std::sync::atomic::Ordering::Relaxed), floe::LINKED_MISS.swap(0, std::sync::atomic::Ordering::Relaxed));
        println!("{mode} lean={lean} {:.1} M/s (hits {})", n as f64 / secs / 1e6, black_box(total));
    }
    if inter { println!("base {:.1} lean {:.1} M/s, lean/base {:.3}", n as f64 * (reps/2) as f64 / acc[0] / 1e6, n as f64 * (reps/2) as f64 / acc[1] / 1e6, acc[0] / acc[1]); }
}
