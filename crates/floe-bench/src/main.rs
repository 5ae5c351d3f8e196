//! floe-bench: floe and its peers side by side, next to the machine's own ceiling measured in
//! the same run.
//!
//! * `floe-bench` (no arguments) runs the default suite: get, insdel and putheavy on a table
//!   of 2^25 keys (far larger than the caches), 1 and all threads, floe against dashmap,
//!   papaya, scc and leapfrog, a few minutes in all; prints the table and
//!   writes `results/<timestamp>.json` and `.svg`.
//! * `floe-bench run ...` measures one configuration (`--help` lists the flags).
//! * `floe-bench ceiling ...` measures the ceiling alone.
//! * `floe-bench simd ...` runs the SIMD layout lab (SimdHT-Bench; see `simd/mod.rs`).
//!
//! Build with `--features line-stats` to also count the cache lines floe reads per operation
//! (for machines where `perf stat` has no cache-miss counters).

mod ceiling;
mod dist;
mod experiment;
mod growth;
mod keys;
mod measure;
mod peers;
mod plot;
mod report;
mod simd;
mod workload;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};
use floe::{
    hash::{Crc32, Mix64, WyHash},
    Backend,
};

use crate::{
    dist::Dist,
    experiment::{stream_len, Experiment},
    keys::parse_count,
    measure::{AnyHash, Api, Workers},
    peers::{MapKind, Recipe},
    report::ceiling_table,
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
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    suite: SuiteArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The default suite: get, insdel, putheavy; 1 and all threads; floe and the peers.
    Suite(SuiteArgs),
    /// One configuration: a workload on some maps at some thread counts.
    Run(RunArgs),
    /// The machine's ceiling alone: random line reads and RMWs, with and without prefetch.
    Ceiling(CeilingArgs),
    /// One `run` configuration over a range of one parameter (batch, keys, theta).
    Sweep(SweepArgs),
    /// Draw the thread-scaling chart of a saved JSON report.
    Plot(PlotArgs),
    /// The SIMD layout lab (SimdHT-Bench): vectorized vs scalar lookups over cuckoo layouts.
    Simd(simd::SimdArgs),
    /// Fill one map in this process and print its RSS growth (used by the memory measurement).
    #[command(hide = true)]
    MemoryProbe(ProbeArgs),
}

/// Flags every measurement shares.
#[derive(Args, Debug, Clone)]
struct Common {
    /// Keys (the table's capacity and key space; accepts 2^25, 32M, 33554432).
    #[arg(long, default_value = "2^25", value_parser = parse_count)]
    keys: u64,
    /// Thread counts, comma separated [default: 1 and all cores].
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Seconds per timed run of a cycling workload [default: 1 for the suite, 2 for run].
    #[arg(long)]
    seconds: Option<f64>,
    /// Operations per timed run instead of seconds (total over threads; the run-once
    /// workloads' operation count).
    #[arg(long, value_parser = parse_count)]
    ops: Option<u64>,
    /// Repeats of every measurement (median, min and max are reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Maps, comma separated [default: floe,dashmap,papaya,scc,leapfrog].
    #[arg(long, value_enum, value_delimiter = ',')]
    maps: Vec<MapKind>,
    /// floe's matching backends (`all` = every one the CPU supports).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    backend: Vec<BackendArg>,
    /// Hash function, for every map.
    #[arg(long, value_enum, default_value = "mix64")]
    hash: HashArg,
    /// Transparent huge pages for floe's table and the ceiling array.
    #[arg(long, value_enum, default_value = "on")]
    huge_pages: OnOff,
    /// Sample per-operation latency (one operation in 256) into HDR histograms.
    #[arg(long, value_enum, default_value = "on")]
    latency: OnOff,
    /// Measure RSS growth per key of the peers in child processes.
    #[arg(long, value_enum, default_value = "on")]
    memory: OnOff,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the results as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the thread-scaling chart (SVG) here.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct SuiteArgs {
    #[command(flatten)]
    common: Common,
    /// Directory for `<timestamp>.json` and `<timestamp>.svg` (unless --json/--plot are given).
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// The workload.
    #[arg(long, value_enum, default_value = "get")]
    workload: Workload,
    /// Fraction of gets in `mixed` (the rest are puts).
    #[arg(long, default_value_t = 0.9)]
    read_ratio: f64,
    /// Fraction of --keys inserted before timing [default: per workload].
    #[arg(long)]
    prefill: Option<f64>,
    /// Key popularity: uniform, zipf:THETA (0 <= THETA < 1.5), hot:KEYS:PERCENT.
    #[arg(long, default_value = "uniform")]
    dist: Dist,
    /// floe's prefetch depth (`--api batch`) or window (`--api pipeline`); 1 = unbatched.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// How floe gets its operations [default: batch if --batch > 1, else single]. Peers
    /// always get theirs one by one.
    #[arg(long, value_enum)]
    api: Option<Api>,
    /// When floe's batches and pipeline prefetch (auto: tables of 2 MiB and more).
    #[arg(long, value_enum, default_value = "auto")]
    prefetch: PrefetchArg,
    /// population / grow-read: slots of the table every map starts from (each is created
    /// with capacity for half of them).
    #[arg(long, default_value = "2^16", value_parser = parse_count)]
    initial_slots: u64,
    /// population / grow-read: record throughput every MS milliseconds and draw the timeline
    /// (`--plot`).
    #[arg(long, default_value_t = 50.0)]
    timeline: f64,
    /// grow-read: reader threads [default: half the threads].
    #[arg(long)]
    readers: Option<usize>,
}

#[derive(Args, Debug)]
struct SweepArgs {
    #[command(flatten)]
    run: RunArgs,
    /// The parameter to sweep.
    #[arg(long, value_enum)]
    param: SweepParam,
    /// Its values, comma separated [default: batch 1..128 in powers of two; keys 2^12..2^26
    /// in steps of 4x; theta 0..1.2 in steps of 0.2].
    #[arg(long, value_delimiter = ',')]
    values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SweepParam {
    /// `--batch` (floe's prefetch depth or window).
    Batch,
    /// `--keys` (the table size).
    Keys,
    /// The Zipf skew (`--dist zipf:THETA`).
    Theta,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PrefetchArg {
    Auto,
    Always,
    Never,
}

impl PrefetchArg {
    fn floe(self) -> floe::Prefetch {
        match self {
            PrefetchArg::Auto => floe::Prefetch::Auto,
            PrefetchArg::Always => floe::Prefetch::Always,
            PrefetchArg::Never => floe::Prefetch::Never,
        }
    }
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// A report written by `--json` (or the suite).
    json: PathBuf,
    /// The SVG to write.
    #[arg(long)]
    out: PathBuf,
    /// The chart's title [default: the report's command].
    #[arg(long)]
    title: Option<String>,
}

#[derive(Args, Debug)]
struct CeilingArgs {
    /// Array size in keys of floe's table (as --keys elsewhere), unless --bytes is given.
    #[arg(long, default_value = "2^25", value_parser = parse_count)]
    keys: u64,
    /// Array size in bytes (accepts 1G, 512M).
    #[arg(long, value_parser = parse_count)]
    bytes: Option<u64>,
    /// Thread counts, comma separated [default: 1 and all cores].
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Repeats (median reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    #[arg(long, value_enum, default_value = "on")]
    huge_pages: OnOff,
}

#[derive(Args, Debug)]
struct ProbeArgs {
    #[arg(long, value_enum)]
    map: MapKind,
    #[arg(long, value_parser = parse_count)]
    keys: u64,
    #[arg(long, value_enum, default_value = "mix64")]
    hash: HashArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    Auto,
    Scalar,
    Avx2,
    Avx512,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OnOff {
    On,
    Off,
}

impl OnOff {
    fn on(self) -> bool {
        self == OnOff::On
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum HashArg {
    Mix64,
    Wyhash,
    Crc32,
}

impl HashArg {
    fn hasher(self) -> AnyHash {
        match self {
            HashArg::Mix64 => AnyHash::Mix64(Mix64::with_seed(1)),
            HashArg::Wyhash => AnyHash::WyHash(WyHash::with_seed(1)),
            HashArg::Crc32 => AnyHash::Crc32(Crc32::with_seed(1)),
        }
    }

    fn name(self) -> &'static str {
        match self {
            HashArg::Mix64 => "mix64",
            HashArg::Wyhash => "wyhash",
            HashArg::Crc32 => "crc32",
        }
    }
}

fn backends(args: &[BackendArg]) -> Result<Vec<Backend>, String> {
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
enum Failure {
    Usage(String),
    Run(String),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => suite(cli.suite),
        Some(Command::Suite(args)) => suite(args),
        Some(Command::Run(args)) => run(args),
        Some(Command::Ceiling(args)) => ceiling(args),
        Some(Command::Sweep(args)) => sweep(args),
        Some(Command::Plot(args)) => replot(args),
        Some(Command::Simd(args)) => simd::main(args).map_err(|e| match e {
            simd::LabError::Usage(m) => Failure::Usage(m),
            simd::LabError::Run(m) => Failure::Run(m),
        }),
        Some(Command::MemoryProbe(args)) => probe(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("floe-bench: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Run(message)) => {
            eprintln!("floe-bench: {message}");
            ExitCode::from(1)
        }
    }
}

impl Common {
    /// The flags' defaults, for the no-argument suite.
    fn parse_defaults() -> Common {
        #[derive(Parser)]
        struct Defaults {
            #[command(flatten)]
            common: Common,
        }
        Defaults::parse_from(["floe-bench"]).common
    }

    fn threads(&self) -> Result<Vec<usize>, Failure> {
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

    /// The experiment these flags describe (workload-specific fields at their defaults).
    fn experiment(&self, default_seconds: f64, runs_once: bool) -> Result<Experiment, Failure> {
        let usage = |m: &str| Failure::Usage(m.to_string());
        if self.keys < 1024 {
            return Err(usage("--keys: use at least 1024 keys"));
        }
        if self.keys >= 1 << 40 {
            return Err(usage("--keys: at most 2^40 keys"));
        }
        if self.repeat == 0 {
            return Err(usage("--repeat must be at least 1"));
        }
        let seconds = match (self.seconds, self.ops) {
            (Some(_), Some(_)) => return Err(usage("give --seconds or --ops, not both")),
            (Some(s), None) if !s.is_finite() || s <= 0.0 => {
                return Err(usage("--seconds must be positive"))
            }
            (Some(_), None) if runs_once => {
                return Err(usage(
                    "this workload runs a fixed number of operations; use --ops, not --seconds",
                ))
            }
            (Some(s), None) => Some(s),
            (None, Some(0)) => return Err(usage("--ops must be positive")),
            (None, Some(_)) => None,
            (None, None) if runs_once => None,
            (None, None) => Some(default_seconds),
        };
        let ops = self.ops;
        let kinds = if self.maps.is_empty() {
            vec![
                MapKind::Floe,
                MapKind::Dashmap,
                MapKind::Papaya,
                MapKind::Scc,
                MapKind::Leapfrog,
            ]
        } else {
            self.maps.clone()
        };
        let backends = backends(&self.backend).map_err(Failure::Usage)?;
        let mut maps = Vec::new();
        for kind in kinds {
            if kind == MapKind::Floe {
                for &b in &backends {
                    let label = if backends.len() == 1 && b == Backend::Auto {
                        "floe".to_string()
                    } else {
                        format!("floe ({})", format!("{b:?}").to_lowercase())
                    };
                    maps.push((kind, label, b));
                }
            } else if !maps.iter().any(|(k, _, _)| *k == kind) {
                maps.push((kind, kind.name().to_string(), Backend::Auto));
            }
        }
        Ok(Experiment {
            workloads: vec![],
            read_ratio: 0.9,
            keys: self.keys,
            prefill: None,
            threads: self.threads()?,
            dist: Dist::Uniform,
            seconds,
            ops,
            repeat: self.repeat,
            api: Api::Single,
            batch: 1,
            prefetch: floe::Prefetch::Auto,
            maps,
            recipe: Recipe {
                capacity: self.keys as usize,
                hasher: self.hash.hasher(),
                backend: Backend::Auto,
                huge_pages: self.huge_pages.on(),
                churn: false,
                resize: floe::ResizeMode::Incremental,
            },
            latency: self.latency.on(),
            memory: self.memory.on(),
            hash_name: self.hash.name().into(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
        })
    }
}

fn measure_and_report(
    experiment: &Experiment,
    common: &Common,
    default_outputs: Option<(PathBuf, PathBuf)>,
    title: &str,
) -> Result<(), Failure> {
    experiment.check().map_err(Failure::Usage)?;
    let workers = Workers::new();
    let machine = measure::machine();
    println!("{machine}");
    println!(
        "keys {} ({}), hash {}, {} repeat(s), {}, latency sampling {}, huge pages {}",
        experiment.keys,
        keys::pretty_count(experiment.keys),
        experiment.hash_name,
        experiment.repeat,
        match (experiment.seconds, experiment.ops) {
            (Some(s), _) => format!("{s} s per run"),
            (None, Some(ops)) => format!("{ops} ops per run"),
            _ => "the workload's own operation count".into(),
        },
        if experiment.latency { "on" } else { "off" },
        if experiment.recipe.huge_pages {
            "on"
        } else {
            "off"
        },
    );
    let report = experiment.run(&workers).map_err(Failure::Run)?;
    println!(
        "\nceiling over {:.2} GiB (the size of floe's table):",
        report.ceiling.bytes as f64 / f64::from(1 << 30)
    );
    print!("{}", ceiling_table(&report.ceiling.by_threads));
    println!("\nresults (x ceil = fraction of the matching ceiling; latency sampled 1 in 256):");
    print!("{}", report.table());
    for (name, per_key) in report
        .results
        .iter()
        .filter_map(|r| r.rss_bytes_per_key.map(|b| (&r.map, b)))
        .collect::<std::collections::BTreeMap<_, _>>()
    {
        println!("memory: {name} grows RSS by {per_key:.1} bytes/key (separate process)");
    }
    let (json, plot) = match default_outputs {
        Some((json, plot)) => (
            Some(common.json.clone().unwrap_or(json)),
            Some(common.plot.clone().unwrap_or(plot)),
        ),
        None => (common.json.clone(), common.plot.clone()),
    };
    if let Some(path) = json {
        report.write_json(&path).map_err(Failure::Run)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &common.csv {
        report.write_csv(path).map_err(Failure::Run)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = plot {
        report::write_file(&path, &plot::svg(&report, title)).map_err(Failure::Run)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn suite(args: SuiteArgs) -> Result<(), Failure> {
    let mut experiment = args.common.experiment(1.0, false)?;
    experiment.workloads = vec![Workload::Get, Workload::Insdel, Workload::Putheavy];
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let stamp = report::timestamps(unix).1;
    let outputs = (
        args.out.join(format!("{stamp}.json")),
        args.out.join(format!("{stamp}.svg")),
    );
    let title = format!(
        "floe-bench suite: {} keys, uniform, unbatched",
        keys::pretty_count(experiment.keys)
    );
    measure_and_report(&experiment, &args.common, Some(outputs), &title)
}

impl RunArgs {
    fn experiment(&self) -> Result<Experiment, Failure> {
        let mut experiment = self.common.experiment(2.0, self.workload.runs_once())?;
        experiment.workloads = vec![self.workload];
        experiment.read_ratio = self.read_ratio;
        experiment.prefill = self.prefill;
        experiment.dist = self.dist;
        experiment.batch = self.batch;
        experiment.api = self.api.unwrap_or(if self.batch > 1 {
            Api::Batch
        } else {
            Api::Single
        });
        experiment.prefetch = self.prefetch.floe();
        Ok(experiment)
    }
}

fn run(args: RunArgs) -> Result<(), Failure> {
    if matches!(args.workload, Workload::Population | Workload::GrowRead) {
        return grow(&args);
    }
    let experiment = args.experiment()?;
    let title = format!(
        "floe-bench run: {} on {} keys, {}",
        args.workload.name(),
        keys::pretty_count(experiment.keys),
        args.dist
    );
    measure_and_report(&experiment, &args.common, None, &title)
}

/// `run --workload population|grow-read` (growth.rs).
fn grow(args: &RunArgs) -> Result<(), Failure> {
    let usage = |m: &str| Failure::Usage(m.to_string());
    let common = &args.common;
    if args.initial_slots < 64 || args.initial_slots > 1 << 40 {
        return Err(usage("--initial-slots: use 64 to 2^40"));
    }
    if common.keys < args.initial_slots {
        return Err(usage(
            "--keys must be at least --initial-slots (the maps are to grow)",
        ));
    }
    if !(args.timeline.is_finite() && args.timeline > 0.0) {
        return Err(usage(
            "--timeline must be a positive number of milliseconds",
        ));
    }
    if common.repeat == 0 {
        return Err(usage("--repeat must be at least 1"));
    }
    if common.threads.contains(&0) {
        return Err(usage("--threads: counts must be at least 1"));
    }
    let kind = if args.workload == Workload::Population {
        growth::Kind::Population
    } else {
        growth::Kind::GrowRead
    };
    let threads = if common.threads.is_empty() {
        vec![Workers::new().cores()]
    } else {
        common.threads.clone()
    };
    if kind == growth::Kind::GrowRead && threads.iter().any(|&t| t < 2) {
        return Err(usage(
            "grow-read needs at least 2 threads (writers and readers)",
        ));
    }
    if let Some(r) = args.readers {
        if r == 0 || threads.iter().any(|&t| r >= t) {
            return Err(usage("--readers: at least 1, and fewer than the threads"));
        }
    }
    let kinds = if common.maps.is_empty() {
        vec![
            MapKind::Floe,
            MapKind::FloeBlocking,
            MapKind::Papaya,
            MapKind::PapayaIncremental,
            MapKind::Scc,
            MapKind::Dashmap,
        ]
    } else {
        common.maps.clone()
    };
    if kinds.contains(&MapKind::Hashbrown) && threads.iter().any(|&t| t > 1) {
        return Err(usage("--maps hashbrown runs with 1 thread only"));
    }
    let backend = backends(&common.backend).map_err(Failure::Usage)?[0];
    let plan = growth::Plan {
        kind,
        maps: kinds.iter().map(|&k| (k, k.name().to_string())).collect(),
        keys: common.keys,
        initial_slots: args.initial_slots as usize,
        threads,
        readers: args.readers,
        repeat: common.repeat,
        interval: Duration::from_secs_f64(args.timeline / 1e3),
        latency: common.latency.on(),
        batch: args.batch,
        recipe: Recipe {
            capacity: 0,
            hasher: common.hash.hasher(),
            backend,
            huge_pages: common.huge_pages.on(),
            churn: false,
            resize: floe::ResizeMode::Incremental,
        },
    };
    let machine = measure::machine();
    println!("{machine}");
    println!(
        "{}: {} keys from {} slots; every op timed: {}",
        kind.name(),
        keys::pretty_count(common.keys),
        keys::pretty_count(args.initial_slots),
        plan.latency
    );
    let rows = growth::run(&plan, |m| eprintln!("  {m}")).map_err(Failure::Run)?;
    println!("\n{}", growth::table(&rows));
    let mut triggers = Vec::new();
    if kinds.contains(&MapKind::Floe) && kind == growth::Kind::Population {
        println!("floe at its growth trigger (first insert that finds no room in a fixed table):");
        for shift in [12u32, 16, 20] {
            let t = growth::trigger(&plan.recipe, 1 << shift).map_err(Failure::Run)?;
            println!(
                "  2^{shift} bins: {} keys, {:.1}% of slots, space efficiency {:.1}%, lines/get {}",
                t.keys,
                100.0 * t.slot_load,
                100.0 * t.space_efficiency,
                t.lines_per_get
                    .map_or("- (build with --features line-stats)".into(), |l| format!(
                        "{l:.3}"
                    ))
            );
            triggers.push(t);
        }
    }
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let report = growth::Report {
        schema: growth::SCHEMA.into(),
        timestamp: report::timestamps(unix).0,
        machine,
        rows,
        triggers,
    };
    if let Some(path) = &common.json {
        let json =
            serde_json::to_string_pretty(&report).map_err(|e| Failure::Run(e.to_string()))?;
        report::write_file(path, &json).map_err(Failure::Run)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &common.plot {
        let title = format!(
            "{}: {} keys from {} slots",
            kind.name(),
            keys::pretty_count(common.keys),
            keys::pretty_count(args.initial_slots)
        );
        report::write_file(path, &growth::svg(&report, &title)).map_err(Failure::Run)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn sweep(args: SweepArgs) -> Result<(), Failure> {
    let usage = |m: String| Failure::Usage(m);
    let values: Vec<String> = if args.values.is_empty() {
        match args.param {
            SweepParam::Batch => (0..8).map(|i| (1u32 << i).to_string()).collect(),
            SweepParam::Keys => (0..8).map(|i| format!("2^{}", 12 + 2 * i)).collect(),
            SweepParam::Theta => (0..7)
                .map(|i| format!("{:.1}", f64::from(i) * 0.2))
                .collect(),
        }
    } else {
        args.values.clone()
    };
    let base = args.run.experiment()?;
    let mut experiments = Vec::new();
    for value in &values {
        let mut e = base.clone();
        match args.param {
            SweepParam::Batch => {
                e.batch = value
                    .parse()
                    .map_err(|_| usage(format!("--values: '{value}' is not a batch size")))?;
                if args.run.api.is_none() {
                    e.api = if e.batch > 1 { Api::Batch } else { Api::Single };
                }
            }
            SweepParam::Keys => {
                e.keys = parse_count(value).map_err(|m| usage(format!("--values: {m}")))?;
                if e.keys < 1024 {
                    return Err(usage("--values: use at least 1024 keys".into()));
                }
                e.recipe.capacity = e.keys as usize;
            }
            SweepParam::Theta => {
                e.dist = format!("zipf:{value}")
                    .parse()
                    .map_err(|m| usage(format!("--values: {m}")))?;
            }
        }
        e.check().map_err(Failure::Usage)?;
        experiments.push(e);
    }
    let workers = Workers::new();
    println!("{}", measure::machine());
    let mut combined: Option<report::Report> = None;
    for e in &experiments {
        let report = e.run(&workers).map_err(Failure::Run)?;
        match combined.as_mut() {
            None => combined = Some(report),
            Some(all) => {
                all.results.extend(report.results);
                all.ceiling = report.ceiling;
            }
        }
    }
    let report = combined.expect("at least one value");
    print!("{}", report.table());
    let common = &args.run.common;
    if let Some(path) = &common.json {
        report.write_json(path).map_err(Failure::Run)?;
    }
    if let Some(path) = &common.csv {
        report.write_csv(path).map_err(Failure::Run)?;
    }
    Ok(())
}

fn replot(args: PlotArgs) -> Result<(), Failure> {
    let text = std::fs::read_to_string(&args.json)
        .map_err(|e| Failure::Usage(format!("{}: {e}", args.json.display())))?;
    let report = report::Report::from_json(&text)
        .map_err(|e| Failure::Usage(format!("{}: {e}", args.json.display())))?;
    let title = args.title.unwrap_or_else(|| report.command.clone());
    report::write_file(&args.out, &plot::svg(&report, &title)).map_err(Failure::Run)?;
    println!("wrote {}", args.out.display());
    Ok(())
}

fn ceiling(args: CeilingArgs) -> Result<(), Failure> {
    let usage = |m: &str| Failure::Usage(m.to_string());
    if args.repeat == 0 || !args.seconds.is_finite() || args.seconds <= 0.0 {
        return Err(usage("--repeat and --seconds must be positive"));
    }
    let common = Common {
        threads: args.threads.clone(),
        ..Common::parse_defaults()
    };
    let threads = common.threads()?;
    let bytes = match args.bytes {
        Some(b) if b < 1 << 20 => return Err(usage("--bytes: use at least 1M")),
        Some(b) => b as usize,
        None => {
            Recipe {
                capacity: args.keys as usize,
                hasher: HashArg::Mix64.hasher(),
                backend: Backend::Scalar,
                huge_pages: args.huge_pages.on(),
                churn: false,
                resize: floe::ResizeMode::Incremental,
            }
            .floe()
            .map_err(Failure::Usage)?
            .stats()
            .allocated_bytes
        }
    };
    println!("{}", measure::machine());
    let workers = Workers::new();
    let array = ceiling::Ceiling::new(bytes, args.huge_pages.on()).map_err(Failure::Run)?;
    println!(
        "array {:.2} GiB, huge pages {}, median of {}",
        bytes as f64 / f64::from(1 << 30),
        if args.huge_pages.on() { "on" } else { "off" },
        args.repeat
    );
    let figures: Vec<_> = threads
        .iter()
        .map(|&t| {
            ceiling::Figures::measure(
                &array,
                &workers,
                t,
                Duration::from_secs_f64(args.seconds),
                args.repeat,
                stream_len((bytes / 64) as u64),
                || {},
            )
        })
        .collect();
    print!("{}", ceiling_table(&figures));
    Ok(())
}

fn probe(args: ProbeArgs) -> Result<(), Failure> {
    let recipe = Recipe {
        capacity: args.keys as usize,
        hasher: args.hash.hasher(),
        backend: Backend::Auto,
        huge_pages: true,
        churn: false,
        resize: floe::ResizeMode::Incremental,
    };
    let bytes = experiment::memory_probe(args.map, &recipe, args.keys).map_err(Failure::Run)?;
    println!("rss_growth_bytes={bytes}");
    Ok(())
}
