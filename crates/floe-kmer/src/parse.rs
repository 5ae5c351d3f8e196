//! Reading FASTA and FASTQ, plain or gzip-compressed, into chunks of 2-bit codes.
//!
//! The workers of a count share one [`Input`] behind a mutex: whoever holds it cuts the next
//! chunk (about [`DEFAULT_CHUNK_BASES`] codes) into its own buffer, lets go, and extracts and
//! counts the chunk's k-mers while the next worker parses. A chunk holds whole records,
//! separated by a [`BREAK`], except where a record is longer than what is left of the chunk
//! (a genome in one record, a long read): then the record is cut, and the next chunk starts
//! with the last k - 1 codes of this one. Every window of k codes then lies whole in exactly
//! one chunk: a window ending in the overlap lies in the first chunk, and the second cannot
//! complete one there, since it needs k codes and the overlap has k - 1. So no k-mer is lost
//! or counted twice at a cut.
//!
//! Formats. The first byte of each record says its format, so files (and even records) of
//! both may be mixed:
//! * FASTA: a `>` header line, then sequence lines up to the next header (blank lines are
//!   skipped; the lines of a sequence are joined, so k-mers span line ends).
//! * FASTQ: four lines: `@` header, the sequence on one line, a line starting with `+`, and a
//!   quality line as long as the sequence (it may start with `@`). A missing `+`, a quality
//!   line of another length or with bytes outside `!` to `~`, or a record cut short by the end
//!   of the file is an error naming the line and the record.
//!
//! Lines end in LF or CRLF. In a sequence, `ACGT` count in either case, every other printable
//! byte (N, IUPAC codes, `-`, `.`, spaces) ends the current run of bases, and control bytes or
//! bytes >= 0x7f are an error: such a file is binary or damaged, and counting around them would
//! give counts that look right and are not. A carriage return that does not end a line is an
//! error for the same reason (classic Mac OS line endings would make a file one long header).
//! Empty records have no k-mers and are fine; a file whose first byte that is not a line end
//! is neither `>` nor `@` is not FASTA or FASTQ.
//!
//! Compression is told by the first bytes, not the file name: gzip (`1f 8b`, any number of
//! members, as `bgzip` and `cat a.gz b.gz` make) is decompressed; xz, bzip2 and zstd are
//! named in an error. Truncated or corrupt gzip data is an error.

use std::{
    fs::File,
    io::{self, Read, Seek},
    ops::Range,
    path::PathBuf,
    sync::Arc,
};

use flate2::read::MultiGzDecoder;
use indicatif::ProgressBar;

use crate::{
    kmer::{BREAK, CODES, INVALID, MAX_K},
    Error,
};

/// The codes a chunk holds before it is handed to a worker: large enough that taking the lock
/// is rare (a million k-mers to count per chunk), small enough that every worker gets some of
/// a small file.
pub const DEFAULT_CHUNK_BASES: usize = 1 << 20;

/// Bytes read from a file (or decompressed) at a time.
pub const DEFAULT_READ_BUFFER: usize = 256 << 10;

/// The first bytes of a header kept for error messages.
const HEADER_KEPT: usize = 80;

/// Where sequences come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// Standard input (`-` on the command line).
    Stdin,
    /// A file.
    Path(PathBuf),
    /// Bytes in memory, with a name for messages (tests, and counting without a file).
    Bytes {
        /// What messages call it.
        name: String,
        /// The file's contents, plain or gzip.
        data: Arc<[u8]>,
    },
}

impl Source {
    /// The source a command-line argument names: `-` is stdin.
    pub fn from_arg(arg: PathBuf) -> Source {
        if arg.as_os_str() == "-" {
            Source::Stdin
        } else {
            Source::Path(arg)
        }
    }

    /// What messages call it.
    pub fn name(&self) -> String {
        match self {
            Source::Stdin => "<stdin>".to_owned(),
            Source::Path(path) => path.display().to_string(),
            Source::Bytes { name, .. } => name.clone(),
        }
    }

    /// Its size in bytes, where known before reading (files and bytes, not stdin or pipes).
    fn len(&self) -> Option<u64> {
        match self {
            Source::Stdin => None,
            Source::Path(path) => std::fs::metadata(path)
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len()),
            Source::Bytes { data, .. } => Some(data.len() as u64),
        }
    }

    /// About how many bases it holds at most, where that is known before reading: its size,
    /// for a file or bytes that are not gzip; for gzip, the size its trailer gives (below).
    /// Only a size hint is capped by it (a table sized short grows), so a guess that may be
    /// low is allowed where one that may be far too high is not.
    fn bases_bound(&self) -> Option<u64> {
        let (mut start, mut end) = ([0u8; 2], [0u8; 4]);
        let got = match self {
            Source::Stdin => return None,
            // Only a regular file is looked into: opening a FIFO waits for its writer, and
            // reading a pipe takes the bytes its real reading needs.
            Source::Path(_) if self.len().is_none() => return None,
            Source::Path(path) => {
                let mut file = File::open(path).ok()?;
                let got = read_up_to(&mut file, &mut start).ok()?;
                if file.seek(io::SeekFrom::End(-4)).is_ok() {
                    read_up_to(&mut file, &mut end).ok()?;
                }
                got
            }
            Source::Bytes { data, .. } => {
                let got = data.len().min(2);
                start[..got].copy_from_slice(&data[..got]);
                if let Some(tail) = data.len().checked_sub(4) {
                    end.copy_from_slice(&data[tail..]);
                }
                got
            }
        };
        let len = self.len()?;
        if start[..got] != [0x1f, 0x8b] {
            return Some(len);
        }
        // gzip's last 4 bytes are the size of its last member's data, modulo 2^32 (RFC 1952):
        // the whole file's for a file of one member under 4 GiB. A size below the compressed
        // one has wrapped (or is one member of several, as bgzip writes): no bound.
        let inflated = u64::from(u32::from_le_bytes(end));
        (inflated >= len).then_some(inflated)
    }

    /// Checks that it can be read, before any work is done: a missing or unreadable file, a
    /// directory, is the command line's mistake.
    fn check(&self) -> Result<(), Error> {
        let Source::Path(path) = self else {
            return Ok(());
        };
        let usage = |why: String| Error::Usage(format!("cannot read '{}': {why}", path.display()));
        let metadata = std::fs::metadata(path).map_err(|e| usage(e.to_string()))?;
        if metadata.is_dir() {
            return Err(usage("it is a directory".to_owned()));
        }
        if metadata.is_file() {
            File::open(path).map_err(|e| usage(e.to_string()))?;
            return Ok(());
        }
        // A FIFO, a pipe or a device is not opened to check: opening a FIFO waits for its
        // writer, and closing it again leaves the writer without a reader. Its permission
        // says as much.
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let name = std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|_| usage("the name holds a NUL byte".to_owned()))?;
            // SAFETY: a NUL-terminated path that lives across the call; access reads it only.
            if unsafe { libc::access(name.as_ptr(), libc::R_OK) } != 0 {
                return Err(usage(io::Error::last_os_error().to_string()));
            }
        }
        Ok(())
    }

    /// Opens it, decompressing gzip; `progress` advances by the bytes read before
    /// decompression. Returns the bytes and whether they are decompressed.
    fn open(&self, progress: &ProgressBar) -> Result<(Box<dyn Read + Send>, bool), Error> {
        let name = self.name();
        let raw: Box<dyn Read + Send> = match self {
            Source::Stdin => Box::new(io::stdin()),
            Source::Path(path) => Box::new(
                File::open(path).map_err(|e| Error::Input(format!("{name}: cannot open: {e}")))?,
            ),
            Source::Bytes { data, .. } => Box::new(io::Cursor::new(Arc::clone(data))),
        };
        let mut raw = progress.wrap_read(raw);
        let mut magic = [0u8; 6];
        let got = read_up_to(&mut raw, &mut magic)
            .map_err(|e| Error::Input(format!("{name}: read failed: {e}")))?;
        let magic = &magic[..got];
        // The bytes looked at go back in front of the rest.
        let whole = io::Cursor::new(magic.to_vec()).chain(raw);
        if magic.starts_with(&[0x1f, 0x8b]) {
            let gzip = Gzip {
                name,
                inner: MultiGzDecoder::new(whole),
            };
            return Ok((Box::new(gzip), true));
        }
        let other = [
            (&[0xfd, b'7', b'z', b'X', b'Z', 0][..], "xz"),
            (b"BZh", "bzip2"),
            (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
        ];
        if let Some((_, kind)) = other.iter().find(|(m, _)| magic.starts_with(m)) {
            return Err(Error::Input(format!(
                "{name}: the file is {kind}-compressed; floe-kmer reads plain or gzip-compressed \
                 FASTA/FASTQ (decompress it first, e.g. with `{kind} -dc`)"
            )));
        }
        Ok((Box::new(whole), false))
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A gzip stream whose errors say that the data, not the disk, is at fault.
struct Gzip<R: Read> {
    name: String,
    inner: MultiGzDecoder<R>,
}

impl<R: Read> Read for Gzip<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            let what = match e.kind() {
                io::ErrorKind::UnexpectedEof => "the gzip data is truncated",
                io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => {
                    "the gzip data is corrupt"
                }
                _ => "decompressing failed",
            };
            io::Error::new(e.kind(), format!("{}: {what} ({e})", self.name))
        })
    }
}

/// The inputs of a count, read one after the other and cut into chunks of codes.
pub struct Input {
    sources: Vec<Source>,
    next_source: usize,
    current: Option<Parser>,
    progress: ProgressBar,
    /// The k-mer length the chunks overlap for (k - 1 codes where a record is cut).
    k: usize,
    chunk_bases: usize,
    read_buffer: usize,
    /// An error was returned: the input is not read any further.
    failed: bool,
}

impl Input {
    /// The inputs `sources`. Every file is checked now: one that does not exist or cannot be
    /// read is an [`Error::Usage`]; so is stdin named twice. `progress` advances by the bytes
    /// read (compressed bytes for gzip).
    pub fn new(sources: Vec<Source>, progress: ProgressBar) -> Result<Input, Error> {
        if sources
            .iter()
            .filter(|s| matches!(s, Source::Stdin))
            .count()
            > 1
        {
            return Err(Error::Usage(
                "stdin ('-') is named more than once".to_owned(),
            ));
        }
        for source in &sources {
            source.check()?;
        }
        Ok(Input {
            sources,
            next_source: 0,
            current: None,
            progress,
            k: 1,
            chunk_bases: DEFAULT_CHUNK_BASES,
            read_buffer: DEFAULT_READ_BUFFER,
            failed: false,
        })
    }

    /// The total size of the inputs in bytes (compressed for gzip), if every one is known
    /// before reading: the progress bar's length.
    pub fn total_bytes(sources: &[Source]) -> Option<u64> {
        sources.iter().map(Source::len).sum()
    }

    /// At most how many distinct k-mers the inputs can hold (no more than their bases), if
    /// every input's size is known and none is gzip: a size hint past it only costs memory.
    pub fn distinct_bound(sources: &[Source]) -> Option<u64> {
        sources.iter().map(Source::bases_bound).sum()
    }

    /// Sets the k-mer length (1 to 64; default 1): a record cut between chunks is cut with an
    /// overlap of k - 1 codes. A count sets it before the first chunk; set it only to read
    /// chunks without counting.
    ///
    /// # Panics
    /// If `k` is not in 1..=64.
    pub fn set_k(&mut self, k: usize) {
        assert!((1..=MAX_K).contains(&k), "k = {k} is not in 1..={MAX_K}");
        debug_assert!(self.current.is_none(), "set before reading");
        self.k = k;
    }

    /// Sets the codes a chunk takes before it is handed out (at least k; default
    /// [`DEFAULT_CHUNK_BASES`]). Tests make it tiny, so records are cut everywhere.
    pub fn chunk_bases(mut self, codes: usize) -> Self {
        self.chunk_bases = codes;
        self
    }

    /// Sets the bytes read at a time (at least 2; default [`DEFAULT_READ_BUFFER`]). Tests make
    /// it tiny, so lines and line ends straddle reads.
    pub fn read_buffer(mut self, bytes: usize) -> Self {
        self.read_buffer = bytes;
        self
    }

    /// Replaces `chunk` with the next chunk of codes. Returns `false` when the inputs are
    /// exhausted, or after an error was returned (the one error is the count's answer).
    ///
    /// # Errors
    /// [`Error::Input`] for malformed or unreadable data.
    pub fn next_chunk(&mut self, chunk: &mut Vec<u8>) -> Result<bool, Error> {
        chunk.clear();
        if self.failed {
            return Ok(false);
        }
        let result = self.fill(chunk);
        if result.is_err() {
            self.failed = true;
            self.current = None;
        }
        result
    }

    fn fill(&mut self, chunk: &mut Vec<u8>) -> Result<bool, Error> {
        loop {
            let parser = match &mut self.current {
                Some(parser) => parser,
                None => {
                    let Some(source) = self.sources.get(self.next_source) else {
                        return Ok(false);
                    };
                    self.next_source += 1;
                    let (reader, gzip) = source.open(&self.progress)?;
                    self.current.insert(Parser::new(
                        source.name(),
                        reader,
                        gzip,
                        self.k,
                        self.chunk_bases,
                        self.read_buffer,
                    ))
                }
            };
            if !parser.fill(chunk)? {
                self.current = None;
            }
            // A file without sequence gives no chunk; go on to the next file.
            if !chunk.is_empty() {
                return Ok(true);
            }
        }
    }
}

/// Where the parser stands in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between records: the next line is blank or a header.
    RecordStart,
    /// At the start of a line in a FASTA record: more sequence, or the next header.
    FastaLineStart,
    /// In a FASTA sequence line (possibly cut at a chunk's end).
    FastaSequence,
    /// In a FASTQ sequence line, after `bases` bases.
    FastqSequence { bases: u64 },
    /// At a FASTQ record's `+` line.
    FastqPlus { bases: u64 },
    /// At a FASTQ record's quality line.
    FastqQuality { bases: u64 },
}

/// One file's reader: a buffer over the (decompressed) bytes and the record framing.
struct Parser {
    name: String,
    reader: Box<dyn Read + Send>,
    /// The bytes are decompressed gzip (the messages say so).
    gzip: bool,
    // Invariant: pos <= end <= buf.len(); buf[pos..end] is read and not yet consumed.
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    /// Lines consumed (with their line end).
    lines: u64,
    /// The 1-based line of the last part `line_part` returned.
    part_line: u64,
    /// Records begun.
    records: u64,
    /// The start of the current record's header, for messages.
    header: Vec<u8>,
    /// The start of the last line skipped (`take_line_head`).
    head: Vec<u8>,
    state: State,
    /// The k - 1 codes the next chunk starts with when a record was cut; empty otherwise.
    carry: Vec<u8>,
    overlap: usize,
    /// The codes a chunk takes.
    target: usize,
}

impl Parser {
    fn new(
        name: String,
        reader: Box<dyn Read + Send>,
        gzip: bool,
        k: usize,
        chunk_bases: usize,
        read_buffer: usize,
    ) -> Parser {
        Parser {
            name,
            reader,
            gzip,
            // Two bytes at least: a full buffer keeps its last byte back, in case it is the
            // CR of a CRLF, and must still hand out one.
            buf: vec![0; read_buffer.max(2)],
            pos: 0,
            end: 0,
            eof: false,
            lines: 0,
            part_line: 0,
            records: 0,
            header: Vec::new(),
            head: Vec::new(),
            state: State::RecordStart,
            carry: Vec::with_capacity(k - 1),
            overlap: k - 1,
            // At least k, so a chunk that starts with a carry of k - 1 codes has room for
            // one more and the parser always moves on.
            target: chunk_bases.max(k),
        }
    }

    /// Fills `chunk` (cleared) with the next codes. Returns whether the file has more.
    fn fill(&mut self, chunk: &mut Vec<u8>) -> Result<bool, Error> {
        chunk.clear();
        chunk.append(&mut self.carry);
        loop {
            match self.state {
                State::RecordStart => {
                    if chunk.len() >= self.target {
                        return Ok(true);
                    }
                    match self.next_line_start()? {
                        None => return Ok(false),
                        Some(first @ (b'>' | b'@')) => {
                            self.records += 1;
                            self.take_line_head()?;
                            std::mem::swap(&mut self.header, &mut self.head);
                            if !chunk.is_empty() {
                                chunk.push(BREAK);
                            }
                            self.state = if first == b'>' {
                                State::FastaLineStart
                            } else {
                                State::FastqSequence { bases: 0 }
                            };
                        }
                        Some(other) => return Err(self.not_a_record(other)),
                    }
                }
                State::FastaLineStart => {
                    self.state = match self.next_line_start()? {
                        None | Some(b'>' | b'@') => State::RecordStart,
                        Some(_) => State::FastaSequence,
                    }
                }
                State::FastaSequence => match self.copy_sequence(chunk)? {
                    None => return Ok(true),
                    Some((_, true)) => self.state = State::FastaLineStart,
                    Some((_, false)) => {}
                },
                State::FastqSequence { bases } => match self.copy_sequence(chunk)? {
                    None => return Ok(true),
                    Some((n, ended)) => {
                        let bases = bases + n;
                        self.state = if ended {
                            State::FastqPlus { bases }
                        } else {
                            State::FastqSequence { bases }
                        };
                    }
                },
                State::FastqPlus { bases } => {
                    if !self.take_line_head()? {
                        return Err(self.truncated("its '+' line"));
                    }
                    if self.head.first() != Some(&b'+') {
                        let found = self.head.first().map_or("an empty line".to_owned(), |&b| {
                            format!("a line starting with {}", describe(b))
                        });
                        return Err(self.error(
                            self.part_line,
                            format!(
                                "expected the '+' line of a FASTQ record (one sequence line, \
                                 then '+'), found {found}{}",
                                self.record()
                            ),
                        ));
                    }
                    self.state = State::FastqQuality { bases };
                }
                State::FastqQuality { bases } => {
                    self.check_quality(bases)?;
                    self.state = State::RecordStart;
                }
            }
        }
    }

    /// Reads the quality line of a record of `bases` bases: as many bytes, each `!` to `~`.
    fn check_quality(&mut self, bases: u64) -> Result<(), Error> {
        let mut length = 0u64;
        loop {
            let Some((range, ended)) = self.line_part(usize::MAX)? else {
                // A record without bases may end the file right after its '+' line.
                if bases == 0 && length == 0 {
                    return Ok(());
                }
                return Err(self.truncated("its quality line"));
            };
            if let Some(&bad) = self.buf[range.clone()]
                .iter()
                .find(|b| !(b'!'..=b'~').contains(b))
            {
                return Err(self.error(
                    self.part_line,
                    format!(
                        "the quality line has {}, which is not a quality score{}",
                        describe(bad),
                        self.record()
                    ),
                ));
            }
            length += range.len() as u64;
            if ended {
                break;
            }
        }
        if length != bases {
            return Err(self.error(
                self.part_line,
                format!(
                    "the quality line has {length} characters for {bases} bases{}",
                    self.record()
                ),
            ));
        }
        Ok(())
    }

    /// Copies the codes of the current sequence line into `chunk`, as much as its room takes.
    /// Returns the bytes copied and whether the line ended, or `None` if the chunk was full:
    /// the record is cut there, and its last k - 1 codes are kept for the next chunk.
    fn copy_sequence(&mut self, chunk: &mut Vec<u8>) -> Result<Option<(u64, bool)>, Error> {
        let room = self.target.saturating_sub(chunk.len());
        if room == 0 {
            let keep = self.overlap.min(chunk.len());
            self.carry.extend_from_slice(&chunk[chunk.len() - keep..]);
            return Ok(None);
        }
        let Some((range, ended)) = self.line_part(room)? else {
            // Only a FASTQ record reaches here without a line (FASTA states peek first).
            return Err(self.truncated("its sequence line"));
        };
        let bytes = &self.buf[range];
        let start = chunk.len();
        chunk.extend(bytes.iter().map(|&b| CODES[usize::from(b)]));
        if let Some(i) = chunk[start..].iter().position(|&c| c == INVALID) {
            return Err(self.error(
                self.part_line,
                format!(
                    "{} in a sequence line is not text (is this a binary or damaged file?){}",
                    describe(bytes[i]),
                    self.record()
                ),
            ));
        }
        Ok(Some((bytes.len() as u64, ended)))
    }

    /// The next part of the current line: up to `limit` bytes of its content (without the
    /// LF or CRLF), as a range of `buf`, and whether the line ended with it (its line end is
    /// consumed). `None` at the end of the file. Never returns an empty part of a line that
    /// has more: after a part that did not end its line, at least one byte of it is left.
    fn line_part(&mut self, limit: usize) -> Result<Option<(Range<usize>, bool)>, Error> {
        loop {
            let avail = &self.buf[self.pos..self.end];
            // (content length, bytes consumed, line ended)
            let (content, consumed, ended) = if let Some(i) = memchr::memchr(b'\n', avail) {
                let content = if i > 0 && avail[i - 1] == b'\r' {
                    i - 1
                } else {
                    i
                };
                if content <= limit {
                    (content, i + 1, true)
                } else {
                    (limit, limit, false)
                }
            } else if self.eof {
                if avail.is_empty() {
                    return Ok(None);
                }
                let content = avail.len() - usize::from(avail.ends_with(b"\r"));
                if content <= limit {
                    (content, avail.len(), true)
                } else {
                    (limit, limit, false)
                }
            } else if avail.len() > limit {
                // A CR among these bytes is not followed by an LF: there is none in `avail`.
                (limit, limit, false)
            } else if self.pos == 0 && self.end == self.buf.len() {
                // A line longer than the buffer: hand out all but the last byte, which may be
                // the CR of a CRLF the next read completes.
                (avail.len() - 1, avail.len() - 1, false)
            } else {
                self.refill()?;
                continue;
            };
            let range = self.pos..self.pos + content;
            self.part_line = self.lines + 1;
            if memchr::memchr(b'\r', &self.buf[range.clone()]).is_some() {
                return Err(self.error(
                    self.part_line,
                    "a carriage return inside a line (only LF and CRLF line ends are read)"
                        .to_owned(),
                ));
            }
            self.pos += consumed;
            self.lines += u64::from(ended);
            return Ok(Some((range, ended)));
        }
    }

    /// Skips a whole line, keeping its first bytes in `head`. Returns `false` at the end of
    /// the file.
    fn take_line_head(&mut self) -> Result<bool, Error> {
        self.head.clear();
        let mut first = true;
        loop {
            let Some((range, ended)) = self.line_part(usize::MAX)? else {
                return Ok(!first);
            };
            first = false;
            let room = HEADER_KEPT - self.head.len();
            let kept = range.start..range.end.min(range.start + room);
            self.head.extend_from_slice(&self.buf[kept]);
            if ended {
                return Ok(true);
            }
        }
    }

    /// The first byte of the next line that is not blank, without consuming it; `None` at the
    /// end of the file.
    fn next_line_start(&mut self) -> Result<Option<u8>, Error> {
        loop {
            if self.pos == self.end {
                if self.eof {
                    return Ok(None);
                }
                self.refill()?;
                continue;
            }
            match self.buf[self.pos] {
                // A blank line (an LF, or a CRLF; a CR before anything else is an error).
                b'\n' | b'\r' => {
                    self.line_part(usize::MAX)?;
                }
                first => return Ok(Some(first)),
            }
        }
    }

    /// Moves the unconsumed bytes to the front and reads more after them.
    fn refill(&mut self) -> Result<(), Error> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        loop {
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A gzip stream's errors already name the file and say what is wrong.
                Err(e) if e.get_ref().is_some() => return Err(Error::Input(e.to_string())),
                Err(e) => return Err(Error::Input(format!("{}: read failed: {e}", self.name))),
            }
        }
    }

    /// An error at `line` of this file.
    fn error(&self, line: u64, message: String) -> Error {
        Error::Input(format!(
            "{}: line {line}: {message}{}",
            self.name,
            self.hint()
        ))
    }

    /// What to add to a format error in decompressed data: damaged gzip data often
    /// decompresses into garbage that breaks the format before the damage is detected (by
    /// the checksum at the end of the member).
    fn hint(&self) -> &'static str {
        if self.gzip {
            " (the file is gzip-compressed: `gzip -t` tells whether it is damaged)"
        } else {
            ""
        }
    }

    /// The current record, for messages: `" (record 12, '@read12')"`.
    fn record(&self) -> String {
        format!(
            " (record {}, '{}')",
            self.records,
            String::from_utf8_lossy(&self.header).escape_debug()
        )
    }

    /// A FASTQ record that ends before `what`.
    fn truncated(&self, what: &str) -> Error {
        self.error(
            self.lines + 1,
            format!(
                "the file ends inside a FASTQ record, before {what}{}",
                self.record()
            ),
        )
    }

    /// A line that should start a record and starts with `first`.
    fn not_a_record(&self, first: u8) -> Error {
        let line = self.lines + 1;
        if self.records == 0 {
            Error::Input(format!(
                "{}: not a FASTA or FASTQ file: line {line} starts with {}, where a record \
                 starts with '>' (FASTA) or '@' (FASTQ){}",
                self.name,
                describe(first),
                self.hint()
            ))
        } else {
            self.error(
                line,
                format!(
                    "expected a record's header ('>' or '@'), found a line starting with {} \
                     (after record {}; a FASTQ sequence must be on one line)",
                    describe(first),
                    self.records
                ),
            )
        }
    }
}

/// A byte as a message shows it: `'N'`, or `byte 0x00` when it is not printable.
fn describe(byte: u8) -> String {
    if byte.is_ascii_graphic() {
        format!("'{}'", char::from(byte))
    } else {
        format!("byte {byte:#04x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk of `text` read with chunks of `chunk` codes and reads of `read` bytes,
    /// as letters (`ACGT`, `N` for a break).
    fn chunks(text: &[u8], k: usize, chunk: usize, read: usize) -> Result<Vec<String>, Error> {
        let source = Source::Bytes {
            name: "test".to_owned(),
            data: text.into(),
        };
        let mut input = Input::new(vec![source], ProgressBar::hidden())?
            .chunk_bases(chunk)
            .read_buffer(read);
        input.set_k(k);
        let mut out = Vec::new();
        let mut codes = Vec::new();
        while input.next_chunk(&mut codes)? {
            out.push(
                codes
                    .iter()
                    .map(|&c| char::from(b"ACGTN"[usize::from(c)]))
                    .collect(),
            );
        }
        Ok(out)
    }

    /// The error reading `text` gives, which must not depend on where reads end.
    fn error(text: &[u8]) -> String {
        let message = chunks(text, 3, 1 << 20, 1024).unwrap_err().to_string();
        for read in [2, 3] {
            let again = chunks(text, 3, 1 << 20, read).unwrap_err().to_string();
            assert_eq!(again, message, "reads of {read} bytes");
        }
        message
    }

    #[test]
    fn fasta_and_fastq_records_are_joined_with_breaks() {
        let text = b">a x\nAC\ngt\n\n>b\n>c\nNNA\r\n@q\nTTG\n+q\n@@@\n\n>d\nC";
        for read in [2, 3, 5, 1024] {
            assert_eq!(
                chunks(text, 2, 1 << 20, read).unwrap(),
                ["ACGTNNNNANTTGNC"],
                "read {read}"
            );
        }
    }

    #[test]
    fn long_records_are_cut_with_an_overlap_of_k_minus_one() {
        let text = b">one\nACGTACGTAC\nGTACG\n";
        // k = 3: each chunk after the first starts with the last two codes of the one before.
        assert_eq!(
            chunks(text, 3, 6, 1024).unwrap(),
            ["ACGTAC", "ACGTAC", "ACGTAC", "ACG"]
        );
        // A chunk that is full at a record's end is handed out there, uncut; the next is cut
        // in its second record (the overlap then holds the break between the records).
        assert_eq!(
            chunks(b">a\nAAAA\n>b\nCC\n>c\nGG", 3, 4, 1024).unwrap(),
            ["AAAA", "CCNG", "NGG"]
        );
    }

    #[test]
    fn empty_inputs_have_no_chunks() {
        for text in [
            &b""[..],
            b"\n\n",
            b"\r\n",
            b">only a header\n",
            b"@e\n\n+\n\n",
            b"@e\n\n+\n",
        ] {
            let got = chunks(text, 5, 1 << 20, 1024).unwrap();
            assert!(
                got.iter().all(|c| !c.contains(['A', 'C', 'G', 'T'])),
                "{text:?}"
            );
        }
    }

    #[test]
    fn fastq_errors_name_the_line_and_record() {
        assert_eq!(
            error(b"@r1\nACGT\n+\nIIII\n@r2\nACGT\n+\nIII\n"),
            "test: line 8: the quality line has 3 characters for 4 bases (record 2, '@r2')"
        );
        assert_eq!(
            error(b"@r1\nACGT\nACGT\n+\nIIII\n"),
            "test: line 3: expected the '+' line of a FASTQ record (one sequence line, then \
             '+'), found a line starting with 'A' (record 1, '@r1')"
        );
        assert_eq!(
            error(b"@r1\nACGT\n+\n"),
            "test: line 4: the file ends inside a FASTQ record, before its quality line \
             (record 1, '@r1')"
        );
        assert_eq!(
            error(b"@r1\n"),
            "test: line 2: the file ends inside a FASTQ record, before its sequence line \
             (record 1, '@r1')"
        );
        assert_eq!(
            error(b"@r1\nAC\n+\nI \n"),
            "test: line 4: the quality line has byte 0x20, which is not a quality score \
             (record 1, '@r1')"
        );
    }

    #[test]
    fn what_is_not_sequence_text_is_an_error() {
        assert_eq!(
            error(b"ACGT\n"),
            "test: not a FASTA or FASTQ file: line 1 starts with 'A', where a record starts \
             with '>' (FASTA) or '@' (FASTQ)"
        );
        assert_eq!(
            error(b">a\nAC\x00GT\n"),
            "test: line 2: byte 0x00 in a sequence line is not text (is this a binary or \
             damaged file?) (record 1, '>a')"
        );
        assert_eq!(
            error(b">a\rACGT\rACGT\r"),
            "test: line 1: a carriage return inside a line (only LF and CRLF line ends are read)"
        );
        assert!(error(b"\x7fELF\x02\x01").contains("starts with byte 0x7f"));
        assert!(error(b"\xfd7zXZ\x00\x00").contains("xz-compressed"));
    }

    #[test]
    fn the_bases_bound_is_the_size_or_what_gzip_says_it_inflates_to() {
        use std::io::Write;
        let gzip = |part: &[u8]| {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), Default::default());
            encoder.write_all(part).unwrap();
            encoder.finish().unwrap()
        };
        let bytes = |data: Vec<u8>| Source::Bytes {
            name: "test".to_owned(),
            data: data.into(),
        };
        let plain = b">a\n"
            .iter()
            .chain(&[b'A'; 10_000])
            .copied()
            .collect::<Vec<u8>>();
        assert_eq!(Input::distinct_bound(&[bytes(plain.clone())]), Some(10_003));
        // One member: its trailer's size, far above the compressed one.
        let packed = gzip(&plain);
        assert!(packed.len() < 200);
        assert_eq!(
            Input::distinct_bound(&[bytes(packed.clone())]),
            Some(10_003)
        );
        // The same in a file, read from its end.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reads.fa.gz");
        std::fs::write(&path, &packed).unwrap();
        assert_eq!(Input::distinct_bound(&[Source::Path(path)]), Some(10_003));
        // Two members whose last is smaller than the whole compressed file: no bound (the
        // trailer tells only the last member's size).
        let mut two = packed.clone();
        two.extend(gzip(b">b\nAC\n"));
        assert_eq!(Input::distinct_bound(&[bytes(two)]), None);
        // Sums over sources; stdin has none.
        assert_eq!(
            Input::distinct_bound(&[bytes(packed.clone()), bytes(plain)]),
            Some(20_006)
        );
        assert_eq!(Input::distinct_bound(&[bytes(packed), Source::Stdin]), None);
    }

    #[test]
    fn gzip_is_found_by_its_magic_and_truncation_is_an_error() {
        use std::io::Write;
        let plain = b">a\nACGTACGT\n@b\nGGCC\n+\nIIII\n";
        let member = |part: &[u8]| {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), Default::default());
            encoder.write_all(part).unwrap();
            encoder.finish().unwrap()
        };
        // Two members, as `cat a.gz b.gz` makes.
        let mut gz = member(&plain[..11]);
        let first_member = gz.len();
        gz.extend(member(&plain[11..]));
        assert_eq!(
            chunks(&gz, 3, 1 << 20, 7).unwrap(),
            chunks(plain, 3, 1 << 20, 7).unwrap()
        );
        // Every truncation is an error, not a shorter file, but the one between the members
        // (which leaves a whole gzip file).
        for end in (2..gz.len()).filter(|&end| end != first_member) {
            let message = chunks(&gz[..end], 3, 1 << 20, 7).unwrap_err().to_string();
            assert!(
                message.contains("gzip data is truncated") || message.contains("corrupt"),
                "cut at {end}: {message}"
            );
        }
    }
}
