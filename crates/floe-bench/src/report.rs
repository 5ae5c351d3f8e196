//! What a run reports: the JSON schema (kept stable: others parse it), the CSV columns, and the
//! table printed on stdout.
//!
//! ```text
//! {
//!   "machine":  { "cpu", "cores", "l1d", "l2", "l3", "thp", "kernel" },
//!   "ceiling":  { "read_noprefetch_mops", "read_window_mops", "rmw_window_mops",
//!                 (at the largest thread count; every count in "by_threads"), ... },
//!   "results":  [ { "map", "workload", "dist", "threads", "keys", "batch", "mops" (median),
//!                   "mops_min", "mops_max",
//!                   "latency_ns": { "p50", "p99", "p999", "p9999", "max" } or null,
//!                   "bytes_per_key" or null, "ceiling_fraction", ... } ],
//!   ...
//! }
//! ```
//!
//! Fields may be added; the ones above keep their names and meaning.

use std::{fmt::Write as _, path::Path};

use serde::{Deserialize, Serialize};

use crate::{ceiling::Figures, machine::Machine, measure::Latency};

/// What every report of the bench starts with (the suite's and `run`'s, the growth runs', the
/// layout lab's): which report it is, when and where it was measured. Flattened into each
/// report's JSON, so the fields sit at the top level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// `floe-bench/1`, `floe-bench-growth/1`, `floe-bench-simd/1`. Reports written before the
    /// suite's had one read as the empty string.
    #[serde(default)]
    pub schema: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub timestamp: String,
    pub machine: Machine,
    pub floe_bench_version: String,
}

impl Envelope {
    /// An envelope for a report of `schema` measured now on this machine.
    pub fn now(schema: &str) -> Envelope {
        Envelope {
            schema: schema.into(),
            timestamp: timestamps(unix_now()).0,
            machine: crate::machine::machine(),
            floe_bench_version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// The schema of [`Report`].
pub const SCHEMA: &str = "floe-bench/1";

/// One `floe-bench` invocation's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    #[serde(flatten)]
    pub envelope: Envelope,
    pub ceiling: CeilingReport,
    pub results: Vec<Row>,
    /// The command line that produced the report.
    pub command: String,
}

/// The ceiling in the same run: random 64-byte line accesses over an array of the table's size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CeilingReport {
    /// Random line reads, no software prefetch (Mops/s).
    pub read_noprefetch_mops: f64,
    /// Random line reads with the best prefetch window (32 and 64 deep into L1, 64 into L2).
    pub read_window_mops: f64,
    /// Random atomic read-modify-writes with a 64-deep `prefetchw` window.
    pub rmw_window_mops: f64,
    /// The thread count of the three figures above (the largest measured).
    pub threads: usize,
    /// Size of the array (bytes): the size of floe's table for the run.
    pub bytes: u64,
    pub huge_pages: bool,
    /// Every figure at every thread count.
    pub by_threads: Vec<Figures>,
}

impl CeilingReport {
    pub fn new(by_threads: Vec<Figures>, bytes: u64, huge_pages: bool) -> Self {
        let top = by_threads
            .iter()
            .max_by_key(|f| f.threads)
            .copied()
            .unwrap_or_default();
        Self {
            read_noprefetch_mops: top.read_noprefetch_mops,
            read_window_mops: top.read_window(),
            rmw_window_mops: top.rmw_window64_mops,
            threads: top.threads,
            bytes,
            huge_pages,
            by_threads,
        }
    }

    pub fn at(&self, threads: usize) -> Option<&Figures> {
        self.by_threads.iter().find(|f| f.threads == threads)
    }
}

/// One measured configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub map: String,
    pub workload: String,
    pub dist: String,
    pub threads: usize,
    pub keys: u64,
    pub batch: usize,
    /// `single`, `batch` or `pipeline`.
    pub api: crate::measure::Api,
    /// Median of the repeats, million operations per second.
    pub mops: f64,
    pub mops_min: f64,
    pub mops_max: f64,
    pub latency_ns: Option<Latency>,
    /// Table bytes per key when the map reports its table, else RSS growth per key.
    pub bytes_per_key: Option<f64>,
    /// `mops` over the matching ceiling (`ceiling_mops`).
    pub ceiling_fraction: f64,
    /// The matching ceiling: reads and RMWs weighted by the workload's read fraction, no
    /// prefetch for unbatched runs.
    pub ceiling_mops: f64,
    /// RSS growth per key, measured in a separate process (when measured).
    pub rss_bytes_per_key: Option<f64>,
    pub read_ratio: f64,
    pub prefill: f64,
    pub repeat: usize,
    /// Operations in the median run.
    pub ops: u64,
    /// Distinct cache lines read per operation (`--features line-stats` builds only).
    pub lines_per_op: Option<f64>,
}

impl Row {
    /// One latency percentile as text (`missing` when latency was not sampled).
    fn latency_cell(&self, pick: fn(&Latency) -> u64, missing: &str) -> String {
        self.latency_ns
            .as_ref()
            .map_or(missing.to_string(), |l| pick(l).to_string())
    }
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialize")
    }

    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("not a floe-bench report: {e}"))
    }

    pub fn write_json(&self, path: &Path) -> Result<(), String> {
        write_file(path, &self.to_json())
    }

    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "map,workload,dist,threads,keys,batch,mops,mops_min,mops_max,p50_ns,p99_ns,p999_ns,\
             p9999_ns,max_ns,bytes_per_key,rss_bytes_per_key,ceiling_fraction,ceiling_mops\n",
        );
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.2}"));
        for r in &self.results {
            let lat = |pick| r.latency_cell(pick, "");
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{},{},{},{},{},{},{:.4},{:.3}",
                csv_field(&r.map),
                r.workload,
                r.dist,
                r.threads,
                r.keys,
                r.batch,
                r.mops,
                r.mops_min,
                r.mops_max,
                lat(|l| l.p50),
                lat(|l| l.p99),
                lat(|l| l.p999),
                lat(|l| l.p9999),
                lat(|l| l.max),
                opt(r.bytes_per_key),
                opt(r.rss_bytes_per_key),
                r.ceiling_fraction,
                r.ceiling_mops
            );
        }
        out
    }

    pub fn write_csv(&self, path: &Path) -> Result<(), String> {
        write_file(path, &self.to_csv())
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<22} {:<10} {:<12} {:>9} {:>3} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8} {:>9} {:>9} {:>7}",
            "map",
            "workload",
            "dist",
            "api",
            "thr",
            "Mops/s",
            "min",
            "max",
            "x ceil",
            "p50 ns",
            "p99 ns",
            "p99.99 ns",
            "max ns",
            "B/key"
        );
        for r in &self.results {
            let lat = |pick| r.latency_cell(pick, "-");
            let _ = writeln!(
                out,
                "{:<22} {:<10} {:<12} {:>9} {:>3} {:>8.2} {:>8.2} {:>8.2} {:>7.3} {:>8} {:>8} {:>9} {:>9} {:>7}",
                r.map,
                r.workload,
                r.dist,
                match r.api {
                    crate::measure::Api::Single => "single".to_string(),
                    crate::measure::Api::Batch => format!("batch {}", r.batch),
                    crate::measure::Api::Pipeline => format!("pipe {}", r.batch),
                    crate::measure::Api::Bare => format!("bare {}", r.batch),
                },
                r.threads,
                r.mops,
                r.mops_min,
                r.mops_max,
                r.ceiling_fraction,
                lat(|l| l.p50),
                lat(|l| l.p99),
                lat(|l| l.p9999),
                lat(|l| l.max),
                r.bytes_per_key.map_or("-".into(), |b| format!("{b:.1}")),
            );
        }
        out
    }
}

/// The ceiling figures as a table.
pub fn ceiling_table(figures: &[Figures]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>14} {:>14} {:>14} {:>14} {:>14} {:>14} {:>14} {:>14}   (Mops/s, random 64-byte \
         lines; find, insert: a minimal table's, references)",
        "threads",
        "read",
        "read, pf 32",
        "read, pf 64",
        "read, L2 64",
        "rmw",
        "rmw, pf 64",
        "find, L2 64",
        "insert, L2 64"
    );
    for f in figures {
        let _ = writeln!(
            out,
            "{:<8} {:>14.2} {:>14.2} {:>14.2} {:>14.2} {:>14.2} {:>14.2} {:>14.2} {:>14.2}",
            f.threads,
            f.read_noprefetch_mops,
            f.read_window32_mops,
            f.read_window64_mops,
            f.read_l2_window64_mops,
            f.rmw_noprefetch_mops,
            f.rmw_window64_mops,
            f.find_l2_window64_mops,
            f.insert_l2_window64_mops
        );
    }
    out
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

pub fn write_file(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Now as a file name stem, UTC `YYYYMMDD-HHMMSS` (`results/<stamp>.json`).
pub fn file_stamp() -> String {
    timestamps(unix_now()).1
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Seconds since the epoch as UTC `(YYYY-MM-DDTHH:MM:SSZ, YYYYMMDD-HHMMSS)`.
fn timestamps(unix_seconds: u64) -> (String, String) {
    let days = (unix_seconds / 86_400) as i64;
    let secs = unix_seconds % 86_400;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z"),
        format!("{year:04}{month:02}{day:02}-{h:02}{m:02}{s:02}"),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> Report {
        let figures = vec![
            Figures {
                threads: 1,
                read_noprefetch_mops: 50.0,
                read_window32_mops: 120.0,
                read_window64_mops: 130.0,
                read_l2_window64_mops: 0.0,
                rmw_noprefetch_mops: 10.0,
                rmw_window64_mops: 60.0,
                find_l2_window64_mops: 0.0,
                insert_l2_window64_mops: 0.0,
            },
            Figures {
                threads: 2,
                read_noprefetch_mops: 100.0,
                read_window32_mops: 230.0,
                read_window64_mops: 220.0,
                read_l2_window64_mops: 0.0,
                rmw_noprefetch_mops: 20.0,
                rmw_window64_mops: 110.0,
                find_l2_window64_mops: 0.0,
                insert_l2_window64_mops: 0.0,
            },
        ];
        Report {
            envelope: Envelope {
                schema: SCHEMA.into(),
                timestamp: timestamps(0).0,
                machine: crate::machine::machine(),
                floe_bench_version: "0".into(),
            },
            ceiling: CeilingReport::new(figures, 1 << 30, true),
            results: vec![Row {
                map: "floe, \"auto\"".into(),
                workload: "get".into(),
                dist: "zipf:0.99".into(),
                threads: 2,
                keys: 1 << 25,
                batch: 1,
                api: crate::measure::Api::Single,
                mops: 30.5,
                mops_min: 29.0,
                mops_max: 31.25,
                latency_ns: Some(Latency {
                    p50: 100,
                    p99: 300,
                    p999: 900,
                    p9999: 2000,
                    max: 50_000,
                }),
                bytes_per_key: Some(41.0),
                ceiling_fraction: 0.305,
                ceiling_mops: 100.0,
                rss_bytes_per_key: None,
                read_ratio: 1.0,
                prefill: 1.0,
                repeat: 3,
                ops: 60_000_000,
                lines_per_op: None,
            }],
            command: "floe-bench run".into(),
        }
    }

    #[test]
    fn json_round_trips_and_keeps_the_schema_names() {
        let report = sample();
        let json = report.to_json();
        assert_eq!(Report::from_json(&json).unwrap(), report);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        for field in [
            "read_noprefetch_mops",
            "read_window_mops",
            "rmw_window_mops",
        ] {
            assert!(value["ceiling"][field].is_number(), "{field}");
        }
        assert_eq!(value["ceiling"]["read_window_mops"], 230.0);
        assert_eq!(value["ceiling"]["threads"], 2);
        let row = &value["results"][0];
        for field in [
            "map",
            "workload",
            "dist",
            "threads",
            "keys",
            "batch",
            "mops",
            "mops_min",
            "mops_max",
            "latency_ns",
            "bytes_per_key",
            "ceiling_fraction",
        ] {
            assert!(!row[field].is_null(), "{field}");
        }
        for field in ["p50", "p99", "p999", "p9999", "max"] {
            assert!(row["latency_ns"][field].is_u64(), "{field}");
        }
        assert!(value["machine"]["cpu"].is_string());
        assert!(Report::from_json("{}").is_err());
    }

    #[test]
    fn csv_quotes_and_counts_columns() {
        let csv = sample().to_csv();
        let mut lines = csv.lines();
        let header = lines.next().unwrap();
        let row = lines.next().unwrap();
        assert!(
            row.starts_with("\"floe, \"\"auto\"\"\",get,zipf:0.99,2,"),
            "{row}"
        );
        assert_eq!(header.split(',').count(), 18);
        assert_eq!(
            row.replace("\"floe, \"\"auto\"\"\"", "x")
                .split(',')
                .count(),
            18
        );
    }

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(timestamps(0).0, "1970-01-01T00:00:00Z");
        assert_eq!(timestamps(951_782_400).0, "2000-02-29T00:00:00Z");
        assert_eq!(timestamps(1_795_304_999).1, "20261121-234959");
    }
}
