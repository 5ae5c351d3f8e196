//! conc-map-bench's mixes through bustle itself, the field's own driver (a port of libcuckoo's
//! universal benchmark), beside floe-bench's port of them (`workload.rs`, `floe-bench run
//! --workload readheavy`). Same maps and adapters (`maps/`), conc-map-bench's hasher (ahash,
//! fixed seeds) by default, and bustle's own key generation, prefill, operation stream, answer
//! checks and clock. BENCHMARKS.md explains where the two harnesses differ.

use std::{
    any::Any,
    panic::AssertUnwindSafe,
    sync::{Arc, Mutex},
};

use bustle::{Collection, CollectionHandle, Measurement, Mix};
use clap::Args;
use floe::Backend;

use crate::{
    args::{runnable, Failure, HashArg},
    keys,
    keys::parse_count,
    maps::{BenchMap, MapKind, Recipe, Visit},
    measure::Workers,
    workload::{value_of, Workload},
};

/// bustle builds its collection itself, through `T::with_capacity` (nothing but a capacity), so
/// the map the recipe built (with the run's hasher and floe's options) waits here for it.
static HANDOVER: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);

/// A bench map as a bustle collection; each thread's handle is a clone of the `Arc`.
struct Bustled<M>(Arc<M>);

impl<M: BenchMap> Collection for Bustled<M> {
    type Handle = Self;

    fn with_capacity(_capacity: usize) -> Self {
        let map = HANDOVER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .and_then(|map| map.downcast::<M>().ok())
            .expect("RunBustle hands over a map of the type it runs");
        Bustled(Arc::new(*map))
    }

    fn pin(&self) -> Self {
        Bustled(Arc::clone(&self.0))
    }
}

impl<M: BenchMap> CollectionHandle for Bustled<M> {
    type Key = u64;

    #[inline]
    fn get(&mut self, key: &u64) -> bool {
        self.0.get(*key).is_some()
    }

    #[inline]
    fn insert(&mut self, key: &u64) -> bool {
        self.0.insert(*key, value_of(*key))
    }

    #[inline]
    fn remove(&mut self, key: &u64) -> bool {
        self.0.remove(*key)
    }

    #[inline]
    fn update(&mut self, key: &u64) -> bool {
        self.0.update(*key, value_of(*key))
    }
}

/// One bustle run of a built map.
struct RunBustle<'a>(&'a bustle::Workload);

impl Visit for RunBustle<'_> {
    type Output = Measurement;

    fn visit<M: BenchMap>(
        self,
        build: &dyn Fn() -> Result<M, String>,
    ) -> Result<Measurement, String> {
        let map = build()?;
        *HANDOVER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Box::new(map));
        // bustle asserts every answer in its worker threads; a wrong one panics there and again
        // at the join, here.
        std::panic::catch_unwind(AssertUnwindSafe(|| self.0.run_silently::<Bustled<M>>()))
            .map_err(|_| "bustle saw a wrong answer (its assertion is printed above)".to_string())
    }
}

/// What to run.
pub struct Plan {
    pub workloads: Vec<Workload>,
    pub maps: Vec<MapKind>,
    pub threads: Vec<usize>,
    pub capacity_log2: u8,
    /// Operations as a multiple of the capacity (bustle's `operations`).
    pub operations: f64,
    pub repeat: usize,
    pub recipe: Recipe,
}

/// One row of the result: a map's throughputs over the repeats.
pub struct Row {
    pub workload: Workload,
    pub threads: usize,
    pub map: MapKind,
    /// Million operations per second, one per repeat.
    pub mops: Vec<f64>,
}

impl Row {
    pub fn median(&self) -> f64 {
        crate::measure::median(self.mops.clone())
    }
}

/// Run every workload, thread count and map; repeats go round the maps (map A, B, C, then A
/// again) so a host's drift falls on every map alike.
pub fn run(plan: &Plan, mut progress: impl FnMut(&str)) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for &workload in &plan.workloads {
        let [read, insert, remove, update] = workload
            .bustle_mix()
            .ok_or_else(|| format!("{} is not a conc-map-bench mix", workload.name()))?;
        let mix = Mix {
            read,
            insert,
            remove,
            update,
            upsert: 0,
        };
        for &threads in &plan.threads {
            let first = rows.len();
            rows.extend(plan.maps.iter().map(|&map| Row {
                workload,
                threads,
                map,
                mops: Vec::new(),
            }));
            for repeat in 0..plan.repeat {
                let mut bustle = bustle::Workload::new(threads, mix);
                bustle
                    .initial_capacity_log2(plan.capacity_log2)
                    .prefill_fraction(workload.default_prefill())
                    .operations(plan.operations)
                    .seed([repeat as u8 + 1; 32]);
                let recipe = Recipe {
                    capacity: 1 << plan.capacity_log2,
                    churn: workload.churns(),
                    ..plan.recipe
                };
                for row in &mut rows[first..] {
                    let measured = recipe.visit(row.map, RunBustle(&bustle))?;
                    row.mops.push(measured.throughput / 1e6);
                    progress(&format!(
                        "{} {threads} thread(s) {}: {:.2} Mops/s",
                        workload.name(),
                        row.map.name(),
                        measured.throughput / 1e6
                    ));
                }
            }
        }
    }
    Ok(rows)
}

/// The result as a table: median, min and max per map, and floe's ratio to the best peer.
pub fn table(rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "workload    threads  map                  Mops/s (median [min, max])   vs best peer\n",
    );
    for row in rows {
        let best_peer = rows
            .iter()
            .filter(|r| r.workload == row.workload && r.threads == row.threads)
            .filter(|r| !r.map.name().starts_with("floe"))
            .map(Row::median)
            .fold(0.0, f64::max);
        let min = row.mops.iter().copied().fold(f64::INFINITY, f64::min);
        let max = row.mops.iter().copied().fold(0.0, f64::max);
        let ratio = if best_peer > 0.0 {
            format!("{:.2}x", row.median() / best_peer)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "{:<11} {:>7}  {:<20} {:>8.2} [{min:.2}, {max:.2}]{:>18}",
            row.workload.name(),
            row.threads,
            row.map.name(),
            row.median(),
            ratio
        );
    }
    out
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

/// `floe-bench bustle`: the mixes of `args` through bustle.
pub fn main(args: BustleArgs) -> Result<(), Failure> {
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
    let plan = Plan {
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
    let rows = run(&plan, |m| eprintln!("  {m}")).map_err(Failure::Run)?;
    println!("\n{}", table(&rows));
    Ok(())
}
