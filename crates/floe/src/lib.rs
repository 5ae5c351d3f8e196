//! floe: a concurrent hash map that runs at the speed of DRAM.
//!
//! # Overview
//!
//! [`FlatMap`] stores keys and values of up to 8 bytes inline in cache-line *bins* (the
//! layout of DLHT, "Dandelion Hashtable"): a key lives in the one bin its hash selects, a bin
//! is one 64-byte line holding three slots, and an unlucky bin chains up to three more lines
//! from a small pool. A get therefore costs about one memory access and never writes; inserts
//! and removes are one or two compare-and-swaps on the bin's header word; puts are one 16-byte
//! compare-and-swap on the slot. No operation takes a lock.
//!
//! [`Map`] takes any `K: Hash + Eq` and any `V` on the same engine: each key and value live in
//! one heap entry, the slot holds the key's 64-bit hash and a pointer to the entry, so a miss
//! still costs one line and a growth moves slots without reading entries; removed and replaced
//! entries are freed through `seize` once no reader can hold them. Its reads return references
//! tied to a pinned handle ([`Map::pin`]). The design and its argument are at the top of
//! `src/any_map.rs`.
//!
//! [`LocalMap`] is [`FlatMap`]'s table for one thread (DLHT's single-thread build): std's
//! `HashMap` interface, writes through `&mut self` with plain stores instead of atomic
//! read-modify-writes; a `FlatMap` converts to one and back without copying.
//!
//! [`Cache`] is a bounded concurrent cache on `Map`: entries leave by S3-FIFO eviction (with
//! an adaptive split between its queues), time to live or time to idle; reads take no lock,
//! and `get_with` runs one loader per missing key. Its design is at the top of
//! `src/cache/mod.rs`. [`FlatCache`] runs the same policy on a `FlatMap`, for keys and values
//! of a word each: a hit reads one line, an insert allocates nothing.
//!
//! # Usage
//!
//! ```
//! use std::thread;
//! use floe::FlatMap;
//!
//! let counts = FlatMap::<u64, u64>::with_capacity(100_000);
//! thread::scope(|s| {
//!     for t in 0..2 {
//!         let counts = &counts;
//!         s.spawn(move || {
//!             for i in 0..10_000u64 {
//!                 counts.fetch_add(i % 1000, 1);
//!             }
//!         });
//!     }
//! });
//! assert_eq!(counts.len(), 1000);
//! assert_eq!(counts.get(&7), Some(20));
//! ```
//!
//! # Consistency
//!
//! Every operation on one key is linearizable: it takes effect at one instant between its
//! call and its return, and all threads agree on the order. `len`, `clear` and `for_each` look
//! at the whole table and are not atomic snapshots (see their docs); [`FlatMap::snapshot`]
//! is one, at the price of pausing the writers for a walk of the table. The design notes at the
//! top of the engine (`src/raw/bins/mod.rs`) give each protocol's argument; `tests/` checks them
//! with loom models, a per-key linearizability checker under stress, and differential tests
//! against `std::collections::HashMap`.
//!
//! # Growing
//!
//! The map grows on demand: when an insert finds its bin full (15 keys) or the link pool
//! empty, the keys move to a table 8, 4 or 2 times larger (larger steps for small tables)
//! without stopping anyone: operations on bins not being moved carry on, an operation usually
//! waits at most for the one bin it needs (the exceptions are listed under "Waiting" below),
//! and every thread that touches the map during the move does a bounded share of it
//! ([`ResizeMode`]). The old table is freed once no thread can still read
//! it, with no call from you: by the thread that replaced it, when its operation ends, or by a
//! short-lived `floe-reclaim` thread if other threads were inside operations then. What this
//! costs an operation while no growth runs is two stores to a line of the calling thread's own
//! (no locked instruction, nothing another thread writes); the retiring thread pays a
//! `membarrier` system call instead (`src/reclaim.rs` has the protocol and its argument). [`FlatMap::reserve`] grows up front and
//! [`FlatMap::shrink_to_fit`] moves the keys into fewer bins after many removals (inserts
//! pause while it runs); [`Builder::max_bins`] caps the growth, and a capped map answers an
//! insert that finds no room with [`Error::Full`], changing nothing. The protocols and their
//! argument are in `src/raw/bins/migrate.rs`.
//!
//! Tail latency while growing: a new table's pages are zeroed by the kernel on first touch (in a
//! virtual machine, first backed by the host, which can cost 4-5 ms per 2 MiB huge page), and a
//! growth's moves write all over the new table at once, which showed as seconds of near-stopped
//! inserts (the benchmark log, `results/history/`). So a table past the load it is sized for has
//! its writes fault the next table in ahead, a page now and then ([`Builder::grow_ahead`], on by
//! default; "Tails while growing" in `BENCHMARKS.md` has what it gains and costs). Where no single
//! operation may wait a huge page's fault, build the map with [`Builder::huge_pages`]`(false)`
//! (measured on an earlier machine: max 4.2 ms instead of 37 ms, at 0.85x the throughput).
//!
//! # Persistence
//!
//! [`Builder::build_persistent`] puts a [`FlatMap`]'s tables in files (a directory of them),
//! mapped shared, and [`FlatMap::open`] (or [`Builder::open`], which also reports what it
//! found) reopens them; [`Builder::open_or_create`] does whichever the directory calls for.
//! A directory is one map's: a persistent `FlatMap` and a `PersistentMap` each refuse the
//! other's directory, and a new map is made only in a missing or empty one. The same protocols run on the files as in memory, at the same
//! speed once the pages are resident; what is promised, and tested in `tests/persist.rs`:
//!
//! 1. **Process crash** (panic, abort, SIGKILL at any instant, during a growth or shrink
//!    too): every operation that returned before the crash is in the reopened map, each
//!    operation in flight is there wholly or not at all, and no slot is torn. Nothing needs
//!    to be called for this: the stores are in the kernel's page cache as they are made. A
//!    kill harness (hundreds of SIGKILLs at random instants, two threads, growth, reserve and
//!    shrink) and every crash point of insert, remove, chaining, a bin move and the
//!    superblock's updates check it.
//! 2. **Power loss or kernel crash**: the state as of the last [`FlatMap::checkpoint`] that
//!    returned, plus possibly later operations, each whole (per key: its checkpointed value
//!    or a later one), growths, shrinks and reserves in flight included, and a power loss
//!    during the recovery of an earlier one too. A growth makes its new table durable before
//!    the superblock names it, and on a disk it syncs each chunk of keys it copies before it
//!    retires their old slots (one `msync` per 1024 old bins, which an operation on one of
//!    those bins waits for; tmpfs, which a power loss empties anyway, is spared it). A
//!    simulator that keeps, per 512-byte sector, either what the last
//!    sync wrote or what the process left checks it, with growths, shrinks, reserves and
//!    checkpoints racing.
//! 3. A clean [`FlatMap::close`] (or drop) syncs and records the close, so the next open
//!    checks the table against the recorded key count instead of repairing it.
//! 4. At [`Durability::Flush`] ([`Builder::durability`]), on a DAX or CXL mapping (where the
//!    CPU caches are the only volatile layer): a power loss keeps every operation that
//!    returned, growths included, without checkpoints. Each operation writes its bin's cache
//!    lines back (`clwb`) and fences before it returns, and a growth writes each copy back
//!    before it retires the old slot (`src/raw/persist/writeback.rs` argues the order line
//!    by line); a simulator that keeps only written-back lines checks it. On an ordinary file
//!    this level costs the write-backs and keeps no more than the default.
//!
//! Opening after a crash sweeps the tables once: inserts stopped between their commit and store are
//! undone, deletes between their retire and free completed, open shadow inserts aborted, pool
//! cursors and the key count recounted, and an interrupted growth's moves rebuilt and the growth
//! finished (`src/raw/persist/recover.rs` argues each case). The sweep runs on one thread per core
//! ([`Builder::recovery_threads`]), and gives the same map on any number. Files made for other key,
//! value or hasher types, by another format version, damaged (a checksummed superblock; bin states,
//! link words and keys checked against the superblock, the geometry and the hash), missing,
//! truncated, not regular files (a FIFO is refused, not waited on) or locked by another process are
//! refused with an [`Error::Storage`] that says which and names the file or directory
//! ([`StorageError::path`]; the operating system's error, where it refused, is the
//! [`source`](std::error::Error::source)), and an open these checks refuse never writes (a crashed
//! map's sweep can still meet a move it cannot rebuild, and refuses the map after settling what it
//! could: `src/raw/persist/recover.rs`; [`durable`] is the layer every format stands on). The
//! hasher must be a [`hash::PersistentHasher`] (its seed is stored). A persistent map does not
//! prepare its next table ahead ([`Builder::grow_ahead`]). The directory is itself locked (`flock`
//! on the directory, so no file removed from it lets a second process in) while a map has it open;
//! a process that ignores the lock and truncates a table file under an open map makes that map's
//! next touch of the lost pages fault (SIGBUS), as with any shared mapping. A table file's blocks
//! are reserved when it is created, so a full device (or quota, or `RLIMIT_FSIZE`) is an
//! [`Error::Storage`] from the insert whose growth wanted the new table, and the map carries on at
//! its size, not a SIGBUS on a later store.
//!
//! Where the files live decides the speed (BENCHMARKS, "Persistent maps"): on tmpfs mounted
//! with `huge=always` the map runs within a few percent of one in memory and survives process
//! crashes; on a disk filesystem it also survives power loss (with checkpoints) but gets pay
//! 4 KiB pages and writes pay the kernel's writeback faults (0.2x the in-memory map here).
//!
//! The any-key [`Map`] cannot live in its files (its table holds pointers to heap entries):
//! with feature `serde`, `PersistentMap` (made by `Builder::build_persistent` on a `Map`
//! builder) journals every write instead, as postcard-encoded records in file-backed shared
//! mappings, before the write takes effect, and compacts the journals into snapshots in the
//! background. It makes the same promises 1 to 3 (for a read as well: what a returned read
//! saw survives a crash); `src/persistent_map.rs` argues them. Its manifest names every file
//! it needs, so a missing, cut or damaged one is refused rather than opened as an empty or
//! older map (`src/journal.rs` says what an open refuses).
//!
//! # Waiting
//!
//! Gets and puts of keys whose bins are not being moved never wait for another thread. The
//! waits there are, each for a step of one other thread (so a thread descheduled at that step
//! delays the waiters until it runs again):
//!
//! - Any operation on a bin that another thread is moving to a new table waits for that bin
//!   (at most 15 keys).
//! - An insert waits while another insert into the same bin has committed its slot but not yet
//!   written its key (a few instructions), and a remove of a key whose insert has not yet
//!   finished waits for that insert's last step. A bin's move waits for such inserts too.
//! - An insert that finds its bin full in a table that is itself still being filled by a
//!   growth finishes that growth first, and so waits for every chunk of it, including chunks
//!   other threads have claimed and not finished. So do [`FlatMap::reserve`],
//!   [`FlatMap::shrink_to_fit`], [`FlatMap::clear`], [`FlatMap::for_each`] and every
//!   operation in [`ResizeMode::Blocking`] that finds the map growing.
//! - While [`FlatMap::shrink_to_fit`] runs, inserts into the bins it froze wait for it.
//! - While [`FlatMap::snapshot`] runs, every write to the map (insert, put, remove, `clear`,
//!   shadow inserts and their resolution; on any thread) waits for it, and it waits for the
//!   writes in progress when it started. Gets go on.
//! - An [`insert`](FlatMap::insert) or [`fetch_add`](FlatMap::fetch_add) of a key with an open
//!   shadow insert ([`FlatMap::insert_shadow`]) waits until the shadow is committed or
//!   aborted: the shadow is that key's lock, held for as long as its owner keeps it (an
//!   owner that inserts its own shadowed key waits for itself, forever).
//!
//! Waits on the kernel rather than on another thread: a write to a table near its growth may
//! fault in one 2 MiB page of the next table ([`Builder::grow_ahead`], on by default), and
//! the first write to a page of a new table faults it in if it was not prepared.
//!
//! A panic inside a bin's move (in the map's hasher, the only user code a move calls) aborts
//! the process with a message: unwinding would leave the bin locked and every thread that
//! needs it waiting forever.
//!
//! # Batches and the pipeline
//!
//! For tables far larger than the caches, one operation at a time leaves the memory system
//! mostly idle. [`FlatMap::batch`] runs a slice of [`Request`]s in order with the lines of the
//! next ones prefetched (DLHT's batches); [`FlatMap::pipeline`] keeps a window of tagged
//! requests in flight and completes each once its lines have arrived (DRAMHiT's pipeline).
//! Both run on one sliding lookahead ring. A slice of one kind of write has a typed batch
//! (`insert_each`, `insert_new_each`, `fetch_add_each` over `(key, value)` pairs), the
//! writers' fastest path. See the [`batch`] module for the trade-offs and the automatic choice
//! for small tables.
//!
//! ```
//! use floe::{Request, Response};
//!
//! let map = floe::FlatMap::<u64, u64>::with_capacity(1 << 16);
//! let inserts: Vec<_> = (0..1000).map(|k| Request::Insert(k, k * 2)).collect();
//! let mut responses = Vec::new();
//! map.batch().run(&inserts, &mut responses);
//! let keys: Vec<u64> = (0..1000).collect();
//! let mut values = vec![None; keys.len()];
//! map.batch().get_many(&keys, &mut values)?;
//! assert_eq!(values[21], Some(42));
//! # Ok::<(), floe::Error>(())
//! ```
//!
//! # Delegation
//!
//! For skewed, write-heavy work (counting k-mers, zipf-popular counters), where a shared
//! table's hot keys bounce between the cores that write them, [`delegate::Partitioned`]
//! splits the map into partitions with one owner thread each and sends updates to their
//! owner through section queues (DRAMHiT-P); reads stay direct. See the [`delegate`] module
//! for when it pays and when batches on a shared [`FlatMap`] are the better choice.
//!
//! # Performance
//!
//! - Hashing: [`hash::Mix64`] by default (one multiply); [`hash::WyHash`], [`hash::Crc32`] or
//!   any `BuildHasher`. Bins are selected with fastrange, so any bin count works.
//! - Matching: scalar, AVX2 or AVX-512, chosen once per map ([`Backend`]).
//! - Memory: tables of 2 MiB and more are 2 MiB-aligned `mmap`s advised for transparent huge
//!   pages, zeroed lazily by the kernel.
//!
//! `BENCHMARKS.md` in the repository has the measured numbers and the commands behind them.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod any_batch;
mod any_entry;
mod any_map;
mod atomic_counter;
pub mod batch;
#[cfg(not(floe_loom))]
mod cache;
mod config;
mod control;
pub mod delegate;
#[cfg(all(unix, not(floe_loom)))]
pub mod durable;
mod error;
pub mod hash;
mod inline;
#[cfg(all(feature = "serde", unix, not(floe_loom)))]
mod journal;
pub mod local;
mod map;
#[cfg(all(feature = "serde", unix, not(floe_loom)))]
mod persistent_map;
mod raw;
mod reclaim;
mod set;
mod sync;
mod traits;

pub use crate::{
    any_batch::{MapBatch, MapPipeline, MapRequest, MapResponse},
    any_entry::{MapEntry, MapEntryModify},
    any_map::{
        Compute, Map, MapIntoIter, MapIter, MapRef, MapShadow, Namespace, Operation, OwnedMapRef,
    },
    atomic_counter::AtomicCounter,
    batch::{Batch, Delta, Pipeline, Prefetch, Request, Response, MAX_PIPELINE_WINDOW},
    config::{Backend, Durability, Layout, ResizeMode, Stats},
    error::{Error, StorageError, StorageErrorKind},
    inline::{Counter, Inline, InlineKey},
    local::LocalMap,
    map::{
        Builder, CompareExchangeError, FlatMap, ForFlatMap, ForMap, Insert, IntoIter, Iter,
        Recovery, Shadow, Taken,
    },
    raw::stats::{lines_read, link_lines_prefetched},
    set::{FlatSet, Set, SetRef},
};

#[cfg(not(floe_loom))]
pub use crate::cache::{
    Cache, CacheBuilder, CacheStats, Expiry, FlatCache, FlatCacheBuilder, RemovalCause,
};

#[cfg(all(feature = "serde", unix, not(floe_loom)))]
pub use crate::persistent_map::{MapRecovery, PersistentMap, PersistentRef};

#[cfg(all(feature = "crash-points", not(floe_loom)))]
pub use crate::sync::crash_points_reached;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The crate's own README (what a registry shows), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct CrateReadmeDoctests;
