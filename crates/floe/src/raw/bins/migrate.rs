//! Growing a table without stopping it (DLHT §3.2.5, with IcebergHT's and SEPH's lessons on
//! tail latency).
//!
//! # The protocol
//!
//! A *migration* moves every key of an old table into a new one whose bin count is a whole
//! multiple `g` of the old one. Bins are picked with fastrange (`bin = hash * bins >> 64`), so
//! old bin `b` maps onto exactly the new bins `g*b .. g*b + g` and no other old bin maps there:
//! **each new bin is filled by the transfer of exactly one old bin**, so the transfer writes
//! the new bins with plain stores, no CAS and no search, and nobody else can touch them until
//! the old bin says the transfer is done.
//!
//! The old table's `Migration` holds the new table (allocated once, by the first thread that
//! needs it) and a chunk cursor. A bin moves in three steps:
//!
//! 1. **Claim**: CAS the old bin's header from `NoTransfer` to `InTransfer`. From then on no
//!    insert commits a slot of the bin (the commit CAS expects the `NoTransfer` header its
//!    search validated), gets and inserts that reach the bin wait, and the set of searchable
//!    slots can only shrink (a delete that retired its key before the claim may still free its
//!    slot). Inserts that committed before the claim complete (they are never abandoned): an
//!    `Inserting` slot still holding the dead key is waited for until it holds its key (its
//!    insert wrote it) or is no longer searchable (a delete had retired it and freed it).
//! 2. **Move**: for every searchable slot (`Valid`, or `Inserting` and written) holding
//!    `(key, value)`, first place `(key, value)` in its new bin, then replace it in the old
//!    slot by `(moved key, key)` with a 16-byte CAS (DLHT's *transfer key*: here the bin's
//!    moved key, `DeadKeys::moved_of`, which hashes elsewhere, so no search ever matches it,
//!    and is no bin's dead or shadow key; with the key kept in the value word it tells a
//!    persistent map's recovery which key went where, see `persist/recover.rs`). A put that changed
//!    the value first fails the CAS: the placed copy takes the new value and the CAS is
//!    retried; a delete that retired the key first (its slot then holds the dead key) fails it
//!    for good: the placed copy is taken out again. So no put is lost in the old table (one
//!    that read the slot before the CAS lands first, and its value is the one moved, or fails
//!    on the moved key and retries in the new table), a delete is linearized by its own retire
//!    CAS, which either precedes ours (the key is not moved) or fails (the delete retries and
//!    finds the key in the new table), and at every instant the key is in the old slot, the
//!    new bin, or
//!    both with the old slot's value the newer: a process that dies mid-move loses nothing
//!    (IcebergHT's order: copy, then retire). A `Shadow` slot (an open shadow insert) is taken
//!    with the same CAS its commit or abort would claim it with (one of us wins) and placed as
//!    a shadow in its new bin; a commit that won goes on in the old bin (we wait for its store
//!    and move the key), one that lost retries in the new table.
//! 3. **Publish**: CAS the header to `DoneTransfer` (Release); for a shrink's group, only once
//!    every bin of the group has been moved (see Shrinking). An operation that loads the
//!    header (Acquire) and sees `DoneTransfer` goes to the new table, where it finds exactly
//!    what the transfer placed.
//!
//! An insert that had not committed before the claim fails its commit CAS, searches again,
//! finds the bin moving and retries in the new table.
//!
//! # Who does the work, and how long anyone waits
//!
//! Every operation that finds its table migrating first *helps*: it claims the next chunk of
//! [`CHUNK_BINS`] old bins and moves them (incremental mode, the default), or keeps claiming
//! chunks until none is left (blocking mode, which finishes sooner at the cost of one long
//! operation per thread). An insert that finds its bin full moves that one bin itself, out of
//! order, and inserts into the new table. So an operation waits for at most one chunk of its
//! own work plus the transfer of the one bin it needs; no operation copies the whole table.
//! A chunk whose bin is being moved by someone else waits for that bin before counting the
//! chunk done, and the thread that finishes the last chunk makes the new table current and
//! retires the old one (freed once no thread can still be reading it, by the map's reclaimer).
//!
//! A table starts its own migration only once it is current, so a migration never writes into
//! a table that is itself migrating.
//!
//! # Shrinking
//!
//! `shrink_to_fit` migrates to a table with `g` times fewer bins (`g` a power of two up to 32,
//! dividing the bin count). Then new bin `j` takes old bins `g*j .. g*j + g` (fastrange again),
//! a *group*: whoever claims a group's first bin claims the others and moves all `g`, so each
//! new bin still has one writer. The group's bins are published (`DoneTransfer`) only after
//! all of them have been placed: an operation that sees one of them done goes to the new bin,
//! and must find it complete and no longer written with plain stores.
//!
//! A group may hold more keys than a bin takes, so before the shrink starts every bin is
//! *frozen* (`Frozen`): searches, puts and deletes go on, an insert waits (an insert that had
//! not committed when the bin froze fails its commit and waits; one that had committed
//! completes and is counted), so a frozen bin's key count can only fall. The shrinker then
//! counts each group's keys; only if every group fits one bin (15 keys, with its link buckets
//! taken from the new table's reserve) does it install the new table and move the groups,
//! claiming them from `Frozen` like any bin. Otherwise it tries a smaller `g`, and if none
//! fits it thaws the bins and gives up, having changed nothing. It holds the table's migration right throughout (`ALLOCATING`), so a
//! growth cannot start meanwhile: an insert that needs one waits for the shrink and joins it.
//!
//! # Link buckets
//!
//! A new bin can need more link buckets than its old bin had (8 + 7 keys split from one full
//! old bin need 3 + 1 lines where the old bin had 3); over any split of at most 15 keys the
//! new demand is at most 4/3 of the old bin's chained lines. The new table's pool therefore
//! ends with a *transfer reserve* of `4/3` of the old pool, taken from its own cursor; regular
//! inserts take from the part before it. Transfers can never run out (a shrink sizes the
//! reserve from the frozen groups' exact demand); should the argument fail, a transfer takes
//! from the regular pool before it gives up. A power loss can keep a later new bin's link
//! word but not an earlier one's, leaving buckets below the reserve's cursor chained nowhere;
//! the recovery hands those back to the transfers (`persist/recover.rs`), so the argument holds
//! across it.
//!
//! # Power loss during a move
//!
//! A persistent table on a disk (at `Durability::Process`) lives in the page cache, which the
//! kernel writes back page by page in no order anyone chooses: a power loss can keep an old
//! bin's retired slot (`(moved key, key)`, whose value is gone) without the new bin's page that
//! held its copy, and the key would be lost. So a growth into such a table (`orders_moves`)
//! moves a chunk in three passes (`transfer_ordered`): it claims the chunk's groups and copies
//! every key, syncs the new bins' pages and the link buckets chained to them (`sync_bins`, one
//! `msync` per chunk of [`ORDERED_CHUNK_BINS`]: the new bins are contiguous), and only
//! then retires the old slots and publishes the bins. A disk then never holds a retired slot
//! whose copy it lacks (the copy as of its sync, or newer). A put that changes a key between
//! its copy and its retire makes the mover rewrite the copy and sync it again before the retire
//! is retried: the copy's older value may predate a checkpoint that returned since, which
//! promised the newer one. A delete that retires a key first makes the mover take the copy out
//! and sync that too before the bin is published (a done bin's new bins are the truth for
//! recovery, and the copy would bring the key back). A bin moved out of order (by an insert that found it full) is a
//! chunk of its own, synced alone. What the disk may hold
//! otherwise, recovery settles (`persist/recover.rs`): a claim that did not reach it, copies of
//! keys not retired, a publish without the retires in a link bucket's page. On tmpfs a power loss
//! keeps nothing, so none of this runs there; at `Durability::Flush` each copy is written back
//! line by line instead (`persist/writeback.rs`, 4).
//!
//! The passes hold a chunk's bins `InTransfer` for an `msync`: an operation on one of them
//! waits that long (a device write, tens of microseconds to milliseconds), the price of a
//! growth on a disk.
//!
//! # Panics during a move
//!
//! A move calls the map's hasher (the key's bin in the new table). If that panics, the bin
//! would stay `InTransfer` and every thread that needs it would wait forever; the mover
//! therefore aborts the process instead, with a message (`AbortOnUnwind`).

use super::{Bin, RawTable};
use crate::raw::lifecycle::{AbortOnUnwind, Next};
use crate::{
    control::header::{BinState, Header, Link, SlotMask, SlotState},
    sync::{fence, spin, Ordering},
};

/// Old bins per chunk of migration work: moving one costs about one line read and up to `g`
/// line writes, so a chunk is a few microseconds to a few tens on tables far larger than the
/// caches.
pub(crate) const CHUNK_BINS: usize = 32;

/// Old bins per chunk of ordered moves ("Power loss during a move"): each chunk pays an
/// `msync`, a device write that costs about the same for one page as for thirty (measured:
/// with chunks of 32 bins a persistent map's population on ext4 ran at a fifth of its speed
/// without ordering), so ordered chunks are larger; 1024 old bins are 64 KiB, their new bins
/// 128 KiB when growing 2x. A multiple of every shrink group.
pub(crate) const ORDERED_CHUNK_BINS: usize = 1024;

impl RawTable {
    /// The table this one is migrating into, if the migration has started.
    #[inline(always)]
    pub(crate) fn migrating_into(&self) -> Option<&RawTable> {
        self.migration.next()
    }

    /// As [`Migration::next_table`].
    pub(crate) fn next_table(&self, start: bool) -> Next<'_, RawTable> {
        self.migration.next_table(start)
    }

    /// As [`Migration::install`].
    pub(crate) fn install_next(&self, next: *mut RawTable, group: usize) {
        self.migration.install(next, group);
    }

    /// As [`Migration::abandon`].
    pub(crate) fn abandon_allocation(&self) {
        self.migration.abandon();
    }

    /// As [`Migration::next_ptr`].
    pub(crate) fn next_ptr(&self) -> *mut RawTable {
        self.migration.next_ptr()
    }

    /// Link buckets taken from the transfer reserve (by the migration that filled this table).
    pub(crate) fn transfer_used(&self) -> usize {
        // The cursor runs past the reserve's end when a transfer finds it spent and takes
        // elsewhere (`take_for_transfer`).
        self.transfer_next
            .load(Ordering::Relaxed)
            .min(self.transfer_reserve())
    }

    /// Old bins per chunk of the migration: [`ORDERED_CHUNK_BINS`] when its new table orders
    /// its moves, [`CHUNK_BINS`] otherwise (and before it starts).
    fn chunk_bins(&self) -> usize {
        match self.migrating_into() {
            Some(next) if next.orders_moves() => ORDERED_CHUNK_BINS,
            _ => CHUNK_BINS,
        }
    }

    fn chunks(&self) -> usize {
        self.bins().div_ceil(self.chunk_bins())
    }

    /// Whether the migration is complete (every bin moved).
    pub(crate) fn migration_done(&self) -> bool {
        self.migration.done(self.chunks())
    }

    /// Claim and move one chunk into `next`. Returns `None` if no chunk was left to claim,
    /// `Some(true)` if this chunk was the last to finish (the caller must then make `next`
    /// current and retire `self`), `Some(false)` otherwise.
    pub(crate) fn help_one_chunk(
        &self,
        next: &RawTable,
        new_bin: &impl Fn(u64) -> usize,
    ) -> Option<bool> {
        let chunks = self.chunks();
        let chunk = self.migration.claim_chunk(chunks)?;
        let chunk_bins = self.chunk_bins();
        let end = ((chunk + 1) * chunk_bins).min(self.bins());
        let group = self.migration.group();
        // A chunk is a multiple of every group size, so chunks hold whole groups.
        if next.orders_moves() {
            self.transfer_ordered(chunk * chunk_bins..end, next, new_bin);
        } else {
            for first in (chunk * chunk_bins..end).step_by(group) {
                self.transfer_bin(first, next, new_bin);
            }
        }
        Some(self.migration.finish_chunk(chunks))
    }

    /// Move bin `index` (with the rest of its group when shrinking) into `next` (module
    /// docs), or, if another thread has claimed it, wait until that thread is done. Returns
    /// when the bin is `DoneTransfer`.
    pub(crate) fn transfer_bin(
        &self,
        index: usize,
        next: &RawTable,
        new_bin: &impl Fn(u64) -> usize,
    ) {
        let group = self.migration.group();
        let first = index / group * group;
        if next.orders_moves() {
            self.transfer_ordered(first..first + group, next, new_bin);
            return;
        }
        if self.claim_group(first, group, next) {
            let abort = AbortOnUnwind;
            // Every bin of the group is placed before any is published (module docs).
            let moved: isize = (first..first + group)
                .map(|member| self.drain_bin(member, next, new_bin))
                .sum();
            next.crash_point();
            self.publish_groups(&[first], group, next, moved);
            core::mem::forget(abort);
        }
        self.wait_transferred(&self.bins[index]);
    }

    /// Ordered moves (module docs, "Power loss during a move"): move the groups of bins
    /// `bins` (whole groups) that this thread claims in three passes, copying every key,
    /// syncing the new bins, then retiring the old slots and publishing; then wait for the
    /// groups other threads claimed.
    #[cold]
    #[inline(never)]
    fn transfer_ordered(
        &self,
        bins: core::ops::Range<usize>,
        next: &RawTable,
        new_bin: &impl Fn(u64) -> usize,
    ) {
        let group = self.migration.group();
        let owned: Vec<usize> = bins
            .clone()
            .step_by(group)
            .filter(|&first| self.claim_group(first, group, next))
            .collect();
        if let (Some(&lowest), Some(&highest)) = (owned.first(), owned.last()) {
            let abort = AbortOnUnwind;
            let mut copies = Vec::new();
            for &first in &owned {
                for member in first..first + group {
                    self.copy_bin(member, next, new_bin, |copy| copies.push(copy));
                }
            }
            // One sync over the new bins of every group owned (and of any others between
            // them, which only costs their pages' writes): every copy is on the disk before
            // any old slot is retired.
            let span = self.new_bins_of(lowest, group, next).start
                ..self.new_bins_of(highest, group, next).end;
            next.sync_bins(span);
            next.crash_point();
            let moved: isize = copies
                .into_iter()
                .map(|copy| self.retire_copied(copy, next))
                .sum();
            self.publish_groups(&owned, group, next, moved);
            core::mem::forget(abort);
        }
        for index in bins {
            self.wait_transferred(&self.bins[index]);
        }
    }

    /// Publish every bin of the groups (of `group` bins) starting at `firsts`, which this
    /// thread moved (`moved` keys in all), and move their count to `next`.
    fn publish_groups(&self, firsts: &[usize], group: usize, next: &RawTable, moved: isize) {
        for &first in firsts {
            for member in first..first + group {
                self.publish_done(member);
                next.crash_point();
            }
        }
        next.len.add(moved);
        self.len.add(-moved);
    }

    /// The bins of `next` that old bin `first`'s group (of `group` bins) moves into.
    fn new_bins_of(&self, first: usize, group: usize, next: &RawTable) -> core::ops::Range<usize> {
        if next.bins() >= self.bins() {
            let factor = next.bins() / self.bins();
            first * factor..(first + 1) * factor
        } else {
            first / group..first / group + 1
        }
    }

    /// Claim the group of `group` bins starting at `first` (it belongs to whoever claims its
    /// first bin; the others follow) and prepare its new bins; `false` if another thread
    /// claimed it.
    fn claim_group(&self, first: usize, group: usize, next: &RawTable) -> bool {
        if !self.claim(first) {
            return false;
        }
        for member in first + 1..first + group {
            let claimed = self.claim(member);
            debug_assert!(
                claimed,
                "a group's other bins are claimed by its owner only"
            );
        }
        // Touch the new bins with a write before anything reads them. A fresh page that is
        // read first gets the shared zero page, and the first write then replaces it
        // (copy-on-write) with a TLB shootdown to every CPU: measured, those interrupts made
        // transfers many times slower in a VM. Storing the 0 they hold is free, and nobody
        // else touches these bins until the group is `DoneTransfer`.
        for new in self.new_bins_of(first, group, next) {
            next.bins[new].header.store(0, Ordering::Relaxed);
        }
        true
    }

    /// CAS bin `index` to `InTransfer` from `NoTransfer` or `Frozen`; `false` if another
    /// thread claimed it first.
    fn claim(&self, index: usize) -> bool {
        let bin = &self.bins[index];
        let mut header = Header(bin.header.load(Ordering::Acquire));
        loop {
            match header.bin_state() {
                BinState::DoneTransfer | BinState::InTransfer => return false,
                BinState::NoTransfer | BinState::Frozen => {
                    let claimed = header.with_bin_state(BinState::InTransfer);
                    // AcqRel: Acquire for the slots published under `header`.
                    match bin.header.compare_exchange(
                        header.0,
                        claimed.0,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return true,
                        Err(now) => header = Header(now),
                    }
                }
            }
        }
    }

    /// Move the keys of bin `index` (claimed by the caller) into `next`, each copied and then
    /// retired before the next; the number moved.
    fn drain_bin(&self, index: usize, next: &RawTable, new_bin: &impl Fn(u64) -> usize) -> isize {
        let mut moved = 0;
        self.copy_bin(index, next, new_bin, |copy| {
            moved += self.retire_copied(copy, next);
        });
        moved
    }

    /// Copy the keys of bin `index` (claimed by the caller) into `next` (module docs, step 2),
    /// handing each copy to `copied`, which must retire it (`retire_copied`) before the bin is
    /// published; shadows move whole here.
    fn copy_bin(
        &self,
        index: usize,
        next: &RawTable,
        new_bin: &impl Fn(u64) -> usize,
        mut copied: impl FnMut(Copied),
    ) {
        let bin = &self.bins[index];
        // Acquire: the slots committed before our claim (its CAS read them too). The set of
        // searchable slots can only shrink from here.
        let claimed = Header(bin.header.load(Ordering::Acquire));
        let dead = self.dead.of(index);
        let shadow_key = self.dead.shadow_of(index);
        for slot in claimed.occupied().iter() {
            let slot_ref = self.slot(bin, slot);
            loop {
                let content = slot_ref.load();
                if content.0 == dead {
                    // An `Inserting` or `Shadow` slot with the dead key: an insert (or a
                    // shadow's commit) that took the slot before our claim and has not written
                    // it (never abandoned: wait for its key), a retired key its delete (or a
                    // shadow's abort) is about to free (wait until it is free). A `Valid` or
                    // `Invalid` one with the dead key: nothing to move. Relaxed: the state only
                    // ends the wait (no commit reuses the slot after our claim, so nothing read
                    // later depends on it); the key, once written, is taken by a CAS below.
                    let now = Header(bin.header.load(Ordering::Relaxed));
                    if now.unconfirmed().and(SlotMask::single(slot)).is_empty() {
                        break;
                    }
                    spin();
                    continue;
                }
                // A shadow insert (its key in the value word) moves as a shadow, taken with the
                // same CAS its commit or abort would claim it with (one of us wins).
                if content.0 == shadow_key {
                    let key = content.1;
                    if slot_ref.compare_exchange(content, (dead, key)).is_ok() {
                        next.place(new_bin(key), key, 0, SlotState::Shadow);
                        // Shadow keys are not counted in `len` until committed.
                        break;
                    }
                    continue;
                }
                // A real key: copy (the retire follows, module docs, step 2).
                let (key, value) = content;
                let placed = next.place(new_bin(key), key, value, SlotState::Valid);
                next.crash_point();
                copied(Copied {
                    bin: index,
                    slot,
                    key,
                    value,
                    placed,
                });
                break;
            }
        }
    }

    /// Retire the old slot of a key `copy_bin` copied (module docs, step 2): 1 if it moved, 0
    /// if a delete retired it first (the copy is taken out again).
    fn retire_copied(&self, copy: Copied, next: &RawTable) -> isize {
        let slot_ref = self.slot(&self.bins[copy.bin], copy.slot);
        let moved_key = self.dead.moved_of(copy.bin);
        let (key, mut value) = (copy.key, copy.value);
        loop {
            // `Durability::Flush`: the copy (as last rewritten) is on the media before the
            // retire can be (`persist/writeback.rs`, 4).
            next.write_back_bin(copy.placed.bin);
            match slot_ref.compare_exchange((key, value), (moved_key, key)) {
                Ok(()) => {
                    next.crash_point();
                    return 1;
                }
                // A put: the copy takes its value (and, ordered, is synced again: the value
                // it had may be older than what a checkpoint since has promised).
                Err((now, newer)) if now == key => {
                    value = newer;
                    next.rewrite_placed(copy.placed, key, value);
                    if next.orders_moves() {
                        next.sync_bins(copy.placed.bin..copy.placed.bin + 1);
                    }
                }
                // A delete retired the key first. The copy taken out is made durable before
                // the bin can be published: on the disk (or media) a done bin makes its new
                // bins the truth, and a copy left there would bring the key back, with a value
                // older than any put between the copy and the delete.
                Err(_) => {
                    next.unplace(copy.placed);
                    next.write_back_bin(copy.placed.bin);
                    if next.orders_moves() {
                        next.sync_bins(copy.placed.bin..copy.placed.bin + 1);
                    }
                    return 0;
                }
            }
        }
    }

    /// Mark bin `index` (claimed and drained by the caller) `DoneTransfer`.
    fn publish_done(&self, index: usize) {
        let bin = &self.bins[index];
        // Acquire: the move read some of the bin's slots without acquiring them (a key that a
        // delete had retired, read as dead by `copy_bin` or by `retire_copied`'s failed CAS).
        // With this fence those deletes happen before the Release below, so an operation that
        // sees the bin done and finds the key absent in `next` also follows them (a caller may
        // order its own state by a removal through the map: floe-server's removal clocks).
        fence(Ordering::Acquire);
        let mut header = Header(bin.header.load(Ordering::Relaxed));
        loop {
            // Release: the placements happen-before any operation that sees DoneTransfer
            // (Acquire) and goes to `next`.
            match bin.header.compare_exchange(
                header.0,
                header.with_bin_state(BinState::DoneTransfer).0,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                // A delete freed one of its retired slots meanwhile.
                Err(now) => header = Header(now),
            }
        }
    }

    /// Wait until another thread has moved `bin`.
    #[inline(never)]
    pub(crate) fn wait_transferred(&self, bin: &Bin) {
        while Header(bin.header.load(Ordering::Acquire)).bin_state() != BinState::DoneTransfer {
            spin();
        }
    }

    /// Wait until a shrink has moved `bin` or given up (the bin is no longer `Frozen`).
    #[inline(never)]
    pub(crate) fn wait_unfrozen(&self, bin: &Bin) {
        while Header(bin.header.load(Ordering::Acquire)).bin_state() == BinState::Frozen {
            spin();
        }
    }

    /// Move every bin from state `from` to `to` (a shrink's freeze and thaw), retrying on
    /// unrelated header changes. A bin in another state (a growth started meanwhile) stops
    /// the walk: the bins already changed are changed back and the answer is `false`.
    pub(crate) fn set_all_bins(&self, from: BinState, to: BinState) -> bool {
        for (index, bin) in self.bins.iter().enumerate() {
            if !Self::set_bin(bin, from, to) {
                for earlier in &self.bins[..index] {
                    Self::set_bin(earlier, to, from);
                }
                return false;
            }
        }
        true
    }

    fn set_bin(bin: &Bin, from: BinState, to: BinState) -> bool {
        let mut header = Header(bin.header.load(Ordering::Acquire));
        loop {
            if header.bin_state() != from {
                return false;
            }
            // AcqRel: the freeze orders the key counts read after it.
            match bin.header.compare_exchange(
                header.0,
                header.with_bin_state(to).0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => header = Header(now),
            }
        }
    }

    /// For a frozen table and groups of `group` bins: the link buckets the new bins need if
    /// no group holds more than one bin's 15 keys, `None` otherwise.
    pub(crate) fn group_demand(&self, group: usize) -> Option<usize> {
        let mut links = 0;
        for members in self.bins.chunks(group) {
            // Taken slots (shadow inserts, retired ones and committed inserts included): an
            // upper bound (frozen counts only fall).
            let keys: usize = members
                .iter()
                .map(|bin| {
                    Header(bin.header.load(Ordering::Acquire))
                        .occupied()
                        .iter()
                        .count()
                })
                .sum();
            links += match keys {
                0..=3 => 0,
                4..=7 => 1,
                8..=15 => 3,
                _ => return None,
            };
        }
        Some(links)
    }

    /// Put `(key, value)` into bin `index` of this (new) table, which only the caller can
    /// reach (module docs: each new bin is filled by one old bin's transfer, and nobody reads
    /// it before that old bin is `DoneTransfer`). Plain stores; their publication is the old
    /// bin's `DoneTransfer` CAS. A `Shadow` is placed as a shadow of `key` (`value` unused),
    /// under this table's shadow key for the bin.
    pub(in crate::raw) fn place(
        &self,
        index: usize,
        key: u64,
        value: u64,
        state: SlotState,
    ) -> Placed {
        self.try_place(index, key, value, state).expect(
            "a new bin receives the keys of one old bin or group (at most 15), and the \
             reserve covers the old pool's demand",
        )
    }

    /// [`place`](Self::place), or `None` if the bin has no free slot or no link bucket is
    /// left for it (only in a damaged file, which a recovery refuses).
    pub(in crate::raw) fn try_place(
        &self,
        index: usize,
        key: u64,
        value: u64,
        state: SlotState,
    ) -> Option<Placed> {
        let bin = &self.bins[index];
        let header = Header(bin.header.load(Ordering::Relaxed));
        let slot = header.invalid().first()?;
        if let (Some(bucket), _) = crate::control::header::slot_place(slot) {
            if !self.chain_for_transfer(index, bucket) {
                return None;
            }
        }
        if state == SlotState::Shadow {
            self.slot(bin, slot).store(self.dead.shadow_of(index), key);
        } else {
            self.slot(bin, slot).store(key, value);
        }
        bin.header
            .store(header.with_slot(slot, state).0, Ordering::Relaxed);
        Some(Placed { bin: index, slot })
    }

    /// Chain link bucket `bucket` (0: the single one, 1: the pair) to bin `index` of this
    /// (new) table if it is not chained yet, taking it as a transfer does
    /// (`take_for_transfer`); `false` if none is left. Plain stores, as `place`.
    pub(in crate::raw) fn chain_for_transfer(&self, index: usize, bucket: usize) -> bool {
        let bin = &self.bins[index];
        let link = Link(bin.link.load(Ordering::Relaxed));
        if link.bucket(bucket).is_some() {
            return true;
        }
        let width = Link::field_width(bucket);
        let Some(taken) = self.take_for_transfer(width) else {
            return false;
        };
        for line in &self.links[taken..taken + width] {
            self.fill_taken(&line.slots, self.dead_key(index));
        }
        bin.link
            .store(link.with_bucket(bucket, taken as u32).0, Ordering::Relaxed);
        true
    }

    /// Give a key `place`d in this (new) table a newer value (a put reached the old slot
    /// first). Plain store, as `place`.
    fn rewrite_placed(&self, placed: Placed, key: u64, value: u64) {
        let bin = &self.bins[placed.bin];
        self.slot(bin, placed.slot).store(key, value);
    }

    /// Take a `place`d key out again (a delete retired it in the old table first): the slot
    /// holds its bin's dead key and is free. A link bucket chained for it stays chained, as
    /// one chained for an insert that is later removed.
    fn unplace(&self, placed: Placed) {
        let bin = &self.bins[placed.bin];
        let dead = self.dead_key(placed.bin);
        self.slot(bin, placed.slot).store(dead, dead);
        let header = Header(bin.header.load(Ordering::Relaxed));
        bin.header.store(
            header.with_slot(placed.slot, SlotState::Invalid).0,
            Ordering::Relaxed,
        );
    }

    /// `width` consecutive link buckets for a transfer: from the transfer reserve; should the
    /// reserve's argument fail (module docs), from buckets a recovery found unchained, then
    /// from the regular pool; `None` if none is left.
    fn take_for_transfer(&self, width: usize) -> Option<usize> {
        let taken = self.transfer_next.fetch_add(width, Ordering::Relaxed);
        let index = self.transfer_base + taken;
        if index + width <= self.links.len() {
            return Some(index);
        }
        if let Some(index) = self.backing.take_unchained(width) {
            return Some(index);
        }
        let regular = self.next_link.fetch_add(width, Ordering::Relaxed);
        (regular + width <= self.transfer_base).then_some(regular)
    }
}

/// A key `copy_bin` copied and has not retired: its old bin and slot, what it held, and
/// where the copy is.
pub(super) struct Copied {
    bin: usize,
    slot: usize,
    key: u64,
    value: u64,
    placed: Placed,
}

/// Where `place` put a key: the new bin and the slot in it.
#[derive(Clone, Copy, Debug)]
pub(in crate::raw) struct Placed {
    bin: usize,
    slot: usize,
}
