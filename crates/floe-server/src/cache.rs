//! The cache: items in a floe [`Map`], memory bounded by S3-FIFO eviction.
//!
//! # Design
//!
//! **Index and items.** Every item lives in one entry of a `floe::Map<Key, Item>`: the key
//! (an `Arc<[u8]>`, shared with the eviction queue) and the item (value bytes, client flags,
//! CAS unique, expiry). A get is the map's lock-free get: one bin line, then the entry; a
//! multi-get, and a run of gets a client pipelined, is one `MapRef::get_many` call, which
//! prefetches every bin and then every entry before it reads any (DLHT's batches). Writes
//! are the map's own single-swap writes: every store, `incr` / `decr` and `touch` a
//! `compute` (a read-decide-swap that retries when the key changed under it, so a CAS check
//! and the write it guards are one atomic step, and the new item can take over what the
//! one it replaces had: its queue node, below), delete a `remove_if`. Each write is therefore linearizable at its swap, as
//! the map's writes are. Items never change once published, except for the read marks (the
//! access frequency, whether it was read, the last-access time): hints for eviction and the
//! meta protocol, written by readers with plain relaxed stores, so a lost mark costs an item
//! at most one pass through a queue, never a wrong answer.
//!
//! A value read by a get stays valid while the reader's guard lives: replaced and removed
//! entries are freed by the map's `seize` collector only after every reader that could see
//! them has left, so a connection copies value bytes into its output without a lock.
//!
//! **Why not segments.** Segcache stores items in append-only segments with an index of
//! pointers into them, which saves per-item allocation and makes eviction and expiry
//! segment-at-a-time. With floe's map the entry already is the item (one allocation for the
//! entry, one for the value), its reclamation is already safe against concurrent readers,
//! and a segment store would need its own reclamation protocol on top of the map's (a segment
//! may be reused only after every reader of every item in it has left). The per-item cost
//! we pay instead is the allocator's; it is counted in each item's charge.
//!
//! **Memory.** `-m` bounds the bytes charged, which are the bytes allocated: each item is
//! charged its map entry and its value's allocation (`item_charge`), each eviction queue
//! node its slot and its key's allocation (`node_charge`: a node outlives its item until
//! it reaches the head of its queue, and keeps the key alive meanwhile). An
//! item's charge is added when it is published and subtracted when it is unlinked (by the
//! write that replaced or removed it), not when its memory is freed (a deferred free happens
//! a few operations later); the map's own table is reported apart (`index_bytes` in
//! `stats`), as the issue asks.
//!
//! **Eviction: S3-FIFO** (Yang et al., SOSP'23). New items enter a small FIFO queue (10% of
//! the bytes at the start; see "The split adapts" below); a get only marks the item (a 2-bit
//! frequency, a relaxed store, no lock, no queue move, which is what makes it fit a lock-free
//! table: an LRU would move the item on every hit). At the head of the small queue an item that was read since it entered moves
//! to the main queue and one that was not is evicted, its key's hash remembered in a ghost
//! FIFO; an item whose key is in the ghost goes straight to main when it is stored again. At
//! the head of main, an item read since its last pass goes round again with its frequency
//! lowered, and an unread one is evicted. One-hit wonders leave after a short stay in the
//! small queue, so they never push out the working set, which memcached's segmented LRU lets
//! them do for its whole cold segment. The queues are sharded, one per worker thread behind
//! a mutex that only the worker, an evicting writer and the expiry sweep take (never a
//! reader), so a set takes an uncontended lock. A queue node names its item by key and node
//! id (`Item::node`, the CAS unique of the store that queued it). A write that replaces an
//! item hands the node on to the new item, so a key rewritten a million times (`set`,
//! `append`, `incr`...) has one node, keeps its place in the queue and leaves nothing
//! charged behind; only a key's first store after it was absent queues a node. A node
//! whose item was removed (deleted, evicted, expired) is stale and is freed when eviction
//! reaches it. Under `-M` nothing live is evicted: eviction passes over live items (to their
//! queue's tail) to reach the stale nodes and expired items behind them, so those are freed
//! whatever sits at the head.
//!
//! **The split adapts** (after ARC, Megiddo and Modha, FAST'03). S3-FIFO's fixed 10% small
//! queue evicts an item that was not read within the next 10% of the cache's worth of
//! writes, where an LRU keeps it for the whole cache's worth: a client that writes a key and
//! reads it once, later, missed every time on floe-server and never on memcached (issue 44).
//! So the small queue's share of the queued bytes is a target that the misses move: a read
//! that misses a key evicted unread from small (still in its ghost) grows the share by 1%, one
//! that misses a key evicted from main (a second ghost) shrinks it by 1%, within 1% and 99%;
//! each ghost entry moves it once. A workload whose items are read late moves the share up
//! until they stay (at 99% the queues are one FIFO with second chances, as CLOCK); one whose
//! hot items are pushed out of main moves it back down, and scans and one-hit wonders, which
//! are never asked for again, move nothing and keep S3-FIFO's protection of main. Measured
//! beside memcached on the traces of `floe-bench server --hit-ratio` (BENCHMARKS.md). The
//! share is one number for the cache (a relaxed atomic), read at each eviction step.
//!
//! FIXME: with eviction on, the stale nodes deletes leave behind (a node and a key's
//! allocation each) are freed only when they reach a queue's head; until then they count
//! against `-m`, and a workload of many deletes may evict live items before them.
//!
//! **Persistence** (`-e DIR`, `persist.rs`). Each write takes a sequence number inside its
//! decision (`sequenced`) and, once published, appends the whole new item to its session's
//! journal buffer, which the session writes to its worker's journal when it ends: before the
//! replies are sent. A restart restores, for each key, the record with the largest number,
//! in the background while the server serves; writes wait for it (`Cache::open`). A write
//! into an absent key read no earlier item, so a removal may have overtaken its number; it
//! then journals what the key holds again under a new one (`Session::inserted`).
//!
//! **Expiry.** An expired or flushed item is never returned: every read checks it, and the
//! read that finds it unlinks it. Eviction drops expired items first when they reach a
//! queue's head, and [`Cache::reclaim_expired`] (run by the server's housekeeping thread in
//! slices) unlinks expired items without touching the request path.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::{
    collections::{HashMap, VecDeque},
    hash::BuildHasher,
    sync::{Arc, Mutex, MutexGuard},
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use crossbeam_utils::CachePadded;
use floe::{
    hash::DefaultHashBuilder, Compute, Insert, Map, MapRef, MapRequest, MapResponse, Operation,
};

use crate::{
    persist::{Kind, Record, Replayed, Restore, Store, StoreError, StoreOptions},
    protocol::REALTIME_MAXDELTA,
};

/// A key, shared by the map entry and the eviction queue's node.
pub type Key = Arc<[u8]>;

/// Bytes the allocator takes for a request of `n` bytes (glibc's malloc: an 8-byte header,
/// 16-byte granules, 32 bytes at least).
pub const fn allocation(n: usize) -> usize {
    let chunk = (n + 8 + 15) & !15;
    if chunk < 32 {
        32
    } else {
        chunk
    }
}

/// Bytes charged for an item with a value of `value_len` bytes: its map entry (the key
/// handle and the `Item`) and its value's allocation. The key's allocation is charged to
/// the item's queue node, which keeps it alive at least as long (see `node_charge`).
pub fn item_charge(value_len: usize) -> usize {
    allocation(size_of::<Key>() + size_of::<Item>()) + allocation(value_len)
}

/// Bytes charged for a queue node naming a key of `key_len` bytes: its slot in the queue
/// and the key's allocation. An item stored while its key was absent shares its key with
/// the node made with it, which outlives the item or leaves with it; an item that replaced
/// another (and took over its node) has a key of its own, charged to it (`Item::key_charged`).
pub fn node_charge(key_len: usize) -> usize {
    size_of::<Node>() + key_allocation(key_len)
}

/// Bytes a key of `key_len` bytes takes (`Arc<[u8]>`: two counts and the bytes).
fn key_allocation(key_len: usize) -> usize {
    allocation(2 * size_of::<usize>() + key_len)
}

/// Whether an item of these sizes could never fit: larger than `-I` or than all of the
/// memory limit.
pub fn too_large(cache: &Cache, key_len: usize, value_len: usize) -> bool {
    value_len > cache.settings.max_item_size
        || item_charge(value_len) + node_charge(key_len) > cache.memory_limit()
}

/// One cached value. Fields other than the read marks (`freq`, `fetched`, `last_access`)
/// never change after the item is published.
pub struct Item {
    data: Box<[u8]>,
    cas: u64,
    flags: u32,
    /// Server time at which the item expires; 0 = never.
    exptime: u32,
    /// Server time at which it was stored (for `flush_all` with a delay).
    time: u32,
    /// The flush generation it was stored in (for `flush_all` without a delay).
    generation: u32,
    /// Reads since its last pass through an eviction queue's head, saturating at 3.
    freq: AtomicU8,
    /// Whether any read returned it (the meta protocol's `h` flag).
    fetched: AtomicU8,
    /// Server time of the last read (the meta protocol's `l` flag).
    last_access: AtomicU32,
    /// Bytes charged against `-m` for this item.
    charge: u32,
    /// Stored by a meta command whose key was base64 (`b`): `mg ... k` answers the key in
    /// base64 again, as memcached does.
    binary_key: bool,
    /// Names this item's eviction queue node: the CAS unique of the store that queued it.
    /// A write that replaces an item (overwrite, append, incr, touch) keeps the node, and
    /// its place in the queue, so only a key's first store after it was absent queues one
    /// and a key written a million times has one node, not a million stale ones.
    node: u64,
    /// Whether `charge` includes the key's allocation: the item took over the node of an
    /// item it replaced, and its map entry holds a key of its own, not the node's.
    key_charged: bool,
    /// Marked stale by a meta invalidation (`md ... I`, or `ms ... I` with an older CAS
    /// unique): `mg` answers it with `X`, and hands its win token to one client.
    stale: bool,
    /// Whether an `mg` took this item's win token (memcached's `W`; later reads get `Z`).
    /// A read mark like `fetched`, but taken with a swap: of the reads of one item, exactly
    /// one wins. A write that copies the item to change it in place (`touch`, `ms ... I`, an
    /// `incr` whose digits fit) copies this state when it makes the copy, so a read that wins
    /// on the old item meanwhile leaves the copy's token free, and a second client can win
    /// on the copy (one extra recache; the token would have to be shared between the copies
    /// to close it; see `touch`).
    token_sent: AtomicBool,
    /// The sequence number of the write that made it, in a persistent cache (`persist.rs`:
    /// replay keeps each key's largest); 0 otherwise.
    seq: u64,
}

impl Item {
    /// The value bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The client flags.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// The CAS unique.
    pub fn cas(&self) -> u64 {
        self.cas
    }

    /// Server time of expiry, 0 for never.
    pub fn exptime(&self) -> u32 {
        self.exptime
    }

    /// Server time of the last read before this one (or of the store).
    pub fn last_access(&self) -> u32 {
        self.last_access.load(Ordering::Relaxed)
    }

    /// Whether its key was given in base64 when it was stored (meta `b` flag).
    pub fn binary_key(&self) -> bool {
        self.binary_key
    }

    /// Whether a read returned this item before.
    pub fn was_fetched(&self) -> bool {
        self.fetched.load(Ordering::Relaxed) != 0
    }

    /// Whether a meta invalidation marked it stale (`mg` answers `X`).
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Whether a read took its win token already (`mg` answers `Z`).
    pub fn win_token_taken(&self) -> bool {
        self.token_sent.load(Ordering::Relaxed)
    }

    /// Take the win token (`mg` answers `W`): `true` for the one caller that gets it. Relaxed
    /// suffices: the swaps of one location are totally ordered, so exactly one reads `false`,
    /// and nothing else is published through the flag.
    pub fn take_win_token(&self) -> bool {
        !self.token_sent.swap(true, Ordering::Relaxed)
    }

    fn charge(&self) -> usize {
        self.charge as usize
    }

    /// Bytes charged against `-m` for it (value, key, bookkeeping).
    pub fn charged_bytes(&self) -> usize {
        self.charge()
    }

    /// Copy the read marks (and the win token, the stale mark) of `from`: the new item
    /// stands for `from` changed in place, as memcached changes it (a touch, an invalidation,
    /// an `incr` whose digits fit the old value).
    fn with_marks_of(self, from: &Item) -> Item {
        self.freq
            .store(from.freq.load(Ordering::Relaxed), Ordering::Relaxed);
        self.fetched
            .store(from.fetched.load(Ordering::Relaxed), Ordering::Relaxed);
        self.last_access
            .store(from.last_access.load(Ordering::Relaxed), Ordering::Relaxed);
        self.token_sent
            .store(from.token_sent.load(Ordering::Relaxed), Ordering::Relaxed);
        Item {
            stale: from.stale,
            ..self
        }
    }

    /// A copy with another expiry (the value is copied: items never change in place).
    fn with_exptime(&self, exptime: u32) -> Item {
        Item {
            data: self.data.clone(),
            cas: self.cas,
            flags: self.flags,
            exptime,
            time: self.time,
            generation: self.generation,
            freq: AtomicU8::new(0),
            fetched: AtomicU8::new(0),
            last_access: AtomicU32::new(0),
            charge: self.charge,
            binary_key: self.binary_key,
            node: self.node,
            key_charged: self.key_charged,
            stale: false,
            token_sent: AtomicBool::new(false),
            seq: self.seq,
        }
        .with_marks_of(self)
    }

    /// This new item as the replacement of `replaced` (whatever its validity): it takes
    /// over `replaced`'s queue node, and is charged its own key's allocation.
    fn taking_over(mut self, replaced: &Item, key_len: usize) -> Item {
        self.node = replaced.node;
        if !self.key_charged {
            self.charge += key_allocation(key_len) as u32;
            self.key_charged = true;
        }
        self
    }
}

/// How a storage command treats the present item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if absent.
    Add,
    /// Store only if present.
    Replace,
    /// Add the data after the present value (flags and expiry kept).
    Append,
    /// Add the data before the present value (flags and expiry kept).
    Prepend,
}

impl StoreMode {
    /// Whether the store replaces the whole value (set, add, replace), not extends it.
    fn replaces_whole(self) -> bool {
        matches!(self, StoreMode::Set | StoreMode::Add | StoreMode::Replace)
    }
}

/// What a storage command did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Stored, with this CAS unique.
    Stored(u64),
    /// The mode's condition failed (`add` of a present key, `replace` of an absent one).
    NotStored,
    /// The CAS unique given did not match.
    Exists,
    /// A CAS was given and the key is absent.
    NotFound,
    /// The item is larger than `-I` or than the whole memory limit.
    TooLarge,
    /// No memory and eviction is off (`-M`), or nothing is left to evict.
    OutOfMemory,
}

/// What `incr` / `decr` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delta {
    /// The new value, its CAS unique, and whether the key was created (from `create`).
    Value(u64, u64, bool),
    /// The key is absent (and no initial value was given).
    NotFound,
    /// The present value is not a decimal number of at most 20 digits.
    NonNumeric,
    /// The CAS unique given did not match.
    Exists,
    /// Storing the new value needed memory there was none of.
    OutOfMemory,
}

/// What a meta command adds to a store (all off for the other protocols).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaStore {
    /// The key was given in base64 (`b`): `mg ... k` answers it in base64 again.
    pub binary_key: bool,
    /// The CAS unique to give the new item instead of a fresh one (`E`).
    pub cas: Option<u64>,
    /// Invalidate (`ms ... I`): a set or replace whose compare unique is older (lower) than
    /// the item's stores anyway, the new item marked stale, with the expiry and the win
    /// token of the item it replaces.
    pub invalidate: bool,
    /// The new item's win token is taken already: its creator won it (`mg ... N`).
    pub token_sent: bool,
}

/// How `md` with `I` or `x` changes an item instead of removing it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tombstone {
    /// `I`: mark the item stale (its win token returned, for the next `mg` to take) with a
    /// fresh CAS unique.
    pub stale: bool,
    /// `x`: replace the item by an empty value with these client flags and this expiry,
    /// keeping its CAS unique.
    pub empty: Option<(u32, u32)>,
    /// `T` with `I`: the new expiry (with `x`, it is the empty item's already).
    pub exptime: Option<u32>,
    /// `E`: the CAS unique to give the item instead.
    pub cas: Option<u64>,
}

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// The key was removed.
    Deleted,
    /// The key is absent.
    NotFound,
    /// The CAS unique given did not match.
    Exists,
}

/// The cache's settings (the server's flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Bytes items may be charged in all (`-m`).
    pub memory_limit: usize,
    /// Evict when full (`-M` turns this off: a store then fails).
    pub evict: bool,
    /// The largest value accepted (`-I`).
    pub max_item_size: usize,
    /// Worker threads (`-t`): one eviction queue each.
    pub workers: usize,
    /// Keys the index is sized for at start.
    pub initial_keys: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            memory_limit: 64 << 20,
            evict: true,
            max_item_size: 1 << 20,
            workers: 4,
            initial_keys: 1 << 16,
        }
    }
}

/// Where the server's time comes from.
enum Clock {
    /// Seconds since `started`, plus 2 (memcached's current time starts at 2, so that the
    /// "already expired" time 1 is always in the past).
    System(Instant),
    /// Set by tests.
    Manual(AtomicU32),
}

/// See [`Cache::queues_summary`].
#[derive(Clone, Copy, Debug, Default)]
pub struct QueuesSummary {
    /// Nodes in the small queues (stale ones, whose item was removed, included).
    pub small: usize,
    /// Nodes in the main queues.
    pub main: usize,
    /// Seconds since the last read of the oldest item at a small queue's head.
    pub small_age: u32,
    /// The same for the main queues.
    pub main_age: u32,
}

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
struct Counters {
    events: [AtomicU64; COUNTERS.len()],
    /// Bytes of replies the worker's connections hold unsent (a gauge, set by the server).
    pending_output: AtomicU64,
    /// Bytes allocated for its connections' input and output buffers, and connections
    /// holding an input buffer (gauges, set by the server at its idle sweeps).
    input_bytes: AtomicU64,
    output_bytes: AtomicU64,
    input_buffers: AtomicU64,
}

/// Add to a counter only its worker writes: a load and a store, not a read-modify-write.
fn bump(cell: &AtomicU64, by: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl Counters {
    fn new() -> Self {
        Counters {
            events: core::array::from_fn(|_| AtomicU64::new(0)),
            pending_output: AtomicU64::new(0),
            input_bytes: AtomicU64::new(0),
            output_bytes: AtomicU64::new(0),
            input_buffers: AtomicU64::new(0),
        }
    }
}

/// Live items a step of eviction passes over under `-M` (where none may be evicted) while
/// it looks for a stale node or an expired item to free: a refused store costs at most this
/// many lookups per shard.
const MAX_PASSED_OVER: usize = 64;

/// Queue nodes the expiry sweep takes per step: it holds a shard's lock only while it copies
/// this many keys, and a pin of the map only while it checks them.
const SWEEP_SLICE: usize = 256;

/// A queue node: names the item whose `node` is `id`, under `key`. A node that no item
/// names any more (its item was removed) is stale.
struct Node {
    key: Key,
    id: u64,
    /// The item's charge when the node was last queued (for the queues' shares of the
    /// bytes, which decide which queue eviction takes from). A write that replaces the item
    /// takes the node over without finding it in its queue (a search of the shard's queues,
    /// under their lock, per overwrite), so the charge is brought up to date only when the
    /// node goes round: passed over under `-M`, or moved on to main. Until then a queue's
    /// `bytes` counts the item as it was (an append that grew it, say, is not counted), which
    /// skews the small/main split, never what is charged against `-m` (`Cache::used`).
    charge: u32,
}

/// One FIFO of queue nodes. `popped` counts the nodes that ever left its front, so
/// `popped + index` names a node for as long as it stays (the expiry sweep's position).
#[derive(Default)]
struct Fifo {
    nodes: VecDeque<Node>,
    bytes: usize,
    popped: u64,
}

impl Fifo {
    fn len(&self) -> usize {
        self.nodes.len()
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn push_back(&mut self, node: Node) {
        self.bytes += node.charge as usize;
        self.nodes.push_back(node);
    }

    fn pop_front(&mut self) -> Option<Node> {
        let node = self.nodes.pop_front()?;
        self.bytes -= node.charge as usize;
        self.popped += 1;
        Some(node)
    }

    /// The position after the last node.
    fn end(&self) -> u64 {
        self.popped + self.nodes.len() as u64
    }

    /// Copy the keys and ids of up to [`SWEEP_SLICE`] nodes at positions `from..end` (those
    /// still there) into `into`; returns the position to go on from.
    fn copy_slice(&self, from: u64, end: u64, into: &mut Vec<(Key, u64)>) -> u64 {
        let start = from.max(self.popped);
        let stop = end.min(self.end());
        if start >= stop {
            return end;
        }
        let first = (start - self.popped) as usize;
        let last = ((stop - self.popped) as usize).min(first + SWEEP_SLICE);
        into.extend(
            self.nodes
                .range(first..last)
                .map(|node| (node.key.clone(), node.id)),
        );
        self.popped + last as u64
    }
}

/// One shard of the S3-FIFO queues.
#[derive(Default)]
struct Queues {
    small: Fifo,
    main: Fifo,
    /// Keys evicted from small, unread (S3-FIFO's ghost).
    ghost: Ghost,
    /// Keys evicted from main (for the split's adaptation only).
    main_ghost: Ghost,
}

impl Queues {
    fn fifo(&mut self, small: bool) -> &mut Fifo {
        if small {
            &mut self.small
        } else {
            &mut self.main
        }
    }

    /// Queue a new item's node (its key hashing to `hash`): in main if the ghost remembers
    /// the key (it was evicted from small not long ago), else in small.
    fn push(&mut self, hash: u64, node: Node) {
        if self.ghost.take(hash) {
            self.main.push_back(node);
        } else {
            self.small.push_back(node);
        }
    }
}

/// What eviction did with the item a node named.
enum Retired {
    /// Removed while valid.
    Evicted,
    /// Removed, expired or flushed.
    Reclaimed,
    /// No item names the node: nothing to remove.
    Stale,
    /// A valid item names the node again (an overwrite came between the look and the
    /// removal of an expired item): the node goes back to a queue.
    Kept(Node),
}

/// Hashes of keys recently evicted from a queue, oldest first, at most `capacity`.
#[derive(Default)]
struct Ghost {
    order: VecDeque<u64>,
    members: HashMap<u64, Member>,
}

/// A hash in a ghost: its copies in `order`, and whether a read that missed it moved the
/// queues' split already (once per stay, so that a client asking again and again for one
/// evicted key does not push the split to its bound).
#[derive(Default)]
struct Member {
    copies: u32,
    signalled: bool,
}

impl Ghost {
    fn insert(&mut self, hash: u64, capacity: usize) {
        self.order.push_back(hash);
        self.members.entry(hash).or_default().copies += 1;
        while self.order.len() > capacity.max(64) {
            let old = self.order.pop_front().expect("nonempty");
            self.forget_one(old);
        }
    }

    fn forget_one(&mut self, hash: u64) {
        if let std::collections::hash_map::Entry::Occupied(mut o) = self.members.entry(hash) {
            o.get_mut().copies -= 1;
            if o.get().copies == 0 {
                o.remove();
            }
        }
    }

    /// Whether `hash` was evicted recently; forgets it (it goes to main now).
    fn take(&mut self, hash: u64) -> bool {
        // The hash stays in `order` and is dropped from it in turn; the count says it is
        // no longer a member once every copy has been taken or aged out.
        let member = self.members.contains_key(&hash);
        if member {
            self.forget_one(hash);
        }
        member
    }

    /// Whether a read of `hash` that missed should move the split: it was evicted recently
    /// and no read signalled it since.
    fn signal(&mut self, hash: u64) -> bool {
        match self.members.get_mut(&hash) {
            Some(member) if !member.signalled => {
                member.signalled = true;
                true
            }
            _ => false,
        }
    }
}

/// The small queue's share of the queued bytes, in thousandths: where it starts (S3-FIFO's
/// 10%), and its bounds and step (see "The split adapts" in the module's docs).
const SMALL_SHARE_START: u32 = 100;
const SMALL_SHARE_MIN: u32 = 10;
const SMALL_SHARE_MAX: u32 = 990;
const SMALL_SHARE_STEP: u32 = 10;

/// The cache shared by every worker.
pub struct Cache {
    map: Map<Key, Item>,
    settings: Settings,
    clock: Clock,
    /// Unix time of server time 0.
    process_started: i64,
    /// Bytes charged (items and queue nodes), wrapping: it may dip below zero for a moment,
    /// when a write that replaces or removes an item subtracts its charge before the item's
    /// own writer has settled the rest of it (a reservation is an estimate, settled after the
    /// publication). Read it with [`Cache::charged`].
    used: CachePadded<AtomicUsize>,
    /// The limit on `used`: `-m`, changed by `cache_memlimit`.
    memory_limit: AtomicUsize,
    queues: Box<[CachePadded<Mutex<Queues>>]>,
    /// The small queue's target share of the queued bytes, in thousandths (adapted by
    /// [`Session::missed`]).
    small_share: AtomicU32,
    /// One set per worker, and one last for the housekeeping sweep (`count_housekeeping`).
    counters: Box<[CachePadded<Counters>]>,
    /// Seconds between its last read (or its store) and its eviction, of the item evicted
    /// last (`stats items`' `evicted_time`).
    evicted_idle: AtomicU32,
    /// What each counter summed to at the last `stats reset` (`stats` reports the sum less
    /// this: the workers' own counters are never written by another thread).
    counters_at_reset: [AtomicU64; COUNTERS.len()],
    /// Items stored before a `flush_all` without delay are invalid: their generation is
    /// older than this.
    flush_generation: AtomicU32,
    /// `flush_all` with a delay: once the server time reaches it, items stored at or
    /// before it are invalid (0 = none pending).
    oldest_live: AtomicU32,
    /// Whether any expiry time or flush was ever given: until then no item can expire and
    /// `reclaim_expired` has nothing to look for.
    expiry_seen: AtomicBool,
    /// The next CAS unique: one counter for all workers, so a later write of a key always
    /// has a larger unique than an earlier one (`ms I` compares them as memcached does;
    /// per-worker counters interleaved by worker id were unique but not ordered across
    /// workers). One uncontended-enough RMW per write: a request's system calls cost far more.
    next_unique: CachePadded<AtomicU64>,
    /// The persistence directory (`-e`), set once the items it held are restored.
    store: std::sync::OnceLock<Store>,
    /// A persistent cache's restore is running: writes wait (`wait_restored`).
    restoring: AtomicBool,
    restore_gate: Mutex<()>,
    restore_done: std::sync::Condvar,
}

/// Why a persistent cache could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The index could not be made.
    Map(floe::Error),
    /// The directory could not be opened or read.
    Store(StoreError),
}

impl core::fmt::Display for OpenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OpenError::Map(error) => write!(f, "cannot create the cache: {error}"),
            OpenError::Store(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for OpenError {}

impl Cache {
    /// A cache with these settings and the system clock.
    pub fn new(settings: Settings) -> Result<Self, floe::Error> {
        Self::with_clock(
            settings,
            Clock::System(Instant::now()),
            DefaultHashBuilder::new(),
        )
    }

    /// A cache whose clock only moves by [`Cache::advance_clock`], whose server time 0 is a
    /// fixed Unix time and whose index hashes with a fixed seed (tests and the fuzz target:
    /// two such caches given the same requests answer alike, `stats cachedump`'s order of
    /// the index included).
    pub fn with_manual_clock(settings: Settings) -> Result<Self, floe::Error> {
        let mut cache = Self::with_clock(
            settings,
            Clock::Manual(AtomicU32::new(2)),
            DefaultHashBuilder::with_seed(0x666c_6f65),
        )?;
        cache.process_started = 1_700_000_000;
        Ok(cache)
    }

    fn with_clock(
        settings: Settings,
        clock: Clock,
        hasher: DefaultHashBuilder,
    ) -> Result<Self, floe::Error> {
        let workers = settings.workers.max(1);
        let map = Map::builder()
            .hasher(hasher)
            .capacity(settings.initial_keys)
            .build()?;
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Ok(Cache {
            map,
            clock,
            process_started: unix - 2,
            used: CachePadded::new(AtomicUsize::new(0)),
            memory_limit: AtomicUsize::new(settings.memory_limit),
            queues: (0..workers)
                .map(|_| CachePadded::new(Mutex::default()))
                .collect(),
            counters: (0..=workers)
                .map(|_| CachePadded::new(Counters::new()))
                .collect(),
            evicted_idle: AtomicU32::new(0),
            small_share: AtomicU32::new(SMALL_SHARE_START),
            counters_at_reset: core::array::from_fn(|_| AtomicU64::new(0)),
            flush_generation: AtomicU32::new(0),
            oldest_live: AtomicU32::new(0),
            expiry_seen: AtomicBool::new(false),
            next_unique: CachePadded::new(AtomicU64::new(1)),
            store: std::sync::OnceLock::new(),
            restoring: AtomicBool::new(false),
            restore_gate: Mutex::new(()),
            restore_done: std::sync::Condvar::new(),
            settings: Settings {
                workers,
                ..settings
            },
        })
    }

    /// A cache with the system clock whose items are kept in `dir` (`-e`, `persist.rs`).
    /// The directory's files are read and checked here; the items they hold are restored by
    /// a thread of their own while the server already serves: reads meanwhile find the
    /// items restored so far (a key not yet restored is a miss, as in any cache warming up),
    /// and writes wait until the restore is done ([`Cache::wait_restored`]), so no write
    /// can be overtaken by an older restored value and no delete or flush undone.
    ///
    /// # Errors
    /// The directory cannot be created, locked (another server has it) or read, or holds a
    /// foreign or damaged file (`StoreError` says which); the directory is left as it was.
    pub fn open(
        settings: Settings,
        dir: &std::path::Path,
        options: StoreOptions,
    ) -> Result<(Arc<Cache>, Replayed), OpenError> {
        let started = Instant::now();
        let cache = Arc::new(
            Self::with_clock(
                settings,
                Clock::System(Instant::now()),
                DefaultHashBuilder::new(),
            )
            .map_err(OpenError::Map)?,
        );
        let workers = cache.settings.workers;
        let now_unix = cache.process_started + cache.now() as i64;
        let (store, replayed, replay) =
            Store::open(dir, workers, options, now_unix).map_err(OpenError::Store)?;
        let restore = replay.restore();
        cache
            .flush_generation
            .store(restore.generation, Ordering::Relaxed);
        if restore.oldest_live != 0 {
            let when = (restore.oldest_live - cache.process_started).clamp(1, u32::MAX as i64);
            cache.oldest_live.store(when as u32, Ordering::Relaxed);
            cache.note_expiry();
        }
        cache
            .next_unique
            .fetch_max(restore.max_cas.saturating_add(1), Ordering::Relaxed);
        cache.restoring.store(true, Ordering::Relaxed);
        let background = Arc::clone(&cache);
        let spawned = std::thread::Builder::new()
            .name("floe-restore".into())
            .spawn(move || {
                let restoring =
                    std::panic::AssertUnwindSafe(|| background.restore(replay.restore()));
                let Ok(restored) = std::panic::catch_unwind(restoring) else {
                    // A bug. Writes wait for the restore, so going on would hang them, and a
                    // snapshot of a half-restored map would lose items: stop here (the
                    // directory is as it was, the next start restores it).
                    crate::log!(0, "the restore failed; stopping");
                    std::process::abort();
                };
                crate::log!(
                    1,
                    "restored {restored} items in {:.3} s",
                    started.elapsed().as_secs_f64()
                );
                drop(replay);
                // The store is set only now: nothing is journaled while the items go in (no
                // write runs), and a checkpoint cannot snapshot a half-restored map.
                if background.store.set(store).is_err() {
                    unreachable!("the store is set once, here");
                }
                background.finish_restore();
            });
        if let Err(error) = spawned {
            return Err(OpenError::Store(StoreError::Io(
                "start the restore of",
                dir.to_path_buf(),
                error,
            )));
        }
        Ok((cache, replayed))
    }

    /// Wait until the restore of a persistent cache is done (every write, and a checkpoint,
    /// calls it first; one relaxed-cost load once it is done).
    pub fn wait_restored(&self) {
        // Acquire pairs with `finish_restore`'s release: a write that passes sees the store
        // set and every restored item's bookkeeping.
        if !self.restoring.load(Ordering::Acquire) {
            return;
        }
        let mut done = self
            .restore_gate
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        while self.restoring.load(Ordering::Acquire) {
            done = self
                .restore_done
                .wait(done)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Whether a restore is still running (`stats`: `persist_restoring`).
    pub fn is_restoring(&self) -> bool {
        self.restoring.load(Ordering::Acquire)
    }

    fn finish_restore(&self) {
        let _gate = self
            .restore_gate
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.restoring.store(false, Ordering::Release);
        self.restore_done.notify_all();
    }

    /// Restore replay's items, split over one thread per worker, each filling its own
    /// eviction queue (nothing else touches the queues meanwhile: only writes evict, and they
    /// wait). Returns how many were restored.
    fn restore(self: &Arc<Self>, restore: &Restore<'_>) -> usize {
        // One growth up front rather than one per doubling while the items go in (best
        // effort: a map that cannot reserve grows as it fills).
        let _ = self.map.reserve(restore.items.len());
        let workers = self.settings.workers;
        let chunk = restore.items.len().div_ceil(workers).max(1);
        std::thread::scope(|scope| {
            let threads: Vec<_> = restore
                .items
                .chunks(chunk)
                .enumerate()
                .map(|(id, items)| {
                    scope.spawn(move || {
                        let mut worker = self.worker(id);
                        let mut restored = 0;
                        // Short sessions: a pin held for the whole restore would keep every
                        // item evicted meanwhile allocated.
                        for batch in items.chunks(1024) {
                            restored += worker.session().restore(batch);
                        }
                        restored
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|thread| thread.join().expect("a restore thread panicked"))
                .sum()
        })
    }

    /// Sync the journals (the housekeeping thread's tick; a no-op without `-e`).
    pub fn sync(&self) {
        if let Some(store) = self.store.get() {
            store.sync();
        }
    }

    /// Whether the journals have grown enough to be compacted into a snapshot.
    pub fn wants_checkpoint(&self) -> bool {
        self.store.get().is_some_and(Store::wants_compaction)
    }

    /// Write a snapshot of every valid item and drop the journals it replaces (`persist.rs`,
    /// "Snapshots"); the housekeeping thread runs it when the journals have grown, and the
    /// server at a clean stop. Returns the snapshot's bytes (`None` without `-e`). Writers
    /// go on meanwhile; the map stays pinned while it is read.
    ///
    /// # Errors
    /// A file could not be written; the directory still restores everything (replay reads
    /// the older snapshot and the journals since).
    pub fn checkpoint(&self) -> Result<Option<u64>, StoreError> {
        self.wait_restored();
        let Some(store) = self.store.get() else {
            return Ok(None);
        };
        store
            .compact(|snapshot| {
                snapshot.push(&self.flush_record(0))?;
                let map = self.map.pin();
                let now = self.now();
                for (key, item) in map.iter() {
                    if self.validity(item, now).is_ok() {
                        snapshot.push(&self.item_record(key, item))?;
                    }
                }
                Ok(())
            })
            .map(Some)
    }

    /// The persistence directory (`-e`; `None` without it or while restoring).
    pub fn persistence_dir(&self) -> Option<&std::path::Path> {
        self.store.get().map(Store::dir)
    }

    /// With `-e`: journal bytes since the last snapshot, snapshots written, and whether a
    /// failed write turned persistence off.
    pub fn persistence(&self) -> Option<(u64, u64, bool)> {
        self.store
            .get()
            .map(|store| (store.journal_bytes(), store.snapshots(), store.failed()))
    }

    /// A server time as a Unix time (0 stays 0: never).
    fn unix_of(&self, time: u32) -> i64 {
        if time == 0 {
            0
        } else {
            self.process_started + time as i64
        }
    }

    /// The record of an item as it stands.
    fn item_record<'i>(&self, key: &'i [u8], item: &'i Item) -> Record<'i> {
        Record {
            key,
            data: &item.data,
            flags: item.flags,
            cas: item.cas,
            expires: self.unix_of(item.exptime),
            stored: self.process_started + item.time as i64,
            generation: item.generation,
            stale: item.stale,
            binary_key: item.binary_key,
            ..Record::new(Kind::Item, item.seq)
        }
    }

    /// The record of the flush state now.
    fn flush_record(&self, seq: u64) -> Record<'static> {
        Record {
            generation: self.flush_generation.load(Ordering::Relaxed),
            expires: self.unix_of(self.oldest_live.load(Ordering::Relaxed)),
            ..Record::new(Kind::Flush, seq)
        }
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The server time: seconds since start, plus 2.
    pub fn now(&self) -> u32 {
        match &self.clock {
            Clock::System(started) => started.elapsed().as_secs() as u32 + 2,
            Clock::Manual(now) => now.load(Ordering::Relaxed),
        }
    }

    /// Whether this cache answers alike for alike requests (`with_manual_clock`): `stats`
    /// then reports no CPU time or descriptors, which differ between two runs of one stream.
    pub fn is_reproducible(&self) -> bool {
        matches!(self.clock, Clock::Manual(_))
    }

    /// Move a manual clock forward (no effect on the system clock).
    pub fn advance_clock(&self, seconds: u32) {
        if let Clock::Manual(now) = &self.clock {
            now.fetch_add(seconds, Ordering::Relaxed);
        }
    }

    /// Unix time of server time 0.
    pub fn process_started(&self) -> i64 {
        self.process_started
    }

    /// A client's expiry time as server time (memcached's `realtime`): 0 never expires; up to
    /// 30 days is relative to now; beyond, an absolute Unix time; negative, already expired.
    pub fn server_time(&self, exptime: i64, now: u32) -> u32 {
        let time = self.server_time_of(exptime, now);
        if time != 0 {
            self.note_expiry();
        }
        time
    }

    fn note_expiry(&self) {
        if !self.expiry_seen.load(Ordering::Relaxed) {
            self.expiry_seen.store(true, Ordering::Relaxed);
        }
    }

    fn server_time_of(&self, exptime: i64, now: u32) -> u32 {
        if exptime == 0 {
            0
        } else if exptime < 0 {
            1
        } else if exptime > REALTIME_MAXDELTA {
            if exptime <= self.process_started {
                1
            } else {
                (exptime - self.process_started).min(u32::MAX as i64) as u32
            }
        } else {
            (exptime + now as i64).min(u32::MAX as i64) as u32
        }
    }

    /// The memory limit now (`-m`, or what `cache_memlimit` set since).
    pub fn memory_limit(&self) -> usize {
        self.memory_limit.load(Ordering::Relaxed)
    }

    /// Change the memory limit (`cache_memlimit`); a lower one is reached by the evictions
    /// of the stores that follow.
    pub fn set_memory_limit(&self, bytes: usize) {
        self.memory_limit.store(bytes, Ordering::Relaxed);
    }

    /// Bytes charged now (items and their queue nodes).
    pub fn bytes(&self) -> usize {
        self.charged().max(0) as usize
    }

    /// `used` as the signed sum it is (see `used`).
    fn charged(&self) -> isize {
        self.used.load(Ordering::Relaxed) as isize
    }

    /// Items in the index (expired ones not yet unlinked included, as memcached counts).
    pub fn items(&self) -> usize {
        self.map.len()
    }

    /// The eviction queues as `stats items` reports them: nodes in the small and main
    /// queues over every shard, and the seconds since the last read (or the store) of the
    /// item at the head of each (the oldest of the shards'; 0 for an empty queue).
    pub fn queues_summary(&self) -> QueuesSummary {
        let now = self.now();
        let map = self.map.pin();
        let mut summary = QueuesSummary::default();
        for shard in self.queues.iter() {
            // The head's key is copied out, so the shard's lock is not held over the lookup.
            let (small, main) = {
                let queues = lock(shard);
                summary.small += queues.small.len();
                summary.main += queues.main.len();
                let head = |fifo: &Fifo| fifo.nodes.front().map(|n| (n.key.clone(), n.id));
                (head(&queues.small), head(&queues.main))
            };
            let age = |head: Option<(Key, u64)>| {
                head.and_then(|(key, id)| {
                    map.get(&key[..])
                        .filter(|item| item.node == id)
                        .map(|item| now.saturating_sub(item.last_access()))
                })
                .unwrap_or(0)
            };
            summary.small_age = summary.small_age.max(age(small));
            summary.main_age = summary.main_age.max(age(main));
        }
        summary
    }

    /// Statistics of the index's table (its bytes, whether it is growing).
    pub fn index_stats(&self) -> floe::Stats {
        self.map.stats()
    }

    /// Bytes of the index's table (the map's slots; entries are charged to their items).
    pub fn index_capacity(&self) -> usize {
        self.map.capacity()
    }

    /// Bytes of the index's table (16 per slot).
    pub fn index_bytes(&self) -> usize {
        self.map.capacity() * 16
    }

    /// The sum of a counter over the workers since start or the last `stats reset`.
    pub fn counter(&self, counter: Counter) -> u64 {
        self.counter_since_start(counter)
            .wrapping_sub(self.counters_at_reset[counter as usize].load(Ordering::Relaxed))
    }

    fn counter_since_start(&self, counter: Counter) -> u64 {
        self.counters
            .iter()
            .map(|c| c.events[counter as usize].load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// Bump a counter of the housekeeping sweep's (which may run on more than one thread
    /// in tests: a read-modify-write, unlike a worker's).
    fn count_housekeeping(&self, counter: Counter, by: u64) {
        self.counters[self.settings.workers].events[counter as usize]
            .fetch_add(by, Ordering::Relaxed);
    }

    /// The small queue's target share of the queued bytes, in thousandths. A tuning value,
    /// read and moved with relaxed atomics: any value within its bounds is a valid split.
    pub fn small_queue_share(&self) -> u32 {
        self.small_share.load(Ordering::Relaxed)
    }

    /// Seconds the item evicted last had gone unread when it was evicted.
    pub fn evicted_idle(&self) -> u32 {
        self.evicted_idle.load(Ordering::Relaxed)
    }

    /// `stats reset`: every counter reads 0 from now on (gauges such as `bytes` and
    /// `curr_items` are not counters and stay).
    pub fn reset_counters(&self) {
        for (counter, _) in COUNTERS {
            self.counters_at_reset[counter as usize]
                .store(self.counter_since_start(counter), Ordering::Relaxed);
        }
    }

    /// Bytes allocated for connections' input buffers, for their output buffers, and the
    /// connections holding an input buffer, over every worker as of their last idle sweeps.
    pub fn connection_buffers(&self) -> (u64, u64, u64) {
        let sum = |gauge: fn(&Counters) -> &AtomicU64| {
            self.counters
                .iter()
                .map(|c| gauge(c).load(Ordering::Relaxed))
                .sum()
        };
        (
            sum(|c| &c.input_bytes),
            sum(|c| &c.output_bytes),
            sum(|c| &c.input_buffers),
        )
    }

    /// Bytes of replies built and not yet sent, over every connection.
    pub fn pending_output(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.pending_output.load(Ordering::Relaxed))
            .sum()
    }

    /// `flush_all`: invalidate every item now, or, with a delay, every item stored before
    /// server time `now + delay`, once that time comes.
    pub fn flush_all(&self, delay: i64, now: u32) {
        self.note_expiry();
        let when = if delay > 0 {
            self.server_time(delay, now)
        } else {
            0
        };
        if when > now {
            self.oldest_live.store(when - 1, Ordering::Relaxed);
        } else {
            self.oldest_live.store(0, Ordering::Relaxed);
            self.flush_generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether an item is still valid at `now`; `Err` says why not (expired, flushed).
    fn validity(&self, item: &Item, now: u32) -> Result<(), Counter> {
        let exptime = item.exptime();
        if exptime != 0 && exptime <= now {
            return Err(Counter::GetExpired);
        }
        if item.generation != self.flush_generation.load(Ordering::Relaxed) {
            return Err(Counter::GetFlushed);
        }
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        if oldest_live != 0 && oldest_live <= now && item.time <= oldest_live {
            return Err(Counter::GetFlushed);
        }
        Ok(())
    }

    /// A worker: the per-thread context every operation runs in. `id` picks its eviction
    /// queue and counters: make one worker per id in `0..settings().workers` (the counters
    /// of an id are written by one thread).
    pub fn worker(self: &Arc<Self>, id: usize) -> Worker {
        Worker {
            cache: Arc::clone(self),
            id: id % self.settings.workers,
            journal: Vec::new(),
        }
    }

    /// Unlink every expired or flushed item (the server's housekeeping thread runs it every
    /// few seconds; requests never wait for it), skipped while no request ever gave an
    /// expiry time or a flush. Returns how many it unlinked.
    ///
    /// One pass over the eviction queues, which name every item (its node), in slices of 256
    /// nodes (`SWEEP_SLICE`): a slice's keys are copied under its shard's lock, then looked
    /// up under a pin of the map of its own, so neither the lock nor the pin (which holds
    /// back the freeing of replaced entries) is held for more than a slice, and the memory
    /// the sweep takes does not grow with the cache. The pass covers each queue as far as
    /// it reached when the pass came to it; items queued later wait for the next pass.
    /// Reads never return an expired item meanwhile: they check every item they find.
    pub fn reclaim_expired(&self) -> usize {
        if !self.expiry_seen.load(Ordering::Relaxed) {
            return 0;
        }
        let mut slice = Vec::with_capacity(SWEEP_SLICE);
        let (mut unlinked, mut checked, mut unfetched) = (0, 0, 0);
        for shard in self.queues.iter() {
            for small in [true, false] {
                let (mut at, end) = {
                    let mut queues = lock(shard);
                    let fifo = queues.fifo(small);
                    (fifo.popped, fifo.end())
                };
                while at < end {
                    at = lock(shard).fifo(small).copy_slice(at, end, &mut slice);
                    let map = self.map.pin();
                    let now = self.now();
                    checked += slice.len() as u64;
                    for (key, id) in slice.drain(..) {
                        let expired =
                            |item: &Item| item.node == id && self.validity(item, now).is_err();
                        if !map.get(&key[..]).is_some_and(expired) {
                            continue;
                        }
                        let unlinkable = |item: &Item| self.removing_if(&key, item, expired(item));
                        if let Some(item) = map.remove_if(&key[..], unlinkable) {
                            self.used.fetch_sub(item.charge(), Ordering::Relaxed);
                            unlinked += 1;
                            unfetched += u64::from(!item.was_fetched());
                        }
                    }
                }
            }
        }
        self.count_housekeeping(Counter::CrawlerStarts, 1);
        self.count_housekeeping(Counter::CrawlerItemsChecked, checked);
        self.count_housekeeping(Counter::CrawlerReclaimed, unlinked as u64);
        self.count_housekeeping(Counter::ExpiredUnfetched, unfetched);
        unlinked
    }

    /// Call `f` on up to `limit` valid items (in the index's order; weakly consistent)
    /// until it answers `false`.
    pub fn for_each_item(&self, limit: usize, mut f: impl FnMut(&[u8], &Item) -> bool) {
        let map = self.map.pin();
        let now = self.now();
        for (key, item) in map
            .iter()
            .filter(|(_, item)| self.validity(item, now).is_ok())
            .take(limit)
        {
            if !f(key, item) {
                return;
            }
        }
    }

    /// One stretch of a walk over the valid items taken in pieces (`MapRef::iter_run`): call
    /// `f` on those in the run of the index's bins at hash position `from` (0 for the
    /// first); the next run's position, or `None` after the last. Following the positions
    /// visits every item valid throughout exactly once, whatever the index does meanwhile.
    pub fn items_run(&self, from: u64, mut f: impl FnMut(&[u8], &Item)) -> Option<u64> {
        let map = self.map.pin();
        let now = self.now();
        map.iter_run(from, |key, item| {
            if self.validity(item, now).is_ok() {
                f(key, item);
            }
        })
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.map.hasher().hash_one(key)
    }

    /// In a persistent cache, note that a removal of `key` about to take effect stands for
    /// number `seq` (a delete's own, the removed item's for an eviction or an expiry unlink):
    /// an insert of `key` decided before it and landing after it re-sequences (`persist.rs`,
    /// "An absent key has no version"). Call it from the removal's test, once it accepts.
    fn note_removal(&self, key: &[u8], seq: u64) {
        if let Some(store) = self.store.get() {
            store.removing(self.hash(key), seq);
        }
    }

    /// A test of a removal that is not journaled (an eviction, an expiry unlink): `remove`,
    /// the removed item's number noted first if it is (`note_removal`).
    fn removing_if(&self, key: &[u8], item: &Item, remove: bool) -> bool {
        if remove {
            self.note_removal(key, item.seq);
        }
        remove
    }
}

/// Unlink the item a read found invalid at `now` (`key`'s, with CAS unique `cas`) if it is
/// still there and still invalid at `now`; uncharges it. The unique alone does not name that
/// item: a `touch` publishes a copy with the same unique and a new expiry, and one whose
/// session began before the reader's (an earlier `now`) may have found the item valid and
/// answered TOUCHED; that copy stays unless it too is invalid at the reader's time.
fn unlink(
    map: &MapRef<'_, Key, Item, DefaultHashBuilder>,
    cache: &Cache,
    key: &[u8],
    cas: u64,
    now: u32,
) -> bool {
    match map.remove_if(key, |item| {
        cache.removing_if(
            key,
            item,
            item.cas == cas && cache.validity(item, now).is_err(),
        )
    }) {
        Some(item) => {
            cache.used.fetch_sub(item.charge(), Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// The part of a new item that comes from the write making it.
struct Stamp {
    /// A unique no other write has: the id of the queue node the item gets if it needs one.
    unique: u64,
    /// The item's CAS unique: `unique`, unless the client chose it (meta `E`). Node ids
    /// stay `unique`s, so a client's choice can never make two nodes of a key alike.
    cas: u64,
    now: u32,
    generation: u32,
    binary_key: bool,
}

impl Stamp {
    fn item(&self, data: Box<[u8]>, flags: u32, exptime: u32) -> Item {
        Item {
            charge: item_charge(data.len()) as u32,
            data,
            cas: self.cas,
            flags,
            exptime,
            time: self.now,
            generation: self.generation,
            freq: AtomicU8::new(0),
            fetched: AtomicU8::new(0),
            last_access: AtomicU32::new(self.now),
            binary_key: self.binary_key,
            // A new node, unless the write hands on the node of the item it replaces.
            node: self.unique,
            key_charged: false,
            stale: false,
            token_sent: AtomicBool::new(false),
            seq: 0,
        }
    }
}

/// What a write published.
struct Published {
    cas: u64,
    /// The write's unique: the id of the node it queued, if it queued one.
    unique: u64,
    /// The new item's charge.
    charge: usize,
    /// Whether the item needs a queue node of its own (its key was absent from the index);
    /// otherwise it kept the node of the item it replaced.
    queues_node: bool,
}

/// A worker thread's handle on the cache.
pub struct Worker {
    cache: Arc<Cache>,
    id: usize,
    /// Records of the current session's writes, written to the journal when it ends.
    journal: Vec<u8>,
}

impl Worker {
    /// The cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Report the bytes this worker's connections hold allocated for input and for output
    /// buffers, and how many hold an input buffer (for `stats`).
    pub fn set_buffer_bytes(&self, input: usize, output: usize, input_buffers: usize) {
        let counters = &self.cache.counters[self.id];
        counters.input_bytes.store(input as u64, Ordering::Relaxed);
        counters
            .output_bytes
            .store(output as u64, Ordering::Relaxed);
        counters
            .input_buffers
            .store(input_buffers as u64, Ordering::Relaxed);
    }

    /// Bump a counter of this worker's (outside a session: the server's byte counts).
    pub fn count(&self, counter: Counter, by: u64) {
        bump(&self.cache.counters[self.id].events[counter as usize], by);
    }

    /// Report the bytes of replies this worker's connections hold unsent (for `stats`).
    pub fn set_pending_output(&self, bytes: usize) {
        self.cache.counters[self.id]
            .pending_output
            .store(bytes as u64, Ordering::Relaxed);
    }

    /// Begin a run of operations at the current server time: pins the map (entries read
    /// stay valid until the session ends; keep sessions short, one per batch of requests).
    pub fn session(&mut self) -> Session<'_> {
        let now = self.cache.now();
        let Worker { cache, id, journal } = self;
        Session {
            _cut: cache.store.get().map(Store::hold_cut),
            map: cache.map.pin(),
            cache,
            id: *id,
            now,
            journal: core::cell::RefCell::new(journal),
        }
    }
}

/// Operations at one server time under one pin of the map.
pub struct Session<'w> {
    cache: &'w Cache,
    map: MapRef<'w, Key, Item, DefaultHashBuilder>,
    id: usize,
    now: u32,
    /// The worker's journal buffer (a `RefCell`: `touch` journals through `&self`).
    journal: core::cell::RefCell<&'w mut Vec<u8>>,
    /// A persistent cache's cut between journal generations, held until this session's
    /// records are appended (released after `drop` has appended them: `persist.rs`).
    _cut: Option<std::sync::RwLockReadGuard<'w, ()>>,
}

impl Drop for Session<'_> {
    /// Write the session's records to the worker's journal: before the event loop sends the
    /// replies, so a write a client heard of is in the kernel (`persist.rs`).
    fn drop(&mut self) {
        let journal = self.journal.get_mut();
        if journal.is_empty() {
            return;
        }
        if let Some(store) = self.cache.store.get() {
            store.append(self.id, journal);
        }
        journal.clear();
    }
}

/// A write's decision with its sequence number taken, in a persistent cache: inside the
/// decision, after it read the item it replaces (`persist.rs` argues why that orders the
/// numbers of a key's writes as the map orders the writes).
fn sequenced<R>(cache: &Cache, operation: Operation<Item, R>) -> Operation<Item, R> {
    match (cache.store.get(), operation) {
        (Some(store), Operation::Insert(item)) => Operation::Insert(Item {
            seq: store.next_seq(),
            ..item
        }),
        (_, operation) => operation,
    }
}

impl<'w> Session<'w> {
    /// The server time of this session.
    pub fn now(&self) -> u32 {
        self.now
    }

    /// The cache.
    pub fn cache(&self) -> &'w Cache {
        self.cache
    }

    /// Bump a counter of this worker.
    pub fn count(&self, counter: Counter, by: u64) {
        bump(&self.cache.counters[self.id].events[counter as usize], by);
    }

    /// After a write of this session inserted `new` where `key` was absent: in a persistent
    /// cache, if a removal of a key of its stripe stood for a larger number than `new`'s
    /// meanwhile (`persist.rs`, "An absent key has no version"), journal what the key holds
    /// now again, as a copy under a new number taken in a decision that read it. `new`'s own
    /// number may be older than a set and delete of the key that came between its decision
    /// and its publication. The copy is of whatever item is present, not only of `new`:
    /// another write may have replaced `new` already, and its record, which would outnumber
    /// the delete, is in its own session's buffer until that session ends, while this one
    /// replies first; a crash between would restore the delete under a read that saw `new`.
    /// The copy keeps the CAS unique and the queue node, and is charged its own key (a fresh
    /// allocation), as a touch's is; read marks made on the item after the copy was taken are
    /// lost, as a touch loses them. If the key is absent, whatever removed it came later.
    fn inserted(&self, key: &[u8], new: &Item) {
        #[cfg(test)]
        hooks::published_absent();
        let cache = self.cache;
        let Some(store) = cache.store.get() else {
            return;
        };
        if !store.removed_after(cache.hash(key), new.seq) {
            return;
        }
        let outcome = self.map.compute(Arc::from(key), |present| match present {
            Some(item) => sequenced(
                cache,
                Operation::Insert(
                    item.with_exptime(item.exptime())
                        .taking_over(item, key.len()),
                ),
            ),
            None => Operation::Abort(()),
        });
        if let Compute::Updated { old, new: copy } = outcome {
            // Not negative: the copy is charged what the item was, and its key if it was not.
            cache
                .used
                .fetch_add(copy.charge() - old.charge(), Ordering::Relaxed);
            self.journal_item(key, copy);
        }
    }

    /// Journal the item a write published (a persistent cache only).
    fn journal_item(&self, key: &[u8], item: &Item) {
        if self.cache.store.get().is_some() {
            self.cache
                .item_record(key, item)
                .encode(&mut self.journal.borrow_mut());
        }
    }

    /// Journal a delete with sequence number `seq` (a persistent cache only).
    fn journal_delete(&self, key: &[u8], seq: u64) {
        if self.cache.store.get().is_some() {
            Record {
                key,
                ..Record::new(Kind::Delete, seq)
            }
            .encode(&mut self.journal.borrow_mut());
        }
    }

    /// `flush_all` (see [`Cache::flush_all`]), journaled.
    pub fn flush_all(&self, delay: i64) {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        self.cache.flush_all(delay, self.now);
        if let Some(store) = self.cache.store.get() {
            self.cache
                .flush_record(store.next_seq())
                .encode(&mut self.journal.borrow_mut());
        }
    }

    /// Restore replayed items (`Cache::restore`) in one batch of inserts (each bin prefetched
    /// ahead, DLHT's batches: the map's lines are what a restore waits on); returns how many
    /// were restored. An item is left out if it expired meanwhile or cannot be had within the
    /// memory limit without evicting (`-M`).
    fn restore(&mut self, records: &[Record<'_>]) -> usize {
        let mut items = Vec::with_capacity(records.len());
        for record in records {
            if let Some(item) = self.restored_item(record) {
                items.push((Key::from(record.key), item));
            }
        }
        // Each inserted item's queue node: key, id, charge.
        let nodes: Vec<(Key, u64, usize)> = items
            .iter()
            .map(|(key, item)| (key.clone(), item.node, item.charge()))
            .collect();
        let mut inserted = Vec::with_capacity(nodes.len());
        let requests = items
            .into_iter()
            .map(|(key, item)| MapRequest::<_, _, [u8]>::InsertNew(key, item));
        self.map.batch().run_each(requests, |i, response| {
            if matches!(response, MapResponse::InsertNew(Ok(Insert::Inserted))) {
                inserted.push(i);
            } else {
                // Replay gives each key once; a map that cannot grow refuses it.
                let (key, _, charge) = &nodes[i];
                self.cache
                    .used
                    .fetch_sub(charge + node_charge(key.len()), Ordering::Relaxed);
            }
        });
        let restored = inserted.len();
        let mut queues = lock(&self.cache.queues[self.id]);
        for i in inserted {
            let (key, id, charge) = nodes[i].clone();
            let hash = self.cache.hash(&key);
            queues.push(
                hash,
                Node {
                    key,
                    id,
                    charge: charge as u32,
                },
            );
        }
        restored
    }

    /// The item a replayed record restores, charged against the memory limit; `None` if it
    /// expired meanwhile or does not fit (`-M`).
    fn restored_item(&mut self, record: &Record<'_>) -> Option<Item> {
        let cache = self.cache;
        let exptime = match record.expires {
            0 => 0,
            unix => {
                let time = unix - cache.process_started;
                if time <= self.now as i64 {
                    return None;
                }
                cache.note_expiry();
                time.min(u32::MAX as i64) as u32
            }
        };
        let (charge, node) = (
            item_charge(record.data.len()),
            node_charge(record.key.len()),
        );
        if too_large(cache, record.key.len(), record.data.len()) || !self.reserve(charge + node) {
            return None;
        }
        Some(Item {
            charge: charge as u32,
            data: record.data.into(),
            cas: record.cas,
            flags: record.flags,
            exptime,
            // Stored before this process began: server time 0, older than any flush's.
            time: (record.stored - cache.process_started).clamp(0, u32::MAX as i64) as u32,
            generation: cache.flush_generation.load(Ordering::Relaxed),
            freq: AtomicU8::new(0),
            fetched: AtomicU8::new(0),
            last_access: AtomicU32::new(self.now),
            binary_key: record.binary_key,
            node: self.next_cas(),
            key_charged: false,
            stale: record.stale,
            token_sent: AtomicBool::new(false),
            seq: record.seq,
        })
    }

    /// A CAS unique no other write has, larger than every one taken before it (never 0,
    /// which means "no CAS" in requests).
    fn next_cas(&mut self) -> u64 {
        self.cache.next_unique.fetch_add(1, Ordering::Relaxed)
    }

    /// Look up many keys in one batch (bins prefetched, then entries); `found[i]` is the
    /// valid item of `keys[i]`. Expired and flushed items are unlinked and answered `None`.
    /// Counts `get_hits` / `get_misses` when `count` is set. Does not mark the items read
    /// (the caller does, with [`Session::mark_read`], once it has used what the marks were).
    pub fn get_many<'s>(&'s self, keys: &[&[u8]], found: &mut Vec<Option<&'s Item>>, count: bool) {
        found.clear();
        found.resize(keys.len(), None);
        self.map
            .get_many(keys, found)
            .expect("as many answers as keys");
        let mut hits = 0;
        for (slot, key) in found.iter_mut().zip(keys) {
            *slot = slot.and_then(|item| self.valid(key, item));
            if slot.is_some() {
                hits += 1;
            }
        }
        if count {
            self.count(Counter::CmdGet, keys.len() as u64);
            self.count(Counter::GetHits, hits);
            self.count(Counter::GetMisses, keys.len() as u64 - hits);
        }
    }

    /// One key's valid item, without counting or marking it read.
    pub fn peek(&self, key: &[u8]) -> Option<&Item> {
        self.map.get(key).and_then(|item| self.valid(key, item))
    }

    /// A read of `key` missed. If the key was evicted recently, the queues' split was wrong
    /// for this workload: a key evicted unread from small and asked for again says small is
    /// too short (its items leave before their first read), one evicted from main says main
    /// is. Each moves the small queue's share by `SMALL_SHARE_STEP` (see "The split adapts"
    /// in the module's docs). A shard busy with an eviction is not waited for: its ghosts
    /// are skipped this time.
    pub fn missed(&self, key: &[u8]) {
        let cache = self.cache;
        let hash = cache.hash(key);
        for shard in cache.queues.iter() {
            let Ok(mut queues) = shard.try_lock() else {
                continue;
            };
            let grow = if queues.ghost.signal(hash) {
                true
            } else if queues.main_ghost.signal(hash) {
                false
            } else {
                continue;
            };
            drop(queues);
            let _ = cache
                .small_share
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |share| {
                    Some(if grow {
                        (share + SMALL_SHARE_STEP).min(SMALL_SHARE_MAX)
                    } else {
                        share.saturating_sub(SMALL_SHARE_STEP).max(SMALL_SHARE_MIN)
                    })
                });
            return;
        }
    }

    /// Mark an item read (for eviction and the meta protocol's `h` and `l` flags).
    pub fn mark_read(&self, item: &Item) {
        let freq = item.freq.load(Ordering::Relaxed);
        if freq < 3 {
            item.freq.store(freq + 1, Ordering::Relaxed);
        }
        if item.fetched.load(Ordering::Relaxed) == 0 {
            item.fetched.store(1, Ordering::Relaxed);
        }
        if item.last_access.load(Ordering::Relaxed) != self.now {
            item.last_access.store(self.now, Ordering::Relaxed);
        }
    }

    /// `item` if valid now; otherwise unlinks it and answers `None`.
    fn valid<'s>(&'s self, key: &[u8], item: &'s Item) -> Option<&'s Item> {
        match self.cache.validity(item, self.now) {
            Ok(()) => Some(item),
            Err(why) => {
                // Counted by the read that unlinks it: a batch may hold the key twice, and
                // memcached, which unlinks at the first, counts one.
                if unlink(&self.map, self.cache, key, item.cas, self.now) {
                    self.count(why, 1);
                }
                None
            }
        }
    }

    /// Set a valid item's expiry (`touch`, `gat`); the item keeps its value, flags, CAS
    /// unique and read marks. A copy of the item with the new expiry replaces it in one
    /// swap: storing the expiry in place would race with a writer copying the item (an
    /// `append` that read the old expiry and publishes after the store would undo the
    /// touch). The copy keeps the queue node (and CAS unique), and is charged its own key
    /// as any write that replaces an item is (even over the limit: a touch does not fail
    /// for want of memory).
    ///
    /// FIXME: the copy takes the win token's state when it is made; a read that takes the
    /// token from the old item between then and the swap leaves the copy's token free, so a
    /// touch racing with a stale item's first read can let a second client win it too
    /// (memcached changes the item in place under its lock). `ms ... I` and an in-place
    /// `incr` copy the same way. Harmless but for one extra recache; closing it would need
    /// the token shared between the copies (an `Arc<AtomicBool>` carried by in-place copies).
    pub fn touch(&self, key: &[u8], exptime: u32) -> Option<&Item> {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        let cache = self.cache;
        let now = self.now;
        let outcome = self.map.compute(Arc::from(key), |present| {
            sequenced(
                cache,
                match present.filter(|item| cache.validity(item, now).is_ok()) {
                    Some(item) => {
                        Operation::Insert(item.with_exptime(exptime).taking_over(item, key.len()))
                    }
                    None => Operation::Abort(()),
                },
            )
        });
        match outcome {
            Compute::Updated { old, new } => {
                cache
                    .used
                    .fetch_add(new.charge() - old.charge(), Ordering::Relaxed);
                self.journal_item(key, new);
                Some(new)
            }
            _ => None,
        }
    }

    /// What every item this write makes carries: a fresh unique (its CAS unique, unless
    /// `cas` chooses another), the time, the flush generation.
    fn stamp(&mut self, cas: Option<u64>) -> Stamp {
        let unique = self.next_cas();
        Stamp {
            unique,
            cas: cas.unwrap_or(unique),
            now: self.now,
            generation: self.cache.flush_generation.load(Ordering::Relaxed),
            binary_key: false,
        }
    }

    /// Store `data` under `key`. `compare` is a CAS unique the present item must have
    /// (`cas`, `ms ... C`), if any. The caller checked the key's length.
    pub fn store(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        data: &[u8],
        compare: Option<u64>,
    ) -> Stored {
        self.store_with(
            mode,
            key,
            flags,
            exptime,
            data,
            compare,
            MetaStore::default(),
        )
    }

    /// [`store`](Self::store) with what a meta command adds (see [`MetaStore`]).
    #[allow(clippy::too_many_arguments)]
    pub fn store_with(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        data: &[u8],
        compare: Option<u64>,
        meta: MetaStore,
    ) -> Stored {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        self.count(Counter::CmdSet, 1);
        let charge = item_charge(data.len());
        if too_large(self.cache, key.len(), data.len()) {
            self.count(Counter::StoreTooLarge, 1);
            return Stored::TooLarge;
        }
        // The item and the queue node it may get. Appends and prepends grow the value: they
        // reserve the rest below, once the present value's length is known.
        let node = node_charge(key.len());
        if !self.reserve(charge + node) {
            self.count(Counter::StoreNoMemory, 1);
            return Stored::OutOfMemory;
        }
        let key: Key = Arc::from(key);
        match self.store_computed(mode, &key, flags, exptime, data, compare, meta) {
            Ok(published) => {
                let needed = published.charge + if published.queues_node { node } else { 0 };
                self.settle(charge + node, needed);
                if published.queues_node {
                    self.enqueue(key, published.unique, published.charge);
                }
                self.count(Counter::TotalItems, 1);
                if compare.is_some() {
                    self.count(Counter::CasHits, 1);
                }
                Stored::Stored(published.cas)
            }
            Err(failure) => {
                self.cache.used.fetch_sub(charge + node, Ordering::Relaxed);
                match failure {
                    Stored::NotFound if compare.is_some() => self.count(Counter::CasMisses, 1),
                    Stored::Exists => self.count(Counter::CasBadval, 1),
                    // An append or prepend that grew past `-I` or found no memory.
                    Stored::TooLarge => self.count(Counter::StoreTooLarge, 1),
                    Stored::OutOfMemory => self.count(Counter::StoreNoMemory, 1),
                    _ => {}
                }
                failure
            }
        }
    }

    /// Every store, as one `compute`: the decision reads the present item, so a CAS check
    /// and the write it guards are one atomic step, and the new item takes over the queue
    /// node of the item it replaces (expired or not).
    #[allow(clippy::too_many_arguments)]
    fn store_computed(
        &mut self,
        mode: StoreMode,
        key: &Key,
        flags: u32,
        exptime: u32,
        data: &[u8],
        compare: Option<u64>,
        meta: MetaStore,
    ) -> Result<Published, Stored> {
        let cache = self.cache;
        let now = self.now;
        let mut stamp = self.stamp(meta.cas);
        stamp.binary_key = meta.binary_key;
        let (cas, unique) = (stamp.cas, stamp.unique);
        // An append or prepend keeps the present item's flags, expiry and key form; like
        // memcached, it refuses to grow the value past `-I` (or the whole memory limit).
        let extend = |present: &Item, before: &[u8], after: &[u8]| {
            if too_large(cache, key.len(), before.len() + after.len()) {
                return Err(Stored::NotStored);
            }
            Ok(Item {
                binary_key: present.binary_key,
                ..stamp.item(
                    [before, after].concat().into(),
                    present.flags,
                    present.exptime(),
                )
            })
        };
        let outcome = self.map.compute(key.clone(), |present| {
            let replaced = present;
            let present = present.filter(|item| cache.validity(item, now).is_ok());
            // As memcached 1.6 (measured): with a CAS unique, set and replace answer "not
            // found" for an absent key and "exists" for another unique (or 0, which matches
            // nothing), or, invalidating, store an older unique as a stale item; append and
            // prepend answer "not stored" and "exists" (and ignore a unique of 0); add ignores
            // the unique.
            let unique_given = compare.filter(|&cas| cas != 0 || mode.replaces_whole());
            let made = match (mode, present) {
                (StoreMode::Add, Some(_)) => Err(Stored::NotStored),
                (StoreMode::Set | StoreMode::Replace, None) if compare.is_some() => {
                    Err(Stored::NotFound)
                }
                (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
                    Err(Stored::NotStored)
                }
                (_, Some(item))
                    if mode != StoreMode::Add
                        && unique_given.is_some_and(|cas| cas == 0 || cas != item.cas) =>
                {
                    let older = unique_given.is_some_and(|cas| cas != 0 && cas < item.cas);
                    if meta.invalidate && older && mode.replaces_whole() {
                        // Stored anyway, stale: the client's value is of an older version
                        // than the item's (memcached keeps the item's expiry and win token).
                        let stale = Item {
                            stale: true,
                            ..stamp.item(data.into(), flags, item.exptime())
                        };
                        stale
                            .token_sent
                            .store(item.win_token_taken(), Ordering::Relaxed);
                        Ok(stale)
                    } else {
                        Err(Stored::Exists)
                    }
                }
                (StoreMode::Append, Some(item)) => extend(item, item.data(), data),
                (StoreMode::Prepend, Some(item)) => extend(item, data, item.data()),
                _ => {
                    let item = stamp.item(data.into(), flags, exptime);
                    item.token_sent.store(meta.token_sent, Ordering::Relaxed);
                    Ok(item)
                }
            };
            let operation = sequenced(
                cache,
                match (made, replaced) {
                    (Ok(item), Some(replaced)) => {
                        Operation::Insert(item.taking_over(replaced, key.len()))
                    }
                    (Ok(item), None) => Operation::Insert(item),
                    (Err(why), _) => Operation::Abort(why),
                },
            );
            #[cfg(test)]
            hooks::decided(replaced, &operation);
            operation
        });
        let new = match outcome {
            Compute::Inserted(new) => {
                self.inserted(key, new);
                new
            }
            Compute::Updated { old, new } => {
                self.cache.used.fetch_sub(old.charge(), Ordering::Relaxed);
                new
            }
            Compute::Aborted(why) => return Err(why),
            Compute::Removed(_) | Compute::Absent => unreachable!("never removes"),
        };
        self.journal_item(key, new);
        Ok(Published {
            cas,
            unique,
            charge: new.charge(),
            queues_node: new.node == unique,
        })
    }

    /// `incr` / `decr` by `delta` (`decr` stops at 0; `incr` wraps at 2^64). `compare` is a
    /// CAS unique to check, if any; `create` an initial value and expiry for an absent
    /// key (the meta protocol's `N` / `J` flags); `pad` a shorter result with spaces to
    /// the old value's length (see below); `cas` the CAS unique to give the new value
    /// instead of a fresh one (meta `E`).
    #[allow(clippy::too_many_arguments)]
    pub fn delta(
        &mut self,
        key: &[u8],
        incr: bool,
        delta: u64,
        compare: Option<u64>,
        create: Option<(u64, u32)>,
        pad: bool,
        cas: Option<u64>,
    ) -> Delta {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        // As memcached, a unique of 0 is none.
        let compare = compare.filter(|&cas| cas != 0);
        let (hit, miss) = if incr {
            (Counter::IncrHits, Counter::IncrMisses)
        } else {
            (Counter::DecrHits, Counter::DecrMisses)
        };
        // What a counter item usually takes (20 digits); a longer value rewritten padded
        // settles the rest below.
        let charge = item_charge(24);
        let node = node_charge(key.len());
        if !self.reserve(charge + node) {
            return Delta::OutOfMemory;
        }
        let cache = self.cache;
        let now = self.now;
        let stamp = self.stamp(cas);
        let (cas, unique) = (stamp.cas, stamp.unique);
        let make = |digits: Vec<u8>, flags, exptime| stamp.item(digits.into(), flags, exptime);
        let key: Key = Arc::from(key);
        let mut value = 0;
        // Set by the decision that applied: an expired or flushed item still in the map
        // counts as absent.
        let mut created = false;
        let mut decide = |present: Option<&Item>| {
            created = false;
            let replaced = present;
            let present = present.filter(|item| cache.validity(item, now).is_ok());
            // The new item takes over the queue node of the item it replaces, if any.
            let insert = |item: Item| match replaced {
                Some(replaced) => Operation::Insert(item.taking_over(replaced, key.len())),
                None => Operation::Insert(item),
            };
            match present {
                None => match create {
                    Some((initial, exptime)) if compare.is_none() => {
                        value = initial;
                        created = true;
                        insert(make(initial.to_string().into_bytes(), 0, exptime))
                    }
                    _ => Operation::Abort(Delta::NotFound),
                },
                Some(item) if compare.is_some_and(|cas| item.cas != cas) => {
                    Operation::Abort(Delta::Exists)
                }
                Some(item) => {
                    let Some(current) = parse_counter(item.data()) else {
                        return Operation::Abort(Delta::NonNumeric);
                    };
                    value = if incr {
                        current.wrapping_add(delta)
                    } else {
                        current.saturating_sub(delta)
                    };
                    let mut digits = value.to_string().into_bytes();
                    // memcached rewrites a result no longer than the value in place, padded
                    // with spaces to the old length, when no other request holds the item
                    // (otherwise it writes a new item of the digits alone); clients see the
                    // padding, and the item rewritten in place keeps its marks (`mg`'s `h`,
                    // `l`, and the stale mark and win token).
                    let in_place = pad && digits.len() <= item.data().len();
                    if in_place {
                        digits.resize(item.data().len(), b' ');
                    }
                    let new = Item {
                        binary_key: item.binary_key,
                        ..make(digits, item.flags, item.exptime())
                    };
                    insert(if in_place {
                        new.with_marks_of(item)
                    } else {
                        new
                    })
                }
            }
        };
        let outcome = self.map.compute(key.clone(), |present| {
            let operation = sequenced(cache, decide(present));
            #[cfg(test)]
            hooks::decided(present, &operation);
            operation
        });
        let new = match outcome {
            Compute::Inserted(new) => {
                self.inserted(&key, new);
                new
            }
            Compute::Updated { old, new } => {
                self.cache.used.fetch_sub(old.charge(), Ordering::Relaxed);
                new
            }
            Compute::Aborted(why) => {
                self.cache.used.fetch_sub(charge + node, Ordering::Relaxed);
                self.count(if why == Delta::NotFound { miss } else { hit }, 1);
                return why;
            }
            Compute::Removed(_) | Compute::Absent => unreachable!("never removes"),
        };
        self.journal_item(&key, new);
        let (stored, queues_node) = (new.charge(), new.node == unique);
        // Reserved what a counter usually takes; a long value rewritten padded takes more.
        self.settle(charge + node, stored + if queues_node { node } else { 0 });
        if queues_node {
            self.enqueue(key, unique, stored);
        }
        self.count(hit, 1);
        Delta::Value(value, cas, created)
    }

    /// Delete `key` (only if its CAS unique is `compare`, when one is given).
    pub fn delete(&mut self, key: &[u8], compare: Option<u64>) -> Deleted {
        self.remove_key(key, compare, true)
    }

    /// Remove `key`'s item, not counted as a delete: a store refused (too large, out of
    /// memory) drops the value it would have replaced, as memcached does, without counting
    /// a delete as memcached does not.
    pub fn discard(&mut self, key: &[u8]) {
        self.remove_key(key, None, false);
    }

    fn remove_key(&mut self, key: &[u8], compare: Option<u64>, counted: bool) -> Deleted {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        let cache = self.cache;
        let now = self.now;
        let mut mismatch = false;
        // The delete's sequence number, taken when the test accepts (after it read the item
        // it removes, as a write's is: `sequenced`).
        let mut seq = 0;
        let removed = self.map.remove_if(key, |item| {
            mismatch =
                compare.is_some_and(|cas| item.cas != cas) && cache.validity(item, now).is_ok();
            if !mismatch {
                seq = cache.store.get().map_or(0, Store::next_seq);
                cache.note_removal(key, seq);
            }
            !mismatch
        });
        match removed {
            Some(item) => {
                self.journal_delete(key, seq);
                self.cache.used.fetch_sub(item.charge(), Ordering::Relaxed);
                if self.cache.validity(item, now).is_ok() {
                    self.count(Counter::DeleteHits, u64::from(counted));
                    Deleted::Deleted
                } else {
                    self.count(Counter::DeleteMisses, u64::from(counted));
                    Deleted::NotFound
                }
            }
            None if mismatch => Deleted::Exists,
            None => {
                self.count(Counter::DeleteMisses, u64::from(counted));
                Deleted::NotFound
            }
        }
    }

    /// `md` with `I` or `x`: change `key`'s item as `tombstone` says instead of removing it
    /// (only if its CAS unique is `compare`, when one is given). The changed item is a copy
    /// published in one swap, as a touch's is: an invalidated one keeps its value and read
    /// marks, an emptied one is new. Like a touch it never fails for want of memory (an
    /// invalidation takes what the item took, an emptying less).
    pub fn tombstone(&mut self, key: &[u8], compare: Option<u64>, tombstone: Tombstone) -> Deleted {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        let cache = self.cache;
        let now = self.now;
        let stamp = self.stamp(None);
        let mut mismatch = false;
        let outcome = self.map.compute(Arc::from(key), |present| {
            mismatch = false;
            let Some(item) = present.filter(|item| cache.validity(item, now).is_ok()) else {
                return Operation::Abort(());
            };
            if compare.is_some_and(|cas| item.cas != cas) {
                mismatch = true;
                return Operation::Abort(());
            }
            let changed = match tombstone.empty {
                // As memcached: an empty item, stored over the old one with its CAS unique.
                Some((flags, exptime)) => Item {
                    cas: tombstone.cas.unwrap_or(item.cas),
                    ..stamp.item(Box::default(), flags, exptime)
                },
                None => item.with_exptime(item.exptime()),
            };
            let changed = if tombstone.stale {
                // Marked stale with its win token put back, for the next read to take.
                changed.token_sent.store(false, Ordering::Relaxed);
                Item {
                    stale: true,
                    cas: tombstone.cas.unwrap_or(stamp.unique),
                    exptime: tombstone.exptime.unwrap_or(changed.exptime),
                    ..changed
                }
            } else {
                changed
            };
            sequenced(
                cache,
                Operation::Insert(changed.taking_over(item, key.len())),
            )
        });
        match outcome {
            Compute::Updated { old, new } => {
                self.journal_item(key, new);
                let (old, new) = (old.charge(), new.charge());
                if new >= old {
                    cache.used.fetch_add(new - old, Ordering::Relaxed);
                } else {
                    cache.used.fetch_sub(old - new, Ordering::Relaxed);
                }
                // memcached counts a removed value as a delete, not an invalidation.
                if !tombstone.stale {
                    self.count(Counter::DeleteHits, 1);
                }
                Deleted::Deleted
            }
            _ if mismatch => Deleted::Exists,
            _ => {
                self.count(Counter::DeleteMisses, 1);
                Deleted::NotFound
            }
        }
    }

    /// Settle a write's charge: `reserved` bytes were charged before it, `needed` is what
    /// it took (its item, and its node if it queued one). More than reserved (an append, a
    /// counter rewritten padded) is kept even over the limit when nothing can be evicted,
    /// rather than undo a write already published: the next store evicts.
    fn settle(&self, reserved: usize, needed: usize) {
        if needed > reserved {
            if !self.reserve(needed - reserved) {
                self.cache
                    .used
                    .fetch_add(needed - reserved, Ordering::Relaxed);
            }
        } else {
            self.cache
                .used
                .fetch_sub(reserved - needed, Ordering::Relaxed);
        }
    }

    /// Charge `bytes` against the limit, evicting (or, under `-M`, reclaiming only expired
    /// items) until they fit. `false`: they do not fit; nothing is charged.
    fn reserve(&self, bytes: usize) -> bool {
        let cache = self.cache;
        let limit = cache.memory_limit();
        // Signed: `used` may be below zero for a moment (see `Cache::used`).
        let limit = limit.min(isize::MAX as usize) as isize;
        let before = cache.used.fetch_add(bytes, Ordering::Relaxed) as isize;
        if before.saturating_add(bytes as isize) <= limit {
            return true;
        }
        // Over the limit: free at least what is over, from this worker's queues first.
        let shards = cache.queues.len();
        let mut idle_rounds = 0;
        let mut shard = self.id;
        while cache.charged() > limit {
            let freed = {
                let mut queues = lock(&cache.queues[shard]);
                self.evict_one(&mut queues)
            };
            if freed {
                idle_rounds = 0;
            } else {
                idle_rounds += 1;
                shard = (shard + 1) % shards;
                if idle_rounds > shards {
                    cache.used.fetch_sub(bytes, Ordering::Relaxed);
                    self.count(Counter::OutOfMemory, 1);
                    return false;
                }
            }
        }
        true
    }

    /// One S3-FIFO step on a shard: drop stale nodes and expired items, move read items on,
    /// evict one unread item. `false` when the shard has nothing it may free.
    fn evict_one(&self, queues: &mut Queues) -> bool {
        let cache = self.cache;
        let evict = cache.settings.evict;
        // Under `-M`, live items are passed over (to their queue's tail) so that the stale
        // nodes and expired items behind them are still found, at most this many per call.
        // Known limit: the bound keeps the work of a refused store, and its hold of each
        // shard's lock, small (`MAX_PASSED_OVER` lookups per call, a call or two per shard),
        // so a stale node or an expired item behind more live items than that is reached
        // only after several refused stores have each moved 64 live items to the tail; until
        // then stores answer out of memory although memory could be freed.
        let mut may_pass_over = (queues.small.len() + queues.main.len()).min(MAX_PASSED_OVER);
        loop {
            let total = queues.small.bytes + queues.main.bytes;
            let share = cache.small_share.load(Ordering::Relaxed) as usize;
            let from_small = !queues.small.is_empty()
                && (queues.small.bytes * 1000 >= total * share || queues.main.is_empty());
            let Some(mut node) = queues.fifo(from_small).pop_front() else {
                return false;
            };
            let item = self
                .map
                .get(&node.key[..])
                .filter(|item| item.node == node.id);
            let Some(item) = item else {
                // Stale: its item was removed (and uncharged) already; the node itself is
                // memory freed.
                self.free_node(&node);
                return true;
            };
            // The read marks of the item looked at (a write that replaced it meanwhile may
            // make the one removed a newer one: the counters below are of the one seen).
            let unfetched = u64::from(!item.was_fetched());
            let idle = self.now.saturating_sub(item.last_access());
            let expires = u64::from(item.exptime != 0);
            if cache.validity(item, self.now).is_err() {
                match self.retire(node, false) {
                    Retired::Kept(node) => queues.fifo(from_small).push_back(node),
                    Retired::Reclaimed | Retired::Evicted => {
                        self.count(Counter::Reclaimed, 1);
                        self.count(Counter::ExpiredUnfetched, unfetched);
                    }
                    Retired::Stale => {}
                }
                return true;
            }
            // Queued again below, with the charge of the item that holds it now.
            node.charge = item.charge() as u32;
            if !evict {
                // `-M`: a live item is never evicted.
                queues.fifo(from_small).push_back(node);
                may_pass_over -= 1;
                if may_pass_over == 0 {
                    return false;
                }
                continue;
            }
            let freq = item.freq.load(Ordering::Relaxed);
            if freq > 0 {
                item.freq
                    .store(if from_small { 0 } else { freq - 1 }, Ordering::Relaxed);
                queues.main.push_back(node);
                self.count(
                    if from_small {
                        Counter::MovesToWarm
                    } else {
                        Counter::MovesWithinLru
                    },
                    1,
                );
                continue;
            }
            let hash = cache.hash(&node.key);
            match self.retire(node, true) {
                Retired::Evicted => {
                    self.count(Counter::Evictions, 1);
                    self.count(Counter::EvictedUnfetched, unfetched);
                    self.count(Counter::EvictedNonzero, expires);
                    cache.evicted_idle.store(idle, Ordering::Relaxed);
                    if from_small {
                        let capacity = queues.main.len();
                        queues.ghost.insert(hash, capacity);
                    } else {
                        let capacity = queues.small.len();
                        queues.main_ghost.insert(hash, capacity);
                    }
                }
                Retired::Reclaimed => {
                    self.count(Counter::Reclaimed, 1);
                    self.count(Counter::ExpiredUnfetched, unfetched);
                }
                Retired::Kept(node) => queues.fifo(from_small).push_back(node),
                Retired::Stale => {}
            }
            return true;
        }
    }

    /// Remove the item that `node` names (only if it is expired or flushed, unless
    /// `evicting`) and free the node; a node that a valid item still names is handed back.
    /// The item removed may be a newer one than the caller looked at: a write that replaced
    /// it kept its node.
    fn retire(&self, node: Node, evicting: bool) -> Retired {
        let cache = self.cache;
        let now = self.now;
        let removed = self.map.remove_if(&node.key[..], |item| {
            let remove = item.node == node.id && (evicting || cache.validity(item, now).is_err());
            cache.removing_if(&node.key, item, remove)
        });
        let retired = match removed {
            Some(item) => {
                cache.used.fetch_sub(item.charge(), Ordering::Relaxed);
                if cache.validity(item, now).is_ok() {
                    Retired::Evicted
                } else {
                    Retired::Reclaimed
                }
            }
            // Once no item names a node, none can again: only a write that replaces an item
            // naming it hands it on.
            None if self
                .map
                .get(&node.key[..])
                .is_some_and(|item| item.node == node.id) =>
            {
                return Retired::Kept(node)
            }
            None => Retired::Stale,
        };
        self.free_node(&node);
        retired
    }

    /// Uncharge a node leaving its queue.
    fn free_node(&self, node: &Node) {
        self.cache
            .used
            .fetch_sub(node_charge(node.key.len()), Ordering::Relaxed);
    }

    /// Queue a newly stored item for eviction: main if its key was evicted recently. Its
    /// node's charge was reserved with the item's.
    fn enqueue(&self, key: Key, id: u64, charge: usize) {
        let hash = self.cache.hash(&key);
        lock(&self.cache.queues[self.id]).push(
            hash,
            Node {
                key,
                id,
                charge: charge as u32,
            },
        );
    }
}

fn lock(queues: &Mutex<Queues>) -> MutexGuard<'_, Queues> {
    // A panic while a shard was locked leaves it consistent enough to go on: every field
    // is updated before the next one is read.
    queues
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A stored value as a counter, as memcached reads one (`safe_strtoull`): leading
/// whitespace, decimal digits within `u64`, then the end or whitespace (after which anything
/// goes: `"0 jh"` counts as 0). Anything else is not a number.
pub fn parse_counter(data: &[u8]) -> Option<u64> {
    let start = data.iter().position(|b| !is_c_space(*b))?;
    let text = &data[start..];
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || text.get(digits).is_some_and(|b| !is_c_space(*b)) {
        return None;
    }
    core::str::from_utf8(&text[..digits]).ok()?.parse().ok()
}

/// C's `isspace` in the C locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Code a test runs at a chosen instant of a write.
#[cfg(test)]
mod hooks {
    use std::cell::Cell;

    thread_local! {
        static DECIDING_ON_ABSENT: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) };
        static PUBLISHED_ABSENT: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) };
    }

    /// Run `decided` once, in the next decision of this thread that inserts into an absent
    /// key: after it took its sequence number, before the map publishes its item; and
    /// `published` once the map has published it, before the write looks at its stripe's
    /// removal clock (`Session::inserted`).
    pub fn on_next_absent_insert(
        decided: impl FnOnce() + 'static,
        published: impl FnOnce() + 'static,
    ) {
        DECIDING_ON_ABSENT.set(Some(Box::new(decided)));
        PUBLISHED_ABSENT.set(Some(Box::new(published)));
    }

    /// A write published the item it inserted into an absent key.
    pub fn published_absent() {
        if let Some(hook) = PUBLISHED_ABSENT.take() {
            hook();
        }
    }

    /// A write's decision answered `operation` on `present`.
    pub fn decided<T>(present: Option<&super::Item>, operation: &floe::Operation<super::Item, T>) {
        if present.is_none() && matches!(operation, floe::Operation::Insert(_)) {
            if let Some(hook) = DECIDING_ON_ABSENT.take() {
                hook();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `COUNTERS` names every counter once, in the enum's order (each counter's slot is its
    /// discriminant), with distinct names.
    #[test]
    fn every_counter_is_listed_once() {
        for (i, (counter, _)) in COUNTERS.iter().enumerate() {
            assert_eq!(*counter as usize, i, "{counter:?} out of place");
        }
        let names: std::collections::HashSet<_> = COUNTERS.iter().map(|(_, n)| n).collect();
        assert_eq!(names.len(), COUNTERS.len());
    }

    /// A cache of two workers on the manual clock.
    fn two_worker_cache() -> Arc<Cache> {
        Arc::new(
            Cache::with_manual_clock(Settings {
                workers: 2,
                ..Settings::default()
            })
            .expect("cache"),
        )
    }

    /// The split adapts: a read that misses a key evicted unread from small grows the small
    /// queue's share, once per eviction of that key however often it is asked for; one that
    /// misses a key evicted from main shrinks it; a key never stored moves nothing.
    #[test]
    fn misses_of_recently_evicted_keys_move_the_split() {
        let cache = Arc::new(
            Cache::with_manual_clock(Settings {
                workers: 1,
                memory_limit: 1 << 20,
                max_item_size: 64 << 10,
                ..Settings::default()
            })
            .expect("cache"),
        );
        let mut worker = cache.worker(0);
        let share = || cache.small_share.load(Ordering::Relaxed);
        assert_eq!(share(), SMALL_SHARE_START);
        let value = [b'v'; 1000];
        let mut session = worker.session();
        // 2 MB into 1 MiB: the first keys are evicted from small, unread.
        for i in 0..2000u32 {
            let stored = session.store(
                StoreMode::Set,
                format!("k{i}").as_bytes(),
                0,
                0,
                &value,
                None,
            );
            assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
        }
        // The ghost remembers the last evictions (S3-FIFO sizes it as main, at least 64).
        let last = (0..2000u32)
            .rev()
            .find(|i| session.map.get(format!("k{i}").as_bytes()).is_none())
            .expect("evictions");
        let (last, before_last) = (format!("k{last}"), format!("k{}", last - 1));
        session.missed(b"never-stored");
        assert_eq!(share(), SMALL_SHARE_START);
        session.missed(last.as_bytes());
        assert_eq!(share(), SMALL_SHARE_START + SMALL_SHARE_STEP);
        for _ in 0..10 {
            session.missed(last.as_bytes());
        }
        assert_eq!(
            share(),
            SMALL_SHARE_START + SMALL_SHARE_STEP,
            "once per eviction"
        );
        session.missed(before_last.as_bytes());
        assert_eq!(share(), SMALL_SHARE_START + 2 * SMALL_SHARE_STEP);
        // Keys read while in small go on to main; 3 MB of them overflow main, which evicts.
        drop(session);
        let mut session = worker.session();
        for i in 0..3000u32 {
            let key = format!("hot{i}");
            let stored = session.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, None);
            assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
            if let Some(item) = session.map.get(key.as_bytes()) {
                session.mark_read(item);
            }
        }
        assert!(
            !lock(&cache.queues[0]).main_ghost.members.is_empty(),
            "evictions from main are remembered"
        );
        // A miss of a key main evicted shrinks the share (its ghost entry set by hand: which
        // hot key main evicted last depends on the queues' order).
        lock(&cache.queues[0])
            .main_ghost
            .insert(cache.hash(b"gone"), 64);
        let before = share();
        session.missed(b"gone");
        assert_eq!(share(), before - SMALL_SHARE_STEP);
    }

    /// A later write has a larger CAS unique than an earlier one whichever worker made
    /// either: `ms I` stores a value whose unique is older than the item's as stale, and a
    /// worker that wrote little must not hand out uniques smaller than one that wrote much
    /// (per-worker counters did: an `md I` on the quiet worker gave the item a smaller unique
    /// than the one the client held, and the client's `ms I` was refused).
    #[test]
    fn uniques_grow_across_workers() {
        let cache = two_worker_cache();
        let (mut busy, mut quiet) = (cache.worker(0), cache.worker(1));
        let mut last = 0;
        for i in 0..100u32 {
            let mut session = busy.session();
            let key = format!("k{i}");
            let Stored::Stored(cas) =
                session.store(StoreMode::Set, key.as_bytes(), 0, 0, b"v", None)
            else {
                panic!("not stored");
            };
            assert!(cas > last);
            last = cas;
        }
        let mut session = quiet.session();
        let Stored::Stored(cas) = session.store(StoreMode::Set, b"q", 0, 0, b"v", None) else {
            panic!("not stored");
        };
        assert!(cas > last, "{cas} after {last}");
    }

    /// A read that found an item expired unlinks it only if the item there is still expired
    /// at the read's time: a `touch` whose session began before the clock moved finds the
    /// item valid, publishes a copy with the same CAS unique and a new expiry, and answers
    /// TOUCHED; the read's unlink, coming after, must leave that copy.
    #[test]
    fn an_expired_read_leaves_the_item_a_touch_published() {
        let cache = two_worker_cache();
        let (mut reader, mut toucher) = (cache.worker(0), cache.worker(1));
        {
            let mut session = reader.session();
            let exptime = cache.server_time(10, session.now());
            let stored = session.store(StoreMode::Set, b"k", 0, exptime, b"v", None);
            assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
        }
        let touching = toucher.session();
        cache.advance_clock(11);
        let reading = reader.session();
        let found = reading.map.get(&b"k"[..]).expect("stored");
        assert!(cache.validity(found, reading.now()).is_err());
        let touched = touching
            .touch(b"k", cache.server_time(100, touching.now()))
            .expect("valid at the touch's time");
        assert_eq!(touched.cas(), found.cas());
        assert!(cache.validity(touched, reading.now()).is_ok());
        assert!(reading.valid(b"k", found).is_none(), "expired when read");
        assert_eq!(cache.counter(Counter::GetExpired), 0, "nothing unlinked");
        drop((touching, reading));
        assert_eq!(cache.items(), 1, "the touched item stays");
        let session = reader.session();
        assert_eq!(session.peek(b"k").map(Item::exptime), Some(102));
    }
    /// A directory of its own under the system's temporary one, empty.
    fn scratch_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("floe-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    }

    /// An insert into an absent key takes its sequence number in its decision; a write and a
    /// removal of the key between that decision and its publication come later in the
    /// counter, and the map still lets the insert land (the key is absent again when it does).
    /// The journal must still restore the insert, which came last: before the removal clocks,
    /// replay chose what came between and the key came back absent (`persist.rs`, "An absent
    /// key has no version"). Each removal, journaled or not (a delete; an expired item
    /// unlinked by a read), before each write that inserts into an absent key (a set; an
    /// `incr` that creates).
    #[test]
    fn an_insert_decided_before_a_write_and_removal_of_its_key_is_restored_after_them() {
        for (creating_incr, expiring) in
            [(false, false), (true, false), (false, true), (true, true)]
        {
            let name = format!("absent-insert-{creating_incr}-{expiring}");
            let expected: &[u8] = if creating_incr { b"7" } else { b"last" };
            assert_eq!(
                overtaken_insert_restores_as(&name, creating_incr, expiring, false),
                Some(expected.to_vec()),
                "restored what the key held after the writes between"
            );
        }
    }

    /// As above, with a third write (an append) replacing the overtaken insert's item after its
    /// publication, and a crash before that write's session appends its record: the insert's
    /// own session replied first, so the record that outnumbers the delete must be in its
    /// journal. Re-sequencing only the insert's own item (and giving up when another had
    /// replaced it) restored the key absent, under a read that had seen the insert's value.
    #[test]
    fn an_overtaken_insert_replaced_before_its_check_journals_what_replaced_it() {
        for creating_incr in [false, true] {
            let name = format!("replaced-insert-{creating_incr}");
            let expected: &[u8] = if creating_incr { b"7+" } else { b"last+" };
            assert_eq!(
                overtaken_insert_restores_as(&name, creating_incr, false, true),
                Some(expected.to_vec())
            );
        }
    }

    /// Open a persistent cache in a scratch directory, and have worker 0 insert into the
    /// absent key `k` (a set of `last`, or an `incr` creating 7) while, between its decision
    /// and its publication, worker 1 sets `k` and removes it (a delete, or, `expiring`, a set
    /// expired at once and the read that unlinks it). With `replaced`, worker 1 then appends
    /// `+` to the published item before the insert looks at its removal clock, and its session
    /// ends only after the crash. The crash: the journals copied as they are then (no
    /// snapshot), and opened again. Returns what `k` holds after the restore.
    fn overtaken_insert_restores_as(
        name: &str,
        creating_incr: bool,
        expiring: bool,
        replaced: bool,
    ) -> Option<Vec<u8>> {
        let dir = scratch_dir(name);
        let settings = || Settings {
            workers: 2,
            ..Settings::default()
        };
        let (cache, _) = Cache::open(settings(), &dir, StoreOptions::default()).expect("open");
        cache.wait_restored();
        let between = Arc::clone(&cache);
        let replacer = Arc::clone(&cache);
        // The replacing session, held open until the crash is taken.
        let (crashed, crash) = std::sync::mpsc::channel::<()>();
        let replacing_slot = std::rc::Rc::new(core::cell::RefCell::new(None));
        let slot = std::rc::Rc::clone(&replacing_slot);
        hooks::on_next_absent_insert(
            move || {
                std::thread::spawn(move || {
                    let mut worker = between.worker(1);
                    let mut session = worker.session();
                    // Expired at once (a negative time), and unlinked by the read below.
                    let exptime = if expiring {
                        between.server_time(-1, session.now())
                    } else {
                        0
                    };
                    let stored = session.store(StoreMode::Set, b"k", 0, exptime, b"between", None);
                    assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
                    if expiring {
                        assert!(session.peek(b"k").is_none());
                        assert_eq!(between.counter(Counter::GetExpired), 1, "unlinked");
                    } else {
                        assert_eq!(session.delete(b"k", None), Deleted::Deleted);
                    }
                })
                .join()
                .expect("the writes between");
            },
            move || {
                if !replaced {
                    return;
                }
                let (appended, done) = std::sync::mpsc::channel();
                let thread = std::thread::spawn(move || {
                    let mut worker = replacer.worker(1);
                    let mut session = worker.session();
                    let stored = session.store(StoreMode::Append, b"k", 0, 0, b"+", None);
                    assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
                    appended.send(()).expect("the test waits");
                    // The session (and its append to the journal) ends after the crash.
                    // (The test drops the sender once it has taken the crash.)
                    let _ = crash.recv();
                });
                done.recv().expect("appended");
                *slot.borrow_mut() = Some(thread);
            },
        );
        let mut worker = cache.worker(0);
        {
            let mut session = worker.session();
            if creating_incr {
                let created = session.delta(b"k", true, 1, None, Some((7, 0)), false, None);
                assert!(matches!(created, Delta::Value(7, _, true)), "{created:?}");
            } else {
                let stored = session.store(StoreMode::Set, b"k", 0, 0, b"last", None);
                assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
            }
        }
        let replacing = replacing_slot.borrow_mut().take();
        let held = worker.session().peek(b"k").map(|item| item.data().to_vec());
        // A crash now: the journals as the sessions that ended left them, no snapshot.
        let copy = scratch_dir(&format!("{name}-copy"));
        for file in std::fs::read_dir(&dir).expect("read the directory") {
            let path = file.expect("directory entry").path();
            std::fs::copy(&path, copy.join(path.file_name().unwrap())).expect("copy");
        }
        drop(crashed);
        if let Some(thread) = replacing {
            thread.join().expect("the replacing session");
        }
        let (restarted, _) =
            Cache::open(settings(), &copy, StoreOptions::default()).expect("reopen");
        restarted.wait_restored();
        let mut worker = restarted.worker(0);
        let restored = worker.session().peek(b"k").map(|item| item.data().to_vec());
        assert_eq!(restored, held, "the restore differs from what the key held");
        drop((cache, restarted));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&copy);
        restored
    }
}
