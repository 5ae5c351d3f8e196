//! The compact engine: a counting table of its own for k-mers, 8 bytes a slot, at about
//! jellyfish's memory (issue 45), where the shared map spends 16 bytes an entry and more.
//!
//! # The table
//! A k-mer of k bases is a number of `w = 2k` bits. An invertible hash `h` (a multiplication
//! by an odd constant, an xor-shift, another multiplication, all modulo `2^w`: each step is a
//! bijection of `w`-bit numbers) scrambles it. The table is `2^l` lines of 8 slots (a cache
//! line each); the top `l` bits of `h(kmer)` are its home line. A slot is one `u64`:
//!
//! ```text
//!   | remainder: the low w - l bits of h(kmer) | line probe + 1 (5 bits) | count (the rest) |
//! ```
//!
//! A k-mer lives in the first slot, in order, of the lines `home`, `home + 1`, `home + 3`,
//! `home + 6`, ... (triangular steps, at most [`MAX_LINE_PROBES`] lines, wrapping) that is
//! empty or holds its tag (remainder and line probe); 0 is an empty slot, as `probe + 1` is
//! never 0. The home is implied by where the slot is (its line minus the probe's step), so
//! the slot keeps only the remainder, and the k-mer is `h⁻¹(home << (w - l) | remainder)`
//! (IcebergHT's and jellyfish's quotienting). Lines of 8 and 31 lines let a table fill to
//! about 90% before a k-mer finds its lines full (measured: 0.90-0.91 at 2^21 to 2^23 slots;
//! 7 lines failed at 60%, 62 single slots of linear probing at 64%), and a k-mer costs about
//! one cache line to count. With `l` of 18 to 25 the count field has 12 to 19 bits at k =
//! 32, more at shorter k (40 bits at k = 21 and 2^24 slots); a count that reaches the field's largest value stays there and the rest of it is kept
//! in an overflow map (`FlatMap`, k-mer to the counts past the field), which holds only the
//! k-mers counted that often.
//!
//! # Concurrency
//! Slots only go from empty to a k-mer's tag (remainder and probe) and then only count up,
//! each change one compare-and-swap; no slot is ever emptied while workers count. So a
//! worker that passed a slot saw it hold another k-mer's tag, which it keeps: two workers
//! adding the same new k-mer race for the same first empty slot, one wins the CAS and the
//! other, re-reading it, finds its own tag there and counts into it. A k-mer is thus in one
//! slot only. Every access is `Relaxed`: no slot's value says anything about another's, and
//! the counts are read after the workers are joined (which orders everything before it).
//!
//! A k-mer that finds all its [`MAX_LINE_PROBES`] lines taken by others makes the table grow:
//! workers hold the table's read lock for a batch; the one that failed takes the write lock
//! (so no worker is in the table), and unless another grew it meanwhile (its generation
//! changed), moves every k-mer into a table of twice the slots, then retries its k-mers.
//! The lock's release/acquire orders the move before every later batch.
//!
//! The loom model at the end of this file checks both halves (workers racing for one new
//! k-mer's slot; a growth beside a worker counting), and fails with either weakened.
//!
//! # Memory
//! The slots come zeroed from the allocator (a fresh mapping when large, on huge pages where
//! the kernel grants them): pages cost memory once a k-mer lands in them, so a size hint (-s)
//! larger than the input needs costs only the pages the k-mers touch, 2 MiB each on huge
//! pages (and `count` caps the hint at the input's bases where it knows them).
//! Growing holds the old and the new table at once (3/2 of the new one).

use std::sync::atomic::Ordering::Relaxed;
#[cfg(not(loom))]
use std::sync::{atomic::AtomicU64, RwLock};

// Under loom (`ci/loom.sh`, the model at the end of this file) the slots and the growth lock
// are loom's, so that it explores the workers' interleavings.
#[cfg(loom)]
use loom::sync::{atomic::AtomicU64, RwLock};

use floe::FlatMap;

use super::{run_workers, Engine, Sink, Table, Worker};
use crate::Error;

/// Slots in a line (a cache line of 64 bytes).
const LINE_SLOTS: u64 = 8;
const LINE_SLOT_BITS: u32 = 3;
/// The lines a k-mer may look at before the table grows; the probe field has 5 bits and
/// holds `line probe + 1`.
/// (Two under loom, whose model tables are one or two lines: every probe is a step it explores.)
pub const MAX_LINE_PROBES: u64 = if cfg!(loom) { 2 } else { 31 };
const PROBE_BITS: u32 = 5;
/// The fewest slots a table has (unless 4^k lines are fewer): enough bits left for the
/// count (at least 1 at k = 32 from 9 bits). Under Miri the least, so its tests grow the
/// table with few k-mers; under loom one line (its model uses short k-mers).
const MIN_SLOT_BITS: u32 = if cfg!(loom) {
    LINE_SLOT_BITS
} else if cfg!(miri) {
    9
} else {
    12
};
/// K-mers whose slots are prefetched ahead of the one being counted.
const PREFETCH_DISTANCE: usize = 16;

/// A bijective scramble of `w`-bit numbers and its inverse.
#[derive(Clone, Copy, Debug)]
struct Scramble {
    mask: u64,
    shift: u32,
}

/// Odd multipliers (from splitmix64) and their inverses modulo 2^64, which are inverses
/// modulo every smaller power of two too.
const MUL_1: u64 = 0xbf58_476d_1ce4_e5b9;
const MUL_2: u64 = 0x94d0_49bb_1331_11eb;

/// The inverse of an odd `a` modulo 2^64 (Newton's iteration: each step doubles the correct
/// low bits).
const fn inverse(a: u64) -> u64 {
    let mut x = a; // correct to 3 bits for an odd a
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

const INV_1: u64 = inverse(MUL_1);
const INV_2: u64 = inverse(MUL_2);

impl Scramble {
    fn new(bits: u32) -> Scramble {
        Scramble {
            mask: u64::MAX >> (64 - bits),
            shift: bits.div_ceil(2),
        }
    }

    #[inline(always)]
    fn forward(self, x: u64) -> u64 {
        let x = x.wrapping_mul(MUL_1) & self.mask;
        let x = x ^ (x >> self.shift);
        x.wrapping_mul(MUL_2) & self.mask
    }

    fn backward(self, y: u64) -> u64 {
        let y = y.wrapping_mul(INV_2) & self.mask;
        // x ^ (x >> s) with s >= bits / 2 is undone by applying it again.
        let y = y ^ (y >> self.shift);
        y.wrapping_mul(INV_1) & self.mask
    }
}

/// One table: its slots and how a slot is laid out.
struct Slots {
    slots: Box<[AtomicU64]>,
    /// log2 of the slot count (the lines' and 3).
    slot_bits: u32,
    scramble: Scramble,
    remainder_bits: u32,
    count_bits: u32,
    count_max: u64,
    /// Tables made so far, this one included: a worker that saw the table full grows it
    /// only if it is still the table it saw.
    generation: u64,
}

/// Where a k-mer goes: its home line and the tag (remainder; the probe is added per line).
#[derive(Clone, Copy)]
struct Place {
    home: u64,
    remainder: u64,
}

impl Slots {
    /// A table of `2^slot_bits` slots for k-mers of length `k` (`slot_bits` is brought into
    /// `MIN_SLOT_BITS..=2k + 3`: at most a line for every k-mer).
    fn new(k: usize, slot_bits: u32, generation: u64) -> Result<Slots, Error> {
        let word_bits = 2 * k as u32;
        let slot_bits = slot_bits.max(MIN_SLOT_BITS).min(word_bits + LINE_SLOT_BITS);
        let remainder_bits = word_bits - (slot_bits - LINE_SLOT_BITS);
        let count_bits = 64 - remainder_bits - PROBE_BITS;
        Ok(Slots {
            slots: zeroed_slots(1 << slot_bits)?,
            slot_bits,
            scramble: Scramble::new(word_bits),
            remainder_bits,
            count_bits,
            count_max: u64::MAX >> (64 - count_bits),
            generation,
        })
    }

    #[inline(always)]
    fn slots(&self) -> &[AtomicU64] {
        &self.slots
    }

    #[inline(always)]
    fn place(&self, kmer: u64) -> Place {
        let scrambled = self.scramble.forward(kmer);
        Place {
            home: scrambled >> self.remainder_bits,
            remainder: scrambled & !(u64::MAX << self.remainder_bits),
        }
    }

    #[inline(always)]
    fn prefetch(&self, place: Place) {
        #[cfg(target_arch = "x86_64")]
        {
            let slot = &self.slots()[(place.home << LINE_SLOT_BITS) as usize];
            // SAFETY: a prefetch is a hint: it never faults and changes no memory; the
            // address is a slot of the table.
            unsafe {
                core::arch::x86_64::_mm_prefetch(
                    (slot as *const AtomicU64).cast::<i8>(),
                    core::arch::x86_64::_MM_HINT_T0,
                );
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = place;
    }

    /// The line of the `probe`th look of a k-mer at home `home`: home, home + 1, home + 3,
    /// home + 6, ... (triangular steps, so the probe sequences of neighbouring homes part).
    #[inline(always)]
    fn line(&self, home: u64, probe: u64) -> u64 {
        (home + probe * (probe + 1) / 2) & ((1 << (self.slot_bits - LINE_SLOT_BITS)) - 1)
    }

    /// A slot's value without its count: the k-mer's remainder and the line probe it is at.
    #[inline(always)]
    fn tag(&self, place: Place, probe: u64) -> u64 {
        ((place.remainder << PROBE_BITS) | (probe + 1)) << self.count_bits
    }

    /// Adds 1 to `kmer`'s count. Returns `Ok(true)` if its count went past the slot's field
    /// (the caller counts it in the overflow map), `Err(())` if its lines are all taken.
    #[inline(always)]
    fn add(&self, place: Place) -> Result<bool, ()> {
        let slots = self.slots();
        let count_mask = self.count_max;
        for probe in 0..MAX_LINE_PROBES {
            let first = (self.line(place.home, probe) << LINE_SLOT_BITS) as usize;
            let tag = self.tag(place, probe);
            for slot in &slots[first..first + LINE_SLOTS as usize] {
                let mut seen = slot.load(Relaxed);
                loop {
                    let new = if seen == 0 {
                        tag | 1
                    } else if seen & !count_mask == tag {
                        if seen & count_mask == count_mask {
                            return Ok(true);
                        }
                        seen + 1
                    } else {
                        break; // another k-mer's slot: the next one
                    };
                    match slot.compare_exchange_weak(seen, new, Relaxed, Relaxed) {
                        Ok(_) => return Ok(false),
                        Err(now) => seen = now,
                    }
                }
            }
        }
        Err(())
    }

    /// Every k-mer with its count in the slot (without the overflow).
    fn for_each(&self, visit: impl FnMut(u64, u64)) {
        self.for_each_in(0..self.slots().len(), visit);
    }

    /// As [`for_each`](Self::for_each), for the slots of `range` only.
    fn for_each_in(&self, range: core::ops::Range<usize>, mut visit: impl FnMut(u64, u64)) {
        let line_mask = (1u64 << (self.slot_bits - LINE_SLOT_BITS)) - 1;
        let tag_bits = self.count_bits + PROBE_BITS;
        let first = range.start;
        for (offset, slot) in self.slots()[range].iter().enumerate() {
            let index = first + offset;
            let value = slot.load(Relaxed);
            if value == 0 {
                continue;
            }
            let probe = ((value >> self.count_bits) & ((1 << PROBE_BITS) - 1)) - 1;
            let line = index as u64 >> LINE_SLOT_BITS;
            let home = line.wrapping_sub(probe * (probe + 1) / 2) & line_mask;
            let remainder = if self.remainder_bits == 0 {
                0
            } else {
                value >> tag_bits
            };
            let kmer = self
                .scramble
                .backward(home << self.remainder_bits | remainder);
            visit(kmer, value & self.count_max);
        }
    }
}

/// `len` zeroed slots, from `alloc_zeroed`: a large one is a fresh mapping whose pages the
/// kernel provides (zeroed) once touched, so untouched slots cost no memory.
#[cfg(not(loom))]
fn zeroed_slots(len: usize) -> Result<Box<[AtomicU64]>, Error> {
    let layout = std::alloc::Layout::array::<AtomicU64>(len)
        .map_err(|_| Error::Table(floe::Error::CapacityOverflow))?;
    let failed = Error::Table(floe::Error::AllocationFailed {
        bytes: layout.size(),
    });
    if layout.size() == 0 {
        return Err(failed);
    }
    // SAFETY: the layout's size is not zero (checked above).
    let base = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicU64>();
    if base.is_null() {
        return Err(failed);
    }
    ask_for_huge_pages(base.cast(), layout.size());
    // SAFETY: `base` is a live allocation of the global allocator with the layout of `len`
    // `AtomicU64`s (which a `Box<[AtomicU64]>` of `len` frees with), and all zeroes is a valid
    // `AtomicU64`.
    Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, len)) })
}

/// Asks the kernel for huge pages under the table (`MADV_HUGEPAGE`, before its first touch):
/// with 4 KiB pages a table of gigabytes costs a page walk per k-mer on top of its line, and
/// a page fault per 4 KiB the first time. Where the kernel says no, the table works as it is.
#[cfg(not(loom))]
fn ask_for_huge_pages(base: *mut u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    // Not under Miri, which has no madvise (its tables are small anyway).
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // The whole huge pages inside the allocation (madvise takes page-aligned ranges).
        let start = (base as usize).next_multiple_of(HUGE);
        let end = (base as usize + bytes) / HUGE * HUGE;
        if end > start {
            // SAFETY: advice on memory this table owns; it changes no contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (base, bytes, HUGE);
}

/// Loom's atomics cannot be made from zeroed memory: one by one (its tables are tiny).
#[cfg(loom)]
fn zeroed_slots(len: usize) -> Result<Box<[AtomicU64]>, Error> {
    Ok((0..len).map(|_| AtomicU64::new(0)).collect())
}

/// The compact engine's table and overflow.
pub struct Compact {
    k: usize,
    /// The largest table it may grow to (log2 of its slots): a memory budget's cap.
    max_slot_bits: u32,
    table: RwLock<Slots>,
    /// Counts past a slot's count field, per k-mer.
    overflow: FlatMap<u64, u64>,
}

impl Compact {
    /// A table for `size_hint` distinct k-mers of length `k` (at most 9/10 full, the load
    /// it grows at; it grows past them on its own).
    ///
    /// # Errors
    /// [`Error::Usage`] if a table of that size cannot be had (the hint is the command
    /// line's).
    pub fn new(k: usize, size_hint: usize) -> Result<Compact, Error> {
        Compact::within(k, size_hint, None)
    }

    /// As [`new`](Self::new), with a table of at most `max_table_bytes` (its slots, 8 bytes
    /// each): a growth past it fails with [`Error::OverBudget`] instead.
    ///
    /// # Errors
    /// As `new`, and [`Error::OverBudget`] if not even the smallest table fits.
    pub fn within(
        k: usize,
        size_hint: usize,
        max_table_bytes: Option<usize>,
    ) -> Result<Compact, Error> {
        let max_slot_bits = match max_table_bytes {
            None => 48,
            Some(bytes) => {
                let slots = bytes / 8;
                if slots < 1 << MIN_SLOT_BITS {
                    return Err(Error::OverBudget { table_bytes: bytes });
                }
                slots.ilog2().min(48)
            }
        };
        let slots = size_hint.saturating_add(size_hint / 9).max(1);
        let slot_bits = slots
            .next_power_of_two()
            .trailing_zeros()
            .min(max_slot_bits);
        let table = Slots::new(k, slot_bits, 1).map_err(|error| {
            Error::Usage(format!(
                "cannot make a table for {size_hint} k-mers (the size hint, -s): {error}"
            ))
        })?;
        Ok(Compact {
            k,
            max_slot_bits,
            table: RwLock::new(table),
            overflow: FlatMap::new(),
        })
    }

    /// Slots in the table now.
    pub fn slots(&self) -> usize {
        1 << self
            .table
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .slot_bits
    }

    /// Makes the table twice as large (or more, until every k-mer fits), unless it is no longer the one of `generation`.
    fn grow(&self, generation: u64) -> Result<(), Error> {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if table.generation != generation {
            return Ok(());
        }
        // At 4^k lines every k-mer has a line of its own: that table is never full.
        let most = 2 * self.k as u32 + LINE_SLOT_BITS;
        let mut bits = (table.slot_bits + 1).min(most);
        loop {
            if bits > most {
                return Err(Error::Internal(
                    "the k-mer table is full at 4^k lines".to_owned(),
                ));
            }
            if bits > self.max_slot_bits {
                return Err(Error::OverBudget {
                    table_bytes: 8 << self.max_slot_bits,
                });
            }
            let larger = Slots::new(self.k, bits, table.generation + 1)?;
            // The larger table's count field is wider (its remainder is shorter): a count
            // that had overflowed takes back what fits, the rest stays in the overflow map.
            let mut moved = true;
            let mut refolded = Vec::new();
            table.for_each(|kmer, count| {
                let count = if count == table.count_max {
                    let total = count + self.overflow.get(&kmer).unwrap_or(0);
                    let kept = total.min(larger.count_max);
                    refolded.push((kmer, total - kept));
                    kept
                } else {
                    count
                };
                moved &= moved && larger.put(kmer, count);
            });
            if moved {
                for (kmer, extra) in refolded {
                    if extra == 0 {
                        self.overflow.remove(&kmer);
                    } else {
                        self.overflow.insert(kmer, extra);
                    }
                }
                *table = larger;
                return Ok(());
            }
            bits += 1;
        }
    }
}

impl Slots {
    /// Puts `kmer` with `count` into a table no one else uses (a growth's new table).
    /// Returns false if its lines are all taken.
    fn put(&self, kmer: u64, count: u64) -> bool {
        let place = self.place(kmer);
        let slots = self.slots();
        for probe in 0..MAX_LINE_PROBES {
            let first = (self.line(place.home, probe) << LINE_SLOT_BITS) as usize;
            if let Some(slot) = slots[first..first + LINE_SLOTS as usize]
                .iter()
                .find(|slot| slot.load(Relaxed) == 0)
            {
                slot.store(self.tag(place, probe) | count, Relaxed);
                return true;
            }
        }
        false
    }
}

impl Engine for Compact {
    fn run(&self, threads: usize, worker: &impl Worker) -> Result<u64, Error> {
        let sinks = (0..threads)
            .map(|_| CompactSink {
                engine: self,
                places: Vec::with_capacity(super::BATCH),
                refused: Vec::new(),
            })
            .collect();
        run_workers(sinks, worker)
    }

    fn into_table(self) -> Box<dyn Table> {
        let table = self.table.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut len = 0;
        table.for_each(|_, _| len += 1);
        Box::new(CompactTable {
            table,
            overflow: self.overflow,
            len,
        })
    }
}

/// A worker's handle: its batch's places, and the k-mers the table refused.
struct CompactSink<'e> {
    engine: &'e Compact,
    places: Vec<Place>,
    refused: Vec<u64>,
}

impl CompactSink<'_> {
    /// Counts `kmers` into the table as it is; those it has no slot for go to `refused`.
    /// Returns the table's generation.
    fn count(&mut self, kmers: &[u64]) -> Result<u64, Error> {
        let engine = self.engine;
        let table = engine.table.read().unwrap_or_else(|e| e.into_inner());
        self.places.clear();
        self.places
            .extend(kmers.iter().map(|&kmer| table.place(kmer)));
        for place in self.places.iter().take(PREFETCH_DISTANCE) {
            table.prefetch(*place);
        }
        for (index, (&kmer, &place)) in kmers.iter().zip(&self.places).enumerate() {
            if let Some(&ahead) = self.places.get(index + PREFETCH_DISTANCE) {
                table.prefetch(ahead);
            }
            match table.add(place) {
                Ok(false) => {}
                Ok(true) => {
                    engine
                        .overflow
                        .try_fetch_add(kmer, 1)
                        .map_err(Error::Table)?;
                }
                Err(()) => self.refused.push(kmer),
            }
        }
        Ok(table.generation)
    }
}

impl Sink for CompactSink<'_> {
    fn add(&mut self, kmers: &[u64]) -> Result<(), Error> {
        let mut generation = self.count(kmers)?;
        while !self.refused.is_empty() {
            self.engine.grow(generation)?;
            let refused = std::mem::take(&mut self.refused);
            generation = self.count(&refused)?;
        }
        Ok(())
    }

    fn finish(self) -> Result<(), Error> {
        Ok(())
    }
}

/// A finished compact count.
struct CompactTable {
    table: Slots,
    overflow: FlatMap<u64, u64>,
    len: usize,
}

impl Table for CompactTable {
    fn for_each(&self, visit: &mut dyn FnMut(u64, u64)) {
        self.for_each_shard(0, 1, visit);
    }

    fn for_each_shard(&self, shard: usize, shards: usize, visit: &mut dyn FnMut(u64, u64)) {
        let slots = self.table.slots().len();
        let range = slots * shard / shards..slots * (shard + 1) / shards;
        let overflowed = !self.overflow.is_empty();
        self.table.for_each_in(range, |kmer, count| {
            let more = if overflowed && count == self.table.count_max {
                self.overflow.get(&kmer).unwrap_or(0)
            } else {
                0
            };
            visit(kmer, count + more);
        });
    }

    fn len(&self) -> usize {
        self.len
    }

    fn sorting_parts(&self) -> usize {
        // A copy of an eighth of the k-mers (2 bytes a k-mer) beside the table's 8-10.
        8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::count::{table_kmers, Numbers};

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic only, and slow to interpret")]
    fn the_scramble_is_a_bijection_for_every_k() {
        assert_eq!(MUL_1.wrapping_mul(INV_1), 1);
        assert_eq!(MUL_2.wrapping_mul(INV_2), 1);
        for k in 1..=32u32 {
            let scramble = Scramble::new(2 * k);
            let mut seen = std::collections::HashSet::new();
            for x in (0..2000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & scramble.mask) {
                let y = scramble.forward(x);
                assert!(y <= scramble.mask);
                assert_eq!(scramble.backward(y), x, "k = {k}");
                seen.insert(y);
            }
            if k >= 6 {
                assert_eq!(seen.len(), 2000);
            }
        }
    }

    #[test]
    fn counts_every_kmer_on_every_thread_through_growth() {
        // Miri (ci/miri.sh) runs one k and fewer k-mers: the interpreter takes a while per
        // k-mer.
        let (ks, many): (&[usize], u64) = if cfg!(miri) {
            (&[8], 600)
        } else {
            (&[5, 8, 12, 21, 32], 5000)
        };
        for &k in ks {
            // A table of 4096 slots (512 under Miri) for 5000 k-mers (600): it must grow.
            let engine = Compact::new(k, 10).unwrap();
            let n = if k < 7 { 1 << (2 * k) } else { many };
            assert_eq!(engine.run(3, &Numbers(n)).unwrap(), 6 * n);
            assert!(
                k == 5 || engine.slots() > 1 << MIN_SLOT_BITS,
                "k = {k}: {}",
                engine.slots()
            );
            let table = engine.into_table();
            assert_eq!(table.len() as u64, n);
            let mut counts = table_kmers(&*table);
            counts.sort_unstable();
            assert_eq!(
                counts,
                (0..n).map(|kmer| (kmer, 6)).collect::<Vec<_>>(),
                "k = {k}"
            );
        }
    }

    #[test]
    fn counts_past_the_field_go_to_the_overflow() {
        // k = 32 in 2^12 slots (2^9 lines): 55 remainder bits, 5 probe bits, 4 count bits (15
        // at most).
        let engine = Compact::new(32, 10).unwrap();
        let count_max = if cfg!(miri) { 1 } else { 15 };
        assert_eq!(engine.table.read().unwrap().count_max, count_max);
        let kmers: Vec<u64> = [7u64, u64::MAX].repeat(50);
        struct Repeat(Vec<u64>);
        impl Worker for Repeat {
            fn work<S: Sink>(&self, sink: &mut S) -> Result<u64, Error> {
                sink.add(&self.0)?;
                Ok(self.0.len() as u64)
            }
        }
        assert_eq!(engine.run(2, &Repeat(kmers)).unwrap(), 200);
        let mut counts = table_kmers(&*engine.into_table());
        counts.sort_unstable();
        assert_eq!(counts, [(7, 100), (u64::MAX, 100)]);
    }

    #[test]
    fn overflowed_counts_survive_growth() {
        // k = 32 from 2^12 slots: counts of 15 overflow; then 5000 other k-mers make the
        // table grow (its count field widens to 5 bits and more), then a few more of the
        // first, too few to fill the wider field again: the overflow's share must have moved
        // into it. (Under Miri from 2^9 slots, counts of 1, and 600 others.)
        let engine = Compact::new(32, 10).unwrap();
        let others = if cfg!(miri) { 600 } else { 5000 };
        struct Phases(u64);
        impl Worker for Phases {
            fn work<S: Sink>(&self, sink: &mut S) -> Result<u64, Error> {
                sink.add(&[7; 100])?;
                let others: Vec<u64> = (1000..1000 + self.0).collect();
                sink.add(&others)?;
                sink.add(&[7; 3])?;
                Ok(103 + self.0)
            }
        }
        assert_eq!(engine.run(2, &Phases(others)).unwrap(), 2 * (103 + others));
        assert!(engine.slots() > 1 << MIN_SLOT_BITS);
        let counts = table_kmers(&*engine.into_table());
        assert_eq!(counts.len() as u64, others + 1);
        assert!(
            counts.contains(&(7, 206)),
            "{:?}",
            counts.iter().find(|c| c.0 == 7)
        );
        assert!(counts.iter().all(|&(kmer, count)| kmer == 7 || count == 2));
    }

    #[test]
    #[cfg_attr(miri, ignore = "tables of 2^15 slots and more: too slow to interpret")]
    fn a_crowded_home_probes_on_and_grows() {
        // 600 k-mers whose scrambles share their top 12 bits: at 2^12 slots (2^9 lines) all
        // want one home line, and its 31 lines hold 248: the table must grow (and again, while
        // too many share a home or its neighbours), never lose one.
        let k = 16;
        let scramble = Scramble::new(32);
        let crowd: Vec<u64> = (0..600u64)
            .map(|low| scramble.backward(low << 13))
            .collect();
        let engine = Compact::new(k, 1000).unwrap();
        struct Crowd(Vec<u64>);
        impl Worker for Crowd {
            fn work<S: Sink>(&self, sink: &mut S) -> Result<u64, Error> {
                sink.add(&self.0)?;
                Ok(self.0.len() as u64)
            }
        }
        assert_eq!(engine.run(2, &Crowd(crowd.clone())).unwrap(), 1200);
        assert!(engine.slots() >= 1 << 15, "{}", engine.slots());
        let mut counts = table_kmers(&*engine.into_table());
        counts.sort_unstable();
        let mut expected: Vec<_> = crowd.iter().map(|&kmer| (kmer, 2)).collect();
        expected.sort_unstable();
        assert_eq!(counts, expected);
    }
}

#[cfg(all(test, loom))]
mod model {
    //! The concurrency argument of the module docs under loom (`ci/loom.sh`): workers racing
    //! for one new k-mer's slot, and a growth while another worker counts. Each model fails
    //! when the protocol is weakened (checked by hand): with the slot's compare-and-swap made
    //! a load and a store (counts lost), with a worker that lost the race for a slot moving
    //! on instead of re-reading it (a k-mer in two slots), and with the growth under the read
    //! lock instead of the write lock (a count made in the old table after the move, lost).

    use loom::{sync::Arc, thread};

    use super::*;

    /// Short k-mers: a one-line table (8 slots) has 43 count bits, so no count overflows.
    const K: usize = 8;

    fn sink(engine: &Compact) -> CompactSink<'_> {
        CompactSink {
            engine,
            places: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// The k-mers and counts of a finished count, sorted, each k-mer checked to be in one
    /// slot only.
    fn counts(engine: Arc<Compact>) -> Vec<(u64, u64)> {
        let engine =
            Arc::try_unwrap(engine).unwrap_or_else(|_| panic!("a worker still holds the engine"));
        let mut counts = Vec::new();
        engine
            .into_table()
            .for_each(&mut |kmer, count| counts.push((kmer, count)));
        counts.sort_unstable();
        assert!(
            counts.windows(2).all(|pair| pair[0].0 != pair[1].0),
            "a k-mer in two slots: {counts:?}"
        );
        counts
    }

    /// Runs `model` under loom and checks it explored more than one interleaving.
    fn explore(model: impl Fn() + Sync + Send + 'static) {
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&runs);
        loom::model(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            model();
        });
        let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            runs > 1,
            "loom explored {runs} execution: the model is vacuous"
        );
    }

    /// Two workers add the same new k-mer (one of them another k-mer too): it ends in one
    /// slot with both counts.
    #[test]
    fn workers_racing_for_a_new_kmer_share_its_slot() {
        explore(|| {
            let engine = Arc::new(Compact::new(K, 1).unwrap());
            assert_eq!(engine.slots(), 8);
            let other = {
                let engine = Arc::clone(&engine);
                thread::spawn(move || sink(&engine).add(&[5, 9]).unwrap())
            };
            sink(&engine).add(&[5]).unwrap();
            other.join().unwrap();
            assert_eq!(counts(engine), [(5, 2), (9, 1)]);
        });
    }

    /// A worker whose k-mer finds the table full grows it while another counts a k-mer
    /// already in it: no count is lost to the move.
    #[test]
    fn a_growth_loses_no_count_made_beside_it() {
        explore(|| {
            let engine = Arc::new(Compact::new(K, 1).unwrap());
            // Fill the one line (no other thread yet: nothing to interleave).
            sink(&engine).add(&[0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
            assert_eq!(engine.slots(), 8);
            let grower = {
                let engine = Arc::clone(&engine);
                thread::spawn(move || sink(&engine).add(&[100]).unwrap())
            };
            sink(&engine).add(&[3]).unwrap();
            grower.join().unwrap();
            assert!(engine.slots() > 8, "the table did not grow");
            let mut expected: Vec<(u64, u64)> = (0..8).map(|kmer| (kmer, 1)).collect();
            expected[3].1 = 2;
            expected.push((100, 1));
            assert_eq!(counts(engine), expected);
        });
    }
}
