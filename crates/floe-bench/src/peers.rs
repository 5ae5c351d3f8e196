//! The maps under test behind one small interface, each adapter's choices written next to it.
//!
//! Every map gets the same hasher (the bench's `AnyHash`, Mix64 by default) and is created with
//! capacity for all keys, so no map resizes during a measurement. Values are `u64`.

use std::{cell::UnsafeCell, hash::BuildHasher, sync::RwLock};

use crate::measure::AnyHash;

/// What a workload asks of a map. `&self` everywhere: the maps are shared by all threads.
pub trait BenchMap: Send + Sync {
    /// The value of `key`.
    fn get(&self, key: u64) -> Option<u64>;
    /// Insert if absent; `true` if inserted.
    fn insert(&self, key: u64, value: u64) -> bool;
    /// Table bytes if the map reports them (otherwise the harness measures RSS growth).
    fn table_bytes(&self) -> Option<usize> {
        None
    }
}

/// The maps `--maps` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MapKind {
    /// floe's FlatMap (backend from `--backend`).
    Floe,
    /// dashmap 6: sharded `RwLock<hashbrown>`; `get` copies the value out under the read lock.
    Dashmap,
    /// papaya 0.2, blocking resize; one guard pinned per operation (`map.pin()`), as its docs
    /// recommend for short operations.
    Papaya,
    /// papaya 0.2, incremental resize (its default, `Incremental(64)`); guards as above.
    PapayaIncremental,
    /// scc 3 `HashMap` (`read_sync`, `insert_sync`).
    Scc,
    /// 64 shards of `std::sync::RwLock<hashbrown::HashMap>`, shard chosen by the hash's top bits.
    RwlockHashbrown,
    /// `hashbrown::HashMap` alone, 1 thread only (no synchronization at all).
    Hashbrown,
}

impl MapKind {
    /// Whether the map may be used from more than one thread.
    pub fn concurrent(self) -> bool {
        self != MapKind::Hashbrown
    }
}

impl BenchMap for crate::measure::Map {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        floe::FlatMap::get(self, &key)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        floe::FlatMap::insert(self, key, value)
            .expect("the table is sized for every key")
            .is_inserted()
    }
    fn table_bytes(&self) -> Option<usize> {
        Some(self.stats().allocated_bytes)
    }
}

impl BenchMap for dashmap::DashMap<u64, u64, AnyHash> {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        dashmap::DashMap::get(self, &key).map(|r| *r)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        match self.entry(key) {
            dashmap::Entry::Occupied(_) => false,
            dashmap::Entry::Vacant(v) => {
                v.insert(value);
                true
            }
        }
    }
}

impl BenchMap for papaya::HashMap<u64, u64, AnyHash> {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        self.pin().get(&key).copied()
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        self.pin().try_insert(key, value).is_ok()
    }
}

impl BenchMap for scc::HashMap<u64, u64, AnyHash> {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        self.read_sync(&key, |_, v| *v)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        self.insert_sync(key, value).is_ok()
    }
}

/// Sharded `RwLock<hashbrown::HashMap>`.
pub struct RwlockHashbrown {
    hasher: AnyHash,
    shards: Vec<RwLock<hashbrown::HashMap<u64, u64, AnyHash>>>,
}

const SHARDS: usize = 64;

impl RwlockHashbrown {
    pub fn new(capacity: usize, hasher: AnyHash) -> Self {
        let shards = (0..SHARDS)
            .map(|_| {
                RwLock::new(hashbrown::HashMap::with_capacity_and_hasher(
                    capacity / SHARDS + 1,
                    hasher,
                ))
            })
            .collect();
        Self { hasher, shards }
    }

    #[inline]
    fn shard(&self, key: u64) -> &RwLock<hashbrown::HashMap<u64, u64, AnyHash>> {
        // Top bits pick the shard; hashbrown uses the low bits and the top 7 for its tags, so
        // within a shard the tags are less varied (the same trade-off dashmap makes).
        &self.shards[(self.hasher.hash_one(key) >> 58) as usize]
    }
}

impl BenchMap for RwlockHashbrown {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        self.shard(key)
            .read()
            .expect("no panics while locked")
            .get(&key)
            .copied()
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        let mut shard = self.shard(key).write().expect("no panics while locked");
        match shard.entry(key) {
            hashbrown::hash_map::Entry::Occupied(_) => false,
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(value);
                true
            }
        }
    }
}

/// `hashbrown::HashMap` with no synchronization, for single-thread baselines.
pub struct SingleThreadHashbrown(UnsafeCell<hashbrown::HashMap<u64, u64, AnyHash>>);

impl SingleThreadHashbrown {
    pub fn new(capacity: usize, hasher: AnyHash) -> Self {
        Self(UnsafeCell::new(
            hashbrown::HashMap::with_capacity_and_hasher(capacity, hasher),
        ))
    }
}

// SAFETY: the harness runs this map from one thread at a time only (`MapKind::concurrent` is
// false, and `run` refuses thread counts above 1 for it); threads are joined between runs,
// which orders every access.
unsafe impl Sync for SingleThreadHashbrown {}

impl BenchMap for SingleThreadHashbrown {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        // SAFETY: single-threaded use (see the `Sync` impl); no `&mut` is alive.
        unsafe { (*self.0.get()).get(&key).copied() }
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        // SAFETY: single-threaded use (see the `Sync` impl); this is the only reference.
        let map = unsafe { &mut *self.0.get() };
        match map.entry(key) {
            hashbrown::hash_map::Entry::Occupied(_) => false,
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(value);
                true
            }
        }
    }
}

/// Resident set size of this process in bytes (Linux), for memory per key of maps that do not
/// report their table size.
pub fn rss_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident * 4096)
}
