//! The machine's ceiling: random 64-byte line reads over an array as large as the table.
//!
//! Each thread reads one word from a random line per step, with the line indexes prepared
//! before timing and no software prefetch: the out-of-order core overlaps as many misses as
//! its load buffers allow, which is exactly what an unbatched hash table get can do at best
//! (one line per operation and nothing else). The array gets the same page size as the table.

use std::{hint::black_box, time::Duration};

use crate::measure::{cycle_for, streams, Workers};

pub struct Ceiling {
    /// The whole mapping, for `munmap`.
    mapping: *mut libc::c_void,
    mapping_bytes: usize,
    /// The huge-page-aligned array inside it.
    base: *mut u64,
    bytes: usize,
}

// SAFETY: the mapping is only read after construction (shared reads from several threads).
unsafe impl Sync for Ceiling {}

const HUGE_PAGE: usize = 2 << 20;

impl Ceiling {
    /// Map and touch `bytes` (rounded up to 2 MiB), advised for huge pages or not.
    pub fn new(bytes: usize, huge_pages: bool) -> Result<Self, String> {
        let bytes = bytes.max(HUGE_PAGE).next_multiple_of(HUGE_PAGE);
        // SAFETY: anonymous private mapping, no hint; checked for MAP_FAILED.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes + HUGE_PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(format!("could not map {bytes} bytes for the ceiling array"));
        }
        // Align to a huge page inside the over-sized mapping (the slack stays mapped until drop).
        let base = (raw as usize).next_multiple_of(HUGE_PAGE) as *mut u64;
        let advice = if huge_pages {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: `base..base+bytes` lies inside the mapping. Advice is a hint.
        unsafe {
            libc::madvise(base.cast(), bytes, advice);
        }
        // Touch every page so the timed loop measures memory, not page faults.
        for offset in (0..bytes).step_by(4096) {
            // SAFETY: in bounds of the mapping, aligned, exclusively ours during construction.
            unsafe { base.add(offset / 8).write(offset as u64) };
        }
        Ok(Self {
            mapping: raw,
            mapping_bytes: bytes + HUGE_PAGE,
            base,
            bytes,
        })
    }

    fn lines(&self) -> u64 {
        (self.bytes / 64) as u64
    }

    /// Random line reads on `threads` threads for `duration`. Returns (Mops/s, None).
    pub fn random_reads(
        &self,
        workers: &Workers,
        threads: usize,
        duration: Duration,
    ) -> (f64, Option<f64>) {
        let lines = self.lines();
        let streams = streams(threads, 0x1234, 1 << 20, |rng| rng.below(lines) * 8);
        let (elapsed, ops) = workers.run(threads, |i| {
            let mut sum = 0u64;
            let ops = cycle_for(&streams[i], duration, |&word| {
                // SAFETY: `word` < lines * 8, inside the mapping; nobody writes it now.
                sum = sum.wrapping_add(unsafe { self.base.add(word as usize).read_volatile() });
            });
            black_box(sum);
            ops
        });
        (
            ops.iter().sum::<u64>() as f64 / elapsed.as_secs_f64() / 1e6,
            None,
        )
    }
}

impl Drop for Ceiling {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping created in `new`, no longer referenced.
        unsafe {
            libc::munmap(self.mapping, self.mapping_bytes);
        }
    }
}
