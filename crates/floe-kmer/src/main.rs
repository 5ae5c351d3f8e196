//! `floe-kmer`: counts k-mers in FASTA and FASTQ files into a database, and reads it back;
//! commands and flags as jellyfish's. See `--help`.

use std::{
    io::{self, BufRead, IsTerminal, Write},
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};
use floe_kmer::{
    count::{
        count,
        passes::{count_in_passes, MIN_BUDGET},
        CountWord, Counts, EngineKind, Settings,
    },
    db::{self, Combine, Database, Provenance},
    destination::Destination,
    kmer::{decode, encode, Kmers},
    output::{write_kmers, Buckets, DumpFormat, Filter, Histogram, Stats},
    parse::{Input, Source},
    Error,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

const EXIT_CODES: &str = "\
Exit status:
  0  the output was written
  1  the input is malformed (not FASTA/FASTQ, binary, a FASTQ quality line of the wrong
     length, truncated or corrupt gzip...), a database is damaged, truncated or not
     floe-kmer's, reading or writing failed, or the table ran out of memory; nothing is
     written to the output file (it is only created, by a rename, once complete)
  2  usage error: a bad flag or value (k outside 1..=64, or above 32 with an engine
     other than the compact one, no files, a k-mer to query of the wrong length...),
     a file that does not exist, cannot be read or is not a regular file (a database),
     an output that cannot be created, a size hint (-s) larger than the memory,
     databases of different k to merge";

/// Counts k-mers in FASTA and FASTQ files (plain or gzip) into a database, and reads it back.
#[derive(Parser, Debug)]
#[command(name = "floe-kmer", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Count the k-mers of the files into a database (-o FILE), which `dump`, `histo`,
    /// `query`, `stats`, `merge` and `info` read. Without -o (or with --text), write each
    /// k-mer with its count instead (`ACGT 5` lines, sorted by k-mer, as `jellyfish dump -c |
    /// sort`); with --histo, their histogram (as `jellyfish histo`). A summary goes to
    /// stderr.
    #[command(after_help = EXIT_CODES)]
    Count(CountArgs),
    /// Write a database's k-mers and counts, in k-mer order: FASTA (`>COUNT` then the k-mer,
    /// as `jellyfish dump`) or, with -c, `KMER COUNT` lines.
    #[command(after_help = EXIT_CODES)]
    Dump(DumpArgs),
    /// Write the histogram of a database's counts (`COUNT NUMBER_OF_KMERS` lines), bucketed
    /// as `jellyfish histo` does.
    #[command(after_help = EXIT_CODES, disable_help_flag = true)]
    Histo(HistoArgs),
    /// Print how often k-mers occur (`KMER COUNT`; in a canonical database, the k-mer and its
    /// reverse complement together, under the smaller, as `jellyfish query`).
    #[command(after_help = EXIT_CODES)]
    Query(QueryArgs),
    /// Merge databases counted with the same k and strand mode into one (counts added, or
    /// the smallest or largest of them).
    #[command(after_help = EXIT_CODES)]
    Merge(MergeArgs),
    /// Print how many k-mers occur once, the distinct k-mers, the total and the largest
    /// count (as `jellyfish stats`).
    #[command(after_help = EXIT_CODES)]
    Stats(StatsArgs),
    /// Print how a database was made (the command line, where, when) and what it holds.
    #[command(after_help = EXIT_CODES)]
    Info(InfoArgs),
}

#[derive(clap::Args, Debug)]
struct CountArgs {
    /// K-mer length, 1 to 64 (above 32 with the compact engine only).
    #[arg(short = 'm', long = "mer-len", value_name = "K",
          value_parser = clap::value_parser!(u8).range(1..=64))]
    k: u8,
    /// Count each k-mer and its reverse complement together, under the smaller of the two
    /// (as jellyfish's -C; kmc counts this way).
    #[arg(short = 'C', long)]
    canonical: bool,
    /// Threads in all, parsing included (default: the CPUs available).
    #[arg(short = 't', long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Distinct k-mers to size the table for, with an optional k, M or G suffix (x1000);
    /// the table grows past it on its own. Default: 1M, or the inputs' size in bytes if
    /// smaller.
    #[arg(short = 's', long = "size", value_parser = parse_size)]
    size: Option<usize>,
    /// Write the database to this file. Without it, the dump (or the histogram) goes to
    /// stdout.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Write the dump as text (`KMER COUNT` lines) to -o instead of a database (what -o
    /// wrote before floe-kmer 0.2).
    #[arg(long, conflicts_with = "histo")]
    text: bool,
    /// Count within this much memory (bytes, with an optional K, M or G suffix: 2^10, 2^20,
    /// 2^30; at least 20M), as kmc's -m: the k-mers are counted in passes over ranges of them,
    /// each pass reading the inputs again (they must be regular files) and writing its counts
    /// out before the next begins (a database's passes go to a directory beside it, then
    /// into it in order). 16 MiB of it are kept for the input's buffers and the
    /// rest; the table takes two thirds of what is left. Compact engine only.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    memory: Option<usize>,
    /// How workers add to the table.
    #[arg(long, value_enum, default_value_t = EngineKind::Compact)]
    engine: EngineKind,
    /// Write the histogram (`COUNT NUMBER_OF_KMERS` lines) instead of the k-mers.
    #[arg(long)]
    histo: bool,
    /// With --histo: the largest count with a line of its own; k-mers counted more often
    /// are tallied together under HIGH + 1 (as `jellyfish histo -h`).
    #[arg(long, value_name = "HIGH", default_value_t = 10000, requires = "histo")]
    histo_high: u64,
    #[command(flatten)]
    filter: FilterArgs,
    /// Show progress on stderr even when it is not a terminal (then a line a second).
    #[arg(long, overrides_with = "no_progress")]
    progress: bool,
    /// Never show progress (by default it shows when stderr is a terminal).
    #[arg(long, overrides_with = "progress")]
    no_progress: bool,
    /// No summary on stderr.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// FASTA or FASTQ files, plain or gzip (told by their first bytes); `-` is stdin.
    #[arg(required = true, value_name = "FILES")]
    files: Vec<PathBuf>,
}

/// jellyfish's -L and -U.
#[derive(clap::Args, Debug)]
struct FilterArgs {
    /// Leave out k-mers counted fewer times.
    #[arg(short = 'L', long = "lower-count", value_name = "COUNT")]
    lower: Option<u64>,
    /// Leave out k-mers counted more times.
    #[arg(short = 'U', long = "upper-count", value_name = "COUNT")]
    upper: Option<u64>,
}

impl FilterArgs {
    fn filter(&self) -> Result<Filter, Error> {
        let filter = Filter {
            lower: self.lower.unwrap_or(0),
            upper: self.upper.unwrap_or(u64::MAX),
        };
        if filter.lower > filter.upper {
            return Err(Error::Usage(format!(
                "--lower-count {} is above --upper-count {}: nothing would be written",
                filter.lower, filter.upper
            )));
        }
        Ok(filter)
    }
}

#[derive(clap::Args, Debug)]
struct DumpArgs {
    /// `KMER COUNT` lines instead of FASTA.
    #[arg(short = 'c', long = "column")]
    column: bool,
    /// With -c, a tab between k-mer and count instead of a space.
    #[arg(short = 't', long = "tab")]
    tab: bool,
    #[command(flatten)]
    read: FilteredRead,
}

/// A database read through jellyfish's -L and -U into an output.
#[derive(clap::Args, Debug)]
struct FilteredRead {
    #[command(flatten)]
    filter: FilterArgs,
    /// Write to this file instead of stdout.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// The database.
    database: PathBuf,
}

#[derive(clap::Args, Debug)]
struct HistoArgs {
    /// The low end: counts below it are tallied in the first bucket.
    #[arg(short = 'l', long = "low", default_value_t = 1)]
    low: u64,
    /// The high end: the last bucket tallies the counts above it.
    #[arg(short = 'h', long = "high", default_value_t = 10000)]
    high: u64,
    /// The width of a bucket.
    #[arg(short = 'i', long = "increment", default_value_t = 1)]
    increment: u64,
    /// Print empty buckets too.
    #[arg(short = 'f', long = "full")]
    full: bool,
    /// Write to this file instead of stdout.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// The database.
    database: PathBuf,
}

#[derive(clap::Args, Debug)]
struct QueryArgs {
    /// Also every k-mer of this FASTA or FASTQ file (plain or gzip), in order.
    #[arg(short = 's', long = "sequence", value_name = "FILE")]
    sequence: Option<PathBuf>,
    /// Read k-mers from stdin, one a line, and answer each with its count alone, a line each
    /// (as `jellyfish query -i`).
    #[arg(short = 'i', long)]
    interactive: bool,
    /// Write to this file instead of stdout.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// The database.
    database: PathBuf,
    /// K-mers to look up (of the database's k; upper or lower case).
    mers: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct MergeArgs {
    /// The merged database.
    #[arg(short = 'o', long, required = true)]
    output: PathBuf,
    /// Keep the smallest of a k-mer's counts (a k-mer missing from a database counts 0, so
    /// is left out) instead of adding them.
    #[arg(short = 'm', long, conflicts_with = "max")]
    min: bool,
    /// Keep the largest of a k-mer's counts instead of adding them.
    #[arg(short = 'M', long)]
    max: bool,
    #[command(flatten)]
    filter: FilterArgs,
    /// The databases.
    #[arg(required = true)]
    databases: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct StatsArgs {
    #[command(flatten)]
    read: FilteredRead,
}

#[derive(clap::Args, Debug)]
struct InfoArgs {
    /// The database.
    database: PathBuf,
}

/// The table's size hint when there is no -s and the input's size is not known.
const DEFAULT_SIZE: usize = 1_000_000;

/// A count of things with jellyfish's decimal suffixes: `10M` is 10,000,000.
fn parse_size(text: &str) -> Result<usize, String> {
    let units = [
        ("k", 1_000),
        ("K", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    with_suffix(text, &units)
        .ok_or_else(|| format!("not a size: {text:?} (a number below 2^64, with k, M or G)"))
}

/// A number of bytes with an optional binary suffix: `64M` is 64 MiB.
fn parse_memory(text: &str) -> Result<usize, String> {
    let units = [
        ("k", 1 << 10),
        ("K", 1 << 10),
        ("M", 1 << 20),
        ("G", 1 << 30),
    ];
    let bytes = with_suffix(text, &units)
        .ok_or_else(|| format!("not a size in bytes: {text:?} (a number, with K, M or G)"))?;
    if bytes < MIN_BUDGET {
        return Err(format!(
            "{text} is below the least a count takes ({}M)",
            MIN_BUDGET >> 20
        ));
    }
    Ok(bytes)
}

/// `text` as a number times the unit its suffix names (none: 1); `None` if it is not one or
/// the product passes `usize`.
fn with_suffix(text: &str, units: &[(&str, usize)]) -> Option<usize> {
    let (digits, unit) = units
        .iter()
        .find_map(|&(suffix, unit)| Some((text.strip_suffix(suffix)?, unit)))
        .unwrap_or((text, 1));
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Count(args) => run(&args),
        Command::Dump(args) => dump(&args),
        Command::Histo(args) => histo(&args),
        Command::Query(args) => query(&args),
        Command::Merge(args) => merge(&args),
        Command::Stats(args) => stats(&args),
        Command::Info(args) => info(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("floe-kmer: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

fn run(args: &CountArgs) -> Result<(), Error> {
    let start = Instant::now();
    let k = usize::from(args.k);
    let filter = args.filter.filter()?;
    // Checked before counting: a bad --histo-high is the command line's mistake.
    let buckets = Buckets::new(1, args.histo_high, 1)
        .map_err(|why| Error::Usage(format!("--histo-high {}: {why}", args.histo_high)))?;
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        usize::from,
    );
    let sources: Vec<Source> = args.files.iter().cloned().map(Source::from_arg).collect();
    let bound = Input::distinct_bound(&sources).map(|b| usize::try_from(b).unwrap_or(usize::MAX));
    let total_bytes = Input::total_bytes(&sources);
    let progress = progress_bar(args, total_bytes);
    // Made before counting, so an output that cannot be created fails at once.
    let output = Destination::create(args.output.as_deref())?;
    let settings = Settings {
        k,
        canonical: args.canonical,
        threads,
        // A small input needs no table of a million k-mers (making one takes a while), and
        // no table larger than its bases could fill, whatever -s says (the table grows if
        // the hint was short).
        size_hint: {
            match (args.size, bound) {
                (Some(size), Some(bound)) => size.min(bound.max(1024)),
                (Some(size), None) => size,
                (None, _) => total_bytes.map_or(DEFAULT_SIZE, |bytes| {
                    usize::try_from(bytes).map_or(DEFAULT_SIZE, |b| b.clamp(1024, DEFAULT_SIZE))
                }),
            }
        },
        engine: args.engine,
    };
    // The k-mers' word: counting is compiled for each.
    let count_and_write = if k <= 32 {
        count_and_write::<u64>
    } else {
        count_and_write::<u128>
    };
    count_and_write(
        args,
        &settings,
        sources,
        (filter, buckets),
        output,
        progress,
        start,
    )
}

/// `count`'s counting and writing, with k-mers packed in `W`.
fn count_and_write<W: CountWord>(
    args: &CountArgs,
    settings: &Settings,
    sources: Vec<Source>,
    (filter, buckets): (Filter, Buckets),
    mut output: Destination,
    progress: ProgressBar,
    start: Instant,
) -> Result<(), Error> {
    let k = settings.k;
    let database = matches!(output, Destination::File { .. }) && !args.text && !args.histo;
    if let Some(budget) = args.memory {
        return run_in_passes::<W>(
            args,
            settings,
            &sources,
            (budget, filter, buckets),
            &mut output,
            progress,
            start,
        )
        .and_then(|()| output.commit());
    }
    let input = Input::new(sources, progress.clone())?;
    let counted = count::<W>(input, settings);
    progress.finish_and_clear();
    let counts = counted?;
    let (total, distinct, elapsed) = (counts.total, counts.distinct(), counts.elapsed);
    let written = if database {
        let provenance = Provenance::of_this_process();
        let header = output.write_file(|file| {
            write_database(file, &counts, k, args.canonical, &filter, provenance)
        })?;
        Some(header.records)
    } else {
        output.write(|mut out| {
            if args.histo {
                // Tallied in the table itself: no copy of the k-mers.
                let mut histogram = Histogram::new(&filter, buckets);
                counts.for_each(|_, count| histogram.add(count));
                histogram.write(false, &mut out)
            } else {
                let mut out = io::BufWriter::with_capacity(1 << 16, out);
                let mut written = 0;
                counts.for_each_sorted(k, |part| {
                    let format = DumpFormat::Columns(b' ');
                    written += write_kmers(part.iter().copied(), k, &filter, format, &mut out)?;
                    Ok::<_, io::Error>(())
                })?;
                out.flush()?;
                Ok(written)
            }
        })?
    };
    output.commit()?;
    if let (false, Some(written)) = (args.quiet, written) {
        summary(args, settings, (total, distinct, elapsed), written, start);
    }
    Ok(())
}

/// A count's k-mers that `filter` keeps, as a database.
fn write_database<W: CountWord>(
    file: &mut std::fs::File,
    counts: &Counts<W>,
    k: usize,
    canonical: bool,
    filter: &Filter,
    provenance: Provenance,
) -> Result<db::Header, Error> {
    let mut limit = 0;
    counts.for_each(|_, count| {
        if filter.keeps(count) {
            limit = limit.max(count);
        }
    });
    let failed = |e: io::Error| Error::Output(format!("writing the database failed: {e}"));
    let mut writer = db::Writer::new(file, k, canonical, limit, provenance).map_err(failed)?;
    counts
        .for_each_sorted(k, |part| {
            part.iter()
                .filter(|&&(_, count)| filter.keeps(count))
                .try_for_each(|&(kmer, count)| writer.push(kmer.into(), count))
        })
        .map_err(failed)?;
    writer.finish().map_err(failed)
}

/// `count --memory`: the count in passes (`count::passes`), each pass's counts written out
/// before the next: a database's into a file of its own in a directory beside the output,
/// the files' records copied into the output in order at the end; a dump's straight to the
/// output (the passes come in k-mer order); a histogram's tallied.
fn run_in_passes<W: CountWord>(
    args: &CountArgs,
    settings: &Settings,
    sources: &[Source],
    (budget, filter, buckets): (usize, Filter, Buckets),
    output: &mut Destination,
    progress: ProgressBar,
    start: Instant,
) -> Result<(), Error> {
    let (k, canonical) = (settings.k, settings.canonical);
    let count = |each: &mut dyn FnMut(Counts<W>) -> Result<(), Error>| {
        let counted = count_in_passes::<W>(sources, settings, budget, &progress, |pass| {
            each(pass.counts)
        });
        progress.finish_and_clear();
        counted
    };
    let (summary, written) = match (&*output, args.text, args.histo) {
        (Destination::File { path, .. }, false, false) => {
            // The passes' databases, beside the output (as large as it, at most).
            let beside = path.parent().filter(|dir| !dir.as_os_str().is_empty());
            let spill = tempfile::Builder::new()
                .prefix(".floe-kmer-passes")
                .tempdir_in(beside.unwrap_or_else(|| std::path::Path::new(".")))
                .map_err(|e| {
                    Error::Usage(format!("cannot make a directory for the passes: {e}"))
                })?;
            let (mut files, mut limit) = (Vec::new(), 0);
            let summary = count(&mut |counts| {
                let path = spill.path().join(format!("pass-{}.fkdb", files.len()));
                let mut file = std::fs::File::create(&path)
                    .map_err(|e| Error::Output(format!("cannot create {}: {e}", path.display())))?;
                let provenance = Provenance::of_this_process();
                let pass = write_database(&mut file, &counts, k, canonical, &filter, provenance)?;
                limit = limit.max(pass.max_count);
                files.push(path);
                Ok(())
            })?;
            // The passes' k-mers follow one another: their records, one pass after the other
            // (each checked as it opens, and unmapped before the next, so that one pass's file
            // at a time is in memory).
            let provenance = Provenance::of_this_process();
            let header = output.write_file(|file| {
                let failed =
                    |e: io::Error| Error::Output(format!("writing the database failed: {e}"));
                let mut writer =
                    db::Writer::new(file, k, canonical, limit, provenance).map_err(failed)?;
                for path in &files {
                    let pass = Database::open(path)?;
                    pass.iter()
                        .try_for_each(|(kmer, count)| writer.push(kmer, count))
                        .map_err(failed)?;
                }
                writer.finish().map_err(failed)
            })?;
            (summary, header.records)
        }
        (_, _, true) => {
            let mut histogram = Histogram::new(&filter, buckets);
            let summary = count(&mut |counts| {
                counts.for_each(|_, count| histogram.add(count));
                Ok(())
            })?;
            let lines = output.write(|mut out| histogram.write(false, &mut out))?;
            (summary, lines.unwrap_or(0))
        }
        (_, _, false) => {
            // Counting errors wait here while `write` takes I/O errors only.
            let mut failure = None;
            let mut summary = None;
            let written = output.write(|out| {
                let mut out = io::BufWriter::with_capacity(1 << 16, out);
                let mut written = 0;
                let counted = count(&mut |counts| {
                    counts
                        .for_each_sorted(k, |part| {
                            let format = DumpFormat::Columns(b' ');
                            written +=
                                write_kmers(part.iter().copied(), k, &filter, format, &mut out)?;
                            Ok::<_, io::Error>(())
                        })
                        .map_err(|e| Error::Output(format!("writing the dump failed: {e}")))
                });
                match counted {
                    Ok(counted) => summary = Some(counted),
                    Err(error) => {
                        failure = Some(error);
                        return Err(io::Error::other("the count failed"));
                    }
                }
                out.flush()?;
                Ok(written)
            });
            if let Some(error) = failure {
                return Err(error);
            }
            let written = written?;
            (summary.expect("counted when written"), written.unwrap_or(0))
        }
    };
    if !args.quiet {
        let seconds = start.elapsed().as_secs_f64();
        eprintln!(
            "floe-kmer: {} {}{k}-mers, {} distinct, counted in {} passes within {budget} bytes \
             ({} stopped at the budget and planned again; {} threads); {written} {} written, \
             {seconds:.3} s in all",
            summary.total,
            if canonical { "canonical " } else { "" },
            summary.distinct,
            summary.passes,
            summary.stopped,
            settings.threads,
            if args.histo {
                "histogram lines"
            } else {
                "k-mers"
            },
        );
    }
    Ok(())
}

/// `dump`: the database's k-mers in k-mer order.
fn dump(args: &DumpArgs) -> Result<(), Error> {
    let filter = args.read.filter.filter()?;
    let database = Database::open(&args.read.database)?;
    let format = match (args.column, args.tab) {
        (false, _) => DumpFormat::Fasta,
        (true, false) => DumpFormat::Columns(b' '),
        (true, true) => DumpFormat::Columns(b'\t'),
    };
    let mut output = Destination::create(args.read.output.as_deref())?;
    let k = database.header().k;
    output.write(|out| {
        write_kmers(
            database.iter(),
            k,
            &filter,
            format,
            &mut io::BufWriter::new(out),
        )
    })?;
    output.commit()
}

/// `histo`: the histogram of the database's counts.
fn histo(args: &HistoArgs) -> Result<(), Error> {
    let buckets = Buckets::new(args.low, args.high, args.increment).map_err(Error::Usage)?;
    let database = Database::open(&args.database)?;
    let mut output = Destination::create(args.output.as_deref())?;
    let all = Filter::default();
    let mut histogram = Histogram::new(&all, buckets);
    database.iter().for_each(|(_, count)| histogram.add(count));
    output.write(|mut out| histogram.write(args.full, &mut out))?;
    output.commit()
}

/// `query`: the counts of k-mers given on the command line, in a file, or on stdin.
fn query(args: &QueryArgs) -> Result<(), Error> {
    let database = Database::open(&args.database)?;
    let k = database.header().k;
    let parse = |mer: &str| {
        let bases = mer.trim_end_matches('\r').as_bytes();
        encode(bases).filter(|_| bases.len() == k).ok_or_else(|| {
            Error::Usage(format!(
                "'{mer}' is not a k-mer of this database (k = {k}: {k} of A, C, G and T)"
            ))
        })
    };
    // Every k-mer named is checked before anything is printed.
    let mers = args
        .mers
        .iter()
        .map(|mer| parse(mer))
        .collect::<Result<Vec<_>, _>>()?;
    let mut input = match &args.sequence {
        Some(path) => {
            let mut input = Input::new(
                vec![Source::from_arg(path.clone())],
                indicatif::ProgressBar::hidden(),
            )?;
            input.set_k(k);
            Some(input)
        }
        None => None,
    };
    let mut output = Destination::create(args.output.as_deref())?;
    // Errors of the sequence file and of stdin's lines are kept here: `write` takes I/O
    // errors only.
    let mut failure = None;
    output.write(|out| {
        let mut out = io::BufWriter::new(out);
        let mut text = [0u8; floe_kmer::kmer::MAX_K];
        let mut answer = |out: &mut dyn Write, kmer: u128| {
            let (kmer, count) = database.count_of(kmer);
            decode(kmer, k, &mut text);
            out.write_all(&text[..k])?;
            writeln!(out, " {count}")
        };
        for &kmer in &mers {
            answer(&mut out, kmer)?;
        }
        if let Some(input) = &mut input {
            let mut chunk = Vec::new();
            loop {
                match input.next_chunk(&mut chunk) {
                    Ok(true) => {
                        for kmer in Kmers::<u128>::new(&chunk, k, false) {
                            answer(&mut out, kmer)?;
                        }
                    }
                    Ok(false) => break,
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
        }
        if args.interactive {
            for line in io::stdin().lock().lines() {
                let line = line?;
                match parse(&line) {
                    Ok(kmer) => writeln!(out, "{}", database.count_of(kmer).1)?,
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
                // An interactive reader waits for each answer.
                out.flush()?;
            }
        }
        out.flush()?;
        Ok(0)
    })?;
    match failure {
        Some(error) => Err(error),
        None => output.commit(),
    }
}

/// `merge`: databases into one.
fn merge(args: &MergeArgs) -> Result<(), Error> {
    let filter = args.filter.filter()?;
    let databases = args
        .databases
        .iter()
        .map(|path| Database::open(path))
        .collect::<Result<Vec<_>, _>>()?;
    let combine = match (args.min, args.max) {
        (true, _) => Combine::Min,
        (_, true) => Combine::Max,
        _ => Combine::Sum,
    };
    let mut output = Destination::create(Some(&args.output))?;
    let provenance = Provenance::of_this_process();
    output.write_file(|file| {
        db::merge(
            &databases,
            combine,
            |count| filter.keeps(count),
            file,
            provenance,
        )
    })?;
    output.commit()
}

/// `stats`: `jellyfish stats`'s four numbers.
fn stats(args: &StatsArgs) -> Result<(), Error> {
    let filter = args.read.filter.filter()?;
    let database = Database::open(&args.read.database)?;
    let stats = Stats::of(database.iter().map(|(_, count)| count), &filter);
    let mut output = Destination::create(args.read.output.as_deref())?;
    output.write(|mut out| stats.write(&mut out).map(|()| 4))?;
    output.commit()
}

/// `info`: where a database came from and what it holds.
fn info(args: &InfoArgs) -> Result<(), Error> {
    let database = Database::open(&args.database)?;
    let header = database.header();
    let made = &header.provenance;
    let mut output = Destination::Stdout;
    output.write(|out| {
        writeln!(out, "command: {}", made.command)?;
        writeln!(out, "where: {}", made.directory)?;
        writeln!(out, "when: {} UTC", utc_date(made.created))?;
        writeln!(out, "software: {}", made.software)?;
        writeln!(
            out,
            "canonical: {}",
            if header.canonical { "yes" } else { "no" }
        )?;
        writeln!(out, "k: {}", header.k)?;
        writeln!(out, "distinct: {}", header.records)?;
        writeln!(out, "total: {}", header.total)?;
        writeln!(out, "max_count: {}", header.max_count)?;
        writeln!(
            out,
            "format: floe-kmer database version {}, {} bytes a record ({} for the k-mer, {} for \
             the count), checked",
            db::VERSION,
            header.record_bytes(),
            header.key_bytes,
            header.count_bytes
        )?;
        Ok(10)
    })?;
    Ok(())
}

/// `seconds` since 1970 as `YYYY-MM-DD HH:MM:SS` (UTC; the civil calendar from days, as in
/// Howard Hinnant's `civil_from_days`).
fn utc_date(seconds: u64) -> String {
    let (days, rest) = ((seconds / 86_400) as i64, seconds % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The summary line on stderr.
fn summary(
    args: &CountArgs,
    settings: &Settings,
    (total, distinct, elapsed): (u64, usize, Duration),
    written: u64,
    start: Instant,
) {
    let seconds = elapsed.as_secs_f64();
    let rate = total as f64 / seconds.max(1e-9) / 1e6;
    let strand = if settings.canonical { "canonical " } else { "" };
    let what = if args.histo {
        "histogram lines"
    } else {
        "k-mers"
    };
    eprintln!(
        "floe-kmer: {} {strand}{}-mers, {} distinct, counted in {seconds:.3} s ({rate:.2} \
         Mk-mers/s; {} threads, {} engine); {written} {what} written, {:.3} s in all",
        total,
        settings.k,
        distinct,
        settings.threads,
        settings.engine.name(),
        start.elapsed().as_secs_f64(),
    );
}

/// The progress bar: bytes read of the inputs' size (compressed bytes for gzip).
fn progress_bar(args: &CountArgs, total: Option<u64>) -> ProgressBar {
    let terminal = io::stderr().is_terminal();
    if args.no_progress || !(args.progress || terminal) {
        return ProgressBar::hidden();
    }
    let target = if terminal {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::term_like_with_hz(Box::new(LogLines), 1)
    };
    let template = if total.is_some() {
        "{elapsed_precise} [{bar:30}] {binary_bytes}/{binary_total_bytes} read \
         ({binary_bytes_per_sec}, {eta} left) {msg}"
    } else {
        "{elapsed_precise} {binary_bytes} read ({binary_bytes_per_sec}) {msg}"
    };
    let style = ProgressStyle::with_template(template)
        .expect("the template is valid")
        .progress_chars("=> ");
    ProgressBar::with_draw_target(total, target).with_style(style)
}

/// Progress drawn to a stderr that is not a terminal (a log file): each draw is a line of its
/// own, as there is no cursor to move back.
#[derive(Debug)]
struct LogLines;

impl TermLike for LogLines {
    fn width(&self) -> u16 {
        100
    }

    fn move_cursor_up(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn move_cursor_down(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn move_cursor_right(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn move_cursor_left(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn write_line(&self, line: &str) -> io::Result<()> {
        self.write_str(line)
    }

    fn write_str(&self, text: &str) -> io::Result<()> {
        // indicatif draws a bar as "\r", the bar, then spaces to the terminal's width: keep
        // the bar alone, on a line of its own.
        let line = text.trim();
        if line.is_empty() {
            return Ok(());
        }
        writeln!(io::stderr(), "floe-kmer: {line}")
    }

    fn clear_line(&self) -> io::Result<()> {
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        io::stderr().flush()
    }
}
