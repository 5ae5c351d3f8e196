//! The cache every worker shares: the index, the settings, the clock, the charged bytes, the
//! queues' shards and the counters; expiry, `flush_all`, the housekeeping sweep, iteration
//! for `lru_crawler`, and what `stats` reads.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::{
    sync::Mutex,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use crossbeam_utils::CachePadded;
use floe::hash::DefaultHashBuilder;

use super::{
    counters::{Counter, Counters, COUNTERS},
    eviction::{lock, node_charge, Fifo, Node, Queues, SMALL_SHARE_START, SWEEP_SLICE},
    index::Index,
    item::{item_charge, Item},
};
use crate::{
    persist::{Kind, Record, Store, StoreError},
    protocol::REALTIME_MAXDELTA,
};

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
pub(super) enum Clock {
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

/// The cache shared by every worker.
pub struct Cache {
    pub(super) index: Index,
    pub(super) settings: Settings,
    clock: Clock,
    /// Unix time of server time 0.
    pub(super) process_started: i64,
    /// Bytes charged (items and queue nodes), wrapping: it may dip below zero for a moment,
    /// when a write that replaces or removes an item subtracts its charge before the item's
    /// own writer has settled the rest of it (a reservation is an estimate, settled after the
    /// publication). Read it with [`Cache::charged`].
    pub(super) used: CachePadded<AtomicUsize>,
    /// The limit on `used`: `-m`, changed by `cache_memlimit`.
    memory_limit: AtomicUsize,
    pub(super) queues: Box<[CachePadded<Mutex<Queues>>]>,
    /// The small queue's target share of the queued bytes, in thousandths (adapted by
    /// `Session::missed`).
    pub(super) small_share: AtomicU32,
    /// One set per worker, and one last for the housekeeping sweep (`count_housekeeping`).
    pub(super) counters: Box<[CachePadded<Counters>]>,
    /// Seconds between its last read (or its store) and its eviction, of the item evicted
    /// last (`stats items`' `evicted_time`).
    pub(super) evicted_idle: AtomicU32,
    /// What each counter summed to at the last `stats reset` (`stats` reports the sum less
    /// this: the workers' own counters are never written by another thread).
    counters_at_reset: [AtomicU64; COUNTERS.len()],
    /// Items stored before a `flush_all` without delay are invalid: their generation is
    /// older than this.
    pub(super) flush_generation: AtomicU32,
    /// `flush_all` with a delay: once the server time reaches it, items stored at or
    /// before it are invalid (0 = none pending).
    pub(super) oldest_live: AtomicU32,
    /// Whether any expiry time or flush was ever given: until then no item can expire and
    /// `reclaim_expired` has nothing to look for.
    expiry_seen: AtomicBool,
    /// The next CAS unique: one counter for all workers, so a later write of a key always
    /// has a larger unique than an earlier one (`ms I` compares them as memcached does;
    /// per-worker counters interleaved by worker id were unique but not ordered across
    /// workers). One uncontended-enough RMW per write: a request's system calls cost far more.
    pub(super) next_unique: CachePadded<AtomicU64>,
    /// The persistence directory (`-e`), set once the items it held are restored.
    pub(super) store: std::sync::OnceLock<Store>,
    /// A persistent cache's restore is running: writes wait (`wait_restored`).
    pub(super) restoring: AtomicBool,
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

    pub(super) fn with_clock(
        settings: Settings,
        clock: Clock,
        hasher: DefaultHashBuilder,
    ) -> Result<Self, floe::Error> {
        let workers = settings.workers.max(1);
        let index = Index::new(settings.initial_keys, hasher)?;
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Ok(Cache {
            index,
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
        // Acquire, as above (the gate's lock orders it too).
        while self.restoring.load(Ordering::Acquire) {
            done = self
                .restore_done
                .wait(done)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Whether a restore is still running (`stats`: `persist_restoring`).
    pub fn is_restoring(&self) -> bool {
        // Acquire pairs with `finish_restore`'s release, as in `wait_restored`.
        self.restoring.load(Ordering::Acquire)
    }

    pub(super) fn finish_restore(&self) {
        let _gate = self
            .restore_gate
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Release: the restored items and the store, set before, are seen by a writer whose
        // Acquire load (`wait_restored`) reads false.
        self.restoring.store(false, Ordering::Release);
        self.restore_done.notify_all();
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
    /// go on meanwhile; the index stays pinned while it is read.
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
                let index = self.index.pin();
                let now = self.now();
                for item in index.iter() {
                    if self.validity(item, now).is_ok() {
                        snapshot.push(&self.item_record(item))?;
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
    pub(super) fn item_record<'i>(&self, item: &'i Item) -> Record<'i> {
        Record {
            key: item.key(),
            data: item.data(),
            flags: item.flags,
            cas: item.cas,
            expires: self.unix_of(item.exptime),
            stored: self.process_started + item.time as i64,
            generation: item.generation,
            stale: item.is_stale(),
            binary_key: item.binary_key(),
            ..Record::new(Kind::Item, item.seq)
        }
    }

    /// The record of the flush state now.
    pub(super) fn flush_record(&self, seq: u64) -> Record<'static> {
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

    pub(super) fn note_expiry(&self) {
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
    pub(super) fn charged(&self) -> isize {
        self.used.load(Ordering::Relaxed) as isize
    }

    /// Items in the index (expired ones not yet unlinked included, as memcached counts).
    pub fn items(&self) -> usize {
        self.index.len()
    }

    /// The eviction queues as `stats items` reports them: nodes in the small and main
    /// queues over every shard, and the seconds since the last read (or the store) of the
    /// item at the head of each (the oldest of the shards'; 0 for an empty queue).
    pub fn queues_summary(&self) -> QueuesSummary {
        let now = self.now();
        let index = self.index.pin();
        let mut summary = QueuesSummary::default();
        for shard in self.queues.iter() {
            // The heads are copied out, so the shard's lock is not held over the lookup.
            let (small, main) = {
                let queues = lock(shard);
                summary.small += queues.small.len();
                summary.main += queues.main.len();
                let head = |fifo: &Fifo| fifo.nodes.front().copied();
                (head(&queues.small), head(&queues.main))
            };
            let age = |head: Option<Node>| {
                head.and_then(|node| {
                    index
                        .find_by_hash(node.hash, |item| node.names(item))
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
        self.index.stats()
    }

    /// Slots of the index's table (items are charged apart).
    pub fn index_capacity(&self) -> usize {
        self.index.stats().slots
    }

    /// Bytes of the index's table (16 per slot).
    pub fn index_bytes(&self) -> usize {
        self.index_capacity() * 16
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
    pub(super) fn validity(&self, item: &Item, now: u32) -> Result<(), Counter> {
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

    /// Unlink every expired or flushed item (the server's housekeeping thread runs it every
    /// few seconds; requests never wait for it), once a request gave an expiry time or a
    /// flush. Returns how many items it unlinked.
    ///
    /// One pass over the eviction queues, which name every item (its node), in slices of 256
    /// nodes (`SWEEP_SLICE`): a slice's hashes and ids are copied under its shard's lock, then
    /// looked up under a pin of the index of its own, so neither the lock nor the pin (which
    /// holds back the freeing of replaced items) is held for more than a slice, and the
    /// memory the sweep takes does not grow with the cache. The pass covers each queue as far
    /// as it reached when the pass came to it; items queued later wait for the next pass.
    /// Reads never return an expired item meanwhile: they check every item they find. Stale
    /// nodes are left to eviction: they hold no key, only their slot.
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
                    let index = self.index.pin();
                    let now = self.now();
                    checked += slice.len() as u64;
                    for node in slice.drain(..) {
                        let Some(item) = index.find_by_hash(node.hash, |item| node.names(item))
                        else {
                            continue;
                        };
                        if self.validity(item, now).is_ok() {
                            continue;
                        }
                        let expired =
                            |item: &Item| node.names(item) && self.validity(item, now).is_err();
                        let key = item.key();
                        let unlinkable =
                            |item: &Item| self.removing_if(node.hash, item, expired(item));
                        if let Some(item) = index.remove_if(node.hash, key, unlinkable) {
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
        let index = self.index.pin();
        let now = self.now();
        for item in index
            .iter()
            .filter(|item| self.validity(item, now).is_ok())
            .take(limit)
        {
            if !f(item.key(), item) {
                return;
            }
        }
    }

    /// One stretch of a walk over the valid items taken in pieces (`FlatMap::iter_run`): call
    /// `f` on those in the run of the index's bins at hash position `from` (0 for the
    /// first); the next run's position, or `None` after the last. Following the positions
    /// visits every item valid throughout exactly once, whatever the index does meanwhile.
    pub fn items_run(&self, from: u64, mut f: impl FnMut(&[u8], &Item)) -> Option<u64> {
        let index = self.index.pin();
        let now = self.now();
        index.iter_run(from, |item| {
            if self.validity(item, now).is_ok() {
                f(item.key(), item);
            }
        })
    }

    pub(super) fn hash(&self, key: &[u8]) -> u64 {
        self.index.hash(key)
    }

    /// In a persistent cache, note that a removal of `key` about to take effect stands for
    /// number `seq` (a delete's own, the removed item's for an eviction or an expiry unlink):
    /// an insert of `key` decided before it and landing after it re-sequences (`persist.rs`,
    /// "An absent key has no version"). Call it from the removal's test, once it accepts.
    pub(super) fn note_removal(&self, hash: u64, seq: u64) {
        if let Some(store) = self.store.get() {
            store.removing(hash, seq);
        }
    }

    /// A test of a removal that is not journaled (an eviction, an expiry unlink): `remove`,
    /// the removed item's number noted first if it is (`note_removal`).
    pub(super) fn removing_if(&self, hash: u64, item: &Item, remove: bool) -> bool {
        if remove {
            self.note_removal(hash, item.seq);
        }
        remove
    }
}

/// Whether an item of these sizes could never fit: a key longer than memcached's 250 bytes
/// (the protocols refuse those before, and an item keeps its key's length in a byte), a value
/// larger than `-I`, or an item larger than all of the memory limit.
pub fn too_large(cache: &Cache, key_len: usize, value_len: usize) -> bool {
    key_len > crate::protocol::MAX_KEY_LEN
        || value_len > cache.settings.max_item_size
        || item_charge(key_len, value_len) + node_charge() > cache.memory_limit()
}
