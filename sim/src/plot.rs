//! `berth sim swf --plot FILE.svg`: the run's timeline as a hand-written
//! SVG (no plotting dependency): utilization on the left axis (0-100%),
//! pending jobs on the right axis (0 to the most seen), over virtual time.

use std::fmt::Write as _;

use crate::engine::TimelinePoint;

const WIDTH_PX: f64 = 900.0;
const HEIGHT_PX: f64 = 360.0;
const MARGIN_PX: f64 = 60.0;

/// The SVG text for `points` (at most
/// [`TIMELINE_POINTS_MAX`](crate::engine::TIMELINE_POINTS_MAX) of them,
/// so the text stays small); `title` is escaped.
pub fn timeline_svg(points: &[TimelinePoint], title: &str) -> String {
    let first_s = points.first().map_or(0, |p| p.t_s);
    let last_s = points.last().map_or(0, |p| p.t_s);
    let span_s = last_s.saturating_sub(first_s).max(1) as f64;
    let most_pending = points
        .iter()
        .map(|p| p.pending_jobs)
        .max()
        .unwrap_or(0)
        .max(1);
    let plot_w = WIDTH_PX - 2.0 * MARGIN_PX;
    let plot_h = HEIGHT_PX - 2.0 * MARGIN_PX;
    let x = |t_s: u64| MARGIN_PX + (t_s - first_s) as f64 / span_s * plot_w;
    let y = |fraction: f64| MARGIN_PX + (1.0 - fraction.clamp(0.0, 1.0)) * plot_h;
    let series = |value: &dyn Fn(&TimelinePoint) -> f64| {
        let mut out = String::new();
        for p in points {
            let _ = write!(out, "{:.1},{:.1} ", x(p.t_s), y(value(p)));
        }
        out.trim_end().to_string()
    };
    let utilization = series(&|p| p.utilization);
    let pending = series(&|p| p.pending_jobs as f64 / most_pending as f64);
    let days = (last_s - first_s) as f64 / 86_400.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        concat!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" ",
            "viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n",
            "<title>{title}</title>\n",
            "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n",
            "<text x=\"{m}\" y=\"24\" font-size=\"14\">{title}</text>\n",
            "<rect x=\"{m}\" y=\"{m}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>\n",
            "<text x=\"{m}\" y=\"{below}\">0 d</text>\n",
            "<text x=\"{right}\" y=\"{below}\" text-anchor=\"end\">{days:.1} d</text>\n",
            "<text x=\"{left_label}\" y=\"{m}\" text-anchor=\"end\" fill=\"#1f77b4\">100%</text>\n",
            "<text x=\"{left_label}\" y=\"{bottom}\" text-anchor=\"end\" fill=\"#1f77b4\">0%</text>\n",
            "<text x=\"{right_label}\" y=\"{m}\" fill=\"#d62728\">{most}</text>\n",
            "<text x=\"{right_label}\" y=\"{bottom}\" fill=\"#d62728\">0</text>\n",
            "<polyline id=\"utilization\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1\" points=\"{util}\"/>\n",
            "<polyline id=\"pending\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"1\" points=\"{pend}\"/>\n",
            "<text x=\"{m}\" y=\"{legend}\" fill=\"#1f77b4\">utilization (left)</text>\n",
            "<text x=\"{legend_x}\" y=\"{legend}\" fill=\"#d62728\">pending jobs (right)</text>\n",
            "</svg>\n"
        ),
        w = WIDTH_PX,
        h = HEIGHT_PX,
        m = MARGIN_PX,
        pw = plot_w,
        ph = plot_h,
        title = escape(title),
        below = HEIGHT_PX - MARGIN_PX + 16.0,
        right = WIDTH_PX - MARGIN_PX,
        days = days,
        left_label = MARGIN_PX - 6.0,
        bottom = HEIGHT_PX - MARGIN_PX,
        right_label = WIDTH_PX - MARGIN_PX + 6.0,
        most = most_pending,
        util = utilization,
        pend = pending,
        legend = HEIGHT_PX - 12.0,
        legend_x = MARGIN_PX + 160.0,
    );
    svg
}

/// Text safe inside SVG elements (also used by `berth-drill`'s plot).
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_both_series_scaled_into_the_plot() {
        let points = [
            TimelinePoint {
                t_s: 0,
                utilization: 0.0,
                pending_jobs: 0,
            },
            TimelinePoint {
                t_s: 86_400,
                utilization: 1.0,
                pending_jobs: 8,
            },
        ];
        let svg = timeline_svg(&points, "a <b> & c");
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<polyline id=\"utilization\""));
        assert!(svg.contains("<polyline id=\"pending\""));
        // t=0, empty: bottom left; t=1 d, full: top right.
        assert!(svg.contains("points=\"60.0,300.0 840.0,60.0\""), "{svg}");
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains("1.0 d"));
    }

    #[test]
    fn an_empty_timeline_still_draws() {
        let svg = timeline_svg(&[], "empty");
        assert!(svg.contains("points=\"\""));
    }
}
