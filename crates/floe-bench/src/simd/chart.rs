//! The bubble chart of SimdHT-Bench's Fig. 5 as a self-contained SVG: one panel per table size,
//! key/payload size, pattern and thread count; layouts down, designs across (scalar, then
//! horizontal, vertical and hybrid by width); a bubble's area is its lookup rate per core, its
//! colour the approach. The best rate of a panel is ringed red, the best rate among tables that
//! reached the asked load factor green.

use super::engine::{LabReport, Row};
use crate::svg::Svg;

const COLUMNS: [(&str, Option<u32>); 8] = [
    ("scalar", None),
    ("horizontal", Some(128)),
    ("horizontal", Some(256)),
    ("horizontal", Some(512)),
    ("vertical", Some(256)),
    ("vertical", Some(512)),
    ("hybrid", Some(256)),
    ("hybrid", Some(512)),
];
const CELL_W: f64 = 78.0;
const CELL_H: f64 = 46.0;
const LABEL_W: f64 = 70.0;
const HEAD_H: f64 = 58.0;
const FOOT_H: f64 = 16.0;
const MAX_R: f64 = 20.0;

/// The column a row's bubble sits in (floe's backends sit with the horizontal designs: its
/// matching compares all lanes of a bin at once).
fn column(r: &Row) -> Option<usize> {
    let (approach, width) = match r.approach.as_str() {
        "floe scalar" => ("scalar", None),
        "floe avx2" => ("horizontal", Some(256)),
        "floe avx512" => ("horizontal", Some(512)),
        other => (other, r.width),
    };
    COLUMNS
        .iter()
        .position(|&(a, w)| a == approach && w == width)
}

fn colour(r: &Row) -> &'static str {
    match r.approach.as_str() {
        "scalar" => "#9a9a9a",
        "horizontal" => "#e8b100",
        "vertical" => "#1f77b4",
        "hybrid" => "#9467bd",
        _ => "#ff7f0e",
    }
}

type PanelKey = (u64, u32, u32, String, usize);

fn panel_key(r: &Row, size_of: &[(String, u32, u32, u64)]) -> PanelKey {
    // floe's table bytes differ from the cuckoo tables'; it joins the panel of its keys.
    let bytes = if r.layout == "floe" {
        size_of
            .iter()
            .find(|(_, k, v, _)| *k == r.key_bits && *v == r.payload_bits)
            .map_or(r.table_bytes, |s| s.3)
    } else {
        r.table_bytes
    };
    (
        bytes,
        r.key_bits,
        r.payload_bits,
        r.pattern.clone(),
        r.threads,
    )
}

/// The chart for `report`.
pub fn svg(report: &LabReport) -> String {
    let sizes: Vec<(String, u32, u32, u64)> = report
        .rows
        .iter()
        .filter(|r| r.layout != "floe")
        .map(|r| (r.layout.clone(), r.key_bits, r.payload_bits, r.table_bytes))
        .collect();
    let mut panels: Vec<(PanelKey, Vec<&Row>)> = Vec::new();
    for r in &report.rows {
        let key = panel_key(r, &sizes);
        match panels.iter_mut().find(|(k, _)| *k == key) {
            Some((_, rows)) => rows.push(r),
            None => panels.push((key, vec![r])),
        }
    }
    let used: Vec<usize> = (0..COLUMNS.len())
        .filter(|&c| report.rows.iter().any(|r| column(r) == Some(c)))
        .collect();
    let panel_w = LABEL_W + CELL_W * used.len() as f64 + 10.0;
    let heights: Vec<f64> = panels
        .iter()
        .map(|(_, rows)| {
            let layouts = distinct(rows.iter().map(|r| r.layout.clone()));
            HEAD_H + CELL_H * layouts.len() as f64 + FOOT_H
        })
        .collect();
    let per_line = 2usize;
    let lines = panels.len().div_ceil(per_line);
    let line_h: Vec<f64> = (0..lines)
        .map(|l| {
            heights[l * per_line..((l + 1) * per_line).min(panels.len())]
                .iter()
                .cloned()
                .fold(0.0, f64::max)
        })
        .collect();
    let width = panel_w * per_line.min(panels.len()).max(1) as f64;
    let title_h = 46.0;
    let legend_h = 28.0;
    let height = title_h + line_h.iter().sum::<f64>() + legend_h;
    let mut svg = Svg::new(
        width,
        height,
        11,
        &format!("SIMD layout lab: {}", report.study),
    );
    svg.text(
        10.0,
        36.0,
        r##"fill="#555""##,
        &format!(
            "Million lookups/s per core (bubble area); hit rate {:.0}%; {}",
            100.0 * report.hit_rate,
            report.envelope.machine.cpu
        ),
    );
    let mut y0 = title_h;
    for (line, h) in line_h.iter().enumerate() {
        for p in 0..per_line {
            let Some((key, rows)) = panels.get(line * per_line + p) else {
                break;
            };
            let x0 = p as f64 * panel_w;
            draw_panel(&mut svg, x0, y0, key, rows, &used);
        }
        y0 += h;
    }
    let legend = [
        (r##"fill="#9a9a9a""##, "scalar"),
        (r##"fill="#e8b100""##, "horizontal"),
        (r##"fill="#1f77b4""##, "vertical"),
        (r##"fill="#9467bd""##, "hybrid"),
        (r##"fill="#ff7f0e""##, "floe bins"),
        (
            r##"fill="none" stroke="#d62728" stroke-width="3""##,
            "best rate",
        ),
        (
            r##"fill="none" stroke="#2ca02c" stroke-width="3""##,
            "best rate at the asked load factor",
        ),
    ];
    let mut x = 10.0;
    for (attrs, name) in legend {
        svg.circle((x + 6.0, y0 + 12.0), 6.0, attrs, None);
        svg.text(x + 16.0, y0 + 16.0, "", name);
        x += 30.0 + 7.0 * name.len() as f64;
    }
    svg.finish()
}

fn distinct(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

fn draw_panel(svg: &mut Svg, x0: f64, y0: f64, key: &PanelKey, rows: &[&Row], used: &[usize]) {
    let (bytes, k, v, pattern, threads) = key;
    let layouts = distinct(rows.iter().map(|r| r.layout.clone()));
    svg.text(
        x0 + 10.0,
        y0 + 16.0,
        r#"font-weight="bold""#,
        &format!(
            "{} table, (K,V) = ({k},{v}), {pattern}, {threads} thread{}",
            super::engine::human_bytes(*bytes),
            if *threads == 1 { "" } else { "s" }
        ),
    );
    for (i, &c) in used.iter().enumerate() {
        let (approach, width) = COLUMNS[c];
        let label = match width {
            Some(w) => format!("{} {w}", &approach[..3]),
            None => approach.to_string(),
        };
        svg.text(
            x0 + LABEL_W + CELL_W * (i as f64 + 0.5),
            y0 + HEAD_H - 12.0,
            r##"text-anchor="middle" fill="#333""##,
            &label,
        );
    }
    let max = rows.iter().map(|r| r.mlps).fold(0.0, f64::max).max(1e-9);
    let best = rows
        .iter()
        .max_by(|a, b| a.mlps.total_cmp(&b.mlps))
        .map(|r| (*r) as *const Row);
    let best_full = rows
        .iter()
        .filter(|r| r.layout != "floe" && r.load_factor + 0.005 >= r.asked_load_factor)
        .max_by(|a, b| a.mlps.total_cmp(&b.mlps))
        .map(|r| (*r) as *const Row);
    for (j, layout) in layouts.iter().enumerate() {
        let cy = y0 + HEAD_H + CELL_H * (j as f64 + 0.5);
        let lf = rows
            .iter()
            .find(|r| &r.layout == layout)
            .map_or(0.0, |r| r.load_factor);
        let name = if layout == "floe" {
            "floe bin"
        } else {
            layout.as_str()
        };
        svg.text(x0 + 8.0, cy - 2.0, "", name);
        svg.text(
            x0 + 8.0,
            cy + 10.0,
            r##"fill="#777" font-size="9""##,
            &format!("LF {:.0}%", 100.0 * lf),
        );
        svg.line(
            (x0 + LABEL_W, cy),
            (x0 + LABEL_W + CELL_W * used.len() as f64, cy),
            r##"stroke="#eee""##,
        );
        for r in rows.iter().filter(|r| &r.layout == layout) {
            let Some(c) = column(r) else { continue };
            let Some(i) = used.iter().position(|&u| u == c) else {
                continue;
            };
            let cx = x0 + LABEL_W + CELL_W * (i as f64 + 0.5);
            let radius = (MAX_R * (r.mlps / max).sqrt()).max(2.0);
            svg.circle(
                (cx, cy),
                radius,
                &format!(r#"fill="{}" fill-opacity="0.8""#, colour(r)),
                None,
            );
            let this = (*r) as *const Row;
            if Some(this) == best {
                svg.circle(
                    (cx, cy),
                    radius + 3.0,
                    r##"fill="none" stroke="#d62728" stroke-width="3""##,
                    None,
                );
            }
            if Some(this) == best_full {
                svg.circle(
                    (cx, cy),
                    radius + if Some(this) == best { 6.5 } else { 3.0 },
                    r##"fill="none" stroke="#2ca02c" stroke-width="2.5""##,
                    None,
                );
            }
            svg.text(
                cx,
                cy + 4.0,
                r#"text-anchor="middle" font-size="10""#,
                &format!("{:.0}", r.mlps),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::engine::Row;

    fn row(layout: &str, approach: &str, width: Option<u32>, mlps: f64, lf: f64) -> Row {
        Row {
            layout: layout.into(),
            ways: 2,
            slots: 4,
            key_bits: 32,
            payload_bits: 32,
            table_bytes: 1 << 20,
            load_factor: lf,
            asked_load_factor: 0.9,
            pattern: "uniform".into(),
            threads: 2,
            approach: approach.into(),
            width,
            per_vector: width.map(|_| 1),
            mlps,
            mlps_min: mlps,
            mlps_max: mlps,
            scalar_mlps: 10.0,
            speedup: mlps / 10.0,
            hit_rate: 0.9,
        }
    }

    #[test]
    fn bubbles_and_the_two_rings() {
        let report = LabReport {
            envelope: crate::report::Envelope::now(super::super::engine::SCHEMA),
            study: "case 1(a)".into(),
            cpu_widths: vec![128, 256, 512],
            hit_rate: 0.9,
            seconds: 0.1,
            repeat: 1,
            listings: vec![],
            tables: vec![],
            rows: vec![
                row("(2,1)", "scalar", None, 10.0, 0.5),
                row("(2,1)", "vertical", Some(256), 40.0, 0.5),
                row("(2,4)", "scalar", None, 12.0, 0.9),
                row("(2,4)", "horizontal", Some(256), 30.0, 0.9),
                row("floe", "floe avx512", Some(512), 20.0, 0.6),
            ],
        };
        let svg = svg(&report);
        assert_eq!(svg.matches("<circle").count(), 5 + 2 + 7);
        assert!(svg.contains(r##"stroke="#d62728""##) && svg.contains(r##"stroke="#2ca02c""##));
        assert!(svg.contains(">40<") && svg.contains(">floe bin<"));
        assert!(svg.contains("ver 256") && svg.contains("hor 512"));
        assert!(!svg.contains("hyb 256"));
    }
}
