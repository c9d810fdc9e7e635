//! Standard Workload Format trace replay (`berth sim swf`). A trace's job
//! runs for its recorded run time, bounded by its requested time, which is
//! also its time limit (the estimate backfill plans with); a job with no
//! requested time uses its run time as its limit.
//!
//! Processors map onto hosts of `cpus_per_node` CPUs: a job of P
//! processors asks for ceil(P / C) hosts with ceil(P / hosts) CPUs each,
//! shared with other jobs.

use serde::Serialize;

use berth_scheduler::model::{Host, Inventory, JobSpec};
use berth_scheduler::pass::{Policy, Snapshot};

use crate::engine::{simulate_with, Progress, SimInput, SimJob, SimStats, TimelinePoint};
use crate::SimError;

/// Who submits a trace's jobs: the replay has no policy, so no account
/// or fair share tells users apart.
const SWF_USER: &str = "swf";

/// Fields of a job line, as the Parallel Workloads Archive defines them.
pub const SWF_FIELDS: usize = 18;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwfOptions {
    pub cpus_per_node: u32,
    /// Default: the header's MaxProcs / cpus_per_node.
    pub hosts: Option<u32>,
    /// EASY backfill; `false` is FCFS.
    pub backfill: bool,
    /// Replay only the first K jobs that can run.
    pub max_jobs: Option<usize>,
}

/// A replay's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct SwfRun {
    pub stats: SimStats,
    pub hosts: u32,
    /// Job lines left out: no run time, no processors, or more processors
    /// than the cluster has.
    pub skipped: usize,
    /// What the trace's own scheduler did for the same jobs, from their
    /// recorded waits (field 3; jobs recording none, -1, are left out):
    /// mean wait and mean bounded slowdown over the recorded run times.
    pub recorded_mean_wait_s: f64,
    pub recorded_mean_bsld: f64,
    /// Utilization and queue length over time, down-sampled (`--plot`).
    pub timeline: Vec<TimelinePoint>,
}

/// Parses `text` (an SWF trace; `file` names it in errors) and replays it.
pub fn run_swf(text: &str, file: &str, options: &SwfOptions) -> Result<SwfRun, SimError> {
    run_swf_with(text, file, options, &mut |_| {})
}

/// [`run_swf`], calling `observe` after each simulated instant.
pub fn run_swf_with(
    text: &str,
    file: &str,
    options: &SwfOptions,
    observe: &mut dyn FnMut(Progress),
) -> Result<SwfRun, SimError> {
    let line_err = |line: usize, expected: String| SimError::Line {
        file: file.to_string(),
        line,
        expected,
    };
    if options.cpus_per_node == 0 {
        return Err(SimError::Invalid {
            file: file.to_string(),
            key: "--cpus-per-node".into(),
            expected: "a number of CPUs >= 1".into(),
        });
    }
    let mut max_procs: Option<u64> = None;
    // (line number, submit, run, procs, requested time, recorded wait or
    // -1 when the trace has none)
    let mut raw: Vec<(usize, u64, u64, u64, u64, i64)> = Vec::new();
    // One buffer for every line's fields: a trace has tens of thousands.
    let mut fields: Vec<&str> = Vec::with_capacity(SWF_FIELDS);
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix(';') {
            if let Some((key, value)) = header.split_once(':') {
                if key.trim() == "MaxProcs" {
                    let v = value.trim();
                    let procs = v.parse::<u64>().map_err(|_| {
                        line_err(line_no, format!("MaxProcs to be a whole number, not {v:?}"))
                    })?;
                    max_procs = Some(procs);
                }
            }
            continue;
        }
        fields.clear();
        fields.extend(line.split_whitespace());
        if fields.len() != SWF_FIELDS {
            return Err(line_err(
                line_no,
                format!(
                    "{SWF_FIELDS} whitespace-separated numbers, found {}",
                    fields.len()
                ),
            ));
        }
        let num = |i: usize| -> Result<i64, SimError> {
            let f = fields[i];
            f.parse::<i64>()
                .ok()
                .or_else(|| {
                    f.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .map(|x| x.round() as i64)
                })
                .ok_or_else(|| line_err(line_no, format!("a number in field {}, not {f:?}", i + 1)))
        };
        let (submit, wait, run, alloc, req_procs, req_time) =
            (num(1)?, num(2)?, num(3)?, num(4)?, num(7)?, num(8)?);
        let procs = if alloc > 0 { alloc } else { req_procs };
        if submit < 0 {
            return Err(line_err(line_no, "a submit time (field 2) >= 0".into()));
        }
        // No run time or no processors: nothing to replay.
        if run <= 0 || procs <= 0 {
            raw.push((line_no, 0, 0, 0, 0, -1));
            continue;
        }
        raw.push((
            line_no,
            submit as u64,
            run as u64,
            procs as u64,
            req_time.max(0) as u64,
            wait.max(-1),
        ));
    }
    let hosts_n = match options.hosts {
        Some(h) => h,
        None => {
            let procs = max_procs.ok_or_else(|| SimError::Invalid {
                file: file.to_string(),
                key: "MaxProcs".into(),
                expected: "a '; MaxProcs: N' header line, or --hosts".into(),
            })?;
            u32::try_from(procs / u64::from(options.cpus_per_node)).unwrap_or(u32::MAX)
        }
    };
    if hosts_n == 0 {
        return Err(SimError::Invalid {
            file: file.to_string(),
            key: "--hosts".into(),
            expected: "at least one host (MaxProcs / cpus-per-node is 0)".into(),
        });
    }
    let c = u64::from(options.cpus_per_node);
    let mut jobs = Vec::with_capacity(raw.len());
    let mut skipped = 0usize;
    let (mut recorded_wait_s, mut recorded_bsld, mut recorded_n) = (0.0f64, 0.0f64, 0u64);
    for (line_no, submit, run, procs, req_time, wait) in raw {
        if options.max_jobs.is_some_and(|k| jobs.len() >= k) {
            break;
        }
        let nodes = procs.div_ceil(c);
        if procs == 0 || nodes > u64::from(hosts_n) {
            skipped += 1;
            continue;
        }
        let cpus = u32::try_from(procs.div_ceil(nodes)).unwrap_or(u32::MAX);
        let limit = if req_time > 0 { req_time } else { run };
        if wait >= 0 {
            let wait_s = wait as f64;
            recorded_wait_s += wait_s;
            recorded_bsld += ((wait_s + run as f64) / run.max(10) as f64).max(1.0);
            recorded_n += 1;
        }
        let mut spec = JobSpec {
            cpus,
            nodes: nodes as u32,
            time_limit_s: limit,
            user: SWF_USER.into(),
            ..JobSpec::default()
        };
        spec.name = line_no.to_string();
        jobs.push(SimJob {
            runtime_s: Some(run.min(limit)),
            ..SimJob::new(line_no.to_string(), submit, spec)
        });
    }
    let hosts = (1..=hosts_n)
        .map(|i| {
            Host::new(
                format!("n{i:05}"),
                Inventory::cpu_mem(options.cpus_per_node, 0),
            )
        })
        .collect();
    let input = SimInput {
        hosts,
        jobs,
        events: Vec::new(),
        policy: Policy {
            backfill: options.backfill,
            ..Policy::default()
        },
        world: Snapshot::default(),
        until_s: None,
        emit_events: false,
        stop_grace_s: crate::scenario::STOP_GRACE_S_DEFAULT,
    };
    let output = simulate_with(&input, observe)?;
    let per_job = |sum: f64| {
        if recorded_n == 0 {
            0.0
        } else {
            crate::engine::round6(sum / recorded_n as f64)
        }
    };
    Ok(SwfRun {
        stats: output.stats,
        hosts: hosts_n,
        skipped,
        recorded_mean_wait_s: per_job(recorded_wait_s),
        recorded_mean_bsld: per_job(recorded_bsld),
        timeline: output.timeline,
    })
}

#[derive(Serialize)]
struct SwfSummary {
    event: &'static str,
    jobs: usize,
    mean_wait_s: f64,
    mean_bsld: f64,
    p95_wait_s: u64,
    utilization: f64,
    makespan_s: u64,
    sim_wall_ms: u64,
    passes: u64,
    hosts: u32,
    skipped: usize,
    recorded_mean_wait_s: f64,
    recorded_mean_bsld: f64,
}

/// The one summary line `berth sim swf` prints; `sim_wall_ms` is measured
/// by the caller (this crate reads no clock).
pub fn summary_line(run: &SwfRun, sim_wall_ms: u64) -> Result<String, SimError> {
    let s = &run.stats;
    serde_json::to_string(&SwfSummary {
        event: "summary",
        jobs: s.jobs,
        mean_wait_s: s.mean_wait_s,
        mean_bsld: s.mean_bsld,
        p95_wait_s: s.p95_wait_s,
        utilization: s.utilization,
        makespan_s: s.makespan_s,
        sim_wall_ms,
        passes: s.passes,
        hosts: run.hosts,
        skipped: run.skipped,
        recorded_mean_wait_s: run.recorded_mean_wait_s,
        recorded_mean_bsld: run.recorded_mean_bsld,
    })
    .map_err(|e| SimError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "; MaxProcs: 4\n\
        1 0 -1 100 4 -1 -1 4 100 -1 1 1 1 -1 1 1 -1 -1\n\
        2 10 -1 500 4 -1 -1 4 600 -1 1 1 1 -1 1 1 -1 -1\n\
        3 20 -1 50 1 -1 -1 1 50 -1 1 1 1 -1 1 1 -1 -1\n\
        4 30 -1 0 1 -1 -1 1 50 -1 1 1 1 -1 1 1 -1 -1\n";

    fn opts(backfill: bool) -> SwfOptions {
        SwfOptions {
            cpus_per_node: 1,
            hosts: None,
            backfill,
            max_jobs: None,
        }
    }

    #[test]
    fn replays_a_tiny_trace_with_and_without_backfill() {
        // Job 1 holds all 4 CPUs until 100; job 2 needs all 4 for 500 s;
        // job 3 (1 CPU, 50 s) waits behind 2 under FCFS, starting at 600.
        let fcfs = run_swf(TRACE, "t.swf", &opts(false)).unwrap();
        assert_eq!(fcfs.hosts, 4);
        assert_eq!(fcfs.skipped, 1);
        assert_eq!(fcfs.stats.jobs, 3);
        // waits: 0, 90, 580
        assert_eq!(fcfs.stats.mean_wait_s, round3(670.0 / 3.0));
        assert_eq!(fcfs.stats.makespan_s, 650);
        // Under EASY job 3 cannot fit before 100 either (all CPUs are
        // busy), and at 100 it would delay job 2: the same schedule.
        let easy = run_swf(TRACE, "t.swf", &opts(true)).unwrap();
        assert_eq!(easy.stats.mean_wait_s, fcfs.stats.mean_wait_s);
        // The trace records no waits (-1): nothing to compare with.
        assert_eq!(easy.recorded_mean_wait_s, 0.0);
    }

    #[test]
    fn recorded_waits_give_the_production_figures() {
        // Waits 0 and 20 recorded; runs 100 and 5 (bounded at 10):
        // bsld 1 and (20 + 5) / 10 = 2.5.
        let trace = "; MaxProcs: 4\n\
            1 0 0 100 4 -1 -1 4 100 -1 1 1 1 -1 1 1 -1 -1\n\
            2 10 20 5 1 -1 -1 1 50 -1 1 1 1 -1 1 1 -1 -1\n";
        let run = run_swf(trace, "t.swf", &opts(true)).unwrap();
        assert_eq!(run.recorded_mean_wait_s, 10.0);
        assert_eq!(run.recorded_mean_bsld, 1.75);
        let line = summary_line(&run, 0).unwrap();
        assert!(line.contains("\"recorded_mean_wait_s\":10.0"), "{line}");
    }

    fn round3(x: f64) -> f64 {
        crate::engine::round6(x)
    }

    #[test]
    fn names_the_line_of_a_malformed_job() {
        let err = run_swf("; MaxProcs: 4\n1 2 3\n", "bad.swf", &opts(true)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad.swf: line 2: expected 18 whitespace-separated numbers, found 3"
        );
        let err = run_swf(
            "1 0 -1 100 4 -1 -1 4 100 -1 1 1 1 -1 1 1 -1 -1\n",
            "x.swf",
            &opts(true),
        )
        .unwrap_err();
        assert!(err.to_string().contains("MaxProcs"), "{err}");
    }
}
