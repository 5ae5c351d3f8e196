//! The suite's chart: one panel per workload, a bar per map (floe one at a time and batched,
//! both layouts, the peers), each bar's height the map's fraction of the ceiling that matches
//! it (random line reads without prefetch for a map run one operation at a time, the best
//! prefetch window for a batched one), labelled with its Mops/s. Fractions, not Mops/s, so
//! that maps run both ways stand on one scale: 1.0 is what the machine's memory gives that
//! way of asking. The legend names each map with its bytes per key. Drawn at the largest
//! thread count of the report.

use crate::{
    report::{Report, Row},
    svg::{unique, Svg, PALETTE},
};

const BAR_W: f64 = 34.0;
const GAP: f64 = 8.0;
const PANEL_H: f64 = 260.0;
const MARGIN_L: f64 = 56.0;
const MARGIN_T: f64 = 34.0;
const MARGIN_B: f64 = 124.0;
const LEGEND_H: f64 = 22.0;

/// The chart for `report`.
pub fn svg(report: &Report, title: &str) -> String {
    let threads = report.results.iter().map(|r| r.threads).max().unwrap_or(1);
    let rows: Vec<&Row> = report
        .results
        .iter()
        .filter(|r| r.threads == threads)
        .collect();
    let panels: Vec<(String, String)> =
        unique(rows.iter().map(|r| (r.workload.clone(), r.dist.clone())));
    let maps: Vec<String> = unique(rows.iter().map(|r| r.map.clone()));
    let panel_w = maps.len().max(1) as f64 * (BAR_W + GAP) + GAP;
    let columns = panels.len().clamp(1, 3);
    let width = (columns as f64 * (panel_w + MARGIN_L) + 20.0).max(640.0);
    let legend_rows = maps.len().div_ceil(3) as f64;
    let top = 40.0 + legend_rows * LEGEND_H;
    let panel_rows = panels.len().div_ceil(columns).max(1);
    let height = top + panel_rows as f64 * (PANEL_H + MARGIN_T + MARGIN_B);
    let mut svg = Svg::new(width, height, 12, title);
    svg.text(
        10.0,
        36.0,
        r##"fill="#444""##,
        &format!(
            "{threads} threads; bar = fraction of the matching ceiling (1.0 = the machine's random line reads: no prefetch for one at a time, best window for batched), label = Mops/s"
        ),
    );
    for (i, map) in maps.iter().enumerate() {
        let x = 10.0 + (i % 3) as f64 * 300.0;
        let y = 44.0 + (i / 3) as f64 * LEGEND_H;
        let color = PALETTE[i % PALETTE.len()];
        svg.rect(x, y, 14.0, 14.0, &format!(r#"fill="{color}""#));
        let bytes = rows
            .iter()
            .find(|r| &r.map == map)
            .and_then(|r| r.rss_bytes_per_key.or(r.bytes_per_key))
            .map_or(String::new(), |b| format!(" ({b:.0} B/key)"));
        svg.text(x + 20.0, y + 12.0, "", &format!("{map}{bytes}"));
    }
    for (p, (workload, dist)) in panels.iter().enumerate() {
        let ox = 10.0 + (p % columns) as f64 * (panel_w + MARGIN_L) + MARGIN_L;
        let oy = top + (p / columns) as f64 * (PANEL_H + MARGIN_T + MARGIN_B) + MARGIN_T;
        let here: Vec<&&Row> = rows
            .iter()
            .filter(|r| &r.workload == workload && &r.dist == dist)
            .collect();
        // The ceiling's line at the top, or above it in quarters when a bar passes it.
        let highest = here
            .iter()
            .map(|r| r.mops_max / r.ceiling_mops.max(f64::MIN_POSITIVE))
            .fold(0.0, f64::max);
        let y_max = (highest * 1.05 / 0.25).ceil().max(4.0) * 0.25;
        let y_of = |v: f64| oy + PANEL_H - v / y_max * PANEL_H;
        svg.panel(
            (ox, oy),
            (panel_w, PANEL_H),
            &format!("{workload} ({dist})"),
            y_max,
        );
        svg.vertical_text(
            ox - 40.0,
            oy + PANEL_H / 2.0,
            r#"text-anchor="middle""#,
            "fraction of ceiling",
        );
        svg.line(
            (ox, y_of(1.0)),
            (ox + panel_w, y_of(1.0)),
            r##"stroke="#444" stroke-dasharray="6,4""##,
        );
        for (m, map) in maps.iter().enumerate() {
            let Some(row) = here.iter().find(|r| &r.map == map) else {
                continue;
            };
            let color = PALETTE[m % PALETTE.len()];
            let x = ox + GAP + m as f64 * (BAR_W + GAP);
            let fraction = |v: f64| v / row.ceiling_mops.max(f64::MIN_POSITIVE);
            let top_y = y_of(fraction(row.mops));
            svg.rect(
                x,
                top_y,
                BAR_W,
                oy + PANEL_H - top_y,
                &format!(r#"fill="{color}""#),
            );
            // The repeats' range.
            svg.line(
                (x + BAR_W / 2.0, y_of(fraction(row.mops_min))),
                (x + BAR_W / 2.0, y_of(fraction(row.mops_max))),
                r##"stroke="#222""##,
            );
            svg.text(
                x + BAR_W / 2.0,
                top_y - 4.0,
                r#"text-anchor="middle" font-size="10""#,
                &format!("{:.0}", row.mops),
            );
            svg.vertical_text(
                x + BAR_W / 2.0 + 4.0,
                oy + PANEL_H + 6.0,
                r#"text-anchor="end" font-size="10""#,
                map,
            );
        }
    }
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_per_map_and_workload_at_the_largest_thread_count() {
        let report = crate::report::tests::sample();
        let chart = svg(&report, "suite & more");
        assert!(chart.contains("suite &amp; more"));
        let threads = report.results.iter().map(|r| r.threads).max().unwrap();
        let bars = report
            .results
            .iter()
            .filter(|r| r.threads == threads)
            .count();
        let maps = report
            .results
            .iter()
            .map(|r| r.map.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let panels = report
            .results
            .iter()
            .filter(|r| r.threads == threads)
            .map(|r| (r.workload.clone(), r.dist.clone()))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        // The background, a square per map in the legend, a frame per panel, a bar per row.
        assert_eq!(chart.matches("<rect").count(), 1 + maps + panels + bars);
        assert!(chart.contains("fraction of ceiling"));
    }
}
