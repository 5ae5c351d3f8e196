//! A handle on the dense layout (`raw/dense.rs`, `raw/dense_driver.rs`) for `floe-bench
//! dense` and the tests, until the builder offers that layout: 8-byte keys and values, growth
//! and shrinking, no iteration. Hidden from the docs and not part of the API.

use core::hash::BuildHasher;

use crate::{
    config::{Backend, ResizeMode},
    error::Error,
    hash::DefaultHashBuilder,
    raw::{dense::Action, dense_driver::DenseMap},
};

/// Keys per chunk of a batched get (hashed together, then probed with prefetching).
const BATCH_CHUNK: usize = 64;
/// Home lines prefetched ahead in a batched get.
const BATCH_DEPTH: usize = 16;

/// A map of the dense layout over 8-byte keys and values (module docs).
#[doc(hidden)]
pub struct DenseLab<S = DefaultHashBuilder> {
    map: DenseMap,
    hasher: S,
}

impl DenseLab {
    /// A map whose first table's trigger is `keys` keys and that never grows past it (an
    /// insert that finds no room answers `Full`), with the default hasher and backend.
    ///
    /// # Errors
    /// As [`DenseLab::with_hasher`].
    pub fn new(keys: usize) -> Result<Self, Error> {
        Self::with_hasher(keys, keys, Backend::Auto, DefaultHashBuilder::default())
    }

    /// A map whose first table's trigger is `keys` keys, growing without limit.
    ///
    /// # Errors
    /// As [`DenseLab::with_hasher`].
    pub fn growing(keys: usize) -> Result<Self, Error> {
        Self::with_hasher(
            keys,
            usize::MAX,
            Backend::Auto,
            DefaultHashBuilder::default(),
        )
    }
}

impl<S: BuildHasher> DenseLab<S> {
    /// A map whose first table's trigger ([`DenseLab::capacity`]) is at least `keys` keys,
    /// growing up to tables whose trigger is `max_keys`.
    ///
    /// # Errors
    /// `CapacityOverflow`, `AllocationFailed`, `UnsupportedBackend`, `DegenerateHasher`.
    pub fn with_hasher(
        keys: usize,
        max_keys: usize,
        backend: Backend,
        hasher: S,
    ) -> Result<Self, Error> {
        let map = DenseMap::new(
            keys,
            max_keys,
            backend,
            ResizeMode::Incremental,
            true,
            &|word| hasher.hash_one(word),
        )?;
        Ok(DenseLab { map, hasher })
    }

    #[inline(always)]
    fn hash(&self, key: u64) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u64> {
        let rehash = |word: u64| self.hasher.hash_one(word);
        self.map.get(self.hash(key), key, &rehash)
    }

    /// Gets of `keys` into `values`, in order, home lines prefetched ahead.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if the slices differ in length (nothing is read).
    pub fn get_many(&self, keys: &[u64], values: &mut [Option<u64>]) -> Result<(), Error> {
        if keys.len() != values.len() {
            return Err(Error::LengthMismatch {
                keys: keys.len(),
                values: values.len(),
            });
        }
        let rehash = |word: u64| self.hasher.hash_one(word);
        let mut located = [(0u64, 0u64); BATCH_CHUNK];
        for (keys, values) in keys.chunks(BATCH_CHUNK).zip(values.chunks_mut(BATCH_CHUNK)) {
            for (slot, &key) in located.iter_mut().zip(keys) {
                *slot = (self.hash(key), key);
            }
            self.map
                .get_batch(&located[..keys.len()], BATCH_DEPTH, values, &rehash);
        }
        Ok(())
    }

    fn modify<R>(
        &self,
        key: u64,
        decide: impl FnMut(Option<u64>) -> (Action, R),
    ) -> Result<R, Error> {
        let rehash = |word: u64| self.hasher.hash_one(word);
        self.map.modify(self.hash(key), key, &rehash, decide)
    }

    /// Insert `key` if absent; the present value (unchanged) if not.
    ///
    /// # Errors
    /// [`Error::Full`]: no room, and the map may not grow; [`Error::HashCollisions`]: both of
    /// the key's lines hold keys of its hash; [`Error::AllocationFailed`] for a growth.
    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>, Error> {
        self.modify(key, Action::insert(value))
    }

    /// Make `key` hold `value`; the previous value.
    ///
    /// # Errors
    /// As for `insert`.
    pub fn put(&self, key: u64, value: u64) -> Result<Option<u64>, Error> {
        self.modify(key, Action::put(value))
    }

    /// Add `delta` to a present key's value (wrapping); the previous value, `None` if absent.
    pub fn fetch_add(&self, key: u64, delta: u64) -> Option<u64> {
        self.modify(key, |current| match current {
            Some(v) => (Action::Store(v.wrapping_add(delta)), Some(v)),
            None => (Action::Keep, None),
        })
        .unwrap_or(None)
    }

    /// Remove `key`; its value.
    pub fn remove(&self, key: u64) -> Option<u64> {
        self.modify(key, Action::remove).unwrap_or(None)
    }

    /// Make room for `additional` more keys at once.
    ///
    /// # Errors
    /// `CapacityOverflow`, `Full` past the growth limit, `AllocationFailed`.
    pub fn reserve(&self, additional: usize) -> Result<(), Error> {
        let rehash = |word: u64| self.hasher.hash_one(word);
        self.map.reserve(additional, &rehash)
    }

    /// Move into a smaller table if the keys fill less than a quarter of this one's trigger;
    /// whether it did.
    ///
    /// # Errors
    /// `AllocationFailed`.
    pub fn shrink_to_fit(&self) -> Result<bool, Error> {
        let rehash = |word: u64| self.hasher.hash_one(word);
        self.map.shrink_to_fit(&rehash)
    }

    /// Keys stored.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys at the current table's growth trigger (82% of the slots).
    pub fn capacity(&self) -> usize {
        self.map.capacity()
    }

    /// Bytes of table memory (lines and writer bytes).
    pub fn table_bytes(&self) -> usize {
        self.map.table_bytes()
    }

    /// The backend the gets run on.
    pub fn backend(&self) -> Backend {
        self.map.backend()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Wrong input answers with an error and changes nothing: a size no memory holds, slices of
    /// different lengths, a table with no room left.
    #[test]
    fn bad_input_is_an_error() {
        if cfg!(not(miri)) {
            assert!(matches!(
                DenseLab::new(usize::MAX),
                Err(Error::CapacityOverflow)
            ));
            assert!(matches!(
                DenseLab::new(usize::MAX / 1000),
                Err(Error::CapacityOverflow | Error::AllocationFailed { .. })
            ));
        }
        let lab = DenseLab::new(8).unwrap();
        assert_eq!(lab.insert(7, 70), Ok(None));
        let mut out = [None; 2];
        assert!(matches!(
            lab.get_many(&[7, 8, 9], &mut out),
            Err(Error::LengthMismatch { keys: 3, values: 2 })
        ));
        assert_eq!(out, [None, None]);
        let mut stored = 1;
        let mut key = 100;
        // 4 lines of 4 slots: room runs out at 16 keys at the latest.
        while lab.insert(key, key) != Err(Error::Full) {
            stored += 1;
            key += 1;
            assert!(stored <= 16, "more keys than slots");
        }
        assert_eq!(lab.len(), stored);
        assert_eq!(lab.get(key), None);
        assert_eq!(lab.put(key, 1), Err(Error::Full));
        assert_eq!(lab.get(7), Some(70));
        assert_eq!(lab.remove(7), Some(70));
        // The slot 7 freed is in one of its own lines.
        assert_eq!(lab.insert(7, 71), Ok(None));
        assert_eq!(lab.get(7), Some(71));
    }
}
