//! One map's tables over time, whatever their layout: the current table, the end of a
//! migration out of it (helping, finishing, making the next table current) and the tables it
//! replaced, freed once no reader can be on them (`reclaim.rs`).
//!
//! Each layout's table says how it moves a chunk of itself into its successor ([`Table`]);
//! its driver (`driver.rs` for the default layout, `dense/driver.rs` for the dense one) runs
//! operations, starts growths and shrinks, and calls this for the rest of the life cycle. The
//! migration's bookkeeping (the successor, the chunk counters) is `migrate::Migration`, also
//! shared.

use super::migrate::Migration;
use crate::hash::Rehash;
use crate::{
    config::ResizeMode,
    reclaim::{Collector, ReadGuard, Reclaim},
    sync::{AtomicPtr, Ordering},
};

/// Gets help a growth on one call in this many (per thread; see `run_reading`).
pub(crate) const READER_HELP_EVERY: u32 = 16;

/// The default layout's writes help a growth on one call in this many (per thread; see
/// `help_writing`; the dense layout's help on every call, `dense/driver.rs`). Under loom,
/// every write: the models then explore a helper in every write, as before the pacing.
#[cfg(not(loom))]
pub(crate) const WRITER_HELP_EVERY: u32 = 4;
#[cfg(loom)]
pub(crate) const WRITER_HELP_EVERY: u32 = 1;

/// Whether this operation is the one in `every` of its thread that helps a growth (one count
/// per thread for gets and writes alike).
#[inline(always)]
pub(crate) fn turn_to_help(every: u32) -> bool {
    // Under loom a thread-local of loom's, which starts afresh in every execution (a std one
    // would carry its count from one execution to the next and make the model
    // nondeterministic).
    #[cfg(loom)]
    loom::thread_local! {
        static OPERATIONS: core::cell::Cell<u32> = core::cell::Cell::new(0);
    }
    #[cfg(not(loom))]
    std::thread_local! {
        static OPERATIONS: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
    }
    OPERATIONS.with(|n| {
        let v = n.get().wrapping_add(1);
        n.set(v);
        v % every == 0
    })
}

/// How many times more bins the next table gets (DLHT §3.2.5: larger steps for small tables,
/// where a migration is cheap and the next one would come soon).
pub(crate) fn growth_factor(bins: usize) -> usize {
    if bins < 4096 {
        8
    } else if bins < 64 << 20 {
        4
    } else {
        2
    }
}

/// What the life cycle needs of a table (and the collector: [`Reclaim`]).
pub(crate) trait Table: Reclaim + Sized {
    /// The migration out of this table.
    fn migration(&self) -> &Migration<Self>;

    /// Claim and move one chunk of this table into `next`: `None` if no chunk was left,
    /// `Some(true)` if it was the last to finish (the caller then makes `next` current),
    /// `Some(false)` otherwise. `rehash` gives a stored key's hash.
    fn help_one_chunk(&self, next: &Self, rehash: Rehash<'_>) -> Option<bool>;

    /// Whether every chunk has been moved.
    fn migration_done(&self) -> bool;
}

/// A map's current table and its retired predecessors.
pub(crate) struct Tables<T: Table> {
    /// The current table, from `Box::into_raw`.
    current: AtomicPtr<T>,
    /// Replaced tables waiting for their readers.
    collector: Collector,
}

impl<T: Table> Tables<T> {
    /// `first` (from `Box::into_raw`) is current.
    pub(crate) fn new(first: *mut T) -> Self {
        Tables {
            current: AtomicPtr::new(first),
            collector: Collector::new(),
        }
    }

    /// The current table, readable while `guard` lives.
    #[inline(always)]
    pub(crate) fn load<'g>(&'g self, _guard: &'g ReadGuard<'_>) -> &'g T {
        // Acquire: pairs with the Release of the swap that made this table current, so its
        // contents (and every transfer into it) are visible.
        let table = self.current.load(Ordering::Acquire);
        // SAFETY: `current` always points to a live table; one that is replaced is freed only
        // after every thread that announced before its retirement (we did, holding `guard`)
        // has left its operation (`reclaim.rs`).
        unsafe { &*table }
    }

    /// The current table without an announcement.
    ///
    /// # Safety
    /// Nothing may replace the current table while the borrow lives: the map never does (a
    /// fixed map), or the caller holds the map exclusively.
    #[inline(always)]
    pub(crate) unsafe fn load_unguarded(&self) -> &T {
        // SAFETY: the caller's contract; `current` always points to a live table.
        unsafe { &*self.current.load(Ordering::Relaxed) }
    }

    /// The current table's pointer (for a persistent map's close).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn current_ptr(&self) -> *mut T {
        self.current.load(Ordering::Acquire)
    }

    /// A write's or a get's share of `table`'s migration: one chunk (`Incremental`, calling
    /// `complete` if it was the last) or all that is left (`Blocking`).
    pub(crate) fn help(
        &self,
        mode: ResizeMode,
        table: &T,
        next: &T,
        rehash: Rehash<'_>,
        complete: impl Fn(&T, &T),
    ) {
        match mode {
            ResizeMode::Incremental => {
                if table.help_one_chunk(next, rehash) == Some(true) {
                    complete(table, next);
                }
            }
            ResizeMode::Blocking => self.finish_migration(table, next, rehash, complete),
        }
    }

    /// Move every chunk of `table`'s migration still unclaimed (calling `complete` if this
    /// thread finishes the last), then wait until the others' chunks are done and `next` is
    /// current.
    pub(crate) fn finish_migration(
        &self,
        table: &T,
        next: &T,
        rehash: Rehash<'_>,
        complete: impl Fn(&T, &T),
    ) {
        while let Some(last) = table.help_one_chunk(next, rehash) {
            if last {
                complete(table, next);
            }
        }
        while !table.migration_done() || core::ptr::eq(self.current.load(Ordering::Acquire), table)
        {
            crate::sync::spin();
        }
    }

    /// `table`'s migration is done: make its successor current and retire it. Only the thread
    /// that finished the last chunk calls this, once.
    pub(crate) fn replace(&self, table: &T) {
        // The pointers the tables were published with (both from `Box::into_raw`), not ones
        // made from the shared references: the old one becomes a `Box` again when it is freed,
        // and a pointer derived from `&T` may not be used for that (Miri's Stacked Borrows
        // rejects it).
        let successor = table.migration().next_ptr();
        debug_assert!(!successor.is_null());
        // Release: pairs with the Acquire load of `current` by every later operation, which
        // then sees every transfer (this thread acquired them through the chunk counter).
        let replaced = self.current.compare_exchange(
            table as *const T as *mut T,
            successor,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        let Ok(old) = replaced else {
            unreachable!("only the migration's last chunk replaces its table");
        };
        // SAFETY: `old` is the pointer `current` held, from `Box::into_raw`; the swap above
        // unlinked it (new operations start at its successor), and only the last chunk's
        // thread retires it, once.
        unsafe { self.collector.retire(old) };
    }

    /// Make `next` (from `Box::into_raw`) current at once and free the old table: for a map
    /// held exclusively (`&mut`), which nobody else can be reading.
    pub(crate) fn swap_owned(&mut self, next: *mut T) {
        let old = self.current.swap(next, Ordering::Relaxed);
        // SAFETY: `old` came from `Box::into_raw` and was current until the swap; `&mut self`:
        // nobody else can be reading it, so it is freed at once.
        drop(unsafe { Box::from_raw(old) });
    }
}

impl<T: Table> Drop for Tables<T> {
    fn drop(&mut self) {
        let current = self.current.load(Ordering::Acquire);
        // SAFETY: `&mut self`: no operation is running, so the current table and its
        // successor (if a migration was left half done) are reachable only from here. Tables
        // retired earlier belong to the collector.
        unsafe {
            let next = (*current).migration().next_ptr();
            if !next.is_null() {
                drop(Box::from_raw(next));
            }
            drop(Box::from_raw(current));
        }
    }
}
