// Batched InsertNew of fresh keys into a warm (cleared) FlatMap<u64,u64>: args N threads reps.
// Prints M inserts/s per rep (all threads), like floe-bench's fill on a populated table.
use floe::{FlatMap, Request, Response};
use std::time::Instant;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x | 1
}

#[inline(never)]
fn fill(map: &FlatMap<u64, u64>, requests: &[Request<u64, u64>], depth: usize) -> usize {
    let mut ok = 0;
    let batch = map.batch().depth(depth);
    for chunk in requests.chunks(2048) {
        batch.run_each(chunk, |_, r| ok += usize::from(matches!(r, Response::InsertNew(Ok(_)))));
    }
    ok
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(1 << 20, |s| s.parse().unwrap());
    let threads: usize = args.get(2).map_or(1, |s| s.parse().unwrap());
    let reps: usize = args.get(3).map_or(3, |s| s.parse().unwrap());
    let depth: usize = args.get(4).map_or(64, |s| s.parse().unwrap());
    let per = n / threads;
    let requests: Vec<Vec<_>> = (0..threads)
        .map(|t| (0..per as u64).map(|i| {
            let k = mix(i + (t * per) as u64);
            Request::InsertNew(k, i)
        }).collect())
        .collect();
    let map = FlatMap::<u64, u64>::builder().capacity(n * 10 / 7).build().unwrap();
    for rep in 0..reps + 1 {
        map.clear();
        let t = Instant::now();
        let ok: usize = std::thread::scope(|s| {
            let hs: Vec<_> = requests.iter().map(|r| { let map = &map; s.spawn(move || fill(map, r, depth)) }).collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let dt = t.elapsed();
        assert_eq!(ok, per * threads);
        if rep > 0 {
            println!("{:.1}", (per * threads) as f64 / dt.as_secs_f64() / 1e6);
        }
    }
}
