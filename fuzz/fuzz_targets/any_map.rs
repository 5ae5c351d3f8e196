//! Differential fuzzing of `floe::Map<Vec<u8>, Vec<u8>>` against `std::collections::HashMap`:
//! tiny first tables (growth and shrink run often), optionally a growth cap, and a good hasher
//! or one that gives every key one of four hash words (collision lists of many keys). Every
//! operation is checked against the model as it runs; at the end the map holds exactly the
//! model's pairs, through `get`, `get_many` and the iterator. Run with `bash ci/fuzz.sh`.
#![no_main]

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hasher},
};

use arbitrary::Arbitrary;
use floe::{Error, Insert, Map, ResizeMode};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Get(u8),
    Insert(u8, Vec<u8>),
    Upsert(u8, Vec<u8>),
    Append(u8, u8),
    Remove(u8),
    RemoveIfEmpty(u8),
    GetMany(Vec<u8>),
    Clear,
    Shrink,
    Reserve(u16),
}

#[derive(Arbitrary, Debug)]
struct Case {
    /// First table: 2 << (bins % 4) bins.
    bins: u8,
    /// Cap growth at 16x the first table.
    capped: bool,
    blocking: bool,
    /// Four hash words for every key: collision lists.
    crowded: bool,
    ops: Vec<Op>,
}

/// Keys are short byte strings made from one byte, so operations meet.
fn key(k: u8) -> Vec<u8> {
    vec![k; usize::from(k % 5)].into_iter().chain([k]).collect()
}

#[derive(Clone, Copy)]
struct Hashing {
    crowded: bool,
}

struct BytesHasher {
    crowded: bool,
    state: u64,
}

impl BuildHasher for Hashing {
    type Hasher = BytesHasher;
    fn build_hasher(&self) -> BytesHasher {
        BytesHasher {
            crowded: self.crowded,
            state: 0x243f_6a88_85a3_08d3,
        }
    }
}

impl Hasher for BytesHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.state = (self.state ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            self.state ^= self.state >> 29;
        }
    }
    fn finish(&self) -> u64 {
        if self.crowded {
            self.state % 4
        } else {
            self.state
        }
    }
}

fuzz_target!(|case: Case| {
    let bins = 2usize << (case.bins % 4);
    let mut builder = Map::<Vec<u8>, Vec<u8>>::builder()
        .bins(bins)
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
    let map = builder.build().expect("valid shape");
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let room = |error: Error| {
        assert!(
            case.capped && matches!(error, Error::Full | Error::CapacityOverflow),
            "unexpected error {error:?}"
        );
    };
    for op in case.ops.iter().take(512) {
        let m = map.pin();
        match op {
            Op::Get(k) => assert_eq!(m.get(&key(*k)), model.get(&key(*k))),
            Op::Insert(k, v) => match m.try_insert_new(key(*k), v.clone()) {
                Ok(Insert::Inserted) => assert_eq!(model.insert(key(*k), v.clone()), None),
                Ok(Insert::Present(old)) => assert_eq!(model.get(&key(*k)), Some(old)),
                Ok(Insert::Shadowed) => panic!("`Map` makes no shadows"),
                Err(e) => {
                    assert!(!model.contains_key(&key(*k)));
                    room(e);
                }
            },
            Op::Upsert(k, v) => match m.try_insert(key(*k), v.clone()) {
                Ok(old) => assert_eq!(old.cloned(), model.insert(key(*k), v.clone())),
                Err(e) => {
                    assert!(!model.contains_key(&key(*k)));
                    room(e);
                }
            },
            Op::Append(k, byte) => {
                let got = m.update(&key(*k), |v| [v.as_slice(), &[*byte]].concat());
                let expected = model.get_mut(&key(*k)).map(|v| {
                    v.push(*byte);
                    v.clone()
                });
                assert_eq!(got.cloned(), expected);
            }
            Op::Remove(k) => assert_eq!(m.remove(&key(*k)).cloned(), model.remove(&key(*k))),
            Op::RemoveIfEmpty(k) => {
                let got = m.remove_if(&key(*k), |v| v.is_empty()).cloned();
                let expected = match model.get(&key(*k)) {
                    Some(v) if v.is_empty() => model.remove(&key(*k)),
                    _ => None,
                };
                assert_eq!(got, expected);
            }
            Op::GetMany(keys) => {
                let keys: Vec<Vec<u8>> = keys.iter().take(64).map(|&k| key(k)).collect();
                let refs: Vec<&Vec<u8>> = keys.iter().collect();
                let mut values = vec![None; refs.len()];
                m.get_many(&refs, &mut values).expect("equal lengths");
                for (k, v) in keys.iter().zip(values) {
                    assert_eq!(v, model.get(k));
                }
            }
            Op::Clear => {
                drop(m);
                map.clear();
                model.clear();
            }
            Op::Shrink => {
                map.shrink_to_fit().expect("a smaller table fits");
            }
            Op::Reserve(n) => {
                if let Err(e) = map.reserve(usize::from(*n)) {
                    room(e);
                }
            }
        }
        assert_eq!(map.len(), model.len());
    }
    let m = map.pin();
    for (k, v) in &model {
        assert_eq!(m.get(k), Some(v));
    }
    let mut seen = 0;
    for (k, v) in m.iter() {
        assert_eq!(model.get(k), Some(v));
        seen += 1;
    }
    assert_eq!(seen, model.len());
    drop(m);
    assert_eq!(map.check_invariants(), model.len());
});
