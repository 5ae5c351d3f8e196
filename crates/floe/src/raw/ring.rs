//! The lookahead ring: the one way floe keeps many misses in flight.
//!
//! A random access to a table far larger than the caches waits for DRAM; the memory system
//! serves many lines at once, but one operation at a time keeps only as many misses in flight
//! as the core's reorder window happens to overlap. Batches, `get_many`, the pipeline and
//! `Map`'s batches all run their requests through this ring, which names each request's lines
//! ahead of its use. A request passes three points on its way through a ring of `far`:
//!
//! ```text
//!  step i:   run i - far  |  chase i - far/2  |  enter i
//!            (lines here)    (first line here,   (located, first line
//!                             second one asked)   asked for)
//! ```
//!
//! 1. **enter**: the request is located (its key hashed, its bin found) and its first line is
//!    prefetched into the L2 cache (`prefetch_far`);
//! 2. **chase**, `far / 2` steps later: its first line has had time to arrive; a request that
//!    needs a second line it names (a bin's chained link buckets when its key is not in the
//!    bin's own line, `Map`'s entry, the dense layout's alternative line) prefetches that one
//!    now;
//! 3. **run**, `far` steps after it entered: the request runs on lines in the cache.
//!
//! Requests run in the order they entered: a batch keeps program order, and a key's requests
//! in a pipeline complete in submission order without any bookkeeping.
//!
//! # Why this shape (measured, BENCHMARKS.md "DRAM speed")
//!
//! - **A sliding window, not bursts.** A batch that prefetched the next `d` requests at once
//!   and then ran them left the memory idle while it ran; the window slides one request a
//!   step, so the number of misses in flight stays at `far` (Little's law: throughput is
//!   misses in flight over latency). DRAMHiT's 2025 table and its notes do the same.
//! - **Prefetch into L2, far ahead.** A software prefetch into L1 holds one of the core's few
//!   L1 miss buffers until the line arrives, and on AMD Zen a prefetch that finds none free is
//!   dropped. Prefetches into L2 (`prefetcht2`) are tracked by the L2's larger queue: on the
//!   AMD EPYC hosts, random line reads with a window of 64 into L2 ran 1.5-2x those with a
//!   window into L1 at any depth, and a second prefetch into L1 a few steps before the use
//!   (DRAMHiT's "double prefetch") measured no gain on top, so the ring issues none.
//! - **The second line at half the window.** About 5% of the default layout's keys live in a
//!   link bucket; without the chase each of them waits a full DRAM round trip when it runs,
//!   which cost a third of the batched get's throughput. The default layout's chase follows
//!   a bin's chain only for a key not in the bin's line: following every chain asked for
//!   0.26 link lines a get for the 0.08 that are read (23.5M keys at capacity, line-stats),
//!   1.26 lines from memory a get where 1.09 serve.
//!
//! `far` is [`DEFAULT_DEPTH`] unless the caller sets it; 0 runs every request at once with no
//! prefetch (tables that fit in the caches, `Prefetch::Auto`).

use core::mem::MaybeUninit;

/// Requests a ring keeps ahead by default: measured best at 64 on the AMD EPYC hosts (48 to
/// 128 within noise, 32 a tenth slower; BENCHMARKS.md).
pub(crate) const DEFAULT_DEPTH: usize = 64;

/// The deepest window ([`RING`] slots).
pub(crate) const MAX_DEPTH: usize = RING;

/// Slots of a batch's ring, on its stack.
const RING: usize = 128;
const MASK: usize = RING - 1;

/// Where request `i` of a batch lives: its key's hash and word. The engine's batch loops call
/// it as each request enters their ring, inside the backend's entry point (compiled for its
/// SIMD feature), and may call it again for a request (the one-by-one path after a growth
/// stopped the ring starts again at the first unanswered one): it must give the same answer
/// each time. An implementation's `#[inline(always)]` method is compiled into that loop, with
/// the hasher's `hash_one` as far as the hasher's own attributes let it inline, where a
/// closure is inlined only if the compiler judges its whole body small: with a hasher chosen
/// at run time (or a keyed or byte-wise one) every request then paid a call and the loop
/// spilled its registers around it (BENCHMARKS.md, "DRAM speed").
pub(crate) trait Locate {
    /// Request `i`'s (hash, key word).
    fn locate(&self, i: usize) -> (u64, u64);
}

impl<L: Locate + ?Sized> Locate for &L {
    #[inline(always)]
    fn locate(&self, i: usize) -> (u64, u64) {
        (**self).locate(i)
    }
}

/// A closure as a [`Locate`], for callers whose locating is small or not on a hot path.
#[cfg_attr(any(floe_loom, miri), allow(dead_code))]
pub(crate) struct LocateWith<F>(pub(crate) F);

impl<F: Fn(usize) -> (u64, u64)> Locate for LocateWith<F> {
    #[inline(always)]
    fn locate(&self, i: usize) -> (u64, u64) {
        (self.0)(i)
    }
}

/// What a ring does to its requests (module docs). Everything is `#[inline(always)]` in the
/// implementations: the ring is compiled into each caller, SIMD entry points included.
pub(crate) trait Stages {
    /// What the ring keeps of a request between its steps (a located key, a bin's address).
    type Slot;

    /// Locate request `i` (no memory is touched).
    fn locate(&mut self, i: usize) -> Self::Slot;

    /// Start loading the request's first line.
    fn prefetch(&mut self, slot: &Self::Slot);

    /// The first line has had time to arrive: start loading a second one it needs, if any.
    /// A hint: a ring may skip it (requests of a batch shorter than half its window), so
    /// `run` must not depend on it.
    fn chase(&mut self, slot: &mut Self::Slot);

    /// Run request `i`. `Err(())` stops the ring: no later request runs, and the caller
    /// learns where it stopped.
    fn run(&mut self, i: usize, slot: Self::Slot) -> Result<(), ()>;
}

/// Run requests `0..n` through a ring `far` requests deep (at most [`MAX_DEPTH`]; 0 runs each
/// at once without prefetching). `Err(i)`: request `i` stopped the ring; those after it did
/// not run.
#[inline(always)]
pub(crate) fn run<S: Stages>(stages: &mut S, n: usize, far: usize) -> Result<(), usize>
where
    S::Slot: Copy,
{
    debug_assert!(far <= MAX_DEPTH);
    if far == 0 {
        for i in 0..n {
            let slot = stages.locate(i);
            stages.run(i, slot).map_err(|()| i)?;
        }
        return Ok(());
    }
    let half = far / 2;
    let mut ring = [const { MaybeUninit::<S::Slot>::uninit() }; RING];
    // The ring's slot of request `i`, written when it enters and read until it runs.
    macro_rules! slot {
        ($i:expr) => {
            // SAFETY: every index read below is one of a request that entered (index < n,
            // entered at step index) and has not yet been overwritten (the request `far` <=
            // RING later that takes its place enters after it ran).
            unsafe { ring[$i & MASK].assume_init_mut() }
        };
    }
    let lead = far.min(n);
    for i in 0..lead {
        let slot = stages.locate(i);
        stages.prefetch(&slot);
        ring[i & MASK].write(slot);
        if half > 0 && i >= half {
            stages.chase(slot!(i - half));
        }
    }
    // Requests `0..chased` have been chased (none with a window of 1).
    let mut chased = if half > 0 {
        lead.saturating_sub(half)
    } else {
        n
    };
    // The steady state: every step runs one request, chases one and lets one enter.
    for i in far..n {
        stages.run(i - far, *slot!(i - far)).map_err(|()| i - far)?;
        if half > 0 {
            stages.chase(slot!(i - half));
        }
        let slot = stages.locate(i);
        stages.prefetch(&slot);
        ring[i & MASK].write(slot);
    }
    if half > 0 && n > far {
        chased = n - half;
    }
    // Drain: the last `lead` requests, chasing the rest half a window ahead.
    for j in n - lead..n {
        let ahead = j + half;
        if half > 0 && ahead >= chased && ahead < n {
            stages.chase(slot!(ahead));
            chased = ahead + 1;
        }
        stages.run(j, *slot!(j)).map_err(|()| j)?;
    }
    Ok(())
}

/// A ring that stays open across calls (the pipelines): requests enter one at a time and,
/// once `far` are waiting, each entry runs the oldest. Its slots are allocated once, when it
/// is made.
pub(crate) struct Stream<T> {
    slots: Box<[MaybeUninit<T>]>,
    mask: usize,
    far: usize,
    /// Requests that entered so far (the next one's number).
    entered: usize,
    /// Requests run so far.
    ran: usize,
}

impl<T> Stream<T> {
    /// A ring `far` requests deep (at least 1).
    pub(crate) fn new(far: usize) -> Self {
        let far = far.max(1);
        let capacity = far.next_power_of_two();
        Stream {
            slots: (0..capacity).map(|_| MaybeUninit::uninit()).collect(),
            mask: capacity - 1,
            far,
            entered: 0,
            ran: 0,
        }
    }

    /// Requests in the ring, entered and not yet run.
    pub(crate) fn waiting(&self) -> usize {
        self.entered - self.ran
    }

    /// The window.
    pub(crate) fn far(&self) -> usize {
        self.far
    }

    #[inline(always)]
    fn slot(&mut self, i: usize) -> &mut T {
        debug_assert!(i >= self.ran && i < self.entered);
        // SAFETY: request `i` entered and has not run; at most `far` <= capacity requests
        // wait, so its slot was not overwritten.
        unsafe { self.slots[i & self.mask].assume_init_mut() }
    }

    /// Take the oldest waiting request out.
    #[inline(always)]
    fn take_oldest(&mut self) -> T {
        debug_assert!(self.waiting() > 0);
        let i = self.ran;
        self.ran += 1;
        // SAFETY: request `i` entered and had not run (so its slot holds it); counting it as
        // run leaves the slot uninitialised, to be written before it is read again.
        unsafe { self.slots[i & self.mask].assume_init_read() }
    }

    /// Let a request enter (`slot`, already located; `stages` prefetches it). If `far` were
    /// waiting, the oldest is taken out first and returned, to be run.
    #[inline(always)]
    pub(crate) fn push<S: Stages<Slot = T>>(&mut self, stages: &mut S, slot: T) -> Option<T> {
        let oldest = (self.waiting() >= self.far).then(|| self.take_oldest());
        let half = self.far / 2;
        let i = self.entered;
        if half > 0 && i >= half && i - half >= self.ran {
            stages.chase(self.slot(i - half));
        }
        stages.prefetch(&slot);
        self.slots[i & self.mask].write(slot);
        self.entered += 1;
        oldest
    }

    /// The oldest waiting request, taken out to run (chasing the one half a window behind it,
    /// which no later entry will while the ring drains); `None` if none waits.
    #[inline]
    pub(crate) fn pop<S: Stages<Slot = T>>(&mut self, stages: &mut S) -> Option<T> {
        if self.waiting() == 0 {
            return None;
        }
        let half = self.far / 2;
        let next = self.ran + half;
        if half > 0 && next < self.entered && next + half >= self.entered {
            stages.chase(self.slot(next));
        }
        Some(self.take_oldest())
    }
}

impl<T> Drop for Stream<T> {
    fn drop(&mut self) {
        while self.waiting() > 0 {
            drop(self.take_oldest());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records when each request met each stage (a step counter), and checks that none is
    /// chased twice or run with another's slot.
    #[derive(Default)]
    struct Log {
        step: usize,
        prefetched: Vec<Option<usize>>,
        chased: Vec<Option<usize>>,
        ran: Vec<usize>,
        ran_at: Vec<Option<usize>>,
        stop_at: Option<usize>,
    }

    impl Log {
        fn tick(&mut self) -> usize {
            self.step += 1;
            self.step
        }

        fn mark(at: &mut Vec<Option<usize>>, i: usize, step: usize) {
            if at.len() <= i {
                at.resize(i + 1, None);
            }
            at[i] = Some(step);
        }
    }

    impl Stages for Log {
        type Slot = usize;

        fn locate(&mut self, i: usize) -> usize {
            i
        }

        fn prefetch(&mut self, &i: &usize) {
            let step = self.tick();
            Log::mark(&mut self.prefetched, i, step);
        }

        fn chase(&mut self, &mut i: &mut usize) {
            assert!(
                self.chased.get(i).copied().flatten().is_none(),
                "request {i} chased twice"
            );
            let step = self.tick();
            Log::mark(&mut self.chased, i, step);
        }

        fn run(&mut self, i: usize, slot: usize) -> Result<(), ()> {
            assert_eq!(i, slot, "the slot of another request");
            let step = self.tick();
            Log::mark(&mut self.ran_at, i, step);
            self.ran.push(i);
            if self.stop_at == Some(i) {
                Err(())
            } else {
                Ok(())
            }
        }
    }

    /// When request `i` met a stage.
    fn at(steps: &[Option<usize>], i: usize) -> Option<usize> {
        steps.get(i).copied().flatten()
    }

    /// Request counts and windows to try: fewer under Miri, which runs these a thousand
    /// times slower.
    fn sizes(full: &[usize], miri: &[usize]) -> Vec<usize> {
        if cfg!(miri) { miri } else { full }.to_vec()
    }

    #[test]
    fn every_request_runs_once_in_order_after_its_prefetch() {
        for n in sizes(&[0, 1, 2, 3, 7, 64, 65, 200, 300], &[0, 1, 3, 9, 130]) {
            for far in sizes(
                &[0, 1, 2, 3, 8, 64, 127, MAX_DEPTH],
                &[0, 1, 3, 8, MAX_DEPTH],
            ) {
                let mut log = Log::default();
                assert_eq!(run(&mut log, n, far), Ok(()));
                assert_eq!(log.ran, (0..n).collect::<Vec<_>>(), "n {n} far {far}");
                for i in 0..n {
                    let ran = at(&log.ran_at, i).expect("ran");
                    if far > 0 {
                        let fetched = at(&log.prefetched, i).expect("prefetched");
                        assert!(
                            fetched < ran,
                            "n {n} far {far}: {i} ran before its prefetch"
                        );
                        // Each request in the steady state runs `far` steps after it entered.
                        if i + far < n {
                            let later = at(&log.prefetched, i + far).expect("entered");
                            assert!(ran < later, "n {n} far {far}: {i} ran late");
                        }
                    }
                    if let Some(chased) = at(&log.chased, i) {
                        assert!(chased < ran, "n {n} far {far}: {i} chased after it ran");
                    }
                }
                // Every request is chased when the window is full at least once.
                if far >= 2 && n >= far {
                    let chased = log.chased.iter().flatten().count();
                    assert_eq!(chased, n, "n {n} far {far}");
                }
            }
        }
    }

    #[test]
    fn a_stop_ends_the_ring_at_its_request() {
        for far in sizes(&[0, 1, 4, 64], &[0, 4]) {
            for stop in sizes(&[0, 3, 99], &[0, 7]) {
                let mut log = Log {
                    stop_at: Some(stop),
                    ..Log::default()
                };
                assert_eq!(run(&mut log, 100, far), Err(stop), "far {far}");
                assert_eq!(log.ran, (0..=stop).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn a_stream_runs_what_entered_in_order_and_chases_each_once() {
        for far in sizes(&[1, 2, 3, 16, 100], &[1, 3, 16]) {
            for n in sizes(&[0, 1, 5, 40, 333], &[0, 5, 40]) {
                let mut log = Log::default();
                let mut stream = Stream::new(far);
                let mut ran = Vec::new();
                for i in 0..n {
                    let slot = log.locate(i);
                    if let Some(oldest) = stream.push(&mut log, slot) {
                        ran.push(oldest);
                    }
                    assert!(stream.waiting() <= far);
                }
                while let Some(oldest) = stream.pop(&mut log) {
                    ran.push(oldest);
                }
                assert_eq!(ran, (0..n).collect::<Vec<_>>(), "far {far} n {n}");
                assert_eq!(stream.waiting(), 0);
                if far >= 2 && n >= far {
                    let chased = log.chased.iter().flatten().count();
                    assert_eq!(chased, n, "far {far} n {n}: every request chased once");
                }
            }
        }
    }

    /// A stream of owned slots (a pipeline's tags) drops what still waits, once each.
    #[test]
    fn a_stream_drops_what_still_waits() {
        struct Owned;
        impl Stages for Owned {
            type Slot = std::rc::Rc<()>;
            fn locate(&mut self, _: usize) -> Self::Slot {
                unreachable!()
            }
            fn prefetch(&mut self, _: &Self::Slot) {}
            fn chase(&mut self, _: &mut Self::Slot) {}
            fn run(&mut self, _: usize, _: Self::Slot) -> Result<(), ()> {
                unreachable!()
            }
        }
        let tag = std::rc::Rc::new(());
        let mut stream = Stream::new(4);
        let mut ran = Vec::new();
        for _ in 0..6 {
            ran.extend(stream.push(&mut Owned, std::rc::Rc::clone(&tag)));
        }
        assert_eq!((ran.len(), stream.waiting()), (2, 4));
        assert_eq!(std::rc::Rc::strong_count(&tag), 7);
        drop(stream);
        assert_eq!(std::rc::Rc::strong_count(&tag), 3);
        drop(ran);
        assert_eq!(std::rc::Rc::strong_count(&tag), 1);
    }
}
