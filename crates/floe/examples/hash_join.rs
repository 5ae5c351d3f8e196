//! A parallel hash join on one shared `FlatMap`, DLHT's application (§5.3.6): every thread
//! inserts its share of the build relation R into the map in batches (`Batch::run_each`),
//! then probes its share of the
//! probe relation S in batches (`Batch::get_many`, floe's lookahead ring), counting the inner,
//! semi and anti joins' rows. Build keys may repeat (a real join's do): the map holds each
//! key's latest row, and each row links to the row it replaced, which `insert` answers, so
//! the map is a lock-free multimap with no second structure to synchronise. A `std` hash map
//! join on one thread checks every count and checksum.
//!
//! ```sh
//! cargo run --release -p floe --example hash_join -- [build rows] [probe rows] [distinct keys] [threads]
//! ```
//!
//! Defaults: 2M build rows over 1M distinct keys (two rows a key), 16M probe rows whose keys
//! are R's or, one in four, absent; 2 threads. `floe-bench join` is the measured version
//! (workload A at size, against hashbrown and DuckDB).

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use floe::{FlatMap, Request, Response};

/// The end of a chain of rows.
const NIL: u64 = u64::MAX;
/// Probe keys a thread looks up per batch.
const CHUNK: usize = 512;

/// SplitMix64's finaliser: a bijection, so distinct ranks give distinct keys.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of rank `i` (ranks below `distinct` are R's keys; above, keys R does not have).
fn key(i: u64) -> u64 {
    mix(i.wrapping_add(1))
}

/// The join's answers: row counts, and a checksum of the inner join's (build row, probe row)
/// pairs (the sum of `r * 31 + s` over them, modulo 2^64).
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Answers {
    inner: u64,
    semi: u64,
    anti: u64,
    checksum: u64,
}

impl Answers {
    fn add(&mut self, other: Answers) {
        self.inner += other.inner;
        self.semi += other.semi;
        self.anti += other.anti;
        self.checksum = self.checksum.wrapping_add(other.checksum);
    }
}

fn pair(r: u64, s: u64) -> u64 {
    r.wrapping_mul(31).wrapping_add(s)
}

fn parse(args: &[String]) -> Result<(u64, u64, u64, usize), String> {
    let number = |i: usize, default: u64, name: &str| -> Result<u64, String> {
        match args.get(i) {
            None => Ok(default),
            Some(text) => text
                .parse()
                .map_err(|_| format!("{name}: {text:?} is not a number")),
        }
    };
    let build = number(0, 2 << 20, "build rows")?;
    let probe = number(1, 16 << 20, "probe rows")?;
    let distinct = number(2, 1 << 20, "distinct keys")?;
    let threads = number(3, 2, "threads")?;
    if args.len() > 4 {
        return Err("at most four arguments".into());
    }
    if build == 0 || distinct == 0 || distinct > build || build > 1 << 32 || probe > 1 << 34 {
        return Err("need 1 <= distinct keys <= build rows <= 2^32 and probe rows <= 2^34".into());
    }
    if !(1..=1024).contains(&threads) {
        return Err(format!("threads {threads} is out of range (1 to 1024)"));
    }
    Ok((build, probe, distinct, threads as usize))
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (build, probe, distinct, threads) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("hash_join: {message}");
            eprintln!("usage: hash_join [build rows] [probe rows] [distinct keys] [threads]");
            return std::process::ExitCode::from(2);
        }
    };
    // R's row r has key rank r % distinct (every key on build / distinct rows or one more);
    // S's row s has a key of R or, one in four, one R does not have.
    let r_keys: Vec<u64> = (0..build).map(|r| key(r % distinct)).collect();
    let s_keys: Vec<u64> = (0..probe)
        .map(|s| {
            let draw = mix(s ^ 0x5eed);
            if draw.is_multiple_of(4) {
                key(distinct + draw % distinct)
            } else {
                key((draw >> 2) % distinct)
            }
        })
        .collect();

    // Build: each thread inserts a contiguous share of R in batches. `insert` answers the row
    // the key held before, which becomes this row's link: a key's rows form a chain from the
    // map.
    let map = FlatMap::<u64, u64>::with_capacity(distinct as usize);
    let next: Vec<AtomicU64> = (0..build).map(|_| AtomicU64::new(NIL)).collect();
    let share = |len: u64, t: usize| {
        let per = len.div_ceil(threads as u64);
        (per * t as u64).min(len)..(per * (t as u64 + 1)).min(len)
    };
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (map, next, r_keys) = (&map, &next, &r_keys);
            scope.spawn(move || {
                let rows = share(build, t);
                let mut requests = Vec::with_capacity(CHUNK);
                let batch = map.batch();
                for first in rows.clone().step_by(CHUNK) {
                    let last = (first + CHUNK as u64).min(rows.end);
                    requests.clear();
                    requests.extend((first..last).map(|r| Request::Insert(r_keys[r as usize], r)));
                    batch.run_each(&requests, |i, response| {
                        let Response::Insert(Ok(before)) = response else {
                            panic!("an insert into a map made for every key failed: {response:?}");
                        };
                        // Relaxed: the links are read after the scope joins the threads.
                        next[(first + i as u64) as usize]
                            .store(before.unwrap_or(NIL), Ordering::Relaxed);
                    });
                }
            });
        }
    });
    let built = started.elapsed();

    // Probe: each thread looks its share of S up in batches and walks each hit's chain.
    let started = Instant::now();
    let mut answers = Answers::default();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (map, next, s_keys) = (&map, &next, &s_keys);
                scope.spawn(move || {
                    let range = share(probe, t);
                    let mut found = vec![None; CHUNK];
                    let mut mine = Answers::default();
                    let batch = map.batch();
                    let (start, end) = (range.start as usize, range.end as usize);
                    for (c, keys) in s_keys[start..end].chunks(CHUNK).enumerate() {
                        let found = &mut found[..keys.len()];
                        batch.get_many(keys, found).expect("as many slots as keys");
                        for (j, hit) in found.iter().enumerate() {
                            let s = (start + c * CHUNK + j) as u64;
                            let Some(mut r) = *hit else {
                                mine.anti += 1;
                                continue;
                            };
                            mine.semi += 1;
                            while r != NIL {
                                mine.inner += 1;
                                mine.checksum = mine.checksum.wrapping_add(pair(r, s));
                                r = next[r as usize].load(Ordering::Relaxed);
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        for handle in handles {
            answers.add(handle.join().expect("a probe thread panicked"));
        }
    });
    let probed = started.elapsed();
    let total = built + probed;
    println!(
        "hash join on floe, {threads} threads: R {build} rows ({distinct} keys), S {probe} rows"
    );
    println!(
        "  build {:.3} s, probe {:.3} s: {:.1} M tuples/s (|R| + |S| over both)",
        built.as_secs_f64(),
        probed.as_secs_f64(),
        (build + probe) as f64 / total.as_secs_f64() / 1e6
    );
    println!(
        "  inner {} rows, semi {}, anti {}, checksum {:#x}",
        answers.inner, answers.semi, answers.anti, answers.checksum
    );

    // The same join with std's map on one thread: every answer must agree.
    let mut reference_map: HashMap<u64, Vec<u64>> = HashMap::new();
    for (r, &k) in r_keys.iter().enumerate() {
        reference_map.entry(k).or_default().push(r as u64);
    }
    let mut reference = Answers::default();
    for (s, k) in s_keys.iter().enumerate() {
        match reference_map.get(k) {
            None => reference.anti += 1,
            Some(rows) => {
                reference.semi += 1;
                reference.inner += rows.len() as u64;
                for &r in rows {
                    reference.checksum = reference.checksum.wrapping_add(pair(r, s as u64));
                }
            }
        }
    }
    if answers != reference {
        eprintln!("hash_join: floe's answers {answers:?} differ from std's {reference:?}");
        return std::process::ExitCode::FAILURE;
    }
    println!("  std's HashMap join on one thread gives the same answers");
    std::process::ExitCode::SUCCESS
}
