//! Differential fuzzing of `FlatMap` against `std::collections::HashMap`: a random map shape
//! (tiny first tables of either layout, so growth and shrink run often; optionally a growth
//! cap; a good hasher or one that crowds every key into four hashes) and a random sequence of every operation,
//! batches included. After each operation the map must agree with the model, answer errors
//! only where the API allows them (and then change nothing), and at the end hold exactly the
//! model's pairs with its invariants intact. Run with `bash ci/fuzz.sh`.
#![no_main]

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hasher},
};

use arbitrary::Arbitrary;
use floe::{
    CompareExchangeError, Error, FlatMap, Insert, Layout, Request, ResizeMode, Response, Shadow,
    Taken,
};
use libfuzzer_sys::fuzz_target;

/// A key from a small space (so operations meet), with the edge words in it.
#[derive(Arbitrary, Clone, Copy, Debug)]
struct Key(u8);

impl Key {
    fn word(self) -> u64 {
        match self.0 {
            250 => 0,
            251 => u64::MAX,
            252 => 1 << 63,
            253 => u64::MAX - 1,
            k => u64::from(k).wrapping_mul(0x0101_0101_0101_0101),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Get(Key),
    Insert(Key, u64),
    Upsert(Key, u64),
    Put(Key, u64),
    Update(Key, u64),
    CompareExchange(Key, u64, u64),
    Remove(Key),
    FetchAdd(Key, u64),
    Clear,
    Shrink,
    Reserve(u16),
    Batch(Vec<(u8, Key, u64)>),
    InsertShadow(Key, u64),
    CommitShadow(Key),
    AbortShadow(Key),
}

#[derive(Arbitrary, Debug)]
struct Case {
    /// First table: 2 << (bins % 4) bins.
    bins: u8,
    /// Cap growth at 16x the first table.
    capped: bool,
    blocking: bool,
    /// Hash every key to one of four values (bins overflow, `HashCollisions`).
    crowded: bool,
    /// `Layout::Dense`: a first table of as many lines as the bins above (4 at least).
    dense: bool,
    ops: Vec<Op>,
}

#[derive(Clone, Copy, Default)]
struct Hashing {
    crowded: bool,
}

struct WordHasher {
    crowded: bool,
    word: u64,
}

impl BuildHasher for Hashing {
    type Hasher = WordHasher;
    fn build_hasher(&self) -> WordHasher {
        WordHasher {
            crowded: self.crowded,
            word: 0,
        }
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, _: &[u8]) {
        unreachable!("floe hashes words")
    }
    fn write_u64(&mut self, word: u64) {
        self.word = word;
    }
    fn finish(&self) -> u64 {
        if self.crowded {
            (self.word % 4) << 62
        } else {
            (self.word ^ (self.word >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        }
    }
}

/// An insert-like answer: the model changes only on `Ok`, and errors are allowed only for
/// maps that may run out of room.
fn allowed(error: Error, may_fail: bool) {
    assert!(
        may_fail
            && matches!(
                error,
                Error::Full
                    | Error::HashCollisions
                    | Error::CapacityOverflow
                    // A dense table of the four crowded hashes may find no empty keys.
                    | Error::DegenerateHasher
            ),
        "unexpected error {error:?}"
    );
}

fuzz_target!(|case: Case| {
    let bins = 2usize << (case.bins % 4);
    let builder = FlatMap::<u64, u64>::builder();
    let builder = if case.dense {
        // A dense line holds about 3.3 keys at its trigger: `bins` lines.
        builder.layout(Layout::Dense).capacity(bins * 3)
    } else {
        builder.bins(bins)
    };
    let mut builder = builder
        .hasher(Hashing {
            crowded: case.crowded,
        })
        .huge_pages(false)
        .resize_mode(if case.blocking {
            ResizeMode::Blocking
        } else {
            ResizeMode::Incremental
        });
    if case.capped {
        builder = builder.max_bins(bins * 16);
    }
    let map = match builder.build() {
        Ok(map) => map,
        // A dense table over the four crowded hashes may have no empty keys.
        Err(Error::DegenerateHasher) if case.dense && case.crowded => return,
        Err(e) => panic!("a valid shape was refused: {e}"),
    };
    let may_fail = case.capped || case.crowded;
    let mut model: HashMap<u64, u64> = HashMap::new();
    // Open shadow inserts: taken (inserts find them) but hidden from everything else.
    let mut shadows: HashMap<u64, Shadow<'_, u64, u64, _>> = HashMap::new();
    for op in case.ops.iter().take(512) {
        let taken = |k: u64| match (model.get(&k), shadows.contains_key(&k)) {
            (Some(&v), _) => Insert::Present(v),
            (None, true) => Insert::Shadowed,
            (None, false) => Insert::Inserted,
        };
        match *op {
            // An upsert or fetch_add of a shadowed key waits for its commit or abort, which
            // this one thread would never make: not issued.
            Op::Upsert(k, _) | Op::FetchAdd(k, _) if shadows.contains_key(&k.word()) => {}
            Op::Get(k) => assert_eq!(map.get(&k.word()), model.get(&k.word()).copied()),
            Op::Insert(k, v) => match map.try_insert_new(k.word(), v) {
                Ok(answer) => {
                    assert_eq!(answer, taken(k.word()));
                    if answer == Insert::Inserted {
                        model.insert(k.word(), v);
                    }
                }
                Err(e) => {
                    assert_eq!(taken(k.word()), Insert::Inserted);
                    allowed(e, may_fail);
                }
            },
            Op::InsertShadow(k, v) => match map.try_insert_shadow(k.word(), v) {
                Ok(Ok(shadow)) => {
                    assert_eq!(taken(k.word()), Insert::Inserted);
                    shadows.insert(k.word(), shadow);
                }
                Ok(Err(Taken::Present(old))) => assert_eq!(taken(k.word()), Insert::Present(old)),
                Ok(Err(Taken::Shadowed)) => assert_eq!(taken(k.word()), Insert::Shadowed),
                // The dense layout has no shadow inserts; nothing changed.
                Err(Error::NotInLayout(_)) => assert!(case.dense),
                Err(e) => {
                    assert_eq!(taken(k.word()), Insert::Inserted);
                    allowed(e, may_fail);
                }
            },
            Op::CommitShadow(k) => {
                if let Some(shadow) = shadows.remove(&k.word()) {
                    model.insert(k.word(), shadow.value());
                    shadow.commit();
                }
            }
            Op::AbortShadow(k) => {
                if let Some(shadow) = shadows.remove(&k.word()) {
                    shadow.abort();
                }
            }
            Op::Upsert(k, v) => match map.try_insert(k.word(), v) {
                Ok(old) => assert_eq!(old, model.insert(k.word(), v)),
                Err(e) => {
                    assert!(!model.contains_key(&k.word()));
                    allowed(e, may_fail);
                }
            },
            Op::Put(k, v) => {
                let expected = model
                    .get_mut(&k.word())
                    .map(|slot| std::mem::replace(slot, v));
                assert_eq!(map.put(k.word(), v), expected);
            }
            Op::Update(k, d) => {
                let expected = model.get_mut(&k.word()).map(|slot| {
                    let old = *slot;
                    *slot = old.wrapping_add(d);
                    old
                });
                assert_eq!(map.update(&k.word(), |v| v.wrapping_add(d)), expected);
            }
            Op::CompareExchange(k, current, new) => {
                let expected = match model.get_mut(&k.word()) {
                    None => Err(CompareExchangeError::Absent),
                    Some(slot) if *slot == current => {
                        *slot = new;
                        Ok(current)
                    }
                    Some(slot) => Err(CompareExchangeError::Mismatch(*slot)),
                };
                assert_eq!(map.compare_exchange(&k.word(), current, new), expected);
            }
            Op::Remove(k) => assert_eq!(map.remove(&k.word()), model.remove(&k.word())),
            Op::FetchAdd(k, d) => match map.try_fetch_add(k.word(), d) {
                Ok(old) => {
                    let slot = model.entry(k.word()).or_insert(0);
                    let before = (old.is_some()).then_some(*slot);
                    assert_eq!(old, before);
                    *slot = slot.wrapping_add(d);
                }
                Err(e) => {
                    assert!(!model.contains_key(&k.word()));
                    allowed(e, may_fail);
                }
            },
            Op::Clear => {
                map.clear();
                model.clear();
            }
            Op::Shrink => {
                // A shrink that cannot be had changes nothing; a dense table over the crowded
                // hashes may find no empty keys for the smaller table.
                if let Err(e) = map.shrink_to_fit() {
                    allowed(e, case.dense && case.crowded);
                }
            }
            Op::Reserve(n) => {
                if let Err(e) = map.reserve(usize::from(n)) {
                    allowed(e, case.capped || (case.dense && case.crowded));
                }
            }
            Op::Batch(ref items) => {
                let requests: Vec<Request<u64, u64>> = items
                    .iter()
                    .take(64)
                    .map(|&(kind, k, v)| match kind % 5 {
                        // Keys with an open shadow are only read (an upsert would wait for
                        // it, and no batch request resolves shadows).
                        _ if shadows.contains_key(&k.word()) => Request::Get(k.word()),
                        0 => Request::Get(k.word()),
                        1 => Request::InsertNew(k.word(), v),
                        2 => Request::Insert(k.word(), v),
                        3 => Request::Put(k.word(), v),
                        _ => Request::Remove(k.word()),
                    })
                    .collect();
                let mut responses = Vec::new();
                map.batch().depth(4).run(&requests, &mut responses);
                for (request, response) in requests.iter().zip(responses) {
                    check_response(&mut model, *request, response, may_fail);
                }
            }
        }
        assert_eq!(map.len(), model.len(), "after {op:?}");
    }
    assert_eq!(map.check_invariants(), model.len());
    let mut seen = HashMap::new();
    map.for_each(|k, v| assert!(seen.insert(k, v).is_none(), "key {k} visited twice"));
    assert_eq!(seen, model);
    // The shadows still open survived every growth, shrink and clear.
    for (k, shadow) in shadows {
        assert_eq!(map.get(&k), None);
        assert_eq!(map.insert_new(k, 0), Insert::Shadowed, "shadow {k} lost");
        model.insert(k, shadow.value());
        shadow.commit();
    }
    assert_eq!(map.check_invariants(), model.len());
});

/// Apply `request` to the model and check `response` against it.
fn check_response(
    model: &mut HashMap<u64, u64>,
    request: Request<u64, u64>,
    response: Response<u64>,
    may_fail: bool,
) {
    match (request, response) {
        (Request::Get(k), Response::Get(v)) => assert_eq!(v, model.get(&k).copied()),
        (Request::InsertNew(k, v), Response::InsertNew(r)) => match r {
            Ok(Insert::Inserted) => assert_eq!(model.insert(k, v), None),
            Ok(Insert::Present(old)) => assert_eq!(model.get(&k), Some(&old)),
            Ok(Insert::Shadowed) => panic!("a batch insert of an unshadowed key was shadowed"),
            Err(e) => allowed(e, may_fail),
        },
        (Request::Insert(k, v), Response::Insert(r)) => match r {
            Ok(old) => assert_eq!(old, model.insert(k, v)),
            Err(e) => allowed(e, may_fail),
        },
        (Request::Put(k, v), Response::Put(old)) => {
            assert_eq!(
                old,
                model.get_mut(&k).map(|slot| std::mem::replace(slot, v))
            );
        }
        (Request::Remove(k), Response::Remove(old)) => assert_eq!(old, model.remove(&k)),
        (request, response) => panic!("{request:?} answered {response:?}"),
    }
}
