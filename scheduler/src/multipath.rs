//! Multi-path reservations (`multi-path-reservation.txt`): a blocked job
//! at the top of the queue whose partition opts in
//! (`reserve_all_alternatives`) holds room on every one of its
//! alternatives at once, each from that alternative's own earliest start,
//! instead of on the single earliest one.
//!
//! - Only the first `reserve_all_alternatives_top_n` jobs that get a
//!   backfill reservation reserve this way (they count among
//!   `bf_reservations`), which caps the room held idle.
//! - Each alternative's room is taken in the availability profiles from its
//!   own estimated start, so backfill goes on using it until then.
//! - Each pass the job tries its alternatives in order and starts on the
//!   first with room now; the pass's reservations are made afresh each
//!   pass, so the other alternatives' room is free again in the very pass
//!   it starts (released at once). The simulator reports which alternative
//!   was chosen and which reservations were released.
//! - `max_reserve_time_s` (LSF's MAX_RESERVE_TIME): a job that has held a
//!   multi-path reservation that long without starting goes back to a
//!   single-path reservation on its earliest alternative, so it still
//!   cannot be starved, but no longer holds room on every path.
//!
//! Choices the reference leaves open, and why, are in docs/multi-path.md.

use serde::{Deserialize, Serialize};

use crate::model::JobId;
use crate::pass::{PendingJob, Plan, Policy, Reservation};

/// Room held for one alternative of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathReservation {
    /// Index into the job's alternatives.
    pub path: usize,
    pub start_ms: u64,
    /// Indexes into the snapshot's hosts, as [`Reservation::hosts`].
    pub hosts: Vec<usize>,
}

/// Every alternative a job holds room on in this pass, by path index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiPathReservation {
    pub job_id: JobId,
    pub paths: Vec<PathReservation>,
}

/// What a pass did with multi-path reservations (metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MultiPathCounters {
    /// Jobs holding room on several alternatives.
    pub jobs_reserved: u64,
    /// Alternatives held, over those jobs.
    pub paths_reserved: u64,
    /// Jobs past `max_reserve_time_s`, back on a single path.
    pub expired: u64,
}

impl MultiPathCounters {
    pub fn is_zero(&self) -> bool {
        *self == MultiPathCounters::default()
    }
}

/// Whether `job`, about to get a backfill reservation, reserves on every
/// alternative: it has several, fewer than `top_n` jobs did so before it
/// in this pass, and it is not past `max_reserve_time_s`. Counts an
/// expired job.
pub(crate) fn wanted(
    job: &PendingJob,
    policy: &Policy,
    made: usize,
    now_ms: u64,
    plan: &mut Plan,
) -> bool {
    if job.alternatives.len() < 2 || made >= policy.reserve_all_alternatives_top_n {
        return false;
    }
    let max_ms = policy.max_reserve_time_s.saturating_mul(1000);
    if max_ms > 0
        && job
            .multipath_since_ms
            .is_some_and(|since| now_ms.saturating_sub(since) >= max_ms)
    {
        plan.multipath_counters.expired += 1;
        return false;
    }
    true
}

/// Records a multi-path reservation made of `rooms` (path, start, hosts),
/// each of whose room the caller has taken. The job's ordinary
/// reservation (its predicted start) is its earliest alternative's.
pub(crate) fn record(job: &PendingJob, mut rooms: Vec<PathReservation>, plan: &mut Plan) {
    rooms.sort_by_key(|r| r.path);
    if let Some(first) = rooms.iter().min_by_key(|r| (r.start_ms, r.path)) {
        plan.reservations.push(Reservation {
            job_id: job.id,
            start_ms: first.start_ms,
            hosts: first.hosts.clone(),
        });
    }
    plan.multipath_counters.jobs_reserved += 1;
    plan.multipath_counters.paths_reserved += rooms.len() as u64;
    plan.multipath.push(MultiPathReservation {
        job_id: job.id,
        paths: rooms,
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::Resources;
    use crate::pass::{host_names, schedule, Shape, Snapshot};
    use crate::{Host, Inventory, Partition, RunningJob};

    /// Three one-unit emulator groups, each held by a job ending at a
    /// different time; the head may use any group.
    fn farm(multi: bool) -> Snapshot {
        let mut hosts = Vec::new();
        let mut running = Vec::new();
        for (k, end_s) in [(0u32, 300u64), (1, 100), (2, 200)] {
            let mut inv = Inventory::cpu_mem(4, 0);
            inv.emulator = Some(crate::EmulatorInventory {
                kind: "zebu".into(),
                group: format!("g{k}"),
                units: 1,
            });
            let mut h = Host::new(format!("e{k}"), inv);
            h.partitions = vec!["emu".into()];
            h.allocated = h.inventory.resources();
            running.push(RunningJob {
                id: 10 + u64::from(k),
                hosts: vec![h.name.clone()],
                per_host: h.inventory.resources(),
                end_ms: Some(end_s * 1000),
                ..RunningJob::default()
            });
            hosts.push(h);
        }
        let alt = |g: &str| Shape {
            nodes: 1,
            per_host: Resources {
                emu: 1,
                ..Resources::default()
            },
            exclusive: true,
            emu_kind: "zebu".into(),
            emu_group: g.into(),
            ..Shape::default()
        };
        Snapshot {
            hosts,
            running,
            pending: PendingJob::queue([PendingJob {
                id: 1,
                alternatives: vec![alt("g0"), alt("g1"), alt("g2")],
                time_limit_s: 1000,
                ..PendingJob::default()
            }]),
            partitions: vec![Partition {
                name: "emu".into(),
                default: true,
                reserve_all_alternatives: multi,
                ..Partition::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn the_head_holds_every_alternative_from_its_own_start() {
        let snap = farm(true);
        let plan = schedule(&snap, &Policy::default(), 0);
        let held: Vec<(usize, u64)> = plan.multipath[0]
            .paths
            .iter()
            .map(|p| (p.path, p.start_ms))
            .collect();
        assert_eq!(held, vec![(0, 300_000), (1, 100_000), (2, 200_000)]);
        assert_eq!(plan.reservations[0].start_ms, 100_000);
        assert_eq!(host_names(&snap, &plan.reservations[0].hosts), ["e1"]);
        assert_eq!(
            plan.multipath_counters,
            MultiPathCounters {
                jobs_reserved: 1,
                paths_reserved: 3,
                expired: 0
            }
        );
    }

    #[test]
    fn off_by_default_and_expired_jobs_hold_one_path() {
        let plan = schedule(&farm(false), &Policy::default(), 0);
        assert!(plan.multipath.is_empty());
        assert_eq!(plan.reservations.len(), 1);
        let mut snap = farm(true);
        Arc::make_mut(&mut snap.pending[0]).multipath_since_ms = Some(0);
        let policy = Policy {
            max_reserve_time_s: 60,
            ..Policy::default()
        };
        let plan = schedule(&snap, &policy, 59_999);
        assert_eq!(plan.multipath.len(), 1);
        let plan = schedule(&snap, &policy, 60_000);
        assert!(plan.multipath.is_empty());
        assert_eq!(plan.multipath_counters.expired, 1);
        assert_eq!(host_names(&snap, &plan.reservations[0].hosts), ["e1"]);
    }
}
