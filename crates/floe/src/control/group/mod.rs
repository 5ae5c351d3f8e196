//! Group backends: one 64-byte line (a primary bucket or a link bucket) held as a value, and
//! the two questions the engine asks of it: "which 8-byte lanes equal this word?" and "what is
//! in lane `l`?".
//!
//! Every backend answers them the same way; the algorithm in `raw` is written once over the
//! [`Group`] trait. The scalar backend is always compiled, is the oracle the SIMD backends are
//! tested against, and is the only one Miri and loom run. The SIMD backends also know how to
//! *load* a line, as four 16-byte atomic loads joined in registers (see `Avx2Line::load` for
//! why per slot and why inline assembly); the scalar line is assembled by the engine from
//! atomic slot loads.
//!
//! Which backend a map uses is decided once, when it is built (`crate::Backend`), never per
//! probe.

#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
pub(crate) mod avx2;
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
pub(crate) mod avx512;
pub(crate) mod scalar;

/// A 64-byte line held in registers: eight 8-byte lanes, lane 0 at the lowest address.
pub(crate) trait Group: Copy {
    /// Bit `l` of the result is set iff lane `l` equals `word`.
    fn match_word(&self, word: u64) -> u8;

    /// The word in lane `lane` (0..8).
    fn lane(&self, lane: usize) -> u64;
}

/// Lanes in a line.
pub(crate) const LANES: usize = 8;
