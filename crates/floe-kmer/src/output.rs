//! Writing counts as jellyfish users compare them: the dump (`ACGT 5` lines in k-mer order,
//! what `jellyfish dump -c` piped through `sort` prints) and the histogram (`jellyfish histo`).

use std::{collections::BTreeMap, io, io::Write};

use crate::kmer::{decode, MAX_K};

/// The counts written: those from `lower` to `upper`, both included (jellyfish's `-L` and
/// `-U`). The default keeps all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    /// The smallest count kept.
    pub lower: u64,
    /// The largest count kept.
    pub upper: u64,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            lower: 0,
            upper: u64::MAX,
        }
    }
}

impl Filter {
    /// Whether a k-mer counted `count` times is written.
    #[inline]
    pub fn keeps(&self, count: u64) -> bool {
        (self.lower..=self.upper).contains(&count)
    }
}

/// Sorts `kmers` (of length `k`) by k-mer, then writes those that `filter` keeps as
/// `KMER COUNT` lines. Returns the lines written.
///
/// ```
/// let mut out = Vec::new();
/// let mut kmers = [(0b11_11, 1), (0b00_01, 3)];
/// floe_kmer::output::write_dump(&mut kmers, 2, &Default::default(), &mut out).unwrap();
/// assert_eq!(out, b"AC 3\nTT 1\n");
/// ```
///
/// # Errors
/// `out`'s.
pub fn write_dump(
    kmers: &mut [(u64, u64)],
    k: usize,
    filter: &Filter,
    out: &mut impl Write,
) -> io::Result<u64> {
    // Numeric order is the strings' order (see `kmer`); k-mers are distinct, so unstable is
    // stable.
    kmers.sort_unstable_by_key(|&(kmer, _)| kmer);
    let mut out = io::BufWriter::with_capacity(1 << 16, out);
    // One line is at most 32 bases, a space, 20 digits and a newline.
    let mut line = [0u8; MAX_K + 22];
    let mut digits = itoa::Buffer::new();
    let mut lines = 0;
    for &(kmer, count) in kmers.iter().filter(|&&(_, count)| filter.keeps(count)) {
        decode(kmer, k, &mut line);
        line[k] = b' ';
        let count = digits.format(count).as_bytes();
        line[k + 1..][..count.len()].copy_from_slice(count);
        let len = k + 1 + count.len();
        line[len] = b'\n';
        out.write_all(&line[..=len])?;
        lines += 1;
    }
    out.flush()?;
    Ok(lines)
}

/// The histogram of the counts `filter` keeps, as `jellyfish histo -h high` makes it: for each
/// count from 1 to `high` that some k-mer has, how many k-mers have it, in increasing order;
/// the k-mers counted more than `high` times together under the label `high + 1`.
///
/// ```
/// let kmers = [(0, 5), (1, 2), (2, 5), (3, 20000)];
/// let histogram = floe_kmer::output::histogram(&kmers, &Default::default(), 10000);
/// assert_eq!(histogram, [(2, 1), (5, 2), (10001, 1)]);
/// ```
pub fn histogram(kmers: &[(u64, u64)], filter: &Filter, high: u64) -> Vec<(u64, u64)> {
    let mut histogram = Histogram::new(filter, high);
    for &(_, count) in kmers {
        histogram.add(count);
    }
    histogram.into_lines()
}

/// A histogram filled one count at a time (as [`histogram`] makes it), so a table's counts
/// can be tallied where they are, without a copy of them all.
#[derive(Clone, Debug)]
pub struct Histogram<'f> {
    filter: &'f Filter,
    high: u64,
    buckets: BTreeMap<u64, u64>,
}

impl<'f> Histogram<'f> {
    /// An empty histogram of the counts `filter` keeps, lumped above `high`.
    pub fn new(filter: &'f Filter, high: u64) -> Self {
        Histogram {
            filter,
            high,
            buckets: BTreeMap::new(),
        }
    }

    /// Tally one k-mer's count.
    #[inline]
    pub fn add(&mut self, count: u64) {
        if self.filter.keeps(count) {
            *self
                .buckets
                .entry(count.min(self.high.saturating_add(1)))
                .or_insert(0) += 1;
        }
    }

    /// The `(COUNT, NUMBER_OF_KMERS)` lines in increasing order of count.
    pub fn into_lines(self) -> Vec<(u64, u64)> {
        self.buckets.into_iter().collect()
    }
}

/// Writes a histogram as `COUNT NUMBER_OF_KMERS` lines.
///
/// # Errors
/// `out`'s.
pub fn write_histogram(histogram: &[(u64, u64)], out: &mut impl Write) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    for (count, kmers) in histogram {
        writeln!(out, "{count} {kmers}")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmer::encode;

    #[test]
    fn the_dump_decodes_every_length_and_filters_counts() {
        let long = encode(&[b'T'; 32]).unwrap();
        let mut out = Vec::new();
        write_dump(&mut [(long, u64::MAX)], 32, &Filter::default(), &mut out).unwrap();
        assert_eq!(out, format!("{} {}\n", "T".repeat(32), u64::MAX).as_bytes());
        let mut kmers = [(3, 4), (2, 3), (1, 2), (0, 1)];
        let mut out = Vec::new();
        let filter = Filter { lower: 2, upper: 3 };
        assert_eq!(write_dump(&mut kmers, 1, &filter, &mut out).unwrap(), 2);
        assert_eq!(out, b"C 2\nG 3\n");
    }

    #[test]
    fn the_histogram_matches_jellyfish() {
        // `jellyfish histo` on a count of A 20001, C 10000, G 10001, T 10002 (k = 1) prints
        // "10000 1" and "10001 3"; with -h 5, "6 4".
        let kmers = [(0, 20001), (1, 10000), (2, 10001), (3, 10002)];
        let all = Filter::default();
        assert_eq!(histogram(&kmers, &all, 10000), [(10000, 1), (10001, 3)]);
        assert_eq!(histogram(&kmers, &all, 5), [(6, 4)]);
        assert_eq!(histogram(&kmers, &all, u64::MAX).len(), 4);
        let mut out = Vec::new();
        write_histogram(&histogram(&kmers, &all, 10000), &mut out).unwrap();
        assert_eq!(out, b"10000 1\n10001 3\n");
        let filter = Filter {
            lower: 10001,
            upper: 10002,
        };
        assert_eq!(histogram(&kmers, &filter, 10000), [(10001, 2)]);
    }
}
