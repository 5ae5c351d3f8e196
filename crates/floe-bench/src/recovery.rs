//! `floe-bench recovery`: how long a persistent floe map takes to come back after a crash
//! (IcebergHT §6 reports its recovery in items per second per thread).
//!
//! A child process (this binary, `recovery-child fill`) builds a persistent map in a fresh
//! directory, fills it with `--keys` keys from all cores, and SIGKILLs itself: a crash,
//! leaving the files unclosed. Then, `--runs` times, another child (`recovery-child open`) times the open,
//! which sweeps every bin, and aborts in turn, so each run recovers a crashed map again. The
//! page cache is warm (as after a process crash, not a reboot). With several `--threads`
//! counts, each run times one open per count, in turn, so the counts share the machine's
//! state. A clean open of the same map (closed, so it is only checked) is timed last, on the
//! largest count.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use clap::{Args, Subcommand};

/// `floe-bench recovery`.
#[derive(Args, Debug)]
pub struct RecoveryArgs {
    /// Keys in the map (a power of two with `2^`).
    #[arg(long, default_value = "2^26", value_parser = crate::keys::parse_count)]
    pub keys: u64,
    /// Timed recoveries (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Where the map's directory goes (default `$FLOE_BENCH_DIR`, else the temporary
    /// directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Recovery threads to time, comma-separated (`Builder::recovery_threads`; 0 = one per
    /// core).
    #[arg(long, default_value = "0", value_delimiter = ',')]
    pub threads: Vec<usize>,
}

/// The hidden children of `recovery`.
#[derive(Args, Debug)]
pub struct ChildArgs {
    #[command(subcommand)]
    pub step: ChildStep,
}

#[derive(Subcommand, Debug)]
pub enum ChildStep {
    /// Build and fill the map, then SIGKILL itself.
    Fill { dir: PathBuf, keys: u64 },
    /// Open (recover) the map, print the time, then abort (or close it, with `--close`).
    Open {
        dir: PathBuf,
        #[arg(long)]
        close: bool,
        /// Recovery threads (0 = one per core).
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
}

type Persistent = floe::FlatMap<u64, u64>;

/// The child steps: never return normally (a crash is the point) unless closing.
pub fn child(args: ChildArgs) -> Result<(), String> {
    match args.step {
        ChildStep::Fill { dir, keys } => {
            let map = Persistent::builder()
                .capacity(usize::try_from(keys).map_err(|_| "--keys too large".to_string())?)
                .build_persistent(&dir)
                .map_err(|e| format!("building the map: {e}"))?;
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            std::thread::scope(|scope| {
                for thread in 0..threads {
                    let map = &map;
                    scope.spawn(move || {
                        let mut key = thread as u64;
                        while key < keys {
                            let word = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                            map.insert(word, key);
                            key += threads as u64;
                        }
                    });
                }
            });
            println!("filled {}", map.len());
            use std::io::Write;
            let _ = std::io::stdout().flush();
            // SAFETY: raise has no preconditions; SIGKILL ends the process here, as a kill -9
            // from outside would (no unwinding, no destructors, the files as the threads left
            // them).
            unsafe {
                libc::raise(libc::SIGKILL);
            }
            unreachable!("SIGKILL returned");
        }
        ChildStep::Open {
            dir,
            close,
            threads,
        } => {
            let started = Instant::now();
            let (map, recovery) = Persistent::builder()
                .recovery_threads(threads)
                .open(&dir)
                .map_err(|e| format!("opening the map: {e}"))?;
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "open_seconds={seconds} keys={} clean={} freed={}",
                recovery.keys, recovery.clean, recovery.freed
            );
            if close {
                map.close().map_err(|e| format!("closing: {e}"))?;
                return Ok(());
            }
            std::process::abort();
        }
    }
}

fn run_child(step: &[&str]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let output = Command::new(exe)
        .arg("recovery-child")
        .args(step)
        .output()
        .map_err(|e| format!("running a child: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if stdout.is_empty() {
        return Err(format!(
            "a child printed nothing: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(stdout)
}

fn open_seconds(report: &str) -> Result<f64, String> {
    report
        .split_whitespace()
        .find_map(|field| field.strip_prefix("open_seconds="))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("unexpected child report: {report}"))
}

/// `floe-bench recovery`.
pub fn main(args: RecoveryArgs) -> Result<(), String> {
    if args.runs == 0 || args.keys == 0 {
        return Err("--runs and --keys must be at least 1".into());
    }
    let root = args.dir.clone().unwrap_or_else(|| {
        std::env::var_os("FLOE_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from)
    });
    let dir = root.join(format!("floe-recovery-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = measure(&args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(args: &RecoveryArgs, dir: &Path) -> Result<(), String> {
    let path = dir.display().to_string();
    let started = Instant::now();
    let filled = run_child(&["fill", &path, &args.keys.to_string()])?;
    eprintln!(
        "filled ({}) in {:.1} s, then crashed",
        filled.trim(),
        started.elapsed().as_secs_f64()
    );
    let bytes: u64 = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {path}: {e}"))?
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".floe"))
        .filter_map(|entry| entry.metadata().ok())
        .map(|meta| meta.len())
        .sum();
    let threads: Vec<usize> = args
        .threads
        .iter()
        .map(|&count| {
            if count == 0 {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            } else {
                count
            }
        })
        .collect();
    let mut times = vec![Vec::new(); threads.len()];
    for run in 0..args.runs {
        for (count, times) in threads.iter().zip(&mut times) {
            let count = count.to_string();
            let report = run_child(&["open", &path, "--threads", &count])?;
            let seconds = open_seconds(&report)?;
            eprintln!("recovery {run}, {count} threads: {}", report.trim());
            times.push(seconds);
        }
    }
    let most = threads.iter().max().copied().unwrap_or(1).to_string();
    let clean = open_seconds(&run_child(&["open", &path, "--close", "--threads", &most])?)?;
    let clean_open = open_seconds(&run_child(&["open", &path, "--close", "--threads", &most])?)?;
    println!(
        "recovery of {} keys ({:.2} GiB of table files), median of {} runs:",
        args.keys,
        bytes as f64 / f64::from(1u32 << 30),
        args.runs,
    );
    for (count, times) in threads.iter().zip(&mut times) {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "  {count} threads: open {:.3} s (min {:.3}, max {:.3}) = {:.1} M keys/s, \
             {:.1} M keys/s per thread",
            median,
            times[0],
            times[times.len() - 1],
            args.keys as f64 / median / 1e6,
            args.keys as f64 / median / 1e6 / *count as f64,
        );
    }
    println!(
        "  open after a clean close ({most} threads) {clean_open:.3} s (the closing open \
         {clean:.3} s)"
    );
    Ok(())
}
