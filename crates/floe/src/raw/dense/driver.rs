//! The dense layout's driver: one map's dense tables over time (`dense/mod.rs` for a table).
//!
//! The life cycle is the default layout's (`lifecycle.rs`: the current table, helping and
//! finishing a migration, making the next table current, retiring the old one; gets help as
//! the default layout's do, writes on every call, `modify`); what differs is what a migration
//! is (`dense/mod.rs`, Migration: lines moved one at a time, a key's writes going to the next
//! table once both its lines are moved, gets that check two writer bytes while a table
//! migrates) and when one starts (below).
//!
//! # When a table is replaced
//!
//! An insert that finds no room starts a migration: `Full`, both lines full and, below the trigger
//! ([`GROW_AT_PER_MILLE`]), no displacement found room and the stash was full (its limit,
//! `dense/mod.rs`, The stash), or, at the trigger in a table that may grow (`DenseTable::growing`:
//! not a fixed map's, not one at the size limit), both lines full (no displacement is tried past
//! it: left to fill on, tables reached 94% of their slots before a search failed, every insert of
//! the last stretch paying long chains). Its next table has twice the lines, unless the table is
//! below its trigger and has *aged*: a quarter of its keys (estimated from a sample of lines) live
//! in their alternatives, against 17% after inserts alone. Churn does that (keys pushed into their
//! alternatives, nothing moving them back, `dense/mod.rs`, Known limits), and a move into a fresh
//! table of the same size puts every key in its home first again. A table that has not aged and
//! runs out of room below its trigger is crowded (keys whose lines coincide), and a larger table
//! separates them. A key whose two lines hold only keys of its own hash is refused with
//! `HashCollisions` instead: no table would separate them. A refresh also needs the share to have
//! grown by [`AGED_SINCE`] since the table became current: a crowd of keys that no refresh
//! separates stays where the last refresh put it, and must not make inserts refresh for ever (it
//! doubles the table instead). `reserve` and `shrink_to_fit` migrate to the size they need the same
//! way.

use std::sync::Arc;

use super::{Action, DenseTable, Refused, GROW_AT_PER_MILLE, LINE_SLOTS};
use crate::raw::{
    contract::TableDriver,
    dispatch::Loader,
    gate::WriterGate,
    lifecycle::{Lifecycle, Next, Tables},
    prepare::{Ahead, Plan, Preparer},
    ring::{self, Locate},
    Inserted, Mismatch, Moved, Stopped, WordDone, WordOp, IF_ABSENT, IF_PRESENT,
};
use crate::{
    config::{Backend, ResizeMode, Stats},
    error::Error,
    hash::Rehash,
    reclaim::{self, ReadGuard},
    sync::stat::{AtomicUsize as StatUsize, Ordering as StatOrdering},
};

/// The share of keys living in their alternatives from which a table that runs out of room
/// below its trigger is taken to have aged (module docs): the model gives 0.17 at the trigger
/// after inserts alone; the churn test reached 0.72.
const AGED_AWAY_SHARE: f64 = 0.25;

/// How much that share must have grown since the table became current for a refresh: a
/// crowd of keys that no table of this size separates leaves it where a refresh put it, and
/// must not make inserts refresh for ever.
const AGED_SINCE: f64 = 0.08;

/// The untyped map of the dense layout (module docs).
pub(crate) struct DenseMap {
    tables: Tables<DenseTable>,
    /// Memory of the next table, made ready ahead of the growth (`prepare.rs`): by the
    /// tables a growth made (a first table, sized by its user, prepares nothing, so a map
    /// filled to its capacity holds no second table's memory).
    preparer: Arc<Preparer>,
    loader: Loader,
    huge_pages: bool,
    resize_mode: ResizeMode,
    /// Growth limit, in lines.
    max_lines: usize,
    /// The limit is the first table's size: the map never grows nor shrinks.
    fixed: bool,
    /// Tables of this map not yet freed (a statistic).
    alive: std::sync::Arc<StatUsize>,
    /// Writers pass it; a strong snapshot closes it (`gate.rs`).
    gate: WriterGate,
    /// Migrations into a table of the same size, for the tests.
    #[cfg(test)]
    refreshes: std::sync::atomic::AtomicUsize,
}

/// Lines whose trigger holds at least `keys` keys (at least 4).
pub(crate) fn lines_for(keys: usize) -> Result<usize, Error> {
    Ok(keys
        .checked_mul(1000)
        .ok_or(Error::CapacityOverflow)?
        .div_ceil(LINE_SLOTS * GROW_AT_PER_MILLE)
        .max(4))
}

impl DenseMap {
    /// A map whose first table holds `keys` keys at its trigger, growing up to `max_keys`
    /// (the tests', but for the loom models; the facades size by lines, `with_lines`).
    ///
    /// # Errors
    /// `CapacityOverflow`, `AllocationFailed`, `UnsupportedBackend`, `DegenerateHasher`.
    #[cfg(all(test, not(floe_loom)))]
    pub(crate) fn new(
        keys: usize,
        max_keys: usize,
        backend: Backend,
        resize_mode: ResizeMode,
        huge_pages: bool,
        rehash: Rehash<'_>,
    ) -> Result<Self, Error> {
        let lines = lines_for(keys)?;
        let max_lines = lines_for(max_keys).unwrap_or(usize::MAX);
        Self::with_lines(
            lines,
            max_lines,
            backend,
            resize_mode,
            huge_pages,
            0,
            rehash,
        )
    }

    /// A map whose first table has `lines` lines, growing up to `max_lines` (a *fixed* map,
    /// which never grows nor shrinks, if that is at most `lines`).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub(crate) fn with_lines(
        lines: usize,
        max_lines: usize,
        backend: Backend,
        resize_mode: ResizeMode,
        huge_pages: bool,
        grow_ahead: usize,
        rehash: Rehash<'_>,
    ) -> Result<Self, Error> {
        let lines = lines.max(4);
        let loader = Loader::new(backend).ok_or(Error::UnsupportedBackend(backend))?;
        let alive = std::sync::Arc::new(StatUsize::new(0));
        let max_lines = max_lines.max(lines);
        let first = DenseTable::new(lines, huge_pages, rehash)?
            .counted_in(&alive)
            .growing(lines.saturating_mul(2) <= max_lines);
        let first = Box::new(first);
        Ok(DenseMap {
            tables: Tables::new(Box::into_raw(first)),
            preparer: Arc::new(Preparer::new(grow_ahead)),
            loader,
            huge_pages,
            resize_mode,
            max_lines,
            fixed: max_lines <= lines,
            alive,
            gate: WriterGate::new(),
            #[cfg(test)]
            refreshes: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Look the key up and do what `decide` says (`DenseTable::modify`), following it into
    /// the next table while the map migrates and starting a migration when there is no room.
    /// `Ok(Err(Shadowed))` if `decide` asked to store an absent key that an open shadow
    /// insert holds: nothing changed (a decision that stores nothing sees it absent).
    ///
    /// # Errors
    /// `Full` at `max_keys`, `HashCollisions`, `AllocationFailed`.
    pub(crate) fn modify<R>(
        &self,
        hash: u64,
        key: u64,
        rehash: Rehash<'_>,
        mut decide: impl FnMut(Option<u64>) -> (Action, R),
    ) -> Result<Result<R, Shadowed>, Error> {
        let guard = self.gate.enter();
        let mut table = self.tables.load(&guard);
        // Every write during a migration moves a chunk (the default layout's writes, one in
        // four): the same writes pause for a chunk in all (one per chunk), but the migration
        // ends four times sooner, so fewer writes meet a key with one line moved and move the
        // other, a random line, themselves. Measured in a population of 2^26 keys (Intel
        // Xeon, 2 threads, three pairs of runs): 3-12% more inserts a second, and fewer
        // inserts over 1 us, 8 us and 1 ms (the benchmark log,
        // `results/history/BENCHMARKS-log-2026-11.md`, "The dense layout, fifth part").
        if let Some(next) = table.migrating_into() {
            self.help_slow(table, next, rehash);
        } else {
            table.pace_preparation(hash);
        }
        loop {
            // A table being moved out of takes writes to lines not moved yet (the mover copies
            // them with the line). A key is the next table's to write once both its lines are
            // moved: a write refused a line (`Moved`), or finding no room, moves both (if
            // nobody has yet) and goes on there.
            match table.modify(hash, key, rehash, &mut decide) {
                Ok(Ok(answer)) => return Ok(Ok(answer)),
                Ok(Err(Refused::Shadowed)) => return Ok(Err(Shadowed)),
                Ok(Err(Refused::Full)) if table.migrating_into().is_none() => {
                    self.grow(table, hash, key, rehash, &guard)?;
                }
                Ok(Err(Refused::Full)) | Err(Moved) => {
                    let next = moved_on(table);
                    table.move_lines_of(hash, next, rehash);
                    table = next;
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Helpers of the map operations (`impl TableDriver` below: writes are `modify` decisions)
    // -----------------------------------------------------------------------------------------

    /// Carry out on a present key what `act` says of its value (`None`: nothing, a
    /// `Mismatch`); never an insert.
    #[inline(always)]
    fn remove_or_replace(
        &self,
        hash: u64,
        key: u64,
        rehash: Rehash<'_>,
        mut act: impl FnMut(u64) -> Option<Action>,
    ) -> Result<u64, Mismatch> {
        in_place(self.modify(hash, key, rehash, |current| match current {
            None => (Action::Keep, Err(Mismatch::Absent)),
            Some(value) => match act(value) {
                Some(action) => (action, Ok(value)),
                None => (Action::Keep, Err(Mismatch::Value(value))),
            },
        }))
    }

    /// The current table pinned for a batch: prefetches of many keys share one announcement.
    #[inline(always)]
    pub(crate) fn pin(&self) -> DensePinned<'_> {
        DensePinned {
            map: self,
            guard: reclaim::enter(),
        }
    }

    /// As `pin`, for a batch with writes: past the snapshot gate (its writes are then
    /// nested writers, which pass it).
    #[inline(always)]
    pub(crate) fn pin_writer(&self) -> DensePinned<'_> {
        DensePinned {
            map: self,
            guard: self.gate.enter(),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Single-thread use
    // -----------------------------------------------------------------------------------------

    /// Abort an open shadow insert of the key, leaked by shared use of a map now owned
    /// (`LocalMap`'s writes): one load while the table holds no shadow.
    fn abort_leaked_shadow(&mut self, hash: u64, key: u64, rehash: Rehash<'_>) {
        // SAFETY: `&mut self`: no other thread is in the map to replace the table.
        let table = unsafe { self.tables.load_unguarded() };
        // A migration that shared use left running: the shadow may be in the next table.
        if table.has_shadows() || table.migrating_into().is_some_and(DenseTable::has_shadows) {
            self.resolve_shadow(hash, key, None, rehash);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Migrations
    // -----------------------------------------------------------------------------------------

    /// How `table`, made by a growth, prepares its successor (twice its lines, if the map
    /// may grow that far): from 80% of its trigger's keys, whole by 95%.
    fn ahead_for(&self, table: &DenseTable) -> Option<Ahead> {
        let lines = table.lines();
        let next = lines
            .checked_mul(2)
            .filter(|&next| next <= self.max_lines)?;
        let plan = Plan {
            from_bins: lines,
            bins: next,
            // The lock bytes, one a line, in the plan's 64-byte units.
            links: next.div_ceil(64),
            huge_pages: self.huge_pages,
        };
        let trigger = table.trigger_keys();
        Ahead::between(
            &self.preparer,
            Some(plan),
            trigger / 100 * 80,
            trigger / 100 * 95,
        )
    }

    /// `table` (current, or the current table's successor, not migrating) had no room for
    /// the key: start or join a migration out of it (module docs, When a table is replaced).
    /// The key's lines are not moved here: the caller's loop moves them before it writes in
    /// the next table (a key written there while one of its old lines is not moved would be
    /// invisible to gets, which answer from the old table until both are). Blocking mode
    /// finishes the migration here.
    #[cold]
    #[inline(never)]
    fn grow(
        &self,
        table: &DenseTable,
        hash: u64,
        key: u64,
        rehash: Rehash<'_>,
        guard: &ReadGuard<'_>,
    ) -> Result<(), Error> {
        if table.crowded_by_hash(hash, key, rehash) {
            return Err(Error::HashCollisions);
        }
        // A table migrates only once it is current: finish the migration into it first.
        let current = self.tables.load(guard);
        if !core::ptr::eq(current, table) {
            if let Some(next) = current.migrating_into() {
                self.finish_migration(current, next, rehash);
                // `table` is current now and takes users' new keys without limit (the
                // `Full` may have been that limit): the write tries it again first.
                return Ok(());
            }
        }
        let aged = table.occupied() < table.trigger_keys()
            && table.away_share() >= AGED_AWAY_SHARE
            && table.aging() >= AGED_SINCE;
        let lines = if aged {
            #[cfg(test)]
            self.refreshes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            table.lines()
        } else {
            let doubled = table.lines().saturating_mul(2);
            if doubled > self.max_lines && table.migrating_into().is_none() {
                return Err(Error::Full);
            }
            doubled
        };
        self.migrate(table, lines, rehash).map(drop)
    }

    /// `table`'s next table: the one being filled, or a new one of `lines` lines (allocated
    /// here if this thread is the first to need one). Blocking mode finishes the move.
    fn migrate<'g>(
        &self,
        table: &'g DenseTable,
        lines: usize,
        rehash: Rehash<'_>,
    ) -> Result<&'g DenseTable, Error> {
        let next = match table.next_table(true) {
            Next::Ready(next) => next,
            Next::Idle => unreachable!("next_table(true) never answers Idle"),
            Next::Allocate => {
                let prepared = self.preparer.take(lines, lines.div_ceil(64));
                match DenseTable::new_in(lines, self.huge_pages, rehash, prepared) {
                    Ok(next) => {
                        let grows = lines.saturating_mul(2) <= self.max_lines;
                        let ahead = self.ahead_for(&next);
                        let next = next.counted_in(&self.alive).growing(grows).preparing(ahead);
                        table.install_next(Box::new(next))
                    }
                    Err(error) => {
                        table.abandon_allocation();
                        return Err(error);
                    }
                }
            }
        };
        if self.resize_mode == ResizeMode::Blocking {
            self.finish_migration(table, next, rehash);
        }
        Ok(next)
    }

    /// Migrate, at once, to a table of `lines` lines (if the current one has another count),
    /// moving every line before returning.
    fn resize_to(&self, lines: usize, rehash: Rehash<'_>) -> Result<(), Error> {
        // A preparation is for a doubling; a reserve or a shrink does not take it.
        self.preparer.discard();
        let guard = reclaim::enter();
        loop {
            let table = self.tables.load(&guard);
            if let Some(next) = table.migrating_into() {
                self.finish_migration(table, next, rehash);
                continue;
            }
            if table.lines() == lines {
                return Ok(());
            }
            let next = self.migrate(table, lines, rehash)?;
            self.finish_migration(table, next, rehash);
            return Ok(());
        }
    }

    // -----------------------------------------------------------------------------------------
    // Whole-map figures
    // -----------------------------------------------------------------------------------------

    /// `figure` of the newest table: the one being filled while a migration runs, else the
    /// current one.
    fn of_newest(&self, figure: impl Fn(&DenseTable) -> usize) -> usize {
        let guard = reclaim::enter();
        let table = self.tables.load(&guard);
        figure(table.migrating_into().unwrap_or(table))
    }

    /// `figure` summed over the current table and the one it migrates into, if any (keys are
    /// split between them while a migration runs).
    fn of_both(&self, figure: impl Fn(&DenseTable) -> usize) -> usize {
        let guard = reclaim::enter();
        let table = self.tables.load(&guard);
        figure(table) + table.migrating_into().map_or(0, figure)
    }

    fn lines(&self) -> usize {
        self.of_newest(DenseTable::lines)
    }

    /// Slots taken by keys and open shadows (`DenseTable::occupied`): what sizing counts.
    fn occupied(&self) -> usize {
        self.of_both(DenseTable::occupied)
    }
}

impl Lifecycle for DenseMap {
    type Table = DenseTable;

    fn tables(&self) -> &Tables<DenseTable> {
        &self.tables
    }

    fn resize_mode(&self) -> ResizeMode {
        self.resize_mode
    }

    /// The last chunk is moved: `next` takes users' inserts without limit, and replaces
    /// `table`.
    fn complete(&self, table: &DenseTable, next: &DenseTable) {
        next.open_to_inserts();
        self.tables.replace(table);
        // A preparation for another table's successor will not be used.
        self.preparer.discard_unless_from(next.lines());
    }
}

impl TableDriver for DenseMap {
    /// The backend in use (never `Auto`).
    fn backend(&self) -> Backend {
        self.loader.backend()
    }

    /// The value of the key word `key` (hashed to `hash`).
    #[inline]
    fn get(&self, hash: u64, key: u64, rehash: Rehash<'_>) -> Option<u64> {
        let guard = reclaim::enter();
        let mut table = self.tables.load(&guard);
        self.help_reading(table, rehash);
        loop {
            match table.get_with(self.loader, hash, key) {
                Ok(answer) => return answer,
                Err(Moved) => table = moved_on(table),
            }
        }
    }

    /// Gets of requests `0..n` (`locate(i)`: hash and key word; `answer(i, value)` takes the
    /// answer) through a lookahead ring `far` deep: one announcement and one backend call for
    /// them all; one by one from the first whose lines have moved.
    fn get_batch(
        &self,
        n: usize,
        far: usize,
        locate: impl Locate,
        mut answer: impl FnMut(usize, Option<u64>),
        rehash: Rehash<'_>,
    ) {
        let answered = {
            let guard = reclaim::enter();
            let table = self.tables.load(&guard);
            match table.get_batch_with(self.loader, n, far, &locate, &mut answer) {
                Ok(()) => return,
                Err(moved) => moved,
            }
        };
        for i in answered..n {
            let (hash, key) = locate.locate(i);
            answer(i, self.get(hash, key, rehash));
        }
    }

    /// Insert `value` if the key is absent.
    #[inline]
    fn insert(
        &self,
        hash: u64,
        key: u64,
        value: u64,
        rehash: Rehash<'_>,
    ) -> Result<Inserted, Error> {
        let inserted = self.modify(hash, key, rehash, |current| match current {
            Some(present) => (Action::Keep, Inserted::Exists(present)),
            None => (Action::Store(value), Inserted::New),
        })?;
        Ok(inserted.unwrap_or(Inserted::Shadowed))
    }

    /// Shadow-insert the key (`dense/mod.rs`, Shadow inserts: taken but hidden, its value kept
    /// by the caller) if it is absent and not shadowed.
    fn insert_shadow(&self, hash: u64, key: u64, rehash: Rehash<'_>) -> Result<Inserted, Error> {
        let inserted = self.modify(hash, key, rehash, |current| match current {
            Some(present) => (Action::Keep, Inserted::Exists(present)),
            None => (Action::Shadow, Inserted::New),
        })?;
        Ok(inserted.unwrap_or(Inserted::Shadowed))
    }

    /// Commit (`commit` is `Some(value)`: make the key present with it) or abort the shadow
    /// insert of the key; whether there was one. Follows the shadow into the next table as
    /// a write follows its key (`modify`).
    fn resolve_shadow(&self, hash: u64, key: u64, commit: Option<u64>, rehash: Rehash<'_>) -> bool {
        let guard = self.gate.enter();
        let mut table = self.tables.load(&guard);
        if let Some(next) = table.migrating_into() {
            self.help_slow(table, next, rehash);
        }
        loop {
            match table.resolve_shadow(hash, key, commit) {
                Ok(found) => return found,
                Err(Moved) => {
                    let next = moved_on(table);
                    table.move_lines_of(hash, next, rehash);
                    table = next;
                }
            }
        }
    }

    /// Insert `init` if absent, else replace the value `v` by `f(v)`; the previous value.
    #[inline]
    fn upsert_with(
        &self,
        hash: u64,
        key: u64,
        init: u64,
        mut f: impl FnMut(u64) -> u64,
        rehash: Rehash<'_>,
    ) -> Result<Option<u64>, Error> {
        loop {
            let upserted = self.modify(hash, key, rehash, |current| {
                (Action::Store(current.map_or(init, &mut f)), current)
            })?;
            match upserted {
                Ok(previous) => return Ok(previous),
                // An open shadow holds the key: wait for its commit or abort outside the
                // write, as the default layout's upserts do (`RawMap::upsert_with`), so a
                // snapshot, which waits for writes in progress, is never waited on by us.
                Err(Shadowed) => crate::sync::spin(),
            }
        }
    }

    /// Replace a present value `v` by `f(v)`: `(old, new)`, or `None` if absent.
    #[inline]
    fn update(
        &self,
        hash: u64,
        key: u64,
        mut f: impl FnMut(u64) -> u64,
        rehash: Rehash<'_>,
    ) -> Option<(u64, u64)> {
        in_place(self.modify(hash, key, rehash, |current| match current {
            Some(old) => {
                let new = f(old);
                (Action::Store(new), Some((old, new)))
            }
            None => (Action::Keep, None),
        }))
    }

    /// Replace the value by `new` if it is `current`: the value, or why not.
    #[inline]
    fn compare_exchange(
        &self,
        hash: u64,
        key: u64,
        current: u64,
        new: u64,
        rehash: Rehash<'_>,
    ) -> Result<u64, Mismatch> {
        self.remove_or_replace(hash, key, rehash, |value| {
            (value == current).then_some(Action::Store(new))
        })
    }

    /// Remove the key; its value.
    #[inline]
    fn remove(&self, hash: u64, key: u64, rehash: Rehash<'_>) -> Option<u64> {
        in_place(self.modify(hash, key, rehash, Action::remove))
    }

    /// Remove the key if `accept` takes its value: the value, or why not.
    #[inline]
    fn remove_if(
        &self,
        hash: u64,
        key: u64,
        mut accept: impl FnMut(u64) -> bool,
        rehash: Rehash<'_>,
    ) -> Result<u64, Mismatch> {
        self.remove_or_replace(hash, key, rehash, |value| {
            accept(value).then_some(Action::Remove)
        })
    }

    /// Start loading the key's home line in the current table.
    #[inline(always)]
    fn prefetch(&self, hash: u64) {
        let guard = reclaim::enter();
        self.tables.load(&guard).prefetch(hash);
    }

    /// Visit every `(key, value)` pair as of one instant (`RawMap::snapshot`, `gate.rs`):
    /// writers wait at the gate while the table is walked (gets and the moves of a migration
    /// go on; neither changes what is present). `InsideOperation` (nothing visited) if the
    /// calling thread is inside an operation of a floe map.
    #[cfg(not(floe_loom))]
    fn snapshot(&self, rehash: Rehash<'_>, visit: impl FnMut(u64, u64)) -> Result<(), Error> {
        self.gate.snapshot(|| self.for_each(rehash, visit))
    }

    /// Visit every `(key, value)` pair: a key present throughout is visited once, with a
    /// value it had during the walk; one inserted or removed meanwhile at most once. A
    /// migration in progress is finished first; one that starts meanwhile is followed (the
    /// keys of moved lines are looked up).
    fn for_each(&self, rehash: Rehash<'_>, mut visit: impl FnMut(u64, u64)) {
        let guard = reclaim::enter();
        let table = self.settled(&guard, rehash);
        let _walking = table.start_walk();
        // Keys met whose other line the walk has not reached yet: one removed and inserted
        // again into that line meanwhile is passed over there (`dense/mod.rs`, Walks). Likewise
        // the stashed keys, met first, in every line.
        let mut ahead = std::collections::HashSet::new();
        let mut stashed = std::collections::HashSet::new();
        table.walk(rehash, &mut |key, value, line| {
            if line == usize::MAX {
                if !stashed.insert(key) {
                    return;
                }
            } else if !stashed.is_empty() && stashed.contains(&key) {
                // (The emptiness test spares every key a hash while nothing is stashed.)
                return;
            } else {
                let (home, alt) = table.lines_of(rehash(key));
                let other = if line == home { alt } else { home };
                if other > line {
                    ahead.insert(key);
                } else if ahead.remove(&key) {
                    return;
                }
            }
            if let Some(value) = value.or_else(|| self.get(rehash(key), key, rehash)) {
                visit(key, value);
            }
        });
    }

    /// Remove every key that `keep(key, value)` does not keep, handing each removed value to
    /// `taken`: each key the walk meets (`for_each`) is removed by a `remove_if`, so a key
    /// written meanwhile is removed only if its value then is not kept. The walk runs with
    /// the writers held at the gate (`gate.rs`; the removals are nested writers, which pass
    /// it): no key is removed, inserted again into its other line and met a second time, so
    /// each key is removed at most once, all at one instant. From inside an operation of a
    /// floe map (which the gate would wait for) the walk runs without the gate.
    fn clear(
        &self,
        rehash: Rehash<'_>,
        keep: &dyn Fn(u64, u64) -> bool,
        mut taken: impl FnMut(u64),
    ) {
        let mut clear = || {
            self.for_each(rehash, |key, value| {
                if keep(key, value) {
                    return;
                }
                if let Ok(removed) = self.remove_if(rehash(key), key, |now| !keep(key, now), rehash)
                {
                    taken(removed);
                }
            });
        };
        #[cfg(not(floe_loom))]
        let walked = self.gate.snapshot(&mut clear).is_ok();
        #[cfg(floe_loom)]
        let walked = false;
        if !walked {
            clear();
        }
        // Emptied, the map will not grow soon: give back what was prepared for it.
        if self.len() == 0 {
            self.preparer.discard();
        }
    }

    /// Finish a migration in progress and abort the shadow inserts left open by shared use
    /// (`LocalMap::from`: owning the map, no handle is alive to resolve them); how many.
    fn settle_local(&mut self, rehash: Rehash<'_>) -> usize {
        let guard = reclaim::enter();
        let table = self.settled(&guard, rehash);
        match table.abort_shadows(rehash) {
            Ok(aborted) => aborted,
            Err(Moved) => unreachable!("no other thread is in an owned map to migrate it"),
        }
    }

    /// Check the current table's invariants (`DenseTable::check_invariants`) on a quiescent
    /// map, after finishing a migration; the number of keys.
    fn check_invariants(&self, rehash: Rehash<'_>) -> usize {
        let guard = reclaim::enter();
        self.settled(&guard, rehash).check_invariants(rehash).len()
    }

    /// Fault the current table's memory in (`Builder::populate`); `false` if the kernel
    /// could not.
    fn populate(&self) -> bool {
        let guard = reclaim::enter();
        self.tables.load(&guard).populate()
    }

    /// The figures `FlatMap::stats` reports, for the dense layout (a line counts as a bin;
    /// no link pool).
    fn stats(&self) -> Stats {
        let guard = reclaim::enter();
        let table = self.tables.load(&guard);
        let next = table.migrating_into();
        Stats {
            bins: table.lines(),
            link_buckets: 0,
            slots: table.lines() * LINE_SLOTS,
            link_reserve: 0,
            link_buckets_used: 0,
            link_buckets_lost: 0,
            allocated_bytes: table.table_bytes() + next.map_or(0, DenseTable::table_bytes),
            huge_pages: self.huge_pages,
            migrating: next.is_some(),
            live_tables: self.alive.load(StatOrdering::Relaxed),
            prepared_bytes: self.preparer.held_bytes(),
            prepared_growths: self.preparer.taken(),
            stashed: table.stashed(),
        }
    }

    /// Make room for `additional` more keys than the map holds (a larger table at once).
    ///
    /// # Errors
    /// `CapacityOverflow` (also past `max_keys`), `AllocationFailed`.
    fn reserve(&self, additional: usize, rehash: Rehash<'_>) -> Result<(), Error> {
        let wanted = self
            .occupied()
            .checked_add(additional)
            .ok_or(Error::CapacityOverflow)?;
        let lines = lines_for(wanted)?;
        if lines > self.max_lines {
            // As the default layout answers a reserve past its limit.
            return Err(Error::CapacityOverflow);
        }
        if lines <= self.lines() {
            return Ok(());
        }
        self.resize_to(lines, rehash)
    }

    /// Move into the smallest table that holds the keys (and open shadows) at half its
    /// trigger (at least 4 lines), if that is at most half the current one; whether it did.
    ///
    /// # Errors
    /// `AllocationFailed`.
    fn shrink_to_fit(&self, rehash: Rehash<'_>) -> Result<bool, Error> {
        if self.fixed {
            return Ok(false);
        }
        let lines = lines_for(self.occupied().saturating_mul(2))?;
        if lines.saturating_mul(2) > self.lines() {
            return Ok(false);
        }
        self.resize_to(lines, rehash)?;
        Ok(true)
    }

    /// Keys stored (a snapshot of counters: approximate while writes or a migration run).
    fn len(&self) -> usize {
        self.of_both(DenseTable::len)
    }

    /// Keys the current table holds at its trigger (where the map grows).
    fn capacity(&self) -> usize {
        self.of_newest(DenseTable::trigger_keys)
    }

    /// Bytes of table memory (both tables while migrating).
    fn table_bytes(&self) -> usize {
        self.of_both(DenseTable::table_bytes)
    }

    /// Requests `0..n` of a batch through a lookahead ring `far` deep, in order, under one pass
    /// of the writers' gate and one load of the table: each request's home line and lock
    /// byte are prefetched as it enters, its alternative line and lock byte half a window
    /// later, and it runs as its single-key operation does (a `modify` decision, or a get)
    /// on lines in the cache. A request the table refuses (no room, a moved line, an open
    /// shadow insert of its key) stops the batch before it runs, for the caller to run
    /// through the single-key path, which grows, follows and waits. `None` while the table
    /// migrates (the requests then go one by one).
    #[allow(clippy::too_many_arguments)]
    fn run_batch(
        &self,
        n: usize,
        far: usize,
        locate: impl Locate,
        op: impl Fn(usize) -> WordOp,
        add: impl Fn(usize, u64) -> u64,
        answer: impl FnMut(usize, WordDone) -> bool,
        rehash: Rehash<'_>,
    ) -> Option<Result<(), Stopped>> {
        struct Requests<'t, L, O, F, A> {
            table: &'t DenseTable,
            loader: Loader,
            rehash: Rehash<'t>,
            locate: L,
            op: O,
            add: F,
            answer: A,
            /// The request that stopped the ring ran.
            ran: bool,
        }
        impl<L, O, F, A> Requests<'_, L, O, F, A>
        where
            O: Fn(usize) -> WordOp,
            F: Fn(usize, u64) -> u64,
        {
            /// Run request `i`; `None` if the table refused it (nothing changed).
            #[inline(always)]
            fn apply(&self, i: usize, hash: u64, key: u64) -> Option<WordDone> {
                let table = self.table;
                let op = (self.op)(i);
                if op == WordOp::Get {
                    return table
                        .get_with(self.loader, hash, key)
                        .ok()
                        .map(WordDone::Get);
                }
                table.pace_preparation(hash);
                let rehash = self.rehash;
                // `modify`'s answer when it carried out the decision.
                fn done<R>(result: Result<Result<R, Refused>, Moved>) -> Option<R> {
                    result.ok()?.ok()
                }
                Some(match op {
                    WordOp::Get => unreachable!("answered above"),
                    WordOp::Insert(value) => {
                        WordDone::Insert(done(table.modify(hash, key, rehash, |current| {
                            match current {
                                Some(present) => (Action::Keep, Inserted::Exists(present)),
                                None => (Action::Store(value), Inserted::New),
                            }
                        }))?)
                    }
                    WordOp::Upsert(value) => WordDone::Upsert(done(table.modify(
                        hash,
                        key,
                        rehash,
                        |current| (Action::Store(value), current),
                    ))?),
                    WordOp::Add(delta) => {
                        WordDone::Add(done(table.modify(hash, key, rehash, |current| {
                            let new = current.map_or(delta, |old| (self.add)(i, old));
                            (Action::Store(new), current)
                        }))?)
                    }
                    WordOp::Put(value) => WordDone::Put(done(table.modify(
                        hash,
                        key,
                        rehash,
                        |current| match current {
                            Some(old) => (Action::Store(value), Some(old)),
                            None => (Action::Keep, None),
                        },
                    ))?),
                    WordOp::Remove => {
                        WordDone::Remove(done(table.modify(hash, key, rehash, Action::remove))?)
                    }
                })
            }
        }
        impl<L, O, F, A> ring::Stages for Requests<'_, L, O, F, A>
        where
            L: Locate,
            O: Fn(usize) -> WordOp,
            F: Fn(usize, u64) -> u64,
            A: FnMut(usize, WordDone) -> bool,
        {
            /// The key's hash and word.
            type Slot = (u64, u64);

            #[inline(always)]
            fn locate(&mut self, i: usize) -> (u64, u64) {
                self.locate.locate(i)
            }

            #[inline(always)]
            fn prefetch(&mut self, &(hash, _): &(u64, u64)) {
                self.table.prefetch_write(hash);
            }

            #[inline(always)]
            fn chase(&mut self, &mut (hash, _): &mut (u64, u64)) {
                self.table.prefetch_write_alt(hash);
            }

            #[inline(always)]
            fn run(&mut self, i: usize, (hash, key): (u64, u64)) -> Result<(), ()> {
                let done = self.apply(i, hash, key).ok_or(())?;
                if (self.answer)(i, done) {
                    Ok(())
                } else {
                    self.ran = true;
                    Err(())
                }
            }
        }
        // The writers' gate, held for the batch (nested in the caller's when it holds one).
        let guard = self.gate.enter();
        let table = self.tables.load(&guard);
        if table.migrating_into().is_some() {
            return None;
        }
        let mut requests = Requests {
            table,
            loader: self.loader,
            rehash,
            locate,
            op,
            add,
            answer,
            ran: false,
        };
        Some(ring::run(&mut requests, n, far).map_err(|at| Stopped {
            at,
            ran: requests.ran,
        }))
    }

    /// A key's second line is read only for keys away from home, which a lookup cannot tell
    /// before its first line has arrived: nothing to load ahead.
    #[inline(always)]
    fn prefetch_chain(&self, _hash: u64) -> bool {
        false
    }

    /// One step: every pair, read as `for_each` reads them. A dense map's keys are not
    /// ordered by hash in its lines (a key away from home sits in a line its hash does not
    /// order), so there are no runs of hashes to walk one at a time.
    fn walk_run(
        &self,
        _start: u64,
        rehash: Rehash<'_>,
        visit: impl FnMut(u64, u64),
    ) -> Option<u64> {
        self.for_each(rehash, visit);
        None
    }

    /// A dense map is never kept in files (persistence is the default layout's).
    #[cfg(not(floe_loom))]
    fn is_persistent(&self) -> bool {
        false
    }

    /// Nothing to sync: a dense map lives in memory.
    #[cfg(not(floe_loom))]
    fn checkpoint(&self) -> Result<(), Error> {
        Ok(())
    }

    /// The shared path's write (the dense layout has no single-thread one), after aborting a
    /// shadow of the key leaked by shared use.
    #[inline(always)]
    fn write_local<const MODE: u8>(
        &mut self,
        hash: u64,
        key: u64,
        value: u64,
        rehash: Rehash<'_>,
    ) -> Result<Option<u64>, Error> {
        // A shadow of the key leaked through `LocalMap::as_shared` would make the insert
        // refuse and the upsert wait for ever; owned, the map has no handle that could
        // resolve it: aborted, as the default layout's local writes do.
        self.abort_leaked_shadow(hash, key, rehash);
        match MODE {
            IF_ABSENT => self
                .insert(hash, key, value, rehash)
                .map(|inserted| match inserted {
                    Inserted::Exists(present) => Some(present),
                    Inserted::New | Inserted::Shadowed => None,
                }),
            IF_PRESENT => Ok(self
                .update(hash, key, |_| value, rehash)
                .map(|(old, _)| old)),
            _ => self.upsert_with(hash, key, value, |_| value, rehash),
        }
    }

    /// The shared path's remove.
    #[inline(always)]
    fn remove_local(&mut self, hash: u64, key: u64, rehash: Rehash<'_>) -> Option<u64> {
        self.remove(hash, key, rehash)
    }

    /// Nothing to record: a dense map lives in memory.
    #[cfg(not(floe_loom))]
    fn close(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// The answer of a write that stores only over a present key, which needs no room: `modify`
/// fails only when an insert finds none.
#[inline(always)]
fn in_place<R>(answer: Result<Result<R, Shadowed>, Error>) -> R {
    match answer {
        Ok(Ok(answer)) => answer,
        _ => unreachable!("a write in place never needs room nor sees a shadow"),
    }
}

/// `DenseMap::modify`'s answer to a store of a key that an open shadow insert holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shadowed;

/// A dense map with an announcement held: batches prefetch many keys under one.
pub(crate) struct DensePinned<'m> {
    map: &'m DenseMap,
    guard: ReadGuard<'static>,
}

impl DensePinned<'_> {
    /// Start loading the key's home line (a hint: a migration may move it meanwhile).
    #[inline(always)]
    pub(crate) fn prefetch_home(&self, hash: u64) {
        self.map.tables.load(&self.guard).prefetch(hash);
    }
}

/// The table a moved line's keys went to.
#[inline(always)]
fn moved_on(table: &DenseTable) -> &DenseTable {
    table
        .migrating_into()
        .expect("a line is moved only after its table's successor is installed")
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use std::sync::atomic::Ordering;

    use super::*;
    use crate::hash::splitmix as mixed;

    /// A map of the dense layout over `hash`, starting at 4 lines, growing without limit.
    fn small(hash: &dyn Fn(u64) -> u64) -> DenseMap {
        DenseMap::new(
            1,
            usize::MAX,
            Backend::Auto,
            ResizeMode::Incremental,
            false,
            hash,
        )
        .unwrap()
    }

    fn put(
        map: &DenseMap,
        hash: &dyn Fn(u64) -> u64,
        key: u64,
        value: u64,
    ) -> Result<Option<u64>, Error> {
        map.modify(hash(key), key, hash, Action::put(value))
            .map(|done| done.expect("no shadows in these tests"))
    }

    fn insert(
        map: &DenseMap,
        hash: &dyn Fn(u64) -> u64,
        key: u64,
        value: u64,
    ) -> Result<Option<u64>, Error> {
        map.modify(hash(key), key, hash, Action::insert(value))
            .map(|done| done.expect("no shadows in these tests"))
    }

    fn remove(map: &DenseMap, hash: &dyn Fn(u64) -> u64, key: u64) -> Option<u64> {
        map.modify(hash(key), key, hash, Action::remove)
            .expect("a remove never needs room")
            .expect("no shadows in these tests")
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u64),
        Put(u64, u64),
        Remove(u64),
        Get(u64),
        Reserve(usize),
        Shrink,
    }

    fn op(keys: u64) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Put(k, v)),
            3 => (0..keys).prop_map(Op::Remove),
            2 => (0..keys).prop_map(Op::Get),
            1 => (0..200usize).prop_map(Op::Reserve),
            1 => Just(Op::Shrink),
        ]
    }

    /// Run `ops` against the map and `std`'s map. Where `hash` crowds keys an insert may be
    /// refused (`HashCollisions`, or `DegenerateHasher` from a table size for which no empty
    /// keys exist), and so may a shrink or a reserve: each must change nothing.
    fn differential(hash: &dyn Fn(u64) -> u64, keys: u64, ops: &[Op]) {
        // Under Miri a short history: enough for a few growths from 4 lines.
        let ops = if cfg!(miri) {
            &ops[..ops.len().min(40)]
        } else {
            ops
        };
        let keys = if cfg!(miri) { keys.min(20) } else { keys };
        let map = small(hash);
        let mut model = HashMap::new();
        for op in ops {
            match *op {
                Op::Insert(k, v) => match insert(&map, hash, k, v) {
                    Err(Error::HashCollisions | Error::DegenerateHasher) => {
                        assert!(!model.contains_key(&k));
                    }
                    answer => {
                        assert_eq!(answer, Ok(model.get(&k).copied()), "insert {k}");
                        model.entry(k).or_insert(v);
                    }
                },
                Op::Put(k, v) => match put(&map, hash, k, v) {
                    Err(Error::HashCollisions | Error::DegenerateHasher) => {
                        assert!(!model.contains_key(&k));
                    }
                    answer => assert_eq!(answer, Ok(model.insert(k, v)), "put {k}"),
                },
                Op::Remove(k) => assert_eq!(remove(&map, hash, k), model.remove(&k)),
                Op::Get(k) => assert_eq!(map.get(hash(k), k, hash), model.get(&k).copied()),
                Op::Reserve(n) => match map.reserve(n, hash) {
                    Err(Error::DegenerateHasher) => {}
                    answer => {
                        answer.unwrap();
                        assert!(map.capacity() >= model.len() + n);
                    }
                },
                Op::Shrink => match map.shrink_to_fit(hash) {
                    Err(Error::DegenerateHasher) => {}
                    answer => drop(answer.unwrap()),
                },
            }
            assert_eq!(map.len(), model.len());
        }
        for k in 0..keys {
            assert_eq!(map.get(hash(k), k, hash), model.get(&k).copied(), "key {k}");
        }
        let mut out = vec![None; keys as usize];
        map.get_batch(
            keys as usize,
            4,
            crate::raw::ring::LocateWith(|i| (hash(i as u64), i as u64)),
            |i, answer| out[i] = answer,
            hash,
        );
        for (k, answer) in (0..keys).zip(out) {
            assert_eq!(answer, model.get(&k).copied(), "batched key {k}");
        }
    }

    /// Operations of a case of `matches_std_while_growing_and_shrinking`: under Miri still
    /// enough to grow from 4 lines and shrink back (its one case took 24 s there with 600).
    const GROWING_OPS: usize = if cfg!(miri) { 300 } else { 600 };

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 1 } else { 256 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Growth from 4 lines, shrinks and reserves in the history.
        #[test]
        fn matches_std_while_growing_and_shrinking(
            ops in prop::collection::vec(op(300), 0..GROWING_OPS),
        ) {
            differential(&mixed, 300, &ops);
        }

        /// Keys of five hashes only: a sixth same-hash key... past eight is a collision.
        #[test]
        fn matches_std_with_five_hashes(ops in prop::collection::vec(op(60), 0..300)) {
            differential(&|k| mixed(k % 5), 60, &ops);
        }
    }

    /// Insert/remove churn on a kept set at 98% of the trigger ages the lines (keys pushed into
    /// their alternatives, never moved back): the map refreshes into a table of the same size
    /// instead of failing or growing without end.
    #[test]
    fn churn_refreshes_instead_of_failing() {
        let cycles = if cfg!(miri) { 300 } else { 3_000_000 };
        let map = DenseMap::new(
            if cfg!(miri) { 100 } else { 53_000 },
            usize::MAX,
            Backend::Auto,
            ResizeMode::Incremental,
            false,
            &mixed,
        )
        .unwrap();
        let first_capacity = map.capacity();
        let kept = first_capacity * 98 / 100;
        let mut ring: std::collections::VecDeque<u64> = (0..kept as u64).collect();
        for &k in &ring {
            insert(&map, &mixed, k, k).unwrap();
        }
        for fresh in kept as u64..kept as u64 + cycles {
            assert_eq!(insert(&map, &mixed, fresh, fresh), Ok(None));
            let old = ring.pop_front().unwrap();
            assert_eq!(remove(&map, &mixed, old), Some(old));
            ring.push_back(fresh);
        }
        assert_eq!(map.len(), kept);
        for &k in &ring {
            assert_eq!(map.get(mixed(k), k, &mixed), Some(k));
        }
        // Refreshed (measured: three times, before a doubling), and doubled at most once: a
        // table ages more slowly at half the load.
        if cfg!(not(miri)) {
            assert!(map.refreshes.load(Ordering::Relaxed) >= 1);
        }
        assert!(
            map.capacity() <= 2 * first_capacity + 1,
            "{} against {first_capacity}",
            map.capacity()
        );
    }

    /// Threads writing their own keys while the map grows from 4 lines and one of them
    /// shrinks and reserves: after every step each reads back its own keys exactly.
    #[test]
    fn concurrent_writers_across_growth_and_shrink() {
        let threads = if cfg!(miri) { 2 } else { 4 };
        let rounds = if cfg!(miri) { 60 } else { 60_000 };
        let map = small(&mixed);
        std::thread::scope(|s| {
            for thread in 0..threads {
                let map = &map;
                s.spawn(move || {
                    let mut model: HashMap<u64, u64> = HashMap::new();
                    let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ (thread + 1);
                    let own = 2_000;
                    for round in 0..rounds {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let key = (thread << 32) | (rng % own);
                        match rng >> 60 {
                            0..=7 => {
                                assert_eq!(
                                    put(map, &mixed, key, round),
                                    Ok(model.insert(key, round))
                                );
                            }
                            8..=13 => assert_eq!(remove(map, &mixed, key), model.remove(&key)),
                            14 if thread == 0 => {
                                map.shrink_to_fit(&mixed).unwrap();
                            }
                            _ if thread == 0 => map.reserve(500, &mixed).unwrap(),
                            _ => {}
                        }
                        let probe = (thread << 32) | ((rng >> 20) % own);
                        assert_eq!(
                            map.get(mixed(probe), probe, &mixed),
                            model.get(&probe).copied()
                        );
                        if round % 4096 == 0 {
                            for (&k, &v) in &model {
                                assert_eq!(map.get(mixed(k), k, &mixed), Some(v), "key {k}");
                            }
                        }
                    }
                });
            }
        });
    }

    /// A key removed after the walk read it and inserted again into its other line, which
    /// the walk reaches later, is met once (`dense/mod.rs`, Walks): here the visitor itself
    /// removes `w` from its full home, fills the slot with another key and inserts `w` again,
    /// into its alternative. Fails if `for_each` forgets the keys it met.
    #[test]
    fn a_key_moved_to_its_other_line_during_a_walk_is_met_once() {
        let id = |key: u64| key;
        // 16 lines: the home is the top 4 bits, the alternative bits 28..32.
        let key = |home: u64, alt: u64, tag: u64| home << 60 | alt << 28 | tag;
        let map = DenseMap::with_lines(
            16,
            16,
            Backend::Scalar,
            ResizeMode::Incremental,
            false,
            0,
            &id,
        )
        .unwrap();
        let w = key(2, 9, 4);
        for tag in 1..=4 {
            assert_eq!(put(&map, &id, key(2, 9, tag), tag), Ok(None));
        }
        let mut met = 0;
        let mut others = 0;
        map.for_each(&id, |k, _| {
            if k != w {
                others += 1;
                return;
            }
            met += 1;
            if met == 1 {
                assert_eq!(map.remove(w, w, &id), Some(4));
                assert!(matches!(
                    map.insert(key(2, 9, 5), key(2, 9, 5), 5, &id),
                    Ok(Inserted::New)
                ));
                assert!(matches!(map.insert(w, w, 40, &id), Ok(Inserted::New)));
            }
        });
        assert_eq!(met, 1, "w was met twice");
        assert_eq!(others, 3);
        assert_eq!(map.get(w, w, &id), Some(40));
        assert_eq!(map.check_invariants(&id), 5);
    }

    /// Wrong sizes are errors, not panics.
    #[test]
    fn bad_sizes_are_errors() {
        let new = |keys, max| {
            DenseMap::new(
                keys,
                max,
                Backend::Auto,
                ResizeMode::Incremental,
                false,
                &mixed,
            )
        };
        assert!(matches!(
            new(usize::MAX, usize::MAX),
            Err(Error::CapacityOverflow)
        ));
        let map = new(10, 10).unwrap();
        assert!(matches!(
            map.reserve(usize::MAX, &mixed),
            Err(Error::CapacityOverflow)
        ));
        assert!(matches!(
            map.reserve(1 << 20, &mixed),
            Err(Error::CapacityOverflow)
        ));
        assert!(matches!(new(4, 4).map(|_| ()), Ok(())));
        let constant = |_: u64| 7;
        assert!(matches!(
            DenseMap::new(
                4,
                4,
                Backend::Auto,
                ResizeMode::Incremental,
                false,
                &constant
            ),
            Err(Error::DegenerateHasher)
        ));
    }
}
