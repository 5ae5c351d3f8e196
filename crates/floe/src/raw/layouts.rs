//! The driver of the layout a map was built with: the default layout's (`bins/driver.rs`,
//! `RawMap`: DLHT bins with link buckets) or the dense one's (`dense/driver.rs`, `DenseMap`:
//! headerless lines, a home and an alternative per key). The facades hold a [`Driver`] and
//! call it as they would either; each call is one match on the layout, which a map never
//! changes (the branch predicts perfectly), then the layout's own code.
//!
//! What the dense layout does not offer answers [`Error::NotInLayout`] where the call can
//! return an error, and is documented on the facade where it cannot: `FlatMap`'s
//! persistence (the default layout's files).
//! Single-thread (`LocalMap`) writes take the dense layout's shared path.

use super::{
    bins::driver::{Pinned, RawMap},
    dense::driver::{lines_for, DenseMap, DensePinned},
    Inserted, Mismatch, Stopped, WordDone, WordOp,
};
use crate::{
    config::{Backend, Config, Layout, Stats},
    error::Error,
    hash::Rehash,
};

/// One map's driver, of its layout (module docs).
pub(crate) enum Driver {
    /// The default layout.
    Bins(RawMap),
    /// `Layout::Dense`.
    Dense(DenseMap),
}

/// Call `$call` on whichever driver `$driver` holds.
macro_rules! either {
    ($driver:expr, $map:ident => $call:expr) => {
        match $driver {
            Driver::Bins($map) => $call,
            Driver::Dense($map) => $call,
        }
    };
}

/// A driver with an announcement held, for a batch (`RawMap::pin`).
pub(crate) enum PinnedDriver<'m> {
    Bins(Pinned<'m>),
    Dense(DensePinned<'m>),
}

impl PinnedDriver<'_> {
    /// Start loading the line a key's lookup reads first.
    #[inline(always)]
    pub(crate) fn prefetch_bin(&self, hash: u64) {
        match self {
            PinnedDriver::Bins(pinned) => pinned.prefetch_bin(hash),
            PinnedDriver::Dense(pinned) => pinned.prefetch_home(hash),
        }
    }

    /// Start loading the default layout's link buckets of a key's bin; whether there are
    /// any. The dense layout reads a second line only for keys away from home, which it
    /// cannot tell before reading the first: nothing.
    #[inline(always)]
    pub(crate) fn prefetch_chain(&self, hash: u64) -> bool {
        match self {
            PinnedDriver::Bins(pinned) => pinned.prefetch_chain(hash),
            PinnedDriver::Dense(_) => false,
        }
    }
}

impl Driver {
    /// The map `config` describes, of its layout.
    ///
    /// # Errors
    /// As `Builder::build`; `InvalidConfig` for the default layout's sizing options (`bins`,
    /// `link_buckets`) on a dense map.
    pub(crate) fn new(config: &Config, rehash: Rehash<'_>) -> Result<Self, Error> {
        let driver = Self::build(config, rehash)?;
        if config.populate {
            // A hint, as huge pages are: a kernel that cannot leaves first touches to fault.
            let _ = driver.populate();
        }
        Ok(driver)
    }

    fn build(config: &Config, rehash: Rehash<'_>) -> Result<Self, Error> {
        match config.layout {
            Layout::Bins => RawMap::new(config, rehash).map(Driver::Bins),
            Layout::Dense => {
                if config.bins.is_some() || config.link_buckets.is_some() {
                    return Err(Error::InvalidConfig(
                        "bins and link_buckets size the default layout; size a dense map by capacity",
                    ));
                }
                // `max_bins` counts 64-byte lines, a dense line like a bin.
                let first = lines_for(config.capacity)?;
                DenseMap::with_lines(
                    first,
                    config.max_bins,
                    config.backend,
                    config.resize_mode,
                    config.huge_pages,
                    config.grow_ahead,
                    rehash,
                )
                .map(Driver::Dense)
            }
        }
    }

    pub(crate) fn layout(&self) -> Layout {
        match self {
            Driver::Bins(_) => Layout::Bins,
            Driver::Dense(_) => Layout::Dense,
        }
    }

    pub(crate) fn backend(&self) -> Backend {
        either!(self, map => map.backend())
    }

    #[inline(always)]
    pub(crate) fn get(&self, hash: u64, word: u64, rehash: Rehash<'_>) -> Option<u64> {
        either!(self, map => map.get(hash, word, rehash))
    }

    /// Gets of requests `0..n` through a lookahead ring `far` deep (`ring.rs`): `locate(i)` is
    /// request i's hash and key word, `answer(i, value)` takes its answer.
    #[inline(always)]
    pub(crate) fn get_batch(
        &self,
        n: usize,
        far: usize,
        locate: impl Fn(usize) -> (u64, u64),
        answer: impl FnMut(usize, Option<u64>),
        rehash: Rehash<'_>,
    ) {
        either!(self, map => map.get_batch(n, far, locate, answer, rehash))
    }

    /// A batch of requests through the engine's batch loop (`RawMap::run_batch`); `None`
    /// where there is none (the dense layout, a migrating or writing-back table): the caller
    /// runs them one by one.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_batch(
        &self,
        n: usize,
        far: usize,
        locate: impl Fn(usize) -> (u64, u64),
        op: impl Fn(usize) -> WordOp,
        add: impl Fn(usize, u64) -> u64,
        answer: impl FnMut(usize, WordDone) -> bool,
    ) -> Option<Result<(), Stopped>> {
        match self {
            Driver::Bins(raw) => raw.run_batch(n, far, locate, op, add, answer),
            Driver::Dense(_) => None,
        }
    }

    #[inline(always)]
    pub(crate) fn insert(
        &self,
        hash: u64,
        word: u64,
        value: u64,
        rehash: Rehash<'_>,
    ) -> Result<Inserted, Error> {
        either!(self, map => map.insert(hash, word, value, rehash))
    }

    #[inline(always)]
    pub(crate) fn upsert_with(
        &self,
        hash: u64,
        word: u64,
        init: u64,
        f: impl FnMut(u64) -> u64,
        rehash: Rehash<'_>,
    ) -> Result<Option<u64>, Error> {
        either!(self, map => map.upsert_with(hash, word, init, f, rehash))
    }

    #[inline(always)]
    pub(crate) fn update(
        &self,
        hash: u64,
        word: u64,
        f: impl FnMut(u64) -> u64,
        rehash: Rehash<'_>,
    ) -> Option<(u64, u64)> {
        either!(self, map => map.update(hash, word, f, rehash))
    }

    #[inline(always)]
    pub(crate) fn compare_exchange(
        &self,
        hash: u64,
        word: u64,
        current: u64,
        new: u64,
        rehash: Rehash<'_>,
    ) -> Result<u64, Mismatch> {
        either!(self, map => map.compare_exchange(hash, word, current, new, rehash))
    }

    #[inline(always)]
    pub(crate) fn remove(&self, hash: u64, word: u64, rehash: Rehash<'_>) -> Option<u64> {
        either!(self, map => map.remove(hash, word, rehash))
    }

    #[inline(always)]
    pub(crate) fn remove_if(
        &self,
        hash: u64,
        word: u64,
        accept: impl FnMut(u64) -> bool,
        rehash: Rehash<'_>,
    ) -> Result<u64, Mismatch> {
        either!(self, map => map.remove_if(hash, word, accept, rehash))
    }

    pub(crate) fn insert_shadow(
        &self,
        hash: u64,
        word: u64,
        rehash: Rehash<'_>,
    ) -> Result<Inserted, Error> {
        either!(self, map => map.insert_shadow(hash, word, rehash))
    }

    /// Whether there was a shadow to resolve.
    pub(crate) fn resolve_shadow(
        &self,
        hash: u64,
        word: u64,
        commit: Option<u64>,
        rehash: Rehash<'_>,
    ) -> bool {
        either!(self, map => map.resolve_shadow(hash, word, commit, rehash))
    }

    #[inline(always)]
    pub(crate) fn prefetch(&self, hash: u64) {
        either!(self, map => map.prefetch(hash))
    }

    #[inline(always)]
    pub(crate) fn prefetch_chain(&self, hash: u64) -> bool {
        match self {
            Driver::Bins(raw) => raw.prefetch_chain(hash),
            Driver::Dense(_) => false,
        }
    }

    #[inline(always)]
    pub(crate) fn pin(&self) -> PinnedDriver<'_> {
        match self {
            Driver::Bins(raw) => PinnedDriver::Bins(raw.pin()),
            Driver::Dense(map) => PinnedDriver::Dense(map.pin()),
        }
    }

    /// As `pin`, for a batch with writes (past the snapshot gate, `gate.rs`).
    #[inline(always)]
    pub(crate) fn pin_writer(&self) -> PinnedDriver<'_> {
        match self {
            Driver::Bins(raw) => PinnedDriver::Bins(raw.pin_writer()),
            Driver::Dense(map) => PinnedDriver::Dense(map.pin_writer()),
        }
    }

    /// Prepare for single-thread use; the shadows aborted.
    pub(crate) fn settle_local(&mut self, rehash: Rehash<'_>) -> usize {
        either!(self, map => map.settle_local(rehash))
    }

    /// A single-thread write as `MODE` says (`raw/bins/local.rs`); the dense layout takes its
    /// shared path.
    #[inline(always)]
    pub(crate) fn write_local<const MODE: u8>(
        &mut self,
        hash: u64,
        word: u64,
        value: u64,
        rehash: Rehash<'_>,
    ) -> Result<Option<u64>, Error> {
        use super::{IF_ABSENT, IF_PRESENT};
        match self {
            Driver::Bins(raw) => raw.write_local::<MODE>(hash, word, value, rehash),
            Driver::Dense(map) => {
                // A shadow of the key leaked through `LocalMap::as_shared` would make the
                // insert refuse and the upsert wait for ever; owned, the map has no handle
                // that could resolve it: aborted, as the default layout's local writes do.
                map.abort_leaked_shadow(hash, word, rehash);
                match MODE {
                    IF_ABSENT => {
                        map.insert(hash, word, value, rehash)
                            .map(|inserted| match inserted {
                                Inserted::Exists(present) => Some(present),
                                Inserted::New | Inserted::Shadowed => None,
                            })
                    }
                    IF_PRESENT => Ok(map
                        .update(hash, word, |_| value, rehash)
                        .map(|(old, _)| old)),
                    _ => map.upsert_with(hash, word, value, |_| value, rehash),
                }
            }
        }
    }

    #[inline(always)]
    pub(crate) fn remove_local(&mut self, hash: u64, word: u64, rehash: Rehash<'_>) -> Option<u64> {
        match self {
            Driver::Bins(raw) => raw.remove_local(hash, word, rehash),
            Driver::Dense(map) => map.remove(hash, word, rehash),
        }
    }

    pub(crate) fn clear(
        &self,
        rehash: Rehash<'_>,
        keep: &dyn Fn(u64, u64) -> bool,
        taken: impl FnMut(u64),
    ) {
        either!(self, map => map.clear(rehash, keep, taken))
    }

    /// # Errors
    /// `InsideOperation` as `RawMap::snapshot`.
    #[cfg(not(loom))]
    pub(crate) fn snapshot(
        &self,
        rehash: Rehash<'_>,
        visit: impl FnMut(u64, u64),
    ) -> Result<(), Error> {
        if either!(self, map => map.snapshot(rehash, visit)) {
            Ok(())
        } else {
            Err(Error::InsideOperation)
        }
    }

    pub(crate) fn len(&self) -> usize {
        either!(self, map => map.len())
    }

    pub(crate) fn capacity(&self) -> usize {
        either!(self, map => map.capacity())
    }

    pub(crate) fn table_bytes(&self) -> usize {
        either!(self, map => map.table_bytes())
    }

    pub(crate) fn stats(&self) -> Stats {
        either!(self, map => map.stats())
    }

    /// Fault the current table's memory in (`Builder::populate`).
    pub(crate) fn populate(&self) -> bool {
        either!(self, map => map.populate())
    }

    pub(crate) fn for_each(&self, rehash: Rehash<'_>, visit: impl FnMut(u64, u64)) {
        either!(self, map => map.for_each(rehash, visit))
    }

    /// An iterator's step (`RawMap::walk_run`). A dense map's keys are not ordered by hash
    /// in its lines (a key away from home sits in a line its hash does not order), so its
    /// walk is one step: every pair, read as `for_each` reads them.
    pub(crate) fn walk_run(
        &self,
        start: u64,
        rehash: Rehash<'_>,
        visit: impl FnMut(u64, u64),
    ) -> Option<u64> {
        match self {
            Driver::Bins(raw) => raw.walk_run(start, rehash, visit),
            Driver::Dense(map) => {
                map.for_each(rehash, visit);
                None
            }
        }
    }

    pub(crate) fn reserve(&self, additional: usize, rehash: Rehash<'_>) -> Result<(), Error> {
        either!(self, map => map.reserve(additional, rehash))
    }

    pub(crate) fn shrink_to_fit(&self, rehash: Rehash<'_>) -> Result<bool, Error> {
        either!(self, map => map.shrink_to_fit(rehash))
    }

    pub(crate) fn check_invariants(&self, rehash: Rehash<'_>) -> usize {
        either!(self, map => map.check_invariants(rehash))
    }

    /// The default layout's driver of a persistent map (only the default layout has files).
    #[cfg(not(loom))]
    pub(crate) fn is_persistent(&self) -> bool {
        matches!(self, Driver::Bins(raw) if raw.is_persistent())
    }

    #[cfg(not(loom))]
    pub(crate) fn checkpoint(&self) -> Result<(), Error> {
        match self {
            Driver::Bins(raw) => raw.checkpoint(),
            Driver::Dense(_) => Ok(()),
        }
    }

    #[cfg(not(loom))]
    pub(crate) fn close(&mut self) -> Result<(), Error> {
        match self {
            Driver::Bins(raw) => raw.close(),
            Driver::Dense(_) => Ok(()),
        }
    }
}
