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
//! Every `FlatMap` run goes over both table layouts (`run`): the dense layout's map is as
//! many lines as the default one's bins (4 at least), fixed, or growing from 4 lines.
//!
//! The same runs check `Map<String, u64>` (`run_any`), with a hasher that puts every
//! contended key on one hash word: each of its writes swaps that one slot's pointer to a new
//! collision list, and `update` is a copy-on-write read-modify-write (a lost update shows as
//! a history with no valid order).
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

use std::hash::{BuildHasher, Hasher};

use common::{
    backends, growing_dense_map, growing_map, layouts, tiny_dense_map, tiny_map, SplitMix,
};
use floe::{hash::Mix64, Backend, CompareExchangeError, FlatMap, Insert, Layout, Map, ResizeMode};

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
    /// `Map`'s copy-on-write `update(k, |_| v)`: the new value if present.
    Update(u64),
    /// `Map`'s `update(k, |old| old + d)`: the new value if present (a read-modify-write).
    AddIfPresent(u64),
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
        Call::Update(v) => (Ret::Value(state.map(|_| v)), state.map(|_| v)),
        Call::AddIfPresent(d) => {
            let next = state.map(|o| o.wrapping_add(d));
            (Ret::Value(next), next)
        }
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

/// A map under test, on `u64` keys and values.
trait Subject: Send + Sync + 'static {
    /// A random operation of those the map has, with `value` for the ones that write one.
    fn choose(rng: &mut SplitMix, value: u64) -> Call;
    /// Run `call` on `key`.
    fn call(&self, key: u64, call: Call) -> Ret;
    fn shrink_to_fit(&self);
    fn reserve(&self, additional: usize);
    /// After a round, with every thread stopped: check the map and empty it.
    fn end_round(&self);
}

impl Subject for FlatMap<u64, u64, Mix64> {
    fn choose(rng: &mut SplitMix, value: u64) -> Call {
        match rng.below(14) {
            0..=2 => Call::Get,
            3..=5 => Call::Insert(value),
            6 => Call::Upsert(value),
            7..=8 => Call::Put(value),
            9 => Call::FetchAdd(value),
            10 => Call::CompareExchange(rng.below(3), value),
            _ => Call::Remove,
        }
    }

    fn call(&self, key: u64, call: Call) -> Ret {
        match call {
            Call::Get => Ret::Value(self.get(&key)),
            Call::Insert(v) => Ret::Value(match self.try_insert_new(key, v).expect("room") {
                Insert::Inserted => None,
                Insert::Present(p) => Some(p),
                Insert::Shadowed => unreachable!("no shadows in the history"),
            }),
            Call::Upsert(v) => Ret::Value(self.try_insert(key, v).expect("room")),
            Call::Put(v) => Ret::Value(self.put(key, v)),
            Call::FetchAdd(d) => Ret::Value(self.try_fetch_add(key, d).expect("room")),
            Call::CompareExchange(c, n) => {
                Ret::Cas(self.compare_exchange(&key, c, n).map_err(|e| match e {
                    CompareExchangeError::Absent => None,
                    CompareExchangeError::Mismatch(v) => Some(v),
                }))
            }
            Call::Remove => Ret::Value(self.remove(&key)),
            Call::Clear => {
                self.clear();
                Ret::Value(None)
            }
            Call::Update(_) | Call::AddIfPresent(_) => unreachable!("not chosen for FlatMap"),
        }
    }

    fn shrink_to_fit(&self) {
        FlatMap::shrink_to_fit(self).expect("shrink");
    }

    fn reserve(&self, additional: usize) {
        FlatMap::reserve(self, additional).expect("reserve");
    }

    fn end_round(&self) {
        self.check_invariants();
        assert_eq!(
            common::live_tables(self),
            1,
            "a replaced table was not freed"
        );
        self.clear();
    }
}

/// A hasher for `Map<String, u64>` that gives every contended key (`c…`) one hash word, so
/// they all share one slot through a collision list, and other keys a real hash.
#[derive(Clone, Copy)]
struct Crowd(u64);

struct CrowdHasher {
    seed: u64,
    bytes: Vec<u8>,
}

impl Hasher for CrowdHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }
    fn finish(&self) -> u64 {
        if self.bytes.first() == Some(&b'c') {
            return self.seed;
        }
        Mix64::with_seed(self.seed).hash_one(&self.bytes[..])
    }
}

impl BuildHasher for Crowd {
    type Hasher = CrowdHasher;
    fn build_hasher(&self) -> CrowdHasher {
        CrowdHasher {
            seed: self.0,
            bytes: Vec::new(),
        }
    }
}

/// `Map`'s key for the key number `key`: contended keys (below `FILLER`) start with `c`.
fn map_key(key: u64) -> String {
    if key < FILLER {
        format!("c{key}")
    } else {
        format!("f{key:x}")
    }
}

impl Subject for Map<String, u64, Crowd> {
    fn choose(rng: &mut SplitMix, value: u64) -> Call {
        match rng.below(12) {
            0..=2 => Call::Get,
            3..=5 => Call::Insert(value),
            6 => Call::Upsert(value),
            7 => Call::Update(value),
            8 => Call::AddIfPresent(value),
            _ => Call::Remove,
        }
    }

    fn call(&self, key: u64, call: Call) -> Ret {
        let m = self.pin();
        let key = map_key(key);
        Ret::Value(match call {
            Call::Get => m.get(key.as_str()).copied(),
            Call::Insert(v) => match m.try_insert_new(key, v).expect("room") {
                Insert::Inserted => None,
                Insert::Present(&p) => Some(p),
                Insert::Shadowed => unreachable!("`Map` makes no shadows"),
            },
            Call::Upsert(v) => m.try_insert(key, v).expect("room").copied(),
            Call::Update(v) => m.update(key.as_str(), |_| v).copied(),
            Call::AddIfPresent(d) => m.update(key.as_str(), |&o| o.wrapping_add(d)).copied(),
            Call::Remove => m.remove(key.as_str()).copied(),
            Call::Clear => {
                drop(m);
                self.clear();
                None
            }
            other => unreachable!("not chosen for Map: {other:?}"),
        })
    }

    fn shrink_to_fit(&self) {
        Map::shrink_to_fit(self).expect("shrink");
    }

    fn reserve(&self, additional: usize) {
        Map::reserve(self, additional).expect("reserve");
    }

    fn end_round(&self) {
        assert_eq!(self.check_invariants(), self.len());
        self.clear();
    }
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

/// `run_on` for `FlatMap` of both layouts: the default one of the config's geometry, the
/// dense one of as many lines (at least 4), fixed or growing from 4 lines.
fn run(backend: Backend, config: &Config, seed: u64) {
    for layout in layouts() {
        let map = |round: usize| match (layout, config.grow) {
            (Layout::Bins, None) => tiny_map(backend, config.bins, config.links, seed),
            (Layout::Dense, None) => tiny_dense_map(backend, config.bins * 3, seed),
            (Layout::Bins, Some((mode, _))) => {
                growing_map(backend, 2, config.links, mode, seed ^ round as u64)
            }
            (Layout::Dense, Some((mode, _))) => {
                growing_dense_map(backend, mode, seed ^ round as u64)
            }
        };
        let maps = match config.grow {
            None => vec![map(0)],
            Some(_) => (0..config.rounds).map(map).collect(),
        };
        run_on(&format!("{layout:?} {backend:?}"), maps, config, seed);
    }
}

/// `run` for `Map<String, u64>`: every contended key on one hash word (`Crowd`).
fn run_any(backend: Backend, config: &Config, seed: u64) {
    for layout in layouts() {
        let map = |round: usize, bins: usize, max_bins: usize, mode: ResizeMode| {
            let builder = Map::<String, u64>::builder().layout(layout);
            match layout {
                Layout::Bins => builder.bins(bins).link_buckets(config.links),
                // As many lines as the default layout's bins (4 at least), as `run`.
                Layout::Dense => builder.capacity(bins * 3),
            }
            .max_bins(max_bins)
            .resize_mode(mode)
            .backend(backend)
            .hasher(Crowd(seed ^ round as u64))
            .build()
            .expect("map")
        };
        let maps = match config.grow {
            None => vec![map(0, config.bins, config.bins, ResizeMode::Incremental)],
            Some((mode, _)) => (0..config.rounds)
                .map(|round| map(round, 2, usize::MAX, mode))
                .collect(),
        };
        run_on(&format!("Map, {layout:?} {backend:?}"), maps, config, seed);
    }
}

/// Run the configuration's rounds on `maps` (one for all rounds, or one per round) and check
/// every key's history.
fn run_on<M: Subject>(label: &str, maps: Vec<M>, config: &Config, seed: u64) {
    let maps = Arc::new(maps);
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
                            assert_eq!(map.call(k, Call::Insert(!k)), Ret::Value(None));
                        }
                        if whole_map && rng.below(12) == 0 {
                            match rng.below(3) {
                                0 => {
                                    let invoked = clock.fetch_add(1, Ordering::SeqCst);
                                    let ret = map.call(ALL_KEYS, Call::Clear);
                                    let returned = clock.fetch_add(1, Ordering::SeqCst);
                                    let call = Call::Clear;
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
                                1 => map.shrink_to_fit(),
                                _ => map.reserve(rng.below(64) as usize),
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
                        let call = M::choose(&mut rng, value);
                        let invoked = clock.fetch_add(1, Ordering::SeqCst);
                        let ret = map.call(key, call);
                        let returned = clock.fetch_add(1, Ordering::SeqCst);
                        if whole_map {
                            for j in 0..fillers {
                                let k = filler(i, j);
                                // `None` if a clear ran since it was inserted.
                                let ret = map.call(k, Call::Remove);
                                assert!(
                                    matches!(ret, Ret::Value(None)) || ret == Ret::Value(Some(!k)),
                                    "filler key {k:#x}: {ret:?}"
                                );
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
                            assert_eq!(
                                map.call(k, Call::Get),
                                Ret::Value(Some(!k)),
                                "filler key {k:#x} lost"
                            );
                        }
                    }
                    barrier.wait();
                    // Thread 0 resets the table for the next round once everyone has stopped.
                    if t == 0 {
                        map.end_round();
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
                "{label}, seed {seed:#x}, round {round}, key {key}: not linearizable:\n{history:#?}"
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

/// `Map<String, u64>` with every contended key on one hash word: each operation swaps the one
/// slot's pointer to a new collision list (or entry) under contention.
#[test]
#[cfg_attr(miri, ignore = "threads and thousands of rounds: too slow under Miri")]
fn quick_map_contended_keys_are_linearizable() {
    for backend in backends() {
        let config = Config {
            threads: 3,
            keys: 3,
            ops_per_thread: 6,
            rounds: 1000,
            bins: 2,
            links: 2,
            grow: None,
            whole_map: false,
        };
        run_any(backend, &config, 0xa11);
    }
}

/// As above while the map grows from two bins, with clear, shrink and reserve in the mix.
#[test]
#[cfg_attr(miri, ignore = "threads and thousands of rounds: too slow under Miri")]
fn quick_map_linearizable_while_growing_with_clear_shrink_and_reserve() {
    for backend in backends() {
        for mode in [ResizeMode::Incremental, ResizeMode::Blocking] {
            let config = Config {
                threads: 3,
                keys: 3,
                ops_per_thread: 6,
                rounds: 200,
                bins: 2,
                links: 1,
                grow: Some((mode, 8)),
                whole_map: true,
            };
            run_any(backend, &config, 0xa12);
        }
    }
}

#[test]
#[ignore = "stress: run by ci/stress.sh"]
fn stress_map_is_linearizable() {
    let rounds: usize = stress_rounds() / 4;
    for backend in backends() {
        for (grow, whole_map, threads) in [
            (None, false, 4),
            (Some((ResizeMode::Incremental, 12)), false, 4),
            (Some((ResizeMode::Blocking, 12)), true, 3),
        ] {
            let config = Config {
                threads,
                keys: 3,
                ops_per_thread: 6,
                rounds,
                bins: 2,
                links: 1,
                grow,
                whole_map,
            };
            run_any(backend, &config, 0xa13 + threads as u64);
        }
    }
}
