//! The thread-scaling chart as a self-contained SVG: one panel per workload (and distribution),
//! throughput against threads, one line per map, and the matching ceiling dashed.

use crate::{
    report::Report,
    svg::{nice_ceiling, unique, Svg, PALETTE},
};

const PANEL_W: f64 = 340.0;
const PANEL_H: f64 = 260.0;
const MARGIN_L: f64 = 56.0;
const MARGIN_B: f64 = 40.0;
const MARGIN_T: f64 = 30.0;
const LEGEND_H: f64 = 24.0;

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
    let mut svg = Svg::new(width, height, 12, title);
    for (i, map) in maps.iter().enumerate() {
        let x = 10.0 + (i % 4) as f64 * 250.0;
        let y = 34.0 + (i / 4) as f64 * LEGEND_H;
        let color = PALETTE[i % PALETTE.len()];
        svg.line(
            (x, y),
            (x + 24.0, y),
            &format!(r#"stroke="{color}" stroke-width="3""#),
        );
        svg.text(x + 30.0, y + 4.0, "", map);
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
        svg.panel(
            (ox, oy),
            (PANEL_W, PANEL_H),
            &format!("{workload} ({dist})"),
            y_max,
        );
        for &t in &threads {
            svg.text(
                x_of(t),
                oy + PANEL_H + 16.0,
                r#"text-anchor="middle""#,
                &t.to_string(),
            );
        }
        svg.text(
            ox + PANEL_W / 2.0,
            oy + PANEL_H + 32.0,
            r#"text-anchor="middle""#,
            "threads",
        );
        svg.vertical_text(
            ox - 40.0,
            oy + PANEL_H / 2.0,
            r#"text-anchor="middle""#,
            "Mops/s",
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
        if let Some(&(_, last)) = ceiling.last() {
            let points: Vec<_> = ceiling.iter().map(|&(t, v)| (x_of(t), y_of(v))).collect();
            svg.polyline(&points, r##"stroke="#444" stroke-dasharray="6,4""##);
            svg.text(
                ox + PANEL_W - 4.0,
                y_of(last) - 4.0,
                r##"fill="#444" text-anchor="end""##,
                "ceiling",
            );
        }
        for (m, map) in maps.iter().enumerate() {
            let color = PALETTE[m % PALETTE.len()];
            let mut line: Vec<_> = rows_here.iter().filter(|r| &r.map == map).collect();
            line.sort_by_key(|r| r.threads);
            let points: Vec<_> = line
                .iter()
                .map(|r| (x_of(r.threads), y_of(r.mops)))
                .collect();
            svg.polyline(&points, &format!(r#"stroke="{color}" stroke-width="2""#));
            for r in line {
                let (x, y) = (x_of(r.threads), y_of(r.mops));
                svg.line(
                    (x, y_of(r.mops_min)),
                    (x, y_of(r.mops_max)),
                    &format!(r#"stroke="{color}""#),
                );
                svg.circle(
                    (x, y),
                    3.5,
                    &format!(r#"fill="{color}""#),
                    Some(&format!(
                        "{map}: {:.2} Mops/s ({:.3} of ceiling)",
                        r.mops, r.ceiling_fraction
                    )),
                );
            }
        }
    }
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_panel_per_workload_with_a_point_per_result() {
        let report = crate::report::tests::sample();
        let chart = svg(&report, "suite & more");
        assert!(chart.contains("suite &amp; more"));
        assert!(chart.contains("get (zipf:0.99)"));
        assert_eq!(chart.matches("<circle").count(), report.results.len());
        assert!(chart.contains("30.50 Mops/s (0.305 of ceiling)"));
    }
}
