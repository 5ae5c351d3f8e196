//! [`FlatMap`]: the safe facade over the engine, for keys and values that fit in 8 bytes.

use core::{fmt, hash::BuildHasher, marker::PhantomData};

use crate::{
    error::Error,
    hash::{fastrange, DefaultHashBuilder},
    raw::{probe::ScalarProbe, DeadKeys, Full, Geometry, Inserted, Mismatch, RawTable},
    word::{Counter, Inline, InlineKey},
};

/// Which code matches a key against a bin's line.
///
/// The choice is made once, when the map is built, never per operation. All backends give
/// the same answers (the test suite runs every one the CPU supports against the scalar one).
///
/// - `Scalar` reads the slots with 16-byte atomic loads and compares them one by one. It runs
///   everywhere (and under Miri and loom).
/// - `Avx2` loads the line in two 32-byte loads and compares four words per instruction.
/// - `Avx512` loads the line in one 64-byte load and compares all eight words at once.
///
/// With three or four keys a line, the SIMD backends save instructions, not memory accesses:
/// on tables larger than the caches all three wait on the same DRAM line. `BENCHMARKS.md`
/// has the measured difference on this project's machines; `Auto` picks the widest backend
/// the CPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// The widest backend this CPU supports.
    #[default]
    Auto,
    /// Portable code, atomic slot loads.
    Scalar,
    /// x86-64 AVX2.
    Avx2,
    /// x86-64 AVX-512F for lookups; writes (insert, remove, puts) use the AVX2 code. Measured
    /// on this project's machines (Sapphire Rapids class, `BENCHMARKS.md`): AVX-512 matching
    /// makes gets ~8% faster than AVX2, but inserts ~30% *slower* with 512-bit code in the
    /// write path (measured, not explained: the compiled insert spills the 512-bit key
    /// register around the slot-store call and its `vzeroupper`, and 512-bit instructions can
    /// lower the core's clock for the latency-bound locked instructions), so writes keep
    /// 256-bit code. Requires AVX2 as well (every AVX-512 CPU has it).
    Avx512,
}

impl Backend {
    /// Whether this CPU (and this build) can run the backend. `Auto` and `Scalar` always can.
    pub fn is_supported(self) -> bool {
        ProbeKind::new(self).is_some()
    }
}

/// The resolved backend: a zero-sized proof that the CPU supports it.
#[derive(Clone, Copy, Debug)]
enum ProbeKind {
    Scalar(ScalarProbe),
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    Avx2(crate::raw::probe::Avx2Probe),
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    Avx512(crate::raw::probe::Avx512Probe),
}

impl ProbeKind {
    fn new(backend: Backend) -> Option<Self> {
        #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
        {
            use crate::raw::probe::{Avx2Probe, Avx512Probe};
            match backend {
                Backend::Auto => Some(
                    Avx512Probe::new()
                        .map(ProbeKind::Avx512)
                        .or_else(|| Avx2Probe::new().map(ProbeKind::Avx2))
                        .unwrap_or(ProbeKind::Scalar(ScalarProbe)),
                ),
                Backend::Scalar => Some(ProbeKind::Scalar(ScalarProbe)),
                Backend::Avx2 => Avx2Probe::new().map(ProbeKind::Avx2),
                Backend::Avx512 => Avx512Probe::new().map(ProbeKind::Avx512),
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
        match backend {
            Backend::Auto | Backend::Scalar => Some(ProbeKind::Scalar(ScalarProbe)),
            Backend::Avx2 | Backend::Avx512 => None,
        }
    }

    fn backend(self) -> Backend {
        match self {
            ProbeKind::Scalar(_) => Backend::Scalar,
            #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
            ProbeKind::Avx2(_) => Backend::Avx2,
            #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
            ProbeKind::Avx512(_) => Backend::Avx512,
        }
    }
}

/// Entry points compiled with each SIMD feature enabled, so the whole operation (not just the
/// match) is compiled for it and the backend's `#[inline(always)]` methods inline into it.
/// `$writer` turns the read probe into the one write operations use (see [`Backend::Avx512`]).
#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
macro_rules! simd_entries {
    ($module:ident, $feature:literal, $probe:ty, $writer:path) => {
        mod $module {
            use crate::raw::{Full, Inserted, Mismatch, RawTable};

            // Safety (every function): the caller holds a `$probe`, which exists only on CPUs
            // with `$feature`.

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn get(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
            ) -> Option<u64> {
                raw.get(p, bin, key)
            }

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn insert(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
                value: u64,
            ) -> Result<Inserted, Full> {
                raw.insert($writer(p), bin, key, value)
            }

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn remove(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
            ) -> Option<u64> {
                raw.remove($writer(p), bin, key)
            }

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn update(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
                f: impl FnMut(u64) -> u64,
            ) -> Option<(u64, u64)> {
                raw.update($writer(p), bin, key, f)
            }

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn upsert_with(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
                init: u64,
                f: impl FnMut(u64) -> u64,
            ) -> Result<Option<u64>, Full> {
                raw.upsert_with($writer(p), bin, key, init, f)
            }

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn compare_exchange(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
                current: u64,
                new: u64,
            ) -> Result<u64, Mismatch> {
                raw.compare_exchange($writer(p), bin, key, current, new)
            }
        }
    };
}

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
simd_entries!(
    avx2_entries,
    "avx2",
    crate::raw::probe::Avx2Probe,
    core::convert::identity
);
#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
simd_entries!(
    avx512_entries,
    "avx512f,avx2",
    crate::raw::probe::Avx512Probe,
    crate::raw::probe::Avx512Probe::writer
);

/// Run engine operation `$op` with the map's backend.
macro_rules! dispatch {
    ($map:expr, $op:ident($($arg:expr),*)) => {{
        let raw = &$map.raw;
        match $map.probe {
            ProbeKind::Scalar(p) => raw.$op(p, $($arg),*),
            #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
            // SAFETY: the probe token proves the CPU supports AVX2.
            ProbeKind::Avx2(p) => unsafe { avx2_entries::$op(raw, p, $($arg),*) },
            #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
            // SAFETY: the probe token proves the CPU supports AVX-512F.
            ProbeKind::Avx512(p) => unsafe { avx512_entries::$op(raw, p, $($arg),*) },
        }
    }};
}

/// The outcome of [`FlatMap::insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Insert<V> {
    /// The key was absent; it is now present with the given value.
    Inserted,
    /// The key was present with this value; the map is unchanged.
    Present(V),
}

impl<V> Insert<V> {
    /// Whether the insert took place.
    pub fn is_inserted(&self) -> bool {
        matches!(self, Insert::Inserted)
    }

    /// The value that was already present, if any.
    pub fn present(self) -> Option<V> {
        match self {
            Insert::Inserted => None,
            Insert::Present(v) => Some(v),
        }
    }
}

/// Why [`FlatMap::compare_exchange`] did not swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareExchangeError<V> {
    /// The key is absent.
    Absent,
    /// The key is present with this value, not the expected one.
    Mismatch(V),
}

/// Keys per bin the sizing from a capacity aims at: 1.75 keys in three primary slots (DLHT
/// sizes at ~1.5). With one link bucket per eight bins, about 10% of bins overflow their
/// primary bucket at this load (Poisson tail), within the 12.5% the pool covers.
const TARGET_KEYS_PER_BIN_X4: usize = 7;

/// Default number of bins per link bucket (DLHT §3.1: 8 times fewer link buckets than bins).
const DEFAULT_BINS_PER_LINK: usize = 8;

/// Configures and builds a [`FlatMap`].
///
/// ```
/// use floe::{Backend, FlatMap, hash::WyHash};
///
/// let map = FlatMap::<u64, u64, _>::builder()
///     .capacity(1 << 20)
///     .hasher(WyHash::with_seed(1))
///     .backend(Backend::Scalar)
///     .build()
///     .unwrap();
/// assert_eq!(map.backend(), Backend::Scalar);
/// assert!(map.capacity() >= 1 << 20);
/// ```
#[derive(Clone, Debug)]
pub struct Builder<K, V, S = DefaultHashBuilder> {
    capacity: usize,
    bins: Option<usize>,
    link_buckets: Option<usize>,
    bins_per_link: usize,
    hasher: S,
    backend: Backend,
    huge_pages: bool,
    marker: PhantomData<fn(K, V)>,
}

impl<K: InlineKey, V: Inline> Builder<K, V> {
    fn new() -> Self {
        Self {
            capacity: 1024,
            bins: None,
            link_buckets: None,
            bins_per_link: DEFAULT_BINS_PER_LINK,
            hasher: DefaultHashBuilder::new(),
            backend: Backend::Auto,
            huge_pages: true,
            marker: PhantomData,
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Builder<K, V, S> {
    /// Size the table so that `keys` uniformly hashed keys fit with high probability
    /// (default 1024). The table does not grow yet: inserting well past this can return
    /// [`Error::Full`].
    pub fn capacity(mut self, keys: usize) -> Self {
        self.capacity = keys;
        self
    }

    /// Set the number of bins exactly (overrides `capacity`). At least 2.
    pub fn bins(mut self, bins: usize) -> Self {
        self.bins = Some(bins);
        self
    }

    /// Set the size of the link-bucket pool exactly (default: derived from the bin count).
    pub fn link_buckets(mut self, link_buckets: usize) -> Self {
        self.link_buckets = Some(link_buckets);
        self
    }

    /// Bins per link bucket when the pool is derived (default 8, as DLHT). Smaller values give
    /// more room to unlucky bins at 64 bytes per link bucket.
    pub fn bins_per_link(mut self, bins_per_link: usize) -> Self {
        self.bins_per_link = bins_per_link;
        self
    }

    /// Use another hasher.
    pub fn hasher<S2: BuildHasher>(self, hasher: S2) -> Builder<K, V, S2> {
        Builder {
            capacity: self.capacity,
            bins: self.bins,
            link_buckets: self.link_buckets,
            bins_per_link: self.bins_per_link,
            hasher,
            backend: self.backend,
            huge_pages: self.huge_pages,
            marker: PhantomData,
        }
    }

    /// Choose the matching backend (default [`Backend::Auto`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Ask for transparent huge pages for tables of 2 MiB and more (default on).
    pub fn huge_pages(mut self, huge_pages: bool) -> Self {
        self.huge_pages = huge_pages;
        self
    }

    /// Allocate the map.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for fewer than 2 bins or a zero `bins_per_link`,
    /// [`Error::CapacityOverflow`] for sizes that cannot be addressed,
    /// [`Error::AllocationFailed`] if the memory cannot be had,
    /// [`Error::UnsupportedBackend`] for a backend this CPU lacks,
    /// [`Error::DegenerateHasher`] for a hasher that sends every key to one bin.
    pub fn build(self) -> Result<FlatMap<K, V, S>, Error> {
        if self.bins_per_link == 0 {
            return Err(Error::InvalidConfig("bins_per_link must be at least 1"));
        }
        let bins = match self.bins {
            Some(bins) if bins < 2 => {
                return Err(Error::InvalidConfig("a table needs at least 2 bins"))
            }
            Some(bins) => bins,
            None => self
                .capacity
                .checked_mul(4)
                .ok_or(Error::CapacityOverflow)?
                .div_ceil(TARGET_KEYS_PER_BIN_X4)
                .max(2),
        };
        let link_buckets = match self.link_buckets {
            Some(n) => n,
            None => {
                // The expected demand plus four standard deviations of it and a constant, so
                // small tables are not undone by one unlucky bin.
                let mean = bins.div_ceil(self.bins_per_link);
                mean + 4 * (mean as f64).sqrt() as usize + 8
            }
        };
        let bytes = bins
            .checked_add(link_buckets)
            .and_then(|lines| lines.checked_mul(64))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(Error::CapacityOverflow)?;
        if link_buckets >= u32::MAX as usize - 2 {
            return Err(Error::CapacityOverflow);
        }
        let probe = ProbeKind::new(self.backend).ok_or(Error::UnsupportedBackend(self.backend))?;
        let dead = dead_keys(&self.hasher, bins)?;
        let geometry = Geometry {
            bins,
            link_buckets,
            huge_pages: self.huge_pages,
        };
        let raw = RawTable::new(geometry, dead).ok_or(Error::AllocationFailed { bytes })?;
        Ok(FlatMap {
            raw,
            hasher: self.hasher,
            probe,
            marker: PhantomData,
        })
    }
}

/// Find the table's dead keys: two words that hash to different bins.
fn dead_keys(hasher: &impl BuildHasher, bins: usize) -> Result<DeadKeys, Error> {
    // An arbitrary starting word; any would do.
    const FIRST: u64 = 0xdead_f10e_dead_f10e;
    let primary_bin = fastrange(hasher.hash_one(FIRST), bins);
    (1..=4096u64)
        .map(|i| FIRST.wrapping_add(i))
        .find(|&candidate| fastrange(hasher.hash_one(candidate), bins) != primary_bin)
        .map(|fallback| DeadKeys {
            primary: FIRST,
            primary_bin,
            fallback,
        })
        .ok_or(Error::DegenerateHasher)
}

/// A concurrent hash map whose keys and values live inline in the table.
///
/// Keys and values are any types that fit in one 8-byte word ([`InlineKey`], [`Inline`]):
/// integers, `char`, `bool`, floats (as values), or your own types. Every 64-bit key is valid.
/// All operations take `&self`, are lock-free (except where the design notes say an operation
/// waits out one specific race) and linearizable; share the map between threads with an `Arc`
/// or scoped threads.
///
/// Each key lives in one cache-line bin (three slots, plus up to three chained 64-byte link
/// buckets for unlucky bins), so a get costs about one memory access. A remove frees its slot
/// at once. The table does not grow yet: size it with [`FlatMap::with_capacity`] or the
/// [`Builder`]; an insert that finds no room returns [`Error::Full`] and changes nothing.
///
/// ```
/// use floe::{FlatMap, Insert};
///
/// let map = FlatMap::<u64, u64>::with_capacity(1 << 16)?;
/// assert_eq!(map.insert(7, 70)?, Insert::Inserted);
/// assert_eq!(map.insert(7, 71)?, Insert::Present(70)); // insert never overwrites
/// assert_eq!(map.upsert(7, 72)?, Some(70));             // upsert does
/// assert_eq!(map.fetch_add(8, 1)?, None);               // counting upsert
/// assert_eq!(map.fetch_add(8, 1)?, Some(1));
/// assert_eq!(map.get(&8), Some(2));
/// assert_eq!(map.remove(&7), Some(72));
/// assert_eq!(map.len(), 1);
/// # Ok::<(), floe::Error>(())
/// ```
pub struct FlatMap<K, V, S = DefaultHashBuilder> {
    raw: RawTable,
    hasher: S,
    probe: ProbeKind,
    marker: PhantomData<fn() -> (K, V)>,
}

impl<K: InlineKey, V: Inline> FlatMap<K, V> {
    /// A map sized for `keys` keys, with the default hasher and the best backend.
    ///
    /// ```
    /// let map = floe::FlatMap::<u32, f64>::with_capacity(100)?;
    /// assert!(map.is_empty());
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Builder::build`].
    pub fn with_capacity(keys: usize) -> Result<Self, Error> {
        Self::builder().capacity(keys).build()
    }

    /// A [`Builder`] with the defaults.
    pub fn builder() -> Builder<K, V> {
        Builder::new()
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> FlatMap<K, V, S> {
    #[inline(always)]
    pub(crate) fn locate(&self, key: K) -> (usize, u64) {
        let word = key.to_word();
        (fastrange(self.hasher.hash_one(word), self.raw.bins()), word)
    }

    /// The value of `key`, if present.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, char>::with_capacity(10)?;
    /// map.insert(1, 'a')?;
    /// assert_eq!(map.get(&1), Some('a'));
    /// assert_eq!(map.get(&2), None);
    /// # Ok::<(), floe::Error>(())
    /// ```
    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        let (bin, word) = self.locate(*key);
        self.get_at(bin, word)
    }

    /// Whether `key` is present.
    ///
    /// ```
    /// let map = floe::FlatMap::<i32, ()>::with_capacity(10)?;
    /// map.insert(-3, ())?;
    /// assert!(map.contains_key(&-3));
    /// # Ok::<(), floe::Error>(())
    /// ```
    #[inline]
    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Insert `key -> value` only if `key` is absent; otherwise leave the map unchanged and
    /// return the present value.
    ///
    /// ```
    /// use floe::Insert;
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// assert!(map.insert(5, 1)?.is_inserted());
    /// assert_eq!(map.insert(5, 2)?, Insert::Present(1));
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Full`] if the key's bin has no room; the map is unchanged.
    #[inline]
    pub fn insert(&self, key: K, value: V) -> Result<Insert<V>, Error> {
        let (bin, word) = self.locate(key);
        self.insert_at(bin, word, value)
    }

    /// Insert `key -> value`, overwriting any present value. Returns the previous value.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// assert_eq!(map.upsert(1, 10)?, None);
    /// assert_eq!(map.upsert(1, 11)?, Some(10));
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Full`] if the key is absent and its bin has no room; the map is unchanged.
    #[inline]
    pub fn upsert(&self, key: K, value: V) -> Result<Option<V>, Error> {
        let (bin, word) = self.locate(key);
        self.upsert_at(bin, word, value)
    }

    /// Overwrite the value of `key` only if it is present. Returns the previous value, or
    /// `None` (and writes nothing) if the key is absent.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// assert_eq!(map.put(1, 5), None);
    /// assert!(!map.contains_key(&1));
    /// map.insert(1, 5)?;
    /// assert_eq!(map.put(1, 6), Some(5));
    /// # Ok::<(), floe::Error>(())
    /// ```
    #[inline]
    pub fn put(&self, key: K, value: V) -> Option<V> {
        let (bin, word) = self.locate(key);
        self.put_at(bin, word, value)
    }

    /// Replace the value of a present `key` by `f(old)`, atomically. Returns the previous
    /// value, or `None` if the key is absent. Under contention `f` may be called more than
    /// once (with the newer value each time), so it should be a pure function.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u32>::with_capacity(10)?;
    /// map.insert(1, 20)?;
    /// assert_eq!(map.update(&1, |v| v * 2), Some(20));
    /// assert_eq!(map.get(&1), Some(40));
    /// assert_eq!(map.update(&2, |v| v * 2), None);
    /// # Ok::<(), floe::Error>(())
    /// ```
    #[inline]
    pub fn update(&self, key: &K, mut f: impl FnMut(V) -> V) -> Option<V> {
        let (bin, word) = self.locate(*key);
        dispatch!(
            self,
            update(bin, word, |old| f(V::from_word(old)).to_word())
        )
        .map(|(old, _)| V::from_word(old))
    }

    /// Set the value of `key` to `new` if it is `current` (compared as words, so for floats
    /// bit for bit). Returns the previous value (`current`) on success.
    ///
    /// ```
    /// use floe::CompareExchangeError;
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// assert_eq!(map.compare_exchange(&1, 0, 1), Err(CompareExchangeError::Absent));
    /// map.insert(1, 0)?;
    /// assert_eq!(map.compare_exchange(&1, 0, 1), Ok(0));
    /// assert_eq!(map.compare_exchange(&1, 0, 2), Err(CompareExchangeError::Mismatch(1)));
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`CompareExchangeError::Absent`] if the key is absent,
    /// [`CompareExchangeError::Mismatch`] with the present value if it differs.
    #[inline]
    pub fn compare_exchange(
        &self,
        key: &K,
        current: V,
        new: V,
    ) -> Result<V, CompareExchangeError<V>> {
        let (bin, word) = self.locate(*key);
        match dispatch!(
            self,
            compare_exchange(bin, word, current.to_word(), new.to_word())
        ) {
            Ok(old) => Ok(V::from_word(old)),
            Err(Mismatch::Absent) => Err(CompareExchangeError::Absent),
            Err(Mismatch::Value(v)) => Err(CompareExchangeError::Mismatch(V::from_word(v))),
        }
    }

    /// Remove `key`, returning its value. The slot is free for another insert at once.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// map.insert(1, 2)?;
    /// assert_eq!(map.remove(&1), Some(2));
    /// assert_eq!(map.remove(&1), None);
    /// # Ok::<(), floe::Error>(())
    /// ```
    #[inline]
    pub fn remove(&self, key: &K) -> Option<V> {
        let (bin, word) = self.locate(*key);
        self.remove_at(bin, word)
    }

    /// Start loading the line of `key`'s bin into the cache, without waiting for it. For
    /// callers that overlap memory latency with their own work (coroutines, interleaved
    /// lookups): prefetch several keys, do something else, then operate on them.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// map.prefetch(&3);
    /// assert_eq!(map.get(&3), None);
    /// # Ok::<(), floe::Error>(())
    /// ```
    #[inline]
    pub fn prefetch(&self, key: &K) {
        let (bin, _) = self.locate(*key);
        self.raw.prefetch_bin(bin);
    }

    /// Remove every key. Safe to call concurrently with other operations; each bin is emptied
    /// atomically but the table is not emptied as one atomic step (a key inserted into a bin
    /// after that bin was cleared stays).
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// map.insert(1, 2)?;
    /// map.clear();
    /// assert!(map.is_empty());
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn clear(&self) {
        self.raw.clear();
    }

    /// Number of keys. Exact when no insert or remove is running at the same time; a sum of
    /// per-thread counters otherwise.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// map.insert(1, 1)?;
    /// assert_eq!(map.len(), 1);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots in the table (three per bin plus four per link bucket). Not every slot is
    /// reachable by every key: a key can only use its own bin and the link buckets it chains.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::builder().bins(100).link_buckets(10).build()?;
    /// assert_eq!(map.capacity(), 100 * 3 + 10 * 4);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.raw.capacity()
    }

    /// `len / capacity`.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::builder().bins(10).link_buckets(0).build()?;
    /// map.insert(1, 1)?;
    /// assert!((map.load_factor() - 1.0 / 30.0).abs() < 1e-9);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn load_factor(&self) -> f64 {
        self.len() as f64 / self.capacity() as f64
    }

    /// The backend in use (never `Auto`).
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// assert_ne!(map.backend(), floe::Backend::Auto);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn backend(&self) -> Backend {
        self.probe.backend()
    }

    /// The hasher.
    pub fn hasher(&self) -> &S {
        &self.hasher
    }

    /// Statistics about the table's memory and geometry.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(1000)?;
    /// let stats = map.stats();
    /// assert!(stats.bins * 64 <= stats.allocated_bytes);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        Stats {
            bins: self.raw.bins(),
            link_buckets: self.raw.link_buckets(),
            link_buckets_used: self.raw.link_buckets_used(),
            link_buckets_lost: self.raw.links_lost(),
            allocated_bytes: self.raw.allocated_bytes(),
            huge_pages: self.raw.huge_pages(),
        }
    }

    /// Call `visit` for every key-value pair. Every pair visited was present at some point
    /// during the call; pairs inserted or removed concurrently may or may not be visited.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10)?;
    /// map.insert(1, 10)?;
    /// map.insert(2, 20)?;
    /// let mut sum = 0;
    /// map.for_each(|_, v| sum += v);
    /// assert_eq!(sum, 30);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn for_each(&self, mut visit: impl FnMut(K, V)) {
        self.raw
            .for_each(|k, v| visit(K::from_word(k), V::from_word(v)));
    }

    /// Check the engine's invariants on a quiescent map, panicking on a violation, and return
    /// the number of live keys. For tests: it walks the whole table.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> usize {
        self.raw.check_invariants()
    }
}

impl<K: InlineKey, V: Counter, S: BuildHasher> FlatMap<K, V, S> {
    /// Add `delta` to the value of `key`, inserting `delta` if the key is absent (DRAMHiT's
    /// counting upsert, e.g. for k-mer counting). Wraps on overflow. Returns the previous
    /// value, `None` if the key was inserted.
    ///
    /// ```
    /// let counts = floe::FlatMap::<u64, u32>::with_capacity(10)?;
    /// for kmer in [3, 5, 3, 3] {
    ///     counts.fetch_add(kmer, 1)?;
    /// }
    /// assert_eq!(counts.get(&3), Some(3));
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Full`] if the key is absent and its bin has no room; the map is unchanged.
    #[inline]
    pub fn fetch_add(&self, key: K, delta: V) -> Result<Option<V>, Error> {
        let (bin, word) = self.locate(key);
        self.fetch_add_at(bin, word, delta, V::add)
    }
}

/// The operations on an already located key (`locate`), shared by the single-key methods,
/// batches and the pipeline.
impl<K: InlineKey, V: Inline, S: BuildHasher> FlatMap<K, V, S> {
    #[inline(always)]
    pub(crate) fn get_at(&self, bin: usize, word: u64) -> Option<V> {
        dispatch!(self, get(bin, word)).map(V::from_word)
    }

    #[inline(always)]
    pub(crate) fn insert_at(&self, bin: usize, word: u64, value: V) -> Result<Insert<V>, Error> {
        match dispatch!(self, insert(bin, word, value.to_word())) {
            Ok(Inserted::New) => Ok(Insert::Inserted),
            Ok(Inserted::Exists(v)) => Ok(Insert::Present(V::from_word(v))),
            Err(full) => Err(full.into()),
        }
    }

    #[inline(always)]
    pub(crate) fn upsert_at(&self, bin: usize, word: u64, value: V) -> Result<Option<V>, Error> {
        let new = value.to_word();
        dispatch!(self, upsert_with(bin, word, new, |_| new))
            .map(|old| old.map(V::from_word))
            .map_err(Error::from)
    }

    #[inline(always)]
    pub(crate) fn put_at(&self, bin: usize, word: u64, value: V) -> Option<V> {
        let new = value.to_word();
        dispatch!(self, update(bin, word, |_| new)).map(|(old, _)| V::from_word(old))
    }

    #[inline(always)]
    pub(crate) fn remove_at(&self, bin: usize, word: u64) -> Option<V> {
        dispatch!(self, remove(bin, word)).map(V::from_word)
    }

    /// A counting upsert with `add` as the addition (`Counter::add` of `V`).
    #[inline(always)]
    pub(crate) fn fetch_add_at(
        &self,
        bin: usize,
        word: u64,
        delta: V,
        add: fn(V, V) -> V,
    ) -> Result<Option<V>, Error> {
        dispatch!(
            self,
            upsert_with(bin, word, delta.to_word(), |old| add(
                V::from_word(old),
                delta
            )
            .to_word())
        )
        .map(|old| old.map(V::from_word))
        .map_err(Error::from)
    }

    /// The engine, for batches and the pipeline (prefetching).
    #[inline(always)]
    pub(crate) fn raw(&self) -> &RawTable {
        &self.raw
    }
}

impl From<Full> for Error {
    fn from(_: Full) -> Self {
        Error::Full
    }
}

impl<K, V, S> fmt::Debug for FlatMap<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlatMap")
            .field("len", &self.raw.len())
            .field("bins", &self.raw.bins())
            .field("link_buckets", &self.raw.link_buckets())
            .field("backend", &self.probe.backend())
            .finish()
    }
}

/// Geometry and memory of a map ([`FlatMap::stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Bins (one 64-byte line each).
    pub bins: usize,
    /// Link buckets in the pool.
    pub link_buckets: usize,
    /// Link buckets taken from the pool (chained to a bin, or lost in a chaining race).
    pub link_buckets_used: usize,
    /// Link buckets lost in chaining races.
    pub link_buckets_lost: usize,
    /// Bytes of table memory (bins and pool), rounded to pages for large tables.
    pub allocated_bytes: usize,
    /// Whether the table was advised for transparent huge pages.
    pub huge_pages: bool,
}
