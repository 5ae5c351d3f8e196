//! The machine's ceiling: random 64-byte line accesses over an array as large as the table.
//!
//! Each thread touches one word of a random line per step, with the line indexes prepared
//! before timing (the same per-thread array length as the workloads). Two kinds of access:
//!
//! * **read**: a plain load. With no software prefetch the out-of-order core overlaps as many
//!   misses as its load buffers allow, which is what an unbatched get can do at best (one line
//!   per operation and nothing else).
//! * **read-modify-write**: an atomic `fetch_add` (a locked instruction, like the CAS every
//!   insert, put and remove of a concurrent map needs). Locked instructions drain the store
//!   buffer and keep later loads waiting, so without prefetch these barely overlap at all.
//!
//! Each kind is measured with no prefetch and with a software-prefetch window `W` (the line
//! `W` steps ahead is prefetched, `prefetchw` for RMW), the ceiling for batched interfaces.
//! Reads have two windows: into L1 (`prefetcht0`, 32 and 64 deep), and into L2
//! (`prefetcht2`, 64 deep), which is what floe's lookahead ring uses: a prefetch into L1 holds
//! one of the core's few L1 miss buffers until its line arrives (and on AMD Zen one that finds
//! none free is dropped), while the L2 tracks many more. On the AMD EPYC hosts the L2 window
//! read about twice the lines of the L1 ones, at one thread and at two (BENCHMARKS.md, "DRAM
//! speed"); the report's batched ceiling is the best of the three. The array gets the same
//! page size as the table.
//!
//! One more figure is not a ceiling but a reference for what any lookup costs on top of a line
//! read: **find, L2 64**, the array laid out as the least a hash table can be (DRAMHiT's
//! 2025 shape: four 16-byte key/value pairs a line, three of them full, a key's line chosen by
//! a multiplicative hash and `fastrange`) and looked up through the same 64-deep L2 window:
//! hash, prefetch, load the line, match four keys, take the value. A batched get that reaches
//! this figure costs no more than a minimal table's would in the same run; what separates it
//! from the read window is the lookup itself (the issue-41 section of BENCHMARKS.md).
//!
//! Its write twin, **insert, L2 64**: fresh keys inserted into the same minimal table emptied,
//! through the same window, as DRAMHiT's set does it: hash, prefetch, then claim the line's
//! first empty pair with one compare-and-swap of its key word and store the value (the next
//! line when a line is full), at most until three pairs in four are taken. One locked
//! instruction an insert and nothing else: what a batched insert costs a table with no
//! protocol on top of the line it writes.

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use crate::measure::{cycle_for, median, streams, Workers};

pub struct Ceiling {
    /// The whole mapping, for `munmap`.
    mapping: *mut libc::c_void,
    mapping_bytes: usize,
    /// The huge-page-aligned array inside it.
    base: *mut u64,
    bytes: usize,
}

// SAFETY: after construction the mapping is only accessed through atomics (`Ceiling::word`).
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

    /// The word at index `word` (below `lines() * 8`).
    #[inline(always)]
    fn word(&self, word: u64) -> &AtomicU64 {
        debug_assert!(word < self.lines() * 8);
        // SAFETY: in bounds (the streams draw below `lines() * 8`), 8-byte aligned, and the
        // mapping lives as long as `self`; every access goes through atomics.
        unsafe { &*self.base.add(word as usize).cast::<AtomicU64>() }
    }

    /// Random line accesses on `threads` threads for `duration` with a prefetch window of
    /// `window` lines (0: none). Returns Mops/s.
    pub fn measure(
        &self,
        workers: &Workers,
        threads: usize,
        duration: Duration,
        access: Access,
        window: usize,
        stream_len: usize,
    ) -> f64 {
        let lines = self.lines();
        let streams = streams(threads, 0x1234, stream_len, |rng| rng.below(lines) * 8);
        let (elapsed, ops) = workers.run(threads, |i| {
            let stream = &streams[i];
            let mut sum = 0u64;
            let mut ahead = window % stream.len();
            let ops = cycle_for(stream, duration, |&word| {
                if window > 0 {
                    prefetch(self.word(stream[ahead]), access);
                    ahead += 1;
                    if ahead == stream.len() {
                        ahead = 0;
                    }
                }
                match access {
                    Access::Read | Access::ReadIntoL2 => {
                        sum = sum.wrapping_add(self.word(word).load(Ordering::Relaxed));
                    }
                    Access::ReadModifyWrite => {
                        self.word(word).fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            black_box(sum);
            ops
        });
        ops.iter().sum::<u64>() as f64 / elapsed.as_secs_f64() / 1e6
    }
}

/// The minimal table's hash (`find, L2 64`): a multiplication by an odd constant, a bijection
/// on words, so the keys of a line can be made from the hashes that map to it.
const FIND_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// Pairs a line of the minimal table holds (and those of them that are full).
const PAIRS_PER_LINE: u64 = 4;
const FULL_PAIRS_PER_LINE: u64 = 3;

/// The inverse of an odd `a` modulo 2^64 (Newton's iteration doubles the correct bits).
const fn inverse_mod_word(a: u64) -> u64 {
    let mut inverse = a; // correct to 3 bits for odd a
    let mut round = 0;
    while round < 5 {
        inverse = inverse.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(inverse)));
        round += 1;
    }
    inverse
}

/// Turns a hash of the minimal table back into its key.
const FIND_INVERSE: u64 = inverse_mod_word(FIND_MULTIPLIER);

/// Makes the minimal table's insert keys from their numbers (an odd multiplier: distinct
/// numbers give distinct keys, and consecutive ones land on lines far apart).
const INSERT_SPREAD: u64 = 0xD6E8_FEB8_6659_FD93;

/// The line of the minimal table a key lives in.
#[inline(always)]
fn find_line(key: u64, lines: u64) -> u64 {
    ((u128::from(key.wrapping_mul(FIND_MULTIPLIER)) * u128::from(lines)) >> 64) as u64
}

impl Ceiling {
    /// The key in `slot` of `line` of the minimal table: the key whose hash is the `slot + 1`th
    /// of those `fastrange` maps to `line` (never 0, the empty key).
    fn minimal_key(&self, line: u64, slot: u64) -> u64 {
        let first_hash = ((u128::from(line) << 64).div_ceil(u128::from(self.lines()))) as u64;
        (first_hash + slot + 1).wrapping_mul(FIND_INVERSE)
    }

    /// Lay the array out as the minimal table (every line's first three pairs full, the fourth
    /// empty; a pair's value is its key plus one). Overwrites what the other measurements left.
    fn lay_out_minimal_table(&self) {
        for line in 0..self.lines() {
            for slot in 0..PAIRS_PER_LINE {
                let (key, value) = if slot < FULL_PAIRS_PER_LINE {
                    let key = self.minimal_key(line, slot);
                    (key, key.wrapping_add(1))
                } else {
                    (0, 0)
                };
                let word = line * 8 + slot * 2;
                self.word(word).store(key, Ordering::Relaxed);
                self.word(word + 1).store(value, Ordering::Relaxed);
            }
        }
    }

    /// Finds of random present keys in the minimal table (`lay_out_minimal_table` first) on
    /// `threads` threads for `duration`, through a `window`-deep L2 prefetch window. Returns
    /// Mops/s, or an error if a find missed (the table was not laid out).
    fn measure_find(
        &self,
        workers: &Workers,
        threads: usize,
        duration: Duration,
        window: usize,
        stream_len: usize,
    ) -> Result<f64, String> {
        let lines = self.lines();
        let keys = streams(threads, 0x5678, stream_len, |rng| {
            self.minimal_key(rng.below(lines), rng.below(FULL_PAIRS_PER_LINE))
        });
        let missed = AtomicU64::new(0);
        let (elapsed, ops) = workers.run(threads, |i| {
            let keys = &keys[i];
            let (mut sum, mut misses) = (0u64, 0u64);
            let mut ahead = window % keys.len();
            let ops = cycle_for(keys, duration, |&key| {
                if window > 0 {
                    let line = find_line(keys[ahead], lines);
                    prefetch(self.word(line * 8), Access::ReadIntoL2);
                    ahead += 1;
                    if ahead == keys.len() {
                        ahead = 0;
                    }
                }
                let first = find_line(key, lines) * 8;
                // The four keys of the line, matched without branches; the value after the hit.
                let mut hit = None;
                for slot in (0..PAIRS_PER_LINE).rev() {
                    if self.word(first + slot * 2).load(Ordering::Relaxed) == key {
                        hit = Some(slot);
                    }
                }
                match hit {
                    Some(slot) => {
                        let value = self.word(first + slot * 2 + 1).load(Ordering::Relaxed);
                        sum = sum.wrapping_add(value);
                    }
                    None => misses += 1,
                }
            });
            black_box(sum);
            missed.fetch_add(misses, Ordering::Relaxed);
            ops
        });
        match missed.into_inner() {
            0 => Ok(ops.iter().sum::<u64>() as f64 / elapsed.as_secs_f64() / 1e6),
            n => Err(format!("the minimal table's finds missed {n} present keys")),
        }
    }
}

impl Ceiling {
    /// Empty the minimal table (every pair's key 0).
    fn empty_minimal_table(&self) {
        for word in 0..self.lines() * 8 {
            self.word(word).store(0, Ordering::Relaxed);
        }
    }

    /// Inserts of fresh keys into the emptied minimal table on `threads` threads, through a
    /// `window`-deep L2 prefetch window (module docs), for `duration` or until each thread has
    /// inserted its share of three pairs in four, once. Returns Mops/s, or an error if an
    /// insert found its key already there (the table was not emptied).
    fn measure_insert(
        &self,
        workers: &Workers,
        threads: usize,
        duration: Duration,
        window: usize,
        stream_len: usize,
    ) -> Result<f64, String> {
        self.empty_minimal_table();
        let lines = self.lines();
        let share = (lines * FULL_PAIRS_PER_LINE / threads as u64).min(stream_len as u64);
        // Distinct keys (an odd multiple of distinct numbers, never 0), spread over the lines.
        let keys: Vec<Vec<u64>> = (0..threads as u64)
            .map(|t| {
                (0..share)
                    .map(|i| (t * share + i + 1).wrapping_mul(INSERT_SPREAD))
                    .collect()
            })
            .collect();
        let found = AtomicU64::new(0);
        let (elapsed, ops) = workers.run(threads, |i| {
            let keys = &keys[i];
            let mut found_here = 0u64;
            let insert = |key: u64, value: u64| -> bool {
                let mut line = find_line(key, lines);
                loop {
                    let first = line * 8;
                    for slot in 0..PAIRS_PER_LINE {
                        let key_word = self.word(first + slot * 2);
                        let now = key_word.load(Ordering::Relaxed);
                        if now == key {
                            return false;
                        }
                        // Release on the value below, Acquire on a found key: the pairing a
                        // real table's readers need, at no cost on x86.
                        if now == 0
                            && key_word
                                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok()
                        {
                            self.word(first + slot * 2 + 1)
                                .store(value, Ordering::Release);
                            return true;
                        }
                    }
                    line = if line + 1 == lines { 0 } else { line + 1 };
                }
            };
            let start = std::time::Instant::now();
            let mut done = 0usize;
            for chunk in keys.chunks(4096) {
                for (j, &key) in chunk.iter().enumerate() {
                    let at = done + j;
                    if window > 0 {
                        if let Some(&next) = keys.get(at + window) {
                            prefetch(self.word(find_line(next, lines) * 8), Access::ReadIntoL2);
                        }
                    }
                    found_here += u64::from(!insert(key, at as u64));
                }
                done += chunk.len();
                if start.elapsed() >= duration {
                    break;
                }
            }
            found.fetch_add(found_here, Ordering::Relaxed);
            done as u64
        });
        match found.into_inner() {
            0 => Ok(ops.iter().sum::<u64>() as f64 / elapsed.as_secs_f64() / 1e6),
            n => Err(format!(
                "the minimal table's inserts found {n} keys already there"
            )),
        }
    }
}

/// The kinds of access the ceiling measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    /// A read whose window prefetches into L2 (`prefetcht2`) instead of L1.
    ReadIntoL2,
    ReadModifyWrite,
}

#[inline(always)]
fn prefetch(word: &AtomicU64, access: Access) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0, _MM_HINT_T2};
        let p = word.as_ptr().cast::<i8>().cast_const();
        // SAFETY: prefetch has no architectural effect and never faults.
        unsafe {
            match access {
                Access::Read => _mm_prefetch::<_MM_HINT_T0>(p),
                Access::ReadIntoL2 => _mm_prefetch::<_MM_HINT_T2>(p),
                Access::ReadModifyWrite => _mm_prefetch::<_MM_HINT_ET0>(p),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (word, access);
}

/// The ceilings one report needs, for one thread count (Mops/s).
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Figures {
    pub threads: usize,
    pub read_noprefetch_mops: f64,
    pub read_window32_mops: f64,
    pub read_window64_mops: f64,
    /// Reads with a 64-deep window into L2 (absent from reports written before it: 0).
    #[serde(default)]
    pub read_l2_window64_mops: f64,
    pub rmw_noprefetch_mops: f64,
    pub rmw_window64_mops: f64,
    /// Finds in a minimal table through a 64-deep L2 window (module docs): a reference, not a
    /// ceiling (absent from reports written before it: 0).
    #[serde(default)]
    pub find_l2_window64_mops: f64,
    /// Inserts into a minimal table through a 64-deep L2 window (module docs): a reference
    /// (absent from reports written before it: 0).
    #[serde(default)]
    pub insert_l2_window64_mops: f64,
}

impl Figures {
    /// The best of the read windows.
    pub fn read_window(&self) -> f64 {
        self.read_window32_mops
            .max(self.read_window64_mops)
            .max(self.read_l2_window64_mops)
    }

    /// The matching ceiling for a workload that reads a fraction `reads` of its operations and
    /// writes the rest: time per operation is the weighted sum of the two ceilings' times.
    /// Unbatched runs (`batch` 1) use the no-prefetch figures, batched ones the windows.
    pub fn matching(&self, reads: f64, batch: usize) -> f64 {
        let (read, rmw) = if batch <= 1 {
            (self.read_noprefetch_mops, self.rmw_noprefetch_mops)
        } else {
            (self.read_window(), self.rmw_window64_mops)
        };
        1.0 / (reads / read + (1.0 - reads) / rmw)
    }

    /// Measure every figure, each the median of `repeat` runs; the minimal table's finds and
    /// inserts last (laying it out overwrites the array). `Err` if a find missed a present key
    /// or an insert found a fresh one.
    pub fn measure(
        ceiling: &Ceiling,
        workers: &Workers,
        threads: usize,
        duration: Duration,
        repeat: usize,
        stream_len: usize,
        mut tick: impl FnMut(),
    ) -> Result<Figures, String> {
        let mut ceiling_median = |access, window| {
            median(
                (0..repeat)
                    .map(|_| {
                        let r =
                            ceiling.measure(workers, threads, duration, access, window, stream_len);
                        tick();
                        r
                    })
                    .collect(),
            )
        };
        let mut figures = Figures {
            threads,
            read_noprefetch_mops: ceiling_median(Access::Read, 0),
            read_window32_mops: ceiling_median(Access::Read, 32),
            read_window64_mops: ceiling_median(Access::Read, 64),
            read_l2_window64_mops: ceiling_median(Access::ReadIntoL2, 64),
            rmw_noprefetch_mops: ceiling_median(Access::ReadModifyWrite, 0),
            rmw_window64_mops: ceiling_median(Access::ReadModifyWrite, 64),
            find_l2_window64_mops: 0.0,
            insert_l2_window64_mops: 0.0,
        };
        ceiling.lay_out_minimal_table();
        let mut finds = Vec::with_capacity(repeat);
        for _ in 0..repeat {
            finds.push(ceiling.measure_find(workers, threads, duration, 64, stream_len)?);
            tick();
        }
        figures.find_l2_window64_mops = median(finds);
        let mut inserts = Vec::with_capacity(repeat);
        for _ in 0..repeat {
            inserts.push(ceiling.measure_insert(workers, threads, duration, 64, stream_len)?);
            tick();
        }
        figures.insert_l2_window64_mops = median(inserts);
        Ok(figures)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minimal_table_finds_every_key_it_holds() {
        assert_eq!(FIND_MULTIPLIER.wrapping_mul(FIND_INVERSE), 1);
        let ceiling = Ceiling::new(4 << 20, false).expect("a small array");
        ceiling.lay_out_minimal_table();
        for line in [0, 1, 777, ceiling.lines() - 1] {
            for slot in 0..FULL_PAIRS_PER_LINE {
                let key = ceiling.minimal_key(line, slot);
                assert_ne!(key, 0);
                assert_eq!(find_line(key, ceiling.lines()), line);
            }
        }
        let workers = Workers::new();
        let mops = ceiling
            .measure_find(&workers, 1, Duration::from_millis(20), 64, 10_000)
            .expect("no find misses");
        assert!(mops > 0.0);
        // Written over by a ceiling's read-modify-writes, the keys are gone: a miss is an error.
        ceiling.measure(
            &workers,
            1,
            Duration::from_millis(20),
            Access::ReadModifyWrite,
            0,
            100_000,
        );
        assert!(ceiling
            .measure_find(&workers, 1, Duration::from_millis(20), 0, 10_000)
            .is_err());
    }

    #[test]
    fn the_minimal_table_takes_each_fresh_key_once_and_keeps_it() {
        let ceiling = Ceiling::new(4 << 20, false).expect("a small array");
        let workers = Workers::new();
        // Two threads, each to its share of three pairs in four (no time limit reached).
        let share = ceiling.lines() * FULL_PAIRS_PER_LINE / 2;
        let mops = ceiling
            .measure_insert(&workers, 2, Duration::from_secs(60), 64, usize::MAX)
            .expect("fresh keys are fresh");
        assert!(mops > 0.0);
        let mut taken = std::collections::HashSet::new();
        for word in (0..ceiling.lines() * 8).step_by(2) {
            let key = ceiling.word(word).load(Ordering::Relaxed);
            if key != 0 {
                let number = key.wrapping_mul(inverse_mod_word(INSERT_SPREAD));
                assert!((1..=2 * share).contains(&number), "only the streams' keys");
                assert!(taken.insert(number), "key number {number} in two pairs");
                let value = ceiling.word(word + 1).load(Ordering::Relaxed);
                assert_eq!(value, (number - 1) % share, "the value its insert stored");
            }
        }
        assert_eq!(taken.len() as u64, 2 * share, "every key inserted");
    }
}
