//! The scratch program behind BENCHMARKS.md "The dense layout", fifth and sixth parts: one
//! population (2 threads insert `2^BITS` keys into a `FlatMap` built for 2^16) in a process of
//! its own, then the map's growth statistics.
//! Not part of the workspace: to run it, make a crate with `floe` (path dependency) and this
//! as `src/main.rs`, build it with `--release` (fat LTO, as floe-bench), then
//!
//!     popprof dense|bins BITS pop|block|noahead|lat|latblock|reserve
//!
//! `block`: `ResizeMode::Blocking`; `noahead`: `grow_ahead(0)`; `lat`: also a histogram of
//! the time of every insert (one clock read per insert, which slows the run); `reserve`: fill a
//! map built for all the keys, then time one `reserve` that moves them all.

use floe::{FlatMap, Layout};
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dense = args[1] == "dense";
    let keys: u64 = 1 << args[2].parse::<u32>().unwrap();
    let mode = args.get(3).map(|s| s.as_str()).unwrap_or("pop");
    let layout = if dense { Layout::Dense } else { Layout::Bins };
    let start = if mode == "pop"
        || mode == "block"
        || mode == "noahead"
        || mode == "lat"
        || mode == "latblock"
    {
        1 << 16
    } else {
        keys as usize
    };
    let b = FlatMap::builder().layout(layout).capacity(start);
    let b = if mode == "noahead" {
        b.grow_ahead(0)
    } else {
        b
    };
    let b = if mode == "block" || mode == "latblock" {
        b.resize_mode(floe::ResizeMode::Blocking)
    } else {
        b
    };
    let map: FlatMap<u64, u64> = b.build().unwrap();
    let t0 = std::time::Instant::now();
    let lat = mode == "lat" || mode == "latblock";
    let hists: Vec<[u64; 40]> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u64)
            .map(|t| {
                let map = &map;
                s.spawn(move || {
                    let mut h = [0u64; 40];
                    let mut i = t;
                    let mut last = std::time::Instant::now();
                    while i < keys {
                        map.try_insert(mix(i), i).unwrap();
                        if lat {
                            let now = std::time::Instant::now();
                            let ns = (now - last).as_nanos() as u64;
                            last = now;
                            h[(64 - ns.leading_zeros()) as usize] += 1;
                        }
                        i += 2;
                    }
                    h
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let el = t0.elapsed().as_secs_f64();
    println!(
        "{} {} keys: {:.2} Mops/s, len {}, bytes {}",
        args[1],
        keys,
        keys as f64 / el / 1e6,
        map.len(),
        map.stats().allocated_bytes
    );
    let stats = map.stats();
    println!(
        "  prepared_growths {} prepared_bytes {} live_tables {}",
        stats.prepared_growths, stats.prepared_bytes, stats.live_tables
    );
    if lat {
        let mut tot = [0u64; 40];
        for h in &hists {
            for (a, b) in tot.iter_mut().zip(h) {
                *a += b;
            }
        }
        let n: u64 = tot.iter().sum();
        let mut above = n;
        let mut line = String::new();
        for k in 0..40 {
            above -= tot[k];
            if k >= 10 && k <= 26 {
                line += &format!(" >={}us:{}", (1u64 << k) / 1000, above);
            }
        }
        println!("  ops {n}:{line}");
    }
    if mode == "reserve" {
        let t0 = std::time::Instant::now();
        map.reserve(keys as usize).unwrap();
        let el = t0.elapsed().as_secs_f64();
        println!(
            "  reserve (one thread moves {} keys): {:.1} ns/key, bytes {}",
            keys,
            el * 1e9 / keys as f64,
            map.stats().allocated_bytes
        );
    }
}
