//! Carrying out a pass's evictions in the simulator: the victim keeps
//! running through its grace, is sent the stop signal, exits after its
//! `stop_takes_s` (at most the stop grace), and then goes back to the queue
//! (requeue) or ends for good (cancel). Both sides get a line: `preempt`
//! for the job the room goes to when the victim is chosen, and the
//! victim's `end` line, PREEMPTED with `requeue`, `cause` and `by`, when it
//! exits.

use std::cmp::Reverse;
use std::sync::Arc;

use serde::Serialize;

use berth_scheduler::evict::{EvictCause, Eviction};
use berth_scheduler::model::JobState;

use super::{Engine, PendingJob, SimError, Status};

/// Passes one instant may run: each round but the last evicted jobs that
/// exited at once, and a job is evicted at most once per run, so a few
/// rounds settle any instant; the bound keeps a bug from looping.
pub(super) const ROUNDS_PER_INSTANT_MAX: usize = 4;

/// An eviction in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Evicted {
    /// The job index of the job it is evicted for.
    pub by: usize,
    pub requeue: bool,
    pub cause: EvictCause,
    /// When it exits: grace, then its stop time.
    pub exit_s: u64,
}

#[derive(Serialize)]
struct PreemptLine<'a> {
    t_s: u64,
    event: &'static str,
    /// The job the room goes to.
    job: &'a str,
    victim: &'a str,
    cause: &'static str,
    requeue: bool,
    grace_s: u64,
    /// When the victim will have exited and its room be free.
    exit_s: u64,
}

impl Engine<'_> {
    /// Jobs room is being freed for: victims evicted for them are still
    /// stopping, or exited in this instant. The pass takes them first.
    pub(super) fn room_freed_for(&self) -> std::collections::BTreeSet<usize> {
        let mut out: std::collections::BTreeSet<usize> = self.claims.keys().copied().collect();
        if self.input.policy.preemption.enabled || self.input.policy.idle_fill.enabled {
            out.extend(
                self.running
                    .iter()
                    .filter_map(|&i| self.runs[i].evicted.as_ref().map(|e| e.by)),
            );
        }
        out
    }

    /// Applies `evictions`; true when some victim exited at once (its room
    /// is free now, so the pass should run again).
    pub(super) fn apply_evictions(
        &mut self,
        evictions: &[Eviction],
        t_s: u64,
    ) -> Result<bool, SimError> {
        let mut exited = false;
        for e in evictions {
            // The plan re-check: the victim still runs, under the same
            // allocation, and is not already being stopped.
            let Some(&idx) = self.running.iter().find(|&&i| {
                self.runs[i].id == e.job
                    && self.runs[i].alloc_id == e.alloc_id
                    && self.runs[i].evicted.is_none()
            }) else {
                continue;
            };
            let Ok(at) = self
                .world
                .pending
                .binary_search_by_key(&e.for_job, |p| p.id)
            else {
                return Err(SimError::Internal(format!(
                    "plan evicts for job {} that is not pending",
                    e.for_job
                )));
            };
            let by = self.pending_idx[at];
            let stop_s = self.input.jobs[idx]
                .stop_takes_s
                .min(self.input.stop_grace_s);
            let exit_s = t_s.saturating_add(e.grace_s).saturating_add(stop_s);
            self.runs[idx].evicted = Some(Evicted {
                by,
                requeue: e.requeue,
                cause: e.cause,
                exit_s,
            });
            self.line(&PreemptLine {
                t_s,
                event: "preempt",
                job: &self.input.jobs[by].name,
                victim: &self.input.jobs[idx].name,
                cause: e.cause.word(),
                requeue: e.requeue,
                grace_s: e.grace_s,
                exit_s,
            })?;
            if exit_s == t_s {
                self.evicted_exit(idx, t_s)?;
                exited = true;
                continue;
            }
            // The pass sees it leave at its exit, and that it is taken.
            if let Ok(at) = self.running_idx.binary_search(&idx) {
                let view = &mut self.world.running[at];
                let exit_ms = exit_s.saturating_mul(1000);
                view.end_ms = Some(view.end_ms.map_or(exit_ms, |end| end.min(exit_ms)));
                view.evicted_for = Some(e.for_job);
            }
            self.ends.push(Reverse((exit_s, self.runs[idx].id, idx)));
        }
        Ok(exited)
    }

    /// Evicted job `idx` exits now: PREEMPTED, then back to the queue
    /// (keeping its id and submit time, spending no restart budget) or
    /// over.
    pub(super) fn evicted_exit(&mut self, idx: usize, t_s: u64) -> Result<(), SimError> {
        let Some(evicted) = self.runs[idx].evicted.take() else {
            return Ok(());
        };
        let Status::Running { .. } = self.runs[idx].status else {
            return Ok(());
        };
        let run_s = t_s.saturating_sub(self.runs[idx].start_s.unwrap_or(t_s));
        // A reclaimed run is not charged to fair share (idle-fill); any
        // other evicted run is, up to now.
        if evicted.cause == EvictCause::Reclaim {
            let run = &mut self.runs[idx];
            run.reclaims = run.reclaims.saturating_add(1);
            run.borrowed = false;
        } else if self.runs[idx].charge_at_end {
            self.charge_run(idx, t_s);
        }
        self.runs[idx].charge_at_end = false;
        let cpu_s = u128::from(self.runs[idx].held_cpus) * u128::from(run_s);
        self.leave(idx);
        self.claims.insert(evicted.by, t_s);
        let by_name = self.input.jobs[evicted.by].name.clone();
        self.line(&super::EndLine {
            t_s,
            event: "end",
            job: &self.input.jobs[idx].name,
            state: "PREEMPTED",
            requeue: Some(evicted.requeue),
            cause: Some(evicted.cause.word()),
            by: Some(&by_name),
        })?;
        if !evicted.requeue {
            // Over for good; dependencies see it as not successful.
            self.runs[idx].end = Some((t_s, JobState::Cancelled));
            self.preempted_cancelled += 1;
            return Ok(());
        }
        self.preempted_requeued += 1;
        let job = &self.input.jobs[idx];
        let run = &mut self.runs[idx];
        run.busy_cpu_s_before += cpu_s;
        run.status = Status::Pending;
        run.pending_since_s = t_s;
        run.last_reason = None;
        run.end = None;
        run.preempted_by = Some(by_name);
        let id = run.id;
        let view = PendingJob {
            id,
            held: run.held,
            submit_ms: job.submit_s.saturating_mul(1000),
            dependency: None,
            array: run.array,
            ..job.spec.clone()
        };
        self.pending.insert((id, idx));
        // The queue view stays in id order: the job keeps its id.
        let at = self.world.pending.partition_point(|p| p.id < id);
        self.world.pending.insert(at, Arc::new(view));
        self.pending_idx.insert(at, idx);
        Ok(())
    }
}
