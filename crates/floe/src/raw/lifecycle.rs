//! One map's tables over time, whatever their layout: the current table, the end of a
//! migration out of it (helping, finishing, making the next table current) and the tables it
//! replaced, freed once no reader can be on them (`reclaim.rs`).
//!
//! Each layout's table says how it moves a chunk of itself into its successor ([`Table`]);
//! its driver (`bins/driver.rs` for the default layout, `dense/driver.rs` for the dense one) runs
//! operations, starts growths and shrinks, and implements [`Lifecycle`] (its tables, its resize
//! mode, what completing a migration does), which helps and finishes migrations the same way
//! for both. The
//! migration's bookkeeping (the successor, the chunk counters) is [`Migration`], also shared.

use crossbeam_utils::CachePadded;

use crate::{
    config::ResizeMode,
    hash::Rehash,
    reclaim::{Collector, ReadGuard, Reclaim},
    sync::{spin, AtomicPtr, AtomicUsize, Ordering},
};

/// Gets help a growth on one call in this many (per thread; see `Lifecycle::help_reading`).
pub(crate) const READER_HELP_EVERY: u32 = 16;

/// The default layout's writes help a growth on one call in this many (per thread; see
/// `help_writing`; the dense layout's help on every call, `dense/driver.rs`). Under loom,
/// every write: the models then explore a helper in every write, as before the pacing.
#[cfg(not(floe_loom))]
pub(crate) const WRITER_HELP_EVERY: u32 = 4;
#[cfg(floe_loom)]
pub(crate) const WRITER_HELP_EVERY: u32 = 1;

/// Whether this operation is the one in `every` of its thread that helps a growth (one count
/// per thread for gets and writes alike).
#[inline(always)]
pub(crate) fn turn_to_help(every: u32) -> bool {
    // Under loom a thread-local of loom's, which starts afresh in every execution (a std one
    // would carry its count from one execution to the next and make the model
    // nondeterministic).
    #[cfg(floe_loom)]
    loom::thread_local! {
        static OPERATIONS: core::cell::Cell<u32> = core::cell::Cell::new(0);
    }
    #[cfg(not(floe_loom))]
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

/// A layout's driver as the life cycle sees it: its tables, its resize mode, and what it
/// does when a migration's last chunk is moved ([`complete`](Self::complete)). The steps of
/// helping and finishing a migration are then the same for every layout, written once here.
pub(crate) trait Lifecycle {
    /// The layout's table.
    type Table: Table;

    /// The map's tables.
    fn tables(&self) -> &Tables<Self::Table>;

    /// How the map's writes help a migration.
    fn resize_mode(&self) -> ResizeMode;

    /// The last chunk of `table`'s migration is moved: make `next` current and retire
    /// `table` ([`Tables::replace`]), with what the layout does around it. Called once, by
    /// the thread that moved the last chunk.
    fn complete(&self, table: &Self::Table, next: &Self::Table);

    /// An operation's share of `table`'s migration into `next` ([`Tables::help`]): one chunk,
    /// or all that is left in blocking mode. Out of line: most operations meet no migration.
    #[cold]
    #[inline(never)]
    fn help_slow(&self, table: &Self::Table, next: &Self::Table, rehash: Rehash<'_>) {
        self.tables()
            .help(self.resize_mode(), table, next, rehash, |table, next| {
                self.complete(table, next)
            });
    }

    /// Move every chunk still unclaimed, then wait until the others' chunks are done and
    /// `next` is current ([`Tables::finish_migration`]).
    fn finish_migration(&self, table: &Self::Table, next: &Self::Table, rehash: Rehash<'_>) {
        self.tables()
            .finish_migration(table, next, rehash, |table, next| {
                self.complete(table, next)
            });
    }

    /// A get's share of a migration out of `table`: a chunk on one call in
    /// [`READER_HELP_EVERY`] per thread, so a migration still finishes while only gets run
    /// and a read-mostly workload does not pay a chunk on every get (measured: gets fell
    /// below half their steady rate for seconds when each helped).
    #[inline(always)]
    fn help_reading(&self, table: &Self::Table, rehash: Rehash<'_>) {
        if let Some(next) = table.migration().next() {
            if turn_to_help(READER_HELP_EVERY) {
                self.help_slow(table, next, rehash);
            }
        }
    }

    /// The current table with no migration out of it: finishes one if needed (walks and
    /// whole-map operations start from a settled table).
    fn settled<'g>(&'g self, guard: &'g ReadGuard<'_>, rehash: Rehash<'_>) -> &'g Self::Table {
        loop {
            let table = self.tables().load(guard);
            match table.migration().next() {
                None => return table,
                Some(next) => self.finish_migration(table, next, rehash),
            }
        }
    }
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
    #[cfg_attr(floe_loom, allow(dead_code))]
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

/// `Migration::state` values.
const IDLE: usize = 0;
const ALLOCATING: usize = 1;
const READY: usize = 2;

/// The migration out of a table (held by the old table): its successor and the chunk
/// counters, the same for every layout (`T` is the table type: `RawTable` or `DenseTable`).
/// How a layout moves its bins or lines is its own (`bins/migrate.rs`, `dense/mod.rs`).
pub(crate) struct Migration<T> {
    /// Old bins per new bin: 1 when growing; `g` when shrinking `g` times.
    group: AtomicUsize,
    /// `IDLE`, `ALLOCATING` (one thread is allocating the next table) or `READY`.
    state: AtomicUsize,
    /// The next table, set once before `state` becomes `READY`.
    next: AtomicPtr<T>,
    /// Next chunk to hand out. Padded (as `finished`): every operation reads the table's
    /// header fields, which must not share a line with counters the helpers hammer.
    claimed: CachePadded<AtomicUsize>,
    /// Chunks completed.
    finished: CachePadded<AtomicUsize>,
}

/// What [`Migration::next_table`] found.
pub(crate) enum Next<'a, T> {
    /// No migration has started.
    Idle,
    /// The caller won the right to allocate the next table: it must call
    /// [`Migration::install`] or [`Migration::abandon`].
    Allocate,
    /// The next table.
    Ready(&'a T),
}

impl<T> Migration<T> {
    pub(crate) fn new() -> Self {
        Migration {
            group: AtomicUsize::new(1),
            state: AtomicUsize::new(IDLE),
            next: AtomicPtr::new(core::ptr::null_mut()),
            claimed: CachePadded::new(AtomicUsize::new(0)),
            finished: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Whether the migration has started (its next table is installed). Acquire: as `next`.
    #[inline(always)]
    pub(crate) fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }

    /// The table the owner is migrating into, if the migration has started. Acquire: pairs
    /// with the Release in `install`, so the new table's fields are visible.
    #[inline(always)]
    pub(crate) fn next(&self) -> Option<&T> {
        if !self.is_ready() {
            return None;
        }
        // SAFETY: set (non-null) before `state` became READY and never changed after; the
        // table it points to lives at least as long as its predecessor is reachable (the map
        // frees a table's successor only after the table itself, see `RawMap`'s reclaimer).
        Some(unsafe { &*self.next.load(Ordering::Acquire) })
    }

    /// The next table, waiting out another thread's allocation; or the right to allocate it
    /// (`start` = true asks for it when no migration has started).
    pub(crate) fn next_table(&self, start: bool) -> Next<'_, T> {
        loop {
            match self.state.load(Ordering::Acquire) {
                READY => {
                    return Next::Ready(self.next().expect("state is READY"));
                }
                IDLE if !start => return Next::Idle,
                IDLE => {
                    if self
                        .state
                        .compare_exchange(IDLE, ALLOCATING, Ordering::Acquire, Ordering::Acquire)
                        .is_ok()
                    {
                        return Next::Allocate;
                    }
                }
                _ => spin(),
            }
        }
    }

    /// Publish `next` as the successor (after `next_table` returned `Allocate`); `group` old
    /// bins go to each of its bins (1 when growing).
    pub(crate) fn install(&self, next: *mut T, group: usize) {
        self.group.store(group, Ordering::Relaxed);
        self.next.store(next, Ordering::Release);
        // Release: the new table (and the pointer above) are visible to whoever sees READY.
        self.state.store(READY, Ordering::Release);
    }

    /// Give the allocation right back (the allocation failed).
    pub(crate) fn abandon(&self) {
        self.state.store(IDLE, Ordering::Release);
    }

    /// The successor pointer as published (from `Box::into_raw`), for the map's drop and for
    /// making it current.
    pub(crate) fn next_ptr(&self) -> *mut T {
        if self.state.load(Ordering::Acquire) == READY {
            self.next.load(Ordering::Acquire)
        } else {
            core::ptr::null_mut()
        }
    }

    /// Old bins (or lines) per new one.
    pub(crate) fn group(&self) -> usize {
        self.group.load(Ordering::Relaxed)
    }

    /// The next chunk to move, of `chunks`, or `None` when all are handed out.
    pub(crate) fn claim_chunk(&self, chunks: usize) -> Option<usize> {
        let chunk = self.claimed.fetch_add(1, Ordering::Relaxed);
        (chunk < chunks).then_some(chunk)
    }

    /// Count a claimed chunk moved; whether it was the last of `chunks` (the caller then makes
    /// the next table current and retires the old one).
    pub(crate) fn finish_chunk(&self, chunks: usize) -> bool {
        // AcqRel: the chunk counter is a release sequence; the thread that finishes the last
        // chunk acquires every transfer's writes before it makes the next table current.
        self.finished.fetch_add(1, Ordering::AcqRel) + 1 == chunks
    }

    /// Whether all of `chunks` are moved.
    pub(crate) fn done(&self, chunks: usize) -> bool {
        self.finished.load(Ordering::Acquire) >= chunks
    }
}

/// Aborts the process if dropped during a panic (`bins/migrate.rs`, "Panics during a move");
/// forgotten on success.
pub(crate) struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        eprintln!(
            "floe: a panic while moving a bin or line to a new table (in the map's hasher?) \
             would leave it locked and every thread that needs it waiting forever; aborting"
        );
        std::process::abort();
    }
}
