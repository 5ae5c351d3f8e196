//! The counters every worker bumps and `stats` sums: one line of counters per worker, each
//! written only by its worker.

use core::sync::atomic::{AtomicU64, Ordering};

/// Counters a worker bumps; summed by `stats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
#[allow(missing_docs)]
pub enum Counter {
    CmdGet,
    CmdSet,
    CmdFlush,
    CmdTouch,
    GetHits,
    GetMisses,
    GetExpired,
    GetFlushed,
    DeleteHits,
    DeleteMisses,
    IncrHits,
    IncrMisses,
    DecrHits,
    DecrMisses,
    CasHits,
    CasMisses,
    CasBadval,
    TouchHits,
    TouchMisses,
    TotalItems,
    Evictions,
    Reclaimed,
    OutOfMemory,
    /// `me` commands (memcached 1.6 counts only those in `cmd_meta`).
    CmdMeta,
    /// Stores refused as larger than `-I`.
    StoreTooLarge,
    /// Stores refused for want of memory (`-M`, or nothing left to evict).
    StoreNoMemory,
    /// Bytes read from and written to clients' sockets.
    BytesRead,
    BytesWritten,
    /// Expired or flushed items removed (by eviction or the sweep) that no read returned.
    ExpiredUnfetched,
    /// Items evicted that no read returned.
    EvictedUnfetched,
    /// Items evicted that had an expiry time.
    EvictedNonzero,
    /// Items read in the small queue and moved to main when they reached its head
    /// (memcached's `moves_to_warm`: S3-FIFO's small queue stands for its hot and cold).
    MovesToWarm,
    /// Items read in main and queued at its tail again (memcached's `moves_within_lru`).
    MovesWithinLru,
    /// Expired and flushed items the housekeeping sweep removed (memcached's LRU crawler).
    CrawlerReclaimed,
    /// Items the sweep looked at.
    CrawlerItemsChecked,
    /// Sweeps started.
    CrawlerStarts,
}

/// Every counter, with the name `stats` prints it under, in the enum's order.
pub const COUNTERS: [(Counter, &str); 36] = [
    (Counter::CmdGet, "cmd_get"),
    (Counter::CmdSet, "cmd_set"),
    (Counter::CmdFlush, "cmd_flush"),
    (Counter::CmdTouch, "cmd_touch"),
    (Counter::GetHits, "get_hits"),
    (Counter::GetMisses, "get_misses"),
    (Counter::GetExpired, "get_expired"),
    (Counter::GetFlushed, "get_flushed"),
    (Counter::DeleteHits, "delete_hits"),
    (Counter::DeleteMisses, "delete_misses"),
    (Counter::IncrHits, "incr_hits"),
    (Counter::IncrMisses, "incr_misses"),
    (Counter::DecrHits, "decr_hits"),
    (Counter::DecrMisses, "decr_misses"),
    (Counter::CasHits, "cas_hits"),
    (Counter::CasMisses, "cas_misses"),
    (Counter::CasBadval, "cas_badval"),
    (Counter::TouchHits, "touch_hits"),
    (Counter::TouchMisses, "touch_misses"),
    (Counter::TotalItems, "total_items"),
    (Counter::Evictions, "evictions"),
    (Counter::Reclaimed, "reclaimed"),
    (Counter::OutOfMemory, "outofmemory"),
    (Counter::CmdMeta, "cmd_meta"),
    (Counter::StoreTooLarge, "store_too_large"),
    (Counter::StoreNoMemory, "store_no_memory"),
    (Counter::BytesRead, "bytes_read"),
    (Counter::BytesWritten, "bytes_written"),
    (Counter::ExpiredUnfetched, "expired_unfetched"),
    (Counter::EvictedUnfetched, "evicted_unfetched"),
    (Counter::EvictedNonzero, "evicted_nonzero"),
    (Counter::MovesToWarm, "moves_to_warm"),
    (Counter::MovesWithinLru, "moves_within_lru"),
    (Counter::CrawlerReclaimed, "crawler_reclaimed"),
    (Counter::CrawlerItemsChecked, "crawler_items_checked"),
    (Counter::CrawlerStarts, "lru_crawler_starts"),
];

/// One worker's counters, on lines of their own. Only the worker writes them (a load and a
/// store, no read-modify-write); `stats` reads them with relaxed loads.
pub(super) struct Counters {
    pub(super) events: [AtomicU64; COUNTERS.len()],
    /// Bytes of replies the worker's connections hold unsent (a gauge, set by the server).
    pub(super) pending_output: AtomicU64,
    /// Bytes allocated for its connections' input and output buffers, and connections
    /// holding an input buffer (gauges, set by the server at its idle sweeps).
    pub(super) input_bytes: AtomicU64,
    pub(super) output_bytes: AtomicU64,
    pub(super) input_buffers: AtomicU64,
}

/// Add to a counter only its worker writes: a load and a store, not a read-modify-write.
pub(super) fn bump(cell: &AtomicU64, by: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl Counters {
    pub(super) fn new() -> Self {
        Counters {
            events: core::array::from_fn(|_| AtomicU64::new(0)),
            pending_output: AtomicU64::new(0),
            input_bytes: AtomicU64::new(0),
            output_bytes: AtomicU64::new(0),
            input_buffers: AtomicU64::new(0),
        }
    }
}
