//! The compact engine: a counting table of its own for k-mers, 8 bytes a slot (16 for k
//! above 32), at about jellyfish's memory (issue 45), where the shared map spends 16 bytes an
//! entry and more.
//!
//! # The table
//! A k-mer of k bases is a number of `w = 2k` bits. An invertible hash `h` (a multiplication
//! by an odd constant, an xor-shift, another multiplication, all modulo `2^w`: each step is a
//! bijection of `w`-bit numbers) scrambles it. The table is `2^l` lines of 8 slots (a cache
//! line each); the top `l` bits of `h(kmer)` are its home line. A slot is one word of the
//! k-mer's ([`Slot`]): a `u64` for k <= 32, a `u128` (four a line, each changed by a 16-byte
//! compare-and-swap) up to 64, which is otherwise the same table:
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
//! 32, more at shorter k (40 bits at k = 21 and 2^24 slots; at most 64); a count that
//! reaches the field's largest value stays there and the rest of it is kept in an overflow
//! map (`FlatMap`, from the slot's index to the counts past the field: a k-mer keeps its slot
//! for the table's life, and a growth moves the overflow with the slots), which holds only
//! the k-mers counted that often.
//!
//! # Concurrency
//! Slots only go from empty to a k-mer's tag (remainder and probe) and then only count up,
//! each change one compare-and-swap; no slot is ever emptied while workers count. So a
//! worker that passed a slot saw it hold another k-mer's tag, which it keeps: two workers
//! adding the same new k-mer race for the same first empty slot, one wins the CAS and the
//! other, re-reading it, finds its own tag there and counts into it. A k-mer is thus in one
//! slot only. Every access is `Relaxed`: no slot's value says anything about another's, and
//! the counts are read after the workers are joined (which orders everything before it).
//! A 16-byte slot must be read whole, too: a torn read (one half before a change, one after)
//! could show a slot that holds the k-mer's tag as another k-mer's, and the k-mer would take
//! a second slot. portable-atomic's `AtomicU128` loads with `cmpxchg16b` or, where the CPU
//! has AVX, one aligned 16-byte `vmovdqa` (atomic on those CPUs, as Intel and AMD document).
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
#[cfg(not(floe_loom))]
use std::sync::{atomic::AtomicU64, RwLock};

// Under loom (`ci/loom.sh`, the model at the end of this file) the 8-byte slots and the
// growth lock are loom's, so that it explores the workers' interleavings (its models count
// short k-mers; loom has no 16-byte atomic).
#[cfg(floe_loom)]
use loom::sync::{atomic::AtomicU64, RwLock};

use floe::FlatMap;
use portable_atomic::AtomicU128;

use super::{run_workers, Engine, Sink, Table, Worker};
use crate::{kmer::Word, Error};

/// A word the table's slots are made of: the k-mer's own (a `u64` for k <= 32, eight slots
/// a line; a `u128` up to 64, four a line), stored in an atomic of its width.
pub trait Slot: Word + core::ops::Add<Output = Self> {
    /// The atomic a slot is.
    type Atomic: Send + Sync;
    /// log2 of the slots in a 64-byte line.
    const LINE_SLOT_BITS: u32;
    /// The scramble's first odd multiplier.
    const MUL_1: Self;
    /// The scramble's second odd multiplier.
    const MUL_2: Self;
    /// `MUL_1`'s inverse modulo 2^BITS (so modulo every smaller power of two too).
    const INV_1: Self;
    /// `MUL_2`'s inverse modulo 2^BITS.
    const INV_2: Self;
    /// A slot holding 0 (loom's atomics cannot be made from zeroed memory).
    #[cfg(floe_loom)]
    fn empty() -> Self::Atomic;
    /// The slot's value (`Relaxed`: see the module docs).
    fn load(slot: &Self::Atomic) -> Self;
    /// Sets the slot (`Relaxed`; a growth's new table, which no other thread sees yet).
    fn store(slot: &Self::Atomic, value: Self);
    /// The slot's compare-and-swap (`Relaxed` both ways: see the module docs).
    ///
    /// # Errors
    /// The value found, when it was not `current`.
    fn compare_exchange_weak(slot: &Self::Atomic, current: Self, new: Self) -> Result<Self, Self>;
}

/// The inverse of an odd `a` modulo 2^64 (Newton's iteration: each step doubles the correct
/// low bits, from 3).
const fn inverse_64(a: u64) -> u64 {
    let mut x = a;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// As [`inverse_64`], modulo 2^128 (one step more).
const fn inverse_128(a: u128) -> u128 {
    let mut x = a;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u128.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

impl Slot for u64 {
    type Atomic = AtomicU64;
    const LINE_SLOT_BITS: u32 = 3;
    // splitmix64's.
    const MUL_1: u64 = 0xbf58_476d_1ce4_e5b9;
    const MUL_2: u64 = 0x94d0_49bb_1331_11eb;
    const INV_1: u64 = inverse_64(Self::MUL_1);
    const INV_2: u64 = inverse_64(Self::MUL_2);

    #[cfg(floe_loom)]
    fn empty() -> AtomicU64 {
        AtomicU64::new(0)
    }

    #[inline(always)]
    fn load(slot: &AtomicU64) -> u64 {
        slot.load(Relaxed)
    }

    #[inline(always)]
    fn store(slot: &AtomicU64, value: u64) {
        slot.store(value, Relaxed);
    }

    #[inline(always)]
    fn compare_exchange_weak(slot: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        slot.compare_exchange_weak(current, new, Relaxed, Relaxed)
    }
}

impl Slot for u128 {
    // portable-atomic's: `cmpxchg16b` (chosen at run time where the build does not assume
    // it; every x86-64 CPU of the last 15 years has it), a lock only where there is none.
    type Atomic = AtomicU128;
    const LINE_SLOT_BITS: u32 = 2;
    // PCG's 128-bit multiplier, and the golden ratio's digits made odd.
    const MUL_1: u128 = 0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645;
    const MUL_2: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835;
    const INV_1: u128 = inverse_128(Self::MUL_1);
    const INV_2: u128 = inverse_128(Self::MUL_2);

    #[cfg(floe_loom)]
    fn empty() -> AtomicU128 {
        AtomicU128::new(0)
    }

    #[inline(always)]
    fn load(slot: &AtomicU128) -> u128 {
        slot.load(Relaxed)
    }

    #[inline(always)]
    fn store(slot: &AtomicU128, value: u128) {
        slot.store(value, Relaxed);
    }

    #[inline(always)]
    fn compare_exchange_weak(slot: &AtomicU128, current: u128, new: u128) -> Result<u128, u128> {
        slot.compare_exchange_weak(current, new, Relaxed, Relaxed)
    }
}

/// The lines a k-mer may look at before the table grows; the probe field has 5 bits and
/// holds `line probe + 1`.
/// (Two under loom, whose model tables are one or two lines: every probe is a step it explores.)
pub const MAX_LINE_PROBES: u64 = if cfg!(floe_loom) { 2 } else { 31 };
const PROBE_BITS: u32 = 5;

/// The fewest slots a table of `W` has (unless 4^k lines are fewer): enough bits left for
/// the count (at least 1 at k = 32 and 64 from 9 bits). Under Miri the least, so its tests
/// grow the table with few k-mers; under loom one line (its model uses short k-mers).
const fn min_slot_bits<W: Slot>() -> u32 {
    if cfg!(floe_loom) {
        W::LINE_SLOT_BITS
    } else if cfg!(miri) {
        9
    } else {
        12
    }
}

/// K-mers whose slots are prefetched ahead of the one being counted.
const PREFETCH_DISTANCE: usize = 16;

/// A bijective scramble of `w`-bit numbers and its inverse.
#[derive(Clone, Copy, Debug)]
struct Scramble<W> {
    mask: W,
    shift: u32,
}

impl<W: Slot> Scramble<W> {
    fn new(bits: u32) -> Scramble<W> {
        Scramble {
            mask: W::MAX >> (W::BITS - bits),
            shift: bits.div_ceil(2),
        }
    }

    #[inline(always)]
    fn forward(self, x: W) -> W {
        let x = x.wrapping_mul(W::MUL_1) & self.mask;
        let x = x ^ (x >> self.shift);
        x.wrapping_mul(W::MUL_2) & self.mask
    }

    fn backward(self, y: W) -> W {
        let y = y.wrapping_mul(W::INV_2) & self.mask;
        // x ^ (x >> s) with s >= bits / 2 is undone by applying it again.
        let y = y ^ (y >> self.shift);
        y.wrapping_mul(W::INV_1) & self.mask
    }
}

/// One table: its slots, how a slot is laid out, and the counts past the slots' field.
struct Slots<W: Slot> {
    slots: Box<[W::Atomic]>,
    /// log2 of the slot count (the lines' and `W::LINE_SLOT_BITS`).
    slot_bits: u32,
    scramble: Scramble<W>,
    remainder_bits: u32,
    /// The low `remainder_bits` bits.
    remainder_mask: W,
    /// The lines, less one.
    line_mask: u64,
    /// The count field's width: what the slot leaves, at most 64.
    count_bits: u32,
    count_max: u64,
    /// `count_max` as a slot's word.
    count_mask: W,
    /// Tables made so far, this one included: a worker that saw the table full grows it
    /// only if it is still the table it saw.
    generation: u64,
    /// Counts past a slot's count field, by the slot's index: a k-mer stays in its slot for
    /// the table's life, and a growth moves these with the slots. (Keyed by slot, not by
    /// k-mer, so that one map serves k-mers of any width.)
    overflow: FlatMap<u64, u64>,
}

/// Where a k-mer goes: its home line and the tag (remainder; the probe is added per line).
#[derive(Clone, Copy)]
struct Place<W> {
    home: u64,
    remainder: W,
}

impl<W: Slot> Slots<W> {
    /// A table of `2^slot_bits` slots for k-mers of length `k` (`slot_bits` is brought into
    /// `min_slot_bits..=2k + LINE_SLOT_BITS`: at most a line for every k-mer).
    fn new(k: usize, slot_bits: u32, generation: u64) -> Result<Slots<W>, Error> {
        let word_bits = 2 * k as u32;
        let slot_bits = slot_bits
            .max(min_slot_bits::<W>())
            .min(word_bits + W::LINE_SLOT_BITS);
        // A k-mer filling its word needs two lines at least, so that the remainder is
        // narrower than the word (the home is a shift of the scramble by it).
        let slot_bits = if word_bits == W::BITS {
            slot_bits.max(W::LINE_SLOT_BITS + 1)
        } else {
            slot_bits
        };
        let remainder_bits = word_bits - (slot_bits - W::LINE_SLOT_BITS);
        let count_bits = (W::BITS - remainder_bits - PROBE_BITS).min(64);
        let count_max = u64::MAX >> (64 - count_bits);
        Ok(Slots {
            slots: zeroed_slots::<W>(1 << slot_bits)?,
            slot_bits,
            scramble: Scramble::new(word_bits),
            remainder_bits,
            remainder_mask: if remainder_bits == 0 {
                W::ZERO
            } else {
                W::MAX >> (W::BITS - remainder_bits)
            },
            line_mask: (1 << (slot_bits - W::LINE_SLOT_BITS)) - 1,
            count_bits,
            count_max,
            count_mask: W::truncate(u128::from(count_max)),
            generation,
            overflow: FlatMap::new(),
        })
    }

    #[inline(always)]
    fn slots(&self) -> &[W::Atomic] {
        &self.slots
    }

    #[inline(always)]
    fn place(&self, kmer: W) -> Place<W> {
        let scrambled = self.scramble.forward(kmer);
        Place {
            home: (scrambled >> self.remainder_bits).low_u64(),
            remainder: scrambled & self.remainder_mask,
        }
    }

    #[inline(always)]
    fn prefetch(&self, place: Place<W>) {
        #[cfg(target_arch = "x86_64")]
        {
            let slot = &self.slots()[(place.home << W::LINE_SLOT_BITS) as usize];
            // SAFETY: a prefetch is a hint: it never faults and changes no memory; the
            // address is a slot of the table.
            unsafe {
                core::arch::x86_64::_mm_prefetch(
                    (slot as *const W::Atomic).cast::<i8>(),
                    core::arch::x86_64::_MM_HINT_T0,
                );
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = place;
    }

    /// The first slot of the line of the `probe`th look of a k-mer at home `home`: home,
    /// home + 1, home + 3, home + 6, ... (triangular steps, so the probe sequences of
    /// neighbouring homes part).
    #[inline(always)]
    fn line_start(&self, home: u64, probe: u64) -> usize {
        let line = (home + probe * (probe + 1) / 2) & self.line_mask;
        (line << W::LINE_SLOT_BITS) as usize
    }

    /// The slots of the `probe`th line a k-mer at `home` looks at.
    #[inline(always)]
    fn line(&self, home: u64, probe: u64) -> &[W::Atomic] {
        let first = self.line_start(home, probe);
        &self.slots()[first..first + (1 << W::LINE_SLOT_BITS)]
    }

    /// A slot's value without its count: the k-mer's remainder and the line probe it is at.
    #[inline(always)]
    fn tag(&self, place: Place<W>, probe: u64) -> W {
        ((place.remainder << PROBE_BITS) | W::from(probe as u8 + 1)) << self.count_bits
    }

    /// Adds 1 to `kmer`'s count. Returns `Ok(Some(slot))` if its count went past the slot's
    /// field (the caller counts it in the overflow under that slot's index), `Err(())` if its
    /// lines are all taken.
    #[inline(always)]
    fn add(&self, place: Place<W>) -> Result<Option<usize>, ()> {
        let count_mask = self.count_mask;
        let one = W::from(1u8);
        for probe in 0..MAX_LINE_PROBES {
            let tag = self.tag(place, probe);
            for slot in self.line(place.home, probe) {
                let mut seen = W::load(slot);
                loop {
                    let new = if seen == W::ZERO {
                        tag | one
                    } else if seen & !count_mask == tag {
                        if seen & count_mask == count_mask {
                            // The slot's index from its address (rare: kept out of the loop,
                            // which then carries no counter).
                            let offset =
                                slot as *const W::Atomic as usize - self.slots().as_ptr() as usize;
                            return Ok(Some(offset / size_of::<W::Atomic>()));
                        }
                        seen + one
                    } else {
                        break; // another k-mer's slot: the next one
                    };
                    match W::compare_exchange_weak(slot, seen, new) {
                        Ok(_) => return Ok(None),
                        Err(now) => seen = now,
                    }
                }
            }
        }
        Err(())
    }

    /// Puts `kmer` with `count` (at most the field's) into a table no one else uses (a
    /// growth's new table). Returns its slot, or `None` if its lines are all taken.
    fn put(&self, kmer: W, count: u64) -> Option<usize> {
        debug_assert!(count <= self.count_max);
        let place = self.place(kmer);
        for probe in 0..MAX_LINE_PROBES {
            let line = self.line(place.home, probe);
            if let Some(offset) = line.iter().position(|slot| W::load(slot) == W::ZERO) {
                W::store(
                    &line[offset],
                    self.tag(place, probe) | W::truncate(u128::from(count)),
                );
                return Some(self.line_start(place.home, probe) + offset);
            }
        }
        None
    }

    /// Every k-mer with its slot and the count in the slot (without the overflow).
    fn for_each(&self, visit: impl FnMut(usize, W, u64)) {
        self.for_each_in(0..self.slots().len(), visit);
    }

    /// As [`for_each`](Self::for_each), for the slots of `range` only.
    fn for_each_in(&self, range: core::ops::Range<usize>, mut visit: impl FnMut(usize, W, u64)) {
        let line_mask = self.line_mask;
        let tag_bits = self.count_bits + PROBE_BITS;
        let first = range.start;
        for (offset, slot) in self.slots()[range].iter().enumerate() {
            let index = first + offset;
            let value = W::load(slot);
            if value == W::ZERO {
                continue;
            }
            let probe = ((value >> self.count_bits).low_u64() & ((1 << PROBE_BITS) - 1)) - 1;
            let line = index as u64 >> W::LINE_SLOT_BITS;
            let home = line.wrapping_sub(probe * (probe + 1) / 2) & line_mask;
            let remainder = if self.remainder_bits == 0 {
                W::ZERO
            } else {
                value >> tag_bits
            };
            let home = W::truncate(u128::from(home)) << self.remainder_bits;
            let kmer = self.scramble.backward(home | remainder);
            visit(index, kmer, value.low_u64() & self.count_max);
        }
    }

    /// The count of the k-mer in slot `index` whose field holds `field`, overflow included.
    #[inline(always)]
    fn count(&self, index: usize, field: u64) -> u64 {
        // (Most tables have no overflow: a test of the field, then of the map once.)
        if field == self.count_max && !self.overflow.is_empty() {
            field + self.overflow.get(&(index as u64)).unwrap_or(0)
        } else {
            field
        }
    }
}

/// `len` zeroed slots, from `alloc_zeroed`: a large one is a fresh mapping whose pages the
/// kernel provides (zeroed) once touched, so untouched slots cost no memory.
#[cfg(not(floe_loom))]
fn zeroed_slots<W: Slot>(len: usize) -> Result<Box<[W::Atomic]>, Error> {
    let layout = std::alloc::Layout::array::<W::Atomic>(len)
        .map_err(|_| Error::Table(floe::Error::CapacityOverflow))?;
    let failed = Error::Table(floe::Error::AllocationFailed {
        bytes: layout.size(),
    });
    if layout.size() == 0 {
        return Err(failed);
    }
    // SAFETY: the layout's size is not zero (checked above).
    let base = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<W::Atomic>();
    if base.is_null() {
        return Err(failed);
    }
    ask_for_huge_pages(base.cast(), layout.size());
    // SAFETY: `base` is a live allocation of the global allocator with the layout of `len`
    // `W::Atomic`s (which a `Box<[W::Atomic]>` of `len` frees with), and all zeroes is a
    // valid atomic integer (`AtomicU64` and portable-atomic's `AtomicU128` alike: an integer
    // in a cell).
    Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, len)) })
}

/// Asks the kernel for huge pages under the table (`MADV_HUGEPAGE`, before its first touch):
/// with 4 KiB pages a table of gigabytes costs a page walk per k-mer on top of its line, and
/// a page fault per 4 KiB the first time. Where the kernel says no, the table works as it is.
#[cfg(not(floe_loom))]
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
#[cfg(floe_loom)]
fn zeroed_slots<W: Slot>(len: usize) -> Result<Box<[W::Atomic]>, Error> {
    Ok((0..len).map(|_| W::empty()).collect())
}

/// The compact engine's table, for k-mers packed in `W`.
pub struct Compact<W: Slot = u64> {
    k: usize,
    /// The largest table it may grow to (log2 of its slots): a memory budget's cap.
    max_slot_bits: u32,
    table: RwLock<Slots<W>>,
}

impl<W: Slot> Compact<W> {
    /// A table for `size_hint` distinct k-mers of length `k` (at most 9/10 full, the load
    /// it grows at; it grows past them on its own).
    ///
    /// # Errors
    /// [`Error::Usage`] if a table of that size cannot be had (the hint is the command
    /// line's).
    pub fn new(k: usize, size_hint: usize) -> Result<Compact<W>, Error> {
        Compact::within(k, size_hint, None)
    }

    /// As [`new`](Self::new), with a table of at most `max_table_bytes` (its slots, the
    /// word's size each): a growth past it fails with [`Error::OverBudget`] instead.
    ///
    /// # Errors
    /// As `new`, and [`Error::OverBudget`] if not even the smallest table fits.
    pub fn within(
        k: usize,
        size_hint: usize,
        max_table_bytes: Option<usize>,
    ) -> Result<Compact<W>, Error> {
        let max_slot_bits = match max_table_bytes {
            None => 48,
            Some(bytes) => {
                let slots = bytes / size_of::<W::Atomic>();
                if slots < 1 << min_slot_bits::<W>() {
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

    /// Makes the table twice as large (or more, until every k-mer fits), unless it is no
    /// longer the one of `generation`.
    fn grow(&self, generation: u64) -> Result<(), Error> {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if table.generation != generation {
            return Ok(());
        }
        // At 4^k lines every k-mer has a line of its own: that table is never full.
        let most = 2 * self.k as u32 + W::LINE_SLOT_BITS;
        let mut bits = (table.slot_bits + 1).min(most);
        loop {
            if bits > most {
                return Err(Error::Internal(
                    "the k-mer table is full at 4^k lines".to_owned(),
                ));
            }
            if bits > self.max_slot_bits {
                return Err(Error::OverBudget {
                    table_bytes: size_of::<W::Atomic>() << self.max_slot_bits,
                });
            }
            let larger = Slots::<W>::new(self.k, bits, table.generation + 1)?;
            // The larger table's count field is at least as wide (its remainder is shorter):
            // a count that had overflowed takes back what fits, the rest goes to the larger
            // table's overflow under its new slot.
            let (mut moved, mut failed) = (true, None);
            table.for_each(|index, kmer, field| {
                if !moved {
                    return;
                }
                let count = table.count(index, field);
                let kept = count.min(larger.count_max);
                match larger.put(kmer, kept) {
                    None => moved = false,
                    Some(slot) if count > kept => {
                        if let Err(error) = larger.overflow.try_fetch_add(slot as u64, count - kept)
                        {
                            failed.get_or_insert(error);
                        }
                    }
                    Some(_) => {}
                }
            });
            if let Some(error) = failed {
                return Err(Error::Table(error));
            }
            if moved {
                *table = larger;
                return Ok(());
            }
            bits += 1;
        }
    }
}

impl<W: Slot> Engine<W> for Compact<W> {
    fn run(&self, threads: usize, worker: &impl Worker<W>) -> Result<u64, Error> {
        let sinks = (0..threads)
            .map(|_| CompactSink {
                engine: self,
                places: Vec::with_capacity(super::BATCH),
                refused: Vec::new(),
            })
            .collect();
        run_workers(sinks, worker)
    }

    fn into_table(self) -> Box<dyn Table<W>> {
        let table = self.table.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut len = 0;
        table.for_each(|_, _, _| len += 1);
        Box::new(CompactTable { table, len })
    }
}

/// A worker's handle: its batch's places, and the k-mers the table refused.
struct CompactSink<'e, W: Slot> {
    engine: &'e Compact<W>,
    places: Vec<Place<W>>,
    refused: Vec<W>,
}

impl<W: Slot> CompactSink<'_, W> {
    /// Counts `kmers` into the table as it is; those it has no slot for go to `refused`.
    /// Returns the table's generation.
    fn count(&mut self, kmers: &[W]) -> Result<u64, Error> {
        // The read lock is held for the batch: a growth (under the write lock) waits for it,
        // so the slots and the overflow counted into here are the ones it then moves.
        let table = self.engine.table.read().unwrap_or_else(|e| e.into_inner());
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
                Ok(None) => {}
                Ok(Some(slot)) => {
                    table
                        .overflow
                        .try_fetch_add(slot as u64, 1)
                        .map_err(Error::Table)?;
                }
                Err(()) => self.refused.push(kmer),
            }
        }
        Ok(table.generation)
    }
}

impl<W: Slot> Sink<W> for CompactSink<'_, W> {
    fn add(&mut self, kmers: &[W]) -> Result<(), Error> {
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
struct CompactTable<W: Slot> {
    table: Slots<W>,
    len: usize,
}

impl<W: Slot> Table<W> for CompactTable<W> {
    fn for_each(&self, visit: &mut dyn FnMut(W, u64)) {
        self.for_each_shard(0, 1, visit);
    }

    fn for_each_shard(&self, shard: usize, shards: usize, visit: &mut dyn FnMut(W, u64)) {
        let slots = self.table.slots().len();
        let range = slots * shard / shards..slots * (shard + 1) / shards;
        self.table.for_each_in(range, |index, kmer, field| {
            visit(kmer, self.table.count(index, field));
        });
    }

    fn len(&self) -> usize {
        self.len
    }

    fn sorting_parts(&self) -> usize {
        // A copy of an eighth of the k-mers (2 bytes a k-mer) beside the table's 8-10 (with
        // 16-byte k-mers 4 beside 16-20: a sixteenth took 14% longer at k = 41, for 5% less
        // memory, each part being a pass over the table).
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
        assert_eq!(u64::MUL_1.wrapping_mul(u64::INV_1), 1);
        assert_eq!(u64::MUL_2.wrapping_mul(u64::INV_2), 1);
        assert_eq!(u128::MUL_1.wrapping_mul(u128::INV_1), 1);
        assert_eq!(u128::MUL_2.wrapping_mul(u128::INV_2), 1);
        fn check<W: Slot>(k: u32) {
            let scramble = Scramble::<W>::new(2 * k);
            let mut seen = std::collections::HashSet::new();
            let spread = W::truncate(0x9e37_79b9_7f4a_7c15_0123_4567_89ab_cdef);
            for i in 0..2000u128 {
                let x = W::truncate(i).wrapping_mul(spread) & scramble.mask;
                let y = scramble.forward(x);
                assert!(y <= scramble.mask);
                assert_eq!(scramble.backward(y), x, "k = {k}");
                seen.insert(y);
            }
            if k >= 6 {
                assert_eq!(seen.len(), 2000);
            }
        }
        for k in 1..=32 {
            check::<u64>(k);
        }
        for k in 1..=64 {
            check::<u128>(k);
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
            let engine = Compact::<u64>::new(k, 10).unwrap();
            let n = if k < 7 { 1 << (2 * k) } else { many };
            assert_eq!(engine.run(3, &Numbers(n)).unwrap(), 6 * n);
            assert!(
                k == 5 || engine.slots() > 1 << min_slot_bits::<u64>(),
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
    fn wide_kmers_count_through_growth_and_overflow() {
        // k-mers of 33 to 64 bases in 16-byte slots, four a line: from 2^12 slots (2^9 under
        // Miri) the table must grow, and at k = 64 the count field is 5 bits (2 under Miri),
        // so the k-mers counted 100 times overflow, then move with the growths.
        let (ks, many): (&[usize], u64) = if cfg!(miri) {
            (&[64], 300)
        } else {
            (&[33, 47, 64], 5000)
        };
        struct Wide(u64, usize);
        impl Worker<u128> for Wide {
            fn work<S: Sink<u128>>(&self, sink: &mut S) -> Result<u64, Error> {
                let top = crate::kmer::mask::<u128>(self.1);
                // Small and large k-mers: the top bits matter as much as the low ones.
                let kmers: Vec<u128> = (0..self.0)
                    .flat_map(|n| [u128::from(n), top - u128::from(n)])
                    .collect();
                sink.add(&[top; 100])?;
                for batch in kmers.chunks(100) {
                    sink.add(batch)?;
                }
                Ok(100 + 2 * self.0)
            }
        }
        for &k in ks {
            let engine = Compact::<u128>::new(k, 10).unwrap();
            assert_eq!(engine.run(2, &Wide(many, k)).unwrap(), 2 * (100 + 2 * many));
            assert!(engine.slots() > 1 << min_slot_bits::<u128>(), "k = {k}");
            let table = engine.into_table();
            assert_eq!(table.len() as u64, 2 * many, "k = {k}");
            let mut counts = table_kmers(&*table);
            counts.sort_unstable();
            let top = crate::kmer::mask::<u128>(k);
            let mut expected: Vec<(u128, u64)> = (0..many)
                .flat_map(|n| [(u128::from(n), 2), (top - u128::from(n), 2)])
                .collect();
            expected.sort_unstable();
            expected.last_mut().unwrap().1 += 200;
            assert_eq!(counts, expected, "k = {k}");
        }
    }

    #[test]
    fn counts_past_the_field_go_to_the_overflow() {
        // k = 32 in 2^12 slots (2^9 lines): 55 remainder bits, 5 probe bits, 4 count bits (15
        // at most).
        let engine = Compact::<u64>::new(32, 10).unwrap();
        let count_max = if cfg!(miri) { 1 } else { 15 };
        assert_eq!(engine.table.read().unwrap().count_max, count_max);
        let kmers: Vec<u64> = [7u64, u64::MAX].repeat(50);
        struct Repeat(Vec<u64>);
        impl Worker<u64> for Repeat {
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
        let engine = Compact::<u64>::new(32, 10).unwrap();
        let others = if cfg!(miri) { 600 } else { 5000 };
        struct Phases(u64);
        impl Worker<u64> for Phases {
            fn work<S: Sink>(&self, sink: &mut S) -> Result<u64, Error> {
                sink.add(&[7; 100])?;
                let others: Vec<u64> = (1000..1000 + self.0).collect();
                sink.add(&others)?;
                sink.add(&[7; 3])?;
                Ok(103 + self.0)
            }
        }
        assert_eq!(engine.run(2, &Phases(others)).unwrap(), 2 * (103 + others));
        assert!(engine.slots() > 1 << min_slot_bits::<u64>());
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
        let scramble = Scramble::<u64>::new(32);
        let crowd: Vec<u64> = (0..600u64)
            .map(|low| scramble.backward(low << 13))
            .collect();
        let engine = Compact::<u64>::new(k, 1000).unwrap();
        struct Crowd(Vec<u64>);
        impl Worker<u64> for Crowd {
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

    #[test]
    #[cfg_attr(miri, ignore = "tables of 2^15 slots and more: too slow to interpret")]
    fn a_crowded_home_of_wide_kmers_probes_on_and_grows_on_many_threads() {
        // 600 40-mers whose scrambles differ only in bits 57 to 66 of 80: from 2^12 slots
        // (2^10 lines of 4) all want one home line, and the table must grow until their homes
        // part, while 4 threads (more than the cores) count each of them.
        let k = 40;
        let scramble = Scramble::<u128>::new(2 * k as u32);
        let crowd: Vec<u128> = (0..600u128)
            .map(|low| scramble.backward(low << 57))
            .collect();
        let engine = Compact::<u128>::new(k, 1000).unwrap();
        struct Crowd(Vec<u128>);
        impl Worker<u128> for Crowd {
            fn work<S: Sink<u128>>(&self, sink: &mut S) -> Result<u64, Error> {
                sink.add(&self.0)?;
                Ok(self.0.len() as u64)
            }
        }
        assert_eq!(engine.run(4, &Crowd(crowd.clone())).unwrap(), 2400);
        assert!(engine.slots() >= 1 << 15, "{}", engine.slots());
        let mut counts = table_kmers(&*engine.into_table());
        counts.sort_unstable();
        let mut expected: Vec<_> = crowd.iter().map(|&kmer| (kmer, 4)).collect();
        expected.sort_unstable();
        assert_eq!(counts, expected);
    }
}

#[cfg(all(test, floe_loom))]
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

    fn sink(engine: &Compact) -> CompactSink<'_, u64> {
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
            let engine = Arc::new(Compact::<u64>::new(K, 1).unwrap());
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
            let engine = Arc::new(Compact::<u64>::new(K, 1).unwrap());
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
