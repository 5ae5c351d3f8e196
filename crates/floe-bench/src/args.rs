//! The command line: every subcommand's flags, and the small conversions from flags to the
//! bench's own types. No measurement here (`main.rs` turns these into experiments).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use floe::{
    hash::{Crc32, WyHash},
    Backend,
};

use crate::{
    dist::Dist,
    keys::parse_count,
    maps::{AnyHash, MapKind},
    measure::Api,
    simd,
    workload::Workload,
};

#[derive(Parser, Debug)]
#[command(
    version,
    args_conflicts_with_subcommands = true,
    about = "floe and its peers side by side, next to the machine's random-access ceiling",
    long_about = "floe and its peers side by side, next to the machine's random-access ceiling.\n\n\
                  With no subcommand, runs the default suite and takes its flags."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub suite: SuiteArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The default suite: get, insdel, putheavy at all cores; floe (both layouts, one at a
    /// time and batched) and the peers.
    Suite(SuiteArgs),
    /// One configuration: a workload on some maps at some thread counts.
    Run(RunArgs),
    /// A hash join (DLHT's application; Balkesen et al.'s workload A): floe batched and one
    /// at a time against a radix-partitioned hashbrown join, inner, semi and anti; build and
    /// probe times, tuples/s, the probe beside the read ceiling. `ci/join.sh` adds DuckDB.
    Join(crate::join::JoinArgs),
    /// DLHT's multi-key transactions, Smallbank and TATP, under two-phase locking: floe
    /// (ordered lock batches, batched reads and writes) against dashmap and papaya with a lock
    /// table; every engine's invariants checked at the end.
    Oltp(crate::oltp::OltpArgs),
    /// `floe::Cache` against moka (W-TinyLFU and LRU), quick_cache and scc's `HashCache`:
    /// hit ratios on four traces at two sizes, throughput, memory per entry.
    Cache(crate::cache::CacheArgs),
    /// Fill one cache in this process and print its RSS growth per entry (`cache`'s probe).
    #[command(hide = true)]
    CacheProbe(crate::cache::CacheProbeArgs),
    /// The machine's ceiling alone: random line reads and RMWs, with and without prefetch.
    Ceiling(CeilingArgs),
    /// One `run` configuration over a range of one parameter (batch, keys, theta).
    Sweep(SweepArgs),
    /// Draw the thread-scaling chart of a saved JSON report.
    Plot(PlotArgs),
    /// The SIMD layout lab (SimdHT-Bench): vectorized vs scalar lookups over cuckoo layouts.
    Simd(simd::SimdArgs),
    /// conc-map-bench's mixes through the `bustle` crate itself (beside `run --workload
    /// readheavy|exchange|rapidgrow`, floe-bench's port of them).
    Bustle(BustleArgs),
    /// floe::Map against the any-key peers as keys and values grow (DLHT Fig. 9 and 10):
    /// get, get-and-read-the-value, insdel, and with `--memory` bytes per entry.
    Sizes(crate::sizes::SizesArgs),
    /// YCSB's core workloads A, B, C, D, F on maps of byte strings (23-byte keys, zipf 0.99),
    /// after a load phase into an empty map.
    Ycsb(crate::ycsb::YcsbArgs),
    /// floe-server against memcached under one load generator: multi-gets, get/set mixes,
    /// uniform and zipf keys; throughput and latency percentiles; `--cache-aside` for the
    /// hit ratio under eviction.
    Server(crate::server_load::ServerArgs),
    /// A persistent floe map's recovery after a crash (SIGKILL of a child that filled it):
    /// open time and keys per second per thread, against an open after a clean close.
    Recovery(crate::recovery::RecoveryArgs),
    /// Write-heavy work on skewed keys (DRAMHiT Fig. 8): counting and a get/fetch_add mix
    /// over zipf thetas, on floe's delegated `Partitioned` map, the shared `FlatMap`
    /// (one at a time and batched) and the Rust peers.
    Skew(crate::skew::SkewArgs),
    /// The dense layout (`Layout::Dense`, fixed at the table whose trigger is `--keys`)
    /// against the default one at the same keys: space, lines per operation, gets, batched
    /// gets, misses, insdel, putheavy, and a population with growth.
    Dense(crate::dense::DenseArgs),
    /// One population run of `dense`, in a process of its own.
    #[command(hide = true)]
    DensePopulationChild(crate::dense::PopulationChildArgs),
    /// The children of `recovery`.
    #[command(hide = true)]
    RecoveryChild(crate::recovery::ChildArgs),
    /// The C++ peers this build has (boost, tbb, libcuckoo, absl), and why any is missing;
    /// exits 1 if one is.
    Peers,
    /// Fill one map in this process and print its RSS growth (used by the memory measurement).
    #[command(hide = true)]
    MemoryProbe(ProbeArgs),
    /// Fill one map of byte strings in this process and print its RSS growth (`sizes
    /// --memory`).
    #[command(hide = true)]
    SizesProbe(crate::sizes::SizesProbeArgs),
}

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

#[derive(Args, Debug)]
pub struct SuiteArgs {
    #[command(flatten)]
    pub common: Common,
    /// Directory for `<timestamp>.json` and `<timestamp>.svg` (unless --json/--plot are given).
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub common: Common,
    /// The workload.
    #[arg(long, value_enum, default_value = "get")]
    pub workload: Workload,
    /// Fraction of gets in `mixed` (the rest are puts).
    #[arg(long, default_value_t = 0.9)]
    pub read_ratio: f64,
    /// Fraction of --keys inserted before timing [default: per workload].
    #[arg(long)]
    pub prefill: Option<f64>,
    /// Key popularity: uniform, zipf:THETA (0 <= THETA < 1.5), hot:KEYS:PERCENT.
    #[arg(long, default_value = "uniform")]
    pub dist: Dist,
    /// floe's prefetch depth (`--api batch`) or window (`--api pipeline`); 1 = unbatched
    /// [default: floe's own default depth with --api batch or pipeline, else 1].
    #[arg(long)]
    pub batch: Option<usize>,
    /// How floe gets its operations [default: batch if --batch > 1, else single]. Peers
    /// always get theirs one by one.
    #[arg(long, value_enum)]
    pub api: Option<Api>,
    /// When floe's batches and pipeline prefetch (auto: tables of 2 MiB and more).
    #[arg(long, value_enum, default_value = "auto")]
    pub prefetch: PrefetchArg,
    /// population / grow-read: slots of the table every map starts from (each is created
    /// with capacity for half of them).
    #[arg(long, default_value = "2^16", value_parser = parse_count)]
    pub initial_slots: u64,
    /// population / grow-read: record throughput every MS milliseconds and draw the timeline
    /// (`--plot`).
    #[arg(long, default_value_t = 50.0)]
    pub timeline: f64,
    /// grow-read: reader threads [default: half the threads].
    #[arg(long)]
    pub readers: Option<usize>,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// The parameter to sweep.
    #[arg(long, value_enum)]
    pub param: SweepParam,
    /// Its values, comma separated [default: batch 1..128 in powers of two; keys 2^12..2^26
    /// in steps of 4x; theta 0..1.2 in steps of 0.2].
    #[arg(long, value_delimiter = ',')]
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SweepParam {
    /// `--batch` (floe's prefetch depth or window).
    Batch,
    /// `--keys` (the table size).
    Keys,
    /// The Zipf skew (`--dist zipf:THETA`).
    Theta,
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

#[derive(Args, Debug)]
pub struct BustleArgs {
    /// The mixes (readheavy, exchange, rapidgrow).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "readheavy,exchange,rapidgrow"
    )]
    pub workloads: Vec<Workload>,
    /// Maps, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "floe,papaya,scc,dashmap"
    )]
    pub maps: Vec<MapKind>,
    /// Thread counts, comma separated [default: 1 and all cores; the suite: all cores].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// The table's initial capacity, a power of two (bustle's `initial_capacity_log2`); the
    /// operations are `--operations` times this.
    #[arg(long, default_value = "2^24", value_parser = parse_count)]
    pub keys: u64,
    /// Operations as a multiple of --keys (bustle's `operations`).
    #[arg(long, default_value_t = 1.0)]
    pub operations: f64,
    /// Repeats (median, min and max reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Hash function, for every map [default: ahash, as conc-map-bench].
    #[arg(long, value_enum, default_value = "ahash")]
    pub hash: HashArg,
}

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// A report written by `--json` (or the suite); a growth run's report (`run --workload
    /// population|grow-read`) draws its timelines. With `--space`, several reports (one per
    /// workload, as `run` writes them) are drawn as one chart.
    #[arg(required = true, num_args = 1..)]
    pub json: Vec<PathBuf>,
    /// The SVG to write.
    #[arg(long)]
    pub out: PathBuf,
    /// The chart's title [default: the report's command].
    #[arg(long)]
    pub title: Option<String>,
    /// Draw speed against space instead (`space.rs`: bytes per key across, Mops/s up, a point
    /// per map at each workload's largest thread count) from a `run --memory on` report.
    #[arg(long)]
    pub space: bool,
}

#[derive(Args, Debug)]
pub struct CeilingArgs {
    /// Array size in keys of floe's table (as --keys elsewhere), unless --bytes is given.
    #[arg(long, default_value = "2^25", value_parser = parse_count)]
    pub keys: u64,
    /// Array size in bytes (accepts 1G, 512M).
    #[arg(long, value_parser = parse_count)]
    pub bytes: Option<u64>,
    /// Thread counts, comma separated [default: 1 and all cores; the suite: all cores].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Repeats (median reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    #[arg(long, value_enum, default_value = "on")]
    pub huge_pages: OnOff,
}

#[derive(Args, Debug)]
pub struct ProbeArgs {
    #[arg(long, value_enum)]
    pub map: MapKind,
    #[arg(long, value_parser = parse_count)]
    pub keys: u64,
    #[arg(long, value_enum, default_value = "mix64")]
    pub hash: HashArg,
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
