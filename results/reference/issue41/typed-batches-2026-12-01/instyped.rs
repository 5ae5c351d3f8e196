// Batched inserts of fresh keys into a warm (cleared) FlatMap<u64,u64>, through run_each of
// requests or through a typed batch: args N THREADS REPS DEPTH MODE, MODE one of
// req-new | typed-new | req-upsert | typed-upsert | req-add | typed-add.
// Prints M inserts/s per rep (all threads).
use floe::{FlatMap, Request, Response};
use std::time::Instant;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x | 1
}

#[inline(never)]
fn fill_req(map: &FlatMap<u64, u64>, requests: &[Request<u64, u64>], depth: usize) -> usize {
    let mut ok = 0;
    let batch = map.batch().depth(depth);
    for chunk in requests.chunks(2048) {
        batch.run_each(chunk, |_, r| {
            ok += usize::from(matches!(
                r,
                Response::InsertNew(Ok(_)) | Response::Insert(Ok(_)) | Response::FetchAdd(Ok(_))
            ))
        });
    }
    ok
}

#[inline(never)]
fn fill_typed(map: &FlatMap<u64, u64>, pairs: &[(u64, u64)], depth: usize, mode: &str) -> usize {
    let mut ok = 0;
    let batch = map.batch().depth(depth);
    for chunk in pairs.chunks(2048) {
        match mode {
            "typed-new" => {
                batch.insert_new_each(chunk, |_, r| ok += usize::from(r.is_ok()));
            }
            "typed-upsert" => {
                batch.insert_each(chunk, |_, r| ok += usize::from(r.is_ok()));
            }
            _ => {
                batch.fetch_add_each(chunk, |_, r| ok += usize::from(r.is_ok()));
            }
        }
    }
    ok
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(1 << 20, |s| s.parse().unwrap());
    let threads: usize = args.get(2).map_or(1, |s| s.parse().unwrap());
    let reps: usize = args.get(3).map_or(3, |s| s.parse().unwrap());
    let depth: usize = args.get(4).map_or(64, |s| s.parse().unwrap());
    let mode: String = args.get(5).cloned().unwrap_or("req-new".into());
    let per = n / threads;
    let pairs: Vec<Vec<(u64, u64)>> = (0..threads)
        .map(|t| (0..per as u64).map(|i| (mix(i + (t * per) as u64), i)).collect())
        .collect();
    let requests: Vec<Vec<Request<u64, u64>>> = pairs
        .iter()
        .map(|ps| {
            ps.iter()
                .map(|&(k, v)| match mode.as_str() {
                    "req-new" => Request::InsertNew(k, v),
                    "req-upsert" => Request::Insert(k, v),
                    _ => Request::fetch_add(k, v),
                })
                .collect()
        })
        .collect();
    let typed = mode.starts_with("typed");
    let map = FlatMap::<u64, u64>::builder().capacity(n * 10 / 7).build().unwrap();
    for rep in 0..reps + 1 {
        map.clear();
        let t = Instant::now();
        let ok: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let (map, pairs, requests, mode) = (&map, &pairs[t], &requests[t], &mode);
                    s.spawn(move || {
                        if typed {
                            fill_typed(map, pairs, depth, mode)
                        } else {
                            fill_req(map, requests, depth)
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let dt = t.elapsed();
        assert_eq!(ok, per * threads);
        if rep > 0 {
            println!("{:.1}", (per * threads) as f64 / dt.as_secs_f64() / 1e6);
        }
    }
}
