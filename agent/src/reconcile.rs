//! Reconcile: the pure decision of what to start, stop and forget, given the
//! set of allocations the leader wants on this host and the local table.
//!
//! This is the fence against a job running twice (architecture invariant
//! 6): anything running here that the leader does not list (unknown, or
//! superseded by a newer allocation of the same job) is stopped, and a new
//! allocation of a job is only started once every older allocation of that
//! job has finished here. An assignment older than one this agent has
//! already started for the same job (a lower alloc id: a stale set, e.g.
//! from a deposed leader) is never started.

use std::collections::{BTreeMap, HashSet};

use berth_proto::agent::{Assignment, AssignmentSet};

/// What the agent knows about one allocation it has started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalState {
    /// Launched (or launching) and not yet exited.
    Running {
        /// A stop has already been issued; do not issue it again.
        stop_requested: bool,
    },
    /// Exited (or failed to launch); kept until the leader has the exit
    /// report and no longer lists the allocation, so it is never restarted.
    Finished {
        /// The leader acknowledged the exit report (or it was dropped as
        /// stale).
        exit_acked: bool,
    },
}

/// One entry of the local table, keyed by alloc id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAlloc {
    pub job_id: u64,
    pub state: LocalState,
}

/// What to do to converge on the desired set.
#[derive(Debug, Default, PartialEq)]
pub struct Plan<'a> {
    /// Desired allocations to launch, in the order the leader listed them.
    pub start: Vec<&'a Assignment>,
    /// Alloc ids of running allocations to stop, ascending.
    pub stop: Vec<u64>,
    /// Alloc ids of finished, acknowledged, undesired entries to drop from
    /// the table, ascending.
    pub forget: Vec<u64>,
    /// Desired alloc ids not started yet because another allocation of the
    /// same job still runs here; they start on a later pass.
    pub deferred: Vec<u64>,
    /// Desired alloc ids never to start: this agent has started a newer
    /// allocation of the same job.
    pub stale: Vec<u64>,
    /// Allocations whose stop is committed and that this agent has no
    /// record of ever starting: it never received them, so it reports
    /// them ended without starting them (nothing else would end them).
    pub unstarted: Vec<&'a Assignment>,
}

/// Decides what to start, stop and forget, with no record of earlier
/// allocations beyond the local table.
pub fn reconcile<'a>(desired: &'a AssignmentSet, local: &BTreeMap<u64, LocalAlloc>) -> Plan<'a> {
    reconcile_fenced(desired, local, &BTreeMap::new())
}

/// Decides what to start, stop and forget. `newest` maps a job id to the
/// highest alloc id this agent has started for it (kept beyond the local
/// table). Pure: the caller applies it.
pub fn reconcile_fenced<'a>(
    desired: &'a AssignmentSet,
    local: &BTreeMap<u64, LocalAlloc>,
    newest: &BTreeMap<u64, u64>,
) -> Plan<'a> {
    let desired_ids: HashSet<u64> = desired.assignments.iter().map(|a| a.alloc_id).collect();
    let mut plan = Plan::default();

    for (&alloc_id, entry) in local {
        if desired_ids.contains(&alloc_id) {
            continue;
        }
        match entry.state {
            LocalState::Running {
                stop_requested: false,
            } => plan.stop.push(alloc_id),
            LocalState::Running {
                stop_requested: true,
            } => {}
            LocalState::Finished { exit_acked: true } => plan.forget.push(alloc_id),
            LocalState::Finished { exit_acked: false } => {}
        }
    }

    // Jobs with a process here now; a new allocation of one of them waits.
    let mut busy_jobs: HashSet<u64> = local
        .values()
        .filter(|e| matches!(e.state, LocalState::Running { .. }))
        .map(|e| e.job_id)
        .collect();
    let mut seen_allocs: HashSet<u64> = HashSet::new();
    for a in &desired.assignments {
        // A duplicate alloc id in one set is started once.
        if !seen_allocs.insert(a.alloc_id) {
            continue;
        }
        // Known locally, running or finished: never (re)start it.
        if local.contains_key(&a.alloc_id) {
            continue;
        }
        let newer_here = newest.get(&a.job_id).is_some_and(|&n| n > a.alloc_id)
            || local
                .iter()
                .any(|(&id, e)| e.job_id == a.job_id && id > a.alloc_id);
        if newer_here {
            plan.stale.push(a.alloc_id);
            continue;
        }
        if busy_jobs.contains(&a.job_id) {
            plan.deferred.push(a.alloc_id);
            continue;
        }
        busy_jobs.insert(a.job_id);
        plan.start.push(a);
    }
    for a in &desired.stopping {
        let started_here = local.contains_key(&a.alloc_id)
            || newest.get(&a.job_id).is_some_and(|&n| n >= a.alloc_id);
        if !started_here {
            plan.unstarted.push(a);
        }
    }
    plan
}

/// Drops assignment sets that arrive out of order within one stream: the
/// leader promises `applied_index` increases, so a lower one is stale. A new
/// stream (e.g. after a failover) starts a new fence.
#[derive(Debug, Default, Clone)]
pub struct IndexFence {
    last: Option<u64>,
}

impl IndexFence {
    /// True if a set read at `applied_index` should be used.
    pub fn accept(&mut self, applied_index: u64) -> bool {
        match self.last {
            Some(last) if applied_index < last => false,
            _ => {
                self.last = Some(applied_index);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(job_id: u64, alloc_id: u64) -> Assignment {
        Assignment {
            job_id,
            alloc_id,
            ..Default::default()
        }
    }

    fn set(allocs: &[(u64, u64)]) -> AssignmentSet {
        AssignmentSet {
            leader_now_ms: 0,
            applied_index: 1,
            assignments: allocs.iter().map(|&(j, a)| assignment(j, a)).collect(),
            stopping: Vec::new(),
            members: Vec::new(),
        }
    }

    fn running(job_id: u64) -> LocalAlloc {
        LocalAlloc {
            job_id,
            state: LocalState::Running {
                stop_requested: false,
            },
        }
    }

    fn stopping(job_id: u64) -> LocalAlloc {
        LocalAlloc {
            job_id,
            state: LocalState::Running {
                stop_requested: true,
            },
        }
    }

    fn finished(job_id: u64, exit_acked: bool) -> LocalAlloc {
        LocalAlloc {
            job_id,
            state: LocalState::Finished { exit_acked },
        }
    }

    fn started(plan: &Plan) -> Vec<u64> {
        plan.start.iter().map(|a| a.alloc_id).collect()
    }

    #[test]
    fn empty_everything_does_nothing() {
        let desired = set(&[]);
        let plan = reconcile(&desired, &BTreeMap::new());
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn starts_unknown_desired_in_order() {
        let desired = set(&[(3, 30), (1, 10), (2, 20)]);
        let plan = reconcile(&desired, &BTreeMap::new());
        assert_eq!(started(&plan), vec![30, 10, 20]);
        assert!(plan.stop.is_empty() && plan.forget.is_empty());
    }

    #[test]
    fn running_desired_is_left_alone() {
        let local = BTreeMap::from([(10, running(1))]);
        let desired = set(&[(1, 10)]);
        let plan = reconcile(&desired, &local);
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn finished_desired_is_never_restarted() {
        for acked in [false, true] {
            let local = BTreeMap::from([(10, finished(1, acked))]);
            let desired = set(&[(1, 10)]);
            let plan = reconcile(&desired, &local);
            assert_eq!(plan, Plan::default(), "acked={acked}");
        }
    }

    #[test]
    fn unknown_running_is_stopped() {
        let local = BTreeMap::from([(10, running(1)), (11, running(2))]);
        let desired = set(&[(2, 11)]);
        let plan = reconcile(&desired, &local);
        assert_eq!(plan.stop, vec![10]);
        assert!(plan.start.is_empty());
    }

    #[test]
    fn empty_desired_stops_everything_running() {
        let local = BTreeMap::from([(12, running(3)), (10, running(1)), (11, running(2))]);
        let desired = set(&[]);
        let plan = reconcile(&desired, &local);
        assert_eq!(plan.stop, vec![10, 11, 12]);
    }

    #[test]
    fn stop_is_issued_once() {
        let local = BTreeMap::from([(10, stopping(1))]);
        let desired = set(&[]);
        let plan = reconcile(&desired, &local);
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn superseded_alloc_is_stopped_and_new_one_waits() {
        // Job 1 was requeued: alloc 10 is superseded by alloc 11.
        let local = BTreeMap::from([(10, running(1))]);
        let desired = set(&[(1, 11)]);
        let plan = reconcile(&desired, &local);
        assert_eq!(plan.stop, vec![10]);
        assert!(plan.start.is_empty());
        assert_eq!(plan.deferred, vec![11]);

        // While the old one is being stopped, still wait.
        let local = BTreeMap::from([(10, stopping(1))]);
        let plan = reconcile(&desired, &local);
        assert!(plan.stop.is_empty());
        assert_eq!(plan.deferred, vec![11]);

        // Once it has exited, the new allocation starts.
        let local = BTreeMap::from([(10, finished(1, false))]);
        let plan = reconcile(&desired, &local);
        assert_eq!(started(&plan), vec![11]);
        assert!(plan.deferred.is_empty());
    }

    #[test]
    fn finished_acked_undesired_is_forgotten() {
        let local = BTreeMap::from([(10, finished(1, true)), (11, finished(2, false))]);
        let desired = set(&[]);
        let plan = reconcile(&desired, &local);
        assert_eq!(plan.forget, vec![10]);
        assert!(plan.stop.is_empty() && plan.start.is_empty());
    }

    #[test]
    fn duplicate_alloc_in_set_starts_once() {
        let desired = set(&[(1, 10), (1, 10)]);
        let plan = reconcile(&desired, &BTreeMap::new());
        assert_eq!(started(&plan), vec![10]);
    }

    #[test]
    fn two_allocs_of_one_job_start_one() {
        let desired = set(&[(1, 10), (1, 11)]);
        let plan = reconcile(&desired, &BTreeMap::new());
        assert_eq!(started(&plan), vec![10]);
        assert_eq!(plan.deferred, vec![11]);
    }

    #[test]
    fn mixed_pass() {
        let local = BTreeMap::from([
            (1, running(1)),         // desired: keep
            (2, running(2)),         // undesired: stop
            (3, stopping(3)),        // undesired, already stopping
            (4, finished(4, true)),  // undesired, acked: forget
            (5, finished(5, false)), // undesired, unacked: keep
            (6, finished(6, true)),  // desired: keep, never restart
        ]);
        let desired = set(&[(1, 1), (6, 6), (7, 7)]);
        let plan = reconcile(&desired, &local);
        assert_eq!(started(&plan), vec![7]);
        assert_eq!(plan.stop, vec![2]);
        assert_eq!(plan.forget, vec![4]);
        assert!(plan.deferred.is_empty());
    }

    #[test]
    fn stale_assignment_of_a_job_is_never_started() {
        // Alloc 11 of job 1 ran here (now finished and forgotten); a stale
        // set still listing alloc 10 of job 1 must not start it.
        let newest = BTreeMap::from([(1, 11)]);
        let desired = set(&[(1, 10), (2, 20)]);
        let plan = reconcile_fenced(&desired, &BTreeMap::new(), &newest);
        assert_eq!(started(&plan), vec![20]);
        assert_eq!(plan.stale, vec![10]);

        // Also while the newer one is in the table, running or finished.
        for entry in [running(1), finished(1, false), finished(1, true)] {
            let local = BTreeMap::from([(11, entry)]);
            let desired = set(&[(1, 10), (1, 11)]);
            let plan = reconcile(&desired, &local);
            assert!(plan.start.is_empty(), "{entry:?}");
            assert_eq!(plan.stale, vec![10], "{entry:?}");
            assert!(plan.deferred.is_empty(), "{entry:?}");
        }

        // A newer allocation than any seen starts as usual.
        let desired = set(&[(1, 12)]);
        let plan = reconcile_fenced(&desired, &BTreeMap::new(), &newest);
        assert_eq!(started(&plan), vec![12]);
    }

    #[test]
    fn fence_drops_lower_index() {
        let mut f = IndexFence::default();
        assert!(f.accept(5));
        assert!(f.accept(5), "an equal index is a repeat, harmless");
        assert!(f.accept(9));
        assert!(!f.accept(8));
        assert!(f.accept(10));
        // A new stream starts over.
        let mut f = IndexFence::default();
        assert!(f.accept(1));
    }

    #[test]
    fn a_stopping_allocation_never_received_is_reported_unstarted() {
        let mut desired = set(&[(1, 10)]);
        desired.stopping = vec![assignment(2, 20), assignment(3, 30), assignment(4, 40)];
        let mut local = BTreeMap::new();
        local.insert(10, running(1));
        // Job 3's allocation 30 runs here: an ordinary stop, not unstarted.
        local.insert(30, running(3));
        // Job 4's allocation 40 was started here and already forgotten.
        let newest = BTreeMap::from([(4, 40)]);
        let plan = reconcile_fenced(&desired, &local, &newest);
        let unstarted: Vec<u64> = plan.unstarted.iter().map(|a| a.alloc_id).collect();
        assert_eq!(unstarted, vec![20]);
        assert_eq!(plan.stop, vec![30]);
        assert!(plan.start.is_empty());
    }
}
