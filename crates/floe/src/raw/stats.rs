//! Lines-per-operation accounting (feature `line-stats`).
//!
//! `perf stat` cannot count cache misses on every machine (virtual machines often hide the
//! PMU), so the engine can count the lines it touches itself. An operation's bin line (once,
//! however often the header is re-read), every link bucket a search loads, and a link bucket an
//! insert writes without having read it each add one to a thread-local counter. Each
//! *distinct* line is a potential miss on a table much larger than the caches; re-reads of a
//! line already counted are not. Without the feature the calls compile to nothing.

#[cfg(feature = "line-stats")]
std::thread_local! {
    static LINES: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// Count one distinct line read by the current operation.
#[inline(always)]
pub(crate) fn line_read() {
    #[cfg(feature = "line-stats")]
    LINES.with(|l| l.set(l.get() + 1));
}

/// Lines this thread has read since it started (always zero without `line-stats`).
pub fn lines_read() -> u64 {
    #[cfg(feature = "line-stats")]
    return LINES.with(|l| l.get());
    #[cfg(not(feature = "line-stats"))]
    0
}
