//! The speed-against-space chart (IcebergHT's Fig. 6, one panel per workload): each map one
//! point, its bytes per key across and its throughput up, so that a map better on both axes
//! sits up and to the left of another. Drawn from a `run` report measured with `--memory on`
//! (`floe-bench plot --space`): floe's maps report their table bytes, the peers their RSS
//! growth per key in a child process. Rows without a byte figure are left out, and so are all
//! but the largest thread count of each panel.
//!
//! The dashed line at 16 bytes is a key and a value with nothing else: a table's space
//! efficiency is 16 over its bytes per key.

use crate::{
    report::{Report, Row},
    svg::{nice_ceiling, tick_label, Svg, PALETTE},
};

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 300.0;
const MARGIN_L: f64 = 56.0;
const MARGIN_B: f64 = 44.0;
const MARGIN_T: f64 = 30.0;
/// The bytes of one key and its value: the space floor.
const PAIR_BYTES: f64 = 16.0;

/// The rows the chart draws: those with a byte figure, at each panel's largest thread count.
fn drawn(report: &Report) -> Vec<&Row> {
    let with_bytes: Vec<&Row> = report
        .results
        .iter()
        .filter(|r| r.bytes_per_key.is_some_and(|b| b.is_finite() && b > 0.0))
        .collect();
    with_bytes
        .iter()
        .copied()
        .filter(|r| {
            let most = with_bytes
                .iter()
                .filter(|o| o.workload == r.workload && o.dist == r.dist)
                .map(|o| o.threads)
                .max();
            Some(r.threads) == most
        })
        .collect()
}

/// The chart for `report`; `None` if no row has bytes per key (a report measured without
/// `--memory on` has them only for floe's maps).
pub fn svg(report: &Report, title: &str) -> Option<String> {
    let rows = drawn(report);
    if rows.is_empty() {
        return None;
    }
    let mut panels: Vec<(&str, &str, usize)> = Vec::new();
    for r in &rows {
        let panel = (r.workload.as_str(), r.dist.as_str(), r.threads);
        if !panels.contains(&panel) {
            panels.push(panel);
        }
    }
    let mut maps: Vec<&str> = Vec::new();
    for r in &rows {
        if !maps.contains(&r.map.as_str()) {
            maps.push(&r.map);
        }
    }
    let columns = panels.len().clamp(1, 2);
    let panel_rows = panels.len().div_ceil(columns);
    let width = columns as f64 * (PANEL_W + MARGIN_L + 20.0) + 20.0;
    let top = 40.0;
    let height = top + panel_rows as f64 * (PANEL_H + MARGIN_B + MARGIN_T) + 10.0;
    let mut svg = Svg::new(width, height, 12, title);
    // One x axis for every panel, so that a map's bytes read the same across them.
    let x_max = nice_ceiling(
        rows.iter()
            .filter_map(|r| r.bytes_per_key)
            .fold(PAIR_BYTES, f64::max)
            * 1.08,
    );
    for (p, &(workload, dist, threads)) in panels.iter().enumerate() {
        let ox = 10.0 + (p % columns) as f64 * (PANEL_W + MARGIN_L + 20.0) + MARGIN_L;
        let oy = top + (p / columns) as f64 * (PANEL_H + MARGIN_B + MARGIN_T) + MARGIN_T;
        let here: Vec<&&Row> = rows
            .iter()
            .filter(|r| r.workload == workload && r.dist == dist && r.threads == threads)
            .collect();
        let y_max = nice_ceiling(here.iter().map(|r| r.mops_max).fold(0.0, f64::max) * 1.08);
        let x_of = |bytes: f64| ox + bytes / x_max * PANEL_W;
        let y_of = |mops: f64| oy + PANEL_H - mops / y_max * PANEL_H;
        svg.panel(
            (ox, oy),
            (PANEL_W, PANEL_H),
            &format!("{workload} ({dist}), {threads} threads"),
            y_max,
        );
        for tick in 0..=4 {
            let b = x_max * f64::from(tick) / 4.0;
            svg.text(
                x_of(b),
                oy + PANEL_H + 16.0,
                r#"text-anchor="middle""#,
                &tick_label(b),
            );
        }
        svg.text(
            ox + PANEL_W / 2.0,
            oy + PANEL_H + 34.0,
            r#"text-anchor="middle""#,
            "bytes per key (table, or RSS growth)",
        );
        svg.vertical_text(
            ox - 40.0,
            oy + PANEL_H / 2.0,
            r#"text-anchor="middle""#,
            "Mops/s",
        );
        svg.line(
            (x_of(PAIR_BYTES), oy),
            (x_of(PAIR_BYTES), oy + PANEL_H),
            r##"stroke="#444" stroke-dasharray="6,4""##,
        );
        svg.text(
            x_of(PAIR_BYTES) + 4.0,
            oy + 14.0,
            r##"fill="#444""##,
            "key + value",
        );
        for r in here {
            let Some(bytes) = r.bytes_per_key else {
                continue;
            };
            let m = maps.iter().position(|&name| name == r.map).unwrap_or(0);
            let color = PALETTE[m % PALETTE.len()];
            let (x, y) = (x_of(bytes), y_of(r.mops));
            svg.line(
                (x, y_of(r.mops_min)),
                (x, y_of(r.mops_max)),
                &format!(r#"stroke="{color}""#),
            );
            svg.circle(
                (x, y),
                4.5,
                &format!(r#"fill="{color}""#),
                Some(&format!(
                    "{}: {:.2} Mops/s at {bytes:.1} bytes/key ({:.0}% of its bytes are keys and values)",
                    r.map,
                    r.mops,
                    100.0 * PAIR_BYTES / bytes
                )),
            );
            svg.text(x + 7.0, y - 5.0, &format!(r#"fill="{color}""#), &r.map);
        }
    }
    Some(svg.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_point_per_map_with_bytes_at_the_most_threads() {
        let mut report = crate::report::tests::sample();
        let base = report.results[0].clone();
        let row = |map: &str, threads: usize, bytes: Option<f64>, mops: f64| Row {
            map: map.into(),
            threads,
            bytes_per_key: bytes,
            mops,
            mops_min: mops,
            mops_max: mops,
            ..base.clone()
        };
        report.results = vec![
            row("floe", 2, Some(40.0), 30.0),
            row("floe", 1, Some(40.0), 16.0),
            row("floe-dense", 2, Some(19.9), 33.0),
            row("peer", 2, Some(64.0), 12.0),
            row("peer-without-bytes", 2, None, 50.0),
        ];
        let chart = svg(&report, "space & speed").expect("a chart");
        assert!(chart.contains("space &amp; speed"));
        assert_eq!(
            chart.matches("<circle").count(),
            3,
            "the 2-thread rows with bytes"
        );
        assert!(chart.contains("floe-dense: 33.00 Mops/s at 19.9 bytes/key (80% of its bytes"));
        assert!(chart.contains("peer: 12.00 Mops/s at 64.0 bytes/key (25%"));
        assert!(!chart.contains("peer-without-bytes"));
        assert!(chart.contains("key + value"));
        for row in &mut report.results {
            row.bytes_per_key = None;
        }
        assert!(svg(&report, "space").is_none());
    }
}
