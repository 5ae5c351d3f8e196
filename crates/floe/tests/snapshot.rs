//! Strongly consistent snapshots (DLHT §3.4.4): the pairs present at one instant, while
//! writers run, across growth, and refused from inside an operation.

mod common;

use common::StopOnDrop;

use std::sync::atomic::{AtomicBool, Ordering};

use floe::{Error, FlatMap, FlatSet, Layout, Prefetch, Request, Response};

#[test]
fn a_snapshot_of_a_quiet_map_is_its_contents() {
    for map in [
        FlatMap::<u64, u64>::new(),
        FlatMap::builder().bins(2).build().unwrap(),
        FlatMap::builder().bins(64).max_bins(64).build().unwrap(),
        common::smallest(Layout::Dense).build().unwrap(),
        FlatMap::builder()
            .layout(Layout::Dense)
            .capacity(200)
            .max_bins(1)
            .build()
            .unwrap(),
    ] {
        for k in 0..150u64 {
            assert!(map.insert_new(k, k * 3).is_inserted());
        }
        map.remove(&7);
        let mut pairs = map.snapshot().unwrap();
        pairs.sort_unstable();
        let expected: Vec<_> = (0..150u64)
            .filter(|&k| k != 7)
            .map(|k| (k, k * 3))
            .collect();
        assert_eq!(pairs, expected);
    }
    let set: FlatSet<u32> = (0..10).collect();
    let mut keys = set.snapshot().unwrap();
    keys.sort_unstable();
    assert_eq!(keys, (0..10).collect::<Vec<_>>());
}

#[test]
fn a_snapshot_from_inside_an_operation_is_refused() {
    for layout in common::layouts() {
        refused_inside_an_operation(layout);
    }
}

fn refused_inside_an_operation(layout: Layout) {
    let map = FlatMap::<u64, u64>::builder()
        .layout(layout)
        .build()
        .unwrap();
    assert!(map.insert_new(1, 1).is_inserted());
    map.update(&1, |v| {
        assert_eq!(map.snapshot(), Err(Error::InsideOperation));
        v + 1
    });
    map.for_each(|_, _| assert_eq!(map.snapshot(), Err(Error::InsideOperation)));
    // And the writers were not left paused.
    assert_eq!(map.put(1, 5), Some(2));
    assert_eq!(map.snapshot().unwrap(), [(1, 5)]);
}

/// Each writer owns `CHAIN` keys and writes round `r` into them in order (key 0 first), so at
/// any instant its keys read `r, .., r, r - 1, .., r - 1`: a prefix of the current round. A
/// snapshot must show exactly such a state for every writer; a walk that is not at one instant
/// sees later rounds in keys it reaches later, whatever the table order. Another thread keeps
/// inserting fresh keys, so the map grows under the snapshots.
#[test]
fn every_snapshot_is_one_instant_while_writers_run_and_the_map_grows() {
    for layout in common::layouts() {
        chains_under_snapshots(false, layout);
    }
}

/// As above, with the writers' puts in order-preserving batches that prefetch: the batch pins
/// the map, so each put is a writer nested in an operation that may begin after a snapshot
/// paused the writers, and must then wait inside it.
#[test]
fn writes_nested_in_batches_respect_snapshots() {
    for layout in common::layouts() {
        chains_under_snapshots(true, layout);
    }
}

fn chains_under_snapshots(batched: bool, layout: Layout) {
    const WRITERS: u64 = 2;
    const CHAIN: u64 = 64;
    let snapshots = if cfg!(miri) { 2 } else { 200 };
    let map = common::smallest(layout).build().unwrap();
    let first_size = map.stats().bins;
    for w in 0..WRITERS {
        for i in 0..CHAIN {
            assert!(map.insert_new(w << 32 | i, 0).is_inserted());
        }
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (map, done) = (&map, &done);
            s.spawn(move || {
                let mut round = 0;
                let mut responses = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    round += 1;
                    if batched {
                        let puts: Vec<_> = (0..CHAIN)
                            .map(|i| Request::Put(w << 32 | i, round))
                            .collect();
                        responses.clear();
                        map.batch()
                            .depth(8)
                            .prefetch(Prefetch::Always)
                            .run(&puts, &mut responses);
                        assert!(responses
                            .iter()
                            .all(|r| *r == Response::Put(Some(round - 1))));
                    } else {
                        for i in 0..CHAIN {
                            assert_eq!(map.put(w << 32 | i, round), Some(round - 1));
                        }
                    }
                }
            });
        }
        let (map, done) = (&map, &done);
        s.spawn(move || {
            let mut next = 1u64 << 40;
            while !done.load(Ordering::Relaxed) && next < (1 << 40) + 200_000 {
                assert!(map.insert_new(next, 0).is_inserted());
                next += 1;
            }
        });
        let _stop = StopOnDrop(done);
        for _ in 0..snapshots {
            let pairs = map.snapshot().unwrap();
            for w in 0..WRITERS {
                let mut chain: Vec<_> = pairs
                    .iter()
                    .filter(|(k, _)| k >> 32 == w)
                    .copied()
                    .collect();
                chain.sort_unstable();
                assert_eq!(chain.len(), CHAIN as usize, "writer {w}'s keys");
                let first = chain[0].1;
                for pair in chain.windows(2) {
                    let (earlier, later) = (pair[0].1, pair[1].1);
                    assert!(
                        later == earlier || (later + 1 == earlier && earlier == first),
                        "{layout:?} writer {w}: not one instant: {:?}",
                        chain.iter().map(|p| p.1).collect::<Vec<_>>()
                    );
                }
            }
        }
    });
    assert!(map.stats().bins > first_size, "the map grew meanwhile");
}

/// The any-key map's snapshot: one instant, as above, with the values behind pointers that are
/// swapped by every put (the references stay valid after the writers resume).
#[test]
fn the_any_key_map_snapshots_one_instant_too() {
    for layout in common::layouts() {
        any_key_map_snapshots_one_instant(layout);
    }
}

fn any_key_map_snapshots_one_instant(layout: Layout) {
    const CHAIN: u64 = 32;
    let snapshots = if cfg!(miri) { 2 } else { 100 };
    let map = floe::Map::<u64, String>::builder()
        .layout(layout)
        .build()
        .unwrap();
    for i in 0..CHAIN {
        assert!(map.pin().insert_new(i, "0".to_string()).is_inserted());
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (map, done) = (&map, &done);
        s.spawn(move || {
            let mut round = 0u64;
            while !done.load(Ordering::Relaxed) {
                round += 1;
                let m = map.pin();
                for i in 0..CHAIN {
                    m.insert(i, round.to_string());
                }
            }
        });
        let _stop = StopOnDrop(done);
        for _ in 0..snapshots {
            let m = map.pin();
            let mut pairs = m.snapshot().unwrap();
            pairs.sort_unstable();
            assert_eq!(pairs.len(), CHAIN as usize);
            let rounds: Vec<u64> = pairs.iter().map(|(_, v)| v.parse().unwrap()).collect();
            let first = rounds[0];
            assert!(
                rounds
                    .windows(2)
                    .all(|p| p[1] == p[0] || (p[1] + 1 == p[0] && p[0] == first)),
                "not one instant: {rounds:?}"
            );
        }
    });
}

/// A snapshot called from inside an operation answers at once, also while another thread's
/// snapshot is running (which waits for that operation).
#[test]
fn a_nested_snapshot_never_waits_for_a_running_one() {
    let map = FlatMap::<u64, u64>::new();
    for k in 0..1000 {
        assert!(map.insert_new(k, k).is_inserted());
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (map, done) = (&map, &done);
        s.spawn(move || {
            while !done.load(Ordering::Relaxed) {
                assert_eq!(map.snapshot().unwrap().len(), 1000);
            }
        });
        let _stop = StopOnDrop(done);
        for k in 0..if cfg!(miri) { 5 } else { 2000 } {
            map.update(&k, |v| {
                assert_eq!(map.snapshot(), Err(Error::InsideOperation));
                v
            });
        }
    });
}

/// A writer that waits for an open shadow (an upsert of its key) does not hold up a snapshot,
/// and the shadow's commit is not held up by the snapshot waiting for that writer.
#[test]
fn an_upsert_waiting_on_a_shadow_does_not_deadlock_a_snapshot() {
    let map = FlatMap::<u64, u64>::new();
    let shadow = map.insert_shadow(5, 50).unwrap();
    std::thread::scope(|s| {
        let upserter = s.spawn(|| map.insert(5, 51));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let snapshotter = s.spawn(|| map.snapshot().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(20));
        shadow.commit();
        assert_eq!(upserter.join().unwrap(), Some(50));
        let pairs = snapshotter.join().unwrap();
        assert!(
            pairs.is_empty() || pairs == [(5, 50)] || pairs == [(5, 51)],
            "{pairs:?}"
        );
    });
    assert_eq!(map.get(&5), Some(51));
}
