//! The engine: lock-free cache-line bins with bounded chaining.
//!
//! # Design
//!
//! This is the layout and the protocols of DLHT (Katsarakis et al., "Dandelion Hashtable",
//! §3.1–§3.2.5), with two changes argued below: deletes retire a slot's key before freeing the
//! slot (so a racing put can never land on a deleted key), and a put waits out a re-insert of
//! its slot instead of reporting a write nobody can see. Growing (moving the bins to a larger
//! table while operations go on) is in `migrate.rs`; here it shows only as the bin state every
//! search checks first: a bin being moved is waited for, a moved bin answers `Moved` and the
//! caller retries in the next table.
//!
//! ## Terminology
//!
//! - **Table**: an array of `nbins` *bins* plus a pool of *link buckets*.
//! - **Bin**: one 64-byte line (the *primary bucket*): a header word, a link word and three
//!   16-byte *slots*. A key lives only in the bin its hash selects (closed addressing).
//! - **Link bucket**: four more slots, 64 bytes. A bin chains at most three: one through the
//!   link word's `single` field, then two consecutive ones through its `pair` field, for at
//!   most 15 slots a bin (*bounded chaining*). The pool is a fraction of the bin count (one per
//!   eight bins by default), so most bins are one line and a get costs about one memory access.
//! - **Slot**: `(key, value)`, two 8-byte words, accessed only as one 16-byte atomic.
//! - **Header**: 32-bit version, 2-bit bin state (resize), 2-bit state per slot. See
//!   `control::header`.
//! - **Dead key** of bin `b`: a key that does not hash to `b`. No operation on bin `b` ever
//!   searches for it, so a slot holding it matches nothing.
//!
//! ```text
//!  primary bucket (bin b), one cache line                 link pool (nbins / 8 lines)
//! +--------+--------+-------+-------+-------+-------+...   +------+------+------+------+
//! | header |  link  | key 0 | val 0 | key 1 | val 1 |...   | k  v | k  v | k  v | k  v |  i
//! +--------+--------+-------+-------+-------+-------+...   +------+------+------+------+
//!   0        8 |      16      24      32      40           | slots 3..7 of bin b       |
//!              +----- single = i + 1 -------------------->  +---------------------------+
//!              +----- pair   = j + 1 --> lines j, j+1: slots 7..11 and 11..15
//! ```
//!
//! ## Invariants
//!
//! 1. Every change to a header is a CAS that bumps its version. Two equal header words read
//!    at two times mean no slot of the bin changed state in between (the version is 32 bits;
//!    a reader would have to sleep through exactly 2^32 header CASes on one bin to be fooled).
//! 2. Only the inserter that moved slot `s` from `Invalid` to `TryInsert` writes `(key, value)`
//!    into it with a plain store, and only while it is `TryInsert`.
//! 3. While a slot is `Valid`, its key word changes only to the bin's dead key (a delete or
//!    `clear` retiring it) and its value only by a 16-byte CAS that keeps the key (a put).
//! 4. A slot leaves `Valid` only after its key word was replaced by the dead key; an abandoned
//!    reservation is also reset to the dead key before it is released. So a slot that is not
//!    `Valid` holds a real key of its bin only between an inserter's store and its publication.
//! 5. Link fields go from zero to a pool index once and never change back while the table
//!    lives; a slot in link bucket `c` is never `TryInsert` or `Valid` unless `c` is chained.
//!
//! ## Get (DLHT §3.2.1): a seqlock read
//!
//! Load the header (`Acquire`), match the key against the `Valid` slots of the primary line
//! (and of the chained link lines if some of their slots are `Valid`), `fence(Acquire)`, load
//! the header again (`Relaxed`). Equal words: the result is consistent and is returned;
//! otherwise retry. Linearization point: the load of the slot that matched (its value is the
//! key's value at that instant, invariant 3), or the first header load for a miss. A miss is
//! right because every slot that was `Valid` at the first load kept its key or turned dead
//! (invariants 1, 3), and no slot could become `Valid` without changing the header.
//!
//! The `Acquire` header load pairs with the `Release` CAS that published a slot (`TryInsert ->
//! Valid`), so the slot's contents and the link word chaining its bucket are visible. The
//! acquire fence pairs with the `fence(Release)` an inserter issues between reserving a slot
//! and writing it: if a reader's slot load sees such a write, its second header load sees the
//! reservation, so it retries instead of trusting a slot that was recycled under it.
//!
//! ## Insert (DLHT §3.2.2, after CLHT)
//!
//! 1. Search the bin (validated, as a get). Found: return the present value.
//! 2. Take the first `Invalid` slot `s`; none left: the bin is full, return `Err(Full)`.
//! 3. CAS the header `Invalid -> TryInsert` for `s` (expected: the header the search was
//!    validated against). Failure: back to 1.
//! 4. `fence(Release)`. If `s` is in a link bucket that is not chained, take one (or two
//!    consecutive) buckets from the pool with a `fetch_add` and CAS the link field; if the
//!    pool is exhausted, release `s` and return `Err(Full)`.
//! 5. Store `(key, value)` into `s`.
//! 6. CAS the header `TryInsert -> Valid` for `s` (`Release`), expecting the header we last
//!    validated a search against. Failure: search again under the new header; if the key is
//!    now `Valid` elsewhere (another insert of it published first), reset `s` to the dead key,
//!    release it and return the present value; otherwise retry 6 with the new header.
//!
//! The CAS in 6 is the linearization point. At most one insert of a key can succeed: a
//! successful step 6 requires the header to be unchanged since a search that did not find the
//! key, and publishing the key changes the header.
//!
//! Chaining: several inserters may hold reservations in one unchained link bucket; each takes
//! a bucket from the pool and CASes the link field; the losers' buckets are wasted (counted in
//! `links_lost`). DLHT accepts the same; it takes two threads reserving in the same bucket of
//! the same bin at the same instant.
//!
//! ## Delete (DLHT §3.2.3, with retired keys)
//!
//! DLHT deletes with one header CAS `Valid -> Invalid`. That alone loses updates: a put that
//! read the slot before the delete can still CAS it afterwards (the put does not look at the
//! header), and the delete would have returned an old value. So a delete here is:
//!
//! 1. Search (validated). Not found: return `None`.
//! 2. CAS the slot `(key, value) -> (dead key, value)`. Failure (a put changed the value, or
//!    the slot was recycled): back to 1. Success is the linearization point: from here every
//!    search misses the key, and any put that read `(key, value)` fails its CAS.
//! 3. Free the slot: CAS the header `Valid -> Invalid` for `s`, retrying on unrelated header
//!    changes. The slot is reusable at once, with no tombstone.
//!
//! Step 2 can hit a slot that was deleted and re-inserted with the *same* key and value by
//! others after step 1 (ABA); the slot is then `TryInsert`. Step 3 waits for that inserter: if
//! it publishes, the delete takes effect right after that insert; if it abandons, the delete
//! starts over. Before freeing, step 3 re-reads the slot (validated against the header) and
//! frees it only if it still holds the retired pair: after an abandonment the slot may already
//! belong to another inserter, whose key must not be freed. Outside that triple race a retired
//! slot stays `Valid` with our pair until we free it (nobody else moves a slot holding a dead
//! key), so the wait and the check cost one L1 read.
//!
//! ## Put and friends (DLHT §3.2.4)
//!
//! A put (`put`, `update`, `compare_exchange`, the update half of `upsert` and `fetch_add`)
//! searches, then CASes the whole 16-byte slot from the `(key, old)` it read to `(key, new)`.
//! The key in the expected value makes a put on a slot that was recycled for another key fail
//! (the classic ABA); invariant 4 makes a put on a deleted key fail. Linearization point: the
//! successful CAS. The CAS can also hit a slot re-inserted with the same key and value while it
//! is still `TryInsert`; so after its CAS a put that finds its slot `TryInsert` waits until the
//! slot is published or abandoned, and never returns before its write can be seen (the put
//! then takes effect right after that insert).
//!
//! FIXME: one race is left open. If that same-key re-insert is *abandoned* (a third thread
//! inserted the key into another slot first), the put's write is discarded with the slot but
//! the put still reports success. It takes a put stalled between its search and its CAS while
//! three other operations on the same key and slot complete, with equal values. Closing it
//! needs a per-slot generation that the 16-byte slot has no room for. (The resize protocol did
//! not need one: its transfer key is the bin's dead key, so the slot format is unchanged and
//! this race is still open.)
//!
//! ## Memory orderings
//!
//! - Header loads that start an operation: `Acquire` (pair with the `Release` publication
//!   CAS, see Get). Re-check loads: `Relaxed` after a `fence(Acquire)`.
//! - Reservation CAS: `Acquire` on success (orders our later reads of the link word after it),
//!   followed by `fence(Release)` before the slot store (pairs with the readers' acquire fence).
//! - Publication CAS (`TryInsert -> Valid`): `Release`.
//! - Freeing CAS (`-> Invalid`): `Relaxed` suffices for the slot (nobody reads an `Invalid`
//!   slot) but it is `Release` so that the dead key written before is ordered before the slot
//!   can be reserved again.
//! - Link field CAS: `AcqRel`; the link word is read `Acquire` by inserters and `Relaxed` by
//!   searches, which are ordered after it through the publication CAS of the slot they saw.
//! - Slot CAS: `AcqRel` (see `Slot::compare_exchange`).
//! - The pool cursor and the `len` shards: `Relaxed` (they order nothing).
//! - Growth (`migrate.rs`): the claim CAS (`NoTransfer -> InTransfer`) is `AcqRel` (it reads
//!   the slots published before it); the `DoneTransfer` CAS is `Release` and pairs with the
//!   `Acquire` header load of every search, which then reads the new table's bins; the chunk
//!   counter is `AcqRel` (a release sequence the last chunk's thread acquires) and the map's
//!   current-table pointer is stored `Release` and loaded `Acquire`.

mod alloc;
mod counter;
pub(crate) mod layout;
pub(crate) mod migrate;
pub(crate) mod probe;
pub(crate) mod stats;

use std::sync::{atomic::AtomicUsize as StdAtomicUsize, Arc};

use crossbeam_utils::CachePadded;

use self::{
    alloc::TableMemory,
    counter::ShardedCounter,
    layout::{Bin, LinkBucket, Slot},
    migrate::Migration,
    probe::Probe,
};
use crate::{
    control::{
        group::Group,
        header::{
            slot_place, BinState, Header, Link, SlotMask, SlotState, LINK_SLOTS, PRIMARY_SLOTS,
        },
    },
    sync::{fence, spin, AtomicUsize, Ordering},
};

/// The key's bin has been moved to the next table (`migrate`): retry there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Moved;

/// Start loading the 64-byte line at `line` into the cache, without waiting for it. A hint:
/// it never faults and has no visible effect.
#[inline(always)]
pub(crate) fn prefetch_line(line: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch never faults, whatever the address, and has no visible effect; SSE
    // is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(line.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = line;
}

/// Why an insert found no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// All 15 slots of the key's bin are taken.
    Bin,
    /// The bin needed a link bucket and the pool is empty.
    LinkPool,
}

/// The outcome of an insert that did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// The key was absent and is now present.
    New,
    /// The key was present with this value; nothing changed.
    Exists(u64),
}

/// Why a compare-exchange did not swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// The key is absent.
    Absent,
    /// The key is present with this value.
    Value(u64),
}

/// The dead keys of a table: `primary` for every bin except `primary_bin`, `fallback` there.
/// Invariant: `primary` hashes to `primary_bin` and `fallback` does not.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeadKeys {
    pub(crate) primary: u64,
    pub(crate) primary_bin: usize,
    pub(crate) fallback: u64,
}

impl DeadKeys {
    #[inline(always)]
    fn of(self, bin: usize) -> u64 {
        if bin == self.primary_bin {
            self.fallback
        } else {
            self.primary
        }
    }
}

/// The geometry and options of a table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub(crate) bins: usize,
    pub(crate) link_buckets: usize,
    /// Link buckets after the pool reserved for a migration's transfers (`migrate`).
    pub(crate) transfer_reserve: usize,
    pub(crate) huge_pages: bool,
}

/// A hit of a search: the slot and the value it held.
#[derive(Clone, Copy, Debug)]
struct Hit {
    slot: usize,
    value: u64,
}

/// A validated search: the header it is consistent with, and the hit if the key was present.
#[derive(Clone, Copy, Debug)]
struct Search {
    header: Header,
    hit: Option<Hit>,
}

/// The engine. Non-generic over key and value types: it stores 64-bit words; the facade
/// (`crate::map`) converts.
pub(crate) struct RawTable {
    bins: TableMemory<Bin>,
    links: TableMemory<LinkBucket>,
    /// Pool cursor: link buckets `[next_link, transfer_base)` are free. May run past the end
    /// (every later take then fails).
    next_link: CachePadded<AtomicUsize>,
    /// Start of the transfer reserve: link buckets `[transfer_base, links.len())` are only
    /// taken by a migration filling this table (`migrate`).
    transfer_base: usize,
    /// Cursor into the transfer reserve.
    transfer_next: CachePadded<AtomicUsize>,
    /// The migration out of this table.
    migration: Migration,
    /// Tables of the map alive (a statistic: decremented when this table is dropped).
    alive: Arc<StdAtomicUsize>,
    /// Link buckets taken from the pool but lost in a chaining race (never used).
    links_lost: AtomicUsize,
    len: ShardedCounter,
    dead: DeadKeys,
}

impl RawTable {
    /// Allocate a table. `None` if the memory cannot be had or a size overflows.
    pub(crate) fn new(
        geometry: Geometry,
        dead: DeadKeys,
        alive: Arc<StdAtomicUsize>,
    ) -> Option<Self> {
        debug_assert!(geometry.bins >= 2 && dead.primary_bin < geometry.bins);
        let links = geometry
            .link_buckets
            .checked_add(geometry.transfer_reserve)?;
        // Link indexes are stored as `index + 1` in 32-bit fields.
        if links >= u32::MAX as usize {
            return None;
        }
        let bins = TableMemory::zeroed(geometry.bins, geometry.huge_pages)?;
        let links = TableMemory::zeroed(links, geometry.huge_pages)?;
        alive.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(Self {
            bins,
            links,
            next_link: CachePadded::new(AtomicUsize::new(0)),
            transfer_base: geometry.link_buckets,
            transfer_next: CachePadded::new(AtomicUsize::new(0)),
            migration: Migration::new(),
            alive,
            links_lost: AtomicUsize::new(0),
            len: ShardedCounter::new(),
            dead,
        })
    }

    pub(crate) fn bins(&self) -> usize {
        self.bins.len()
    }

    /// Link buckets of the regular pool (without the transfer reserve).
    pub(crate) fn link_buckets(&self) -> usize {
        self.transfer_base
    }

    /// Link buckets taken from the pool so far (chained or lost).
    pub(crate) fn link_buckets_used(&self) -> usize {
        self.next_link
            .load(Ordering::Relaxed)
            .min(self.transfer_base)
            + self.transfer_next.load(Ordering::Relaxed)
    }

    pub(crate) fn links_lost(&self) -> usize {
        self.links_lost.load(Ordering::Relaxed)
    }

    /// Slots in the table: three per bin plus four per link bucket.
    pub(crate) fn capacity(&self) -> usize {
        self.bins.len() * PRIMARY_SLOTS + self.transfer_base * LINK_SLOTS
    }

    /// Bytes of table memory (bins and link pool).
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.bins.bytes() + self.links.bytes()
    }

    pub(crate) fn huge_pages(&self) -> bool {
        self.bins.huge_pages()
    }

    pub(crate) fn len(&self) -> usize {
        self.len.sum()
    }

    /// The address of a bin, for software prefetching.
    #[inline(always)]
    pub(crate) fn bin_ptr(&self, bin: usize) -> *const u8 {
        (&self.bins[bin] as *const Bin).cast()
    }

    /// Start loading `bin`'s line.
    #[inline(always)]
    pub(crate) fn prefetch_bin(&self, bin: usize) {
        prefetch_line(self.bin_ptr(bin));
    }

    /// Start loading the link buckets chained to `bin`; `true` if it has any. Reads the bin's
    /// link word, so call it once the bin's own line has had time to arrive.
    #[inline(always)]
    pub(crate) fn prefetch_chain(&self, bin: usize) -> bool {
        // Relaxed: a hint only. Link fields never go back to zero (invariant of `Bin::link`),
        // so a stale word at worst misses a bucket chained since; the operation itself reads
        // the word again with the orderings it needs.
        let link = Link(self.bins[bin].link.load(Ordering::Relaxed));
        let mut chained = false;
        for bucket in 0..3 {
            if let Some(index) = link.bucket(bucket) {
                prefetch_line((&self.links[index] as *const LinkBucket).cast());
                chained = true;
            }
        }
        chained
    }

    // ---------------------------------------------------------------------------------------
    // Reading
    // ---------------------------------------------------------------------------------------

    /// Match `key` against the slots `header` says are `Valid`. Not validated: see `find`.
    #[inline(always)]
    fn search<P: Probe>(&self, probe: P, bin: &Bin, header: Header, key: u64) -> Option<Hit> {
        let valid = header.valid();
        if valid.is_empty() {
            return None;
        }
        let line = probe.primary(bin);
        let hits = SlotMask::from_primary_lanes(line.match_word(key)).and(valid);
        if let Some(slot) = hits.first() {
            return Some(Hit {
                slot,
                value: line.lane(3 + 2 * slot),
            });
        }
        if valid.and(SlotMask::LINKED).is_empty() {
            return None;
        }
        // Relaxed: the link fields we follow were set before the publication of a slot that
        // `header` (an Acquire load) shows Valid, so they are visible (invariant 5).
        let link = Link(bin.link.load(Ordering::Relaxed));
        for bucket in 0..3 {
            let in_bucket = valid.and(SlotMask::link_bucket(bucket));
            if in_bucket.is_empty() {
                continue;
            }
            // A Valid slot's bucket is chained and the chaining is visible (invariant 5 and the
            // Acquire above), so this never fails; loom and the stress tests would catch it.
            let Some(index) = link.bucket(bucket) else {
                debug_assert!(false, "a Valid slot in an unchained link bucket");
                continue;
            };
            let line = probe.link(&self.links[index]);
            stats::line_read();
            let hits = SlotMask::from_link_lanes(line.match_word(key), bucket).and(in_bucket);
            if let Some(slot) = hits.first() {
                let lane = 2 * ((slot - PRIMARY_SLOTS) % LINK_SLOTS);
                return Some(Hit {
                    slot,
                    value: line.lane(lane + 1),
                });
            }
        }
        None
    }

    /// A search validated against the bin header (the seqlock read described in the essay).
    /// Waits while the bin is being moved to the next table; `Moved` once it has been.
    #[inline(always)]
    fn find<P: Probe>(&self, probe: P, bin: &Bin, key: u64) -> Result<Search, Moved> {
        // The bin's own line: read by the header load even when no slot is Valid. Retries
        // re-read it from the cache and are not counted again.
        stats::line_read();
        loop {
            // Acquire: pairs with the Release publication CAS of every slot we may read, and
            // with the Release CAS that marks the bin DoneTransfer (`migrate`).
            let header = Header(bin.header.load(Ordering::Acquire));
            match header.bin_state() {
                // A frozen bin still holds its keys (`migrate`): reads go on.
                BinState::NoTransfer | BinState::Frozen => {}
                BinState::InTransfer => {
                    self.wait_transferred(bin);
                    return Err(Moved);
                }
                BinState::DoneTransfer => return Err(Moved),
            }
            let hit = self.search(probe, bin, header, key);
            // Pairs with the inserters' fence(Release) between reservation and slot store.
            fence(Ordering::Acquire);
            if bin.header.load(Ordering::Relaxed) == header.0 {
                return Ok(Search { header, hit });
            }
            spin();
        }
    }

    /// The slot `slot` of `bin`. The slot must be `Valid` or reserved by the caller, so its
    /// bucket is chained (invariant 5).
    #[inline(always)]
    fn slot<'a>(&'a self, bin: &'a Bin, slot: usize) -> &'a Slot {
        match slot_place(slot) {
            (None, index) => &bin.slots[index],
            (Some(bucket), index) => {
                // Acquire: pairs with the AcqRel CAS that chained the bucket.
                let link = Link(bin.link.load(Ordering::Acquire));
                let pool_index = link
                    .bucket(bucket)
                    .expect("a reserved or Valid slot's bucket is chained");
                &self.links[pool_index].slots[index]
            }
        }
    }

    /// The value of `key` in `bin`.
    #[inline(always)]
    pub(crate) fn get<P: Probe>(
        &self,
        probe: P,
        bin: usize,
        key: u64,
    ) -> Result<Option<u64>, Moved> {
        Ok(self
            .find(probe, &self.bins[bin], key)?
            .hit
            .map(|hit| hit.value))
    }

    // ---------------------------------------------------------------------------------------
    // Insert
    // ---------------------------------------------------------------------------------------

    /// Insert `key -> value` if `key` is absent.
    #[inline(always)]
    pub(crate) fn insert<P: Probe>(
        &self,
        probe: P,
        bin_index: usize,
        key: u64,
        value: u64,
    ) -> Result<Result<Inserted, Full>, Moved> {
        let bin = &self.bins[bin_index];
        loop {
            let Search { header, hit } = self.find(probe, bin, key)?;
            if let Some(hit) = hit {
                return Ok(Ok(Inserted::Exists(hit.value)));
            }
            if header.bin_state() == BinState::Frozen {
                // A shrink is about to move the bin: no key may be added to it.
                self.wait_unfrozen(bin);
                continue;
            }
            let Some(slot) = header.invalid().first() else {
                return Ok(Err(Full::Bin));
            };
            let reserved = header.with_slot(slot, SlotState::TryInsert);
            // Acquire on success: our reads of the link word below come after the reservation.
            if bin
                .header
                .compare_exchange(header.0, reserved.0, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                spin();
                continue;
            }
            // Pairs with the readers' fence(Acquire): a reader that sees the store below also
            // sees the reservation above, and so fails its version check.
            fence(Ordering::Release);
            if let Err(full) = self.chain_for(bin, slot) {
                self.abandon(bin_index, bin, slot);
                return Ok(Err(full));
            }
            if let (Some(bucket), _) = slot_place(slot) {
                if header.valid().and(SlotMask::link_bucket(bucket)).is_empty() {
                    // A link line the search did not read.
                    stats::line_read();
                }
            }
            self.slot(bin, slot).store(key, value);
            match self.publish(probe, bin_index, bin, slot, reserved, key)? {
                Some(inserted) => return Ok(Ok(inserted)),
                // The bin was frozen under us: start over (and wait).
                None => continue,
            }
        }
    }

    /// Make sure the bucket of `slot` is chained to `bin`, taking buckets from the pool if not.
    #[inline(always)]
    fn chain_for(&self, bin: &Bin, slot: usize) -> Result<(), Full> {
        let (Some(bucket), _) = slot_place(slot) else {
            return Ok(());
        };
        // Acquire: pairs with the AcqRel chaining CAS of another inserter.
        let mut link = Link(bin.link.load(Ordering::Acquire));
        if link.bucket(bucket).is_some() {
            return Ok(());
        }
        self.chain_slow(bin, bucket, &mut link)
    }

    #[cold]
    fn chain_slow(&self, bin: &Bin, bucket: usize, link: &mut Link) -> Result<(), Full> {
        let width = Link::field_width(bucket);
        let taken = self.next_link.fetch_add(width, Ordering::Relaxed);
        if taken + width > self.transfer_base {
            return Err(Full::LinkPool);
        }
        loop {
            let chained = link.with_bucket(bucket, taken as u32);
            match bin
                .link
                .compare_exchange(link.0, chained.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(now) => {
                    *link = Link(now);
                    if link.bucket(bucket).is_some() {
                        // Another inserter chained this bucket first; ours is lost.
                        self.links_lost.fetch_add(width, Ordering::Relaxed);
                        return Ok(());
                    }
                    // The other field changed; retry with the new word.
                }
            }
        }
    }

    /// Step 6 of insert: publish the reserved `slot`, or give it up if the key appeared.
    #[inline(always)]
    fn publish<P: Probe>(
        &self,
        probe: P,
        bin_index: usize,
        bin: &Bin,
        slot: usize,
        reserved: Header,
        key: u64,
    ) -> Result<Option<Inserted>, Moved> {
        let mut expected = reserved;
        loop {
            let published = expected.with_slot(slot, SlotState::Valid);
            // Release: makes the slot store (and the chaining) visible to every reader that
            // Acquire-loads a header showing the slot Valid.
            match bin.header.compare_exchange(
                expected.0,
                published.0,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.len.increment();
                    return Ok(Some(Inserted::New));
                }
                Err(_) => {
                    // A claimed bin never publishes (`migrate`): give the slot up and retry
                    // the insert in the next table.
                    let Ok(Search { header, hit }) = self.find(probe, bin, key) else {
                        self.abandon(bin_index, bin, slot);
                        return Err(Moved);
                    };
                    if let Some(hit) = hit {
                        self.abandon(bin_index, bin, slot);
                        return Ok(Some(Inserted::Exists(hit.value)));
                    }
                    if header.bin_state() == BinState::Frozen {
                        // A frozen bin's key count may only fall (`migrate`).
                        self.abandon(bin_index, bin, slot);
                        return Ok(None);
                    }
                    debug_assert_eq!(header.slot(slot), SlotState::TryInsert, "{header:?}");
                    expected = header;
                }
            }
        }
    }

    /// Give up a reservation: reset the slot to the dead key (invariant 4) and free it.
    #[cold]
    fn abandon(&self, bin_index: usize, bin: &Bin, slot: usize) {
        // If chaining failed the bucket is not chained and nobody can read the slot: nothing to
        // reset.
        let slot_ref = match slot_place(slot) {
            (None, index) => Some(&bin.slots[index]),
            (Some(bucket), index) => Link(bin.link.load(Ordering::Acquire))
                .bucket(bucket)
                .map(|pool_index| &self.links[pool_index].slots[index]),
        };
        if let Some(slot_ref) = slot_ref {
            slot_ref.store(self.dead.of(bin_index), 0);
        }
        self.set_state(bin, slot, SlotState::TryInsert, SlotState::Invalid);
    }

    /// CAS slot `slot` of `bin` from `from` to `to`, retrying on unrelated header changes.
    /// The caller owns the transition (nobody else moves this slot out of `from`).
    fn set_state(&self, bin: &Bin, slot: usize, from: SlotState, to: SlotState) {
        let mut header = Header(bin.header.load(Ordering::Relaxed));
        loop {
            debug_assert_eq!(header.slot(slot), from, "{header:?}");
            // Release: orders our earlier slot writes (the dead key) before the slot can be
            // reserved again.
            match bin.header.compare_exchange(
                header.0,
                header.with_slot(slot, to).0,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => header = Header(now),
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Remove
    // ---------------------------------------------------------------------------------------

    /// Remove `key`, returning its value.
    #[inline(always)]
    pub(crate) fn remove<P: Probe>(
        &self,
        probe: P,
        bin_index: usize,
        key: u64,
    ) -> Result<Option<u64>, Moved> {
        let bin = &self.bins[bin_index];
        let dead = self.dead.of(bin_index);
        loop {
            let Some(hit) = self.find(probe, bin, key)?.hit else {
                return Ok(None);
            };
            // The linearization point: retire the key (see the essay, Delete).
            if self
                .slot(bin, hit.slot)
                .compare_exchange((key, hit.value), (dead, hit.value))
                .is_err()
            {
                spin();
                continue;
            }
            if self.free_retired(bin, hit.slot, (dead, hit.value)) {
                self.len.decrement();
                return Ok(Some(hit.value));
            }
        }
    }

    /// Step 3 of delete: free slot `slot`, whose key we just retired to `(dead, value)`.
    /// Returns `false` if our retirement hit a reservation that was then abandoned (the delete
    /// must start over).
    fn free_retired(&self, bin: &Bin, slot: usize, retired: (u64, u64)) -> bool {
        loop {
            let header = Header(bin.header.load(Ordering::Acquire));
            match header.slot(slot) {
                SlotState::Valid => {
                    // Still our retired content in the same life of the slot? In the normal
                    // case nobody else can move a retired slot, so this holds; after the ABA
                    // race the slot may have been abandoned and reserved by another inserter,
                    // whose key we must not free.
                    let content = self.slot(bin, slot).load();
                    fence(Ordering::Acquire);
                    if bin.header.load(Ordering::Relaxed) != header.0 {
                        continue;
                    }
                    if content != retired {
                        return false;
                    }
                    if bin
                        .header
                        .compare_exchange(
                            header.0,
                            header.with_slot(slot, SlotState::Invalid).0,
                            Ordering::Release,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                    {
                        return true;
                    }
                }
                // We retired a re-inserted copy that is not published yet (the ABA race in the
                // essay), or the slot was abandoned and reserved again: wait for its inserter.
                SlotState::TryInsert => spin(),
                SlotState::Invalid => return false,
                SlotState::Shadow => unreachable!("shadow inserts are not produced"),
            }
        }
    }

    /// After a put's successful slot CAS: if the slot is a reservation, the put may have hit a
    /// same-key re-insert (see the essay); wait until it is published or abandoned so the put
    /// never returns before its write can be seen. (If the reservation is a later, unrelated
    /// one, the wait is merely unnecessary.)
    #[inline(always)]
    fn settle_put(&self, bin: &Bin, slot: usize) {
        while Header(bin.header.load(Ordering::Acquire)).slot(slot) == SlotState::TryInsert {
            spin();
        }
    }

    // ---------------------------------------------------------------------------------------
    // Puts
    // ---------------------------------------------------------------------------------------

    /// If `key` is present with value `old`, replace it by `f(old)`. Returns `(old, new)`.
    /// `f` may run more than once under contention.
    #[inline(always)]
    pub(crate) fn update<P: Probe>(
        &self,
        probe: P,
        bin_index: usize,
        key: u64,
        mut f: impl FnMut(u64) -> u64,
    ) -> Result<Option<(u64, u64)>, Moved> {
        let bin = &self.bins[bin_index];
        loop {
            let Some(hit) = self.find(probe, bin, key)?.hit else {
                return Ok(None);
            };
            if let Some(done) = self.try_put(bin, hit, key, &mut f) {
                return Ok(Some(done));
            }
            spin();
        }
    }

    /// One put attempt on a found slot: `Some((old, new))` on success.
    #[inline(always)]
    fn try_put(
        &self,
        bin: &Bin,
        hit: Hit,
        key: u64,
        f: &mut impl FnMut(u64) -> u64,
    ) -> Option<(u64, u64)> {
        let new = f(hit.value);
        self.slot(bin, hit.slot)
            .compare_exchange((key, hit.value), (key, new))
            .ok()?;
        self.settle_put(bin, hit.slot);
        Some((hit.value, new))
    }

    /// Replace the value of `key` by `new` if it is `current`.
    #[inline(always)]
    pub(crate) fn compare_exchange<P: Probe>(
        &self,
        probe: P,
        bin_index: usize,
        key: u64,
        current: u64,
        new: u64,
    ) -> Result<Result<u64, Mismatch>, Moved> {
        let bin = &self.bins[bin_index];
        loop {
            let Some(hit) = self.find(probe, bin, key)?.hit else {
                return Ok(Err(Mismatch::Absent));
            };
            if hit.value != current {
                return Ok(Err(Mismatch::Value(hit.value)));
            }
            if self.try_put(bin, hit, key, &mut |_| new).is_some() {
                return Ok(Ok(current));
            }
            spin();
        }
    }

    /// Insert `key -> init` if absent, else replace its value `old` by `f(old)`. Returns the
    /// previous value, `None` if the key was inserted.
    #[inline(always)]
    pub(crate) fn upsert_with<P: Probe>(
        &self,
        probe: P,
        bin_index: usize,
        key: u64,
        init: u64,
        mut f: impl FnMut(u64) -> u64,
    ) -> Result<Result<Option<u64>, Full>, Moved> {
        let bin = &self.bins[bin_index];
        loop {
            match self.find(probe, bin, key)?.hit {
                Some(hit) => {
                    if let Some((old, _)) = self.try_put(bin, hit, key, &mut f) {
                        return Ok(Ok(Some(old)));
                    }
                }
                None => match self.insert(probe, bin_index, key, init)? {
                    Ok(Inserted::New) => return Ok(Ok(None)),
                    Err(full) => return Ok(Err(full)),
                    // Someone inserted it meanwhile: update that copy.
                    Ok(Inserted::Exists(_)) => {}
                },
            }
            spin();
        }
    }

    // ---------------------------------------------------------------------------------------
    // Whole-table operations
    // ---------------------------------------------------------------------------------------

    /// Remove every key, bin by bin. Each bin is emptied with the delete protocol, so this is
    /// safe to run concurrently with anything; it is not one atomic snapshot (an insert into a
    /// bin already cleared survives). Link buckets stay chained to their bins. Bins already
    /// moved to a next table are skipped (their keys are there).
    pub(crate) fn clear(&self) {
        let mut removed = 0isize;
        for (bin_index, bin) in self.bins.iter().enumerate() {
            let dead = self.dead.of(bin_index);
            'bin: loop {
                let header = Header(bin.header.load(Ordering::Acquire));
                if matches!(
                    header.bin_state(),
                    BinState::InTransfer | BinState::DoneTransfer
                ) {
                    self.wait_transferred(bin);
                    break;
                }
                for slot in header.valid().iter() {
                    let slot_ref = self.slot(bin, slot);
                    let (key, value) = slot_ref.load();
                    if key == dead {
                        // Already retired by a concurrent delete, which frees it.
                        continue;
                    }
                    fence(Ordering::Acquire);
                    if bin.header.load(Ordering::Relaxed) != header.0 {
                        continue 'bin;
                    }
                    if slot_ref
                        .compare_exchange((key, value), (dead, value))
                        .is_err()
                    {
                        continue 'bin;
                    }
                    if self.free_retired(bin, slot, (dead, value)) {
                        removed += 1;
                    }
                    continue 'bin;
                }
                break;
            }
        }
        self.len.add(-removed);
    }

    /// Re-derive the invariants that can be checked from a quiescent table (for tests).
    pub(crate) fn check_invariants(&self) -> usize {
        let mut live = 0;
        for (bin_index, bin) in self.bins.iter().enumerate() {
            let header = Header(bin.header.load(Ordering::Relaxed));
            assert_eq!(
                header.bin_state(),
                BinState::NoTransfer,
                "a quiescent current table with a moved bin"
            );
            let link = Link(bin.link.load(Ordering::Relaxed));
            for slot in 0..crate::control::header::SLOTS_PER_BIN {
                let state = header.slot(slot);
                assert_ne!(
                    state,
                    SlotState::TryInsert,
                    "quiescent table with a reservation: {header:?}"
                );
                assert_ne!(state, SlotState::Shadow);
                if state == SlotState::Valid {
                    if let (Some(bucket), _) = slot_place(slot) {
                        assert!(
                            link.bucket(bucket).is_some(),
                            "Valid slot {slot} in an unchained bucket"
                        );
                    }
                    let (key, _) = self.slot(bin, slot).load();
                    assert_ne!(
                        key,
                        self.dead.of(bin_index),
                        "a Valid slot holds the dead key"
                    );
                    live += 1;
                }
            }
        }
        assert_eq!(
            live,
            self.len(),
            "len counter disagrees with the live slots"
        );
        live
    }
}

impl RawTable {
    /// Visit every present `(key, value)`, bin by bin. Each bin is read as one validated
    /// snapshot; the table as a whole is not (a pair inserted or removed while the walk runs
    /// may or may not be seen). Bins moved to a next table are skipped.
    pub(crate) fn for_each(&self, mut visit: impl FnMut(u64, u64)) {
        let mut pairs = Vec::with_capacity(crate::control::header::SLOTS_PER_BIN);
        for (bin_index, bin) in self.bins.iter().enumerate() {
            let dead = self.dead.of(bin_index);
            loop {
                pairs.clear();
                let header = Header(bin.header.load(Ordering::Acquire));
                if matches!(
                    header.bin_state(),
                    BinState::InTransfer | BinState::DoneTransfer
                ) {
                    self.wait_transferred(bin);
                    break;
                }
                for slot in header.valid().iter() {
                    pairs.push(self.slot(bin, slot).load());
                }
                fence(Ordering::Acquire);
                if bin.header.load(Ordering::Relaxed) == header.0 {
                    break;
                }
                spin();
            }
            // A Valid slot holding the dead key is mid-delete: already gone.
            for &(key, value) in pairs.iter().filter(|(key, _)| *key != dead) {
                visit(key, value);
            }
        }
    }
}

impl Drop for RawTable {
    fn drop(&mut self) {
        self.alive
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{probe::ScalarProbe, *};

    /// A table whose dead keys are `u64::MAX` (for every bin but 0) and `u64::MAX - 1` (bin
    /// 0); tests pick bins directly, so no hasher is involved.
    fn table(bins: usize, links: usize) -> RawTable {
        let dead = DeadKeys {
            primary: u64::MAX,
            primary_bin: 0,
            fallback: u64::MAX - 1,
        };
        RawTable::new(
            Geometry {
                bins,
                link_buckets: links,
                transfer_reserve: 0,
                huge_pages: false,
            },
            dead,
            Arc::default(),
        )
        .unwrap()
    }

    const P: ScalarProbe = ScalarProbe;

    #[test]
    fn insert_get_remove_in_one_bin_with_chains() {
        let t = table(2, 3);
        // 15 keys fill bin 1: 3 primary slots, then link bucket 0, then the pair.
        for k in 0..15u64 {
            assert_eq!(t.insert(P, 1, k, k * 10).unwrap(), Ok(Inserted::New));
        }
        assert_eq!(t.insert(P, 1, 99, 0).unwrap(), Err(Full::Bin));
        assert_eq!(t.link_buckets_used(), 3);
        for k in 0..15u64 {
            assert_eq!(t.get(P, 1, k).unwrap(), Some(k * 10));
            assert_eq!(t.insert(P, 1, k, 0).unwrap(), Ok(Inserted::Exists(k * 10)));
        }
        assert_eq!(t.get(P, 1, 15).unwrap(), None);
        assert_eq!(t.check_invariants(), 15);
        // Free a slot in the pair bucket and one in the primary bucket: both are reused.
        assert_eq!(t.remove(P, 1, 12).unwrap(), Some(120));
        assert_eq!(t.remove(P, 1, 1).unwrap(), Some(10));
        assert_eq!(t.remove(P, 1, 1).unwrap(), None);
        assert_eq!(t.insert(P, 1, 100, 1).unwrap(), Ok(Inserted::New));
        assert_eq!(t.insert(P, 1, 101, 2).unwrap(), Ok(Inserted::New));
        assert_eq!(t.insert(P, 1, 102, 3).unwrap(), Err(Full::Bin));
        assert_eq!(t.check_invariants(), 15);
    }

    #[test]
    fn pool_exhaustion_is_reported_and_harmless() {
        let t = table(2, 1);
        for k in 0..7u64 {
            assert_eq!(t.insert(P, 0, k, k).unwrap(), Ok(Inserted::New));
        }
        // Bin 0 took the only link bucket; bin 1 can use its primary slots only.
        for k in 0..3u64 {
            assert_eq!(t.insert(P, 1, k, k).unwrap(), Ok(Inserted::New));
        }
        assert_eq!(t.insert(P, 1, 3, 3).unwrap(), Err(Full::LinkPool));
        // The failed reservation was released (the invariant check below would see it);
        // bin 0 cannot chain its pair either.
        assert_eq!(t.insert(P, 0, 7, 7).unwrap(), Err(Full::LinkPool));
        assert_eq!(t.check_invariants(), 10);
    }

    #[test]
    fn puts_update_present_keys_only() {
        let t = table(2, 0);
        assert_eq!(t.update(P, 0, 5, |v| v + 1).unwrap(), None);
        assert_eq!(t.insert(P, 0, 5, 1).unwrap(), Ok(Inserted::New));
        assert_eq!(t.update(P, 0, 5, |v| v + 1).unwrap(), Some((1, 2)));
        assert_eq!(
            t.compare_exchange(P, 0, 5, 1, 9).unwrap(),
            Err(Mismatch::Value(2))
        );
        assert_eq!(t.compare_exchange(P, 0, 5, 2, 9).unwrap(), Ok(2));
        assert_eq!(
            t.compare_exchange(P, 0, 6, 2, 9).unwrap(),
            Err(Mismatch::Absent)
        );
        assert_eq!(t.upsert_with(P, 0, 5, 0, |v| v * 2).unwrap(), Ok(Some(9)));
        assert_eq!(t.upsert_with(P, 0, 6, 7, |v| v * 2).unwrap(), Ok(None));
        assert_eq!(t.get(P, 0, 5).unwrap(), Some(18));
        assert_eq!(t.get(P, 0, 6).unwrap(), Some(7));
    }

    #[test]
    fn removed_slots_hold_the_dead_key() {
        let t = table(2, 0);
        assert_eq!(t.insert(P, 1, 5, 50).unwrap(), Ok(Inserted::New));
        assert_eq!(t.remove(P, 1, 5).unwrap(), Some(50));
        // A put that read (5, 50) before the remove now fails its CAS (invariant 4).
        let slot = &t.bins[1].slots[0];
        assert_eq!(slot.load(), (u64::MAX, 50));
        assert!(slot.compare_exchange((5, 50), (5, 51)).is_err());
    }

    #[test]
    fn clear_and_for_each_agree() {
        let t = table(4, 4);
        for k in 0..20u64 {
            let _ = t.insert(P, (k % 4) as usize, k, k + 1);
        }
        let mut seen = Vec::new();
        t.for_each(|k, v| seen.push((k, v)));
        seen.sort_unstable();
        assert_eq!(seen.len(), t.len());
        assert!(seen.iter().all(|&(k, v)| v == k + 1));
        t.clear();
        assert_eq!(t.len(), 0);
        let mut after = 0;
        t.for_each(|_, _| after += 1);
        assert_eq!(after, 0);
        assert_eq!(t.check_invariants(), 0);
    }

    #[test]
    fn two_threads_in_one_bin() {
        // Small enough for Miri, which checks the protocols for data races and UB.
        let t = table(2, 2);
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        std::thread::scope(|s| {
            for thread in 0..2u64 {
                let t = &t;
                s.spawn(move || {
                    for i in 0..rounds {
                        let key = thread * 1000 + i % 5;
                        let _ = t.insert(P, 0, key, i);
                        let _ = t.update(P, 0, key, |v| v + 1);
                        let _ = t.get(P, 0, key ^ 1000);
                        let _ = t.remove(P, 0, key);
                    }
                });
            }
        });
        assert_eq!(t.check_invariants(), 0);
    }
}
