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

use common::{
    cache_op as op, check_against_std, keyed, threads_on_few_keys, CacheOp as Op, FourWords,
    ModelCache,
};
use floe::{Cache, RemovalCause};
use proptest::prelude::*;

/// Keys as strings, so that `FourWords` (which sums bytes) crowds them.
fn key(k: u8) -> String {
    format!("key-{k}")
}

/// A `Cache` of string keys and the evictions its listener heard of.
struct Modelled<S> {
    cache: Cache<String, u16, S>,
    told: Arc<Mutex<Vec<RemovalCause>>>,
}

impl<S: BuildHasher> ModelCache for Modelled<S> {
    fn insert(&self, k: u8, v: u16) -> Option<u16> {
        self.cache.insert(key(k), v)
    }
    fn get(&self, k: u8) -> Option<u16> {
        self.cache.get(&key(k))
    }
    fn contains(&self, k: u8) -> bool {
        self.cache.contains_key(key(k).as_str())
    }
    fn remove(&self, k: u8) -> Option<u16> {
        self.cache.remove(&key(k))
    }
    fn get_with(&self, k: u8, v: u16) -> u16 {
        self.cache.get_with(key(k), || v)
    }
    fn clear(&self) {
        self.cache.clear();
    }
    fn contents(&self) -> HashMap<u8, u16> {
        let mut seen = HashMap::new();
        self.cache.for_each(|k, v| {
            seen.insert(k["key-".len()..].parse().unwrap(), *v);
        });
        seen
    }
    fn size(&self) -> u64 {
        // The weights are the entries' count (no weigher).
        assert_eq!(self.cache.weighted_size(), self.cache.len() as u64);
        self.cache.weighted_size()
    }
    fn evictions(&self) -> (u64, u64) {
        let told = self.told.lock().unwrap();
        let heard = told.iter().filter(|&&c| c == RemovalCause::Size).count();
        (heard as u64, self.cache.stats().evictions)
    }
}

/// Runs `ops` on a cache of `capacity` with `hasher`, against std's `HashMap`.
fn check<S: BuildHasher>(ops: &[Op], capacity: u64, hasher: S) -> Result<(), TestCaseError> {
    let told = Arc::new(Mutex::new(Vec::new()));
    let log = told.clone();
    let cache = Cache::<String, u16>::builder()
        .max_capacity(capacity)
        .eviction_listener(move |_: &String, _: &u16, cause| log.lock().unwrap().push(cause))
        .hasher(hasher)
        .build()
        .unwrap();
    check_against_std(&Modelled { cache, told }, ops, capacity)
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

/// Threads (twice the cores, at least 4) write and read a few keys in a cache far smaller than
/// the keys, one key written by all of them: a read returns none, or a value no older than the
/// reader's own last write of that key would allow (a value of its own thread must be its
/// latest), under eviction, replaces and removals.
#[test]
fn threads_never_read_stale_values() {
    for hasher_crowds in [false, true] {
        let cache: Arc<dyn Fn() -> Box<dyn Probe> + Send + Sync> = if hasher_crowds {
            Arc::new(|| Box::new(Cache::<String, u64, FourWords>::builder_probe(FourWords)))
        } else {
            Arc::new(|| Box::new(Cache::<String, u64, _>::builder_probe(keyed())))
        };
        let cache: Arc<dyn Probe> = Arc::from(cache());
        threads_on_few_keys(
            |k, v| cache.insert(k, v),
            |k| cache.get(k),
            |k| cache.remove(k),
        );
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
