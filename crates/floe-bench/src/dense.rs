//! `floe-bench dense`: the dense layout against the default one, at the same keys.
//!
//! First, both maps are built for the keys up front: a `FlatMap` of `Layout::Dense` whose first
//! table's growth trigger (82% of its slots) is `--keys` and which never grows past it
//! (`max_bins(1)`), and a `FlatMap` of the default layout built with that capacity and the link
//! pool `run` gives churn workloads (one bucket per 3 bins; its space is a little lower than at the
//! default pool's one per 8). Both are filled with the same keys from all threads (timed: `fill`),
//! then, per workload, each runs for `--seconds` on per-thread streams of keys drawn before timing,
//! the layouts alternating, `--repeat` times: the table below gives medians and the ratio of the
//! medians. Space is key and value bytes over table bytes; lines per operation come from floe's own
//! counter and are non-zero only in a `--features line-stats` build.
//!
//! Then `population`: `--repeat` times, which layout goes first alternating, a map of each layout
//! built for [`POPULATION_START`] keys is filled with all `--keys` keys, growing on the way (the
//! dense one by migrations, `floe/src/raw/dense/driver.rs`); the median rate, and the space at the
//! end. Each population runs in a process of its own (`dense-population-child`): filled in this
//! one, a map met the state the other layout's maps left (its freed memory, which a VM's host
//! may still back or may have taken back), and the default layout's runs ranged over 3x (2.6 to
//! 8.4 Mops/s in one invocation) against 3.9-4.9 in processes of their own.

use std::time::Duration;

use clap::Args;
use floe::{FlatMap, Layout};

use crate::{
    keys::{mix, parse_count},
    machine::machine,
    measure::{cycle_for, median, streams, Workers},
};

/// Keys the maps of the population run are built for (both grow from there).
pub const POPULATION_START: usize = 1 << 16;

/// `floe-bench dense`.
#[derive(Args, Debug)]
pub struct DenseArgs {
    /// Keys in both maps (the dense layout's growth trigger).
    #[arg(long, default_value = "2^26", value_parser = parse_count)]
    pub keys: u64,
    /// Threads [default: all cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seconds per timed run.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Timed runs per workload and layout (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

/// Both layouts' maps: `FlatMap<u64, u64>`, built with either `Layout`.
type Table = FlatMap<u64, u64>;

/// A map of `layout` whose first table is sized for `keys` (its trigger, for the dense one),
/// fixed at that size or growing from it. `churn`: the default layout's link pool is sized
/// for insert/remove churn as `run` sizes it (`maps::Recipe::churn`, one bucket per 3 bins):
/// with one per 8 its pool ran out under insdel at 2^23-2^24 keys and the map grew in the
/// middle of the measurement (0.4-1.7 Mops/s).
fn table(layout: Layout, keys: usize, fixed: bool, churn: bool) -> Result<Table, String> {
    let builder = FlatMap::builder().layout(layout).capacity(keys);
    let builder = if churn && layout == Layout::Bins {
        builder.bins_per_link(3)
    } else {
        builder
    };
    // `max_bins` at most the first table's size: the table never grows.
    let builder = if fixed { builder.max_bins(1) } else { builder };
    builder
        .build()
        .map_err(|e| format!("{layout:?} map of {keys} keys: {e}"))
}

/// Insert if absent: whether the key was new; `None` if the table had no room for it.
fn insert(table: &Table, key: u64, value: u64) -> Option<bool> {
    table
        .try_insert_new(key, value)
        .ok()
        .map(|inserted| inserted.is_inserted())
}

fn table_bytes(table: &Table) -> usize {
    table.stats().allocated_bytes
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    Get,
    GetBatched,
    GetMiss,
    Insdel,
    Putheavy,
}

const WORKS: [Work; 5] = [
    Work::Get,
    Work::GetBatched,
    Work::GetMiss,
    Work::Insdel,
    Work::Putheavy,
];

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Get => "get",
            Work::GetBatched => "get (batches of 64)",
            Work::GetMiss => "get-miss",
            Work::Insdel => "insdel",
            Work::Putheavy => "putheavy",
        }
    }
}

/// One timed run: (Mops/s, lines per operation, inserts that found no room).
fn timed(
    table: &Table,
    work: Work,
    workers: &Workers,
    threads: usize,
    present: &[Vec<u64>],
    absent: &[Vec<u64>],
    seconds: f64,
) -> (f64, f64, u64) {
    let duration = Duration::from_secs_f64(seconds);
    let (elapsed, per_thread) = workers.run(threads, |t| {
        let lines_before = floe::lines_read();
        let mut sink = 0u64;
        let mut full = 0u64;
        let ops = match work {
            Work::Get => cycle_for(&present[t], duration, |&k| {
                sink = sink.wrapping_add(table.get(&k).unwrap_or(1));
            }),
            Work::GetMiss => cycle_for(&absent[t], duration, |&k| {
                sink = sink.wrapping_add(table.get(&k).unwrap_or(1));
            }),
            Work::GetBatched => {
                let mut out = [None; 64];
                let chunks: Vec<&[u64]> = present[t].chunks_exact(64).collect();
                64 * cycle_for(&chunks, duration, |keys| {
                    table
                        .batch()
                        .get_many(keys, &mut out)
                        .expect("one value slot per key");
                    sink = sink.wrapping_add(out[0].unwrap_or(1));
                })
            }
            Work::Insdel => {
                2 * cycle_for(&absent[t], duration, |&k| {
                    if insert(table, k, k).is_none() {
                        full += 1;
                    }
                    sink = sink.wrapping_add(table.remove(&k).unwrap_or(1));
                })
            }
            Work::Putheavy => {
                let mut flip = false;
                cycle_for(&present[t], duration, |&k| {
                    flip = !flip;
                    if flip {
                        sink = sink.wrapping_add(table.get(&k).unwrap_or(1));
                    } else {
                        table.put(k, sink);
                    }
                })
            }
        };
        std::hint::black_box(sink);
        (ops, floe::lines_read() - lines_before, full)
    });
    let ops: u64 = per_thread.iter().map(|r| r.0).sum();
    let lines: u64 = per_thread.iter().map(|r| r.1).sum();
    let full: u64 = per_thread.iter().map(|r| r.2).sum();
    // Insdel's lines are per operation too (an insert or a remove each).
    (
        ops as f64 / elapsed.as_secs_f64() / 1e6,
        lines as f64 / ops.max(1) as f64,
        full,
    )
}

/// Insert keys `mix(0..keys)` from `threads` threads: (Mops/s, inserts that found no room).
fn fill(table: &Table, workers: &Workers, threads: usize, keys: u64) -> (f64, u64) {
    let (elapsed, full) = workers.run(threads, |t| {
        let mut full = 0u64;
        let mut i = t as u64;
        while i < keys {
            match insert(table, mix(i), i) {
                Some(new) => assert!(new, "key {i} twice"),
                None => full += 1,
            }
            i += threads as u64;
        }
        full
    });
    (keys as f64 / elapsed.as_secs_f64() / 1e6, full.iter().sum())
}

/// The flags' errors (exit 2).
pub fn check(args: &DenseArgs) -> Result<(), String> {
    if args.repeat == 0 || args.keys < 64 {
        return Err("--repeat must be at least 1 and --keys at least 64".into());
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err("--seconds must be a positive number".into());
    }
    if args.threads == Some(0) {
        return Err("--threads must be at least 1".into());
    }
    Ok(())
}

/// Run the comparison and print it (markdown); the flags are `check`ed.
pub fn main(args: DenseArgs) -> Result<(), String> {
    let workers = Workers::new();
    let threads = args.threads.unwrap_or_else(|| workers.cores());
    let keys = args.keys;
    // The default layout's map is as `with_capacity(keys)` makes it (with the churn pool);
    // the dense one is fixed at the table whose trigger is `keys`, so its space is the
    // layout's at its trigger.
    let dense = table(Layout::Dense, keys as usize, true, true)?;
    let default = table(Layout::Bins, keys as usize, false, true)?;
    let tables: [(&str, &Table); 2] = [("dense", &dense), ("default", &default)];
    println!(
        "# floe-bench dense: {keys} keys, {threads} threads, {}",
        machine().cpu
    );
    println!("backend of the dense gets: {:?}", dense.backend());
    let mut fills = Vec::new();
    for (name, table) in tables {
        let (rate, full) = fill(table, &workers, threads, keys);
        let space = (table.len() * 16) as f64 / table_bytes(table) as f64;
        fills.push(rate);
        println!(
            "{name}: {} keys ({full} found no room), {:.1} MiB of table, space {:.3}, fill {rate:.2} Mops/s",
            table.len(),
            table_bytes(table) as f64 / (1 << 20) as f64,
            space
        );
    }
    let per_thread = (1usize << 20).min(keys as usize);
    let present = streams(threads, 11, per_thread, |rng| mix(rng.below(keys)));
    let absent = streams(threads, 23, per_thread, |rng| mix(keys + rng.below(keys)));
    println!();
    println!("| workload | dense Mops/s | default Mops/s | dense / default | dense lines/op | default lines/op |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| fill (one run) | {:.2} | {:.2} | {:.2}x | | |",
        fills[0],
        fills[1],
        fills[0] / fills[1]
    );
    for work in WORKS {
        let mut rates = [Vec::new(), Vec::new()];
        let mut lines = [0.0f64; 2];
        let mut full = [0u64; 2];
        for _ in 0..args.repeat {
            for (i, (_, table)) in tables.iter().enumerate() {
                let (rate, per_op, no_room) = timed(
                    table,
                    work,
                    &workers,
                    threads,
                    &present,
                    &absent,
                    args.seconds,
                );
                rates[i].push(rate);
                lines[i] = per_op;
                full[i] += no_room;
            }
        }
        let [dense_rate, default_rate] = rates.map(median);
        println!(
            "| {} | {dense_rate:.2} | {default_rate:.2} | {:.2}x | {:.3} | {:.3} |",
            work.name(),
            dense_rate / default_rate,
            lines[0],
            lines[1]
        );
        for (i, (name, _)) in tables.iter().enumerate() {
            if full[i] > 0 {
                println!(
                    "|  | {name}: {} inserts found no room (`Full`) | | | | |",
                    full[i]
                );
            }
        }
    }
    drop((dense, default));
    population(threads, keys, args.repeat)
}

/// The layouts `population` compares.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PopulationLayout {
    Dense,
    Default,
}

/// `floe-bench dense-population-child` (hidden): one population run in a process of its own.
#[derive(Args, Debug)]
pub struct PopulationChildArgs {
    #[arg(long, value_enum)]
    pub layout: PopulationLayout,
    #[arg(long, value_parser = parse_count)]
    pub keys: u64,
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
}

/// Fill a growing map of the given layout (built for [`POPULATION_START`] keys) with `keys`
/// keys and print `population_mops=<rate> space=<space>`.
pub fn population_child(args: PopulationChildArgs) -> Result<(), String> {
    let layout = match args.layout {
        PopulationLayout::Dense => Layout::Dense,
        PopulationLayout::Default => Layout::Bins,
    };
    let map = table(layout, POPULATION_START, false, false)?;
    let (rate, full) = fill(&map, &Workers::new(), args.threads.into(), args.keys);
    if full > 0 {
        return Err(format!("{full} inserts into a growing map found no room"));
    }
    let space = (map.len() * 16) as f64 / table_bytes(&map) as f64;
    println!("population_mops={rate} space={space}");
    Ok(())
}

/// One population run of `layout` in a child process: (Mops/s, space at the end).
fn population_run(
    layout: PopulationLayout,
    threads: usize,
    keys: u64,
) -> Result<(f64, f64), String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding floe-bench: {e}"))?;
    // The name `--layout` takes (clap's, from the enum).
    let name = clap::ValueEnum::to_possible_value(&layout)
        .map_or_else(|| format!("{layout:?}"), |v| v.get_name().to_string());
    let output = std::process::Command::new(exe)
        .args(["dense-population-child", "--layout", &name])
        .args([
            "--keys",
            &keys.to_string(),
            "--threads",
            &threads.to_string(),
        ])
        .output()
        .map_err(|e| format!("starting a population run: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |name: &str| -> Option<f64> {
        text.split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
    };
    match (
        output.status.success(),
        field("population_mops"),
        field("space"),
    ) {
        (true, Some(rate), Some(space)) => Ok((rate, space)),
        _ => Err(format!(
            "population run of the {name} layout failed ({}): {} {}",
            output.status,
            text.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

/// The population run (module docs): growing maps of both layouts filled with `keys` keys,
/// each run in a process of its own.
fn population(threads: usize, keys: u64, repeat: usize) -> Result<(), String> {
    let mut rates = [Vec::new(), Vec::new()];
    let mut space = [0.0f64; 2];
    for run in 0..repeat {
        // Which layout fills first alternates: the first finds the memory the previous run
        // (or the fixed maps) freed, which the host may still back.
        let order = if run % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let layout = [PopulationLayout::Dense, PopulationLayout::Default][i];
            let (rate, end_space) = population_run(layout, threads, keys)?;
            rates[i].push(rate);
            space[i] = end_space;
        }
    }
    println!(
        "population runs (Mops/s, in order of the runs): dense {:.2?}, default {:.2?}",
        rates[0], rates[1]
    );
    let [dense_rate, default_rate] = rates.map(median);
    println!(
        "| population (from {POPULATION_START} keys) | {dense_rate:.2} | {default_rate:.2} | {:.2}x | | |",
        dense_rate / default_rate
    );
    println!();
    println!(
        "space after the population: dense {:.3}, default {:.3}",
        space[0], space[1]
    );
    Ok(())
}
