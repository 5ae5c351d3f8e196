//! Concurrent counters three ways, timed side by side: a `Map` of std atomics added to in
//! place (`MapRef::fetch_add`), a `Map` of plain integers replaced through `compute` (a new
//! entry per increment), and `FlatMap::fetch_add` (the count in the table's own word).
//!
//! ```sh
//! cargo run --release -p floe --example counters -- [keys] [increments] [threads] [rounds]
//! ```
//!
//! Defaults: 1M keys (all present before timing), 20M increments of uniformly random keys, 2
//! threads, 3 rounds, interleaved; prints M increments/s per round and the median, and checks
//! every count at the end of each run (a wrong total exits with status 1).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use floe::{FlatMap, Map, Operation};

/// The keys of thread `t`'s increments: xorshift, so every run draws the same ones.
fn keys_of(t: u64, count: usize, keys: u64) -> Vec<u64> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % keys
        })
        .collect()
}

/// Run `increment` over every thread's keys at once; M increments/s.
fn timed(streams: &[Vec<u64>], increment: &(dyn Fn(u64) + Sync)) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for stream in streams {
            scope.spawn(move || {
                for &key in stream {
                    increment(key);
                }
            });
        }
    });
    let total: usize = streams.iter().map(Vec::len).sum();
    total as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn argument(position: usize, default: u64) -> u64 {
    match std::env::args().nth(position) {
        None => default,
        Some(text) => text.parse().unwrap_or_else(|_| {
            eprintln!("counters: argument {position} must be a count, not {text:?}");
            std::process::exit(2)
        }),
    }
}

fn main() {
    let keys = argument(1, 1 << 20).max(1);
    let increments = argument(2, 20_000_000);
    let threads = argument(3, 2).max(1);
    let rounds = argument(4, 3).max(1);
    let per_thread = (increments / threads) as usize;
    let streams: Vec<Vec<u64>> = (0..threads).map(|t| keys_of(t, per_thread, keys)).collect();
    let total = per_thread as u64 * threads;
    println!(
        "{keys} keys, {total} increments on {threads} threads, {rounds} rounds (M increments/s)"
    );
    let mut results: [(&str, Vec<f64>); 3] = [
        ("Map<u64, AtomicU64>::fetch_add", Vec::new()),
        ("Map<u64, u64>::compute", Vec::new()),
        ("FlatMap<u64, u64>::fetch_add", Vec::new()),
    ];
    let mut ok = true;
    for round in 0..rounds {
        let atomics = Map::<u64, AtomicU64>::with_capacity(keys as usize);
        let plain = Map::<u64, u64>::with_capacity(keys as usize);
        let flat = FlatMap::<u64, u64>::with_capacity(keys as usize);
        {
            let (a, p) = (atomics.pin(), plain.pin());
            for key in 0..keys {
                a.insert(key, AtomicU64::new(0));
                p.insert(key, 0);
                flat.insert(key, 0);
            }
        }
        let rates = [
            timed(&streams, &|key| {
                atomics.pin().fetch_add(key, 1);
            }),
            timed(&streams, &|key| {
                plain.pin().compute(key, |count| {
                    Operation::<u64, ()>::Insert(count.map_or(1, |n| n + 1))
                });
            }),
            timed(&streams, &|key| {
                flat.fetch_add(key, 1);
            }),
        ];
        let sums = [
            atomics
                .pin()
                .iter()
                .map(|(_, n)| n.load(Relaxed))
                .sum::<u64>(),
            plain.pin().iter().map(|(_, n)| *n).sum::<u64>(),
            flat.iter().map(|(_, n)| n).sum::<u64>(),
        ];
        for ((name, rates_of), (rate, sum)) in results.iter_mut().zip(rates.iter().zip(sums)) {
            if sum != total {
                eprintln!("counters: {name} counted {sum} of {total}");
                ok = false;
            }
            rates_of.push(*rate);
        }
        println!(
            "round {}: {}",
            round + 1,
            results
                .iter()
                .map(|(name, r)| format!("{name} {:.1}", r[round as usize]))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let medians: Vec<f64> = results.iter().map(|(_, r)| median(r.clone())).collect();
    for ((name, _), m) in results.iter().zip(&medians) {
        println!(
            "median {name:32} {m:8.1}  ({:.2}x the compute counter)",
            m / medians[1]
        );
    }
    if !ok {
        std::process::exit(1);
    }
}
