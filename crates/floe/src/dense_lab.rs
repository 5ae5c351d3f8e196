//! A handle on the dense layout's table (`raw/dense.rs`) for `floe-bench dense`, until the
//! table driver carries that layout: one table of a fixed size, no growth, no iteration.
//! Hidden from the docs and not part of the API; the layout reaches users through the
//! builder once growth is built.

use core::hash::BuildHasher;

use crate::{
    config::Backend,
    error::Error,
    hash::DefaultHashBuilder,
    raw::{
        dense::{Action, DenseTable, Full, GROW_AT_PER_MILLE, LINE_SLOTS},
        dispatch::Loader,
    },
};

/// Keys per chunk of a batched get (hashed together, then probed with prefetching).
const BATCH_CHUNK: usize = 64;
/// Home lines prefetched ahead in a batched get.
const BATCH_DEPTH: usize = 16;

/// A fixed-size table of the dense layout over 8-byte keys and values (module docs).
#[doc(hidden)]
pub struct DenseLab<S = DefaultHashBuilder> {
    table: DenseTable,
    loader: Loader,
    hasher: S,
}

impl DenseLab {
    /// A table whose growth trigger is `keys` keys, with the default hasher and backend.
    ///
    /// # Errors
    /// As [`DenseLab::with_hasher`].
    pub fn new(keys: usize) -> Result<Self, Error> {
        Self::with_hasher(keys, Backend::Auto, DefaultHashBuilder::default())
    }
}

impl<S: BuildHasher> DenseLab<S> {
    /// A table whose growth trigger ([`DenseLab::capacity`]) is at least `keys` keys.
    ///
    /// # Errors
    /// `CapacityOverflow`, `AllocationFailed`, `UnsupportedBackend`, `DegenerateHasher`.
    pub fn with_hasher(keys: usize, backend: Backend, hasher: S) -> Result<Self, Error> {
        let lines = keys
            .checked_mul(1000)
            .ok_or(Error::CapacityOverflow)?
            .div_ceil(LINE_SLOTS * GROW_AT_PER_MILLE)
            .max(4);
        let loader = Loader::new(backend).ok_or(Error::UnsupportedBackend(backend))?;
        let table = DenseTable::new(lines, true, &|word| hasher.hash_one(word))?;
        Ok(DenseLab {
            table,
            loader,
            hasher,
        })
    }

    #[inline(always)]
    fn hash(&self, key: u64) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u64> {
        self.table.get_with(self.loader, self.hash(key), key)
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
        let mut located = [(0u64, 0u64); BATCH_CHUNK];
        for (keys, values) in keys.chunks(BATCH_CHUNK).zip(values.chunks_mut(BATCH_CHUNK)) {
            for (slot, &key) in located.iter_mut().zip(keys) {
                *slot = (self.hash(key), key);
            }
            self.table
                .get_batch_with(self.loader, &located[..keys.len()], BATCH_DEPTH, values);
        }
        Ok(())
    }

    fn modify<R>(
        &self,
        key: u64,
        decide: impl FnMut(Option<u64>) -> (Action, R),
    ) -> Result<R, Error> {
        let rehash = |word: u64| self.hasher.hash_one(word);
        self.table
            .modify(self.hash(key), key, &rehash, decide)
            .map_err(|Full| Error::Full)
    }

    /// Insert `key` if absent; the present value (unchanged) if not.
    ///
    /// # Errors
    /// [`Error::Full`]: neither of the key's lines nor any displacement had room.
    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>, Error> {
        self.modify(key, |current| match current {
            Some(present) => (Action::Keep, Some(present)),
            None => (Action::Store(value), None),
        })
    }

    /// Make `key` hold `value`; the previous value.
    ///
    /// # Errors
    /// [`Error::Full`] as for `insert`.
    pub fn put(&self, key: u64, value: u64) -> Result<Option<u64>, Error> {
        self.modify(key, |current| (Action::Store(value), current))
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
        self.modify(key, |current| (Action::Remove, current))
            .unwrap_or(None)
    }

    /// Keys stored.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys at the growth trigger (82% of the slots).
    pub fn capacity(&self) -> usize {
        self.table.lines() * LINE_SLOTS * GROW_AT_PER_MILLE / 1000
    }

    /// Bytes of table memory (lines and writer bytes).
    pub fn table_bytes(&self) -> usize {
        self.table.table_bytes()
    }

    /// The backend the gets run on.
    pub fn backend(&self) -> Backend {
        self.loader.backend()
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
