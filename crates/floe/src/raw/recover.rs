//! Recovery: turning the table files a crashed process left into a map (persistent maps,
//! `store.rs`).
//!
//! # What a crash can leave
//!
//! A persistent table is a shared file mapping, so at the instant a process dies its files
//! hold exactly what its threads had stored; each 16-byte slot and each 8-byte word was
//! written whole (aligned atomic stores), so nothing is torn below that. What can be half done
//! is a protocol, stopped between two of its steps. Step by step (the essay in `mod.rs` and
//! `migrate.rs`), a slot of a bin that is not being moved can be:
//!
//! | header state | slot holds        | left by                                  | recovery  |
//! |--------------|-------------------|------------------------------------------|-----------|
//! | `Inserting`  | the dead key      | an insert between its commit and store   | free it   |
//! | `Inserting`  | a real key        | an insert that stored (linearized)       | kept      |
//! | `Valid`      | the dead key      | a delete between its retire and free     | free it   |
//! | `Shadow`     | anything          | an open shadow insert (its owner died)   | free it   |
//! | `Inserting`  | `(dead, key)`     | a shadow's commit before its store       | free it   |
//!
//! An insert is linearized at its store, a delete at its retire, a put at its CAS, so each
//! row keeps every operation that returned and gives the one in flight wholly or not at all.
//! A bin's `Frozen` state (a shrink deciding) is thawed; link buckets chained stay chained.
//!
//! A bin being moved (`InTransfer`) is different: its keys are split between the old bin and
//! its new bins. The move copies before it retires (`migrate.rs`, step 2), and retires a
//! moved slot to `(moved key, key)`, a word no delete, insert or shadow ever writes (a delete
//! retires to the dead key, keeping the value word). So for each slot of the old bin: a real
//! key is the key's newest value (moved or not, the old slot had it last: a put lands there
//! first and the copy follows); `(moved key, key)` means the key was moved and its value is
//! the new bin's copy; anything else held no live key (a key copied, then deleted before the
//! mover could take its copy out again, is in neither form in the old bin). The new bins
//! hold nothing else a user could have seen (nobody but the mover reads or writes them before
//! the old bin is `DoneTransfer`). Recovery therefore rebuilds the new bins from exactly that
//! set and marks the old bin done; bins already `DoneTransfer` are the new table's business
//! and bins not yet claimed are moved by the migration the open finishes.
//!
//! Recovery runs before any thread can reach the tables, so it uses plain stores.

use std::collections::HashMap;

use super::{layout::Bin, RawTable};
use crate::{
    control::header::{BinState, Header, Link, SlotState},
    sync::Ordering,
};

/// What a recovery sweep found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Live keys kept.
    pub(crate) keys: usize,
    /// Slots an interrupted insert, delete or shadow held, freed.
    pub(crate) freed: usize,
    /// Keys that do not hash to the bin they were found in (a damaged file), dropped.
    pub(crate) misplaced: usize,
    /// Link words naming buckets outside the pool (a damaged file), cut.
    pub(crate) bad_links: usize,
    /// Moves rebuilt (old bins or shrink groups left `InTransfer`).
    pub(crate) rebuilt: usize,
    /// Free slots holding something other than the dead key (left by a power loss), cleared.
    pub(crate) stale: usize,
}

impl Swept {
    pub(crate) fn add(&mut self, other: Swept) {
        self.keys += other.keys;
        self.freed += other.freed;
        self.misplaced += other.misplaced;
        self.bad_links += other.bad_links;
        self.rebuilt += other.rebuilt;
        self.stale += other.stale;
    }
}

impl RawTable {
    /// Cut link fields that name buckets outside the pool, and set the pool cursors past
    /// every chained bucket. First step of recovering any table.
    /// `write` false: only count the bad links.
    pub(crate) fn recover_links(&self, write: bool) -> usize {
        let pool = self.links.len();
        let (mut regular_end, mut reserve_end, mut cut) = (0, 0, 0);
        for bin in self.bins.iter() {
            let mut link = Link(bin.link.load(Ordering::Relaxed));
            for (bucket, field) in [(0usize, 0u64), (1, 32)] {
                let Some(first) = link.bucket(bucket) else {
                    continue;
                };
                let end = first + Link::field_width(bucket);
                if end > pool {
                    link = Link(link.0 & !(0xFFFF_FFFF << field));
                    cut += 1;
                } else if first < self.transfer_base {
                    regular_end = regular_end.max(end);
                } else {
                    reserve_end = reserve_end.max(end - self.transfer_base);
                }
            }
            // Written only if cut: a sweep that writes every line dirties every page of the
            // file, which on a disk costs a fault per page and the writeback of the table.
            if write && link.0 != bin.link.load(Ordering::Relaxed) {
                bin.link.store(link.0, Ordering::Relaxed);
            }
        }
        if write {
            self.next_link.store(regular_end, Ordering::Relaxed);
            self.transfer_next.store(reserve_end, Ordering::Relaxed);
        }
        cut
    }

    /// Settle every bin that is not `DoneTransfer` (table in the module docs): interrupted
    /// inserts, deletes and shadows undone or completed, `Frozen` thawed, slots whose bucket
    /// is not chained or whose key does not hash to the bin (`bin_of`) dropped. Sets the key
    /// count. Run after `recover_links` and, for a table mid-migration, `recover_moves`.
    ///
    /// `write` false: only count what a sweep would do (to check a cleanly closed map without
    /// changing its files).
    pub(crate) fn recover_bins(&self, bin_of: &dyn Fn(u64) -> usize, write: bool) -> Swept {
        let mut swept = Swept::default();
        for (index, bin) in self.bins.iter().enumerate() {
            let header = Header(bin.header.load(Ordering::Relaxed));
            if header.bin_state() == BinState::DoneTransfer {
                continue;
            }
            let (dead, shadow_key) = (self.dead.of(index), self.dead.shadow_of(index));
            let mut settled = header.with_bin_state(BinState::NoTransfer);
            let mut changed = header.bin_state() != BinState::NoTransfer;
            for slot in header.occupied().iter() {
                let chained = self.slot_chained(bin, slot);
                let keep = chained && {
                    let (key, _) = self.slot(bin, slot).load();
                    let live = header.slot(slot) != SlotState::Shadow
                        && key != dead
                        && key != shadow_key
                        && key != self.dead.moved_of(index);
                    if live && bin_of(key) != index {
                        swept.misplaced += 1;
                        false
                    } else {
                        live
                    }
                };
                if keep {
                    // An `Inserting` slot holding its key stays so: written, searchable, and
                    // published by the bin's next commit as in a running map (leaving it
                    // spares a write to nearly every bin after a fill).
                    swept.keys += 1;
                } else {
                    changed = true;
                    if chained && write {
                        self.slot(bin, slot).store(dead, dead);
                    }
                    settled = settled.with_slot(slot, SlotState::Invalid);
                    swept.freed += 1;
                }
            }
            // Invariant 2 for the free slots: each holds the dead key. A crash cannot break it
            // (a slot is written only once committed), but after a power loss a link bucket's
            // sector can be newer than its bin's: an insert's written slot beside a header
            // from before its commit.
            for slot in settled.invalid().iter() {
                if !self.slot_chained(bin, slot) {
                    continue;
                }
                let (key, _) = self.slot(bin, slot).load();
                if key != dead {
                    swept.stale += 1;
                    if write {
                        self.slot(bin, slot).store(dead, dead);
                    }
                }
            }
            if write && changed {
                bin.header.store(settled.0, Ordering::Relaxed);
            }
        }
        if write {
            self.len.add(swept.keys as isize);
        }
        swept
    }

    /// For a table that was migrating into `next` with `group` old bins per new bin (1 when
    /// growing): rebuild the new bins of every bin (or shrink group) a move left
    /// `InTransfer`, and mark it done (module docs). `new_bin` places a key in `next`. Run
    /// after `recover_links` on both tables.
    pub(crate) fn recover_moves(
        &self,
        next: &RawTable,
        group: usize,
        new_bin: &dyn Fn(u64) -> usize,
    ) -> usize {
        let mut rebuilt = 0;
        for first in (0..self.bins()).step_by(group) {
            let members = first..first + group;
            let moving = members.clone().any(|member| {
                Header(self.bins[member].header.load(Ordering::Relaxed)).bin_state()
                    == BinState::InTransfer
            });
            if !moving {
                continue;
            }
            let targets = if next.bins() >= self.bins() {
                let factor = next.bins() / self.bins();
                first * factor..(first + 1) * factor
            } else {
                first / group..first / group + 1
            };
            // What the new bins hold: copies of moved keys (one maybe stale or deleted).
            let mut copied = HashMap::new();
            for target in targets.clone() {
                let (dead, shadow_key) = (next.dead.of(target), next.dead.shadow_of(target));
                next.held_slots(target, |key, value| {
                    if key != dead && key != shadow_key {
                        copied.insert(key, value);
                    }
                });
            }
            let mut keys = Vec::new();
            for member in members.clone() {
                let (dead, shadow_key) = (self.dead.of(member), self.dead.shadow_of(member));
                let moved_key = self.dead.moved_of(member);
                self.held_slots(member, |key, value| match key {
                    _ if key == shadow_key || key == dead => {}
                    // A moved slot keeps the key in its value word; the copy has the value.
                    _ if key == moved_key => {
                        if let Some(&copy) = copied.get(&value) {
                            keys.push((value, copy));
                        }
                    }
                    _ => keys.push((key, value)),
                });
            }
            for target in targets {
                next.reset_bin(target);
            }
            for &(key, value) in &keys {
                next.place(new_bin(key), key, value, SlotState::Valid);
            }
            for member in members {
                let bin = &self.bins[member];
                let header = Header(bin.header.load(Ordering::Relaxed));
                bin.header.store(
                    header.with_bin_state(BinState::DoneTransfer).0,
                    Ordering::Relaxed,
                );
            }
            rebuilt += 1;
        }
        rebuilt
    }

    /// Call `each(key word, value word)` for every occupied slot of bin `index` that is not
    /// `Shadow` and whose bucket is chained: what a bin holds, before telling live keys from
    /// dead, shadow and moved words.
    fn held_slots(&self, index: usize, mut each: impl FnMut(u64, u64)) {
        let bin = &self.bins[index];
        let header = Header(bin.header.load(Ordering::Relaxed));
        for slot in header.occupied().iter() {
            if header.slot(slot) != SlotState::Shadow && self.slot_chained(bin, slot) {
                let (key, value) = self.slot(bin, slot).load();
                each(key, value);
            }
        }
    }

    /// Whether slot `slot`'s bucket is chained (always, for the primary bucket's) to a
    /// bucket inside the pool (a damaged link word may name one outside it: `recover_links`
    /// cuts those, but a check that does not write meets them).
    fn slot_chained(&self, bin: &Bin, slot: usize) -> bool {
        match crate::control::header::slot_place(slot) {
            (None, _) => true,
            (Some(bucket), _) => Link(bin.link.load(Ordering::Relaxed))
                .bucket(bucket)
                .is_some_and(|index| index < self.links.len()),
        }
    }

    /// Empty bin `index` (every slot free and holding the dead key, chained buckets kept).
    fn reset_bin(&self, index: usize) {
        let bin = &self.bins[index];
        let dead = self.dead.of(index);
        let header = Header(bin.header.load(Ordering::Relaxed));
        for slot in 0..crate::control::header::SLOTS_PER_BIN {
            if self.slot_chained(bin, slot) {
                self.slot(bin, slot).store(dead, dead);
            }
        }
        let mut empty = header.with_bin_state(BinState::NoTransfer);
        for slot in header.occupied().iter() {
            empty = empty.with_slot(slot, SlotState::Invalid);
        }
        bin.header.store(empty.0, Ordering::Relaxed);
    }

    /// Set the key count of a table no thread uses yet (a cleanly closed map's, as recorded).
    pub(crate) fn set_len(&self, keys: usize) {
        self.len.add(keys as isize);
    }

    /// Write the table's dirty pages to its file and wait (a persistent table; others: no-op).
    pub(crate) fn sync_file(&self) -> std::io::Result<()> {
        match &self.file {
            Some(file) => file.region.sync(),
            None => Ok(()),
        }
    }

    /// The table file's generation, for a persistent table.
    pub(crate) fn file_gen(&self) -> Option<u64> {
        self.file.as_ref().map(|file| file.gen)
    }
}
