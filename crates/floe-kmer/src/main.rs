//! `floe-kmer`: counts k-mers in FASTA and FASTQ files; flags as jellyfish's. See `--help`.

use std::{
    io::{self, IsTerminal, Write},
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};
use floe_kmer::{
    count::{count, EngineKind, Settings},
    output::{write_dump, write_histogram, Filter, Histogram},
    parse::{Input, Source},
    Error,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

const EXIT_CODES: &str = "\
Exit status:
  0  the counts were written
  1  the input is malformed (not FASTA/FASTQ, binary, a FASTQ quality line of the wrong
     length, truncated or corrupt gzip...), reading or writing failed, or the table ran
     out of memory; nothing is written to the output file (it is only created, by a
     rename, once complete)
  2  usage error: a bad flag or value (k outside 1..=32, no files...), a file that does
     not exist or cannot be read, an output that cannot be created, a size hint (-s)
     larger than the memory";

/// Counts k-mers in FASTA and FASTQ files (plain or gzip) on floe's concurrent hash map.
#[derive(Parser, Debug)]
#[command(name = "floe-kmer", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Count the k-mers of the files, then write each k-mer with its count (`ACGT 5` lines,
    /// sorted by k-mer, as `jellyfish dump -c | sort`) or, with --histo, their histogram (as
    /// `jellyfish histo`). A summary goes to stderr.
    #[command(after_help = EXIT_CODES)]
    Count(CountArgs),
}

#[derive(clap::Args, Debug)]
struct CountArgs {
    /// K-mer length, 1 to 32.
    #[arg(short = 'm', long = "mer-len", value_name = "K",
          value_parser = clap::value_parser!(u8).range(1..=32))]
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
    /// Write to this file instead of stdout.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// How workers add to the table.
    #[arg(long, value_enum, default_value_t = EngineKind::Batched)]
    engine: EngineKind,
    /// Write the histogram (`COUNT NUMBER_OF_KMERS` lines) instead of the k-mers.
    #[arg(long)]
    histo: bool,
    /// With --histo: the largest count with a line of its own; k-mers counted more often
    /// are tallied together under HIGH + 1 (as `jellyfish histo -h`).
    #[arg(long, value_name = "HIGH", default_value_t = 10000, requires = "histo")]
    histo_high: u64,
    /// Leave out k-mers counted fewer times (from the dump and the histogram).
    #[arg(short = 'L', long = "lower-count", value_name = "COUNT")]
    lower: Option<u64>,
    /// Leave out k-mers counted more times (from the dump and the histogram).
    #[arg(short = 'U', long = "upper-count", value_name = "COUNT")]
    upper: Option<u64>,
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
    let (digits, unit) = units
        .iter()
        .find_map(|&(suffix, unit)| Some((text.strip_suffix(suffix)?, unit)))
        .unwrap_or((text, 1));
    digits
        .parse::<usize>()
        .ok()
        .and_then(|value| value.checked_mul(unit))
        .ok_or_else(|| format!("not a size: {text:?} (a number below 2^64, with k, M or G)"))
}

fn main() -> ExitCode {
    let Command::Count(args) = Cli::parse().command;
    match run(&args) {
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
    let filter = Filter {
        lower: args.lower.unwrap_or(0),
        upper: args.upper.unwrap_or(u64::MAX),
    };
    if filter.lower > filter.upper {
        return Err(Error::Usage(format!(
            "--lower-count {} is above --upper-count {}: nothing would be written",
            filter.lower, filter.upper
        )));
    }
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        usize::from,
    );
    let sources: Vec<Source> = args.files.iter().cloned().map(Source::from_arg).collect();
    let total_bytes = Input::total_bytes(&sources);
    let progress = progress_bar(args, total_bytes);
    let input = Input::new(sources, progress.clone())?;
    // Made before counting, so an output that cannot be created fails at once.
    let mut output = Output::create(args.output.as_deref())?;
    let settings = Settings {
        k,
        canonical: args.canonical,
        threads,
        // A small input needs no table of a million k-mers (making one takes a while).
        size_hint: args.size.unwrap_or_else(|| {
            total_bytes.map_or(DEFAULT_SIZE, |bytes| {
                usize::try_from(bytes).map_or(DEFAULT_SIZE, |b| b.clamp(1024, DEFAULT_SIZE))
            })
        }),
        engine: args.engine,
    };
    let counted = count(input, &settings);
    progress.finish_and_clear();
    let counts = counted?;
    let (total, distinct, elapsed) = (counts.total, counts.distinct(), counts.elapsed);
    let written = output.write(|mut out| {
        if args.histo {
            // Tallied in the table itself: no copy of the k-mers.
            let mut histogram = Histogram::new(&filter, args.histo_high);
            counts.for_each(|_, count| histogram.add(count));
            let lines = histogram.into_lines();
            write_histogram(&lines, &mut out)?;
            Ok(lines.len() as u64)
        } else {
            // Copied out (and the table freed) to be sorted.
            write_dump(&mut counts.into_kmers(), k, &filter, &mut out)
        }
    })?;
    output.commit()?;
    if let (false, Some(written)) = (args.quiet, written) {
        summary(args, &settings, (total, distinct, elapsed), written, start);
    }
    Ok(())
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
         ({binary_bytes_per_sec}, {eta} left)"
    } else {
        "{elapsed_precise} {binary_bytes} read ({binary_bytes_per_sec})"
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

/// Where the counts go: stdout, or a temporary file beside the output that is renamed to it
/// once complete (so a failed count never leaves a partial output behind).
enum Output {
    Stdout,
    File {
        temporary: tempfile::NamedTempFile,
        path: PathBuf,
    },
}

impl Output {
    fn create(path: Option<&Path>) -> Result<Output, Error> {
        let Some(path) = path.filter(|p| p.as_os_str() != "-") else {
            return Ok(Output::Stdout);
        };
        let usage = |why: String| {
            Error::Usage(format!(
                "cannot write the output '{}': {why}",
                path.display()
            ))
        };
        if path.is_dir() {
            return Err(usage("it is a directory".to_owned()));
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(".floe-kmer-");
        #[cfg(unix)]
        {
            // The permissions of a file made by `>` (the umask applies), not tempfile's 0600.
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o644));
        }
        let temporary = builder.tempfile_in(dir).map_err(|e| usage(e.to_string()))?;
        Ok(Output::File {
            temporary,
            path: path.to_owned(),
        })
    }

    /// Writes through `write` (to the temporary file, which [`commit`](Self::commit) puts in
    /// place). Returns what `write` returned, or `None` if stdout was closed by its reader
    /// (`floe-kmer ... | head`): the reader wanted no more, which is no failure (as
    /// ripgrep and the tools killed by SIGPIPE treat it).
    fn write(
        &mut self,
        write: impl FnOnce(&mut dyn Write) -> io::Result<u64>,
    ) -> Result<Option<u64>, Error> {
        let failed = |e: io::Error| Error::Output(format!("writing the output failed: {e}"));
        match self {
            Output::Stdout => match write(&mut io::stdout().lock()) {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(None),
                written => written.map(Some).map_err(failed),
            },
            Output::File { temporary, .. } => {
                let written = write(temporary.as_file_mut()).map_err(failed)?;
                // On disk before the rename, so a crash leaves the old file or the whole new
                // one.
                temporary.as_file().sync_all().map_err(failed)?;
                Ok(Some(written))
            }
        }
    }

    /// Renames a file output into place (nothing for stdout).
    fn commit(self) -> Result<(), Error> {
        if let Output::File { temporary, path } = self {
            temporary.persist(&path).map_err(|e| {
                Error::Output(format!(
                    "cannot rename the output into '{}': {e}",
                    path.display()
                ))
            })?;
        }
        Ok(())
    }
}
