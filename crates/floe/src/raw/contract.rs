//! The driver contract: what a layout's driver does for the facades, each operation's
//! promise and errors stated once ([`TableDriver`]). The default layout's driver (`RawMap`,
//! `bins/driver.rs`) and the dense one's (`DenseMap`, `dense/driver.rs`) implement it, and so
//! does the driver a facade holds (`Driver`, `driver.rs`), one match on the layout a call,
//! generated from the same list ([`driver_contract!`]): a signature is written in one place,
//! and a layout that lacks an operation says so in its own `impl` (a compile error otherwise).
//!
//! What the dense layout does not offer it answers as the contract allows: no link buckets to
//! prefetch, no files (`FlatMap`'s persistence is the default layout's; documented on the
//! facade), one step per walk (its keys are not ordered by hash), and single-thread writes
//! through its shared path. Errors a layout cannot meet are [`Error::NotInLayout`] where the
//! call can return one.
//!
//! # How to add an operation
//!
//! 1. The table's step, in each layout's table (`bins/mod.rs` `RawTable`, `dense/mod.rs`
//!    `DenseTable`), with its linearization argument beside it, and the per-backend entry
//!    point in `dispatch.rs` for the default layout if it is on a hot path.
//! 2. Its promise and signature here, in the `driver_contract!` list (what it answers, when it
//!    is linearized, its errors).
//! 3. Its driver method in `bins/driver.rs` (`impl TableDriver for RawMap`: usually one of the
//!    runners, `run`, `run_growing`) and in `dense/driver.rs` (a `modify` decision for a
//!    write). `Driver` forwards it with no more code.
//! 4. The typed method in the facades that offer it (`map.rs`, `any_map.rs`, `local.rs`,
//!    `set.rs`; the C ABI in `floe-capi`), converting words to types.
//! 5. Tests: the table step beside it (both layouts), a differential case in `tests/` against
//!    `std::collections::HashMap`, a loom model if it adds a protocol (`tests/loom.rs`).

// The list's types, for the trait declared here (`driver.rs`, which expands the list too,
// imports the same names).
use crate::{
    config::{Backend, Stats},
    error::Error,
    hash::Rehash,
    raw::{Inserted, Mismatch, Stopped, WordDone, WordOp},
};

/// The contract's list: hands every method of the contract, in the syntax below, to the
/// macro `$writer` (`declare_contract` here writes the trait; `driver.rs`'s writes `Driver`'s
/// forwarding). `shared` methods take `&self`; `owned` ones `&mut self` (a map one thread
/// owns, `LocalMap`).
macro_rules! driver_contract {
    ($writer:ident) => {
        $writer! {
            /// What a layout's driver does: every operation of the facades on 64-bit words (a key
            /// word hashed to `hash`; `rehash` gives a stored key's hash, called only by a
            /// migration, once per key it moves). Unless a method says otherwise, an operation on a
            /// key is linearizable: it takes effect at one instant between its call and its return,
            /// the same instant for every thread, across growths, shrinks and clears running
            /// meanwhile. A write runs past the snapshot gate (`gate.rs`); a get never writes.
            trait TableDriver;
            shared {
                /// The backend in use (never `Auto`).
                fn backend() -> Backend;

                /// The key's value, `None` if absent (or held by an open shadow insert).
                fn get(hash: u64, word: u64, rehash: Rehash<'_>) -> Option<u64>;

                /// Gets of requests `0..n` (`locate(i)`: request i's hash and key word) through a
                /// lookahead ring `far` deep (`ring.rs`), `answer(i, value)` called in request
                /// order; each get is linearizable on its own (the batch is not one instant).
                fn get_batch(
                    n: usize,
                    far: usize,
                    locate: impl crate::raw::ring::Locate,
                    answer: impl FnMut(usize, Option<u64>),
                    rehash: Rehash<'_>,
                );

                /// Requests `0..n` of a batch (`op(i)`, on `locate(i)`) through the engine's batch
                /// loop, in order, `answer(i, done)` after each (`false` stops the batch); `add`
                /// sums a value and a delta for `WordOp::Add`. `None` where the table cannot take
                /// one (it is migrating, or writes its lines back): nothing ran, and the caller
                /// runs the requests one by one. `Some(Err(stopped))` where it stopped: before a
                /// request the table refused, which the caller runs through the single-key path.
                #[allow(clippy::too_many_arguments)]
                fn run_batch(
                    n: usize,
                    far: usize,
                    locate: impl crate::raw::ring::Locate,
                    op: impl Fn(usize) -> WordOp,
                    add: impl Fn(usize, u64) -> u64,
                    answer: impl FnMut(usize, WordDone) -> bool,
                    rehash: Rehash<'_>,
                ) -> Option<Result<(), Stopped>>;

                /// Insert `word -> value` if the key is absent (nothing changes otherwise: `Exists`
                /// with the value present, or `Shadowed` if an open shadow insert holds it),
                /// growing the map if there is no room.
                ///
                /// # Errors
                /// `Full` at the map's size limit, `HashCollisions` when no larger table would
                /// split the key's crowd, `AllocationFailed`/`CapacityOverflow` for a growth's
                /// memory, `Storage` for a persistent map's growth.
                fn insert(
                    hash: u64,
                    word: u64,
                    value: u64,
                    rehash: Rehash<'_>,
                ) -> Result<Inserted, Error>;

                /// Insert `init` if absent, else replace the value `v` by `f(v)` (`f` may run more
                /// than once, on values a racing write replaced); the value before, `None` if the
                /// key was inserted. Waits out an open shadow insert of the key.
                ///
                /// # Errors
                /// As [`insert`](Self::insert).
                fn upsert_with(
                    hash: u64,
                    word: u64,
                    init: u64,
                    f: impl FnMut(u64) -> u64,
                    rehash: Rehash<'_>,
                ) -> Result<Option<u64>, Error>;

                /// Replace a present value `v` by `f(v)` (`f` may run more than once):
                /// `(old, new)`, `None` if the key is absent.
                fn update(
                    hash: u64,
                    word: u64,
                    f: impl FnMut(u64) -> u64,
                    rehash: Rehash<'_>,
                ) -> Option<(u64, u64)>;

                /// Replace the value by `new` if it is `current`: the value before, or why not.
                fn compare_exchange(
                    hash: u64,
                    word: u64,
                    current: u64,
                    new: u64,
                    rehash: Rehash<'_>,
                ) -> Result<u64, Mismatch>;

                /// Remove the key (its slot is free at once): its value, `None` if absent.
                fn remove(hash: u64, word: u64, rehash: Rehash<'_>) -> Option<u64>;

                /// Remove the key if `accept(value)` (called on the value present, maybe more than
                /// once): the value removed, or why not.
                fn remove_if(
                    hash: u64,
                    word: u64,
                    accept: impl FnMut(u64) -> bool,
                    rehash: Rehash<'_>,
                ) -> Result<u64, Mismatch>;

                /// Shadow-insert the key (taken but hidden; its value kept by the caller) if it is
                /// absent and not shadowed: `New`, or what holds it (as [`insert`](Self::insert)).
                ///
                /// # Errors
                /// As [`insert`](Self::insert).
                fn insert_shadow(
                    hash: u64,
                    word: u64,
                    rehash: Rehash<'_>,
                ) -> Result<Inserted, Error>;

                /// Commit (`Some(value)`: the key becomes visible with it) or abort (`None`) the
                /// open shadow insert of the key; whether there was one.
                fn resolve_shadow(
                    hash: u64,
                    word: u64,
                    commit: Option<u64>,
                    rehash: Rehash<'_>,
                ) -> bool;

                /// Start loading the first line a lookup of `hash` reads, in the current table.
                fn prefetch(hash: u64);

                /// Start loading the lines past the first that a lookup of `hash` will read, where
                /// the layout can tell before the first has arrived; whether there are any.
                fn prefetch_chain(hash: u64) -> bool;

                /// Remove every key that `keep(key, value)` does not keep, handing each removed
                /// key's value to `taken`. Each removal is linearizable; the clear is not one
                /// instant (see `FlatMap::clear`).
                fn clear(
                    rehash: Rehash<'_>,
                    keep: &dyn Fn(u64, u64) -> bool,
                    taken: impl FnMut(u64),
                );

                /// Visit every `(key, value)` pair as of one instant (writers wait at the gate
                /// meanwhile; see `FlatMap::snapshot`).
                ///
                /// # Errors
                /// `InsideOperation` if the calling thread is inside an operation of a floe map
                /// (which the wait for writers would wait for): nothing visited.
                #[cfg(not(floe_loom))]
                fn snapshot(rehash: Rehash<'_>, visit: impl FnMut(u64, u64)) -> Result<(), Error>;

                /// Keys present (exact when no write runs; see `FlatMap::len`).
                fn len() -> usize;

                /// The current table's size (`FlatMap::capacity`: the default layout's slots,
                /// the dense layout's keys at its growth trigger).
                fn capacity() -> usize;

                /// Bytes of the map's tables (the batches' prefetch decision; the dense layout
                /// counts both tables while it migrates).
                fn table_bytes() -> usize;

                /// The map's figures (`FlatMap::stats`).
                fn stats() -> Stats;

                /// Fault the current table's memory in (`Builder::populate`); `false` if the kernel
                /// could not.
                fn populate() -> bool;

                /// Visit every pair: a key present throughout once, with a value it had during the
                /// walk; one inserted or removed meanwhile at most once.
                fn for_each(rehash: Rehash<'_>, visit: impl FnMut(u64, u64));

                /// An iterator's step: visit the pairs of the run of hashes that starts at `start`;
                /// the start of the next run, `None` after the last. Successive steps visit a key
                /// present throughout exactly once, across growths and shrinks.
                fn walk_run(
                    start: u64,
                    rehash: Rehash<'_>,
                    visit: impl FnMut(u64, u64),
                ) -> Option<u64>;

                /// Room for `additional` more keys than the map holds now, without a growth.
                ///
                /// # Errors
                /// `CapacityOverflow` past the map's size limit; as [`insert`](Self::insert).
                fn reserve(additional: usize, rehash: Rehash<'_>) -> Result<(), Error>;

                /// Move the keys into a smaller table if they fit one; whether it shrank.
                ///
                /// # Errors
                /// `AllocationFailed`, `Storage`: the map is as it was.
                fn shrink_to_fit(rehash: Rehash<'_>) -> Result<bool, Error>;

                /// Check the table's invariants on a quiescent map (tests); the keys present.
                fn check_invariants(rehash: Rehash<'_>) -> usize;

                /// Whether the map is kept in files.
                #[cfg(not(floe_loom))]
                fn is_persistent() -> bool;

                /// Make every operation that returned durable against a power loss (a map in
                /// memory: nothing to do).
                ///
                /// # Errors
                /// `Storage` if a file could not be synced.
                #[cfg(not(floe_loom))]
                fn checkpoint() -> Result<(), Error>;
            }
            owned {
                /// Prepare for single-thread use (`LocalMap`): a migration in progress finished,
                /// the open shadow inserts aborted; how many were.
                fn settle_local(rehash: Rehash<'_>) -> usize;

                /// A single-thread write of `word -> value` as `MODE` says (`IF_ABSENT`,
                /// `IF_PRESENT`, `UPSERT`, `bins/local.rs`): the value before.
                ///
                /// # Errors
                /// As [`insert`](Self::insert).
                fn write_local<const MODE: u8>(
                    hash: u64,
                    word: u64,
                    value: u64,
                    rehash: Rehash<'_>,
                ) -> Result<Option<u64>, Error>;

                /// A single-thread remove: the value, `None` if absent.
                fn remove_local(hash: u64, word: u64, rehash: Rehash<'_>) -> Option<u64>;

                /// Close the map: a persistent one syncs and records a clean close.
                ///
                /// # Errors
                /// `Storage` if the sync or the record failed.
                #[cfg(not(floe_loom))]
                fn close() -> Result<(), Error>;
            }
        }
    };
}
pub(crate) use driver_contract;

/// Declares the trait from the contract's list.
macro_rules! declare_contract {
    (
        $(#[$trait_meta:meta])*
        trait $contract:ident;
        shared {$(
            $(#[$meta:meta])*
            fn $name:ident $(<const $mode:ident: $mode_ty:ty>)? (
                $($arg:ident: $ty:ty),* $(,)?
            ) $(-> $ret:ty)?;
        )*}
        owned {$(
            $(#[$owned_meta:meta])*
            fn $owned:ident $(<const $owned_mode:ident: $owned_mode_ty:ty>)? (
                $($owned_arg:ident: $owned_ty:ty),* $(,)?
            ) $(-> $owned_ret:ty)?;
        )*}
    ) => {
        $(#[$trait_meta])*
        pub(crate) trait $contract {
            $(
                $(#[$meta])*
                fn $name $(<const $mode: $mode_ty>)? (&self, $($arg: $ty),*) $(-> $ret)?;
            )*
            $(
                $(#[$owned_meta])*
                fn $owned $(<const $owned_mode: $owned_mode_ty>)? (
                    &mut self, $($owned_arg: $owned_ty),*
                ) $(-> $owned_ret)?;
            )*
        }
    };
}

driver_contract!(declare_contract);
