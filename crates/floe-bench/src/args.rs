//! The flags the measuring subcommands share (`Common`: keys, threads, maps, hash, outputs),
//! the small conversions from flags to the bench's own types, and [`Failure`], what every
//! subcommand answers (`main.rs` turns it into the exit code). Each subcommand's own flags
//! live beside it (`RunArgs` in run.rs, `JoinArgs` in join.rs...). No measurement here.

use std::path::PathBuf;

use clap::{Args, Parser, ValueEnum};
use floe::{
    hash::{Crc32, WyHash},
    Backend,
};

use crate::{
    keys::parse_count,
    maps::{AnyHash, MapKind},
    measure::Workers,
};

/// Flags every measurement shares.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Keys (the table's capacity and key space; accepts 2^25, 32M, 33554432).
    #[arg(long, default_value = "2^25", value_parser = parse_count)]
    pub keys: u64,
    /// Thread counts, comma separated [default: 1 and all cores; the suite: all cores].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Seconds per timed run of a cycling workload [default: 1 for the suite, 2 for run].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Operations per timed run instead of seconds (total over threads; the run-once
    /// workloads' operation count).
    #[arg(long, value_parser = parse_count)]
    pub ops: Option<u64>,
    /// Repeats of every measurement (median, min and max are reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Maps, comma separated [default: floe,dashmap,papaya,scc,leapfrog].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub maps: Vec<MapKind>,
    /// floe's matching backends (`all` = every one the CPU supports).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    pub backend: Vec<BackendArg>,
    /// Hash function, for every map.
    #[arg(long, value_enum, default_value = "mix64")]
    pub hash: HashArg,
    /// Transparent huge pages for floe's table and the ceiling array.
    #[arg(long, value_enum, default_value = "on")]
    pub huge_pages: OnOff,
    /// Fault floe's first table in when it is built (`Builder::populate`), as DRAMHiT writes
    /// its whole table when allocating it: a fill then measures inserts, not first touches.
    /// The peers' tables are faulted in by their first touches either way.
    #[arg(long, value_enum, default_value = "off")]
    pub populate: OnOff,
    /// Sample per-operation latency (one operation in 256) into HDR histograms.
    #[arg(long, value_enum, default_value = "on")]
    pub latency: OnOff,
    /// Measure RSS growth per key of the peers in child processes.
    #[arg(long, value_enum, default_value = "on")]
    pub memory: OnOff,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the results as CSV here.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write the thread-scaling chart (SVG) here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrefetchArg {
    Auto,
    Always,
    Never,
}

impl PrefetchArg {
    pub fn floe(self) -> floe::Prefetch {
        match self {
            PrefetchArg::Auto => floe::Prefetch::Auto,
            PrefetchArg::Always => floe::Prefetch::Always,
            PrefetchArg::Never => floe::Prefetch::Never,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Auto,
    Scalar,
    Avx2,
    Avx512,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn on(self) -> bool {
        self == OnOff::On
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HashArg {
    Mix64,
    Wyhash,
    Crc32,
    /// ahash with fixed seeds (conc-map-bench's hasher).
    Ahash,
}

impl HashArg {
    pub fn hasher(self) -> AnyHash {
        match self {
            HashArg::Mix64 => AnyHash::Mix64(1),
            HashArg::Wyhash => AnyHash::WyHash(WyHash::with_seed(1)),
            HashArg::Crc32 => AnyHash::Crc32(Crc32::with_seed(1)),
            HashArg::Ahash => AnyHash::Ahash(&crate::maps::AHASH),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HashArg::Mix64 => "mix64",
            HashArg::Wyhash => "wyhash",
            HashArg::Crc32 => "crc32",
            HashArg::Ahash => "ahash",
        }
    }
}

pub fn backends(args: &[BackendArg]) -> Result<Vec<Backend>, String> {
    let mut out = Vec::new();
    for &arg in args {
        let wanted: &[Backend] = match arg {
            BackendArg::Auto => &[Backend::Auto],
            BackendArg::Scalar => &[Backend::Scalar],
            BackendArg::Avx2 => &[Backend::Avx2],
            BackendArg::Avx512 => &[Backend::Avx512],
            BackendArg::All => &[Backend::Scalar, Backend::Avx2, Backend::Avx512],
        };
        for &b in wanted {
            if !b.is_supported() {
                if arg == BackendArg::All {
                    continue;
                }
                return Err(format!("--backend: this CPU does not support {b:?}"));
            }
            if !out.contains(&b) {
                out.push(b);
            }
        }
    }
    Ok(out)
}

/// Exit codes: 0 success, 1 a measurement failed (wrong answers, allocation), 2 bad flags.
pub enum Failure {
    /// Bad flags (exit code 2).
    Usage(String),
    /// A measurement failed (exit code 1).
    Run(String),
}

impl Common {
    /// The flags' defaults, for the no-argument suite.
    pub fn parse_defaults() -> Common {
        #[derive(Parser)]
        struct Defaults {
            #[command(flatten)]
            common: Common,
        }
        Defaults::parse_from(["floe-bench"]).common
    }

    pub fn threads(&self) -> Result<Vec<usize>, Failure> {
        if self.threads.contains(&0) {
            return Err(Failure::Usage(
                "--threads: counts must be at least 1".into(),
            ));
        }
        Ok(if self.threads.is_empty() {
            let mut t = vec![1, Workers::new().cores()];
            t.dedup();
            t
        } else {
            self.threads.clone()
        })
    }
}

/// The maps of `kinds` this build can run. The others (C++ peers whose libraries were
/// missing when floe-bench was built) are named on stderr with the reason and left out, so
/// the rest still run.
pub fn runnable(kinds: &[MapKind]) -> Result<Vec<MapKind>, Failure> {
    let mut run = Vec::new();
    for &kind in kinds {
        match kind.missing() {
            None => run.push(kind),
            Some(why) => eprintln!("floe-bench: leaving out {}: {why}", kind.name()),
        }
    }
    if run.is_empty() {
        return Err(Failure::Usage(
            "--maps: none of these maps is in this build".into(),
        ));
    }
    Ok(run)
}
