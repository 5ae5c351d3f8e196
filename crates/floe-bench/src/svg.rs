//! The one SVG writer every chart of the bench draws with (the suite's thread scaling,
//! `plot.rs`; the growth timelines, `growth.rs`; the layout lab's bubbles, `simd/chart.rs`):
//! a self-contained document, a few elements with their text escaped, and the axis helpers.

use std::fmt::Write as _;

/// Line colours, in the order maps and series are drawn.
pub const PALETTE: [&str; 10] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f",
];

/// A document being written. Each element method takes the element's geometry and `attrs`,
/// further attributes written as they are (`stroke="#999" fill="none"`); text content is
/// escaped here, so callers pass it raw.
pub struct Svg {
    out: String,
}

impl Svg {
    /// A `width` x `height` document on a white background, text in `font_size` px, with
    /// `title` in bold at the top left.
    pub fn new(width: f64, height: f64, font_size: u32, title: &str) -> Svg {
        let mut svg = Svg { out: String::new() };
        let _ = writeln!(
            svg.out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="{font_size}">"#
        );
        svg.rect(0.0, 0.0, width, height, r#"fill="white""#);
        svg.text(
            10.0,
            20.0,
            &format!(r#"font-size="{}" font-weight="bold""#, font_size + 3),
            title,
        );
        svg
    }

    pub fn text(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        let _ = writeln!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" {attrs}>{}</text>"#,
            escape(text)
        );
    }

    /// Text turned 90 degrees anticlockwise about `(x, y)` (a vertical axis's label).
    pub fn vertical_text(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        let _ = writeln!(
            self.out,
            r#"<text transform="translate({x:.1},{y:.1}) rotate(-90)" {attrs}>{}</text>"#,
            escape(text)
        );
    }

    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), attrs: &str) {
        let _ = writeln!(
            self.out,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" {attrs}/>"#,
            from.0, from.1, to.0, to.1
        );
    }

    pub fn rect(&mut self, x: f64, y: f64, width: f64, height: f64, attrs: &str) {
        let _ = writeln!(
            self.out,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{width:.1}" height="{height:.1}" {attrs}/>"#
        );
    }

    /// A circle; `tooltip`, if any, shows when the pointer is over it.
    pub fn circle(&mut self, centre: (f64, f64), radius: f64, attrs: &str, tooltip: Option<&str>) {
        let (cx, cy) = centre;
        match tooltip {
            None => {
                let _ = writeln!(
                    self.out,
                    r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="{radius:.1}" {attrs}/>"#
                );
            }
            Some(tip) => {
                let _ = writeln!(
                    self.out,
                    r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="{radius:.1}" {attrs}><title>{}</title></circle>"#,
                    escape(tip)
                );
            }
        }
    }

    /// An open line through `points` (nothing for fewer than two).
    pub fn polyline(&mut self, points: &[(f64, f64)], attrs: &str) {
        if points.len() < 2 {
            return;
        }
        let points: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            self.out,
            r#"<polyline points="{}" fill="none" {attrs}/>"#,
            points.join(" ")
        );
    }

    /// The document, closed.
    /// A chart panel at (`x`, `y`), `width` x `height`: its frame, `title` in bold above it,
    /// and five horizontal grid lines labelled from 0 to `y_max` on the left.
    pub fn panel(
        &mut self,
        (x, y): (f64, f64),
        (width, height): (f64, f64),
        title: &str,
        y_max: f64,
    ) {
        self.rect(x, y, width, height, r##"fill="none" stroke="#999""##);
        self.text(
            x + width / 2.0,
            y - 8.0,
            r#"font-weight="bold" text-anchor="middle""#,
            title,
        );
        for tick in 0..=4 {
            let v = y_max * f64::from(tick) / 4.0;
            let at = y + height - v / y_max * height;
            self.line((x, at), (x + width, at), r##"stroke="#eee""##);
            self.text(x - 4.0, at + 4.0, r#"text-anchor="end""#, &tick_label(v));
        }
    }

    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// `text` with the characters XML gives a meaning escaped.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The distinct items in first-seen order (the panels and series of a chart).
pub fn unique<T: PartialEq + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// A "nice" axis maximum at or above `v` (1, 2 or 5 times a power of ten).
pub fn nice_ceiling(v: f64) -> f64 {
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
pub fn tick_label(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let text = format!("{v:.2}");
        text.trim_end_matches('0').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_and_escapes() {
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

    #[test]
    fn a_document_is_well_formed_and_escapes_its_text() {
        let mut svg = Svg::new(100.0, 50.0, 11, "a <title> & more");
        svg.line((0.0, 0.0), (10.0, 10.0), r##"stroke="#999""##);
        svg.polyline(&[(1.0, 2.0)], "");
        svg.polyline(&[(1.0, 2.0), (3.0, 4.0)], r#"stroke="red""#);
        svg.circle((5.0, 5.0), 2.0, "", Some("x < y"));
        let text = svg.finish();
        assert!(text.starts_with("<svg "));
        assert!(text.ends_with("</svg>\n"));
        assert!(text.contains("a &lt;title&gt; &amp; more"));
        assert!(text.contains("<title>x &lt; y</title>"));
        assert_eq!(
            text.matches("<polyline").count(),
            1,
            "one point draws no line"
        );
        assert!(text.contains(r#"points="1.0,2.0 3.0,4.0""#));
    }
}
