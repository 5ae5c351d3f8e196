//! `floe-bench run` (one configuration: a workload on some maps at some thread counts, or a
//! growth timeline for `population` and `grow-read`) and `floe-bench sweep` (one `run`
//! configuration over a range of one parameter), their flags, and what the suite shares with
//! them: the experiment the common flags describe, measured and reported.

use std::{path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};
use floe::Backend;

use crate::{
    args::{backends, runnable, Common, Failure, PrefetchArg},
    dist::Dist,
    experiment::{Experiment, MapEntry},
    growth, keys,
    keys::parse_count,
    maps::{MapKind, Recipe},
    measure::{Api, Workers},
    plot, report,
    report::ceiling_table,
    workload::Workload,
};

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

impl RunArgs {
    /// `--batch`, or its default: floe's own depth when batching, else 1 (unbatched).
    fn batch(&self) -> usize {
        self.batch.unwrap_or(match self.api {
            Some(Api::Batch | Api::Pipeline | Api::Bare) => floe::batch::DEFAULT_DEPTH,
            Some(Api::Single) | None => 1,
        })
    }

    fn experiment(&self) -> Result<Experiment, Failure> {
        let mut experiment = experiment(&self.common, 2.0, self.workload.runs_once())?;
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

pub fn run(args: RunArgs) -> Result<(), Failure> {
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
        let title = growth::title(&report);
        report::write_file(path, &growth::svg(&report, &title)).map_err(Failure::Run)?;
        println!("wrote {}", path.display());
    }
    Ok(())
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

pub fn sweep(args: SweepArgs) -> Result<(), Failure> {
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

/// The experiment `common`'s flags describe (workload-specific fields at their defaults).
pub fn experiment(
    common: &Common,
    default_seconds: f64,
    runs_once: bool,
) -> Result<Experiment, Failure> {
    let usage = |m: &str| Failure::Usage(m.to_string());
    if common.keys < 1024 {
        return Err(usage("--keys: use at least 1024 keys"));
    }
    if common.keys >= 1 << 40 {
        return Err(usage("--keys: at most 2^40 keys"));
    }
    if common.repeat == 0 {
        return Err(usage("--repeat must be at least 1"));
    }
    let seconds = match (common.seconds, common.ops) {
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
    let ops = common.ops;
    let kinds = if common.maps.is_empty() {
        vec![
            MapKind::Floe,
            MapKind::Dashmap,
            MapKind::Papaya,
            MapKind::Scc,
            MapKind::Leapfrog,
        ]
    } else {
        runnable(&common.maps)?
    };
    let backends = backends(&common.backend).map_err(Failure::Usage)?;
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
        keys: common.keys,
        prefill: None,
        threads: common.threads()?,
        dist: Dist::Uniform,
        seconds,
        ops,
        repeat: common.repeat,
        api: Api::Single,
        batch: 1,
        prefetch: floe::Prefetch::Auto,
        maps,
        recipe: Recipe {
            capacity: common.keys as usize,
            hasher: common.hash.hasher(),
            backend: Backend::Auto,
            huge_pages: common.huge_pages.on(),
            populate: common.populate.on(),
            churn: false,
            resize: floe::ResizeMode::Incremental,
        },
        latency: common.latency.on(),
        memory: common.memory.on(),
        hash_name: common.hash.name().into(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    })
}

pub fn measure_and_report(
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
