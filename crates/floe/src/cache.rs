//! [`Cache`]: a bounded concurrent cache on [`Map`], evicting by S3-FIFO.
//!
//! # Design
//!
//! Reading order: [`Slot`] (what one entry holds), [`Cache::get`] (the lock-free read),
//! [`Cache::publish`] (publish, then queue), [`Cache::evict_step`] (the policy), [`Ghosts`] and
//! [`Cache::missed`] (how the policy adapts), [`Cache::get_or_load`] (one loader per key).
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
    any::Any,
    borrow::Borrow,
    fmt,
    hash::{BuildHasher, Hash},
    sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering},
    time::Duration,
};
use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError},
    time::Instant,
};

use crossbeam_utils::CachePadded;

use crate::{
    any_map::{ByHash, Compute, Map, MapRef, Operation},
    error::{Error, OrRaise},
    hash::DefaultHashBuilder,
    raw::ShardedCounter,
};

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

/// Deadline meaning "never" (in the clock's milliseconds).
const NEVER: u64 = u64::MAX;

/// The small queue's share of the queued weight, in millionths: 45% at the start, moved by
/// ghost hits between 1% and 99% (module docs, "The share starts at 45%").
const SHARE_START: u32 = 450_000;
const SHARE_MIN: u32 = 10_000;
const SHARE_MAX: u32 = 990_000;
const PPM: u64 = 1_000_000;
const RUN_PER_DOUBLING: u64 = 16;

/// Queue node ids a thread takes from the shared counter at a time.
const ID_BLOCK: u64 = 1024;

/// Node ids are the counter's low 30 bits (they wrap; module docs, "Queues"); a slot keeps
/// its read count above them.
const ID_BITS: u32 = 30;
const ID_MASK: u32 = (1 << ID_BITS) - 1;

/// Entries a thread retires before the index's collector frees them: every insert into a
/// full cache retires one (the entry evicted), and each batch costs a `membarrier`.
const RECLAIM_BATCH: usize = 512;

/// Ghost slots: one per entry the cache holds at its first eviction (so a full one's), within
/// these bounds (an unbounded cache never makes its ghosts).
const GHOST_SLOTS_MIN: usize = 1 << 12;
const GHOST_SLOTS_MAX: usize = 1 << 24;

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

/// One shard of the S3-FIFO queues.
#[derive(Default)]
struct Queues {
    small: VecDeque<Node>,
    main: VecDeque<Node>,
    small_weight: u64,
    main_weight: u64,
    /// Nodes queued since the last check for stale ones (`Cache::enqueue`).
    queued: u32,
}

impl Queues {
    fn nodes(&self) -> usize {
        self.small.len() + self.main.len()
    }

    fn push(&mut self, small: bool, node: Node) {
        if small {
            self.small_weight += u64::from(node.weight);
            self.small.push_back(node);
        } else {
            self.main_weight += u64::from(node.weight);
            self.main.push_back(node);
        }
    }

    fn pop(&mut self, small: bool) -> Option<Node> {
        let node = if small {
            self.small.pop_front()
        } else {
            self.main.pop_front()
        }?;
        if small {
            self.small_weight -= u64::from(node.weight);
        } else {
            self.main_weight -= u64::from(node.weight);
        }
        Some(node)
    }
}

/// The ghosts: hashes of keys evicted lately, with the queue each left. Direct-mapped, one
/// atomic word a slot, so a read that misses can look without a lock: a newer eviction that
/// lands on a slot replaces the older one (random replacement instead of S3-FIFO's FIFO
/// ghost; with as many slots as the cache has entries, a key is remembered for about a
/// cache's worth of evictions, as S3-FIFO sizes its ghost).
///
/// A slot holds bits 12 to 31 of the hash ([`PRINT_MASK`]), the time of the eviction in
/// ticks of the ghosts' clock (10 bits, [`TIME_MASK`]), and two flags: [`FROM_SMALL`] if the
/// key left the small queue, [`SIGNALLED`] once a read that missed it moved the split (once
/// per stay). The slot's index comes from the hash's top bits (bits 40 to 63 for the largest
/// array), so the 20 bits a slot compares are ones its index did not: another key matches a
/// slot one time in 2^20 (a misplaced key or one step of the split), 4 bytes a slot where
/// the whole hash took 8. Relaxed throughout: a lost, stale or falsely matched slot costs one
/// placement or one step of the split.
///
/// The clock counts evictions; a tick is 2^`tick_shift` of them, so that the 1024 ticks a
/// slot can tell apart span four times the slots, longer than a key is remembered (about
/// once the slots, a direct-mapped array's random replacement). An older slot's time reads
/// modulo that span: a rare survivor may look recent and move the split one step.
struct Ghosts {
    slots: Box<[AtomicU32]>,
    /// Keys remembered so far: the ghosts' clock, in evictions.
    clock: AtomicU64,
    /// A tick of a slot's time is 2^`tick_shift` evictions.
    tick_shift: u32,
    /// Slots holding a key from the small queue, from main (approximate, relaxed).
    from_small: AtomicI64,
    from_main: AtomicI64,
}

const FROM_SMALL: u32 = 1;
const SIGNALLED: u32 = 2;
const FLAGS: u32 = FROM_SMALL | SIGNALLED;
/// A ghost slot's eviction time: [`TIME_BITS`] bits from bit [`TIME_SHIFT`].
const TIME_SHIFT: u32 = 2;
const TIME_BITS: u32 = 10;
const TIME_MASK: u32 = ((1 << TIME_BITS) - 1) << TIME_SHIFT;
/// The bits of a ghost slot that hold a key's hash.
const PRINT_MASK: u32 = !(TIME_MASK | FLAGS);

/// The bits of `hash` a ghost slot compares.
fn ghost_print(hash: u64) -> u32 {
    hash as u32 & PRINT_MASK
}

impl Ghosts {
    fn new(slots: usize) -> Self {
        let slots = slots.next_power_of_two();
        Ghosts {
            slots: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            clock: AtomicU64::new(0),
            // 2^TIME_BITS ticks span four times the slots.
            tick_shift: (slots.ilog2() + 2).saturating_sub(TIME_BITS),
            from_small: AtomicI64::new(0),
            from_main: AtomicI64::new(0),
        }
    }

    fn slot(&self, hash: u64) -> &AtomicU32 {
        // The top bits (bits 40 and up; `ghost_print` compares bits 12 to 31). The shard
        // choice uses some of them too, which only means a shard's keys share its slots.
        &self.slots[(hash.rotate_left(24) as usize) & (self.slots.len() - 1)]
    }

    fn count(&self, slot: u32, by: i64) {
        if slot != 0 {
            let counter = if slot & FROM_SMALL != 0 {
                &self.from_small
            } else {
                &self.from_main
            };
            counter.fetch_add(by, Ordering::Relaxed);
        }
    }

    /// Keys remembered from the small queue (or main), and from the other.
    fn sizes(&self, from_small: bool) -> (u64, u64) {
        let small = self.from_small.load(Ordering::Relaxed).max(0) as u64;
        let main = self.from_main.load(Ordering::Relaxed).max(0) as u64;
        if from_small {
            (small, main)
        } else {
            (main, small)
        }
    }

    fn remember(&self, hash: u64, from_small: bool) {
        let flags = if from_small { FROM_SMALL } else { 0 };
        let tick = (self.clock.fetch_add(1, Ordering::Relaxed) >> self.tick_shift) as u32;
        // (A slot word that comes out 0 reads as empty: its key, fewer than one in 2^20, is
        // forgotten.)
        let slot = ghost_print(hash) | (tick << TIME_SHIFT & TIME_MASK) | flags;
        let old = self.slot(hash).swap(slot, Ordering::Relaxed);
        self.count(old, -1);
        self.count(slot, 1);
    }

    /// A read missed `hash`: if it is a ghost not signalled before, whether it left the
    /// small queue and how many evictions ago (to a tick's precision).
    fn signal(&self, hash: u64) -> Option<(bool, u64)> {
        let slot = self.slot(hash);
        let seen = slot.load(Ordering::Relaxed);
        if seen & PRINT_MASK != ghost_print(hash) || seen == 0 || seen & SIGNALLED != 0 {
            return None;
        }
        let now = (self.clock.load(Ordering::Relaxed) >> self.tick_shift) as u32;
        let then = (seen & TIME_MASK) >> TIME_SHIFT;
        let ticks = now.wrapping_sub(then) & ((1 << TIME_BITS) - 1);
        slot.compare_exchange(seen, seen | SIGNALLED, Ordering::Relaxed, Ordering::Relaxed)
            .ok()
            .map(|_| (seen & FROM_SMALL != 0, u64::from(ticks) << self.tick_shift))
    }

    /// `hash` is queued again: whether it left the small queue lately (it then goes to main).
    fn take(&self, hash: u64) -> bool {
        let slot = self.slot(hash);
        let seen = slot.load(Ordering::Relaxed);
        if seen & PRINT_MASK != ghost_print(hash) || seen == 0 {
            return false;
        }
        let taken = slot
            .compare_exchange(seen, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if taken {
            self.count(seen, -1);
        }
        taken && seen & FROM_SMALL != 0
    }

    fn clear(&self) {
        for slot in self.slots.iter() {
            slot.store(0, Ordering::Relaxed);
        }
        self.from_small.store(0, Ordering::Relaxed);
        self.from_main.store(0, Ordering::Relaxed);
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

/// What a flight of [`Cache::get_with`] came to.
enum Landing<V> {
    Flying,
    Value(V),
    /// The loader's error (an `Arc<E>`, shared by every waiter).
    Failed(Arc<dyn Any + Send + Sync>),
    /// The loader panicked: waiters try again.
    Abandoned,
}

/// One loader's run for one key, waited on by the key's other callers.
struct Flight<V> {
    landing: Mutex<Landing<V>>,
    landed: Condvar,
}

/// The flights of one shard, by key.
type Flights<K, V> = Mutex<HashMap<K, Arc<Flight<V>>>>;

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
        let parallelism = std::thread::available_parallelism().map_or(4, |n| n.get());
        // Enough shards that inserts on different threads rarely meet, few enough that each
        // shard's FIFOs hold hundreds of entries (a policy over tiny queues degrades to random).
        let mut shards = (4 * parallelism).next_power_of_two();
        if self.weigher.is_none() {
            while shards > 1 && (shards as u64) * 256 > self.max_capacity {
                shards /= 2;
            }
        }
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
            queues: (0..shards)
                .map(|_| CachePadded::new(Mutex::default()))
                .collect(),
            ghosts: OnceLock::new(),
            flights: (0..shards).map(|_| Mutex::default()).collect(),
            weight: CachePadded::new(AtomicI64::new(0)),
            max_capacity: self.max_capacity,
            small_share: AtomicU32::new(SHARE_START),
            signal_run: AtomicU64::new(0),
            counters: core::array::from_fn(|_| ShardedCounter::new()),
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
/// the module docs of `cache.rs` for the design and its argument.
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
    queues: Box<[CachePadded<Mutex<Queues>>]>,
    /// Made at the first eviction, one slot per entry the cache then holds.
    ghosts: OnceLock<Ghosts>,
    flights: Box<[Flights<K, V>]>,
    /// Sum of the live entries' weights (signed: see the module docs).
    weight: CachePadded<AtomicI64>,
    max_capacity: u64,
    /// The small queue's target share of the queued weight, in millionths.
    small_share: AtomicU32,
    /// The run of same-way signals so far (`signal_run`): length << 1 | way.
    signal_run: AtomicU64,
    /// Hits, misses and the rest: the map's own sharded counter, so a get counts itself
    /// with a plain store to its thread's shard, not a locked add (six counters of 2 x cores
    /// cache-padded shards and a few more: about 2 KiB a cache on 2 cores, 110 KiB on 64).
    counters: [ShardedCounter; COUNTERS],
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
        let sum = |counter: usize| self.counters[counter].sum() as u64;
        CacheStats {
            hits: sum(HITS),
            misses: sum(MISSES),
            insertions: sum(INSERTIONS),
            evictions: sum(EVICTIONS),
            expirations: sum(EXPIRATIONS),
            loads: sum(LOADS),
        }
    }

    /// The small queue's current share of the queued weight, in millionths (diagnostics).
    pub fn small_queue_share(&self) -> u32 {
        self.small_share.load(Ordering::Relaxed)
    }

    fn count(&self, counter: usize, by: isize) {
        self.counters[counter].add(by);
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

    fn shard_of(&self, hash: u64) -> usize {
        // The top bits: the index's bins come from the byte-swapped hash's, i.e. the low bytes.
        (hash >> 40) as usize & (self.queues.len() - 1)
    }

    fn lock_queues(&self, shard: usize) -> MutexGuard<'_, Queues> {
        // A panic while a shard was locked (a key's `Clone` or `Hash`) leaves it consistent:
        // every push and pop updates the weights with the node.
        self.queues[shard]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Shard `shard`'s queues if no other thread holds them; `None` if one does.
    fn try_lock_queues(&self, shard: usize) -> Option<MutexGuard<'_, Queues>> {
        match self.queues[shard].try_lock() {
            Ok(queues) => Some(queues),
            // As in `lock_queues`.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The queues of shard `first`, or, if another thread holds them, of the next shard no
    /// thread holds (waiting for `first` only if every shard is held). A node may live in any
    /// shard (eviction pops whatever a shard holds and finds the entry by the node's hash and
    /// id; `clear` and `purge_expired` visit every shard), so a thread that meets a held lock
    /// moves on rather than sleeping in the kernel: with 2 threads on 8 shards, the futex
    /// waits of a contended `Mutex` were a tenth of a cache-aside run's time (BENCHMARKS,
    /// "floe::Cache beside moka"). Alone, a thread always gets `first`, so single-threaded
    /// traces (the hit-ratio benchmarks) see exactly the shards they saw before.
    fn lock_some_queues(&self, first: usize) -> MutexGuard<'_, Queues> {
        let shards = self.queues.len();
        (0..shards)
            .find_map(|turn| self.try_lock_queues((first + turn) % shards))
            .unwrap_or_else(|| self.lock_queues(first))
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
        // Before the first eviction there are no ghosts, and no hash to take.
        let Some(ghosts) = self.ghosts.get() else {
            return;
        };
        let Some((from_small, since)) = ghosts.signal(self.hash(key)) else {
            return;
        };
        let entries = (self.map.len() as u64).max(1);
        // A key that left small `since` evictions ago needed small that much larger; past
        // what main holds, no split would have kept it (module docs).
        let share = u64::from(self.small_share.load(Ordering::Relaxed));
        if from_small && since > entries * (PPM - share) / PPM {
            return;
        }
        // ARC's step: one entry's worth of the cache, times the other ghost's size over this
        // one's (a hit in the smaller ghost says more); doubled every `RUN_PER_DOUBLING`
        // signals in a row the same way (a workload that only ever says "larger" gets there
        // in a few hundred misses, one that says both stays near its balance).
        let (this, other) = ghosts.sizes(from_small);
        let run = self.signal_run(from_small);
        let step = (PPM / entries).max(1) * (other / this.max(1)).max(1);
        let step = (step << (run / RUN_PER_DOUBLING).min(20)).min(PPM / 100) as i32;
        self.move_share(if from_small { step } else { -step });
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
            self.evict(map, self.shard_of(hash));
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
        let small = !self.ghosts.get().is_some_and(|ghosts| ghosts.take(hash));
        let mut queues = self.lock_some_queues(self.shard_of(hash));
        queues.push(small, Node { hash, id, weight });
        queues.queued += 1;
        if queues.queued >= 64 {
            queues.queued = 0;
            let live_here = self.map.len() / self.queues.len();
            if queues.nodes() > 2 * live_here + 64 {
                self.sweep_stale(map, &mut queues);
            }
        }
    }

    /// Signals in a row the same way as this one (relaxed: a lost update shortens a run).
    fn signal_run(&self, from_small: bool) -> u64 {
        let way = u64::from(from_small);
        let seen = self.signal_run.load(Ordering::Relaxed);
        let run = if seen & 1 == way { (seen >> 1) + 1 } else { 0 };
        self.signal_run.store(run << 1 | way, Ordering::Relaxed);
        run
    }

    fn move_share(&self, by: i32) {
        let _ = self
            .small_share
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |share| {
                Some(share.saturating_add_signed(by).clamp(SHARE_MIN, SHARE_MAX))
            });
    }

    /// Whether the node names a present entry.
    fn is_live(map: &MapRef<'_, K, Slot<V>, S>, node: &Node) -> bool {
        map.find_by_hash(node.hash, |_, slot| slot.id() == node.id)
            .is_some()
    }

    /// Drop the stale nodes of one shard, keeping the others in order.
    fn sweep_stale(&self, map: &MapRef<'_, K, Slot<V>, S>, queues: &mut Queues) {
        for small in [true, false] {
            let before = if small {
                queues.small.len()
            } else {
                queues.main.len()
            };
            for _ in 0..before {
                let node = queues.pop(small).expect("counted");
                if Self::is_live(map, &node) {
                    queues.push(small, node);
                }
            }
        }
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
                    Some(self.lock_queues(shard))
                } else {
                    self.try_lock_queues(shard)
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
        queues: &mut Queues,
        removed: &mut Removed<'g, K, V>,
    ) -> bool {
        loop {
            let total = queues.small_weight + queues.main_weight;
            let share = u64::from(self.small_share.load(Ordering::Relaxed));
            let from_small = !queues.small.is_empty()
                && (queues.small_weight * PPM >= total * share || queues.main.is_empty());
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
                        self.ghosts
                            .get_or_init(|| {
                                Ghosts::new(self.map.len().clamp(GHOST_SLOTS_MIN, GHOST_SLOTS_MAX))
                            })
                            .remember(node.hash, from_small);
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
        for shard in 0..self.queues.len() {
            let nodes: Vec<Node> = {
                let mut queues = self.lock_queues(shard);
                let queues = core::mem::take(&mut *queues);
                queues.small.into_iter().chain(queues.main).collect()
            };
            for node in nodes {
                self.remove_node(&map, node.hash, node.id, RemovalCause::Explicit, |_| true);
            }
        }
        if let Some(ghosts) = self.ghosts.get() {
            ghosts.clear();
        }
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
                let queues = self.lock_queues(shard);
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
        let loaded: Result<V, Arc<core::convert::Infallible>> =
            self.get_or_load(key, || Ok(load()));
        match loaded {
            Ok(value) => value,
            Err(never) => match *never {},
        }
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
        let shard = self.shard_of(self.hash(&key));
        let mut load = Some(load);
        loop {
            if let Some(value) = self.get(&key) {
                return Ok(value);
            }
            let (flight, leader) = {
                let mut flights = self.flights[shard]
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                match flights.get(&key) {
                    Some(flight) => (flight.clone(), false),
                    None => {
                        let flight = Arc::new(Flight {
                            landing: Mutex::new(Landing::Flying),
                            landed: Condvar::new(),
                        });
                        flights.insert(key.clone(), flight.clone());
                        (flight, true)
                    }
                }
            };
            if !leader {
                let mut landing = flight
                    .landing
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                while matches!(*landing, Landing::Flying) {
                    landing = flight
                        .landed
                        .wait(landing)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
                match &*landing {
                    Landing::Value(value) => return Ok(value.clone()),
                    Landing::Failed(error) => {
                        if let Ok(error) = error.clone().downcast::<E>() {
                            return Err(error);
                        }
                        // A loader of another error type failed: try on our own.
                    }
                    Landing::Abandoned | Landing::Flying => {}
                }
                continue;
            }
            let mut pilot = Pilot {
                flights: &self.flights[shard],
                key: &key,
                flight: &flight,
                landing: Landing::Abandoned,
            };
            // A value inserted between our miss and the flight's registration.
            let map = self.map.pin();
            if let Some(slot) = self.live(&map, &key) {
                let value = slot.value.clone();
                pilot.landing = Landing::Value(value.clone());
                return Ok(value);
            }
            self.count(LOADS, 1);
            let load = load.take().expect("a caller leads one flight at most");
            return match load() {
                Ok(value) => {
                    self.publish(&map, key.clone(), value.clone(), self.expiry);
                    pilot.landing = Landing::Value(value.clone());
                    Ok(value)
                }
                Err(error) => {
                    let error = Arc::new(error);
                    pilot.landing = Landing::Failed(error.clone());
                    Err(error)
                }
            };
        }
    }
}

/// The leader of a flight: lands it when dropped (as abandoned if the loader panicked), and
/// takes it out of the table so that later callers read the cache.
struct Pilot<'a, K: Hash + Eq, V> {
    flights: &'a Flights<K, V>,
    key: &'a K,
    flight: &'a Arc<Flight<V>>,
    landing: Landing<V>,
}

impl<K: Hash + Eq, V> Drop for Pilot<'_, K, V> {
    fn drop(&mut self) {
        // Landed before it leaves the table: a caller that found the flight gets its value,
        // and one that comes after finds the cache filled (or loads again if it failed).
        let landing = core::mem::replace(&mut self.landing, Landing::Abandoned);
        *self
            .flight
            .landing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = landing;
        self.flight.landed.notify_all();
        self.flights
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        cache.queues.iter().map(|q| q.lock().unwrap().nodes()).sum()
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
        let shard = cache.shard_of(cache.hash(&key));
        let before = cache.queues[shard].lock().unwrap().nodes();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let held = cache.lock_queues(shard);
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
            cache.queues[shard].lock().unwrap().nodes(),
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
        let ghosts = Ghosts::new(4096);
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
