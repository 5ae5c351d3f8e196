//! Memory for a map's next table, made ready by the map's own writes before the growth that
//! needs it.
//!
//! # Why
//!
//! A growing map's next table is several times larger than its current one, and the kernel
//! gives its pages on first touch, zeroing each. On the virtual machines floe is measured on,
//! the first touch of memory is far dearer still: the host backs a guest page only when the
//! guest first writes it, and gives a page the guest frees back to the host within seconds
//! (free page reporting). Measured on an AMD EPYC guest (`MADV_POPULATE_WRITE` of 1-2 GiB of
//! huge pages): 0.4-0.5 GB/s, 4-5 ms for each 2 MiB huge page, against 11-12 GB/s (0.17 ms a
//! page) for memory the host still backs. Left to the operations, that cost lands on them at
//! random and all at once: when a population of 2^26 keys grew its table from 1.2 to 4.9 GB,
//! the inserts that find their old bin full move it to a random place of the new table, each
//! met a page nobody had touched, and inserts ran at under 0.02 Mops/s for 5.5 s, every one
//! of them waiting 4-13 ms (`floe-bench run --workload population`, BENCHMARKS "Tails while
//! growing").
//!
//! # What
//!
//! A table knows the size of its own successor (the next growth step). Once it holds more
//! than 1.75 keys per bin (the load a table sized from a capacity is built for: a map filled
//! to the capacity it asked for prepares nothing; one that goes past it is on its way to a
//! growth, which comes at 1.9-2.0 keys per bin, `population`'s trigger rows), its map maps
//! the successor's two regions (bins, link buckets; an `mmap`, which costs no page) and its
//! writes fault the bins in, one 2 MiB step at a time with `MADV_POPULATE_WRITE`
//! (`Region::populate`, which writes nothing), paced so that they are whole by 1.85 keys per
//! bin: one write in [`PACE_EVERY`] (chosen by its hash, so it costs the others one test)
//! compares the table's key count with the steps done and, if the schedule is behind, claims
//! and does one step. (The link region is not faulted in ahead: link buckets are taken from
//! cursors in order, so its pages are first touched one at a time anyway.) So the faults are
//! spread over the last stretch before the growth, at most one step in any write, instead of
//! landing on the growth's first seconds, when every insert that finds its old bin full moves
//! that bin to a random place of the new table. The growth takes the regions when their sizes
//! fit (the link region is mapped for the most the growth can need) and skips `memory_fits`
//! (the memory is had); a growth that comes before the schedule is done takes what is ready
//! and the rest comes on first touch, as without preparation.
//!
//! Why so late a start: earlier is gentler on the writes (the same faults over more of
//! them), but every map that stops growing between the start and its growth keeps the
//! prepared memory, up to four times its table, for nothing. Measured on the 2-core guest
//! (`floe-bench run --workload grow-read`, which ends with its grown table at 1.75 keys per
//! bin): starting at 1.5 keys per bin prepared most of a 9.8 GB successor that never came and
//! halved the writer's throughput; starting at 1.0 is the best for a population that ends
//! early in its last table. Starting at 1.75 wastes nothing for a map at or below the load it
//! would be sized for.
//!
//! # Why it is safe beside the protocols
//!
//! A step writes nothing: `MADV_POPULATE_WRITE` only makes the kernel back pages that are
//! not backed yet, with zeroes, which a fresh anonymous mapping reads as anyway. So a step
//! may run before, during or after the growth takes its region, beside the table's own
//! stores, and no ordering is needed between them (the counters here are Relaxed; who holds
//! the regions is decided under the preparer's mutex). The table made in prepared regions is
//! published as every new table is (`bins/migrate.rs`); what it reads there is zero or what its own
//! writers stored. A step in flight keeps its regions mapped through its own `Arc`, so a
//! discarded preparation is unmapped only after its last step returns.
//!
//! # Costs and bounds
//!
//! - Memory: the successor's bins are resident from the moment the table passes 1.75 keys per
//!   bin, in proportion to the way gone: a map that stops growing there keeps up to its next
//!   table's size (four times the current table's while it is small, twice once it is large)
//!   until it grows, shrinks (`shrink_to_fit` drops them), `clear`s, or is dropped. That is
//!   what its next growth would hold anyway, held earlier. `Builder::grow_ahead` caps the
//!   bytes of one preparation (0: none), and a preparation that would not fit in the memory
//!   available (`MemAvailable` plus free swap) is not made. `Stats::prepared_bytes` says what
//!   is mapped ahead, `Stats::prepared_growths` how many growths found their memory mapped.
//! - CPU: the same page faults, taken earlier by the writes and paced: writes in the last
//!   stretch before a growth run slower by the faults' share, and the growth does not stop
//!   them. One write in a step waits for one step (on the guest measured, 4-5 ms when the
//!   host must back the memory, 0.2 ms when it need not).
//! - Only successors of at least one huge page are prepared (smaller tables come from the
//!   heap).
//! - Under loom and Miri nothing is prepared (no `mmap`).

use std::sync::Arc;

#[cfg(not(any(floe_loom, miri)))]
pub(crate) use self::real::*;
#[cfg(any(floe_loom, miri))]
pub(crate) use self::stub::*;

/// A table starts preparing its successor once it holds more than this many keys per bin, in
/// hundredths (1.75: the load a table is sized for from a capacity, past which it is going to
/// grow)...
const START_HUNDREDTHS: usize = 175;

/// ... and paces the preparation to be whole by this many (1.85): the growth comes at 1.9-2.0
/// keys per bin (`population`'s trigger rows), and a key count read under concurrency lags.
const DONE_HUNDREDTHS: usize = 185;

/// One write in this many (by bits of its hash) checks the preparation's schedule.
pub(crate) const PACE_EVERY: u64 = 128;

/// Sizes of a table to prepare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Bins of the table whose successor this is.
    pub(crate) from_bins: usize,
    /// Bins of the successor.
    pub(crate) bins: usize,
    /// Link buckets of the successor, at most (the growth may need fewer); for a dense
    /// table, its lock bytes in 64-byte units.
    pub(crate) links: usize,
    pub(crate) huge_pages: bool,
}

impl Plan {
    /// Bytes of both regions (`None` if the size overflows).
    #[cfg_attr(any(floe_loom, miri), allow(dead_code))]
    pub(crate) fn bytes(&self) -> Option<usize> {
        self.bins.checked_add(self.links)?.checked_mul(64)
    }
}

/// What a table keeps to prepare its successor: whom to ask, for what, and its schedule.
pub(crate) struct Ahead {
    preparer: Arc<Preparer>,
    plan: Plan,
    /// The table's key count at which the preparation starts.
    start_len: usize,
    /// ... and at which it should be whole.
    done_len: usize,
}

impl Ahead {
    /// How a table whose successor would be `plan` prepares it: `None` if it has no successor
    /// (a capped map) or the map prepares nothing (`Builder::grow_ahead(0)`, loom, Miri).
    pub(crate) fn of(preparer: &Arc<Preparer>, plan: Option<Plan>) -> Option<Self> {
        if preparer.limit() == 0 {
            return None;
        }
        Some(Self::new(Arc::clone(preparer), plan?))
    }

    fn new(preparer: Arc<Preparer>, plan: Plan) -> Self {
        let keys = |hundredths: usize| plan.from_bins.saturating_mul(hundredths) / 100;
        Self::scheduled(
            preparer,
            plan,
            keys(START_HUNDREDTHS),
            keys(DONE_HUNDREDTHS),
        )
    }

    /// `of`, on another schedule: the preparation starts past `start_len` keys and is paced
    /// to be whole at `done_len` (the dense layout's, whose tables hold more keys a line).
    pub(crate) fn between(
        preparer: &Arc<Preparer>,
        plan: Option<Plan>,
        start_len: usize,
        done_len: usize,
    ) -> Option<Self> {
        if preparer.limit() == 0 {
            return None;
        }
        Some(Self::scheduled(
            Arc::clone(preparer),
            plan?,
            start_len,
            done_len,
        ))
    }

    fn scheduled(preparer: Arc<Preparer>, plan: Plan, start_len: usize, done_len: usize) -> Self {
        Ahead {
            preparer,
            plan,
            start_len,
            done_len: done_len.max(start_len + 1),
        }
    }

    /// Whether a write of `hash` is one of those that check the schedule (`PACE_EVERY`).
    /// Middle bits: a multiplicative hasher's low bits follow the key's low bits.
    #[inline(always)]
    pub(crate) fn turn_of(hash: u64) -> bool {
        (hash >> 20).is_multiple_of(PACE_EVERY)
    }

    /// The table holds `len` keys: do one step of the preparation if it is behind its schedule
    /// (starting it if it is due and not started).
    #[cold]
    #[inline(never)]
    pub(crate) fn pace(&self, len: usize) {
        // Nothing is mapped before a step is due.
        if len <= self.start_len {
            return;
        }
        let gone = (len - self.start_len).min(self.done_len - self.start_len);
        self.preparer.step(
            &self.plan,
            gone as u128,
            (self.done_len - self.start_len) as u128,
        );
    }
}

#[cfg(not(any(floe_loom, miri)))]
mod real {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard,
    };

    use super::Plan;
    use crate::raw::alloc::{memory_fits, Region, TableMemory, ZeroInit, HUGE_PAGE};

    /// How much one step of a preparation faults in: one huge page (a smaller step would
    /// still fault in the whole huge page it falls in).
    const STEP: usize = HUGE_PAGE;

    /// A prepared table's memory.
    pub(crate) struct Prepared {
        pub(crate) bins: Arc<Region>,
        pub(crate) links: Arc<Region>,
    }

    impl Prepared {
        /// The table's two arrays in the prepared regions (`None` if they do not fit).
        pub(crate) fn into_memory<B: ZeroInit, L: ZeroInit>(
            self,
            bins: usize,
            links: usize,
        ) -> Option<(TableMemory<B>, TableMemory<L>)> {
            Some((
                TableMemory::in_region(self.bins, bins)?,
                TableMemory::in_region(self.links, links)?,
            ))
        }

        fn bytes(&self) -> usize {
            self.bins.bytes() + self.links.bytes()
        }
    }

    /// One preparation: its plan, its regions, and the steps claimed so far.
    ///
    /// Only the bin region is faulted in ahead: a growth's moves and inserts write the new
    /// table's bins all over it, but take link buckets from the link region's cursors in
    /// order, so its pages are first touched one at a time, spread over the filling, as they
    /// would be if prepared. It is mapped here all the same, as the bins are, so the growth
    /// takes both from one place.
    struct Job {
        plan: Plan,
        memory: Prepared,
        /// Steps over the bin region.
        steps: usize,
        /// Steps claimed (each done by the write that claimed it).
        claimed: AtomicUsize,
    }

    /// A map's preparation: at most one at a time.
    pub(crate) struct Preparer {
        /// The most bytes one preparation may map (`Builder::grow_ahead`).
        limit: usize,
        job: Mutex<Option<Arc<Job>>>,
        /// `from_bins` of the last plan taken by a growth or refused (too large, no memory):
        /// it is not prepared again (the old table still takes writes while it moves).
        settled_for: AtomicUsize,
        /// Preparations a growth took (a statistic).
        taken: AtomicUsize,
    }

    fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        // The sections below do not panic; a poisoned lock still guards consistent data.
        mutex
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    impl Preparer {
        pub(crate) fn new(limit: usize) -> Self {
            Preparer {
                limit,
                job: Mutex::new(None),
                settled_for: AtomicUsize::new(0),
                taken: AtomicUsize::new(0),
            }
        }

        /// Do one step of `plan`'s preparation if fewer than `gone / way` of its steps were
        /// claimed, mapping its regions first if it has none yet.
        pub(crate) fn step(&self, plan: &Plan, gone: u128, way: u128) {
            let Some(job) = self.job_for(plan) else {
                return;
            };
            let due = (job.steps as u128 * gone).div_ceil(way) as usize;
            let claimed = job.claimed.load(Ordering::Relaxed);
            if claimed >= due.min(job.steps) {
                return;
            }
            // One claimant per step; a write that loses does not retry (the next will).
            if job
                .claimed
                .compare_exchange(claimed, claimed + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                // An old kernel (or no memory) leaves the page to its first touch, as without
                // preparation; nothing to undo.
                let _ = job.memory.bins.populate(claimed * STEP, STEP);
            }
        }

        /// The job preparing `plan`, made now if there is none and the plan fits; `None` if
        /// another plan's job holds the preparer, or this plan was settled.
        fn job_for(&self, plan: &Plan) -> Option<Arc<Job>> {
            let mut slot = lock(&self.job);
            if let Some(job) = slot.as_ref() {
                return (job.plan == *plan).then(|| Arc::clone(job));
            }
            if self.settled_for.load(Ordering::Relaxed) == plan.from_bins {
                return None;
            }
            let fits = plan.bytes().is_some_and(|bytes| {
                bytes <= self.limit
                    && plan.bins.saturating_mul(64) >= HUGE_PAGE
                    && memory_fits(bytes, true)
            });
            let memory = fits
                .then(|| {
                    Some(Prepared {
                        bins: Arc::new(Region::map(plan.bins * 64, plan.huge_pages)?),
                        links: Arc::new(Region::map(plan.links * 64, plan.huge_pages)?),
                    })
                })
                .flatten();
            let Some(memory) = memory else {
                self.settled_for.store(plan.from_bins, Ordering::Relaxed);
                return None;
            };
            let job = Arc::new(Job {
                plan: *plan,
                steps: memory.bins.bytes() / STEP,
                memory,
                claimed: AtomicUsize::new(0),
            });
            *slot = Some(Arc::clone(&job));
            Some(job)
        }

        /// The memory prepared for a table of `bins` bins and `links` link buckets, if a
        /// preparation of that size has mapped it (it may not be wholly faulted in).
        pub(crate) fn take(&self, bins: usize, links: usize) -> Option<Prepared> {
            let mut slot = lock(&self.job);
            let job = slot.as_ref()?;
            if job.plan.bins != bins || job.plan.links < links {
                return None;
            }
            let job = slot.take()?;
            self.settled_for
                .store(job.plan.from_bins, Ordering::Relaxed);
            self.taken.fetch_add(1, Ordering::Relaxed);
            // A write still in a step of this job goes on faulting in what the new table now
            // owns (which writes nothing), then drops its handle.
            Some(Prepared {
                bins: Arc::clone(&job.memory.bins),
                links: Arc::clone(&job.memory.links),
            })
        }

        /// A table of `bins` bins became current: a preparation for another table's successor
        /// will not be used.
        pub(crate) fn discard_unless_from(&self, bins: usize) {
            let mut slot = lock(&self.job);
            if slot.as_ref().is_some_and(|job| job.plan.from_bins != bins) {
                // Its regions are unmapped when the last write still in a step of it is done.
                *slot = None;
            }
        }

        /// Drop any preparation (the map shrinks, clears or goes).
        pub(crate) fn discard(&self) {
            *lock(&self.job) = None;
        }

        /// The most bytes one preparation may map (`Builder::grow_ahead`); 0: none.
        pub(crate) fn limit(&self) -> usize {
            self.limit
        }

        /// Bytes mapped ahead and not yet taken by a table.
        pub(crate) fn held_bytes(&self) -> usize {
            lock(&self.job).as_ref().map_or(0, |job| job.memory.bytes())
        }

        /// Preparations a growth took.
        pub(crate) fn taken(&self) -> usize {
            self.taken.load(Ordering::Relaxed)
        }

        /// Steps of the current preparation claimed, and its steps in all (tests).
        #[cfg(test)]
        fn progress(&self) -> Option<(usize, usize)> {
            lock(&self.job)
                .as_ref()
                .map(|job| (job.claimed.load(Ordering::Relaxed), job.steps))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn plan(bins: usize) -> Plan {
            Plan {
                from_bins: bins / 4,
                bins,
                links: bins / 8,
                huge_pages: true,
            }
        }

        #[test]
        fn steps_follow_the_schedule_and_a_prepared_table_is_taken_once_at_its_size() {
            let preparer = Preparer::new(usize::MAX);
            let bins = 4 * HUGE_PAGE / 64;
            let plan = plan(bins);
            // Bins: four huge pages, four steps; links: half of one, rounded up, mapped only.
            preparer.step(&plan, 1, 10);
            assert_eq!(preparer.held_bytes(), 5 * HUGE_PAGE, "mapped when due");
            assert_eq!(preparer.progress(), Some((1, 4)), "one step due at 1/10");
            for _ in 0..10 {
                preparer.step(&plan, 5, 10);
            }
            assert_eq!(
                preparer.progress(),
                Some((2, 4)),
                "two of four steps due at 5/10"
            );
            preparer.step(&plan, 10, 10);
            assert_eq!(preparer.progress(), Some((3, 4)), "one step per write");
            // Another plan's writes do nothing while this one holds the preparer.
            preparer.step(
                &Plan {
                    from_bins: 7,
                    ..plan
                },
                10,
                10,
            );
            assert_eq!(preparer.progress(), Some((3, 4)));
            assert!(preparer.take(bins * 2, 1).is_none(), "other bins");
            assert!(preparer.take(bins, bins / 8 + 1).is_none(), "more links");
            let prepared = preparer.take(bins, bins / 16).expect("fits");
            assert_eq!(preparer.held_bytes(), 0);
            assert_eq!(preparer.taken(), 1);
            assert!(preparer.take(bins, bins / 16).is_none(), "taken once");
            assert!(prepared.bins.bytes() >= bins * 64);
            // The old table's writes go on while it moves: its plan is not prepared again.
            preparer.step(&plan, 10, 10);
            assert_eq!(preparer.held_bytes(), 0);
            // The new table's own successor is.
            let next = Plan {
                from_bins: bins,
                ..self::plan(bins * 4)
            };
            preparer.step(&next, 1, 10);
            assert!(preparer.held_bytes() > 0);
            preparer.discard();
            assert_eq!(preparer.held_bytes(), 0);
        }

        #[test]
        fn small_plans_and_plans_over_the_limit_are_not_prepared() {
            let small = Preparer::new(usize::MAX);
            small.step(&plan(1024), 1, 1);
            let capped = Preparer::new(HUGE_PAGE);
            capped.step(&plan(4 * HUGE_PAGE / 64), 1, 1);
            assert!(small.progress().is_none() && capped.progress().is_none());
            assert_eq!(small.held_bytes() + capped.held_bytes(), 0);
        }

        #[test]
        fn a_preparation_for_another_tables_successor_is_dropped() {
            let preparer = Preparer::new(usize::MAX);
            let bins = 4 * HUGE_PAGE / 64;
            preparer.step(&plan(bins), 1, 1);
            preparer.discard_unless_from(bins / 4);
            assert!(
                preparer.held_bytes() > 0,
                "the table it was made for is current"
            );
            preparer.discard_unless_from(bins);
            assert_eq!(preparer.held_bytes(), 0);
            assert!(preparer.take(bins, 1).is_none());
        }
    }
}

/// Under loom and Miri: nothing is ever prepared.
#[cfg(any(floe_loom, miri))]
mod stub {
    use super::Plan;

    use crate::raw::alloc::{TableMemory, ZeroInit};

    /// Never built: nothing is prepared.
    pub(crate) enum Prepared {}

    impl Prepared {
        pub(crate) fn into_memory<B: ZeroInit, L: ZeroInit>(
            self,
            _bins: usize,
            _links: usize,
        ) -> Option<(TableMemory<B>, TableMemory<L>)> {
            match self {}
        }
    }

    pub(crate) struct Preparer;

    impl Preparer {
        pub(crate) fn new(_limit: usize) -> Self {
            Preparer
        }

        pub(crate) fn step(&self, _plan: &Plan, _gone: u128, _way: u128) {}

        /// Nothing may be prepared: tables carry no `Ahead`.
        pub(crate) fn limit(&self) -> usize {
            0
        }

        pub(crate) fn take(&self, _bins: usize, _links: usize) -> Option<Prepared> {
            None
        }

        pub(crate) fn discard_unless_from(&self, _bins: usize) {}

        pub(crate) fn discard(&self) {}

        pub(crate) fn held_bytes(&self) -> usize {
            0
        }

        pub(crate) fn taken(&self) -> usize {
            0
        }
    }
}
