//! What a leader does around each scheduling pass, beside the state:
//! the pass's soft memory between passes (when each job first held a
//! multi-path reservation), the plan turned into the one `ApplyPlan` it
//! proposes, and which running jobs to stop for their time limit. The
//! live leader (`berth-node`) and the simulator (`berth-sim`) both drive
//! passes through this module, so the two cannot drift.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_scheduler::{schedule, JobId, PendingJob, Plan, Policy, Snapshot};

use crate::Command;

/// Jobs marked per pass at most for running past their time limit; the
/// rest are found on the next pass.
pub const TIME_LIMIT_STOPS_PER_PASS_MAX: usize = 1_000;

/// A pending job's multi-path reservation as the leader remembers it
/// between passes (soft state: a new leader starts afresh).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MultipathHeld {
    /// When it first held one (ms since the epoch).
    pub since_ms: u64,
    /// The alternatives it held after the last pass; empty once it fell
    /// back to a single-path reservation.
    pub paths: Vec<usize>,
}

/// The leader's memory from one pass to the next. Bounded by the queue:
/// jobs no longer pending are forgotten at the next pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassMemory {
    multipath: BTreeMap<JobId, MultipathHeld>,
}

impl PassMemory {
    /// Runs the pass over `snapshot` at `pass_ms`, with what earlier passes
    /// left for its pending jobs, and remembers what this one held.
    pub fn schedule(&mut self, mut snapshot: Snapshot, policy: &Policy, pass_ms: u64) -> Plan {
        self.carry(&mut snapshot.pending);
        let plan = schedule(&snapshot, policy, pass_ms);
        self.note(&plan, pass_ms);
        plan
    }

    /// Hands each pending job the time it first held a multi-path
    /// reservation and the alternatives it held after the last pass, and
    /// forgets jobs no longer pending.
    fn carry(&mut self, pending: &mut [Arc<PendingJob>]) {
        if self.multipath.is_empty() {
            return;
        }
        let mut kept = BTreeMap::new();
        for job in pending.iter_mut() {
            if let Some(held) = self.multipath.remove(&job.id) {
                // Copies the view of only the few jobs that hold reservations.
                let job = Arc::make_mut(job);
                job.multipath_since_ms = Some(held.since_ms);
                job.multipath_held = held.paths.clone();
                kept.insert(job.id, held);
            }
        }
        self.multipath = kept;
    }

    /// Records when each job the plan gave a multi-path reservation first
    /// got one (not reset while the job waits, so `max_reserve_time_s`
    /// counts from the first) and what every remembered job holds now.
    fn note(&mut self, plan: &Plan, pass_ms: u64) {
        for held in self.multipath.values_mut() {
            held.paths.clear();
        }
        for made in &plan.multipath {
            if !made.paths.is_empty() {
                let held = self.multipath.entry(made.job_id).or_insert(MultipathHeld {
                    since_ms: pass_ms,
                    paths: Vec::new(),
                });
                held.paths = made.paths.iter().map(|p| p.path).collect();
            }
        }
    }
}

/// The entry a leader proposes for `plan`, computed from the state at
/// `snapshot_index`: its starts and evictions as one `ApplyPlan`, which
/// `apply` re-checks; `None` when the plan changes nothing.
pub fn apply_plan_command(plan: &Plan, snapshot_index: u64, now_ms: u64) -> Option<Command> {
    if plan.starts.is_empty() && plan.gang_starts.is_empty() && plan.evictions.is_empty() {
        return None;
    }
    Some(Command::ApplyPlan {
        snapshot_index,
        now_ms,
        starts: plan.starts.clone(),
        gang_starts: plan.gang_starts.clone(),
        evictions: plan.evictions.clone(),
        borrowed: plan.borrowed.clone(),
    })
}

/// The `TimeLimitReached` a leader proposes at `now_ms` for running jobs
/// past their limit (at most [`TIME_LIMIT_STOPS_PER_PASS_MAX`]); `None`
/// when there are none.
pub fn time_limit_command(state: &crate::SmState, now_ms: u64) -> Option<Command> {
    let allocations = state.time_limits_expired(now_ms, TIME_LIMIT_STOPS_PER_PASS_MAX);
    (!allocations.is_empty()).then_some(Command::TimeLimitReached {
        allocations,
        now_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_scheduler::multipath::{MultiPathReservation, PathReservation};

    #[test]
    fn multipath_since_is_kept_from_the_first_pass_and_pruned() {
        let held = |job_id| MultiPathReservation {
            job_id,
            paths: vec![PathReservation {
                path: 0,
                start_ms: 0,
                hosts: vec![0],
            }],
        };
        let mut memory = PassMemory::default();
        let plan = Plan {
            multipath: vec![held(1)],
            ..Plan::default()
        };
        memory.note(&plan, 1_000);
        // A later pass keeps the first time.
        memory.note(&plan, 5_000);
        let mut pending = PendingJob::queue([
            PendingJob {
                id: 1,
                ..PendingJob::default()
            },
            PendingJob {
                id: 2,
                ..PendingJob::default()
            },
        ]);
        memory.carry(&mut pending);
        assert_eq!(pending[0].multipath_since_ms, Some(1_000));
        assert_eq!(pending[0].multipath_held, [0]);
        assert_eq!(pending[1].multipath_since_ms, None);
        // A pass without its multi-path reservation (it fell back to one
        // path): the time stays, the held alternatives go.
        memory.note(&Plan::default(), 9_000);
        memory.carry(&mut pending);
        assert_eq!(pending[0].multipath_since_ms, Some(1_000));
        assert!(pending[0].multipath_held.is_empty());
        // Job 1 started (no longer pending): forgotten.
        memory.carry(&mut pending[1..]);
        assert_eq!(memory, PassMemory::default());
    }

    #[test]
    fn an_empty_plan_proposes_nothing() {
        assert_eq!(apply_plan_command(&Plan::default(), 7, 1_000), None);
    }
}
