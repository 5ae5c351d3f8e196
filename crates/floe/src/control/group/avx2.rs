//! AVX2: the line in two `ymm` registers, two compares, two `movemask`s.

use core::arch::{asm, x86_64::*};

use super::{Group, LANES};

/// A line in two `ymm` registers (lanes 0..4 and 4..8).
#[derive(Clone, Copy)]
pub(crate) struct Avx2Line(__m256i, __m256i);

impl Avx2Line {
    /// Load a 64-byte line in two instructions. Inline assembly for the reason given on
    /// `Avx512Line::load`: each aligned 32-byte load has the effect of four relaxed 8-byte
    /// atomic loads, and the engine validates the result with the header version.
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
        // - `line` and `line + 32 bytes` are 32-byte aligned and readable (caller);
        // - the instructions only read memory and write `lo`/`hi`.
        unsafe {
            asm!(
                "vmovdqa {lo}, ymmword ptr [{p}]",
                "vmovdqa {hi}, ymmword ptr [{p} + 32]",
                lo = out(ymm_reg) lo,
                hi = out(ymm_reg) hi,
                p = in(reg) line,
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
        // SAFETY: `[__m256i; 2]` is 64 bytes of plain data, like `[u64; 8]`.
        let lanes: [u64; LANES] = unsafe { core::mem::transmute([self.0, self.1]) };
        lanes[lane]
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
