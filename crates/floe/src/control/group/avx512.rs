//! AVX-512: the whole line in one `zmm` register, one compare into a mask register.

use core::arch::x86_64::*;

use super::{avx2::Avx2Line, Group, LANES};

/// A line in a `zmm` register.
#[derive(Clone, Copy)]
pub(crate) struct Avx512Line(__m512i);

impl Avx512Line {
    /// Load a 64-byte line as four 16-byte loads, one per slot, joined into one register:
    /// the AVX2 load (see `Avx2Line::load` for why inline assembly and why per slot: a
    /// 64-byte load would promise atomicity only per 8 bytes) and one insert.
    ///
    /// # Safety
    /// - `line` is 64-byte aligned and valid for reads of 64 bytes;
    /// - the CPU supports AVX-512F and AVX2 (checked once, when the map is built).
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    pub(crate) unsafe fn load(line: *const u64) -> Self {
        // SAFETY: the caller's contract, which includes `Avx2Line::load`'s.
        let Avx2Line(lo, hi) = unsafe { Avx2Line::load(line) };
        Self(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi))
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
        debug_assert!(lane < LANES);
        // A permute into lane 0, not a store and reload: a 64-byte store forwards to an
        // 8-byte load slowly or not at all on some cores (the batched get's value read).
        // SAFETY: as `match_word`.
        unsafe {
            let picked = _mm512_permutexvar_epi64(_mm512_set1_epi64(lane as i64), self.0);
            _mm_cvtsi128_si64(_mm512_castsi512_si128(picked)) as u64
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
        if !(std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx2")) {
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
