//! Counters in a [`Map`](crate::Map): values that are std's atomic integers, added to in
//! place by [`MapRef::fetch_add`].
//!
//! A `Map`'s values are immutable once published (readers hold plain references to them), so
//! a counter kept as a `u64` is changed by replacing its entry: one allocation, one swap and
//! one retirement per increment ([`MapRef::compute`]). An atomic value needs none of that:
//! the entry stays, and the increment is one atomic add on it. `FlatMap`'s
//! [`fetch_add`](crate::FlatMap::fetch_add) does the same in the table's own word.
//!
//! # Why `Relaxed` is enough
//!
//! Every read-modify-write of one atomic takes the latest value in its modification order
//! (coherence), so no increment is lost and each returns the count just before it: the
//! counter is exact and linearizable on its own. Nothing else is published through a
//! counter, so no ordering with other memory is promised (as for a `Relaxed` std counter);
//! the counter itself became visible with its entry, whose publication the map orders
//! (Release/Acquire on the slot).

use core::hash::{BuildHasher, Hash};
use core::sync::atomic::Ordering;

use crate::any_map::{Compute, MapRef, Operation};
use crate::error::{Error, OrRaise};
use seize::Guard;

mod sealed {
    pub trait Sealed {}
}

/// An atomic integer type of std (`AtomicU64`, `AtomicI32`, `AtomicUsize`, ...) as the value of
/// a [`Map`](crate::Map) of counters ([`MapRef::fetch_add`]). Sealed: implemented for std's
/// atomic integers only.
pub trait AtomicCounter: sealed::Sealed + Send + Sync {
    /// The integer it holds.
    type Value: Copy;

    /// A counter holding `value`.
    fn new(value: Self::Value) -> Self;

    /// Add `delta` (wrapping on overflow) and return the value before.
    fn add(&self, delta: Self::Value) -> Self::Value;

    /// The value now.
    fn value(&self) -> Self::Value;
}

macro_rules! atomic_counters {
    ($($atomic:ident: $int:ty),* $(,)?) => {$(
        impl sealed::Sealed for core::sync::atomic::$atomic {}

        impl AtomicCounter for core::sync::atomic::$atomic {
            type Value = $int;

            #[inline]
            fn new(value: $int) -> Self {
                core::sync::atomic::$atomic::new(value)
            }

            #[inline]
            fn add(&self, delta: $int) -> $int {
                // Relaxed: the module docs' argument.
                self.fetch_add(delta, Ordering::Relaxed)
            }

            #[inline]
            fn value(&self) -> $int {
                self.load(Ordering::Relaxed)
            }
        }
    )*};
}

atomic_counters!(
    AtomicU8: u8, AtomicU16: u16, AtomicU32: u32, AtomicU64: u64, AtomicUsize: usize,
    AtomicI8: i8, AtomicI16: i16, AtomicI32: i32, AtomicI64: i64, AtomicIsize: isize,
);

impl<K, A, S, G> MapRef<'_, K, A, S, G>
where
    K: Hash + Eq,
    A: AtomicCounter,
    S: BuildHasher,
    G: Guard,
{
    /// Add `delta` to the counter of `key` in place, inserting a counter of `delta` if the key
    /// is absent. Wraps on overflow. Returns the count before, `None` if the key was inserted
    /// (as [`FlatMap::fetch_add`](crate::FlatMap::fetch_add) does).
    ///
    /// A present key costs one lookup and one atomic add: no allocation, unlike a counter
    /// kept as a plain integer and replaced through [`compute`](Self::compute). Threads
    /// racing on an absent key each offer a counter; one is inserted and the others add to
    /// it, so no increment is lost.
    ///
    /// ```
    /// use std::sync::atomic::AtomicU64;
    ///
    /// let words = floe::Map::<String, AtomicU64>::new();
    /// let counts = words.pin();
    /// for word in "the cat saw the dog and the bird".split(' ') {
    ///     counts.fetch_add(word.to_string(), 1);
    /// }
    /// assert_eq!(counts.fetch_add("the".to_string(), 1), Some(3));
    /// assert_eq!(counts.count(&"dog".to_string()), Some(1));
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert), when the key is absent;
    /// [`try_fetch_add`](Self::try_fetch_add) returns the error instead.
    pub fn fetch_add(&self, key: K, delta: A::Value) -> Option<A::Value> {
        self.try_fetch_add(key, delta).or_raise()
    }

    /// [`fetch_add`](Self::fetch_add), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert), when the key is absent: the map is unchanged.
    pub fn try_fetch_add(&self, key: K, delta: A::Value) -> Result<Option<A::Value>, Error> {
        if let Some(counter) = self.get(&key) {
            return Ok(Some(counter.add(delta)));
        }
        let outcome = self.try_compute(key, |present| match present {
            // A pointer, not a reference: `decide`'s argument cannot outlive the call, but the
            // entry it names lives as long as our guard.
            Some(present) => Operation::Abort(core::ptr::from_ref(present)),
            None => Operation::Insert(A::new(delta)),
        })?;
        Ok(match outcome {
            Compute::Inserted(_) => None,
            // SAFETY: read from the map under our guard, which keeps the entry alive as long
            // as `self`.
            Compute::Aborted(present) => Some(unsafe { &*present }.add(delta)),
            _ => unreachable!("an insert if absent inserts or aborts"),
        })
    }

    /// The count of `key` now, `None` if absent.
    pub fn count<Q>(&self, key: &Q) -> Option<A::Value>
    where
        K: core::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).map(A::value)
    }
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    use core::sync::atomic::{AtomicI32, AtomicU64};

    use crate::Map;

    /// Two threads add to keys that start absent while a third reads them: every increment
    /// counted (Miri checks the in-place adds against the readers' loads).
    #[test]
    fn adds_in_place_and_counts_every_increment() {
        let map = Map::<u32, AtomicU64>::new();
        let rounds = if cfg!(miri) { 20 } else { 2_000 };
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for i in 0..rounds {
                        map.pin().fetch_add(i % 4, 1);
                    }
                });
            }
            scope.spawn(|| {
                for i in 0..rounds {
                    let seen = map.pin().count(&(i % 4)).unwrap_or(0);
                    assert!(seen <= 2 * rounds as u64);
                }
            });
        });
        let m = map.pin();
        let total: u64 = (0..4).map(|k| m.count(&k).unwrap()).sum();
        assert_eq!(total, 2 * rounds as u64);
    }

    #[test]
    fn signed_counters_wrap_and_report_the_count_before() {
        let map = Map::<&str, AtomicI32>::new();
        let m = map.pin();
        assert_eq!(m.fetch_add("x", i32::MAX), None);
        assert_eq!(m.fetch_add("x", 1), Some(i32::MAX));
        assert_eq!(m.count("x"), Some(i32::MIN));
        assert_eq!(m.fetch_add("x", -1), Some(i32::MIN));
        assert_eq!(m.count("y"), None);
    }
}
