//! Writing counts as jellyfish users compare them: the dump (`ACGT 5` lines in k-mer order,
//! what `jellyfish dump -c` piped through `sort` prints) and the histogram (`jellyfish histo`).

use std::{collections::BTreeMap, io, io::Write};

use crate::kmer::{decode, Word, MAX_K};

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

/// How a dump prints a k-mer and its count (`jellyfish dump`'s choices).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DumpFormat {
    /// `>COUNT` then the k-mer, a line each (jellyfish's default).
    #[default]
    Fasta,
    /// `KMER COUNT` on one line, with this separator between them (`-c`; `-c -t` is a tab).
    Columns(u8),
}

/// Sorts `kmers` (of length `k`) by k-mer, then writes those that `filter` keeps as
/// `KMER COUNT` lines. Returns the lines written.
///
/// ```
/// let mut out = Vec::new();
/// let mut kmers = [(0b11_11u64, 1), (0b00_01, 3)];
/// floe_kmer::output::write_dump(&mut kmers, 2, &Default::default(), &mut out).unwrap();
/// assert_eq!(out, b"AC 3\nTT 1\n");
/// ```
///
/// # Errors
/// `out`'s.
pub fn write_dump<W: Word>(
    kmers: &mut [(W, u64)],
    k: usize,
    filter: &Filter,
    out: &mut impl Write,
) -> io::Result<u64> {
    // Numeric order is the strings' order (see `kmer`); k-mers are distinct, so unstable is
    // stable.
    kmers.sort_unstable_by_key(|&(kmer, _)| kmer);
    write_kmers(
        kmers.iter().copied(),
        k,
        filter,
        DumpFormat::Columns(b' '),
        out,
    )
}

/// Writes the k-mers (of length `k`, in the order given) that `filter` keeps, in `format`.
/// Returns the k-mers written.
///
/// ```
/// use floe_kmer::output::{write_kmers, DumpFormat};
/// let mut out = Vec::new();
/// write_kmers([(0b00_01u64, 3)].into_iter(), 2, &Default::default(), DumpFormat::Fasta, &mut out).unwrap();
/// assert_eq!(out, b">3\nAC\n");
/// ```
///
/// # Errors
/// `out`'s.
pub fn write_kmers<W: Word>(
    kmers: impl Iterator<Item = (W, u64)>,
    k: usize,
    filter: &Filter,
    format: DumpFormat,
    out: &mut impl Write,
) -> io::Result<u64> {
    let mut out = io::BufWriter::with_capacity(1 << 16, out);
    // One entry is at most 64 bases, 20 digits and three more bytes.
    let mut line = [0u8; MAX_K + 24];
    let mut digits = itoa::Buffer::new();
    let mut written = 0;
    for (kmer, count) in kmers.filter(|&(_, count)| filter.keeps(count)) {
        let count = digits.format(count).as_bytes();
        let len = match format {
            DumpFormat::Columns(separator) => {
                decode(kmer, k, &mut line);
                line[k] = separator;
                line[k + 1..][..count.len()].copy_from_slice(count);
                k + 1 + count.len()
            }
            DumpFormat::Fasta => {
                line[0] = b'>';
                line[1..][..count.len()].copy_from_slice(count);
                line[1 + count.len()] = b'\n';
                let at = 2 + count.len();
                decode(kmer, k, &mut line[at..]);
                at + k
            }
        };
        line[len] = b'\n';
        out.write_all(&line[..=len])?;
        written += 1;
    }
    out.flush()?;
    Ok(written)
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
    let buckets = Buckets::new(1, high, 1).expect("1 <= high, an increment of 1");
    let mut histogram = Histogram::new(filter, buckets);
    for &(_, count) in kmers {
        histogram.add(count);
    }
    histogram.into_lines()
}

/// How a histogram groups counts: `jellyfish histo`'s `-l`, `-h` and `-i`.
///
/// Bucket `i` is labelled `base + i * inc`, where `base` is `low - inc` (0 if `inc` is not
/// below `low`); a count goes to bucket `(count - base) / inc`, counts below `low` to the
/// first bucket, and the last bucket, labelled at or just past `high` (at most 2^64 - 1),
/// takes every count from its label up. With the defaults (1, 10000, 1) that is a line per
/// count and the counts above 10000 together under 10001. This is what jellyfish 2.3 prints,
/// found by running it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buckets {
    low: u64,
    inc: u64,
    base: u64,
    last: u64,
}

impl Buckets {
    /// Buckets from `low` to `high`, `inc` apart.
    ///
    /// # Errors
    /// A message if `inc` is 0 or `high` is below `low`.
    pub fn new(low: u64, high: u64, inc: u64) -> Result<Buckets, String> {
        if inc == 0 {
            return Err("an increment of 0 makes no buckets".to_owned());
        }
        if high < low {
            return Err(format!(
                "the high count {high} is below the low count {low}"
            ));
        }
        // Past 2^64 no count can reach the last bucket's label anyway.
        let ceiling = high.saturating_add(inc);
        let base = low.saturating_sub(inc);
        Ok(Buckets {
            low,
            inc,
            base,
            last: (ceiling - base) / inc,
        })
    }

    /// The bucket a count goes to.
    #[inline]
    fn index(&self, count: u64) -> u64 {
        if count < self.low {
            0
        } else {
            ((count - self.base) / self.inc).min(self.last)
        }
    }

    /// The label of bucket `index`.
    fn label(&self, index: u64) -> u64 {
        self.base + index * self.inc
    }
}

/// A histogram filled one count at a time (as [`histogram`] makes it), so a table's counts
/// can be tallied where they are, without a copy of them all.
#[derive(Clone, Debug)]
pub struct Histogram<'f> {
    filter: &'f Filter,
    buckets: Buckets,
    tallies: BTreeMap<u64, u64>,
}

impl<'f> Histogram<'f> {
    /// An empty histogram of the counts `filter` keeps, grouped into `buckets`.
    pub fn new(filter: &'f Filter, buckets: Buckets) -> Self {
        Histogram {
            filter,
            buckets,
            tallies: BTreeMap::new(),
        }
    }

    /// Tally one k-mer's count.
    #[inline]
    pub fn add(&mut self, count: u64) {
        if self.filter.keeps(count) {
            *self.tallies.entry(self.buckets.index(count)).or_insert(0) += 1;
        }
    }

    /// The `(LABEL, NUMBER_OF_KMERS)` lines of the buckets that are not empty, in increasing
    /// order.
    pub fn into_lines(self) -> Vec<(u64, u64)> {
        let buckets = self.buckets;
        self.tallies
            .into_iter()
            .map(|(index, kmers)| (buckets.label(index), kmers))
            .collect()
    }

    /// Writes the lines as [`write_histogram`] does; with `full`, the empty buckets too
    /// (`jellyfish histo -f`). Returns the lines written.
    ///
    /// # Errors
    /// `out`'s.
    pub fn write(&self, full: bool, out: &mut impl Write) -> io::Result<u64> {
        let mut out = io::BufWriter::new(out);
        let mut lines = 0;
        if full {
            for index in 0..=self.buckets.last {
                let kmers = self.tallies.get(&index).copied().unwrap_or(0);
                writeln!(out, "{} {kmers}", self.buckets.label(index))?;
                lines += 1;
            }
        } else {
            for (&index, kmers) in &self.tallies {
                writeln!(out, "{} {kmers}", self.buckets.label(index))?;
                lines += 1;
            }
        }
        out.flush()?;
        Ok(lines)
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

/// `jellyfish stats`: of the k-mers a filter keeps, those counted once, all of them, the sum
/// of their counts and the largest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// K-mers counted exactly once.
    pub unique: u64,
    /// K-mers.
    pub distinct: u64,
    /// The sum of their counts.
    pub total: u64,
    /// The largest count (0 if none).
    pub max_count: u64,
}

impl Stats {
    /// The statistics of the counts `filter` keeps.
    pub fn of(counts: impl Iterator<Item = u64>, filter: &Filter) -> Stats {
        let mut stats = Stats::default();
        for count in counts.filter(|&count| filter.keeps(count)) {
            stats.unique += u64::from(count == 1);
            stats.distinct += 1;
            stats.total = stats.total.wrapping_add(count);
            stats.max_count = stats.max_count.max(count);
        }
        stats
    }

    /// Writes them as jellyfish does.
    ///
    /// # Errors
    /// `out`'s.
    pub fn write(&self, out: &mut impl Write) -> io::Result<()> {
        write!(
            out,
            "Unique:    {}\nDistinct:  {}\nTotal:     {}\nMax_count: {}\n",
            self.unique, self.distinct, self.total, self.max_count
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmer::encode;

    #[test]
    fn the_dump_decodes_every_length_and_filters_counts() {
        for k in [32, 64] {
            let long = encode(&vec![b'T'; k]).unwrap();
            let mut out = Vec::new();
            write_dump(&mut [(long, u64::MAX)], k, &Filter::default(), &mut out).unwrap();
            assert_eq!(out, format!("{} {}\n", "T".repeat(k), u64::MAX).as_bytes());
        }
        let mut kmers = [(3u64, 4), (2, 3), (1, 2), (0, 1)];
        let mut out = Vec::new();
        let filter = Filter { lower: 2, upper: 3 };
        assert_eq!(write_dump(&mut kmers, 1, &filter, &mut out).unwrap(), 2);
        assert_eq!(out, b"C 2\nG 3\n");
    }

    #[test]
    fn fasta_and_tabs_as_jellyfish_dumps_them() {
        let kmers = [(0, 12), (u64::MAX, 1)];
        let mut out = Vec::new();
        let format = DumpFormat::Fasta;
        write_kmers(kmers.into_iter(), 32, &Filter::default(), format, &mut out).unwrap();
        let ts = "T".repeat(32);
        assert_eq!(
            out,
            format!(">12\n{}\n>1\n{ts}\n", "A".repeat(32)).as_bytes()
        );
        let mut out = Vec::new();
        let filter = Filter {
            lower: 2,
            upper: 99,
        };
        let format = DumpFormat::Columns(b'\t');
        assert_eq!(
            write_kmers(kmers.into_iter(), 2, &filter, format, &mut out).unwrap(),
            1
        );
        assert_eq!(out, b"AA\t12\n");
    }

    /// Counts 1 (2 k-mers), 2 (9), 3 (1) and 4 (2), histogrammed by jellyfish 2.3.0 with
    /// `-f` and each of these options (`jellyfish histo -f -l 3 -i 2 -h 6 ...`).
    #[test]
    fn buckets_are_jellyfishs() {
        let mut counts = vec![1, 1, 3, 4, 4];
        counts.extend([2; 9]);
        let all = Filter::default();
        let histo = |low, high, inc| {
            let mut histogram = Histogram::new(&all, Buckets::new(low, high, inc).unwrap());
            counts.iter().for_each(|&c| histogram.add(c));
            let mut out = Vec::new();
            histogram.write(true, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(histo(1, 4, 2), "0 2\n2 10\n4 2\n6 0\n");
        assert_eq!(histo(3, 6, 2), "1 11\n3 3\n5 0\n7 0\n");
        assert_eq!(histo(2, 3, 3), "0 11\n3 3\n6 0\n");
        assert_eq!(histo(5, 5, 1), "4 14\n5 0\n6 0\n");
        assert!(Buckets::new(4, 3, 1).is_err());
        assert!(Buckets::new(1, 3, 0).is_err());
        let widest = Buckets::new(1, u64::MAX, 1).unwrap();
        assert_eq!(widest.label(widest.index(u64::MAX)), u64::MAX);
        let stats = Stats::of(counts.iter().copied(), &all);
        let mut out = Vec::new();
        stats.write(&mut out).unwrap();
        // `jellyfish stats` of the same database.
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Unique:    2\nDistinct:  14\nTotal:     31\nMax_count: 4\n"
        );
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
