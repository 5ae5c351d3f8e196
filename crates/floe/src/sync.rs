//! The one place that imports atomics.
//!
//! Under `cfg(floe_loom)` every atomic the engine uses comes from loom, so the loom models in
//! `tests/loom.rs` explore the real protocol code. The cfg is floe's own (`--cfg floe_loom`,
//! `ci/loom.sh`), as crossbeam's is `crossbeam_loom`: a program that builds its own loom
//! models with `--cfg loom` gets floe as it ships, not floe on loom's atomics (which panic
//! outside a loom model). loom has no 128-bit atomic; the shim below
//! models one faithfully: the slot's words live in an append-only list of versions and a loom
//! atomic holds the index of the current one, so a load, a store and a CAS of the whole slot
//! are one loom atomic access each, with the orderings the engine asks for (loom explores the
//! stale values a `Relaxed` load may return). Reading a line in pieces other than whole slots
//! is modelled by [`AtomicU128::load_halves`], which reads the key and the value words with
//! two separate loads: a reader can see the key of one version and the value of another,
//! exactly the tearing the seqlock's fences and version check (a key older than its value)
//! and `RawTable::confirm` (a key newer than its value) exist to catch. The SIMD loaders
//! read whole slots atomically; the models check the protocols against weaker reads.

#[cfg(not(floe_loom))]
#[cfg_attr(miri, allow(unused_imports))]
pub(crate) use core::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicIsize, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize,
    Ordering,
};

#[cfg(floe_loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicIsize, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// Statistics that no protocol reads (live tables, the sharded length counter): std atomics
/// even under loom, where they would only add states for the model checker to explore and
/// are touched outside models (tables dropped after a model ends).
pub(crate) mod stat {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
}
#[cfg(not(floe_loom))]
pub(crate) use portable_atomic::AtomicU128;

/// A mutex for rare slow paths (the dense layout's stash): loom's under `cfg(floe_loom)`, so a
/// model whose threads contend for it is scheduled rather than blocked.
#[cfg(floe_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(floe_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// A cell the delegation queues' message slots live in (`delegate::queue`): loom's under
/// `cfg(floe_loom)`, which reports a read and a write of one slot that no ordering separates as a
/// data race (how the queue's model catches a weakened ordering); otherwise a thin wrapper over
/// `core::cell::UnsafeCell` with loom's closure interface, which compiles to the bare pointer.
#[cfg(floe_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// See the `cfg(floe_loom)` twin above.
#[cfg(not(floe_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(floe_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(value))
    }

    /// Call `f` with a pointer for reading the value.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Call `f` with a pointer for writing the value.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Back off inside a wait loop. Under loom this yields so the model checker schedules the
/// thread being waited for.
#[inline]
pub(crate) fn spin() {
    #[cfg(floe_loom)]
    loom::thread::yield_now();
    #[cfg(not(floe_loom))]
    core::hint::spin_loop();
}

/// A 128-bit atomic for loom models (module docs): versions in a list only ever appended to,
/// the current one named by a loom atomic index. The list is a plain (not loom) mutex: loom
/// runs one thread at a time, so it never blocks, and it carries no ordering of its own (a
/// version's words never change once appended; the index carries every ordering).
#[cfg(floe_loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128 {
    current: loom::sync::atomic::AtomicUsize,
    versions: std::sync::Mutex<Vec<u128>>,
}

#[cfg(floe_loom)]
impl AtomicU128 {
    pub(crate) fn new(v: u128) -> Self {
        Self {
            current: loom::sync::atomic::AtomicUsize::new(0),
            versions: std::sync::Mutex::new(vec![v]),
        }
    }

    fn version(&self, index: usize) -> u128 {
        self.versions.lock().unwrap()[index]
    }

    fn append(&self, v: u128) -> usize {
        let mut versions = self.versions.lock().unwrap();
        versions.push(v);
        versions.len() - 1
    }

    pub(crate) fn load(&self, order: Ordering) -> u128 {
        self.version(self.current.load(order))
    }

    /// The low word (key) and the high word (value) read by two separate loads, as a line
    /// read by wider or narrower loads than the slot may: the word read second may come from
    /// a later version than the other. `high_first` picks which word that is.
    pub(crate) fn load_halves(&self, order: Ordering, high_first: bool) -> u128 {
        let (low, high) = if high_first {
            let high = self.version(self.current.load(order)) >> 64;
            (self.version(self.current.load(order)) as u64, high)
        } else {
            let low = self.version(self.current.load(order)) as u64;
            (low, self.version(self.current.load(order)) >> 64)
        };
        u128::from(low) | high << 64
    }

    pub(crate) fn store(&self, v: u128, order: Ordering) {
        let index = self.append(v);
        self.current.store(index, order);
    }

    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        let mut seen = self.current.load(failure);
        loop {
            let value = self.version(seen);
            if value != current {
                return Err(value);
            }
            let index = self.append(new);
            // One RMW on the index: succeeds only if the version we compared is still the
            // current one, which is what a 16-byte CAS on the words does.
            match self.current.compare_exchange(seen, index, success, failure) {
                Ok(_) => return Ok(current),
                Err(now) => seen = now,
            }
        }
    }
}

/// A crash point between two steps of a write protocol (feature `crash-points`, for the
/// persistence tests): the process aborts, as a crash would, at the `FLOE_CRASH_AT`-th point
/// reached, counting from 1. Without the feature there are no crash points
/// (`RawTable::crash_point` compiles to nothing).
#[cfg(all(feature = "crash-points", not(floe_loom)))]
#[inline(always)]
pub(crate) fn crash_point() {
    crash::reached();
}

#[cfg(all(feature = "crash-points", not(floe_loom)))]
mod crash {
    use std::sync::{
        atomic::{AtomicU64, Ordering},
        OnceLock,
    };

    static REACHED: AtomicU64 = AtomicU64::new(0);

    #[cold]
    pub(super) fn reached() {
        static TARGET: OnceLock<u64> = OnceLock::new();
        let target = *TARGET.get_or_init(|| {
            std::env::var("FLOE_CRASH_AT")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        });
        let count = REACHED.fetch_add(1, Ordering::Relaxed) + 1;
        if count == target {
            // No unwinding, no destructors, no close: the files are as the crash leaves them.
            std::process::abort();
        }
    }

    /// Crash points reached so far.
    pub(crate) fn reached_so_far() -> u64 {
        REACHED.load(Ordering::Relaxed)
    }
}

/// Crash points reached so far (feature `crash-points`).
#[cfg(all(feature = "crash-points", not(floe_loom)))]
#[doc(hidden)]
pub fn crash_points_reached() -> u64 {
    crash::reached_so_far()
}
