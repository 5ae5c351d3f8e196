//! Timed loops: pinned threads, a start barrier, per-thread work prepared before timing.

use std::{
    hash::BuildHasher,
    sync::Barrier,
    time::{Duration, Instant},
};

use floe::{
    hash::{Crc32, Mix64, WyHash},
    FlatMap,
};

use crate::{keys::Rng, peers::BenchMap};

/// The hashers the bench can use, behind one type (the branch is perfectly predictable).
#[derive(Clone, Copy, Debug)]
pub enum AnyHash {
    Mix64(Mix64),
    WyHash(WyHash),
    Crc32(Crc32),
}

/// The hasher of [`AnyHash`].
pub enum AnyHasher {
    Mix64(<Mix64 as BuildHasher>::Hasher),
    WyHash(<WyHash as BuildHasher>::Hasher),
    Crc32(<Crc32 as BuildHasher>::Hasher),
}

impl BuildHasher for AnyHash {
    type Hasher = AnyHasher;

    #[inline(always)]
    fn build_hasher(&self) -> AnyHasher {
        match self {
            AnyHash::Mix64(h) => AnyHasher::Mix64(h.build_hasher()),
            AnyHash::WyHash(h) => AnyHasher::WyHash(h.build_hasher()),
            AnyHash::Crc32(h) => AnyHasher::Crc32(h.build_hasher()),
        }
    }
}

impl std::hash::Hasher for AnyHasher {
    #[inline(always)]
    fn write_u64(&mut self, word: u64) {
        match self {
            AnyHasher::Mix64(h) => h.write_u64(word),
            AnyHasher::WyHash(h) => h.write_u64(word),
            AnyHasher::Crc32(h) => h.write_u64(word),
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        match self {
            AnyHasher::Mix64(h) => h.write(bytes),
            AnyHasher::WyHash(h) => h.write(bytes),
            AnyHasher::Crc32(h) => h.write(bytes),
        }
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        match self {
            AnyHasher::Mix64(h) => h.finish(),
            AnyHasher::WyHash(h) => h.finish(),
            AnyHasher::Crc32(h) => h.finish(),
        }
    }
}

pub type Map = FlatMap<u64, u64, AnyHash>;

/// The value stored for a key, so gets can be checked without a second table.
#[inline(always)]
pub fn value_of(key: u64) -> u64 {
    key ^ 0x0f0f_f0f0_5555_aaaa
}

/// Median, min and max of repeated measurements, in Mops/s.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub lines_per_op: Option<f64>,
}

impl Summary {
    /// Run `f` `repeat` times; each run returns (Mops/s, lines per op if counted).
    pub fn of(repeat: usize, mut f: impl FnMut() -> (f64, Option<f64>)) -> Summary {
        let mut runs: Vec<(f64, Option<f64>)> = (0..repeat).map(|_| f()).collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        Summary {
            median: runs[runs.len() / 2].0,
            min: runs[0].0,
            max: runs[runs.len() - 1].0,
            lines_per_op: runs[runs.len() / 2].1,
        }
    }
}

/// Thread placement: thread `i` of a run is pinned to core `i % cores`.
pub struct Workers {
    cores: Vec<core_affinity::CoreId>,
}

impl Workers {
    pub fn new() -> Self {
        Self {
            cores: core_affinity::get_core_ids().unwrap_or_default(),
        }
    }

    /// Run `body(i)` on `threads` pinned threads released together; returns the wall time from
    /// the release to the last thread's end, and the bodies' results.
    pub fn run<R: Send>(
        &self,
        threads: usize,
        body: impl Fn(usize) -> R + Sync,
    ) -> (Duration, Vec<R>) {
        let barrier = Barrier::new(threads + 1);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let (barrier, body, cores) = (&barrier, &body, &self.cores);
                    s.spawn(move || {
                        if !cores.is_empty() {
                            core_affinity::set_for_current(cores[i % cores.len()]);
                        }
                        barrier.wait();
                        body(i)
                    })
                })
                .collect();
            barrier.wait();
            let start = Instant::now();
            let results: Vec<R> = handles
                .into_iter()
                .map(|h| h.join().expect("worker panicked"))
                .collect();
            (start.elapsed(), results)
        })
    }
}

/// Per-thread streams of `len` items from `item(rng)`, prepared before timing (each thread
/// its own seed, so threads do not walk the same sequence).
pub fn streams<T>(
    threads: usize,
    seed: u64,
    len: usize,
    mut item: impl FnMut(&mut Rng) -> T,
) -> Vec<Vec<T>> {
    (0..threads)
        .map(|i| {
            let mut rng = Rng(seed + i as u64);
            (0..len).map(|_| item(&mut rng)).collect()
        })
        .collect()
}

/// Apply `op` to the items of `stream`, cycling, until `duration` has passed (the clock is read
/// every 4096 items). Returns the number of items processed.
#[inline(always)]
pub fn cycle_for<T>(stream: &[T], duration: Duration, mut op: impl FnMut(&T)) -> u64 {
    let start = Instant::now();
    let mut ops = 0u64;
    loop {
        for chunk in stream.chunks(4096) {
            for item in chunk {
                op(item);
            }
            ops += chunk.len() as u64;
            if start.elapsed() >= duration {
                return ops;
            }
        }
    }
}

/// Lines read per op from the per-thread counters (`line-stats`), or `None`.
fn lines_per_op(lines: u64, ops: u64) -> Option<f64> {
    cfg!(feature = "line-stats").then(|| lines as f64 / ops as f64)
}

/// Insert every key (thread `i` takes the `i`-th share) into an empty map.
pub fn insert_all<M: BenchMap>(
    workers: &Workers,
    threads: usize,
    map: &M,
    keys: &[u64],
) -> (f64, Option<f64>) {
    let share = keys.len().div_ceil(threads);
    let (elapsed, lines) = workers.run(threads, |i| {
        let before = floe::lines_read();
        for &k in keys.iter().skip(i * share).take(share) {
            assert!(map.insert(k, value_of(k)), "keys are distinct");
        }
        floe::lines_read() - before
    });
    (
        keys.len() as f64 / elapsed.as_secs_f64() / 1e6,
        lines_per_op(lines.iter().sum(), keys.len() as u64),
    )
}

/// Random gets of present keys for `duration`; every answer is checked.
pub fn get_random<M: BenchMap>(
    workers: &Workers,
    threads: usize,
    map: &M,
    keys: &[u64],
    duration: Duration,
) -> (f64, Option<f64>) {
    let streams = streams(threads, 0xabcd, 1 << 20, |rng| {
        keys[rng.below(keys.len() as u64) as usize]
    });
    let (elapsed, results) = workers.run(threads, |i| {
        let before = floe::lines_read();
        let mut wrong = 0u64;
        let ops = cycle_for(&streams[i], duration, |&k| {
            wrong += u64::from(map.get(k) != Some(value_of(k)))
        });
        (ops, wrong, floe::lines_read() - before)
    });
    let ops: u64 = results.iter().map(|r| r.0).sum();
    let wrong: u64 = results.iter().map(|r| r.1).sum();
    assert_eq!(wrong, 0, "gets returned wrong values");
    let lines: u64 = results.iter().map(|r| r.2).sum();
    (
        ops as f64 / elapsed.as_secs_f64() / 1e6,
        lines_per_op(lines, ops),
    )
}

/// CPU model, cores, caches and THP state, for the record.
pub fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cache = |index: u32| {
        std::fs::read_to_string(format!(
            "/sys/devices/system/cpu/cpu0/cache/index{index}/size"
        ))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
    };
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "machine: {model}; {cores} cores; L1d {} L2 {} L3 {}; THP {thp}",
        cache(0),
        cache(2),
        cache(3)
    )
}
