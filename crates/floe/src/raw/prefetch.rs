//! Software prefetches, the same for both layouts and for the facades' batches: hints that
//! start a line's load without waiting for it.

/// Start loading the 64-byte line at `line` into the cache, without waiting for it. A hint:
/// it never faults and has no visible effect.
#[inline(always)]
pub(crate) fn prefetch_line(line: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch never faults, whatever the address, and has no visible effect; SSE
    // is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(line.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = line;
}

/// Start loading the 64-byte line at `line` into the L2 cache (`prefetcht2`), without waiting
/// for it: the lookahead ring's first prefetch (`ring.rs` says why L2). A hint: it never
/// faults and has no visible effect.
#[inline(always)]
pub(crate) fn prefetch_far(line: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: as `prefetch_line`.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T2 }>(line.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = line;
}
