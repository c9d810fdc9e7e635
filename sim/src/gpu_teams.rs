//! A seeded GPU cluster shared by teams with node quotas, for measuring
//! idle-fill: some teams submit about twice their quota, the others about
//! half of it, so with quotas alone hosts sit idle while work waits on
//! `QOSGrpNodeLimit`. [`gpu_teams_input`] builds the simulator input;
//! [`wait_by_class`] reads a run's event lines back into per-job waits.

use std::collections::BTreeMap;

use berth_scheduler::assoc::Account;
use berth_scheduler::idlefill::IdleFill;
use berth_scheduler::model::{Host, Inventory, JobSpec, Resources};
use berth_scheduler::pass::{Policy, Shape, Snapshot};
use berth_scheduler::qos::Qos;

use crate::bench::SplitMix64;
use crate::engine::submit_spec::set_shape;
use crate::engine::{SimInput, SimJob};

/// The cluster and workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuTeams {
    pub hosts: usize,
    pub teams: usize,
    /// Teams `0..heavy_teams` submit about twice their quota.
    pub heavy_teams: usize,
    /// Each team's QOS `GrpTRES node`.
    pub node_cap: u64,
    /// Submissions spread over this long.
    pub span_s: u64,
    pub seed: u64,
}

impl Default for GpuTeams {
    /// 64 hosts of 8 GPUs, 8 teams of 8 nodes each (the quotas add up to
    /// the cluster), 3 heavy teams, a week of submissions.
    fn default() -> Self {
        GpuTeams {
            hosts: 64,
            teams: 8,
            heavy_teams: 3,
            node_cap: 8,
            span_s: 7 * 86_400,
            seed: 7,
        }
    }
}

/// Most jobs one input holds (the bound on the generator's loop).
pub const GPU_TEAMS_JOBS_MAX: usize = 100_000;

/// Nodes a job asks, drawn uniformly: mean 11/6.
const NODE_CHOICES: [u32; 6] = [1, 1, 1, 2, 2, 4];

/// The simulator input for `cfg` with `idle_fill` as the policy's
/// idle-fill settings. Job names are `t<team>-<n>`; heavy teams' jobs are
/// the same in every run of one seed, whatever `idle_fill` says.
pub fn gpu_teams_input(cfg: &GpuTeams, idle_fill: IdleFill) -> SimInput {
    let mut rng = SplitMix64::new(cfg.seed);
    let hosts: Vec<Host> = (0..cfg.hosts)
        .map(|i| {
            let mut inv = Inventory::cpu_mem(64, 512_000);
            inv.gpus = 8;
            Host::new(format!("g{i:03}"), inv)
        })
        .collect();
    let mut qos = vec![Qos::default()];
    let mut accounts = Vec::new();
    for t in 0..cfg.teams {
        let mut q = Qos::named(format!("team{t}"));
        q.limits.grp_tres.node = Some(cfg.node_cap);
        qos.push(q);
        accounts.push(Account {
            name: format!("acct{t}"),
            users: vec![format!("user{t}")],
            qos: vec![format!("team{t}")],
            ..Account::default()
        });
    }
    // Mean node-seconds of a job: 11/6 nodes x (mean limit 4.5 h x mean
    // runtime share 0.65).
    let mean_node_s = 11.0 / 6.0 * 4.5 * 3600.0 * 0.65;
    let mut jobs: Vec<SimJob> = Vec::new();
    for t in 0..cfg.teams {
        // Demand in nodes held on average: twice or half the quota.
        let demand = if t < cfg.heavy_teams {
            2.0 * cfg.node_cap as f64
        } else {
            0.5 * cfg.node_cap as f64
        };
        let count = (demand * cfg.span_s as f64 / mean_node_s).round() as usize;
        for n in 0..count {
            if jobs.len() == GPU_TEAMS_JOBS_MAX {
                break;
            }
            let nodes = NODE_CHOICES[rng.below(NODE_CHOICES.len() as u64) as usize];
            // 1 h to 8 h in half hours; runs 30-100 % of its limit.
            let limit_s = 1800 * (2 + rng.below(15));
            let runtime_s = limit_s * (30 + rng.below(71)) / 100;
            let mut spec = JobSpec {
                time_limit_s: limit_s,
                user: format!("user{t}"),
                name: format!("t{t}-{n}"),
                ..JobSpec::default()
            };
            let shape = Shape {
                nodes,
                per_host: Resources {
                    gpus: 8,
                    ..Resources::cpu_mem(64, 0)
                },
                exclusive: true,
                ..Shape::default()
            };
            set_shape(&mut spec, &shape);
            jobs.push(SimJob {
                runtime_s: Some(runtime_s),
                ..SimJob::new(format!("t{t}-{n}"), rng.below(cfg.span_s), spec)
            });
        }
    }
    jobs.sort_by_key(|j| j.submit_s);
    SimInput {
        hosts,
        jobs,
        events: Vec::new(),
        policy: Policy {
            idle_fill,
            ..Policy::default()
        },
        world: Snapshot {
            qos,
            accounts,
            ..Snapshot::default()
        },
        until_s: None,
        emit_events: true,
        stop_grace_s: crate::scenario::STOP_GRACE_S_DEFAULT,
    }
}

/// Waits read back from a run's event lines: for each job, its submit
/// time, its first start and whether that start was borrowed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobWaits {
    /// By job name: (submit, first start, first start borrowed).
    pub jobs: BTreeMap<String, (u64, Option<(u64, bool)>)>,
}

/// Reads `lines` (the simulator's JSON lines) into [`JobWaits`]. Lines it
/// cannot read are skipped: they are the simulator's own output.
pub fn wait_by_class(lines: &str) -> JobWaits {
    let mut waits = JobWaits::default();
    for line in lines.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(event), Some(job), Some(t)) = (
            v.get("event").and_then(|e| e.as_str()),
            v.get("job").and_then(|j| j.as_str()),
            v.get("t_s").and_then(|t| t.as_u64()),
        ) else {
            continue;
        };
        match event {
            "submit" => {
                waits.jobs.insert(job.to_string(), (t, None));
            }
            "start" => {
                let borrowed = v.get("borrowed").and_then(|b| b.as_bool()) == Some(true);
                if let Some(entry) = waits.jobs.get_mut(job) {
                    entry.1.get_or_insert((t, borrowed));
                }
            }
            _ => {}
        }
    }
    waits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_workload_whatever_the_policy() {
        let cfg = GpuTeams {
            span_s: 86_400,
            ..GpuTeams::default()
        };
        let off = gpu_teams_input(&cfg, IdleFill::default());
        let on = gpu_teams_input(
            &cfg,
            IdleFill {
                enabled: true,
                ..IdleFill::default()
            },
        );
        assert_eq!(off.jobs, on.jobs);
        assert!(on.policy.idle_fill.enabled && !off.policy.idle_fill.enabled);
        // Heavy teams ask about four times the jobs of light ones.
        let of_team = |t: usize| {
            off.jobs
                .iter()
                .filter(|j| j.name.starts_with(&format!("t{t}-")))
                .count()
        };
        assert_eq!(of_team(0), 72);
        assert_eq!(of_team(7), 18);
        assert!(off.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
    }

    #[test]
    fn waits_are_read_from_submit_and_first_start() {
        let lines = concat!(
            "{\"t_s\":0,\"event\":\"submit\",\"job\":\"a\",\"job_id\":1}\n",
            "{\"t_s\":5,\"event\":\"start\",\"job\":\"a\",\"hosts\":[\"h\"],\"borrowed\":true}\n",
            "{\"t_s\":9,\"event\":\"start\",\"job\":\"a\",\"hosts\":[\"h\"],\"borrowed\":false}\n",
            "{\"t_s\":1,\"event\":\"submit\",\"job\":\"b\",\"job_id\":2}\n",
        );
        let w = wait_by_class(lines);
        assert_eq!(w.jobs.get("a"), Some(&(0, Some((5, true)))));
        assert_eq!(w.jobs.get("b"), Some(&(1, None)));
    }
}
