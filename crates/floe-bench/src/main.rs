//! floe-bench: floe and its peers side by side, next to the machine's own ceiling measured in
//! the same run.
//!
//! * `floe-bench` (no arguments) runs the default suite: get, insdel and putheavy on a table
//!   of 2^25 keys (far larger than the caches) at all cores, floe in both layouts one
//!   operation at a time and batched (floe's default depth), against dashmap, papaya, scc and
//!   leapfrog, a few minutes in all; prints the table and writes `results/<timestamp>.json`
//!   and `.svg` (bars: each map's fraction of the matching ceiling, Mops/s and bytes per
//!   key on them).
//! * `floe-bench run ...` measures one configuration (`--help` lists the flags).
//! * `floe-bench ceiling ...` measures the ceiling alone.
//! * `floe-bench simd ...` runs the SIMD layout lab (SimdHT-Bench; see `simd/mod.rs`).
//!
//! Build with `--features line-stats` to also count the cache lines floe reads per operation
//! (for machines where `perf stat` has no cache-miss counters).
//!
//! # Layers
//!
//! Arrows point down only; each module uses only those below it. Every module of the crate
//! is on this map.
//!
//! ```text
//! main.rs          subcommands: arguments -> experiments -> reports on disk; picks the
//!                  `server` subcommand's mode
//! args.rs          the command line (clap): the flags of the suite, `run`, `sweep`,
//!                  `bustle`, `plot`, `ceiling` and `probe`; every other subcommand's flags
//!                  live beside it (`ServerArgs` in server_load.rs, `JoinArgs` in join.rs...)
//! subcommands      experiment.rs (one configuration, the default suite), growth.rs
//!                  (timelines while maps grow), bustle_run.rs (conc-map-bench's driver),
//!                  cache.rs (floe::Cache against moka, quick_cache, scc), dense.rs (the two
//!                  layouts), join.rs (hash joins), oltp.rs (Smallbank, TATP), recovery.rs
//!                  (a persistent map after a crash), sizes.rs and ycsb.rs (maps of byte
//!                  strings), skew.rs (delegation under skew), simd/ (the layout lab, own
//!                  layers); hit_ratio.rs and warm_restart.rs (server modes) over
//!                  server_load.rs (floe-server and memcached: launcher, client, load mode)
//! plot.rs  bars.rs  space.rs   the charts: scaling, the suite's bars, speed against space
//! report.rs        rows, the report Envelope (schema, time, machine), JSON/CSV/tables
//! ceiling.rs       the machine's random-line ceiling, on the same harness
//! measure.rs       the harness: pinned workers, timed loops, checked answers, latency
//! workload.rs      operation streams per workload (dist.rs: key distributions)
//! maps/            the maps under test behind `BenchMap` (floe_map.rs, peers.rs, hasher.rs)
//! svg.rs  machine.rs  keys.rs    leaves: the SVG writer, machine facts, key mixing and counts
//! ```

mod args;
mod bars;
mod bustle_run;
mod cache;
mod ceiling;
mod dense;
mod dist;
mod experiment;
mod growth;
mod hit_ratio;
mod join;
mod keys;
mod machine;
mod maps;
mod measure;
mod oltp;
mod plot;
mod recovery;
mod report;
mod server_load;
mod simd;
mod sizes;
mod skew;
mod space;
mod svg;
mod warm_restart;
mod workload;
mod ycsb;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Parser;
use floe::Backend;

use crate::{
    args::{
        backends, BackendArg, BustleArgs, CeilingArgs, Cli, Command, Common, HashArg, PlotArgs,
        ProbeArgs, RunArgs, SuiteArgs, SweepArgs, SweepParam,
    },
    dist::Dist,
    experiment::{stream_len, Experiment, MapEntry},
    keys::parse_count,
    maps::{MapKind, Recipe},
    measure::{Api, Workers},
    report::ceiling_table,
    workload::Workload,
};

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
        Some(Command::Bustle(args)) => bustle(args),
        Some(Command::Simd(args)) => simd::main(args).map_err(|e| match e {
            simd::LabError::Usage(m) => Failure::Usage(m),
            simd::LabError::Run(m) => Failure::Run(m),
        }),
        Some(Command::Sizes(args)) => sizes::main(args).map_err(|e| match e {
            sizes::SizesError::Usage(m) => Failure::Usage(m),
            sizes::SizesError::Run(m) => Failure::Run(m),
        }),
        Some(Command::Ycsb(args)) => ycsb::main(args).map_err(|e| match e {
            ycsb::YcsbError::Usage(m) => Failure::Usage(m),
            ycsb::YcsbError::Run(m) => Failure::Run(m),
        }),
        Some(Command::Server(args)) => server(&args).map_err(Failure::Run),
        Some(Command::Recovery(args)) => recovery::main(args).map_err(Failure::Run),
        Some(Command::Skew(args)) => skew::main(args).map_err(Failure::Run),
        Some(Command::Dense(args)) => dense::check(&args)
            .map_err(Failure::Usage)
            .and_then(|()| dense::main(args).map_err(Failure::Run)),
        Some(Command::DensePopulationChild(args)) => {
            dense::population_child(args).map_err(Failure::Run)
        }
        Some(Command::RecoveryChild(args)) => recovery::child(args).map_err(Failure::Run),
        Some(Command::Peers) => peers(),
        Some(Command::MemoryProbe(args)) => probe(args),
        Some(Command::Join(args)) => join::check(&args)
            .map_err(Failure::Usage)
            .and_then(|()| join::main(args).map_err(Failure::Run)),
        Some(Command::Oltp(args)) => oltp::check(&args)
            .map_err(Failure::Usage)
            .and_then(|()| oltp::main(args).map_err(Failure::Run)),
        Some(Command::Cache(args)) => cache::check(&args)
            .map_err(Failure::Usage)
            .and_then(|()| cache::main(args).map_err(Failure::Run)),
        Some(Command::CacheProbe(args)) => cache::probe(&args).map_err(Failure::Run),
        Some(Command::SizesProbe(args)) => sizes::probe(&args)
            .map(|bytes| println!("rss_growth_bytes={bytes}"))
            .map_err(Failure::Run),
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
            runnable(&self.maps)?
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
                    maps.push(MapEntry::new(kind, label, b));
                }
            } else if !maps.iter().any(|m: &MapEntry| m.kind == kind) {
                maps.push(MapEntry::new(kind, kind.name(), Backend::Auto));
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
                populate: self.populate.on(),
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
    chart: fn(&report::Report, &str) -> String,
) -> Result<(), Failure> {
    experiment.check().map_err(Failure::Usage)?;
    let workers = Workers::new();
    let machine = crate::machine::machine();
    println!("{machine}");
    println!(
        "keys {} ({}), hash {}, {} repeat(s), {}, latency sampling {}, huge pages {}{}",
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
        if experiment.recipe.populate {
            ", floe's table populated when built"
        } else {
            ""
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
        report::write_file(&path, &chart(&report, title)).map_err(Failure::Run)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn suite(args: SuiteArgs) -> Result<(), Failure> {
    let mut experiment = args.common.experiment(1.0, false)?;
    experiment.workloads = vec![Workload::Get, Workload::Insdel, Workload::Putheavy];
    // What floe is for, at a glance: at all cores, floe one operation at a time and batched,
    // in both layouts, beside the peers one at a time (they have no batches).
    if args.common.threads.is_empty() {
        experiment.threads = vec![Workers::new().cores()];
    }
    if args.common.maps.is_empty() && args.common.backend == [BackendArg::Auto] {
        let depth = floe::batch::DEFAULT_DEPTH;
        let floe = MapEntry::new(MapKind::Floe, "floe", Backend::Auto);
        let dense = MapEntry::new(MapKind::FloeDense, "floe-dense", Backend::Auto);
        let mut maps = vec![
            floe.clone(),
            floe.batched("floe batched", depth),
            dense.clone(),
            dense.batched("floe-dense batched", depth),
        ];
        maps.extend(
            experiment
                .maps
                .iter()
                .filter(|m| !m.kind.is_floe())
                .cloned(),
        );
        experiment.maps = maps;
    }
    let stamp = report::file_stamp();
    let outputs = (
        args.out.join(format!("{stamp}.json")),
        args.out.join(format!("{stamp}.svg")),
    );
    let title = format!(
        "floe-bench suite: {} keys, uniform, one at a time and batched",
        keys::pretty_count(experiment.keys)
    );
    measure_and_report(&experiment, &args.common, Some(outputs), &title, bars::svg)
}

impl RunArgs {
    /// `--batch`, or its default: floe's own depth when batching, else 1 (unbatched).
    fn batch(&self) -> usize {
        self.batch.unwrap_or(match self.api {
            Some(Api::Batch | Api::Pipeline | Api::Bare) => floe::batch::DEFAULT_DEPTH,
            Some(Api::Single) | None => 1,
        })
    }

    fn experiment(&self) -> Result<Experiment, Failure> {
        let mut experiment = self.common.experiment(2.0, self.workload.runs_once())?;
        experiment.workloads = vec![self.workload];
        experiment.read_ratio = self.read_ratio;
        experiment.prefill = self.prefill;
        experiment.dist = self.dist;
        experiment.api = self.api.unwrap_or(if self.batch.is_some_and(|b| b > 1) {
            Api::Batch
        } else {
            Api::Single
        });
        experiment.batch = self.batch();
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
    measure_and_report(&experiment, &args.common, None, &title, plot::svg)
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
        runnable(&common.maps)?
    };
    if let Some(single) = kinds.iter().find(|k| !k.concurrent()) {
        if threads.iter().any(|&t| t > 1) {
            return Err(usage(&format!(
                "--maps {} runs with 1 thread only",
                single.name()
            )));
        }
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
        batch: args.batch(),
        recipe: Recipe {
            capacity: 0,
            hasher: common.hash.hasher(),
            backend,
            huge_pages: common.huge_pages.on(),
            populate: common.populate.on(),
            churn: false,
            resize: floe::ResizeMode::Incremental,
        },
    };
    let machine = crate::machine::machine();
    println!("{machine}");
    println!(
        "{}: {} keys from {} slots; every op timed: {}",
        kind.name(),
        keys::pretty_count(common.keys),
        keys::pretty_count(args.initial_slots),
        plan.latency
    );
    let (rows, machine) = growth::run(&plan, |m| eprintln!("  {m}")).map_err(Failure::Run)?;
    println!("\n{}", growth::table(&rows));
    print!("{}", growth::machine_table(&machine));
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
    let report = growth::Report {
        envelope: report::Envelope::now(growth::SCHEMA),
        rows,
        triggers,
        machine_gaps: machine,
    };
    if let Some(path) = &common.json {
        let json =
            serde_json::to_string_pretty(&report).map_err(|e| Failure::Run(e.to_string()))?;
        report::write_file(path, &json).map_err(Failure::Run)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &common.plot {
        let title = growth_title(&report);
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
    println!("{}", crate::machine::machine());
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

fn bustle(args: BustleArgs) -> Result<(), Failure> {
    if !args.keys.is_power_of_two() || args.keys < 64 {
        return Err(Failure::Usage(format!(
            "--keys: bustle takes a power of two of at least 64, not {}",
            args.keys
        )));
    }
    if args.repeat == 0 || !args.operations.is_finite() || args.operations <= 0.0 {
        return Err(Failure::Usage(
            "--repeat and --operations must be positive".into(),
        ));
    }
    if let Some(w) = args.workloads.iter().find(|w| w.bustle_mix().is_none()) {
        return Err(Failure::Usage(format!(
            "--workloads: {} is not a conc-map-bench mix (readheavy, exchange, rapidgrow)",
            w.name()
        )));
    }
    let cores = Workers::new().cores();
    let threads = if args.threads.is_empty() {
        let mut t = vec![1, cores];
        t.dedup();
        t
    } else {
        args.threads.clone()
    };
    if let Some(&t) = threads.iter().find(|&&t| t == 0) {
        return Err(Failure::Usage(format!("--threads: {t} threads")));
    }
    if let Some(m) = args.maps.iter().find(|m| !m.concurrent()) {
        if threads.iter().any(|&t| t > 1) {
            return Err(Failure::Usage(format!(
                "--maps: {} runs on one thread only",
                m.name()
            )));
        }
    }
    let plan = bustle_run::Plan {
        workloads: args.workloads.clone(),
        maps: runnable(&args.maps)?,
        threads,
        capacity_log2: args.keys.trailing_zeros() as u8,
        operations: args.operations,
        repeat: args.repeat,
        recipe: Recipe {
            capacity: args.keys as usize,
            hasher: args.hash.hasher(),
            backend: Backend::Auto,
            huge_pages: true,
            populate: false,
            churn: true,
            resize: floe::ResizeMode::Incremental,
        },
    };
    println!("{}", crate::machine::machine());
    println!(
        "bustle 0.5: capacity {} ({}), operations {}x, hash {}, {} repeat(s)",
        args.keys,
        keys::pretty_count(args.keys),
        args.operations,
        args.hash.name(),
        args.repeat
    );
    let rows = bustle_run::run(&plan, |m| eprintln!("  {m}")).map_err(Failure::Run)?;
    println!("\n{}", bustle_run::table(&rows));
    Ok(())
}

/// The maps of `kinds` this build can run. The others (C++ peers whose libraries were
/// missing when floe-bench was built) are named on stderr with the reason and left out, so
/// the rest still run.
fn runnable(kinds: &[MapKind]) -> Result<Vec<MapKind>, Failure> {
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

/// `floe-bench peers`: which C++ peers this build has.
fn peers() -> Result<(), Failure> {
    let cpp = [
        MapKind::Boost,
        MapKind::Tbb,
        MapKind::Libcuckoo,
        MapKind::Absl,
    ];
    let mut missing = 0;
    for kind in cpp {
        match kind.missing() {
            None => println!("{}: ok", kind.name()),
            Some(why) => {
                missing += 1;
                println!("{}: missing ({why})", kind.name());
            }
        }
    }
    if missing > 0 {
        return Err(Failure::Run(format!(
            "{missing} of {} C++ peers are missing from this build",
            cpp.len()
        )));
    }
    Ok(())
}

/// A growth chart's title: the workload, its keys and the slots it started from.
fn growth_title(report: &growth::Report) -> String {
    report.rows.first().map_or_else(String::new, |row| {
        format!(
            "{}: {} keys from {} slots",
            row.workload.name(),
            keys::pretty_count(row.keys),
            keys::pretty_count(row.initial_slots as u64)
        )
    })
}

fn replot(args: PlotArgs) -> Result<(), Failure> {
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path)
            .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))
    };
    let parse = |path: &PathBuf, text: &str| {
        report::Report::from_json(text)
            .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))
    };
    if args.space {
        // One chart of every report's rows (one report per workload).
        let mut reports = Vec::new();
        for path in &args.json {
            reports.push(parse(path, &read(path)?)?);
        }
        let mut merged = reports.remove(0);
        for other in reports {
            merged.results.extend(other.results);
            merged.command = format!("{}; {}", merged.command, other.command);
        }
        let title = args.title.unwrap_or_else(|| merged.command.clone());
        let chart = space::svg(&merged, &title).ok_or_else(|| {
            Failure::Usage("no result has bytes per key (measure with `run --memory on`)".into())
        })?;
        report::write_file(&args.out, &chart).map_err(Failure::Run)?;
        println!("wrote {}", args.out.display());
        return Ok(());
    }
    let [path] = args.json.as_slice() else {
        return Err(Failure::Usage(
            "one report at a time, except with --space".into(),
        ));
    };
    let text = read(path)?;
    // A growth run's report (population, grow-read) draws its timelines.
    if let Ok(growth) = serde_json::from_str::<growth::Report>(&text) {
        if growth.envelope.schema == growth::SCHEMA {
            let title = args.title.unwrap_or_else(|| growth_title(&growth));
            report::write_file(&args.out, &growth::svg(&growth, &title)).map_err(Failure::Run)?;
            println!("wrote {}", args.out.display());
            return Ok(());
        }
    }
    let report = parse(path, &text)?;
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
                populate: false,
                churn: false,
                resize: floe::ResizeMode::Incremental,
            }
            .floe()
            .map_err(Failure::Usage)?
            .stats()
            .allocated_bytes
        }
    };
    println!("{}", crate::machine::machine());
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
        .collect::<Result<_, _>>()
        .map_err(Failure::Run)?;
    print!("{}", ceiling_table(&figures));
    Ok(())
}

fn probe(args: ProbeArgs) -> Result<(), Failure> {
    let recipe = Recipe {
        capacity: args.keys as usize,
        hasher: args.hash.hasher(),
        backend: Backend::Auto,
        huge_pages: true,
        populate: false,
        churn: false,
        resize: floe::ResizeMode::Incremental,
    };
    let bytes = experiment::memory_probe(args.map, &recipe, args.keys).map_err(Failure::Run)?;
    println!("rss_growth_bytes={bytes}");
    Ok(())
}

/// `floe-bench server`: one of its modes (cache-aside, hit ratios, warm restart, or the
/// default load), each in its own module over `server_load`'s launcher and client.
fn server(args: &server_load::ServerArgs) -> Result<(), String> {
    server_load::prepare(args)?;
    let cpu = machine::machine().cpu;
    if args.cache_aside {
        server_load::cache_aside(args, &cpu)
    } else if args.hit_ratio {
        hit_ratio::run(args, &args.traces, &cpu)
    } else if args.warm_restart {
        warm_restart::run(args, &cpu)
    } else {
        server_load::main(args, &cpu)
    }
}
