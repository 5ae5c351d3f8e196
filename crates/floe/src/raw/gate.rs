//! The snapshot gate, for either layout's driver: every write passes it, and a strong snapshot
//! (DLHT §3.4.4, `FlatMap::snapshot`) closes it, waits for the writers inside, walks the map
//! and opens it again.
//!
//! The argument: a writer announces itself (`reclaim::enter`), then reads the flag; the
//! snapshot sets the flag, then runs the heavy barrier and waits for every announced thread
//! (`reclaim::wait_for_operations`). By the barrier's pairing with the announcement's light
//! one, a writer either sees the flag (and leaves, unannounced, to wait) or is seen announced
//! (and waited for). So from the end of the wait until the gate opens, no write starts or is
//! in progress, apart from nested writers (inside an outer operation of their thread, which
//! they cannot leave), which go on: `FlatMap::snapshot` says what that leaves out. A writer
//! never waits at the gate while announced, so the snapshot never waits for a waiter.

use crate::{
    reclaim::{self, ReadGuard},
    sync::stat::{AtomicBool as PlainFlag, Ordering as StatOrdering},
};

/// A map's snapshot gate (module docs).
pub(crate) struct WriterGate {
    /// Writers wait while set. Not a loom atomic: loom models take no snapshot, and a loom
    /// load in every write would only add states to explore.
    paused: PlainFlag,
}

impl WriterGate {
    pub(crate) fn new() -> Self {
        WriterGate {
            paused: PlainFlag::new(false),
        }
    }

    /// Enter a writing operation: announced and past the gate (module docs).
    #[inline(always)]
    pub(crate) fn enter(&self) -> ReadGuard<'static> {
        loop {
            let guard = reclaim::enter();
            // Relaxed: ordered after the announcement by `enter`'s light barrier, paired with
            // the snapshot's heavy barrier (`reclaim::wait_for_operations`).
            if guard.nested() || !self.paused.load(StatOrdering::Relaxed) {
                return guard;
            }
            drop(guard);
            self.wait_open();
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_open(&self) {
        // Acquire: pairs with the snapshot's Release reopening, so the walk's reads come
        // before the writes that resume (the retry's announcement then orders the rest).
        while self.paused.load(StatOrdering::Acquire) {
            std::thread::yield_now();
        }
    }

    /// Close the gate, wait for the writers inside, run `walk`, open the gate (also if `walk`
    /// panics). Linearized at the end of the wait: from then until the gate opens, nothing
    /// present changes.
    ///
    /// # Errors
    /// `InsideOperation` (and `walk` not run) if the calling thread is inside an operation of
    /// any floe map, which the wait would wait for.
    #[cfg(not(floe_loom))]
    pub(crate) fn snapshot(&self, walk: impl FnOnce()) -> Result<(), crate::error::Error> {
        // Checked first: a thread inside an operation could otherwise wait below for a
        // snapshot that waits for it.
        if reclaim::inside_operation() {
            return Err(crate::error::Error::InsideOperation);
        }
        // One snapshot at a time: the flag is taken like a lock (writers only read it);
        // Acquire pairs with the previous snapshot's Release reopening.
        while self
            .paused
            .compare_exchange(false, true, StatOrdering::Acquire, StatOrdering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        /// Opens the gate however the walk ends (a visitor may panic).
        struct Reopen<'a>(&'a PlainFlag);
        impl Drop for Reopen<'_> {
            fn drop(&mut self) {
                // Release: the walk's reads happen before the writes that then resume.
                self.0.store(false, StatOrdering::Release);
            }
        }
        let _reopen = Reopen(&self.paused);
        reclaim::wait_for_operations();
        walk();
        Ok(())
    }
}
