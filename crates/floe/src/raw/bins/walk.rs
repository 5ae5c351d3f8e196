//! The default layout's whole-table walks: validated snapshots of a bin (its present pairs at
//! one instant), the crowd read a growth checks before it gives up on a full bin
//! (`keys_of_bin`), `clear`'s removal of what a snapshot saw, and the invariant check.
//!
//! A snapshot reads a bin's header, its slots and the header again, and keeps the read only
//! if the header did not change between (a seqlock read of the whole bin, as a get reads one
//! key: `mod.rs`, "Get"); a bin being moved is waited for. Walks that must follow keys into
//! a next table while the map grows go by hash (`driver.rs`, `RawMap::walk_hashes`): each
//! hash is read in exactly one table.

use super::RawTable;
use crate::{
    control::header::{slot_place, BinState, Header, Link, SlotMask, SlotState},
    raw::layout::Bin,
    sync::{fence, spin, Ordering},
};

impl RawTable {
    /// Remove the keys of `snapshot` that `wanted` accepts, each as `remove` would: retire
    /// it with a CAS on the pair the snapshot saw, then free its slot. A CAS fails when the
    /// pair changed since the snapshot (a put replaced the value, a delete retired it, a
    /// growth moved it to the next table). `each(key, outcome)` hears of every wanted key:
    /// `Some(value)` if removed here, `None` if lost (for the caller to remove wherever it now
    /// is). So each key of the snapshot is removed once, and keys inserted
    /// after the snapshot stay: `clear` is one removal per key, never two (a second pass over
    /// the bin would remove a key inserted after the first, and the stress tests' checker
    /// rejects that history). Link buckets stay chained to their bins.
    pub(crate) fn clear_snapshot(
        &self,
        snapshot: &BinSnapshot,
        wanted: &dyn Fn(u64) -> bool,
        keep: &dyn Fn(u64, u64) -> bool,
        mut each: impl FnMut(u64, Option<u64>),
    ) {
        let bin = &self.bins[snapshot.bin];
        let dead = self.dead.of(snapshot.bin);
        let mut removed = 0isize;
        for &(slot, key, value) in snapshot.entries() {
            if !wanted(key) || keep(key, value) {
                continue;
            }
            // As a delete: a CAS that matches a real key retires the incarnation holding it
            // (invariant 3).
            if self
                .slot(bin, slot)
                .compare_exchange((key, value), (dead, value))
                .is_ok()
            {
                self.free_retired(bin, slot);
                removed += 1;
                each(key, Some(value));
            } else {
                each(key, None);
            }
        }
        self.len.add(-removed);
    }

    /// Re-derive the invariants that can be checked from a quiescent table (for tests).
    pub(crate) fn check_invariants(&self) -> usize {
        let mut live = 0;
        let mut bins_seen = 0;
        self.walk(|snapshot| {
            bins_seen += 1;
            let header = snapshot.header;
            let bin = &self.bins[snapshot.bin];
            assert_eq!(
                header.bin_state(),
                BinState::NoTransfer,
                "a quiescent current table with a frozen bin"
            );
            let link = Link(bin.link.load(Ordering::Relaxed));
            for slot in 0..crate::control::header::SLOTS_PER_BIN {
                let state = header.slot(slot);
                if state == SlotState::Shadow {
                    // An open shadow insert: written (quiescent), and not counted in `len`.
                    let (key, shadowed) = self.slot(bin, slot).load();
                    assert_eq!(
                        key,
                        self.dead.shadow_of(snapshot.bin),
                        "a shadow slot without the shadow key (unwritten or claimed)"
                    );
                    // Invariant 6: the shadowed key is not also present.
                    assert!(
                        snapshot.entries().iter().all(|&(_, k, _)| k != shadowed),
                        "key {shadowed} is both shadowed and present in bin {}",
                        snapshot.bin
                    );
                }
                let chained = match slot_place(slot) {
                    (Some(bucket), _) => link.bucket(bucket).is_some(),
                    (None, _) => true,
                };
                if state != SlotState::Invalid {
                    assert!(chained, "Valid slot {slot} in an unchained bucket");
                } else if chained {
                    // Invariant 2: a committed insert's slot holds no stale real key that
                    // step 2 of another insert could take for its own.
                    let (key, _) = self.slot(bin, slot).load();
                    assert_eq!(
                        key,
                        self.dead.of(snapshot.bin),
                        "free slot {slot} of bin {} holds a key",
                        snapshot.bin
                    );
                }
            }
            // Every searchable slot holds a real key (the snapshot leaves out dead ones): a
            // quiescent table has no unwritten insert and no retired, unfreed slot; an
            // `Inserting` slot is one written and not yet published.
            assert_eq!(
                snapshot.entries().len(),
                header.searchable().iter().count(),
                "a searchable slot holds the dead key: {header:?}"
            );
            live += snapshot.entries().len();
        });
        assert_eq!(
            bins_seen,
            self.bins(),
            "a quiescent current table with a moved bin"
        );
        assert_eq!(
            live,
            self.len(),
            "len counter disagrees with the live slots"
        );
        live
    }
}

/// One bin read as a validated snapshot: its present pairs at one instant.
pub(crate) struct BinSnapshot {
    /// The bin.
    pub(crate) bin: usize,
    /// The header the snapshot is consistent with.
    pub(crate) header: Header,
    entries: [(usize, u64, u64); crate::control::header::SLOTS_PER_BIN],
    len: usize,
}

impl BinSnapshot {
    /// `(slot, key, value)` of every searchable slot that held a real key.
    pub(crate) fn entries(&self) -> &[(usize, u64, u64)] {
        &self.entries[..self.len]
    }
}

impl RawTable {
    /// Every bin of this table not moved to a next table, as a validated snapshot (a bin
    /// being moved is waited for and skipped), for `check_invariants` and the unit tests.
    /// Walks that must follow keys into a next table go by hash (`RawMap::walk_hashes`).
    pub(crate) fn walk(&self, mut visit: impl FnMut(&BinSnapshot)) {
        for bin in 0..self.bins() {
            if let Some(snapshot) = self.snapshot(bin) {
                visit(&snapshot);
            }
        }
    }

    /// Call `visit` with every key that takes a slot of bin `bin_index` at one instant: the
    /// present ones and those of open shadow inserts (which move with the bin as present keys
    /// do); nothing if the bin has been moved to a next table. For `separable`, which must
    /// not count a key twice nor two keys that were never there together.
    ///
    /// A validated snapshot is not enough: two slot changes leave the header as it is, a
    /// delete's retire (key -> dead) and an insert's store into its committed slot (dead ->
    /// key), so one read of the slots under an unchanged header can hold a key read before its
    /// retire beside another stored after it. Hence a double collect: the bin's header and
    /// occupied slots are read twice, each read validated by its header, and only two identical
    /// reads are used. Every header change bumps its version, so the header held one value from
    /// the first read to the second (barring 2^32 changes between them). Under one header value
    /// a slot's key word goes at most through `Valid` key -> dead, `Inserting` dead -> key ->
    /// dead, or `Shadow` dead -> shadow pair -> claimed (a put changes only a value): it never
    /// holds again a key it lost without a header change (its free or its claim). So a key or
    /// shadow pair read in both reads stayed in its slot from the one to the other, and every
    /// key visited was in the bin at the instant between the reads. (A key stored and retired
    /// between them is missed: an undercount, which makes the caller grow instead of answering
    /// an error.)
    pub(crate) fn keys_of_bin(&self, bin_index: usize, visit: impl FnMut(u64)) {
        self.keys_of_bin_racing(bin_index, visit, |_| {});
    }

    /// [`keys_of_bin`](Self::keys_of_bin), calling `after_load(slot)` after each slot it
    /// loads: the unit tests change the bin there.
    pub(super) fn keys_of_bin_racing(
        &self,
        bin_index: usize,
        mut visit: impl FnMut(u64),
        mut after_load: impl FnMut(usize),
    ) {
        let dead = self.dead.of(bin_index);
        let shadow_key = self.dead.shadow_of(bin_index);
        loop {
            let Some((header, slots)) = self.occupied_slots(bin_index, &mut after_load) else {
                return;
            };
            let Some(again) = self.occupied_slots(bin_index, &mut after_load) else {
                return;
            };
            if again != (header, slots) {
                spin();
                continue;
            }
            for slot in header.searchable().iter() {
                // A searchable slot holding the dead key is mid-delete (already gone) or an
                // insert not yet written (not yet there).
                if slots[slot].0 != dead {
                    visit(slots[slot].0);
                }
            }
            for slot in header.shadow().iter() {
                // Otherwise claimed by a commit, an abort or a move (gone from the shadows).
                if slots[slot].0 == shadow_key {
                    visit(slots[slot].1);
                }
            }
            return;
        }
    }

    /// The header of `bin` (Acquire, for the slot loads that follow), or `None` if the bin has
    /// been moved to the next table (after waiting out the move).
    fn header_unless_moved(&self, bin: &Bin) -> Option<Header> {
        let header = Header(bin.header.load(Ordering::Acquire));
        if matches!(
            header.bin_state(),
            BinState::InTransfer | BinState::DoneTransfer
        ) {
            self.wait_transferred(bin);
            return None;
        }
        Some(header)
    }

    /// The header of bin `bin_index` and what its occupied slots held under it (the key, and
    /// a shadow's value; zeros for the rest), validated by an unchanged header; `None` if the
    /// bin has been moved to the next table (after waiting out the move).
    fn occupied_slots(
        &self,
        bin_index: usize,
        after_load: &mut impl FnMut(usize),
    ) -> Option<(Header, [(u64, u64); crate::control::header::SLOTS_PER_BIN])> {
        let bin = &self.bins[bin_index];
        loop {
            let header = self.header_unless_moved(bin)?;
            let shadows = header.shadow();
            let mut slots = [(0, 0); crate::control::header::SLOTS_PER_BIN];
            for slot in header.occupied().iter() {
                let (key, value) = self.slot(bin, slot).load();
                // A put changes a present key's value under the same header, and must not make
                // the reads differ: of a value, only a shadow's (its key) is kept.
                let shadow = !shadows.and(SlotMask::single(slot)).is_empty();
                slots[slot] = (key, if shadow { value } else { 0 });
                after_load(slot);
            }
            // As in `snapshot_bin`: a slot write the loads saw was published after a header
            // change that the re-check then sees.
            fence(Ordering::Acquire);
            if bin.header.load(Ordering::Relaxed) == header.0 {
                return Some((header, slots));
            }
            spin();
        }
    }

    /// Bin `bin` as a validated snapshot: its present pairs at one instant. `None` if the bin
    /// has been moved to the next table (after waiting out the move).
    pub(crate) fn snapshot(&self, bin: usize) -> Option<BinSnapshot> {
        let mut snapshot = BinSnapshot {
            bin,
            header: Header(0),
            entries: [(0, 0, 0); crate::control::header::SLOTS_PER_BIN],
            len: 0,
        };
        self.snapshot_bin(bin, &mut snapshot).then_some(snapshot)
    }

    /// Read bin `bin_index` into `snapshot`; `false` (and nothing) if the bin has been moved
    /// to a next table (waiting out a move).
    fn snapshot_bin(&self, bin_index: usize, snapshot: &mut BinSnapshot) -> bool {
        let bin = &self.bins[bin_index];
        let dead = self.dead.of(bin_index);
        snapshot.bin = bin_index;
        loop {
            snapshot.len = 0;
            let Some(header) = self.header_unless_moved(bin) else {
                return false;
            };
            for slot in header.searchable().iter() {
                let (key, value) = self.slot(bin, slot).load();
                // A searchable slot holding the dead key is mid-delete (already gone) or an
                // insert not yet written (not yet there).
                if key != dead {
                    snapshot.entries[snapshot.len] = (slot, key, value);
                    snapshot.len += 1;
                }
            }
            fence(Ordering::Acquire);
            if bin.header.load(Ordering::Relaxed) == header.0 {
                snapshot.header = header;
                return true;
            }
            spin();
        }
    }
}
