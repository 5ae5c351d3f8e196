//! A sharded counter for `len`: every thread adds to its own cache-padded shard, so inserts and
//! removes on different threads never share a line; `sum` adds the shards up.
//!
//! The sum is exact when no insert or remove is running (every increment is an atomic RMW and
//! `sum` reads each shard once); under concurrency it is a value the count had at some point
//! only approximately, and a shard can be transiently negative (a remove counted on one thread
//! for a key whose insert was counted on another), which `sum` clamps at zero.

use crate::sync::stat::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering};

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicIsize, Ordering};

pub(crate) struct ShardedCounter {
    shards: Box<[CachePadded<AtomicIsize>]>,
}

/// The shard of the calling thread: threads are numbered in the order they first touch any
/// counter. Shard choice is a performance matter only, so this uses std atomics even under loom.
fn thread_shard() -> usize {
    static NEXT: StdAtomicUsize = StdAtomicUsize::new(0);
    std::thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, StdOrdering::Relaxed);
    }
    SHARD.with(|s| *s)
}

impl ShardedCounter {
    pub(crate) fn new() -> Self {
        // Twice the core count keeps collisions rare without wasting much: 128 bytes a shard.
        let shards = std::thread::available_parallelism()
            .map_or(8, |n| n.get() * 2)
            .next_power_of_two();
        Self {
            shards: (0..shards)
                .map(|_| CachePadded::new(AtomicIsize::new(0)))
                .collect(),
        }
    }

    #[inline]
    fn shard(&self) -> &AtomicIsize {
        &self.shards[thread_shard() & (self.shards.len() - 1)]
    }

    /// Count one more. Relaxed: the counter orders nothing; the table's own synchronisation
    /// does.
    #[inline]
    pub(crate) fn increment(&self) {
        self.shard().fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn add(&self, n: isize) {
        self.shard().fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn decrement(&self) {
        self.shard().fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn sum(&self) -> usize {
        let total: isize = self.shards.iter().map(|s| s.load(Ordering::Relaxed)).sum();
        usize::try_from(total).unwrap_or(0)
    }
}

#[cfg(all(test, not(loom)))]
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
}
