//! Differential tests: random sequences of every operation against `std::collections::HashMap`,
//! on fixed-size tables tiny enough that bins fill, chain link buckets, empty and refill, and
//! report `Full`, and on growing tables that start at two bins and resize many times per run
//! (both resize modes). Runs over every backend the CPU supports.

mod common;

use std::collections::HashMap;

use common::{backends, growing_dense_map, growing_map, tiny_dense_map, tiny_map};
use floe::{
    hash::Mix64, local::Entry as LocalEntry, CompareExchangeError, Error, FlatMap, Insert,
    LocalMap, ResizeMode, Shadow, Taken,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Get(u64),
    InsertNew(u64, u64),
    Insert(u64, u64),
    Put(u64, u64),
    Update(u64, u64),
    FetchAdd(u64, u64),
    CompareExchange(u64, u64, u64),
    Remove(u64),
    Clear,
    /// `shrink_to_fit`: the contents must not change.
    Shrink,
    /// `reserve(n)`: the contents must not change.
    Reserve(usize),
    /// `insert_shadow`: taken but hidden until committed.
    InsertShadow(u64, u64),
    CommitShadow(u64),
    AbortShadow(u64),
}

/// Keys from a pool of `pool` so operations collide (the pool starts at 0 and 1, the engine's
/// dead key and first fallback candidate), and the extreme words.
fn key_in(pool: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..pool,
        1 => Just(u64::MAX),
        1 => Just(0xdead_f10e_dead_f10e),
    ]
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..4, any::<u64>()]
}

fn op() -> BoxedStrategy<Op> {
    op_in(24, 1)
}

/// Operations on keys from a pool of `pool`; `clear` with weight `clear` (0: never), against
/// 25 for the key operations and 2 for `shrink_to_fit` and `reserve`.
fn op_in(pool: u64, clear: u32) -> BoxedStrategy<Op> {
    let key = move || key_in(pool);
    let keyed = prop_oneof![
        4 => key().prop_map(Op::Get),
        4 => (key(), value()).prop_map(|(k, v)| Op::InsertNew(k, v)),
        2 => (key(), value()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (key(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        1 => (key(), value()).prop_map(|(k, v)| Op::Update(k, v)),
        2 => (key(), value()).prop_map(|(k, v)| Op::FetchAdd(k, v)),
        2 => (key(), value(), value()).prop_map(|(k, c, n)| Op::CompareExchange(k, c, n)),
        4 => key().prop_map(Op::Remove),
        2 => (key(), value()).prop_map(|(k, v)| Op::InsertShadow(k, v)),
        1 => key().prop_map(Op::CommitShadow),
        1 => key().prop_map(Op::AbortShadow),
    ];
    let resize = prop_oneof![Just(Op::Shrink), (0usize..200).prop_map(Op::Reserve),];
    if clear == 0 {
        prop_oneof![25 => keyed, 2 => resize].boxed()
    } else {
        prop_oneof![25 => keyed, 2 => resize, clear => Just(Op::Clear)].boxed()
    }
}

/// Apply `ops` to a floe map of the given geometry and to a HashMap; compare every result.
/// When floe says `Full`, the model must be unchanged (the key absent) and the map must keep
/// every key it had.
fn check(ops: &[Op], bins: usize, links: usize, seed: u64) {
    for backend in backends() {
        check_map(&tiny_map(backend, bins, links, seed), ops, backend);
        // The dense layout's table of the same line count (4 lines at least: 16 slots).
        let dense = tiny_dense_map(backend, bins * 3, seed);
        check_map(&dense, ops, backend);
    }
}

/// As `check`, on maps that start at two bins and grow; returns how many times the map grew.
fn check_growing(ops: &[Op], links: usize, seed: u64) -> usize {
    let mut growths = 0;
    for backend in backends() {
        for mode in [ResizeMode::Incremental, ResizeMode::Blocking] {
            let map = growing_map(backend, 2, links, mode, seed);
            check_map(&map, ops, backend);
            // Bins multiply by 8 per growth while the table is small.
            growths += (map.stats().bins / 2).ilog(8) as usize;
            assert_eq!(common::live_tables(&map), 1, "an old table was not freed");
            let dense = growing_dense_map(backend, mode, seed);
            check_map(&dense, ops, backend);
            // Lines double per growth.
            growths += (dense.stats().bins / 4).ilog2() as usize;
        }
    }
    growths
}

/// What an insert of `k` answers, by the model and the open shadows.
fn expected_insert(
    model: &HashMap<u64, u64>,
    shadows: &HashMap<u64, Shadow<'_, u64, u64, Mix64>>,
    k: u64,
) -> Insert<u64> {
    match (model.get(&k), shadows.contains_key(&k)) {
        (Some(&v), _) => Insert::Present(v),
        (None, true) => Insert::Shadowed,
        (None, false) => Insert::Inserted,
    }
}

fn check_map(map: &FlatMap<u64, u64, Mix64>, ops: &[Op], backend: floe::Backend) {
    {
        let mut model: HashMap<u64, u64> = HashMap::new();
        // Open shadow inserts: hidden from everything but inserts (which find them taken).
        let mut shadows: HashMap<u64, Shadow<'_, u64, u64, Mix64>> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            let ctx = || format!("op {i} {op:?} on {backend:?}");
            match *op {
                // An upsert or fetch_add of a shadowed key waits for its commit or abort, which
                // this one thread would never make: not issued.
                Op::Insert(k, _) | Op::FetchAdd(k, _) if shadows.contains_key(&k) => {}
                Op::Get(k) => assert_eq!(map.get(&k), model.get(&k).copied(), "{}", ctx()),
                Op::InsertNew(k, v) => {
                    let expected = expected_insert(&model, &shadows, k);
                    match map.try_insert_new(k, v) {
                        Ok(Insert::Inserted) => {
                            assert_eq!(expected, Insert::Inserted, "{}", ctx());
                            model.insert(k, v);
                        }
                        Ok(taken) => assert_eq!(taken, expected, "{}", ctx()),
                        Err(Error::Full) => assert_eq!(expected, Insert::Inserted, "{}", ctx()),
                        Err(e) => panic!("{}: unexpected {e}", ctx()),
                    }
                }
                Op::InsertShadow(k, v) => {
                    let expected = expected_insert(&model, &shadows, k);
                    match map.try_insert_shadow(k, v) {
                        Ok(Ok(shadow)) => {
                            assert_eq!(expected, Insert::Inserted, "{}", ctx());
                            shadows.insert(k, shadow);
                        }
                        Ok(Err(Taken::Present(old))) => {
                            assert_eq!(expected, Insert::Present(old), "{}", ctx())
                        }
                        Ok(Err(Taken::Shadowed)) => {
                            assert_eq!(expected, Insert::Shadowed, "{}", ctx())
                        }
                        Err(Error::Full) => assert_eq!(expected, Insert::Inserted, "{}", ctx()),
                        Err(e) => panic!("{}: unexpected {e}", ctx()),
                    }
                }
                Op::CommitShadow(k) => {
                    if let Some(shadow) = shadows.remove(&k) {
                        model.insert(k, shadow.value());
                        shadow.commit();
                    }
                }
                Op::AbortShadow(k) => {
                    if let Some(shadow) = shadows.remove(&k) {
                        shadow.abort();
                    }
                }
                Op::Insert(k, v) => match map.try_insert(k, v) {
                    Ok(old) => assert_eq!(old, model.insert(k, v), "{}", ctx()),
                    Err(Error::Full) => assert!(!model.contains_key(&k), "{}", ctx()),
                    Err(e) => panic!("{}: unexpected {e}", ctx()),
                },
                Op::Put(k, v) => {
                    let expected = model.get_mut(&k).map(|slot| std::mem::replace(slot, v));
                    assert_eq!(map.put(k, v), expected, "{}", ctx());
                }
                Op::Update(k, d) => {
                    let expected = model.get_mut(&k).map(|slot| {
                        let old = *slot;
                        *slot = old ^ d;
                        old
                    });
                    assert_eq!(map.update(&k, |v| v ^ d), expected, "{}", ctx());
                }
                Op::FetchAdd(k, d) => match map.try_fetch_add(k, d) {
                    Ok(old) => {
                        let expected = model.get(&k).copied();
                        model.insert(k, expected.map_or(d, |o| o.wrapping_add(d)));
                        assert_eq!(old, expected, "{}", ctx());
                    }
                    Err(Error::Full) => assert!(!model.contains_key(&k), "{}", ctx()),
                    Err(e) => panic!("{}: unexpected {e}", ctx()),
                },
                Op::CompareExchange(k, c, n) => {
                    let expected = match model.get_mut(&k) {
                        None => Err(CompareExchangeError::Absent),
                        Some(v) if *v == c => {
                            *v = n;
                            Ok(c)
                        }
                        Some(v) => Err(CompareExchangeError::Mismatch(*v)),
                    };
                    assert_eq!(map.compare_exchange(&k, c, n), expected, "{}", ctx());
                }
                Op::Remove(k) => assert_eq!(map.remove(&k), model.remove(&k), "{}", ctx()),
                Op::Clear => {
                    map.clear();
                    model.clear();
                }
                Op::Shrink => {
                    // `reserve(0)` finishes a growth in progress, as the shrink would (a capped
                    // map fuller than the usual load may answer that it cannot grow).
                    match map.reserve(0) {
                        Ok(()) | Err(Error::CapacityOverflow) => {}
                        Err(e) => panic!("{}: {e}", ctx()),
                    }
                    let before = map.stats().bins;
                    let shrank = map
                        .shrink_to_fit()
                        .unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                    assert_eq!(shrank, map.stats().bins < before, "{}", ctx());
                }
                Op::Reserve(n) => match map.reserve(n) {
                    Ok(()) => {}
                    // A capped map may not grow that far; nothing changes.
                    Err(Error::CapacityOverflow) => {}
                    Err(e) => panic!("{}: unexpected {e}", ctx()),
                },
            }
            assert_eq!(map.len(), model.len(), "{}", ctx());
        }
        assert_eq!(map.check_invariants(), model.len());
        let mut seen = HashMap::new();
        map.for_each(|k, v| assert!(seen.insert(k, v).is_none(), "for_each visited {k} twice"));
        assert_eq!(seen, model, "for_each disagrees with the model");
        // The shadows left open survived every growth, shrink and clear: commit them.
        for (k, shadow) in shadows {
            assert_eq!(map.get(&k), None);
            assert_eq!(map.insert_new(k, 0), Insert::Shadowed, "shadow {k} lost");
            let v = shadow.value();
            shadow.commit();
            assert_eq!(map.get(&k), Some(v));
            model.insert(k, v);
        }
        assert_eq!(map.check_invariants(), model.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        max_shrink_iters: 2048,
        ..ProptestConfig::default()
    })]

    /// Two bins, a pool of three link buckets: chains fill, the pool runs dry, `Full` appears.
    #[test]
    fn tiny_tables_match_std(ops in prop::collection::vec(op(), 1..300), seed in any::<u64>()) {
        check(&ops, 2, 3, seed);
    }

    /// No link buckets at all: three slots a bin.
    #[test]
    fn tables_without_links_match_std(ops in prop::collection::vec(op(), 1..200), seed in any::<u64>()) {
        check(&ops, 3, 0, seed);
    }

    /// Roomier tables: mostly single-line bins.
    #[test]
    fn larger_tables_match_std(ops in prop::collection::vec(op(), 1..400), seed in any::<u64>()) {
        check(&ops, 16, 4, seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 64 },
        ..ProptestConfig::default()
    })]

    /// Growing tables: two bins to start, hundreds of keys, several growths a run (the bins
    /// keep moving under every kind of operation).
    #[test]
    fn growing_tables_match_std(
        ops in prop::collection::vec(op_in(600, 0), 1..1500),
        links in 0usize..3,
        seed in any::<u64>(),
    ) {
        check_growing(&ops, links, seed);
    }
}

/// The growing differential runs resize many times (not just once or twice).
#[test]
fn growing_runs_resize_many_times() {
    let mut rng = common::SplitMix(7);
    let mut growths = 0;
    for run in 0..if cfg!(miri) { 1 } else { 40 } {
        let ops: Vec<Op> = (0..2000)
            .map(|_| {
                let k = rng.below(3000);
                match rng.below(5) {
                    0 => Op::Remove(k),
                    1 => Op::Get(k),
                    2 => Op::FetchAdd(k, 1),
                    _ => Op::InsertNew(k, k),
                }
            })
            .collect();
        growths += check_growing(&ops, 1, run);
    }
    assert!(growths >= 100, "only {growths} growths");
}

/// A deterministic long run that cycles a small table through full and empty many times.
#[test]
fn fill_drain_cycles_reuse_slots() {
    let rounds = if cfg!(miri) { 2 } else { 50 };
    common::with_maps(4, 2, |map| {
        // Fixed size: this test is about slots recycled in place.
        for round in 0..rounds {
            let mut inserted = Vec::new();
            for k in 0..200u64 {
                let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round;
                match map.try_insert_new(key, k) {
                    Ok(Insert::Inserted) => inserted.push((key, k)),
                    Ok(Insert::Present(_) | Insert::Shadowed) => unreachable!("keys are distinct"),
                    Err(Error::Full) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            // 4 bins x 3 slots + 2 link buckets x 4 slots = 20 slots at most.
            assert!(
                inserted.len() <= 20 && inserted.len() >= 12,
                "{}",
                inserted.len()
            );
            for &(key, v) in &inserted {
                assert_eq!(map.get(&key), Some(v));
            }
            for &(key, v) in &inserted {
                assert_eq!(map.remove(&key), Some(v));
            }
            assert!(map.is_empty());
            map.check_invariants();
        }
    });
}

/// The single-thread map against std, on tables that start at two bins and grow (its growth
/// is its own one-pass move), switching to shared use and back midway.
fn check_local(ops: &[Op], links: usize, seed: u64) {
    for backend in backends() {
        let shared = growing_map(backend, 2, links, ResizeMode::Incremental, seed);
        let mut map = LocalMap::from(shared);
        let mut model: HashMap<u64, u64> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            let ctx = || format!("op {i} {op:?} on {backend:?}");
            match *op {
                Op::Get(k) => assert_eq!(map.get(&k), model.get(&k).copied(), "{}", ctx()),
                Op::Insert(k, v) => assert_eq!(map.insert(k, v), model.insert(k, v), "{}", ctx()),
                Op::InsertNew(k, v) => {
                    let expected = match model.get(&k) {
                        Some(&present) => Insert::Present(present),
                        None => {
                            model.insert(k, v);
                            Insert::Inserted
                        }
                    };
                    assert_eq!(map.insert_new(k, v), expected, "{}", ctx());
                }
                Op::Put(k, v) => {
                    let expected = model.get_mut(&k).map(|slot| std::mem::replace(slot, v));
                    assert_eq!(map.put(k, v), expected, "{}", ctx());
                }
                Op::Remove(k) => assert_eq!(map.remove(&k), model.remove(&k), "{}", ctx()),
                Op::Clear => {
                    map.clear();
                    model.clear();
                }
                Op::Reserve(n) => map.reserve(n).unwrap_or_else(|e| panic!("{}: {e}", ctx())),
                Op::Shrink => {
                    // Through shared use and back (the shrink is the shared map's).
                    let shared = map.into_shared();
                    shared.shrink_to_fit().unwrap();
                    map = LocalMap::from(shared);
                }
                // The in-place API, against std's: `get_mut`, and `entry` (or_insert, and an
                // occupied entry's replace or remove, a vacant one's insert).
                Op::Update(k, d) => {
                    if let Some(mut value) = map.get_mut(&k) {
                        *value = value.wrapping_add(d);
                    }
                    if let Some(value) = model.get_mut(&k) {
                        *value = value.wrapping_add(d);
                    }
                    assert_eq!(map.get(&k), model.get(&k).copied(), "{}", ctx());
                }
                Op::FetchAdd(k, d) => {
                    let mut value = map.entry(k).or_insert(0);
                    *value = value.wrapping_add(d);
                    let after = *value;
                    drop(value);
                    let expected = model.entry(k).or_insert(0);
                    *expected = expected.wrapping_add(d);
                    assert_eq!(after, *expected, "{}", ctx());
                }
                Op::CompareExchange(k, current, new) => {
                    use std::collections::hash_map::Entry as StdEntry;
                    match map.entry(k) {
                        LocalEntry::Occupied(mut entry) if entry.get() == current => {
                            entry.insert(new);
                        }
                        LocalEntry::Occupied(entry) => {
                            entry.remove();
                        }
                        LocalEntry::Vacant(entry) => {
                            entry.insert(new);
                        }
                    }
                    match model.entry(k) {
                        StdEntry::Occupied(mut entry) if *entry.get() == current => {
                            entry.insert(new);
                        }
                        StdEntry::Occupied(entry) => {
                            entry.remove();
                        }
                        StdEntry::Vacant(entry) => {
                            entry.insert(new);
                        }
                    }
                }
                // Shared-only operations: a shadow left open by shared use is aborted when the
                // map comes back (nothing could resolve it).
                Op::InsertShadow(k, v) => {
                    let shared = map.into_shared();
                    if let Ok(shadow) = shared.insert_shadow(k, v) {
                        std::mem::forget(shadow);
                    }
                    map = LocalMap::from(shared);
                }
                _ => {}
            }
            assert_eq!(map.len(), model.len(), "{}", ctx());
        }
        let shared = map.into_shared();
        assert_eq!(shared.check_invariants(), model.len());
        let mut seen = HashMap::new();
        shared.for_each(|k, v| assert!(seen.insert(k, v).is_none(), "{k} twice"));
        assert_eq!(seen, model);
        assert_eq!(
            common::live_tables(&shared),
            1,
            "an old table was not freed"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 64 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_single_thread_map_matches_std(
        ops in prop::collection::vec(op_in(600, 0), 1..1500),
        links in 0usize..3,
        seed in any::<u64>(),
    ) {
        check_local(&ops, links, seed);
    }
}
