//! memcached's text protocol and its meta commands: parsing and execution.
//!
//! [`serve`] takes the bytes a connection has read and answers the complete requests in
//! them, in order. Runs of reads (`get`, `gets`, and `mg` without flags that write) are
//! gathered across request boundaries and looked up in batches of up to [`LOOKUP_BATCH`]
//! keys (`Session::get_many`, bins prefetched, then items), so a 64-key `get`, and 64
//! pipelined single-key `get`s or `mg`s, cost one batch; any other request first answers
//! the gathered reads, so replies keep the order of the requests.
//!
//! **Bounded output.** `serve` is given room for so many bytes of replies. It starts no
//! request once its replies passed that, and it answers a get line key by key, stopping
//! (and `gat` likewise) once they passed it: the rest of the line is kept, as the offset of
//! the next key to answer in [`TextState`], and answered by a later call, after the
//! connection's output has drained. So no request, not even a 256 KiB `get` naming one 1 MiB
//! value 60,000 times, makes more than the room plus one value of output at a time.
//!
//! Syntax and replies follow memcached 1.6's `proto_text.c` (documented differences in the
//! README): tokens split on spaces, a line ends at `\n` with an optional `\r` before it, at
//! most 24 tokens except for the get commands, keys of at most 250 bytes. A key with a
//! control character is refused (memcached would store it). A line longer than
//! [`MAX_LINE`] (or [`MAX_GET_LINE`] for the get commands) with no newline is answered
//! `CLIENT_ERROR line too long` and the connection is closed, as memcached closes it.

use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};

use crate::{
    cache::{Counter, Deleted, Delta, Item, MetaStore, Session, StoreMode, Stored, Tombstone},
    detail::{self, Op},
    protocol::{MAX_GET_LINE, MAX_KEY_LEN, MAX_LINE, VERSION},
};

// A metadump answered in part keeps its 64-bit index position where a get line keeps its
// byte offset (`TextState::resume_at`, a usize).
const _: () = assert!(usize::BITS == 64, "floe-server needs a 64-bit usize");

/// The most tokens a non-get command line may have (memcached's `MAX_TOKENS`).
const MAX_TOKENS: usize = 24;

/// The most keys looked up in one batch: enough for the batch's prefetching to pay, few
/// enough that a batch cut short by the output's room wastes little.
pub const LOOKUP_BATCH: usize = 64;

/// What `serve` did with the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// Bytes of the input answered; the rest is an incomplete request, or requests left
    /// for later when `stopped`.
    pub consumed: usize,
    /// Discard this many bytes that follow `consumed` (the data block of a refused store),
    /// including bytes not read yet.
    pub swallow: usize,
    /// Close the connection after writing the output (`quit`, a line too long).
    pub close: bool,
    /// Answering stopped because the replies filled their room: complete requests (or the
    /// rest of a get line) may follow `consumed`, to answer once the output has drained.
    pub stopped: bool,
}

impl Served {
    /// Answered up to `consumed`; the rest, if any, is an incomplete request.
    pub fn upto(consumed: usize) -> Served {
        Served {
            consumed,
            swallow: 0,
            close: false,
            stopped: false,
        }
    }

    /// Answered up to `consumed`, then the output filled its room.
    pub fn stopped_at(consumed: usize) -> Served {
        Served {
            stopped: true,
            ..Served::upto(consumed)
        }
    }

    /// Answered up to `consumed`; close the connection.
    pub fn closing_at(consumed: usize) -> Served {
        Served {
            close: true,
            ..Served::upto(consumed)
        }
    }
}

/// Per-connection state of the text protocol.
#[derive(Default)]
pub struct TextState {
    /// The connection's number in the server's logs (`-vv`).
    pub connection: usize,
    tokens: Vec<(usize, usize)>,
    /// The first unanswered line is a get or gat line answered in part (its output filled
    /// its room): the byte offset in the line of the first key still to answer.
    resume_at: Option<usize>,
}

/// A read waiting in the batch, and where its line starts in the input.
enum Read<'a> {
    /// `get` / `gets`: keys `first..first + count` of the batch.
    Get {
        line_start: usize,
        first: usize,
        count: usize,
        cas: bool,
    },
    /// `mg`: key `index` of the batch, its flags, and its key as the client wrote it.
    Meta {
        line_start: usize,
        index: usize,
        flags: MetaFlags<'a>,
        key_as_sent: &'a [u8],
    },
}

/// Reads gathered for batch lookups.
#[derive(Default)]
struct Batch<'a> {
    keys: Vec<&'a [u8]>,
    /// Where each key starts in its line (a get line's resume point).
    key_offsets: Vec<usize>,
    decoded: Vec<Box<[u8]>>,
    reads: Vec<Read<'a>>,
}

/// Where answering the reads stopped for want of output room: the line of the first read
/// not (wholly) answered, and for a get line the offset of its first key not answered.
struct Stop {
    line_start: usize,
    resume_at: Option<usize>,
}

/// Answer the complete requests in `input`, appending replies to `out`, until the replies
/// pass `room` bytes (see the module's docs: a request started is answered, except a get
/// or gat line, which stops between keys).
pub fn serve(
    input: &[u8],
    out: &mut Vec<u8>,
    session: &mut Session<'_>,
    state: &mut TextState,
    room: usize,
) -> Served {
    let limit = out.len().saturating_add(room);
    let mut pos = 0;
    let mut batch = Batch::default();
    let mut tokens = std::mem::take(&mut state.tokens);
    // Only the first line can be one answered in part.
    let mut resume_at = state.resume_at.take();
    // Answer the gathered reads; leave the loop if they filled the output's room.
    macro_rules! answer_reads {
        () => {
            if let Some(stop) = answer_reads(&mut batch, out, session, limit) {
                break (Served::stopped_at(stop.line_start), stop.resume_at);
            }
        };
    }
    let (mut served, mut resume) = loop {
        let rest = &input[pos..];
        let line_resume_at = resume_at.take();
        if batch.reads.is_empty() && out.len() > limit {
            break (Served::stopped_at(pos), line_resume_at);
        }
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            let limit = if starts_get(rest) {
                MAX_GET_LINE
            } else {
                MAX_LINE
            };
            if rest.len() > limit {
                answer_reads!();
                out.extend_from_slice(b"CLIENT_ERROR line too long\r\n");
                break (Served::closing_at(input.len()), None);
            }
            break (Served::upto(pos), None);
        };
        if newline > MAX_GET_LINE || (newline > MAX_LINE && !starts_get(rest)) {
            // Too long even though it ended: refused as if its end had not come yet, so the
            // answer does not depend on how the bytes were split into reads.
            answer_reads!();
            out.extend_from_slice(b"CLIENT_ERROR line too long\r\n");
            break (Served::closing_at(input.len()), None);
        }
        let line_end = pos + newline + 1;
        let mut line = &rest[..newline];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        tokenize(line, &mut tokens);
        let token = |i: usize| -> &[u8] { &line[tokens[i].0..tokens[i].1] };
        let Some(&(s, e)) = tokens.first() else {
            answer_reads!();
            out.extend_from_slice(b"ERROR\r\n");
            pos = line_end;
            continue;
        };
        let command = &line[s..e];
        let is_get = matches!(command, b"get" | b"gets");
        // `-vv`: a read's line as it is gathered (not again when a get line answered in
        // part resumes; its replies are not logged), others' below once answered.
        let verbose = crate::log::enabled(2);
        if verbose && (command == b"mg" || is_get && line_resume_at.is_none()) {
            crate::log::command(state.connection, line, b"");
        }
        if !is_get && tokens.len() > MAX_TOKENS {
            answer_reads!();
            out.extend_from_slice(b"ERROR\r\n");
            pos = line_end;
            continue;
        }
        if is_get {
            // A line answered in part was checked whole when it came.
            let checked = line_resume_at.is_some();
            if !checked && tokens.len() < 2 {
                answer_reads!();
                out.extend_from_slice(b"ERROR\r\n");
            } else if !checked && (1..tokens.len()).any(|i| !valid_key(token(i))) {
                answer_reads!();
                out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
            } else {
                let from = line_resume_at.unwrap_or(0);
                let first = batch.keys.len();
                for &(s, e) in tokens[1..].iter().filter(|&&(s, _)| s >= from) {
                    batch.keys.push(&line[s..e]);
                    batch.key_offsets.push(s);
                }
                batch.reads.push(Read::Get {
                    line_start: pos,
                    first,
                    count: batch.keys.len() - first,
                    cas: command == b"gets",
                });
                if batch.keys.len() >= LOOKUP_BATCH {
                    answer_reads!();
                }
            }
            pos = line_end;
            continue;
        }
        if command == b"mg" && tokens.len() >= 2 {
            let parsed = MetaFlags::parse(line, &tokens[2..]);
            if let Ok(flags) = parsed {
                if !flags.writes() {
                    match meta_key(token(1), flags.has(b'b')) {
                        Ok(key) => {
                            let index = batch.keys.len();
                            match key {
                                MetaKey::Plain(key) => batch.keys.push(key),
                                MetaKey::Decoded(key) => {
                                    // Kept alive in `decoded` until the batch is answered;
                                    // the slice is re-pointed there when answering.
                                    batch.decoded.push(key);
                                    batch.keys.push(&[]);
                                }
                            }
                            batch.key_offsets.push(tokens[1].0);
                            batch.reads.push(Read::Meta {
                                line_start: pos,
                                index,
                                flags,
                                key_as_sent: token(1),
                            });
                            pos = line_end;
                            if batch.keys.len() >= LOOKUP_BATCH {
                                answer_reads!();
                            }
                        }
                        Err(()) => {
                            answer_reads!();
                            out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                            pos = line_end;
                        }
                    }
                    continue;
                }
            }
        }
        answer_reads!();
        let request = Request {
            line,
            tokens: &tokens,
            data: &input[line_end..],
            resume_at: line_resume_at,
        };
        let replied = out.len();
        let outcome = execute(&request, out, session, limit);
        if verbose && !matches!(outcome, Outcome::NeedData | Outcome::Paused { .. }) {
            crate::log::command(state.connection, line, &out[replied..]);
        }
        match outcome {
            Outcome::Done => pos = line_end,
            Outcome::DoneWithData(len) => pos = line_end + len,
            Outcome::NeedData => break (Served::upto(pos), None),
            Outcome::Swallow(len) => {
                let available = (input.len() - line_end).min(len);
                if available == len {
                    pos = line_end + len;
                } else {
                    let served = Served {
                        swallow: len - available,
                        ..Served::upto(line_end + available)
                    };
                    break (served, None);
                }
            }
            Outcome::Paused { resume_at } => break (Served::stopped_at(pos), Some(resume_at)),
            Outcome::Close => break (Served::closing_at(line_end), None),
        }
    };
    // Reads gathered before an incomplete request.
    if let Some(stop) = answer_reads(&mut batch, out, session, limit) {
        (served, resume) = (Served::stopped_at(stop.line_start), stop.resume_at);
    }
    state.tokens = tokens;
    state.resume_at = resume;
    served
}

fn starts_get(line: &[u8]) -> bool {
    let line = line.trim_ascii_start();
    [&b"get "[..], b"gets ", b"gat ", b"gats ", b"mg "]
        .iter()
        .any(|p| line.starts_with(p))
}

/// Split on spaces (runs of spaces count as one) into byte ranges of `line`.
fn tokenize(line: &[u8], tokens: &mut Vec<(usize, usize)>) {
    tokens.clear();
    let mut start = None;
    for (i, &b) in line.iter().enumerate() {
        match (b == b' ', start) {
            (true, Some(s)) => {
                tokens.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        tokens.push((s, line.len()));
    }
}

/// Accept keys with control characters (`--lenient-keys`), as memcached does although its
/// protocol forbids them (memcaslap's keys start with 0x10 bytes).
static LENIENT_KEYS: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Accept (or refuse, the default) keys with control characters, process-wide.
pub fn set_lenient_keys(lenient: bool) {
    LENIENT_KEYS.store(lenient, core::sync::atomic::Ordering::Relaxed);
}

/// At most 250 bytes, none of them a control character (unless lenient: then only NUL is
/// refused; spaces and line ends cannot be in a token anyway).
pub fn valid_key(key: &[u8]) -> bool {
    let lenient = LENIENT_KEYS.load(core::sync::atomic::Ordering::Relaxed);
    !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key.iter().all(|&b| {
            if lenient {
                b != 0
            } else {
                b > b' ' && b != 0x7f
            }
        })
}

/// Answer the gathered reads, looking their keys up [`LOOKUP_BATCH`] at a time, until the
/// output passes `limit` bytes (one read, or one key of a get line, is answered at least).
/// The batch is empty afterwards; `Some` says where answering stopped.
fn answer_reads(
    batch: &mut Batch<'_>,
    out: &mut Vec<u8>,
    session: &Session<'_>,
    limit: usize,
) -> Option<Stop> {
    if batch.reads.is_empty() {
        return None;
    }
    // Point the base64-decoded keys' placeholders at their decoded bytes.
    let mut decoded = batch.decoded.iter();
    let mut keys: Vec<&[u8]> = Vec::with_capacity(batch.keys.len());
    let mut meta_decoded = vec![false; batch.keys.len()];
    for read in &batch.reads {
        if let Read::Meta { index, flags, .. } = read {
            if flags.has(b'b') {
                meta_decoded[*index] = true;
            }
        }
    }
    for (i, key) in batch.keys.iter().enumerate() {
        keys.push(if meta_decoded[i] {
            decoded.next().expect("one per decoded key")
        } else {
            key
        });
    }
    let mut found = Found {
        items: Vec::with_capacity(keys.len()),
        batch: Vec::new(),
    };
    let mut stop = None;
    let mut answered_any = false;
    // Each item is marked read after its reply: `mg`'s `h` and `l` flags report the reads
    // before this one. Reads are counted as they are answered (a key looked up in a batch
    // cut short is looked up again, and counted, when its turn comes).
    'reads: for read in &batch.reads {
        match read {
            &Read::Get {
                line_start,
                first,
                count,
                cas,
            } => {
                for i in first..first + count {
                    if answered_any && out.len() > limit {
                        stop = Some(Stop {
                            line_start,
                            resume_at: Some(batch.key_offsets[i]),
                        });
                        break 'reads;
                    }
                    answered_any = true;
                    let item = found.item(session, &keys, i);
                    count_read(session, keys[i], item.is_some());
                    detail::record(
                        keys[i],
                        Op::Get {
                            hit: item.is_some(),
                        },
                    );
                    if let Some(item) = item {
                        write_value(out, keys[i], item, cas);
                        session.mark_read(item);
                    }
                }
                out.extend_from_slice(b"END\r\n");
            }
            Read::Meta {
                line_start,
                index,
                flags,
                key_as_sent,
            } => {
                if answered_any && out.len() > limit {
                    stop = Some(Stop {
                        line_start: *line_start,
                        resume_at: None,
                    });
                    break 'reads;
                }
                answered_any = true;
                let item = found.item(session, &keys, *index);
                count_read(session, keys[*index], item.is_some());
                let (key, effects) = (keys[*index], GetEffects::default());
                meta_get_reply(out, session, key, key_as_sent, item, flags, effects);
                if let Some(item) = item {
                    session.mark_read(item);
                }
            }
        }
    }
    batch.keys.clear();
    batch.key_offsets.clear();
    batch.decoded.clear();
    batch.reads.clear();
    stop
}

/// The items found for a batch's keys so far, in the keys' order.
struct Found<'s> {
    items: Vec<Option<&'s Item>>,
    batch: Vec<Option<&'s Item>>,
}

impl<'s> Found<'s> {
    /// The item of `keys[i]`, looking up the next [`LOOKUP_BATCH`] keys when `i` is past
    /// those found so far (keys are asked for in order).
    fn item(&mut self, session: &'s Session<'_>, keys: &[&[u8]], i: usize) -> Option<&'s Item> {
        if i >= self.items.len() {
            let next = self.items.len();
            let batch = &keys[next..keys.len().min(next + LOOKUP_BATCH)];
            session.get_many(batch, &mut self.batch, false);
            self.items.extend_from_slice(&self.batch);
        }
        self.items[i]
    }
}

/// Count one key of a get: a hit or a miss (which may adapt the eviction queues).
fn count_read(session: &Session<'_>, key: &[u8], hit: bool) {
    if !hit {
        session.missed(key);
    }
    session.count(Counter::CmdGet, 1);
    session.count(
        if hit {
            Counter::GetHits
        } else {
            Counter::GetMisses
        },
        1,
    );
}

fn write_value(out: &mut Vec<u8>, key: &[u8], item: &Item, cas: bool) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_number(out, item.flags() as u64);
    out.push(b' ');
    push_number(out, item.data().len() as u64);
    if cas {
        out.push(b' ');
        push_number(out, item.cas());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(item.data());
    out.extend_from_slice(b"\r\n");
}

fn push_number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn push_signed(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// One non-batched request: its line, token ranges, and whatever input follows the line.
struct Request<'a> {
    line: &'a [u8],
    tokens: &'a [(usize, usize)],
    data: &'a [u8],
    /// For a `gat` line answered in part: the offset in the line of its first key still
    /// to answer.
    resume_at: Option<usize>,
}

impl<'a> Request<'a> {
    fn token(&self, i: usize) -> &'a [u8] {
        &self.line[self.tokens[i].0..self.tokens[i].1]
    }

    fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the last token is `noreply` (memcached's `set_noreply_maybe`).
    fn noreply(&self) -> bool {
        self.token(self.len() - 1) == b"noreply"
    }
}

enum Outcome {
    /// The line was answered.
    Done,
    /// The line and this many bytes of data after it were answered.
    DoneWithData(usize),
    /// A data block is not all here yet; nothing was answered.
    NeedData,
    /// The line was answered; discard this many bytes after it.
    Swallow(usize),
    /// Part of the line was answered and the output filled its room: answer the rest, from
    /// this offset in the line, once the output has drained.
    Paused { resume_at: usize },
    /// Close the connection.
    Close,
}

const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const INVALID_FLAG: &[u8] = b"CLIENT_ERROR invalid flag\r\n";

fn reply(out: &mut Vec<u8>, noreply: bool, line: &[u8]) {
    if !noreply {
        out.extend_from_slice(line);
    }
}

/// Answer one request that is not batched. Only `gat` stops part way when its replies pass
/// `limit` bytes of `out`; every other request is answered whole.
fn execute(
    request: &Request<'_>,
    out: &mut Vec<u8>,
    session: &mut Session<'_>,
    limit: usize,
) -> Outcome {
    let n = request.len();
    match request.token(0) {
        b"set" => storage(request, out, session, StoreMode::Set, false),
        b"add" => storage(request, out, session, StoreMode::Add, false),
        b"replace" => storage(request, out, session, StoreMode::Replace, false),
        b"append" => storage(request, out, session, StoreMode::Append, false),
        b"prepend" => storage(request, out, session, StoreMode::Prepend, false),
        b"cas" => storage(request, out, session, StoreMode::Set, true),
        // memcached answers a `gat` without keys with an empty result.
        b"gat" | b"gats" if n == 2 => {
            out.extend_from_slice(b"END\r\n");
            Outcome::Done
        }
        b"gat" | b"gats" if n >= 3 => {
            let Some(exptime) = parse_exptime(request.token(1)) else {
                out.extend_from_slice(b"CLIENT_ERROR invalid exptime argument\r\n");
                return Outcome::Done;
            };
            if (2..n).any(|i| !valid_key(request.token(i))) {
                out.extend_from_slice(BAD_FORMAT);
                return Outcome::Done;
            }
            // A line answered in part resumes at its first key not answered, with the expiry
            // taken relative to the time it resumes.
            let exptime = session.cache().server_time(exptime, session.now());
            let from = request.resume_at.unwrap_or(0);
            let first = (2..n).find(|&i| request.tokens[i].0 >= from).unwrap_or(n);
            for i in first..n {
                if i > first && out.len() > limit {
                    return Outcome::Paused {
                        resume_at: request.tokens[i].0,
                    };
                }
                let key = request.token(i);
                // As memcached 1.6: a gat counts as a touch, not as a get.
                session.count(Counter::CmdTouch, 1);
                let touched = session.touch(key, exptime);
                detail::record(
                    key,
                    Op::Get {
                        hit: touched.is_some(),
                    },
                );
                match touched {
                    Some(item) => {
                        session.count(Counter::TouchHits, 1);
                        session.mark_read(item);
                        write_value(out, key, item, request.token(0) == b"gats");
                    }
                    None => session.count(Counter::TouchMisses, 1),
                }
            }
            out.extend_from_slice(b"END\r\n");
            Outcome::Done
        }
        b"delete" if n >= 2 => {
            let noreply = request.noreply();
            if n > 2 {
                // A legacy hold time of 0 is accepted.
                let hold_is_zero = request.token(2) == b"0";
                let valid =
                    (n == 3 && (hold_is_zero || noreply)) || (n == 4 && hold_is_zero && noreply);
                if !valid {
                    out.extend_from_slice(
                        b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
                    );
                    return Outcome::Done;
                }
            }
            let key = request.token(1);
            if !valid_key(key) {
                out.extend_from_slice(BAD_FORMAT);
                return Outcome::Done;
            }
            detail::record(key, Op::Delete);
            let answer: &[u8] = match session.delete(key, None) {
                Deleted::Deleted => b"DELETED\r\n",
                Deleted::NotFound | Deleted::Exists => b"NOT_FOUND\r\n",
            };
            reply(out, noreply, answer);
            Outcome::Done
        }
        command @ (b"incr" | b"decr") if n == 3 || n == 4 => {
            let noreply = request.noreply();
            if n == 4 && !noreply {
                out.extend_from_slice(b"ERROR\r\n");
                return Outcome::Done;
            }
            let key = request.token(1);
            if !valid_key(key) {
                out.extend_from_slice(BAD_FORMAT);
                return Outcome::Done;
            }
            let Some(delta) = parse_u64(request.token(2)) else {
                out.extend_from_slice(b"CLIENT_ERROR invalid numeric delta argument\r\n");
                return Outcome::Done;
            };
            match session.delta(key, command == b"incr", delta, None, None, true, None) {
                Delta::Value(value, ..) => {
                    if !noreply {
                        push_number(out, value);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                Delta::NotFound | Delta::Exists => reply(out, noreply, b"NOT_FOUND\r\n"),
                Delta::NonNumeric => reply(
                    out,
                    noreply,
                    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                ),
                Delta::OutOfMemory => reply(out, noreply, b"SERVER_ERROR out of memory\r\n"),
            }
            Outcome::Done
        }
        b"touch" if n == 3 || n == 4 => {
            let noreply = request.noreply();
            let key = request.token(1);
            if !valid_key(key) {
                out.extend_from_slice(BAD_FORMAT);
                return Outcome::Done;
            }
            let Some(exptime) = parse_exptime(request.token(2)) else {
                out.extend_from_slice(b"CLIENT_ERROR invalid exptime argument\r\n");
                return Outcome::Done;
            };
            let exptime = session.cache().server_time(exptime, session.now());
            session.count(Counter::CmdTouch, 1);
            let answer: &[u8] = match session.touch(key, exptime) {
                Some(item) => {
                    // A touch is an access, as in memcached (`mg`'s `h` says 1 after it).
                    session.mark_read(item);
                    session.count(Counter::TouchHits, 1);
                    b"TOUCHED\r\n"
                }
                None => {
                    session.count(Counter::TouchMisses, 1);
                    b"NOT_FOUND\r\n"
                }
            };
            reply(out, noreply, answer);
            Outcome::Done
        }
        b"flush_all" if n <= 3 => {
            let noreply = request.noreply();
            let args = if noreply { n - 1 } else { n };
            let delay = if args == 2 {
                match parse_exptime(request.token(1)) {
                    Some(delay) => delay,
                    None => {
                        reply(out, noreply, b"CLIENT_ERROR invalid exptime argument\r\n");
                        return Outcome::Done;
                    }
                }
            } else if args == 1 {
                0
            } else {
                out.extend_from_slice(b"ERROR\r\n");
                return Outcome::Done;
            };
            session.count(Counter::CmdFlush, 1);
            session.flush_all(delay);
            reply(out, noreply, b"OK\r\n");
            Outcome::Done
        }
        // As memcached: arguments after `version` are ignored.
        b"version" => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
            Outcome::Done
        }
        b"verbosity" if n == 2 || n == 3 => {
            // As memcached: `verbosity noreply` is silent, a level that is not a number
            // is an error.
            let noreply = request.noreply();
            if noreply && n == 2 {
                return Outcome::Done;
            }
            match parse_u64(request.token(1)) {
                Some(level) => {
                    crate::log::set_verbosity(level.min(3) as u8);
                    reply(out, noreply, b"OK\r\n");
                }
                None => reply(out, noreply, BAD_FORMAT),
            }
            Outcome::Done
        }
        b"quit" => Outcome::Close,
        b"cache_memlimit" if n == 2 || n == 3 => {
            let noreply = request.noreply();
            match parse_u64(request.token(1)) {
                // As memcached: at least 8 MiB.
                Some(mb) if mb < 8 => reply(
                    out,
                    noreply,
                    b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
                ),
                Some(mb) if mb <= (1 << 24) => {
                    session.cache().set_memory_limit((mb as usize) << 20);
                    reply(out, noreply, b"OK\r\n");
                }
                _ => reply(out, noreply, BAD_FORMAT),
            }
            Outcome::Done
        }
        b"stats" => {
            crate::stats::write(out, session.cache(), request.line, &request.tokens[1..]);
            Outcome::Done
        }
        b"lru_crawler" => {
            let args: Vec<&[u8]> = (1..n).map(|i| request.token(i)).collect();
            // A metadump answered in part goes on from the index position it stopped at
            // (kept where a get line keeps its byte offset; usize is 64 bits here).
            let resume = request.resume_at.map(|at| at as u64);
            match crate::crawler::command(out, session.cache(), &args, resume, limit) {
                Some(at) => Outcome::Paused {
                    resume_at: at as usize,
                },
                None => Outcome::Done,
            }
        }
        b"mn" => {
            out.extend_from_slice(b"MN\r\n");
            Outcome::Done
        }
        b"mg" if n >= 2 => meta_get_writing(request, out, session),
        b"ms" if n >= 3 => meta_set(request, out, session),
        b"md" if n >= 2 => meta_delete(request, out, session),
        b"ma" if n >= 2 => meta_arithmetic(request, out, session),
        b"me" if n >= 2 => {
            // memcached 1.6 counts only `me` in `cmd_meta`.
            session.count(Counter::CmdMeta, 1);
            meta_debug(request, out, session)
        }
        b"ms" => {
            out.extend_from_slice(BAD_FORMAT);
            Outcome::Done
        }
        _ => {
            out.extend_from_slice(b"ERROR\r\n");
            Outcome::Done
        }
    }
}

/// `set` / `add` / `replace` / `append` / `prepend` / `cas`.
fn storage(
    request: &Request<'_>,
    out: &mut Vec<u8>,
    session: &mut Session<'_>,
    mode: StoreMode,
    cas: bool,
) -> Outcome {
    let n = request.len();
    let fixed = if cas { 6 } else { 5 };
    if n != fixed && n != fixed + 1 {
        out.extend_from_slice(b"ERROR\r\n");
        return Outcome::Done;
    }
    let noreply = n == fixed + 1 && request.noreply();
    let key = request.token(1);
    let flags = parse_u32(request.token(2));
    let exptime = parse_exptime(request.token(3));
    let length = parse_i64(request.token(4)).filter(|&l| (0..i32::MAX as i64 - 2).contains(&l));
    // `cas` always compares (a unique of 0 matches no item); the others never do.
    let compare = if cas {
        parse_u64(request.token(5)).map(Some)
    } else {
        Some(None)
    };
    let (Some(flags), Some(exptime), Some(length), Some(compare)) =
        (flags, exptime, length, compare)
    else {
        out.extend_from_slice(BAD_FORMAT);
        return Outcome::Done;
    };
    if !valid_key(key) {
        out.extend_from_slice(BAD_FORMAT);
        return Outcome::Done;
    }
    let length = length as usize;
    if n == fixed + 1 && !noreply {
        out.extend_from_slice(b"ERROR\r\n");
        return Outcome::Done;
    }
    // Counted once per command: a store waiting for its data comes back here (one refused
    // as too large does not).
    let too_large = crate::cache::too_large(session.cache(), key.len(), length);
    if too_large || request.data.len() >= length + 2 {
        detail::record(key, Op::Set);
    }
    let block = length + 2;
    if too_large {
        out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
        session.count(Counter::StoreTooLarge, 1);
        if mode == StoreMode::Set {
            // memcached drops the old value too, rather than leave it stale.
            session.discard(key);
        }
        return Outcome::Swallow(block);
    }
    if request.data.len() < block {
        return Outcome::NeedData;
    }
    let data = &request.data[..length];
    if &request.data[length..block] != b"\r\n" {
        reply(out, noreply, b"CLIENT_ERROR bad data chunk\r\n");
        return Outcome::DoneWithData(block);
    }
    let exptime = session.cache().server_time(exptime, session.now());
    let answer: &[u8] = match session.store(mode, key, flags, exptime, data, compare) {
        Stored::Stored(_) => b"STORED\r\n",
        Stored::NotStored => b"NOT_STORED\r\n",
        Stored::Exists => b"EXISTS\r\n",
        Stored::NotFound => b"NOT_FOUND\r\n",
        Stored::TooLarge => b"SERVER_ERROR object too large for cache\r\n",
        Stored::OutOfMemory => {
            if mode == StoreMode::Set {
                session.discard(key);
            }
            b"SERVER_ERROR out of memory storing object\r\n"
        }
    };
    reply(out, noreply, answer);
    Outcome::DoneWithData(block)
}

fn parse_u64(token: &[u8]) -> Option<u64> {
    if token.is_empty() || token.len() > 20 || !token.iter().all(u8::is_ascii_digit) {
        return None;
    }
    core::str::from_utf8(token).ok()?.parse().ok()
}

fn parse_u32(token: &[u8]) -> Option<u32> {
    parse_u64(token).and_then(|v| u32::try_from(v).ok())
}

fn parse_i64(token: &[u8]) -> Option<i64> {
    let (negative, digits) = match token.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, token),
    };
    let magnitude = i64::try_from(parse_u64(digits)?).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// An expiry time as memcached reads it: `strtol` (a 64-bit number; beyond that an error), kept
/// in an `int32_t`, so only its low 32 bits count, as a signed number: 4294967296 never
/// expires, 2147483648 is already expired (checked against memcached 1.6.18).
fn parse_exptime(token: &[u8]) -> Option<i64> {
    parse_i64(token).map(|t| i64::from(t as i32))
}

// ---------------------------------------------------------------------------------------
// Meta commands.
// ---------------------------------------------------------------------------------------

/// A meta command's flags, in the order given: the flag character and its token.
struct MetaFlags<'a> {
    flags: Vec<(u8, &'a [u8])>,
}

impl<'a> MetaFlags<'a> {
    fn parse(line: &'a [u8], tokens: &[(usize, usize)]) -> Result<Self, ()> {
        let mut flags = Vec::with_capacity(tokens.len());
        for &(s, e) in tokens {
            let token = &line[s..e];
            let (&flag, argument) = token.split_first().ok_or(())?;
            if !flag.is_ascii_alphabetic() {
                return Err(());
            }
            flags.push((flag, argument));
        }
        Ok(MetaFlags { flags })
    }

    fn has(&self, flag: u8) -> bool {
        self.flags.iter().any(|&(f, _)| f == flag)
    }

    fn get(&self, flag: u8) -> Option<&'a [u8]> {
        self.flags
            .iter()
            .find(|&&(f, _)| f == flag)
            .map(|&(_, a)| a)
    }

    /// Whether an `mg` with these flags writes (touch, vivify) or has tokens to check
    /// (`E`, `R`): not batched then.
    fn writes(&self) -> bool {
        self.flags
            .iter()
            .any(|&(f, _)| matches!(f, b'T' | b'N' | b'E' | b'R'))
    }

    /// Append the return flags in the order the request gave them, as memcached does:
    /// `O` (opaque) and `k` (the key as sent, then `b` for a base64 key) here, every other
    /// flag by `other`, which writes it (with its leading space) or not.
    fn write_returned(
        &self,
        out: &mut Vec<u8>,
        key_as_sent: &[u8],
        other: impl FnMut(&mut Vec<u8>, u8),
    ) {
        self.write_returned_key(out, key_as_sent, self.has(b'b'), other);
    }

    /// [`write_returned`](Self::write_returned) with the key's text and whether it is
    /// base64 given.
    fn write_returned_key(
        &self,
        out: &mut Vec<u8>,
        key_text: &[u8],
        base64: bool,
        mut other: impl FnMut(&mut Vec<u8>, u8),
    ) {
        for &(flag, argument) in &self.flags {
            match flag {
                b'O' => {
                    out.extend_from_slice(b" O");
                    out.extend_from_slice(argument);
                }
                b'k' => {
                    out.extend_from_slice(b" k");
                    out.extend_from_slice(key_text);
                    if base64 {
                        out.extend_from_slice(b" b");
                    }
                }
                flag => other(out, flag),
            }
        }
    }

    /// [`write_returned`](Self::write_returned) of `O` and `k` only.
    fn echo(&self, out: &mut Vec<u8>, key_as_sent: &[u8]) {
        self.write_returned(out, key_as_sent, |_, _| {});
    }
}

enum MetaKey<'a> {
    Plain(&'a [u8]),
    Decoded(Box<[u8]>),
}

impl MetaKey<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            MetaKey::Plain(key) => key,
            MetaKey::Decoded(key) => key,
        }
    }
}

/// A meta command's key, base64-decoded under the `b` flag.
fn meta_key(token: &[u8], base64: bool) -> Result<MetaKey<'_>, ()> {
    if !base64 {
        return if valid_key(token) {
            Ok(MetaKey::Plain(token))
        } else {
            Err(())
        };
    }
    let key = BASE64.decode(token).map_err(|_| ())?;
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(());
    }
    Ok(MetaKey::Decoded(key.into_boxed_slice()))
}

/// Seconds left before `item` expires, -1 for never.
fn ttl_left(item: &Item, now: u32) -> i64 {
    match item.exptime() {
        0 => -1,
        at => at.saturating_sub(now) as i64,
    }
}

/// What an `mg` did to the item it answers, for the flags that report it where they stand
/// among the flags (memcached applies `T`, `N` and `R` in the order given: a `t` before
/// `T` reports the expiry the item had, an `R` after `T` weighs the new one).
#[derive(Clone, Copy, Debug, Default)]
struct GetEffects {
    /// The item's expiry before this request's `T` or `N` set it (`None`: unchanged).
    expiry_before: Option<u32>,
    /// The expiry `T` set.
    touch: Option<u32>,
    /// The request made the item (`N` on a miss): the expiry `N` set. The maker wins.
    created: Option<u32>,
    /// `R`: the item's win token is wanted if it expires before this server time.
    recache: Option<u32>,
}

/// The reply of an `mg` (batched or not) for the item found, or `None`.
///
/// Stale-while-revalidate (memcached's win tokens): an item made by this request's `N`
/// answers `W` (its maker fills it); a stale item (`X`, marked by `md ... I` or `ms ... I`),
/// or one whose expiry comes before the time `R` names, hands its win token to the first
/// read (`W`, its client recaches); once the token is taken, every read answers `Z`.
fn meta_get_reply(
    out: &mut Vec<u8>,
    session: &Session<'_>,
    key: &[u8],
    key_as_sent: &[u8],
    item: Option<&Item>,
    flags: &MetaFlags<'_>,
    effects: GetEffects,
) {
    let Some(item) = item else {
        if !flags.has(b'q') {
            out.extend_from_slice(b"EN");
            flags.echo(out, key_as_sent);
            out.extend_from_slice(b"\r\n");
        }
        return;
    };
    let with_value = flags.has(b'v');
    if with_value {
        out.extend_from_slice(b"VA ");
        push_number(out, item.data().len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    // A hit answers the key in the form it was stored in (base64 only if a meta command
    // stored it so), as memcached does; a miss answers it as sent.
    let encoded;
    let (key_text, base64): (&[u8], bool) = if !flags.has(b'k') {
        (key_as_sent, false)
    } else if item.binary_key() {
        encoded = BASE64.encode(key);
        (encoded.as_bytes(), true)
    } else {
        (key, false)
    };
    let mut exptime = effects.expiry_before.unwrap_or(item.exptime());
    let mut wants_token = false;
    flags.write_returned_key(out, key_text, base64, |out, flag| match flag {
        b'T' => exptime = effects.touch.unwrap_or(exptime),
        b'N' => exptime = effects.created.unwrap_or(exptime),
        b'R' => {
            wants_token |= effects.created.is_none()
                && exptime != 0
                && effects.recache.is_some_and(|recache| exptime < recache);
        }
        b'c' => {
            out.extend_from_slice(b" c");
            push_number(out, item.cas());
        }
        b'f' => {
            out.extend_from_slice(b" f");
            push_number(out, item.flags() as u64);
        }
        b'h' => out.extend_from_slice(if item.was_fetched() { b" h1" } else { b" h0" }),
        b'l' => {
            out.extend_from_slice(b" l");
            push_number(out, session.now().saturating_sub(item.last_access()) as u64);
        }
        b's' => {
            out.extend_from_slice(b" s");
            push_number(out, item.data().len() as u64);
        }
        b't' => {
            out.extend_from_slice(b" t");
            let ttl = if exptime == 0 {
                -1
            } else {
                exptime.saturating_sub(session.now()) as i64
            };
            push_signed(out, ttl);
        }
        _ => {}
    });
    // The maker of the item took its token when storing it; anyone else takes it here, if
    // wanted and still there. memcached answers `Z` before `X`, `W` last, and never `Z`
    // with `W`.
    let won = if effects.created.is_some() {
        true
    } else if wants_token || item.is_stale() {
        item.take_win_token()
    } else {
        false
    };
    if !won && item.win_token_taken() {
        out.extend_from_slice(b" Z");
    }
    if item.is_stale() {
        out.extend_from_slice(b" X");
    }
    if won {
        out.extend_from_slice(b" W");
    }
    out.extend_from_slice(b"\r\n");
    if with_value {
        out.extend_from_slice(item.data());
        out.extend_from_slice(b"\r\n");
    }
}

/// `mg` with flags that write or need checking before the batch: `T` (touch), `N` (vivify
/// on miss), `E` (the CAS unique of the item `N` makes), `R` (recache win).
fn meta_get_writing(
    request: &Request<'_>,
    out: &mut Vec<u8>,
    session: &mut Session<'_>,
) -> Outcome {
    let (flags, key) = match meta_header(request, 2) {
        Ok(header) => header,
        Err(line) => {
            out.extend_from_slice(line);
            return Outcome::Done;
        }
    };
    let key = key.bytes();
    let time = |flag| flags.get(flag).map(parse_exptime);
    let (touch, vivify, recache) = (time(b'T'), time(b'N'), time(b'R'));
    let cas = flags.get(b'E').map(parse_u64);
    if [touch, vivify, recache]
        .iter()
        .any(|t| matches!(t, Some(None)))
        || matches!(cas, Some(None))
    {
        out.extend_from_slice(b"CLIENT_ERROR bad token in command line format\r\n");
        return Outcome::Done;
    }
    let server_time = |t: Option<Option<i64>>| {
        t.flatten()
            .map(|t| session.cache().server_time(t, session.now()))
    };
    let (touch, vivify, recache) = (
        server_time(touch),
        server_time(vivify),
        server_time(recache),
    );
    session.count(Counter::CmdGet, 1);
    let before = touch.and(session.peek(key).map(Item::exptime));
    let mut found = match touch {
        Some(exptime) => {
            session.count(Counter::CmdTouch, 1);
            session.touch(key, exptime)
        }
        None => session.peek(key),
    };
    let mut effects = GetEffects {
        expiry_before: before,
        touch,
        created: None,
        recache,
    };
    if found.is_none() {
        if let Some(vivify_exptime) = vivify {
            // Make an empty placeholder whose win token its maker holds, so that one client
            // fills it (memcached's `W`) and the others see `Z`: an add of an empty value. Its
            // expiry is that of whichever of `T` and `N` comes last, as memcached sets both
            // in order on the item it made.
            let exptime = flags
                .flags
                .iter()
                .filter_map(|&(flag, _)| match flag {
                    b'T' => touch,
                    b'N' => Some(vivify_exptime),
                    _ => None,
                })
                .next_back()
                .unwrap_or(vivify_exptime);
            let meta = MetaStore {
                cas: cas.flatten(),
                token_sent: true,
                ..MetaStore::default()
            };
            let stored = session.store_with(StoreMode::Add, key, 0, exptime, b"", None, meta);
            // Our placeholder, or another client's item if it made one first (then a plain
            // hit). The look-up may also find our placeholder already replaced (an `md I`
            // between: a fresh unique), whose token is not ours to claim: only the item with
            // the unique we stored is answered as made here.
            found = session.peek(key);
            if let Stored::Stored(unique) = stored {
                if found.is_some_and(|item| item.cas() == unique) {
                    effects = GetEffects {
                        expiry_before: Some(0),
                        created: Some(vivify_exptime),
                        ..effects
                    };
                }
            }
        }
    }
    let Some(item) = found else {
        session.count(Counter::GetMisses, 1);
        meta_get_reply(out, session, key, request.token(1), None, &flags, effects);
        return Outcome::Done;
    };
    session.count(Counter::GetHits, 1);
    meta_get_reply(
        out,
        session,
        key,
        request.token(1),
        Some(item),
        &flags,
        effects,
    );
    session.mark_read(item);
    Outcome::Done
}

/// A meta command's flags (from token `first_flag` on) and its key, or the error line for
/// a malformed one.
fn meta_header<'a>(
    request: &Request<'a>,
    first_flag: usize,
) -> Result<(MetaFlags<'a>, MetaKey<'a>), &'static [u8]> {
    let flags =
        MetaFlags::parse(request.line, &request.tokens[first_flag..]).map_err(|()| INVALID_FLAG)?;
    let key = meta_key(request.token(1), flags.has(b'b')).map_err(|()| BAD_FORMAT)?;
    Ok((flags, key))
}

/// `ms <key> <datalen> <flags>*`.
fn meta_set(request: &Request<'_>, out: &mut Vec<u8>, session: &mut Session<'_>) -> Outcome {
    let Some(length) = parse_u64(request.token(2)).filter(|&l| l < i32::MAX as u64 - 2) else {
        out.extend_from_slice(BAD_FORMAT);
        return Outcome::Done;
    };
    let length = length as usize;
    let block = length + 2;
    let (flags, key) = match meta_header(request, 3) {
        Ok(header) => header,
        Err(line) => {
            out.extend_from_slice(line);
            return Outcome::Swallow(block);
        }
    };
    if crate::cache::too_large(session.cache(), key.bytes().len(), length) {
        out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
        session.count(Counter::StoreTooLarge, 1);
        return Outcome::Swallow(block);
    }
    if request.data.len() < block {
        return Outcome::NeedData;
    }
    if &request.data[length..block] != b"\r\n" {
        out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        return Outcome::DoneWithData(block);
    }
    let number = |flag| flags.get(flag).map(parse_u64);
    let client_flags = flags.get(b'F').map(parse_u32);
    let exptime = flags.get(b'T').map(parse_exptime);
    let compare = number(b'C');
    let cas = number(b'E');
    if matches!(exptime, Some(None)) || matches!(compare, Some(None)) || matches!(cas, Some(None)) {
        out.extend_from_slice(b"CLIENT_ERROR bad token in command line format\r\n");
        return Outcome::DoneWithData(block);
    }
    // memcached names no token for bad client flags (measured).
    if matches!(client_flags, Some(None)) {
        out.extend_from_slice(BAD_FORMAT);
        return Outcome::DoneWithData(block);
    }
    let mode = match flags.get(b'M') {
        None => StoreMode::Set,
        Some(mode) => match mode {
            b"S" | b"s" => StoreMode::Set,
            b"E" | b"e" => StoreMode::Add,
            b"R" | b"r" => StoreMode::Replace,
            b"A" | b"a" => StoreMode::Append,
            b"P" | b"p" => StoreMode::Prepend,
            _ => {
                out.extend_from_slice(b"CLIENT_ERROR invalid mode for ms STORE\r\n");
                return Outcome::DoneWithData(block);
            }
        },
    };
    let exptime = session
        .cache()
        .server_time(exptime.flatten().unwrap_or(0), session.now());
    let stored = session.store_with(
        mode,
        key.bytes(),
        client_flags.flatten().unwrap_or(0),
        exptime,
        &request.data[..length],
        compare.flatten(),
        MetaStore {
            binary_key: flags.has(b'b'),
            // As memcached, `E0` asks for nothing: the item gets a fresh unique.
            cas: cas.flatten().filter(|&cas| cas != 0),
            invalidate: flags.has(b'I'),
            token_sent: false,
        },
    );
    let (code, cas): (&[u8], _) = match stored {
        Stored::Stored(cas) => (b"HD", Some(cas)),
        Stored::NotStored => (b"NS", None),
        Stored::Exists => (b"EX", None),
        Stored::NotFound => (b"NF", None),
        Stored::TooLarge => {
            out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
            return Outcome::DoneWithData(block);
        }
        Stored::OutOfMemory => {
            out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n");
            return Outcome::DoneWithData(block);
        }
    };
    if code == b"HD" && flags.has(b'q') {
        return Outcome::DoneWithData(block);
    }
    out.extend_from_slice(code);
    flags.write_returned(out, request.token(1), |out, flag| {
        if flag == b'c' {
            // The new item's CAS unique; memcached answers 0 when nothing was stored.
            out.extend_from_slice(b" c");
            push_number(out, cas.unwrap_or(0));
        }
    });
    out.extend_from_slice(b"\r\n");
    Outcome::DoneWithData(block)
}

/// `md <key> <flags>*`: removes the item, or with `I` marks it stale (`T` its new expiry),
/// with `x` empties it (`F` and `T` the empty item's client flags and expiry), with both
/// leaves an empty stale tombstone; `E` the CAS unique the item keeps.
fn meta_delete(request: &Request<'_>, out: &mut Vec<u8>, session: &mut Session<'_>) -> Outcome {
    let (flags, key) = match meta_header(request, 2) {
        Ok(header) => header,
        Err(line) => {
            out.extend_from_slice(line);
            return Outcome::Done;
        }
    };
    let compare = flags.get(b'C').map(parse_u64);
    let cas = flags.get(b'E').map(parse_u64);
    let exptime = flags.get(b'T').map(parse_exptime);
    if matches!(compare, Some(None)) || matches!(cas, Some(None)) || matches!(exptime, Some(None)) {
        out.extend_from_slice(b"CLIENT_ERROR bad token in command line format\r\n");
        return Outcome::Done;
    }
    let Some(client_flags) = flags.get(b'F').map_or(Some(0), parse_u32) else {
        out.extend_from_slice(BAD_FORMAT);
        return Outcome::Done;
    };
    let compare = compare.flatten();
    let exptime = exptime
        .flatten()
        .map(|t| session.cache().server_time(t, session.now()));
    let deleted = if flags.has(b'I') || flags.has(b'x') {
        let tombstone = Tombstone {
            stale: flags.has(b'I'),
            empty: flags
                .has(b'x')
                .then_some((client_flags, exptime.unwrap_or(0))),
            exptime,
            cas: cas.flatten(),
        };
        session.tombstone(key.bytes(), compare, tombstone)
    } else {
        session.delete(key.bytes(), compare)
    };
    let code: &[u8] = match deleted {
        Deleted::Deleted => b"HD",
        Deleted::NotFound => b"NF",
        Deleted::Exists => b"EX",
    };
    if flags.has(b'q') && code == b"HD" {
        return Outcome::Done;
    }
    out.extend_from_slice(code);
    flags.echo(out, request.token(1));
    out.extend_from_slice(b"\r\n");
    Outcome::Done
}

/// `ma <key> <flags>*`: `D` delta, `MI`/`M+` incr (default) or `MD`/`M-` decr, `N` vivify
/// with `J` initial value, `C` compare CAS, returns `v` value, `c` CAS, `t` TTL.
fn meta_arithmetic(request: &Request<'_>, out: &mut Vec<u8>, session: &mut Session<'_>) -> Outcome {
    let (flags, key) = match meta_header(request, 2) {
        Ok(header) => header,
        Err(line) => {
            out.extend_from_slice(line);
            return Outcome::Done;
        }
    };
    let delta = flags.get(b'D').map(parse_u64);
    let initial = flags.get(b'J').map(parse_u64);
    let compare = flags.get(b'C').map(parse_u64);
    let cas = flags.get(b'E').map(parse_u64);
    let vivify = flags.get(b'N').map(parse_exptime);
    if [delta, initial, compare, cas]
        .iter()
        .any(|v| matches!(v, Some(None)))
        || matches!(vivify, Some(None))
    {
        // memcached 1.6's `ma` answers every bad flag so (measured).
        out.extend_from_slice(b"CLIENT_ERROR invalid or duplicate flag\r\n");
        return Outcome::Done;
    }
    let incr = match flags.get(b'M') {
        None | Some(b"I" | b"i" | b"+") => true,
        Some(b"D" | b"d" | b"-") => false,
        Some(_) => {
            out.extend_from_slice(b"CLIENT_ERROR invalid mode for ma\r\n");
            return Outcome::Done;
        }
    };
    let create = vivify.flatten().map(|t| {
        (
            initial.flatten().unwrap_or(0),
            session.cache().server_time(t, session.now()),
        )
    });
    let result = session.delta(
        key.bytes(),
        incr,
        delta.flatten().unwrap_or(1),
        compare.flatten(),
        create,
        true,
        cas.flatten(),
    );
    let code: &[u8] = match result {
        Delta::Value(..) => {
            if flags.has(b'v') {
                b"VA"
            } else {
                b"HD"
            }
        }
        Delta::NotFound => b"NF",
        Delta::Exists => b"EX",
        Delta::NonNumeric => {
            out.extend_from_slice(
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            );
            return Outcome::Done;
        }
        Delta::OutOfMemory => {
            out.extend_from_slice(b"SERVER_ERROR out of memory\r\n");
            return Outcome::Done;
        }
    };
    // As memcached: `q` makes a success (HD or VA) quiet, except the creation of an absent
    // key by `N`.
    if matches!(result, Delta::Value(_, _, false)) && flags.has(b'q') {
        return Outcome::Done;
    }
    out.extend_from_slice(code);
    let (digits, cas) = match result {
        Delta::Value(value, cas, _) => (Some(value.to_string()), cas),
        _ => (None, 0),
    };
    if let (Some(digits), true) = (&digits, code == b"VA") {
        out.push(b' ');
        push_number(out, digits.len() as u64);
    }
    let ttl = digits.as_ref().map(|_| {
        session
            .peek(key.bytes())
            .map_or(-1, |item| ttl_left(item, session.now()))
    });
    flags.write_returned(out, request.token(1), |out, flag| match (flag, ttl) {
        (b'c', Some(_)) => {
            out.extend_from_slice(b" c");
            push_number(out, cas);
        }
        (b't', Some(ttl)) => {
            out.extend_from_slice(b" t");
            push_signed(out, ttl);
        }
        _ => {}
    });
    out.extend_from_slice(b"\r\n");
    if let (Some(digits), true) = (digits, code == b"VA") {
        out.extend_from_slice(digits.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    Outcome::Done
}

/// `me <key>`: an item's metadata, for debugging.
fn meta_debug(request: &Request<'_>, out: &mut Vec<u8>, session: &mut Session<'_>) -> Outcome {
    let base64 = request.len() > 2 && request.token(2) == b"b";
    let Ok(key) = meta_key(request.token(1), base64) else {
        out.extend_from_slice(BAD_FORMAT);
        return Outcome::Done;
    };
    match session.peek(key.bytes()) {
        None => out.extend_from_slice(b"EN\r\n"),
        Some(item) => {
            out.extend_from_slice(b"ME ");
            out.extend_from_slice(request.token(1));
            out.extend_from_slice(b" exp=");
            push_signed(out, ttl_left(item, session.now()));
            out.extend_from_slice(b" la=");
            push_number(out, session.now().saturating_sub(item.last_access()) as u64);
            out.extend_from_slice(b" cas=");
            push_number(out, item.cas());
            out.extend_from_slice(if item.was_fetched() {
                b" fetch=yes"
            } else {
                b" fetch=no"
            });
            out.extend_from_slice(b" cls=1 size=");
            push_number(out, (item.data().len() + request.token(1).len()) as u64);
            out.extend_from_slice(b"\r\n");
        }
    }
    Outcome::Done
}
