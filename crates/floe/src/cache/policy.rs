//! The eviction policy both caches run ([`Cache`](super::Cache) and
//! [`FlatCache`](super::FlatCache)): S3-FIFO's two queues, sharded by key hash ([`Shards`],
//! [`Queues`]), the ghosts of keys evicted lately ([`Ghosts`]), and the split between the queues
//! that read misses move ([`Split`]). The argument for each is in the module docs of
//! `cache/mod.rs`; what differs between the two caches is only how a queue node names its
//! entry and where an entry keeps its read count.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard, OnceLock, TryLockError},
};

use crossbeam_utils::CachePadded;

use crate::raw::ShardedCounter;

/// The small queue's share of the queued weight, in millionths: 45% at the start, moved by
/// ghost hits between 1% and 99% (module docs, "The share starts at 45%").
pub(super) const SHARE_START: u32 = 450_000;
pub(super) const SHARE_MIN: u32 = 10_000;
pub(super) const SHARE_MAX: u32 = 990_000;
pub(super) const PPM: u64 = 1_000_000;
pub(super) const RUN_PER_DOUBLING: u64 = 16;

/// Ghost slots: one per entry the cache holds at its first eviction (so a full one's), within
/// these bounds (an unbounded cache never makes its ghosts).
pub(super) const GHOST_SLOTS_MIN: usize = 1 << 12;
pub(super) const GHOST_SLOTS_MAX: usize = 1 << 24;

/// A queue node's weight (what it adds to its queue's share).
pub(super) trait Weighed {
    fn weight(&self) -> u32;
}

/// One shard of the S3-FIFO queues, of nodes `N` (each cache names its entries its own way).
pub(super) struct Queues<N> {
    pub(super) small: VecDeque<N>,
    pub(super) main: VecDeque<N>,
    pub(super) small_weight: u64,
    pub(super) main_weight: u64,
    /// Nodes queued since the last check for stale ones (`enqueued`).
    queued: u32,
    /// Evictions since this shard last advanced the ghosts' clock (`Split::remember`).
    evicted: u32,
}

impl<N> Default for Queues<N> {
    fn default() -> Self {
        Queues {
            small: VecDeque::new(),
            main: VecDeque::new(),
            small_weight: 0,
            main_weight: 0,
            queued: 0,
            evicted: 0,
        }
    }
}

impl<N: Weighed> Queues<N> {
    pub(super) fn nodes(&self) -> usize {
        self.small.len() + self.main.len()
    }

    /// Count one node queued; `true` once every 64, when the caller checks the shard for
    /// stale nodes.
    pub(super) fn enqueued(&mut self) -> bool {
        self.queued += 1;
        if self.queued < 64 {
            return false;
        }
        self.queued = 0;
        true
    }

    pub(super) fn push(&mut self, small: bool, node: N) {
        if small {
            self.small_weight += u64::from(node.weight());
            self.small.push_back(node);
        } else {
            self.main_weight += u64::from(node.weight());
            self.main.push_back(node);
        }
    }

    /// Keep only the nodes `keep` says to, in their order (a sweep of stale nodes; returns how
    /// many were dropped).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&N) -> bool) -> usize {
        let before = self.nodes();
        for small in [true, false] {
            let queued = if small {
                self.small.len()
            } else {
                self.main.len()
            };
            for _ in 0..queued {
                let node = self.pop(small).expect("counted");
                if keep(&node) {
                    self.push(small, node);
                }
            }
        }
        before - self.nodes()
    }

    pub(super) fn pop(&mut self, small: bool) -> Option<N> {
        let node = if small {
            self.small.pop_front()
        } else {
            self.main.pop_front()
        }?;
        if small {
            self.small_weight -= u64::from(node.weight());
        } else {
            self.main_weight -= u64::from(node.weight());
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
/// modulo that span: a rare survivor may look recent and move the split one step. The clock
/// is advanced by each queue shard in batches ([`Split::remember`]), and the two counts of
/// remembered keys are sharded by thread: with every eviction adding to shared atomics, two
/// threads filling a cache spent a quarter of their inserts' time waiting for those lines
/// (BENCHMARKS, "A cache on `FlatMap`").
pub(super) struct Ghosts {
    slots: Box<[AtomicU32]>,
    /// Keys remembered so far: the ghosts' clock, in evictions.
    pub(super) clock: AtomicU64,
    /// A tick of a slot's time is 2^`tick_shift` evictions.
    pub(super) tick_shift: u32,
    /// Evictions a queue shard counts before it advances the clock (`Split::remember`): at
    /// most a tick's worth across all shards, so the clock lags the evictions by less than
    /// one tick, its resolution anyway.
    clock_batch: u32,
    /// Slots holding a key from the small queue, from main (approximate, relaxed).
    from_small: ShardedCounter,
    from_main: ShardedCounter,
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
    /// Ghosts of `slots` slots for a cache of `shards` queue shards.
    pub(super) fn new(slots: usize, shards: usize) -> Self {
        let slots = slots.next_power_of_two();
        // 2^TIME_BITS ticks span four times the slots.
        let tick_shift = (slots.ilog2() + 2).saturating_sub(TIME_BITS);
        Ghosts {
            slots: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            clock: AtomicU64::new(0),
            tick_shift,
            clock_batch: ((1u64 << tick_shift) / shards.max(1) as u64).clamp(1, 1 << 16) as u32,
            from_small: ShardedCounter::new(),
            from_main: ShardedCounter::new(),
        }
    }

    fn slot(&self, hash: u64) -> &AtomicU32 {
        // The top bits (bits 40 and up; `ghost_print` compares bits 12 to 31). The shard
        // choice uses some of them too, which only means a shard's keys share its slots.
        &self.slots[(hash.rotate_left(24) as usize) & (self.slots.len() - 1)]
    }

    fn count(&self, slot: u32, by: isize) {
        if slot != 0 {
            let counter = if slot & FROM_SMALL != 0 {
                &self.from_small
            } else {
                &self.from_main
            };
            counter.add(by);
        }
    }

    /// Keys remembered from the small queue (or main), and from the other.
    pub(super) fn sizes(&self, from_small: bool) -> (u64, u64) {
        let small = self.from_small.sum() as u64;
        let main = self.from_main.sum() as u64;
        if from_small {
            (small, main)
        } else {
            (main, small)
        }
    }

    /// Advance the clock by `evictions`.
    pub(super) fn advance(&self, evictions: u64) {
        self.clock.fetch_add(evictions, Ordering::Relaxed);
    }

    /// Remember the key of `hash`, evicted from the small queue (or main) now.
    pub(super) fn remember(&self, hash: u64, from_small: bool) {
        let flags = if from_small { FROM_SMALL } else { 0 };
        let tick = (self.clock.load(Ordering::Relaxed) >> self.tick_shift) as u32;
        // (A slot word that comes out 0 reads as empty: its key, fewer than one in 2^20, is
        // forgotten.)
        let slot = ghost_print(hash) | (tick << TIME_SHIFT & TIME_MASK) | flags;
        let old = self.slot(hash).swap(slot, Ordering::Relaxed);
        self.count(old, -1);
        self.count(slot, 1);
    }

    /// A read missed `hash`: if it is a ghost not signalled before, whether it left the
    /// small queue and how many evictions ago (to a tick's precision).
    pub(super) fn signal(&self, hash: u64) -> Option<(bool, u64)> {
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
    pub(super) fn take(&self, hash: u64) -> bool {
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

    pub(super) fn clear(&self) {
        for slot in self.slots.iter() {
            slot.store(0, Ordering::Relaxed);
        }
        // (Racing evictions may leave a few counted: the counts are approximate anyway.)
        self.from_small.add(-(self.from_small.sum() as isize));
        self.from_main.add(-(self.from_main.sum() as isize));
    }
}

/// The queues' shards, each behind a mutex taken only by inserts of new keys and by eviction.
pub(super) struct Shards<N> {
    shards: Box<[CachePadded<Mutex<Queues<N>>>]>,
}

impl<N: Weighed> Shards<N> {
    /// Enough shards that inserts on different threads rarely meet, few enough that each
    /// shard's FIFOs hold hundreds of entries (a policy over tiny queues degrades to random):
    /// four a core, halved while a shard would hold fewer than 256 of `entries` (if known).
    pub(super) fn new(entries: Option<u64>) -> Self {
        let parallelism = std::thread::available_parallelism().map_or(4, |n| n.get());
        let mut shards = (4 * parallelism).next_power_of_two();
        if let Some(entries) = entries {
            while shards > 1 && (shards as u64) * 256 > entries {
                shards /= 2;
            }
        }
        Shards {
            shards: (0..shards)
                .map(|_| CachePadded::new(Mutex::default()))
                .collect(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.shards.len()
    }

    /// The shard of a key's hash: its top bits (the indexes' bins come from the byte-swapped
    /// hash's, i.e. the low bytes).
    pub(super) fn shard_of(&self, hash: u64) -> usize {
        (hash >> 40) as usize & (self.shards.len() - 1)
    }

    pub(super) fn lock(&self, shard: usize) -> MutexGuard<'_, Queues<N>> {
        // A panic while a shard was locked (a key's `Clone` or `Hash`, a listener) leaves it
        // consistent: every push and pop updates the weights with the node.
        self.shards[shard]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Shard `shard`'s queues, spinning (then yielding) while another thread holds them
    /// before sleeping: a holder keeps a shard for one node's queueing and an eviction step
    /// or two, far shorter than a sleep and a wake-up through the kernel (with a `Mutex`'s
    /// own short spin, two threads filling a `FlatCache` switched context 830 times in six
    /// rounds where scc's `HashCache` switched 90, and ran a third of their rounds at half
    /// speed).
    pub(super) fn lock_spinning(&self, shard: usize) -> MutexGuard<'_, Queues<N>> {
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            if let Some(queues) = self.try_lock(shard) {
                return queues;
            }
            if backoff.is_completed() {
                return self.lock(shard);
            }
            backoff.snooze();
        }
    }

    /// Shard `shard`'s queues if no other thread holds them; `None` if one does.
    pub(super) fn try_lock(&self, shard: usize) -> Option<MutexGuard<'_, Queues<N>>> {
        match self.shards[shard].try_lock() {
            Ok(queues) => Some(queues),
            // As in `lock`.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The queues of shard `first`, or, if another thread holds them, of the next shard no
    /// thread holds (waiting for `first` only if every shard is held). A node may live in any
    /// shard (eviction pops whatever a shard holds and finds the entry by the node; `clear`
    /// visits every shard), so a thread that meets a held lock moves on rather than sleeping
    /// in the kernel: with 2 threads on 8 shards, the futex waits of a contended `Mutex` were
    /// a tenth of a cache-aside run's time (BENCHMARKS, "floe::Cache beside moka"). Alone, a
    /// thread always gets `first`, so single-threaded traces (the hit-ratio benchmarks) see
    /// exactly the shards they saw before.
    pub(super) fn lock_some(&self, first: usize) -> (usize, MutexGuard<'_, Queues<N>>) {
        let shards = self.shards.len();
        (0..shards)
            .find_map(|turn| {
                let shard = (first + turn) % shards;
                self.try_lock(shard).map(|queues| (shard, queues))
            })
            .unwrap_or_else(|| (first, self.lock(first)))
    }

    /// Every node queued, the shards emptied.
    pub(super) fn take_all(&self) -> Vec<N> {
        let mut all = Vec::new();
        for shard in 0..self.shards.len() {
            let queues = core::mem::take(&mut *self.lock(shard));
            all.extend(queues.small.into_iter().chain(queues.main));
        }
        all
    }
}

/// The split between the two queues and what moves it (module docs of `cache/mod.rs`, "The
/// split adapts" and "Only a split that could have kept a key moves for it").
pub(super) struct Split {
    /// The small queue's target share of the queued weight, in millionths.
    small_share: AtomicU32,
    /// The run of same-way signals so far (`signal_run`): length << 1 | way.
    signal_run: AtomicU64,
    /// Made at the first eviction, one slot per entry the cache then holds.
    ghosts: OnceLock<Ghosts>,
    /// The cache's queue shards.
    shards: usize,
}

impl Split {
    /// The split of a cache of `shards` queue shards.
    pub(super) fn new(shards: usize) -> Self {
        Split {
            small_share: AtomicU32::new(SHARE_START),
            signal_run: AtomicU64::new(0),
            ghosts: OnceLock::new(),
            shards,
        }
    }

    /// The small queue's target share of the queued weight, in millionths.
    pub(super) fn share(&self) -> u32 {
        self.small_share.load(Ordering::Relaxed)
    }

    /// Whether the next eviction step takes the small queue's head (else main's).
    pub(super) fn evict_from_small<N>(&self, queues: &Queues<N>) -> bool {
        let total = queues.small_weight + queues.main_weight;
        let share = u64::from(self.share());
        !queues.small.is_empty()
            && (queues.small_weight * PPM >= total * share || queues.main.is_empty())
    }

    /// A read missed the key of `hash` (computed only if there are ghosts) while the cache
    /// held `entries`: if eviction let it go lately, move the split toward the small queue if
    /// it left that one unread, else toward main.
    pub(super) fn missed(&self, hash: impl FnOnce() -> u64, entries: impl FnOnce() -> u64) {
        // Before the first eviction there are no ghosts, and no hash to take.
        let Some(ghosts) = self.ghosts.get() else {
            return;
        };
        let Some((from_small, since)) = ghosts.signal(hash()) else {
            return;
        };
        let entries = entries().max(1);
        // A key that left small `since` evictions ago needed small that much larger; past
        // what main holds, no split would have kept it (module docs).
        let share = u64::from(self.share());
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

    /// Signals in a row the same way as this one (relaxed: a lost update shortens a run).
    fn signal_run(&self, from_small: bool) -> u64 {
        let way = u64::from(from_small);
        let seen = self.signal_run.load(Ordering::Relaxed);
        let run = if seen & 1 == way { (seen >> 1) + 1 } else { 0 };
        self.signal_run.store(run << 1 | way, Ordering::Relaxed);
        run
    }

    fn move_share(&self, by: i32) {
        // A load and a compare-exchange loop (relaxed: the share is a hint, and a lost race
        // only retries).
        let mut share = self.small_share.load(Ordering::Relaxed);
        loop {
            let moved = share.saturating_add_signed(by).clamp(SHARE_MIN, SHARE_MAX);
            match self.small_share.compare_exchange_weak(
                share,
                moved,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => share = seen,
            }
        }
    }

    /// The key of `hash` left the small queue (or main) of `queues` by eviction; the ghosts
    /// are made now if this is the first, with a slot per entry the cache holds (`entries`).
    /// The shard advances the ghosts' clock in batches (`Ghosts`).
    pub(super) fn remember<N>(
        &self,
        queues: &mut Queues<N>,
        hash: u64,
        from_small: bool,
        entries: impl FnOnce() -> usize,
    ) {
        let ghosts = self.ghosts.get_or_init(|| {
            Ghosts::new(
                entries().clamp(GHOST_SLOTS_MIN, GHOST_SLOTS_MAX),
                self.shards,
            )
        });
        queues.evicted += 1;
        if queues.evicted >= ghosts.clock_batch {
            queues.evicted = 0;
            ghosts.advance(u64::from(ghosts.clock_batch));
        }
        ghosts.remember(hash, from_small);
    }

    /// A new key of `hash` is queued: whether it goes to the small queue (else to main, as a
    /// key that left the small queue lately).
    pub(super) fn queue_small(&self, hash: u64) -> bool {
        !self.ghosts.get().is_some_and(|ghosts| ghosts.take(hash))
    }

    /// Forget every ghost (the cache was cleared).
    pub(super) fn forget(&self) {
        if let Some(ghosts) = self.ghosts.get() {
            ghosts.clear();
        }
    }
}
