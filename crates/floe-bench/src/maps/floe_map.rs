//! floe's `FlatMap` and `Map` as `BenchMap`s.

use super::{BenchMap, Map};

impl BenchMap for Map {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        floe::FlatMap::get(self, &key)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        // A full table answers `false`, which the harness reports as a wrong answer.
        floe::FlatMap::insert(self, key, value).is_ok_and(|i| i.is_inserted())
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
        self.pin().insert(key, value).is_ok_and(|i| i.is_inserted())
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        self.pin().update(&key, |_| value).is_some()
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        self.pin().remove(&key).is_some()
    }
}
