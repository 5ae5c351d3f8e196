//! AVX-512: the whole line in one `zmm` register, one compare into a mask register.

use core::arch::{asm, x86_64::*};

use super::{Group, LANES};

/// A line in a `zmm` register.
#[derive(Clone, Copy)]
pub(crate) struct Avx512Line(__m512i);

impl Avx512Line {
    /// Load a 64-byte line in one instruction.
    ///
    /// The line is shared with writers that update it through atomic operations, so a plain
    /// `_mm512_load_si512` would be a data race (undefined behaviour, even if the result were
    /// discarded). Inline assembly is outside the Rust memory model: the load below has the
    /// effect of eight relaxed 8-byte atomic loads in unspecified order, because an aligned
    /// 64-byte load within one cache line never tears an aligned 8-byte element on x86. The
    /// engine validates every result with the bin header's version (seqlock), so any mix of
    /// old and new words is discarded.
    ///
    /// # Safety
    /// - `line` is 64-byte aligned and valid for reads of 64 bytes;
    /// - the CPU supports AVX-512F (checked once, when the map is built).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn load(line: *const u64) -> Self {
        debug_assert!((line as usize).is_multiple_of(64));
        let v: __m512i;
        // SAFETY:
        // - `line` is aligned and readable for 64 bytes (caller);
        // - the instruction only reads memory and writes `v` (no stack, flags untouched).
        unsafe {
            asm!(
                "vmovdqa64 {v}, zmmword ptr [{p}]",
                v = out(zmm_reg) v,
                p = in(reg) line,
                options(nostack, preserves_flags, readonly),
            );
        }
        Self(v)
    }
}

impl Group for Avx512Line {
    #[inline(always)]
    fn match_word(&self, word: u64) -> u8 {
        // SAFETY: an `Avx512Line` only exists after `load`, whose contract is that the CPU
        // supports AVX-512F.
        unsafe { _mm512_cmpeq_epi64_mask(self.0, _mm512_set1_epi64(word as i64)) }
    }

    #[inline(always)]
    fn lane(&self, lane: usize) -> u64 {
        // SAFETY: `__m512i` and `[u64; 8]` have the same size and every bit pattern is valid
        // for both.
        let lanes: [u64; LANES] = unsafe { core::mem::transmute(self.0) };
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
        if !std::is_x86_feature_detected!("avx512f") {
            return;
        }
        let words = Aligned([5, 9, 5, u64::MAX, 0, 5, 1 << 63, 9]);
        // SAFETY: aligned, readable, feature checked above.
        let line = unsafe { Avx512Line::load(words.0.as_ptr()) };
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
