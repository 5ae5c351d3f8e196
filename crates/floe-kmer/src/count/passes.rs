//! A count within a memory budget: in passes over ranges of k-mers, as kmc counts within its
//! `-m` (issue 45).
//!
//! # How
//! The k-mers (canonical ones, with `-C`) are numbers below `4^k`. A pass reads the whole
//! input again and counts only the k-mers of one range, into a compact table capped at its
//! share of the budget ([`Limits::table_bytes`]); the caller takes each pass's counts
//! (writes them out, to disk) before the next pass makes its table. The ranges follow one
//! another upwards, so the passes' sorted k-mers, one after the other, are sorted. (K-mers
//! longer than 32 bases are cut by their first 32: the ranges are of [`prefix`]es, which
//! keep the k-mers' order.)
//!
//! How many passes: the size hint (distinct k-mers expected) says how large one table for all
//! of them would be; the k-mer space is cut into that many tables' worth, a power of two, by
//! where the k-mers are expected to fall (evenly, or for canonical k-mers, which are the
//! smaller of a pair and so crowd the low end, by that law's quantiles). A pass whose table
//! would grow past its cap stops ([`Error::OverBudget`]). The first time that happens, one
//! pass over the input estimates how many distinct k-mers each of 256 ranges of the k-mer
//! space holds (`Sketch`, a HyperLogLog per range), and what is left to count is planned
//! again from those figures: consecutive ranges grouped into passes whose tables fit. A pass
//! that still overflows (a range more crowded than the estimate said) is cut into as many
//! pieces as the share of the input it had read says it needs (half read: two; a tenth:
//! sixteen). A short hint or skewed input so costs extra passes, never more memory. Each pass
//! reads and parses the input again: P passes take about P times one pass's reading (kmc
//! reads once and spills k-mers to disk instead).
//!
//! # The bound
//! [`RESERVE`] of the budget is kept for what a count holds beside its table: the program,
//! the input's buffers (a chunk per thread) and the sorted copy the caller makes of the
//! first part of a pass (at least 1 MiB); measured, 12-14 MiB at 2 threads. The table may
//! take two thirds of the rest: a growth holds the old table beside the new one (1.5 times
//! the new one's size), the most a table costs at any moment (a pass's later sorted parts, an
//! eighth of its k-mers at 16 bytes each, take less). Not counted: the overflow map of counts
//! past a slot's field (only k-mers counted that often), and more threads' chunks.

use std::ops::RangeInclusive;

use indicatif::ProgressBar;

use super::{count_within, CountWord, Counts, Limits, Settings};
use crate::{
    kmer::{last_prefix, prefix, Word},
    parse::{Input, Source},
    Error,
};

/// What a count in passes keeps of its budget for everything but its table (module docs).
pub const RESERVE: usize = 16 << 20;

/// The least budget a count in passes takes: the reserve and a table of 2^18 slots (2 MiB)
/// with room to grow into.
pub const MIN_BUDGET: usize = RESERVE + (4 << 20);

/// One finished pass.
pub struct Pass<W: Word = u64> {
    /// The k-mers it counted: those whose [`prefix`] is in this range (after
    /// canonicalizing).
    pub kmers: RangeInclusive<u64>,
    /// Its counts.
    pub counts: Counts<W>,
}

/// What a count in passes did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Passes that finished (each range counted once).
    pub passes: usize,
    /// Passes stopped because their table would have grown past its cap (their k-mers were
    /// planned again and counted in other passes).
    pub stopped: usize,
    /// The k-mers counted (the sum of the counts).
    pub total: u64,
    /// Distinct k-mers.
    pub distinct: u64,
}

/// Counts the k-mers of `sources` within `budget` bytes (module docs), giving each pass's
/// counts to `each` in increasing order of k-mer ranges, which together cover every k-mer.
///
/// # Errors
/// [`Error::Usage`] if the budget is below [`MIN_BUDGET`], the engine is not the compact one,
/// or an input is not a regular file (stdin, a FIFO: it cannot be read twice); the input's
/// and the engine's errors; the first of `each`'s.
pub fn count_in_passes<W: CountWord>(
    sources: &[Source],
    settings: &Settings,
    budget: usize,
    progress: &ProgressBar,
    mut each: impl FnMut(Pass<W>) -> Result<(), Error>,
) -> Result<Summary, Error> {
    if budget < MIN_BUDGET {
        return Err(Error::Usage(format!(
            "a memory budget of {budget} bytes is below the least a count takes ({MIN_BUDGET})"
        )));
    }
    // Stdin, a FIFO or a device would give the second pass nothing: refused, named. (A path
    // that is not there is left to the input's own message.)
    let once = sources.iter().find(|source| match source {
        Source::Stdin => true,
        Source::Path(path) => std::fs::metadata(path).is_ok_and(|meta| !meta.is_file()),
        Source::Bytes { .. } => false,
    });
    if let Some(once) = once {
        return Err(Error::Usage(format!(
            "{} can be read only once, and a count within a memory budget reads its input \
             once a pass: give a regular file",
            once.name()
        )));
    }
    let table_bytes = (budget - RESERVE) / 3 * 2;
    let limits = |kmers| Limits {
        kmers: Some(kmers),
        table_bytes: Some(table_bytes),
    };
    let total_bytes = Input::total_bytes(sources);
    let slot_bytes = size_of::<W>();
    let mut pending = first_ranges(settings, table_bytes, slot_bytes);
    let mut summary = Summary::default();
    let mut planned = false;
    while let Some(kmers) = pending.pop() {
        progress.set_position(0);
        progress.set_message(format!("pass {}", summary.passes + 1));
        let input = Input::new(sources.to_vec(), progress.clone())?;
        match count_within(input, settings, &limits(kmers.clone())) {
            Ok(counts) => {
                summary.passes += 1;
                summary.total += counts.total;
                summary.distinct += counts.distinct() as u64;
                each(Pass { kmers, counts })?;
            }
            Err(Error::OverBudget { .. }) if !planned => {
                // Plan what is left (this range and the ones after it) from an estimate.
                planned = true;
                summary.stopped += 1;
                progress.set_position(0);
                progress.set_message("estimating the passes");
                let input = Input::new(sources.to_vec(), progress.clone())?;
                let sketch = Sketch::of::<W>(input, settings)?;
                let last = last_prefix(settings.k);
                let per_table = (table_bytes / slot_bytes).next_power_of_two() / 2;
                pending = sketch.plan(*kmers.start(), last, per_table as f64 * PLANNED_LOAD);
                pending.reverse();
            }
            Err(Error::OverBudget { table_bytes }) => {
                if kmers.start() == kmers.end() {
                    // One k-mer always fits the smallest table: not reached.
                    return Err(Error::Internal(format!(
                        "one k-mer's table passed {table_bytes} bytes"
                    )));
                }
                // The share of the input read when the table filled says how many tables
                // the range needs (at most: distinct k-mers come faster early on).
                let read = match (progress.position(), total_bytes) {
                    (read, Some(total)) if read > 0 && total > 0 => read as f64 / total as f64,
                    _ => 0.5,
                };
                let pieces = ((1.0 / read).ceil() as u64)
                    .clamp(2, 1 << 10)
                    .next_power_of_two();
                summary.stopped += 1;
                // Popped from the end: the lowest piece next.
                pending.extend(cut(kmers, pieces).into_iter().rev());
            }
            Err(error) => return Err(error),
        }
    }
    Ok(summary)
}

/// How full a planned pass's table is meant to be: the compact table takes 9/10 before it
/// grows, and the estimates are within a few percent.
const PLANNED_LOAD: f64 = 0.75;

/// log2 of the ranges a [`Sketch`] estimates (by a k-mer's top bits).
const SKETCH_RANGE_BITS: u32 = 8;
/// log2 of a range's HyperLogLog registers: 1024, a standard error of 1.04/32 = 3.3%.
const SKETCH_REGISTER_BITS: u32 = 10;

/// Distinct k-mers per range of the k-mer space (ranges by the top [`SKETCH_RANGE_BITS`]
/// bits of their prefixes), estimated by a HyperLogLog per range (Flajolet, Fusy, Gandouet
/// and Meunier, 2007):
/// a k-mer's hash picks one of the range's registers, which keeps the most leading zeros seen
/// in the rest of the hashes it was picked by. 256 KiB whatever the input.
struct Sketch {
    k: usize,
    /// The k-mer's prefix's shift that leaves its range.
    shift: u32,
    /// Each range's registers, one after the other.
    registers: Vec<u8>,
}

impl Sketch {
    fn new(k: usize) -> Sketch {
        let prefix_bits = 2 * k.min(32) as u32;
        let range_bits = SKETCH_RANGE_BITS.min(prefix_bits);
        Sketch {
            k,
            shift: prefix_bits - range_bits,
            registers: vec![0; 1 << (range_bits + SKETCH_REGISTER_BITS)],
        }
    }

    /// The sketch of every k-mer of `input` (a pass of the counting workers, each with a
    /// sketch of its own, merged at the end).
    fn of<W: Word>(input: Input, settings: &Settings) -> Result<Sketch, Error> {
        let merged = std::sync::Mutex::new(Sketch::new(settings.k));
        let sinks = (0..settings.threads.max(1))
            .map(|_| SketchSink {
                sketch: Sketch::new(settings.k),
                merged: &merged,
            })
            .collect();
        super::extract_into::<W, _>(input, settings, sinks)?;
        Ok(merged.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    #[inline]
    fn add<W: Word>(&mut self, kmer: W) {
        // Every bit of the k-mer moves every bit of the hash.
        let hash = kmer.hash64();
        let register = (hash >> (64 - SKETCH_REGISTER_BITS)) as usize;
        let rank = ((hash << SKETCH_REGISTER_BITS) | 1 << (SKETCH_REGISTER_BITS - 1))
            .leading_zeros() as u8
            + 1;
        let at = ((prefix(kmer, self.k) >> self.shift) as usize) << SKETCH_REGISTER_BITS | register;
        self.registers[at] = self.registers[at].max(rank);
    }

    fn merge(&mut self, other: &Sketch) {
        for (mine, theirs) in self.registers.iter_mut().zip(&other.registers) {
            *mine = (*mine).max(*theirs);
        }
    }

    /// The estimate of range `range`'s distinct k-mers (HyperLogLog's, with linear counting
    /// for small counts, as its paper does).
    fn estimate(&self, range: usize) -> f64 {
        let m = (1usize << SKETCH_REGISTER_BITS) as f64;
        let registers =
            &self.registers[range << SKETCH_REGISTER_BITS..][..1 << SKETCH_REGISTER_BITS];
        let sum: f64 = registers.iter().map(|&r| (-f64::from(r)).exp2()).sum();
        let zeros = registers.iter().filter(|&&r| r == 0).count();
        let raw = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
        if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        }
    }

    /// Ranges of prefixes from `from` to `last`, each about `per_pass`
    /// distinct k-mers by the estimates or a single range of the sketch, in increasing order.
    fn plan(&self, from: u64, last: u64, per_pass: f64) -> Vec<RangeInclusive<u64>> {
        let ranges = self.registers.len() >> SKETCH_REGISTER_BITS;
        let first = (from >> self.shift) as usize;
        let mut planned = Vec::new();
        let (mut start, mut held) = (from, 0.0);
        for range in first..ranges {
            let estimate = self.estimate(range);
            let range_start = (range as u64) << self.shift;
            if held > 0.0 && held + estimate > per_pass && range_start > start {
                planned.push(start..=range_start - 1);
                (start, held) = (range_start, 0.0);
            }
            held += estimate;
        }
        planned.push(start..=last);
        planned
    }
}

/// A worker's sketch, merged into the count's when the worker finishes.
struct SketchSink<'m> {
    sketch: Sketch,
    merged: &'m std::sync::Mutex<Sketch>,
}

impl<W: Word> super::Sink<W> for SketchSink<'_> {
    fn add(&mut self, kmers: &[W]) -> Result<(), Error> {
        for &kmer in kmers {
            self.sketch.add(kmer);
        }
        Ok(())
    }

    fn finish(self) -> Result<(), Error> {
        self.merged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .merge(&self.sketch);
        Ok(())
    }
}

/// `range` cut into `pieces` ranges of about the same size (fewer if it holds fewer
/// k-mers), in increasing order.
fn cut(range: RangeInclusive<u64>, pieces: u64) -> Vec<RangeInclusive<u64>> {
    let (low, high) = (*range.start(), *range.end());
    let size = u128::from(high - low) + 1;
    let pieces = u128::from(pieces).min(size);
    (0..pieces)
        .map(|i| {
            let start = low + (size * i / pieces) as u64;
            let end = low + (size * (i + 1) / pieces - 1) as u64;
            start..=end
        })
        .collect()
}

/// The first passes' ranges of prefixes, the lowest last (popped first): as many as tables
/// of `table_bytes` (of slots of `slot_bytes`) the size hint needs, a power of two, cut where
/// the k-mers are expected to fall evenly among them.
fn first_ranges(
    settings: &Settings,
    table_bytes: usize,
    slot_bytes: usize,
) -> Vec<RangeInclusive<u64>> {
    // The compact table's slots for the hint (9/10 full at most).
    let hint = settings.size_hint as u128;
    let needed = (hint + hint / 9).max(1).next_power_of_two() * slot_bytes as u128;
    let parts = needed
        .div_ceil(table_bytes.max(1) as u128)
        .next_power_of_two()
        .min(1 << 16) as u64;
    let last = last_prefix(settings.k);
    let space = u128::from(last) + 1;
    // Where the share `f` of the k-mers lies below: the k-mers themselves are uniform
    // enough for a first cut; a canonical one is the smaller of two uniform k-mers, below x
    // with probability 1 - (1 - x)^2, so its quantile f is at 1 - sqrt(1 - f).
    let quantile = |f: f64| {
        if settings.canonical {
            1.0 - (1.0 - f).sqrt()
        } else {
            f
        }
    };
    let mut cuts: Vec<u64> = (1..parts)
        .map(|i| {
            let at = (quantile(i as f64 / parts as f64) * space as f64) as u128;
            at.clamp(1, space - 1) as u64
        })
        .collect();
    cuts.dedup();
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0u64;
    for cut in cuts {
        if cut > start {
            ranges.push(start..=cut - 1);
            start = cut;
        }
    }
    ranges.push(start..=last);
    ranges.reverse();
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{count::EngineKind, kmer::mask};

    fn settings(k: usize, canonical: bool, size_hint: usize) -> Settings {
        Settings {
            k,
            canonical,
            threads: 2,
            size_hint,
            engine: EngineKind::Compact,
        }
    }

    #[test]
    fn the_sketch_estimates_each_range_within_a_few_percent() {
        let k = 12;
        let mut sketch = Sketch::new(k);
        // 40k distinct k-mers in range 3 (two of each), 200 in range 200, none elsewhere.
        let shift = 2 * k as u32 - SKETCH_RANGE_BITS;
        for i in 0..40_000u64 {
            sketch.add((3 << shift) | i);
            sketch.add((3 << shift) | i);
        }
        for i in 0..200u64 {
            sketch.add((200 << shift) | (i * 7));
        }
        let (crowded, sparse) = (sketch.estimate(3), sketch.estimate(200));
        assert!((crowded / 40_000.0 - 1.0).abs() < 0.1, "{crowded}");
        assert!((sparse / 200.0 - 1.0).abs() < 0.1, "{sparse}");
        assert_eq!(sketch.estimate(4), 0.0);
        // Passes of 25k: range 3 alone (it cannot be cut below a range), the rest together.
        let last = mask::<u64>(k);
        let plan = sketch.plan(0, last, 25_000.0);
        assert_eq!(plan, [0..=(4 << shift) - 1, 4 << shift..=last]);
        // From the middle of range 3: the plan starts there.
        let plan = sketch.plan((3 << shift) | 5, last, 1e9);
        assert_eq!(plan, [((3 << shift) | 5)..=last]);
    }

    #[test]
    fn cuts_cover_the_range_once_in_order() {
        for (range, pieces) in [(0..=u64::MAX, 8), (5..=5, 4), (10..=12, 8), (0..=99, 2)] {
            let pieces_made = cut(range.clone(), pieces);
            assert_eq!(pieces_made.first().unwrap().start(), range.start());
            assert_eq!(pieces_made.last().unwrap().end(), range.end());
            for pair in pieces_made.windows(2) {
                assert!(pair[0].start() <= pair[0].end());
                assert_eq!(*pair[0].end() + 1, *pair[1].start());
            }
        }
        assert_eq!(cut(10..=12, 8).len(), 3);
    }

    #[test]
    fn the_first_ranges_cover_the_kmers_once_in_order() {
        for (k, canonical, hint, table_bytes) in [
            (21, false, 100_000_000, 64 << 20),
            (21, true, 100_000_000, 64 << 20),
            (32, true, usize::MAX / 2, 1 << 20),
            (1, false, 1 << 30, 1 << 20),
            (31, false, 10, 1 << 30),
        ] {
            let mut ranges = first_ranges(&settings(k, canonical, hint), table_bytes, 8);
            ranges.reverse();
            assert_eq!(*ranges[0].start(), 0);
            assert_eq!(*ranges.last().unwrap().end(), last_prefix(k));
            for pair in ranges.windows(2) {
                assert!(pair[0].start() <= pair[0].end());
                assert_eq!(*pair[0].end() + 1, *pair[1].start(), "{ranges:?}");
            }
            if hint == 10 {
                assert_eq!(ranges.len(), 1);
            }
        }
        // 100M k-mers: 2^27 slots of 8 bytes = 1 GiB, in tables of 64 MiB: 16 ranges.
        assert_eq!(
            first_ranges(&settings(21, false, 100_000_000), 64 << 20, 8).len(),
            16
        );
        // At k = 48 the prefixes are the first 32 bases, and slots are 16 bytes: 32 ranges.
        let ranges = first_ranges(&settings(48, true, 100_000_000), 64 << 20, 16);
        assert_eq!(ranges.len(), 32);
        assert_eq!(*ranges[0].end(), u64::MAX);
    }

    fn reads(bases: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        let mut text = b">r\n".to_vec();
        for _ in 0..bases {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            text.push(b"ACGT"[(state >> 62) as usize]);
        }
        text.push(b'\n');
        text
    }

    fn sorted<W: Word>(counts: &Counts<W>) -> Vec<(W, u64)> {
        let mut kmers = Vec::new();
        counts.for_each(|kmer, count| kmers.push((kmer, count)));
        kmers.sort_unstable();
        kmers
    }

    /// Counts `data`'s k-mers in one count and in passes within the least budget, in `W`.
    fn passes_against_one_count<W: CountWord>(k: usize, data: &[u8]) {
        let source = Source::Bytes {
            name: "reads".into(),
            data: data.into(),
        };
        for canonical in [false, true] {
            // A hint far too small: the first cut is one range, which must split.
            let settings = settings(k, canonical, 1000);
            let input = Input::new(vec![source.clone()], ProgressBar::hidden()).unwrap();
            let whole = sorted(&super::super::count::<W>(input, &settings).unwrap());
            let mut parts = Vec::new();
            let mut last_end = None;
            let summary = count_in_passes::<W>(
                std::slice::from_ref(&source),
                &settings,
                MIN_BUDGET,
                &ProgressBar::hidden(),
                |pass| {
                    assert_eq!(last_end.map_or(0, |end: u64| end + 1), *pass.kmers.start());
                    last_end = Some(*pass.kmers.end());
                    let counted = sorted(&pass.counts);
                    assert!(counted
                        .iter()
                        .all(|&(kmer, _)| pass.kmers.contains(&prefix(kmer, k))));
                    parts.extend(counted);
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(last_end, Some(last_prefix(k)));
            assert!(summary.stopped > 0 && summary.passes > 1, "{summary:?}");
            assert_eq!(parts, whole, "k = {k}, canonical: {canonical}");
            assert_eq!(summary.distinct as usize, whole.len());
            assert_eq!(
                summary.total,
                whole.iter().map(|(_, count)| count).sum::<u64>()
            );
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "hundreds of thousands of k-mers: too slow to interpret"
    )]
    fn passes_count_what_one_count_does_within_the_budget() {
        passes_against_one_count::<u64>(15, &reads(300_000, 7));
        // Long k-mers, cut by their first 32 bases.
        passes_against_one_count::<u128>(40, &reads(300_000, 8));
    }

    #[test]
    fn budgets_too_small_stdin_and_other_engines_are_usage_errors() {
        let source = Source::Bytes {
            name: "reads".into(),
            data: b">r\nACGT\n".as_slice().into(),
        };
        let run = |sources: &[Source], settings: &Settings, budget| {
            count_in_passes::<u64>(
                sources,
                settings,
                budget,
                &ProgressBar::hidden(),
                |_| Ok(()),
            )
        };
        let compact = settings(3, false, 10);
        assert!(matches!(
            run(std::slice::from_ref(&source), &compact, MIN_BUDGET - 1),
            Err(Error::Usage(_))
        ));
        let stdin = Source::from_arg("-".into());
        assert!(matches!(
            run(&[stdin], &compact, MIN_BUDGET),
            Err(Error::Usage(_))
        ));
        let batched = Settings {
            engine: EngineKind::Batched,
            ..compact.clone()
        };
        assert!(matches!(
            run(std::slice::from_ref(&source), &batched, MIN_BUDGET),
            Err(Error::Usage(_))
        ));
        let summary = run(&[source], &compact, MIN_BUDGET).unwrap();
        assert_eq!((summary.passes, summary.total, summary.distinct), (1, 2, 2));
    }
}
