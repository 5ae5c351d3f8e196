//! [`MapRef::entry`]: std's entry API on the concurrent map.
//!
//! std's `Entry` holds the map mutably, so nothing changes between `entry(k)` and the call
//! that ends the chain. A concurrent map cannot promise that without a lock (dashmap's entry
//! holds its shard's). Here the entry holds only the key: each call that ends a chain is one
//! of the map's own lock-free steps (a get, an insert if absent, or a `compute`), so it is
//! linearizable as those are, and answers what the map held at that step. What differs from
//! std follows from that: `and_modify` takes `FnMut(&V) -> V` (a new value made from the old one,
//! which may run again if another thread changes the key meanwhile) rather than
//! `FnOnce(&mut V)`, and a value made for an absent key may be dropped unused if another
//! thread inserts the key first.

use core::hash::{BuildHasher, Hash};

use seize::Guard;

use crate::{
    any_map::{Compute, MapRef, Operation},
    error::OrRaise,
};

impl<'m, K: Hash + Eq, V, S: BuildHasher, G: Guard> MapRef<'m, K, V, S, G> {
    /// The entry of `key`, for std's `entry` chains: `or_insert`, `or_insert_with`,
    /// `or_default`, `and_modify(..).or_insert(..)`. The entry holds the key, not its slot:
    /// each chain ends in one lock-free step on the map (a get, an insert if absent, or a
    /// [`compute`](Self::compute)), linearizable as those are, and answers what the map held
    /// at that step. So, unlike std's, `and_modify` makes a new value from `&V` and may run
    /// again if another thread changes the key meanwhile, and a value made for an absent key
    /// may be dropped unused if another thread inserts it first.
    ///
    /// ```
    /// let map = floe::Map::<String, u32>::new();
    /// let m = map.pin();
    /// for word in ["a", "b", "a"] {
    ///     m.entry(word.to_string()).and_modify(|n| n + 1).or_insert(1);
    /// }
    /// assert_eq!((m.get("a"), m.get("b")), (Some(&2), Some(&1)));
    /// assert_eq!(m.entry("c".to_string()).or_default(), &0);
    /// ```
    pub fn entry(&self, key: K) -> MapEntry<'_, 'm, K, V, S, G> {
        MapEntry { map: self, key }
    }
}

/// A key of a [`MapRef`], to read or write as std's `Entry` chains do
/// ([`MapRef::entry`]). Holds the key, not its slot: each call that ends a chain is one
/// atomic step on the map.
#[must_use = "an entry does nothing until a call such as `or_insert` ends the chain"]
pub struct MapEntry<'r, 'm, K, V, S, G> {
    map: &'r MapRef<'m, K, V, S, G>,
    key: K,
}

impl<'r, 'm, K: Hash + Eq, V, S: BuildHasher, G: Guard> MapEntry<'r, 'm, K, V, S, G> {
    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The key's value, inserting `value` first if the key is absent
    /// ([`MapRef::get_or_insert`]).
    ///
    /// # Panics
    /// As [`MapRef::insert`], when the key is absent and cannot be inserted.
    #[track_caller]
    pub fn or_insert(self, value: V) -> &'r V {
        self.map.get_or_insert(self.key, value)
    }

    /// The key's value, inserting `make()` first if the key is absent
    /// ([`MapRef::get_or_insert_with`]: `make` runs only for an absent key).
    ///
    /// # Panics
    /// As [`or_insert`](Self::or_insert).
    #[track_caller]
    pub fn or_insert_with(self, make: impl FnOnce() -> V) -> &'r V {
        self.map.get_or_insert_with(self.key, make)
    }

    /// As [`or_insert_with`](Self::or_insert_with), `make` given the key.
    ///
    /// # Panics
    /// As [`or_insert`](Self::or_insert).
    #[track_caller]
    pub fn or_insert_with_key(self, make: impl FnOnce(&K) -> V) -> &'r V {
        if let Some(present) = self.map.get(&self.key) {
            return present;
        }
        let value = make(&self.key);
        self.map.try_insert_or_get(self.key, || value).or_raise()
    }

    /// The key's value, inserting `V::default()` first if the key is absent.
    ///
    /// # Panics
    /// As [`or_insert`](Self::or_insert).
    #[track_caller]
    pub fn or_default(self) -> &'r V
    where
        V: Default,
    {
        self.map.get_or_insert_with(self.key, V::default)
    }

    /// Replace a present value with `modify(&value)` when the chain ends (with
    /// `or_insert`, `or_insert_with` or `or_default`, which say what an absent key gets).
    /// `modify` may run more than once: again on the newer value whenever another thread
    /// changes the key between its read and the write.
    pub fn and_modify<F: FnMut(&V) -> V>(self, modify: F) -> MapEntryModify<'r, 'm, K, V, S, G, F> {
        MapEntryModify {
            map: self.map,
            key: self.key,
            modify,
        }
    }
}

/// [`MapEntry::and_modify`]: an entry that replaces a present value, and inserts one if the
/// key is absent, in one [`MapRef::compute`].
#[must_use = "and_modify does nothing until `or_insert`, `or_insert_with` or `or_default`"]
pub struct MapEntryModify<'r, 'm, K, V, S, G, F> {
    map: &'r MapRef<'m, K, V, S, G>,
    key: K,
    modify: F,
}

impl<'r, 'm, K, V, S, G, F> MapEntryModify<'r, 'm, K, V, S, G, F>
where
    K: Hash + Eq,
    S: BuildHasher,
    G: Guard,
    F: FnMut(&V) -> V,
{
    /// Modify the present value, or insert `value`; the value the key holds after.
    ///
    /// # Panics
    /// As [`MapEntry::or_insert`].
    #[track_caller]
    pub fn or_insert(self, value: V) -> &'r V {
        self.or_insert_with(|| value)
    }

    /// Modify the present value, or insert `make()` (run at most once); the value the key
    /// holds after.
    ///
    /// # Panics
    /// As [`MapEntry::or_insert`].
    #[track_caller]
    pub fn or_insert_with(self, make: impl FnOnce() -> V) -> &'r V {
        let Self {
            map,
            key,
            mut modify,
        } = self;
        let mut make = Some(make);
        // A value made for the absent key whose insert lost a race: kept for the next
        // attempt that finds the key absent (`make` runs once), while a modified value that
        // lost is dropped (the next attempt modifies the newer value).
        let mut spare = None;
        let mut last_was_insert = false;
        let done = map
            .try_compute_returning(key, |present, returned| {
                if last_was_insert {
                    spare = returned.or(spare.take());
                }
                last_was_insert = present.is_none();
                Operation::<V, ()>::Insert(match present {
                    Some(value) => modify(value),
                    None => spare.take().unwrap_or_else(|| {
                        make.take()
                            .expect("a value made once comes back until stored")(
                        )
                    }),
                })
            })
            .or_raise();
        match done {
            Compute::Inserted(value) | Compute::Updated { new: value, .. } => value,
            Compute::Removed(_) | Compute::Absent | Compute::Aborted(()) => {
                unreachable!("an insert inserts or updates")
            }
        }
    }

    /// Modify the present value, or insert `V::default()`; the value the key holds after.
    ///
    /// # Panics
    /// As [`MapEntry::or_insert`].
    #[track_caller]
    pub fn or_default(self) -> &'r V
    where
        V: Default,
    {
        self.or_insert_with(V::default)
    }
}
