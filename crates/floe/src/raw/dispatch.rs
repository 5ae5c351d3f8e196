//! The backend chosen at build time, and the engine's entry points compiled for it.
//!
//! A map resolves its [`Backend`] once into a [`Loader`], a zero-sized proof that the CPU has
//! the instructions. [`dispatch!`] runs an engine operation with it: the SIMD arms call entry
//! points compiled with the feature enabled, so the whole operation (not only the match) uses
//! the wider instructions and the loaders' `#[inline(always)]` methods inline into it.

// `TableSource` is for the persistent tables, which the loom and Miri builds do not compile.
#[cfg_attr(any(floe_loom, miri), allow(unused_imports))]
use super::{loader::ScalarLoader, TableSource};
use crate::config::Backend;

// `Backend` is plain data at the bottom (`config.rs`); what it can do on this CPU is the
// dispatch's to answer, so its methods live here and the arrows keep pointing down.
impl Backend {
    /// Whether this CPU (and this build) can run the backend. `Auto` and `Scalar` always can.
    pub fn is_supported(self) -> bool {
        Loader::new(self).is_some()
    }

    /// The backend a map built with this one uses: itself, or for `Auto` the one measured
    /// fastest on this CPU; `None` if the CPU cannot run it.
    ///
    /// ```
    /// let chosen = floe::Backend::Auto.resolve().unwrap();
    /// assert_ne!(chosen, floe::Backend::Auto);
    /// ```
    pub fn resolve(self) -> Option<Backend> {
        Loader::new(self).map(|loader| loader.backend())
    }

    /// Run `Auto`'s calibration again and return nanoseconds per get of every backend this
    /// CPU has (best of several rounds on an L2-sized table); empty where there is nothing to
    /// choose. For benchmarks that report why `Auto` chose what it did.
    #[doc(hidden)]
    pub fn calibration() -> Vec<(Backend, f64)> {
        #[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
        return calibrate().map_or_else(Vec::new, |c| c.nanos_per_get);
        #[cfg(not(all(target_arch = "x86_64", not(miri), not(floe_loom))))]
        Vec::new()
    }
}

/// The resolved backend: a zero-sized proof that the CPU supports it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Loader {
    Scalar(ScalarLoader),
    #[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
    Avx2(crate::raw::loader::Avx2Loader),
    #[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
    Avx512(crate::raw::loader::Avx512Loader),
}

impl Loader {
    pub(crate) fn new(backend: Backend) -> Option<Self> {
        #[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
        {
            use crate::raw::loader::{Avx2Loader, Avx512Loader};
            match backend {
                Backend::Auto => Loader::new(calibrated()),
                Backend::Scalar => Some(Loader::Scalar(ScalarLoader)),
                Backend::Avx2 => Avx2Loader::new().map(Loader::Avx2),
                Backend::Avx512 => Avx512Loader::new().map(Loader::Avx512),
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri), not(floe_loom))))]
        match backend {
            Backend::Auto | Backend::Scalar => Some(Loader::Scalar(ScalarLoader)),
            Backend::Avx2 | Backend::Avx512 => None,
        }
    }

    pub(crate) fn backend(self) -> Backend {
        match self {
            Loader::Scalar(_) => Backend::Scalar,
            #[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
            Loader::Avx2(_) => Backend::Avx2,
            #[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
            Loader::Avx512(_) => Backend::Avx512,
        }
    }
}

/// Entry points compiled with each SIMD feature enabled, so the whole operation (not just the
/// match) is compiled for it and the backend's `#[inline(always)]` methods inline into it.
/// `$writer` turns the read loader into the one write operations use (see [`Backend::Avx512`]).
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
macro_rules! simd_entries {
    ($module:ident, $feature:literal, $loader:ty, $writer:path) => {
        pub(crate) mod $module {
            use crate::raw::{Full, Inserted, Mismatch, Moved, RawTable, Upserted};

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
            pub(crate) unsafe fn get_batch(
                raw: &RawTable,
                p: $loader,
                n: usize,
                far: usize,
                locate: impl crate::raw::ring::Locate,
                answer: impl FnMut(usize, Option<u64>),
            ) -> Result<(), usize> {
                raw.get_batch(p, n, far, locate, answer)
            }

            #[target_feature(enable = $feature)]
            #[allow(clippy::too_many_arguments)]
            pub(crate) unsafe fn run_batch(
                raw: &RawTable,
                p: $loader,
                n: usize,
                far: usize,
                locate: impl crate::raw::ring::Locate,
                op: impl Fn(usize) -> crate::raw::WordOp,
                add: impl Fn(usize, u64) -> u64,
                answer: impl FnMut(usize, crate::raw::WordDone) -> bool,
            ) -> Result<(), crate::raw::Stopped> {
                raw.run_batch(p, n, far, locate, op, add, answer)
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
            pub(crate) unsafe fn remove_if(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
                accept: impl FnMut(u64) -> bool,
            ) -> Result<Result<u64, Mismatch>, Moved> {
                raw.remove_if($writer(p), bin, key, accept)
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
            ) -> Result<Result<Upserted, Full>, Moved> {
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

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn write_local<const MODE: u8>(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
                value: u64,
            ) -> Result<Option<u64>, Full> {
                raw.write_local::<_, MODE>($writer(p), bin, key, value)
            }

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn remove_local(
                raw: &RawTable,
                p: $loader,
                bin: usize,
                key: u64,
            ) -> Option<u64> {
                raw.remove_local($writer(p), bin, key)
            }

            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn recover_bins(
                raw: &RawTable,
                p: $loader,
                range: core::ops::Range<usize>,
                rehash: crate::hash::Rehash<'_>,
                write: bool,
            ) -> crate::raw::Swept {
                raw.recover_bins(p, range, rehash, write)
            }
        }
    };
}

#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
simd_entries!(
    avx2_entries,
    "avx2",
    crate::raw::loader::Avx2Loader,
    core::convert::identity
);
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
simd_entries!(
    avx512_entries,
    "avx512f,avx2",
    crate::raw::loader::Avx512Loader,
    crate::raw::loader::LineLoader::writer
);

/// The scalar arm of [`dispatch!`], kept out of line as the SIMD entry points are. Inlined,
/// its body (portable-atomic's calls and their spills) made every dispatching function save
/// six registers and set up a 248-byte frame before the match, whichever arm it then took:
/// about twenty instructions on each AVX2 or AVX-512 get (callgrind), and a caller too big
/// to inline. Out of line, the match is a test and a tail call.
#[inline(never)]
pub(crate) fn scalar_entry<R>(op: impl FnOnce() -> R) -> R {
    op()
}

/// Run engine operation `$op` on table `$table` with the backend of loader `$loader` (with one
/// const argument `$mode` after the loader's type, for the operations that take one).
macro_rules! dispatch {
    ($loader:expr, $table:expr, $op:ident $(::<$mode:ident>)? ($($arg:expr),*)) => {{
        let raw: &$crate::raw::RawTable = $table;
        match $loader {
            $crate::raw::dispatch::Loader::Scalar(p) => $crate::raw::dispatch::scalar_entry(
                || raw.$op $(::<_, { $mode }>)? (p, $($arg),*),
            ),
            #[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
            // SAFETY: the loader token proves the CPU supports AVX2.
            $crate::raw::dispatch::Loader::Avx2(p) => unsafe {
                $crate::raw::dispatch::avx2_entries::$op $(::<{ $mode }>)? (raw, p, $($arg),*)
            },
            #[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
            // SAFETY: the loader token proves the CPU supports AVX-512F.
            $crate::raw::dispatch::Loader::Avx512(p) => unsafe {
                $crate::raw::dispatch::avx512_entries::$op $(::<{ $mode }>)? (raw, p, $($arg),*)
            },
        }
    }};
}
pub(crate) use dispatch;

/// The backend `Auto` stands for on this CPU: the one that ran gets fastest in a short
/// calibration, made once per process at the first `Auto` map. Which backend wins depends on
/// the CPU, not on the feature list: on the Intel hosts AVX-512 matching ran floe's gets ~1.8x
/// scalar, while the AMD hosts' layout-lab runs put some wide kernels below scalar
/// (`BENCHMARKS.md`, "The SIMD choice per CPU"), so it is measured rather than assumed.
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
fn calibrated() -> Backend {
    static CHOICE: std::sync::OnceLock<Backend> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| calibrate().map_or(Backend::Scalar, |c| c.choice))
}

/// What [`calibrate`] measured: nanoseconds per get of each supported backend (the median of
/// its rounds), and the choice.
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
#[derive(Clone, Debug)]
pub(crate) struct Calibration {
    pub(crate) nanos_per_get: Vec<(Backend, f64)>,
    pub(crate) choice: Backend,
}

/// Time batched gets (half hits, half misses) on a table that fits in the L2 cache with every
/// backend the CPU has, interleaved over several rounds after one untimed pass, and pick by the
/// rounds' paired ratios: a wider backend is kept unless the median of its rounds' times over
/// the narrower one's says it is more than [`WIDER_LOSES_ABOVE`] slower. About a millisecond.
/// `None` if the table cannot be had.
///
/// Why the wider one has the benefit of the doubt: on the AMD EPYC hosts (2026-12-01) AVX-512
/// ran these gets 1-7% faster than AVX2 in every one of 36 calibrations, and batched gets at
/// DRAM size 5-8% faster, but the old rule (the wider must win by 2%, best of seven rounds, the
/// first round cold) chose AVX2 in 9 processes of 30, so a benchmark's backend, and its speed,
/// changed from run to run. Within noise the two are equal on cache-resident tables and the
/// wider is ahead on large ones; where a wider kernel is truly slower (some AMD layout-lab
/// kernels ran below scalar), it loses by more than noise.
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
pub(crate) fn calibrate() -> Option<Calibration> {
    use std::{hint::black_box, sync::Arc, time::Instant};

    use super::ring::LocateWith;

    use super::{
        loader::{Avx2Loader, Avx512Loader},
        DeadKeys, Geometry, RawTable,
    };
    use crate::hash::fastrange;

    const BINS: usize = 4096;
    const KEYS: u64 = 7000;
    const ROUNDS: usize = 9;
    let mix = |word: u64| (word ^ (word >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let dead = DeadKeys::find(&mix, BINS)?;
    let geometry = Geometry {
        bins: BINS,
        link_buckets: BINS / 4,
        transfer_reserve: 0,
        huge_pages: false,
    };
    let table = RawTable::new(
        geometry,
        dead,
        Arc::default(),
        TableSource::Fresh(None),
        None,
    )?;
    for key in 1..=KEYS {
        let _ = table.insert(ScalarLoader, fastrange(mix(key), BINS), key, key);
    }
    // Keys 1..=KEYS are present (those the pool had room for), the rest absent.
    let queries: Vec<(usize, u64)> = (0..4096u64)
        .map(|i| mix(i ^ 0x5555).wrapping_rem(2 * KEYS) + 1)
        .map(|key| (fastrange(mix(key), BINS), key))
        .collect();
    let mut candidates = vec![Loader::Scalar(ScalarLoader)];
    candidates.extend(Avx2Loader::new().map(Loader::Avx2));
    candidates.extend(Avx512Loader::new().map(Loader::Avx512));
    // rounds[r][c]: nanoseconds a get of candidate c in round r.
    let mut rounds: Vec<Vec<f64>> = Vec::with_capacity(ROUNDS);
    // Through the batched get (a ring with no prefetch: the table is in the cache), where
    // the backend's share of a get's instructions is largest: single gets measured within
    // noise of each other here while batched gets at DRAM size ran 1.3x faster with AVX-512
    // than with AVX2 on the AMD EPYC hosts, and the single-get calibration flipped between
    // the two from run to run.
    let located: Vec<(u64, u64)> = queries
        .iter()
        .map(|&(bin, key)| (((bin as u64) << 52) | 1, key))
        .collect();
    // The first pass (cold caches, the clock ramping up) is not timed.
    for round in 0..=ROUNDS {
        let times = candidates
            .iter()
            .map(|loader| {
                let start = Instant::now();
                let mut found = 0u64;
                let locate = LocateWith(|i: usize| black_box(located[i]));
                let answer = |_, value: Option<u64>| found = found.wrapping_add(value.unwrap_or(1));
                let _ = dispatch!(*loader, &table, get_batch(located.len(), 0, locate, answer));
                black_box(found);
                start.elapsed().as_nanos() as f64 / queries.len() as f64
            })
            .collect();
        if round > 0 {
            rounds.push(times);
        }
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    // Candidates go from narrow to wide: each wider one takes over unless it lost clearly.
    let mut choice = 0;
    for wider in 1..candidates.len() {
        let ratio = median(rounds.iter().map(|r| r[wider] / r[choice]).collect());
        if ratio <= 1.0 + WIDER_LOSES_ABOVE {
            choice = wider;
        }
    }
    Some(Calibration {
        nanos_per_get: (0..candidates.len())
            .map(|c| {
                let nanos = median(rounds.iter().map(|r| r[c]).collect());
                (candidates[c].backend(), nanos)
            })
            .collect(),
        choice: candidates[choice].backend(),
    })
}

/// How much slower (as a fraction) a wider backend's calibration may run than a narrower one's
/// and still be chosen: the spread of the paired rounds on a quiet host (`calibrate`).
#[cfg(all(target_arch = "x86_64", not(miri), not(floe_loom)))]
const WIDER_LOSES_ABOVE: f64 = 0.03;

#[cfg(all(test, target_arch = "x86_64", not(miri), not(floe_loom)))]
mod tests {
    use super::*;

    #[test]
    fn auto_measures_every_supported_backend_and_picks_one_of_them() {
        let calibration = calibrate().expect("a small table");
        let measured: Vec<Backend> = calibration.nanos_per_get.iter().map(|&(b, _)| b).collect();
        for backend in [Backend::Scalar, Backend::Avx2, Backend::Avx512] {
            assert_eq!(measured.contains(&backend), backend.is_supported());
        }
        assert!(calibration
            .nanos_per_get
            .iter()
            .all(|&(_, ns)| ns > 0.0 && ns.is_finite()));
        assert!(measured.contains(&calibration.choice));
        let auto = Backend::Auto.resolve().unwrap();
        assert!(auto != Backend::Auto && auto.is_supported());
        println!(
            "{:?} -> {:?}",
            calibration.nanos_per_get, calibration.choice
        );
    }
}
