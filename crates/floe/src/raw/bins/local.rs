//! Single-thread operations (DLHT's single-thread build), for `crate::LocalMap`.
//!
//! A table that one thread owns outright needs none of the bin protocols' read-modify-writes:
//! nobody can race a commit, a retire or a chaining, so each becomes a plain load and store
//! of the same words (`Relaxed` atomics: the same `mov` as a plain access on x86). The layout,
//! the states and the invariants of the essay in `raw/bins/mod.rs` are unchanged, so a table can go
//! from shared use to single-thread use and back (`LocalMap::from(FlatMap)`,
//! `LocalMap::into_shared`) without being rebuilt:
//!
//! - a write stores the new value over a present key's slot, or stores the pair into the
//!   first free slot and marks it `Valid` with a plain header store (the version still bumps,
//!   so invariant 1 holds for whoever uses the table shared later);
//! - a remove stores the dead key and marks the slot `Invalid`;
//! - a link bucket is taken from the pool by advancing the cursor with a store;
//! - growth moves every bin into the next table with plain stores (`move_bin_local`), and the
//!   old table is freed at once, since no reader can hold it.
//!
//! Every function here requires the caller to have the table to itself: no other thread
//! touches it (or the map's other tables) for the duration, and it is not migrating. The
//! driver's `*_local` methods state the same; `LocalMap` guarantees it by being `!Sync` and
//! taking `&mut self` for writes, which is also what makes freeing a replaced table at once
//! sound.

use super::{Full, LineLoader, RawTable};

/// `write_local` modes: insert or replace, insert only, replace only.
pub(crate) const UPSERT: u8 = 0;
pub(crate) const IF_ABSENT: u8 = 1;
pub(crate) const IF_PRESENT: u8 = 2;
use crate::{
    control::header::{slot_place, Header, Link, SlotState},
    sync::Ordering,
};

impl RawTable {
    /// Write `key -> value` into bin `bin_index` as `MODE` says (`UPSERT`, `IF_ABSENT`,
    /// `IF_PRESENT`): the value present before (replaced, unless `IF_ABSENT`), or `None` if
    /// the key was absent (inserted, unless `IF_PRESENT`). `Err` if an insert finds the bin or
    /// the link pool full (nothing changed).
    #[inline(always)]
    pub(crate) fn write_local<P: LineLoader, const MODE: u8>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
        value: u64,
    ) -> Result<Option<u64>, Full> {
        let bin = &self.bins[bin_index];
        let mut header = Header(bin.header.load(Ordering::Relaxed));
        debug_assert!(!header.moving(), "a single-thread table that is migrating");
        if !header.shadow().is_empty() {
            // Made through `LocalMap::as_shared` and leaked (a live `Shadow` handle would
            // borrow the map and forbid this `&mut` call): nothing can resolve it, and it
            // must not hide its key from this insert.
            header = self.settle_bin_local(bin_index);
        }
        if let Some(hit) = self.search(loader, bin, header, key) {
            if MODE != IF_ABSENT {
                self.slot(bin, hit.slot).store(key, value);
            }
            return Ok(Some(hit.value));
        }
        if MODE == IF_PRESENT {
            return Ok(None);
        }
        let slot = header.invalid().first().ok_or(Full::Bin)?;
        self.chain_local(bin_index, slot)?;
        self.slot(bin, slot).store(key, value);
        bin.header.store(
            header.with_slot(slot, SlotState::Valid).0,
            Ordering::Relaxed,
        );
        self.len.increment();
        Ok(None)
    }

    /// Remove `key` from bin `bin_index`, returning its value.
    #[inline(always)]
    pub(crate) fn remove_local<P: LineLoader>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
    ) -> Option<u64> {
        let bin = &self.bins[bin_index];
        let header = Header(bin.header.load(Ordering::Relaxed));
        debug_assert!(!header.moving(), "a single-thread table that is migrating");
        let hit = self.search(loader, bin, header, key)?;
        // Invariant 2: a free slot holds the dead key.
        self.slot(bin, hit.slot)
            .store(self.dead.of(bin_index), hit.value);
        bin.header.store(
            header.with_slot(hit.slot, SlotState::Invalid).0,
            Ordering::Relaxed,
        );
        self.len.decrement();
        Some(hit.value)
    }

    /// Make sure the bucket of `slot` is chained to bin `bin_index` (the single-thread form of
    /// `chain_for`: the pool cursor advances with a store).
    #[inline(always)]
    fn chain_local(&self, bin_index: usize, slot: usize) -> Result<(), Full> {
        let (Some(bucket), _) = slot_place(slot) else {
            return Ok(());
        };
        let bin = &self.bins[bin_index];
        let link = Link(bin.link.load(Ordering::Relaxed));
        if link.bucket(bucket).is_some() {
            return Ok(());
        }
        let width = Link::field_width(bucket);
        if self.at_link_mark(width) {
            return Err(Full::LinkMark);
        }
        let taken = self.next_link.load(Ordering::Relaxed);
        if taken + width > self.transfer_base {
            return Err(Full::LinkPool);
        }
        self.next_link.store(taken + width, Ordering::Relaxed);
        for line in &self.links[taken..taken + width] {
            self.fill_taken(&line.slots, self.dead.of(bin_index));
        }
        bin.link
            .store(link.with_bucket(bucket, taken as u32).0, Ordering::Relaxed);
        Ok(())
    }

    /// Move every key of bin `index` into `next` (whose bins only this call fills, as in a
    /// migration) with plain stores; the number of keys moved. Shadow slots move as shadows.
    pub(crate) fn move_bin_local(
        &self,
        index: usize,
        next: &RawTable,
        new_bin: &impl Fn(u64) -> usize,
    ) -> isize {
        let bin = &self.bins[index];
        let header = Header(bin.header.load(Ordering::Relaxed));
        let (dead, shadow_key) = (self.dead.of(index), self.dead.shadow_of(index));
        let mut moved = 0;
        for slot in header.occupied().iter() {
            let (key, value) = self.slot(bin, slot).load();
            if key == dead {
                // Retired (a shared user's remove that did not free it; nobody will now).
                continue;
            }
            if header.slot(slot) == SlotState::Shadow {
                debug_assert_eq!(key, shadow_key, "an unwritten shadow in an idle table");
                next.place(new_bin(value), value, 0, SlotState::Shadow);
            } else {
                next.place(new_bin(key), key, value, SlotState::Valid);
                moved += 1;
            }
        }
        moved
    }

    /// Abort every shadow insert of the table (for a map that leaves shared use: a shadow
    /// still open there has no handle left to resolve it, see `LocalMap::from`), and publish
    /// every `Inserting` slot; the number of shadows aborted.
    pub(crate) fn settle_local(&self) -> usize {
        (0..self.bins())
            .map(|index| {
                let before = Header(self.bins[index].header.load(Ordering::Relaxed));
                self.settle_bin_local(index);
                before.shadow().iter().count()
            })
            .sum()
    }

    /// `settle_local` for bin `index`; its new header.
    fn settle_bin_local(&self, index: usize) -> Header {
        let bin = &self.bins[index];
        let header = Header(bin.header.load(Ordering::Relaxed));
        let (shadows, inserting) = (header.shadow(), header.inserting());
        if shadows.is_empty() && inserting.is_empty() {
            return header;
        }
        let mut settled = header.with_published(inserting);
        for slot in shadows.iter() {
            self.slot(bin, slot).store(self.dead.of(index), 0);
            settled = settled.with_slot(slot, SlotState::Invalid);
        }
        // Invariant 1: every header change bumps the version (`with_published` alone does
        // not; re-setting the bin state does).
        let settled = settled.with_bin_state(settled.bin_state());
        bin.header.store(settled.0, Ordering::Relaxed);
        settled
    }
}
