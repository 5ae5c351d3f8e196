//! memcached's `lru_crawler` command, over floe-server's housekeeping sweep.
//!
//! memcached's LRU crawler walks its LRUs in the background, freeing expired items, and
//! answers `lru_crawler metadump` with a line per item. floe-server's equivalent is the
//! housekeeping thread's sweep ([`Cache::reclaim_expired`], every 5 s: expired items
//! unlinked): `enable` and `disable` start and stop its sweeps (`lru_crawler_running` is 1
//! during one), `crawl` asks for one now, and `metadump` lists the items. `sleep` and
//! `tocrawl` are taken and reported in `stats settings` (memcached's pause between items and
//! items per class per run); the sweep does not use them: it holds a lock only for a slice of
//! 256 queue nodes, so it needs no pause, and it always covers every item (a pass takes about
//! as long as a lookup per item).
//!
//! With `-X` (dumping disabled) `metadump` is refused, as memcached refuses it.

use std::{
    io::Write,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};

use crate::cache::Cache;

static ENABLED: AtomicBool = AtomicBool::new(true);
static REQUESTED: AtomicBool = AtomicBool::new(false);
static RUNNING: AtomicBool = AtomicBool::new(false);
static SLEEP: AtomicU32 = AtomicU32::new(100);
static TO_CRAWL: AtomicU32 = AtomicU32::new(0);
static DUMP_ENABLED: AtomicBool = AtomicBool::new(true);

/// Back to a fresh process's state: sweeps enabled, none asked for, dumps allowed, `sleep`
/// and `tocrawl` at memcached's defaults (for tests and the fuzz target, which answer
/// several request streams in one process).
pub fn reset() {
    ENABLED.store(true, Ordering::Relaxed);
    REQUESTED.store(false, Ordering::Relaxed);
    DUMP_ENABLED.store(true, Ordering::Relaxed);
    SLEEP.store(100, Ordering::Relaxed);
    TO_CRAWL.store(0, Ordering::Relaxed);
}

/// Whether the sweep runs on its own (`lru_crawler enable|disable`).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether `stats cachedump` and `metadump` are allowed (`-X` turns them off).
pub fn dump_enabled() -> bool {
    DUMP_ENABLED.load(Ordering::Relaxed)
}

/// `-X`.
pub fn disable_dumping() {
    DUMP_ENABLED.store(false, Ordering::Relaxed);
}

/// `lru_crawler sleep` and `tocrawl` as last set (for `stats settings`).
pub fn sleep_and_to_crawl() -> (u32, u32) {
    (
        SLEEP.load(Ordering::Relaxed),
        TO_CRAWL.load(Ordering::Relaxed),
    )
}

/// Whether a sweep is running now (`stats`' `lru_crawler_running`).
pub fn running() -> bool {
    RUNNING.load(Ordering::Relaxed)
}

/// The housekeeping thread's turn: sweep if a sweep is due (`periodic`, when the crawler is
/// enabled) or was asked for by `lru_crawler crawl`. Returns the items it unlinked, if it
/// swept.
pub fn sweep(cache: &Cache, periodic: bool) -> Option<usize> {
    let requested = REQUESTED.swap(false, Ordering::Relaxed);
    if !(requested || periodic && enabled()) {
        return None;
    }
    RUNNING.store(true, Ordering::Relaxed);
    let unlinked = cache.reclaim_expired();
    RUNNING.store(false, Ordering::Relaxed);
    Some(unlinked)
}

/// Answer `lru_crawler <arguments>` (`args` are the tokens after the command). A metadump
/// is written in pieces: once `out` holds more than `limit` bytes it stops between runs of
/// the index and returns where to go on (`resume`, the next call's, from the last return).
pub fn command(
    out: &mut Vec<u8>,
    cache: &Cache,
    args: &[&[u8]],
    resume: Option<u64>,
    limit: usize,
) -> Option<u64> {
    let reply: &[u8] = match args {
        [b"metadump", which] => return metadump(out, cache, which, resume, limit),
        [b"crawl", classes] => match classes_valid(classes) {
            true => {
                REQUESTED.store(true, Ordering::Relaxed);
                b"OK\r\n"
            }
            false => b"BADCLASS invalid class id\r\n",
        },
        // As memcached: enabling a running crawler is an error.
        [b"enable"] if enabled() => b"ERROR failed to start lru crawler thread\r\n",
        [b"enable"] => {
            ENABLED.store(true, Ordering::Relaxed);
            b"OK\r\n"
        }
        [b"disable"] => {
            ENABLED.store(false, Ordering::Relaxed);
            b"OK\r\n"
        }
        [b"sleep", value] => match parse_u32(value) {
            Some(micros) if micros > 1_000_000 => {
                b"CLIENT_ERROR sleep must be one second or less\r\n"
            }
            Some(micros) => set(&SLEEP, micros),
            None => b"CLIENT_ERROR bad command line format\r\n",
        },
        [b"tocrawl", value] => match parse_u32(value) {
            Some(items) => set(&TO_CRAWL, items),
            None => b"CLIENT_ERROR bad command line format\r\n",
        },
        _ => b"ERROR\r\n",
    };
    out.extend_from_slice(reply);
    None
}

fn parse_u32(value: &[u8]) -> Option<u32> {
    std::str::from_utf8(value).ok()?.parse().ok()
}

fn set(setting: &AtomicU32, value: u32) -> &'static [u8] {
    setting.store(value, Ordering::Relaxed);
    b"OK\r\n"
}

/// memcached's class ids are 1 to 63 (`all` for every class): floe-server's one class is
/// 1, and the others are valid but empty.
fn classes_valid(classes: &[u8]) -> bool {
    classes == b"all"
        || classes.split(|&b| b == b',').all(|class| {
            std::str::from_utf8(class)
                .ok()
                .and_then(|c| c.parse::<u32>().ok())
                .is_some_and(|c| (1..64).contains(&c))
        })
}

/// `lru_crawler metadump all|hash|<classes>`: a line per valid item, as memcached writes
/// them (`key=` URI-encoded, absolute expiry and last access times, `-1` for none; ended by
/// a bare newline, as memcached's are), then `END`. Class 1 holds every item; other valid
/// classes hold none. Written in pieces of about `limit` bytes (see [`command`]): a dump of
/// a large cache never sits whole in the connection's output, as memcached streams it.
fn metadump(
    out: &mut Vec<u8>,
    cache: &Cache,
    which: &[u8],
    resume: Option<u64>,
    limit: usize,
) -> Option<u64> {
    if !dump_enabled() {
        out.extend_from_slice(b"ERROR metadump not allowed\r\n");
        return None;
    }
    let every = which == b"all" || which == b"hash";
    if !every && !classes_valid(which) {
        out.extend_from_slice(b"BADCLASS invalid class id\r\n");
        return None;
    }
    let class_one = which.split(|&b| b == b',').any(|c| c == b"1");
    let mut next = (every || class_one).then_some(resume.unwrap_or(0));
    let started = cache.process_started();
    while let Some(from) = next {
        if out.len() > limit {
            return Some(from);
        }
        next = cache.items_run(from, |key, item| {
            out.extend_from_slice(b"key=");
            uri_encode(out, key);
            let expires = match item.exptime() {
                0 => -1,
                at => started + i64::from(at),
            };
            let _ = writeln!(
                out,
                " exp={expires} la={} cas={} fetch={} cls=1 size={}",
                started + i64::from(item.last_access()),
                item.cas(),
                if item.was_fetched() { "yes" } else { "no" },
                item.charged_bytes()
            );
        });
    }
    out.extend_from_slice(b"END\r\n");
    None
}

/// Percent-encode every byte but RFC 3986's unreserved ones, as memcached's `uriencode`.
fn uri_encode(out: &mut Vec<u8>, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in key {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte);
        } else {
            out.extend_from_slice(&[
                b'%',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 15)],
            ]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_uri_encoded_as_memcached_does() {
        let mut out = Vec::new();
        uri_encode(&mut out, b"a:b/c d~e_f.g-h%\x01\xff");
        assert_eq!(out, b"a%3Ab%2Fc%20d~e_f.g-h%25%01%FF");
    }

    #[test]
    fn class_lists() {
        assert!(classes_valid(b"all"));
        assert!(classes_valid(b"1"));
        assert!(classes_valid(b"1,2,63"));
        assert!(!classes_valid(b"64"));
        assert!(!classes_valid(b"0"));
        assert!(!classes_valid(b"1,"));
        assert!(!classes_valid(b"x"));
    }
}
