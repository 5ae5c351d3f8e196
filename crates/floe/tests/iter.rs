//! Iterators on `FlatMap` (both layouts) and `Map`: every key present for the whole iteration
//! is yielded exactly once while other threads insert and remove other keys and the map grows.

mod common;

use common::StopOnDrop;

use std::{
    collections::HashMap,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use floe::{FlatMap, Map};

/// Keys `0..STABLE` stay in the map throughout; a writer inserts and removes keys above them,
/// growing a map built with two bins several times, and asks it to shrink every so often.
const STABLE: u64 = 500;

fn churn(stop: &AtomicBool, mut op: impl FnMut(u64, bool), shrink: impl Fn()) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // Waves: 4000 keys in, then out, then a shrink.
        let wave = i % 8_000;
        let key = STABLE + wave % 4_000;
        op(key, wave < 4_000);
        if wave == 7_999 {
            shrink();
        }
        i += 1;
    }
}

/// Iterations to run: at least 20 and until the writer has shrunk the map twice (at most ten
/// seconds; one under Miri).
fn rounds(shrinks: &AtomicUsize) -> impl Iterator<Item = usize> + '_ {
    let start = Instant::now();
    (0..).take_while(move |&round| {
        if cfg!(miri) {
            return round < 1;
        }
        round < 20
            || (shrinks.load(Ordering::Relaxed) < 2 && start.elapsed() < Duration::from_secs(10))
    })
}

fn check_counts(counts: HashMap<u64, usize>) {
    for k in 0..STABLE {
        assert_eq!(counts.get(&k), Some(&1), "stable key {k}");
    }
    for (k, n) in counts {
        assert_eq!(n, 1, "key {k} yielded {n} times");
    }
}

/// The operations the concurrent test needs of a map.
trait Iterated: Sync {
    fn put(&self, key: u64, insert: bool);
    fn shrink(&self) -> bool;
    /// How many times `iter` yielded each key (checking each pair's value).
    fn counts(&self) -> HashMap<u64, usize>;
}

impl Iterated for FlatMap<u64, u64> {
    fn put(&self, k: u64, insert: bool) {
        if insert {
            let _ = self.try_insert_new(k, k).unwrap();
        } else {
            self.remove(&k);
        }
    }
    fn shrink(&self) -> bool {
        self.shrink_to_fit().unwrap()
    }
    fn counts(&self) -> HashMap<u64, usize> {
        let mut counts = HashMap::new();
        for (k, v) in self.iter() {
            assert_eq!(k, v);
            *counts.entry(k).or_insert(0) += 1;
        }
        counts
    }
}

impl Iterated for Map<u64, String> {
    fn put(&self, k: u64, insert: bool) {
        let m = self.pin();
        if insert {
            let _ = m.try_insert_new(k, k.to_string()).unwrap();
        } else {
            m.remove(&k);
        }
    }
    fn shrink(&self) -> bool {
        self.shrink_to_fit().unwrap()
    }
    fn counts(&self) -> HashMap<u64, usize> {
        let m = self.pin();
        let mut counts = HashMap::new();
        for (k, v) in m.iter() {
            assert_eq!(&k.to_string(), v);
            *counts.entry(*k).or_insert(0) += 1;
        }
        counts
    }
}

/// A `Map` walked in pieces (`MapRef::iter_run`), each run of bins under a guard of its own,
/// as floe-server streams a metadump.
struct InPieces(Map<u64, String>);

impl Iterated for InPieces {
    fn put(&self, k: u64, insert: bool) {
        self.0.put(k, insert);
    }
    fn shrink(&self) -> bool {
        self.0.shrink()
    }
    fn counts(&self) -> HashMap<u64, usize> {
        let mut counts = HashMap::new();
        let mut from = Some(0);
        while let Some(at) = from {
            from = self.0.pin().iter_run(at, |k, v| {
                assert_eq!(&k.to_string(), v);
                *counts.entry(*k).or_insert(0) += 1;
            });
        }
        counts
    }
}

/// Iterate `map` (holding the stable keys) while a writer churns and shrinks it.
fn stable_keys_are_seen_once(map: &impl Iterated) {
    for k in 0..STABLE {
        map.put(k, true);
    }
    let (stop, shrinks) = (AtomicBool::new(false), AtomicUsize::new(0));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            churn(
                &stop,
                |k, insert| map.put(k, insert),
                || {
                    if map.shrink() {
                        shrinks.fetch_add(1, Ordering::Relaxed);
                    }
                },
            )
        });
        let _stop = StopOnDrop(&stop);
        for _ in rounds(&shrinks) {
            check_counts(map.counts());
        }
    });
    if !cfg!(miri) {
        assert!(
            shrinks.load(Ordering::Relaxed) >= 2,
            "the map never shrank during the test"
        );
    }
}

#[test]
fn flat_map_iter_sees_stable_keys_once_while_growing() {
    for layout in common::layouts() {
        stable_keys_are_seen_once(&common::smallest(layout).build().unwrap());
    }
}

#[test]
fn map_iter_sees_stable_keys_once_while_growing() {
    stable_keys_are_seen_once(&Map::<u64, String>::builder().bins(2).build().unwrap());
    let dense = Map::<u64, String>::builder()
        .layout(floe::Layout::Dense)
        .capacity(1)
        .build()
        .unwrap();
    stable_keys_are_seen_once(&dense);
}

/// A walk in pieces, each under a new guard, with growths and shrinks between and during
/// them: every stable key once.
#[test]
fn map_walked_in_pieces_sees_stable_keys_once_while_growing() {
    stable_keys_are_seen_once(&InPieces(
        Map::<u64, String>::builder().bins(2).build().unwrap(),
    ));
}

#[test]
fn iterators_of_quiet_maps_yield_everything() {
    for layout in common::layouts() {
        quiet_maps_yield_everything(layout);
    }
}

fn quiet_maps_yield_everything(layout: floe::Layout) {
    let flat = FlatMap::<u32, u32>::builder()
        .layout(layout)
        .capacity(100)
        .build()
        .unwrap();
    let map = Map::<String, u32>::try_with_capacity(100).unwrap();
    assert_eq!(flat.iter().count(), 0);
    assert_eq!(map.pin().iter().count(), 0);
    for k in 0..1000u32 {
        let _ = flat.try_insert_new(k, k + 1).unwrap();
        let _ = map.pin().try_insert_new(k.to_string(), k + 1).unwrap();
    }
    let mut keys: Vec<_> = flat.keys().collect();
    keys.sort_unstable();
    assert_eq!(keys, (0..1000).collect::<Vec<_>>());
    assert_eq!(flat.values().map(u64::from).sum::<u64>(), 500_500);
    let m = map.pin();
    let mut keys: Vec<u32> = m.keys().map(|k| k.parse().unwrap()).collect();
    keys.sort_unstable();
    assert_eq!(keys, (0..1000).collect::<Vec<_>>());
    assert_eq!(m.values().map(|&v| u64::from(v)).sum::<u64>(), 500_500);
    assert_eq!((&m).into_iter().count(), 1000);
    assert_eq!((&flat).into_iter().count(), 1000);
}
