//! The `stats` command: memcached's general statistics and the `settings`, `items` and
//! `slabs` groups (floe-server has no slab classes: `items` and `slabs` report the one
//! class all items are in, so tools that read them find the fields they expect).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::cache::{Cache, COUNTERS};

/// Connections open now and since start (bumped by the server).
pub static CURR_CONNECTIONS: AtomicU64 = AtomicU64::new(0);
/// Connections accepted since start.
pub static TOTAL_CONNECTIONS: AtomicU64 = AtomicU64::new(0);
/// Connections refused for `-c`.
pub static REJECTED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);
/// Listen settings, for `stats settings`: max connections, TCP port.
pub static MAX_CONNECTIONS: AtomicU64 = AtomicU64::new(1024);
/// The TCP port listened on.
pub static TCP_PORT: AtomicU64 = AtomicU64::new(0);

fn stat(out: &mut Vec<u8>, name: &str, value: impl core::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// The most `stats cachedump` lists, in bytes (memcached's limit too).
const CACHEDUMP_LIMIT: usize = 2 << 20;

/// Answer `stats [group]` (`tokens` are the arguments' byte ranges in `line`).
pub fn write(out: &mut Vec<u8>, cache: &Cache, line: &[u8], tokens: &[(usize, usize)]) {
    let group = tokens.first().map(|&(s, e)| &line[s..e]);
    match group {
        // As memcached: whatever follows `reset` is ignored.
        Some(b"reset") => {
            reset(cache);
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        None => general(out, cache),
        Some(b"settings") => settings(out, cache),
        Some(b"items") => {
            stat(out, "items:1:number", cache.items());
            stat(out, "items:1:age", 0);
            stat(
                out,
                "items:1:evicted",
                cache.counter(crate::cache::Counter::Evictions),
            );
            stat(
                out,
                "items:1:reclaimed",
                cache.counter(crate::cache::Counter::Reclaimed),
            );
            stat(
                out,
                "items:1:outofmemory",
                cache.counter(crate::cache::Counter::OutOfMemory),
            );
        }
        Some(b"slabs") => {
            stat(out, "1:chunk_size", cache.settings().max_item_size);
            stat(out, "1:used_chunks", cache.items());
            stat(out, "1:mem_requested", cache.bytes());
            stat(out, "active_slabs", 1);
            stat(out, "total_malloced", cache.bytes());
        }
        Some(b"cachedump") => cachedump(out, cache, line, &tokens[1..]),
        Some(b"sizes") | Some(b"conns") | Some(b"extstore") => {}
        Some(_) => {
            out.extend_from_slice(b"ERROR\r\n");
            return;
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// `stats reset`: the counters memcached resets (every event counter and the connections
/// accepted and refused) start again from 0; gauges (`curr_items`, `bytes`,
/// `curr_connections`...) are not counters and stay.
pub fn reset(cache: &Cache) {
    cache.reset_counters();
    TOTAL_CONNECTIONS.store(0, Ordering::Relaxed);
    REJECTED_CONNECTIONS.store(0, Ordering::Relaxed);
}

fn general(out: &mut Vec<u8>, cache: &Cache) {
    let now = cache.now();
    stat(out, "pid", std::process::id());
    stat(out, "uptime", now.saturating_sub(2));
    stat(out, "time", cache.process_started() + now as i64);
    stat(out, "version", crate::text::VERSION);
    stat(out, "pointer_size", usize::BITS);
    stat(
        out,
        "curr_connections",
        CURR_CONNECTIONS.load(Ordering::Relaxed),
    );
    stat(
        out,
        "total_connections",
        TOTAL_CONNECTIONS.load(Ordering::Relaxed),
    );
    stat(
        out,
        "rejected_connections",
        REJECTED_CONNECTIONS.load(Ordering::Relaxed),
    );
    for (counter, name) in COUNTERS {
        stat(out, name, cache.counter(counter));
    }
    stat(out, "threads", cache.settings().workers);
    stat(out, "bytes", cache.bytes());
    stat(out, "curr_items", cache.items());
    stat(out, "limit_maxbytes", cache.memory_limit());
    stat(out, "index_bytes", cache.index_bytes());
    stat(out, "index_capacity", cache.index_capacity());
    // floe-server's own: replies built and not yet sent, over every connection (bounded by
    // the server's output limit per connection).
    stat(out, "pending_output_bytes", cache.pending_output());
    // floe-server's own: bytes allocated for connections' input and output buffers, as of
    // each worker's last idle sweep (a quiet connection keeps 8 KiB).
    stat(
        out,
        "connection_buffer_bytes",
        cache.connection_buffer_bytes(),
    );
    // With -e: journal bytes since the last snapshot, snapshots written, and whether a
    // failed write turned persistence off.
    if cache.is_restoring() {
        stat(out, "persist_restoring", 1);
    }
    if let Some((journal_bytes, snapshots, failed)) = cache.persistence() {
        stat(out, "persist_restoring", 0);
        stat(out, "persist_journal_bytes", journal_bytes);
        stat(out, "persist_snapshots", snapshots);
        stat(out, "persist_failed", u8::from(failed));
    }
}

fn settings(out: &mut Vec<u8>, cache: &Cache) {
    let settings = cache.settings();
    stat(out, "maxbytes", cache.memory_limit());
    stat(out, "maxconns", MAX_CONNECTIONS.load(Ordering::Relaxed));
    stat(out, "tcpport", TCP_PORT.load(Ordering::Relaxed));
    stat(out, "verbosity", crate::log::verbosity());
    stat(out, "evictions", if settings.evict { "on" } else { "off" });
    stat(out, "num_threads", settings.workers);
    stat(out, "item_size_max", settings.max_item_size);
    stat(out, "cas_enabled", "yes");
    stat(out, "eviction_policy", "s3-fifo");
    stat(out, "binding_protocol", "ascii");
}

/// `stats cachedump <class> <limit>`: up to `limit` keys (0: no limit) with their sizes
/// and expiry times, as memcached lists a slab class's (floe-server has one class, `1`),
/// and, as memcached, at most [`CACHEDUMP_LIMIT`] bytes of them.
fn cachedump(out: &mut Vec<u8>, cache: &Cache, line: &[u8], tokens: &[(usize, usize)]) {
    let number = |i: usize| -> Option<usize> {
        let &(s, e) = tokens.get(i)?;
        std::str::from_utf8(&line[s..e]).ok()?.parse().ok()
    };
    let (Some(class), limit) = (number(0), number(1).unwrap_or(0)) else {
        return;
    };
    if class != 1 {
        return;
    }
    let limit = if limit == 0 { usize::MAX } else { limit };
    let start = out.len();
    cache.for_each_item(limit, |key, item| {
        if out.len() - start > CACHEDUMP_LIMIT {
            return false;
        }
        let expires = match item.exptime() {
            0 => 0,
            at => cache.process_started() + at as i64,
        };
        out.extend_from_slice(b"ITEM ");
        out.extend_from_slice(key);
        let _ = std::io::Write::write_fmt(
            out,
            format_args!(" [{} b; {expires} s]\r\n", item.data().len()),
        );
        true
    });
}
