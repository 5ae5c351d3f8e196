//! The maps under test behind one small interface (`BenchMap`), built from one `Recipe`; each
//! adapter's choices are written next to it (`floe_map.rs`, `peers.rs`, and `cpp.rs` for the
//! C++ peers and floe through its C ABI).
//!
//! Every map gets the same hasher (the bench's `AnyHash`, Mix64 by default) and is created with
//! capacity for all keys, so no map resizes during a measurement (except in the growth
//! workloads, `growth.rs`, which create them small on purpose). Values are `u64`.

mod cpp;
mod floe_map;
mod hasher;
mod peers;

use cpp::{Absl, Boost, CapiFloe, CppMap, Libcuckoo, Tbb};
pub use floe_map::{fresh_map_dir, AnyMap, PersistentFloe, SingleThreadFloe};
pub use hasher::{AnyHash, AHASH};
pub use peers::{RwlockHashbrown, SingleThreadHashbrown};

/// floe's map as the bench builds it (every map gets the run's hasher).
pub type Map = floe::FlatMap<u64, u64, AnyHash>;

/// What a workload asks of a map. `&self` everywhere: the maps are shared by all threads.
pub trait BenchMap: Send + Sync + 'static {
    /// The value of `key`.
    fn get(&self, key: u64) -> Option<u64>;
    /// Insert if absent; `true` if inserted.
    fn insert(&self, key: u64, value: u64) -> bool;
    /// Replace the value if present; `true` if it was present.
    fn update(&self, key: u64, value: u64) -> bool;
    /// Remove if present; `true` if it was present.
    fn remove(&self, key: u64) -> bool;
    /// Table bytes if the map reports them (otherwise the harness measures RSS growth).
    fn table_bytes(&self) -> Option<usize> {
        None
    }
    /// floe's map, for its batched interfaces (no peer has any).
    fn as_floe(&self) -> Option<&Map> {
        None
    }
    /// floe's any-key map, for its batches and pipeline.
    fn as_any(&self) -> Option<&AnyMap> {
        None
    }
    /// Whether [`get_many`](Self::get_many) is a batch interface (floe's maps, and boost's
    /// bulk visitation).
    const GET_MANY: bool = false;
    /// Gets of `keys` into `values` in one call (`depth` and `prefetch` as `--batch` and
    /// `--prefetch`, for the maps that take them). Unless `GET_MANY`, one get at a time.
    fn get_many(
        &self,
        keys: &[u64],
        values: &mut [Option<u64>],
        _depth: usize,
        _prefetch: floe::Prefetch,
    ) {
        for (key, value) in keys.iter().zip(values) {
            *value = self.get(*key);
        }
    }
}

/// The maps `--maps` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MapKind {
    /// floe's FlatMap (backend from `--backend`), incremental resize (its default).
    Floe,
    /// floe's FlatMap with `ResizeMode::Blocking` (every thread helps until a growth is done).
    FloeBlocking,
    /// floe's FlatMap made fixed-size (`max_bins`): never grows; its reads skip the reader
    /// announcement.
    FloeFixed,
    /// floe's FlatMap with `Builder::grow_ahead(0)`: no next table's memory prepared ahead of
    /// its growth (the growth's pages are faulted in by the operations that touch them first)
    FloeUnprepared,
    /// floe's FlatMap with `Layout::Dense`: headerless lines of four slots, a home and one
    /// alternative line per key, grown at about 80% of its bytes holding keys and values
    /// (`floe/src/raw/dense/mod.rs`). Built for `--keys` keys, its first table's trigger is a
    /// little above them (churn workloads add at most a few keys in flight per thread).
    FloeDense,
    /// floe's FlatMap kept in files (`Builder::build_persistent`): its tables are shared
    /// mappings of files in a fresh directory under `$FLOE_BENCH_DIR` (default the system's
    /// temporary directory), removed afterwards. Needs the Mix64 hasher (the default).
    FloePersistent,
    /// `floe-persistent` at `Durability::Flush`: every operation writes its bin's lines back
    /// (`clwb`) and fences before it returns, as on a DAX mapping; on a file in the page
    /// cache this measures what the write-backs cost, not a durability gain.
    FloePersistentFlush,
    /// floe's `Map` for any key and value, here `Map<u64, u64>`: the slot holds the key's hash
    /// and a pointer to a heap entry (one more line per hit than `FlatMap`); one handle pinned
    /// per operation (`map.pin()`), as for papaya. Batched gets (`MapRef::get_many_keys`: the
    /// table's lines on floe's ring, then the entries 16 ahead) for all-get workloads; other
    /// workloads through `MapRef::batch` or `MapRef::pipeline` under `--api batch` /
    /// `pipeline` (one handle per 2048 requests).
    FloeAny,
    /// floe's `LocalMap` (the single-thread mode: `FlatMap`'s table, writes with no atomic
    /// read-modify-write), 1 thread only, the counterpart of `hashbrown`.
    FloeLocal,
    /// dashmap 6: sharded `RwLock<hashbrown>`; `get` copies the value out under the read lock;
    /// insert-if-absent through `entry`.
    Dashmap,
    /// papaya 0.2, blocking resize; one guard pinned per operation (`map.pin()`), as its docs
    /// recommend for short operations.
    Papaya,
    /// papaya 0.2, incremental resize (its default, `Incremental(64)`); guards as above.
    PapayaIncremental,
    /// scc 3 `HashMap` (`read_sync`, `insert_sync`, `update_sync`, `remove_sync`).
    Scc,
    /// scc 3 `HashIndex`, the read-optimized variant: lock-free `peek_with` reads; an update
    /// replaces the entry (copy on write) through `get_sync(..).update(..)`.
    SccIndex,
    /// flurry 0.5 (a port of Java's ConcurrentHashMap); one guard pinned per operation;
    /// insert-if-absent is `try_insert`, update is `compute_if_present`.
    Flurry,
    /// leapfrog 0.3 `LeapMap` (feature `stable_alloc`): its `insert` replaces, so the adapter's
    /// insert is insert-or-replace (the harness only inserts absent keys); a remove leaves a
    /// tombstone. Reserves the values `u64::MAX` and `u64::MAX - 1` (the harness never uses them).
    Leapfrog,
    /// 64 shards of `std::sync::RwLock<hashbrown::HashMap>`, shard chosen by the hash's top bits.
    RwlockHashbrown,
    /// `hashbrown::HashMap` alone, 1 thread only (no synchronization at all).
    Hashbrown,
    /// floe's FlatMap through its C ABI (`floe-capi`): each operation one call through a C
    /// function pointer, as a C program calls the shared library, with its status code and
    /// out-parameter. Batched gets through `floe_map_get_many` (its default depth, floe's).
    /// Mix64 only.
    FloeCapi,
    /// boost::concurrent_flat_map (Boost 1.83+, C++): `cvisit` reads, `emplace`, `visit`
    /// updates, `erase`. Batched gets (`--api batch`) through its bulk `cvisit` over a range
    /// of keys (`bulk_visit_size` = 16 at a time, prefetched). Marked avalanching: boost does
    /// not re-mix the bench's hash.
    Boost,
    /// oneTBB's tbb::concurrent_hash_map (C++): `find` with a `const_accessor` (a read lock
    /// on the element), `insert`, `find` with an `accessor` to update, `erase`.
    Tbb,
    /// libcuckoo's cuckoohash_map (C++): `find`, `insert`, `update`, `erase`.
    Libcuckoo,
    /// abseil's absl::flat_hash_map (C++), 1 thread only: the Swiss table, the C++
    /// counterpart of `hashbrown`.
    Absl,
}

impl MapKind {
    /// Whether the map may be used from more than one thread.
    pub fn concurrent(self) -> bool {
        !matches!(
            self,
            MapKind::Hashbrown | MapKind::FloeLocal | MapKind::Absl
        )
    }

    /// Why this map cannot run in this build of floe-bench (a C++ peer whose library was
    /// missing when it was built), if it cannot.
    pub fn missing(self) -> Option<&'static str> {
        match self {
            MapKind::Boost => cpp::missing::<Boost>(),
            MapKind::Tbb => cpp::missing::<Tbb>(),
            MapKind::Libcuckoo => cpp::missing::<Libcuckoo>(),
            MapKind::Absl => cpp::missing::<Absl>(),
            _ => None,
        }
    }

    /// Whether the map has a batched get (`BenchMap::GET_MANY`): floe's maps (through its C
    /// ABI too) and boost's.
    pub fn batches_gets(self) -> bool {
        self.is_floe()
            || matches!(
                self,
                MapKind::FloeAny | MapKind::FloeLocal | MapKind::FloeCapi | MapKind::Boost
            )
    }

    /// Whether the map runs every workload through batches and a pipeline (`--api`): floe's
    /// `FlatMap`s and `Map`.
    pub fn batches_requests(self) -> bool {
        self.is_floe() || self == MapKind::FloeAny
    }

    /// Whether the map is one of floe's (batches, the pipeline and a table size of its own).
    pub fn is_floe(self) -> bool {
        matches!(
            self,
            MapKind::Floe
                | MapKind::FloeBlocking
                | MapKind::FloeFixed
                | MapKind::FloeUnprepared
                | MapKind::FloeDense
                | MapKind::FloePersistent
                | MapKind::FloePersistentFlush
        )
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            MapKind::Floe => "floe",
            MapKind::FloeBlocking => "floe-blocking",
            MapKind::FloeFixed => "floe-fixed",
            MapKind::FloeUnprepared => "floe-unprepared",
            MapKind::FloeDense => "floe-dense",
            MapKind::FloePersistent => "floe-persistent",
            MapKind::FloePersistentFlush => "floe-persistent-flush",
            MapKind::FloeAny => "floe-any",
            MapKind::FloeLocal => "floe-local",
            MapKind::Dashmap => "dashmap",
            MapKind::Papaya => "papaya",
            MapKind::PapayaIncremental => "papaya-incremental",
            MapKind::Scc => "scc",
            MapKind::SccIndex => "scc-index",
            MapKind::Flurry => "flurry",
            MapKind::Leapfrog => "leapfrog",
            MapKind::RwlockHashbrown => "rwlock-hashbrown",
            MapKind::Hashbrown => "hashbrown",
            MapKind::FloeCapi => "floe-capi",
            MapKind::Boost => "boost",
            MapKind::Tbb => "tbb",
            MapKind::Libcuckoo => "libcuckoo",
            MapKind::Absl => "absl",
        }
    }
}

/// Builds a map of a given kind and hands it to a generic measurement (so every map's hot loop
/// is compiled for its own type, with no dynamic dispatch per operation).
pub trait Visit {
    type Output;
    fn visit<M: BenchMap>(
        self,
        build: &dyn Fn() -> Result<M, String>,
    ) -> Result<Self::Output, String>;
}

/// How to build the maps: capacity, hasher, and floe's own options.
#[derive(Clone, Copy, Debug)]
pub struct Recipe {
    pub capacity: usize,
    pub hasher: AnyHash,
    pub backend: floe::Backend,
    pub huge_pages: bool,
    /// Fault floe's first table in when it is built (`Builder::populate`; `--populate`).
    pub populate: bool,
    /// The workloads insert and remove fresh keys in a full table (insert/remove churn).
    /// floe keeps a link bucket chained to its bin once used, so under churn every bin that
    /// ever holds 3 keys ends up with one (about 27% of bins at 1.75 keys per bin, Poisson):
    /// with DLHT's one bucket per 8 bins its pool would run out and the map would grow in the
    /// middle of a steady-state measurement, so the pool is sized at one bucket per 3 bins
    /// for these workloads. The extra bytes show in its bytes per key.
    pub churn: bool,
    /// How floe grows (`MapKind::FloeBlocking` overrides it).
    pub resize: floe::ResizeMode,
}

impl Recipe {
    /// Call `visit` with a builder for `kind`.
    pub fn visit<V: Visit>(&self, kind: MapKind, visit: V) -> Result<V::Output, String> {
        let Recipe {
            capacity, hasher, ..
        } = *self;
        match kind {
            MapKind::Floe => visit.visit(&|| self.floe()),
            MapKind::FloeFixed => visit.visit(&|| {
                self.floe_builder()
                    .max_bins(1)
                    .build()
                    .map_err(|e| format!("building floe's map: {e}"))
            }),
            MapKind::FloeUnprepared => visit.visit(&|| {
                self.floe_builder()
                    .grow_ahead(0)
                    .build()
                    .map_err(|e| format!("building floe's map: {e}"))
            }),
            MapKind::FloeDense => visit.visit(&|| {
                // Room for the keys the churn workloads hold in flight (one per thread,
                // inserted then removed): at exactly its trigger a dense table would grow
                // in the middle of a steady-state measurement.
                floe::FlatMap::<u64, u64>::builder()
                    .layout(floe::Layout::Dense)
                    .capacity(self.capacity + if self.churn { 1024 } else { 0 })
                    .hasher(self.hasher)
                    .backend(self.backend)
                    .huge_pages(self.huge_pages)
                    .populate(self.populate)
                    .resize_mode(self.resize)
                    .build()
                    .map_err(|e| format!("building floe's dense map: {e}"))
            }),
            MapKind::FloePersistent => visit.visit(&|| PersistentFloe::build(self.floe_builder())),
            MapKind::FloePersistentFlush => visit.visit(&|| {
                PersistentFloe::build(self.floe_builder().durability(floe::Durability::Flush))
            }),
            MapKind::FloeAny => visit.visit(&|| {
                self.configure(floe::Map::<u64, u64>::builder())
                    .build()
                    .map_err(|e| format!("building floe's any-key map: {e}"))
            }),
            MapKind::FloeLocal => visit.visit(&|| self.floe().map(SingleThreadFloe::new)),
            MapKind::FloeBlocking => visit.visit(&|| {
                Recipe {
                    resize: floe::ResizeMode::Blocking,
                    ..*self
                }
                .floe()
            }),
            MapKind::Dashmap => {
                visit.visit(&|| Ok(dashmap::DashMap::with_capacity_and_hasher(capacity, hasher)))
            }
            MapKind::Papaya | MapKind::PapayaIncremental => visit.visit(&|| {
                let mode = if kind == MapKind::Papaya {
                    papaya::ResizeMode::Blocking
                } else {
                    papaya::ResizeMode::Incremental(64)
                };
                Ok(papaya::HashMap::builder()
                    .capacity(capacity)
                    .hasher(hasher)
                    .resize_mode(mode)
                    .build())
            }),
            MapKind::Scc => {
                visit.visit(&|| Ok(scc::HashMap::with_capacity_and_hasher(capacity, hasher)))
            }
            MapKind::SccIndex => {
                visit.visit(&|| Ok(scc::HashIndex::with_capacity_and_hasher(capacity, hasher)))
            }
            MapKind::Flurry => {
                visit.visit(&|| Ok(flurry::HashMap::with_capacity_and_hasher(capacity, hasher)))
            }
            MapKind::Leapfrog => visit.visit(&|| {
                Ok(leapfrog::LeapMap::with_capacity_and_hasher(
                    capacity, hasher,
                ))
            }),
            MapKind::RwlockHashbrown => visit.visit(&|| Ok(RwlockHashbrown::new(capacity, hasher))),
            MapKind::Hashbrown => visit.visit(&|| Ok(SingleThreadHashbrown::new(capacity, hasher))),
            MapKind::FloeCapi => visit.visit(&|| CapiFloe::new(self)),
            MapKind::Boost => visit.visit(&|| CppMap::<Boost>::new(capacity, hasher)),
            MapKind::Tbb => visit.visit(&|| CppMap::<Tbb>::new(capacity, hasher)),
            MapKind::Libcuckoo => visit.visit(&|| CppMap::<Libcuckoo>::new(capacity, hasher)),
            MapKind::Absl => visit.visit(&|| CppMap::<Absl>::new(capacity, hasher)),
        }
    }

    /// floe's map for this recipe.
    pub fn floe(&self) -> Result<Map, String> {
        self.floe_builder()
            .build()
            .map_err(|e| format!("building floe's map: {e}"))
    }

    /// The builder behind [`floe`](Self::floe).
    fn floe_builder(&self) -> floe::Builder<u64, u64, AnyHash> {
        self.configure(floe::FlatMap::<u64, u64>::builder())
    }

    /// This recipe's options on a builder of either floe map.
    fn configure<T>(
        &self,
        builder: floe::Builder<u64, u64, floe::hash::DefaultHashBuilder, T>,
    ) -> floe::Builder<u64, u64, AnyHash, T> {
        builder
            .capacity(self.capacity)
            .hasher(self.hasher)
            .backend(self.backend)
            .huge_pages(self.huge_pages)
            .populate(self.populate)
            .bins_per_link(self.bins_per_link())
            .resize_mode(self.resize)
    }

    /// floe's link pool for this recipe (see `churn`).
    fn bins_per_link(&self) -> usize {
        if self.churn {
            3
        } else {
            8
        }
    }
}
