//! The peers as `BenchMap`s: each adapter uses the map's own idiomatic calls.

use std::{cell::UnsafeCell, hash::BuildHasher, sync::RwLock};

use super::{AnyHash, BenchMap};

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
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.get_mut(&key).map(|mut v| *v = value).is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        dashmap::DashMap::remove(self, &key).is_some()
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
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.pin().update(key, |_| value).is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        self.pin().remove(&key).is_some()
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
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.update_sync(&key, |_, v| *v = value).is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        self.remove_sync(&key).is_some()
    }
}

impl BenchMap for scc::HashIndex<u64, u64, AnyHash> {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        self.peek_with(&key, |_, v| *v)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        self.insert_sync(key, value).is_ok()
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.get_sync(&key).map(|mut e| e.update(value)).is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        self.remove_sync(&key)
    }
}

impl BenchMap for flurry::HashMap<u64, u64, AnyHash> {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        self.pin().get(&key).copied()
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        self.pin().try_insert(key, value).is_ok()
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.pin()
            .compute_if_present(&key, |_, _| Some(value))
            .is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        self.pin().remove(&key).is_some()
    }
}

impl BenchMap for leapfrog::LeapMap<u64, u64, AnyHash> {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        leapfrog::LeapMap::get(self, &key).and_then(|mut r| r.value())
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        leapfrog::LeapMap::insert(self, key, value).is_none()
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        leapfrog::LeapMap::update(self, &key, value).is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        leapfrog::LeapMap::remove(self, &key).is_some()
    }
}

/// The table of the hashbrown-based maps.
type Table = hashbrown::HashMap<u64, u64, AnyHash>;

/// Sharded `RwLock<hashbrown::HashMap>`.
pub struct RwlockHashbrown {
    hasher: AnyHash,
    shards: Vec<RwLock<Table>>,
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
    fn shard(&self, key: u64) -> &RwLock<Table> {
        // Top bits pick the shard; hashbrown uses the low bits and the top 7 for its tags, so
        // within a shard the tags are less varied (the same trade-off dashmap makes).
        &self.shards[(self.hasher.hash_one(key) >> 58) as usize]
    }
}

impl HashbrownAccess for RwlockHashbrown {
    #[inline]
    fn read<R>(&self, key: u64, f: impl FnOnce(&Table) -> R) -> R {
        f(&self.shard(key).read().expect("no panics while locked"))
    }
    #[inline]
    fn write<R>(&self, key: u64, f: impl FnOnce(&mut Table) -> R) -> R {
        f(&mut self.shard(key).write().expect("no panics while locked"))
    }
}

/// `hashbrown::HashMap` with no synchronization, for single-thread baselines.
pub struct SingleThreadHashbrown(UnsafeCell<Table>);

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

impl HashbrownAccess for SingleThreadHashbrown {
    #[inline]
    fn read<R>(&self, _: u64, f: impl FnOnce(&Table) -> R) -> R {
        // SAFETY: single-threaded use (see the `Sync` impl); no `&mut` is alive.
        f(unsafe { &*self.0.get() })
    }
    #[inline]
    fn write<R>(&self, _: u64, f: impl FnOnce(&mut Table) -> R) -> R {
        // SAFETY: single-threaded use (see the `Sync` impl); this is the only reference.
        f(unsafe { &mut *self.0.get() })
    }
}

/// The maps built on plain `hashbrown` tables: how they give access to a key's table.
trait HashbrownAccess: Send + Sync {
    fn read<R>(&self, key: u64, f: impl FnOnce(&Table) -> R) -> R;
    fn write<R>(&self, key: u64, f: impl FnOnce(&mut Table) -> R) -> R;
}

impl<T: HashbrownAccess + 'static> BenchMap for T {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        self.read(key, |table| table.get(&key).copied())
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        self.write(key, |table| match table.entry(key) {
            hashbrown::hash_map::Entry::Occupied(_) => false,
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(value);
                true
            }
        })
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.write(key, |table| {
            table.get_mut(&key).map(|v| *v = value).is_some()
        })
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        self.write(key, |table| table.remove(&key).is_some())
    }
}
