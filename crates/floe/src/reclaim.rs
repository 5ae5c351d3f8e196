//! When a replaced table may be freed: after every thread that could still be reading it has
//! left the map.
//!
//! Every map operation runs inside a guard of the map's [`seize`] collector (hyaline-style
//! reference counting of retired objects; entering a guard costs a thread-local store and a
//! compiler fence on Linux, where the reclaimer pays for an asymmetric barrier instead). The
//! thread that completes a migration retires the old table through its guard; the table is
//! freed when the last guard that was active at the retirement is dropped, with no call from
//! the user. Freeing a large table (unmapping it) happens on a thread of its own, so that no
//! operation waits for it (`free_table`).
//!
//! seize hands a retired batch to the threads active at that moment one entry per thread, and
//! waits for more retirements while a batch has fewer entries than active threads. A map
//! retires one table per growth, so a lone table could wait for the next growth (keeping a
//! whole old table allocated); `retire` therefore pads the batch with zero-sized entries so
//! that the table's batch goes out at once (with one heavy barrier: the batch size is exactly
//! the table plus its padding).
//!
//! The padding does not depend on a guess of the thread count (one made from the core count
//! was too small: 96 threads inside map operations on a 2-core machine kept a retired table
//! alive after they all finished). It is [`RETIRE_BATCH`] entries, so the table goes out at
//! once whenever at most that many threads are inside operations on the map at the moment
//! it is retired; with more, it goes out with the next growth's retirement or when the map
//! is dropped. An entry is a few words and the padding costs nothing to reclaim (zero-sized
//! boxes), so the price is one vector of about 100 KiB per growth, which moves a table.
//!
//! Under loom (whose models cover the bin protocols, not reclamation) retired tables are kept
//! until the map is dropped.

use crate::{raw::RawTable, sync::AtomicPtr, sync::Ordering};

#[cfg(not(loom))]
pub(crate) struct Collector {
    seize: seize::Collector,
    /// Entries a retirement is padded to (module docs).
    pad: usize,
}

#[cfg(not(loom))]
pub(crate) type Guard<'a> = seize::LocalGuard<'a>;

#[cfg(not(loom))]
impl Collector {
    pub(crate) fn new() -> Self {
        // A retirement fills exactly one batch, so it is attempted (one heavy barrier, ~80 us
        // here) once, not once per entry.
        Collector {
            seize: seize::Collector::new().batch_size(RETIRE_BATCH),
            pad: RETIRE_BATCH - 1,
        }
    }

    #[inline(always)]
    pub(crate) fn enter(&self) -> Guard<'_> {
        self.seize.enter()
    }

    /// The table `current` points to, protected by `guard`.
    #[inline(always)]
    pub(crate) fn load<'g>(
        &self,
        current: &AtomicPtr<RawTable>,
        guard: &'g Guard<'_>,
    ) -> &'g RawTable {
        use seize::Guard as _;
        // Acquire: pairs with the Release store that made this table current, so its
        // contents (and every transfer into it) are visible.
        let table = guard.protect(current, Ordering::Acquire);
        // SAFETY: `current` always points to a live table; one that is replaced is retired
        // through the collector and freed only after every guard active at its retirement
        // (ours included, if we loaded it before) is dropped.
        unsafe { &*table }
    }

    /// Free `table` (no longer reachable from the map) once no guard can still see it.
    ///
    /// # Safety
    /// `table` came from `Box::into_raw`, is no longer reachable by new operations, and is
    /// retired once.
    pub(crate) unsafe fn retire(&self, guard: &Guard<'_>, table: *mut RawTable) {
        use seize::Guard as _;
        // SAFETY: caller's contract; `free_table` drops the Box.
        unsafe { guard.defer_retire(table, free_table) };
        for _ in 0..self.pad {
            // SAFETY: a fresh zero-sized Box (no allocation), retired once; dropping it does
            // nothing.
            unsafe { guard.defer_retire(Box::into_raw(Box::new(())), seize::reclaim::boxed) };
        }
    }
}

/// Entries of one retirement: the table and its padding (module docs). A power of two (seize
/// rounds batch sizes up to one).
#[cfg(not(loom))]
const RETIRE_BATCH: usize = 4096;

/// Tables at least this large are freed on a thread of their own (module docs).
#[cfg(not(loom))]
const FREE_ASIDE_BYTES: usize = 64 << 20;

/// seize's reclaimer for a retired table. Unmapping a table of gigabytes takes tens of
/// milliseconds, and it runs in whichever operation drops the last guard that could see the
/// table: that operation would stall for it (measured: the 10-40 ms maxima of inserts and the
/// dips of gets while a map grew). Large tables are therefore dropped on a short-lived thread
/// of their own; if no thread can be started, here.
///
/// # Safety
/// `table` came from `Box::into_raw` and nothing can reach it any more.
#[cfg(not(loom))]
unsafe fn free_table(table: *mut RawTable, _collector: &seize::Collector) {
    // SAFETY: caller's contract.
    let table = unsafe { Box::from_raw(table) };
    if table.allocated_bytes() >= FREE_ASIDE_BYTES {
        // If no thread can be started, `spawn` drops the closure, and the table with it, here.
        let _ = std::thread::Builder::new()
            .name("floe-free".into())
            .spawn(move || drop(table));
    }
}

#[cfg(loom)]
pub(crate) struct Collector(std::sync::Mutex<Vec<usize>>);

#[cfg(loom)]
pub(crate) struct Guard<'a>(core::marker::PhantomData<&'a ()>);

#[cfg(loom)]
impl Collector {
    pub(crate) fn new() -> Self {
        Collector(std::sync::Mutex::new(Vec::new()))
    }

    pub(crate) fn enter(&self) -> Guard<'_> {
        Guard(core::marker::PhantomData)
    }

    pub(crate) fn load<'g>(
        &self,
        current: &AtomicPtr<RawTable>,
        _guard: &'g Guard<'_>,
    ) -> &'g RawTable {
        // SAFETY: under loom no table is freed before the map is dropped.
        unsafe { &*current.load(Ordering::Acquire) }
    }

    /// # Safety
    /// As the non-loom `retire`.
    pub(crate) unsafe fn retire(&self, _guard: &Guard<'_>, table: *mut RawTable) {
        self.0.lock().unwrap().push(table as usize);
    }
}

#[cfg(loom)]
impl Drop for Collector {
    fn drop(&mut self) {
        for &table in self.0.lock().unwrap().iter() {
            // SAFETY: retired tables came from `Box::into_raw` and are retired once.
            drop(unsafe { Box::from_raw(table as *mut RawTable) });
        }
    }
}
