//! `floe::FlatCache` against `std::collections::HashMap`: with room for every key, every
//! answer equal; bounded, every answer the latest value or none, never more entries than the
//! capacity; the listener told of every eviction. With a keyed hasher and with one that crowds
//! the keys onto few read-count words and queue shards (so marks are shared and given up, and
//! one shard takes most nodes). And threads, more than cores, on one key and a few under
//! eviction: a read never returns a value older than its own thread's last write of the key.

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hasher},
    sync::{Arc, Mutex},
};

mod common;

use common::{
    cache_op as op, check_against_std, keyed, threads_on_few_keys, CacheOp as Op, ModelCache,
};
use floe::{FlatCache, RemovalCause};
use proptest::prelude::*;

/// A hasher whose hashes have bits 16 to 31 clear: the index still tells keys apart, but
/// every key's read count sits in one word of four marks (the counts take bits 16 and up), so
/// marks are shared and given up all the time, and the ghosts compare fewer bits.
#[derive(Clone, Default)]
struct Crowding;

struct CrowdingHasher(u64);

impl Hasher for CrowdingHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0 ^ 0x5555_5555_5555_5555;
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (h ^ (h >> 31)) & !(0xffff << 16)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0 << 8 | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl BuildHasher for Crowding {
    type Hasher = CrowdingHasher;
    fn build_hasher(&self) -> CrowdingHasher {
        CrowdingHasher(0)
    }
}

/// Keys spread over the words (a word of 0 is a key like any other).
fn key(k: u8) -> u64 {
    u64::from(k).wrapping_mul(0x0101_0101_0101_0101)
}

/// A `FlatCache` and the evictions its listener heard of.
struct Modelled<S> {
    cache: FlatCache<u64, u64, S>,
    told: Arc<Mutex<Vec<RemovalCause>>>,
}

impl<S: BuildHasher> ModelCache for Modelled<S> {
    fn insert(&self, k: u8, v: u16) -> Option<u16> {
        self.cache.insert(key(k), v.into()).map(value)
    }
    fn get(&self, k: u8) -> Option<u16> {
        self.cache.get(&key(k)).map(value)
    }
    fn contains(&self, k: u8) -> bool {
        self.cache.contains_key(&key(k))
    }
    fn remove(&self, k: u8) -> Option<u16> {
        self.cache.remove(&key(k)).map(value)
    }
    fn get_with(&self, k: u8, v: u16) -> u16 {
        value(self.cache.get_with(key(k), || v.into()))
    }
    fn clear(&self) {
        self.cache.clear();
    }
    fn contents(&self) -> HashMap<u8, u16> {
        let mut seen = HashMap::new();
        self.cache.for_each(|k, v| {
            seen.insert(k as u8, value(v));
        });
        seen
    }
    fn size(&self) -> u64 {
        self.cache.len() as u64
    }
    fn evictions(&self) -> (u64, u64) {
        let told = self.told.lock().unwrap();
        let heard = told.iter().filter(|&&c| c == RemovalCause::Size).count();
        (heard as u64, self.cache.stats().evictions)
    }
}

/// A value back in the model's type (every value stored came from a `u16`).
fn value(v: u64) -> u16 {
    u16::try_from(v).expect("a value the test stored")
}

/// Runs `ops` on a cache of `capacity` with `hasher`, against std's `HashMap`.
fn check<S: BuildHasher>(ops: &[Op], capacity: u64, hasher: S) -> Result<(), TestCaseError> {
    let told = Arc::new(Mutex::new(Vec::new()));
    let log = told.clone();
    let cache = FlatCache::<u64, u64>::builder()
        .max_capacity(capacity)
        .eviction_listener(move |_, _, cause| log.lock().unwrap().push(cause))
        .hasher(hasher)
        .build()
        .unwrap();
    check_against_std(&Modelled { cache, told }, ops, capacity)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    #[test]
    fn with_room_for_every_key_it_is_std(ops in prop::collection::vec(op(), 1..300)) {
        check(&ops, 1000, keyed())?;
    }

    #[test]
    fn with_room_for_every_key_it_is_std_however_crowded(
        ops in prop::collection::vec(op(), 1..300),
    ) {
        check(&ops, 1000, Crowding)?;
    }

    #[test]
    fn bounded_answers_latest_or_none(
        ops in prop::collection::vec(op(), 1..300),
        capacity in 1u64..40,
    ) {
        check(&ops, capacity, keyed())?;
    }

    #[test]
    fn bounded_and_crowded_answers_latest_or_none(
        ops in prop::collection::vec(op(), 1..300),
        capacity in 1u64..40,
    ) {
        check(&ops, capacity, Crowding)?;
    }
}

/// Threads (twice the cores, at least 4) write and read a few keys in a cache far smaller than
/// the keys, one key written by all of them: a read returns none, or, for a value of its own
/// thread, its latest write, under eviction, replaces and removals; and the cache never holds
/// more than its capacity once they are done.
#[test]
fn threads_never_read_stale_values() {
    for crowded in [false, true] {
        let cache: Box<dyn Probe> = if crowded {
            Box::new(probe_cache(Crowding))
        } else {
            Box::new(probe_cache(keyed()))
        };
        threads_on_few_keys(
            |k, v| cache.insert(k, v),
            |k| cache.get(k),
            |k| cache.remove(k),
        );
        assert!(
            cache.len() <= 16,
            "{} entries in a cache of 16",
            cache.len()
        );
    }
}

fn probe_cache<S: BuildHasher>(hasher: S) -> FlatCache<u64, u64, S> {
    FlatCache::<u64, u64>::builder()
        .max_capacity(16)
        .hasher(hasher)
        .build()
        .unwrap()
}

/// What the threads test uses of a cache, whatever its hasher.
trait Probe: Send + Sync {
    fn insert(&self, k: u64, v: u64);
    fn get(&self, k: u64) -> Option<u64>;
    fn remove(&self, k: u64);
    fn len(&self) -> usize;
}

impl<S: BuildHasher + Send + Sync> Probe for FlatCache<u64, u64, S> {
    fn insert(&self, k: u64, v: u64) {
        FlatCache::insert(self, k, v);
    }
    fn get(&self, k: u64) -> Option<u64> {
        FlatCache::get(self, &k)
    }
    fn remove(&self, k: u64) {
        FlatCache::remove(self, &k);
    }
    fn len(&self) -> usize {
        FlatCache::len(self)
    }
}
