// Refresh attack 2: batched churn (2 threads, batches of 32 removes/inserts), pipelined churn
// (1 thread), a thread calling shrink_to_fit and reserve over and over, and a reader of
// pinned keys through get_many: 5 threads on 2 cores, a FlatMap near its fill point.
use floe::{Request, Response, Insert};
use std::sync::atomic::{AtomicBool, Ordering};
fn key(t: u64, i: u64) -> u64 { (i * 8 + t + 10_000).wrapping_mul(0x9e37_79b9_7f4a_7c15) }
fn main() {
    let live = 100_000u64; let rounds = 600_000u64;
    let map = floe::FlatMap::<u64, u64>::with_capacity(3 * live as usize + 1000);
    for k in 0..1000 { map.insert(k, k); }
    for t in 0..3 { for i in 0..live { map.insert(key(t, i), i); } }
    let before = map.stats();
    let done = AtomicBool::new(false);
    let (mut shrinks, mut reserves) = (0, 0);
    std::thread::scope(|s| {
        let mut ws = Vec::new();
        for t in 0..2u64 { let map = &map; ws.push(s.spawn(move || {
            let mut resp = Vec::new();
            for base in (0..rounds).step_by(32) {
                let reqs: Vec<_> = (base..base + 32).flat_map(|i| [Request::Remove(key(t, i)), Request::InsertNew(key(t, i + live), i + live)]).collect();
                resp.clear();
                map.batch().run(&reqs, &mut resp);
                for (j, r) in resp.iter().enumerate() {
                    let i = base + j as u64 / 2;
                    if j % 2 == 0 { assert_eq!(*r, Response::Remove(Some(i)), "batch remove {t} {i}"); }
                    else { assert_eq!(*r, Response::InsertNew(Ok(Insert::Inserted))); }
                }
            }
        })); }
        { let map = &map; ws.push(s.spawn(move || {
            let mut p = map.pipeline::<u64>(16);
            let mut check = |tag: u64, r: Response<u64>| if tag % 2 == 0 { assert_eq!(r, Response::Remove(Some(tag / 2))) } else { assert_eq!(r, Response::InsertNew(Ok(Insert::Inserted))) };
            for i in 0..rounds {
                if let Some((tag, r)) = p.submit(2 * i, Request::Remove(key(2, i))) { check(tag, r); }
                if let Some((tag, r)) = p.submit(2 * i + 1, Request::InsertNew(key(2, i + live), i + live)) { check(tag, r); }
            }
            p.flush(|tag, r| check(tag, r));
        })); }
        let resizer = { let (map, done) = (&map, &done); s.spawn(move || { let (mut a, mut b) = (0, 0); while !done.load(Ordering::Relaxed) {
            if map.shrink_to_fit().unwrap() { a += 1; }
            map.reserve(1000).unwrap(); b += 1;
            std::thread::yield_now();
        } (a, b) }) };
        let reader = { let (map, done) = (&map, &done); s.spawn(move || { let keys: Vec<u64> = (0..1000).collect(); let mut out = vec![None; 1000]; while !done.load(Ordering::Relaxed) {
            map.batch().get_many(&keys, &mut out).unwrap();
            for (k, v) in out.iter().enumerate() { assert_eq!(*v, Some(k as u64)); }
        } }) };
        for w in ws { w.join().unwrap(); }
        done.store(true, Ordering::Relaxed);
        (shrinks, reserves) = resizer.join().unwrap();
        reader.join().unwrap();
    });
    let after = map.stats();
    assert_eq!(map.check_invariants(), 3 * live as usize + 1000);
    for t in 0..3 { for i in rounds..rounds + live { assert_eq!(map.get(&key(t, i)), Some(i)); } }
    println!("ok: bins {} -> {}, allocated {} -> {}, shrinks {shrinks}, reserves {reserves}", before.bins, after.bins, before.allocated_bytes, after.allocated_bytes);
}
