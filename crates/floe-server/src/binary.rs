//! memcached's binary protocol (the 24-byte header, request magic `0x80`), still the
//! protocol of many client libraries (libmemcached's binary mode, spymemcached, xmemcached).
//!
//! A connection speaks it when its first byte is `0x80`. Runs of get requests (`Get`,
//! `GetQ`, `GetK`, `GetKQ`: the binary multi-get is a run of quiet gets ended by a `Noop`)
//! are gathered and looked up in batches, as the text protocol's; any other request first
//! answers them. Replies are bounded as the text protocol's: a call stops between requests
//! once its output passed the room it was given. A CAS of 0 in a request header means "no CAS" (the binary protocol's rule). Supported: every opcode of memcached 1.6's binary protocol except SASL
//! (`0x20`-`0x22`, answered "unknown command"). A request whose header is malformed (wrong
//! magic) closes the connection, as memcached does; a body too large for `-I` is answered
//! `Value too large` and discarded as it arrives.

use crate::{
    cache::{Counter, Deleted, Delta, Item, Session, StoreMode, Stored},
    detail::{self, Op},
    protocol::{MAX_KEY_LEN, VERSION},
    text::{Served, LOOKUP_BATCH},
};

const HEADER: usize = 24;
const REQUEST_MAGIC: u8 = 0x80;
const RESPONSE_MAGIC: u8 = 0x81;

mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response statuses.
mod status {
    pub const OK: u16 = 0x0000;
    pub const NOT_FOUND: u16 = 0x0001;
    pub const EXISTS: u16 = 0x0002;
    pub const TOO_LARGE: u16 = 0x0003;
    pub const INVALID: u16 = 0x0004;
    pub const NOT_STORED: u16 = 0x0005;
    pub const NON_NUMERIC: u16 = 0x0006;
    pub const UNKNOWN: u16 = 0x0081;
    pub const NO_MEMORY: u16 = 0x0082;
}

fn status_text(status: u16) -> &'static [u8] {
    match status {
        status::NOT_FOUND => b"Not found",
        status::EXISTS => b"Data exists for key.",
        status::TOO_LARGE => b"Too large.",
        status::INVALID => b"Invalid arguments",
        status::NOT_STORED => b"Not stored.",
        status::NON_NUMERIC => b"Non-numeric server-side value for incr or decr",
        status::UNKNOWN => b"Unknown command",
        status::NO_MEMORY => b"Out of memory",
        _ => b"",
    }
}

/// A parsed request header.
#[derive(Clone, Copy)]
struct Header {
    opcode: u8,
    key_len: usize,
    extras_len: usize,
    body_len: usize,
    opaque: u32,
    cas: u64,
}

fn parse_header(bytes: &[u8]) -> Option<Header> {
    if bytes[0] != REQUEST_MAGIC {
        return None;
    }
    let header = Header {
        opcode: bytes[1],
        key_len: u16::from_be_bytes([bytes[2], bytes[3]]) as usize,
        extras_len: bytes[4] as usize,
        body_len: u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize,
        opaque: u32::from_be_bytes(bytes[12..16].try_into().unwrap()),
        cas: u64::from_be_bytes(bytes[16..24].try_into().unwrap()),
    };
    (header.key_len + header.extras_len <= header.body_len).then_some(header)
}

/// Append a response.
fn respond(
    out: &mut Vec<u8>,
    request: &Header,
    status: u16,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    out.push(RESPONSE_MAGIC);
    out.push(request.opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0);
    out.extend_from_slice(&status.to_be_bytes());
    out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    out.extend_from_slice(&request.opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

fn error(out: &mut Vec<u8>, request: &Header, status: u16) {
    respond(out, request, status, 0, &[], &[], status_text(status));
}

/// A get waiting in the batch.
struct Read {
    header: Header,
    /// Where its request starts in the input.
    start: usize,
    key_range: (usize, usize),
}

/// Answer the complete requests in `input`, appending responses to `out`, until the
/// responses pass `room` bytes: no request starts after that (a run of quiet gets, the
/// binary multi-get, stops between two gets), so one call makes at most the room plus one
/// value of output; the requests left are answered by a later call.
pub fn serve(input: &[u8], out: &mut Vec<u8>, session: &mut Session<'_>, room: usize) -> Served {
    let limit = out.len().saturating_add(room);
    let mut pos = 0;
    let mut reads: Vec<Read> = Vec::new();
    // Answer the gathered gets; leave the loop if they filled the output's room.
    macro_rules! answer_reads {
        () => {
            if let Some(start) = answer_reads(&mut reads, input, out, session, limit) {
                break Served::stopped_at(start);
            }
        };
    }
    let mut served = loop {
        if reads.is_empty() && out.len() > limit {
            break Served::stopped_at(pos);
        }
        let rest = &input[pos..];
        if rest.len() < HEADER {
            break Served::upto(pos);
        }
        let Some(header) = parse_header(rest) else {
            answer_reads!();
            break Served::closing_at(input.len());
        };
        let settings = session.cache().settings();
        if header.body_len > settings.max_item_size + MAX_KEY_LEN + 64 {
            answer_reads!();
            error(out, &header, status::TOO_LARGE);
            session.count(Counter::StoreTooLarge, 1);
            let available = rest.len() - HEADER;
            if available >= header.body_len {
                pos += HEADER + header.body_len;
                continue;
            }
            break Served {
                swallow: header.body_len - available,
                ..Served::upto(input.len())
            };
        }
        if rest.len() < HEADER + header.body_len {
            break Served::upto(pos);
        }
        let body = &rest[HEADER..HEADER + header.body_len];
        let extras = &body[..header.extras_len];
        let key = &body[header.extras_len..header.extras_len + header.key_len];
        let value = &body[header.extras_len + header.key_len..];
        let start = pos;
        let key_start = pos + HEADER + header.extras_len;
        pos += HEADER + header.body_len;
        if matches!(header.opcode, op::GET | op::GETQ | op::GETK | op::GETKQ) {
            if key.is_empty() || key.len() > MAX_KEY_LEN || !extras.is_empty() || !value.is_empty()
            {
                answer_reads!();
                error(out, &header, status::INVALID);
            } else {
                reads.push(Read {
                    header,
                    start,
                    key_range: (key_start, key_start + key.len()),
                });
                if reads.len() >= LOOKUP_BATCH {
                    answer_reads!();
                }
            }
            continue;
        }
        answer_reads!();
        if execute(&header, extras, key, value, out, session) {
            break Served::closing_at(pos);
        }
    };
    // Gets gathered before an incomplete request.
    if let Some(start) = answer_reads(&mut reads, input, out, session, limit) {
        served = Served::stopped_at(start);
    }
    served
}

/// Answer the gathered gets in one batch lookup until the output passes `limit` bytes (one
/// is answered at least). The batch is empty afterwards; `Some` is where the first get not
/// answered starts in the input.
fn answer_reads(
    reads: &mut Vec<Read>,
    input: &[u8],
    out: &mut Vec<u8>,
    session: &Session<'_>,
    limit: usize,
) -> Option<usize> {
    if reads.is_empty() {
        return None;
    }
    let keys: Vec<&[u8]> = reads
        .iter()
        .map(|r| &input[r.key_range.0..r.key_range.1])
        .collect();
    let mut found = Vec::new();
    session.get_many(&keys, &mut found, false);
    let mut stop = None;
    for (i, ((read, key), item)) in reads.iter().zip(&keys).zip(&found).enumerate() {
        if i > 0 && out.len() > limit {
            stop = Some(read.start);
            break;
        }
        // Counted as answered: a get left for later is looked up, and counted, again.
        session.count(Counter::CmdGet, 1);
        detail::record(
            key,
            Op::Get {
                hit: item.is_some(),
            },
        );
        if item.is_none() {
            session.missed(key);
        }
        session.count(
            if item.is_some() {
                Counter::GetHits
            } else {
                Counter::GetMisses
            },
            1,
        );
        let with_key = matches!(read.header.opcode, op::GETK | op::GETKQ);
        let quiet = matches!(read.header.opcode, op::GETQ | op::GETKQ);
        match item {
            Some(item) => {
                write_item(out, &read.header, item, if with_key { key } else { &[] });
                session.mark_read(item);
            }
            None if quiet => {}
            None if with_key => respond(
                out,
                &read.header,
                status::NOT_FOUND,
                0,
                &[],
                key,
                status_text(status::NOT_FOUND),
            ),
            None => error(out, &read.header, status::NOT_FOUND),
        }
    }
    reads.clear();
    stop
}

fn write_item(out: &mut Vec<u8>, header: &Header, item: &Item, key: &[u8]) {
    respond(
        out,
        header,
        status::OK,
        item.cas(),
        &item.flags().to_be_bytes(),
        key,
        item.data(),
    );
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes.try_into().expect("4 bytes"))
}

fn be_u64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().expect("8 bytes"))
}

/// Execute one non-get request; `true` to close the connection after it.
fn execute(
    header: &Header,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
    out: &mut Vec<u8>,
    session: &mut Session<'_>,
) -> bool {
    let key_ok = !key.is_empty() && key.len() <= MAX_KEY_LEN;
    let quiet = matches!(
        header.opcode,
        op::SETQ
            | op::ADDQ
            | op::REPLACEQ
            | op::DELETEQ
            | op::INCREMENTQ
            | op::DECREMENTQ
            | op::QUITQ
            | op::FLUSHQ
            | op::APPENDQ
            | op::PREPENDQ
            | op::GATQ
            | op::GATKQ
    );
    if matches!(
        header.opcode,
        op::SET
            | op::SETQ
            | op::ADD
            | op::ADDQ
            | op::REPLACE
            | op::REPLACEQ
            | op::APPEND
            | op::APPENDQ
            | op::PREPEND
            | op::PREPENDQ
    ) {
        detail::record(key, Op::Set);
    } else if matches!(header.opcode, op::DELETE | op::DELETEQ) {
        detail::record(key, Op::Delete);
    }
    match header.opcode {
        op::SET | op::SETQ | op::ADD | op::ADDQ | op::REPLACE | op::REPLACEQ => {
            if extras.len() != 8 || !key_ok {
                error(out, header, status::INVALID);
                return false;
            }
            let mode = match header.opcode {
                op::SET | op::SETQ => StoreMode::Set,
                op::ADD | op::ADDQ => StoreMode::Add,
                _ => StoreMode::Replace,
            };
            let flags = be_u32(&extras[..4]);
            let exptime = session
                .cache()
                .server_time(i64::from(be_u32(&extras[4..])), session.now());
            let stored = session.store(
                mode,
                key,
                flags,
                exptime,
                value,
                (header.cas != 0).then_some(header.cas),
            );
            store_reply(out, header, quiet, mode, stored);
        }
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ => {
            if !extras.is_empty() || !key_ok {
                error(out, header, status::INVALID);
                return false;
            }
            let mode = if matches!(header.opcode, op::APPEND | op::APPENDQ) {
                StoreMode::Append
            } else {
                StoreMode::Prepend
            };
            let stored = session.store(
                mode,
                key,
                0,
                0,
                value,
                (header.cas != 0).then_some(header.cas),
            );
            store_reply(out, header, quiet, mode, stored);
        }
        op::DELETE | op::DELETEQ => {
            if !extras.is_empty() || !value.is_empty() || !key_ok {
                error(out, header, status::INVALID);
                return false;
            }
            match session.delete(key, (header.cas != 0).then_some(header.cas)) {
                Deleted::Deleted if quiet => {}
                Deleted::Deleted => respond(out, header, status::OK, 0, &[], &[], &[]),
                Deleted::NotFound => error(out, header, status::NOT_FOUND),
                Deleted::Exists => error(out, header, status::EXISTS),
            }
        }
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => {
            if extras.len() != 20 || !value.is_empty() || !key_ok {
                error(out, header, status::INVALID);
                return false;
            }
            let delta = be_u64(&extras[..8]);
            let initial = be_u64(&extras[8..16]);
            let expiry = be_u32(&extras[16..]);
            // An expiry of all ones: do not create an absent counter.
            let create = (expiry != u32::MAX).then(|| {
                (
                    initial,
                    session
                        .cache()
                        .server_time(i64::from(expiry), session.now()),
                )
            });
            let incr = matches!(header.opcode, op::INCREMENT | op::INCREMENTQ);
            match session.delta(
                key,
                incr,
                delta,
                (header.cas != 0).then_some(header.cas),
                create,
                true,
                None,
            ) {
                Delta::Value(..) if quiet => {}
                Delta::Value(value, cas, _) => {
                    respond(out, header, status::OK, cas, &[], &[], &value.to_be_bytes())
                }
                Delta::NotFound => error(out, header, status::NOT_FOUND),
                Delta::Exists => error(out, header, status::EXISTS),
                Delta::NonNumeric => error(out, header, status::NON_NUMERIC),
                Delta::OutOfMemory => error(out, header, status::NO_MEMORY),
            }
        }
        op::TOUCH | op::GAT | op::GATQ | op::GATK | op::GATKQ => {
            if extras.len() != 4 || !value.is_empty() || !key_ok {
                error(out, header, status::INVALID);
                return false;
            }
            let exptime = session
                .cache()
                .server_time(i64::from(be_u32(extras)), session.now());
            session.count(Counter::CmdTouch, 1);
            match session.touch(key, exptime) {
                Some(item) => {
                    session.count(Counter::TouchHits, 1);
                    match header.opcode {
                        op::TOUCH => respond(out, header, status::OK, item.cas(), &[], &[], &[]),
                        op::GAT | op::GATQ => write_item(out, header, item, &[]),
                        _ => write_item(out, header, item, key),
                    }
                    session.mark_read(item);
                }
                None => {
                    session.count(Counter::TouchMisses, 1);
                    if !matches!(header.opcode, op::GATQ | op::GATKQ) {
                        error(out, header, status::NOT_FOUND);
                    }
                }
            }
        }
        op::FLUSH | op::FLUSHQ => {
            if !(extras.is_empty() || extras.len() == 4) || !key.is_empty() || !value.is_empty() {
                error(out, header, status::INVALID);
                return false;
            }
            let delay = if extras.len() == 4 {
                i64::from(be_u32(extras))
            } else {
                0
            };
            session.count(Counter::CmdFlush, 1);
            session.flush_all(delay);
            if !quiet {
                respond(out, header, status::OK, 0, &[], &[], &[]);
            }
        }
        op::NOOP => respond(out, header, status::OK, 0, &[], &[], &[]),
        op::VERSION => respond(out, header, status::OK, 0, &[], &[], VERSION.as_bytes()),
        op::VERBOSITY => {
            if extras.len() != 4 {
                error(out, header, status::INVALID);
                return false;
            }
            crate::log::set_verbosity(be_u32(extras).min(3) as u8);
            respond(out, header, status::OK, 0, &[], &[], &[]);
        }
        op::STAT => {
            // The text `stats` reply, re-framed: one response per `STAT name value` line,
            // then an empty one.
            let mut text = Vec::new();
            let group = if key.is_empty() {
                Vec::new()
            } else {
                vec![(0, key.len())]
            };
            crate::stats::write(&mut text, session.cache(), key, &group);
            if text.starts_with(b"ERROR") {
                error(out, header, status::NOT_FOUND);
                return false;
            }
            for line in text.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let Some(stat) = line.strip_prefix(b"STAT ") else {
                    continue;
                };
                let split = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
                let value = stat.get(split + 1..).unwrap_or(&[]);
                respond(out, header, status::OK, 0, &[], &stat[..split], value);
            }
            respond(out, header, status::OK, 0, &[], &[], &[]);
        }
        op::QUIT => {
            respond(out, header, status::OK, 0, &[], &[], &[]);
            return true;
        }
        op::QUITQ => return true,
        _ => error(out, header, status::UNKNOWN),
    }
    false
}

fn store_reply(out: &mut Vec<u8>, header: &Header, quiet: bool, mode: StoreMode, stored: Stored) {
    match stored {
        Stored::Stored(_) if quiet => {}
        Stored::Stored(cas) => respond(out, header, status::OK, cas, &[], &[], &[]),
        // memcached's binary protocol answers a failed add "exists", a failed replace "not
        // found", and a failed append or prepend "not stored".
        Stored::NotStored if mode == StoreMode::Add => error(out, header, status::EXISTS),
        Stored::NotStored if mode == StoreMode::Replace => error(out, header, status::NOT_FOUND),
        Stored::NotStored => error(out, header, status::NOT_STORED),
        Stored::Exists => error(out, header, status::EXISTS),
        Stored::NotFound => error(out, header, status::NOT_FOUND),
        Stored::TooLarge => error(out, header, status::TOO_LARGE),
        Stored::OutOfMemory => error(out, header, status::NO_MEMORY),
    }
}
