//! How the engine reads a line, per backend.
//!
//! A line loader turns a bucket (primary or link) into a [`Group`] value the matching code works on.
//! The scalar loader assembles the line from 16-byte atomic slot loads (the portable path, the
//! oracle, and the only one Miri and loom see). The SIMD loaders load the line as four 16-byte atomic
//! loads (one per slot) joined into vector registers. Loaders are zero-sized tokens: a SIMD token exists only after the
//! CPU was checked for its feature, which is what makes calling its loads sound.

#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
use crate::control::group::{avx2::Avx2Line, avx512::Avx512Line};
use crate::control::group::{scalar::ScalarLine, Group};

use super::layout::{Bin, LinkBucket, Slot};

/// Reads buckets as lines. See the module docs.
pub(crate) trait LineLoader: Copy {
    /// The line type the backend matches on.
    type Line: Group;

    /// The loader write operations use (`Backend::Avx512` says why AVX-512's is AVX2's).
    type Writer: LineLoader;

    /// The loader write operations use.
    fn writer(self) -> Self::Writer;

    /// Whether each 16-byte slot of a loaded line was read as one atomic access, so that a
    /// matched key comes with the value stored with it. If not, a hit in an `Inserting` slot
    /// is read again (`RawTable::confirm`).
    const ATOMIC_SLOTS: bool;

    /// The primary bucket of `bin`, lanes as laid out in `layout.rs`.
    fn primary(self, bin: &Bin) -> Self::Line;

    /// A link bucket.
    fn link(self, bucket: &LinkBucket) -> Self::Line;

    /// One slot as one 16-byte atomic load, `Relaxed` (`Slot::load`; the SIMD loaders read it
    /// with their own `vmovdqa`, where portable-atomic's calls through a function pointer
    /// unless the whole build targets AVX).
    #[inline(always)]
    fn load_slot(self, slot: &Slot) -> (u64, u64) {
        slot.load()
    }

    /// Store a slot as one 16-byte atomic store, `Release` (`Slot::store`).
    #[inline(always)]
    fn store_slot(self, slot: &Slot, key: u64, value: u64) {
        slot.store(key, value);
    }

    /// A 16-byte compare-and-swap of a slot, `AcqRel` (`Slot::compare_exchange`); the pair
    /// found on failure.
    #[inline(always)]
    fn cas_slot(self, slot: &Slot, current: (u64, u64), new: (u64, u64)) -> Result<(), (u64, u64)> {
        slot.compare_exchange(current, new)
    }

    /// The word in lane `lane` of `bin`'s primary line, of which `line` is a read: the fast
    /// read's value (`RawTable::read_primary` says why a value read after its key's line is
    /// still the key's). The scalar loader takes it from `line`; the SIMD loaders read the
    /// word again from memory, one load from a line now in L1 where taking a lane out of
    /// vector registers costs its index's arithmetic and a permute (callgrind: 9
    /// instructions against 2).
    #[inline(always)]
    fn primary_word(self, bin: &Bin, line: &Self::Line, lane: usize) -> u64 {
        let _ = bin;
        line.lane(lane)
    }

    /// A link-shaped line read with acquire loads: the dense layout's home line, whose reads
    /// order the read of the alternative line after them (`raw::dense`, Get). Every x86 load
    /// is an acquire load, so the SIMD loaders read it as any line.
    #[inline(always)]
    fn link_acquire(self, bucket: &LinkBucket) -> Self::Line {
        self.link(bucket)
    }
}

/// The portable loader.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ScalarLoader;

/// How the scalar loader reads slot `index` of a line: as one 16-byte atomic; under loom as
/// two lanes that may tear (`sync.rs`), so the models check the protocols against reads
/// weaker than any loader's (`LineLoader::ATOMIC_SLOTS` is false there). Odd slots read the
/// value first and even slots the key first, so a model can reach either tear: a key older
/// than its value (which the header check must reject) by using slot 0, a key newer than its
/// value (which `confirm` must reject) by using slot 1.
#[inline(always)]
fn lanes(slot: &super::layout::Slot, index: usize) -> (u64, u64) {
    #[cfg(floe_loom)]
    return slot.load_lanes(index % 2 == 1);
    #[cfg(not(floe_loom))]
    {
        let _ = index;
        slot.load()
    }
}

/// `lanes` with Acquire loads.
#[inline(always)]
fn lanes_acquire(slot: &super::layout::Slot, index: usize) -> (u64, u64) {
    #[cfg(floe_loom)]
    return slot.load_lanes_acquire(index % 2 == 1);
    #[cfg(not(floe_loom))]
    {
        let _ = index;
        slot.load_acquire()
    }
}

impl LineLoader for ScalarLoader {
    type Line = ScalarLine;
    type Writer = ScalarLoader;

    #[inline(always)]
    fn writer(self) -> ScalarLoader {
        self
    }
    const ATOMIC_SLOTS: bool = cfg!(not(floe_loom));

    #[inline(always)]
    fn link_acquire(self, bucket: &LinkBucket) -> ScalarLine {
        let (k0, v0) = lanes_acquire(&bucket.slots[0], 0);
        let (k1, v1) = lanes_acquire(&bucket.slots[1], 1);
        let (k2, v2) = lanes_acquire(&bucket.slots[2], 2);
        let (k3, v3) = lanes_acquire(&bucket.slots[3], 3);
        ScalarLine([k0, v0, k1, v1, k2, v2, k3, v3])
    }

    #[inline(always)]
    fn primary(self, bin: &Bin) -> ScalarLine {
        let (k0, v0) = lanes(&bin.slots[0], 0);
        let (k1, v1) = lanes(&bin.slots[1], 1);
        let (k2, v2) = lanes(&bin.slots[2], 2);
        // Lanes 0 and 1 (header and link) are never matched: `SlotMask::from_primary_lanes`
        // drops them, so zero is as good as the real words here.
        ScalarLine([0, 0, k0, v0, k1, v1, k2, v2])
    }

    #[inline(always)]
    fn link(self, bucket: &LinkBucket) -> ScalarLine {
        let (k0, v0) = lanes(&bucket.slots[0], 0);
        let (k1, v1) = lanes(&bucket.slots[1], 1);
        let (k2, v2) = lanes(&bucket.slots[2], 2);
        let (k3, v3) = lanes(&bucket.slots[3], 3);
        ScalarLine([k0, v0, k1, v1, k2, v2, k3, v3])
    }
}

/// The AVX2 loader. Only constructible on a CPU with AVX2.
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2Loader(());

#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
impl Avx2Loader {
    pub(crate) fn new() -> Option<Self> {
        std::is_x86_feature_detected!("avx2").then_some(Self(()))
    }
}

#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
impl LineLoader for Avx2Loader {
    type Line = Avx2Line;
    type Writer = Avx2Loader;

    #[inline(always)]
    fn writer(self) -> Avx2Loader {
        self
    }

    #[inline(always)]
    fn load_slot(self, slot: &Slot) -> (u64, u64) {
        // SAFETY: a `Slot` is 16 bytes, 16-aligned; `self` proves AVX (`simd_slot`).
        unsafe { simd_slot::load(slot) }
    }

    #[inline(always)]
    fn store_slot(self, slot: &Slot, key: u64, value: u64) {
        // SAFETY: as above.
        unsafe { simd_slot::store(slot, key, value) }
    }

    #[inline(always)]
    fn cas_slot(self, slot: &Slot, current: (u64, u64), new: (u64, u64)) -> Result<(), (u64, u64)> {
        // SAFETY: as above; every CPU with AVX2 has `cmpxchg16b`.
        unsafe { simd_slot::compare_exchange(slot, current, new) }
    }
    // `Avx2Line::load` reads slot by slot with 16-byte atomic loads.
    const ATOMIC_SLOTS: bool = true;

    #[inline(always)]
    fn primary_word(self, bin: &Bin, _line: &Avx2Line, lane: usize) -> u64 {
        // SAFETY: `lane` < 8 (checked below in debug builds) names an 8-byte word of the
        // 64-byte `Bin`.
        unsafe { simd_slot::load_word((bin as *const Bin).cast(), lane) }
    }

    #[inline(always)]
    fn primary(self, bin: &Bin) -> Avx2Line {
        // SAFETY: a `Bin` is 64 bytes, 64-aligned (layout.rs asserts); `self` proves AVX2.
        unsafe { Avx2Line::load((bin as *const Bin).cast()) }
    }

    #[inline(always)]
    fn link(self, bucket: &LinkBucket) -> Avx2Line {
        // SAFETY: as above for a `LinkBucket`.
        unsafe { Avx2Line::load((bucket as *const LinkBucket).cast()) }
    }
}

/// The AVX-512 loader. Only constructible on a CPU with AVX-512F and AVX2.
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512Loader(Avx2Loader);

#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
impl Avx512Loader {
    pub(crate) fn new() -> Option<Self> {
        let avx2 = Avx2Loader::new()?;
        std::is_x86_feature_detected!("avx512f").then_some(Self(avx2))
    }
}

#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
impl LineLoader for Avx512Loader {
    type Line = Avx512Line;
    // AVX2: see `Backend::Avx512` for the measurement.
    type Writer = Avx2Loader;

    #[inline(always)]
    fn writer(self) -> Avx2Loader {
        self.0
    }

    #[inline(always)]
    fn load_slot(self, slot: &Slot) -> (u64, u64) {
        self.0.load_slot(slot)
    }

    #[inline(always)]
    fn store_slot(self, slot: &Slot, key: u64, value: u64) {
        self.0.store_slot(slot, key, value);
    }

    #[inline(always)]
    fn cas_slot(self, slot: &Slot, current: (u64, u64), new: (u64, u64)) -> Result<(), (u64, u64)> {
        self.0.cas_slot(slot, current, new)
    }
    // As for AVX2 (`Avx512Line::load`).
    const ATOMIC_SLOTS: bool = true;

    #[inline(always)]
    fn primary_word(self, bin: &Bin, _line: &Avx512Line, lane: usize) -> u64 {
        // SAFETY: as for AVX2.
        unsafe { simd_slot::load_word((bin as *const Bin).cast(), lane) }
    }

    #[inline(always)]
    fn primary(self, bin: &Bin) -> Avx512Line {
        // SAFETY: a `Bin` is 64 bytes, 64-aligned (layout.rs asserts); `self` proves AVX-512F
        // and AVX2.
        unsafe { Avx512Line::load((bin as *const Bin).cast()) }
    }

    #[inline(always)]
    fn link(self, bucket: &LinkBucket) -> Avx512Line {
        // SAFETY: as above for a `LinkBucket`.
        unsafe { Avx512Line::load((bucket as *const LinkBucket).cast()) }
    }
}

/// A slot's 16-byte atomic accesses in inline assembly, for the SIMD loaders: the same
/// instructions as portable-atomic's (`vmovdqa` for loads and stores, atomic on every CPU with
/// AVX, Intel SDM vol. 3A §9.1.1, AMD APM vol. 1 §3.9.1; `lock cmpxchg16b` for the CAS), but
/// inline rather than through the function pointer portable-atomic calls when the build does
/// not target AVX (a write paid two such calls). Inline assembly is outside the Rust memory
/// model; without `nomem` each block is a compiler barrier for memory, and on x86 a `vmovdqa`
/// load is an acquire load, a store a release store and `lock cmpxchg16b` a full barrier, so
/// each is at least as strong as the `Slot` method it stands for.
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
mod simd_slot {
    use core::arch::asm;

    use super::Slot;

    /// # Safety
    /// The CPU supports AVX.
    #[inline(always)]
    pub(super) unsafe fn load(slot: &Slot) -> (u64, u64) {
        let (key, value): (u64, u64);
        // SAFETY: `slot` is 16 bytes, 16-aligned and readable; the instructions read it and
        // write their register operands only.
        unsafe {
            asm!(
                "vmovdqa {x}, xmmword ptr [{p}]",
                "vmovq {k}, {x}",
                "vpextrq {v}, {x}, 1",
                p = in(reg) slot as *const Slot,
                x = out(xmm_reg) _,
                k = out(reg) key,
                v = out(reg) value,
                options(nostack, preserves_flags, readonly),
            );
        }
        (key, value)
    }

    /// Word `lane` of the 64-byte line at `line`, one 8-byte load (atomic: aligned), as
    /// the line reads are, outside the Rust memory model.
    ///
    /// # Safety
    /// `line` is a readable, 64-byte aligned line and `lane` < 8.
    #[inline(always)]
    pub(super) unsafe fn load_word(line: *const u64, lane: usize) -> u64 {
        debug_assert!(lane < 8);
        let word: u64;
        // SAFETY: `line + 8 * lane` is 8-byte aligned and readable (caller); the instruction
        // reads it and writes its register operand only.
        unsafe {
            asm!(
                "mov {w}, qword ptr [{p} + 8 * {l}]",
                p = in(reg) line,
                l = in(reg) lane,
                w = lateout(reg) word,
                options(nostack, preserves_flags, readonly),
            );
        }
        word
    }

    /// # Safety
    /// The CPU supports AVX.
    #[inline(always)]
    pub(super) unsafe fn store(slot: &Slot, key: u64, value: u64) {
        // SAFETY: `slot` is 16 bytes, 16-aligned and writable through its atomic (shared
        // mutability); the store is one 16-byte atomic access.
        unsafe {
            asm!(
                "vmovq {x}, {k}",
                "vpinsrq {x}, {x}, {v}, 1",
                "vmovdqa xmmword ptr [{p}], {x}",
                p = in(reg) slot as *const Slot,
                k = in(reg) key,
                v = in(reg) value,
                x = out(xmm_reg) _,
                options(nostack, preserves_flags),
            );
        }
    }

    /// # Safety
    /// The CPU supports `cmpxchg16b`.
    #[inline(always)]
    pub(super) unsafe fn compare_exchange(
        slot: &Slot,
        current: (u64, u64),
        new: (u64, u64),
    ) -> Result<(), (u64, u64)> {
        let (found_key, found_value): (u64, u64);
        // SAFETY: `slot` is 16 bytes, 16-aligned and writable through its atomic. `rbx` is
        // LLVM's, so the new key goes in through another register, swapped into `rbx` for
        // the instruction and back before the block ends (as portable-atomic does). Every
        // other operand is pinned: given a free choice (`in(reg)`, `out(reg)`) the allocator
        // may use `rbx` itself, and the exchange or its undoing would then overwrite the
        // address or a result (floe-server crashed so, and a batched delete reported its
        // successful CAS as failed). Success is read from the old value rather than ZF:
        // `cmpxchg16b` leaves `rdx:rax` as expected exactly when it stored.
        unsafe {
            asm!(
                "xchg rsi, rbx",
                "lock cmpxchg16b xmmword ptr [rdi]",
                "mov rbx, rsi",
                in("rdi") slot as *const Slot,
                inout("rsi") new.0 => _,
                in("rcx") new.1,
                inout("rax") current.0 => found_key,
                inout("rdx") current.1 => found_value,
                options(nostack),
            );
        }
        if (found_key, found_value) == current {
            Ok(())
        } else {
            Err((found_key, found_value))
        }
    }
}

#[cfg(all(test, target_arch = "x86_64", not(miri), not(floe_loom)))]
mod tests {
    use super::*;
    use crate::raw::alloc::TableMemory;

    /// The SIMD loaders' slot accesses against portable-atomic's (the scalar loader's): the
    /// same pairs read, written, swapped and refused.
    #[test]
    fn slot_accesses_agree_with_the_scalar_loader() {
        let Some(avx2) = Avx2Loader::new() else {
            return;
        };
        let memory = TableMemory::<LinkBucket>::zeroed(1, false).expect("one bucket");
        let (simd, scalar) = (&memory[0].slots[0], &memory[0].slots[1]);
        let pairs = [
            (0, 0),
            (1, u64::MAX),
            (u64::MAX, 1),
            (0x0123_4567_89ab_cdef, 42),
        ];
        for &(key, value) in &pairs {
            avx2.store_slot(simd, key, value);
            ScalarLoader.store_slot(scalar, key, value);
            assert_eq!(avx2.load_slot(simd), (key, value));
            assert_eq!(avx2.load_slot(simd), ScalarLoader.load_slot(scalar));
            for &other in &pairs {
                let expected = ScalarLoader.cas_slot(scalar, other, (7, 8));
                assert_eq!(avx2.cas_slot(simd, other, (7, 8)), expected, "{other:?}");
                assert_eq!(avx2.load_slot(simd), ScalarLoader.load_slot(scalar));
                // Back to the pair under test.
                ScalarLoader.store_slot(scalar, key, value);
                avx2.store_slot(simd, key, value);
            }
        }
        if let Some(avx512) = Avx512Loader::new() {
            avx512.store_slot(simd, 3, 4);
            assert_eq!(avx512.load_slot(simd), (3, 4));
            assert_eq!(avx512.cas_slot(simd, (3, 5), (1, 1)), Err((3, 4)));
            assert_eq!(avx512.cas_slot(simd, (3, 4), (1, 1)), Ok(()));
            assert_eq!(ScalarLoader.load_slot(simd), (1, 1));
        }
    }
}
