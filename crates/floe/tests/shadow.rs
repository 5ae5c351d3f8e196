//! Shadow inserts (DLHT §3.2.2): hidden keys that are taken, committed or aborted, across
//! growth and shrinking and under contention, with the lock-manager pattern they serve.
//! `FlatMap`'s run on both layouts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use floe::{FlatMap, FlatSet, Insert, Layout, Taken};

const LAYOUTS: [Layout; 2] = [Layout::Bins, Layout::Dense];

/// A map of `layout` whose first table is its smallest (two bins, or four dense lines),
/// growing from there unless `fixed`.
fn smallest(layout: Layout, fixed: bool) -> FlatMap<u64, u64> {
    let builder = smallest_builder(layout);
    let builder = if fixed { builder.max_bins(2) } else { builder };
    builder.build().unwrap()
}

/// The builder of `smallest`'s growing map, for any value type.
fn smallest_builder<V: floe::Inline>(layout: Layout) -> floe::Builder<u64, V> {
    let builder = FlatMap::builder().layout(layout);
    match layout {
        Layout::Dense => builder.capacity(1),
        _ => builder.bins(2),
    }
}

/// Each of `keys` still has its open shadow after `what`: hidden from gets, and an insert
/// of it is refused as shadowed.
fn assert_still_shadowed<S: std::hash::BuildHasher>(
    map: &FlatMap<u64, u64, S>,
    keys: std::ops::Range<u64>,
    what: &str,
) {
    for k in keys {
        assert_eq!(map.get(&k), None);
        assert_eq!(
            map.insert_new(k, 0),
            Insert::Shadowed,
            "shadow {k} lost in {what}"
        );
    }
}

#[test]
fn a_shadow_is_hidden_from_everything_but_inserts() {
    for layout in LAYOUTS {
        shadow_hidden_from_everything_but_inserts(layout);
    }
}

fn shadow_hidden_from_everything_but_inserts(layout: Layout) {
    let map = FlatMap::<u64, u64>::builder()
        .layout(layout)
        .capacity(64)
        .build()
        .unwrap();
    let shadow = map.insert_shadow(1, 10).unwrap();
    assert_eq!((shadow.key(), shadow.value()), (1, 10));
    assert_eq!(
        map.insert_shadow(1, 11).err(),
        Some(Taken::Shadowed),
        "a second shadow"
    );
    assert_eq!(map.insert_new(1, 12), Insert::Shadowed);
    assert_eq!(map.insert_new(1, 12).present(), None);
    assert_eq!(map.get(&1), None);
    assert!(!map.contains_key(&1));
    assert_eq!(map.put(1, 13), None);
    assert_eq!(map.update(&1, |v| v + 1), None);
    assert_eq!(map.remove(&1), None);
    assert!(map.compare_exchange(&1, 10, 14).is_err());
    assert_eq!(map.remove_if(&1, |_| true), None);
    assert_eq!(map.len(), 0);
    assert_eq!(map.iter().count(), 0);
    map.clear();
    assert_eq!(
        map.insert_new(1, 15),
        Insert::Shadowed,
        "clear leaves shadows"
    );
    assert_eq!(format!("{shadow:?}"), "Shadow { key: 1, value: 10 }");
    shadow.commit();
    assert_eq!(map.get(&1), Some(10));
    assert_eq!(map.len(), 1);
    assert_eq!(map.insert_shadow(1, 16).err(), Some(Taken::Present(10)));
    let shadow = map.insert_shadow(2, 20).unwrap();
    shadow.abort();
    assert_eq!(map.get(&2), None);
    assert_eq!(map.insert_new(2, 21), Insert::Inserted);
    // Dropping an open shadow aborts it.
    drop(map.insert_shadow(3, 30).unwrap());
    assert_eq!(map.insert_new(3, 31), Insert::Inserted);
    assert_eq!(map.check_invariants(), 3);
}

#[test]
fn a_shadow_commits_its_own_value_whatever_came_before_in_its_slot() {
    // Remove a key and shadow-insert it again with the same value, many times, in the
    // smallest fixed map: the shadow takes the slot the key had, and the commit must publish
    // the shadow's value (the engine stores a shadow so that no operation on the old
    // incarnation can match it; the loom models race the stalled operations themselves).
    for layout in LAYOUTS {
        commit_publishes_the_shadows_value(layout);
    }
}

fn commit_publishes_the_shadows_value(layout: Layout) {
    let map = smallest(layout, true);
    for round in 0..100u64 {
        assert_eq!(map.insert_new(7, round), Insert::Inserted);
        assert_eq!(map.remove(&7), Some(round));
        let shadow = map.insert_shadow(7, round).unwrap();
        assert_eq!(map.put(7, round + 1), None, "a put reached a shadow");
        assert!(map.compare_exchange(&7, round, round + 1).is_err());
        shadow.commit();
        assert_eq!(map.remove(&7), Some(round));
    }
    assert_eq!(map.check_invariants(), 0);
}

#[test]
fn growth_and_shrinking_carry_open_shadows() {
    for layout in LAYOUTS {
        moves_carry_open_shadows(layout);
    }
}

fn moves_carry_open_shadows(layout: Layout) {
    let map = smallest(layout, false);
    let shadows: Vec<_> = (0..2_000u64)
        .map(|k| map.insert_shadow(k, k + 1).unwrap())
        .collect();
    // Grow many times over, with the shadows in the tables being moved.
    for k in 1_000_000..1_100_000u64 {
        assert!(map.insert_new(k, k).is_inserted());
    }
    assert_eq!(map.len(), 100_000);
    assert_eq!(map.check_invariants(), 100_000);
    assert_still_shadowed(&map, 0..2_000, "a move");
    // Shrink with the shadows still open.
    for k in 1_000_000..1_100_000u64 {
        map.remove(&k);
    }
    assert!(map.shrink_to_fit().unwrap());
    if layout == Layout::Dense {
        // Sized for the shadows too (each holds a slot), so they are in lines, not in the
        // stash's list (which every get past both lines would then lock and scan).
        assert!(
            map.stats().bins * 4 >= 2 * 2_000,
            "{} lines",
            map.stats().bins
        );
    }
    for k in 0..2_000u64 {
        assert_eq!(
            map.insert_new(k, 0),
            Insert::Shadowed,
            "shadow {k} lost in the shrink"
        );
    }
    for shadow in shadows {
        if shadow.key() % 2 == 0 {
            shadow.commit();
        } else {
            shadow.abort();
        }
    }
    assert_eq!(map.len(), 1_000);
    assert_eq!(map.check_invariants(), 1_000);
    // Sized for the shadows, the lines hold them (a shrink sized for the keys alone pushed a
    // thousand into the stash). A shadow is never displaced, so now and then (about one run in
    // a thousand) one finds both its lines full of shadows and waits in the stash's list; its
    // commit goes into a line if an abort freed a slot there by then, else into the stash.
    assert!(
        map.stats().stashed <= 4,
        "{} committed shadows landed in the stash",
        map.stats().stashed
    );
    for k in 0..2_000u64 {
        assert_eq!(map.get(&k), (k % 2 == 0).then_some(k + 1));
    }
}

/// A dense map of 64 keys whose hasher gives keys below 16 one hash (a crowd on two lines)
/// and every other key its own.
fn crowded_dense_map() -> FlatMap<u64, u64, common::WordHash> {
    use common::{SplitMix, WordHash};
    const CROWD: u64 = 0x1234_5678_9abc_def0;
    FlatMap::builder()
        .layout(Layout::Dense)
        .capacity(64)
        .hasher(WordHash(
            |k| if k < 16 { CROWD } else { SplitMix(k).next() },
        ))
        .build()
        .unwrap()
}

/// A growth that finds a crowd's two new lines full keeps the shadows past them in the stash's
/// shadow list; one committed after a slot of its lines was freed goes into that slot, not
/// into the stash (which every get that misses both lines would then read).
#[test]
fn a_stashed_shadow_commits_into_a_slot_freed_since() {
    let map = crowded_dense_map();
    // The home's four keys, four shadows filling the alternative, two keys in the stash.
    for k in 0..4u64 {
        assert_eq!(map.insert_new(k, k + 100), Insert::Inserted);
    }
    let shadows: Vec<_> = (4..8u64)
        .map(|k| map.insert_shadow(k, k + 100).unwrap())
        .collect();
    for k in 8..10u64 {
        assert_eq!(map.insert_new(k, k + 100), Insert::Inserted);
    }
    assert_eq!(map.stats().stashed, 2);
    // The home line moves first here (with its stashed keys), so two shadows find no room.
    map.reserve(1000).unwrap();
    assert_eq!(
        map.stats().stashed,
        0,
        "the crowd's lines moved in another order"
    );
    assert_still_shadowed(&map, 4..8, "the move");
    for k in 0..2u64 {
        assert_eq!(map.remove(&k), Some(k + 100));
    }
    for shadow in shadows {
        shadow.commit();
    }
    assert_eq!(
        map.stats().stashed,
        0,
        "a committed shadow went to the stash"
    );
    assert_eq!(map.check_invariants(), 8);
    for k in 2..10u64 {
        assert_eq!(map.get(&k), Some(k + 100), "key {k}");
    }
    assert_eq!(map.get(&0), None);
}

/// Many threads (more than cores) race to shadow-insert the same key each round: exactly one
/// wins, the others see the winner's value, readers never see it before the commit or ever
/// after an abort, and the map grows under open shadows.
#[test]
fn one_shadow_wins_each_round_and_readers_see_only_commits() {
    for layout in LAYOUTS {
        one_shadow_wins_each_round(layout);
    }
}

fn one_shadow_wins_each_round(layout: Layout) {
    const THREADS: u64 = 4;
    let rounds: u64 = if cfg!(miri) { 5 } else { 2_000 };
    let map = smallest(layout, false);
    let round = AtomicU64::new(0);
    let winners = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let barrier = std::sync::Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        // A reader: a key of an odd round is aborted and must never be seen; an even round's
        // key is committed with the winner's value.
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let r = round.load(Ordering::Relaxed);
                for key in r.saturating_sub(2)..=r {
                    if let Some(v) = map.get(&key) {
                        assert_eq!(key % 2, 0, "an aborted shadow of round {key} was seen");
                        assert_eq!(v / 100, key, "wrong value {v} for {key}");
                    }
                }
            }
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (map, round, winners, barrier) = (&map, &round, &winners, &barrier);
                s.spawn(move || {
                    for r in 0..rounds {
                        barrier.wait();
                        let mine = r * 100 + t;
                        let outcome = map.insert_shadow(r, mine);
                        // Everyone tries while the winner's shadow is still open.
                        barrier.wait();
                        match outcome {
                            Ok(shadow) => {
                                winners.fetch_add(1, Ordering::Relaxed);
                                // Make the map grow under the open shadow now and then.
                                assert!(map.insert_new(1 << 40 | r, r).is_inserted());
                                assert_eq!(shadow.value(), mine);
                                if r % 2 == 0 {
                                    shadow.commit();
                                } else {
                                    shadow.abort();
                                }
                                round.store(r + 1, Ordering::Relaxed);
                            }
                            Err(taken) => assert_eq!(taken, Taken::Shadowed),
                        }
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    assert_eq!(winners.into_inner(), rounds);
    for r in 0..rounds {
        assert_eq!(map.get(&r).is_some(), r % 2 == 0, "round {r}");
    }
    assert_eq!(map.check_invariants(), map.len());
}

/// A shadow is a lock: threads take it on a key with `insert_shadow` (retrying while it is
/// held), update a plain (non-atomic-RMW) counter under it, and release it with
/// an abort. A lock that ever let two holders in would lose increments. The set grows
/// meanwhile (other keys come and go), so the locks are moved while held.
#[test]
fn shadow_locks_exclude_each_other_while_the_set_grows() {
    for layout in LAYOUTS {
        shadow_locks_exclude_each_other(layout);
    }
}

fn shadow_locks_exclude_each_other(layout: Layout) {
    const THREADS: usize = 4;
    let rounds: u64 = if cfg!(miri) { 5 } else { 3_000 };
    let locks = FlatSet::<u64>::from(smallest_builder(layout).build().unwrap());
    let counters: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (locks, counters) = (&locks, &counters);
            s.spawn(move || {
                for i in 0..rounds {
                    let key = i % 3;
                    let lock = loop {
                        match locks.insert_shadow(key) {
                            Some(lock) => break lock,
                            None => std::hint::spin_loop(),
                        }
                    };
                    // Under the lock: a load and a store, not an atomic add.
                    let counter = &counters[key as usize];
                    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    locks.insert(1 << 32 | (t as u64) << 20 | i); // growth
                    assert!(!locks.insert(key), "the lock vanished while held");
                    lock.abort();
                }
            });
        }
    });
    let total: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    assert_eq!(total, THREADS as u64 * rounds);
    assert_eq!(locks.len(), THREADS * rounds as usize);
}

/// `upsert` and `fetch_add` of a shadowed key wait for its commit or abort, then act on what
/// it left.
#[test]
fn upserts_wait_for_the_shadow_to_be_resolved() {
    for (layout, commit) in LAYOUTS.into_iter().flat_map(|l| [(l, true), (l, false)]) {
        let map = FlatMap::<u64, u64>::builder()
            .layout(layout)
            .build()
            .unwrap();
        let shadow = map.insert_shadow(5, 50).unwrap();
        let started = AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                started.store(true, Ordering::Relaxed);
                (map.insert(5, 51), map.fetch_add(5, 1))
            });
            while !started.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!waiter.is_finished(), "an upsert went past an open shadow");
            if commit {
                shadow.commit();
            } else {
                shadow.abort();
            }
            let (upserted, added) = waiter.join().unwrap();
            assert_eq!(upserted, commit.then_some(50));
            assert_eq!(added, Some(51));
        });
        assert_eq!(map.get(&5), Some(52));
    }
}

mod common;

use common::{FourWords, StopOnDrop};
use floe::{Compute, Map, MapRequest, MapResponse, Operation};

#[test]
fn a_map_shadow_is_hidden_from_everything_but_inserts() {
    let map = Map::<String, u64>::with_capacity(64);
    let m = map.pin();
    let shadow = m.insert_shadow("a".to_string(), 10).unwrap();
    assert_eq!((shadow.key().as_str(), *shadow.value()), ("a", 10));
    assert!(matches!(
        m.insert_shadow("a".to_string(), 11),
        Err(Taken::Shadowed)
    ));
    assert_eq!(m.insert_new("a".to_string(), 12), Insert::Shadowed);
    assert_eq!(m.get("a"), None);
    assert!(!m.contains_key("a"));
    assert_eq!(m.put("a".to_string(), 13), None);
    assert_eq!(m.update("a", |v| v + 1), None);
    assert_eq!(m.remove("a"), None);
    assert_eq!(m.remove_if("a", |_| true), None);
    let abort = |_: Option<&u64>| Operation::<u64, &str>::Abort("no");
    assert_eq!(m.compute("a".to_string(), abort), Compute::Aborted("no"));
    let remove = |_: Option<&u64>| Operation::<u64, ()>::Remove;
    assert_eq!(m.compute("a".to_string(), remove), Compute::Absent);
    assert_eq!(map.len(), 0);
    assert_eq!(m.iter().count(), 0);
    assert_eq!(m.snapshot().unwrap(), []);
    let mut found = [Some(&0)];
    m.get_many(&["a"], &mut found).unwrap();
    assert_eq!(found, [None]);
    assert_eq!(
        m.execute(MapRequest::<_, _, str>::InsertNew("a".to_string(), 1)),
        MapResponse::InsertNew(Ok(Insert::Shadowed))
    );
    m.retain(|_, _| false);
    map.clear();
    assert_eq!(
        m.insert_new("a".to_string(), 15),
        Insert::Shadowed,
        "clear leaves shadows"
    );
    assert_eq!(map.check_invariants(), 0);
    assert!(format!("{shadow:?}").starts_with("MapShadow { key: \"a\", value: 10"));
    assert_eq!(shadow.commit(), &10);
    assert_eq!(m.get("a"), Some(&10));
    assert_eq!(map.len(), 1);
    assert!(matches!(
        m.insert_shadow("a".to_string(), 16),
        Err(Taken::Present(&10))
    ));
    m.insert_shadow("b".to_string(), 20).unwrap().abort();
    assert_eq!(m.get("b"), None);
    assert_eq!(m.insert_new("b".to_string(), 21), Insert::Inserted);
    drop(m.insert_shadow("c".to_string(), 30).unwrap());
    assert_eq!(m.insert_new("c".to_string(), 31), Insert::Inserted);
    assert_eq!(map.check_invariants(), 3);
}

/// Every key on one of four hash words: shadows share collision lists with present keys and
/// with each other; `clear` removes the present keys beside them and keeps the shadows.
#[test]
fn map_shadows_share_collision_lists() {
    let map = Map::<String, u64>::builder()
        .bins(2)
        .hasher(FourWords)
        .build()
        .unwrap();
    let m = map.pin();
    let key = |k: u64| format!("key-{k}");
    for k in 0..40 {
        assert_eq!(m.insert_new(key(k), k), Insert::Inserted);
    }
    let shadows: Vec<_> = (40..60)
        .map(|k| m.insert_shadow(key(k), k).unwrap())
        .collect();
    assert_eq!((map.len(), map.check_invariants()), (40, 40));
    for k in 40..60 {
        assert_eq!(m.get(key(k).as_str()), None);
        assert_eq!(m.insert_new(key(k), 0), Insert::Shadowed);
    }
    map.clear();
    assert_eq!((map.len(), map.check_invariants()), (0, 0));
    for k in 0..40 {
        assert_eq!(m.get(key(k).as_str()), None, "clear left {k}");
    }
    for k in 40..60 {
        assert_eq!(
            m.insert_new(key(k), 0),
            Insert::Shadowed,
            "clear took shadow {k}"
        );
    }
    for k in 0..10 {
        assert_eq!(m.insert_new(key(k), k + 100), Insert::Inserted);
    }
    for shadow in shadows {
        let k = *shadow.value();
        if k % 2 == 0 {
            assert_eq!(shadow.commit(), &k);
        } else {
            shadow.abort();
        }
    }
    assert_eq!((map.len(), map.check_invariants()), (20, 20));
    for k in 40..60 {
        assert_eq!(m.get(key(k).as_str()), (k % 2 == 0).then_some(&k));
    }
}

#[test]
fn growth_carries_open_map_shadows() {
    let map = Map::<u64, u64>::builder().bins(2).build().unwrap();
    let m = map.pin();
    let shadows: Vec<_> = (0..2_000u64)
        .map(|k| m.insert_shadow(k, k + 1).unwrap())
        .collect();
    for k in 1_000_000..1_050_000u64 {
        assert!(m.insert_new(k, k).is_inserted());
    }
    assert!(map.stats().bins > 20_000, "the map grew");
    assert_eq!((map.len(), map.check_invariants()), (50_000, 50_000));
    for k in 0..2_000u64 {
        assert_eq!(m.get(&k), None);
        assert_eq!(
            m.insert_new(k, 0),
            Insert::Shadowed,
            "shadow {k} lost in a move"
        );
    }
    for k in 1_000_000..1_050_000u64 {
        m.remove(&k);
    }
    assert!(map.shrink_to_fit().unwrap());
    for shadow in shadows {
        if shadow.key() % 2 == 0 {
            shadow.commit();
        } else {
            shadow.abort();
        }
    }
    assert_eq!((map.len(), map.check_invariants()), (1_000, 1_000));
    for k in 0..2_000u64 {
        assert_eq!(m.get(&k), (k % 2 == 0).then_some(&(k + 1)));
    }
}

/// Threads (more than cores) race to shadow-insert one string key each round: exactly one
/// wins, and the others' upserts of the key wait for its commit or abort, so each round ends
/// with the key holding one value. Threads record what went wrong rather than panic, so a
/// failure cannot leave the others waiting at the barrier.
#[test]
fn one_map_shadow_wins_each_round_and_upserts_wait_for_it() {
    const THREADS: u64 = 4;
    let rounds: u64 = if cfg!(miri) { 3 } else { 1_000 };
    let map = Map::<String, u64>::builder().bins(2).build().unwrap();
    let barrier = std::sync::Barrier::new(THREADS as usize);
    let winners = AtomicU64::new(0);
    let wrong = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (map, barrier, winners, wrong) = (&map, &barrier, &winners, &wrong);
            s.spawn(move || {
                let complain = |what: String| {
                    let mut wrong = wrong.lock().unwrap();
                    if wrong.len() < 5 {
                        wrong.push(what);
                    }
                };
                for r in 0..rounds {
                    let key = format!("row-{r}");
                    barrier.wait();
                    let m = map.pin();
                    let mine = r * 1_000 + t;
                    let outcome = m.insert_shadow(key.clone(), mine);
                    barrier.wait();
                    match outcome {
                        Ok(shadow) => {
                            winners.fetch_add(1, Ordering::Relaxed);
                            if m.get(key.as_str()).is_some() {
                                complain(format!("round {r}: an open shadow was visible"));
                            }
                            if r % 2 == 0 {
                                shadow.commit();
                            } else {
                                shadow.abort();
                            }
                        }
                        Err(Taken::Shadowed) => {
                            // Waits until the winner resolved its shadow.
                            let before = m.insert(key.clone(), mine + 500).copied();
                            if before.is_some_and(|before| before / 1_000 != r) {
                                complain(format!("round {r}: a value of another round"));
                            }
                        }
                        Err(Taken::Present(v)) => {
                            complain(format!("round {r}: present {v} before any commit"));
                        }
                    }
                }
            });
        }
    });
    assert_eq!(wrong.into_inner().unwrap(), Vec::<String>::new());
    assert_eq!(
        winners.load(Ordering::Relaxed),
        rounds,
        "one winner per round"
    );
    assert_eq!(map.len() as u64, rounds);
    assert_eq!(map.check_invariants() as u64, rounds);
    let m = map.pin();
    let keys: std::collections::HashSet<&String> = m.keys().collect();
    assert_eq!(keys.len() as u64, rounds, "a key is present twice");
}

/// A key present for the whole of a `clear` is gone after it, also when an open shadow shares
/// its hash word and another thread keeps replacing its value meanwhile (the clear keeps the
/// word for the shadow and takes the present entries out afterwards, wherever the puts moved
/// them).
#[test]
fn clear_removes_a_key_beside_a_shadow_while_it_is_put() {
    let rounds = if cfg!(miri) { 5 } else { 5_000 };
    let map = Map::<String, u64>::builder()
        .hasher(FourWords)
        .build()
        .unwrap();
    let stop = AtomicBool::new(false);
    let mut survived = 0;
    std::thread::scope(|s| {
        let handle = map.pin();
        // "a" and "e" share a hash word under `FourWords` (97 and 101, mod 4).
        let shadow = handle.insert_shadow("e".to_string(), 0).unwrap();
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let m = map.pin();
                for _ in 0..64 {
                    i += 1;
                    m.put("a".to_string(), i);
                }
            }
        });
        for _ in 0..rounds {
            assert!(map.pin().insert_new("a".to_string(), 0).is_inserted());
            map.clear();
            survived += usize::from(map.pin().get("a").is_some());
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(shadow.commit(), &0, "the shadow outlived every clear");
    });
    assert_eq!(survived, 0, "a key present throughout a clear survived it");
    assert_eq!(map.check_invariants(), 1);
}

/// A key whose `Eq` panics while `PANIC_EQ` is set, all on one hash word.
#[derive(Debug)]
struct Touchy(u32);

static PANIC_EQ: AtomicBool = AtomicBool::new(false);

impl std::hash::Hash for Touchy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        0u32.hash(state);
    }
}

impl PartialEq for Touchy {
    fn eq(&self, other: &Self) -> bool {
        assert!(!PANIC_EQ.load(Ordering::Relaxed), "Eq panics");
        self.0 == other.0
    }
}

impl Eq for Touchy {}

#[test]
fn a_panicking_eq_in_a_shadow_insert_leaves_the_map_whole() {
    let map = Map::<Touchy, u32>::new();
    let m = map.pin();
    assert!(m.insert_new(Touchy(1), 1).is_inserted());
    PANIC_EQ.store(true, Ordering::Relaxed);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = m.insert_shadow(Touchy(2), 2);
    }));
    PANIC_EQ.store(false, Ordering::Relaxed);
    assert!(outcome.is_err(), "the comparison panicked");
    assert_eq!(map.len(), 1);
    assert_eq!(map.check_invariants(), 1);
    let shadow = m.insert_shadow(Touchy(2), 2).unwrap();
    assert_eq!(map.len(), 1);
    shadow.commit();
    assert_eq!((map.len(), map.check_invariants()), (2, 2));
}

/// Three threads mix shadow inserts (committed or aborted, with colliding inserts and removes
/// while they are open), inserts, puts, updates, removes, `retain` and `clear` on keys that
/// all share four hash words, in a map that grows: afterwards every count agrees, no key is
/// present twice, and no shadow is left.
#[test]
fn shadows_in_shared_lists_survive_every_other_write() {
    let steps: u64 = if cfg!(miri) { 50 } else { 20_000 };
    let map = Map::<String, u64>::builder()
        .bins(2)
        .hasher(FourWords)
        .build()
        .unwrap();
    let key = |k: u64| format!("k{k}");
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let map = &map;
            s.spawn(move || {
                let mut x = t * 7919 + 1;
                for i in 0..steps {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = key(x % 24);
                    let m = map.pin();
                    match x % 9 {
                        0 | 1 => {
                            if let Ok(shadow) = m.insert_shadow(k.clone(), i) {
                                let _ = m.insert_new(key((x >> 8) % 24), 1);
                                m.remove(key((x >> 16) % 24).as_str());
                                if x % 2 == 0 {
                                    shadow.commit();
                                } else {
                                    shadow.abort();
                                }
                            }
                        }
                        2 => {
                            let _ = m.insert_new(k, i);
                        }
                        3 => {
                            m.put(k, i);
                        }
                        4 => {
                            m.remove(k.as_str());
                        }
                        5 => {
                            m.update(k.as_str(), |v| v + 1);
                        }
                        6 if t == 0 && i % 50 == 0 => {
                            drop(m);
                            map.clear();
                        }
                        7 => {
                            let _ = m.get(k.as_str());
                        }
                        _ => m.retain(|_, v| v % 3 != 0),
                    }
                }
            });
        }
    });
    let keys = map.check_invariants();
    assert_eq!(keys, map.len());
    let m = map.pin();
    let mut present: Vec<&String> = m.keys().collect();
    present.sort();
    present.dedup();
    assert_eq!(present.len(), keys, "a key present twice");
    for k in 0..24 {
        assert_ne!(
            m.insert_new(key(k), 0),
            Insert::Shadowed,
            "shadow {k} left open"
        );
    }
}

/// Shadows among keys that all hash alike, on the dense layout: two lines hold eight of the
/// crowd (keys and shadows), the stash takes keys past them (a shadow is not stashed by a
/// user: `HashCollisions`, as for any write no table would separate), and a growth moves the
/// shadows with the keys, into the stash's shadows when the crowd's two new lines are full.
/// Every shadow is still taken after it, and resolves once.
#[test]
fn dense_shadows_in_a_crowd_move_with_their_keys() {
    use floe::Error;
    let map = crowded_dense_map();
    // Six keys (the home's four, then two in the alternative), two shadows after them in
    // the alternative, two keys in the stash.
    for k in 0..6u64 {
        assert_eq!(map.insert_new(k, k + 100), Insert::Inserted);
    }
    let shadows: Vec<_> = (6..8u64)
        .map(|k| map.insert_shadow(k, k + 100).unwrap())
        .collect();
    for k in 8..10u64 {
        assert_eq!(map.insert_new(k, k + 100), Insert::Inserted);
    }
    assert_eq!(map.stats().stashed, 2);
    assert!(matches!(
        map.try_insert_shadow(10, 1),
        Err(Error::HashCollisions)
    ));
    assert_eq!(map.check_invariants(), 8);
    let lines = map.stats().bins;
    map.reserve(1000).unwrap();
    assert!(map.stats().bins > lines);
    assert_eq!(map.check_invariants(), 8);
    assert_still_shadowed(&map, 6..8, "the move");
    for shadow in shadows {
        if shadow.key() == 6 {
            shadow.commit();
        } else {
            shadow.abort();
        }
    }
    assert_eq!(map.get(&6), Some(106));
    assert_eq!(map.get(&7), None);
    assert_eq!(map.insert_new(7, 107), Insert::Inserted);
    assert_eq!(map.check_invariants(), 10);
    for k in 0..10u64 {
        assert_eq!(map.get(&k), Some(k + 100), "key {k}");
    }

    // A shadow among the crowd in its two lines still crowds them: a write past them is
    // refused with `HashCollisions` (it doubled the table over and over while the shadow's
    // slot was taken for a key of another hash).
    let map = crowded_dense_map();
    let shadow = map.insert_shadow(0, 100).unwrap();
    for k in 1..8u64 {
        assert_eq!(map.insert_new(k, k + 100), Insert::Inserted);
    }
    let lines = map.stats().bins;
    assert!(matches!(
        map.try_insert_shadow(8, 1),
        Err(Error::HashCollisions)
    ));
    assert_eq!(
        map.stats().bins,
        lines,
        "grown for a crowd no table separates"
    );
    shadow.commit();
    assert_eq!(map.check_invariants(), 8);
}
