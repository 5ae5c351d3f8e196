//! The dense layout's migration (`mod.rs`, "Migration: moving into a next table, of any
//! size"): the successor's bookkeeping (shared with the default layout, `lifecycle.rs`), a
//! table's signs that it has aged (keys away from home, a crowd no table of this size
//! separates), and moving a line: lock it, insert each of its keys into the next table (its
//! stash if no line there has room), then mark the line moved with the store that unlocks it.

use super::{
    Action, DenseTable, Refused, Writer, CHUNK_LINES, GROW_AT_PER_MILLE, LINE_SLOTS, MOVED,
    SPILL_SHIFT,
};
use crate::raw::{
    lifecycle::{AbortOnUnwind, Next},
    Moved,
};
use crate::{hash::fastrange, sync::Ordering};

impl DenseTable {
    /// The table this one is migrating into, if the migration has started.
    #[inline(always)]
    pub(crate) fn migrating_into(&self) -> Option<&DenseTable> {
        self.migration.next()
    }

    /// As [`Migration::next_table`].
    pub(crate) fn next_table(&self, start: bool) -> Next<'_, DenseTable> {
        self.migration.next_table(start)
    }

    /// Publish `next` (new and empty) as this table's successor, after `next_table` answered
    /// `Allocate`. Users may insert into it as many new keys as keep it at or below its
    /// trigger once every key of this table has arrived.
    pub(crate) fn install_next(&self, next: Box<DenseTable>) -> &DenseTable {
        let room = next.trigger_keys().saturating_sub(self.occupied());
        next.room.store(room, Ordering::Relaxed);
        let next = Box::into_raw(next);
        self.migration.install(next, 1);
        // SAFETY: just published; freed only after this table (the map's reclaimer).
        unsafe { &*next }
    }

    /// How much this table's keys have moved into their alternatives since it became
    /// current: the growth in [`away_share`](Self::away_share).
    pub(crate) fn aging(&self) -> f64 {
        self.away_share() - f64::from_bits(self.settled_away.load(Ordering::Relaxed))
    }

    /// The share of keys living in their alternatives, estimated from up to 1024 lines
    /// spread over the table (their spill counts against the keys they hold): about 0.17 at
    /// the trigger after inserts alone (module docs, the model), more once churn has aged the
    /// lines. Read without locks: an estimate.
    pub(crate) fn away_share(&self) -> f64 {
        let samples = self.nlines.min(1024);
        let (mut away, mut keys) = (0usize, 0usize);
        for i in 0..samples {
            let line = i * self.nlines / samples;
            away += usize::from(self.meta[line].0.load(Ordering::Relaxed) >> SPILL_SHIFT);
            keys += self.lines[line]
                .slots
                .iter()
                .filter(|slot| !self.is_empty_key(line, slot.load().0))
                .count();
        }
        away as f64 / keys.max(1) as f64
    }

    /// Whether both of the key's lines are full of keys with its hash: no table would
    /// separate another such key from them. Read under both lines' locks, so at one
    /// instant: read without them, a key displaced from the home to the alternative between
    /// the two lines' reads counted twice, and seven such keys passed for eight (an insert
    /// then answered `HashCollisions` with room in its home). `false` if a line has been
    /// moved (the caller's growth goes on in the next table).
    pub(crate) fn crowded_by_hash(&self, hash: u64, key: u64, rehash: &dyn Fn(u64) -> u64) -> bool {
        let (home, alt) = self.lines_of(hash);
        let Ok(_held) = self.lock_pair(home, alt) else {
            return false;
        };
        [home, alt].into_iter().all(|line| {
            (0..LINE_SLOTS).all(|slot| {
                let (stored, value) = self.load_locked(line, slot);
                // An open shadow holds its key in the value word (module docs, Shadow
                // inserts): it crowds the line as its key will.
                let stored = if stored == self.empty.shadow_of(line) {
                    value
                } else {
                    stored
                };
                !self.is_empty_key(line, stored) && stored != key && rehash(stored) == hash
            })
        })
    }

    /// As [`Migration::abandon`].
    pub(crate) fn abandon_allocation(&self) {
        self.migration.abandon();
    }

    /// This table is current now (its predecessor's migration is done): users' inserts are
    /// no longer limited.
    pub(crate) fn open_to_inserts(&self) {
        self.room.store(usize::MAX, Ordering::Relaxed);
        // Relaxed: an estimate for a heuristic (see `aging`).
        self.settled_away
            .store(self.away_share().to_bits(), Ordering::Relaxed);
    }

    /// Keys at the growth trigger.
    pub(crate) fn trigger_keys(&self) -> usize {
        // In u128: a table's slot count times 820 may not fit a usize on 32-bit targets.
        ((self.nlines * LINE_SLOTS) as u128 * GROW_AT_PER_MILLE as u128 / 1000) as usize
    }

    fn chunks(&self) -> usize {
        self.nlines.div_ceil(CHUNK_LINES)
    }

    /// Whether every line has been moved.
    pub(crate) fn migration_done(&self) -> bool {
        self.migration.done(self.chunks())
    }

    /// Claim and move one chunk of lines into `next`: `None` if none was left to claim,
    /// `Some(true)` if it was the last to finish (the caller then makes `next` current and
    /// retires this table), `Some(false)` otherwise. A line another thread is moving is
    /// waited for, so a finished chunk's lines are all moved.
    pub(crate) fn help_one_chunk(
        &self,
        next: &DenseTable,
        rehash: &dyn Fn(u64) -> u64,
    ) -> Option<bool> {
        let chunks = self.chunks();
        let chunk = self.migration.claim_chunk(chunks)?;
        let end = ((chunk + 1) * CHUNK_LINES).min(self.nlines);
        for line in chunk * CHUNK_LINES..end {
            self.move_line(line, next, rehash);
        }
        Some(self.migration.finish_chunk(chunks))
    }

    /// A writer's help: move both of the key's lines (if nobody has yet), after which the
    /// key is the next table's to write (module docs, Migration).
    pub(crate) fn move_lines_of(&self, hash: u64, next: &DenseTable, rehash: &dyn Fn(u64) -> u64) {
        let (home, alt) = self.lines_of(hash);
        self.move_line(home, next, rehash);
        self.move_line(alt, next, rehash);
    }

    /// Copy every key of `line` into `next`, then mark it moved (one Release store, which
    /// also unlocks it); or wait until the thread moving it has done so.
    fn move_line(&self, line: usize, next: &DenseTable, rehash: &dyn Fn(u64) -> u64) {
        self.prefetch_line(line);
        let Ok(mut held) = self.lock(line) else {
            return;
        };
        // A panicking hasher would leave the line locked for ever.
        let abort = AbortOnUnwind;
        // The keys' lines in `next` are all requested before the first is written, so their
        // misses overlap (after a doubling, a home key goes to one of two adjacent lines, an
        // away key anywhere). An open shadow insert moves as one.
        let mut entries = [(0u64, 0u64, Action::Keep); LINE_SLOTS];
        let mut taken = 0;
        let shadow = self.empty.shadow_of(line);
        for slot in 0..LINE_SLOTS {
            let (stored, value) = self.load_locked(line, slot);
            let (key, action) = if stored == shadow {
                (value, Action::Shadow)
            } else if !self.is_empty_key(line, stored) {
                (stored, Action::Store(value))
            } else {
                continue;
            };
            let hash = rehash(key);
            next.prefetch_for_lock(fastrange(hash, next.nlines));
            entries[taken] = (hash, key, action);
            taken += 1;
        }
        // Keys moved, which `len` counts (shadows are not).
        let mut moved = 0isize;
        for &(hash, key, action) in &entries[..taken] {
            next.place_moved(hash, key, action, rehash);
            moved += isize::from(action != Action::Shadow);
        }
        // The line's stashed keys and shadows (counted in its spill count), under its lock
        // as their writers are.
        if held.spill() > 0 && self.stash.len() > 0 {
            self.stash.for_each(|key, value| {
                let hash = rehash(key);
                if self.lines_of(hash).0 == line {
                    next.place_moved(hash, key, Action::Store(value), rehash);
                    moved += 1;
                }
            });
        }
        if held.spill() > 0 && self.shadows.load(Ordering::Relaxed) > 0 {
            for key in self.stash.shadow_keys() {
                let hash = rehash(key);
                if self.lines_of(hash).0 == line {
                    next.place_moved(hash, key, Action::Shadow, rehash);
                }
            }
        }
        core::mem::forget(abort);
        // The keys are counted in `next` now; this table counts those not yet moved.
        self.len.add(-moved);
        // Release (the unlock in `Held::drop`): pairs with the Acquire loads of the writer
        // byte in `is_moved` and `lock`, which then see the copies in `next`.
        held.value |= MOVED;
    }

    /// Stash a moved key (`Action::Store`) or shadow (`Action::Shadow`) that found no room
    /// (a key in its stash line, else the stash's list; a shadow in the stash's shadows: a
    /// move cannot fail), unless its home has a free slot again (then `false`: the caller
    /// tries again). Under the home's lock: the home is full, so it has no clean empty slot,
    /// and its raised spill count keeps it so (fact 3).
    #[cold]
    #[inline(never)]
    fn stash_moved(&self, hash: u64, key: u64, action: Action) -> bool {
        let (home, _) = self.lines_of(hash);
        let Ok(mut held) = self.lock(home) else {
            unreachable!("a table being filled is not migrating");
        };
        if self.free_slot(home).is_some() {
            return false;
        }
        held.add_spill();
        if let Action::Store(value) = action {
            self.stash.insert(hash, key, value, true);
            self.len.increment();
        } else {
            self.stash.add_shadow(key);
            self.shadows.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Store a key (`Action::Store`) or an open shadow insert (`Action::Shadow`) moved from
    /// the previous table. It is not here yet (nobody writes a key into the table being
    /// filled before both its old lines are moved, and a line is moved once), so this is an
    /// insert; its search for room may cover the whole table.
    pub(super) fn place_moved(
        &self,
        hash: u64,
        key: u64,
        action: Action,
        rehash: &dyn Fn(u64) -> u64,
    ) {
        // Most keys find their home with room: no search for the key, one lock.
        {
            let (home, _) = self.lines_of(hash);
            self.prefetch_line(home);
            let Ok(_held) = self.lock(home) else {
                unreachable!("a table being filled is not migrating");
            };
            if let Some(slot) = self.free_slot(home) {
                match action {
                    Action::Store(value) => self.place(home, slot, key, value),
                    _ => self.place_shadow(home, slot, key),
                }
                return;
            }
        }
        loop {
            match self.modify_as(Writer::Move, hash, key, rehash, |_| (action, ())) {
                Ok(Ok(())) => return,
                // No chain of moves home -> alternative makes room.
                Ok(Err(Refused::Full)) => {
                    if self.stash_moved(hash, key, action) {
                        return;
                    }
                }
                Ok(Err(Refused::Shadowed)) | Err(Moved) => {
                    unreachable!("a table being filled is not migrating and gets each key once")
                }
            }
        }
    }
}
