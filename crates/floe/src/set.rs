//! Sets: [`FlatSet`] over `FlatMap<K, ()>` and [`Set`] over `Map<K, ()>`, with the maps'
//! guarantees (lock-free, linearizable per key, weakly consistent iteration).
//!
//! A set is its map with the unit value: `()` is an 8-byte-or-less [`Inline`](crate::Inline)
//! value (the value word is always zero) and a `Map` entry of `(K, ())` is just the key.

use core::{
    borrow::Borrow,
    hash::{BuildHasher, Hash},
};

use crate::{
    any_map::{Map, MapRef, MapShadow},
    error::{Error, OrRaise},
    hash::DefaultHashBuilder,
    inline::InlineKey,
    map::{FlatMap, Shadow},
};

/// A concurrent set of keys of up to 8 bytes, stored inline (a [`FlatMap`] with `()` values).
///
/// ```
/// let set = floe::FlatSet::<u64>::with_capacity(100);
/// assert!(set.insert(3));
/// assert!(!set.insert(3));
/// assert!(set.contains(&3));
/// assert!(set.remove(&3));
/// assert!(set.is_empty());
/// ```
///
/// Other options (hasher, backend, growth limit): build the map and convert it,
/// `FlatSet::from(FlatMap::<K, ()>::builder()...build()?)`.
pub struct FlatSet<K, S = DefaultHashBuilder> {
    map: FlatMap<K, (), S>,
}

/// An empty set with `S::default()` as its hasher (see [`FlatMap::default`]).
impl<K: InlineKey, S: BuildHasher + Default> Default for FlatSet<K, S> {
    #[track_caller]
    fn default() -> Self {
        Self::from(FlatMap::default())
    }
}

impl<K: InlineKey> FlatSet<K> {
    /// An empty set with the default hasher; it grows on demand.
    ///
    /// # Panics
    /// As [`FlatMap::new`].
    #[track_caller]
    pub fn new() -> Self {
        Self::from(FlatMap::new())
    }

    /// A set sized for `keys` keys, with the default hasher.
    ///
    /// # Panics
    /// As [`FlatMap::with_capacity`]; [`try_with_capacity`](Self::try_with_capacity) returns
    /// the error instead.
    #[track_caller]
    pub fn with_capacity(keys: usize) -> Self {
        Self::from(FlatMap::with_capacity(keys))
    }

    /// A set sized for `keys` keys, or the reason it cannot be had.
    ///
    /// # Errors
    /// As [`Builder::build`](crate::Builder::build).
    pub fn try_with_capacity(keys: usize) -> Result<Self, Error> {
        FlatMap::try_with_capacity(keys).map(Self::from)
    }
}

impl<K, S> From<FlatMap<K, (), S>> for FlatSet<K, S> {
    fn from(map: FlatMap<K, (), S>) -> Self {
        Self { map }
    }
}

impl<K: InlineKey, S: BuildHasher> FlatSet<K, S> {
    /// Add `key`; whether it was absent.
    ///
    /// # Panics
    /// As [`FlatMap::insert`]; [`try_insert`](Self::try_insert) returns the error instead.
    #[track_caller]
    pub fn insert(&self, key: K) -> bool {
        self.try_insert(key).or_raise()
    }

    /// Add `key`; whether it was absent, or why it could not be added.
    ///
    /// # Errors
    /// As [`FlatMap::try_insert`]; the set is unchanged.
    pub fn try_insert(&self, key: K) -> Result<bool, Error> {
        Ok(self.map.try_insert_new(key, ())?.is_inserted())
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Add `key` hidden, as a lock on it (see [`FlatMap::insert_shadow`]): the open shadow,
    /// whose [`commit`](Shadow::commit) adds the key visibly and whose abort (or drop) leaves
    /// no trace; `None` if the key is present or shadowed already.
    ///
    /// ```
    /// let names = floe::FlatSet::<u64>::new();
    /// let claim = names.insert_shadow(7).unwrap();
    /// assert!(!names.contains(&7) && !names.insert(7));
    /// claim.commit();
    /// assert!(names.contains(&7));
    /// ```
    ///
    /// # Panics
    /// As [`FlatMap::insert`]; [`try_insert_shadow`](Self::try_insert_shadow) returns the
    /// error instead.
    #[track_caller]
    pub fn insert_shadow(&self, key: K) -> Option<Shadow<'_, K, (), S>> {
        self.map.insert_shadow(key, ()).ok()
    }

    /// [`insert_shadow`](Self::insert_shadow), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`FlatMap::try_insert`].
    pub fn try_insert_shadow(&self, key: K) -> Result<Option<Shadow<'_, K, (), S>>, Error> {
        Ok(self.map.try_insert_shadow(key, ())?.ok())
    }

    /// The keys present at one instant (see [`FlatMap::snapshot`]).
    ///
    /// # Errors
    /// As [`FlatMap::snapshot`].
    #[cfg(not(floe_loom))]
    pub fn snapshot(&self) -> Result<Vec<K>, Error> {
        Ok(self.map.snapshot()?.into_iter().map(|(k, ())| k).collect())
    }

    /// Remove `key`; whether it was present.
    pub fn remove(&self, key: &K) -> bool {
        self.map.remove(key).is_some()
    }

    /// Number of keys (see [`FlatMap::len`]).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Remove every key (see [`FlatMap::clear`]).
    pub fn clear(&self) {
        self.map.clear();
    }

    /// The keys, weakly consistent (see [`FlatMap::iter`]).
    pub fn iter(&self) -> impl Iterator<Item = K> + '_ {
        self.map.keys()
    }

    /// Remove every key for which `keep` answers `false` (see [`FlatMap::retain`]).
    pub fn retain(&self, mut keep: impl FnMut(K) -> bool) {
        self.map.retain(|key, ()| keep(key));
    }

    /// Take every key out, leaving the set empty (see [`FlatMap::drain`]).
    pub fn drain(&mut self) -> impl ExactSizeIterator<Item = K> {
        self.map.drain().map(|(key, ())| key)
    }

    /// The map underneath (for its statistics, `reserve`, batches).
    pub fn as_map(&self) -> &FlatMap<K, (), S> {
        &self.map
    }

    /// The map underneath, by value.
    pub fn into_map(self) -> FlatMap<K, (), S> {
        self.map
    }
}

/// A concurrent set of any `K: Hash + Eq` (a [`Map`] with `()` values).
///
/// ```
/// let set = floe::Set::<String>::with_capacity(100);
/// assert!(set.insert("a".to_string()));
/// assert!(set.contains("a"));
/// assert_eq!(set.pin().iter().count(), 1);
/// assert!(set.remove("a"));
/// ```
pub struct Set<K, S = DefaultHashBuilder> {
    map: Map<K, (), S>,
}

/// An empty set with `S::default()` as its hasher (see [`Map::default`]).
impl<K: Hash + Eq, S: BuildHasher + Default> Default for Set<K, S> {
    #[track_caller]
    fn default() -> Self {
        Self::from(Map::default())
    }
}

impl<K: Hash + Eq> Set<K> {
    /// An empty set with the default hasher; it grows on demand.
    ///
    /// # Panics
    /// As [`Map::new`].
    #[track_caller]
    pub fn new() -> Self {
        Self::from(Map::new())
    }

    /// A set sized for `keys` keys, with the default hasher.
    ///
    /// # Panics
    /// As [`Map::with_capacity`]; [`try_with_capacity`](Self::try_with_capacity) returns the
    /// error instead.
    #[track_caller]
    pub fn with_capacity(keys: usize) -> Self {
        Self::from(Map::with_capacity(keys))
    }

    /// A set sized for `keys` keys, or the reason it cannot be had.
    ///
    /// # Errors
    /// As [`Builder::build`](crate::Builder::build).
    pub fn try_with_capacity(keys: usize) -> Result<Self, Error> {
        Map::try_with_capacity(keys).map(Self::from)
    }
}

impl<K, S> From<Map<K, (), S>> for Set<K, S> {
    fn from(map: Map<K, (), S>) -> Self {
        Self { map }
    }
}

impl<K: Hash + Eq, S: BuildHasher> Set<K, S> {
    /// Add `key`; whether it was absent.
    ///
    /// # Panics
    /// As [`MapRef::insert`]; [`try_insert`](Self::try_insert) returns the error instead.
    #[track_caller]
    pub fn insert(&self, key: K) -> bool {
        self.try_insert(key).or_raise()
    }

    /// Add `key`; whether it was absent, or why it could not be added.
    ///
    /// # Errors
    /// As [`MapRef::try_insert`]; the set is unchanged.
    pub fn try_insert(&self, key: K) -> Result<bool, Error> {
        Ok(self.map.pin().try_insert_new(key, ())?.is_inserted())
    }

    /// Whether `key` is present.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.contains_key(key)
    }

    /// Remove `key`; whether it was present.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.pin().remove(key).is_some()
    }

    /// Remove every key for which `keep` answers `false` (see [`MapRef::retain`]).
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.map.pin().retain(|key, ()| keep(key));
    }

    /// Take every key out, leaving the set empty (see [`Map::drain`]).
    pub fn drain(&mut self) -> impl ExactSizeIterator<Item = K> {
        self.map.drain().map(|(key, ())| key)
    }

    /// A handle whose iterator yields references to the keys ([`Map::pin`]).
    pub fn pin(&self) -> SetRef<'_, K, S> {
        SetRef {
            map: self.map.pin(),
        }
    }
}

impl<K, S> Set<K, S> {
    /// Number of keys (see [`Map::len`]).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Remove every key (see [`Map::clear`]).
    pub fn clear(&self) {
        self.map.clear();
    }

    /// The map underneath.
    pub fn as_map(&self) -> &Map<K, (), S> {
        &self.map
    }

    /// The map underneath, by value.
    pub fn into_map(self) -> Map<K, (), S> {
        self.map
    }
}

/// A pinned handle on a [`Set`] ([`Set::pin`]).
pub struct SetRef<'s, K, S> {
    map: MapRef<'s, K, (), S>,
}

impl<K: Hash + Eq, S: BuildHasher> SetRef<'_, K, S> {
    /// The keys, weakly consistent (see [`MapRef::iter`]), as long as this handle.
    pub fn iter(&self) -> impl Iterator<Item = &K> + '_ {
        self.map.keys()
    }

    /// Add `key` hidden, as a lock on it (see [`MapRef::insert_shadow`]): the open shadow,
    /// whose [`commit`](MapShadow::commit) adds the key visibly and whose abort (or drop)
    /// leaves no trace; `None` if the key is present or shadowed already.
    ///
    /// ```
    /// let names = floe::Set::<String>::new();
    /// let handle = names.pin();
    /// let claim = handle.insert_shadow("ada".to_string()).unwrap();
    /// assert!(!names.contains("ada") && !names.insert("ada".to_string()));
    /// claim.commit();
    /// assert!(names.contains("ada"));
    /// ```
    ///
    /// # Panics
    /// As [`MapRef::insert`]; [`try_insert_shadow`](Self::try_insert_shadow) returns the
    /// error instead.
    #[track_caller]
    pub fn insert_shadow(&self, key: K) -> Option<MapShadow<'_, K, (), S>> {
        self.map.insert_shadow(key, ()).ok()
    }

    /// [`insert_shadow`](Self::insert_shadow), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`MapRef::try_insert`].
    pub fn try_insert_shadow(&self, key: K) -> Result<Option<MapShadow<'_, K, (), S>>, Error> {
        Ok(self.map.try_insert_shadow(key, ())?.ok())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn sets_agree_with_std() {
        let flat = FlatSet::from(FlatMap::<u16, ()>::builder().bins(2).build().unwrap());
        let any = Set::from(Map::<String, ()>::builder().bins(2).build().unwrap());
        let mut model = HashSet::new();
        let operations = if cfg!(miri) { 200u32 } else { 3000 };
        for i in 0..operations {
            let key = (i.wrapping_mul(2_654_435_761) % 97) as u16;
            let name = key.to_string();
            match i % 3 {
                0 | 1 => {
                    let absent = model.insert(key);
                    assert_eq!(flat.try_insert(key).unwrap(), absent);
                    assert_eq!(any.try_insert(name).unwrap(), absent);
                }
                _ => {
                    let present = model.remove(&key);
                    assert_eq!(flat.remove(&key), present);
                    assert_eq!(any.remove(name.as_str()), present);
                }
            }
            assert_eq!(flat.contains(&key), model.contains(&key));
            assert_eq!(any.contains(key.to_string().as_str()), model.contains(&key));
        }
        assert_eq!(flat.len(), model.len());
        assert_eq!(any.len(), model.len());
        assert_eq!(flat.iter().collect::<HashSet<_>>(), model);
        let keys: HashSet<u16> = any.pin().iter().map(|k| k.parse().unwrap()).collect();
        assert_eq!(keys, model);
        flat.clear();
        any.clear();
        assert!(flat.is_empty() && any.is_empty());
    }
}
