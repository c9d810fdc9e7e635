//! Hold, release and requeue (Slurm's `scontrol hold|release|requeue`),
//! signals to a running job (`scancel --signal`),
//! and the way back to the queue that a requeue, or a NODE_FAIL of a job
//! that allows requeueing, takes. Automatic requeues are bounded: past
//! [`AUTO_REQUEUES_MAX`] the job is held with a reason instead.

use berth_scheduler::{JobId, JobState};

use super::{Dirty, SignalRequest, SmState, SIGNALS_PER_JOB_MAX};
use crate::command::{JobAction, Response};

/// Automatic requeues (after NODE_FAIL) a job may take; the next one holds
/// it (`JobHeldAdmin`) so a job that kills its hosts does not cycle forever.
pub const AUTO_REQUEUES_MAX: u32 = 5;

impl SmState {
    pub(super) fn control(
        &mut self,
        job_id: JobId,
        action: JobAction,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        let Some(record) = self.data.jobs.get_mut(&job_id) else {
            return Response::Rejected {
                reason: format!("job {job_id} does not exist"),
            };
        };
        let state = record.job.state;
        let refuse = |what: &str| Response::Rejected {
            reason: format!(
                "job {job_id} is {}: {what}",
                state.slurm_name().to_ascii_lowercase()
            ),
        };
        match action {
            JobAction::Hold | JobAction::HoldAdmin => {
                if state != JobState::Pending {
                    return refuse("only a pending job can be held (requeue it with hold)");
                }
                if action == JobAction::HoldAdmin {
                    record.job.admin_hold = true;
                    record.push_event(now_ms, "held", "Held by an administrator".into());
                } else {
                    record.job.spec.hold = true;
                    record.push_event(now_ms, "held", "Held by its user".into());
                }
            }
            JobAction::Release { admin } => {
                if state != JobState::Pending || !record.job.held() {
                    return refuse("it is not held");
                }
                if record.job.admin_hold && !admin {
                    return Response::Rejected {
                        reason: format!(
                            "job {job_id} is held by an administrator; only an administrator can release it"
                        ),
                    };
                }
                record.job.admin_hold = false;
                record.job.spec.hold = false;
                // Slurm's way back to multifactor after `Priority=N`:
                // hold, then release.
                let text = if record.job.admin_priority > 0 {
                    record.job.admin_priority = 0;
                    "Released; its priority is multifactor again"
                } else {
                    "Released"
                };
                record.push_event(now_ms, "released", text.into());
            }
            JobAction::Requeue { hold } => match state {
                JobState::Pending => return refuse("it is already queued"),
                JobState::Running => {
                    if record.job.cancel_requested {
                        return refuse("it is being cancelled");
                    }
                    if !record.job.requeue_requested {
                        record.job.requeue_requested = true;
                        record.job.spec.hold |= hold;
                        record.push_event(
                            now_ms,
                            "requeue-requested",
                            "Requeue requested; stopping".into(),
                        );
                    }
                }
                _ => {
                    record.job.spec.hold |= hold;
                    self.back_to_queue(job_id, "requeued", false, true, now_ms, dirty);
                    return Response::JobControlled;
                }
            },
            JobAction::Signal { signal, batch_only } => {
                if !berth_scheduler::signal::signal_known(signal) {
                    return Response::Rejected {
                        reason: format!("signal {signal} is not a signal: expected 1 to 31"),
                    };
                }
                // Slurm refuses to signal a job that has no processes yet.
                let Some(alloc_id) = record.job.alloc.as_ref().map(|a| a.alloc_id) else {
                    return refuse("only a running job can be signalled");
                };
                if state != JobState::Running {
                    return refuse("only a running job can be signalled");
                }
                record.signals_total += 1;
                if record.signals.len() >= SIGNALS_PER_JOB_MAX {
                    record.signals.remove(0);
                }
                record.signals.push(SignalRequest {
                    seq: record.signals_total,
                    alloc_id,
                    signal,
                    batch_only,
                });
                let to = if batch_only {
                    "its batch shell"
                } else {
                    "all its processes"
                };
                record.push_event(
                    now_ms,
                    "signal",
                    format!(
                        "Signal SIG{} requested for {to}",
                        berth_scheduler::signal::signal_name(signal)
                    ),
                );
            }
        }
        dirty.jobs.insert(job_id);
        Response::JobControlled
    }

    /// Puts a started or finished job back in the queue with the same id.
    /// `automatic` requeues count against [`AUTO_REQUEUES_MAX`];
    /// `spend_restart` is false for an eviction (preemption, reclaim),
    /// which spends none of the job's restart budget.
    pub(super) fn back_to_queue(
        &mut self,
        job_id: JobId,
        why: &str,
        automatic: bool,
        spend_restart: bool,
        now_ms: u64,
        dirty: &mut Dirty,
    ) {
        if self.running.contains(&job_id) {
            self.release_allocation(job_id, now_ms, dirty);
        }
        let Some(record) = self.data.jobs.get_mut(&job_id) else {
            return;
        };
        record.job.state = JobState::Pending;
        record.job.alloc = None;
        record.job.end_ms = 0;
        record.job.exit_code = 0;
        record.job.exit_signal = 0;
        record.job.requeue_requested = false;
        record.job.time_limit_reached = false;
        record.job.evicted = None;
        record.job.borrowed = false;
        if spend_restart {
            record.job.restarts = record.job.restarts.saturating_add(1);
        }
        record.push_event(now_ms, "requeued", format!("Requeued ({why})"));
        if automatic && record.job.restarts > AUTO_REQUEUES_MAX {
            record.job.admin_hold = true;
            record.push_event(
                now_ms,
                "held",
                format!(
                    "Held after {} automatic requeues (the bound is {AUTO_REQUEUES_MAX}); release it to run again",
                    record.job.restarts
                ),
            );
        }
        self.pending.insert(job_id);
        dirty.jobs.insert(job_id);
    }
}
