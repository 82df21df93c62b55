//! A dependency-free SVG plot of latency distributions (empirical CDFs), so
//! `BENCHMARKS.md` can show whole distributions, not only percentiles.

use std::fmt::Write as _;

/// One distribution to draw.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Samples in milliseconds (any order).
    pub samples_ms: Vec<f64>,
    /// Dashed line (used for the baseline).
    pub dashed: bool,
    /// Palette slot (default: the series' position), so paired series can share a colour.
    pub colour: Option<usize>,
}

const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// Renders the CDFs of `series` on one chart with a linear millisecond x axis.
#[must_use]
pub fn cdf_plot(title: &str, series: &[Series]) -> String {
    let (w, h) = (760.0_f64, 420.0_f64);
    let (left, right, top, bottom) = (60.0, 200.0, 40.0, 50.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let x_max = series
        .iter()
        .flat_map(|s| s.samples_ms.iter().copied())
        .filter(|v| v.is_finite())
        .fold(1.0_f64, f64::max);
    let x_max = nice_ceiling(x_max);

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        left + pw / 2.0,
        escape(title)
    );
    // Axes and grid.
    for i in 0..=5 {
        let frac = f64::from(i) / 5.0;
        let x = left + pw * frac;
        let y = top + ph * (1.0 - frac);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{:.0}</text>"##,
            top + ph,
            top + ph + 16.0,
            x_max * frac
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}%</text>"##,
            left + pw,
            left - 6.0,
            y + 4.0,
            frac * 100.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">turn latency (ms): command issued → turn executed</text>"#,
        left + pw / 2.0,
        h - 12.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">fraction of commands</text>"#,
        top + ph / 2.0,
        top + ph / 2.0
    );

    for (i, s) in series.iter().enumerate() {
        let colour = PALETTE[s.colour.unwrap_or(i) % PALETTE.len()];
        let mut v: Vec<f64> = s
            .samples_ms
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            continue;
        }
        // At most ~400 points per line keeps the file small.
        let step = (v.len() / 400).max(1);
        let mut points = String::new();
        let n = v.len() as f64;
        for (k, x) in v
            .iter()
            .enumerate()
            .step_by(step)
            .chain(std::iter::once((v.len() - 1, &v[v.len() - 1])))
        {
            let px = left + pw * (x / x_max).min(1.0);
            let py = top + ph * (1.0 - (k as f64 + 1.0) / n);
            let _ = write!(points, "{px:.1},{py:.1} ");
        }
        let dash = if s.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} points="{}"/>"#,
            points.trim_end()
        );
        let ly = top + 14.0 + 18.0 * i as f64;
        let lx = left + pw + 14.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn nice_ceiling(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_has_one_line_per_series_and_escapes_labels() {
        let svg = cdf_plot(
            "a < b",
            &[
                Series {
                    label: "ours".into(),
                    samples_ms: vec![1.0, 2.0, 3.0],
                    dashed: false,
                    colour: None,
                },
                Series {
                    label: "tcp & co".into(),
                    samples_ms: vec![5.0, 400.0],
                    dashed: true,
                    colour: None,
                },
                Series {
                    label: "empty".into(),
                    samples_ms: vec![],
                    dashed: false,
                    colour: None,
                },
            ],
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt; b"));
        assert!(svg.contains("tcp &amp; co"));
        assert!(svg.ends_with("</svg>\n"));
    }

    #[test]
    fn axis_rounds_up_to_a_nice_number() {
        assert_eq!(nice_ceiling(430.0), 500.0);
        assert_eq!(nice_ceiling(99.0), 100.0);
        assert_eq!(nice_ceiling(1.2), 2.0);
    }
}
