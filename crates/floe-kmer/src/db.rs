//! The database: a count's k-mers and counts in a file that `dump`, `histo`, `query`, `merge`,
//! `stats` and `info` read later, without counting again (jellyfish's `.jf`, kmc's
//! `.kmc_pre`/`.kmc_suf`).
//!
//! # Format (version 1; integers little-endian)
//!
//! ```text
//! offset  size  field
//!      0     8  magic "FLOEKMDB"
//!      8     4  format version (1)
//!     12     4  header length H: where the records start (a multiple of 8)
//!     16     1  k (1..=64)
//!     17     1  canonical (0 or 1)
//!     18     1  key bytes: ceil(2k / 8)
//!     19     1  count bytes: 1..=8, enough for the largest count
//!     20     4  CRC-32 of the header's H bytes with these 4 bytes zero
//!     24     8  records (distinct k-mers)
//!     32     8  total: the sum of the counts
//!     40     8  the largest count
//!     48     8  when it was made (seconds since 1970, UTC)
//!     56     8  zero
//!     64        three strings, each a 4-byte length and UTF-8 bytes: the command line, the
//!               directory it ran in, the software ("floe-kmer 0.1.0"); zeros up to H
//!      H        the records: key bytes of k-mer (2 bits a base, as `kmer` packs them), then
//!               count bytes of count; in increasing order of k-mer, each k-mer once
//!    end-16  4  CRC-32 of the records
//!    end-12  4  zero
//!    end-8   8  end magic "FKDB-END"
//! ```
//!
//! Records of a fixed width, sorted by k-mer: a k-mer's count is a binary search of the
//! memory-mapped file (no table is built to query), a dump is in k-mer order as it is read,
//! and a merge is a merge of sorted runs. The width is as small as the k and the largest
//! count allow: 6 + 1 bytes a k-mer at k = 21 when no count passes 255 (jellyfish's sorted
//! database stores about the same, kmc's a little less, sharing prefixes).
//!
//! # Refused, never served
//! [`Database::open`] reads and checks the whole file before anything is answered from it:
//! a regular file (a FIFO or a directory is refused without waiting for a writer), both
//! magics and the version, header fields that agree with each other (key bytes and k, the
//! file's length and the records), both checksums, and every record (k-mers below 4^k in
//! strictly increasing order, counts at least 1 that sum to the total and peak at the largest
//! count). A damaged, truncated, foreign or newer file is an error naming the file; a
//! database that opened is exactly what [`Writer`] wrote. The checks cost one pass over the
//! file (a few hundred MB/s at worst, far less than the count that made it).
//!
//! A writer produces the file beside its destination and renames it into place when complete
//! (`crate::destination`), so a reader never sees half a database. A file truncated or
//! rewritten in place *while* a reader has it mapped is outside this: the reader may then see
//! a bus error, as with any memory-mapped file (jellyfish's and kmc's readers alike).

use std::{
    fs::File,
    io::{self, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
};

use crate::{
    kmer::{canonical, mask, MAX_K},
    Error,
};

/// The first 8 bytes of every database.
pub const MAGIC: [u8; 8] = *b"FLOEKMDB";
/// The last 8 bytes of every database.
pub const END_MAGIC: [u8; 8] = *b"FKDB-END";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;

/// The header's fixed part, before its strings.
const FIXED_HEADER: usize = 64;
/// The trailer: records' CRC, zero, end magic.
const TRAILER: usize = 16;
/// Where the header's CRC is.
const HEADER_CRC_AT: usize = 20;
/// A header's strings are at most this long each (a command line of 4096 paths fits): a
/// length beyond it is damage, not a string to allocate for.
const MAX_STRING: usize = 1 << 20;

/// Where a database came from: what `info` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// The command line that made it.
    pub command: String,
    /// The directory the command ran in.
    pub directory: String,
    /// When it was made, in seconds since 1970 (UTC).
    pub created: u64,
    /// The program and version that wrote it.
    pub software: String,
}

impl Provenance {
    /// This process's command line, directory and clock.
    pub fn of_this_process() -> Provenance {
        let command = std::env::args_os()
            .map(|arg| shell_word(&arg.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ");
        Provenance {
            command,
            directory: std::env::current_dir()
                .map(|dir| dir.display().to_string())
                .unwrap_or_default(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_secs()),
            software: concat!("floe-kmer ", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// `word` as a shell would read it back: bare if it is plain, otherwise in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What a database holds, from its header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// K-mer length.
    pub k: usize,
    /// Whether each k-mer was counted with its reverse complement, under the smaller.
    pub canonical: bool,
    /// Bytes a record's k-mer takes.
    pub key_bytes: usize,
    /// Bytes a record's count takes.
    pub count_bytes: usize,
    /// Distinct k-mers.
    pub records: u64,
    /// The sum of the counts.
    pub total: u64,
    /// The largest count (0 when there are no records).
    pub max_count: u64,
    /// Where it came from.
    pub provenance: Provenance,
}

impl Header {
    /// Bytes a record takes.
    pub fn record_bytes(&self) -> usize {
        self.key_bytes + self.count_bytes
    }
}

/// The bytes a k-mer of length `k` takes in a record.
pub fn key_bytes(k: usize) -> usize {
    (2 * k).div_ceil(8)
}

/// The fewest bytes (at least 1) that hold `count`.
pub fn count_bytes(count: u64) -> usize {
    (64 - count.leading_zeros() as usize).div_ceil(8).max(1)
}

/// Writes a database: its k-mers in increasing order, then [`finish`](Writer::finish).
///
/// The header goes first as a placeholder and is rewritten once the records are known, so
/// records stream out without being held.
pub struct Writer<W: Write + Seek> {
    out: io::BufWriter<W>,
    k: usize,
    canonical: bool,
    key_bytes: usize,
    count_bytes: usize,
    provenance: Provenance,
    header_len: usize,
    crc: crc32fast::Hasher,
    last: Option<u128>,
    records: u64,
    total: u64,
    max_count: u64,
}

impl<W: Write + Seek> Writer<W> {
    /// A writer of k-mers of length `k` whose counts are at most `count_limit` (the record's
    /// count field is sized for it).
    ///
    /// # Errors
    /// `out`'s.
    ///
    /// # Panics
    /// If `k` is not in 1..=64.
    pub fn new(
        out: W,
        k: usize,
        canonical: bool,
        count_limit: u64,
        provenance: Provenance,
    ) -> io::Result<Writer<W>> {
        assert!((1..=MAX_K).contains(&k), "k = {k} is not in 1..={MAX_K}");
        let mut writer = Writer {
            out: io::BufWriter::with_capacity(1 << 16, out),
            k,
            canonical,
            key_bytes: key_bytes(k),
            count_bytes: count_bytes(count_limit),
            provenance,
            header_len: 0,
            crc: crc32fast::Hasher::new(),
            last: None,
            records: 0,
            total: 0,
            max_count: 0,
        };
        let header = writer.header_bytes();
        writer.header_len = header.len();
        writer.out.write_all(&header)?;
        Ok(writer)
    }

    /// Appends a k-mer and its count.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if the k-mer is not above the last one or not below
    /// 4^k, the count is 0 or larger than the limit, or the counts' sum passes 2^64 (nothing
    /// that would make a database [`Database::open`] refuses is written); otherwise `out`'s.
    pub fn push(&mut self, kmer: u128, count: u64) -> io::Result<()> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        if self.last.is_some_and(|last| kmer <= last) || kmer > mask::<u128>(self.k) {
            return Err(invalid(format!(
                "k-mer {kmer:#x} out of order or longer than k = {}",
                self.k
            )));
        }
        if count == 0 || count_bytes(count) > self.count_bytes {
            return Err(invalid(format!("count {count} does not fit its record")));
        }
        self.total = self
            .total
            .checked_add(count)
            .ok_or_else(|| invalid("the counts' sum passes 2^64".to_owned()))?;
        self.last = Some(kmer);
        self.records += 1;
        self.max_count = self.max_count.max(count);
        let mut record = [0u8; 24];
        record[..self.key_bytes].copy_from_slice(&kmer.to_le_bytes()[..self.key_bytes]);
        record[self.key_bytes..][..self.count_bytes]
            .copy_from_slice(&count.to_le_bytes()[..self.count_bytes]);
        let record = &record[..self.key_bytes + self.count_bytes];
        self.crc.update(record);
        self.out.write_all(record)
    }

    /// Writes the trailer and the final header; returns the header written. The caller syncs
    /// and renames the file.
    ///
    /// # Errors
    /// `out`'s.
    pub fn finish(mut self) -> io::Result<Header> {
        let mut trailer = [0u8; TRAILER];
        trailer[..4].copy_from_slice(&self.crc.clone().finalize().to_le_bytes());
        trailer[8..].copy_from_slice(&END_MAGIC);
        self.out.write_all(&trailer)?;
        let header = self.header_bytes();
        debug_assert_eq!(header.len(), self.header_len);
        self.out.seek(SeekFrom::Start(0))?;
        self.out.write_all(&header)?;
        self.out.seek(SeekFrom::End(0))?;
        self.out.flush()?;
        Ok(Header {
            k: self.k,
            canonical: self.canonical,
            key_bytes: self.key_bytes,
            count_bytes: self.count_bytes,
            records: self.records,
            total: self.total,
            max_count: self.max_count,
            provenance: self.provenance,
        })
    }

    /// The header as it stands (records, total and largest count so far).
    fn header_bytes(&self) -> Vec<u8> {
        let mut header = Vec::with_capacity(256);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&[0; 4]); // the length, below
        header.extend_from_slice(&[
            self.k as u8,
            u8::from(self.canonical),
            self.key_bytes as u8,
            self.count_bytes as u8,
        ]);
        header.extend_from_slice(&[0; 4]); // the CRC, below
        for field in [
            self.records,
            self.total,
            self.max_count,
            self.provenance.created,
            0,
        ] {
            header.extend_from_slice(&field.to_le_bytes());
        }
        debug_assert_eq!(header.len(), FIXED_HEADER);
        for text in [
            &self.provenance.command,
            &self.provenance.directory,
            &self.provenance.software,
        ] {
            let text = &text.as_bytes()[..text.len().min(MAX_STRING)];
            header.extend_from_slice(&(text.len() as u32).to_le_bytes());
            header.extend_from_slice(text);
        }
        header.resize(header.len().next_multiple_of(8), 0);
        let len = header.len() as u32;
        header[12..16].copy_from_slice(&len.to_le_bytes());
        let crc = crc32fast::hash(&header);
        header[HEADER_CRC_AT..][..4].copy_from_slice(&crc.to_le_bytes());
        header
    }
}

/// An open, checked database (see the module's documentation).
pub struct Database {
    path: PathBuf,
    header: Header,
    map: memmap2::Mmap,
    /// Where the records start in `map`.
    records_at: usize,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Opens and checks the database at `path` (see the module's documentation).
    ///
    /// # Errors
    /// [`Error::Usage`] if the file does not exist, cannot be read or is not a regular file
    /// (the command line's mistake); [`Error::Input`] if it is not a floe-kmer database, is of
    /// a newer version, or is damaged or truncated. Each message names the file.
    pub fn open(path: &Path) -> Result<Database, Error> {
        let name = path.display();
        let usage = |why: String| Error::Usage(format!("cannot read '{name}': {why}"));
        let file = open_regular(path).map_err(|e| usage(e.to_string()))?;
        let metadata = file.metadata().map_err(|e| usage(e.to_string()))?;
        if !metadata.is_file() {
            return Err(usage(if metadata.is_dir() {
                "it is a directory".to_owned()
            } else {
                "not a regular file (a FIFO, a socket or a device): a database is read whole \
                 and checked before use"
                    .to_owned()
            }));
        }
        let refuse = |why: &str| Error::Input(format!("'{name}' is refused: {why}"));
        if metadata.len() < (FIXED_HEADER + TRAILER) as u64 {
            return Err(refuse(&format!(
                "{} bytes is shorter than any database (empty or truncated?)",
                metadata.len()
            )));
        }
        // SAFETY: the mapping is read-only and private to this process; the file is checked
        // in full below before anything is answered from it. A writer changing the file in
        // place afterwards is outside what this reader guards against (see the module's
        // documentation): floe-kmer itself only ever renames complete files into place.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::Input(format!("'{name}': cannot map it: {e}")))?;
        let (header, records_at) = parse_header(&map).map_err(|why| refuse(&why))?;
        let database = Database {
            path: path.to_owned(),
            header,
            map,
            records_at,
        };
        database.check_records().map_err(|why| refuse(&why))?;
        Ok(database)
    }

    /// The file it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What it holds.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Distinct k-mers.
    pub fn len(&self) -> usize {
        self.header.records as usize
    }

    /// Whether it holds no k-mer.
    pub fn is_empty(&self) -> bool {
        self.header.records == 0
    }

    fn records(&self) -> &[u8] {
        let bytes = self.len() * self.header.record_bytes();
        &self.map[self.records_at..][..bytes]
    }

    /// The `index`th k-mer and its count, in increasing order of k-mer.
    ///
    /// # Panics
    /// If `index` is not below [`len`](Self::len).
    #[inline]
    pub fn get(&self, index: usize) -> (u128, u64) {
        let width = self.header.record_bytes();
        decode_record(
            &self.records()[index * width..][..width],
            self.header.key_bytes,
        )
    }

    /// Every k-mer with its count, in increasing order of k-mer.
    pub fn iter(&self) -> impl Iterator<Item = (u128, u64)> + '_ {
        let key_bytes = self.header.key_bytes;
        self.records()
            .chunks_exact(self.header.record_bytes())
            .map(move |record| decode_record(record, key_bytes))
    }

    /// How often `kmer` was counted: in a canonical database, it and its reverse complement
    /// together. 0 for a k-mer never seen. Returns the k-mer as counted (the canonical form
    /// in a canonical database) with the count.
    pub fn count_of(&self, kmer: u128) -> (u128, u64) {
        let kmer = if self.header.canonical {
            canonical(kmer, self.header.k)
        } else {
            kmer
        };
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            let (found, count) = self.get(middle);
            match found.cmp(&kmer) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return (kmer, count),
            }
        }
        (kmer, 0)
    }

    /// The records' check: the CRC, then every record's k-mer, order and count.
    fn check_records(&self) -> Result<(), String> {
        let records = self.records();
        let trailer = &self.map[self.map.len() - TRAILER..];
        let stored = u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"));
        if crc32fast::hash(records) != stored {
            return Err("the records' checksum does not match (the file is damaged)".to_owned());
        }
        let limit = mask::<u128>(self.header.k);
        let (mut last, mut total, mut max_count) = (None, 0u64, 0);
        for (index, (kmer, count)) in self.iter().enumerate() {
            let why = if kmer > limit {
                "a k-mer longer than k"
            } else if last.is_some_and(|last| kmer <= last) {
                "k-mers out of order"
            } else if count == 0 {
                "a count of 0"
            } else {
                ""
            };
            if !why.is_empty() {
                return Err(format!("record {index} has {why}"));
            }
            total = total
                .checked_add(count)
                .ok_or("the counts' sum passes 2^64")?;
            max_count = max_count.max(count);
            last = Some(kmer);
        }
        if (total, max_count) != (self.header.total, self.header.max_count) {
            return Err(format!(
                "the records' total and largest count ({total}, {max_count}) are not the \
                 header's ({}, {})",
                self.header.total, self.header.max_count
            ));
        }
        Ok(())
    }
}

/// Opens `path` for reading without blocking on a FIFO that has no writer (the caller then
/// sees it is no regular file and refuses it).
fn open_regular(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

#[inline]
fn decode_record(record: &[u8], key_bytes: usize) -> (u128, u64) {
    let mut word = [0u8; 16];
    word[..key_bytes].copy_from_slice(&record[..key_bytes]);
    let kmer = u128::from_le_bytes(word);
    let mut word = [0u8; 8];
    word[..record.len() - key_bytes].copy_from_slice(&record[key_bytes..]);
    (kmer, u64::from_le_bytes(word))
}

/// Reads and checks everything but the records: magics, version, fields, header CRC, length.
/// Returns the header and where the records start.
fn parse_header(file: &[u8]) -> Result<(Header, usize), String> {
    if file[..8] != MAGIC {
        let what = if file.starts_with(b"{\"") || file.starts_with(b"JFLISTDN") {
            " (a jellyfish database? floe-kmer reads its own; `jellyfish dump` reads these)"
        } else if file.starts_with(b"KMCP") || file.starts_with(b"KMCS") {
            " (a kmc database? `kmc_tools` reads these)"
        } else {
            ""
        };
        return Err(format!("it is not a floe-kmer database{what}"));
    }
    let word32 = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().expect("4 bytes"));
    let word64 = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().expect("8 bytes"));
    let version = word32(8);
    if version != VERSION {
        return Err(format!(
            "format version {version}; this floe-kmer reads version {VERSION} (made by a newer \
             floe-kmer, or damaged)"
        ));
    }
    if file[file.len() - 8..] != END_MAGIC || word32(file.len() - 12) != 0 {
        return Err("its end is missing (truncated, or damaged)".to_owned());
    }
    let header_len = word32(12) as usize;
    if header_len < FIXED_HEADER + 12
        || !header_len.is_multiple_of(8)
        || header_len > file.len() - TRAILER
    {
        return Err(format!("a header length of {header_len} (damaged)"));
    }
    let mut header_bytes = file[..header_len].to_vec();
    header_bytes[HEADER_CRC_AT..][..4].fill(0);
    if crc32fast::hash(&header_bytes) != word32(HEADER_CRC_AT) {
        return Err("the header's checksum does not match (the file is damaged)".to_owned());
    }
    let (k, canonical, key_len, count_len) = (
        usize::from(file[16]),
        file[17],
        usize::from(file[18]),
        usize::from(file[19]),
    );
    if !(1..=MAX_K).contains(&k)
        || canonical > 1
        || key_len != key_bytes(k)
        || !(1..=8).contains(&count_len)
    {
        return Err(format!(
            "fields that cannot go together (k {k}, canonical {canonical}, key bytes \
             {key_len}, count bytes {count_len})"
        ));
    }
    let mut at = FIXED_HEADER;
    let mut strings = Vec::with_capacity(3);
    for _ in 0..3 {
        let len = if at + 4 <= header_len {
            word32(at) as usize
        } else {
            usize::MAX
        };
        if len > MAX_STRING || at + 4 + len > header_len {
            return Err("its header's strings run past the header (damaged)".to_owned());
        }
        strings.push(String::from_utf8_lossy(&file[at + 4..at + 4 + len]).into_owned());
        at += 4 + len;
    }
    let records = word64(24);
    let record_bytes = (key_len + count_len) as u64;
    let expected = records
        .checked_mul(record_bytes)
        .and_then(|bytes| bytes.checked_add((header_len + TRAILER) as u64));
    if expected != Some(file.len() as u64) {
        return Err(format!(
            "{} bytes, but its header describes {records} records of {record_bytes} bytes \
             (truncated, or damaged)",
            file.len()
        ));
    }
    let [software, directory, command] =
        [strings.pop(), strings.pop(), strings.pop()].map(|s| s.expect("three strings"));
    let header = Header {
        k,
        canonical: canonical == 1,
        key_bytes: key_len,
        count_bytes: count_len,
        records,
        total: word64(32),
        max_count: word64(40),
        provenance: Provenance {
            command,
            directory,
            created: word64(48),
            software,
        },
    };
    Ok((header, header_len))
}

/// How [`merge`] combines the counts of a k-mer found in several databases (jellyfish merge's
/// modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Combine {
    /// Add them.
    #[default]
    Sum,
    /// The smallest, a k-mer missing from a database counting 0 (so only k-mers found in
    /// every database are kept).
    Min,
    /// The largest.
    Max,
}

/// Merges sorted databases of the same k and strand mode into `out`, combining each k-mer's
/// counts by `combine` and keeping those `keeps` accepts.
///
/// # Errors
/// [`Error::Usage`] if the databases differ in k or in canonical mode, or none is given;
/// [`Error::Output`] if writing fails or a sum passes 2^64.
pub fn merge<W: Write + Seek>(
    databases: &[Database],
    combine: Combine,
    keeps: impl Fn(u64) -> bool,
    out: W,
    provenance: Provenance,
) -> Result<Header, Error> {
    let Some(first) = databases.first() else {
        return Err(Error::Usage("no database to merge".to_owned()));
    };
    let (k, canonical) = (first.header.k, first.header.canonical);
    if let Some(other) = databases
        .iter()
        .find(|db| (db.header.k, db.header.canonical) != (k, canonical))
    {
        let mode = |c: bool| if c { "canonical" } else { "both strands apart" };
        return Err(Error::Usage(format!(
            "'{}' (k = {}, {}) and '{}' (k = {}, {}) were counted differently: they cannot be \
             merged",
            first.path.display(),
            k,
            mode(canonical),
            other.path.display(),
            other.header.k,
            mode(other.header.canonical)
        )));
    }
    let limit = match combine {
        Combine::Sum => databases
            .iter()
            .fold(0u64, |sum, db| sum.saturating_add(db.header.max_count)),
        Combine::Min | Combine::Max => databases
            .iter()
            .map(|db| db.header.max_count)
            .max()
            .unwrap_or(0),
    };
    let failed = |e: io::Error| Error::Output(format!("writing the merged database failed: {e}"));
    let mut writer = Writer::new(out, k, canonical, limit, provenance).map_err(failed)?;
    let mut cursors: Vec<_> = databases.iter().map(|db| db.iter().peekable()).collect();
    while let Some(kmer) = cursors
        .iter_mut()
        .filter_map(|cursor| cursor.peek().map(|&(kmer, _)| kmer))
        .min()
    {
        let mut combined = None::<u64>;
        let mut found = 0;
        for cursor in &mut cursors {
            let Some((_, count)) = cursor.next_if(|&(other, _)| other == kmer) else {
                continue;
            };
            found += 1;
            combined = Some(match (combine, combined) {
                (_, None) => count,
                (Combine::Sum, Some(sum)) => sum.checked_add(count).ok_or_else(|| {
                    Error::Output(format!(
                        "the counts of one k-mer add up past 2^64 ({kmer:#x})"
                    ))
                })?,
                (Combine::Min, Some(min)) => min.min(count),
                (Combine::Max, Some(max)) => max.max(count),
            });
        }
        let count = combined.expect("the smallest k-mer is in some database");
        let count = if combine == Combine::Min && found < cursors.len() {
            0
        } else {
            count
        };
        if count > 0 && keeps(count) {
            writer.push(kmer, count).map_err(failed)?;
        }
    }
    writer.finish().map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance() -> Provenance {
        Provenance {
            command: "floe-kmer count -m 3 'a b.fa'".to_owned(),
            directory: "/data".to_owned(),
            created: 1_700_000_000,
            software: "floe-kmer test".to_owned(),
        }
    }

    fn write(path: &Path, k: usize, canonical: bool, kmers: &[(u128, u64)]) -> Header {
        let limit = kmers.iter().map(|&(_, c)| c).max().unwrap_or(0);
        let file = File::create(path).unwrap();
        let mut writer = Writer::new(file, k, canonical, limit, provenance()).unwrap();
        for &(kmer, count) in kmers {
            writer.push(kmer, count).unwrap();
        }
        writer.finish().unwrap()
    }

    #[test]
    fn widths_follow_k_and_the_largest_count() {
        assert_eq!(
            [1, 4, 5, 21, 31, 32, 33, 41, 64].map(key_bytes),
            [1, 1, 2, 6, 8, 8, 9, 11, 16]
        );
        assert_eq!(
            [0, 1, 255, 256, 65535, 65536, u64::MAX].map(count_bytes),
            [1, 1, 1, 2, 2, 3, 8]
        );
    }

    #[test]
    fn what_is_written_is_read_back_and_found() {
        let dir = tempfile::tempdir().unwrap();
        for (k, kmers) in [
            (3, vec![(0, 1), (5, 300), (63, 2)]),
            (
                32,
                vec![
                    (1, 1),
                    (u64::MAX as u128 - 1, u64::MAX - 10),
                    (u64::MAX.into(), 9),
                ],
            ),
            (
                64,
                vec![(7, 3), (1 << 100, 1), (u128::MAX - 1, 2), (u128::MAX, 4)],
            ),
            (41, vec![(1 << 81, 5)]),
            (21, vec![]),
        ] {
            let path = dir.path().join(format!("k{k}.fkdb"));
            let written = write(&path, k, false, &kmers);
            let db = Database::open(&path).unwrap();
            assert_eq!(db.header(), &written);
            assert_eq!(db.header().provenance, provenance());
            assert_eq!(db.iter().collect::<Vec<_>>(), kmers);
            for &(kmer, count) in &kmers {
                assert_eq!(db.count_of(kmer), (kmer, count));
            }
            let absent = (0..)
                .find(|n| !kmers.iter().any(|&(k, _)| k == *n))
                .unwrap();
            assert_eq!(db.count_of(absent), (absent, 0));
        }
    }

    #[test]
    fn a_canonical_database_answers_for_both_strands() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.fkdb");
        let aac = crate::kmer::encode(b"AAC").unwrap();
        let gtt = crate::kmer::encode(b"GTT").unwrap();
        write(&path, 3, true, &[(aac, 7)]);
        let db = Database::open(&path).unwrap();
        assert_eq!(db.count_of(gtt), (aac, 7));
        assert_eq!(db.count_of(aac), (aac, 7));
    }

    #[test]
    fn the_writer_refuses_what_the_reader_would() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("x")).unwrap();
        let mut writer = Writer::new(file, 2, false, 255, provenance()).unwrap();
        writer.push(3, 1).unwrap();
        assert!(writer.push(3, 1).is_err(), "a repeat");
        assert!(writer.push(2, 1).is_err(), "out of order");
        assert!(writer.push(16, 1).is_err(), "longer than k");
        assert!(writer.push(4, 0).is_err(), "a count of 0");
        assert!(writer.push(4, 256).is_err(), "a count past the limit");
    }

    /// Every byte of a small database flipped, and every truncation: all refused.
    #[test]
    fn every_damaged_byte_and_every_truncation_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("good.fkdb");
        // Short k-mers, and long ones (11-byte keys) whose damage may fall in a key's high
        // bytes.
        let long = (1u128 << 81) | 5;
        for (k, kmers) in [
            (5, vec![(1, 2), (40, 1), (1000, 70000)]),
            (41, vec![(3, 1), (1 << 70, 9), (long, 2)]),
        ] {
            write(&path, k, true, &kmers);
            let good = std::fs::read(&path).unwrap();
            assert!(Database::open(&path).is_ok());
            let bad = dir.path().join("bad.fkdb");
            for at in 0..good.len() {
                let mut damaged = good.clone();
                damaged[at] ^= 0x10;
                std::fs::write(&bad, &damaged).unwrap();
                let error = Database::open(&bad).expect_err(&format!("k = {k}: byte {at} flipped"));
                assert!(
                    matches!(&error, Error::Input(m) if m.contains("bad.fkdb")),
                    "{error}"
                );
            }
            for len in 0..good.len() {
                std::fs::write(&bad, &good[..len]).unwrap();
                assert!(Database::open(&bad).is_err(), "k = {k}: truncated to {len}");
            }
            let mut longer = good.clone();
            longer.push(0);
            std::fs::write(&bad, &longer).unwrap();
            assert!(Database::open(&bad).is_err(), "k = {k}: a byte appended");
        }
    }

    #[test]
    fn foreign_missing_and_special_files_are_refused_with_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("counts.txt");
        std::fs::write(&text, "ACGTA 3\n".repeat(20)).unwrap();
        let error = Database::open(&text).unwrap_err();
        assert!(
            matches!(&error, Error::Input(m) if m.contains("counts.txt") && m.contains("not a floe-kmer database")),
            "{error}"
        );
        let missing = Database::open(&dir.path().join("missing.fkdb")).unwrap_err();
        assert!(matches!(&missing, Error::Usage(m) if m.contains("missing.fkdb")));
        let directory = Database::open(dir.path()).unwrap_err();
        assert!(matches!(&directory, Error::Usage(m) if m.contains("directory")));
        #[cfg(unix)]
        {
            let fifo = dir.path().join("fifo");
            let status = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(status.success());
            let error = Database::open(&fifo).unwrap_err();
            assert!(
                matches!(&error, Error::Usage(m) if m.contains("not a regular file")),
                "{error}"
            );
        }
    }

    #[test]
    fn merging_sums_mins_and_maxes_sorted_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        write(&a, 4, false, &[(1, 1), (3, 200), (9, 5)]);
        write(&b, 4, false, &[(0, 2), (3, 100), (9, 1), (255, 4)]);
        let databases = [Database::open(&a).unwrap(), Database::open(&b).unwrap()];
        let out = dir.path().join("merged");
        for (combine, expected) in [
            (
                Combine::Sum,
                vec![(0, 2), (1, 1), (3, 300), (9, 6), (255, 4)],
            ),
            (Combine::Min, vec![(3, 100), (9, 1)]),
            (
                Combine::Max,
                vec![(0, 2), (1, 1), (3, 200), (9, 5), (255, 4)],
            ),
        ] {
            let file = File::create(&out).unwrap();
            merge(&databases, combine, |_| true, file, provenance()).unwrap();
            let merged = Database::open(&out).unwrap();
            assert_eq!(merged.iter().collect::<Vec<_>>(), expected, "{combine:?}");
        }
        let file = File::create(&out).unwrap();
        merge(&databases, Combine::Sum, |c| c >= 4, file, provenance()).unwrap();
        let merged = Database::open(&out).unwrap();
        assert_eq!(
            merged.iter().collect::<Vec<_>>(),
            [(3, 300), (9, 6), (255, 4)]
        );
        let c = dir.path().join("c");
        write(&c, 4, true, &[(1, 1)]);
        let mixed = [Database::open(&a).unwrap(), Database::open(&c).unwrap()];
        let file = File::create(&out).unwrap();
        let error = merge(&mixed, Combine::Sum, |_| true, file, provenance()).unwrap_err();
        assert!(matches!(&error, Error::Usage(m) if m.contains("cannot be merged")));
    }

    #[test]
    fn shell_words_read_back() {
        assert_eq!(shell_word("-m"), "-m");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
