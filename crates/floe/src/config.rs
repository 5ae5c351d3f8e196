//! The map's options and reports, below everything else: the backend and resize mode a map is
//! built with, the sizes the engine derives from them, and the statistics it reports. Plain
//! data, no behaviour beyond the sizing rules.

/// How a map moves its keys when it grows (see `src/raw/bins/migrate.rs`).
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

/// How a map's table lays out its keys ([`Builder::layout`](crate::Builder::layout)).
///
/// Both layouts offer the same map: lock-free gets, every write with its slot freed at once,
/// batches and the pipeline, non-blocking growth and shrinking, SIMD matching. They differ in
/// what a table spends its memory on (`BENCHMARKS.md`, "The dense layout"):
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Layout {
    /// DLHT's bins: a 64-byte line per bin with a header word, a link word and three slots,
    /// and link buckets chained to full bins. A key lives in its bin, found by one line read
    /// (a second for keys in link buckets); a table grows when 41-44% of its bytes hold keys
    /// and values. Every feature, `FlatMap`'s shadow inserts and persistence among them. The
    /// default.
    #[default]
    Bins,
    /// Headerless 64-byte lines of four slots; a key lives in its home line or one
    /// alternative line; writers' locks in a byte per line that gets read only while the
    /// table migrates. A table grows when about 80% of its bytes hold keys and values, at
    /// 1.17 lines read per hit and 1.6 per miss. Sized by [`capacity`](crate::Builder::capacity)
    /// and [`max_bins`](crate::Builder::max_bins) (a line counts as a bin); `bins`,
    /// `link_buckets` and `bins_per_link` are the default layout's; `grow_ahead` works on
    /// both (a dense table a growth made prepares from 80% of its trigger). For
    /// `FlatMap` and `Map` alike, shadow inserts included (a shadow takes a slot as its key
    /// would, so a full table refuses one with [`Error::Full`](crate::Error::Full)). Not
    /// offered here ([`Error::NotInLayout`](crate::Error::NotInLayout)): `FlatMap`'s
    /// persistence (`PersistentMap`, journaled, works on both).
    /// An iterator reads every pair when it starts (a dense table does not keep keys in hash
    /// order, so a walk cannot be resumed across a growth); a walk remembers the keys it met
    /// whose other line is still ahead (up to about half the keys, one word each); `clear`
    /// and `retain` hold the writers for their walk, as a strong snapshot does; and an insert
    /// that needs keys displaced while a walk runs goes to the table's small stash (or grows
    /// the table once that is full). The few keys that fit in neither of their lines live in
    /// that stash (up to 64 per table), read by gets without a lock.
    Dense,
}

/// What a persistent map's operations make durable before they return
/// ([`Builder::durability`](crate::Builder::durability); the crate docs' "Persistence" has the
/// promises).
///
/// The two differ in what they take to be volatile. A map's tables are shared mappings of its
/// files; every store an operation makes is in memory the file maps the instant it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// A process crash (panic, abort, SIGKILL) loses no operation that returned; a power loss
    /// or kernel crash keeps the last [`checkpoint`](crate::FlatMap::checkpoint) and possibly
    /// later operations. Costs nothing per operation. The right level for files in the page
    /// cache (any disk file system, tmpfs), where the page cache is volatile anyway. The
    /// default.
    #[default]
    Process,
    /// As `Process`, and every operation (reads too) writes the cache lines of its bin back
    /// to memory (`clwb`, else `clflushopt`, else `clflush`) and fences before it returns, in
    /// the order SEPH §3.3 argues (`src/raw/persist/writeback.rs`), and a growth writes each copied
    /// key back before it retires the old slot. *Only meaningful on a DAX or CXL mapping*
    /// (persistent memory), where the CPU caches are the only volatile layer: there a power
    /// loss keeps every operation that returned, without checkpoints. On an ordinary file
    /// the page cache below is as volatile as the caches, so this level costs the write-backs
    /// (`BENCHMARKS.md` measures them on tmpfs) and keeps nothing more than `Process`. x86-64
    /// only: elsewhere building or opening a map with it is
    /// [`StorageErrorKind::Unsupported`](crate::StorageErrorKind::Unsupported).
    Flush,
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
/// on tables larger than the caches all three wait on the same DRAM line. Which one is
/// fastest depends on the CPU, not only on its feature list, so `Auto` measures: the first
/// `Auto` map of a process times gets with every backend the CPU has on a small table (about
/// a millisecond) and every `Auto` map then uses the fastest ([`Backend::resolve`] tells
/// which; its methods live with the dispatch code, `src/raw/dispatch.rs`). `BENCHMARKS.md` has the measured differences per CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// The backend measured fastest on this CPU (see above).
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

/// Keys per bin the sizing from a capacity aims at: 1.75 keys in three primary slots (DLHT
/// sizes at ~1.5). With one link bucket per eight bins, about 10% of bins overflow their
/// primary bucket at this load (Poisson tail), within the 12.5% the pool covers.
pub(crate) const TARGET_KEYS_PER_BIN_X4: usize = 7;

/// Default number of bins per link bucket (DLHT §3.1: 8 times fewer link buckets than bins).
pub(crate) const DEFAULT_BINS_PER_LINK: usize = 8;

/// What the engine needs to build and grow a map's tables (typed facades fill it from their
/// builders).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    /// Keys the first table is sized for (when `bins` is not given).
    pub(crate) capacity: usize,
    /// The first table's bins, exactly.
    pub(crate) bins: Option<usize>,
    /// The first table's link pool, exactly.
    pub(crate) link_buckets: Option<usize>,
    /// Link pool sizing of every derived pool.
    pub(crate) bins_per_link: usize,
    pub(crate) backend: Backend,
    pub(crate) huge_pages: bool,
    /// Fault the first table's memory in when the map is made (`Builder::populate`).
    pub(crate) populate: bool,
    pub(crate) resize_mode: ResizeMode,
    /// Growth limit.
    pub(crate) max_bins: usize,
    /// The most bytes a map prepares ahead for its next growth (`raw/prepare.rs`); 0: none.
    pub(crate) grow_ahead: usize,
    /// Threads a persistent map's recovery sweeps with (`raw/persist/recover.rs`); 0: one a core.
    pub(crate) recovery_threads: usize,
    /// What a persistent map's operations make durable before they return.
    #[cfg_attr(floe_loom, allow(dead_code))]
    pub(crate) durability: Durability,
    /// How the tables lay out their keys.
    pub(crate) layout: Layout,
    /// A `PersistentMap`'s open drops what the tail rule calls damage instead of refusing it
    /// (`Builder::repair`).
    #[cfg_attr(not(feature = "serde"), allow(dead_code))]
    pub(crate) repair: bool,
    /// A `Map`'s retired entries per thread before its collector reclaims (0: seize's own).
    pub(crate) reclaim_batch: usize,
}

impl Config {
    /// Threads a recovery sweep runs on: as set, or one per core the process may use.
    // Persistence is compiled out of loom models.
    #[cfg_attr(floe_loom, allow(dead_code))]
    pub(crate) fn recovery_threads(&self) -> usize {
        match self.recovery_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads => threads,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            capacity: 1024,
            bins: None,
            link_buckets: None,
            bins_per_link: DEFAULT_BINS_PER_LINK,
            backend: Backend::Auto,
            huge_pages: true,
            populate: false,
            resize_mode: ResizeMode::Incremental,
            max_bins: usize::MAX,
            grow_ahead: usize::MAX,
            recovery_threads: 0,
            durability: Durability::Process,
            layout: Layout::Bins,
            repair: false,
            reclaim_batch: 0,
        }
    }
}

/// Geometry and memory of a map (`FlatMap::stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Bins (one 64-byte line each; a dense map's lines).
    pub bins: usize,
    /// Link buckets in the pool.
    pub link_buckets: usize,
    /// Slots of the table: three a bin and four a link bucket of the pool (a dense map's four
    /// a line). Not every slot is reachable by every key: a key can only use its own bin and
    /// the link buckets that bin chains (in a dense map, its two lines and the stash).
    pub slots: usize,
    /// Link buckets of the transfer reserve, beside the pool: taken only by the growth that
    /// filled this table, for the chains of the keys it moved in (all of a refreshed
    /// table's first chains come from there).
    pub link_reserve: usize,
    /// Link buckets taken from the pool and from the reserve (chained to a bin, or lost in a
    /// chaining race): at most `link_buckets + link_reserve`.
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
    /// Bytes mapped ahead for the next growth and not yet taken by it, of which the bins are
    /// faulted in as the table nears its growth
    /// ([`Builder::grow_ahead`](crate::Builder::grow_ahead)); not in `allocated_bytes`.
    pub prepared_bytes: usize,
    /// Growths that found their new table's memory prepared (see `prepared_bytes`).
    pub prepared_growths: usize,
    /// Keys in the current table's stash ([`Layout::Dense`]: keys that found no room in
    /// either of their two lines; a few per table at most, many only under a hasher that
    /// crowds keys into the same lines). Always 0 for the default layout.
    pub stashed: usize,
}
