//! The std traits users expect on every map and set, beside the facades so that each facade
//! file stays about its own operations: `Debug` (the contents, as std's maps print them),
//! `FromIterator` and `Extend` (later pairs overwrite earlier ones, as std's do), the owning
//! `IntoIterator` of the sets, and `serde` behind the `serde` feature.
//!
//! Printing, collecting into and serializing a map that other threads write are weakly
//! consistent walks (see `FlatMap::iter`): every key present throughout is included once.

use core::{
    fmt,
    hash::{BuildHasher, Hash},
};

use crate::{
    any_map::{Map, MapIntoIter, MapRef},
    inline::{Inline, InlineKey},
    map::{FlatMap, IntoIter},
    set::{FlatSet, Set, SetRef},
};

impl<K: InlineKey + fmt::Debug, V: Inline + fmt::Debug, S: BuildHasher> fmt::Debug
    for FlatMap<K, V, S>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Hash + Eq + fmt::Debug, V: fmt::Debug, S: BuildHasher> fmt::Debug for Map<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.pin(), f)
    }
}

impl<K: Hash + Eq + fmt::Debug, V: fmt::Debug, S: BuildHasher, G: seize::Guard> fmt::Debug
    for MapRef<'_, K, V, S, G>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: InlineKey + fmt::Debug, S: BuildHasher> fmt::Debug for FlatSet<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<K: Hash + Eq + fmt::Debug, S: BuildHasher> fmt::Debug for Set<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.as_map().pin().keys()).finish()
    }
}

impl<K: Hash + Eq + fmt::Debug, S: BuildHasher> fmt::Debug for SetRef<'_, K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Room for the pairs an iterator says it has at least, where the map can make it; if it
/// cannot (a capped map), the inserts themselves will say so.
fn reserve_hint(
    hint: (usize, Option<usize>),
    reserve: impl FnOnce(usize) -> Result<(), crate::Error>,
) {
    // Ignored on purpose: `reserve` only sizes the table up front; the upserts that follow
    // grow it or panic with the real reason.
    let _ = reserve(hint.0);
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Extend<(K, V)> for FlatMap<K, V, S> {
    /// # Panics
    /// As [`FlatMap::insert`] (a capped map that fills up).
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        let pairs = pairs.into_iter();
        reserve_hint(pairs.size_hint(), |n| self.reserve(n));
        for (key, value) in pairs {
            self.insert(key, value);
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher + Default> FromIterator<(K, V)> for FlatMap<K, V, S> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut map = Self::default();
        map.extend(pairs);
        map
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> Extend<(K, V)> for Map<K, V, S> {
    /// # Panics
    /// As [`MapRef::insert`] (a capped map that fills up).
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        let pairs = pairs.into_iter();
        reserve_hint(pairs.size_hint(), |n| self.reserve(n));
        let map = self.pin();
        for (key, value) in pairs {
            map.insert(key, value);
        }
    }
}

impl<K: Hash + Eq, V, S: BuildHasher + Default> FromIterator<(K, V)> for Map<K, V, S> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut map = Self::default();
        map.extend(pairs);
        map
    }
}

impl<K: InlineKey, S: BuildHasher> Extend<K> for FlatSet<K, S> {
    /// # Panics
    /// As [`FlatSet::insert`].
    fn extend<I: IntoIterator<Item = K>>(&mut self, keys: I) {
        let keys = keys.into_iter();
        reserve_hint(keys.size_hint(), |n| self.as_map().reserve(n));
        for key in keys {
            self.insert(key);
        }
    }
}

impl<K: InlineKey, S: BuildHasher + Default> FromIterator<K> for FlatSet<K, S> {
    fn from_iter<I: IntoIterator<Item = K>>(keys: I) -> Self {
        let mut set = Self::default();
        set.extend(keys);
        set
    }
}

impl<K: Hash + Eq, S: BuildHasher> Extend<K> for Set<K, S> {
    /// # Panics
    /// As [`Set::insert`].
    fn extend<I: IntoIterator<Item = K>>(&mut self, keys: I) {
        let keys = keys.into_iter();
        reserve_hint(keys.size_hint(), |n| self.as_map().reserve(n));
        for key in keys {
            self.insert(key);
        }
    }
}

impl<K: Hash + Eq, S: BuildHasher + Default> FromIterator<K> for Set<K, S> {
    fn from_iter<I: IntoIterator<Item = K>>(keys: I) -> Self {
        let mut set = Self::default();
        set.extend(keys);
        set
    }
}

/// The key of a set's pair.
fn key_of<K>((key, ()): (K, ())) -> K {
    key
}

impl<K: InlineKey, S: BuildHasher> IntoIterator for FlatSet<K, S> {
    type Item = K;
    type IntoIter = core::iter::Map<IntoIter<K, (), S>, fn((K, ())) -> K>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_map().into_iter().map(key_of as fn((K, ())) -> K)
    }
}

impl<K, S> IntoIterator for Set<K, S> {
    type Item = K;
    type IntoIter = core::iter::Map<MapIntoIter<K, ()>, fn((K, ())) -> K>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_map().into_iter().map(key_of as fn((K, ())) -> K)
    }
}

/// `serde` support: maps serialize as maps and sets as sequences, as std's do; they
/// deserialize into a map with the default hasher settings (`S::default()`), grown as the
/// pairs arrive.
#[cfg(feature = "serde")]
mod serde_impls {
    use core::{
        fmt,
        hash::{BuildHasher, Hash},
        marker::PhantomData,
    };

    use serde::{
        de::{self, MapAccess, SeqAccess, Visitor},
        ser::{Serialize, Serializer},
        Deserialize, Deserializer,
    };

    use crate::{
        any_map::Map,
        inline::{Inline, InlineKey},
        map::FlatMap,
        set::{FlatSet, Set},
        Error,
    };

    /// The most pairs a deserializer's length hint may size the map for up front: the hint
    /// comes from the input, and a hostile one must not make the map allocate gigabytes
    /// before a single pair has arrived (serde's own collections cap it the same way).
    const MAX_PRESIZE: usize = 1 << 16;

    // Serialize from a collected walk: formats that write the length first (bincode) need the
    // exact count, which a map that other threads write cannot promise before the walk.

    impl<K, V, S> Serialize for FlatMap<K, V, S>
    where
        K: InlineKey + Serialize,
        V: Inline + Serialize,
        S: BuildHasher,
    {
        fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
            serializer.collect_map(self.iter().collect::<Vec<_>>())
        }
    }

    impl<K: Hash + Eq + Serialize, V: Serialize, S: BuildHasher> Serialize for Map<K, V, S> {
        fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
            let map = self.pin();
            serializer.collect_map(map.iter().collect::<Vec<_>>())
        }
    }

    impl<K: InlineKey + Serialize, S: BuildHasher> Serialize for FlatSet<K, S> {
        fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
            serializer.collect_seq(self.iter().collect::<Vec<_>>())
        }
    }

    impl<K: Hash + Eq + Serialize, S: BuildHasher> Serialize for Set<K, S> {
        fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
            let map = self.as_map().pin();
            serializer.collect_seq(map.keys().collect::<Vec<_>>())
        }
    }

    /// A map error as a deserializer's error (a capped map `S::default()` cannot make, an
    /// allocation the input asked for that cannot be had).
    fn refused<E: de::Error>(error: Error) -> E {
        E::custom(format_args!("floe refused the input: {error}"))
    }

    /// Visits a serialized map or sequence into a floe collection.
    struct Into<T>(PhantomData<fn() -> T>);

    impl<'de, K, V, S> Visitor<'de> for Into<FlatMap<K, V, S>>
    where
        K: InlineKey + Deserialize<'de>,
        V: Inline + Deserialize<'de>,
        S: BuildHasher + Default,
    {
        type Value = FlatMap<K, V, S>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
            let map = FlatMap::builder()
                .hasher(S::default())
                .capacity(access.size_hint().unwrap_or(0).min(MAX_PRESIZE))
                .build()
                .map_err(refused)?;
            while let Some((key, value)) = access.next_entry()? {
                map.try_insert(key, value).map_err(refused)?;
            }
            Ok(map)
        }
    }

    impl<'de, K, V, S> Deserialize<'de> for FlatMap<K, V, S>
    where
        K: InlineKey + Deserialize<'de>,
        V: Inline + Deserialize<'de>,
        S: BuildHasher + Default,
    {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_map(Into::<Self>(PhantomData))
        }
    }

    impl<'de, K, V, S> Visitor<'de> for Into<Map<K, V, S>>
    where
        K: Hash + Eq + Deserialize<'de>,
        V: Deserialize<'de>,
        S: BuildHasher + Default,
    {
        type Value = Map<K, V, S>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
            let map = Map::builder()
                .hasher(S::default())
                .capacity(access.size_hint().unwrap_or(0).min(MAX_PRESIZE))
                .build()
                .map_err(refused)?;
            {
                let pinned = map.pin();
                while let Some((key, value)) = access.next_entry()? {
                    pinned.try_insert(key, value).map_err(refused)?;
                }
            }
            Ok(map)
        }
    }

    impl<'de, K, V, S> Deserialize<'de> for Map<K, V, S>
    where
        K: Hash + Eq + Deserialize<'de>,
        V: Deserialize<'de>,
        S: BuildHasher + Default,
    {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_map(Into::<Self>(PhantomData))
        }
    }

    impl<'de, K, S> Visitor<'de> for Into<FlatSet<K, S>>
    where
        K: InlineKey + Deserialize<'de>,
        S: BuildHasher + Default,
    {
        type Value = FlatSet<K, S>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
            let map = FlatMap::builder()
                .hasher(S::default())
                .capacity(access.size_hint().unwrap_or(0).min(MAX_PRESIZE))
                .build()
                .map_err(refused)?;
            let set = FlatSet::from(map);
            while let Some(key) = access.next_element()? {
                set.try_insert(key).map_err(refused)?;
            }
            Ok(set)
        }
    }

    impl<'de, K, S> Deserialize<'de> for FlatSet<K, S>
    where
        K: InlineKey + Deserialize<'de>,
        S: BuildHasher + Default,
    {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_seq(Into::<Self>(PhantomData))
        }
    }

    impl<'de, K, S> Visitor<'de> for Into<Set<K, S>>
    where
        K: Hash + Eq + Deserialize<'de>,
        S: BuildHasher + Default,
    {
        type Value = Set<K, S>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
            let map = Map::builder()
                .hasher(S::default())
                .capacity(access.size_hint().unwrap_or(0).min(MAX_PRESIZE))
                .build()
                .map_err(refused)?;
            let set = Set::from(map);
            while let Some(key) = access.next_element()? {
                set.try_insert(key).map_err(refused)?;
            }
            Ok(set)
        }
    }

    impl<'de, K, S> Deserialize<'de> for Set<K, S>
    where
        K: Hash + Eq + Deserialize<'de>,
        S: BuildHasher + Default,
    {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_seq(Into::<Self>(PhantomData))
        }
    }
}
