//! `floe-bench ceiling`: the machine's random-line ceiling alone (`ceiling.rs` measures it),
//! over an array the size of floe's table for `--keys` keys, or of `--bytes`.

use std::time::Duration;

use clap::Args;
use floe::Backend;

use crate::{
    args::{Common, Failure, HashArg, OnOff},
    ceiling,
    experiment::stream_len,
    keys::parse_count,
    maps::Recipe,
    measure::Workers,
    report::ceiling_table,
};

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

pub fn main(args: CeilingArgs) -> Result<(), Failure> {
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
