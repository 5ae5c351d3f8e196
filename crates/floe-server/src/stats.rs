//! The `stats` command: memcached's general statistics and the `settings`, `items`,
//! `slabs` and `detail` groups, each field with memcached 1.6's name and meaning, so that
//! `memcached-tool` and the Prometheus exporter read floe-server as they read memcached.
//!
//! Where floe-server has no counterpart of memcached's machinery, the fields follow these
//! rules (a reader checking a dashboard can rely on them):
//! - **Slab classes.** floe-server allocates each item at its own size: `items` and `slabs`
//!   report one class, `1`, holding every item. Its `chunk_size` is `-I` (the largest item it
//!   holds), its pages are the charged bytes in MiB (memcached's 1 MiB slab pages, rounded
//!   up), `total_chunks` is the items present plus those that would fit in the room left at
//!   their mean size (so `memcached-tool display`'s "Full?" says yes when `-m` is reached).
//! - **LRU segments.** S3-FIFO's small queue stands for memcached's hot segment and its main
//!   queue for warm (`number_hot`/`number_warm` and their ages; `number_cold` is 0); an item
//!   read in small and moved to main counts as `moves_to_warm`, one read in main and queued
//!   again as `moves_within_lru`. Every eviction is done by a worker making room for a store,
//!   so `direct_reclaims` is evictions plus reclaims of expired items. `hits_to_*` are not
//!   reported: a read does not know which queue its item is in.
//! - **The LRU crawler** is the housekeeping sweep (`crawler.rs`): `crawler_reclaimed`,
//!   `crawler_items_checked`, `lru_crawler_starts`, `lru_crawler_running`.
//! - **Machinery floe-server does not have** reports what it does: 0 for counts of events
//!   that cannot happen (slab moves, authentication, log watchers, NAPI, `conn_yields`:
//!   floe-server has no `-R` request limit; `listen_disabled_num`: at `-c` it refuses
//!   connections with an error line, as memcached's default `maxconns_fast` does, and never
//!   stops listening), and settings of machinery it lacks (growth factor, extstore, TLS) are
//!   left out, as a memcached built without them leaves them out.
//! - floe-server's own fields follow memcached's: `outofmemory` (stores refused under
//!   `-M`), `index_bytes`, `index_capacity`, `pending_output_bytes`,
//!   `connection_buffer_bytes`, `small_queue_permille`, `persist_*`; `stats settings` adds
//!   `eviction_policy`.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::cache::{Cache, Counter, COUNTERS};

/// Connections open now.
pub static CURR_CONNECTIONS: AtomicU64 = AtomicU64::new(0);
/// Connections accepted since start.
pub static TOTAL_CONNECTIONS: AtomicU64 = AtomicU64::new(0);
/// Connections refused for `-c`.
pub static REJECTED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);
/// Listen settings, for `stats settings`: max connections, TCP port.
pub static MAX_CONNECTIONS: AtomicU64 = AtomicU64::new(1024);
/// The TCP port listened on.
pub static TCP_PORT: AtomicU64 = AtomicU64::new(0);
/// The listen queue's length (`-b`).
pub static BACKLOG: AtomicU64 = AtomicU64::new(1024);
/// Listening sockets.
pub static LISTENERS: AtomicU64 = AtomicU64::new(0);
/// The addresses listened on, comma separated (`stats settings`' `inter`).
pub static INTERFACES: Mutex<String> = Mutex::new(String::new());

fn stat(out: &mut Vec<u8>, name: &str, value: impl core::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// Fields that count what floe-server never does (slab moves, authentication, log watchers:
/// the module's docs), reported as 0 so that dashboards keep their panels.
fn zeros(out: &mut Vec<u8>, names: &[&str]) {
    for name in names {
        stat(out, name, 0);
    }
}

/// The most `stats cachedump` lists, in bytes (memcached's limit too).
const CACHEDUMP_LIMIT: usize = 2 << 20;

/// Answer `stats [group]` (`tokens` are the arguments' byte ranges in `line`).
pub fn write(out: &mut Vec<u8>, cache: &Cache, line: &[u8], tokens: &[(usize, usize)]) {
    let token = |i: usize| tokens.get(i).map(|&(s, e)| &line[s..e]);
    match token(0) {
        // As memcached: whatever follows `reset` is ignored.
        Some(b"reset") => {
            reset(cache);
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        None => general(out, cache),
        Some(b"settings") => settings(out, cache),
        Some(b"items") => items(out, cache),
        Some(b"slabs") => slabs(out, cache),
        Some(b"detail") => {
            match token(1) {
                // As memcached: arguments after the first are ignored.
                Some(b"on") => {
                    crate::detail::set_enabled(true);
                    out.extend_from_slice(b"OK\r\n");
                }
                Some(b"off") => {
                    crate::detail::set_enabled(false);
                    out.extend_from_slice(b"OK\r\n");
                }
                Some(b"dump") => crate::detail::dump(out),
                _ => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
            }
            return;
        }
        Some(b"cachedump") if !crate::crawler::dump_enabled() => {
            out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
            return;
        }
        Some(b"cachedump") => cachedump(out, cache, line, &tokens[1..]),
        Some(b"sizes") => stat(out, "sizes_status", "disabled"),
        Some(b"conns") | Some(b"extstore") => {}
        Some(_) => {
            out.extend_from_slice(b"ERROR\r\n");
            return;
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// `stats reset`: the counters memcached resets (every event counter, the connections
/// accepted and refused, the per-prefix counts) start again from 0; gauges (`curr_items`,
/// `bytes`, `curr_connections`...) are not counters and stay.
pub fn reset(cache: &Cache) {
    cache.reset_counters();
    crate::detail::clear();
    TOTAL_CONNECTIONS.store(0, Ordering::Relaxed);
    REJECTED_CONNECTIONS.store(0, Ordering::Relaxed);
}

/// The process's user and system CPU seconds, as memcached prints them.
fn rusage() -> (String, String) {
    // SAFETY: `rusage` is plain data, valid zeroed; getrusage writes it whole.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

/// Descriptors the process holds that are not client connections (memcached's
/// `reserved_fds`: listeners, the poll instances, files of `-e`).
fn reserved_fds() -> u64 {
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64);
    open.saturating_sub(CURR_CONNECTIONS.load(Ordering::Relaxed))
}

fn general(out: &mut Vec<u8>, cache: &Cache) {
    let now = cache.now();
    let count = |counter: Counter| cache.counter(counter);
    let counters = |out: &mut Vec<u8>, names: &[&str]| {
        for name in names {
            let (counter, _) = COUNTERS
                .iter()
                .find(|(_, n)| n == name)
                .expect("a counter's name");
            stat(out, name, count(*counter));
        }
    };
    let curr_connections = CURR_CONNECTIONS.load(Ordering::Relaxed);
    let (input_bytes, output_bytes, input_buffers) = cache.connection_buffers();
    let (user, system) = match cache.is_reproducible() {
        false => rusage(),
        true => ("0.000000".to_owned(), "0.000000".to_owned()),
    };
    stat(out, "pid", std::process::id());
    stat(out, "uptime", now.saturating_sub(2));
    stat(out, "time", cache.process_started() + now as i64);
    stat(out, "version", crate::protocol::VERSION);
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", user);
    stat(out, "rusage_system", system);
    stat(
        out,
        "max_connections",
        MAX_CONNECTIONS.load(Ordering::Relaxed),
    );
    stat(out, "curr_connections", curr_connections);
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
    stat(
        out,
        "connection_structures",
        curr_connections + LISTENERS.load(Ordering::Relaxed),
    );
    // memcached's response objects and read buffers: floe-server's output and input
    // buffers (as of each worker's last idle sweep, at most a second old).
    stat(out, "response_obj_oom", 0);
    stat(out, "response_obj_count", curr_connections);
    stat(out, "response_obj_bytes", output_bytes);
    stat(out, "read_buf_count", input_buffers);
    stat(out, "read_buf_bytes", input_bytes);
    stat(out, "read_buf_bytes_free", 0);
    stat(out, "read_buf_oom", 0);
    stat(
        out,
        "reserved_fds",
        if cache.is_reproducible() {
            0
        } else {
            reserved_fds()
        },
    );
    counters(
        out,
        &["cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "cmd_meta"],
    );
    counters(
        out,
        &[
            "get_hits",
            "get_misses",
            "get_expired",
            "get_flushed",
            "delete_misses",
            "delete_hits",
            "incr_misses",
            "incr_hits",
            "decr_misses",
            "decr_hits",
            "cas_misses",
            "cas_hits",
            "cas_badval",
            "touch_hits",
            "touch_misses",
            "store_too_large",
            "store_no_memory",
        ],
    );
    zeros(out, &["auth_cmds", "auth_errors"]);
    counters(out, &["bytes_read", "bytes_written"]);
    stat(out, "limit_maxbytes", cache.memory_limit());
    stat(out, "accepting_conns", 1);
    stat(out, "listen_disabled_num", 0);
    stat(out, "time_in_listen_disabled_us", 0);
    stat(out, "threads", cache.settings().workers);
    stat(out, "conn_yields", 0);
    let index = cache.index_stats();
    let slots = cache.index_capacity().max(1);
    stat(
        out,
        "hash_power_level",
        usize::BITS - 1 - slots.leading_zeros(),
    );
    stat(out, "hash_bytes", index.allocated_bytes);
    stat(out, "hash_is_expanding", u8::from(index.migrating));
    zeros(
        out,
        &[
            "slab_reassign_rescues",
            "slab_reassign_chunk_rescues",
            "slab_reassign_evictions_nomem",
            "slab_reassign_inline_reclaim",
            "slab_reassign_busy_items",
            "slab_reassign_busy_deletes",
            "slab_reassign_running",
            "slabs_moved",
        ],
    );
    stat(
        out,
        "lru_crawler_running",
        u8::from(crate::crawler::running()),
    );
    counters(out, &["lru_crawler_starts"]);
    zeros(
        out,
        &[
            "malloc_fails",
            "log_worker_dropped",
            "log_worker_written",
            "log_watcher_skipped",
            "log_watcher_sent",
            "log_watchers",
            "unexpected_napi_ids",
            "round_robin_fallback",
        ],
    );
    stat(out, "bytes", cache.bytes());
    stat(out, "curr_items", cache.items());
    counters(out, &["total_items"]);
    stat(out, "slab_global_page_pool", 0);
    counters(out, &["expired_unfetched", "evicted_unfetched"]);
    stat(out, "evicted_active", 0);
    counters(
        out,
        &[
            "evictions",
            "reclaimed",
            "crawler_reclaimed",
            "crawler_items_checked",
        ],
    );
    stat(out, "lrutail_reflocked", 0);
    stat(out, "moves_to_cold", 0);
    counters(out, &["moves_to_warm", "moves_within_lru"]);
    stat(out, "direct_reclaims", direct_reclaims(cache));
    stat(out, "lru_bumps_dropped", 0);
    // floe-server's own.
    counters(out, &["outofmemory"]);
    // The small queue's share of the queued bytes, in thousandths (cache/mod.rs, "The split
    // adapts").
    stat(out, "small_queue_permille", cache.small_queue_share());
    stat(out, "index_bytes", cache.index_bytes());
    stat(out, "index_capacity", cache.index_capacity());
    // Replies built and not yet sent, over every connection (bounded by the server's
    // output limit per connection).
    stat(out, "pending_output_bytes", cache.pending_output());
    // Bytes allocated for connections' input and output buffers, as of each worker's last
    // idle sweep (a quiet connection keeps 8 KiB).
    stat(out, "connection_buffer_bytes", input_bytes + output_bytes);
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

/// Evictions and reclaims of expired items, all done by workers making room.
fn direct_reclaims(cache: &Cache) -> u64 {
    cache.counter(Counter::Evictions) + cache.counter(Counter::Reclaimed)
}

fn settings(out: &mut Vec<u8>, cache: &Cache) {
    let settings = cache.settings();
    let yes_no = |on: bool| if on { "yes" } else { "no" };
    let interfaces = INTERFACES.lock().map(|s| s.clone()).unwrap_or_default();
    let (crawler_sleep, crawler_to_crawl) = crate::crawler::sleep_and_to_crawl();
    stat(out, "maxbytes", cache.memory_limit());
    stat(out, "maxconns", MAX_CONNECTIONS.load(Ordering::Relaxed));
    stat(out, "tcpport", TCP_PORT.load(Ordering::Relaxed));
    stat(out, "udpport", 0);
    stat(
        out,
        "inter",
        if interfaces.is_empty() {
            "NULL"
        } else {
            &interfaces
        },
    );
    stat(out, "verbosity", crate::log::verbosity());
    stat(out, "oldest", 0);
    stat(out, "evictions", if settings.evict { "on" } else { "off" });
    stat(out, "domain_socket", "NULL");
    stat(out, "shutdown_command", "no");
    stat(out, "num_threads", settings.workers);
    stat(
        out,
        "stat_key_prefix",
        char::from(crate::detail::delimiter()),
    );
    stat(out, "detail_enabled", yes_no(crate::detail::enabled()));
    stat(out, "cas_enabled", "yes");
    stat(out, "tcp_backlog", BACKLOG.load(Ordering::Relaxed));
    stat(out, "binding_protocol", "auto-negotiate");
    stat(out, "auth_enabled_sasl", "no");
    stat(out, "auth_enabled_ascii", "no");
    stat(out, "item_size_max", settings.max_item_size);
    stat(out, "maxconns_fast", "yes");
    stat(
        out,
        "hashpower_init",
        usize::BITS - 1 - settings.initial_keys.max(1).leading_zeros(),
    );
    stat(out, "slab_reassign", "no");
    stat(out, "slab_automove", 0);
    stat(out, "lru_crawler", yes_no(crate::crawler::enabled()));
    stat(out, "lru_crawler_sleep", crawler_sleep);
    stat(out, "lru_crawler_tocrawl", crawler_to_crawl);
    stat(out, "tail_repair_time", 0);
    stat(out, "flush_enabled", "yes");
    stat(out, "dump_enabled", yes_no(crate::crawler::dump_enabled()));
    stat(out, "hash_algorithm", "mix64");
    stat(out, "lru_maintainer_thread", "no");
    stat(out, "lru_segmented", "no");
    stat(out, "temp_lru", "no");
    stat(out, "idle_timeout", 0);
    stat(out, "read_buf_mem_limit", 0);
    stat(out, "track_sizes", "no");
    stat(out, "inline_ascii_response", "no");
    stat(
        out,
        "memory_file",
        cache
            .persistence_dir()
            .map_or_else(|| "(null)".to_owned(), |dir| dir.display().to_string()),
    );
    // floe-server's own.
    stat(out, "eviction_policy", "s3-fifo-adaptive");
}

/// `stats items`: the one class (see the module's docs).
fn items(out: &mut Vec<u8>, cache: &Cache) {
    let queues = cache.queues_summary();
    let item = |out: &mut Vec<u8>, name: &str, value: &dyn core::fmt::Display| {
        stat(out, &format!("items:1:{name}"), value);
    };
    let count = |counter: Counter| cache.counter(counter);
    item(out, "number", &cache.items());
    item(out, "number_hot", &queues.small);
    item(out, "number_warm", &queues.main);
    item(out, "number_cold", &0);
    item(out, "age_hot", &queues.small_age);
    item(out, "age_warm", &queues.main_age);
    item(out, "age", &queues.small_age.max(queues.main_age));
    item(out, "mem_requested", &cache.bytes());
    item(out, "evicted", &count(Counter::Evictions));
    item(out, "evicted_nonzero", &count(Counter::EvictedNonzero));
    item(out, "evicted_time", &cache.evicted_idle());
    item(out, "outofmemory", &count(Counter::OutOfMemory));
    item(out, "tailrepairs", &0);
    item(out, "reclaimed", &count(Counter::Reclaimed));
    item(out, "expired_unfetched", &count(Counter::ExpiredUnfetched));
    item(out, "evicted_unfetched", &count(Counter::EvictedUnfetched));
    item(out, "evicted_active", &0);
    item(out, "crawler_reclaimed", &count(Counter::CrawlerReclaimed));
    item(
        out,
        "crawler_items_checked",
        &count(Counter::CrawlerItemsChecked),
    );
    item(out, "lrutail_reflocked", &0);
    item(out, "moves_to_cold", &0);
    item(out, "moves_to_warm", &count(Counter::MovesToWarm));
    item(out, "moves_within_lru", &count(Counter::MovesWithinLru));
    item(out, "direct_reclaims", &direct_reclaims(cache));
}

/// `stats slabs`: the one class (see the module's docs).
fn slabs(out: &mut Vec<u8>, cache: &Cache) {
    let items = cache.items() as u64;
    let bytes = cache.bytes() as u64;
    let room = (cache.memory_limit() as u64).saturating_sub(bytes);
    let free = match items {
        0 => 0,
        _ => room / bytes.div_ceil(items).max(1),
    };
    let count = |counter: Counter| cache.counter(counter);
    stat(out, "1:chunk_size", cache.settings().max_item_size);
    stat(out, "1:chunks_per_page", 1);
    stat(out, "1:total_pages", bytes.div_ceil(1 << 20));
    stat(out, "1:total_chunks", items + free);
    stat(out, "1:used_chunks", items);
    stat(out, "1:free_chunks", free);
    stat(out, "1:free_chunks_end", 0);
    stat(out, "1:get_hits", count(Counter::GetHits));
    stat(out, "1:cmd_set", count(Counter::CmdSet));
    stat(out, "1:delete_hits", count(Counter::DeleteHits));
    stat(out, "1:incr_hits", count(Counter::IncrHits));
    stat(out, "1:decr_hits", count(Counter::DecrHits));
    stat(out, "1:cas_hits", count(Counter::CasHits));
    stat(out, "1:cas_badval", count(Counter::CasBadval));
    stat(out, "1:touch_hits", count(Counter::TouchHits));
    stat(out, "active_slabs", u8::from(items > 0));
    stat(out, "total_malloced", bytes);
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
