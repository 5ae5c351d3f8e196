//! [`Cache`]: a bounded concurrent cache on [`Map`], evicting by S3-FIFO.
//!
//! # Design
//!
//! Reading order: [`Slot`] (what one entry holds), [`Cache::get`] (the lock-free read),
//! [`Cache::publish`] (publish, then queue), [`Cache::evict_step`] (the policy),
//! [`policy::Ghosts`] and [`policy::Split::missed`] (how the policy adapts),
//! [`flight::load_once`] (one loader per key). `policy.rs` holds the queues, the ghosts and
//! the split, which [`FlatCache`] runs too (`flat.rs` says what differs there).
//!
//! **Entries.** Each key's value lives in one entry of a `Map<K, Slot<V>>`, beside the marks
//! eviction and expiry read: a 2-bit access frequency and the id of its eviction queue node
//! (one word), its weight, and, only for an entry that expires, a box with its deadline and
//! last access time (16 bytes beside the value, and a 24-byte box for an entry that expires:
//! the deadlines in every entry made a 16-byte key with a boxed value an 80-byte entry, 48
//! now).
//! A get is the map's lock-free get followed by relaxed stores of the marks: it takes no lock
//! and moves nothing, which is what lets reads scale (an LRU moves the entry on every hit,
//! under a lock or through a buffer replayed later, as moka does). A lost mark costs an entry
//! at most one pass through a queue, never a wrong answer: the marks are hints.
//!
//! **Eviction: S3-FIFO** (Yang et al., SOSP'23). A key's first insert queues a node in a small
//! FIFO. At the head of small, an entry read since it came moves to the main FIFO and an
//! unread one is evicted, its key's hash remembered in a ghost; a key the ghost remembers goes
//! straight to main when it is inserted again. At the head of main an entry read since its
//! last pass goes round again with its frequency lowered; an unread one is evicted (and
//! remembered too, marked as from main). One-hit wonders and scans leave after a short stay in
//! small and never push out the working set.
//!
//! **The split adapts** (after ARC, Megiddo and Modha, FAST'03). S3-FIFO's fixed 10% small
//! queue evicts an entry not read within the next tenth of a cache's worth of inserts, which
//! loses a session store's keys (written, then read once, later): measured, 9% of such reads
//! hit where an LRU hits 39% (`floe-bench cache`). So the small queue's share of the queued
//! weight is a target that read misses move: a miss on a key the ghost remembers from small
//! says "small should be larger", one remembered from main says "main should be", once per
//! ghost stay. A step is one entry's worth of the cache times the other ghost's size over
//! this one's (ARC's rule: a hit in the smaller ghost says more), doubled every 16 signals in
//! a row the same way, at most 1% a signal, the share kept within 1% and 99%. Zipf traffic
//! says both and settles, a session store says only "larger" and reaches 99% (one FIFO with
//! second chances) within a few hundred misses; scans and one-hit wonders are never asked for
//! again.
//!
//! **The share starts at 45%**, not S3-FIFO's 10%: the split moves only on misses, and the
//! reads a session store misses while it climbs from the start are its loss. Measured on
//! `floe-bench cache`'s traces (deterministic), a session store at half the key space hit
//! 98.0% from 10%, 98.3% from 30%, 99.2% from 40% and 99.7% from 45%, where an LRU hits 100%;
//! no other trace lost more than 0.2 points, at 5% to 90% of the key space. The bound is
//! the working set that main must hold before any miss has moved the split: from 50%, a
//! working set of half the cache sat in a main queue of exactly its size, and a scan evicted
//! from it wherever a queue shard's small share dipped below the half (the unit test
//! `read_entries_outlive_a_scan` fails that way); from 45% main's 55% holds it. A larger
//! working set loses a few keys to a scan until the misses on them (remembered from main)
//! have moved the split down (`a_large_working_set_outlives_scans_once_the_split_moves`).
//!
//! **Only a split that could have kept a key moves for it.** A key that left small `d`
//! evictions ago would still be there had small been `d` entries larger; if `d` is more
//! than main holds (small can take no more than all of it), no split would have kept the key,
//! and its miss says nothing about the split. That is what a scan longer than the cache does:
//! it flushes the small queue, and the keys it pushed out come back a cache's worth of
//! evictions later. Without this check each scan grew small to 70-90%, leaving main too
//! small for the working set, and the next scan flushed most of the cache (BENCHMARKS.md:
//! zipf with scans at 50% hit 80.2% against moka's 82.4%; 82.2% with it). Each ghost
//! therefore keeps its eviction's time. A key from main is not checked: the clock counts
//! every eviction, mostly small's, so a distance overstates what main would have needed
//! (checking main's keys too cost 1.4 points on zipf with a cache of 10%, and still 0.2
//! with a clock per queue).
//!
//! **Ghosts** are one direct-mapped array of 32-bit atomic words (20 bits of a key's hash, its
//! eviction's time in 10 bits, and two flags: which queue it left, and whether a miss
//! signalled it), made at the first
//! eviction with as many words as the cache then holds entries (4096 to 2^24). A read that
//! misses looks at one word, without a lock; a newer eviction landing on a word replaces the
//! older one (random replacement where S3-FIFO keeps a FIFO; a key is remembered for about a
//! cache's worth of evictions either way). Relaxed throughout: a lost, stale or falsely
//! matched word costs one placement or one step of the split.
//!
//! **Queues are sharded by key hash**, each behind a mutex taken only by inserts of new keys
//! and by eviction, never by a get. A node names its key by hash and its entry by id (16
//! bytes, whatever the key; no clone of the key per insert): eviction finds the entry among
//! those of the hash's slot (`MapRef::find_by_hash`; a slot holds several keys only when
//! their 64-bit hashes collide) by id, then removes that key's entry only if it still carries
//! the id. A replace hands the id on to the new entry, so a key rewritten a million times has
//! one node and keeps its place; a node whose entry was removed is stale and is freed when it
//! reaches the head, or by a sweep of its shard when stale nodes outnumber live ones two to
//! one (checked every 64 nodes queued there), so remove-heavy use keeps the queues bounded.
//! Ids come from one counter in blocks of 1024 a thread and keep its low 30 bits (so a slot
//! holds its id and its read count in one word): they wrap after 2^30 ids taken, by every
//! cache in the process (a thread's unused block is lost when it exits, so sooner with many
//! short-lived threads). A wrapped id can only matter if a stale node and a newer entry of
//! the same key (the same 64-bit hash) carry ids 2^30 apart, and then the node names that
//! entry: it may evict it or move it on early, a policy slip, never a wrong answer or a wrong
//! weight (the one write that unlinks an entry subtracts its weight, whichever node led to it).
//!
//! **Weight** is one signed counter: each entry's weight is added when it is published and
//! subtracted by the one write that unlinks it (the replace or the removal), so it never
//! counts an entry twice; it may dip for a moment when a removal overtakes the publishing
//! thread's addition, hence signed. An insert that finds the total above the capacity evicts
//! until it is not, first from its own key's shard, then from the others in turn. Two inserts
//! may each evict for the same excess: the cache then holds up to a thread's worth of entries
//! less than its capacity, never more for longer than one insert's eviction loop. Every evicted
//! entry is retired through the index's collector, whose batches each cost a `membarrier`, so
//! the index reclaims in batches of 512 (`Builder::reclaim_batch`; seize's 32 cost a third of
//! the throughput in a virtual machine, where the barrier's interrupts exit to the host).
//!
//! **Expiry.** An expired entry is never returned: each read checks its deadline (time to
//! live, from the insert) and its idle deadline (time to idle, from the last read), and the
//! read that finds it expired removes it. Expired entries still count against the capacity
//! until a read, eviction (which takes them first) or [`Cache::purge_expired`] removes them,
//! so memory stays bounded by the capacity whatever the clock does. The clock is read only
//! for entries that expire.
//!
//! **Removals are linearizable with the map's writes**: eviction and expiry remove an entry
//! with `remove_if` on its id, so an entry that a concurrent insert replaced (a new value under
//! the same node: same id) is removed only if it still is what eviction judged (unread, or
//! expired); a value inserted after a removal is never removed by it. The listener runs after
//! the shard's lock is released (it may call back into the cache), with references valid under
//! the remover's guard. An insert the index refuses (its memory was refused, or a hasher put
//! more distinct hashes on one key's two lines than they and the table's stash hold) keeps
//! nothing, as if evicted at once.
//!
//! **One loader per key.** [`Cache::get_with`] registers a flight for a missing key in a
//! sharded table; later callers for that key wait on it and take its value. A loader that
//! panics abandons its flight (its waiters try again, one of them loading); a loader that fails
//! ([`Cache::try_get_with`]) hands its error, shared, to those waiting.

use core::{
    borrow::Borrow,
    fmt,
    hash::{BuildHasher, Hash},
    sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering},
    time::Duration,
};
use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use crossbeam_utils::CachePadded;

use crate::{
    any_map::{ByHash, Compute, Map, MapRef, Operation},
    error::{Error, OrRaise},
    hash::DefaultHashBuilder,
    raw::ShardedCounter,
};

mod flat;
mod flight;
mod policy;

pub use flat::{FlatCache, FlatCacheBuilder};
use flight::Flights;
use policy::{Queues, Shards, Split, Weighed};

/// Why an entry left the cache (what the eviction listener is told).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RemovalCause {
    /// Evicted to keep the cache within its capacity.
    Size,
    /// Its time to live or time to idle ran out.
    Expired,
    /// An insert of the same key replaced it.
    Replaced,
    /// Removed by [`Cache::remove`] or [`Cache::clear`].
    Explicit,
}

/// How long one entry may stay: a time to live (from its insert) and a time to idle (from its
/// last read or insert). `None` is forever; [`Cache::insert`] uses the builder's defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expiry {
    /// The entry expires this long after its insert.
    pub time_to_live: Option<Duration>,
    /// The entry expires this long after its last read (or its insert, if never read).
    pub time_to_idle: Option<Duration>,
}

impl Expiry {
    /// Never expires.
    pub const NEVER: Expiry = Expiry {
        time_to_live: None,
        time_to_idle: None,
    };

    /// Expires `ttl` after its insert.
    pub fn live(ttl: Duration) -> Self {
        Expiry {
            time_to_live: Some(ttl),
            time_to_idle: None,
        }
    }

    /// Expires `tti` after its last read.
    pub fn idle(tti: Duration) -> Self {
        Expiry {
            time_to_live: None,
            time_to_idle: Some(tti),
        }
    }
}

/// Counts of what a cache did since it was built (relaxed sums over per-thread shards: a
/// snapshot taken while other threads work may be a few operations apart between fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads that found a live entry.
    pub hits: u64,
    /// Reads that found none (absent or expired).
    pub misses: u64,
    /// Keys inserted that were absent.
    pub insertions: u64,
    /// Entries evicted for capacity.
    pub evictions: u64,
    /// Entries removed because they expired.
    pub expirations: u64,
    /// Loader runs of `get_with` and `try_get_with` (each missing key's first caller).
    pub loads: u64,
}

impl CacheStats {
    /// `hits / (hits + misses)`, 0 when nothing was read.
    pub fn hit_ratio(&self) -> f64 {
        let reads = self.hits + self.misses;
        if reads == 0 {
            0.0
        } else {
            self.hits as f64 / reads as f64
        }
    }
}

const HITS: usize = 0;
const MISSES: usize = 1;
const INSERTIONS: usize = 2;
const EVICTIONS: usize = 3;
const EXPIRATIONS: usize = 4;
const LOADS: usize = 5;
const COUNTERS: usize = 6;

/// Hits, misses and the rest: the maps' own sharded counters, so a get counts itself with a
/// plain store to its thread's shard, not a locked add (six counters of 2 x cores
/// cache-padded shards and a few more: about 2 KiB a cache on 2 cores, 110 KiB on 64).
struct Counters([ShardedCounter; COUNTERS]);

impl Counters {
    fn new() -> Self {
        Counters(core::array::from_fn(|_| ShardedCounter::new()))
    }

    fn add(&self, counter: usize, by: isize) {
        self.0[counter].add(by);
    }

    fn stats(&self) -> CacheStats {
        let sum = |counter: usize| self.0[counter].sum() as u64;
        CacheStats {
            hits: sum(HITS),
            misses: sum(MISSES),
            insertions: sum(INSERTIONS),
            evictions: sum(EVICTIONS),
            expirations: sum(EXPIRATIONS),
            loads: sum(LOADS),
        }
    }
}

/// Deadline meaning "never" (in the clock's milliseconds).
const NEVER: u64 = u64::MAX;

/// Queue node ids a thread takes from the shared counter at a time.
const ID_BLOCK: u64 = 1024;

/// Node ids are the counter's low 30 bits (they wrap; module docs, "Queues"); a slot keeps
/// its read count above them.
const ID_BITS: u32 = 30;
const ID_MASK: u32 = (1 << ID_BITS) - 1;

/// Entries a thread retires before the index's collector frees them: every insert into a
/// full cache retires one (the entry evicted), and each batch costs a `membarrier`.
const RECLAIM_BATCH: usize = 512;

/// One key's entry: its value and the marks eviction and expiry read. 16 bytes beside the
/// value (an entry of a 16-byte key and a boxed value is one 48-byte allocation): the
/// deadlines of an entry that expires sit in a box of their own, so entries that never
/// expire do not carry them.
struct Slot<V> {
    value: V,
    /// The id of the queue node that stands for this key in the low [`ID_BITS`] (handed on
    /// by a replace; never changes in one slot) and, above them, the reads since the entry
    /// last passed a queue's head, at most 3 (S3-FIFO's 2 bits).
    marks: AtomicU32,
    weight: u32,
    /// `None` if the entry never expires.
    timing: Option<Box<Timing>>,
}

/// When an entry expires.
struct Timing {
    /// Time-to-live deadline, in the clock's milliseconds; [`NEVER`] if none.
    deadline: u64,
    /// Last read (or insert), in the clock's milliseconds; read only if `idle_ms != 0`.
    accessed: AtomicU64,
    /// Time to idle in milliseconds; 0 if none (an idle time of 0 ms is stored as 1).
    idle_ms: u32,
}

impl Timing {
    fn expired(&self, now: u64) -> bool {
        now >= self.deadline
            || (self.idle_ms != 0
                && now >= self.accessed.load(Ordering::Relaxed) + u64::from(self.idle_ms))
    }
}

impl<V> Slot<V> {
    fn new(value: V, id: u32, freq: u32, weight: u32, timing: Option<Box<Timing>>) -> Self {
        debug_assert!(id <= ID_MASK && freq <= 3);
        Slot {
            value,
            marks: AtomicU32::new(id | freq << ID_BITS),
            weight,
            timing,
        }
    }

    /// The id of the node that stands for this entry.
    fn id(&self) -> u32 {
        self.marks.load(Ordering::Relaxed) & ID_MASK
    }

    /// Reads since the entry last passed a queue's head (0 to 3).
    fn freq(&self) -> u32 {
        self.marks.load(Ordering::Relaxed) >> ID_BITS
    }

    /// Relaxed: a hint (module docs). The id bits are rewritten unchanged, so a racing
    /// store can lose a count, never change the id.
    fn set_freq(&self, freq: u32) {
        self.marks
            .store(self.id() | freq << ID_BITS, Ordering::Relaxed);
    }

    fn expires(&self) -> bool {
        self.timing.is_some()
    }

    /// Not expired by the clock's time now (read only if the entry expires at all).
    fn is_live(&self, clock: &Clock) -> bool {
        !self.expires() || !self.expired(clock.now())
    }

    fn expired(&self, now: u64) -> bool {
        self.timing
            .as_ref()
            .is_some_and(|timing| timing.expired(now))
    }

    /// Mark a read (relaxed: hints for eviction and idle expiry, see the module docs).
    fn touch(&self, now: u64) {
        let marks = self.marks.load(Ordering::Relaxed);
        if marks >> ID_BITS < 3 {
            self.marks.store(marks + (1 << ID_BITS), Ordering::Relaxed);
        }
        if let Some(timing) = &self.timing {
            if timing.idle_ms != 0 && timing.accessed.load(Ordering::Relaxed) != now {
                timing.accessed.store(now, Ordering::Relaxed);
            }
        }
    }
}

/// A queue node: stands for the entry whose `id` it carries, under the key of hash `hash`
/// (the hash, not a copy of the key: 16 bytes whatever the key, and no clone per insert).
struct Node {
    hash: u64,
    id: u32,
    /// The entry's weight when the node was last queued (for the queues' shares).
    weight: u32,
}

impl Weighed for Node {
    fn weight(&self) -> u32 {
        self.weight
    }
}

/// Milliseconds since the cache was built (a manual clock in the unit tests).
struct Clock {
    start: Instant,
    #[cfg(test)]
    manual: Option<AtomicU64>,
}

impl Clock {
    fn new() -> Self {
        Clock {
            start: Instant::now(),
            #[cfg(test)]
            manual: None,
        }
    }

    fn now(&self) -> u64 {
        #[cfg(test)]
        if let Some(manual) = &self.manual {
            return manual.load(Ordering::Relaxed);
        }
        self.start.elapsed().as_millis() as u64
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

type Listener<K, V> = Box<dyn Fn(&K, &V, RemovalCause) + Send + Sync>;
type Weigher<K, V> = Box<dyn Fn(&K, &V) -> u32 + Send + Sync>;

/// Builds a [`Cache`]: capacity, weigher, expiry, listener and hasher.
pub struct CacheBuilder<K, V, S = DefaultHashBuilder> {
    max_capacity: u64,
    initial_capacity: Option<usize>,
    weigher: Option<Weigher<K, V>>,
    listener: Option<Listener<K, V>>,
    expiry: Expiry,
    hasher: S,
}

impl<K, V, S> CacheBuilder<K, V, S> {
    /// The capacity: entries, or with a [`weigher`](Self::weigher) the sum of their weights.
    pub fn max_capacity(mut self, capacity: u64) -> Self {
        self.max_capacity = capacity;
        self
    }

    /// Size the index for this many entries up front (it grows on demand anyway).
    pub fn initial_capacity(mut self, entries: usize) -> Self {
        self.initial_capacity = Some(entries);
        self
    }

    /// Weigh each entry (bytes, say): the capacity then bounds the sum of the weights. An
    /// entry heavier than the whole capacity is not kept (its insert evicts it at once).
    pub fn weigher(mut self, weigher: impl Fn(&K, &V) -> u32 + Send + Sync + 'static) -> Self {
        self.weigher = Some(Box::new(weigher));
        self
    }

    /// Every entry inserted without its own [`Expiry`] expires this long after its insert.
    pub fn time_to_live(mut self, ttl: Duration) -> Self {
        self.expiry.time_to_live = Some(ttl);
        self
    }

    /// Every entry inserted without its own [`Expiry`] expires this long after its last read.
    pub fn time_to_idle(mut self, tti: Duration) -> Self {
        self.expiry.time_to_idle = Some(tti);
        self
    }

    /// Called once for every entry that leaves the cache, with why. It runs on the thread that
    /// removed the entry, after the cache released its locks, so it may use the cache; it
    /// should be quick (an insert that evicts waits for it).
    pub fn eviction_listener(
        mut self,
        listener: impl Fn(&K, &V, RemovalCause) + Send + Sync + 'static,
    ) -> Self {
        self.listener = Some(Box::new(listener));
        self
    }

    /// Hash keys with `hasher` (for keys an adversary chooses, a keyed one: see
    /// [`hash`](crate::hash)).
    pub fn hasher<S2>(self, hasher: S2) -> CacheBuilder<K, V, S2> {
        CacheBuilder {
            max_capacity: self.max_capacity,
            initial_capacity: self.initial_capacity,
            weigher: self.weigher,
            listener: self.listener,
            expiry: self.expiry,
            hasher,
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone, S: BuildHasher> CacheBuilder<K, V, S> {
    /// The cache.
    ///
    /// # Errors
    /// [`Error::AllocationFailed`] if the operating system refuses the index's first table.
    pub fn build(self) -> Result<Cache<K, V, S>, Error> {
        let queues = Shards::new(self.weigher.is_none().then_some(self.max_capacity));
        let shards = queues.len();
        let entries = self.initial_capacity.unwrap_or_else(|| {
            // A bounded cache of entries will hold its capacity: room for it up to 2^16 (the
            // index grows past that without stopping anyone); an unbounded or weighed one
            // starts small.
            if self.weigher.is_none() && self.max_capacity != u64::MAX {
                self.max_capacity.min(1 << 16) as usize
            } else {
                1024
            }
        });
        // The dense layout: at 1M entries of 16-byte keys and 100-byte values its index took
        // about 17 bytes an entry (24 at 0.7M and 1.4M) where the default layout's took about
        // 46 (213.9 bytes an entry in all against 238.6), and cache-aside throughput was the
        // same within the noise of paired runs (BENCHMARKS, "floe::Cache beside moka"). A
        // bounded cache's index stops growing where the cache is full, so a next table
        // prepared ahead of a growth that never comes would only hold memory (43 bytes an
        // entry at 1M): not prepared.
        let mut map = Map::<K, Slot<V>>::builder()
            .hasher(self.hasher)
            .capacity(entries.max(16))
            .reclaim_batch(RECLAIM_BATCH)
            .layout(crate::Layout::Dense);
        if self.max_capacity != u64::MAX {
            map = map.grow_ahead(0);
        }
        let map = map.build()?;
        Ok(Cache {
            map,
            queues,
            split: Split::new(shards),
            flights: (0..shards).map(|_| Mutex::default()).collect(),
            weight: CachePadded::new(AtomicI64::new(0)),
            max_capacity: self.max_capacity,
            counters: Counters::new(),
            weigher: self.weigher,
            listener: self.listener,
            expiry: self.expiry,
            clock: Clock::new(),
        })
    }
}

/// A bounded concurrent cache: a [`Map`] whose entries leave by S3-FIFO eviction, time to
/// live or time to idle.
///
/// Reads are lock-free and move nothing; inserts of new keys take one shard's lock to queue
/// the key. `get_with` runs one loader per missing key while the key's other callers wait. See
/// the module docs of `cache/mod.rs` for the design and its argument.
///
/// ```
/// use std::time::Duration;
/// let cache = floe::Cache::<String, String>::builder()
///     .max_capacity(10_000)
///     .time_to_live(Duration::from_secs(300))
///     .build()
///     .unwrap();
/// assert_eq!(cache.insert("k".to_string(), "v1".to_string()), None);
/// assert_eq!(cache.insert("k".to_string(), "v2".to_string()), Some("v1".to_string()));
/// assert_eq!(cache.get("k").as_deref(), Some("v2"));
/// // One loader per key: other threads asking for "user:7" now wait for this one.
/// let user = cache.get_with("user:7".to_string(), || "Ada".to_string());
/// assert_eq!(user, "Ada");
/// assert_eq!(cache.stats().hits, 1);
/// ```
pub struct Cache<K, V, S = DefaultHashBuilder> {
    map: Map<K, Slot<V>, S>,
    queues: Shards<Node>,
    split: Split,
    flights: Box<[Flights<K, V>]>,
    /// Sum of the live entries' weights (signed: see the module docs).
    weight: CachePadded<AtomicI64>,
    max_capacity: u64,
    /// Hits, misses and the rest.
    counters: Counters,
    weigher: Option<Weigher<K, V>>,
    listener: Option<Listener<K, V>>,
    expiry: Expiry,
    clock: Clock,
}

impl<K, V, S> fmt::Debug for Cache<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("entries", &self.map.len())
            .field("weighted_size", &self.weighted_size())
            .field("max_capacity", &self.max_capacity)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Cache<K, V> {
    /// A cache of at most `max_capacity` entries, with the default hasher and no expiry.
    ///
    /// # Panics
    /// If the operating system refuses the index's first table; [`builder`](Self::builder)'s
    /// `build` returns the error instead.
    #[track_caller]
    pub fn new(max_capacity: u64) -> Self {
        Self::builder()
            .max_capacity(max_capacity)
            .build()
            .or_raise()
    }

    /// A builder for a cache with settings of its own.
    pub fn builder() -> CacheBuilder<K, V> {
        CacheBuilder {
            max_capacity: u64::MAX,
            initial_capacity: None,
            weigher: None,
            listener: None,
            expiry: Expiry::NEVER,
            hasher: DefaultHashBuilder::default(),
        }
    }
}

/// What eviction took out, reported to the listener once the shard's lock is released (the
/// entries live under the evicting thread's guard).
type Removed<'g, K, V> = Vec<(&'g K, &'g V, RemovalCause)>;

impl<K, V, S> Cache<K, V, S> {
    /// The sum of the live entries' weights (their number without a weigher).
    pub fn weighted_size(&self) -> u64 {
        self.weight.load(Ordering::Relaxed).max(0) as u64
    }

    /// Entries held, counting expired ones not yet removed.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The capacity it was built with.
    pub fn max_capacity(&self) -> u64 {
        self.max_capacity
    }

    /// What the cache did since it was built.
    pub fn stats(&self) -> CacheStats {
        self.counters.stats()
    }

    /// The small queue's current share of the queued weight, in millionths (diagnostics).
    pub fn small_queue_share(&self) -> u32 {
        self.split.share()
    }

    fn count(&self, counter: usize, by: isize) {
        self.counters.add(counter, by);
    }

    fn charge(&self, by: i64) {
        self.weight.fetch_add(by, Ordering::Relaxed);
    }

    fn over_capacity(&self) -> bool {
        self.weight.load(Ordering::Relaxed) > i64::try_from(self.max_capacity).unwrap_or(i64::MAX)
    }

    fn report(&self, removed: Removed<'_, K, V>) {
        if let Some(listener) = &self.listener {
            for (key, value, cause) in removed {
                listener(key, value, cause);
            }
        }
    }
}

/// A queue node id: the low 30 bits of one process-wide counter, taken in blocks (unique
/// until the counter wraps; module docs, "Queues").
fn fresh_id() -> u32 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    std::thread_local! {
        static BLOCK: core::cell::Cell<(u64, u64)> = const { core::cell::Cell::new((0, 0)) };
    }
    BLOCK.with(|block| {
        let (mut next, mut end) = block.get();
        if next == end {
            next = NEXT.fetch_add(ID_BLOCK, Ordering::Relaxed);
            end = next + ID_BLOCK;
        }
        block.set((next + 1, end));
        (next & u64::from(ID_MASK)) as u32
    })
}

impl<K: Hash + Eq + Clone, V: Clone, S: BuildHasher> Cache<K, V, S> {
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.map.hasher().hash_one(key)
    }

    /// The value of `key`, if present and not expired; marks it read.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.map.pin();
        match self.live(&map, key) {
            Some(slot) => {
                self.count(HITS, 1);
                Some(slot.value.clone())
            }
            None => {
                self.count(MISSES, 1);
                self.missed(key);
                None
            }
        }
    }

    /// A read missed `key`: if eviction let it go lately, move the split (module docs):
    /// toward the small queue if it left that one unread, else toward main.
    fn missed<Q: Hash + ?Sized>(&self, key: &Q) {
        self.split
            .missed(|| self.hash(key), || self.map.len() as u64);
    }

    /// Whether `key` has a live value (does not count as a read).
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.map.pin();
        map.get(key).is_some_and(|slot| slot.is_live(&self.clock))
    }

    /// The live slot of `key`, marked read; an expired one is removed.
    fn live<'g, Q>(&self, map: &'g MapRef<'_, K, Slot<V>, S>, key: &Q) -> Option<&'g Slot<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let slot = map.get(key)?;
        if !slot.expires() {
            slot.touch(0);
            return Some(slot);
        }
        let now = self.clock.now();
        if !slot.expired(now) {
            slot.touch(now);
            return Some(slot);
        }
        // Only this entry, and only if still expired (a read may have renewed its idle time).
        let id = slot.id();
        let gone = map.remove_entry_if(key, |slot| slot.id() == id && slot.expired(now));
        if let Some((key, gone)) = gone {
            self.unlinked(gone, RemovalCause::Expired);
            self.tell(key, &gone.value, RemovalCause::Expired);
        }
        None
    }

    fn tell(&self, key: &K, value: &V, cause: RemovalCause) {
        if let Some(listener) = &self.listener {
            listener(key, value, cause);
        }
    }

    /// Account for an entry that left the index (its one unlinking write).
    fn unlinked(&self, slot: &Slot<V>, cause: RemovalCause) {
        self.charge(-i64::from(slot.weight));
        match cause {
            RemovalCause::Size => self.count(EVICTIONS, 1),
            RemovalCause::Expired => self.count(EXPIRATIONS, 1),
            RemovalCause::Replaced | RemovalCause::Explicit => {}
        }
    }

    /// Insert `key` with the builder's expiry, replacing (and returning) a live value.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        self.insert_with_expiry(key, value, self.expiry)
    }

    /// Insert `key` with an expiry of its own, replacing (and returning) a live value.
    pub fn insert_with_expiry(&self, key: K, value: V, expiry: Expiry) -> Option<V> {
        let map = self.map.pin();
        self.publish(&map, key, value, expiry).cloned()
    }

    /// Publish `value` under `key`, queue a new key, and evict while over capacity; returns
    /// the live value replaced.
    fn publish<'g>(
        &self,
        map: &'g MapRef<'_, K, Slot<V>, S>,
        key: K,
        value: V,
        expiry: Expiry,
    ) -> Option<&'g V> {
        let weight = self.weigher.as_ref().map_or(1, |weigh| weigh(&key, &value));
        let expires = expiry != Expiry::NEVER;
        let timing = expires.then(|| {
            let now = self.clock.now();
            Box::new(Timing {
                deadline: expiry
                    .time_to_live
                    .map_or(NEVER, |ttl| now.saturating_add(millis(ttl))),
                accessed: AtomicU64::new(now),
                idle_ms: expiry
                    .time_to_idle
                    .map_or(0, |tti| millis(tti).clamp(1, u64::from(u32::MAX)) as u32),
            })
        });
        let hash = self.hash(&key);
        let mut first = Some((value, timing));
        // The id the last attempt stored, and the fresh one a first insert takes (kept across
        // attempts; a key removed between attempts gets the fresh id, never the old entry's,
        // whose node may still be queued).
        let mut id = 0;
        let mut fresh = None;
        let made = map.try_compute_returning(key, |old, returned: Option<Slot<V>>| {
            let (value, timing) = returned
                .map(|slot| (slot.value, slot.timing))
                .or_else(|| first.take())
                .expect("each attempt gets the value back from the one before");
            // A replace keeps the node (so the key's place in the queue) and counts as a read.
            let freq = match old {
                Some(old) => {
                    id = old.id();
                    (old.freq() + 1).min(3)
                }
                None => {
                    id = *fresh.get_or_insert_with(fresh_id);
                    0
                }
            };
            Operation::<_, ()>::Insert(Slot::new(value, id, freq, weight, timing))
        });
        let old = match made {
            Ok(Compute::Inserted(slot)) => {
                self.charge(i64::from(weight));
                self.count(INSERTIONS, 1);
                self.enqueue(map, hash, weight, slot.id());
                None
            }
            Ok(Compute::Updated { old, new: _ }) => {
                self.charge(i64::from(weight) - i64::from(old.weight));
                let live = old.is_live(&self.clock);
                if self.listener.is_some() {
                    // The key as the new entry holds it (the caller's moved into it).
                    if let Some((key, _)) = map.find_by_hash(hash, |_, slot| slot.id() == id) {
                        self.tell(key, &old.value, RemovalCause::Replaced);
                    }
                }
                live.then_some(&old.value)
            }
            // The index could not take the key (its memory was refused): nothing changed.
            Ok(Compute::Removed(_) | Compute::Absent | Compute::Aborted(())) | Err(_) => {
                return None
            }
        };
        if u64::from(weight) > self.max_capacity {
            // Heavier than the whole cache: never kept.
            self.remove_node(map, hash, id, RemovalCause::Size, |_| true);
        }
        if self.over_capacity() {
            self.evict(map, self.queues.shard_of(hash));
        }
        old
    }

    /// Remove the entry of the node (`hash`, `id`) if `accept` says so of it, telling the
    /// listener now; whether it was removed.
    fn remove_node(
        &self,
        map: &MapRef<'_, K, Slot<V>, S>,
        hash: u64,
        id: u32,
        cause: RemovalCause,
        mut accept: impl FnMut(&Slot<V>) -> bool,
    ) -> bool {
        match self.take_node(map, hash, id, &mut accept) {
            Some((key, gone)) => {
                self.unlinked(gone, cause);
                self.tell(key, &gone.value, cause);
                true
            }
            None => false,
        }
    }

    /// Take the entry of the node (`hash`, `id`) out of the index if `accept` says so of it.
    fn take_node<'g>(
        &self,
        map: &'g MapRef<'_, K, Slot<V>, S>,
        hash: u64,
        id: u32,
        accept: impl FnMut(&Slot<V>) -> bool,
    ) -> Option<(&'g K, &'g Slot<V>)> {
        // The node names its key by hash: find the entry (and so the key) first, then remove
        // that key's entry if it still is the node's (a replace keeps the id, so "the node's
        // entry" may be a newer value: `accept` judges the one removed).
        let (key, _) = map.find_by_hash(hash, |_, slot| slot.id() == id)?;
        Self::take_entry(map, hash, key, id, accept)
    }

    /// Take `key`'s entry (its hash `hash`) out of the index if it still carries node id `id`
    /// and `accept` says so of it.
    fn take_entry<'g>(
        map: &'g MapRef<'_, K, Slot<V>, S>,
        hash: u64,
        key: &K,
        id: u32,
        mut accept: impl FnMut(&Slot<V>) -> bool,
    ) -> Option<(&'g K, &'g Slot<V>)> {
        map.remove_entry_if_by(
            hash,
            |k| k == key,
            |_, slot| slot.id() == id && accept(slot),
        )
    }

    /// Queue a new key's node (main if its key left the small queue lately); sweeps the shard
    /// now and then if stale nodes pile up.
    fn enqueue(&self, map: &MapRef<'_, K, Slot<V>, S>, hash: u64, weight: u32, id: u32) {
        let small = self.split.queue_small(hash);
        let (_, mut queues) = self.queues.lock_some(self.queues.shard_of(hash));
        queues.push(small, Node { hash, id, weight });
        if queues.enqueued() {
            let live_here = self.map.len() / self.queues.len();
            if queues.nodes() > 2 * live_here + 64 {
                self.sweep_stale(map, &mut queues);
            }
        }
    }

    /// Whether the node names a present entry.
    fn is_live(map: &MapRef<'_, K, Slot<V>, S>, node: &Node) -> bool {
        map.find_by_hash(node.hash, |_, slot| slot.id() == node.id)
            .is_some()
    }

    /// Drop the stale nodes of one shard, keeping the others in order.
    fn sweep_stale(&self, map: &MapRef<'_, K, Slot<V>, S>, queues: &mut Queues<Node>) {
        queues.retain(|node| Self::is_live(map, node));
    }

    /// Evict until the cache is within its capacity: from shard `first`, then the others;
    /// first from the shards no other thread holds (as `lock_some_queues`), then, if that
    /// was not enough, from each in turn, waiting for it.
    fn evict(&self, map: &MapRef<'_, K, Slot<V>, S>, first: usize) {
        let shards = self.queues.len();
        for wait in [false, true] {
            for turn in 0..shards {
                let shard = (first + turn) % shards;
                let held = if wait {
                    Some(self.queues.lock(shard))
                } else {
                    self.queues.try_lock(shard)
                };
                let Some(mut queues) = held else {
                    continue;
                };
                let mut removed = Vec::new();
                while self.over_capacity() && self.evict_step(map, &mut queues, &mut removed) {}
                drop(queues);
                self.report(removed);
                if !self.over_capacity() {
                    return;
                }
            }
        }
    }

    /// One S3-FIFO step on a shard: free a stale node, remove an expired entry, or evict an
    /// unread one, moving read entries on meanwhile. `false` when the shard is empty.
    fn evict_step<'g>(
        &self,
        map: &'g MapRef<'_, K, Slot<V>, S>,
        queues: &mut Queues<Node>,
        removed: &mut Removed<'g, K, V>,
    ) -> bool {
        loop {
            let from_small = self.split.evict_from_small(queues);
            let Some(mut node) = queues.pop(from_small) else {
                return false;
            };
            let id = node.id;
            // One lookup finds the node's entry and removes it if it is expired or unread: the
            // entry judged, or one that replaced it since (same node, same id), judged again.
            let mut cause = RemovalCause::Size;
            let judged = map.remove_by_hash_if(
                node.hash,
                |_, slot| slot.id() == id,
                |_, slot| {
                    let expired = slot.expires() && slot.expired(self.clock.now());
                    cause = if expired {
                        RemovalCause::Expired
                    } else {
                        RemovalCause::Size
                    };
                    expired || slot.freq() == 0
                },
            );
            match judged {
                ByHash::Removed(key, gone) => {
                    self.unlinked(gone, cause);
                    if cause == RemovalCause::Size {
                        // The map's length only at the first eviction: it sums the count's
                        // shards, two per core and more (144 lines on 64 cores), which the
                        // other threads keep writing.
                        self.split
                            .remember(queues, node.hash, from_small, || self.map.len());
                    }
                    if self.listener.is_some() {
                        removed.push((key, &gone.value, cause));
                    }
                    return true;
                }
                // Read since it was queued (a replace counts as a read): it moves on, with one
                // read fewer counted (all of them leaving small).
                ByHash::Kept(slot) => {
                    let freq = slot.freq();
                    slot.set_freq(if from_small {
                        0
                    } else {
                        freq.saturating_sub(1)
                    });
                    node.weight = slot.weight;
                    queues.push(false, node);
                }
                // Stale: its entry was removed (and uncharged) already.
                ByHash::Absent => return true,
            }
        }
    }

    /// Remove `key`; returns its live value.
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.map.pin();
        let (key, gone) = map.remove_entry_if(key, |_| true)?;
        self.unlinked(gone, RemovalCause::Explicit);
        self.tell(key, &gone.value, RemovalCause::Explicit);
        gone.is_live(&self.clock).then(|| gone.value.clone())
    }

    /// Remove every entry (each reported to the listener as removed explicitly). Entries
    /// inserted while it runs may stay.
    pub fn clear(&self) {
        let map = self.map.pin();
        for node in self.queues.take_all() {
            self.remove_node(&map, node.hash, node.id, RemovalCause::Explicit, |_| true);
        }
        self.split.forget();
    }

    /// Remove every expired entry now (they are never returned, and eviction frees them
    /// first; this frees their memory without waiting for either). Returns how many.
    pub fn purge_expired(&self) -> usize {
        let map = self.map.pin();
        let now = self.clock.now();
        let mut purged = 0;
        for shard in 0..self.queues.len() {
            // The shard's nodes are copied out so that no lock is held while removing.
            let nodes: Vec<(u64, u32)> = {
                let queues = self.queues.lock(shard);
                queues
                    .small
                    .iter()
                    .chain(queues.main.iter())
                    .map(|node| (node.hash, node.id))
                    .collect()
            };
            for (hash, id) in nodes {
                let expired = |slot: &Slot<V>| slot.expires() && slot.expired(now);
                if self.remove_node(&map, hash, id, RemovalCause::Expired, expired) {
                    purged += 1;
                }
            }
        }
        purged
    }

    /// Visit every live entry (not counted as reads). Entries written meanwhile may or may
    /// not be seen, as in [`MapRef::iter`].
    pub fn for_each(&self, mut visit: impl FnMut(&K, &V)) {
        let map = self.map.pin();
        let now = self.clock.now();
        for (key, slot) in map.iter() {
            if !slot.expires() || !slot.expired(now) {
                visit(key, &slot.value);
            }
        }
    }

    /// The value of `key`; if absent, `load` makes it, once: other callers for the same key
    /// meanwhile wait for this load and take its value.
    ///
    /// If `load` panics, the panic goes on in this caller and one of the waiters loads
    /// instead. `load` must not ask the cache for the same key (it would wait for itself).
    pub fn get_with(&self, key: K, load: impl FnOnce() -> V) -> V {
        flight::infallible(self.get_or_load(key, || Ok(load())))
    }

    /// [`get_with`](Self::get_with) whose `load` may fail: the error is returned to this
    /// caller and every caller waiting for the same load, shared, and nothing is cached.
    pub fn try_get_with<E: Send + Sync + 'static>(
        &self,
        key: K,
        load: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, Arc<E>> {
        self.get_or_load(key, load)
    }

    fn get_or_load<E: Send + Sync + 'static>(
        &self,
        key: K,
        load: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, Arc<E>> {
        let flights = &self.flights[self.queues.shard_of(self.hash(&key))];
        flight::load_once(
            flights,
            &key,
            || self.get(&key),
            || {
                // A value inserted between our miss and the flight's registration.
                let map = self.map.pin();
                if let Some(slot) = self.live(&map, &key) {
                    return Ok(slot.value.clone());
                }
                self.count(LOADS, 1);
                let value = load()?;
                self.publish(&map, key.clone(), value.clone(), self.expiry);
                Ok(value)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::PPM;
    use std::sync::{atomic::AtomicUsize, Barrier};

    /// Scaled down under Miri.
    const N: u64 = if cfg!(miri) { 200 } else { 20_000 };

    fn manual<K: Hash + Eq + Clone, V: Clone>(builder: CacheBuilder<K, V>) -> Cache<K, V> {
        let mut cache = builder.build().unwrap();
        cache.clock.manual = Some(AtomicU64::new(0));
        cache
    }

    fn advance<K, V, S>(cache: &Cache<K, V, S>, ms: u64) {
        cache
            .clock
            .manual
            .as_ref()
            .unwrap()
            .fetch_add(ms, Ordering::Relaxed);
    }

    fn queued_nodes<K, V, S>(cache: &Cache<K, V, S>) -> usize {
        (0..cache.queues.len())
            .map(|shard| cache.queues.lock(shard).nodes())
            .sum()
    }

    #[test]
    fn std_semantics() {
        let cache = Cache::<u64, String>::new(100);
        assert_eq!(cache.insert(1, "a".into()), None);
        assert_eq!(cache.insert(1, "b".into()), Some("a".into()));
        assert_eq!(cache.get(&1).as_deref(), Some("b"));
        assert!(cache.contains_key(&1));
        assert_eq!(cache.remove(&1).as_deref(), Some("b"));
        assert_eq!(cache.remove(&1), None);
        assert_eq!(cache.get(&1), None);
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.weighted_size(), 0);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.insertions), (1, 1, 1));
    }

    /// A shard another thread holds does not stop a write: its node goes to a free shard and
    /// eviction takes from one, so the cache stays within its capacity. (Waiting for the held
    /// shard instead would hang here: the holder waits for the write to finish.)
    #[test]
    fn a_held_shard_sends_writes_to_the_others() {
        let cache = Cache::<u64, u64>::new(512);
        assert!(cache.queues.len() > 1, "this test needs shards to move to");
        for key in 0..512 {
            cache.insert(key, key);
        }
        let key = 1_000;
        let shard = cache.queues.shard_of(cache.hash(&key));
        let before = cache.queues.lock(shard).nodes();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let held = cache.queues.lock(shard);
            s.spawn(|| {
                // A fresh key (its node) and a full cache (an eviction).
                cache.insert(key, key);
                done.send(()).unwrap();
            });
            let waited = finished.recv_timeout(std::time::Duration::from_secs(20));
            drop(held);
            assert!(
                waited.is_ok(),
                "a write waited for a shard another thread held"
            );
        });
        assert_eq!(cache.get(&key), Some(key));
        assert!(cache.weighted_size() <= 512);
        assert_eq!(
            cache.queues.lock(shard).nodes(),
            before,
            "the held shard was left alone"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn capacity_holds_and_replaces_do_not_queue_twice() {
        let cache = Cache::<u64, u64>::new(N / 10);
        for round in 0..3 {
            for key in 0..N {
                cache.insert(key, key + round);
                assert!(cache.weighted_size() <= N / 10);
            }
        }
        assert_eq!(cache.len() as u64, cache.weighted_size());
        // Every node names a live entry or is about to be freed; none is queued twice.
        assert!(queued_nodes(&cache) <= cache.len() + cache.queues.len() * 64);
        // Every key inserted is present or was evicted: none is lost or counted twice.
        let stats = cache.stats();
        assert_eq!(stats.insertions - stats.evictions, cache.len() as u64);
        assert!(stats.evictions >= N - N / 10);
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn read_entries_outlive_a_scan() {
        let hot = N / 20;
        let cache = Cache::<u64, u64>::new(N / 10);
        for key in 0..hot {
            cache.insert(key, key);
        }
        for scan in 0..N {
            for key in (scan % 4) * hot / 4..(scan % 4 + 1) * hot / 4 {
                if scan % 64 == 0 {
                    assert!(
                        cache.get(&key).is_some(),
                        "hot key {key} evicted by the scan"
                    );
                }
            }
            if scan % 64 == 0 {
                for key in 0..hot {
                    cache.get(&key);
                }
            }
            cache.insert(1_000_000 + scan, scan);
        }
    }

    /// A working set larger than main's share at the start: a scan pushes some of it out
    /// until the misses on those keys (remembered from main) move the split toward main, and
    /// then it stays (module docs, "The share starts at 45%").
    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn a_large_working_set_outlives_scans_once_the_split_moves() {
        let capacity = N / 10;
        let cache = Cache::<u64, u64>::new(capacity);
        let hot = capacity * 7 / 10;
        let start = cache.small_queue_share();
        let (mut hits, mut reads) = (0, 0);
        let mut scanned = 1 << 40;
        for round in 0..40 {
            for key in 0..hot {
                let hit = cache.get(&key).is_some();
                if !hit {
                    cache.insert(key, key);
                }
                if round >= 10 {
                    reads += 1;
                    hits += u64::from(hit);
                }
            }
            for _ in 0..capacity {
                cache.insert(scanned, 0);
                scanned += 1;
            }
        }
        // Main's share at the start cannot hold the working set: misses must have moved it.
        if hot * PPM > capacity * (PPM - u64::from(start)) {
            assert!(
                cache.small_queue_share() < start,
                "the misses on the working set did not move the split toward main"
            );
        }
        assert!(
            hits * 100 >= reads * 99,
            "the working set hit {hits} of {reads} reads once the split had moved"
        );
    }

    #[test]
    fn a_ghost_tells_which_queue_it_left_and_how_long_ago() {
        let ghosts = policy::Ghosts::new(4096, 1);
        // 4096 slots: a tick is 16 evictions, 1024 ticks span 16,384.
        assert_eq!(ghosts.tick_shift, 4);
        let (small_key, main_key) = (0x0123_4567_89ab_cdef_u64, 0xfedc_ba98_7654_3210_u64);
        ghosts.remember(small_key, true);
        ghosts.clock.fetch_add(999, Ordering::Relaxed);
        ghosts.remember(main_key, false);
        ghosts.clock.fetch_add(100, Ordering::Relaxed);
        let (from_small, since) = ghosts.signal(small_key).expect("remembered");
        assert!(from_small);
        assert!((1088..=1104).contains(&since), "{since}");
        let (from_small, since) = ghosts.signal(main_key).expect("remembered");
        assert!(!from_small);
        assert!((96..=112).contains(&since), "{since}");
        // Once a stay; taking it (the key is queued again) forgets it.
        assert_eq!(ghosts.signal(small_key), None);
        assert!(ghosts.take(small_key));
        assert!(!ghosts.take(small_key));
        // The time reads modulo 1024 ticks.
        ghosts.remember(small_key, true);
        ghosts.clock.fetch_add(16 * 1024 + 160, Ordering::Relaxed);
        let (_, since) = ghosts.signal(small_key).expect("remembered");
        assert!((144..=176).contains(&since), "{since}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn only_a_split_that_could_have_kept_a_key_moves_for_it() {
        let capacity = N / 10;
        let cache = Cache::<u64, u64>::new(capacity);
        // Nothing is read, so small holds everything and evicts in order: keys 0..capacity
        // leave during the second capacity's inserts, capacity..2 * capacity during the
        // third's. A scan's keys come back like this, a cache's worth of evictions later.
        for key in 0..3 * capacity {
            cache.insert(key, key);
        }
        let before = cache.small_queue_share();
        for key in 0..capacity {
            assert_eq!(cache.get(&key), None);
        }
        assert_eq!(
            cache.small_queue_share(),
            before,
            "keys no split would have kept moved it"
        );
        // Keys read an eighth of a cache's evictions after they left small: a larger small
        // would have kept them.
        for key in 3 * capacity..3 * capacity + capacity / 8 {
            cache.insert(key, key);
        }
        for key in 2 * capacity..2 * capacity + capacity / 16 {
            assert_eq!(cache.get(&key), None);
        }
        assert!(
            cache.small_queue_share() > before,
            "keys a larger small would have kept did not grow it"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn weigher_bounds_the_weights_and_refuses_the_overweight() {
        let cache = Cache::<u64, Vec<u8>>::builder()
            .max_capacity(10_000)
            .weigher(|_, value: &Vec<u8>| value.len() as u32)
            .build()
            .unwrap();
        for key in 0..N / 10 {
            cache.insert(key, vec![0; (key % 200) as usize + 1]);
            assert!(cache.weighted_size() <= 10_000);
        }
        let mut sum = 0;
        cache.for_each(|_, value| sum += value.len() as u64);
        assert_eq!(sum, cache.weighted_size());
        cache.insert(u64::MAX, vec![0; 10_001]);
        assert_eq!(cache.get(&u64::MAX), None);
        assert!(cache.weighted_size() <= 10_000);
    }

    #[test]
    fn time_to_live_and_idle() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let log = told.clone();
        let cache = manual(
            Cache::<u64, u64>::builder()
                .time_to_live(Duration::from_millis(100))
                .eviction_listener(move |key, _, cause| log.lock().unwrap().push((*key, cause))),
        );
        cache.insert(1, 1);
        cache.insert_with_expiry(2, 2, Expiry::idle(Duration::from_millis(30)));
        cache.insert_with_expiry(3, 3, Expiry::NEVER);
        for _ in 0..5 {
            advance(&cache, 20);
            assert_eq!(cache.get(&2), Some(2), "read within its idle time");
        }
        advance(&cache, 30);
        assert_eq!(cache.get(&2), None, "idle for 30 ms");
        assert_eq!(cache.get(&1), None, "lived 130 ms of 100");
        assert!(!cache.contains_key(&1));
        assert_eq!(cache.get(&3), Some(3));
        assert_eq!(
            cache.insert(1, 10),
            None,
            "an expired value is not returned as replaced"
        );
        let mut told = told.lock().unwrap().clone();
        told.sort();
        assert_eq!(
            told,
            [(1, RemovalCause::Expired), (2, RemovalCause::Expired)]
        );
        assert_eq!(cache.stats().expirations, 2);
        advance(&cache, 1000);
        assert_eq!(cache.purge_expired(), 1);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.weighted_size(), 1);
    }

    #[test]
    fn listener_hears_every_cause() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let log = told.clone();
        let cache = Cache::<u64, u64>::builder()
            .max_capacity(4)
            .eviction_listener(move |key, value, cause| {
                log.lock().unwrap().push((*key, *value, cause))
            })
            .build()
            .unwrap();
        cache.insert(1, 1);
        cache.insert(1, 2);
        cache.remove(&1);
        for key in 10..15 {
            cache.insert(key, key);
        }
        cache.clear();
        let told = told.lock().unwrap().clone();
        assert_eq!(
            told[..2],
            [
                (1, 1, RemovalCause::Replaced),
                (1, 2, RemovalCause::Explicit)
            ]
        );
        assert_eq!(
            told[2],
            (10, 10, RemovalCause::Size),
            "the oldest unread key goes"
        );
        let mut rest: Vec<_> = told[3..].to_vec();
        rest.sort();
        assert_eq!(
            rest,
            (11..15)
                .map(|k| (k, k, RemovalCause::Explicit))
                .collect::<Vec<_>>()
        );
        assert!(cache.is_empty());
        assert_eq!(cache.weighted_size(), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn removed_keys_leave_no_queue_behind() {
        let cache = Cache::<u64, u64>::new(u64::MAX);
        for key in 0..N {
            cache.insert(key, key);
            cache.remove(&key);
        }
        assert!(queued_nodes(&cache) <= cache.queues.len() * 66);
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn one_load_per_key() {
        let threads = if cfg!(miri) { 3 } else { 8 };
        let cache = Cache::<u64, u64>::new(100);
        let loads = AtomicUsize::new(0);
        let start = Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    start.wait();
                    let value = cache.get_with(7, || {
                        loads.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(50));
                        49
                    });
                    assert_eq!(value, 49);
                });
            }
        });
        assert_eq!(loads.load(Ordering::Relaxed), 1);
        assert_eq!(cache.stats().loads, 1);
        assert!(cache.flights.iter().all(|f| f.lock().unwrap().is_empty()));
    }

    #[test]
    fn a_failed_load_is_shared_and_a_panicked_one_retried() {
        let cache = Cache::<u64, u64>::new(100);
        let failed: Result<u64, Arc<&str>> = cache.try_get_with(1, || Err("down"));
        assert_eq!(failed, Err(Arc::new("down")));
        assert_eq!(cache.get(&1), None);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.get_with(1, || panic!("loader failed"))
        }));
        assert!(panicked.is_err());
        assert_eq!(cache.get_with(1, || 5), 5);
        assert_eq!(cache.try_get_with::<()>(1, || Ok(6)), Ok(5));
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn many_threads_keep_the_weights_true() {
        let threads = if cfg!(miri) { 2 } else { 4 };
        let capacity = N / 20;
        let cache = Cache::<u64, u64>::new(capacity);
        std::thread::scope(|s| {
            for t in 0..threads {
                let cache = &cache;
                s.spawn(move || {
                    let mut x = t + 1;
                    for _ in 0..N {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let key = x % (capacity * 3);
                        match x >> 60 {
                            0 => {
                                cache.remove(&key);
                            }
                            1..=6 => {
                                cache.insert(key, key);
                            }
                            _ => {
                                if let Some(value) = cache.get(&key) {
                                    assert_eq!(value, key);
                                }
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(cache.weighted_size(), cache.len() as u64);
        assert!(cache.weighted_size() <= capacity);
        cache.map.check_invariants();
    }

    #[test]
    fn is_send_and_sync() {
        fn shared<T: Send + Sync>() {}
        shared::<Cache<String, Vec<u8>>>();
    }

    /// What an entry costs beside its key and value (the memory figure in BENCHMARKS.md,
    /// "floe::Cache"): the marks, the weight and the expiry box's pointer; a node 16 bytes.
    #[test]
    fn slots_and_nodes_stay_small() {
        assert_eq!(size_of::<Slot<Box<[u8]>>>(), 32);
        assert_eq!(size_of::<Slot<u64>>(), 24);
        assert_eq!(size_of::<Node>(), 16);
    }

    #[test]
    fn read_marks_never_touch_the_id() {
        for id in [0, 1, ID_MASK - 1, ID_MASK] {
            let slot = Slot::new((), id, 0, 1, None);
            for reads in 1..=5 {
                slot.touch(0);
                assert_eq!((slot.id(), slot.freq()), (id, reads.min(3)));
            }
            slot.set_freq(1);
            assert_eq!((slot.id(), slot.freq()), (id, 1));
            slot.set_freq(0);
            assert_eq!((slot.id(), slot.freq()), (id, 0));
        }
    }
}
