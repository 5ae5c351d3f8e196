//! The portable backend: eight `u64`s and a loop the compiler unrolls.

use super::{Group, LANES};

/// A line as a plain array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScalarLine(pub(crate) [u64; LANES]);

impl Group for ScalarLine {
    #[inline(always)]
    fn match_word(&self, word: u64) -> u8 {
        let mut mask = 0u8;
        for (lane, &w) in self.0.iter().enumerate() {
            mask |= u8::from(w == word) << lane;
        }
        mask
    }

    #[inline(always)]
    fn lane(&self, lane: usize) -> u64 {
        self.0[lane]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_every_equal_lane() {
        let line = ScalarLine([7, 1, 7, 2, 3, 7, 0, u64::MAX]);
        assert_eq!(line.match_word(7), 0b0010_0101);
        assert_eq!(line.match_word(u64::MAX), 0b1000_0000);
        assert_eq!(line.match_word(42), 0);
        assert_eq!(line.lane(3), 2);
    }
}
