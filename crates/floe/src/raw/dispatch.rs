//! The backend chosen at build time, and the engine's entry points compiled for it.
//!
//! A map resolves its [`Backend`] once into a [`Loader`], a zero-sized proof that the CPU has
//! the instructions. [`dispatch!`] runs an engine operation with it: the SIMD arms call entry
//! points compiled with the feature enabled, so the whole operation (not only the match) uses
//! the wider instructions and the loaders' `#[inline(always)]` methods inline into it.

use super::loader::ScalarLoader;
use crate::config::Backend;

/// The resolved backend: a zero-sized proof that the CPU supports it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Loader {
    Scalar(ScalarLoader),
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    Avx2(crate::raw::loader::Avx2Loader),
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    Avx512(crate::raw::loader::Avx512Loader),
}

impl Loader {
    pub(crate) fn new(backend: Backend) -> Option<Self> {
        #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
        {
            use crate::raw::loader::{Avx2Loader, Avx512Loader};
            match backend {
                Backend::Auto => Some(
                    Avx512Loader::new()
                        .map(Loader::Avx512)
                        .or_else(|| Avx2Loader::new().map(Loader::Avx2))
                        .unwrap_or(Loader::Scalar(ScalarLoader)),
                ),
                Backend::Scalar => Some(Loader::Scalar(ScalarLoader)),
                Backend::Avx2 => Avx2Loader::new().map(Loader::Avx2),
                Backend::Avx512 => Avx512Loader::new().map(Loader::Avx512),
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
        match backend {
            Backend::Auto | Backend::Scalar => Some(Loader::Scalar(ScalarLoader)),
            Backend::Avx2 | Backend::Avx512 => None,
        }
    }

    pub(crate) fn backend(self) -> Backend {
        match self {
            Loader::Scalar(_) => Backend::Scalar,
            #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
            Loader::Avx2(_) => Backend::Avx2,
            #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
            Loader::Avx512(_) => Backend::Avx512,
        }
    }
}

/// Entry points compiled with each SIMD feature enabled, so the whole operation (not just the
/// match) is compiled for it and the backend's `#[inline(always)]` methods inline into it.
/// `$writer` turns the read loader into the one write operations use (see [`Backend::Avx512`]).
#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
macro_rules! simd_entries {
    ($module:ident, $feature:literal, $loader:ty, $writer:path) => {
        pub(crate) mod $module {
            use crate::raw::{Full, Inserted, Mismatch, Moved, RawTable};

            // Safety (every function): the caller holds a `$loader`, which exists only on CPUs
            // with `$feature`.

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn get(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
            ) -> Result<Option<u64>, Moved> {
                raw.get(p, bin, key)
            }

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn insert(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
                value: u64,
            ) -> Result<Result<Inserted, Full>, Moved> {
                raw.insert($writer(p), bin, key, value)
            }

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn remove(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
            ) -> Result<Option<u64>, Moved> {
                raw.remove($writer(p), bin, key)
            }

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn update(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
                f: impl FnMut(u64) -> u64,
            ) -> Result<Option<(u64, u64)>, Moved> {
                raw.update($writer(p), bin, key, f)
            }

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn upsert_with(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
                init: u64,
                f: impl FnMut(u64) -> u64,
            ) -> Result<Result<Option<u64>, Full>, Moved> {
                raw.upsert_with($writer(p), bin, key, init, f)
            }

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn compare_exchange(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
                current: u64,
                new: u64,
            ) -> Result<Result<u64, Mismatch>, Moved> {
                raw.compare_exchange($writer(p), bin, key, current, new)
            }
        }
    };
}

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
simd_entries!(
    avx2_entries,
    "avx2",
    crate::raw::loader::Avx2Loader,
    core::convert::identity
);
#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
simd_entries!(
    avx512_entries,
    "avx512f,avx2",
    crate::raw::loader::Avx512Loader,
    crate::raw::loader::Avx512Loader::writer
);

/// Run engine operation `$op` on table `$table` with the backend of loader `$loader`.
macro_rules! dispatch {
    ($loader:expr, $table:expr, $op:ident($($arg:expr),*)) => {{
        let raw: &$crate::raw::RawTable = $table;
        match $loader {
            $crate::raw::dispatch::Loader::Scalar(p) => raw.$op(p, $($arg),*),
            #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
            // SAFETY: the loader token proves the CPU supports AVX2.
            $crate::raw::dispatch::Loader::Avx2(p) => unsafe {
                $crate::raw::dispatch::avx2_entries::$op(raw, p, $($arg),*)
            },
            #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
            // SAFETY: the loader token proves the CPU supports AVX-512F.
            $crate::raw::dispatch::Loader::Avx512(p) => unsafe {
                $crate::raw::dispatch::avx512_entries::$op(raw, p, $($arg),*)
            },
        }
    }};
}
pub(crate) use dispatch;
