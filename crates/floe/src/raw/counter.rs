//! A sharded counter for `len` that costs an insert or a remove no locked instruction.
//!
//! Every live thread has a small *index*, unique among the live threads of the process and
//! reused after a thread exits (`thread_index`, handed out by an `IndexPool`). A counter has
//! one cache-padded *owned* shard per index below a bound (twice the core count): only the
//! thread holding that index writes it, so it adds with a plain load and store (`mov`, not
//! `lock xadd`). Threads whose index is past the bound (more live threads than that) share a
//! few *overflow* shards, added to with atomic RMWs, and so do calls made while the thread's
//! index is being torn down (a thread-local destructor that uses a map) and all of them under
//! loom, whose threads share one OS thread and so one thread-local index.
//!
//! Why a plain add is exact: an owned shard has one writer at a time. A thread gives its index
//! back (under a mutex) only when it exits, after its last add; the next thread to take the
//! index takes it under the same mutex, so its first load of the shard happens after the last
//! store of the previous holder and reads it. `sum` only loads.
//!
//! The sum is exact when no insert or remove is running (it reads each shard once); under
//! concurrency it is a value the count had at some point only approximately, and a shard can
//! be transiently negative (a remove counted on one thread for a key whose insert was counted
//! on another), which `sum` clamps at zero.

use std::{cmp::Reverse, collections::BinaryHeap};

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicIsize, Ordering};

pub(crate) struct ShardedCounter {
    /// Shard `i` is written only by the thread holding index `i`.
    owned: Box<[CachePadded<AtomicIsize>]>,
    /// Shared by the threads without an owned shard; a power of two in length.
    overflow: Box<[CachePadded<AtomicIsize>]>,
}

/// One thread's shard of a [`ShardedCounter`] (`ShardedCounter::shard`).
pub(crate) struct Shard<'a> {
    cell: &'a AtomicIsize,
    /// Written by this thread only (module docs): a plain add; else an atomic one.
    owned: bool,
    /// A thread's owned shard must not be added to from another thread.
    _not_send: core::marker::PhantomData<*const ()>,
}

impl Shard<'_> {
    /// Add `n` to the count (Relaxed, as `ShardedCounter::add`).
    #[inline(always)]
    pub(crate) fn add(&self, n: isize) {
        if self.owned {
            // Only this thread writes this shard (module docs): a plain add.
            self.cell
                .store(self.cell.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        } else {
            self.cell.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Where a write counts the keys it adds: the counter itself (the thread's shard looked up
/// per add), or a [`Shard`] a batch looked up once.
pub(crate) trait Count {
    /// Add `n` to the count.
    fn add(&self, n: isize);
}

impl Count for ShardedCounter {
    #[inline(always)]
    fn add(&self, n: isize) {
        ShardedCounter::add(self, n);
    }
}

impl Count for Shard<'_> {
    #[inline(always)]
    fn add(&self, n: isize) {
        Shard::add(self, n);
    }
}

/// Hands out small indices, the lowest free one first, so indices stay dense.
#[cfg_attr(floe_loom, allow(dead_code))]
struct IndexPool {
    /// Indices given back, and the next never-used index.
    free: std::sync::Mutex<(BinaryHeap<Reverse<usize>>, usize)>,
}

#[cfg_attr(floe_loom, allow(dead_code))]
impl IndexPool {
    const fn new() -> Self {
        Self {
            free: std::sync::Mutex::new((BinaryHeap::new(), 0)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (BinaryHeap<Reverse<usize>>, usize)> {
        // A panic while holding this lock cannot leave it inconsistent (a push, a pop or an
        // increment), so a poisoned lock is still good.
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take(&self) -> usize {
        let mut free = self.lock();
        if let Some(Reverse(index)) = free.0.pop() {
            return index;
        }
        free.1 += 1;
        free.1 - 1
    }

    fn give_back(&self, index: usize) {
        self.lock().0.push(Reverse(index));
    }
}

/// The calling thread's index (module docs).
#[cfg(not(floe_loom))]
mod thread_index {
    use super::IndexPool;

    static POOL: IndexPool = IndexPool::new();

    /// The calling thread's hold on its index; gives it back when the thread exits.
    struct Held(usize);

    impl Drop for Held {
        fn drop(&mut self) {
            POOL.give_back(self.0);
        }
    }

    std::thread_local! {
        static HELD: Held = Held(POOL.take());
    }

    /// The calling thread's index; `None` while the thread's locals are being destroyed.
    #[inline]
    pub(super) fn current() -> Option<usize> {
        HELD.try_with(|held| held.0).ok()
    }
}

impl ShardedCounter {
    pub(crate) fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let padded = |n: usize| -> Box<[CachePadded<AtomicIsize>]> {
            (0..n)
                .map(|_| CachePadded::new(AtomicIsize::new(0)))
                .collect()
        };
        Self {
            owned: padded(2 * cores),
            overflow: padded(cores.next_power_of_two().min(16)),
        }
    }

    /// Add `n` to the count. Relaxed: the counter orders nothing; the table's own
    /// synchronisation does.
    #[inline]
    pub(crate) fn add(&self, n: isize) {
        self.shard().add(n);
    }

    /// The calling thread's shard, to add to many times without looking up the thread's
    /// index each time (a batch's inserts). Valid on this thread only (it is not `Send`).
    #[inline]
    pub(crate) fn shard(&self) -> Shard<'_> {
        #[cfg(not(floe_loom))]
        let index = thread_index::current();
        #[cfg(floe_loom)]
        let index: Option<usize> = None;
        match index {
            Some(index) if index < self.owned.len() => Shard {
                cell: &self.owned[index],
                owned: true,
                _not_send: core::marker::PhantomData,
            },
            _ => Shard {
                cell: &self.overflow[index.unwrap_or(0) & (self.overflow.len() - 1)],
                owned: false,
                _not_send: core::marker::PhantomData,
            },
        }
    }

    /// Count one more.
    #[inline]
    pub(crate) fn increment(&self) {
        self.add(1);
    }

    /// Count one less.
    #[inline]
    pub(crate) fn decrement(&self) {
        self.add(-1);
    }

    pub(crate) fn sum(&self) -> usize {
        let total: isize = self
            .owned
            .iter()
            .chain(self.overflow.iter())
            .map(|s| s.load(Ordering::Relaxed))
            .sum();
        usize::try_from(total).unwrap_or(0)
    }
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_across_threads() {
        let c = ShardedCounter::new();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.increment();
                    }
                    for _ in 0..250 {
                        c.decrement();
                    }
                });
            }
        });
        assert_eq!(c.sum(), 3000);
        c.add(-5000);
        assert_eq!(c.sum(), 0, "a negative total clamps at zero");
    }

    #[test]
    fn more_threads_than_owned_shards_and_reused_indices_lose_no_count() {
        // Threads past the owned shards go to the overflow ones; threads started after others
        // exited reuse their indices (and shards). Several waves of many threads each.
        let c = ShardedCounter::new();
        let threads = 3 * c.owned.len() + 1;
        let rounds = if cfg!(miri) { 10 } else { 100_000 };
        for _wave in 0..3 {
            std::thread::scope(|s| {
                for t in 0..threads {
                    let c = &c;
                    s.spawn(move || {
                        for _ in 0..rounds {
                            c.add((t % 3 + 1) as isize);
                        }
                    });
                }
            });
        }
        let per_wave: isize = (0..threads).map(|t| (t as isize % 3 + 1) * rounds).sum();
        assert_eq!(c.sum(), usize::try_from(3 * per_wave).unwrap());
    }

    #[test]
    fn indices_are_reused_lowest_first() {
        let pool = IndexPool::new();
        assert_eq!((pool.take(), pool.take(), pool.take()), (0, 1, 2));
        pool.give_back(2);
        pool.give_back(0);
        assert_eq!(pool.take(), 0);
        assert_eq!(pool.take(), 2);
        assert_eq!(pool.take(), 3);
    }

    #[test]
    fn a_live_thread_keeps_its_index_and_two_live_threads_differ() {
        let mine = thread_index::current().unwrap();
        assert_eq!(thread_index::current(), Some(mine));
        let theirs = std::thread::spawn(thread_index::current).join().unwrap();
        assert_ne!(theirs, Some(mine));
    }
}
