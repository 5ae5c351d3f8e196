//! The performance engine (§IV-C): for each layout of a study, build the table, make the query
//! streams, and run every viable design's vector kernel next to the scalar kernel on the same
//! table and the same queries, on threads sharing the table. Repeats interleave the kernels
//! (scalar, design 1, design 2, ..., then again), so drift on a shared machine hits them alike.
//! Every run's answers are compared with the scalar oracle's; a difference fails the study.
//!
//! floe's own bins go through the same engine: a `FlatMap` holding the same keys and payloads,
//! answering the same query streams with its scalar, AVX2 and AVX-512 matching backends.

use std::time::{Duration, Instant};

use floe::{hash::Mix64, Backend, Error as FloeError, FlatMap};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::{
    kernels::{approach_name, Kernel},
    layout::{key_of, payload_of, Geometry, Layout, Sizes, Width},
    table::{queries, Pattern, Queries, Table, QUERY_BLOCK},
    validate::{designs, Approach},
};
use crate::measure::Workers;

/// Layouts measured together: one key/payload size, some table sizes, some approaches.
#[derive(Clone, Debug)]
pub struct Part {
    pub sizes: Sizes,
    pub layouts: Vec<Layout>,
    pub table_bytes: Vec<u64>,
    pub approaches: Vec<Approach>,
}

/// Everything a run measures.
#[derive(Clone, Debug)]
pub struct Study {
    pub name: String,
    pub parts: Vec<Part>,
    pub load_factor: f64,
    pub hit_rate: f64,
    pub patterns: Vec<Pattern>,
    pub threads: Vec<usize>,
    /// Widths allowed (and supported by this CPU).
    pub widths: Vec<Width>,
    pub floe: bool,
    pub seconds: f64,
    pub repeat: usize,
    pub seed: u64,
}

/// One measured kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// "(3,1)", or "floe" for floe's bins.
    pub layout: String,
    pub ways: usize,
    pub slots: usize,
    pub key_bits: u32,
    pub payload_bits: u32,
    /// Bytes of the table (buckets; for floe, its allocation with the link pool).
    pub table_bytes: u64,
    /// Items / slots reached; for floe, key+value bytes / table bytes.
    pub load_factor: f64,
    pub asked_load_factor: f64,
    pub pattern: String,
    pub threads: usize,
    /// "scalar", "horizontal", "vertical", "hybrid", or floe's backend.
    pub approach: String,
    /// Vector width in bits (absent for scalar).
    pub width: Option<u32>,
    /// Buckets per vector or keys per iteration.
    pub per_vector: Option<usize>,
    /// Million lookups per second per core: median, min, max of the repeats.
    pub mlps: f64,
    pub mlps_min: f64,
    pub mlps_max: f64,
    /// The scalar kernel of the same layout and stream (floe: its scalar backend).
    pub scalar_mlps: f64,
    pub speedup: f64,
    /// Fraction of queries that found a key.
    pub hit_rate: f64,
}

/// What the generator made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableInfo {
    pub layout: String,
    pub key_bits: u32,
    pub payload_bits: u32,
    pub table_bytes: u64,
    pub slots: u64,
    pub items: u64,
    pub load_factor: f64,
    pub asked_load_factor: f64,
    /// Why the build stopped short, if it did.
    pub stopped: Option<String>,
    pub build_seconds: f64,
}

/// One `floe-bench simd` run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabReport {
    #[serde(flatten)]
    pub envelope: crate::report::Envelope,
    pub study: String,
    /// Vector widths this CPU runs (bits).
    pub cpu_widths: Vec<u32>,
    pub hit_rate: f64,
    pub seconds: f64,
    pub repeat: usize,
    /// The validation engine's listing, one per key/payload size.
    pub listings: Vec<String>,
    pub tables: Vec<TableInfo>,
    pub rows: Vec<Row>,
}

pub const SCHEMA: &str = "floe-bench-simd/1";

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// Run `lookup` on `threads` pinned threads, each cycling over its own stream for `seconds`;
/// check each thread's last answers against `expected`. Returns million lookups per second
/// per core and the hit fraction.
fn timed(
    workers: &Workers,
    streams: &[Queries],
    expected: &[Vec<u64>],
    seconds: f64,
    what: &str,
    lookup: impl Fn(&Queries, &mut [u64]) -> u64 + Sync,
) -> Result<(f64, f64), String> {
    let threads = streams.len();
    let duration = Duration::from_secs_f64(seconds);
    let (elapsed, results) = workers.run(threads, |t| {
        let q = &streams[t];
        let mut out = vec![0u64; q.len()];
        let start = Instant::now();
        let mut lookups = 0u64;
        loop {
            let hits = lookup(q, &mut out);
            lookups += q.len() as u64;
            if start.elapsed() >= duration {
                return (lookups, hits, out);
            }
        }
    });
    let mut total = 0;
    let mut hit_total = 0;
    for (t, (lookups, hits, out)) in results.into_iter().enumerate() {
        if let Some(i) = (0..out.len()).find(|&i| out[i] != expected[t][i]) {
            return Err(format!(
                "{what}: wrong answer for query {i} of thread {t} (key {:#x}): {:#x}, the scalar \
                 oracle says {:#x}",
                streams[t].wide[i], out[i], expected[t][i]
            ));
        }
        total += lookups;
        hit_total += hits;
    }
    let per_core = total as f64 / elapsed.as_secs_f64() / threads as f64 / 1e6;
    let lookups_per_pass: usize = streams.iter().map(Queries::len).sum();
    Ok((per_core, hit_total as f64 / lookups_per_pass as f64))
}

/// A floe map with the table's keys and payloads (16-bit fingerprints deduplicated), sized at
/// about the study's load factor of its bins' three slots; grown until every key fits.
fn floe_map(table: &Table, load_factor: f64, backend: Backend) -> Result<FloeMap, String> {
    let sizes = table.geometry.sizes;
    let mut bins = ((table.items as f64 / (3.0 * load_factor)).ceil() as usize).max(2);
    for _ in 0..8 {
        // A fixed seed: every backend gets the same table.
        let map = FlatMap::<u64, u64>::builder()
            .hasher(Mix64::with_seed(0x5eed))
            .bins(bins)
            .bins_per_link(3)
            .backend(backend)
            .build()
            .map_err(|e| format!("floe ({backend:?}): {e}"))?;
        let full = (0..table.items as u64).try_for_each(|i| {
            map.try_insert_new(key_of(sizes, i), payload_of(sizes, i))
                .map(|_| ())
        });
        match full {
            Ok(()) => return Ok(map),
            Err(FloeError::Full) => bins += bins / 8,
            Err(e) => return Err(format!("floe ({backend:?}): {e}")),
        }
    }
    Err("floe: the keys did not fit after growing the table 8 times".into())
}

type FloeMap = FlatMap<u64, u64, Mix64>;

fn floe_lookup(map: &FloeMap, q: &Queries, out: &mut [u64]) -> u64 {
    let mut hits = 0;
    for (o, key) in out.iter_mut().zip(&q.wide) {
        *o = match map.get(key) {
            Some(v) => {
                hits += 1;
                v
            }
            None => 0,
        };
    }
    hits
}

/// What a group of rows shares.
struct Context<'a> {
    table: &'a Table,
    table_bytes: u64,
    load_factor: f64,
    asked: f64,
    pattern: Pattern,
    threads: usize,
}

impl Context<'_> {
    fn row(
        &self,
        layout: String,
        approach: String,
        width: Option<u32>,
        per_vector: Option<usize>,
    ) -> Row {
        let g = self.table.geometry;
        Row {
            layout,
            ways: g.layout.ways,
            slots: g.layout.slots,
            key_bits: g.sizes.key_bits,
            payload_bits: g.sizes.payload_bits,
            table_bytes: self.table_bytes,
            load_factor: self.load_factor,
            asked_load_factor: self.asked,
            pattern: self.pattern.to_string(),
            threads: self.threads,
            approach,
            width,
            per_vector,
            mlps: 0.0,
            mlps_min: 0.0,
            mlps_max: 0.0,
            scalar_mlps: 0.0,
            speedup: 0.0,
            hit_rate: 0.0,
        }
    }
}

fn progress(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

/// Kernels a part runs per layout (scalar first), with the refusals printed for the record.
fn kernels_of(part: &Part, layout: Layout, widths: &[Width]) -> Result<Vec<Kernel>, String> {
    let (viable, _) = designs(layout, part.sizes, widths, &part.approaches);
    let mut kernels = vec![Kernel::scalar(part.sizes)];
    for design in viable {
        kernels.push(Kernel::vector(design, part.sizes)?);
    }
    Ok(kernels)
}

/// Run the study; `log` gets the generator's lines as they happen.
pub fn run(study: &Study, mut log: impl FnMut(&str)) -> Result<(Vec<TableInfo>, Vec<Row>), String> {
    let workers = Workers::new();
    let mut tables = Vec::new();
    let mut rows = Vec::new();
    let mut total_runs = 0u64;
    for part in &study.parts {
        let floe_runs = if study.floe { 3 } else { 0 };
        let per_size: u64 = part
            .layouts
            .iter()
            .map(|&l| kernels_of(part, l, &study.widths).map(|k| k.len() as u64))
            .sum::<Result<u64, String>>()?
            + floe_runs;
        total_runs += per_size
            * (part.table_bytes.len() * study.patterns.len() * study.threads.len()) as u64
            * study.repeat as u64;
    }
    let bar = progress(total_runs);
    for part in &study.parts {
        for &bytes in &part.table_bytes {
            let mut built = Vec::new();
            for &layout in &part.layouts {
                let geometry = Geometry::new(layout, part.sizes, bytes)?;
                let start = Instant::now();
                let table = Table::build(geometry, study.load_factor)?;
                let info = TableInfo {
                    layout: layout.to_string(),
                    key_bits: part.sizes.key_bits,
                    payload_bits: part.sizes.payload_bits,
                    table_bytes: geometry.table_bytes() as u64,
                    slots: geometry.slots() as u64,
                    items: table.items as u64,
                    load_factor: table.load_factor(),
                    asked_load_factor: study.load_factor,
                    stopped: table.stopped.clone(),
                    build_seconds: start.elapsed().as_secs_f64(),
                };
                if part.sizes.key_bits == 16 && table.items >= 65535 {
                    bar.suspend(|| {
                        log(&format!(
                            "note: {layout} holds {} 16-bit fingerprints, so every value is \
                             present and no query can miss (hit rate 100%)",
                            table.items
                        ))
                    });
                }
                bar.suspend(|| {
                    log(&format!(
                        "table {} {} {:.1} KiB: {} items in {} slots, load factor {:.1}%{}",
                        layout,
                        part.sizes,
                        info.table_bytes as f64 / 1024.0,
                        info.items,
                        info.slots,
                        100.0 * info.load_factor,
                        match &info.stopped {
                            Some(why) =>
                                format!(" (asked {:.0}%: {why})", 100.0 * study.load_factor),
                            None => String::new(),
                        }
                    ))
                });
                tables.push(info);
                built.push(table);
            }
            for &pattern in &study.patterns {
                for &threads in &study.threads {
                    for (table, &layout) in built.iter().zip(&part.layouts) {
                        bar.set_message(format!("{layout} {} {pattern} {threads}T", part.sizes));
                        let streams = queries(
                            table,
                            pattern,
                            study.hit_rate,
                            threads,
                            QUERY_BLOCK,
                            study.seed,
                        );
                        let scalar = Kernel::scalar(part.sizes);
                        let expected: Vec<Vec<u64>> = streams
                            .iter()
                            .map(|q| {
                                let mut out = vec![0; q.len()];
                                scalar.run(table, q, &mut out);
                                out
                            })
                            .collect();
                        let kernels = kernels_of(part, layout, &study.widths)?;
                        let mut samples = vec![Vec::new(); kernels.len()];
                        let mut hit_rate = 0.0;
                        for _ in 0..study.repeat {
                            for (k, kernel) in kernels.iter().enumerate() {
                                let (mlps, hits) = timed(
                                    &workers,
                                    &streams,
                                    &expected,
                                    study.seconds,
                                    &format!("{layout} {} {}", part.sizes, kernel.name()),
                                    |q, out| kernel.run(table, q, out),
                                )?;
                                samples[k].push(mlps);
                                hit_rate = hits;
                                bar.inc(1);
                            }
                        }
                        let context = Context {
                            table,
                            table_bytes: table.geometry.table_bytes() as u64,
                            load_factor: table.load_factor(),
                            asked: study.load_factor,
                            pattern,
                            threads,
                        };
                        let scalar_mlps = median(samples[0].clone()).0;
                        for (kernel, s) in kernels.iter().zip(samples) {
                            let (approach, width, per) = match kernel.design {
                                None => ("scalar".to_string(), None, None),
                                Some(d) => (
                                    approach_name(d.approach).to_string(),
                                    Some(d.width.bits()),
                                    Some(d.per_vector),
                                ),
                            };
                            let mut row = context.row(layout.to_string(), approach, width, per);
                            (row.mlps, row.mlps_min, row.mlps_max) = median(s);
                            row.scalar_mlps = scalar_mlps;
                            row.speedup = row.mlps / scalar_mlps;
                            row.hit_rate = hit_rate;
                            rows.push(row);
                        }
                    }
                    if study.floe {
                        // The last layout's table: every layout of a part holds the same keys
                        // up to its load factor; the fullest one gives floe the most.
                        let table = built
                            .iter()
                            .max_by_key(|t| t.items)
                            .expect("a part has layouts");
                        bar.set_message(format!("floe {} {pattern} {threads}T", part.sizes));
                        rows.extend(measure_floe(
                            study, &workers, table, pattern, threads, &bar,
                        )?);
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok((tables, rows))
}

/// floe's bins through the engine: scalar, AVX2 and AVX-512 backends on the same streams.
fn measure_floe(
    study: &Study,
    workers: &Workers,
    table: &Table,
    pattern: Pattern,
    threads: usize,
    bar: &ProgressBar,
) -> Result<Vec<Row>, String> {
    let streams = queries(
        table,
        pattern,
        study.hit_rate,
        threads,
        QUERY_BLOCK,
        study.seed,
    );
    let sizes = table.geometry.sizes;
    let backends: Vec<(Backend, &str, Option<u32>)> = [
        (Backend::Scalar, "floe scalar", None),
        (Backend::Avx2, "floe avx2", Some(256)),
        (Backend::Avx512, "floe avx512", Some(512)),
    ]
    .into_iter()
    .filter(|(b, ..)| b.is_supported())
    .collect();
    let mut expected: Option<Vec<Vec<u64>>> = None;
    if sizes.key_bits > 16 {
        // Distinct keys: floe must answer exactly what the cuckoo table's oracle answers.
        let scalar = Kernel::scalar(sizes);
        expected = Some(
            streams
                .iter()
                .map(|q| {
                    let mut out = vec![0; q.len()];
                    scalar.run(table, q, &mut out);
                    out
                })
                .collect(),
        );
    }
    let mut rows = Vec::new();
    let mut scalar_mlps = 0.0;
    for (backend, name, width) in backends {
        let map = floe_map(table, study.load_factor, backend)?;
        let want = expected.get_or_insert_with(|| {
            // Fingerprints: floe kept the first of each repeated key; its scalar backend's
            // answers are the oracle of the other backends.
            streams
                .iter()
                .map(|q| {
                    let mut out = vec![0; q.len()];
                    floe_lookup(&map, q, &mut out);
                    out
                })
                .collect()
        });
        let mut samples = Vec::new();
        let mut hit_rate = 0.0;
        for _ in 0..study.repeat {
            let (mlps, hits) = timed(workers, &streams, want, study.seconds, name, |q, out| {
                floe_lookup(&map, q, out)
            })?;
            samples.push(mlps);
            hit_rate = hits;
            bar.inc(1);
        }
        let stats = map.stats();
        let context = Context {
            table,
            table_bytes: stats.allocated_bytes as u64,
            load_factor: map.len() as f64 * 16.0 / stats.allocated_bytes as f64,
            asked: study.load_factor,
            pattern,
            threads,
        };
        let mut row = context.row("floe".into(), name.into(), width, None);
        (row.ways, row.slots) = (1, 3);
        (row.mlps, row.mlps_min, row.mlps_max) = median(samples);
        if backend == Backend::Scalar {
            scalar_mlps = row.mlps;
        }
        row.scalar_mlps = scalar_mlps;
        row.speedup = row.mlps / scalar_mlps;
        row.hit_rate = hit_rate;
        rows.push(row);
    }
    for _ in rows.len()..3 {
        bar.inc(study.repeat as u64);
    }
    Ok(rows)
}

/// The results as a text table.
pub fn table_text(rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<7} {:<7} {:>9} {:>6} {:<9} {:>3}  {:<16} {:>10}  {:>20} {:>8} {:>7} {:>5}",
        "layout",
        "(K,V)",
        "table",
        "LF",
        "pattern",
        "thr",
        "kernel",
        "per vec",
        "Mlookups/s/core",
        "scalar",
        "speedup",
        "hit%"
    );
    for r in rows {
        let kernel = match r.width {
            Some(w) if !r.approach.starts_with("floe") => format!("{} {w}", r.approach),
            _ => r.approach.clone(),
        };
        let per = match (r.per_vector, r.approach.as_str()) {
            (Some(n), "horizontal") => format!("{n} bkt/vec"),
            (Some(n), _) => format!("{n} keys/it"),
            (None, _) => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<7} {:<7} {:>9} {:>5.1}% {:<9} {:>3}  {:<16} {:>10}  {:>7.1} ({:>5.1}-{:>5.1}) {:>8.1} {:>6.2}x {:>5.1}",
            r.layout,
            format!("({},{})", r.key_bits, r.payload_bits),
            human_bytes(r.table_bytes),
            100.0 * r.load_factor,
            r.pattern,
            r.threads,
            kernel,
            per,
            r.mlps,
            r.mlps_min,
            r.mlps_max,
            r.scalar_mlps,
            r.speedup,
            100.0 * r.hit_rate
        );
    }
    out
}

/// 1 MiB as "1.0M", 512 KiB as "512K".
pub fn human_bytes(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1}G", b as f64 / (1u64 << 30) as f64)
    } else if b >= 1 << 20 {
        format!("{:.1}M", b as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.0}K", b as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(approaches: Vec<Approach>, layouts: &str, floe: bool) -> Study {
        Study {
            name: "test".into(),
            parts: vec![Part {
                sizes: "32,32".parse().unwrap(),
                layouts: layouts.split(' ').map(|l| l.parse().unwrap()).collect(),
                table_bytes: vec![16 << 10],
                approaches,
            }],
            load_factor: 0.9,
            hit_rate: 0.9,
            patterns: vec![Pattern::Uniform],
            threads: vec![2],
            widths: Width::detected(),
            floe,
            seconds: 0.002,
            repeat: 1,
            seed: 1,
        }
    }

    #[test]
    fn a_tiny_study_measures_every_design_and_floe() {
        let study = tiny(
            vec![Approach::Horizontal, Approach::Vertical],
            "2x1 2x4",
            true,
        );
        let (tables, rows) = run(&study, |_| {}).unwrap();
        assert_eq!(tables.len(), 2);
        assert!(tables[0].stopped.is_some(), "(2,1) cannot reach 90%");
        let scalar = rows.iter().filter(|r| r.approach == "scalar").count();
        assert_eq!(scalar, 2);
        let (viable21, _) = designs(
            "2x1".parse().unwrap(),
            "32,32".parse().unwrap(),
            &study.widths,
            &[Approach::Vertical],
        );
        let (viable24, _) = designs(
            "2x4".parse().unwrap(),
            "32,32".parse().unwrap(),
            &study.widths,
            &[Approach::Horizontal],
        );
        let floe = rows.iter().filter(|r| r.layout == "floe").count();
        assert_eq!(rows.len(), 2 + viable21.len() + viable24.len() + floe);
        assert!(floe >= 1);
        for r in &rows {
            assert!(r.mlps > 0.0 && r.scalar_mlps > 0.0, "{r:?}");
            assert!((r.speedup - r.mlps / r.scalar_mlps).abs() < 1e-9);
            assert!(r.mlps_min <= r.mlps && r.mlps <= r.mlps_max);
        }
        let hit = rows.iter().find(|r| r.layout == "(2,4)").unwrap().hit_rate;
        assert!((0.85..0.95).contains(&hit), "hit rate {hit}");
        let text = table_text(&rows);
        assert!(text.contains("(2,4)") && text.contains("scalar"));
    }

    #[test]
    fn hybrid_runs_over_buckets() {
        let study = tiny(vec![Approach::Hybrid], "2x2", false);
        let (_, rows) = run(&study, |_| {}).unwrap();
        let hybrid = rows.iter().filter(|r| r.approach == "hybrid").count();
        assert_eq!(
            hybrid,
            Width::detected().iter().filter(|w| w.bits() >= 256).count()
        );
    }
}
