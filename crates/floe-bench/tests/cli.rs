//! The command line end to end: bad flags exit 2 with a message, tiny runs write reports that
//! follow the JSON schema, CSV and SVG files appear.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe-bench"))
        .args(args)
        .output()
        .expect("floe-bench runs")
}

/// Run floe-bench, which must succeed; its standard output.
fn bench_ok(args: &[&str]) -> String {
    let out = bench(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run floe-bench with flags it must refuse: exit code 2 and a message naming `message`.
fn refused(args: &[&str], message: &str) {
    let out = bench(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(message), "{args:?}: {stderr}");
}

/// A JSON report written by floe-bench.
fn read_report(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("floe-bench-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The title text of a chart (the first bold text element).
fn svg_title(svg: &str) -> String {
    let start = svg.find("font-weight=\"bold\">").unwrap() + "font-weight=\"bold\">".len();
    let end = start + svg[start..].find('<').unwrap();
    format!(">{}<", &svg[start..end])
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    for (args, message) in [
        (&["run", "--workload", "nope"][..], "invalid value 'nope'"),
        (&["run", "--keys", "2^"], "not a count"),
        (&["run", "--keys", "100"], "at least 1024"),
        (&["run", "--dist", "zipf:1.5"], "THETA"),
        (&["run", "--dist", "hot:0:50"], "at least one key"),
        (&["run", "--threads", "0"], "at least 1"),
        (&["run", "--seconds", "1", "--ops", "100"], "not both"),
        (&["run", "--seconds", "0"], "positive"),
        (&["run", "--batch", "0"], "at least 1"),
        (&["run", "--batch", "999"], "at most 128"),
        (
            &["run", "--workload", "insdel", "--api", "bare"],
            "all-get workloads",
        ),
        (
            &["run", "--api", "single", "--batch", "4"],
            "--api batch or pipeline",
        ),
        (
            &["sweep", "--param", "keys", "--values", "12"],
            "at least 1024",
        ),
        (&["sweep", "--param", "theta", "--values", "2"], "THETA"),
        (&["run", "--repeat", "0"], "at least 1"),
        (&["run", "--workload", "fill", "--seconds", "1"], "--ops"),
        (
            &["run", "--workload", "insdel", "--dist", "zipf:0.5"],
            "--dist",
        ),
        (
            &["run", "--maps", "hashbrown", "--threads", "2"],
            "1 thread only",
        ),
        (&["run", "--prefill", "1.5"], "--prefill"),
        (&["run", "--maps", "nomap"], "invalid value 'nomap'"),
        (&["ceiling", "--bytes", "1K"], "at least 1M"),
        (&["suite", "--keys", "12x"], "not a count"),
        (&["bustle", "--keys", "1000"], "power of two"),
        (
            &["bustle", "--workloads", "get"],
            "not a conc-map-bench mix",
        ),
        (&["bustle", "--repeat", "0"], "positive"),
        (&["bustle", "--operations", "nan"], "positive"),
        (&["bustle", "--threads", "0"], "--threads"),
        (&["dense", "--repeat", "0"], "at least 1"),
        (&["dense", "--seconds", "0"], "positive"),
        (&["dense", "--threads", "0"], "at least 1"),
        (
            &[
                "dense-population-child",
                "--layout",
                "sparse",
                "--keys",
                "1K",
                "--threads",
                "1",
            ],
            "invalid value 'sparse'",
        ),
        (
            &[
                "dense-population-child",
                "--layout",
                "dense",
                "--keys",
                "1K",
                "--threads",
                "0",
            ],
            "--threads",
        ),
        (
            &["plot", "/nonexistent.json", "--out", "x.svg"],
            "nonexistent",
        ),
    ] {
        refused(args, message);
    }
}

#[test]
fn a_tiny_run_writes_a_report_in_the_schema() {
    let dir = scratch("run");
    let (json, csv, svg) = (dir.join("r.json"), dir.join("r.csv"), dir.join("r.svg"));
    bench_ok(&[
        "run",
        "--workload",
        "putheavy",
        "--keys",
        "4096",
        "--seconds",
        "0.05",
        "--repeat",
        "2",
        "--threads",
        "1,2",
        "--maps",
        "floe,dashmap",
        "--dist",
        "zipf:0.9",
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let report: serde_json::Value = read_report(&json);
    for field in [
        "read_noprefetch_mops",
        "read_window_mops",
        "rmw_window_mops",
    ] {
        assert!(report["ceiling"][field].as_f64().unwrap() > 0.0, "{field}");
    }
    assert!(report["machine"]["cores"].as_u64().unwrap() >= 1);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 4, "2 maps x 2 thread counts");
    for row in results {
        assert_eq!(row["workload"], "putheavy");
        assert_eq!(row["dist"], "zipf:0.9");
        assert_eq!(row["keys"], 4096);
        assert_eq!(row["batch"], 1);
        let (mops, min, max) = (
            row["mops"].as_f64().unwrap(),
            row["mops_min"].as_f64().unwrap(),
            row["mops_max"].as_f64().unwrap(),
        );
        assert!(min > 0.0 && min <= mops && mops <= max, "{row}");
        let fraction = row["ceiling_fraction"].as_f64().unwrap();
        assert!(fraction > 0.0 && fraction.is_finite(), "{row}");
        let latency = &row["latency_ns"];
        let p = |k: &str| latency[k].as_u64().unwrap();
        assert!(p("p50") <= p("p99") && p("p99") <= p("p999"), "{row}");
        assert!(p("p999") <= p("p9999") && p("p9999") <= p("max"), "{row}");
        assert!(row["bytes_per_key"].as_f64().unwrap() > 8.0, "{row}");
    }
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap().lines().count(),
        5,
        "header and 4 rows"
    );
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg_text.starts_with("<svg")
            && svg_text.contains("dashmap")
            && svg_text.trim_end().ends_with("</svg>")
    );
    // The chart can be drawn again from the JSON alone.
    let again = dir.join("again.svg");
    bench_ok(&[
        "plot",
        json.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
        "--title",
        "t",
    ]);
    assert_eq!(
        std::fs::read_to_string(&again)
            .unwrap()
            .replace(">t<", "><"),
        svg_text.replace(&svg_title(&svg_text), "><")
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_bare_api_runs_the_batched_loop_beside_its_floor_on_every_floe_kind() {
    let dir = scratch("bare");
    let json = dir.join("r.json");
    bench_ok(&[
        "run",
        "--workload",
        "get",
        "--keys",
        "4096",
        "--repeat",
        "1",
        "--seconds",
        "0.05",
        "--threads",
        "1",
        "--maps",
        "floe,floe-fixed,floe-any",
        "--batch",
        "8",
        "--api",
        "bare",
        "--memory",
        "off",
        "--json",
        json.to_str().unwrap(),
    ]);
    let report = read_report(&json);
    let rows: Vec<(&str, &str)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["map"].as_str().unwrap(), row["api"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [
            ("floe", "batch"),
            ("floe", "bare"),
            ("floe-fixed", "batch"),
            ("floe-fixed", "bare"),
            ("floe-any", "batch")
        ],
        "one row per loop and map: every floe kind runs batched (the any-key map has no bare loop)"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A fill through floe's batches (the typed `insert_new_each` for `FlatMap`s, `MapRequest`s
/// for the any-key map) and its pipeline: every answer is checked by the run, which fails on
/// a wrong one.
#[test]
fn fill_runs_batched_and_pipelined_on_every_floe_kind() {
    let dir = scratch("fill-batched");
    let json = dir.join("r.json");
    for api in ["batch", "pipeline"] {
        bench_ok(&[
            "run",
            "--workload",
            "fill",
            "--keys",
            "20000",
            "--repeat",
            "1",
            "--threads",
            "2",
            "--maps",
            "floe,floe-dense,floe-any",
            "--api",
            api,
            "--batch",
            "16",
            "--memory",
            "off",
            "--json",
            json.to_str().unwrap(),
        ]);
        let report = read_report(&json);
        let rows = report["results"].as_array().unwrap();
        assert_eq!(rows.len(), 3, "{api}: one row per map");
        for row in rows {
            assert_eq!(row["api"].as_str(), Some(api));
            assert!(row["mops"].as_f64().unwrap() > 0.0);
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn run_once_workloads_and_the_ceiling_run() {
    let dir = scratch("once");
    let json = dir.join("r.json");
    for workload in ["exchange", "fill"] {
        bench_ok(&[
            "run",
            "--workload",
            workload,
            "--keys",
            "4096",
            "--repeat",
            "1",
            "--maps",
            "floe,scc",
            "--memory",
            "off",
            "--latency",
            "off",
            "--json",
            json.to_str().unwrap(),
        ]);
        let report: serde_json::Value = read_report(&json);
        let rows = report["results"].as_array().unwrap();
        assert!(!rows.is_empty());
        for row in rows {
            assert!(row["latency_ns"].is_null(), "sampling was off");
            assert!(row["mops"].as_f64().unwrap() > 0.0);
        }
    }
    let stdout = bench_ok(&[
        "ceiling",
        "--bytes",
        "4M",
        "--seconds",
        "0.05",
        "--repeat",
        "1",
        "--threads",
        "1",
    ]);
    assert!(stdout.contains("rmw, pf 64"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_simd_lab_refuses_bad_requests_with_a_reason() {
    for (args, message) in [
        (&["simd", "--layouts", "5x1"][..], "N = 2..4"),
        (&["simd", "--layouts", "2x3"], "m = 1, 2, 4 or 8"),
        (&["simd", "--kv", "8,32"], "16, 32 or 64"),
        (&["simd", "--table-size", "2G"], "4K to 1G"),
        (&["simd", "--case", "2", "--kv", "32,32"], "either the case"),
        (&["simd", "--load-factor", "1.5"], "(0, 1]"),
        (&["simd", "--hit-rate", "1.5"], "[0, 1]"),
        (&["simd", "--pattern", "zipf:2"], "THETA"),
        (&["simd", "--widths", "64"], "128, 256 or 512"),
        (&["simd", "--repeat", "0"], "at least 1"),
        (
            &[
                "simd",
                "--layouts",
                "2x8",
                "--kv",
                "64,64",
                "--approach",
                "horizontal",
            ],
            "does not fit in",
        ),
        (
            &["simd", "--layouts", "3x1", "--widths", "128"],
            "gathers start with AVX2",
        ),
    ] {
        refused(args, message);
    }
}

#[test]
fn the_simd_lab_lists_designs_and_runs_a_tiny_study() {
    let listing = bench_ok(&["simd", "--list"]);
    assert!(listing.contains("*(k,v) = (32, 32)"), "{listing}");
    assert!(listing.contains("*(2,4) -> V-Hor"), "{listing}");
    let dir = scratch("simd");
    let (json, svg) = (dir.join("lab.json"), dir.join("lab.svg"));
    let text = bench_ok(&[
        "simd",
        "--layouts",
        "3x1,2x4",
        "--table-size",
        "64K",
        "--seconds",
        "0.01",
        "--repeat",
        "2",
        "--pattern",
        "uniform,zipf:0.9",
        "--threads",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(text.contains("Mlookups/s/core"), "{text}");
    let report = read_report(&json);
    assert_eq!(report["schema"], "floe-bench-simd/1");
    assert_eq!(report["tables"].as_array().unwrap().len(), 2);
    let rows = report["rows"].as_array().unwrap();
    for pattern in ["uniform", "zipf:0.9"] {
        for layout in ["(3,1)", "(2,4)", "floe"] {
            let scalar = if layout == "floe" {
                "floe scalar"
            } else {
                "scalar"
            };
            assert!(
                rows.iter().any(|r| r["layout"] == layout
                    && r["pattern"] == pattern
                    && r["approach"] == scalar),
                "{layout} {pattern}"
            );
        }
    }
    for row in rows {
        let (mlps, min, max) = (
            row["mlps"].as_f64().unwrap(),
            row["mlps_min"].as_f64().unwrap(),
            row["mlps_max"].as_f64().unwrap(),
        );
        assert!(min > 0.0 && min <= mlps && mlps <= max, "{row}");
        let hit = row["hit_rate"].as_f64().unwrap();
        assert!((0.8..1.0).contains(&hit), "{row}");
        assert_eq!(row["threads"], 1);
    }
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.starts_with("<svg") && svg_text.trim_end().ends_with("</svg>"));
    assert!(svg_text.contains("zipf:0.9"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn growth_workloads_run_tiny_and_refuse_bad_flags() {
    for (args, message) in [
        (
            &[
                "run",
                "--workload",
                "population",
                "--keys",
                "1K",
                "--initial-slots",
                "2^16",
            ][..],
            "at least --initial-slots",
        ),
        (
            &["run", "--workload", "grow-read", "--threads", "1"],
            "at least 2 threads",
        ),
        (
            &["run", "--workload", "population", "--timeline", "0"],
            "positive",
        ),
        (
            &[
                "run",
                "--workload",
                "grow-read",
                "--threads",
                "2",
                "--readers",
                "2",
            ],
            "fewer than the threads",
        ),
    ] {
        refused(args, message);
    }
    let dir = scratch("grow");
    let (json, svg) = (dir.join("g.json"), dir.join("g.svg"));
    for workload in ["population", "grow-read"] {
        let text = bench_ok(&[
            "run",
            "--workload",
            workload,
            "--keys",
            "64K",
            "--initial-slots",
            "1K",
            "--threads",
            "2",
            "--repeat",
            "1",
            "--timeline",
            "1",
            "--maps",
            "floe,floe-blocking,papaya",
            "--json",
            json.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ]);
        assert!(text.contains(workload), "{text}");
        let report = read_report(&json);
        assert_eq!(report["schema"], "floe-bench-growth/1");
        let rows = report["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        for row in rows {
            assert!(row["insert_mops"].as_f64().unwrap() > 0.0, "{row}");
            assert!(
                !row["insert_timeline"].as_array().unwrap().is_empty(),
                "{row}"
            );
            let latency = &row["insert_latency_ns"];
            assert!(latency["p9999"].as_u64().unwrap() <= latency["max"].as_u64().unwrap());
            if workload == "grow-read" {
                assert!(row["get_mops_steady"].as_f64().unwrap() > 0.0, "{row}");
            }
        }
        if workload == "population" {
            assert_eq!(report["triggers"].as_array().unwrap().len(), 3);
        }
        let chart = std::fs::read_to_string(&svg).unwrap();
        assert!(chart.starts_with("<svg") && chart.contains("<polyline"));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bustle_runs_the_conc_map_bench_mixes_on_every_map() {
    let out = bench_ok(&[
        "bustle",
        "--keys",
        "2^12",
        "--threads",
        "1,2",
        "--repeat",
        "1",
        "--maps",
        "floe,floe-fixed,papaya,scc,dashmap,leapfrog",
    ]);
    for workload in ["readheavy", "exchange", "rapidgrow"] {
        for map in ["floe", "floe-fixed", "papaya", "scc", "dashmap", "leapfrog"] {
            for threads in [1, 2] {
                assert!(
                    out.lines().any(|l| {
                        let fields: Vec<&str> = l.split_whitespace().collect();
                        fields.len() >= 4
                            && fields[0] == workload
                            && fields[1] == threads.to_string()
                            && fields[2] == map
                            && fields[3].parse::<f64>().is_ok_and(|m| m > 0.0)
                    }),
                    "no {workload} row for {map} at {threads} threads:\n{out}"
                );
            }
        }
    }
}

#[test]
fn the_dense_comparison_runs_both_layouts_and_each_population_in_a_process_of_its_own() {
    let out = bench_ok(&[
        "dense",
        "--keys",
        "2^17",
        "--repeat",
        "2",
        "--seconds",
        "0.05",
        "--threads",
        "2",
    ]);
    for row in [
        "| get |",
        "| insdel |",
        "| putheavy |",
        "| population (from 65536 keys) |",
    ] {
        assert!(out.contains(row), "no '{row}' row in:\n{out}");
    }
    // Two runs of each layout, every one a positive rate.
    let runs = out
        .lines()
        .find(|line| line.starts_with("population runs"))
        .unwrap_or_else(|| panic!("no population runs line in:\n{out}"));
    let rates: Vec<f64> = runs
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|word| word.parse().ok())
        .collect();
    assert_eq!(rates.len(), 4, "{runs}");
    assert!(rates.iter().all(|&rate| rate > 0.0), "{runs}");
    // A child on its own prints its rate and the space its map ends at.
    let child = bench_ok(&[
        "dense-population-child",
        "--layout",
        "dense",
        "--keys",
        "2^17",
        "--threads",
        "2",
    ]);
    let space: f64 = child
        .split_whitespace()
        .find_map(|word| word.strip_prefix("space=")?.parse().ok())
        .unwrap_or_else(|| panic!("no space in '{child}'"));
    assert!(space > 0.0 && space < 1.0, "{child}");
}

/// `join` refuses flags that make no join (exit 2), and a tiny join of every kind, unique and
/// duplicate keys with absent ones, runs every engine to the same answers (floe-bench exits 1
/// if two differ) and writes the relations and answers for DuckDB.
#[test]
fn joins_agree_across_engines_and_refuse_bad_flags() {
    for (args, message) in [
        (&["join", "--build", "0"][..], "must be at least 1"),
        (
            &["join", "--build", "8", "--duplicates", "9"],
            "R needs at least one key",
        ),
        (&["join", "--miss", "1.5"], "--miss must be in [0, 1]"),
        (
            &["join", "--build", "2^30", "--probe-factor", "16"],
            "at most 2^32",
        ),
        (&["join", "--threads", "0"], "--threads must be at least 1"),
        (&["join", "--dist", "zipf:2"], "THETA must be in"),
        (&["join", "--engines", "nosuch"], "possible values"),
    ] {
        refused(args, message);
    }
    let dir = scratch("join");
    let out = bench_ok(&[
        "join",
        "--build",
        "4096",
        "--duplicates",
        "3",
        "--miss",
        "0.25",
        "--dist",
        "zipf:0.9",
        "--repeat",
        "2",
        "--no-ceiling",
        "--dump",
        dir.to_str().unwrap(),
    ]);
    for engine in ["floe-batched", "floe", "hashbrown"] {
        for join in ["inner", "semi", "anti"] {
            assert!(
                out.lines()
                    .any(|line| line.starts_with(engine) && line.contains(join)),
                "{engine} {join}: {out}"
            );
        }
    }
    let answers = std::fs::read_to_string(dir.join("answers.txt")).unwrap();
    let rows = |kind: &str| -> u64 {
        let line = answers.lines().find(|l| l.starts_with(kind)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    // Every probe tuple is in the semi join or the anti join, never both; a quarter of them
    // have keys R does not have.
    let probes = 4096 * 16;
    assert_eq!(rows("Semi") + rows("Anti"), probes, "{answers}");
    assert!(
        rows("Anti") > probes / 8 && rows("Anti") < probes / 2,
        "{answers}"
    );
    assert!(rows("Inner") >= rows("Semi"), "{answers}");
    assert_eq!(
        std::fs::metadata(dir.join("s_keys.u64")).unwrap().len(),
        probes * 8
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `oltp` refuses flags that make no run (exit 2), and a tiny Smallbank and TATP on every
/// engine run, check their invariants (floe-bench exits 1 if one fails) and report each.
#[test]
fn oltp_runs_tiny_with_its_invariants_and_refuses_bad_flags() {
    for (args, message) in [
        (
            &["oltp", "--accounts", "1"][..],
            "Amalgamate and SendPayment need two",
        ),
        (
            &["oltp", "--hotspot", "1"],
            "must be 0 (uniform) or 2 to --accounts",
        ),
        (
            &["oltp", "--accounts", "100", "--hotspot", "101"],
            "must be 0 (uniform) or 2 to --accounts",
        ),
        (
            &["oltp", "--subscribers", "0"],
            "--subscribers 0 is out of range",
        ),
        (&["oltp", "--threads", "0"], "--threads must be 1 to 1024"),
        (
            &["oltp", "--seconds", "0"],
            "--seconds 0 must be in (0, 3600]",
        ),
        (&["oltp", "--seconds", "NaN"], "must be in (0, 3600]"),
        (&["oltp", "--repeat", "0"], "--repeat must be at least 1"),
        (&["oltp", "--engines", "nosuch"], "possible values"),
    ] {
        refused(args, message);
    }
    let out = bench_ok(&[
        "oltp",
        "--accounts",
        "500",
        "--hotspot",
        "8",
        "--subscribers",
        "300",
        "--threads",
        "2",
        "--seconds",
        "0.05",
        "--repeat",
        "2",
    ]);
    for benchmark in ["Smallbank, 500 customers", "TATP, 300 subscribers"] {
        assert!(
            out.lines().any(|line| line.starts_with(benchmark)
                && line.contains("invariants hold on every engine")),
            "{benchmark}: {out}"
        );
    }
    for engine in ["floe", "dashmap", "papaya"] {
        assert_eq!(
            out.lines()
                .filter(|line| line.starts_with(&format!("{engine} ")))
                .count(),
            2,
            "a row per benchmark for {engine}: {out}"
        );
    }
    assert!(
        out.contains("SendPayment") && out.contains("InsertCallForwarding"),
        "{out}"
    );
}

/// `cache` refuses flags that make no comparison (exit 2), and a tiny run of every cache
/// prints the three measurements (hit ratios, throughput, memory per entry).
#[test]
fn the_cache_comparison_refuses_bad_flags_and_runs_tiny() {
    for (args, message) in [
        (&["cache", "--keys", "10"][..], "at least 1000"),
        (&["cache", "--traces", "nosuch"], "unknown trace"),
        (&["cache", "--rounds", "0"], "at least one"),
        (&["cache", "--threads", "0"], "at least one"),
        (&["cache", "--requests", "0"], "at least one"),
        (&["cache", "--memory-entries", "5"], "at least 1000"),
        (&["cache", "--keys", "5000000000"], "at most 2^32"),
        (&["cache", "--caches", "nosuch"], "possible values"),
    ] {
        refused(args, message);
    }
    let out = bench_ok(&[
        "cache",
        "--keys",
        "2000",
        "--rounds",
        "1",
        "--throughput-keys",
        "2000",
        "--requests",
        "2000",
        "--memory-entries",
        "2000",
    ]);
    for heading in ["## Hit ratio", "Throughput", "emory"] {
        assert!(out.contains(heading), "{heading}: {out}");
    }
    // Capacities are powers of two (10% of 2000 keys: 128 entries, of a key space of 1280).
    assert!(out.contains("| zipf | 10% (128 of 1280) |"), "{out}");
    assert!(out.contains("| zipf | 50% (512 of 1024) |"), "{out}");
}
