//! The benchmark plots, drawn with `plotters` to SVG text: the pass cost's
//! growth (`bench pass-grid --plot`) and throughput against concurrency
//! (`bench raft-writes --plot`). The failover distribution has its own
//! hand-written SVG (`drill::plot`).
//!
//! Every function here takes figures already measured and returns the SVG
//! as a string, so the plots can be drawn again from a run's JSON.

use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use serde::Deserialize;

use crate::pass_grid::{thousands, PassGrid, TARGETS};

const SIZE_PX: (u32, u32) = (800, 520);
/// Series colours (matplotlib's first ones, as `drill::plot` uses).
const COLOURS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x17, 0xbe, 0xcf),
];
const TARGET_COLOUR: RGBColor = RGBColor(0xd6, 0x27, 0x28);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlotError {
    #[error("nothing to plot: {0}")]
    Empty(&'static str),
    #[error("drawing the plot: {0}")]
    Draw(String),
    #[error("reading the raft-writes results: {0}")]
    Input(String),
}

fn draw_error<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// A log axis's range around `values`: from a little under the smallest
/// to a little over the largest (None when there is no positive value).
fn log_bounds(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .into_iter()
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    (hi > 0.0).then_some((lo / 1.5, hi * 1.5))
}

/// A label for a value on a log axis: whole numbers with separators,
/// small ones with their decimals.
fn axis_label(v: f64) -> String {
    if v >= 10.0 {
        thousands(v.round() as usize)
    } else if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Pass cost against pending jobs, one line per host count, log-log, with
/// the two targets marked.
pub fn pass_grid_svg(grid: &PassGrid, title: &str) -> Result<String, PlotError> {
    if grid.cells.is_empty() {
        return Err(PlotError::Empty("the grid has no cell"));
    }
    let (x_lo, x_hi) = log_bounds(
        grid.pending
            .iter()
            .map(|&p| p as f64)
            .chain(TARGETS.iter().map(|t| t.0 as f64)),
    )
    .ok_or(PlotError::Empty("no pending count above zero"))?;
    let (y_lo, y_hi) = log_bounds(
        grid.cells
            .iter()
            .map(|c| c.pass_ms_p50)
            .chain(TARGETS.iter().map(|t| t.2)),
    )
    .ok_or(PlotError::Empty("no pass time above zero"))?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE_PX).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
            .map_err(draw_error)?;
        configure_mesh(
            &mut chart,
            "pending jobs",
            "pass p50, ms (wall)",
            &|v: &f64| axis_label(*v),
            &|v: &f64| axis_label(*v),
        )?;
        for (i, &hosts) in grid.hosts.iter().enumerate() {
            let points: Vec<(f64, f64)> = grid
                .pending
                .iter()
                .filter_map(|&p| Some((p as f64, grid.p50(p, hosts)?)))
                .filter(|&(_, ms)| ms > 0.0)
                .collect();
            let c = colour(i);
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
                .map_err(draw_error)?
                .label(format!("{} hosts", thousands(hosts)))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(draw_error)?;
        }
        // Each target is a cross in its host count's colour (red when that
        // count is not in the grid), named in the legend: a label beside
        // the cross would cross the lines drawn near it.
        for &(pending, hosts, limit_ms) in &TARGETS {
            let c = grid
                .hosts
                .iter()
                .position(|&h| h == hosts)
                .map_or(TARGET_COLOUR, colour);
            chart
                .draw_series(std::iter::once(Cross::new(
                    (pending as f64, limit_ms),
                    7,
                    c.stroke_width(3),
                )))
                .map_err(draw_error)?
                .label(format!(
                    "target: {}k pending × {}k hosts, p50 ≤ {limit_ms} ms",
                    pending / 1_000,
                    hosts / 1_000
                ))
                .legend(move |(x, y)| Cross::new((x + 10, y), 5, c.stroke_width(2)));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

/// One concurrency level of `bench raft-writes`, as its JSON holds it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RaftWritesLevel {
    pub clients: usize,
    pub berth: OpsRate,
    pub etcd: OpsRate,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct OpsRate {
    pub ops_per_s: f64,
}

/// The levels of a `bench raft-writes --json` file: an object with
/// `levels`, each with `clients`, `berth.ops_per_s` and `etcd.ops_per_s`.
pub fn raft_writes_levels(json: &serde_json::Value) -> Result<Vec<RaftWritesLevel>, PlotError> {
    let levels = json
        .get("levels")
        .ok_or_else(|| PlotError::Input("no \"levels\" array".into()))?;
    serde_json::from_value(levels.clone()).map_err(|e| PlotError::Input(e.to_string()))
}

/// Acknowledged Berth submits/s and etcd puts/s against concurrent
/// clients, log x axis; etcd's line is left out when it did not run (every
/// rate zero, `--berth-only`).
pub fn raft_writes_svg(levels: &[RaftWritesLevel], title: &str) -> Result<String, PlotError> {
    let mut levels = levels.to_vec();
    levels.retain(|l| l.clients > 0);
    levels.sort_by_key(|l| l.clients);
    if levels.is_empty() {
        return Err(PlotError::Empty("no level with clients"));
    }
    let etcd_ran = levels.iter().any(|l| l.etcd.ops_per_s > 0.0);
    let (x_lo, x_hi) = log_bounds(levels.iter().map(|l| l.clients as f64))
        .ok_or(PlotError::Empty("no level with clients"))?;
    let y_hi = levels
        .iter()
        .map(|l| l.berth.ops_per_s.max(l.etcd.ops_per_s))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE_PX).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(72)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), 0.0..y_hi)
            .map_err(draw_error)?;
        configure_mesh(
            &mut chart,
            "concurrent clients",
            "acknowledged writes / s",
            &|v: &f64| axis_label(*v),
            &|v: &f64| thousands(v.round().max(0.0) as usize),
        )?;
        let mut series = vec![(
            "Berth submits/s",
            levels
                .iter()
                .map(|l| (l.clients as f64, l.berth.ops_per_s))
                .collect::<Vec<_>>(),
        )];
        if etcd_ran {
            series.push((
                "etcd puts/s",
                levels
                    .iter()
                    .map(|l| (l.clients as f64, l.etcd.ops_per_s))
                    .collect(),
            ));
        }
        for (i, (name, points)) in series.into_iter().enumerate() {
            let c = colour(i);
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
                .map_err(draw_error)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(draw_error)?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

type Chart<'a, X, Y> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>;

fn configure_mesh<X, Y>(
    chart: &mut Chart<'_, X, Y>,
    x_desc: &str,
    y_desc: &str,
    x_fmt: &dyn Fn(&X::ValueType) -> String,
    y_fmt: &dyn Fn(&Y::ValueType) -> String,
) -> Result<(), PlotError>
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
{
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(x_fmt)
        .y_label_formatter(y_fmt)
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(draw_error)
}

fn draw_legend<X: Ranged, Y: Ranged>(
    chart: &mut Chart<'_, X, Y>,
    at: SeriesLabelPosition,
) -> Result<(), PlotError> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(0x88, 0x88, 0x88))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(draw_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pass_grid::tests::two_by_two;

    /// The text of every `<text>` element, in order.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = t.split_once('>')?.1;
                Some(body.split_once("</text>")?.0.trim().to_string())
            })
            .collect()
    }

    /// Polylines stroked in the `i`-th series colour: a series' line and
    /// its legend mark (the mesh is drawn in greys).
    fn polylines_in_colour(svg: &str, i: usize) -> usize {
        let c = colour(i);
        let stroke = format!("stroke=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        svg.lines()
            .filter(|l| l.starts_with("<polyline") && l.contains(&stroke))
            .count()
    }

    #[test]
    fn the_pass_grid_plot_has_a_line_per_host_count_and_the_targets() {
        let svg = pass_grid_svg(&two_by_two(), "pass cost").expect("plots");
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        let texts = texts(&svg);
        for want in [
            "pass cost",
            "1,000 hosts",
            "10,000 hosts",
            "target: 10k pending × 1k hosts, p50 ≤ 15 ms",
            "target: 100k pending × 10k hosts, p50 ≤ 250 ms",
            "pending jobs",
            "pass p50, ms (wall)",
        ] {
            assert!(texts.iter().any(|t| t == want), "{want} in {texts:?}");
        }
        // A line (and its legend mark) per host count, no third.
        assert_eq!(polylines_in_colour(&svg, 0), 2);
        assert_eq!(polylines_in_colour(&svg, 1), 2);
        assert_eq!(polylines_in_colour(&svg, 2), 0);
    }

    #[test]
    fn an_empty_grid_is_an_error() {
        let mut grid = two_by_two();
        grid.cells.clear();
        assert_eq!(
            pass_grid_svg(&grid, "x"),
            Err(PlotError::Empty("the grid has no cell"))
        );
    }

    fn raft_writes_json(etcd_rate: f64) -> serde_json::Value {
        let level = |clients: usize, berth: f64| {
            serde_json::json!({
                "bench": "raft-writes",
                "clients": clients,
                "berth": { "ops_per_s": berth, "p50_ms": 1.0 },
                "etcd": { "ops_per_s": etcd_rate * clients as f64, "p50_ms": 1.0 },
            })
        };
        serde_json::json!({
            "bench": "raft-writes",
            "levels": [level(16, 4_000.0), level(1, 500.0), level(256, 9_000.0)],
        })
    }

    #[test]
    fn raft_writes_levels_read_from_the_json() {
        let levels = raft_writes_levels(&raft_writes_json(10.0)).expect("reads");
        assert_eq!(levels.len(), 3);
        assert_eq!(levels[0].clients, 16);
        assert_eq!(levels[0].berth.ops_per_s, 4_000.0);
        assert_eq!(levels[0].etcd.ops_per_s, 160.0);
        assert!(matches!(
            raft_writes_levels(&serde_json::json!({ "clients": 1 })),
            Err(PlotError::Input(_))
        ));
    }

    #[test]
    fn the_raft_writes_plot_has_both_systems_or_berth_alone() {
        let levels = raft_writes_levels(&raft_writes_json(10.0)).expect("reads");
        let svg = raft_writes_svg(&levels, "raft writes").expect("plots");
        let t = texts(&svg);
        for want in [
            "raft writes",
            "Berth submits/s",
            "etcd puts/s",
            "concurrent clients",
        ] {
            assert!(t.iter().any(|x| x == want), "{want} in {t:?}");
        }
        assert_eq!(polylines_in_colour(&svg, 0), 2);
        assert_eq!(polylines_in_colour(&svg, 1), 2);

        let berth_only = raft_writes_levels(&raft_writes_json(0.0)).expect("reads");
        let svg = raft_writes_svg(&berth_only, "berth only").expect("plots");
        let t = texts(&svg);
        assert!(t.iter().any(|x| x == "Berth submits/s"));
        assert!(!t.iter().any(|x| x == "etcd puts/s"));
        assert_eq!(polylines_in_colour(&svg, 0), 2);
        assert_eq!(polylines_in_colour(&svg, 1), 0);
        assert_eq!(
            raft_writes_svg(&[], "none"),
            Err(PlotError::Empty("no level with clients"))
        );
    }

    #[test]
    fn log_bounds_pad_the_positive_values() {
        assert_eq!(log_bounds([3.0, 0.0, 30.0]), Some((2.0, 45.0)));
        assert_eq!(log_bounds([0.0, -1.0]), None);
        assert_eq!(axis_label(10_000.0), "10,000");
        assert_eq!(axis_label(2.0), "2");
        assert_eq!(axis_label(0.5), "0.50");
    }
}
