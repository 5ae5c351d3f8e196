//! The thread-scaling chart as a self-contained SVG: one panel per workload (and distribution),
//! throughput against threads, one line per map, and the matching ceiling dashed.

use std::fmt::Write as _;

use crate::report::Report;

const PALETTE: [&str; 10] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f",
];
const PANEL_W: f64 = 340.0;
const PANEL_H: f64 = 260.0;
const MARGIN_L: f64 = 56.0;
const MARGIN_B: f64 = 40.0;
const MARGIN_T: f64 = 30.0;
const LEGEND_H: f64 = 24.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis maximum at or above `v` (1, 2 or 5 times a power of ten).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * magnitude)
}

/// An axis label: whole numbers as such, others (12.5, 0.25) with the digits they need.
fn tick_label(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let text = format!("{v:.2}");
        text.trim_end_matches('0').to_string()
    }
}

fn unique<T: PartialEq + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// The chart for `report`.
pub fn svg(report: &Report, title: &str) -> String {
    let panels: Vec<(String, String)> = unique(
        report
            .results
            .iter()
            .map(|r| (r.workload.clone(), r.dist.clone())),
    );
    let maps: Vec<String> = unique(report.results.iter().map(|r| r.map.clone()));
    let mut threads: Vec<usize> = unique(report.results.iter().map(|r| r.threads));
    threads.sort_unstable();
    let columns = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(columns).max(1);
    let width = columns as f64 * (PANEL_W + MARGIN_L) + 20.0;
    let legend_rows = maps.len().div_ceil(4) as f64;
    let top = 34.0 + legend_rows * LEGEND_H;
    let height = top + rows as f64 * (PANEL_H + MARGIN_B + MARGIN_T);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    for (i, map) in maps.iter().enumerate() {
        let x = 10.0 + (i % 4) as f64 * 250.0;
        let y = 34.0 + (i / 4) as f64 * LEGEND_H;
        let color = PALETTE[i % PALETTE.len()];
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            x + 24.0,
            x + 30.0,
            y + 4.0,
            escape(map)
        );
    }
    for (p, (workload, dist)) in panels.iter().enumerate() {
        let ox = 10.0 + (p % columns) as f64 * (PANEL_W + MARGIN_L) + MARGIN_L;
        let oy = top + (p / columns) as f64 * (PANEL_H + MARGIN_B + MARGIN_T) + MARGIN_T;
        let rows_here: Vec<_> = report
            .results
            .iter()
            .filter(|r| &r.workload == workload && &r.dist == dist)
            .collect();
        let y_max = nice_ceiling(
            rows_here
                .iter()
                .map(|r| r.mops_max.max(r.ceiling_mops))
                .fold(0.0, f64::max)
                * 1.05,
        );
        let x_of = |t: usize| {
            let i = threads.iter().position(|&x| x == t).unwrap_or(0) as f64;
            let n = threads.len().max(2) as f64 - 1.0;
            ox + 20.0 + i / n * (PANEL_W - 40.0)
        };
        let y_of = |v: f64| oy + PANEL_H - v / y_max * PANEL_H;
        let _ = writeln!(
            out,
            r##"<rect x="{ox}" y="{oy}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#999"/><text x="{}" y="{}" font-weight="bold" text-anchor="middle">{} ({})</text>"##,
            ox + PANEL_W / 2.0,
            oy - 8.0,
            escape(workload),
            escape(dist)
        );
        for tick in 0..=4 {
            let v = y_max * f64::from(tick) / 4.0;
            let y = y_of(v);
            let _ = writeln!(
                out,
                r##"<line x1="{ox}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                ox + PANEL_W,
                ox - 4.0,
                y + 4.0,
                tick_label(v)
            );
        }
        for &t in &threads {
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{t}</text>"#,
                x_of(t),
                oy + PANEL_H + 16.0
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">threads</text><text transform="translate({},{}) rotate(-90)" text-anchor="middle">Mops/s</text>"#,
            ox + PANEL_W / 2.0,
            oy + PANEL_H + 32.0,
            ox - 40.0,
            oy + PANEL_H / 2.0
        );
        // The matching ceiling of this panel (one per thread count).
        let mut ceiling: Vec<(usize, f64)> = unique(
            rows_here
                .iter()
                .map(|r| (r.threads, r.ceiling_mops.to_bits())),
        )
        .into_iter()
        .map(|(t, bits)| (t, f64::from_bits(bits)))
        .collect();
        ceiling.sort_by_key(|&(t, _)| t);
        ceiling.dedup_by_key(|&mut (t, _)| t);
        let points: Vec<String> = ceiling
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", x_of(t), y_of(v)))
            .collect();
        if !points.is_empty() {
            let _ = writeln!(
                out,
                r##"<polyline points="{}" fill="none" stroke="#444" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}" fill="#444" text-anchor="end">ceiling</text>"##,
                points.join(" "),
                ox + PANEL_W - 4.0,
                y_of(ceiling.last().map_or(0.0, |c| c.1)) - 4.0
            );
        }
        for (m, map) in maps.iter().enumerate() {
            let color = PALETTE[m % PALETTE.len()];
            let mut line: Vec<_> = rows_here.iter().filter(|r| &r.map == map).collect();
            line.sort_by_key(|r| r.threads);
            let points: Vec<String> = line
                .iter()
                .map(|r| format!("{:.1},{:.1}", x_of(r.threads), y_of(r.mops)))
                .collect();
            if points.len() > 1 {
                let _ = writeln!(
                    out,
                    r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                    points.join(" ")
                );
            }
            for r in line {
                let (x, y) = (x_of(r.threads), y_of(r.mops));
                let _ = writeln!(
                    out,
                    r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{color}"/><circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{color}"><title>{}: {:.2} Mops/s ({:.3} of ceiling)</title></circle>"#,
                    y_of(r.mops_min),
                    y_of(r.mops_max),
                    escape(map),
                    r.mops,
                    r.ceiling_fraction
                );
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(101.0), 200.0);
        assert_eq!(nice_ceiling(20.0), 20.0);
        assert_eq!(escape("a<b&\"c\""), "a&lt;b&amp;&quot;c&quot;");
        assert_eq!(tick_label(12.5), "12.5");
        assert_eq!(tick_label(37.5), "37.5");
        assert_eq!(tick_label(50.0), "50");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(100.0), "100");
        assert_eq!(tick_label(200.0), "200");
    }
}
