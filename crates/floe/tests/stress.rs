//! Concurrent histories checked for linearizability, key by key.
//!
//! Threads run random operations on a handful of contended keys of a tiny table (so keys share
//! bins, chains fill and slots are recycled constantly). Every operation records its call and
//! return on a global clock; after each round, each key's sub-history is checked against the
//! sequential specification with a Wing–Gong style search (memoised on the set of linearized
//! operations and the key's state). Linearizability is local, so per-key checks cover the
//! whole history.
//!
//! The growing variants start every round from a fresh two-bin map and have each thread
//! insert filler keys between its operations, so the map resizes several times per round while
//! the contended keys' bins are moved under gets, inserts, puts, removes and fetch-adds; every
//! filler key must be there afterwards, and every replaced table freed.
//!
//! `quick_*` tests run in the normal suite (about a second); `stress_*` are `#[ignore]`d and
//! run by `ci/stress.sh` for minutes.

mod common;

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Barrier,
    },
};

use common::{backends, growing_map, tiny_map, SplitMix};
use floe::{Backend, CompareExchangeError, Insert, ResizeMode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Get,
    Insert(u64),
    Upsert(u64),
    Put(u64),
    FetchAdd(u64),
    CompareExchange(u64, u64),
    Remove,
    /// `clear()`: in every key's history (it empties each bin atomically, so each key at one
    /// instant within the call).
    Clear,
}

/// What an operation returned, normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ret {
    /// `Option<value>`: get, upsert, put, fetch_add, remove (previous value); insert: `None`
    /// means inserted, `Some(v)` means present.
    Value(Option<u64>),
    Cas(Result<u64, Option<u64>>),
}

#[derive(Clone, Copy, Debug)]
struct Event {
    call: Call,
    ret: Ret,
    invoked: u64,
    returned: u64,
}

/// The sequential specification: apply `call` to `state`; `None` if `ret` is impossible.
fn step(state: Option<u64>, call: Call, ret: Ret) -> Option<Option<u64>> {
    let (expected, next) = match call {
        Call::Get => (Ret::Value(state), state),
        Call::Insert(v) => (Ret::Value(state), Some(state.unwrap_or(v))),
        Call::Upsert(v) => (Ret::Value(state), Some(v)),
        Call::Put(v) => (Ret::Value(state), state.map(|_| v)),
        Call::FetchAdd(d) => (
            Ret::Value(state),
            Some(state.map_or(d, |o| o.wrapping_add(d))),
        ),
        Call::CompareExchange(c, n) => match state {
            Some(x) if x == c => (Ret::Cas(Ok(c)), Some(n)),
            other => (Ret::Cas(Err(other)), other),
        },
        Call::Remove => (Ret::Value(state), None),
        Call::Clear => (Ret::Value(None), None),
    };
    (expected == ret).then_some(next)
}

/// Whether `history` (one key's events) is linearizable from `initial`.
fn linearizable(history: &[Event], initial: Option<u64>) -> bool {
    assert!(history.len() <= 64, "history too long for the bitmask");
    fn search(
        h: &[Event],
        done: u64,
        state: Option<u64>,
        seen: &mut HashSet<(u64, Option<u64>)>,
    ) -> bool {
        if done.count_ones() as usize == h.len() {
            return true;
        }
        if !seen.insert((done, state)) {
            return false;
        }
        // An operation may go next only if it was called before every pending operation
        // returned (otherwise some pending op finished strictly before it started).
        let earliest_return = (0..h.len())
            .filter(|&i| done & (1 << i) == 0)
            .map(|i| h[i].returned)
            .min()
            .unwrap();
        (0..h.len())
            .filter(|&i| done & (1 << i) == 0 && h[i].invoked < earliest_return)
            .any(|i| {
                step(state, h[i].call, h[i].ret)
                    .is_some_and(|next| search(h, done | (1 << i), next, seen))
            })
    }
    search(history, 0, initial, &mut HashSet::new())
}

struct Config {
    threads: usize,
    keys: u64,
    ops_per_thread: usize,
    rounds: usize,
    bins: usize,
    links: usize,
    /// Grow from a fresh map each round, with this many filler inserts per operation.
    grow: Option<(ResizeMode, u64)>,
    /// Whole-map calls among the operations: `clear` (checked in every key's history),
    /// `shrink_to_fit` and `reserve` (which must change no key). Fillers are then removed
    /// after each operation (so the map can shrink) instead of checked at the end.
    whole_map: bool,
}

/// The key under which `clear` events are logged: part of every key's history.
const ALL_KEYS: u64 = u64::MAX;

/// Filler keys live far from the contended keys `0..keys`.
const FILLER: u64 = 1 << 62;

fn run(backend: Backend, config: &Config, seed: u64) {
    let maps: Arc<Vec<_>> = Arc::new(match config.grow {
        None => vec![tiny_map(backend, config.bins, config.links, seed)],
        Some((mode, _)) => (0..config.rounds)
            .map(|round| growing_map(backend, 2, config.links, mode, seed ^ round as u64))
            .collect(),
    });
    let fillers = config.grow.map_or(0, |(_, f)| f);
    let clock = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(config.threads));
    let handles: Vec<_> = (0..config.threads)
        .map(|t| {
            let (maps, clock, barrier) = (maps.clone(), clock.clone(), barrier.clone());
            let (keys, ops, rounds) = (config.keys, config.ops_per_thread, config.rounds);
            let whole_map = config.whole_map;
            std::thread::spawn(move || {
                let mut rng = SplitMix(seed ^ ((t as u64 + 1) * 0x1234_5678_9abc));
                let mut log = Vec::with_capacity(rounds);
                for round in 0..rounds {
                    let map = &maps[round % maps.len()];
                    barrier.wait();
                    let mut events = Vec::with_capacity(ops);
                    let filler =
                        |i: usize, j: u64| FILLER | (t as u64) << 40 | (i as u64) << 20 | j;
                    for i in 0..ops {
                        for j in 0..fillers {
                            let k = filler(i, j);
                            assert_eq!(map.insert(k, !k), Ok(Insert::Inserted));
                        }
                        if whole_map && rng.below(12) == 0 {
                            match rng.below(3) {
                                0 => {
                                    let invoked = clock.fetch_add(1, Ordering::SeqCst);
                                    map.clear();
                                    let returned = clock.fetch_add(1, Ordering::SeqCst);
                                    let (call, ret) = (Call::Clear, Ret::Value(None));
                                    events.push((
                                        ALL_KEYS,
                                        Event {
                                            call,
                                            ret,
                                            invoked,
                                            returned,
                                        },
                                    ));
                                }
                                1 => {
                                    map.shrink_to_fit().expect("shrink");
                                }
                                _ => map.reserve(rng.below(64) as usize).expect("reserve"),
                            }
                        }
                        let key = rng.below(keys);
                        // Half the values from a tiny set (to provoke same-value ABA), half
                        // unique to this thread and operation.
                        let value = if rng.below(2) == 0 {
                            rng.below(3)
                        } else {
                            (t as u64) << 40 | (round * ops + i) as u64
                        };
                        let call = match rng.below(14) {
                            0..=2 => Call::Get,
                            3..=5 => Call::Insert(value),
                            6 => Call::Upsert(value),
                            7..=8 => Call::Put(value),
                            9 => Call::FetchAdd(value),
                            10 => Call::CompareExchange(rng.below(3), value),
                            _ => Call::Remove,
                        };
                        let invoked = clock.fetch_add(1, Ordering::SeqCst);
                        let ret = match call {
                            Call::Get => Ret::Value(map.get(&key)),
                            Call::Insert(v) => {
                                Ret::Value(match map.insert(key, v).expect("room") {
                                    Insert::Inserted => None,
                                    Insert::Present(p) => Some(p),
                                })
                            }
                            Call::Upsert(v) => Ret::Value(map.upsert(key, v).expect("room")),
                            Call::Put(v) => Ret::Value(map.put(key, v)),
                            Call::FetchAdd(d) => Ret::Value(map.fetch_add(key, d).expect("room")),
                            Call::CompareExchange(c, n) => {
                                Ret::Cas(map.compare_exchange(&key, c, n).map_err(|e| match e {
                                    CompareExchangeError::Absent => None,
                                    CompareExchangeError::Mismatch(v) => Some(v),
                                }))
                            }
                            Call::Remove => Ret::Value(map.remove(&key)),
                            Call::Clear => unreachable!("clears are issued above"),
                        };
                        let returned = clock.fetch_add(1, Ordering::SeqCst);
                        if whole_map {
                            for j in 0..fillers {
                                let k = filler(i, j);
                                // `None` if a clear ran since it was inserted.
                                if let Some(v) = map.remove(&k) {
                                    assert_eq!(v, !k, "filler key {k:#x}");
                                }
                            }
                        }
                        events.push((
                            key,
                            Event {
                                call,
                                ret,
                                invoked,
                                returned,
                            },
                        ));
                    }
                    log.push(events);
                    for i in (0..ops).filter(|_| !whole_map) {
                        for j in 0..fillers {
                            let k = filler(i, j);
                            assert_eq!(map.get(&k), Some(!k), "filler key {k:#x} lost");
                        }
                    }
                    barrier.wait();
                    // Thread 0 resets the table for the next round once everyone has stopped.
                    if t == 0 {
                        map.check_invariants();
                        assert_eq!(
                            common::live_tables(map),
                            1,
                            "a replaced table was not freed"
                        );
                        map.clear();
                    }
                }
                log
            })
        })
        .collect();
    let logs: Vec<Vec<Vec<(u64, Event)>>> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    for round in 0..config.rounds {
        for key in 0..config.keys {
            let history: Vec<Event> = logs
                .iter()
                .flat_map(|log| log[round].iter())
                .filter(|(k, _)| *k == key || *k == ALL_KEYS)
                .map(|(_, e)| *e)
                .collect();
            assert!(
                linearizable(&history, None),
                "{backend:?}, seed {seed:#x}, round {round}, key {key}: not linearizable:\n{history:#?}"
            );
        }
    }
}

/// Rounds per stress configuration: `FLOE_STRESS_ROUNDS`, 20000 by default.
fn stress_rounds() -> usize {
    std::env::var("FLOE_STRESS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn checker_rejects_impossible_histories() {
    let e = |call, ret, invoked, returned| Event {
        call,
        ret,
        invoked,
        returned,
    };
    // A get that returns a value nobody wrote.
    assert!(!linearizable(
        &[e(Call::Get, Ret::Value(Some(5)), 0, 1)],
        None
    ));
    // Two inserts of one key that both succeed.
    let both = [
        e(Call::Insert(1), Ret::Value(None), 0, 3),
        e(Call::Insert(2), Ret::Value(None), 1, 2),
    ];
    assert!(!linearizable(&both, None));
    // A get that sees a value removed before it started.
    let stale = [
        e(Call::Insert(1), Ret::Value(None), 0, 1),
        e(Call::Remove, Ret::Value(Some(1)), 2, 3),
        e(Call::Get, Ret::Value(Some(1)), 4, 5),
    ];
    assert!(!linearizable(&stale, None));
    // Overlapping operations may be ordered either way.
    let overlap = [
        e(Call::Insert(1), Ret::Value(None), 0, 3),
        e(Call::Get, Ret::Value(None), 1, 2),
        e(Call::Put(7), Ret::Value(Some(1)), 2, 6),
        e(Call::Get, Ret::Value(Some(7)), 7, 8),
    ];
    assert!(linearizable(&overlap, None));
    // A lost update: put returned success but a later get does not see it, nothing else ran.
    let lost = [
        e(Call::Insert(1), Ret::Value(None), 0, 1),
        e(Call::Put(2), Ret::Value(Some(1)), 2, 3),
        e(Call::Get, Ret::Value(Some(1)), 4, 5),
    ];
    assert!(!linearizable(&lost, None));
}

#[test]
#[cfg_attr(miri, ignore = "threads and thousands of rounds: too slow under Miri")]
fn quick_contended_keys_are_linearizable() {
    for backend in backends() {
        let config = Config {
            threads: 3,
            keys: 3,
            ops_per_thread: 6,
            rounds: 2000,
            bins: 2,
            links: 12,
            grow: None,
            whole_map: false,
        };
        run(backend, &config, 0xf10e);
    }
}

#[test]
#[cfg_attr(miri, ignore = "threads and thousands of rounds: too slow under Miri")]
fn quick_contended_keys_are_linearizable_while_the_map_grows() {
    for backend in backends() {
        for mode in [ResizeMode::Incremental, ResizeMode::Blocking] {
            let config = Config {
                threads: 3,
                keys: 3,
                ops_per_thread: 6,
                rounds: 300,
                bins: 2,
                links: 1,
                grow: Some((mode, 8)),
                whole_map: false,
            };
            run(backend, &config, 0x9e0);
        }
    }
}

#[test]
#[ignore = "stress: run by ci/stress.sh"]
fn stress_contended_keys_are_linearizable() {
    let rounds: usize = stress_rounds();
    for backend in backends() {
        for (i, threads) in [2usize, 4].into_iter().enumerate() {
            let config = Config {
                threads,
                keys: 3,
                ops_per_thread: 6,
                rounds,
                bins: 2,
                links: 16,
                grow: None,
                whole_map: false,
            };
            run(backend, &config, 0xbad5eed + i as u64);
        }
    }
}

#[test]
#[ignore = "stress: run by ci/stress.sh"]
fn stress_single_key_is_linearizable() {
    // Every thread on one key: the hottest contention, constant slot recycling.
    let rounds: usize = stress_rounds();
    for backend in backends() {
        let config = Config {
            threads: 3,
            keys: 1,
            ops_per_thread: 6,
            rounds,
            bins: 2,
            links: 4,
            grow: None,
            whole_map: false,
        };
        run(backend, &config, 0x51);
    }
}

#[test]
#[ignore = "stress: run by ci/stress.sh"]
fn stress_linearizable_while_growing() {
    let rounds: usize = stress_rounds() / 4;
    for backend in backends() {
        for (mode, threads) in [(ResizeMode::Incremental, 4), (ResizeMode::Blocking, 3)] {
            let config = Config {
                threads,
                keys: 3,
                ops_per_thread: 6,
                rounds,
                bins: 2,
                links: 1,
                grow: Some((mode, 12)),
                whole_map: false,
            };
            run(backend, &config, 0x6e0 + threads as u64);
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "threads and thousands of rounds: too slow under Miri")]
fn quick_linearizable_with_clear_shrink_and_reserve() {
    for backend in backends() {
        for mode in [ResizeMode::Incremental, ResizeMode::Blocking] {
            let config = Config {
                threads: 3,
                keys: 3,
                ops_per_thread: 6,
                rounds: 300,
                bins: 2,
                links: 1,
                grow: Some((mode, 8)),
                whole_map: true,
            };
            run(backend, &config, 0xc1ea);
        }
    }
}

#[test]
#[ignore = "stress: run by ci/stress.sh"]
fn stress_linearizable_with_clear_shrink_and_reserve() {
    let rounds: usize = stress_rounds() / 4;
    for backend in backends() {
        for (mode, threads) in [(ResizeMode::Incremental, 4), (ResizeMode::Blocking, 3)] {
            let config = Config {
                threads,
                keys: 3,
                ops_per_thread: 6,
                rounds,
                bins: 2,
                links: 1,
                grow: Some((mode, 12)),
                whole_map: true,
            };
            run(backend, &config, 0x5c1 + threads as u64);
        }
    }
}
