//! The simulator behind `berth sim` (the contract is SIM.md): the real
//! [`schedule`](crate::schedule) on a virtual clock. Pure like the rest of
//! the crate: it takes the text of a scenario or trace and returns JSON
//! lines; the CLI reads files, decompresses and times.
//!
//! - [`run_scenario`]: `berth sim run` (scenario TOML → event lines + summary);
//! - [`swf`]: `berth sim swf` (Standard Workload Format trace replay);
//! - [`bench`]: `berth sim bench-pass` (a seeded cluster state to time passes on).

pub mod bench;
pub mod engine;
pub mod hostlist;
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
}

/// Runs a scenario file's text (`file` names it in errors) and returns the
/// JSON lines `berth sim run` prints, summary last.
pub fn run_scenario(text: &str, file: &str) -> Result<String, SimError> {
    let scenario = parse_scenario(text, file)?;
    let input = SimInput {
        hosts: scenario.hosts,
        jobs: scenario.jobs,
        events: scenario.events,
        policy: scenario.policy,
        world: scenario.world,
        until_s: scenario.until_s,
        emit_events: true,
    };
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
    };
    let mut lines = output.lines;
    lines
        .push_str(&serde_json::to_string(&summary).map_err(|e| SimError::Internal(e.to_string()))?);
    lines.push('\n');
    Ok(lines)
}
