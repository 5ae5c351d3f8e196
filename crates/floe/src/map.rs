//! [`FlatMap`]: the typed facade for keys and values that fit in 8 bytes.
//!
//! A thin shell over the table driver (`raw::bins::driver::RawMap`): it converts keys and values to
//! words ([`InlineKey`], [`Inline`]), hashes them with the map's hasher, and hands the driver
//! the hasher as a function for the keys a growth moves. Everything that is not about types
//! (running operations, growth, reclamation, whole-map walks) is the driver's.

use core::{hash::BuildHasher, marker::PhantomData};

#[cfg(not(floe_loom))]
use crate::raw::bins::driver::RawMap;
// The loom build compiles no persistence, which uses StorageErrorKind.
#[cfg_attr(floe_loom, allow(unused_imports))]
use crate::{
    config::{Backend, Config, Layout, ResizeMode, Stats},
    error::{Error, OrRaise, StorageErrorKind},
    hash::DefaultHashBuilder,
    inline::{Counter, Inline, InlineKey},
    raw::{
        driver::{Driver, TableDriver},
        ring::Locate,
        Full, Inserted, Mismatch,
    },
};

/// The outcome of [`FlatMap::insert_new`] and `MapRef::insert_new`: whether the key went in or
/// what was there. `#[must_use]`: an insert that found the key present changed nothing, and a
/// caller that meant to replace the value wants [`FlatMap::insert`].
#[must_use = "insert_new leaves a present value unchanged; use `insert` to replace it"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert<V> {
    /// The key was absent; it is now present with the given value.
    Inserted,
    /// The key was present with this value; the map is unchanged.
    Present(V),
    /// The key is held by an open shadow insert ([`FlatMap::insert_shadow`],
    /// [`MapRef::insert_shadow`](crate::MapRef::insert_shadow)): hidden, but taken. The map
    /// is unchanged.
    Shadowed,
}

impl<V> Insert<V> {
    /// Whether the insert took place.
    pub fn is_inserted(&self) -> bool {
        matches!(self, Insert::Inserted)
    }

    /// The value that was already present, if any.
    pub fn present(self) -> Option<V> {
        match self {
            Insert::Present(v) => Some(v),
            Insert::Inserted | Insert::Shadowed => None,
        }
    }
}

/// Why [`FlatMap::insert_shadow`] made no shadow: its key is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken<V> {
    /// The key is present with this value.
    Present(V),
    /// The key is held by another open shadow insert.
    Shadowed,
}

/// An open shadow insert ([`FlatMap::insert_shadow`]): its key is taken but hidden until
/// [`commit`](Self::commit) makes `key -> value` visible at once; [`abort`](Self::abort), or
/// dropping it, removes it without a trace. Only this handle can resolve the shadow, so a
/// shadow is committed or aborted exactly once. Leaking the handle (`mem::forget`) leaves the
/// key taken for the life of the map, as a leaked lock guard does.
#[must_use = "an open shadow keeps its key taken until it is committed (dropping it aborts)"]
pub struct Shadow<'m, K: InlineKey, V: Inline, S: BuildHasher> {
    map: &'m FlatMap<K, V, S>,
    key: K,
    value: V,
    /// The key's hash and word, located once.
    located: (u64, u64),
    /// Not yet committed or aborted.
    open: bool,
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Shadow<'_, K, V, S> {
    /// The shadowed key.
    pub fn key(&self) -> K {
        self.key
    }

    /// The value the commit will make visible.
    pub fn value(&self) -> V {
        self.value
    }

    /// Make `key -> value` visible, atomically: every get that starts after this call returns
    /// finds it, none before it did (the commit is linearized inside the call).
    pub fn commit(mut self) {
        self.resolve(Some(self.value.to_word()));
    }

    /// Remove the shadow without it ever having been visible; the key is free again.
    pub fn abort(mut self) {
        self.resolve(None);
    }

    fn resolve(&mut self, commit: Option<u64>) {
        if core::mem::take(&mut self.open) {
            let (hash, word) = self.located;
            let found = self
                .map
                .raw
                .resolve_shadow(hash, word, commit, &self.map.rehash());
            // Only this handle resolves its shadow, and every move carries it.
            debug_assert!(found, "an open shadow was not found");
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Drop for Shadow<'_, K, V, S> {
    fn drop(&mut self) {
        self.resolve(None);
    }
}

impl<K, V, S> core::fmt::Debug for Shadow<'_, K, V, S>
where
    K: InlineKey + core::fmt::Debug,
    V: Inline + core::fmt::Debug,
    S: BuildHasher,
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Shadow")
            .field("key", &self.key)
            .field("value", &self.value)
            .finish()
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
///
/// The same builder configures a [`Map`](crate::Map) (`Map::builder()`); `T` names which of
/// the two [`build`](Builder::build) makes ([`ForFlatMap`] or [`ForMap`]).
#[derive(Clone, Debug)]
pub struct Builder<K, V, S = DefaultHashBuilder, T = ForFlatMap> {
    pub(crate) config: Config,
    pub(crate) hasher: S,
    marker: PhantomData<fn(K, V, T)>,
}

/// A [`Builder`] that builds a [`FlatMap`].
#[derive(Clone, Copy, Debug)]
pub struct ForFlatMap;

/// A [`Builder`] that builds a [`Map`](crate::Map).
#[derive(Clone, Copy, Debug)]
pub struct ForMap;

impl<K, V, T> Builder<K, V, DefaultHashBuilder, T> {
    pub(crate) fn new() -> Self {
        Self {
            config: Config::default(),
            hasher: DefaultHashBuilder::new(),
            marker: PhantomData,
        }
    }
}

impl<K, V, S, T> Builder<K, V, S, T> {
    #[cfg(all(feature = "serde", unix, not(floe_loom)))]
    pub(crate) fn from_parts(config: Config, hasher: S) -> Self {
        Self {
            config,
            hasher,
            marker: PhantomData,
        }
    }

    /// Size the first table so that `keys` uniformly hashed keys fit with high probability
    /// (default 1024). The map grows past it on demand.
    pub fn capacity(mut self, keys: usize) -> Self {
        self.config.capacity = keys;
        self
    }

    /// Set the number of bins exactly (overrides `capacity`). At least 2. A shrink moves
    /// groups of 2 to 32 bins into one and needs a group size dividing the bin count, so a map
    /// built with an odd count never shrinks below it (`capacity` picks multiples of 32).
    pub fn bins(mut self, bins: usize) -> Self {
        self.config.bins = Some(bins);
        self
    }

    /// Set the size of the first table's link-bucket pool exactly (default: derived from the
    /// bin count, as it is for every table the map grows into).
    pub fn link_buckets(mut self, link_buckets: usize) -> Self {
        self.config.link_buckets = Some(link_buckets);
        self
    }

    /// Bins per link bucket when the pool is derived (default 8, as DLHT). Smaller values give
    /// more room to unlucky bins at 64 bytes per link bucket.
    pub fn bins_per_link(mut self, bins_per_link: usize) -> Self {
        self.config.bins_per_link = bins_per_link;
        self
    }

    /// Use another hasher.
    pub fn hasher<S2: BuildHasher>(self, hasher: S2) -> Builder<K, V, S2, T> {
        Builder {
            config: self.config,
            hasher,
            marker: PhantomData,
        }
    }

    /// How the table lays out its keys (default [`Layout::Bins`]); [`Layout::Dense`] keeps
    /// about twice the keys in the same memory.
    ///
    /// ```
    /// use floe::{FlatMap, Layout};
    /// let map = FlatMap::<u64, u64>::builder().layout(Layout::Dense).build()?;
    /// map.insert(1, 10);
    /// assert_eq!(map.get(&1), Some(10));
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn layout(mut self, layout: Layout) -> Self {
        self.config.layout = layout;
        self
    }

    /// How the map moves its keys when it grows (default [`ResizeMode::Incremental`]).
    pub fn resize_mode(mut self, mode: ResizeMode) -> Self {
        self.config.resize_mode = mode;
        self
    }

    /// Never grow past `bins` bins (default: no limit). A map at its limit answers an insert
    /// that finds no room with [`Error::Full`] and changes nothing: call the `try_` forms
    /// (`try_insert`, `try_insert_new`, `try_fetch_add`) on a capped map, since the plain ones
    /// panic with the error, as a full `arrayvec::ArrayVec`'s `push` does. `max_bins` at most the
    /// first table's bins makes a *fixed* map: it never grows or shrinks, and in exchange its
    /// operations skip even the reader announcement of growable maps (a thread-local load and
    /// store; `BENCHMARKS.md` compares the two).
    pub fn max_bins(mut self, bins: usize) -> Self {
        self.config.max_bins = bins;
        self
    }

    /// Choose the matching backend (default [`Backend::Auto`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.config.backend = backend;
        self
    }

    /// Ask for transparent huge pages for tables of 2 MiB and more (default on).
    pub fn huge_pages(mut self, huge_pages: bool) -> Self {
        self.config.huge_pages = huge_pages;
        self
    }

    /// Fault the first table's memory in when the map is built (default off), so that the
    /// inserts that fill a fresh map pay no page faults: the cost moves into `build`.
    ///
    /// A table's memory is mapped lazily; each page comes (zeroed) on its first touch, and on
    /// a machine whose free memory is fragmented a huge page's first touch may wait for the
    /// kernel to compact one. Turn this on for a map that will be filled at once and must
    /// not stall while it is (a service's tail latency), or to measure inserts the way
    /// DRAMHiT does (it writes its whole table when allocating it). Later tables are faulted in
    /// ahead by [`grow_ahead`](Self::grow_ahead). A hint: a kernel that cannot populate
    /// (before Linux 5.14) leaves the pages to their first touch. Persistent maps' tables are
    /// files and are not affected.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::builder().capacity(1 << 20).populate(true).build()?;
    /// assert!(map.stats().allocated_bytes >= (1 << 20) * 16);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn populate(mut self, populate: bool) -> Self {
        self.config.populate = populate;
        self
    }

    /// Prepare each next table's memory ahead of its growth, if it takes at most `max_bytes`
    /// (default: no limit; 0 turns preparation off).
    ///
    /// Once a table holds more keys than the load it would be sized for from a capacity (1.75
    /// keys a bin; it grows at 1.9-2.0), its map maps its successor and its writes fault the
    /// successor's bins in, a 2 MiB step in one write now and then, paced to be done before the
    /// growth. So the growth finds its table's pages there instead of having the kernel zero
    /// them (and, in a virtual machine, the host back them) under the inserts that touch them
    /// first: on the machine measured, a population of 2^26 keys otherwise all but stopped
    /// inserting for seconds at its last growth (`BENCHMARKS.md`, "Tails while growing").
    ///
    /// What it costs: the same page faults, taken earlier, so the writes just before a growth
    /// run slower while the ones during the growth do not stop; one write in a step waits for
    /// it (0.2 ms on memory the kernel only zeroes, up to 5 ms when a virtual machine's host
    /// must back it). And memory held early: in proportion to the way the table has gone
    /// towards its growth, up to the next table's size (two to four times the current one's),
    /// which the growth would take anyway; a map that stops growing there keeps it until it
    /// grows, shrinks (`shrink_to_fit`), is cleared or dropped
    /// ([`Stats::prepared_bytes`](crate::Stats::prepared_bytes) says how much). A map filled
    /// no further than the capacity it was built with prepares nothing.
    ///
    /// On the dense layout ([`Layout::Dense`](crate::Layout::Dense)) only tables a growth made
    /// prepare, from 80% of their trigger's keys, done by 95%: without it, a population of
    /// 2^26 keys went 2.3 s (46 intervals of 50 ms) without completing an insert, at its
    /// last growths; with it, none, but the population ran 7-27% slower in paired runs
    /// (the benchmark log, `results/history/BENCHMARKS-log-2026-11.md`, "The dense layout, fifth
    /// part").
    pub fn grow_ahead(mut self, max_bytes: usize) -> Self {
        self.config.grow_ahead = max_bytes;
        self
    }

    /// A [`Map`](crate::Map)'s entries that each thread retires (replaced or removed) before
    /// its collector frees a batch of them (default: `seize`'s, 32 or the core count).
    ///
    /// Each batch costs one process-wide memory barrier (`membarrier`, an interrupt of every
    /// core that runs the process: several microseconds in a virtual machine), so a map that
    /// replaces or removes entries at a high rate (a cache evicting on every insert) spends
    /// less with larger batches, and holds up to this many retired entries per thread longer.
    /// `floe::Cache` uses 512. Ignored by a `FlatMap`, whose values are inline.
    pub fn reclaim_batch(mut self, entries: usize) -> Self {
        self.config.reclaim_batch = entries;
        self
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Builder<K, V, S> {
    /// Allocate the map.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for fewer than 2 bins or a zero `bins_per_link`,
    /// [`Error::CapacityOverflow`] for sizes that cannot be addressed,
    /// [`Error::AllocationFailed`] if the memory cannot be had,
    /// [`Error::UnsupportedBackend`] for a backend this CPU lacks,
    /// [`Error::DegenerateHasher`] for a hasher that sends every key to one bin.
    pub fn build(self) -> Result<FlatMap<K, V, S>, Error> {
        let raw = Driver::new(&self.config, &|word| self.hasher.hash_one(word))?;
        Ok(FlatMap {
            raw,
            hasher: self.hasher,
            marker: PhantomData,
        })
    }
}

/// What opening a persistent map found and repaired ([`Builder::open`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recovery {
    /// The map had been closed cleanly: nothing was swept (the tables were checked).
    pub clean: bool,
    /// Keys in the map.
    pub keys: usize,
    /// Slots an interrupted insert, delete or shadow insert held, freed (the operation in
    /// flight at the crash is undone, or was already complete and is kept), and free slots
    /// a power loss left holding an insert's unpublished write, cleared.
    pub freed: usize,
    /// Bin moves of an interrupted growth or shrink rebuilt.
    pub moves_rebuilt: usize,
    /// Keys found in a bin they do not hash to, and link words pointing outside the pool:
    /// signs of a damaged file, dropped.
    pub damaged: usize,
}

#[cfg(not(floe_loom))]
impl<K: InlineKey, V: Inline, S: crate::hash::PersistentHasher> Builder<K, V, S> {
    /// Persistence is the default layout's (the dense one has no files).
    fn refuse_dense(&self) -> Result<(), Error> {
        match self.config.layout {
            Layout::Bins => Ok(()),
            Layout::Dense => Err(Error::NotInLayout("persistence")),
        }
    }

    /// What a persistent map of these types records about itself.
    fn identity(&self) -> crate::raw::persist::store::Identity {
        crate::raw::persist::store::Identity {
            key: type_tag::<K>(),
            value: type_tag::<V>(),
            hasher: name_tag(S::NAME),
            seed: self.hasher.seed(),
        }
    }

    /// Create a persistent map in the directory `dir` (made if missing; refused if it holds a
    /// map already): its tables are files there, mapped shared, so every operation that
    /// returns survives a crash of the process, and [`FlatMap::checkpoint`] makes them
    /// survive a power loss too (see the crate docs, "Persistence"). Reopen it with
    /// [`Builder::open`] or [`FlatMap::open`].
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("floe-doc-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// use floe::FlatMap;
    /// let map = FlatMap::<u64, u64>::builder().capacity(1000).build_persistent(&dir).unwrap();
    /// map.insert(1, 10);
    /// map.close().unwrap();
    /// let map = FlatMap::<u64, u64>::open(&dir).unwrap();
    /// assert_eq!(map.get(&1), Some(10));
    /// # drop(map);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`build`](Self::build), and [`Error::Storage`] if the directory holds a map already
    /// ([`StorageErrorKind::Exists`](StorageErrorKind::Exists)), is locked by another process,
    /// or a file cannot be made.
    pub fn build_persistent(
        self,
        dir: impl AsRef<std::path::Path>,
    ) -> Result<FlatMap<K, V, S>, Error> {
        let dir = dir.as_ref();
        self.create_in(dir).map_err(|error| error.at(dir))
    }

    fn create_in(self, dir: &std::path::Path) -> Result<FlatMap<K, V, S>, Error> {
        self.refuse_dense()?;
        let raw = Driver::Bins(RawMap::create_persistent(
            &self.config,
            dir,
            self.identity(),
            &|word| self.hasher.hash_one(word),
        )?);
        Ok(FlatMap {
            raw,
            hasher: self.hasher,
            marker: PhantomData,
        })
    }

    /// Sweep a persistent map's tables on `threads` threads when [`open`](Self::open) recovers
    /// it (default 0: one per core the process may use). The sweep is split into chunks of
    /// bins that the threads take in turn, and gives the same map and the same [`Recovery`]
    /// on any number of threads (`BENCHMARKS.md`, "Persistent maps", has the rates measured
    /// per thread).
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("floe-doc-threads-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// use floe::FlatMap;
    /// FlatMap::<u64, u64>::builder().build_persistent(&dir).unwrap().close().unwrap();
    /// let (map, recovery) = FlatMap::<u64, u64>::builder()
    ///     .recovery_threads(1)
    ///     .open(&dir)
    ///     .unwrap();
    /// assert!(recovery.clean && map.is_empty());
    /// # drop(map);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn recovery_threads(mut self, threads: usize) -> Self {
        self.config.recovery_threads = threads;
        self
    }

    /// What a persistent map's operations make durable before they return (default
    /// [`Durability::Process`](crate::Durability::Process); [`Durability::Flush`](crate::Durability::Flush) only means more on a DAX or CXL
    /// mapping). Chosen at each [`build_persistent`](Self::build_persistent) and
    /// [`open`](Self::open), not stored in the files.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("floe-doc-flush-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// use floe::{Durability, FlatMap};
    /// # if cfg!(target_arch = "x86_64") {
    /// let map = FlatMap::<u64, u64>::builder()
    ///     .durability(Durability::Flush)
    ///     .build_persistent(&dir)
    ///     .unwrap();
    /// map.insert(1, 10); // its lines written back before it returned
    /// # drop(map);
    /// # }
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// ```
    pub fn durability(mut self, durability: crate::Durability) -> Self {
        self.config.durability = durability;
        self
    }

    /// Open the persistent map in `dir` with this builder's backend, huge-page, resize,
    /// recovery-thread and durability settings (sizes, options and the hasher's seed come from the map's
    /// files; the builder's hasher only names the type). If the map was not closed cleanly, its tables are swept
    /// once: the operation each thread had in flight at the crash is completed or undone, an
    /// interrupted growth or shrink is finished. [`Recovery`] says what was found.
    ///
    /// # Errors
    /// [`Error::Storage`]: no map there, locked by another process, made for other key, value
    /// or hasher types, another format version, or damaged files (a failed open changes
    /// nothing); [`Error::UnsupportedBackend`].
    pub fn open(
        self,
        dir: impl AsRef<std::path::Path>,
    ) -> Result<(FlatMap<K, V, S>, Recovery), Error> {
        let dir = dir.as_ref();
        self.open_in(dir).map_err(|error| error.at(dir))
    }

    fn open_in(self, dir: &std::path::Path) -> Result<(FlatMap<K, V, S>, Recovery), Error> {
        if cfg!(miri) {
            return Err(Error::storage(StorageErrorKind::Unsupported));
        }
        self.refuse_dense()?;
        let opening = RawMap::open_store(dir, self.identity())?;
        let hasher = S::from_seed(opening.seed());
        let clean = opening.was_closed_cleanly();
        let (raw, swept) = RawMap::open_persistent(
            &self.config,
            opening,
            &|word| hasher.hash_one(word),
            with_seeded::<S>,
        )?;
        let raw = Driver::Bins(raw);
        let recovery = Recovery {
            clean,
            keys: raw.len(),
            freed: swept.freed + swept.stale,
            moves_rebuilt: swept.rebuilt,
            damaged: swept.misplaced + swept.bad_links,
        };
        Ok((
            FlatMap {
                raw,
                hasher,
                marker: PhantomData,
            },
            recovery,
        ))
    }

    /// Open the persistent map in `dir` if there is one ([`open`](Self::open), whose
    /// [`Recovery`] comes back), else make a new one there
    /// ([`build_persistent`](Self::build_persistent); `None` in place of the recovery): one
    /// call for a program that starts the same way every time.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("floe-doc-ooc-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// use floe::FlatMap;
    /// let (map, recovery) = FlatMap::<u64, u64>::builder().open_or_create(&dir)?;
    /// assert!(recovery.is_none()); // made
    /// map.insert(1, 10);
    /// map.close()?;
    /// let (map, recovery) = FlatMap::<u64, u64>::builder().open_or_create(&dir)?;
    /// assert!(recovery.is_some()); // opened
    /// assert_eq!(map.get(&1), Some(10));
    /// # drop(map);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`open`](Self::open) when a map is there; as
    /// [`build_persistent`](Self::build_persistent) when none is. A directory that holds a
    /// `PersistentMap` (feature `serde`) is refused
    /// ([`StorageErrorKind::OtherKind`](StorageErrorKind::OtherKind)), and so is one that holds
    /// no map but other files ([`StorageErrorKind::NotEmpty`](StorageErrorKind::NotEmpty)):
    /// nothing is made beside them.
    ///
    /// A directory with the kind's own files but not its marker (table files whose marker was
    /// removed, or a creation a crash interrupted) is refused as damaged
    /// ([`StorageErrorKind::Corrupt`](StorageErrorKind::Corrupt)) and left as it is: a new
    /// map made there would drop the old one's data.
    #[allow(clippy::type_complexity)] // the map, and what the open found: read at a glance
    pub fn open_or_create(
        self,
        dir: impl AsRef<std::path::Path>,
    ) -> Result<(FlatMap<K, V, S>, Option<Recovery>), Error> {
        let dir = dir.as_ref();
        match crate::durable::map_kind(dir) {
            Some(crate::durable::FLAT_MAP) => {
                self.open(dir).map(|(map, recovery)| (map, Some(recovery)))
            }
            Some(other) => Err(Error::storage(StorageErrorKind::OtherKind(other)).at(dir)),
            None => {
                crate::durable::refuse_orphans(
                    dir,
                    crate::raw::persist::store::is_own_file,
                    "table files without their superblock: a damaged map, or a creation a crash interrupted (remove them to start anew)",
                )
                .map_err(|error| Error::storage(error).at(dir))?;
                self.build_persistent(dir).map(|map| (map, None))
            }
        }
    }
}

/// Run `body` with the hash function of an `S` seeded with `seed`: each recovery thread's own
/// hasher (`raw::WithRehash`), so that `S` need not be `Sync`.
#[cfg(not(floe_loom))]
fn with_seeded<S: crate::hash::PersistentHasher>(
    seed: u64,
    body: &mut dyn FnMut(crate::hash::Rehash<'_>),
) {
    let hasher = S::from_seed(seed);
    body(&|word| hasher.hash_one(word));
}

/// A tag for a type in a persistent map's superblock: its size and name.
#[cfg(not(floe_loom))]
fn type_tag<T>() -> u64 {
    name_tag(core::any::type_name::<T>()) ^ (core::mem::size_of::<T>() as u64).rotate_left(56)
}

/// FNV-1a of a name (stable across builds, unlike std's hashers).
#[cfg(not(floe_loom))]
fn name_tag(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(not(floe_loom))]
impl<K: InlineKey, V: Inline, S: crate::hash::PersistentHasher + Default> FlatMap<K, V, S> {
    /// Open the persistent map in `dir` with the default backend ([`Builder::open`], which
    /// also reports what recovery found).
    ///
    /// # Errors
    /// As [`Builder::open`].
    pub fn open(dir: impl AsRef<std::path::Path>) -> Result<Self, Error> {
        FlatMap::<K, V>::builder()
            .hasher(S::default())
            .open(dir)
            .map(|(map, _)| map)
    }
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
/// let map = FlatMap::<u64, u64>::with_capacity(1 << 16);
/// assert_eq!(map.insert(7, 70), None);
/// assert_eq!(map.insert(7, 71), Some(70));               // replaces, as std's insert
/// assert_eq!(map.insert_new(7, 72), Insert::Present(71)); // keeps what is there
/// assert_eq!(map.fetch_add(8, 1), None);                 // a counting insert
/// assert_eq!(map.fetch_add(8, 1), Some(1));
/// assert_eq!(map.get(&8), Some(2));
/// assert_eq!(map.remove(&7), Some(71));
/// assert_eq!(map.len(), 1);
/// ```
pub struct FlatMap<K, V, S = DefaultHashBuilder> {
    raw: Driver,
    hasher: S,
    marker: PhantomData<fn() -> (K, V)>,
}

/// An empty map with `S::default()` as its hasher (see [`FlatMap::new`]).
///
/// # Panics
/// As [`FlatMap::new`], and if `S::default()` sends every key to one bin
/// ([`Error::DegenerateHasher`]).
impl<K: InlineKey, V: Inline, S: BuildHasher + Default> Default for FlatMap<K, V, S> {
    #[track_caller]
    fn default() -> Self {
        FlatMap::<K, V>::builder()
            .hasher(S::default())
            .build()
            .or_raise()
    }
}

impl<K: InlineKey, V: Inline> FlatMap<K, V> {
    /// An empty map with the default hasher and the best backend, sized for the builder's
    /// default of 1024 keys; it grows on demand.
    ///
    /// # Panics
    /// If the operating system refuses the first table's memory (64 KiB), as std's collections
    /// do; [`try_with_capacity`](Self::try_with_capacity) returns the error instead.
    #[track_caller]
    pub fn new() -> Self {
        Self::builder().build().or_raise()
    }

    /// A map sized for `keys` keys, with the default hasher and the best backend.
    ///
    /// ```
    /// let map = floe::FlatMap::<u32, f64>::with_capacity(100);
    /// assert!(map.is_empty());
    /// ```
    ///
    /// # Panics
    /// If `keys` cannot be addressed or its table's memory cannot be had, as std's collections
    /// do; [`try_with_capacity`](Self::try_with_capacity) returns the error instead.
    #[track_caller]
    pub fn with_capacity(keys: usize) -> Self {
        Self::try_with_capacity(keys).or_raise()
    }

    /// A map sized for `keys` keys, or the reason it cannot be had.
    ///
    /// ```
    /// assert!(floe::FlatMap::<u64, u64>::try_with_capacity(usize::MAX).is_err());
    /// ```
    ///
    /// # Errors
    /// As [`Builder::build`].
    pub fn try_with_capacity(keys: usize) -> Result<Self, Error> {
        Self::builder().capacity(keys).build()
    }

    /// A [`Builder`] with the defaults.
    pub fn builder() -> Builder<K, V> {
        Builder::new()
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> FlatMap<K, V, S> {
    /// The key's hash and word.
    #[inline(always)]
    pub(crate) fn locate(&self, key: K) -> (u64, u64) {
        let word = key.to_word();
        (self.hasher.hash_one(word), word)
    }

    /// Make every operation that returned before this call durable against a power loss or
    /// a kernel crash (a persistent map: its table files are synced; a map in memory: nothing
    /// to do). A process crash needs no checkpoint: a persistent map keeps every operation
    /// that returned. See the crate docs, "Persistence".
    ///
    /// # Errors
    /// [`Error::Storage`] if a file could not be synced, or if a growth's sync of the keys it
    /// moved failed since the last checkpoint (the growth went on; the disk may lack them).
    pub fn checkpoint(&self) -> Result<(), Error> {
        #[cfg(not(floe_loom))]
        return self.raw.checkpoint();
        #[cfg(floe_loom)]
        Ok(())
    }

    /// Close the map: a persistent map syncs its table and records a clean close, so the next
    /// open needs no sweep (dropping the map does the same, ignoring errors). For a map in
    /// memory, the same as dropping it.
    ///
    /// # Errors
    /// [`Error::Storage`] if the files could not be synced; the map is closed anyway, and the
    /// next open recovers it as after a crash.
    pub fn close(mut self) -> Result<(), Error> {
        #[cfg(not(floe_loom))]
        return self.raw.close();
        #[cfg(floe_loom)]
        {
            let _ = &mut self;
            Ok(())
        }
    }

    /// Whether the map lives in files ([`Builder::build_persistent`]).
    pub fn is_persistent(&self) -> bool {
        #[cfg(not(floe_loom))]
        return self.raw.is_persistent();
        #[cfg(floe_loom)]
        false
    }

    /// The value of `key`, if present.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, char>::with_capacity(10);
    /// map.insert(1, 'a');
    /// assert_eq!(map.get(&1), Some('a'));
    /// assert_eq!(map.get(&2), None);
    /// ```
    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        let (hash, word) = self.locate(*key);
        // Not through `get_at`: the hot path is one frame less deep (`RawMap::get`).
        self.raw.get(hash, word, &self.rehash()).map(V::from_word)
    }

    /// Whether `key` is present.
    ///
    /// ```
    /// let map = floe::FlatMap::<i32, ()>::with_capacity(10);
    /// map.insert(-3, ());
    /// assert!(map.contains_key(&-3));
    /// ```
    #[inline]
    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Insert `key -> value`, replacing the value of a present `key`, as std's `HashMap::insert`
    /// does. Returns the value replaced, `None` if the key was absent.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// assert_eq!(map.insert(1, 10), None);
    /// assert_eq!(map.insert(1, 11), Some(10));
    /// assert_eq!(map.get(&1), Some(11));
    /// ```
    ///
    /// To keep a present value instead, see [`insert_new`](Self::insert_new).
    ///
    /// # Panics
    /// Where std's maps would (the larger table's memory cannot be had), and where they would
    /// not: when a map capped with [`Builder::max_bins`] is full, or when the hasher puts more
    /// than a bin's worth of keys on nearly the same hash. [`try_insert`](Self::try_insert)
    /// returns these as errors; use it on a capped map.
    #[inline]
    #[track_caller]
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        self.try_insert(key, value).or_raise()
    }

    /// [`insert`](Self::insert), answering what it panics on with an error.
    ///
    /// ```
    /// use floe::Error;
    /// let capped = floe::FlatMap::<u64, u64>::builder().bins(2).max_bins(2).build()?;
    /// let mut refused = 0;
    /// for key in 0..100 {
    ///     match capped.try_insert(key, key) {
    ///         Ok(None) => {}
    ///         Err(Error::Full) => refused += 1,
    ///         other => panic!("{other:?}"),
    ///     }
    /// }
    /// assert_eq!(capped.len() + refused, 100);
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// When the key is absent: [`Error::Full`] if the key's bin has no room and the map may
    /// not grow ([`Builder::max_bins`]); [`Error::HashCollisions`] if the bin is full of keys
    /// whose hashes agree with this key's so closely that no larger table would separate them
    /// (the map does not grow for them); [`Error::AllocationFailed`] or
    /// [`Error::CapacityOverflow`] if the larger table cannot be had. The map is unchanged.
    #[inline]
    pub fn try_insert(&self, key: K, value: V) -> Result<Option<V>, Error> {
        let (hash, word) = self.locate(key);
        self.upsert_at(hash, word, value)
    }

    /// Insert `key -> value` only if `key` is absent; otherwise leave the map unchanged and
    /// return the present value (DLHT's insert; `HashMap::entry(key).or_insert(value)` in
    /// std's terms). A cache filled by several threads keeps the first value this way.
    ///
    /// ```
    /// use floe::Insert;
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// assert!(map.insert_new(5, 1).is_inserted());
    /// assert_eq!(map.insert_new(5, 2), Insert::Present(1));
    /// assert_eq!(map.get(&5), Some(1));
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert); [`try_insert_new`](Self::try_insert_new) returns the
    /// errors instead.
    #[inline]
    #[track_caller]
    pub fn insert_new(&self, key: K, value: V) -> Insert<V> {
        self.try_insert_new(key, value).or_raise()
    }

    /// [`insert_new`](Self::insert_new), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert). The map is unchanged.
    #[inline]
    pub fn try_insert_new(&self, key: K, value: V) -> Result<Insert<V>, Error> {
        let (hash, word) = self.locate(key);
        self.insert_at(hash, word, value)
    }

    /// [`insert`](Self::insert)'s former name.
    #[deprecated(
        since = "0.2.0",
        note = "`insert` now replaces a present value, as std's does"
    )]
    #[inline]
    #[track_caller]
    pub fn upsert(&self, key: K, value: V) -> Option<V> {
        self.insert(key, value)
    }

    /// [`try_insert`](Self::try_insert)'s former name.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert).
    #[deprecated(
        since = "0.2.0",
        note = "`try_insert` now replaces a present value, as std's does"
    )]
    #[inline]
    pub fn try_upsert(&self, key: K, value: V) -> Result<Option<V>, Error> {
        self.try_insert(key, value)
    }

    /// Overwrite the value of `key` only if it is present. Returns the previous value, or
    /// `None` (and writes nothing) if the key is absent.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// assert_eq!(map.put(1, 5), None);
    /// assert!(!map.contains_key(&1));
    /// map.insert(1, 5);
    /// assert_eq!(map.put(1, 6), Some(5));
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
    /// let map = floe::FlatMap::<u64, u32>::with_capacity(10);
    /// map.insert(1, 20);
    /// assert_eq!(map.update(&1, |v| v * 2), Some(20));
    /// assert_eq!(map.get(&1), Some(40));
    /// assert_eq!(map.update(&2, |v| v * 2), None);
    /// ```
    #[inline]
    pub fn update(&self, key: &K, mut f: impl FnMut(V) -> V) -> Option<V> {
        let (hash, word) = self.locate(*key);
        self.raw
            .update(
                hash,
                word,
                |old| f(V::from_word(old)).to_word(),
                &self.rehash(),
            )
            .map(|(old, _)| V::from_word(old))
    }

    /// Set the value of `key` to `new` if it is `current` (compared as words, so for floats
    /// bit for bit). Returns the previous value (`current`) on success.
    ///
    /// ```
    /// use floe::CompareExchangeError;
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// assert_eq!(map.compare_exchange(&1, 0, 1), Err(CompareExchangeError::Absent));
    /// map.insert(1, 0);
    /// assert_eq!(map.compare_exchange(&1, 0, 1), Ok(0));
    /// assert_eq!(map.compare_exchange(&1, 0, 2), Err(CompareExchangeError::Mismatch(1)));
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
        match self.raw.compare_exchange(
            hash,
            word,
            current.to_word(),
            new.to_word(),
            &self.rehash(),
        ) {
            Ok(old) => Ok(V::from_word(old)),
            Err(Mismatch::Absent) => Err(CompareExchangeError::Absent),
            Err(Mismatch::Value(v)) => Err(CompareExchangeError::Mismatch(V::from_word(v))),
        }
    }

    /// Remove `key`, returning its value. The slot is free for another insert at once.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// map.insert(1, 2);
    /// assert_eq!(map.remove(&1), Some(2));
    /// assert_eq!(map.remove(&1), None);
    /// ```
    #[inline]
    pub fn remove(&self, key: &K) -> Option<V> {
        let (hash, word) = self.locate(*key);
        self.remove_at(hash, word)
    }

    /// Insert `key -> value` as a *shadow* (DLHT's shadow insert, for transactions): the key
    /// is taken (every insert of it, shadow or not, is refused: [`Insert::Shadowed`],
    /// [`Taken::Shadowed`]) but hidden from everything else (gets, puts, removes, iteration,
    /// `len`, `clear`) until the returned [`Shadow`]'s [`commit`](Shadow::commit) makes it
    /// visible at once, or its [`abort`](Shadow::abort) (or drop) removes it. So it locks a
    /// key that does not exist yet: a transaction can claim a new row before deciding to
    /// create it. `insert` and `fetch_add` of a shadowed key wait for the commit or abort (it
    /// is the key's lock; so the thread holding the shadow must not insert that key itself:
    /// it would wait for itself). Growth and shrinking carry shadows across.
    ///
    /// The value stays with the handle until the commit (the slot holds only the key, in a
    /// form no operation on the key ever expects), so nothing can change or remove a shadow
    /// but its handle: not a put or remove that read the key's previous incarnation and
    /// stalled, not a second resolution.
    ///
    /// ```
    /// use floe::{Insert, Taken};
    /// let rows = floe::FlatMap::<u64, u64>::new();
    /// let row = rows.insert_shadow(7, 70).unwrap();
    /// assert_eq!(rows.get(&7), None);                      // hidden...
    /// assert_eq!(rows.insert_new(7, 1), Insert::Shadowed);  // ...but taken
    /// assert!(matches!(rows.insert_shadow(7, 2), Err(Taken::Shadowed)));
    /// row.commit();                                         // now visible
    /// assert_eq!(rows.get(&7), Some(70));
    /// assert!(matches!(rows.insert_shadow(7, 3), Err(Taken::Present(70))));
    ///
    /// let row = rows.insert_shadow(8, 80).unwrap();
    /// drop(row);                                            // aborted: never visible
    /// assert_eq!(rows.insert_new(8, 81), Insert::Inserted);
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert); [`try_insert_shadow`](Self::try_insert_shadow) returns
    /// the error instead.
    #[track_caller]
    pub fn insert_shadow(&self, key: K, value: V) -> Result<Shadow<'_, K, V, S>, Taken<V>> {
        self.try_insert_shadow(key, value).or_raise()
    }

    /// [`insert_shadow`](Self::insert_shadow), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert): a shadow takes a slot as its key would, on either
    /// layout ([`Layout::Dense`] keeps it in a slot under a word no key of the line can be).
    // The plain form's answer inside the `try_` forms' `Result`, as everywhere in the crate.
    #[allow(clippy::type_complexity)]
    pub fn try_insert_shadow(
        &self,
        key: K,
        value: V,
    ) -> Result<Result<Shadow<'_, K, V, S>, Taken<V>>, Error> {
        let (hash, word) = self.locate(key);
        Ok(match self.raw.insert_shadow(hash, word, &self.rehash())? {
            Inserted::New => Ok(Shadow {
                map: self,
                key,
                value,
                located: (hash, word),
                open: true,
            }),
            Inserted::Exists(present) => Err(Taken::Present(V::from_word(present))),
            Inserted::Shadowed => Err(Taken::Shadowed),
        })
    }

    /// The pairs present at one instant (DLHT §3.4.4's strong snapshot), where
    /// [`iter`](Self::iter) and [`for_each`](Self::for_each) are only weakly consistent.
    /// Writers are paused for the walk (an insert, put or remove that starts meanwhile waits
    /// for it; the ones in progress when it starts are waited for); gets go on. So it costs
    /// every writer a pause as long as a walk of the table: take snapshots of large maps
    /// rarely. A batch that writes is held back as a whole. Not held back: writes made from
    /// inside another operation of the same thread (an `update` closure, a `for_each`
    /// visitor, any map's), which cannot wait there; such a write that runs during the walk
    /// may be missing from the snapshot while later ones are in it.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::new();
    /// map.insert(1, 10);
    /// map.insert(2, 20);
    /// let mut pairs = map.snapshot().unwrap();
    /// pairs.sort();
    /// assert_eq!(pairs, [(1, 10), (2, 20)]);
    /// ```
    ///
    /// # Errors
    /// [`Error::InsideOperation`] if called from inside an operation of a floe map on this
    /// thread (an `update` closure, a `for_each` visitor): the snapshot would wait for it.
    #[cfg(not(floe_loom))]
    pub fn snapshot(&self) -> Result<Vec<(K, V)>, Error> {
        let mut pairs = Vec::with_capacity(self.len());
        self.raw.snapshot(&self.rehash(), |key, value| {
            pairs.push((K::from_word(key), V::from_word(value)));
        })?;
        Ok(pairs)
    }

    /// Remove `key` only if `accept` approves its present value, atomically (the value
    /// `accept` saw is the value removed). Returns that value, or `None` if the key is absent
    /// or `accept` said no. `accept` may run more than once if the value changes meanwhile.
    ///
    /// ```
    /// let locks = floe::FlatMap::<u64, u32>::with_capacity(10);
    /// locks.insert(7, 3); // key 7 held by owner 3
    /// assert_eq!(locks.remove_if(&7, |owner| owner == 4), None); // not yours
    /// assert_eq!(locks.remove_if(&7, |owner| owner == 3), Some(3));
    /// ```
    pub fn remove_if(&self, key: &K, mut accept: impl FnMut(V) -> bool) -> Option<V> {
        let (hash, word) = self.locate(*key);
        self.raw
            .remove_if(
                hash,
                word,
                |value| accept(V::from_word(value)),
                &self.rehash(),
            )
            .ok()
            .map(V::from_word)
    }

    /// Start loading the line of `key`'s bin into the L2 cache, without waiting for it. For
    /// callers that overlap memory latency with their own work (coroutines, interleaved
    /// lookups): prefetch several keys, do something else, then operate on them. Into L2, as
    /// the batches' ring does: on the hosts measured, far more of those stay in flight than of
    /// prefetches into L1 (`batch` module, BENCHMARKS.md "DRAM speed").
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// map.prefetch(&3);
    /// assert_eq!(map.get(&3), None);
    /// ```
    #[inline]
    pub fn prefetch(&self, key: &K) {
        let (hash, _) = self.locate(*key);
        self.raw.prefetch(hash);
    }

    /// Remove every key. Safe to call concurrently with other operations: each key is removed
    /// once, at one instant during the call, as by [`remove`](Self::remove), so a key present
    /// throughout is gone when it returns; the table is not emptied as one atomic step (a key
    /// inserted into its bin after the clear has passed that bin stays, also when a growth
    /// moves it meanwhile). If the map is growing, the growth is finished first.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// map.insert(1, 2);
    /// map.clear();
    /// assert!(map.is_empty());
    /// ```
    pub fn clear(&self) {
        self.raw.clear(&self.rehash(), &|_, _| false, |_| {});
    }

    /// Number of keys. Exact when no insert or remove is running at the same time; a sum of
    /// per-thread counters otherwise.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// map.insert(1, 1);
    /// assert_eq!(map.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys the map holds before its table grows, as std's `HashMap::capacity`: at least the
    /// `n` of [`with_capacity`](Self::with_capacity) and `len() + additional` after
    /// [`reserve`](Self::reserve). For a hasher that spreads the keys (the default, or any
    /// good one) this is a bound the table keeps with high probability, not a count of slots:
    /// the default layout grows when a bin or its link pool overflows (a table sized for
    /// this many fills to about 1.15 times it first), the dense layout at 82% of its slots.
    /// A hasher that crowds keys into few bins fills them sooner. The slots themselves are in
    /// [`stats`](Self::stats).
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(1000);
    /// assert!(map.capacity() >= 1000);
    /// let bins = map.stats().bins;
    /// for k in 0..map.capacity() as u64 {
    ///     map.insert(k, k);
    /// }
    /// assert_eq!(map.stats().bins, bins, "filled to its capacity without growing");
    /// ```
    pub fn capacity(&self) -> usize {
        self.raw.capacity()
    }

    /// The share of the table's slots holding a key: `len` over [`Stats::slots`] (the
    /// space efficiency of the table alone).
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::builder().bins(10).link_buckets(0).build()?;
    /// map.insert(1, 1);
    /// assert!((map.load_factor() - 1.0 / 30.0).abs() < 1e-9);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn load_factor(&self) -> f64 {
        self.len() as f64 / self.stats().slots.max(1) as f64
    }

    /// The backend in use (never `Auto`).
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// assert_ne!(map.backend(), floe::Backend::Auto);
    /// ```
    pub fn backend(&self) -> Backend {
        self.raw.backend()
    }

    /// The table layout the map was built with ([`Builder::layout`]).
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// assert_eq!(map.layout(), floe::Layout::Bins);
    /// ```
    pub fn layout(&self) -> Layout {
        self.raw.layout()
    }

    /// The hasher.
    pub fn hasher(&self) -> &S {
        &self.hasher
    }

    /// Statistics about the table's memory and geometry.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(1000);
    /// let stats = map.stats();
    /// assert!(stats.bins * 64 <= stats.allocated_bytes);
    /// ```
    pub fn stats(&self) -> Stats {
        self.raw.stats()
    }

    /// Call `visit` for every key-value pair. Every pair visited was present at some point
    /// during the call, and no key is visited twice; a key present throughout is visited
    /// once, and pairs inserted or removed concurrently may or may not be visited.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// map.insert(1, 10);
    /// map.insert(2, 20);
    /// let mut sum = 0;
    /// map.for_each(|_, v| sum += v);
    /// assert_eq!(sum, 30);
    /// ```
    ///
    /// If the map is growing, the growth is finished first (this call does the remaining
    /// work); a growth or shrink that starts during the walk is followed key by key (no pair
    /// is missed or met twice because it moved).
    pub fn for_each(&self, mut visit: impl FnMut(K, V)) {
        self.raw.for_each(&self.rehash(), |k, v| {
            visit(K::from_word(k), V::from_word(v));
        });
    }

    /// An iterator over the `(key, value)` pairs, weakly consistent: a key present for the
    /// whole iteration is yielded exactly once, also when the map grows or shrinks meanwhile;
    /// a key inserted or removed during it may or may not be. It never blocks writers and
    /// never finishes a growth: it reads the table a few dozen bins at a time, so it holds no
    /// more than that many pairs and delays the freeing of a replaced table only for a step.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// for k in 0..5 {
    ///     map.insert(k, k * k);
    /// }
    /// let mut pairs: Vec<_> = map.iter().collect();
    /// pairs.sort();
    /// assert_eq!(pairs, [(0, 0), (1, 1), (2, 4), (3, 9), (4, 16)]);
    /// assert_eq!(map.keys().count(), 5);
    /// ```
    pub fn iter(&self) -> Iter<'_, K, V, S> {
        Iter {
            map: self,
            walk: Walk::new(),
        }
    }

    /// The keys, as [`iter`](Self::iter) yields them.
    pub fn keys(&self) -> impl Iterator<Item = K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// One stretch of [`iter`](Self::iter), for a walk taken in pieces (each piece with
    /// other work between, as a server's walk over its index that answers as the client
    /// reads): visit the pairs of the run of bins that starts at hash position `from` (0 for
    /// the first), and return the position the next run starts at, or `None` after the last.
    /// Calls that follow the positions from 0 visit every key present for the whole walk
    /// exactly once, across growths and shrinks between them too (the positions are hashes,
    /// not slots); a key inserted or removed meanwhile may or may not be visited.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// for k in 0..1000 {
    ///     map.insert(k, k);
    /// }
    /// let (mut sum, mut from) = (0, Some(0));
    /// while let Some(at) = from {
    ///     from = map.iter_run(at, |_, v| sum += v);
    /// }
    /// assert_eq!(sum, 999 * 1000 / 2);
    /// ```
    pub fn iter_run(&self, from: u64, mut visit: impl FnMut(K, V)) -> Option<u64> {
        self.raw.walk_run(from, &self.rehash(), |k, v| {
            visit(K::from_word(k), V::from_word(v));
        })
    }

    /// The values, as [`iter`](Self::iter) yields them.
    pub fn values(&self) -> impl Iterator<Item = V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// Remove every pair for which `keep` answers `false`, while other threads go on using
    /// the map. Walks as [`iter`](Self::iter) does (every key present for the whole call is
    /// offered once, across growth too) and removes a rejected pair only if its value is
    /// still the one `keep` saw ([`remove_if`](Self::remove_if)): a value written meanwhile is
    /// kept, to be judged by a later `retain`.
    ///
    /// ```
    /// let map: floe::FlatMap<u32, u32> = (0..10).map(|k| (k, k * k)).collect();
    /// map.retain(|_, square| square % 2 == 0);
    /// assert_eq!(map.len(), 5);
    /// assert_eq!(map.get(&3), None);
    /// assert_eq!(map.get(&4), Some(16));
    /// ```
    pub fn retain(&self, mut keep: impl FnMut(K, V) -> bool) {
        for (key, value) in self.iter() {
            if !keep(key, value) {
                let seen = value.to_word();
                self.remove_if(&key, |now| now.to_word() == seen);
            }
        }
    }

    /// Take every pair out, leaving the map empty (with its table; [`shrink_to_fit`] gives
    /// memory back). `&mut self`: for a drain while other threads use the map, walk
    /// [`iter`](Self::iter) and [`remove`](Self::remove) each key (each removal returns the
    /// value it took).
    ///
    /// [`shrink_to_fit`]: Self::shrink_to_fit
    ///
    /// ```
    /// let mut map: floe::FlatMap<u8, u8> = [(1, 10), (2, 20)].into_iter().collect();
    /// let mut pairs: Vec<_> = map.drain().collect();
    /// pairs.sort();
    /// assert_eq!(pairs, [(1, 10), (2, 20)]);
    /// assert!(map.is_empty());
    /// ```
    pub fn drain(&mut self) -> impl ExactSizeIterator<Item = (K, V)> {
        let pairs: Vec<(K, V)> = self.iter().collect();
        self.clear();
        pairs.into_iter()
    }

    /// Make room for `additional` more keys than the map holds now, growing it (and doing the
    /// whole move in this call) if the current table is sized for fewer. This call is the
    /// exception to the bound a growth otherwise keeps on every operation's share of its work
    /// (a chunk of bins now and then): it was asked for the whole move. Operations of other
    /// threads meanwhile keep that bound.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(16);
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
        self.raw.reserve(additional, &self.rehash())
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
    /// everything else does not. Those inserts are the one exception to the bound on how long
    /// an operation waits for a change of table (`reserve` the other, for its own caller). A growth already under way is finished first; a shrink
    /// never races a growth.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(1 << 16);
    /// for k in 0..1000 {
    ///     map.insert(k, k);
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
        self.raw.shrink_to_fit(&self.rehash())
    }

    /// Check the engine's invariants on a quiescent map, panicking on a violation, and return
    /// the number of live keys. Finishes a growth in progress first. For tests: it walks the
    /// whole table.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> usize {
        self.raw.check_invariants(&self.rehash())
    }
}

impl<K: InlineKey, V: Counter, S: BuildHasher> FlatMap<K, V, S> {
    /// Add `delta` to the value of `key`, inserting `delta` if the key is absent (DRAMHiT's
    /// counting upsert, e.g. for k-mer counting). Wraps on overflow. Returns the previous
    /// value, `None` if the key was inserted.
    ///
    /// ```
    /// let counts = floe::FlatMap::<u64, u32>::with_capacity(10);
    /// for kmer in [3, 5, 3, 3] {
    ///     counts.fetch_add(kmer, 1);
    /// }
    /// assert_eq!(counts.get(&3), Some(3));
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert), when the key is absent;
    /// [`try_fetch_add`](Self::try_fetch_add) returns the error instead.
    #[inline]
    #[track_caller]
    pub fn fetch_add(&self, key: K, delta: V) -> Option<V> {
        self.try_fetch_add(key, delta).or_raise()
    }

    /// [`fetch_add`](Self::fetch_add), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert), when the key is absent: [`Error::Full`] at
    /// [`Builder::max_bins`], or the larger table cannot be had. The map is unchanged.
    #[inline]
    pub fn try_fetch_add(&self, key: K, delta: V) -> Result<Option<V>, Error> {
        let (hash, word) = self.locate(key);
        self.fetch_add_at(hash, word, delta, V::add)
    }
}
/// The operations on an already located key (`locate`), shared by the single-key methods,
/// batches and the pipeline.
impl<K: InlineKey, V: Inline, S: BuildHasher> FlatMap<K, V, S> {
    /// The hasher as the driver takes it: for the keys a growth moves.
    #[inline(always)]
    pub(crate) fn rehash(&self) -> impl Fn(u64) -> u64 + '_ {
        |word| self.hasher.hash_one(word)
    }

    /// The driver (for batches and the pipeline).
    #[inline(always)]
    pub(crate) fn raw(&self) -> &Driver {
        &self.raw
    }

    /// Single-thread write (`LocalMap`; `MODE` as `RawTable::write_local`): `&mut self`, so
    /// the driver's plain-store path. The value present before, if any.
    #[inline(always)]
    pub(crate) fn write_owned<const MODE: u8>(
        &mut self,
        key: K,
        value: V,
    ) -> Result<Option<V>, Error> {
        let (hash, word) = self.locate(key);
        let hasher = &self.hasher;
        let before = self
            .raw
            .write_local::<MODE>(hash, word, value.to_word(), &|w| hasher.hash_one(w))?;
        Ok(before.map(V::from_word))
    }

    /// Single-thread remove (`LocalMap`).
    #[inline(always)]
    pub(crate) fn remove_owned(&mut self, key: &K) -> Option<V> {
        let (hash, word) = self.locate(*key);
        let hasher = &self.hasher;
        self.raw
            .remove_local(hash, word, &|w| hasher.hash_one(w))
            .map(V::from_word)
    }

    /// Prepare the map for single-thread use (see `LocalMap::from`): the shadows aborted.
    pub(crate) fn settle_owned(&mut self) -> usize {
        let hasher = &self.hasher;
        self.raw.settle_local(&|w| hasher.hash_one(w))
    }

    #[inline(always)]
    pub(crate) fn get_at(&self, hash: u64, word: u64) -> Option<V> {
        self.raw.get(hash, word, &self.rehash()).map(V::from_word)
    }

    /// Gets of requests `0..n` through a lookahead ring `far` deep (`raw::ring`).
    #[inline(always)]
    pub(crate) fn get_batch_at(
        &self,
        n: usize,
        far: usize,
        locate: impl Locate,
        answer: impl FnMut(usize, Option<u64>),
    ) {
        self.raw.get_batch(n, far, locate, answer, &self.rehash());
    }

    #[inline(always)]
    pub(crate) fn insert_at(&self, hash: u64, word: u64, value: V) -> Result<Insert<V>, Error> {
        match self
            .raw
            .insert(hash, word, value.to_word(), &self.rehash())?
        {
            Inserted::New => Ok(Insert::Inserted),
            Inserted::Exists(v) => Ok(Insert::Present(V::from_word(v))),
            Inserted::Shadowed => Ok(Insert::Shadowed),
        }
    }

    #[inline(always)]
    pub(crate) fn upsert_at(&self, hash: u64, word: u64, value: V) -> Result<Option<V>, Error> {
        let new = value.to_word();
        self.raw
            .upsert_with(hash, word, new, |_| new, &self.rehash())
            .map(|old| old.map(V::from_word))
    }

    #[inline(always)]
    pub(crate) fn put_at(&self, hash: u64, word: u64, value: V) -> Option<V> {
        let new = value.to_word();
        self.raw
            .update(hash, word, |_| new, &self.rehash())
            .map(|(old, _)| V::from_word(old))
    }

    #[inline(always)]
    pub(crate) fn remove_at(&self, hash: u64, word: u64) -> Option<V> {
        self.raw
            .remove(hash, word, &self.rehash())
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
        self.raw
            .upsert_with(
                hash,
                word,
                delta.to_word(),
                |old| add(V::from_word(old), delta).to_word(),
                &self.rehash(),
            )
            .map(|old| old.map(V::from_word))
    }
}

/// The iterator of [`FlatMap::iter`].
pub struct Iter<'m, K, V, S> {
    map: &'m FlatMap<K, V, S>,
    walk: Walk<K, V>,
}

/// Where a walk over a map's bins stands: the pairs read from the last run of bins, and where
/// the next run starts.
struct Walk<K, V> {
    /// The first hash of the next run of bins to read; `None` once the last was read.
    next: Option<u64>,
    buffer: std::vec::IntoIter<(K, V)>,
}

impl<K: InlineKey, V: Inline> Walk<K, V> {
    fn new() -> Self {
        Self {
            next: Some(0),
            buffer: Vec::new().into_iter(),
        }
    }

    fn next_pair<S: BuildHasher>(&mut self, map: &FlatMap<K, V, S>) -> Option<(K, V)> {
        loop {
            if let Some(pair) = self.buffer.next() {
                return Some(pair);
            }
            let mut pairs = Vec::new();
            self.next = map.iter_run(self.next?, |k, v| pairs.push((k, v)));
            self.buffer = pairs.into_iter();
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Iterator for Iter<'_, K, V, S> {
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        self.walk.next_pair(self.map)
    }
}

impl<'m, K: InlineKey, V: Inline, S: BuildHasher> IntoIterator for &'m FlatMap<K, V, S> {
    type Item = (K, V);
    type IntoIter = Iter<'m, K, V, S>;

    fn into_iter(self) -> Iter<'m, K, V, S> {
        self.iter()
    }
}

/// Maps at rest are equal when they hold the same keys with equal values (as std's maps);
/// while other threads write to either, the answer is one of a weakly consistent walk.
/// The owning iterator of a [`FlatMap`] (`map.into_iter()`): the pairs, read a run of bins at a
/// time as [`FlatMap::iter`] reads them.
pub struct IntoIter<K, V, S> {
    map: FlatMap<K, V, S>,
    walk: Walk<K, V>,
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Iterator for IntoIter<K, V, S> {
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        self.walk.next_pair(&self.map)
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> IntoIterator for FlatMap<K, V, S> {
    type Item = (K, V);
    type IntoIter = IntoIter<K, V, S>;

    fn into_iter(self) -> IntoIter<K, V, S> {
        IntoIter {
            map: self,
            walk: Walk::new(),
        }
    }
}

impl<K: InlineKey, V: Inline + PartialEq, S: BuildHasher> PartialEq for FlatMap<K, V, S> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(&k) == Some(v))
    }
}

impl<K: InlineKey, V: Inline + Eq, S: BuildHasher> Eq for FlatMap<K, V, S> {}

impl From<Full> for Error {
    fn from(_: Full) -> Self {
        Error::Full
    }
}
