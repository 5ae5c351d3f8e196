//! The driver a facade holds ([`Driver`]): the default layout's (`RawMap`, `bins/driver.rs`)
//! or the dense one's (`DenseMap`, `dense/driver.rs`). It implements the driver contract
//! (`contract.rs`, `TableDriver`: each operation's promise and errors, and how to add one)
//! by forwarding: one match on the layout a call, which a map never changes (the branch
//! predicts perfectly), then the layout's own code; the forwarding is generated from the
//! contract's list, so nothing here repeats a signature.

pub(crate) use super::contract::TableDriver;
use super::{
    bins::driver::{Pinned, RawMap},
    contract::driver_contract,
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

/// Writes `Driver`'s implementation of the contract from its list (`contract.rs`): each
/// method one match on the layout, calling the same method of the layout's driver (with the
/// method's const argument, if it has one).
macro_rules! forward_to_layout {
    (
        $(#[$trait_meta:meta])*
        trait $contract:ident;
        shared {$(
            $(#[$meta:meta])*
            fn $name:ident $(<const $mode:ident: $mode_ty:ty>)? (
                $($arg:ident: $ty:ty),* $(,)?
            ) $(-> $ret:ty)?;
        )*}
        owned {$(
            $(#[$owned_meta:meta])*
            fn $owned:ident $(<const $owned_mode:ident: $owned_mode_ty:ty>)? (
                $($owned_arg:ident: $owned_ty:ty),* $(,)?
            ) $(-> $owned_ret:ty)?;
        )*}
    ) => {
        impl $contract for Driver {
            $(
                $(#[$meta])*
                #[inline(always)]
                fn $name $(<const $mode: $mode_ty>)? (&self, $($arg: $ty),*) $(-> $ret)? {
                    match self {
                        Driver::Bins(map) => map.$name $(::<$mode>)? ($($arg),*),
                        Driver::Dense(map) => map.$name $(::<$mode>)? ($($arg),*),
                    }
                }
            )*
            $(
                $(#[$owned_meta])*
                #[inline(always)]
                fn $owned $(<const $owned_mode: $owned_mode_ty>)? (
                    &mut self, $($owned_arg: $owned_ty),*
                ) $(-> $owned_ret)? {
                    match self {
                        Driver::Bins(map) => map.$owned $(::<$owned_mode>)? ($($owned_arg),*),
                        Driver::Dense(map) => map.$owned $(::<$owned_mode>)? ($($owned_arg),*),
                    }
                }
            )*
        }
    };
}

driver_contract!(forward_to_layout);

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

    /// The map pinned for a batch: prefetches of many keys share one announcement.
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
}
