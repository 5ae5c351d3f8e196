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

/// The table size from which [`Prefetch::Auto`](crate::batch::Prefetch::Auto) prefetches on
/// this CPU (bytes of bins and link buckets): where a batch's lookahead ring starts to beat
/// running each request at once, which depends on how far the last cache level reaches.
///
/// Measured one thread's batched gets with the ring's prefetch forced on and off, over table
/// sizes (BENCHMARKS.md, "The prefetch threshold per CPU"): on an Intel Xeon (2 MiB of L2 a core,
/// a large shared L3) prefetching won from about the L2's size on (0.62-0.73x below 0.7 MiB,
/// 1.10-1.96x from 4.3 MiB); on an AMD EPYC (1 MiB of L2, 32 MiB of L3 a core complex) it
/// lost up to 6.9 MB and won from 11.7 MB on (0.71-0.87x at 4.5 and 6.9 MB, 1.4x at 11.7
/// MB): AMD's L3 answers fast enough for the out-of-order window alone. So on AMD the
/// threshold is a quarter of the L3 a core complex shares (8 MiB there), kept within 2 and
/// 8 MiB: the L3 is read from the cache topology leaf, since the legacy leaf reports a
/// guest the whole socket's (320 MiB on the host measured). Elsewhere it is
/// [`PREFETCH_THRESHOLD_BYTES`](crate::batch::PREFETCH_THRESHOLD_BYTES). Read once per
/// process.
pub(crate) fn auto_threshold() -> usize {
    use std::sync::OnceLock;
    static THRESHOLD: OnceLock<usize> = OnceLock::new();
    *THRESHOLD.get_or_init(|| threshold_for(amd_l3_bytes()))
}

/// The threshold for a CPU whose core complex shares `amd_l3` bytes of L3 if it is an AMD
/// one (`None` otherwise).
fn threshold_for(amd_l3: Option<usize>) -> usize {
    let default = crate::batch::PREFETCH_THRESHOLD_BYTES;
    amd_l3.map_or(default, |l3| (l3 / 4).clamp(default, 8 << 20))
}

/// The L3 an AMD CPU's core complex shares (CPUID 0x8000_001D, the cache topology leaf:
/// ways x partitions x line size x sets of its level-3 entry), or `None` on other CPUs,
/// without the leaf, under Miri and off x86-64.
fn amd_l3_bytes() -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use core::arch::x86_64::{__cpuid, __cpuid_count};
        // `cpuid` exists on every x86-64 CPU (a safe intrinsic there): leaf 0 names the
        // vendor, and the highest extended leaf and the topology extensions flag (0x8000_0001
        // ECX bit 22) are read before leaf 0x8000_001D is asked for.
        let vendor = __cpuid(0);
        // "AuthenticAMD" in EBX, EDX, ECX.
        let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        if !amd
            || __cpuid(0x8000_0000).eax < 0x8000_001D
            || __cpuid(0x8000_0001).ecx & (1 << 22) == 0
        {
            return None;
        }
        for subleaf in 0..8 {
            let cache = __cpuid_count(0x8000_001D, subleaf);
            if cache.eax & 0x1f == 0 {
                break;
            }
            if (cache.eax >> 5) & 7 == 3 {
                let ways = ((cache.ebx >> 22) & 0x3ff) as usize + 1;
                let partitions = ((cache.ebx >> 12) & 0x3ff) as usize + 1;
                let line = (cache.ebx & 0xfff) as usize + 1;
                let sets = cache.ecx as usize + 1;
                return Some(ways * partitions * line * sets);
            }
        }
        None
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::PREFETCH_THRESHOLD_BYTES;

    #[test]
    fn the_threshold_follows_an_amd_l3_within_bounds() {
        assert_eq!(threshold_for(None), PREFETCH_THRESHOLD_BYTES);
        assert_eq!(threshold_for(Some(32 << 20)), 8 << 20);
        assert_eq!(threshold_for(Some(16 << 20)), 4 << 20);
        assert_eq!(threshold_for(Some(4 << 20)), PREFETCH_THRESHOLD_BYTES);
        assert_eq!(
            threshold_for(Some(320 << 20)),
            8 << 20,
            "a socket's L3, not a complex's"
        );
        let here = auto_threshold();
        assert!(
            (PREFETCH_THRESHOLD_BYTES..=8 << 20).contains(&here),
            "{here}"
        );
        assert_eq!(auto_threshold(), here, "read once");
    }
}
