//! `floe::Cache` against `std::collections::HashMap`: unbounded, every answer equal; bounded,
//! every answer the latest value or none, within the capacity; with a good hasher and with one
//! that gives four hash words (keys share slots through collision lists, so the queues' nodes,
//! which name keys by hash, must pick their own key's entry). And threads, more than cores, on
//! one key and on a few under eviction: a read never returns a value older than its own
//! thread's last write of the key.

mod common;

use std::{
    collections::HashMap,
    hash::BuildHasher,
    sync::{Arc, Mutex},
};

use common::FourWords;
use floe::{Cache, RemovalCause};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u16),
    Get(u8),
    Contains(u8),
    Remove(u8),
    GetWith(u8, u16),
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => any::<u8>().prop_map(Op::Get),
        1 => any::<u8>().prop_map(Op::Contains),
        2 => any::<u8>().prop_map(Op::Remove),
        2 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::GetWith(k, v)),
        1 => Just(Op::Clear),
    ]
}

/// Keys as strings, so that `FourWords` (which sums bytes) crowds them.
fn key(k: u8) -> String {
    format!("key-{k}")
}

/// Runs `ops` on a cache of `capacity` with `hasher`, against the model; with room for every
/// key (256) every answer must equal std's, else each must be std's or none.
fn check<S: BuildHasher>(ops: &[Op], capacity: u64, hasher: S) -> Result<(), TestCaseError> {
    let told = Arc::new(Mutex::new(Vec::new()));
    let log = told.clone();
    let cache = Cache::<String, u16>::builder()
        .max_capacity(capacity)
        .eviction_listener(move |k: &String, v: &u16, cause| {
            log.lock().unwrap().push((k.clone(), *v, cause))
        })
        .hasher(hasher)
        .build()
        .unwrap();
    let exact = capacity >= 256;
    let mut model: HashMap<String, u16> = HashMap::new();
    for op in ops {
        match *op {
            Op::Insert(k, v) => {
                let old = cache.insert(key(k), v);
                let expected = model.insert(key(k), v);
                if exact {
                    prop_assert_eq!(old, expected);
                } else {
                    prop_assert!(old.is_none() || old == expected, "{old:?} {expected:?}");
                }
            }
            Op::Get(k) => {
                let got = cache.get(&key(k));
                let expected = model.get(&key(k)).copied();
                if exact {
                    prop_assert_eq!(got, expected);
                } else {
                    prop_assert!(got.is_none() || got == expected, "{got:?} {expected:?}");
                }
            }
            Op::Contains(k) => {
                let got = cache.contains_key(key(k).as_str());
                if exact {
                    prop_assert_eq!(got, model.contains_key(&key(k)));
                } else {
                    prop_assert!(!got || model.contains_key(&key(k)));
                }
            }
            Op::Remove(k) => {
                let got = cache.remove(&key(k));
                let expected = model.remove(&key(k));
                prop_assert!(got.is_none() || got == expected, "{got:?} {expected:?}");
                if exact {
                    prop_assert_eq!(got, expected);
                }
            }
            Op::GetWith(k, v) => {
                let got = cache.get_with(key(k), || v);
                let expected = *model.entry(key(k)).or_insert(v);
                if exact {
                    prop_assert_eq!(got, expected);
                } else if got != expected {
                    // Evicted before the read: loaded again.
                    prop_assert_eq!(got, v);
                    model.insert(key(k), v);
                }
            }
            Op::Clear => {
                cache.clear();
                model.clear();
            }
        }
        prop_assert!(cache.weighted_size() <= capacity);
        prop_assert_eq!(cache.weighted_size(), cache.len() as u64);
    }
    let stats = cache.stats();
    let told = told.lock().unwrap();
    let evicted = told.iter().filter(|t| t.2 == RemovalCause::Size).count() as u64;
    prop_assert_eq!(evicted, stats.evictions);
    if exact {
        prop_assert_eq!(evicted, 0);
        let mut seen = HashMap::new();
        cache.for_each(|k, v| {
            seen.insert(k.clone(), *v);
        });
        prop_assert_eq!(seen, model);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    #[test]
    fn unbounded_is_std(ops in prop::collection::vec(op(), 1..300)) {
        check(&ops, 1000, keyed())?;
    }

    #[test]
    fn unbounded_is_std_with_colliding_hashes(ops in prop::collection::vec(op(), 1..300)) {
        check(&ops, 1000, FourWords)?;
    }

    #[test]
    fn bounded_answers_latest_or_none(
        ops in prop::collection::vec(op(), 1..300),
        capacity in 1u64..40,
    ) {
        check(&ops, capacity, keyed())?;
    }

    #[test]
    fn bounded_with_colliding_hashes(
        ops in prop::collection::vec(op(), 1..300),
        capacity in 1u64..40,
    ) {
        check(&ops, capacity, FourWords)?;
    }
}

/// std's keyed hasher (SipHash, a random key).
fn keyed() -> std::collections::hash_map::RandomState {
    std::collections::hash_map::RandomState::new()
}

/// Threads (twice the cores, at least 4) write and read a few keys in a cache far smaller than
/// the keys, one key written by all of them: a read returns none, or a value no older than the
/// reader's own last write of that key would allow (a value of its own thread must be its
/// latest), under eviction, replaces and removals.
#[test]
fn threads_never_read_stale_values() {
    let threads = (2 * std::thread::available_parallelism().map_or(2, |n| n.get())).max(4);
    let rounds = if cfg!(miri) { 200 } else { 100_000 };
    for hasher_crowds in [false, true] {
        let cache: Arc<dyn Fn() -> Box<dyn Probe> + Send + Sync> = if hasher_crowds {
            Arc::new(|| Box::new(Cache::<String, u64, FourWords>::builder_probe(FourWords)))
        } else {
            Arc::new(|| Box::new(Cache::<String, u64, _>::builder_probe(keyed())))
        };
        let cache: Arc<dyn Probe> = Arc::from(cache());
        std::thread::scope(|s| {
            for t in 0..threads as u64 {
                let cache = cache.clone();
                s.spawn(move || {
                    let mut last = HashMap::new();
                    let mut x = t + 1;
                    for seq in 1..=rounds {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = if x % 4 == 0 { 0 } else { x % 24 };
                        let value = t << 32 | seq;
                        match (x >> 8) % 8 {
                            0 => {
                                cache.remove(k);
                                last.remove(&k);
                            }
                            1..=4 => {
                                cache.insert(k, value);
                                last.insert(k, seq);
                            }
                            _ => {
                                if let Some(got) = cache.get(k) {
                                    if got >> 32 == t {
                                        assert_eq!(
                                            Some(&(got & 0xffff_ffff)),
                                            last.get(&k),
                                            "thread {t} read an old value of its own for key {k}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                });
            }
        });
        assert!(cache.weighted_size() <= 16);
        assert_eq!(cache.weighted_size(), cache.len() as u64);
    }
}

/// What the threads test uses of a cache, whatever its hasher.
trait Probe: Send + Sync {
    fn insert(&self, k: u64, v: u64);
    fn get(&self, k: u64) -> Option<u64>;
    fn remove(&self, k: u64);
    fn weighted_size(&self) -> u64;
    fn len(&self) -> usize;
}

impl<S: BuildHasher + Send + Sync> Probe for Cache<String, u64, S> {
    fn insert(&self, k: u64, v: u64) {
        Cache::insert(self, format!("{k}"), v);
    }
    fn get(&self, k: u64) -> Option<u64> {
        Cache::get(self, format!("{k}").as_str())
    }
    fn remove(&self, k: u64) {
        Cache::remove(self, format!("{k}").as_str());
    }
    fn weighted_size(&self) -> u64 {
        Cache::weighted_size(self)
    }
    fn len(&self) -> usize {
        Cache::len(self)
    }
}

trait BuilderProbe<S> {
    fn builder_probe(hasher: S) -> Self;
}

impl<S: BuildHasher> BuilderProbe<S> for Cache<String, u64, S> {
    fn builder_probe(hasher: S) -> Self {
        Cache::<String, u64>::builder()
            .max_capacity(16)
            .hasher(hasher)
            .build()
            .unwrap()
    }
}
