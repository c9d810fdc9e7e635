//! `berth-drill chaos --plot FILE.svg`: the drill's failover times as a
//! cumulative distribution, hand-written SVG (no plotting dependency): one
//! step per fault that took the leader, the p50 and p99 marked, the
//! 1.5 s p50 target drawn for reference.

use std::fmt::Write as _;

use berth_sim::plot::escape;

const WIDTH_PX: f64 = 720.0;
const HEIGHT_PX: f64 = 360.0;
const MARGIN_PX: f64 = 60.0;
/// The failover target for p50, drawn as a reference line.
const TARGET_P50_MS: u64 = 1_500;

/// The `q`-quantile (0..=1) of sorted samples, nearest rank; None when
/// there are none.
pub fn nearest_rank(sorted_ms: &[u64], q: f64) -> Option<u64> {
    if sorted_ms.is_empty() {
        return None;
    }
    let rank = ((q * sorted_ms.len() as f64).ceil() as usize).clamp(1, sorted_ms.len());
    sorted_ms.get(rank - 1).copied()
}

/// The SVG text for failover times `sorted_ms` (ascending); `title` is
/// escaped. With no samples it says so in the plot.
pub fn failover_svg(sorted_ms: &[u64], title: &str) -> String {
    debug_assert!(sorted_ms.windows(2).all(|w| w[0] <= w[1]));
    let plot_w = WIDTH_PX - 2.0 * MARGIN_PX;
    let plot_h = HEIGHT_PX - 2.0 * MARGIN_PX;
    // The x axis reaches past the slowest sample and the target (so that
    // neither sits on the edge), rounded up to a whole 500 ms.
    let most_ms = sorted_ms.last().copied().unwrap_or(0).max(TARGET_P50_MS);
    let axis_ms = (most_ms + 1).div_ceil(500) * 500;
    let x = |ms: u64| MARGIN_PX + ms as f64 / axis_ms as f64 * plot_w;
    let y = |fraction: f64| MARGIN_PX + (1.0 - fraction.clamp(0.0, 1.0)) * plot_h;
    let n = sorted_ms.len();
    // A step function: flat at i/n until sample i, then up to (i+1)/n.
    let mut steps = format!("{:.1},{:.1}", x(0), y(0.0));
    for (i, &ms) in sorted_ms.iter().enumerate() {
        let _ = write!(
            steps,
            " {:.1},{:.1} {:.1},{:.1}",
            x(ms),
            y(i as f64 / n as f64),
            x(ms),
            y((i + 1) as f64 / n as f64)
        );
    }
    if n > 0 {
        let _ = write!(steps, " {:.1},{:.1}", x(axis_ms), y(1.0));
    }
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH_PX}\" height=\"{HEIGHT_PX}\" \
         viewBox=\"0 0 {WIDTH_PX} {HEIGHT_PX}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let title = escape(title);
    let _ = writeln!(svg, "<title>{title}</title>");
    let _ = writeln!(
        svg,
        "<rect width=\"{WIDTH_PX}\" height=\"{HEIGHT_PX}\" fill=\"white\"/>"
    );
    let _ = writeln!(
        svg,
        "<text x=\"{MARGIN_PX}\" y=\"24\" font-size=\"14\">{title}</text>"
    );
    let _ = writeln!(
        svg,
        "<rect x=\"{MARGIN_PX}\" y=\"{MARGIN_PX}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#888\"/>"
    );
    let below = HEIGHT_PX - MARGIN_PX + 16.0;
    for tick in (0..=axis_ms).step_by(500) {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{below}\" text-anchor=\"middle\">{tick}</text>",
            x(tick)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">ms from the fault to an agreed new leader</text>",
        MARGIN_PX + plot_w / 2.0,
        below + 18.0
    );
    for (fraction, label) in [(0.0, "0"), (0.5, "0.5"), (1.0, "1")] {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            MARGIN_PX - 6.0,
            y(fraction) + 4.0
        );
    }
    let _ = writeln!(
        svg,
        "<line id=\"target\" x1=\"{0:.1}\" y1=\"{MARGIN_PX}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"#2ca02c\" stroke-dasharray=\"4 3\"/>",
        x(TARGET_P50_MS),
        MARGIN_PX + plot_h
    );
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#2ca02c\">p50 target {TARGET_P50_MS} ms</text>",
        x(TARGET_P50_MS) + 4.0,
        MARGIN_PX + plot_h - 6.0
    );
    if n == 0 {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">no fault took the leader</text>",
            MARGIN_PX + plot_w / 2.0,
            MARGIN_PX + plot_h / 2.0
        );
    } else {
        let _ = writeln!(
            svg,
            "<polyline id=\"cdf\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{steps}\"/>"
        );
        for (id, q) in [("p50", 0.5), ("p99", 0.99)] {
            if let Some(ms) = nearest_rank(sorted_ms, q) {
                let _ = writeln!(
                    svg,
                    "<circle id=\"{id}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"#d62728\"/>\n\
                     <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#d62728\">{id} {ms} ms</text>",
                    x(ms),
                    y(q),
                    x(ms) + 6.0,
                    y(q) + 14.0
                );
            }
        }
    }
    let _ = writeln!(
        svg,
        "<text x=\"{MARGIN_PX}\" y=\"{:.1}\" fill=\"#1f77b4\">fraction of {n} failovers at or below</text>",
        HEIGHT_PX - 6.0
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let ms = [100, 200, 300, 400];
        assert_eq!(nearest_rank(&ms, 0.5), Some(200));
        assert_eq!(nearest_rank(&ms, 0.99), Some(400));
        assert_eq!(nearest_rank(&ms, 0.0), Some(100));
        assert_eq!(nearest_rank(&[], 0.5), None);
    }

    #[test]
    fn the_cdf_steps_once_per_sample_and_marks_p50_and_p99() {
        let svg = failover_svg(&[900, 1000, 1100, 2600], "drill <seed 7>");
        assert!(svg.starts_with("<svg "));
        assert!(svg.ends_with("</svg>\n"));
        assert!(svg.contains("<title>drill &lt;seed 7&gt;</title>"));
        let cdf = svg
            .lines()
            .find(|l| l.contains("id=\"cdf\""))
            .expect("the cdf line");
        // Start, two points per sample, the end at the right edge.
        let points = cdf.split("points=\"").nth(1).expect("points");
        assert_eq!(points.split_whitespace().count(), 1 + 2 * 4 + 1);
        assert!(svg.contains(">p50 1000 ms<"));
        assert!(svg.contains(">p99 2600 ms<"));
        // The axis reaches past the slowest sample in 500 ms steps.
        assert!(svg.contains(">3000</text>"));
        assert!(!svg.contains(">3500</text>"));
    }

    #[test]
    fn no_samples_says_so() {
        let svg = failover_svg(&[], "none");
        assert!(svg.contains("no fault took the leader"));
        assert!(!svg.contains("id=\"cdf\""));
        // The target still sets the axis, with room past it.
        assert!(svg.contains(">2000</text>"));
        assert!(!svg.contains(">2500</text>"));
    }
}
