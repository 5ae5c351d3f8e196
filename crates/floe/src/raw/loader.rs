//! How the engine reads a line, per backend.
//!
//! A line loader turns a bucket (primary or link) into a [`Group`] value the matching code works on.
//! The scalar loader assembles the line from 16-byte atomic slot loads (the portable path, the
//! oracle, and the only one Miri and loom see). The SIMD loaders load the whole line with one or
//! two vector instructions. Loaders are zero-sized tokens: a SIMD token exists only after the
//! CPU was checked for its feature, which is what makes calling its loads sound.

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
use crate::control::group::{avx2::Avx2Line, avx512::Avx512Line};
use crate::control::group::{scalar::ScalarLine, Group};

use super::layout::{Bin, LinkBucket};

/// Reads buckets as lines. See the module docs.
pub(crate) trait LineLoader: Copy {
    /// The line type the backend matches on.
    type Line: Group;

    /// The primary bucket of `bin`, lanes as laid out in `layout.rs`.
    fn primary(self, bin: &Bin) -> Self::Line;

    /// A link bucket.
    fn link(self, bucket: &LinkBucket) -> Self::Line;
}

/// The portable loader.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ScalarLoader;

/// How the scalar loader reads one slot of a line: as one 16-byte atomic; under loom as two
/// lanes that may tear, like a vector load (`sync.rs`), so the models check the protocols
/// against the weaker reads of the SIMD loaders.
#[inline(always)]
fn lanes(slot: &super::layout::Slot) -> (u64, u64) {
    #[cfg(loom)]
    return slot.load_lanes();
    #[cfg(not(loom))]
    slot.load()
}

impl LineLoader for ScalarLoader {
    type Line = ScalarLine;

    #[inline(always)]
    fn primary(self, bin: &Bin) -> ScalarLine {
        let (k0, v0) = lanes(&bin.slots[0]);
        let (k1, v1) = lanes(&bin.slots[1]);
        let (k2, v2) = lanes(&bin.slots[2]);
        // Lanes 0 and 1 (header and link) are never matched: `SlotMask::from_primary_lanes`
        // drops them, so zero is as good as the real words here.
        ScalarLine([0, 0, k0, v0, k1, v1, k2, v2])
    }

    #[inline(always)]
    fn link(self, bucket: &LinkBucket) -> ScalarLine {
        let (k0, v0) = lanes(&bucket.slots[0]);
        let (k1, v1) = lanes(&bucket.slots[1]);
        let (k2, v2) = lanes(&bucket.slots[2]);
        let (k3, v3) = lanes(&bucket.slots[3]);
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

    #[inline(always)]
    fn primary(self, bin: &Bin) -> Avx512Line {
        // SAFETY: a `Bin` is 64 bytes, 64-aligned (layout.rs asserts); `self` proves AVX-512F.
        unsafe { Avx512Line::load((bin as *const Bin).cast()) }
    }

    #[inline(always)]
    fn link(self, bucket: &LinkBucket) -> Avx512Line {
        // SAFETY: as above for a `LinkBucket`.
        unsafe { Avx512Line::load((bucket as *const LinkBucket).cast()) }
    }
}
