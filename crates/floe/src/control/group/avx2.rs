//! AVX2: the line in two `ymm` registers, two compares, two `movemask`s.

use core::arch::{asm, x86_64::*};

use super::{Group, LANES};

/// A line in two `ymm` registers (lanes 0..4 and 4..8).
#[derive(Clone, Copy)]
pub(crate) struct Avx2Line(pub(super) __m256i, pub(super) __m256i);

impl Avx2Line {
    /// Load a 64-byte line as four 16-byte loads, one per slot, joined into two registers.
    ///
    /// The line is shared with writers that update it through atomic operations, so a plain
    /// `_mm256_load_si256` would be a data race (undefined behaviour, even if the result were
    /// discarded). Inline assembly is outside the Rust memory model. Each `vmovdqa xmm` is one
    /// atomic 16-byte load on every CPU with AVX (Intel SDM vol. 3A §9.1.1, AMD APM vol. 1
    /// §3.9.1; portable-atomic's 16-byte atomic load is the same instruction), so a slot's key
    /// and value come from one instant: a key that matched is read with the value stored with
    /// it, and the engine need not read an `Inserting` slot again (`LineLoader::ATOMIC_SLOTS`).
    /// A 32-byte load carries no such promise. The four loads are not one atomic read of the
    /// line; the engine validates the line with the header version.
    ///
    /// # Safety
    /// - `line` is 64-byte aligned and valid for reads of 64 bytes;
    /// - the CPU supports AVX2 (checked once, when the map is built).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn load(line: *const u64) -> Self {
        debug_assert!((line as usize).is_multiple_of(64));
        let lo: __m256i;
        let hi: __m256i;
        // SAFETY:
        // - `line + 16 * i` are 16-byte aligned and readable (caller);
        // - the instructions only read memory and write their register operands.
        unsafe {
            // Fixed registers below 16: VEX encodings cannot name the upper sixteen, which the
            // allocator may hand out where this is inlined into AVX-512 code.
            asm!(
                "vmovdqa xmm0, xmmword ptr [{p}]",
                "vmovdqa xmm1, xmmword ptr [{p} + 16]",
                "vmovdqa xmm2, xmmword ptr [{p} + 32]",
                "vmovdqa xmm3, xmmword ptr [{p} + 48]",
                "vinserti128 ymm0, ymm0, xmm1, 1",
                "vinserti128 ymm2, ymm2, xmm3, 1",
                p = in(reg) line,
                out("ymm0") lo,
                out("ymm1") _,
                out("ymm2") hi,
                out("ymm3") _,
                options(nostack, preserves_flags, readonly),
            );
        }
        Self(lo, hi)
    }
}

impl Group for Avx2Line {
    #[inline(always)]
    fn match_word(&self, word: u64) -> u8 {
        // SAFETY: an `Avx2Line` only exists after `load`, whose contract is that the CPU
        // supports AVX2.
        unsafe {
            let probe = _mm256_set1_epi64x(word as i64);
            let lo = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(self.0, probe)));
            let hi = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(self.1, probe)));
            (lo | hi << 4) as u8
        }
    }

    #[inline(always)]
    fn lane(&self, lane: usize) -> u64 {
        debug_assert!(lane < LANES);
        // A permute into lane 0, not a store and reload (see `Avx512Line::lane`).
        // SAFETY: as `match_word`.
        unsafe {
            let half = if lane < 4 { self.0 } else { self.1 };
            let low = 2 * (lane as i64 & 3);
            let picked =
                _mm256_permutevar8x32_epi32(half, _mm256_set1_epi64x(low | (low + 1) << 32));
            _mm_cvtsi128_si64(_mm256_castsi256_si128(picked)) as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{super::scalar::ScalarLine, *};

    #[repr(align(64))]
    struct Aligned([u64; 8]);

    #[test]
    fn agrees_with_scalar() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let words = Aligned([5, 9, 5, u64::MAX, 0, 5, 1 << 63, 9]);
        // SAFETY: aligned, readable, feature checked above.
        let line = unsafe { Avx2Line::load(words.0.as_ptr()) };
        let oracle = ScalarLine(words.0);
        for probe in [5, 9, u64::MAX, 0, 1 << 63, 77] {
            assert_eq!(
                line.match_word(probe),
                oracle.match_word(probe),
                "probe {probe}"
            );
        }
        for l in 0..LANES {
            assert_eq!(line.lane(l), oracle.lane(l));
        }
    }
}
