//! [`LocalMap`]: [`FlatMap`]'s table for one thread (DLHT's single-thread build).
//!
//! A thin shell over the same driver and layout: reads take the shared paths (they have no
//! read-modify-write to skip), writes take `&mut self` and the driver's single-thread paths
//! (`raw/bins/local.rs`), where every commit, retire and chaining CAS is a plain store and growth
//! moves the table in one pass with plain stores. A `FlatMap` becomes a `LocalMap` and back
//! without copying (`From`, [`LocalMap::into_shared`]): fill a table on one thread, then share
//! it.

use core::{cell::Cell, hash::BuildHasher, marker::PhantomData};

use crate::{
    error::{Error, OrRaise},
    hash::DefaultHashBuilder,
    inline::{Inline, InlineKey},
    map::{FlatMap, Insert, Iter},
    raw::{IF_ABSENT, IF_PRESENT, UPSERT},
};

/// A map for one thread, with [`FlatMap`]'s layout and std's `HashMap` interface for keys and
/// values of up to 8 bytes: `insert` replaces (returning the old value) and `remove` take
/// `&mut self` and use no atomic read-modify-write; `get` and the rest read as `FlatMap`
/// does. It is `Send` (move it to another thread) but not `Sync`.
///
/// ```
/// let mut counts = floe::LocalMap::<u64, u64>::new();
/// for word in [3, 1, 3, 3] {
///     let seen = counts.get(&word).unwrap_or(0);
///     counts.insert(word, seen + 1);
/// }
/// assert_eq!(counts.get(&3), Some(3));
/// assert_eq!(counts.remove(&1), Some(1));
/// // Built on one thread, shared by many.
/// let shared: floe::FlatMap<u64, u64> = counts.into_shared();
/// assert_eq!(shared.get(&3), Some(3));
/// ```
pub struct LocalMap<K, V, S = DefaultHashBuilder> {
    map: FlatMap<K, V, S>,
    /// `Cell` is `Send` and not `Sync`: one thread at a time.
    one_thread: PhantomData<Cell<()>>,
}

impl<K: InlineKey, V: Inline> LocalMap<K, V> {
    /// An empty map with the default hasher (see [`FlatMap::new`]).
    ///
    /// # Panics
    /// As [`FlatMap::new`].
    #[track_caller]
    pub fn new() -> Self {
        FlatMap::new().into()
    }

    /// A map sized for `keys` keys (see [`FlatMap::with_capacity`]).
    ///
    /// # Panics
    /// As [`FlatMap::with_capacity`]; [`try_with_capacity`](Self::try_with_capacity) returns
    /// the error instead.
    #[track_caller]
    pub fn with_capacity(keys: usize) -> Self {
        Self::try_with_capacity(keys).or_raise()
    }

    /// A map sized for `keys` keys, or the reason it cannot be had.
    ///
    /// # Errors
    /// As [`FlatMap::try_with_capacity`].
    pub fn try_with_capacity(keys: usize) -> Result<Self, Error> {
        Ok(FlatMap::try_with_capacity(keys)?.into())
    }
}

/// An empty map (see [`LocalMap::new`]).
///
/// # Panics
/// As [`FlatMap`]'s `Default`.
impl<K: InlineKey, V: Inline, S: BuildHasher + Default> Default for LocalMap<K, V, S> {
    #[track_caller]
    fn default() -> Self {
        FlatMap::default().into()
    }
}

/// Take a shared map for single-thread use, without copying it: a growth in progress is
/// finished, and shadow inserts still open are aborted (owning the map means no [`Shadow`]
/// handle is alive, so one left open was leaked and nothing could resolve it).
///
/// [`Shadow`]: crate::Shadow
impl<K: InlineKey, V: Inline, S: BuildHasher> From<FlatMap<K, V, S>> for LocalMap<K, V, S> {
    fn from(mut map: FlatMap<K, V, S>) -> Self {
        map.settle_owned();
        LocalMap {
            map,
            one_thread: PhantomData,
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> LocalMap<K, V, S> {
    /// The value of `key`, if present.
    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        self.map.get(key)
    }

    /// Whether `key` is present.
    #[inline]
    pub fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Insert `key -> value`, replacing a present value, which is returned (std's
    /// `HashMap::insert`).
    ///
    /// # Panics
    /// Where std's would (the larger table's memory cannot be had), and on a map capped by
    /// [`Builder::max_bins`](crate::Builder::max_bins) that is full;
    /// [`try_insert`](Self::try_insert) returns the error instead.
    #[inline]
    #[track_caller]
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.try_insert(key, value).or_raise()
    }

    /// [`insert`](Self::insert), answering what it panics on with an error (the map is then
    /// unchanged).
    ///
    /// # Errors
    /// As [`FlatMap::try_insert`].
    #[inline]
    pub fn try_insert(&mut self, key: K, value: V) -> Result<Option<V>, Error> {
        self.map.write_owned::<UPSERT>(key, value)
    }

    /// Insert `key -> value` only if `key` is absent ([`FlatMap::insert_new`]): whether
    /// it was inserted or the value present (left unchanged).
    ///
    /// ```
    /// use floe::Insert;
    /// let mut map = floe::LocalMap::<u64, u64>::new();
    /// assert_eq!(map.insert_new(1, 10), Insert::Inserted);
    /// assert_eq!(map.insert_new(1, 11), Insert::Present(10));
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert); [`try_insert_new`](Self::try_insert_new) returns the error
    /// instead.
    #[inline]
    #[track_caller]
    pub fn insert_new(&mut self, key: K, value: V) -> Insert<V> {
        self.try_insert_new(key, value).or_raise()
    }

    /// [`insert_new`](Self::insert_new), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert).
    #[inline]
    pub fn try_insert_new(&mut self, key: K, value: V) -> Result<Insert<V>, Error> {
        Ok(match self.map.write_owned::<IF_ABSENT>(key, value)? {
            None => Insert::Inserted,
            Some(present) => Insert::Present(present),
        })
    }

    /// Replace the value of `key` only if it is present ([`FlatMap::put`]): the old value,
    /// or `None` (and no change) if absent.
    #[inline]
    pub fn put(&mut self, key: K, value: V) -> Option<V> {
        match self.map.write_owned::<IF_PRESENT>(key, value) {
            Ok(before) => before,
            Err(_) => unreachable!("a replace never needs room"),
        }
    }

    /// Remove `key`, returning its value.
    #[inline]
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove_owned(key)
    }

    /// The value of `key` to change in place (std's `get_mut`), if present. Values live in
    /// the table as words, so this lends a copy ([`ValueMut`]) that is written back when it
    /// is dropped, if it was changed.
    ///
    /// ```
    /// let mut map = floe::LocalMap::<u64, u32>::new();
    /// map.insert(1, 10);
    /// if let Some(mut value) = map.get_mut(&1) {
    ///     *value += 5;
    /// }
    /// assert_eq!(map.get(&1), Some(15));
    /// assert!(map.get_mut(&2).is_none());
    /// ```
    pub fn get_mut(&mut self, key: &K) -> Option<ValueMut<'_, K, V, S>> {
        let value = self.get(key)?;
        Some(ValueMut {
            map: self,
            key: *key,
            value,
            changed: false,
        })
    }

    /// The entry of `key`, to look at, insert, change or remove in place (std's `entry`).
    ///
    /// ```
    /// let mut counts = floe::LocalMap::<u64, u64>::new();
    /// for word in [3, 1, 3, 3] {
    ///     *counts.entry(word).or_insert(0) += 1;
    /// }
    /// assert_eq!(counts.get(&3), Some(3));
    /// counts.entry(1).and_modify(|n| *n *= 10).or_default();
    /// assert_eq!(counts.get(&1), Some(10));
    /// if let floe::local::Entry::Occupied(entry) = counts.entry(3) {
    ///     assert_eq!(entry.remove(), 3);
    /// }
    /// assert_eq!(counts.len(), 1);
    /// ```
    pub fn entry(&mut self, key: K) -> Entry<'_, K, V, S> {
        match self.get(&key) {
            Some(value) => Entry::Occupied(OccupiedEntry {
                value: ValueMut {
                    map: self,
                    key,
                    value,
                    changed: false,
                },
            }),
            None => Entry::Vacant(VacantEntry { map: self, key }),
        }
    }

    /// Keys present.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is present.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Remove every key.
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Make room for `additional` more keys (see [`FlatMap::reserve`]).
    ///
    /// # Errors
    /// As [`FlatMap::reserve`]; the map is unchanged.
    pub fn reserve(&mut self, additional: usize) -> Result<(), Error> {
        self.map.reserve(additional)
    }

    /// The pairs, in table order.
    pub fn iter(&self) -> Iter<'_, K, V, S> {
        self.map.iter()
    }

    /// The map's shared interface, for what `LocalMap` does not offer itself (batches of
    /// gets, statistics, `for_each`). Writes through it are allowed and take the shared
    /// paths; the next `&mut` write finishes a growth they started and aborts a shadow they
    /// leaked.
    pub fn as_shared(&self) -> &FlatMap<K, V, S> {
        &self.map
    }

    /// The map for shared use, without copying it.
    pub fn into_shared(self) -> FlatMap<K, V, S> {
        self.map
    }
}

impl<K, V, S> core::fmt::Debug for LocalMap<K, V, S>
where
    K: InlineKey + core::fmt::Debug,
    V: Inline + core::fmt::Debug,
    S: BuildHasher,
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Extend<(K, V)> for LocalMap<K, V, S> {
    /// Insert every pair (later pairs replace earlier ones, as std's).
    ///
    /// # Panics
    /// As [`LocalMap::insert`].
    #[track_caller]
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        let pairs = pairs.into_iter();
        // Growth moves the table in one pass; a size hint saves the intermediate ones.
        let _ = self.reserve(pairs.size_hint().0);
        for (key, value) in pairs {
            self.insert(key, value);
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher + Default> FromIterator<(K, V)> for LocalMap<K, V, S> {
    #[track_caller]
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut map = Self::default();
        map.extend(pairs);
        map
    }
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn grows_replaces_and_removes_without_read_modify_writes() {
        let n = if cfg!(miri) { 300 } else { 50_000u64 };
        let mut map =
            LocalMap::<u64, u64>::from(FlatMap::builder().bins(2).link_buckets(1).build().unwrap());
        for k in 0..n {
            assert_eq!(map.insert(k, k), None);
        }
        for k in (0..n).step_by(2) {
            assert_eq!(map.insert(k, k + 1), Some(k));
        }
        for k in (0..n).step_by(3) {
            assert_eq!(map.remove(&k), Some(k + u64::from(k % 2 == 0)));
        }
        let present = |k: u64| !k.is_multiple_of(3);
        assert_eq!(map.len(), (0..n).filter(|&k| present(k)).count());
        for k in 0..n + 10 {
            let want = (k < n && present(k)).then_some(k + u64::from(k % 2 == 0));
            assert_eq!(map.get(&k), want, "key {k}");
        }
        let shared = map.into_shared();
        assert_eq!(shared.check_invariants(), shared.len());
        assert_eq!(
            shared.stats().live_tables,
            1,
            "every replaced table freed at once"
        );
    }

    #[test]
    fn a_capped_or_crowded_map_answers_errors() {
        let mut capped = LocalMap::<u64, u64>::from(
            FlatMap::builder()
                .bins(2)
                .link_buckets(0)
                .max_bins(2)
                .build()
                .unwrap(),
        );
        let mut full = false;
        for k in 0..100 {
            match capped.try_insert(k, k) {
                Ok(None) => {}
                Err(Error::Full) => full = true,
                other => panic!("{other:?}"),
            }
        }
        assert!(full);
        assert_eq!(capped.len(), capped.as_shared().check_invariants());
        // Keys 1000..2000 all hash to 0 (one bin in every table): an error once the bin is
        // full, never a growth without end.
        #[derive(Clone, Copy, Default)]
        struct Crowding;
        struct CrowdingHasher(u64);
        impl core::hash::Hasher for CrowdingHasher {
            fn write_u64(&mut self, word: u64) {
                self.0 = if (1000..2000).contains(&word) {
                    0
                } else {
                    word.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                };
            }
            fn write(&mut self, _: &[u8]) {
                unreachable!("the map hashes words only")
            }
            fn finish(&self) -> u64 {
                self.0
            }
        }
        impl BuildHasher for Crowding {
            type Hasher = CrowdingHasher;
            fn build_hasher(&self) -> CrowdingHasher {
                CrowdingHasher(0)
            }
        }
        let mut crowded = LocalMap::<u64, u64, Crowding>::default();
        let answers: Vec<_> = (1000..1020).map(|k| crowded.try_insert(k, k)).collect();
        assert!(answers[..15].iter().all(|a| *a == Ok(None)), "{answers:?}");
        assert!(answers[15..]
            .iter()
            .all(|a| *a == Err(Error::HashCollisions)));
        assert_eq!(crowded.len(), 15);
        assert_eq!(crowded.as_shared().stats().live_tables, 1);
    }

    #[test]
    fn writes_through_the_shared_interface_are_settled_by_the_next_local_write() {
        let mut local = LocalMap::from(FlatMap::<u64, u64>::builder().bins(2).build().unwrap());
        core::mem::forget(local.as_shared().insert_shadow(5000, 1).unwrap());
        // Shared inserts until one leaves an (incremental) growth half done: the insert that
        // starts a growth moves only its own bin.
        let mut next = 0;
        while !local.as_shared().stats().migrating {
            assert!(
                next < 100_000,
                "no growth was left half done: the test did not test"
            );
            assert!(local.as_shared().insert_new(next, next).is_inserted());
            next += 1;
        }
        assert!(local.as_shared().stats().migrating);
        assert_eq!(
            local.insert_new(5000, 2),
            crate::Insert::Inserted,
            "leaked shadow aborted"
        );
        let n = if cfg!(miri) { 100 } else { 4000 };
        for k in next..n {
            local.insert(k, k);
        }
        assert_eq!(local.remove(&3), Some(3));
        let shared = local.into_shared();
        assert_eq!(shared.check_invariants(), n as usize);
        assert_eq!(shared.get(&5000), Some(2));
        assert!((0..n).all(|k| shared.get(&k) == (k != 3).then_some(k)));
        // A shadow leaked with no growth pending: the next write to its bin aborts it.
        let mut local = LocalMap::<u64, u64>::new();
        core::mem::forget(local.as_shared().insert_shadow(9, 1).unwrap());
        assert_eq!(local.insert_new(9, 2), crate::Insert::Inserted);
        assert_eq!(local.into_shared().check_invariants(), 1);
    }

    #[test]
    fn dense_local_maps_abort_leaked_shadows() {
        use crate::Layout;
        let shared = FlatMap::<u64, u64>::builder()
            .layout(Layout::Dense)
            .capacity(1)
            .build()
            .unwrap();
        let n = if cfg!(miri) { 100 } else { 1000 };
        for k in 0..n {
            assert!(shared.insert_new(k, k).is_inserted());
        }
        for k in [5000, 5001] {
            core::mem::forget(shared.insert_shadow(k, 1).unwrap());
        }
        let mut local = LocalMap::from(shared);
        // Through the shared interface, whose writes abort nothing themselves: `from` did.
        assert_eq!(
            local.as_shared().insert_new(5000, 2),
            crate::Insert::Inserted
        );
        assert_eq!(
            local.as_shared().insert_new(5001, 3),
            crate::Insert::Inserted
        );
        // Leaked through the shared interface: the next local write of the key aborts it
        // (an upsert would otherwise wait for ever, an insert refuse).
        core::mem::forget(local.as_shared().insert_shadow(9000, 1).unwrap());
        assert_eq!(local.insert(9000, 4), None);
        core::mem::forget(local.as_shared().insert_shadow(9001, 1).unwrap());
        assert_eq!(local.insert_new(9001, 5), crate::Insert::Inserted);
        let shared = local.into_shared();
        assert_eq!(shared.check_invariants(), n as usize + 4);
        assert_eq!(shared.get(&9000), Some(4));
        assert_eq!(shared.get(&9001), Some(5));
    }

    #[test]
    fn shared_to_local_settles_and_back() {
        let shared = FlatMap::<u64, u64>::builder().bins(2).build().unwrap();
        let n = if cfg!(miri) { 100 } else { 1000 };
        for k in 0..n {
            assert!(shared.insert_new(k, k).is_inserted());
        }
        let leaked = shared.insert_shadow(5000, 1).unwrap();
        core::mem::forget(leaked);
        let mut local = LocalMap::from(shared);
        assert_eq!(local.insert(5000, 2), None, "the leaked shadow was aborted");
        for k in n..3 * n {
            local.insert(k, k);
        }
        let shared = local.into_shared();
        assert_eq!(shared.check_invariants(), 3 * n as usize + 1);
        assert_eq!(shared.get(&5000), Some(2));
        assert_eq!(shared.remove(&7), Some(7));
    }
}

/// A value of a [`LocalMap`] lent to be changed in place ([`LocalMap::get_mut`], an entry's
/// [`or_insert`](Entry::or_insert)): a copy of it, written back to the key when this is dropped
/// if it was changed (the key is present throughout: nothing else can write the map while this
/// borrows it).
pub struct ValueMut<'a, K: InlineKey, V: Inline, S: BuildHasher> {
    map: &'a mut LocalMap<K, V, S>,
    key: K,
    value: V,
    changed: bool,
}

impl<K: InlineKey, V: Inline, S: BuildHasher> ValueMut<'_, K, V, S> {
    /// The key this value is of.
    pub fn key(&self) -> K {
        self.key
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> core::ops::Deref for ValueMut<'_, K, V, S> {
    type Target = V;

    fn deref(&self) -> &V {
        &self.value
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> core::ops::DerefMut for ValueMut<'_, K, V, S> {
    fn deref_mut(&mut self) -> &mut V {
        self.changed = true;
        &mut self.value
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Drop for ValueMut<'_, K, V, S> {
    fn drop(&mut self) {
        if self.changed {
            // The key is present: it was found or inserted under the `&mut` borrow this
            // holds, so the put replaces it (a put never needs room).
            let before = self.map.put(self.key, self.value);
            debug_assert!(before.is_some(), "the lent key stays present");
        }
    }
}

impl<K, V, S> core::fmt::Debug for ValueMut<'_, K, V, S>
where
    K: InlineKey + core::fmt::Debug,
    V: Inline + core::fmt::Debug,
    S: BuildHasher,
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ValueMut")
            .field("key", &self.key)
            .field("value", &self.value)
            .finish()
    }
}

/// A key's place in a [`LocalMap`] ([`LocalMap::entry`]), as std's `hash_map::Entry`.
pub enum Entry<'a, K: InlineKey, V: Inline, S: BuildHasher> {
    /// The key is present.
    Occupied(OccupiedEntry<'a, K, V, S>),
    /// The key is absent.
    Vacant(VacantEntry<'a, K, V, S>),
}

/// A present key's entry.
pub struct OccupiedEntry<'a, K: InlineKey, V: Inline, S: BuildHasher> {
    value: ValueMut<'a, K, V, S>,
}

/// An absent key's entry.
pub struct VacantEntry<'a, K: InlineKey, V: Inline, S: BuildHasher> {
    map: &'a mut LocalMap<K, V, S>,
    key: K,
}

impl<'a, K: InlineKey, V: Inline, S: BuildHasher> Entry<'a, K, V, S> {
    /// The entry's key.
    pub fn key(&self) -> K {
        match self {
            Entry::Occupied(entry) => entry.key(),
            Entry::Vacant(entry) => entry.key(),
        }
    }

    /// The value, `value` inserted first if the key is absent.
    ///
    /// # Panics
    /// As [`LocalMap::insert`], when the key is absent.
    #[track_caller]
    pub fn or_insert(self, value: V) -> ValueMut<'a, K, V, S> {
        self.or_insert_with(|| value)
    }

    /// The value, `make()` inserted first if the key is absent.
    ///
    /// # Panics
    /// As [`LocalMap::insert`], when the key is absent.
    #[track_caller]
    pub fn or_insert_with(self, make: impl FnOnce() -> V) -> ValueMut<'a, K, V, S> {
        match self {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(make()),
        }
    }

    /// The value, `V::default()` inserted first if the key is absent.
    ///
    /// # Panics
    /// As [`LocalMap::insert`], when the key is absent.
    #[track_caller]
    pub fn or_default(self) -> ValueMut<'a, K, V, S>
    where
        V: Default,
    {
        self.or_insert_with(V::default)
    }

    /// Change a present value in place with `f`; an absent key's entry passes through.
    pub fn and_modify(mut self, f: impl FnOnce(&mut V)) -> Self {
        if let Entry::Occupied(entry) = &mut self {
            f(entry.get_mut());
        }
        self
    }
}

impl<'a, K: InlineKey, V: Inline, S: BuildHasher> OccupiedEntry<'a, K, V, S> {
    /// The key.
    pub fn key(&self) -> K {
        self.value.key
    }

    /// The value.
    pub fn get(&self) -> V {
        *self.value
    }

    /// The value to change in place (written back when the entry is dropped).
    pub fn get_mut(&mut self) -> &mut V {
        &mut self.value
    }

    /// The value to change in place, for as long as the map's borrow.
    pub fn into_mut(self) -> ValueMut<'a, K, V, S> {
        self.value
    }

    /// Replace the value; returns the one replaced.
    pub fn insert(&mut self, value: V) -> V {
        core::mem::replace(&mut *self.value, value)
    }

    /// Remove the key; returns its value (with any change made through this entry).
    pub fn remove(mut self) -> V {
        self.value.changed = false;
        let value = self.value.value;
        self.value.map.remove(&self.value.key);
        value
    }
}

impl<'a, K: InlineKey, V: Inline, S: BuildHasher> VacantEntry<'a, K, V, S> {
    /// The key.
    pub fn key(&self) -> K {
        self.key
    }

    /// Insert the key with `value`; the value to change in place.
    ///
    /// # Panics
    /// As [`LocalMap::insert`].
    #[track_caller]
    pub fn insert(self, value: V) -> ValueMut<'a, K, V, S> {
        self.map.insert(self.key, value);
        ValueMut {
            map: self.map,
            key: self.key,
            value,
            changed: false,
        }
    }
}
