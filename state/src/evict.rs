//! Evictions in `apply`: a pass's `Plan.evictions` (preemption and
//! idle-fill reclaim) carried out by the state machine. Each is re-checked
//! where it lands (invariant 3): the victim must still run under the
//! allocation the pass saw and not be stopping already, and the job it is
//! evicted for must still be pending; otherwise it is dropped. An accepted
//! eviction marks the victim (`Job::evicted`): it leaves its host's
//! assignment set, so its agent stops it (SIGTERM, the stop grace — the
//! QOS GraceTime —, SIGKILL), and its exit report requeues it (spending no
//! restart budget) or ends it PREEMPTED.

use berth_scheduler::{EvictCause, EvictMark, Eviction, JobId, JobState};

use super::{Dirty, SmState};

/// How long after its victims left a job keeps the first claim on their
/// room (`PendingJob::room_freed`) when no pass has started it yet: a few
/// passes. Read against the time stamped in the plan, never a clock.
pub const ROOM_FREED_HOLD_MS: u64 = 10_000;

impl SmState {
    /// Applies a plan's evictions; returns how many passed the re-check.
    pub(super) fn apply_evictions(
        &mut self,
        evictions: &[Eviction],
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> u32 {
        let mut evicted = 0u32;
        for e in evictions {
            if !self.eviction_valid(e) {
                tracing::debug!(
                    victim = e.job,
                    for_job = e.for_job,
                    "stale eviction dropped"
                );
                continue;
            }
            let mark = EvictMark {
                for_job: e.for_job,
                cause: e.cause,
                requeue: e.requeue,
                at_ms: now_ms,
                grace_s: e.grace_s,
            };
            let Some(victim) = self.data.jobs.get_mut(&e.job) else {
                continue;
            };
            let host = victim
                .job
                .alloc
                .as_ref()
                .map(|a| a.hosts().collect::<Vec<_>>().join(","))
                .unwrap_or_default();
            let text = match e.cause {
                EvictCause::Preempt => format!(
                    "Preempted by job {} ({}); stopping on {host}",
                    e.for_job,
                    mark.mode_word()
                ),
                EvictCause::Reclaim => format!(
                    "Reclaimed by job {} (idle-fill loan taken back, PreemptMode=Requeue); stopping on {host}",
                    e.for_job
                ),
            };
            victim.push_event(now_ms, "preempted", text);
            victim.job.evicted = Some(mark.clone());
            dirty.jobs.insert(e.job);
            if let Some(claimant) = self.data.jobs.get_mut(&e.for_job) {
                let text = match e.cause {
                    EvictCause::Preempt => format!(
                        "Preempting job {} on {host} ({}); its room goes to this job",
                        e.job,
                        mark.mode_word()
                    ),
                    EvictCause::Reclaim => format!(
                        "Reclaiming job {} on {host} (idle-fill); its room goes to this job",
                        e.job
                    ),
                };
                claimant.push_event(now_ms, "preempting", text);
                dirty.jobs.insert(e.for_job);
            }
            evicted += 1;
        }
        evicted
    }

    /// The re-check of one eviction against the state it lands on.
    fn eviction_valid(&self, e: &Eviction) -> bool {
        if e.job == e.for_job {
            return false;
        }
        let Some(victim) = self.data.jobs.get(&e.job) else {
            return false;
        };
        let runs_that_alloc = victim.job.state == JobState::Running
            && victim
                .job
                .alloc
                .as_ref()
                .is_some_and(|a| a.alloc_id == e.alloc_id);
        let claimant_waits = self
            .data
            .jobs
            .get(&e.for_job)
            .is_some_and(|r| r.job.state == JobState::Pending);
        runs_that_alloc && !victim.job.stopping() && claimant_waits
    }

    /// The exit of an evicted job: back to the queue under its own id
    /// (no restart spent) or PREEMPTED for good; the job it was evicted
    /// for gets the first claim on the room.
    pub(super) fn evicted_exit(
        &mut self,
        job_id: JobId,
        mark: &EvictMark,
        host: &str,
        now_ms: u64,
        dirty: &mut Dirty,
    ) {
        let Some(record) = self.data.jobs.get_mut(&job_id) else {
            return;
        };
        let by = mark.for_job;
        let what = match mark.cause {
            EvictCause::Preempt => "Preempted",
            EvictCause::Reclaim => "Reclaimed (idle-fill)",
        };
        if mark.cause == EvictCause::Reclaim {
            record.job.reclaims = record.job.reclaims.saturating_add(1);
        }
        let cancel = record.job.cancel_requested;
        if mark.requeue && !cancel {
            record.push_event(
                now_ms,
                "preempted",
                format!(
                    "PREEMPTED on {host}: {what} by job {by} ({}); queued again",
                    mark.mode_word()
                ),
            );
            let why = format!("{what} by job {by} ({})", mark.mode_word());
            self.back_to_queue(job_id, &why, false, false, now_ms, dirty);
            if let Some(record) = self.data.jobs.get_mut(&job_id) {
                record.job.requeued_for = by;
            }
        } else {
            let state = if cancel {
                JobState::Cancelled
            } else {
                JobState::Preempted
            };
            record.job.state = state;
            record.job.end_ms = now_ms;
            record.push_event(
                now_ms,
                "ended",
                format!(
                    "{} on {host}: {what} by job {by} ({})",
                    state.slurm_name(),
                    mark.mode_word()
                ),
            );
            self.release_allocation(job_id, now_ms, dirty);
        }
        if let Some(claimant) = self.data.jobs.get_mut(&by) {
            if claimant.job.state == JobState::Pending {
                claimant.job.room_freed_ms = now_ms.max(1);
                self.room_claims.insert(by);
                claimant.push_event(
                    now_ms,
                    "room-freed",
                    format!("Job {job_id} left {host}; its room is this job's first"),
                );
                dirty.jobs.insert(by);
            }
        }
    }

    /// Jobs that victims are being stopped for: the pass takes them ahead
    /// of the queue order (`PendingJob::room_freed`).
    pub(super) fn evicted_for(&self) -> std::collections::BTreeSet<JobId> {
        self.running
            .iter()
            .filter_map(|id| self.data.jobs.get(id)?.job.evicted.as_ref())
            .map(|m| m.for_job)
            .collect()
    }

    /// Ends first claims older than [`ROOM_FREED_HOLD_MS`] at `now_ms`
    /// (a plan's stamped time): the passes since had their chance.
    pub(super) fn expire_room_claims(&mut self, now_ms: u64, dirty: &mut Dirty) {
        let stale: Vec<JobId> = self
            .room_claims
            .iter()
            .filter(|id| {
                self.data.jobs.get(id).is_none_or(|r| {
                    r.job.state != JobState::Pending
                        || now_ms >= r.job.room_freed_ms.saturating_add(ROOM_FREED_HOLD_MS)
                })
            })
            .copied()
            .collect();
        for id in stale {
            self.room_claims.remove(&id);
            if let Some(r) = self.data.jobs.get_mut(&id) {
                if r.job.room_freed_ms != 0 {
                    r.job.room_freed_ms = 0;
                    dirty.jobs.insert(id);
                }
            }
        }
    }
}
