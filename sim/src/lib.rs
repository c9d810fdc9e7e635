//! The simulator behind `berth sim` (the contract is SIM.md): the
//! cluster's own state machine (`berth_state`) and leader pass on a
//! virtual clock. Pure like
//! the scheduler: it takes the text of a scenario or trace and returns
//! JSON lines; the CLI reads files, decompresses and times.
//!
//! - [`run_scenario`]: `berth sim run` (scenario TOML → event lines + summary);
//! - [`swf`]: `berth sim swf` (Standard Workload Format trace replay);
//! - [`bench`](mod@bench): `berth sim bench-pass` (a seeded cluster state to time passes on).

pub mod bench;
pub mod engine;
pub mod farm;
pub mod gpu_teams;
pub mod hostlist;
mod multipath_log;
pub mod plot;
pub mod scenario;
pub mod swf;

use serde::Serialize;

pub use engine::{
    simulate, simulate_with, Progress, SimAction, SimEvent, SimInput, SimJob, SimOutput, SimStats,
    TimelinePoint,
};
pub use scenario::{parse_scenario, Scenario};

/// Why a simulation could not run. Each names the file and what was wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    #[error("{file}: {key}: expected {expected}")]
    Invalid {
        file: String,
        key: String,
        expected: String,
    },
    #[error("{file}: {key} is not supported by this simulator yet")]
    Unsupported { file: String, key: String },
    #[error("{file}: unknown key {key}")]
    UnknownKey { file: String, key: String },
    #[error("{file}: not valid TOML: {message}")]
    Toml { file: String, message: String },
    #[error("{file}: line {line}: expected {expected}")]
    Line {
        file: String,
        line: usize,
        expected: String,
    },
    /// A scenario key of the wrong kind, where serde tells the line.
    #[error("{file}: line {line}: {key}: expected {expected}")]
    InvalidAt {
        file: String,
        line: usize,
        key: String,
        expected: String,
    },
    /// An unknown scenario key, at its line.
    #[error("{file}: line {line}: unknown key {key}")]
    UnknownKeyAt {
        file: String,
        line: usize,
        key: String,
    },
    /// A required scenario key left out, at the line of its table.
    #[error("{file}: line {line}: missing key {key}")]
    MissingKeyAt {
        file: String,
        line: usize,
        key: String,
    },
    #[error("simulator bug: {0}")]
    Internal(String),
}

#[derive(Serialize)]
struct ScenarioSummary {
    event: &'static str,
    jobs: usize,
    completed: usize,
    mean_wait_s: f64,
    mean_bsld: f64,
    utilization: f64,
    makespan_s: u64,
    /// With preemption enabled only, so other scenarios' lines stay as
    /// they were.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    preemption: Option<PreemptSummary>,
    /// With idle-fill on: starts on lent capacity and runs reclaimed.
    #[serde(skip_serializing_if = "Option::is_none")]
    borrowed_starts: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reclaims: Option<usize>,
}

/// The preemption metrics the reference names, over the whole run.
#[derive(Serialize)]
struct PreemptSummary {
    /// Victims chosen, and how they ended up.
    evictions: u64,
    preempted_requeued: u64,
    preempted_cancelled: u64,
    /// Blocked jobs (per pass) that looked for victims and found none that
    /// would let them start.
    preemption_misses: u64,
    /// Candidates turned down only for the priority gap.
    preemption_near_misses: u64,
    /// Mean wait of a blocked job when its victims were chosen.
    blocked_before_eviction_s_mean: f64,
}

/// Runs a scenario file's text (`file` names it in errors) and returns the
/// JSON lines `berth sim run` prints, summary last.
pub fn run_scenario(text: &str, file: &str) -> Result<String, SimError> {
    let scenario = parse_scenario(text, file)?;
    let preemption_enabled = scenario.policy.preemption.enabled;
    let input = SimInput {
        hosts: scenario.hosts,
        jobs: scenario.jobs,
        events: scenario.events,
        policy: scenario.policy,
        world: scenario.world,
        until_s: scenario.until_s,
        emit_events: true,
        stop_grace_s: scenario.stop_grace_s,
    };
    let idle_fill = input.policy.idle_fill.enabled;
    let output = simulate(&input)?;
    let s = &output.stats;
    let summary = ScenarioSummary {
        event: "summary",
        jobs: s.jobs,
        completed: s.completed,
        mean_wait_s: s.mean_wait_s,
        mean_bsld: s.mean_bsld,
        utilization: s.utilization,
        makespan_s: s.makespan_s,
        preemption: preemption_enabled.then(|| {
            let p = &s.preemption;
            // Blocked jobs that got victims: one per eviction set, counted
            // by the passes' `blocked_ms` sums over their evictions.
            let preemptors = p.preemptors.max(1) as f64;
            PreemptSummary {
                evictions: p.evictions,
                preempted_requeued: s.preempted_requeued,
                preempted_cancelled: s.preempted_cancelled,
                preemption_misses: p.misses,
                preemption_near_misses: p.near_misses,
                blocked_before_eviction_s_mean: engine::round6(
                    p.blocked_ms as f64 / 1000.0 / preemptors,
                ),
            }
        }),
        borrowed_starts: idle_fill.then_some(s.borrowed_starts),
        reclaims: idle_fill.then_some(s.reclaims),
    };
    let mut lines = output.lines;
    lines
        .push_str(&serde_json::to_string(&summary).map_err(|e| SimError::Internal(e.to_string()))?);
    lines.push('\n');
    Ok(lines)
}
