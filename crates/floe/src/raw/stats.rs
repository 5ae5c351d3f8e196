//! Lines-per-operation accounting (feature `line-stats`).
//!
//! `perf stat` cannot count cache misses on every machine (virtual machines often hide the
//! PMU), so the engine can count the lines it touches itself. An operation's bin line (once,
//! however often the header is re-read), every link bucket a search loads, and a link bucket an
//! insert writes without having read it each add one to a thread-local counter. Each
//! *distinct* line is a potential miss on a table much larger than the caches; re-reads of a
//! line already counted are not. A second counter takes the link buckets a lookahead ring asks
//! for ahead of their use, read or not: what a batch costs the memory beyond what it reads.
//! Without the feature the calls compile to nothing.

#[cfg(feature = "line-stats")]
std::thread_local! {
    static LINES: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
    static CHASED: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// One of this thread's counters (`LINES`, `CHASED`) and what it reads; nothing without the
/// feature.
#[derive(Clone, Copy)]
enum Counter {
    Lines,
    Chased,
}

impl Counter {
    #[inline(always)]
    fn add_one(self) {
        #[cfg(feature = "line-stats")]
        match self {
            Counter::Lines => &LINES,
            Counter::Chased => &CHASED,
        }
        .with(|count| count.set(count.get() + 1));
    }

    fn get(self) -> u64 {
        #[cfg(feature = "line-stats")]
        return match self {
            Counter::Lines => &LINES,
            Counter::Chased => &CHASED,
        }
        .with(core::cell::Cell::get);
        #[cfg(not(feature = "line-stats"))]
        0
    }
}

/// Count one distinct line read by the current operation.
#[inline(always)]
pub(crate) fn line_read() {
    Counter::Lines.add_one();
}

/// Lines this thread has read since it started (always zero without `line-stats`).
pub fn lines_read() -> u64 {
    Counter::Lines.get()
}

/// Count one link bucket a lookahead ring asked for ahead of its use (`RawTable`'s chase): a
/// line fetched from memory whether or not the operation then reads it.
#[inline(always)]
pub(crate) fn link_prefetched() {
    Counter::Chased.add_one();
}

/// Link buckets this thread's lookahead rings have asked for ahead of their use (always zero
/// without `line-stats`): with [`lines_read`], what a batch costs the memory.
pub fn link_lines_prefetched() -> u64 {
    Counter::Chased.get()
}
