//! How the engine reads a line, per backend.
//!
//! A line loader turns a bucket (primary or link) into a [`Group`] value the matching code works on.
//! The scalar loader assembles the line from 16-byte atomic slot loads (the portable path, the
//! oracle, and the only one Miri and loom see). The SIMD loaders load the line as four 16-byte atomic
//! loads (one per slot) joined into vector registers. Loaders are zero-sized tokens: a SIMD token exists only after the
//! CPU was checked for its feature, which is what makes calling its loads sound.

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
use crate::control::group::{avx2::Avx2Line, avx512::Avx512Line};
use crate::control::group::{scalar::ScalarLine, Group};

use super::layout::{Bin, LinkBucket};

/// Reads buckets as lines. See the module docs.
pub(crate) trait LineLoader: Copy {
    /// The line type the backend matches on.
    type Line: Group;

    /// Whether each 16-byte slot of a loaded line was read as one atomic access, so that a
    /// matched key comes with the value stored with it. If not, a hit in an `Inserting` slot
    /// is read again (`RawTable::confirm`).
    const ATOMIC_SLOTS: bool;

    /// The primary bucket of `bin`, lanes as laid out in `layout.rs`.
    fn primary(self, bin: &Bin) -> Self::Line;

    /// A link bucket.
    fn link(self, bucket: &LinkBucket) -> Self::Line;

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
    #[cfg(loom)]
    return slot.load_lanes(index % 2 == 1);
    #[cfg(not(loom))]
    {
        let _ = index;
        slot.load()
    }
}

/// `lanes` with Acquire loads.
#[inline(always)]
fn lanes_acquire(slot: &super::layout::Slot, index: usize) -> (u64, u64) {
    #[cfg(loom)]
    return slot.load_lanes_acquire(index % 2 == 1);
    #[cfg(not(loom))]
    {
        let _ = index;
        slot.load_acquire()
    }
}

impl LineLoader for ScalarLoader {
    type Line = ScalarLine;
    const ATOMIC_SLOTS: bool = cfg!(not(loom));

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
#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2Loader(());

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
impl Avx2Loader {
    pub(crate) fn new() -> Option<Self> {
        std::is_x86_feature_detected!("avx2").then_some(Self(()))
    }
}

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
impl LineLoader for Avx2Loader {
    type Line = Avx2Line;
    // `Avx2Line::load` reads slot by slot with 16-byte atomic loads.
    const ATOMIC_SLOTS: bool = true;

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
#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512Loader(Avx2Loader);

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
impl Avx512Loader {
    pub(crate) fn new() -> Option<Self> {
        let avx2 = Avx2Loader::new()?;
        std::is_x86_feature_detected!("avx512f").then_some(Self(avx2))
    }

    /// The loader write operations use: AVX2 (see `Backend::Avx512` for the measurement).
    pub(crate) fn writer(self) -> Avx2Loader {
        self.0
    }
}

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
impl LineLoader for Avx512Loader {
    type Line = Avx512Line;
    // As for AVX2 (`Avx512Line::load`).
    const ATOMIC_SLOTS: bool = true;

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
