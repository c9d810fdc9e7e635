//! One scheduling pass: `schedule(&Snapshot, &Policy, now_ms) -> Plan`.
//!
//! The foundation's policy is strict FIFO: jobs are considered in id order
//! (which is submit order), each is placed on the first host, by name, that
//! has its resources free, and the first job that cannot be placed for lack
//! of free resources blocks every job behind it (reason `Priority`). A job
//! no host could ever hold does not block the queue: it waits with
//! `ReqNodeNotAvail`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fit::fits;
use crate::model::{Host, JobId, Resources};
use crate::reason::Reason;

/// A pending job as the pass sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingJob {
    pub id: JobId,
    pub request: Resources,
    pub held: bool,
}

/// The state a pass reads: hosts (with what is allocated on them) and the
/// pending jobs in queue order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub hosts: Vec<Host>,
    pub pending: Vec<PendingJob>,
}

/// Knobs of the pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// At most this many jobs are examined per pass (Slurm's
    /// `default_queue_depth`): the bound on a pass's work.
    pub max_jobs_per_pass: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_jobs_per_pass: 10_000,
        }
    }
}

/// One job placed on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub job_id: JobId,
    pub host: String,
    pub resources: Resources,
}

/// What a pass decided: placements to propose, and why each job it looked
/// at and did not place is waiting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub starts: Vec<Placement>,
    pub reasons: BTreeMap<JobId, Reason>,
}

/// Runs one FIFO pass. `now_ms` is unused by FIFO but part of the contract:
/// later policies (age, backfill, reservations) read it, and nothing in this
/// crate reads a clock.
pub fn schedule(snapshot: &Snapshot, policy: &Policy, _now_ms: u64) -> Plan {
    let mut hosts: Vec<Host> = snapshot.hosts.clone();
    hosts.sort_by(|a, b| a.name.cmp(&b.name));
    let mut plan = Plan::default();
    let mut blocked = false;

    for job in snapshot.pending.iter().take(policy.max_jobs_per_pass) {
        if job.held {
            plan.reasons.insert(job.id, Reason::JobHeldUser);
            continue;
        }
        if blocked {
            plan.reasons.insert(job.id, Reason::Priority);
            continue;
        }
        let mut could_ever_fit = false;
        let mut placed = false;
        for host in hosts.iter_mut() {
            match fits(host, job.request) {
                Ok(()) => {
                    host.allocated = host.allocated.saturating_add(job.request);
                    plan.starts.push(Placement {
                        job_id: job.id,
                        host: host.name.clone(),
                        resources: job.request,
                    });
                    placed = true;
                    break;
                }
                Err(lacks) => {
                    could_ever_fit |= lacks.iter().all(|l| l.is_transient());
                }
            }
        }
        if placed {
            continue;
        }
        if could_ever_fit {
            plan.reasons.insert(job.id, Reason::Resources);
            blocked = true;
        } else {
            plan.reasons.insert(job.id, Reason::ReqNodeNotAvail);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HostState, Inventory};

    fn host(name: &str, cpus: u32) -> Host {
        Host {
            name: name.into(),
            inventory: Inventory {
                cpus,
                mem_mb: 1024,
            },
            state: HostState::Up,
            allocated: Resources::default(),
        }
    }

    fn job(id: JobId, cpus: u32) -> PendingJob {
        PendingJob {
            id,
            request: Resources { cpus, mem_mb: 0 },
            held: false,
        }
    }

    #[test]
    fn places_in_fifo_order_first_fit() {
        let snap = Snapshot {
            hosts: vec![host("b", 4), host("a", 2)],
            pending: vec![job(1, 2), job(2, 4), job(3, 1)],
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        let placed: Vec<(JobId, &str)> = plan
            .starts
            .iter()
            .map(|p| (p.job_id, p.host.as_str()))
            .collect();
        assert_eq!(placed, vec![(1, "a"), (2, "b")]);
        assert_eq!(plan.reasons.get(&3), Some(&Reason::Resources));
    }

    #[test]
    fn blocked_job_holds_back_the_queue() {
        let snap = Snapshot {
            hosts: vec![host("a", 2)],
            pending: vec![job(1, 2), job(2, 2), job(3, 1)],
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(plan.starts.len(), 1);
        assert_eq!(plan.reasons.get(&2), Some(&Reason::Resources));
        assert_eq!(plan.reasons.get(&3), Some(&Reason::Priority));
    }

    #[test]
    fn impossible_job_does_not_block() {
        let snap = Snapshot {
            hosts: vec![host("a", 2)],
            pending: vec![job(1, 64), job(2, 1), job(3, 1)],
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(plan.reasons.get(&1), Some(&Reason::ReqNodeNotAvail));
        assert_eq!(plan.starts.len(), 2);
    }

    #[test]
    fn held_jobs_are_skipped_and_bound_is_respected() {
        let mut held = job(1, 1);
        held.held = true;
        let snap = Snapshot {
            hosts: vec![host("a", 8)],
            pending: vec![held, job(2, 1), job(3, 1)],
        };
        let policy = Policy {
            max_jobs_per_pass: 2,
        };
        let plan = schedule(&snap, &policy, 0);
        assert_eq!(plan.reasons.get(&1), Some(&Reason::JobHeldUser));
        assert_eq!(plan.starts.len(), 1);
        assert_eq!(plan.starts[0].job_id, 2);
    }

    #[test]
    fn down_hosts_get_nothing() {
        let mut down = host("a", 8);
        down.state = HostState::Down;
        let snap = Snapshot {
            hosts: vec![down],
            pending: vec![job(1, 1)],
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert!(plan.starts.is_empty());
        assert_eq!(plan.reasons.get(&1), Some(&Reason::ReqNodeNotAvail));
    }
}
