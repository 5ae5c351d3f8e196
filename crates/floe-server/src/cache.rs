//! The cache: items in a floe [`Map`], memory bounded by S3-FIFO eviction.
//!
//! # Design
//!
//! **Index and items.** Every item lives in one entry of a `floe::Map<Key, Item>`: the key
//! (an `Arc<[u8]>`, shared with the eviction queue) and the item (value bytes, client flags,
//! CAS unique, expiry). A get is the map's lock-free get: one bin line, then the entry; a
//! multi-get, and a run of gets a client pipelined, is one `MapRef::get_many` call, which
//! prefetches every bin and then every entry before it reads any (DLHT's batches). Writes
//! are the map's own single-swap writes: `set` an upsert, `add` / `replace` / `append` /
//! `prepend` / `cas` / `incr` / `decr` / `touch` a `compute` (a read-decide-swap that
//! retries when the key changed under it, so a CAS check and the write it guards are one
//! atomic step), delete a `remove_if`. Each write is therefore linearizable at its swap, as
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
//! the bytes); a get only marks the item (a 2-bit frequency, a relaxed store, no lock, no
//! queue move, which is what makes it fit a lock-free table: an LRU would move the item on
//! every hit). At the head of the small queue an item that was read since it entered moves
//! to the main queue and one that was not is evicted, its key's hash remembered in a ghost
//! FIFO; an item whose key is in the ghost goes straight to main when it is stored again. At
//! the head of main, an item read since its last pass goes round again with its frequency
//! lowered, and an unread one is evicted. One-hit wonders leave after a short stay in the
//! small queue, so they never push out the working set, which memcached's segmented LRU lets
//! them do for its whole cold segment. The queues are sharded, one per worker thread behind
//! a mutex that only the worker and an evicting writer take (never a reader), so a set takes
//! an uncontended lock. A queue node names its item by key and CAS unique: a node whose item
//! was replaced, removed or expired is stale and is dropped when it reaches the head.
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
use floe::{hash::DefaultHashBuilder, Compute, Map, MapRef, Operation};

/// A key, shared by the map entry and the eviction queue's node.
pub type Key = Arc<[u8]>;

/// The longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;

/// Expiry times above this many seconds are absolute Unix times (memcached's 30 days).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

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
/// and the key's allocation (`Arc<[u8]>`: two counts and the bytes). Every item's key is
/// shared with exactly one node made with it, which outlives the item or leaves with it.
pub fn node_charge(key_len: usize) -> usize {
    size_of::<Node>() + allocation(2 * size_of::<usize>() + key_len)
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

    fn charge(&self) -> usize {
        self.charge as usize
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
            freq: AtomicU8::new(self.freq.load(Ordering::Relaxed)),
            fetched: AtomicU8::new(self.fetched.load(Ordering::Relaxed)),
            last_access: AtomicU32::new(self.last_access.load(Ordering::Relaxed)),
            charge: self.charge,
            binary_key: self.binary_key,
        }
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
}

/// Every counter, in the order `stats` prints them.
pub const COUNTERS: [(Counter, &str); 23] = [
    (Counter::CmdGet, "cmd_get"),
    (Counter::CmdSet, "cmd_set"),
    (Counter::CmdFlush, "cmd_flush"),
    (Counter::CmdTouch, "cmd_touch"),
    (Counter::GetHits, "get_hits"),
    (Counter::GetMisses, "get_misses"),
    (Counter::GetExpired, "get_expired"),
    (Counter::GetFlushed, "get_flushed"),
    (Counter::DeleteMisses, "delete_misses"),
    (Counter::DeleteHits, "delete_hits"),
    (Counter::IncrMisses, "incr_misses"),
    (Counter::IncrHits, "incr_hits"),
    (Counter::DecrMisses, "decr_misses"),
    (Counter::DecrHits, "decr_hits"),
    (Counter::CasMisses, "cas_misses"),
    (Counter::CasHits, "cas_hits"),
    (Counter::CasBadval, "cas_badval"),
    (Counter::TouchHits, "touch_hits"),
    (Counter::TouchMisses, "touch_misses"),
    (Counter::TotalItems, "total_items"),
    (Counter::Evictions, "evictions"),
    (Counter::Reclaimed, "reclaimed"),
    (Counter::OutOfMemory, "outofmemory"),
];

/// One worker's counters, on lines of their own. Only the worker writes them (a load and a
/// store, no read-modify-write); `stats` reads them with relaxed loads.
struct Counters([AtomicU64; COUNTERS.len()]);

impl Counters {
    fn new() -> Self {
        Counters(core::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// A queue node: names an item by key and CAS unique (a node whose item is gone is stale).
struct Node {
    key: Key,
    cas: u64,
    charge: u32,
}

/// One shard of the S3-FIFO queues.
#[derive(Default)]
struct Queues {
    small: VecDeque<Node>,
    main: VecDeque<Node>,
    small_bytes: usize,
    main_bytes: usize,
    ghost: Ghost,
}

/// Hashes of keys recently evicted from the small queue, oldest first, at most `capacity`.
#[derive(Default)]
struct Ghost {
    order: VecDeque<u64>,
    members: HashMap<u64, u32>,
}

impl Ghost {
    fn insert(&mut self, hash: u64, capacity: usize) {
        self.order.push_back(hash);
        *self.members.entry(hash).or_insert(0) += 1;
        while self.order.len() > capacity.max(64) {
            let old = self.order.pop_front().expect("nonempty");
            if let std::collections::hash_map::Entry::Occupied(mut o) = self.members.entry(old) {
                *o.get_mut() -= 1;
                if *o.get() == 0 {
                    o.remove();
                }
            }
        }
    }

    /// Whether `hash` was evicted recently; forgets it (it goes to main now).
    fn take(&mut self, hash: u64) -> bool {
        // The hash stays in `order` and is dropped from it in turn; the count says it is
        // no longer a member once every copy has been taken or aged out.
        match self.members.get_mut(&hash) {
            Some(count) => {
                *count -= 1;
                if *count == 0 {
                    self.members.remove(&hash);
                }
                true
            }
            None => false,
        }
    }
}

/// The cache shared by every worker.
pub struct Cache {
    map: Map<Key, Item>,
    settings: Settings,
    clock: Clock,
    /// Unix time of server time 0.
    process_started: i64,
    /// Bytes charged (items and queue nodes).
    used: CachePadded<AtomicUsize>,
    /// The limit on `used`: `-m`, changed by `cache_memlimit`.
    memory_limit: AtomicUsize,
    queues: Box<[CachePadded<Mutex<Queues>>]>,
    counters: Box<[CachePadded<Counters>]>,
    /// Items stored before a `flush_all` without delay are invalid: their generation is
    /// older than this.
    flush_generation: AtomicU32,
    /// `flush_all` with a delay: once the server time reaches it, items stored at or
    /// before it are invalid (0 = none pending).
    oldest_live: AtomicU32,
    /// Items `reclaim_expired` unlinked (it runs on a thread of its own, not a worker).
    swept: AtomicU64,
    /// Whether any expiry time or flush was ever given: until then no item can expire and
    /// `reclaim_expired` has nothing to look for.
    expiry_seen: AtomicBool,
}

impl Cache {
    /// A cache with these settings and the system clock.
    pub fn new(settings: Settings) -> Result<Self, floe::Error> {
        Self::with_clock(settings, Clock::System(Instant::now()))
    }

    /// A cache whose clock only moves by [`Cache::advance_clock`] and whose server time 0
    /// is a fixed Unix time (tests and the fuzz target: two such caches answer alike).
    pub fn with_manual_clock(settings: Settings) -> Result<Self, floe::Error> {
        let mut cache = Self::with_clock(settings, Clock::Manual(AtomicU32::new(2)))?;
        cache.process_started = 1_700_000_000;
        Ok(cache)
    }

    fn with_clock(settings: Settings, clock: Clock) -> Result<Self, floe::Error> {
        let workers = settings.workers.max(1);
        let map = Map::builder().capacity(settings.initial_keys).build()?;
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
            counters: (0..workers)
                .map(|_| CachePadded::new(Counters::new()))
                .collect(),
            flush_generation: AtomicU32::new(0),
            oldest_live: AtomicU32::new(0),
            swept: AtomicU64::new(0),
            expiry_seen: AtomicBool::new(false),
            settings: Settings {
                workers,
                ..settings
            },
        })
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
        self.used.load(Ordering::Relaxed)
    }

    /// Items in the index (expired ones not yet unlinked included, as memcached counts).
    pub fn items(&self) -> usize {
        self.map.len()
    }

    /// Bytes of the index's table (the map's slots; entries are charged to their items).
    pub fn index_capacity(&self) -> usize {
        self.map.capacity()
    }

    /// Bytes of the index's table (16 per slot).
    pub fn index_bytes(&self) -> usize {
        self.map.capacity() * 16
    }

    /// The sum of a counter over the workers.
    pub fn counter(&self, counter: Counter) -> u64 {
        let swept = if counter == Counter::Reclaimed {
            self.swept.load(Ordering::Relaxed)
        } else {
            0
        };
        swept
            + self
                .counters
                .iter()
                .map(|c| c.0[counter as usize].load(Ordering::Relaxed))
                .sum::<u64>()
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
    /// queue, counters and share of the CAS uniques: make one worker per id in
    /// `0..settings().workers` (two workers with one id would issue the same uniques).
    pub fn worker(self: &Arc<Self>, id: usize) -> Worker {
        Worker {
            cache: Arc::clone(self),
            id: id % self.settings.workers,
            next_cas: 1,
        }
    }

    /// Unlink every expired or flushed item: one pass over the index (the server's
    /// housekeeping thread runs it every few seconds; requests never wait for it), skipped
    /// while no request ever gave an expiry time or a flush. Returns how many it unlinked.
    pub fn reclaim_expired(&self) -> usize {
        if !self.expiry_seen.load(Ordering::Relaxed) {
            return 0;
        }
        let map = self.map.pin();
        let now = self.now();
        let doomed: Vec<(Key, u64)> = map
            .iter()
            .filter(|(_, item)| self.validity(item, now).is_err())
            .map(|(key, item)| (key.clone(), item.cas))
            .collect();
        let unlinked = doomed
            .iter()
            .filter(|(key, cas)| unlink(&map, &self.used, key, *cas))
            .count();
        self.swept.fetch_add(unlinked as u64, Ordering::Relaxed);
        unlinked
    }

    /// Call `f` on up to `limit` valid items (in the index's order; weakly consistent).
    pub fn for_each_item(&self, limit: usize, mut f: impl FnMut(&[u8], &Item)) {
        let map = self.map.pin();
        let now = self.now();
        for (key, item) in map
            .iter()
            .filter(|(_, item)| self.validity(item, now).is_ok())
            .take(limit)
        {
            f(key, item);
        }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.map.hasher().hash_one(key)
    }
}

/// Unlink `key` if its item is still the one with `cas`; uncharges it.
fn unlink(
    map: &MapRef<'_, Key, Item, DefaultHashBuilder>,
    used: &AtomicUsize,
    key: &[u8],
    cas: u64,
) -> bool {
    match map.remove_if(key, |item| item.cas == cas) {
        Some(item) => {
            used.fetch_sub(item.charge(), Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// The part of a new item that comes from the write making it.
struct Stamp {
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
        }
    }
}

/// A worker thread's handle on the cache.
pub struct Worker {
    cache: Arc<Cache>,
    id: usize,
    next_cas: u64,
}

impl Worker {
    /// The cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Begin a run of operations at the current server time: pins the map (entries read
    /// stay valid until the session ends; keep sessions short, one per batch of requests).
    pub fn session(&mut self) -> Session<'_> {
        let now = self.cache.now();
        let Worker {
            cache,
            id,
            next_cas,
        } = self;
        Session {
            map: cache.map.pin(),
            cache,
            id: *id,
            next_cas,
            now,
        }
    }
}

/// Operations at one server time under one pin of the map.
pub struct Session<'w> {
    cache: &'w Cache,
    map: MapRef<'w, Key, Item, DefaultHashBuilder>,
    id: usize,
    next_cas: &'w mut u64,
    now: u32,
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
        let cell = &self.cache.counters[self.id].0[counter as usize];
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add(by),
            Ordering::Relaxed,
        );
    }

    /// A CAS unique no other write has: this worker's count times the number of workers
    /// plus its id (never 0, which means "no CAS" in requests). Only this worker counts.
    fn next_cas(&mut self) -> u64 {
        let cas = *self.next_cas * self.cache.settings.workers as u64 + self.id as u64;
        *self.next_cas += 1;
        cas
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
                if unlink(&self.map, &self.cache.used, key, item.cas) {
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
    /// touch). The copy names the same queue node (same key and CAS unique) and has the
    /// same charge.
    pub fn touch(&self, key: &[u8], exptime: u32) -> Option<&Item> {
        let cache = self.cache;
        let now = self.now;
        let outcome = self.map.compute(Arc::from(key), |present| {
            match present.filter(|item| cache.validity(item, now).is_ok()) {
                Some(item) => Operation::Insert(item.with_exptime(exptime)),
                None => Operation::Abort(()),
            }
        });
        match outcome {
            Compute::Updated { new, .. } => Some(new),
            _ => None,
        }
    }

    /// What every item this write makes carries: a fresh CAS unique, the time, the flush
    /// generation.
    fn stamp(&mut self) -> Stamp {
        Stamp {
            cas: self.next_cas(),
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
        self.store_with(mode, key, flags, exptime, data, compare, false)
    }

    /// [`store`](Self::store), noting whether the key was given in base64 (meta `b`).
    #[allow(clippy::too_many_arguments)]
    pub fn store_with(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        data: &[u8],
        compare: Option<u64>,
        binary_key: bool,
    ) -> Stored {
        self.count(Counter::CmdSet, 1);
        let charge = item_charge(data.len());
        if too_large(self.cache, key.len(), data.len()) {
            return Stored::TooLarge;
        }
        // The item and the queue node it will get. Appends and prepends grow the value:
        // they reserve the rest below, once the present value's length is known.
        let node = node_charge(key.len());
        if !self.reserve(charge + node) {
            return Stored::OutOfMemory;
        }
        let key: Key = Arc::from(key);
        let result = if mode == StoreMode::Set && compare.is_none() {
            let mut stamp = self.stamp();
            stamp.binary_key = binary_key;
            let item = stamp.item(data.into(), flags, exptime);
            let cas = item.cas;
            if let Some(old) = self.map.upsert(key.clone(), item) {
                self.cache.used.fetch_sub(old.charge(), Ordering::Relaxed);
            }
            Ok((cas, charge))
        } else {
            self.store_computed(mode, &key, flags, exptime, data, compare, binary_key)
        };
        match result {
            Ok((cas, stored_charge)) => {
                if stored_charge > charge && !self.reserve(stored_charge - charge) {
                    // The append is in; the memory it took is over the limit and nothing
                    // could be evicted: keep it (the next store evicts) rather than undo.
                    self.cache
                        .used
                        .fetch_add(stored_charge - charge, Ordering::Relaxed);
                }
                self.enqueue(key, cas, stored_charge);
                self.count(Counter::TotalItems, 1);
                if compare.is_some() {
                    self.count(Counter::CasHits, 1);
                }
                Stored::Stored(cas)
            }
            Err(failure) => {
                self.cache.used.fetch_sub(charge + node, Ordering::Relaxed);
                match failure {
                    Stored::NotFound if compare.is_some() => self.count(Counter::CasMisses, 1),
                    Stored::Exists => self.count(Counter::CasBadval, 1),
                    _ => {}
                }
                failure
            }
        }
    }

    /// The conditional stores, as one `compute` each; `Ok((cas, charge))` when stored.
    #[allow(clippy::too_many_arguments)]
    fn store_computed(
        &mut self,
        mode: StoreMode,
        key: &Key,
        flags: u32,
        exptime: u32,
        data: &[u8],
        compare: Option<u64>,
        binary_key: bool,
    ) -> Result<(u64, usize), Stored> {
        let cache = self.cache;
        let now = self.now;
        let mut stamp = self.stamp();
        stamp.binary_key = binary_key;
        let cas = stamp.cas;
        let make = |data: Box<[u8]>, flags, exptime| stamp.item(data, flags, exptime);
        // An append or prepend keeps the present item's key form.
        let extend = |present: &Item, data: Box<[u8]>| Item {
            binary_key: present.binary_key,
            ..stamp.item(data, present.flags, present.exptime())
        };
        let outcome = self.map.compute(key.clone(), |present| {
            let present = present.filter(|item| cache.validity(item, now).is_ok());
            // As memcached 1.6 (measured): with a CAS unique, set and replace answer "not
            // found" for an absent key and "exists" for another unique; append and prepend
            // "not stored" and "exists"; add ignores the unique.
            let checks = mode != StoreMode::Add;
            match (mode, present) {
                (StoreMode::Add, Some(_)) => Operation::Abort(Stored::NotStored),
                (StoreMode::Set | StoreMode::Replace, None) if compare.is_some() => {
                    Operation::Abort(Stored::NotFound)
                }
                (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
                    Operation::Abort(Stored::NotStored)
                }
                (_, Some(item)) if checks && compare.is_some_and(|cas| item.cas != cas) => {
                    Operation::Abort(Stored::Exists)
                }
                (StoreMode::Append, Some(item)) => {
                    Operation::Insert(extend(item, [item.data(), data].concat().into()))
                }
                (StoreMode::Prepend, Some(item)) => {
                    Operation::Insert(extend(item, [data, item.data()].concat().into()))
                }
                _ => Operation::Insert(make(data.into(), flags, exptime)),
            }
        });
        match outcome {
            Compute::Inserted(new) => Ok((cas, new.charge())),
            Compute::Updated { old, new } => {
                self.cache.used.fetch_sub(old.charge(), Ordering::Relaxed);
                Ok((cas, new.charge()))
            }
            Compute::Aborted(why) => Err(why),
            Compute::Removed(_) | Compute::Absent => unreachable!("never removes"),
        }
    }

    /// `incr` / `decr` by `delta` (`decr` stops at 0; `incr` wraps at 2^64). `compare` is a
    /// CAS unique to check, if any; `create` an initial value and expiry for an absent
    /// key (the meta protocol's `N` / `J` flags); `pad` a shorter result with spaces to
    /// the old value's length (see below).
    pub fn delta(
        &mut self,
        key: &[u8],
        incr: bool,
        delta: u64,
        compare: Option<u64>,
        create: Option<(u64, u32)>,
        pad: bool,
    ) -> Delta {
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
        let stamp = self.stamp();
        let cas = stamp.cas;
        let make = |digits: Vec<u8>, flags, exptime| stamp.item(digits.into(), flags, exptime);
        let key: Key = Arc::from(key);
        let mut value = 0;
        // Set by the decision that applied: an expired or flushed item still in the map
        // counts as absent.
        let mut created = false;
        let outcome = self.map.compute(key.clone(), |present| {
            created = false;
            let present = present.filter(|item| cache.validity(item, now).is_ok());
            match present {
                None => match create {
                    Some((initial, exptime)) if compare.is_none() => {
                        value = initial;
                        created = true;
                        Operation::Insert(make(initial.to_string().into_bytes(), 0, exptime))
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
                    // memcached rewrites a shorter result in place, padded with spaces to
                    // the old length, when no other request holds the item (otherwise it
                    // writes a new item of the digits alone); clients see the padding.
                    if pad && digits.len() < item.data().len() {
                        digits.resize(item.data().len(), b' ');
                    }
                    Operation::Insert(Item {
                        binary_key: item.binary_key,
                        ..make(digits, item.flags, item.exptime())
                    })
                }
            }
        });
        let stored = match outcome {
            Compute::Inserted(new) => Some(new.charge()),
            Compute::Updated { old, new } => {
                self.cache.used.fetch_sub(old.charge(), Ordering::Relaxed);
                Some(new.charge())
            }
            Compute::Aborted(why) => {
                self.cache.used.fetch_sub(charge + node, Ordering::Relaxed);
                self.count(if why == Delta::NotFound { miss } else { hit }, 1);
                return why;
            }
            Compute::Removed(_) | Compute::Absent => unreachable!("never removes"),
        };
        let stored = stored.expect("stored");
        // Reserved `charge` and the node; settle the difference with what the item took
        // (more for a long value rewritten padded: kept even over the limit, as an
        // append's, for the next store to evict).
        if stored > charge {
            if !self.reserve(stored - charge) {
                self.cache
                    .used
                    .fetch_add(stored - charge, Ordering::Relaxed);
            }
        } else {
            self.cache
                .used
                .fetch_sub(charge - stored, Ordering::Relaxed);
        }
        self.enqueue(key, cas, stored);
        self.count(hit, 1);
        Delta::Value(value, cas, created)
    }

    /// Delete `key` (only if its CAS unique is `compare`, when one is given).
    pub fn delete(&mut self, key: &[u8], compare: Option<u64>) -> Deleted {
        let cache = self.cache;
        let now = self.now;
        let mut mismatch = false;
        let removed = self.map.remove_if(key, |item| {
            mismatch =
                compare.is_some_and(|cas| item.cas != cas) && cache.validity(item, now).is_ok();
            !mismatch
        });
        match removed {
            Some(item) => {
                self.cache.used.fetch_sub(item.charge(), Ordering::Relaxed);
                if self.cache.validity(item, now).is_ok() {
                    self.count(Counter::DeleteHits, 1);
                    Deleted::Deleted
                } else {
                    self.count(Counter::DeleteMisses, 1);
                    Deleted::NotFound
                }
            }
            None if mismatch => Deleted::Exists,
            None => {
                self.count(Counter::DeleteMisses, 1);
                Deleted::NotFound
            }
        }
    }

    /// Charge `bytes` against the limit, evicting (or, under `-M`, reclaiming only expired
    /// items) until they fit. `false`: they do not fit; nothing is charged.
    fn reserve(&self, bytes: usize) -> bool {
        let cache = self.cache;
        let limit = cache.memory_limit();
        let before = cache.used.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes <= limit {
            return true;
        }
        // Over the limit: free at least what is over, from this worker's queues first.
        let shards = cache.queues.len();
        let mut idle_rounds = 0;
        let mut shard = self.id;
        while cache.used.load(Ordering::Relaxed) > limit {
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
        loop {
            let total = queues.small_bytes + queues.main_bytes;
            let from_small = !queues.small.is_empty()
                && (queues.small_bytes * 10 >= total || queues.main.is_empty());
            let node = if from_small {
                queues.small.pop_front()
            } else {
                queues.main.pop_front()
            };
            let Some(node) = node else { return false };
            if from_small {
                queues.small_bytes -= node.charge as usize;
            } else {
                queues.main_bytes -= node.charge as usize;
            }
            let item = self
                .map
                .get(&node.key[..])
                .filter(|item| item.cas == node.cas);
            let Some(item) = item else {
                // Stale: its item was replaced or removed (and uncharged) already; the node
                // itself is memory freed.
                cache
                    .used
                    .fetch_sub(node_charge(node.key.len()), Ordering::Relaxed);
                return true;
            };
            if cache.validity(item, self.now).is_err() {
                cache
                    .used
                    .fetch_sub(node_charge(node.key.len()), Ordering::Relaxed);
                if unlink(&self.map, &cache.used, &node.key, node.cas) {
                    self.count(Counter::Reclaimed, 1);
                }
                return true;
            }
            let freq = item.freq.load(Ordering::Relaxed);
            if !evict {
                // `-M`: a live item is never evicted; put it back where it was and stop.
                if from_small {
                    queues.small_bytes += node.charge as usize;
                    queues.small.push_front(node);
                } else {
                    queues.main_bytes += node.charge as usize;
                    queues.main.push_front(node);
                }
                return false;
            }
            if freq > 0 {
                item.freq
                    .store(if from_small { 0 } else { freq - 1 }, Ordering::Relaxed);
                queues.main_bytes += node.charge as usize;
                queues.main.push_back(node);
                continue;
            }
            cache
                .used
                .fetch_sub(node_charge(node.key.len()), Ordering::Relaxed);
            if unlink(&self.map, &cache.used, &node.key, node.cas) {
                self.count(Counter::Evictions, 1);
                if from_small {
                    let capacity = queues.main.len();
                    queues.ghost.insert(cache.hash(&node.key), capacity);
                }
            }
            return true;
        }
    }

    /// Queue a newly stored item for eviction: main if its key was evicted recently. Its
    /// node's charge was reserved with the item's.
    fn enqueue(&self, key: Key, cas: u64, charge: usize) {
        let hash = self.cache.hash(&key);
        let mut queues = lock(&self.cache.queues[self.id]);
        let node = Node {
            key,
            cas,
            charge: charge as u32,
        };
        // The node's charge was reserved with its item's.
        if queues.ghost.take(hash) {
            queues.main_bytes += charge;
            queues.main.push_back(node);
        } else {
            queues.small_bytes += charge;
            queues.small.push_back(node);
        }
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
