//! The persistence engine: a persistent map's tables as files, and what turns the files a
//! crash left back into a map.
//!
//! Reading order: [`store`] (the directory, the superblock and the table files, which *are*
//! the tables: shared mappings), [`writeback`] (`Durability::Flush`: each operation's lines
//! written back to the media before it returns), then [`recover`] (the sweeps an open runs
//! over a crashed map's tables; its essay says what a crash or a power loss can leave and why
//! each rule of the sweep keeps every operation that returned). The protocols themselves are
//! the engine's (`raw/bins/mod.rs`, `raw/bins/migrate.rs`): persistence adds only where their
//! words are kept, the order in which a growth syncs its moves, and the recovery. A table
//! meets it through one field, its `Backing` (`raw/backing.rs`: the file, the write-back,
//! ordered moves, a failed sync, unchained link buckets).

pub(crate) mod recover;
pub(crate) mod store;
pub(crate) mod writeback;
