//! `berth sim`: the simulator (SIM.md). The scheduling and the simulation
//! are `berth_sim`, pure; this module reads the files (and
//! un-gzips traces) and measures wall time, which the library may not.

use super::output;
use anyhow::{bail, Context as _, Result};
use berth_sim::bench::{bench_policy, bench_snapshot, time_passes, BenchReport, PassClock};
use berth_sim::farm::{run_farm, FarmConfig};
use berth_sim::plot::timeline_svg;
use berth_sim::run_scenario;
use berth_sim::swf::{run_swf_with, summary_line, SwfOptions};
use berth_sim::Progress;
use clap::{Args, Subcommand, ValueEnum};
use std::io::{IsTerminal as _, Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Most passes `bench-pass` runs: enough for a stable median.
pub const BENCH_PASSES_MAX: usize = 10_000;

#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Run a scenario file and print its events as JSON lines
    Run(RunArgs),
    /// Replay a Standard Workload Format trace and print one summary line
    Swf(SwfArgs),
    /// Time full scheduling passes on a seeded cluster state
    BenchPass(BenchArgs),
    /// Run a seeded emulator farm single-path then multi-path and print
    /// one line of figures for each (docs/multi-path.md)
    Farm(FarmArgs),
}

#[derive(Args, Debug)]
pub struct FarmArgs {
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Emulator groups (one host of 4 units each)
    #[arg(long, value_name = "G", default_value_t = 64)]
    pub groups: u32,
    /// Long exclusive jobs, each accepting --alternatives groups
    #[arg(long, value_name = "N", default_value_t = 900)]
    pub long_jobs: u32,
    #[arg(long, value_name = "K", default_value_t = 12)]
    pub alternatives: u32,
    /// One-unit filler jobs
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub filler_jobs: u32,
    /// EASY heads; the same number hold every alternative when multi-path
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub bf_reservations: usize,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Scenario file (TOML)
    #[arg(long, value_name = "FILE.toml")]
    pub scenario: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SwfPolicy {
    /// First come, first served: no backfill
    Fcfs,
    /// EASY backfill
    Easy,
}

#[derive(Args, Debug)]
pub struct SwfArgs {
    /// Trace file, plain or gzip-compressed (.swf or .swf.gz)
    #[arg(long, value_name = "FILE.swf[.gz]")]
    pub trace: PathBuf,
    /// CPUs per host
    #[arg(long, value_name = "C")]
    pub cpus_per_node: u32,
    /// Hosts [default: the header's MaxProcs / C]
    #[arg(long, value_name = "N")]
    pub hosts: Option<u32>,
    #[arg(long, value_enum, default_value = "easy")]
    pub policy: SwfPolicy,
    /// Replay only the first K jobs
    #[arg(long, value_name = "K")]
    pub max_jobs: Option<usize>,
    /// Write utilization and queue length over time as an SVG
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Pending jobs
    #[arg(long, value_name = "N")]
    pub pending: usize,
    /// Hosts
    #[arg(long, value_name = "M")]
    pub hosts: usize,
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    #[arg(long, value_name = "P", default_value_t = 10)]
    pub passes: usize,
}

pub fn run(command: SimCommand) -> Result<ExitCode> {
    match command {
        SimCommand::Run(args) => {
            let text = read_text(&args.scenario)?;
            let lines = run_scenario(&text, &args.scenario.display().to_string())?;
            output::emit(&lines)?;
        }
        SimCommand::Swf(args) => {
            let text = read_text(&args.trace)?;
            let options = SwfOptions {
                cpus_per_node: args.cpus_per_node,
                hosts: args.hosts,
                backfill: args.policy == SwfPolicy::Easy,
                max_jobs: args.max_jobs,
            };
            let file = args.trace.display().to_string();
            let mut bar = ProgressBar::new(std::io::stderr().is_terminal());
            let started = Instant::now();
            let replay = run_swf_with(&text, &file, &options, &mut |p| bar.update(p))?;
            let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            bar.finish();
            if let Some(path) = &args.plot {
                let title = format!("{file} ({:?})", args.policy).to_lowercase();
                std::fs::write(path, timeline_svg(&replay.timeline, &title))
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            output::emit(&format!("{}\n", summary_line(&replay, wall_ms)?))?;
        }
        SimCommand::BenchPass(args) => {
            if args.passes == 0 || args.passes > BENCH_PASSES_MAX {
                bail!(
                    "--passes: expected 1 to {BENCH_PASSES_MAX}, not {}",
                    args.passes
                );
            }
            if args.hosts == 0 {
                bail!("--hosts: expected at least 1");
            }
            let snapshot = bench_snapshot(args.pending, args.hosts, args.seed);
            let policy = bench_policy();
            let times = time_passes(&snapshot, &policy, args.passes, &mut WallClock::new());
            let report = BenchReport::new(
                args.pending,
                args.hosts,
                &times.wall_ms,
                times.started_per_pass,
            );
            output::emit(&format!("{}\n", serde_json::to_string(&report)?))?;
        }
        SimCommand::Farm(args) => {
            let config = FarmConfig {
                seed: args.seed,
                groups: args.groups,
                long_jobs: args.long_jobs,
                alternatives: args.alternatives,
                filler_jobs: args.filler_jobs,
                bf_reservations: args.bf_reservations,
                top_n: args.bf_reservations,
                ..FarmConfig::default()
            };
            let mut lines = String::new();
            for multi_path in [false, true] {
                let figures = run_farm(&config, multi_path)?;
                lines.push_str(&serde_json::to_string(&figures)?);
                lines.push('\n');
            }
            output::emit(&lines)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A one-line progress bar on stderr, drawn only when stderr is a
/// terminal and at most every `PROGRESS_REDRAW_MS`, so that it costs the
/// replay nothing measurable.
struct ProgressBar {
    enabled: bool,
    last_draw: Option<Instant>,
    drawn: bool,
}

const PROGRESS_REDRAW_MS: u128 = 100;
const PROGRESS_BAR_CELLS: usize = 40;

impl ProgressBar {
    fn new(enabled: bool) -> ProgressBar {
        ProgressBar {
            enabled,
            last_draw: None,
            drawn: false,
        }
    }

    fn update(&mut self, p: Progress) {
        if !self.enabled {
            return;
        }
        if self
            .last_draw
            .is_some_and(|t| t.elapsed().as_millis() < PROGRESS_REDRAW_MS)
        {
            return;
        }
        self.last_draw = Some(Instant::now());
        let fraction = if p.jobs_total == 0 {
            1.0
        } else {
            p.jobs_submitted as f64 / p.jobs_total as f64
        };
        let filled = ((fraction * PROGRESS_BAR_CELLS as f64) as usize).min(PROGRESS_BAR_CELLS);
        let mut err = std::io::stderr().lock();
        // A failed draw only loses the bar, never the replay.
        let _ = write!(
            err,
            "\r[{}{}] {:>3.0}% {}/{} jobs submitted, day {}",
            "#".repeat(filled),
            " ".repeat(PROGRESS_BAR_CELLS - filled),
            fraction * 100.0,
            p.jobs_submitted,
            p.jobs_total,
            p.t_s / 86_400
        );
        let _ = err.flush();
        self.drawn = true;
    }

    fn finish(&mut self) {
        if self.drawn {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// The file's text; gzip (by its magic bytes) is decompressed first.
fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    decode(bytes).with_context(|| format!("cannot read {}", path.display()))
}

/// The most a gzip trailer's size hint reserves up front; a larger text
/// grows as it is read.
const GZIP_SIZE_HINT_MAX: usize = 256 * 1024 * 1024;

fn decode(bytes: Vec<u8>) -> Result<String> {
    const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
    let raw = if bytes.starts_with(&GZIP_MAGIC) {
        // The trailer's last 4 bytes are the (last member's) text size mod
        // 2^32: a hint, so that a 20 MB trace is not read into a buffer
        // that doubles, copies and faults in fresh pages again and again.
        let hint = bytes
            .last_chunk::<4>()
            .map_or(0, |t| u32::from_le_bytes(*t) as usize)
            .min(GZIP_SIZE_HINT_MAX);
        let mut out = Vec::with_capacity(hint);
        flate2::read::MultiGzDecoder::new(bytes.as_slice())
            .read_to_end(&mut out)
            .context("not valid gzip")?;
        out
    } else {
        bytes
    };
    String::from_utf8(raw)
        .map_err(|e| anyhow::anyhow!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

/// Wall time for `bench-pass` (the scheduler reads no clock itself).
struct WallClock(Instant);

impl WallClock {
    fn new() -> WallClock {
        WallClock(Instant::now())
    }
}

impl PassClock for WallClock {
    fn wall_ms(&mut self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1e3
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gzip_and_plain_text_read_the_same() {
        let text = "; MaxProcs: 4\n1 0 -1 100 4 -1 -1 4 100 -1 1 1 1 -1 1 1 -1 -1\n";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let packed = gz.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(decode(packed).ok().as_deref(), Some(text));
        assert_eq!(decode(text.as_bytes().to_vec()).ok().as_deref(), Some(text));
        assert!(decode(vec![0x1f, 0x8b, 0, 1, 2]).is_err());
        assert!(decode(vec![0xff, 0xfe]).is_err());
    }
}
