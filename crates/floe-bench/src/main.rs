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
//! main.rs          the subcommand list (clap) and where each goes; picks the `server`
//!                  subcommand's mode
//! subcommands      each with its flags beside it: suite.rs (the default suite) over run.rs
//!                  (`run`, `sweep`: the experiment the shared flags describe, measured and
//!                  reported), replot.rs (`plot`), ceiling_run.rs (`ceiling`), bustle_run.rs
//!                  (conc-map-bench's driver), cache.rs (floe::Cache against moka,
//!                  quick_cache, scc), dense.rs (the two layouts), join.rs (hash joins),
//!                  oltp.rs (Smallbank, TATP), recovery.rs (a persistent map after a crash),
//!                  sizes.rs and ycsb.rs (maps of byte strings), skew.rs (delegation under
//!                  skew), simd/ (the layout lab, own layers); hit_ratio.rs and
//!                  warm_restart.rs (server modes) over server_load.rs (floe-server and
//!                  memcached: launcher, client, load mode)
//! experiment.rs    one configuration's measurement (and the memory probe's child);
//! growth.rs        timelines while maps grow (`run --workload population|grow-read`, and
//!                  `plot` of their reports)
//! plot.rs  bars.rs  space.rs   the charts: scaling, the suite's bars, speed against space
//! report.rs        rows, the report Envelope (schema, time, machine), JSON/CSV/tables
//! args.rs          the flags the measuring subcommands share (`Common`, hash, backends),
//!                  and `Failure`, what every subcommand answers (exit codes 1 and 2)
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
mod ceiling_run;
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
mod replot;
mod report;
mod run;
mod server_load;
mod simd;
mod sizes;
mod skew;
mod space;
mod suite;
mod svg;
mod warm_restart;
mod workload;
mod ycsb;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{args::Failure, maps::MapKind};

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
    suite: suite::SuiteArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The default suite: get, insdel, putheavy at all cores; floe (both layouts, one at a
    /// time and batched) and the peers.
    Suite(suite::SuiteArgs),
    /// One configuration: a workload on some maps at some thread counts.
    Run(run::RunArgs),
    /// A hash join (DLHT's application; Balkesen et al.'s workload A): floe batched and one
    /// at a time against a radix-partitioned hashbrown join, inner, semi and anti; build and
    /// probe times, tuples/s, the probe beside the read ceiling. `ci/join.sh` adds DuckDB.
    Join(join::JoinArgs),
    /// DLHT's multi-key transactions, Smallbank and TATP, under two-phase locking: floe
    /// (ordered lock batches, batched reads and writes) against dashmap and papaya with a lock
    /// table; every engine's invariants checked at the end.
    Oltp(oltp::OltpArgs),
    /// `floe::Cache` against moka (W-TinyLFU and LRU), quick_cache and scc's `HashCache`:
    /// hit ratios on four traces at two sizes, throughput, memory per entry.
    Cache(cache::CacheArgs),
    /// Fill one cache in this process and print its RSS growth per entry (`cache`'s probe).
    #[command(hide = true)]
    CacheProbe(cache::CacheProbeArgs),
    /// The machine's ceiling alone: random line reads and RMWs, with and without prefetch.
    Ceiling(ceiling_run::CeilingArgs),
    /// One `run` configuration over a range of one parameter (batch, keys, theta).
    Sweep(run::SweepArgs),
    /// Draw the thread-scaling chart of a saved JSON report.
    Plot(replot::PlotArgs),
    /// The SIMD layout lab (SimdHT-Bench): vectorized vs scalar lookups over cuckoo layouts.
    Simd(simd::SimdArgs),
    /// conc-map-bench's mixes through the `bustle` crate itself (beside `run --workload
    /// readheavy|exchange|rapidgrow`, floe-bench's port of them).
    Bustle(bustle_run::BustleArgs),
    /// floe::Map against the any-key peers as keys and values grow (DLHT Fig. 9 and 10):
    /// get, get-and-read-the-value, insdel, and with `--memory` bytes per entry.
    Sizes(sizes::SizesArgs),
    /// YCSB's core workloads A, B, C, D, F on maps of byte strings (23-byte keys, zipf 0.99),
    /// after a load phase into an empty map.
    Ycsb(ycsb::YcsbArgs),
    /// floe-server against memcached under one load generator: multi-gets, get/set mixes,
    /// uniform and zipf keys; throughput and latency percentiles; `--cache-aside` for the
    /// hit ratio under eviction.
    Server(server_load::ServerArgs),
    /// A persistent floe map's recovery after a crash (SIGKILL of a child that filled it):
    /// open time and keys per second per thread, against an open after a clean close.
    Recovery(recovery::RecoveryArgs),
    /// Write-heavy work on skewed keys (DRAMHiT Fig. 8): counting and a get/fetch_add mix
    /// over zipf thetas, on floe's delegated `Partitioned` map, the shared `FlatMap`
    /// (one at a time and batched) and the Rust peers.
    Skew(skew::SkewArgs),
    /// The dense layout (`Layout::Dense`, fixed at the table whose trigger is `--keys`)
    /// against the default one at the same keys: space, lines per operation, gets, batched
    /// gets, misses, insdel, putheavy, and a population with growth.
    Dense(dense::DenseArgs),
    /// One population run of `dense`, in a process of its own.
    #[command(hide = true)]
    DensePopulationChild(dense::PopulationChildArgs),
    /// The children of `recovery`.
    #[command(hide = true)]
    RecoveryChild(recovery::ChildArgs),
    /// The C++ peers this build has (boost, tbb, libcuckoo, absl), and why any is missing;
    /// exits 1 if one is.
    Peers,
    /// Fill one map in this process and print its RSS growth (used by the memory measurement).
    #[command(hide = true)]
    MemoryProbe(experiment::ProbeArgs),
    /// Fill one map of byte strings in this process and print its RSS growth (`sizes
    /// --memory`).
    #[command(hide = true)]
    SizesProbe(sizes::SizesProbeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => suite::main(cli.suite),
        Some(Command::Suite(args)) => suite::main(args),
        Some(Command::Run(args)) => run::run(args),
        Some(Command::Ceiling(args)) => ceiling_run::main(args),
        Some(Command::Sweep(args)) => run::sweep(args),
        Some(Command::Plot(args)) => replot::main(args),
        Some(Command::Bustle(args)) => bustle_run::main(args),
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
        Some(Command::MemoryProbe(args)) => experiment::probe_main(args),
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
