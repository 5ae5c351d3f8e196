//! floe's `FlatMap`, `LocalMap` and `Map` as `BenchMap`s.

use core::cell::UnsafeCell;

use super::{BenchMap, Map};

impl BenchMap for Map {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        floe::FlatMap::get(self, &key)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        // A full table answers `false`, which the harness reports as a wrong answer.
        floe::FlatMap::try_insert_new(self, key, value).is_ok_and(|i| i.is_inserted())
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        floe::FlatMap::put(self, key, value).is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        floe::FlatMap::remove(self, &key).is_some()
    }
    fn table_bytes(&self) -> Option<usize> {
        Some(self.stats().allocated_bytes)
    }
    fn as_floe(&self) -> Option<&Map> {
        Some(self)
    }
    const GET_MANY: bool = true;
    #[inline]
    fn get_many(
        &self,
        keys: &[u64],
        values: &mut [Option<u64>],
        depth: usize,
        prefetch: floe::Prefetch,
    ) {
        self.batch()
            .depth(depth)
            .prefetch(prefetch)
            .get_many(keys, values)
            .expect("one value slot per key");
    }
}

/// A directory for one persistent map, not yet made: under `$FLOE_BENCH_DIR`, else the
/// temporary directory, named by the process and a counter.
pub fn fresh_map_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let root = std::env::var_os("FLOE_BENCH_DIR")
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    root.join(format!(
        "floe-bench-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// floe's FlatMap in files ([`super::MapKind::FloePersistent`]), its directory removed when
/// it is dropped.
pub struct PersistentFloe {
    map: Option<Map>,
    dir: std::path::PathBuf,
}

impl PersistentFloe {
    /// Build the map `builder` describes in a fresh directory.
    pub fn build(builder: floe::Builder<u64, u64, super::AnyHash>) -> Result<Self, String> {
        let dir = fresh_map_dir();
        let map = builder
            .build_persistent(&dir)
            .map_err(|e| format!("building floe's persistent map in {}: {e}", dir.display()))?;
        Ok(PersistentFloe {
            map: Some(map),
            dir,
        })
    }

    fn map(&self) -> &Map {
        self.map.as_ref().expect("present until dropped")
    }
}

impl Drop for PersistentFloe {
    fn drop(&mut self) {
        drop(self.map.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl BenchMap for PersistentFloe {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        BenchMap::get(self.map(), key)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        BenchMap::insert(self.map(), key, value)
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        BenchMap::update(self.map(), key, value)
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        BenchMap::remove(self.map(), key)
    }
    fn table_bytes(&self) -> Option<usize> {
        self.map().table_bytes()
    }
    fn as_floe(&self) -> Option<&Map> {
        Some(self.map())
    }
    const GET_MANY: bool = true;
    #[inline]
    fn get_many(
        &self,
        keys: &[u64],
        values: &mut [Option<u64>],
        depth: usize,
        prefetch: floe::Prefetch,
    ) {
        self.map().get_many(keys, values, depth, prefetch);
    }
}

/// The any-key map with the bench's keys and values.
pub type AnyMap = floe::Map<u64, u64, super::AnyHash>;

impl BenchMap for AnyMap {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        self.pin().get(&key).copied()
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        self.pin()
            .try_insert_new(key, value)
            .is_ok_and(|i| i.is_inserted())
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.pin().put(key, value).is_some()
    }
    fn as_any(&self) -> Option<&AnyMap> {
        Some(self)
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        self.pin().remove(&key).is_some()
    }
    const GET_MANY: bool = true;
    /// `MapRef::get_many_keys` hands out references to values: copying them out is part of
    /// what this measures.
    #[inline]
    fn get_many(
        &self,
        keys: &[u64],
        values: &mut [Option<u64>],
        _depth: usize,
        _prefetch: floe::Prefetch,
    ) {
        let m = self.pin();
        let mut found = vec![None; keys.len()];
        m.get_many_keys(keys, &mut found)
            .expect("one value slot per key");
        for (value, found) in values.iter_mut().zip(found) {
            *value = found.copied();
        }
    }
}

/// floe's single-thread map (`LocalMap`, writes with no atomic read-modify-write), for one
/// thread only, as `SingleThreadHashbrown` is.
pub struct SingleThreadFloe(UnsafeCell<floe::LocalMap<u64, u64, super::AnyHash>>);

impl SingleThreadFloe {
    pub fn new(map: Map) -> Self {
        Self(UnsafeCell::new(map.into()))
    }

    fn map(&self) -> &floe::LocalMap<u64, u64, super::AnyHash> {
        // SAFETY: single-threaded use (see the `Sync` impl); no `&mut` is alive.
        unsafe { &*self.0.get() }
    }

    #[allow(clippy::mut_from_ref)]
    fn map_mut(&self) -> &mut floe::LocalMap<u64, u64, super::AnyHash> {
        // SAFETY: single-threaded use (see the `Sync` impl); this is the only reference.
        unsafe { &mut *self.0.get() }
    }
}

// SAFETY: the harness runs this map from one thread at a time only (`MapKind::concurrent` is
// false, and runs with more threads are refused); threads are joined between runs, which
// orders every access.
unsafe impl Sync for SingleThreadFloe {}

impl BenchMap for SingleThreadFloe {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        self.map().get(&key)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        // A full table answers `false`, which the harness reports as a wrong answer.
        self.map_mut()
            .try_insert_new(key, value)
            .is_ok_and(|i| i.is_inserted())
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.map_mut().put(key, value).is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        self.map_mut().remove(&key).is_some()
    }
    fn table_bytes(&self) -> Option<usize> {
        Some(self.map().as_shared().stats().allocated_bytes)
    }
    const GET_MANY: bool = true;
    #[inline]
    fn get_many(
        &self,
        keys: &[u64],
        values: &mut [Option<u64>],
        depth: usize,
        prefetch: floe::Prefetch,
    ) {
        // Gets read the shared map's way (a `LocalMap` only changes how it writes).
        self.map()
            .as_shared()
            .get_many(keys, values, depth, prefetch);
    }
}
