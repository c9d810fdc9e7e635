//! `berth-drill bench pass-grid`: the cost of one scheduling pass over a
//! grid of pending jobs × hosts (issue 12: 1k-100k pending, 100-10k
//! hosts), each cell the p50 of N passes of [`berth_scheduler::schedule`]
//! on [`bench_snapshot`]`(pending, hosts, 1)` with [`bench_policy`] at
//! [`BENCH_NOW_MS`], the state `berth sim bench-pass` times.
//!
//! The scheduler library reads no clock; the timing is done here, as
//! `sim/examples/sim_profile.rs` does it: wall time per pass, and
//! the thread's CPU time (which a loaded machine does not inflate).

use std::fmt::Write as _;
use std::time::Instant;

use berth_sim::bench::{bench_policy, bench_snapshot, time_passes, BenchReport, PassClock};
use serde::{Deserialize, Serialize};

/// The seed of every cell's state: the one `berth sim bench-pass` uses.
pub const SEED: u64 = 1;
/// The targets: (pending, hosts, p50 ms at most).
pub const TARGETS: [(usize, usize, f64); 2] = [(10_000, 1_000, 15.0), (100_000, 10_000, 250.0)];
/// Bounds on what a run may ask for, so that a typo cannot ask for a state
/// larger than the machine's memory or a run of hours.
pub const PENDING_MAX: usize = 1_000_000;
pub const HOSTS_MAX: usize = 100_000;
pub const PASSES_MAX: usize = 1_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridOptions {
    pub pending: Vec<usize>,
    pub hosts: Vec<usize>,
    pub passes: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GridError {
    #[error("--{0} names no value")]
    Empty(&'static str),
    #[error("each --{what} value must be 1..={max}, not {value}")]
    OutOfRange {
        what: &'static str,
        value: usize,
        max: usize,
    },
}

impl GridOptions {
    /// The grid with each axis sorted and without repeats; an error for an
    /// empty axis or a value out of bounds.
    pub fn normalized(&self) -> Result<GridOptions, GridError> {
        let axis = |what: &'static str, values: &[usize], max: usize| {
            if values.is_empty() {
                return Err(GridError::Empty(what));
            }
            if let Some(&value) = values.iter().find(|v| !(1..=max).contains(*v)) {
                return Err(GridError::OutOfRange { what, value, max });
            }
            let mut sorted = values.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            Ok(sorted)
        };
        if !(1..=PASSES_MAX).contains(&self.passes) {
            return Err(GridError::OutOfRange {
                what: "passes",
                value: self.passes,
                max: PASSES_MAX,
            });
        }
        Ok(GridOptions {
            pending: axis("pending", &self.pending, PENDING_MAX)?,
            hosts: axis("hosts", &self.hosts, HOSTS_MAX)?,
            passes: self.passes,
        })
    }
}

/// One cell: `passes` passes on one state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub pending: usize,
    pub hosts: usize,
    pub passes: usize,
    /// Wall time per pass, ms: median (lower of the middle two) and max.
    pub pass_ms_p50: f64,
    pub pass_ms_max: f64,
    /// The thread's mean CPU time per pass, ms (None where the kernel does
    /// not expose it): on a loaded machine the wall time includes waits
    /// for a CPU, this does not.
    pub cpu_ms_mean: Option<f64>,
    /// Jobs the pass starts (single-host and gangs).
    pub started_per_pass: usize,
}

impl Cell {
    /// From the wall time of each pass (ms), the CPU time of each pass
    /// where known, and the jobs a pass started.
    pub fn new(
        pending: usize,
        hosts: usize,
        pass_ms: &[f64],
        cpu_ms: &[f64],
        started_per_pass: usize,
    ) -> Cell {
        // The p50 and max exactly as `berth sim bench-pass` reports them.
        let report = BenchReport::new(pending, hosts, pass_ms, started_per_pass);
        let cpu_ms_mean = (!cpu_ms.is_empty() && cpu_ms.len() == pass_ms.len())
            .then(|| round3(cpu_ms.iter().sum::<f64>() / cpu_ms.len() as f64));
        Cell {
            pending,
            hosts,
            passes: report.passes,
            pass_ms_p50: report.pass_ms_p50,
            pass_ms_max: report.pass_ms_max,
            cpu_ms_mean,
            started_per_pass,
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

fn round2(x: f64) -> f64 {
    (x * 1e2).round() / 1e2
}

/// Wall time, and this thread's CPU time from Linux `schedstat`.
struct Clocks(Instant);

impl PassClock for Clocks {
    fn wall_ms(&mut self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1e3
    }

    fn cpu_ms(&mut self) -> Option<f64> {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
        Some(ns as f64 / 1e6)
    }
}

/// Builds the state and times `passes` passes on it.
pub fn measure_cell(pending: usize, hosts: usize, passes: usize) -> Cell {
    let snapshot = bench_snapshot(pending, hosts, SEED);
    let times = time_passes(
        &snapshot,
        &bench_policy(),
        passes,
        &mut Clocks(Instant::now()),
    );
    Cell::new(
        pending,
        hosts,
        &times.wall_ms,
        &times.cpu_ms,
        times.started_per_pass,
    )
}

/// The grid's results, as `--json` writes them (with `growth` added).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassGrid {
    pub seed: u64,
    pub passes: usize,
    /// The axes, ascending.
    pub pending: Vec<usize>,
    pub hosts: Vec<usize>,
    /// Row by row: every host count for the first pending count, then the
    /// next.
    pub cells: Vec<Cell>,
    /// The 1-minute load average when the run started (the machine may be
    /// shared); empty where unknown.
    #[serde(default)]
    pub load_avg_1m_before: String,
}

/// Runs every cell, smallest pending count first; `on_cell` sees each as
/// it is measured (for progress).
pub fn run(options: &GridOptions, mut on_cell: impl FnMut(&Cell)) -> Result<PassGrid, GridError> {
    let options = options.normalized()?;
    let load_avg_1m_before = crate::bench::load_average();
    let mut cells = Vec::with_capacity(options.pending.len() * options.hosts.len());
    for &pending in &options.pending {
        for &hosts in &options.hosts {
            let cell = measure_cell(pending, hosts, options.passes);
            on_cell(&cell);
            cells.push(cell);
        }
    }
    Ok(PassGrid {
        seed: SEED,
        passes: options.passes,
        pending: options.pending,
        hosts: options.hosts,
        cells,
        load_avg_1m_before,
    })
}

/// `n` with a comma every three digits.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl PassGrid {
    pub fn cell(&self, pending: usize, hosts: usize) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.pending == pending && c.hosts == hosts)
    }

    pub fn p50(&self, pending: usize, hosts: usize) -> Option<f64> {
        self.cell(pending, hosts).map(|c| c.pass_ms_p50)
    }

    /// How much the p50 grows from the fewest to the most pending jobs at
    /// `hosts` hosts (None with one pending count or a zero time).
    pub fn growth_with_pending(&self, hosts: usize) -> Option<f64> {
        let (&first, &last) = (self.pending.first()?, self.pending.last()?);
        ratio(
            self.p50(first, hosts)?,
            self.p50(last, hosts)?,
            first == last,
        )
    }

    /// How much the p50 grows from the fewest to the most hosts at
    /// `pending` pending jobs.
    pub fn growth_with_hosts(&self, pending: usize) -> Option<f64> {
        let (&first, &last) = (self.hosts.first()?, self.hosts.last()?);
        ratio(
            self.p50(pending, first)?,
            self.p50(pending, last)?,
            first == last,
        )
    }

    /// The table `bench pass-grid` prints: a row per pending count, a
    /// column per host count, p50 ms; the last column is the growth along
    /// the row (fewest to most hosts), the last row the growth down the
    /// column (fewest to most pending jobs); then each target met or not.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pass p50 ms ({} passes of schedule(), seed {}; rows pending jobs, columns hosts)",
            self.passes, self.seed
        );
        let width = 9;
        let _ = write!(out, "{:>width$} |", "pending");
        for &h in &self.hosts {
            let _ = write!(out, " {:>width$}", thousands(h));
        }
        let _ = writeln!(out, " | {:>7}", "×hosts");
        let _ = writeln!(
            out,
            "{}",
            "-".repeat(width + 2 + (width + 1) * self.hosts.len() + 10)
        );
        for &p in &self.pending {
            let _ = write!(out, "{:>width$} |", thousands(p));
            for &h in &self.hosts {
                let _ = write!(out, " {:>width$}", fmt_ms(self.p50(p, h)));
            }
            let _ = writeln!(out, " | {:>7}", fmt_factor(self.growth_with_hosts(p)));
        }
        let _ = write!(out, "{:>width$} |", "×pending");
        for &h in &self.hosts {
            let _ = write!(out, " {:>width$}", fmt_factor(self.growth_with_pending(h)));
        }
        out.push('\n');
        for line in self.target_lines() {
            let _ = writeln!(out, "{line}");
        }
        out
    }

    /// One line per target whose cell is in the grid.
    pub fn target_lines(&self) -> Vec<String> {
        TARGETS
            .iter()
            .filter_map(|&(pending, hosts, limit)| {
                let p50 = self.p50(pending, hosts)?;
                Some(format!(
                    "target {} pending × {} hosts ≤ {limit} ms: {p50:.2} ms, {}",
                    thousands(pending),
                    thousands(hosts),
                    if p50 <= limit { "met" } else { "NOT met" }
                ))
            })
            .collect()
    }

    /// What `--json` writes: the grid, the growth factors and the targets.
    pub fn to_json(&self) -> serde_json::Value {
        let growth_with_pending: Vec<_> = self
            .hosts
            .iter()
            .map(|&h| {
                serde_json::json!({
                    "hosts": h,
                    "pending_from": self.pending.first(),
                    "pending_to": self.pending.last(),
                    "factor": self.growth_with_pending(h).map(round2),
                })
            })
            .collect();
        let growth_with_hosts: Vec<_> = self
            .pending
            .iter()
            .map(|&p| {
                serde_json::json!({
                    "pending": p,
                    "hosts_from": self.hosts.first(),
                    "hosts_to": self.hosts.last(),
                    "factor": self.growth_with_hosts(p).map(round2),
                })
            })
            .collect();
        let targets: Vec<_> = TARGETS
            .iter()
            .filter_map(|&(pending, hosts, limit)| {
                let p50 = self.p50(pending, hosts)?;
                Some(serde_json::json!({
                    "pending": pending,
                    "hosts": hosts,
                    "limit_ms": limit,
                    "pass_ms_p50": p50,
                    "met": p50 <= limit,
                }))
            })
            .collect();
        let mut value = serde_json::json!({ "bench": "pass-grid" });
        if let (Some(object), Ok(serde_json::Value::Object(grid))) =
            (value.as_object_mut(), serde_json::to_value(self))
        {
            object.extend(grid);
            object.insert("growth_with_pending".into(), growth_with_pending.into());
            object.insert("growth_with_hosts".into(), growth_with_hosts.into());
            object.insert("targets".into(), targets.into());
        }
        value
    }
}

fn ratio(from: f64, to: f64, same: bool) -> Option<f64> {
    (!same && from > 0.0).then(|| to / from)
}

fn fmt_ms(ms: Option<f64>) -> String {
    match ms {
        Some(ms) if ms >= 100.0 => format!("{ms:.1}"),
        Some(ms) => format!("{ms:.2}"),
        None => "-".into(),
    }
}

fn fmt_factor(factor: Option<f64>) -> String {
    factor.map_or_else(|| "-".into(), |f| format!("×{f:.1}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn cell(pending: usize, hosts: usize, p50: f64) -> Cell {
        Cell {
            pending,
            hosts,
            passes: 10,
            pass_ms_p50: p50,
            pass_ms_max: p50 * 2.0,
            cpu_ms_mean: Some(p50),
            started_per_pass: 7,
        }
    }

    /// A 2 × 2 grid: 10k/100k pending × 1k/10k hosts.
    pub(crate) fn two_by_two() -> PassGrid {
        PassGrid {
            seed: SEED,
            passes: 10,
            pending: vec![10_000, 100_000],
            hosts: vec![1_000, 10_000],
            cells: vec![
                cell(10_000, 1_000, 7.5),
                cell(10_000, 10_000, 45.0),
                cell(100_000, 1_000, 30.0),
                cell(100_000, 10_000, 300.0),
            ],
            load_avg_1m_before: "1.00".into(),
        }
    }

    #[test]
    fn options_are_sorted_deduplicated_and_bounded() {
        let options = GridOptions {
            pending: vec![100_000, 1_000, 10_000, 1_000],
            hosts: vec![10_000, 100],
            passes: 10,
        };
        assert_eq!(
            options.normalized(),
            Ok(GridOptions {
                pending: vec![1_000, 10_000, 100_000],
                hosts: vec![100, 10_000],
                passes: 10,
            })
        );
        let empty = GridOptions {
            hosts: vec![],
            ..options.clone()
        };
        assert_eq!(empty.normalized(), Err(GridError::Empty("hosts")));
        let zero = GridOptions {
            pending: vec![0],
            ..options.clone()
        };
        assert_eq!(
            zero.normalized(),
            Err(GridError::OutOfRange {
                what: "pending",
                value: 0,
                max: PENDING_MAX
            })
        );
        let no_passes = GridOptions {
            passes: 0,
            ..options
        };
        assert!(matches!(
            no_passes.normalized(),
            Err(GridError::OutOfRange { what: "passes", .. })
        ));
    }

    #[test]
    fn a_cell_takes_the_median_and_the_mean_cpu() {
        let c = Cell::new(1_000, 100, &[3.0, 1.0, 2.0, 10.0], &[1.0, 1.0, 2.0, 4.0], 5);
        // The lower of the middle two, as `berth sim bench-pass` reports.
        assert_eq!(c.pass_ms_p50, 2.0);
        assert_eq!(c.pass_ms_max, 10.0);
        assert_eq!(c.cpu_ms_mean, Some(2.0));
        assert_eq!(c.passes, 4);
        // CPU times for only some passes are not averaged.
        assert_eq!(Cell::new(1, 1, &[1.0, 2.0], &[1.0], 0).cpu_ms_mean, None);
    }

    #[test]
    fn a_small_cell_is_measured_on_the_bench_state() {
        let c = measure_cell(200, 20, 2);
        assert_eq!((c.pending, c.hosts, c.passes), (200, 20, 2));
        assert!(c.started_per_pass > 0);
    }

    #[test]
    fn growth_factors_run_from_the_first_to_the_last_value() {
        let grid = two_by_two();
        assert_eq!(grid.growth_with_pending(1_000), Some(4.0));
        assert_eq!(grid.growth_with_pending(10_000), Some(300.0 / 45.0));
        assert_eq!(grid.growth_with_hosts(10_000), Some(6.0));
        assert_eq!(grid.growth_with_hosts(100_000), Some(10.0));
        assert_eq!(grid.growth_with_hosts(5), None);
        let mut one_column = grid.clone();
        one_column.hosts = vec![1_000];
        assert_eq!(one_column.growth_with_hosts(10_000), None);
    }

    #[test]
    fn the_table_has_a_row_per_pending_count_and_the_growth() {
        let table = two_by_two().table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "pass p50 ms (10 passes of schedule(), seed 1; rows pending jobs, columns hosts)"
        );
        assert_eq!(lines[1], "  pending |     1,000    10,000 |  ×hosts");
        assert_eq!(lines[3], "   10,000 |      7.50     45.00 |    ×6.0");
        assert_eq!(lines[4], "  100,000 |     30.00     300.0 |   ×10.0");
        assert_eq!(lines[5], " ×pending |      ×4.0      ×6.7");
        assert_eq!(
            lines[6],
            "target 10,000 pending × 1,000 hosts ≤ 15 ms: 7.50 ms, met"
        );
        assert_eq!(
            lines[7],
            "target 100,000 pending × 10,000 hosts ≤ 250 ms: 300.00 ms, NOT met"
        );
        assert_eq!(lines.len(), 8);
    }

    #[test]
    fn the_json_holds_the_cells_growth_and_targets_and_reads_back() {
        let grid = two_by_two();
        let json = grid.to_json();
        assert_eq!(json["bench"], "pass-grid");
        assert_eq!(json["cells"].as_array().map(Vec::len), Some(4));
        assert_eq!(json["cells"][1]["pass_ms_p50"], 45.0);
        assert_eq!(json["growth_with_pending"][1]["hosts"], 10_000);
        assert_eq!(json["growth_with_pending"][1]["factor"], 6.67);
        assert_eq!(json["growth_with_hosts"][0]["factor"], 6.0);
        assert_eq!(json["targets"][0]["met"], true);
        assert_eq!(json["targets"][1]["met"], false);
        let back: PassGrid = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, grid);
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(100), "100");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(100_000), "100,000");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
