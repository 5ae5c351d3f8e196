//! `floe::Map` against `std::collections::HashMap<String, Vec<u8>>`: every operation, on a
//! map of two bins that grows (and shrinks through `clear`), with a good hasher and with one
//! that gives only four hash words (so most keys share a slot through a collision list).

mod common;

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hasher},
};

use common::FourWords;

use floe::{Builder, Compute, Error, ForMap, Insert, Layout, Map, Operation, Taken};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    InsertNew(u8, Vec<u8>),
    Insert(u8, Vec<u8>),
    /// `get_or_insert_with`, against std's `entry(..).or_insert_with`.
    GetOrInsert(u8, Vec<u8>),
    Update(u8, u8),
    /// `get_many_keys` of the keys `k..k + 4`, against std's `get` of each.
    GetMany(u8),
    Remove(u8),
    RemoveIfEmpty(u8),
    /// `compute`: abort on an absent key if the byte is odd, else insert `[byte]`; on a
    /// present one, remove it if it ends in the byte, else append the byte.
    Compute(u8, u8),
    Get(u8),
    /// A shadow insert, then an insert and a get of the key while it is open, then its commit
    /// (`true`) or abort.
    Shadow(u8, Vec<u8>, bool),
    Clear,
}

fn op(keys: u8) -> impl Strategy<Value = Op> {
    let value = || prop::collection::vec(any::<u8>(), 0..4);
    prop_oneof![
        4 => (0..keys, value()).prop_map(|(k, v)| Op::InsertNew(k, v)),
        3 => (0..keys, value()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (0..keys, value()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        1 => (0..keys).prop_map(Op::GetMany),
        2 => (0..keys, any::<u8>()).prop_map(|(k, b)| Op::Update(k, b)),
        3 => (0..keys).prop_map(Op::Remove),
        1 => (0..keys).prop_map(Op::RemoveIfEmpty),
        3 => (0..keys, 0u8..4).prop_map(|(k, b)| Op::Compute(k, b)),
        4 => (0..keys).prop_map(Op::Get),
        2 => (0..keys, value(), any::<bool>()).prop_map(|(k, v, c)| Op::Shadow(k, v, c)),
        1 => Just(Op::Clear),
    ]
}

fn key(k: u8) -> String {
    format!("key-{k}")
}

fn check<S: BuildHasher>(map: &Map<String, Vec<u8>, S>, ops: &[Op]) {
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    for op in ops {
        let m = map.pin();
        match op.clone() {
            Op::InsertNew(k, v) => {
                let got = m.try_insert_new(key(k), v.clone()).unwrap();
                match model.get(&key(k)) {
                    Some(present) => assert_eq!(got, Insert::Present(present)),
                    None => {
                        assert_eq!(got, Insert::Inserted);
                        model.insert(key(k), v);
                    }
                }
            }
            Op::Insert(k, v) => assert_eq!(
                m.try_insert(key(k), v.clone()).unwrap().cloned(),
                model.insert(key(k), v)
            ),
            Op::GetOrInsert(k, v) => {
                let mut made = 0;
                let got = m
                    .try_get_or_insert_with(key(k), || {
                        made += 1;
                        v.clone()
                    })
                    .unwrap()
                    .clone();
                let present = model.contains_key(&key(k));
                let mut model_made = 0;
                let expect = model.entry(key(k)).or_insert_with(|| {
                    model_made += 1;
                    v.clone()
                });
                assert_eq!(
                    (&got, made),
                    (&*expect, model_made),
                    "present before: {present}"
                );
            }
            Op::GetMany(k) => {
                let keys: Vec<String> = (k..k.saturating_add(4)).map(key).collect();
                let mut got = vec![None; keys.len()];
                m.get_many_keys(&keys, &mut got).unwrap();
                let expect: Vec<Option<&Vec<u8>>> = keys.iter().map(|k| model.get(k)).collect();
                assert_eq!(got, expect);
            }
            Op::Update(k, byte) => {
                let got = m.update(key(k).as_str(), |v| {
                    let mut v = v.clone();
                    v.push(byte);
                    v
                });
                let expect = model.get_mut(&key(k)).map(|v| {
                    v.push(byte);
                    v.clone()
                });
                assert_eq!(got.cloned(), expect);
            }
            Op::Remove(k) => assert_eq!(m.remove(key(k).as_str()).cloned(), model.remove(&key(k))),
            Op::RemoveIfEmpty(k) => {
                let got = m.remove_if(key(k).as_str(), |v| v.is_empty()).cloned();
                let expect = match model.get(&key(k)) {
                    Some(v) if v.is_empty() => model.remove(&key(k)),
                    _ => None,
                };
                assert_eq!(got, expect);
            }
            Op::Compute(k, byte) => {
                let got = m.compute(key(k), |now| match now {
                    None if byte % 2 == 1 => Operation::Abort(byte),
                    None => Operation::Insert(vec![byte]),
                    Some(v) if v.last() == Some(&byte) => Operation::Remove,
                    Some(v) => Operation::Insert([v.as_slice(), &[byte]].concat()),
                });
                match model.get(&key(k)).cloned() {
                    None if byte % 2 == 1 => assert_eq!(got, Compute::Aborted(byte)),
                    None => {
                        assert_eq!(got, Compute::Inserted(&vec![byte]));
                        model.insert(key(k), vec![byte]);
                    }
                    Some(v) if v.last() == Some(&byte) => {
                        assert_eq!(got, Compute::Removed(&v));
                        model.remove(&key(k));
                    }
                    Some(v) => {
                        let new = [v.as_slice(), &[byte]].concat();
                        assert_eq!(got, Compute::Updated { old: &v, new: &new });
                        model.insert(key(k), new);
                    }
                }
            }
            Op::Get(k) => assert_eq!(m.get(key(k).as_str()), model.get(&key(k))),
            Op::Shadow(k, v, commit) => match m.try_insert_shadow(key(k), v.clone()).unwrap() {
                Ok(shadow) => {
                    assert!(!model.contains_key(&key(k)));
                    assert_eq!(m.insert_new(key(k), vec![]), Insert::Shadowed);
                    assert_eq!(m.get(key(k).as_str()), None);
                    assert_eq!(map.len(), model.len());
                    if commit {
                        assert_eq!(shadow.commit(), &v);
                        model.insert(key(k), v);
                    } else {
                        shadow.abort();
                    }
                }
                Err(Taken::Present(present)) => assert_eq!(Some(present), model.get(&key(k))),
                Err(Taken::Shadowed) => panic!("no shadow is open between operations"),
            },
            Op::Clear => {
                drop(m);
                map.clear();
                model.clear();
            }
        }
        assert_eq!(map.len(), model.len());
    }
    for (k, v) in &model {
        assert_eq!(map.pin().get(k.as_str()), Some(v));
    }
    assert_eq!(map.check_invariants(), model.len());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 64 },
        ..ProptestConfig::default()
    })]

    /// Up to 200 keys into the smallest table of each layout: the map grows several times.
    #[test]
    fn map_agrees_with_std_while_growing(ops in prop::collection::vec(op(200), 0..600)) {
        for layout in [Layout::Bins, Layout::Dense] {
            let map = smallest(Map::<String, Vec<u8>>::builder(), layout).build().unwrap();
            check(&map, &ops);
        }
    }

    /// Every key on one of four hash words: collision lists of up to dozens of keys.
    #[test]
    fn map_agrees_with_std_when_hashes_collide(ops in prop::collection::vec(op(40), 0..400)) {
        for layout in [Layout::Bins, Layout::Dense] {
            let map = smallest(Map::<String, Vec<u8>>::builder(), layout)
                .hasher(FourWords)
                .build()
                .unwrap();
            check(&map, &ops);
        }
    }
}

/// `builder` of `layout`, its first table the smallest the layout makes (2 bins, 4 lines).
fn smallest<K, V, S>(
    builder: Builder<K, V, S, ForMap>,
    layout: Layout,
) -> Builder<K, V, S, ForMap> {
    match layout {
        Layout::Bins => builder.bins(2),
        Layout::Dense => builder.layout(Layout::Dense).capacity(1),
    }
}

#[test]
fn a_full_capped_map_answers_full_and_keeps_its_keys() {
    let map = Map::<String, String>::builder()
        .bins(2)
        .link_buckets(0)
        .max_bins(2)
        .build()
        .unwrap();
    let m = map.pin();
    let mut kept = Vec::new();
    for k in 0..100 {
        match m.try_insert_new(key(k), format!("v{k}")) {
            Ok(inserted) => {
                assert!(inserted.is_inserted());
                kept.push(k);
            }
            Err(error) => assert_eq!(error, Error::Full),
        }
    }
    // Two bins of three slots hold six hash words.
    assert!(kept.len() <= 6 && !kept.is_empty(), "{kept:?}");
    for &k in &kept {
        assert_eq!(m.get(key(k).as_str()), Some(&format!("v{k}")));
    }
    assert_eq!(map.len(), kept.len());
}

#[test]
fn reserve_past_any_memory_is_an_error() {
    let map = Map::<String, u64>::try_with_capacity(10).unwrap();
    assert!(map.reserve(usize::MAX).is_err());
    assert!(map
        .pin()
        .try_insert_new("a".into(), 1)
        .unwrap()
        .is_inserted());
    assert_eq!(map.get_cloned("a"), Some(1));
}

/// One hash word for every key.
#[derive(Clone, Copy, Default)]
struct OneWord;

/// The hasher of [`OneWord`].
struct Zero;

impl Hasher for Zero {
    fn write(&mut self, _: &[u8]) {}
    fn finish(&self) -> u64 {
        0
    }
}

impl BuildHasher for OneWord {
    type Hasher = Zero;
    fn build_hasher(&self) -> Zero {
        Zero
    }
}

/// A key removed by one thread shares its slot (hash word) with keys another thread keeps
/// inserting: the remove must take its own key only, never the other thread's (it removes
/// the slot only if the slot still holds the word it read). Fails if the remove of a lone
/// entry drops the slot unconditionally.
#[test]
fn removing_a_key_never_removes_a_colliding_one() {
    let map = Map::<String, u32, _>::builder()
        .bins(2)
        .hasher(OneWord)
        .build()
        .unwrap();
    let rounds = if cfg!(miri) { 30 } else { 20_000 };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 0..rounds {
                let m = map.pin();
                let _ = m.try_insert_new("lone".to_string(), i).unwrap();
                m.remove("lone");
            }
        });
        scope.spawn(|| {
            for i in 0..rounds {
                let m = map.pin();
                let key = format!("kept-{}", i % 3);
                assert!(m.try_insert_new(key.clone(), i).unwrap().is_inserted());
                assert_eq!(
                    m.get(key.as_str()),
                    Some(&i),
                    "a colliding remove took {key}"
                );
                assert_eq!(m.remove(key.as_str()), Some(&i));
            }
        });
    });
    assert!(map.is_empty());
}

/// A key whose `Eq` panics on one chosen call (counted per thread).
#[derive(Clone, Debug)]
struct Bomb(u32);

impl std::hash::Hash for Bomb {
    fn hash<H: Hasher>(&self, state: &mut H) {
        countdown(&HASH_CALLS_LEFT, "Hash");
        self.0.hash(state);
    }
}

thread_local! {
    static EQ_CALLS_LEFT: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
    static HASH_CALLS_LEFT: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
    static DROP_CALLS_LEFT: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

/// Count a call down; panic on the one the counter was set to.
fn countdown(left: &'static std::thread::LocalKey<std::cell::Cell<u64>>, what: &str) {
    left.with(|left| {
        let now = left.get();
        left.set(now.saturating_sub(1));
        assert!(now != 1, "{what} panics here, as asked");
    });
}

/// A value whose `Drop` panics on one chosen call (counted per thread).
#[derive(Debug, PartialEq)]
struct DropBomb(u32);

impl Drop for DropBomb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            countdown(&DROP_CALLS_LEFT, "Drop");
        }
    }
}

/// Panicking `Hash`, `Eq` and value `Drop` in the middle of operations (each on a chosen call)
/// leave the map consistent: what it holds is what its gets say, `len` agrees, and it keeps
/// working and drops what is left.
#[test]
fn panicking_hash_eq_and_drop_do_not_corrupt_the_map() {
    let map = Map::<Bomb, DropBomb, _>::builder()
        .bins(2)
        .hasher(FourWords)
        .build()
        .unwrap();
    let mut model: HashMap<u32, u32> = HashMap::new();
    // Panics caught, by kind (Eq, Hash, Drop): each must have happened.
    let mut panics = [0u32; 3];
    for round in 0..600u32 {
        let key = Bomb(round % 37);
        let bomb = [&EQ_CALLS_LEFT, &HASH_CALLS_LEFT, &DROP_CALLS_LEFT][(round % 3) as usize];
        bomb.with(|left| left.set(u64::from(round % 4) + 1));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let m = map.pin();
            match round % 5 {
                0 | 1 => drop(m.try_insert(key.clone(), DropBomb(round)).unwrap()),
                2 => drop(m.remove(&key)),
                3 => drop(m.put(key.clone(), DropBomb(round))),
                _ => drop(m.try_insert_new(key.clone(), DropBomb(round)).unwrap()),
            }
        }));
        for left in [&EQ_CALLS_LEFT, &HASH_CALLS_LEFT, &DROP_CALLS_LEFT] {
            left.with(|left| left.set(u64::MAX));
        }
        panics[(round % 3) as usize] += u32::from(outcome.is_err());
        match map.pin().get(&key) {
            Some(value) => model.insert(key.0, value.0),
            None => model.remove(&key.0),
        };
        assert_eq!(map.len(), model.len(), "round {round}");
    }
    let m = map.pin();
    for (&k, &v) in &model {
        assert_eq!(m.get(&Bomb(k)).map(|d| d.0), Some(v));
    }
    drop(m);
    assert_eq!(map.check_invariants(), model.len());
    map.clear();
    assert!(map.is_empty());
    assert!(
        panics.iter().all(|&n| n > 0),
        "panics by kind (Eq, Hash, Drop): {panics:?}"
    );
}

impl PartialEq for Bomb {
    fn eq(&self, other: &Self) -> bool {
        countdown(&EQ_CALLS_LEFT, "Eq");
        self.0 == other.0
    }
}

impl Eq for Bomb {}

/// A panicking `Eq` in the middle of any operation leaves the map consistent: every key
/// inserted before is there with its value, and the map keeps working.
#[test]
fn a_panicking_eq_does_not_corrupt_the_map() {
    let map = Map::<Bomb, u32, _>::builder()
        .bins(2)
        .hasher(FourWords)
        .build()
        .unwrap();
    let mut model = HashMap::new();
    for round in 0..200u32 {
        let key = Bomb(round % 37);
        EQ_CALLS_LEFT.with(|left| left.set(u64::from(round % 5) + 1));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let m = map.pin();
            match round % 3 {
                0 => drop(m.try_insert(key.clone(), round).unwrap()),
                1 => drop(m.remove(&key)),
                _ => drop(m.try_insert_new(key.clone(), round).unwrap()),
            }
        }));
        EQ_CALLS_LEFT.with(|left| left.set(u64::MAX));
        // Whether the write happened is decided by the engine operation, before or after the
        // panic: read the truth back and keep the model in step.
        let _ = outcome;
        match map.pin().get(&key) {
            Some(&value) => model.insert(key.0, value),
            None => model.remove(&key.0),
        };
        assert_eq!(map.len(), model.len(), "round {round}");
    }
    for (&k, &v) in &model {
        assert_eq!(map.pin().get(&Bomb(k)), Some(&v));
    }
    assert_eq!(map.check_invariants(), model.len());
}

/// Query `0..probes` (shuffled) through `get_many` and `get`: the same answers.
fn agree<S: BuildHasher>(map: &Map<u64, u64, S>, probes: u64) {
    let m = map.pin();
    let queries: Vec<u64> = (0..probes)
        .map(|i| i.wrapping_mul(0x9e37_79b9) % probes)
        .collect();
    let refs: Vec<&u64> = queries.iter().collect();
    let mut values = vec![None; refs.len()];
    m.get_many(&refs, &mut values).unwrap();
    for (q, value) in queries.iter().zip(&values) {
        assert_eq!(*value, m.get(q), "key {q}");
    }
}

/// `get_many` answers as `get` does: on a table past the prefetch threshold (bins and entries
/// prefetched), on a small one, and with colliding hashes (lists behind the words).
#[test]
fn get_many_agrees_with_get() {
    let keys: u64 = if cfg!(miri) { 200 } else { 60_000 };
    let big = Map::<u64, u64>::try_with_capacity(keys as usize).unwrap();
    let colliding = Map::<u64, u64, _>::builder()
        .hasher(FourWords)
        .build()
        .unwrap();
    for k in 0..keys {
        let _ = big.pin().try_insert_new(k * 2, k).unwrap();
        if k < 300 {
            let _ = colliding.pin().try_insert_new(k * 2, k).unwrap();
        }
    }
    agree(&big, 2 * keys);
    agree(&colliding, 700);
    // Batches on either side of the short batch kept on the stack (32 keys) and of a chunk
    // (1024), and an empty one.
    let lengths: &[u64] = if cfg!(miri) {
        &[0, 1, 31, 32, 33]
    } else {
        &[0, 1, 31, 32, 33, 1023, 1024, 1025, 2049]
    };
    for &probes in lengths {
        agree(&big, probes);
        agree(&colliding, probes);
    }
    let mut short = [None; 1];
    assert_eq!(
        big.pin().get_many(&[&1, &2], &mut short),
        Err(Error::LengthMismatch { keys: 2, values: 1 })
    );
}

/// `find_by_hash` offers `is` every key of that hash and only those: with a hasher that puts
/// every key on one of four hashes (collision lists behind the words), each key is found by
/// its hash and a test of its own, never by another hash, and a removed one is not found.
#[test]
fn find_by_hash_sees_exactly_the_keys_of_a_hash() {
    use std::hash::BuildHasher;
    let map = Map::<u64, u64, _>::builder()
        .hasher(FourWords)
        .build()
        .unwrap();
    let m = map.pin();
    for k in 0..64u64 {
        m.insert(k, k * 10);
    }
    for k in 0..64u64 {
        let hash = map.hasher().hash_one(k);
        assert_eq!(
            m.find_by_hash(hash, |key, _| *key == k),
            Some((&k, &(k * 10)))
        );
        let offered = std::cell::RefCell::new(Vec::new());
        let found = m.find_by_hash(hash, |key, _| {
            offered.borrow_mut().push(*key);
            false
        });
        assert_eq!(found, None);
        let mut offered = offered.into_inner();
        offered.sort_unstable();
        let same_hash: Vec<u64> = (0..64)
            .filter(|&j| map.hasher().hash_one(j) == hash)
            .collect();
        assert_eq!(
            offered, same_hash,
            "key {k}: the keys offered are its hash's"
        );
    }
    m.remove(&5);
    assert_eq!(
        m.find_by_hash(map.hasher().hash_one(5u64), |key, _| *key == 5),
        None
    );
    assert_eq!(m.find_by_hash(4, |_, _| true), None, "no key hashes to 4");
}

/// `compute` is one atomic read-modify-write: threads (more than cores) counting on a few keys
/// that all share one hash word (every write swaps the same collision list) lose no count,
/// and a key removed by `compute` at a threshold is removed exactly once per crossing.
#[test]
fn compute_counts_exactly_under_contention() {
    for layout in [Layout::Bins, Layout::Dense] {
        compute_counts_exactly_under_contention_in(layout);
    }
}

fn compute_counts_exactly_under_contention_in(layout: Layout) {
    let map = smallest(Map::<String, u64, _>::builder(), layout)
        .hasher(OneWord)
        .build()
        .unwrap();
    let (threads, rounds) = (4u64, if cfg!(miri) { 20 } else { 5_000 });
    let resets = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (map, resets) = (&map, &resets);
            scope.spawn(move || {
                for i in 0..rounds {
                    let m = map.pin();
                    let counter = format!("count-{}", i % 3);
                    let got = m.compute(counter, |n| {
                        Operation::<_, ()>::Insert(n.map_or(1, |n| n + 1))
                    });
                    assert!(matches!(
                        got,
                        Compute::Inserted(_) | Compute::Updated { .. }
                    ));
                    // A ticket counter that wraps at 10 by removing itself.
                    let ticket = m.compute(format!("ticket-{t}", t = t % 2), |n| match n {
                        Some(9) => Operation::<_, ()>::Remove,
                        n => Operation::Insert(n.map_or(1, |n| n + 1)),
                    });
                    if let Compute::Removed(&9) = ticket {
                        resets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let m = map.pin();
    let counted: u64 = (0..3)
        .map(|k| m.get(format!("count-{k}").as_str()).copied().unwrap())
        .sum();
    assert_eq!(counted, threads * rounds);
    let left: u64 = (0..2)
        .map(|t| m.get(format!("ticket-{t}").as_str()).copied().unwrap_or(0))
        .sum();
    assert_eq!(resets.into_inner() * 10 + left, threads * rounds);
    drop(m);
    assert_eq!(map.check_invariants(), map.len());
}

/// `fetch_add` on atomic counters: threads race on keys that start absent, in a map of the
/// smallest size that grows under them, with one hash word for every key (all in one
/// collision list). Every increment is counted once and each returns a distinct count before
/// it (`None` standing for the insert's 0): the per-key history is a sequence. Fails if two
/// racing inserts of an absent key both win (a lost counter) or an add reads a stale count.
#[test]
fn fetch_add_counts_exactly_and_hands_out_each_count_once() {
    for layout in [Layout::Bins, Layout::Dense] {
        fetch_add_counts_exactly_in(layout);
    }
}

fn fetch_add_counts_exactly_in(layout: Layout) {
    use std::sync::atomic::AtomicU64;
    let map = smallest(Map::<String, AtomicU64, _>::builder(), layout)
        .hasher(OneWord)
        .build()
        .unwrap();
    let (threads, rounds, keys) = (4u64, if cfg!(miri) { 20 } else { 4_000 }, 5u64);
    let seen: Vec<Vec<(u64, u64)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let map = &map;
                scope.spawn(move || {
                    let mut seen = Vec::new();
                    for i in 0..rounds {
                        let m = map.pin();
                        let key = (i + t) % keys;
                        let before = m.fetch_add(format!("k{key}"), 1).unwrap_or(0);
                        seen.push((key, before));
                        // Keys that come and go beside them, so the table grows and shrinks.
                        let _ = m.fetch_add(format!("churn-{t}-{i}"), 1);
                        m.remove(format!("churn-{t}-{}", i.wrapping_sub(3)).as_str());
                    }
                    seen
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let m = map.pin();
    for key in 0..keys {
        let mut befores: Vec<u64> = seen
            .iter()
            .flatten()
            .filter(|(k, _)| *k == key)
            .map(|&(_, before)| before)
            .collect();
        befores.sort_unstable();
        let n = befores.len() as u64;
        assert!(
            befores.iter().copied().eq(0..n),
            "key {key}: counts handed out twice or skipped"
        );
        assert_eq!(m.count(format!("k{key}").as_str()), Some(n));
    }
    assert_eq!(
        seen.iter().map(Vec::len).sum::<usize>() as u64,
        threads * rounds
    );
    drop(m);
    assert_eq!(map.check_invariants(), map.len());
}

/// Namespaces keep equal keys apart, agree with lookups by the whole pair, and still tell
/// namespaces apart when every pair shares one hash word (the entry's key is compared whole).
#[test]
fn namespaces_are_separate_maps_in_one_table() {
    fn exercise<S: BuildHasher>(map: &Map<(u8, String), u32, S>) {
        let m = map.pin();
        for ns in 0..4u8 {
            let view = m.namespace(ns);
            for k in 0..50u32 {
                assert!(view
                    .insert_new(format!("key{k}"), u32::from(ns) * 1000 + k)
                    .is_inserted());
            }
        }
        assert_eq!(map.len(), 200);
        for ns in 0..4u8 {
            let view = m.namespace(ns);
            for k in 0..50u32 {
                let key = format!("key{k}");
                let expect = u32::from(ns) * 1000 + k;
                assert_eq!(view.get(key.as_str()), Some(&expect));
                assert_eq!(m.get(&(ns, key.clone())), Some(&expect), "the pair's hash");
            }
            assert_eq!(view.get("absent"), None);
        }
        // Removing from one namespace leaves the others.
        let one = m.namespace(1);
        for k in 0..50u32 {
            assert_eq!(one.remove(format!("key{k}").as_str()), Some(&(1000 + k)));
        }
        assert_eq!(one.insert("key7".to_string(), 5), None);
        assert_eq!(one.insert("key7".to_string(), 6), Some(&5));
        assert!(m.namespace(2).contains_key("key49"));
        assert!(!m.namespace(9).contains_key("key49"));
        assert_eq!(map.len(), 151);
        drop(m);
        assert_eq!(map.check_invariants(), 151);
    }
    exercise(&Map::new());
    exercise(&Map::builder().bins(2).hasher(OneWord).build().unwrap());
}

/// Threads racing `get_or_insert_with` on the same keys (more threads than cores, one key at
/// a time, removes in between): every thread of a round gets the one value that won, and a
/// losing thread's value is dropped, never stored.
#[test]
fn get_or_insert_with_races_agree_on_one_value() {
    use std::sync::{atomic::AtomicUsize, atomic::Ordering::Relaxed, Barrier};
    let threads = 8;
    let rounds = if cfg!(miri) { 5 } else { 300 };
    let map = Map::<u64, (usize, u64)>::new();
    let made = AtomicUsize::new(0);
    let barrier = Barrier::new(threads);
    let seen: Vec<Vec<(usize, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (map, made, barrier) = (&map, &made, &barrier);
                scope.spawn(move || {
                    let mut seen = Vec::new();
                    for round in 0..rounds {
                        barrier.wait();
                        let m = map.pin();
                        let got = *m.get_or_insert_with(round % 3, || {
                            made.fetch_add(1, Relaxed);
                            (t, round)
                        });
                        seen.push(got);
                        drop(m);
                        barrier.wait();
                        if t == 0 {
                            map.pin().remove(&(round % 3));
                        }
                    }
                    seen
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for round in 0..rounds as usize {
        let winner = seen[0][round];
        assert_eq!(winner.1, round as u64, "a value of this round");
        assert!(seen.iter().all(|s| s[round] == winner), "round {round}");
    }
    // At least one value made per round; at most one per thread.
    let made = made.load(Relaxed);
    assert!(made >= rounds as usize && made <= rounds as usize * threads);
    assert!(map.is_empty());
}

/// `Map::pin_owned`'s handle is `Send` and `Sync`: a future holding it and a reference from it
/// across an `.await` is `Send`, and finishes on another thread than the one it started on.
#[test]
fn an_owned_handle_holds_references_across_await_and_threads() {
    use std::{
        future::Future,
        sync::Arc,
        task::{Context, Poll, Waker},
    };
    fn send_and_sync<T: Send + Sync>(_: &T) {}

    /// Ready on its second poll, so the future below is suspended once, mid-way.
    struct YieldOnce(bool);
    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                Poll::Ready(())
            } else {
                self.0 = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    let map = Arc::new(Map::<String, Vec<u8>>::new());
    map.pin().insert("a".to_string(), vec![1, 2]);
    let task = {
        let map = Arc::clone(&map);
        async move {
            let m = map.pin_owned();
            let held = m.get("a").expect("present"); // a reference across the await
            YieldOnce(false).await;
            m.insert("b".to_string(), held.clone());
            held.len()
        }
    };
    send_and_sync(&map.pin_owned());
    fn is_send<F: Future + Send>(f: F) -> F {
        f
    }
    let mut task = Box::pin(is_send(task));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        task.as_mut().poll(&mut cx).is_pending(),
        "suspended holding the handle"
    );
    // A remove meanwhile: the held entry is retired, not freed, while the handle lives.
    assert_eq!(map.pin().remove("a"), Some(&vec![1, 2]));
    let finished = std::thread::spawn(move || {
        let mut cx = Context::from_waker(Waker::noop());
        match task.as_mut().poll(&mut cx) {
            Poll::Ready(len) => len,
            Poll::Pending => panic!("ready on its second poll"),
        }
    })
    .join()
    .unwrap();
    assert_eq!(finished, 2);
    assert_eq!(map.pin().get("b"), Some(&vec![1, 2]));
}
