//! [`FlatMap`]: the safe facade over the engine, for keys and values that fit in 8 bytes.

use core::{fmt, hash::BuildHasher, marker::PhantomData};
use std::sync::{atomic::AtomicUsize as StdAtomicUsize, Arc};

use crate::{
    control::header::{BinState, SLOTS_PER_BIN},
    error::Error,
    hash::{fastrange, DefaultHashBuilder},
    raw::{
        memory_fits,
        migrate::{Next, CHUNK_BINS},
        probe::ScalarProbe,
        DeadKeys, Full, Geometry, Inserted, Mismatch, Moved, RawTable,
    },
    reclaim::{Collector, Guard},
    sync::{AtomicPtr, Ordering},
    word::{Counter, Inline, InlineKey},
};

/// How a map moves its keys when it grows (see `src/raw/migrate.rs`).
///
/// Either way, operations on bins not being moved carry on, an operation usually waits at
/// most for the one bin it needs (the crate docs, "Waiting", list the exceptions), every
/// thread that touches a growing map helps move it, and the old table is freed once no thread
/// can still read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ResizeMode {
    /// Each operation that finds the map growing moves one chunk of bins (32) before its own
    /// work, and an insert that found its bin full moves just that bin. No operation pays for
    /// more than a chunk, so tail latency stays flat while the map grows; the growth takes as
    /// long as it takes the threads to do one chunk each, and both tables stay allocated until
    /// then. The default.
    #[default]
    Incremental,
    /// Every thread that finds the map growing moves chunks until none is left (papaya's
    /// blocking mode with helpers). The growth finishes as fast as the threads can copy, and
    /// the old table goes away soonest, but the operations that arrive during it wait for
    /// the copy: a few milliseconds per GiB of table on each of them.
    Blocking,
}

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
            use crate::raw::{Full, Inserted, Mismatch, Moved, RawTable};

            // Safety (every function): the caller holds a `$probe`, which exists only on CPUs
            // with `$feature`.

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn get(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
            ) -> Result<Option<u64>, Moved> {
                raw.get(p, bin, key)
            }

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn insert(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
                value: u64,
            ) -> Result<Result<Inserted, Full>, Moved> {
                raw.insert($writer(p), bin, key, value)
            }

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn remove(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
            ) -> Result<Option<u64>, Moved> {
                raw.remove($writer(p), bin, key)
            }

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn update(
                raw: &RawTable,
                p: $probe,
                bin: usize,
                key: u64,
                f: impl FnMut(u64) -> u64,
            ) -> Result<Option<(u64, u64)>, Moved> {
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
            ) -> Result<Result<Option<u64>, Full>, Moved> {
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
            ) -> Result<Result<u64, Mismatch>, Moved> {
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

/// Run engine operation `$op` on table `$table` with the map's backend.
macro_rules! dispatch {
    ($map:expr, $table:expr, $op:ident($($arg:expr),*)) => {{
        let raw: &RawTable = $table;
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
    resize_mode: ResizeMode,
    max_bins: usize,
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
            resize_mode: ResizeMode::Incremental,
            max_bins: usize::MAX,
            marker: PhantomData,
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Builder<K, V, S> {
    /// Size the first table so that `keys` uniformly hashed keys fit with high probability
    /// (default 1024). The map grows past it on demand.
    pub fn capacity(mut self, keys: usize) -> Self {
        self.capacity = keys;
        self
    }

    /// Set the number of bins exactly (overrides `capacity`). At least 2. A shrink moves
    /// groups of 2 to 32 bins into one and needs a group size dividing the bin count, so a map
    /// built with an odd count never shrinks below it (`capacity` picks multiples of 32).
    pub fn bins(mut self, bins: usize) -> Self {
        self.bins = Some(bins);
        self
    }

    /// Set the size of the first table's link-bucket pool exactly (default: derived from the
    /// bin count, as it is for every table the map grows into).
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
            resize_mode: self.resize_mode,
            max_bins: self.max_bins,
            marker: PhantomData,
        }
    }

    /// How the map moves its keys when it grows (default [`ResizeMode::Incremental`]).
    pub fn resize_mode(mut self, mode: ResizeMode) -> Self {
        self.resize_mode = mode;
        self
    }

    /// Never grow past `bins` bins (default: no limit). A map at its limit answers an insert
    /// that finds no room with [`Error::Full`] and changes nothing. `max_bins` at most the
    /// first table's bins makes a *fixed* map: it never grows or shrinks, and in exchange its
    /// operations skip the reclaimer's guard, a locked instruction each (gets ran ~1.5x faster
    /// on tables far larger than the caches, `BENCHMARKS.md`).
    pub fn max_bins(mut self, bins: usize) -> Self {
        self.max_bins = bins;
        self
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
            // Rounded up to a multiple of 32 (2 for small maps): a shrink moves groups of
            // 2 to 32 bins into one and needs a group size that divides the bin count, so an
            // odd count (100_000 keys used to give 57_143 bins) could never shrink.
            None => {
                let bins = self
                    .capacity
                    .checked_mul(4)
                    .ok_or(Error::CapacityOverflow)?
                    .div_ceil(TARGET_KEYS_PER_BIN_X4)
                    .max(2);
                let step = if bins >= CHUNK_BINS { CHUNK_BINS } else { 2 };
                bins.checked_next_multiple_of(step)
                    .ok_or(Error::CapacityOverflow)?
            }
        };
        let link_buckets = self
            .link_buckets
            .unwrap_or_else(|| derived_link_buckets(bins, self.bins_per_link));
        if link_buckets >= u32::MAX as usize - 2 {
            return Err(Error::CapacityOverflow);
        }
        let probe = ProbeKind::new(self.backend).ok_or(Error::UnsupportedBackend(self.backend))?;
        let alive = Arc::new(StdAtomicUsize::new(0));
        let first = allocate(
            &self.hasher,
            bins,
            link_buckets,
            0,
            self.huge_pages,
            &alive,
            false,
        )?;
        Ok(FlatMap {
            current: AtomicPtr::new(first),
            collector: Collector::new(),
            hasher: self.hasher,
            probe,
            huge_pages: self.huge_pages,
            resize_mode: self.resize_mode,
            max_bins: self.max_bins,
            fixed: self.max_bins <= bins,
            bins_per_link: self.bins_per_link,
            alive,
            marker: PhantomData,
        })
    }
}

/// Allocate a table (boxed, for the map's pointer): `bins` bins, a regular pool of
/// `link_buckets` and a transfer reserve of `reserve`. `written`: a migration will write the
/// whole table at once (see `memory_fits`).
fn allocate(
    hasher: &impl BuildHasher,
    bins: usize,
    link_buckets: usize,
    reserve: usize,
    huge_pages: bool,
    alive: &Arc<StdAtomicUsize>,
    written: bool,
) -> Result<*mut RawTable, Error> {
    let bytes = bins
        .checked_add(link_buckets)
        .and_then(|lines| lines.checked_add(reserve))
        .and_then(|lines| lines.checked_mul(64))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or(Error::CapacityOverflow)?;
    if link_buckets.saturating_add(reserve) >= u32::MAX as usize - 2 {
        return Err(Error::CapacityOverflow);
    }
    if !memory_fits(bytes, written) {
        return Err(Error::AllocationFailed { bytes });
    }
    let dead = dead_keys(hasher, bins)?;
    let geometry = Geometry {
        bins,
        link_buckets,
        transfer_reserve: reserve,
        huge_pages,
    };
    let raw = RawTable::new(geometry, dead, Arc::clone(alive))
        .ok_or(Error::AllocationFailed { bytes })?;
    Ok(Box::into_raw(Box::new(raw)))
}

/// The link pool for `bins` bins: the expected demand plus four standard deviations of it and
/// a constant, so small tables are not undone by one unlucky bin.
fn derived_link_buckets(bins: usize, bins_per_link: usize) -> usize {
    let mean = bins.div_ceil(bins_per_link);
    // Saturating: absurd sizes end as `CapacityOverflow` in `allocate`, not as an overflow.
    mean.saturating_add(4 * (mean as f64).sqrt() as usize)
        .saturating_add(8)
}

/// How many times more bins the next table gets (DLHT §3.2.5: larger steps for small tables,
/// where a migration is cheap and the next one would come soon).
fn growth_factor(bins: usize) -> usize {
    if bins < 4096 {
        8
    } else if bins < 64 << 20 {
        4
    } else {
        2
    }
}

/// Find the table's dead keys: two words that hash to different bins.
fn dead_keys(hasher: &impl BuildHasher, bins: usize) -> Result<DeadKeys, Error> {
    // Zero: the dead key of every bin but one is then what fresh memory holds (engine essay).
    const FIRST: u64 = 0;
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
/// at once. The map grows on demand without stopping its users (see the crate docs,
/// "Growing"); [`FlatMap::with_capacity`] or [`FlatMap::reserve`] size it up front.
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
    /// The current table (module docs of `raw::migrate` for how it is replaced).
    current: AtomicPtr<RawTable>,
    /// Frees replaced tables once no thread can read them (`reclaim`).
    collector: Collector,
    hasher: S,
    probe: ProbeKind,
    huge_pages: bool,
    resize_mode: ResizeMode,
    /// Growth limit ([`Builder::max_bins`]).
    max_bins: usize,
    /// `max_bins` equals the first table's bins: the table is never replaced (no growth, no
    /// shrink), so operations skip the reclaimer's guard (see `fixed_table`).
    fixed: bool,
    /// Link pool sizing of the tables it grows into ([`Builder::bins_per_link`]).
    bins_per_link: usize,
    /// Tables of this map alive (current, next, and retired ones not yet freed).
    alive: Arc<StdAtomicUsize>,
    marker: PhantomData<fn() -> (K, V)>,
}

impl<K, V, S> Drop for FlatMap<K, V, S> {
    fn drop(&mut self) {
        let current = self.current.load(Ordering::Acquire);
        // SAFETY: `&mut self`: no operation is running, so the current table and its
        // successor (if a migration was left half done) are reachable only from here. Tables
        // retired earlier belong to the collector, which frees them when it drops.
        unsafe {
            let next = (*current).next_ptr();
            if !next.is_null() {
                drop(Box::from_raw(next));
            }
            drop(Box::from_raw(current));
        }
    }
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
    /// The key's hash and word. The bin depends on the table (`bin_of`).
    #[inline(always)]
    pub(crate) fn locate(&self, key: K) -> (u64, u64) {
        let word = key.to_word();
        (self.hasher.hash_one(word), word)
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
        let (hash, word) = self.locate(*key);
        self.get_at(hash, word)
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
    /// [`Error::Full`] if the key's bin has no room and the map may not grow
    /// ([`Builder::max_bins`]); [`Error::HashCollisions`] if the bin is full of keys whose
    /// hashes agree with this key's so closely that no larger table would separate them (the
    /// map does not grow for them); [`Error::AllocationFailed`] or [`Error::CapacityOverflow`]
    /// if the larger table cannot be had. The map is unchanged.
    #[inline]
    pub fn insert(&self, key: K, value: V) -> Result<Insert<V>, Error> {
        let (hash, word) = self.locate(key);
        self.insert_at(hash, word, value)
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
    /// As [`insert`](Self::insert), when the key is absent: [`Error::Full`] at
    /// [`Builder::max_bins`], or the larger table cannot be had. The map is unchanged.
    #[inline]
    pub fn upsert(&self, key: K, value: V) -> Result<Option<V>, Error> {
        let (hash, word) = self.locate(key);
        self.upsert_at(hash, word, value)
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
        let (hash, word) = self.locate(key);
        self.put_at(hash, word, value)
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
        let (hash, word) = self.locate(*key);
        self.run(hash, |table, bin| {
            dispatch!(
                self,
                table,
                update(bin, word, |old| f(V::from_word(old)).to_word())
            )
        })
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
        let (hash, word) = self.locate(*key);
        match self.run(hash, |table, bin| {
            dispatch!(
                self,
                table,
                compare_exchange(bin, word, current.to_word(), new.to_word())
            )
        }) {
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
        let (hash, word) = self.locate(*key);
        self.remove_at(hash, word)
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
        let (hash, _) = self.locate(*key);
        let guard = self.collector.enter();
        let table = self.collector.load(&self.current, &guard);
        table.prefetch_bin(fastrange(hash, table.bins()));
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
        let guard = self.collector.enter();
        let mut table = self.settled(&guard);
        loop {
            table.clear();
            // A migration that started meanwhile carried some keys past the clear.
            match table.migrating_into() {
                Some(_) => table = self.settled(&guard),
                None => return,
            }
        }
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
        let guard = self.collector.enter();
        let table = self.collector.load(&self.current, &guard);
        // During a migration the keys are split between the two tables.
        table.len() + table.migrating_into().map_or(0, RawTable::len)
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
        let guard = self.collector.enter();
        self.collector.load(&self.current, &guard).capacity()
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
        let guard = self.collector.enter();
        let table = self.collector.load(&self.current, &guard);
        Stats {
            bins: table.bins(),
            link_buckets: table.link_buckets(),
            link_buckets_used: table.link_buckets_used(),
            link_buckets_lost: table.links_lost(),
            allocated_bytes: table.allocated_bytes()
                + table.migrating_into().map_or(0, RawTable::allocated_bytes),
            huge_pages: table.huge_pages(),
            migrating: table.migrating_into().is_some(),
            live_tables: self.alive.load(std::sync::atomic::Ordering::Relaxed),
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
    ///
    /// If the map is growing, the growth is finished first (this call does the remaining
    /// work); a growth that starts during the walk can make it visit a pair twice.
    pub fn for_each(&self, mut visit: impl FnMut(K, V)) {
        let guard = self.collector.enter();
        let mut table = self.settled(&guard);
        loop {
            table.for_each(|k, v| visit(K::from_word(k), V::from_word(v)));
            match table.migrating_into() {
                Some(next) => table = next,
                None => return,
            }
        }
    }

    /// Make room for `additional` more keys than the map holds now, growing it (and doing the
    /// whole move in this call) if the current table is sized for fewer.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(16)?;
    /// map.reserve(100_000)?;
    /// assert!(map.capacity() >= 100_000);
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::CapacityOverflow`] if the size cannot be addressed or exceeds
    /// [`Builder::max_bins`]; [`Error::AllocationFailed`] if the larger table does not fit in
    /// the memory available now (the move writes all of it at once, so a table the kernel
    /// would map but not back is refused rather than killed for); [`Error::DegenerateHasher`]
    /// as for [`shrink_to_fit`](Self::shrink_to_fit). The map is unchanged.
    pub fn reserve(&self, additional: usize) -> Result<(), Error> {
        let want = self
            .len()
            .checked_add(additional)
            .and_then(|keys| keys.checked_mul(4))
            .ok_or(Error::CapacityOverflow)?
            .div_ceil(TARGET_KEYS_PER_BIN_X4);
        let guard = self.collector.enter();
        loop {
            let table = self.settled(&guard);
            if table.bins() >= want {
                return Ok(());
            }
            let factor = want.div_ceil(table.bins()).max(2);
            if table.bins().saturating_mul(factor) > self.max_bins {
                return Err(Error::CapacityOverflow);
            }
            let next = self.next_of(table, factor)?;
            self.finish_migration(table, next, &guard);
        }
    }

    /// Move the keys into a table with 2 to 32 times fewer bins if they fit it at the usual
    /// load (about 1.75 keys a bin), returning whether it shrank.
    ///
    /// The shrink first *freezes* every bin: gets, puts and removes go on, inserts wait (a
    /// frozen bin's key count can only fall). It then checks that every group of bins that
    /// will share a new bin holds at most one bin's worth of keys (15), picking a smaller
    /// factor if not, and moves the groups as a growth moves bins, with any thread that
    /// touches the map helping. If no factor fits, the bins thaw and nothing changes. So
    /// inserts pause for the length of the call (a few milliseconds per 100 MiB of table);
    /// everything else does not. A growth already under way is finished first; a shrink
    /// never races a growth.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(1 << 16)?;
    /// for k in 0..1000 {
    ///     map.insert(k, k)?;
    /// }
    /// let before = map.stats().bins;
    /// assert!(map.shrink_to_fit()?);
    /// assert!(map.stats().bins < before);
    /// assert_eq!(map.get(&999), Some(999));
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// The factor must divide the bin count: a map built with an odd [`Builder::bins`] count
    /// does not shrink (maps sized by [`Builder::capacity`] have multiples of 32).
    ///
    /// # Errors
    /// Nothing changes on an error: [`Error::AllocationFailed`] if the smaller table cannot be
    /// had; [`Error::DegenerateHasher`] if the hasher sends every key it is tried on to one
    /// bin of the smaller table (no dead key can be found for it, see [`Builder::build`]).
    pub fn shrink_to_fit(&self) -> Result<bool, Error> {
        if self.fixed {
            return Ok(false);
        }
        let guard = self.collector.enter();
        let table = self.settled(&guard);
        let want = self
            .len()
            .saturating_mul(4)
            .div_ceil(TARGET_KEYS_PER_BIN_X4)
            .max(2);
        let mut group = 1;
        while group < CHUNK_BINS
            && table.bins().is_multiple_of(group * 2)
            && table.bins() / (group * 2) >= want
        {
            group *= 2;
        }
        if group == 1 {
            return Ok(false);
        }
        // Hold the right to migrate this table (a growth that wants it waits, then joins).
        let Next::Allocate = table.next_table(true) else {
            return Ok(false);
        };
        if !table.set_all_bins(BinState::NoTransfer, BinState::Frozen) {
            table.abandon_allocation();
            return Ok(false);
        }
        let thaw = || {
            table.set_all_bins(BinState::Frozen, BinState::NoTransfer);
            table.abandon_allocation();
        };
        let fits = core::iter::successors(Some(group), |g| (*g > 2).then_some(g / 2))
            .find_map(|g| table.group_demand(g).map(|links| (g, links)));
        let Some((group, links)) = fits else {
            thaw();
            return Ok(false);
        };
        let bins = table.bins() / group;
        let links_regular = derived_link_buckets(bins, self.bins_per_link);
        match allocate(
            &self.hasher,
            bins,
            links_regular,
            links,
            self.huge_pages,
            &self.alive,
            true,
        ) {
            Ok(next) => {
                table.install_next(next, group);
                // SAFETY: just allocated; freed only after `table` (see `migrate`).
                self.finish_migration(table, unsafe { &*next }, &guard);
                Ok(true)
            }
            Err(error) => {
                thaw();
                Err(error)
            }
        }
    }

    /// Check the engine's invariants on a quiescent map, panicking on a violation, and return
    /// the number of live keys. Finishes a growth in progress first. For tests: it walks the
    /// whole table.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> usize {
        let guard = self.collector.enter();
        self.settled(&guard).check_invariants()
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
    /// As [`insert`](Self::insert), when the key is absent: [`Error::Full`] at
    /// [`Builder::max_bins`], or the larger table cannot be had. The map is unchanged.
    #[inline]
    pub fn fetch_add(&self, key: K, delta: V) -> Result<Option<V>, Error> {
        let (hash, word) = self.locate(key);
        self.fetch_add_at(hash, word, delta, V::add)
    }
}
/// The operations on an already located key (`locate`), shared by the single-key methods,
/// batches and the pipeline.
impl<K: InlineKey, V: Inline, S: BuildHasher> FlatMap<K, V, S> {
    #[inline(always)]
    pub(crate) fn get_at(&self, hash: u64, word: u64) -> Option<V> {
        self.run_reading(hash, |table, bin| dispatch!(self, table, get(bin, word)))
            .map(V::from_word)
    }

    #[inline(always)]
    pub(crate) fn insert_at(&self, hash: u64, word: u64, value: V) -> Result<Insert<V>, Error> {
        let value = value.to_word();
        match self.run_growing(hash, |table, bin| {
            dispatch!(self, table, insert(bin, word, value))
        })? {
            Inserted::New => Ok(Insert::Inserted),
            Inserted::Exists(v) => Ok(Insert::Present(V::from_word(v))),
        }
    }

    #[inline(always)]
    pub(crate) fn upsert_at(&self, hash: u64, word: u64, value: V) -> Result<Option<V>, Error> {
        let new = value.to_word();
        self.run_growing(hash, |table, bin| {
            dispatch!(self, table, upsert_with(bin, word, new, |_| new))
        })
        .map(|old| old.map(V::from_word))
    }

    #[inline(always)]
    pub(crate) fn put_at(&self, hash: u64, word: u64, value: V) -> Option<V> {
        let new = value.to_word();
        self.run(hash, |table, bin| {
            dispatch!(self, table, update(bin, word, |_| new))
        })
        .map(|(old, _)| V::from_word(old))
    }

    #[inline(always)]
    pub(crate) fn remove_at(&self, hash: u64, word: u64) -> Option<V> {
        self.run(hash, |table, bin| dispatch!(self, table, remove(bin, word)))
            .map(V::from_word)
    }

    /// A counting upsert with `add` as the addition (`Counter::add` of `V`).
    #[inline(always)]
    pub(crate) fn fetch_add_at(
        &self,
        hash: u64,
        word: u64,
        delta: V,
        add: fn(V, V) -> V,
    ) -> Result<Option<V>, Error> {
        self.run_growing(hash, |table, bin| {
            dispatch!(
                self,
                table,
                upsert_with(bin, word, delta.to_word(), |old| add(
                    V::from_word(old),
                    delta
                )
                .to_word())
            )
        })
        .map(|old| old.map(V::from_word))
    }

    /// Run `op` on the key's bin in the current table, following the key to the next table
    /// while the map grows (`Moved`). Helps a growth in progress first.
    #[inline(always)]
    fn run<R>(&self, hash: u64, op: impl FnMut(&RawTable, usize) -> Result<R, Moved>) -> R {
        if let Some(table) = self.fixed_table() {
            return Self::follow(table, hash, op);
        }
        let guard = self.collector.enter();
        let table = self.collector.load(&self.current, &guard);
        self.help(table, &guard);
        Self::follow(table, hash, op)
    }

    /// As [`run`](Self::run) for gets, which help a growth on one call in
    /// [`READER_HELP_EVERY`] per thread: a growth still finishes while only gets run, and a
    /// read-mostly workload does not pay a chunk move on every get while the map grows
    /// (measured: gets fell below half their steady rate for seconds when each helped).
    #[inline(always)]
    fn run_reading<R>(&self, hash: u64, op: impl FnMut(&RawTable, usize) -> Result<R, Moved>) -> R {
        if let Some(table) = self.fixed_table() {
            return Self::follow(table, hash, op);
        }
        let guard = self.collector.enter();
        let table = self.collector.load(&self.current, &guard);
        if table.migrating_into().is_some() && reader_turn_to_help() {
            self.help(table, &guard);
        }
        Self::follow(table, hash, op)
    }

    #[inline(always)]
    fn follow<R>(
        mut table: &RawTable,
        hash: u64,
        mut op: impl FnMut(&RawTable, usize) -> Result<R, Moved>,
    ) -> R {
        loop {
            match op(table, fastrange(hash, table.bins())) {
                Ok(result) => return result,
                Err(Moved) => table = moved_on(table),
            }
        }
    }

    /// As [`run`](Self::run) for operations that may insert: a full bin or link pool grows the
    /// map and the operation goes on in the next table.
    #[inline(always)]
    fn run_growing<R>(
        &self,
        hash: u64,
        mut op: impl FnMut(&RawTable, usize) -> Result<Result<R, Full>, Moved>,
    ) -> Result<R, Error> {
        if let Some(table) = self.fixed_table() {
            return match op(table, fastrange(hash, table.bins())) {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(_full)) => Err(Error::Full),
                Err(Moved) => unreachable!("a fixed table never moves a bin"),
            };
        }
        let guard = self.collector.enter();
        let mut table = self.collector.load(&self.current, &guard);
        self.help(table, &guard);
        loop {
            let bin = fastrange(hash, table.bins());
            match op(table, bin) {
                Ok(Ok(result)) => return Ok(result),
                Ok(Err(full)) => table = self.grow(table, bin, full, hash, &guard)?,
                Err(Moved) => table = moved_on(table),
            }
        }
    }

    /// A fixed map's table, without a guard. Entering and leaving the reclaimer's guard costs
    /// a locked instruction per operation (seize marks the thread inactive with a swap),
    /// which also ends the overlap of consecutive operations' misses: measured, gets ran at
    /// ~0.65x. A map whose `max_bins` is its first table's bins never replaces that table,
    /// so it needs no guard.
    #[inline(always)]
    fn fixed_table(&self) -> Option<&RawTable> {
        // SAFETY: `fixed` maps never grow (`grow` refuses at `max_bins`) nor shrink
        // (`shrink_to_fit` returns early), so `current` points to the first table until the
        // map is dropped, and `&self` outlives the borrow.
        self.fixed
            .then(|| unsafe { &*self.current.load(Ordering::Relaxed) })
    }

    /// The current table with no growth in progress: finishes one if needed.
    pub(crate) fn settled<'g>(&self, guard: &'g Guard<'_>) -> &'g RawTable {
        loop {
            let table = self.collector.load(&self.current, guard);
            match table.migrating_into() {
                None => return table,
                Some(next) => self.finish_migration(table, next, guard),
            }
        }
    }

    /// The pinned current table, for batches: operations through [`Pinned`] share one guard.
    pub(crate) fn pin(&self) -> Pinned<'_, K, V, S> {
        Pinned {
            map: self,
            guard: self.collector.enter(),
        }
    }

    /// The bin of `hash` in `table`.
    #[inline(always)]
    pub(crate) fn bin_of(table: &RawTable, hash: u64) -> usize {
        fastrange(hash, table.bins())
    }

    /// Bytes of the current table (for the batches' prefetch decision).
    pub(crate) fn table_bytes(&self) -> usize {
        let guard = self.collector.enter();
        self.collector.load(&self.current, &guard).allocated_bytes()
    }

    /// Start loading the bin of `hash` in the current table.
    #[inline(always)]
    pub(crate) fn prefetch_hash(&self, hash: u64) {
        let guard = self.collector.enter();
        let table = self.collector.load(&self.current, &guard);
        table.prefetch_bin(fastrange(hash, table.bins()));
    }

    /// Start loading the link buckets of the bin of `hash`; whether it has any.
    #[inline(always)]
    pub(crate) fn prefetch_chain_hash(&self, hash: u64) -> bool {
        let guard = self.collector.enter();
        let table = self.collector.load(&self.current, &guard);
        table.prefetch_chain(fastrange(hash, table.bins()))
    }

    // -----------------------------------------------------------------------------------------
    // Growth (see `src/raw/migrate.rs` for the protocol and its argument)
    // -----------------------------------------------------------------------------------------

    /// Where the key `word` goes in `next`.
    #[inline(always)]
    fn new_bin<'a>(&'a self, next: &'a RawTable) -> impl Fn(u64) -> usize + 'a {
        move |word| fastrange(self.hasher.hash_one(word), next.bins())
    }

    /// If `table` is migrating, do this operation's share of the work (one chunk, or all of
    /// it in blocking mode).
    #[inline(always)]
    fn help(&self, table: &RawTable, guard: &Guard<'_>) {
        if let Some(next) = table.migrating_into() {
            self.help_slow(table, next, guard);
        }
    }

    #[cold]
    #[inline(never)]
    fn help_slow(&self, table: &RawTable, next: &RawTable, guard: &Guard<'_>) {
        match self.resize_mode {
            ResizeMode::Incremental => {
                if table.help_one_chunk(next, &self.new_bin(next)) == Some(true) {
                    self.complete(table, next, guard);
                }
            }
            ResizeMode::Blocking => self.finish_migration(table, next, guard),
        }
    }

    /// Move every chunk still unclaimed, then wait until the others' chunks are done.
    fn finish_migration(&self, table: &RawTable, next: &RawTable, guard: &Guard<'_>) {
        let new_bin = self.new_bin(next);
        while let Some(last) = table.help_one_chunk(next, &new_bin) {
            if last {
                self.complete(table, next, guard);
            }
        }
        while !table.migration_done() || core::ptr::eq(self.current.load(Ordering::Acquire), table)
        {
            crate::sync::spin();
        }
    }

    /// The last chunk is done: make `next` current and retire `table`.
    fn complete(&self, table: &RawTable, next: &RawTable, guard: &Guard<'_>) {
        // The pointers the tables were published with (both from `Box::into_raw`), not ones
        // made from the shared references: the old one becomes a `Box` again when it is freed,
        // and a pointer derived from `&RawTable` may not be used for that (Miri's Stacked
        // Borrows rejects it).
        let successor = table.next_ptr();
        debug_assert!(core::ptr::eq(successor, next));
        // Release: pairs with the Acquire load of `current` by every later operation, which
        // then sees every transfer (this thread acquired them through the chunk counter).
        let replaced = self.current.compare_exchange(
            table as *const RawTable as *mut RawTable,
            successor,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        let Ok(old) = replaced else {
            unreachable!("only the migration's last chunk replaces its table");
        };
        // SAFETY: `old` is the pointer `current` held, from `Box::into_raw` (`allocate`); it is
        // no longer current (new operations start at `next`), and only the last chunk's thread
        // retires it, once.
        unsafe { self.collector.retire(guard, old) };
    }

    /// `table` (current, or the successor of the current table) found a bin or the link pool
    /// full at `bin` for the key hashed to `hash`: start or join its growth, move that bin,
    /// and return the table to retry in. A full bin whose keys no larger table would split
    /// from the new key's is an error, not a growth (`separable`).
    #[cold]
    #[inline(never)]
    fn grow<'g>(
        &self,
        table: &'g RawTable,
        bin: usize,
        full: Full,
        hash: u64,
        guard: &'g Guard<'_>,
    ) -> Result<&'g RawTable, Error> {
        if full == Full::Bin {
            self.separable(table, bin, hash)?;
        }
        // A table grows only once it is current: finish the migration into it first.
        let current = self.collector.load(&self.current, guard);
        if !core::ptr::eq(current, table) {
            if let Some(next) = current.migrating_into() {
                self.finish_migration(current, next, guard);
            }
        }
        let limit = self.max_bins / table.bins();
        let factor = growth_factor(table.bins()).min(limit);
        if factor < 2 && table.migrating_into().is_none() {
            return Err(Error::Full);
        }
        let next = self.next_of(table, factor.max(2))?;
        table.transfer_bin(bin, next, &self.new_bin(next));
        if self.resize_mode == ResizeMode::Blocking {
            self.finish_migration(table, next, guard);
        }
        Ok(next)
    }

    /// Whether growing can make room for the key hashed to `hash` in its full `bin`: some
    /// table the map may grow into (every growth step up to `max_bins` and what memory can
    /// hold) must send at least one of the bin's keys elsewhere. Keys whose hashes agree on
    /// their top bits stay together in every table up to `2^bits` bins; sixteen keys with one
    /// hash stay together forever. Without this check each failed insert of such a key would
    /// grow the map again, until the memory ran out.
    ///
    /// The keys are a snapshot of the bin (a concurrent remove may have made room since; the
    /// bin was full when this insert found it so, which is when the error is linearized).
    ///
    /// # Errors
    /// [`Error::HashCollisions`] if no table the machine could hold (and none of up to 2^40
    /// bins) would split them, [`Error::Full`] if only a table larger than `max_bins` would.
    fn separable(&self, table: &RawTable, bin: usize, hash: u64) -> Result<(), Error> {
        let mut hashes = Vec::with_capacity(SLOTS_PER_BIN);
        table.keys_of_bin(bin, |key| hashes.push(self.hasher.hash_one(key)));
        let crowded = |bins: usize| {
            let ours = fastrange(hash, bins);
            hashes
                .iter()
                .filter(|&&h| fastrange(h, bins) == ours)
                .count()
                >= SLOTS_PER_BIN
        };
        if crowded(MAX_SEPARATING_BINS) {
            return Err(Error::HashCollisions);
        }
        // A table the machine could not hold is no way out either (checked only for the
        // sizes that do not separate the keys: a separating one that does not fit is left to
        // the allocation, which answers `AllocationFailed`).
        let fits = |bins: usize| bins.checked_mul(64).is_some_and(|b| memory_fits(b, false));
        let mut bins = table.bins();
        loop {
            let step = growth_factor(bins);
            match bins.checked_mul(step).filter(|&b| b <= self.max_bins) {
                Some(larger) if !crowded(larger) => return Ok(()),
                Some(larger) if !fits(larger) => return Err(Error::HashCollisions),
                Some(larger) => bins = larger,
                None => return Err(Error::Full),
            }
        }
    }

    /// `table`'s next table: the one being filled, or a new one `factor` times larger
    /// (allocated by this thread if it is the first to need it).
    fn next_of<'g>(&self, table: &'g RawTable, factor: usize) -> Result<&'g RawTable, Error> {
        match table.next_table(true) {
            Next::Ready(next) => Ok(next),
            Next::Idle => unreachable!("next_table(true) never answers Idle"),
            Next::Allocate => {
                let sized = table
                    .bins()
                    .checked_mul(factor)
                    .map(|bins| (bins, derived_link_buckets(bins, self.bins_per_link)))
                    .ok_or(Error::CapacityOverflow);
                // Chained lines of the old table: its regular pool plus what its own filling
                // took from its reserve; a split needs at most 4/3 of them (`migrate`).
                let chained = table.link_buckets() + table.transfer_used();
                let reserve = chained + chained.div_ceil(3);
                match sized.and_then(|(bins, links)| {
                    allocate(
                        &self.hasher,
                        bins,
                        links,
                        reserve,
                        self.huge_pages,
                        &self.alive,
                        true,
                    )
                }) {
                    Ok(next) => {
                        // SAFETY: just allocated; freed only after `table` (see `migrate`).
                        let next_table = unsafe { &*next };
                        table.install_next(next, 1);
                        Ok(next_table)
                    }
                    Err(error) => {
                        table.abandon_allocation();
                        Err(error)
                    }
                }
            }
        }
    }
}

/// The largest table `separable` considers (2^40 bins are 64 TiB): keys whose hashes share
/// their top 40 bits collide for every practical purpose.
const MAX_SEPARATING_BINS: usize = 1 << 40;

/// Gets help a growth on one call in this many (per thread; see `run_reading`).
const READER_HELP_EVERY: u32 = 16;

/// Whether this get is the one in [`READER_HELP_EVERY`] of its thread that helps.
#[inline(always)]
fn reader_turn_to_help() -> bool {
    // Under loom a thread-local of loom's, which starts afresh in every execution (a std one
    // would carry its count from one execution to the next and make the model
    // nondeterministic).
    #[cfg(loom)]
    loom::thread_local! {
        static GETS: core::cell::Cell<u32> = core::cell::Cell::new(0);
    }
    #[cfg(not(loom))]
    std::thread_local! {
        static GETS: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
    }
    GETS.with(|n| {
        let v = n.get().wrapping_add(1);
        n.set(v);
        v % READER_HELP_EVERY == 0
    })
}

/// The table a moved bin's keys went to.
#[inline(always)]
fn moved_on(table: &RawTable) -> &RawTable {
    table
        .migrating_into()
        .expect("a bin is moved only after its table's successor is installed")
}

/// A map with a guard held: batches run many operations under one guard and one load of the
/// current table.
pub(crate) struct Pinned<'m, K, V, S> {
    map: &'m FlatMap<K, V, S>,
    guard: Guard<'m>,
}

impl<K, V, S> Pinned<'_, K, V, S> {
    /// The current table (prefetch targets; operations re-resolve it).
    #[inline(always)]
    pub(crate) fn table(&self) -> &RawTable {
        self.map.collector.load(&self.map.current, &self.guard)
    }
}

impl From<Full> for Error {
    fn from(_: Full) -> Self {
        Error::Full
    }
}

impl<K, V, S> fmt::Debug for FlatMap<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = self.collector.enter();
        let table = self.collector.load(&self.current, &guard);
        f.debug_struct("FlatMap")
            .field("len", &table.len())
            .field("bins", &table.bins())
            .field("link_buckets", &table.link_buckets())
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
    /// Whether a growth is in progress (`allocated_bytes` then counts both tables).
    pub migrating: bool,
    /// Tables of this map not yet freed: 1, or 2 during a growth, more only while a thread
    /// still reads a replaced table.
    pub live_tables: usize,
}
