//! Recovery: turning the table files a crashed process left into a map (persistent maps,
//! `persist/store.rs`).
//!
//! # What a crash can leave
//!
//! A persistent table is a shared file mapping, so at the instant a process dies its files
//! hold exactly what its threads had stored; each 16-byte slot and each 8-byte word was
//! written whole (aligned atomic stores), so nothing is torn below that. What can be half done
//! is a protocol, stopped between two of its steps. Step by step (the essays in
//! `bins/mod.rs` and `bins/migrate.rs`), a slot of a bin that is not being moved can be:
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
//! hold nothing else a user could have seen for this bin's keys (nobody but the mover reads
//! or writes a key there before its old bin is `DoneTransfer`). Recovery therefore brings
//! the new bins up to exactly that set and marks the old bin done; bins already
//! `DoneTransfer` are the new table's business and bins not yet claimed are moved by the
//! migration the open finishes (their new bins emptied first: after a power loss they may
//! hold copies whose claim never reached the disk). A shrink group publishes its bins one at
//! a time, so an operation may change the new bin for one member's keys while another member
//! is still `InTransfer`: the rebuild keeps the new bin's keys of the members already done and
//! takes only the others' from their old slots.
//!
//! After a power loss the disk holds each sector as of some instant, not one instant for the
//! whole file, and recovery may itself be cut short by another. Three rules keep both safe:
//!
//! - A bin counts as claimed if its line says so *or any of its slots holds its moved key*:
//!   a link bucket's page can be newer than the bin's line. The growth synced the copies
//!   before any retire (`migrate.rs`, "Power loss during a move"), so a retired slot's copy is
//!   on the disk.
//! - The rebuild works in place: a copy of a moved key (or any key of a member already done)
//!   is never rewritten or moved, a copy of a live key takes the old slot's value, a copy of
//!   nothing live is freed, and live keys without a copy are placed in free slots. Were the
//!   new bins emptied and refilled, a power loss between the two could leave a moved key's
//!   only copy erased.
//! - The old bins are marked done only after the new table is synced (`Sweeper::moves`): a
//!   done bin on the disk has its new bins' keys there too. Until then a second recovery
//!   finds the same old slots and rebuilds the same way.
//!
//! A link bucket's line of zeroes in a chained bucket was never written (its page never
//! reached the disk, while the bin's line that chained it and committed a key into it did).
//! Zero is the dead key of every bin but the one key 0 hashes to, and there such a line would
//! read as key 0 with value 0: recovery frees its slots (`in_unwritten_line`).
//!
//! # Link buckets a power loss unchained
//!
//! A move chains link buckets in the new table from the transfer reserve's cursor, so a
//! later new bin holds a later bucket. A power loss can keep the later bin's line and lose the
//! earlier one's: the earlier buckets are then below the cursor (which recovery sets past the
//! largest chained bucket) and chained nowhere, and the rebuild of the earlier bin's move
//! needs as many again. Were they left, every power loss during a move would spend reserve
//! that its argument (`bins/migrate.rs`, "Link buckets") counted once, and a shrink, whose
//! reserve is its exact demand, would run out. So recovery lists the buckets below the
//! cursors of a migration's new table that no bin chains (`Sweeper::unchained`), and
//! transfers take from that list (the shortest run that fits) before the regular pool. Its
//! mirror is a new bin whose line survived and whose link bucket's line did not: the slots
//! the header says are taken there hold nothing, and the rebuild frees them before it places
//! the old bins' keys (`recover_moves`), so it chains no bucket the move did not. Should a
//! damaged file still leave a key of an interrupted move no slot or bucket, the open refuses
//! the map (`Corrupt`) and marks no old bin done, so the old slots keep the only copies; what
//! the sweep had settled by then stays written (a refused open writes nothing only when the
//! refusal comes from the checks before the sweep), and a later open settles the same way
//! and refuses again. The groups no thread had claimed are moved afterwards by the migration
//! the open finishes, as a running migration moves them, and that cannot fail half way: so
//! the sweep chains to their new bins the link buckets that migration will need (by each new
//! bin's keys from the group; `chain_for_transfer`, from the same places a transfer takes
//! them), and a bucket it cannot have refuses the open as an unplaced key does.
//!
//! Recovery runs before any thread can reach the tables, so it uses plain stores.
//!
//! # In parallel
//!
//! Every step is local: `recover_links` and `recover_bins` look at one bin and its chained
//! buckets, `recover_moves` at one old bin (or shrink group) and the new bins only its keys
//! go to. So a [`Sweeper`] splits the bins into chunks and sweeps them on several threads,
//! each with a hasher of its own (built from the seed in the superblock), and adds up what
//! they found; on an undamaged file the map (its keys and values) and the report are the same
//! on any number of threads (each bin, its buckets and its new bins are written by the one
//! thread sweeping its chunk; only which reserve bucket a rebuilt move chains may differ).
//! Two bins share a link bucket only in a damaged file (every bucket is chained to one bin): there, what the
//! sweep makes of that bucket depends on which bin's thread gets to it first, as on one
//! thread it depends on the bins' order, and every access is atomic, so it is a damaged map
//! settled one way or another, never a data race. The pool cursors take the largest chained
//! bucket any chunk saw; a move that needs a bucket takes it with an atomic add (or, from the
//! buckets found unchained, under a lock).

use std::{
    collections::{HashMap, HashSet},
    ops::Range,
    sync::PoisonError,
};

use crate::raw::{
    dispatch::{dispatch, Loader},
    layout::{Bin, LinkBucket},
    loader::LineLoader,
    prefetch_line, RawTable, Swept,
};
use crate::{
    control::{
        group::Group,
        header::{
            slot_place, BinState, Header, Link, SlotMask, SlotState, LINK_SLOTS, PRIMARY_SLOTS,
            SLOTS_PER_BIN,
        },
    },
    hash::fastrange,
    hash::Rehash,
    sync::{AtomicU64, AtomicUsize, Ordering},
};

/// What [`RawTable::recover_links`] found in a range of bins: link words cut, and how far the
/// chained buckets reach into each part of the pool (the cursors start past them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Chained {
    pub(crate) cut: usize,
    regular_end: usize,
    reserve_end: usize,
}

/// Where an old bin's (or shrink group's) move stood at a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MoveState {
    /// No member claimed and no slot retired: nothing moved.
    Untouched,
    /// Some member claimed (or a slot retired), not every member done: to rebuild.
    Interrupted,
    /// Every member `DoneTransfer`: the new bins are the truth.
    Done,
}

/// A sweep's findings over part of a table, which the parts' findings add up to.
pub(crate) trait Tally: Default + Send {
    fn add(&mut self, other: Self);
}

impl Tally for Swept {
    fn add(&mut self, other: Swept) {
        Swept::add(self, other);
    }
}

impl Tally for Chained {
    fn add(&mut self, other: Chained) {
        self.cut += other.cut;
        self.regular_end = self.regular_end.max(other.regular_end);
        self.reserve_end = self.reserve_end.max(other.reserve_end);
    }
}

/// How many bins of a table are in each [`BinState`] (indexed by the state's number).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BinStates(pub(crate) [usize; 4]);

impl BinStates {
    pub(crate) fn of(&self, state: BinState) -> usize {
        self.0[state as usize]
    }
}

impl Tally for BinStates {
    fn add(&mut self, other: BinStates) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }
}

impl Tally for () {
    fn add(&mut self, (): ()) {}
}

impl<A: Tally, B: Tally> Tally for (A, B) {
    fn add(&mut self, other: (A, B)) {
        self.0.add(other.0);
        self.1.add(other.1);
    }
}

/// Bins a recovery thread takes at a time: 1 MiB of bins, so taking a chunk (one atomic add)
/// is nothing beside sweeping it, the bins of a fused pass (`recover_links` then
/// `recover_bins`) are still in the core's L2 cache for the second, and the threads finish
/// within a chunk of each other.
pub(crate) const CHUNK_BINS: usize = 1 << 14;

/// How far ahead of the bin it settles a sweep prefetches that bin's link buckets (and four
/// times as far, its line). A chained bucket is anywhere in the pool (buckets are handed out as
/// bins overflow, in no order), so each one is a cache miss, and a sweep that waits for each in
/// turn spends much of its time waiting: without these prefetches the sweep of a 2^26-key map
/// took 1.8 s on one thread, with them 1.1 s (the bins' own lines come in order, which the
/// hardware prefetches; asking four times as far ahead again took 5-10% off on the machine
/// measured). Distances of 8 to 32 bins measured alike.
const PREFETCH_BINS: usize = 16;

/// Runs `body` with a hash function on key words: a recovery thread's own hasher, built from
/// the seed the map's files record (`seed`), so that the facade's hasher need not be `Sync`.
pub(crate) type WithRehash = fn(seed: u64, body: &mut dyn FnMut(Rehash<'_>));

/// How a recovery sweep runs: on how many threads, and how each gets its hasher.
#[derive(Clone, Copy)]
pub(crate) struct Sweeper {
    pub(crate) loader: Loader,
    pub(crate) threads: usize,
    pub(crate) seed: u64,
    pub(crate) with_rehash: WithRehash,
}

impl Sweeper {
    /// Run `work` over `0..items` in chunks of `chunk` items, on up to `threads` threads (the
    /// calling one among them), each taking the next chunk when done with its last, and add up
    /// what the chunks found. Each chunk is swept by exactly one thread, so work whose chunks
    /// touch disjoint memory (a table's bins, in ranges) needs no more synchronisation than
    /// the threads' start and join, which `thread::scope` gives.
    pub(crate) fn run<T: Tally>(
        &self,
        items: usize,
        chunk: usize,
        work: &(dyn Fn(Range<usize>, Rehash<'_>) -> T + Sync),
    ) -> T {
        let chunk = chunk.max(1);
        let threads = self.threads.clamp(1, items.div_ceil(chunk).max(1));
        let next = AtomicUsize::new(0);
        let sweep = || {
            let mut found = T::default();
            (self.with_rehash)(self.seed, &mut |rehash| loop {
                // Relaxed: the counter only hands out distinct chunks; what a chunk's sweep
                // wrote reaches the caller through the threads' join.
                let start = next.fetch_add(chunk, Ordering::Relaxed);
                if start >= items {
                    break;
                }
                found.add(work(start..(start + chunk).min(items), rehash));
            });
            found
        };
        if threads == 1 {
            return sweep();
        }
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(sweep)).collect();
            let mut found = sweep();
            for helper in helpers {
                match helper.join() {
                    Ok(theirs) => found.add(theirs),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            found
        })
    }

    /// Settle a table no migration involves, in one pass: per chunk, its link words
    /// (`recover_links`), then its bins (`recover_bins`, while the chunk is still in cache).
    /// Sets the pool cursors; the key count is the caller's (`set_len`).
    pub(crate) fn settle(&self, table: &RawTable, write: bool) -> (Chained, Swept) {
        let bins = table.bins();
        let found = self.run(bins, CHUNK_BINS, &|range, rehash| {
            let chained = table.recover_links(range.clone(), write);
            let swept = dispatch!(self.loader, table, recover_bins(range, rehash, write));
            (chained, swept)
        });
        if write {
            table.set_link_cursors(found.0);
        }
        found
    }

    /// Count the table's bins by state, reading only their header words (in order, so the
    /// hardware prefetches the lines): an open checks them against what its superblock says
    /// before it sweeps or writes anything. A damaged file can hold any state in any bin, and
    /// a bin in a state no crash leaves there (`DoneTransfer` in a table no migration
    /// involves) would send every operation on its keys to a table that does not exist.
    pub(crate) fn states(&self, table: &RawTable) -> BinStates {
        self.run(table.bins(), CHUNK_BINS, &|range, _| {
            let mut states = BinStates::default();
            for bin in &table.bins[range] {
                let state = Header(bin.header.load(Ordering::Relaxed)).bin_state();
                states.0[state as usize] += 1;
            }
            states
        })
    }

    /// `recover_links` over the whole table (setting the pool cursors when `write`).
    pub(crate) fn links(&self, table: &RawTable, write: bool) -> Chained {
        let chained = self.run(table.bins(), CHUNK_BINS, &|range, _| {
            table.recover_links(range, write)
        });
        if write {
            table.set_link_cursors(chained);
        }
        chained
    }

    /// After [`links`](Self::links) over the table a migration was filling (`chained`, what
    /// it found): list the link buckets below its cursors that no bin chains, for its
    /// transfers to take first (module docs, "Link buckets a power loss unchained").
    pub(crate) fn unchained(&self, table: &RawTable, chained: Chained) {
        let marks: Vec<AtomicU64> = (0..table.links.len().div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        self.run(table.bins(), CHUNK_BINS, &|range, _| {
            table.mark_chained(range, &marks);
        });
        let chained_at = |bucket: usize| {
            // Relaxed: the sweep's threads were joined.
            marks[bucket / 64].load(Ordering::Relaxed) & (1 << (bucket % 64)) != 0
        };
        let mut runs: Vec<Range<usize>> = Vec::new();
        let below_cursors = (0..chained.regular_end)
            .chain(table.transfer_base..table.transfer_base + chained.reserve_end);
        for bucket in below_cursors.filter(|&bucket| !chained_at(bucket)) {
            match runs.last_mut() {
                Some(run) if run.end == bucket => run.end += 1,
                _ => runs.push(bucket..bucket + 1),
            }
        }
        *table
            .backing
            .unchained
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = runs;
    }

    /// `recover_bins` over the whole table.
    pub(crate) fn bins(&self, table: &RawTable, write: bool) -> Swept {
        self.run(table.bins(), CHUNK_BINS, &|range, rehash| {
            dispatch!(self.loader, table, recover_bins(range, rehash, write))
        })
    }

    /// `recover_moves` from `table` into `next` over the whole table, in chunks of whole
    /// groups (so no two threads write the same new bin); then, if any move was rebuilt,
    /// `next` synced and those moves marked done (`mark_moves_done`).
    pub(crate) fn moves(
        &self,
        table: &RawTable,
        next: &RawTable,
        group: usize,
    ) -> std::io::Result<Swept> {
        let groups = table.bins() / group;
        let chunk = (CHUNK_BINS / group).max(1);
        let swept = self.run(groups, chunk, &|range, rehash| {
            table.recover_moves(next, group, range, rehash)
        });
        // A key left unplaced: the open refuses the map, and no old bin may be marked done
        // (its slots hold the only copy of that key).
        if swept.rebuilt > 0 && swept.unplaced == 0 {
            next.crash_point();
            next.sync_file()?;
            next.crash_point();
            self.run(groups, chunk, &|range, _| {
                table.mark_moves_done(group, range);
                Swept::default()
            });
            next.crash_point();
        }
        Ok(swept)
    }
}

/// The lanes of `line` that hold `words[0]` (a bin's dead key), and those that hold any of
/// `words`. A function, not a closure, so that it inlines into the SIMD entry points with
/// their target features (a closure there is compiled without them: its vector compares
/// became calls, and the sweep ran three times slower).
#[inline(always)]
fn matching<L: Group>(line: &L, words: [u64; 3]) -> (u8, u8) {
    let first = line.match_word(words[0]);
    (
        first,
        first | line.match_word(words[1]) | line.match_word(words[2]),
    )
}

/// The key word of slot `slot` of a bin whose primary line is `primary` and whose chained
/// link lines are `chain` (0 for a slot in a bucket not chained). A function for the reason
/// [`matching`] is one.
#[inline(always)]
fn key_in<L: Group>(primary: &L, chain: &[Option<L>; 3], slot: usize) -> u64 {
    match slot_place(slot) {
        (None, lane) => primary.lane(2 + 2 * lane),
        (Some(bucket), lane) => chain[bucket].map_or(0, |line| line.lane(2 * lane)),
    }
}

impl RawTable {
    /// Cut link fields that name buckets outside the pool, in bins `range`, and say how far
    /// the chained buckets reach (`set_link_cursors` sets the cursors past them). First step
    /// of recovering any table. `write` false: only count the bad links.
    pub(crate) fn recover_links(&self, range: Range<usize>, write: bool) -> Chained {
        let pool = self.links.len();
        let mut chained = Chained::default();
        for bin in &self.bins[range] {
            let mut link = Link(bin.link.load(Ordering::Relaxed));
            for (bucket, field) in [(0usize, 0u64), (1, 32)] {
                let Some(first) = link.bucket(bucket) else {
                    continue;
                };
                let end = first + Link::field_width(bucket);
                if end > pool {
                    link = Link(link.0 & !(0xFFFF_FFFF << field));
                    chained.cut += 1;
                } else if first < self.transfer_base {
                    chained.regular_end = chained.regular_end.max(end);
                } else {
                    chained.reserve_end = chained.reserve_end.max(end - self.transfer_base);
                }
            }
            // Written only if cut: a sweep that writes every line dirties every page of the
            // file, which on a disk costs a fault per page and the writeback of the table.
            if write && link.0 != bin.link.load(Ordering::Relaxed) {
                bin.link.store(link.0, Ordering::Relaxed);
            }
        }
        chained
    }

    /// Set in `marks` (a bit per link bucket) the buckets bins `range` chain. Run after
    /// `recover_links` cut the links that name buckets outside the pool.
    fn mark_chained(&self, range: Range<usize>, marks: &[AtomicU64]) {
        for bin in &self.bins[range] {
            let link = Link(bin.link.load(Ordering::Relaxed));
            for bucket in 0..2 {
                let Some(first) = link.bucket(bucket) else {
                    continue;
                };
                for taken in first..(first + Link::field_width(bucket)).min(self.links.len()) {
                    // Relaxed: read after the sweep's threads are joined.
                    marks[taken / 64].fetch_or(1 << (taken % 64), Ordering::Relaxed);
                }
            }
        }
    }

    /// Set the pool cursors past every chained bucket (what `recover_links` found over every
    /// bin).
    pub(crate) fn set_link_cursors(&self, chained: Chained) {
        self.next_link.store(chained.regular_end, Ordering::Relaxed);
        self.transfer_next
            .store(chained.reserve_end, Ordering::Relaxed);
    }

    /// Settle bins `range` if not `DoneTransfer` (table in the module docs): interrupted
    /// inserts, deletes and shadows undone or completed, `Frozen` thawed, slots whose bucket
    /// is not chained or whose key does not hash to the bin (`rehash`) dropped. Counts the
    /// keys kept (the caller sets the table's count from the whole sweep's, `set_len`). Run
    /// after `recover_links` and, for a table mid-migration, `recover_moves`.
    ///
    /// Each line is read once, whole, with the backend's loader `p` (`dispatch.rs` compiles
    /// this for it): the keys come from the loaded lines, not from a 16-byte load per slot,
    /// which on a CPU without compile-time AVX is a call through a pointer each (a third of
    /// the first sweep's time went to those calls and their returns).
    ///
    /// `write` false: only count what a sweep would do (to check a cleanly closed map without
    /// changing its files).
    #[inline(always)]
    pub(crate) fn recover_bins<P: LineLoader>(
        &self,
        p: P,
        range: Range<usize>,
        rehash: Rehash<'_>,
        write: bool,
    ) -> Swept {
        let mut swept = Swept::default();
        let (bins, end) = (self.bins(), range.end);
        for index in range {
            if index + PREFETCH_BINS < end {
                self.prefetch_chain_checked(index + PREFETCH_BINS);
            }
            if index + 4 * PREFETCH_BINS < end {
                prefetch_line(self.bin_ptr(index + 4 * PREFETCH_BINS));
            }
            let bin = &self.bins[index];
            let header = Header(bin.header.load(Ordering::Relaxed));
            if header.bin_state() == BinState::DoneTransfer {
                continue;
            }
            let (dead, shadow_key) = (self.dead.of(index), self.dead.shadow_of(index));
            let moved_key = self.dead.moved_of(index);
            // Per line (the primary bucket, each chained bucket inside the pool), matched
            // whole: which slots hold the dead key, and which hold a word no live key can be
            // (the dead, shadow or moved key), as slot masks.
            let specials = [dead, shadow_key, moved_key];
            let link = Link(bin.link.load(Ordering::Relaxed));
            let primary = p.primary(bin);
            let (dead_lanes, not_key_lanes) = matching(&primary, specials);
            let mut chained = SlotMask::PRIMARY.0;
            let mut holds_dead = SlotMask::from_primary_lanes(dead_lanes).0;
            let mut not_key = SlotMask::from_primary_lanes(not_key_lanes).0;
            let mut chain: [Option<P::Line>; 3] = [None; 3];
            for (bucket, line) in chain.iter_mut().enumerate() {
                let Some(linked) = link.bucket(bucket).and_then(|at| self.links.get(at)) else {
                    continue;
                };
                let loaded = p.link(linked);
                let (dead_lanes, mut not_key_lanes) = matching(&loaded, specials);
                // A line of zeroes was never written (`in_unwritten_line`): it holds no key,
                // though 0 is not this bin's dead key (it is every other bin's), and its slots
                // are given the dead key below (dropped or stale).
                if dead != 0 && loaded.match_word(0) == 0xFF {
                    not_key_lanes = 0xFF;
                }
                chained |= SlotMask::link_bucket(bucket).0;
                holds_dead |= SlotMask::from_link_lanes(dead_lanes, bucket).0;
                not_key |= SlotMask::from_link_lanes(not_key_lanes, bucket).0;
                *line = Some(loaded);
            }
            // Kept: occupied, chained, not a shadow, holding a key (an `Inserting` slot
            // holding its key stays so: written, searchable, and published by the bin's next
            // commit as in a running map; leaving it spares a write to nearly every bin
            // after a fill), and that key hashes to this bin.
            let occupied = header.occupied().0;
            let mut kept = occupied & chained & !header.shadow().0 & !not_key;
            for slot in SlotMask(kept).iter() {
                let key = key_in(&primary, &chain, slot);
                if fastrange(rehash(key), bins) != index {
                    kept &= !SlotMask::single(slot).0;
                    swept.misplaced += 1;
                }
            }
            let dropped = occupied & !kept;
            swept.keys += kept.count_ones() as usize;
            swept.freed += dropped.count_ones() as usize;
            // Invariant 2 for the free slots: each holds the dead key. A crash cannot break it
            // (a slot is written only once committed), but after a power loss a link bucket's
            // sector can be newer than its bin's: an insert's written slot beside a header
            // from before its commit.
            let stale = header.invalid().0 & chained & !holds_dead;
            swept.stale += stale.count_ones() as usize;
            if !write {
                continue;
            }
            for slot in SlotMask((dropped & chained) | stale).iter() {
                self.slot(bin, slot).store(dead, dead);
            }
            if dropped != 0 || header.bin_state() != BinState::NoTransfer {
                let mut settled = header.with_bin_state(BinState::NoTransfer);
                for slot in SlotMask(dropped).iter() {
                    settled = settled.with_slot(slot, SlotState::Invalid);
                }
                bin.header.store(settled.0, Ordering::Relaxed);
            }
        }
        swept
    }

    /// Start loading the link buckets chained to bin `index` that lie inside the pool (a
    /// damaged link word may name one outside it).
    fn prefetch_chain_checked(&self, index: usize) {
        let link = Link(self.bins[index].link.load(Ordering::Relaxed));
        for bucket in 0..3 {
            if let Some(line) = link.bucket(bucket).and_then(|at| self.links.get(at)) {
                prefetch_line((line as *const LinkBucket).cast());
            }
        }
    }

    /// Where the move of the group of `group` old bins starting at `first` stood when the
    /// process died (module docs, "A bin being moved").
    fn move_state(&self, first: usize, group: usize) -> MoveState {
        let (mut claimed, mut done) = (0, 0);
        for member in first..first + group {
            let state = Header(self.bins[member].header.load(Ordering::Relaxed)).bin_state();
            claimed += usize::from(matches!(
                state,
                BinState::InTransfer | BinState::DoneTransfer
            ));
            done += usize::from(state == BinState::DoneTransfer);
        }
        if done == group {
            return MoveState::Done;
        }
        if claimed > 0 {
            return MoveState::Interrupted;
        }
        // No claim on the disk, but a retired slot is: after a power loss a link bucket's
        // page can be newer than its bin's line (the ordered moves synced the copies first,
        // so they are there).
        let retired = (first..first + group).any(|member| {
            let moved_key = self.dead.moved_of(member);
            let mut found = false;
            self.held_slots(member, |key, _| found |= key == moved_key);
            found
        });
        if retired {
            MoveState::Interrupted
        } else {
            MoveState::Untouched
        }
    }

    /// The new bins old bin `first`'s group moves into.
    fn targets_of(&self, first: usize, group: usize, next: &RawTable) -> Range<usize> {
        if next.bins() >= self.bins() {
            let factor = next.bins() / self.bins();
            first * factor..(first + 1) * factor
        } else {
            first / group..first / group + 1
        }
    }

    /// For a table that was migrating into `next` with `group` old bins per new bin (1 when
    /// growing): bring the new bins of every bin (or shrink group) among groups `groups`
    /// whose move was interrupted up to date with the old slots, in place (module docs);
    /// empty the new bins of a group not claimed. The old bins are left as they are: once
    /// `next` is synced, [`mark_moves_done`](Self::mark_moves_done) publishes them. `rehash`
    /// places keys; a key placed outside its group's new bins does not hash to the old bin it
    /// was found in (a damaged file) and is dropped, so a group writes only its own new bins.
    /// Run after `recover_links` on both tables.
    pub(crate) fn recover_moves(
        &self,
        next: &RawTable,
        group: usize,
        groups: Range<usize>,
        rehash: Rehash<'_>,
    ) -> Swept {
        let mut swept = Swept::default();
        let mut keys_of: Vec<usize> = Vec::new();
        for first in groups.map(|index| index * group) {
            let members = first..first + group;
            let targets = self.targets_of(first, group, next);
            match self.move_state(first, group) {
                MoveState::Done => continue,
                MoveState::Untouched => {
                    // Its new bins hold nothing anyone saw: copies whose claim never reached
                    // the disk (or, at `Durability::Flush`, the media), which no operation
                    // relied on (one that went on into a new bin made the old bin's
                    // `DoneTransfer` durable first, or, at `Process`, returned after the
                    // last checkpoint). The migration the open finishes moves the group
                    // again, into emptied bins. Empty new bins are left unwritten.
                    for target in targets.clone() {
                        if next.bins[target].header.load(Ordering::Relaxed) != 0 {
                            next.reset_bin(target);
                        }
                    }
                    // That migration cannot fail half way, so the link buckets it will need
                    // are chained to the new bins now, where a failure refuses the open
                    // (`unplaced`): for each new bin, by its keys from this group (an upper
                    // bound; the bin sweeps before the migration drop shadows and words
                    // that are no key). A group too small to need one is not hashed.
                    let occupied: usize = members
                        .clone()
                        .map(|member| {
                            Header(self.bins[member].header.load(Ordering::Relaxed))
                                .occupied()
                                .iter()
                                .count()
                        })
                        .sum();
                    if occupied <= PRIMARY_SLOTS {
                        continue;
                    }
                    keys_of.clear();
                    keys_of.resize(targets.len(), 0);
                    for member in members.clone() {
                        let (dead, shadow_key) =
                            (self.dead.of(member), self.dead.shadow_of(member));
                        self.held_slots(member, |key, _| {
                            if key != dead && key != shadow_key {
                                let bin = fastrange(rehash(key), next.bins());
                                if let Some(keys) = bin
                                    .checked_sub(targets.start)
                                    .and_then(|at| keys_of.get_mut(at))
                                {
                                    *keys += 1;
                                }
                            }
                        });
                    }
                    for (target, &keys) in targets.zip(&keys_of) {
                        swept.unplaced += keys.saturating_sub(SLOTS_PER_BIN);
                        for (bucket, first_slot) in
                            [(0, PRIMARY_SLOTS), (1, PRIMARY_SLOTS + LINK_SLOTS)]
                        {
                            if keys > first_slot && !next.chain_for_transfer(target, bucket) {
                                swept.unplaced += 1;
                            }
                        }
                    }
                    continue;
                }
                MoveState::Interrupted => {}
            }
            let state = |member: usize| {
                Header(self.bins[member].header.load(Ordering::Relaxed)).bin_state()
            };
            // The group's keys as the old bins not done hold them: live ones with their
            // values, and moved ones (whose value is their copy's).
            let mut live: HashMap<u64, u64> = HashMap::new();
            let mut moved: HashSet<u64> = HashSet::new();
            for member in members
                .clone()
                .filter(|&member| state(member) != BinState::DoneTransfer)
            {
                let (dead, shadow_key) = (self.dead.of(member), self.dead.shadow_of(member));
                let moved_key = self.dead.moved_of(member);
                self.held_slots(member, |key, value| match key {
                    _ if key == shadow_key || key == dead => {}
                    _ if key == moved_key => {
                        moved.insert(value);
                    }
                    _ => {
                        live.insert(key, value);
                    }
                });
            }
            // Each slot of the new bins, in place: a copy of a moved key, or any key of an
            // old bin already done, stays as it is (never rewritten, so a power loss during
            // this recovery cannot take the only copy of a moved key); a copy of a live key
            // takes the old slot's value; anything else (a copy whose key a delete retired,
            // a duplicate, a key from elsewhere) is freed. So is a slot that holds no key at
            // all (a shadow, whose owner died with the process; one whose bucket is not
            // chained or whose line never reached the disk; one holding a dead or shadow
            // word): the bin sweep would free it later, and freed now it takes a live key
            // below instead of making the rebuild chain a link bucket the move never needed.
            for target in targets.clone() {
                let bin = &next.bins[target];
                let (dead, shadow_key) = (next.dead.of(target), next.dead.shadow_of(target));
                let header = Header(bin.header.load(Ordering::Relaxed));
                for slot in header.occupied().iter() {
                    let chained = next.slot_chained(bin, slot);
                    let holds_a_word = header.slot(slot) != SlotState::Shadow
                        && chained
                        && !next.in_unwritten_line(bin, slot);
                    let (key, value) = if holds_a_word {
                        next.slot(bin, slot).load()
                    } else {
                        (dead, dead)
                    };
                    let keep = key != dead && key != shadow_key && {
                        let home = fastrange(rehash(key), self.bins());
                        if !members.contains(&home) {
                            swept.misplaced += 1;
                            false
                        } else if state(home) == BinState::DoneTransfer || moved.remove(&key) {
                            true
                        } else if let Some(newest) = live.remove(&key) {
                            if newest != value {
                                next.slot(bin, slot).store(key, newest);
                            }
                            true
                        } else {
                            false
                        }
                    };
                    if !keep {
                        if chained {
                            next.slot(bin, slot).store(dead, dead);
                        }
                        let now = Header(bin.header.load(Ordering::Relaxed));
                        bin.header
                            .store(now.with_slot(slot, SlotState::Invalid).0, Ordering::Relaxed);
                    }
                }
            }
            // Live keys without a copy yet.
            for (key, value) in live {
                let bin = fastrange(rehash(key), next.bins());
                if targets.contains(&bin) {
                    if next.try_place(bin, key, value, SlotState::Valid).is_none() {
                        swept.unplaced += 1;
                    }
                } else {
                    swept.misplaced += 1;
                }
            }
            swept.rebuilt += 1;
        }
        swept
    }

    /// After [`recover_moves`](Self::recover_moves) over every group and a sync of `next`:
    /// mark the old bins of every interrupted move `DoneTransfer`. Separate, so that a power
    /// loss during recovery can never leave a bin published whose new bins' keys are not on
    /// the disk yet.
    pub(crate) fn mark_moves_done(&self, group: usize, groups: Range<usize>) {
        for first in groups.map(|index| index * group) {
            if self.move_state(first, group) != MoveState::Interrupted {
                continue;
            }
            for bin in &self.bins[first..first + group] {
                let header = Header(bin.header.load(Ordering::Relaxed));
                bin.header.store(
                    header.with_bin_state(BinState::DoneTransfer).0,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Call `each(key word, value word)` for every occupied slot of bin `index` that is not
    /// `Shadow` and whose bucket is chained: what a bin holds, before telling live keys from
    /// dead, shadow and moved words.
    fn held_slots(&self, index: usize, mut each: impl FnMut(u64, u64)) {
        let bin = &self.bins[index];
        let header = Header(bin.header.load(Ordering::Relaxed));
        for slot in header.occupied().iter() {
            if header.slot(slot) != SlotState::Shadow
                && self.slot_chained(bin, slot)
                && !self.in_unwritten_line(bin, slot)
            {
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

    /// Whether slot `slot` (chained) lies in a link bucket whose line is all zeroes: a line
    /// never written since its file was made, whose slots hold no key. Only a power loss
    /// leaves one chained to a bin that claims a key in it (the bin's line, with the chaining
    /// and the commit, reached the disk and the bucket's never did); for every bin but one
    /// the zeroes are its dead key, but the bin key 0 hashes to has another (`DeadKeys`),
    /// and there they would read as key 0. Never ambiguous: a written line of that bin holds
    /// key 0 at most once and its other slots hold its dead key or other keys, none 0.
    fn in_unwritten_line(&self, bin: &Bin, slot: usize) -> bool {
        let (Some(bucket), _) = crate::control::header::slot_place(slot) else {
            return false;
        };
        Link(bin.link.load(Ordering::Relaxed))
            .bucket(bucket)
            .and_then(|index| self.links.get(index))
            .is_some_and(|line| line.slots.iter().all(|slot| slot.load() == (0, 0)))
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

    /// Set the key count of a table no thread uses yet (what a sweep counted, or a cleanly
    /// closed map's, as recorded).
    pub(crate) fn set_len(&self, keys: usize) {
        self.len.add(keys as isize);
    }

    /// Write the table's dirty pages to its file and wait (a persistent table; others: no-op).
    pub(crate) fn sync_file(&self) -> std::io::Result<()> {
        match self.backing.table_file() {
            Some(file) => {
                #[cfg(feature = "crash-points")]
                super::writeback::log::synced(
                    file.gen,
                    (0..file.region.bytes()).step_by(crate::raw::alloc::PAGE),
                    |offset| file.region.page_words(offset),
                );
                file.region.sync()
            }
            None => Ok(()),
        }
    }

    /// A checksum of the whole table file (bins, pool and reserved tail), computed in 1 MiB
    /// pieces on up to `threads` threads: per piece a CRC32, mixed with the piece's index and
    /// added up (so the pieces may be summed in any order, and a piece's damage cannot cancel
    /// another's by moving). Never 0 (0 in a superblock means "none recorded"). Only while no
    /// thread uses the table (a close, or an open before the map is handed out).
    pub(crate) fn file_checksum(&self, threads: usize) -> Option<u64> {
        const PIECE: usize = 1 << 20;
        let file = self.backing.table_file()?;
        let bytes = file.region.bytes();
        let pieces = bytes.div_ceil(PIECE);
        let next = AtomicUsize::new(0);
        let sum = || {
            let mut sum = 0u64;
            loop {
                // Relaxed: only hands out distinct pieces; the sums meet at the join.
                let piece = next.fetch_add(1, Ordering::Relaxed);
                if piece >= pieces {
                    return sum;
                }
                let crc = file.region.crc32(piece * PIECE..(piece + 1) * PIECE);
                let mixed = (u64::from(crc) << 32 | piece as u64)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .rotate_left(29);
                sum = sum.wrapping_add(mixed);
            }
        };
        let threads = threads.clamp(1, pieces.max(1));
        let total = std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(sum)).collect();
            let mut total = sum();
            for helper in helpers {
                match helper.join() {
                    Ok(theirs) => total = total.wrapping_add(theirs),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            total
        });
        Some(total.max(1))
    }

    /// The table file's generation, for a persistent table.
    pub(crate) fn file_gen(&self) -> Option<u64> {
        self.backing.table_file().map(|file| file.gen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::Inserted;
    use crate::raw::{bins::test_table_with_reserve, loader::ScalarLoader};

    const P: ScalarLoader = ScalarLoader;

    /// Each thread hashing a key to itself. (These tables are one chunk each, so one thread
    /// sweeps them whatever `threads` says.)
    const SWEEPER: Sweeper = Sweeper {
        loader: Loader::Scalar(ScalarLoader),
        threads: 2,
        seed: 0,
        with_rehash: |_, body| body(&|key| key),
    };

    /// The `k`th test key of bin `bin` of a table of four bins, under the identity hash
    /// (`fastrange` of it is `bin`, and `bin / 2` in a table of two).
    fn key(bin: usize, k: u64) -> u64 {
        ((bin as u64) << 62) | (k + 1)
    }

    /// A shrink of four bins into two (groups of two) whose transfer `place`d every key and
    /// retired none: old bins 0 and 1 hold 15 keys (new bin 0 needs all three link lines,
    /// chained first: buckets 0 to 2 of the reserve), old bin 2 holds 4 (new bin 1 needs
    /// one, bucket 3). Then the power fails: every old bin reached the disk claimed, and of
    /// the new bins only bin 1's line (bin 0's reads as zeroes: its header, link word and
    /// slots) and the link buckets' lines. The keys.
    fn shrink_cut_by_power_loss(old: &RawTable, next: &RawTable) -> Vec<u64> {
        let mut keys = Vec::new();
        for (bin, count) in [(0, 8), (1, 7), (2, 4)] {
            for k in 0..count {
                let key = key(bin, k);
                assert_eq!(old.insert(P, bin, key, key ^ 7).unwrap(), Ok(Inserted::New));
                keys.push(key);
            }
        }
        for &key in &keys {
            next.place(fastrange(key, 2), key, key ^ 7, SlotState::Valid);
        }
        assert_eq!(
            next.transfer_used(),
            4,
            "bin 0 took buckets 0 to 2, bin 1 bucket 3"
        );
        next.bins[0].header.store(0, Ordering::Relaxed);
        next.bins[0].link.store(0, Ordering::Relaxed);
        for slot in 0..crate::control::header::PRIMARY_SLOTS {
            next.slot(&next.bins[0], slot).store(0, 0);
        }
        claim_every_bin(old);
        keys
    }

    /// Mark every bin of `table` claimed by a move (`InTransfer`), as a move's claims that
    /// reached the disk leave them.
    fn claim_every_bin(table: &RawTable) {
        for bin in table.bins.iter() {
            let header = Header(bin.header.load(Ordering::Relaxed));
            bin.header.store(
                header.with_bin_state(BinState::InTransfer).0,
                Ordering::Relaxed,
            );
        }
    }

    /// The recovered reserve cursor stands past bucket 3, so buckets 0 to 2 are chained
    /// nowhere: the recovery must take them to place new bin 0's keys again. (Before, it found
    /// the reserve spent and no regular pool, and panicked: seen once in CI, in
    /// `tests/persist.rs`' power losses during a shrink.)
    #[test]
    fn an_interrupted_move_reuses_link_buckets_a_power_loss_unchained() {
        let (old, next) = (
            test_table_with_reserve(4, 8, 0),
            test_table_with_reserve(2, 0, 4),
        );
        let keys = shrink_cut_by_power_loss(&old, &next);
        let chained = SWEEPER.links(&next, true);
        SWEEPER.unchained(&next, chained);
        assert_eq!(
            next.backing.unchained.lock().unwrap().as_slice(),
            &[Range { start: 0, end: 3 }],
            "buckets 0 to 2"
        );
        let swept = SWEEPER.moves(&old, &next, 2).unwrap();
        assert_eq!((swept.rebuilt, swept.misplaced, swept.unplaced), (2, 0, 0));
        for &key in &keys {
            assert_eq!(
                next.get(P, fastrange(key, 2), key).unwrap(),
                Some(key ^ 7),
                "key {key:#x}"
            );
        }
        let found = SWEEPER.bins(&next, true);
        assert_eq!((found.keys, found.freed, found.stale), (keys.len(), 0, 0));
        next.set_len(found.keys);
        assert_eq!(next.check_invariants(), keys.len());
        assert!(next
            .backing
            .unchained
            .lock()
            .unwrap()
            .iter()
            .all(Range::is_empty));
        for bin in 0..4 {
            assert_eq!(old.move_state(bin / 2 * 2, 2), MoveState::Done);
        }
    }

    /// The same image without the list of unchained buckets (as a damaged file can leave a
    /// move no room): the keys that find no bucket are counted, the open refuses the map, and
    /// no old bin is marked done, so their only copies stay where they are.
    #[test]
    fn a_move_left_no_room_is_refused_and_not_marked_done() {
        let (old, next) = (
            test_table_with_reserve(4, 8, 0),
            test_table_with_reserve(2, 0, 4),
        );
        let keys = shrink_cut_by_power_loss(&old, &next);
        SWEEPER.links(&next, true);
        let swept = SWEEPER.moves(&old, &next, 2).unwrap();
        assert!(swept.unplaced > 0, "{swept:?}");
        assert_eq!(old.move_state(0, 2), MoveState::Interrupted);
        assert_eq!(old.move_state(2, 2), MoveState::Interrupted);
        for &key in &keys {
            let mut held = false;
            old.held_slots(fastrange(key, 4), |slot_key, value| {
                held |= slot_key == key && value == key ^ 7;
            });
            assert!(held, "key {key:#x} left its old slot");
        }
    }

    /// A shrink of four bins into two whose transfer placed the six keys of old bins 0 and 1
    /// in new bin 0 (three in its line, three in its one link bucket, the reserve's only
    /// bucket; the other group is empty), then a power
    /// loss that kept the bin's line (its header, link word and three copies) and lost the
    /// bucket's (zeroes). Its three slots hold no key: freed, they take the three keys again,
    /// and the rebuild needs no bucket. (Left occupied, the keys wanted a pair of buckets the
    /// table does not have, and a map a power loss had not damaged was refused.)
    #[test]
    fn a_rebuilt_move_frees_slots_whose_line_never_reached_the_disk() {
        let (old, next) = (
            test_table_with_reserve(4, 8, 0),
            test_table_with_reserve(2, 0, 1),
        );
        let keys: Vec<u64> = (0..2)
            .flat_map(|bin| (0..3).map(move |k| key(bin, k)))
            .collect();
        for &key in &keys {
            let bin = fastrange(key, 4);
            assert_eq!(old.insert(P, bin, key, key ^ 7).unwrap(), Ok(Inserted::New));
            next.place(0, key, key ^ 7, SlotState::Valid);
        }
        assert_eq!(next.transfer_used(), 1);
        for slot in next.links[0].slots.iter() {
            slot.store(0, 0);
        }
        claim_every_bin(&old);
        SWEEPER.unchained(&next, SWEEPER.links(&next, true));
        let swept = SWEEPER.moves(&old, &next, 2).unwrap();
        assert_eq!((swept.rebuilt, swept.unplaced), (2, 0), "{swept:?}");
        let found = SWEEPER.bins(&next, true);
        assert_eq!(found.keys, keys.len());
        next.set_len(found.keys);
        for &key in &keys {
            assert_eq!(next.get(P, 0, key).unwrap(), Some(key ^ 7), "key {key:#x}");
        }
        assert_eq!(next.check_invariants(), keys.len());
        assert_eq!(
            next.link_buckets_used(),
            1,
            "no bucket beyond the reserve's one"
        );
    }

    /// A shrink of four bins into two that no thread had claimed when the process died: the
    /// migration the open finishes will move both groups, and a move cannot fail half way,
    /// so the sweep chains the link buckets their new bins will need, by their keys (three
    /// fit a bin's line; a fourth needs the single bucket, an eighth the pair too), and
    /// reports those it cannot have (the open refuses the map). With `spare`, the regular
    /// pool's two buckets are the second chained to new bin 1 and the first chained nowhere
    /// (a power loss lost its bin's line): it is taken.
    #[test]
    fn moves_left_to_finish_get_their_link_buckets_first() {
        for (keys, regular, reserve, spare, refused, chained) in [
            ([3, 3], 0, 0, false, false, [0, 0]),
            ([4, 3], 0, 0, false, true, [0, 0]),
            ([4, 3], 2, 0, true, false, [1, 1]),
            ([7, 4], 0, 2, false, false, [1, 1]),
            ([8, 4], 0, 3, false, true, [0, 0]),
            ([8, 4], 0, 4, false, false, [3, 1]),
            ([8, 8], 0, 4, false, true, [0, 0]),
        ] {
            let case = format!("keys {keys:?}, regular {regular}, reserve {reserve}");
            let (old, next) = (
                test_table_with_reserve(4, 8, 0),
                test_table_with_reserve(2, regular, reserve),
            );
            for (group, count) in keys.into_iter().enumerate() {
                for k in 0..count {
                    // Split between the group's two old bins.
                    let bin = 2 * group + k as usize % 2;
                    let key = key(bin, k);
                    assert_eq!(old.insert(P, bin, key, key).unwrap(), Ok(Inserted::New));
                }
            }
            if spare {
                next.bins[1]
                    .link
                    .store(Link(0).with_bucket(0, 1).0, Ordering::Relaxed);
            }
            SWEEPER.unchained(&next, SWEEPER.links(&next, true));
            let swept = SWEEPER.moves(&old, &next, 2).unwrap();
            assert_eq!(swept.rebuilt, 0, "{case}");
            assert_eq!(swept.unplaced > 0, refused, "{case}: {swept:?}");
            if refused {
                continue;
            }
            for (bin, lines) in chained.into_iter().enumerate() {
                let link = Link(next.bins[bin].link.load(Ordering::Relaxed));
                let have = usize::from(link.bucket(0).is_some())
                    + 2 * usize::from(link.bucket(1).is_some());
                assert_eq!(have, lines, "{case}: new bin {bin}");
            }
        }
    }
}
