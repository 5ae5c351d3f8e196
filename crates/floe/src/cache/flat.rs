//! [`FlatCache`]: a bounded concurrent cache of word-sized keys and values on [`FlatMap`],
//! evicting by the same S3-FIFO as [`Cache`](super::Cache).
//!
//! # Design
//!
//! Reading order: [`FlatCache::get`], [`FlatCache::insert`], [`FlatCache::evict_step`],
//! [`FlatCache::sweep_stale`]. The policy (queues, ghosts, split) is `policy.rs`'s, argued in
//! the module docs of `cache/mod.rs`; this file says only what differs.
//!
//! **Why a second cache.** [`Cache`](super::Cache) keeps each value in an entry of a
//! [`Map`](crate::Map) (a 48-byte allocation beside the index's line for a 16-byte key), with
//! its read count and node id beside it: a hit reads the index's line, then the entry's, under
//! a reclamation guard, and every insert allocates an entry that eviction later retires. For
//! keys and values of a word each (ids, offsets, counters, hashes), a [`FlatMap`] holds both
//! in the index's own line: a hit reads one line and takes no guard, an insert allocates
//! nothing (BENCHMARKS, "floe::Cache beside moka": a prototype ran about 3x `Cache`).
//!
//! **Read counts** cannot live beside the value (the slot holds the value's word and nothing
//! else), so they live in [`ReadCounts`]: one 64-bit word per entry of the capacity, chosen by
//! the key's hash, holding four 16-bit marks of a 14-bit print of the hash and a 2-bit count.
//! A new key takes a free mark in its word (or resets its own), eviction and removal free it,
//! so a word holds the marks of the keys present whose hashes chose it: one on average, more
//! than four for about one word in 270, and then the key with the fewest reads gives up its
//! mark (it reads as unread: a policy slip). A first design shared a bare count between the
//! keys whose hashes met (bytes, four an entry): each key of a scan that met a hot key took
//! its count to main and zeroed it on the way, and 58 of 300 keys read throughout a scan of
//! ten times the cache were evicted (the unit test `read_entries_outlive_a_scan`; none now).
//! A get that hits raises its key's count with one compare-exchange, only while the count is
//! below 3 (hot keys do not keep writing the word); every write of a word is a
//! compare-exchange, so marks are never lost to a racing write of another mark, and a failed
//! one is dropped or retried: counts are hints, never answers.
//!
//! **Nodes are keys.** A queue node is the key's word (8 bytes; the weight of every entry is
//! one). Every present key has at least one node: an insert that finds its key absent queues
//! one, a replace does not (the key keeps its place), and nothing else puts a key in the
//! index. A node whose key was removed is stale; one whose key was removed and inserted again
//! is a duplicate of the newer node. Eviction judges whatever entry the key has now: an unread
//! one is removed (a stale node removes nothing and is dropped), a read one moves on. A
//! duplicate can therefore judge a key early, a policy slip. A sweep of a shard (below) drops
//! the nodes of absent keys and keeps one node of each present key.
//!
//! **The capacity is the queues'.** A key's nodes always go to the shard of its hash (where
//! `Cache` moves on to a free shard, an insert here spins for its own, then sleeps), and each
//! shard may hold its share of the capacity in nodes beyond its *excess*: the nodes it holds
//! that stand for no present key, or for a key that has another node. An explicit removal
//! adds one to its shard's excess (the removed key's node is now stale); dropping a stale node
//! at a queue's head takes one off, and a sweep of the shard (below) drops them all and sets
//! it to 0; an eviction takes a node and its key together and leaves the excess as it was.
//! So a shard's nodes less its excess are the present keys whose hash is its, and an insert
//! that queues a node evicts from that shard, under the lock it holds already, until that is
//! within the shard's share: the entries never outnumber the capacity (but for an insert
//! between its write to the index and its node's queueing), and no count is shared between
//! threads on the insert's path (a shared count of entries, raised by every new key and
//! lowered by every eviction, with the ghosts' shared clock and counts, took about a quarter
//! of the insert path's samples: BENCHMARKS, "A cache on `FlatMap`"). The excess is relaxed:
//! it publishes nothing, and a removal counted a moment late only leaves its shard one place
//! smaller or larger until the insert after. A shard is swept once its excess is more than
//! an eighth of its share and 64, so the queues hold at most that many nodes beyond the
//! capacity, and a sweep's cost (a lookup a node) comes to at most about eight lookups a
//! removal. A shard's share is the capacity over the shards, so a cache whose keys fall
//! unevenly on the shards may evict from one before it holds its whole capacity: filled
//! with exactly its capacity of keys, a cache of 1000 held 900 and more (the unit test
//! `remove_and_insert_again_keeps_the_queues_bounded`); full, it holds the capacity.
//!
//! **Removals are the map's.** Eviction removes a key with the map's `remove`: if a racing
//! insert replaced the value between the judgement and the removal, the new value leaves (an
//! eviction after the insert, which a cache may do at any time); a value inserted after the
//! removal is not touched (it is a new key with a node of its own).
//!
//! Not offered here, and why: expiry and weights (a word-sized value has no size worth
//! weighing, and an expiry would need a deadline beside each value; use `Cache`).

use core::{
    fmt,
    hash::BuildHasher,
    sync::atomic::{AtomicI64, AtomicU64, Ordering},
};
use std::{collections::HashSet, sync::Arc};

use crossbeam_utils::CachePadded;

use super::{
    flight::{self, Flights},
    policy::{Queues, Shards, Split, Weighed},
    CacheStats, Counters, RemovalCause, EVICTIONS, HITS, INSERTIONS, LOADS, MISSES,
};
use crate::{
    error::{Error, OrRaise},
    hash::DefaultHashBuilder,
    inline::{Inline, InlineKey},
    map::FlatMap,
};

/// Read-count words per entry of the capacity (rounded up to a power of two).
const READ_WORDS_PER_ENTRY: u64 = 1;

/// The largest capacity a `FlatCache` takes (its read counts are sized from it).
const MAX_CAPACITY: u64 = 1 << 40;

/// A queue node: the key's word.
struct Keyed(u64);

impl Weighed for Keyed {
    fn weight(&self) -> u32 {
        1
    }
}

type FlatListener<K, V> = Box<dyn Fn(K, V, RemovalCause) + Send + Sync>;

/// Builds a [`FlatCache`]: capacity, listener and hasher.
pub struct FlatCacheBuilder<K, V, S = DefaultHashBuilder> {
    max_capacity: Option<u64>,
    listener: Option<FlatListener<K, V>>,
    hasher: S,
}

impl<K, V, S> FlatCacheBuilder<K, V, S> {
    /// The capacity in entries (required: a `FlatCache` is always bounded).
    pub fn max_capacity(mut self, capacity: u64) -> Self {
        self.max_capacity = Some(capacity);
        self
    }

    /// Called once for every entry that leaves the cache, with why. It runs on the thread that
    /// removed the entry, after the cache released its locks, so it may use the cache; it
    /// should be quick (an insert that evicts waits for it).
    pub fn eviction_listener(
        mut self,
        listener: impl Fn(K, V, RemovalCause) + Send + Sync + 'static,
    ) -> Self {
        self.listener = Some(Box::new(listener));
        self
    }

    /// Hash keys with `hasher` (for keys an adversary chooses, a keyed one: see
    /// [`hash`](crate::hash)).
    pub fn hasher<S2>(self, hasher: S2) -> FlatCacheBuilder<K, V, S2> {
        FlatCacheBuilder {
            max_capacity: self.max_capacity,
            listener: self.listener,
            hasher,
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> FlatCacheBuilder<K, V, S> {
    /// The cache.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] without a capacity, or with one of 0 or above 2^40;
    /// [`Error::AllocationFailed`] if the operating system refuses the index's table.
    pub fn build(self) -> Result<FlatCache<K, V, S>, Error> {
        let capacity = self.max_capacity.ok_or(Error::InvalidConfig(
            "a FlatCache needs a max_capacity (it is always bounded)",
        ))?;
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(Error::InvalidConfig(
                "a FlatCache's max_capacity is from 1 to 2^40 entries",
            ));
        }
        // Sized for the capacity, so that a full cache's index does not grow (a thread's
        // worth of entries over the capacity, for a moment, fits its bins' slack). The default
        // layout: its get took 170 instructions a hit through the cache where the dense
        // layout's took 217 (callgrind, `op_instructions flat-cache-get`), and a full cache's
        // insert about 1050 on either (the default layout refreshes its table under the churn,
        // about 120 of them; the dense one displaces keys at its full load). More room in the
        // index (1.5x, 2x) saved at most 85.
        let map = FlatMap::<K, V>::builder()
            .hasher(self.hasher)
            .capacity(usize::try_from(capacity).map_err(|_| Error::CapacityOverflow)?)
            .build()?;
        let reads = ReadCounts::new(capacity * READ_WORDS_PER_ENTRY)?;
        let queues = Shards::new(Some(capacity));
        let shards = queues.len();
        Ok(FlatCache {
            map,
            reads,
            queues,
            split: Split::new(shards),
            flights: (0..shards).map(|_| Default::default()).collect(),
            max_capacity: capacity,
            excess: (0..shards)
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
            counters: Counters::new(),
            listener: self.listener,
        })
    }
}

/// A bounded concurrent cache of keys and values of a word each (anything [`FlatMap`]
/// holds), evicting by S3-FIFO with an adaptive split, as [`Cache`](super::Cache) does.
///
/// Both live in the index's line: a hit reads that line and nothing else, takes no guard
/// and no lock; an insert allocates nothing. Inserts of new keys take one shard's lock to
/// queue the key. What it does not do that `Cache` does: expiry and weights. See the module
/// docs of `cache/flat.rs` for the design.
///
/// ```
/// let cache = floe::FlatCache::<u64, u64>::new(10_000);
/// assert_eq!(cache.insert(7, 70), None);
/// assert_eq!(cache.insert(7, 71), Some(70));
/// assert_eq!(cache.get(&7), Some(71));
/// // One loader per key: other threads asking for 8 now wait for this one.
/// assert_eq!(cache.get_with(8, || 80), 80);
/// assert_eq!(cache.stats().hits, 1);
/// ```
pub struct FlatCache<K, V, S = DefaultHashBuilder> {
    map: FlatMap<K, V, S>,
    /// Reads since the last pass through a queue's head, at most 3, by the key's hash.
    reads: ReadCounts,
    queues: Shards<Keyed>,
    split: Split,
    /// One loader per key, by the key's word.
    flights: Box<[Flights<u64, V>]>,
    max_capacity: u64,
    /// Each shard's excess: nodes that stand for no present key of theirs (module docs).
    excess: Box<[CachePadded<AtomicI64>]>,
    counters: Counters,
    listener: Option<FlatListener<K, V>>,
}

impl<K, V, S> fmt::Debug for FlatCache<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlatCache")
            .field("max_capacity", &self.max_capacity)
            .finish_non_exhaustive()
    }
}

impl<K: InlineKey, V: Inline> FlatCache<K, V> {
    /// A cache of at most `max_capacity` entries, with the default hasher.
    ///
    /// # Panics
    /// If `max_capacity` is 0 or above 2^40, or the operating system refuses the index's
    /// table; [`builder`](Self::builder)'s `build` returns the error instead.
    #[track_caller]
    pub fn new(max_capacity: u64) -> Self {
        Self::builder()
            .max_capacity(max_capacity)
            .build()
            .or_raise()
    }

    /// A builder for a cache with settings of its own.
    pub fn builder() -> FlatCacheBuilder<K, V> {
        FlatCacheBuilder {
            max_capacity: None,
            listener: None,
            hasher: DefaultHashBuilder::default(),
        }
    }
}

/// What eviction took out, reported to the listener once the shard's lock is released.
type Removed<K, V> = Vec<(K, V)>;

impl<K, V, S> FlatCache<K, V, S> {
    /// The capacity it was built with.
    pub fn max_capacity(&self) -> u64 {
        self.max_capacity
    }

    /// What the cache did since it was built (`expirations` is always 0).
    pub fn stats(&self) -> CacheStats {
        self.counters.stats()
    }

    /// The small queue's current share of the queued entries, in millionths (diagnostics).
    pub fn small_queue_share(&self) -> u32 {
        self.split.share()
    }

    fn count(&self, counter: usize, by: isize) {
        self.counters.add(counter, by);
    }

    /// Nodes shard `shard` may hold: its share of the capacity (the shares sum to it; the
    /// shards are a power of two in number, so no division).
    fn shard_capacity(&self, shard: usize) -> i64 {
        let shards = self.queues.len();
        let (base, rest) = (
            self.max_capacity >> shards.trailing_zeros(),
            self.max_capacity & (shards as u64 - 1),
        );
        // At most 2^40 (`build`).
        (base + u64::from((shard as u64) < rest)) as i64
    }
}

/// The keys' read counts (module docs, "Read counts"): words of four 16-bit marks, each a
/// 14-bit print of a key's hash (never 0; 0 is a free mark) above a 2-bit count.
///
/// Relaxed throughout: the counts are hints that publish nothing, and each word changes only
/// by compare-exchange, so a write never undoes another mark's.
struct ReadCounts {
    words: Box<[AtomicU64]>,
}

const MARK_BITS: u32 = 16;
const MARK_MASK: u64 = 0xffff;
const COUNT_MASK: u64 = 0b11;

impl ReadCounts {
    fn new(words: u64) -> Result<Self, Error> {
        let words =
            usize::try_from(words.next_power_of_two()).map_err(|_| Error::CapacityOverflow)?;
        let mut all = Vec::new();
        all.try_reserve_exact(words)
            .map_err(|_| Error::AllocationFailed { bytes: words * 8 })?;
        all.resize_with(words, || AtomicU64::new(0));
        Ok(ReadCounts {
            words: all.into_boxed_slice(),
        })
    }

    /// The word of `hash` (bits 16 and up; the shard takes bits 40 and up, the ghosts' slots
    /// 40 and up and their prints 12 to 31: sharing them only makes some keys meet more),
    /// and the key's mark with a count of 0 (the hash's low 14 bits above the count's two,
    /// never 0).
    fn locate(&self, hash: u64) -> (&AtomicU64, u64) {
        let word = &self.words[(hash >> 16) as usize & (self.words.len() - 1)];
        let print = (hash << 2 & MARK_MASK & !COUNT_MASK).max(1 << 2);
        (word, print)
    }

    /// The shift of the mark with `print` in `word`, if it has one: the lowest 16-bit lane
    /// whose print bits equal `print` (a lane of `x` is zero exactly there; the borrow trick
    /// may flag lanes above a zero lane too, never below one, so the lowest flag is exact).
    fn find(word: u64, print: u64) -> Option<u32> {
        const LANES: u64 = 0x0001_0001_0001_0001;
        let x = (word & !(COUNT_MASK * LANES)) ^ (print * LANES);
        let zero = x.wrapping_sub(LANES) & !x & (0x8000 * LANES);
        (zero != 0).then(|| zero.trailing_zeros() + 1 - MARK_BITS)
    }

    /// The key of `hash` is new: its mark, with a count of 0, in its word: its own if the
    /// word has one (a key removed and inserted again), else a free one, else the one with
    /// the fewest reads.
    fn claim(&self, hash: u64) {
        let (word, print) = self.locate(hash);
        let mut seen = word.load(Ordering::Relaxed);
        loop {
            let shift = Self::find(seen, print).unwrap_or_else(|| {
                (0..4)
                    .map(|i| i * MARK_BITS)
                    .min_by_key(|&shift| {
                        let mark = (seen >> shift) & MARK_MASK;
                        // A free mark first, then the fewest reads.
                        if mark == 0 {
                            0
                        } else {
                            1 + (mark & COUNT_MASK)
                        }
                    })
                    .expect("four marks")
            });
            let new = seen & !(MARK_MASK << shift) | print << shift;
            match word.compare_exchange_weak(seen, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// Count a read of the key of `hash` (one attempt: a lost read costs an entry at most one
    /// pass through a queue).
    fn touch(&self, hash: u64) {
        let (word, print) = self.locate(hash);
        let seen = word.load(Ordering::Relaxed);
        if let Some(shift) = Self::find(seen, print) {
            if (seen >> shift) & COUNT_MASK < 3 {
                let _ = word.compare_exchange(
                    seen,
                    seen + (1 << shift),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Reads counted for the key of `hash` (0 if it has no mark).
    fn count(&self, hash: u64) -> u64 {
        let (word, print) = self.locate(hash);
        let seen = word.load(Ordering::Relaxed);
        Self::find(seen, print).map_or(0, |shift| (seen >> shift) & COUNT_MASK)
    }

    /// Set the count of the key of `hash` (if it has a mark); with `None`, free its mark.
    fn set(&self, hash: u64, count: Option<u64>) {
        let (word, print) = self.locate(hash);
        let mut seen = word.load(Ordering::Relaxed);
        while let Some(shift) = Self::find(seen, print) {
            let mark = count.map_or(0, |count| print | count);
            let new = seen & !(MARK_MASK << shift) | mark << shift;
            match word.compare_exchange_weak(seen, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> FlatCache<K, V, S> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value of `key`, if present; marks it read.
    pub fn get(&self, key: &K) -> Option<V> {
        let (hash, word) = self.map.locate(*key);
        match self.map.get_at(hash, word) {
            Some(value) => {
                self.count(HITS, 1);
                self.reads.touch(hash);
                Some(value)
            }
            None => {
                self.count(MISSES, 1);
                self.split.missed(|| hash, || self.map.len() as u64);
                None
            }
        }
    }

    /// Whether `key` is present (does not count as a read).
    pub fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Insert `key`, replacing (and returning) its value if present. A replace counts as a
    /// read and keeps the key's place in its queue.
    ///
    /// An insert the index refuses (a hasher that puts more keys on nearly one hash than a
    /// bin holds: [`Error::HashCollisions`]) keeps nothing, as if the key were evicted at once.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        let (hash, word) = self.map.locate(key);
        match self.map.upsert_at(hash, word, value) {
            Ok(Some(old)) => {
                self.reads.touch(hash);
                if let Some(listener) = &self.listener {
                    listener(key, old, RemovalCause::Replaced);
                }
                Some(old)
            }
            Ok(None) => {
                self.count(INSERTIONS, 1);
                self.reads.claim(hash);
                self.enqueue(hash, word);
                None
            }
            Err(_) => None,
        }
    }

    /// Queue a new key's node (main if its key left the small queue lately) and evict from
    /// its shard while the shard holds more than its share; sweeps the shard now and then if
    /// removals may have left stale nodes there (module docs).
    fn enqueue(&self, hash: u64, word: u64) {
        let small = self.split.queue_small(hash);
        let shard = self.queues.shard_of(hash);
        let mut queues = self.queues.lock_spinning(shard);
        queues.push(small, Keyed(word));
        let excess = &self.excess[shard];
        let capacity = self.shard_capacity(shard);
        if excess.load(Ordering::Relaxed) > capacity / 8 + 64 {
            self.sweep_stale(&mut queues);
            // Exact once swept (a removal racing with the sweep may be counted or not: it
            // only leaves the shard one place smaller until the next sweep or drop).
            excess.store(0, Ordering::Relaxed);
        }
        let mut removed = Vec::new();
        while queues.nodes() as i64 - excess.load(Ordering::Relaxed) > capacity
            && self.evict_step(&mut queues, excess, &mut removed)
        {}
        drop(queues);
        self.report(removed, RemovalCause::Size);
    }

    /// Drop the nodes of absent keys and all but one node of each present key, keeping the
    /// others in order.
    fn sweep_stale(&self, queues: &mut Queues<Keyed>) {
        let mut seen = HashSet::with_capacity(queues.nodes());
        queues.retain(|node| {
            let (hash, word) = self.map.locate(K::from_word(node.0));
            seen.insert(word) && self.map.get_at(hash, word).is_some()
        });
    }

    /// One S3-FIFO step on a shard: evict an unread entry or free a stale node, moving read
    /// entries on meanwhile. `false` when the shard is empty.
    fn evict_step(
        &self,
        queues: &mut Queues<Keyed>,
        excess: &AtomicI64,
        removed: &mut Removed<K, V>,
    ) -> bool {
        loop {
            let from_small = self.split.evict_from_small(queues);
            let Some(node) = queues.pop(from_small) else {
                return false;
            };
            let (hash, word) = self.map.locate(K::from_word(node.0));
            let count = self.reads.count(hash);
            if count > 0 {
                // Read since it was queued (a replace counts as a read): it moves on, with one
                // read fewer counted (all of them leaving small).
                self.reads
                    .set(hash, Some(if from_small { 0 } else { count - 1 }));
                queues.push(false, node);
                continue;
            }
            // Unread: it leaves. A stale node (its key gone already) removes nothing, and is
            // one node of the shard's excess fewer.
            match self.map.remove_at(hash, word) {
                Some(value) => {
                    self.reads.set(hash, None);
                    self.count(EVICTIONS, 1);
                    self.split
                        .remember(queues, hash, from_small, || self.map.len());
                    if self.listener.is_some() {
                        removed.push((K::from_word(word), value));
                    }
                }
                None => {
                    excess.fetch_sub(1, Ordering::Relaxed);
                }
            }
            return true;
        }
    }

    fn report(&self, removed: Removed<K, V>, cause: RemovalCause) {
        if let Some(listener) = &self.listener {
            for (key, value) in removed {
                listener(key, value, cause);
            }
        }
    }

    /// Remove `key`; returns its value.
    pub fn remove(&self, key: &K) -> Option<V> {
        let (hash, word) = self.map.locate(*key);
        let gone = self.map.remove_at(hash, word)?;
        self.excess[self.queues.shard_of(hash)].fetch_add(1, Ordering::Relaxed);
        self.reads.set(hash, None);
        if let Some(listener) = &self.listener {
            listener(*key, gone, RemovalCause::Explicit);
        }
        Some(gone)
    }

    /// Remove every entry (each reported to the listener as removed explicitly). Entries
    /// inserted while it runs may stay.
    pub fn clear(&self) {
        let mut removed = Vec::new();
        for node in self.queues.take_all() {
            let (hash, word) = self.map.locate(K::from_word(node.0));
            if let Some(value) = self.map.remove_at(hash, word) {
                self.reads.set(hash, None);
                removed.push((K::from_word(word), value));
            }
        }
        for excess in self.excess.iter() {
            excess.store(0, Ordering::Relaxed);
        }
        self.split.forget();
        self.report(removed, RemovalCause::Explicit);
    }

    /// Visit every entry (not counted as reads). Entries written meanwhile may or may not be
    /// seen, as in [`FlatMap::for_each`].
    pub fn for_each(&self, visit: impl FnMut(K, V)) {
        self.map.for_each(visit);
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
        let (hash, word) = self.map.locate(key);
        let flights = &self.flights[self.queues.shard_of(hash)];
        flight::load_once(
            flights,
            &word,
            || self.get(&key),
            || {
                // A value inserted between our miss and the flight's registration.
                if let Some(value) = self.map.get_at(hash, word) {
                    self.reads.touch(hash);
                    return Ok(value);
                }
                self.count(LOADS, 1);
                let value = load()?;
                self.insert(key, value);
                Ok(value)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{
        atomic::{AtomicUsize, Ordering::Relaxed},
        Barrier,
    };

    /// Scaled down under Miri.
    const N: u64 = if cfg!(miri) { 200 } else { 20_000 };

    fn queued_nodes<K, V, S>(cache: &FlatCache<K, V, S>) -> usize {
        (0..cache.queues.len())
            .map(|shard| cache.queues.lock(shard).nodes())
            .sum()
    }

    #[test]
    fn std_semantics() {
        let cache = FlatCache::<u64, u64>::new(100);
        assert_eq!(cache.insert(1, 10), None);
        assert_eq!(cache.insert(1, 11), Some(10));
        assert_eq!(cache.get(&1), Some(11));
        assert!(cache.contains_key(&1));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.remove(&1), Some(11));
        assert_eq!(cache.remove(&1), None);
        assert_eq!(cache.get(&1), None);
        assert!(cache.is_empty());
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.insertions), (1, 1, 1));
    }

    #[test]
    fn marks_are_found_as_a_lane_by_lane_search_finds_them() {
        // The word-at-once search against one lane at a time, on words of random marks and
        // on words made to hold the print sought in a chosen lane (with and without others).
        let by_lanes = |word: u64, print: u64| {
            (0..4)
                .map(|i| i * MARK_BITS)
                .find(|&shift| (word >> shift) & MARK_MASK & !COUNT_MASK == print)
        };
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..if cfg!(miri) { 1000 } else { 200_000 } {
            let word = next();
            let print = (next() & MARK_MASK & !COUNT_MASK).max(1 << 2);
            assert_eq!(ReadCounts::find(word, print), by_lanes(word, print));
            let lane = (next() % 4) as u32 * MARK_BITS;
            let count = next() & COUNT_MASK;
            let planted = word & !(MARK_MASK << lane) | (print | count) << lane;
            assert_eq!(ReadCounts::find(planted, print), by_lanes(planted, print));
            assert!(ReadCounts::find(planted, print).is_some());
        }
    }

    #[test]
    fn read_counts_claim_count_and_free() {
        let reads = ReadCounts::new(1).unwrap();
        // Five keys on one word of four marks: the fifth takes the mark with the fewest reads.
        let hashes: Vec<u64> = (1..=5).map(|i| i << 2).collect();
        for &hash in &hashes[..4] {
            reads.claim(hash);
            assert_eq!(reads.count(hash), 0);
        }
        for (i, &hash) in hashes[..4].iter().enumerate() {
            for _ in 0..=i {
                reads.touch(hash);
            }
        }
        assert_eq!(
            hashes[..4]
                .iter()
                .map(|&h| reads.count(h))
                .collect::<Vec<_>>(),
            [1, 2, 3, 3],
            "counts stop at 3"
        );
        reads.claim(hashes[4]);
        assert_eq!(reads.count(hashes[0]), 0, "the least read gave up its mark");
        assert_eq!(reads.count(hashes[4]), 0);
        reads.touch(hashes[4]);
        assert_eq!(reads.count(hashes[4]), 1);
        reads.set(hashes[1], Some(0));
        assert_eq!(reads.count(hashes[1]), 0);
        reads.set(hashes[2], None);
        assert_eq!(reads.count(hashes[2]), 0);
        // The freed mark is taken before any held one.
        reads.claim(hashes[0]);
        assert_eq!(reads.count(hashes[3]), 3);
        assert_eq!(reads.count(hashes[4]), 1);
    }

    #[test]
    fn is_send_and_sync() {
        fn shared<T: Send + Sync>() {}
        shared::<FlatCache<u64, u64>>();
        shared::<FlatCache<i32, char, std::collections::hash_map::RandomState>>();
    }

    #[test]
    fn bad_capacities_are_refused() {
        for capacity in [None, Some(0), Some(MAX_CAPACITY + 1), Some(u64::MAX)] {
            let mut builder = FlatCache::<u64, u64>::builder();
            if let Some(capacity) = capacity {
                builder = builder.max_capacity(capacity);
            }
            assert!(
                matches!(builder.build(), Err(Error::InvalidConfig(_))),
                "{capacity:?}"
            );
        }
    }

    #[test]
    fn capacity_holds_and_replaces_do_not_queue_twice() {
        let capacity = N / 20;
        let cache = FlatCache::<u64, u64>::new(capacity);
        for key in 0..N {
            cache.insert(key, key);
            assert!(cache.len() as u64 <= capacity);
            // A replace keeps the key's one node.
            cache.insert(key, key + 1);
        }
        assert_eq!(cache.len() as u64, capacity);
        assert_eq!(cache.stats().evictions, N - capacity);
        assert_eq!(queued_nodes(&cache) as u64, capacity);
        cache.for_each(|key, value| assert_eq!(value, key + 1));
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn read_entries_outlive_a_scan() {
        let cache = FlatCache::<u64, u64>::new(1000);
        let hot = 0..300u64;
        for key in hot.clone() {
            cache.insert(key, key);
        }
        for _ in 0..2 {
            for key in hot.clone() {
                assert_eq!(cache.get(&key), Some(key));
            }
        }
        // A scan of ten times the cache, each key once.
        for key in 10_000..20_000 {
            cache.insert(key, key);
            for hot_key in (key % 300..300).step_by(150) {
                cache.get(&hot_key);
            }
        }
        let kept = hot.filter(|key| cache.contains_key(key)).count();
        assert!(
            kept >= 290,
            "only {kept} of 300 read keys outlived the scan"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn remove_and_insert_again_keeps_the_queues_bounded() {
        let cache = FlatCache::<u64, u64>::new(1000);
        for key in 0..1000 {
            cache.insert(key, key);
        }
        // (Each shard holds its share: a shard whose keys came to more than its share
        // evicted some.)
        let filled = cache.len();
        assert!(filled > 900, "{filled}");
        // Each round leaves a stale node, counted in its shard's excess: no entry is evicted
        // for it, and a sweep drops them once a shard's excess is above an eighth of its
        // share and 64.
        for round in 0..N {
            let key = round % 10;
            cache.remove(&key);
            cache.insert(key, round);
            cache.get(&key);
            let shards = cache.queues.len();
            assert!(queued_nodes(&cache) <= 1000 + shards * (1000 / shards / 8 + 65));
            assert_eq!(cache.len(), filled, "after {round} rounds");
        }
        // Every present key still has a node: a full cache evicts as it should.
        for key in 100_000..100_000 + 2 * 1000 {
            cache.insert(key, key);
        }
        assert_eq!(cache.len(), 1000);
        assert!((0..1000).all(|key| !cache.contains_key(&key) || key < 10));
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of map operations: minutes under Miri")]
    fn ghosts_send_returning_keys_to_main_and_the_split_moves() {
        let cache = FlatCache::<u64, u64>::new(1024);
        let start = cache.small_queue_share();
        // A session store's pattern: keys written, read once a while later, after the small
        // queue let them go: the misses on them must grow the small queue.
        for key in 0..N {
            cache.insert(key, key);
            if key >= 900 {
                cache.get(&(key - 900));
            }
        }
        assert!(
            cache.small_queue_share() > start,
            "the split did not move toward small ({} from {start})",
            cache.small_queue_share()
        );
    }

    #[test]
    fn listener_hears_every_removal_once() {
        let heard = Arc::new(AtomicUsize::new(0));
        let replaced = Arc::new(AtomicUsize::new(0));
        let (h, r) = (heard.clone(), replaced.clone());
        let cache = FlatCache::<u64, u64>::builder()
            .max_capacity(100)
            .eviction_listener(move |key, value, cause| {
                h.fetch_add(1, Relaxed);
                if cause == RemovalCause::Replaced {
                    assert_eq!(value, key);
                    r.fetch_add(1, Relaxed);
                }
            })
            .build()
            .unwrap();
        // (Fewer keys under Miri: each insert into a full cache is thousands of its steps.)
        let keys = if cfg!(miri) { 200 } else { 1000 };
        for key in 0..keys {
            cache.insert(key, key);
        }
        cache.insert(keys - 1, 0);
        cache.remove(&(keys - 2));
        cache.clear();
        assert!(cache.is_empty());
        // All but 100 evicted, one replaced, one removed, 99 cleared.
        assert_eq!(heard.load(Relaxed) as u64, keys - 100 + 1 + 1 + 99);
        assert_eq!(replaced.load(Relaxed), 1);
    }

    #[test]
    fn one_loader_per_key() {
        let cache = FlatCache::<u64, u64>::new(1000);
        let loads = AtomicUsize::new(0);
        let threads = if cfg!(miri) { 2 } else { 8 };
        let start = Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    start.wait();
                    let value = cache.get_with(5, || {
                        loads.fetch_add(1, Relaxed);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        50
                    });
                    assert_eq!(value, 50);
                });
            }
        });
        assert_eq!(loads.load(Relaxed), 1);
        assert_eq!(cache.stats().loads, 1);
        let failed = cache.try_get_with(6, || Err::<u64, _>("down"));
        assert_eq!(failed.map_err(|e| *e), Err("down"));
        assert!(!cache.contains_key(&6));
    }

    #[test]
    fn many_threads_stay_within_capacity_and_answer_what_was_stored() {
        let cache = FlatCache::<u64, u64>::new(512);
        let threads = if cfg!(miri) { 2 } else { 4 };
        std::thread::scope(|s| {
            for t in 0..threads {
                let cache = &cache;
                s.spawn(move || {
                    for i in 0..N {
                        let key = (i * 7 + t) % 2048;
                        match cache.get(&key) {
                            Some(value) => assert_eq!(value, key * 3),
                            None => {
                                cache.insert(key, key * 3);
                            }
                        }
                        if i % 97 == 0 {
                            cache.remove(&((key + 1) % 2048));
                        }
                    }
                });
            }
        });
        assert!(cache.len() <= 512, "{} entries held", cache.len());
        let shards = cache.queues.len();
        assert!(queued_nodes(&cache) <= 512 + shards * (512 / shards / 8 + 65));
        cache.for_each(|key, value| assert_eq!(value, key * 3));
    }
}
