//! One invocation's worth of measurements: the ceiling, then every map on every workload and
//! thread count, into a [`Report`].
//!
//! Order of work: prepare nothing twice. Operation arrays are made once per (workload, threads)
//! and shared by every map; a cycling workload's map is built and prefilled once per map and
//! serves every such workload, thread count and repeat (they leave the table as they found it);
//! a run-once workload gets a fresh, freshly prefilled map per repeat. Each (workload, threads)
//! of a cycling workload gets an untimed warm-up run (a fifth of a timed run) before its timed
//! repeats; a run-once workload's prefill is its warm-up.

use std::{
    collections::HashMap,
    process::Command,
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use clap::Args;
use floe::Backend;

use crate::{
    args::{Failure, HashArg},
    ceiling::{Ceiling, Figures},
    dist::Dist,
    keys::parse_count,
    maps::{BenchMap, MapKind, Recipe, Visit},
    measure::{prefill, timed, Api, Mode, Stop, Summary, Workers},
    report::{CeilingReport, Report, Row},
    workload::{Plan, Spec, Workload},
};

/// Everything one invocation measures.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub workloads: Vec<Workload>,
    pub read_ratio: f64,
    pub keys: u64,
    /// `None`: each workload's default.
    pub prefill: Option<f64>,
    pub threads: Vec<usize>,
    pub dist: Dist,
    /// Seconds per timed run of a cycling workload (`None` when `ops` is given, or when every
    /// workload runs a fixed number of operations).
    pub seconds: Option<f64>,
    /// Operations per timed run (the run-once workloads: `None` is their own default).
    pub ops: Option<u64>,
    pub repeat: usize,
    /// How floe gets its operations (peers always get them one by one).
    pub api: Api,
    /// floe's prefetch depth (batch) or window (pipeline); 1 with `Api::Single`.
    pub batch: usize,
    pub prefetch: floe::Prefetch,
    /// Maps, with the label each is reported under, floe's backend and, for an entry that
    /// batches whatever the experiment's `api` (the suite's "floe batched"), its own.
    pub maps: Vec<MapEntry>,
    pub recipe: Recipe,
    pub latency: bool,
    /// Measure RSS growth per key in a child process for maps that do not report table bytes.
    pub memory: bool,
    /// The `--hash` name (passed on to memory probes).
    pub hash_name: String,
    pub command: String,
}

/// One map of an experiment.
#[derive(Clone, Debug)]
pub struct MapEntry {
    pub kind: MapKind,
    /// The name its rows are reported under.
    pub label: String,
    pub backend: floe::Backend,
    /// How it gets its operations when not as the experiment's `api` says: (api, depth).
    pub api: Option<(Api, usize)>,
}

impl MapEntry {
    pub fn new(kind: MapKind, label: impl Into<String>, backend: floe::Backend) -> Self {
        MapEntry {
            kind,
            label: label.into(),
            backend,
            api: None,
        }
    }

    /// The same map batched: its own API and depth.
    pub fn batched(mut self, label: impl Into<String>, depth: usize) -> Self {
        self.label = label.into();
        self.api = Some((Api::Batch, depth));
        self
    }
}

/// Longest per-thread array a cycling workload (and the ceiling) walks through: long enough
/// that the lines it touches are far more than the caches hold.
pub fn stream_len(keys: u64) -> usize {
    (keys as usize).clamp(1 << 16, 1 << 23) & !1
}

impl Experiment {
    fn spec(&self, workload: Workload, threads: usize) -> Spec {
        let stream_len = match self.ops {
            Some(ops) if !workload.runs_once() => {
                stream_len(self.keys).min((ops / threads as u64).max(2) as usize) & !1
            }
            _ => stream_len(self.keys),
        };
        Spec {
            workload,
            read_ratio: self.read_ratio,
            keys: self.keys,
            prefill: self.prefill.unwrap_or(workload.default_prefill()),
            dist: self.dist,
            threads,
            ops: self.ops,
            stream_len,
        }
    }

    /// Whether every workload of this experiment is all gets (so a map with batched gets
    /// but no other batch interface, `floe-any`, can run `--api batch`).
    fn all_gets(&self) -> bool {
        self.workloads
            .iter()
            .all(|w| matches!(w, Workload::Get | Workload::GetMiss))
    }

    fn threads_for(&self, kind: MapKind) -> Vec<usize> {
        self.threads
            .iter()
            .copied()
            .filter(|&t| kind.concurrent() || t == 1)
            .collect()
    }

    /// Flag combinations that cannot run, found before anything is measured.
    pub fn check(&self) -> Result<(), String> {
        match (self.api, self.batch) {
            (_, 0) => return Err("--batch must be at least 1".into()),
            (_, b) if b > floe::batch::MAX_DEPTH => {
                return Err(format!(
                    "--batch: at most {} (floe's deepest prefetch window)",
                    floe::batch::MAX_DEPTH
                ))
            }
            (Api::Single, b) if b > 1 => {
                return Err("--batch > 1 needs --api batch or pipeline".into())
            }
            _ => {}
        }
        if self.api == Api::Bare && !self.all_gets() {
            return Err(
                "--api bare measures the harness on all-get workloads (get, get-miss)".into(),
            );
        }
        if self.seconds.is_some() && self.ops.is_some() {
            return Err("give --seconds or --ops, not both".into());
        }
        if self.seconds.is_none()
            && self.ops.is_none()
            && self.workloads.iter().any(|w| !w.runs_once())
        {
            return Err("cycling workloads need --seconds or --ops".into());
        }
        for &w in &self.workloads {
            for &t in &self.threads {
                self.spec(w, t).check()?;
            }
        }
        for entry in &self.maps {
            if self.threads_for(entry.kind).is_empty() {
                return Err(format!(
                    "{} runs on 1 thread only; add 1 to --threads",
                    entry.kind.name()
                ));
            }
        }
        Ok(())
    }

    fn duration(&self) -> Option<Duration> {
        self.seconds.map(Duration::from_secs_f64)
    }

    /// Measure everything; progress on stderr.
    pub fn run(&self, workers: &Workers) -> Result<Report, String> {
        self.check()?;
        let started = Instant::now();
        let ceiling_duration = Duration::from_secs_f64(self.seconds.unwrap_or(0.5).clamp(0.2, 0.5));
        let steps = self.steps();
        let progress = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
        progress.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );

        // Every operation array, once, shared by all maps; their peak key count sizes the maps.
        progress.set_message("preparing operations");
        let mut plans: HashMap<(Workload, usize), Plan> = HashMap::new();
        for &workload in &self.workloads {
            for &threads in &self.threads {
                plans.insert((workload, threads), self.spec(workload, threads).plan());
            }
        }
        let capacity = plans
            .values()
            .map(|p| p.capacity as usize)
            .fold(self.recipe.capacity, usize::max);
        let recipe = Recipe {
            capacity,
            churn: self.workloads.iter().any(|w| w.churns()),
            ..self.recipe
        };

        // The ceiling over an array as large as floe's table (allocated lazily: no cost).
        let table_bytes = recipe.floe()?.stats().allocated_bytes;
        progress.set_message(format!(
            "ceiling over {:.2} GiB",
            table_bytes as f64 / f64::from(1 << 30)
        ));
        let figures: Vec<Figures> = {
            let ceiling = Ceiling::new(table_bytes, self.recipe.huge_pages)?;
            self.threads
                .iter()
                .map(|&t| {
                    Figures::measure(
                        &ceiling,
                        workers,
                        t,
                        ceiling_duration,
                        self.repeat,
                        stream_len(self.keys),
                        || progress.inc(1),
                    )
                })
                .collect::<Result<_, _>>()?
        };
        let ceiling = CeilingReport::new(figures, table_bytes as u64, self.recipe.huge_pages);

        let mut rows = Vec::new();
        for entry in &self.maps {
            let (kind, label) = (&entry.kind, &entry.label);
            let recipe = Recipe {
                backend: entry.backend,
                ..recipe
            };
            let memory = if self.memory {
                progress.set_message(format!("{label}: memory probe"));
                let m = self.memory_probe(*kind)?;
                progress.inc(1);
                m
            } else {
                None
            };
            let mode = match entry.api {
                Some((api, batch)) => Mode {
                    api,
                    batch,
                    prefetch: self.prefetch,
                    sample_latency: self.latency && api == Api::Single,
                },
                None if kind.batches_requests() || (kind.batches_gets() && self.all_gets()) => {
                    Mode {
                        // The bare loop is FlatMap's (`Batch::get_many` unchecked): the other
                        // floe map runs its checked batch alone.
                        api: if kind.is_floe() || self.api != Api::Bare {
                            self.api
                        } else {
                            Api::Batch
                        },
                        batch: self.batch,
                        prefetch: self.prefetch,
                        sample_latency: self.latency,
                    }
                }
                None => Mode::single(self.latency),
            };
            let measured = recipe.visit(
                *kind,
                MeasureMap {
                    experiment: self,
                    workers,
                    label,
                    threads: self.threads_for(*kind),
                    prefill_threads: if kind.concurrent() {
                        workers.cores()
                    } else {
                        1
                    },
                    plans: &plans,
                    progress: &progress,
                    ceiling: &ceiling,
                    rss_per_key: memory,
                    mode,
                },
            )?;
            rows.extend(measured);
        }
        progress.finish_and_clear();
        eprintln!("measured in {:.0} s", started.elapsed().as_secs_f64());
        Ok(Report {
            envelope: crate::report::Envelope::now(crate::report::SCHEMA),
            ceiling,
            results: rows,
            command: self.command.clone(),
        })
    }

    /// Progress steps: ceiling runs, memory probes, warm-ups and timed runs.
    fn steps(&self) -> u64 {
        // Six ceilings and the minimal table's finds and inserts (`ceiling::Figures::measure`).
        let ceiling = 8 * self.repeat * self.threads.len();
        let maps: usize = self
            .maps
            .iter()
            .map(|entry| {
                let per_workload = |w: &Workload| {
                    self.threads_for(entry.kind).len() * (self.repeat + usize::from(!w.runs_once()))
                };
                usize::from(self.memory) + self.workloads.iter().map(per_workload).sum::<usize>()
            })
            .sum();
        (ceiling + maps) as u64
    }

    /// RSS growth per key of a map of `kind` holding `--keys` keys, measured in a fresh child
    /// process (in this one, freed memory of earlier maps would be reused). Maps that report
    /// their table size skip it.
    fn memory_probe(&self, kind: MapKind) -> Result<Option<f64>, String> {
        let reports_table = kind.is_floe();
        if reports_table {
            return Ok(None);
        }
        let exe = std::env::current_exe().map_err(|e| format!("finding floe-bench: {e}"))?;
        let output = Command::new(exe)
            .args([
                "memory-probe",
                "--map",
                kind.name(),
                "--keys",
                &self.keys.to_string(),
                "--hash",
                &self.hash_name,
            ])
            .output()
            .map_err(|e| format!("starting the memory probe: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "memory probe for {} failed: {}",
                kind.name(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let bytes: f64 = text
            .trim()
            .strip_prefix("rss_growth_bytes=")
            .and_then(|b| b.parse().ok())
            .ok_or_else(|| format!("memory probe printed '{}'", text.trim()))?;
        Ok(Some(bytes / self.keys as f64))
    }
}

/// Fill a map of `kind` with `keys` keys and print its RSS growth (the `memory-probe`
/// subcommand, run in a child process).
pub fn memory_probe(kind: MapKind, recipe: &Recipe, keys: u64) -> Result<u64, String> {
    struct Probe<'a> {
        keys: u64,
        threads: usize,
        workers: &'a Workers,
    }
    impl Visit for Probe<'_> {
        type Output = u64;
        fn visit<M: BenchMap>(self, build: &dyn Fn() -> Result<M, String>) -> Result<u64, String> {
            // The key array first, so its pages are not counted.
            let keys: Vec<u64> = (0..self.keys).map(crate::workload::present_key).collect();
            let before = crate::machine::rss_bytes().ok_or("no /proc/self/statm")?;
            let map = build()?;
            prefill(self.workers, self.threads, &map, &keys)?;
            let after = crate::machine::rss_bytes().ok_or("no /proc/self/statm")?;
            drop(map);
            Ok(after.saturating_sub(before) as u64)
        }
    }
    let workers = Workers::new();
    recipe.visit(
        kind,
        Probe {
            keys,
            threads: if kind.concurrent() {
                workers.cores()
            } else {
                1
            },
            workers: &workers,
        },
    )
}

/// Measures one map on every workload and thread count.
struct MeasureMap<'a> {
    experiment: &'a Experiment,
    workers: &'a Workers,
    label: &'a str,
    threads: Vec<usize>,
    /// Threads that prefill (1 for maps that are not concurrent).
    prefill_threads: usize,
    plans: &'a HashMap<(Workload, usize), Plan>,
    progress: &'a ProgressBar,
    ceiling: &'a CeilingReport,
    rss_per_key: Option<f64>,
    mode: Mode,
}

impl Visit for MeasureMap<'_> {
    type Output = Vec<Row>;

    fn visit<M: BenchMap>(self, build: &dyn Fn() -> Result<M, String>) -> Result<Vec<Row>, String> {
        let e = self.experiment;
        let mut rows = Vec::new();
        // The map shared by the cycling workloads, built on first use.
        let mut shared: Option<M> = None;
        let mut table_bytes = None;
        for &workload in &e.workloads {
            for &threads in &self.threads {
                let spec = e.spec(workload, threads);
                let plan = &self.plans[&(workload, threads)];
                let what = format!("{} {} {threads}T", self.label, workload.name());
                let fail = |e: String| format!("{what}: {e}");
                // `--api bare` measures the harness against its floor: the bench's batched
                // loop and the bare one, alternating on the same map, as two rows.
                let modes: Vec<Mode> = if self.mode.api == Api::Bare {
                    vec![
                        Mode {
                            api: Api::Batch,
                            ..self.mode
                        },
                        self.mode,
                    ]
                } else {
                    vec![self.mode]
                };
                let per_mode: Vec<Vec<crate::measure::Sample>> = if workload.runs_once() {
                    if modes.len() > 1 {
                        return Err(fail("--api bare needs a cycling all-get workload".into()));
                    }
                    let mut samples = Vec::new();
                    // No separate warm-up: each repeat's prefill runs the same code paths.
                    for _ in 0..e.repeat {
                        self.progress.set_message(format!("{what}: prefill"));
                        let map = build()?;
                        prefill(self.workers, self.prefill_threads, &map, &plan.prefill)
                            .map_err(fail)?;
                        self.progress.set_message(what.clone());
                        let sample =
                            timed(self.workers, &map, &plan.streams, Stop::Once, self.mode)
                                .map_err(fail)?;
                        table_bytes = table_bytes.or(map.table_bytes());
                        samples.push(sample);
                        self.progress.inc(1);
                    }
                    vec![samples]
                } else {
                    if shared.is_none() {
                        self.progress
                            .set_message(format!("{}: prefill", self.label));
                        let map = build()?;
                        prefill(self.workers, self.prefill_threads, &map, &plan.prefill)
                            .map_err(fail)?;
                        table_bytes = map.table_bytes();
                        shared = Some(map);
                    }
                    let map = shared.as_ref().expect("built above");
                    let stop = match (e.duration(), e.ops) {
                        (Some(d), _) => Stop::For(d),
                        (None, Some(ops)) => Stop::PerThread(ops / threads as u64),
                        (None, None) => unreachable!("seconds or ops"),
                    };
                    let warm_up = match stop {
                        Stop::For(d) => Stop::For(d / 5),
                        other => other,
                    };
                    self.progress.set_message(format!("{what}: warm-up"));
                    for mode in &modes {
                        let quiet = Mode {
                            sample_latency: false,
                            ..*mode
                        };
                        timed(self.workers, map, &plan.streams, warm_up, quiet).map_err(fail)?;
                    }
                    self.progress.inc(1);
                    self.progress.set_message(what.clone());
                    let mut per_mode: Vec<Vec<_>> = modes.iter().map(|_| Vec::new()).collect();
                    for _ in 0..e.repeat {
                        for (mode, samples) in modes.iter().zip(&mut per_mode) {
                            samples.push(
                                timed(self.workers, map, &plan.streams, stop, *mode)
                                    .map_err(fail)?,
                            );
                        }
                        self.progress.inc(1);
                    }
                    per_mode
                };
                for (mode, samples) in modes.iter().zip(per_mode) {
                    let summary = Summary::of(samples);
                    let figures = self
                        .ceiling
                        .at(threads)
                        .expect("the ceiling is measured at every thread count");
                    let ceiling_mops = figures.matching(plan.read_fraction, mode.batch);
                    let read_ratio = plan.read_fraction;
                    let bytes_per_key = table_bytes
                        .map(|b| b as f64 / e.keys as f64)
                        .or(self.rss_per_key);
                    rows.push(Row {
                        map: self.label.to_string(),
                        workload: workload.name().into(),
                        dist: e.dist.to_string(),
                        threads,
                        keys: e.keys,
                        batch: mode.batch,
                        api: mode.api,
                        mops: summary.median,
                        mops_min: summary.min,
                        mops_max: summary.max,
                        latency_ns: summary.latency,
                        bytes_per_key,
                        ceiling_fraction: summary.median / ceiling_mops,
                        ceiling_mops,
                        rss_bytes_per_key: self.rss_per_key,
                        read_ratio,
                        prefill: spec.prefill,
                        repeat: e.repeat,
                        ops: summary.median_ops,
                        lines_per_op: summary.lines_per_op,
                    });
                }
            }
        }
        Ok(rows)
    }
}

#[derive(Args, Debug)]
/// The flags of `memory_probe`'s child (`floe-bench memory-probe`).
pub struct ProbeArgs {
    #[arg(long, value_enum)]
    pub map: MapKind,
    #[arg(long, value_parser = parse_count)]
    pub keys: u64,
    #[arg(long, value_enum, default_value = "mix64")]
    pub hash: HashArg,
}

/// `memory_probe`'s child: fill one map in this process and print its RSS growth.
pub fn probe_main(args: ProbeArgs) -> Result<(), Failure> {
    let recipe = Recipe {
        capacity: args.keys as usize,
        hasher: args.hash.hasher(),
        backend: Backend::Auto,
        huge_pages: true,
        populate: false,
        churn: false,
        resize: floe::ResizeMode::Incremental,
    };
    let bytes = memory_probe(args.map, &recipe, args.keys).map_err(Failure::Run)?;
    println!("rss_growth_bytes={bytes}");
    Ok(())
}
