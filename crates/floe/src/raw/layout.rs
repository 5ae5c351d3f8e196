//! The memory layout: 64-byte bins and link buckets made of 16-byte slots.

use super::alloc::ZeroInit;
use crate::sync::{AtomicU128, AtomicU64, Ordering};

/// One key-value pair: the key word at the lower address, the value word after it, read and
/// written only as one 16-byte atomic (`vmovdqa` loads, `cmpxchg16b` CAS), so a slot is never
/// seen half-written and no two accesses of different sizes ever race on it.
#[repr(transparent)]
pub(crate) struct Slot(AtomicU128);

#[inline(always)]
fn pack(key: u64, value: u64) -> u128 {
    u128::from(key) | u128::from(value) << 64
}

#[inline(always)]
fn unpack(word: u128) -> (u64, u64) {
    (word as u64, (word >> 64) as u64)
}

impl Slot {
    /// `(key, value)`. Relaxed: every reader orders this load through the bin header (an
    /// `Acquire` load before it, a fence and a version check after it).
    #[inline(always)]
    pub(crate) fn load(&self) -> (u64, u64) {
        unpack(self.0.load(Ordering::Relaxed))
    }

    /// `(key, value)` with Acquire: for readers that order a later read through this one
    /// without a header (the dense layout's home line, `raw::dense`).
    #[inline(always)]
    pub(crate) fn load_acquire(&self) -> (u64, u64) {
        unpack(self.0.load(Ordering::Acquire))
    }

    /// `(key, value)` read with plain loads, by a thread no other may write the slot against
    /// (the dense layout's line lock holder, `raw::dense`): compiled inline, where `load`
    /// without AVX in the build's target features is a call into portable-atomic's runtime
    /// dispatch (a fifth of a dense population's time went there).
    ///
    /// # Safety
    /// No thread writes the slot while this reads it. Other threads may read it meanwhile
    /// (reads do not race with reads), and every write before was ordered before this read
    /// (the lock's Acquire).
    #[inline(always)]
    pub(crate) unsafe fn load_exclusive(&self) -> (u64, u64) {
        #[cfg(floe_loom)]
        return self.load();
        #[cfg(not(floe_loom))]
        // SAFETY: the pointer is the slot's own, aligned and live for `&self`; the caller
        // rules out a concurrent write, so this non-atomic read races with nothing.
        unpack(unsafe { core::ptr::read(self.0.as_ptr()) })
    }

    /// `load_lanes` with Acquire loads (loom models of `raw::dense`).
    #[cfg(floe_loom)]
    #[inline(always)]
    pub(crate) fn load_lanes_acquire(&self, value_first: bool) -> (u64, u64) {
        unpack(self.0.load_halves(Ordering::Acquire, value_first))
    }

    /// `(key, value)` read as two lanes, the value first if `value_first`, as a line read that
    /// is not one atomic access per slot may (loom models only: the scalar loader reads lines
    /// with this under loom, see `sync.rs` and `loader.rs`).
    #[cfg(floe_loom)]
    #[inline(always)]
    pub(crate) fn load_lanes(&self, value_first: bool) -> (u64, u64) {
        unpack(self.0.load_halves(Ordering::Relaxed, value_first))
    }

    /// Overwrite the slot. Only the inserter that committed the slot (state `Inserting`), and
    /// code writing slots nobody else can reach yet (a new table, a bucket not yet chained),
    /// call this. The inserter's `fence(Release)` before it orders it after the commit (for
    /// the readers' version check). Release: whoever reads the pair and then fences `Acquire`
    /// (every search does) sees what the writer wrote before it, which a map whose values
    /// point to memory will need; the same plain `vmovdqa` store on x86 as Relaxed.
    #[inline(always)]
    pub(crate) fn store(&self, key: u64, value: u64) {
        self.0.store(pack(key, value), Ordering::Release);
    }

    /// Replace `current` by `new` if the slot holds exactly `current` (16-byte CAS).
    ///
    /// AcqRel: the new value must be visible to any thread that later reads this slot (the RMW
    /// is totally ordered on the slot); Acquire on success makes the writes of whoever stored
    /// `current` visible to the caller. On x86 every `lock cmpxchg16b` is a full barrier.
    #[inline(always)]
    pub(crate) fn compare_exchange(
        &self,
        current: (u64, u64),
        new: (u64, u64),
    ) -> Result<(), (u64, u64)> {
        self.0
            .compare_exchange(
                pack(current.0, current.1),
                pack(new.0, new.1),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .map(|_| ())
            .map_err(unpack)
    }

    #[cfg(floe_loom)]
    fn new() -> Self {
        Slot(AtomicU128::new(0))
    }
}

/// A bin: its header word, its link word and the three slots of the primary bucket, in one
/// cache line (DLHT §3.1, figure 2).
#[repr(C, align(64))]
pub(crate) struct Bin {
    /// The bin header (`control::header::Header`): version, bin state, 15 slot states.
    /// Invariant: every change of it is a CAS that bumps the version.
    pub(crate) header: AtomicU64,
    /// The link word (`control::header::Link`). Invariant: fields only go from zero to a pool
    /// index, never back, while the table lives.
    pub(crate) link: AtomicU64,
    pub(crate) slots: [Slot; 3],
}

/// A link bucket: four more slots for one bin, taken from the table's pool on overflow.
#[repr(C, align(64))]
pub(crate) struct LinkBucket {
    pub(crate) slots: [Slot; 4],
}

// The SIMD backends read a bin as eight 8-byte lanes and rely on this exact placement: header
// in lane 0, link in lane 1, slot `s`'s key in lane 2 + 2s and its value in lane 3 + 2s; and
// on a link bucket's slot `j` key in lane 2j.
#[cfg(not(floe_loom))]
const _: () = {
    assert!(core::mem::size_of::<Bin>() == 64 && core::mem::align_of::<Bin>() == 64);
    assert!(core::mem::size_of::<LinkBucket>() == 64 && core::mem::align_of::<LinkBucket>() == 64);
    assert!(core::mem::size_of::<Slot>() == 16);
    assert!(core::mem::offset_of!(Bin, header) == 0);
    assert!(core::mem::offset_of!(Bin, link) == 8);
    assert!(core::mem::offset_of!(Bin, slots) == 16);
    assert!(
        cfg!(target_endian = "little"),
        "the key must be the low half of the slot word"
    );
};

// SAFETY: a zeroed bin is header 0 (version 0, NoTransfer, every slot Invalid), link 0 (nothing
// chained) and zero slots; atomics are valid for any bit pattern.
unsafe impl ZeroInit for Bin {
    #[cfg(floe_loom)]
    fn new_zeroed() -> Self {
        Bin {
            header: AtomicU64::new(0),
            link: AtomicU64::new(0),
            slots: [Slot::new(), Slot::new(), Slot::new()],
        }
    }
}

// SAFETY: four zeroed slots; atomics are valid for any bit pattern.
unsafe impl ZeroInit for LinkBucket {
    #[cfg(floe_loom)]
    fn new_zeroed() -> Self {
        LinkBucket {
            slots: [Slot::new(), Slot::new(), Slot::new(), Slot::new()],
        }
    }
}
