//! Multi-threaded behaviour that must hold on every run (fast enough for the normal suite),
//! over both layouts and every backend.

mod common;

use std::{collections::HashSet, sync::Barrier};

use common::{layouts, matrix, smallest, SplitMix};
use floe::{Backend, Error, FlatMap, Insert, Layout};

const THREADS: usize = 4;

fn map(layout: Layout, backend: Backend, keys: usize) -> FlatMap<u64, u64> {
    FlatMap::<u64, u64>::builder()
        .layout(layout)
        .capacity(keys)
        .backend(backend)
        .build()
        .unwrap()
}

#[test]
#[cfg_attr(miri, ignore = "slow under Miri")]
fn disjoint_inserts_all_land() {
    for (layout, backend) in matrix() {
        let m = map(layout, backend, 40_000);
        std::thread::scope(|s| {
            for t in 0..THREADS as u64 {
                let m = &m;
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        assert_eq!(
                            m.try_insert_new(i * THREADS as u64 + t, i).unwrap(),
                            Insert::Inserted
                        );
                    }
                });
            }
        });
        assert_eq!(m.len(), 40_000);
        for k in 0..40_000u64 {
            assert_eq!(
                m.get(&k),
                Some(k / THREADS as u64),
                "{layout:?} {backend:?} key {k}"
            );
        }
        assert_eq!(m.check_invariants(), 40_000);
    }
}

#[test]
#[cfg_attr(miri, ignore = "slow under Miri")]
fn racing_inserts_of_the_same_keys_have_one_winner_each() {
    for (layout, backend) in matrix() {
        let m = map(layout, backend, 5_000);
        let barrier = Barrier::new(THREADS);
        let winners: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS as u64)
                .map(|t| {
                    let (m, barrier) = (&m, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        (0..5_000u64)
                            .filter(|&k| m.try_insert_new(k, t).unwrap().is_inserted())
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all = HashSet::new();
        for (t, won) in winners.iter().enumerate() {
            for &k in won {
                assert!(
                    all.insert(k),
                    "{layout:?} {backend:?}: key {k} inserted twice"
                );
                assert_eq!(m.get(&k), Some(t as u64), "the winner's value stays");
            }
        }
        assert_eq!(all.len(), 5_000);
    }
}

#[test]
#[cfg_attr(miri, ignore = "slow under Miri")]
fn fetch_add_counts_exactly_under_contention() {
    for (layout, backend) in matrix() {
        let m = map(layout, backend, 64);
        std::thread::scope(|s| {
            for t in 0..THREADS as u64 {
                let m = &m;
                s.spawn(move || {
                    let mut rng = SplitMix(t);
                    for _ in 0..20_000 {
                        m.try_fetch_add(rng.below(64), 1).unwrap();
                    }
                });
            }
        });
        let mut total = 0;
        m.for_each(|_, v| total += v);
        assert_eq!(total, THREADS as u64 * 20_000, "{layout:?} {backend:?}");
    }
}

#[test]
#[cfg_attr(miri, ignore = "slow under Miri")]
fn churn_keeps_stable_keys_readable() {
    // Half the keys are never touched; others are inserted and removed in a loop in the same
    // bins (slots recycled constantly). Readers must always see every stable key.
    for (layout, backend) in matrix() {
        let builder = FlatMap::<u64, u64>::builder().layout(layout);
        let builder = match layout {
            Layout::Bins => builder.bins(64).link_buckets(64),
            Layout::Dense => builder.capacity(200),
        };
        let m = builder.backend(backend).build().unwrap();
        for k in 0..64u64 {
            assert!(m.try_insert_new(k, k * 10).unwrap().is_inserted());
        }
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let m = &m;
                s.spawn(move || {
                    for round in 0..2_000u64 {
                        for k in 0..32u64 {
                            let key = 1_000 + t * 1_000 + k;
                            match m.try_insert_new(key, round) {
                                Ok(_) | Err(Error::Full) => {}
                                Err(e) => panic!("{e}"),
                            }
                            m.put(key, round + 1);
                            m.remove(&key);
                        }
                    }
                });
            }
            for _ in 0..2 {
                let m = &m;
                s.spawn(move || {
                    for _ in 0..200 {
                        for k in 0..64u64 {
                            assert_eq!(m.get(&k), Some(k * 10), "stable key {k} vanished");
                        }
                    }
                });
            }
        });
        assert_eq!(m.check_invariants(), 64);
    }
}

#[test]
#[cfg_attr(miri, ignore = "slow under Miri")]
fn concurrent_clear_leaves_a_consistent_table() {
    for (layout, backend) in matrix() {
        let m = map(layout, backend, 10_000);
        std::thread::scope(|s| {
            let m = &m;
            s.spawn(move || {
                for k in 0..10_000u64 {
                    let _ = m.try_insert(k, k).unwrap();
                }
            });
            s.spawn(move || {
                for _ in 0..20 {
                    m.clear();
                }
            });
        });
        let live = m.check_invariants();
        let mut seen = 0;
        m.for_each(|k, v| {
            assert_eq!(k, v);
            seen += 1;
        });
        assert_eq!(seen, live);
    }
}

/// `for_each` while growths and shrinks run on another thread: it follows moved bins key by
/// key, so no key is visited twice and every key present throughout is visited, with its value.
#[test]
#[cfg_attr(miri, ignore = "thousands of operations across threads")]
fn for_each_meets_every_key_once_across_growth_and_shrink() {
    use floe::ResizeMode;
    const STABLE: u64 = 2000;
    for (layout, mode) in layouts().into_iter().flat_map(|layout| {
        [ResizeMode::Incremental, ResizeMode::Blocking].map(|mode| (layout, mode))
    }) {
        let map = smallest(layout)
            .resize_mode(mode)
            .hasher(floe::hash::Mix64::with_seed(5))
            .build()
            .unwrap();
        for k in 0..STABLE {
            assert!(map.try_insert_new(k, !k).unwrap().is_inserted());
        }
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut walks = 0;
        std::thread::scope(|s| {
            let (m, done) = (&map, &done);
            s.spawn(move || {
                // Bursts of other keys make the map grow; emptied, it shrinks back.
                for round in 0..40u64 {
                    let base = 1 << 40 | round << 20;
                    for k in base..base + 6000 {
                        assert!(m.try_insert_new(k, k).unwrap().is_inserted());
                    }
                    for k in base..base + 6000 {
                        assert_eq!(m.remove(&k), Some(k));
                    }
                    m.shrink_to_fit().unwrap();
                }
                done.store(true, std::sync::atomic::Ordering::Release);
            });
            while !done.load(std::sync::atomic::Ordering::Acquire) || walks < 3 {
                let mut seen = HashSet::new();
                let mut stable = 0;
                map.for_each(|k, v| {
                    assert!(
                        seen.insert(k),
                        "{layout:?} {mode:?}: for_each visited {k:#x} twice"
                    );
                    if k < STABLE {
                        assert_eq!(v, !k);
                        stable += 1;
                    } else {
                        assert_eq!(v, k);
                    }
                });
                assert_eq!(
                    stable, STABLE,
                    "{layout:?} {mode:?}: a key present throughout was missed"
                );
                walks += 1;
            }
        });
        assert!(walks >= 3);
        assert_eq!(map.check_invariants(), STABLE as usize);
    }
}

/// Shrinks and growths racing inserts, gets and removes on other threads: no key lost,
/// resurrected or duplicated, every table freed.
#[test]
#[cfg_attr(miri, ignore = "thousands of operations across threads")]
fn shrink_and_grow_while_others_work() {
    use floe::ResizeMode;
    for (layout, mode) in layouts().into_iter().flat_map(|layout| {
        [ResizeMode::Incremental, ResizeMode::Blocking].map(|mode| (layout, mode))
    }) {
        let map = std::sync::Arc::new(
            smallest(layout)
                .resize_mode(mode)
                .hasher(floe::hash::Mix64::with_seed(11))
                .build()
                .unwrap(),
        );
        let rounds = 30u64;
        std::thread::scope(|s| {
            // The shrinker: fills a burst of its own keys (growing the map), empties it,
            // shrinks.
            let m = map.clone();
            s.spawn(move || {
                for round in 0..rounds {
                    let base = 1 << 40 | round << 20;
                    for k in base..base + 3000 {
                        assert!(m.try_insert_new(k, k).unwrap().is_inserted());
                    }
                    for k in base..base + 3000 {
                        assert_eq!(m.remove(&k), Some(k));
                    }
                    let _ = m.shrink_to_fit().unwrap();
                }
            });
            // A worker on a steady set of keys that must never disappear, plus churn.
            let m = map.clone();
            s.spawn(move || {
                for k in 0..500u64 {
                    assert!(m.try_insert_new(k, k).unwrap().is_inserted());
                }
                for round in 0..rounds * 40 {
                    for k in (round % 7..500).step_by(7) {
                        assert_eq!(m.get(&k), Some(k), "steady key {k} lost");
                    }
                    let churn = 1 << 30 | round;
                    assert!(m.try_insert_new(churn, round).unwrap().is_inserted());
                    assert_eq!(m.try_fetch_add(churn, 1).unwrap(), Some(round));
                    assert_eq!(m.remove(&churn), Some(round + 1));
                }
            });
        });
        assert_eq!(map.check_invariants(), 500);
        assert_eq!(common::live_tables(&map), 1);
    }
}

/// Many more threads inside map operations than the machine has cores while the map grows:
/// every replaced table is freed once they are done (issue 11, item 6: with more threads in
/// guards than the reclaimer's batch, sized from the core count, a retired table stayed
/// allocated after quiescence).
#[test]
#[cfg_attr(miri, ignore = "96 threads")]
fn old_tables_are_freed_with_many_threads_inside() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for (layout, round) in layouts()
        .into_iter()
        .flat_map(|l| (0..3u64).map(move |r| (l, r)))
    {
        let map = smallest(layout).build().unwrap();
        let stop = AtomicBool::new(false);
        let readers = 96;
        let started = Barrier::new(readers + 1);
        std::thread::scope(|s| {
            for t in 0..readers as u64 {
                let (map, stop, started) = (&map, &stop, &started);
                s.spawn(move || {
                    started.wait();
                    let mut k = t;
                    while !stop.load(Ordering::Relaxed) {
                        let _ = map.get(&k);
                        k = k.wrapping_add(readers as u64);
                    }
                });
            }
            started.wait();
            // Growths retire tables while ~96 threads are inside gets.
            for k in 0..20_000u64 {
                assert!(map
                    .try_insert_new(round << 32 | k, k)
                    .unwrap()
                    .is_inserted());
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(map.stats().bins > 2 * 512, "the map grew several times");
        assert_eq!(map.check_invariants(), 20_000);
        assert_eq!(
            common::live_tables(&map),
            1,
            "round {round}: a replaced table outlived every guard"
        );
    }
}

/// Readers (single gets, batches and a pipeline) on a map whose table a writer replaces again
/// and again (a growth to a table large enough to be its own mapping, then a shrink back): a
/// reader left on a freed table would fault on the unmapped memory or read wrong values. The
/// targeted check of `src/reclaim.rs` outside loom.
#[test]
#[cfg_attr(miri, ignore = "large tables")]
fn readers_are_never_left_on_a_freed_table() {
    for layout in layouts() {
        readers_are_never_left_on_a_freed_table_of(layout);
    }
}

fn readers_are_never_left_on_a_freed_table_of(layout: Layout) {
    use std::sync::atomic::{AtomicBool, Ordering};
    const KEYS: u64 = 20_000;
    let map = FlatMap::<u64, u64>::builder()
        .layout(layout)
        .capacity(KEYS as usize)
        .build()
        .unwrap();
    for k in 0..KEYS {
        assert!(map.try_insert_new(k, !k).unwrap().is_inserted());
    }
    let stop = AtomicBool::new(false);
    let replaced = std::thread::scope(|s| {
        for reader in 0..3u64 {
            let (map, stop) = (&map, &stop);
            s.spawn(move || {
                let mut rng = SplitMix(reader);
                let keys: Vec<u64> = (0..64).map(|_| rng.next() % KEYS).collect();
                let mut values = vec![None; keys.len()];
                while !stop.load(Ordering::Relaxed) {
                    match reader {
                        0 => {
                            let k = rng.next() % KEYS;
                            assert_eq!(map.get(&k), Some(!k));
                        }
                        1 => {
                            map.batch().depth(8).get_many(&keys, &mut values).unwrap();
                            for (k, v) in keys.iter().zip(&values) {
                                assert_eq!(*v, Some(!k));
                            }
                        }
                        _ => {
                            let mut pipeline = map.pipeline::<u64>(16);
                            let check = |k: u64, r: floe::Response<u64>| {
                                assert_eq!(r, floe::Response::Get(Some(!k)));
                            };
                            for &k in &keys {
                                if let Some((k, r)) = pipeline.submit(k, floe::Request::Get(k)) {
                                    check(k, r);
                                }
                            }
                            pipeline.flush(check);
                        }
                    }
                }
            });
        }
        let mut replaced = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
        while std::time::Instant::now() < deadline {
            // ~8 MiB of table (a mapping of its own), then back to ~0.7 MiB.
            map.reserve(250_000).unwrap();
            replaced += 1;
            if map.shrink_to_fit().unwrap() {
                replaced += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        replaced
    });
    assert!(replaced >= 4, "the table was replaced {replaced} times");
    assert_eq!(map.check_invariants(), KEYS as usize);
    assert_eq!(common::live_tables(&map), 1);
}

/// Keys of writer `thread`'s churn: its `i`th key (distinct across threads and from `PINNED`).
fn churn_key(thread: u64, i: u64) -> u64 {
    (i * 2 + thread + 1_000_000).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Keys inserted first and never removed: a reader must find each throughout.
const PINNED: u64 = 1_000;

/// A table churned at a constant size (each writer removes its oldest key, then inserts a new
/// one) keeps its size: bins that once overflowed keep the link buckets they chained, so churn
/// spends the link pool with no more keys than before, and the map then refreshes the table
/// at its own size instead of growing it (a map of 1M keys grew fourfold, 38 to 154 bytes a
/// key). Two writers and a reader run through the refreshes on each default-layout map; the
/// reader must find every pinned key every time.
#[test]
fn churn_at_a_constant_size_keeps_the_table_size() {
    if cfg!(miri) {
        return;
    }
    const LIVE: u64 = 20_000;
    const ROUNDS: u64 = 150_000;
    let flat = FlatMap::<u64, u64>::with_capacity(2 * LIVE as usize + PINNED as usize);
    let any =
        floe::Map::<u64, u64>::try_with_capacity(2 * LIVE as usize + PINNED as usize).unwrap();
    type Ops<'a> = (
        &'a (dyn Fn(u64, u64) -> bool + Sync),
        &'a (dyn Fn(u64) -> Option<u64> + Sync),
        &'a (dyn Fn(u64) -> Option<u64> + Sync),
        &'a (dyn Fn() -> floe::Stats + Sync),
    );
    let flat_ops: Ops<'_> = (
        &|k, v| flat.insert_new(k, v).is_inserted(),
        &|k| flat.get(&k),
        &|k| flat.remove(&k),
        &|| flat.stats(),
    );
    let any_ops: Ops<'_> = (
        &|k, v| any.pin().try_insert_new(k, v).unwrap().is_inserted(),
        &|k| any.pin().get(&k).copied(),
        &|k| any.pin().remove(&k).copied(),
        &|| any.stats(),
    );
    for (name, (insert, get, remove, stats)) in [("FlatMap", flat_ops), ("Map", any_ops)] {
        for k in 0..PINNED {
            assert!(insert(k, k));
        }
        for thread in 0..2 {
            for i in 0..LIVE {
                assert!(insert(churn_key(thread, i), i));
            }
        }
        let bins = stats().bins;
        let done = std::sync::atomic::AtomicBool::new(false);
        let refreshes = std::thread::scope(|s| {
            let writers: Vec<_> = (0..2)
                .map(|thread| {
                    s.spawn(move || {
                        for i in 0..ROUNDS {
                            assert_eq!(remove(churn_key(thread, i)), Some(i), "{name}");
                            assert!(insert(churn_key(thread, i + LIVE), i + LIVE), "{name}");
                        }
                    })
                })
                .collect();
            let reader = s.spawn(|| {
                let (mut refreshes, mut chained) = (0, stats().link_buckets_used);
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    for k in 0..PINNED {
                        assert_eq!(get(k), Some(k), "{name}: pinned key {k}");
                    }
                    // A refresh chains only what the keys need: fewer buckets than were taken
                    // (the figure while a migration runs is both tables': skipped).
                    let now = stats();
                    if !now.migrating {
                        refreshes += usize::from(now.link_buckets_used < chained);
                        chained = now.link_buckets_used;
                    }
                }
                refreshes
            });
            for writer in writers {
                writer.join().unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap()
        });
        assert_eq!(stats().bins, bins, "{name}: the table grew under churn");
        assert!(refreshes > 0, "{name}: the link pool never ran out");
        for thread in 0..2 {
            for i in ROUNDS..ROUNDS + LIVE {
                assert_eq!(get(churn_key(thread, i)), Some(i), "{name}");
            }
        }
    }
}

/// `LocalMap`'s own growth path (plain stores, one owner) refreshes under churn as the
/// shared one does: the table keeps its size and every live key.
#[test]
fn a_local_map_churned_at_a_constant_size_keeps_the_table_size() {
    const LIVE: u64 = 20_000;
    let mut map = floe::LocalMap::from(FlatMap::<u64, u64>::with_capacity(LIVE as usize));
    for i in 0..LIVE {
        assert_eq!(map.insert(churn_key(0, i), i), None);
    }
    let bins = map.as_shared().stats().bins;
    let mut chained = map.as_shared().stats().link_buckets_used;
    let mut refreshes = 0;
    for i in 0..200_000 {
        assert_eq!(map.remove(&churn_key(0, i)), Some(i));
        assert_eq!(map.insert(churn_key(0, i + LIVE), i + LIVE), None);
        let now = map.as_shared().stats().link_buckets_used;
        refreshes += usize::from(now < chained);
        chained = now;
    }
    assert_eq!(
        map.as_shared().stats().bins,
        bins,
        "the table grew under churn"
    );
    assert!(refreshes > 0, "the link pool never ran out");
    assert_eq!(map.len(), LIVE as usize);
    let shared = map.into_shared();
    assert_eq!(shared.check_invariants(), LIVE as usize);
    for i in 200_000..200_000 + LIVE {
        assert_eq!(shared.get(&churn_key(0, i)), Some(i));
    }
}
