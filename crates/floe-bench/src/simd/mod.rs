//! The SIMD layout lab: SimdHT-Bench (Shankar, Lu, Panda) inside floe-bench.
//!
//! The question the lab answers: for a read-mostly hash table of a given layout, key and
//! payload size, size and access pattern, which way of using this CPU's vectors makes lookups
//! fastest, and by how much over the scalar lookup of the same table?
//!
//! * [`layout`]: the vocabulary, cuckoo layouts `(N, m)` (N hash functions, m slots per
//!   bucket; m = 1 is the N-way cuckoo table, m > 1 the bucketized one), 16/32/64-bit keys and
//!   payloads, 128/256/512-bit vectors, and the byte geometry (a bucket is its m keys, then its
//!   m payloads).
//! * [`table`]: the generator, real cuckoo insertion with a bounded breadth-first displacement
//!   search that reaches the asked load factor or says where the layout gave up; per-thread
//!   query streams with a hit rate and an access pattern (uniform, mutilate-like skew, Zipf).
//! * [`validate`]: the validation engine, which designs (horizontal: buckets per vector;
//!   vertical: keys per iteration with gathers; hybrid: vertical over buckets) the layout and
//!   this CPU allow, printed like the paper's Listing 1, and why the others are refused.
//! * [`kernels`] and `x86`: the scalar lookup (the oracle) and the vector kernels; every vector
//!   kernel answers exactly what the scalar one answers (property-tested).
//! * [`engine`]: the performance engine, vector and scalar side by side on the same table and
//!   streams, interleaved repeats, answers checked, plus floe's own bins (scalar, AVX2, AVX-512
//!   matching) through the same streams.
//! * [`chart`]: the Fig. 5 bubble chart.
//!
//! Where the lab departs from the paper, and why: x86 gathers move 32 or 64 bits, so 16-bit
//! keys use 32-bit lanes (w/32 keys per iteration, not w/16); a horizontal bucket must fit the
//! vector whole, keys and payloads (Algorithm 1), so (K,V) = (16,32) over (2,8) (384-bit
//! buckets) is AVX-512 only, although the paper's text reports it at AVX-256; 16-bit keys are
//! fingerprints, so a big table of them holds repeats, as a table of key hashes does. The
//! "mutilate" pattern is mutilate's Zipf 0.99 key popularity (its `--popularity` option); the
//! paper does not give its parameters.

pub mod chart;
pub mod engine;
pub mod kernels;
pub mod layout;
mod scalar;
pub mod table;
pub mod validate;
mod x86;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use self::{
    engine::{LabReport, Part, Study},
    layout::{Layout, Sizes, Width},
    table::Pattern,
    validate::Approach,
};
use crate::{keys::parse_count, measure::Workers, report};

/// The paper's case studies, as presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Case {
    /// Case study 1(a): (32,32), every layout, 1 MiB, LF 90%, hit 90%, uniform and skewed.
    #[value(name = "1a")]
    OneA,
    /// Case study 1(b): every layout at 256 KiB, 4 MiB and 64 MiB, uniform.
    #[value(name = "1b")]
    OneB,
    /// Case study 2: (64,64) over 3-way cuckoo, (16,32) over (2,8) BCHT; 512 KiB.
    #[value(name = "2")]
    Two,
    /// Case study 3: AVX2 vs AVX-512 on 3-way cuckoo, (2,4) and (2,8) BCHT, 1 MiB and
    /// 64 MiB, 1 and all threads.
    #[value(name = "3")]
    Three,
    /// Case study 4: (2,4) horizontal and 3-way vertical, 1 MiB and 16 MiB, uniform and skewed.
    #[value(name = "4")]
    Four,
    /// Case study 5: vertical over (2,2) vs 2-way at 1 MiB, (3,2) vs 3-way at 16 MiB.
    #[value(name = "5")]
    Five,
}

/// `floe-bench simd` flags.
#[derive(Args, Debug, Clone)]
pub struct SimdArgs {
    /// A case study preset [default: 1a when no layout flags are given]. Sets layouts,
    /// sizes, table sizes, patterns and approaches; other flags still apply.
    #[arg(long, value_enum)]
    case: Option<Case>,
    /// Layouts NxM, comma separated (N = 2..4 hash functions, m = 1, 2, 4, 8 slots per bucket).
    #[arg(long, value_delimiter = ',')]
    layouts: Vec<Layout>,
    /// Key and payload bits: 16, 32 or 64 each [default: 32,32].
    #[arg(long)]
    kv: Option<Sizes>,
    /// Table sizes in bytes, comma separated (256K, 16M, 1G) [default: 1M].
    #[arg(long = "table-size", value_delimiter = ',', value_parser = parse_count)]
    table_size: Vec<u64>,
    /// Load factor the generator fills each table to (up to the layout's limit).
    #[arg(long, default_value_t = 0.9)]
    load_factor: f64,
    /// Fraction of queries for keys in the table.
    #[arg(long, default_value_t = 0.9)]
    hit_rate: f64,
    /// Access patterns: uniform, mutilate (= skewed), zipf:THETA, hot:KEYS:PERCENT
    /// [default: uniform,mutilate].
    #[arg(long, value_delimiter = ',')]
    pattern: Vec<Pattern>,
    /// Threads sharing the table [default: all cores].
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Vector widths to consider (128, 256, 512) [default: all this CPU has].
    #[arg(long, value_delimiter = ',')]
    widths: Vec<Width>,
    /// Approaches: horizontal, vertical, hybrid [default: horizontal,vertical].
    #[arg(long, value_delimiter = ',')]
    approach: Vec<Approach>,
    /// Leave floe's own bins out.
    #[arg(long)]
    no_floe: bool,
    /// Seconds per kernel per repeat.
    #[arg(long, default_value_t = 0.4)]
    seconds: f64,
    /// Repeats (interleaved; the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Print the validation engine's listing and stop.
    #[arg(long)]
    list: bool,
    /// Seed of the query streams.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the JSON report here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the bubble chart here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Directory for `simd-<timestamp>.json` and `.svg` (unless --json/--svg are given).
    #[arg(long, default_value = "results")]
    out_dir: PathBuf,
}

/// Why the lab stopped: bad flags (exit 2) or a failed measurement (exit 1).
pub enum LabError {
    Usage(String),
    Run(String),
}

const PAPER_LAYOUTS: &str = "2x1,3x1,4x1,2x2,2x4,2x8,3x2,3x4,3x8";
const STANDARD: [Approach; 2] = [Approach::Horizontal, Approach::Vertical];

fn layouts(text: &str) -> Vec<Layout> {
    text.split(',')
        .map(|l| l.parse().expect("preset layouts are valid"))
        .collect()
}

fn part(sizes: &str, layouts_text: &str, tables: &[u64], approaches: &[Approach]) -> Part {
    Part {
        sizes: sizes.parse().expect("preset sizes are valid"),
        layouts: layouts(layouts_text),
        table_bytes: tables.to_vec(),
        approaches: approaches.to_vec(),
    }
}

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;

/// A case's parts, patterns and threads (`None`: the flags' defaults).
fn preset(case: Case, cores: usize) -> (String, Vec<Part>, Vec<Pattern>, Option<Vec<usize>>) {
    let both = vec![Pattern::Uniform, Pattern::Mutilate];
    let uniform = vec![Pattern::Uniform];
    match case {
        Case::OneA => (
            "case study 1(a)".into(),
            vec![part("32,32", PAPER_LAYOUTS, &[M], &STANDARD)],
            both,
            None,
        ),
        Case::OneB => (
            "case study 1(b)".into(),
            vec![part(
                "32,32",
                PAPER_LAYOUTS,
                &[256 * K, 4 * M, 64 * M],
                &STANDARD,
            )],
            uniform,
            None,
        ),
        Case::Two => (
            "case study 2".into(),
            vec![
                part("64,64", "3x1", &[512 * K], &STANDARD),
                part("16,32", "2x8", &[512 * K], &STANDARD),
            ],
            both,
            None,
        ),
        Case::Three => {
            let mut threads = vec![1, cores];
            threads.dedup();
            (
                "case study 3".into(),
                vec![part("32,32", "3x1,2x4,2x8", &[M, 64 * M], &STANDARD)],
                uniform,
                Some(threads),
            )
        }
        Case::Four => (
            "case study 4".into(),
            vec![part("32,32", "2x4,3x1", &[M, 16 * M], &STANDARD)],
            both,
            None,
        ),
        Case::Five => {
            let ver = [Approach::Vertical, Approach::Hybrid];
            (
                "case study 5".into(),
                vec![
                    part("32,32", "2x1,2x2", &[M], &ver),
                    part("32,32", "3x1,3x2", &[16 * M], &ver),
                ],
                uniform,
                None,
            )
        }
    }
}

/// The study the flags describe.
fn study(args: &SimdArgs) -> Result<Study, LabError> {
    let usage = |m: String| LabError::Usage(m);
    if !(0.0 < args.load_factor && args.load_factor <= 1.0) {
        return Err(usage("--load-factor must be in (0, 1]".into()));
    }
    if !(0.0..=1.0).contains(&args.hit_rate) {
        return Err(usage("--hit-rate must be in [0, 1]".into()));
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(usage("--seconds must be positive".into()));
    }
    if args.repeat == 0 {
        return Err(usage("--repeat must be at least 1".into()));
    }
    if args.threads.contains(&0) {
        return Err(usage("--threads: counts must be at least 1".into()));
    }
    for &bytes in &args.table_size {
        if !(layout::MIN_TABLE_BYTES..=layout::MAX_TABLE_BYTES).contains(&bytes) {
            return Err(usage(format!(
                "--table-size {bytes}: use 4K to 1G (gathers address the table with 32-bit offsets)"
            )));
        }
    }
    let detected = Width::detected();
    let widths = if args.widths.is_empty() {
        detected.clone()
    } else {
        let mut w = args.widths.clone();
        w.sort();
        w.dedup();
        if let Some(missing) = w.iter().find(|w| !detected.contains(w)) {
            return Err(usage(format!(
                "--widths: this CPU has no {}-bit ({}) vectors",
                missing.bits(),
                missing.isa()
            )));
        }
        w
    };
    let cores = Workers::new().cores();
    let custom = !args.layouts.is_empty() || args.kv.is_some() || !args.table_size.is_empty();
    let (name, mut parts, mut patterns, threads) = match (args.case, custom) {
        (Some(_), true) => {
            return Err(usage(
                "--case sets the layouts, --kv and --table-size; give either the case or those"
                    .into(),
            ))
        }
        (Some(case), false) => preset(case, cores),
        (None, false) => preset(Case::OneA, cores),
        (None, true) => {
            let layouts = if args.layouts.is_empty() {
                layouts(PAPER_LAYOUTS)
            } else {
                args.layouts.clone()
            };
            let tables = if args.table_size.is_empty() {
                vec![M]
            } else {
                args.table_size.clone()
            };
            (
                "custom".into(),
                vec![Part {
                    sizes: args.kv.unwrap_or(Sizes {
                        key_bits: 32,
                        payload_bits: 32,
                    }),
                    layouts,
                    table_bytes: tables,
                    approaches: STANDARD.to_vec(),
                }],
                vec![Pattern::Uniform, Pattern::Mutilate],
                None,
            )
        }
    };
    if !args.approach.is_empty() {
        for p in &mut parts {
            p.approaches = args.approach.clone();
        }
    }
    if !args.pattern.is_empty() {
        patterns = args.pattern.clone();
    }
    let threads = if !args.threads.is_empty() {
        args.threads.clone()
    } else {
        threads.unwrap_or(vec![cores])
    };
    Ok(Study {
        name,
        parts,
        load_factor: args.load_factor,
        hit_rate: args.hit_rate,
        patterns,
        threads,
        widths,
        floe: !args.no_floe,
        seconds: args.seconds,
        repeat: args.repeat,
        seed: args.seed,
    })
}

/// The validation listing of every part, and a refusal when a part's layouts have no design
/// at all under the flags.
fn listings(study: &Study) -> Result<Vec<String>, LabError> {
    let mut out = Vec::new();
    for part in &study.parts {
        let text = validate::listing(part.sizes, &part.layouts, &study.widths, &part.approaches);
        let any = part.layouts.iter().any(|&l| {
            !validate::designs(l, part.sizes, &study.widths, &part.approaches)
                .0
                .is_empty()
        });
        if !any {
            return Err(LabError::Usage(format!(
                "no vectorized design fits these flags:\n{text}"
            )));
        }
        out.push(text);
    }
    Ok(out)
}

/// `floe-bench simd`.
pub fn main(args: SimdArgs) -> Result<(), LabError> {
    let study = study(&args)?;
    let listings = listings(&study)?;
    let widths: Vec<String> = study.widths.iter().map(|w| w.to_string()).collect();
    println!(
        "SIMD layout lab, {}: CPU vectors {} bits; load factor {:.0}%, hit rate {:.0}%, threads {:?}",
        study.name,
        widths.join("/"),
        100.0 * study.load_factor,
        100.0 * study.hit_rate,
        study.threads
    );
    println!("\nvalidation engine (viable designs per layout):");
    for l in &listings {
        print!("{l}");
    }
    if args.list {
        return Ok(());
    }
    println!();
    let (tables, rows) = engine::run(&study, |line| println!("{line}")).map_err(LabError::Run)?;
    println!("\n{}", engine::table_text(&rows));
    let stamp = report::file_stamp();
    let lab = LabReport {
        envelope: report::Envelope::now(engine::SCHEMA),
        study: study.name.clone(),
        cpu_widths: study.widths.iter().map(|w| w.bits()).collect(),
        hit_rate: study.hit_rate,
        seconds: study.seconds,
        repeat: study.repeat,
        listings,
        tables,
        rows,
    };
    let json_path = args
        .json
        .clone()
        .unwrap_or_else(|| args.out_dir.join(format!("simd-{stamp}.json")));
    let svg_path = args
        .svg
        .clone()
        .unwrap_or_else(|| args.out_dir.join(format!("simd-{stamp}.svg")));
    let json = serde_json::to_string_pretty(&lab).map_err(|e| LabError::Run(e.to_string()))?;
    report::write_file(&json_path, &json).map_err(LabError::Run)?;
    report::write_file(&svg_path, &chart::svg(&lab)).map_err(LabError::Run)?;
    println!(
        "{}\nwrote {} and {}",
        lab.envelope.machine,
        json_path.display(),
        svg_path.display()
    );
    Ok(())
}
