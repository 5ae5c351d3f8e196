//! The one place that imports atomics.
//!
//! Under `cfg(loom)` every atomic the engine uses comes from loom, so the loom models in
//! `tests/loom.rs` explore the real protocol code. loom has no 128-bit atomic; the shim below
//! models one as a loom mutex around a `u128`, which gives each slot operation the atomicity
//! the real `cmpxchg16b`/`vmovdqa` provide (loom still explores every interleaving between slot
//! operations and header operations, which is where the protocols live).

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{
    fence, AtomicIsize, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicIsize, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use portable_atomic::AtomicU128;

/// Back off inside a wait loop. Under loom this yields so the model checker schedules the
/// thread being waited for.
#[inline]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// A 128-bit atomic for loom models: a mutex around the value.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

#[cfg(loom)]
impl AtomicU128 {
    pub(crate) fn new(v: u128) -> Self {
        Self(loom::sync::Mutex::new(v))
    }

    pub(crate) fn load(&self, _order: Ordering) -> u128 {
        *self.0.lock().unwrap()
    }

    pub(crate) fn store(&self, v: u128, _order: Ordering) {
        *self.0.lock().unwrap() = v;
    }

    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        _success: Ordering,
        _failure: Ordering,
    ) -> Result<u128, u128> {
        let mut guard = self.0.lock().unwrap();
        if *guard == current {
            *guard = new;
            Ok(current)
        } else {
            Err(*guard)
        }
    }
}
