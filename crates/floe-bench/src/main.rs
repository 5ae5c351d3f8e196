//! floe-bench: floe's throughput next to the machine's own ceiling, measured in the same run.
//!
//! With no arguments it runs the default job: a table of 2^25 keys (about 1.4 GB, far larger
//! than the caches), unbatched inserts and gets from 1 and all threads, and the ceiling for
//! random 64-byte line reads with no prefetch over an array of the same size. Every figure is
//! the median of `--repeat` runs with min and max, and is shown as a fraction of the ceiling.
//!
//! Build with `--features line-stats` to also count the distinct cache lines each operation
//! reads (for machines where `perf stat` has no cache-miss counters).

mod ceiling;
mod keys;
mod measure;
mod peers;

use std::{process::ExitCode, time::Duration};

use clap::{Parser, ValueEnum};
use floe::{
    hash::{Crc32, Mix64, WyHash},
    Backend, FlatMap,
};

use crate::{
    keys::parse_count,
    measure::{Summary, Workers},
    peers::{BenchMap, MapKind},
};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "floe's throughput next to the machine's random-access ceiling"
)]
struct Args {
    /// Keys in the table (accepts 2^25, 32M, 33554432).
    #[arg(long, default_value = "2^25", value_parser = parse_count)]
    keys: u64,
    /// Thread counts to run, comma separated (default: 1 and all cores).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Seconds per get measurement.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Repeats of every measurement (median, min, max are reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Matching backends to compare (`all` = every one the CPU supports).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    backend: Vec<BackendArg>,
    /// Transparent huge pages for the table and the ceiling array.
    #[arg(long, value_enum, default_value = "on")]
    huge_pages: HugePages,
    /// Maps to measure, comma separated (peers get the same hasher and full capacity).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "floe")]
    maps: Vec<MapKind>,
    /// Hash function.
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
enum HugePages {
    On,
    Off,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum HashArg {
    Mix64,
    Wyhash,
    Crc32,
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
                return Err(format!("this CPU does not support the {b:?} backend"));
            }
            if !out.contains(&b) {
                out.push(b);
            }
        }
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("floe-bench: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let cores = core_affinity::get_core_ids().map_or(1, |c| c.len()).max(1);
    let threads = if args.threads.is_empty() {
        let mut t = vec![1, cores];
        t.dedup();
        t
    } else {
        args.threads.clone()
    };
    if threads.contains(&0) {
        return Err("--threads: thread counts must be at least 1".into());
    }
    if args.keys < 1024 {
        return Err("--keys: use at least 1024 keys".into());
    }
    if args.repeat == 0 || !args.seconds.is_finite() || args.seconds <= 0.0 {
        return Err("--repeat and --seconds must be positive".into());
    }
    let backends = backends(&args.backend)?;
    let huge: &[bool] = match args.huge_pages {
        HugePages::On => &[true],
        HugePages::Off => &[false],
        HugePages::Both => &[true, false],
    };
    let duration = Duration::from_secs_f64(args.seconds);
    let workers = Workers::new();

    println!("{}", measure::machine_description());
    println!(
        "keys {} ({}), hash {:?}, {} repeat(s), {:.1} s per get run, line stats {}",
        args.keys,
        keys::pretty_count(args.keys),
        args.hash,
        args.repeat,
        args.seconds,
        if cfg!(feature = "line-stats") {
            "on"
        } else {
            "off (build with --features line-stats)"
        }
    );
    eprintln!("generating {} keys...", args.keys);
    let all_keys = keys::random_distinct(args.keys, 0x5eed_f10e);

    for &huge_pages in huge {
        // The ceiling over an array as large as the table the map allocates.
        let probe_map = build_map(args, Backend::Scalar, huge_pages)?;
        let table_bytes = probe_map.stats().allocated_bytes;
        drop(probe_map);
        println!();
        println!(
            "== huge pages {}; table {:.2} GiB ({:.1} bytes/key)",
            if huge_pages { "on" } else { "off" },
            table_bytes as f64 / (1u64 << 30) as f64,
            table_bytes as f64 / args.keys as f64
        );
        let ceiling = ceiling::Ceiling::new(table_bytes, huge_pages)?;
        let mut rows: Vec<(String, usize, Summary)> = Vec::new();
        for &t in &threads {
            let s = Summary::of(args.repeat, || ceiling.random_reads(&workers, t, duration));
            rows.push(("ceiling: random line reads, no prefetch".into(), t, s));
        }
        let ceilings: Vec<(usize, f64)> = rows.iter().map(|(_, t, s)| (*t, s.median)).collect();
        drop(ceiling);

        let mut memory = Vec::new();
        for &kind in &args.maps {
            let threads: Vec<usize> = threads
                .iter()
                .copied()
                .filter(|&t| kind.concurrent() || t == 1)
                .collect();
            let hasher = hasher(args);
            let capacity = args.keys as usize;
            let bench = Bench {
                workers: &workers,
                threads: &threads,
                keys: &all_keys,
                repeat: args.repeat,
                duration,
            };
            match kind {
                MapKind::Floe => {
                    for &backend in &backends {
                        let label = format!("floe ({})", format!("{backend:?}").to_lowercase());
                        let build = || {
                            build_map(args, backend, huge_pages)
                                .expect("the table was allocated once already")
                        };
                        bench.map(&label, build, &mut rows, &mut memory);
                    }
                }
                MapKind::Dashmap => bench.map(
                    "dashmap",
                    || dashmap::DashMap::with_capacity_and_hasher(capacity, hasher),
                    &mut rows,
                    &mut memory,
                ),
                MapKind::Papaya | MapKind::PapayaIncremental => {
                    let mode = || {
                        if kind == MapKind::Papaya {
                            papaya::ResizeMode::Blocking
                        } else {
                            papaya::ResizeMode::Incremental(64)
                        }
                    };
                    let label = if kind == MapKind::Papaya {
                        "papaya (blocking)"
                    } else {
                        "papaya (incremental)"
                    };
                    let build = || {
                        papaya::HashMap::builder()
                            .capacity(capacity)
                            .hasher(hasher)
                            .resize_mode(mode())
                            .build()
                    };
                    bench.map(label, build, &mut rows, &mut memory);
                }
                MapKind::Scc => bench.map(
                    "scc::HashMap",
                    || scc::HashMap::with_capacity_and_hasher(capacity, hasher),
                    &mut rows,
                    &mut memory,
                ),
                MapKind::RwlockHashbrown => bench.map(
                    "RwLock<hashbrown> x64",
                    || peers::RwlockHashbrown::new(capacity, hasher),
                    &mut rows,
                    &mut memory,
                ),
                MapKind::Hashbrown => bench.map(
                    "hashbrown (1 thread)",
                    || peers::SingleThreadHashbrown::new(capacity, hasher),
                    &mut rows,
                    &mut memory,
                ),
            }
        }
        print_table(&rows, &ceilings);
        for (name, bytes_per_key, how) in memory {
            println!("memory: {name:<28} {bytes_per_key:>7.1} bytes/key ({how})");
        }
    }
    Ok(())
}

/// What every map's measurement shares.
struct Bench<'a> {
    workers: &'a Workers,
    threads: &'a [usize],
    keys: &'a [u64],
    repeat: usize,
    duration: Duration,
}

type Row = (String, usize, Summary);

impl Bench<'_> {
    /// For each thread count: fill a fresh map with every key (`repeat` times), then run random
    /// gets on the last one. Also records memory per key (table bytes, or RSS growth).
    fn map<M: BenchMap>(
        &self,
        name: &str,
        build: impl Fn() -> M,
        rows: &mut Vec<Row>,
        memory: &mut Vec<(String, f64, &'static str)>,
    ) {
        for &t in self.threads {
            let mut filled = None;
            let mut rss_growth = None;
            let inserts = Summary::of(self.repeat, || {
                drop(filled.take());
                let rss_before = peers::rss_bytes();
                let map = build();
                let result = measure::insert_all(self.workers, t, &map, self.keys);
                if let (Some(before), Some(after)) = (rss_before, peers::rss_bytes()) {
                    rss_growth = Some(after.saturating_sub(before));
                }
                filled = Some(map);
                result
            });
            let map = filled.expect("repeat >= 1");
            rows.push((format!("{name} insert"), t, inserts));
            let gets = Summary::of(self.repeat, || {
                measure::get_random(self.workers, t, &map, self.keys, self.duration)
            });
            rows.push((format!("{name} get, hit"), t, gets));
            if !memory.iter().any(|(n, _, _)| n == name) {
                let keys = self.keys.len() as f64;
                match (map.table_bytes(), rss_growth) {
                    (Some(bytes), _) => {
                        memory.push((name.to_string(), bytes as f64 / keys, "table"))
                    }
                    (None, Some(bytes)) => {
                        memory.push((name.to_string(), bytes as f64 / keys, "RSS growth"))
                    }
                    (None, None) => {}
                }
            }
        }
    }
}

fn hasher(args: &Args) -> measure::AnyHash {
    match args.hash {
        HashArg::Mix64 => measure::AnyHash::Mix64(Mix64::with_seed(1)),
        HashArg::Wyhash => measure::AnyHash::WyHash(WyHash::with_seed(1)),
        HashArg::Crc32 => measure::AnyHash::Crc32(Crc32::with_seed(1)),
    }
}

fn build_map(
    args: &Args,
    backend: Backend,
    huge_pages: bool,
) -> Result<FlatMap<u64, u64, measure::AnyHash>, String> {
    FlatMap::<u64, u64>::builder()
        .capacity(args.keys as usize)
        .hasher(hasher(args))
        .backend(backend)
        .huge_pages(huge_pages)
        .build()
        .map_err(|e| format!("building the map: {e}"))
}

fn print_table(rows: &[(String, usize, Summary)], ceilings: &[(usize, f64)]) {
    println!(
        "{:<44} {:>7} {:>10} {:>10} {:>10} {:>10} {:>11}",
        "operation", "threads", "Mops/s", "min", "max", "x ceiling", "lines/op"
    );
    for (name, threads, s) in rows {
        let ceiling = ceilings
            .iter()
            .find(|(t, _)| t == threads)
            .map_or(f64::NAN, |(_, c)| *c);
        let lines = s
            .lines_per_op
            .map_or("-".to_string(), |l| format!("{l:.3}"));
        println!(
            "{:<44} {:>7} {:>10.2} {:>10.2} {:>10.2} {:>10.3} {:>11}",
            name,
            threads,
            s.median,
            s.min,
            s.max,
            s.median / ceiling,
            lines
        );
    }
}
