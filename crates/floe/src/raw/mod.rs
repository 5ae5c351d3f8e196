//! The engine: two layouts of 64-byte lines, their drivers, and what both share.
//!
//! # Design
//!
//! The default layout (`bins/`) is DLHT's table (Katsarakis et al., "Dandelion Hashtable",
//! §3.1–§3.2.5): lock-free cache-line bins with bounded chaining; its essay opens
//! `bins/mod.rs` (the words, the invariants, each protocol and its memory orderings). The
//! dense layout (`dense/`) keeps a key in its home line or one alternative, with headerless
//! lines; its essay opens `dense/mod.rs`. Each layout has a table (its protocols), a
//! migration (moving its bins or lines into a successor while operations go on) and a driver
//! (one map's tables over time); `lifecycle.rs` is the life cycle both share,
//! `contract.rs` the driver contract both drivers implement (`TableDriver`, with the steps
//! to add an operation) and `driver.rs` the one driver a facade holds (`Driver`). The
//! persistence engine (`persist/`) keeps a default-layout table in a file and recovers it
//! after a crash.
//!
//! Reading order: this essay; then `bins/mod.rs` (the default layout's essay and table, with
//! its own reading order: `control::header`, `layout.rs`, `loader.rs`, the table,
//! `bins/batch.rs`, `bins/walk.rs`, `bins/migrate.rs`, `bins/driver.rs`, `bins/local.rs`);
//! `dense/mod.rs` (the second layout), `dense/walk.rs`, `dense/migrate.rs`, `dense/stash.rs`,
//! `dense/driver.rs`; `lifecycle.rs`, `contract.rs` and `driver.rs`; `persist/mod.rs` (its
//! reading order).
//! Beside them: `dispatch.rs` (the backend chosen once, and each operation compiled for it),
//! `gate.rs` (the snapshot gate), `stats.rs` (line counting), `backing.rs` (a table's file,
//! the one place the default layout's table meets persistence). Shared below the tables:
//! `outcome.rs` (what operations answer), `prefetch.rs`, `loader.rs`, `layout.rs`,
//! `alloc.rs`, `prepare.rs`, `counter.rs`, `ring.rs` (the batches' lookahead).
//!
//! ## Layers
//!
//! Arrows point down only:
//!
//! ```text
//!  map.rs, any_map.rs, local.rs, batch.rs    typed facades: words in, types out
//!        |
//!  raw/driver.rs (Driver)                     the map's layout, one match a call
//!        |
//!  raw/bins/driver.rs (RawMap),               runners, when and how to grow, per layout;
//!  raw/dense/driver.rs (DenseMap)             opening a persistent map
//!        |
//!  raw/contract.rs (TableDriver)              what every driver does, each operation's promise
//!        |
//!  gate.rs, raw/persist/recover.rs (Sweeper)  the snapshot gate writers pass; recovery
//!        |            \
//!  raw/dispatch.rs     reclaim.rs             backend chosen once; when old tables are freed
//!        |
//!  raw/bins/mod.rs (RawTable), bins/batch,    one table: bin protocols, batch loops, walks,
//!  bins/walk, bins/migrate, bins/local;       moving bins out, the same for a table one
//!  raw/dense/mod.rs (DenseTable), dense/walk, thread owns; the dense layout's table (its own
//!  dense/migrate                              essay), its walks and migration
//!        |
//!  raw/dense/stash.rs (Stash),                a dense table's keys that fit in no line;
//!  raw/backing.rs (Backing)                   what a table keeps of its file (a zero-sized
//!                                             twin under `floe_loom`, which builds no files)
//!        |
//!  raw/persist/store.rs, writeback.rs         table files, the superblock, write-backs
//!        |
//!  raw/lifecycle.rs (Tables, Migration),      the current table, a migration's bookkeeping
//!  outcome.rs, prefetch.rs, loader.rs,        and end, retiring; what operations answer,
//!  layout.rs, alloc.rs, prepare.rs, ring.rs   prefetches, reading lines, the memory, a next
//!                                             table made ready ahead, the lookahead ring
//!        |
//!  control/ (header words, SIMD groups)       bit tricks, no memory
//!        |
//!  sync.rs, config.rs, error.rs, inline.rs,   atomics, options and reports, errors, word
//!  hash.rs                                    traits, hashing (`Rehash`, `fastrange`)
//! ```
//!
//! Everything from the driver down works on 64-bit words and is compiled once, whatever the
//! key, value and hasher types: a facade converts, hashes, and passes the driver its hash
//! function for the keys a growth moves. A new facade (a map for any key, a set, a C ABI) is
//! another shell over `Driver` (either layout's driver). `FlatMap`'s batches and pipeline
//! (`batch.rs`) reach it only through the `BatchTarget` trait; `Map`'s (`any_batch.rs`) are
//! their own, on the same lookahead ring (`ring.rs`): a `Map` request reads a second line,
//! its entry, whose address is known only once the bin has arrived.

mod alloc;
mod backing;
pub(crate) mod bins;
pub(crate) mod contract;
mod counter;
#[cfg(not(floe_loom))]
pub(crate) use counter::ShardedCounter;
pub(crate) mod dense;
pub(crate) mod dispatch;
pub(crate) mod driver;
pub(crate) mod gate;
pub(crate) mod layout;
pub(crate) mod lifecycle;
pub(crate) mod loader;
mod outcome;
#[cfg(not(floe_loom))]
pub(crate) mod persist;
mod prefetch;
pub(crate) mod prepare;
pub(crate) mod ring;
pub(crate) mod stats;
// The persistent format's version, for storage errors' messages (a constant under loom,
// which builds no persistence).
#[cfg(not(floe_loom))]
pub(crate) use self::persist::store::FORMAT_VERSION;
#[cfg(floe_loom)]
pub(crate) const FORMAT_VERSION: u32 = 1;

#[cfg(not(floe_loom))]
pub(crate) use self::outcome::Swept;
pub(crate) use self::{
    alloc::memory_fits,
    bins::{BinSnapshot, DeadKeys, Geometry, RawTable, TableSource, IF_ABSENT, IF_PRESENT, UPSERT},
    outcome::{Full, Inserted, Mismatch, Moved, Stopped, Upserted, WordDone, WordOp},
    prefetch::{auto_threshold, prefetch_far, prefetch_line},
};
