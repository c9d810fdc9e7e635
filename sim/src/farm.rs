//! A seeded emulator farm for measuring multi-path reservations: many
//! emulator groups, long exclusive emulation jobs that accept any of 10+
//! groups, and small filler jobs that take one unit anywhere. The same
//! farm is run with `reserve_all_alternatives` off and on, and the figures
//! compared: the long (head) jobs' mean wait and emulator utilization.
//!
//! Deterministic: the jobs come from a splitmix64 seeded by the caller.

use std::collections::BTreeMap;

use serde::Serialize;

use berth_scheduler::assoc::Account;
use berth_scheduler::model::{EmulatorInventory, Host, Inventory, JobSpec, Resources};
use berth_scheduler::partition::Partition;
use berth_scheduler::pass::{Policy, Shape, Snapshot};

use crate::bench::SplitMix64;
use crate::engine::submit_spec::{resource_set, set_shape};
use crate::engine::{simulate, SimInput, SimJob};
use crate::SimError;

/// The farm's size and load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FarmConfig {
    pub seed: u64,
    /// Emulator groups, one host of `units_per_group` units each.
    pub groups: u32,
    pub units_per_group: u32,
    /// Long exclusive jobs (a whole group each), and how many groups each
    /// accepts (its alternatives).
    pub long_jobs: u32,
    pub alternatives: u32,
    /// One-unit filler jobs.
    pub filler_jobs: u32,
    /// Submits are spread over this span.
    pub span_s: u64,
    /// EASY heads, and how many of them hold every alternative when
    /// multi-path is on.
    pub bf_reservations: usize,
    pub top_n: usize,
}

/// At most this many jobs of each kind: the generator's bound.
pub const FARM_JOBS_MAX: u32 = 100_000;

impl Default for FarmConfig {
    fn default() -> Self {
        FarmConfig {
            seed: 1,
            groups: 64,
            units_per_group: 4,
            long_jobs: 900,
            alternatives: 12,
            filler_jobs: 10_000,
            span_s: 4 * 86_400,
            bf_reservations: 1,
            top_n: 1,
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FarmFigures {
    pub multi_path: bool,
    /// Mean wait of the long (head) jobs that started.
    pub long_mean_wait_s: f64,
    pub long_started: usize,
    pub filler_mean_wait_s: f64,
    pub emu_utilization: f64,
    pub makespan_s: u64,
    /// Starts of jobs that held a multi-path reservation (the simulator's
    /// `reservation` dispatch lines).
    pub multi_path_dispatches: usize,
}

const LONG_NICE: i32 = 0;
/// Fillers rank below every long job whatever their age.
const FILLER_NICE: i32 = 100_000;

/// Builds the farm's simulator input.
pub fn farm_input(config: &FarmConfig, multi_path: bool) -> Result<SimInput, SimError> {
    if config.groups == 0
        || config.alternatives == 0
        || config.alternatives > config.groups
        || config.long_jobs > FARM_JOBS_MAX
        || config.filler_jobs > FARM_JOBS_MAX
        || config.units_per_group == 0
    {
        return Err(SimError::Invalid {
            file: "farm".into(),
            key: "config".into(),
            expected: format!(
                "groups >= alternatives >= 1, units >= 1, at most {FARM_JOBS_MAX} jobs of each kind"
            ),
        });
    }
    let mut rng = SplitMix64::new(config.seed);
    let hosts: Vec<Host> = (0..config.groups)
        .map(|g| {
            let mut inv = Inventory::cpu_mem(32, 256_000);
            inv.emulator = Some(EmulatorInventory {
                kind: "zebu".into(),
                group: format!("g{g:03}"),
                units: config.units_per_group,
            });
            let mut h = Host::new(format!("emu{g:03}"), inv);
            h.partitions = vec!["emu".into()];
            h
        })
        .collect();
    let mut jobs = Vec::new();
    let span_s = config.span_s.max(1);
    let group_shape = |g: u32| Shape {
        nodes: 1,
        per_host: Resources {
            cpus: 8,
            emu: config.units_per_group,
            ..Resources::default()
        },
        exclusive: true,
        emu_kind: "zebu".into(),
        emu_group: format!("g{g:03}"),
        ..Shape::default()
    };
    for k in 0..config.long_jobs {
        // 10+ distinct groups, in a random order (the first listed is
        // tried first).
        let mut groups: Vec<u32> = Vec::with_capacity(config.alternatives as usize);
        while groups.len() < config.alternatives as usize {
            let g = rng.below(u64::from(config.groups)) as u32;
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        let limit_s = 4 * 3_600 + rng.below(4 * 3_600);
        // Emulation runs mostly end well before their limit.
        let runtime_s = limit_s / 4 + rng.below(limit_s * 3 / 4);
        let mut spec = JobSpec {
            alternatives: groups
                .into_iter()
                .map(|g| resource_set(&group_shape(g), ""))
                .collect(),
            // Each alternative takes its group whole.
            exclusive: true,
            time_limit_s: limit_s,
            user: "emu".into(),
            nice: LONG_NICE,
            ..JobSpec::default()
        };
        spec.name = format!("L{k}");
        jobs.push(SimJob {
            runtime_s: Some(runtime_s),
            ..SimJob::new(format!("L{k}"), rng.below(span_s), spec)
        });
    }
    for k in 0..config.filler_jobs {
        let limit_s = 1_800 + rng.below(5_400);
        let runtime_s = limit_s / 2 + rng.below(limit_s / 2);
        let mut spec = JobSpec {
            time_limit_s: limit_s,
            user: "fill".into(),
            nice: FILLER_NICE,
            name: format!("F{k}"),
            ..JobSpec::default()
        };
        let filler = Shape {
            nodes: 1,
            per_host: Resources {
                cpus: 1,
                emu: 1,
                ..Resources::default()
            },
            emu_kind: "zebu".into(),
            ..Shape::default()
        };
        set_shape(&mut spec, &filler);
        jobs.push(SimJob {
            runtime_s: Some(runtime_s),
            ..SimJob::new(format!("F{k}"), rng.below(span_s), spec)
        });
    }
    // Submit order is file order within an instant: sort by time.
    jobs.sort_by_key(|j| j.submit_s);
    Ok(SimInput {
        hosts,
        jobs,
        events: Vec::new(),
        policy: Policy {
            bf_reservations: config.bf_reservations,
            reserve_all_alternatives_top_n: config.top_n,
            ..Policy::default()
        },
        world: Snapshot {
            partitions: vec![Partition {
                name: "emu".into(),
                default: true,
                reserve_all_alternatives: multi_path,
                ..Partition::default()
            }],
            qos: vec![berth_scheduler::qos::Qos::default()],
            accounts: vec![Account {
                name: "farm".into(),
                users: vec!["emu".into(), "fill".into()],
                ..Account::default()
            }],
            ..Snapshot::default()
        },
        until_s: None,
        emit_events: true,
        stop_grace_s: crate::scenario::STOP_GRACE_S_DEFAULT,
    })
}

/// Runs the farm once and measures it from its event lines.
pub fn run_farm(config: &FarmConfig, multi_path: bool) -> Result<FarmFigures, SimError> {
    let input = farm_input(config, multi_path)?;
    let output = simulate(&input)?;
    let mut submit_s: BTreeMap<String, u64> = BTreeMap::new();
    let (mut long_waits, mut filler_waits) = (Vec::new(), Vec::new());
    let mut dispatches = 0usize;
    for line in output.lines.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| SimError::Internal(e.to_string()))?;
        let job = v["job"].as_str().unwrap_or_default().to_string();
        let t_s = v["t_s"].as_u64().unwrap_or(0);
        match v["event"].as_str() {
            Some("submit") => {
                submit_s.insert(job, t_s);
            }
            Some("start") => {
                let wait = t_s.saturating_sub(submit_s.get(&job).copied().unwrap_or(t_s));
                if job.starts_with('L') {
                    long_waits.push(wait as f64);
                } else {
                    filler_waits.push(wait as f64);
                }
            }
            Some("reservation") => dispatches += 1,
            _ => {}
        }
    }
    let mean = |xs: &[f64]| {
        if xs.is_empty() {
            0.0
        } else {
            crate::engine::round6(xs.iter().sum::<f64>() / xs.len() as f64)
        }
    };
    Ok(FarmFigures {
        multi_path,
        long_mean_wait_s: mean(&long_waits),
        long_started: long_waits.len(),
        filler_mean_wait_s: mean(&filler_waits),
        emu_utilization: output.stats.emu_utilization,
        makespan_s: output.stats.makespan_s,
        multi_path_dispatches: dispatches,
    })
}
